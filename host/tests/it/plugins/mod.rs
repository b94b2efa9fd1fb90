//! Plugins end to end: the example and fixture plugins are built from source (Rust for
//! wasm32-wasip2, the JS one with componentize-js), dropped into a real server's plugins
//! folder, and every behaviour is checked through HTTP.

mod auth_hooks;
mod escape;
mod live_config;
mod logs;
mod starter;
mod uploads;

use crate::common::{Server, enc, err};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Whether the plugins could be built from source (once per test run): the Rust workspace for
/// wasm32-wasip2 and the JS example, which needs npm and Node. Without them the plugin tests
/// skip (see `common::needs`).
fn plugins_built() -> bool {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| ferrobase::testkit::build_plugins(&root()));
    let what = match built {
        Ok(()) => String::new(),
        Err(e) => {
            format!("the plugins built from source (the wasm32-wasip2 target, npm, Node): {e}")
        }
    };
    crate::common::needs(&what, built.is_ok())
}

/// The built component of one example or fixture plugin.
fn wasm(name: &str) -> PathBuf {
    assert!(
        plugins_built(),
        "plugins are built before a test asks for one"
    );
    ferrobase::testkit::plugin_wasm(&root(), name)
}

/// A work dir whose plugins folder holds `plugins` (file names as given) and whose pb.toml is
/// `toml`; `None` when the plugins cannot be built (the test skips).
pub(crate) fn work_dir_with(plugins: &[&str], toml: &str) -> Option<tempfile::TempDir> {
    if !plugins_built() {
        return None;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    // One compile cache for every test server: the 12 MB JS component compiles once.
    let cache = root().join("target/plugin-test-cache");
    let toml = format!(
        "[plugins]\ncache_dir = {:?}\n{toml}",
        cache.display().to_string()
    );
    std::fs::write(dir.path().join("pb.toml"), toml).unwrap();
    let pdir = dir.path().join("plugins");
    std::fs::create_dir_all(&pdir).unwrap();
    for p in plugins {
        std::fs::copy(wasm(p), pdir.join(format!("{p}.wasm"))).unwrap();
    }
    Some(dir)
}

/// An in-process server on [`work_dir_with`].
fn server_with(plugins: &[&str], toml: &str) -> Option<Server> {
    work_dir_with(plugins, toml).map(|d| Server::start_in_patient(d, Duration::from_secs(120)))
}

/// A server process on [`work_dir_with`], for the tests that read its memory use.
fn process_with(plugins: &[&str], toml: &str) -> Option<Server> {
    work_dir_with(plugins, toml).map(|d| Server::start_process_in(d, Duration::from_secs(120)))
}

fn plugins_dir(s: &Server) -> PathBuf {
    s.data_dir().parent().unwrap().join("plugins")
}

/// The collections the example plugins expect.
fn posts_schema(s: &Server, su: &str, list_rule: Value) {
    s.create_collection(
        su,
        json!({"name": "posts", "type": "base",
               "listRule": list_rule, "viewRule": "", "createRule": "", "updateRule": "", "deleteRule": "",
               "fields": [
                   {"name": "title", "type": "text"},
                   {"name": "slug", "type": "text"},
                   {"name": "note", "type": "text"},
                   {"name": "status", "type": "text"},
                   {"name": "owner", "type": "relation", "collectionId": "_pb_users_auth_", "maxSelect": 1},
                   {"name": "created", "type": "autodate", "onCreate": true},
                   {"name": "updated", "type": "autodate", "onCreate": true, "onUpdate": true}
               ]}),
    );
    s.create_collection(
        su,
        json!({"name": "audit_log", "type": "base",
               "fields": [{"name": "action", "type": "text"}, {"name": "record", "type": "text"}]}),
    );
}

/// Poll `f` until it returns Some or the time is up.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The names of the plugins `/api/plugins` reports as loaded.
fn loaded(report: &Value) -> Vec<String> {
    let mut got: Vec<String> = report["plugins"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|p| p["state"] == "loaded")
        .filter_map(|p| p["name"].as_str().map(str::to_owned))
        .collect();
    got.sort();
    got
}

/// The one entry `/api/plugins` has for the plugin file `file`.
fn entry<'a>(report: &'a Value, file: &str) -> &'a Value {
    report["plugins"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["file"] == file))
        .unwrap_or_else(|| panic!("no entry for {file} in {report}"))
}

/// Wait until `/api/plugins` lists exactly `names` as loaded.
pub(crate) fn wait_loaded(s: &Server, su: &str, names: &[&str]) -> Value {
    eventually(&format!("plugins {names:?} loaded"), || {
        let r = s.req("GET", "/api/plugins", Some(su), None);
        let got = loaded(&r.json);
        let mut want: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        want.sort();
        (got == want).then_some(r.json)
    })
}

fn rejection(field: &str, code: &str, field_msg: &str, message: &str) -> Value {
    json!({"status": 400, "message": message,
           "data": {field: {"code": code, "message": field_msg}}})
}

fn count(s: &Server, su: &str, coll: &str, filter: &str) -> u64 {
    let r = s.req(
        "GET",
        &format!("/api/collections/{coll}/records?filter={}", enc(filter)),
        Some(su),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["totalItems"].as_u64().unwrap()
}

const GRANTS: &str = r#"
[plugins.audit]
grants = ["db:write", "kv"]
[plugins.cleanup]
grants = ["db:read", "db:write", "kv"]
[plugins.js-hello]
memory_mb = 128
"#;

#[test]
fn record_hooks_patch_reject_and_run_in_the_transaction_and_after_commit() {
    let Some(s) = server_with(&["slugger", "audit", "js-hello"], GRANTS) else {
        return;
    };
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    // The plugins hook `posts`, which did not exist at start: the schema change admits them.
    let report = wait_loaded(&s, &su, &["audit", "js-hello", "slugger"]);
    for p in report["plugins"].as_array().unwrap() {
        assert_eq!(
            (&p["state"], &p["error"]),
            (&json!("loaded"), &Value::Null),
            "{report}"
        );
    }

    let posts = "/api/collections/posts/records";
    // before-create patches: the Rust slugger fills the slug, the JS plugin the note.
    let r = s.req(
        "POST",
        posts,
        None,
        Some(&json!({"title": "Hello, World!"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["slug"], "hello-world");
    assert_eq!(r.json["note"], "checked by js-hello");
    let first = r.json["id"].as_str().unwrap().to_owned();

    // Rejections become PocketBase's 400 body, field errors included; nothing is written.
    let r = s.req("POST", posts, None, Some(&json!({"title": "!!!"})));
    assert_eq!(
        r.json,
        rejection(
            "title",
            "validation_slug_empty",
            "Cannot make a slug from this title.",
            "Failed to create record."
        )
    );
    let r = s.req(
        "POST",
        posts,
        None,
        Some(&json!({"title": "ok", "slug": "Bad Slug"})),
    );
    assert_eq!(
        r.json,
        rejection(
            "slug",
            "validation_invalid_slug",
            "Must be lowercase letters, digits and single dashes.",
            "Failed to create record."
        )
    );
    let r = s.req("POST", posts, None, Some(&json!({"title": "Buy SPAM now"})));
    assert_eq!(
        r.json,
        rejection(
            "title",
            "validation_spam",
            "Spam is not allowed.",
            "Failed to create record."
        )
    );
    // An in-transaction rejection rolls the whole write back, audit row included.
    let r = s.req(
        "POST",
        posts,
        None,
        Some(&json!({"title": "forbidden-in-tx"})),
    );
    assert_eq!(
        r.json,
        rejection(
            "title",
            "validation_audit",
            "Refused inside the transaction.",
            "Failed to create record."
        )
    );
    assert_eq!(count(&s, &su, "posts", "title = 'forbidden-in-tx'"), 0);
    assert_eq!(count(&s, &su, "posts", ""), 1);

    // The in-transaction hook wrote its audit row atomically with the create.
    assert_eq!(
        count(
            &s,
            &su,
            "audit_log",
            &format!("action = 'create' && record = '{first}'")
        ),
        1
    );
    assert_eq!(count(&s, &su, "audit_log", ""), 1);

    // before-update: validates a given slug, never regenerates it.
    let one = format!("{posts}/{first}");
    let r = s.req("PATCH", &one, None, Some(&json!({"slug": "a--b"})));
    assert_eq!(
        r.json,
        rejection(
            "slug",
            "validation_invalid_slug",
            "Must be lowercase letters, digits and single dashes.",
            "Failed to update record."
        )
    );
    let r = s.req("PATCH", &one, None, Some(&json!({"title": "Hello again"})));
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(r.json["slug"], "hello-world");
    let r = s.req(
        "POST",
        posts,
        None,
        Some(&json!({"title": "Second post", "slug": "second"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let second = r.json["id"].as_str().unwrap().to_owned();
    assert_eq!(s.req("DELETE", &one, None, None).status, 204);
    assert_eq!(
        count(
            &s,
            &su,
            "audit_log",
            &format!("action = 'delete' && record = '{first}'")
        ),
        1
    );
    assert_eq!(count(&s, &su, "audit_log", ""), 4);

    // after-commit: committed changes only, in commit order, with increasing seq numbers.
    let stats = eventually("after-commit events", || {
        let r = s.req("GET", "/api/audit/stats", None, None);
        (r.json["commits"] == 4).then_some(r.json)
    });
    assert_eq!(
        stats["titles"], "Hello, World!,Hello again,Second post,Hello again",
        "{stats}"
    );
    assert!(stats["lastSeq"].as_i64().unwrap() >= 4, "{stats}");
    // The refused writes never reached after-commit, even later.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        s.req("GET", "/api/audit/stats", None, None).json["commits"],
        4
    );
    assert_eq!(
        s.req("GET", &format!("{posts}/{second}"), None, None).json["slug"],
        "second"
    );

    // A truncate deletes record by record, as PocketBase's does: before-delete is asked about
    // every post and one refusal keeps them all; then each delete runs in-transaction and
    // reaches after-commit.
    let r = s.req("POST", posts, None, Some(&json!({"title": "keep-forever"})));
    assert_eq!(r.status, 200, "{}", r.json);
    let kept = r.json["id"].as_str().unwrap().to_owned();
    let truncate = "/api/collections/posts/truncate";
    let keep = rejection(
        "title",
        "validation_audit_keep",
        "This post is kept forever.",
        "Failed to delete record.",
    );
    let r = s.req("DELETE", truncate, Some(&su), None);
    assert_eq!((r.status, &r.json), (400, &keep));
    let r = s.req("DELETE", &format!("{posts}/{kept}"), None, None);
    assert_eq!((r.status, &r.json), (400, &keep));
    assert_eq!(count(&s, &su, "posts", ""), 2);
    assert_eq!(count(&s, &su, "audit_log", ""), 5);
    let r = s.req(
        "PATCH",
        &format!("{posts}/{kept}"),
        None,
        Some(&json!({"title": "let go"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(s.req("DELETE", truncate, Some(&su), None).status, 204);
    assert_eq!(count(&s, &su, "posts", ""), 0);
    for id in [&second, &kept] {
        assert_eq!(
            count(
                &s,
                &su,
                "audit_log",
                &format!("action = 'delete' && record = '{id}'")
            ),
            1,
            "the truncate's in-transaction audit row of {id}"
        );
    }
    let stats = eventually("after-commit of the truncate's deletes", || {
        let r = s.req("GET", "/api/audit/stats", None, None);
        (r.json["commits"] == 8).then_some(r.json)
    });
    assert!(
        stats["titles"]
            .as_str()
            .unwrap()
            .ends_with(",keep-forever,let go,Second post,let go"),
        "{stats}"
    );
}

#[test]
fn routes_read_under_the_callers_rules_and_never_shadow_native_ones() {
    let Some(s) = server_with(&["posts_api", "js-hello", "route_clash"], GRANTS) else {
        return;
    };
    let su = s.su_token();
    posts_schema(&s, &su, json!("owner = @request.auth.id"));
    let report = wait_loaded(&s, &su, &["js-hello", "posts-api"]);
    // One state per plugin: the clash is parked with its reason, the others loaded.
    assert_eq!(report["plugins"].as_array().unwrap().len(), 3, "{report}");
    let clash = entry(&report, "route_clash.wasm");
    assert_eq!(clash["state"], "parked", "{report}");
    // It depends on the SDK under another key; its export still described it.
    assert_eq!(clash["name"], "route-clash", "{report}");
    assert_eq!(clash["routes"][0]["path"], "/api/collections/posts/records");
    assert!(
        clash["error"]
            .as_str()
            .unwrap()
            .contains("would shadow the built-in /api/collections routes"),
        "{report}"
    );

    let mut users = Vec::new();
    for n in 0..2 {
        let email = format!("u{n}@example.com");
        let r = s.req(
            "POST",
            "/api/collections/users/records",
            Some(&su),
            Some(&json!({"email": email, "password": "secret12345", "passwordConfirm": "secret12345"})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
        let id = r.json["id"].as_str().unwrap().to_owned();
        let tok = s.login("users", &email, "secret12345").json["token"]
            .as_str()
            .unwrap()
            .to_owned();
        users.push((id, tok));
    }
    for (i, t) in ["alpha one", "alpha two", "beta"].iter().enumerate() {
        let owner = &users[i % 2].0;
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            Some(&su),
            Some(&json!({"title": t, "owner": owner})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    }

    // find-records under the caller's listRule: a guest sees nothing, each user their own.
    let r = s.req("GET", "/api/posts-api/search?q=alpha", None, None);
    assert_eq!(
        (r.status, r.json["count"].clone()),
        (200, json!(0)),
        "{}",
        r.json
    );
    let r = s.req(
        "GET",
        "/api/posts-api/search?q=alpha",
        Some(&users[0].1),
        None,
    );
    assert_eq!(r.json["count"], 1, "{}", r.json);
    assert_eq!(r.json["items"][0]["title"], "alpha one");
    let r = s.req("GET", "/api/posts-api/search?q=alpha", Some(&su), None);
    assert_eq!(r.json["count"], 2, "{}", r.json);
    // A placeholder value cannot change the filter's shape.
    let r = s.req(
        "GET",
        &format!("/api/posts-api/search?q={}", enc("\" || id != \"")),
        Some(&su),
        None,
    );
    assert_eq!(r.json["count"], 0, "{}", r.json);

    // require-auth is enforced by the host, with PocketBase's 401.
    let r = s.req("GET", "/api/posts-api/mine", None, None);
    assert_eq!(
        (r.status, r.json.clone()),
        (
            401,
            err(
                401,
                "The request requires valid record authorization token."
            )
        )
    );
    let r = s.req("GET", "/api/posts-api/mine", Some(&users[1].1), None);
    assert_eq!(r.status, 200);
    assert_eq!(r.json["count"], 1, "{}", r.json);
    assert_eq!(r.json["user"], users[1].0);

    // Bodies and headers both ways.
    let r = s.raw(
        "POST",
        "/api/posts-api/echo",
        None,
        Some(("application/json", br#"{"x":1}"#)),
    );
    assert_eq!(r.status, 201);
    assert_eq!(r.header("x-plugin"), Some("posts-api"));
    assert_eq!(r.json, json!({"x": 1}));

    // The JS plugin's route reads through db.find-records too.
    let r = s.req("GET", "/api/js-hello/greet/bob", Some(&su), None);
    assert_eq!(
        r.json,
        json!({"hello": "bob", "lang": "js", "posts": 3}),
        "{}",
        r.json
    );

    // Native routes stay native; unknown paths keep PocketBase's answers.
    let r = s.req("GET", "/api/collections/posts/records", Some(&su), None);
    assert_eq!(r.json["totalItems"], 3);
    assert_eq!(
        s.req("GET", "/api/nothing-here", None, None).json,
        err(404, "File not found.")
    );
    assert_eq!(
        s.req("POST", "/api/nothing-here", None, None).json,
        err(404, "The requested resource wasn't found.")
    );
    // Superusers only.
    assert_eq!(s.req("GET", "/api/plugins", None, None).status, 401);
    assert_eq!(
        s.req("GET", "/api/plugins", Some(&users[0].1), None).status,
        403
    );
}

#[test]
fn cron_jobs_are_listed_and_run_on_demand_through_the_crons_api() {
    let Some(s) = server_with(&["cleanup", "audit"], GRANTS) else {
        return;
    };
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    wait_loaded(&s, &su, &["audit", "cleanup"]);

    // The plugin's job first, then PocketBase's built-in ones.
    let r = s.req("GET", "/api/crons", Some(&su), None);
    assert_eq!(
        r.json,
        json!([{"id": "cleanup_drafts", "expression": "0 3 * * *"},
               {"id": "__pbDBOptimize__", "expression": "0 0 * * *"},
               {"id": "__pbMFACleanup__", "expression": "0 * * * *"},
               {"id": "__pbOTPCleanup__", "expression": "0 * * * *"},
               {"id": "__pbLogsCleanup__", "expression": "0 */6 * * *"}])
    );
    assert_eq!(s.req("GET", "/api/crons", None, None).status, 401);
    // A subscriber hears the job's deletes as it hears REST writes.
    let sse = crate::realtime::Sse::open(&s.addr);
    assert_eq!(
        crate::realtime::subscribe(&s, &sse, None, &["posts/*".to_owned()]),
        204
    );
    assert_eq!(
        s.req("POST", "/api/crons/nope", Some(&su), None).json,
        err(404, "Missing or invalid cron job.")
    );
    for (t, st) in [
        ("a", "draft"),
        ("b", "draft"),
        ("c", "published"),
        ("d", "draft"),
    ] {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            None,
            Some(&json!({"title": t, "status": st})),
        );
        assert_eq!(r.status, 200);
    }
    assert_eq!(
        s.req("GET", "/api/cleanup/stats", None, None).json,
        json!({"runs": 0, "lastDeleted": 0})
    );
    assert_eq!(
        s.req("POST", "/api/crons/cleanup_drafts", Some(&su), None)
            .status,
        204
    );
    let stats = eventually("the job to finish", || {
        let r = s.req("GET", "/api/cleanup/stats", None, None);
        (r.json["runs"] == 1).then_some(r.json)
    });
    assert_eq!(stats, json!({"runs": 1, "lastDeleted": 3}));
    assert_eq!(count(&s, &su, "posts", ""), 1);
    assert_eq!(count(&s, &su, "posts", "status = 'published'"), 1);
    // The job's deletes went through the record path: another plugin's hooks saw them.
    assert_eq!(count(&s, &su, "audit_log", "action = 'delete'"), 3);
    let audit = eventually("after-commit of the job's deletes", || {
        let r = s.req("GET", "/api/audit/stats", None, None);
        (r.json["commits"] == 7).then_some(r.json)
    });
    assert_eq!(audit["titles"], "a,b,c,d,a,b,d", "{audit}");
    let heard: Vec<String> = sse
        .drain(Duration::from_millis(500))
        .iter()
        .map(|(topic, e)| format!("{topic} {} {}", e["action"], e["record"]["title"]))
        .collect();
    assert_eq!(
        heard,
        [
            "posts/* \"create\" \"a\"",
            "posts/* \"create\" \"b\"",
            "posts/* \"create\" \"c\"",
            "posts/* \"create\" \"d\"",
            "posts/* \"delete\" \"a\"",
            "posts/* \"delete\" \"b\"",
            "posts/* \"delete\" \"d\"",
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
fn limits_stop_loops_memory_bombs_and_panics_and_the_sandbox_holds() {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = probe.local_addr().unwrap().port();
    drop(probe);
    let toml = r#"
[plugins.misbehave]
grants = ["db:read"]
memory_mb = 32
route_timeout_ms = 1500
hook_timeout_ms = 100
"#;
    let Some(s) = process_with(&["misbehave", "fetcher"], toml) else {
        return;
    };
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    // fetcher wants "http", which this pb.toml does not grant: refused with the reason.
    let report = wait_loaded(&s, &su, &["misbehave"]);
    let fetcher = entry(&report, "fetcher.wasm");
    assert_eq!(fetcher["state"], "refused", "{report}");
    assert!(
        fetcher["error"]
            .as_str()
            .unwrap()
            .contains("wants \"http\", which pb.toml does not grant"),
        "{report}"
    );

    let failed = err(400, "Something went wrong while processing your request.");
    // A busy loop is stopped at its budget; the server keeps answering meanwhile. (The budget
    // is long enough that the margins below hold on a loaded machine: a health check stuck
    // behind the loop would wait well over a second, one that is not waits milliseconds.)
    let addr = s.addr.clone();
    let health = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        let ok = ureq::get(format!("http://{addr}/api/health"))
            .call()
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        (ok, t.elapsed())
    });
    let t = Instant::now();
    let r = s.req("GET", "/api/misbehave/loop", None, None);
    let took = t.elapsed();
    assert_eq!(r.json, failed);
    assert!(
        took < Duration::from_millis(1500 + 1000),
        "the loop ran {took:?} against a 1500 ms budget"
    );
    let (code, waited) = health.join().unwrap();
    assert_eq!(code, 200);
    assert!(
        waited < Duration::from_millis(900),
        "health waited {waited:?} behind the loop"
    );

    // A memory bomb stops at its cap; a panic and a trap are contained.
    let before = rss_kib(s.pid());
    let last_error = || {
        let r = s.req("GET", "/api/plugins", Some(&su), None).json;
        entry(&r, "misbehave.wasm")["lastError"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert!(
        last_error().contains("stopped after its 1500 ms budget"),
        "{}",
        last_error()
    );
    for (what, why) in [
        ("alloc", "stopped at its memory cap of 32 MiB"),
        ("panic", "trapped"),
        ("trap", "trapped"),
        ("alloc", "stopped at its memory cap of 32 MiB"),
    ] {
        let r = s.req("GET", &format!("/api/misbehave/{what}"), None, None);
        assert_eq!(r.json, failed, "{what}");
        assert!(last_error().contains(why), "{what}: {}", last_error());
    }
    let after = rss_kib(s.pid());
    let report = s.req("GET", "/api/plugins", Some(&su), None).json;
    let p = entry(&report, "misbehave.wasm");
    assert!(p["failures"].as_u64().unwrap() >= 5, "{report}");
    // The same counts in the metrics, by plugin name.
    let metrics = ureq::get(format!("http://{}/api/metrics", s.addr))
        .header("Authorization", &su)
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let counted = |name: &str| -> u64 {
        let prefix = format!("{name}{{plugin=\"misbehave\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix}: {metrics}"))
            .parse()
            .unwrap()
    };
    assert!(counted("ferrobase_plugin_failures_total") >= 5, "{metrics}");
    assert!(
        counted("ferrobase_plugin_calls_total") > counted("ferrobase_plugin_failures_total"),
        "{metrics}"
    );
    assert!(
        after < before + 64 * 1024,
        "RSS grew from {before} to {after} KiB"
    );
    let r = s.req("GET", "/api/misbehave/ok", None, None);
    assert_eq!((r.status, r.json.clone()), (200, json!({"ok": true})));

    // No environment, no filesystem, a frozen clock (no "clock" grant), no network.
    let r = s.req("GET", "/api/misbehave/env", None, None);
    assert_eq!(r.json["envVars"], 0, "{}", r.json);
    assert_eq!(r.json["fsReadable"], false, "{}", r.json);
    assert_eq!(r.json["clockAfter2001"], false, "{}", r.json);
    let r = s.req(
        "GET",
        &format!(
            "/api/misbehave/fetch?url={}",
            enc(&format!("http://{}/api/health", s.addr))
        ),
        None,
        None,
    );
    assert_eq!(r.json["ok"], false, "{}", r.json);
    assert!(
        r.json["error"]
            .as_str()
            .unwrap()
            .contains("no \"http\" grant"),
        "{}",
        r.json
    );

    // Hooks: a looping or panicking before-create refuses the write, and writes nothing.
    for t in ["hook-loop", "hook-panic", "hook-alloc"] {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            None,
            Some(&json!({"title": t})),
        );
        assert_eq!(r.json, err(400, "Failed to create record."), "{t}");
    }
    assert_eq!(count(&s, &su, "posts", ""), 0);
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        None,
        Some(&json!({"title": "fine"})),
    );
    assert_eq!(r.status, 200);
    // The call context carries the request's facts.
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        None,
        Some(&json!({"title": "hook-context"})),
    );
    assert_eq!(
        r.json["note"], "POST /api/collections/posts/records 127.0.0.1",
        "{}",
        r.json
    );

    // Outbound HTTP: only with the grant, only to http_allow.
    let grant = format!(
        "{toml}\n[plugins.fetcher]\ngrants = [\"http\"]\nhttp_allow = [\"{}\"]\n",
        s.addr
    );
    std::fs::write(s.data_dir().parent().unwrap().join("pb.toml"), grant).unwrap();
    wait_loaded(&s, &su, &["fetcher", "misbehave"]);
    let r = s.req(
        "GET",
        &format!(
            "/api/fetcher/fetch?url={}",
            enc(&format!("http://{}/api/health", s.addr))
        ),
        None,
        None,
    );
    assert_eq!(
        (r.json["ok"].clone(), r.json["status"].clone()),
        (json!(true), json!(200)),
        "{}",
        r.json
    );
    let r = s.req(
        "GET",
        &format!(
            "/api/fetcher/fetch?url={}",
            enc(&format!("http://127.0.0.1:{closed_port}/"))
        ),
        None,
        None,
    );
    assert_eq!(r.json["ok"], false);
    assert!(
        r.json["error"]
            .as_str()
            .unwrap()
            .contains("not in http_allow"),
        "{}",
        r.json
    );
}

#[test]
fn bad_files_are_refused_with_a_reason_and_the_server_keeps_serving() {
    let Some(s) = server_with(&["old_abi", "bad_manifest", "cleanup", "slugger"], "") else {
        return;
    };
    let pdir = plugins_dir(&s);
    std::fs::write(pdir.join("junk.wasm"), b"this is not wasm").unwrap();
    std::fs::write(pdir.join("core.wasm"), b"\0asm\x01\0\0\0").unwrap();
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    let report = wait_loaded(&s, &su, &["slugger"]);
    let errors: Vec<(String, String, String)> = eventually("every refusal reported", || {
        let r = s.req("GET", "/api/plugins", Some(&su), None).json;
        let e: Vec<(String, String, String)> = r["plugins"]
            .as_array()?
            .iter()
            .filter(|e| e["state"] != "loaded")
            .map(|e| {
                (
                    e["file"].as_str().unwrap().to_owned(),
                    e["state"].as_str().unwrap().to_owned(),
                    e["error"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        (e.len() == 5).then_some(e)
    });
    let find = |f: &str, state: &str| {
        let (_, st, e) = errors
            .iter()
            .find(|(n, _, _)| n == f)
            .unwrap_or_else(|| panic!("{f} in {errors:?} ({report})"));
        assert_eq!(st, state, "{f}: {errors:?}");
        e.clone()
    };
    assert!(find("junk.wasm", "refused").contains("not a wasm component"));
    assert!(find("core.wasm", "refused").contains("a core wasm module, not a component"));
    assert!(find("old_abi.wasm", "refused").contains("not a ferrobase:plugin@0.1.x component"));
    assert!(
        find("bad_manifest.wasm", "parked")
            .contains("hooks unknown collection \"no_such_collection\"")
    );
    assert!(
        find("cleanup.wasm", "refused")
            .contains("wants \"db:write\", which pb.toml does not grant")
    );
    // The one good plugin works.
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        None,
        Some(&json!({"title": "Still Fine"})),
    );
    assert_eq!(r.json["slug"], "still-fine");
}

/// A copy of a component with a custom section appended: same behaviour, another version.
fn variant(src: &Path, n: u32) -> Vec<u8> {
    let mut b = std::fs::read(src).unwrap();
    let name = b"ferrobase-test";
    let payload = n.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    b.push(0); // custom section
    b.push(u8::try_from(size).unwrap());
    b.push(u8::try_from(name.len()).unwrap());
    b.extend_from_slice(name);
    b.extend_from_slice(&payload);
    b
}

#[test]
fn hot_reload_swaps_versions_under_load_without_failing_a_request() {
    let Some(s) = process_with(&["slugger"], GRANTS) else {
        return;
    };
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    wait_loaded(&s, &su, &["slugger"]);
    let target = plugins_dir(&s).join("slugger.wasm");
    let src = wasm("slugger");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut load = Vec::new();
    for w in 0..3 {
        let addr = s.addr.clone();
        let stop = std::sync::Arc::clone(&stop);
        load.push(std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .build()
                .into();
            let (mut ok, mut bad) = (0u32, Vec::new());
            let mut i = 0u32;
            // Bounded: until told to stop, and never more than 20 000 requests.
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && i < 20_000 {
                i += 1;
                let title = format!("Load {w} {i}");
                let r = agent
                    .post(format!("http://{addr}/api/collections/posts/records"))
                    .send_json(json!({"title": title}));
                match r {
                    Ok(mut r) if r.status() == 200 => {
                        let v: Value = r.body_mut().read_json().unwrap();
                        if v["slug"] == format!("load-{w}-{i}") {
                            ok += 1
                        } else {
                            bad.push(v.to_string())
                        }
                    }
                    Ok(mut r) => bad.push(format!(
                        "{} {}",
                        r.status(),
                        r.body_mut().read_to_string().unwrap_or_default()
                    )),
                    Err(e) => bad.push(e.to_string()),
                }
                let _ = agent
                    .get(format!(
                        "http://{addr}/api/collections/posts/records?perPage=5"
                    ))
                    .call();
            }
            (ok, bad)
        }));
    }
    std::thread::sleep(Duration::from_millis(300));
    let rss_start = rss_kib(s.pid());
    let swaps = 12;
    for n in 1..=swaps {
        // Write then rename, as a deploy would; the watcher debounces and swaps.
        let tmp = target.with_extension("tmp");
        std::fs::write(&tmp, variant(&src, n)).unwrap();
        std::fs::rename(&tmp, &target).unwrap();
        let want = {
            let b = variant(&src, n);
            use sha2::Digest;
            let d = sha2::Sha256::digest(&b);
            d[..8]
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>()
        };
        eventually(&format!("version {n} serving"), || {
            let r = s.req("GET", "/api/plugins", Some(&su), None);
            (r.json["plugins"][0]["hash"] == want.as_str()).then_some(())
        });
    }
    // A broken new file is logged and the old version keeps serving.
    std::fs::write(target.with_extension("tmp"), b"garbage").unwrap();
    std::fs::rename(target.with_extension("tmp"), &target).unwrap();
    let report = eventually("the broken file reported", || {
        let r = s.req("GET", "/api/plugins", Some(&su), None).json;
        (r["plugins"][0]["error"].is_string()).then_some(r)
    });
    // Still one state: loaded (the previous version), with the new file's error beside it.
    assert_eq!(report["plugins"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["plugins"][0]["name"], "slugger", "{report}");
    assert_eq!(report["plugins"][0]["state"], "loaded", "{report}");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rss_end = rss_kib(s.pid());
    let mut total = 0;
    for t in load {
        let (ok, bad) = t.join().unwrap();
        assert!(
            bad.is_empty(),
            "failed requests during reload: {:?}",
            &bad[..bad.len().min(5)]
        );
        total += ok;
    }
    assert!(total > 0);
    let history = report["history"].as_array().unwrap();
    let loads = history.iter().filter(|h| h["outcome"] == "loaded").count();
    assert!(loads >= swaps as usize, "{report}");
    // Memory stays flat: old versions are freed once their calls finish.
    assert!(
        rss_end < rss_start + 48 * 1024,
        "RSS {rss_start} -> {rss_end} KiB over {swaps} swaps"
    );
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        None,
        Some(&json!({"title": "After All"})),
    );
    assert_eq!(r.json["slug"], "after-all");

    // Removing the file unloads the plugin.
    std::fs::remove_file(&target).unwrap();
    wait_loaded(&s, &su, &[]);
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        None,
        Some(&json!({"title": "No Plugin"})),
    );
    assert_eq!(r.json["slug"], "");
}

#[test]
fn the_global_cap_queues_plugin_calls_instead_of_running_them_all_at_once() {
    let toml = r#"
max_concurrent_calls = 1
[plugins.misbehave]
route_timeout_ms = 400
"#;
    // `max_concurrent_calls` belongs to [plugins], which `server_with` opens first.
    let Some(s) = server_with(&["misbehave"], toml) else {
        return;
    };
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    wait_loaded(&s, &su, &["misbehave"]);
    let addr = s.addr.clone();
    let start = Instant::now();
    let looping = std::thread::spawn(move || {
        let _ = ureq::get(format!("http://{addr}/api/misbehave/loop")).call();
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    let r = s.req("GET", "/api/misbehave/ok", None, None);
    let ok_done = start.elapsed();
    let loop_done = looping.join().unwrap();
    assert_eq!(r.json, json!({"ok": true}));
    // The second call, sent at 100 ms, waited for the only permit until the loop was stopped
    // at its 400 ms budget.
    assert!(
        ok_done >= Duration::from_millis(390) && loop_done >= Duration::from_millis(390),
        "ok at {ok_done:?}, loop at {loop_done:?}"
    );
    // Native routes never wait for plugins.
    assert_eq!(s.req("GET", "/api/health", None, None).status, 200);
}

#[test]
fn a_batch_runs_every_hook_in_its_one_transaction_and_announces_after_its_commit() {
    let Some(s) = server_with(&["slugger", "audit"], GRANTS) else {
        return;
    };
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    wait_loaded(&s, &su, &["audit", "slugger"]);
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"batch": {"enabled": true, "maxRequests": 60}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let posts = "/api/collections/posts/records";
    let id = |i: usize| format!("post{i:011}");
    // 40 creates, then 5 updates and 5 deletes of records created earlier in the same batch.
    let mut requests: Vec<Value> = (0..40)
        .map(|i| json!({"method": "POST", "url": posts, "body": {"id": id(i), "title": format!("Batch Post {i}")}}))
        .collect();
    requests.extend((0..5).map(|i| {
        json!({"method": "PATCH", "url": format!("{posts}/{}", id(i)), "body": {"title": format!("Edited {i}")}})
    }));
    requests
        .extend((35..40).map(|i| json!({"method": "DELETE", "url": format!("{posts}/{}", id(i))})));

    // An in-transaction refusal anywhere rolls the whole batch back: no post, no audit row, no
    // after-commit event.
    let mut refused = requests.clone();
    refused[30]["body"]["title"] = json!("forbidden-in-tx");
    let r = s.req(
        "POST",
        "/api/batch",
        None,
        Some(&json!({"requests": refused})),
    );
    assert_eq!(r.status, 400, "{}", r.json);
    assert_eq!(
        r.json["data"]["requests"]["30"]["response"],
        rejection(
            "title",
            "validation_audit",
            "Refused inside the transaction.",
            "Failed to create record."
        )
    );
    // A before-hook refusal too.
    let mut rejected = requests.clone();
    rejected[20]["body"]["title"] = json!("!!!");
    let r = s.req(
        "POST",
        "/api/batch",
        None,
        Some(&json!({"requests": rejected})),
    );
    assert_eq!(r.status, 400, "{}", r.json);
    assert_eq!(
        r.json["data"]["requests"]["20"]["response"]["data"]["title"]["code"],
        "validation_slug_empty"
    );
    assert_eq!(count(&s, &su, "posts", ""), 0);
    assert_eq!(count(&s, &su, "audit_log", ""), 0);

    let r = s.req(
        "POST",
        "/api/batch",
        None,
        Some(&json!({"requests": requests})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let out = r.json.as_array().unwrap();
    assert_eq!(out.len(), 50);
    // Before-hooks patched each create and update as a single request would have been.
    assert_eq!(out[7]["body"]["slug"], "batch-post-7");
    assert_eq!(out[40]["body"]["title"], "Edited 0");
    assert_eq!(out[49], json!({"body": null, "status": 204}));
    assert_eq!(count(&s, &su, "posts", ""), 35);
    // In-transaction hooks wrote one audit row per write, committed with them.
    assert_eq!(count(&s, &su, "audit_log", ""), 50);
    // After-commit events: one per write, once, in the batch's order.
    let stats = eventually("the batch's after-commit events", || {
        let r = s.req("GET", "/api/audit/stats", None, None);
        (r.json["commits"] == 50).then_some(r.json)
    });
    let titles: Vec<String> = (0..40)
        .map(|i| format!("Batch Post {i}"))
        .chain((0..5).map(|i| format!("Edited {i}")))
        .chain((35..40).map(|i| format!("Batch Post {i}")))
        .collect();
    assert_eq!(stats["titles"], titles.join(","), "{stats}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        s.req("GET", "/api/audit/stats", None, None).json["commits"],
        50,
        "the refused batches never reached after-commit"
    );
}
