//! Owns caller identity: tokens, password hashing. No HTTP types.

pub(crate) mod password;
pub(crate) mod token;

#[derive(Debug, thiserror::Error)]
pub(crate) enum AuthError {
    #[error("malformed token")]
    Malformed,
    #[error("bad signature")]
    BadSignature,
    #[error("expired token")]
    Expired,
    /// `nbf` or `iat` lies in the future.
    #[error("token not valid yet")]
    NotYetValid,
    #[error("password hashing: {0}")]
    Hash(String),
}
