//! The dashboard's serving (`/_/`: files, headers, gzip, PocketBase's redirect and 404) and the
//! first-run link (PocketBase's installer account), each side by side with the reference where
//! PocketBase has the same behaviour.

use crate::common::{SU_EMAIL, SU_PASS, Server, ferrobase_bin, free_port, reference_bin};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An agent that shows redirects and compressed bodies as they come.
fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(20)))
        .build()
        .into()
}

struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn get(addr: &str, path: &str, gzip: bool) -> Got {
    let mut rb = agent().get(format!("http://{addr}{path}"));
    if gzip {
        rb = rb.header("Accept-Encoding", "gzip");
    }
    let mut res = rb.call().expect("request");
    let headers = res
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let mut body = Vec::new();
    res.body_mut()
        .as_reader()
        .read_to_end(&mut body)
        .expect("body");
    Got {
        status: res.status().as_u16(),
        headers,
        body,
    }
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .expect("a gzip body");
    out
}

/// The files index.html loads (`/_/assets/...`).
fn assets_of(index: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = index;
    while let Some(at) = rest.find("/_/assets/") {
        let tail = &rest[at..];
        let end = tail.find(['"', '\'']).unwrap_or(tail.len());
        found.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    found
}

#[test]
fn the_dashboard_and_its_assets_are_served_with_security_and_cache_headers() {
    let s = Server::start();
    let index = get(&s.addr, "/_/", false);
    assert_eq!(index.status, 200);
    assert_eq!(
        index.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = index.header("content-security-policy").unwrap_or("");
    assert!(csp.contains("default-src 'self'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(index.header("x-frame-options"), Some("SAMEORIGIN"));
    assert_eq!(index.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(index.header("cache-control"), Some("no-cache"));
    let html = String::from_utf8(index.body.clone()).expect("utf-8 html");
    assert!(html.to_ascii_lowercase().starts_with("<!doctype html>"));

    // Gzipped on request, the same bytes.
    let zipped = get(&s.addr, "/_/", true);
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    assert_eq!(gunzip(&zipped.body), index.body);

    let assets = assets_of(&html);
    assert!(!assets.is_empty(), "index.html loads no assets: {html}");
    for path in &assets {
        let a = get(&s.addr, path, true);
        assert_eq!(a.status, 200, "{path}");
        let ct = a.header("content-type").unwrap_or("");
        if path.ends_with(".js") {
            assert_eq!(ct, "text/javascript; charset=utf-8", "{path}");
        } else if path.ends_with(".css") {
            assert_eq!(ct, "text/css; charset=utf-8", "{path}");
        }
        assert_eq!(
            a.header("cache-control"),
            Some("max-age=1209600, stale-while-revalidate=86400"),
            "{path}"
        );
        assert!(!gunzip(&a.body).is_empty(), "{path}");
    }

    // A folder on disk instead of the built-in copy.
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("index.html"),
        "<!doctype html><p>from disk</p>",
    )
    .expect("write");
    let toml = format!(
        "[http]\ndashboard_dir = {:?}\n",
        dir.path().to_str().expect("utf-8 path")
    );
    let site = tempfile::tempdir().expect("temp dir");
    std::fs::write(site.path().join("pb.toml"), toml).expect("write pb.toml");
    let s2 = Server::start_in(site);
    let from_disk = get(&s2.addr, "/_/", true);
    assert_eq!(from_disk.status, 200);
    assert_eq!(from_disk.body, b"<!doctype html><p>from disk</p>");
    assert_eq!(get(&s2.addr, "/_/assets/none.js", false).status, 404);
}

#[test]
fn the_redirect_and_missing_files_answer_as_pocketbase_answers() {
    let Some(ref_bin) = reference_bin() else {
        return;
    };
    let reference = Server::start_bin(ref_bin.to_str().expect("utf-8 path"));
    let subject = Server::start();
    for path in ["/_", "/_/nope.js", "/_/assets/missing-1234.css", "/_/a/b/c"] {
        let want = get(&reference.addr, path, false);
        let got = get(&subject.addr, path, false);
        assert_eq!(got.status, want.status, "{path}");
        assert_eq!(got.header("location"), want.header("location"), "{path}");
        if want.status == 404 {
            let w: Value = serde_json::from_slice(&want.body).expect("reference JSON");
            let g: Value = serde_json::from_slice(&got.body).expect("ferrobase JSON");
            assert_eq!(g, w, "{path}");
        }
    }
}

/// A server process on an empty data dir, its stdout read for the first-run link.
struct Fresh {
    child: Child,
    addr: String,
    link: Option<String>,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_fresh(bin: &str, dir: &std::path::Path) -> Fresh {
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Command::new(bin)
        .current_dir(dir)
        .args(["serve", "--http", &addr, "--dir"])
        .arg(dir.join("pb_data"))
        .env_remove("FERROBASE_HTTP")
        .env_remove("FERROBASE_DIR")
        .env_remove("FERROBASE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the server");
    let out = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if let Some(at) = line.find("http://") {
                let _ = tx.send(line[at..].trim().to_owned());
            }
        }
    });
    // Healthy first: the link, when there is one, is printed before the server takes requests.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = agent()
            .get(format!("http://{addr}/api/health"))
            .call()
            .is_ok_and(|r| r.status() == 200);
        if up {
            break;
        }
        assert!(Instant::now() < deadline, "{bin} not healthy");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut link = None;
    let until = Instant::now() + Duration::from_millis(500);
    while let Ok(l) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
        if l.contains("/_/#/pbinstall/") {
            link = Some(l);
            break;
        }
    }
    Fresh { child, addr, link }
}

fn call(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let url = format!("http://{addr}{path}");
    let a = agent();
    let res = match (method, body) {
        ("GET", _) => {
            let mut rb = a.get(&url);
            if let Some(t) = token {
                rb = rb.header("Authorization", t);
            }
            rb.call()
        }
        (_, b) => {
            let mut rb = a.post(&url);
            if let Some(t) = token {
                rb = rb.header("Authorization", t);
            }
            rb.send_json(b.unwrap_or(Value::Null))
        }
    };
    let mut res = res.expect("request");
    let status = res.status().as_u16();
    let text = res.body_mut().read_to_string().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn emails(list: &Value) -> Vec<String> {
    let mut v: Vec<String> = list["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r["email"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The steps of a first run, as what each answered: the same list from both servers.
fn first_run(bin: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut steps = Vec::new();
    let fresh = serve_fresh(bin, dir.path());
    let link = fresh.link.clone().expect("a first-run link on stdout");
    let (base, token) = link
        .split_once("/_/#/pbinstall/")
        .expect("the link's shape");
    steps.push(json!({"base is the listen address": base == format!("http://{}", fresh.addr)}));
    let claims = token.split('.').nth(1).expect("a JWT");
    let claims = base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, claims)
        .expect("base64url claims");
    let claims: Value = serde_json::from_slice(&claims).expect("claims JSON");
    steps.push(
        json!({"type": claims["type"], "refreshable": claims["refreshable"],
        "lifetime": claims["exp"].as_i64().unwrap_or(0) - chrono::Utc::now().timestamp()}),
    );

    // The token is a superuser's: it lists _superusers, which hold only the installer.
    let (st, list) = call(
        &fresh.addr,
        "GET",
        "/api/collections/_superusers/records",
        Some(token),
        None,
    );
    steps.push(json!({"list": st, "emails": emails(&list)}));

    // It creates the first superuser; the installer account goes.
    let (st, _) = call(
        &fresh.addr,
        "POST",
        "/api/collections/_superusers/records",
        Some(token),
        Some(json!({"email": SU_EMAIL, "password": SU_PASS, "passwordConfirm": SU_PASS})),
    );
    steps.push(json!({"create": st}));
    let (st, auth) = call(
        &fresh.addr,
        "POST",
        "/api/collections/_superusers/auth-with-password",
        None,
        Some(json!({"identity": SU_EMAIL, "password": SU_PASS})),
    );
    steps.push(json!({"sign in": st}));
    let su = auth["token"].as_str().unwrap_or("").to_owned();
    let (st, list) = call(
        &fresh.addr,
        "GET",
        "/api/collections/_superusers/records",
        Some(&su),
        None,
    );
    steps.push(json!({"list": st, "emails": emails(&list)}));
    let (st, _) = call(
        &fresh.addr,
        "GET",
        "/api/collections/_superusers/records",
        Some(token),
        None,
    );
    steps.push(json!({"installer token after": st}));
    drop(fresh);

    // A restart with a superuser prints no link.
    let again = serve_fresh(bin, dir.path());
    steps.push(json!({"link after restart": again.link.is_some()}));
    steps
}

#[test]
fn the_first_run_link_makes_the_first_superuser_as_pocketbase_does() {
    let ours = first_run(&ferrobase_bin());
    // The lifetime is 30 minutes, less the time between start-up and the check (a minute at
    // most, even on a loaded machine).
    let lifetime = ours[1]["lifetime"].as_i64().unwrap_or(0);
    assert!((1740..=1800).contains(&lifetime), "{ours:?}");
    assert_eq!(
        ours[2]["emails"],
        json!(["__pbinstaller@example.com"]),
        "{ours:?}"
    );
    assert_eq!(ours[5]["emails"], json!([SU_EMAIL]), "{ours:?}");
    let Some(ref_bin) = reference_bin() else {
        return;
    };
    let theirs = first_run(ref_bin.to_str().expect("utf-8 path"));
    let strip = |v: &[Value]| -> Vec<Value> {
        v.iter()
            .map(|s| {
                let mut s = s.clone();
                if let Some(o) = s.as_object_mut() {
                    o.remove("lifetime");
                }
                s
            })
            .collect()
    };
    assert_eq!(strip(&ours), strip(&theirs));
}
