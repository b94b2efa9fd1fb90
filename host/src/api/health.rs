//! `GET /api/health`: note PocketBase's `code` (not `status`) in this one body.

use super::{Shared, caller, ok_json};
use crate::http::Peer;
use axum::Extension;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use serde_json::json;

pub(crate) async fn health(
    State(state): State<Shared>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
) -> Response {
    let data = match caller(&state, &headers).await {
        Some(c) if c.is_superuser() => {
            json!({"canBackup": false, "realIP": peer.map(|Extension(Peer(a))| a.ip().to_string()).unwrap_or_default(), "possibleProxyHeader": ""})
        }
        _ => json!({}),
    };
    ok_json(&json!({"message": "API is healthy.", "code": 200, "data": data}))
}
