//! Owns axum: the routes, extractors, status codes and PocketBase's JSON. Contains no SQL text,
//! no rusqlite and no wasmtime.

mod auth;
mod auth_flows;
mod backups;
mod batch;
mod body;
pub(crate) mod cache;
mod collections;
mod dashboard;
pub(crate) mod error;
mod extract;
mod fields;
mod files;
mod health;
mod logs;
pub(crate) mod metrics;
mod oauth2;
mod plugin_routes;
pub(crate) mod rate_limit;
mod realtime;
mod records;
pub(crate) mod settings;
mod trace;

use crate::auth::token;
use crate::config::Config;
use crate::schema::Collection;
use crate::store::{Store, records as store_records};
use axum::Router;
use axum::extract::Request;
use axum::handler::Handler as _;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use error::ApiError;
use serde_json::{Map, Value};
use std::sync::Arc;

pub(crate) struct AppState {
    pub store: Arc<Store>,
    /// PocketBase's settings in effect (a snapshot; `settings::Live` swaps it on change).
    pub settings: Arc<crate::settings::Live>,
    /// The request counters of `settings.rateLimits`.
    pub limiters: rate_limit::Limiters,
    /// Realtime clients and their subscriptions.
    pub realtime: Arc<crate::realtime::Hub>,
    pub cfg: Arc<Config>,
    pub caches: cache::Caches,
    pub plugins: Arc<crate::plugins::Plugins>,
    pub records: Arc<crate::records::Records>,
    /// Mails waiting to be sent, off the request path.
    pub outbox: Arc<crate::auth::mail::Outbox>,
    /// Wrong OTP codes per record and client.
    pub otp_attempts: crate::auth::limits::Windows,
    /// Brute-force protection (pb.toml `[auth]`): failed sign-ins, mails asked for.
    pub throttle: crate::auth::limits::Throttle,
    /// The pause after a verification or password-reset mail to a record.
    pub mail_cooldowns: crate::auth::limits::Cooldowns,
    /// The backups folder and the one backup or restore running.
    pub backups: Arc<crate::backups::Backups>,
    /// Replication's state and supervisor (None: `[replication]` is off).
    pub replication: Option<crate::replication::Replication>,
    /// PocketBase's built-in cron jobs.
    pub jobs: Arc<crate::jobs::Jobs>,
    /// Apple's user names from its redirects, until their sign-in takes them.
    pub apple_names: crate::auth::oauth2::apple_name::RedirectNames,
}

pub(crate) type Shared = Arc<AppState>;

pub(crate) use crate::records::Caller;

/// The request's headers as the record layer reads them (`@request.headers`, plugin calls):
/// borrowed, so nothing is copied unless a rule or a hook asks.
impl crate::records::RequestHeaders for HeaderMap {
    fn each(&self, f: &mut dyn FnMut(&str, &str)) {
        for (k, v) in self {
            f(k.as_str(), v.to_str().unwrap_or(""));
        }
    }
}

/// Seconds since the epoch, with the fraction (token times are compared to the microsecond,
/// as PocketBase compares them).
pub(crate) fn now_s() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1e6
}

/// Resolve the `Authorization` header to a caller. Anything invalid is a guest, as in PocketBase;
/// endpoints that need auth answer 401 themselves.
pub(crate) async fn caller(state: &AppState, headers: &HeaderMap) -> Option<Caller> {
    let raw = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    authorized(state, raw).await
}

/// [`caller`] of an `Authorization` header's value.
pub(crate) async fn authorized(state: &AppState, raw: &str) -> Option<Caller> {
    let tok = token::from_header(raw);
    if tok.is_empty() {
        return None;
    }
    let schema = state.store.schema();
    let changes = state.store.changes();
    let now = now_s();
    // A token verified before stays verified while its auth collection is unchanged (any
    // change to it, a tokenKey rotation or a deletion included, drops the entry).
    if let Some(e) = state.caches.tokens.get(tok) {
        let current = schema.by_id(&e.caller.collection.id);
        if e.exp > now
            && current.is_some_and(|c| Arc::ptr_eq(c, &e.caller.collection))
            && changes.unchanged_since(e.stamp, [e.table.as_str()])
        {
            trace::note_caller(&e.caller);
            crate::metrics::cache(crate::metrics::Cache::Tokens, true);
            return Some(e.caller);
        }
        state.caches.tokens.remove(tok);
    }
    if state.caches.tokens.enabled() {
        crate::metrics::cache(crate::metrics::Cache::Tokens, false);
    }
    let stamp = changes.stamp();
    let (caller, claims) = token_record(state, tok, "auth", now).await?;
    if state.caches.tokens.enabled() {
        state.caches.tokens.insert(
            tok.to_owned(),
            cache::TokenEntry {
                table: caller.collection.name.to_ascii_lowercase(),
                caller: caller.clone(),
                exp: claims.exp.unwrap_or(now),
                stamp,
            },
            0,
        );
    }
    trace::note_caller(&caller);
    Some(caller)
}

/// The auth record a token of type `kind` (`auth`, `file`, ...) was issued to, checked as
/// PocketBase's `FindAuthRecordByToken` checks it: the claims read first (id, collectionId and
/// type present, the type the one asked for), the record found in its auth collection (by id or
/// name), the signature checked with its `tokenKey` and the collection's `<kind>Token` secret,
/// then the time claims. Not cached: [`caller`] caches auth tokens.
pub(crate) async fn token_record(
    state: &AppState,
    tok: &str,
    kind: &str,
    now: f64,
) -> Option<(Caller, token::Claims)> {
    let claims = token::peek(tok).ok()?;
    if claims.kind != kind {
        return None;
    }
    let coll = Arc::clone(state.store.schema().by_id_or_name(&claims.collection_id)?);
    if !coll.is_auth() {
        return None;
    }
    let secret = coll.token_secret(&format!("{kind}Token"))?.to_owned();
    let row = state
        .store
        .read(|conn| store_records::get(conn, &coll, &claims.id, None))
        .await
        .ok()??;
    let token_key = coll.stored_text(&row, "tokenKey");
    let verified = token::verify(tok, token_key, &secret, now).ok()?;
    let caller = Caller {
        collection: coll,
        record: row,
        refreshable: verified.refreshable,
    };
    Some((caller, claims))
}

/// An address as PocketBase prints one (`netip.Addr.StringExpanded`): IPv6 with all eight groups
/// of four digits.
fn expanded(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => v6
            .segments()
            .iter()
            .map(|g| format!("{g:04x}"))
            .collect::<Vec<_>>()
            .join(":"),
    }
}

/// The client's address as PocketBase's `RealIP` finds it: from the first configured trusted
/// proxy header present (its last value; the rightmost valid address, or the leftmost with
/// `useLeftmostIP`), else the socket's peer. Without `trustedProxy.headers` a client cannot
/// choose what address it is seen with.
pub(crate) fn client_ip(
    settings: &crate::settings::Settings,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> String {
    proxied_ip(settings, headers).unwrap_or_else(|| peer_ip(extensions))
}

/// The client's address from the trusted proxy headers (see [`client_ip`]), if one gives it.
pub(crate) fn proxied_ip(
    settings: &crate::settings::Settings,
    headers: &HeaderMap,
) -> Option<String> {
    let proxy = &settings.trusted_proxy;
    for name in &proxy.headers {
        let Some(last) = headers.get_all(name.as_str()).iter().next_back() else {
            continue;
        };
        let list = last.to_str().unwrap_or("");
        if list.is_empty() {
            continue;
        }
        let parse = |s: &str| s.trim().parse::<std::net::IpAddr>().ok();
        let found = if proxy.use_leftmost_ip {
            list.split(',').find_map(parse)
        } else {
            list.rsplit(',').find_map(parse)
        };
        if let Some(ip) = found {
            return Some(expanded(ip));
        }
    }
    None
}

/// The socket peer's address (PocketBase's `RemoteIP`), "" when the connection has none.
pub(crate) fn peer_ip(extensions: &axum::http::Extensions) -> String {
    extensions
        .get::<crate::http::Peer>()
        .map(|crate::http::Peer(a)| expanded(a.ip()))
        .unwrap_or_default()
}

/// [`client_ip`] of a request's head under the settings in effect.
pub(crate) fn request_ip(state: &AppState, head: &axum::http::request::Parts) -> String {
    client_ip(&state.settings.peek(), &head.headers, &head.extensions)
}

/// Whether the request's client may act as a superuser under `superuserIPs` (always while the
/// list is empty, which costs one load).
pub(crate) fn superuser_ip_allowed(
    state: &AppState,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> bool {
    let settings = state.settings.peek();
    settings.superuser_ips.is_empty()
        || crate::settings::ip_in_list(
            &settings.superuser_ips,
            &client_ip(&settings, headers, extensions),
        )
}

/// `superuserIPs`: a request carrying a superuser's token from an address outside the list is
/// refused whatever it asks (PocketBase's 403). Costs nothing while the list is empty.
async fn superuser_ip_refused(
    state: &AppState,
    headers: &HeaderMap,
    extensions: &axum::http::Extensions,
) -> bool {
    if !headers.contains_key(header::AUTHORIZATION)
        || superuser_ip_allowed(state, headers, extensions)
    {
        return false;
    }
    caller(state, headers)
        .await
        .is_some_and(|c| c.is_superuser())
}

/// The one middleware around every request: it counts the request in the metrics, runs it in
/// its span (`trace.rs`), refuses superusers outside `superuserIPs`, and adds the headers
/// PocketBase sends on every response.
async fn around(
    axum::extract::State(state): axum::extract::State<Shared>,
    req: Request,
    next: Next,
) -> Response {
    let method = req.method().clone();
    trace::measured(method, common_headers(state, req, next)).await
}

/// Security and CORS headers PocketBase sends on every response; preflights end here.
async fn common_headers(state: Shared, req: Request, next: Next) -> Response {
    let preflight = req.method() == Method::OPTIONS;
    let req_headers = req
        .headers()
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned();
    let (method, uri) = (req.method().clone(), req.uri().clone());
    let asked = if preflight {
        None
    } else {
        logs::asked(&state, &req)
    };
    // PocketBase lets its files be embedded: no X-Frame-Options on them.
    let file = uri.path().starts_with("/api/files/");
    let mut res = if preflight {
        StatusCode::NO_CONTENT.into_response()
    } else if superuser_ip_refused(&state, req.headers(), req.extensions()).await {
        ApiError::new(StatusCode::FORBIDDEN, error::MSG_NOT_ALLOWED).into_response()
    } else if let Err(limited) = rate_limit::check_route(
        &state,
        &rate_limit::Asking {
            method: method.as_str(),
            path: uri.path(),
            headers: req.headers(),
            extensions: req.extensions(),
        },
    )
    .await
    {
        limited.into_response()
    } else {
        trace::traced(method, uri, next.run(req)).await
    };
    let h = res.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    if !file {
        h.insert("x-frame-options", HeaderValue::from_static("SAMEORIGIN"));
    }
    h.insert(
        "x-xss-protection",
        HeaderValue::from_static("1; mode=block"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    if preflight {
        h.insert(
            header::ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET,HEAD,PUT,PATCH,POST,DELETE"),
        );
        if let Some(v) = req_headers {
            h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, v);
        }
    }
    if let Some(a) = asked {
        logs::finished(&state, a, &res).await;
    }
    res
}

/// Anything no route matched. PocketBase falls through to its static file handler there.
pub(crate) fn not_routed(method: &Method) -> ApiError {
    if method == Method::GET || method == Method::HEAD {
        ApiError::new(StatusCode::NOT_FOUND, "File not found.")
    } else {
        ApiError::not_found()
    }
}

/// The wrong method on a known path: PocketBase never answers 405.
async fn method_not_routed() -> ApiError {
    ApiError::not_found()
}

pub(crate) fn router(state: Shared) -> Router {
    trace::set_request_lines(state.cfg.log.requests);
    let api = Router::new()
        .route(
            "/api/health",
            get(health::health)
                .head(health::health)
                .layer(middleware::from_fn(fields::pick)),
        )
        .route("/_", get(dashboard::root))
        .route("/_/", get(dashboard::index))
        .route("/_/{*path}", get(dashboard::file))
        .route(
            "/api/collections",
            get(collections::list)
                .post(collections::create.layer(middleware::from_fn(fields::pick))),
        )
        .route(
            "/api/collections/import",
            axum::routing::put(collections::import),
        )
        .route(
            "/api/collections/meta/scaffolds",
            get(collections::scaffolds).layer(middleware::from_fn(fields::pick)),
        )
        .route(
            "/api/collections/meta/index-advice",
            get(collections::index_advice).delete(collections::index_advice_reset),
        )
        .route(
            "/api/collections/meta/dry-run-view",
            post(collections::dry_run_view),
        )
        .route(
            "/api/collections/{collection}",
            get(collections::view)
                .patch(collections::update)
                .delete(collections::delete)
                .layer(middleware::from_fn(fields::pick)),
        )
        .route(
            "/api/collections/{collection}/truncate",
            axum::routing::delete(collections::truncate),
        )
        .route(
            "/api/collections/{collection}/records",
            get(records::list).post(records::create),
        )
        .route(
            "/api/collections/{collection}/records/{id}",
            get(records::view)
                .patch(records::update)
                .delete(records::delete),
        )
        .route(
            "/api/collections/{collection}/auth-methods",
            get(auth::methods).layer(middleware::from_fn(fields::pick)),
        )
        .route(
            "/api/collections/{collection}/auth-with-password",
            post(auth::with_password),
        )
        .route(
            "/api/collections/{collection}/auth-refresh",
            post(auth::refresh),
        )
        .route(
            "/api/collections/{collection}/request-verification",
            post(auth_flows::request_verification),
        )
        .route(
            "/api/collections/{collection}/confirm-verification",
            post(auth_flows::confirm_verification),
        )
        .route(
            "/api/collections/{collection}/request-password-reset",
            post(auth_flows::request_password_reset),
        )
        .route(
            "/api/collections/{collection}/confirm-password-reset",
            post(auth_flows::confirm_password_reset),
        )
        .route(
            "/api/collections/{collection}/request-email-change",
            post(auth_flows::request_email_change),
        )
        .route(
            "/api/collections/{collection}/confirm-email-change",
            post(auth_flows::confirm_email_change),
        )
        .route(
            "/api/collections/{collection}/request-otp",
            post(auth_flows::request_otp),
        )
        .route(
            "/api/collections/{collection}/auth-with-otp",
            post(auth_flows::with_otp),
        )
        .route(
            "/api/collections/{collection}/impersonate/{id}",
            post(auth_flows::impersonate),
        )
        .route(
            "/api/collections/{collection}/auth-with-oauth2",
            post(oauth2::with_oauth2),
        )
        .route(
            "/api/oauth2-redirect",
            get(oauth2::redirect).post(oauth2::redirect),
        )
        .route(
            "/api/collections/{collection}/{action}",
            post(auth::unknown_action),
        )
        .route(
            "/api/settings",
            get(settings::view)
                .patch(settings::update)
                .layer(middleware::from_fn(fields::pick)),
        )
        .route("/api/batch", post(batch::batch))
        .route(
            "/api/files/token",
            post(files::token).layer(middleware::from_fn(fields::pick)),
        )
        .route(
            "/api/files/{collection}/{id}/{filename}",
            get(files::download).head(files::download),
        )
        .route(
            "/api/realtime",
            get(realtime::connect).post(realtime::subscribe),
        )
        .route("/api/settings/test/s3", post(settings::test_s3))
        .route("/api/settings/test/email", post(settings::test_email))
        .route(
            "/api/logs",
            get(logs::list.layer(middleware::from_fn(fields::pick_items))).delete(logs::delete),
        )
        .route(
            "/api/logs/stats",
            get(logs::stats).layer(middleware::from_fn(fields::pick)),
        )
        .route(
            "/api/logs/{id}",
            get(logs::view).layer(middleware::from_fn(fields::pick)),
        )
        .route(
            "/api/backups",
            get(backups::list.layer(middleware::from_fn(fields::pick))).post(backups::create),
        )
        .route("/api/backups/upload", post(backups::upload))
        .route(
            "/api/backups/{key}",
            get(backups::download).delete(backups::delete),
        )
        .route("/api/backups/{key}/restore", post(backups::restore))
        .route(
            "/api/crons",
            get(plugin_routes::crons_list).layer(middleware::from_fn(fields::pick)),
        )
        .route("/api/crons/{id}", post(plugin_routes::crons_run))
        .route("/api/plugins", get(plugin_routes::report))
        .route("/api/metrics", get(metrics::metrics))
        .method_not_allowed_fallback(method_not_routed)
        .route_layer(trace::note_routes())
        // Below every native route: plugin routes, else PocketBase's not-found.
        .fallback(plugin_routes::dispatch)
        .with_state(Arc::clone(&state));
    api.layer(middleware::from_fn_with_state(state, around))
}

/// The collection a records route names, by id or name.
pub(crate) fn find_collection(state: &AppState, key: &str) -> Option<Arc<Collection>> {
    state.store.schema().by_id_or_name(key).cloned()
}

pub(crate) fn query_map(raw: Option<&str>) -> Map<String, Value> {
    let mut m = Map::new();
    for (k, v) in crate::http::url_pairs(raw.unwrap_or("")) {
        m.entry(k).or_insert(Value::String(v));
    }
    m
}

pub(crate) fn ok_json(v: &Value) -> Response {
    error::json_response(StatusCode::OK, v)
}
