//! PocketBase's generic `?fields=` for the JSON answers whose handlers do not pick fields
//! themselves (settings, a collection, logs, health, crons, backups, auth methods...): a 2xx
//! JSON answer is reduced to the listed fields (of each item, for a paged list); a `fields`
//! PocketBase cannot parse turns such an answer into its 400. Error answers are left as they
//! are, as in PocketBase.

use super::error::ApiError;
use crate::records::json::FieldsFilter;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The `fields` query parameter, when set and not blank.
fn fields_param(query: Option<&str>) -> Option<String> {
    crate::http::url_pairs(query?)
        .into_iter()
        .find(|(k, _)| k == "fields")
        .map(|(_, v)| v)
        .filter(|v| !v.trim().is_empty())
}

/// Whole answers: an object, or each object of an array.
pub(super) async fn pick(request: Request, next: Next) -> Response {
    picked(request, next, false).await
}

/// Paged lists: each of the answer's `items`.
pub(super) async fn pick_items(request: Request, next: Next) -> Response {
    picked(request, next, true).await
}

async fn picked(request: Request, next: Next, items: bool) -> Response {
    let raw = fields_param(request.uri().query());
    let res = next.run(request).await;
    let Some(raw) = raw else {
        return res;
    };
    let json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if !res.status().is_success() || !json {
        return res;
    }
    let filter = match FieldsFilter::parse(Some(&raw)) {
        Ok(Some(f)) => f,
        Ok(None) => return res,
        Err(()) => return ApiError::bad_request().into_response(),
    };
    let (mut parts, body) = res.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return ApiError::internal().into_response();
    };
    let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let value = match value {
        Value::Object(mut m) if items => {
            if let Some(Value::Array(list)) = m.remove("items") {
                m.insert("items".into(), each(&filter, list));
            }
            Value::Object(m)
        }
        Value::Array(list) if !items => each(&filter, list),
        other if !items => filter.apply_value(other),
        other => other,
    };
    let out = crate::schema::value::go_json(&value);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, Body::from(out))
}

/// Each object of a list picked; a list whose first element is no object is left alone (as
/// PocketBase's picker does).
fn each(filter: &FieldsFilter, list: Vec<Value>) -> Value {
    if !list.first().is_some_and(Value::is_object) {
        return Value::Array(list);
    }
    Value::Array(list.into_iter().map(|v| filter.apply_value(v)).collect())
}
