//! bench-realtime: many SSE clients of `/api/realtime` against one PocketBase-compatible server
//! on 127.0.0.1, for bench/realtime.py. Client sockets are bound to 127.0.0.2.. (`--ips` of
//! them) before they connect, so ephemeral ports do not run out; a subscription request is sent
//! from the same address as its stream (PocketBase refuses one from another address).
//!
//!   bench-realtime idle    --base URL --stages 10000,19000 [--topic posts/*] [--kind K]
//!       guests, each connected and subscribed to the topic; one JSON line per stage reached,
//!       then it waits for a line on stdin before the next stage (and before it exits).
//!       `--kind raw|keepalive|stream` holds less than that (see `Kind`).
//!   bench-realtime fanout  --base URL --users 10000 --writes 20 ...
//!       each user signed in and subscribed to `COLLECTION/*`; then writes creates, one at a
//!       time, as the superuser: the time from each create's response to its last delivery.
//!   bench-realtime sustain --base URL --users 1000 --rate 500 --seconds 10 --writers 16 ...
//!       creates at a fixed rate while the users read: delivered events/s, delivery latency,
//!       and per subscriber: every event received, each writer's creates in the order written.
//!
//! Every phase is bounded in time (`--max-seconds` for the whole run). Results are one JSON
//! object per line on stdout; progress goes to stderr.

use serde_json::{Value, json};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Semaphore, watch};

type Res<T> = Result<T, String>;

// ---------------------------------------------------------------------------------------------
// arguments

struct Args(Vec<String>);

impl Args {
    fn get(&self, name: &str) -> Option<&str> {
        let i = self.0.iter().position(|a| a == name)?;
        self.0.get(i + 1).map(String::as_str)
    }
    fn text(&self, name: &str, default: &str) -> String {
        self.get(name).unwrap_or(default).to_owned()
    }
    fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> T {
        match self.get(name) {
            None => default,
            Some(v) => v.parse().unwrap_or_else(|_| {
                eprintln!("bench-realtime: {name} {v}: not a number");
                std::process::exit(2)
            }),
        }
    }
}

fn say(msg: impl AsRef<str>) {
    eprintln!("[bench-realtime] {}", msg.as_ref());
}

fn emit(v: Value) {
    println!("{v}");
}

/// The soft open-files limit raised to the hard one (every client is a descriptor).
fn raise_fd_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain libc calls on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
            libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        }
    }
    r.rlim_cur
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1 on raw sockets: just what the two servers answer (Content-Length or chunked)

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(hay, needle)
}

#[derive(Clone)]
struct Target {
    server: SocketAddr,
    host: String,
    ips: usize,
}

impl Target {
    fn new(base: &str, ips: usize) -> Res<Target> {
        let hostport = base
            .strip_prefix("http://")
            .ok_or("--base must be http://127.0.0.1:PORT")?
            .trim_end_matches('/');
        let server: SocketAddr = hostport.parse().map_err(|e| format!("--base: {e}"))?;
        if !server.ip().is_loopback() {
            return Err("--base must be a loopback address".into());
        }
        Ok(Target {
            server,
            host: hostport.to_owned(),
            ips: ips.clamp(1, 250),
        })
    }

    /// The source address of client `i`: 127.0.0.2, 127.0.0.3, ... round robin.
    fn src(&self, i: usize) -> usize {
        i % self.ips
    }

    async fn dial(&self, src: usize) -> Res<TcpStream> {
        let ip = Ipv4Addr::new(127, 0, 0, 2 + src as u8);
        let sock = TcpSocket::new_v4().map_err(|e| format!("socket: {e}"))?;
        sock.bind(SocketAddr::new(ip.into(), 0))
            .map_err(|e| format!("bind {ip}: {e}"))?;
        let s = sock
            .connect(self.server)
            .await
            .map_err(|e| format!("connect from {ip}: {e}"))?;
        let _ = s.set_nodelay(true);
        Ok(s)
    }
}

/// A chunked-body decoder that works on whatever bytes have arrived.
#[derive(Default)]
struct Dechunk {
    left: usize,
    crlf: bool,
    done: bool,
}

impl Dechunk {
    /// Moves decoded bytes from `raw[*pos..]` to `out`, advancing `pos`.
    fn feed(&mut self, raw: &[u8], pos: &mut usize, out: &mut Vec<u8>) -> Res<()> {
        loop {
            if self.left > 0 {
                let n = self.left.min(raw.len() - *pos);
                out.extend_from_slice(&raw[*pos..*pos + n]);
                *pos += n;
                self.left -= n;
                if self.left > 0 {
                    return Ok(());
                }
                self.crlf = true;
            }
            if self.crlf {
                if raw.len() - *pos < 2 {
                    return Ok(());
                }
                *pos += 2;
                self.crlf = false;
            }
            if self.done {
                return Ok(());
            }
            let Some(i) = find(&raw[*pos..], b"\r\n") else {
                return Ok(());
            };
            let line = std::str::from_utf8(&raw[*pos..*pos + i]).map_err(|_| "chunk size")?;
            let hex = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(hex, 16).map_err(|_| format!("chunk size {hex:?}"))?;
            *pos += i + 2;
            if size == 0 {
                self.done = true;
                self.crlf = true;
            } else {
                self.left = size;
            }
        }
    }

    fn finished(&self) -> bool {
        self.done && !self.crlf
    }
}

struct Head {
    status: u16,
    length: Option<usize>,
    chunked: bool,
    close: bool,
}

/// Reads a response head; what follows it stays in `buf`.
async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> Res<Head> {
    loop {
        if let Some(p) = find(buf, b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buf[..p]).into_owned();
            buf.drain(..p + 4);
            let mut lines = text.split("\r\n");
            let status = lines
                .next()
                .and_then(|l| l.split(' ').nth(1))
                .and_then(|c| c.parse().ok())
                .ok_or_else(|| format!("bad status line in {text:?}"))?;
            let mut head = Head {
                status,
                length: None,
                chunked: false,
                close: false,
            };
            for l in lines {
                let Some((k, v)) = l.split_once(':') else {
                    continue;
                };
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
                match k.as_str() {
                    "content-length" => head.length = v.parse().ok(),
                    "transfer-encoding" => head.chunked = v.contains("chunked"),
                    "connection" => head.close = v.contains("close"),
                    _ => {}
                }
            }
            return Ok(head);
        }
        if fill(s, buf).await? == 0 {
            return Err("connection closed before a response".into());
        }
    }
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>) -> Res<usize> {
    buf.reserve(8192);
    s.read_buf(buf).await.map_err(|e| format!("read: {e}"))
}

/// A keep-alive connection for requests.
struct Http {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Http {
    /// One request; returns the status, the body and whether the connection may be reused.
    async fn call(
        &mut self,
        host: &str,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Res<(u16, Vec<u8>, bool)> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
        if let Some(t) = token {
            req.push_str(&format!("Authorization: {t}\r\n"));
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        if !body.is_empty() || method == "POST" {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(&body);
        self.s
            .write_all(req.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let head = read_head(&mut self.s, &mut self.buf).await?;
        let out = if head.chunked {
            let mut dec = Dechunk::default();
            let mut out = Vec::new();
            loop {
                let mut pos = 0;
                dec.feed(&self.buf, &mut pos, &mut out)?;
                self.buf.drain(..pos);
                if dec.finished() {
                    break;
                }
                if fill(&mut self.s, &mut self.buf).await? == 0 {
                    return Err("closed inside a chunked body".into());
                }
            }
            out
        } else {
            let n = head.length.unwrap_or(0);
            while self.buf.len() < n {
                if fill(&mut self.s, &mut self.buf).await? == 0 {
                    return Err("closed inside a body".into());
                }
            }
            self.buf.drain(..n).collect()
        };
        Ok((head.status, out, !head.close))
    }
}

/// Keep-alive connections per source address.
struct Pools {
    target: Target,
    idle: Vec<Mutex<Vec<Http>>>,
}

impl Pools {
    fn new(target: Target) -> Arc<Pools> {
        let idle = (0..target.ips).map(|_| Mutex::new(Vec::new())).collect();
        Arc::new(Pools { target, idle })
    }

    /// One request from source address `src`, on a pooled connection when there is one (tried
    /// again once on a fresh connection if the pooled one had been closed).
    async fn call(
        &self,
        src: usize,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> Res<(u16, Vec<u8>)> {
        let pooled = self.idle[src].lock().ok().and_then(|mut v| v.pop());
        let reused = pooled.is_some();
        let mut h = match pooled {
            Some(h) => h,
            None => Http {
                s: self.target.dial(src).await?,
                buf: Vec::new(),
            },
        };
        let r = match h.call(&self.target.host, method, path, token, body).await {
            Err(_) if reused => {
                h = Http {
                    s: self.target.dial(src).await?,
                    buf: Vec::new(),
                };
                h.call(&self.target.host, method, path, token, body).await
            }
            r => r,
        };
        let (status, out, keep) = r?;
        if keep && let Ok(mut v) = self.idle[src].lock() {
            v.push(h);
        }
        Ok((status, out))
    }
}

// ---------------------------------------------------------------------------------------------
// SSE

struct Sse {
    s: TcpStream,
    raw: Vec<u8>,
    text: Vec<u8>,
    start: usize,
    chunked: bool,
    dec: Dechunk,
}

struct Event {
    name: String,
    data: Vec<u8>,
}

impl Sse {
    /// Opens `GET /api/realtime` from source address `src`; returns the stream and its client id.
    async fn open(t: &Target, src: usize, token: Option<&str>) -> Res<(Sse, String)> {
        let mut s = t.dial(src).await?;
        let mut req = format!(
            "GET /api/realtime HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n",
            t.host
        );
        if let Some(tok) = token {
            req.push_str(&format!("Authorization: {tok}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut raw = Vec::with_capacity(4096);
        let head = read_head(&mut s, &mut raw).await?;
        if head.status != 200 {
            return Err(format!("GET /api/realtime: HTTP {}", head.status));
        }
        let mut sse = Sse {
            s,
            raw,
            text: Vec::with_capacity(1024),
            start: 0,
            chunked: head.chunked,
            dec: Dechunk::default(),
        };
        sse.decode()?;
        let ev = sse.next().await?.ok_or("stream closed before PB_CONNECT")?;
        if ev.name != "PB_CONNECT" {
            return Err(format!("first event {:?}, expected PB_CONNECT", ev.name));
        }
        let v: Value = serde_json::from_slice(&ev.data).map_err(|e| format!("PB_CONNECT: {e}"))?;
        let id = v["clientId"]
            .as_str()
            .ok_or("PB_CONNECT without clientId")?
            .to_owned();
        Ok((sse, id))
    }

    fn decode(&mut self) -> Res<()> {
        if self.chunked {
            let mut pos = 0;
            self.dec.feed(&self.raw, &mut pos, &mut self.text)?;
            self.raw.drain(..pos);
        } else {
            self.text.extend_from_slice(&self.raw);
            self.raw.clear();
        }
        Ok(())
    }

    /// The next event; None when the stream ended.
    async fn next(&mut self) -> Res<Option<Event>> {
        loop {
            if let Some(p) = find(&self.text[self.start..], b"\n\n") {
                let block = &self.text[self.start..self.start + p];
                let mut ev = Event {
                    name: String::new(),
                    data: Vec::new(),
                };
                for line in block.split(|b| *b == b'\n') {
                    if let Some(v) = line.strip_prefix(b"event:") {
                        ev.name = String::from_utf8_lossy(v).trim().to_owned();
                    } else if let Some(v) = line.strip_prefix(b"data:") {
                        ev.data.extend_from_slice(v);
                    }
                }
                self.start += p + 2;
                return Ok(Some(ev));
            }
            // keep the unread tail only
            self.text.drain(..self.start);
            self.start = 0;
            if self.dec.finished() {
                return Ok(None);
            }
            self.raw.reserve(8192);
            let n = self
                .s
                .read_buf(&mut self.raw)
                .await
                .map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Ok(None);
            }
            self.decode()?;
        }
    }
}

/// `POST /api/realtime {clientId, subscriptions}` from the stream's address.
async fn subscribe(
    pools: &Pools,
    src: usize,
    client: &str,
    topic: &str,
    token: Option<&str>,
) -> Res<()> {
    let body = json!({"clientId": client, "subscriptions": [topic]});
    let (st, out) = pools
        .call(src, "POST", "/api/realtime", token, Some(&body))
        .await?;
    if st != 204 {
        return Err(format!(
            "subscribe: HTTP {st} {}",
            String::from_utf8_lossy(&out)
        ));
    }
    Ok(())
}

/// The number after `"title":"PREFIX` in an event's JSON (the tools' creates number their titles).
fn title_number(data: &[u8], prefix: &[u8]) -> Option<usize> {
    let at = find(data, b"\"title\":\"")? + 9;
    let rest = data.get(at..)?.strip_prefix(prefix)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// signing in

struct User {
    token: String,
    id: String,
}

async fn sign_in(
    pools: &Pools,
    src: usize,
    collection: &str,
    identity: &str,
    password: &str,
) -> Res<User> {
    let body = json!({"identity": identity, "password": password});
    let path = format!("/api/collections/{collection}/auth-with-password");
    let (st, out) = pools.call(src, "POST", &path, None, Some(&body)).await?;
    if st != 200 {
        return Err(format!(
            "sign in {identity}: HTTP {st} {}",
            String::from_utf8_lossy(&out)
        ));
    }
    let v: Value = serde_json::from_slice(&out).map_err(|e| format!("sign in: {e}"))?;
    Ok(User {
        token: v["token"].as_str().ok_or("no token")?.to_owned(),
        id: v["record"]["id"].as_str().unwrap_or("").to_owned(),
    })
}

/// Signs in `n` users `fmt` (with `{}` = 0..n) concurrently; fails on the first error.
async fn sign_in_all(pools: &Arc<Pools>, a: &Args, n: usize) -> Res<Vec<User>> {
    let fmt = a.text("--identity", "rt{}@bench.test");
    let password = Arc::new(a.text("--password", "rtpass123456"));
    let collection = Arc::new(a.text("--auth-collection", "users"));
    let sem = Arc::new(Semaphore::new(a.num("--concurrency", 64)));
    let t = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let (pools, password, collection, sem) = (
            Arc::clone(pools),
            Arc::clone(&password),
            Arc::clone(&collection),
            Arc::clone(&sem),
        );
        let identity = fmt.replace("{}", &i.to_string());
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.map_err(|e| e.to_string())?;
            let src = pools.target.src(i);
            sign_in(&pools, src, &collection, &identity, &password).await
        }));
    }
    let mut users = Vec::with_capacity(n);
    for t in tasks {
        users.push(t.await.map_err(|e| e.to_string())??);
    }
    say(format!(
        "{n} users signed in in {:.1} s",
        t.elapsed().as_secs_f64()
    ));
    Ok(users)
}

/// Opens and subscribes one stream per user (user `i` from source address `src(i)`).
async fn connect_all(
    pools: &Arc<Pools>,
    users: &[User],
    topic: &str,
    concurrency: usize,
) -> Res<Vec<Sse>> {
    let sem = Arc::new(Semaphore::new(concurrency));
    let t = Instant::now();
    let mut tasks = Vec::with_capacity(users.len());
    for (i, u) in users.iter().enumerate() {
        let (pools, sem, token, topic) = (
            Arc::clone(pools),
            Arc::clone(&sem),
            u.token.clone(),
            topic.to_owned(),
        );
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.map_err(|e| e.to_string())?;
            let src = pools.target.src(i);
            let (sse, id) = Sse::open(&pools.target, src, Some(&token)).await?;
            subscribe(&pools, src, &id, &topic, Some(&token)).await?;
            Ok::<_, String>(sse)
        }));
    }
    let mut out = Vec::with_capacity(users.len());
    for t in tasks {
        out.push(t.await.map_err(|e| e.to_string())??);
    }
    say(format!(
        "{} streams connected and subscribed in {:.1} s",
        out.len(),
        t.elapsed().as_secs_f64()
    ));
    Ok(out)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

// ---------------------------------------------------------------------------------------------
// idle: guests held open at increasing counts

/// What each idle client holds (`--kind`), to tell apart what an idle stream costs the server:
/// a bare connection, one that has answered a request and waits for the next, a stream with no
/// subscription, a stream subscribed to the topic.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Raw,
    KeepAlive,
    Stream,
    Subscribed,
}

enum Held {
    Socket(TcpStream),
    Stream(Sse),
}

async fn idle(a: &Args, target: Target) -> Res<()> {
    let stages: Vec<usize> = a
        .text("--stages", "10000")
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().map_err(|_| format!("--stages: {s}")))
        .collect::<Res<_>>()?;
    let topic = Arc::new(a.text("--topic", "posts/*"));
    let kind = match a.text("--kind", "subscribed").as_str() {
        "raw" => Kind::Raw,
        "keepalive" => Kind::KeepAlive,
        "stream" => Kind::Stream,
        "subscribed" => Kind::Subscribed,
        other => {
            return Err(format!(
                "--kind {other}: raw, keepalive, stream or subscribed"
            ));
        }
    };
    let concurrency: usize = a.num("--concurrency", 256);
    let pools = Pools::new(target);
    let ready = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let events = Arc::new(AtomicUsize::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::default();
    let sem = Arc::new(Semaphore::new(concurrency));
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut started = 0usize;
    for stage in stages {
        let t = Instant::now();
        while started < stage {
            let i = started;
            started += 1;
            let (pools, topic, sem) = (Arc::clone(&pools), Arc::clone(&topic), Arc::clone(&sem));
            let (ready, failed, closed, events, first_error) = (
                Arc::clone(&ready),
                Arc::clone(&failed),
                Arc::clone(&closed),
                Arc::clone(&events),
                Arc::clone(&first_error),
            );
            tokio::spawn(async move {
                let permit = sem.acquire().await;
                let src = pools.target.src(i);
                let opened = async {
                    match kind {
                        Kind::Raw => {
                            let s = pools.target.dial(src).await?;
                            Ok::<_, String>(Held::Socket(s))
                        }
                        Kind::KeepAlive => {
                            let mut h = Http {
                                s: pools.target.dial(src).await?,
                                buf: Vec::new(),
                            };
                            let (st, _, _) = h
                                .call(&pools.target.host, "GET", "/api/health", None, None)
                                .await?;
                            if st != 200 {
                                return Err(format!("GET /api/health: HTTP {st}"));
                            }
                            Ok(Held::Socket(h.s))
                        }
                        Kind::Stream | Kind::Subscribed => {
                            let (sse, id) = Sse::open(&pools.target, src, None).await?;
                            if kind == Kind::Subscribed {
                                subscribe(&pools, src, &id, &topic, None).await?;
                            }
                            Ok(Held::Stream(sse))
                        }
                    }
                }
                .await;
                drop(permit);
                let held = match opened {
                    Ok(s) => s,
                    Err(e) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        if let Ok(mut f) = first_error.lock() {
                            f.get_or_insert(e);
                        }
                        return;
                    }
                };
                ready.fetch_add(1, Ordering::Relaxed);
                // Idle: nothing is written to the topic, but read whatever comes.
                match held {
                    Held::Stream(mut sse) => {
                        while let Ok(Some(_)) = sse.next().await {
                            events.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Held::Socket(mut s) => {
                        let mut buf = [0u8; 512];
                        while let Ok(n) = s.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                        }
                    }
                }
                closed.fetch_add(1, Ordering::Relaxed);
            });
        }
        let deadline = Instant::now() + Duration::from_secs(a.num("--stage-seconds", 240));
        while ready.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed) < stage
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        emit(json!({
            "stage": stage,
            "ready": ready.load(Ordering::Relaxed),
            "failed": failed.load(Ordering::Relaxed),
            "closed": closed.load(Ordering::Relaxed),
            "events": events.load(Ordering::Relaxed),
            "seconds": round3(t.elapsed().as_secs_f64()),
            "first_error": first_error.lock().ok().and_then(|f| f.clone()),
        }));
        // The driver measures, then asks for the next stage (or closes stdin).
        match stdin.next_line().await {
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    emit(json!({
        "done": true,
        "ready": ready.load(Ordering::Relaxed),
        "closed": closed.load(Ordering::Relaxed),
        "events": events.load(Ordering::Relaxed),
    }));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// fanout: one create at a time to every subscriber

struct FanShared {
    t0: Instant,
    count: Vec<AtomicUsize>,
    first_ns: Vec<AtomicU64>,
    last_ns: Vec<AtomicU64>,
    stray: AtomicUsize,
    closed: AtomicUsize,
}

async fn fanout(a: &Args, target: Target) -> Res<()> {
    let n: usize = a.num("--users", 10000);
    let writes: usize = a.num("--writes", 20);
    let collection = a.text("--collection", "rt_posts");
    let wait = Duration::from_secs(a.num("--write-timeout", 20));
    let pools = Pools::new(target);
    let su = sign_in(
        &pools,
        0,
        "_superusers",
        &a.text("--su-email", "bench@bench.test"),
        &a.text("--su-password", "benchpass123456"),
    )
    .await?;
    let users = sign_in_all(&pools, a, n).await?;
    let streams = connect_all(
        &pools,
        &users,
        &format!("{collection}/*"),
        a.num("--concurrency", 64),
    )
    .await?;
    let sh = Arc::new(FanShared {
        t0: Instant::now(),
        count: (0..writes).map(|_| AtomicUsize::new(0)).collect(),
        first_ns: (0..writes).map(|_| AtomicU64::new(u64::MAX)).collect(),
        last_ns: (0..writes).map(|_| AtomicU64::new(0)).collect(),
        stray: AtomicUsize::new(0),
        closed: AtomicUsize::new(0),
    });
    let prefix = format!("fan-{}-", std::process::id());
    for mut sse in streams {
        let (sh, prefix) = (Arc::clone(&sh), prefix.clone());
        tokio::spawn(async move {
            while let Ok(Some(ev)) = sse.next().await {
                match title_number(&ev.data, prefix.as_bytes()) {
                    Some(w) if w < sh.count.len() => {
                        let now = sh.t0.elapsed().as_nanos() as u64;
                        sh.first_ns[w].fetch_min(now, Ordering::Relaxed);
                        sh.last_ns[w].fetch_max(now, Ordering::Relaxed);
                        sh.count[w].fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        sh.stray.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            sh.closed.fetch_add(1, Ordering::Relaxed);
        });
    }
    let mut samples = Vec::new();
    let mut from_sent_samples = Vec::new();
    let mut first_samples = Vec::new();
    let mut rows = Vec::new();
    let path = format!("/api/collections/{collection}/records");
    for w in 0..writes {
        tokio::time::sleep(Duration::from_millis(a.num("--pause-ms", 300))).await;
        let body = json!({"title": format!("{prefix}{w}"), "public": true,
                          "owner": users[w % users.len()].id});
        let sent = sh.t0.elapsed();
        let (st, out) = pools
            .call(0, "POST", &path, Some(&su.token), Some(&body))
            .await?;
        let answered = sh.t0.elapsed();
        if st != 200 {
            return Err(format!(
                "create: HTTP {st} {}",
                String::from_utf8_lossy(&out)
            ));
        }
        let until = Instant::now() + wait;
        while sh.count[w].load(Ordering::Relaxed) < n && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let got = sh.count[w].load(Ordering::Relaxed);
        let last = Duration::from_nanos(sh.last_ns[w].load(Ordering::Relaxed));
        let ms = last.saturating_sub(answered).as_secs_f64() * 1e3;
        let from_sent = last.saturating_sub(sent).as_secs_f64() * 1e3;
        // The first delivery tells the server's work before its first message went out from
        // the spread of the write-out (and of the tool's reading).
        let first = Duration::from_nanos(
            sh.first_ns[w]
                .load(Ordering::Relaxed)
                .min(last.as_nanos() as u64),
        );
        let first_ms = first.as_secs_f64() * 1e3 - answered.as_secs_f64() * 1e3;
        if got == n {
            samples.push(ms);
            from_sent_samples.push(from_sent);
            first_samples.push(first_ms);
        }
        rows.push(json!({"write": w, "delivered": got, "create_ms": round3((answered - sent).as_secs_f64() * 1e3),
                         "last_after_200_ms": round3(ms), "last_after_sent_ms": round3(from_sent),
                         "first_after_200_ms": round3(first_ms)}));
        say(format!(
            "write {w}: {got}/{n} delivered, first {first_ms:.1} ms and last {ms:.1} ms after the 200"
        ));
    }
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    first_samples.sort_by(f64::total_cmp);
    from_sent_samples.sort_by(f64::total_cmp);
    emit(json!({
        "scenario": "fanout",
        "subscribers": n,
        "writes": writes,
        "complete_writes": samples.len(),
        "p50_ms": round3(percentile(&sorted, 50.0)),
        "p99_ms": round3(percentile(&sorted, 99.0)),
        "max_ms": round3(sorted.last().copied().unwrap_or(f64::NAN)),
        // From the create sent instead of its 200: a server that delivers before it answers
        // (PocketBase) shows its delivery time here.
        "first_p50_ms": round3(percentile(&first_samples, 50.0)),
        "from_sent_p50_ms": round3(percentile(&from_sent_samples, 50.0)),
        "from_sent_p99_ms": round3(percentile(&from_sent_samples, 99.0)),
        "stray_events": sh.stray.load(Ordering::Relaxed),
        "closed_streams": sh.closed.load(Ordering::Relaxed),
        "writes_detail": rows,
    }));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// sustain: creates at a fixed rate, checked per subscriber

#[derive(Default)]
struct SubReport {
    received: usize,
    out_of_order: usize,
    stray: usize,
    closed: bool,
    lat_us: Vec<u32>,
    first_ns: u64,
    last_ns: u64,
}

async fn sustain(a: &Args, target: Target) -> Res<()> {
    let n: usize = a.num("--users", 1000);
    let rate: f64 = a.num("--rate", 500.0);
    let seconds: f64 = a.num("--seconds", 10.0);
    let writers: usize = a.num("--writers", 16);
    let collection = a.text("--collection", "rt_posts");
    let total = (rate * seconds).round() as usize;
    let pools = Pools::new(target.clone());
    let su = sign_in(
        &pools,
        0,
        "_superusers",
        &a.text("--su-email", "bench@bench.test"),
        &a.text("--su-password", "benchpass123456"),
    )
    .await?;
    let users = sign_in_all(&pools, a, n).await?;
    let streams = connect_all(
        &pools,
        &users,
        &format!("{collection}/*"),
        a.num("--concurrency", 64),
    )
    .await?;
    let t0 = Instant::now();
    let sent_ns: Arc<Vec<AtomicU64>> = Arc::new((0..total).map(|_| AtomicU64::new(0)).collect());
    let prefix = format!("sus-{}-", std::process::id());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut subs = Vec::new();
    for mut sse in streams {
        let (sent_ns, prefix, mut stop) = (Arc::clone(&sent_ns), prefix.clone(), stop_rx.clone());
        subs.push(tokio::spawn(async move {
            let mut r = SubReport::default();
            let mut last_of_writer = vec![-1i64; writers];
            loop {
                let ev = tokio::select! {
                    ev = sse.next() => ev,
                    _ = stop.changed() => break,
                };
                let Ok(Some(ev)) = ev else {
                    r.closed = true;
                    break;
                };
                let now = t0.elapsed().as_nanos() as u64;
                let Some(k) = title_number(&ev.data, prefix.as_bytes()).filter(|k| *k < total)
                else {
                    r.stray += 1;
                    continue;
                };
                if r.received == 0 {
                    r.first_ns = now;
                }
                r.last_ns = now;
                r.received += 1;
                let w = k % writers;
                if (k as i64) <= last_of_writer[w] {
                    r.out_of_order += 1;
                }
                last_of_writer[w] = last_of_writer[w].max(k as i64);
                let sent = sent_ns[k].load(Ordering::Relaxed);
                let us = now.saturating_sub(sent) / 1000;
                r.lat_us.push(us.min(u32::MAX as u64) as u32);
            }
            r
        }));
    }
    // Writers: write k is due at t_start + k / rate; writer j sends k = j, j + W, ... one at a
    // time, so its creates commit in the order it sends them.
    let created = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let late_ms = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + Duration::from_millis(200);
    // A server slower than the rate is measured at the rate it manages: no create is sent after
    // this (the count of creates that succeeded is what each subscriber must receive).
    let cutoff =
        start + Duration::from_secs_f64(a.num("--write-limit-seconds", seconds * 3.0 + 10.0));
    let path = Arc::new(format!("/api/collections/{collection}/records"));
    let owner = Arc::new(users[0].id.clone());
    let token = Arc::new(su.token.clone());
    let mut ws = Vec::new();
    for j in 0..writers {
        let (pools, path, owner, token, sent_ns, prefix) = (
            Arc::clone(&pools),
            Arc::clone(&path),
            Arc::clone(&owner),
            Arc::clone(&token),
            Arc::clone(&sent_ns),
            prefix.clone(),
        );
        let (created, failed, late_ms) = (
            Arc::clone(&created),
            Arc::clone(&failed),
            Arc::clone(&late_ms),
        );
        ws.push(tokio::spawn(async move {
            let mut k = j;
            while k < total {
                let due = start + Duration::from_secs_f64(k as f64 / rate);
                let now = Instant::now();
                if now >= cutoff {
                    break;
                }
                if due > now {
                    tokio::time::sleep_until(due.into()).await;
                } else {
                    late_ms.fetch_max((now - due).as_millis() as u64, Ordering::Relaxed);
                }
                let body =
                    json!({"title": format!("{prefix}{k}"), "public": true, "owner": *owner});
                sent_ns[k].store(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
                match pools
                    .call(
                        j % pools.target.ips,
                        "POST",
                        &path,
                        Some(&token),
                        Some(&body),
                    )
                    .await
                {
                    Ok((200, _)) => {
                        created.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                k += writers;
            }
        }));
    }
    for w in ws {
        let _ = w.await;
    }
    let write_end = Instant::now();
    let write_secs = (write_end - start).as_secs_f64();
    let created_n = created.load(Ordering::Relaxed);
    say(format!(
        "{created_n} creates in {write_secs:.1} s ({:.0}/s), {} failed",
        created_n as f64 / write_secs,
        failed.load(Ordering::Relaxed)
    ));
    // Let deliveries drain (bounded), then stop the readers.
    tokio::time::sleep(Duration::from_secs(a.num("--drain-seconds", 10))).await;
    let _ = stop_tx.send(true);
    let mut reports = Vec::new();
    for s in subs {
        reports.push(s.await.map_err(|e| e.to_string())?);
    }
    let kept_up: Vec<&SubReport> = reports.iter().filter(|r| !r.closed).collect();
    let received: usize = reports.iter().map(|r| r.received).sum();
    let lost: usize = kept_up
        .iter()
        .map(|r| created_n.saturating_sub(r.received))
        .sum();
    let subs_with_loss = kept_up.iter().filter(|r| r.received < created_n).count();
    let reordered: usize = reports.iter().map(|r| r.out_of_order).sum();
    let first = reports
        .iter()
        .filter(|r| r.received > 0)
        .map(|r| r.first_ns)
        .min()
        .unwrap_or(0);
    let last = reports.iter().map(|r| r.last_ns).max().unwrap_or(0);
    let mut lat: Vec<u32> = reports
        .iter()
        .flat_map(|r| r.lat_us.iter().copied())
        .collect();
    lat.sort_unstable();
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * lat.len() as f64).ceil() as usize;
        lat[rank.clamp(1, lat.len()) - 1] as f64 / 1000.0
    };
    let span = (last.saturating_sub(first)) as f64 / 1e9;
    emit(json!({
        "scenario": "sustain",
        "subscribers": n,
        "rate_target": rate,
        "seconds_target": seconds,
        "writers": writers,
        "creates_ok": created_n,
        "creates_failed": failed.load(Ordering::Relaxed),
        "creates_per_s": round3(created_n as f64 / write_secs),
        "writers_late_max_ms": late_ms.load(Ordering::Relaxed),
        "creates_cut_off": total - created_n - failed.load(Ordering::Relaxed),
        "delivered": received,
        "delivered_expected": created_n * n,
        "delivered_per_s": round3(if span > 0.0 { received as f64 / span } else { 0.0 }),
        "delivery_span_s": round3(span),
        "lat_p50_ms": round3(pct(50.0)),
        "lat_p99_ms": round3(pct(99.0)),
        "lat_max_ms": round3(pct(100.0)),
        "closed_streams": reports.len() - kept_up.len(),
        "kept_up_subscribers": kept_up.len(),
        "lost_events_kept_up": lost,
        "subscribers_with_loss": subs_with_loss,
        "out_of_order": reordered,
        "stray_events": reports.iter().map(|r| r.stray).sum::<usize>(),
    }));
    Ok(())
}

fn main() {
    let args = Args(std::env::args().skip(1).collect());
    let Some(cmd) = args.0.first().cloned() else {
        eprintln!("usage: bench-realtime idle|fanout|sustain --base http://127.0.0.1:PORT ...");
        std::process::exit(2);
    };
    let fds = raise_fd_limit();
    let target = match Target::new(&args.text("--base", ""), args.num("--ips", 32)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("bench-realtime: {e}");
            std::process::exit(2);
        }
    };
    say(format!("{cmd}: open-files limit {fds}"));
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench-realtime: runtime: {e}");
            std::process::exit(1);
        }
    };
    let limit = Duration::from_secs(args.num("--max-seconds", 600));
    let r = rt.block_on(async {
        let run = async {
            match cmd.as_str() {
                "idle" => idle(&args, target).await,
                "fanout" => fanout(&args, target).await,
                "sustain" => sustain(&args, target).await,
                other => Err(format!("unknown command {other}")),
            }
        };
        tokio::time::timeout(limit, run)
            .await
            .unwrap_or_else(|_| Err(format!("gave up after --max-seconds {}", limit.as_secs())))
    });
    if let Err(e) = r {
        emit(json!({"error": e}));
        eprintln!("bench-realtime: {e}");
        // Dropping the runtime would wait for nothing; exit at once with every socket.
        std::process::exit(1);
    }
    std::process::exit(0);
}
