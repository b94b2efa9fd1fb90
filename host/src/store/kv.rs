//! The plugins' key/value store: `plugin_kv.db` beside `data.db`, one namespace per plugin.
//! A separate file keeps PocketBase's own database exactly as PocketBase would leave it.

use super::{Result, StoreError, Synchronous};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::Mutex;

pub(crate) struct Kv {
    pub(super) conn: Mutex<Connection>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Kv {
    /// Open (creating) `dir/plugin_kv.db`, its commits as durable as `synchronous` says.
    pub(crate) fn open(dir: &Path, synchronous: Synchronous) -> Result<Self> {
        let conn = Connection::open(dir.join("plugin_kv.db"))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", synchronous.pragma())?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS kv (plugin TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
             expires INTEGER, PRIMARY KEY (plugin, key)) WITHOUT ROWID",
        )?;
        Ok(Self {
            conn: Mutex::new(conn),
        })
    }

    fn with<R>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<R>) -> Result<R> {
        let c = self.conn.lock().map_err(|_| StoreError::WriterGone)?;
        Ok(f(&c)?)
    }

    pub(crate) fn get(&self, plugin: &str, key: &str) -> Result<Option<Vec<u8>>> {
        self.with(|c| {
            c.query_row(
                "SELECT value FROM kv WHERE plugin = ?1 AND key = ?2 AND (expires IS NULL OR expires > ?3)",
                params![plugin, key, now_ms()],
                |r| r.get(0),
            )
            .optional()
        })
    }

    pub(crate) fn set(
        &self,
        plugin: &str,
        key: &str,
        value: &[u8],
        ttl_ms: Option<u64>,
    ) -> Result<()> {
        let expires = ttl_ms.map(|t| now_ms().saturating_add(i64::try_from(t).unwrap_or(i64::MAX)));
        self.with(|c| {
            c.execute(
                "INSERT INTO kv (plugin, key, value, expires) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (plugin, key) DO UPDATE SET value = excluded.value, expires = excluded.expires",
                params![plugin, key, value, expires],
            )
            .map(|_| ())
        })
    }

    pub(crate) fn delete(&self, plugin: &str, key: &str) -> Result<()> {
        self.with(|c| {
            c.execute(
                "DELETE FROM kv WHERE plugin = ?1 AND key = ?2",
                params![plugin, key],
            )
            .map(|_| ())
        })
    }

    /// Add `delta` to the number stored under `key` (missing, expired or not a number = 0),
    /// atomically: the read and the write happen under the one connection's lock.
    pub(crate) fn increment(&self, plugin: &str, key: &str, delta: i64) -> Result<i64> {
        self.with(|c| {
            let cur: Option<Vec<u8>> = c
                .query_row(
                    "SELECT value FROM kv WHERE plugin = ?1 AND key = ?2 AND (expires IS NULL OR expires > ?3)",
                    params![plugin, key, now_ms()],
                    |r| r.get(0),
                )
                .optional()?;
            let cur = cur
                .and_then(|v| String::from_utf8(v).ok())
                .and_then(|s| s.trim().parse::<i64>().ok())
                .unwrap_or(0);
            let next = cur.saturating_add(delta);
            c.execute(
                "INSERT INTO kv (plugin, key, value, expires) VALUES (?1, ?2, ?3, NULL)
                 ON CONFLICT (plugin, key) DO UPDATE SET value = excluded.value, expires = NULL",
                params![plugin, key, next.to_string().into_bytes()],
            )?;
            Ok(next)
        })
    }
}
