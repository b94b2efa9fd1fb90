//! `ferrobase restore --from URL` (and `restore_if_missing`): every database restored by
//! `litestream restore` into a temporary folder, checked, and only then moved into place.

use super::{
    DATABASES, Replica, ReplicationError, Result, command, config_text, find_litestream, io,
    last_line, probe,
};
use crate::config::ReplicationConfig;
use crate::store::backup::check_database;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// What a PocketBase `data.db` has (the backups' restore checks the same).
const PB_TABLES: [&str; 3] = ["_collections", "_params", "_migrations"];

/// What to restore and how.
pub(crate) struct Restore<'a> {
    /// `[replication]` (litestream path, endpoint, region, credentials); its `url` is not used.
    pub cfg: &'a ReplicationConfig,
    pub from: &'a str,
    /// A point in time (RFC 3339, as Litestream reads it); `None` = the latest.
    pub timestamp: Option<&'a str>,
    /// Replace databases that exist.
    pub force: bool,
    pub dir: &'a Path,
}

/// Restore the databases of `r.dir` from the replica. Refused, with nothing changed, when
/// `data.db` exists without `force`, when the replica holds no `data.db` (empty, or not a
/// replica of a data directory), or when what it holds is not a sound PocketBase database.
/// Returns the databases restored (a database never replicated, such as `plugin_kv.db` of a
/// server without plugins, is left as it is).
pub(crate) fn restore(r: &Restore<'_>) -> Result<Vec<&'static str>> {
    let data = r.dir.join(DATABASES[0]);
    if data.exists() && !r.force {
        return Err(ReplicationError::Refused(format!(
            "{} exists: restoring would replace it (add --force to replace it)",
            data.display()
        )));
    }
    let replica = Replica::parse(r.from)?;
    let bin = find_litestream(&r.cfg.litestream)?;
    std::fs::create_dir_all(r.dir).map_err(io(format!("creating {}", r.dir.display())))?;
    let temp = r
        .dir
        .join(crate::backups::TEMP_DIR)
        .join(format!("litestream_restore_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&temp);
    std::fs::create_dir_all(&temp).map_err(io(format!("creating {}", temp.display())))?;
    let outcome = restore_into(r, &replica, &bin, &temp).and_then(|got| {
        move_into_place(r.dir, &temp, &got)?;
        Ok(got)
    });
    let _ = std::fs::remove_dir_all(&temp);
    outcome
}

/// Each database restored into `temp` and checked; the names of those the replica had.
fn restore_into(
    r: &Restore<'_>,
    replica: &Replica,
    bin: &Path,
    temp: &Path,
) -> Result<Vec<&'static str>> {
    let dir = super::absolute(r.dir)?;
    let text = config_text(r.cfg, replica, &dir)?;
    let file = super::write_config(temp, &text)?;
    // A bucket that does not answer fails here in seconds, not after Litestream's retries.
    if matches!(replica, Replica::S3 { .. }) {
        probe(bin, r.cfg, replica, &file, &dir)?;
    }
    let mut got = Vec::new();
    for db in DATABASES {
        let out = temp.join(db);
        let mut c = command(bin, r.cfg);
        c.args(["restore", "-no-expand-env", "-if-replica-exists", "-config"])
            .arg(&file)
            .arg("-o")
            .arg(&out);
        if let Some(t) = r.timestamp {
            c.args(["-timestamp", t]);
        }
        let done = c
            .arg(dir.join(db))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(io(format!("running {}", bin.display())))?;
        if !done.status.success() {
            return Err(ReplicationError::Refused(format!(
                "litestream could not restore {db} from {}: {}",
                replica.display(),
                last_line(&String::from_utf8_lossy(&done.stderr))
            )));
        }
        if !out.exists() {
            if db == DATABASES[0] {
                return Err(ReplicationError::Empty(format!(
                    "{} holds no replica of data.db{}: nothing was restored",
                    replica.display(),
                    r.timestamp
                        .map(|t| format!(" at or before {t}"))
                        .unwrap_or_default()
                )));
            }
            continue;
        }
        let tables: &[&str] = if db == DATABASES[0] { &PB_TABLES } else { &[] };
        check_database(&out, tables).map_err(|e| {
            ReplicationError::Refused(format!(
                "the {db} restored from {} is not a Ferrobase/PocketBase database ({e}): nothing was replaced",
                replica.display()
            ))
        })?;
        got.push(db);
    }
    Ok(got)
}

/// The restored files replace the live ones, with their WAL, shared-memory file and
/// Litestream's local state (`.<name>-litestream`, which describes the replaced file).
fn move_into_place(dir: &Path, temp: &Path, got: &[&'static str]) -> Result<()> {
    for db in got {
        let target = dir.join(db);
        for stale in [
            PathBuf::from(format!("{}-wal", target.display())),
            PathBuf::from(format!("{}-shm", target.display())),
        ] {
            remove_if_there(&stale, false)?;
        }
        remove_if_there(&dir.join(format!(".{db}-litestream")), true)?;
        std::fs::rename(temp.join(db), &target)
            .map_err(io(format!("moving the restored {db} into place")))?;
    }
    Ok(())
}

fn remove_if_there(p: &Path, is_dir: bool) -> Result<()> {
    let r = if is_dir {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io(format!("removing {}", p.display()))(e))
        }
        _ => Ok(()),
    }
}
