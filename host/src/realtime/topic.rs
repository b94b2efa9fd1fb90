//! A subscription as a client names it: `posts/*`, `posts/RECORD_ID` or the older `posts`
//! (collections by name or id), any of them with `?options=` carrying URL-encoded JSON
//! `{"query": {...}, "headers": {...}}`, parsed as PocketBase parses it.

use serde_json::{Map, Value};
use std::sync::{Arc, Mutex};

/// One topic of one client.
#[derive(Debug)]
pub(crate) struct Subscription {
    /// The topic exactly as subscribed: the SSE event name of its messages.
    pub name: Arc<str>,
    /// The collection part (a name or an id, as written).
    pub collection: String,
    /// The record part; None for the whole collection (`*`, or no part at all).
    pub record: Option<String>,
    /// `options.query`, every value as text (`filter`, `fields`, `expand`, anything else for
    /// `@request.query.*`).
    pub query: Map<String, Value>,
    /// `options.headers`, names snake-cased as PocketBase does (`@request.headers.*`).
    pub headers: Vec<(String, String)>,
    /// The compiled check, for the schema and caller it was compiled for.
    pub(super) compiled: Mutex<Option<super::deliver::Compiled>>,
    /// The last commit queued for delivery when the topic was subscribed: only later commits
    /// are delivered to it (one committed before it was there never is, however late its
    /// delivery runs).
    pub(super) since: u64,
}

impl Subscription {
    /// Parse a topic. Malformed options are ignored, as PocketBase ignores them.
    pub(crate) fn parse(topic: &str) -> Subscription {
        let (path, query) = match topic.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (topic, None),
        };
        let (collection, record) = match path.split_once('/') {
            Some((c, "*")) => (c, None),
            Some((c, r)) => (c, Some(r.to_owned())),
            None => (path, None),
        };
        let mut sub = Subscription {
            name: Arc::from(topic),
            collection: collection.to_owned(),
            record,
            query: Map::new(),
            headers: Vec::new(),
            compiled: Mutex::new(None),
            since: 0,
        };
        let Some(raw) = query.and_then(options_param) else {
            return sub;
        };
        let Ok(Value::Object(options)) = serde_json::from_str::<Value>(&raw) else {
            return sub;
        };
        if let Some(Value::Object(q)) = options.get("query") {
            for (k, v) in q {
                sub.query.insert(k.clone(), Value::String(as_text(v)));
            }
        }
        if let Some(Value::Object(h)) = options.get("headers") {
            for (k, v) in h {
                sub.headers.push((snake_case(k), as_text(v)));
            }
        }
        sub
    }

    /// Whether this subscription concerns the record `id` of collection `c` (by name or id).
    pub(crate) fn concerns(&self, c_name: &str, c_id: &str, id: &str) -> bool {
        (self.collection == c_name || self.collection == c_id)
            && self.record.as_deref().is_none_or(|r| r == id)
    }

    pub(crate) fn text(&self, key: &str) -> Option<&str> {
        self.query.get(key).and_then(Value::as_str)
    }
}

/// The value of the first `options` parameter of a query string, percent-decoded (`+` is a
/// space), as Go's URL parser gives it.
fn options_param(query: &str) -> Option<String> {
    crate::http::url_pairs(query)
        .into_iter()
        .find_map(|(k, v)| (k == "options").then_some(v))
}

/// A JSON value as PocketBase's `cast.ToString` gives it.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// PocketBase's `Snakecase`: words split at non-word characters and before an upper-case
/// letter that follows a lower-case one, joined by `_`, lower-cased.
fn snake_case(s: &str) -> String {
    let mut out = String::new();
    for word in s.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        if !out.is_empty() {
            out.push('_');
        }
        let mut prev_upper = true;
        for (i, c) in word.chars().enumerate() {
            if c.is_uppercase() && i > 0 && !prev_upper {
                out.push('_');
            }
            prev_upper = c.is_uppercase();
            out.extend(c.to_lowercase());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_and_their_options() {
        let s = Subscription::parse("posts/*");
        assert!(s.collection == "posts" && s.record.is_none());
        let s = Subscription::parse("posts");
        assert!(s.collection == "posts" && s.record.is_none());
        let s = Subscription::parse("posts/abc");
        assert_eq!(s.record.as_deref(), Some("abc"));
        let s = Subscription::parse(
            "posts/*?options=%7B%22query%22%3A%7B%22filter%22%3A%22a%20%3D%201%22%2C%22n%22%3A5%7D%2C%22headers%22%3A%7B%22X-Token%22%3A%22t%22%7D%7D",
        );
        assert_eq!(s.collection, "posts");
        assert_eq!(s.text("filter"), Some("a = 1"));
        assert_eq!(s.text("n"), Some("5"));
        assert_eq!(s.headers, vec![("x_token".to_owned(), "t".to_owned())]);
        // Malformed options are ignored.
        let s = Subscription::parse("posts/*?options=%7Bnot-json");
        assert!(s.query.is_empty());
        assert_eq!(&*s.name, "posts/*?options=%7Bnot-json");
    }

    #[test]
    fn a_subscription_concerns_its_collection_and_record() {
        let all = Subscription::parse("posts/*");
        assert!(all.concerns("posts", "pbc_1", "r1"));
        assert!(!all.concerns("other", "pbc_2", "r1"));
        let by_id = Subscription::parse("pbc_1/r1");
        assert!(by_id.concerns("posts", "pbc_1", "r1"));
        assert!(!by_id.concerns("posts", "pbc_1", "r2"));
    }

    #[test]
    fn header_names_as_pocketbase_snake_cases_them() {
        assert_eq!(snake_case("X-Token"), "x_token");
        assert_eq!(snake_case("xToken"), "x_token");
        assert_eq!(snake_case("ABC"), "abc");
        assert_eq!(snake_case("a_b"), "a_b");
    }
}
