//! The zip of a data directory, as PocketBase lays it out (`data.db`, `auxiliary.db`, then the
//! rest: `storage/...` with its sidecars), and the way back: an archive checked entry by entry
//! and extracted into a folder of its own, its databases checked before anything uses them.
//! Blocking code: callers run it on the blocking pool or a thread of their own.

use crate::store::backup::{check_database, vacuum_into};
use std::fs::{self, File};
use std::io::{self, BufWriter, Write as _};
use std::path::{Component, Path, PathBuf};

/// Entries at the top of a data directory that a backup leaves out and a restore leaves in
/// place: the backups themselves, temporary and cross-process folders (PocketBase's and ours),
/// the lock `serve` holds and the plugins' compile cache.
pub(super) const KEPT_OUT: &[&str] = &[
    super::BACKUPS_DIR,
    super::TEMP_DIR,
    ".notify",
    ".autocert_cache",
    "lost+found",
    super::LOCK_FILE,
    ".ferrobase_uploads",
    ".plugin-cache",
];

/// SQLite's companion files: a database is copied whole through `VACUUM INTO`, never with them.
const COMPANIONS: &[&str] = &["-wal", "-shm", "-journal"];

/// Write the zip of `data_dir` to `out` (a new file). Every top-level `*.db` is copied as of one
/// read snapshot (`data.db` first, then `auxiliary.db`, then the others), through a scratch copy
/// in `scratch`; the other files are read as they are (record files are written once and
/// renamed into place, so each is whole). A file that disappears meanwhile (a record deleted
/// during the backup) is skipped. On error the partial zip is left for the caller to remove.
pub(super) fn write_zip(data_dir: &Path, scratch: &Path, out: &Path) -> io::Result<()> {
    let file = File::create_new(out)?;
    let mut zip =
        zip::ZipWriter::new(BufWriter::with_capacity(1 << 20, file)).set_auto_large_file();
    let mut databases: Vec<String> = vec!["data.db".into(), "auxiliary.db".into()];
    let mut others = Vec::new();
    for entry in fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if KEPT_OUT.contains(&name.as_str())
            || COMPANIONS
                .iter()
                .any(|c| name.ends_with(&format!(".db{c}")))
        {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_file() && name.ends_with(".db") {
            if !databases.contains(&name) {
                databases.push(name);
            }
        } else if kind.is_file() || kind.is_dir() {
            others.push(name);
        }
    }
    others.sort();
    for db in &databases {
        let src = data_dir.join(db);
        if !src.exists() {
            continue;
        }
        let copy = scratch.join(db);
        let _ = fs::remove_file(&copy);
        let copied = vacuum_into(&src, &copy).map_err(io::Error::other);
        let added = copied.and_then(|()| add_file(&mut zip, &copy, db));
        let _ = fs::remove_file(&copy);
        added?;
    }
    for name in others {
        add_tree(&mut zip, &data_dir.join(&name), &name)?;
    }
    let mut inner = zip.finish().map_err(io::Error::other)?;
    inner.flush()?;
    inner.get_ref().sync_all()
}

type Zip = zip::ZipWriter<BufWriter<File>>;

fn add_tree(zip: &mut Zip, path: &Path, name: &str) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if meta.is_file() {
        return add_file(zip, path, name);
    }
    if !meta.is_dir() {
        return Ok(()); // symlinks and devices are not part of a backup
    }
    let mut children: Vec<String> = match fs::read_dir(path) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    children.sort();
    for child in children {
        add_tree(zip, &path.join(&child), &format!("{name}/{child}"))?;
    }
    Ok(())
}

fn add_file(zip: &mut Zip, path: &Path, name: &str) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut src = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let meta = src.metadata()?;
    let mut options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        // PocketBase's level (flate.BestSpeed): backups are mostly SQLite pages and media.
        .compression_level(Some(1))
        .unix_permissions(meta.permissions().mode() & 0o777);
    if let Some(t) = meta.modified().ok().and_then(zip_time) {
        options = options.last_modified_time(t);
    }
    zip.start_file(name, options).map_err(io::Error::other)?;
    io::copy(&mut src, zip)?;
    Ok(())
}

fn zip_time(t: std::time::SystemTime) -> Option<zip::DateTime> {
    use chrono::{Datelike as _, Timelike as _};
    let t: chrono::DateTime<chrono::Utc> = t.into();
    zip::DateTime::from_date_and_time(
        u16::try_from(t.year()).ok()?,
        u8::try_from(t.month()).ok()?,
        u8::try_from(t.day()).ok()?,
        u8::try_from(t.hour()).ok()?,
        u8::try_from(t.minute()).ok()?,
        u8::try_from(t.second()).ok()?,
    )
    .ok()
}

/// Extract the archive `zip_path` into `into` (created; it must not exist) and check it as a
/// data directory: every entry a plain relative path (no `..`, no absolute path, no symlink),
/// a `data.db` with PocketBase's system tables, every database passing `integrity_check`.
/// Entries a restore would not put in place (the backups folder, temporary folders) are not
/// extracted. The error says what is wrong; the caller removes `into` on error.
pub(super) fn extract_checked(zip_path: &Path, into: &Path) -> Result<(), String> {
    let file = File::open(zip_path).map_err(|e| format!("cannot open the archive: {e}"))?;
    let mut archive =
        zip::ZipArchive::new(file).map_err(|e| format!("not a readable zip archive: {e}"))?;
    fs::create_dir(into).map_err(|e| e.to_string())?;
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| format!("entry {i} cannot be read: {e}"))?;
        let raw = entry.name().map(|n| n.into_owned()).unwrap_or_default();
        let Some(rel) = plain_relative(&raw) else {
            return Err(format!("the entry {raw:?} is not a plain relative path"));
        };
        if entry.is_symlink() {
            return Err(format!("the entry {raw:?} is a symbolic link"));
        }
        if entry.encrypted() {
            return Err(format!("the entry {raw:?} is encrypted"));
        }
        let top = rel
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .unwrap_or_default();
        if KEPT_OUT.contains(&top.as_str()) {
            continue;
        }
        let dest = into.join(&rel);
        if entry.is_dir() {
            fs::create_dir_all(&dest).map_err(|e| e.to_string())?;
            continue;
        }
        if let Some(parent) = dest.parent() {
            fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        let mut out = File::create_new(&dest)
            .map_err(|e| format!("the entry {raw:?} cannot be written: {e}"))?;
        io::copy(&mut entry, &mut out).map_err(|e| format!("the entry {raw:?} is damaged: {e}"))?;
        out.sync_all().map_err(|e| e.to_string())?;
    }
    let data = into.join("data.db");
    if !data.is_file() {
        return Err("the archive has no data.db".into());
    }
    check_database(&data, &["_collections", "_params", "_migrations"])
        .map_err(|e| format!("data.db: {e}"))?;
    for entry in fs::read_dir(into).map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "data.db" || !name.ends_with(".db") {
            continue;
        }
        let tables: &[&str] = if name == "auxiliary.db" {
            &["_logs"]
        } else {
            &[]
        };
        check_database(&entry.path(), tables).map_err(|e| format!("{name}: {e}"))?;
    }
    Ok(())
}

/// `raw` as a path that stays inside the folder it is extracted to: relative, only normal
/// segments (no `.`, `..`, root or prefix), no NUL, no backslash.
fn plain_relative(raw: &str) -> Option<PathBuf> {
    if raw.is_empty() || raw.contains('\0') || raw.contains('\\') || raw.starts_with('/') {
        return None;
    }
    let trimmed = raw.trim_end_matches('/');
    let path = Path::new(trimmed);
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(s) => out.push(s),
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_relative_paths_are_extracted() {
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            "a/../b",
            "a\\b",
            "./a",
            "a/\0",
        ] {
            assert_eq!(plain_relative(bad), None, "{bad:?}");
        }
        assert_eq!(plain_relative("data.db"), Some(PathBuf::from("data.db")));
        assert_eq!(
            plain_relative("storage/c/r/f.txt"),
            Some(PathBuf::from("storage/c/r/f.txt"))
        );
        assert_eq!(plain_relative("storage/"), Some(PathBuf::from("storage")));
    }
}
