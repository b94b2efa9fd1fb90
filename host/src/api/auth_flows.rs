//! The auth flows' endpoints: verification, password reset, email change, OTP and
//! impersonation, each with PocketBase 0.40.6's checks in its order, its statuses and bodies.
//! Tokens, codes, limits, templates and mail come from `auth`; records are read from `store`
//! and written through `records::Writer` (as the server itself, so hooks and the change feed see
//! these writes like any other). Mail is queued after the write it belongs to has committed.

use super::auth::{auth_collection, finish_auth, limit};
use super::body;
use super::error::{ApiError, ApiResult, MSG_VALIDATION};
use super::{Shared, caller, query_map};
use crate::auth::mail::Message;
use crate::auth::templates::{self, Kind};
use crate::auth::{password, token};
use crate::records::json::FieldsFilter;
use crate::records::{Access, Writer};
use crate::schema::define::{verr, verr_params};
use crate::schema::{Collection, SUPERUSERS_ID};
use crate::store::{StoreRecord, records as store_records};
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a verification or password-reset mail to one record holds back the next.
const RESEND_PAUSE: Duration = Duration::from_secs(120);
/// Wrong OTP codes per record and client before a 429 (PocketBase's fixed rule).
const OTP_ATTEMPTS: u32 = 5;
const OTP_ATTEMPTS_WINDOW: Duration = Duration::from_secs(180);
/// OTPs issued to one record within their duration before the newest is handed out again.
const OTPS_RECENT_MAX: usize = 10;

const MSG_BAD_OTP: &str = "Invalid or expired OTP.";
const MSG_OTP_OFF: &str = "The collection is not configured to allow OTP authentication.";
const MSG_PASSWORD_OFF: &str = "The collection is not configured to allow password authentication.";

/// Brute-force protection of the mails: one more asked for from this client, refused past the
/// limit of its window (pb.toml `[auth] mail_requests_per_ip`).
fn count_mail_request(state: &Shared, head: &Parts) -> ApiResult<()> {
    if state
        .throttle
        .mail_request(&super::request_ip(state, head), Instant::now())
    {
        Ok(())
    } else {
        Err(super::error::too_many_requests())
    }
}

fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

fn invalid(errors: Map<String, Value>) -> ApiError {
    ApiError::with_data(StatusCode::BAD_REQUEST, MSG_VALIDATION, errors)
}

fn invalid_one(field: &str, e: Value) -> ApiError {
    let mut m = Map::new();
    m.insert(field.into(), e);
    invalid(m)
}

pub(super) fn required() -> Value {
    verr("validation_required", "Cannot be blank.")
}

pub(super) fn length(min: usize, max: usize) -> Value {
    verr_params(
        "validation_length_out_of_range",
        &format!("The length must be between {min} and {max}."),
        json!({"max": max, "min": min}),
    )
}

/// The body, bound as PocketBase binds a form: an unsupported type or broken body is its
/// loading error.
pub(super) async fn read_body(
    state: &Shared,
    head: &Parts,
    body: axum::body::Body,
) -> ApiResult<Map<String, Value>> {
    let limit = state.cfg.http.body_bytes_max;
    body::bind(
        head,
        body,
        limit,
        body::MSG_UNSUPPORTED,
        body::MSG_LOAD_FAILED,
    )
    .await
}

/// A form value read into an integer as Go's `strconv.ParseInt(s, 0, 64)` reads it (PocketBase
/// binds form text so): an optional sign, a `0x`, `0o`, `0b` or bare `0` (octal) prefix, `_`
/// only between digits, nothing else; `None` past i64.
fn go_parse_int(s: &str) -> Option<i64> {
    let (neg, rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = rest.to_ascii_lowercase();
    let (radix, digits, prefixed) = if let Some(d) = lower.strip_prefix("0x") {
        (16, d, true)
    } else if let Some(d) = lower.strip_prefix("0o") {
        (8, d, true)
    } else if let Some(d) = lower.strip_prefix("0b") {
        (2, d, true)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..], true)
    } else {
        (10, lower.as_str(), false)
    };
    // Underscores: each between two digits, the prefix counting as one.
    let mut last_digit = prefixed;
    let mut magnitude: u64 = 0;
    let mut any = false;
    for c in digits.chars() {
        if c == '_' {
            if !last_digit {
                return None;
            }
            last_digit = false;
            continue;
        }
        let d = c.to_digit(radix)?;
        magnitude = magnitude
            .checked_mul(u64::from(radix))?
            .checked_add(u64::from(d))?;
        last_digit = true;
        any = true;
    }
    if !any || !last_digit {
        return None;
    }
    if neg {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// A form's string key: absent or null is empty; another JSON type does not bind (Go's
/// decoder refuses a number for a string).
pub(super) fn text(data: &Map<String, Value>, key: &str) -> ApiResult<String> {
    match data.get(key) {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ApiError::bad(body::MSG_LOAD_FAILED)),
    }
}

/// Required, 1 to 255 characters, an email address.
fn email_error(v: &str) -> Option<Value> {
    if v.is_empty() {
        Some(required())
    } else if v.chars().count() > 255 {
        Some(length(1, 255))
    } else if !crate::settings::is_email(v) {
        Some(verr(
            "validation_is_email",
            "Must be a valid email address.",
        ))
    } else {
        None
    }
}

async fn find_by_email(
    state: &Shared,
    c: &Arc<Collection>,
    email: &str,
) -> ApiResult<Option<StoreRecord>> {
    let (c2, email) = (Arc::clone(c), email.to_owned());
    Ok(state
        .store
        .read(move |conn| store_records::find_by_email(conn, &c2, &email))
        .await?)
}

fn is_verified(c: &Collection, row: &StoreRecord) -> bool {
    c.fields
        .iter()
        .position(|f| f.name == "verified")
        .is_some_and(|i| matches!(row[i], crate::schema::value::Stored::Int(1)))
}

fn option_bool(c: &Collection, option: &str, key: &str) -> bool {
    c.auth_option(option)
        .and_then(|o| o.get(key))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn option_i64(c: &Collection, option: &str, key: &str) -> i64 {
    c.auth_option(option)
        .and_then(|o| o.get(key))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// A write made by the server itself on the record's behalf.
async fn save(
    state: &Shared,
    c: &Arc<Collection>,
    id: &str,
    data: Map<String, Value>,
) -> Result<StoreRecord, crate::records::RecordError> {
    let access = Access::system(0);
    Writer::new(&state.records, &access)
        .update(c, id.to_owned(), &data)
        .await
}

/// A password nobody knows (PocketBase's guard against pre-hijacked accounts).
fn random_password_body(mut data: Map<String, Value>) -> Map<String, Value> {
    let pw = crate::schema::ids::secret(30);
    data.insert("password".into(), json!(pw));
    data.insert("passwordConfirm".into(), json!(pw));
    data
}

/// The most sign-in origins kept per record (PocketBase's): a new one past it drops the oldest.
const MAX_AUTH_ORIGINS: usize = 5;

/// PocketBase's auth alert, for a sign-in with `authAlert.enabled` that passed every step (the
/// MFA one included): the origin (md5 of client IP + user agent, the agent cut at 200 bytes) is
/// kept in `_authOrigins`, at most five per record, the oldest dropped; a new origin of a record
/// that had signed in before is mailed to it ("Login from a new location") with `{ALERT_INFO}`
/// = "<now> - <ip> <agent>". PocketBase waits for that mail; here it is queued. A failure is
/// logged, never the sign-in's.
pub(super) async fn auth_alert(
    state: &Shared,
    head: &Parts,
    c: &Arc<Collection>,
    row: &StoreRecord,
) {
    if let Err(e) = record_origin(state, head, c, row).await {
        tracing::warn!(error = %e, collection = %c.name, "auth alert: the sign-in origin was not kept");
    }
}

async fn record_origin(
    state: &Shared,
    head: &Parts,
    c: &Arc<Collection>,
    row: &StoreRecord,
) -> Result<(), crate::records::RecordError> {
    use md5::Digest as _;
    let settings = state.settings.current();
    let ip = super::client_ip(&settings, &head.headers, &head.extensions);
    let mut agent = head
        .headers
        .get(axum::http::header::USER_AGENT)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    if agent.len() > 200 {
        let mut cut = 200;
        while !agent.is_char_boundary(cut) {
            cut -= 1;
        }
        agent.truncate(cut);
        agent.push_str("...");
    }
    let fingerprint = format!("{:x}", md5::Md5::digest(format!("{ip}{agent}").as_bytes()));
    let Some(origins) = state.store.schema().by_name("_authOrigins").cloned() else {
        return Ok(());
    };
    let rid = c.stored_text(row, "id").to_owned();
    let access = Access::system(0);
    let filter = format!(
        "collectionRef = '{}' && recordRef = '{}'",
        c.id.replace('\'', ""),
        rid.replace('\'', "")
    );
    let schema = state.store.schema();
    let sel = crate::records::read::list_select(
        &schema,
        &origins,
        &access,
        Some(&filter),
        Some("-created"),
    )?;
    let known = crate::records::read::page(
        &state.store,
        &origins,
        sel,
        (1, 100),
        true,
        None,
        None,
        None,
    )
    .await?
    .rows;
    let current = known
        .iter()
        .find(|o| origins.stored_text(o, "fingerprint") == fingerprint);
    let writer = Writer::new(&state.records, &access);
    if let Some(o) = current {
        // Saved again: its `updated` says when this origin was last used.
        writer
            .update(
                &origins,
                origins.stored_text(o, "id").to_owned(),
                &Map::new(),
            )
            .await?;
        return Ok(());
    }
    let email = c.stored_text(row, "email");
    if !known.is_empty() && !email.is_empty() {
        let info = format!("{} - {ip} {agent}", crate::schema::ids::now());
        queue_mail(
            state,
            c,
            row,
            Kind::AuthAlert,
            email,
            &[("{ALERT_INFO}", &templates::escape_html(&info))],
        );
    }
    for old in known.iter().skip(MAX_AUTH_ORIGINS - 1) {
        writer
            .delete(&origins, origins.stored_text(old, "id").to_owned())
            .await?;
    }
    let mut fields = Map::new();
    fields.insert("collectionRef".into(), json!(c.id));
    fields.insert("recordRef".into(), json!(rid));
    fields.insert("fingerprint".into(), json!(fingerprint));
    writer.create(&origins, &fields).await?;
    Ok(())
}

/// Queue a mail of the collection's `kind` template to `to`, for `row`.
fn queue_mail(
    state: &Shared,
    c: &Collection,
    row: &StoreRecord,
    kind: Kind,
    to: &str,
    extra: &[(&str, &str)],
) {
    let settings = state.settings.current();
    let (subject, html) = templates::render(c, row, &settings, kind, extra);
    let msg = Message::from_sender(&settings, to, subject, html);
    state.outbox.queue(settings, msg, None);
}

fn now_s() -> i64 {
    chrono::Utc::now().timestamp()
}

// ---------------------------------------------------------------- verification

pub(crate) async fn request_verification(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["requestVerification"]).await?;
    if c.id == SUPERUSERS_ID {
        return Err(ApiError::bad("All superusers are verified by default."));
    }
    let data = read_body(&state, &head, body).await?;
    let email = text(&data, "email")?;
    if let Some(e) = email_error(&email) {
        return Err(invalid_one("email", e));
    }
    count_mail_request(&state, &head)?;
    // Unknown emails, verified records and repeated requests all answer the same 204.
    let Some(row) = find_by_email(&state, &c, &email).await? else {
        return Ok(no_content());
    };
    if is_verified(&c, &row) {
        return Ok(no_content());
    }
    let resend = format!("verification:{}{}", c.id, c.stored_text(&row, "id"));
    let now = Instant::now();
    if state.mail_cooldowns.active(&resend, now) {
        return Ok(no_content());
    }
    let mut claims = Map::new();
    claims.insert("email".into(), json!(c.stored_text(&row, "email")));
    let tok = token::for_record(&c, &row, "verification", 0, claims, now_s())
        .ok_or_else(ApiError::internal)?;
    let to = c.stored_text(&row, "email").to_owned();
    queue_mail(
        &state,
        &c,
        &row,
        Kind::Verification,
        &to,
        &[("{TOKEN}", &tok)],
    );
    state.mail_cooldowns.set(&resend, RESEND_PAUSE, now);
    Ok(no_content())
}

/// A token's record checked for a confirm form: the claims first (the flow's own check), then
/// the signature and times against the record's key, then the collection.
async fn token_check(
    state: &Shared,
    c: &Collection,
    tok: &str,
    kind: &str,
) -> Result<crate::records::Caller, Value> {
    let Some((who, _)) = super::token_record(state, tok, kind, super::now_s()).await else {
        return Err(verr(
            "validation_invalid_token",
            "Invalid or expired token.",
        ));
    };
    if who.collection.id != c.id {
        return Err(verr(
            "validation_token_collection_mismatch",
            "The provided token is for different auth collection.",
        ));
    }
    Ok(who)
}

pub(crate) async fn confirm_verification(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["confirmVerification"]).await?;
    if c.id == SUPERUSERS_ID {
        return Err(ApiError::bad("All superusers are verified by default."));
    }
    let data = read_body(&state, &head, body).await?;
    let tok = text(&data, "token")?;
    if tok.is_empty() {
        return Err(invalid_one("token", required()));
    }
    let email = match token::unverified_claims(&tok).get("email") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        _ => String::new(),
    };
    if email.is_empty() {
        return Err(invalid_one(
            "token",
            verr(
                "validation_invalid_token_claims",
                "Missing email token claim.",
            ),
        ));
    }
    let who = token_check(&state, &c, &tok, "verification")
        .await
        .map_err(|e| invalid_one("token", e))?;
    let row = who.record;
    if c.stored_text(&row, "email") != email {
        return Err(invalid_one(
            "token",
            verr(
                "validation_token_email_mismatch",
                "The record email doesn't match with the requested token claims.",
            ),
        ));
    }
    let id = c.stored_text(&row, "id").to_owned();
    if !is_verified(&c, &row) {
        let mut change = Map::new();
        change.insert("verified".into(), json!(true));
        // Verified by mail with password sign-in off: a password nobody knows, so an account
        // pre-registered by someone else cannot be entered with theirs later.
        if !option_bool(&c, "passwordAuth", "enabled") {
            change = random_password_body(change);
        }
        save(&state, &c, &id, change).await.map_err(|e| {
            let e = ApiError::from(e);
            ApiError::with_data(
                e.status,
                "An error occurred while saving the verified state.",
                e.data,
            )
        })?;
    }
    state
        .mail_cooldowns
        .clear(&format!("verification:{}{id}", c.id));
    Ok(no_content())
}

// ---------------------------------------------------------------- password reset

pub(crate) async fn request_password_reset(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["requestPasswordReset"]).await?;
    if !option_bool(&c, "passwordAuth", "enabled") {
        return Err(ApiError::bad(MSG_PASSWORD_OFF));
    }
    let data = read_body(&state, &head, body).await?;
    let email = text(&data, "email")?;
    if let Some(e) = email_error(&email) {
        return Err(invalid_one("email", e));
    }
    count_mail_request(&state, &head)?;
    let Some(row) = find_by_email(&state, &c, &email).await? else {
        return Ok(no_content());
    };
    let resend = format!("passwordReset:{}{}", c.id, c.stored_text(&row, "id"));
    let now = Instant::now();
    if state.mail_cooldowns.active(&resend, now) {
        return Ok(no_content());
    }
    let mut claims = Map::new();
    claims.insert("email".into(), json!(c.stored_text(&row, "email")));
    let tok = token::for_record(&c, &row, "passwordReset", 0, claims, now_s())
        .ok_or_else(ApiError::internal)?;
    let to = c.stored_text(&row, "email").to_owned();
    queue_mail(
        &state,
        &c,
        &row,
        Kind::PasswordReset,
        &to,
        &[("{TOKEN}", &tok)],
    );
    state.mail_cooldowns.set(&resend, RESEND_PAUSE, now);
    Ok(no_content())
}

pub(crate) async fn confirm_password_reset(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["confirmPasswordReset"]).await?;
    let data = read_body(&state, &head, body).await?;
    let (tok, pw, confirm) = (
        text(&data, "token")?,
        text(&data, "password")?,
        text(&data, "passwordConfirm")?,
    );
    let min = c
        .field("password")
        .map(|f| f.opt_i64("min"))
        .filter(|m| *m > 0)
        .unwrap_or(1) as usize;
    let mut errors = Map::new();
    let mut who = None;
    if tok.is_empty() {
        errors.insert("token".into(), required());
    } else {
        match token_check(&state, &c, &tok, "passwordReset").await {
            Ok(w) => who = Some(w),
            Err(e) => {
                errors.insert("token".into(), e);
            }
        }
    }
    let n = pw.chars().count();
    if pw.is_empty() {
        errors.insert("password".into(), required());
    } else if n < min || n > 255 {
        errors.insert("password".into(), length(min, 255));
    }
    if confirm.is_empty() {
        errors.insert("passwordConfirm".into(), required());
    } else if confirm != pw {
        errors.insert(
            "passwordConfirm".into(),
            verr("validation_values_mismatch", "Values don't match."),
        );
    }
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    let who = who.ok_or_else(|| ApiError::bad("Invalid or expired password reset token."))?;
    let row = &who.record;
    let mut change = Map::new();
    change.insert("password".into(), json!(pw));
    change.insert("passwordConfirm".into(), json!(pw));
    // Whoever reads the mail owns the address: verified, unless the email changed since.
    if !is_verified(&c, row)
        && token::unverified_claims(&tok)
            .get("email")
            .and_then(Value::as_str)
            == Some(c.stored_text(row, "email"))
    {
        change.insert("verified".into(), json!(true));
    }
    let id = c.stored_text(row, "id").to_owned();
    // The new password rotates the tokenKey: this token, and every other, stops working (and
    // the store drops the record's OTPs and MFA sessions).
    save(&state, &c, &id, change).await.map_err(|e| {
        let e = ApiError::from(e);
        ApiError::with_data(e.status, "Failed to set new password.", e.data)
    })?;
    state
        .mail_cooldowns
        .clear(&format!("passwordReset:{}{id}", c.id));
    Ok(no_content())
}

// ---------------------------------------------------------------- email change

pub(crate) async fn request_email_change(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["requestEmailChange"]).await?;
    let who = caller(&state, &head.headers)
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
    if c.id == SUPERUSERS_ID {
        return Err(ApiError::bad(
            "All superusers can change their emails directly.",
        ));
    }
    let data = read_body(&state, &head, body).await?;
    let new_email = text(&data, "newEmail")?;
    let row = &who.record;
    let current = c.stored_text(row, "email");
    let err = match email_error(&new_email) {
        Some(e) => Some(e),
        None if new_email == current => {
            Some(verr("validation_not_in_invalid", "Must not be in list."))
        }
        None => find_by_email(&state, &c, &new_email)
            .await?
            .filter(|other| c.stored_text(other, "id") != c.stored_text(row, "id"))
            .map(|_| verr("validation_invalid_new_email", "Invalid new email address.")),
    };
    if let Some(e) = err {
        return Err(invalid_one("newEmail", e));
    }
    let mut claims = Map::new();
    claims.insert("email".into(), json!(current));
    claims.insert("newEmail".into(), json!(new_email));
    let tok = token::for_record(&c, row, "emailChange", 0, claims, now_s())
        .ok_or_else(ApiError::internal)?;
    queue_mail(
        &state,
        &c,
        row,
        Kind::EmailChange,
        &new_email,
        &[("{TOKEN}", &tok)],
    );
    Ok(no_content())
}

pub(crate) async fn confirm_email_change(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["confirmEmailChange"]).await?;
    if c.id == SUPERUSERS_ID {
        return Err(ApiError::bad(
            "All superusers can change their emails directly.",
        ));
    }
    let data = read_body(&state, &head, body).await?;
    let (tok, pass) = (text(&data, "token")?, text(&data, "password")?);
    // The token's checks, in PocketBase's order; the password is checked against the record
    // the token names (none: the password is wrong too).
    let mut errors = Map::new();
    let checked: Result<(crate::records::Caller, String), Value> = async {
        let new_email = token::unverified_claims(&tok)
            .get("newEmail")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if new_email.is_empty() {
            return Err(verr(
                "validation_invalid_token_payload",
                "Invalid token payload - newEmail must be set.",
            ));
        }
        let who = token_check(&state, &c, &tok, "emailChange").await?;
        if find_by_email(&state, &c, &new_email)
            .await
            .ok()
            .flatten()
            .is_some()
        {
            return Err(verr(
                "validation_invalid_token_email",
                "The new email address is invalid.",
            ));
        }
        Ok((who, new_email))
    }
    .await;
    if tok.is_empty() {
        errors.insert("token".into(), required());
    } else if let Err(e) = &checked {
        errors.insert("token".into(), e.clone());
    }
    if pass.is_empty() {
        errors.insert("password".into(), required());
    } else if pass.chars().count() > 100 {
        errors.insert("password".into(), length(1, 100));
    } else {
        let hash = checked
            .as_ref()
            .ok()
            .map(|(w, _)| c.stored_text(&w.record, "password").to_owned())
            .unwrap_or_default();
        let p = pass.clone();
        let ok = password::check(p, hash).await;
        if !ok {
            errors.insert(
                "password".into(),
                verr(
                    "validation_invalid_password",
                    "Missing or invalid auth record password.",
                ),
            );
        }
    }
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    let (who, new_email) = checked.map_err(|_| ApiError::bad("Invalid or expired token."))?;
    let id = c.stored_text(&who.record, "id").to_owned();
    let mut change = Map::new();
    change.insert("email".into(), json!(new_email));
    change.insert("verified".into(), json!(true));
    // A new email rotates the tokenKey: the tokens issued before stop working.
    save(&state, &c, &id, change).await.map_err(|e| {
        let e = ApiError::from(e);
        ApiError::with_data(e.status, "Failed to confirm email change.", e.data)
    })?;
    Ok(no_content())
}

// ---------------------------------------------------------------- impersonate

pub(crate) async fn impersonate(
    State(state): State<Shared>,
    Path((key, id)): Path<(String, String)>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let who = caller(&state, &head.headers)
        .await
        .ok_or_else(ApiError::requires_auth)?;
    if !who.is_superuser() {
        return Err(ApiError::forbidden_record());
    }
    // No rate-limit middleware in front of this route in PocketBase: any miss is its own 404.
    let c = super::find_collection(&state, &key)
        .filter(|c| c.is_auth())
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, super::auth::MSG_NO_AUTH_COLLECTION))?;
    let c2 = Arc::clone(&c);
    let row = state
        .store
        .read(move |conn| store_records::get(conn, &c2, &id, None))
        .await?
        .ok_or_else(ApiError::not_found)?;
    let data = read_body(&state, &head, body).await?;
    let duration = match data.get("duration") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n
            .as_i64()
            .ok_or_else(|| ApiError::bad(body::MSG_LOAD_FAILED))?,
        // A form sends text: it binds when it reads as an integer. JSON text never binds to
        // PocketBase's integer.
        Some(Value::String(_)) if body::is_json(&head.headers) => {
            return Err(ApiError::bad(body::MSG_LOAD_FAILED));
        }
        Some(Value::String(s)) if s.is_empty() => 0,
        Some(Value::String(s)) => {
            go_parse_int(s).ok_or_else(|| ApiError::bad(body::MSG_LOAD_FAILED))?
        }
        Some(_) => return Err(ApiError::bad(body::MSG_LOAD_FAILED)),
    };
    if duration < 0 {
        return Err(invalid_one(
            "duration",
            verr_params(
                "validation_min_greater_equal_than_required",
                "Must be no less than 0.",
                json!({"threshold": 0}),
            ),
        ));
    }
    let mut extra = Map::new();
    extra.insert("refreshable".into(), json!(false));
    let tok = token::for_record(&c, &row, "auth", duration, extra, now_s()).ok_or_else(|| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Failed to generate static auth token.",
        )
    })?;
    let fields = FieldsFilter::parse(
        query_map(head.uri.query())
            .get("fields")
            .and_then(Value::as_str),
    )
    .map_err(|_| ApiError::bad_request())?;
    finish_auth(
        &state,
        &head,
        &c,
        row,
        "",
        &Map::new(),
        &fields,
        Some(tok),
        None,
    )
    .await
}

// ---------------------------------------------------------------- OTP

fn otp_collection(state: &Shared) -> ApiResult<Arc<Collection>> {
    state
        .store
        .schema()
        .by_name("_otps")
        .cloned()
        .ok_or_else(ApiError::internal)
}

pub(crate) async fn request_otp(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["requestOTP"]).await?;
    if !option_bool(&c, "otp", "enabled") {
        return Err(ApiError::new(StatusCode::FORBIDDEN, MSG_OTP_OFF));
    }
    let data = read_body(&state, &head, body).await?;
    let email = text(&data, "email")?;
    if let Some(e) = email_error(&email) {
        return Err(invalid_one("email", e));
    }
    count_mail_request(&state, &head)?;
    let Some(row) = find_by_email(&state, &c, &email).await? else {
        // The same answer as for a known email, with an id that names nothing.
        return Ok(super::ok_json(
            &json!({"otpId": crate::schema::ids::record_id()}),
        ));
    };
    let otps = otp_collection(&state)?;
    let rid = c.stored_text(&row, "id").to_owned();
    let duration = option_i64(&c, "otp", "duration");
    let (o2, cid, r2) = (Arc::clone(&otps), c.id.clone(), rid.clone());
    let existing = state
        .store
        .read(move |conn| store_records::find_by_record_ref(conn, &o2, &cid, &r2))
        .await?;
    let now = chrono::Utc::now();
    let recent = existing
        .iter()
        .filter(|o| !crate::auth::has_expired(otps.stored_text(o, "created"), duration, now))
        .count();
    if recent >= OTPS_RECENT_MAX
        && let Some(newest) = existing.first()
    {
        tracing::warn!(record = %rid, "too many OTP requests: the newest one is handed out again");
        return Ok(super::ok_json(
            &json!({"otpId": otps.stored_text(newest, "id")}),
        ));
    }
    let len = usize::try_from(option_i64(&c, "otp", "length")).unwrap_or(8);
    let code = crate::auth::otp_code(len);
    let to = c.stored_text(&row, "email").to_owned();
    let mut fields = Map::new();
    fields.insert("collectionRef".into(), json!(c.id));
    fields.insert("recordRef".into(), json!(rid));
    fields.insert("password".into(), json!(code));
    // The address the code goes to, set now rather than after the send: the code is known
    // only to whoever reads that mail, and an OTP whose mail is given up is deleted.
    fields.insert("sentTo".into(), json!(to));
    let access = Access::system(0);
    let otp = Writer::new(&state.records, &access)
        .create(&otps, &fields)
        .await?;
    let otp_id = otps.stored_text(&otp, "id").to_owned();
    let settings = state.settings.current();
    let (subject, html) = templates::render(
        &c,
        &row,
        &settings,
        Kind::Otp,
        &[("{OTP_ID}", &otp_id), ("{OTP}", &code)],
    );
    let msg = Message::from_sender(&settings, &to, subject, html);
    let (st, oid) = (Arc::clone(&state), otp_id.clone());
    state.outbox.queue(
        settings,
        msg,
        Some(Box::new(move || {
            tokio::spawn(async move {
                let Ok(otps) = otp_collection(&st) else {
                    return;
                };
                let access = Access::system(0);
                if let Err(e) = Writer::new(&st.records, &access).delete(&otps, oid).await {
                    tracing::warn!(error = %e, "could not delete the OTP whose mail failed");
                }
            });
        })),
    );
    Ok(super::ok_json(&json!({"otpId": otp_id})))
}

pub(crate) async fn with_otp(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let c = auth_collection(&state, &key)?;
    limit(&state, &head, &c, &["authWithOTP", "auth"]).await?;
    if !option_bool(&c, "otp", "enabled") {
        return Err(ApiError::new(StatusCode::FORBIDDEN, MSG_OTP_OFF));
    }
    let fields = FieldsFilter::parse(
        query_map(head.uri.query())
            .get("fields")
            .and_then(Value::as_str),
    )
    .map_err(|_| ApiError::bad_request())?;
    let data = read_body(&state, &head, body).await?;
    let (otp_id, pass) = (text(&data, "otpId")?, text(&data, "password")?);
    let mut errors = Map::new();
    if otp_id.is_empty() {
        errors.insert("otpId".into(), required());
    } else if otp_id.chars().count() > 255 {
        errors.insert("otpId".into(), length(1, 255));
    }
    if pass.is_empty() {
        errors.insert("password".into(), required());
    } else if pass.chars().count() > 71 {
        errors.insert("password".into(), length(1, 71));
    }
    if !errors.is_empty() {
        return Err(invalid(errors));
    }
    // Brute-force protection: failed codes count per OTP and per client address, and either
    // past its limit is refused before the code is looked at.
    let ip = super::request_ip(&state, &head);
    let identity = format!("otp:{otp_id}");
    let now = Instant::now();
    if state.throttle.blocked(&c.id, &identity, &ip, now) {
        return Err(super::error::too_many_requests());
    }
    let bad = || {
        state.throttle.failed(&c.id, &identity, &ip, now);
        ApiError::bad(MSG_BAD_OTP)
    };
    let otps = otp_collection(&state)?;
    let o2 = Arc::clone(&otps);
    let oid = otp_id.clone();
    let otp = state
        .store
        .read(move |conn| store_records::get(conn, &o2, &oid, None))
        .await?
        .ok_or_else(bad)?;
    if otps.stored_text(&otp, "collectionRef") != c.id
        || crate::auth::has_expired(
            otps.stored_text(&otp, "created"),
            option_i64(&c, "otp", "duration"),
            chrono::Utc::now(),
        )
    {
        return Err(bad());
    }
    let (c2, rid) = (
        Arc::clone(&c),
        otps.stored_text(&otp, "recordRef").to_owned(),
    );
    let row = state
        .store
        .read(move |conn| store_records::get(conn, &c2, &rid, None))
        .await?
        .ok_or_else(bad)?;
    let rid = c.stored_text(&row, "id").to_owned();
    // Codes are short: a few tries per record and client, then a new code is needed.
    if !state.otp_attempts.hit(
        &format!("{rid}\u{0}{ip}"),
        OTP_ATTEMPTS,
        OTP_ATTEMPTS_WINDOW,
        Instant::now(),
    ) {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many attempts, please try again later with a new OTP.",
        ));
    }
    let hash = otps.stored_text(&otp, "password").to_owned();
    let ok = password::check(pass, hash).await;
    if !ok {
        return Err(bad());
    }
    let sent_to = otps.stored_text(&otp, "sentTo").to_owned();
    let access = Access::system(0);
    if let Err(e) = Writer::new(&state.records, &access)
        .delete(&otps, otp_id)
        .await
    {
        tracing::error!(error = %e, "could not delete a used OTP");
    }
    let mut row = row;
    // The code reached the record's own address: that proves it. Used alone (no MFA), the
    // password is replaced with one nobody knows, against pre-registered accounts.
    if !is_verified(&c, &row) && !sent_to.is_empty() && c.stored_text(&row, "email") == sent_to {
        let mut change = Map::new();
        change.insert("verified".into(), json!(true));
        if !option_bool(&c, "mfa", "enabled") {
            change = random_password_body(change);
        }
        match save(&state, &c, &rid, change).await {
            Ok(saved) => row = saved,
            Err(e) => {
                tracing::error!(error = %e, "could not mark the record verified after its OTP")
            }
        }
    }
    finish_auth(&state, &head, &c, row, "otp", &data, &fields, None, None).await
}

// ---------------------------------------------------------------- MFA

/// PocketBase's MFA step for a sign-in by `method`: Ok(Some(mfaId)) when a second method is
/// needed now (a new `_mfas` row), Ok(None) to go on (MFA off, not wanted by `mfa.rule`, or the
/// `mfaId` given names this record's session of another method, used up here).
pub(super) async fn check_mfa(
    state: &Shared,
    head: &Parts,
    c: &Arc<Collection>,
    row: &StoreRecord,
    method: &str,
    data: &Map<String, Value>,
) -> ApiResult<Option<String>> {
    if method.is_empty() || !option_bool(c, "mfa", "enabled") {
        return Ok(None);
    }
    let wants = crate::records::mfa_rule_wants(&state.store, c, row)
        .await
        .map_err(|e| {
            tracing::debug!(error = %e, "mfa rule failed");
            ApiError::bad("Failed to authenticate.")
        })?;
    if !wants {
        return Ok(None);
    }
    let mfas = state
        .store
        .schema()
        .by_name("_mfas")
        .cloned()
        .ok_or_else(ApiError::internal)?;
    let q = query_map(head.uri.query());
    let mut mfa_id = q
        .get("mfaId")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if mfa_id.is_empty() {
        mfa_id = text(data, "mfaId")?;
    }
    let access = Access::system(0);
    let writer = Writer::new(&state.records, &access);
    let rid = c.stored_text(row, "id").to_owned();
    if mfa_id.is_empty() {
        let mut fields = Map::new();
        fields.insert("collectionRef".into(), json!(c.id));
        fields.insert("recordRef".into(), json!(rid));
        fields.insert("method".into(), json!(method));
        let created = writer.create(&mfas, &fields).await?;
        return Ok(Some(mfas.stored_text(&created, "id").to_owned()));
    }
    let m2 = Arc::clone(&mfas);
    let mid = mfa_id.clone();
    let found = state
        .store
        .read(move |conn| store_records::get(conn, &m2, &mid, None))
        .await?;
    let expired = |m: &StoreRecord| {
        crate::auth::has_expired(
            mfas.stored_text(m, "created"),
            option_i64(c, "mfa", "duration"),
            chrono::Utc::now(),
        )
    };
    let Some(mfa) = found else {
        return Err(ApiError::bad("Invalid or expired MFA session."));
    };
    if expired(&mfa) {
        // An expired session is of no use to anyone.
        if let Err(e) = writer.delete(&mfas, mfa_id).await {
            tracing::warn!(error = %e, "could not delete an expired MFA session");
        }
        return Err(ApiError::bad("Invalid or expired MFA session."));
    }
    if mfas.stored_text(&mfa, "recordRef") != rid || mfas.stored_text(&mfa, "collectionRef") != c.id
    {
        return Err(ApiError::bad("Invalid MFA session."));
    }
    if mfas.stored_text(&mfa, "method") == method {
        return Err(ApiError::bad(
            "A different authentication method is required.",
        ));
    }
    if let Err(e) = writer.delete(&mfas, mfa_id).await {
        tracing::warn!(error = %e, "could not delete a used MFA session");
    }
    Ok(None)
}

// ---------------------------------------------------------------- test mail

/// The record a test mail is rendered for: PocketBase's placeholder values
/// (`__pb_test_<field>__` for text, zero values otherwise) and the address it goes to.
pub(super) fn test_record(c: &Collection, email: &str) -> StoreRecord {
    use crate::schema::FieldType;
    use crate::schema::value::Stored;
    c.fields
        .iter()
        .map(|f| match f.kind {
            _ if f.name == "email" => Stored::Text(email.to_owned()),
            _ if f.name == "tokenKey" => Stored::Text(crate::schema::ids::secret(50)),
            _ if f.hidden => Stored::Text(String::new()),
            FieldType::Bool => Stored::Int(0),
            FieldType::Number => Stored::Real(0.0),
            FieldType::Text
            | FieldType::Email
            | FieldType::Url
            | FieldType::Editor
            | FieldType::Select => Stored::Text(format!("__pb_test_{}__", f.name)),
            _ => Stored::Text(String::new()),
        })
        .collect()
}

/// The test mail of `template` for a stand-in record of `c`, sent now.
pub(super) async fn send_test_mail(
    state: &Shared,
    c: &Collection,
    template: &str,
    email: &str,
) -> Result<(), crate::auth::mail::MailError> {
    let settings = state.settings.current();
    let row = test_record(c, email);
    let now = now_s();
    let with_email = |extra: &[(&str, &str)]| {
        let mut m = Map::new();
        for (k, v) in extra {
            m.insert((*k).into(), json!(v));
        }
        m
    };
    let (kind, tok, extra): (Kind, Option<String>, Vec<(&str, String)>) = match template {
        "verification" => (
            Kind::Verification,
            token::for_record(
                c,
                &row,
                "verification",
                0,
                with_email(&[("email", email)]),
                now,
            ),
            vec![],
        ),
        "password-reset" => (
            Kind::PasswordReset,
            token::for_record(
                c,
                &row,
                "passwordReset",
                0,
                with_email(&[("email", email)]),
                now,
            ),
            vec![],
        ),
        "email-change" => (
            Kind::EmailChange,
            token::for_record(
                c,
                &row,
                "emailChange",
                0,
                with_email(&[("email", email), ("newEmail", email)]),
                now,
            ),
            vec![],
        ),
        "otp" => (
            Kind::Otp,
            None,
            vec![
                ("{OTP_ID}", "_PB_TEST_OTP_ID_".to_owned()),
                ("{OTP}", "123456".to_owned()),
            ],
        ),
        _ => (
            Kind::AuthAlert,
            None,
            vec![(
                "{ALERT_INFO}",
                templates::escape_html(&format!(
                    "{} - TEST_IP TEST_USER_AGENT",
                    crate::schema::ids::now()
                )),
            )],
        ),
    };
    let mut pairs: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
    if let Some(t) = &tok {
        pairs.push(("{TOKEN}", t));
    }
    let (subject, html) = templates::render(c, &row, &settings, kind, &pairs);
    crate::auth::mail::send(
        &settings.smtp,
        &Message::from_sender(&settings, email, subject, html),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::go_parse_int;

    #[test]
    fn form_integers_are_read_as_go_parse_int_reads_them() {
        let cases: [(&str, Option<i64>); 22] = [
            ("60", Some(60)),
            ("060", Some(48)),
            ("0x10", Some(16)),
            ("0X1_0", Some(16)),
            ("0b11", Some(3)),
            ("0o17", Some(15)),
            ("1_000", Some(1000)),
            ("+5", Some(5)),
            ("-5", Some(-5)),
            ("0", Some(0)),
            ("-0", Some(0)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("08", None),
            (" 5", None),
            ("1e2", None),
            ("_1", None),
            ("1_", None),
            ("1__0", None),
            ("0x", None),
            ("true", None),
        ];
        for (s, want) in cases {
            assert_eq!(go_parse_int(s), want, "{s}");
        }
    }
}
