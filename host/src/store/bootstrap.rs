//! First start: the system tables, system collections, migration rows and settings that
//! PocketBase 0.40.6 creates, so either server can open a `pb_data` the other wrote.

use super::{Result, ddl};
use crate::schema::define::{self, auth_indexes, auth_system_fields, autodate_fields, id_field};
use crate::schema::{Collection, CollectionType, Field, Rules, SUPERUSERS_ID, USERS_ID, ids};
use rusqlite::{Connection, params};
use serde_json::{Map, Value, json};

const SYSTEM_TABLES: &str = r#"
CREATE TABLE `_migrations` (file VARCHAR(255) PRIMARY KEY NOT NULL, applied INTEGER NOT NULL);
CREATE TABLE `_params` (
  `id`      TEXT PRIMARY KEY DEFAULT ('r'||lower(hex(randomblob(7)))) NOT NULL,
  `value`   JSON DEFAULT NULL,
  `created` TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%fZ')) NOT NULL,
  `updated` TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%fZ')) NOT NULL
);
CREATE TABLE `_collections` (
  `id`         TEXT PRIMARY KEY DEFAULT ('r'||lower(hex(randomblob(7)))) NOT NULL,
  `system`     BOOLEAN DEFAULT FALSE NOT NULL,
  `type`       TEXT DEFAULT "base" NOT NULL,
  `name`       TEXT UNIQUE NOT NULL,
  `fields`     JSON DEFAULT "[]" NOT NULL,
  `indexes`    JSON DEFAULT "[]" NOT NULL,
  `listRule`   TEXT DEFAULT NULL,
  `viewRule`   TEXT DEFAULT NULL,
  `createRule` TEXT DEFAULT NULL,
  `updateRule` TEXT DEFAULT NULL,
  `deleteRule` TEXT DEFAULT NULL,
  `options`    JSON DEFAULT "{}" NOT NULL,
  `created`    TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%fZ')) NOT NULL,
  `updated`    TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%fZ')) NOT NULL
);
CREATE INDEX idx__collections_type on `_collections` (`type`);
"#;

const AUX_TABLES: &str = r#"
CREATE TABLE IF NOT EXISTS `_logs` (
  `id`      TEXT PRIMARY KEY DEFAULT ('r'||lower(hex(randomblob(7)))) NOT NULL,
  `level`   INTEGER DEFAULT 0 NOT NULL,
  `message` TEXT DEFAULT "" NOT NULL,
  `data`    JSON DEFAULT "{}" NOT NULL,
  `created` TEXT DEFAULT (strftime('%Y-%m-%d %H:%M:%fZ')) NOT NULL
);
CREATE INDEX IF NOT EXISTS idx_logs_level on `_logs` (`level`);
CREATE INDEX IF NOT EXISTS idx_logs_message on `_logs` (`message`);
CREATE INDEX IF NOT EXISTS idx_logs_created_hour on `_logs` (strftime('%Y-%m-%d %H:00:00', `created`));
"#;

/// The system migrations PocketBase 0.40.6 records on a fresh data dir. Without these rows
/// PocketBase would try to initialize the tables again.
const MIGRATIONS: &[&str] = &[
    "1640988000_aux_init.go",
    "1640988000_init.go",
    "1717233556_v0.23_migrate.go",
    "1717233557_v0.23_migrate2.go",
    "1717233558_v0.23_migrate3.go",
    "1717233559_v0.23_migrate4.go",
    "1763020353_update_default_auth_alert_templates.go",
    "1778828400_normalize_indexes.go",
];

const OWN_RECORD_RULE: &str = "@request.auth.id != '' && recordRef = @request.auth.id && collectionRef = @request.auth.collectionId";

fn text_field(name: &str, required: bool, hidden: bool) -> Field {
    let Value::Object(m) = json!({"id": ids::field_id("text", name), "name": name, "type": "text",
        "required": required, "hidden": hidden, "system": true})
    else {
        unreachable!("object literal")
    };
    define::field_from_json(m).expect("valid text field")
}

fn system_base(name: &str, extra: Vec<Field>, indexes: &[&str], delete_own: bool) -> Collection {
    let mut fields = vec![
        id_field(),
        text_field("collectionRef", true, false),
        text_field("recordRef", true, false),
    ];
    fields.extend(extra);
    fields.extend(autodate_fields(true));
    let now = ids::now();
    Collection {
        id: ids::collection_id("base", name),
        name: name.into(),
        kind: CollectionType::Base,
        system: true,
        fields,
        indexes: indexes.iter().map(|s| s.to_string()).collect(),
        rules: Rules {
            list: Some(OWN_RECORD_RULE.into()),
            view: Some(OWN_RECORD_RULE.into()),
            create: None,
            update: None,
            delete: delete_own.then(|| OWN_RECORD_RULE.into()),
        },
        options: Map::new(),
        created: now.clone(),
        updated: now,
    }
}

fn system_collections() -> Vec<Collection> {
    let otp_password = {
        let Value::Object(m) = json!({"cost": 8, "hidden": true, "id": "password901924565", "name": "password",
            "required": true, "system": true, "type": "password"})
        else {
            unreachable!("object literal")
        };
        define::field_from_json(m).expect("valid password field")
    };
    let mut out = vec![
        system_base(
            "_mfas",
            vec![text_field("method", true, false)],
            &[
                "CREATE INDEX `idx_mfas_collectionRef_recordRef` ON `_mfas` (collectionRef,recordRef)",
            ],
            false,
        ),
        system_base(
            "_otps",
            vec![otp_password, text_field("sentTo", false, true)],
            &[
                "CREATE INDEX `idx_otps_collectionRef_recordRef` ON `_otps` (collectionRef, recordRef)",
            ],
            false,
        ),
        system_base(
            "_externalAuths",
            vec![
                text_field("provider", true, false),
                text_field("providerId", true, false),
            ],
            &[
                "CREATE UNIQUE INDEX `idx_externalAuths_record_provider` ON `_externalAuths` (collectionRef, recordRef, provider)",
                "CREATE UNIQUE INDEX `idx_externalAuths_collection_provider` ON `_externalAuths` (collectionRef, provider, providerId)",
            ],
            true,
        ),
        system_base(
            "_authOrigins",
            vec![text_field("fingerprint", true, false)],
            &[
                "CREATE UNIQUE INDEX `idx_authOrigins_unique_pairs` ON `_authOrigins` (collectionRef, recordRef, fingerprint)",
            ],
            true,
        ),
    ];
    let now = ids::now();
    let mut su_fields = vec![id_field()];
    su_fields.extend(auth_system_fields());
    su_fields.extend(autodate_fields(true));
    out.push(Collection {
        id: SUPERUSERS_ID.into(),
        name: "_superusers".into(),
        kind: CollectionType::Auth,
        system: true,
        fields: su_fields,
        indexes: auth_indexes(SUPERUSERS_ID, "_superusers").into(),
        rules: Rules {
            list: None,
            view: None,
            create: None,
            update: None,
            delete: None,
        },
        options: define::default_auth_options(true),
        created: now.clone(),
        updated: now.clone(),
    });

    let mut user_fields = vec![id_field()];
    user_fields.extend(auth_system_fields());
    let Value::Object(name) =
        json!({"id": "text1579384326", "max": 255, "name": "name", "type": "text"})
    else {
        unreachable!("object literal")
    };
    let Value::Object(avatar) = json!({"id": "file376926767", "maxSelect": 1, "name": "avatar", "type": "file",
        "mimeTypes": ["image/jpeg", "image/png", "image/svg+xml", "image/gif", "image/webp"]})
    else {
        unreachable!("object literal")
    };
    user_fields.push(define::field_from_json(name).expect("valid"));
    user_fields.push(define::field_from_json(avatar).expect("valid"));
    user_fields.extend(autodate_fields(false));
    let mut user_options = define::default_auth_options(false);
    user_options.insert(
        "oauth2".into(),
        json!({"providers": [], "mappedFields": {"id": "", "name": "name", "username": "", "avatarURL": "avatar"}, "enabled": false}),
    );
    let own = Some("id = @request.auth.id".to_owned());
    out.push(Collection {
        id: USERS_ID.into(),
        name: "users".into(),
        kind: CollectionType::Auth,
        system: false,
        fields: user_fields,
        indexes: auth_indexes(USERS_ID, "users").into(),
        rules: Rules {
            list: own.clone(),
            view: own.clone(),
            create: Some(String::new()),
            update: own.clone(),
            delete: own,
        },
        options: user_options,
        created: now.clone(),
        updated: now,
    });
    out
}

/// Create the system tables and collections when `_collections` does not exist yet.
pub(super) fn ensure_data(conn: &mut Connection) -> Result<()> {
    let exists: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = '_collections'",
        [],
        |r| r.get(0),
    )?;
    if exists {
        return Ok(());
    }
    let tx = conn.transaction()?;
    tx.execute_batch(SYSTEM_TABLES)?;
    for c in system_collections() {
        ddl::insert_collection_row(super::Conn(&tx), &c)?;
        ddl::create(super::Conn(&tx), &c)?;
    }
    let micros = chrono::Utc::now().timestamp_micros();
    for (i, m) in MIGRATIONS.iter().enumerate() {
        tx.execute(
            "INSERT INTO _migrations (file, applied) VALUES (?1, ?2)",
            params![m, micros + i as i64],
        )?;
    }
    tx.execute(
        "INSERT INTO _params (id, value) VALUES ('settings', ?1)",
        // PocketBase's defaults, stored as it stores them (a BLOB of its JSON).
        params![crate::settings::Settings::default().to_stored()],
    )?;
    tx.commit()?;
    Ok(())
}

pub(super) fn ensure_aux(conn: &Connection) -> Result<()> {
    conn.execute_batch(AUX_TABLES)?;
    Ok(())
}
