//! `/api/backups`: list, create, upload, download (with a superuser file token), delete and
//! restore, with PocketBase's validation and messages. The work is the backups area's, on the
//! blocking pool.

use super::body::{self, MSG_LOAD_FAILED, MSG_UNSUPPORTED};
use super::error::{ApiError, ApiResult, MSG_VALIDATION};
use super::extract::Superuser;
use super::{Shared, ok_json, query_map};
use crate::backups::{self, BackupError};
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;

const MSG_BUSY: &str = "Try again later - another backup/restore process has already been started";
const MSG_NO_ACCESS: &str = "Insufficient permissions to access the resource.";
const MSG_MISSING: &str = "Missing or invalid backup file.";

/// How much of a refused upload is read before the answer (Go's server reads 256 KiB).
const REFUSED_BODY_READ: usize = 256 << 10;

/// Backups kept in S3 (`settings.backups.s3.enabled`) are not built: every endpoint says so
/// rather than use the local folder the user asked not to.
fn local_only(state: &Shared) -> ApiResult<()> {
    if state.settings.peek().backups.s3.enabled {
        return Err(ApiError::bad(backups::S3_UNSUPPORTED));
    }
    Ok(())
}

/// Run blocking backups work off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> ApiResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| ApiError::internal())
}

fn invalid(field: &str, code: &str, message: &str, params: Option<Value>) -> ApiError {
    let mut e = json!({"code": code, "message": message});
    if let Some(p) = params {
        e["params"] = p;
    }
    let mut data = Map::new();
    data.insert(field.to_owned(), e);
    ApiError::with_data(StatusCode::BAD_REQUEST, MSG_VALIDATION, data)
}

pub(crate) async fn list(State(state): State<Shared>, _su: Superuser) -> ApiResult<Response> {
    local_only(&state)?;
    let b = Arc::clone(&state.backups);
    let items = blocking(move || b.list())
        .await?
        .map_err(|e| ApiError::bad(format!("Failed to retrieve backup items. Raw error: \n{e}")))?;
    let out: Vec<Value> = items
        .into_iter()
        .map(|i| {
            json!({
                "modified": crate::schema::ids::format_time(i.modified.into()),
                "key": i.key,
                "size": i.size,
            })
        })
        .collect();
    Ok(ok_json(&Value::Array(out)))
}

pub(crate) async fn create(
    State(state): State<Shared>,
    _su: Superuser,
    request: Request,
) -> ApiResult<Response> {
    local_only(&state)?;
    if !state.backups.idle() {
        return Err(ApiError::bad(MSG_BUSY));
    }
    let (head, body) = request.into_parts();
    let parsed = body::parse(&head.headers, body, state.cfg.http.body_bytes_max)
        .await
        .map_err(|e| e.answer(MSG_UNSUPPORTED, MSG_LOAD_FAILED))?;
    let mut name = match parsed.data.get("name") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::bad(MSG_LOAD_FAILED)),
    };
    if !name.is_empty() {
        if name.chars().count() > 150 {
            return Err(invalid(
                "name",
                "validation_length_out_of_range",
                "The length must be between 1 and 150.",
                Some(json!({"max": 150, "min": 1})),
            ));
        }
        if !backups::valid_name(&name) {
            return Err(invalid(
                "name",
                "validation_match_invalid",
                "Must be in a valid format.",
                None,
            ));
        }
        if state.backups.exists(&name) {
            return Err(invalid(
                "name",
                "validation_backup_name_exists",
                "The backup file name is invalid or already exists.",
                None,
            ));
        }
    } else {
        name = backups::default_name(
            "pb_backup_",
            &state.settings.peek().meta.app_name,
            chrono::Utc::now(),
        );
    }
    let b = Arc::clone(&state.backups);
    match blocking(move || b.create(&name)).await? {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(BackupError::Busy) => Err(ApiError::bad(MSG_BUSY)),
        Err(e) => {
            tracing::warn!(error = %e, "backup failed");
            Err(ApiError::bad("Failed to create backup."))
        }
    }
}

pub(crate) async fn upload(State(state): State<Shared>, request: Request) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    // Checked here rather than by the extractor, to read a refused upload's first bytes first.
    let allowed = super::extract::superuser_only(&state, &head.headers).await;
    if let Err(e) = allowed.and_then(|()| local_only(&state)) {
        body::discard(body, REFUSED_BODY_READ).await;
        return Err(e);
    }
    // No size limit, as PocketBase's: a backup is as large as the data.
    let parsed = body::parse_with_files(&head.headers, body, usize::MAX, &state.records.files)
        .await
        .map_err(|e| e.answer(MSG_UNSUPPORTED, MSG_LOAD_FAILED))?;
    let Some((_, file)) = parsed.files.into_iter().find(|(part, _)| part == "file") else {
        return Err(invalid(
            "file",
            "validation_required",
            "Cannot be blank.",
            None,
        ));
    };
    if file.mime != "application/zip" {
        return Err(invalid(
            "file",
            "validation_invalid_mime_type",
            &format!(
                "{} mime type must be one of: application/zip.",
                super::files::go_quote(&file.name)
            ),
            None,
        ));
    }
    if state.backups.exists(&file.original) {
        return Err(invalid(
            "file",
            "validation_backup_name_exists",
            "Backup file with the specified name already exists.",
            None,
        ));
    }
    let Some(dest) = state.backups.path(&file.original) else {
        return Err(ApiError::bad("Failed to upload backup."));
    };
    let stored = blocking(move || {
        if let Some(dir) = dest.parent() {
            std::fs::create_dir_all(dir)?;
        }
        file.persist(&dest)
    })
    .await?;
    stored.map_err(|e| {
        tracing::warn!(error = %e, "backup upload not stored");
        ApiError::bad("Failed to upload backup.")
    })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /api/backups/{key}?token=`: only with a superuser's file token (and from an address in
/// `superuserIPs` when that is set); streamed as an attachment, ranges and all.
pub(crate) async fn download(
    State(state): State<Shared>,
    Path(key): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    let (head, _) = request.into_parts();
    let q = query_map(head.uri.query());
    let tok = q.get("token").and_then(Value::as_str).unwrap_or("");
    let who = match tok {
        "" => None,
        t => super::token_record(&state, t, "file", super::now_s())
            .await
            .map(|(who, _)| who),
    };
    if !who.is_some_and(|w| w.is_superuser())
        || !super::superuser_ip_allowed(&state, &head.headers, &head.extensions)
    {
        return Err(ApiError::new(StatusCode::FORBIDDEN, MSG_NO_ACCESS));
    }
    local_only(&state)?;
    let path = state.backups.path(&key).ok_or_else(ApiError::not_found)?;
    super::files::serve(path, &key, true, &head.headers).await
}

pub(crate) async fn delete(
    State(state): State<Shared>,
    _su: Superuser,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    local_only(&state)?;
    let b = Arc::clone(&state.backups);
    let k = key.clone();
    match blocking(move || b.delete(&k)).await? {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(BackupError::Busy) => Err(ApiError::bad(
            "The backup is currently being used and cannot be deleted.",
        )),
        Err(e) => Err(ApiError::bad(format!(
            "Invalid or already deleted backup file. Raw error: \n[key: {key}] {e}."
        ))),
    }
}

/// `POST /api/backups/{key}/restore`: the archive is extracted and checked first (a broken,
/// foreign or unsafe one is refused here and nothing changes); then 204, and the server stops
/// its current generation and starts again on the restored data (see `app.rs`).
pub(crate) async fn restore(
    State(state): State<Shared>,
    _su: Superuser,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    local_only(&state)?;
    if !state.backups.idle() {
        return Err(ApiError::bad(format!("{MSG_BUSY}.")));
    }
    let Some(path) = state.backups.path(&key).filter(|p| p.is_file()) else {
        return Err(ApiError::bad(MSG_MISSING));
    };
    let b = Arc::clone(&state.backups);
    let k = key.clone();
    match blocking(move || b.prepare(&path, &k)).await? {
        Ok(prepared) => {
            tracing::info!(key = %key, "restoring a backup: the server restarts on it");
            state.backups.request_restore(prepared);
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        Err(BackupError::Busy) => Err(ApiError::bad(format!("{MSG_BUSY}."))),
        Err(e) => {
            tracing::warn!(key = %key, error = %e, "restore refused");
            Err(ApiError::bad(MSG_MISSING))
        }
    }
}
