//! Streams served outside hyper: a fresh connection whose first request is a plain `GET` of the
//! stream path (the realtime SSE route, named by the wiring) is answered here, so that an idle
//! stream holds no HTTP/1 buffers. hyper keeps an 8 KiB read buffer and an 8 KiB write buffer
//! for a connection's whole life, two thirds of what an idle SSE client cost.
//!
//! The head is only peeked until the decision is made: anything this parser is unsure of (a
//! body, an upgrade, HTTP/1.0, a target hyper's fix-ups would rewrite, a header the `http`
//! crate refuses) goes to hyper untouched. The request then runs through the same service as
//! any other (middleware, rules, logs), and its response is written as hyper writes one. When
//! the stream ends and the client is still there, the connection goes back to hyper for its
//! next requests.

use bytes::Bytes;
use http_body_util::Empty;
use hyper::body::Body;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode, Version};
use std::io::{IoSlice, Write as _};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Waits before peeking again at a head that has begun but not fully arrived (heads nearly
/// always come in one segment). A peek does not consume what it sees, so the socket stays
/// readable and only time can tell that more arrived: past these (190 ms in all), the head is
/// left to hyper, which reads it as it comes. A client sending a byte at a time therefore costs
/// at most this many peeks, not one every few milliseconds until its header timeout.
const PEEK_AGAIN_MS: [u64; 7] = [2, 4, 8, 16, 32, 64, 64];

/// Bytes first peeked for a whole head; a larger head is peeked again up to the head limit.
const HEAD_PEEK: usize = 4096;

/// Bytes peeked to see whether a new connection's request line names the stream path.
const LINE_PEEK: usize = 40;

/// A request this module serves, and the length of its head (still unread on the socket).
#[derive(Debug)]
pub(super) struct Taken {
    pub request: Request<Empty<Bytes>>,
    pub head_len: usize,
    /// The request said `Connection: close`: so does the response, and the connection ends
    /// with it (as hyper does).
    pub close: bool,
}

/// Look at a fresh connection's first bytes: `Some` when they are a plain `GET` of `path` that
/// this module serves; `None` when hyper should serve the connection (nothing was consumed).
pub(super) async fn first_request(
    stream: &TcpStream,
    path: &'static str,
    max_header_bytes: usize,
    max_headers: usize,
) -> Option<Taken> {
    let expected = expected_line(path)?;
    let mut waits = PEEK_AGAIN_MS.iter();
    let mut again = || {
        let ms = waits.next().copied();
        async move {
            match ms {
                Some(ms) => {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    true
                }
                None => false,
            }
        }
    };
    let mut line = [0u8; LINE_PEEK];
    loop {
        let n = stream.peek(&mut line).await.ok()?;
        match line_verdict(&line[..n], &expected) {
            Line::Other => return None,
            Line::Ours => break,
            Line::TooShort if again().await => {}
            Line::TooShort => return None,
        }
    }
    let limit = max_header_bytes.clamp(LINE_PEEK, 64 << 10);
    let mut head = vec![0u8; HEAD_PEEK.min(limit)];
    loop {
        let n = stream.peek(&mut head).await.ok()?;
        match parse(&head[..n], path, max_headers) {
            Parsed::Ours(taken) => return Some(*taken),
            Parsed::Other => return None,
            Parsed::Partial if n == head.len() && n < limit => head.resize(limit, 0),
            Parsed::Partial if n == head.len() => return None,
            Parsed::Partial if again().await => {}
            Parsed::Partial => return None,
        }
    }
}

/// `GET <path>`, the start of the request lines this module takes.
fn expected_line(path: &str) -> Option<Vec<u8>> {
    let line = [b"GET ".as_slice(), path.as_bytes()].concat();
    // One byte after it tells `path` from a longer one.
    (line.len() < LINE_PEEK).then_some(line)
}

#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// Not the stream path: hyper serves it.
    Other,
    Ours,
    /// What arrived so far is a prefix of `GET <path>`.
    TooShort,
}

fn line_verdict(seen: &[u8], expected: &[u8]) -> Line {
    if seen.is_empty() {
        // The client closed before its first byte: hyper ends the connection.
        return Line::Other;
    }
    let k = seen.len().min(expected.len());
    if seen[..k] != expected[..k] {
        return Line::Other;
    }
    match seen.get(expected.len()) {
        None => Line::TooShort,
        Some(b' ' | b'?') => Line::Ours,
        Some(_) => Line::Other,
    }
}

#[derive(Debug)]
enum Parsed {
    Ours(Box<Taken>),
    Other,
    Partial,
}

/// A whole head this module serves, else why not.
fn parse(bytes: &[u8], path: &str, max_headers: usize) -> Parsed {
    let mut headers = vec![httparse::EMPTY_HEADER; max_headers.max(1)];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(bytes) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    if req.method != Some("GET") || req.version != Some(1) {
        return Parsed::Other;
    }
    let Some(target) = req.path else {
        return Parsed::Other;
    };
    let Some(rest) = target.strip_prefix(path) else {
        return Parsed::Other;
    };
    if !(rest.is_empty() || rest.starts_with('?')) {
        return Parsed::Other;
    }
    let mut map = HeaderMap::with_capacity(req.headers.len());
    let mut close = false;
    for h in req.headers.iter() {
        let Ok(name) = header::HeaderName::from_bytes(h.name.as_bytes()) else {
            return Parsed::Other;
        };
        // A body, a protocol switch or an expectation: hyper's business.
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || name == header::UPGRADE
            || name == header::EXPECT
        {
            return Parsed::Other;
        }
        let Ok(value) = HeaderValue::from_bytes(h.value) else {
            return Parsed::Other;
        };
        if name == header::CONNECTION {
            close |= h
                .value
                .split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
        map.append(name, value);
    }
    let Ok(mut request) = Request::builder()
        .method(Method::GET)
        .uri(target)
        .version(Version::HTTP_11)
        .body(Empty::new())
    else {
        return Parsed::Other;
    };
    *request.headers_mut() = map;
    Parsed::Ours(Box::new(Taken {
        request,
        head_len,
        close,
    }))
}

/// Consume the head of `taken` from the socket (it was only peeked).
pub(super) async fn consume_head(stream: &mut TcpStream, head_len: usize) -> std::io::Result<()> {
    let mut left = head_len;
    let mut buf = [0u8; 1024];
    while left > 0 {
        let n = left.min(buf.len());
        stream.read_exact(&mut buf[..n]).await?;
        left -= n;
    }
    Ok(())
}

/// Write `response` as hyper writes one (status line, the response's headers, `date`, then
/// chunked or sized framing). Returns the stream when its body ended and the client is still
/// there, for hyper to serve its next requests; `close`: the request asked for the end.
pub(super) async fn respond<B>(
    mut stream: TcpStream,
    response: Response<B>,
    close: bool,
    peer: SocketAddr,
) -> Option<TcpStream>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let (parts, mut body) = response.into_parts();
    let framing = framing(parts.status, &parts.headers, &body);
    let reason = parts
        .extensions
        .get::<hyper::ext::ReasonPhrase>()
        .map(|r| r.as_bytes());
    let head = head(parts.status, reason, &parts.headers, framing, close);
    stream.write_all(&head).await.ok()?;
    drop(head);
    if framing == Framing::None {
        return (!close).then_some(stream);
    }
    // The client's side is watched for its close while the body waits: Go's server (and so
    // PocketBase) ends a streaming handler when its client goes away. Bytes of a next request
    // stop the watch; they stay unread for hyper.
    let mut watching = true;
    let mut probe = [0u8; 1];
    loop {
        let frame = tokio::select! {
            biased;
            f = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)) => f,
            r = stream.peek(&mut probe), if watching => match r {
                Ok(0) | Err(_) => return None,
                Ok(_) => {
                    watching = false;
                    continue;
                }
            },
        };
        match frame {
            None => break,
            Some(Err(e)) => {
                tracing::debug!(error = %e, %peer, "response body failed");
                return None;
            }
            Some(Ok(frame)) => {
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if data.is_empty() {
                    continue;
                }
                let written = if framing == Framing::Chunked {
                    let mut size = [0u8; 18];
                    let used = {
                        let mut w = &mut size[..];
                        let _ = write!(w, "{:X}\r\n", data.len());
                        18 - w.len()
                    };
                    write_all(
                        &mut stream,
                        &mut [
                            IoSlice::new(&size[..used]),
                            IoSlice::new(&data),
                            IoSlice::new(b"\r\n"),
                        ],
                    )
                    .await
                } else {
                    stream.write_all(&data).await
                };
                written.ok()?;
            }
        }
    }
    if framing == Framing::Chunked {
        stream.write_all(b"0\r\n\r\n").await.ok()?;
    }
    (!close).then_some(stream)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// No body (1xx, 204, 304).
    None,
    /// Sized by the response's own `content-length`, or by its body's exact size (`Some`: the
    /// header to add).
    Sized(Option<u64>),
    Chunked,
}

fn framing<B: Body>(status: StatusCode, headers: &HeaderMap, body: &B) -> Framing {
    if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::None
    } else if headers.contains_key(header::CONTENT_LENGTH) {
        Framing::Sized(None)
    } else if let Some(n) = body.size_hint().exact() {
        Framing::Sized(Some(n))
    } else {
        Framing::Chunked
    }
}

/// The response head as hyper writes it: `HTTP/1.1`, the status and its reason (the response's
/// own when it carries one), the headers
/// (lowercase names), `connection: close` when the request asked for it, the framing header
/// hyper would add, then `date` when the response has none.
fn head(
    status: StatusCode,
    reason: Option<&[u8]>,
    headers: &HeaderMap,
    framing: Framing,
    close: bool,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(
        reason.unwrap_or_else(|| status.canonical_reason().unwrap_or("<none>").as_bytes()),
    );
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        let framing_header = name == header::TRANSFER_ENCODING
            || (name == header::CONTENT_LENGTH && !matches!(framing, Framing::Sized(None)));
        if !framing_header {
            push_header(&mut out, name.as_str(), value.as_bytes());
        }
    }
    if close && !headers.contains_key(header::CONNECTION) {
        push_header(&mut out, "connection", b"close");
    }
    match framing {
        Framing::Chunked => push_header(&mut out, "transfer-encoding", b"chunked"),
        Framing::Sized(Some(n)) => {
            push_header(&mut out, "content-length", n.to_string().as_bytes())
        }
        Framing::Sized(None) | Framing::None => {}
    }
    if !headers.contains_key(header::DATE) {
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        push_header(&mut out, "date", date.as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Write every byte of `parts`, in as few calls as the socket takes.
async fn write_all(stream: &mut TcpStream, mut parts: &mut [IoSlice<'_>]) -> std::io::Result<()> {
    while !parts.is_empty() {
        let n = stream.write_vectored(parts).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut parts, n);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATH: &str = "/api/realtime";

    fn verdict(seen: &[u8]) -> Line {
        line_verdict(seen, &expected_line(PATH).expect("a short path"))
    }

    #[test]
    fn the_request_line_decides_as_soon_as_it_can() {
        assert_eq!(verdict(b"GET /api/realtime HTTP/1.1"), Line::Ours);
        assert_eq!(verdict(b"GET /api/realtime?x=1 HT"), Line::Ours);
        assert_eq!(verdict(b"GET /api/realtimes HTTP/1.1"), Line::Other);
        assert_eq!(verdict(b"GET /api/realtime/x HTTP/1.1"), Line::Other);
        assert_eq!(verdict(b"POST /api/realtime HTTP/1.1"), Line::Other);
        assert_eq!(verdict(b"\r\nGET /api/realtime HTTP/1.1"), Line::Other);
        assert_eq!(verdict(b"GET /api/hea"), Line::Other);
        assert_eq!(verdict(b"GET /api/real"), Line::TooShort);
        assert_eq!(verdict(b"GET /api/realtime"), Line::TooShort);
        assert_eq!(verdict(b"G"), Line::TooShort);
        assert_eq!(verdict(b""), Line::Other, "a close before any byte");
        assert!(
            expected_line(&"/x".repeat(40)).is_none(),
            "too long to peek"
        );
    }

    fn parsed(head: &[u8]) -> Parsed {
        parse(head, PATH, 100)
    }

    #[test]
    fn only_a_plain_get_of_the_path_is_taken() {
        let head =
            b"GET /api/realtime?a=1 HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n";
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(b"GET /api/health HTTP/1.1\r\n");
        let Parsed::Ours(t) = parsed(&bytes) else {
            panic!("not taken")
        };
        assert_eq!(
            t.head_len,
            head.len(),
            "the pipelined request stays for hyper"
        );
        assert_eq!(t.request.uri(), "/api/realtime?a=1");
        assert_eq!(t.request.headers()["accept"], "text/event-stream");
        assert!(!t.close);
        let Parsed::Ours(t) =
            parsed(b"GET /api/realtime HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n")
        else {
            panic!("not taken")
        };
        assert!(t.close);
        assert!(matches!(
            parsed(b"GET /api/realtime HTTP/1.1\r\nHost: x\r\n"),
            Parsed::Partial
        ));
        for other in [
            b"GET /api/realtime HTTP/1.0\r\n\r\n".as_slice(),
            b"GET /api/realtime HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            b"GET /api/realtime HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET /api/realtime HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
            b"GET /api/realtime HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"GET /api/realtimes HTTP/1.1\r\n\r\n",
            b"HEAD /api/realtime HTTP/1.1\r\n\r\n",
            b"GET /api/realtime HTTP/1.1\r\nBad Name: x\r\n\r\n",
        ] {
            assert!(
                matches!(parsed(other), Parsed::Other),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
        let many: String = (0..5).map(|i| format!("X-{i}: v\r\n")).collect();
        let head = format!("GET /api/realtime HTTP/1.1\r\n{many}\r\n");
        assert!(
            matches!(parse(head.as_bytes(), PATH, 4), Parsed::Other),
            "more headers than allowed: hyper answers it"
        );
    }

    #[test]
    fn the_head_is_written_as_hyper_writes_it() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(
            header::DATE,
            HeaderValue::from_static("Sat, 05 Dec 2026 16:00:00 GMT"),
        );
        let out = head(StatusCode::OK, None, &h, Framing::Chunked, false);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
             date: Sat, 05 Dec 2026 16:00:00 GMT\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let out = head(
            StatusCode::TOO_MANY_REQUESTS,
            None,
            &h,
            Framing::Sized(Some(12)),
            true,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{text}"
        );
        assert!(text.contains("\r\nconnection: close\r\n"), "{text}");
        assert!(text.contains("\r\ncontent-length: 12\r\n"), "{text}");
        assert!(!text.contains("transfer-encoding"), "{text}");
        let mut sized = HeaderMap::new();
        sized.insert(header::CONTENT_LENGTH, HeaderValue::from_static("3"));
        let text = String::from_utf8(head(
            StatusCode::OK,
            None,
            &sized,
            Framing::Sized(None),
            false,
        ))
        .unwrap();
        assert!(
            String::from_utf8(head(
                StatusCode::BAD_REQUEST,
                Some(b"Bad Request: malformed Host header"),
                &sized,
                Framing::Sized(None),
                true
            ))
            .unwrap()
            .starts_with("HTTP/1.1 400 Bad Request: malformed Host header\r\n"),
            "a reason of the response's own"
        );
        assert_eq!(text.matches("content-length").count(), 1, "{text}");
        assert!(text.contains("\r\ndate: "), "{text}");
    }
}
