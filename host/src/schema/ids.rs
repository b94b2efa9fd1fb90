//! Identifiers and timestamps in PocketBase's formats.

use rand::Rng;

const LOWER_ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";

fn random_from(alphabet: &[u8], len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect()
}

/// A record id: 15 chars of [a-z0-9].
pub(crate) fn record_id() -> String {
    random_from(LOWER_ALNUM, 15)
}

/// A token key or token secret: `len` chars of [A-Za-z0-9].
pub(crate) fn secret(len: usize) -> String {
    random_from(ALNUM, len)
}

/// Lowercase alphanumerics, used for file name suffixes and similar.
pub(crate) fn lower_alnum(len: usize) -> String {
    random_from(LOWER_ALNUM, len)
}

/// `pbc_` + crc32(type + name): PocketBase's collection id.
pub(crate) fn collection_id(kind: &str, name: &str) -> String {
    format!(
        "pbc_{}",
        crc32fast::hash(format!("{kind}{name}").as_bytes())
    )
}

/// `<type><crc32(name)>`: PocketBase's field id.
pub(crate) fn field_id(kind: &str, name: &str) -> String {
    format!("{kind}{}", crc32fast::hash(name.as_bytes()))
}

/// The current time as PocketBase stores it: `2024-01-02 03:04:05.678Z`.
pub(crate) fn now() -> String {
    format_time(chrono::Utc::now())
}

pub(crate) fn format_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collection_ids_match_pocketbase() {
        assert_eq!(collection_id("auth", "_superusers"), "pbc_3142635823");
        assert_eq!(collection_id("base", "categories"), "pbc_3292755704");
    }

    #[test]
    fn field_ids_match_pocketbase() {
        assert_eq!(field_id("text", "id"), "text3208210256");
        assert_eq!(field_id("autodate", "created"), "autodate2990389176");
        assert_eq!(field_id("password", "password"), "password901924565");
    }

    #[test]
    fn record_ids_have_the_pocketbase_shape() {
        let id = record_id();
        assert_eq!(id.len(), 15);
        assert!(
            id.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
    }

    #[test]
    fn timestamps_have_millisecond_precision_and_z() {
        let s = now();
        assert_eq!(s.len(), 24, "{s}");
        assert_eq!(&s[10..11], " ");
        assert!(s.ends_with('Z'));
    }
}
