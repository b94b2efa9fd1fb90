//! Realtime through raw SSE streams: generated writes under several kinds of subscriber
//! (guests, owners, other users, superusers; collection and record topics; fields, expand and
//! filter options) compared event for event with the reference PocketBase; no event for a
//! rolled-back write; commit order across concurrent writers; a rule change mid-stream; a
//! client that stops reading is disconnected and can come back; idle streams close.
//!
//! `REALTIME_SEED` and `REALTIME_CASES` (default 120 writes) replay or widen the generated run.

use crate::common::{Server, enc};
use crate::rng::{Rng, env_num};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// One SSE stream read on its own thread: `(event name, data)` pairs, the first one held back
/// as the client id.
pub struct Sse {
    pub client_id: String,
    events: mpsc::Receiver<(String, Value)>,
    /// Set once the server closed the stream.
    closed: mpsc::Receiver<()>,
}

impl Sse {
    pub fn open(addr: &str) -> Sse {
        let mut s = TcpStream::connect(addr).expect("connect");
        // HTTP/1.0: the stream is the body up to the close, with no chunk framing to undo.
        write!(s, "GET /api/realtime HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
        let (tx, events) = mpsc::channel();
        let (done, closed) = mpsc::channel();
        let mut r = BufReader::new(s);
        std::thread::spawn(move || {
            let mut line = String::new();
            // The head.
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
            }
            let (mut name, mut data) = (String::new(), String::new());
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let l = line.trim_end_matches(['\r', '\n']);
                if l.is_empty() {
                    if !name.is_empty() {
                        let v = serde_json::from_str(&data).unwrap_or(Value::String(data.clone()));
                        if tx.send((std::mem::take(&mut name), v)).is_err() {
                            break;
                        }
                    }
                    data.clear();
                } else if let Some(n) = l.strip_prefix("event:") {
                    name = n.to_owned();
                } else if let Some(d) = l.strip_prefix("data:") {
                    data = d.to_owned();
                }
            }
            let _ = done.send(());
        });
        let (name, data) = events
            .recv_timeout(Duration::from_secs(10))
            .expect("PB_CONNECT");
        assert_eq!(name, "PB_CONNECT");
        Sse {
            client_id: data["clientId"].as_str().unwrap().to_owned(),
            events,
            closed,
        }
    }

    /// Events until none arrived for `quiet`.
    pub fn drain(&self, quiet: Duration) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        while let Ok(e) = self.events.recv_timeout(quiet) {
            out.push(e);
        }
        out
    }

    /// Whether the server closed the stream within `wait`.
    pub fn closed_within(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            let _ = self.events.try_recv();
            if self.closed.recv_timeout(Duration::from_millis(50)).is_ok() {
                return true;
            }
        }
        false
    }
}

/// Set a client's subscriptions.
pub fn subscribe(s: &Server, sse: &Sse, token: Option<&str>, topics: &[String]) -> u16 {
    let r = s.req(
        "POST",
        "/api/realtime",
        token,
        Some(&json!({"clientId": sse.client_id, "subscriptions": topics})),
    );
    assert!(r.status == 204 || r.status >= 400, "{}", r.json);
    r.status
}

const USER_PASS: &str = "user-pass-1234";
const USERS: [&str; 2] = ["rtuser000000001", "rtuser000000002"];

/// Users, a posts collection ruled by owner or a public flag (with a hidden field), a locked
/// one and a public one, on either server; the tokens of a guest, each user and a superuser.
fn fixture(s: &Server) -> [Option<String>; 4] {
    let su = s.su_token();
    for (i, id) in USERS.iter().enumerate() {
        let r = s.req(
            "POST",
            "/api/collections/users/records",
            Some(&su),
            Some(
                &json!({"id": id, "email": format!("rt{i}@example.com"), "password": USER_PASS,
                         "passwordConfirm": USER_PASS, "name": format!("user {i}")}),
            ),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }
    let rule = "owner = @request.auth.id || public = true";
    s.create_collection(
        &su,
        json!({"name": "posts", "listRule": rule, "viewRule": "owner = @request.auth.id",
               "fields": [{"name": "title", "type": "text"}, {"name": "public", "type": "bool"},
                          {"name": "owner", "type": "relation", "collectionId": "_pb_users_auth_", "maxSelect": 1},
                          {"name": "secret", "type": "text", "hidden": true}]}),
    );
    s.create_collection(
        &su,
        json!({"name": "notes", "fields": [{"name": "text", "type": "text"}]}),
    );
    let posts_id = s.req("GET", "/api/collections/posts", Some(&su), None).json["id"].clone();
    // Deleting a post deletes its comments and unlinks the pub records that name it: both
    // reach subscribers as their own events.
    s.create_collection(
        &su,
        json!({"name": "pub", "listRule": "", "viewRule": "",
               "fields": [{"name": "v", "type": "text"}, {"name": "n", "type": "number"},
                          {"name": "post", "type": "relation", "collectionId": posts_id, "maxSelect": 1}]}),
    );
    s.create_collection(
        &su,
        json!({"name": "comments", "listRule": "", "viewRule": "",
               "fields": [{"name": "text", "type": "text"},
                          {"name": "post", "type": "relation", "collectionId": posts_id, "maxSelect": 1,
                           "cascadeDelete": true}]}),
    );
    let token = |i: usize| {
        s.login("users", &format!("rt{i}@example.com"), USER_PASS)
            .json["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    [None, Some(token(0)), Some(token(1)), Some(su)]
}

fn options(o: Value) -> String {
    format!("?options={}", enc(&o.to_string()))
}

fn topics(rng: &mut Rng) -> Vec<String> {
    let pool = [
        "posts/*".to_owned(),
        "posts/post00000000001".to_owned(),
        format!(
            "posts/*{}",
            options(json!({"query": {"fields": "id,title,owner"}}))
        ),
        format!(
            "posts/*{}",
            options(json!({"query": {"expand": "owner", "fields": "id,expand.owner.name"}}))
        ),
        "pub/*".to_owned(),
        "pub".to_owned(),
        format!("pub/*{}", options(json!({"query": {"filter": "n > 5"}}))),
        "notes/*".to_owned(),
        "pbc_missing/*".to_owned(),
        "comments/*".to_owned(),
    ];
    pool.iter().filter(|_| rng.pct(45)).cloned().collect()
}

/// A generated write, by a superuser: creates, updates and deletes over fixed ids, and a rare
/// truncate.
fn write(rng: &mut Rng, s: &Server, su: &str) {
    let coll = *rng.pick(&["posts", "posts", "pub", "notes", "comments"]);
    let id = format!("{}{:011}", &coll[..4.min(coll.len())], rng.below(6));
    let id = format!("{id:0<15}");
    let post = format!("post{:011}", rng.below(6));
    let body = match coll {
        "posts" => json!({"title": format!("t{}", rng.below(100)), "public": rng.pct(40),
                          "owner": rng.pick(&["", USERS[0], USERS[1]]), "secret": "s"}),
        "pub" => json!({"v": "x", "n": rng.below(10), "post": post}),
        "comments" => json!({"text": "c", "post": post}),
        _ => json!({"text": "n"}),
    };
    let base = format!("/api/collections/{coll}/records");
    // Now and then a whole collection goes: PocketBase deletes it record by record, cascades
    // included, and each delete reaches subscribers.
    if rng.pct(4) {
        s.req(
            "DELETE",
            &format!("/api/collections/{coll}/truncate"),
            Some(su),
            None,
        );
        return;
    }
    match rng.below(3) {
        0 => {
            let mut b = body;
            b["id"] = json!(id);
            s.req("POST", &base, Some(su), Some(&b));
        }
        1 => {
            s.req("PATCH", &format!("{base}/{id}"), Some(su), Some(&body));
        }
        _ => {
            s.req("DELETE", &format!("{base}/{id}"), Some(su), None);
        }
    }
}

/// Events as a sorted list of `name data` lines, timestamps and generated ids left out.
fn normalized(events: &[(String, Value)]) -> Vec<String> {
    fn scrub(v: &Value) -> Value {
        match v {
            // Keys in a fixed order: PocketBase's key order is not stable (`fields` picks).
            Value::Object(m) => {
                let sorted: std::collections::BTreeMap<&String, Value> = m
                    .iter()
                    .map(|(k, v)| {
                        let v = if k == "created" || k == "updated" {
                            json!("<ts>")
                        } else {
                            scrub(v)
                        };
                        (k, v)
                    })
                    .collect();
                Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(scrub).collect()),
            other => other.clone(),
        }
    }
    let mut out: Vec<String> = events
        .iter()
        .map(|(n, d)| format!("{n} {}", scrub(d)))
        .collect();
    out.sort();
    out
}

#[test]
fn generated_writes_reach_the_same_subscribers_as_pocketbase() {
    let Some((reference, ours)) = crate::common::reference_and_subject(false) else {
        return;
    };
    let seed = env_num("REALTIME_SEED").unwrap_or(0x7ea1);
    let writes = env_num("REALTIME_CASES").unwrap_or(120);
    println!("realtime differential: seed={seed:#x} writes={writes}");
    let (ref_tokens, our_tokens) = std::thread::scope(|s| {
        let a = s.spawn(|| fixture(&reference));
        let b = s.spawn(|| fixture(&ours));
        (a.join().unwrap(), b.join().unwrap())
    });
    let mut rng = Rng::new(seed);
    // Each caller kind twice, each with its own topics.
    let plan: Vec<(usize, Vec<String>)> = (0..8).map(|i| (i % 4, topics(&mut rng))).collect();
    let mut mismatches = Vec::new();
    let mut delivered = 0;
    // Rounds: subscribe, write, compare; a new round re-subscribes (topics change).
    for round in 0..4 {
        let streams: Vec<(Sse, Sse)> = plan
            .iter()
            .map(|(who, t)| {
                let (a, b) = (Sse::open(&reference.addr), Sse::open(&ours.addr));
                let sa = subscribe(&reference, &a, ref_tokens[*who].as_deref(), t);
                let sb = subscribe(&ours, &b, our_tokens[*who].as_deref(), t);
                assert_eq!(sa, sb, "subscribe status for {t:?}");
                (a, b)
            })
            .collect();
        for _ in 0..writes / 4 {
            let state = rng.next();
            write(
                &mut Rng::new(state),
                &reference,
                ref_tokens[3].as_deref().unwrap(),
            );
            write(
                &mut Rng::new(state),
                &ours,
                our_tokens[3].as_deref().unwrap(),
            );
        }
        for (i, ((a, b), (who, t))) in streams.iter().zip(&plan).enumerate() {
            let (ea, eb) = (
                normalized(&a.drain(Duration::from_millis(400))),
                normalized(&b.drain(Duration::from_millis(100))),
            );
            delivered += ea.len();
            if ea != eb {
                mismatches.push(format!(
                    "round {round} client {i} (caller {who}) topics {t:?}\n  reference: {ea:#?}\n  ferrobase: {eb:#?}"
                ));
            }
        }
    }
    println!("realtime differential: {delivered} events delivered by the reference");
    assert!(delivered > 50, "the run must deliver events: {delivered}");
    assert!(
        mismatches.is_empty(),
        "{} clients heard something else than PocketBase's (seed {seed:#x}):\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(6)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// An in-process server whose pb.toml holds `toml`.
fn server_with(toml: &str) -> Server {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pb.toml"), toml).unwrap();
    Server::start_in(dir)
}

fn public_collection(s: &Server, su: &str, name: &str) {
    s.create_collection(
        su,
        json!({"name": name, "listRule": "", "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": "",
               "fields": [{"name": "title", "type": "text"}, {"name": "body", "type": "text"}]}),
    );
}

#[test]
fn events_follow_commit_order_and_a_rolled_back_write_sends_none() {
    let s = Server::start();
    let su = s.su_token();
    public_collection(&s, &su, "pub");
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"batch": {"enabled": true}})),
    );
    assert_eq!(r.status, 200);
    let (a, b) = (Sse::open(&s.addr), Sse::open(&s.addr));
    for sse in [&a, &b] {
        assert_eq!(subscribe(&s, sse, None, &["pub/*".into()]), 204);
    }
    // A batch that fails at its last request: nothing of it is announced.
    let failing = json!({"requests": [
        {"method": "POST", "url": "/api/collections/pub/records", "body": {"title": "rolled back"}},
        {"method": "POST", "url": "/api/collections/nope/records", "body": {}}]});
    assert_eq!(
        s.req("POST", "/api/batch", None, Some(&failing)).status,
        400
    );
    // Four writers at once.
    std::thread::scope(|scope| {
        for w in 0..4 {
            let s = &s;
            scope.spawn(move || {
                for i in 0..50 {
                    let r = s.req(
                        "POST",
                        "/api/collections/pub/records",
                        None,
                        Some(&json!({"title": format!("w{w}-{i:02}")})),
                    );
                    assert_eq!(r.status, 200, "{}", r.json);
                }
            });
        }
    });
    let titles = |sse: &Sse| -> Vec<String> {
        sse.drain(Duration::from_millis(500))
            .into_iter()
            .map(|(_, d)| d["record"]["title"].as_str().unwrap().to_owned())
            .collect()
    };
    let (ta, tb) = (titles(&a), titles(&b));
    assert_eq!(ta.len(), 200, "{ta:?}");
    assert!(!ta.iter().any(|t| t == "rolled back"));
    // Every subscriber hears the changes in one order (the commit order), and each writer's
    // own creates in the order it made them.
    assert_eq!(ta, tb);
    for w in 0..4 {
        let mine: Vec<&String> = ta
            .iter()
            .filter(|t| t.starts_with(&format!("w{w}-")))
            .collect();
        let mut sorted = mine.clone();
        sorted.sort();
        assert_eq!(mine, sorted, "writer {w}'s order");
    }
}

#[test]
fn a_rule_change_applies_to_open_subscriptions_and_auth_follows_its_record() {
    let s = Server::start();
    let su = s.su_token();
    let users = fixture(&s);
    let alice = users[1].clone().unwrap();
    let sse = Sse::open(&s.addr);
    assert_eq!(subscribe(&s, &sse, Some(&alice), &["posts/*".into()]), 204);
    let post = |title: &str, owner: &str| {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            Some(&su),
            Some(&json!({"title": title, "owner": owner, "public": false})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    };
    let heard = |sse: &Sse| -> Vec<String> {
        sse.drain(Duration::from_millis(300))
            .into_iter()
            .map(|(_, d)| d["record"]["title"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    post("mine", USERS[0]);
    post("bob's", USERS[1]);
    assert_eq!(heard(&sse), ["mine"]);
    // The list rule opened to everyone: the open subscription follows at once.
    let r = s.req(
        "PATCH",
        "/api/collections/posts",
        Some(&su),
        Some(&json!({"listRule": ""})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    post("bob's again", USERS[1]);
    assert_eq!(heard(&sse), ["bob's again"]);
    // Closed to superusers only.
    s.req(
        "PATCH",
        "/api/collections/posts",
        Some(&su),
        Some(&json!({"listRule": null})),
    );
    post("hidden", USERS[0]);
    assert!(heard(&sse).is_empty());
    // Back to the owner rule; then alice's password changes (a new tokenKey): the stream's
    // binding to her ends, as PocketBase drops it, and her posts stop arriving.
    s.req(
        "PATCH",
        "/api/collections/posts",
        Some(&su),
        Some(&json!({"listRule": "owner = @request.auth.id"})),
    );
    post("mine again", USERS[0]);
    assert_eq!(heard(&sse), ["mine again"]);
    let r = s.req(
        "PATCH",
        &format!("/api/collections/users/records/{}", USERS[0]),
        Some(&su),
        Some(&json!({"password": "another-pass-1", "passwordConfirm": "another-pass-1"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    post("after the change", USERS[0]);
    assert!(heard(&sse).is_empty());
}

#[test]
fn a_client_that_stops_reading_is_dropped_and_can_come_back() {
    let s = server_with("[realtime]\nqueue_len = 2\n");
    let su = s.su_token();
    public_collection(&s, &su, "pub");
    // A raw stream that is never read: its socket buffers fill, then its queue.
    let mut stalled = TcpStream::connect(&s.addr).unwrap();
    write!(stalled, "GET /api/realtime HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = [0u8; 512];
    let n = std::io::Read::read(&mut stalled, &mut head).unwrap();
    let text = String::from_utf8_lossy(&head[..n]).into_owned();
    let id = text
        .split("\"clientId\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("PB_CONNECT in the first read")
        .to_owned();
    let r = s.req(
        "POST",
        "/api/realtime",
        None,
        Some(&json!({"clientId": id, "subscriptions": ["pub/*"]})),
    );
    assert_eq!(r.status, 204, "{}", r.json);
    // Text fields hold at most 5,000 characters by default.
    let big = "x".repeat(4900);
    let mut dropped = false;
    for i in 0..6000 {
        let r = s.req(
            "POST",
            "/api/collections/pub/records",
            None,
            Some(&json!({"title": format!("t{i}"), "body": big})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
        // Once dropped, the client is unknown to the server.
        if i % 100 == 99 {
            let r = s.req(
                "POST",
                "/api/realtime",
                None,
                Some(&json!({"clientId": id, "subscriptions": ["pub/*"]})),
            );
            if r.status == 404 {
                dropped = true;
                break;
            }
        }
    }
    assert!(dropped, "a client that never reads must be disconnected");
    // The SDK's way back: a new stream and the same subscriptions.
    let sse = Sse::open(&s.addr);
    assert_eq!(subscribe(&s, &sse, None, &["pub/*".into()]), 204);
    s.req(
        "POST",
        "/api/collections/pub/records",
        None,
        Some(&json!({"title": "after"})),
    );
    let got = sse.drain(Duration::from_millis(300));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1["record"]["title"], "after");
}

#[test]
fn an_idle_stream_is_closed_and_subscription_requests_are_checked() {
    let s = server_with("[realtime]\nidle_timeout_ms = 400\nmax_subscriptions = 3\n");
    let sse = Sse::open(&s.addr);
    assert!(
        sse.closed_within(Duration::from_secs(5)),
        "idle stream left open"
    );
    let sse = Sse::open(&s.addr);
    let too_many: Vec<String> = (0..4).map(|i| format!("t{i}")).collect();
    let r = s.req(
        "POST",
        "/api/realtime",
        None,
        Some(&json!({"clientId": sse.client_id, "subscriptions": too_many})),
    );
    assert_eq!(
        r.json,
        json!({"data": {"subscriptions": {"code": "validation_length_too_long",
                "message": "The length must be no more than 3.", "params": {"max": 3, "min": 0}}},
               "message": "Something went wrong while processing your request.", "status": 400})
    );
    // A bound client cannot be taken over by another caller.
    let su = s.su_token();
    assert_eq!(subscribe(&s, &sse, Some(&su), &["a".into()]), 204);
    let r = s.req(
        "POST",
        "/api/realtime",
        None,
        Some(&json!({"clientId": sse.client_id, "subscriptions": []})),
    );
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json["message"],
        "The current and the previous request authorization don't match."
    );
}

/// The stream's idle timer is armed once per idle period and re-armed from the last message
/// when it fires: messages closer together than the idle timeout keep the stream open for
/// longer than it, and silence after them still closes it.
#[test]
fn messages_keep_a_stream_open_past_its_idle_timeout_and_silence_closes_it() {
    let s = server_with("[realtime]\nidle_timeout_ms = 1500\n");
    let su = s.su_token();
    fixture(&s);
    let sse = Sse::open(&s.addr);
    assert_eq!(subscribe(&s, &sse, Some(&su), &["posts/*".into()]), 204);
    let writes = 8;
    for i in 0..writes {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            Some(&su),
            Some(&json!({"title": format!("w{i}"), "public": true})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
        std::thread::sleep(Duration::from_millis(400));
    }
    // 3.2 s of writes, twice the idle timeout: every message arrived on the one stream.
    let got = sse.drain(Duration::from_millis(300));
    let titles: Vec<&str> = got
        .iter()
        .filter_map(|(_, e)| e["record"]["title"].as_str())
        .collect();
    let want: Vec<String> = (0..writes).map(|i| format!("w{i}")).collect();
    assert_eq!(titles, want);
    assert!(
        sse.closed_within(Duration::from_secs(6)),
        "a silent stream left open after its idle timeout"
    );
}

#[test]
fn a_delete_announces_what_its_relations_did_first() {
    let s = Server::start();
    let su = s.su_token();
    fixture(&s);
    let sse = Sse::open(&s.addr);
    assert_eq!(
        subscribe(
            &s,
            &sse,
            Some(&su),
            &["posts/*".into(), "comments/*".into(), "pub/*".into()]
        ),
        204
    );
    let mk = |coll: &str, body: Value| {
        let r = s.req(
            "POST",
            &format!("/api/collections/{coll}/records"),
            Some(&su),
            Some(&body),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    };
    mk("posts", json!({"id": "post00000000009", "title": "p"}));
    mk(
        "comments",
        json!({"id": "comm00000000009", "text": "c", "post": "post00000000009"}),
    );
    mk(
        "pub",
        json!({"id": "pubx00000000009", "v": "v", "post": "post00000000009"}),
    );
    sse.drain(Duration::from_millis(300));
    let r = s.req(
        "DELETE",
        "/api/collections/posts/records/post00000000009",
        Some(&su),
        None,
    );
    assert_eq!(r.status, 204);
    let got: Vec<(String, String, String)> = sse
        .drain(Duration::from_millis(300))
        .into_iter()
        .map(|(n, d)| {
            (
                n,
                d["action"].as_str().unwrap().to_owned(),
                d["record"]["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let want = |n: &str, a: &str, id: &str| (n.to_owned(), a.to_owned(), id.to_owned());
    assert_eq!(
        got,
        [
            want("pub/*", "update", "pubx00000000009"),
            want("comments/*", "delete", "comm00000000009"),
            want("posts/*", "delete", "post00000000009"),
        ]
    );
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_flood_of_streams_that_never_read_keeps_memory_bounded() {
    // The process itself: its memory is what is measured.
    let s = Server::start_process();
    let su = s.su_token();
    public_collection(&s, &su, "pub");
    // Warm the server up first, so the measurement is of the clients.
    let warm: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut t = TcpStream::connect(&s.addr).unwrap();
            write!(t, "GET /api/realtime HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
            t
        })
        .collect();
    drop(warm);
    std::thread::sleep(Duration::from_millis(300));
    let before = rss_kib(s.pid());
    const CLIENTS: u64 = 1000;
    let mut held = Vec::new();
    for _ in 0..CLIENTS {
        let mut t = TcpStream::connect(&s.addr).unwrap();
        write!(t, "GET /api/realtime HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
        held.push(t);
    }
    // Every stream is registered (each gets its PB_CONNECT) though none is read: a write to the
    // collection they might follow still answers at once.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    let r = s.req(
        "POST",
        "/api/collections/pub/records",
        None,
        Some(&json!({"title": "still serving"})),
    );
    assert_eq!(r.status, 200);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let during = rss_kib(s.pid());
    let per_client = (during.saturating_sub(before)) * 1024 / CLIENTS;
    println!(
        "realtime memory: {before} KiB before, {during} KiB with {CLIENTS} idle streams: {per_client} bytes each"
    );
    assert!(
        per_client < 32 << 10,
        "{per_client} bytes per idle stream ({before} -> {during} KiB)"
    );
    drop(held);
    // Closed streams are forgotten: the server still serves, and a new stream works.
    std::thread::sleep(Duration::from_millis(300));
    let sse = Sse::open(&s.addr);
    assert_eq!(subscribe(&s, &sse, None, &["pub/*".into()]), 204);
}
