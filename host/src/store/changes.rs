//! The change feed: which tables a write touched, as versions readers can compare.
//!
//! SQLite's update hook on the writer connection records every table a write job changes (rows
//! of cascades and table rebuilds included). When the job ends, and before its caller hears
//! back, each touched table gets a new version from one monotonic counter. A reader that took a
//! [`Stamp`] before it read can later tell whether anything it depended on changed since: that
//! is how caches stay correct without ever serving a response older than a committed write.
//!
//! Updates and deletes are also kept per row (by rowid, a bounded log per table), so a result
//! that shows one known row (a record's view) stays valid while other rows of its table change.
//! Deletes are also versioned on their own, so a table's row count can be carried over inserts
//! (`carried.rs`).
//!
//! A commit and its publication are two steps: between them a reader's snapshot may hold rows
//! the versions do not tell of yet. [`Changes::settled`] says when no commit is between the two.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// The counter value when a reader started; everything committed before it is visible to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp(u64);

#[derive(Debug, Default)]
pub(crate) struct Changes {
    counter: AtomicU64,
    /// Lowercased table name -> counter value at its last change.
    versions: RwLock<HashMap<String, u64>>,
    /// The same, counting only updates and deletes (changes to rows that existed before).
    rewrites: RwLock<HashMap<String, u64>>,
    /// The same, counting only what can lower a table's row count or hand out a rowid below
    /// its highest: deletes, and any write of a plugin's own SQL.
    removals: RwLock<HashMap<String, u64>>,
    /// The counter value at the last write that may have removed rows anywhere (a schema
    /// change: tables are rebuilt and renamed without the update hook hearing of it).
    removed_everywhere: AtomicU64,
    /// Odd while the writer is between a commit (or the start of a job that commits by itself)
    /// and the publication of what it touched.
    committing: AtomicU64,
    /// Per table, the rows updated or deleted lately, with their versions.
    rows: RwLock<HashMap<String, RowLog>>,
    /// Tables touched by the job running on the writer now: whether any existing row was
    /// updated or deleted, and which (only the writer thread uses it).
    touched: Mutex<HashMap<String, Touched>>,
}

/// Rows of one table a write job updated or deleted.
#[derive(Debug, Default)]
struct Touched {
    rewrite: bool,
    removal: bool,
    /// The rowids, until [`ROWS_PER_JOB`]; past it, `many`.
    rows: Vec<i64>,
    many: bool,
}

/// Most rewritten rows one job notes per table (past it, the table's log starts over).
const ROWS_PER_JOB: usize = 256;
/// Most rows a table's log holds (past it, it starts over).
const ROWS_PER_TABLE: usize = 8192;

/// One table's recently rewritten rows. What is older than `floor` is forgotten: a stamp from
/// before it cannot be told apart from any row's rewrite.
#[derive(Debug, Default)]
struct RowLog {
    floor: u64,
    rows: HashMap<i64, u64>,
}

/// What a write did to one row, as SQLite's update hook tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowChange {
    Insert,
    Update,
    Delete,
}

impl From<rusqlite::hooks::Action> for RowChange {
    fn from(action: rusqlite::hooks::Action) -> Self {
        match action {
            rusqlite::hooks::Action::SQLITE_INSERT => RowChange::Insert,
            rusqlite::hooks::Action::SQLITE_DELETE => RowChange::Delete,
            _ => RowChange::Update,
        }
    }
}

thread_local! {
    /// Set on the writer thread while a plugin's own SQL statement runs (see [`Changes::raw`]).
    static RAW: Cell<bool> = const { Cell::new(false) };
}

impl Stamp {
    /// Was this stamp taken at or after `other`?
    pub(crate) fn not_before(self, other: Stamp) -> bool {
        self.0 >= other.0
    }
}

impl Changes {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Take before reading anything a cached result will depend on.
    pub(crate) fn stamp(&self) -> Stamp {
        Stamp(self.counter.load(Ordering::Acquire))
    }

    /// Has none of `tables` (lowercase names) changed since `stamp`?
    pub(crate) fn unchanged_since<'a>(
        &self,
        stamp: Stamp,
        tables: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        none_newer(&self.versions, stamp, tables)
    }

    /// Has no row that existed at `stamp` been updated or deleted in `tables` since? (Inserts
    /// do not count: for a result that reads one known row they change nothing.)
    pub(crate) fn rows_unchanged_since<'a>(
        &self,
        stamp: Stamp,
        tables: impl IntoIterator<Item = &'a str>,
    ) -> bool {
        none_newer(&self.rewrites, stamp, tables)
    }

    /// Has the row `rowid` of `table` (lowercase), which existed at `stamp`, been neither
    /// updated nor deleted since? False when the table's log no longer reaches back that far.
    pub(crate) fn row_unchanged_since(&self, stamp: Stamp, table: &str, rowid: i64) -> bool {
        if none_newer(&self.rewrites, stamp, [table]) {
            return true;
        }
        let Ok(logs) = self.rows.read() else {
            return false;
        };
        logs.get(table).is_some_and(|log| {
            log.floor <= stamp.0 && log.rows.get(&rowid).is_none_or(|&at| at <= stamp.0)
        })
    }

    /// Called by the update hook for each changed row.
    pub(crate) fn touch(&self, table: &str, change: RowChange, rowid: i64) {
        let raw = RAW.with(Cell::get);
        if let Ok(mut t) = self.touched.lock() {
            let e = match t.get_mut(table) {
                Some(e) => e,
                None => t.entry(table.to_owned()).or_default(),
            };
            if raw {
                // SQLite does not call the hook for rows a REPLACE conflict deletes, and a
                // plugin's INSERT may choose its rowid: any row may have changed.
                e.rewrite = true;
                e.removal = true;
                e.many = true;
                return;
            }
            if change == RowChange::Insert {
                return;
            }
            e.rewrite = true;
            e.removal |= change == RowChange::Delete;
            if e.rows.len() < ROWS_PER_JOB {
                e.rows.push(rowid);
            } else {
                e.many = true;
            }
        }
    }

    /// Run `f` (a plugin's own SQL statement, on the writer thread) so that whatever it writes
    /// counts as a change to every row of the tables it touches.
    pub(crate) fn raw<R>(f: impl FnOnce() -> R) -> R {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                RAW.with(|r| r.set(false));
            }
        }
        RAW.with(|r| r.set(true));
        let _reset = Reset;
        f()
    }

    /// Note that the job running now changed the schema: rows anywhere may have been removed or
    /// renumbered. Takes effect with the job's publication.
    pub(crate) fn schema_changed(&self) {
        if let Ok(mut t) = self.touched.lock() {
            t.entry(SCHEMA.to_owned()).or_default().removal = true;
        }
    }

    /// Called by the writer before a commit (or before a job that commits by itself): until
    /// [`Changes::publish`], readers' snapshots may hold what the versions do not tell of yet.
    pub(crate) fn committing(&self) {
        if self.committing.load(Ordering::Relaxed).is_multiple_of(2) {
            self.committing.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Wait (briefly) until every commit a snapshot opened before now holds is published.
    /// False when the writer stayed between a commit and its publication past `patience` (a
    /// long job): the caller then trusts nothing carried over.
    pub(crate) fn settled(&self, patience: std::time::Duration) -> bool {
        let seen = self.committing.load(Ordering::SeqCst);
        if seen.is_multiple_of(2) {
            return true;
        }
        let until = std::time::Instant::now() + patience;
        loop {
            std::thread::yield_now();
            if self.committing.load(Ordering::SeqCst) != seen {
                return true;
            }
            if std::time::Instant::now() >= until {
                return false;
            }
        }
    }

    /// What the write job on the writer now has done to `table` (lowercase) so far: whether
    /// it updated (or removed) rows, and whether it removed any. Once a reader is not
    /// [`settled`](Changes::settled), the one commit its snapshot may hold unpublished is this
    /// job's, and all of its changes are noted by then (they come before its COMMIT).
    pub(crate) fn in_flight(&self, table: &str) -> (bool, bool) {
        let Ok(t) = self.touched.lock() else {
            return (true, true);
        };
        let schema = t.get(SCHEMA).is_some_and(|e| e.removal);
        t.iter()
            .filter(|(name, _)| name.eq_ignore_ascii_case(table))
            .fold((schema, schema), |(rw, rm), (_, e)| {
                (rw || e.rewrite, rm || e.removal)
            })
    }

    /// Has nothing been removed from `table` (lowercase) since `stamp`: no delete, no plugin
    /// SQL write, no schema change published after it?
    pub(crate) fn nothing_removed_since(&self, stamp: Stamp, table: &str) -> bool {
        self.removed_everywhere.load(Ordering::Acquire) <= stamp.0
            && none_newer(&self.removals, stamp, [table])
    }

    /// Called when a write job ends: publish new versions for what it touched.
    pub(crate) fn publish(&self) {
        self.publish_touched();
        if !self.committing.load(Ordering::Relaxed).is_multiple_of(2) {
            self.committing.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn publish_touched(&self) {
        let touched: Vec<(String, Touched)> = match self.touched.lock() {
            Ok(mut t) if !t.is_empty() => t.drain().collect(),
            _ => return,
        };
        let (Ok(mut v), Ok(mut r), Ok(mut d), Ok(mut logs)) = (
            self.versions.write(),
            self.rewrites.write(),
            self.removals.write(),
            self.rows.write(),
        ) else {
            return;
        };
        // Versions are written before the counter moves: a reader whose stamp includes this
        // change also sees the new versions.
        let next = self.counter.load(Ordering::Acquire) + 1;
        for (t, touch) in touched {
            if t == SCHEMA {
                self.removed_everywhere.store(next, Ordering::Release);
                continue;
            }
            let t = t.to_ascii_lowercase();
            if touch.removal {
                d.insert(t.clone(), next);
            }
            if touch.rewrite {
                r.insert(t.clone(), next);
                let log = logs.entry(t.clone()).or_default();
                if touch.many || log.rows.len() + touch.rows.len() > ROWS_PER_TABLE {
                    // Too many to keep: forget them all, the ones of this job included.
                    log.rows.clear();
                    log.floor = next;
                } else {
                    for row in touch.rows {
                        log.rows.insert(row, next);
                    }
                }
            }
            v.insert(t, next);
        }
        self.counter.store(next, Ordering::Release);
    }
}

/// The key [`Changes::schema_changed`] notes under (no table's name holds a NUL).
const SCHEMA: &str = "\0schema";

fn none_newer<'a>(
    versions: &RwLock<HashMap<String, u64>>,
    stamp: Stamp,
    tables: impl IntoIterator<Item = &'a str>,
) -> bool {
    let Ok(v) = versions.read() else {
        return false;
    };
    tables
        .into_iter()
        .all(|t| v.get(t).is_none_or(|&at| at <= stamp.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_sees_later_changes_only_to_its_tables() {
        let c = Changes::new();
        let before = c.stamp();
        assert!(c.unchanged_since(before, ["posts"]));
        c.touch("posts", RowChange::Insert, 1);
        c.publish();
        assert!(!c.unchanged_since(before, ["posts", "users"]));
        assert!(
            c.rows_unchanged_since(before, ["posts"]),
            "an insert rewrites no row"
        );
        c.touch("posts", RowChange::Update, 1);
        c.publish();
        assert!(!c.rows_unchanged_since(before, ["posts"]));
        assert!(c.unchanged_since(before, ["users"]));
        let after = c.stamp();
        assert!(c.unchanged_since(after, ["posts"]));
        c.publish(); // nothing touched: no new version
        assert_eq!(c.stamp(), after);
    }

    #[test]
    fn a_row_stays_unchanged_while_other_rows_of_its_table_change() {
        let c = Changes::new();
        let before = c.stamp();
        c.touch("Posts", RowChange::Insert, 7); // an insert: no row rewritten
        c.publish();
        assert!(c.row_unchanged_since(before, "posts", 1));
        c.touch("Posts", RowChange::Update, 2);
        c.touch("Posts", RowChange::Update, 3);
        c.publish();
        assert!(c.row_unchanged_since(before, "posts", 1));
        assert!(!c.row_unchanged_since(before, "posts", 2));
        assert!(!c.row_unchanged_since(before, "posts", 3));
        let mid = c.stamp();
        assert!(
            c.row_unchanged_since(mid, "posts", 2),
            "a rewrite before the stamp"
        );
        c.touch("posts", RowChange::Update, 1);
        c.publish();
        assert!(!c.row_unchanged_since(before, "posts", 1));
        assert!(!c.row_unchanged_since(mid, "posts", 1));
        assert!(c.row_unchanged_since(mid, "posts", 3));
        assert!(c.row_unchanged_since(before, "users", 1), "another table");
    }

    #[test]
    fn a_log_that_overflows_forgets_what_came_before_and_says_so() {
        let c = Changes::new();
        let before = c.stamp();
        // One job rewriting more rows than it notes: every row counts as changed.
        for row in 0..=ROWS_PER_JOB as i64 {
            c.touch("posts", RowChange::Update, row);
        }
        c.publish();
        let after_many = c.stamp();
        assert!(!c.row_unchanged_since(before, "posts", 1_000_000));
        assert!(c.row_unchanged_since(after_many, "posts", 1));
        // A table's log past its bound starts over: stamps from before the restart are unsure.
        let mut n = 0i64;
        while n <= ROWS_PER_TABLE as i64 {
            for _ in 0..ROWS_PER_JOB / 2 {
                c.touch("posts", RowChange::Update, 10_000_000 + n);
                n += 1;
            }
            c.publish();
        }
        assert!(!c.row_unchanged_since(after_many, "posts", 5));
        let last = c.stamp();
        c.touch("posts", RowChange::Update, 1);
        c.publish();
        assert!(c.row_unchanged_since(last, "posts", 5));
        assert!(!c.row_unchanged_since(last, "posts", 1));
    }

    /// SQLite does not tell the update hook of the row a REPLACE conflict deletes: a plugin's
    /// `REPLACE` of a record by id would leave its old rowid looking untouched (and a cached
    /// view of it served). Under [`Changes::raw`] every row of the table counts as changed.
    #[test]
    fn a_plugin_statement_changes_every_row_of_its_table() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE posts (id TEXT PRIMARY KEY NOT NULL, t TEXT);
             INSERT INTO posts VALUES ('a', '1'), ('b', '2');",
        )
        .unwrap();
        let c = Changes::new();
        let feed = Arc::clone(&c);
        conn.update_hook(Some(
            move |a: rusqlite::hooks::Action, _: &str, table: &str, rowid: i64| {
                feed.touch(table, a.into(), rowid);
            },
        ));
        let replace = "REPLACE INTO posts VALUES ('a', 'x')";
        let before = c.stamp();
        conn.execute(replace, []).unwrap();
        c.publish();
        assert!(
            c.row_unchanged_since(before, "posts", 1),
            "what the hook alone hears: only an insert"
        );
        assert!(c.nothing_removed_since(before, "posts"));
        let before = c.stamp();
        Changes::raw(|| conn.execute("REPLACE INTO posts VALUES ('b', 'y')", [])).unwrap();
        c.publish();
        assert!(!c.row_unchanged_since(before, "posts", 2));
        assert!(!c.nothing_removed_since(before, "posts"));
        assert!(!RAW.with(Cell::get), "raw ends with its statement");
    }

    #[test]
    fn a_job_in_flight_tells_what_it_did_to_each_table() {
        let c = Changes::new();
        c.committing();
        c.touch("Posts", RowChange::Insert, 9);
        assert_eq!(c.in_flight("posts"), (false, false), "inserts only");
        assert!(!c.settled(std::time::Duration::from_millis(1)));
        c.touch("posts", RowChange::Update, 3);
        assert_eq!(c.in_flight("posts"), (true, false));
        c.touch("posts", RowChange::Delete, 4);
        assert_eq!(c.in_flight("posts"), (true, true));
        assert_eq!(c.in_flight("users"), (false, false));
        c.schema_changed();
        assert_eq!(
            c.in_flight("users"),
            (true, true),
            "a schema change reaches every table"
        );
        c.publish();
        assert!(c.settled(std::time::Duration::ZERO));
        assert_eq!(c.in_flight("posts"), (false, false));
    }
}
