//! Backups kept in an S3 bucket (`settings.backups.s3` on), as PocketBase keeps them: each
//! backup is the object named after it at the bucket's root, and every object of the bucket
//! is listed. A backup's zip is still made in the data directory's temporary folder, sent up
//! (in parts when large) and removed; a restore downloads the zip there first, then runs the
//! same checked extraction as a local one.

use super::{BackupError, Backups, Item, Prepared, beyond_newest};
use crate::files::{Bucket, S3Error};
use std::sync::Arc;

/// Run blocking work of the backups off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BackupError> + Send + 'static,
) -> Result<T, BackupError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BackupError::Io(std::io::Error::other(e.to_string())))?
}

impl Backups {
    /// Every object under `prefix` (`""`: all of them), by key.
    pub(crate) async fn list_remote(
        &self,
        bucket: &Bucket,
        prefix: &str,
    ) -> Result<Vec<Item>, S3Error> {
        Ok(bucket
            .list_objects(prefix)
            .await?
            .into_iter()
            .map(|o| Item {
                key: o.key,
                size: o.size,
                modified: o.modified,
            })
            .collect())
    }

    /// Whether the object `key` exists; an error other than "not found" is the caller's to
    /// judge (PocketBase takes it as "exists" when checking a new name).
    pub(crate) async fn exists_remote(&self, bucket: &Bucket, key: &str) -> Result<bool, S3Error> {
        match bucket.head(key).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Make the backup `name` in `bucket` (the caller checked the name): the zip is written in
    /// the temporary folder, uploaded with PocketBase's type and metadata, and removed locally
    /// whatever happens.
    pub(crate) async fn create_remote(
        self: &Arc<Self>,
        bucket: &Bucket,
        name: &str,
    ) -> Result<(), BackupError> {
        let _running = self.start(name)?;
        let started = std::time::Instant::now();
        let me = Arc::clone(self);
        let scratch = blocking(move || Ok(me.zip_in_scratch()?)).await?;
        bucket
            .upload(
                name,
                &scratch.zip,
                "application/zip",
                &[("original-filename", name.as_bytes())],
            )
            .await?;
        drop(scratch);
        tracing::info!(name, ms = %started.elapsed().as_millis(), "backup created in S3");
        Ok(())
    }

    /// Delete the backup `key` from `bucket`; refused while it is being made or restored. A
    /// missing key is no error (S3 answers so), a missing bucket is.
    pub(crate) async fn delete_remote(
        &self,
        bucket: &Bucket,
        key: &str,
    ) -> Result<(), BackupError> {
        self.check_unused(key)?;
        Ok(bucket.remove(key).await?)
    }

    /// Keep the `keep` newest scheduled backups in `bucket`, delete the others.
    pub(crate) async fn prune_auto_remote(
        &self,
        bucket: &Bucket,
        keep: usize,
    ) -> Result<(), S3Error> {
        let listed = self.list_remote(bucket, super::AUTO_PREFIX).await?;
        for old in beyond_newest(listed, keep) {
            if let Err(e) = self.delete_remote(bucket, &old.key).await {
                tracing::warn!(key = %old.key, error = %e, "old scheduled backup not removed");
            }
        }
        Ok(())
    }

    /// Download the backup `key` into the temporary folder, then extract and check it as
    /// [`Backups::prepare`] does; the downloaded zip is removed either way.
    pub(crate) async fn prepare_remote(
        self: &Arc<Self>,
        bucket: &Bucket,
        key: &str,
    ) -> Result<Prepared, BackupError> {
        let _running = self.start(key)?;
        let scratch = self.scratch("pb_restore_zip_")?;
        bucket
            .download(key, &scratch.zip)
            .await
            .map_err(|e| match e {
                e if e.is_not_found() => BackupError::Missing,
                e => BackupError::S3(e),
            })?;
        let me = Arc::clone(self);
        blocking(move || me.extract(&scratch.zip)).await
    }
}
