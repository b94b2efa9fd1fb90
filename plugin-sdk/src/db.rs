//! Database access through the host. Reads need the `db:read` grant, writes `db:write`.
//!
//! `find_records` and `get_record` apply the caller's listRule/viewRule in calls made for an HTTP
//! request (routes, hooks); jobs and after-commit events run as the system and see every record.
//! Record writes go through the REST API's path (validation, unique indexes, hooks), as the
//! system, and are not allowed in before-hooks or in-transaction hooks; `execute` is.
//!
//! Raw SQL (`query`, `execute`) reaches the tables of non-system collections only, and never a
//! hidden field without its `db:hidden:<collection>.<field>` grant; schema information comes
//! from [`collections`]. The crate README states the whole policy.

use crate::bindings::ferrobase::plugin::db as wit;
use crate::record::{Record, Value};

pub use wit::{CollectionInfo, DbError, FieldInfo, Rows};

impl DbError {
    /// The host's explanation, without the variant's name.
    pub fn message(&self) -> &str {
        match self {
            DbError::Denied(m) | DbError::Invalid(m) | DbError::Other(m) => m,
            DbError::Rejected(rejection) => &rejection.message,
        }
    }
}

impl Rows {
    /// The index of the column `name`.
    pub fn column(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }
}

fn named(params: &[(&str, Value)]) -> Vec<(String, Value)> {
    params
        .iter()
        .map(|(name, value)| ((*name).to_owned(), value.clone()))
        .collect()
}

/// One read-only statement (a SELECT) with `?` parameters.
pub fn query(sql: &str, params: &[Value]) -> Result<Rows, DbError> {
    wit::query(sql, params)
}

/// One write statement with `?` parameters; the number of changed rows. Raw SQL fires no record
/// hooks. In an in-transaction hook it joins the pending write; elsewhere it is its own
/// transaction.
pub fn execute(sql: &str, params: &[Value]) -> Result<u64, DbError> {
    wit::execute(sql, params)
}

/// One record by id.
pub fn get_record(collection: &str, id: &str) -> Result<Option<Record>, DbError> {
    wit::get_record(collection, id)
}

/// Records matching a PocketBase filter, e.g. `status = {:s} && n > 3`, with `{:name}`
/// placeholders bound from `params`. `sort` is PocketBase's (`"-created,title"`, or `""`);
/// `limit` is capped at 1000 by the host.
pub fn find_records(
    collection: &str,
    filter: &str,
    params: &[(&str, Value)],
    sort: &str,
    limit: u32,
) -> Result<Vec<Record>, DbError> {
    wit::find_records(collection, filter, &named(params), sort, limit)
}

/// Creates a record; the stored record comes back (id, autodates filled).
pub fn create_record(collection: &str, fields: &[(&str, Value)]) -> Result<Record, DbError> {
    wit::create_record(collection, &named(fields))
}

/// Updates the given fields of a record.
pub fn update_record(
    collection: &str,
    id: &str,
    fields: &[(&str, Value)],
) -> Result<Record, DbError> {
    wit::update_record(collection, id, &named(fields))
}

/// Deletes a record (relation cascade rules apply).
pub fn delete_record(collection: &str, id: &str) -> Result<(), DbError> {
    wit::delete_record(collection, id)
}

/// Every collection's shape and rules, system ones included; never their options (which hold
/// token secrets). Needs `db:read`.
pub fn collections() -> Result<Vec<CollectionInfo>, DbError> {
    wit::collections()
}

/// One collection's shape, by name (any case, as PocketBase looks names up) or id.
pub fn collection(name_or_id: &str) -> Result<Option<CollectionInfo>, DbError> {
    Ok(wit::collections()?
        .into_iter()
        .find(|c| c.id == name_or_id || c.name.eq_ignore_ascii_case(name_or_id)))
}

impl CollectionInfo {
    /// The field `name`.
    pub fn field(&self, name: &str) -> Option<&FieldInfo> {
        self.fields.iter().find(|f| f.name == name)
    }
}
