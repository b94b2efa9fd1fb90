//! In-memory attempt limits of the auth flows, as PocketBase keeps them whatever
//! `settings.rateLimits` says: wrong OTP codes per record and client, and the two-minute pause
//! between verification or password-reset mails to one record.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept before expired ones are swept (a sweep is one pass over the map).
const SWEEP_AT: usize = 10_000;

/// Fixed windows per key: at most `max` hits per `window`.
#[derive(Default)]
pub(crate) struct Windows {
    hits: Mutex<HashMap<String, (Instant, u32)>>,
}

impl Windows {
    /// Count a hit for `key`; false when it is past the limit.
    pub(crate) fn hit(&self, key: &str, max: u32, window: Duration, now: Instant) -> bool {
        let mut hits = self.hits.lock().unwrap_or_else(|p| p.into_inner());
        if hits.len() >= SWEEP_AT {
            hits.retain(|_, (start, _)| now.duration_since(*start) <= window);
        }
        let e = hits.entry(key.to_owned()).or_insert((now, 0));
        if now.duration_since(e.0) > window {
            *e = (now, 0);
        }
        e.1 += 1;
        e.1 <= max
    }
}

/// Keys that stay set for a while (a mail just sent to a record).
#[derive(Default)]
pub(crate) struct Cooldowns {
    until: Mutex<HashMap<String, Instant>>,
}

impl Cooldowns {
    pub(crate) fn active(&self, key: &str, now: Instant) -> bool {
        let until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        until.get(key).is_some_and(|t| *t > now)
    }

    pub(crate) fn set(&self, key: &str, for_: Duration, now: Instant) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        if until.len() >= SWEEP_AT {
            until.retain(|_, t| *t > now);
        }
        until.insert(key.to_owned(), now + for_);
    }

    pub(crate) fn clear(&self, key: &str) {
        let mut until = self.until.lock().unwrap_or_else(|p| p.into_inner());
        until.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sixth_hit_in_a_window_is_refused_and_a_new_window_starts_fresh() {
        let w = Windows::default();
        let t0 = Instant::now();
        let d = Duration::from_secs(180);
        for _ in 0..5 {
            assert!(w.hit("r", 5, d, t0));
        }
        assert!(!w.hit("r", 5, d, t0));
        assert!(w.hit("other", 5, d, t0));
        assert!(w.hit("r", 5, d, t0 + Duration::from_secs(181)));
    }

    #[test]
    fn cooldowns_end_and_can_be_cleared() {
        let c = Cooldowns::default();
        let t0 = Instant::now();
        c.set("k", Duration::from_secs(120), t0);
        assert!(c.active("k", t0 + Duration::from_secs(119)));
        assert!(!c.active("k", t0 + Duration::from_secs(121)));
        c.clear("k");
        assert!(!c.active("k", t0));
    }
}
