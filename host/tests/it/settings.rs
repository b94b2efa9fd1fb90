//! Settings: generated PATCH bodies sent to ferrobase and to the reference PocketBase in the
//! same order, statuses and bodies compared; storage as PocketBase stores it (across a
//! restart, secrets kept and never shown); `superuserIPs` and `trustedProxy` in the request
//! path.
//!
//! `SETTINGS_SEED` and `SETTINGS_CASES` (default 500) replay or widen the generated run.

use crate::common::{Server, err};
use crate::rng::{Rng, env_num};
use serde_json::{Map, Value, json};

const DEFAULT_CASES: u64 = 500;
const DEFAULT_SEED: u64 = 0x5e77_1265;

const EMAILS: &[&str] = &[
    "support@example.com",
    "a@b.co",
    "a@b.c",
    "a@b",
    "bad",
    "ü@b.co",
    "a@ü.co",
    "x@y.z.",
    "",
    "a b@c.de",
    "a..b@c.de",
    "a@1.2",
    "x@a.b.1c",
    "a@-b.co",
    "a@b.c1",
    "a@b_c.io",
    "a@b.c-d",
];
const URLS: &[&str] = &[
    "http://localhost:8090",
    "https://example.com/x?y#z",
    "ftp://x.y",
    "localhost:8090",
    "notaurl",
    "notaurl.",
    "bad url",
    "http://[::1]:80/",
    "x.y",
    "",
    "http://1.2.3.4",
    "https://a.b:99999",
    "gopher://a.b",
    "http://a_b.com",
    "https://ex.com/a b",
    "http://-a.com",
    "https://例え.jp",
];
const HOSTS: &[&str] = &[
    "smtp.example.com",
    "1.2.3.4",
    "::1",
    "bad host!",
    "a_b",
    "-a.com",
    "x.",
    "",
    "a..b",
    "a.b-",
    "localhost",
    "x_",
];
const COLORS: &[&str] = &[
    "#1055c9", "#fff", "#12345g", "red", "", "#ABCDEF", "1055c9a", "#abcdeg",
];
const CRONS: &[&str] = &[
    "",
    "@daily",
    "@every 5m",
    "0 0 * * *",
    "*/0 * * * *",
    "61 * * * *",
    "1-5 * * * *",
    "5-1 * * * *",
    "* * * *",
    "a b c d e",
    "*/15 1-3 * * 1,5",
    "0  * * *",
    "+5 * * * *",
    "1/2 * * * *",
    "1/2/3 * * * *",
    "1-2-3 * * * *",
    "* * 0 * *",
    "* * * 13 *",
];
const LABELS: &[&str] = &[
    "/api/",
    "/api/health",
    "*:auth",
    "posts:create",
    "POST /api/x",
    "bad label!",
    "abc",
    "",
    "a b",
    "/api/x/",
    "*:",
    "users:auth",
    "GET /",
];
const AUDIENCES: &[&str] = &["", "@guest", "@auth", "x"];
const IPS: &[&str] = &[
    "127.0.0.1",
    "10.0.0.0/8",
    "::1",
    "fe80::1%eth0",
    "1.2.3.4/33",
    "01.2.3.4",
    "bad",
    "",
    " 1.2.3.4",
    "0.0.0.0/0",
    "::/0",
    "1.2.3.4/08",
    "192.168.1.1/24",
];
const TEXTS: &[&str] = &["", "Acme", "  ", "ü", "My App <&>"];
const AUTH_METHODS: &[&str] = &["", "PLAIN", "LOGIN", "plain", "X"];
const HEADERS: &[&str] = &[
    "X-Forwarded-For",
    "X-Real-IP",
    "CF-Connecting-IP",
    "",
    "bad header",
];

/// A value of the wrong JSON type, sometimes.
fn wrong(rng: &mut Rng) -> Option<Value> {
    rng.pct(6).then(|| {
        rng.pick(&[
            json!(1),
            json!("x"),
            json!(true),
            json!([]),
            json!({}),
            Value::Null,
        ])
        .clone()
    })
}

fn text(rng: &mut Rng, pool: &[&str]) -> Value {
    if let Some(w) = wrong(rng) {
        return w;
    }
    if rng.pct(3) {
        return json!("a".repeat(if rng.pct(50) { 255 } else { 256 }));
    }
    json!(rng.pick(pool))
}

fn int(rng: &mut Rng) -> Value {
    if let Some(w) = wrong(rng) {
        return w;
    }
    rng.pick(&[
        json!(0),
        json!(1),
        json!(-1),
        json!(3),
        json!(50),
        json!(587),
        json!(65536),
        json!(9_007_199_254_740_991_i64),
        json!(9_007_199_254_740_992_i64),
        json!(-9_007_199_254_740_992_i64),
        json!(1.5),
        json!("5"),
    ])
    .clone()
}

fn boolean(rng: &mut Rng) -> Value {
    if let Some(w) = wrong(rng) {
        return w;
    }
    json!(rng.pct(50))
}

/// Some keys of a section, each with a generated value; sometimes a key in another case, an
/// unknown key, or the whole section null.
/// A generator of one key's value.
type Gen<'a> = &'a dyn Fn(&mut Rng) -> Value;

fn section(rng: &mut Rng, keys: &[(&str, Gen)]) -> Value {
    if rng.pct(3) {
        return Value::Null;
    }
    let mut m = Map::new();
    for (k, make) in keys {
        if rng.pct(45) {
            let key = if rng.pct(5) {
                k.to_uppercase()
            } else {
                (*k).to_owned()
            };
            m.insert(key, make(rng));
        }
    }
    if rng.pct(5) {
        m.insert("unknownKey".into(), json!(1));
    }
    Value::Object(m)
}

fn list(rng: &mut Rng, max: usize, item: &dyn Fn(&mut Rng) -> Value) -> Value {
    if let Some(w) = wrong(rng) {
        return w;
    }
    Value::Array((0..rng.below(max + 1)).map(|_| item(rng)).collect())
}

fn s3(rng: &mut Rng) -> Value {
    section(
        rng,
        &[
            ("enabled", &boolean),
            ("bucket", &|r| text(r, &["", "b"])),
            ("region", &|r| text(r, &["", "eu"])),
            ("endpoint", &|r| text(r, URLS)),
            ("accessKey", &|r| text(r, &["", "k"])),
            ("secret", &|r| text(r, &["", "s"])),
            ("forcePathStyle", &boolean),
        ],
    )
}

fn patch(rng: &mut Rng) -> Value {
    if rng.pct(2) {
        return rng.pick(&[json!([1]), json!("x"), json!(5)]).clone();
    }
    let mut m = Map::new();
    for _ in 0..1 + rng.below(3) {
        let (name, v) = match rng.below(10) {
            // Always let 127.0.0.1 in: a list without it would lock the test out of both.
            0 => (
                "superuserIPs",
                match list(rng, 2, &|r| text(r, IPS)) {
                    Value::Array(mut a) => {
                        a.insert(
                            0,
                            json!(if rng.pct(50) {
                                "127.0.0.1"
                            } else {
                                "127.0.0.0/8"
                            }),
                        );
                        Value::Array(a)
                    }
                    other => other,
                },
            ),
            1 => (
                "smtp",
                section(
                    rng,
                    &[
                        ("enabled", &boolean),
                        ("port", &int),
                        ("host", &|r| text(r, HOSTS)),
                        ("username", &|r| text(r, TEXTS)),
                        ("password", &|r| text(r, &["", "pw"])),
                        ("authMethod", &|r| text(r, AUTH_METHODS)),
                        ("tls", &boolean),
                        ("localName", &|r| text(r, HOSTS)),
                    ],
                ),
            ),
            2 => (
                "backups",
                section(
                    rng,
                    &[
                        ("cron", &|r| text(r, CRONS)),
                        ("cronMaxKeep", &int),
                        ("s3", &s3),
                    ],
                ),
            ),
            3 => ("s3", s3(rng)),
            4 => (
                "meta",
                section(
                    rng,
                    &[
                        ("accentColor", &|r| text(r, COLORS)),
                        ("appName", &|r| text(r, TEXTS)),
                        ("appURL", &|r| text(r, URLS)),
                        ("senderName", &|r| text(r, TEXTS)),
                        ("senderAddress", &|r| text(r, EMAILS)),
                        ("hideControls", &boolean),
                    ],
                ),
            ),
            5 => (
                "rateLimits",
                section(
                    rng,
                    &[
                        ("rules", &|r| {
                            list(r, 3, &|r| {
                                section(
                                    r,
                                    &[
                                        ("label", &|r| text(r, LABELS)),
                                        ("audience", &|r| text(r, AUDIENCES)),
                                        ("duration", &int),
                                        ("maxRequests", &int),
                                    ],
                                )
                            })
                        }),
                        ("excludedIPs", &|r| list(r, 2, &|r| text(r, IPS))),
                        ("enabled", &boolean),
                    ],
                ),
            ),
            6 => (
                "trustedProxy",
                section(
                    rng,
                    &[
                        ("headers", &|r| list(r, 2, &|r| text(r, HEADERS))),
                        ("useLeftmostIP", &boolean),
                    ],
                ),
            ),
            7 => (
                "batch",
                section(
                    rng,
                    &[
                        ("enabled", &boolean),
                        ("maxRequests", &int),
                        ("timeout", &int),
                        ("maxBodySize", &int),
                    ],
                ),
            ),
            8 => (
                "logs",
                section(
                    rng,
                    &[
                        ("maxDataSize", &int),
                        ("maxDays", &int),
                        ("minLevel", &int),
                        ("logIP", &boolean),
                        ("logAuthId", &boolean),
                    ],
                ),
            ),
            _ => ("unknownSection", json!({"a": 1})),
        };
        m.insert(name.to_owned(), v);
    }
    Value::Object(m)
}

/// A full, valid settings body: both servers are put back on it after a disagreement, so one
/// difference does not make every later case differ too.
fn baseline() -> Value {
    json!({"superuserIPs": [], "smtp": {"enabled": false, "port": 587, "host": "smtp.example.com",
        "username": "", "password": "", "authMethod": "", "tls": false, "localName": ""},
      "backups": {"cron": "", "cronMaxKeep": 3, "s3": {"enabled": false, "bucket": "", "region": "",
        "endpoint": "", "accessKey": "", "secret": "", "forcePathStyle": false}},
      "s3": {"enabled": false, "bucket": "", "region": "", "endpoint": "", "accessKey": "",
        "secret": "", "forcePathStyle": false},
      "meta": {"accentColor": "#1055c9", "appName": "Acme", "appURL": "http://localhost:8090",
        "senderName": "Support", "senderAddress": "support@example.com", "hideControls": false},
      "rateLimits": {"rules": [], "excludedIPs": [], "enabled": false},
      "trustedProxy": {"headers": [], "useLeftmostIP": false},
      "batch": {"enabled": false, "maxRequests": 50, "timeout": 3, "maxBodySize": 0},
      "logs": {"maxDataSize": 0, "maxDays": 5, "minLevel": 0, "logIP": true, "logAuthId": false}})
}

/// Without `secret` errors, whether the two refusals are the same.
fn without_secret_errors(v: &Value) -> Value {
    fn at<'a>(v: &'a mut Value, path: &[&str]) -> Option<&'a mut Map<String, Value>> {
        path.iter()
            .try_fold(v, |v, k| v.get_mut(*k))
            .and_then(Value::as_object_mut)
    }
    let mut v = v.clone();
    for path in [&["data", "s3"][..], &["data", "backups", "s3"][..]] {
        if let Some(o) = at(&mut v, path) {
            o.remove("secret");
        }
    }
    for path in [&["data", "backups"][..], &["data"][..]] {
        if let Some(o) = at(&mut v, path) {
            o.retain(|_, e| e.as_object().is_none_or(|m| !m.is_empty()));
        }
    }
    v
}

/// A known divergence: PocketBase keeps a cleared S3 secret in memory until it restarts (its
/// settings reload leaves a key the stored JSON omits untouched), so its validation still finds
/// the secret that ferrobase, which clears it at once, asks for. Ferrobase's refusal names the
/// missing secret; the reference's does not, or accepts the change.
fn only_a_forgotten_secret(reference: &Value, ours: &Value) -> bool {
    ours.to_string()
        .contains("\"secret\":{\"code\":\"validation_required\"")
        && !reference
            .to_string()
            .contains("\"secret\":{\"code\":\"validation_required\"")
        && (reference["status"].is_null()
            || without_secret_errors(reference) == without_secret_errors(ours))
}

fn resync(reference: &Server, ref_su: &str, ours: &Server, our_su: &str) {
    for (s, su) in [(reference, ref_su), (ours, our_su)] {
        let r = s.req("PATCH", "/api/settings", Some(su), Some(&baseline()));
        assert_eq!(r.status, 200, "baseline: {}", r.json);
    }
}

#[test]
fn generated_settings_patches_match_pocketbase() {
    let Some((reference, ours)) = crate::common::reference_and_subject(false) else {
        return;
    };
    let seed = env_num("SETTINGS_SEED").unwrap_or(DEFAULT_SEED);
    let cases = env_num("SETTINGS_CASES").unwrap_or(DEFAULT_CASES);
    println!("settings differential: seed={seed:#x} cases={cases}");
    let (ref_su, our_su) = (reference.su_token(), ours.su_token());
    let mut rng = Rng::new(seed);
    let mut mismatches = Vec::new();
    let (mut refused, mut saved, mut known) = (0, 0, 0);
    for case in 0..cases {
        let body = patch(&mut rng);
        let a = reference.req("PATCH", "/api/settings", Some(&ref_su), Some(&body));
        let b = ours.req("PATCH", "/api/settings", Some(&our_su), Some(&body));
        if a.status == 200 {
            saved += 1;
        } else {
            refused += 1;
        }
        let (ga, gb) = (
            reference.req("GET", "/api/settings", Some(&ref_su), None),
            ours.req("GET", "/api/settings", Some(&our_su), None),
        );
        if (a.status, &a.json) != (b.status, &b.json) || ga.json != gb.json {
            if only_a_forgotten_secret(&a.json, &b.json) {
                known += 1;
                if ga.json != gb.json {
                    resync(&reference, &ref_su, &ours, &our_su);
                }
                continue;
            }
            mismatches.push(format!(
                "#{case} PATCH {body}\n  reference: {} {}\n  ferrobase: {} {}\n  GET equal: {}",
                a.status,
                a.json,
                b.status,
                b.json,
                ga.json == gb.json
            ));
            resync(&reference, &ref_su, &ours, &our_su);
        }
    }
    println!(
        "settings differential: {saved} saved, {refused} refused by the reference, {known} known divergences (a cleared S3 secret)"
    );
    assert!(
        saved > cases / 10 && refused > cases / 10,
        "the generator must exercise both outcomes"
    );
    assert!(
        mismatches.is_empty(),
        "{} of {cases} settings cases differ from PocketBase (seed {seed:#x}):\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The `_params` row as the file holds it: its storage class and text.
fn stored_settings(data_dir: &std::path::Path) -> (String, String) {
    let db = rusqlite::Connection::open_with_flags(
        data_dir.join("data.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    db.query_row(
        "SELECT typeof(value), CAST(value AS TEXT) FROM _params WHERE id = 'settings'",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

#[test]
fn settings_are_stored_as_pocketbase_stores_them_and_survive_a_restart() {
    let s = Server::start();
    let su = s.su_token();
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(
            &json!({"meta": {"appName": "Kept"}, "smtp": {"password": "smtp-pw"},
                     "s3": {"secret": "s3-secret"}, "backups": {"s3": {"secret": "b-secret"}}}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["meta"]["appName"], "Kept");
    for secret in ["smtp-pw", "s3-secret", "b-secret"] {
        assert!(!r.json.to_string().contains(secret), "{}", r.json);
    }
    assert!(r.json["smtp"].get("password").is_none(), "{}", r.json);

    let dir = s.into_dir();
    let (class, text) = stored_settings(&dir.path().join("pb_data"));
    assert_eq!(class, "blob", "PocketBase stores its settings as a BLOB");
    let stored: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(stored["smtp"]["password"], "smtp-pw");
    assert_eq!(stored["s3"]["secret"], "s3-secret");
    assert_eq!(stored["backups"]["s3"]["secret"], "b-secret");

    let s = Server::start_in(dir);
    let su = s.su_token();
    let got = s.req("GET", "/api/settings", Some(&su), None);
    assert_eq!(got.json["meta"]["appName"], "Kept");
    // A later PATCH that leaves the secrets out keeps them.
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(
            &json!({"s3": {"enabled": true, "bucket": "b", "region": "r",
                            "endpoint": "https://s3.example.com", "accessKey": "k"}}),
        ),
    );
    assert_eq!(
        r.status, 200,
        "the stored secret satisfies `required`: {}",
        r.json
    );
    let (_, text) = stored_settings(&s.data_dir());
    assert!(text.contains("s3-secret"));

    // Only superusers.
    assert_eq!(
        s.req("GET", "/api/settings", None, None).json,
        err(
            401,
            "The request requires valid record authorization token."
        )
    );
}

#[test]
fn superuser_ips_refuse_superusers_from_elsewhere_and_trusted_proxies_name_the_client() {
    let s = Server::start();
    let su = s.su_token();
    let health = |headers: &[(&str, &str)], token: Option<&str>| -> (u16, Value) {
        let mut rb = ureq::get(&format!("http://{}/api/health", s.addr));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(t) = token {
            rb = rb.header("Authorization", t);
        }
        let mut res = rb
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .unwrap();
        let status = res.status().as_u16();
        (status, res.body_mut().read_json().unwrap())
    };
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"trustedProxy": {"headers": ["X-Real-IP"]}, "superuserIPs": ["10.0.0.0/8"]})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let not_allowed = err(403, "You are not allowed to perform this request.");
    // From 127.0.0.1 a superuser token is refused everywhere; guests are not concerned.
    assert_eq!(
        s.req("GET", "/api/settings", Some(&su), None).json,
        not_allowed
    );
    assert_eq!(health(&[], Some(&su)), (403, not_allowed.clone()));
    assert_eq!(health(&[], None).0, 200);
    assert_eq!(
        s.login(
            "_superusers",
            crate::common::SU_EMAIL,
            crate::common::SU_PASS
        )
        .json,
        not_allowed
    );
    // Through the trusted proxy header, from inside the list: served, and the real address shown.
    let (status, body) = health(&[("X-Real-IP", "10.1.2.3")], Some(&su));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["data"]["realIP"], "10.1.2.3");
    assert_eq!(body["data"]["possibleProxyHeader"], "X-Real-IP");
    // The last value of the header counts, its rightmost valid address unless useLeftmostIP.
    assert_eq!(
        health(&[("X-Real-IP", "10.0.0.1, 127.0.0.1")], Some(&su)).0,
        403
    );
    assert_eq!(
        health(&[("X-Real-IP", "127.0.0.1, 10.0.0.1")], Some(&su)).0,
        200
    );

    // An untrusted header changes nothing.
    let r = ureq::patch(&format!("http://{}/api/settings", s.addr))
        .header("Authorization", &su)
        .header("X-Real-IP", "10.0.0.1")
        .config()
        .http_status_as_error(false)
        .build()
        .send_json(json!({"trustedProxy": {"headers": []}}))
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(health(&[("X-Real-IP", "10.0.0.1")], Some(&su)).0, 403);
}
