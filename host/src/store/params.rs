//! The `_params` table: PocketBase's key/value rows (its settings live under `settings`). Values
//! are written as BLOBs, as PocketBase's driver writes a `[]byte`, and read in either storage
//! class.

use super::{Conn, Result};
use rusqlite::OptionalExtension;
use rusqlite::types::ValueRef;

/// The value stored under `key`, if any.
pub(crate) fn get(conn: Conn<'_>, key: &str) -> Result<Option<Vec<u8>>> {
    Ok(conn
        .0
        .query_row("SELECT value FROM _params WHERE id = ?1", [key], |r| {
            Ok(match r.get_ref(0)? {
                ValueRef::Blob(b) | ValueRef::Text(b) => b.to_vec(),
                _ => Vec::new(),
            })
        })
        .optional()?)
}

/// Store `value` under `key`, keeping the row's `created` when it exists.
pub(crate) fn put(conn: Conn<'_>, key: &str, value: &[u8], now: &str) -> Result<()> {
    conn.0.execute(
        "INSERT INTO _params (id, value, created, updated) VALUES (?1, ?2, ?3, ?3)
         ON CONFLICT(id) DO UPDATE SET value = excluded.value, updated = excluded.updated",
        rusqlite::params![key, value, now],
    )?;
    Ok(())
}
