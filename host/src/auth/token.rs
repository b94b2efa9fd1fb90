//! PocketBase's tokens: HS256 JWTs signed with `record.tokenKey + collection.<type>.secret`.

use super::AuthError;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value, json};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The claims every token carries, read before the signature is checked (they say which record's
/// key to check it with).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Claims {
    pub id: String,
    pub collection_id: String,
    pub kind: String,
    /// Seconds since the epoch; None when unset.
    pub exp: Option<f64>,
    pub nbf: Option<f64>,
    pub iat: Option<f64>,
    pub refreshable: bool,
    pub all: Map<String, Value>,
}

fn sign_input(key: &str, input: &str) -> Vec<u8> {
    let mut mac =
        HmacSha256::new_from_slice(key.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(input.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// Issue a token. `extra` holds type-specific claims (`refreshable`, `email`, ...).
#[allow(
    clippy::too_many_arguments,
    reason = "each is one of the token's inputs; a struct would only rename them"
)]
pub(crate) fn sign(
    record_id: &str,
    collection_id: &str,
    kind: &str,
    duration_s: i64,
    extra: Map<String, Value>,
    token_key: &str,
    secret: &str,
    now_s: i64,
) -> String {
    // Claims are emitted with sorted keys, as PocketBase does.
    let mut claims = std::collections::BTreeMap::new();
    claims.insert("collectionId".to_owned(), json!(collection_id));
    claims.insert("exp".to_owned(), json!(now_s + duration_s));
    claims.insert("id".to_owned(), json!(record_id));
    claims.insert("type".to_owned(), json!(kind));
    for (k, v) in extra {
        claims.insert(k, v);
    }
    let header = B64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = B64.encode(serde_json::to_vec(&claims).expect("claims serialize"));
    let input = format!("{header}.{payload}");
    let sig = B64.encode(sign_input(&format!("{token_key}{secret}"), &input));
    format!("{input}.{sig}")
}

/// A token of type `kind` (`auth`, `verification`, `passwordReset`, `emailChange`, `file`) for
/// `row`, a record of the auth collection `c`, signed as PocketBase signs it: with the record's
/// `tokenKey` and the collection's `<kind>Token` secret, for that option's duration unless
/// `duration_s` is positive. None when the collection has no such secret.
pub(crate) fn for_record(
    c: &crate::schema::Collection,
    row: &[crate::schema::value::Stored],
    kind: &str,
    duration_s: i64,
    extra: Map<String, Value>,
    now_s: i64,
) -> Option<String> {
    let option = format!("{kind}Token");
    let secret = c.token_secret(&option)?;
    let duration = if duration_s > 0 {
        duration_s
    } else {
        c.token_duration(&option)
    };
    Some(sign(
        c.stored_text(row, "id"),
        &c.id,
        kind,
        duration,
        extra,
        c.stored_text(row, "tokenKey"),
        secret,
        now_s,
    ))
}

/// The claims of a token whatever its signature, as PocketBase's `ParseUnverifiedJWT` reads
/// them (an empty map for anything that is not a JWT).
pub(crate) fn unverified_claims(token: &str) -> Map<String, Value> {
    let mut parts = token.split('.');
    let (Some(_), Some(p), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Map::new();
    };
    B64.decode(p.trim_end_matches('='))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// Strip an optional, case-insensitive `Bearer ` prefix: one space, as PocketBase strips it
/// (`Bearer  TOKEN` leaves ` TOKEN`, which is no token).
pub(crate) fn from_header(value: &str) -> &str {
    let v = value.trim();
    match v.get(..7) {
        Some(p) if v.len() > 7 && p.eq_ignore_ascii_case("bearer ") => &v[7..],
        _ => v,
    }
}

/// A registered time claim (`exp`, `nbf`, `iat`) read as PocketBase's JWT library reads it:
/// absent or 0 means unset; any number is seconds (fractions kept); anything else (a string,
/// null, a bool) makes the token invalid. Seconds past the range of a 64-bit count wrap to
/// the far past, as Go's float-to-int conversion does on x86-64.
fn time_claim(payload: &Map<String, Value>, key: &str) -> Result<Option<f64>, AuthError> {
    match payload.get(key) {
        None => Ok(None),
        Some(Value::Number(n)) => {
            let f = n.as_f64().ok_or(AuthError::Malformed)?;
            if f == 0.0 {
                Ok(None)
            } else if f.abs() >= i64::MAX as f64 {
                Ok(Some(i64::MIN as f64))
            } else {
                Ok(Some(f))
            }
        }
        Some(_) => Err(AuthError::Malformed),
    }
}

/// Read the claims without checking the signature.
pub(crate) fn peek(token: &str) -> Result<Claims, AuthError> {
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(AuthError::Malformed);
    };
    let header: Value = serde_json::from_slice(&B64.decode(h).map_err(|_| AuthError::Malformed)?)
        .map_err(|_| AuthError::Malformed)?;
    if header.get("alg").and_then(Value::as_str) != Some("HS256") {
        return Err(AuthError::Malformed);
    }
    let payload: Map<String, Value> =
        serde_json::from_slice(&B64.decode(p).map_err(|_| AuthError::Malformed)?)
            .map_err(|_| AuthError::Malformed)?;
    let s = |k: &str| {
        payload
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let claims = Claims {
        id: s("id"),
        collection_id: s("collectionId"),
        kind: s("type"),
        exp: time_claim(&payload, "exp")?,
        nbf: time_claim(&payload, "nbf")?,
        iat: time_claim(&payload, "iat")?,
        refreshable: payload
            .get("refreshable")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        all: payload,
    };
    if claims.id.is_empty() || claims.collection_id.is_empty() || claims.kind.is_empty() {
        return Err(AuthError::Malformed);
    }
    Ok(claims)
}

/// Check the signature with `tokenKey + secret`, then the time claims as PocketBase does: valid
/// only before `exp`, and not before `nbf` or `iat` (each only when set; no leeway).
/// `now_s`: seconds since the epoch, fractions included.
pub(crate) fn verify(
    token: &str,
    token_key: &str,
    secret: &str,
    now_s: f64,
) -> Result<Claims, AuthError> {
    let claims = peek(token)?;
    let (input, sig) = token.rsplit_once('.').ok_or(AuthError::Malformed)?;
    let sig = B64.decode(sig).map_err(|_| AuthError::Malformed)?;
    let mut mac = HmacSha256::new_from_slice(format!("{token_key}{secret}").as_bytes())
        .expect("any key length");
    mac.update(input.as_bytes());
    mac.verify_slice(&sig)
        .map_err(|_| AuthError::BadSignature)?;
    if claims.exp.is_some_and(|exp| now_s >= exp) {
        return Err(AuthError::Expired);
    }
    if claims.nbf.is_some_and(|t| now_s < t) || claims.iat.is_some_and(|t| now_s < t) {
        return Err(AuthError::NotYetValid);
    }
    Ok(claims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refreshable() -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("refreshable".into(), json!(true));
        m
    }

    #[test]
    fn a_signed_token_verifies_and_carries_pocketbase_claims() {
        let t = sign(
            "rec",
            "pbc_1",
            "auth",
            60,
            refreshable(),
            "key",
            "secret",
            1000,
        );
        let c = verify(&t, "key", "secret", 1000.0).unwrap();
        assert_eq!(
            (c.id.as_str(), c.collection_id.as_str(), c.kind.as_str()),
            ("rec", "pbc_1", "auth")
        );
        assert_eq!(c.exp, Some(1060.0));
        assert!(c.refreshable);
        let payload = String::from_utf8(B64.decode(t.split('.').nth(1).unwrap()).unwrap()).unwrap();
        assert_eq!(
            payload,
            r#"{"collectionId":"pbc_1","exp":1060,"id":"rec","refreshable":true,"type":"auth"}"#
        );
    }

    #[test]
    fn a_changed_token_key_or_secret_invalidates_the_token() {
        let t = sign(
            "rec",
            "pbc_1",
            "auth",
            60,
            refreshable(),
            "key",
            "secret",
            1000,
        );
        assert!(matches!(
            verify(&t, "key2", "secret", 1000.0),
            Err(AuthError::BadSignature)
        ));
        assert!(matches!(
            verify(&t, "key", "other", 1000.0),
            Err(AuthError::BadSignature)
        ));
    }

    #[test]
    fn expired_tokens_are_refused() {
        let t = sign("rec", "pbc_1", "auth", 60, Map::new(), "k", "s", 1000);
        assert!(matches!(
            verify(&t, "k", "s", 1061.0),
            Err(AuthError::Expired)
        ));
    }

    #[test]
    fn a_token_made_by_pocketbase_verifies() {
        // Captured from PocketBase 0.40.6 (see the API notes §5.1); key material recomputed here
        // would need the record's tokenKey, so only the claims are checked.
        let t = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJjb2xsZWN0aW9uSWQiOiJwYmNfMjYyMDQyODk1OCIsImV4cCI6MTc5NjQ3MDA2MiwiaWQiOiJ5NDRjZ3ZrZzk0dWRlYTIiLCJyZWZyZXNoYWJsZSI6dHJ1ZSwidHlwZSI6ImF1dGgifQ.dVDFBl_p1PDFY8vyWLx83OMJmrR_xirSB_F-1vSD9FI";
        let c = peek(t).unwrap();
        assert_eq!(c.collection_id, "pbc_2620428958");
        assert_eq!(c.id, "y44cgvkg94udea2");
        assert!(c.refreshable);
    }

    /// A token with `claims` as its payload, signed with key "k" + secret "s".
    fn with_claims(claims: Value) -> String {
        let header = B64.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let input = format!("{header}.{}", B64.encode(claims.to_string()));
        format!("{input}.{}", B64.encode(sign_input("ks", &input)))
    }

    fn accepted(extra: Value, now: f64) -> bool {
        let mut c = json!({"id": "rec", "collectionId": "pbc_1", "type": "auth"});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        verify(&with_claims(c), "k", "s", now).is_ok()
    }

    #[test]
    fn time_claims_are_checked_as_pocketbase_checks_them() {
        let now = 1_000_000.5;
        // exp: a number strictly after now; 0 means unset; a string, null or bool is invalid.
        assert!(accepted(json!({"exp": 1_000_001}), now));
        assert!(accepted(json!({"exp": 1_000_000.75}), now));
        assert!(!accepted(json!({"exp": 1_000_000}), now));
        assert!(accepted(json!({"exp": 0}), now));
        assert!(!accepted(json!({"exp": "1000001"}), now));
        assert!(!accepted(json!({"exp": null}), now));
        assert!(!accepted(json!({"exp": true}), now));
        assert!(!accepted(json!({"exp": 1e19}), now));
        assert!(accepted(json!({"exp": 1e18}), now));
        // nbf and iat: not in the future, no leeway.
        assert!(!accepted(json!({"nbf": 1_000_001}), now));
        assert!(!accepted(json!({"iat": 1_000_001}), now));
        assert!(accepted(json!({"nbf": 1_000_000, "iat": 999_999}), now));
        assert!(!accepted(json!({"iat": "1"}), now));
        assert!(!accepted(json!({"nbf": null}), now));
        assert!(accepted(json!({"iat": 0, "nbf": -1}), now));
    }

    #[test]
    fn garbage_and_other_algorithms_are_malformed() {
        assert!(peek("nope").is_err());
        assert!(peek("a.b.c").is_err());
        let none_alg = format!(
            "{}.{}.",
            B64.encode(br#"{"alg":"none"}"#),
            B64.encode(br#"{"id":"a","collectionId":"b","type":"auth"}"#)
        );
        assert!(peek(&none_alg).is_err());
        assert_eq!(from_header("Bearer abc"), "abc");
        assert_eq!(from_header("bearer abc"), "abc");
        assert_eq!(from_header("BEARER abc"), "abc");
        assert_eq!(from_header("abc"), "abc");
        // One space only, as PocketBase strips the prefix: the rest is not a token.
        assert_eq!(from_header("Bearer  abc"), " abc");
        assert_eq!(from_header("Bearer\tabc"), "Bearer\tabc");
    }
}
