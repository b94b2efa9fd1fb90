//! Request bodies: JSON, multipart (with `@jsonPayload`) and urlencoded forms into one JSON object,
//! read under the configured size limit.

use super::error::ApiError;
use crate::schema::value::parse_json_body;
use axum::body::Body;
use axum::http::{HeaderMap, header};
use serde_json::{Map, Value};

/// A body that could not be read in full: too long, or cut short or garbled on the wire (a bad
/// chunk, a client gone mid-body).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ReadError {
    /// Its declared length is past the limit (nothing read).
    TooLarge,
    /// It went past the limit while being read (a chunked body declares no length).
    Overflowed,
    Broken,
}

/// Read the whole body, refusing it as soon as it passes `limit` bytes.
pub(crate) async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<bytes::Bytes, ReadError> {
    use http_body_util::BodyExt;
    if declared_length(headers).is_some_and(|len| len > limit as u64) {
        return Err(ReadError::TooLarge);
    }
    match http_body_util::Limited::new(body, limit).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(ReadError::Overflowed)
        }
        Err(_) => Err(ReadError::Broken),
    }
}

/// Read and drop up to `limit` bytes of a body a handler refuses without reading, as Go's server
/// does before it answers: a client still sending (a chunked upload) then gets the answer
/// instead of a reset connection.
pub(crate) async fn discard(body: Body, limit: usize) {
    let _ = http_body_util::BodyExt::collect(http_body_util::Limited::new(body, limit)).await;
}

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
}

/// The body's data frames, refused with [`BindError::TooLarge`] once past `limit` bytes and
/// [`BindError::Malformed`] when the wire breaks.
type Frames = http_body_util::Limited<Body>;

fn limited_stream(body: Body, limit: usize) -> Frames {
    http_body_util::Limited::new(body, limit)
}

/// The next non-empty data chunk (None at the end of the body).
async fn next_chunk(body: &mut Frames) -> Result<Option<bytes::Bytes>, BindError> {
    use http_body_util::BodyExt;
    loop {
        match body.frame().await {
            None => return Ok(None),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data()
                    && !data.is_empty()
                {
                    return Ok(Some(data));
                }
            }
            Some(Err(e)) => {
                return Err(
                    if e.downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some()
                    {
                        BindError::Overflowed
                    } else {
                        BindError::Malformed
                    },
                );
            }
        }
    }
}

/// The Content-Type as sent. PocketBase matches its prefixes case-sensitively
/// (`APPLICATION/JSON` is not JSON to it), so neither do we lowercase it.
fn content_type(headers: &HeaderMap) -> &str {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// Why a body could not be bound. Each endpoint words these its own way, as PocketBase does.
#[derive(Debug)]
pub(crate) enum BindError {
    /// A declared length past the limit (413 everywhere, as Go's body limit answers it).
    TooLarge,
    /// A body (chunked) that went past the limit while being read: Go's reader then fails, and
    /// each endpoint answers as for a body that does not load (record writes with a 413).
    Overflowed,
    /// A non-empty body that is neither JSON, multipart nor a urlencoded form.
    Unsupported,
    /// JSON that does not parse to an object (or null), or a broken multipart body.
    Malformed,
}

impl BindError {
    /// The error an endpoint answers with: `unsupported` for an unknown Content-Type,
    /// `malformed` for a body that does not parse.
    pub(crate) fn answer(self, unsupported: &str, malformed: &str) -> ApiError {
        match self {
            Self::TooLarge => ApiError::too_large(),
            Self::Unsupported => ApiError::bad(unsupported),
            Self::Malformed | Self::Overflowed => ApiError::bad(malformed),
        }
    }
}

pub(crate) const MSG_UNSUPPORTED: &str = "Unsupported Content-Type.";

/// A request's body when it has one (a length above zero, or chunked), taken out of it; `None`
/// when it has none. What PocketBase's request info reads before a rule check.
pub(crate) fn take_body(request: &mut axum::extract::Request) -> Option<Body> {
    has_body(request.headers()).then(|| std::mem::take(request.body_mut()))
}

/// Whether a request with these headers has a body: a length above zero, or chunked.
pub(crate) fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || declared_length(headers).is_some_and(|n| n > 0)
}

/// A body taken by [`take_body`], read as PocketBase's request info reads it where it checks a
/// rule (record lists, views, deletes, an auth refresh): an unknown Content-Type is its
/// "Unsupported Content-Type.", a body that does not parse its generic 400. The data itself is
/// not used there.
pub(crate) async fn check_info_body(
    uri: &axum::http::Uri,
    method: &axum::http::Method,
    headers: &HeaderMap,
    body: Option<Body>,
    limit: usize,
) -> Result<(), ApiError> {
    let Some(body) = body else {
        return Ok(());
    };
    // A form or multipart body is read by Go's form parser, which reads the URL's query too
    // and fails on a pair it refuses there; a urlencoded body itself only for POST, PUT and
    // PATCH.
    let ct = content_type(headers);
    let form = ct.starts_with("application/x-www-form-urlencoded");
    if (form || ct.starts_with("multipart/form-data")) && query_refused(uri.query()) {
        return Err(ApiError::bad_request());
    }
    if form && !matches!(method.as_str(), "POST" | "PUT" | "PATCH") {
        return Ok(());
    }
    match parse(headers, uri.query(), body, limit).await {
        Ok(_) => Ok(()),
        Err(BindError::Malformed | BindError::Overflowed) => Err(ApiError::bad_request()),
        Err(e) => Err(e.answer(MSG_UNSUPPORTED, MSG_UNSUPPORTED)),
    }
}

/// How the auth and import endpoints word a body that does not parse.
pub(crate) const MSG_LOAD_FAILED: &str = "An error occurred while loading the submitted data.";

/// PocketBase infers plain form values: "true"/"false" become bools, a numeric string becomes a
/// number only when it prints back identically (without an exponent: `1e3` stays text).
fn infer(s: &str) -> Value {
    match s {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => {
            // Go's check: the value printed back with `FormatFloat(f, 'f', -1, 64)` (shortest
            // digits, never an exponent, as Rust's `Display` prints an f64).
            if let Ok(n) = s.parse::<f64>()
                && n.is_finite()
                && format!("{n}") == s
            {
                return crate::schema::value::number_keeping_sign(n);
            }
            Value::String(s.to_owned())
        }
    }
}

fn push(map: &mut Map<String, Value>, key: String, v: Value) {
    match map.get_mut(&key) {
        Some(Value::Array(a)) => a.push(v),
        Some(existing) => {
            let prev = existing.take();
            *existing = Value::Array(vec![prev, v]);
        }
        None => {
            map.insert(key, v);
        }
    }
}

/// The parsed body. `files` holds its file parts, received into the file storage, when the
/// caller gave one (record writes and batches), by part name.
#[derive(Default)]
pub(crate) struct Parsed {
    pub data: Map<String, Value>,
    pub files: Vec<(String, crate::files::Upload)>,
    /// Names of multipart text parts whose bytes were not UTF-8 (their values hold U+FFFD for
    /// each invalid byte; a json field refuses such text as PocketBase does).
    pub not_utf8: Vec<String>,
    /// A form's or multipart body's values as sent, for endpoints that bind them as Go binds a
    /// form into a struct (`None` for JSON or no body).
    pub form: Option<FormValues>,
    /// A multipart Content-Type with no body bytes at all (Go's multipart reader fails on it
    /// where an endpoint parses the form itself, as record writes do).
    pub empty_multipart: bool,
    /// A JSON body that is `null` (it binds nothing, but Go's decoder sets a pointer target to
    /// nil with it).
    pub json_null: bool,
}

/// The plain values of a form or multipart body, as text in the order sent, and its
/// `@jsonPayload` objects merged.
#[derive(Default)]
pub(crate) struct FormValues {
    pub plain: Vec<(String, String)>,
    pub payload: Map<String, Value>,
    /// A `@jsonPayload` key of another JSON kind than a plain value of the same key: a body
    /// bound into a map (a record's data) fails on it; one bound into a struct does not.
    payload_conflict: bool,
}

impl FormValues {
    /// The body as PocketBase binds a form into a struct whose only fields a form value can set
    /// are the texts named in `texts` (the key's first value) and the lists of text named in
    /// `text_lists` (every value of the key, in order), by their exact names: every other
    /// plain value is left out (a struct or map field takes none), then the payload's keys go
    /// on top.
    pub(crate) fn into_struct(self, texts: &[&str], text_lists: &[&str]) -> Map<String, Value> {
        let mut out = Map::new();
        for (k, v) in self.plain {
            if texts.contains(&k.as_str()) {
                out.entry(k).or_insert(Value::String(v));
            } else if text_lists.contains(&k.as_str())
                && let Value::Array(a) = out.entry(k).or_insert_with(|| Value::Array(Vec::new()))
            {
                a.push(Value::String(v));
            }
        }
        out.extend(self.payload);
        out
    }
}

/// Bind a request body as PocketBase does: an empty body binds nothing (whatever its type);
/// otherwise the Content-Type's prefix picks JSON (an object, or null for nothing), multipart
/// or a urlencoded form, and anything else is [`BindError::Unsupported`].
pub(crate) async fn parse(
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
    limit: usize,
) -> Result<Parsed, BindError> {
    map_bound(parse_struct(headers, query, body, limit).await)
}

/// [`parse`] for an endpoint that binds the body into a struct (through
/// [`FormValues::into_struct`] when it is a form): a payload key of another kind than its plain
/// value does not fail it.
pub(crate) async fn parse_struct(
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
    limit: usize,
) -> Result<Parsed, BindError> {
    parse_into(headers, query, body, limit, None).await
}

/// A body bound into a map fails on a payload key of another kind than its plain value.
fn map_bound(parsed: Result<Parsed, BindError>) -> Result<Parsed, BindError> {
    match parsed {
        Ok(p) if p.form.as_ref().is_some_and(|f| f.payload_conflict) => Err(BindError::Malformed),
        other => other,
    }
}

/// [`parse`] of a request's body, the query taken from its head.
pub(crate) async fn parse_request(
    head: &axum::http::request::Parts,
    body: Body,
    limit: usize,
) -> Result<Parsed, BindError> {
    parse(&head.headers, head.uri.query(), body, limit).await
}

/// A request's body bound as PocketBase binds a form: its data, or the endpoint's answer for
/// an unknown Content-Type (`unsupported`) and for a body that does not load (`malformed`).
pub(crate) async fn bind(
    head: &axum::http::request::Parts,
    body: Body,
    limit: usize,
    unsupported: &str,
    malformed: &str,
) -> Result<Map<String, Value>, ApiError> {
    Ok(parse_request(head, body, limit)
        .await
        .map_err(|e| e.answer(unsupported, malformed))?
        .data)
}

/// [`parse`], with the file parts of a multipart body received into `storage`.
pub(crate) async fn parse_with_files(
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
    limit: usize,
    storage: &crate::files::Storage,
) -> Result<Parsed, BindError> {
    map_bound(parse_into(headers, query, body, limit, Some(storage)).await)
}

/// Whether the body is sent as JSON (the Content-Type's prefix, as [`parse`] picks it).
pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    content_type(headers).starts_with("application/json")
}

/// Go's form parser reads the URL's query with a form or multipart body and fails the body
/// on a pair it refuses there.
fn query_refused(query: Option<&str>) -> bool {
    crate::http::url_pairs_checked(query.unwrap_or("")).1
}

async fn parse_into(
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
    limit: usize,
    storage: Option<&crate::files::Storage>,
) -> Result<Parsed, BindError> {
    let ct = content_type(headers);
    if ct.starts_with("multipart/form-data") {
        // Streamed: file parts go to their temporary files as they arrive, so a large upload
        // never sits in memory, and the limit refuses a body as soon as it passes it.
        if declared_length(headers).is_some_and(|len| len > limit as u64) {
            return Err(BindError::TooLarge);
        }
        let mut stream = limited_stream(body, limit);
        let first = match next_chunk(&mut stream).await? {
            Some(first) => first,
            None => {
                return Ok(Parsed {
                    empty_multipart: true,
                    ..Parsed::default()
                });
            }
        };
        if query_refused(query) {
            return Err(BindError::Malformed);
        }
        let boundary = ct
            .split(';')
            .filter_map(|p| p.trim().strip_prefix("boundary="))
            .next()
            .map(|b| b.trim_matches('"').to_owned())
            .ok_or(BindError::Malformed)?;
        let tail = futures_util::stream::unfold(stream, |mut st| async move {
            match next_chunk(&mut st).await {
                Ok(Some(b)) => Some((Ok(b), st)),
                Ok(None) => None,
                Err(e) => Some((Err(e), st)),
            }
        });
        let whole = futures_util::StreamExt::chain(
            futures_util::stream::once(async move { Ok::<_, BindError>(first) }),
            tail,
        );
        return parse_multipart(boundary, whole, storage).await;
    }
    let bytes = read_limited(headers, body, limit)
        .await
        .map_err(|e| match e {
            ReadError::TooLarge => BindError::TooLarge,
            ReadError::Overflowed => BindError::Overflowed,
            // PocketBase's JSON (or form) reader fails on the broken stream the same way.
            ReadError::Broken => BindError::Malformed,
        })?;
    if bytes.is_empty() {
        return Ok(Parsed::default());
    }
    let ct = content_type(headers);
    if ct.starts_with("application/json") {
        return match parse_json_body(&bytes) {
            Ok(Value::Object(data)) => Ok(Parsed {
                data,
                ..Parsed::default()
            }),
            Ok(Value::Null) => Ok(Parsed {
                json_null: true,
                ..Parsed::default()
            }),
            _ => Err(BindError::Malformed),
        };
    }
    if ct.starts_with("application/x-www-form-urlencoded") {
        let mut data = Map::new();
        let mut payloads = Vec::new();
        // A pair Go's form parser refuses (a broken escape, a `;`) fails the whole body.
        let (pairs, refused) = crate::http::url_pairs_checked(&String::from_utf8_lossy(&bytes));
        if refused || query_refused(query) {
            return Err(BindError::Malformed);
        }
        let mut form = FormValues::default();
        for (k, v) in pairs {
            if k == "@jsonPayload" {
                payloads.push(v);
                continue;
            }
            push(&mut data, k.clone(), infer(&v));
            form.plain.push((k, v));
        }
        merge_payloads(&mut data, &mut form, payloads)?;
        return Ok(Parsed {
            data,
            form: Some(form),
            ..Parsed::default()
        });
    }
    // Go's binder decodes XML into the endpoint's target: a record's data (a map) never takes
    // it, so it fails as a body that does not parse. (A struct target would take a well-formed
    // document, matching elements by its Go field names; ferrobase does not, see the
    // `bodies` differential's known divergences.)
    if ct.starts_with("application/xml") || ct.starts_with("text/xml") {
        return Err(BindError::Malformed);
    }
    Err(BindError::Unsupported)
}

async fn parse_multipart<S>(
    boundary: String,
    stream: S,
    storage: Option<&crate::files::Storage>,
) -> Result<Parsed, BindError>
where
    S: futures_util::Stream<Item = Result<bytes::Bytes, BindError>> + Send + 'static,
{
    // The stream's own error (too large, broken) is kept aside: multer only says it failed.
    let failed = std::sync::Arc::new(std::sync::Mutex::new(None::<BindError>));
    let seen = std::sync::Arc::clone(&failed);
    let stream = futures_util::StreamExt::map(stream, move |r| {
        r.map_err(|e| {
            if let Ok(mut slot) = seen.lock() {
                *slot = Some(e);
            }
            std::io::Error::other("body")
        })
    });
    let mut mp = multer::Multipart::new(stream, boundary);
    let why = move |_: multer::Error| {
        failed
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .unwrap_or(BindError::Malformed)
    };
    let mut data = Map::new();
    // PocketBase reads every plain part first and `@jsonPayload` on top, wherever it stood.
    let mut payloads = Vec::new();
    let mut files = Vec::new();
    let mut not_utf8 = Vec::new();
    let mut form = FormValues::default();
    while let Some(mut field) = mp.next_field().await.map_err(&why)? {
        let name = field.name().unwrap_or("").to_owned();
        // Go's reader takes a part with an empty file name for a value.
        if let Some(original) = field.file_name().filter(|n| !n.is_empty()).map(base_name) {
            let Some(storage) = storage else {
                while field.chunk().await.map_err(&why)?.is_some() {}
                continue;
            };
            let mut rx = storage
                .receive(&original)
                .await
                .map_err(|_| BindError::Malformed)?;
            while let Some(chunk) = field.chunk().await.map_err(&why)? {
                rx.write(&chunk).await.map_err(|_| BindError::Malformed)?;
            }
            files.push((name, rx.finish().await.map_err(|_| BindError::Malformed)?));
            continue;
        }
        let raw = field.bytes().await.map_err(&why)?;
        let text = crate::http::lossy_utf8(&raw);
        if name == "@jsonPayload" {
            payloads.push(text);
        } else {
            if std::str::from_utf8(&raw).is_err() {
                not_utf8.push(name.clone());
            }
            push(&mut data, name.clone(), infer(&text));
            form.plain.push((name, text));
        }
    }
    merge_payloads(&mut data, &mut form, payloads)?;
    Ok(Parsed {
        data,
        files,
        not_utf8,
        form: Some(form),
        ..Parsed::default()
    })
}

/// A form's `@jsonPayload` texts, each a JSON object (anything else refuses the body), merged
/// over the plain values in `data` (see [`merge_payload`]) and kept in `form` as sent.
fn merge_payloads(
    data: &mut Map<String, Value>,
    form: &mut FormValues,
    payloads: Vec<String>,
) -> Result<(), BindError> {
    for text in payloads {
        match parse_json_body(text.as_bytes()) {
            Ok(Value::Object(m)) => {
                form.payload.extend(m.clone());
                form.payload_conflict |= merge_payload(data, m).is_err();
            }
            _ => return Err(BindError::Malformed),
        }
    }
    Ok(())
}

/// `@jsonPayload`'s keys over the plain values, as PocketBase decodes the payload into the values
/// already read: a key a plain part also gave takes the payload's value only when it is null or
/// of the same JSON kind (a string over a string, a number over a number...); any other
/// pairing (a bool over a text part, a string over a repeated part) refuses the whole body.
fn merge_payload(
    data: &mut Map<String, Value>,
    payload: Map<String, Value>,
) -> Result<(), BindError> {
    for (k, v) in payload {
        if let Some(old) = data.get(&k) {
            let same = matches!(
                (old, &v),
                (_, Value::Null)
                    | (Value::String(_), Value::String(_))
                    | (Value::Number(_), Value::Number(_))
                    | (Value::Bool(_), Value::Bool(_))
                    | (Value::Array(_), Value::Array(_))
                    | (Value::Object(_), Value::Object(_))
            );
            if !same {
                return Err(BindError::Malformed);
            }
        }
        data.insert(k, v);
    }
    Ok(())
}

/// A part's file name as Go's multipart reader gives it: its last `/`-separated segment (a
/// name of slashes only stays `/`; a backslash is not a separator there).
fn base_name(name: &str) -> String {
    let trimmed = name.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/".to_owned();
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_values_are_inferred_like_pocketbase() {
        assert_eq!(infer("7"), Value::from(7));
        assert_eq!(infer("007"), Value::from("007"));
        assert_eq!(infer("1e3"), Value::from("1e3"));
        assert_eq!(infer("true"), Value::Bool(true));
        assert_eq!(infer(""), Value::from(""));
    }

    #[tokio::test]
    async fn json_payload_overrides_plain_parts_sent_after_it() {
        let body = "--b\r\nContent-Disposition: form-data; name=\"@jsonPayload\"\r\n\r\n\
            {\"nick\":\"from payload\",\"n\":1}\r\n--b\r\nContent-Disposition: form-data; \
            name=\"nick\"\r\n\r\nplain\r\n--b\r\nContent-Disposition: form-data; \
            name=\"age\"\r\n\r\n7\r\n--b--\r\n";
        let once =
            futures_util::stream::once(async move { Ok::<_, BindError>(bytes::Bytes::from(body)) });
        let p = parse_multipart("b".into(), once, None)
            .await
            .expect("parses");
        assert_eq!(p.data["nick"], "from payload");
        assert_eq!(p.data["n"], 1);
        assert_eq!(p.data["age"], 7);
    }

    #[test]
    fn a_payload_key_over_a_plain_value_of_another_kind_refuses_the_body() {
        use serde_json::json;
        let merged = |plain: Value, payload: Value| {
            let mut data = Map::new();
            data.insert("t".into(), plain);
            let Value::Object(m) = json!({"t": payload}) else {
                unreachable!()
            };
            merge_payload(&mut data, m).map(|()| data["t"].clone())
        };
        // As the reference answers (checked on the 0.40.6 binary).
        assert_eq!(merged(json!("plain"), json!("ok")).ok(), Some(json!("ok")));
        assert_eq!(merged(json!(1), json!(2)).ok(), Some(json!(2)));
        assert_eq!(merged(json!(true), json!(false)).ok(), Some(json!(false)));
        assert_eq!(merged(json!("plain"), Value::Null).ok(), Some(Value::Null));
        for (plain, payload) in [
            (json!("plain"), json!(true)),
            (json!("plain"), json!(1)),
            (json!("plain"), json!(["x"])),
            (json!("plain"), json!({"a": 1})),
            (json!(""), json!(1.5)),
            (json!(["a", "b"]), json!("s")),
        ] {
            assert!(merged(plain, payload).is_err());
        }
    }

    #[tokio::test]
    async fn multipart_text_parts_that_are_not_utf8_are_named() {
        let body = b"--b\r\nContent-Disposition: form-data; name=\"j\"\r\n\r\n\xff\xfea\xc3\r\n\
            --b\r\nContent-Disposition: form-data; name=\"t\"\r\n\r\n\xef\xbf\xbd\r\n--b--\r\n";
        let once = futures_util::stream::once(async move {
            Ok::<_, BindError>(bytes::Bytes::from_static(body))
        });
        let p = parse_multipart("b".into(), once, None)
            .await
            .expect("parses");
        assert_eq!(p.data["j"], "\u{fffd}\u{fffd}a\u{fffd}");
        // A genuine U+FFFD is UTF-8.
        assert_eq!(p.data["t"], "\u{fffd}");
        assert_eq!(p.not_utf8, vec!["j".to_owned()]);
    }

    #[test]
    fn urlencoded_pairs_decode() {
        let p = crate::http::url_pairs("a=1&b=x+y&c=%41%42&tags=a&tags=b");
        assert_eq!(p[1], ("b".into(), "x y".into()));
        assert_eq!(p[2], ("c".into(), "AB".into()));
        let mut m = Map::new();
        for (k, v) in p {
            push(&mut m, k, infer(&v));
        }
        assert_eq!(m["tags"], serde_json::json!(["a", "b"]));
    }

    #[test]
    fn pairs_go_refuses_are_left_out_and_reported() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
        let cases: [Case; 7] = [
            ("a=%zz&b=1", &[("b", "1")], true),
            ("a=%4", &[], true),
            ("b=2&a=%", &[("b", "2")], true),
            ("%zz=1", &[], true),
            ("a=1;b=2&c=3", &[("c", "3")], true),
            ("a=%41&=x&k&&", &[("a", "A"), ("", "x"), ("k", "")], false),
            ("a=%e2%82%AC+b", &[("a", "€ b")], false),
        ];
        for (q, want, refused) in cases {
            let (got, r) = crate::http::url_pairs_checked(q);
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect();
            assert_eq!((got, r), (want, refused), "{q}");
        }
    }
}
