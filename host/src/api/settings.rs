//! `/api/settings` (superusers only): read, patch (which also switches the file storage to or
//! from S3), and the two connection tests, both for real: a test object put and deleted on S3,
//! a test mail sent over SMTP (and either failure answered), as PocketBase does.

use super::body::{self, MSG_LOAD_FAILED};
use super::error::{ApiError, ApiResult};
use super::extract::Superuser;
use super::{Shared, ok_json};
use crate::files::Bucket;
use crate::settings::SettingsError;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;

const MSG_SAVE_FAILED: &str = "An error occurred while saving the new settings.";

pub(crate) async fn view(State(state): State<Shared>, _: Superuser) -> Response {
    ok_json(&state.settings.current().to_api())
}

pub(crate) async fn update(
    State(state): State<Shared>,
    _: Superuser,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let limit = state.cfg.http.body_bytes_max;
    let parsed = body::parse_struct(&head.headers, head.uri.query(), body, limit)
        .await
        .map_err(|e| e.answer(MSG_LOAD_FAILED, MSG_LOAD_FAILED))?;
    // PocketBase decodes the body into a pointer to its settings: `null` sets that pointer to
    // nil, and the update that follows fails with its 500. Nothing is saved.
    if parsed.json_null {
        return Err(ApiError::internal());
    }
    // A form binds as Go binds it into the settings struct: of its plain values only
    // `superuserIPs` (a list of text) can be set; each group is an object, which a form value
    // cannot fill, so it is left as it was. `@jsonPayload` patches like a JSON body.
    let data = match parsed.form {
        Some(form) => form.into_struct(&[], &["superuserIPs"]),
        None => parsed.data,
    };
    let before = state.settings.current();
    let saved = state
        .settings
        .update(&state.store, &data)
        .await
        .map_err(|e| match e {
            SettingsError::Bind(why) => {
                tracing::debug!(error = %why, "settings body refused");
                ApiError::bad(MSG_LOAD_FAILED)
            }
            SettingsError::Invalid(data) => {
                ApiError::with_data(StatusCode::BAD_REQUEST, MSG_SAVE_FAILED, data)
            }
            SettingsError::Store(s) => s.into(),
        })?;
    state.records.files.use_s3(saved.s3.bucket_config());
    crate::logs::settings_changed(Arc::clone(&state.store), &before.logs, &saved.logs).await;
    Ok(ok_json(&saved.to_api()))
}

/// The body of a test endpoint; anything that is not a JSON object (or form) is PocketBase's
/// "loading" error.
async fn test_body(state: &Shared, request: Request) -> ApiResult<Map<String, Value>> {
    let (head, body) = request.into_parts();
    let limit = state.cfg.http.body_bytes_max;
    body::bind(&head, body, limit, MSG_LOAD_FAILED, MSG_LOAD_FAILED).await
}

fn text<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

fn field_error(code: &str, message: &str) -> Value {
    json!({"code": code, "message": message})
}

/// `POST /api/settings/test/s3 {"filesystem": "storage" | "backups"}`.
pub(crate) async fn test_s3(
    State(state): State<Shared>,
    _: Superuser,
    request: Request,
) -> ApiResult<Response> {
    const FAILED: &str = "Failed to test the S3 filesystem.";
    let body = test_body(&state, request).await?;
    let filesystem = text(&body, "filesystem");
    let invalid = match filesystem {
        "" => Some(field_error("validation_required", "Cannot be blank.")),
        "storage" | "backups" => None,
        _ => Some(field_error(
            "validation_in_invalid",
            "Must be a valid value.",
        )),
    };
    if let Some(e) = invalid {
        let mut data = Map::new();
        data.insert("filesystem".into(), e);
        return Err(ApiError::with_data(StatusCode::BAD_REQUEST, FAILED, data));
    }
    let settings = state.settings.current();
    let s3 = if filesystem == "storage" {
        &settings.s3
    } else {
        &settings.backups.s3
    };
    match probe_s3(s3).await {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        // PocketBase's error messages end as sentences.
        Err(why) if why.ends_with(['.', '!', '?']) => {
            Err(ApiError::bad(format!("{FAILED} Raw error: \n{why}")))
        }
        Err(why) => Err(ApiError::bad(format!("{FAILED} Raw error: \n{why}."))),
    }
}

/// PocketBase's S3 test: a client for the config, a 4-byte `text/plain` object put under a
/// random `pb_settings_test_*` prefix, and that prefix deleted; the first failure, worded as
/// PocketBase words it.
async fn probe_s3(s3: &crate::settings::S3) -> Result<(), String> {
    let Some(config) = s3.bucket_config() else {
        return Err("S3 storage filesystem is not enabled".into());
    };
    let bucket =
        Bucket::new(config).map_err(|e| format!("failed to initialize the S3 filesystem: {e}"))?;
    let prefix = format!("pb_settings_test_{}", crate::schema::ids::lower_alnum(5));
    let key = format!("{prefix}/test.txt");
    // A missing bucket or object reads as PocketBase's storage layer words it.
    let worded = |e: crate::files::S3Error| {
        if e.is_not_found() {
            format!("[key: {key}] {e}\nresource not found")
        } else {
            format!("[key: {key}] {e}")
        }
    };
    bucket
        .put(
            &key,
            bytes::Bytes::from_static(b"test"),
            "text/plain; charset=utf-8",
            &[],
        )
        .await
        .map_err(|e| format!("failed to upload a test file: {}", worded(e)))?;
    bucket
        .delete_prefix(&prefix)
        .await
        .map_err(|e| format!("failed to delete a test file: {}", worded(e)))
}

/// `POST /api/settings/test/email {"email", "template", "collection"?}`.
pub(crate) async fn test_email(
    State(state): State<Shared>,
    _: Superuser,
    request: Request,
) -> ApiResult<Response> {
    const FAILED: &str = "Failed to send the test email.";
    const TEMPLATES: &[&str] = &[
        "verification",
        "password-reset",
        "email-change",
        "otp",
        "login-alert",
    ];
    let body = test_body(&state, request).await?;
    let mut data = Map::new();
    let email = text(&body, "email");
    if email.is_empty() {
        data.insert(
            "email".into(),
            field_error("validation_required", "Cannot be blank."),
        );
    } else if !crate::settings::is_email(email) {
        data.insert(
            "email".into(),
            field_error("validation_is_email", "Must be a valid email address."),
        );
    }
    let template = text(&body, "template");
    if template.is_empty() {
        data.insert(
            "template".into(),
            field_error("validation_required", "Cannot be blank."),
        );
    } else if !TEMPLATES.contains(&template) {
        data.insert(
            "template".into(),
            field_error("validation_in_invalid", "Must be a valid value."),
        );
    }
    let collection = text(&body, "collection");
    let target = state
        .store
        .schema()
        .by_id_or_name(if collection.is_empty() {
            "_superusers"
        } else {
            collection
        })
        .filter(|c| c.is_auth())
        .cloned();
    if !collection.is_empty() && target.is_none() {
        data.insert(
            "collection".into(),
            field_error(
                "validation_invalid_auth_collection",
                "Must be a valid auth collection id or name.",
            ),
        );
    }
    if !data.is_empty() {
        return Err(ApiError::with_data(StatusCode::BAD_REQUEST, FAILED, data));
    }
    let c = target.ok_or_else(ApiError::internal)?;
    super::auth_flows::send_test_mail(&state, &c, template, email)
        .await
        .map_err(|e| ApiError::bad(format!("{FAILED} Raw error: \n{e}")))?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
