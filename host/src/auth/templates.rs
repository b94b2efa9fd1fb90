//! The mails of auth collections: the collection's own template (`verificationTemplate`,
//! `resetPasswordTemplate`, `confirmEmailChangeTemplate`, `otp.emailTemplate`,
//! `authAlert.emailTemplate`) with PocketBase's placeholders resolved (`{APP_NAME}`,
//! `{APP_URL}`, `{TOKEN}`, `{OTP}`, `{OTP_ID}`, `{ALERT_INFO}`, `{RECORD:field}`), the body set
//! in the mail layout.

use crate::schema::value::{Stored, from_stored};
use crate::schema::{Collection, FieldType};
use crate::settings::Settings;
use serde_json::Value;

/// Which of the collection's mails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Verification,
    PasswordReset,
    EmailChange,
    Otp,
    AuthAlert,
}

impl Kind {
    fn template(self, c: &Collection) -> Option<&Value> {
        match self {
            Kind::Verification => c.auth_option("verificationTemplate"),
            Kind::PasswordReset => c.auth_option("resetPasswordTemplate"),
            Kind::EmailChange => c.auth_option("confirmEmailChangeTemplate"),
            Kind::Otp => c.auth_option("otp")?.get("emailTemplate"),
            Kind::AuthAlert => c.auth_option("authAlert")?.get("emailTemplate"),
        }
    }
}

/// A template's subject and the mail's full HTML, for `record` (a row of `c`). `extra` holds
/// the flow's own placeholders (`{TOKEN}`, `{OTP}`, ...).
pub(crate) fn render(
    c: &Collection,
    record: &[Stored],
    settings: &Settings,
    kind: Kind,
    extra: &[(&str, &str)],
) -> (String, String) {
    let t = kind.template(c);
    let text = |k: &str| {
        t.and_then(|t| t.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let mut values: Vec<(String, String)> = extra
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    values.push(("{APP_NAME}".into(), settings.meta.app_name.clone()));
    values.push(("{APP_URL}".into(), settings.meta.app_url.clone()));
    for (f, v) in c.fields.iter().zip(record) {
        if f.hidden {
            continue;
        }
        let s = placeholder_value(f.kind, from_stored(f, v.clone()));
        // Dates, booleans and numbers cannot hold markup; everything else is escaped in case
        // the mail is rendered as HTML somewhere.
        let s = match f.kind {
            FieldType::Autodate | FieldType::Date | FieldType::Bool | FieldType::Number => s,
            _ => escape_html(&s),
        };
        values.push((format!("{{RECORD:{}}}", f.name), s));
    }
    let subject = resolve(&text("subject"), &values);
    let body = resolve(&text("body"), &values);
    (subject, layout(&body))
}

/// A field's value as PocketBase's `GetString` gives it: text as it is, booleans and numbers
/// printed, a json field's raw JSON, lists (multi selects, relations, files) nothing.
fn placeholder_value(kind: FieldType, v: Value) -> String {
    match (kind, v) {
        (FieldType::Json, Value::Null) => String::new(),
        (FieldType::Json, v) => v.to_string(),
        (_, Value::String(s)) => s,
        (_, Value::Bool(b)) => b.to_string(),
        (_, Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// Each `{NAME}` of `values` replaced once, in one pass: a value that itself holds a
/// placeholder is left as it is.
fn resolve(template: &str, values: &[(String, String)]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        match values.iter().find(|(k, _)| rest.starts_with(k.as_str())) {
            Some((k, v)) => {
                out.push_str(v);
                rest = &rest[k.len()..];
            }
            None => {
                out.push('{');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

pub(crate) fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(ch),
        }
    }
    out
}

/// The mail's HTML document around a template's body.
fn layout(body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html>\n<head>\n<meta http-equiv=\"Content-Type\" content=\"text/html; charset=UTF-8\" />\n\
<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\" />\n<style>\n\
body {{ margin: 0; padding: 20px 30px; color: #1b1b1f; background: #fff; font: 14px/20px sans-serif; }}\n\
p {{ margin: 10px 0; }}\n\
.btn {{ display: inline-block; padding: 0 20px; line-height: 40px; min-width: 150px; text-align: center; \
border-radius: 6px; font-weight: bold; text-decoration: none; color: #fff !important; background: #1b1b1f !important; }}\n\
</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn placeholders_are_replaced_once_each_occurrence() {
        let v = pairs(&[("{APP_NAME}", "Acme {TOKEN}"), ("{TOKEN}", "t1")]);
        assert_eq!(
            resolve("{APP_NAME}: {TOKEN} {TOKEN} {UNKNOWN} {", &v),
            "Acme {TOKEN}: t1 t1 {UNKNOWN} {"
        );
    }

    #[test]
    fn record_values_are_escaped_except_plain_types() {
        assert_eq!(escape_html("<b>&\"'"), "&lt;b&gt;&amp;&#34;&#39;");
        assert_eq!(
            placeholder_value(FieldType::Json, serde_json::json!("x")),
            "\"x\""
        );
        assert_eq!(
            placeholder_value(FieldType::Bool, serde_json::json!(false)),
            "false"
        );
        assert_eq!(
            placeholder_value(FieldType::Select, serde_json::json!(["a"])),
            ""
        );
    }
}
