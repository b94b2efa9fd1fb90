//! `/api/collections/{collection}/records`: list, view, create, update, delete. Each handler
//! shows its steps in order: extract, call the record layer, respond. What a record operation
//! means (rules, validation, hooks) lives in `records`; what is HTTP (the response cache,
//! bodies, the bytes of the answer) lives here.

use super::body;
use super::cache::ResponseEntry;
use super::error::{ApiError, ApiResult, MSG_MISSING_COLLECTION};
use super::{Caller, Shared, caller, ok_json, query_map};
use crate::config::Limits;
use crate::query::{self, Select};
use crate::records::json::{FieldsFilter, Viewer, key_order, record_json, write_record};
use crate::records::{self, Access, Action, Gate, Writer, read};
use crate::schema::value;
use crate::schema::{Collection, Schema};
use crate::store::StoreRecord;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value};
use std::sync::Arc;

/// A record write whose multipart body has no bytes at all.
const MSG_READ_FAILED: &str = "Failed to read the submitted data.";

pub(crate) fn paging(q: &Map<String, Value>, limits: &Limits) -> ApiResult<(i64, i64)> {
    let int = |k: &str, default: i64| -> ApiResult<i64> {
        match q.get(k).and_then(Value::as_str) {
            None | Some("") => Ok(default),
            Some(s) => s.parse::<i64>().map_err(|_| ApiError::bad_request()),
        }
    };
    let page = int("page", 1)?.max(1);
    let mut per_page = int("perPage", limits.page_size_default)?;
    if per_page <= 0 {
        per_page = limits.page_size_default;
    }
    Ok((page, per_page.min(limits.page_size_max)))
}

/// Go's `strconv.ParseBool`, as PocketBase parses `skipTotal`.
pub(crate) fn skip_total(q: &Map<String, Value>) -> ApiResult<bool> {
    match q.get("skipTotal").and_then(Value::as_str) {
        None | Some("") => Ok(false),
        Some(s) => value::go_parse_bool(s).ok_or_else(ApiError::bad_request),
    }
}

/// `settings.rateLimits` for this collection and action (nothing while rate limits are off).
fn limit<B>(
    state: &Shared,
    request: &axum::http::Request<B>,
    who: Option<&Caller>,
    c: &Collection,
    action: &str,
) -> ApiResult<()> {
    super::rate_limit::check_collection(
        state,
        &super::rate_limit::Asking {
            method: request.method().as_str(),
            path: request.uri().path(),
            headers: request.headers(),
            extensions: request.extensions(),
        },
        who,
        c,
        &[action],
    )
}

/// The same for a request already split into its head.
fn limit_head(
    state: &Shared,
    head: &Parts,
    who: Option<&Caller>,
    c: &Collection,
    action: &str,
) -> ApiResult<()> {
    super::rate_limit::check_collection(
        state,
        &super::rate_limit::Asking {
            method: head.method.as_str(),
            path: head.uri.path(),
            headers: &head.headers,
            extensions: &head.extensions,
        },
        who,
        c,
        &[action],
    )
}

fn collection_in(schema: &Schema, key: &str, message: &str) -> ApiResult<Arc<Collection>> {
    schema
        .by_id_or_name(key)
        .cloned()
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, message))
}

fn shape(
    c: &Collection,
    row: StoreRecord,
    view: &Viewer,
    fields: &Option<FieldsFilter>,
    expand: Option<Map<String, Value>>,
) -> Value {
    let mut m = record_json(c, row, view);
    if let Some(e) = expand {
        m.insert("expand".into(), Value::Object(e));
    }
    Value::Object(match fields {
        Some(f) => f.apply(m),
        None => m,
    })
}

/// The parts of a GET the read handlers use, borrowed from the request (no copies of the
/// header map or the query string on the hot path).
fn get_parts(request: &Request) -> (&Method, &str, &HeaderMap, Option<&str>) {
    (
        request.method(),
        request.uri().path(),
        request.headers(),
        request.uri().query(),
    )
}

pub(crate) async fn list(
    State(state): State<Shared>,
    Path(key): Path<String>,
    mut request: Request,
) -> ApiResult<Response> {
    let sent = body::take_body(&mut request);
    let (method, path, headers, raw) = get_parts(&request);
    // Taken before anything is read: a cached answer built from these reads is valid only while
    // nothing it read changed after this point.
    let stamp = state.store.changes().stamp();
    let schema = state.store.schema();
    let c = collection_in(&schema, &key, MSG_MISSING_COLLECTION)?;
    let who = caller(&state, headers).await;
    limit(&state, &request, who.as_ref(), &c, "list")?;
    body::check_info_body(
        request.uri(),
        method,
        headers,
        sent,
        state.cfg.http.body_bytes_max,
    )
    .await?;
    let cache_key = response_key("list", &c, "", raw, who.as_ref());
    let (_leader, stamp) =
        match cached_or_lead(&state, &cache_key, stamp, who.as_ref(), headers).await {
            Ok(hit) => return Ok(hit),
            Err(lead) => lead,
        };
    let q = query_map(raw);
    let access = Access::request(who.as_ref(), method.as_str(), path, headers, &q, None);
    let text = |k: &str| q.get(k).and_then(Value::as_str);
    let sel = read::list_select(&schema, &c, &access, text("filter"), text("sort"))?;
    let (page, per_page) = paging(&q, &state.cfg.limits)?;
    let skip = skip_total(&q)?;
    let fields = FieldsFilter::parse(text("fields")).map_err(|_| ApiError::bad_request())?;
    let expand = read::expanding(&schema, &access, text("expand"));
    let manage = read::manage_select(&schema, &c, access.info());
    let deps = cache_deps(
        &schema,
        &c,
        Some(&sel),
        expand.is_some(),
        who.as_ref(),
        false,
    )
    .and_then(|d| d.reading(manage.as_ref()));
    let mut view = access.viewer();
    let rule = c
        .rules
        .list
        .as_deref()
        .filter(|_| !who.as_ref().is_some_and(|w| w.is_superuser()));
    let watch = state
        .records
        .advisor
        .watch(text("filter"), text("sort"), rule);
    let found = read::page(
        &state.store,
        &c,
        sel,
        (page, per_page),
        skip,
        expand,
        manage,
        watch,
    )
    .await?;
    view.managed = found.managed.map(Arc::new);
    let total = found.total;
    let pages = if total < 0 {
        -1
    } else {
        (total + per_page - 1) / per_page
    };
    // Rows go straight to bytes; only `fields` and `expand` need the JSON values first.
    let mut out: Vec<u8> = Vec::with_capacity(256 + found.rows.len() * 512);
    out.extend_from_slice(b"{\"items\":[");
    let order = key_order(&c);
    for (i, (r, e)) in found.rows.into_iter().zip(found.expanded).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if fields.is_none() && e.is_none() {
            write_record(&mut out, &c, &order, r, &view);
        } else {
            crate::schema::value::write_go_json(&mut out, &shape(&c, r, &view, &fields, e));
        }
    }
    out.extend_from_slice(
        format!("],\"page\":{page},\"perPage\":{per_page},\"totalItems\":{total},\"totalPages\":{pages}}}")
            .as_bytes(),
    );
    let body = Bytes::from(out);
    remember(&state, cache_key, stamp, deps, &body, None);
    Ok(json_bytes(body))
}

/// A cached response, or else (after waiting for an identical request already computing it)
/// the right to compute it: the guard lets the waiters go when dropped.
/// A cached answer for `key`, or the right to compute it with the stamp to keep it under.
///
/// One request computes a missing answer at a time; the others wait for it. A waiter takes the
/// answer when it is still valid, or when its computation began after the waiter arrived
/// (`arrival`, its stamp): it then reflects every write that finished before the waiter was
/// sent, whatever was written since. Otherwise the waiter tries again, to lead or to wait for
/// the next computation, so that under a stream of writes one computation at a time serves
/// everyone waiting instead of each of them scanning at once. A leader's stamp is taken when it
/// starts computing, unless the schema or its caller's collection (read on arrival) changed
/// meanwhile: then its arrival stamp.
async fn cached_or_lead<'a>(
    state: &'a Shared,
    key: &str,
    arrival: crate::store::Stamp,
    who: Option<&Caller>,
    headers: &axum::http::HeaderMap,
) -> Result<Response, (Option<super::cache::Leader<'a>>, crate::store::Stamp)> {
    /// Rounds of waiting before a request computes on its own.
    const ROUNDS: usize = 4;
    let changes = state.store.changes();
    if let Some(body) = state.caches.response(changes, key) {
        return Ok(json_bytes(body));
    }
    for _ in 0..ROUNDS {
        match state.caches.lead_or_wait(key).await {
            Some(leader) => {
                let now = changes.stamp();
                let read_on_arrival = match who {
                    Some(w) => vec![
                        "_collections".to_owned(),
                        w.collection.name.to_ascii_lowercase(),
                    ],
                    // A token that named no one may name someone after a write.
                    None if headers.contains_key(axum::http::header::AUTHORIZATION) => {
                        return Err((Some(leader), arrival));
                    }
                    None => vec!["_collections".to_owned()],
                };
                let unchanged =
                    changes.unchanged_since(arrival, read_on_arrival.iter().map(String::as_str));
                return Err((Some(leader), if unchanged { now } else { arrival }));
            }
            None if !state.caches.responses.enabled() => return Err((None, arrival)),
            None => match state.caches.response_since(changes, key, arrival) {
                Some(Some(body)) => return Ok(json_bytes(body)),
                // Too old for this request: the next computation will not be.
                Some(None) => {}
                // The leader kept nothing (an answer that may not be cached): compute.
                None => return Err((None, arrival)),
            },
        }
    }
    Err((None, arrival))
}

/// The response cache's key: route kind, collection, record id, raw query string and caller.
fn response_key(
    kind: &str,
    c: &Collection,
    id: &str,
    raw: Option<&str>,
    who: Option<&Caller>,
) -> String {
    let caller = match who {
        Some(w) => format!("{}:{}", w.collection.id, w.id()),
        None => String::new(),
    };
    format!("{kind}\0{}\0{id}\0{}\0{caller}", c.id, raw.unwrap_or(""))
}

/// What a cached response depends on.
struct Deps {
    tables: Vec<String>,
    row_tables: Vec<String>,
}

impl Deps {
    /// Also what the `manageRule` statement deciding the answer's emails reads (None: the
    /// answer must not be cached, the rule reads headers or the clock). A one-row answer's
    /// table becomes a plain dependency: the rule may read the collection's other records.
    fn reading(mut self, manage: Option<&Select>) -> Option<Self> {
        let Some(m) = manage else {
            return Some(self);
        };
        if m.volatile {
            return None;
        }
        self.tables.append(&mut self.row_tables);
        self.tables
            .extend(m.tables.iter().map(|t| t.to_ascii_lowercase()));
        Some(self)
    }
}

/// What a response read, for the cache; None when it must not be cached at all. `one_row`:
/// the response shows one known row of the base table (a view), so inserts there cannot
/// change it, only updates and deletes of that row can.
/// `sel`: the compiled statement, when there is one (a view without a rule has none: it reads
/// only its own table).
fn cache_deps(
    schema: &Schema,
    c: &Collection,
    sel: Option<&Select>,
    expand: bool,
    who: Option<&Caller>,
    one_row: bool,
) -> Option<Deps> {
    if sel.is_some_and(|s| s.volatile) {
        return None;
    }
    let mut tables = sel.map_or_else(|| vec![c.name.clone()], |s| s.tables.clone());
    // A view collection is an SQLite view: a write to a table it reads touches that table, never
    // the view's name, so nothing would tell a cached answer that read a view is stale. Such
    // answers are not cached (nor expansions while any view exists: one may be reached).
    let is_view = |name: &str| schema.by_name(name).is_some_and(|v| v.is_view());
    if tables.iter().any(|t| is_view(t))
        || (expand && schema.collections.iter().any(|v| v.is_view()))
    {
        return None;
    }
    let mut row_tables = Vec::new();
    // Only a rule that reads nothing but the row itself (no join: a self-relation or
    // `@collection` of the same table reads its other rows) leaves the answer to that row.
    if one_row && !expand && tables.len() == 1 && sel.is_none_or(|s| s.joins.is_empty()) {
        row_tables = std::mem::take(&mut tables);
    }
    tables.push("_collections".into());
    if let Some(w) = who {
        tables.push(w.collection.name.clone());
    }
    if expand {
        // Expansion may read any collection through any viewRule: depend on all of them, and
        // do not cache when one of those rules reads headers or the clock.
        for c in &schema.collections {
            if c.rules.view.as_deref().is_some_and(query::is_volatile_text)
                || records::manage_rule_text(c).is_some_and(query::is_volatile_text)
            {
                return None;
            }
            tables.push(c.name.clone());
        }
    }
    // The change feed keys tables by lowercase name; lowercase once here, not on every hit.
    for t in tables.iter_mut().chain(row_tables.iter_mut()) {
        t.make_ascii_lowercase();
    }
    Some(Deps { tables, row_tables })
}

fn remember(
    state: &Shared,
    key: String,
    stamp: crate::store::Stamp,
    deps: Option<Deps>,
    body: &Bytes,
    row: Option<i64>,
) {
    if let Some(d) = deps {
        state.caches.keep_response(
            key,
            ResponseEntry {
                body: body.clone(),
                stamp,
                tables: d.tables,
                row_tables: d.row_tables,
                row,
            },
        );
    }
}

fn json_bytes(body: Bytes) -> Response {
    let mut res = (StatusCode::OK, body).into_response();
    res.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    res
}

pub(crate) async fn view(
    State(state): State<Shared>,
    Path((key, id)): Path<(String, String)>,
    mut request: Request,
) -> ApiResult<Response> {
    let sent = body::take_body(&mut request);
    let (method, path, headers, raw) = get_parts(&request);
    let stamp = state.store.changes().stamp();
    let schema = state.store.schema();
    let c = collection_in(&schema, &key, MSG_MISSING_COLLECTION)?;
    let who = caller(&state, headers).await;
    limit(&state, &request, who.as_ref(), &c, "view")?;
    body::check_info_body(
        request.uri(),
        method,
        headers,
        sent,
        state.cfg.http.body_bytes_max,
    )
    .await?;
    let cache_key = response_key("view", &c, &id, raw, who.as_ref());
    let (_leader, stamp) =
        match cached_or_lead(&state, &cache_key, stamp, who.as_ref(), headers).await {
            Ok(hit) => return Ok(hit),
            Err(lead) => lead,
        };
    let q = query_map(raw);
    let access = Access::request(who.as_ref(), method.as_str(), path, headers, &q, None);
    let rule = records::condition(&schema, &c, Action::View, &access)?;
    let manage = read::manage_select(&schema, &c, access.info());
    let deps = cache_deps(
        &schema,
        &c,
        rule.as_ref(),
        q.contains_key("expand"),
        who.as_ref(),
        true,
    )
    .and_then(|d| d.reading(manage.as_ref()));
    let expand = read::expanding(&schema, &access, q.get("expand").and_then(Value::as_str));
    // A view that reads only its own row is kept until that row changes (its rowid says which).
    let by_row = deps.as_ref().is_some_and(|d| !d.row_tables.is_empty());
    let (row, expanded, managed, rowid) =
        read::view(&state.store, &c, id, rule, expand, manage, by_row).await?;
    // As in PocketBase, `fields` is read when the answer is written: a record that is not
    // there (or not visible) is a 404 before a bad `fields` is a 400.
    let fields = FieldsFilter::parse(q.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    let mut view = access.viewer();
    view.owner_view = managed;
    let body = Bytes::from(crate::schema::value::go_json(&shape(
        &c, row, &view, &fields, expanded,
    )));
    remember(&state, cache_key, stamp, deps, &body, rowid);
    Ok(json_bytes(body))
}

/// What create and update share before they diverge: the collection (not a view), the caller,
/// the `null`-rule check, the query parameters and the parsed body.
struct WriteRequest {
    c: Arc<Collection>,
    who: Option<Caller>,
    q: Map<String, Value>,
    fields: Option<FieldsFilter>,
    data: Map<String, Value>,
    /// File parts, received into the storage's temporary folder, by part name.
    uploads: Vec<(String, crate::files::Upload)>,
    /// Form values whose bytes were not UTF-8 (read with U+FFFD), by body key.
    not_utf8: Vec<String>,
}

async fn write_request(
    state: &Shared,
    key: &str,
    head: &Parts,
    body: Body,
    action: Action,
) -> ApiResult<WriteRequest> {
    let (method, headers, raw) = (&head.method, &head.headers, head.uri.query());
    // PocketBase words the unknown collection of a write this way, for create and update alike.
    let c = collection_in(
        &state.store.schema(),
        key,
        "Missing or invalid collection context.",
    )?;
    if c.is_view() {
        return Err(ApiError::bad("Unsupported collection type."));
    }
    let who = caller(state, headers).await;
    let tag = if action == Action::Create {
        "create"
    } else {
        "update"
    };
    limit_head(state, head, who.as_ref(), &c, tag)?;
    // A `null` rule refuses before the body is read.
    let q = query_map(raw);
    let access = Access::request(who.as_ref(), method.as_str(), "", headers, &q, None);
    if records::gate(&c, action, &access) == Gate::SuperusersOnly {
        return Err(ApiError::superusers_only());
    }
    let fields = FieldsFilter::parse(q.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    let limit = state
        .cfg
        .http
        .body_bytes_max
        .saturating_add(value::record_body_allowance(&c));
    let parsed = body::parse_with_files(headers, raw, body, limit, &state.records.files)
        .await
        .map_err(|e| match e {
            // PocketBase's record form tells a body past its limit from a broken one.
            body::BindError::Overflowed => ApiError::too_large(),
            e => e.answer(body::MSG_UNSUPPORTED, super::error::MSG_BAD_REQUEST),
        })?;
    if parsed.empty_multipart {
        return Err(ApiError::bad(MSG_READ_FAILED));
    }
    Ok(WriteRequest {
        c,
        who,
        q,
        fields,
        data: parsed.data,
        uploads: parsed.files,
        not_utf8: parsed.not_utf8,
    })
}

/// The client's address (through a trusted proxy when `trustedProxy` names one).
fn remote_ip(state: &Shared, head: &Parts) -> Option<String> {
    let ip = super::request_ip(state, head);
    (!ip.is_empty()).then_some(ip)
}

/// The access of a write request: its caller and its facts, borrowed from the head.
fn write_access<'a>(
    head: &'a Parts,
    who: Option<&'a Caller>,
    q: &'a Map<String, Value>,
    ip: Option<&'a str>,
) -> Access<'a> {
    Access::request(
        who,
        head.method.as_str(),
        head.uri.path(),
        &head.headers,
        q,
        ip,
    )
}

pub(crate) async fn create(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let w = write_request(&state, &key, &head, body, Action::Create).await?;
    let ip = remote_ip(&state, &head);
    let access = write_access(&head, w.who.as_ref(), &w.q, ip.as_deref());
    let saved = Writer::new(&state.records, &access)
        .create_with(&w.c, &w.data, w.uploads, &w.not_utf8)
        .await?;
    respond_written(
        &state,
        &w.c,
        saved,
        &access.with_body(&w.data),
        &w.q,
        &w.fields,
    )
    .await
}

pub(crate) async fn update(
    State(state): State<Shared>,
    Path((key, id)): Path<(String, String)>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let w = write_request(&state, &key, &head, body, Action::Update).await?;
    let ip = remote_ip(&state, &head);
    let access = write_access(&head, w.who.as_ref(), &w.q, ip.as_deref());
    let saved = Writer::new(&state.records, &access)
        .update_with(&w.c, id, &w.data, w.uploads, &w.not_utf8)
        .await?;
    respond_written(
        &state,
        &w.c,
        saved,
        &access.with_body(&w.data),
        &w.q,
        &w.fields,
    )
    .await
}

/// A create or update response: the saved record, expanded as asked, then `fields`.
async fn respond_written(
    state: &Shared,
    c: &Arc<Collection>,
    saved: StoreRecord,
    access: &Access<'_>,
    q: &Map<String, Value>,
    fields: &Option<FieldsFilter>,
) -> ApiResult<Response> {
    let schema = state.store.schema();
    let expand = read::expanding(&schema, access, q.get("expand").and_then(Value::as_str));
    let view = read::viewer_for_written(&state.store, c, access, &saved).await;
    let (row, expanded) = read::expand_written(&state.store, c, saved, expand).await?;
    if fields.is_none() && expanded.is_none() {
        let mut out = Vec::with_capacity(512);
        write_record(&mut out, c, &key_order(c), row, &view);
        return Ok(json_bytes(Bytes::from(out)));
    }
    Ok(ok_json(&shape(c, row, &view, fields, expanded)))
}

/// The answer to a create or update as a JSON value (a batch's answers are parts of one body).
pub(crate) async fn written_json(
    state: &Shared,
    c: &Arc<Collection>,
    saved: StoreRecord,
    access: &Access<'_>,
    q: &Map<String, Value>,
    fields: &Option<FieldsFilter>,
) -> ApiResult<Value> {
    let schema = state.store.schema();
    let expand = read::expanding(&schema, access, q.get("expand").and_then(Value::as_str));
    let view = read::viewer_for_written(&state.store, c, access, &saved).await;
    let (row, expanded) = read::expand_written(&state.store, c, saved, expand).await?;
    Ok(shape(c, row, &view, fields, expanded))
}

pub(crate) async fn delete(
    State(state): State<Shared>,
    Path((key, id)): Path<(String, String)>,
    request: Request,
) -> ApiResult<Response> {
    let (head, sent) = request.into_parts();
    let c = collection_in(&state.store.schema(), &key, MSG_MISSING_COLLECTION)?;
    let who = caller(&state, &head.headers).await;
    limit_head(&state, &head, who.as_ref(), &c, "delete")?;
    let sent = body::has_body(&head.headers).then_some(sent);
    body::check_info_body(
        &head.uri,
        &head.method,
        &head.headers,
        sent,
        state.cfg.http.body_bytes_max,
    )
    .await?;
    let q = query_map(head.uri.query());
    let ip = remote_ip(&state, &head);
    let access = write_access(&head, who.as_ref(), &q, ip.as_deref());
    Writer::new(&state.records, &access).delete(&c, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
