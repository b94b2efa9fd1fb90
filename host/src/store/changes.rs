//! The change feed: which tables a write touched, as versions readers can compare.
//!
//! SQLite's update hook on the writer connection records every table a write job changes (rows
//! of cascades and table rebuilds included). When the job ends, and before its caller hears
//! back, each touched table gets a new version from one monotonic counter. A reader that took a
//! [`Stamp`] before it read can later tell whether anything it depended on changed since: that
//! is how caches stay correct without ever serving a response older than a committed write.

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
    /// Tables touched by the job running on the writer now, and whether any existing row was
    /// updated or deleted (only the writer thread uses it).
    touched: Mutex<HashMap<String, bool>>,
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

    /// Called by the update hook for each changed row.
    pub(crate) fn touch(&self, table: &str, rewrite: bool) {
        if let Ok(mut t) = self.touched.lock() {
            match t.get_mut(table) {
                Some(r) => *r |= rewrite,
                None => {
                    t.insert(table.to_owned(), rewrite);
                }
            }
        }
    }

    /// Called when a write job ends: publish new versions for what it touched.
    pub(crate) fn publish(&self) {
        let touched: Vec<(String, bool)> = match self.touched.lock() {
            Ok(mut t) if !t.is_empty() => t.drain().collect(),
            _ => return,
        };
        let (Ok(mut v), Ok(mut r)) = (self.versions.write(), self.rewrites.write()) else {
            return;
        };
        // Versions are written before the counter moves: a reader whose stamp includes this
        // change also sees the new versions.
        let next = self.counter.load(Ordering::Acquire) + 1;
        for (t, rewrite) in touched {
            let t = t.to_ascii_lowercase();
            if rewrite {
                r.insert(t.clone(), next);
            }
            v.insert(t, next);
        }
        self.counter.store(next, Ordering::Release);
    }
}

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
        c.touch("posts", false);
        c.publish();
        assert!(!c.unchanged_since(before, ["posts", "users"]));
        assert!(
            c.rows_unchanged_since(before, ["posts"]),
            "an insert rewrites no row"
        );
        c.touch("posts", true);
        c.publish();
        assert!(!c.rows_unchanged_since(before, ["posts"]));
        assert!(c.unchanged_since(before, ["users"]));
        let after = c.stamp();
        assert!(c.unchanged_since(after, ["posts"]));
        c.publish(); // nothing touched: no new version
        assert_eq!(c.stamp(), after);
    }
}
