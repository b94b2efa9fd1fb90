//! `POST /api/batch`: PocketBase's transactional batch of record writes. This handler binds
//! and checks the request, matches each inner request to its records action, and shapes the
//! answers; the writes themselves are the records area's single-request writes, run in one
//! transaction by `records::batch`.

use super::body;
use super::error::{ApiError, ApiResult, MSG_MISSING_COLLECTION};
use super::records::written_json;
use super::{Caller, Shared, caller, client_ip, query_map};
use crate::files::Upload;
use crate::records::json::FieldsFilter;
use crate::records::{self, Access, Action, Gate, batch::Batch};
use crate::schema::Collection;
use crate::store::StoreRecord;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

const MSG_NOT_ALLOWED: &str = "Batch requests are not allowed.";
const MSG_READ_FAILED: &str = "Failed to read the submitted batch data.";
const MSG_INVALID: &str = "Invalid batch request data.";
const MSG_FAILED: &str = "Batch transaction failed.";
/// Inner URLs longer than this (in characters) are refused, as PocketBase refuses them.
const URL_CHARS_MAX: usize = 2000;

/// One inner request as the client sent it.
#[derive(Default)]
struct Inner {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Map<String, Value>,
}

/// The key of a bound object as Go's JSON binding finds `name`: the exact name, else one equal
/// ignoring case; two candidates for one name refuse the body.
fn key_of(m: &Map<String, Value>, name: &str) -> Result<Option<String>, ()> {
    if m.contains_key(name) {
        return Ok(Some(name.to_owned()));
    }
    let mut found = m.keys().filter(|k| k.eq_ignore_ascii_case(name));
    match (found.next(), found.next()) {
        (Some(k), None) => Ok(Some(k.clone())),
        (None, _) => Ok(None),
        (Some(_), Some(_)) => Err(()),
    }
}

/// [`key_of`]'s value, taken out of the object (the bodies are moved, not copied).
fn take(m: &mut Map<String, Value>, name: &str) -> Result<Option<Value>, ()> {
    Ok(key_of(m, name)?.and_then(|k| m.remove(&k)))
}

fn text(v: Option<Value>) -> Result<String, ()> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(()),
    }
}

/// Bind `{"requests": [{method, url, headers, body}, ...]}` with PocketBase's types: a wrong
/// type anywhere refuses the whole body.
fn bind(mut data: Map<String, Value>) -> Result<Vec<Inner>, ()> {
    let items = match take(&mut data, "requests")? {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(()),
    };
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut m = match item {
            // PocketBase answers 500 for a null item; an empty one is refused as invalid here.
            Value::Null => {
                out.push(Inner::default());
                continue;
            }
            Value::Object(m) => m,
            _ => return Err(()),
        };
        let headers = match take(&mut m, "headers")? {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(h)) => h
                .into_iter()
                .map(|(k, v)| Ok((k, text(Some(v))?)))
                .collect::<Result<_, ()>>()?,
            Some(_) => return Err(()),
        };
        let body = match take(&mut m, "body")? {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(b)) => b,
            Some(_) => return Err(()),
        };
        out.push(Inner {
            method: text(take(&mut m, "method")?)?,
            url: text(take(&mut m, "url")?)?,
            headers,
            body,
        });
    }
    Ok(out)
}

/// The file parts of a multipart batch, handed to their requests as PocketBase hands them:
/// a part named `requests.N.KEY` or `requests[N].KEY` is request N's upload under `KEY` (which
/// replaces any `KEY` of that request's body), resubmitted under its stored name; parts naming
/// no request are dropped (their temporary files go with them).
fn uploads_by_request(
    items: &mut [Inner],
    files: Vec<(String, Upload)>,
) -> Vec<Vec<(String, Upload)>> {
    let mut out: Vec<Vec<(String, Upload)>> = items.iter().map(|_| Vec::new()).collect();
    for (part, up) in files {
        let Some(rest) = part.strip_prefix("requests") else {
            continue;
        };
        let (index, key) = if let Some(r) = rest.strip_prefix('.') {
            match r.split_once('.') {
                Some(x) => x,
                None => continue,
            }
        } else if let Some(r) = rest.strip_prefix('[') {
            match r.split_once("].") {
                Some(x) => x,
                None => continue,
            }
        } else {
            continue;
        };
        // Go's strconv.Itoa(i) is what the prefix is built from: no sign, no leading zero.
        if index.is_empty() || (index.len() > 1 && index.starts_with('0')) {
            continue;
        }
        let Some(i) = index
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| index.parse::<usize>().ok())
            .flatten()
            .filter(|&i| i < items.len())
        else {
            continue;
        };
        items[i].body.remove(key);
        out[i].push((key.to_owned(), up.resubmitted()));
    }
    out
}

fn verr(code: &str, message: &str) -> Value {
    json!({"code": code, "message": message})
}

fn too_long(max: usize) -> Value {
    json!({"code": "validation_length_too_long",
           "message": format!("The length must be no more than {max}."),
           "params": {"max": max, "min": 0}})
}

/// PocketBase's checks of the batch form: at least one request, at most `max`, each with a
/// method it knows and a URL.
fn validate(items: &[Inner], max: usize) -> Option<Map<String, Value>> {
    let mut data = Map::new();
    if items.is_empty() {
        data.insert(
            "requests".into(),
            verr("validation_required", "Cannot be blank."),
        );
        return Some(data);
    }
    if items.len() > max {
        data.insert("requests".into(), too_long(max));
        return Some(data);
    }
    let mut by_index = Map::new();
    for (i, item) in items.iter().enumerate() {
        let mut e = Map::new();
        if item.method.is_empty() {
            e.insert(
                "method".into(),
                verr("validation_required", "Cannot be blank."),
            );
        } else if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&item.method.as_str()) {
            e.insert(
                "method".into(),
                verr("validation_in_invalid", "Must be a valid value."),
            );
        }
        if item.url.is_empty() {
            e.insert(
                "url".into(),
                verr("validation_required", "Cannot be blank."),
            );
        } else if item.url.chars().count() > URL_CHARS_MAX {
            e.insert("url".into(), too_long(URL_CHARS_MAX));
        }
        if !e.is_empty() {
            by_index.insert(i.to_string(), Value::Object(e));
        }
    }
    if by_index.is_empty() {
        return None;
    }
    data.insert("requests".into(), Value::Object(by_index));
    Some(data)
}

/// The records actions a batch may run.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Create,
    Upsert,
    Update,
    Delete,
}

/// What an inner request asks: the action, the collection and record as written in its URL
/// (not decoded, as PocketBase takes them) and its query string.
struct Target<'a> {
    kind: Kind,
    collection: &'a str,
    id: &'a str,
    path: &'a str,
    query: Option<&'a str>,
}

static COLLECTION_RECORDS: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^/api/collections/([^/?]+)/records(?:/([^/?]+))?(\?.*)?$")
        .expect("static regex")
});

fn target<'a>(method: &str, url: &'a str) -> Option<Target<'a>> {
    let m = COLLECTION_RECORDS.captures(url)?;
    let id = m.get(2).map(|g| g.as_str());
    let kind = match (method, id) {
        ("POST", None) => Kind::Create,
        ("PUT", None) => Kind::Upsert,
        ("PATCH", Some(_)) => Kind::Update,
        ("DELETE", Some(_)) => Kind::Delete,
        _ => return None,
    };
    let query = m.get(3).map(|q| &q.as_str()[1..]);
    Some(Target {
        kind,
        collection: m.get(1).map_or("", |g| g.as_str()),
        id: id.unwrap_or(""),
        path: &url[..url.len() - query.map_or(0, |q| q.len() + 1)],
        query,
    })
}

/// The inner request's headers: the batch request's, with its own on top (never its own
/// `Authorization`: every inner request runs as the batch's caller).
fn inner_headers(base: &HeaderMap, own: &[(String, String)]) -> HeaderMap {
    let mut h = base.clone();
    for (k, v) in own {
        if k.eq_ignore_ascii_case("authorization") {
            continue;
        }
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            h.insert(name, value);
        }
    }
    h.remove(header::CONTENT_TYPE);
    h
}

/// An inner request's facts, owned for as long as its access is borrowed from them.
struct Facts<'a> {
    /// What its method and URL ask (None: an action a batch does not run).
    target: Option<Target<'a>>,
    headers: HeaderMap,
    query: Map<String, Value>,
}

/// A write done, waiting for the commit before its answer is written.
struct Done {
    status: StatusCode,
    record: Option<(Arc<Collection>, StoreRecord, Option<FieldsFilter>)>,
}

/// The value a PUT's `body.id` names (numbers and booleans as their text, as PocketBase casts).
fn upsert_id(body: &Map<String, Value>) -> String {
    match body.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// Who runs the batch: what every inner request shares.
struct Runner<'a> {
    state: &'a Shared,
    batch: &'a Batch<'a>,
    who: Option<&'a Caller>,
    ip: Option<&'a str>,
    extensions: &'a axum::http::Extensions,
}

/// Run one inner request in the batch: what its single form runs, as the batch's caller.
async fn run_one(
    run: &Runner<'_>,
    item: &Inner,
    facts: &Facts<'_>,
    uploads: Vec<(String, Upload)>,
    first: bool,
) -> Result<Done, ApiError> {
    let (state, batch, who, ip, extensions) =
        (run.state, run.batch, run.who, run.ip, run.extensions);
    // An action PocketBase's batch does not know fails as its unknown-action error does: a
    // plain error, which PocketBase answers with 400 for the first request and, passed back
    // through the previous request's handler, with 500 for any later one.
    let t = facts.target.as_ref().ok_or_else(|| {
        if first {
            ApiError::bad_request()
        } else {
            ApiError::internal()
        }
    })?;
    let c = state
        .store
        .schema()
        .by_id_or_name(t.collection)
        .cloned()
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, MSG_MISSING_COLLECTION))?;
    let tag = match t.kind {
        Kind::Create => "create",
        Kind::Update => "update",
        Kind::Delete => "delete",
        // PocketBase decides an upsert's action after its limiter ran with the create tag.
        Kind::Upsert => "create",
    };
    super::rate_limit::check_collection(
        state,
        &super::rate_limit::Asking {
            method: &item.method,
            path: t.path,
            headers: &facts.headers,
            extensions,
        },
        who,
        &c,
        &[tag],
    )?;
    let access = Access::request(who, &item.method, t.path, &facts.headers, &facts.query, ip)
        .in_context("batch");
    let mut kind = t.kind;
    let mut id = t.id.to_owned();
    if kind == Kind::Upsert {
        id = upsert_id(&item.body);
        kind = if !id.is_empty() && batch.exists(&c, &id).await? {
            Kind::Update
        } else {
            Kind::Create
        };
    }
    let writer = batch.writer(&access);
    if kind == Kind::Delete {
        writer.delete(&c, id).await?;
        return Ok(Done {
            status: StatusCode::NO_CONTENT,
            record: None,
        });
    }
    let action = if kind == Kind::Create {
        Action::Create
    } else {
        Action::Update
    };
    if c.is_view() {
        return Err(ApiError::bad("Unsupported collection type."));
    }
    if records::gate(&c, action, &access) == Gate::SuperusersOnly {
        return Err(ApiError::superusers_only());
    }
    let fields = FieldsFilter::parse(facts.query.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    let saved = if kind == Kind::Create {
        writer.create_with(&c, &item.body, uploads, &[]).await?
    } else {
        writer.update_with(&c, id, &item.body, uploads, &[]).await?
    };
    Ok(Done {
        status: StatusCode::OK,
        record: Some((c, saved, fields)),
    })
}

/// How the batch failed at request `index`: PocketBase's envelope around that request's own
/// error answer.
fn failed_at(index: usize, e: ApiError) -> ApiError {
    let response = json!({"data": e.data, "message": e.message, "status": e.status.as_u16()});
    let mut by_index = Map::new();
    by_index.insert(
        index.to_string(),
        json!({"code": "batch_request_failed", "message": "Batch request failed.", "response": response}),
    );
    let mut data = Map::new();
    data.insert("requests".into(), Value::Object(by_index));
    ApiError::with_data(StatusCode::BAD_REQUEST, MSG_FAILED, data)
}

pub(crate) async fn batch(State(state): State<Shared>, request: Request) -> ApiResult<Response> {
    let limits = state.settings.current().batch.clone();
    if !limits.enabled || limits.max_requests <= 0 {
        return Err(ApiError::new(StatusCode::FORBIDDEN, MSG_NOT_ALLOWED));
    }
    let timeout = Duration::from_secs(
        u64::try_from(limits.timeout)
            .ok()
            .filter(|&s| s > 0)
            .unwrap_or(3),
    );
    let (head, body) = request.into_parts();
    let parsed = body::parse_with_files(
        &head.headers,
        head.uri.query(),
        body,
        limits.body_bytes_max(),
        &state.records.files,
    )
    .await
    .map_err(|e| e.answer(MSG_READ_FAILED, MSG_READ_FAILED))?;
    let mut items = bind(parsed.data).map_err(|()| ApiError::bad(MSG_READ_FAILED))?;
    let mut uploads = uploads_by_request(&mut items, parsed.files);
    let max = usize::try_from(limits.max_requests).unwrap_or(usize::MAX);
    if let Some(data) = validate(&items, max) {
        return Err(ApiError::with_data(
            StatusCode::BAD_REQUEST,
            MSG_INVALID,
            data,
        ));
    }

    let who = caller(&state, &head.headers).await;
    let ip = client_ip(&state.settings.peek(), &head.headers, &head.extensions);
    let ip = (!ip.is_empty()).then_some(ip);
    let facts: Vec<Facts> = items
        .iter()
        .map(|item| {
            let target = target(&item.method, &item.url);
            Facts {
                headers: inner_headers(&head.headers, &item.headers),
                query: query_map(target.as_ref().and_then(|t| t.query)),
                target,
            }
        })
        .collect();

    // The whole transaction, bounded: when the time is up the batch is dropped, which rolls
    // it back and frees the writer.
    let run = async {
        let batch = Batch::begin(&state.records).await?;
        let mut done = Vec::with_capacity(items.len());
        for (i, ((item, f), up)) in items.iter().zip(&facts).zip(&mut uploads).enumerate() {
            let runner = Runner {
                state: &state,
                batch: &batch,
                who: who.as_ref(),
                ip: ip.as_deref(),
                extensions: &head.extensions,
            };
            match run_one(&runner, item, f, std::mem::take(up), i == 0).await {
                Ok(d) => done.push(d),
                Err(e) => return Ok(Err(failed_at(i, e))),
            }
        }
        batch.commit().await?;
        Ok::<_, records::RecordError>(Ok(done))
    };
    let done = match tokio::time::timeout(timeout, run).await {
        Err(_) => {
            tracing::info!(
                seconds = timeout.as_secs(),
                "batch transaction timed out; rolled back"
            );
            return Err(ApiError::bad(MSG_FAILED));
        }
        Ok(outcome) => outcome??,
    };
    // Committed: its uploads and deletes on S3 are done before it answers (outside the
    // transaction's timeout, which no longer applies).
    state.records.files.settle_all().await;

    // Committed: the answers, each as its single request would have answered.
    let mut out = Vec::with_capacity(done.len());
    for ((d, item), f) in done.into_iter().zip(&items).zip(&facts) {
        let body = match d.record {
            None => Value::Null,
            Some((c, saved, fields)) => {
                let path = f.target.as_ref().map_or("", |t| t.path);
                let access = Access::request(
                    who.as_ref(),
                    &item.method,
                    path,
                    &f.headers,
                    &f.query,
                    ip.as_deref(),
                )
                .in_context("batch");
                let access = access.with_body(&item.body);
                written_json(&state, &c, saved, &access, &f.query, &fields).await?
            }
        };
        out.push(json!({"body": body, "status": d.status.as_u16()}));
    }
    Ok(super::ok_json(&Value::Array(out)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_urls_match_pocketbases_actions() {
        let t = target("POST", "/api/collections/posts/records?fields=id").unwrap();
        assert!(t.kind == Kind::Create && t.collection == "posts" && t.query == Some("fields=id"));
        assert_eq!(t.path, "/api/collections/posts/records");
        let t = target("PATCH", "/api/collections/posts/records/abc").unwrap();
        assert!(t.kind == Kind::Update && t.id == "abc" && t.query.is_none());
        assert!(
            target("PUT", "/api/collections/posts/records").is_some_and(|t| t.kind == Kind::Upsert)
        );
        assert!(
            target("DELETE", "/api/collections/p/records/x?y=1")
                .is_some_and(|t| t.kind == Kind::Delete)
        );
        for (m, u) in [
            ("GET", "/api/collections/posts/records"),
            ("POST", "/api/health"),
            ("POST", "/api/collections/posts/records/abc"),
            ("PATCH", "/api/collections/posts/records"),
            ("DELETE", "/api/collections/posts/records/a/b"),
            ("POST", "/api/collections//records"),
        ] {
            assert!(target(m, u).is_none(), "{m} {u}");
        }
    }

    #[test]
    fn the_form_binds_with_go_types() {
        let bind_json = |s: &str| {
            let Value::Object(m) = serde_json::from_str::<Value>(s).unwrap() else {
                panic!()
            };
            bind(m)
        };
        assert!(bind_json(r#"{"requests": 5}"#).is_err());
        assert!(bind_json(r#"{"requests": [5]}"#).is_err());
        assert!(bind_json(r#"{"requests": [{"body": [1]}]}"#).is_err());
        assert!(bind_json(r#"{"requests": [{"headers": {"a": 1}}]}"#).is_err());
        let items =
            bind_json(r#"{"REQUESTS": [{"METHOD": "POST", "Url": "/x", "body": {"a": 1}}]}"#)
                .unwrap();
        assert_eq!(items[0].method, "POST");
        assert_eq!(items[0].url, "/x");
        assert_eq!(items[0].body["a"], 1);
        assert!(bind_json(r#"{}"#).unwrap().is_empty());
    }
}
