//! Owns every SQLite connection: open and PRAGMAs in one place, one writer thread, a pool of
//! read-only readers, system tables, collection DDL and the schema snapshot. Knows nothing about
//! HTTP, JSON response shapes, filter syntax or plugins.

pub(crate) mod backup;
mod bootstrap;
pub(crate) mod carried;
pub(crate) mod changes;
pub(crate) mod ddl;
pub(crate) mod kv;
pub(crate) mod logs;
pub(crate) mod params;
pub(crate) mod raw;
pub(crate) mod records;
pub(crate) mod superusers;

pub(crate) use crate::config::Synchronous;
use crate::metrics;
use crate::schema::{Collection, Rules, Schema, define};
use arc_swap::ArcSwap;
pub(crate) use carried::Carried;
pub(crate) use changes::{Changes, Stamp};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use tokio::sync::{Semaphore, oneshot};

pub(crate) use records::StoreRecord;

/// A connection lent to a `read` or `write` closure. The layers above hand it back to store
/// functions; it gives them no rusqlite (its connection is private to this module and its
/// children).
#[derive(Clone, Copy)]
pub(crate) struct Conn<'a>(&'a Connection);

/// A file-less database for fixtures (the testkit's compiler checks and benches): the same SQL
/// functions as the real store, none of its threads.
pub(crate) struct Scratch(Connection);

impl Scratch {
    pub(crate) fn new() -> Result<Self> {
        let conn = Connection::open_in_memory()?;
        register_functions(&conn)?;
        Ok(Self(conn))
    }

    pub(crate) fn conn(&self) -> Conn<'_> {
        Conn(&self.0)
    }
}

/// What a [`Conn::savepoint`] closure decides about its changes.
pub(crate) enum Keep<R> {
    /// Release the savepoint: the changes stay (and commit with the enclosing transaction).
    Commit(R),
    /// Roll the savepoint back: nothing of it stays.
    Rollback(R),
}

impl<'a> Conn<'a> {
    /// Run `f` inside a savepoint; an error from `f` rolls it back too. Savepoints nest (each
    /// one is the most recent of its name), so `f` may open more.
    pub(crate) fn savepoint<R>(self, f: impl FnOnce(Conn<'a>) -> Result<Keep<R>>) -> Result<R> {
        let run = |sql: &str| -> Result<()> {
            self.0.prepare_cached(sql)?.execute([])?;
            Ok(())
        };
        run("SAVEPOINT fb")?;
        let undo = || {
            let _ = run("ROLLBACK TO fb");
            let _ = run("RELEASE fb");
        };
        match f(self) {
            Ok(Keep::Commit(r)) => {
                run("RELEASE fb")?;
                Ok(r)
            }
            Ok(Keep::Rollback(r)) => {
                undo();
                Ok(r)
            }
            Err(e) => {
                undo();
                Err(e)
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("the writer thread is gone")]
    WriterGone,
    #[error("corrupt schema: {0}")]
    Schema(String),
    /// A unique index refused the write; the columns it names.
    #[error("unique constraint on {0:?}")]
    NotUnique(Vec<String>),
    /// An auth record's id is already used by a record of another auth collection.
    #[error("the auth record id is taken by another auth collection")]
    AuthIdTaken,
    /// A required relation still points at the record being deleted.
    #[error("record is part of a required relation")]
    RequiredRelation,
    #[error("invalid: {0}")]
    Invalid(String),
    /// A view's query that cannot define a view: SQLite's (or our) reason, and whether it is
    /// only the `id` column that is missing.
    #[error("invalid view query: {why}")]
    ViewQuery { why: String, missing_id: bool },
    /// Indexes that could not be created: their position in the collection's list and the
    /// reason, as PocketBase words it.
    #[error("indexes refused: {0:?}")]
    IndexesRefused(Vec<(usize, String)>),
    /// After a delete, a view collection's query no longer works (the view and the reason).
    #[error("a view depends on the table: {0}")]
    ViewDependency(String),
    /// Plugin SQL that its policy refuses.
    #[error("denied: {0}")]
    Denied(String),
}

impl StoreError {
    /// Turn SQLite's unique-constraint message into the columns it names.
    pub(crate) fn classify(e: rusqlite::Error) -> Self {
        if let rusqlite::Error::SqliteFailure(code, msg) = &e
            && (code.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                || code.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY)
        {
            // "UNIQUE constraint failed: posts.code, posts.other"
            let cols = msg
                .as_deref()
                .unwrap_or("")
                .split_once(':')
                .map(|(_, rest)| rest)
                .unwrap_or("")
                .split(',')
                .filter_map(|c| c.trim().rsplit('.').next().map(str::to_owned))
                .filter(|c| !c.is_empty())
                .collect();
            return Self::NotUnique(cols);
        }
        Self::Sqlite(e)
    }
}

impl From<StoreError> for String {
    fn from(e: StoreError) -> String {
        e.to_string()
    }
}

pub(crate) type Result<T> = std::result::Result<T, StoreError>;

/// Store tuning from pb.toml.
#[derive(Debug, Clone)]
pub(crate) struct StoreConfig {
    pub cache_size_kib: i64,
    pub journal_size_limit: i64,
    pub wal_autocheckpoint: i64,
    pub busy_timeout_ms: u64,
    pub n_readers: usize,
    /// When a COMMIT reaches the disk, for every file of the store (pb.toml's `[store]`).
    pub synchronous: Synchronous,
    /// How much of data.db the readers map into memory, in MiB (0: they read it with pread).
    pub mmap_mib: i64,
}

impl Synchronous {
    /// The PRAGMA's value.
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// What to announce once a write is durable, in two steps: given the write's result (right
/// after the write ran, on the writer), prepare the announcement; the prepared closure runs on
/// the writer right after the COMMIT that made the result durable, before anyone hears back,
/// and never for a write that was rolled back.
pub(crate) type OnCommit<R> = Box<dyn FnOnce(&R) -> Option<Announce> + Send>;

/// A prepared announcement (see [`OnCommit`]).
pub(crate) type Announce = Box<dyn FnOnce() + Send>;

/// What a batched job hands back: called once the batch's fate is known (true = committed), to
/// deliver the job's result to its caller.
type Finish = Box<dyn FnOnce(bool) + Send>;

/// Work for the writer thread.
enum Job {
    /// A data write that runs inside a savepoint; consecutive ones share one commit.
    Batched(Box<dyn FnOnce(&mut Connection) -> Finish + Send>),
    /// Runs alone, outside any transaction of ours (schema changes, the CLI).
    Solo(Box<dyn FnOnce(&mut Connection) -> Finish + Send>),
    /// A transaction lent out as a [`Tx`]: the writer begins it, hands its connection to the
    /// holder (whose steps then run on the holder's own thread, with no hop per step) and waits
    /// for it to come back to commit or roll back. `started` hears whether BEGIN succeeded.
    Session {
        started: oneshot::Sender<Result<Tx>>,
    },
}

/// How a lent transaction ends, sent back with its connection.
enum End {
    /// COMMIT; then the announcements run (in step order) and `reply` hears the outcome.
    Commit {
        announce: Vec<Announce>,
        reply: oneshot::Sender<Result<()>>,
    },
    /// ROLLBACK: the holder failed, timed out or went away.
    Rollback,
}

/// A lent connection on its way home to the writer.
struct Back {
    conn: Connection,
    end: End,
}

/// Serve one [`Tx`]: BEGIN, lend the connection, and when it comes back COMMIT (publishing the
/// change feed and running its announcements before the committer hears back) or ROLLBACK.
/// Other writes wait in the queue meanwhile: the holder of a `Tx` bounds how long it keeps it.
/// None only if the connection never came back (a `Tx` leaked): the writer cannot go on.
fn run_session(
    writer: Connection,
    changes: &Changes,
    started: oneshot::Sender<Result<Tx>>,
) -> Option<Connection> {
    if let Err(e) = writer.execute_batch("BEGIN IMMEDIATE") {
        let _ = started.send(Err(e.into()));
        return Some(writer);
    }
    let (back, home) = mpsc::sync_channel(1);
    let tx = Tx {
        conn: Mutex::new(Some(writer)),
        announce: Mutex::new(Vec::new()),
        back,
    };
    // A holder already gone drops the Tx here, which sends the connection home to roll back.
    drop(started.send(Ok(tx)));
    let Ok(Back { conn, end }) = home.recv() else {
        tracing::error!("the write connection lent to a transaction never came back");
        return None;
    };
    match end {
        End::Commit { announce, reply } => {
            changes.committing();
            let out = conn.execute_batch("COMMIT").map_err(StoreError::from);
            if out.is_err() && !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            changes.publish();
            if out.is_ok() {
                for a in announce {
                    a();
                }
            }
            let _ = reply.send(out);
        }
        End::Rollback => {
            let _ = conn.execute_batch("ROLLBACK");
            changes.publish();
        }
    }
    Some(conn)
}

/// Run one job by itself: it is committed when it returns, so publish, then reply.
fn run_alone(
    writer: &mut Connection,
    changes: &Changes,
    f: Box<dyn FnOnce(&mut Connection) -> Finish + Send>,
) {
    // The job commits by itself, somewhere inside `f`.
    changes.committing();
    let finish = f(writer);
    changes.publish();
    finish(true);
}

/// Most jobs one commit carries.
const MAX_BATCH: usize = 64;

/// The writer thread's loop. Group commit: the jobs waiting when the writer gets to them run
/// one after the other inside one transaction, each in its own savepoint (a failing job rolls
/// back only itself), and one COMMIT makes them all durable. Only then do the callers hear
/// back, after the change feed has published what the batch touched.
fn writer_loop(
    mut conn: Connection,
    rx: &mpsc::Receiver<Job>,
    changes: &Changes,
) -> Option<Connection> {
    let mut next: Option<Job> = None;
    loop {
        let job = match next.take() {
            Some(j) => j,
            None => match rx.recv() {
                Ok(j) => {
                    metrics::WRITER_QUEUE.dec();
                    j
                }
                Err(_) => return Some(conn),
            },
        };
        let writer = &mut conn;
        let first = match job {
            Job::Solo(f) => {
                run_alone(writer, changes, f);
                continue;
            }
            Job::Session { started } => {
                conn = run_session(conn, changes, started)?;
                continue;
            }
            Job::Batched(f) => f,
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Job::Batched(f)) => {
                    metrics::WRITER_QUEUE.dec();
                    batch.push(f);
                }
                Ok(solo) => {
                    metrics::WRITER_QUEUE.dec();
                    next = Some(solo);
                    break;
                }
                Err(_) => break,
            }
        }
        // One job, or no shared transaction to be had: each job's savepoint is its own
        // transaction.
        if batch.len() == 1 || writer.execute_batch("BEGIN IMMEDIATE").is_err() {
            for f in batch {
                run_alone(writer, changes, f);
                metrics::group_commit(1);
            }
            continue;
        }
        metrics::group_commit(batch.len());
        let finishers: Vec<Finish> = batch.into_iter().map(|f| f(writer)).collect();
        changes.committing();
        let committed = writer.execute_batch("COMMIT").is_ok();
        if !committed && !writer.is_autocommit() {
            let _ = writer.execute_batch("ROLLBACK");
        }
        changes.publish();
        for finish in finishers {
            finish(committed);
        }
    }
}

/// A transaction lent by the writer, for writes that must see each other and commit or roll
/// back together (a batch). Its steps run right here, on the holder's thread, in the order they
/// are called; each keeps its changes in its own savepoint as ordinary writes do. `commit` sends
/// the connection home to make them durable and announce them; dropping the `Tx` without
/// committing sends it home to roll everything back. The writer serves nothing else while a
/// `Tx` is out, so its holder must bound its life (the batch's timeout).
pub(crate) struct Tx {
    /// The lent connection; None once it has gone home.
    conn: Mutex<Option<Connection>>,
    announce: Mutex<Vec<Announce>>,
    back: mpsc::SyncSender<Back>,
}

impl Tx {
    /// Run `f` in the transaction.
    pub(crate) async fn run<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(Conn<'_>) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        self.run_then(f, None).await
    }

    /// `run`, plus `on_commit`: its announcement runs after the COMMIT of the whole
    /// transaction (in step order), never if the transaction is rolled back.
    pub(crate) async fn run_then<R, F>(&self, f: F, on_commit: Option<OnCommit<R>>) -> Result<R>
    where
        F: FnOnce(Conn<'_>) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        let guard = self.conn.lock().map_err(|_| StoreError::WriterGone)?;
        let conn = guard.as_ref().ok_or(StoreError::WriterGone)?;
        let out = f(Conn(conn));
        drop(guard);
        if let (Ok(r), Some(hook)) = (&out, on_commit)
            && let Some(a) = hook(r)
        {
            self.announce
                .lock()
                .map_err(|_| StoreError::WriterGone)?
                .push(a);
        }
        out
    }

    /// The connection, taken to send it home (None when it already went).
    fn take(&mut self) -> Option<Connection> {
        self.conn
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Commit every step; announcements run, then this returns.
    pub(crate) async fn commit(mut self) -> Result<()> {
        let conn = self.take().ok_or(StoreError::WriterGone)?;
        let announce = std::mem::take(
            self.announce
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let (reply, rx) = oneshot::channel();
        let end = End::Commit { announce, reply };
        self.back
            .send(Back { conn, end })
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }
}

impl Drop for Tx {
    /// Not committed: home to roll back.
    fn drop(&mut self) {
        if let Some(conn) = self.take() {
            let _ = self.back.send(Back {
                conn,
                end: End::Rollback,
            });
        }
    }
}

pub(crate) struct Store {
    writer: Mutex<Option<mpsc::Sender<Job>>>,
    writer_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    reader_permits: Semaphore,
    schema: ArcSwap<Schema>,
    changes: Arc<Changes>,
    /// Row counts and sorted firsts carried over inserts.
    carried: Carried,
    /// The plugins' key/value store (`plugin_kv.db`); None when it could not be opened.
    kv: Option<kv::Kv>,
    /// The request logs (`auxiliary.db`).
    logs: logs::LogDb,
}

/// Apply the PRAGMAs every connection gets. Kept in one place so no connection is opened without them.
fn configure(conn: &Connection, cfg: &StoreConfig, writer: bool) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_millis(cfg.busy_timeout_ms))?;
    if writer {
        // WAL lets readers run while the single writer commits; it is a property of the file.
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "journal_size_limit", cfg.journal_size_limit)?;
        conn.pragma_update(None, "wal_autocheckpoint", cfg.wal_autocheckpoint)?;
    }
    // In WAL mode NORMAL makes a COMMIT durable against a crash of this process (the WAL is
    // written before COMMIT returns, fsynced at checkpoints); FULL also fsyncs it at every
    // COMMIT, for power loss. Either way nothing is announced before COMMIT returns.
    conn.pragma_update(None, "synchronous", cfg.synchronous.pragma())?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -cfg.cache_size_kib)?;
    conn.set_prepared_statement_cache_capacity(256);
    // Plans must not depend on bound values: otherwise every new LIKE pattern re-prepares the
    // cached statement (perf showed sqlite3Reprepare at ~7% of the filtered-list benchmark).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    register_functions(conn)
}

/// SQL functions the query language needs that this SQLite build lacks: the math functions
/// `geoDistance` lowers to (PocketBase's SQLite has them built in).
pub(crate) fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    type Unary = fn(f64) -> f64;
    let unary: [(&str, Unary); 4] = [
        ("acos", f64::acos),
        ("cos", f64::cos),
        ("sin", f64::sin),
        ("radians", f64::to_radians),
    ];
    for (name, f) in unary {
        conn.create_scalar_function(name, 1, flags, move |ctx| {
            // SQLite's math functions answer NULL for NULL and for non-numeric text.
            Ok(match ctx.get_raw(0) {
                rusqlite::types::ValueRef::Integer(i) => Some(f(i as f64)),
                rusqlite::types::ValueRef::Real(r) => Some(f(r)),
                rusqlite::types::ValueRef::Text(t) => std::str::from_utf8(t)
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .map(f),
                _ => None,
            }
            .filter(|v| !v.is_nan()))
        })?;
    }
    Ok(())
}

fn open_writer(path: &Path, cfg: &StoreConfig) -> Result<Connection> {
    let conn = Connection::open(path)?;
    configure(&conn, cfg, true)?;
    Ok(conn)
}

fn open_reader(path: &Path, cfg: &StoreConfig) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags)?;
    configure(&conn, cfg, false)?;
    if cfg.mmap_mib > 0 {
        conn.pragma_update(None, "mmap_size", cfg.mmap_mib.saturating_mul(1 << 20))?;
    }
    Ok(conn)
}

/// Read every collection from `_collections`.
pub(crate) fn load_collections(conn: &Connection) -> Result<Vec<Collection>> {
    let mut stmt = conn.prepare(
        "SELECT id, system, type, name, fields, indexes, listRule, viewRule, createRule, updateRule, deleteRule, \
         options, created, updated FROM _collections ORDER BY rowid",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, bool>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            json_column(r, 4)?,
            json_column(r, 5)?,
            Rules {
                list: r.get(6)?,
                view: r.get(7)?,
                create: r.get(8)?,
                update: r.get(9)?,
                delete: r.get(10)?,
            },
            json_column(r, 11)?,
            r.get::<_, String>(12)?,
            r.get::<_, String>(13)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, system, kind, name, fields, indexes, rules, options, created, updated) = row?;
        out.push(
            define::from_row(
                id, system, &kind, name, &fields, &indexes, rules, &options, created, updated,
            )
            .map_err(StoreError::Schema)?,
        );
    }
    Ok(out)
}

/// PocketBase's JSON columns may hold TEXT or BLOB.
fn json_column(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<String> {
    use rusqlite::types::ValueRef;
    Ok(match r.get_ref(i)? {
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Null => String::new(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
    })
}

impl Store {
    /// Open (creating on first start) `dir/data.db` and `dir/auxiliary.db`.
    pub(crate) fn open(dir: &Path, cfg: &StoreConfig) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let data = dir.join("data.db");
        let mut writer = open_writer(&data, cfg)?;
        bootstrap::ensure_data(&mut writer)?;
        let aux = open_writer(&dir.join("auxiliary.db"), cfg)?;
        bootstrap::ensure_aux(&aux)?;
        drop(aux);
        let logs = logs::LogDb::open(&dir.join("auxiliary.db"), cfg)?;
        let schema = Schema::new(load_collections(&writer)?);

        let n = cfg.n_readers.max(1);
        let mut readers = Vec::with_capacity(n);
        for _ in 0..n {
            readers.push(open_reader(&data, cfg)?);
        }

        let changes = Changes::new();
        let feed = Arc::clone(&changes);
        writer.update_hook(Some(
            move |action: rusqlite::hooks::Action, _: &str, table: &str, rowid: i64| {
                feed.touch(table, action.into(), rowid);
            },
        ));

        let (tx, rx) = mpsc::channel::<Job>();
        let feed = Arc::clone(&changes);
        // wal_autocheckpoint = 0 means checkpoints are someone else's (Litestream's, while
        // replication is on: a TRUNCATE of ours could reset the WAL under it).
        let truncate_on_close = cfg.wal_autocheckpoint > 0;
        // One thread owns the only write connection: every write and transaction runs here in
        // order, so writers never contend for SQLite's lock and readers never wait on them.
        let handle = std::thread::Builder::new()
            .name("ferrobase-writer".into())
            .stack_size(crate::THREAD_STACK_BYTES)
            .spawn(move || {
                crate::batch_thread();
                // Last act before the process lets go of the file: fold the WAL back in.
                if let Some(writer) = writer_loop(writer, &rx, &feed)
                    && truncate_on_close
                {
                    let _ = writer.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
                }
            })?;

        Ok(Self {
            writer: Mutex::new(Some(tx)),
            writer_thread: Mutex::new(Some(handle)),
            readers: Mutex::new(readers),
            reader_permits: Semaphore::new(n),
            schema: ArcSwap::from_pointee(schema),
            carried: Carried::new(Arc::clone(&changes)),
            changes,
            logs,
            kv: match kv::Kv::open(dir, cfg.synchronous) {
                Ok(k) => Some(k),
                Err(e) => {
                    tracing::warn!(error = %e, "plugin key/value store unavailable");
                    None
                }
            },
        })
    }

    /// The change feed: stamps and per-table versions for caches.
    pub(crate) fn changes(&self) -> &Changes {
        &self.changes
    }

    /// Row counts and sorted firsts carried over inserts.
    pub(crate) fn carried(&self) -> &Carried {
        &self.carried
    }

    /// The plugins' key/value store.
    pub(crate) fn kv(&self) -> Option<&kv::Kv> {
        self.kv.as_ref()
    }

    /// The request logs.
    pub(crate) fn logs(&self) -> &logs::LogDb {
        &self.logs
    }

    /// The current schema snapshot. Load once per request.
    pub(crate) fn schema(&self) -> Arc<Schema> {
        self.schema.load_full()
    }

    fn send(&self, job: Job) -> Result<()> {
        let guard = self.writer.lock().map_err(|_| StoreError::WriterGone)?;
        guard
            .as_ref()
            .ok_or(StoreError::WriterGone)?
            .send(job)
            .map_err(|_| StoreError::WriterGone)?;
        metrics::WRITER_QUEUE.inc();
        Ok(())
    }

    /// Run a data write on the writer thread and wait until it is committed. `f` must keep its
    /// changes inside `conn.savepoint(..)`: it may run inside a group commit with other writes,
    /// and its result is delivered only after that commit.
    pub(crate) async fn write<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(Conn<'_>) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        self.write_then(f, None).await
    }

    /// `write`, plus `on_commit`: run on the writer right after the COMMIT that made `f`'s
    /// result durable (never for a failed or rolled-back write), before anyone hears back.
    /// Jobs commit in queue order, so these run in commit order.
    pub(crate) async fn write_then<R, F>(&self, f: F, on_commit: Option<OnCommit<R>>) -> Result<R>
    where
        F: FnOnce(Conn<'_>) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Batched(Box::new(move |conn| {
            let out = f(Conn(conn));
            Box::new(move |committed| {
                let out = match out {
                    Ok(_) if !committed => Err(StoreError::Invalid(
                        "the write could not be committed".into(),
                    )),
                    other => other,
                };
                if let (Ok(r), Some(hook)) = (&out, on_commit)
                    && let Some(announce) = hook(r)
                {
                    announce();
                }
                let _ = tx.send(out);
            })
        })))?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Borrow the writer's connection in an open transaction, for steps that depend on each
    /// other's results (a batch): see [`Tx`]. Waits for the writes queued before it.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        let (started, begun) = oneshot::channel();
        self.send(Job::Session { started })?;
        begun.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Run `f` alone on the writer (no group commit, no transaction of ours around it).
    async fn write_solo<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut Connection) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Solo(Box::new(move |conn| {
            let out = f(conn);
            // Delivered only after the change feed published what `f` touched.
            Box::new(move |_| {
                let _ = tx.send(out);
            })
        })))?;
        rx.await.map_err(|_| StoreError::WriterGone)?
    }

    /// A solo write for callers outside the async runtime (the CLI).
    fn write_blocking<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(&mut Connection) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::channel();
        self.send(Job::Solo(Box::new(move |conn| {
            let out = f(conn);
            Box::new(move |_| {
                let _ = tx.send(out);
            })
        })))?;
        rx.recv().map_err(|_| StoreError::WriterGone)?
    }

    /// A schema-changing write: runs `f` in a transaction on the writer, then reloads and swaps the
    /// snapshot before anyone can observe the new tables.
    pub(crate) async fn write_schema<R, F>(self: &Arc<Self>, f: F) -> Result<R>
    where
        F: FnOnce(Conn<'_>) -> Result<R> + Send + 'static,
        R: Send + 'static,
    {
        let me = Arc::clone(self);
        // Alone: the new snapshot must not be published before its tables are committed.
        self.write_solo(move |conn| {
            me.changes.schema_changed();
            let tx = conn.transaction()?;
            let out = f(Conn(&tx))?;
            let collections = load_collections(&tx)?;
            tx.commit()?;
            me.schema.store(Arc::new(Schema::new(collections)));
            Ok(out)
        })
        .await
    }

    /// `read` inside one read transaction: every statement `f` runs sees the same snapshot.
    pub(crate) async fn read_snapshot<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(Conn<'_>) -> Result<R> + Send,
        R: Send,
    {
        self.read(move |conn| {
            let tx = conn.0.unchecked_transaction()?;
            f(Conn(&tx))
        })
        .await
    }

    /// Run `f` on a read-only connection from the pool, on the calling worker (so `f` may borrow
    /// from its caller).
    pub(crate) async fn read<R, F>(&self, f: F) -> Result<R>
    where
        F: FnOnce(Conn<'_>) -> Result<R> + Send,
        R: Send,
    {
        let permit = match self.reader_permits.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                let asked = std::time::Instant::now();
                let p = self
                    .reader_permits
                    .acquire()
                    .await
                    .map_err(|_| StoreError::WriterGone)?;
                metrics::reader_wait(asked.elapsed());
                p
            }
        };
        // Inline on the calling worker: reads are short, and handing each one to a blocking
        // thread cost two context switches and a thread's malloc arena per reader (measured:
        // see ARCHITECTURE.md). A slow read delays only this worker's queue; other workers steal.
        let conn = self
            .readers
            .lock()
            .map_err(|_| StoreError::WriterGone)?
            .pop()
            .ok_or(StoreError::WriterGone)?;
        let out = f(Conn(&conn));
        if let Ok(mut pool) = self.readers.lock() {
            pool.push(conn);
        }
        drop(permit);
        out
    }

    /// PocketBase's `__pbDBOptimize__`: let SQLite refresh the planner's statistics where they
    /// are stale (`PRAGMA optimize`, cheap when nothing changed). New statistics may change
    /// plans, which carried sorts depend on (see `store::carried`): they read again.
    pub(crate) async fn optimize(&self) -> Result<()> {
        let changes = Arc::clone(&self.changes);
        self.write(move |c| {
            changes.schema_changed();
            Ok(c.0.execute_batch("PRAGMA optimize;")?)
        })
        .await
    }

    /// Stop the writer after the queued jobs ran, and checkpoint the WAL; write the queued
    /// request logs.
    pub(crate) fn close(&self) {
        self.logs.close();
        if let Ok(mut w) = self.writer.lock() {
            w.take();
        }
        if let Ok(mut h) = self.writer_thread.lock()
            && let Some(h) = h.take()
        {
            let _ = h.join();
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn cfg() -> StoreConfig {
        StoreConfig {
            mmap_mib: 0,
            cache_size_kib: 16000,
            journal_size_limit: 200_000_000,
            wal_autocheckpoint: 1_000,
            busy_timeout_ms: 10_000,
            n_readers: 2,
            synchronous: crate::config::Synchronous::Normal,
        }
    }

    #[test]
    fn queued_request_logs_are_all_written_by_the_close() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &cfg()).unwrap();
        let facts = |i: usize| crate::logs::RequestFacts {
            method: "get".into(),
            uri: format!("/api/health?i={i}"),
            status: 200,
            exec_ms: 0.5,
            referer: String::new(),
            user_agent: "t".into(),
            auth: None,
            user_ip: "127.0.0.1".into(),
            remote_ip: "127.0.0.1".into(),
            error: None,
        };
        let logs = crate::settings::Logs::default();
        // More than two full batches (and one statement's worth more): the rest waits for its
        // time or the close.
        for i in 0..2_077 {
            crate::logs::record(&store, &logs, facts(i));
        }
        // Below minLevel: never queued.
        let quiet = crate::settings::Logs {
            min_level: 1,
            ..logs
        };
        crate::logs::record(&store, &quiet, facts(9_999));
        store.close();
        let conn = Connection::open(dir.path().join("auxiliary.db")).unwrap();
        let (n, ids, ordered): (i64, i64, i64) = conn
            .query_row(
                "SELECT COUNT(*), COUNT(DISTINCT id), \
                 (SELECT COUNT(*) FROM _logs a JOIN _logs b ON b.rowid = a.rowid + 1 WHERE b.id > a.id) \
                 FROM _logs",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((n, ids, ordered), (2_077, 2_077, 2_076));
        let last: String = conn
            .query_row(
                "SELECT message FROM _logs ORDER BY rowid DESC LIMIT 1",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(last, "GET /api/health?i=2076");
    }

    #[test]
    fn pragmas_are_applied_on_writer_and_readers() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &cfg()).unwrap();
        let (mode, fk, sync, cache) = store
            .write_blocking(|c| {
                Ok((
                    c.query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))?,
                    c.query_row("PRAGMA foreign_keys", [], |r| r.get::<_, i64>(0))?,
                    c.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))?,
                    c.query_row("PRAGMA cache_size", [], |r| r.get::<_, i64>(0))?,
                ))
            })
            .unwrap();
        assert_eq!((mode.as_str(), fk, sync, cache), ("wal", 1, 1, -16000));
        let pool = store.readers.lock().unwrap();
        assert_eq!(pool.len(), 2);
        for r in pool.iter() {
            assert_eq!(
                r.query_row("PRAGMA foreign_keys", [], |r| r.get::<_, i64>(0))
                    .unwrap(),
                1
            );
            assert_eq!(
                r.query_row("PRAGMA temp_store", [], |r| r.get::<_, i64>(0))
                    .unwrap(),
                2
            );
            assert!(
                r.execute("CREATE TABLE nope (a)", []).is_err(),
                "readers must be read-only"
            );
        }
    }

    #[test]
    fn synchronous_full_reaches_every_file_of_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let full = StoreConfig {
            synchronous: Synchronous::Full,
            ..cfg()
        };
        let store = Store::open(dir.path(), &full).unwrap();
        // SQLite numbers the levels OFF 0, NORMAL 1, FULL 2.
        fn level(c: &Connection) -> i64 {
            c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap()
        }
        assert_eq!(store.write_blocking(|c| Ok(level(c))).unwrap(), 2);
        for r in store.readers.lock().unwrap().iter() {
            assert_eq!(level(r), 2);
        }
        assert_eq!(level(&store.kv().unwrap().conn.lock().unwrap()), 2);
        assert_eq!(store.logs().synchronous(), 2);
    }

    #[test]
    fn a_fresh_store_has_the_system_collections() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &cfg()).unwrap();
        let s = store.schema();
        assert_eq!(s.by_name("_superusers").unwrap().id, "pbc_3142635823");
        assert_eq!(s.by_name("users").unwrap().id, "_pb_users_auth_");
        for n in ["_mfas", "_otps", "_externalAuths", "_authOrigins"] {
            assert!(s.by_name(n).is_some_and(|c| c.system), "{n}");
        }
        assert!(dir.path().join("auxiliary.db").exists());
    }

    /// Writes that land together share a commit, but each one's failure rolls back only itself.
    #[tokio::test]
    async fn group_commit_keeps_each_write_all_or_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), &cfg()).unwrap());
        let mut tasks = Vec::new();
        for i in 0..40 {
            let s = Arc::clone(&store);
            tasks.push(tokio::spawn(async move {
                s.write(move |c| {
                    c.savepoint(|sp| {
                        sp.0.execute(
                            "INSERT INTO _params (id, value) VALUES (?1, '1')",
                            [format!("gc{i}")],
                        )?;
                        if i % 2 == 1 {
                            return Err(StoreError::Invalid("odd".into()));
                        }
                        Ok(Keep::Commit(i))
                    })
                })
                .await
            }));
        }
        let mut ok = 0;
        for t in tasks {
            if t.await.unwrap().is_ok() {
                ok += 1;
            }
        }
        assert_eq!(ok, 20);
        let n: i64 = store
            .read(|c| {
                Ok(c.0.query_row(
                    "SELECT count(*) FROM _params WHERE id LIKE 'gc%'",
                    [],
                    |r| r.get(0),
                )?)
            })
            .await
            .unwrap();
        assert_eq!(
            n, 20,
            "the failed writes left nothing, the others all committed"
        );
    }

    #[tokio::test]
    async fn reads_do_not_wait_for_a_busy_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), &cfg()).unwrap());
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let s2 = Arc::clone(&store);
        // The writer sits inside an open write transaction until told to finish.
        let w = tokio::spawn(async move {
            s2.write(move |c| {
                c.savepoint(|sp| {
                    sp.0.execute("INSERT INTO _params (id, value) VALUES ('held', '1')", [])?;
                    let _ = hold_rx.recv();
                    Ok(Keep::Commit(()))
                })
            })
            .await
        });
        let n = store
            .read(|c| {
                Ok(c.0
                    .query_row("SELECT count(*) FROM _collections", [], |r| {
                        r.get::<_, i64>(0)
                    })?)
            })
            .await
            .unwrap();
        assert_eq!(n, 6);
        hold_tx.send(()).unwrap();
        w.await.unwrap().unwrap();
        let n = store
            .read(|c| {
                Ok(c.0
                    .query_row("SELECT count(*) FROM _params WHERE id='held'", [], |r| {
                        r.get::<_, i64>(0)
                    })?)
            })
            .await
            .unwrap();
        assert_eq!(n, 1);
    }

    /// `[store] mmap_mib` maps data.db into the readers (and only them); 0 leaves it unmapped.
    #[tokio::test]
    async fn readers_map_the_file_as_configured_and_the_writer_never() {
        for mib in [0_i64, 64] {
            let dir = tempfile::tempdir().unwrap();
            let store = Store::open(
                dir.path(),
                &StoreConfig {
                    mmap_mib: mib,
                    ..cfg()
                },
            )
            .unwrap();
            let mapped: i64 = store
                .read(|c| Ok(c.0.query_row("PRAGMA mmap_size", [], |r| r.get(0))?))
                .await
                .unwrap();
            assert_eq!(mapped, mib << 20);
            let writer: i64 = store
                .write(|c| Ok(c.0.query_row("PRAGMA mmap_size", [], |r| r.get(0))?))
                .await
                .unwrap();
            assert_eq!(writer, 0);
        }
    }
}
