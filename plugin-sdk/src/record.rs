//! Records, values and what hooks answer: helpers on the generated types.

use crate::bindings::exports::ferrobase::plugin::record_hooks;
use crate::bindings::ferrobase::plugin::types::{self, FieldChange, FieldError};

pub use crate::bindings::ferrobase::plugin::types::{Principal, Value};

/// A record as plugins see it: what the REST API shows a superuser (hidden fields included,
/// password hashes and token keys never).
pub type Record = types::RecordData;

/// A sign-in about to succeed: `method` ("password", "otp", "oauth2" or "refresh"), the
/// `auth_record` about to get a token, and the OAuth2 `provider`'s name.
pub type AuthAttempt = crate::bindings::exports::ferrobase::plugin::auth_hooks::AuthAttempt;

/// What a before-hook answers: go on, possibly after changing the pending record.
pub type Verdict = record_hooks::Verdict;

/// Refuses an operation; the client sees PocketBase's error body
/// `{"data":{field:{code,message}},"message":...,"status":...}`.
pub type Rejection = types::Rejection;

impl Value {
    /// The text of a `text` value (text, email, url, editor, date, select, relation, file...).
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// A number field's value; an `integer` from raw SQL converts too.
    pub fn as_real(&self) -> Option<f64> {
        match self {
            Value::Real(n) => Some(*n),
            #[allow(
                clippy::cast_precision_loss,
                reason = "SQLite integers read as numbers"
            )]
            Value::Integer(n) => Some(*n as f64),
            _ => None,
        }
    }

    /// An `integer` (raw SQL reads).
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Value::Integer(n) => Some(*n),
            _ => None,
        }
    }

    /// A bool field's value.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// The JSON text of a json, geoPoint or multi-value field.
    pub fn as_json(&self) -> Option<&str> {
        match self {
            Value::Json(s) => Some(s),
            _ => None,
        }
    }

    /// The bytes of a `blob` (raw SQL reads).
    pub fn as_blob(&self) -> Option<&[u8]> {
        match self {
            Value::Blob(b) => Some(b),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Self {
        Value::Text(s.clone())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Boolean(b)
    }
}

impl From<f64> for Value {
    fn from(n: f64) -> Self {
        Value::Real(n)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Integer(n)
    }
}

impl From<i32> for Value {
    fn from(n: i32) -> Self {
        Value::Integer(n.into())
    }
}

impl From<u8> for Value {
    fn from(n: u8) -> Self {
        Value::Integer(n.into())
    }
}

impl From<u16> for Value {
    fn from(n: u16) -> Self {
        Value::Integer(n.into())
    }
}

impl From<u32> for Value {
    fn from(n: u32) -> Self {
        Value::Integer(n.into())
    }
}

impl From<f32> for Value {
    fn from(n: f32) -> Self {
        Value::Real(n.into())
    }
}

/// A `u64` or `usize` past `i64::MAX` has no exact `Value`: it would be neither an integer nor
/// (exactly) a real.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutOfRange;

impl core::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("the number is larger than i64::MAX")
    }
}

impl std::error::Error for OutOfRange {}

impl TryFrom<u64> for Value {
    type Error = OutOfRange;
    fn try_from(n: u64) -> Result<Self, OutOfRange> {
        i64::try_from(n).map(Value::Integer).map_err(|_| OutOfRange)
    }
}

impl TryFrom<usize> for Value {
    type Error = OutOfRange;
    fn try_from(n: usize) -> Result<Self, OutOfRange> {
        i64::try_from(n).map(Value::Integer).map_err(|_| OutOfRange)
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Self {
        Value::Blob(b)
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

impl Record {
    /// An empty record, for tests and for building field lists.
    pub fn new(collection: &str, id: &str) -> Self {
        Record {
            collection: collection.to_owned(),
            id: id.to_owned(),
            fields: Vec::new(),
        }
    }

    /// This record with `name` set to `value` (replacing an earlier value).
    #[must_use]
    pub fn with(mut self, name: &str, value: impl Into<Value>) -> Self {
        let value = value.into();
        match self.fields.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = value,
            None => self.fields.push((name.to_owned(), value)),
        }
        self
    }

    /// The record's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The collection's name.
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// The value of the field `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// The field `name` as text, when it is a text value.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_text)
    }

    /// The field `name` as a number.
    pub fn real(&self, name: &str) -> Option<f64> {
        self.get(name).and_then(Value::as_real)
    }

    /// The field `name` as a bool.
    pub fn bool(&self, name: &str) -> Option<bool> {
        self.get(name).and_then(Value::as_bool)
    }

    /// The field `name` as JSON text (json, geoPoint and multi-value fields).
    pub fn json(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_json)
    }
}

impl Verdict {
    /// Go on unchanged.
    pub fn proceed() -> Self {
        Verdict::Proceed
    }

    /// Also set the field `name` on the pending record.
    #[must_use]
    pub fn set(self, name: &str, value: impl Into<Value>) -> Self {
        self.push(FieldChange::Set((name.to_owned(), value.into())))
    }

    /// Also clear the field `name` on the pending record (back to its zero value).
    #[must_use]
    pub fn unset(self, name: &str) -> Self {
        self.push(FieldChange::Unset(name.to_owned()))
    }

    /// The changes asked for, in order.
    pub fn changes(&self) -> &[FieldChange] {
        match self {
            Verdict::Proceed => &[],
            Verdict::Patch(changes) => changes,
        }
    }

    fn push(self, change: FieldChange) -> Self {
        let mut changes = match self {
            Verdict::Proceed => Vec::new(),
            Verdict::Patch(changes) => changes,
        };
        changes.push(change);
        Verdict::Patch(changes)
    }
}

impl Rejection {
    /// PocketBase's message for a refused create.
    pub const CREATE_FAILED: &'static str = "Failed to create record.";
    /// PocketBase's message for a refused update.
    pub const UPDATE_FAILED: &'static str = "Failed to update record.";
    /// PocketBase's message for a refused delete.
    pub const DELETE_FAILED: &'static str = "Failed to delete record.";

    /// A refusal with this status and message and no field errors.
    pub fn new(status: u16, message: &str) -> Self {
        Rejection {
            status,
            message: message.to_owned(),
            fields: Vec::new(),
        }
    }

    /// A 400 "Failed to create record." with one field error; change the message with
    /// [`Rejection::with_message`] (e.g. [`Rejection::UPDATE_FAILED`]).
    pub fn field(field: &str, code: &str, message: &str) -> Self {
        Rejection::new(400, Rejection::CREATE_FAILED).with_field(field, code, message)
    }

    /// This refusal with another top-level message.
    #[must_use]
    pub fn with_message(mut self, message: &str) -> Self {
        message.clone_into(&mut self.message);
        self
    }

    /// This refusal with one more field error.
    #[must_use]
    pub fn with_field(mut self, field: &str, code: &str, message: &str) -> Self {
        self.fields.push(FieldError {
            field: field.to_owned(),
            code: code.to_owned(),
            message: message.to_owned(),
        });
        self
    }
}

/// What a write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Create,
    Update,
    Delete,
}

impl Action {
    /// `"create"`, `"update"` or `"delete"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Create => "create",
            Action::Update => "update",
            Action::Delete => "delete",
        }
    }

    /// PocketBase's message for a refused write of this kind.
    pub fn failed_message(self) -> &'static str {
        match self {
            Action::Create => Rejection::CREATE_FAILED,
            Action::Update => Rejection::UPDATE_FAILED,
            Action::Delete => Rejection::DELETE_FAILED,
        }
    }
}

/// One committed change, as [`crate::Plugin::after_commit`] receives it.
#[derive(Clone, Debug)]
pub struct Change {
    pub action: Action,
    /// The record after the change (before it, for a delete).
    pub record: Record,
    /// The record before an update.
    pub previous: Option<Record>,
    /// Who made the change; none for the system (jobs, CLI).
    pub actor: Option<Principal>,
    /// Strictly increasing while the server runs.
    pub seq: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_getters_read_by_type() {
        let r = Record::new("posts", "abc")
            .with("title", "Hi")
            .with("views", 3.0)
            .with("draft", true)
            .with("tags", Value::Json("[\"a\"]".into()))
            .with("title", "Hello");
        assert_eq!((r.id(), r.collection()), ("abc", "posts"));
        assert_eq!(r.text("title"), Some("Hello"));
        assert_eq!(r.fields.len(), 4);
        assert_eq!(r.real("views"), Some(3.0));
        assert_eq!(r.bool("draft"), Some(true));
        assert_eq!(r.json("tags"), Some("[\"a\"]"));
        assert_eq!(r.text("views"), None);
        assert_eq!(r.get("missing"), None);
    }

    #[test]
    fn verdict_builder_collects_changes_in_order() {
        assert!(Verdict::proceed().changes().is_empty());
        let v = Verdict::proceed().set("slug", "a-b").unset("draft");
        assert_eq!(
            v.changes(),
            &[
                FieldChange::Set(("slug".into(), Value::Text("a-b".into()))),
                FieldChange::Unset("draft".into()),
            ]
        );
    }

    #[test]
    fn rejection_field_defaults_to_create_wording() {
        let r = Rejection::field("slug", "validation_invalid_slug", "Bad.");
        assert_eq!(
            (r.status, r.message.as_str()),
            (400, "Failed to create record.")
        );
        assert_eq!(r.fields[0].code, "validation_invalid_slug");
        let r = r.with_message(Rejection::UPDATE_FAILED);
        assert_eq!(r.message, "Failed to update record.");
    }

    #[test]
    fn unsigned_and_small_numbers_convert_exactly() {
        assert_eq!(Value::from(7u8), Value::Integer(7));
        assert_eq!(Value::from(u16::MAX), Value::Integer(65_535));
        assert_eq!(Value::from(u32::MAX), Value::Integer(4_294_967_295));
        assert_eq!(Value::from(-3i32), Value::Integer(-3));
        assert_eq!(Value::from(0.5f32), Value::Real(0.5));
        assert_eq!(Value::try_from(42u64), Ok(Value::Integer(42)));
        assert_eq!(Value::try_from(u64::MAX), Err(OutOfRange));
        assert_eq!(Value::try_from(9usize), Ok(Value::Integer(9)));
    }

    #[test]
    fn option_values_become_null() {
        assert_eq!(Value::from(None::<&str>), Value::Null);
        assert_eq!(Value::from(Some("x")), Value::Text("x".into()));
    }
}
