//! `GET /api/files/{collection}/{recordId}/{filename}`: a record's file, or with `?thumb=` its
//! thumbnail (made by `files::Storage::thumb`, kept in memory once served), streamed from the
//! file storage with PocketBase's headers (disposition, type, caching, ranges, conditional GETs).
//! `POST /api/files/token` issues the file tokens that open protected files.

use super::error::{ApiError, ApiResult};
use super::{Shared, query_map};
use crate::auth::token;
use crate::files::{Bucket, Remembered, Storage, StoredTypes, Thumb, TypeKey};
use crate::records::{self, Access, Action, Gate, read};
use crate::schema::FieldType;
use crate::schema::value::{self, from_stored};
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::{StreamExt as _, TryStreamExt as _};
use serde_json::Value;
use std::sync::Arc;
use std::time::SystemTime;

/// Content types PocketBase serves `inline`; every other is an `attachment`.
const INLINE_TYPES: &[&str] = &[
    "image/png",
    "image/jpg",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "image/x-icon",
    "image/bmp",
    "video/webm",
    "video/mp4",
    "video/3gpp",
    "video/quicktime",
    "video/x-ms-wmv",
    "audio/basic",
    "audio/aiff",
    "audio/mpeg",
    "audio/midi",
    "audio/mp3",
    "audio/wave",
    "audio/wav",
    "audio/x-wav",
    "audio/x-mpeg",
    "audio/x-m4a",
    "audio/aac",
    "application/pdf",
    "application/x-pdf",
];

/// Extensions whose content type PocketBase sets by name rather than by the stored type.
fn type_by_extension(name: &str) -> Option<&'static str> {
    let ext = name.rfind('.').map(|i| &name[i..])?;
    Some(match ext {
        ".svg" => "image/svg+xml",
        ".css" => "text/css",
        ".js" | ".mjs" => "text/javascript",
        ".xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        ".docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        ".pptx" => "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        _ => return None,
    })
}

/// A file no larger is read whole when it is opened.
const CHUNK_BYTES: usize = 256 << 10;

/// How many bytes one read of a larger file brings (one trip to the blocking pool each).
/// Measured with bench/files.sh (32 concurrent 1 MiB downloads): 1 MiB chunks serve about 30%
/// more downloads per second, but the server keeps about 65 MB more memory after them; a small
/// VPS needs the memory more.
const STREAM_CHUNK_BYTES: usize = 256 << 10;

pub(crate) async fn download(
    State(state): State<Shared>,
    Path((key, id, name)): Path<(String, String, String)>,
    request: Request,
) -> ApiResult<Response> {
    let (head, _) = request.into_parts();
    let schema = state.store.schema();
    let c = schema
        .by_id_or_name(&key)
        .cloned()
        .ok_or_else(ApiError::not_found)?;
    let (row, _, _, _) = read::view(&state.store, &c, id.clone(), None, None, None, false)
        .await
        .map_err(|_| ApiError::not_found())?;
    // The name must be one of the record's files; that field decides whether it is protected.
    let field = c
        .fields
        .iter()
        .zip(row.iter())
        .find(|(f, v)| {
            f.kind == FieldType::File
                && value::to_list(&from_stored(f, (*v).clone())).contains(&name)
        })
        .map(|(f, _)| f)
        .ok_or_else(ApiError::not_found)?;
    let q = query_map(head.uri.query());
    if field.opt_bool("protected") {
        // The view rule decides, checked for the record a `?token=` file token was issued to
        // (a guest without one), as PocketBase checks it.
        let tok = q.get("token").and_then(Value::as_str).unwrap_or("");
        let mut who = match tok {
            "" => None,
            t => super::token_record(&state, t, "file", super::now_s())
                .await
                .map(|(who, _)| who),
        };
        if who.as_ref().is_some_and(records::Caller::is_superuser)
            && !super::superuser_ip_allowed(&state, &head.headers, &head.extensions)
        {
            who = None;
        }
        let mut access = Access::request(
            who.as_ref(),
            "GET",
            head.uri.path(),
            &head.headers,
            &q,
            None,
        );
        access.context = "protectedFile";
        if records::gate(&c, Action::View, &access) == Gate::SuperusersOnly {
            return Err(ApiError::not_found());
        }
        let rule = records::condition(&schema, &c, Action::View, &access)
            .map_err(|_| ApiError::not_found())?;
        if rule.is_some() {
            read::view(&state.store, &c, id.clone(), rule, None, None, false)
                .await
                .map_err(|_| ApiError::not_found())?;
        }
    }
    // A view's file lives in the folder of the record it came from.
    let (c, id) = if c.is_view() {
        read::view_file_origin(&state.store, &schema, &c, &field.name, &name)
            .await
            .map_err(|_| ApiError::not_found())?
    } else {
        (Arc::clone(&c), id)
    };
    let download = q
        .get("download")
        .map(|v| match v {
            Value::String(s) => crate::schema::value::go_parse_bool(s) == Some(true),
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_i64() == Some(1),
            _ => false,
        })
        .unwrap_or(false);
    // PocketBase serves the original, under its own name, for any thumb it does not make.
    let thumb = q.get("thumb").and_then(Value::as_str).unwrap_or("");
    let thumbs = field.opt_strings("thumbs");
    let files = &state.records.files;
    if let Some(bucket) = files.remote() {
        // A write that was answered has its files on S3; one still uploading is waited for.
        files.settle(&c.id, &id).await;
        let key = Storage::key(&c.id, &id, &name).ok_or_else(ApiError::not_found)?;
        let (key, name) = files
            .thumb_remote(&bucket, &c.id, &id, &name, thumb, &thumbs)
            .await
            .unwrap_or((key, name));
        return serve_remote(&bucket, &key, &name, download, &head.headers, remote_error).await;
    }
    let path = files
        .file_path(&c.id, &id, &name)
        .ok_or_else(ApiError::not_found)?;
    match files.thumb(&c.id, &id, &name, thumb, &thumbs).await {
        None => {
            let opened = open(path, files.stored_types()).await?;
            respond(opened, &name, download, &head.headers)
        }
        Some(Thumb::Remembered(r, served)) => {
            let opened = Opened {
                size: r.bytes.len() as u64,
                modified: r.modified,
                stored_type: r.stored_type.clone(),
                content: Content::Whole(r.bytes.clone()),
            };
            respond(opened, &served, download, &head.headers)
        }
        Some(Thumb::OnDisk(path, served)) => {
            let opened = open(path.clone(), files.stored_types()).await?;
            if let Content::Whole(bytes) = &opened.content {
                files.remember_thumb(
                    path,
                    Remembered {
                        bytes: bytes.clone(),
                        modified: opened.modified,
                        stored_type: opened.stored_type.clone(),
                    },
                );
            }
            respond(opened, &served, download, &head.headers)
        }
    }
}

/// `POST /api/files/token`: a short-lived `file` token for the authenticated record, signed
/// with its `tokenKey` and its collection's `fileToken` secret, as PocketBase signs it.
pub(crate) async fn token(State(state): State<Shared>, request: Request) -> ApiResult<Response> {
    let (head, _) = request.into_parts();
    let who = super::caller(&state, &head.headers)
        .await
        .ok_or_else(ApiError::requires_auth)?;
    let c = &who.collection;
    let secret = c.token_secret("fileToken").ok_or_else(ApiError::internal)?;
    let tok = token::sign(
        c.stored_text(&who.record, "id"),
        &c.id,
        "file",
        c.token_duration("fileToken"),
        serde_json::Map::new(),
        c.stored_text(&who.record, "tokenKey"),
        secret,
        chrono::Utc::now().timestamp(),
    );
    Ok(super::ok_json(&serde_json::json!({ "token": tok })))
}

pub(crate) async fn serve(
    path: std::path::PathBuf,
    name: &str,
    download: bool,
    req: &HeaderMap,
) -> ApiResult<Response> {
    // Rare (backups): no memo of types kept.
    respond(open(path, Arc::default()).await?, name, download, req)
}

/// Open the file, read its size, date and sidecar type and, for a small file (thumbs,
/// avatars), its bytes too: on the worker when the kernel's caches hold all of it, else in one
/// trip to the blocking pool.
async fn open(path: std::path::PathBuf, types: Arc<StoredTypes>) -> ApiResult<Opened> {
    if let Some(opened) = open_for_serving(&path, &types, false) {
        return opened.map_err(|_| ApiError::not_found());
    }
    match tokio::task::spawn_blocking(move || open_for_serving(&path, &types, true)).await {
        Ok(Some(Ok(opened))) => Ok(opened),
        _ => Err(ApiError::not_found()),
    }
}

/// The answer for an opened file: its whole bytes, a range or several, or a 304/412/416.
fn respond(opened: Opened, name: &str, download: bool, req: &HeaderMap) -> ApiResult<Response> {
    let Opened {
        size,
        modified,
        stored_type,
        content,
    } = opened;
    let plan = match plan(size, modified, &stored_type, name, download, req) {
        Ok(plan) => plan,
        Err(answer) => return Ok(*answer),
    };
    let mut region = None;
    let body = match (plan.parts, content) {
        (Some(parts), Content::Whole(bytes)) => Body::from_stream(parts.stream(move |a, n| {
            futures_util::stream::once(std::future::ready(Ok(slice(&bytes, a, n)))).boxed()
        })),
        (Some(parts), Content::Open(file)) => {
            let file = std::sync::Arc::new(file);
            Body::from_stream(
                parts.stream(move |a, n| stream(std::sync::Arc::clone(&file), a, n).boxed()),
            )
        }
        (None, Content::Whole(bytes)) => Body::from(slice(&bytes, plan.start, plan.len)),
        (None, Content::Open(file)) => {
            // The HTTP layer sends the region with sendfile where it can, else this stream.
            let file = std::sync::Arc::new(file);
            region = Some(crate::http::SendFile::new(
                std::sync::Arc::clone(&file),
                plan.start,
                plan.len,
            ));
            Body::from_stream(stream(file, plan.start, plan.len))
        }
    };
    let mut res = (plan.status, plan.headers, body).into_response();
    if let Some(region) = region {
        res.extensions_mut().insert(region);
    }
    Ok(res)
}

/// `n` bytes of `bytes` from `a`, within it.
fn slice(bytes: &bytes::Bytes, a: u64, n: u64) -> bytes::Bytes {
    let (a, n) = (
        usize::try_from(a).unwrap_or(usize::MAX),
        usize::try_from(n).unwrap_or(usize::MAX),
    );
    let a = a.min(bytes.len());
    bytes.slice(a..a.saturating_add(n).min(bytes.len()))
}

/// A boxed stream of a body's chunks.
type Chunks = futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>;

/// A file on S3, served as a local one is: a plain GET streams the object with its size,
/// date and type from the GET's own answer; a conditional GET or a range asks for its
/// size and date first (HEAD), then fetches only the range it serves.
pub(crate) async fn serve_remote(
    bucket: &std::sync::Arc<Bucket>,
    key: &str,
    name: &str,
    download: bool,
    req: &HeaderMap,
    remote_error: fn(crate::files::S3Error) -> ApiError,
) -> ApiResult<Response> {
    let needs_head = req.contains_key(header::RANGE) || req.contains_key(header::IF_MODIFIED_SINCE);
    let fetched = if needs_head {
        let meta = bucket.head(key).await.map_err(remote_error)?;
        let plan = match plan(
            meta.size,
            meta.modified,
            &meta.content_type,
            name,
            download,
            req,
        ) {
            Ok(plan) => plan,
            Err(answer) => return Ok(*answer),
        };
        if let Some(parts) = plan.parts {
            // Each range is its own ranged GET, made when the body reaches it.
            let (bucket, key) = (std::sync::Arc::clone(bucket), key.to_owned());
            let body = Body::from_stream(parts.stream(move |a, n| {
                let (bucket, key) = (std::sync::Arc::clone(&bucket), key.clone());
                futures_util::stream::once(async move {
                    let got = bucket.get(&key, Some((a, a + n - 1))).await;
                    got.map(|(_, body)| {
                        http_body_util::BodyExt::into_data_stream(body)
                            .map_err(std::io::Error::other)
                    })
                    .map_err(std::io::Error::other)
                })
                .try_flatten()
                .boxed()
            }));
            return Ok((plan.status, plan.headers, body).into_response());
        }
        let range = (plan.len > 0 && plan.status == StatusCode::PARTIAL_CONTENT)
            .then(|| (plan.start, plan.start + plan.len - 1));
        let (_, body) = bucket.get(key, range).await.map_err(remote_error)?;
        (plan, body)
    } else {
        let (meta, body) = bucket.get(key, None).await.map_err(remote_error)?;
        let plan = match plan(
            meta.size,
            meta.modified,
            &meta.content_type,
            name,
            download,
            req,
        ) {
            Ok(plan) => plan,
            Err(answer) => return Ok(*answer),
        };
        (plan, body)
    };
    let (plan, body) = fetched;
    Ok((plan.status, plan.headers, Body::new(body)).into_response())
}

/// A missing object is the route's 404; a failing S3 a 404 too (PocketBase answers any
/// failure to open the file so), logged.
fn remote_error(e: crate::files::S3Error) -> ApiError {
    if !e.is_not_found() {
        tracing::warn!(error = %e, "file not read from S3");
    }
    ApiError::not_found()
}

/// What to send for a file of `size` bytes modified at `modified`: the status, the headers
/// and the byte span, or a finished answer (304, 416).
struct Plan {
    status: StatusCode,
    headers: HeaderMap,
    start: u64,
    len: u64,
    /// Several ranges: a `multipart/byteranges` body (`start` and `len` are then its own).
    parts: Option<Parts>,
}

/// The parts of a `multipart/byteranges` answer as Go's ServeContent writes them (through
/// `mime/multipart`): each range's head (its `Content-Range` and the file's type), its bytes,
/// and the closing boundary.
struct Parts {
    boundary: String,
    /// Each range (start, length) with the head written before its bytes.
    ranges: Vec<(u64, u64, bytes::Bytes)>,
    tail: bytes::Bytes,
}

impl Parts {
    fn new(ranges: &[(u64, u64)], content_type: &str, size: u64) -> Parts {
        use rand::Rng as _;
        // Go's boundary: 30 random bytes in hex.
        let boundary: String = (0..30)
            .map(|_| format!("{:02x}", rand::rng().random::<u8>()))
            .collect();
        let ranges = ranges
            .iter()
            .enumerate()
            .map(|(i, &(a, n))| {
                let lead = if i == 0 { "" } else { "\r\n" };
                let head = format!(
                    "{lead}--{boundary}\r\nContent-Range: {}\r\nContent-Type: {content_type}\r\n\r\n",
                    content_range(a, n, size)
                );
                (a, n, bytes::Bytes::from(head))
            })
            .collect();
        let tail = bytes::Bytes::from(format!("\r\n--{boundary}--\r\n"));
        Parts {
            boundary,
            ranges,
            tail,
        }
    }

    /// The body's chunks: each range's head, then its bytes from `read(start, length)` (a
    /// range of no bytes reads nothing), then the closing boundary.
    fn stream(self, mut read: impl FnMut(u64, u64) -> Chunks + Send + 'static) -> Chunks {
        let tail = futures_util::stream::once(std::future::ready(Ok(self.tail)));
        futures_util::stream::iter(self.ranges)
            .flat_map(move |(a, n, head)| {
                let head = futures_util::stream::once(std::future::ready(Ok(head)));
                if n == 0 {
                    head.boxed()
                } else {
                    head.chain(read(a, n)).boxed()
                }
            })
            .chain(tail)
            .boxed()
    }

    /// The body's length.
    fn length(&self) -> u64 {
        self.ranges
            .iter()
            .map(|(_, n, head)| n + head.len() as u64)
            .sum::<u64>()
            + self.tail.len() as u64
    }
}

/// `bytes a-b/size` of the range of `n` bytes from `a`, as Go prints it (a range of no bytes
/// too).
fn content_range(a: u64, n: u64, size: u64) -> String {
    format!("bytes {a}-{}/{size}", (a + n) as i128 - 1)
}

fn plan(
    size: u64,
    modified: SystemTime,
    stored_type: &str,
    name: &str,
    download: bool,
    req: &HeaderMap,
) -> Result<Plan, Box<Response>> {
    let disposition = if !download && INLINE_TYPES.contains(&stored_type) {
        "inline"
    } else {
        "attachment"
    };
    let content_type = type_by_extension(name).unwrap_or(stored_type);
    let last_modified = httpdate::fmt_http_date(modified);

    let mut h = HeaderMap::new();
    let mut set = |k: header::HeaderName, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            h.insert(k, v);
        }
    };
    set(
        header::CONTENT_DISPOSITION,
        &format!("{disposition}; filename={}", go_quote(name)),
    );
    set(header::CONTENT_TYPE, content_type);
    set(
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; media-src 'self'; style-src 'unsafe-inline'; sandbox",
    );
    set(
        header::CACHE_CONTROL,
        "max-age=2592000, stale-while-revalidate=86400",
    );
    set(header::ACCEPT_RANGES, "bytes");
    set(header::LAST_MODIFIED, &last_modified);

    // Conditional GET, as Go's ServeContent answers it (seconds precision).
    if let Some(since) = req
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok())
        && secs(modified) <= secs(since)
        && !req.contains_key(header::IF_NONE_MATCH)
    {
        h.remove(header::CONTENT_TYPE);
        h.remove(header::ACCEPT_RANGES);
        return Err(Box::new((StatusCode::NOT_MODIFIED, h).into_response()));
    }

    let asked = req
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut ranges = match go_ranges(asked, size) {
        Ok(r) => r,
        Err(e) => {
            // Go's ServeContent answers through http.Error: plain text, and none of the
            // caching headers of a served file.
            if e == RangeError::NoOverlap
                && let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}"))
            {
                h.insert(header::CONTENT_RANGE, v);
            }
            for k in [
                header::CACHE_CONTROL,
                header::ACCEPT_RANGES,
                header::LAST_MODIFIED,
            ] {
                h.remove(k);
            }
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            let text = match e {
                RangeError::NoOverlap => "invalid range: failed to overlap\n",
                RangeError::Invalid => "invalid range\n",
            };
            return Err(Box::new(
                (StatusCode::RANGE_NOT_SATISFIABLE, h, text).into_response(),
            ));
        }
    };
    // Ranges adding up to more than the file are ignored: the whole file is cheaper to send.
    if ranges.iter().map(|r| r.1).sum::<u64>() > size {
        ranges.clear();
    }
    let (status, start, len, parts) = match ranges.as_slice() {
        [] => (StatusCode::OK, 0, size, None),
        [(a, n)] => {
            if let Ok(v) = HeaderValue::from_str(&content_range(*a, *n, size)) {
                h.insert(header::CONTENT_RANGE, v);
            }
            (StatusCode::PARTIAL_CONTENT, *a, *n, None)
        }
        _ => {
            let parts = Parts::new(&ranges, content_type, size);
            if let Ok(v) = HeaderValue::from_str(&format!(
                "multipart/byteranges; boundary={}",
                parts.boundary
            )) {
                h.insert(header::CONTENT_TYPE, v);
            }
            (StatusCode::PARTIAL_CONTENT, 0, parts.length(), Some(parts))
        }
    };
    if let Ok(v) = HeaderValue::from_str(&len.to_string()) {
        h.insert(header::CONTENT_LENGTH, v);
    }
    Ok(Plan {
        status,
        headers: h,
        start,
        len,
        parts,
    })
}

/// A file opened to be served: its size, date and stored type, and its content.
struct Opened {
    size: u64,
    modified: SystemTime,
    stored_type: String,
    content: Content,
}

/// A small file's bytes (thumbs, avatars), or a larger one still open, to be streamed.
enum Content {
    Whole(bytes::Bytes),
    Open(std::fs::File),
}

/// Open a stored file (a regular file only) with what serving it needs. With `wait`, blocking
/// (call it on the blocking pool); without, only from the kernel's caches (an async worker may
/// call it): `None` when any part (the path, the sidecar, a small file's bytes) is not there.
/// The sidecar is read only for a file `types` has not seen.
fn open_for_serving(
    path: &std::path::Path,
    types: &StoredTypes,
    wait: bool,
) -> Option<std::io::Result<Opened>> {
    use crate::files::{open_cached, read_cached};
    use std::io::Read as _;
    let open = |p: &std::path::Path| {
        if wait {
            std::fs::File::open(p).map(Some)
        } else {
            open_cached(p)
        }
    };
    // `f`'s bytes, `size` of them as its metadata says; without waiting, all of them or none.
    let whole = |f: &std::fs::File, size: u64| {
        if wait {
            let mut buf = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            return Some((&*f).read_to_end(&mut buf).map(|_| buf));
        }
        let want = usize::try_from(size).ok()?;
        read_cached(f, 0, want).filter(|b| b.len() == want).map(Ok)
    };
    let file = match open(path) {
        Ok(Some(f)) => f,
        Ok(None) => return None,
        Err(e) => return Some(Err(e)),
    };
    let meta = match file.metadata() {
        Ok(m) => m,
        Err(e) => return wait.then_some(Err(e)),
    };
    if !meta.is_file() {
        return Some(Err(std::io::ErrorKind::NotFound.into()));
    }
    let key = TypeKey::of(&meta);
    let stored_type = if let Some(t) = types.get(&key) {
        t
    } else {
        let sidecar = match open(&crate::files::sidecar(path)) {
            Ok(Some(f)) => {
                let len = f.metadata().map_or(0, |m| m.len());
                // A sidecar is a few hundred bytes: an odd one is left to the blocking pool.
                if !wait && len > 64 << 10 {
                    return None;
                }
                whole(&f, len)?.ok()
            }
            Ok(None) => return None,
            Err(_) => None,
        };
        let t = Storage::content_type_in(sidecar.as_deref());
        types.put(key, &t);
        t
    };
    let size = meta.len();
    let (size, content) = if size <= CHUNK_BYTES as u64 {
        let buf = match whole(&file, size)? {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        (buf.len() as u64, Content::Whole(bytes::Bytes::from(buf)))
    } else {
        (size, Content::Open(file))
    };
    Some(Ok(Opened {
        size,
        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        stored_type,
        content,
    }))
}

/// A string quoted as Go's `strconv.Quote` quotes it (PocketBase quotes the disposition's file
/// name so): `"` and `\\` escaped, control characters as escapes, the rest as it is.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Why a `Range` header is refused (416).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RangeError {
    /// Not a list of byte ranges.
    Invalid,
    /// Byte ranges, none of which starts inside the file.
    NoOverlap,
}

/// The `Range` header's byte ranges within `size`, as (start, length), read as Go's
/// ServeContent reads it: blank items are skipped, numbers are Go integers (a sign allowed),
/// a suffix longer than the file is the whole file, a range starting past the end is dropped
/// (all of them dropped: no overlap), an end past the end is cut. No header, no ranges.
fn go_ranges(header: &str, size: u64) -> Result<Vec<(u64, u64)>, RangeError> {
    if header.is_empty() {
        return Ok(Vec::new());
    }
    let list = header.strip_prefix("bytes=").ok_or(RangeError::Invalid)?;
    let int = |t: &str| t.parse::<i64>().map_err(|_| RangeError::Invalid);
    let size_i = i64::try_from(size).unwrap_or(i64::MAX);
    let mut out = Vec::new();
    let mut no_overlap = false;
    for item in list.split(',') {
        let item = go_trim(item);
        if item.is_empty() {
            continue;
        }
        let (start, end) = item.split_once('-').ok_or(RangeError::Invalid)?;
        let (start, end) = (go_trim(start), go_trim(end));
        if start.is_empty() {
            if end.is_empty() || end.starts_with('-') {
                return Err(RangeError::Invalid);
            }
            let n = int(end)?;
            if n < 0 {
                return Err(RangeError::Invalid);
            }
            let n = n.min(size_i);
            out.push(((size_i - n) as u64, n as u64));
            continue;
        }
        let a = int(start)?;
        if a < 0 {
            return Err(RangeError::Invalid);
        }
        if a >= size_i {
            no_overlap = true;
            continue;
        }
        let len = if end.is_empty() {
            size_i - a
        } else {
            let b = int(end)?;
            if a > b {
                return Err(RangeError::Invalid);
            }
            b.min(size_i - 1) - a + 1
        };
        out.push((a as u64, len as u64));
    }
    if no_overlap && out.is_empty() {
        return Err(RangeError::NoOverlap);
    }
    Ok(out)
}

/// Go's `textproto.TrimString`: ASCII spaces, tabs and line ends off both ends.
fn go_trim(s: &str) -> &str {
    s.trim_matches([' ', '\t', '\n', '\r'])
}

/// `len` bytes of `file` from `start`, in chunks read one at a time (no thread is held between
/// chunks, however slowly the client reads): the file is never read whole. A chunk the page
/// cache holds is read on the worker; one that needs the disk, on the blocking pool.
fn stream(
    file: std::sync::Arc<std::fs::File>,
    start: u64,
    len: u64,
) -> impl futures_util::Stream<Item = std::io::Result<bytes::Bytes>> + Send + 'static {
    futures_util::stream::try_unfold((file, start, len), |(file, at, left)| async move {
        if left == 0 {
            return Ok(None);
        }
        let want = usize::try_from(left)
            .unwrap_or(STREAM_CHUNK_BYTES)
            .min(STREAM_CHUNK_BYTES);
        let buf = match crate::files::read_cached(&file, at, want) {
            Some(buf) => buf,
            None => {
                let f = std::sync::Arc::clone(&file);
                tokio::task::spawn_blocking(move || {
                    use std::io::{Read as _, Seek as _};
                    // Only this stream reads through this handle (opened for this request), so
                    // its cursor is ours; `read_to_end` fills the buffer without zeroing it.
                    let mut r = &*f;
                    r.seek(std::io::SeekFrom::Start(at))?;
                    let mut buf = Vec::with_capacity(want);
                    r.take(want as u64).read_to_end(&mut buf)?;
                    Ok::<_, std::io::Error>(buf)
                })
                .await
                .map_err(std::io::Error::other)??
            }
        };
        if buf.is_empty() {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
        }
        let n = buf.len() as u64;
        Ok(Some((bytes::Bytes::from(buf), (file, at + n, left - n))))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_as_go_reads_them() {
        use RangeError::{Invalid, NoOverlap};
        assert_eq!(go_ranges("bytes=0-9", 100), Ok(vec![(0, 10)]));
        assert_eq!(go_ranges("bytes=90-", 100), Ok(vec![(90, 10)]));
        assert_eq!(go_ranges("bytes=-10", 100), Ok(vec![(90, 10)]));
        assert_eq!(go_ranges("bytes=-500", 100), Ok(vec![(0, 100)]));
        assert_eq!(go_ranges("bytes=50-500", 100), Ok(vec![(50, 50)]));
        assert_eq!(go_ranges("bytes=0-1, 5-6", 100), Ok(vec![(0, 2), (5, 2)]));
        assert_eq!(go_ranges("bytes=,", 100), Ok(vec![]));
        assert_eq!(go_ranges("", 100), Ok(vec![]));
        assert_eq!(go_ranges("bytes=100-", 100), Err(NoOverlap));
        assert_eq!(go_ranges("bytes=100-,0-1", 100), Ok(vec![(0, 2)]));
        assert_eq!(go_ranges("bytes=5-1", 100), Err(Invalid));
        assert_eq!(go_ranges("bytes=--1", 100), Err(Invalid));
        assert_eq!(go_ranges("items=0-1", 100), Err(Invalid));
        assert_eq!(content_range(100, 0, 100), "bytes 100-99/100");
    }

    #[test]
    fn disposition_names_are_quoted_as_go_quotes() {
        assert_eq!(
            go_quote("100x100_a_0123456789.png"),
            "\"100x100_a_0123456789.png\""
        );
        assert_eq!(go_quote("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\x01\"");
    }
}
