//! `GET /api/health`: note PocketBase's `code` (not `status`) in this one body.

use super::{Shared, caller, ok_json};
use axum::extract::{ConnectInfo, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::json;
use std::net::SocketAddr;

pub(crate) async fn health(
    State(state): State<Shared>,
    ConnectInfo(addr): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let data = match caller(&state, &headers).await {
        Some(c) if c.is_superuser() => {
            json!({"canBackup": false, "realIP": addr.ip().to_string(), "possibleProxyHeader": ""})
        }
        _ => json!({}),
    };
    ok_json(&json!({"message": "API is healthy.", "code": 200, "data": data}))
}
