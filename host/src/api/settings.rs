//! `/api/settings` (superusers only): read, patch, and the two connection tests: the test mail
//! is sent for real (and its failure answered); S3 answers honestly that it is not built yet.

use super::body::{self, MSG_LOAD_FAILED};
use super::error::{ApiError, ApiResult};
use super::extract::Superuser;
use super::{Shared, ok_json};
use crate::settings::SettingsError;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

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
    let parsed = body::parse(&head.headers, body, state.cfg.http.body_bytes_max)
        .await
        .map_err(|e| e.answer(MSG_LOAD_FAILED, MSG_LOAD_FAILED))?;
    let saved = state
        .settings
        .update(&state.store, &parsed.data)
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
    Ok(ok_json(&saved.to_api()))
}

/// The body of a test endpoint; anything that is not a JSON object (or form) is PocketBase's
/// "loading" error.
async fn test_body(state: &Shared, request: Request) -> ApiResult<Map<String, Value>> {
    let (head, body) = request.into_parts();
    Ok(
        body::parse(&head.headers, body, state.cfg.http.body_bytes_max)
            .await
            .map_err(|e| e.answer(MSG_LOAD_FAILED, MSG_LOAD_FAILED))?
            .data,
    )
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
    let why = if s3.enabled {
        "S3 storage is not supported by this server yet."
    } else {
        "S3 storage filesystem is not enabled."
    };
    Err(ApiError::bad(format!("{FAILED} Raw error: \n{why}")))
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
