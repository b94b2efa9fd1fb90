//! PocketBase's error envelope `{data, message, status}`, and the one place where every area's
//! error becomes a status code.

use crate::query::QueryError;
use crate::records::RecordError;
use crate::store::StoreError;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

pub(crate) const MSG_NOT_FOUND: &str = "The requested resource wasn't found.";
pub(crate) const MSG_BAD_REQUEST: &str = "Something went wrong while processing your request.";
pub(crate) const MSG_SUPERUSERS_ONLY: &str = "Only superusers can perform this action.";
pub(crate) const MSG_REQUIRES_AUTH: &str = "The request requires valid record authorization token.";
pub(crate) const MSG_FORBIDDEN_RECORD: &str =
    "The authorized record is not allowed to perform this action.";
/// PocketBase's default 403 (a superuser outside `superuserIPs`, among others).
pub(crate) const MSG_NOT_ALLOWED: &str = "You are not allowed to perform this request.";
pub(crate) const MSG_MISSING_COLLECTION: &str = "Missing collection context.";
pub(crate) const MSG_VALIDATION: &str = "An error occurred while validating the submitted data.";

#[derive(Debug)]
pub(crate) struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub data: Map<String, Value>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            data: Map::new(),
        }
    }
    pub(crate) fn with_data(
        status: StatusCode,
        message: impl Into<String>,
        data: Map<String, Value>,
    ) -> Self {
        Self {
            status,
            message: message.into(),
            data,
        }
    }
    /// A 400 with its own message.
    pub(crate) fn bad(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    pub(crate) fn bad_request() -> Self {
        Self::new(StatusCode::BAD_REQUEST, MSG_BAD_REQUEST)
    }
    pub(crate) fn not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, MSG_NOT_FOUND)
    }
    pub(crate) fn superusers_only() -> Self {
        Self::new(StatusCode::FORBIDDEN, MSG_SUPERUSERS_ONLY)
    }
    pub(crate) fn requires_auth() -> Self {
        Self::new(StatusCode::UNAUTHORIZED, MSG_REQUIRES_AUTH)
    }
    pub(crate) fn forbidden_record() -> Self {
        Self::new(StatusCode::FORBIDDEN, MSG_FORBIDDEN_RECORD)
    }
    pub(crate) fn internal() -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, MSG_BAD_REQUEST)
    }
    pub(crate) fn too_large() -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "Request entity too large.")
    }
}

/// PocketBase's rate limiter's answer; the brute-force protection answers with it too.
pub(crate) fn too_many_requests() -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests.")
}

impl From<QueryError> for ApiError {
    fn from(e: QueryError) -> Self {
        tracing::debug!(error = %e, "query refused");
        match e {
            QueryError::Forbidden(what) => Self::new(
                StatusCode::FORBIDDEN,
                format!("Only superusers can filter by {what}"),
            ),
            QueryError::Parse(_) | QueryError::Resolve(_) => Self::bad_request(),
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(_)
            | StoreError::Denied(_)
            | StoreError::NotUnique(_)
            | StoreError::RequiredRelation => {
                tracing::debug!(error = %e, "store refused");
                Self::bad_request()
            }
            _ => {
                tracing::error!(error = %e, "store error");
                Self::internal()
            }
        }
    }
}

/// Every way a record operation refuses, as the status and body PocketBase answers with.
impl From<RecordError> for ApiError {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::NotFound => Self::not_found(),
            RecordError::SuperusersOnly => Self::superusers_only(),
            RecordError::AuthRuleDenied => {
                Self::new(StatusCode::FORBIDDEN, crate::records::MSG_AUTH_RULE_DENIED)
            }
            RecordError::Query(q) => q.into(),
            RecordError::Invalid { message, data } => {
                Self::with_data(StatusCode::BAD_REQUEST, message, data)
            }
            RecordError::Refused(message) => Self::new(StatusCode::BAD_REQUEST, message),
            RecordError::Rejected(r) => {
                let mut data = Map::new();
                for (field, code, message) in r.fields {
                    data.insert(field, json!({"code": code, "message": message}));
                }
                Self::with_data(
                    StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST),
                    r.message,
                    data,
                )
            }
            RecordError::Store(s) => s.into(),
            RecordError::Internal(why) => {
                tracing::error!(error = %why, "record operation failed");
                Self::internal()
            }
        }
    }
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let bytes = crate::schema::value::go_json(body);
    let mut res = (status, bytes).into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    res
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A 5xx is logged by the request span (its cause where it arose): once each.
        if !self.status.is_server_error() {
            tracing::debug!(status = self.status.as_u16(), message = %self.message, "request refused");
        }
        let mut res = json_response(
            self.status,
            &json!({"data": self.data, "message": self.message, "status": self.status.as_u16()}),
        );
        res.extensions_mut().insert(Refused {
            details: details(&self.data),
            message: self.message,
        });
        res
    }
}

/// What a refused request's log row says of it (`data.error`, `data.details`).
#[derive(Clone)]
pub(crate) struct Refused {
    pub message: String,
    pub details: Value,
}

/// Codes of the validation library PocketBase builds on, whose raw messages are lower case
/// without a period (`cannot be blank`); the API sentences them (`Cannot be blank.`).
/// PocketBase's own validators write sentences to begin with.
const LIBRARY_CODES: &[&str] = &[
    "validation_required",
    "validation_nil_or_not_empty_required",
    "validation_nil",
    "validation_empty",
    "validation_in_invalid",
    "validation_not_in_invalid",
    "validation_length_out_of_range",
    "validation_length_too_long",
    "validation_length_too_short",
    "validation_length_empty_required",
    "validation_length_invalid",
    "validation_match_invalid",
    "validation_min_greater_equal_than_required",
    "validation_min_greater_than_required",
    "validation_max_less_equal_than_required",
    "validation_max_less_than_required",
    "validation_multiple_of_invalid",
    "validation_date_invalid",
    "validation_date_out_of_range",
];

/// A validation message as the validation library words it (`cannot be blank` for the API's
/// `Cannot be blank.`), for the library's codes; `None` for PocketBase's own.
pub(crate) fn library_raw(code: &str, api_message: &str) -> Option<String> {
    if !LIBRARY_CODES.contains(&code) && !code.starts_with("validation_is_") {
        return None;
    }
    let msg = api_message.strip_suffix('.').unwrap_or(api_message);
    let mut c = msg.chars();
    Some(match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    })
}

/// The details PocketBase logs for validation data: each field's message as its validator
/// words it (`cannot be blank` for the library's, not the API's `Cannot be blank.`); null
/// without data.
fn details(data: &Map<String, Value>) -> Value {
    fn raw(v: &Value) -> Value {
        match v {
            Value::Object(m) => match m.get("message").and_then(Value::as_str) {
                Some(msg) if m.contains_key("code") => {
                    let code = m.get("code").and_then(Value::as_str).unwrap_or("");
                    json!(library_raw(code, msg).unwrap_or_else(|| msg.to_owned()))
                }
                _ => Value::Object(m.iter().map(|(k, v)| (k.clone(), raw(v))).collect()),
            },
            other => other.clone(),
        }
    }
    if data.is_empty() {
        Value::Null
    } else {
        raw(&Value::Object(data.clone()))
    }
}

pub(crate) type ApiResult<T> = Result<T, ApiError>;
