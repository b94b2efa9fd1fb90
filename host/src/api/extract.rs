//! Extractors handlers share: a superuser, refused before the handler runs (PocketBase's 401
//! without a token, 403 with one that is not a superuser's).

use super::error::ApiError;
use super::{Shared, caller};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;

/// A superuser, or the request is refused before the handler runs.
pub(crate) struct Superuser;

impl FromRequestParts<Shared> for Superuser {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Shared) -> Result<Self, ApiError> {
        superuser_only(state, &parts.headers)
            .await
            .map(|()| Superuser)
    }
}

/// PocketBase's answer to a request that only superusers may make: 401 without a token, 403
/// with one that is not a superuser's. For handlers that must read the body before refusing.
pub(crate) async fn superuser_only(
    state: &Shared,
    headers: &axum::http::HeaderMap,
) -> Result<(), ApiError> {
    match caller(state, headers).await {
        None => Err(ApiError::requires_auth()),
        Some(c) if !c.is_superuser() => Err(ApiError::forbidden_record()),
        Some(_) => Ok(()),
    }
}
