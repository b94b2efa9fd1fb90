//! Write bodies on every write endpoint, generated and compared with the reference: record
//! creates and updates (a base collection with a file field, an auth collection), collection
//! creates, updates and imports, settings patches, batches, file tokens and realtime
//! subscriptions, each sent by a guest, a user or a superuser, with a body drawn for that
//! endpoint (the right keys with good values, values of the wrong JSON type, unknown keys,
//! top-level arrays, strings and nulls, broken JSON) and encoded as JSON under several
//! Content-Type spellings, as a urlencoded form, as multipart (with `@jsonPayload`, repeated
//! keys, file parts, quoted or missing boundaries, a missing closing boundary) or as junk, framed
//! by a Content-Length or chunked.
//!
//! Compared for each request: the status and the whole JSON answer with what each server makes
//! for itself masked (ids, tokens, dates, the random part of stored file names). At the end the
//! state both servers were left in: the collections, the settings and the posts.
//!
//! Left out, rather than masked as mismatches:
//! * two keys of one record field in one body (`n` with `n+`, `f-` with `+f`...): PocketBase
//!   applies a body's keys in Go's map order, which is random, so such a body gets a different
//!   answer from one request to the next on PocketBase itself (measured: `{"n+":2.5,"n":1e308,
//!   "n-":1e308}` gave n = 0 five times and 2.5 three times in eight).
//! * collections sent as a form or multipart body: PocketBase binds them into its Go struct,
//!   which makes every rule left out an empty (public) rule and answers a `fields` value with a
//!   500; ferrobase reads the values as JSON values and leaves rules out as null (superusers
//!   only). It does not open a collection to everyone because its body was a form.
//! * well-formed XML for an endpoint that binds a Go struct: PocketBase decodes it, matching
//!   elements by its Go field names; ferrobase refuses XML as a body that does not load.
//!
//! `DIFF_SEED` and `DIFF_BODY_CASES` (default 1000) replay or widen a run.

use super::{Finding, Rng, canonical, json_diffs};
use serde_json::{Map, Value, json};
use std::io::{Read as _, Write as _};

const DEFAULT_CASES: usize = 1000;

const POST_ID: &str = "post00000000001";
const USER_ID: &str = "user00000000001";
const USER_PASSWORD: &str = "userpass1234";

/// Who sends a request.
#[derive(Clone, Copy, Debug)]
enum Who {
    Guest,
    User,
    Su,
}

/// One side's tokens.
struct Side<'a> {
    server: &'a crate::common::Server,
    su: String,
    user: String,
}

/// One generated request.
struct Case {
    method: &'static str,
    path: String,
    who: Who,
    content_type: Option<String>,
    body: Vec<u8>,
    chunked: bool,
    /// The case in one line, for the report.
    text: String,
}

#[test]
fn generated_write_bodies_are_answered_as_by_the_reference() {
    let Some(pair) = super::start_pair() else {
        return;
    };
    let seed = super::seed();
    let n_cases = super::cases("DIFF_BODY_CASES", DEFAULT_CASES);
    let sides: Vec<Side<'_>> = [
        (&pair.reference, &pair.ref_su),
        (&pair.subject, &pair.sub_su),
    ]
    .into_iter()
    .map(|(server, su)| fixture(server, su))
    .collect();
    let mut r = Rng::new(seed);
    let mut findings = Vec::new();
    for i in 0..n_cases {
        let case = generate(&mut r);
        let answers: Vec<(u16, Value)> = std::thread::scope(|sc| {
            let a = sc.spawn(|| send(&sides[0], &case));
            let b = send(&sides[1], &case);
            vec![a.join().expect("reference request"), b]
        });
        if answers[0] != answers[1] {
            let mut details = Vec::new();
            if answers[0].0 != answers[1].0 {
                details.push(format!("status: {} / {}", answers[0].0, answers[1].0));
            }
            json_diffs(&answers[0].1, &answers[1].1, "body", &mut details, 8);
            findings.push(Finding {
                case: i,
                text: case.text.clone(),
                details,
                known: None,
                follow_on: !findings.is_empty(),
            });
        }
    }
    // The state both were left in.
    let state = |s: &Side<'_>| {
        let get = |path: &str| {
            let (status, v) = send(
                s,
                &Case {
                    method: "GET",
                    path: path.to_owned(),
                    who: Who::Su,
                    content_type: None,
                    body: Vec::new(),
                    chunked: false,
                    text: String::new(),
                },
            );
            assert_eq!(status, 200, "{path}: {v}");
            v
        };
        let mut posts: Vec<String> = get("/api/collections/posts/records?perPage=500")["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|p| canonical(p).to_string())
            .collect();
        posts.sort();
        json!({
            "collections": get("/api/collections?perPage=500&sort=name")["items"],
            "settings": get("/api/settings"),
            "posts": posts,
        })
    };
    let (a, b) = (state(&sides[0]), state(&sides[1]));
    if a != b {
        let mut details = Vec::new();
        json_diffs(&a, &b, "state", &mut details, 12);
        findings.push(Finding {
            case: n_cases,
            text: "the state left after every case".into(),
            details,
            known: None,
            follow_on: false,
        });
    }
    super::conclude(
        "bodies",
        &format!("write bodies: {n_cases} generated requests, seed {seed:#x}"),
        &findings,
        pair.subject_name,
        &format!("DIFF_SEED={seed:#x} DIFF_BODY_CASES={n_cases}"),
    );
}

/// The collections, a user and a post, made alike on both servers.
fn fixture<'a>(server: &'a crate::common::Server, su: &str) -> Side<'a> {
    server.create_collection(
        su,
        json!({"name": "posts", "type": "base",
        "listRule": "", "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": "",
        "fields": [
            {"name": "title", "type": "text", "max": 40},
            {"name": "n", "type": "number"},
            {"name": "flag", "type": "bool"},
            {"name": "meta", "type": "json", "maxSize": 2000},
            {"name": "f", "type": "file", "maxSelect": 2, "maxSize": 1000},
            {"name": "owner", "type": "relation", "collectionId": "_pb_users_auth_", "maxSelect": 1}
        ]}),
    );
    let made = server.req(
        "PATCH",
        "/api/collections/users",
        Some(su),
        Some(&json!({"createRule": "", "updateRule": "id = @request.auth.id"})),
    );
    assert_eq!(made.status, 200, "{}", made.json);
    let user = server.req(
        "POST",
        "/api/collections/users/records",
        Some(su),
        Some(
            &json!({"id": USER_ID, "email": "user@example.com", "password": USER_PASSWORD,
            "passwordConfirm": USER_PASSWORD, "name": "Ann"}),
        ),
    );
    assert_eq!(user.status, 200, "{}", user.json);
    let post = server.req(
        "POST",
        "/api/collections/posts/records",
        Some(su),
        Some(&json!({"id": POST_ID, "title": "first", "n": 1})),
    );
    assert_eq!(post.status, 200, "{}", post.json);
    let login = server.login("users", "user@example.com", USER_PASSWORD);
    assert_eq!(login.status, 200, "{}", login.json);
    Side {
        server,
        su: su.to_owned(),
        user: login.json["token"].as_str().expect("token").to_owned(),
    }
}

// ---------------------------------------------------------------------------------------------
// generating

/// The endpoints and the keys their bodies are drawn from.
fn generate(r: &mut Rng) -> Case {
    let who = *r.pick(&[Who::Guest, Who::User, Who::Su, Who::Su]);
    let (method, path, keys): (&'static str, String, &[&str]) = match r.below(11) {
        0 | 1 => (
            "POST",
            "/api/collections/posts/records".into(),
            &["title", "n", "flag", "meta", "id", "f", "owner"],
        ),
        2 | 3 => (
            "PATCH",
            format!("/api/collections/posts/records/{POST_ID}"),
            &[
                "title", "n", "n+", "n-", "flag", "meta", "f", "f-", "f+", "+f",
            ],
        ),
        4 => (
            if r.pct(80) { "POST" } else { "PATCH" },
            if r.pct(80) {
                "/api/collections/users/records".into()
            } else {
                format!("/api/collections/users/records/{USER_ID}")
            },
            &[
                "email",
                "password",
                "passwordConfirm",
                "oldPassword",
                "name",
                "verified",
                "emailVisibility",
            ],
        ),
        5 => (
            "POST",
            "/api/collections".into(),
            &[
                "name",
                "type",
                "fields",
                "listRule",
                "viewRule",
                "indexes",
                "viewQuery",
            ],
        ),
        6 => (
            "PATCH",
            format!("/api/collections/{}", r.pick(&["gen_a", "gen_b", "nope"])),
            &["name", "listRule", "fields", "indexes"],
        ),
        7 => (
            "PATCH",
            "/api/settings".into(),
            &["meta", "logs", "batch", "trustedProxy"],
        ),
        8 => ("POST", "/api/batch".into(), &["requests"]),
        9 => (
            "POST",
            if r.pct(50) {
                "/api/files/token".into()
            } else {
                "/api/realtime".into()
            },
            &["clientId", "subscriptions"],
        ),
        _ => (
            "PUT",
            "/api/collections/import".into(),
            &["collections", "deleteMissing"],
        ),
    };
    let mut data = Map::new();
    // One key per record field: PocketBase applies a body's keys in Go's map order, which is
    // random, so a value and a modifier of one field (or two modifiers) give a different
    // result from one request to the next on PocketBase itself.
    let field_of = |k: &str| k.trim_matches(['+', '-']).to_owned();
    let mut fields_taken = Vec::new();
    for key in r.subset(keys, keys.len()) {
        if path.contains("/records") {
            if fields_taken.contains(&field_of(key)) {
                continue;
            }
            fields_taken.push(field_of(key));
        }
        data.insert(key.to_owned(), value_for(r, key));
    }
    if r.pct(10) {
        data.insert("unknown".into(), json!("x"));
    }
    // A collection is sent as JSON (or as a body that does not bind): see the module's note
    // on collection forms.
    let json_only = path.starts_with("/api/collections")
        && !path.contains("/records")
        && !path.ends_with("/import");
    let (content_type, body, shape) = encode(r, &data, json_only);
    let chunked = !body.is_empty() && r.pct(25);
    let text = format!(
        "{method} {path} as {who:?}, {shape}, Content-Type {content_type:?}{}: {}",
        if chunked { ", chunked" } else { "" },
        String::from_utf8_lossy(&body)
    );
    Case {
        method,
        path,
        who,
        content_type,
        body,
        chunked,
        text,
    }
}

/// A value for `key`: mostly one the endpoint could take, else one of the wrong type.
fn value_for(r: &mut Rng, key: &str) -> Value {
    if key != "deleteMissing" && r.pct(12) {
        return r
            .pick(&[
                json!(null),
                json!(""),
                json!(0),
                json!(-1.5),
                json!(true),
                json!([]),
                json!({}),
                json!("text"),
                json!([1, "a"]),
            ])
            .clone();
    }
    let v = match key {
        "title" | "name" if r.pct(30) => json!("x".repeat(r.below(60))),
        "title" => json!(r.pick(&["hello", "", "Ünïcode 日本", "a\"b<c>", "  padded  "])),
        "name" => json!(r.pick(&["gen_a", "gen_b", "posts", "users", "bad name", "_x", "9lives"])),
        "n" | "n+" | "n-" => r
            .pick(&[json!(1), json!(-2), json!(2.5), json!("7"), json!(1e308)])
            .clone(),
        // Never true: an import that deleted the fixture would leave little to compare.
        "deleteMissing" => r.pick(&[json!(false), json!("false"), json!(0)]).clone(),
        "flag" | "verified" | "emailVisibility" => r
            .pick(&[json!(true), json!(false), json!("true"), json!(1)])
            .clone(),
        "meta" => r
            .pick(&[json!({"a": 1}), json!([1, 2]), json!("s"), json!(null), json!(3)])
            .clone(),
        "id" => json!(r.pick(&[
            "post00000000002",
            "post00000000003",
            POST_ID,
            "short",
            "UPPER0000000001",
            "",
        ])),
        "f" | "f-" | "f+" | "+f" => r
            .pick(&[
                json!(""),
                json!(null),
                json!([]),
                json!(["x.txt"]),
                json!("none.txt"),
            ])
            .clone(),
        "owner" => json!(r.pick(&[USER_ID, "missing00000001", ""])),
        "email" => json!(r.pick(&[
            "new@example.com",
            "user@example.com",
            "not-an-email",
            "",
            "b@example.com"
        ])),
        "password" | "passwordConfirm" | "oldPassword" => {
            json!(r.pick(&["12345678", USER_PASSWORD, "short", &"p".repeat(80)]))
        }
        "type" => json!(r.pick(&["base", "auth", "view", "bogus"])),
        "fields" => r
            .pick(&[
                json!([{"name": "a", "type": "text"}]),
                json!([{"name": "a", "type": "nope"}]),
                json!([{"name": "", "type": "text"}]),
                json!([{"name": "b", "type": "number", "min": 5, "max": 1}]),
                json!("fields"),
            ])
            .clone(),
        "listRule" | "viewRule" => r
            .pick(&[json!(""), json!(null), json!("id != ''"), json!("bad ((")])
            .clone(),
        "indexes" => r
            .pick(&[
                json!([]),
                json!(["CREATE INDEX idx_x ON gen_a (id)"]),
                json!(["nonsense"]),
            ])
            .clone(),
        "viewQuery" => json!(r.pick(&["SELECT id FROM posts", "SELECT", ""])),
        "logs" => r
            .pick(&[
                json!({"maxDays": 3}),
                json!({"maxDays": -1}),
                json!({"minLevel": 4}),
                json!({"maxDays": "5"}),
            ])
            .clone(),
        "batch" => r
            .pick(&[
                json!({"enabled": true, "maxRequests": 10}),
                json!({"enabled": false}),
                json!({"enabled": true, "maxRequests": 0}),
                json!({"enabled": true, "maxBodySize": 10}),
            ])
            .clone(),
        "trustedProxy" => r
            .pick(&[
                json!({"headers": ["X-Real-IP"]}),
                json!({"headers": "X"}),
                json!({"useLeftmostIP": true}),
            ])
            .clone(),
        "requests" => {
            let n = r.below(4);
            Value::Array((0..n).map(|_| batch_item(r)).collect())
        }
        "clientId" => json!(r.pick(&["", "abc", "x".repeat(60).as_str()])),
        "subscriptions" => r
            .pick(&[json!([]), json!(["posts/*"]), json!("posts"), json!([1])])
            .clone(),
        "collections" => r
            .pick(&[
                json!([]),
                json!([{"name": "imp_a", "type": "base", "fields": [{"name": "t", "type": "text"}]}]),
                json!([{"name": "imp_b"}]),
                json!([{"type": "base"}]),
                json!({"name": "x"}),
            ])
            .clone(),
        _ => json!("x"),
    };
    // The settings' `meta` is a group, the records' a JSON field: the settings target asks
    // for groups.
    if key == "meta" && r.pct(50) {
        return r
            .pick(&[
                json!({"appName": "Gen"}),
                json!({"appName": ""}),
                json!({"hideControls": true}),
                json!({"appURL": "not a url"}),
            ])
            .clone();
    }
    v
}

fn batch_item(r: &mut Rng) -> Value {
    let mut m = Map::new();
    if r.pct(90) {
        m.insert(
            "method".into(),
            json!(r.pick(&["POST", "PATCH", "DELETE", "GET", "post", ""])),
        );
    }
    if r.pct(90) {
        m.insert(
            "url".into(),
            json!(r.pick(&[
                "/api/collections/posts/records",
                "/api/collections/posts/records/post00000000001",
                "/api/collections/posts/records/post00000000002",
                "/api/collections/nope/records",
                "/api/health",
                "nonsense",
            ])),
        );
    }
    if r.pct(80) {
        let mut body = Map::new();
        for key in r.subset(&["title", "n", "flag", "id"], 3) {
            body.insert(key.to_owned(), value_for(r, key));
        }
        m.insert("body".into(), Value::Object(body));
    }
    Value::Object(m)
}

/// The data encoded as the client chose: (Content-Type, bytes, what it is).
fn encode(
    r: &mut Rng,
    data: &Map<String, Value>,
    json_only: bool,
) -> (Option<String>, Vec<u8>, &'static str) {
    let object = Value::Object(data.clone());
    let pick = r.below(20);
    let pick = if json_only && (10..=17).contains(&pick) {
        pick - 10
    } else {
        pick
    };
    match pick {
        0..=8 => {
            let ct = r.pick(&[
                Some("application/json"),
                Some("application/json"),
                Some("application/json; charset=utf-8"),
                Some("APPLICATION/JSON"),
                Some("application/json;x=1"),
                Some("text/json"),
                None,
            ]);
            (
                ct.map(str::to_owned),
                object.to_string().into_bytes(),
                "json",
            )
        }
        9 => {
            let body = r
                .pick(&[
                    "[1,2]",
                    "\"text\"",
                    "null",
                    "5",
                    "{",
                    "{}x",
                    "\u{feff}{}",
                    "{\"a\":1}{\"b\":2}",
                    "",
                    " \n ",
                ])
                .to_string();
            let ct = r.pick(&["application/json", "text/plain", "application/xml"]);
            (Some((*ct).to_owned()), body.into_bytes(), "odd json")
        }
        10..=12 => {
            let mut out = String::new();
            for (k, v) in data {
                for text in form_values(v) {
                    if !out.is_empty() {
                        out.push('&');
                    }
                    out.push_str(&crate::common::enc(k));
                    out.push('=');
                    out.push_str(&crate::common::enc(&text));
                }
            }
            if r.pct(20) {
                out.push_str(&format!(
                    "&@jsonPayload={}",
                    crate::common::enc(&json!({"title": "payload"}).to_string())
                ));
            }
            let ct = r.pick(&[
                "application/x-www-form-urlencoded",
                "application/x-www-form-urlencoded; charset=utf-8",
            ]);
            (Some((*ct).to_owned()), out.into_bytes(), "form")
        }
        13..=17 => multipart(r, data),
        _ => {
            let body = r
                .pick(&["garbage", "a=1", "<xml/>", "\u{0}\u{1}"])
                .to_string();
            let ct = r.pick(&[
                Some("text/plain"),
                Some("application/octet-stream"),
                None,
                Some("multipart/form-data"),
            ]);
            (ct.map(str::to_owned), body.into_bytes(), "junk")
        }
    }
}

/// A value as the text parts a form would carry: an array as repeated parts, an object as its
/// JSON, null as empty.
fn form_values(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Null => vec![String::new()],
        Value::Array(a) if a.iter().all(|x| !x.is_object() && !x.is_array()) => {
            a.iter().flat_map(form_values).collect()
        }
        other => vec![other.to_string()],
    }
}

fn multipart(r: &mut Rng, data: &Map<String, Value>) -> (Option<String>, Vec<u8>, &'static str) {
    let boundary = "GenBoundary7MA4YWxk";
    let mut out = Vec::new();
    let part = |out: &mut Vec<u8>, head: &str, bytes: &[u8]| {
        out.extend_from_slice(format!("--{boundary}\r\n{head}\r\n\r\n").as_bytes());
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    };
    let as_payload = r.pct(20);
    for (k, v) in data {
        if as_payload && r.pct(50) {
            continue;
        }
        if matches!(k.as_str(), "f" | "f+" | "+f") && r.pct(60) {
            // A file part instead of the value.
            let (name, bytes): (&str, &[u8]) = *r.pick(&[
                ("a.txt", &b"hello"[..]),
                ("image.png", &b"\x89PNG\r\n\x1a\n0000"[..]),
                ("big.bin", &[b'x'; 1500][..]),
            ]);
            part(
                &mut out,
                &format!(
                    "Content-Disposition: form-data; name=\"{k}\"; filename=\"{name}\"\r\nContent-Type: application/octet-stream"
                ),
                bytes,
            );
            continue;
        }
        for text in form_values(v) {
            part(
                &mut out,
                &format!("Content-Disposition: form-data; name=\"{k}\""),
                text.as_bytes(),
            );
        }
    }
    if as_payload {
        part(
            &mut out,
            "Content-Disposition: form-data; name=\"@jsonPayload\"",
            Value::Object(data.clone()).to_string().as_bytes(),
        );
    }
    let broken = r.pct(10);
    if !broken {
        out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    }
    let ct = match r.below(10) {
        0 => format!("multipart/form-data; boundary=\"{boundary}\""),
        1 => "multipart/form-data; boundary=other".to_owned(),
        2 => "multipart/form-data".to_owned(),
        _ => format!("multipart/form-data; boundary={boundary}"),
    };
    (
        Some(ct),
        out,
        if broken {
            "multipart without its end"
        } else {
            "multipart"
        },
    )
}

// ---------------------------------------------------------------------------------------------
// sending and masking

/// The request on one socket as the case frames it: (status, masked JSON answer).
fn send(side: &Side<'_>, case: &Case) -> (u16, Value) {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n",
        case.method, case.path
    );
    if let Some(ct) = &case.content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    match case.who {
        Who::Guest => {}
        Who::User => head.push_str(&format!("Authorization: {}\r\n", side.user)),
        Who::Su => head.push_str(&format!("Authorization: {}\r\n", side.su)),
    }
    let mut bytes = Vec::new();
    if case.chunked {
        head.push_str("Transfer-Encoding: chunked\r\n\r\n");
        bytes.extend_from_slice(head.as_bytes());
        // Two chunks, so a body is never one read.
        let mid = case.body.len() / 2;
        for piece in [&case.body[..mid], &case.body[mid..]] {
            if piece.is_empty() {
                continue;
            }
            bytes.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            bytes.extend_from_slice(piece);
            bytes.extend_from_slice(b"\r\n");
        }
        bytes.extend_from_slice(b"0\r\n\r\n");
    } else {
        if !case.body.is_empty() || case.method != "GET" {
            head.push_str(&format!("Content-Length: {}\r\n", case.body.len()));
        }
        head.push_str("\r\n");
        bytes.extend_from_slice(head.as_bytes());
        bytes.extend_from_slice(&case.body);
    }
    let mut c = std::net::TcpStream::connect(&side.server.addr).expect("connect");
    c.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    c.write_all(&bytes).expect("write");
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        crate::common::dechunk(body.as_bytes())
    } else {
        body.as_bytes().to_vec()
    };
    let json = serde_json::from_slice(&body).unwrap_or_else(|_| json!({"notJson": body.len()}));
    (status, masked(json))
}

/// `v` with what each server makes for itself masked: ids of records the generator did not
/// name, tokens, dates, and the random suffix of stored file names.
fn masked(v: Value) -> Value {
    match v {
        // A rule's parse error carries the parser's own words (the filters suite compares
        // verdicts, not wording).
        Value::Object(mut m) if m.get("code") == Some(&json!("validation_invalid_rule")) => {
            m.insert("message".into(), json!("Invalid rule."));
            Value::Object(m)
        }
        // An e-mail template's body is ferrobase's own wording.
        Value::Object(mut m) if m.contains_key("subject") && m.contains_key("body") => {
            m.insert("body".into(), json!("<own wording>"));
            Value::Object(m)
        }
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| match v {
                    Value::String(s)
                        if ["token", "created", "updated", "clientId"].contains(&&*k)
                            || (k == "id" && !s.starts_with("post") && !s.starts_with("user")) =>
                    {
                        (k, json!(if s.is_empty() { "" } else { "<made>" }))
                    }
                    v => (k, masked(v)),
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(masked).collect()),
        Value::String(s) => Value::String(file_suffix_masked(&s)),
        v => v,
    }
}

/// A stored file name's random part (`_` and ten of `[a-z0-9]` before the extension) masked,
/// and the ten more PocketBase adds to a name shorter than three characters.
fn file_suffix_masked(s: &str) -> String {
    let out = suffix_masked(s);
    match out.split_once("_<r>") {
        Some((stem, rest))
            if (10..=12).contains(&stem.len())
                && stem.is_char_boundary(stem.len() - 10)
                && stem[stem.len() - 10..]
                    .bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()) =>
        {
            format!("{}<r>_<r>{rest}", &stem[..stem.len() - 10])
        }
        _ => out,
    }
}

fn suffix_masked(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'_'
            && i + 11 <= b.len()
            && b[i + 1..i + 11]
                .iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
            && (i + 11 == b.len() || b[i + 11] == b'.')
        {
            out.push_str("_<r>");
            i += 11;
            continue;
        }
        let ch = s[i..].chars().next().expect("char");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}
