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
use crate::store::{Changes, Stamp};
use bytes::Bytes;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex};

const SHARDS: usize = 16;

pub(crate) struct Bounded<V> {
    hasher: RandomState,
    shards: Vec<Mutex<HashMap<String, V>>>,
    per_shard: usize,
}

impl<V: Clone> Bounded<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<String, V>> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    pub(crate) fn get(&self, key: &str) -> Option<V> {
        self.shard(key).lock().ok()?.get(key).cloned()
    }

    pub(crate) fn insert(&self, key: String, value: V) {
        if let Ok(mut m) = self.shard(&key).lock() {
            if m.len() >= self.per_shard && !m.contains_key(&key) {
                m.clear();
            }
            m.insert(key, value);
        }
    }

    pub(crate) fn remove(&self, key: &str) {
        if let Ok(mut m) = self.shard(key).lock() {
            m.remove(key);
        }
    }
}

/// A verified token's caller.
#[derive(Clone)]
pub(crate) struct TokenEntry {
    pub caller: Caller,
    /// The token's `exp` claim (seconds).
    pub exp: i64,
    pub stamp: Stamp,
}

/// A cached response body and what it read.
pub(crate) struct ResponseEntry {
    pub body: Bytes,
    pub stamp: Stamp,
    pub tables: Vec<String>,
}

pub(crate) struct Caches {
    pub tokens: Bounded<TokenEntry>,
    pub responses: Bounded<Arc<ResponseEntry>>,
    /// Off when pb.toml sets `cache.responses = false`.
    pub responses_on: bool,
}

impl Caches {
    pub(crate) fn new(token_capacity: usize, response_capacity: usize) -> Self {
        Self {
            tokens: Bounded::new(token_capacity),
            responses: Bounded::new(response_capacity.max(1)),
            responses_on: response_capacity > 0,
        }
    }

    /// A cached body for `key`, if still valid.
    pub(crate) fn response(&self, changes: &Changes, key: &str) -> Option<Bytes> {
        if !self.responses_on {
            return None;
        }
        let e = self.responses.get(key)?;
        if changes.unchanged_since(e.stamp, e.tables.iter().map(String::as_str)) {
            Some(e.body.clone())
        } else {
            self.responses.remove(key);
            None
        }
    }

    pub(crate) fn keep_response(&self, key: String, entry: ResponseEntry) {
        if self.responses_on {
            self.responses.insert(key, Arc::new(entry));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_shard_is_emptied_and_the_new_key_kept() {
        let b: Bounded<u32> = Bounded::new(SHARDS);
        for i in 0..1000 {
            b.insert(format!("k{i}"), i);
        }
        assert_eq!(b.get("k999"), Some(999));
        let total: usize = b.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= SHARDS, "{total}");
    }

    #[test]
    fn responses_expire_when_a_table_they_read_changes() {
        let changes = Changes::new();
        let c = Caches::new(10, 10);
        let stamp = changes.stamp();
        c.keep_response(
            "k".into(),
            ResponseEntry {
                body: Bytes::from_static(b"{}"),
                stamp,
                tables: vec!["posts".into()],
            },
        );
        assert!(c.response(&changes, "k").is_some());
        changes.touch("users");
        changes.publish();
        assert!(c.response(&changes, "k").is_some());
        changes.touch("posts");
        changes.publish();
        assert!(c.response(&changes, "k").is_none());
    }
}
