//! `/api/realtime`: the SSE stream (`GET`) and the subscriptions of a client (`POST`), framed as
//! the official SDKs read them: `id:<clientId>\nevent:<name>\ndata:<json>\n\n`, the first
//! message `PB_CONNECT`. What a client may see is the `realtime` area's business.

use super::body;
use super::error::{ApiError, ApiResult};
use super::{Shared, caller, client_ip};
use crate::realtime::{Message, Messages, Registration, SubscribeError};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use hyper::body::Frame;
use serde_json::{Map, Value, json};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// One SSE message appended to `out`. The `id` is always the client's id: the JS SDK reads its
/// client id there.
fn frame(out: &mut Vec<u8>, client_id: &str, name: &str, data: &[u8]) {
    out.extend_from_slice(b"id:");
    out.extend_from_slice(client_id.as_bytes());
    out.extend_from_slice(b"\nevent:");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata:");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
}

fn framed_len(client_id: &str, name: &str, data: &[u8]) -> usize {
    client_id.len() + name.len() + data.len() + 20
}

/// A stream's body: its queue, its place in the hub (dropped with the stream), its clocks.
///
/// A body of its own rather than a stream adapter with a timeout per message: the idle timer
/// is armed once per idle period (re-armed when it fires early, from the last message's time),
/// not registered and cancelled in the timer wheel for every message; and all the messages
/// queued when the stream wakes go out as one chunk (one socket write).
struct Stream {
    client_id: Arc<str>,
    messages: Messages,
    _registration: Registration,
    first: Option<Bytes>,
    idle: Duration,
    ends: Instant,
    last: Instant,
    timer: Pin<Box<Sleep>>,
    taken: Vec<Message>,
}

impl hyper::body::Body for Stream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let st = self.get_mut();
        if let Some(first) = st.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        match st.messages.poll_take(cx, &mut st.taken) {
            Poll::Ready(true) => {
                st.last = Instant::now();
                let n: usize = st
                    .taken
                    .iter()
                    .map(|m| framed_len(&st.client_id, &m.name, &m.data))
                    .sum();
                let mut out = Vec::with_capacity(n);
                for m in st.taken.drain(..) {
                    frame(&mut out, &st.client_id, &m.name, &m.data);
                }
                if st.taken.capacity() > 8 {
                    st.taken = Vec::new();
                }
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
            }
            // The hub dropped the client (its queue overflowed, the server stops).
            Poll::Ready(false) => return Poll::Ready(None),
            Poll::Pending => {}
        }
        // The stream ends after `idle` without a message, or at its maximum age.
        while st.timer.as_mut().poll(cx).is_ready() {
            let due = (st.last + st.idle).min(st.ends);
            if Instant::now() >= due {
                return Poll::Ready(None);
            }
            st.timer.as_mut().reset(due);
        }
        Poll::Pending
    }
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
    let mut first = Vec::with_capacity(framed_len(&id, "PB_CONNECT", hello.as_bytes()));
    frame(&mut first, &id, "PB_CONNECT", hello.as_bytes());
    let now = Instant::now();
    let idle = Duration::from_millis(cfg.idle_timeout_ms);
    let ends = now + Duration::from_millis(cfg.max_age_ms);
    // The stream ends when the client is dropped by the hub (its queue overflowed, the server
    // stops), after `idle` without a message, or at its maximum age; the SDK reconnects.
    let st = Stream {
        first: Some(Bytes::from(first)),
        client_id: id,
        messages: conn.messages,
        _registration: conn.registration,
        idle,
        ends,
        last: now,
        timer: Box::pin(tokio::time::sleep_until((now + idle).min(ends))),
        taken: Vec::new(),
    };
    let mut res = (StatusCode::OK, Body::new(st)).into_response();
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
    let parsed = body::parse_struct(
        &head.headers,
        head.uri.query(),
        body,
        state.cfg.http.body_bytes_max,
    )
    .await
    .map_err(|e| match e {
        body::BindError::TooLarge => ApiError::too_large(),
        _ => ApiError::bad_request(),
    })?;
    // A form binds as Go binds it into the subscribe form's struct: `clientId` its first value,
    // `subscriptions` all of its values.
    let data = match parsed.form {
        Some(form) => form.into_struct(&["clientId"], &["subscriptions"]),
        None => parsed.data,
    };
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
