//! Owns collections, fields, rules and record values as plain data. No IO, no SQL text, no HTTP.
//!
//! A collection is kept in PocketBase's own JSON shape (the one stored in `_collections.fields` and
//! `_collections.options`), normalized with every default filled in, so a definition written by
//! PocketBase round-trips unchanged and what we write opens in PocketBase.

pub(crate) mod date;
pub(crate) mod define;
pub(crate) mod ids;
pub(crate) mod index;
pub(crate) mod value;
pub(crate) mod view;

use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

pub(crate) const SUPERUSERS_ID: &str = "pbc_3142635823";
pub(crate) const USERS_ID: &str = "_pb_users_auth_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CollectionType {
    Base,
    Auth,
    View,
}

impl CollectionType {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        match s {
            "base" => Some(Self::Base),
            "auth" => Some(Self::Auth),
            "view" => Some(Self::View),
            _ => None,
        }
    }
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Base => "base",
            Self::Auth => "auth",
            Self::View => "view",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum FieldType {
    Text,
    Number,
    Bool,
    Email,
    Url,
    Editor,
    Date,
    Autodate,
    Select,
    File,
    Relation,
    Json,
    GeoPoint,
    Password,
}

impl FieldType {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "text" => Self::Text,
            "number" => Self::Number,
            "bool" => Self::Bool,
            "email" => Self::Email,
            "url" => Self::Url,
            "editor" => Self::Editor,
            "date" => Self::Date,
            "autodate" => Self::Autodate,
            "select" => Self::Select,
            "file" => Self::File,
            "relation" => Self::Relation,
            "json" => Self::Json,
            "geoPoint" => Self::GeoPoint,
            "password" => Self::Password,
            _ => return None,
        })
    }
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::Number => "number",
            Self::Bool => "bool",
            Self::Email => "email",
            Self::Url => "url",
            Self::Editor => "editor",
            Self::Date => "date",
            Self::Autodate => "autodate",
            Self::Select => "select",
            Self::File => "file",
            Self::Relation => "relation",
            Self::Json => "json",
            Self::GeoPoint => "geoPoint",
            Self::Password => "password",
        }
    }
}

/// One field of a collection. `raw` is the complete, normalized PocketBase JSON of the field
/// (alphabetical keys, every default present); the typed members are cached copies of the keys
/// every request needs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Field {
    pub id: String,
    pub name: String,
    pub kind: FieldType,
    pub system: bool,
    pub hidden: bool,
    pub required: bool,
    pub raw: Map<String, Value>,
    /// A text field's `pattern`, compiled once when the field is read (validation runs it on
    /// every write).
    pub pattern: Option<Pattern>,
}

/// A compiled `pattern`; `None` inside when it does not compile (every value then fails it).
#[derive(Debug, Clone)]
pub(crate) struct Pattern(pub Option<std::sync::Arc<regex::Regex>>);

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_ref().map(|r| r.as_str()) == other.0.as_ref().map(|r| r.as_str())
    }
}

impl Field {
    pub(crate) fn opt_i64(&self, key: &str) -> i64 {
        self.raw
            .get(key)
            .and_then(Value::as_f64)
            .map(|v| v as i64)
            .unwrap_or(0)
    }
    pub(crate) fn opt_f64(&self, key: &str) -> Option<f64> {
        self.raw.get(key).and_then(Value::as_f64)
    }
    pub(crate) fn opt_bool(&self, key: &str) -> bool {
        self.raw.get(key).and_then(Value::as_bool).unwrap_or(false)
    }
    pub(crate) fn opt_str(&self, key: &str) -> &str {
        self.raw.get(key).and_then(Value::as_str).unwrap_or("")
    }
    pub(crate) fn opt_strings(&self, key: &str) -> Vec<String> {
        match self.raw.get(key) {
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        }
    }
    /// Select, relation and file fields hold a JSON array when maxSelect > 1, a single string otherwise.
    pub(crate) fn is_multi(&self) -> bool {
        matches!(
            self.kind,
            FieldType::Select | FieldType::Relation | FieldType::File
        ) && self.opt_i64("maxSelect") > 1
    }
    pub(crate) fn is_primary_key(&self) -> bool {
        self.kind == FieldType::Text && self.opt_bool("primaryKey")
    }
    /// The SQL column definition PocketBase uses for this field (§1.5 of the API notes).
    pub(crate) fn column_def(&self) -> &'static str {
        match self.kind {
            FieldType::Text if self.is_primary_key() => {
                "TEXT PRIMARY KEY DEFAULT ('r'||lower(hex(randomblob(7)))) NOT NULL"
            }
            FieldType::Number => "NUMERIC DEFAULT 0 NOT NULL",
            FieldType::Bool => "BOOLEAN DEFAULT FALSE NOT NULL",
            FieldType::Json => "JSON DEFAULT NULL",
            FieldType::GeoPoint => "JSON DEFAULT '{\"lon\":0,\"lat\":0}' NOT NULL",
            FieldType::Select | FieldType::File | FieldType::Relation if self.is_multi() => {
                "JSON DEFAULT '[]' NOT NULL"
            }
            _ => "TEXT DEFAULT '' NOT NULL",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rules {
    pub list: Option<String>,
    pub view: Option<String>,
    pub create: Option<String>,
    pub update: Option<String>,
    pub delete: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Collection {
    pub id: String,
    pub name: String,
    pub kind: CollectionType,
    pub system: bool,
    pub fields: Vec<Field>,
    pub indexes: Vec<String>,
    pub rules: Rules,
    /// The type-specific options exactly as stored in `_collections.options` (token secrets included).
    pub options: Map<String, Value>,
    pub created: String,
    pub updated: String,
}

impl Collection {
    pub(crate) fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
    /// The raw stored text of column `name` in `row` ("" when absent or not text). Auth secrets
    /// (password hash, tokenKey) are read through this: the API form blanks them.
    pub(crate) fn stored_text<'r>(&self, row: &'r [value::Stored], name: &str) -> &'r str {
        match self
            .fields
            .iter()
            .position(|f| f.name == name)
            .map(|i| &row[i])
        {
            Some(value::Stored::Text(t)) => t,
            _ => "",
        }
    }
    pub(crate) fn is_auth(&self) -> bool {
        self.kind == CollectionType::Auth
    }
    pub(crate) fn is_view(&self) -> bool {
        self.kind == CollectionType::View
    }
    /// Whether its records can have files (a file field).
    pub(crate) fn has_files(&self) -> bool {
        self.fields.iter().any(|f| f.kind == FieldType::File)
    }
    pub(crate) fn view_query(&self) -> &str {
        self.options
            .get("viewQuery")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
    /// A token secret from the auth options (`authToken`, `fileToken`, ...).
    pub(crate) fn token_secret(&self, kind: &str) -> Option<&str> {
        self.options.get(kind)?.get("secret")?.as_str()
    }
    pub(crate) fn token_duration(&self, kind: &str) -> i64 {
        self.options
            .get(kind)
            .and_then(|o| o.get("duration"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    }
    pub(crate) fn auth_option(&self, key: &str) -> Option<&Value> {
        self.options.get(key)
    }
    pub(crate) fn rule_value(rule: &Option<String>) -> Value {
        match rule {
            Some(s) => Value::String(s.clone()),
            None => Value::Null,
        }
    }

    /// The collection as the API returns it: fixed key order, auth secrets removed.
    pub(crate) fn to_api_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("listRule".into(), Self::rule_value(&self.rules.list));
        m.insert("viewRule".into(), Self::rule_value(&self.rules.view));
        m.insert("createRule".into(), Self::rule_value(&self.rules.create));
        m.insert("updateRule".into(), Self::rule_value(&self.rules.update));
        m.insert("deleteRule".into(), Self::rule_value(&self.rules.delete));
        m.insert("name".into(), json!(self.name));
        m.insert("type".into(), json!(self.kind.as_str()));
        m.insert(
            "fields".into(),
            Value::Array(
                self.fields
                    .iter()
                    .map(|f| Value::Object(f.raw.clone()))
                    .collect(),
            ),
        );
        m.insert("indexes".into(), json!(self.indexes));
        m.insert("created".into(), json!(self.created));
        m.insert("updated".into(), json!(self.updated));
        m.insert("system".into(), json!(self.system));
        match self.kind {
            CollectionType::Base => {}
            CollectionType::View => {
                m.insert("viewQuery".into(), json!(self.view_query()));
            }
            CollectionType::Auth => {
                for (k, v) in &self.options {
                    let mut v = v.clone();
                    if k.ends_with("Token")
                        && let Value::Object(o) = &mut v
                    {
                        o.remove("secret");
                    }
                    if k == "oauth2"
                        && let Some(Value::Array(ps)) = v.get_mut("providers")
                    {
                        for p in ps {
                            if let Value::Object(o) = p {
                                o.remove("clientSecret");
                            }
                        }
                    }
                    m.insert(k.clone(), v);
                }
            }
        }
        Value::Object(m)
    }
}

/// An immutable snapshot of every collection. Swapped whole on every schema change; a request
/// loads it once and keeps a consistent view for its whole life.
#[derive(Debug, Default)]
pub(crate) struct Schema {
    pub collections: Vec<Arc<Collection>>,
    by_id: HashMap<String, usize>,
    by_lower_name: HashMap<String, usize>,
}

impl Schema {
    pub(crate) fn new(collections: Vec<Collection>) -> Self {
        let collections: Vec<Arc<Collection>> = collections.into_iter().map(Arc::new).collect();
        let mut by_id = HashMap::new();
        let mut by_lower_name = HashMap::new();
        for (i, c) in collections.iter().enumerate() {
            by_id.insert(c.id.clone(), i);
            by_lower_name.insert(c.name.to_lowercase(), i);
        }
        Self {
            collections,
            by_id,
            by_lower_name,
        }
    }
    pub(crate) fn by_id(&self, id: &str) -> Option<&Arc<Collection>> {
        self.by_id.get(id).map(|&i| &self.collections[i])
    }
    /// Exact name (PocketBase matches names case-insensitively when it looks a collection up).
    pub(crate) fn by_name(&self, name: &str) -> Option<&Arc<Collection>> {
        self.by_lower_name
            .get(&name.to_lowercase())
            .map(|&i| &self.collections[i])
    }
    pub(crate) fn by_id_or_name(&self, key: &str) -> Option<&Arc<Collection>> {
        self.by_id(key).or_else(|| self.by_name(key))
    }
}
