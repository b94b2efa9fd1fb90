//! One tracing span per request: method, matched route, caller kind, status and duration. At
//! debug level every request ends with a line inside its span; a 5xx is logged at error level
//! whatever the level, with its method and path (its cause was logged once, where it arose).
//! Below debug level a request pays for none of it beyond one level check.

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, Uri};
use axum::response::Response;
use std::future::Future;
use std::task::{Context, Poll};
use std::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

/// Run one request's handling (`handled`) inside its span.
pub(super) async fn traced(
    method: Method,
    uri: Uri,
    handled: impl Future<Output = Response>,
) -> Response {
    let span = tracing::debug_span!(
        "request",
        method = %method,
        route = Empty,
        caller = Empty,
        status = Empty,
        us = Empty
    );
    if span.is_disabled() {
        let res = handled.await;
        if res.status().is_server_error() {
            let status = res.status().as_u16();
            tracing::error!(%method, path = uri.path(), status, "request failed");
        }
        return res;
    }
    let started = Instant::now();
    let res = handled.instrument(span.clone()).await;
    let status = res.status().as_u16();
    let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    span.record("status", status);
    span.record("us", us);
    span.in_scope(|| {
        if res.status().is_server_error() {
            tracing::error!(path = uri.path(), "request failed");
        } else {
            tracing::debug!("done");
        }
    });
    res
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

/// The route layer that names the matched route in the request's span. A plain service (no
/// boxed future per request, as `middleware::from_fn` would cost): it only looks at the
/// request when debug logging is on.
#[derive(Clone)]
pub(super) struct NoteRoute<S>(S);

/// `Router::route_layer(trace::note_routes())`.
pub(super) fn note_routes<S>() -> impl tower_layer::Layer<S, Service = NoteRoute<S>> + Clone {
    tower_layer::layer_fn(NoteRoute)
}

impl<S> tower_service::Service<Request> for NoteRoute<S>
where
    S: tower_service::Service<Request>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if tracing::enabled!(tracing::Level::DEBUG)
            && let Some(p) = req.extensions().get::<MatchedPath>()
        {
            note_route(p.as_str());
        }
        self.0.call(req)
    }
}
