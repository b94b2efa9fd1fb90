//! Binding a PATCH body onto the settings the way PocketBase 0.40.6 binds it (measured against
//! the binary): objects merge key by key, keys match case-insensitively, `null` resets a value
//! to its zero (an object's every field, a list to empty), lists are replaced whole (their
//! objects start from zero, not from the old element), unknown keys are ignored, and a value of
//! the wrong JSON type, a fractional or out-of-range integer, or one field given twice refuses
//! the whole body.

use super::{Settings, SettingsError};
use serde_json::{Map, Value};

/// The JSON type each settings key takes.
enum Kind {
    Bool,
    Int,
    Str,
    Strs,
    Obj(&'static [(&'static str, Kind)]),
    Objs(&'static [(&'static str, Kind)]),
}

use Kind::{Bool, Int, Obj, Objs, Str, Strs};

const SMTP: &[(&str, Kind)] = &[
    ("enabled", Bool),
    ("port", Int),
    ("host", Str),
    ("username", Str),
    ("password", Str),
    ("authMethod", Str),
    ("tls", Bool),
    ("localName", Str),
];
const S3: &[(&str, Kind)] = &[
    ("enabled", Bool),
    ("bucket", Str),
    ("region", Str),
    ("endpoint", Str),
    ("accessKey", Str),
    ("secret", Str),
    ("forcePathStyle", Bool),
];
const BACKUPS: &[(&str, Kind)] = &[("cron", Str), ("cronMaxKeep", Int), ("s3", Obj(S3))];
const META: &[(&str, Kind)] = &[
    ("accentColor", Str),
    ("appName", Str),
    ("appURL", Str),
    ("senderName", Str),
    ("senderAddress", Str),
    ("hideControls", Bool),
];
const RULE: &[(&str, Kind)] = &[
    ("label", Str),
    ("audience", Str),
    ("duration", Int),
    ("maxRequests", Int),
];
const RATE_LIMITS: &[(&str, Kind)] = &[
    ("rules", Objs(RULE)),
    ("excludedIPs", Strs),
    ("enabled", Bool),
];
const TRUSTED_PROXY: &[(&str, Kind)] = &[("headers", Strs), ("useLeftmostIP", Bool)];
const BATCH: &[(&str, Kind)] = &[
    ("enabled", Bool),
    ("maxRequests", Int),
    ("timeout", Int),
    ("maxBodySize", Int),
];
const LOGS: &[(&str, Kind)] = &[
    ("maxDataSize", Int),
    ("maxDays", Int),
    ("minLevel", Int),
    ("logIP", Bool),
    ("logAuthId", Bool),
];
const SETTINGS: &[(&str, Kind)] = &[
    ("superuserIPs", Strs),
    ("smtp", Obj(SMTP)),
    ("backups", Obj(BACKUPS)),
    ("s3", Obj(S3)),
    ("meta", Obj(META)),
    ("rateLimits", Obj(RATE_LIMITS)),
    ("trustedProxy", Obj(TRUSTED_PROXY)),
    ("batch", Obj(BATCH)),
    ("logs", Obj(LOGS)),
];

/// `current` with `patch` bound onto it.
pub(super) fn apply(
    current: &Settings,
    patch: &Map<String, Value>,
) -> Result<Settings, SettingsError> {
    let mut v = serde_json::to_value(current).expect("settings serialize: plain data");
    let Value::Object(root) = &mut v else {
        unreachable!("settings serialize to an object")
    };
    bind_object(root, patch, SETTINGS)?;
    serde_json::from_value(v).map_err(|e| SettingsError::Bind(e.to_string()))
}

fn refuse(why: impl Into<String>) -> SettingsError {
    SettingsError::Bind(why.into())
}

/// Go's case-insensitive key match: equal under simple case folding (so the Kelvin sign matches
/// `k` and the long s matches `s`, as they do for Go).
fn same_key(a: &str, b: &str) -> bool {
    let fold = |c: char| c.to_uppercase().flat_map(char::to_lowercase);
    a.chars().flat_map(fold).eq(b.chars().flat_map(fold))
}

fn bind_object(
    target: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    shape: &'static [(&'static str, Kind)],
) -> Result<(), SettingsError> {
    let mut seen: Vec<&'static str> = Vec::new();
    for (key, value) in patch {
        // An exact match wins over a case-insensitive one.
        let Some((name, kind)) = shape
            .iter()
            .find(|(n, _)| *n == key)
            .or_else(|| shape.iter().find(|(n, _)| same_key(n, key)))
        else {
            continue;
        };
        if seen.contains(name) {
            return Err(refuse(format!("{name} given twice")));
        }
        seen.push(name);
        let slot = target.entry(*name).or_insert(Value::Null);
        bind_value(slot, value, kind, name)?;
    }
    Ok(())
}

fn zero(kind: &Kind) -> Value {
    match kind {
        Bool => Value::Bool(false),
        Int => Value::from(0),
        Str => Value::String(String::new()),
        Strs | Objs(_) => Value::Array(Vec::new()),
        Obj(shape) => Value::Object(
            shape
                .iter()
                .filter(|(n, _)| *n != "secret")
                .map(|(n, k)| ((*n).to_owned(), zero(k)))
                .collect(),
        ),
    }
}

fn bind_value(
    slot: &mut Value,
    value: &Value,
    kind: &Kind,
    name: &str,
) -> Result<(), SettingsError> {
    if value.is_null() {
        *slot = zero(kind);
        return Ok(());
    }
    match (kind, value) {
        (Bool, Value::Bool(_)) | (Str, Value::String(_)) => *slot = value.clone(),
        (Int, Value::Number(n)) => match n.as_i64() {
            Some(i) => *slot = Value::from(i),
            // `-0` is an integer to Go and a float to serde_json, which no longer tells it from
            // `-0.0` (Go refuses that one): both are taken as 0.
            None if n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()) => {
                *slot = Value::from(0)
            }
            None => return Err(refuse(format!("{name}: {n} is not an integer"))),
        },
        (Strs, Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(_) => out.push(item.clone()),
                    Value::Null => out.push(Value::String(String::new())),
                    _ => return Err(refuse(format!("{name}: a list of strings"))),
                }
            }
            *slot = Value::Array(out);
        }
        (Obj(shape), Value::Object(patch)) => {
            if !slot.is_object() {
                *slot = zero(kind);
            }
            let Value::Object(target) = slot else {
                unreachable!("just made an object")
            };
            bind_object(target, patch, shape)?;
        }
        (Objs(shape), Value::Array(items)) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                let mut fresh = zero(&Obj(shape));
                match item {
                    Value::Null => {}
                    Value::Object(patch) => {
                        let Value::Object(target) = &mut fresh else {
                            unreachable!("zero of an object")
                        };
                        bind_object(target, patch, shape)?;
                    }
                    _ => return Err(refuse(format!("{name}: a list of objects"))),
                }
                out.push(fresh);
            }
            *slot = Value::Array(out);
        }
        _ => return Err(refuse(format!("{name}: wrong type"))),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patch(v: Value) -> Result<Settings, SettingsError> {
        let Value::Object(m) = v else {
            panic!("object")
        };
        apply(&Settings::default(), &m)
    }

    #[test]
    fn the_shape_table_names_every_stored_key() {
        // Every key of the stored form can be bound, and nothing else: the table and the typed
        // value cannot drift apart.
        fn walk(v: &Value, shape: &[(&str, Kind)], path: &str) {
            let Value::Object(m) = v else {
                panic!("{path} not an object")
            };
            let mut keys: Vec<&str> = m.keys().map(String::as_str).collect();
            let mut names: Vec<&str> = shape
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| *n != "secret")
                .collect();
            keys.sort_unstable();
            names.sort_unstable();
            assert_eq!(keys, names, "at {path}");
            for (n, k) in shape {
                match k {
                    Obj(s) => walk(&m[*n], s, n),
                    Objs(s) => {
                        for item in m[*n].as_array().unwrap() {
                            walk(item, s, n);
                        }
                    }
                    _ => {}
                }
            }
        }
        walk(
            &serde_json::to_value(Settings::default()).unwrap(),
            SETTINGS,
            "",
        );
    }

    #[test]
    fn objects_merge_and_null_resets_to_zero() {
        let s =
            patch(json!({"backups": {"s3": {"bucket": "b"}}, "meta": {"appName": null}})).unwrap();
        assert_eq!(s.backups.s3.bucket, "b");
        assert_eq!(s.backups.cron_max_keep, 3);
        assert_eq!(s.meta.app_name, "");
        assert_eq!(s.meta.app_url, "http://localhost:8090");
        let s = patch(json!({"meta": null, "rateLimits": {"rules": null}})).unwrap();
        assert_eq!(s.meta.app_url, "");
        assert!(s.rate_limits.rules.is_empty());
    }

    #[test]
    fn list_elements_start_from_zero() {
        let s = patch(json!({"rateLimits": {"rules": [{"label": "x"}]}})).unwrap();
        assert_eq!(s.rate_limits.rules.len(), 1);
        assert_eq!(s.rate_limits.rules[0].label, "x");
        assert_eq!(s.rate_limits.rules[0].duration, 0);
    }

    #[test]
    fn keys_match_without_case_and_twice_is_refused() {
        assert_eq!(
            patch(json!({"BATCH": {"TimeOut": 7}}))
                .unwrap()
                .batch
                .timeout,
            7
        );
        assert!(patch(json!({"batch": {"timeout": 7, "TIMEOUT": 8}})).is_err());
        assert_eq!(patch(json!({"unknown": 1})).unwrap(), Settings::default());
    }

    #[test]
    fn types_are_strict() {
        for bad in [
            json!({"batch": {"timeout": "3"}}),
            json!({"batch": {"timeout": 3.5}}),
            json!({"batch": {"timeout": 1e20}}),
            json!({"batch": {"enabled": 1}}),
            json!({"batch": 5}),
            json!({"superuserIPs": "1.2.3.4"}),
            json!({"superuserIPs": [1]}),
            json!({"rateLimits": {"rules": ["x"]}}),
        ] {
            assert!(patch(bad.clone()).is_err(), "{bad}");
        }
        let neg_zero: Value = serde_json::from_str(r#"{"batch":{"timeout":-0}}"#).unwrap();
        assert_eq!(patch(neg_zero).unwrap().batch.timeout, 0);
    }
}
