//! `GET /api/metrics` (superusers) and the unauthenticated `GET /metrics` of pb.toml's
//! `[metrics] listen`: the process's metrics as `metrics::render` writes them.

use super::extract::Superuser;
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The metrics, for a superuser.
pub(crate) async fn metrics(_: Superuser) -> Response {
    scrape().await
}

async fn scrape() -> Response {
    let text = crate::metrics::render();
    let mut res = (StatusCode::OK, text).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

/// The router of the separate metrics listener: `GET /metrics`, nothing else.
pub(crate) fn listener_router() -> Router {
    Router::new().route("/metrics", get(scrape))
}
