//! The request logs' table `_logs` in `auxiliary.db`: a thread of its own that builds queued
//! requests' rows and inserts them in batches on its own connection (never the main writer's,
//! never on a request's path), and the reads and deletes of the logs API on a second connection.

use super::{Result, StoreConfig, StoreError, configure};
use crate::logs::Entry;
use crate::query::Select;
use rusqlite::{Connection, ToSql};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Requests waiting for the log thread; past this, new ones are dropped (and counted) rather
/// than holding memory or a request.
const QUEUE_ROWS: usize = 20_000;
/// The log thread is woken when this many requests wait...
const BATCH_ROWS: usize = 1_000;
/// ...or this long after the first of them was queued, whichever comes first. Requests never
/// wake it otherwise: a wake-up per row costs a busy server more than the row itself.
const FLUSH_AFTER: Duration = Duration::from_millis(200);

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
    queue: Arc<Queue>,
    thread: Mutex<Option<JoinHandle<()>>>,
    read: Mutex<Connection>,
    dropped: AtomicU64,
}

/// The requests waiting for the log thread, and its wake-up.
#[derive(Default)]
struct Queue {
    state: Mutex<Waiting>,
    wake: Condvar,
}

#[derive(Default)]
struct Waiting {
    entries: Vec<Entry>,
    /// The log thread sleeps until a first entry arrives (else it is writing, or waiting for
    /// a batch to fill up until its time is up).
    idle: bool,
    /// The store is closing: write what is queued and stop.
    closed: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // A panic while holding the lock leaves plain data behind: keep going with it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
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
        let queue = Arc::new(Queue::default());
        let q = Arc::clone(&queue);
        let thread = std::thread::Builder::new()
            .name("ferrobase-logs".into())
            .stack_size(crate::THREAD_STACK_BYTES)
            .spawn(move || {
                crate::batch_thread();
                write_loop(&writer, &q);
            })?;
        Ok(Self {
            queue,
            thread: Mutex::new(Some(thread)),
            read: Mutex::new(read),
            dropped: AtomicU64::new(0),
        })
    }

    /// Queue a finished request's row; never blocks on the log thread (a full queue drops it).
    /// Wakes the thread only for the first entry while it sleeps and for a full batch.
    pub(crate) fn push(&self, entry: Entry) {
        let mut w = self.queue.lock();
        if w.entries.len() >= QUEUE_ROWS || w.closed {
            drop(w);
            let n = self.dropped.fetch_add(1, Ordering::Relaxed);
            if n.is_power_of_two() {
                tracing::warn!(dropped = n + 1, "request log queue full: rows dropped");
            }
            return;
        }
        w.entries.push(entry);
        let n = w.entries.len();
        let wake = (n == 1 && w.idle) || n == BATCH_ROWS;
        drop(w);
        if wake {
            self.queue.wake.notify_one();
        }
    }

    /// Write what is queued and stop the log thread (the store is closing).
    pub(crate) fn close(&self) {
        self.queue.lock().closed = true;
        self.queue.wake.notify_one();
        let handle = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            let _ = h.join();
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

impl Drop for LogDb {
    fn drop(&mut self) {
        self.close();
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

/// Wait for a first entry, then up to `FLUSH_AFTER` for a batch to fill up; build the rows of
/// what is queued and insert them, a batch per transaction. Ends when the store closes, after
/// writing what was queued.
fn write_loop(conn: &Connection, queue: &Queue) {
    let mut taken = Vec::new();
    let mut ids = crate::schema::ids::Ascending::default();
    loop {
        let mut w = queue.lock();
        while w.entries.is_empty() && !w.closed {
            w.idle = true;
            w = queue
                .wake
                .wait(w)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            w.idle = false;
        }
        let due = Instant::now() + FLUSH_AFTER;
        while w.entries.len() < BATCH_ROWS && !w.closed {
            let left = due.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            w = queue
                .wake
                .wait_timeout(w, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        std::mem::swap(&mut w.entries, &mut taken);
        let closed = w.closed;
        drop(w);
        let mut rows = Vec::with_capacity(BATCH_ROWS.min(taken.len()));
        let mut entries = taken.drain(..);
        loop {
            rows.extend(
                entries
                    .by_ref()
                    .take(BATCH_ROWS)
                    .map(|e| crate::logs::row(e, &mut ids)),
            );
            if rows.is_empty() {
                break;
            }
            if let Err(e) = insert(conn, &rows) {
                tracing::warn!(error = %e, rows = rows.len(), "request logs not written");
            }
            rows.clear();
        }
        drop(entries);
        if closed && queue.lock().entries.is_empty() {
            return;
        }
    }
}

/// A fresh `auxiliary.db` written as the log thread writes it, for the logs bench.
pub(crate) struct BenchLog(Connection);

impl BenchLog {
    /// The database at `path` on a connection set up as the log thread's; without `indexes`
    /// the table's secondary indexes are dropped, to show what they cost.
    pub(crate) fn open(path: &Path, cfg: &StoreConfig, indexes: bool) -> Result<BenchLog> {
        let conn = Connection::open(path)?;
        configure(&conn, cfg, true)?;
        super::bootstrap::ensure_aux(&conn)?;
        if !indexes {
            conn.execute_batch(
                "DROP INDEX idx_logs_level; DROP INDEX idx_logs_message; \
                 DROP INDEX idx_logs_created_hour;",
            )?;
        }
        Ok(BenchLog(conn))
    }

    /// Insert a batch in one transaction, as the log thread does.
    pub(crate) fn insert(&self, rows: &[NewLog]) -> Result<()> {
        Ok(insert(&self.0, rows)?)
    }

    /// Rows in the table.
    pub(crate) fn rows(&self) -> Result<i64> {
        Ok(self
            .0
            .query_row("SELECT count(*) FROM `_logs`", [], |r| r.get(0))?)
    }
}

/// Rows per INSERT statement (each row binds 5 parameters).
const ROWS_PER_INSERT: usize = 50;

fn insert(conn: &Connection, batch: &[NewLog]) -> rusqlite::Result<()> {
    let tx = conn.unchecked_transaction()?;
    {
        let mut chunks = batch.chunks_exact(ROWS_PER_INSERT);
        let mut many = tx.prepare_cached(&insert_sql(ROWS_PER_INSERT))?;
        for chunk in chunks.by_ref() {
            let mut p: Vec<&dyn ToSql> = Vec::with_capacity(ROWS_PER_INSERT * 5);
            for r in chunk {
                p.extend_from_slice(&[
                    &r.id as &dyn ToSql,
                    &r.created,
                    &r.level,
                    &r.message,
                    &r.data,
                ]);
            }
            many.execute(p.as_slice())?;
        }
        let mut one = tx.prepare_cached(&insert_sql(1))?;
        for r in chunks.remainder() {
            let p: [&dyn ToSql; 5] = [&r.id, &r.created, &r.level, &r.message, &r.data];
            one.execute(p.as_slice())?;
        }
    }
    tx.commit()
}

/// `INSERT INTO _logs ...` of `rows` rows.
fn insert_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO `_logs` (`id`, `created`, `level`, `message`, `data`) VALUES (?, ?, ?, ?, ?)",
    );
    for _ in 1..rows {
        sql.push_str(", (?, ?, ?, ?, ?)");
    }
    sql
}

#[cfg(test)]
impl LogDb {
    /// `PRAGMA synchronous` of the logs' connections (both get the same `configure`).
    pub(crate) fn synchronous(&self) -> i64 {
        let read = self.read.lock().expect("the logs' read connection");
        read.query_row("PRAGMA synchronous", [], |r| r.get(0))
            .expect("PRAGMA synchronous answers")
    }
}
