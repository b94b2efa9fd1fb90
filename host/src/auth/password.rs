//! bcrypt hashes in PocketBase's format (`$2a$`, cost 10 by default). Callers run these off the
//! async runtime: a hash costs tens of milliseconds of CPU.

use super::AuthError;

pub(crate) const DEFAULT_COST: u32 = 10;

pub(crate) fn hash(password: &str, cost: u32) -> Result<String, AuthError> {
    let cost = if cost == 0 { DEFAULT_COST } else { cost };
    bcrypt::hash_with_result(password, cost)
        .map(|h| h.format_for_version(bcrypt::Version::TwoA))
        .map_err(|e| AuthError::Hash(e.to_string()))
}

/// False for a wrong password and for anything that is not a bcrypt hash.
pub(crate) fn verify(password: &str, hash: &str) -> bool {
    !hash.is_empty() && bcrypt::verify(password, hash).unwrap_or(false)
}

/// Burn the same time as a real check, so a missing account is not told apart by timing.
pub(crate) fn dummy_verify(password: &str) {
    const DUMMY: &str = "$2a$10$zjbQpfCkZ1dBzMqhpEDEOu9jH5qeVFhfkxfxUYvt/RA0IfUzJYuvG";
    let _ = bcrypt::verify(password, DUMMY);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_2a_and_verify() {
        let h = hash("Secret-12345", 4).unwrap();
        assert!(h.starts_with("$2a$04$"), "{h}");
        assert!(verify("Secret-12345", &h));
        assert!(!verify("secret-12345", &h));
        assert!(!verify("x", ""));
    }

    #[test]
    fn a_pocketbase_hash_verifies() {
        // Written by PocketBase 0.40.6's `superuser upsert a@b.c secret123456`.
        let h = "$2a$10$.RaHFSNyqIaq0ROyZBsQ8eKz/Z7kW5KFV5SuPAuTrthsgHMidkt1i";
        assert!(verify("secret123456", h));
        assert!(!verify("secret1234567", h));
    }
}
