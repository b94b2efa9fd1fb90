//! Slugger: fills and checks the `slug` field of `posts`.
//!
//! - Create: an empty or missing `slug` is made from `title` (lowercase ASCII, each run of other
//!   characters becomes one `-`, at most 60 characters). A title that gives nothing is refused
//!   (field `title`, code `validation_slug_empty`).
//! - Create and update: a given `slug` must match `^[a-z0-9]+(-[a-z0-9]+)*$` (field `slug`, code
//!   `validation_invalid_slug`). An update never regenerates it.
//!
//! Load it by putting `slugger.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml), with its grants:
//!
//! ```toml
//! [plugins.slugger]
//! grants = []
//! ```

use ferrobase_plugin::prelude::*;

const VERSION: &str = "1.0.0";
const SLUG_MAX_CHARS: usize = 60;

struct Slugger;

impl Plugin for Slugger {
    fn manifest() -> Manifest {
        Manifest::new("slugger", VERSION).hook("posts", &[Event::BeforeCreate, Event::BeforeUpdate])
    }

    fn before_create(_ctx: &Context, pending: &Record) -> Result<Verdict, Rejection> {
        match given_slug(pending) {
            Some(slug) => check(slug, Rejection::CREATE_FAILED).map(|()| Verdict::proceed()),
            None => {
                let slug = slugify(pending.text("title").unwrap_or_default());
                if slug.is_empty() {
                    return Err(Rejection::field(
                        "title",
                        "validation_slug_empty",
                        "Cannot make a slug from this title.",
                    ));
                }
                Ok(Verdict::proceed().set("slug", slug))
            }
        }
    }

    fn before_update(
        _ctx: &Context,
        _current: &Record,
        pending: &Record,
    ) -> Result<Verdict, Rejection> {
        match given_slug(pending) {
            Some(slug) => check(slug, Rejection::UPDATE_FAILED).map(|()| Verdict::proceed()),
            None => Ok(Verdict::proceed()),
        }
    }
}

ferrobase_plugin::export!(Slugger);

/// The pending `slug`, unless it is missing or empty.
fn given_slug(record: &Record) -> Option<&str> {
    record.text("slug").filter(|s| !s.is_empty())
}

fn check(slug: &str, message: &str) -> Result<(), Rejection> {
    if is_valid_slug(slug) {
        return Ok(());
    }
    Err(Rejection::field(
        "slug",
        "validation_invalid_slug",
        "Must be lowercase letters, digits and single dashes.",
    )
    .with_message(message))
}

/// `^[a-z0-9]+(-[a-z0-9]+)*$`: no empty part between, before or after dashes.
fn is_valid_slug(slug: &str) -> bool {
    slug.split('-').all(|part| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    })
}

fn slugify(title: &str) -> String {
    let mut slug = String::with_capacity(title.len().min(SLUG_MAX_CHARS));
    let mut dash = false;
    for c in title.chars().map(|c| c.to_ascii_lowercase()) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            if dash && !slug.is_empty() {
                slug.push('-');
            }
            dash = false;
            slug.push(c);
        } else {
            dash = true;
        }
        if slug.len() >= SLUG_MAX_CHARS {
            break;
        }
    }
    // Every character is ASCII, so the cut is on a char boundary; a cut may end on a dash.
    slug.truncate(SLUG_MAX_CHARS);
    slug.trim_end_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugify_cases() {
        let long = "a".repeat(70);
        let cases = [
            ("Hello, World!", "hello-world"),
            ("  --Rust 2024--  ", "rust-2024"),
            ("Ça va? Très bien", "a-va-tr-s-bien"),
            ("!!!", ""),
            ("", ""),
            (long.as_str(), &long[..60]),
        ];
        for (title, want) in cases {
            assert_eq!(slugify(title), want, "{title:?}");
        }
        let cut_on_dash = format!("{} b", "a".repeat(59));
        assert_eq!(slugify(&cut_on_dash), "a".repeat(59));
    }

    #[test]
    fn slug_validation() {
        for ok in ["a", "a-b", "2024-post-1"] {
            assert!(is_valid_slug(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "a--b", "A", "a_b", "é"] {
            assert!(!is_valid_slug(bad), "{bad}");
        }
    }
}
