//! One tracing span per request: method, matched route, caller kind, status and duration. With
//! pb.toml's `[log] requests` (or at debug level) every request ends with a line inside its
//! span; a 5xx is logged at error level whatever the level, with its method and path (its
//! cause was logged once, where it arose). Otherwise a request pays for none of it beyond one
//! level check. Also where each request is counted in the metrics (`measured`), by the route
//! it matched.

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, Uri};
use axum::response::Response;
use std::cell::RefCell;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

/// pb.toml's `[log] requests`: one info line per request (set for each server generation).
static REQUEST_LINES: AtomicBool = AtomicBool::new(false);

/// Whether each request ends with an info line (`[log] requests`).
pub(crate) fn set_request_lines(on: bool) {
    REQUEST_LINES.store(on, Ordering::Relaxed);
}

/// The route a request matched, as its metrics and its log line name it.
enum Route {
    Native(MatchedPath),
    Plugin(String),
}

tokio::task_local! {
    /// The route the request being handled by this task matched, once routing found it.
    static ROUTE: RefCell<Option<Route>>;
}

/// Run one whole request (`handled`, from the outermost middleware) with a place for its
/// route, then count it in the metrics: method, route (or `unmatched`), status, time until
/// its response head.
pub(super) async fn measured(method: Method, handled: impl Future<Output = Response>) -> Response {
    let started = Instant::now();
    ROUTE
        .scope(RefCell::new(None), async move {
            let res = handled.await;
            let took = started.elapsed();
            let status = res.status().as_u16();
            // Never panics: inside the scope.
            ROUTE.with(|r| {
                let route = r.borrow();
                let label = match &*route {
                    Some(Route::Native(p)) => p.as_str(),
                    Some(Route::Plugin(p)) => p.as_str(),
                    None => crate::metrics::UNMATCHED,
                };
                crate::metrics::request(method.as_str(), label, status, took);
            });
            res
        })
        .await
}

fn lines() -> bool {
    REQUEST_LINES.load(Ordering::Relaxed) || tracing::enabled!(tracing::Level::DEBUG)
}

/// Run one request's handling (`handled`) inside its span.
pub(super) async fn traced(
    method: Method,
    uri: Uri,
    handled: impl Future<Output = Response>,
) -> Response {
    // A span's level is part of its static metadata: one macro, two call sites.
    macro_rules! request_span {
        ($level:expr) => {
            tracing::span!(
                $level,
                "request",
                method = %method,
                route = Empty,
                caller = Empty,
                status = Empty,
                us = Empty
            )
        };
    }
    let info = REQUEST_LINES.load(Ordering::Relaxed);
    let span = if info {
        request_span!(tracing::Level::INFO)
    } else {
        request_span!(tracing::Level::DEBUG)
    };
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
        } else if info {
            tracing::info!("done");
        } else {
            tracing::debug!("done");
        }
    });
    res
}

/// Name the route of the current request: a plugin route names its pattern.
pub(crate) fn note_route(route: &str) {
    let _ = ROUTE.try_with(|r| *r.borrow_mut() = Some(Route::Plugin(route.to_owned())));
    if lines() {
        tracing::Span::current().record("route", route);
    }
}

/// Name the kind of caller of the current request (`superuser` or `auth:<collection>`; a guest
/// leaves it empty).
pub(crate) fn note_caller(caller: &crate::records::Caller) {
    if lines() {
        let kind = if caller.is_superuser() {
            "superuser".to_owned()
        } else {
            format!("auth:{}", caller.collection.name)
        };
        tracing::Span::current().record("caller", kind);
    }
}

/// The route layer that names the matched route for the request's metrics and span. A plain
/// service (no boxed future per request, as `middleware::from_fn` would cost).
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
        if let Some(p) = req.extensions().get::<MatchedPath>() {
            if lines() {
                tracing::Span::current().record("route", p.as_str());
            }
            let _ = ROUTE.try_with(|r| *r.borrow_mut() = Some(Route::Native(p.clone())));
        }
        self.0.call(req)
    }
}
