//! Requests and responses of plugin routes.

use crate::bindings::exports::ferrobase::plugin::routes;
use crate::json;

/// A request on one of the manifest's routes.
pub type Request = routes::HttpRequest;

/// The answer to a route request.
pub type Response = routes::HttpResponse;

impl Request {
    /// The path parameter `name` of the matched route (`{name}` or `{*name}`).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first query parameter `name`, percent-decoded (`+` is a space).
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (url_decode(key) == name).then(|| url_decode(value))
        })
    }

    /// The header `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text, when it is.
    pub fn body_text(&self) -> Option<&str> {
        core::str::from_utf8(&self.body).ok()
    }
}

impl Response {
    /// An empty response.
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// A JSON response; `body` is JSON text already (see [`crate::json`]).
    pub fn json(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Response::with_body(status, "application/json", body)
    }

    /// A plain-text response.
    pub fn text(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Response::with_body(status, "text/plain; charset=utf-8", body)
    }

    /// A response with any content type.
    pub fn with_body(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            headers: vec![("content-type".to_owned(), content_type.to_owned())],
            body: body.into(),
        }
    }

    /// PocketBase's error body: `{"data":{},"message":...,"status":...}`.
    pub fn error(status: u16, message: &str) -> Self {
        Response::json(status, json::error_body(status, message))
    }

    /// PocketBase's 404.
    pub fn not_found() -> Self {
        Response::error(404, "The requested resource wasn't found.")
    }

    /// This response with one more header.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }
}

/// Percent-decoding of a query-string component; `+` is a space, a bad escape stays as it is and
/// invalid UTF-8 is replaced.
fn url_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = match bytes.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex_value(*hi).zip(hex_value(*lo)),
            _ => None,
        };
        match (escaped, bytes[i]) {
            (Some((hi, lo)), _) => {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(query: &str) -> Request {
        Request {
            method: "GET".into(),
            path: "/api/p/items/7".into(),
            route: "/api/p/items/{id}".into(),
            params: vec![("id".into(), "7".into())],
            query: query.into(),
            headers: vec![("Content-Type".into(), "text/plain".into())],
            body: b"hi".to_vec(),
        }
    }

    #[test]
    fn query_params_are_decoded() {
        let cases = [
            ("q=hello+world", Some("hello world")),
            ("a=1&q=caf%C3%A9%21", Some("caf\u{e9}!")),
            ("q=100%", Some("100%")),
            ("q=%zz", Some("%zz")),
            ("q", Some("")),
            ("qq=1", None),
            ("", None),
        ];
        for (query, want) in cases {
            assert_eq!(request(query).query_param("q").as_deref(), want, "{query}");
        }
    }

    #[test]
    fn params_headers_and_body() {
        let r = request("");
        assert_eq!(r.param("id"), Some("7"));
        assert_eq!(r.header("content-type"), Some("text/plain"));
        assert_eq!(r.body_text(), Some("hi"));
    }

    #[test]
    fn not_found_is_pocketbase_shaped() {
        let r = Response::not_found();
        assert_eq!(r.status, 404);
        assert_eq!(
            String::from_utf8(r.body).unwrap(),
            r#"{"data":{},"message":"The requested resource wasn't found.","status":404}"#
        );
        assert_eq!(
            r.headers,
            [("content-type".to_owned(), "application/json".to_owned())]
        );
    }
}
