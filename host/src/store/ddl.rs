//! Collection DDL: the `_collections` row and the table (or view) that follows it.
//! Identifiers come only from validated collection and field names; values are bound.

use super::Conn;
use super::{Result, StoreError};
use crate::schema::define;
use crate::schema::{Collection, Field, FieldType, Schema, ids, view};
use rusqlite::{Connection, params};
use serde_json::Value;

/// Quote an identifier for SQLite. Names are validated (`^\w+$`) before they get here; the
/// doubling keeps even a hostile name inert.
pub(crate) use crate::query::qi as q;

pub(crate) fn insert_collection_row(conn: Conn<'_>, c: &Collection) -> Result<()> {
    let conn = conn.0;
    conn.execute(
        "INSERT INTO _collections (id, system, type, name, fields, indexes, listRule, viewRule, createRule, \
         updateRule, deleteRule, options, created, updated) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14)",
        params![
            c.id,
            c.system,
            c.kind.as_str(),
            c.name,
            define::fields_to_json(&c.fields),
            Value::from(c.indexes.clone()).to_string(),
            c.rules.list,
            c.rules.view,
            c.rules.create,
            c.rules.update,
            c.rules.delete,
            define::options_to_json(c),
            c.created,
            c.updated,
        ],
    )?;
    Ok(())
}

fn update_collection_row(conn: &Connection, c: &Collection) -> Result<()> {
    conn.execute(
        "UPDATE _collections SET type=?2, name=?3, fields=?4, indexes=?5, listRule=?6, viewRule=?7, createRule=?8, \
         updateRule=?9, deleteRule=?10, options=?11, updated=?12 WHERE id=?1",
        params![
            c.id,
            c.kind.as_str(),
            c.name,
            define::fields_to_json(&c.fields),
            Value::from(c.indexes.clone()).to_string(),
            c.rules.list,
            c.rules.view,
            c.rules.create,
            c.rules.update,
            c.rules.delete,
            define::options_to_json(c),
            c.updated,
        ],
    )?;
    Ok(())
}

fn table_sql(name: &str, fields: &[Field]) -> String {
    // PocketBase emits columns in alphabetical order of field name, one per name (a name given
    // twice, which validation then refuses, takes its last field's column: an import saves
    // before it validates).
    let cols: std::collections::BTreeMap<&str, &Field> =
        fields.iter().map(|f| (f.name.as_str(), f)).collect();
    let defs: Vec<String> = cols
        .values()
        .map(|f| format!("{} {}", q(&f.name), f.column_def()))
        .collect();
    format!("CREATE TABLE {} ({})", q(name), defs.join(", "))
}

/// Create the collection's indexes from their normalised form (only what PocketBase's parser
/// read out of each definition runs, never the text as sent); every failure is reported.
fn create_indexes(conn: &Connection, c: &Collection) -> Result<()> {
    let mut refused = Vec::new();
    for (i, raw) in c.indexes.iter().enumerate() {
        let mut parsed = crate::schema::index::Index::parse(raw);
        parsed.table_name.clone_from(&c.name);
        if !parsed.is_valid() {
            refused.push((i, "Invalid CREATE INDEX expression.".to_owned()));
            continue;
        }
        if let Err(e) = conn.execute_batch(&parsed.build()) {
            refused.push((
                i,
                format!(
                    "Failed to create index {} - {}",
                    parsed.index_name,
                    sqlite_reason(&e)
                ),
            ));
        }
    }
    if refused.is_empty() {
        Ok(())
    } else {
        Err(StoreError::IndexesRefused(refused))
    }
}

/// Whether the database has an index of that name (on any table: index names are the schema's,
/// case-insensitively), declared in a collection's `indexes` or not.
pub(crate) fn index_exists(conn: Conn<'_>, name: &str) -> Result<bool> {
    let mut stmt = conn.0.prepare_cached(
        "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?1 COLLATE NOCASE",
    )?;
    Ok(stmt.exists([name])?)
}

/// The names of the indexes `c` declares (its `indexes`, as PocketBase's parser reads them).
fn declared_index_names(c: &Collection) -> Vec<String> {
    c.indexes
        .iter()
        .map(|raw| crate::schema::index::Index::parse(raw).index_name)
        .filter(|n| !n.is_empty())
        .collect()
}

/// Create the table (or view) and indexes of a new collection. The `_collections` row is the
/// caller's.
pub(crate) fn create(conn: Conn<'_>, c: &Collection) -> Result<()> {
    let conn = conn.0;
    if c.is_view() {
        // PocketBase drops any view of that name first (SQLite's own names refuse that).
        conn.execute_batch(&format!("DROP VIEW IF EXISTS {}", q(&c.name)))
            .map_err(|e| StoreError::Invalid(sqlite_text(&e)))?;
        let query = view::normalize(c.view_query()).map_err(view_refused)?;
        // The query runs as it will in the view; it may not read the view itself.
        let temp = format!("_temp_{}", ids::lower_alnum(6));
        let tried = conn
            .execute(
                &format!("CREATE VIEW {} AS SELECT * FROM ({query})", q(&temp)),
                [],
            )
            .and_then(|_| {
                conn.prepare(&format!("PRAGMA table_info({})", q(&temp)))
                    .map(drop)
            })
            .and_then(|()| conn.execute_batch(&format!("DROP VIEW IF EXISTS {}", q(&temp))));
        if let Err(e) = tried {
            return Err(StoreError::Invalid(format!(
                "failed to normalize view query id: {}",
                sqlite_text(&e)
            )));
        }
        // One statement, never a batch: the query is the superuser's text.
        conn.execute(
            &format!("CREATE VIEW {} AS SELECT * FROM ({query})", q(&c.name)),
            [],
        )
        .map_err(|e| StoreError::Invalid(sqlite_text(&e)))?;
        return Ok(());
    }
    conn.execute_batch(&table_sql(&c.name, &c.fields))
        .map_err(|e| StoreError::Invalid(sqlite_text(&e)))?;
    create_indexes(conn, c)
}

/// The SQLite error PocketBase's save meets for a collection whose name its query builder does
/// not quote as one name: a name with `(` or `{{` goes into the statement as it is, one with
/// `.` becomes `database`.`table`. Such a name fails in SQLite before the collection is
/// validated; an import, which saves before it validates, reports that error. SQLite itself
/// judges the statement here (prepared, never run), so the words are its own. None for a name
/// the builder quotes whole.
pub(crate) fn unquoted_name_error(conn: Conn<'_>, name: &str) -> Option<String> {
    let table = if name.contains('(') || name.contains("{{") {
        // The builder's `{{x}}` placeholders still become quoted names.
        let mut out = String::new();
        let mut rest = name;
        while let Some(start) = rest.find("{{") {
            let Some(len) = rest[start + 2..].find("}}") else {
                break;
            };
            out.push_str(&rest[..start]);
            out.push_str(&q(&rest[start + 2..start + 2 + len]));
            rest = &rest[start + 2 + len + 2..];
        }
        out.push_str(rest);
        out
    } else if name.contains('.') {
        name.split('.').map(q).collect::<Vec<_>>().join(".")
    } else {
        return None;
    };
    match conn.0.prepare(&format!("CREATE TABLE {table} (`id` TEXT)")) {
        Ok(_) => None,
        Err(
            rusqlite::Error::SqliteFailure(_, Some(m))
            | rusqlite::Error::SqlInputError { msg: m, .. },
        ) => Some(m),
        Err(e) => Some(e.to_string()),
    }
}

pub(crate) fn create_collection(conn: Conn<'_>, c: &Collection) -> Result<()> {
    let conn = conn.0;
    insert_collection_row(super::Conn(conn), c)?;
    create(super::Conn(conn), c)
}

/// Move a table to a new definition with PocketBase's steps, so SQLite keeps every view that
/// reads the table in step (and refuses a change that would break one, in its own words): the
/// indexes dropped, the table renamed, removed columns dropped, new columns added and renamed
/// ones renamed (through temporary names), single <-> multi value columns converted (views
/// dropped and restored around that), the indexes created again.
pub(crate) fn update_collection(conn: Conn<'_>, old: &Collection, new: &Collection) -> Result<()> {
    let conn = conn.0;
    update_collection_row(conn, new)?;
    if new.is_view() {
        conn.execute_batch(&format!("DROP VIEW IF EXISTS {}", q(&old.name)))?;
        return create(super::Conn(conn), new);
    }
    let refused = |what: String, e: rusqlite::Error| {
        StoreError::Invalid(format!("{what} - {}", sqlite_text(&e)))
    };
    // Only the indexes the collection declared are dropped (and created again from `indexes`
    // below): an index made on the table outside `indexes` (in SQLite directly, by another tool)
    // stays, as PocketBase 0.40.6 keeps it through any collection update (checked against the
    // reference: a rule change, a field added or renamed, the indexes changed, the collection
    // renamed, a restart). Like PocketBase, deleting a field such an index covers then fails in
    // SQLite's words.
    for idx in declared_index_names(old) {
        conn.execute_batch(&format!("DROP INDEX IF EXISTS {}", q(&idx)))?;
    }
    // SQLite names are case-insensitive: a change of case only is no rename.
    if !old.name.eq_ignore_ascii_case(&new.name) {
        conn.execute_batch(&format!(
            "ALTER TABLE {} RENAME TO {}",
            q(&old.name),
            q(&new.name)
        ))
        .map_err(|e| StoreError::Invalid(sqlite_text(&e)))?;
    }
    let table = q(&new.name);
    for f in old
        .fields
        .iter()
        .filter(|f| !new.fields.iter().any(|g| g.id == f.id))
    {
        conn.execute_batch(&format!("ALTER TABLE {table} DROP COLUMN {}", q(&f.name)))
            .map_err(|e| refused(format!("failed to drop column {}", f.name), e))?;
    }
    let mut renames: Vec<(String, String)> = Vec::new();
    for f in &new.fields {
        let temp = format!("{}{}", f.name, ids::lower_alnum(5));
        match old.fields.iter().find(|o| o.id == f.id) {
            None => {
                conn.execute_batch(&format!(
                    "ALTER TABLE {table} ADD COLUMN {} {}",
                    q(&temp),
                    f.column_def()
                ))
                .map_err(|e| refused(format!("failed to add column {}", f.name), e))?;
            }
            Some(o) if o.name != f.name => {
                conn.execute_batch(&format!(
                    "ALTER TABLE {table} RENAME COLUMN {} TO {}",
                    q(&o.name),
                    q(&temp)
                ))
                .map_err(|e| refused(format!("failed to rename column {}", o.name), e))?;
            }
            Some(_) => continue,
        }
        renames.push((temp, f.name.clone()));
    }
    for (temp, name) in renames {
        conn.execute_batch(&format!(
            "ALTER TABLE {table} RENAME COLUMN {} TO {}",
            q(&temp),
            q(&name)
        ))
        .map_err(|e| StoreError::Invalid(sqlite_text(&e)))?;
    }
    convert_multi_changes(conn, old, new)?;
    create_indexes(conn, new)
}

/// Fields that switch between one value and a list: their column is rebuilt with the value
/// carried over (`"a"` <-> `["a"]`, a list keeping its last item). Every view is dropped around
/// it and created again from its own SQL, as PocketBase does.
fn convert_multi_changes(conn: &Connection, old: &Collection, new: &Collection) -> Result<()> {
    for f in &new.fields {
        let was_multi = old
            .fields
            .iter()
            .find(|o| o.id == f.id)
            .is_some_and(Field::is_multi);
        if was_multi == f.is_multi() || !old.fields.iter().any(|o| o.id == f.id) {
            continue;
        }
        let views: Vec<(String, String)> = {
            let mut stmt = conn.prepare(
                "SELECT name, sql FROM sqlite_master WHERE type = 'view' AND sql IS NOT NULL",
            )?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?
        };
        for (name, _) in &views {
            conn.execute_batch(&format!("DROP VIEW IF EXISTS {}", q(name)))?;
        }
        let table = q(&new.name);
        let col = q(&f.name);
        let temp = q(&format!("_{}{}", f.name, ids::lower_alnum(5)));
        conn.execute_batch(&format!(
            "ALTER TABLE {table} RENAME COLUMN {col} TO {temp};
             ALTER TABLE {table} ADD COLUMN {col} {};",
            f.column_def()
        ))?;
        let value = if f.is_multi() {
            format!(
                "CASE WHEN COALESCE({temp}, '') = '' THEN '[]' ELSE (CASE WHEN json_valid({temp}) AND json_type({temp}) == 'array' THEN {temp} ELSE json_array({temp}) END) END"
            )
        } else {
            format!(
                "CASE WHEN COALESCE({temp}, '[]') = '[]' THEN '' ELSE (CASE WHEN json_valid({temp}) AND json_type({temp}) == 'array' THEN COALESCE(json_extract({temp}, '$[#-1]'), '') ELSE {temp} END) END"
            )
        };
        conn.execute_batch(&format!(
            "UPDATE {table} SET {col} = ({value}); ALTER TABLE {table} DROP COLUMN {temp};"
        ))?;
        for (_, sql) in &views {
            conn.execute(sql, [])?;
        }
    }
    Ok(())
}

/// Drop a collection's row and its table or view. Nothing else is checked: an import deletes
/// collections that may depend on each other (PocketBase skips its integrity checks there);
/// the API's delete follows with `check_views`.
pub(crate) fn delete_collection(conn: Conn<'_>, c: &Collection) -> Result<()> {
    let conn = conn.0;
    conn.execute("DELETE FROM _collections WHERE id = ?1", [&c.id])?;
    let kind = if c.is_view() { "VIEW" } else { "TABLE" };
    conn.execute_batch(&format!("DROP {kind} IF EXISTS {}", q(&c.name)))?;
    Ok(())
}

/// PocketBase's check after a delete: the query of every view collection left in `schema` is
/// tried again as its dry run, and one that no longer works refuses the delete. It is the
/// collection's own query that is tried, not SQLite's copy of the view (SQLite rewrites that
/// one when a column it reads is renamed), so a view left broken by an earlier rename blocks
/// every delete but its own.
pub(crate) fn check_views(conn: Conn<'_>, schema: &Schema) -> Result<()> {
    for v in schema.collections.iter().filter(|c| c.is_view()) {
        if let Some(why) = probe_view(conn, schema, v.view_query())?.error {
            return Err(StoreError::ViewDependency(format!("[{}] {why}", v.name)));
        }
    }
    Ok(())
}

/// The other collections (their names, comma-separated) with a relation field pointing at `c`,
/// if any: PocketBase names them all when it refuses to delete `c`.
pub(crate) fn referenced_by(schema: &Schema, c: &Collection) -> Option<String> {
    let names: Vec<&str> = schema
        .collections
        .iter()
        .filter(|o| o.id != c.id)
        .filter(|o| {
            o.fields
                .iter()
                .any(|f| f.kind == FieldType::Relation && f.opt_str("collectionId") == c.id)
        })
        .map(|o| o.name.as_str())
        .collect();
    (!names.is_empty()).then(|| names.join(", "))
}

/// SQLite's refusal as PocketBase words it (its driver prints the code's description, the
/// message and the code), ending with a period.
fn sqlite_reason(e: &rusqlite::Error) -> String {
    format!("{}.", sqlite_text(e))
}

/// SQLite's refusal as PocketBase's driver prints it: `<what the code means>: <message> (<code>)`.
pub(crate) fn sqlite_text(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, Some(msg)) => {
            let what = match f.extended_code & 0xff {
                1 => "SQL logic error",
                19 => "constraint failed",
                _ => "",
            };
            let code = if f.extended_code & 0xff == 1 {
                1
            } else {
                f.extended_code
            };
            if what.is_empty() {
                format!("{msg} ({code})")
            } else {
                format!("{what}: {msg} ({code})")
            }
        }
        // A syntax error: rusqlite adds the statement and offset, PocketBase shows SQLite's words.
        rusqlite::Error::SqlInputError { msg, .. } => format!("SQL logic error: {msg} (1)"),
        rusqlite::Error::MultipleStatement => "multiple statements are not supported".into(),
        other => other.to_string(),
    }
}

fn view_refused(why: impl Into<String>) -> StoreError {
    StoreError::ViewQuery {
        why: why.into(),
        missing_id: false,
    }
}

/// What trying a view query gives: the fields PocketBase would infer for it (as many as it got
/// to), and why the query is refused, in PocketBase's words (after "Invalid query - ").
pub(crate) struct ViewProbe {
    pub fields: Vec<Field>,
    pub error: Option<String>,
}

/// Try a view query as PocketBase's dry run does, inside a savepoint that is rolled back: one
/// statement; PocketBase's own reading of its columns (see `schema::view`); a temporary view for
/// SQLite's column names; an `id` column; fields whose settings are valid; and a sample of up to
/// ten rows whose ids are present and distinct.
pub(crate) fn probe_view(conn: Conn<'_>, schema: &Schema, query: &str) -> Result<ViewProbe> {
    let conn = conn.0;
    let refused = |fields: Vec<Field>, why: String| ViewProbe {
        fields,
        error: Some(why),
    };
    let query = match view::normalize(query) {
        Ok(q) => q,
        Err(why) => return Ok(refused(Vec::new(), why)),
    };
    let mut clone_id = || format!("_clone_{}", ids::lower_alnum(4));
    let suggested = match view::suggest(schema, &query, &mut clone_id) {
        Ok(s) => s,
        Err(why) => return Ok(refused(Vec::new(), why)),
    };
    conn.execute_batch("SAVEPOINT view_probe")?;
    let probed = probe_in_savepoint(conn, schema, &query, &suggested);
    conn.execute_batch("ROLLBACK TO view_probe; RELEASE view_probe")?;
    probed
}

fn probe_in_savepoint(
    conn: &Connection,
    schema: &Schema,
    query: &str,
    suggested: &std::collections::HashMap<String, Field>,
) -> Result<ViewProbe> {
    let temp = format!("_temp_{}", ids::lower_alnum(6));
    // One statement, never a batch: the query is the superuser's text.
    if let Err(e) = conn.execute(
        &format!("CREATE VIEW {} AS SELECT * FROM ({query})", q(&temp)),
        [],
    ) {
        return Ok(ViewProbe {
            fields: Vec::new(),
            error: Some(sqlite_text(&e)),
        });
    }
    // SQLite resolves the view's tables and columns only now.
    let columns = conn
        .prepare(&format!("PRAGMA table_info({})", q(&temp)))
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get::<_, String>(1))?
                .collect::<rusqlite::Result<Vec<_>>>()
        });
    let columns = match columns {
        Ok(c) => c,
        Err(e) => {
            return Ok(ViewProbe {
                fields: Vec::new(),
                error: Some(sqlite_text(&e)),
            });
        }
    };
    let fields: Vec<Field> = columns
        .iter()
        .map(|name| {
            suggested
                .get(name)
                .cloned()
                .unwrap_or_else(|| view::default_field(name))
        })
        .collect();
    let fields = define::field_list(fields);
    if !columns.iter().any(|c| c == "id") {
        return Ok(ViewProbe {
            fields,
            error: Some(
                "missing required id column (you can use `(ROW_NUMBER() OVER()) as id` if you don't have one)"
                    .into(),
            ),
        });
    }
    if let Some(why) = define::view_field_settings_error(&fields, schema) {
        return Ok(ViewProbe {
            fields,
            error: Some(why),
        });
    }
    // A sample of the rows: each needs an id, and no two the same.
    let sample: std::result::Result<Vec<String>, rusqlite::Error> = conn
        .prepare(&format!(
            "SELECT CAST(`id` AS TEXT) FROM (SELECT * FROM ({query})) LIMIT 10"
        ))
        .and_then(|mut stmt| {
            stmt.query_map([], |r| r.get::<_, Option<String>>(0))?
                .map(|v| v.map(Option::unwrap_or_default))
                .collect()
        });
    let error = match sample {
        Err(e) => Some(format!(
            "failed to retrieve query records: {}",
            sqlite_text(&e)
        )),
        Ok(ids) => {
            let mut seen = std::collections::HashSet::new();
            if ids.iter().any(String::is_empty) {
                Some("the query could return records with empty or invalid ids".into())
            } else if !ids.iter().all(|i| seen.insert(i.clone())) {
                Some("the query could return records with non-unique ids".into())
            } else {
                None
            }
        }
    };
    Ok(ViewProbe { fields, error })
}

/// A view's fields, or its refusal (for callers that only go on with a working query).
pub(crate) fn infer_view_fields(
    conn: Conn<'_>,
    schema: &Schema,
    query: &str,
) -> Result<Vec<Field>> {
    let probe = probe_view(conn, schema, query)?;
    match probe.error {
        None => Ok(probe.fields),
        Some(why) => Err(StoreError::ViewQuery {
            missing_id: why.starts_with("missing required id column"),
            why,
        }),
    }
}

/// PocketBase's dry run of a view query (the dashboard's preview): the fields a view collection
/// `c` (named, typed as a view, its query set) would get, and up to `limit` of its rows read
/// through a real view of that name. Everything is rolled back.
pub(crate) fn dry_run_view(
    conn: Conn<'_>,
    schema: &Schema,
    c: &Collection,
    limit: i64,
) -> Result<(Vec<Field>, Vec<super::StoreRecord>)> {
    let fields = infer_view_fields(conn, schema, c.view_query())?;
    // The probe accepted it, so it reads as one statement.
    let query = view::normalize(c.view_query()).map_err(view_refused)?;
    let mut view = c.clone();
    view.fields = fields.clone();
    let db = conn.0;
    db.execute_batch("SAVEPOINT view_dry_run")?;
    // One statement, never a batch: the query is the superuser's text.
    let rows = db
        .execute(
            &format!("CREATE VIEW {} AS SELECT * FROM ({query})", q(&c.name)),
            [],
        )
        .map_err(|e| view_refused(sqlite_text(&e)))
        .and_then(|_| {
            super::records::list(conn, &view, &crate::query::Select::default(), limit, 0)
        });
    db.execute_batch("ROLLBACK TO view_dry_run; RELEASE view_dry_run")?;
    Ok((fields, rows?))
}
