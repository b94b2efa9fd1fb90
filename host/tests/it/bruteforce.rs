//! Brute-force protection, on by default (pb.toml `[auth]`): failed sign-ins throttled per
//! identity and per client address, mails asked for per address, successful sign-ins never
//! counted, an unknown identity as slow to refuse as a wrong password, and the 429 worded as
//! PocketBase's own rate limiter words it (checked against the reference with its
//! `settings.rateLimits` switched on).

use crate::common::{Server, reference_bin};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const PASS: &str = "rightpass123";

/// A ferrobase server whose pb.toml sets these `[auth]` limits.
fn server_with(auth: &str) -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("pb.toml"), format!("[auth]\n{auth}\n")).expect("pb.toml");
    Server::start_in(dir)
}

fn user(s: &Server, su: &str, email: &str) {
    let r = s.req(
        "POST",
        "/api/collections/users/records",
        Some(su),
        Some(&json!({"email": email, "password": PASS, "passwordConfirm": PASS})),
    );
    assert_eq!(r.status, 200, "create {email}: {}", r.json);
}

fn too_many() -> Value {
    json!({"data": {}, "message": "Too Many Requests.", "status": 429})
}

#[test]
fn failed_sign_ins_are_throttled_per_identity_and_per_address_and_successes_never() {
    let s = server_with(
        "failures_per_identity = 3\nfailures_per_ip = 6\nmail_requests_per_ip = 2\nwindow_ms = 600000",
    );
    let su = s.su_token();
    for e in ["a@example.com", "b@example.com"] {
        user(&s, &su, e);
    }
    // Successes are never counted: far more of them than any limit.
    for _ in 0..8 {
        assert_eq!(s.login("users", "a@example.com", PASS).status, 200);
    }
    // Three failures for one identity (its case does not matter), then it is refused, even
    // with the right password, while another identity still signs in.
    for _ in 0..3 {
        let r = s.login("users", "A@example.com", "wrong-guess");
        assert_eq!(r.status, 400, "{}", r.json);
    }
    let r = s.login("users", "a@example.com", "wrong-guess");
    assert_eq!((r.status, r.json), (429, too_many()));
    let r = s.login("users", "a@example.com", PASS);
    assert_eq!((r.status, r.json), (429, too_many()));
    assert_eq!(s.login("users", "b@example.com", PASS).status, 200);
    // The same identity name in another collection is another identity.
    let r = s.login("_superusers", "a@example.com", "wrong-guess");
    assert_eq!(r.status, 400, "{}", r.json);
    // Unknown identities count against the address too: 3 + 1 + 2 = 6 failures from here,
    // then every sign-in from this address is refused, known or not.
    for who in ["ghost1@example.com", "ghost2@example.com"] {
        assert_eq!(s.login("users", who, "x").status, 400);
    }
    let r = s.login("users", "b@example.com", PASS);
    assert_eq!((r.status, r.json), (429, too_many()));
    // Mails asked for from one address: two, then 429.
    for _ in 0..2 {
        let r = s.req(
            "POST",
            "/api/collections/users/request-password-reset",
            None,
            Some(&json!({"email": "nobody@example.com"})),
        );
        assert_eq!(r.status, 204, "{}", r.json);
    }
    let r = s.req(
        "POST",
        "/api/collections/users/request-verification",
        None,
        Some(&json!({"email": "b@example.com"})),
    );
    assert_eq!((r.status, r.json), (429, too_many()));
}

#[test]
fn a_throttled_identity_signs_in_again_once_its_window_ends() {
    let s = server_with("failures_per_identity = 1\nwindow_ms = 1500");
    let su = s.su_token();
    user(&s, &su, "a@example.com");
    assert_eq!(s.login("users", "a@example.com", "nope").status, 400);
    assert_eq!(s.login("users", "a@example.com", PASS).status, 429);
    std::thread::sleep(Duration::from_millis(1700));
    assert_eq!(s.login("users", "a@example.com", PASS).status, 200);
}

#[test]
fn zero_turns_the_limits_off() {
    let s = server_with("failures_per_identity = 0\nfailures_per_ip = 0");
    let su = s.su_token();
    user(&s, &su, "a@example.com");
    for _ in 0..25 {
        assert_eq!(s.login("users", "a@example.com", "nope").status, 400);
    }
    assert_eq!(s.login("users", "a@example.com", PASS).status, 200);
}

/// The median time of `n` failed sign-ins as `identity`.
fn median_failure(s: &Server, identity: &str, n: usize) -> Duration {
    let mut times: Vec<Duration> = (0..n)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(s.login("users", identity, "wrong-guess").status, 400);
            t.elapsed()
        })
        .collect();
    times.sort();
    times[n / 2]
}

#[test]
fn an_unknown_identity_takes_as_long_to_refuse_as_a_wrong_password() {
    let s = server_with("failures_per_identity = 0\nfailures_per_ip = 0");
    let su = s.su_token();
    user(&s, &su, "a@example.com");
    // Warm up both paths (the dummy hash is made on first use).
    median_failure(&s, "ghost@example.com", 1);
    median_failure(&s, "a@example.com", 1);
    let known = median_failure(&s, "a@example.com", 7);
    let unknown = median_failure(&s, "ghost@example.com", 7);
    // A skipped bcrypt check answers in well under a millisecond; a cost-10 check takes tens.
    let (k, u) = (known.as_secs_f64(), unknown.as_secs_f64());
    assert!(
        u > k * 0.5 && u < k * 2.0,
        "unknown {unknown:?} vs wrong password {known:?}"
    );
}

#[test]
fn the_429_is_the_one_pocketbase_answers_past_its_rate_limits() {
    let Some(bin) = reference_bin() else {
        return;
    };
    let pb = Server::start_bin(bin.to_str().expect("utf-8 path"));
    let su = pb.su_token();
    let r = pb.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"rateLimits": {"enabled": true, "rules": [
            {"label": "*:authWithPassword", "maxRequests": 1, "duration": 60, "audience": ""}
        ]}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let first = pb.login("users", "x@example.com", "wrong-guess");
    assert_eq!(first.status, 400, "{}", first.json);
    let refused = pb.login("users", "x@example.com", "wrong-guess");
    assert_eq!(refused.status, 429, "{}", refused.json);

    let s = server_with("failures_per_identity = 1");
    assert_eq!(s.login("users", "x@example.com", "wrong-guess").status, 400);
    let ours = s.login("users", "x@example.com", "wrong-guess");
    assert_eq!((ours.status, &ours.json), (refused.status, &refused.json));
    assert_eq!(ours.content_type, refused.content_type);
}
