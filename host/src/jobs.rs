//! The cron jobs PocketBase runs by itself (`__pbDBOptimize__`, `__pbMFACleanup__`,
//! `__pbOTPCleanup__`, `__pbLogsCleanup__`, and `__pbAutoBackup__` while `settings.backups.cron`
//! is set): their schedules, what each does, and the minute ticker that runs them in UTC.
//! `/api/crons` lists them after the plugins' jobs and runs them on demand.

use crate::backups::Backups;
use crate::settings::Live;
use crate::store::Store;
use std::sync::Arc;

const AUTO_BACKUP: &str = "__pbAutoBackup__";

/// The fixed jobs and their schedules, in PocketBase's order.
const FIXED: &[(&str, &str)] = &[
    ("__pbDBOptimize__", "0 0 * * *"),
    ("__pbMFACleanup__", "0 * * * *"),
    ("__pbOTPCleanup__", "0 * * * *"),
    ("__pbLogsCleanup__", "0 */6 * * *"),
];

/// What the built-in jobs work on.
pub(crate) struct Jobs {
    pub store: Arc<Store>,
    pub settings: Arc<Live>,
    pub backups: Arc<Backups>,
}

impl Jobs {
    /// `(id, expression)` of every built-in job in force now.
    pub(crate) fn list(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = FIXED
            .iter()
            .map(|(id, e)| ((*id).to_owned(), (*e).to_owned()))
            .collect();
        let cron = self.settings.peek().backups.cron.clone();
        if !cron.is_empty() {
            out.push((AUTO_BACKUP.to_owned(), cron));
        }
        out
    }

    /// Run the job `id` now in the background; false when there is no such job.
    pub(crate) fn run_now(self: &Arc<Self>, id: &str) -> bool {
        if !self.list().iter().any(|(j, _)| j == id) {
            return false;
        }
        let me = Arc::clone(self);
        let id = id.to_owned();
        tokio::spawn(async move { me.run(&id).await });
        true
    }

    async fn run(&self, id: &str) {
        let outcome = match id {
            "__pbDBOptimize__" => self.store.optimize().await.map_err(|e| e.to_string()),
            "__pbMFACleanup__" => self.expired_sessions("_mfas", "mfa").await,
            "__pbOTPCleanup__" => self.expired_sessions("_otps", "otp").await,
            "__pbLogsCleanup__" => self.logs_cleanup().await,
            AUTO_BACKUP => self.auto_backup().await,
            _ => Ok(()),
        };
        if let Err(e) = outcome {
            tracing::warn!(job = id, error = %e, "built-in cron job failed");
        }
    }

    /// Rows of `table` (`_otps` or `_mfas`) older than their auth collection's `option.duration`
    /// (the flows already refuse them; this keeps the tables small).
    async fn expired_sessions(&self, table: &'static str, option: &str) -> Result<(), String> {
        let schema = self.store.schema();
        let now = chrono::Utc::now();
        for c in schema.collections.iter().filter(|c| c.is_auth()) {
            let duration = c
                .auth_option(option)
                .and_then(|o| o.get("duration"))
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0);
            let before =
                crate::schema::ids::format_time(now - chrono::Duration::seconds(duration.max(0)));
            let id = c.id.clone();
            self.store
                .write(move |conn| {
                    crate::store::records::delete_expired_refs(conn, table, &id, &before)
                })
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn logs_cleanup(&self) -> Result<(), String> {
        let max_days = self.settings.peek().logs.max_days;
        if max_days <= 0 {
            return Ok(());
        }
        crate::logs::cleanup(Arc::clone(&self.store), max_days)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// A backup named `@auto_pb_backup_<app>_<time>.zip`, then only the `cronMaxKeep` newest
    /// scheduled backups kept (0: all), in the backups folder or the bucket
    /// `settings.backups.s3` names.
    async fn auto_backup(&self) -> Result<(), String> {
        let settings = self.settings.current();
        let name = crate::backups::default_name(
            crate::backups::AUTO_PREFIX,
            &settings.meta.app_name,
            chrono::Utc::now(),
        );
        let backups = Arc::clone(&self.backups);
        let keep = usize::try_from(settings.backups.cron_max_keep).unwrap_or(0);
        let remote = backups
            .bucket(settings.backups.s3.bucket_config())
            .map_err(|e| e.to_string())?;
        if let Some(bucket) = remote {
            backups
                .create_remote(&bucket, &name)
                .await
                .map_err(|e| e.to_string())?;
            if keep > 0 {
                backups
                    .prune_auto_remote(&bucket, keep)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            return Ok(());
        }
        tokio::task::spawn_blocking(move || {
            backups.create(&name).map_err(|e| e.to_string())?;
            if keep > 0 {
                backups.prune_auto(keep).map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// Start the ticker: at the start of every minute (UTC) the jobs due then run, each in a
    /// task of its own. Request logs past `maxDays` also go once at start.
    pub(crate) fn spawn(self: &Arc<Self>) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = me.logs_cleanup().await {
                tracing::warn!(error = %e, "request logs cleanup failed");
            }
            loop {
                let now = chrono::Utc::now();
                let into_minute = u64::from(chrono::Timelike::second(&now)) * 1000
                    + u64::from(now.timestamp_subsec_millis());
                tokio::time::sleep(std::time::Duration::from_millis(
                    60_000u64.saturating_sub(into_minute).max(1),
                ))
                .await;
                me.tick(chrono::Utc::now());
            }
        });
    }

    fn tick(self: &Arc<Self>, at: chrono::DateTime<chrono::Utc>) {
        use chrono::{Datelike as _, Timelike as _};
        for (id, expression) in self.list() {
            let Ok(schedule) = crate::cron::parse(&expression) else {
                continue;
            };
            if schedule.is_due(
                at.minute(),
                at.hour(),
                at.day(),
                at.month(),
                at.weekday().num_days_from_sunday(),
            ) {
                let me = Arc::clone(self);
                tokio::spawn(async move { me.run(&id).await });
            }
        }
    }
}
