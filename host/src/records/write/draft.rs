//! The record being written: body input applied to a draft (coerced, modifiers, auth fields,
//! server-side values), validated, passwords hashed, turned into the row the store writes.

use super::super::{MSG_CREATE_FAILED, RecordError, Result};
use crate::auth::password;
use crate::plugins::FieldValue;
use crate::schema::define::verr;
use crate::schema::value::{
    self, Modifier, Stored, apply_modifier, coerce, from_stored, split_modifier, zero,
};
use crate::schema::{Collection, FieldType, SUPERUSERS_ID, Schema, ids};
use crate::store::{StoreRecord, records as store_records};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The record being written, in API form, aligned with the collection's fields.
pub(super) struct Draft {
    pub values: Vec<Value>,
    /// Plaintext passwords to hash before the write, by field index.
    pub passwords: Vec<(usize, String)>,
    /// Errors found in the raw input, which its coerced value no longer shows (by field index).
    pub input_errors: Vec<(usize, Value)>,
    /// The first refused upload of each file field (its size or type), reported only when the
    /// field's value passes: PocketBase counts a field's files before it checks each new one.
    pub upload_errors: Vec<(usize, Value)>,
    /// Json fields given as JSON text, by field index: the text as it came (PocketBase stores
    /// it verbatim, spaces and number spellings included, and checks its size and blankness)
    /// with the value read from it. The text stands for the field while the field still holds
    /// that value (a plugin's patch or a later step may replace it).
    pub json_texts: Vec<(usize, String, Value)>,
}

pub(super) fn idx(c: &Collection, name: &str) -> Option<usize> {
    c.fields.iter().position(|f| f.name == name)
}

/// A field every collection of its kind has (the id, an auth collection's password).
pub(super) fn field_index(c: &Collection, name: &str) -> Result<usize> {
    idx(c, name).ok_or_else(|| {
        RecordError::Store(crate::store::StoreError::Schema(format!(
            "collection {} has no {name} field",
            c.name
        )))
    })
}

/// Apply body keys (plain and modifier forms) to the draft. Auth secrets and autodates are the
/// server's; hidden fields are dropped for non-superusers, as PocketBase does.
pub(super) fn apply_body(
    c: &Collection,
    draft: &mut Draft,
    data: &Map<String, Value>,
    superuser: bool,
) {
    let mut modifiers: Vec<(usize, Modifier, &Value)> = Vec::new();
    for (k, v) in data {
        let (name, m) = split_modifier(k);
        let Some(i) = idx(c, name) else { continue };
        let f = &c.fields[i];
        if f.kind == FieldType::Autodate || f.name == "id" {
            continue;
        }
        // The password has its own form checks; the tokenKey is a hidden text field like any
        // other (a superuser may set it, and it is validated as sent).
        if c.is_auth() && f.name == "password" {
            continue;
        }
        if f.hidden && !superuser && f.kind != FieldType::Password {
            continue;
        }
        match m {
            None => {
                if f.kind == FieldType::Password {
                    draft.passwords.retain(|(j, _)| *j != i);
                    let s = value::as_string(v);
                    draft.values[i] = json!(s);
                    if !s.is_empty() {
                        draft.passwords.push((i, s));
                    }
                } else if f.kind == FieldType::File {
                    // Uploads arrive with the files issue. A name sent as a value must be one
                    // already attached (kept); any other is refused, as PocketBase refuses names
                    // that are not among the record's files or this request's uploads.
                    let current = value::to_list(&draft.values[i]);
                    let mut wanted = value::to_list(v);
                    // A single-file field keeps the last name it is given: PocketBase
                    // normalises the value before it checks the names.
                    if !f.is_multi() && wanted.len() > 1 {
                        wanted = wanted.split_off(wanted.len() - 1);
                    }
                    unknown_files(i, &current, &wanted, &mut draft.input_errors);
                    let keep: Vec<Value> = wanted
                        .into_iter()
                        .filter(|w| current.contains(w))
                        .map(Value::String)
                        .collect();
                    draft.values[i] = if f.is_multi() {
                        Value::Array(keep)
                    } else {
                        keep.into_iter().next().unwrap_or(json!(""))
                    };
                } else {
                    if let Some(e) = value::json_input_error(f, v) {
                        draft.input_errors.push((i, e));
                    }
                    draft.values[i] = coerce(f, v);
                    draft.json_texts.retain(|(j, _, _)| *j != i);
                    if let Value::String(text) = v
                        && value::is_json_text(f, text)
                    {
                        draft
                            .json_texts
                            .push((i, text.clone(), draft.values[i].clone()));
                    }
                }
            }
            Some(m) => modifiers.push((i, m, v)),
        }
    }
    for (i, m, v) in modifiers {
        let f = &c.fields[i];
        if f.kind == FieldType::File && m != Modifier::Subtract {
            let current = value::to_list(&draft.values[i]);
            unknown_files(i, &current, &value::to_list(v), &mut draft.input_errors);
            continue;
        }
        draft.values[i] = apply_modifier(f, &draft.values[i], m, v);
    }
}

/// Body values whose bytes were not UTF-8 (`not_utf8`, by body key) sent to json fields: the
/// value was read with U+FFFD for each invalid byte, which PocketBase would have quoted as
/// `\xff` and refused (see `value::json_input_error_not_utf8`).
pub(super) fn refuse_not_utf8_json(
    c: &Collection,
    draft: &mut Draft,
    data: &Map<String, Value>,
    not_utf8: &[String],
    superuser: bool,
) {
    for key in not_utf8 {
        let (Some(i), Some(v)) = (idx(c, key), data.get(key)) else {
            continue;
        };
        let f = &c.fields[i];
        if f.kind != FieldType::Json
            || (f.hidden && !superuser)
            || draft.input_errors.iter().any(|(j, _)| *j == i)
        {
            continue;
        }
        if let Some(e) = value::json_input_error_not_utf8(f, v) {
            draft.input_errors.push((i, e));
        }
    }
}

/// Names sent to file field `i` that are not attached to the record: PocketBase's
/// `validation_invalid_file`.
fn unknown_files(i: usize, current: &[String], wanted: &[String], out: &mut Vec<(usize, Value)>) {
    let unknown: Vec<&String> = wanted.iter().filter(|w| !current.contains(w)).collect();
    if unknown.is_empty() {
        return;
    }
    let shown: Vec<&str> = unknown.iter().map(|s| s.as_str()).collect();
    out.push((
        i,
        crate::schema::define::verr_params(
            "validation_invalid_file",
            &format!("Invalid new files: [{}].", shown.join(" ")),
            json!({"invalidFiles": unknown}),
        ),
    ));
}

pub(super) fn validation_error(message: &'static str, data: Map<String, Value>) -> RecordError {
    RecordError::invalid(message, data)
}

/// Field validation plus the checks that need the database (relations exist).
/// Relation ids a write must find: (field name, target collection, ids).
pub(super) type RelationChecks = Vec<(String, Arc<Collection>, Vec<String>)>;

/// The fields whose relation ids do not all exist.
pub(super) fn missing_relations(
    conn: crate::store::Conn<'_>,
    checks: &RelationChecks,
) -> crate::store::Result<Vec<String>> {
    let mut missing = Vec::new();
    for (name, target, ids) in checks {
        let found = store_records::existing_ids(conn, target, ids)?;
        if ids.iter().any(|i| !found.contains(i)) {
            missing.push(name.clone());
        }
    }
    Ok(missing)
}

pub(super) fn missing_relation_errors(names: Vec<String>) -> Map<String, Value> {
    let mut errors = Map::new();
    for name in names {
        errors.insert(
            name,
            verr(
                "validation_missing_rel_records",
                "Failed to find all relation records with the provided ids.",
            ),
        );
    }
    errors
}

/// Validate the draft: every field error, and the relation ids still to be found, which the
/// write checks on its own connection (one trip to the writer instead of a read first), or
/// which the caller looks up to report them along with the other errors.
pub(super) fn validate(
    schema: &Schema,
    c: &Arc<Collection>,
    draft: &Draft,
    skip: &[usize],
) -> (Map<String, Value>, RelationChecks) {
    let mut errors = Map::new();
    for (i, f) in c.fields.iter().enumerate() {
        // Errors in the raw input count even where the value ends up unchanged.
        if let Some((_, e)) = draft.input_errors.iter().find(|(j, _)| *j == i) {
            errors.insert(f.name.clone(), e.clone());
            continue;
        }
        if skip.contains(&i) || f.kind == FieldType::Autodate {
            continue;
        }
        let found = match draft.json_text(i) {
            Some(text) => value::validate_json_text(f, text),
            None => value::validate(f, &draft.values[i]),
        };
        if let Some(e) = found {
            errors.insert(f.name.clone(), e);
        } else if let Some((_, e)) = draft.upload_errors.iter().find(|(j, _)| *j == i) {
            errors.insert(f.name.clone(), e.clone());
        }
    }
    let mut checks: RelationChecks = Vec::new();
    for (i, f) in c.fields.iter().enumerate() {
        if f.kind != FieldType::Relation || errors.contains_key(&f.name) {
            continue;
        }
        let ids: Vec<String> = match &draft.values[i] {
            Value::Array(a) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            Value::String(s) if !s.is_empty() => vec![s.clone()],
            _ => continue,
        };
        if ids.is_empty() {
            continue;
        }
        match schema.by_id(f.opt_str("collectionId")) {
            Some(target) => checks.push((f.name.clone(), Arc::clone(target), ids)),
            None => {
                errors.insert(
                    f.name.clone(),
                    verr(
                        "validation_missing_rel_records",
                        "Failed to find all relation records with the provided ids.",
                    ),
                );
            }
        }
    }
    (errors, checks)
}

/// Whether a password sent in `data` is one bcrypt refuses (over 72 bytes). PocketBase hashes a
/// password while it loads the body; for a non-superuser's create on a collection with a create
/// rule it then exports the would-be record to check that rule, and the hash's error ends the
/// request there with no field errors.
pub(super) fn unhashable_password(c: &Collection, data: &Map<String, Value>) -> bool {
    c.fields.iter().any(|f| {
        f.kind == FieldType::Password
            && data
                .get(&f.name)
                .is_some_and(|v| !value::password_hashable(&value::as_string(v)))
    })
}

/// Hash the draft's new passwords off the async runtime.
pub(super) async fn hash_passwords(c: &Collection, draft: &mut Draft) -> Result<()> {
    for (i, plain) in std::mem::take(&mut draft.passwords) {
        let cost = u32::try_from(c.fields[i].opt_i64("cost")).unwrap_or(0);
        let h = password::hash_off(plain, cost).await.map_err(|e| {
            tracing::error!(error = %e, "password hashing failed");
            RecordError::Internal(format!("password hashing: {e}"))
        })?;
        draft.values[i] = json!(h);
    }
    Ok(())
}

pub(super) fn to_row(
    c: &Collection,
    draft: &Draft,
    only: Option<&[usize]>,
) -> Vec<(usize, Stored)> {
    c.fields
        .iter()
        .enumerate()
        .filter(|(i, _)| only.is_none_or(|o| o.contains(i)))
        .map(|(i, f)| (i, draft.stored(i, f)))
        .collect()
}
/// A new record as a rule sees it before it is written (PocketBase's dummy record): every
/// field's stored value, `verified` false whatever the body says.
pub(super) fn would_be_row(c: &Collection, draft: &Draft) -> Vec<Stored> {
    c.fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            if c.is_auth() && f.name == "verified" {
                value::to_stored(f, &json!(false))
            } else {
                draft.stored(i, f)
            }
        })
        .collect()
}

/// Apply a before-hook's patch to the draft (coerced like body input). The id, autodates and
/// auth secrets stay the server's.
pub(super) fn apply_patch(
    c: &Collection,
    draft: &mut Draft,
    patch: Vec<(String, Option<FieldValue>)>,
) -> std::result::Result<(), String> {
    for (name, v) in patch {
        let Some(i) = idx(c, &name) else { continue };
        let f = &c.fields[i];
        if f.name == "id" || f.kind == FieldType::Autodate || f.kind == FieldType::Password {
            continue;
        }
        if c.is_auth() && f.name == "tokenKey" {
            continue;
        }
        draft.values[i] = match v {
            None => zero(f),
            Some(v) => coerce(f, &v.to_json()?),
        };
    }
    Ok(())
}

impl Draft {
    /// The JSON text field `i` was given, while it still holds the value read from it.
    fn json_text(&self, i: usize) -> Option<&str> {
        self.json_texts
            .iter()
            .find(|(j, _, read)| *j == i && self.values[i] == *read)
            .map(|(_, text, _)| text.as_str())
    }

    /// Field `i`'s value as it is stored: a json field's text as given, else its value's.
    fn stored(&self, i: usize, f: &crate::schema::Field) -> Stored {
        match self.json_text(i) {
            Some(text) => Stored::Text(text.to_owned()),
            None => value::to_stored(f, &self.values[i]),
        }
    }

    /// A new record: zero values, then the body.
    pub(super) fn new_record(c: &Collection, data: &Map<String, Value>, superuser: bool) -> Self {
        let mut draft = Draft {
            values: c.fields.iter().map(zero).collect(),
            passwords: Vec::new(),
            input_errors: Vec::new(),
            upload_errors: Vec::new(),
            json_texts: Vec::new(),
        };
        apply_body(c, &mut draft, data, superuser);
        draft
    }

    /// A stored record about to change: its values (password hashes kept as they are), then
    /// the body.
    pub(super) fn existing(
        c: &Collection,
        row: &StoreRecord,
        data: &Map<String, Value>,
        superuser: bool,
    ) -> (Self, Vec<Value>) {
        let mut draft = Draft {
            values: c
                .fields
                .iter()
                .zip(row.iter())
                .map(|(f, s)| match (f.kind, s) {
                    // Keep the stored hash as is; from_stored would blank it.
                    (FieldType::Password, Stored::Text(t)) => json!(t),
                    _ => from_stored(f, s.clone()),
                })
                .collect(),
            passwords: Vec::new(),
            input_errors: Vec::new(),
            upload_errors: Vec::new(),
            json_texts: Vec::new(),
        };
        let before = draft.values.clone();
        apply_body(c, &mut draft, data, superuser);
        (draft, before)
    }
}

/// What a new record gets from the server: autodates, the id (the client's, cast to text as
/// PocketBase casts a number or bool, and then validated like any text field), values from
/// empty text fields' `autogeneratePattern` (an id without one stays empty and is refused as
/// required). Returns the id's field index.
pub(super) fn fill_new(
    c: &Collection,
    draft: &mut Draft,
    data: &Map<String, Value>,
) -> Result<usize> {
    let now = ids::now();
    for (i, f) in c.fields.iter().enumerate() {
        if f.kind == FieldType::Autodate && f.opt_bool("onCreate") {
            draft.values[i] = json!(now);
        }
    }
    let id_idx = field_index(c, "id")?;
    if let Some(s) = data.get("id").map(value::as_string) {
        draft.values[id_idx] = json!(s);
    }
    for (i, f) in c.fields.iter().enumerate() {
        if f.kind == FieldType::Text
            && draft.values[i].as_str() == Some("")
            && let Some(v) = Some(f.opt_str("autogeneratePattern"))
                .filter(|p| !p.is_empty())
                .and_then(ids::from_pattern)
        {
            draft.values[i] = json!(v);
        }
    }
    Ok(id_idx)
}

/// A new auth record: password and passwordConfirm required and equal, a fresh tokenKey,
/// `verified` set by superusers only (always true for superusers). Returns the fields not to
/// validate (the generated tokenKey).
pub(super) fn auth_create_checks(
    c: &Collection,
    superuser: bool,
    data: &Map<String, Value>,
    draft: &mut Draft,
) -> Result<Vec<usize>> {
    let mut skip = Vec::new();
    let pw = data
        .get("password")
        .map(value::as_string)
        .unwrap_or_default();
    let confirm = data
        .get("passwordConfirm")
        .map(value::as_string)
        .unwrap_or_default();
    let confirm = confirm.as_str();
    let mut form = Map::new();
    if pw.is_empty() {
        form.insert(
            "password".into(),
            verr("validation_required", "Cannot be blank."),
        );
    }
    if confirm.is_empty() {
        form.insert(
            "passwordConfirm".into(),
            verr("validation_required", "Cannot be blank."),
        );
    } else if confirm != pw {
        form.insert(
            "passwordConfirm".into(),
            verr("validation_values_mismatch", "Values don't match."),
        );
    }
    // Reported with the password's errors, as one form.
    if let Some(vi) = idx(c, "verified") {
        if c.id == SUPERUSERS_ID {
            draft.values[vi] = json!(true);
        } else if !superuser && draft.values[vi] == json!(true) {
            form.insert(
                "verified".into(),
                verr("validation_values_mismatch", "Values don't match."),
            );
        }
    }
    if !form.is_empty() {
        return Err(validation_error(MSG_CREATE_FAILED, form));
    }
    let pi = field_index(c, "password")?;
    draft.values[pi] = json!(pw.clone());
    draft.passwords.push((pi, pw));
    if let Some(ti) = idx(c, "tokenKey")
        && draft.values[ti].as_str().is_none_or(str::is_empty)
    {
        // Left empty, it is generated (a value sent by a superuser is validated as it is).
        draft.values[ti] = json!(ids::secret(50));
        skip.push(ti);
    }
    Ok(skip)
}

/// Auth records, PocketBase's form checks before the record's own: only superusers change
/// `email` and `verified` directly; `password` and `passwordConfirm` go together (each is
/// required once the other, or `oldPassword`, is sent, and they must match); a non-superuser
/// changing the password gives the old one. Form errors end the update there (into `errors`).
/// A password sent (empty included) becomes the password field's new value, validated with
/// the record; a new password rotates the tokenKey.
pub(super) async fn auth_update_checks(
    c: &Collection,
    superuser: bool,
    data: &Map<String, Value>,
    draft: &mut Draft,
    before: &[Value],
    changed: &mut Vec<usize>,
    errors: &mut Map<String, Value>,
) -> Result<()> {
    if !superuser {
        for name in ["email", "verified"] {
            if let Some(i) = idx(c, name)
                && draft.values[i] != before[i]
            {
                errors.insert(
                    name.into(),
                    verr("validation_values_mismatch", "Values don't match."),
                );
            }
        }
    }
    let text = |k: &str| data.get(k).map(value::as_string).unwrap_or_default();
    let (pw, confirm, old) = (
        text("password"),
        text("passwordConfirm"),
        text("oldPassword"),
    );
    if pw.is_empty() && (!confirm.is_empty() || !old.is_empty()) {
        errors.insert(
            "password".into(),
            verr("validation_required", "Cannot be blank."),
        );
    }
    if confirm.is_empty() && (!pw.is_empty() || !old.is_empty()) {
        errors.insert(
            "passwordConfirm".into(),
            verr("validation_required", "Cannot be blank."),
        );
    } else if confirm != pw {
        errors.insert(
            "passwordConfirm".into(),
            verr("validation_values_mismatch", "Values don't match."),
        );
    }
    let pi = field_index(c, "password")?;
    if !superuser && (!pw.is_empty() || !confirm.is_empty()) {
        if old.is_empty() {
            errors.insert(
                "oldPassword".into(),
                verr("validation_required", "Cannot be blank."),
            );
        } else {
            let hash = before[pi].as_str().unwrap_or("").to_owned();
            let ok = password::check(old, hash).await;
            if !ok {
                errors.insert(
                    "oldPassword".into(),
                    verr(
                        "validation_invalid_old_password",
                        "Missing or invalid old password.",
                    ),
                );
            }
        }
    }
    let new_password = !pw.is_empty();
    if data.contains_key("password") {
        draft.values[pi] = json!(pw);
        draft.passwords.retain(|(j, _)| *j != pi);
        changed.push(pi);
        if new_password {
            draft.passwords.push((pi, pw));
        }
    }
    // A new password or e-mail rotates the tokenKey, unless the update sets one itself.
    let email_changed = idx(c, "email").is_some_and(|i| draft.values[i] != before[i]);
    if let Some(ti) = idx(c, "tokenKey")
        && draft.values[ti] == before[ti]
        && (new_password || email_changed)
    {
        draft.values[ti] = json!(ids::secret(50));
        changed.push(ti);
    }
    Ok(())
}

/// A unique index refused the write: each of its columns is `validation_not_unique`.
pub(super) fn unique_error(message: &'static str, cols: Vec<String>) -> RecordError {
    let mut data = Map::new();
    for col in cols {
        data.insert(col, verr("validation_not_unique", "Value must be unique."));
    }
    validation_error(message, data)
}

/// Uploads of one write, attached to the draft: each waits (in the files area's temporary
/// folder) for the commit that makes its name part of the record.
pub(super) type Pending = Vec<crate::files::Upload>;

/// Attach this request's uploads (by body key: `field`, `field+`, `+field`) to the draft as
/// PocketBase does: a plain upload replaces the field's files (except the names sent with it
/// under the same key), `field+` appends, `+field` prepends; a single-file field keeps the last.
/// Size and type are checked per upload (`maxSize`, PocketBase's 5 MiB default, `mimeTypes`),
/// their errors kept as input errors. Uploads to other keys are dropped (their temp files go).
pub(super) fn attach_uploads(
    c: &Collection,
    draft: &mut Draft,
    data: &Map<String, Value>,
    uploads: Vec<(String, crate::files::Upload)>,
) -> Pending {
    let mut pending = Pending::new();
    let mut replaced: Vec<usize> = Vec::new();
    for (key, up) in uploads {
        let (name, m) = split_modifier(&key);
        let Some(i) = idx(c, name) else { continue };
        let f = &c.fields[i];
        if f.kind != FieldType::File || m == Some(Modifier::Subtract) {
            continue;
        }
        let mut list = value::to_list(&draft.values[i]);
        if m.is_none() && !data.contains_key(name) && !replaced.contains(&i) {
            // A plain upload without names under its key replaces every current file.
            list.clear();
        }
        replaced.push(i);
        if let Some(e) = upload_error(f, &up)
            && !draft.upload_errors.iter().any(|(j, _)| *j == i)
        {
            draft.upload_errors.push((i, e));
        }
        match m {
            Some(Modifier::Prepend) => list.insert(0, up.name.clone()),
            _ => list.push(up.name.clone()),
        }
        draft.values[i] = if f.is_multi() {
            json!(list)
        } else {
            json!(list.last().cloned().unwrap_or_default())
        };
        pending.push(up);
    }
    keep_attached(c, draft, &mut pending);
    pending
}

/// Only uploads whose names the record keeps are placed (a single-file field keeps one, and a
/// before-hook may take a name out).
pub(super) fn keep_attached(c: &Collection, draft: &Draft, pending: &mut Pending) {
    pending.retain(|up| {
        c.fields.iter().enumerate().any(|(i, f)| {
            f.kind == FieldType::File && value::to_list(&draft.values[i]).contains(&up.name)
        })
    });
}

/// The uploads a before-hook is told of: those the draft's file fields name, in field order
/// and, within a field, in the order the record lists them.
pub(super) fn uploads_for_hooks(
    c: &Collection,
    draft: &Draft,
    pending: &Pending,
) -> Vec<crate::plugins::PendingUpload> {
    let mut out = Vec::new();
    for (i, f) in c.fields.iter().enumerate() {
        if f.kind != FieldType::File {
            continue;
        }
        for name in value::to_list(&draft.values[i]) {
            if let Some(up) = pending.iter().find(|u| u.name == name) {
                out.push(crate::plugins::PendingUpload {
                    field: f.name.clone(),
                    name: up.name.clone(),
                    original: up.original.clone(),
                    size: up.size,
                    content_type: up.mime.to_owned(),
                });
            }
        }
    }
    out
}

/// PocketBase's per-upload checks: its size against `maxSize`, its sniffed type against
/// `mimeTypes`.
fn upload_error(f: &crate::schema::Field, up: &crate::files::Upload) -> Option<Value> {
    let max = match f.opt_i64("maxSize") {
        n if n > 0 => n,
        _ => FILE_MAX_BYTES_DEFAULT,
    };
    if i64::try_from(up.size).unwrap_or(i64::MAX) > max {
        return Some(crate::schema::define::verr_params(
            "validation_file_size_limit",
            &format!(
                "Failed to upload {} - the maximum allowed file size is {max} bytes.",
                up.original
            ),
            json!({"file": up.original, "maxSize": max}),
        ));
    }
    let allowed = f.opt_strings("mimeTypes");
    if !allowed.is_empty() {
        let base = up.mime.split(';').next().unwrap_or("").trim();
        if !allowed.iter().any(|t| t.eq_ignore_ascii_case(base)) {
            return Some(verr(
                "validation_invalid_mime_type",
                &format!(
                    "{:?} mime type must be one of: {}.",
                    up.name,
                    allowed.join(", ")
                ),
            ));
        }
    }
    None
}

/// PocketBase's default `maxSize` of a file field.
const FILE_MAX_BYTES_DEFAULT: i64 = 5 << 20;

/// The file names a write drops: those of `before` that no file field of `after` still holds.
pub(super) fn dropped_files(c: &Collection, before: &[Value], after: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, f) in c.fields.iter().enumerate() {
        if f.kind != FieldType::File {
            continue;
        }
        let kept = value::to_list(&after[i]);
        out.extend(
            value::to_list(&before[i])
                .into_iter()
                .filter(|n| !kept.contains(n)),
        );
    }
    out
}

/// Whether deleting a record of `c` can delete, through cascading relations (at any depth),
/// records of a collection that can have files: their folders go after the commit too.
pub(super) fn cascades_into_files(schema: &Schema, c: &Collection) -> bool {
    let mut seen: Vec<&str> = vec![&c.id];
    let mut todo: Vec<&Collection> = vec![c];
    while let Some(target) = todo.pop() {
        for other in schema.collections.iter().filter(|o| !o.is_view()) {
            let cascades = other.fields.iter().any(|f| {
                f.kind == FieldType::Relation
                    && f.opt_bool("cascadeDelete")
                    && f.opt_str("collectionId") == target.id
            });
            if cascades && !seen.contains(&other.id.as_str()) {
                if other.has_files() {
                    return true;
                }
                seen.push(&other.id);
                todo.push(other);
            }
        }
    }
    false
}
