//! Collection definitions: the submitted JSON of a create/update/import becomes a normalized
//! `Collection` (defaults filled, ids assigned, system fields kept), or PocketBase's validation errors.

use super::ids;
use super::{Collection, CollectionType, Field, FieldType, Rules, SUPERUSERS_ID, Schema};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// Why a submitted definition was refused.
#[derive(Debug)]
pub(crate) enum DefineError {
    /// The body does not have the shape of a collection at all (PocketBase: "Failed to load the
    /// submitted data due to invalid formatting.").
    BadFormat(String),
    /// Field-level problems, in PocketBase's nested `data` shape.
    Invalid(Map<String, Value>),
    /// A definition PocketBase lets through validation and its database then refuses: the
    /// message PocketBase answers with (after the action's "Failed to ..." prefix), no `data`.
    Refused(String),
}

pub(crate) fn verr(code: &str, message: &str) -> Value {
    json!({"code": code, "message": message})
}

pub(crate) fn verr_params(code: &str, message: &str, params: Value) -> Value {
    json!({"code": code, "message": message, "params": params})
}

/// Collection, field and collection id names: Go's `\w`, which is ASCII only.
static NAME_RE: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[A-Za-z0-9_]+$").expect("static regex"));

/// Tables of `data.db` that are not collections; a collection may not take their names
/// (SQLite table names are case-insensitive).
const INTERNAL_TABLES: &[&str] = &["_collections", "_migrations", "_params"];

/// PocketBase's length rule: `validation_length_out_of_range` with its bounds.
fn length_error(min: usize, max: usize) -> Value {
    verr_params(
        "validation_length_out_of_range",
        &format!("The length must be between {min} and {max}."),
        json!({"max": max, "min": min}),
    )
}

/// The checks PocketBase runs on a collection's name, in its order (the first failing one is
/// reported).
fn name_error(name: &str) -> Option<Value> {
    if name.is_empty() {
        Some(verr("validation_required", "Cannot be blank."))
    } else if name.chars().count() > 255 {
        Some(length_error(1, 255))
    } else if !NAME_RE.is_match(name) {
        Some(verr(
            "validation_match_invalid",
            "Must be in a valid format.",
        ))
    } else if INTERNAL_TABLES.iter().any(|t| t.eq_ignore_ascii_case(name)) {
        Some(verr(
            "validation_collection_name_invalid",
            "The name shouldn't match with an existing internal table.",
        ))
    } else {
        None
    }
}

const RESERVED_FIELD_NAMES: &[&str] = &[
    "null",
    "true",
    "false",
    "_rowid_",
    "collectionId",
    "collectionName",
    "expand",
];
const RESERVED_AUTH_FIELD_NAMES: &[&str] = &["passwordConfirm", "oldPassword"];

/// Build a field's JSON with every key of its type, in PocketBase's alphabetical order.
fn field_json(kind: FieldType, input: &Map<String, Value>) -> Map<String, Value> {
    let mut out: BTreeMap<&str, Value> = BTreeMap::new();
    let get = |k: &str, default: Value| -> Value {
        match input.get(k) {
            Some(v) if !v.is_null() || default.is_null() => v.clone(),
            _ => default,
        }
    };
    let get_bool = |k: &str| Value::Bool(input.get(k).and_then(Value::as_bool).unwrap_or(false));
    let get_num = |k: &str| -> Value {
        match input.get(k).and_then(Value::as_f64) {
            Some(n) if n.fract() == 0.0 => json!(n as i64),
            Some(n) => json!(n),
            None => json!(0),
        }
    };
    let get_str = |k: &str| {
        Value::String(
            input
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        )
    };
    let get_list = |k: &str| match input.get(k) {
        Some(Value::Array(a)) => Value::Array(a.clone()),
        _ => json!([]),
    };
    out.insert("hidden", get_bool("hidden"));
    out.insert("presentable", get_bool("presentable"));
    out.insert("system", get_bool("system"));
    if kind != FieldType::Autodate {
        out.insert("help", get_str("help"));
        out.insert("required", get_bool("required"));
    }
    match kind {
        FieldType::Text => {
            out.insert("autogeneratePattern", get_str("autogeneratePattern"));
            out.insert("max", get_num("max"));
            out.insert("min", get_num("min"));
            out.insert("pattern", get_str("pattern"));
            out.insert("primaryKey", get_bool("primaryKey"));
        }
        FieldType::Editor => {
            out.insert("convertURLs", get_bool("convertURLs"));
            out.insert("maxSize", get_num("maxSize"));
        }
        FieldType::Number => {
            let num_or_null = |k: &str| match input.get(k).and_then(Value::as_f64) {
                Some(n) if n.fract() == 0.0 => json!(n as i64),
                Some(n) => json!(n),
                None => Value::Null,
            };
            out.insert("max", num_or_null("max"));
            out.insert("min", num_or_null("min"));
            out.insert("onlyInt", get_bool("onlyInt"));
        }
        FieldType::Bool | FieldType::GeoPoint => {}
        FieldType::Email | FieldType::Url => {
            out.insert("exceptDomains", get_list("exceptDomains"));
            out.insert("onlyDomains", get_list("onlyDomains"));
        }
        FieldType::Date => {
            out.insert("max", get_str("max"));
            out.insert("min", get_str("min"));
        }
        FieldType::Autodate => {
            out.insert("onCreate", get_bool("onCreate"));
            out.insert("onUpdate", get_bool("onUpdate"));
        }
        FieldType::Select => {
            out.insert("maxSelect", get_num("maxSelect"));
            out.insert("values", get_list("values"));
        }
        FieldType::File => {
            out.insert("maxSelect", get_num("maxSelect"));
            out.insert("maxSize", get_num("maxSize"));
            out.insert("mimeTypes", get_list("mimeTypes"));
            out.insert("protected", get_bool("protected"));
            out.insert("thumbs", get_list("thumbs"));
        }
        FieldType::Relation => {
            out.insert("cascadeDelete", get_bool("cascadeDelete"));
            out.insert("collectionId", get_str("collectionId"));
            out.insert("maxSelect", get_num("maxSelect"));
            out.insert("minSelect", get_num("minSelect"));
        }
        FieldType::Json => {
            out.insert("maxSize", get_num("maxSize"));
        }
        FieldType::Password => {
            out.insert("cost", get_num("cost"));
            out.insert("max", get_num("max"));
            out.insert("min", get_num("min"));
            out.insert("pattern", get_str("pattern"));
        }
    }
    out.insert("id", get("id", json!("")));
    out.insert("name", get("name", json!("")));
    out.insert("type", json!(kind.as_str()));
    out.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Turn a normalized field JSON into a `Field`.
pub(crate) fn field_from_json(raw: Map<String, Value>) -> Option<Field> {
    let kind = FieldType::parse(raw.get("type")?.as_str()?)?;
    let raw = field_json(kind, &raw);
    Some(Field {
        id: raw
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        name: raw
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        kind,
        system: raw.get("system").and_then(Value::as_bool).unwrap_or(false),
        hidden: raw.get("hidden").and_then(Value::as_bool).unwrap_or(false),
        required: raw
            .get("required")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        pattern: match raw.get("pattern").and_then(Value::as_str) {
            Some(p) if matches!(kind, FieldType::Text | FieldType::Password) && !p.is_empty() => {
                Some(super::Pattern(
                    regex::Regex::new(p).ok().map(std::sync::Arc::new),
                ))
            }
            _ => None,
        },
        raw,
    })
}

fn sys_field(v: Value) -> Field {
    let Value::Object(m) = v else {
        unreachable!("system field literals are objects")
    };
    field_from_json(m).expect("system field literals are valid")
}

pub(crate) fn id_field() -> Field {
    sys_field(
        json!({"autogeneratePattern":"[a-z0-9]{15}","id":"text3208210256","max":15,"min":15,
        "name":"id","pattern":"^[a-z0-9]+$","primaryKey":true,"required":true,"system":true,"type":"text"}),
    )
}

/// The five system fields every auth collection carries, in PocketBase's order.
pub(crate) fn auth_system_fields() -> Vec<Field> {
    vec![
        sys_field(
            json!({"hidden":true,"id":"password901924565","min":8,"name":"password",
            "required":true,"system":true,"type":"password"}),
        ),
        sys_field(
            json!({"autogeneratePattern":"[a-zA-Z0-9]{50}","hidden":true,"id":"text2504183744",
            "max":60,"min":30,"name":"tokenKey","required":true,"system":true,"type":"text"}),
        ),
        sys_field(
            json!({"id":"email3885137012","name":"email","required":true,"system":true,"type":"email"}),
        ),
        sys_field(
            json!({"id":"bool1547992806","name":"emailVisibility","system":true,"type":"bool"}),
        ),
        sys_field(json!({"id":"bool256245529","name":"verified","system":true,"type":"bool"})),
    ]
}

pub(crate) fn autodate_fields(system: bool) -> Vec<Field> {
    vec![
        sys_field(
            json!({"id":"autodate2990389176","name":"created","onCreate":true,"onUpdate":false,
            "system":system,"type":"autodate"}),
        ),
        sys_field(
            json!({"id":"autodate3332085495","name":"updated","onCreate":true,"onUpdate":true,
            "system":system,"type":"autodate"}),
        ),
    ]
}

fn template(subject: &str, body: &str) -> Value {
    json!({"subject": subject, "body": body})
}

/// Default options of a new auth collection. Secrets are fresh; the e-mail templates are our own
/// wording with PocketBase's placeholders, so mails render the same way in either server.
pub(crate) fn default_auth_options(is_superusers: bool) -> Map<String, Value> {
    let auth_duration = if is_superusers { 86400 } else { 432000 };
    let tok = |d: i64| json!({"secret": ids::secret(50), "duration": d});
    let sign_off = "<p>\n  Thanks,<br/>\n  {APP_NAME} team\n</p>";
    let Value::Object(m) = json!({
        "authRule": "",
        "manageRule": null,
        "authAlert": {"enabled": true, "emailTemplate": template("Login from a new location",
            &format!("<p>Hello,</p>\n<p>Your {{APP_NAME}} account was just used from a new location:</p>\n<p><em>{{ALERT_INFO}}</em></p>\n<p><strong>If this was not you, change your password now: that signs out every other session.</strong></p>\n{sign_off}"))},
        "oauth2": {"providers": [], "mappedFields": {"id": "", "name": "", "username": "", "avatarURL": ""}, "enabled": false},
        "passwordAuth": {"enabled": true, "identityFields": ["email"]},
        "mfa": {"enabled": false, "duration": 600, "rule": ""},
        "otp": {"enabled": false, "duration": 180, "length": 8, "emailTemplate": template("OTP for {APP_NAME}",
            &format!("<p>Hello,</p>\n<p>Your one-time password: <strong>{{OTP}}</strong></p>\n<p><i>If you did not ask for it, ignore this email.</i></p>\n{sign_off}"))},
        "authToken": tok(auth_duration),
        "passwordResetToken": tok(1800),
        "emailChangeToken": tok(1800),
        "verificationToken": tok(86400),
        "fileToken": tok(180),
        "verificationTemplate": template("Verify your {APP_NAME} email",
            &format!("<p>Hello,</p>\n<p>Welcome to {{APP_NAME}}. Confirm your email address with the link below.</p>\n<p>\n  <a class=\"btn\" href=\"{{APP_URL}}/_/#/auth/confirm-verification/{{TOKEN}}\" target=\"_blank\" rel=\"noopener\">Verify</a>\n</p>\n{sign_off}")),
        "resetPasswordTemplate": template("Reset your {APP_NAME} password",
            &format!("<p>Hello,</p>\n<p>Choose a new password with the link below.</p>\n<p>\n  <a class=\"btn\" href=\"{{APP_URL}}/_/#/auth/confirm-password-reset/{{TOKEN}}\" target=\"_blank\" rel=\"noopener\">Reset password</a>\n</p>\n{sign_off}")),
        "confirmEmailChangeTemplate": template("Confirm your {APP_NAME} new email address",
            &format!("<p>Hello,</p>\n<p>Confirm your new email address with the link below.</p>\n<p>\n  <a class=\"btn\" href=\"{{APP_URL}}/_/#/auth/confirm-email-change/{{TOKEN}}\" target=\"_blank\" rel=\"noopener\">Confirm new email</a>\n</p>\n{sign_off}")),
    }) else {
        unreachable!("object literal")
    };
    m
}

/// Auth options are merged key by key over the existing (or default) ones, so secrets are kept
/// when a client sends back the API form (which omits them).
fn merge_auth_options(base: &mut Map<String, Value>, input: &Map<String, Value>) {
    for key in [
        "authRule",
        "manageRule",
        "authAlert",
        "oauth2",
        "passwordAuth",
        "mfa",
        "otp",
        "authToken",
        "passwordResetToken",
        "emailChangeToken",
        "verificationToken",
        "fileToken",
        "verificationTemplate",
        "resetPasswordTemplate",
        "confirmEmailChangeTemplate",
    ] {
        let Some(v) = input.get(key) else { continue };
        match (base.get_mut(key), v) {
            (Some(Value::Object(dst)), Value::Object(src)) => {
                for (k, sv) in src {
                    dst.insert(k.clone(), sv.clone());
                }
            }
            _ => {
                base.insert(key.to_owned(), v.clone());
            }
        }
    }
}

pub(crate) fn auth_indexes(id: &str, name: &str) -> [String; 2] {
    [
        format!("CREATE UNIQUE INDEX `idx_tokenKey_{id}` ON `{name}` (`tokenKey`)"),
        format!("CREATE UNIQUE INDEX `idx_email_{id}` ON `{name}` (`email`) WHERE `email` != ''"),
    ]
}

fn rule_from(
    input: &Map<String, Value>,
    key: &str,
    old: Option<&Option<String>>,
) -> Option<String> {
    match input.get(key) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => None,
        None => old.cloned().flatten(),
    }
}

/// Build the collection a create (`existing` None) or update request asks for.
/// View fields are left empty here: the store infers them from the query.
pub(crate) fn build(
    input: &Value,
    existing: Option<&Collection>,
    schema: &Schema,
) -> Result<Collection, DefineError> {
    let Value::Object(input) = input else {
        return Err(DefineError::BadFormat(
            "collection body is not an object".into(),
        ));
    };
    let mut errors = Map::new();

    let kind = match (input.get("type"), existing) {
        (None | Some(Value::Null), Some(e)) => e.kind,
        (None | Some(Value::Null), None) => CollectionType::Base,
        (Some(Value::String(t)), _) => match CollectionType::parse(t) {
            Some(k) => k,
            None => {
                errors.insert(
                    "type".into(),
                    verr("validation_in_invalid", "Must be a valid value."),
                );
                CollectionType::Base
            }
        },
        (Some(_), _) => return Err(DefineError::BadFormat("type is not a string".into())),
    };
    if let Some(e) = existing
        && e.kind != kind
    {
        errors.insert(
            "type".into(),
            verr(
                "validation_collection_type_change",
                "Collection type cannot be changed.",
            ),
        );
    }

    let name = match input.get("name") {
        Some(Value::String(n)) => n.clone(),
        None => existing.map(|e| e.name.clone()).unwrap_or_default(),
        Some(_) => return Err(DefineError::BadFormat("name is not a string".into())),
    };
    if let Some(e) = name_error(&name) {
        errors.insert("name".into(), e);
    } else if let Some(other) = schema.by_name(&name)
        && existing.is_none_or(|e| e.id != other.id)
    {
        errors.insert(
            "name".into(),
            verr(
                "validation_collection_name_exists",
                "Collection name must be unique (case insensitive).",
            ),
        );
    }
    if let Some(e) = existing
        && e.system
        && e.name != name
    {
        errors.insert(
            "name".into(),
            verr(
                "validation_collection_system_name_change",
                "System collection name cannot be changed.",
            ),
        );
    }

    let id = match (existing, input.get("id")) {
        (Some(e), _) => e.id.clone(),
        (None, Some(Value::String(s))) if !s.is_empty() => s.clone(),
        _ => ids::collection_id(kind.as_str(), &name),
    };
    let explicit_id = input
        .get("id")
        .and_then(Value::as_str)
        .is_some_and(|s| !s.is_empty());
    if existing.is_none() && explicit_id {
        if id.chars().count() > 100 {
            errors.insert("id".into(), length_error(1, 100));
        } else if !NAME_RE.is_match(&id) {
            errors.insert(
                "id".into(),
                verr("validation_match_invalid", "Must be in a valid format."),
            );
        } else if schema.by_id(&id).is_some() {
            errors.insert(
                "id".into(),
                verr(
                    "validation_invalid_or_existing_id",
                    "The model id is invalid or already exists.",
                ),
            );
        }
    }

    let old_rules = existing.map(|e| &e.rules);
    let mut rules = Rules {
        list: rule_from(input, "listRule", old_rules.map(|r| &r.list)),
        view: rule_from(input, "viewRule", old_rules.map(|r| &r.view)),
        create: rule_from(input, "createRule", old_rules.map(|r| &r.create)),
        update: rule_from(input, "updateRule", old_rules.map(|r| &r.update)),
        delete: rule_from(input, "deleteRule", old_rules.map(|r| &r.delete)),
    };
    if kind == CollectionType::View {
        rules.create = None;
        rules.update = None;
        rules.delete = None;
    }

    let mut options = existing.map(|e| e.options.clone()).unwrap_or_default();
    match kind {
        CollectionType::Auth => {
            if existing.is_none() {
                options = default_auth_options(id == SUPERUSERS_ID);
            }
            merge_auth_options(&mut options, input);
            if let Some(Value::String(r)) = options.get("manageRule")
                && r.is_empty()
            {
                errors.insert(
                    "manageRule".into(),
                    verr("validation_nil_or_not_empty_required", "Cannot be blank."),
                );
            }
        }
        CollectionType::View => {
            if let Some(q) = input.get("viewQuery") {
                options = Map::new();
                options.insert("viewQuery".into(), q.clone());
            }
            if options
                .get("viewQuery")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim()
                .is_empty()
            {
                errors.insert(
                    "viewQuery".into(),
                    verr("validation_required", "Cannot be blank."),
                );
            }
        }
        CollectionType::Base => options = Map::new(),
    }

    // Fields: only when sent (an update without `fields` keeps them); views get theirs from the query.
    let fields = if kind == CollectionType::View {
        existing.map(|e| e.fields.clone()).unwrap_or_default()
    } else {
        match input.get("fields") {
            None | Some(Value::Null) => match existing {
                Some(e) => e.fields.clone(),
                None => {
                    let mut f = vec![id_field()];
                    if kind == CollectionType::Auth {
                        f.extend(auth_system_fields());
                    }
                    f
                }
            },
            Some(Value::Array(list)) => {
                build_fields(list, existing, kind, schema, &id, &mut errors)?
            }
            Some(_) => return Err(DefineError::BadFormat("fields is not an array".into())),
        }
    };

    let mut indexes: Vec<String> = match input.get("indexes") {
        Some(Value::Array(list)) => {
            let mut out = Vec::new();
            for v in list {
                match v {
                    Value::String(s) => out.push(s.clone()),
                    _ => return Err(DefineError::BadFormat("index is not a string".into())),
                }
            }
            out
        }
        None | Some(Value::Null) => existing.map(|e| e.indexes.clone()).unwrap_or_default(),
        Some(_) => return Err(DefineError::BadFormat("indexes is not an array".into())),
    };
    if kind == CollectionType::Auth {
        let auto = auth_indexes(&id, &name);
        let tk = format!("idx_tokenKey_{id}");
        let em = format!("idx_email_{id}");
        indexes.retain(|i| !i.contains(&tk) && !i.contains(&em));
        indexes.extend(auto);
    }

    if !errors.is_empty() {
        return Err(DefineError::Invalid(errors));
    }
    // SQLite keeps `sqlite_*` names for itself; PocketBase passes such a name to the database
    // and answers with its refusal.
    if name
        .get(..7)
        .is_some_and(|p| p.eq_ignore_ascii_case("sqlite_"))
    {
        return Err(DefineError::Refused(format!(
            "Raw error: \nSQL logic error: object name reserved for internal use: {name} (1)."
        )));
    }
    let now = ids::now();
    Ok(Collection {
        id,
        name,
        kind,
        system: existing.is_some_and(|e| e.system),
        fields,
        indexes,
        rules,
        options,
        created: existing
            .map(|e| e.created.clone())
            .unwrap_or_else(|| now.clone()),
        updated: now,
    })
}

fn build_fields(
    list: &[Value],
    existing: Option<&Collection>,
    kind: CollectionType,
    schema: &Schema,
    collection_id: &str,
    errors: &mut Map<String, Value>,
) -> Result<Vec<Field>, DefineError> {
    let mut fields: Vec<Field> = Vec::new();
    let mut field_errors = Map::new();
    let old_fields: &[Field] = existing.map(|e| e.fields.as_slice()).unwrap_or(&[]);
    let merged = merge_same_fields(list, old_fields)?;
    let list = merged.as_slice();
    // A field sent with the primary key's id takes its place; unless it is still a text field
    // named `id`, the collection has no primary key left.
    let pk_id = old_fields
        .iter()
        .find(|f| f.is_primary_key())
        .map_or_else(|| id_field().id, |f| f.id.clone());
    let pk_replaced = list.iter().any(|v| {
        v.get("id").and_then(Value::as_str) == Some(pk_id.as_str())
            && !(v.get("name").and_then(Value::as_str) == Some("id")
                && v.get("type").and_then(Value::as_str) == Some("text"))
    });
    if pk_replaced {
        errors.insert(
            "fields".into(),
            verr(
                "validation_missing_primary_key",
                "Missing or invalid \"id\" PK field.",
            ),
        );
        return Ok(Vec::new());
    }

    // The primary key always comes first, whether or not it was sent. An `id` sent with another
    // type is not the primary key: the system one is put first and the sent one is reported
    // as a duplicate below, as PocketBase does.
    let sent_id = list.iter().any(|v| {
        v.get("name").and_then(Value::as_str) == Some("id")
            && v.get("type").and_then(Value::as_str) == Some("text")
    });
    if !sent_id {
        // Left out, the primary key comes back with its default options (as PocketBase adds
        // it), under its old field id so the column keeps its data.
        let mut pk = id_field();
        if let Some(old) = old_fields.iter().find(|f| f.name == "id") {
            pk.id.clone_from(&old.id);
            pk.raw.insert("id".into(), json!(old.id));
        }
        fields.push(pk);
    }
    let offset = fields.len();

    for (i, v) in list.iter().enumerate() {
        let Value::Object(m) = v else {
            return Err(DefineError::BadFormat(format!(
                "field {i} is not an object"
            )));
        };
        let Some(kind_str) = m.get("type").and_then(Value::as_str) else {
            return Err(DefineError::BadFormat(format!("field {i} has no type")));
        };
        let Some(ftype) = FieldType::parse(kind_str) else {
            return Err(DefineError::BadFormat(format!(
                "field {i} has an unknown type {kind_str:?}"
            )));
        };
        let name = m
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let sent_id = m
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        // Same id = the same field (perhaps renamed). Sent without an id, a field has the id
        // PocketBase derives from its type and name, so it is the old field of that name only
        // when the type is the same too; with another type it is a new field, and the old
        // one (not in the list) goes.
        let old = match sent_id {
            Some(fid) => old_fields.iter().find(|f| f.id == fid),
            None => old_fields
                .iter()
                .find(|f| f.name == name && f.kind == ftype),
        };
        let mut m = m.clone();
        let idx = (i + offset).to_string();
        if let Some(old) = old {
            if old.kind != ftype {
                field_errors.insert(
                    idx.clone(),
                    verr(
                        "validation_field_type_change",
                        "Field type cannot be changed.",
                    ),
                );
            }
            m.insert("id".into(), json!(old.id));
            if old.system {
                m.insert("system".into(), json!(true));
            }
        } else {
            let fid = match sent_id {
                Some(s) => s.to_owned(),
                None => ids::field_id(kind_str, &name),
            };
            m.insert("id".into(), json!(fid));
            if !(name == "id" && ftype == FieldType::Text) {
                m.insert("system".into(), json!(false));
            }
        }
        if name == "id" && ftype == FieldType::Text {
            // The primary key stays the primary key, whatever was sent for it.
            for key in ["primaryKey", "required", "system"] {
                m.insert(key.into(), json!(true));
            }
            if m.get("pattern")
                .and_then(Value::as_str)
                .unwrap_or("")
                .is_empty()
            {
                m.insert("pattern".into(), json!("^[a-z0-9]+$"));
            }
        }
        // A new auth collection's field named like one of its system fields is that system
        // field (its type and options forced), under the sent field's id and in its place.
        if kind == CollectionType::Auth
            && existing.is_none()
            && let Some(mut sf) = auth_system_fields().into_iter().find(|f| f.name == name)
        {
            let fid = m.get("id").cloned().unwrap_or_else(|| json!(sf.id));
            sf.raw.insert("id".into(), fid);
            m = sf.raw;
        }
        let field = field_from_json(m).expect("type checked above");
        let mut fe = Map::new();
        validate_field(&field, kind, schema, collection_id, &mut fe);
        if !fe.is_empty() {
            field_errors.insert(idx, Value::Object(fe));
        }
        fields.push(field);
    }

    // A system field may be left out of an update's list (it is kept), but not renamed, nor
    // replaced by another field under its name.
    let tampered = old_fields.iter().filter(|f| f.system).any(|sf| {
        match fields.iter().find(|f| f.id == sf.id) {
            Some(f) => f.name != sf.name,
            None => fields.iter().any(|f| f.name == sf.name),
        }
    });
    if tampered {
        errors.insert(
            "fields".into(),
            verr(
                "validation_system_field_change",
                "System fields cannot be deleted or renamed.",
            ),
        );
        return Ok(fields);
    }
    // System fields that were left out of an update (or a new auth collection's) list are kept.
    let mut required_system: Vec<Field> = old_fields.iter().filter(|f| f.system).cloned().collect();
    if kind == CollectionType::Auth && existing.is_none() {
        required_system.extend(auth_system_fields());
    }
    for sf in required_system {
        if !fields.iter().any(|f| f.id == sf.id || f.name == sf.name) {
            fields.push(sf);
        }
    }

    // Duplicate names and clashing ids.
    for (i, f) in fields.iter().enumerate() {
        if fields[..i]
            .iter()
            .any(|g| g.name.eq_ignore_ascii_case(&f.name))
        {
            let entry = field_errors
                .entry(i.to_string())
                .or_insert_with(|| json!({}));
            if let Value::Object(o) = entry {
                o.insert(
                    "name".into(),
                    verr_params(
                        "validation_duplicated_field_name",
                        &format!("Duplicated or invalid field name {}.", f.name),
                        json!({"fieldName": f.name}),
                    ),
                );
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    for f in fields.iter_mut() {
        if !seen.insert(f.id.clone()) {
            let mut n = 2;
            while seen.contains(&format!("{}{n}", f.id)) {
                n += 1;
            }
            f.id = format!("{}{n}", f.id);
            f.raw.insert("id".into(), json!(f.id));
            seen.insert(f.id.clone());
        }
    }
    if !field_errors.is_empty() {
        errors.insert("fields".into(), Value::Object(field_errors));
    }
    Ok(fields)
}

/// PocketBase's field list keeps one field per id and per name: a later entry with the id (or,
/// sent without an id, the name) of an earlier one replaces it in place and takes over its id.
fn merge_same_fields(list: &[Value], old_fields: &[Field]) -> Result<Vec<Value>, DefineError> {
    let mut merged: Vec<Map<String, Value>> = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        // Every entry is read (and an unknown type refused) before any merging, as
        // PocketBase decodes the whole list first.
        let Value::Object(m) = v else {
            return Err(DefineError::BadFormat(format!(
                "field {i} is not an object"
            )));
        };
        if m.get("type")
            .and_then(Value::as_str)
            .and_then(FieldType::parse)
            .is_none()
        {
            return Err(DefineError::BadFormat(format!(
                "field {i} has no known type"
            )));
        }
        let sent_id = m
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let name = m.get("name").and_then(Value::as_str).unwrap_or("");
        let pos = match sent_id {
            Some(id) => merged
                .iter()
                .position(|o| o.get("id").and_then(Value::as_str) == Some(id)),
            None => merged
                .iter()
                .position(|o| o.get("name").and_then(Value::as_str) == Some(name)),
        };
        let Some(p) = pos else {
            merged.push(m.clone());
            continue;
        };
        let replaced = &merged[p];
        let carried = match replaced.get("id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => {
                let rname = replaced.get("name").and_then(Value::as_str).unwrap_or("");
                match old_fields.iter().find(|f| f.name == rname) {
                    Some(f) => f.id.clone(),
                    None => ids::field_id(
                        replaced.get("type").and_then(Value::as_str).unwrap_or(""),
                        rname,
                    ),
                }
            }
        };
        let mut m = m.clone();
        if sent_id.is_none() {
            m.insert("id".into(), json!(carried));
        }
        merged[p] = m;
    }
    Ok(merged.into_iter().map(Value::Object).collect())
}

fn validate_field(
    f: &Field,
    kind: CollectionType,
    schema: &Schema,
    collection_id: &str,
    out: &mut Map<String, Value>,
) {
    // PocketBase's checks on a field name, in its order; the first failing one is reported.
    let name_error = if f.name.is_empty() {
        Some(verr("validation_required", "Cannot be blank."))
    } else if f.name.chars().count() > 100 {
        Some(length_error(1, 100))
    } else if !NAME_RE.is_match(&f.name) {
        Some(verr(
            "validation_match_invalid",
            "Must be in a valid format.",
        ))
    } else if RESERVED_FIELD_NAMES.contains(&f.name.as_str()) {
        Some(verr("validation_not_in_invalid", "Must not be in list."))
    } else if f.name.contains("_via_") {
        Some(verr(
            "validation_found_via",
            "The value cannot contain \"_via_\".",
        ))
    } else if kind == CollectionType::Auth && RESERVED_AUTH_FIELD_NAMES.contains(&f.name.as_str()) {
        Some(verr(
            "validation_reserved_field_name",
            "The field name is reserved and cannot be used.",
        ))
    } else {
        None
    };
    if let Some(e) = name_error {
        out.insert("name".into(), e);
    }
    match f.kind {
        FieldType::Select if f.opt_strings("values").is_empty() => {
            out.insert(
                "values".into(),
                verr("validation_required", "Cannot be blank."),
            );
        }
        FieldType::Relation => {
            let target = f.opt_str("collectionId");
            if target.is_empty() {
                out.insert(
                    "collectionId".into(),
                    verr("validation_required", "Cannot be blank."),
                );
            } else if target != collection_id && schema.by_id(target).is_none() {
                out.insert(
                    "collectionId".into(),
                    verr(
                        "validation_field_relation_missing_collection",
                        "The relation collection doesn't exist.",
                    ),
                );
            }
        }
        FieldType::Autodate if !f.opt_bool("onCreate") && !f.opt_bool("onUpdate") => {
            let e = verr(
                "validation_required",
                "Either onCreate or onUpdate must be enabled.",
            );
            out.insert("onCreate".into(), e.clone());
            out.insert("onUpdate".into(), e);
        }
        FieldType::Text => {
            for key in ["pattern", "autogeneratePattern"] {
                let p = f.opt_str(key);
                if !p.is_empty() && regex::Regex::new(p).is_err() {
                    out.insert(
                        key.into(),
                        verr("validation_invalid_regex", "Invalid regular expression."),
                    );
                }
            }
        }
        _ => {}
    }
}

/// A collection as read back from a `_collections` row.
#[allow(
    clippy::too_many_arguments,
    reason = "one argument per _collections column"
)]
pub(crate) fn from_row(
    id: String,
    system: bool,
    kind: &str,
    name: String,
    fields: &str,
    indexes: &str,
    rules: Rules,
    options: &str,
    created: String,
    updated: String,
) -> Result<Collection, String> {
    let kind = CollectionType::parse(kind)
        .ok_or_else(|| format!("collection {name}: unknown type {kind}"))?;
    let fields: Vec<Value> =
        serde_json::from_str(fields).map_err(|e| format!("collection {name}: fields: {e}"))?;
    let fields = fields
        .into_iter()
        .filter_map(|v| match v {
            Value::Object(m) => field_from_json(m),
            _ => None,
        })
        .collect();
    let indexes: Vec<String> =
        serde_json::from_str(indexes).map_err(|e| format!("collection {name}: indexes: {e}"))?;
    let options: Map<String, Value> = if options.trim().is_empty() {
        Map::new()
    } else {
        serde_json::from_str(options).map_err(|e| format!("collection {name}: options: {e}"))?
    };
    Ok(Collection {
        id,
        name,
        kind,
        system,
        fields,
        indexes,
        rules,
        options,
        created,
        updated,
    })
}

/// The `fields` JSON column as PocketBase stores it.
pub(crate) fn fields_to_json(fields: &[Field]) -> String {
    Value::Array(
        fields
            .iter()
            .map(|f| Value::Object(f.raw.clone()))
            .collect(),
    )
    .to_string()
}

/// The `options` JSON column.
pub(crate) fn options_to_json(c: &Collection) -> String {
    Value::Object(c.options.clone()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base_schema() -> Schema {
        Schema::new(vec![])
    }

    #[test]
    fn a_new_base_collection_gets_the_id_field_first_and_defaults() {
        let c = build(
            &json!({"name":"posts","fields":[{"name":"title","type":"text"}]}),
            None,
            &base_schema(),
        )
        .unwrap();
        assert_eq!(c.id, "pbc_1125843985");
        assert_eq!(
            c.fields.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["id", "title"]
        );
        assert_eq!(c.fields[1].id, "text724990059");
        assert_eq!(c.fields[1].raw.get("max"), Some(&json!(0)));
        assert_eq!(c.rules.list, None);
    }

    #[test]
    fn a_new_auth_collection_gets_its_system_fields_and_indexes() {
        let c = build(
            &json!({"name":"members","type":"auth","fields":[{"name":"nick","type":"text"}]}),
            None,
            &base_schema(),
        )
        .unwrap();
        let names: Vec<_> = c.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                "nick",
                "password",
                "tokenKey",
                "email",
                "emailVisibility",
                "verified"
            ]
        );
        assert_eq!(c.indexes.len(), 2);
        assert!(c.token_secret("authToken").is_some_and(|s| s.len() == 50));
        let api = c.to_api_json();
        assert_eq!(api["authToken"], json!({"duration": 432000}));
    }

    #[test]
    fn invalid_definitions_report_pocketbase_codes() {
        let Err(DefineError::Invalid(e)) = build(
            &json!({"name":"bad name","fields":[{"name":"s","type":"select"},{"name":"r","type":"relation","collectionId":"nope"}]}),
            None,
            &base_schema(),
        ) else {
            panic!("expected validation errors")
        };
        assert_eq!(e["name"]["code"], "validation_match_invalid");
        assert_eq!(e["fields"]["1"]["values"]["code"], "validation_required");
        assert_eq!(
            e["fields"]["2"]["collectionId"]["code"],
            "validation_field_relation_missing_collection"
        );
    }

    #[test]
    fn unknown_field_types_are_a_format_error() {
        assert!(matches!(
            build(
                &json!({"name":"x","fields":[{"name":"a","type":"wat"}]}),
                None,
                &base_schema()
            ),
            Err(DefineError::BadFormat(_))
        ));
    }

    #[test]
    fn an_update_keeps_field_ids_by_name_and_refuses_type_changes_by_id() {
        let c = build(
            &json!({"name":"p","fields":[{"name":"a","type":"text"}]}),
            None,
            &base_schema(),
        )
        .unwrap();
        let again = build(
            &json!({"fields":[{"name":"a","type":"text"},{"name":"b","type":"number"}]}),
            Some(&c),
            &base_schema(),
        )
        .unwrap();
        assert_eq!(again.fields[1].id, c.fields[1].id);
        // The same id with another type is a type change, refused.
        let Err(DefineError::Invalid(e)) = build(
            &json!({"fields":[{"name":"a","type":"number","id":c.fields[1].id}]}),
            Some(&c),
            &base_schema(),
        ) else {
            panic!("type change must fail")
        };
        assert_eq!(e["fields"]["1"]["code"], "validation_field_type_change");
        // Sent without an id, the name with another type is a new field (PocketBase derives
        // the id from type and name): the old field goes.
        let replaced = build(
            &json!({"fields":[{"name":"a","type":"number"}]}),
            Some(&c),
            &base_schema(),
        )
        .unwrap();
        assert_eq!(replaced.fields[1].kind, FieldType::Number);
        assert_eq!(replaced.fields[1].id, ids::field_id("number", "a"));
    }
}
