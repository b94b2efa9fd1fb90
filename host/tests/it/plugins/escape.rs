//! The sandbox-escape test: generated attempts, from two fixture plugins (`escape`, which
//! wants every capability, and `escape-bare`, which wants none), at every host call with its
//! grant held and missing, every raw SQL form at every system table and hidden column of a
//! real data dir, and outbound HTTP tricks. Every attempt the sandbox must refuse is refused,
//! named in the plugin's last error (`/api/plugins`), and leaves no secret in what the plugin
//! got back and nothing changed in the database.
//!
//! Also the doc-versus-code test: the raw SQL policy as `plugin-sdk/README.md` and
//! `ARCHITECTURE.md` state it is what the code does.

use super::{entry, eventually, posts_schema, server_with, wait_loaded};
use crate::common::{Server, enc};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

/// Everything `escape` may ask for, and two grants it does not ask for (never held).
const ALL_GRANTS: &str = r#"["db:read", "db:write", "kv", "http", "clock", "db:hidden:posts.secret_note", "db:hidden:users.tokenKey", "db:hidden:posts.private_note"]"#;

/// pb.toml's sections for both fixtures. A route budget of 1.5 s bounds the runaway
/// statements (each is stopped at it).
fn toml(allow: &[String]) -> String {
    let allow = serde_json::to_string(allow).unwrap();
    format!(
        "[plugins.escape]\ngrants = {ALL_GRANTS}\nhttp_allow = {allow}\nroute_timeout_ms = 1500\n\
         [plugins.escape-bare]\ngrants = {ALL_GRANTS}\nhttp_allow = {allow}\n"
    )
}

/// A server with both fixtures loaded, the collections they try things on, a user, and
/// pb.toml granting everything (with `http_allow` naming this server by address and by the
/// name `localhost`).
fn escape_server() -> Option<(Server, String)> {
    let s = server_with(&["escape", "escape_bare"], &toml(&[]))?;
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    // Two hidden fields: `escape` is granted the first only.
    let r = s.req(
        "PATCH",
        "/api/collections/posts",
        Some(&su),
        Some(&json!({"fields": [
            {"name": "title", "type": "text"}, {"name": "slug", "type": "text"},
            {"name": "note", "type": "text"}, {"name": "status", "type": "text"},
            {"name": "owner", "type": "relation", "collectionId": "_pb_users_auth_", "maxSelect": 1},
            {"name": "secret_note", "type": "text", "hidden": true},
            {"name": "private_note", "type": "text", "hidden": true},
            {"name": "tags", "type": "json"},
            {"name": "created", "type": "autodate", "onCreate": true},
            {"name": "updated", "type": "autodate", "onCreate": true, "onUpdate": true}
        ]})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    s.create_collection(
        &su,
        json!({"name": "escape_probe", "type": "base", "createRule": "", "listRule": "", "viewRule": "",
               "fields": [{"name": "call", "type": "text"}, {"name": "sql", "type": "text"},
                          {"name": "collection", "type": "text"},
                          {"name": "outcome", "type": "text", "max": 100000}]}),
    );
    let r = s.req(
        "POST",
        "/api/collections/users/records",
        Some(&su),
        Some(&json!({"email": "victim@example.com", "password": "victim-pass-123", "passwordConfirm": "victim-pass-123"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        Some(&su),
        Some(&json!({"title": "public", "secret_note": "GRANTED-NOTE-1", "private_note": "PRIVATE-NOTE-1", "tags": ["a", "b"]})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let allow = vec![s.addr.clone(), format!("localhost:{}", port(&s))];
    std::fs::write(s.data_dir().parent().unwrap().join("pb.toml"), {
        let cache = super::root().join("target/plugin-test-cache");
        format!(
            "[plugins]\ncache_dir = {:?}\n{}",
            cache.display().to_string(),
            toml(&allow)
        )
    })
    .unwrap();
    eventually("http_allow reloaded", || {
        let r = s.req("GET", "/api/plugins", Some(&su), None).json;
        let e = entry(&r, "escape.wasm");
        (e["state"] == "loaded" && e["httpAllow"].as_array().is_some_and(|a| a.len() == 2))
            .then_some(())
    });
    wait_loaded(&s, &su, &["escape", "escape-bare"]);
    Some((s, su))
}

fn port(s: &Server) -> u16 {
    s.addr.rsplit(':').next().unwrap().parse().unwrap()
}

/// One attempt through a fixture's `try` route.
fn attempt(s: &Server, plugin: &str, call: &str, args: &[(&str, &str)]) -> (u16, Value) {
    let mut path = format!("/api/{plugin}/try?call={}", enc(call));
    for (k, v) in args {
        path.push_str(&format!("&{k}={}", enc(v)));
    }
    let r = s.req("GET", &path, None, None);
    (r.status, r.json)
}

fn last_error(s: &Server, su: &str, file: &str) -> String {
    let r = s.req("GET", "/api/plugins", Some(su), None).json;
    entry(&r, file)["lastError"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

/// Read-only access to the server's data.db, from the test's side.
fn data_db(s: &Server) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(
        s.data_dir().join("data.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap()
}

/// Every secret in the data dir a plugin must never see: token secrets in every
/// collection's options, password hashes and token keys of every auth record, and
/// `private_note` (hidden, never granted to anyone that wants it).
fn secrets(s: &Server) -> Vec<String> {
    let db = data_db(s);
    let mut out = Vec::new();
    let mut stmt = db.prepare("SELECT options FROM _collections").unwrap();
    let opts: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if k.to_ascii_lowercase().contains("secret")
                        && let Some(s) = v.as_str()
                        && s.len() >= 8
                    {
                        out.push(s.to_owned());
                    }
                    walk(v, out);
                }
            }
            Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    for o in opts {
        walk(&serde_json::from_str(&o).unwrap(), &mut out);
    }
    for t in ["_superusers", "users"] {
        let mut stmt = db
            .prepare(&format!("SELECT password, tokenKey FROM {t}"))
            .unwrap();
        let rows: Vec<(String, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for (p, k) in rows {
            out.push(p);
            out.push(k);
        }
    }
    out.push("PRIVATE-NOTE-1".into());
    assert!(out.len() >= 12, "found the secrets: {out:?}");
    out
}

/// The rows of every table that is not a non-system collection's, and the schema itself:
/// what no refused attempt may change.
fn fingerprint(s: &Server, collections: &BTreeSet<String>) -> BTreeMap<String, String> {
    let db = data_db(s);
    let mut out = BTreeMap::new();
    for t in tables(&db) {
        if collections.contains(&t.to_ascii_lowercase()) && t != "users" {
            continue;
        }
        let mut stmt = db.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
        let n = stmt.column_count();
        let rows: Vec<String> = stmt
            .query_map([], |r| {
                let mut cells = Vec::new();
                for i in 0..n {
                    cells.push(format!("{:?}", r.get_ref(i)?));
                }
                Ok(cells.join("|"))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        out.insert(t, rows.join("\n"));
    }
    let schema: Vec<String> = db
        .prepare("SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    out.insert("sqlite_master".into(), schema.join("\n"));
    out
}

fn tables(db: &rusqlite::Connection) -> Vec<String> {
    db.prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn columns(db: &rusqlite::Connection, table: &str) -> Vec<String> {
    db.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// The names (lowercase) of the non-system collections, and their hidden fields (with whether
/// the collection is a view).
fn schema_facts(s: &Server, su: &str) -> (BTreeSet<String>, Vec<(String, String, bool)>) {
    let r = s.req("GET", "/api/collections?perPage=500", Some(su), None);
    let mut names = BTreeSet::new();
    let mut hidden = Vec::new();
    for c in r.json["items"].as_array().unwrap() {
        if c["system"] == true {
            continue;
        }
        let name = c["name"].as_str().unwrap().to_owned();
        let view = c["type"] == "view";
        for f in c["fields"].as_array().unwrap() {
            if f["hidden"] == true {
                hidden.push((name.clone(), f["name"].as_str().unwrap().to_owned(), view));
            }
        }
        names.insert(name.to_ascii_lowercase());
    }
    (names, hidden)
}

/// Raw SQL that must be refused, generated from the real schema: every form of reading every
/// table that is not a non-system collection's (and SQLite's own), every form of reading or
/// writing every hidden column not granted, and every statement kind a plugin may not run.
fn refused_sql(
    db: &rusqlite::Connection,
    collections: &BTreeSet<String>,
    hidden: &[(String, String, bool)],
) -> Vec<String> {
    let mut system: Vec<(String, String)> = tables(db)
        .into_iter()
        .filter(|t| !collections.contains(&t.to_ascii_lowercase()))
        .map(|t| {
            let c = columns(db, &t).into_iter().next().unwrap_or("rowid".into());
            (t, c)
        })
        .collect();
    for t in [
        "sqlite_master",
        "sqlite_schema",
        "sqlite_temp_master",
        "sqlite_temp_schema",
    ] {
        system.push((t.into(), "name".into()));
    }
    assert!(system.len() >= 10, "system tables: {system:?}");
    let mut out = Vec::new();
    for (t, c) in &system {
        let upper = t.to_ascii_uppercase();
        out.extend([
            format!("SELECT * FROM {t}"),
            format!("SELECT {c} FROM {t}"),
            format!("SELECT count(*) FROM {t}"),
            format!("SELECT 1 FROM {t} LIMIT 1"),
            format!("SELECT rowid FROM {t}"),
            format!("SELECT * FROM \"{t}\""),
            format!("SELECT * FROM [{t}]"),
            format!("SELECT * FROM {upper}"),
            format!("WITH x AS (SELECT * FROM {t}) SELECT * FROM x"),
            format!("WITH RECURSIVE x(n) AS (SELECT count(*) FROM {t}) SELECT n FROM x"),
            format!("SELECT (SELECT {c} FROM {t} LIMIT 1)"),
            format!("SELECT id FROM posts WHERE EXISTS (SELECT 1 FROM {t})"),
            format!("SELECT p.id FROM posts p JOIN {t} ON 1 = 1"),
            format!("SELECT id FROM posts UNION ALL SELECT {c} FROM {t}"),
            format!("SELECT json_group_array({c}) FROM {t}"),
            format!("SELECT * FROM (SELECT * FROM {t})"),
            format!("SELECT * FROM pragma_table_info('{t}')"),
            format!("SELECT name FROM sqlite_master WHERE tbl_name = '{t}'"),
            format!("/* a comment */ SELECT {c} FROM {t}"),
            format!("SELECT {c} FROM {t};"),
        ]);
        if !t.starts_with("sqlite_temp") {
            out.push(format!("SELECT * FROM main.{t}"));
        }
        if t == "_collections" {
            out.extend([
                "SELECT value FROM _collections, json_each(_collections.options)".to_owned(),
                "SELECT j.value FROM _collections c, json_tree(c.options) j WHERE j.key = 'secret'"
                    .to_owned(),
                "SELECT json_extract(options, '$.authToken.secret') FROM _collections".to_owned(),
                "SELECT id FROM posts WHERE (SELECT substr(options, 1, 1) FROM _collections LIMIT 1) = '{'"
                    .to_owned(),
            ]);
        }
    }
    for (t, h, view) in hidden {
        let reads = [
            format!("SELECT {h} FROM {t}"),
            format!("SELECT * FROM {t}"),
            format!("SELECT {t}.* FROM {t}"),
            format!("SELECT \"{h}\" FROM \"{t}\""),
            format!("SELECT upper({h}) FROM {t}"),
            format!("SELECT length({h}) FROM {t}"),
            format!("SELECT id FROM {t} WHERE {h} LIKE 'a%'"),
            format!("SELECT id FROM {t} WHERE {h} > ''"),
            format!("SELECT id FROM {t} ORDER BY {h}"),
            format!("SELECT count(*) FROM {t} GROUP BY {h}"),
            format!("SELECT (SELECT {h} FROM {t} LIMIT 1)"),
            format!("WITH x AS (SELECT {h} AS v FROM {t}) SELECT v FROM x"),
            format!("SELECT id FROM posts WHERE EXISTS (SELECT 1 FROM {t} WHERE {h} = 'x')"),
            format!("SELECT q.{h} FROM posts JOIN {t} q ON 1 = 1"),
            format!("SELECT * FROM {t} NATURAL JOIN posts"),
            format!("SELECT value FROM {t}, json_each(json_array({t}.{h}))"),
            format!("SELECT id FROM {t} UNION SELECT {h} FROM {t}"),
        ];
        out.extend(reads);
        if *view {
            continue;
        }
        out.extend([
            format!("UPDATE {t} SET {h} = 'x'"),
            format!("UPDATE posts SET title = (SELECT {h} FROM {t} LIMIT 1)"),
            format!("INSERT INTO posts (id, title) SELECT 'x' || rowid, {h} FROM {t}"),
            format!(
                "UPDATE posts SET title = 'x' WHERE EXISTS (SELECT 1 FROM {t} WHERE {h} LIKE 'a%')"
            ),
        ]);
    }
    // Views a superuser made over secrets: their reads reach the columns under them.
    out.extend([
        "SELECT * FROM leaky_view".to_owned(),
        "SELECT tk FROM leaky_view".to_owned(),
        "SELECT id FROM leaky_view".to_owned(),
    ]);
    out.extend(
        [
            "PRAGMA table_info(posts)",
            // (SQLite itself refuses writes to sqlite_master unless this PRAGMA ran.)
            "PRAGMA writable_schema = 1",
            "PRAGMA main.journal_mode = DELETE",
            "ATTACH DATABASE 'file:data.db?mode=ro' AS x",
            "ATTACH DATABASE ':memory:' AS x",
            "DETACH DATABASE x",
            "SELECT load_extension('libsqlite_evil')",
            "SELECT load_extension('libsqlite_evil', 'entry')",
            "SELECT fts3_tokenizer('simple')",
            "VACUUM INTO 'stolen.db'",
            "VACUUM",
            "CREATE TRIGGER t AFTER INSERT ON posts BEGIN UPDATE posts SET title = (SELECT options FROM _collections LIMIT 1); END",
            "CREATE TEMP TRIGGER t AFTER INSERT ON posts BEGIN SELECT 1; END",
            "CREATE VIEW v AS SELECT options FROM _collections",
            "CREATE TEMP VIEW v AS SELECT options FROM _collections",
            "CREATE TABLE stolen (a)",
            "CREATE TEMP TABLE stolen (a)",
            "CREATE INDEX i ON posts (title)",
            "CREATE VIRTUAL TABLE v USING fts5(a)",
            "DROP TABLE posts",
            "DROP VIEW leaky_view",
            "ALTER TABLE posts ADD COLUMN stolen TEXT",
            "ALTER TABLE posts RENAME TO stolen",
            "BEGIN",
            "BEGIN IMMEDIATE",
            "COMMIT",
            "ROLLBACK",
            "SAVEPOINT s",
            "RELEASE s",
            "ANALYZE",
            "REINDEX",
            "EXPLAIN SELECT * FROM _collections",
            "EXPLAIN QUERY PLAN SELECT * FROM _collections",
            "SELECT 1; SELECT options FROM _collections",
            "UPDATE posts SET title = title; DROP TABLE posts",
            "WITH x AS (SELECT 1) DELETE FROM _params",
            "WITH x AS (SELECT 1) INSERT INTO _superusers (id) SELECT 'x'",
            "INSERT INTO users (id, email) VALUES ('forged', 'x@example.com')",
            "REPLACE INTO users (id, email) VALUES ('forged', 'x@example.com')",
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
            "SELECT zeroblob(200000000)",
            "SELECT * FROM dbstat",
            "SELECT * FROM pragma_database_list",
        ]
        .map(str::to_owned),
    );
    out
}

#[test]
fn every_escape_attempt_is_refused_named_in_the_last_error_and_leaks_nothing() {
    let Some((s, su)) = escape_server() else {
        return;
    };
    // A view over a hidden column, as a superuser may make one.
    let r = s.req(
        "POST",
        "/api/collections",
        Some(&su),
        Some(
            &json!({"name": "leaky_view", "type": "view", "listRule": "",
                     "viewQuery": "SELECT id, tokenKey AS tk FROM users"}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    wait_loaded(&s, &su, &["escape", "escape-bare"]);
    let (collections, hidden) = schema_facts(&s, &su);
    let hidden_denied: Vec<(String, String, bool)> = hidden
        .iter()
        .filter(|(c, f, _)| !(c == "posts" && f == "secret_note"))
        .cloned()
        .collect();
    for (c, f) in [
        ("users", "tokenKey"),
        ("users", "password"),
        ("posts", "private_note"),
    ] {
        assert!(
            hidden_denied.iter().any(|(hc, hf, _)| hc == c && hf == f),
            "{c}.{f} in {hidden_denied:?}"
        );
    }
    let secrets = secrets(&s);
    let before = fingerprint(&s, &collections);
    let leaks = |what: &str, body: &Value| {
        let text = body.to_string();
        for secret in &secrets {
            assert!(
                !text.contains(secret.as_str()),
                "{what} leaked {secret}: {text}"
            );
        }
    };

    // Controls: what the policy allows goes through, so the refusals below are the policy's.
    for (call, sql) in [
        ("db.query", "SELECT id, title FROM posts"),
        ("db.query", "SELECT secret_note FROM posts"),
        ("db.query", "SELECT value FROM posts, json_each(posts.tags)"),
        ("db.query", "SELECT id, email FROM users"),
        ("db.execute", "UPDATE posts SET title = title"),
    ] {
        let (st, b) = attempt(&s, "escape", call, &[("sql", sql)]);
        assert_eq!((st, &b["ok"]), (200, &json!(true)), "{call} {sql}: {b}");
        leaks(sql, &b);
    }

    // Raw SQL: every form, through query and through execute.
    let sql = refused_sql(&data_db(&s), &collections, &hidden_denied);
    let mut refused = 0;
    for text in &sql {
        for call in ["db.query", "db.execute"] {
            let (st, b) = attempt(&s, "escape", call, &[("sql", text)]);
            assert_eq!(st, 200, "{call} {text}: {b}");
            assert_eq!(
                (&b["ok"], &b["kind"]),
                (&json!(false), &json!("denied")),
                "{call} {text} was not refused: {b}"
            );
            let why = b["error"].as_str().unwrap();
            let last = last_error(&s, &su, "escape.wasm");
            assert!(
                last.ends_with(&format!("refused {call}: {why}")),
                "{call} {text}: the last error {last:?} does not name {why:?}"
            );
            leaks(text, &b);
            refused += 1;
        }
    }
    assert!(refused >= 400, "{refused} attempts");

    // The same through a before-hook (where writes of any kind are refused) on a real write.
    for (call, sql) in [
        ("db.query", "SELECT options FROM _collections"),
        ("db.query", "SELECT tokenKey FROM users"),
        ("db.execute", "UPDATE posts SET title = title"),
        ("db.create-record", ""),
    ] {
        let r = s.req(
            "POST",
            "/api/collections/escape_probe/records",
            None,
            Some(&json!({"call": call, "sql": sql, "collection": "posts"})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
        let outcome: Value = serde_json::from_str(r.json["outcome"].as_str().unwrap()).unwrap();
        assert_eq!(outcome["kind"], "denied", "{call} in a hook: {outcome}");
        leaks(call, &outcome);
    }

    // Typed reads: records as the plugin may see them (no hash, no token key, no hidden field
    // without its grant), the schema without options.
    for (call, args) in [
        ("db.find-records", vec![("collection", "users")]),
        ("db.find-records", vec![("collection", "posts")]),
        ("db.collections", vec![]),
    ] {
        let (st, b) = attempt(&s, "escape", call, &args);
        assert_eq!(st, 200, "{b}");
        assert_eq!(b["ok"], true, "{call}: {b}");
        leaks(call, &b);
    }
    // A guest's call: `_superusers` has no list rule, so the caller's rules refuse it.
    let (_, b) = attempt(
        &s,
        "escape",
        "db.find-records",
        &[("collection", "_superusers")],
    );
    assert_eq!(b["kind"], "denied", "{b}");
    leaks("_superusers", &b);
    let (_, posts) = attempt(&s, "escape", "db.find-records", &[("collection", "posts")]);
    assert!(
        posts["out"]
            .as_str()
            .unwrap()
            .contains("secret_note=GRANTED-NOTE-1"),
        "{posts}"
    );
    assert!(
        !posts["out"].as_str().unwrap().contains("private_note"),
        "{posts}"
    );

    // Nothing changed, and no file was written beside the data.
    assert_eq!(before, fingerprint(&s, &collections));
    for f in ["stolen.db", "pb_data/stolen.db"] {
        assert!(!s.data_dir().parent().unwrap().join(f).exists(), "{f}");
    }
    assert!(!Path::new("stolen.db").exists());
    let report = s.req("GET", "/api/plugins", Some(&su), None).json;
    assert!(
        entry(&report, "escape.wasm")["refusals"].as_u64().unwrap() >= refused,
        "{report}"
    );
}

/// A host call, the grant it needs ("" = none), and arguments that succeed when it is held.
type HostCall = (&'static str, &'static str, Vec<(String, String)>);

/// Every host call the fixtures can make.
fn host_calls(s: &Server, post: &str, doomed: &str) -> Vec<HostCall> {
    let health = format!("http://{}/api/health", s.addr);
    let a = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    vec![
        (
            "db.query",
            "db:read",
            a(&[("sql", "SELECT count(*) FROM posts")]),
        ),
        (
            "db.get-record",
            "db:read",
            a(&[("collection", "posts"), ("id", post)]),
        ),
        ("db.find-records", "db:read", a(&[("collection", "posts")])),
        ("db.collections", "db:read", a(&[])),
        (
            "db.execute",
            "db:write",
            a(&[("sql", "UPDATE posts SET title = title WHERE 0")]),
        ),
        (
            "db.create-record",
            "db:write",
            a(&[
                ("collection", "posts"),
                ("field", "title"),
                ("value", "made"),
            ]),
        ),
        (
            "db.update-record",
            "db:write",
            a(&[
                ("collection", "posts"),
                ("id", post),
                ("field", "title"),
                ("value", "public"),
            ]),
        ),
        (
            "db.delete-record",
            "db:write",
            a(&[("collection", "posts"), ("id", doomed)]),
        ),
        ("kv.set", "kv", a(&[("key", "k")])),
        ("kv.get", "kv", a(&[("key", "k")])),
        ("kv.increment", "kv", a(&[("key", "n")])),
        ("kv.delete", "kv", a(&[("key", "k")])),
        ("http.fetch", "http", vec![("url".into(), health)]),
        ("clock", "clock", a(&[])),
        ("config.get", "", a(&[("key", "x")])),
        ("log.write", "", a(&[])),
        ("context", "", a(&[])),
    ]
}

#[test]
fn every_host_call_needs_its_grant_and_outbound_http_its_address() {
    let Some((s, su)) = escape_server() else {
        return;
    };
    let post = s
        .req(
            "GET",
            &format!(
                "/api/collections/posts/records?filter={}",
                enc("title='public'")
            ),
            Some(&su),
            None,
        )
        .json["items"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // `escape` holds every grant it wants; `escape-bare` wants none and holds none, though
    // pb.toml grants both the same.
    for (plugin, file, held) in [
        ("escape", "escape.wasm", true),
        ("escape-bare", "escape_bare.wasm", false),
    ] {
        let doomed = s
            .req(
                "POST",
                "/api/collections/posts/records",
                Some(&su),
                Some(&json!({"title": "doomed"})),
            )
            .json["id"]
            .as_str()
            .unwrap()
            .to_owned();
        for (call, grant, args) in host_calls(&s, &post, &doomed) {
            let args: Vec<(&str, &str)> =
                args.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            let (st, b) = attempt(&s, plugin, call, &args);
            let needs = !grant.is_empty();
            match (needs && !held, grant) {
                (false, "clock") => {
                    let secs: u64 = b["out"].as_str().unwrap().parse().unwrap();
                    assert!(secs > 978_307_200, "{plugin}: a real clock: {b}");
                }
                (false, _) => {
                    assert_eq!((st, &b["ok"]), (200, &json!(true)), "{plugin} {call}: {b}")
                }
                // Without the grant the clock is not refused but frozen at the epoch.
                (true, "clock") => assert_eq!(b["out"], "0", "{plugin}: {b}"),
                // kv has no error type: the host stops the call, and the route fails.
                (true, "kv") => assert_eq!(
                    b,
                    json!({"data": {}, "message": "Something went wrong while processing your request.", "status": 400})
                ),
                (true, _) => {
                    assert_eq!((st, &b["ok"]), (200, &json!(false)), "{plugin} {call}: {b}");
                    assert!(
                        b["error"]
                            .as_str()
                            .unwrap()
                            .contains(&format!("no \"{grant}\" grant")),
                        "{plugin} {call}: {b}"
                    );
                }
            }
            if needs && !held && grant != "clock" {
                let last = last_error(&s, &su, file);
                assert!(
                    last.contains(&format!(
                        "refused {call}: plugin {plugin} has no \"{grant}\" grant"
                    )),
                    "{call}: {last}"
                );
            }
        }
    }

    // Outbound HTTP: only to what http_allow names, decided on the dialled address.
    let canary = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cport = canary.local_addr().unwrap().port();
    let port = port(&s);
    let redirect = format!(
        "http://{}/api/escape/redirect?to={}",
        s.addr,
        enc(&format!("http://127.0.0.1:{cport}/secret"))
    );
    let (_, b) = attempt(&s, "escape", "http.fetch", &[("url", &redirect)]);
    assert_eq!(b["ok"], true, "{b}");
    assert!(
        b["out"].as_str().unwrap().starts_with("302"),
        "a redirect is not followed: {b}"
    );
    for url in [
        format!("http://127.0.0.1:{cport}/secret"),
        format!("http://localhost:{port}/api/health"),
        format!("http://LOCALHOST:{port}/api/health"),
        format!("http://localhost.:{port}/api/health"),
        format!("http://{}@127.0.0.1:{cport}/", s.addr),
        format!("http://u:p@{}/api/health", s.addr),
        format!("http://127.0.0.1:{cport}\\@{}/", s.addr),
        format!("http://127.0.0.1:{cport}#@{}/", s.addr),
        format!("http://127.1:{port}/api/health"),
        format!("http://2130706433:{port}/api/health"),
        format!("http://0x7f000001:{port}/api/health"),
        format!("http://127.0.0.1.:{port}/api/health"),
        format!("http://[::1]:{port}/api/health"),
        format!("http://[::ffff:127.0.0.1]:{port}/api/health"),
        format!("https://127.0.0.1:{cport}/"),
        format!("ftp://{}/", s.addr),
        "file:///etc/passwd".to_owned(),
        format!(" http://{}/api/health", s.addr),
        format!("http://{}:80/api/health", s.addr),
    ] {
        let (st, b) = attempt(&s, "escape", "http.fetch", &[("url", &url)]);
        assert_eq!(
            (st, &b["ok"]),
            (200, &json!(false)),
            "{url} was fetched: {b}"
        );
        let why = b["error"].as_str().unwrap();
        let last = last_error(&s, &su, "escape.wasm");
        assert!(
            last.ends_with(&format!("refused http.fetch: {why}")),
            "{url}: {last} vs {why}"
        );
    }
    // A granted address with a Host header of the plugin's own.
    let (_, b) = attempt(
        &s,
        "escape",
        "http.fetch",
        &[
            ("url", &format!("http://{}/api/health", s.addr)),
            ("header", "host:internal.example"),
        ],
    );
    assert_eq!(b["ok"], false, "{b}");
    // Nothing ever reached the address that was not granted.
    canary.set_nonblocking(true).unwrap();
    assert!(canary.accept().is_err(), "something dialled the canary");
}

/// The list of tables the docs call unreadable: the backticked names on the line that starts
/// with `Unreadable by raw SQL` in `file`.
fn documented_unreadable(file: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(super::root().join(file)).unwrap();
    let line = text
        .lines()
        .find(|l| {
            l.trim_start_matches(['-', '*', ' '])
                .starts_with("Unreadable by raw SQL")
        })
        .unwrap_or_else(|| panic!("{file} states no 'Unreadable by raw SQL' list"));
    line.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_documented_raw_sql_policy_is_what_the_code_does() {
    let readme = documented_unreadable("plugin-sdk/README.md");
    let arch = documented_unreadable("ARCHITECTURE.md");
    assert_eq!(
        readme, arch,
        "the SDK README and ARCHITECTURE.md list different tables"
    );
    let Some((s, su)) = escape_server() else {
        return;
    };
    let (collections, _) = schema_facts(&s, &su);
    // Every table of a real data dir that is not a non-system collection's is documented...
    let db = data_db(&s);
    for t in tables(&db) {
        if !collections.contains(&t.to_ascii_lowercase()) {
            assert!(
                readme.contains(&t),
                "{t} is unreadable but not in the docs' list {readme:?}"
            );
        }
    }
    // ...and every documented one is refused, even to a plugin holding every grant, while a
    // collection's table reads.
    for t in &readme {
        for sql in [
            format!("SELECT * FROM {t}"),
            format!("SELECT count(*) FROM {t}"),
        ] {
            let (_, b) = attempt(&s, "escape", "db.query", &[("sql", &sql)]);
            assert_eq!(
                (&b["ok"], &b["kind"]),
                (&json!(false), &json!("denied")),
                "{sql}: {b}"
            );
        }
    }
    let (_, b) = attempt(
        &s,
        "escape",
        "db.query",
        &[("sql", "SELECT count(*) FROM posts")],
    );
    assert_eq!(b["ok"], true, "{b}");
    // The hidden fields the docs name are refused without their grant.
    for sql in [
        "SELECT password FROM users",
        "SELECT tokenKey FROM users",
        "SELECT private_note FROM posts",
    ] {
        let (_, b) = attempt(&s, "escape", "db.query", &[("sql", sql)]);
        assert_eq!(b["kind"], "denied", "{sql}: {b}");
    }
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut String) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
}

#[test]
fn the_documented_client_bodies_are_the_servers_own_words() {
    let readme = std::fs::read_to_string(super::root().join("plugin-sdk/README.md")).unwrap();
    let section = readme
        .split("## What a client sees")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("the SDK README has a 'What a client sees' section");
    let mut code = String::new();
    sources(&super::root().join("host/src"), &mut code);
    let mut bodies = 0;
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let Some(body) = row
            .split('`')
            .skip(1)
            .step_by(2)
            .find(|c| c.starts_with('{'))
        else {
            continue;
        };
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{body}: {e}"));
        // Keys as the server writes them: data, message, status.
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["data", "message", "status"], "{body}");
        assert!(
            body.starts_with("{\"data\":") && body.contains(",\"message\":"),
            "{body}"
        );
        assert_eq!(cells[2], v["status"].to_string(), "{row}");
        // The message is the server's own (a string in its sources), unless the row says a
        // plugin wrote it.
        let message = v["message"].as_str().unwrap();
        if !cells[1].contains(message) {
            assert!(
                code.contains(&format!("\"{message}\"")),
                "{message:?} is not a message of the server"
            );
        }
        bodies += 1;
    }
    assert!(bodies >= 9, "{bodies} bodies");
}

#[test]
fn a_plugin_routes_writes_reach_realtime_subscribers_after_their_commit() {
    let Some((s, _su)) = escape_server() else {
        return;
    };
    let sse = crate::realtime::Sse::open(&s.addr);
    assert_eq!(
        crate::realtime::subscribe(&s, &sse, None, &["posts/*".to_owned()]),
        204
    );
    let (st, b) = attempt(
        &s,
        "escape",
        "db.create-record",
        &[
            ("collection", "posts"),
            ("field", "title"),
            ("value", "from-route"),
        ],
    );
    assert!(st == 200 && b["ok"] == true, "{b}");
    let id = b["out"]
        .as_str()
        .and_then(|r| r.strip_prefix("posts/"))
        .and_then(|r| r.split(':').next())
        .unwrap_or_else(|| panic!("a created record: {b}"))
        .to_owned();
    let (st, b) = attempt(
        &s,
        "escape",
        "db.update-record",
        &[
            ("collection", "posts"),
            ("id", &id),
            ("field", "title"),
            ("value", "renamed"),
        ],
    );
    assert!(st == 200 && b["ok"] == true, "{b}");
    // A write the records path refuses (a hook-free validation error) is never announced.
    let (st, b) = attempt(
        &s,
        "escape",
        "db.update-record",
        &[
            ("collection", "posts"),
            ("id", &id),
            ("field", "owner"),
            ("value", "nobody123456789"),
        ],
    );
    assert!(st == 200 && b["ok"] == false, "{b}");
    let (st, b) = attempt(
        &s,
        "escape",
        "db.delete-record",
        &[("collection", "posts"), ("id", &id)],
    );
    assert!(st == 200 && b["ok"] == true, "{b}");
    let heard: Vec<String> = sse
        .drain(Duration::from_millis(500))
        .iter()
        .map(|(topic, e)| {
            assert_eq!(e["record"]["id"], id.as_str(), "{e}");
            // A guest subscriber never sees a hidden field, whoever wrote the record.
            assert!(e["record"].get("secret_note").is_none(), "{e}");
            format!("{topic} {} {}", e["action"], e["record"]["title"])
        })
        .collect();
    assert_eq!(
        heard,
        [
            "posts/* \"create\" \"from-route\"",
            "posts/* \"update\" \"renamed\"",
            "posts/* \"delete\" \"renamed\"",
        ]
    );
}
