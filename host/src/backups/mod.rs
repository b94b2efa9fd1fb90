//! Backups: the `pb_data/backups` folder (names, list, create, upload, delete) or, with
//! `settings.backups.s3` on, a bucket (`remote.rs`); the one backup or restore running at a
//! time, and restore's swap of the data directory. No HTTP; the databases are copied through
//! `store::backup`. The server's generations (`app.rs`) carry out a restore: the store is
//! closed, the directory swapped, the store opened again, in this process.

mod archive;
mod remote;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::files::{Bucket, S3Config, S3Error};

/// Where backups live, inside the data directory (PocketBase's folder).
pub(crate) const BACKUPS_DIR: &str = "backups";
/// PocketBase's temporary folder inside the data directory, emptied at start.
pub(crate) const TEMP_DIR: &str = ".pb_temp_to_delete";
/// The file `serve` holds an exclusive lock on while it runs.
pub(crate) const LOCK_FILE: &str = ".ferrobase.lock";
/// The prefix of the names the scheduled backups get (the retention applies to those only).
pub(crate) const AUTO_PREFIX: &str = "@auto_pb_backup_";

/// One entry of `GET /api/backups`.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub key: String,
    pub size: u64,
    pub modified: std::time::SystemTime,
}

/// Why a backup operation did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackupError {
    /// Another backup or restore is running (PocketBase's `@activeBackup`).
    #[error("another backup or restore is running")]
    Busy,
    #[error("no such backup")]
    Missing,
    /// The archive cannot be restored; what is wrong with it.
    #[error("the backup cannot be restored: {0}")]
    Invalid(String),
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The bucket the backups are kept in answered with an error (or not at all).
    #[error("{0}")]
    S3(#[from] crate::files::S3Error),
}

/// The backups of one data directory and the one operation running on them.
pub(crate) struct Backups {
    data_dir: PathBuf,
    /// The name of the backup being made or restored now.
    active: Mutex<Option<String>>,
    /// A checked, extracted archive waiting for the server to stop so it can be swapped in.
    pending: Mutex<Option<Prepared>>,
    /// Woken when a restore is pending: the current generation of the server stops.
    restart: tokio::sync::Notify,
    /// The client of the bucket `settings.backups.s3` names, kept while that does not change.
    bucket: Mutex<Option<Arc<Bucket>>>,
}

/// Holds the name in `active` for as long as it lives.
struct Running<'a>(&'a Backups);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut a) = self.0.active.lock() {
            a.take();
        }
    }
}

/// An archive extracted and checked in the temporary folder, ready to replace the data.
#[derive(Debug)]
pub(crate) struct Prepared {
    dir: PathBuf,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A folder of its own in the temporary folder for one zip (a backup being made, or one
/// downloaded for a restore), removed with whatever is in it when this goes.
struct Scratch {
    dir: PathBuf,
    zip: PathBuf,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The data directory after a swap: the previous contents wait in the temporary folder until
/// the restored data has opened ([`Swapped::commit`]) or are put back ([`Swapped::revert`]).
#[derive(Debug)]
pub(crate) struct Swapped {
    data_dir: PathBuf,
    old: PathBuf,
    restored: PathBuf,
}

impl Swapped {
    /// The restored data opened: the previous contents go.
    pub(crate) fn commit(self) {
        let _ = fs::remove_dir_all(&self.old);
    }

    /// The restored data did not open: put the previous contents back.
    pub(crate) fn revert(self) -> io::Result<()> {
        fs::create_dir_all(&self.restored)?;
        move_contents(&self.data_dir, &self.restored)?;
        move_contents(&self.old, &self.data_dir)?;
        let _ = fs::remove_dir_all(&self.restored);
        let _ = fs::remove_dir_all(&self.old);
        Ok(())
    }
}

impl Backups {
    /// The backups of `data_dir`.
    pub(crate) fn open(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            active: Mutex::new(None),
            pending: Mutex::new(None),
            restart: tokio::sync::Notify::new(),
            bucket: Mutex::new(None),
        }
    }

    /// Where the backups are kept: the bucket `config` describes (`settings.backups.s3`, as
    /// the caller read it), or None for the backups folder. A config equal to the previous
    /// one keeps its client (and its idle connections).
    pub(crate) fn bucket(&self, config: Option<S3Config>) -> Result<Option<Arc<Bucket>>, S3Error> {
        let Some(config) = config else {
            return Ok(None);
        };
        let mut kept = self
            .bucket
            .lock()
            .map_err(|_| S3Error::Config("the backups bucket's lock is poisoned"))?;
        if let Some(b) = kept.as_ref().filter(|b| *b.config() == config) {
            return Ok(Some(Arc::clone(b)));
        }
        let b = Arc::new(Bucket::new(config)?);
        *kept = Some(Arc::clone(&b));
        Ok(Some(b))
    }

    /// Empty the temporary folder a crash may have left (a partial zip, an extracted archive,
    /// a previous data directory kept during a restore). Only the holder of the data
    /// directory's lock does this: another process may be making a backup in it.
    pub(crate) fn clean_temp(&self) -> io::Result<()> {
        let temp = self.data_dir.join(TEMP_DIR);
        if temp.exists() {
            fs::remove_dir_all(&temp)?;
        }
        Ok(())
    }

    fn dir(&self) -> PathBuf {
        self.data_dir.join(BACKUPS_DIR)
    }

    fn temp(&self) -> io::Result<PathBuf> {
        let t = self.data_dir.join(TEMP_DIR);
        fs::create_dir_all(&t)?;
        Ok(t)
    }

    /// Whether no backup or restore is running (`/api/health`'s `canBackup`).
    pub(crate) fn idle(&self) -> bool {
        self.active.lock().map(|a| a.is_none()).unwrap_or(false)
    }

    fn start(&self, name: &str) -> Result<Running<'_>, BackupError> {
        let mut a = self.active.lock().map_err(|_| BackupError::Busy)?;
        if a.is_some() {
            return Err(BackupError::Busy);
        }
        *a = Some(name.to_owned());
        Ok(Running(self))
    }

    /// The path of the backup `key`, when `key` can only name a file of the backups folder.
    pub(crate) fn path(&self, key: &str) -> Option<PathBuf> {
        crate::files::is_plain(key).then(|| self.dir().join(key))
    }

    pub(crate) fn exists(&self, key: &str) -> bool {
        self.path(key).is_some_and(|p| p.is_file())
    }

    /// Every backup, by key.
    pub(crate) fn list(&self) -> io::Result<Vec<Item>> {
        let mut out = Vec::new();
        let rd = match fs::read_dir(self.dir()) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in rd {
            let entry = entry?;
            let key = entry.file_name().to_string_lossy().into_owned();
            if !crate::files::is_plain(&key) {
                continue;
            }
            let meta = entry.metadata()?;
            if !meta.is_file() {
                continue;
            }
            out.push(Item {
                key,
                size: meta.len(),
                modified: meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    /// A new folder of its own in the temporary folder, named `<prefix><random>`.
    fn scratch(&self, prefix: &str) -> io::Result<Scratch> {
        let dir = self
            .temp()?
            .join(format!("{prefix}{}", crate::schema::ids::lower_alnum(8)));
        fs::create_dir(&dir)?;
        let zip = dir.join("backup.zip");
        Ok(Scratch { dir, zip })
    }

    /// The zip of the data directory, written in a scratch folder. On any error (a full
    /// disk) the partial zip is removed. Blocking.
    fn zip_in_scratch(&self) -> io::Result<Scratch> {
        let scratch = self.scratch("pb_backup_")?;
        archive::write_zip(&self.data_dir, &scratch.dir, &scratch.zip)?;
        Ok(scratch)
    }

    /// Make the backup `name` (the caller checked the name): the zip is written in the
    /// temporary folder and moved into the backups folder once whole, with its sidecar. On any
    /// error (a full disk) the partial zip is removed and nothing is listed. Blocking.
    pub(crate) fn create(&self, name: &str) -> Result<(), BackupError> {
        let _running = self.start(name)?;
        let started = std::time::Instant::now();
        let scratch = self.zip_in_scratch()?;
        let dir = self.dir();
        fs::create_dir_all(&dir)?;
        let dest = dir.join(name);
        let md5 = md5_of(&scratch.zip)?;
        fs::rename(&scratch.zip, &dest)?;
        crate::files::write_sidecar(&dest, "application/zip", Some(name), &md5)?;
        tracing::info!(name, ms = %started.elapsed().as_millis(), "backup created");
        Ok(())
    }

    /// Refused while `key` is being made or restored.
    fn check_unused(&self, key: &str) -> Result<(), BackupError> {
        if self
            .active
            .lock()
            .map(|a| a.as_deref() == Some(key))
            .unwrap_or(true)
        {
            return Err(BackupError::Busy);
        }
        Ok(())
    }

    /// Delete the backup `key` and its sidecar; refused while it is being made or restored.
    pub(crate) fn delete(&self, key: &str) -> Result<(), BackupError> {
        self.check_unused(key)?;
        let path = self.path(key).ok_or(BackupError::Missing)?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(BackupError::Missing),
            Err(e) => return Err(e.into()),
        }
        let _ = fs::remove_file(crate::files::sidecar(&path));
        Ok(())
    }

    /// Keep the `keep` newest scheduled backups (by modification time), delete the others.
    pub(crate) fn prune_auto(&self, keep: usize) -> io::Result<()> {
        for old in beyond_newest(self.list()?, keep) {
            if let Err(e) = self.delete(&old.key) {
                tracing::warn!(key = %old.key, error = %e, "old scheduled backup not removed");
            }
        }
        Ok(())
    }

    /// Extract and check the archive at `zip` (a backup of this folder, or any file for the
    /// CLI) for a restore. Nothing of the live data is touched. Blocking.
    pub(crate) fn prepare(&self, zip: &Path, name: &str) -> Result<Prepared, BackupError> {
        let _running = self.start(name)?;
        self.extract(zip)
    }

    /// [`Self::prepare`]'s work, for a caller that holds the running mark.
    fn extract(&self, zip: &Path) -> Result<Prepared, BackupError> {
        if !zip.is_file() {
            return Err(BackupError::Missing);
        }
        let dir = self
            .temp()?
            .join(format!("pb_restore_{}", crate::schema::ids::lower_alnum(8)));
        let prepared = Prepared { dir };
        archive::extract_checked(zip, &prepared.dir).map_err(BackupError::Invalid)?;
        Ok(prepared)
    }

    /// Queue a prepared restore and ask the running server to stop and swap it in.
    pub(crate) fn request_restore(&self, prepared: Prepared) {
        if let Ok(mut p) = self.pending.lock() {
            *p = Some(prepared);
        }
        self.restart.notify_one();
    }

    /// Resolves when a restore has been requested.
    pub(crate) async fn restore_requested(&self) {
        self.restart.notified().await;
    }

    /// The restore waiting to be swapped in, if any.
    pub(crate) fn take_pending(&self) -> Option<Prepared> {
        self.pending.lock().ok()?.take()
    }

    /// Replace the data directory's contents with the prepared ones (the store is closed). The
    /// previous contents are kept aside until [`Swapped::commit`]; a failure half-way puts
    /// them back.
    pub(crate) fn swap(&self, prepared: Prepared) -> Result<Swapped, BackupError> {
        let _running = self.start("restore")?;
        let old = self.temp()?.join(format!(
            "old_pb_data_{}",
            crate::schema::ids::lower_alnum(8)
        ));
        fs::create_dir(&old)?;
        move_contents(&self.data_dir, &old)?;
        if let Err(e) = move_contents(&prepared.dir, &self.data_dir) {
            let _ = move_contents(&self.data_dir, &prepared.dir);
            move_contents(&old, &self.data_dir)?;
            return Err(e.into());
        }
        let restored = prepared.dir.clone();
        drop(prepared);
        Ok(Swapped {
            data_dir: self.data_dir.clone(),
            old,
            restored,
        })
    }
}

/// The scheduled backups among `items` past the `keep` newest (by modification time), which
/// the retention removes.
fn beyond_newest(items: Vec<Item>, keep: usize) -> Vec<Item> {
    let mut auto: Vec<Item> = items
        .into_iter()
        .filter(|i| i.key.starts_with(AUTO_PREFIX))
        .collect();
    auto.sort_by_key(|i| std::cmp::Reverse(i.modified));
    auto.into_iter().skip(keep).collect()
}

/// Move every entry of `from` (except those a restore keeps in place) into `to`, by rename
/// (both are inside the data directory, so on one file system).
fn move_contents(from: &Path, to: &Path) -> io::Result<()> {
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let name = entry.file_name();
        if archive::KEPT_OUT.contains(&name.to_string_lossy().as_ref()) {
            continue;
        }
        fs::rename(entry.path(), to.join(&name))?;
    }
    Ok(())
}

fn md5_of(path: &Path) -> io::Result<[u8; 16]> {
    use md5::Digest as _;
    let mut f = fs::File::open(path)?;
    let mut h = md5::Md5::new();
    io::copy(&mut f, &mut h)?;
    Ok(h.finalize().into())
}

/// PocketBase's default backup name: `<prefix><app name in snake case, 50 bytes at most>_
/// <UTC YYYYMMDDHHMMSS>.zip`.
pub(crate) fn default_name(
    prefix: &str,
    app_name: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let mut app = crate::files::snake_case(app_name);
    app.truncate(50);
    format!("{prefix}{app}_{}.zip", now.format("%Y%m%d%H%M%S"))
}

/// A backup name `POST /api/backups` accepts (`^[a-z0-9_-]+\.zip$`).
pub(crate) fn valid_name(name: &str) -> bool {
    name.strip_suffix(".zip").is_some_and(|stem| {
        !stem.is_empty()
            && stem
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    })
}

/// Take the lock `serve` holds on a data directory; `None` when another process holds it (a
/// server is running on it).
pub(crate) fn lock(data_dir: &Path) -> io::Result<Option<fs::File>> {
    fs::create_dir_all(data_dir)?;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(data_dir.join(LOCK_FILE))?;
    match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(Some(f)),
        Err(rustix::io::Errno::WOULDBLOCK) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-04T09:23:35Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            default_name("pb_backup_", "Acme", at),
            "pb_backup_acme_20261204092335.zip"
        );
        assert_eq!(
            default_name(AUTO_PREFIX, "My App", at),
            "@auto_pb_backup_my_app_20261204092335.zip"
        );
        for ok in ["a.zip", "pb_backup-1.zip", "0.zip"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in [
            ".zip",
            "A.zip",
            "a b.zip",
            "a.tar",
            "../a.zip",
            "a.zip.zip",
            "a",
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn retention_removes_the_scheduled_backups_past_the_newest() {
        let at = |s: u64| std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s);
        let item = |key: &str, s: u64| Item {
            key: key.to_owned(),
            size: 1,
            modified: at(s),
        };
        let items = vec![
            item("@auto_pb_backup_a_3.zip", 3),
            item("@auto_pb_backup_a_1.zip", 1),
            item("mine.zip", 0),
            item("@auto_pb_backup_a_2.zip", 2),
            item("notes/readme.txt", 0),
        ];
        let gone: Vec<String> = beyond_newest(items.clone(), 2)
            .into_iter()
            .map(|i| i.key)
            .collect();
        assert_eq!(gone, ["@auto_pb_backup_a_1.zip"]);
        assert_eq!(beyond_newest(items.clone(), 1).len(), 2);
        assert!(beyond_newest(items, 3).is_empty());
    }

    #[test]
    fn a_second_lock_on_the_same_folder_is_refused_until_the_first_goes() {
        let dir = tempfile::tempdir().unwrap();
        let first = lock(dir.path()).unwrap();
        assert!(first.is_some());
        // flock locks belong to the open file description: a second open is refused.
        assert!(lock(dir.path()).unwrap().is_none());
        drop(first);
        assert!(lock(dir.path()).unwrap().is_some());
    }
}
