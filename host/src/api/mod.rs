//! Owns axum: the routes, extractors, status codes and PocketBase's JSON. Contains no SQL text,
//! no rusqlite and no wasmtime.

mod auth;
mod body;
pub(crate) mod cache;
mod collections;
pub(crate) mod error;
mod expand;
mod health;
mod plugin_routes;
pub(crate) mod plugin_services;
mod records;
pub(crate) mod serialize;

use crate::auth::token;
use crate::config::Config;
use crate::query::RequestInfo;
use crate::schema::value::from_stored;
use crate::schema::{Collection, SUPERUSERS_ID};
use crate::store::{Store, StoreRecord, records as store_records};
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use error::{ApiError, ApiResult};
use serde_json::{Map, Value, json};
use std::sync::Arc;

pub(crate) struct AppState {
    pub store: Arc<Store>,
    pub cfg: Arc<Config>,
    pub caches: cache::Caches,
    pub plugins: Arc<crate::plugins::Plugins>,
}

pub(crate) type Shared = Arc<AppState>;

/// The authenticated caller: the auth record a valid token names.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub collection: Arc<Collection>,
    pub record: StoreRecord,
    pub refreshable: bool,
}

impl Caller {
    pub(crate) fn is_superuser(&self) -> bool {
        self.collection.id == SUPERUSERS_ID
    }
    pub(crate) fn id(&self) -> String {
        self.value("id").as_str().unwrap_or("").to_owned()
    }
    /// The caller as plugins see it.
    pub(crate) fn principal(&self) -> crate::plugins::Principal {
        crate::plugins::Principal {
            collection: self.collection.name.clone(),
            id: self.id(),
            is_superuser: self.is_superuser(),
        }
    }
    pub(crate) fn value(&self, name: &str) -> Value {
        self.collection
            .fields
            .iter()
            .position(|f| f.name == name)
            .map(|i| from_stored(&self.collection.fields[i], self.record[i].clone()))
            .unwrap_or(Value::Null)
    }
    /// The caller as `@request.auth` sees it: every field (hidden ones included) plus the
    /// collection keys.
    pub(crate) fn as_rule_map(&self) -> Map<String, Value> {
        let mut m = Map::new();
        for (i, f) in self.collection.fields.iter().enumerate() {
            // Rules see the stored hash of a password, which the API form blanks.
            let v = if f.kind == crate::schema::FieldType::Password {
                json!(self.collection.stored_text(&self.record, &f.name))
            } else {
                from_stored(f, self.record[i].clone())
            };
            m.insert(f.name.clone(), v);
        }
        m.insert("collectionId".into(), json!(self.collection.id));
        m.insert("collectionName".into(), json!(self.collection.name));
        m
    }
}

/// Seconds since the epoch, with the fraction (token times are compared to the microsecond,
/// as PocketBase compares them).
fn now_s() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1e6
}

/// Resolve the `Authorization` header to a caller. Anything invalid is a guest, as in PocketBase;
/// endpoints that need auth answer 401 themselves.
pub(crate) async fn caller(state: &AppState, headers: &HeaderMap) -> Option<Caller> {
    let raw = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
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
            return Some(e.caller);
        }
        state.caches.tokens.remove(tok);
    }
    let stamp = changes.stamp();
    let claims = token::peek(tok).ok()?;
    if claims.kind != "auth" {
        return None;
    }
    // PocketBase finds the token's collection by id or by name.
    let coll = Arc::clone(schema.by_id_or_name(&claims.collection_id)?);
    if !coll.is_auth() {
        return None;
    }
    let secret = coll.token_secret("authToken")?.to_owned();
    let c2 = Arc::clone(&coll);
    let id = claims.id.clone();
    let row = state
        .store
        .read(move |conn| store_records::get(conn, &c2, &id, None))
        .await
        .ok()??;
    let token_key = coll.stored_text(&row, "tokenKey");
    let verified = token::verify(tok, token_key, &secret, now).ok()?;
    let caller = Caller {
        collection: coll,
        record: row,
        refreshable: verified.refreshable,
    };
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
    Some(caller)
}

/// What a plugin call made for an HTTP request knows of it (its `call-context`).
pub(crate) fn call_facts(
    who: Option<&Caller>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    remote_ip: Option<String>,
) -> crate::plugins::CallFacts {
    crate::plugins::CallFacts {
        principal: who.map(Caller::principal),
        system: false,
        method: Some(method.as_str().to_owned()),
        path: Some(path.to_owned()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
            .collect(),
        remote_ip,
        caller: who.map(|w| Arc::new(w.clone()) as Arc<dyn std::any::Any + Send + Sync>),
        depth: 0,
    }
}

/// What `@request.*` means for one request. Built on first use only: a public rule with no
/// filter (the common read) never pays for copying headers, query and the caller's fields.
pub(crate) struct RequestCtx<'a> {
    pub who: Option<&'a Caller>,
    method: &'a Method,
    headers: &'a HeaderMap,
    query: &'a Map<String, Value>,
    body: Option<&'a Map<String, Value>>,
    /// A write or read made by the server itself (a plugin's record call): no rules apply.
    system: bool,
    built: std::cell::OnceCell<RequestInfo>,
}

impl<'a> RequestCtx<'a> {
    pub(crate) fn new(
        who: Option<&'a Caller>,
        method: &'a Method,
        headers: &'a HeaderMap,
        query: &'a Map<String, Value>,
        body: Option<&'a Map<String, Value>>,
    ) -> Self {
        Self {
            who,
            method,
            headers,
            query,
            body,
            system: false,
            built: std::cell::OnceCell::new(),
        }
    }

    /// The same request, made by the server itself.
    pub(crate) fn made_by_system(mut self, system: bool) -> Self {
        self.system = system;
        self
    }

    pub(crate) fn is_superuser(&self) -> bool {
        self.system || self.who.is_some_and(Caller::is_superuser)
    }

    pub(crate) fn info(&self) -> &RequestInfo {
        self.built.get_or_init(|| {
            let mut headers = Map::new();
            for (k, v) in self.headers {
                let name = k.as_str().to_ascii_lowercase().replace('-', "_");
                headers
                    .entry(name)
                    .or_insert_with(|| json!(v.to_str().unwrap_or("")));
            }
            RequestInfo {
                auth: self.who.map(Caller::as_rule_map),
                is_superuser: self.is_superuser(),
                body: self.body.cloned().unwrap_or_default(),
                query: self.query.clone(),
                headers,
                method: self.method.as_str().to_owned(),
                context: "default".into(),
            }
        })
    }
}

/// Security and CORS headers PocketBase sends on every response; preflights end here.
async fn common_headers(req: Request, next: Next) -> Response {
    let preflight = req.method() == Method::OPTIONS;
    let req_headers = req
        .headers()
        .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
        .cloned();
    let mut res = if preflight {
        StatusCode::NO_CONTENT.into_response()
    } else {
        next.run(req).await
    };
    let h = res.headers_mut();
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("x-frame-options", HeaderValue::from_static("SAMEORIGIN"));
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
    let api = Router::new()
        .route("/api/health", get(health::health).head(health::health))
        .route(
            "/api/collections",
            get(collections::list).post(collections::create),
        )
        .route(
            "/api/collections/import",
            axum::routing::put(collections::import),
        )
        .route(
            "/api/collections/meta/scaffolds",
            get(collections::scaffolds),
        )
        .route(
            "/api/collections/{collection}",
            get(collections::view)
                .patch(collections::update)
                .delete(collections::delete),
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
            get(auth::methods),
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
            "/api/collections/{collection}/{action}",
            post(auth::not_built),
        )
        .route("/api/crons", get(plugin_routes::crons_list))
        .route("/api/crons/{id}", post(plugin_routes::crons_run))
        .route("/api/plugins", get(plugin_routes::report))
        .method_not_allowed_fallback(method_not_routed)
        // Below every native route: plugin routes, else PocketBase's not-found.
        .fallback(plugin_routes::dispatch)
        .with_state(state);
    api.layer(middleware::from_fn(common_headers))
}

/// The collection a records route names, by id or name.
pub(crate) fn find_collection(state: &AppState, key: &str) -> Option<Arc<Collection>> {
    state.store.schema().by_id_or_name(key).cloned()
}

pub(crate) fn query_map(raw: Option<&str>) -> Map<String, Value> {
    let mut m = Map::new();
    for (k, v) in body::url_pairs(raw.unwrap_or("")) {
        m.entry(k).or_insert(Value::String(v));
    }
    m
}

pub(crate) fn ok_json(v: &Value) -> Response {
    error::json_response(StatusCode::OK, v)
}

pub(crate) fn require_superuser(caller: &Option<Caller>) -> ApiResult<()> {
    match caller {
        None => Err(ApiError::requires_auth()),
        Some(c) if !c.is_superuser() => Err(ApiError::forbidden_record()),
        Some(_) => Ok(()),
    }
}
