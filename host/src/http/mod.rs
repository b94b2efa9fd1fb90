//! Owns the accepted connections: HTTP/1 through hyper (a new connection's long-lived stream
//! request outside it, stream.rs), the header-read and idle timeouts, the connection cap, framing
//! checks and graceful shutdown. Knows nothing of routes or JSON shapes.
//! Also the TLS settings every outbound https connection shares ([`client_tls`]: S3, OAuth2
//! providers) and urlencoded text as Go's `net/url` decodes it ([`url_pairs`]).
//!
//! Why not `axum::serve`: it has no header-read timeout, no idle timeout and no connection cap,
//! so clients that send their headers a byte at a time held a descriptor each, for ever, and a
//! thousand of them made the server refuse everyone else.
//!
//! A connection is in one of three phases: busy (a request is in flight: its response has not
//! finished, SSE streams included), reading a head (bytes of a new request arrived since it was
//! last idle), or idle. Only the last two are timed, and only they may be closed to admit a new
//! connection when the cap is reached; a busy connection is never cut.

mod conn;
mod send_file;
mod stream;

pub(crate) use send_file::SendFile;

use bytes::Bytes;
use conn::{Framing, Registry, Track};
use http_body_util::{Either, Empty, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;

/// The client's address, put in every request's extensions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub SocketAddr);

/// The connection limits, resolved from pb.toml's `[http]`.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// A request's head must arrive in full within this time of its first byte.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight and no bytes of a new one is closed after this.
    pub idle_timeout: Duration,
    /// Connections open at once; at the cap the longest-idle one is closed to admit a new one.
    pub max_connections: usize,
    /// Header lines per request (more: 431).
    pub max_headers: usize,
    /// Bytes of a request's head, request line included (more: 431).
    pub max_header_bytes: usize,
    /// After the shutdown signal: how long in-flight requests may take to finish.
    pub shutdown_grace: Duration,
    /// A path whose `GET` answers with a stream that lasts (the realtime SSE route): as a fresh
    /// connection's first request it is served outside hyper (see stream.rs).
    pub stream_path: Option<&'static str>,
}

/// hyper's own header-line limit (its stack buffer's size).
const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

/// The body of PocketBase's 400 for a request it cannot parse.
const BAD_REQUEST_BODY: &str =
    r#"{"data":{},"message":"Something went wrong while processing your request.","status":400}"#;

const INTERNAL_BODY: &str =
    r#"{"data":{},"message":"Something went wrong while processing your request.","status":500}"#;

/// A response of our own (not from the routes), in PocketBase's JSON error shape.
fn json_response<B>(
    status: hyper::StatusCode,
    body: &'static str,
) -> Response<Either<B, Full<Bytes>>> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::from_static(
        body.as_bytes(),
    ))));
    *res.status_mut() = status;
    res.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    res
}

/// Descriptors kept back from the connection cap for everything else the process opens: the
/// database and its WAL (writer and readers), the kv store, plugin files and their cache, the
/// watcher, the listener and the runtime's own.
pub(crate) const RESERVED_DESCRIPTORS: u64 = 128;

/// Raise the soft open-files limit to the hard one (Go does this at start for PocketBase too)
/// and return the soft limit now in force.
pub(crate) fn raise_descriptor_limit() -> u64 {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if let (Some(cur), max) = (lim.current, lim.maximum)
        && max.is_none_or(|m| m > cur)
    {
        // An unlimited hard limit still caps at what the kernel allows; 1 << 20 is Linux's
        // default nr_open.
        lim.current = Some(max.unwrap_or(1 << 20));
        if setrlimit(Resource::Nofile, lim).is_err() {
            return cur;
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(1 << 20)
}

/// The cap when pb.toml leaves it at 0: what the descriptor limit leaves after the reserve.
pub(crate) fn auto_max_connections(descriptors: u64) -> usize {
    usize::try_from(descriptors.saturating_sub(RESERVED_DESCRIPTORS).max(16)).unwrap_or(16)
}

/// Serve `service` on `listener` until `shutdown` resolves; then stop accepting, tell every
/// connection, call `stopping` (which ends what would never end by itself), let in-flight
/// requests finish (bounded by the grace period) and return.
pub(crate) async fn serve<S, B>(
    listener: tokio::net::TcpListener,
    limits: Limits,
    service: S,
    shutdown: impl Future<Output = ()> + Send + 'static,
    stopping: impl FnOnce(),
) -> std::io::Result<()>
where
    S: Service<B>,
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let limits = Arc::new(limits);
    let registry = Arc::new(Registry::new(limits.max_connections));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut builder = hyper::server::conn::http1::Builder::new();
    if limits.max_headers != HYPER_DEFAULT_MAX_HEADERS {
        // Only when it differs: a configured count makes hyper parse headers into a heap
        // buffer instead of its stack one (its docs measure about 5%; the list bench showed 4%).
        builder.max_headers(limits.max_headers);
    }
    builder
        // Body chunks are queued and written as they are, never copied into one buffer: a
        // file's placeholders must reach the writer as themselves (see send_file.rs).
        .writev(true)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes.max(8192).max(64 << 10))
        // Timed by the connection's own watcher (see conn.rs): hyper's timer would also run
        // while a keep-alive connection waits for its next request, which is idle time.
        .header_read_timeout(None)
        // A client may close its sending side once its request is out and still wait for the
        // answer (Go's server, and so PocketBase, allows it); without this hyper drops the
        // connection, and the response in progress, at that EOF.
        .half_close(true);
    let builder = Arc::new(builder);

    tokio::pin!(shutdown);
    loop {
        // At the cap with every connection busy, wait for one to end before accepting more:
        // the kernel's backlog holds the newcomers meanwhile.
        let admitted = tokio::select! {
            () = &mut shutdown => break,
            () = registry.room() => true,
        };
        debug_assert!(admitted);
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            r = listener.accept() => r,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors (or a connection reset before accept): make room, wait a
                // moment and go on rather than spin.
                tracing::warn!(error = %e, "accept failed");
                registry.evict_one();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let track = registry.admit();
        let conn = Conn {
            peer,
            leave: registry.leave_on_drop(&track),
            track,
            limits: Arc::clone(&limits),
            builder: Arc::clone(&builder),
            service: service.clone(),
            stop: stop_rx.clone(),
        };
        tokio::spawn(first_request(stream, conn));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    stopping();
    if tokio::time::timeout(limits.shutdown_grace, registry.drained())
        .await
        .is_err()
    {
        tracing::warn!("in-flight requests did not finish within the grace period");
    }
    Ok(())
}

/// The service a connection calls: with hyper's request bodies, and with the empty body of a
/// stream request read outside hyper.
pub(crate) trait Service<B>:
    Calls<Incoming, B> + Calls<Empty<Bytes>, B> + Clone + Send + 'static
{
}

impl<S, B> Service<B> for S where
    S: Calls<Incoming, B> + Calls<Empty<Bytes>, B> + Clone + Send + 'static
{
}

/// A service of requests with body `R` and responses with body `B`.
pub(crate) trait Calls<R, B>:
    tower_service::Service<Request<R>, Response = Response<B>, Error = Infallible, Future: Send>
{
}

impl<S, R, B> Calls<R, B> for S where
    S: tower_service::Service<Request<R>, Response = Response<B>, Error = Infallible, Future: Send>
{
}

/// Call `service` with `req` from `peer`. A panic in a handler is a bug: the client still gets
/// PocketBase's 500 and the connection (and the server) carry on.
async fn call<S, R, B>(
    mut service: S,
    mut req: Request<R>,
    peer: SocketAddr,
) -> Response<Either<B, Full<Bytes>>>
where
    S: Calls<R, B>,
{
    if let Some(text) = host_refusal(&req) {
        return go_refusal(text);
    }
    req.extensions_mut().insert(Peer(peer));
    if let Some(uri) = valid_utf8_path(req.uri()) {
        *req.uri_mut() = uri;
    }
    let called = std::panic::AssertUnwindSafe(service.call(req));
    match futures_util::FutureExt::catch_unwind(called).await {
        Ok(Ok(r)) => r.map(Either::Left),
        Ok(Err(never)) => match never {},
        Err(_) => {
            tracing::error!(%peer, "a request handler panicked");
            json_response(hyper::StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_BODY)
        }
    }
}

/// What one connection's task owns, moved in from the accept loop.
struct Conn<S> {
    peer: SocketAddr,
    track: Arc<Track>,
    /// Takes the connection out of the registry when the last of its tasks ends.
    leave: conn::Leave,
    limits: Arc<Limits>,
    builder: Arc<hyper::server::conn::http1::Builder>,
    service: S,
    stop: tokio::sync::watch::Receiver<bool>,
}

/// A fresh connection: its first request is the stream path's `GET` (served by stream.rs), or
/// anything else (served by hyper). Until its first bytes decide, it is timed as a head and may
/// be closed to make room or at shutdown, as hyper's connections are.
async fn first_request<S, B>(stream: tokio::net::TcpStream, mut c: Conn<S>)
where
    S: Service<B>,
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Some(path) = c.limits.stream_path else {
        return run_connection(stream, c).await;
    };
    let decided = {
        let peeked = stream::first_request(
            &stream,
            path,
            c.limits.max_header_bytes,
            c.limits.max_headers,
        );
        let watch = c
            .track
            .watch(c.limits.header_read_timeout, c.limits.idle_timeout);
        tokio::select! {
            taken = peeked => taken,
            why = watch => {
                tracing::debug!(peer = %c.peer, reason = why, "connection closed");
                return;
            }
            _ = c.stop.changed() => return,
        }
    };
    let Some(taken) = decided else {
        // A task of its own, so that a stream's task never carries hyper's connection state.
        tokio::spawn(run_connection(stream, c));
        return;
    };
    tokio::spawn(serve_stream(stream, taken, c));
}

/// Serve one stream request outside hyper; then, if the client is still there and the server
/// is not stopping, hand the connection to hyper for its next requests.
async fn serve_stream<S, B>(mut stream: tokio::net::TcpStream, taken: stream::Taken, c: Conn<S>)
where
    S: Service<B>,
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if stream::consume_head(&mut stream, taken.head_len)
        .await
        .is_err()
    {
        return;
    }
    let busy = c.track.begin_request();
    let response = call(c.service.clone(), taken.request, c.peer).await;
    let back = stream::respond(stream, response, taken.close, c.peer).await;
    drop(busy);
    if let Some(stream) = back
        && !*c.stop.borrow()
    {
        tokio::spawn(run_connection(stream, c));
    }
}

async fn run_connection<S, B>(stream: tokio::net::TcpStream, c: Conn<S>)
where
    S: Service<B>,
    B: hyper::body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let Conn {
        peer,
        track,
        leave: _leave,
        limits,
        builder,
        service,
        mut stop,
    } = c;
    let io = hyper_util::rt::TokioIo::new(conn::Io::new(stream, Arc::clone(&track)));
    let t = Arc::clone(&track);
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let busy = t.begin_request();
        let framing = t.take_framing();
        let inner = service.clone();
        async move {
            if framing == Framing::Conflicting {
                // Content-Length and Transfer-Encoding together: the two framings may disagree
                // about where this request ends (request smuggling), so neither is trusted.
                let mut res = json_response(hyper::StatusCode::BAD_REQUEST, BAD_REQUEST_BODY);
                res.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
                return Ok::<_, Infallible>(res.map(|b| conn::Tracked::new(b, busy)));
            }
            let get = req.method() == hyper::Method::GET;
            let mut res = call(inner, req, peer).await;
            // A file's region goes out with sendfile when the kernel allows it.
            let file = res
                .extensions_mut()
                .remove::<SendFile>()
                .filter(|_| get && send_file::available());
            Ok(res.map(|b| conn::Tracked::new(b, busy).sending(file)))
        }
    });
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);
    let watch = track.watch(limits.header_read_timeout, limits.idle_timeout);
    tokio::pin!(watch);
    let mut draining = *stop.borrow();
    if draining {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
                break;
            }
            why = &mut watch => {
                // Dropping the connection closes the socket; nothing is in flight on it.
                tracing::debug!(%peer, reason = why, "connection closed");
                break;
            }
            r = stop.changed(), if !draining => {
                draining = true;
                if r.is_ok() {
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// The roots (webpki's) and protocol versions of every outbound https connection, built once.
pub(crate) fn client_tls() -> Result<Arc<rustls::ClientConfig>, String> {
    static CONFIG: std::sync::OnceLock<Result<Arc<rustls::ClientConfig>, String>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
            .map_err(|e| e.to_string())
        })
        .clone()
}

/// `a=1&b=x+y` pairs, percent-decoded as Go's `url.ParseQuery` decodes them: query strings and
/// urlencoded bodies alike, ours and the form answers of OAuth2 providers. A pair Go refuses
/// (one holding a `;`, or a `%` not followed by two hex digits) is left out, as Go leaves it out
/// of a query; [`url_pairs_checked`] also says whether there was one.
pub(crate) fn url_pairs(q: &str) -> Vec<(String, String)> {
    url_pairs_checked(q).0
}

/// [`url_pairs`], and whether a pair was refused: Go's `ParseQuery` error, which makes a form
/// body fail to load.
pub(crate) fn url_pairs_checked(q: &str) -> (Vec<(String, String)>, bool) {
    let mut refused = false;
    let pairs = q
        .split('&')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            if p.contains(';') {
                refused = true;
                return None;
            }
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            match (percent_decode(k), percent_decode(v)) {
                (Some(k), Some(v)) => Some((k, v)),
                _ => {
                    refused = true;
                    None
                }
            }
        })
        .collect();
    (pairs, refused)
}

/// `s` with `+` as a space and `%XX` escapes decoded; `None` for a `%` that is not followed by
/// two hex digits (Go's "invalid URL escape").
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |c: Option<&u8>| c.and_then(|c| (*c as char).to_digit(16));
                let (hi, lo) = (hex(b.get(i + 1))?, hex(b.get(i + 2))?);
                out.push((hi * 16 + lo) as u8);
                i += 3;
                continue;
            }
            c => out.push(c),
        }
        i += 1;
    }
    Some(lossy_utf8(&out))
}

/// Go's server refuses a request by its `Host` header before any handler sees it: more than
/// one, a value with a byte outside letters, digits and ``!$%&'()*+,-.:;=[]_~`` (surrounding
/// whitespace is not part of it), or, from HTTP/1.1 on, none at all. PocketBase therefore
/// answers them so; the text is Go's status line and body.
fn host_refusal<R>(req: &Request<R>) -> Option<&'static str> {
    let mut hosts = req.headers().get_all(hyper::header::HOST).iter();
    let Some(host) = hosts.next() else {
        return (req.version() >= hyper::Version::HTTP_11)
            .then_some("400 Bad Request: missing required Host header");
    };
    if hosts.next().is_some() {
        return Some("400 Bad Request");
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"!$%&'()*+,-.:;=[]_~".contains(&b);
    (!host.as_bytes().iter().all(|&b| allowed(b)))
        .then_some("400 Bad Request: malformed Host header")
}

/// Go's refusal `text` (`400 Bad Request[: why]`) as a response: the status, the reason phrase
/// and, as a text body, the same words; then the connection closes.
fn go_refusal<B>(text: &'static str) -> Response<Either<B, Full<Bytes>>> {
    let mut res = Response::new(Either::Right(Full::new(Bytes::from_static(
        text.as_bytes(),
    ))));
    *res.status_mut() = hyper::StatusCode::BAD_REQUEST;
    let reason = &text["400 ".len()..];
    if reason != "Bad Request" {
        res.extensions_mut()
            .insert(hyper::ext::ReasonPhrase::from_static(reason.as_bytes()));
    }
    let headers = res.headers_mut();
    headers.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    res
}

/// The request target with each percent-encoded run of bytes that is not UTF-8 re-encoded as its
/// lossy text (`%FF` -> `%EF%BF%BD`, U+FFFD), or `None` when there is nothing to change. Go keeps
/// such bytes in a path parameter and finds nothing by them (a collection named `us\xffrs` is
/// "Missing collection context."), while the router's parameters must be UTF-8 and refused the
/// whole request with a plain-text 400; as U+FFFD they name nothing either, as in PocketBase.
/// Runs that are UTF-8 (an encoded `/` included) stay exactly as they came.
fn valid_utf8_path(uri: &hyper::Uri) -> Option<hyper::Uri> {
    let path = uri.path();
    memchr::memchr(b'%', path.as_bytes())?;
    let b = path.as_bytes();
    let hex = |i: usize| -> Option<u8> {
        let h = b.get(i + 1..i + 3)?;
        u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    let mut out: Option<String> = None;
    let mut i = 0;
    while i < b.len() {
        let Some(first) = (b[i] == b'%').then(|| hex(i)).flatten() else {
            if let Some(o) = &mut out {
                o.push(char::from(b[i]));
            }
            i += 1;
            continue;
        };
        let start = i;
        let mut run = vec![first];
        i += 3;
        while let Some(v) = (b.get(i) == Some(&b'%')).then(|| hex(i)).flatten() {
            run.push(v);
            i += 3;
        }
        if std::str::from_utf8(&run).is_ok() {
            if let Some(o) = &mut out {
                o.push_str(&path[start..i]);
            }
            continue;
        }
        let o = out.get_or_insert_with(|| path[..start].to_owned());
        for byte in lossy_utf8(&run).bytes() {
            o.push_str(&format!("%{byte:02X}"));
        }
    }
    let mut fixed = out?;
    if let Some(q) = uri.query() {
        fixed.push('?');
        fixed.push_str(q);
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(fixed.parse().ok()?);
    hyper::Uri::from_parts(parts).ok()
}

/// Text as Go reads bytes that are not all UTF-8: each byte of an invalid sequence becomes one
/// U+FFFD (no charset sniffing: a leading FF FE is not UTF-16 here).
pub(crate) fn lossy_utf8(mut b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    loop {
        match std::str::from_utf8(b) {
            Ok(s) => {
                out.push_str(s);
                return out;
            }
            Err(e) => {
                let (ok, rest) = b.split_at(e.valid_up_to());
                out.push_str(std::str::from_utf8(ok).unwrap_or_default());
                out.push('\u{fffd}');
                b = rest.get(1..).unwrap_or_default();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(target: &str) -> Option<String> {
        valid_utf8_path(&target.parse().unwrap()).map(|u| u.to_string())
    }

    #[test]
    fn only_percent_encoded_runs_that_are_not_utf8_are_rewritten() {
        assert_eq!(fixed("/api/collections/posts/records?filter=%FF"), None);
        assert_eq!(fixed("/api/collections/p%C3%A9/records"), None);
        assert_eq!(fixed("/api/files/a%2Fb/c%20d"), None);
        assert_eq!(
            fixed("/api/x%zz/%"),
            None,
            "not an encoding: left to the router"
        );
        assert_eq!(
            fixed("/api/collections/us%FFrs/records?page=1"),
            Some("/api/collections/us%EF%BF%BDrs/records?page=1".into())
        );
        // A run is judged whole: an encoded `/` inside it stays encoded, each bad byte is one
        // U+FFFD, and the good runs around it are kept as they came.
        assert_eq!(
            fixed("/a%c3%a9/b%2F%FF%C3/c%41"),
            Some("/a%c3%a9/b%2F%EF%BF%BD%EF%BF%BD/c%41".into())
        );
        for target in ["/%80", "/x/%ff%fe%fd", "/%E2%82", "/%F0%9F%98%80%F0"] {
            let out = fixed(target).unwrap();
            let decoded = percent_decode(out.trim_start_matches('/')).expect("escapes");
            assert!(decoded.contains('\u{fffd}'), "{target} -> {out}");
        }
    }
}
