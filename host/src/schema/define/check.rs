//! PocketBase's validation of a collection about to be saved: each key's rules in PocketBase's
//! order, the first failing rule per key reported (with its code, message and params), nested
//! the way PocketBase nests them (`fields.<i>.<option>`, `indexes.<i>`, `passwordAuth.*`).
//! Rules and the view query need the query compiler and the database; the API checks those and
//! adds their errors to these.

use super::{Model, RULE_KEYS, verr, verr_params};
use crate::schema::index::Index;
use crate::schema::{Collection, FieldType, Schema, ids};
use serde_json::{Map, Value, json};
use std::sync::LazyLock;

/// Go's `\w+`: ASCII word characters only.
static WORD_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[A-Za-z0-9_]+$").expect("static regex"));

static THUMB_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^(\d+)x(\d+)(t|b|f)?$").expect("static regex"));

/// Tables of `data.db` that are not collections.
const INTERNAL_TABLES: &[&str] = &["_collections", "_migrations", "_params"];

/// Field names no field may take.
const EXCLUDED_NAMES: &[&str] = &[
    "null",
    "true",
    "false",
    "_rowid_",
    "collectionId",
    "collectionName",
    "expand",
];

/// The largest integer a JSON number carries exactly (2^53 - 1).
const MAX_SAFE_INT: i64 = (1 << 53) - 1;

// ---------------------------------------------------------------------------------------------
// PocketBase's rule errors (ozzo-validation's codes and wording, sentence-cased)

pub(super) fn required() -> Value {
    verr("validation_required", "Cannot be blank.")
}
fn length(min: usize, max: usize) -> Value {
    verr_params(
        "validation_length_out_of_range",
        &format!("The length must be between {min} and {max}."),
        json!({"max": max, "min": min}),
    )
}
fn match_invalid() -> Value {
    verr("validation_match_invalid", "Must be in a valid format.")
}
fn in_invalid() -> Value {
    verr("validation_in_invalid", "Must be a valid value.")
}
fn min_threshold(t: Value) -> Value {
    verr_params(
        "validation_min_greater_equal_than_required",
        &format!("Must be no less than {}.", go_number(&t)),
        json!({ "threshold": t }),
    )
}
fn max_threshold(t: Value) -> Value {
    verr_params(
        "validation_max_less_equal_than_required",
        &format!("Must be no greater than {}.", go_number(&t)),
        json!({ "threshold": t }),
    )
}
fn must_be_blank(code: &str) -> Value {
    verr(code, "Must be blank.")
}

/// A number as Go's `%v` prints it in a message: exponent form below 1e-4 and from 1e21.
pub(super) fn go_number(v: &Value) -> String {
    let Some(f) = v.as_f64() else {
        return v.to_string();
    };
    if v.is_i64() || v.is_u64() {
        return v.to_string();
    }
    if f == 0.0 {
        return "0".into();
    }
    let exp = f.abs().log10().floor();
    if !(-4.0..21.0).contains(&exp) {
        let s = format!("{f:e}");
        // Rust: `1e308`, `1.5e-5`; Go: `1e+308`, `1.5e-05`.
        match s.split_once('e') {
            Some((m, e)) => {
                let (sign, digits) = match e.strip_prefix('-') {
                    Some(d) => ('-', d),
                    None => ('+', e),
                };
                format!("{m}e{sign}{digits:0>2}")
            }
            None => s,
        }
    } else {
        format!("{f}")
    }
}

/// ozzo's Min on an integer: zero (empty) values are not checked.
fn min_int(v: i64, t: i64) -> Option<Value> {
    (v != 0 && v < t).then(|| min_threshold(json!(t)))
}
fn max_int(v: i64, t: i64) -> Option<Value> {
    (v != 0 && v > t).then(|| max_threshold(json!(t)))
}

/// The first error of a list of checks.
fn first(checks: impl IntoIterator<Item = Option<Value>>) -> Option<Value> {
    checks.into_iter().flatten().next()
}

/// Go's regexp compile error as PocketBase reports it (its `validation_invalid_regex` message is
/// Go's own error text); None when the pattern compiles.
pub(super) fn regex_error(p: &str) -> Option<Value> {
    if p.is_empty() || regex::Regex::new(p).is_ok() {
        return None;
    }
    use regex_syntax::ast::ErrorKind as K;
    let detail = match regex_syntax::ast::parse::Parser::new().parse(p) {
        Err(e) => {
            let span = e.span();
            let at = |s: usize, t: usize| p.get(s..t).unwrap_or("").to_owned();
            match e.kind() {
                K::ClassUnclosed => {
                    format!("missing closing ]: `{}`", at(span.start.offset, p.len()))
                }
                K::GroupUnclosed => format!("missing closing ): `{p}`"),
                K::GroupUnopened => format!("unexpected ): `{p}`"),
                K::RepetitionMissing => format!(
                    "missing argument to repetition operator: `{}`",
                    at(span.start.offset, span.end.offset)
                ),
                K::RepetitionCountInvalid | K::RepetitionCountDecimalEmpty => format!(
                    "invalid repeat count: `{}`",
                    at(span.start.offset, span.end.offset)
                ),
                K::UnsupportedLookAround => {
                    format!(
                        "invalid or unsupported Perl syntax: `{}`",
                        at(span.start.offset, span.start.offset + 3)
                    )
                }
                K::ClassRangeInvalid => format!(
                    "invalid character class range: `{}`",
                    at(span.start.offset, span.end.offset)
                ),
                K::EscapeUnexpectedEof => "trailing backslash at end of expression: ``".to_owned(),
                K::EscapeUnrecognized => format!(
                    "invalid escape sequence: `{}`",
                    at(span.start.offset, span.end.offset)
                ),
                _ => format!("invalid regular expression: `{p}`"),
            }
        }
        Ok(_) => format!("invalid regular expression: `{p}`"),
    };
    Some(verr(
        "validation_invalid_regex",
        &format!("Error parsing regexp: {detail}."),
    ))
}

/// `is.Domain`: labels of letters, digits and hyphens, dot separated, a letter-led last label.
fn is_domain(s: &str) -> bool {
    if s.is_empty() || s.len() > 255 {
        return false;
    }
    let labels: Vec<&str> = s.split('.').collect();
    if labels.len() < 2 {
        return false;
    }
    labels.iter().all(|l| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    }) && labels
        .last()
        .is_some_and(|l| l.bytes().next().is_some_and(|b| b.is_ascii_alphabetic()))
}

// ---------------------------------------------------------------------------------------------
// fields

/// PocketBase's checks on a field name, in its order.
fn field_name_error(name: &str) -> Option<Value> {
    if name.is_empty() {
        Some(required())
    } else if name.chars().count() > 100 {
        Some(length(1, 100))
    } else if !WORD_RE.is_match(name) {
        Some(match_invalid())
    } else if EXCLUDED_NAMES.contains(&name) {
        Some(verr("validation_not_in_invalid", "Must not be in list."))
    } else if name.to_lowercase().contains("_via_") {
        Some(verr(
            "validation_found_via",
            "The value cannot contain \"_via_\".",
        ))
    } else {
        None
    }
}

fn int(f: &Map<String, Value>, k: &str) -> i64 {
    f.get(k).and_then(Value::as_i64).unwrap_or(0)
}
fn string<'a>(f: &'a Map<String, Value>, k: &str) -> &'a str {
    f.get(k).and_then(Value::as_str).unwrap_or("")
}
fn flag(f: &Map<String, Value>, k: &str) -> bool {
    f.get(k).and_then(Value::as_bool).unwrap_or(false)
}
fn strings(f: &Map<String, Value>, k: &str) -> Vec<String> {
    f.get(k)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A text field's value checked as PocketBase checks a generated one.
fn text_value_error(f: &Map<String, Value>, v: &str) -> bool {
    let pk = flag(f, "primaryKey");
    if (flag(f, "required") || pk) && v.is_empty() {
        return true;
    }
    if v.is_empty() {
        return false;
    }
    let len = v.chars().count() as i64;
    let min = int(f, "min");
    let mut max = int(f, "max");
    if max == 0 {
        max = 5000;
    }
    if (min > 0 && len < min) || (max > 0 && len > max) {
        return true;
    }
    let p = string(f, "pattern");
    !p.is_empty() && !regex::Regex::new(p).is_ok_and(|re| re.is_match(v))
}

/// One field's settings, as PocketBase's `ValidateSettings` of its type.
fn field_errors(
    f: &Map<String, Value>,
    m: &Model,
    original: Option<&Collection>,
    schema: &Schema,
) -> Map<String, Value> {
    let mut out = Map::new();
    let mut put = |k: &str, e: Option<Value>| {
        if let Some(e) = e {
            out.insert(k.to_owned(), e);
        }
    };
    let kind = FieldType::parse(string(f, "type")).unwrap_or(FieldType::Text);
    let id = string(f, "id");
    put(
        "id",
        if id.is_empty() {
            Some(required())
        } else if id.chars().count() > 100 {
            Some(length(1, 100))
        } else {
            None
        },
    );
    let name = string(f, "name");
    let pk = kind == FieldType::Text && flag(f, "primaryKey");
    put(
        "name",
        field_name_error(name).or_else(|| {
            (pk && name != "id").then(|| {
                verr(
                    "validation_in_invalid",
                    "The primary key must be named \"id\".",
                )
            })
        }),
    );
    if kind != FieldType::Autodate {
        let help = string(f, "help").chars().count();
        put("help", (help > 300).then(|| length(1, 300)));
    }
    match kind {
        FieldType::Text => {
            let (min, max) = (int(f, "min"), int(f, "max"));
            if pk {
                let pks = m
                    .fields
                    .iter()
                    .filter(|g| string(g, "type") == "text" && flag(g, "primaryKey"))
                    .count();
                put(
                    "primaryKey",
                    (pks > 1).then(|| {
                        verr(
                            "validation_unsupported_composite_pk",
                            "Composite PKs are not supported and the collection must have only 1 PK.",
                        )
                    }),
                );
            }
            put("min", first([min_int(min, 0), max_int(min, MAX_SAFE_INT)]));
            put(
                "max",
                first([min_int(max, min), max_int(max, MAX_SAFE_INT)]),
            );
            let pattern = string(f, "pattern");
            put(
                "pattern",
                if pk && pattern.is_empty() {
                    Some(required())
                } else {
                    regex_error(pattern)
                },
            );
            put(
                "hidden",
                (pk && flag(f, "hidden")).then(|| must_be_blank("validation_empty")),
            );
            put("required", (pk && !flag(f, "required")).then(required));
            let auto = string(f, "autogeneratePattern");
            put(
                "autogeneratePattern",
                regex_error(auto).or_else(|| autogenerate_error(f, auto)),
            );
        }
        FieldType::Number => {
            let only_int = flag(f, "onlyInt");
            let not_int = |v: Option<f64>| {
                // Go's `float64(int64(v)) != v`: fractions, and values beyond 64-bit integers.
                v.filter(|n| only_int && (n.fract() != 0.0 || n.abs() >= 9.223_372_036_854_776e18))
                    .map(|_| {
                        verr(
                            "validation_only_int_constraint",
                            "Decimal numbers are not allowed.",
                        )
                    })
            };
            let min = f.get("min").and_then(Value::as_f64);
            let max = f.get("max").and_then(Value::as_f64);
            put("min", not_int(min));
            put(
                "max",
                not_int(max).or_else(|| match (min, max) {
                    (Some(lo), Some(hi)) if hi < lo => {
                        let lo = f.get("min").cloned().unwrap_or(json!(0));
                        Some(verr_params(
                            "validation_min_number_constraint",
                            &format!("Must be greater or equal than {}.", go_number(&lo)),
                            json!({ "min": lo }),
                        ))
                    }
                    _ => None,
                }),
            );
        }
        FieldType::Email | FieldType::Url => {
            let only = strings(f, "onlyDomains");
            let except = strings(f, "exceptDomains");
            let each = |list: &[String]| -> Option<Value> {
                let mut errs = Map::new();
                for (i, d) in list.iter().enumerate() {
                    if !d.is_empty() && !is_domain(d) {
                        errs.insert(
                            i.to_string(),
                            verr("validation_is_domain", "Must be a valid domain."),
                        );
                    }
                }
                (!errs.is_empty()).then_some(Value::Object(errs))
            };
            put(
                "exceptDomains",
                if !only.is_empty() {
                    (!except.is_empty()).then(|| must_be_blank("validation_empty"))
                } else {
                    each(&except)
                },
            );
            put(
                "onlyDomains",
                if !except.is_empty() {
                    (!only.is_empty()).then(|| must_be_blank("validation_empty"))
                } else {
                    each(&only)
                },
            );
        }
        FieldType::Editor | FieldType::Json => {
            let s = int(f, "maxSize");
            put("maxSize", first([min_int(s, 0), max_int(s, MAX_SAFE_INT)]));
        }
        // A date field's min and max are not checked against each other: PocketBase builds the
        // range rule and never applies it (its builder returns a copy that is dropped).
        FieldType::Date => {}
        FieldType::Autodate => {
            let (on_create, on_update) = (flag(f, "onCreate"), flag(f, "onUpdate"));
            let old = original
                .and_then(|o| o.fields.iter().find(|g| g.id == id))
                .filter(|g| g.kind == FieldType::Autodate);
            let (old_create, old_update) = match old {
                Some(g) => (g.opt_bool("onCreate"), g.opt_bool("onUpdate")),
                None => (on_create, on_update),
            };
            let system = flag(f, "system");
            let neither = || {
                verr(
                    "validation_required",
                    "Either onCreate or onUpdate must be enabled.",
                )
            };
            let mismatch = || verr("validation_values_mismatch", "Values don't match.");
            put(
                "onCreate",
                if system && on_create != old_create {
                    Some(mismatch())
                } else {
                    (!on_create && !on_update).then(neither)
                },
            );
            put(
                "onUpdate",
                if system && on_update != old_update {
                    Some(mismatch())
                } else {
                    (!on_create && !on_update).then(neither)
                },
            );
        }
        FieldType::Select => {
            let values = strings(f, "values");
            let max = (values.len() as i64).max(1);
            let ms = int(f, "maxSelect");
            put("values", values.is_empty().then(required));
            put("maxSelect", first([min_int(ms, 0), max_int(ms, max)]));
        }
        FieldType::File => {
            let ms = int(f, "maxSelect");
            let size = int(f, "maxSize");
            put(
                "maxSelect",
                first([min_int(ms, 0), max_int(ms, MAX_SAFE_INT)]),
            );
            put(
                "maxSize",
                first([min_int(size, 0), max_int(size, MAX_SAFE_INT)]),
            );
            let mut errs = Map::new();
            for (i, t) in strings(f, "thumbs").iter().enumerate() {
                let e = if ["0x0", "0x0t", "0x0b", "0x0f"].contains(&t.as_str()) {
                    Some(verr("validation_not_in_invalid", "Must not be in list."))
                } else if !t.is_empty() && !THUMB_RE.is_match(t) {
                    Some(match_invalid())
                } else {
                    None
                };
                if let Some(e) = e {
                    errs.insert(i.to_string(), e);
                }
            }
            put("thumbs", (!errs.is_empty()).then_some(Value::Object(errs)));
        }
        FieldType::Relation => {
            let target = string(f, "collectionId");
            put(
                "collectionId",
                if target.is_empty() {
                    Some(required())
                } else {
                    relation_target_error(f, target, m, original, schema)
                },
            );
            let (min, max) = (int(f, "minSelect"), int(f, "maxSelect"));
            put("minSelect", min_int(min, 0));
            put(
                "maxSelect",
                if min > 0 && max == 0 {
                    Some(required())
                } else {
                    min_int(max, min)
                },
            );
        }
        FieldType::Password => {
            let (min, max, cost) = (int(f, "min"), int(f, "max"), int(f, "cost"));
            put("min", first([min_int(min, 1), max_int(min, 71)]));
            put("max", first([min_int(max, min), max_int(max, 71)]));
            put("cost", first([min_int(cost, 4), max_int(cost, 31)]));
            put("pattern", regex_error(string(f, "pattern")));
        }
        FieldType::Bool | FieldType::GeoPoint => {}
    }
    out
}

/// Ten values generated from the pattern must pass the field's own checks.
fn autogenerate_error(f: &Map<String, Value>, pattern: &str) -> Option<Value> {
    if pattern.is_empty() {
        return None;
    }
    for _ in 0..10 {
        let Some(v) = ids::from_pattern(pattern) else {
            return Some(verr(
                "validation_invalid_autogenerate_pattern",
                "Invalid autogenerate pattern.",
            ));
        };
        if text_value_error(f, &v) {
            let quoted = serde_json::to_string(&v).unwrap_or_default();
            return Some(verr(
                "validation_invalid_autogenerate_pattern_value",
                &format!(
                    "The provided autogenerate pattern could produce invalid field values, ex.: {quoted}."
                ),
            ));
        }
    }
    None
}

fn relation_target_error(
    f: &Map<String, Value>,
    target: &str,
    m: &Model,
    original: Option<&Collection>,
    schema: &Schema,
) -> Option<Value> {
    if let Some(old) = original
        .and_then(|o| o.fields.iter().find(|g| g.id == string(f, "id")))
        .filter(|g| g.kind == FieldType::Relation)
        && old.opt_str("collectionId") != target
    {
        return Some(verr(
            "validation_field_relation_change",
            "The relation collection cannot be changed.",
        ));
    }
    // Only an existing collection, by its id (a new collection cannot point at itself yet).
    let found = schema
        .by_id_or_name(target)
        .filter(|c| c.id == target)
        .map(|c| c.is_view());
    match found {
        None => Some(verr(
            "validation_field_relation_missing_collection",
            "The relation collection doesn't exist.",
        )),
        Some(true) if m.kind != "view" => Some(verr(
            "validation_relation_field_non_view_base_collection",
            "Only view collections are allowed to have relations to other views.",
        )),
        Some(_) => None,
    }
}

/// The `fields` key: the first failing of PocketBase's list checks.
fn fields_error(m: &Model, original: Option<&Collection>, schema: &Schema) -> Option<Value> {
    let view = m.kind == "view";
    // duplicates (ids, then names case-insensitively), the first one only
    let mut ids: Vec<&str> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (i, f) in m.fields.iter().enumerate() {
        let id = string(f, "id");
        if ids.contains(&id) {
            let mut e = Map::new();
            e.insert(
                "id".into(),
                verr(
                    "validation_duplicated_field_id",
                    &format!(
                        "Duplicated or invalid field id {}.",
                        serde_json::to_string(id).unwrap_or_default()
                    ),
                ),
            );
            return Some(json!({ i.to_string(): e }));
        }
        let name = string(f, "name");
        if names.contains(&name.to_lowercase()) {
            return Some(json!({ i.to_string(): {"name": verr_params(
                "validation_duplicated_field_name",
                // PocketBase trims the message before its full stop (an empty or space-ended
                // name leaves no space before it).
                &format!(
                    "{}.",
                    format!("Duplicated or invalid field name {name}").trim_end()
                ),
                json!({"fieldName": name}),
            )}}));
        }
        ids.push(id);
        names.push(name.to_lowercase());
    }
    // the minimum: some field, and the `id` primary key
    if m.fields.is_empty() {
        return Some(required());
    }
    let pk = m
        .fields
        .iter()
        .find(|f| string(f, "name") == "id")
        .filter(|f| string(f, "type") == "text" && flag(f, "primaryKey"));
    if pk.is_none() {
        return Some(verr(
            "validation_missing_primary_key",
            "Missing or invalid \"id\" PK field.",
        ));
    }
    if !view && let Some(o) = original {
        // system fields stay, under their names
        let changed = o.fields.iter().filter(|g| g.system).any(|g| {
            m.fields
                .iter()
                .find(|f| string(f, "id") == g.id)
                .is_none_or(|f| string(f, "name") != g.name)
        });
        if changed {
            return Some(verr(
                "validation_system_field_change",
                "System fields cannot be deleted or renamed.",
            ));
        }
        let mut errs = Map::new();
        for (i, f) in m.fields.iter().enumerate() {
            if let Some(g) = o.fields.iter().find(|g| g.id == string(f, "id"))
                && g.kind.as_str() != string(f, "type")
            {
                errs.insert(
                    i.to_string(),
                    verr(
                        "validation_field_type_change",
                        "Field type cannot be changed.",
                    ),
                );
            }
        }
        if !errs.is_empty() {
            return Some(Value::Object(errs));
        }
    }
    if m.kind == "auth" {
        let mut errs = Map::new();
        for (i, f) in m.fields.iter().enumerate() {
            if ["passwordConfirm", "oldPassword"].contains(&string(f, "name")) {
                errs.insert(
                    i.to_string(),
                    json!({"name": verr(
                        "validation_reserved_field_name",
                        "The field name is reserved and cannot be used.",
                    )}),
                );
            }
        }
        if !errs.is_empty() {
            return Some(Value::Object(errs));
        }
    }
    let mut errs = Map::new();
    for (i, f) in m.fields.iter().enumerate() {
        let e = field_errors(f, m, original, schema);
        if !e.is_empty() {
            errs.insert(i.to_string(), Value::Object(e));
        }
    }
    (!errs.is_empty()).then_some(Value::Object(errs))
}

// ---------------------------------------------------------------------------------------------
// the collection

fn name_error(m: &Model, original: Option<&Collection>, schema: &Schema) -> Option<Value> {
    let name = m.name.as_str();
    if name.is_empty() {
        return Some(required());
    }
    if name.chars().count() > 255 {
        return Some(length(1, 255));
    }
    if name.to_lowercase().contains("_via_") {
        return Some(verr(
            "validation_found_via",
            "The value cannot contain \"_via_\".",
        ));
    }
    if !WORD_RE.is_match(name) {
        return Some(match_invalid());
    }
    if let Some(o) = original
        && o.system
        && o.name != name
    {
        return Some(verr(
            "validation_collection_system_name_change",
            "System collection name cannot be changed.",
        ));
    }
    let own_id = original.map(|o| o.id.as_str());
    let unique = schema
        .by_name(name)
        .is_none_or(|c| Some(c.id.as_str()) == own_id);
    if !unique {
        return Some(verr(
            "validation_collection_name_exists",
            "Collection name must be unique (case insensitive).",
        ));
    }
    if schema.by_id(name).is_some() {
        return Some(verr(
            "validation_collection_name_id_duplicate",
            "The name must not match an existing collection id.",
        ));
    }
    let renamed = original.is_none_or(|o| o.name != name);
    if renamed && INTERNAL_TABLES.iter().any(|t| t.eq_ignore_ascii_case(name)) {
        return Some(verr(
            "validation_collection_name_invalid",
            "The name shouldn't match with an existing internal table.",
        ));
    }
    None
}

fn id_error(m: &Model, original: Option<&Collection>, schema: &Schema) -> Option<Value> {
    if m.id.is_empty() {
        return Some(required());
    }
    match original {
        None => {
            if m.id.chars().count() > 100 {
                Some(length(1, 100))
            } else if !WORD_RE.is_match(&m.id) {
                Some(match_invalid())
            } else if schema.by_id(&m.id).is_some() {
                Some(verr(
                    "validation_invalid_or_existing_id",
                    "The model id is invalid or already exists.",
                ))
            } else {
                None
            }
        }
        Some(o) => {
            (o.id != m.id).then(|| verr("validation_values_mismatch", "Values don't match."))
        }
    }
}

/// Index names in use by other collections' tables.
fn used_index_name(
    schema: &Schema,
    m: &Model,
    original: Option<&Collection>,
    name: &str,
) -> Option<String> {
    let old = original.map(|o| o.name.to_lowercase());
    schema
        .collections
        .iter()
        .filter(|c| !c.is_view())
        .filter(|c| {
            c.name.to_lowercase() != m.name.to_lowercase() && Some(c.name.to_lowercase()) != old
        })
        .find(|c| {
            c.indexes
                .iter()
                .any(|i| Index::parse(i).index_name.eq_ignore_ascii_case(name))
        })
        .map(|c| c.name.clone())
}

fn indexes_error(m: &Model, original: Option<&Collection>, schema: &Schema) -> Option<Value> {
    if m.kind == "view" && !m.indexes.is_empty() {
        return Some(verr(
            "validation_indexes_not_supported",
            "View collections don't support indexes.",
        ));
    }
    let mut names: Vec<String> = Vec::new();
    let mut defs: Vec<String> = Vec::new();
    for (i, raw) in m.indexes.iter().enumerate() {
        let mut p = Index::parse(raw);
        p.table_name = "validator".into();
        let at = |e: Value| Some(json!({ i.to_string(): e }));
        if !p.is_valid() {
            return at(verr(
                "validation_invalid_index_expression",
                "Invalid CREATE INDEX expression.",
            ));
        }
        let lower = p.index_name.to_lowercase();
        if names.contains(&lower) {
            return at(verr(
                "validation_duplicated_index_name",
                "The index name already exists.",
            ));
        }
        names.push(lower);
        if let Some(t) = used_index_name(schema, m, original, &p.index_name) {
            return at(verr_params(
                "validation_existing_index_name",
                &format!("The index name is already used in {t} collection."),
                json!({"usedTableName": t}),
            ));
        }
        p.schema_name = "validator".into();
        p.index_name = "validator".into();
        let def = p.build();
        if defs.contains(&def) {
            return at(verr(
                "validation_duplicated_index_definition",
                "The index definition already exists.",
            ));
        }
        defs.push(def);
    }
    // A unique index over a system field may not go away.
    if let Some(o) = original {
        for old in &o.indexes {
            let mut op = Index::parse(old);
            if !op.unique {
                continue;
            }
            for c in &mut op.columns {
                c.collate.clear();
                c.sort.clear();
            }
            let Some(sys) = op.columns.iter().find_map(|c| {
                o.fields
                    .iter()
                    .find(|f| f.system && f.name.eq_ignore_ascii_case(&c.name))
            }) else {
                continue;
            };
            let want = op.build();
            let kept = m.indexes.iter().any(|n| {
                let mut np = Index::parse(n);
                np.schema_name.clone_from(&op.schema_name);
                np.index_name.clone_from(&op.index_name);
                np.table_name.clone_from(&op.table_name);
                np.where_clause.clone_from(&op.where_clause);
                for c in &mut np.columns {
                    c.collate.clear();
                    c.sort.clear();
                }
                np.build() == want
            });
            if !kept {
                return Some(verr_params(
                    "validation_invalid_unique_system_field_index",
                    &format!(
                        "Unique index definition on system fields ({}) is invalid or missing.",
                        sys.name
                    ),
                    json!({"fieldName": sys.name}),
                ));
            }
        }
    }
    None
}

/// Errors of the auth options (PocketBase stops at the first failing group).
fn auth_errors(m: &Model, original: Option<&Collection>, out: &mut Map<String, Value>) {
    let o = &m.options;
    let get = |k: &str| o.get(k).cloned().unwrap_or(Value::Null);
    let mut errs = Map::new();
    let template = |t: &Value| -> Option<Value> {
        let mut e = Map::new();
        for k in ["subject", "body"] {
            if t.get(k).and_then(Value::as_str).unwrap_or("").is_empty() {
                e.insert(k.into(), required());
            }
        }
        (!e.is_empty()).then_some(Value::Object(e))
    };
    if let Some(Value::String(r)) = o.get("manageRule")
        && r.is_empty()
    {
        errs.insert(
            "manageRule".into(),
            verr("validation_nil_or_not_empty_required", "Cannot be blank."),
        );
    }
    if let Some(e) = template(&get("authAlert")["emailTemplate"]) {
        errs.insert("authAlert".into(), json!({ "emailTemplate": e }));
    }
    let pa = get("passwordAuth");
    if pa["enabled"] == json!(true) && pa["identityFields"].as_array().is_none_or(|a| a.is_empty())
    {
        errs.insert("passwordAuth".into(), json!({"identityFields": required()}));
    }
    if let Some(e) = oauth2_errors(&get("oauth2")) {
        errs.insert("oauth2".into(), e);
    }
    let ranged = |v: &Value, lo: i64, hi: i64| -> Option<Value> {
        let n = v.as_i64().unwrap_or(0);
        if n == 0 {
            Some(required())
        } else {
            first([min_int(n, lo), max_int(n, hi)])
        }
    };
    let otp = get("otp");
    let mut oe = Map::new();
    if otp["enabled"] == json!(true) {
        if let Some(e) = ranged(&otp["duration"], 10, 86400) {
            oe.insert("duration".into(), e);
        }
        let len = otp["length"].as_i64().unwrap_or(0);
        if let Some(e) = if len == 0 {
            Some(required())
        } else {
            min_int(len, 4)
        } {
            oe.insert("length".into(), e);
        }
    }
    if let Some(e) = template(&otp["emailTemplate"]) {
        oe.insert("emailTemplate".into(), e);
    }
    if !oe.is_empty() {
        errs.insert("otp".into(), Value::Object(oe));
    }
    let mfa = get("mfa");
    if mfa["enabled"] == json!(true)
        && let Some(e) = ranged(&mfa["duration"], 10, 86400)
    {
        errs.insert("mfa".into(), json!({ "duration": e }));
    }
    for k in [
        "authToken",
        "passwordResetToken",
        "emailChangeToken",
        "verificationToken",
        "fileToken",
    ] {
        let t = get(k);
        let mut te = Map::new();
        let secret = t["secret"].as_str().unwrap_or("").chars().count();
        if secret == 0 {
            te.insert("secret".into(), required());
        } else if !(30..=255).contains(&secret) {
            te.insert("secret".into(), length(30, 255));
        }
        if let Some(e) = ranged(&t["duration"], 10, 94_670_856) {
            te.insert("duration".into(), e);
        }
        if !te.is_empty() {
            errs.insert(k.into(), Value::Object(te));
        }
    }
    for k in [
        "verificationTemplate",
        "resetPasswordTemplate",
        "confirmEmailChangeTemplate",
    ] {
        if let Some(e) = template(&get(k)) {
            errs.insert(k.into(), e);
        }
    }
    if let Some(orig) = original.filter(|o| o.system) {
        for k in ["authRule", "manageRule"] {
            if errs.contains_key(k) {
                continue;
            }
            if orig.options.get(k).cloned().unwrap_or(Value::Null) != get(k) {
                errs.insert(k.into(), system_rule_change());
            }
        }
    }
    if !errs.is_empty() {
        out.extend(errs);
        return;
    }
    if mfa["enabled"] == json!(true) {
        let on = |v: &Value| v["enabled"] == json!(true);
        let n = [on(&pa), on(&get("oauth2")), on(&otp)]
            .iter()
            .filter(|b| **b)
            .count();
        if n < 2 {
            out.insert(
                "mfa".into(),
                json!({"enabled": verr("validation_mfa_not_enough_auths", "MFA requires at least 2 auth methods to be enabled.")}),
            );
            return;
        }
    }
    if pa["enabled"] == json!(true) {
        let mut seen: Vec<String> = Vec::new();
        for name in pa["identityFields"].as_array().into_iter().flatten() {
            let name = name.as_str().unwrap_or("").to_owned();
            if seen.contains(&name) {
                continue;
            }
            seen.push(name.clone());
            let e = if !m.fields.iter().any(|f| string(f, "name") == name) {
                Some(verr_params(
                    "validation_missing_field",
                    &format!("Invalid or missing field {name}."),
                    json!({"fieldName": name}),
                ))
            } else if Index::find_unique(&m.indexes, &name).is_none() {
                Some(verr_params(
                    "validation_missing_unique_constraint",
                    &format!("The field {name} doesn't have a UNIQUE constraint."),
                    json!({"fieldName": name}),
                ))
            } else {
                None
            };
            if let Some(e) = e {
                out.insert("passwordAuth".into(), json!({ "identityFields": e }));
                return;
            }
        }
    }
}

/// Every OAuth2 provider name PocketBase 0.40.6 registers (`tools/auth`): a collection may
/// name any of them, whether or not this server can sign in with it yet.
pub(crate) const OAUTH2_PROVIDER_NAMES: &[&str] = &[
    "apple",
    "bitbucket",
    "box",
    "discord",
    "facebook",
    "gitea",
    "gitee",
    "github",
    "gitlab",
    "google",
    "instagram2",
    "kakao",
    "lark",
    "linear",
    "livechat",
    "mailcow",
    "microsoft",
    "monday",
    "notion",
    "oidc",
    "oidc2",
    "oidc3",
    "patreon",
    "planningcenter",
    "spotify",
    "strava",
    "trakt",
    "twitch",
    "twitter",
    "vk",
    "wakatime",
    "yandex",
];

/// The errors of `oauth2` (checked only while it is enabled), nested as PocketBase nests them
/// (`providers.<i>.<key>`): a repeated name fails the list before its providers are looked at;
/// otherwise each provider needs a known name, a client id and secret, and URLs that parse.
fn oauth2_errors(o: &Value) -> Option<Value> {
    if o["enabled"] != json!(true) {
        return None;
    }
    let list = o["providers"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let name = |p: &Value| p["name"].as_str().unwrap_or("").to_owned();
    let mut seen: Vec<String> = Vec::new();
    for (i, p) in list.iter().enumerate() {
        let n = name(p);
        if n.is_empty() {
            continue;
        }
        if seen.contains(&n) {
            let e = verr_params(
                "validation_duplicated_provider",
                &format!("The provider {n} is already registered."),
                json!({ "name": n }),
            );
            return Some(json!({"providers": { i.to_string(): {"name": e} }}));
        }
        seen.push(n);
    }
    let mut by_index = Map::new();
    for (i, p) in list.iter().enumerate() {
        let mut pe = Map::new();
        let n = name(p);
        if n.is_empty() {
            pe.insert("name".into(), required());
        } else if !OAUTH2_PROVIDER_NAMES.contains(&n.as_str()) {
            pe.insert(
                "name".into(),
                verr_params(
                    "validation_missing_provider",
                    &format!("Invalid or missing provider with name {n}."),
                    json!({ "name": n }),
                ),
            );
        }
        for k in ["clientId", "clientSecret"] {
            if p[k].as_str().unwrap_or("").is_empty() {
                pe.insert(k.into(), required());
            }
        }
        for k in ["authURL", "tokenURL", "userInfoURL"] {
            let u = p[k].as_str().unwrap_or("");
            if !u.is_empty() && !crate::schema::value::is_url(u) {
                pe.insert(k.into(), verr("validation_is_url", "Must be a valid URL."));
            }
        }
        if !pe.is_empty() {
            by_index.insert(i.to_string(), Value::Object(pe));
        }
    }
    (!by_index.is_empty()).then(|| json!({ "providers": by_index }))
}

pub(super) fn system_rule_change() -> Value {
    verr(
        "validation_collection_system_rule_change",
        "System collection API rule cannot be changed.",
    )
}

/// Every error PocketBase reports for `m` that needs neither the query compiler nor the
/// database. (View fields are checked once the query gave them: `super::check_view`.)
pub(super) fn collection(
    m: &Model,
    original: Option<&Collection>,
    schema: &Schema,
) -> Map<String, Value> {
    let mut out = Map::new();
    let mut put = |k: &str, e: Option<Value>| {
        if let Some(e) = e {
            out.insert(k.to_owned(), e);
        }
    };
    put("id", id_error(m, original, schema));
    put(
        "system",
        original.filter(|o| o.system != m.system).map(|_| {
            verr(
                "validation_collection_system_flag_change",
                "System collection state cannot be changed.",
            )
        }),
    );
    put(
        "type",
        if !["base", "auth", "view"].contains(&m.kind.as_str()) {
            Some(in_invalid())
        } else {
            original.filter(|o| o.kind.as_str() != m.kind).map(|_| {
                verr(
                    "validation_collection_type_change",
                    "Collection type cannot be changed.",
                )
            })
        },
    );
    put("name", name_error(m, original, schema));
    if m.kind != "view" {
        put("fields", fields_error(m, original, schema));
    }
    for (i, key) in RULE_KEYS.iter().enumerate() {
        // create, update and delete rules of a view must be null
        if i >= 2 && m.kind == "view" && m.rules[i].is_some() {
            put(key, Some(must_be_blank("validation_nil")));
        }
    }
    put("indexes", indexes_error(m, original, schema));
    match m.kind.as_str() {
        "auth" => auth_errors(m, original, &mut out),
        "view" if m.view_query.is_empty() => {
            out.insert("viewQuery".into(), required());
        }
        _ => {}
    }
    out
}

/// The `fields` error of a view whose fields the query gave.
pub(super) fn view_fields(m: &Model, schema: &Schema) -> Option<Value> {
    fields_error(m, None, schema)
}

/// The first field whose settings fail, as Go prints the error: `invalid field "name" (i): `
/// then each failing key with its raw (lower-case, unpunctuated) message, `; `-separated.
pub(super) fn first_field_error(m: &Model, schema: &Schema) -> Option<String> {
    fn raw(v: &Value) -> String {
        if let Some(msg) = v.get("message").and_then(Value::as_str) {
            let mut c = msg.trim_end_matches('.').chars();
            return c
                .next()
                .map(|f| f.to_lowercase().chain(c).collect())
                .unwrap_or_default();
        }
        let Value::Object(o) = v else {
            return String::new();
        };
        let mut keys: Vec<&String> = o.keys().collect();
        keys.sort();
        let parts: Vec<String> = keys
            .iter()
            .map(|k| {
                let inner = &o[*k];
                if inner.get("code").is_some() {
                    format!("{k}: {}", raw(inner))
                } else {
                    format!("{k}: ({})", raw(inner))
                }
            })
            .collect();
        format!("{}.", parts.join("; "))
    }
    m.fields.iter().enumerate().find_map(|(i, f)| {
        let e = field_errors(f, m, None, schema);
        (!e.is_empty()).then(|| {
            format!(
                "invalid field {} ({i}): {}",
                serde_json::to_string(string(f, "name")).unwrap_or_default(),
                raw(&Value::Object(e))
            )
        })
    })
}
