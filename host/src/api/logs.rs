//! `/api/logs`: the request logs' list, one row, hourly stats and delete, for superusers; and
//! the middleware step that hands each finished request to the logs area.

use super::error::{ApiError, ApiResult, Refused};
use super::extract::Superuser;
use super::records::{paging, skip_total};
use super::{Shared, ok_json, query_map};
use crate::logs::{self, RequestFacts};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

pub(crate) async fn list(
    State(state): State<Shared>,
    _su: Superuser,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let q = query_map(raw.as_deref());
    let text = |k: &str| q.get(k).and_then(Value::as_str);
    let sel = logs::select(text("filter"), text("sort")).map_err(|_| ApiError::bad_request())?;
    let (page, per_page) = paging(&q, &state.cfg.limits)?;
    let skip = skip_total(&q)?;
    let (rows, total) = logs::page(Arc::clone(&state.store), sel, (page, per_page), skip)
        .await
        .map_err(|_| ApiError::bad_request())?;
    let pages = if total < 0 {
        -1
    } else {
        (total + per_page - 1) / per_page
    };
    let items: Vec<Value> = rows.iter().map(logs::row_json).collect();
    Ok(ok_json(&json!({
        "items": items,
        "page": page,
        "perPage": per_page,
        "totalItems": total,
        "totalPages": pages,
    })))
}

pub(crate) async fn view(
    State(state): State<Shared>,
    _su: Superuser,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    match logs::one(Arc::clone(&state.store), id).await {
        Ok(Some(row)) => Ok(ok_json(&logs::row_json(&row))),
        _ => Err(ApiError::not_found()),
    }
}

pub(crate) async fn stats(
    State(state): State<Shared>,
    _su: Superuser,
    RawQuery(raw): RawQuery,
) -> ApiResult<Response> {
    let q = query_map(raw.as_deref());
    let filter = q.get("filter").and_then(Value::as_str);
    let sel = logs::select(filter, None).map_err(|_| ApiError::bad("Invalid filter format."))?;
    let stats = logs::stats(Arc::clone(&state.store), sel)
        .await
        .map_err(|_| ApiError::bad("Failed to generate logs stats."))?;
    Ok(ok_json(&stats))
}

pub(crate) async fn delete(State(state): State<Shared>, _su: Superuser) -> ApiResult<Response> {
    logs::delete_all(Arc::clone(&state.store))
        .await
        .map_err(|_| ApiError::bad("Failed to delete the logs."))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// What the logging step reads of a request before it runs.
pub(crate) struct Asked {
    started: std::time::Instant,
    method: String,
    uri: String,
    referer: String,
    user_agent: String,
    user_ip: String,
    remote_ip: String,
    /// The `Authorization` header, resolved to a caller after the response.
    authorization: Option<HeaderValue>,
}

/// Gather what a request's log row needs; None when logging is off.
pub(crate) fn asked(state: &Shared, req: &axum::extract::Request) -> Option<Asked> {
    let settings = state.settings.peek();
    if !logs::enabled(&settings.logs) {
        return None;
    }
    let h = req.headers();
    let text = |name: header::HeaderName| {
        h.get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default()
    };
    let (user_ip, remote_ip) = if settings.logs.log_ip {
        // Printed once when no proxy header names the client (the usual case).
        let peer = super::peer_ip(req.extensions());
        (
            super::proxied_ip(&settings, h).unwrap_or_else(|| peer.clone()),
            peer,
        )
    } else {
        (String::new(), String::new())
    };
    let authorization = h.get(header::AUTHORIZATION).cloned();
    Some(Asked {
        started: std::time::Instant::now(),
        method: req.method().as_str().to_owned(),
        uri: req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned()),
        referer: text(header::REFERER),
        user_agent: text(header::USER_AGENT),
        user_ip,
        remote_ip,
        authorization,
    })
}

/// Hand a finished request to the logs, as PocketBase logs it: every request but a successful
/// one to the logs API itself, to the realtime stream or for the dashboard (its files and
/// the redirect to them).
pub(crate) fn finished(
    state: &Shared,
    a: Asked,
    res: &Response,
) -> impl Future<Output = ()> + Send + 'static {
    let exec_ms = a.started.elapsed().as_secs_f64() * 1000.0;
    let refused = res.extensions().get::<Refused>().cloned();
    let status = res.status().as_u16();
    let state = Arc::clone(state);
    async move { record(&state, a, exec_ms, status, refused).await }
}

async fn record(state: &Shared, a: Asked, exec_ms: f64, status: u16, refused: Option<Refused>) {
    let path = a.uri.split('?').next().unwrap_or("");
    if refused.is_none()
        && (path == "/api/logs"
            || path.starts_with("/api/logs/")
            || (path == "/api/realtime" && a.method == "GET")
            || path == "/_"
            || path.starts_with("/_/"))
    {
        return;
    }
    let raw = a.authorization.as_ref().and_then(|v| v.to_str().ok());
    let auth = match raw {
        Some(raw) => super::authorized(state, raw).await.map(|c| {
            (
                c.collection.name.clone(),
                c.collection.stored_text(&c.record, "id").to_owned(),
            )
        }),
        None => None,
    };
    let settings = state.settings.peek();
    logs::record(
        &state.store,
        &settings.logs,
        RequestFacts {
            method: a.method,
            uri: a.uri,
            status,
            exec_ms,
            referer: a.referer,
            user_agent: a.user_agent,
            auth,
            user_ip: a.user_ip,
            remote_ip: a.remote_ip,
            error: refused.map(|r| (r.message, r.details)),
        },
    );
}
