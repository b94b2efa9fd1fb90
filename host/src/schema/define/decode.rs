//! A submitted collection body decoded onto the collection being defined, with the strictness of
//! PocketBase's typed decoder: every known key must have its Go type (an integer option refuses
//! `1.5` and `"5"`, a list refuses a string), `null` resets a key to its zero value, unknown keys
//! are ignored, and the field list is replaced whole (each field decoded fresh from its type's
//! defaults).

use super::Model;
use crate::schema::FieldType;
use crate::schema::value::normalize_date;
use serde_json::{Map, Value, json};

/// What a body key must hold.
#[derive(Clone, Copy)]
pub(super) enum Shape {
    /// A string (`null` is "").
    Str,
    /// A string or `null` (a rule).
    OptStr,
    Bool,
    /// An integer literal within 64 bits.
    Int,
    /// Any number, or `null`.
    OptFloat,
    /// A list of strings (`null` is the empty list).
    StrList,
    /// A date string, kept in PocketBase's storage form ("" when it does not parse).
    Date,
    /// An object of these keys (merged into the current value; `null` resets every key).
    Obj(&'static [(&'static str, Shape)]),
    /// A list of objects, kept as sent (OAuth2 providers).
    ObjList,
}

/// The decoder's refusal: which key did not have its type.
pub(super) struct Bad(pub String);

const TEMPLATE: Shape = Shape::Obj(&[("subject", Shape::Str), ("body", Shape::Str)]);
const TOKEN: Shape = Shape::Obj(&[("secret", Shape::Str), ("duration", Shape::Int)]);

/// The auth options (every collection's body may carry them; only auth collections keep them).
pub(super) const AUTH_OPTIONS: &[(&str, Shape)] = &[
    ("authRule", Shape::OptStr),
    ("manageRule", Shape::OptStr),
    (
        "authAlert",
        Shape::Obj(&[("enabled", Shape::Bool), ("emailTemplate", TEMPLATE)]),
    ),
    (
        "oauth2",
        Shape::Obj(&[
            ("providers", Shape::ObjList),
            (
                "mappedFields",
                Shape::Obj(&[
                    ("id", Shape::Str),
                    ("name", Shape::Str),
                    ("username", Shape::Str),
                    ("avatarURL", Shape::Str),
                ]),
            ),
            ("enabled", Shape::Bool),
        ]),
    ),
    (
        "passwordAuth",
        Shape::Obj(&[("enabled", Shape::Bool), ("identityFields", Shape::StrList)]),
    ),
    (
        "mfa",
        Shape::Obj(&[
            ("enabled", Shape::Bool),
            ("duration", Shape::Int),
            ("rule", Shape::Str),
        ]),
    ),
    (
        "otp",
        Shape::Obj(&[
            ("enabled", Shape::Bool),
            ("duration", Shape::Int),
            ("length", Shape::Int),
            ("emailTemplate", TEMPLATE),
        ]),
    ),
    ("authToken", TOKEN),
    ("passwordResetToken", TOKEN),
    ("emailChangeToken", TOKEN),
    ("verificationToken", TOKEN),
    ("fileToken", TOKEN),
    ("verificationTemplate", TEMPLATE),
    ("resetPasswordTemplate", TEMPLATE),
    ("confirmEmailChangeTemplate", TEMPLATE),
];

/// Every auth option at its zero value (a collection that is not an auth collection).
pub(super) fn zero_auth_options() -> Map<String, Value> {
    AUTH_OPTIONS
        .iter()
        .map(|(k, s)| ((*k).to_owned(), zero(*s)))
        .collect()
}

/// The zero value of a shape.
fn zero(shape: Shape) -> Value {
    match shape {
        Shape::Str | Shape::Date => json!(""),
        Shape::OptStr | Shape::OptFloat => Value::Null,
        Shape::Bool => json!(false),
        Shape::Int => json!(0),
        Shape::StrList | Shape::ObjList => json!([]),
        Shape::Obj(keys) => Value::Object(
            keys.iter()
                .map(|(k, s)| ((*k).to_owned(), zero(*s)))
                .collect(),
        ),
    }
}

/// `src` decoded as `shape` onto `dst`.
pub(super) fn merge(dst: &mut Value, src: &Value, shape: Shape, key: &str) -> Result<(), Bad> {
    let bad = || Bad(format!("{key} has the wrong type"));
    if src.is_null() {
        *dst = zero(shape);
        return Ok(());
    }
    *dst = match (shape, src) {
        (Shape::Str | Shape::OptStr, Value::String(s)) => json!(s),
        (Shape::Bool, Value::Bool(b)) => json!(b),
        (Shape::Int, Value::Number(n)) => json!(integer(n).ok_or_else(bad)?),
        (Shape::OptFloat, Value::Number(n)) => {
            let f = n.as_f64().filter(|f| f.is_finite()).ok_or_else(bad)?;
            crate::schema::value::number(f)
        }
        (Shape::StrList, Value::Array(a)) => {
            let mut out = Vec::with_capacity(a.len());
            for v in a {
                match v {
                    Value::String(s) => out.push(json!(s)),
                    Value::Null => out.push(json!("")),
                    _ => return Err(bad()),
                }
            }
            Value::Array(out)
        }
        (Shape::ObjList, Value::Array(a)) => {
            if a.iter().any(|v| !v.is_object() && !v.is_null()) {
                return Err(bad());
            }
            // An item naming an item already there is decoded onto it, as PocketBase decodes
            // OAuth2 providers: what it leaves out (the client secret, which answers never
            // show) keeps its value.
            let old = match std::mem::take(dst) {
                Value::Array(old) => old,
                _ => Vec::new(),
            };
            let named = |v: &Value| v.get("name").and_then(Value::as_str).map(str::to_owned);
            Value::Array(
                a.iter()
                    .map(|v| {
                        let name = named(v);
                        let merged = match old.iter().find(|o| name.is_some() && named(o) == name) {
                            Some(o) => {
                                let mut merged = o.clone();
                                overlay(&mut merged, v);
                                merged
                            }
                            None => v.clone(),
                        };
                        provider_shape(merged)
                    })
                    .collect(),
            )
        }
        (Shape::Date, Value::String(s)) => json!(normalize_date(s)),
        (Shape::Obj(keys), Value::Object(m)) => {
            let mut cur = match std::mem::take(dst) {
                Value::Object(o) => o,
                _ => match zero(shape) {
                    Value::Object(o) => o,
                    _ => Map::new(),
                },
            };
            for (k, s) in keys {
                if let Some(v) = m.get(*k) {
                    let slot = cur.entry((*k).to_owned()).or_insert_with(|| zero(*s));
                    merge(slot, v, *s, k)?;
                }
            }
            Value::Object(cur)
        }
        _ => return Err(bad()),
    };
    Ok(())
}

/// An OAuth2 provider's settings with every member PocketBase keeps (the string ones default
/// to "", `pkce` to null, `extra` to {}), and no other.
fn provider_shape(v: Value) -> Value {
    let Value::Object(mut m) = v else {
        return v;
    };
    let mut out = Map::new();
    for k in [
        "name",
        "clientId",
        "clientSecret",
        "authURL",
        "tokenURL",
        "userInfoURL",
        "displayName",
    ] {
        let s = match m.remove(k) {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        out.insert(k.to_owned(), Value::String(s));
    }
    let pkce = match m.remove("pkce") {
        Some(Value::Bool(b)) => Value::Bool(b),
        _ => Value::Null,
    };
    out.insert("pkce".to_owned(), pkce);
    let extra = match m.remove("extra") {
        Some(Value::Object(e)) => Value::Object(e),
        _ => Value::Object(Map::new()),
    };
    out.insert("extra".to_owned(), extra);
    Value::Object(out)
}

/// `src` over `dst`: objects member by member (recursively), anything else replaced.
fn overlay(dst: &mut Value, src: &Value) {
    match (dst, src) {
        (Value::Object(d), Value::Object(s)) => {
            for (k, v) in s {
                match d.get_mut(k) {
                    Some(slot) => overlay(slot, v),
                    None => {
                        d.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (d, s) => *d = s.clone(),
    }
}

/// A JSON number as a Go `int`: an integer literal within 64 bits (`5.0` and `1e3` are not).
fn integer(n: &serde_json::Number) -> Option<i64> {
    if let Some(i) = n.as_i64() {
        return Some(i);
    }
    // `-0` is read as a float; it is still the integer 0.
    n.as_f64().filter(|f| *f == 0.0).map(|_| 0)
}

/// The keys of each field type besides the common ones, with their shapes.
fn type_keys(kind: FieldType) -> &'static [(&'static str, Shape)] {
    match kind {
        FieldType::Text => &[
            ("min", Shape::Int),
            ("max", Shape::Int),
            ("pattern", Shape::Str),
            ("autogeneratePattern", Shape::Str),
            ("primaryKey", Shape::Bool),
        ],
        FieldType::Number => &[
            ("min", Shape::OptFloat),
            ("max", Shape::OptFloat),
            ("onlyInt", Shape::Bool),
        ],
        FieldType::Email | FieldType::Url => &[
            ("exceptDomains", Shape::StrList),
            ("onlyDomains", Shape::StrList),
        ],
        FieldType::Editor => &[("maxSize", Shape::Int), ("convertURLs", Shape::Bool)],
        FieldType::Date => &[("min", Shape::Date), ("max", Shape::Date)],
        FieldType::Autodate => &[("onCreate", Shape::Bool), ("onUpdate", Shape::Bool)],
        FieldType::Select => &[("values", Shape::StrList), ("maxSelect", Shape::Int)],
        FieldType::File => &[
            ("maxSize", Shape::Int),
            ("maxSelect", Shape::Int),
            ("mimeTypes", Shape::StrList),
            ("thumbs", Shape::StrList),
            ("protected", Shape::Bool),
        ],
        FieldType::Relation => &[
            ("collectionId", Shape::Str),
            ("cascadeDelete", Shape::Bool),
            ("minSelect", Shape::Int),
            ("maxSelect", Shape::Int),
        ],
        FieldType::Json => &[("maxSize", Shape::Int)],
        FieldType::Password => &[
            ("pattern", Shape::Str),
            ("min", Shape::Int),
            ("max", Shape::Int),
            ("cost", Shape::Int),
        ],
        FieldType::Bool | FieldType::GeoPoint => &[],
    }
}

const COMMON_KEYS: &[(&str, Shape)] = &[
    ("id", Shape::Str),
    ("name", Shape::Str),
    ("system", Shape::Bool),
    ("hidden", Shape::Bool),
    ("presentable", Shape::Bool),
];
const HELP_REQUIRED: &[(&str, Shape)] = &[("help", Shape::Str), ("required", Shape::Bool)];

/// A fresh field of `kind`: every key at its zero value.
pub(super) fn blank_field(kind: FieldType) -> Map<String, Value> {
    let mut m = Map::new();
    let with_required = kind != FieldType::Autodate;
    for (k, s) in COMMON_KEYS
        .iter()
        .chain(if with_required { HELP_REQUIRED } else { &[] })
        .chain(type_keys(kind))
    {
        m.insert((*k).to_owned(), zero(*s));
    }
    m.insert("type".into(), json!(kind.as_str()));
    m
}

/// One submitted field: its type first (unknown: refused), then its keys onto a fresh field.
pub(super) fn field(v: &Value) -> Result<Map<String, Value>, Bad> {
    let Value::Object(input) = v else {
        return Err(Bad("a field is not an object".into()));
    };
    let kind = input
        .get("type")
        .and_then(Value::as_str)
        .and_then(FieldType::parse)
        .ok_or_else(|| Bad("missing or unknown field type".into()))?;
    let mut out = blank_field(kind);
    let with_required = kind != FieldType::Autodate;
    for (k, s) in COMMON_KEYS
        .iter()
        .chain(if with_required { HELP_REQUIRED } else { &[] })
        .chain(type_keys(kind))
    {
        if let Some(v) = input.get(*k) {
            let slot = out.entry((*k).to_owned()).or_insert(Value::Null);
            merge(slot, v, *s, k)?;
        }
    }
    Ok(out)
}

/// A string key read on its own (PocketBase reads a new collection's `type` and `name` before
/// the rest).
pub(super) fn string(body: &Map<String, Value>, key: &str) -> Result<String, Bad> {
    let mut v = json!("");
    if let Some(src) = body.get(key) {
        merge(&mut v, src, Shape::Str, key)?;
    }
    Ok(v.as_str().unwrap_or("").to_owned())
}

/// The whole body onto `m`.
pub(super) fn apply(m: &mut Model, body: &Map<String, Value>) -> Result<(), Bad> {
    let get_str = |key: &str, dst: &mut String| -> Result<(), Bad> {
        if let Some(src) = body.get(key) {
            let mut v = json!(dst.clone());
            merge(&mut v, src, Shape::Str, key)?;
            *dst = v.as_str().unwrap_or("").to_owned();
        }
        Ok(())
    };
    get_str("id", &mut m.id)?;
    get_str("name", &mut m.name)?;
    get_str("type", &mut m.kind)?;
    get_str("viewQuery", &mut m.view_query)?;
    for key in ["created", "updated"] {
        if let Some(src) = body.get(key) {
            let mut v = Value::Null;
            merge(&mut v, src, Shape::Date, key)?;
        }
    }
    if let Some(src) = body.get("system") {
        let mut v = json!(m.system);
        merge(&mut v, src, Shape::Bool, "system")?;
        m.system = v.as_bool().unwrap_or(false);
    }
    for (i, key) in super::RULE_KEYS.iter().enumerate() {
        if let Some(src) = body.get(*key) {
            let mut v = Value::Null;
            merge(&mut v, src, Shape::OptStr, key)?;
            m.rules[i] = v.as_str().map(str::to_owned);
        }
    }
    if let Some(src) = body.get("indexes") {
        let mut v = Value::Null;
        merge(&mut v, src, Shape::StrList, "indexes")?;
        m.indexes = v
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
    }
    // The auth options decode (and refuse a wrong type) whatever the collection's type.
    let mut options = Value::Object(std::mem::take(&mut m.options));
    for (key, shape) in AUTH_OPTIONS {
        if let Some(src) = body.get(*key)
            && let Value::Object(o) = &mut options
        {
            let slot = o.entry((*key).to_owned()).or_insert_with(|| zero(*shape));
            merge(slot, src, *shape, key)?;
        }
    }
    if let Value::Object(o) = options {
        m.options = o;
    }
    match body.get("fields") {
        None => {}
        Some(Value::Null) => m.fields.clear(),
        Some(Value::Array(list)) => {
            // Every entry is decoded (and a bad one refuses the body) before any is added.
            let decoded = list.iter().map(field).collect::<Result<Vec<_>, _>>()?;
            m.fields.clear();
            for f in decoded {
                super::add_field(&mut m.fields, f);
            }
        }
        Some(_) => return Err(Bad("fields is not a list".into())),
    }
    Ok(())
}
