//! `/api/realtime`: the SSE stream (`GET`) and the subscriptions of a client (`POST`), framed as
//! the official SDKs read them: `id:<clientId>\nevent:<name>\ndata:<json>\n\n`, the first
//! message `PB_CONNECT`. What a client may see is the `realtime` area's business.

use super::body;
use super::error::{ApiError, ApiResult};
use super::{Shared, caller, client_ip};
use crate::realtime::{Message, Registration, SubscribeError};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// One SSE message. The `id` is always the client's id: the JS SDK reads its client id there.
fn frame(client_id: &str, name: &str, data: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(client_id.len() + name.len() + data.len() + 20);
    out.extend_from_slice(b"id:");
    out.extend_from_slice(client_id.as_bytes());
    out.extend_from_slice(b"\nevent:");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata:");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// A stream's state: its queue, its place in the hub (dropped with the stream), its clocks.
struct Stream {
    client_id: Arc<str>,
    messages: mpsc::Receiver<Message>,
    _registration: Registration,
    first: Option<Bytes>,
    idle: Duration,
    ends: Instant,
}

pub(crate) async fn connect(State(state): State<Shared>, request: Request) -> Response {
    let ip = client_ip(
        &state.settings.peek(),
        request.headers(),
        request.extensions(),
    );
    let conn = state.realtime.connect(ip);
    let cfg = state.realtime.config();
    let id = Arc::clone(&conn.client.id);
    let hello = format!("{{\"clientId\":\"{id}\"}}");
    let st = Stream {
        first: Some(frame(&id, "PB_CONNECT", hello.as_bytes())),
        client_id: id,
        messages: conn.messages,
        _registration: conn.registration,
        idle: Duration::from_millis(cfg.idle_timeout_ms),
        ends: Instant::now() + Duration::from_millis(cfg.max_age_ms),
    };
    // The stream ends when the client is dropped by the hub (its queue overflowed, the server
    // stops), after `idle` without a message, or at its maximum age; the SDK reconnects.
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if let Some(first) = st.first.take() {
            return Some((Ok::<_, std::convert::Infallible>(first), st));
        }
        let deadline = (Instant::now() + st.idle).min(st.ends);
        match tokio::time::timeout_at(deadline, st.messages.recv()).await {
            Ok(Some(m)) => {
                let bytes = frame(&st.client_id, &m.name, &m.data);
                Some((Ok(bytes), st))
            }
            Ok(None) | Err(_) => None,
        }
    });
    let mut res = (StatusCode::OK, Body::from_stream(stream)).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    res
}

fn verr(code: &str, message: &str, params: Option<Value>) -> Value {
    match params {
        Some(p) => json!({"code": code, "message": message, "params": p}),
        None => json!({"code": code, "message": message}),
    }
}

/// `POST /api/realtime {"clientId", "subscriptions"}`: replace the client's subscriptions.
pub(crate) async fn subscribe(
    State(state): State<Shared>,
    request: Request,
) -> ApiResult<Response> {
    let (head, body) = request.into_parts();
    let data = body::parse(&head.headers, body, state.cfg.http.body_bytes_max)
        .await
        .map_err(|e| match e {
            body::BindError::TooLarge => ApiError::too_large(),
            _ => ApiError::bad_request(),
        })?
        .data;
    let client_id = match data.get("clientId") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::bad_request()),
    };
    let topics: Vec<String> = match data.get("subscriptions") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.clone()),
                Value::Null => Ok(String::new()),
                _ => Err(ApiError::bad_request()),
            })
            .collect::<ApiResult<_>>()?,
        Some(_) => return Err(ApiError::bad_request()),
    };
    let mut errors = Map::new();
    let n = client_id.chars().count();
    if n == 0 {
        errors.insert(
            "clientId".into(),
            verr("validation_required", "Cannot be blank.", None),
        );
    } else if n > 255 {
        errors.insert(
            "clientId".into(),
            verr(
                "validation_length_out_of_range",
                "The length must be between 1 and 255.",
                Some(json!({"max": 255, "min": 1})),
            ),
        );
    }
    let max = state.realtime.config().max_subscriptions;
    if topics.len() > max {
        errors.insert(
            "subscriptions".into(),
            verr(
                "validation_length_too_long",
                &format!("The length must be no more than {max}."),
                Some(json!({"max": max, "min": 0})),
            ),
        );
    } else {
        let long: Map<String, Value> = topics
            .iter()
            .enumerate()
            .filter(|(_, t)| t.chars().count() > 2500)
            .map(|(i, _)| {
                (
                    i.to_string(),
                    verr(
                        "validation_length_too_long",
                        "The length must be no more than 2500.",
                        Some(json!({"max": 2500, "min": 0})),
                    ),
                )
            })
            .collect();
        if !long.is_empty() {
            errors.insert("subscriptions".into(), Value::Object(long));
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::with_data(
            StatusCode::BAD_REQUEST,
            super::error::MSG_BAD_REQUEST,
            errors,
        ));
    }
    let who = caller(&state, &head.headers).await;
    let ip = client_ip(&state.settings.peek(), &head.headers, &head.extensions);
    state
        .realtime
        .subscribe(&client_id, &ip, who, &topics)
        .map_err(|e| match e {
            SubscribeError::UnknownClient => {
                ApiError::new(StatusCode::NOT_FOUND, "Missing or invalid client id.")
            }
            SubscribeError::OtherAddress => ApiError::bad("Invalid realtime client."),
            SubscribeError::OtherAuth => ApiError::new(
                StatusCode::FORBIDDEN,
                "The current and the previous request authorization don't match.",
            ),
        })?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
