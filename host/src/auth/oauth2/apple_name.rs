//! Owns the names Apple hands over only once: in its redirect's form (`user`, JSON) on a user's
//! first authorization, never in its ID token. Kept for a minute under the authorization code,
//! until the sign-in with that code takes them, as PocketBase keeps them.

use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a name waits for its sign-in.
const KEEP: Duration = Duration::from_secs(60);
/// Names waiting at once; past this a new one is dropped (the sign-in then has no name).
const MAX_WAITING: usize = 10_000;
/// Longer codes are not kept (PocketBase's bound on the key).
const MAX_CODE: usize = 1000;
/// A full name is cut to this many bytes (PocketBase's bound).
const MAX_NAME: usize = 150;

#[derive(Default)]
pub(crate) struct RedirectNames {
    waiting: Mutex<HashMap<String, (String, Instant)>>,
}

impl RedirectNames {
    /// Keep the name in Apple's `user` form value (`{"name":{"firstName":..,"lastName":..}}`)
    /// for the sign-in with `code`; garbage or an empty name keeps nothing.
    pub(crate) fn keep(&self, code: &str, user: &str) {
        if code.is_empty() || code.len() > MAX_CODE {
            return;
        }
        let Some(name) = full_name(user) else {
            return;
        };
        let Ok(mut w) = self.waiting.lock() else {
            return;
        };
        let now = Instant::now();
        w.retain(|_, (_, at)| now.duration_since(*at) < KEEP);
        if w.len() < MAX_WAITING {
            w.insert(code.to_owned(), (name, now));
        }
    }

    /// The name kept for `code`, once; none after a minute.
    pub(crate) fn take(&self, code: &str) -> Option<String> {
        let (name, at) = self.waiting.lock().ok()?.remove(code)?;
        (at.elapsed() < KEEP).then_some(name)
    }
}

/// "first last", cut to [`MAX_NAME`] bytes on a character boundary and trimmed.
fn full_name(user: &str) -> Option<String> {
    let v: Value = serde_json::from_str(user).ok()?;
    let part = |k: &str| v["name"][k].as_str().unwrap_or("").to_owned();
    let mut full = format!("{} {}", part("firstName"), part("lastName"));
    if full.len() > MAX_NAME {
        let mut end = MAX_NAME;
        while !full.is_char_boundary(end) {
            end -= 1;
        }
        full.truncate(end);
    }
    let full = full.trim();
    (!full.is_empty()).then(|| full.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_taken_once_by_its_code() {
        let n = RedirectNames::default();
        n.keep(
            "c1",
            r#"{"name":{"firstName":"Ada","lastName":"Lovelace"},"email":"a@x.io"}"#,
        );
        n.keep("c2", r#"{"name":{"firstName":"","lastName":"Only"}}"#);
        assert_eq!(n.take("c1").as_deref(), Some("Ada Lovelace"));
        assert_eq!(n.take("c1"), None);
        assert_eq!(n.take("c2").as_deref(), Some("Only"));
        assert_eq!(n.take("nope"), None);
    }

    #[test]
    fn garbage_empty_names_and_huge_codes_keep_nothing() {
        let n = RedirectNames::default();
        n.keep("a", "not json");
        n.keep("b", r#"{"name":{"firstName":" ","lastName":""}}"#);
        n.keep("c", r#"{"email":"x@y.z"}"#);
        let long = "x".repeat(MAX_CODE + 1);
        n.keep(&long, r#"{"name":{"firstName":"A"}}"#);
        n.keep("", r#"{"name":{"firstName":"A"}}"#);
        for code in ["a", "b", "c", long.as_str(), ""] {
            assert_eq!(n.take(code), None, "{code}");
        }
    }

    #[test]
    fn long_names_are_cut_on_a_character_boundary() {
        let n = RedirectNames::default();
        let first = "é".repeat(100);
        n.keep(
            "c",
            &format!(r#"{{"name":{{"firstName":"{first}","lastName":"Z"}}}}"#),
        );
        let got = n.take("c").unwrap();
        assert!(got.len() <= MAX_NAME, "{}", got.len());
        assert_eq!(got, "é".repeat(75));
    }
}
