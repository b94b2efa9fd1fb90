//! Validation of a whole settings value, answering PocketBase's nested field errors: per key the
//! first rule that fails, list items keyed by their index, codes, messages and params as
//! PocketBase 0.40.6 gives them. Rules other than "required" pass an empty value, as PocketBase's
//! validation library does.

use super::{Backups, Batch, Logs, Meta, RateLimits, S3, Settings, Smtp};
use serde_json::{Map, Value, json};
use std::net::IpAddr;
use std::sync::LazyLock;

/// Every error in `s`, keyed as PocketBase keys them; empty when the settings are valid.
pub(super) fn settings(s: &Settings) -> Map<String, Value> {
    let mut e = Errors::default();
    e.list("superuserIPs", each_ip(&s.superuser_ips));
    e.nested("meta", meta(&s.meta));
    e.nested("logs", logs(&s.logs));
    e.nested("smtp", smtp(&s.smtp));
    e.nested("s3", s3(&s.s3));
    e.nested("backups", backups(&s.backups));
    e.nested("batch", batch(&s.batch));
    e.nested("rateLimits", rate_limits(&s.rate_limits));
    e.done()
}

/// Errors of one object, with PocketBase's (Go map) alphabetical key order.
#[derive(Default)]
struct Errors(std::collections::BTreeMap<String, Value>);

impl Errors {
    /// The first failing rule of a field, if any.
    fn field(&mut self, name: &str, first: Option<Value>) {
        if let Some(err) = first {
            self.0.insert(name.into(), err);
        }
    }
    fn nested(&mut self, name: &str, inner: Map<String, Value>) {
        if !inner.is_empty() {
            self.0.insert(name.into(), Value::Object(inner));
        }
    }
    fn list(&mut self, name: &str, inner: Map<String, Value>) {
        self.nested(name, inner);
    }
    fn done(self) -> Map<String, Value> {
        self.0.into_iter().collect()
    }
}

fn err(code: &str, message: &str) -> Value {
    json!({"code": code, "message": message})
}

fn required() -> Value {
    err("validation_required", "Cannot be blank.")
}

/// The first error of a chain of rules.
macro_rules! first {
    ($($rule:expr),+ $(,)?) => {{
        let mut out: Option<Value> = None;
        $( if out.is_none() { out = $rule; } )+
        out
    }};
}

fn require_text(v: &str, when: bool) -> Option<Value> {
    (when && v.is_empty()).then(required)
}

fn require_int(v: i64, when: bool) -> Option<Value> {
    (when && v == 0).then(required)
}

/// `Min(n)` on an integer: zero counts as empty and passes.
fn min(v: i64, n: i64) -> Option<Value> {
    (v != 0 && v < n).then(|| {
        json!({"code": "validation_min_greater_equal_than_required",
               "message": format!("Must be no less than {n}."), "params": {"threshold": n}})
    })
}

/// `Length(lo, hi)` in characters; empty passes.
fn length(v: &str, lo: usize, hi: usize) -> Option<Value> {
    let n = v.chars().count();
    if v.is_empty() || (lo..=hi).contains(&n) {
        return None;
    }
    Some(if lo == hi {
        json!({"code": "validation_length_invalid",
               "message": format!("The length must be exactly {lo}."), "params": {"max": hi, "min": lo}})
    } else {
        json!({"code": "validation_length_out_of_range",
               "message": format!("The length must be between {lo} and {hi}."), "params": {"max": hi, "min": lo}})
    })
}

fn one_of(v: &str, allowed: &[&str]) -> Option<Value> {
    (!v.is_empty() && !allowed.contains(&v))
        .then(|| err("validation_in_invalid", "Must be a valid value."))
}

fn check(v: &str, ok: fn(&str) -> bool, code: &str, message: &str) -> Option<Value> {
    (!v.is_empty() && !ok(v)).then(|| err(code, message))
}

fn url(v: &str) -> Option<Value> {
    check(
        v,
        crate::schema::value::is_url,
        "validation_is_url",
        "Must be a valid URL.",
    )
}

fn host(v: &str) -> Option<Value> {
    check(
        v,
        is_host,
        "validation_is_host",
        "Must be a valid IP address or DNS name.",
    )
}

/// `Each(Required, IPOrSubnet)`: every failing item, by index.
fn each_ip(items: &[String]) -> Map<String, Value> {
    let mut e = Errors::default();
    for (i, ip) in items.iter().enumerate() {
        e.field(
            &i.to_string(),
            first!(
                require_text(ip, true),
                (!is_ip_or_subnet(ip)).then(|| err(
                    "validation_invlaid_ip_or_subnet",
                    "Invalid IP or CIDR subnet."
                ))
            ),
        );
    }
    e.done()
}

fn meta(m: &Meta) -> Map<String, Value> {
    let mut e = Errors::default();
    e.field(
        "accentColor",
        first!(
            length(&m.accent_color, 7, 7),
            check(
                &m.accent_color,
                is_hex_color,
                "validation_is_hex_color",
                "Must be a valid hexadecimal color code."
            )
        ),
    );
    e.field(
        "appName",
        first!(require_text(&m.app_name, true), length(&m.app_name, 1, 255)),
    );
    e.field(
        "appURL",
        first!(require_text(&m.app_url, true), url(&m.app_url)),
    );
    e.field(
        "senderName",
        first!(
            require_text(&m.sender_name, true),
            length(&m.sender_name, 1, 255)
        ),
    );
    e.field(
        "senderAddress",
        first!(
            check(
                &m.sender_address,
                is_email,
                "validation_is_email",
                "Must be a valid email address."
            ),
            require_text(&m.sender_address, true)
        ),
    );
    e.done()
}

/// The largest integer a JSON number holds exactly (2^53 - 1): PocketBase's ceiling for the
/// logs numbers, which its dashboard edits as JavaScript numbers.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// `Max(n)` on an integer: zero passes.
fn max(v: i64, n: i64) -> Option<Value> {
    (v != 0 && v > n).then(|| {
        json!({"code": "validation_max_less_equal_than_required",
               "message": format!("Must be no greater than {n}."), "params": {"threshold": n}})
    })
}

fn logs(l: &Logs) -> Map<String, Value> {
    let mut e = Errors::default();
    e.field(
        "maxDays",
        first!(min(l.max_days, 0), max(l.max_days, MAX_SAFE_INTEGER)),
    );
    e.field(
        "maxDataSize",
        first!(
            min(l.max_data_size, 0),
            max(l.max_data_size, MAX_SAFE_INTEGER)
        ),
    );
    e.field("minLevel", max(l.min_level, MAX_SAFE_INTEGER));
    e.done()
}

fn smtp(s: &Smtp) -> Map<String, Value> {
    let mut e = Errors::default();
    e.field(
        "host",
        first!(require_text(&s.host, s.enabled), host(&s.host)),
    );
    e.field(
        "port",
        first!(require_int(s.port, s.enabled), min(s.port, 0)),
    );
    e.field("authMethod", one_of(&s.auth_method, &["LOGIN", "PLAIN"]));
    e.field("localName", host(&s.local_name));
    e.done()
}

fn s3(s: &S3) -> Map<String, Value> {
    let mut e = Errors::default();
    e.field(
        "endpoint",
        first!(url(&s.endpoint), require_text(&s.endpoint, s.enabled)),
    );
    e.field("bucket", require_text(&s.bucket, s.enabled));
    e.field("region", require_text(&s.region, s.enabled));
    e.field("accessKey", require_text(&s.access_key, s.enabled));
    e.field("secret", require_text(&s.secret, s.enabled));
    e.done()
}

fn backups(b: &Backups) -> Map<String, Value> {
    let mut e = Errors::default();
    e.nested("s3", s3(&b.s3));
    let cron = if b.cron.is_empty() {
        None
    } else {
        crate::cron::parse(&b.cron)
            .err()
            .map(|why| err("validation_invalid_cron", &sentence(&why)))
    };
    e.field("cron", cron);
    e.field(
        "cronMaxKeep",
        first!(
            require_int(b.cron_max_keep, !b.cron.is_empty()),
            min(b.cron_max_keep, 1)
        ),
    );
    e.done()
}

fn batch(b: &Batch) -> Map<String, Value> {
    let mut e = Errors::default();
    e.field(
        "maxRequests",
        first!(
            require_int(b.max_requests, b.enabled),
            min(b.max_requests, 0)
        ),
    );
    e.field(
        "timeout",
        first!(require_int(b.timeout, b.enabled), min(b.timeout, 0)),
    );
    e.field("maxBodySize", min(b.max_body_size, 0));
    e.done()
}

/// A rate limit rule's label: a tag, `collection:action`, `*:action`, a path or path prefix, or
/// `METHOD /path` (Go's `\w` is ASCII).
static RULE_LABEL: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^(?:[0-9A-Za-z_]+ /[0-9A-Za-z_/-]*|/[0-9A-Za-z_/-]*|[0-9A-Za-z_]+:[0-9A-Za-z_]+|\*:[0-9A-Za-z_]+|[0-9A-Za-z_]+)$")
        .expect("static regex")
});

fn rate_limits(r: &RateLimits) -> Map<String, Value> {
    let mut e = Errors::default();
    // The list itself first, then every rule, and only a list of valid rules is checked for
    // conflicting labels (the order PocketBase 0.40.6 reports them in).
    if r.enabled && r.rules.is_empty() {
        e.field("rules", Some(required()));
    } else {
        let mut items = Errors::default();
        for (i, rule) in r.rules.iter().enumerate() {
            let mut one = Errors::default();
            one.field(
                "label",
                first!(
                    require_text(&rule.label, true),
                    check(
                        &rule.label,
                        |l| RULE_LABEL.is_match(l),
                        "validation_match_invalid",
                        "Must be in a valid format."
                    )
                ),
            );
            one.field(
                "maxRequests",
                first!(
                    require_int(rule.max_requests, true),
                    min(rule.max_requests, 1)
                ),
            );
            one.field(
                "duration",
                first!(require_int(rule.duration, true), min(rule.duration, 1)),
            );
            one.field("audience", one_of(&rule.audience, &["", "@guest", "@auth"]));
            items.nested(&i.to_string(), one.done());
        }
        let items = items.done();
        if !items.is_empty() {
            e.nested("rules", items);
        } else if let Some(conflict) = conflicting_label(r) {
            e.nested("rules", conflict);
        }
    }
    e.list("excludedIPs", each_ip(&r.excluded_ips));
    e.done()
}

/// The first rule whose label and audience repeat, or prefix, an earlier one's.
fn conflicting_label(r: &RateLimits) -> Option<Map<String, Value>> {
    let mut seen: Vec<String> = Vec::new();
    for (i, rule) in r.rules.iter().enumerate() {
        let key = format!("{}@@{}", rule.label, rule.audience);
        if seen
            .iter()
            .any(|k| k.starts_with(&key) || key.starts_with(k.as_str()))
        {
            let mut m = Map::new();
            m.insert(
                i.to_string(),
                json!({"label": {
                    "code": "validation_conflicting_rate_limit_rule",
                    "message": format!("Rate limit rule configuration with label {} already exists or conflicts with another rule.", rule.label),
                    "params": {"label": rule.label}}}),
            );
            return Some(m);
        }
        seen.push(key);
    }
    None
}

/// PocketBase's way of showing an error text as a message: trimmed, first letter upper case,
/// ending with a period unless it ends with `.`, `?` or `!`.
fn sentence(s: &str) -> String {
    let s = s.trim();
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return String::new();
    };
    let mut out: String = first.to_uppercase().chain(chars).collect();
    if !out.ends_with(['.', '?', '!']) {
        out.push('.');
    }
    out
}

// ---- the value checks -------------------------------------------------------------------------

/// An IP address as Go's `netip.ParseAddr` reads one (an IPv6 zone allowed).
fn parse_addr(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    // IPv6 with a zone: `fe80::1%eth0`.
    let (addr, zone) = s.split_once('%')?;
    if zone.is_empty() {
        return None;
    }
    addr.parse::<std::net::Ipv6Addr>().ok().map(IpAddr::V6)
}

/// A CIDR prefix as Go's `netip.ParsePrefix` reads one (no zone, bits in range).
fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = s.split_once('/')?;
    if bits.is_empty()
        || !bits.bytes().all(|b| b.is_ascii_digit())
        || (bits.len() > 1 && bits.starts_with('0'))
    {
        return None;
    }
    let ip: IpAddr = addr.parse().ok()?;
    let bits: u8 = bits.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (bits <= max).then_some((ip, bits))
}

fn is_ip_or_subnet(s: &str) -> bool {
    parse_prefix(s).is_some() || parse_addr(s).is_some()
}

/// PocketBase's `isIPInList`: `ip` equals one of the addresses or falls in one of the subnets.
pub(crate) fn ip_in_list(list: &[String], ip: &str) -> bool {
    let Some(search) = parse_addr(ip) else {
        return false;
    };
    list.iter().any(|item| {
        if let Some((net, bits)) = parse_prefix(item) {
            return prefix_contains(net, bits, search);
        }
        parse_addr(item) == Some(search)
    })
}

fn prefix_contains(net: IpAddr, bits: u8, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits))
            };
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits))
            };
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

fn is_hex_color(s: &str) -> bool {
    let hex = s.strip_prefix('#').unwrap_or(s);
    matches!(hex.len(), 3 | 6) && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Settings' addresses are checked by the validator of record email fields (PocketBase uses
/// one for both).
pub(crate) use crate::schema::value::is_email;

/// A DNS name (labels of letters, digits, `_` and `-` up to 63 long, not starting with `-`) or
/// an IP address.
fn is_host(s: &str) -> bool {
    if s.parse::<IpAddr>().is_ok() {
        return true;
    }
    if s.is_empty() || s.chars().filter(|&c| c != '.').count() > 255 {
        return false;
    }
    let body = s.strip_suffix(['.', '_']).unwrap_or(s);
    let label_ok = |l: &str| {
        let mut cs = l.chars();
        matches!(cs.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
            && l.len() <= 63
            && cs.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    !body.is_empty() && body.split('.').all(label_ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(patch: Value) -> Value {
        let Value::Object(m) = patch else {
            panic!("object")
        };
        let s = super::super::bind::apply(&Settings::default(), &m).unwrap();
        Value::Object(settings(&s))
    }

    #[test]
    fn defaults_are_valid() {
        assert!(settings(&Settings::default()).is_empty());
    }

    #[test]
    fn nested_errors_in_pocketbases_shape() {
        assert_eq!(
            errors(
                json!({"meta": {"appURL": "notaurl", "senderAddress": "bad", "accentColor": "red"}})
            ),
            json!({"meta": {
                "accentColor": {"code": "validation_length_invalid", "message": "The length must be exactly 7.", "params": {"max": 7, "min": 7}},
                "appURL": {"code": "validation_is_url", "message": "Must be a valid URL."},
                "senderAddress": {"code": "validation_is_email", "message": "Must be a valid email address."}}})
        );
        assert_eq!(
            errors(json!({"superuserIPs": ["1.2.3.4", "bad", ""]})),
            json!({"superuserIPs": {
                "1": {"code": "validation_invlaid_ip_or_subnet", "message": "Invalid IP or CIDR subnet."},
                "2": {"code": "validation_required", "message": "Cannot be blank."}}})
        );
        assert_eq!(
            errors(json!({"backups": {"cron": "61 * * * *", "cronMaxKeep": 0}})),
            json!({"backups": {
                "cron": {"code": "validation_invalid_cron", "message": "Invalid segment value - must be between the min and max of the segment."},
                "cronMaxKeep": {"code": "validation_required", "message": "Cannot be blank."}}})
        );
        assert_eq!(
            errors(json!({"rateLimits": {"rules": [
                {"label": "/api/", "duration": 1, "maxRequests": 1},
                {"label": "/api/x", "duration": 1, "maxRequests": 1},
                {"label": "/api/", "duration": 1, "maxRequests": 1}]}})),
            json!({"rateLimits": {"rules": {"2": {"label": {
                "code": "validation_conflicting_rate_limit_rule",
                "message": "Rate limit rule configuration with label /api/ already exists or conflicts with another rule.",
                "params": {"label": "/api/"}}}}}})
        );
    }

    #[test]
    fn value_checks() {
        for ok in [
            "a@b.c",
            "a@b.co",
            "a.b@c-d.ef",
            "ü@b.co",
            "a@ü.co",
            "x@a.1b.c",
        ] {
            assert!(is_email(ok), "{ok}");
        }
        // The last part must start and end with a letter (checked on PocketBase 0.40.6).
        for bad in [
            "a@b",
            "a@1.2",
            "a",
            "@b.co",
            "a@.co",
            "a..b@c.de",
            "x@a.b.1c",
            "x@a.b.c1",
        ] {
            assert!(!is_email(bad), "{bad}");
        }
        for ok in [
            "http://localhost:8090",
            "ftp://x.y",
            "localhost:8090",
            "https://a.b/c?d#e",
            "http://[::1]:80/",
        ] {
            assert!(crate::schema::value::is_url(ok), "{ok}");
        }
        for bad in [
            "bad url",
            "notaurl",
            ".a.com",
            "gopher://a.b",
            "http://a b.c",
        ] {
            assert!(!crate::schema::value::is_url(bad), "{bad}");
        }
        for ok in ["smtp.example.com", "1.2.3.4", "::1", "a_b", "x."] {
            assert!(is_host(ok), "{ok}");
        }
        for bad in ["bad host!", "-a.com", ""] {
            assert!(!is_host(bad), "{bad}");
        }
        assert!(is_ip_or_subnet("fe80::1%eth0"));
        assert!(is_ip_or_subnet("10.0.0.0/8"));
        assert!(!is_ip_or_subnet("1.2.3.4/33"));
        assert!(!is_ip_or_subnet("01.2.3.4"));
        assert!(!is_ip_or_subnet(" 1.2.3.4"));
        assert!(ip_in_list(&["10.0.0.0/8".into()], "10.1.2.3"));
        assert!(!ip_in_list(&["10.0.0.0/8".into()], "11.1.2.3"));
        assert!(ip_in_list(&["::1".into(), "127.0.0.1".into()], "127.0.0.1"));
    }
}
