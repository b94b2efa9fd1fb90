//! `/_/`: the dashboard's files with PocketBase's headers (its security headers on every file,
//! its cache lifetime on hashed assets), gzipped when the client takes it.

use super::Shared;
use super::error::ApiError;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// What the dashboard may load: only its own origin (the API included), images also from
/// `data:` and `blob:` URLs (upload previews), no framing by other sites.
const CSP: &str = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; \
                   connect-src 'self'; script-src 'self'; frame-ancestors 'none'";

/// `GET /_`: PocketBase redirects to the folder.
pub(crate) async fn root() -> Response {
    (
        StatusCode::TEMPORARY_REDIRECT,
        [(header::LOCATION, HeaderValue::from_static("/_/"))],
    )
        .into_response()
}

/// `GET /_/`.
pub(crate) async fn index(state: State<Shared>, headers: HeaderMap) -> Response {
    serve(&state, &headers, "")
}

/// `GET /_/{*path}`.
pub(crate) async fn file(
    state: State<Shared>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    serve(&state, &headers, &path)
}

fn serve(state: &Shared, headers: &HeaderMap, path: &str) -> Response {
    let dir = &state.cfg.http.dashboard_dir;
    let dir = (!dir.as_os_str().is_empty()).then_some(dir.as_path());
    let Some(asset) = crate::dashboard::find(dir, path) else {
        return ApiError::new(StatusCode::NOT_FOUND, "File not found.").into_response();
    };
    let gzip = asset.gzip.filter(|_| accepts_gzip(headers));
    let mut response = match gzip {
        Some(gz) => (
            [(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"))],
            gz,
        )
            .into_response(),
        None => asset.body.into_response(),
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_FRAME_OPTIONS,
        HeaderValue::from_static("SAMEORIGIN"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    if asset.hashed {
        h.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=1209600, stale-while-revalidate=86400"),
        );
    } else {
        // index.html names the current assets: always asked again.
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    response
}

/// `Accept-Encoding` lists gzip without `q=0`.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            let refused = parts.any(|p| p.replace(' ', "") == "q=0");
            name.eq_ignore_ascii_case("gzip") && !refused
        })
}
