//! Record values: how loosely typed input is coerced, how each field type validates, and how a
//! value maps to the physical SQLite value PocketBase stores (and back to the API's JSON).

use super::define::{verr, verr_params};
use super::{Field, FieldType};
use serde_json::{Value, json};
use std::sync::LazyLock;

/// A value as SQLite stores it. Neutral so that the schema stays free of rusqlite types.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Stored {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

const TEXT_MAX_DEFAULT: i64 = 5000;
const EDITOR_MAX_BYTES_DEFAULT: i64 = 5 << 20;
const JSON_MAX_BYTES_DEFAULT: i64 = 1 << 20;
const PASSWORD_MAX_DEFAULT: i64 = 71;
const FILE_MAX_BYTES_DEFAULT: i64 = 5 << 20;

/// What a record write to `c` may send beyond the base body limit: PocketBase adds each file
/// field's `maxSize × maxSelect` and each editor and json field's `maxSize` (their defaults when
/// unset), so a collection's largest valid record always fits.
pub(crate) fn record_body_allowance(c: &super::Collection) -> usize {
    let or = |v: i64, d: i64| if v > 0 { v } else { d };
    let total: i64 = c
        .fields
        .iter()
        .map(|f| match f.kind {
            FieldType::File => or(f.opt_i64("maxSize"), FILE_MAX_BYTES_DEFAULT)
                .saturating_mul(f.opt_i64("maxSelect").max(1)),
            FieldType::Editor => or(f.opt_i64("maxSize"), EDITOR_MAX_BYTES_DEFAULT),
            FieldType::Json => or(f.opt_i64("maxSize"), JSON_MAX_BYTES_DEFAULT),
            _ => 0,
        })
        .fold(0i64, i64::saturating_add);
    usize::try_from(total).unwrap_or(usize::MAX)
}

/// An e-mail address as PocketBase's validator accepts it (govalidator's pattern; Go's `\d` is
/// ASCII, written `[0-9]` here). Its quoted local part is read the way Go compiles that pattern,
/// not the way RFC 5322 means it: the pattern's quoted pair is written `\(` (a literal
/// parenthesis), which leaves one group fewer, so the repetition covers a quote and one
/// character: `"q"`, `"`, `"a"b"` and `"(a"` pass, `"qq"` and `""` do not (measured on 0.40.6).
static EMAIL_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    let u = r"\x{00A0}-\x{D7FF}\x{F900}-\x{FDCF}\x{FDF0}-\x{FFEF}";
    let atext = format!(r"([a-zA-Z]|[0-9]|[!#\$%&'\*\+\-/=\?\^_`\{{\|\}}~]|[{u}])");
    let fws = r"(((\x20|\x09)*(\x0d\x0a))?(\x20|\x09)+)?";
    let qchar = format!(
        r"(([\x01-\x08\x0b\x0c\x0e-\x1f\x7f]|\x21|[\x23-\x5b]|[\x5d-\x7e]|[{u}])|(\([\x01-\x09\x0b\x0c\x0d-\x7f]|[{u}]))"
    );
    let quoted = format!(r"(((\x22){fws}{qchar})*{fws}(\x22))");
    let label = format!(
        r"(([a-zA-Z]|[0-9]|[{u}])|(([a-zA-Z]|[0-9]|[{u}])([a-zA-Z]|[0-9]|-|\.|_|~|[{u}])*([a-zA-Z]|[0-9]|[{u}])))"
    );
    let tld = format!(
        r"(([a-zA-Z]|[{u}])|(([a-zA-Z]|[{u}])([a-zA-Z]|[0-9]|-|_|~|[{u}])*([a-zA-Z]|[{u}])))"
    );
    let pattern = format!(r"^((({atext}+(\.{atext}+)*)|{quoted})@({label}\.)+{tld}\.?)$");
    regex::Regex::new(&pattern).expect("static regex")
});

/// Whether `s` is an e-mail address in PocketBase's format (its email fields, auth emails and
/// the settings' addresses share one validator).
pub(crate) fn is_email(s: &str) -> bool {
    EMAIL_RE.is_match(s)
}

/// A URL as PocketBase's validator accepts it (govalidator's pattern, `\d` and `\S` as Go reads
/// them).
static URL_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    let not_space = r"[^\t\n\x0c\r ]";
    let ip6 = r"(([0-9a-fA-F]{1,4}:){7,7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:((:[0-9a-fA-F]{1,4}){1,6})|:((:[0-9a-fA-F]{1,4}){1,7}|:)|fe80:(:[0-9a-fA-F]{0,4}){0,4}%[0-9a-zA-Z]{1,}|::(ffff(:0{1,4}){0,1}:){0,1}((25[0-5]|(2[0-4]|1{0,1}[0-9]){0,1}[0-9])\.){3,3}(25[0-5]|(2[0-4]|1{0,1}[0-9]){0,1}[0-9])|([0-9a-fA-F]{1,4}:){1,4}:((25[0-5]|(2[0-4]|1{0,1}[0-9]){0,1}[0-9])\.){3,3}(25[0-5]|(2[0-4]|1{0,1}[0-9]){0,1}[0-9]))";
    let schema = r"((ftp|tcp|udp|wss?|https?):\/\/)";
    let username = format!(r"({not_space}+(:{not_space}*)?@)");
    let path = r"((\/|\?|#)[^\s]*)";
    let port = r"(:([0-9]{1,5}))";
    let ip = r"([1-9][0-9]?|1[0-9][0-9]|2[01][0-9]|22[0-3]|24[0-9]|25[0-5])(\.([0-9]{1,2}|1[0-9][0-9]|2[0-4][0-9]|25[0-5])){2}(?:\.([0-9][0-9]?|1[0-9][0-9]|2[0-4][0-9]|25[0-5]))";
    let c = r"a-zA-Z\x{00a1}-\x{ffff}0-9";
    let subdomain = format!(r"((www\.)|([{c}]+([-_\.]?[{c}])*[{c}]\.[{c}]+))");
    let pattern = format!(
        r"^{schema}?{username}?(({ip}|(\[{ip6}\])|(([{c}]([{c}\-_]+)?[{c}]([-\.][{c}]+)*)|({subdomain}?))?(([{c}]+-?-?)*[{c}]+)(?:\.([a-zA-Z\x{{00a1}}-\x{{ffff}}]{{1,}}))?))\.?{port}?{path}?$"
    );
    regex::Regex::new(&pattern).expect("static regex")
});

/// What Go's `url.Parse` makes of `s`, as far as `IsURL` looks: the host and the path, both
/// unescaped, or None where Go refuses the text (a control byte, a colon in a scheme-less first
/// segment, a bad port, a character a host may not hold, a broken `%` escape...).
fn go_url_parse(s: &str) -> Option<(String, String)> {
    if s.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return None;
    }
    let (s, fragment) = s.split_once('#').unwrap_or((s, ""));
    go_unescape(fragment, Part::Other)?;
    if s == "*" {
        return Some((String::new(), "*".into()));
    }
    let (scheme, rest) = go_scheme(s)?;
    let rest = match rest.strip_suffix('?') {
        Some(r) if !r.contains('?') => r,
        _ => rest.split_once('?').map_or(rest, |(r, _)| r),
    };
    if !rest.starts_with('/') {
        if !scheme.is_empty() {
            // A rootless path after a scheme is opaque: no host, no path.
            return Some((String::new(), String::new()));
        }
        if rest.split('/').next().unwrap_or("").contains(':') {
            return None;
        }
    }
    let (host, path) = match rest.strip_prefix("//") {
        Some(auth) if !scheme.is_empty() || !rest.starts_with("///") => {
            let (authority, path) = auth.split_at(auth.find('/').unwrap_or(auth.len()));
            (go_authority(authority)?, path)
        }
        _ => (String::new(), rest),
    };
    Some((host, go_unescape(path, Part::Other)?))
}

/// A URL's scheme and the rest, as Go's `getScheme` splits them (no scheme: "" and `s`).
fn go_scheme(s: &str) -> Option<(&str, &str)> {
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return None,
            b':' => return Some((&s[..i], &s[i + 1..])),
            _ => return Some(("", s)),
        }
    }
    Some(("", s))
}

/// The host of an authority (`user@host:port`), unescaped, as Go's `parseAuthority` reads it.
fn go_authority(authority: &str) -> Option<String> {
    let (user, host) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let port_ok = |p: &str| {
        p.is_empty()
            || p.strip_prefix(':')
                .is_some_and(|d| d.bytes().all(|b| b.is_ascii_digit()))
    };
    let host = if host.starts_with('[') {
        let close = host.rfind(']')?;
        if !port_ok(&host[close + 1..]) {
            return None;
        }
        match host[..close].find("%25") {
            Some(zone) => {
                let mut h = go_unescape(&host[..zone], Part::Host)?;
                h.push_str(&go_unescape(&host[zone..close], Part::Zone)?);
                h.push_str(&go_unescape(&host[close..], Part::Host)?);
                h
            }
            None => go_unescape(host, Part::Host)?,
        }
    } else {
        if let Some(i) = host.rfind(':')
            && !port_ok(&host[i..])
        {
            return None;
        }
        go_unescape(host, Part::Host)?
    };
    if let Some(user) = user {
        let allowed = |c: char| c.is_ascii_alphanumeric() || "-._:~!$&'()*+,;=%@".contains(c);
        if !user.chars().all(allowed) {
            return None;
        }
        for part in user.splitn(2, ':') {
            go_unescape(part, Part::Other)?;
        }
    }
    Some(host)
}

#[derive(Clone, Copy, PartialEq)]
enum Part {
    Host,
    Zone,
    Other,
}

/// Go's `unescape` for the parts `url.Parse` unescapes: `%XX` decoded (None for a broken one);
/// in a host, escapes only for bytes past ASCII (or `%25`), and no character a host may not
/// hold.
fn go_unescape(s: &str, part: Part) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                let (h, l) = (hex(*b.get(i + 1)?)?, hex(*b.get(i + 2)?)?);
                if part == Part::Host && h < 8 && &s[i..i + 3] != "%25" {
                    return None;
                }
                out.push(u8::try_from(h * 16 + l).ok()?);
                i += 3;
            }
            c => {
                if part != Part::Other
                    && c < 0x80
                    && !(c.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]<>\"".contains(&c))
                {
                    return None;
                }
                out.push(c);
                i += 1;
            }
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// The host name of a URL without its port or brackets (Go's `URL.Hostname`), "" when Go
/// finds no host.
fn url_hostname(s: &str) -> String {
    let host = go_url_parse(s).map(|(h, _)| h).unwrap_or_default();
    let name = match host.rfind(':') {
        Some(i) if host[i + 1..].bytes().all(|b| b.is_ascii_digit()) => &host[..i],
        _ => &host,
    };
    let name = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    name.to_owned()
}

/// govalidator's `IsURL`, which PocketBase uses for every URL it takes: url fields, OAuth2
/// provider URLs, the settings' application URL and S3 endpoint.
pub(crate) fn is_url(s: &str) -> bool {
    if s.chars().count() >= 2083 || s.len() <= 3 || s.starts_with('.') {
        return false;
    }
    // Without a scheme but with a colon (a port), it is parsed as if `http://` preceded it.
    let parsed = if s.contains(':') && !s.contains("://") {
        go_url_parse(&format!("http://{s}"))
    } else {
        go_url_parse(s)
    };
    let Some((host, path)) = parsed else {
        return false;
    };
    if host.starts_with('.') || (host.is_empty() && !path.is_empty() && !path.contains('.')) {
        return false;
    }
    URL_RE.is_match(s)
}

/// The zero value of a field, as the API shows it.
pub(crate) fn zero(f: &Field) -> Value {
    match f.kind {
        FieldType::Number => json!(0),
        FieldType::Bool => json!(false),
        FieldType::Json => Value::Null,
        FieldType::GeoPoint => json!({"lon": 0, "lat": 0}),
        _ if f.is_multi() => json!([]),
        _ => json!(""),
    }
}

/// A number as PocketBase prints it: integers without `.0`.
///
/// Go prints a float without an exponent below 1e21, as its shortest digits padded with
/// zeros (`9223372036854775807` is `9223372036854776000`); whole numbers that fit 64 bits are
/// written that way here too, so the JSON is the same text.
pub(crate) fn number(n: f64) -> Value {
    if !n.is_finite() {
        return json!(0);
    }
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        return json!(n as i64);
    }
    if n.fract() == 0.0 && n.abs() < 1.8e19 {
        // Rust prints the same shortest digits, without an exponent.
        let text = format!("{n}");
        if let Ok(u) = text.parse::<u64>() {
            return json!(u);
        }
        if let Ok(i) = text.parse::<i64>() {
            return json!(i);
        }
    }
    json!(n)
}

fn as_number(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().unwrap_or(0.0),
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::String(s) => go_parse_float(s).filter(|n| n.is_finite()).unwrap_or(0.0),
        _ => 0.0,
    }
}

/// The deepest JSON nesting accepted (Go's decoder, and so PocketBase, refuses deeper input).
pub(crate) const JSON_DEPTH_MAX: usize = 10_000;

/// Parse a JSON text (a json field's value given as a string): the whole text, one value.
/// serde_json stops at 128 levels to keep its recursion off the end of the stack; PocketBase
/// accepts up to [`JSON_DEPTH_MAX`]. Deeper input is measured first without recursion, and
/// only input within the limit is parsed unbounded (the threads that handle requests have
/// stacks sized for it: `THREAD_STACK_BYTES`).
pub(crate) fn parse_json(bytes: &[u8]) -> serde_json::Result<Value> {
    parse_with(bytes, |de| {
        let v = serde::Deserialize::deserialize(&mut *de)?;
        de.end()?;
        Ok(v)
    })
}

/// Parse a request body as PocketBase's decoder reads one: the first JSON value (whatever
/// follows it is never read), and a key repeated in any object refuses the whole body.
pub(crate) fn parse_json_body(bytes: &[u8]) -> serde_json::Result<Value> {
    parse_with(bytes, |de| {
        <NoDuplicateKeys as serde::Deserialize>::deserialize(&mut *de).map(|v| v.0)
    })
}

type Reader<'a> = serde_json::Deserializer<serde_json::de::SliceRead<'a>>;

fn parse_with(
    bytes: &[u8],
    parse: impl Fn(&mut Reader<'_>) -> serde_json::Result<Value>,
) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match parse(&mut de) {
        Err(e) if e.is_syntax() && json_depth(bytes) > 127 => {
            if json_depth(bytes) > JSON_DEPTH_MAX {
                return Err(e);
            }
            let mut de = serde_json::Deserializer::from_slice(bytes);
            de.disable_recursion_limit();
            parse(&mut de)
        }
        other => other,
    }
}

/// A JSON value whose objects never repeat a key.
struct NoDuplicateKeys(Value);

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = NoDuplicateKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys(
                    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number),
                ))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys(Value::String(v.to_owned())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys(Value::String(v)))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(NoDuplicateKeys(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(NoDuplicateKeys(v)) = seq.next_element()? {
                    out.push(v);
                }
                Ok(NoDuplicateKeys(Value::Array(out)))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Self::Value, A::Error> {
                let mut out = serde_json::Map::new();
                while let Some(k) = map.next_key::<String>()? {
                    if out.contains_key(&k) {
                        return Err(serde::de::Error::custom(format!("duplicate key {k:?}")));
                    }
                    let NoDuplicateKeys(v) = map.next_value()?;
                    out.insert(k, v);
                }
                Ok(NoDuplicateKeys(Value::Object(out)))
            }
        }
        d.deserialize_any(V)
    }
}

/// The deepest nesting of arrays and objects in `bytes`, strings skipped; no recursion.
fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut max, mut in_str, mut esc) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// What a number field makes of a NaN or infinity it was sent: not a number, which validation
/// refuses with `validation_not_a_number` (JSON has no such numbers to carry it).
const NOT_A_NUMBER: &str = "NaN";

/// Go's `strconv.ParseFloat(s, 64)`, which PocketBase's number casts use: None for a syntax
/// error or an overflow (the cast then gives 0); NaN or an infinity only for the words
/// `nan`, `inf` and `infinity` (any case; a sign only before the infinities). No surrounding
/// space; `_` only between digits; hex mantissas need a `p` exponent.
pub(crate) fn go_parse_float(s: &str) -> Option<f64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'+') => (false, &s[1..]),
        Some(b'-') => (true, &s[1..]),
        _ => (false, s),
    };
    let signed = body.len() != s.len();
    if body.eq_ignore_ascii_case("inf") || body.eq_ignore_ascii_case("infinity") {
        return Some(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if body.eq_ignore_ascii_case("nan") {
        return (!signed).then_some(f64::NAN);
    }
    if !underscores_ok(body) {
        return None;
    }
    let clean: String = body.chars().filter(|&c| c != '_').collect();
    let v = if clean.get(..2).is_some_and(|p| p.eq_ignore_ascii_case("0x")) {
        parse_hex_float(&clean[2..])?
    } else {
        // Rust's grammar is Go's decimal one, minus the words handled above.
        let ok = matches!(clean.as_bytes().first(), Some(b'0'..=b'9' | b'.'))
            && clean
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
        if !ok {
            return None;
        }
        clean.parse::<f64>().ok()?
    };
    if v.is_infinite() {
        return None; // out of range: Go's ErrRange
    }
    Some(if neg { -v } else { v })
}

/// Go's rule for `_` in number literals: only between digits (or after a base prefix).
fn underscores_ok(s: &str) -> bool {
    if !s.contains('_') {
        return true;
    }
    let b = s.as_bytes();
    let (mut i, mut saw, mut hex) = (0, b'^', false);
    if b.len() >= 2 && b[0] == b'0' && matches!(b[1] | 0x20, b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = b[1] | 0x20 == b'x';
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && (c | 0x20).is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// The digits of a hex float after `0x`: `h[.h]p[+-]d`, the exponent required.
fn parse_hex_float(s: &str) -> Option<f64> {
    let (mant, exp) = s.split_once(['p', 'P'])?;
    let exp: i32 = exp.parse().ok()?;
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut v = 0f64;
    for c in int.chars().chain(frac.chars()) {
        v = v * 16.0 + f64::from(c.to_digit(16)?);
    }
    let shift = exp - 4 * i32::try_from(frac.len()).ok()?;
    Some(v * 2f64.powi(shift))
}

/// Go's `strconv.ParseBool`: its words for true and false, anything else `None`.
pub(crate) fn go_parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

/// PocketBase's bool cast: any non-zero number, and Go's `strconv.ParseBool` words for true.
fn as_bool(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => go_parse_bool(s) == Some(true),
        _ => false,
    }
}

/// PocketBase's string cast: numbers without an exponent (Go's `FormatFloat(f, 'f', -1)`),
/// arrays and objects as nothing.
pub(crate) fn as_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null | Value::Array(_) | Value::Object(_) => String::new(),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (_, Some(u), _) => u.to_string(),
            (_, _, Some(f)) => format!("{f}"),
            _ => n.to_string(),
        },
        Value::Bool(b) => b.to_string(),
    }
}

/// Parse the date forms PocketBase accepts into its storage format; unparseable input is "".
pub(crate) fn normalize_date(s: &str) -> String {
    super::date::parse(s)
}

/// A json field given a string, as PocketBase reads one: `null`, `true` and `false` are those
/// values; text that starts like a number, a string, a list or an object (`0-9`, `-`, `"`, `[`,
/// `{`) and is valid JSON is that JSON; anything else (a leading space included) is a string.
fn normalize_json_string(s: &str) -> Value {
    match s {
        "null" => return Value::Null,
        "true" => return json!(true),
        "false" => return json!(false),
        _ => {}
    }
    let json_like = s
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || matches!(b, b'-' | b'"' | b'[' | b'{'));
    if json_like && let Ok(v) = parse_json(s.as_bytes()) {
        return v;
    }
    json!(s)
}

/// A string that is not JSON text is stored by PocketBase as Go's `strconv.Quote` of it, which
/// is not valid JSON when the string holds a control character other than `\b \f \n \r \t`,
/// DEL, or a non-printable character beyond the Basic Multilingual Plane. PocketBase then
/// refuses the value; so does this, given the raw input of a json field.
pub(crate) fn json_input_error(f: &Field, raw: &Value) -> Option<Value> {
    json_text_error(f, raw, false)
}

/// [`json_input_error`] for a form value whose bytes were not UTF-8, each invalid byte read as
/// U+FFFD: Go quotes such a byte as `\xff`, which is no JSON, so text that is not JSON itself
/// is refused (or too large, four bytes a byte) where the same text with a genuine U+FFFD is
/// stored.
pub(crate) fn json_input_error_not_utf8(f: &Field, raw: &Value) -> Option<Value> {
    json_text_error(f, raw, true)
}

/// Whether a json field given `s` reads it as JSON text that PocketBase keeps as it came: an
/// array, object, string or number (not the bare words `null`, `true`, `false`).
pub(crate) fn is_json_text(f: &Field, s: &str) -> bool {
    f.kind == FieldType::Json
        && !matches!(s, "null" | "true" | "false")
        && normalize_json_string(s) != json!(s)
}

/// [`validate`] of a json field given JSON text, judged on the text as PocketBase keeps it: its
/// size with its spaces, and blank only when the text itself is (`[ ]` is not).
pub(crate) fn validate_json_text(f: &Field, text: &str) -> Option<Value> {
    let max = json_max_size(f);
    if text.len() as i64 > max {
        return Some(json_size_error(max));
    }
    if f.required && EMPTY_JSON.contains(&text.trim()) {
        return Some(verr("validation_required", "Cannot be blank."));
    }
    None
}

/// A json field's `maxSize`, or PocketBase's default when it has none.
fn json_max_size(f: &Field) -> i64 {
    match f.opt_i64("maxSize") {
        m if m > 0 => m,
        _ => JSON_MAX_BYTES_DEFAULT,
    }
}

fn json_size_error(max: i64) -> Value {
    verr_params(
        "validation_json_size_limit",
        &format!("The maximum allowed JSON size is {max} bytes."),
        json!({"maxSize": max}),
    )
}

fn json_text_error(f: &Field, raw: &Value, not_utf8: bool) -> Option<Value> {
    static PRINTABLE: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"^[\p{L}\p{M}\p{N}\p{P}\p{S}]$").expect("static regex")
    });
    let Value::String(s) = raw else { return None };
    if f.kind != FieldType::Json {
        return None;
    }
    let max = json_max_size(f);
    if normalize_json_string(s) != json!(s) {
        // Read as JSON: PocketBase keeps the text as it was given, so its size is the text's,
        // insignificant spaces included.
        return (s.len() as i64 > max).then(|| json_size_error(max));
    }
    if ["null", "true", "false", ""].contains(&s.as_str()) {
        return None;
    }
    let invalid = Some(verr(
        "validation_invalid_json",
        "Must be a valid json value.",
    ));
    // PocketBase checks the stored text's size before its validity: a value too large for the
    // field gets the size error (from `validate`), not this one.
    // JSON text whose number is out of range (`-1e400`) is valid to PocketBase's check and
    // stored as such, and fails when read back as a value: refused.
    let json_like = s
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_digit() || matches!(b, b'-' | b'"' | b'[' | b'{'));
    if json_like
        && json_depth(s.as_bytes()) <= JSON_DEPTH_MAX
        && serde_json::from_slice::<serde::de::IgnoredAny>(s.as_bytes()).is_ok()
    {
        return if s.len() as i64 > max { None } else { invalid };
    }
    // Any other text is stored as Go's `strconv.Quote` of it.
    let mut quotable = true;
    let mut quoted_len: i64 = 2;
    for c in s.chars() {
        quoted_len += match c {
            '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
            '\u{7}' | '\u{b}' => {
                quotable = false;
                2
            }
            c if c < ' ' || c == '\u{7f}' => {
                quotable = false;
                4
            }
            '\u{fffd}' if not_utf8 => {
                quotable = false;
                4
            }
            c if PRINTABLE.is_match(c.encode_utf8(&mut [0u8; 4])) || c == ' ' => {
                c.len_utf8() as i64
            }
            c if (c as u32) < 0x10000 => 6,
            _ => {
                quotable = false;
                10
            }
        };
    }
    if quotable || quoted_len > max {
        None
    } else {
        invalid
    }
}

/// A select, relation or file value as its list of names.
///
/// As PocketBase reads one: text holding `[` is read as a JSON list of strings when it is one
/// (else it is one name); a list of scalars gives each as text, and a list holding a list or
/// an object gives nothing; an object gives nothing; empty names are dropped.
pub(crate) fn to_list(v: &Value) -> Vec<String> {
    let list = match v {
        Value::String(s) if s.contains('[') => {
            match serde_json::from_str::<Vec<Option<String>>>(s) {
                Ok(items) => items.into_iter().map(Option::unwrap_or_default).collect(),
                Err(_) => vec![s.clone()],
            }
        }
        Value::Array(a) if a.iter().any(|x| x.is_array() || x.is_object()) => Vec::new(),
        Value::Array(a) => a.iter().map(as_string).collect(),
        Value::Null | Value::Object(_) => Vec::new(),
        other => vec![as_string(other)],
    };
    list.into_iter().filter(|s| !s.is_empty()).collect()
}

fn dedup(list: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for v in list {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

/// Coerce raw input for a field into the API form of its value (PocketBase's loose typing).
pub(crate) fn coerce(f: &Field, v: &Value) -> Value {
    match f.kind {
        FieldType::Number => match v {
            Value::String(s) if go_parse_float(s).is_some_and(|n| !n.is_finite()) => {
                json!(NOT_A_NUMBER)
            }
            _ => number(as_number(v)),
        },
        FieldType::Bool => json!(as_bool(v)),
        FieldType::Date | FieldType::Autodate => match v {
            Value::String(s) => json!(normalize_date(s)),
            _ => json!(""),
        },
        FieldType::Select | FieldType::Relation | FieldType::File => {
            let list = dedup(to_list(v));
            if f.is_multi() {
                json!(list)
            } else {
                json!(list.last().cloned().unwrap_or_default())
            }
        }
        FieldType::Json => match v {
            Value::String(s) => normalize_json_string(s),
            other => go_decoded(other),
        },
        FieldType::GeoPoint => {
            // PocketBase decodes the point as JSON `{"lon": number, "lat": number}`: anything
            // else (a number as text, a list, a scalar) leaves the zero point.
            let obj = match v {
                Value::String(s) if !s.is_empty() => {
                    serde_json::from_str::<Value>(s).unwrap_or(Value::Bool(false))
                }
                other => other.clone(),
            };
            let coord = |k: &str| match obj.get(k) {
                None | Some(Value::Null) => Some(0.0),
                Some(Value::Number(n)) => n.as_f64(),
                Some(_) => None,
            };
            match (&obj, coord("lon"), coord("lat")) {
                (Value::Object(_), Some(lon), Some(lat)) => {
                    json!({"lon": number(lon), "lat": number(lat)})
                }
                _ => json!({"lon": 0, "lat": 0}),
            }
        }
        FieldType::Text
        | FieldType::Email
        | FieldType::Url
        | FieldType::Editor
        | FieldType::Password => json!(as_string(v)),
    }
}

/// Apply a `field+`, `+field` or `field-` modifier to the current value (already in API form).
/// Types without modifier support keep their value, as PocketBase does.
pub(crate) fn apply_modifier(f: &Field, current: &Value, modifier: Modifier, arg: &Value) -> Value {
    match f.kind {
        FieldType::Number => {
            // (`+field` is not a number modifier: it keeps the value whatever its argument.)
            if modifier != Modifier::Prepend
                && let Value::String(s) = arg
                && go_parse_float(s).is_some_and(|n| !n.is_finite())
            {
                return json!(NOT_A_NUMBER);
            }
            // Not a number stays not a number, whatever is added to it.
            let Some(cur) = current.as_f64() else {
                return current.clone();
            };
            let d = as_number(arg);
            let sum = match modifier {
                Modifier::Append => cur + d,
                Modifier::Subtract => cur - d,
                Modifier::Prepend => return current.clone(),
            };
            // A sum past f64's range is an infinity, refused like one sent as text.
            if sum.is_finite() {
                number(sum)
            } else {
                json!(NOT_A_NUMBER)
            }
        }
        FieldType::Select | FieldType::Relation | FieldType::File => {
            let cur = to_list(current);
            let args = to_list(arg);
            let list = match modifier {
                Modifier::Append => dedup(cur.into_iter().chain(args).collect()),
                Modifier::Prepend => dedup(args.into_iter().chain(cur).collect()),
                Modifier::Subtract => cur.into_iter().filter(|v| !args.contains(v)).collect(),
            };
            if f.is_multi() {
                json!(list)
            } else {
                json!(list.last().cloned().unwrap_or_default())
            }
        }
        _ => current.clone(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Modifier {
    Append,
    Prepend,
    Subtract,
}

/// Split a body key into the field name and its modifier (`views+`, `+tags`, `tags-`).
pub(crate) fn split_modifier(key: &str) -> (&str, Option<Modifier>) {
    if let Some(n) = key.strip_prefix('+') {
        (n, Some(Modifier::Prepend))
    } else if let Some(n) = key.strip_suffix('+') {
        (n, Some(Modifier::Append))
    } else if let Some(n) = key.strip_suffix('-') {
        (n, Some(Modifier::Subtract))
    } else {
        (key, None)
    }
}

fn fmt_num(n: f64) -> String {
    number(n).to_string()
}

/// A time as Go's `time.Time.String()` prints a UTC time (in PocketBase's date range errors).
fn go_time_string(stored: &str) -> String {
    // stored: `2006-01-02 15:04:05.000Z`
    let (base, frac) = stored
        .trim_end_matches('Z')
        .split_once('.')
        .unwrap_or((stored, ""));
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("{base} +0000 UTC")
    } else {
        format!("{base}.{frac} +0000 UTC")
    }
}

/// The same time as Go's JSON encoding prints it (RFC 3339, fraction trimmed).
fn go_time_json(stored: &str) -> String {
    let (base, frac) = stored
        .trim_end_matches('Z')
        .split_once('.')
        .unwrap_or((stored, ""));
    let frac = frac.trim_end_matches('0');
    let base = base.replacen(' ', "T", 1);
    if frac.is_empty() {
        format!("{base}Z")
    } else {
        format!("{base}.{frac}Z")
    }
}

/// PocketBase's emptiness of a json field value: its JSON text is one of these.
const EMPTY_JSON: &[&str] = &["null", "\"\"", "[]", "{}", ""];

/// The longest password bcrypt takes, in bytes.
const BCRYPT_MAX_BYTES: usize = 72;

/// Whether bcrypt can hash this plaintext (PocketBase hashes a password the moment it is set,
/// and bcrypt refuses more than 72 bytes).
pub(crate) fn password_hashable(plain: &str) -> bool {
    plain.len() <= BCRYPT_MAX_BYTES
}

/// Validate a coerced value against its field's options, in PocketBase's order and words per
/// type. Relation existence and uniqueness need the database and are checked by the caller.
pub(crate) fn validate(f: &Field, v: &Value) -> Option<Value> {
    let required = || Some(verr("validation_required", "Cannot be blank."));
    match f.kind {
        FieldType::Text => {
            let s = v.as_str().unwrap_or("");
            let pk = f.is_primary_key();
            if s.is_empty() {
                return if f.required || pk { required() } else { None };
            }
            let len = s.chars().count() as i64;
            let min = f.opt_i64("min");
            let mut max = f.opt_i64("max");
            if max == 0 {
                max = TEXT_MAX_DEFAULT;
            }
            if min > 0 && len < min {
                return Some(verr_params(
                    "validation_min_text_constraint",
                    &format!("Must be at least {min} character(s)."),
                    json!({"min": min}),
                ));
            }
            if max > 0 && len > max {
                return Some(verr_params(
                    "validation_max_text_constraint",
                    &format!("Must be no more than {max} character(s)."),
                    json!({"max": max}),
                ));
            }
            if let Some(super::Pattern(re)) = &f.pattern
                && !re.as_ref().is_some_and(|re| re.is_match(s))
            {
                return Some(verr("validation_invalid_format", "Invalid value format."));
            }
            if pk && f.opt_str("pattern") != DEFAULT_ID_PATTERN {
                return pk_value_error(s, len);
            }
            None
        }
        FieldType::Password => {
            // A new plaintext (an unchanged password is its stored hash, not validated).
            let s = v.as_str().unwrap_or("");
            if !password_hashable(s) {
                return Some(verr("validation_invalid_value", "Invalid value."));
            }
            if s.is_empty() {
                return if f.required { required() } else { None };
            }
            let len = s.chars().count() as i64;
            let min = f.opt_i64("min");
            if len < min {
                return Some(verr(
                    "validation_min_text_constraint",
                    &format!("Must be at least {min} character(s)."),
                ));
            }
            let mut max = f.opt_i64("max");
            if max <= 0 {
                max = PASSWORD_MAX_DEFAULT;
            }
            if len > max {
                return Some(verr(
                    "validation_max_text_constraint",
                    &format!("Must be less than {max} character(s)."),
                ));
            }
            if let Some(super::Pattern(re)) = &f.pattern
                && !re.as_ref().is_some_and(|re| re.is_match(s))
            {
                return Some(verr("validation_invalid_format", "Invalid value format."));
            }
            None
        }
        FieldType::Editor => {
            let s = v.as_str().unwrap_or("");
            if f.required && s.is_empty() {
                return required();
            }
            let mut max = f.opt_i64("maxSize");
            if max <= 0 {
                max = EDITOR_MAX_BYTES_DEFAULT;
            }
            if s.len() as i64 > max {
                return Some(verr_params(
                    "validation_content_size_limit",
                    &format!("The maximum allowed content size is {max} bytes."),
                    json!({"maxSize": max}),
                ));
            }
            None
        }
        FieldType::Number => {
            let Some(n) = v.as_f64() else {
                return Some(verr(
                    "validation_not_a_number",
                    "The submitted number is not properly formatted.",
                ));
            };
            if n == 0.0 {
                return if f.required { required() } else { None };
            }
            // Go's `float64(int64(n)) != n`: fractions, and values outside int64's range
            // [-2^63, 2^63) (their conversion gives -2^63, which is itself in range).
            const TWO_63: f64 = 9_223_372_036_854_775_808.0;
            if f.opt_bool("onlyInt") && (n.fract() != 0.0 || !(-TWO_63..TWO_63).contains(&n)) {
                return Some(verr(
                    "validation_only_int_constraint",
                    "Decimal numbers are not allowed.",
                ));
            }
            if let Some(min) = f.opt_f64("min")
                && n < min
            {
                return Some(verr_params(
                    "validation_min_number_constraint",
                    &format!("Must be greater or equal than {}.", fmt_num(min)),
                    json!({"min": number(min)}),
                ));
            }
            if let Some(max) = f.opt_f64("max")
                && n > max
            {
                return Some(verr_params(
                    "validation_max_number_constraint",
                    &format!("Must be less or equal than {}.", fmt_num(max)),
                    json!({"max": number(max)}),
                ));
            }
            None
        }
        FieldType::Bool => (f.required && v != &json!(true))
            .then(|| verr("validation_required", "Cannot be blank.")),
        FieldType::Email => {
            let s = v.as_str().unwrap_or("");
            if s.is_empty() {
                return if f.required { required() } else { None };
            }
            if !is_email(s) {
                return Some(verr(
                    "validation_is_email",
                    "Must be a valid email address.",
                ));
            }
            let domain = s.rsplit_once('@').map_or("", |(_, d)| d);
            let only = f.opt_strings("onlyDomains");
            let except = f.opt_strings("exceptDomains");
            if (!only.is_empty() && !only.iter().any(|d| d == domain))
                || except.iter().any(|d| d == domain)
            {
                return Some(verr(
                    "validation_email_domain_not_allowed",
                    "Email domain is not allowed.",
                ));
            }
            None
        }
        FieldType::Url => {
            let s = v.as_str().unwrap_or("");
            if s.is_empty() {
                return if f.required { required() } else { None };
            }
            if !is_url(s) {
                return Some(verr("validation_invalid_url", "Must be a valid url."));
            }
            let host = &url_hostname(s);
            let only = f.opt_strings("onlyDomains");
            let except = f.opt_strings("exceptDomains");
            if (!only.is_empty() && !only.iter().any(|d| d == host))
                || except.iter().any(|d| d == host)
            {
                return Some(verr(
                    "validation_url_domain_not_allowed",
                    "Url domain is not allowed.",
                ));
            }
            None
        }
        FieldType::Date => {
            let s = v.as_str().unwrap_or("");
            if s.is_empty() {
                return if f.required { required() } else { None };
            }
            let min = normalize_date(f.opt_str("min"));
            let max = normalize_date(f.opt_str("max"));
            if !min.is_empty() && s < min.as_str() {
                return Some(verr_params(
                    "validation_min_greater_equal_than_required",
                    &format!("Must be no less than {}.", go_time_string(&min)),
                    json!({"threshold": go_time_json(&min)}),
                ));
            }
            if !max.is_empty() && s > max.as_str() {
                return Some(verr_params(
                    "validation_max_less_equal_than_required",
                    &format!("Must be no greater than {}.", go_time_string(&max)),
                    json!({"threshold": go_time_json(&max)}),
                ));
            }
            None
        }
        FieldType::Select => {
            let list = dedup(to_list(v));
            if list.is_empty() {
                return if f.required { required() } else { None };
            }
            let max = f.opt_i64("maxSelect").max(1);
            if list.len() as i64 > max {
                return Some(verr_params(
                    "validation_too_many_values",
                    &format!("Select no more than {max}."),
                    json!({"maxSelect": max}),
                ));
            }
            let values = f.opt_strings("values");
            for item in &list {
                if !values.contains(item) {
                    return Some(verr_params(
                        "validation_invalid_value",
                        &format!("Invalid value {item}."),
                        json!({"value": item}),
                    ));
                }
            }
            None
        }
        FieldType::Relation => {
            let list = dedup(to_list(v));
            if list.is_empty() {
                return if f.required { required() } else { None };
            }
            let min = f.opt_i64("minSelect");
            if min > 0 && (list.len() as i64) < min {
                return Some(verr_params(
                    "validation_not_enough_values",
                    &format!("Select at least {min}."),
                    json!({"minSelect": min}),
                ));
            }
            let max = f.opt_i64("maxSelect").max(1);
            if list.len() as i64 > max {
                return Some(verr_params(
                    "validation_too_many_values",
                    &format!("Select no more than {max}."),
                    json!({"maxSelect": max}),
                ));
            }
            None
        }
        FieldType::Json => {
            let max = json_max_size(f);
            let text = if v.is_null() {
                "null".to_owned()
            } else {
                go_json_text(v)
            };
            if text.len() as i64 > max {
                return Some(json_size_error(max));
            }
            if f.required && EMPTY_JSON.contains(&text.trim()) {
                return required();
            }
            None
        }
        FieldType::GeoPoint => {
            let lon = v.get("lon").and_then(Value::as_f64).unwrap_or(0.0);
            let lat = v.get("lat").and_then(Value::as_f64).unwrap_or(0.0);
            if lon == 0.0 && lat == 0.0 {
                return if f.required { required() } else { None };
            }
            if !(-90.0..=90.0).contains(&lat) {
                return Some(verr(
                    "validation_invalid_latitude",
                    "Latitude must be between -90 and 90 degrees.",
                ));
            }
            if !(-180.0..=180.0).contains(&lon) {
                return Some(verr(
                    "validation_invalid_longitude",
                    "Longitude must be between -180 and 180 degrees.",
                ));
            }
            None
        }
        FieldType::File => {
            let n = to_list(v).len();
            let max = f.opt_i64("maxSelect").max(1);
            if f.required && n == 0 {
                Some(verr("validation_required", "Cannot be blank."))
            } else if i64::try_from(n).unwrap_or(i64::MAX) > max {
                Some(verr_params(
                    "validation_too_many_files",
                    &format!("The maximum allowed files is {max}."),
                    json!({ "maxSelect": max }),
                ))
            } else {
                None
            }
        }
        FieldType::Autodate => None,
    }
}

/// The record id pattern every collection starts with; a primary key with another pattern gets
/// PocketBase's extra checks (the id is also a directory name for the record's files).
const DEFAULT_ID_PATTERN: &str = "^[a-z0-9]+$";

const FORBIDDEN_PK_CHARACTERS: &[&str] = &[
    ".", "/", "\\", "|", "\"", "'", "`", "<", ">", ":", "?", "*", "%", "$", "\0", "\t", "\n", "\r",
    " ",
];

const RESERVED_PKS: &[&str] = &[
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8",
    "COM9", "LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

fn pk_value_error(s: &str, len: i64) -> Option<Value> {
    if let Some(ch) = FORBIDDEN_PK_CHARACTERS.iter().find(|c| s.contains(**c)) {
        return Some(verr_params(
            "validation_forbidden_pk_character",
            &format!("'{ch}' is not a valid primary key character."),
            json!({"ch": ch}),
        ));
    }
    if len <= 4
        && let Some(r) = RESERVED_PKS.iter().find(|r| r.eq_ignore_ascii_case(s))
    {
        return Some(verr_params(
            "validation_reserved_pk",
            &format!("The primary key '{r}' is reserved and cannot be used."),
            json!({"reserved": r}),
        ));
    }
    None
}

/// The physical value for an API value of this field.
pub(crate) fn to_stored(f: &Field, v: &Value) -> Stored {
    match f.kind {
        FieldType::Number => {
            let n = v.as_f64().unwrap_or(0.0);
            if n.fract() == 0.0 && n.abs() < 9.0e15 {
                Stored::Int(n as i64)
            } else {
                Stored::Real(n)
            }
        }
        FieldType::Bool => Stored::Int(i64::from(v.as_bool().unwrap_or(false))),
        FieldType::Json => match v {
            Value::Null => Stored::Null,
            other => Stored::Text(go_json_text(other)),
        },
        FieldType::GeoPoint => Stored::Text(v.to_string()),
        _ if f.is_multi() => Stored::Text(
            Value::Array(to_list(v).into_iter().map(Value::String).collect()).to_string(),
        ),
        _ => Stored::Text(as_string(v)),
    }
}

/// The API value of a physical value.
pub(crate) fn from_stored(f: &Field, s: Stored) -> Value {
    match f.kind {
        FieldType::Password => json!(""),
        FieldType::Number => match s {
            Stored::Int(i) => json!(i),
            Stored::Real(r) => number(r),
            Stored::Text(t) => number(t.parse().unwrap_or(0.0)),
            Stored::Null => json!(0),
        },
        FieldType::Bool => match s {
            Stored::Int(i) => json!(i != 0),
            Stored::Real(r) => json!(r != 0.0),
            Stored::Text(t) => json!(t == "1" || t.eq_ignore_ascii_case("true")),
            Stored::Null => json!(false),
        },
        FieldType::Json => match s {
            Stored::Null => Value::Null,
            Stored::Int(i) => json!(i),
            Stored::Real(r) => json!(r),
            Stored::Text(t) => parse_json(t.as_bytes()).unwrap_or(Value::String(t)),
        },
        FieldType::GeoPoint => {
            let v = match s {
                Stored::Text(t) => serde_json::from_str::<Value>(&t).unwrap_or(Value::Null),
                _ => Value::Null,
            };
            let lon = v.get("lon").and_then(Value::as_f64).unwrap_or(0.0);
            let lat = v.get("lat").and_then(Value::as_f64).unwrap_or(0.0);
            json!({"lon": number(lon), "lat": number(lat)})
        }
        _ if f.is_multi() => match s {
            Stored::Text(t) => match serde_json::from_str::<Value>(&t) {
                Ok(Value::Array(a)) => Value::Array(a),
                _ if t.is_empty() => json!([]),
                _ => json!([t]),
            },
            _ => json!([]),
        },
        _ => match s {
            Stored::Text(t) => json!(t),
            Stored::Int(i) => json!(i.to_string()),
            Stored::Real(r) => json!(r.to_string()),
            Stored::Null => json!(""),
        },
    }
}

/// A float64 as Go's `encoding/json` spells it, which is how PocketBase answers and stores every
/// number it decoded: shortest digits, plain from 1e-6 up to 1e21 (`1`, `0.000001`,
/// `100000000000000000000`, `-0`), in exponent form outside it with a signed exponent of at
/// least one digit (`1e+21`, `1e-7`). Finite values only (JSON has no others).
pub(crate) fn go_float(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 || (1e-6..1e21).contains(&a) {
        // Rust's `Display` is the shortest round-tripping digits, never in exponent form.
        return format!("{x}");
    }
    let e = format!("{x:e}");
    match e.split_once('e') {
        Some((m, exp)) if !exp.starts_with('-') => format!("{m}e+{exp}"),
        _ => e,
    }
}

/// serde_json's compact output with numbers spelled as Go writes them ([`go_float`]): serde
/// would write `1.0`, `-0.0`, `1e-6` and `1e+20` where PocketBase writes `1`, `-0`, `0.000001`
/// and `100000000000000000000`.
struct GoNumbers;

impl serde_json::ser::Formatter for GoNumbers {
    fn write_f64<W: ?Sized + std::io::Write>(&mut self, w: &mut W, x: f64) -> std::io::Result<()> {
        w.write_all(go_float(x).as_bytes())
    }
}

/// `v` as PocketBase's JSON encoder writes it, appended to `out`: the API's answers and the
/// json fields' stored text.
pub(crate) fn write_go_json(out: &mut Vec<u8>, v: &(impl serde::Serialize + ?Sized)) {
    let mut ser = serde_json::Serializer::with_formatter(out, GoNumbers);
    // Writing into memory fails only for a map with non-string keys, which no value here has.
    let _ = v.serialize(&mut ser);
}

/// [`write_go_json`] into a new buffer.
pub(crate) fn go_json(v: &(impl serde::Serialize + ?Sized)) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_go_json(&mut out, v);
    out
}

/// [`write_go_json`] as text.
pub(crate) fn go_json_text(v: &(impl serde::Serialize + ?Sized)) -> String {
    String::from_utf8(go_json(v)).unwrap_or_default()
}

/// A json field's value given as JSON (not as text), as PocketBase keeps it: Go decodes it into
/// maps and float64s and encodes it again, so object keys come out sorted and a number keeps
/// only a float64's precision (9007199254740993 becomes 9007199254740992).
fn go_decoded(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort_unstable();
            Value::Object(
                keys.into_iter()
                    .map(|k| (k.clone(), go_decoded(&m[k])))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(go_decoded).collect()),
        Value::Number(n) => {
            const EXACT: u64 = 1 << 53;
            let exact = n.as_u64().is_some_and(|u| u <= EXACT)
                || n.as_i64().is_some_and(|i| i.unsigned_abs() <= EXACT);
            if exact {
                v.clone()
            } else {
                n.as_f64()
                    .and_then(serde_json::Number::from_f64)
                    .map_or(Value::Null, Value::Number)
            }
        }
        other => other.clone(),
    }
}

/// A form value read as a number: [`number`], except that a negative zero stays one, as the
/// float64 Go reads (a text field given `-0` keeps `"-0"`).
pub(crate) fn number_keeping_sign(n: f64) -> Value {
    if n == 0.0 && n.is_sign_negative() {
        return serde_json::Number::from_f64(n).map_or(json!(0), Value::Number);
    }
    number(n)
}

/// A JSON string as Go's `encoding/json` writes it (HTML-safe, U+2028/2029 escaped).
pub(crate) fn go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    #[test]
    fn number_strings_parse_as_gos_parse_float_does() {
        let cases: &[(&str, Option<f64>)] = &[
            ("5", Some(5.0)),
            ("+5", Some(5.0)),
            ("-1.5", Some(-1.5)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("00012", Some(12.0)),
            ("1e5", Some(1e5)),
            ("1E-3", Some(1e-3)),
            ("1_000", Some(1000.0)),
            ("0x1p4", Some(16.0)),
            (" 5 ", None),
            ("", None),
            ("5e", None),
            ("1e400", None),
            ("0x10", None),
            ("_1", None),
            ("1_", None),
            ("1__0", None),
            ("--5", None),
            ("+-5", None),
            ("+nan", None),
            ("infx", None),
        ];
        for (s, want) in cases {
            assert_eq!(go_parse_float(s), *want, "{s:?}");
        }
        for s in ["NaN", "nan", "inf", "-Inf", "+INFINITY", "infinity"] {
            assert!(go_parse_float(s).is_some_and(|n| !n.is_finite()), "{s:?}");
        }
    }

    #[test]
    fn a_nan_or_infinity_sent_to_a_number_field_is_not_a_number() {
        let f = crate::schema::define::field_from_json(
            json!({"id": "n1", "name": "n", "type": "number"})
                .as_object()
                .unwrap()
                .clone(),
        )
        .unwrap();
        for s in ["NaN", "Infinity", "-inf"] {
            let v = coerce(&f, &json!(s));
            assert_eq!(
                validate(&f, &v).unwrap()["code"],
                "validation_not_a_number",
                "{s:?}"
            );
        }
        // Unparseable text is 0, as PocketBase's cast makes it.
        assert_eq!(coerce(&f, &json!("1e400")), json!(0));
    }

    #[test]
    fn numbers_are_spelled_as_go_writes_a_float64() {
        // Each as PocketBase 0.40.6 answered it for a json field given the number as JSON.
        let cases: &[(f64, &str)] = &[
            (1.0, "1"),
            (100.0, "100"),
            (-0.0, "-0"),
            (0.0, "0"),
            (1.5, "1.5"),
            (0.000001, "0.000001"),
            (-1e-7, "-1e-7"),
            (1e-11, "1e-11"),
            (5e-324, "5e-324"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (123456789123.45679, "123456789123.45679"),
            (1.2345678901234569e23, "1.2345678901234569e+23"),
            (-1.7976931348623157e308, "-1.7976931348623157e+308"),
        ];
        for &(x, want) in cases {
            assert_eq!(go_float(x), want, "{x:e}");
        }
        let v = json!({"a": [1.0, -0.0, 1e20, 7], "b": 0.000001});
        assert_eq!(
            go_json_text(&v),
            r#"{"a":[1,-0,100000000000000000000,7],"b":0.000001}"#
        );
    }

    #[test]
    fn json_values_are_kept_as_go_decodes_and_encodes_them() {
        let j = field(json!({"type": "json"}));
        let given: Value =
            serde_json::from_str(r#"{"z":1,"a":{"y":[{"d":1,"c":2}],"b":9007199254740993}}"#)
                .unwrap();
        let kept = coerce(&j, &given);
        // Keys sorted at every level, a number past 2^53 rounded to a float64.
        assert_eq!(
            to_stored(&j, &kept),
            Stored::Text(r#"{"a":{"b":9007199254740992,"y":[{"c":2,"d":1}]},"z":1}"#.into())
        );
        // Given as JSON text, the text's own order is kept.
        let text = coerce(&j, &json!(r#"{"z":1,"a":2}"#));
        assert_eq!(
            to_stored(&j, &text),
            Stored::Text(r#"{"z":1,"a":2}"#.into())
        );
        // The size PocketBase checks is the text's as given, spaces included; a value given as
        // JSON is measured as Go writes it (`1`, not `1.0`).
        let small = field(json!({"type": "json", "maxSize": 10}));
        let size = |e: Option<Value>| e.is_some_and(|e| e["code"] == "validation_json_size_limit");
        assert!(size(json_input_error(&small, &json!("[1,        2]"))));
        assert!(json_input_error(&small, &json!("[1,2]")).is_none());
        let floats = coerce(&small, &json!([1.0, 2.0, 3.0, 4.0]));
        assert!(validate(&small, &floats).is_none());
        assert!(size(validate(&small, &json!([1.5, 2.5, 3.5]))));
    }

    #[test]
    fn json_text_is_refused_as_pocketbase_quotes_it() {
        let j = field(json!({"type": "json"}));
        let small = field(json!({"type": "json", "maxSize": 5}));
        let refused = |e: Option<Value>| e.is_some_and(|e| e["code"] == "validation_invalid_json");
        // A control character quotes as `\x01`: not JSON.
        assert!(refused(json_input_error(&j, &json!("a\u{1}"))));
        assert!(json_input_error(&j, &json!("plain text")).is_none());
        // Too large for the field: the size check answers first (in `validate`).
        assert!(json_input_error(&small, &json!("-1e400")).is_none());
        assert!(refused(json_input_error(&j, &json!("-1e400"))));
        // U+FFFD standing for a byte that was not UTF-8 is refused; a genuine one is text.
        let fffd = json!("\u{fffd}\u{fffd}a\u{fffd}");
        assert!(refused(json_input_error_not_utf8(&j, &fffd)));
        assert!(json_input_error(&j, &fffd).is_none());
        // JSON text is JSON whatever its bytes were.
        assert!(json_input_error_not_utf8(&j, &json!("\"\u{fffd}\"")).is_none());
    }

    #[test]
    fn json_nests_as_deep_as_pocketbase_allows_and_no_deeper() {
        let nested =
            |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
        assert!(parse_json(&nested(128)).is_ok());
        // The server's threads have the stack for this; the test's own thread may not.
        let deep = std::thread::Builder::new()
            .stack_size(crate::THREAD_STACK_BYTES)
            .spawn(move || {
                let v = parse_json(&nested(JSON_DEPTH_MAX));
                (v.is_ok(), parse_json(&nested(JSON_DEPTH_MAX + 1)).is_err())
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(deep, (true, true));
        // Brackets inside strings do not count.
        let s = format!("[\"{}\"]", "[".repeat(20_000));
        assert!(parse_json(s.as_bytes()).is_ok());
        assert!(parse_json(b"[1,").is_err());
    }

    use super::*;
    use crate::schema::define::field_from_json;

    fn field(v: Value) -> Field {
        let Value::Object(m) = v else { panic!() };
        let mut m = m;
        m.entry("name").or_insert(json!("f"));
        field_from_json(m).unwrap()
    }

    #[test]
    fn coercions_follow_pocketbase() {
        let n = field(json!({"type":"number"}));
        assert_eq!(coerce(&n, &json!("3.5")), json!(3.5));
        assert_eq!(coerce(&n, &json!("abc")), json!(0));
        assert_eq!(coerce(&n, &json!(true)), json!(1));
        assert_eq!(coerce(&n, &json!("1e3")), json!(1000));
        let b = field(json!({"type":"bool"}));
        assert_eq!(coerce(&b, &json!("1")), json!(true));
        assert_eq!(coerce(&b, &json!("yes")), json!(false));
        let d = field(json!({"type":"date"}));
        assert_eq!(
            coerce(&d, &json!("2024-05-06")),
            json!("2024-05-06 00:00:00.000Z")
        );
        assert_eq!(
            coerce(&d, &json!("2024-05-06T07:08:09+02:00")),
            json!("2024-05-06 05:08:09.000Z")
        );
        assert_eq!(
            coerce(&d, &json!("2024-05-06T07:08:09.123456Z")),
            json!("2024-05-06 07:08:09.123Z")
        );
        assert_eq!(coerce(&d, &json!("garbage")), json!(""));
        let s1 = field(json!({"type":"select","values":["a","b"]}));
        assert_eq!(coerce(&s1, &json!(["a", "b"])), json!("b"));
        let s2 = field(json!({"type":"select","values":["a","b"],"maxSelect":3}));
        assert_eq!(coerce(&s2, &json!(["b", "b", "a"])), json!(["b", "a"]));
        assert_eq!(coerce(&s2, &json!("a")), json!(["a"]));
        let j = field(json!({"type":"json"}));
        assert_eq!(coerce(&j, &json!("123")), json!(123));
        assert_eq!(coerce(&j, &json!("not json {")), json!("not json {"));
        assert_eq!(coerce(&j, &json!("{\"m\":1}")), json!({"m": 1}));
    }

    #[test]
    fn validation_codes_and_params() {
        let t = field(json!({"type":"text","max":3,"required":true}));
        assert_eq!(
            validate(&t, &json!("")).unwrap()["code"],
            "validation_required"
        );
        let e = validate(&t, &json!("abcd")).unwrap();
        assert_eq!(e["params"], json!({"max": 3}));
        let n = field(json!({"type":"number","min":0,"max":5,"onlyInt":true}));
        assert_eq!(
            validate(&n, &json!(-1)).unwrap()["code"],
            "validation_min_number_constraint"
        );
        assert_eq!(
            validate(&n, &json!(6)).unwrap()["code"],
            "validation_max_number_constraint"
        );
        assert_eq!(
            validate(&n, &json!(2.5)).unwrap()["code"],
            "validation_only_int_constraint"
        );
        let em = field(json!({"type":"email"}));
        assert_eq!(
            validate(&em, &json!("nope")).unwrap()["code"],
            "validation_is_email"
        );
        assert!(validate(&em, &json!("a@b.co")).is_none());
        // Quoted local parts as PocketBase 0.40.6 reads them: a quote and one character,
        // repeated, then a closing quote (see EMAIL_RE).
        for ok in [
            r#""q"@x.io"#,
            r#""@x.io"#,
            r#""a"b"@x.io"#,
            r#""(a"@x.io"#,
            r#""(("@x.io"#,
        ] {
            assert!(is_email(ok), "{ok}");
        }
        for bad in [
            r#""qq"@x.io"#,
            r#"""@x.io"#,
            r#"" "@x.io"#,
            r#""\a"@x.io"#,
            "a@b",
            "a@b.1c",
        ] {
            assert!(!is_email(bad), "{bad}");
        }
        let u = field(json!({"type":"url"}));
        assert_eq!(
            validate(&u, &json!("nope")).unwrap()["code"],
            "validation_invalid_url"
        );
        assert!(validate(&u, &json!("https://example.com/a?b=c")).is_none());
        let g = field(json!({"type":"geoPoint"}));
        assert_eq!(
            validate(&g, &json!({"lon":200,"lat":0})).unwrap()["code"],
            "validation_invalid_longitude"
        );
    }

    #[test]
    fn only_int_admits_minus_two_to_the_63_as_go_converts_it() {
        let n = field(json!({"name": "n", "type": "number", "onlyInt": true}));
        assert!(validate(&n, &json!(-9_223_372_036_854_775_807_i64)).is_none());
        assert_eq!(
            validate(&n, &json!(9_223_372_036_854_775_807_i64)).unwrap()["code"],
            "validation_only_int_constraint"
        );
        assert_eq!(
            validate(&n, &json!(-1e19)).unwrap()["code"],
            "validation_only_int_constraint"
        );
    }

    #[test]
    fn stored_values_round_trip() {
        for (def, v) in [
            (json!({"type":"number"}), json!(42.5)),
            (json!({"type":"number"}), json!(7)),
            (json!({"type":"bool"}), json!(true)),
            (json!({"type":"json"}), json!({"k":[1,2,{"x":null}]})),
            (json!({"type":"json"}), Value::Null),
            (json!({"type":"geoPoint"}), json!({"lon":23.32,"lat":42.69})),
            (
                json!({"type":"select","values":["a","c"],"maxSelect":2}),
                json!(["a", "c"]),
            ),
            (json!({"type":"text"}), json!("  spaced  ")),
        ] {
            let f = field(def);
            assert_eq!(from_stored(&f, to_stored(&f, &v)), v);
        }
    }

    #[test]
    fn modifiers_append_prepend_and_remove() {
        let s = field(json!({"type":"select","values":["a","b","c"],"maxSelect":3}));
        assert_eq!(
            apply_modifier(&s, &json!(["b"]), Modifier::Append, &json!("c")),
            json!(["b", "c"])
        );
        assert_eq!(
            apply_modifier(&s, &json!(["b", "c"]), Modifier::Prepend, &json!("a")),
            json!(["a", "b", "c"])
        );
        assert_eq!(
            apply_modifier(
                &s,
                &json!(["a", "b", "c"]),
                Modifier::Subtract,
                &json!(["a", "c"])
            ),
            json!(["b"])
        );
        let n = field(json!({"type":"number"}));
        assert_eq!(
            apply_modifier(&n, &json!(10), Modifier::Subtract, &json!(20)),
            json!(-10)
        );
        assert_eq!(split_modifier("+tags"), ("tags", Some(Modifier::Prepend)));
        assert_eq!(
            split_modifier("views-"),
            ("views", Some(Modifier::Subtract))
        );
    }
}
