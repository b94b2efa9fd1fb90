//! Realtime through raw SSE streams: generated writes under several kinds of subscriber
//! (guests, owners, other users, superusers; collection and record topics; fields, expand and
//! filter options) compared event for event with the reference PocketBase; no event for a
//! rolled-back write; commit order across concurrent writers; a rule change mid-stream; a
//! client that stops reading is disconnected and can come back; idle streams close.
//!
//! `REALTIME_SEED` and `REALTIME_CASES` (default 120 writes) replay or widen the generated run;
//! `REALTIME_HEAD_SEED` and `REALTIME_HEAD_CASES` (default 150) the generated stream heads.

use crate::common::{Server, enc};
use crate::rng::{Rng, env_num};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
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
    /// A stream on a fresh HTTP/1.1 connection (served outside hyper, chunked).
    pub fn open(addr: &str) -> Sse {
        Sse::open_as(addr, "HTTP/1.1", "")
    }

    /// A stream as `version` asks for it, after the raw `before` on the same connection (an
    /// HTTP/1.0 stream is the body up to the close; an HTTP/1.1 one is chunked). Each response
    /// that `before` asks for must have a `content-length`.
    pub fn open_as(addr: &str, version: &str, before: &str) -> Sse {
        let mut s = TcpStream::connect(addr).expect("connect");
        write!(
            s,
            "{before}GET /api/realtime {version}\r\nHost: {addr}\r\n\r\n"
        )
        .unwrap();
        let (tx, events) = mpsc::channel();
        let (done, closed) = mpsc::channel();
        let mut r = BufReader::new(s);
        let earlier = before.matches(" HTTP/1.1\r\n").count();
        std::thread::spawn(move || {
            for _ in 0..earlier {
                skip_response(&mut r);
            }
            let mut line = String::new();
            let mut chunked = false;
            // The head.
            loop {
                line.clear();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                chunked |= line.eq_ignore_ascii_case("transfer-encoding: chunked\r\n");
            }
            let mut r: Box<dyn BufRead + Send> = if chunked {
                Box::new(BufReader::new(Dechunk { inner: r, left: 0 }))
            } else {
                Box::new(r)
            };
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

/// Reads one response with a `content-length` body and drops it.
fn skip_response(r: &mut impl BufRead) {
    let (_, headers) = read_head(r);
    sized_body(r, &headers).expect("content-length");
}

/// A response's status line and its headers (names lowercased, in order).
fn read_head(r: &mut impl BufRead) -> (String, Vec<(String, String)>) {
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').expect("a header line");
        headers.push((k.to_ascii_lowercase(), v.trim().to_owned()));
    }
    (status.trim_end().to_owned(), headers)
}

/// The body its `content-length` header sizes, if the head has one.
fn sized_body(r: &mut impl BufRead, headers: &[(String, String)]) -> Option<Vec<u8>> {
    let (_, len) = headers.iter().find(|(k, _)| k == "content-length")?;
    let mut body = vec![0; len.parse().expect("a length")];
    r.read_exact(&mut body).expect("the body");
    Some(body)
}

/// A chunked body as the bytes it carries; ends at the last chunk.
struct Dechunk<R> {
    inner: R,
    /// Bytes left in the current chunk.
    left: usize,
}

impl<R: BufRead> Read for Dechunk<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 {
            let mut size = String::new();
            if self.inner.read_line(&mut size)? == 0 {
                return Ok(0);
            }
            self.left = usize::from_str_radix(size.trim_end(), 16)
                .map_err(|e| std::io::Error::other(format!("chunk size {size:?}: {e}")))?;
            if self.left == 0 {
                return Ok(0);
            }
        }
        let want = buf.len().min(self.left);
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Ok(0);
        }
        self.left -= n;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf)?;
            assert_eq!(&crlf, b"\r\n", "a chunk ends with CRLF");
        }
        Ok(n)
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
    // A stream served outside hyper (a fresh connection's first request), and two that hyper
    // serves: HTTP/1.0, and HTTP/1.1 after a first request on its connection.
    let a = Sse::open(&s.addr);
    let b = Sse::open_as(&s.addr, "HTTP/1.0", "");
    let c = Sse::open_as(
        &s.addr,
        "HTTP/1.1",
        "GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    for sse in [&a, &b, &c] {
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
    let (ta, tb, tc) = (titles(&a), titles(&b), titles(&c));
    assert_eq!(ta.len(), 200, "{ta:?}");
    assert!(!ta.iter().any(|t| t == "rolled back"));
    // Every subscriber hears the changes in one order (the commit order), and each writer's
    // own creates in the order it made them.
    assert_eq!(ta, tb);
    assert_eq!(ta, tc);
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

/// A raw HTTP/1.1 connection that reads whole responses' heads and chunks.
struct Raw(BufReader<TcpStream>);

impl Raw {
    fn open(addr: &str) -> Raw {
        let s = TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Raw(BufReader::new(s))
    }

    fn send(&mut self, text: &str) {
        self.0.get_mut().write_all(text.as_bytes()).unwrap();
    }

    /// A response's status line and its headers (names lowercased, in order).
    fn head(&mut self) -> (String, Vec<(String, String)>) {
        read_head(&mut self.0)
    }

    /// The next chunk: its size line as sent, and its bytes.
    fn chunk(&mut self) -> (String, Vec<u8>) {
        let mut size = String::new();
        self.0.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim_end(), 16).expect("a chunk size");
        let mut data = vec![0; n + 2];
        self.0.read_exact(&mut data).unwrap();
        assert_eq!(&data[n..], b"\r\n");
        data.truncate(n);
        (size, data)
    }

    /// A whole response with a `content-length` body.
    fn response(&mut self) -> (String, Vec<u8>) {
        let (status, headers) = self.head();
        let body = sized_body(&mut self.0, &headers).expect("content-length");
        (status, body)
    }

    /// Whether the server closed the connection (read gives 0 bytes).
    /// The server closed the connection: an end, or a reset (a close with bytes of ours still
    /// unread on its side, such as a request sent just as it closed).
    fn at_end(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.0.read(&mut b) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

const STREAM_GET: &str =
    "GET /api/realtime HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";

/// The stream a fresh connection opens is served outside hyper (http/stream.rs); one asked for
/// on a connection hyper already serves stays with hyper. A client sees the same head (date
/// aside) and the same chunk framing from both.
#[test]
fn a_stream_outside_hyper_has_the_head_and_framing_hyper_gives() {
    let s = Server::start();
    let mut fresh = Raw::open(&s.addr);
    fresh.send(STREAM_GET);
    let mut kept = Raw::open(&s.addr);
    kept.send("GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(kept.response().0.starts_with("HTTP/1.1 200"));
    kept.send(STREAM_GET);
    let mut seen = Vec::new();
    for raw in [&mut fresh, &mut kept] {
        let (status, mut headers) = raw.head();
        let date = headers
            .iter()
            .position(|(k, _)| k == "date")
            .map(|i| headers.remove(i).1)
            .expect("a date header");
        assert!(httpdate::parse_http_date(&date).is_ok(), "{date}");
        headers.sort();
        let (size, data) = raw.chunk();
        let text = String::from_utf8(data).unwrap();
        assert!(
            text.starts_with("id:") && text.contains("\nevent:PB_CONNECT\ndata:{\"clientId\":"),
            "{text}"
        );
        seen.push((status, headers, size));
    }
    assert_eq!(seen[0], seen[1], "outside hyper / through hyper");
    assert_eq!(seen[0].0, "HTTP/1.1 200 OK");
}

/// A stream served outside hyper goes back to hyper when it ends (its next request is
/// answered on the same connection), ends the connection with it when the request said
/// `Connection: close`, and is dropped from the hub as soon as its client closes.
#[test]
fn a_stream_outside_hyper_ends_cleanly_and_notices_its_client_leaving() {
    let s = server_with("[realtime]\nidle_timeout_ms = 300\n");
    let mut raw = Raw::open(&s.addr);
    raw.send(STREAM_GET);
    let (_, headers) = raw.head();
    assert!(
        headers.iter().all(|(k, _)| k != "connection"),
        "{headers:?}"
    );
    raw.chunk();
    // The idle timeout ends the stream: its last chunk, then the connection serves on.
    assert_eq!(raw.chunk().1, b"", "the stream's last chunk");
    raw.send("GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n");
    let (status, body) = raw.response();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(String::from_utf8_lossy(&body).contains("API is healthy"));

    let mut closing = Raw::open(&s.addr);
    closing.send("GET /api/realtime HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    let (_, headers) = closing.head();
    assert!(
        headers.contains(&("connection".into(), "close".into())),
        "{headers:?}"
    );
    closing.chunk();
    assert_eq!(closing.chunk().1, b"");
    assert!(closing.at_end(), "the connection ends with the stream");

    // A client that leaves: its id is unknown to the hub at once, not at the next message
    // or the idle timeout (30 s here).
    let s = server_with("[realtime]\nidle_timeout_ms = 30000\n");
    let mut leaving = Raw::open(&s.addr);
    leaving.send(STREAM_GET);
    leaving.head();
    let text = String::from_utf8(leaving.chunk().1).unwrap();
    let id = text
        .split("\"clientId\":\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .expect("a client id")
        .to_owned();
    let sub = |s: &Server| {
        s.req(
            "POST",
            "/api/realtime",
            None,
            Some(&json!({"clientId": id, "subscriptions": ["x/*"]})),
        )
        .status
    };
    assert_eq!(sub(&s), 204);
    drop(leaving);
    let deadline = Instant::now() + Duration::from_secs(3);
    while sub(&s) == 204 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sub(&s), 404, "a client that left is still known");
}

/// At shutdown every stream ends with its last chunk and its connection closes, whether the
/// stream was served outside hyper or by it, while the server still drains a slow request: a
/// client that reconnects at the end of its stream finds the server gone, never a connection
/// that keeps serving.
#[test]
fn at_shutdown_a_stream_ends_and_its_connection_closes_while_others_drain() {
    let mut s = server_with("[http]\nshutdown_grace_ms = 8000\n");
    let mut fresh = Raw::open(&s.addr);
    fresh.send(STREAM_GET);
    fresh.head();
    fresh.chunk();
    let mut reused = Raw::open(&s.addr);
    reused.send("GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(reused.response().0, "HTTP/1.1 200 OK");
    reused.send(STREAM_GET);
    reused.head();
    reused.chunk();
    // A request whose body never ends keeps the server draining.
    let mut slow = Raw::open(&s.addr);
    slow.send(
        "POST /api/batch HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n{",
    );
    std::thread::sleep(Duration::from_millis(100));
    std::thread::scope(|scope| {
        let stopping = scope.spawn(|| s.stop(Duration::from_secs(20)));
        for (what, raw) in [
            ("outside hyper", &mut fresh),
            ("through hyper", &mut reused),
        ] {
            assert_eq!(raw.chunk().1, b"", "{what}: the stream's last chunk");
            raw.send("GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n");
            assert!(
                raw.at_end(),
                "{what}: the connection closes with the stream"
            );
        }
        assert!(
            !stopping.is_finished(),
            "the server was still draining the slow request"
        );
        drop(slow);
        stopping.join().unwrap();
    });
}

/// A head that arrives in pieces is still served, and what the stream path does not take
/// (HTTP/1.0, a body, a near-miss path) is hyper's as before.
#[test]
fn heads_in_pieces_and_requests_the_stream_path_does_not_take() {
    let s = Server::start();
    let mut split = Raw::open(&s.addr);
    for part in [
        "GE",
        "T /api/real",
        "time HTTP/1.1\r\nHo",
        "st: x\r\n",
        "\r\n",
    ] {
        split.send(part);
        std::thread::sleep(Duration::from_millis(30));
    }
    let (status, headers) = split.head();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(headers.contains(&("transfer-encoding".into(), "chunked".into())));
    assert!(
        String::from_utf8(split.chunk().1)
            .unwrap()
            .contains("PB_CONNECT")
    );

    // A byte at a time, slower than the peeks wait for (190 ms): left to hyper, still served.
    let mut slow = Raw::open(&s.addr);
    for b in "GET /api/realtime HTTP/1.1\r\nHost: x\r\n\r\n".bytes() {
        slow.send(std::str::from_utf8(&[b]).unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, _) = slow.head();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        String::from_utf8(slow.chunk().1)
            .unwrap()
            .contains("PB_CONNECT")
    );

    // A head longer than the first peek's 4 KiB.
    let mut big = Raw::open(&s.addr);
    big.send(&format!(
        "GET /api/realtime HTTP/1.1\r\nHost: x\r\nCookie: {}\r\n\r\n",
        "c".repeat(9000)
    ));
    let (status, _) = big.head();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        String::from_utf8(big.chunk().1)
            .unwrap()
            .contains("PB_CONNECT")
    );

    let mut with_body = Raw::open(&s.addr);
    with_body.send("GET /api/realtime HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
    let (status, _) = with_body.head();
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        String::from_utf8(with_body.chunk().1)
            .unwrap()
            .contains("PB_CONNECT")
    );

    let mut near = Raw::open(&s.addr);
    near.send("GET /api/realtimes HTTP/1.1\r\nHost: x\r\n\r\n");
    let (status, body) = near.response();
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["status"], 404);
}

/// Up to the first SSE message of a response's body, whatever its framing: the first chunk, a
/// sized body, or (HTTP/1.0, close-delimited) the lines up to the first blank one.
fn first_body_part(raw: &mut Raw, headers: &[(String, String)]) -> Vec<u8> {
    let has = |k: &str, v: Option<&str>| {
        headers
            .iter()
            .any(|(hk, hv)| hk == k && v.is_none_or(|v| hv.eq_ignore_ascii_case(v)))
    };
    if has("transfer-encoding", Some("chunked")) {
        return raw.chunk().1;
    }
    if let Some(body) = sized_body(&mut raw.0, headers) {
        return body;
    }
    let mut out = Vec::new();
    loop {
        let mut line = Vec::new();
        if raw.0.read_until(b'\n', &mut line).unwrap_or(0) == 0 || line == b"\n" {
            return out;
        }
        out.extend_from_slice(&line);
    }
}

/// A stream's client id (random per connection) replaced by a placeholder.
fn without_client_id(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body).into_owned();
    let Some(id) = text
        .split("\"clientId\":\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .filter(|id| !id.is_empty())
    else {
        return text;
    };
    text.replace(id, "<client id>")
}

/// Generated heads for the stream path (targets, versions, header sets, name casing, odd
/// values, heads split in two), each sent on a fresh connection (where the stream path is
/// served outside hyper when it takes the head) and on a connection hyper already serves: the
/// status, the headers (date aside) and the body up to its first message must be the same.
/// `REALTIME_HEAD_SEED` and `REALTIME_HEAD_CASES` (default 150) replay or widen it.
#[test]
fn generated_stream_heads_get_the_same_answer_outside_hyper_and_through_it() {
    let s = Server::start();
    let su = s.su_token();
    let seed = env_num("REALTIME_HEAD_SEED").unwrap_or(0x5eed);
    let cases = env_num("REALTIME_HEAD_CASES").unwrap_or(150);
    println!("stream head differential: seed={seed:#x} cases={cases}");
    let mut rng = Rng::new(seed);
    let targets = [
        "/api/realtime",
        "/api/realtime?x=1",
        "/api/realtime?",
        "/api/realtime?a=b&a=c",
        "/api/realtime?q=\"a\"",
        "/api/realtime?q=%zz",
        "/api/realtime?q=caf\u{e9}",
        "/api/realtime#frag",
        "/api/realtime/",
        "/api/realtimeX",
        "/api/realtime/../realtime",
    ];
    let su_auth = su.clone();
    let pool: Vec<(&str, Vec<u8>)> = vec![
        ("Host", b"x".to_vec()),
        ("Accept", b"text/event-stream".to_vec()),
        ("Cache-Control", b"no-cache".to_vec()),
        ("Origin", b"http://example.test".to_vec()),
        ("Connection", b"keep-alive".to_vec()),
        ("Connection", b"close".to_vec()),
        ("Connection", b"Keep-Alive, Close".to_vec()),
        ("User-Agent", b"gen/1.0".to_vec()),
        ("X-Forwarded-For", b"10.0.0.1".to_vec()),
        ("Authorization", su_auth.into_bytes()),
        ("Authorization", b"garbage".to_vec()),
        ("Cookie", b"a=b; c=d".to_vec()),
        ("X-Empty", Vec::new()),
        ("X-Tab", b"a\tb".to_vec()),
        ("X-Obs", b"caf\xe9".to_vec()),
        ("X-Spaces", b"  padded  ".to_vec()),
        ("x_under", b"1".to_vec()),
        ("Content-Length", b"0".to_vec()),
        ("Upgrade", b"websocket".to_vec()),
        ("Accept-Encoding", b"gzip, br".to_vec()),
        ("X-Big", vec![b'b'; 6000]),
    ];
    let mut mismatches = Vec::new();
    for case in 0..cases {
        let target = *rng.pick(&targets);
        let version = if rng.pct(85) { "HTTP/1.1" } else { "HTTP/1.0" };
        let mut head = format!("GET {target} {version}\r\n").into_bytes();
        for (name, value) in rng.subset(&pool, 8) {
            let name = match rng.below(3) {
                0 => name.to_ascii_lowercase(),
                1 => name.to_ascii_uppercase(),
                _ => name.to_owned(),
            };
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(&value);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let split = rng.pct(20).then(|| 1 + rng.below(head.len() - 1));
        let answer = |raw: &mut Raw, split: Option<usize>| {
            let stream = raw.0.get_mut();
            match split {
                Some(k) => {
                    stream.write_all(&head[..k]).unwrap();
                    std::thread::sleep(Duration::from_millis(5));
                    stream.write_all(&head[k..]).unwrap();
                }
                None => stream.write_all(&head).unwrap(),
            }
            let (status, mut headers) = raw.head();
            let body = first_body_part(raw, &headers);
            headers.retain(|(k, _)| k != "date");
            headers.sort();
            (status, headers, without_client_id(&body))
        };
        let mut fresh = Raw::open(&s.addr);
        let outside = answer(&mut fresh, split);
        let mut kept = Raw::open(&s.addr);
        kept.send("GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n");
        kept.response();
        let through = answer(&mut kept, None);
        if outside != through {
            mismatches.push(format!(
                "#{case} {:?}\n  fresh connection: {outside:?}\n  through hyper:    {through:?}",
                String::from_utf8_lossy(&head)
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {cases} heads answered differently (seed {seed:#x}):\n{}",
        mismatches.len(),
        mismatches
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
