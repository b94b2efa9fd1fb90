//! Metrics as a scraper sees them: `GET /api/metrics` for superusers only, the separate
//! `[metrics] listen` address without authentication, the text parsed by the official Prometheus
//! client's strict OpenMetrics parser (Python `prometheus_client`), and counters that move with
//! the requests, writes, cache lookups and failures made between two scrapes.

use crate::common::{Server, free_port};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The Python with `prometheus-client` (scripts/test.sh installs it into `.venv-prom`).
pub fn prom_python() -> Option<PathBuf> {
    crate::common::tool(
        "FERROBASE_PROM_PYTHON",
        ".venv-prom/bin/python",
        "Python's prometheus_client",
    )
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append([s.name, s.labels, s.value, fam.type])
print(json.dumps(out))
"#;

/// One sample: its labels (sorted) and value, by sample name.
pub type Samples = BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>;

/// `text` through the strict parser (a malformed exposition fails the test).
pub fn parse(py: &Path, text: &str) -> Samples {
    let mut child = Command::new(py)
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the OpenMetrics parser refused the text: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<(String, BTreeMap<String, String>, f64, String)> =
        serde_json::from_slice(&out.stdout).unwrap();
    let mut m = Samples::new();
    for (name, labels, value, _) in rows {
        m.entry(name).or_default().push((labels, value));
    }
    m
}

/// The value of `name` with exactly these labels among others (0 when absent).
pub fn value(s: &Samples, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.get(name)
        .into_iter()
        .flatten()
        .filter(|(l, _)| {
            labels
                .iter()
                .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, v)| v)
        .sum()
}

fn scrape(agent: &ureq::Agent, url: &str) -> (u16, String, String) {
    let mut r = agent.get(url).call().unwrap();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        r.status().as_u16(),
        ct,
        r.body_mut().read_to_string().unwrap(),
    )
}

#[test]
fn metrics_are_scraped_parsed_and_move_with_the_traffic() {
    let Some(py) = prom_python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    std::fs::write(
        dir.path().join("pb.toml"),
        format!("[metrics]\nlisten = \"{metrics_addr}\"\n"),
    )
    .unwrap();
    let s = Server::start_process_in(dir, Duration::from_secs(20));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .build()
        .into();
    let su = s.su_token();

    // Superusers only on the API; the separate listener needs nothing.
    assert_eq!(s.req("GET", "/api/metrics", None, None).status, 401);
    let user = s.req(
        "POST",
        "/api/collections/users/records",
        None,
        Some(&json!({"email": "m@example.com", "password": "12345678aA", "passwordConfirm": "12345678aA"})),
    );
    assert_eq!(user.status, 200, "{:?}", user.json);
    let user_token = s.login("users", "m@example.com", "12345678aA").json["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        s.req("GET", "/api/metrics", Some(&user_token), None).status,
        403
    );
    let (st, ct, text) = scrape(&agent, &format!("http://{metrics_addr}/metrics"));
    assert_eq!(st, 200);
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let before = parse(&py, &text);

    // Traffic: lists (the second is a cache hit), a 404 nobody routes, writes, a bad filter.
    let posts = s.create_collection(
        &su,
        json!({"name": "posts", "type": "base", "listRule": "", "viewRule": "", "createRule": "",
               "fields": [{"name": "title", "type": "text"}]}),
    );
    assert_eq!(posts["name"], "posts");
    for i in 0..5 {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            None,
            Some(&json!({"title": format!("t{i}")})),
        );
        assert_eq!(r.status, 200);
    }
    for _ in 0..3 {
        assert_eq!(
            s.req("GET", "/api/collections/posts/records", None, None)
                .status,
            200
        );
    }
    assert_eq!(s.req("GET", "/api/no/such/route", None, None).status, 404);
    assert_eq!(
        s.req(
            "GET",
            "/api/collections/posts/records?filter=(((",
            None,
            None
        )
        .status,
        400
    );
    assert_eq!(
        s.req(
            "GET",
            "/api/collections/posts/records",
            Some(&user_token),
            None
        )
        .status,
        200
    );

    let (st, _, text) = scrape(&agent, &format!("http://{}/api/metrics", s.addr));
    assert_eq!(st, 401, "the API's route wants a superuser's token");
    let mut r = agent
        .get(format!("http://{}/api/metrics", s.addr))
        .header("Authorization", &su)
        .call()
        .unwrap();
    assert_eq!(r.status(), 200, "{text}");
    let text = r.body_mut().read_to_string().unwrap();
    let after = parse(&py, &text);
    let moved = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value(&before, name, labels)
    };
    let records = "/api/collections/{collection}/records";
    assert_eq!(
        moved(
            "ferrobase_http_requests_total",
            &[("method", "GET"), ("route", records), ("status", "200")]
        ),
        4.0
    );
    assert_eq!(
        moved(
            "ferrobase_http_requests_total",
            &[("method", "POST"), ("route", records), ("status", "200")]
        ),
        5.0
    );
    assert_eq!(
        moved(
            "ferrobase_http_requests_total",
            &[("method", "GET"), ("route", records), ("status", "400")]
        ),
        1.0
    );
    assert!(
        moved(
            "ferrobase_http_requests_total",
            &[("route", "unmatched"), ("status", "404")]
        ) >= 1.0
    );
    // The histogram agrees with the counter, and its +Inf bucket holds every request.
    let labels = [("method", "GET"), ("route", records), ("status", "200")];
    assert_eq!(
        value(
            &after,
            "ferrobase_http_request_duration_seconds_count",
            &labels
        ),
        value(&after, "ferrobase_http_requests_total", &labels)
    );
    assert_eq!(
        value(
            &after,
            "ferrobase_http_request_duration_seconds_bucket",
            &[
                ("method", "GET"),
                ("route", records),
                ("status", "200"),
                ("le", "+Inf")
            ]
        ),
        value(&after, "ferrobase_http_requests_total", &labels)
    );
    assert!(
        value(
            &after,
            "ferrobase_http_request_duration_seconds_sum",
            &labels
        ) > 0.0
    );
    // Two of the guest's three identical lists came from the response cache; the user's token,
    // verified on the refused metrics request, came from the token cache on the list.
    assert!(moved("ferrobase_cache_hits_total", &[("cache", "responses")]) >= 2.0);
    assert!(moved("ferrobase_cache_misses_total", &[("cache", "responses")]) >= 1.0);
    assert!(moved("ferrobase_cache_hits_total", &[("cache", "tokens")]) >= 1.0);
    // Five record writes and a collection went through the writer's commits.
    assert!(moved("ferrobase_writer_commit_writes_count", &[]) >= 5.0);
    assert!(moved("ferrobase_writer_commit_writes_sum", &[]) >= 5.0);
    assert_eq!(value(&after, "ferrobase_writer_queue", &[]), 0.0);
    assert!(value(&after, "process_resident_memory_bytes", &[]) > 1e6);
    assert!(value(&after, "process_open_fds", &[]) > 3.0);
    for name in [
        "ferrobase_realtime_clients",
        "ferrobase_realtime_dropped_clients_total",
        "ferrobase_mail_queue",
        "ferrobase_reader_wait_seconds_count",
    ] {
        assert!(after.contains_key(name), "{name} missing: {text}");
    }
}
