//! Results carried over inserts: how many rows a table holds (all, or those a filter over the
//! row itself keeps) and the first rows of a sort, once read, are topped up with the rows
//! inserted since instead of being computed again.
//!
//! A list's total (`SELECT count(*)` with no filter) walks the smallest index of the whole
//! table: about 7 ms at a million rows; with a filter no index serves, or a page sorted by a
//! column no index orders, it scans every row (0.3-2 s). Both are paid again by the first list
//! after every write, since any write drops the list's cached response. Most writes are
//! inserts, and SQLite gives a new row a rowid above every existing one, so the rows a result
//! has not seen yet are exactly those above the highest rowid it saw, and reading them is a
//! short range walk: the count adds those the filter keeps, and the first `n` rows of a sort
//! are the first `n` of the old ones and the new ones together.
//!
//! That holds while no row was updated or removed in between (an unfiltered count only needs
//! the second),
//! and while every row the reader's snapshot holds beyond the known result is above the known
//! highest rowid. The change feed tells the first (deletes, plugin SQL and schema changes are
//! versioned on their own: [`Changes::nothing_removed_since`]); stamps and [`Changes::settled`]
//! bound which commits a snapshot holds:
//! - a snapshot opened after stamp `before` was taken holds every commit published by then;
//! - once the writer is settled after the snapshot opened, every commit the snapshot holds is
//!   published, so the stamp taken then (`after`) bounds it from above.
//!
//! A known result was read in a snapshot somewhere between its `from` and `to` stamps. A reader
//! whose snapshot opened after `before` may use it when `to` is not after `before` (the known
//! snapshot is no newer than the reader's) and nothing that matters changed since `from`.

use super::changes::{Changes, Stamp};
use super::records::{ScanCost, counted_window};
use super::{Conn, Result};
use crate::query::push_qi;
use crate::schema::value::Stored;
use rusqlite::ToSql;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a reader waits for the writer to publish a commit its snapshot may hold. Past it
/// (a checkpoint, a long job), it looks at what that job did to its table instead: results
/// are still carried over if it only inserted there, but not kept.
const PATIENCE: Duration = Duration::from_millis(2);

/// The most rows of a sort carried (offset plus page); deeper pages are read as they are.
pub(crate) const FIRST_MAX: i64 = 500;

/// The most counts, and sorts, carried at once (past it, one makes room for another).
const KEPT_MAX: usize = 256;

pub(crate) struct Carried {
    changes: Arc<Changes>,
    /// Lowercased table name and the rows' WHERE (see [`Rows`]) -> what a snapshot counted.
    counts: Mutex<HashMap<String, History<i64>>>,
    /// (lowercased table and WHERE, ORDER BY, n) -> the rowids of the first n rows in that
    /// order.
    firsts: Mutex<HashMap<SortKey, History<Vec<i64>>>>,
    /// A sort's statement (its values are parameters) -> whether SQLite reads its rows in
    /// rowid order and sorts them itself (see [`Carry::first`]), and the stamp it was seen at.
    plans: Mutex<HashMap<String, (bool, Stamp)>>,
}

/// A carried sort: lowercased table and WHERE, ORDER BY, how many rows.
type SortKey = (String, String, i64);

/// The last few results of one kind, newest first. Readers overlap: one whose snapshot is
/// older than the newest result may still carry an older one over.
type History<T> = Vec<Known<T>>;

/// Results kept per table or sort.
const HISTORY: usize = 4;

#[derive(Debug, Clone)]
struct Known<T> {
    value: T,
    /// The highest rowid then (0 for an empty table).
    top: i64,
    from: Stamp,
    to: Stamp,
}

/// What one snapshot may carry over: opened by [`Carried::begin`].
pub(crate) struct Carry<'a> {
    carried: &'a Carried,
    table: &'a str,
    key: String,
    top: i64,
    before: Stamp,
    after: Stamp,
    /// None when the writer was settled; else whether the write job in flight updated, and
    /// removed, rows of the table (see [`Changes::in_flight`]).
    in_flight: Option<(bool, bool)>,
}

impl Carried {
    pub(crate) fn new(changes: Arc<Changes>) -> Self {
        Self {
            changes,
            counts: Mutex::new(HashMap::new()),
            firsts: Mutex::new(HashMap::new()),
            plans: Mutex::new(HashMap::new()),
        }
    }

    /// Start carrying results of `table` (a rowid table) into the snapshot `conn` reads.
    /// `before` is a stamp taken before that snapshot's transaction read anything.
    pub(crate) fn begin<'a>(
        &'a self,
        conn: Conn<'_>,
        table: &'a str,
        before: Stamp,
    ) -> Result<Carry<'a>> {
        let mut sql = String::from("SELECT max(`_rowid_`) FROM ");
        push_qi(&mut sql, table);
        // Also what opens the snapshot, when nothing read in it yet.
        let top: Option<i64> = conn.0.prepare_cached(&sql)?.query_row([], |r| r.get(0))?;
        let in_flight = (!self.changes.settled(PATIENCE)).then(|| self.changes.in_flight(table));
        Ok(Carry {
            carried: self,
            table,
            key: table.to_ascii_lowercase(),
            top: top.unwrap_or(0),
            before,
            after: self.changes.stamp(),
            in_flight,
        })
    }
}

impl Carry<'_> {
    /// Whether `known` may be carried into this snapshot; `rewrites`: whether an update of a
    /// row since would spoil it too (a sort's order), or only a removal (a count).
    fn usable<T>(&self, known: &Known<T>, rewrites: bool) -> bool {
        let changes = &self.carried.changes;
        let (updated, removed) = self.in_flight.unwrap_or_default();
        !removed
            && (!rewrites || !updated)
            && self.before.not_before(known.to)
            && changes.nothing_removed_since(known.from, &self.key)
            && (!rewrites || changes.rows_unchanged_since(known.from, [self.key.as_str()]))
    }

    /// The newest result in `map` under `key` this snapshot may carry over.
    fn find<K: std::hash::Hash + Eq, T: Clone>(
        &self,
        map: &Mutex<HashMap<K, History<T>>>,
        key: &K,
        rewrites: bool,
    ) -> Option<Known<T>> {
        let m = map.lock().ok()?;
        m.get(key)?
            .iter()
            .find(|k| self.usable(k, rewrites))
            .cloned()
    }

    /// Keep `value`, read in this snapshot, among the newest results. Not when the snapshot
    /// may hold a commit not published yet (no stamp bounds it), nor at the largest rowid
    /// (SQLite picks new ones at random then).
    fn keep<K: std::hash::Hash + Eq + Clone, T>(
        &self,
        map: &Mutex<HashMap<K, History<T>>>,
        key: K,
        value: T,
    ) {
        if self.in_flight.is_some() || self.top == i64::MAX {
            return;
        }
        let Ok(mut m) = map.lock() else {
            return;
        };
        make_room(&mut m, &key);
        let history = m.entry(key).or_default();
        let at = history
            .iter()
            .position(|old| !old.from.not_before(self.before))
            .unwrap_or(history.len());
        if at >= HISTORY {
            return;
        }
        history.insert(
            at,
            Known {
                value,
                top: self.top,
                from: self.before,
                to: self.after,
            },
        );
        history.truncate(HISTORY);
    }

    fn table_sql(&self) -> String {
        let mut from = String::with_capacity(self.table.len() + 2);
        push_qi(&mut from, self.table);
        from
    }

    /// How many of `which` rows the table holds in this snapshot.
    pub(crate) fn rows(&self, conn: Conn<'_>, which: Rows<'_>, cost: &mut ScanCost) -> Result<i64> {
        let conn = conn.0;
        let key = which.key(&self.key);
        let known = self.find(&self.carried.counts, &key, !which.is_all());
        let from = self.table_sql();
        let mut params = which.bound();
        let rows = match known {
            Some(k) if self.top <= k.top => k.value,
            Some(k) => {
                let above = params.len() + 1;
                let sql = format!(
                    "SELECT count(*) FROM {from} WHERE `_rowid_` > ?{above}{}",
                    which.and()
                );
                params.push(&k.top);
                let mut stmt = conn.prepare_cached(&sql)?;
                let more: i64 =
                    cost.measure(&mut stmt, |s| s.query_row(params.as_slice(), |r| r.get(0)))?;
                k.value + more
            }
            None => {
                let sql = format!("SELECT count(*) FROM {from}{}", which.where_clause());
                let mut stmt = conn.prepare_cached(&sql)?;
                cost.measure(&mut stmt, |s| s.query_row(params.as_slice(), |r| r.get(0)))?
            }
        };
        self.keep(&self.carried.counts, key, rows);
        Ok(rows)
    }

    /// The rowids of the first `n` (at most [`FIRST_MAX`]) of `which` rows in the order `order`
    /// (an ORDER BY of this table's own columns, nothing random).
    pub(crate) fn first(
        &self,
        conn: Conn<'_>,
        which: Rows<'_>,
        order: &str,
        n: i64,
        cost: &mut ScanCost,
    ) -> Result<Vec<i64>> {
        let conn = conn.0;
        let key = (which.key(&self.key), order.to_owned(), n);
        let known = self.find(&self.carried.firsts, &key, true);
        let from = self.table_sql();
        let mut params = which.bound();
        let at = params.len();
        let ids: Vec<i64> = match known {
            Some(k) if self.top <= k.top => k.value,
            Some(k) => {
                // The old first rows and the new ones, in order. The list is padded to `n`
                // with a repeat, so one statement per sort serves every run.
                let m = n.max(1) as usize;
                let marks: Vec<String> = (at + 1..=at + m).map(|i| format!("?{i}")).collect();
                let sql = format!(
                    "SELECT `_rowid_` FROM {from} WHERE `_rowid_` IN ({}) OR (`_rowid_` > ?{}{}) ORDER BY {order}, `_rowid_` LIMIT ?{}",
                    marks.join(", "),
                    at + m + 1,
                    which.and(),
                    at + m + 2
                );
                let pad = k.value.first().copied().unwrap_or(0);
                params.reserve(m + 2);
                for i in 0..m {
                    params.push(k.value.get(i).unwrap_or(&pad));
                }
                params.push(&k.top);
                params.push(&n);
                let mut stmt = conn.prepare_cached(&sql)?;
                cost.measure(&mut stmt, |s| {
                    s.query_map(params.as_slice(), |r| r.get(0))?.collect()
                })?
            }
            None => {
                let sql = format!(
                    "SELECT `_rowid_` FROM {from}{} ORDER BY {order} LIMIT ?{}",
                    which.where_clause(),
                    at + 1
                );
                params.push(&n);
                let mut stmt = conn.prepare_cached(&sql)?;
                let ids = cost.measure(&mut stmt, |s| {
                    s.query_map(params.as_slice(), |r| r.get(0))?.collect()
                })?;
                if !self.sorts_in_rowid_order(conn, &sql, &params)? {
                    return Ok(ids);
                }
                ids
            }
        };
        self.keep(&self.carried.firsts, key, ids.clone());
        Ok(ids)
    }

    /// The rowids of the first `n` (at most [`FIRST_MAX`]) of `which` rows in the order `order`,
    /// and how many there are. Until the count is known, from one scan of those rows in that
    /// order (a filter's count and its sort would each scan what it keeps), and both are kept
    /// for later inserts; then as [`Carry::first`] and [`Carry::rows`] give them.
    pub(crate) fn first_and_rows(
        &self,
        conn: Conn<'_>,
        which: Rows<'_>,
        order: &str,
        n: i64,
        cost: &mut ScanCost,
    ) -> Result<(Vec<i64>, i64)> {
        let count_key = which.key(&self.key);
        if self
            .find(&self.carried.counts, &count_key, !which.is_all())
            .is_some()
        {
            let first = self.first(conn, which, order, n, cost)?;
            return Ok((first, self.rows(conn, which, cost)?));
        }
        let conn = conn.0;
        let sql = format!(
            "SELECT `_rowid_` FROM {}{} ORDER BY {order}",
            self.table_sql(),
            which.where_clause()
        );
        let params = which.bound();
        let mut stmt = conn.prepare_cached(&sql)?;
        let (first, total) = counted_window(&mut stmt, &params, (0, n), cost)?;
        self.keep(&self.carried.counts, count_key, total);
        if self.sorts_in_rowid_order(conn, &sql, &params)? {
            let key = (which.key(&self.key), order.to_owned(), n);
            self.keep(&self.carried.firsts, key, first.clone());
        }
        Ok((first, total))
    }

    /// Whether SQLite answers the sort `sql` by reading the rows in rowid order (a plain scan)
    /// and sorting them itself. Its sorter keeps equal rows in the order it got them, so rows
    /// that tie on every sort key come out in rowid order: the order the carried statement
    /// gives them (by its tie-break on rowid). Through an index (one on the sort's columns, or
    /// on the filter's) ties come out in the index's order, which the carried statement cannot
    /// follow: those sorts are read as they are (an index walk is short; the count is still
    /// carried). Asked once per sort until rows are removed or the schema changes.
    fn sorts_in_rowid_order(
        &self,
        conn: &rusqlite::Connection,
        sql: &str,
        params: &[&dyn ToSql],
    ) -> Result<bool> {
        let changes = &self.carried.changes;
        if let Ok(plans) = self.carried.plans.lock()
            && let Some(&(plain, seen)) = plans.get(sql)
            && changes.nothing_removed_since(seen, &self.key)
        {
            return Ok(plain);
        }
        let seen = changes.stamp();
        let mut stmt = conn.prepare_cached(&format!("EXPLAIN QUERY PLAN {sql}"))?;
        let steps: Vec<(i64, String)> = stmt
            .query_map(params, |r| Ok((r.get(1)?, r.get(3)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let plain = plain_sort(self.table, &steps);
        if let Ok(mut plans) = self.carried.plans.lock() {
            let sql = sql.to_owned();
            make_room(&mut plans, &sql);
            plans.insert(sql, (plain, seen));
        }
        Ok(plain)
    }
}

/// The rows a carried result is about: the whole table, or those a WHERE keeps. The WHERE
/// reads nothing but the row itself and bound values (a statement without joins: every path
/// to another row, `@collection` and back-relations included, is a join), so an insert
/// changes no other row's answer, and an update may change the updated row's.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'a> {
    /// A compiled WHERE over the table, its parameters numbered `?1`..; empty: every row.
    pub where_sql: &'a str,
    pub params: &'a [Stored],
}

impl<'a> Rows<'a> {
    #[cfg(test)]
    pub(crate) const ALL: Rows<'static> = Rows {
        where_sql: "",
        params: &[],
    };

    fn is_all(&self) -> bool {
        self.where_sql.is_empty()
    }

    /// Results' key: the table's, then the WHERE and its values (texts by their length, so
    /// that no two lists of values give one key).
    fn key(&self, table: &str) -> String {
        use std::fmt::Write;
        let mut k = table.to_owned();
        if self.is_all() {
            return k;
        }
        k.push('\0');
        k.push_str(self.where_sql);
        for p in self.params {
            let _ = match p {
                Stored::Null => write!(k, "\0n"),
                Stored::Int(i) => write!(k, "\0i{i}"),
                Stored::Real(r) => write!(k, "\0r{}", r.to_bits()),
                Stored::Text(t) => write!(k, "\0t{}:{t}", t.len()),
            };
        }
        k
    }

    fn bound(&self) -> Vec<&'a dyn ToSql> {
        self.params.iter().map(|p| p as &dyn ToSql).collect()
    }

    fn where_clause(&self) -> String {
        if self.is_all() {
            String::new()
        } else {
            format!(" WHERE {}", self.where_sql)
        }
    }

    fn and(&self) -> String {
        if self.is_all() {
            String::new()
        } else {
            format!(" AND ({})", self.where_sql)
        }
    }
}

/// Past [`KEPT_MAX`] entries, one leaves to make room for `key`: filters whose values change
/// with every request come and go, and the results read often are likely to stay.
fn make_room<K: std::hash::Hash + Eq + Clone, V>(m: &mut HashMap<K, V>, key: &K) {
    if m.len() >= KEPT_MAX
        && !m.contains_key(key)
        && let Some(old) = m.keys().next().cloned()
    {
        m.remove(&old);
    }
}

/// Whether a query plan (`EXPLAIN QUERY PLAN`'s parent and detail per step) reads `table` by a
/// plain scan, in rowid order, and sorts what it keeps with a temporary b-tree.
fn plain_sort(table: &str, steps: &[(i64, String)]) -> bool {
    let top: Vec<&str> = steps
        .iter()
        .filter(|(parent, _)| *parent == 0)
        .map(|(_, d)| d.as_str())
        .collect();
    let loops: Vec<&&str> = top
        .iter()
        .filter(|d| d.starts_with("SCAN ") || d.starts_with("SEARCH "))
        .collect();
    matches!(loops.as_slice(), [only] if only.strip_prefix("SCAN ").is_some_and(|t| t.eq_ignore_ascii_case(table)))
        && top.contains(&"USE TEMP B-TREE FOR ORDER BY")
}

/// Whether `order` (a compiled ORDER BY) sorts `table` by its own columns only, so its first
/// rows can be carried: no expression, no other table, nothing random.
pub(crate) fn carriable_order(table: &str, order: &str) -> bool {
    let mut own = String::with_capacity(table.len() + 3);
    push_qi(&mut own, table);
    own.push('.');
    !order.is_empty()
        && order.split(", ").all(|term| {
            let Some(rest) = term.strip_prefix(own.as_str()) else {
                return false;
            };
            let Some(col) = rest
                .strip_suffix(" ASC")
                .or_else(|| rest.strip_suffix(" DESC"))
            else {
                return false;
            };
            col.len() > 2
                && col.starts_with('`')
                && col.ends_with('`')
                && !col[1..col.len() - 1].contains('`')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Keep, Store};

    const ORDER: &str = "`posts`.`n` DESC";
    const FIRST: i64 = 5;

    async fn open() -> (tempfile::TempDir, Arc<Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), &crate::store::tests::cfg()).unwrap());
        store
            .write(|c| {
                c.0.execute_batch(
                    "CREATE TABLE posts (id TEXT PRIMARY KEY NOT NULL, n INTEGER, t TEXT)",
                )?;
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

    /// Rows whose `n` is their number after `prefix` (so later ones sort first).
    fn ids(prefix: &str, n: usize) -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}")).collect()
    }

    const INSERT: &str = "INSERT INTO posts (id, n, t) VALUES (?1, CAST(ltrim(?1, 'abcdefghijklmnopqrstuvwxyz-') AS INTEGER), 'x')";

    /// A filter over the row itself (an update moves a row in or out of it).
    const WHERE: &str = "`posts`.`n` % 3 = ?1";

    fn filtered(params: &[Stored]) -> Rows<'_> {
        Rows {
            where_sql: WHERE,
            params,
        }
    }

    /// What one snapshot gives: the carried counts and first rows (of the whole table, and of
    /// the rows the filter keeps), then the same read directly.
    #[derive(Debug, PartialEq)]
    struct Seen {
        rows: i64,
        first: Vec<i64>,
        kept: i64,
        kept_first: Vec<i64>,
    }

    async fn seen(store: &Store) -> (Seen, Seen) {
        store
            .read_snapshot(|conn| {
                let before = store.changes().stamp();
                let mut cost = ScanCost::default();
                let carry = store.carried().begin(conn, "posts", before)?;
                let params = [Stored::Int(0)];
                // A filtered list's page and total come as the records area asks for them.
                let (kept_first, kept) =
                    carry.first_and_rows(conn, filtered(&params), ORDER, FIRST, &mut cost)?;
                let carried = Seen {
                    first: carry.first(conn, Rows::ALL, ORDER, FIRST, &mut cost)?,
                    rows: carry.rows(conn, Rows::ALL, &mut cost)?,
                    kept_first,
                    kept,
                };
                let first = |w: &str| -> rusqlite::Result<Vec<i64>> {
                    conn.0
                        .prepare(&format!(
                            "SELECT rowid FROM posts {w} ORDER BY {ORDER} LIMIT ?"
                        ))?
                        .query_map([FIRST], |r| r.get(0))?
                        .collect()
                };
                let count = |w: &str| -> rusqlite::Result<i64> {
                    conn.0
                        .query_row(&format!("SELECT count(*) FROM posts {w}"), [], |r| r.get(0))
                };
                let w = "WHERE `posts`.`n` % 3 = 0";
                let direct = Seen {
                    rows: count("")?,
                    first: first("")?,
                    kept: count(w)?,
                    kept_first: first(w)?,
                };
                Ok((carried, direct))
            })
            .await
            .unwrap()
    }

    /// Deletes a row behind the writer's back (another connection: no update hook hears it),
    /// so that a result carried over from before still shows it, where a fresh one does not.
    fn delete_unseen(dir: &std::path::Path, id: &str) {
        let side = rusqlite::Connection::open(dir.join("data.db")).unwrap();
        side.busy_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(
            side.execute("DELETE FROM posts WHERE id = ?", [id])
                .unwrap(),
            1
        );
    }

    /// The carried result differs from the direct one by the rows deleted unseen (it was
    /// carried), or not at all (it was read again).
    async fn carried_over(store: &Store) -> bool {
        let (carried, direct) = seen(store).await;
        if carried == direct {
            return false;
        }
        assert_eq!(carried.rows, direct.rows + 1, "{carried:?} {direct:?}");
        true
    }

    #[tokio::test]
    async fn inserts_are_carried_over_and_anything_else_reads_again() {
        let (dir, store) = open().await;
        write(&store, INSERT, ids("a", 100)).await;
        let (carried, direct) = seen(&store).await;
        assert_eq!(carried, direct);
        assert_eq!((carried.rows, carried.kept), (100, 34));
        write(&store, INSERT, ids("b", 150)).await;
        let (carried, direct) = seen(&store).await;
        assert_eq!(carried, direct, "the new rows sort first");
        assert_eq!((carried.rows, carried.kept), (250, 84));

        // Carried, not read again: rows gone unseen are still in the carried results (b141 is
        // one the filter keeps). Not the last row: its rowid would be handed out again, which
        // a delete the writer hears of rules out.
        delete_unseen(dir.path(), "b148");
        delete_unseen(dir.path(), "b141");
        write(&store, INSERT, vec!["c1".into()]).await;
        let (carried, direct) = seen(&store).await;
        assert_eq!(carried.rows, direct.rows + 2, "{carried:?} {direct:?}");
        assert_eq!(carried.kept, direct.kept + 1, "{carried:?} {direct:?}");
        assert_ne!(carried.first, direct.first, "b148 is among the first");
        assert_ne!(
            carried.kept_first, direct.kept_first,
            "b141 is among the first kept"
        );

        // An update may change the order, and which rows the filter keeps: the first rows and
        // the filtered count are read again, the table's count is carried.
        write(
            &store,
            "UPDATE posts SET n = 1000 WHERE id = ?1",
            vec!["a0".into()],
        )
        .await;
        let (carried, direct) = seen(&store).await;
        assert_eq!(carried.first, direct.first);
        assert_eq!(carried.kept_first, direct.kept_first);
        assert_eq!(
            carried.kept, direct.kept,
            "the filtered count is read again"
        );
        assert_eq!(carried.rows, direct.rows + 2, "the count is still carried");

        // A delete through the writer: everything is read again.
        write(&store, "DELETE FROM posts WHERE id = ?1", vec!["a1".into()]).await;
        assert!(!carried_over(&store).await);

        // A plugin's SQL (a REPLACE deletes rows the update hook never hears of): read again.
        delete_unseen(dir.path(), "b147");
        store
            .write(|c| {
                c.savepoint(|sp| {
                    Changes::raw(|| {
                        sp.0.execute("REPLACE INTO posts (id, n) VALUES ('b0', 0)", [])
                    })?;
                    Ok(Keep::Commit(()))
                })
            })
            .await
            .unwrap();
        assert!(!carried_over(&store).await);

        // A schema change: read again.
        delete_unseen(dir.path(), "b146");
        store.write_schema(|_| Ok(())).await.unwrap();
        assert!(!carried_over(&store).await);

        // New planner statistics (`__pbDBOptimize__`) may change plans: read again.
        delete_unseen(dir.path(), "b145");
        write(&store, INSERT, vec!["c2".into()]).await;
        store.optimize().await.unwrap();
        assert!(!carried_over(&store).await);
    }

    /// Readers overlap: one whose snapshot is older than the newest result kept still carries
    /// an older result over (rather than counting a million rows again).
    #[tokio::test]
    async fn an_older_snapshot_carries_an_older_result_over() {
        let (dir, store) = open().await;
        write(&store, INSERT, ids("a", 100)).await;
        let _ = seen(&store).await;
        // From here a carried count is one more than the table's.
        delete_unseen(dir.path(), "a50");
        write(&store, INSERT, vec!["b1".into()]).await;
        let data = dir.path().join("data.db");
        store
            .read_snapshot(|conn| {
                let mut cost = ScanCost::default();
                let before = store.changes().stamp();
                let older = store.carried().begin(conn, "posts", before)?;
                // Meanwhile: another insert, and a reader that keeps a newer count.
                store.write_blocking(|c| Ok(c.execute(INSERT, ["b2"])?))?;
                let side = rusqlite::Connection::open(&data)?;
                let tx = side.unchecked_transaction()?;
                let newer = store
                    .carried()
                    .begin(Conn(&tx), "posts", store.changes().stamp())?;
                assert_eq!(
                    newer.rows(Conn(&tx), Rows::ALL, &mut cost)?,
                    102,
                    "carried: 100 + 2"
                );
                drop(tx);
                // The older snapshot has no b2: the newer count is not for it, the first is.
                assert_eq!(
                    older.rows(conn, Rows::ALL, &mut cost)?,
                    101,
                    "carried: 100 + 1"
                );
                Ok(())
            })
            .await
            .unwrap();
    }

    /// A sort an index answers is read as it is (the index's order of ties is not the carried
    /// statement's); its count is still carried.
    #[tokio::test]
    async fn a_sort_through_an_index_is_read_as_it_is() {
        let (dir, store) = open().await;
        store
            .write_schema(|c| {
                c.0.execute_batch("CREATE INDEX posts_n ON posts (n)")?;
                Ok(())
            })
            .await
            .unwrap();
        write(&store, INSERT, ids("a", 100)).await;
        write(&store, INSERT, ids("b", 100)).await;
        let (carried, direct) = seen(&store).await;
        assert_eq!(carried, direct);
        // a99 and b99 tie at the top; the index walks them newest first.
        delete_unseen(dir.path(), "a99");
        write(&store, INSERT, vec!["c1".into()]).await;
        let (carried, direct) = seen(&store).await;
        assert_eq!(carried.rows, direct.rows + 1, "the count is carried");
        assert_eq!(carried.first, direct.first, "the sort is read again");
        assert_eq!(carried.kept_first, direct.kept_first);
    }

    /// Generated: tables with many ties, random indexes, filters and sorts, and inserts in
    /// between. After each insert the carried count and first rows are exactly what the same
    /// statements read directly give, ties included.
    #[tokio::test]
    async fn generated_sorts_with_ties_carry_the_direct_answer() {
        use rand::{Rng, SeedableRng};
        const FILTERS: [(&str, &str); 4] = [
            ("", ""),
            ("`posts`.`n` > ?1", "WHERE `posts`.`n` > 1"),
            ("`posts`.`t` = ?1", "WHERE `posts`.`t` = 1"),
            ("`posts`.`n` % 2 = ?1", "WHERE `posts`.`n` % 2 = 1"),
        ];
        const ORDERS: [&str; 5] = [
            "`posts`.`n` DESC",
            "`posts`.`t` ASC",
            "`posts`.`t` DESC, `posts`.`n` ASC",
            "`posts`.`n` ASC, `posts`.`t` DESC",
            "`posts`.`id` DESC",
        ];
        const INDEXES: [&str; 4] = ["(n)", "(t)", "(n, t)", "(t DESC, n)"];
        let mut rng = rand::rngs::StdRng::seed_from_u64(21);
        let mut compared = 0;
        for case in 0..24 {
            let (_dir, store) = open().await;
            let indexes: Vec<String> = INDEXES
                .iter()
                .enumerate()
                .filter(|_| rng.random_bool(0.3))
                .map(|(i, cols)| format!("CREATE INDEX posts_{i} ON posts {cols};"))
                .collect();
            store
                .write_schema(move |c| {
                    c.0.execute_batch(&indexes.concat())?;
                    Ok(())
                })
                .await
                .unwrap();
            let mut next = 0usize;
            for _round in 0..4 {
                let rows: Vec<(String, i64, i64)> = (0..rng.random_range(1..40usize))
                    .map(|_| {
                        next += 1;
                        (
                            format!("{case}-{next}"),
                            rng.random_range(0..4),
                            rng.random_range(0..3),
                        )
                    })
                    .collect();
                store
                    .write(move |c| {
                        for (id, n, t) in &rows {
                            c.0.execute(
                                "INSERT INTO posts (id, n, t) VALUES (?1, ?2, ?3)",
                                rusqlite::params![id, n, t],
                            )?;
                        }
                        Ok(())
                    })
                    .await
                    .unwrap();
                for (w, direct_where) in FILTERS {
                    for order in ORDERS {
                        let n = rng.random_range(1..30i64);
                        let together = rng.random_bool(0.5);
                        let params = [Stored::Int(1)];
                        let which = Rows {
                            where_sql: w,
                            params: if w.is_empty() { &[] } else { &params },
                        };
                        let (got, want) = store
                            .read_snapshot(|conn| {
                                let before = store.changes().stamp();
                                let mut cost = ScanCost::default();
                                let carry = store.carried().begin(conn, "posts", before)?;
                                let got = if together {
                                    let (first, rows) =
                                        carry.first_and_rows(conn, which, order, n, &mut cost)?;
                                    (rows, first)
                                } else {
                                    (
                                        carry.rows(conn, which, &mut cost)?,
                                        carry.first(conn, which, order, n, &mut cost)?,
                                    )
                                };
                                let want = (
                                    conn.0.query_row(
                                        &format!("SELECT count(*) FROM posts {direct_where}"),
                                        [],
                                        |r| r.get(0),
                                    )?,
                                    conn.0
                                        .prepare(&format!(
                                            "SELECT rowid FROM posts {direct_where} ORDER BY {order} LIMIT ?"
                                        ))?
                                        .query_map([n], |r| r.get(0))?
                                        .collect::<rusqlite::Result<Vec<i64>>>()?,
                                );
                                Ok((got, want))
                            })
                            .await
                            .unwrap();
                        assert_eq!(got, want, "case {case}: {w} ORDER BY {order} LIMIT {n}");
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, 24 * 4 * 4 * 5);
    }

    #[test]
    fn only_plain_scans_sorted_by_sqlite_are_carried() {
        let plan = |steps: &[(i64, &str)]| -> Vec<(i64, String)> {
            steps.iter().map(|(p, d)| (*p, (*d).to_owned())).collect()
        };
        for (steps, ok) in [
            (
                plan(&[(0, "SCAN posts"), (0, "USE TEMP B-TREE FOR ORDER BY")]),
                true,
            ),
            (
                plan(&[(0, "SCAN Posts"), (0, "USE TEMP B-TREE FOR ORDER BY")]),
                true,
            ),
            (
                plan(&[
                    (0, "SCAN posts"),
                    (0, "CORRELATED SCALAR SUBQUERY 1"),
                    (3, "SCAN json_each VIRTUAL TABLE INDEX 1:"),
                    (0, "USE TEMP B-TREE FOR ORDER BY"),
                ]),
                true,
            ),
            (plan(&[(0, "SCAN posts USING INDEX posts_n")]), false),
            (
                plan(&[(0, "SCAN posts USING COVERING INDEX posts_n")]),
                false,
            ),
            (
                plan(&[
                    (0, "SEARCH posts USING INDEX posts_n (n>?)"),
                    (0, "USE TEMP B-TREE FOR ORDER BY"),
                ]),
                false,
            ),
            (
                plan(&[
                    (0, "SCAN posts"),
                    (0, "USE TEMP B-TREE FOR RIGHT PART OF ORDER BY"),
                ]),
                false,
            ),
            (
                plan(&[(0, "SCAN users"), (0, "USE TEMP B-TREE FOR ORDER BY")]),
                false,
            ),
            (plan(&[(0, "SCAN posts")]), false),
        ] {
            assert_eq!(plain_sort("posts", &steps), ok, "{steps:?}");
        }
    }

    #[test]
    fn only_sorts_by_the_tables_own_columns_are_carried() {
        for (order, ok) in [
            ("`posts`.`n` DESC", true),
            ("`posts`.`created` DESC, `posts`.`_rowid_` ASC", true),
            ("", false),
            ("RANDOM()", false),
            ("`posts`.`n` DESC, RANDOM()", false),
            ("`users`.`n` DESC", false),
            ("`posts_tags`.`name` ASC", false),
            ("json_extract(`posts`.`j`, '$.a') ASC", false),
            ("`posts`.`a`.`b` ASC", false),
        ] {
            assert_eq!(carriable_order("posts", order), ok, "{order}");
        }
    }

    /// Readers racing writers that insert, update and delete: in every snapshot the count and
    /// first rows given are the snapshot's own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn under_racing_writes_every_snapshot_gets_its_own_results() {
        let (_dir, store) = open().await;
        write(&store, INSERT, ids("seed", 500)).await;
        let until = std::time::Instant::now() + Duration::from_millis(1500);
        let mut writers = Vec::new();
        for w in 0..3usize {
            let s = Arc::clone(&store);
            writers.push(tokio::spawn(async move {
                let mut i = 0usize;
                while std::time::Instant::now() < until {
                    let id = format!("w-{}", w * 1_000_000 + i);
                    let sql = match i % 7 {
                        // Deletes of rows that exist, and updates that move a row to the top.
                        0 => "DELETE FROM posts WHERE rowid = (SELECT min(rowid) FROM posts) AND ?1 <> ''",
                        1 => "UPDATE posts SET n = n + 5000000 WHERE rowid = (SELECT min(rowid) FROM posts) AND ?1 <> ''",
                        _ => INSERT,
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
                    let (carried, direct) = seen(&s).await;
                    assert_eq!(carried, direct, "results that are not their snapshot's");
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
