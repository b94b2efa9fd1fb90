//! Configuration wins over the running version, live: pb.toml is rewritten under a running
//! server and every transition of a plugin's state (loaded, parked, refused, disabled) is
//! checked through `/api/plugins` (one entry, one state) and through what its routes answer;
//! calls in flight finish, with no more than what pb.toml allows now.

use super::{entry, posts_schema, server_with};
use crate::common::{Server, enc, err};
use serde_json::{Value, json};
use std::time::Duration;

const EVERYTHING: &[&str] = &[
    "db:read",
    "db:write",
    "kv",
    "http",
    "clock",
    "db:hidden:posts.secret_note",
];

/// pb.toml with `[plugins.escape]`: these grants, `http_allow` of this server, and `extra`
/// lines.
fn write_toml(s: &Server, grants: &[&str], extra: &str) {
    let cache = super::root().join("target/plugin-test-cache");
    let toml = format!(
        "[plugins]\ncache_dir = {:?}\n[plugins.escape]\ngrants = {}\nhttp_allow = [{:?}]\n{extra}\n",
        cache.display().to_string(),
        serde_json::to_string(grants).unwrap(),
        s.addr,
    );
    std::fs::write(s.data_dir().parent().unwrap().join("pb.toml"), toml).unwrap();
}

fn report(s: &Server, su: &str) -> Value {
    s.req("GET", "/api/plugins", Some(su), None).json
}

/// Wait until escape's one entry is in `state` and `check` holds for it; returns the entry.
fn wait_state(s: &Server, su: &str, state: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = report(s, su);
        // One entry per plugin file, whatever happened.
        assert_eq!(r["plugins"].as_array().map(Vec::len), Some(1), "{r}");
        let e = entry(&r, "escape.wasm").clone();
        if e["state"] == state && check(&e) {
            return e;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for escape {state}: {r}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn reason(e: &Value) -> &str {
    e["error"].as_str().unwrap_or("")
}

/// Whether escape's route serves (its plugin is in the registry).
fn serves(s: &Server) -> bool {
    let r = s.req("GET", "/api/escape/try?call=context", None, None);
    match r.status {
        200 => true,
        404 => {
            assert_eq!(r.json, err(404, "File not found."));
            false
        }
        other => panic!("{other}: {}", r.json),
    }
}

fn escape_server() -> Option<(Server, String)> {
    let s = server_with(&["escape"], "")?;
    let su = s.su_token();
    posts_schema(&s, &su, json!(""));
    s.create_collection(
        &su,
        json!({"name": "escape_probe", "type": "base",
               "fields": [{"name": "call", "type": "text"}, {"name": "outcome", "type": "text"}]}),
    );
    write_toml(&s, EVERYTHING, "");
    wait_state(&s, &su, "loaded", |_| true);
    Some((s, su))
}

#[test]
fn every_state_transition_happens_live_and_configuration_wins() {
    let Some((s, su)) = escape_server() else {
        return;
    };
    assert!(serves(&s));

    // loaded -> disabled -> loaded
    write_toml(&s, EVERYTHING, "enabled = false");
    let e = wait_state(&s, &su, "disabled", |_| true);
    assert_eq!(
        e["grants"],
        Value::Null,
        "a disabled plugin holds nothing: {e}"
    );
    assert!(!serves(&s));
    write_toml(&s, EVERYTHING, "enabled = true");
    wait_state(&s, &su, "loaded", |_| true);
    assert!(serves(&s));

    // loaded -> refused (a grant it wants is revoked) -> loaded
    let no_http: Vec<&str> = EVERYTHING
        .iter()
        .copied()
        .filter(|g| *g != "http")
        .collect();
    write_toml(&s, &no_http, "");
    let e = wait_state(&s, &su, "refused", |_| true);
    assert!(
        reason(&e).contains("wants \"http\", which pb.toml does not grant"),
        "{e}"
    );
    assert!(!serves(&s));
    write_toml(&s, EVERYTHING, "");
    wait_state(&s, &su, "loaded", |_| true);
    assert!(serves(&s));

    // loaded -> loaded, re-instantiated under narrower settings: a shorter route budget and
    // an http_allow without this server.
    let hash = report(&s, &su)["plugins"][0]["hash"].clone();
    write_toml(&s, EVERYTHING, "route_timeout_ms = 300");
    wait_state(&s, &su, "loaded", |_| {
        let r = s.req("GET", "/api/escape/slow?ms=600", None, None);
        r.json == err(400, "Something went wrong while processing your request.")
    });
    let e = entry(&report(&s, &su), "escape.wasm").clone();
    assert_eq!(e["hash"], hash, "same code, new instances: {e}");
    assert!(
        e["lastError"]
            .as_str()
            .unwrap()
            .contains("stopped after its 300 ms budget"),
        "{e}"
    );
    let cache = super::root().join("target/plugin-test-cache");
    std::fs::write(
        s.data_dir().parent().unwrap().join("pb.toml"),
        format!(
            "[plugins]\ncache_dir = {:?}\n[plugins.escape]\ngrants = {}\nhttp_allow = []\n",
            cache.display().to_string(),
            serde_json::to_string(EVERYTHING).unwrap()
        ),
    )
    .unwrap();
    wait_state(&s, &su, "loaded", |e| e["httpAllow"] == json!([]));
    let url = format!("http://{}/api/health", s.addr);
    let r = s.req(
        "GET",
        &format!("/api/escape/try?call=http.fetch&url={}", enc(&url)),
        None,
        None,
    );
    assert_eq!(r.json["ok"], false, "{}", r.json);
    assert!(
        r.json["error"]
            .as_str()
            .unwrap()
            .contains("is not in http_allow"),
        "{}",
        r.json
    );
    write_toml(&s, EVERYTHING, "");
    wait_state(&s, &su, "loaded", |e| {
        e["httpAllow"].as_array().is_some_and(|a| a.len() == 1)
    });

    // loaded -> parked (the collection it hooks is deleted) -> disabled -> parked -> refused
    // -> parked -> loaded (the collection is back)
    let r = s.req("DELETE", "/api/collections/escape_probe", Some(&su), None);
    assert_eq!(r.status, 204, "{}", r.json);
    let e = wait_state(&s, &su, "parked", |_| true);
    assert!(
        reason(&e).contains("hooks unknown collection \"escape_probe\""),
        "{e}"
    );
    assert!(!serves(&s));
    write_toml(&s, EVERYTHING, "enabled = false");
    wait_state(&s, &su, "disabled", |_| true);
    write_toml(&s, EVERYTHING, "");
    wait_state(&s, &su, "parked", |_| true);
    write_toml(&s, &no_http, "");
    wait_state(&s, &su, "refused", |_| true);
    write_toml(&s, EVERYTHING, "");
    wait_state(&s, &su, "parked", |_| true);
    s.create_collection(
        &su,
        json!({"name": "escape_probe", "type": "base",
               "fields": [{"name": "call", "type": "text"}, {"name": "outcome", "type": "text"}]}),
    );
    wait_state(&s, &su, "loaded", |_| true);
    assert!(serves(&s));

    // refused -> disabled -> refused
    write_toml(&s, &no_http, "");
    wait_state(&s, &su, "refused", |_| true);
    write_toml(&s, &no_http, "enabled = false");
    wait_state(&s, &su, "disabled", |_| true);
    write_toml(&s, &no_http, "");
    wait_state(&s, &su, "refused", |_| true);
    assert!(!serves(&s));

    // A broken new file does not stand in for configuration: the old version serves while
    // pb.toml allows it, and stops when pb.toml refuses it.
    write_toml(&s, EVERYTHING, "");
    wait_state(&s, &su, "loaded", |_| true);
    let file = super::plugins_dir(&s).join("escape.wasm");
    let good = std::fs::read(&file).unwrap();
    std::fs::write(file.with_extension("tmp"), b"not wasm").unwrap();
    std::fs::rename(file.with_extension("tmp"), &file).unwrap();
    let e = wait_state(&s, &su, "loaded", |e| e["error"].is_string());
    assert!(reason(&e).contains("not a wasm component"), "{e}");
    assert!(serves(&s));
    write_toml(&s, EVERYTHING, "enabled = false");
    wait_state(&s, &su, "disabled", |_| true);
    assert!(!serves(&s));
    // disabled -> refused: enabled again, with the broken file still there.
    write_toml(&s, EVERYTHING, "");
    let e = wait_state(&s, &su, "refused", |_| true);
    assert!(reason(&e).contains("not a wasm component"), "{e}");
    // refused -> loaded: the good file back.
    std::fs::write(file.with_extension("tmp"), &good).unwrap();
    std::fs::rename(file.with_extension("tmp"), &file).unwrap();
    wait_state(&s, &su, "loaded", |e| e["error"].is_null());
    assert!(serves(&s));

    // Every change is in the history, with what triggered it.
    let history = report(&s, &su)["history"].as_array().unwrap().clone();
    for outcome in ["loaded", "parked", "refused", "disabled"] {
        assert!(
            history.iter().any(|h| h["outcome"] == outcome),
            "{outcome} in {history:?}"
        );
    }
}

/// The outcome of `call` among the slow route's answers.
fn outcome<'a>(all: &'a Value, call: &str) -> &'a Value {
    all.as_array()
        .and_then(|a| a.iter().find(|o| o["call"] == call))
        .unwrap_or_else(|| panic!("{call} in {all}"))
}

#[test]
fn calls_in_flight_finish_with_no_more_than_pb_toml_allows_now() {
    let Some((s, su)) = escape_server() else {
        return;
    };
    let url = format!("http://{}/api/health", s.addr);
    // Each grant revoked (and disabling) under a call that is running: the call finishes; its
    // host calls after the change need what pb.toml grants now.
    let mut cases: Vec<(Option<&str>, &str)> = EVERYTHING
        .iter()
        .filter(|g| !g.starts_with("db:hidden"))
        .map(|g| (Some(*g), ""))
        .collect();
    cases.push((None, "enabled = false"));
    for (revoked, extra) in cases {
        let grants: Vec<&str> = EVERYTHING
            .iter()
            .copied()
            .filter(|g| Some(*g) != revoked)
            .collect();
        write_toml(&s, EVERYTHING, "");
        wait_state(&s, &su, "loaded", |e| e["inFlight"] == 0);
        let addr = s.addr.clone();
        let kv = if revoked == Some("kv") { "1" } else { "0" };
        let path = format!("/api/escape/slow?ms=2500&kv={kv}&url={}", enc(&url));
        let slow = std::thread::spawn(move || {
            let agent: ureq::Agent = ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(30)))
                .build()
                .into();
            let mut r = agent.get(format!("http://{addr}{path}")).call().unwrap();
            let status = r.status().as_u16();
            (status, r.body_mut().read_json::<Value>().unwrap())
        });
        wait_state(&s, &su, "loaded", |e| e["inFlight"] == 1);
        write_toml(&s, &grants, extra);
        let state = if revoked.is_some() {
            "refused"
        } else {
            "disabled"
        };
        wait_state(&s, &su, state, |_| true);
        // It no longer serves new requests while the old call is still running.
        assert!(!serves(&s), "{revoked:?}");
        assert_eq!(entry(&report(&s, &su), "escape.wasm")["inFlight"], 1);
        let (status, all) = slow.join().unwrap();
        let what = format!("{revoked:?} {extra}");
        if revoked == Some("kv") {
            // kv has no error type: the call fails, and the last error says why.
            assert_eq!(status, 400, "{what}: {all}");
            let last = entry(&report(&s, &su), "escape.wasm")["lastError"].clone();
            assert!(
                last.as_str()
                    .unwrap()
                    .contains("refused kv.increment: plugin escape has no \"kv\" grant"),
                "{last}"
            );
            continue;
        }
        assert_eq!(status, 200, "{what}: {all}");
        let needs = |call: &str| match call {
            "db.query" | "db.find-records" | "db.collections" => Some("db:read"),
            "db.execute" => Some("db:write"),
            "http.fetch" => Some("http"),
            _ => None,
        };
        for call in [
            "db.query",
            "db.execute",
            "db.find-records",
            "db.collections",
            "http.fetch",
            "config.get",
        ] {
            let o = outcome(&all, call);
            let allowed = match (revoked, needs(call)) {
                (None, Some(_)) => false,
                (Some(r), Some(g)) => r != g,
                (_, None) => true,
            };
            assert_eq!(o["ok"], allowed, "{what}: {call}: {o}");
            if !allowed {
                assert!(
                    o["error"].as_str().unwrap().contains("grant"),
                    "{what}: {o}"
                );
            }
        }
        // The clock an instance started with stays: documented, and checked.
        let secs: u64 = outcome(&all, "clock")["out"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(secs > 978_307_200, "{what}: {all}");
    }
    write_toml(&s, EVERYTHING, "");
    wait_state(&s, &su, "loaded", |_| true);
    let r = s.req("GET", "/api/escape/try?call=clock", None, None);
    assert_ne!(r.json["out"], "0", "{}", r.json);
}
