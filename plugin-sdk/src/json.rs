//! Just enough JSON writing for route answers, so a plugin need not carry serde_json
//! (which it may still use: any `String` of JSON goes into [`crate::Response::json`]).
//!
//! ```
//! use ferrobase_plugin::json::{Array, Object};
//! let items = Array::new().str("a\"b").int(2).finish();
//! let body = Object::new().raw("items", &items).int("count", 2).bool("ok", true).finish();
//! assert_eq!(body, r#"{"items":["a\"b",2],"count":2,"ok":true}"#);
//! ```

use core::fmt::Write;

/// Appends `s` as a quoted JSON string.
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `s` as a quoted JSON string.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_str(&mut out, s);
    out
}

/// PocketBase's error body: `{"data":{},"message":...,"status":...}`.
pub fn error_body(status: u16, message: &str) -> String {
    Object::new()
        .raw("data", "{}")
        .str("message", message)
        .int("status", i64::from(status))
        .finish()
}

fn push_real(out: &mut String, n: f64) {
    if n.is_finite() {
        let _ = write!(out, "{n}");
    } else {
        out.push_str("null");
    }
}

/// A JSON object written key by key, in order.
#[derive(Debug)]
pub struct Object {
    buf: String,
}

impl Default for Object {
    fn default() -> Self {
        Object::new()
    }
}

impl Object {
    /// `{`.
    pub fn new() -> Self {
        Object {
            buf: String::from("{"),
        }
    }

    fn key(&mut self, key: &str) {
        if self.buf.len() > 1 {
            self.buf.push(',');
        }
        push_str(&mut self.buf, key);
        self.buf.push(':');
    }

    /// A string member.
    #[must_use]
    pub fn str(mut self, key: &str, value: &str) -> Self {
        self.key(key);
        push_str(&mut self.buf, value);
        self
    }

    /// An integer member.
    #[must_use]
    pub fn int(mut self, key: &str, value: i64) -> Self {
        self.key(key);
        let _ = write!(self.buf, "{value}");
        self
    }

    /// A number member (`null` when not finite).
    #[must_use]
    pub fn real(mut self, key: &str, value: f64) -> Self {
        self.key(key);
        push_real(&mut self.buf, value);
        self
    }

    /// A bool member.
    #[must_use]
    pub fn bool(mut self, key: &str, value: bool) -> Self {
        self.key(key);
        self.buf.push_str(if value { "true" } else { "false" });
        self
    }

    /// A member whose value is JSON text already (an [`Array`], another [`Object`], `null`).
    #[must_use]
    pub fn raw(mut self, key: &str, json: &str) -> Self {
        self.key(key);
        self.buf.push_str(json);
        self
    }

    /// The JSON text.
    pub fn finish(mut self) -> String {
        self.buf.push('}');
        self.buf
    }
}

/// A JSON array written item by item.
#[derive(Debug)]
pub struct Array {
    buf: String,
}

impl Default for Array {
    fn default() -> Self {
        Array::new()
    }
}

impl Array {
    /// `[`.
    pub fn new() -> Self {
        Array {
            buf: String::from("["),
        }
    }

    fn comma(&mut self) {
        if self.buf.len() > 1 {
            self.buf.push(',');
        }
    }

    /// A string item.
    #[must_use]
    pub fn str(mut self, value: &str) -> Self {
        self.comma();
        push_str(&mut self.buf, value);
        self
    }

    /// An integer item.
    #[must_use]
    pub fn int(mut self, value: i64) -> Self {
        self.comma();
        let _ = write!(self.buf, "{value}");
        self
    }

    /// A number item (`null` when not finite).
    #[must_use]
    pub fn real(mut self, value: f64) -> Self {
        self.comma();
        push_real(&mut self.buf, value);
        self
    }

    /// An item that is JSON text already.
    #[must_use]
    pub fn raw(mut self, json: &str) -> Self {
        self.comma();
        self.buf.push_str(json);
        self
    }

    /// The JSON text.
    pub fn finish(mut self) -> String {
        self.buf.push(']');
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let cases = [
            ("plain", r#""plain""#),
            ("a\"b\\c", r#""a\"b\\c""#),
            ("line\nnext\ttab", r#""line\nnext\ttab""#),
            ("\u{1}", r#""\u0001""#),
            ("é ✓", "\"é ✓\""),
        ];
        for (input, want) in cases {
            assert_eq!(string(input), want);
        }
    }

    #[test]
    fn writers_place_commas() {
        assert_eq!(Object::new().finish(), "{}");
        assert_eq!(Array::new().finish(), "[]");
        let obj = Object::new()
            .real("n", 1.5)
            .real("inf", f64::INFINITY)
            .finish();
        assert_eq!(obj, r#"{"n":1.5,"inf":null}"#);
        let arr = Array::new().raw("{}").real(2.0).finish();
        assert_eq!(arr, "[{},2]");
    }

    #[test]
    fn error_body_matches_pocketbase() {
        assert_eq!(
            error_body(400, "Bad \"q\"."),
            r#"{"data":{},"message":"Bad \"q\".","status":400}"#
        );
    }
}
