//! Request logs against the reference: seeded requests of every kind (methods, found and missing
//! routes, refusals with and without validation data, escaped and badly escaped URLs, guests,
//! users and superusers, `logIP` / `logAuthId` switched between them, referers and agents) go to
//! both servers; the rows each leaves are compared (level, message, every `data` key and value
//! but the timing and the ids), then generated filters, sorts and stats over them.

use crate::common::{Server, reference_and_subject};
use crate::rng::Rng;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const USER_EMAIL: &str = "logs-user@example.com";
const USER_PASS: &str = "password123";

struct Side {
    server: Server,
    su: String,
    user: String,
    user_id: String,
    su_id: String,
}

/// One request with a chosen agent and referer; the status.
fn send(
    s: &Server,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    ua: &str,
    referer: &str,
) -> u16 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let url = format!("http://{}{path}", s.addr);
    macro_rules! headers {
        ($rb:expr) => {{
            let mut rb = $rb.header("User-Agent", ua);
            if !referer.is_empty() {
                rb = rb.header("Referer", referer);
            }
            if let Some(t) = token {
                rb = rb.header("Authorization", t);
            }
            rb
        }};
    }
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let res = match method {
        "GET" => headers!(agent.get(&url)).call(),
        "DELETE" => headers!(agent.delete(&url)).call(),
        "POST" => headers!(agent.post(&url))
            .header("Content-Type", "application/json")
            .send(bytes.as_bytes()),
        "PATCH" => headers!(agent.patch(&url))
            .header("Content-Type", "application/json")
            .send(bytes.as_bytes()),
        m => panic!("unsupported method {m}"),
    };
    res.expect("request").status().as_u16()
}

fn setup(server: Server) -> Side {
    let su = server.su_token();
    let r = server.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"logs": {"maxDays": 5, "minLevel": 0, "logIP": true, "logAuthId": false, "maxDataSize": 0}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    server.create_collection(
        &su,
        json!({"name": "notes", "type": "base", "listRule": "", "viewRule": "", "createRule": "",
            "fields": [{"name": "title", "type": "text", "required": true, "max": 5}]}),
    );
    let r = server.req(
        "POST",
        "/api/collections/users/records",
        Some(&su),
        Some(&json!({"email": USER_EMAIL, "password": USER_PASS, "passwordConfirm": USER_PASS})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    let user_id = r.json["id"].as_str().unwrap().to_owned();
    let r = server.login("users", USER_EMAIL, USER_PASS);
    let user = r.json["token"].as_str().unwrap().to_owned();
    let r = server.req(
        "POST",
        "/api/collections/_superusers/auth-refresh",
        Some(&su),
        None,
    );
    let su_id = r.json["record"]["id"].as_str().unwrap().to_owned();
    Side {
        server,
        su,
        user,
        user_id,
        su_id,
    }
}

/// One generated request: (method, path with its marker, caller, body, agent, referer).
struct Step {
    method: &'static str,
    path: String,
    caller: u8,
    body: Option<Value>,
    ua: String,
    referer: String,
    /// A settings change sent before this step (as the superuser).
    settings: Option<Value>,
}

fn steps(seed: u64, n: usize) -> Vec<Step> {
    let mut r = Rng::new(seed);
    let mut out = Vec::new();
    for i in 0..n {
        let mk = format!("mk={i}x");
        let (method, path, body): (&'static str, String, Option<Value>) = match r.below(15) {
            // The dashboard: its files are logged only when they fail.
            12 => ("GET", format!("/_/?{mk}"), None),
            13 => ("GET", format!("/_/assets/missing-file.js?{mk}"), None),
            14 => ("GET", format!("/_?{mk}"), None),
            0 => ("GET", format!("/api/health?{mk}"), None),
            1 => (
                "GET",
                format!("/api/collections/notes/records?{mk}&filter=title%3D%22a%22"),
                None,
            ),
            2 => (
                "GET",
                format!("/api/collections/notes/records?{mk}&filter=nope%3D1"),
                None,
            ),
            3 => ("GET", format!("/api/collections/nosuch/records?{mk}"), None),
            4 => (
                "POST",
                format!("/api/collections/notes/records?{mk}"),
                Some(json!({})),
            ),
            5 => (
                "POST",
                format!("/api/collections/notes/records?{mk}"),
                Some(json!({"title": "toolongtitle"})),
            ),
            6 => (
                "POST",
                format!("/api/collections/notes/records?{mk}"),
                Some(json!({"title": "ok"})),
            ),
            7 => ("GET", format!("/api/settings?{mk}"), None),
            8 => ("GET", format!("/api/health?{mk}&q=%C3%A9t%C3%A9%20x"), None),
            9 => ("GET", format!("/api/health?{mk}&bad=%zz"), None),
            10 => (
                "DELETE",
                format!("/api/collections/notes/records/missingmissing1?{mk}"),
                None,
            ),
            _ => (
                "PATCH",
                format!("/api/collections/notes/records/missingmissing1?{mk}"),
                Some(json!({"title": "x"})),
            ),
        };
        let settings = match r.below(10) {
            0 => Some(json!({"logs": {"logAuthId": r.below(2) == 0}})),
            1 => Some(json!({"logs": {"logIP": r.below(3) != 0}})),
            _ => None,
        };
        out.push(Step {
            method,
            path,
            caller: r.below(3) as u8,
            body,
            ua: ["Mozilla/5.0 (X11) test", "", "curl/8.0", "ünïcode-agent"][r.below(4)].to_owned(),
            referer: ["", "http://referer.test/page", "https://app.example/x?y=1"][r.below(3)]
                .to_owned(),
            settings,
        });
    }
    out
}

/// Every row of `side` whose message carries a marker, oldest first, normalised.
fn rows(side: &Side) -> Vec<Value> {
    let r = side.server.req(
        "GET",
        "/api/logs?perPage=500&sort=@rowid&filter=message%20~%20%22mk%3D%22",
        Some(&side.su),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| normalise(side, row))
        .collect()
}

fn normalise(side: &Side, row: &Value) -> Value {
    let mut data = row["data"].clone();
    let m = data.as_object_mut().unwrap();
    assert!(m.get("execTime").is_some_and(Value::is_number), "{row}");
    m.insert("execTime".into(), json!("<number>"));
    if let Some(id) = m.get("authId").and_then(Value::as_str) {
        let who = if id == side.user_id {
            "<user>"
        } else if id == side.su_id {
            "<superuser>"
        } else {
            "<other>"
        };
        m.insert("authId".into(), json!(who));
    }
    // A refusal's details are compared when they are validation data; PocketBase's internal
    // error strings are its own words.
    if let Some(d) = m.get("details")
        && !d.is_object()
    {
        m.insert("details".into(), json!("<internal>"));
    }
    json!({"level": row["level"], "message": row["message"], "data": data})
}

/// The markers of the rows a filter selects (sorted), or the status.
fn markers(side: &Side, filter: &str, sort: &str) -> Value {
    let path = format!(
        "/api/logs?perPage=500&filter={}&sort={}",
        crate::common::enc(&format!(
            "({filter}) && message ~ \"mk=\" && data.url !~ \"/api/logs\""
        )),
        crate::common::enc(sort)
    );
    let r = side.server.req("GET", &path, Some(&side.su), None);
    if r.status != 200 {
        return json!({"status": r.status, "body": r.json});
    }
    let re = regex::Regex::new("mk=([0-9]+)x").unwrap();
    // Compared as sets: PocketBase's rowid order of close requests is not theirs (see above).
    let mut ids: Vec<u64> = r.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| {
            re.captures(i["message"].as_str()?)
                .and_then(|c| c[1].parse().ok())
        })
        .collect();
    ids.sort_unstable();
    let stats = side.server.req(
        "GET",
        &format!(
            "/api/logs/stats?filter={}",
            crate::common::enc(&format!(
                "({filter}) && message ~ \"mk=\" && data.url !~ \"/api/logs\""
            ))
        ),
        Some(&side.su),
        None,
    );
    let total: i64 = stats.json.as_array().map_or(-1, |a| {
        a.iter().map(|b| b["total"].as_i64().unwrap_or(0)).sum()
    });
    json!({"ids": ids, "total": r.json["totalItems"], "stats": total})
}

#[test]
fn request_logs_match_the_reference() {
    let Some((reference, subject)) = reference_and_subject(false) else {
        return;
    };
    let seed = std::env::var("LOGS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let plan = steps(seed, 60);
    let sides = [setup(reference), setup(subject)];
    for side in &sides {
        for st in &plan {
            if let Some(patch) = &st.settings {
                let r = side
                    .server
                    .req("PATCH", "/api/settings", Some(&side.su), Some(patch));
                assert_eq!(r.status, 200, "{}", r.json);
            }
            let token = match st.caller {
                0 => None,
                1 => Some(side.user.as_str()),
                _ => Some(side.su.as_str()),
            };
            send(
                &side.server,
                st.method,
                &st.path,
                token,
                st.body.as_ref(),
                &st.ua,
                &st.referer,
            );
        }
    }
    // A dashboard file served (or the redirect to the dashboard) is the one step that leaves
    // no row: PocketBase logs those only when they fail.
    let quiet = |st: &Step| st.path.starts_with("/_/?") || st.path.starts_with("/_?");
    let logged = plan.iter().filter(|st| !quiet(st)).count();
    assert!(logged < plan.len(), "the plan serves a dashboard file");
    // The reference writes its logs in batches, about 3 s after the last request.
    let last_logged = plan
        .iter()
        .rposition(|st| !quiet(st))
        .expect("a logged step");
    let last = format!("mk={last_logged}x");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got: Vec<Vec<Value>> = Vec::new();
    while Instant::now() < deadline {
        got = sides.iter().map(rows).collect();
        let done = got.iter().all(|rs| {
            rs.iter()
                .any(|r| r["message"].as_str().is_some_and(|m| m.contains(&last)))
        });
        if done {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        got[0].len(),
        logged,
        "every step but a dashboard file served leaves one row on the reference"
    );
    // PocketBase hands each row to its batch from a goroutine of its own: rows of requests
    // that follow each other closely can be stored out of order. Rows are matched by marker.
    let marker = |r: &Value| -> u64 {
        let m = r["message"].as_str().unwrap_or("");
        let re = regex::Regex::new("mk=([0-9]+)x").unwrap();
        re.captures(m)
            .and_then(|c| c[1].parse().ok())
            .unwrap_or(u64::MAX)
    };
    for rs in &mut got {
        rs.sort_by_key(|r| marker(r));
    }
    for (a, b) in got[0].iter().zip(&got[1]) {
        assert_eq!(
            a,
            b,
            "row mk={}: reference (left) vs ferrobase (right)",
            marker(a)
        );
    }
    assert_eq!(got[0].len(), got[1].len());

    // Filters, sorts and stats over those rows.
    let filters = [
        "data.status = 400",
        "data.status >= 400 && data.method = \"POST\"",
        "level > 0",
        "level = 0 && data.auth = \"users\"",
        "data.auth = \"_superusers\" || data.auth = \"\"",
        "data.userAgent ~ \"curl\"",
        "data.referer != \"\"",
        "data.details.title.code != \"\" || data.details.title != \"\"",
        "data.userIP = \"127.0.0.1\"",
        "message ~ \"%zz\"",
        "message ~ \"été\"",
        "data.nosuch = 1",
        "nosuch = 1",
        "bad((",
        "created > \"2000-01-01\" && id != \"\"",
    ];
    for f in filters {
        for sort in ["@rowid", "-@rowid", "-level,@rowid"] {
            let a = markers(&sides[0], f, sort);
            let b = markers(&sides[1], f, sort);
            assert_eq!(
                a, b,
                "filter {f:?} sort {sort:?}: reference (left) vs ferrobase (right)"
            );
        }
    }
    // One row by id, and a missing one.
    for side in &sides {
        let r = side.server.req(
            "GET",
            "/api/logs?perPage=1&sort=-@rowid",
            Some(&side.su),
            None,
        );
        let row = r.json["items"][0].clone();
        let one = side.server.req(
            "GET",
            &format!("/api/logs/{}", row["id"].as_str().unwrap()),
            Some(&side.su),
            None,
        );
        assert_eq!(one.json, row);
        let missing = side
            .server
            .req("GET", "/api/logs/missingmissing1", Some(&side.su), None);
        assert_eq!(missing.status, 404);
    }
}
