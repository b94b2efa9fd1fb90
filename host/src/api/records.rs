//! `/api/collections/{collection}/records`: list, view, create, update, delete.
//! Each handler shows its steps in order: extract, authorize, compile, read or write, respond.

use super::body;
use super::cache::ResponseEntry;
use super::error::{ApiError, ApiResult, MSG_MISSING_COLLECTION};
use super::expand::{ExpandCtx, ExpandPaths, expand_rows};
use super::serialize::{FieldsFilter, Viewer, key_order, record_json, write_record};
use super::{Caller, RequestCtx, Shared, caller, ok_json, query_map};
use crate::auth::password;
use crate::config::Limits;
use crate::plugins::{
    Action, CallFacts, Change, FieldValue, HookOutcome, Loaded, PluginRecord, Rejection,
    run_in_transaction,
};
use crate::query::{self, Query, Select};
use crate::schema::define::verr;
use crate::schema::value::{
    self, Modifier, Stored, apply_modifier, coerce, from_stored, split_modifier, zero,
};
use crate::schema::{Collection, FieldType, SUPERUSERS_ID, Schema, ids};
use crate::store::{Keep, OnCommit, StoreError, StoreRecord, records as store_records};
use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::sync::Arc;

const MSG_CREATE_FAILED: &str = "Failed to create record.";
const MSG_UPDATE_FAILED: &str = "Failed to update record.";
const MSG_DELETE_FAILED: &str = "Failed to delete record. Make sure that the record is not part of a required relation reference.";

pub(crate) fn paging(q: &Map<String, Value>, limits: &Limits) -> ApiResult<(i64, i64)> {
    let int = |k: &str, default: i64| -> ApiResult<i64> {
        match q.get(k).and_then(Value::as_str) {
            None | Some("") => Ok(default),
            Some(s) => s.trim().parse::<i64>().map_err(|_| ApiError::bad_request()),
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
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
        Some(_) => Err(ApiError::bad_request()),
    }
}

fn viewer(who: Option<&Caller>) -> Viewer {
    match who {
        Some(c) => Viewer {
            superuser: c.is_superuser(),
            caller_collection: c.collection.id.clone(),
            caller_id: c.id(),
            owner_view: false,
        },
        None => Viewer::default(),
    }
}

/// A rule as an extra condition: None = no condition (superuser or public), Err = 403 for `null`.
pub(crate) fn rule_condition(
    schema: &Schema,
    c: &Collection,
    rule: &Option<String>,
    req: &RequestCtx<'_>,
) -> ApiResult<Option<Select>> {
    if req.is_superuser() {
        return Ok(None);
    }
    match rule {
        None => Err(ApiError::superusers_only()),
        Some(r) if r.trim().is_empty() => Ok(None),
        Some(r) => Ok(Some(query::compile_rule(schema, c, r, req.info())?)),
    }
}

fn collection_or_404(state: &Shared, key: &str, message: &str) -> ApiResult<Arc<Collection>> {
    collection_in(&state.store.schema(), key, message)
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
fn get_parts(request: &axum::extract::Request) -> (&Method, &HeaderMap, Option<&str>) {
    (request.method(), request.headers(), request.uri().query())
}

pub(crate) async fn list(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: axum::extract::Request,
) -> ApiResult<Response> {
    let (method, headers, raw) = get_parts(&request);
    // Taken before anything is read: a cached answer built from these reads is valid only while
    // nothing it read changed after this point.
    let stamp = state.store.changes().stamp();
    let schema = state.store.schema();
    let c = collection_in(&schema, &key, MSG_MISSING_COLLECTION)?;
    let who = caller(&state, headers).await;
    let cache_key = response_key("list", &c, "", raw, who.as_ref());
    let _leader = match cached_or_lead(&state, &cache_key).await {
        Ok(hit) => return Ok(hit),
        Err(leader) => leader,
    };
    let q = query_map(raw);
    let req = RequestCtx::new(who.as_ref(), method, headers, &q, None);
    if !req.is_superuser() {
        if c.rules.list.is_none() {
            return Err(ApiError::superusers_only());
        }
        query::forbid_client_refs(
            q.get("filter").and_then(Value::as_str),
            q.get("sort").and_then(Value::as_str),
        )?;
    }
    let mut query = Query::new(&schema, &c, req.info());
    if !req.is_superuser() {
        match &c.rules.list {
            None => return Err(ApiError::superusers_only()),
            Some(r) => query.rule(r)?,
        }
    }
    let (page, per_page) = paging(&q, &state.cfg.limits)?;
    let skip = skip_total(&q)?;
    let fields = FieldsFilter::parse(q.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    let expand = expand_request(&q, &schema, &req, who.as_ref());
    if let Some(Value::String(f)) = q.get("filter") {
        query.filter(f)?;
    }
    if let Some(Value::String(s)) = q.get("sort") {
        query.sort(s)?;
    }
    let sel = query.finish();
    let deps = cache_deps(
        &schema,
        &c,
        Some(&sel),
        expand.is_some(),
        who.as_ref(),
        false,
    );

    let c2 = Arc::clone(&c);
    let rows = state
        .store
        .read_snapshot(move |conn| {
            // One read transaction: the page, the total and the expansions see one snapshot.
            let offset = (page - 1) * per_page;
            let (rows, total) = if skip {
                (store_records::list(conn, &c2, &sel, per_page, offset)?, -1)
            } else {
                store_records::page_and_total(conn, &c2, &sel, per_page, offset)?
            };
            let expanded = run_expand(conn, &c2, &rows, expand.as_ref())?;
            Ok((rows, total, expanded))
        })
        .await?;
    let (rows, total, expanded) = (rows.0, rows.1, rows.2);
    let view = viewer(who.as_ref());
    let pages = if total < 0 {
        -1
    } else {
        (total + per_page - 1) / per_page
    };
    // Rows go straight to bytes; only `fields` and `expand` need the JSON values first.
    let mut out: Vec<u8> = Vec::with_capacity(256 + rows.len() * 512);
    out.extend_from_slice(b"{\"items\":[");
    let order = key_order(&c);
    for (i, (r, e)) in rows.into_iter().zip(expanded).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        if fields.is_none() && e.is_none() {
            write_record(&mut out, &c, &order, r, &view);
        } else {
            let _ = serde_json::to_writer(&mut out, &shape(&c, r, &view, &fields, e));
        }
    }
    out.extend_from_slice(
        format!("],\"page\":{page},\"perPage\":{per_page},\"totalItems\":{total},\"totalPages\":{pages}}}")
            .as_bytes(),
    );
    let body = Bytes::from(out);
    remember(&state, cache_key, stamp, deps, &body);
    Ok(json_bytes(body))
}

/// A cached response, or else (after waiting for an identical request already computing it)
/// the right to compute it: the guard lets the waiters go when dropped.
async fn cached_or_lead<'a>(
    state: &'a Shared,
    key: &str,
) -> Result<Response, Option<super::cache::Leader<'a>>> {
    if let Some(body) = state.caches.response(state.store.changes(), key) {
        return Ok(json_bytes(body));
    }
    let leader = state.caches.lead_or_wait(key).await;
    if leader.is_none()
        && let Some(body) = state.caches.response(state.store.changes(), key)
    {
        return Ok(json_bytes(body));
    }
    Err(leader)
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

/// What a response read, for the cache; None when it must not be cached at all. `one_row`:
/// the response shows one known row of the base table (a view), so inserts there cannot
/// change it, only updates and deletes can.
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
    let mut row_tables = Vec::new();
    if one_row && !expand && tables.len() == 1 {
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
            if c.rules.view.as_deref().is_some_and(query::is_volatile_text) {
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
) {
    if let Some(d) = deps {
        state.caches.keep_response(
            key,
            ResponseEntry {
                body: body.clone(),
                stamp,
                tables: d.tables,
                row_tables: d.row_tables,
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
    request: axum::extract::Request,
) -> ApiResult<Response> {
    let (method, headers, raw) = get_parts(&request);
    let stamp = state.store.changes().stamp();
    let schema = state.store.schema();
    let c = collection_in(&schema, &key, MSG_MISSING_COLLECTION)?;
    let who = caller(&state, headers).await;
    let cache_key = response_key("view", &c, &id, raw, who.as_ref());
    let _leader = match cached_or_lead(&state, &cache_key).await {
        Ok(hit) => return Ok(hit),
        Err(leader) => leader,
    };
    let q = query_map(raw);
    let req = RequestCtx::new(who.as_ref(), method, headers, &q, None);
    let rule = rule_condition(&schema, &c, &c.rules.view, &req)?;
    let deps = cache_deps(
        &schema,
        &c,
        rule.as_ref(),
        q.contains_key("expand"),
        who.as_ref(),
        true,
    );
    let fields = FieldsFilter::parse(q.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    let expand = expand_request(&q, &schema, &req, who.as_ref());
    let c2 = Arc::clone(&c);
    let (row, expanded) = state
        .store
        .read(move |conn| {
            let Some(row) = store_records::get(conn, &c2, &id, rule.as_ref())? else {
                return Ok(None);
            };
            let rows = vec![row];
            let e = run_expand(conn, &c2, &rows, expand.as_ref())?;
            Ok(rows.into_iter().zip(e).next())
        })
        .await?
        .ok_or_else(ApiError::not_found)?;
    let body = Bytes::from(
        serde_json::to_vec(&shape(&c, row, &viewer(who.as_ref()), &fields, expanded))
            .unwrap_or_default(),
    );
    remember(&state, cache_key, stamp, deps, &body);
    Ok(json_bytes(body))
}

/// The record being written, in API form, aligned with the collection's fields.
struct Draft {
    values: Vec<Value>,
    /// Plaintext passwords to hash before the write, by field index.
    passwords: Vec<(usize, String)>,
    /// Errors found in the raw input, which its coerced value no longer shows (by field index).
    input_errors: Vec<(usize, Value)>,
}

fn idx(c: &Collection, name: &str) -> Option<usize> {
    c.fields.iter().position(|f| f.name == name)
}

/// Apply body keys (plain and modifier forms) to the draft. Auth secrets and autodates are the
/// server's; hidden fields are dropped for non-superusers, as PocketBase does.
fn apply_body(c: &Collection, draft: &mut Draft, data: &Map<String, Value>, superuser: bool) {
    let mut modifiers: Vec<(usize, Modifier, &Value)> = Vec::new();
    for (k, v) in data {
        let (name, m) = split_modifier(k);
        let Some(i) = idx(c, name) else { continue };
        let f = &c.fields[i];
        if f.kind == FieldType::Autodate || f.name == "id" {
            continue;
        }
        if c.is_auth() && matches!(f.name.as_str(), "password" | "tokenKey") {
            continue;
        }
        if f.hidden && !superuser && f.kind != FieldType::Password {
            continue;
        }
        match m {
            None => {
                if f.kind == FieldType::Password {
                    draft.passwords.retain(|(j, _)| *j != i);
                    let s = match v {
                        Value::String(s) => s.clone(),
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    draft.values[i] = json!(s);
                    if !s.is_empty() {
                        draft.passwords.push((i, s));
                    }
                } else if f.kind == FieldType::File {
                    // Uploads arrive with the files issue. A name sent as a value must be one
                    // already attached (kept); any other is refused, as PocketBase refuses names
                    // that are not among the record's files or this request's uploads.
                    let current = value::to_list(&draft.values[i]);
                    let wanted = value::to_list(v);
                    unknown_files(i, &current, &wanted, &mut draft.input_errors);
                    let keep: Vec<Value> = wanted
                        .into_iter()
                        .filter(|w| current.contains(w))
                        .map(Value::String)
                        .collect();
                    draft.values[i] = if f.is_multi() {
                        Value::Array(keep)
                    } else {
                        keep.into_iter().next().unwrap_or(json!(""))
                    };
                } else {
                    if let Some(e) = value::json_input_error(f, v) {
                        draft.input_errors.push((i, e));
                    }
                    draft.values[i] = coerce(f, v);
                }
            }
            Some(m) => modifiers.push((i, m, v)),
        }
    }
    for (i, m, v) in modifiers {
        let f = &c.fields[i];
        if f.kind == FieldType::File && m != Modifier::Subtract {
            let current = value::to_list(&draft.values[i]);
            unknown_files(i, &current, &value::to_list(v), &mut draft.input_errors);
            continue;
        }
        draft.values[i] = apply_modifier(f, &draft.values[i], m, v);
    }
}

/// Names sent to file field `i` that are not attached to the record: PocketBase's
/// `validation_invalid_file`.
fn unknown_files(i: usize, current: &[String], wanted: &[String], out: &mut Vec<(usize, Value)>) {
    let unknown: Vec<&String> = wanted.iter().filter(|w| !current.contains(w)).collect();
    if unknown.is_empty() {
        return;
    }
    let shown: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
    out.push((
        i,
        crate::schema::define::verr_params(
            "validation_invalid_file",
            &format!("Invalid new files: [{}].", shown.join(" ")),
            json!({"invalidFiles": unknown}),
        ),
    ));
}

fn validation_error(message: &str, data: Map<String, Value>) -> ApiError {
    ApiError::with_data(StatusCode::BAD_REQUEST, message, data)
}

/// Field validation plus the checks that need the database (relations exist).
/// Relation ids a write must find: (field name, target collection, ids).
type RelationChecks = Vec<(String, Arc<Collection>, Vec<String>)>;

/// The fields whose relation ids do not all exist.
fn missing_relations(
    conn: crate::store::Conn<'_>,
    checks: &RelationChecks,
) -> crate::store::Result<Vec<String>> {
    let mut missing = Vec::new();
    for (name, target, ids) in checks {
        let found = store_records::existing_ids(conn, target, ids)?;
        if ids.iter().any(|i| !found.contains(i)) {
            missing.push(name.clone());
        }
    }
    Ok(missing)
}

fn missing_relation_errors(names: Vec<String>) -> Map<String, Value> {
    let mut errors = Map::new();
    for name in names {
        errors.insert(
            name,
            verr(
                "validation_missing_rel_records",
                "Failed to find all relation records with the provided ids.",
            ),
        );
    }
    errors
}

/// Validate the draft. On success, the relation ids still to be found, which the write checks
/// on its own connection (one trip to the writer instead of a read first); on failure, every
/// field error, relation ones included.
async fn validate(
    state: &Shared,
    c: &Arc<Collection>,
    draft: &Draft,
    skip: &[usize],
) -> Result<RelationChecks, Map<String, Value>> {
    let mut errors = Map::new();
    for (i, f) in c.fields.iter().enumerate() {
        // Errors in the raw input count even where the value ends up unchanged.
        if let Some((_, e)) = draft.input_errors.iter().find(|(j, _)| *j == i) {
            errors.insert(f.name.clone(), e.clone());
            continue;
        }
        if skip.contains(&i) || f.kind == FieldType::Autodate {
            continue;
        }
        if let Some(e) = value::validate(f, &draft.values[i]) {
            errors.insert(f.name.clone(), e);
        }
    }
    let schema = state.store.schema();
    let mut checks: RelationChecks = Vec::new();
    for (i, f) in c.fields.iter().enumerate() {
        if f.kind != FieldType::Relation || errors.contains_key(&f.name) {
            continue;
        }
        let ids: Vec<String> = match &draft.values[i] {
            Value::Array(a) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            Value::String(s) if !s.is_empty() => vec![s.clone()],
            _ => continue,
        };
        if ids.is_empty() {
            continue;
        }
        match schema.by_id(f.opt_str("collectionId")) {
            Some(target) => checks.push((f.name.clone(), Arc::clone(target), ids)),
            None => {
                errors.insert(
                    f.name.clone(),
                    verr(
                        "validation_missing_rel_records",
                        "Failed to find all relation records with the provided ids.",
                    ),
                );
            }
        }
    }
    if errors.is_empty() {
        return Ok(checks);
    }
    // The write will not happen: report the relation errors along with the others now.
    if !checks.is_empty() {
        let missing = state
            .store
            .read(move |conn| missing_relations(conn, &checks))
            .await
            .unwrap_or_default();
        errors.extend(missing_relation_errors(missing));
    }
    Err(errors)
}

/// Hash the draft's new passwords off the async runtime.
async fn hash_passwords(c: &Collection, draft: &mut Draft) -> ApiResult<()> {
    for (i, plain) in std::mem::take(&mut draft.passwords) {
        let cost = u32::try_from(c.fields[i].opt_i64("cost")).unwrap_or(0);
        let h = tokio::task::spawn_blocking(move || password::hash(&plain, cost))
            .await
            .map_err(|_| ApiError::internal())?
            .map_err(|e| {
                tracing::error!(error = %e, "password hashing failed");
                ApiError::internal()
            })?;
        draft.values[i] = json!(h);
    }
    Ok(())
}

fn to_row(c: &Collection, draft: &Draft, only: Option<&[usize]>) -> Vec<(usize, Stored)> {
    c.fields
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|o| o.contains(i)))
        .map(|(i, f)| (i, value::to_stored(f, &draft.values[i])))
        .collect()
}

fn unique_error(message: &str, cols: Vec<String>) -> ApiError {
    let mut data = Map::new();
    for col in cols {
        data.insert(col, verr("validation_not_unique", "Value must be unique."));
    }
    validation_error(message, data)
}

fn check_files(parsed: &body::Parsed) -> ApiResult<()> {
    if parsed.has_files {
        // Storing uploads is a later issue; refusing beats accepting and dropping the bytes.
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "File uploads are not supported yet.",
        ));
    }
    Ok(())
}

pub(crate) enum WriteOutcome {
    Done(StoreRecord),
    /// A delete: the record as it was.
    Deleted(PluginRecord),
    RuleFailed,
    /// Relation fields whose ids were not found.
    MissingRelations(Vec<String>),
    /// An in-transaction hook refused; the write was rolled back.
    Rejected(Rejection),
    /// An in-transaction hook failed; the write was rolled back.
    HookFailed(String),
}

/// What create and update share before they diverge: the collection (not a view), the caller,
/// the `null`-rule check, the query parameters and the parsed body.
struct WriteRequest {
    c: Arc<Collection>,
    who: Option<Caller>,
    q: Map<String, Value>,
    fields: Option<FieldsFilter>,
    data: Map<String, Value>,
}

async fn write_request(
    state: &Shared,
    key: &str,
    headers: &HeaderMap,
    raw: Option<&str>,
    body: Body,
    rule: impl Fn(&Collection) -> &Option<String>,
) -> ApiResult<WriteRequest> {
    // PocketBase words the unknown collection of a write this way, for create and update alike.
    let c = collection_or_404(state, key, "Missing or invalid collection context.")?;
    writable(&c)?;
    let who = caller(state, headers).await;
    let superuser = who.as_ref().is_some_and(Caller::is_superuser);
    if !superuser && rule(&c).is_none() {
        return Err(ApiError::superusers_only());
    }
    let q = query_map(raw);
    let fields = FieldsFilter::parse(q.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    let limit = state
        .cfg
        .http
        .body_bytes_max
        .saturating_add(value::record_body_allowance(&c));
    let parsed = body::parse(headers, body, limit)
        .await
        .map_err(|e| e.answer(body::MSG_UNSUPPORTED, super::error::MSG_BAD_REQUEST))?;
    check_files(&parsed)?;
    Ok(WriteRequest {
        c,
        who,
        q,
        fields,
        data: parsed.data,
    })
}

#[allow(
    clippy::too_many_arguments,
    reason = "an axum handler: one argument per extractor"
)]
pub(crate) async fn create(
    State(state): State<Shared>,
    Path(key): Path<String>,
    method: Method,
    uri: axum::http::Uri,
    peer: Option<Extension<crate::http::Peer>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Body,
) -> ApiResult<Response> {
    let WriteRequest {
        c,
        who,
        q,
        fields,
        data,
    } = write_request(&state, &key, &headers, raw.as_deref(), body, |c| {
        &c.rules.create
    })
    .await?;
    let w = Writer {
        state: &state,
        who: who.as_ref(),
        system: false,
        method: &method,
        path: uri.path(),
        headers: &headers,
        q: &q,
        depth: 0,
        remote_ip: peer.map(|Extension(crate::http::Peer(a))| a.ip().to_string()),
    };
    let saved = w.create(&c, &data).await?;
    respond_written(
        &state,
        &c,
        saved,
        &q,
        &method,
        &headers,
        who.as_ref(),
        &fields,
    )
    .await
}

/// Who writes and in which request: the REST handlers and plugins' record calls share it.
pub(crate) struct Writer<'a> {
    pub state: &'a Shared,
    pub who: Option<&'a Caller>,
    /// The server itself (a plugin's record call): rules do not apply.
    pub system: bool,
    pub method: &'a Method,
    pub path: &'a str,
    pub headers: &'a HeaderMap,
    pub q: &'a Map<String, Value>,
    /// Plugin calls this write is nested in.
    pub depth: u8,
    /// The client's address, for plugins' `remote-ip`.
    pub remote_ip: Option<String>,
}

/// A rejection from a plugin as PocketBase's error body.
pub(crate) fn rejection_error(r: Rejection) -> ApiError {
    let mut data = Map::new();
    for (field, code, message) in r.fields {
        data.insert(field, verr(&code, &message));
    }
    ApiError::with_data(
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST),
        r.message,
        data,
    )
}

/// Views are read-only.
fn writable(c: &Collection) -> ApiResult<()> {
    if c.is_view() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "Unsupported collection type.",
        ));
    }
    Ok(())
}

/// The in-transaction hooks of one write and the facts they run with.
struct InTx {
    hooks: Vec<Arc<Loaded>>,
    facts: Arc<CallFacts>,
}

impl InTx {
    /// Run them inside the write's savepoint: None to go on, else the outcome that ends the
    /// write (its savepoint is dropped unreleased, so the write rolls back).
    fn run(
        self,
        action: Action,
        rec: &PluginRecord,
        conn: crate::store::Conn<'_>,
    ) -> Option<WriteOutcome> {
        match run_in_transaction(&self.hooks, self.facts, action, rec, conn) {
            HookOutcome::Proceed(_) => None,
            HookOutcome::Rejected(r) => Some(WriteOutcome::Rejected(r)),
            HookOutcome::Failed(e) => Some(WriteOutcome::HookFailed(e)),
        }
    }
}

/// The error for a write that did not happen, for the outcomes create, update and delete share.
fn refused(outcome: WriteOutcome, message: &str) -> ApiError {
    match outcome {
        WriteOutcome::MissingRelations(names) => {
            validation_error(message, missing_relation_errors(names))
        }
        WriteOutcome::Rejected(r) => rejection_error(r),
        WriteOutcome::HookFailed(e) => hook_failed(message, &e),
        WriteOutcome::RuleFailed | WriteOutcome::Done(_) | WriteOutcome::Deleted(_) => {
            ApiError::not_found()
        }
    }
}

fn hook_failed(message: &str, why: &str) -> ApiError {
    tracing::warn!(error = %why, "plugin hook failed; write refused");
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// Apply a before-hook's patch to the draft (coerced like body input). The id, autodates and
/// auth secrets stay the server's.
fn apply_patch(
    c: &Collection,
    draft: &mut Draft,
    patch: Vec<(String, Option<FieldValue>)>,
) -> Result<(), String> {
    for (name, v) in patch {
        let Some(i) = idx(c, &name) else { continue };
        let f = &c.fields[i];
        if f.name == "id" || f.kind == FieldType::Autodate || f.kind == FieldType::Password {
            continue;
        }
        if c.is_auth() && f.name == "tokenKey" {
            continue;
        }
        draft.values[i] = match v {
            None => zero(f),
            Some(v) => coerce(f, &v.to_json()?),
        };
    }
    Ok(())
}

impl Writer<'_> {
    fn superuser(&self) -> bool {
        self.system || self.who.is_some_and(Caller::is_superuser)
    }

    fn facts(&self) -> Arc<CallFacts> {
        let request = super::call_facts(
            self.who,
            self.method,
            self.path,
            self.headers,
            self.remote_ip.clone(),
        );
        Arc::new(CallFacts {
            system: self.system,
            depth: self.depth,
            ..request
        })
    }

    /// The in-transaction hooks `slots` holds, if any.
    fn in_tx(&self, slots: Option<&crate::plugins::HookSlots>) -> Option<InTx> {
        let hooks = slots?.in_transaction.clone();
        (!hooks.is_empty()).then(|| InTx {
            hooks,
            facts: self.facts(),
        })
    }

    /// The row write create and update share, on the writer in one savepoint: relation ids
    /// checked, the row inserted or updated and read back (under `rule`, the create rule),
    /// in-transaction hooks run.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one write, prepared by create or update"
    )]
    async fn save_row(
        &self,
        c: &Arc<Collection>,
        action: Action,
        id: String,
        row: Vec<(usize, Stored)>,
        checks: RelationChecks,
        rule: Option<Select>,
        slots: Option<&crate::plugins::HookSlots>,
        previous: Option<PluginRecord>,
    ) -> ApiResult<StoreRecord> {
        let message = if action == Action::Create {
            MSG_CREATE_FAILED
        } else {
            MSG_UPDATE_FAILED
        };
        let c2 = Arc::clone(c);
        let in_tx = self.in_tx(slots);
        let notify = self.commit_notice(slots, c, action, previous);
        let store = Arc::clone(&self.state.store);
        let outcome = self
            .state
            .store
            .write_then(
                move |conn| {
                    let missing = missing_relations(conn, &checks)?;
                    if !missing.is_empty() {
                        return Ok(WriteOutcome::MissingRelations(missing));
                    }
                    conn.savepoint(|tx| {
                        if action == Action::Create {
                            // The schema as of this job (schema changes run alone on the writer).
                            store_records::insert(tx, &store.schema(), &c2, &row)?;
                        } else {
                            store_records::update(tx, &c2, &id, &row)?;
                        }
                        // PocketBase checks a create rule against the would-be record: insert,
                        // look, and roll back when the rule does not hold.
                        let Some(saved) = store_records::get(tx, &c2, &id, rule.as_ref())? else {
                            return Ok(Keep::Rollback(WriteOutcome::RuleFailed));
                        };
                        if let Some(hooks) = in_tx
                            && let Some(stop) =
                                hooks.run(action, &PluginRecord::from_stored(&c2, &saved), tx)
                        {
                            return Ok(Keep::Rollback(stop));
                        }
                        Ok(Keep::Commit(WriteOutcome::Done(saved)))
                    })
                },
                notify,
            )
            .await
            .map_err(|e| match e {
                StoreError::NotUnique(cols) => unique_error(message, cols),
                StoreError::AuthIdTaken => {
                    let mut data = Map::new();
                    data.insert(
                        "id".into(),
                        verr(
                            "validation_invalid_auth_id",
                            "Invalid or duplicated auth record id.",
                        ),
                    );
                    validation_error(message, data)
                }
                other => other.into(),
            })?;
        match outcome {
            WriteOutcome::Done(saved) => Ok(saved),
            WriteOutcome::RuleFailed if action == Action::Create => {
                Err(ApiError::new(StatusCode::BAD_REQUEST, MSG_CREATE_FAILED))
            }
            other => Err(refused(other, message)),
        }
    }

    /// Run the before-hooks of one event in order; patches apply cumulatively.
    async fn before(
        &self,
        hooks: &[Arc<Loaded>],
        c: &Collection,
        current: Option<&PluginRecord>,
        draft: &mut Draft,
        message: &str,
    ) -> ApiResult<()> {
        let facts = self.facts();
        for h in hooks {
            let pending = PluginRecord::from_json(c, &draft.values);
            match h.before_write(Arc::clone(&facts), current, &pending).await {
                HookOutcome::Proceed(patch) => {
                    apply_patch(c, draft, patch).map_err(|e| hook_failed(message, &e))?
                }
                HookOutcome::Rejected(r) => return Err(rejection_error(r)),
                HookOutcome::Failed(e) => return Err(hook_failed(message, &e)),
            }
        }
        Ok(())
    }

    /// Create a record from body-shaped `data`: PocketBase's create, with plugin hooks.
    pub(crate) async fn create(
        &self,
        c: &Arc<Collection>,
        data: &Map<String, Value>,
    ) -> ApiResult<StoreRecord> {
        let state = self.state;
        writable(c)?;
        let superuser = self.superuser();
        let mut draft = Draft {
            values: c.fields.iter().map(zero).collect(),
            passwords: Vec::new(),
            input_errors: Vec::new(),
        };
        apply_body(c, &mut draft, data, superuser);
        let now = ids::now();
        let mut skip = Vec::new();
        for (i, f) in c.fields.iter().enumerate() {
            if f.kind == FieldType::Autodate && f.opt_bool("onCreate") {
                draft.values[i] = json!(now);
            }
        }
        // The id: the client's (validated like any text field; PocketBase casts a number or
        // bool to text, and then finds it too short).
        let id_idx = idx(c, "id").ok_or_else(ApiError::internal)?;
        if let Some(s) = data.get("id").map(value::as_string) {
            draft.values[id_idx] = json!(s);
        }
        // Text fields left empty (the id among them) get a value from their
        // autogeneratePattern, if they have one; an id without one stays empty (required).
        for (i, f) in c.fields.iter().enumerate() {
            if f.kind == FieldType::Text
                && draft.values[i].as_str() == Some("")
                && let Some(v) = Some(f.opt_str("autogeneratePattern"))
                    .filter(|p| !p.is_empty())
                    .and_then(ids::from_pattern)
            {
                draft.values[i] = json!(v);
            }
        }

        if c.is_auth() {
            let pw = data
                .get("password")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let confirm = data
                .get("passwordConfirm")
                .and_then(Value::as_str)
                .unwrap_or("");
            let mut form = Map::new();
            if pw.is_empty() {
                form.insert(
                    "password".into(),
                    verr("validation_required", "Cannot be blank."),
                );
            }
            if confirm.is_empty() {
                form.insert(
                    "passwordConfirm".into(),
                    verr("validation_required", "Cannot be blank."),
                );
            } else if confirm != pw {
                form.insert(
                    "passwordConfirm".into(),
                    verr("validation_values_mismatch", "Values don't match."),
                );
            }
            if !form.is_empty() {
                return Err(validation_error(MSG_CREATE_FAILED, form));
            }
            let pi = idx(c, "password").ok_or_else(ApiError::internal)?;
            draft.values[pi] = json!(pw.clone());
            draft.passwords.push((pi, pw));
            if let Some(ti) = idx(c, "tokenKey") {
                draft.values[ti] = json!(ids::secret(50));
                skip.push(ti);
            }
            if let Some(vi) = idx(c, "verified") {
                if c.id == SUPERUSERS_ID {
                    draft.values[vi] = json!(true);
                } else if !superuser && draft.values[vi] == json!(true) {
                    let mut e = Map::new();
                    e.insert(
                        "verified".into(),
                        verr("validation_values_mismatch", "Values don't match."),
                    );
                    return Err(validation_error(MSG_CREATE_FAILED, e));
                }
            }
        }
        // Plugins: one registry snapshot for the whole write. Before-hooks see the coerced
        // input and their patches are validated with it (PocketBase's model hooks run before
        // validation too).
        let reg = state.plugins.registry();
        let slots = reg.hooks(&c.id);
        if let Some(s) = slots
            && !s.before_create.is_empty()
        {
            self.before(&s.before_create, c, None, &mut draft, MSG_CREATE_FAILED)
                .await?;
        }
        let checks = validate(state, c, &draft, &skip)
            .await
            .map_err(|e| validation_error(MSG_CREATE_FAILED, e))?;

        let req = RequestCtx::new(self.who, self.method, self.headers, self.q, Some(data))
            .made_by_system(self.system);
        let rule = rule_condition(&state.store.schema(), c, &c.rules.create, &req)?;
        hash_passwords(c, &mut draft).await?;
        let row = to_row(c, &draft, None);
        let id = draft.values[id_idx].as_str().unwrap_or("").to_owned();
        self.save_row(c, Action::Create, id, row, checks, rule, slots, None)
            .await
    }

    /// What to run on the writer once the write committed: queue the change for after-commit
    /// hooks. None (no cost) when no plugin listens to this collection.
    fn commit_notice(
        &self,
        slots: Option<&crate::plugins::HookSlots>,
        c: &Arc<Collection>,
        action: Action,
        previous: Option<PluginRecord>,
    ) -> Option<OnCommit<WriteOutcome>> {
        let s = slots?;
        if s.after_commit.is_empty() {
            return None;
        }
        let plugins = Arc::clone(&self.state.plugins);
        let c = Arc::clone(c);
        let actor = self.who.map(Caller::principal);
        Some(Box::new(move |out: &WriteOutcome| {
            let record = match out {
                WriteOutcome::Done(saved) => PluginRecord::from_stored(&c, saved),
                WriteOutcome::Deleted(pre) => pre.clone(),
                _ => return,
            };
            plugins.committed(vec![Change {
                action,
                collection_id: c.id.clone(),
                record,
                previous,
                actor,
                seq: 0,
            }]);
        }))
    }

    /// Update a record from body-shaped `data`, with plugin hooks. `rule` is the caller's
    /// update rule (None for superusers and the system).
    pub(crate) async fn update(
        &self,
        c: &Arc<Collection>,
        id: String,
        data: &Map<String, Value>,
    ) -> ApiResult<StoreRecord> {
        let state = self.state;
        writable(c)?;
        let superuser = self.superuser();
        let req = RequestCtx::new(self.who, self.method, self.headers, self.q, Some(data))
            .made_by_system(self.system);
        let rule = rule_condition(&state.store.schema(), c, &c.rules.update, &req)?;

        let c2 = Arc::clone(c);
        let id2 = id.clone();
        let existing = state
            .store
            .read(move |conn| store_records::get(conn, &c2, &id2, rule.as_ref()))
            .await?
            .ok_or_else(ApiError::not_found)?;

        let mut draft = Draft {
            values: c
                .fields
                .iter()
                .zip(existing.iter())
                .map(|(f, s)| match (f.kind, s) {
                    // Keep the stored hash as is; from_stored would blank it.
                    (FieldType::Password, Stored::Text(t)) => json!(t),
                    _ => from_stored(f, s.clone()),
                })
                .collect(),
            passwords: Vec::new(),
            input_errors: Vec::new(),
        };
        let before = draft.values.clone();
        apply_body(c, &mut draft, data, superuser);
        let reg = state.plugins.registry();
        let slots = reg.hooks(&c.id);
        let previous = slots.map(|_| PluginRecord::from_stored(c, &existing));
        if let Some(s) = slots
            && !s.before_update.is_empty()
        {
            self.before(
                &s.before_update,
                c,
                previous.as_ref(),
                &mut draft,
                MSG_UPDATE_FAILED,
            )
            .await?;
        }
        let mut errors = Map::new();
        // Any `id` in an update body that is not the record's own (null and "" included) is an
        // attempt to change the primary key, as PocketBase sees it.
        if let Some(new_id) = data.get("id")
            && new_id.as_str() != Some(id.as_str())
        {
            errors.insert(
                "id".into(),
                verr(
                    "validation_pk_change",
                    "The record primary key cannot be changed.",
                ),
            );
        }
        let mut changed: Vec<usize> = (0..c.fields.len())
            .filter(|&i| draft.values[i] != before[i])
            .collect();
        let now = ids::now();
        for (i, f) in c.fields.iter().enumerate() {
            if f.kind == FieldType::Autodate && f.opt_bool("onUpdate") {
                draft.values[i] = json!(now);
                changed.push(i);
            }
        }

        if c.is_auth() {
            auth_update_checks(
                c,
                superuser,
                data,
                &mut draft,
                &before,
                &mut changed,
                &mut errors,
            )
            .await?;
        }
        if !errors.is_empty() {
            return Err(validation_error(MSG_UPDATE_FAILED, errors));
        }
        // Only changed fields are validated and written: an untouched legacy value stays as it was.
        let skip: Vec<usize> = (0..c.fields.len())
            .filter(|i| !changed.contains(i))
            .collect();
        let checks = validate(state, c, &draft, &skip)
            .await
            .map_err(|e| validation_error(MSG_UPDATE_FAILED, e))?;
        hash_passwords(c, &mut draft).await?;
        changed.sort_unstable();
        changed.dedup();
        let row = to_row(c, &draft, Some(&changed));
        // The update rule was checked when the record was read.
        self.save_row(c, Action::Update, id, row, checks, None, slots, previous)
            .await
    }

    /// Delete a record, with plugin hooks.
    pub(crate) async fn delete(&self, c: &Arc<Collection>, id: String) -> ApiResult<()> {
        let state = self.state;
        writable(c)?;
        let req = RequestCtx::new(self.who, self.method, self.headers, self.q, None)
            .made_by_system(self.system);
        let rule = rule_condition(&state.store.schema(), c, &c.rules.delete, &req)?;
        let schema = state.store.schema();
        let reg = state.plugins.registry();
        let slots = reg.hooks(&c.id);
        // With hooks, the record is read first: before-delete sees it (and may refuse).
        let mut pre = None;
        if let Some(s) = slots {
            let c2 = Arc::clone(c);
            let id2 = id.clone();
            let r2 = rule.clone();
            let current = state
                .store
                .read(move |conn| store_records::get(conn, &c2, &id2, r2.as_ref()))
                .await?
                .ok_or_else(ApiError::not_found)?;
            let rec = PluginRecord::from_stored(c, &current);
            let facts = self.facts();
            for h in &s.before_delete {
                match h.before_delete(Arc::clone(&facts), &rec).await {
                    HookOutcome::Proceed(_) => {}
                    HookOutcome::Rejected(r) => return Err(rejection_error(r)),
                    HookOutcome::Failed(e) => return Err(hook_failed(MSG_DELETE_FAILED, &e)),
                }
            }
            pre = Some(rec);
        }
        let c2 = Arc::clone(c);
        let in_tx = self.in_tx(slots);
        let notify = self.commit_notice(slots, c, Action::Delete, None);
        let outcome = state
            .store
            .write_then(
                move |conn| {
                    conn.savepoint(|tx| {
                        let Some(current) = store_records::get(tx, &c2, &id, rule.as_ref())? else {
                            return Ok(Keep::Rollback(WriteOutcome::RuleFailed));
                        };
                        store_records::delete(tx, &schema, &c2, &id, 0)?;
                        let rec = pre.unwrap_or_else(|| PluginRecord::from_stored(&c2, &current));
                        if let Some(hooks) = in_tx
                            && let Some(stop) = hooks.run(Action::Delete, &rec, tx)
                        {
                            return Ok(Keep::Rollback(stop));
                        }
                        Ok(Keep::Commit(WriteOutcome::Deleted(rec)))
                    })
                },
                notify,
            )
            .await
            .map_err(|e| match e {
                StoreError::RequiredRelation => {
                    ApiError::new(StatusCode::BAD_REQUEST, MSG_DELETE_FAILED)
                }
                other => other.into(),
            })?;
        match outcome {
            WriteOutcome::Deleted(_) => Ok(()),
            other => Err(refused(other, MSG_DELETE_FAILED)),
        }
    }
}

#[allow(
    clippy::too_many_arguments,
    reason = "an axum handler: one argument per extractor"
)]
pub(crate) async fn update(
    State(state): State<Shared>,
    Path((key, id)): Path<(String, String)>,
    method: Method,
    uri: axum::http::Uri,
    peer: Option<Extension<crate::http::Peer>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
    body: Body,
) -> ApiResult<Response> {
    let WriteRequest {
        c,
        who,
        q,
        fields,
        data,
    } = write_request(&state, &key, &headers, raw.as_deref(), body, |c| {
        &c.rules.update
    })
    .await?;
    let w = Writer {
        state: &state,
        who: who.as_ref(),
        system: false,
        method: &method,
        path: uri.path(),
        headers: &headers,
        q: &q,
        depth: 0,
        remote_ip: peer.map(|Extension(crate::http::Peer(a))| a.ip().to_string()),
    };
    let saved = w.update(&c, id, &data).await?;
    respond_written(
        &state,
        &c,
        saved,
        &q,
        &method,
        &headers,
        who.as_ref(),
        &fields,
    )
    .await
}

/// The parsed `expand` and the context it runs in, when the request asks for one.
fn expand_request(
    q: &Map<String, Value>,
    schema: &Arc<Schema>,
    req: &RequestCtx<'_>,
    who: Option<&Caller>,
) -> Option<(ExpandPaths, ExpandCtx)> {
    let paths = ExpandPaths::parse(q.get("expand").and_then(Value::as_str))?;
    let mut info = req.info().clone();
    info.context = "expand".into();
    Some((
        paths,
        ExpandCtx {
            schema: Arc::clone(schema),
            req: info,
            viewer: viewer(who),
        },
    ))
}

fn run_expand(
    conn: crate::store::Conn<'_>,
    c: &Arc<Collection>,
    rows: &[StoreRecord],
    expand: Option<&(ExpandPaths, ExpandCtx)>,
) -> crate::store::Result<Vec<Option<Map<String, Value>>>> {
    match expand {
        Some((paths, ctx)) => expand_rows(conn, ctx, c, rows, paths),
        None => Ok(vec![None; rows.len()]),
    }
}

/// A create or update response: the saved record, expanded as asked, then `fields`.
#[allow(clippy::too_many_arguments)]
async fn respond_written(
    state: &Shared,
    c: &Arc<Collection>,
    saved: StoreRecord,
    q: &Map<String, Value>,
    method: &Method,
    headers: &HeaderMap,
    who: Option<&Caller>,
    fields: &Option<FieldsFilter>,
) -> ApiResult<Response> {
    let schema = state.store.schema();
    let req = RequestCtx::new(who, method, headers, q, None);
    let expand = expand_request(q, &schema, &req, who);
    let (row, expanded) = match expand {
        None => (saved, None),
        Some(e) => {
            let c2 = Arc::clone(c);
            state
                .store
                .read(move |conn| {
                    let rows = vec![saved];
                    let x = run_expand(conn, &c2, &rows, Some(&e))?;
                    Ok(rows.into_iter().zip(x).next())
                })
                .await?
                .ok_or_else(ApiError::not_found)?
        }
    };
    if fields.is_none() && expanded.is_none() {
        let mut out = Vec::with_capacity(512);
        write_record(&mut out, c, &key_order(c), row, &viewer(who));
        return Ok(json_bytes(Bytes::from(out)));
    }
    Ok(ok_json(&shape(c, row, &viewer(who), fields, expanded)))
}

/// Auth records: password changes need `oldPassword` (except for superusers) and rotate the
/// tokenKey; only superusers change `email` and `verified` directly.
async fn auth_update_checks(
    c: &Collection,
    superuser: bool,
    data: &Map<String, Value>,
    draft: &mut Draft,
    before: &[Value],
    changed: &mut Vec<usize>,
    errors: &mut Map<String, Value>,
) -> ApiResult<()> {
    if !superuser {
        for name in ["email", "verified"] {
            if let Some(i) = idx(c, name)
                && draft.values[i] != before[i]
            {
                errors.insert(
                    name.into(),
                    verr("validation_values_mismatch", "Values don't match."),
                );
            }
        }
    }
    let pw = data.get("password").and_then(Value::as_str).unwrap_or("");
    if pw.is_empty() {
        return Ok(());
    }
    let confirm = data
        .get("passwordConfirm")
        .and_then(Value::as_str)
        .unwrap_or("");
    if confirm != pw {
        errors.insert(
            "passwordConfirm".into(),
            verr("validation_values_mismatch", "Values don't match."),
        );
    }
    let pi = idx(c, "password").ok_or_else(ApiError::internal)?;
    if !superuser {
        let old = data
            .get("oldPassword")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if old.is_empty() {
            errors.insert(
                "oldPassword".into(),
                verr("validation_required", "Cannot be blank."),
            );
        } else {
            let hash = before[pi].as_str().unwrap_or("").to_owned();
            let ok = tokio::task::spawn_blocking(move || password::verify(&old, &hash))
                .await
                .unwrap_or(false);
            if !ok {
                errors.insert(
                    "oldPassword".into(),
                    verr(
                        "validation_invalid_old_password",
                        "Missing or invalid old password.",
                    ),
                );
            }
        }
    }
    let pf = &c.fields[pi];
    if let Some(e) = value::validate(pf, &json!(pw)) {
        errors.insert("password".into(), e);
    }
    draft.values[pi] = json!(pw);
    draft.passwords.retain(|(j, _)| *j != pi);
    draft.passwords.push((pi, pw.to_owned()));
    changed.push(pi);
    if let Some(ti) = idx(c, "tokenKey") {
        draft.values[ti] = json!(ids::secret(50));
        changed.push(ti);
    }
    Ok(())
}

pub(crate) async fn delete(
    State(state): State<Shared>,
    Path((key, id)): Path<(String, String)>,
    method: Method,
    uri: axum::http::Uri,
    peer: Option<Extension<crate::http::Peer>>,
    headers: HeaderMap,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let c = collection_or_404(&state, &key, MSG_MISSING_COLLECTION)?;
    let who = caller(&state, &headers).await;
    let q = query_map(raw.as_deref());
    let w = Writer {
        state: &state,
        who: who.as_ref(),
        system: false,
        method: &method,
        path: uri.path(),
        headers: &headers,
        q: &q,
        depth: 0,
        remote_ip: peer.map(|Extension(crate::http::Peer(a))| a.ip().to_string()),
    };
    w.delete(&c, id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
