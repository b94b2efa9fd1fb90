//! Plugin routes (the fallback below every native route), `/api/crons` and `/api/plugins`.

use super::error::{ApiError, ApiResult};
use super::extract::Superuser;
use super::{Shared, caller, not_routed, ok_json};
use crate::plugins::RouteRequest;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::sync::Arc;

/// PocketBase's answer when a handler fails without an API error of its own.
const MSG_ROUTE_FAILED: &str = "Something went wrong while processing your request.";

/// Anything no native route matched: a plugin route, else PocketBase's not-found.
pub(crate) async fn dispatch(State(state): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let reg = state.plugins.registry();
    let Some((route, params)) = reg.route(parts.method.as_str(), parts.uri.path()) else {
        return not_routed(&parts.method).into_response();
    };
    super::trace::note_route(&route.pattern);
    let who = caller(&state, &parts.headers).await;
    // Checked here, before any wasm runs.
    if route.require_auth && who.is_none() {
        return ApiError::requires_auth().into_response();
    }
    let limit = state.cfg.http.body_bytes_max;
    let bytes = match http_body_util::Limited::new(body, limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return ApiError::too_large().into_response(),
    };
    let ip = super::client_ip(&state.settings.peek(), &parts.headers, &parts.extensions);
    let remote_ip = (!ip.is_empty()).then_some(ip);
    let no_query = serde_json::Map::new();
    let facts = crate::records::Access::request(
        who.as_ref(),
        parts.method.as_str(),
        parts.uri.path(),
        &parts.headers,
        &no_query,
        remote_ip.as_deref(),
    )
    .facts();
    let req = RouteRequest {
        method: parts.method.as_str().to_owned(),
        path: parts.uri.path().to_owned(),
        route: route.pattern.clone(),
        params,
        query: parts.uri.query().unwrap_or("").to_owned(),
        headers: facts.headers.clone(),
        body: bytes.to_vec(),
    };
    match route.plugin.route(Arc::new(facts), req).await {
        Ok(r) => {
            let status =
                StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut res = (status, Body::from(r.body)).into_response();
            let h = res.headers_mut();
            for (k, v) in r.headers {
                if let (Ok(k), Ok(v)) = (
                    HeaderName::try_from(k.as_str()),
                    HeaderValue::try_from(v.as_str()),
                ) {
                    h.append(k, v);
                }
            }
            res
        }
        Err(e) => {
            tracing::warn!(plugin = %route.plugin.name(), route = %route.pattern, error = %e, "plugin route failed");
            ApiError::bad(MSG_ROUTE_FAILED).into_response()
        }
    }
}

/// `GET /api/crons`: the jobs plugins registered.
pub(crate) async fn crons_list(State(state): State<Shared>, _su: Superuser) -> ApiResult<Response> {
    let reg = state.plugins.registry();
    // The plugins' jobs, then PocketBase's built-in ones.
    let list: Vec<Value> = reg
        .jobs
        .iter()
        .map(|j| json!({"id": j.id, "expression": j.expression}))
        .chain(
            state
                .jobs
                .list()
                .into_iter()
                .map(|(id, e)| json!({"id": id, "expression": e})),
        )
        .collect();
    Ok(ok_json(&Value::Array(list)))
}

/// `POST /api/crons/{id}`: run a job now (in the background, as PocketBase does).
pub(crate) async fn crons_run(
    State(state): State<Shared>,
    _su: Superuser,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    if state.jobs.run_now(&id) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let reg = state.plugins.registry();
    let Some(job) = reg.jobs.iter().find(|j| j.id == id).cloned() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "Missing or invalid cron job.",
        ));
    };
    let at = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0);
    tokio::spawn(async move {
        if let Err(e) = job.plugin.job(&job.id, at).await {
            tracing::warn!(job = %job.id, plugin = %job.plugin.name(), error = %e, "cron job failed");
        }
    });
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /api/plugins`: what is loaded, what was refused, and the reload history.
pub(crate) async fn report(State(state): State<Shared>, _su: Superuser) -> ApiResult<Response> {
    Ok(ok_json(&state.plugins.report()))
}
