//! Records and values between the server's shapes and the WIT types.

use super::bindings::ferrobase::plugin::types as wit;
use crate::schema::value::from_stored;
use crate::schema::{Collection, FieldType, Schema};
use crate::store::StoreRecord;
use serde_json::{Map, Value};

/// A record as plugins receive it (the WIT `record-data`, without wasmtime types).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PluginRecord {
    pub collection: String,
    pub id: String,
    pub fields: Vec<(String, FieldValue)>,
}

/// The WIT `value`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum FieldValue {
    Null,
    Bool(bool),
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
    Json(String),
}

impl PluginRecord {
    /// A stored row as a superuser would see it through the API, minus secrets
    /// (password hashes and token keys never leave the host).
    pub(crate) fn from_stored(c: &Collection, row: &StoreRecord) -> Self {
        let mut fields = Vec::with_capacity(c.fields.len());
        let mut id = String::new();
        for (f, v) in c.fields.iter().zip(row.iter()) {
            if f.kind == FieldType::Password || (c.is_auth() && f.name == "tokenKey") {
                continue;
            }
            let json = from_stored(f, v.clone());
            if f.name == "id" {
                id = json.as_str().unwrap_or("").to_owned();
            }
            fields.push((
                f.name.clone(),
                FieldValue::from_json(f.kind, f.is_multi(), json),
            ));
        }
        Self {
            collection: c.name.clone(),
            id,
            fields,
        }
    }

    /// A record given as the API's JSON values (a pending write).
    pub(crate) fn from_json(c: &Collection, values: &[Value]) -> Self {
        let mut fields = Vec::with_capacity(c.fields.len());
        let mut id = String::new();
        for (f, v) in c.fields.iter().zip(values.iter()) {
            if f.kind == FieldType::Password || (c.is_auth() && f.name == "tokenKey") {
                continue;
            }
            if f.name == "id" {
                id = v.as_str().unwrap_or("").to_owned();
            }
            fields.push((
                f.name.clone(),
                FieldValue::from_json(f.kind, f.is_multi(), v.clone()),
            ));
        }
        Self {
            collection: c.name.clone(),
            id,
            fields,
        }
    }
}

/// A record as one plugin may see it: a field marked hidden only when
/// `granted(collection, field)` (its `db:hidden:<collection>.<field>` grant). Password hashes
/// and token keys are never in a `PluginRecord` to begin with.
pub(crate) fn visible(
    mut r: PluginRecord,
    schema: &Schema,
    granted: impl Fn(&str, &str) -> bool,
) -> PluginRecord {
    if let Some(c) = schema.by_name(&r.collection)
        && c.fields.iter().any(|f| f.hidden)
    {
        r.fields.retain(|(name, _)| {
            c.field(name)
                .is_none_or(|f| !f.hidden || granted(&c.name, name))
        });
    }
    r
}

/// [`visible`] straight into the WIT record, without copying a record that has nothing hidden.
pub(crate) fn record_for(
    r: &PluginRecord,
    schema: &Schema,
    granted: impl Fn(&str, &str) -> bool,
) -> wit::RecordData {
    match schema.by_name(&r.collection) {
        Some(c) if c.fields.iter().any(|f| f.hidden) => wit::RecordData {
            collection: r.collection.clone(),
            id: r.id.clone(),
            fields: r
                .fields
                .iter()
                .filter(|(name, _)| {
                    c.field(name)
                        .is_none_or(|f| !f.hidden || granted(&c.name, name))
                })
                .map(|(k, v)| (k.clone(), wit::Value::from(v)))
                .collect(),
        },
        _ => r.into(),
    }
}

impl FieldValue {
    fn from_json(kind: FieldType, multi: bool, v: Value) -> Self {
        match (kind, v) {
            (_, Value::Null) if kind != FieldType::Json => Self::Null,
            (FieldType::Bool, Value::Bool(b)) => Self::Bool(b),
            (FieldType::Number, Value::Number(n)) => Self::Real(n.as_f64().unwrap_or(0.0)),
            (FieldType::Json | FieldType::GeoPoint, v) => Self::Json(v.to_string()),
            (_, v) if multi => Self::Json(v.to_string()),
            (_, Value::String(s)) => Self::Text(s),
            (_, Value::Bool(b)) => Self::Bool(b),
            (_, Value::Number(n)) => Self::Real(n.as_f64().unwrap_or(0.0)),
            (_, v) => Self::Json(v.to_string()),
        }
    }

    /// As a JSON value for the API's record input. Blobs have no record field to go to.
    pub(crate) fn to_json(&self) -> Result<Value, String> {
        Ok(match self {
            Self::Null => Value::Null,
            Self::Bool(b) => Value::Bool(*b),
            Self::Int(i) => Value::from(*i),
            Self::Real(r) => serde_json::Number::from_f64(*r)
                .map(Value::Number)
                .ok_or_else(|| format!("{r} is not a JSON number"))?,
            Self::Text(s) => Value::String(s.clone()),
            Self::Json(s) => serde_json::from_str(s).map_err(|e| format!("invalid json: {e}"))?,
            Self::Blob(_) => return Err("a blob is not a record value".into()),
        })
    }
}

/// Field pairs from a plugin as the API's JSON body.
pub(crate) fn fields_to_json(
    fields: &[(String, FieldValue)],
) -> Result<Map<String, Value>, String> {
    let mut m = Map::new();
    for (k, v) in fields {
        m.insert(k.clone(), v.to_json().map_err(|e| format!("{k}: {e}"))?);
    }
    Ok(m)
}

impl From<&FieldValue> for wit::Value {
    fn from(v: &FieldValue) -> Self {
        match v {
            FieldValue::Null => Self::Null,
            FieldValue::Bool(b) => Self::Boolean(*b),
            FieldValue::Int(i) => Self::Integer(*i),
            FieldValue::Real(r) => Self::Real(*r),
            FieldValue::Text(s) => Self::Text(s.clone()),
            FieldValue::Blob(b) => Self::Blob(b.clone()),
            FieldValue::Json(s) => Self::Json(s.clone()),
        }
    }
}

impl From<wit::Value> for FieldValue {
    fn from(v: wit::Value) -> Self {
        match v {
            wit::Value::Null => Self::Null,
            wit::Value::Boolean(b) => Self::Bool(b),
            wit::Value::Integer(i) => Self::Int(i),
            wit::Value::Real(r) => Self::Real(r),
            wit::Value::Text(s) => Self::Text(s),
            wit::Value::Blob(b) => Self::Blob(b),
            wit::Value::Json(s) => Self::Json(s),
        }
    }
}

impl From<&PluginRecord> for wit::RecordData {
    fn from(r: &PluginRecord) -> Self {
        Self {
            collection: r.collection.clone(),
            id: r.id.clone(),
            fields: r
                .fields
                .iter()
                .map(|(k, v)| (k.clone(), wit::Value::from(v)))
                .collect(),
        }
    }
}

impl From<&super::Principal> for wit::Principal {
    fn from(p: &super::Principal) -> Self {
        Self {
            collection: p.collection.clone(),
            id: p.id.clone(),
            is_superuser: p.is_superuser,
        }
    }
}

impl From<wit::Rejection> for super::Rejection {
    fn from(r: wit::Rejection) -> Self {
        Self {
            // A plugin cannot turn a refusal into a success or a server error.
            status: if (400..500).contains(&r.status) {
                r.status
            } else {
                400
            },
            message: r.message,
            fields: r
                .fields
                .into_iter()
                .map(|f| (f.field, f.code, f.message))
                .collect(),
        }
    }
}

impl From<&super::Rejection> for wit::Rejection {
    fn from(r: &super::Rejection) -> Self {
        Self {
            status: r.status,
            message: r.message.clone(),
            fields: r
                .fields
                .iter()
                .map(|(f, c, m)| wit::FieldError {
                    field: f.clone(),
                    code: c.clone(),
                    message: m.clone(),
                })
                .collect(),
        }
    }
}
