//! One connection's phase (busy, reading a head, idle), the reader that notices new heads and
//! their framing headers (and percent-encodes the few target bytes hyper refuses but Go's
//! server takes), the watcher that times them out, and the registry that caps them.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::send_file::{self, SendFile};

/// Milliseconds since the first call: a clock the phase timestamps share.
fn now_ms() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = BASE.get_or_init(Instant::now);
    u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// What the head of the request being read said about its framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Plain,
    /// Both `Content-Length` and `Transfer-Encoding`.
    Conflicting,
}

const FRAMING_PLAIN: u8 = 0;
const FRAMING_CONFLICT: u8 = 1;

/// One connection's shared state: written by its reader, its requests and their bodies, read
/// by its watcher and by the registry when it looks for a connection to close.
pub(super) struct Track {
    id: u64,
    /// Requests whose response has not finished.
    busy: AtomicU32,
    /// When the connection last became idle, or when the head being read began (ms).
    since_ms: AtomicU64,
    /// Bytes of a new request arrived since the connection was last idle.
    reading_head: AtomicBool,
    /// Bumped each time the connection becomes idle, so the reader starts a fresh head scan.
    idle_gen: AtomicU32,
    framing: AtomicU8,
    /// Chosen by the registry to make room; its watcher closes it.
    evicted: AtomicBool,
    /// Wakes the watcher when the registry evicts the connection.
    wake: Notify,
    /// File regions whose placeholders hyper will write, in order.
    sends: send_file::Queue,
}

impl Track {
    /// A request's head was parsed: the connection is busy until the returned guard (moved into
    /// the response body) is dropped.
    pub(super) fn begin_request(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    pub(super) fn take_framing(&self) -> Framing {
        if self.framing.swap(FRAMING_PLAIN, Ordering::AcqRel) == FRAMING_CONFLICT {
            Framing::Conflicting
        } else {
            Framing::Plain
        }
    }

    fn is_evictable(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0 && !self.evicted.load(Ordering::Acquire)
    }

    /// Resolves (with the reason) when the connection must be closed: its head took longer than
    /// `header_read`, it sat idle longer than `idle`, or the registry chose it to make room.
    /// A busy connection is never timed.
    pub(super) async fn watch(&self, header_read: Duration, idle: Duration) -> &'static str {
        let (header_ms, idle_ms) = (ms(header_read), ms(idle));
        loop {
            if self.evicted.load(Ordering::Acquire) {
                return "closed to make room for a new connection";
            }
            let wait_ms = if self.busy.load(Ordering::Acquire) > 0 {
                // Re-checked after a while; the end of a request needs no wake-up, since it
                // only starts the idle clock.
                idle_ms
            } else {
                let since = self.since_ms.load(Ordering::Acquire);
                let head = self.reading_head.load(Ordering::Acquire);
                let limit = if head { header_ms } else { idle_ms };
                let now = now_ms();
                if now.saturating_sub(since) >= limit {
                    return if head {
                        "request headers not received within http.header_read_timeout_ms"
                    } else {
                        "idle for http.idle_timeout_ms"
                    };
                }
                let left = limit - now.saturating_sub(since);
                // Neither a head that starts while the connection is idle nor a request that
                // ends and leaves it idle is announced (a wake-up per request would cost the
                // hot path a task switch): looking again every half of the other timeout cuts
                // such a head, or such an idle spell, at most half a timeout late. (Without the
                // second half, a watcher that first looked while the connection's first head
                // was being read slept the whole header timeout, and an idle keep-alive
                // connection outlived `idle` by up to that much.)
                if head {
                    left.min(idle_ms / 2)
                } else {
                    left.min(header_ms / 2)
                }
            };
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(wait_ms.max(1))) => {}
                () = self.wake.notified() => {}
            }
        }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A request in flight; dropping it (with the response body) may make the connection idle.
pub(super) struct Busy(Arc<Track>);

impl Drop for Busy {
    fn drop(&mut self) {
        let t = &self.0;
        if t.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            t.since_ms.store(now_ms(), Ordering::Release);
            t.reading_head.store(false, Ordering::Release);
            t.idle_gen.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// A response body that keeps its request's [`Busy`] until hyper has sent it in full (or the
/// connection went away).
///
/// With a file region, the body is the region's placeholders instead of `inner` (which is
/// never polled): the region joins the connection's queue when the first is asked for, and the
/// writer sends the file where they are written.
pub(super) struct Tracked<B> {
    inner: B,
    busy: Busy,
    /// The region, and whether it joined the connection's queue yet.
    file: Option<(SendFile, bool)>,
    /// Placeholder bytes handed to hyper.
    sent: u64,
}

impl<B> Tracked<B> {
    pub(super) fn new(inner: B, busy: Busy) -> Self {
        Self {
            inner,
            busy,
            file: None,
            sent: 0,
        }
    }

    /// The body is `file`'s region (a `GET`'s body, `file` from its response's extensions).
    pub(super) fn sending(mut self, file: Option<SendFile>) -> Self {
        self.file = file.filter(|f| f.len() > 0).map(|f| (f, false));
        self
    }
}

impl<B: hyper::body::Body<Data = bytes::Bytes> + Unpin> hyper::body::Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Some((file, queued)) = &mut this.file {
            if !*queued {
                this.busy.0.sends.push(file.clone());
                *queued = true;
            }
            let left = file.len() - this.sent;
            if left == 0 {
                return Poll::Ready(None);
            }
            let chunk = send_file::placeholder(left);
            this.sent += chunk.len() as u64;
            return Poll::Ready(Some(Ok(hyper::body::Frame::data(chunk))));
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        match &self.file {
            Some((file, _)) => self.sent == file.len(),
            None => self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match &self.file {
            Some((file, _)) => hyper::body::SizeHint::with_exact(file.len() - self.sent),
            None => self.inner.size_hint(),
        }
    }
}

/// The socket as hyper reads it: the first bytes after an idle spell start the head clock, and
/// the head's lines are scanned for the two framing headers.
pub(super) struct Io {
    stream: tokio::net::TcpStream,
    track: Arc<Track>,
    /// The `idle_gen` this reader's scan belongs to.
    generation: u32,
    scan: HeadScan,
    target: TargetFix,
    /// Rewritten head bytes that did not fit the caller's buffer: handed over before the
    /// socket is read again.
    pending: Vec<u8>,
    /// Go's answer, being written in place of hyper's empty one to a head it could not parse.
    answer: Option<Answer>,
    /// Sends files where their placeholders are written.
    sender: send_file::Sender,
}

/// Go's server answers a head it cannot parse with a short text body (`400 Bad Request`, with
/// `Connection: close`); hyper's automatic answer has an empty body. PocketBase's users see
/// Go's, so that is what goes out: hyper's bytes are counted as written once Go's are.
struct Answer {
    bytes: &'static [u8],
    written: usize,
    /// The length of hyper's bytes that this answer stands for.
    theirs: usize,
}

const GO_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request";
const GO_414: &[u8] = b"HTTP/1.1 414 URI Too Long\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n414 URI Too Long";
const GO_505: &[u8] = b"HTTP/1.1 505 HTTP Version Not Supported: unsupported protocol version\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n505 HTTP Version Not Supported: unsupported protocol version";
const GO_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large";

/// Go's answer for `bytes` when they are, whole, hyper's automatic answer to a head it could
/// not parse: its status line, `connection: close`, `content-length: 0` and `date`, nothing
/// else. A response of the service always carries more headers (the security headers, a
/// content type), so it never takes this shape.
fn go_answer_for(bytes: &[u8]) -> Option<&'static [u8]> {
    let rest = bytes.strip_prefix(b"HTTP/1.1 ")?;
    let (answer, line) = [
        (GO_400, b"400 Bad Request".as_slice()),
        (GO_414, b"414 URI Too Long"),
        (GO_431, b"431 Request Header Fields Too Large"),
    ]
    .into_iter()
    .find(|(_, line)| rest.starts_with(line))?;
    let rest =
        rest[line.len()..].strip_prefix(b"\r\nconnection: close\r\ncontent-length: 0\r\ndate: ")?;
    // An HTTP date is 29 bytes ("Sat, 05 Dec 2026 22:06:23 GMT").
    (rest.len() == 29 + 4 && rest.ends_with(b" GMT\r\n\r\n")).then_some(answer)
}

impl Io {
    pub(super) fn new(stream: tokio::net::TcpStream, track: Arc<Track>) -> Self {
        Self {
            stream,
            generation: track.idle_gen.load(Ordering::Acquire),
            track,
            scan: HeadScan::default(),
            target: TargetFix::default(),
            pending: Vec::new(),
            answer: None,
            sender: send_file::Sender::default(),
        }
    }

    /// Whether hyper may be answering a head it could not parse: no request is in flight and
    /// bytes of a head have come since the connection was last idle.
    fn head_refused_maybe(&self) -> bool {
        self.track.busy.load(Ordering::Acquire) == 0
            && self.track.reading_head.load(Ordering::Acquire)
    }

    /// When `theirs` are hyper's automatic answer to a head it could not parse, Go's answer is
    /// written in their place (`poll_answer`); an unknown HTTP version, which hyper refuses like
    /// any bad head, is Go's 505.
    fn catch_answer(&mut self, theirs: &[u8]) {
        let Some(answer) = go_answer_for(theirs) else {
            return;
        };
        let bytes = if answer == GO_400 && self.scan.unsupported_version {
            GO_505
        } else {
            answer
        };
        self.answer = Some(Answer {
            bytes,
            written: 0,
            theirs: theirs.len(),
        });
    }

    /// Send up to `n` bytes of the file whose placeholder is being written.
    fn poll_send_file(&mut self, cx: &mut Context<'_>, n: usize) -> Poll<std::io::Result<usize>> {
        self.sender
            .poll_send(cx, &self.stream, &self.track.sends, n)
    }

    /// Write Go's answer in place of hyper's `theirs` bytes; ready with their count once all of
    /// Go's are out.
    fn poll_answer(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        while let Some(a) = &mut self.answer {
            if a.written == a.bytes.len() {
                let theirs = a.theirs;
                self.answer = None;
                return Poll::Ready(Ok(theirs));
            }
            match Pin::new(&mut self.stream).poll_write(cx, &a.bytes[a.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                }
                Poll::Ready(Ok(n)) => a.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(0))
    }

    fn saw(&mut self, bytes: &[u8]) {
        let generation = self.track.idle_gen.load(Ordering::Acquire);
        if generation != self.generation {
            self.generation = generation;
            self.scan = HeadScan::default();
            self.target = TargetFix::default();
        }
        if self.scan.done {
            return;
        }
        let t = &self.track;
        if !self.scan.started {
            // Bytes that arrive while a request is in flight belong to a pipelined request:
            // hyper reads them later, and they are neither timed nor scanned.
            if t.busy.load(Ordering::Acquire) > 0 {
                return;
            }
            self.scan.started = true;
            // A fresh connection is timed as a head from its first moment (see `admit`); an
            // idle one starts its head clock with these bytes.
            // (The time is stored first: a watcher that sees the head flag must not pair it
            // with the idle spell's start.)
            if !t.reading_head.load(Ordering::Acquire) {
                t.since_ms.store(now_ms(), Ordering::Release);
                t.reading_head.store(true, Ordering::Release);
            }
        }
        self.scan.feed(bytes);
        if self.scan.done && self.scan.content_length && self.scan.transfer_encoding {
            t.framing.store(FRAMING_CONFLICT, Ordering::Release);
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if !this.pending.is_empty() {
            let n = this.pending.len().min(buf.remaining());
            buf.put_slice(&this.pending[..n]);
            this.pending.drain(..n);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut this.stream).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r
            && buf.filled().len() > before
        {
            this.saw(&buf.filled()[before..]);
            // Only a head this reader scans (not a pipelined one) has its target fixed.
            if this.scan.started
                && let Some((at, fixed)) = this.target.rewrite(&buf.filled()[before..])
            {
                buf.set_filled(before + at);
                let n = fixed.len().min(buf.remaining());
                buf.put_slice(&fixed[..n]);
                this.pending.extend_from_slice(&fixed[n..]);
            }
        }
        r
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if send_file::is_placeholder(buf) {
            return this.poll_send_file(cx, buf.len());
        }
        if this.answer.is_none() && this.head_refused_maybe() {
            this.catch_answer(buf);
        }
        if this.answer.is_some() {
            return this.poll_answer(cx);
        }
        Pin::new(&mut this.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        // A file's placeholder: what comes before it goes first, then the file in its place.
        if let Some(i) = bufs.iter().position(|b| send_file::is_placeholder(b)) {
            if bufs[..i].iter().any(|b| !b.is_empty()) {
                return send_file::poll_send_before(cx, &this.stream, &bufs[..i]);
            }
            return this.poll_send_file(cx, bufs[i].len());
        }
        if this.answer.is_none() && this.head_refused_maybe() {
            // hyper's answer is one buffer: its head, and no body.
            let mut parts = bufs.iter().filter(|b| !b.is_empty());
            if let (Some(only), None) = (parts.next(), parts.next()) {
                this.catch_answer(only);
            }
        }
        if this.answer.is_some() {
            return this.poll_answer(cx);
        }
        Pin::new(&mut this.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The request line's target as Go's server reads it: raw `"`, `<`, `>`, `` ` `` and bytes from
/// 0x80 (a filter typed into curl: `?filter=views>5&&title="x"`) are taken by PocketBase, while
/// hyper answers such a head with an empty 400. They are percent-encoded on the way in; the
/// query and the path are decoded after routing, so the handlers see what PocketBase's see.
#[derive(Default)]
struct TargetFix {
    /// 0: in the method, 1: in the target, 2: past it.
    state: u8,
    method_seen: bool,
}

impl TargetFix {
    fn needs_encoding(b: u8) -> bool {
        matches!(b, b'"' | b'<' | b'>' | b'`') || b >= 0x80
    }

    /// `bytes`, the next bytes of a head, as hyper should read them: `None` when they stay as
    /// they are, else the index of the first changed byte and everything from it, rewritten.
    fn rewrite(&mut self, bytes: &[u8]) -> Option<(usize, Vec<u8>)> {
        if self.state == 2 {
            return None;
        }
        // The usual case: nothing to encode, and the request line ends in these bytes.
        if !bytes.iter().any(|&b| Self::needs_encoding(b)) {
            let start = if self.method_seen {
                Some(0)
            } else {
                bytes.iter().position(|&b| b != b'\r' && b != b'\n')
            };
            if let Some(k) = start
                && memchr::memchr(b'\n', &bytes[k..]).is_some()
            {
                self.state = 2;
                return None;
            }
        }
        let mut out: Option<(usize, Vec<u8>)> = None;
        for (i, &b) in bytes.iter().enumerate() {
            let encode = match self.state {
                0 => {
                    match b {
                        b' ' if self.method_seen => self.state = 1,
                        b'\r' | b'\n' if self.method_seen => self.state = 2,
                        b'\r' | b'\n' => {}
                        _ => self.method_seen = true,
                    }
                    false
                }
                1 if matches!(b, b' ' | b'\r' | b'\n') => {
                    self.state = 2;
                    false
                }
                1 => Self::needs_encoding(b),
                _ => false,
            };
            match (&mut out, encode) {
                (None, false) if self.state == 2 => return None,
                (None, false) => {}
                (None, true) => {
                    let mut v = Vec::with_capacity(bytes.len() - i + 16);
                    push_pct(&mut v, b);
                    out = Some((i, v));
                }
                (Some((_, v)), true) => push_pct(v, b),
                (Some((_, v)), false) if self.state == 2 => {
                    v.extend_from_slice(&bytes[i..]);
                    break;
                }
                (Some((_, v)), false) => v.push(b),
            }
        }
        out
    }
}

fn push_pct(v: &mut Vec<u8>, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    v.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
}

/// Looks at the lines of one request head, up to its blank line, for the names of the two
/// framing headers. Header names never carry whitespace before their colon (hyper refuses such
/// heads), so a line is judged by its first bytes alone.
#[derive(Default)]
struct HeadScan {
    started: bool,
    done: bool,
    /// The current line's first bytes, lowercased (enough for the longer name and its colon).
    start: [u8; 18],
    start_len: usize,
    /// Bytes of the current line other than `\r`: zero at its end means the head is over.
    line_len: usize,
    content_length: bool,
    transfer_encoding: bool,
    /// Past the request line.
    past_first: bool,
    /// The request line's last bytes (its version), right-aligned.
    version: [u8; 9],
    /// The request line names `HTTP/d.d` with a major version other than 1, which Go's
    /// server answers with 505 (hyper with 400, as for any head it cannot parse).
    unsupported_version: bool,
}

impl HeadScan {
    fn feed(&mut self, mut bytes: &[u8]) {
        while !self.done && !bytes.is_empty() {
            match memchr::memchr(b'\n', bytes) {
                Some(i) => {
                    self.part(&bytes[..i]);
                    self.end_line();
                    bytes = &bytes[i + 1..];
                }
                None => {
                    self.part(bytes);
                    return;
                }
            }
        }
    }

    fn part(&mut self, part: &[u8]) {
        let take = (self.start.len() - self.start_len).min(part.len());
        for (slot, b) in self.start[self.start_len..self.start_len + take]
            .iter_mut()
            .zip(part)
        {
            *slot = b.to_ascii_lowercase();
        }
        self.start_len += take;
        self.line_len += part.iter().filter(|&&b| b != b'\r').count();
        if !self.past_first {
            let part = part.strip_suffix(b"\r").unwrap_or(part);
            let n = part.len().min(self.version.len());
            self.version.copy_within(n.., 0);
            let keep = self.version.len() - n;
            self.version[keep..].copy_from_slice(&part[part.len() - n..]);
        }
    }

    fn end_line(&mut self) {
        if self.line_len == 0 {
            self.done = true;
            return;
        }
        if !self.past_first {
            self.past_first = true;
            let v = &self.version;
            self.unsupported_version = v.starts_with(b" HTTP/")
                && v[6].is_ascii_digit()
                && v[7] == b'.'
                && v[8].is_ascii_digit()
                && v[6] != b'1';
        }
        let start = &self.start[..self.start_len];
        if start.starts_with(b"content-length:") {
            self.content_length = true;
        } else if start.starts_with(b"transfer-encoding:") {
            self.transfer_encoding = true;
        }
        self.start_len = 0;
        self.line_len = 0;
    }
}

/// Every open connection, so the accept loop can cap them and pick one to close.
pub(super) struct Registry {
    max: usize,
    open: Mutex<HashMap<u64, Arc<Track>>>,
    next_id: AtomicU64,
    released: Notify,
    /// When the cap was last reported (ms), so the log says it once per episode, not per accept.
    last_report_ms: AtomicU64,
}

/// How often, at most, reaching the cap is logged.
const REPORT_EVERY_MS: u64 = 10_000;

impl Registry {
    pub(super) fn new(max: usize) -> Self {
        Self {
            max: max.max(1),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            released: Notify::new(),
            last_report_ms: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Track>>> {
        // A panic while holding this lock leaves the map consistent (each step is one insert
        // or remove), so a poisoned lock is still usable.
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn report(&self, what: &str, open: usize) {
        let now = now_ms();
        let last = self.last_report_ms.load(Ordering::Relaxed);
        if last == 0 || now.saturating_sub(last) >= REPORT_EVERY_MS {
            self.last_report_ms.store(now.max(1), Ordering::Relaxed);
            tracing::warn!(
                open,
                max = self.max,
                "connection cap (http.max_connections) reached: {what}"
            );
        }
    }

    /// Resolves once a new connection may be accepted: below the cap, or at it with a
    /// connection that can be closed to make room (it is then told to close).
    pub(super) async fn room(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            {
                let open = self.lock();
                if open.len() < self.max {
                    return;
                }
                let n = open.len();
                let pending = open
                    .values()
                    .filter(|t| t.evicted.load(Ordering::Acquire))
                    .count();
                // Room already being made for earlier newcomers does not count twice.
                if n - pending < self.max || Self::evict_in(&open) {
                    drop(open);
                    self.report("closing the longest-idle connections to admit new ones", n);
                    return;
                }
                drop(open);
                self.report(
                    "every connection is busy; new ones wait in the listen backlog",
                    n,
                );
            }
            released.await;
        }
    }

    /// Tell the longest-idle (or longest-reading) connection to close. False when every
    /// connection is busy.
    fn evict_in(open: &HashMap<u64, Arc<Track>>) -> bool {
        let victim = open
            .values()
            .filter(|t| t.is_evictable())
            .min_by_key(|t| (t.since_ms.load(Ordering::Acquire), t.id));
        match victim {
            Some(t) => {
                t.evicted.store(true, Ordering::Release);
                t.wake.notify_one();
                true
            }
            None => false,
        }
    }

    /// Make room after an accept error (out of descriptors).
    pub(super) fn evict_one(&self) {
        Self::evict_in(&self.lock());
    }

    pub(super) fn admit(&self) -> Arc<Track> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let t = Arc::new(Track {
            id,
            busy: AtomicU32::new(0),
            since_ms: AtomicU64::new(now_ms()),
            // A new connection is timed as a head from its first moment: a client that
            // connects and sends nothing gets the header-read timeout, not the idle one.
            reading_head: AtomicBool::new(true),
            idle_gen: AtomicU32::new(0),
            framing: AtomicU8::new(FRAMING_PLAIN),
            evicted: AtomicBool::new(false),
            wake: Notify::new(),
            sends: send_file::Queue::default(),
        });
        self.lock().insert(id, Arc::clone(&t));
        t
    }

    pub(super) fn leave_on_drop(self: &Arc<Self>, t: &Arc<Track>) -> Leave {
        Leave {
            registry: Arc::clone(self),
            id: t.id,
        }
    }

    /// Resolves when no connection is open.
    pub(super) async fn drained(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.lock().is_empty() {
                return;
            }
            released.await;
        }
    }
}

/// Removes its connection from the registry when the connection's task ends.
pub(super) struct Leave {
    registry: Arc<Registry>,
    id: u64,
}

impl Drop for Leave {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
        self.registry.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_automatic_answer_is_replaced_by_gos() {
        let date = "Sat, 05 Dec 2026 22:06:23 GMT";
        let hyper = |line: &str| {
            format!(
                "HTTP/1.1 {line}\r\nconnection: close\r\ncontent-length: 0\r\ndate: {date}\r\n\r\n"
            )
        };
        assert_eq!(
            go_answer_for(hyper("400 Bad Request").as_bytes()),
            Some(GO_400)
        );
        assert_eq!(
            go_answer_for(hyper("414 URI Too Long").as_bytes()),
            Some(GO_414)
        );
        assert_eq!(
            go_answer_for(hyper("431 Request Header Fields Too Large").as_bytes()),
            Some(GO_431)
        );
        for body in [GO_400, GO_414, GO_431, GO_505] {
            let text = std::str::from_utf8(body).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with(&format!("HTTP/1.1 {body}\r\n")), "{text}");
        }
        // Anything else goes out as it is: other statuses, more headers (every response of
        // the service has them), a body, a cut or longer date.
        for other in [
            hyper("404 Not Found"),
            hyper("400 Bad Request").replace("connection: close\r\n", ""),
            hyper("400 Bad Request").replace(
                "content-length: 0\r\n",
                "content-length: 0\r\nx-frame-options: SAMEORIGIN\r\n",
            ),
            hyper("400 Bad Request").replace("content-length: 0", "content-length: 2") + "{}",
            hyper("400 Bad Request") + "x",
            hyper("400 Bad Request").replace(" GMT", " GMT "),
            hyper("400 Bad Request")[..60].to_owned(),
            hyper("400 Bad Request").replace("HTTP/1.1", "HTTP/1.0"),
        ] {
            assert_eq!(go_answer_for(other.as_bytes()), None, "{other:?}");
        }
    }

    fn scan(chunks: &[&[u8]]) -> HeadScan {
        let mut s = HeadScan::default();
        for c in chunks {
            s.feed(c);
        }
        s
    }

    #[test]
    fn both_framing_headers_are_seen_in_any_case_and_split_anywhere() {
        let head = b"POST /x HTTP/1.1\r\nHost: a\r\ncOnTeNt-LeNgTh: 2\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n";
        for cut in 0..head.len() {
            let s = scan(&[&head[..cut], &head[cut..]]);
            assert!(
                s.done && s.content_length && s.transfer_encoding,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn an_unknown_major_version_is_seen_wherever_the_line_is_cut() {
        for (line, unknown) in [
            ("GET / HTTP/9.9", true),
            ("GET /a?b=c HTTP/2.0", true),
            ("GET / HTTP/0.9", true),
            ("GET / HTTP/1.1", false),
            ("GET / HTTP/1.5", false),
            ("GET / HTTP/10.0", false),
            ("GET / HTTP/2", false),
            ("GET /HTTP/9.9 HTTP/1.1", false),
            ("GET / XTTP/9.9", false),
            ("HTTP/9.9", false),
        ] {
            let head = format!("{line}\r\nHost: a\r\nX: HTTP/9.9\r\n\r\n");
            for cut in 0..head.len() {
                let s = scan(&[&head.as_bytes()[..cut], &head.as_bytes()[cut..]]);
                assert_eq!(s.unsupported_version, unknown, "{line:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn the_scan_stops_at_the_blank_line_and_ignores_lookalikes() {
        let s = scan(&[
            b"POST /content-length: HTTP/1.1\r\nX-Transfer-Encoding: a\r\nContent-Length: 40\r\n\r\nTransfer-Encoding: chunked\r\n",
        ]);
        assert!(s.done && s.content_length && !s.transfer_encoding);
        let s = scan(&[b"GET / HTTP/1.1\nHost: a\n\nContent-Length: 1\n"]);
        assert!(s.done && !s.content_length);
    }

    /// A head fed to a fresh `TargetFix` in the given pieces, as hyper would then read it.
    fn fixed(chunks: &[&[u8]]) -> Vec<u8> {
        let mut t = TargetFix::default();
        let mut out = Vec::new();
        for c in chunks {
            match t.rewrite(c) {
                None => out.extend_from_slice(c),
                Some((at, v)) => {
                    out.extend_from_slice(&c[..at]);
                    out.extend_from_slice(&v);
                }
            }
        }
        out
    }

    #[test]
    fn only_the_targets_refused_bytes_are_encoded_wherever_the_head_is_cut() {
        let head = "GET /api/x?filter=a<\"é\"&&b>`1` HTTP/1.1\r\nX-Q: \"<>\"\r\n\r\n".as_bytes();
        let want =
            b"GET /api/x?filter=a%3C%22%C3%A9%22&&b%3E%601%60 HTTP/1.1\r\nX-Q: \"<>\"\r\n\r\n";
        for cut in 0..head.len() {
            for cut2 in cut..head.len() {
                let got = fixed(&[&head[..cut], &head[cut..cut2], &head[cut2..]]);
                assert_eq!(got, want.to_vec(), "cuts at {cut}, {cut2}");
            }
        }
        let plain = b"GET /api/health?x=1 HTTP/1.1\r\n\r\n";
        assert_eq!(TargetFix::default().rewrite(plain), None);
        // Blank lines before the request line are skipped, as hyper skips them.
        assert_eq!(fixed(&[b"\r\nGET /<"]), b"\r\nGET /%3C".to_vec());
    }

    #[test]
    fn a_head_in_progress_is_not_done() {
        let s = scan(&[b"GET / HTTP/1.1\r\nHost: a\r\n"]);
        assert!(!s.done);
    }
}
