//! The `superuser` CLI verbs: rows of `_superusers`, written through the writer like any write.

use super::{Store, records};
use crate::auth::password;
use crate::schema::value::Stored;
use crate::schema::value::validate;
use crate::schema::{Collection, Schema};
use crate::schema::{SUPERUSERS_ID, ids};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::json;

/// PocketBase's installer account: `serve` makes it while `_superusers` holds no one else (its
/// token opens the dashboard's first-run page), and the first other superuser's insert deletes
/// it (`records::insert`).
pub(crate) const INSTALLER_EMAIL: &str = "__pbinstaller@example.com";

/// The installer account's `(id, tokenKey)` while no other superuser exists (the account made
/// first when missing, with a random password); None once someone else is a superuser.
pub(crate) fn installer(store: &Store) -> Result<Option<(String, String)>, String> {
    let find = |store: &Store| {
        store
            .write_blocking(|conn| {
                let others: i64 = conn.query_row(
                    "SELECT count(*) FROM _superusers WHERE email != ?1",
                    [INSTALLER_EMAIL],
                    |r| r.get(0),
                )?;
                if others > 0 {
                    return Ok(Some(None));
                }
                let found = conn
                    .query_row(
                        "SELECT id, tokenKey FROM _superusers WHERE email = ?1",
                        [INSTALLER_EMAIL],
                        |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)),
                    )
                    .optional()?;
                Ok(found.map(Some))
            })
            .map_err(|e| e.to_string())
    };
    if let Some(found) = find(store)? {
        return Ok(found);
    }
    apply(store, INSTALLER_EMAIL, Some(&ids::secret(30)), Mode::Create)?;
    Ok(find(store)?.flatten())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Upsert,
    Create,
    Update,
    Delete,
}

pub(crate) fn apply(
    store: &Store,
    email: &str,
    pass: Option<&str>,
    mode: Mode,
) -> Result<String, String> {
    let schema = store.schema();
    let su = schema
        .by_id(SUPERUSERS_ID)
        .ok_or("the _superusers collection is missing")?
        .clone();
    let email_field = su.field("email").ok_or("_superusers has no email field")?;
    if let Some(e) = validate(email_field, &json!(email)) {
        return Err(format!(
            "invalid email: {}",
            e["message"].as_str().unwrap_or("")
        ));
    }
    let hash = match pass {
        Some(p) => {
            let pf = su
                .field("password")
                .ok_or("_superusers has no password field")?;
            if let Some(e) = validate(pf, &json!(p)) {
                return Err(format!(
                    "invalid password: {}",
                    e["message"].as_str().unwrap_or("")
                ));
            }
            Some(password::hash(p, 0).map_err(|e| e.to_string())?)
        }
        None => None,
    };
    let email = email.to_owned();
    store
        .write_blocking(move |conn| {
            let tx = conn.transaction()?;
            let existing: Option<String> = tx
                .query_row("SELECT id FROM _superusers WHERE email = ?1 COLLATE NOCASE", [&email], |r| r.get(0))
                .optional()?;
            let now = ids::now();
            let msg = match (mode, existing) {
                (Mode::Delete, Some(id)) => {
                    tx.execute("DELETE FROM _superusers WHERE id = ?1", [&id])?;
                    format!("Successfully deleted superuser {email}!")
                }
                (Mode::Delete, None) => return Ok(Err(format!("superuser {email} does not exist"))),
                (Mode::Create, Some(_)) => return Ok(Err(format!("superuser {email} already exists"))),
                (Mode::Update, None) => return Ok(Err(format!("superuser {email} does not exist"))),
                (Mode::Upsert | Mode::Update, Some(id)) => {
                    tx.execute(
                        "UPDATE _superusers SET password = ?1, tokenKey = ?2, updated = ?3 WHERE id = ?4",
                        params![hash, ids::secret(50), now, id],
                    )?;
                    format!("Successfully saved superuser {email}!")
                }
                (Mode::Upsert | Mode::Create, None) => {
                    // Through the one record insert, which keeps auth ids unique across auth
                    // collections.
                    let hash = hash.clone().unwrap_or_default();
                    let row: Vec<(usize, Stored)> = su
                        .fields
                        .iter()
                        .enumerate()
                        .filter_map(|(i, f)| {
                            let v = match f.name.as_str() {
                                "id" => Stored::Text(fresh_id(&tx, &schema, &su).ok()?),
                                "email" => Stored::Text(email.clone()),
                                "emailVisibility" => Stored::Int(0),
                                "password" => Stored::Text(hash.clone()),
                                "tokenKey" => Stored::Text(ids::secret(50)),
                                "verified" => Stored::Int(1),
                                "created" | "updated" => Stored::Text(now.clone()),
                                _ => return None,
                            };
                            Some((i, v))
                        })
                        .collect();
                    records::insert(super::Conn(&tx), &schema, &su, &row)?;
                    format!("Successfully saved superuser {email}!")
                }
            };
            tx.commit()?;
            Ok(Ok(msg))
        })
        .map_err(|e| e.to_string())?
}

/// A record id no auth collection uses yet.
fn fresh_id(conn: &Connection, schema: &Schema, su: &Collection) -> super::Result<String> {
    loop {
        let id = ids::record_id();
        if !records::auth_id_taken(super::Conn(conn), schema, su, &id)? {
            return Ok(id);
        }
    }
}
