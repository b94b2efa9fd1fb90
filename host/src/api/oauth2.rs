//! OAuth2 sign-in's routes: `auth-with-oauth2` (the provider's code traded for its user, then
//! PocketBase 0.40.6's resolution: the `_externalAuths` link, the signed-in caller, the record
//! with the provider's vouched-for email, else a new record from `createData` and the mapped
//! fields) and `/api/oauth2-redirect` (the provider's redirect handed to the realtime client
//! named by its `state`). Providers are `auth::oauth2`'s; records are written through
//! `records::Batch`, so hooks and the change feed see every write and all commit together.

use super::auth::{auth_collection, finish_auth, limit};
use super::body;
use super::error::{ApiError, ApiResult};
use super::{Shared, caller, query_map};
use crate::auth::oauth2::{self, AuthUser};
use crate::records::batch::Batch;
use crate::records::json::FieldsFilter;
use crate::records::{Access, Caller};
use crate::schema::define::{verr, verr_params};
use crate::schema::{Collection, FieldType, SUPERUSERS_ID};
use crate::store::{StoreRecord, records as store_records};
use axum::extract::{Path, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;

const MSG_OAUTH2_OFF: &str = "The collection is not configured to allow OAuth2 authentication.";
const MSG_FAILED: &str = "Failed to authenticate.";
/// How long the code exchange and the user info may take together (PocketBase's).
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest avatar downloaded into a file field (PocketBase's default body limit).
const AVATAR_BYTES_MAX: usize = 32 << 20;
/// The realtime topic the SDKs wait on for the provider's redirect.
const TOPIC: &str = "@oauth2";

fn option_bool(c: &Collection, option: &str, key: &str) -> bool {
    c.auth_option(option)
        .and_then(|o| o.get(key))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn text(data: &Map<String, Value>, key: &str) -> String {
    match data.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

fn is_verified(c: &Collection, row: &StoreRecord) -> bool {
    c.fields
        .iter()
        .position(|f| f.name == "verified")
        .is_some_and(|i| matches!(row[i], crate::schema::value::Stored::Int(1)))
}

/// The collection's `oauth2.mappedFields.<key>` (the field a provider's value goes to).
fn mapped(c: &Collection, key: &str) -> String {
    c.auth_option("oauth2")
        .and_then(|o| o.get("mappedFields"))
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned()
}

/// The form's checks, in PocketBase's order: `provider` (required, at most 100 characters, a
/// configured one), `code` (required).
fn validate(c: &Collection, provider: &str, code: &str) -> ApiResult<()> {
    // Keys in alphabetical order, as PocketBase's error map is written.
    let mut errors = Map::new();
    if code.is_empty() {
        errors.insert(
            "code".into(),
            verr("validation_required", "Cannot be blank."),
        );
    }
    if provider.is_empty() {
        errors.insert(
            "provider".into(),
            verr("validation_required", "Cannot be blank."),
        );
    } else if provider.chars().count() > 100 {
        errors.insert(
            "provider".into(),
            verr_params(
                "validation_length_too_long",
                "The length must be no more than 100.",
                json!({"max": 100}),
            ),
        );
    } else if oauth2::provider(c, provider).is_none() {
        errors.insert(
            "provider".into(),
            verr_params(
                "validation_invalid_provider",
                &format!("Provider with name {provider} is missing or is not enabled."),
                json!({"name": provider}),
            ),
        );
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::with_data(
            StatusCode::BAD_REQUEST,
            body::MSG_LOAD_FAILED,
            errors,
        ))
    }
}

pub(crate) async fn with_oauth2(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["authWithOAuth2", "auth"]).await?;
    if !option_bool(&c, "oauth2", "enabled") {
        return Err(ApiError::new(StatusCode::FORBIDDEN, MSG_OAUTH2_OFF));
    }
    let who = caller(&state, &head.headers)
        .await
        .filter(|w| w.collection.id == c.id);
    let fields = FieldsFilter::parse(
        query_map(head.uri.query())
            .get("fields")
            .and_then(Value::as_str),
    )
    .map_err(|_| ApiError::bad_request())?;
    let data = super::auth_flows::read_body(&state, &head, body).await?;
    let name = text(&data, "provider");
    let code = text(&data, "code");
    let mut redirect_url = text(&data, "redirectURL");
    if redirect_url.is_empty() {
        redirect_url = text(&data, "redirectUrl");
    }
    validate(&c, &name, &code)?;
    let provider = match oauth2::provider(&c, &name) {
        Some(Ok(p)) => p,
        Some(Err(e)) => {
            tracing::debug!(error = %e, provider = name, "oauth2 provider");
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("Failed to init provider {name}"),
            ));
        }
        None => {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Missing or invalid provider config.",
            ));
        }
    };
    let user = tokio::time::timeout(PROVIDER_TIMEOUT, async {
        let token = provider
            .exchange(&code, &text(&data, "codeVerifier"), &redirect_url)
            .await
            .map_err(|e| {
                tracing::debug!(error = %e, provider = name, "oauth2 token");
                ApiError::bad("Failed to fetch OAuth2 token.")
            })?;
        provider.user(&token).await.map_err(|e| {
            tracing::debug!(error = %e, provider = name, "oauth2 user");
            ApiError::bad("Failed to fetch OAuth2 user.")
        })
    })
    .await
    .map_err(|_| ApiError::bad("Failed to fetch OAuth2 token."))??;
    let mut user = user;
    if name == "apple"
        && user.name.is_empty()
        && let Some(n) = state.apple_names.take(&code)
    {
        user.name = n;
    }
    let (row, is_new) =
        resolve_and_submit(&state, &head, &c, who.as_ref(), &name, &user, &data).await?;
    let meta = user.meta(is_new);
    finish_auth(
        &state,
        &head,
        &c,
        row,
        "oauth2",
        &data,
        &fields,
        None,
        Some(meta),
    )
    .await
}

/// PocketBase's resolution and its transaction: the record the provider's user maps to (found,
/// or created), its pre-hijacking guards, and the `_externalAuths` link; (record, is new).
async fn resolve_and_submit(
    state: &Shared,
    head: &Parts,
    c: &Arc<Collection>,
    who: Option<&Caller>,
    provider: &str,
    user: &AuthUser,
    data: &Map<String, Value>,
) -> ApiResult<(StoreRecord, bool)> {
    let schema = state.store.schema();
    let ext = schema
        .by_name("_externalAuths")
        .cloned()
        .ok_or_else(ApiError::internal)?;
    let (e2, cid, p2, uid) = (
        Arc::clone(&ext),
        c.id.clone(),
        provider.to_owned(),
        user.id.clone(),
    );
    let link = state
        .store
        .read(move |conn| {
            store_records::find_by_all(
                conn,
                &e2,
                &[
                    ("collectionRef", &cid),
                    ("provider", &p2),
                    ("providerId", &uid),
                ],
            )
        })
        .await?;
    let found = if let Some(l) = &link {
        let (c2, rid) = (Arc::clone(c), ext.stored_text(l, "recordRef").to_owned());
        let row = state
            .store
            .read(move |conn| store_records::get(conn, &c2, &rid, None))
            .await?;
        Some(row.ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "The requested resource wasn't found.",
            )
        })?)
    } else if let Some(w) = who {
        Some(w.record.clone())
    } else if !user.email.is_empty() {
        let (c2, email) = (Arc::clone(c), user.email.clone());
        state
            .store
            .read(move |conn| store_records::find_by_email(conn, &c2, &email))
            .await?
    } else {
        None
    };
    let ip = super::request_ip(state, head);
    let q = Map::new();
    let path = format!("/api/collections/{}/records", c.name);
    let access = Access::request(
        who,
        "POST",
        &path,
        &head.headers,
        &q,
        (!ip.is_empty()).then_some(ip.as_str()),
    )
    .in_context("oauth2");
    let system = Access::system(0);
    let is_new = found.is_none();
    // Everything slow (the avatar's download, reads) happens before the transaction: the
    // writer serves nothing else while it is open.
    let prepared = match &found {
        None if c.id == SUPERUSERS_ID => return Err(ApiError::bad(MSG_FAILED)),
        None => {
            let create_data = match data.get("createData") {
                Some(Value::Object(m)) => m.clone(),
                _ => Map::new(),
            };
            Some(new_record_payload(state, c, user, create_data).await)
        }
        Some(_) => None,
    };
    let stale_links = match &found {
        Some(row) if !is_verified(c, row) => {
            let (e2, cid, r2) = (
                Arc::clone(&ext),
                c.id.clone(),
                c.stored_text(row, "id").to_owned(),
            );
            state
                .store
                .read(move |conn| store_records::find_by_record_ref(conn, &e2, &cid, &r2))
                .await?
        }
        _ => Vec::new(),
    };
    let batch = Batch::begin(&state.records).await?;
    let mut link_id = link.map(|l| ext.stored_text(&l, "id").to_owned());
    let row = match (found, prepared) {
        (Some(row), _) => {
            let rid = c.stored_text(&row, "id").to_owned();
            let signed_in = who.is_some_and(|w| w.collection.id == c.id && w.id() == rid);
            let verified = is_verified(c, &row);
            let mut change = Map::new();
            // Against pre-hijacking: an unverified record may have been made by someone else
            // to wait for its owner; its password goes, and so do its other links.
            if !signed_in && !verified {
                let pw = crate::schema::ids::secret(30);
                change.insert("password".into(), json!(pw));
                change.insert("passwordConfirm".into(), json!(pw));
            }
            if !verified {
                for l in stale_links {
                    batch
                        .writer(&system)
                        .delete(&ext, ext.stored_text(&l, "id").to_owned())
                        .await?;
                }
                link_id = None;
            }
            let mut email = c.stored_text(&row, "email").to_owned();
            if email.is_empty() && !user.email.is_empty() {
                email.clone_from(&user.email);
                change.insert("email".into(), json!(email));
            }
            if !verified && (email.is_empty() || email == user.email) {
                change.insert("verified".into(), json!(true));
            }
            if change.is_empty() {
                row
            } else {
                batch.writer(&system).update(c, rid, &change).await?
            }
        }
        (None, Some((payload, uploads))) => {
            let created = batch
                .writer(&access)
                .create_with(c, &payload, uploads, &[])
                .await?;
            // Verified only when the address is the provider's own (CVE-2026-44166: a
            // `createData.email` of someone else's stays unverified, and the next sign-in by
            // that address's owner resets its password and drops this link).
            if c.stored_text(&created, "email") == user.email && !is_verified(c, &created) {
                let mut change = Map::new();
                change.insert("verified".into(), json!(true));
                let id = c.stored_text(&created, "id").to_owned();
                batch.writer(&system).update(c, id, &change).await?
            } else {
                created
            }
        }
        (None, None) => return Err(ApiError::internal()),
    };
    if link_id.is_none() {
        let mut l = Map::new();
        l.insert("collectionRef".into(), json!(c.id));
        l.insert("recordRef".into(), json!(c.stored_text(&row, "id")));
        l.insert("provider".into(), json!(provider));
        l.insert("providerId".into(), json!(user.id));
        batch.writer(&system).create(&ext, &l).await?;
    }
    batch.commit().await?;
    Ok((row, is_new))
}

/// A new record's body: `createData`, the provider's email unless a non-empty one was given,
/// the mapped fields not given (the username only where it fits and is free; the avatar
/// downloaded into a file field, or its URL into any other), and a random password unless
/// one was given (PocketBase's OAuth2 create).
async fn new_record_payload(
    state: &Shared,
    c: &Arc<Collection>,
    user: &AuthUser,
    mut payload: Map<String, Value>,
) -> (Map<String, Value>, Vec<(String, crate::files::Upload)>) {
    if payload
        .get("email")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        payload.insert("email".into(), json!(user.email));
    }
    for (key, value) in [("id", &user.id), ("name", &user.name)] {
        let field = mapped(c, key);
        if !field.is_empty() && !payload.contains_key(&field) {
            payload.insert(field, json!(value));
        }
    }
    let username = mapped(c, "username");
    if !username.is_empty()
        && !payload.contains_key(&username)
        && username_fits(state, c, &username, &user.username).await
    {
        payload.insert(username, json!(user.username));
    }
    let mut uploads = Vec::new();
    let avatar = mapped(c, "avatarURL");
    if !avatar.is_empty() && !payload.contains_key(&avatar) && !user.avatar_url.is_empty() {
        match c.field(&avatar).map(|f| f.kind) {
            Some(FieldType::File) => match receive_avatar(state, &user.avatar_url).await {
                Ok(upload) => uploads.push((avatar, upload)),
                Err(e) => tracing::warn!(error = %e, "Failed to retrieve OAuth2 avatar"),
            },
            _ => {
                payload.insert(avatar, json!(user.avatar_url));
            }
        }
    }
    if !payload.contains_key("password") {
        let pw = crate::schema::ids::secret(30);
        payload.insert("password".into(), json!(pw));
        payload.insert("passwordConfirm".into(), json!(pw));
    }
    (payload, uploads)
}

/// PocketBase's backward-compatible username checks: the field exists, a text field's rules
/// take the value, and no record holds it when the field has a unique index.
async fn username_fits(state: &Shared, c: &Arc<Collection>, field: &str, value: &str) -> bool {
    let Some(f) = c.field(field) else {
        return false;
    };
    if f.kind == FieldType::Text && crate::schema::value::validate(f, &json!(value)).is_some() {
        return false;
    }
    let unique = c.indexes.iter().any(|ix| {
        let ix = ix.to_ascii_lowercase();
        let cols = ix.rsplit_once('(').map(|(_, c)| c).unwrap_or("");
        ix.contains("unique") && !cols.contains(',') && cols.contains(&field.to_ascii_lowercase())
    });
    if !unique {
        return true;
    }
    let (c2, f2, v2) = (Arc::clone(c), field.to_owned(), value.to_owned());
    !matches!(
        state
            .store
            .read(move |conn| store_records::find_by(conn, &c2, &f2, &v2))
            .await,
        Ok(Some(_)) | Err(_)
    )
}

async fn receive_avatar(state: &Shared, url: &str) -> Result<crate::files::Upload, String> {
    let (bytes, name) = oauth2::download_avatar(url, AVATAR_BYTES_MAX)
        .await
        .map_err(|e| e.to_string())?;
    let mut receiving = state
        .records
        .files
        .receive(&name)
        .await
        .map_err(|e| e.to_string())?;
    receiving.write(&bytes).await.map_err(|e| e.to_string())?;
    receiving.finish().await.map_err(|e| e.to_string())
}

// ---------------------------------------------------------------- redirect

/// `GET|POST /api/oauth2-redirect`: the provider's redirect (`state`, `code`, `error`) sent as
/// an `@oauth2` message to the realtime client whose id is the state, if it subscribed to
/// `@oauth2` from this address; then the success or failure page, 307 for GET and 303 for
/// POST, as PocketBase answers.
pub(crate) async fn redirect(State(state): State<Shared>, request: Request) -> Response {
    let (head, body) = request.into_parts();
    let status = if head.method == axum::http::Method::GET {
        StatusCode::TEMPORARY_REDIRECT
    } else {
        StatusCode::SEE_OTHER
    };
    let go = |ok: bool| {
        let to = if ok {
            "../_/#/auth/oauth2-redirect-success"
        } else {
            "../_/#/auth/oauth2-redirect-failure"
        };
        (status, [(header::LOCATION, to)]).into_response()
    };
    let data = if head.method == axum::http::Method::GET {
        query_map(head.uri.query())
    } else {
        // Read as Go's FormValue reads it: a query pair Go refuses does not fail the form.
        match body::parse(&head.headers, None, body, state.cfg.http.body_bytes_max).await {
            Ok(p) => p.data,
            Err(_) => return go(false),
        }
    };
    let (st, code, error) = (
        text(&data, "state"),
        text(&data, "code"),
        text(&data, "error"),
    );
    if st.is_empty() {
        return go(false);
    }
    let mut msg = Map::new();
    msg.insert("state".into(), json!(st));
    msg.insert("code".into(), json!(code));
    if !error.is_empty() {
        msg.insert("error".into(), json!(error));
    }
    let bytes = bytes::Bytes::from(Value::Object(msg).to_string());
    let ip = super::request_ip(&state, &head);
    // Apple sends the user's name only here, and only the first time: kept for the sign-in
    // with this code (the realtime client must be the one that started the flow).
    let apple_user = text(&data, "user");
    let keep_name = !apple_user.is_empty() && error.is_empty() && !code.is_empty();
    if keep_name {
        state.apple_names.keep(&code, &apple_user);
    }
    if !state.realtime.send_to(&st, &ip, TOPIC, bytes) {
        if keep_name {
            state.apple_names.take(&code);
        }
        return go(false);
    }
    go(error.is_empty() && !code.is_empty())
}
