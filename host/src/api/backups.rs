//! `/api/backups`: list, create, upload, download (with a superuser file token), delete and
//! restore, with PocketBase's validation and messages, on the backups folder or (with
//! `settings.backups.s3` on) the bucket it names. The work is the backups area's, local work on
//! the blocking pool.

use super::body::{self, MSG_LOAD_FAILED, MSG_UNSUPPORTED};
use super::error::{ApiError, ApiResult, MSG_VALIDATION};
use super::extract::Superuser;
use super::{Shared, ok_json, query_map};
use crate::backups::{self, BackupError};
use crate::files::{Bucket, S3Error};
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

const MSG_NO_FILESYSTEM: &str = "Failed to load backups filesystem.";

/// Where the backups are kept: the bucket `settings.backups.s3` names, or None for the
/// backups folder. A config that makes no client answers `status` with PocketBase's message.
fn bucket(state: &Shared, status: StatusCode) -> ApiResult<Option<Arc<Bucket>>> {
    state
        .backups
        .bucket(state.settings.peek().backups.s3.bucket_config())
        .map_err(|e| {
            tracing::warn!(error = %e, "backups bucket unusable");
            ApiError::new(status, MSG_NO_FILESYSTEM)
        })
}

/// An S3 failure as PocketBase's storage layer words it in a "Raw error": the key it was about
/// (if any), the client's text, "resource not found" for a missing bucket or key, and the
/// sentence's period.
fn raw_s3(e: &S3Error, key: Option<&str>) -> String {
    let mut s = match key {
        Some(k) => format!("[key: {k}] {e}"),
        None => e.to_string(),
    };
    if e.is_not_found() {
        s.push_str("\nresource not found");
    }
    if !s.ends_with(['.', '!', '?']) {
        s.push('.');
    }
    s
}

/// Whether a backup named `name` exists; an S3 failure counts as "exists", as PocketBase's
/// name check counts it.
async fn exists(state: &Shared, bucket: Option<&Bucket>, name: &str) -> bool {
    match bucket {
        None => state.backups.exists(name),
        Some(b) => state.backups.exists_remote(b, name).await.unwrap_or(true),
    }
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
    const FAILED: &str = "Failed to retrieve backup items. Raw error: \n";
    let items = match bucket(&state, StatusCode::BAD_REQUEST)? {
        None => {
            let b = Arc::clone(&state.backups);
            blocking(move || b.list())
                .await?
                .map_err(|e| ApiError::bad(format!("{FAILED}{e}")))?
        }
        Some(bucket) => state
            .backups
            .list_remote(&bucket, "")
            .await
            .map_err(|e| ApiError::bad(format!("{FAILED}{}", raw_s3(&e, None))))?,
    };
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
    if !state.backups.idle() {
        return Err(ApiError::bad(MSG_BUSY));
    }
    let remote = bucket(&state, StatusCode::BAD_REQUEST)?;
    let (head, body) = request.into_parts();
    let limit = state.cfg.http.body_bytes_max;
    let data = body::bind(&head, body, limit, MSG_UNSUPPORTED, MSG_LOAD_FAILED).await?;
    let mut name = match data.get("name") {
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
        if exists(&state, remote.as_deref(), &name).await {
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
    let created = match remote {
        None => {
            let b = Arc::clone(&state.backups);
            blocking(move || b.create(&name)).await?
        }
        Some(bucket) => state.backups.create_remote(&bucket, &name).await,
    };
    match created {
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
    let remote = match allowed.and_then(|()| bucket(&state, StatusCode::BAD_REQUEST)) {
        Ok(remote) => remote,
        Err(e) => {
            body::discard(body, REFUSED_BODY_READ).await;
            return Err(e);
        }
    };
    // No size limit, as PocketBase's: a backup is as large as the data.
    let parsed = body::parse_with_files(
        &head.headers,
        head.uri.query(),
        body,
        usize::MAX,
        &state.records.files,
    )
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
    if exists(&state, remote.as_deref(), &file.original).await {
        return Err(invalid(
            "file",
            "validation_backup_name_exists",
            "Backup file with the specified name already exists.",
            None,
        ));
    }
    const FAILED: &str = "Failed to upload backup.";
    let Some(dest) = state.backups.path(&file.original) else {
        return Err(ApiError::bad(FAILED));
    };
    let stored = match remote {
        None => {
            blocking(move || {
                dest.parent()
                    .map_or(Ok(()), std::fs::create_dir_all)
                    .and_then(|()| file.persist(&dest))
                    .map_err(|e| e.to_string())
            })
            .await?
        }
        // Dropping the upload afterwards removes its temporary file.
        Some(bucket) => file
            .send_to(&bucket, &file.original)
            .await
            .map_err(|e| e.to_string()),
    };
    stored.map_err(|e| {
        tracing::warn!(error = %e, "backup upload not stored");
        ApiError::bad(FAILED)
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
    if let Some(bucket) = bucket(&state, StatusCode::INTERNAL_SERVER_ERROR)? {
        // Any key of the bucket, served under its last segment's name; a missing object (or
        // bucket) is PocketBase's plain 400.
        let name = key.rsplit('/').next().unwrap_or(&key);
        return super::files::serve_remote(&bucket, &key, name, true, &head.headers, |e| {
            tracing::warn!(error = %e, "backup not read from S3");
            ApiError::bad_request()
        })
        .await;
    }
    let path = state.backups.path(&key).ok_or_else(ApiError::not_found)?;
    super::files::serve(path, &key, true, &head.headers).await
}

pub(crate) async fn delete(
    State(state): State<Shared>,
    _su: Superuser,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    let deleted = match bucket(&state, StatusCode::INTERNAL_SERVER_ERROR)? {
        None => {
            let b = Arc::clone(&state.backups);
            let k = key.clone();
            blocking(move || b.delete(&k)).await?
        }
        Some(bucket) => state.backups.delete_remote(&bucket, &key).await,
    };
    match deleted {
        Ok(()) => Ok(StatusCode::NO_CONTENT.into_response()),
        Err(BackupError::Busy) => Err(ApiError::bad(
            "The backup is currently being used and cannot be deleted.",
        )),
        Err(BackupError::S3(e)) => Err(ApiError::bad(format!(
            "Invalid or already deleted backup file. Raw error: \n{}",
            raw_s3(&e, Some(&key))
        ))),
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
    if !state.backups.idle() {
        return Err(ApiError::bad(format!("{MSG_BUSY}.")));
    }
    let prepared = match bucket(&state, StatusCode::INTERNAL_SERVER_ERROR)? {
        None => {
            let Some(path) = state.backups.path(&key).filter(|p| p.is_file()) else {
                return Err(ApiError::bad(MSG_MISSING));
            };
            let b = Arc::clone(&state.backups);
            let k = key.clone();
            blocking(move || b.prepare(&path, &k)).await?
        }
        Some(bucket) => {
            if !state
                .backups
                .exists_remote(&bucket, &key)
                .await
                .unwrap_or(false)
            {
                return Err(ApiError::bad(MSG_MISSING));
            }
            state.backups.prepare_remote(&bucket, &key).await
        }
    };
    match prepared {
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
