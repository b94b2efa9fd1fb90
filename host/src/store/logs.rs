//! The request logs' table `_logs` in `auxiliary.db`: a thread of its own that inserts rows in
//! batches on its own connection (never the main writer's, never on a request's path), and the
//! reads and deletes of the logs API on a second connection.

use super::{Result, StoreConfig, StoreError, configure};
use crate::query::Select;
use rusqlite::{Connection, ToSql};
use std::path::Path;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

/// Rows waiting for the log thread; past this, new rows are dropped (and counted) rather than
/// holding memory or a request.
const QUEUE_ROWS: usize = 20_000;
/// Rows inserted in one transaction at most.
const BATCH_ROWS: usize = 200;

/// One row as it is written.
pub(crate) struct NewLog {
    pub id: String,
    pub created: String,
    pub level: i64,
    pub message: String,
    /// The `data` object's JSON text.
    pub data: String,
}

/// One row as it is read (`data` as JSON text).
pub(crate) struct LogRow {
    pub id: String,
    pub created: String,
    pub level: i64,
    pub message: String,
    pub data: String,
}

pub(crate) struct LogDb {
    queue: SyncSender<NewLog>,
    read: Mutex<Connection>,
    dropped: std::sync::atomic::AtomicU64,
}

const COLUMNS: &str =
    "`_logs`.`id`, `_logs`.`created`, `_logs`.`level`, `_logs`.`message`, `_logs`.`data`";

impl LogDb {
    /// The log thread and the reading connection, on `dir/auxiliary.db` (its table exists).
    pub(crate) fn open(path: &Path, cfg: &StoreConfig) -> Result<Self> {
        let writer = Connection::open(path)?;
        configure(&writer, cfg, true)?;
        let read = Connection::open(path)?;
        configure(&read, cfg, false)?;
        let (queue, rx) = sync_channel::<NewLog>(QUEUE_ROWS);
        std::thread::Builder::new()
            .name("ferrobase-logs".into())
            .stack_size(crate::THREAD_STACK_BYTES)
            .spawn(move || write_loop(&writer, &rx))?;
        Ok(Self {
            queue,
            read: Mutex::new(read),
            dropped: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// Queue a row; never blocks (a full queue drops it).
    pub(crate) fn push(&self, row: NewLog) {
        if let Err(TrySendError::Full(_)) = self.queue.try_send(row) {
            let n = self
                .dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if n.is_power_of_two() {
                tracing::warn!(dropped = n + 1, "request log queue full: rows dropped");
            }
        }
    }

    fn with_read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self.read.lock().map_err(|_| StoreError::WriterGone)?;
        Ok(f(&conn)?)
    }

    /// A page of the rows `sel` selects (its WHERE, ORDER BY and parameters over `_logs`).
    pub(crate) fn list(&self, sel: &Select, limit: i64, offset: i64) -> Result<Vec<LogRow>> {
        let mut sql = format!("SELECT {COLUMNS} {}", from_where(sel));
        if !sel.order_sql.is_empty() {
            sql.push_str(" ORDER BY ");
            sql.push_str(&sel.order_sql);
        }
        sql.push_str(" LIMIT ? OFFSET ?");
        let mut params = bound(sel);
        params.push(&limit);
        params.push(&offset);
        self.with_read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(params.as_slice(), row)?;
            rows.collect()
        })
    }

    /// How many rows `sel` selects.
    pub(crate) fn count(&self, sel: &Select) -> Result<i64> {
        let sql = format!(
            "SELECT COUNT(*) FROM (SELECT `_logs`.`id` {})",
            from_where(sel)
        );
        let params = bound(sel);
        self.with_read(|c| c.query_row(&sql, params.as_slice(), |r| r.get(0)))
    }

    pub(crate) fn get(&self, id: &str) -> Result<Option<LogRow>> {
        let sql = format!("SELECT {COLUMNS} FROM `_logs` WHERE `_logs`.`id` = ?1");
        self.with_read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let mut rows = stmt.query_map([id], row)?;
            rows.next().transpose()
        })
    }

    /// Rows per hour (`YYYY-MM-DD HH:00:00`, oldest first) of those `sel` selects.
    pub(crate) fn hourly(&self, sel: &Select) -> Result<Vec<(String, i64)>> {
        let sql = format!(
            "SELECT strftime('%Y-%m-%d %H:00:00', `_logs`.`created`) AS `date`, COUNT(DISTINCT `_logs`.`id`) \
             {} GROUP BY `date` ORDER BY `date`",
            from_where(sel)
        );
        let params = bound(sel);
        self.with_read(|c| {
            let mut stmt = c.prepare(&sql)?;
            let rows = stmt.query_map(params.as_slice(), |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })
    }

    /// Delete every row.
    pub(crate) fn delete_all(&self) -> Result<()> {
        self.with_read(|c| c.execute("DELETE FROM `_logs`", []).map(|_| ()))
    }

    /// Delete the rows below `level` (a raised `logs.minLevel`).
    pub(crate) fn delete_below(&self, level: i64) -> Result<()> {
        self.with_read(|c| {
            c.execute("DELETE FROM `_logs` WHERE `level` < ?1", [level])
                .map(|_| ())
        })
    }

    /// Delete the rows created before `cutoff` (a date in the stored form): `logs.maxDays`.
    pub(crate) fn delete_before(&self, cutoff: &str) -> Result<usize> {
        self.with_read(|c| c.execute("DELETE FROM `_logs` WHERE `created` < ?1", [cutoff]))
    }
}

/// `FROM _logs` with the statement's joins and WHERE.
fn from_where(sel: &Select) -> String {
    let mut sql = format!("FROM `_logs`{}", sel.joins);
    if !sel.where_sql.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&sel.where_sql);
    }
    sql
}

/// The statement's parameters, to bind.
fn bound(sel: &Select) -> Vec<&dyn ToSql> {
    sel.params.iter().map(|p| p as &dyn ToSql).collect()
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<LogRow> {
    Ok(LogRow {
        id: r.get(0)?,
        created: r.get(1)?,
        level: r.get(2)?,
        message: r.get(3)?,
        data: super::json_column(r, 4)?,
    })
}

/// Wait for a row, then insert it with every row already queued (up to a batch) in one
/// transaction; ends when the store is dropped.
fn write_loop(conn: &Connection, rx: &Receiver<NewLog>) {
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH_ROWS {
            match rx.try_recv() {
                Ok(r) => batch.push(r),
                Err(_) => break,
            }
        }
        if let Err(e) = insert(conn, &batch) {
            tracing::warn!(error = %e, rows = batch.len(), "request logs not written");
        }
    }
}

fn insert(conn: &Connection, batch: &[NewLog]) -> rusqlite::Result<()> {
    let tx = conn.unchecked_transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO `_logs` (`id`, `created`, `level`, `message`, `data`) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for r in batch {
            let p: [&dyn ToSql; 5] = [&r.id, &r.created, &r.level, &r.message, &r.data];
            stmt.execute(p.as_slice())?;
        }
    }
    tx.commit()
}
