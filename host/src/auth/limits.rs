//! In-memory attempt limits of the auth flows, whatever `settings.rateLimits` says: PocketBase's
//! own (wrong OTP codes per record and client, the two-minute pause between verification or
//! password-reset mails to one record) and ours, on by default (`Throttle`: failed sign-ins per
//! identity and per client address, mails asked for per client address; pb.toml `[auth]`).

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

    /// The hits counted for `key` in its current window.
    pub(crate) fn count(&self, key: &str, window: Duration, now: Instant) -> u32 {
        let hits = self.hits.lock().unwrap_or_else(|p| p.into_inner());
        hits.get(key)
            .filter(|(start, _)| now.duration_since(*start) <= window)
            .map_or(0, |(_, n)| *n)
    }
}

/// Brute-force protection: failed sign-ins counted per identity (a collection and the identity
/// as sent, lowercased) and per client address, and mails asked for per client address, each in
/// a fixed window. Only failures count, so a successful sign-in is never held back by anything
/// but the guessing that came before it.
pub(crate) struct Throttle {
    cfg: crate::config::AuthConfig,
    identities: Windows,
    ips: Windows,
    mails: Windows,
}

impl Throttle {
    pub(crate) fn new(cfg: crate::config::AuthConfig) -> Self {
        Self {
            cfg,
            identities: Windows::default(),
            ips: Windows::default(),
            mails: Windows::default(),
        }
    }

    fn window(&self) -> Duration {
        Duration::from_millis(self.cfg.window_ms)
    }

    fn identity_key(collection_id: &str, identity: &str) -> String {
        format!("{collection_id}\u{0}{}", identity.to_lowercase())
    }

    /// Whether sign-ins as `identity` of `collection_id`, or any from `ip`, are refused now:
    /// their failures reached the limit in this window. Checked before any password is.
    pub(crate) fn blocked(
        &self,
        collection_id: &str,
        identity: &str,
        ip: &str,
        now: Instant,
    ) -> bool {
        let (w, c) = (self.window(), &self.cfg);
        (c.failures_per_identity > 0
            && self
                .identities
                .count(&Self::identity_key(collection_id, identity), w, now)
                >= c.failures_per_identity)
            || (c.failures_per_ip > 0 && self.ips.count(ip, w, now) >= c.failures_per_ip)
    }

    /// Count a failed sign-in as `identity` of `collection_id` from `ip`.
    pub(crate) fn failed(&self, collection_id: &str, identity: &str, ip: &str, now: Instant) {
        let w = self.window();
        self.identities.hit(
            &Self::identity_key(collection_id, identity),
            u32::MAX,
            w,
            now,
        );
        self.ips.hit(ip, u32::MAX, w, now);
    }

    /// Count a mail asked for from `ip`; false when that is past the limit.
    pub(crate) fn mail_request(&self, ip: &str, now: Instant) -> bool {
        self.cfg.mail_requests_per_ip == 0
            || self
                .mails
                .hit(ip, self.cfg.mail_requests_per_ip, self.window(), now)
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

    fn throttle(identity: u32, ip: u32, mails: u32) -> Throttle {
        Throttle::new(crate::config::AuthConfig {
            failures_per_identity: identity,
            failures_per_ip: ip,
            mail_requests_per_ip: mails,
            window_ms: 60_000,
        })
    }

    #[test]
    fn an_identity_is_blocked_after_its_failures_from_any_address_until_the_window_ends() {
        let t = throttle(3, 0, 0);
        let t0 = Instant::now();
        for ip in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
            assert!(!t.blocked("c", "Alice@x.com", ip, t0));
            t.failed("c", "Alice@x.com", ip, t0);
        }
        // Case does not make another identity; another collection does.
        assert!(t.blocked("c", "alice@X.com", "4.4.4.4", t0));
        assert!(!t.blocked("other", "alice@x.com", "4.4.4.4", t0));
        assert!(!t.blocked("c", "bob@x.com", "1.1.1.1", t0));
        assert!(!t.blocked("c", "alice@x.com", "4.4.4.4", t0 + Duration::from_secs(61)));
    }

    #[test]
    fn an_address_is_blocked_after_its_failures_on_any_identity() {
        let t = throttle(0, 2, 0);
        let t0 = Instant::now();
        t.failed("c", "a", "9.9.9.9", t0);
        assert!(!t.blocked("c", "b", "9.9.9.9", t0));
        t.failed("c", "b", "9.9.9.9", t0);
        assert!(t.blocked("c", "z", "9.9.9.9", t0));
        assert!(!t.blocked("c", "z", "8.8.8.8", t0));
    }

    #[test]
    fn mail_requests_are_counted_per_address_and_zero_means_no_limit() {
        let t = throttle(0, 0, 2);
        let t0 = Instant::now();
        assert!(t.mail_request("a", t0));
        assert!(t.mail_request("a", t0));
        assert!(!t.mail_request("a", t0));
        assert!(t.mail_request("b", t0));
        let off = throttle(0, 0, 0);
        for _ in 0..10 {
            assert!(off.mail_request("a", t0));
            off.failed("c", "x", "a", t0);
            assert!(!off.blocked("c", "x", "a", t0));
        }
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
