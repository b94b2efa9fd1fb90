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

/// Ids of the same format as [`record_id`] (15 chars of [a-z0-9]) that ascend: 9 base-36
/// digits of a millisecond time, 3 of a sequence within it, 3 random characters. Rows keyed by
/// them are appended at the end of their primary key's index, where random ids would dirty a
/// page of it per row.
#[derive(Default)]
pub(crate) struct Ascending {
    last_ms: i64,
    seq: u32,
}

impl Ascending {
    const SEQ_MAX: u32 = 36 * 36 * 36;

    /// The next id, for something that happened at `ms` (milliseconds since the epoch; a time
    /// before the last one given counts as the last one).
    pub(crate) fn next(&mut self, ms: i64) -> String {
        if ms > self.last_ms {
            self.last_ms = ms;
            self.seq = 0;
        } else if self.seq + 1 < Self::SEQ_MAX {
            self.seq += 1;
        } else {
            self.last_ms += 1;
            self.seq = 0;
        }
        let mut id = [0u8; 15];
        let mut put = |at: std::ops::Range<usize>, mut n: u64| {
            for i in at.rev() {
                id[i] = DIGITS36[(n % 36) as usize];
                n /= 36;
            }
        };
        put(0..9, u64::try_from(self.last_ms).unwrap_or(0));
        put(9..12, u64::from(self.seq));
        let mut rng = rand::rng();
        for b in &mut id[12..] {
            *b = LOWER_ALNUM[rng.random_range(0..LOWER_ALNUM.len())];
        }
        id.iter().map(|&b| b as char).collect()
    }
}

/// Base-36 digits in ascending order (so that ids compare as their numbers do).
const DIGITS36: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";

/// A random string matching `pattern` (a text field's `autogeneratePattern`), as PocketBase
/// generates one: literals as they are, one random member per class, a random count within
/// each repetition (unbounded ones capped at 10 more than their minimum), one random branch of
/// an alternation. None when the pattern does not parse.
pub(crate) fn from_pattern(pattern: &str) -> Option<String> {
    use regex_syntax::hir::{Class, Hir, HirKind};
    fn walk(h: &Hir, rng: &mut impl Rng, out: &mut String) {
        match h.kind() {
            HirKind::Empty | HirKind::Look(_) => {}
            HirKind::Literal(l) => out.push_str(&String::from_utf8_lossy(&l.0)),
            HirKind::Class(Class::Unicode(c)) => {
                let total: u32 = c.ranges().iter().map(|r| r.len() as u32).sum();
                if total == 0 {
                    return;
                }
                let mut k = rng.random_range(0..total);
                for r in c.ranges() {
                    let n = r.len() as u32;
                    if k < n {
                        if let Some(ch) = char::from_u32(u32::from(r.start()) + k) {
                            out.push(ch);
                        }
                        return;
                    }
                    k -= n;
                }
            }
            HirKind::Class(Class::Bytes(c)) => {
                let all: Vec<u8> = c
                    .ranges()
                    .iter()
                    .flat_map(|r| r.start()..=r.end())
                    .collect();
                if !all.is_empty() {
                    out.push(all[rng.random_range(0..all.len())] as char);
                }
            }
            HirKind::Repetition(r) => {
                let max = r.max.unwrap_or(r.min.saturating_add(10));
                for _ in 0..rng.random_range(r.min..=max.max(r.min)) {
                    walk(&r.sub, rng, out);
                }
            }
            HirKind::Capture(c) => walk(&c.sub, rng, out),
            HirKind::Concat(hs) => hs.iter().for_each(|h| walk(h, rng, out)),
            HirKind::Alternation(hs) => walk(&hs[rng.random_range(0..hs.len())], rng, out),
        }
    }
    if pattern == "[a-z0-9]{15}" {
        // Every record id's pattern: no parse on the create path.
        return Some(record_id());
    }
    let hir = regex_syntax::parse(pattern).ok()?;
    let mut out = String::new();
    walk(&hir, &mut rand::rng(), &mut out);
    Some(out)
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

/// PocketBase's datetime text, `2006-01-02 15:04:05.000Z` (written out by hand: chrono's
/// format string is parsed again on every call, and every write stamps two of these).
pub(crate) fn format_time(t: chrono::DateTime<chrono::Utc>) -> String {
    use chrono::{Datelike, Timelike};
    use std::fmt::Write as _;
    let year = t.year();
    if !(0..=9999).contains(&year) {
        return t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string();
    }
    let mut s = String::with_capacity(24);
    let _ = write!(
        s,
        "{year:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:03}Z",
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        // A leap second's nanoseconds run past 999,999,999; chrono's %.3f shows them the same.
        (t.nanosecond() / 1_000_000) % 1000
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascending_ids_have_the_record_id_format_and_ascend() {
        let mut ids = Ascending::default();
        let ms = 1_764_800_000_000;
        // The same millisecond, an earlier one, then past the sequence's end.
        let mut all: Vec<String> = (0..5).map(|_| ids.next(ms)).collect();
        all.push(ids.next(ms - 10));
        all.extend((0..Ascending::SEQ_MAX).map(|_| ids.next(ms)));
        all.push(ids.next(ms + 5));
        for w in all.windows(2) {
            assert!(w[0] < w[1], "{} then {}", w[0], w[1]);
        }
        for id in &all {
            assert!(
                id.len() == 15 && id.bytes().all(|b| LOWER_ALNUM.contains(&b)),
                "{id}"
            );
        }
        assert_eq!(&all[0][..9], "0miqkcr28");
    }

    #[test]
    fn times_are_written_as_chronos_format_writes_them() {
        use chrono::TimeZone;
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let secs = (seed % 400_000_000_000) as i64 - 62_000_000_000;
            let nanos = ((seed >> 20) % 1_000_000_000) as u32;
            let t = chrono::Utc.timestamp_opt(secs, nanos).unwrap();
            assert_eq!(
                format_time(t),
                t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string(),
                "{secs} {nanos}"
            );
        }
    }

    #[test]
    fn generated_values_match_their_pattern() {
        for p in [
            "[a-z0-9]{15}",
            "[0-9]{6}",
            "x[a-c]{3}-(ab|cd)",
            "[A-Z]+_?\\d{2,4}",
        ] {
            let re = regex::Regex::new(&format!("^(?:{p})$")).unwrap();
            for _ in 0..50 {
                let v = from_pattern(p).unwrap();
                assert!(re.is_match(&v), "{v:?} does not match {p}");
            }
        }
        assert_eq!(from_pattern("(unclosed"), None);
    }

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
