//! Owns caller identity and the auth flows' logic: tokens, password hashing, one-time codes,
//! attempt limits, mail templates and outgoing mail, OAuth2 providers (their outbound calls
//! through `oauth2::client`). No server HTTP types.

pub(crate) mod limits;
pub(crate) mod mail;
pub(crate) mod oauth2;
pub(crate) mod password;
pub(crate) mod templates;
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

/// A one-time password as PocketBase makes one: `len` random decimal digits.
pub(crate) fn otp_code(len: usize) -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..len.max(1))
        .map(|_| char::from(b'0' + rng.random_range(0..10u8)))
        .collect()
}

/// Whether a session created at `created` (PocketBase's stored date text) is more than
/// `duration_s` seconds old at `now` (an unreadable date counts as expired).
pub(crate) fn has_expired(
    created: &str,
    duration_s: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    let Ok(t) = chrono::NaiveDateTime::parse_from_str(created, "%Y-%m-%d %H:%M:%S%.fZ") else {
        return true;
    };
    now.signed_duration_since(t.and_utc()) > chrono::Duration::seconds(duration_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otp_codes_are_digits_of_the_asked_length() {
        let c = otp_code(8);
        assert_eq!(c.len(), 8);
        assert!(c.bytes().all(|b| b.is_ascii_digit()));
    }

    #[test]
    fn sessions_expire_after_their_duration() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-01-01T10:03:00Z")
            .unwrap()
            .to_utc();
        assert!(!has_expired("2026-01-01 10:00:00.000Z", 180, now));
        assert!(has_expired("2026-01-01 09:59:59.999Z", 180, now));
        assert!(has_expired("garbage", 180, now));
    }
}
