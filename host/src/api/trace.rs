//! One tracing span per request: method, matched route, caller kind, status and duration. At
//! debug level every request ends with a line inside its span; a 5xx is logged at error level
//! whatever the level, with its method and path (its cause was logged once, where it arose).

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use std::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

/// The outermost layer: opens the span and closes it with the status and the duration.
pub(super) async fn request_span(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    let span = tracing::debug_span!(
        "request",
        method = %method,
        route = Empty,
        caller = Empty,
        status = Empty,
        us = Empty
    );
    let started = Instant::now();
    let res = next.run(req).instrument(span.clone()).await;
    let status = res.status().as_u16();
    if res.status().is_server_error() {
        span.in_scope(|| tracing::error!(%method, path = uri.path(), status, "request failed"));
    }
    if !span.is_disabled() {
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        span.record("status", status);
        span.record("us", us);
        span.in_scope(|| tracing::debug!("done"));
    }
    res
}

/// A route layer: names the matched route in the request's span.
pub(super) async fn matched_route(req: Request, next: Next) -> Response {
    if let Some(p) = req.extensions().get::<MatchedPath>() {
        note_route(p.as_str());
    }
    next.run(req).await
}

/// Name the route of the current request (a plugin route names its pattern).
pub(crate) fn note_route(route: &str) {
    if tracing::enabled!(tracing::Level::DEBUG) {
        tracing::Span::current().record("route", route);
    }
}

/// Name the kind of caller of the current request (`superuser` or `auth:<collection>`; a guest
/// leaves it empty).
pub(crate) fn note_caller(caller: &crate::records::Caller) {
    if tracing::enabled!(tracing::Level::DEBUG) {
        let kind = if caller.is_superuser() {
            "superuser".to_owned()
        } else {
            format!("auth:{}", caller.collection.name)
        };
        tracing::Span::current().record("caller", kind);
    }
}
