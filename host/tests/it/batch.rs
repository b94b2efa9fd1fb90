//! `POST /api/batch`: generated batches (creates, updates, upserts and deletes, valid and not,
//! under every kind of caller) sent to ferrobase and to the reference PocketBase, statuses,
//! bodies and the stored records compared after each; a batch fails at any request and leaves
//! nothing; plugin hooks inside a batch; no single write interleaves with a batch; a batch past
//! its timeout is rolled back and frees the writer.
//!
//! `BATCH_SEED` and `BATCH_CASES` (default 300) replay or widen the generated run.

use crate::common::{Server, err};
use crate::rng::{Rng, env_num};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

const DEFAULT_CASES: u64 = 300;
const DEFAULT_SEED: u64 = 0x0ba7_c4e5;
const USER_PASS: &str = "user-pass-1234";
const USERS: [&str; 2] = ["user00000000001", "user00000000002"];
const COLLECTIONS: [&str; 4] = ["cats", "notes", "pinned", "locked"];

/// The same collections and records on both servers, with fixed ids.
fn fixture(s: &Server) -> [Option<String>; 4] {
    let su = s.su_token();
    for (i, id) in USERS.iter().enumerate() {
        let r = s.req(
            "POST",
            "/api/collections/users/records",
            Some(&su),
            Some(
                &json!({"id": id, "email": format!("u{i}@example.com"), "password": USER_PASS,
                         "passwordConfirm": USER_PASS, "verified": true}),
            ),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let all_open = json!({"listRule": "", "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": ""});
    let mut cats = json!({"name": "cats", "fields": [{"name": "name", "type": "text", "required": true, "max": 20}],
        "indexes": ["CREATE UNIQUE INDEX idx_cats_name ON cats (name)"]});
    merge(&mut cats, &all_open);
    let cats = s.create_collection(&su, cats);
    s.create_collection(
        &su,
        json!({"name": "notes", "listRule": "", "viewRule": "", "createRule": "@request.auth.id != ''",
            "updateRule": "owner = @request.auth.id", "deleteRule": "owner = @request.auth.id",
            "fields": [
                {"name": "title", "type": "text", "required": true, "min": 2, "max": 30},
                {"name": "n", "type": "number", "min": 0, "max": 100},
                {"name": "tags", "type": "select", "values": ["a", "b", "c"], "maxSelect": 2},
                {"name": "cat", "type": "relation", "collectionId": cats["id"], "maxSelect": 1},
                {"name": "owner", "type": "relation", "collectionId": "_pb_users_auth_", "maxSelect": 1}
            ]}),
    );
    let notes_id = s.req("GET", "/api/collections/notes", Some(&su), None).json["id"].clone();
    let mut pinned = json!({"name": "pinned", "fields": [
        {"name": "note", "type": "relation", "collectionId": notes_id, "required": true, "maxSelect": 1},
        {"name": "label", "type": "text"}]});
    merge(&mut pinned, &all_open);
    s.create_collection(&su, pinned);
    s.create_collection(
        &su,
        json!({"name": "locked", "fields": [{"name": "t", "type": "text"}]}),
    );
    for (coll, body) in [
        ("cats", json!({"id": "cat000000000001", "name": "one"})),
        ("cats", json!({"id": "cat000000000002", "name": "two"})),
        (
            "notes",
            json!({"id": "note00000000001", "title": "first", "n": 1, "cat": "cat000000000001", "owner": USERS[0]}),
        ),
        (
            "notes",
            json!({"id": "note00000000002", "title": "second", "owner": USERS[1], "tags": ["a"]}),
        ),
        (
            "pinned",
            json!({"id": "pin000000000001", "note": "note00000000001", "label": "p"}),
        ),
        ("locked", json!({"id": "lock00000000001", "t": "x"})),
    ] {
        let r = s.req(
            "POST",
            &format!("/api/collections/{coll}/records"),
            Some(&su),
            Some(&body),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"batch": {"enabled": true, "maxRequests": 10}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    [
        None,
        Some(
            s.login("users", "u0@example.com", USER_PASS).json["token"]
                .as_str()
                .unwrap()
                .to_owned(),
        ),
        Some(
            s.login("users", "u1@example.com", USER_PASS).json["token"]
                .as_str()
                .unwrap()
                .to_owned(),
        ),
        Some(su),
    ]
}

fn merge(into: &mut Value, from: &Value) {
    for (k, v) in from.as_object().unwrap() {
        into[k] = v.clone();
    }
}

/// The ids the run may name: every id it has used (to tell them from generated ones), the ids
/// each collection holds now (read from the reference after each batch), and fresh ones.
struct Ids {
    known: BTreeSet<String>,
    existing: std::collections::BTreeMap<String, Vec<String>>,
    fresh: u64,
}

impl Ids {
    fn new() -> Ids {
        let known = [
            "cat000000000001",
            "cat000000000002",
            "note00000000001",
            "note00000000002",
            "pin000000000001",
            "lock00000000001",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        Ids {
            known,
            existing: Default::default(),
            fresh: 0,
        }
    }

    /// What each collection holds now.
    fn refresh(&mut self, state: &Value) {
        self.existing.clear();
        for c in COLLECTIONS {
            let ids = state[c]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|r| r["id"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            self.existing.insert(c.into(), ids);
        }
    }

    fn fresh(&mut self) -> String {
        self.fresh += 1;
        let id = format!("gen{:012}", self.fresh);
        self.known.insert(id.clone());
        id
    }

    /// An id of `coll`: one it holds most of the time, else a missing or malformed one.
    fn any(&mut self, rng: &mut Rng, coll: &str) -> String {
        let held = self.existing.get(coll).cloned().unwrap_or_default();
        match rng.below(20) {
            0 => "missing00000000".into(),
            1 => "x".into(),
            2 => self.fresh(),
            _ if held.is_empty() => self.fresh(),
            _ => rng.pick(&held).clone(),
        }
    }
}

/// A value from `good` most of the time, else one from `bad`.
fn value(rng: &mut Rng, valid: bool, good: &[Value], bad: &[Value]) -> Value {
    if valid || rng.pct(50) {
        rng.pick(good).clone()
    } else {
        rng.pick(bad).clone()
    }
}

/// A body for `coll`; `valid` bodies draw only valid values (rules and relations aside).
fn body_for(
    rng: &mut Rng,
    ids: &mut Ids,
    coll: &str,
    valid: bool,
    who: usize,
) -> Map<String, Value> {
    let mut m = Map::new();
    match coll {
        "cats" => {
            let unique = json!(format!("c{}", rng.below(100_000)));
            let name = value(
                rng,
                valid,
                &[unique.clone(), unique.clone(), unique, json!("ü")],
                &[json!(""), json!("x".repeat(21)), json!(5), json!("one")],
            );
            m.insert("name".into(), name);
        }
        "notes" => {
            let title = value(
                rng,
                valid,
                &[json!("hello"), json!("ok title"), json!("zz")],
                &[json!("a"), json!(""), json!("t".repeat(31)), json!(null)],
            );
            m.insert("title".into(), title);
            if rng.pct(50) {
                let n = value(
                    rng,
                    valid,
                    &[json!(0), json!(5), json!(99), json!("7")],
                    &[json!(101), json!(-1), json!("x")],
                );
                m.insert("n".into(), n);
            }
            if rng.pct(40) {
                let tags = value(
                    rng,
                    valid,
                    &[json!(["a"]), json!(["a", "b"]), json!([]), json!("c")],
                    &[json!(["a", "b", "c"]), json!("z")],
                );
                m.insert("tags".into(), tags);
            }
            if rng.pct(40) {
                m.insert("cat".into(), json!(ids.any(rng, "cats")));
            }
            let mine = USERS.get(who.wrapping_sub(1)).copied();
            let owner = match mine {
                Some(u) if rng.pct(80) => json!(u),
                _ => rng
                    .pick(&[
                        json!(USERS[0]),
                        json!(USERS[1]),
                        json!("nobody000000000"),
                        json!(""),
                    ])
                    .clone(),
            };
            m.insert("owner".into(), owner);
            if rng.pct(15) {
                m.insert(
                    rng.pick(&["n+", "n-"]).to_string(),
                    json!(rng.pick(&[1, 50])),
                );
            }
            if rng.pct(10) {
                m.insert(
                    rng.pick(&["tags+", "tags-"]).to_string(),
                    json!(rng.pick(&["b", "c"])),
                );
            }
        }
        "pinned" => {
            m.insert("note".into(), json!(ids.any(rng, "notes")));
            m.insert("label".into(), json!("l"));
        }
        _ => {
            m.insert("t".into(), json!("y"));
        }
    }
    m
}

/// One generated inner request.
fn inner(rng: &mut Rng, ids: &mut Ids, who: usize) -> Value {
    let coll = *rng.pick(&[
        "cats", "cats", "cats", "notes", "notes", "notes", "notes", "pinned", "pinned", "locked",
        "nope",
    ]);
    let prefix = if coll == "nope" { "notes" } else { coll };
    let base = format!("/api/collections/{coll}/records");
    let query = match rng.below(10) {
        0 if coll == "notes" => "?expand=cat",
        1 => "?fields=id",
        _ => "",
    };
    let valid = rng.pct(85);
    let mut body = body_for(rng, ids, coll, valid, who);
    match rng.below(40) {
        0..=17 => {
            if rng.pct(90) {
                body.insert("id".into(), json!(ids.fresh()));
            }
            json!({"method": "POST", "url": format!("{base}{query}"), "body": body})
        }
        18..=27 => {
            let id = ids.any(rng, prefix);
            json!({"method": "PATCH", "url": format!("{base}/{id}{query}"), "body": body})
        }
        28..=31 => {
            body.insert("id".into(), json!(ids.any(rng, prefix)));
            json!({"method": "PUT", "url": format!("{base}{query}"), "body": body})
        }
        32..=37 => {
            let id = ids.any(rng, prefix);
            json!({"method": "DELETE", "url": format!("{base}/{id}")})
        }
        38 => json!({"method": "GET", "url": base}),
        _ => rng
            .pick(&[
                json!({"method": "post", "url": base}),
                json!({"method": "POST"}),
                json!({"url": base}),
                json!({"method": "POST", "url": "/api/health"}),
                json!({"method": "PATCH", "url": base}),
            ])
            .clone(),
    }
}

fn batch(rng: &mut Rng, ids: &mut Ids, who: usize) -> Value {
    let n = match rng.below(40) {
        0 => 0,
        1 => 11,
        _ => 1 + rng.below(4),
    };
    json!({"requests": (0..n).map(|_| inner(rng, ids, who)).collect::<Vec<_>>()})
}

/// Every record of the fixture's collections, as a superuser lists them.
fn state(s: &Server, su: &str) -> Value {
    let mut out = Map::new();
    for c in COLLECTIONS {
        let r = s.req(
            "GET",
            &format!("/api/collections/{c}/records?perPage=500&sort=id"),
            Some(su),
            None,
        );
        assert_eq!(r.status, 200, "{}", r.json);
        out.insert(c.into(), r.json["items"].clone());
    }
    Value::Object(out)
}

/// Ids PocketBase generates are random: shown as `<auto>`.
fn normalize(v: &Value, ids: &Ids) -> Value {
    match v {
        Value::String(s)
            if s.len() == 15
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && !ids.known.contains(s)
                && !USERS.contains(&s.as_str()) =>
        {
            json!("<auto>")
        }
        Value::Array(a) => Value::Array(a.iter().map(|x| normalize(x, ids)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), normalize(x, ids)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The records of a state, auto ids blanked and in a stable order.
fn normalized_state(v: &Value, ids: &Ids) -> Value {
    let mut v = normalize(v, ids);
    for c in COLLECTIONS {
        if let Some(items) = v[c].as_array_mut() {
            items.sort_by_key(|r| r.to_string());
        }
    }
    v
}

#[test]
fn generated_batches_match_pocketbase() {
    let Some((reference, ours)) = crate::common::reference_and_subject(false) else {
        return;
    };
    let seed = env_num("BATCH_SEED").unwrap_or(DEFAULT_SEED);
    let cases = env_num("BATCH_CASES").unwrap_or(DEFAULT_CASES);
    println!("batch differential: seed={seed:#x} cases={cases}");
    let (ref_callers, our_callers) = std::thread::scope(|s| {
        let a = s.spawn(|| fixture(&reference));
        let b = s.spawn(|| fixture(&ours));
        (a.join().unwrap(), b.join().unwrap())
    });
    let (ref_su, our_su) = (
        ref_callers[3].clone().unwrap(),
        our_callers[3].clone().unwrap(),
    );
    let mut rng = Rng::new(seed);
    let mut ids = Ids::new();
    ids.refresh(&state(&reference, &ref_su));
    let mut mismatches = Vec::new();
    let mut outcomes = std::collections::BTreeMap::<u16, u64>::new();
    for case in 0..cases {
        let who = rng.below(4);
        let body = batch(&mut rng, &mut ids, who);
        let a = reference.req(
            "POST",
            "/api/batch",
            ref_callers[who].as_deref(),
            Some(&body),
        );
        let b = ours.req(
            "POST",
            "/api/batch",
            our_callers[who].as_deref(),
            Some(&body),
        );
        *outcomes.entry(a.status).or_default() += 1;
        if std::env::var("BATCH_DEBUG").is_ok() && a.status != 200 {
            println!("{}", a.json);
        }
        let (na, nb) = (normalize(&a.json, &ids), normalize(&b.json, &ids));
        let (sa, sb) = (
            normalized_state(&state(&reference, &ref_su), &ids),
            normalized_state(&state(&ours, &our_su), &ids),
        );
        ids.refresh(&sa);
        if (a.status, &na) != (b.status, &nb) || sa != sb {
            mismatches.push(format!(
                "#{case} caller={who} {body}\n  reference: {} {na}\n  ferrobase: {} {nb}\n  stored records equal: {}",
                a.status,
                b.status,
                sa == sb
            ));
            if sa != sb {
                mismatches.push(format!("  reference state: {sa}\n  ferrobase state: {sb}"));
                break;
            }
        }
    }
    println!("batch differential: reference statuses {outcomes:?}");
    assert!(
        outcomes.get(&200).copied().unwrap_or(0) > cases / 10,
        "the generator must make batches that succeed: {outcomes:?}"
    );
    assert!(
        mismatches.is_empty(),
        "{} batch cases differ from PocketBase (seed {seed:#x}):\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A server with batches on and a `posts` collection open to everyone.
fn posts_server() -> (Server, String) {
    let s = Server::start();
    let su = s.su_token();
    s.create_collection(
        &su,
        json!({"name": "posts", "listRule": "", "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": "",
               "fields": [{"name": "title", "type": "text", "required": true}]}),
    );
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"batch": {"enabled": true, "maxRequests": 100}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    (s, su)
}

fn creates(titles: impl IntoIterator<Item = String>) -> Value {
    json!({"requests": titles.into_iter().map(|t| json!({"method": "POST",
        "url": "/api/collections/posts/records", "body": {"title": t}})).collect::<Vec<_>>()})
}

fn total(s: &Server) -> u64 {
    let r = s.req(
        "GET",
        "/api/collections/posts/records?perPage=1",
        None,
        None,
    );
    r.json["totalItems"].as_u64().unwrap()
}

#[test]
fn a_batch_failing_at_any_request_writes_nothing_and_the_cache_shows_nothing_of_it() {
    let (s, _su) = posts_server();
    let ok = s.req(
        "POST",
        "/api/batch",
        None,
        Some(&creates((0..3).map(|i| format!("kept {i}")))),
    );
    assert_eq!(ok.status, 200, "{}", ok.json);
    for fail_at in [0usize, 24, 49] {
        // The list is cached before the batch runs.
        assert_eq!(total(&s), 3);
        let mut body = creates((0..50).map(|i| format!("batch {fail_at} item {i}")));
        body["requests"][fail_at]["body"]["title"] = json!("");
        let r = s.req("POST", "/api/batch", None, Some(&body));
        assert_eq!(r.status, 400, "{}", r.json);
        assert_eq!(
            r.json["data"]["requests"][fail_at.to_string()],
            json!({"code": "batch_request_failed", "message": "Batch request failed.",
                   "response": {"data": {"title": {"code": "validation_required", "message": "Cannot be blank."}},
                                "message": "Failed to create record.", "status": 400}})
        );
        assert_eq!(r.json["message"], "Batch transaction failed.");
        assert_eq!(total(&s), 3, "nothing of a failed batch is kept or shown");
        let r = s.req(
            "GET",
            &format!(
                "/api/collections/posts/records?filter={}",
                crate::common::enc("title ~ 'batch'")
            ),
            None,
            None,
        );
        assert_eq!(r.json["totalItems"], 0);
    }
    // A batch that succeeds is seen at once, the cache notwithstanding.
    let r = s.req(
        "POST",
        "/api/batch",
        None,
        Some(&creates((0..50).map(|i| format!("all {i}")))),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json.as_array().unwrap().len(), 50);
    assert_eq!(total(&s), 53);
}

#[test]
fn single_writes_never_interleave_with_a_batch() {
    let (s, _su) = posts_server();
    std::thread::scope(|scope| {
        let singles = scope.spawn(|| {
            for i in 0..300 {
                let r = s.req(
                    "POST",
                    "/api/collections/posts/records",
                    None,
                    Some(&json!({"title": format!("single {i}")})),
                );
                assert_eq!(r.status, 200, "{}", r.json);
            }
        });
        for b in 0..20 {
            let r = s.req(
                "POST",
                "/api/batch",
                None,
                Some(&creates((0..25).map(|i| format!("batch {b:02} {i:02}")))),
            );
            assert_eq!(r.status, 200, "{}", r.json);
        }
        singles.join().unwrap();
    });
    let kept = s.into_dir();
    let data = kept.path().join("pb_data");
    // In the file, each batch's rows are consecutive: no single create landed inside one.
    let db = rusqlite::Connection::open(data.join("data.db")).unwrap();
    let mut stmt = db
        .prepare("SELECT title FROM posts ORDER BY rowid")
        .unwrap();
    let titles: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(titles.len(), 300 + 20 * 25);
    for b in 0..20 {
        let tag = format!("batch {b:02} ");
        let at: Vec<usize> = titles
            .iter()
            .enumerate()
            .filter(|(_, t)| t.starts_with(&tag))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(at.len(), 25);
        assert_eq!(at[24] - at[0], 24, "batch {b} was interleaved: rows {at:?}");
    }
}

#[test]
fn a_batch_past_its_timeout_is_rolled_back_and_frees_the_writer() {
    let s = Server::start();
    let su = s.su_token();
    // Password hashing makes each create slow (tens of ms; it runs inside the batch).
    s.create_collection(
        &su,
        json!({"name": "members", "type": "auth", "createRule": "",
               "passwordAuth": {"enabled": true, "identityFields": ["email"]}}),
    );
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"batch": {"enabled": true, "timeout": 1}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let body = json!({"requests": (0..50).map(|i| json!({"method": "POST", "url": "/api/collections/members/records",
        "body": {"email": format!("m{i}@example.com"), "password": "long-password", "passwordConfirm": "long-password"}}))
        .collect::<Vec<_>>()});
    let started = std::time::Instant::now();
    let r = s.req("POST", "/api/batch", Some(&su), Some(&body));
    assert_eq!(r.json, err(400, "Batch transaction failed."));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let list = s.req("GET", "/api/collections/members/records", Some(&su), None);
    assert_eq!(list.json["totalItems"], 0, "{}", list.json);
    // The writer serves others again.
    let one = s.req(
        "POST",
        "/api/collections/members/records",
        Some(&su),
        Some(&json!({"email": "after@example.com", "password": "long-password", "passwordConfirm": "long-password"})),
    );
    assert_eq!(one.status, 200, "{}", one.json);
}
