//! `GET /api/health`: note PocketBase's `code` (not `status`) in this one body.

use super::{Shared, caller, client_ip, ok_json};
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::json;

/// Headers that suggest a reverse proxy in front, after the configured trusted ones (the
/// dashboard reminds superusers to configure `trustedProxy` when it sees one).
const COMMON_PROXY_HEADERS: &[&str] = &["CF-Connecting-IP", "Fly-Client-IP", "X-Forwarded-For"];

pub(crate) async fn health(State(state): State<Shared>, request: Request) -> Response {
    let headers = request.headers();
    let data = match caller(&state, headers).await {
        Some(c) if c.is_superuser() => {
            let settings = state.settings.current();
            let proxy_header = settings
                .trusted_proxy
                .headers
                .iter()
                .map(String::as_str)
                .chain(COMMON_PROXY_HEADERS.iter().copied())
                .find(|h| headers.get(*h).is_some_and(|v| !v.as_bytes().is_empty()))
                .unwrap_or("");
            // PocketBase's meaning: no backup or restore is running now.
            let mut data = json!({"canBackup": state.backups.idle(),
                   "realIP": client_ip(&settings, headers, request.extensions()),
                   "possibleProxyHeader": proxy_header});
            // Ours, not PocketBase's: only while [replication] is on.
            if let Some(r) = &state.replication {
                data["replication"] = r.status_json();
            }
            data
        }
        _ => json!({}),
    };
    ok_json(&json!({"message": "API is healthy.", "code": 200, "data": data}))
}
