//! Owns the OpenID Connect ID token checks: its claims read, the common claims validated as
//! PocketBase validates them (exp, nbf, iat with a leeway, the audience, the allowed issuers),
//! and its RS256 signature verified against a JSON Web Key Set (ring). Pure: the caller fetches
//! the key set.

use base64::Engine;
use serde_json::{Map, Value};

/// PocketBase's default leeway for the ID token's time claims (`PB_ID_TOKEN_LEEWAY`).
pub(crate) const LEEWAY_S: i64 = 5 * 60;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum IdTokenError {
    #[error("empty id_token")]
    Missing,
    #[error("malformed id_token")]
    Malformed,
    #[error("token is expired")]
    Expired,
    #[error("token is not valid yet")]
    NotYetValid,
    #[error("token used before issued")]
    UsedBeforeIssued,
    #[error("token has invalid audience")]
    Audience,
    #[error("token has invalid issuer")]
    Issuer,
    #[error("unsupported id_token algorithm {0:?}")]
    Algorithm(String),
    #[error("no matching key in the key set")]
    NoKey,
    #[error("invalid id_token signature")]
    Signature,
}

fn b64(part: &str) -> Result<Vec<u8>, IdTokenError> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .map_err(|_| IdTokenError::Malformed)
}

fn object(bytes: &[u8]) -> Result<Map<String, Value>, IdTokenError> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(IdTokenError::Malformed),
    }
}

/// The token's three parts: header, claims, and the signed input with its signature.
struct Parts<'a> {
    header: Map<String, Value>,
    claims: Map<String, Value>,
    signed: &'a str,
    signature: Vec<u8>,
}

fn split(token: &str) -> Result<Parts<'_>, IdTokenError> {
    if token.is_empty() {
        return Err(IdTokenError::Missing);
    }
    let mut it = token.split('.');
    let (Some(h), Some(c), Some(s), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return Err(IdTokenError::Malformed);
    };
    Ok(Parts {
        header: object(&b64(h)?)?,
        claims: object(&b64(c)?)?,
        signed: &token[..h.len() + 1 + c.len()],
        signature: b64(s)?,
    })
}

/// The token's claims, unverified.
pub(crate) fn claims(token: &str) -> Result<Map<String, Value>, IdTokenError> {
    Ok(split(token)?.claims)
}

fn num(claims: &Map<String, Value>, key: &str) -> Option<f64> {
    claims.get(key).and_then(Value::as_f64)
}

/// The common claims as PocketBase checks them (`exp`, `nbf`, `iat` within the leeway; `aud`
/// naming `audience` when one is given; `iss` one of `issuers` when any are given).
pub(crate) fn check_claims(
    claims: &Map<String, Value>,
    audience: Option<&str>,
    issuers: &[String],
    now_s: i64,
) -> Result<(), IdTokenError> {
    let now = now_s as f64;
    let leeway = LEEWAY_S as f64;
    if num(claims, "exp").is_some_and(|exp| now - leeway >= exp) {
        return Err(IdTokenError::Expired);
    }
    if num(claims, "nbf").is_some_and(|nbf| now + leeway < nbf) {
        return Err(IdTokenError::NotYetValid);
    }
    if num(claims, "iat").is_some_and(|iat| now + leeway < iat) {
        return Err(IdTokenError::UsedBeforeIssued);
    }
    if let Some(want) = audience {
        let ok = match claims.get("aud") {
            Some(Value::String(a)) => a == want,
            Some(Value::Array(a)) => a.iter().any(|v| v.as_str() == Some(want)),
            _ => false,
        };
        if !ok {
            return Err(IdTokenError::Audience);
        }
    }
    if !issuers.is_empty() {
        let iss = claims.get("iss").and_then(Value::as_str).unwrap_or("");
        if !issuers.iter().any(|i| i == iss) {
            return Err(IdTokenError::Issuer);
        }
    }
    Ok(())
}

/// Verify the token's RS256 signature with the key of `jwks` its `kid` names (the only RSA
/// key when it names none).
pub(crate) fn verify_signature(token: &str, jwks: &Value) -> Result<(), IdTokenError> {
    let parts = split(token)?;
    let alg = parts
        .header
        .get("alg")
        .and_then(Value::as_str)
        .unwrap_or("");
    if alg != "RS256" {
        return Err(IdTokenError::Algorithm(alg.to_owned()));
    }
    let kid = parts.header.get("kid").and_then(Value::as_str);
    let keys: Vec<&Map<String, Value>> = jwks
        .get("keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default();
    let rsa: Vec<&&Map<String, Value>> = keys
        .iter()
        .filter(|k| k.get("kty").and_then(Value::as_str) == Some("RSA"))
        .filter(|k| {
            k.get("alg")
                .and_then(Value::as_str)
                .is_none_or(|a| a == "RS256")
        })
        .collect();
    let key = match kid {
        Some(kid) => rsa
            .iter()
            .find(|k| k.get("kid").and_then(Value::as_str) == Some(kid)),
        None if rsa.len() == 1 => rsa.first(),
        None => None,
    }
    .ok_or(IdTokenError::NoKey)?;
    let part = |name: &str| -> Result<Vec<u8>, IdTokenError> {
        b64(key
            .get(name)
            .and_then(Value::as_str)
            .ok_or(IdTokenError::NoKey)?)
    };
    let (n, e) = (part("n")?, part("e")?);
    ring::signature::RsaPublicKeyComponents { n: &n, e: &e }
        .verify(
            &ring::signature::RSA_PKCS1_2048_8192_SHA256,
            parts.signed.as_bytes(),
            &parts.signature,
        )
        .map_err(|_| IdTokenError::Signature)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn token(header: Value, claims: Value) -> String {
        let e = |v: &Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string().as_bytes())
        };
        format!("{}.{}.c2ln", e(&header), e(&claims))
    }

    fn check(claims: Value, audience: Option<&str>, issuers: &[&str]) -> Result<(), IdTokenError> {
        let issuers: Vec<String> = issuers.iter().map(|s| s.to_string()).collect();
        let t = token(json!({"alg": "RS256"}), claims);
        check_claims(&super::claims(&t)?, audience, &issuers, 1_000_000)
    }

    #[test]
    fn claims_are_checked_as_pocketbase_checks_them() {
        assert_eq!(check(json!({"aud": "app"}), Some("app"), &[]), Ok(()));
        assert_eq!(
            check(json!({"aud": ["x", "app"]}), Some("app"), &[]),
            Ok(())
        );
        assert_eq!(
            check(json!({"aud": "other"}), Some("app"), &[]),
            Err(IdTokenError::Audience)
        );
        assert_eq!(
            check(json!({}), Some("app"), &[]),
            Err(IdTokenError::Audience)
        );
        assert_eq!(
            check(json!({"exp": 1_000_000 - LEEWAY_S - 1}), None, &[]),
            Err(IdTokenError::Expired)
        );
        assert_eq!(
            check(json!({"exp": 1_000_000 - LEEWAY_S + 10}), None, &[]),
            Ok(())
        );
        assert_eq!(
            check(json!({"iat": 1_000_000 + LEEWAY_S + 1}), None, &[]),
            Err(IdTokenError::UsedBeforeIssued)
        );
        assert_eq!(
            check(json!({"nbf": 1_000_000 + LEEWAY_S + 1}), None, &[]),
            Err(IdTokenError::NotYetValid)
        );
        assert_eq!(
            check(json!({"iss": "https://a"}), None, &["https://b"]),
            Err(IdTokenError::Issuer)
        );
        assert_eq!(
            check(json!({"iss": "https://b"}), None, &["https://b"]),
            Ok(())
        );
    }

    #[test]
    fn only_rs256_with_a_known_key_is_accepted() {
        let jwks = json!({"keys": [{"kty": "RSA", "kid": "k1", "n": "AQAB", "e": "AQAB"}]});
        let none = token(json!({"alg": "none"}), json!({}));
        assert_eq!(
            verify_signature(&none, &jwks),
            Err(IdTokenError::Algorithm("none".into()))
        );
        let hs = token(json!({"alg": "HS256", "kid": "k1"}), json!({}));
        assert_eq!(
            verify_signature(&hs, &jwks),
            Err(IdTokenError::Algorithm("HS256".into()))
        );
        let other = token(json!({"alg": "RS256", "kid": "k2"}), json!({}));
        assert_eq!(verify_signature(&other, &jwks), Err(IdTokenError::NoKey));
        let forged = token(json!({"alg": "RS256", "kid": "k1"}), json!({}));
        assert_eq!(
            verify_signature(&forged, &jwks),
            Err(IdTokenError::Signature)
        );
        assert_eq!(verify_signature("", &jwks), Err(IdTokenError::Missing));
        assert_eq!(verify_signature("a.b", &jwks), Err(IdTokenError::Malformed));
    }
}
