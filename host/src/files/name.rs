//! PocketBase's stored file names: a sanitized snake_case base, `_` and ten random characters,
//! and the original (double) extension cleaned of unsafe characters. Pure apart from the random
//! part; a stored name never holds a path separator, a NUL or a leading dot.

use rand::Rng;

/// The alphabet of the random parts (PocketBase's: lowercase letters and digits).
const RANDOM_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
/// How many bytes of a very long original name are looked at (its tail), as PocketBase cuts it.
const ORIGINAL_BYTES_MAX: usize = 300;
/// The longest kept base, in bytes (after snake-casing, so ASCII).
const BASE_BYTES_MAX: usize = 100;
/// The shortest base kept as it is; a shorter one gets another random part.
const BASE_BYTES_MIN: usize = 3;
/// The longest extension, in bytes, its leading dot included.
const EXT_BYTES_MAX: usize = 20;

/// The name a file is stored under. `original` is the client's file name (already reduced to
/// its last path segment by the multipart reader); `detected_ext` is the extension the content
/// suggests (with its dot, or empty), used only when the name has none.
pub(crate) fn stored_name(original: &str, detected_ext: &str) -> String {
    stored_name_with(original, detected_ext, &mut rand::rng())
}

pub(crate) fn stored_name_with(original: &str, detected_ext: &str, rng: &mut impl Rng) -> String {
    // PocketBase cuts bytes, not characters: the cut may split a UTF-8 sequence, which only
    // matters to the base, where any non-ASCII byte is a separator anyway.
    let mut name = original.as_bytes();
    if name.len() > ORIGINAL_BYTES_MAX {
        name = &name[name.len() - ORIGINAL_BYTES_MAX..];
    }
    let original_ext = extension(name);

    let mut ext: Vec<u8> = original_ext
        .iter()
        .copied()
        .filter(|&b| b.is_ascii_alphanumeric() || b"_.*-+=#".contains(&b))
        .collect();
    let mut clean_ext = dotted(trim_dots(&ext));
    if clean_ext == b"." {
        ext = detected_ext.as_bytes().to_vec();
        clean_ext = ext;
    }
    if clean_ext.len() > EXT_BYTES_MAX {
        clean_ext = dotted(trim_dots(&clean_ext[clean_ext.len() - EXT_BYTES_MAX..]));
    }

    let stem = &name[..name.len() - original_ext.len()];
    let mut base = snakecase(trim_dots(stem));
    if base.len() < BASE_BYTES_MIN {
        push_random(&mut base, rng);
    } else {
        base.truncate(BASE_BYTES_MAX);
    }
    base.push(b'_');
    push_random(&mut base, rng);
    base.extend_from_slice(&clean_ext);
    // Every byte kept is ASCII: the base is [a-z0-9_], the extension [A-Za-z0-9_.*+=#-], and
    // a detected extension is one of `sniff`'s literals.
    String::from_utf8(base).unwrap_or_default()
}

/// The extension with its dot, a double one included (`.tar.gz`), as PocketBase reads it.
fn extension(name: &[u8]) -> &[u8] {
    let Some(primary) = name.iter().rposition(|&b| b == b'.') else {
        return &[];
    };
    match name[..primary].iter().rposition(|&b| b == b'.') {
        Some(secondary) => &name[secondary..],
        None => &name[primary..],
    }
}

fn trim_dots(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|&c| c != b'.').unwrap_or(b.len());
    let end = b.iter().rposition(|&c| c != b'.').map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

fn dotted(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len() + 1);
    out.push(b'.');
    out.extend_from_slice(b);
    out
}

/// PocketBase's snake case: split at every byte that is not an ASCII letter or digit (Go's
/// `\W` and `_`), join the words with `_`, put a `_` before an uppercase letter that follows a
/// non-uppercase one inside a word, lowercase the lot.
pub(crate) fn snake_case(s: &str) -> String {
    String::from_utf8(snakecase(s.as_bytes())).unwrap_or_default()
}

fn snakecase(s: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len());
    for word in s.split(|b| !b.is_ascii_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push(b'_');
        }
        for (i, &c) in word.iter().enumerate() {
            if c.is_ascii_uppercase() && i > 0 && !word[i - 1].is_ascii_uppercase() {
                out.push(b'_');
            }
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

fn push_random(out: &mut Vec<u8>, rng: &mut impl Rng) {
    for _ in 0..10 {
        out.push(RANDOM_ALPHABET[rng.random_range(0..RANDOM_ALPHABET.len())]);
    }
}

/// Whether `name` can only name a file directly inside a record's folder: one non-empty
/// segment, no separator, no NUL, not `.` or `..`, not a sidecar. Every stored name passes;
/// a name from a URL or a record row is checked with this before it meets the disk.
pub(crate) fn is_plain(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.ends_with(super::ATTRS_EXT)
        && !name.bytes().any(|b| b == b'/' || b == b'\\' || b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn shape(original: &str) -> String {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let got = stored_name_with(original, "", &mut rng);
        // Mask the random parts so the expectations read as PocketBase's documented examples.
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let mut r = Vec::new();
        push_random(&mut r, &mut rng);
        let first = String::from_utf8(r).unwrap();
        let mut r2 = Vec::new();
        push_random(&mut r2, &mut rng);
        let second = String::from_utf8(r2).unwrap();
        got.replacen(&first, "R", 1).replacen(&second, "R", 1)
    }

    #[test]
    fn names_follow_pocketbase() {
        assert_eq!(shape("note.txt"), "note_R.txt");
        assert_eq!(shape("My Report (final).TXT"), "my_report_final_R.TXT");
        assert_eq!(shape("My Report.PDF"), "my_report_R.PDF");
        assert_eq!(shape("img1.png"), "img1_R.png");
        assert_eq!(shape("a.txt"), "aR_R.txt");
        assert_eq!(shape("archive.tar.gz"), "archive_R.tar.gz");
        assert_eq!(shape("x.y.tar.gz"), "x_y_R.tar.gz");
        assert_eq!(shape("myTestDB.bin"), "my_test_db_R.bin");
        assert_eq!(shape("héllo wörld.txt"), "h_llo_w_rld_R.txt");
        assert_eq!(shape(".hidden"), "R_R.hidden");
        assert_eq!(shape("noext"), "noext_R");
    }

    #[test]
    fn no_extension_takes_the_detected_one() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(2);
        let got = stored_name_with("picture", ".png", &mut rng);
        assert!(
            got.starts_with("picture_") && got.ends_with(".png"),
            "{got}"
        );
    }

    #[test]
    fn long_names_are_cut() {
        let got = stored_name(&"a".repeat(1000), "");
        assert_eq!(got.len(), BASE_BYTES_MAX + 11);
        let got = stored_name(&format!("x.{}", "e".repeat(40)), "");
        assert!(got.ends_with(&format!(".{}", "e".repeat(20))), "{got}");
    }
}
