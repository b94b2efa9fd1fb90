//! Auth endpoints of auth collections: auth-methods, password sign-in, refresh, and the end
//! every sign-in shares (superuser IPs, authRule, MFA, the token). The other flows are in
//! `auth_flows.rs` and `oauth2.rs`.

use super::auth_flows::{length, required, text};
use super::body;
use super::error::{ApiError, ApiResult, MSG_NOT_ALLOWED, MSG_VALIDATION};
use super::{Shared, caller, find_collection, ok_json, query_map};
use crate::auth::{password, token};
use crate::records::json::{FieldsFilter, Viewer, record_json};
use crate::schema::Collection;
use crate::schema::define::verr;
use crate::store::records as store_records;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The auth collection an auth route names. Behind PocketBase's rate-limit middleware, which
/// resolves the collection first, an unknown one is "Missing or invalid collection context.";
/// a collection that is not an auth one is the handler's own 404.
pub(super) fn auth_collection(state: &Shared, key: &str) -> ApiResult<Arc<Collection>> {
    let c = find_collection(state, key).ok_or_else(|| {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "Missing or invalid collection context.",
        )
    })?;
    if !c.is_auth() {
        return Err(ApiError::new(StatusCode::NOT_FOUND, MSG_NO_AUTH_COLLECTION));
    }
    Ok(c)
}

pub(super) const MSG_NO_AUTH_COLLECTION: &str = "Missing or invalid auth collection context.";

/// `settings.rateLimits` for an auth route of `c` (nothing while rate limits are off).
pub(super) async fn limit(
    state: &Shared,
    head: &axum::http::request::Parts,
    c: &Collection,
    tags: &[&str],
) -> ApiResult<()> {
    if !state.settings.peek().rate_limits.enabled {
        return Ok(());
    }
    let who = caller(state, &head.headers).await;
    super::rate_limit::check_collection(
        state,
        &super::rate_limit::Asking {
            method: head.method.as_str(),
            path: head.uri.path(),
            headers: &head.headers,
            extensions: &head.extensions,
        },
        who.as_ref(),
        c,
        tags,
    )
}

pub(crate) async fn methods(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: axum::extract::Request,
) -> ApiResult<Response> {
    let c = auth_collection(&state, &key)?;
    limit(&state, &request.into_parts().0, &c, &["listAuthMethods"]).await?;
    let pa = c.auth_option("passwordAuth").cloned().unwrap_or(json!({}));
    let enabled = pa.get("enabled").and_then(Value::as_bool).unwrap_or(false);
    let identity = pa.get("identityFields").cloned().unwrap_or(json!([]));
    let ids: Vec<&str> = identity
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mfa = c.auth_option("mfa");
    let otp = c.auth_option("otp");
    let dur = |o: Option<&Value>| -> (bool, i64) {
        let en = o
            .and_then(|o| o.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        (
            en,
            if en {
                o.and_then(|o| o.get("duration"))
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            } else {
                0
            },
        )
    };
    let (mfa_on, mfa_d) = dur(mfa);
    let (otp_on, otp_d) = dur(otp);
    let oauth2 = crate::auth::oauth2::providers(&c);
    // The legacy list is the same listing (PocketBase copies it without logos; there are none).
    let listed: Vec<Value> = oauth2.iter().flatten().map(provider_info).collect();
    Ok(ok_json(&json!({
        "password": {"identityFields": identity, "enabled": enabled},
        "oauth2": {"providers": listed.clone(), "enabled": oauth2.is_some()},
        "mfa": {"enabled": mfa_on, "duration": mfa_d},
        "otp": {"enabled": otp_on, "duration": otp_d},
        "authProviders": listed,
        "usernamePassword": enabled && ids.iter().any(|f| *f != "email"),
        "emailPassword": enabled && ids.contains(&"email"),
    })))
}

/// A provider as auth-methods lists it: a fresh state and PKCE pair per listing, the authorize
/// URL ending in `redirect_uri=` (also as the legacy `authUrl`). Ferrobase has no provider
/// logos: `logo` is empty, as in the legacy list.
fn provider_info(p: &crate::auth::oauth2::Provider) -> Value {
    let s = p.start();
    json!({
        "name": p.name,
        "displayName": p.display_name,
        "logo": "",
        "state": s.state,
        "authURL": s.auth_url,
        "authUrl": s.auth_url,
        "codeVerifier": s.code_verifier,
        "codeChallenge": s.code_challenge,
        "codeChallengeMethod": s.code_challenge_method,
    })
}

/// `{record, token}` for a freshly authenticated record (`{meta, record, token}` with `meta`).
fn auth_response(
    c: &Collection,
    row: crate::store::StoreRecord,
    tok: String,
    fields: &Option<FieldsFilter>,
    superuser_view: bool,
    meta: Option<Value>,
) -> Response {
    let view = Viewer {
        superuser: superuser_view,
        owner_view: true,
        ..Viewer::default()
    };
    let mut body = Map::new();
    if let Some(m) = meta {
        body.insert("meta".into(), m);
    }
    body.insert("record".into(), Value::Object(record_json(c, row, &view)));
    body.insert("token".into(), json!(tok));
    let body = Value::Object(body);
    ok_json(&match fields {
        Some(f) => f.apply_value(body),
        None => body,
    })
}

fn sign_auth_token(
    c: &Collection,
    row: &crate::store::StoreRecord,
    refreshable: bool,
) -> ApiResult<String> {
    let mut extra = Map::new();
    extra.insert("refreshable".into(), json!(refreshable));
    token::for_record(c, row, "auth", 0, extra, chrono::Utc::now().timestamp())
        .ok_or_else(ApiError::internal)
}

/// The end of every sign-in, as PocketBase's auth response runs it: a superuser only from
/// `superuserIPs`, the collection's `authRule`, then (for a sign-in `method`; "" skips it) the
/// MFA step, which may answer 401 `{mfaId}` instead; then `{record, token}` with `token`, or a
/// new refreshable auth token (and `meta`, OAuth2's, when given).
#[allow(
    clippy::too_many_arguments,
    reason = "the sign-in's parts, each used once; a struct would only rename them"
)]
pub(super) async fn finish_auth(
    state: &Shared,
    head: &axum::http::request::Parts,
    c: &Arc<Collection>,
    row: crate::store::StoreRecord,
    method: &str,
    data: &Map<String, Value>,
    fields: &Option<FieldsFilter>,
    token: Option<String>,
    meta: Option<Value>,
) -> ApiResult<Response> {
    if c.id == crate::schema::SUPERUSERS_ID
        && !super::superuser_ip_allowed(state, &head.headers, &head.extensions)
    {
        return Err(ApiError::new(StatusCode::FORBIDDEN, MSG_NOT_ALLOWED));
    }
    crate::records::auth_rule_allows(&state.store, c, &row).await?;
    // Impersonation ("") is a superuser's act, not a sign-in: plugins are not asked.
    let notes = if method.is_empty() {
        Vec::new()
    } else {
        let provider = (method == "oauth2")
            .then(|| data.get("provider").and_then(Value::as_str))
            .flatten();
        auth_hooks(state, head, None, c, &row, method, provider).await?
    };
    if let Some(mfa_id) = super::auth_flows::check_mfa(state, head, c, &row, method, data).await? {
        return Ok(super::error::json_response(
            StatusCode::UNAUTHORIZED,
            &json!({"mfaId": mfa_id}),
        ));
    }
    if !method.is_empty()
        && c.auth_option("authAlert")
            .and_then(|a| a.get("enabled"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    {
        super::auth_flows::auth_alert(state, head, c, &row).await;
    }
    let tok = match token {
        Some(t) => t,
        None => sign_auth_token(c, &row, true)?,
    };
    Ok(auth_response(
        c,
        row,
        tok,
        fields,
        c.id == crate::schema::SUPERUSERS_ID,
        with_notes(meta, notes),
    ))
}

/// The plugins' auth hooks on a sign-in about to succeed on `c` (see `Records::auth_hooks`).
async fn auth_hooks(
    state: &Shared,
    head: &axum::http::request::Parts,
    who: Option<&crate::records::Caller>,
    c: &Collection,
    row: &crate::store::StoreRecord,
    method: &str,
    provider: Option<&str>,
) -> ApiResult<Vec<(String, String)>> {
    let ip = super::request_ip(state, head);
    let q = Map::new();
    let access = crate::records::Access::request(
        who,
        head.method.as_str(),
        head.uri.path(),
        &head.headers,
        &q,
        (!ip.is_empty()).then_some(ip.as_str()),
    );
    Ok(state
        .records
        .auth_hooks(&access, c, row, method, provider)
        .await?)
}

/// `meta` with the auth hooks' notes added (created when the sign-in has none); a note never
/// replaces a key the sign-in put there (OAuth2's `id`, `email`, ...).
fn with_notes(meta: Option<Value>, notes: Vec<(String, String)>) -> Option<Value> {
    if notes.is_empty() {
        return meta;
    }
    let mut m = match meta {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for (k, v) in notes {
        m.entry(k).or_insert(Value::String(v));
    }
    Some(Value::Object(m))
}

/// The bcrypt cost of `c`'s password field (0: bcrypt's default), for the unknown-identity check.
fn password_cost(c: &Collection) -> u32 {
    c.fields
        .iter()
        .find(|f| f.name == "password")
        .and_then(|f| u32::try_from(f.opt_i64("cost")).ok())
        .unwrap_or(0)
}

pub(crate) async fn with_password(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: axum::extract::Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["authWithPassword", "auth"]).await?;
    let pa = c.auth_option("passwordAuth").cloned().unwrap_or(json!({}));
    // Refused before the body is read, as PocketBase refuses it.
    if !pa.get("enabled").and_then(Value::as_bool).unwrap_or(false) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "The collection is not configured to allow password authentication.",
        ));
    }
    let q = query_map(head.uri.query());
    let fields = FieldsFilter::parse(q.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    let data = super::auth_flows::read_body(&state, &head, body).await?;
    // Bound as PocketBase binds its form (a value that is not a string does not load), then
    // validated as it validates it: both required, 1 to 255 characters, and a named
    // identity field must be one of the collection's.
    let identity = text(&data, "identity")?;
    let pass = text(&data, "password")?;
    let wanted = text(&data, "identityField")?;
    let mut identity_fields: Vec<String> = pa
        .get("identityFields")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut errors = Map::new();
    for (key, v) in [("identity", &identity), ("password", &pass)] {
        if v.is_empty() {
            errors.insert(key.into(), required());
        } else if v.chars().count() > 255 {
            errors.insert(key.into(), length(1, 255));
        }
    }
    if wanted.chars().count() > 255 {
        errors.insert("identityField".into(), length(1, 255));
    } else if !wanted.is_empty() && !identity_fields.contains(&wanted) {
        errors.insert(
            "identityField".into(),
            verr("validation_in_invalid", "Must be a valid value."),
        );
    }
    if !errors.is_empty() {
        return Err(ApiError::with_data(
            StatusCode::BAD_REQUEST,
            MSG_VALIDATION,
            errors,
        ));
    }
    if wanted.is_empty() {
        // Email first, and only when the identity looks like one.
        identity_fields.sort_by_key(|f| f != "email");
        if !identity.contains('@') {
            identity_fields.retain(|f| f != "email");
        }
    } else {
        identity_fields = vec![wanted];
    }
    // Brute-force protection: an identity or an address past its failures is refused before
    // any password is looked at, so guessing stops telling right from wrong.
    let ip = super::request_ip(&state, &head);
    let now = std::time::Instant::now();
    if state.throttle.blocked(&c.id, &identity, &ip, now) {
        return Err(super::error::too_many_requests());
    }
    let found = state
        .store
        .read(|conn| {
            for name in &identity_fields {
                if c.field(name).is_none() {
                    continue;
                }
                if let Some(row) = store_records::find_by(conn, &c, name, &identity)? {
                    return Ok(Some(row));
                }
            }
            Ok(None)
        })
        .await?;
    let fail = || ApiError::bad("Failed to authenticate.");
    let Some(row) = found else {
        password::check_unknown(pass, password_cost(&c)).await;
        state.throttle.failed(&c.id, &identity, &ip, now);
        return Err(fail());
    };
    let hash = c.stored_text(&row, "password").to_owned();
    let ok = password::check(pass, hash).await;
    if !ok {
        state.throttle.failed(&c.id, &identity, &ip, now);
        return Err(fail());
    }
    finish_auth(
        &state, &head, &c, row, "password", &data, &fields, None, None,
    )
    .await
}

pub(crate) async fn refresh(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: axum::extract::Request,
) -> ApiResult<Response> {
    let (head, sent) = request.into_parts();
    let (headers, raw) = (&head.headers, head.uri.query().map(str::to_owned));
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["authRefresh"]).await?;
    let who = caller(&state, headers)
        .await
        .ok_or_else(ApiError::requires_auth)?;
    if who.collection.id != c.id {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!(
                "The request requires auth record from {} collection.",
                who.collection.name
            ),
        ));
    }
    let sent = body::has_body(headers).then_some(sent);
    body::check_info_body(
        &head.uri,
        &head.method,
        headers,
        sent,
        state.cfg.http.body_bytes_max,
    )
    .await?;
    let q = query_map(raw.as_deref());
    let fields = FieldsFilter::parse(q.get("fields").and_then(Value::as_str))
        .map_err(|_| ApiError::bad_request())?;
    crate::records::auth_rule_allows(&state.store, &c, &who.record).await?;
    let notes = auth_hooks(&state, &head, Some(&who), &c, &who.record, "refresh", None).await?;
    let tok = if who.refreshable {
        sign_auth_token(&c, &who.record, true)?
    } else {
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(|v| token::from_header(v).to_owned())
            .unwrap_or_default()
    };
    let superuser = who.is_superuser();
    Ok(auth_response(
        &c,
        who.record,
        tok,
        &fields,
        superuser,
        with_notes(None, notes),
    ))
}

/// Any other action under an auth collection: PocketBase's plain 404.
pub(crate) async fn unknown_action() -> ApiError {
    ApiError::not_found()
}
