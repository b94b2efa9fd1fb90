//! `/api/collections`: superusers only.

use super::error::{ApiError, ApiResult};
use super::extract::Superuser;
use super::{Shared, ok_json, query_map};
use crate::query::{self, RequestInfo};
use crate::schema::define::{self, DefineError, build};
use crate::schema::{Collection, Schema};
use crate::store::{StoreError, ddl};
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// `_collections` filters see this pseudo-collection: the keys PocketBase lets you filter on.
fn meta_collection() -> Collection {
    // Built under another name: a collection may not be named after an internal table.
    let def = json!({"name": "collections", "fields": [
        {"name": "name", "type": "text"}, {"name": "type", "type": "text"}, {"name": "system", "type": "bool"},
        {"name": "created", "type": "text"}, {"name": "updated", "type": "text"}]});
    let mut c = build(&def, None, &Schema::default()).expect("static definition");
    c.name = "_collections".into();
    c
}

fn define_error(e: DefineError, message: &str) -> ApiError {
    match e {
        DefineError::BadTypeData(why) => {
            tracing::info!(why, "collection body refused");
            ApiError::bad("Failed to load the collection type data due to invalid formatting.")
        }
        DefineError::BadFormat(why) => {
            tracing::info!(why, "collection body refused");
            ApiError::bad("Failed to load the submitted data due to invalid formatting.")
        }
        DefineError::Invalid(data) => ApiError::with_data(StatusCode::BAD_REQUEST, message, data),
    }
}

/// Indexes SQLite refused, as PocketBase reports them (`indexes.<i>`).
fn indexes_refused(refused: Vec<(usize, String)>) -> Map<String, Value> {
    let mut list = Map::new();
    for (i, why) in refused {
        list.insert(
            i.to_string(),
            define::verr("validation_invalid_index_expression", &why),
        );
    }
    let mut data = Map::new();
    data.insert("indexes".into(), Value::Object(list));
    data
}

fn store_error(e: StoreError, message: &str) -> ApiError {
    match e {
        StoreError::IndexesRefused(refused) => {
            ApiError::with_data(StatusCode::BAD_REQUEST, message, indexes_refused(refused))
        }
        StoreError::ViewQuery { why, .. } | StoreError::Invalid(why) => {
            tracing::info!(why, "collection DDL refused");
            // PocketBase ends every message with a period.
            let end = if why.ends_with(['.', '!', '?']) {
                ""
            } else {
                "."
            };
            ApiError::bad(format!("{message} Raw error: \n{why}{end}"))
        }
        other => other.into(),
    }
}

pub(crate) async fn list(
    State(state): State<Shared>,
    _su: Superuser,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let q = query_map(raw.as_deref());
    let (page, per_page) = super::records::paging(&q, &state.cfg.limits)?;
    let skip_total = super::records::skip_total(&q)?;
    let meta = meta_collection();
    let req = RequestInfo {
        is_superuser: true,
        ..RequestInfo::default()
    };
    let empty = crate::schema::Schema::default();
    let mut query = query::Query::new(&empty, &meta, &req);
    if let Some(Value::String(f)) = q.get("filter") {
        query.filter(f)?;
    }
    if let Some(Value::String(s)) = q.get("sort") {
        query.sort(s)?;
    }
    let sel = query.finish();
    // The filter was compiled against the pseudo-collection: evaluate it over the snapshot by
    // asking SQLite about each row of _collections through the same SQL.
    let ids: Vec<String> = state
        .store
        .read(move |conn| crate::store::records::collection_ids(conn, &sel))
        .await?;
    let schema = state.store.schema();
    let all: Vec<&Arc<Collection>> = ids.iter().filter_map(|id| schema.by_id(id)).collect();
    let total = all.len() as i64;
    let start = ((page - 1) * per_page) as usize;
    let items: Vec<Value> = all
        .iter()
        .skip(start)
        .take(per_page as usize)
        .map(|c| c.to_api_json())
        .collect();
    let fields = crate::records::json::FieldsFilter::parse(q.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    let items: Vec<Value> = match &fields {
        Some(f) => items.into_iter().map(|v| f.apply_value(v)).collect(),
        None => items,
    };
    let (total_items, total_pages) = if skip_total {
        (-1, -1)
    } else {
        (total, (total + per_page - 1) / per_page)
    };
    Ok(ok_json(
        &json!({"items": items, "page": page, "perPage": per_page, "totalItems": total_items, "totalPages": total_pages}),
    ))
}

pub(crate) async fn view(
    State(state): State<Shared>,
    _su: Superuser,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    let c = super::find_collection(&state, &key).ok_or_else(ApiError::not_found)?;
    Ok(ok_json(&c.to_api_json()))
}

/// The body of a collections endpoint as one JSON object; a bind failure answers with the
/// endpoint's words for it.
async fn body_json(
    state: &Shared,
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
    unsupported: &str,
    malformed: &str,
) -> ApiResult<Value> {
    let parsed = super::body::parse(headers, query, body, state.cfg.http.body_bytes_max)
        .await
        .map_err(|e| e.answer(unsupported, malformed))?;
    Ok(Value::Object(parsed.data))
}

/// View collections get their fields from the query.
fn finish_definition(
    conn: crate::store::Conn<'_>,
    schema: &Schema,
    mut c: Collection,
) -> Result<Collection, StoreError> {
    if c.is_view() {
        c.fields = ddl::infer_view_fields(conn, schema, c.view_query())?;
    }
    Ok(c)
}

/// Check every rule of `built` against the schema as it will be once it is saved (rules may
/// name the collection itself: self-relations, back-relations).
fn check_rules(schema: &Schema, built: &mut define::Built, original: Option<&Collection>) {
    let id = built.collection.id.clone();
    let others = schema.collections.iter().map(|c| (**c).clone());
    let future = match original {
        // An update replaces the collection it updates.
        Some(_) => Schema::new(
            others
                .filter(|c| c.id != id)
                .chain(std::iter::once(built.collection.clone()))
                .collect(),
        ),
        // A new one joins the others, which win where it clashes with one of them (it is
        // refused for that anyway, and rules must still see the existing collections).
        None => Schema::new(
            std::iter::once(built.collection.clone())
                .chain(others)
                .collect(),
        ),
    };
    let req = RequestInfo::default();
    built.check_rules(original, |c, rule| {
        query::compile_rule(&future, c, rule, &req)
            .err()
            .map(|e| e.to_string())
    });
}

/// PocketBase's follow-up to a collection saved or deleted: every other view whose query now
/// gives different fields (their ids aside, case aside) is saved again with them, in the order
/// of the schema, each seeing the ones before it. A view whose query fails now, or whose rules
/// do not compile on its new fields, keeps what it had (PocketBase logs those and goes on).
fn refresh_views(
    tx: crate::store::Conn<'_>,
    schema: &Schema,
    except: &str,
) -> Result<(), StoreError> {
    let mut schema = Schema::new(schema.collections.iter().map(|c| (**c).clone()).collect());
    let without_ids = |fields: &[crate::schema::Field]| {
        let list: Vec<Value> = fields
            .iter()
            .map(|f| {
                let mut raw = f.raw.clone();
                raw.remove("id");
                Value::Object(raw)
            })
            .collect();
        Value::Array(list).to_string().to_lowercase()
    };
    let views: Vec<Arc<Collection>> = schema
        .collections
        .iter()
        .filter(|c| c.is_view() && c.id != except)
        .cloned()
        .collect();
    for v in views {
        let fields = match ddl::probe_view(tx, &schema, v.view_query()) {
            Ok(p) if p.error.is_none() => p.fields,
            _ => continue,
        };
        if without_ids(&fields) == without_ids(&v.fields) {
            continue;
        }
        let mut new = (*v).clone();
        new.fields = fields;
        new.updated = crate::schema::ids::now();
        let future = Schema::new(
            schema
                .collections
                .iter()
                .map(|c| {
                    if c.id == v.id {
                        new.clone()
                    } else {
                        (**c).clone()
                    }
                })
                .collect(),
        );
        let req = RequestInfo::default();
        let r = &new.rules;
        let compiles = [&r.list, &r.view, &r.create, &r.update, &r.delete]
            .into_iter()
            .flatten()
            .all(|rule| query::compile_rule(&future, &new, rule, &req).is_ok());
        if !compiles {
            continue;
        }
        ddl::update_collection(tx, &v, &new)?;
        schema = future;
    }
    Ok(())
}

pub(crate) async fn create(
    State(state): State<Shared>,
    _su: Superuser,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    save(&state, &headers, uri.query(), body, None).await
}

pub(crate) async fn update(
    State(state): State<Shared>,
    _su: Superuser,
    uri: axum::http::Uri,
    headers: HeaderMap,
    Path(key): Path<String>,
    body: Body,
) -> ApiResult<Response> {
    let old = super::find_collection(&state, &key).ok_or_else(ApiError::not_found)?;
    save(&state, &headers, uri.query(), body, Some(old)).await
}

/// Create (`old` None) or update a collection for a caller already known to be a superuser: build
/// and validate the definition, then write the row and its table in one schema transaction. The
/// answer is the collection as saved.
async fn save(
    state: &Shared,
    headers: &HeaderMap,
    query: Option<&str>,
    body: Body,
    old: Option<Arc<Collection>>,
) -> ApiResult<Response> {
    let message = if old.is_some() {
        "Failed to update collection."
    } else {
        "Failed to create collection."
    };
    // PocketBase reads a new collection's type before the rest and words a failure as such.
    let unreadable = if old.is_some() {
        "Failed to load the submitted data due to invalid formatting."
    } else {
        "Failed to load the collection type data due to invalid formatting."
    };
    let input = body_json(state, headers, query, body, unreadable, unreadable).await?;
    if let Some(old) = &old
        && let Some(Value::String(id)) = input.get("id")
        && !id.is_empty()
        && *id != old.id
    {
        // PocketBase looks the collection up again by the body's id, and finds none.
        return Err(ApiError::not_found());
    }
    let schema = state.store.schema();
    let mut built =
        define::prepare(&input, old.as_deref(), &schema).map_err(|e| define_error(e, message))?;
    if built.collection.is_view() {
        // A view's fields come from its query, and its rules are checked against them: infer
        // them first (inside a savepoint the writer rolls back).
        let query = built.collection.view_query().to_owned();
        if query.is_empty() {
            // (`viewQuery` is already required.)
            built.set_view_fields(Vec::new(), None, &schema);
        } else {
            let s = Arc::clone(&schema);
            let probe = state
                .store
                .write(move |conn| ddl::probe_view(conn, &s, &query))
                .await
                .map_err(|e| store_error(e, message))?;
            built.set_view_fields(probe.fields, probe.error, &schema);
        }
    }
    check_rules(&schema, &mut built, old.as_deref());
    let new = built.into_result().map_err(|e| define_error(e, message))?;
    let store = Arc::clone(&state.store);
    let saved = state
        .store
        .write_schema(move |tx| {
            let new = finish_definition(tx, &store.schema(), new)?;
            match &old {
                Some(old) => ddl::update_collection(tx, old, &new)?,
                None => ddl::create_collection(tx, &new)?,
            }
            let after = Schema::new(
                store
                    .schema()
                    .collections
                    .iter()
                    .filter(|c| c.id != new.id)
                    .map(|c| (**c).clone())
                    .chain(std::iter::once(new.clone()))
                    .collect(),
            );
            refresh_views(tx, &after, &new.id)?;
            Ok(new)
        })
        .await
        .map_err(|e| store_error(e, message))?;
    state.plugins.schema_changed();
    Ok(ok_json(&saved.to_api_json()))
}

pub(crate) async fn delete(
    State(state): State<Shared>,
    _su: Superuser,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    let c = super::find_collection(&state, &key).ok_or_else(ApiError::not_found)?;
    if c.system {
        return Err(ApiError::bad("Failed to delete collection."));
    }
    if let Some(other) = ddl::referenced_by(&state.store.schema(), &c) {
        return Err(ApiError::bad(format!(
            "Failed to delete collection probably due to existing reference in {other}."
        )));
    }
    let rest = Schema::new(
        state
            .store
            .schema()
            .collections
            .iter()
            .filter(|o| o.id != c.id)
            .map(|o| (**o).clone())
            .collect(),
    );
    let id = c.id.clone();
    state
        .store
        .write_schema(move |tx| {
            ddl::delete_collection(tx, &c)?;
            ddl::check_views(tx, &rest)?;
            refresh_views(tx, &rest, &c.id)
        })
        .await
        .map_err(|e| match e {
            StoreError::ViewDependency(why) => {
                tracing::info!(why, "collection delete refused");
                ApiError::bad("Failed to delete collection.")
            }
            other => other.into(),
        })?;
    state.plugins.schema_changed();
    state.records.files.delete_collection(&id).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn truncate(
    State(state): State<Shared>,
    _su: Superuser,
    Path(key): Path<String>,
    uri: axum::http::Uri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let c = super::find_collection(&state, &key).ok_or_else(ApiError::not_found)?;
    if c.is_view() {
        return Err(ApiError::bad(
            "View collections cannot be truncated since they don't store their own records.",
        ));
    }
    // Record by record as the superuser: their hooks and every delete's event, as PocketBase.
    let who = super::caller(&state, &headers).await;
    let no_query = Map::new();
    let access = crate::records::Access::request(
        who.as_ref(),
        "DELETE",
        uri.path(),
        &headers,
        &no_query,
        None,
    );
    crate::records::Writer::new(&state.records, &access)
        .truncate(&c)
        .await?;
    state.plugins.schema_changed();
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /api/collections/meta/index-advice`: the record lists that scanned past
/// `[advisor].scan_threshold` since start (or the last DELETE), per query shape, the most
/// total time first, each with its plan and the entry to add to the collection's `indexes`.
pub(crate) async fn index_advice(
    State(state): State<Shared>,
    _su: Superuser,
) -> ApiResult<Response> {
    let entries = state.records.advisor.entries(&state.store.schema());
    Ok(ok_json(
        &serde_json::to_value(entries).unwrap_or(Value::Null),
    ))
}

/// `DELETE /api/collections/meta/index-advice`: forget the advice recorded so far.
pub(crate) async fn index_advice_reset(
    State(state): State<Shared>,
    _su: Superuser,
) -> ApiResult<Response> {
    state.records.advisor.reset();
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn scaffolds(_su: Superuser) -> ApiResult<Response> {
    let empty = Schema::default();
    let mut out = Map::new();
    for kind in ["auth", "base", "view"] {
        // A view needs some query to be built; the scaffold shows it empty (never run).
        let def = json!({"name": "scaffold", "type": kind, "viewQuery": "-"});
        let mut c = build(&def, None, &empty).expect("scaffold definitions are valid");
        c.id = String::new();
        c.name = String::new();
        c.created = String::new();
        c.updated = String::new();
        if kind == "view" {
            c.options.insert("viewQuery".into(), json!(""));
            c.fields.clear();
        }
        if kind == "auth" {
            // Without a collection id, PocketBase names the indexes with a random suffix.
            let suffix = crate::schema::ids::lower_alnum(10);
            c.indexes = define::auth_indexes(&suffix, "").into();
        }
        out.insert(kind.into(), c.to_api_json());
    }
    Ok(ok_json(&Value::Object(out)))
}

/// One import entry as PocketBase applies it to the collection it names (by id, else name):
/// the entry over the existing definition, whose fields it does not list are kept (unless
/// `delete_missing`, which keeps only the system ones; a listed field without an id but with
/// an existing field's name and type is that existing field).
fn import_entry(entry: &Value, existing: Option<&Collection>, delete_missing: bool) -> Value {
    let (Some(old), Value::Object(m)) = (existing, entry) else {
        return entry.clone();
    };
    let mut m = m.clone();
    if delete_missing && m.get("fields").is_none_or(Value::is_null) {
        m.insert("fields".into(), json!([]));
    }
    if let Some(Value::Array(fields)) = m.get_mut("fields") {
        for f in &old.fields {
            if !f.system && delete_missing {
                continue;
            }
            if fields.iter().any(|g| g["id"] == f.id.as_str()) {
                continue;
            }
            let same = fields.iter().position(|g| {
                g["name"] == f.name.as_str()
                    && g["type"] == f.kind.as_str()
                    && g.get("id")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
            });
            match same {
                Some(i) => fields[i] = Value::Object(f.raw.clone()),
                None => fields.push(Value::Object(f.raw.clone())),
            }
        }
    }
    Value::Object(m)
}

/// PocketBase's import, in one transaction: every collection saved first (tables before
/// views), then each validated against the result (rules, view queries included); any failure
/// undoes all of it.
fn import_all(
    tx: crate::store::Conn<'_>,
    store: &crate::store::Store,
    list: &[Value],
    delete_missing: bool,
) -> Result<(), StoreError> {
    let invalid = |name: &str, id: &str, why: String| {
        StoreError::Invalid(format!("{MSG_IMPORT_INVALID} {name:?} ({id}):\n{why}"))
    };
    let start = store.schema();
    let mut current: Vec<Collection> = start.collections.iter().map(|c| (**c).clone()).collect();
    // (existing, entry) pairs, tables first.
    let mut entries: Vec<(Option<Collection>, Value)> = Vec::new();
    for entry in list {
        let key = entry
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .or_else(|| entry.get("name").and_then(Value::as_str))
            .unwrap_or("");
        let existing = start.by_id_or_name(key).map(|c| (**c).clone());
        let entry = import_entry(entry, existing.as_ref(), delete_missing);
        entries.push((existing, entry));
    }
    // Every entry is decoded before anything is saved: a body PocketBase cannot unmarshal
    // (an unknown field type, a value of the wrong JSON type) fails the import up front, the
    // first such entry in the given order.
    for (old, entry) in &entries {
        if let Err(DefineError::BadTypeData(w) | DefineError::BadFormat(w)) =
            define::prepare_as(entry, old.as_ref(), &start, true)
        {
            return Err(StoreError::Invalid(w));
        }
    }
    // PocketBase's order: tables before views, then by `created` and `updated` (the entry's own
    // when it gives them, else the existing collection's; a new one without them sorts first).
    let is_view = |(old, e): &(Option<Collection>, Value)| {
        e.get("type").and_then(Value::as_str) == Some("view")
            || (e.get("type").is_none() && old.as_ref().is_some_and(|o| o.is_view()))
    };
    let stamp = |(old, e): &(Option<Collection>, Value), key: &str| -> String {
        match e.get(key).and_then(Value::as_str) {
            Some(given) => crate::schema::date::parse(given),
            None => old.as_ref().map_or_else(String::new, |o| match key {
                "created" => o.created.clone(),
                _ => o.updated.clone(),
            }),
        }
    };
    entries.sort_by_cached_key(|x| (is_view(x), stamp(x, "created"), stamp(x, "updated")));
    if delete_missing {
        for c in start.collections.iter().filter(|c| !c.system) {
            let kept = entries.iter().any(|(old, e)| {
                old.as_ref().is_some_and(|o| o.id == c.id) || e["id"] == c.id.as_str()
            });
            if !kept {
                ddl::delete_collection(tx, c)?;
                current.retain(|x| x.id != c.id);
            }
        }
    }
    // Save each (its validation comes once all are saved, so relations may point forward).
    let mut saved: Vec<(Option<Collection>, Value, Collection)> = Vec::new();
    for (old, entry) in entries {
        let name = entry.get("name").and_then(Value::as_str).unwrap_or("");
        if let Some(e) = ddl::unquoted_name_error(tx, name) {
            return Err(StoreError::Invalid(format!(
                "failed to save collection {}: SQL logic error: {e} (1).",
                super::files::go_quote(name)
            )));
        }
        let snapshot = Schema::new(current.clone());
        let built =
            define::prepare_as(&entry, old.as_ref(), &snapshot, true).map_err(|e| match e {
                DefineError::BadTypeData(w) | DefineError::BadFormat(w) => StoreError::Invalid(w),
                DefineError::Invalid(d) => StoreError::Invalid(Value::Object(d).to_string()),
            })?;
        let mut c = built.collection;
        if c.is_view() {
            c.fields = ddl::probe_view(tx, &snapshot, c.view_query())?.fields;
        }
        let same_as_old = old.as_ref().filter(|o| o.id == c.id);
        match same_as_old {
            Some(o) => ddl::update_collection(tx, o, &c)?,
            None => ddl::create_collection(tx, &c)?,
        }
        current.retain(|x| x.id != c.id);
        current.push(c.clone());
        saved.push((old, entry, c));
    }
    // Then validate each against what was saved, as PocketBase does: a collection the import
    // creates is checked as an update of itself (its id's create-only checks skipped, and a
    // relation may point at itself), one it changes as an update of what it was.
    let fin = Schema::new(current.clone());
    for (old, entry, c) in &saved {
        let original = old.as_ref().filter(|o| o.id == c.id).unwrap_or(c);
        let mut built = define::prepare(entry, Some(original), &fin)
            .map_err(|e| invalid(&c.name, &c.id, format!("{e:?}")))?;
        if built.collection.is_view() {
            let probe = ddl::probe_view(tx, &fin, built.collection.view_query())?;
            built.set_view_fields(probe.fields, probe.error, &fin);
        }
        check_rules(&fin, &mut built, Some(c));
        if !built.errors.is_empty() {
            return Err(StoreError::Invalid(format!(
                "{MSG_IMPORT_INVALID} {:?} ({}):\n{}.",
                c.name,
                c.id,
                go_errors_text(&built.errors, 0)
            )));
        }
    }
    Ok(())
}

/// How an import names the collection that failed its validation.
const MSG_IMPORT_INVALID: &str = "Data validations failed for collection";

/// Validation errors as Go's `json.MarshalIndent(errors, "", "  ")` writes PocketBase's
/// validation errors: keys sorted, each error as its raw message (ozzo-validation's own in
/// lower case, PocketBase's without the full stop its API adds).
fn go_errors_text(errors: &Map<String, Value>, depth: usize) -> String {
    let raw = |e: &Map<String, Value>| -> String {
        let code = e.get("code").and_then(Value::as_str).unwrap_or("");
        let msg = e.get("message").and_then(Value::as_str).unwrap_or("");
        super::error::library_raw(code, msg)
            .unwrap_or_else(|| msg.strip_suffix('.').unwrap_or(msg).to_owned())
    };
    let mut keys: Vec<&String> = errors.keys().collect();
    keys.sort();
    let pad = "  ".repeat(depth + 1);
    let mut out = String::from("{\n");
    for (n, k) in keys.iter().enumerate() {
        out.push_str(&pad);
        crate::schema::value::go_json_string(&mut out, k);
        out.push_str(": ");
        match &errors[*k] {
            Value::Object(e) if e.contains_key("code") => {
                crate::schema::value::go_json_string(&mut out, &raw(e));
            }
            Value::Object(inner) => out.push_str(&go_errors_text(inner, depth + 1)),
            other => out.push_str(&other.to_string()),
        }
        out.push_str(if n + 1 < keys.len() { ",\n" } else { "\n" });
    }
    out.push_str(&"  ".repeat(depth));
    out.push('}');
    out
}

/// The import body bound as PocketBase binds it into its form struct: `collections` a list of
/// objects (a null entry binds as an empty one), `deleteMissing` a bool, anything else the
/// loading error. Of a form's plain values only `deleteMissing` binds (Go's `ParseBool` of its
/// first value, an empty one leaving it false); a plain `collections` value cannot. The
/// `@jsonPayload` keys go on top as JSON.
fn import_input(parsed: super::body::Parsed) -> Result<(Option<Vec<Value>>, bool), ()> {
    let (mut list, mut delete_missing) = (None, false);
    let json = match parsed.form {
        None => parsed.data,
        Some(form) => {
            if form.plain.iter().any(|(k, _)| k == "collections") {
                return Err(());
            }
            if let Some((_, v)) = form.plain.iter().find(|(k, _)| k == "deleteMissing")
                && !v.is_empty()
            {
                delete_missing = crate::schema::value::go_parse_bool(v).ok_or(())?;
            }
            form.payload
        }
    };
    match json.get("collections") {
        None | Some(Value::Null) => {}
        Some(Value::Array(entries)) => {
            let entries = entries
                .iter()
                .map(|e| match e {
                    Value::Object(_) => Ok(e.clone()),
                    Value::Null => Ok(Value::Object(Map::new())),
                    _ => Err(()),
                })
                .collect::<Result<Vec<_>, ()>>()?;
            list = Some(entries);
        }
        Some(_) => return Err(()),
    }
    match json.get("deleteMissing") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => delete_missing = *b,
        Some(_) => return Err(()),
    }
    Ok((list, delete_missing))
}

pub(crate) async fn import(
    State(state): State<Shared>,
    _su: Superuser,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let parsed =
        super::body::parse_struct(&headers, uri.query(), body, state.cfg.http.body_bytes_max)
            .await
            .map_err(|e| e.answer(super::body::MSG_UNSUPPORTED, super::body::MSG_LOAD_FAILED))?;
    let (list, delete_missing) =
        import_input(parsed).map_err(|()| ApiError::bad(super::body::MSG_LOAD_FAILED))?;
    let fail = |why: String| {
        // A collection that fails its validation is reported as it is; any other failure
        // (a body that does not decode, a database error) as the raw error of the import.
        let message = if why.starts_with(MSG_IMPORT_INVALID) {
            why
        } else {
            format!("Failed to import the collections configuration. Raw error:\n{why}")
        };
        let mut data = Map::new();
        data.insert(
            "collections".into(),
            define::verr("validation_collections_import_failure", &message),
        );
        ApiError::with_data(
            StatusCode::BAD_REQUEST,
            "Failed to import collections.",
            data,
        )
    };
    // An empty list is as missing as no list.
    let Some(list) = list.filter(|l| !l.is_empty()) else {
        let mut data = Map::new();
        data.insert(
            "collections".into(),
            define::verr("validation_required", "Cannot be blank."),
        );
        return Err(ApiError::with_data(
            StatusCode::BAD_REQUEST,
            super::error::MSG_VALIDATION,
            data,
        ));
    };
    let store = Arc::clone(&state.store);
    let before: Vec<String> = state
        .store
        .schema()
        .collections
        .iter()
        .map(|c| c.id.clone())
        .collect();
    state
        .store
        .write_schema(move |tx| import_all(tx, &store, &list, delete_missing))
        .await
        .map_err(|e| match e {
            StoreError::Invalid(w) => fail(w),
            StoreError::ViewQuery { why, .. } => fail(why),
            // PocketBase answers a refused index with the index errors themselves, not
            // quoted under `collections` as its other import failures are.
            StoreError::IndexesRefused(r) => ApiError::with_data(
                StatusCode::BAD_REQUEST,
                "Failed to import collections.",
                indexes_refused(r),
            ),
            StoreError::ViewDependency(w) => fail(w),
            StoreError::Sqlite(s) => fail(s.to_string()),
            other => other.into(),
        })?;
    state.plugins.schema_changed();
    // The collections `deleteMissing` removed take their files with them.
    let after = state.store.schema();
    for id in before.iter().filter(|id| after.by_id(id).is_none()) {
        state.records.files.delete_collection(id).await;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /api/collections/meta/dry-run-view {"query"}`: the fields a view collection with this
/// query would get and up to 10 of its rows, as the dashboard previews them; nothing is kept.
pub(crate) async fn dry_run_view(
    State(state): State<Shared>,
    _su: Superuser,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    const QUERY_CHARS_MAX: usize = 5000;
    let input = body_json(
        &state,
        &headers,
        uri.query(),
        body,
        super::body::MSG_LOAD_FAILED,
        super::body::MSG_LOAD_FAILED,
    )
    .await?;
    let query = match input.get("query") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(ApiError::bad(super::body::MSG_LOAD_FAILED)),
    };
    let invalid = if query.is_empty() {
        Some(define::verr("validation_required", "Cannot be blank."))
    } else if query.chars().count() > QUERY_CHARS_MAX {
        Some(define::verr_params(
            "validation_length_too_long",
            &format!("The length must be no more than {QUERY_CHARS_MAX}."),
            json!({"max": QUERY_CHARS_MAX, "min": 0}),
        ))
    } else {
        None
    };
    if let Some(e) = invalid {
        let mut data = Map::new();
        data.insert("query".into(), e);
        return Err(ApiError::with_data(
            StatusCode::BAD_REQUEST,
            super::error::MSG_VALIDATION,
            data,
        ));
    }
    let schema = state.store.schema();
    let name = format!("temp_view_{}", crate::schema::ids::lower_alnum(5));
    let c = build(
        &json!({"name": name, "type": "view", "viewQuery": query}),
        None,
        &schema,
    )
    .map_err(|e| define_error(e, "Invalid view query."))?;
    let (view, rows) = state
        .store
        .write(move |conn| {
            let out = ddl::dry_run_view(conn, &schema, &c, 10)?;
            Ok((c, out))
        })
        .await
        .map_err(|e| match e {
            StoreError::ViewQuery { why, .. } => {
                let stop = if why.ends_with(['.', '!', '?']) {
                    ""
                } else {
                    "."
                };
                ApiError::bad(format!("Invalid view query. Raw error: \n{why}{stop}"))
            }
            other => other.into(),
        })
        .map(|(mut c, (fields, rows))| {
            c.fields = fields;
            (Arc::new(c), rows)
        })?;
    let viewer = crate::records::json::Viewer {
        superuser: true,
        ..Default::default()
    };
    let sample: Vec<Value> = rows
        .into_iter()
        .map(|r| Value::Object(crate::records::json::record_json(&view, r, &viewer)))
        .collect();
    Ok(ok_json(
        &json!({"fields": view.to_api_json()["fields"].clone(), "sample": sample}),
    ))
}
