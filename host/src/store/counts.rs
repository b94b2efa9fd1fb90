//! Table row counts carried over inserts: a table's count, once read, is topped up with the
//! rows inserted since instead of being counted again.
//!
//! A list's total (`SELECT count(*)` with no filter) walks the smallest index of the whole
//! table: about 7 ms at a million rows, paid again by the first list after every write, since
//! any write drops the list's cached response. Most writes are inserts, and SQLite gives a new
//! row a rowid above every existing one, so the rows a count has not seen yet are exactly those
//! above the highest rowid it saw, and counting them is a short range walk.
//!
//! That holds while no row was removed in between, and while every row the reader's snapshot
//! holds beyond the known count is above the known highest rowid. The change feed tells the
//! first (deletes, plugin SQL and schema changes are versioned on their own:
//! [`Changes::nothing_removed_since`]); stamps and [`Changes::settled`] bound which commits a
//! snapshot holds:
//! - a snapshot opened after stamp `before` was taken holds every commit published by then;
//! - once the writer is settled after the snapshot opened, every commit the snapshot holds is
//!   published, so the stamp taken then (`after`) bounds it from above.
//!
//! A known count was read in a snapshot somewhere between its `from` and `to` stamps. A reader
//! whose snapshot opened after `before` may use it when `to` is not after `before` (the known
//! snapshot is no newer than the reader's) and nothing was removed since `from`.

use super::changes::{Changes, Stamp};
use super::records::ScanCost;
use super::{Conn, Result};
use crate::query::push_qi;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a reader waits for the writer to publish a commit its snapshot may hold before it
/// counts in full instead.
const PATIENCE: Duration = Duration::from_millis(1);

pub(crate) struct Counts {
    changes: Arc<Changes>,
    /// Lowercased table name -> what a snapshot counted.
    known: Mutex<HashMap<String, Known>>,
}

#[derive(Debug, Clone, Copy)]
struct Known {
    rows: i64,
    /// The highest rowid then (0 for an empty table).
    top: i64,
    from: Stamp,
    to: Stamp,
}

impl Counts {
    pub(crate) fn new(changes: Arc<Changes>) -> Self {
        Self {
            changes,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The number of rows of `table` (a rowid table) in the snapshot `conn` reads.
    /// `before` is a stamp taken before that snapshot's transaction read anything.
    pub(crate) fn rows(
        &self,
        conn: Conn<'_>,
        table: &str,
        before: Stamp,
        cost: &mut ScanCost,
    ) -> Result<i64> {
        let conn = conn.0;
        let mut from = String::with_capacity(table.len() + 8);
        push_qi(&mut from, table);
        // Also what opens the snapshot, when nothing read in it yet.
        let top: Option<i64> = conn
            .prepare_cached(&format!("SELECT max(rowid) FROM {from}"))?
            .query_row([], |r| r.get(0))?;
        let top = top.unwrap_or(0);
        let settled = self.changes.settled(PATIENCE);
        let after = self.changes.stamp();
        let key = table.to_ascii_lowercase();
        let known = self
            .known
            .lock()
            .ok()
            .and_then(|k| k.get(&key).copied())
            .filter(|k| {
                settled
                    && before.not_before(k.to)
                    && self.changes.nothing_removed_since(k.from, &key)
            });
        let rows = match known {
            Some(k) if top <= k.top => k.rows,
            Some(k) => {
                let mut stmt =
                    conn.prepare_cached(&format!("SELECT count(*) FROM {from} WHERE rowid > ?"))?;
                ScanCost::start(&stmt);
                let more: i64 = stmt.query_row([k.top], |r| r.get(0))?;
                cost.add(&stmt);
                k.rows + more
            }
            None => {
                let mut stmt = conn.prepare_cached(&format!("SELECT count(*) FROM {from}"))?;
                ScanCost::start(&stmt);
                let n: i64 = stmt.query_row([], |r| r.get(0))?;
                cost.add(&stmt);
                n
            }
        };
        // At the largest rowid SQLite picks new ones at random: nothing to carry over then.
        if settled
            && top < i64::MAX
            && let Ok(mut k) = self.known.lock()
        {
            let fresh = Known {
                rows,
                top,
                from: before,
                to: after,
            };
            match k.get_mut(&key) {
                Some(old) if !before.not_before(old.from) => {}
                Some(old) => *old = fresh,
                None => {
                    k.insert(key, fresh);
                }
            }
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Keep, Store};

    async fn open() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), &crate::store::tests::cfg()).unwrap());
        store
            .write(|c| {
                c.0.execute_batch("CREATE TABLE posts (id TEXT PRIMARY KEY NOT NULL, t TEXT)")?;
                Ok(())
            })
            .await
            .unwrap();
        (dir, store)
    }

    /// Through the writer, as records are written: `sql` with `?1` bound to each of `ids`.
    async fn write(store: &Store, sql: &'static str, ids: Vec<String>) {
        store
            .write(move |c| {
                c.savepoint(|sp| {
                    for id in &ids {
                        sp.0.execute(sql, [id])?;
                    }
                    Ok(Keep::Commit(()))
                })
            })
            .await
            .unwrap();
    }

    fn ids(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    /// In one snapshot: the count `Counts` gives, and `count(*)`.
    async fn counted(store: &Store) -> (i64, i64) {
        store
            .read_snapshot(|conn| {
                let before = store.changes().stamp();
                let mut cost = ScanCost::default();
                let rows = store.counts().rows(conn, "posts", before, &mut cost)?;
                let direct = conn
                    .0
                    .query_row("SELECT count(*) FROM posts", [], |r| r.get(0))?;
                Ok((rows, direct))
            })
            .await
            .unwrap()
    }

    /// Deletes a row behind the writer's back (another connection: no update hook hears it),
    /// so that a count carried over from before differs from a fresh one by one.
    fn delete_unseen(dir: &std::path::Path, id: &str) {
        let side = rusqlite::Connection::open(dir.join("data.db")).unwrap();
        side.busy_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            side.execute("DELETE FROM posts WHERE id = ?", [id])
                .unwrap(),
            1
        );
    }

    #[tokio::test]
    async fn inserts_are_carried_over_and_anything_that_may_remove_rows_counts_again() {
        let (dir, store) = open().await;
        let insert = "INSERT INTO posts (id, t) VALUES (?1, 'x')";
        write(&store, insert, ids("a", 100)).await;
        assert_eq!(counted(&store).await, (100, 100));
        write(&store, insert, ids("b", 5)).await;
        assert_eq!(counted(&store).await, (105, 105));

        // Carried, not counted: a row gone unseen is still in the carried count.
        delete_unseen(dir.path(), "a0");
        write(&store, insert, ids("c", 1)).await;
        assert_eq!(counted(&store).await, (106, 105));
        // An update removes nothing: still carried.
        write(
            &store,
            "UPDATE posts SET t = 'y' WHERE id = ?1",
            ids("a", 3),
        )
        .await;
        assert_eq!(counted(&store).await, (106, 105));

        // A delete through the writer: counted again.
        write(&store, "DELETE FROM posts WHERE id = ?1", vec!["a1".into()]).await;
        assert_eq!(counted(&store).await, (104, 104));

        // A plugin's SQL (REPLACE deletes rows the update hook never hears of): counted again.
        delete_unseen(dir.path(), "a2");
        store
            .write(|c| {
                c.savepoint(|sp| {
                    Changes::raw(|| {
                        sp.0.execute("REPLACE INTO posts (id, t) VALUES ('b0', 'z')", [])
                    })?;
                    Ok(Keep::Commit(()))
                })
            })
            .await
            .unwrap();
        assert_eq!(counted(&store).await, (103, 103));

        // A schema change: counted again.
        delete_unseen(dir.path(), "a3");
        store.write_schema(|_| Ok(())).await.unwrap();
        assert_eq!(counted(&store).await, (102, 102));
    }

    /// Readers racing writers that insert, update and delete: in every snapshot the count given
    /// is the snapshot's own `count(*)`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn under_racing_writes_every_snapshot_gets_its_own_count() {
        let (_dir, store) = open().await;
        write(
            &store,
            "INSERT INTO posts (id, t) VALUES (?1, 'x')",
            ids("seed", 500),
        )
        .await;
        let until = std::time::Instant::now() + Duration::from_millis(1500);
        let mut writers = Vec::new();
        for w in 0..3usize {
            let s = Arc::clone(&store);
            writers.push(tokio::spawn(async move {
                let mut i = 0usize;
                while std::time::Instant::now() < until {
                    let id = format!("w{w}-{i}");
                    let sql = match i % 5 {
                        // Deletes of rows that exist (the oldest seeds, then this writer's own).
                        0 => "DELETE FROM posts WHERE id = (SELECT id FROM posts ORDER BY rowid LIMIT 1) AND ?1 <> ''",
                        1 => "UPDATE posts SET t = ?1 WHERE rowid = (SELECT max(rowid) FROM posts)",
                        _ => "INSERT INTO posts (id, t) VALUES (?1, 'x')",
                    };
                    write(&s, sql, vec![id]).await;
                    i += 1;
                }
                i
            }));
        }
        let mut readers = Vec::new();
        for _ in 0..4 {
            let s = Arc::clone(&store);
            readers.push(tokio::spawn(async move {
                let mut n = 0usize;
                while std::time::Instant::now() < until {
                    let (rows, direct) = counted(&s).await;
                    assert_eq!(rows, direct, "a count that is not its snapshot's");
                    n += 1;
                    tokio::task::yield_now().await;
                }
                n
            }));
        }
        let mut wrote = 0;
        for w in writers {
            wrote += w.await.unwrap();
        }
        let mut read = 0;
        for r in readers {
            read += r.await.unwrap();
        }
        assert!(wrote > 100 && read > 100, "wrote {wrote}, read {read}");
    }
}
