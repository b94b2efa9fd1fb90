//! Read caches, kept correct by the store's change feed (`store::changes`).
//!
//! * Verified tokens: the caller a token names, valid while the auth collection is unchanged.
//! * Whole responses of record lists and views, per (route, query string, caller), valid while
//!   none of the tables they read changed. A cached body is only served if every table it read
//!   has no version newer than the stamp taken before its request read anything, so a response
//!   never predates a write whose completion anyone has seen.
//!
//! Both maps are bounded: a shard that fills up is emptied (cheap, and a full shard means the
//! key space is wider than the cache is worth).

use super::Caller;
use crate::metrics;
use crate::store::{Changes, Stamp};
use bytes::Bytes;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

const SHARDS: usize = 16;

pub(crate) struct Bounded<V> {
    /// A capacity or byte budget of 0 turns the map off: nothing is kept.
    enabled: bool,
    hasher: RandomState,
    shards: Vec<Mutex<Shard<V>>>,
    per_shard: usize,
    bytes_per_shard: usize,
}

struct Shard<V> {
    map: HashMap<String, (V, usize)>,
    bytes: usize,
}

impl<V: Clone> Bounded<V> {
    /// At most `capacity` entries and `bytes` bytes (keys plus the weights given on insert).
    pub(crate) fn new(capacity: usize, bytes: usize) -> Self {
        Self {
            enabled: capacity > 0 && bytes > 0,
            hasher: RandomState::new(),
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        map: HashMap::new(),
                        bytes: 0,
                    })
                })
                .collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            bytes_per_shard: bytes.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<Shard<V>> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    pub(crate) fn enabled(&self) -> bool {
        self.enabled
    }

    pub(crate) fn get(&self, key: &str) -> Option<V> {
        if !self.enabled {
            return None;
        }
        self.shard(key)
            .lock()
            .ok()?
            .map
            .get(key)
            .map(|(v, _)| v.clone())
    }

    /// Keep `value`, weighing `weight` bytes besides its key; too heavy values are not kept.
    pub(crate) fn insert(&self, key: String, value: V, weight: usize) {
        let weight = weight + key.len();
        if !self.enabled || weight > self.bytes_per_shard {
            return;
        }
        if let Ok(mut s) = self.shard(&key).lock() {
            if let Some((_, old)) = s.map.remove(&key) {
                s.bytes -= old;
            }
            if s.map.len() >= self.per_shard || s.bytes + weight > self.bytes_per_shard {
                s.map.clear();
                s.bytes = 0;
            }
            s.bytes += weight;
            s.map.insert(key, (value, weight));
        }
    }

    pub(crate) fn remove(&self, key: &str) {
        if let Ok(mut s) = self.shard(key).lock()
            && let Some((_, w)) = s.map.remove(key)
        {
            s.bytes -= w;
        }
    }
}

/// A verified token's caller.
#[derive(Clone)]
pub(crate) struct TokenEntry {
    pub caller: Caller,
    /// The auth collection's table, lowercased (the change feed's key).
    pub table: String,
    /// The token's `exp` claim (seconds), or when it was verified if it has none.
    pub exp: f64,
    pub stamp: Stamp,
}

/// A cached response body and what it read.
pub(crate) struct ResponseEntry {
    pub body: Bytes,
    pub stamp: Stamp,
    /// Any change to these tables (lowercase names) invalidates the entry.
    pub tables: Vec<String>,
    /// Only updates and deletes in these tables do (a view that reads one known row).
    pub row_tables: Vec<String>,
    /// That row's rowid, when known: then only an update or delete of that very row does.
    pub row: Option<i64>,
}

pub(crate) struct Caches {
    pub tokens: Bounded<TokenEntry>,
    pub responses: Bounded<Arc<ResponseEntry>>,
    /// Responses being computed right now, so identical requests wait for one computation
    /// instead of all running it (a write invalidates a hot list; hundreds of clients ask again).
    in_flight: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Caches {
    pub(crate) fn new(
        token_capacity: usize,
        response_capacity: usize,
        response_bytes: usize,
    ) -> Self {
        Self {
            // A token entry holds the caller's row: a few hundred bytes.
            tokens: Bounded::new(token_capacity, token_capacity.saturating_mul(1024)),
            responses: Bounded::new(response_capacity, response_bytes),
            in_flight: Mutex::new(HashMap::new()),
        }
    }

    /// After a cache miss: either become the one request computing `key` (the guard ends that
    /// when dropped, waking the others), or wait for the request already doing it and then look
    /// again. Waiting is bounded; a waiter that times out computes on its own.
    pub(crate) async fn lead_or_wait(&self, key: &str) -> Option<Leader<'_>> {
        if !self.responses.enabled() {
            return None;
        }
        let waiting: Arc<Notify>;
        let notified;
        {
            let Ok(mut m) = self.in_flight.lock() else {
                return None;
            };
            match m.get(key) {
                // Registered under the lock, so the leader's wake-up cannot be missed.
                Some(n) => {
                    waiting = Arc::clone(n);
                    notified = waiting.notified();
                }
                None => {
                    let n = Arc::new(Notify::new());
                    m.insert(key.to_owned(), Arc::clone(&n));
                    return Some(Leader {
                        caches: self,
                        key: key.to_owned(),
                        notify: n,
                    });
                }
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(5), notified).await;
        None
    }

    /// A cached body for `key`, if still valid.
    pub(crate) fn response(&self, changes: &Changes, key: &str) -> Option<Bytes> {
        if !self.responses.enabled() {
            return None;
        }
        let found = self.valid_response(changes, key);
        metrics::cache(metrics::Cache::Responses, found.is_some());
        found
    }

    /// What the cache holds for `key` for a request that arrived at `arrival` (a waiter): a
    /// body it may take (still valid, or computed from reads that began at or after `arrival`),
    /// an entry too old for it (`Some(None)`; left for the waiters it suits), or nothing.
    pub(crate) fn response_since(
        &self,
        changes: &Changes,
        key: &str,
        arrival: Stamp,
    ) -> Option<Option<Bytes>> {
        let e = self.responses.get(key)?;
        let found =
            (e.stamp.not_before(arrival) || self.still_valid(changes, &e)).then(|| e.body.clone());
        metrics::cache(metrics::Cache::Responses, found.is_some());
        Some(found)
    }

    fn still_valid(&self, changes: &Changes, e: &ResponseEntry) -> bool {
        let row_kept = match e.row {
            Some(rowid) => e
                .row_tables
                .iter()
                .all(|t| changes.row_unchanged_since(e.stamp, t, rowid)),
            None => changes.rows_unchanged_since(e.stamp, e.row_tables.iter().map(String::as_str)),
        };
        row_kept && changes.unchanged_since(e.stamp, e.tables.iter().map(String::as_str))
    }

    fn valid_response(&self, changes: &Changes, key: &str) -> Option<Bytes> {
        let e = self.responses.get(key)?;
        if self.still_valid(changes, &e) {
            Some(e.body.clone())
        } else {
            self.responses.remove(key);
            None
        }
    }

    pub(crate) fn keep_response(&self, key: String, entry: ResponseEntry) {
        let weight = entry.body.len() + entry.tables.iter().map(String::len).sum::<usize>();
        self.responses.insert(key, Arc::new(entry), weight);
    }
}

/// The request computing a response others are waiting for.
pub(crate) struct Leader<'a> {
    caches: &'a Caches,
    key: String,
    notify: Arc<Notify>,
}

impl Drop for Leader<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.caches.in_flight.lock() {
            m.remove(&self.key);
        }
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_shard_is_emptied_and_the_new_key_kept() {
        let b: Bounded<u32> = Bounded::new(SHARDS, 1 << 20);
        for i in 0..1000 {
            b.insert(format!("k{i}"), i, 8);
        }
        assert_eq!(b.get("k999"), Some(999));
        let total: usize = b.shards.iter().map(|s| s.lock().unwrap().map.len()).sum();
        assert!(total <= SHARDS, "{total}");
    }

    #[test]
    fn the_byte_budget_bounds_a_shard_and_oversized_values_are_not_kept() {
        let b: Bounded<u32> = Bounded::new(1000, SHARDS * 100);
        b.insert("big".into(), 1, 500);
        assert_eq!(b.get("big"), None);
        for i in 0..200 {
            b.insert(format!("k{i}"), i, 40);
        }
        for s in &b.shards {
            assert!(s.lock().unwrap().bytes <= 100);
        }
        assert_eq!(b.get("k199"), Some(199));
    }

    #[test]
    fn responses_expire_when_a_table_they_read_changes() {
        let changes = Changes::new();
        let c = Caches::new(10, 10, 1 << 20);
        let stamp = changes.stamp();
        c.keep_response(
            "k".into(),
            ResponseEntry {
                body: Bytes::from_static(b"{}"),
                stamp,
                tables: vec!["posts".into()],
                row_tables: Vec::new(),
                row: None,
            },
        );
        assert!(c.response(&changes, "k").is_some());
        changes.touch("users", crate::store::changes::RowChange::Update, 1);
        changes.publish();
        assert!(c.response(&changes, "k").is_some());
        changes.touch("posts", crate::store::changes::RowChange::Insert, 1);
        changes.publish();
        assert!(c.response(&changes, "k").is_none());
    }
}
