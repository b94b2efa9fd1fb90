//! bcrypt hashes in PocketBase's format (`$2a$`, cost 10 by default). A hash or a check costs
//! tens of milliseconds of CPU, so the async entry points ([`hash_off`], [`check`],
//! [`check_unknown`]) run it on tokio's blocking pool behind one semaphore with a permit per
//! CPU: a storm of sign-ins queues for those permits instead of filling the blocking pool and
//! taking every core from the reads.

use super::AuthError;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use tokio::sync::Semaphore;

pub(crate) const DEFAULT_COST: u32 = 10;

/// The permits for bcrypt work: as many as there are CPUs.
fn slots() -> &'static Semaphore {
    static SLOTS: OnceLock<Semaphore> = OnceLock::new();
    SLOTS.get_or_init(|| {
        Semaphore::new(std::thread::available_parallelism().map_or(1, std::num::NonZero::get))
    })
}

/// Run `f` on the blocking pool once a permit is free.
async fn on_pool<R, F>(f: F) -> Result<R, AuthError>
where
    F: FnOnce() -> R + Send + 'static,
    R: Send + 'static,
{
    let _permit = slots()
        .acquire()
        .await
        .map_err(|_| AuthError::Hash("the hashing permits are closed".into()))?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| AuthError::Hash(format!("hashing thread: {e}")))
}

/// Hash on the calling thread: for the CLI, which has no runtime to protect.
pub(crate) fn hash(password: &str, cost: u32) -> Result<String, AuthError> {
    let cost = if cost == 0 { DEFAULT_COST } else { cost };
    bcrypt::hash_with_result(password, cost)
        .map(|h| h.format_for_version(bcrypt::Version::TwoA))
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// [`hash`] off the async workers, under the cap.
pub(crate) async fn hash_off(password: String, cost: u32) -> Result<String, AuthError> {
    on_pool(move || hash(&password, cost)).await?
}

/// False for a wrong password and for anything that is not a bcrypt hash.
fn verify(password: &str, hash: &str) -> bool {
    !hash.is_empty() && bcrypt::verify(password, hash).unwrap_or(false)
}

/// [`verify`] off the async workers, under the cap (false when the pool fails).
pub(crate) async fn check(password: String, hash: String) -> bool {
    on_pool(move || verify(&password, &hash))
        .await
        .unwrap_or(false)
}

/// A hash of nothing anyone sends, at `cost`, made once per cost.
fn dummy_hash(cost: u32) -> String {
    static DUMMIES: OnceLock<Mutex<HashMap<u32, String>>> = OnceLock::new();
    let cost = if cost == 0 { DEFAULT_COST } else { cost };
    let map = DUMMIES.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(h) = map.lock().ok().and_then(|m| m.get(&cost).cloned()) {
        return h;
    }
    let h = hash("ferrobase-dummy-password", cost).unwrap_or_default();
    if let Ok(mut m) = map.lock() {
        m.insert(cost, h.clone());
    }
    h
}

/// The same work as checking a password of `cost` (the identity's collection's), for an
/// identity that does not exist, so a missing account is not told apart by timing.
pub(crate) async fn check_unknown(password: String, cost: u32) {
    let _ = on_pool(move || verify(&password, &dummy_hash(cost))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_2a_and_verify() {
        let h = hash("Secret-12345", 4).unwrap();
        assert!(h.starts_with("$2a$04$"), "{h}");
        assert!(verify("Secret-12345", &h));
        assert!(!verify("secret-12345", &h));
        assert!(!verify("x", ""));
    }

    #[test]
    fn a_dummy_hash_has_the_cost_asked_and_matches_nothing() {
        let h = dummy_hash(5);
        assert!(h.starts_with("$2a$05$"), "{h}");
        assert_eq!(dummy_hash(5), h, "made once per cost");
        assert!(!verify("", &h));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_one_hash_per_cpu_runs_at_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static RUNNING: AtomicUsize = AtomicUsize::new(0);
        static PEAK: AtomicUsize = AtomicUsize::new(0);
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let tasks: Vec<_> = (0..cpus * 4)
            .map(|_| {
                tokio::spawn(on_pool(|| {
                    let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
                    PEAK.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    RUNNING.fetch_sub(1, Ordering::SeqCst);
                }))
            })
            .collect();
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let peak = PEAK.load(Ordering::SeqCst);
        assert!((1..=cpus).contains(&peak), "peak {peak} with {cpus} cpus");
    }

    #[tokio::test]
    async fn the_async_check_agrees_with_the_hash() {
        let h = hash_off("Secret-12345".into(), 4).await.unwrap();
        assert!(check("Secret-12345".into(), h.clone()).await);
        assert!(!check("secret-12345".into(), h).await);
        check_unknown("x".into(), 4).await;
    }

    #[test]
    fn a_pocketbase_hash_verifies() {
        // Written by PocketBase 0.40.6's `superuser upsert a@b.c secret123456`.
        let h = "$2a$10$.RaHFSNyqIaq0ROyZBsQ8eKz/Z7kW5KFV5SuPAuTrthsgHMidkt1i";
        assert!(verify("secret123456", h));
        assert!(!verify("secret1234567", h));
    }
}
