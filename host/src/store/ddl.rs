//! Collection DDL: the `_collections` row and the table (or view) that follows it.
//! Identifiers come only from validated collection and field names; values are bound.

use super::Conn;
use super::{Result, StoreError};
use crate::schema::define::{self, field_from_json};
use crate::schema::{Collection, Field, FieldType, Schema, ids};
use rusqlite::{Connection, params};
use serde_json::{Value, json};

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
    // PocketBase emits columns in alphabetical order of field name.
    let mut cols: Vec<&Field> = fields.iter().collect();
    cols.sort_by(|a, b| a.name.cmp(&b.name));
    let defs: Vec<String> = cols
        .iter()
        .map(|f| format!("{} {}", q(&f.name), f.column_def()))
        .collect();
    format!("CREATE TABLE {} ({})", q(name), defs.join(", "))
}

/// Index statements are superuser-provided SQL (PocketBase stores and runs them as given); we at
/// least make sure each is one CREATE [UNIQUE] INDEX statement.
fn check_index_sql(sql: &str) -> Result<()> {
    let upper = sql.trim_start().to_ascii_uppercase();
    let ok = (upper.starts_with("CREATE INDEX") || upper.starts_with("CREATE UNIQUE INDEX"))
        && !sql.trim().trim_end_matches(';').contains(';');
    if ok {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "not a CREATE INDEX statement: {sql}"
        )))
    }
}

fn create_indexes(conn: &Connection, c: &Collection) -> Result<()> {
    for sql in &c.indexes {
        check_index_sql(sql)?;
        conn.execute_batch(sql)
            .map_err(|e| StoreError::Invalid(format!("index {sql}: {e}")))?;
    }
    Ok(())
}

fn index_names(conn: &Connection, table: &str) -> Result<Vec<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 AND sql IS NOT NULL",
    )?;
    let names = stmt
        .query_map([table], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(names)
}

/// Create the table (or view) and indexes of a new collection. The `_collections` row is the
/// caller's.
pub(crate) fn create(conn: Conn<'_>, c: &Collection) -> Result<()> {
    let conn = conn.0;
    if c.is_view() {
        conn.execute_batch(&format!(
            "CREATE VIEW {} AS SELECT * FROM ({})",
            q(&c.name),
            c.view_query()
        ))
        .map_err(|e| view_refused(sqlite_reason(&e)))?;
        return Ok(());
    }
    conn.execute_batch(&table_sql(&c.name, &c.fields))?;
    create_indexes(conn, c)
}

pub(crate) fn create_collection(conn: Conn<'_>, c: &Collection) -> Result<()> {
    let conn = conn.0;
    insert_collection_row(super::Conn(conn), c)?;
    create(super::Conn(conn), c)
}

/// Move a table to a new definition. The table is rebuilt (new table, copy, swap): that one path
/// handles added, removed, renamed and retyped columns alike, and keeps the data of every field
/// whose id survives.
pub(crate) fn update_collection(conn: Conn<'_>, old: &Collection, new: &Collection) -> Result<()> {
    let conn = conn.0;
    update_collection_row(conn, new)?;
    if new.is_view() {
        conn.execute_batch(&format!("DROP VIEW IF EXISTS {}", q(&old.name)))?;
        return create(super::Conn(conn), new);
    }
    let same_shape = old.name == new.name
        && old.fields.len() == new.fields.len()
        && old.fields.iter().all(|f| {
            new.fields
                .iter()
                .any(|g| g.id == f.id && g.name == f.name && g.column_def() == f.column_def())
        });
    for idx in index_names(conn, &old.name)? {
        conn.execute_batch(&format!("DROP INDEX IF EXISTS {}", q(&idx)))?;
    }
    if !same_shape {
        let tmp = format!("_ferrobase_new_{}", new.name);
        conn.execute_batch(&table_sql(&tmp, &new.fields))?;
        let mut dst = Vec::new();
        let mut src = Vec::new();
        for f in &new.fields {
            let Some(o) = old.fields.iter().find(|o| o.id == f.id) else {
                continue;
            };
            dst.push(q(&f.name));
            src.push(convert_expr(o, f));
        }
        if !dst.is_empty() {
            conn.execute_batch(&format!(
                "INSERT INTO {} ({}) SELECT {} FROM {}",
                q(&tmp),
                dst.join(", "),
                src.join(", "),
                q(&old.name)
            ))?;
        }
        // Views that read this table are re-resolved by name when next used; the legacy rename
        // keeps SQLite from re-parsing them mid-swap.
        conn.pragma_update(None, "legacy_alter_table", "ON")?;
        let swap = conn.execute_batch(&format!(
            "DROP TABLE {}; ALTER TABLE {} RENAME TO {};",
            q(&old.name),
            q(&tmp),
            q(&new.name)
        ));
        conn.pragma_update(None, "legacy_alter_table", "OFF")?;
        swap?;
    }
    create_indexes(conn, new)
}

/// The SQL that carries an old column's value into the new column (single <-> multi changes).
fn convert_expr(old: &Field, new: &Field) -> String {
    let col = q(&old.name);
    match (old.is_multi(), new.is_multi()) {
        (false, true) => {
            format!("CASE WHEN {col} = '' OR {col} IS NULL THEN '[]' ELSE json_array({col}) END")
        }
        (true, false) => {
            format!(
                "COALESCE(CASE WHEN json_valid({col}) THEN json_extract({col}, '$[#-1]') END, '')"
            )
        }
        _ => col,
    }
}

pub(crate) fn delete_collection(conn: Conn<'_>, c: &Collection) -> Result<()> {
    let conn = conn.0;
    conn.execute("DELETE FROM _collections WHERE id = ?1", [&c.id])?;
    let kind = if c.is_view() { "VIEW" } else { "TABLE" };
    conn.execute_batch(&format!("DROP {kind} IF EXISTS {}", q(&c.name)))?;
    Ok(())
}

/// Which other collection (by name) has a relation field pointing at `c`, if any.
pub(crate) fn referenced_by(schema: &Schema, c: &Collection) -> Option<String> {
    schema
        .collections
        .iter()
        .filter(|o| o.id != c.id)
        .find(|o| {
            o.fields
                .iter()
                .any(|f| f.kind == FieldType::Relation && f.opt_str("collectionId") == c.id)
        })
        .map(|o| o.name.clone())
}

/// SQLite's refusal as PocketBase words it (its driver prints the code's description, the
/// message and the code).
fn sqlite_reason(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, Some(msg)) if f.extended_code & 0xff == 1 => {
            format!("SQL logic error: {msg} (1).")
        }
        rusqlite::Error::SqliteFailure(f, Some(msg)) => format!("{msg} ({}).", f.extended_code),
        // A syntax error: rusqlite adds the statement and offset, PocketBase shows SQLite's words.
        rusqlite::Error::SqlInputError { msg, .. } => format!("SQL logic error: {msg} (1)."),
        other => format!("{other}."),
    }
}

fn view_refused(why: impl Into<String>) -> StoreError {
    StoreError::ViewQuery {
        why: why.into(),
        missing_id: false,
    }
}

/// Whether the outermost SELECT of `sql` lists a wildcard column (`*` or `t.*`). PocketBase
/// refuses those: a view's fields must be named, so that a later column added to the source
/// table (a password hash, say) never appears in the view by itself.
pub(crate) fn has_wildcard_column(sql: &str) -> bool {
    #[derive(PartialEq)]
    enum Tok<'a> {
        Word(&'a str),
        Punct(u8),
        Other,
    }
    let b = sql.as_bytes();
    let mut toks: Vec<(usize, Tok<'_>)> = Vec::new();
    let (mut i, mut depth) = (0usize, 0usize);
    while i < b.len() {
        let c = b[i];
        let skip_to = |from: usize, end: &[u8]| -> usize {
            sql[from..]
                .find(std::str::from_utf8(end).unwrap_or(""))
                .map_or(b.len(), |p| from + p + end.len())
        };
        match c {
            _ if c.is_ascii_whitespace() => i += 1,
            b'-' if b.get(i + 1) == Some(&b'-') => i = skip_to(i + 2, b"\n"),
            b'/' if b.get(i + 1) == Some(&b'*') => i = skip_to(i + 2, b"*/"),
            b'\'' | b'"' | b'`' => {
                // A quote doubled inside is an escaped quote; either way the token ends at the
                // next lone closing quote.
                let mut j = i + 1;
                while j < b.len() {
                    if b[j] == c {
                        if b.get(j + 1) == Some(&c) {
                            j += 2;
                            continue;
                        }
                        break;
                    }
                    j += 1;
                }
                toks.push((depth, Tok::Other));
                i = j + 1;
            }
            b'[' => {
                toks.push((depth, Tok::Other));
                i = skip_to(i + 1, b"]");
            }
            b'(' => {
                toks.push((depth, Tok::Punct(c)));
                depth += 1;
                i += 1;
            }
            b')' => {
                depth = depth.saturating_sub(1);
                toks.push((depth, Tok::Punct(c)));
                i += 1;
            }
            _ if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80)
                {
                    i += 1;
                }
                toks.push((depth, Tok::Word(&sql[start..i])));
            }
            _ => {
                toks.push((depth, Tok::Punct(c)));
                i += 1;
            }
        }
    }
    let is_kw = |t: &Tok<'_>, kw: &str| matches!(t, Tok::Word(w) if w.eq_ignore_ascii_case(kw));
    let Some(select) = toks.iter().position(|(d, t)| *d == 0 && is_kw(t, "select")) else {
        return false;
    };
    const ENDS: &[&str] = &[
        "from",
        "where",
        "group",
        "having",
        "order",
        "limit",
        "window",
        "union",
        "intersect",
        "except",
    ];
    let mut column: Vec<&Tok<'_>> = Vec::new();
    let wildcard = |col: &[&Tok<'_>]| {
        matches!(
            col,
            [Tok::Punct(b'*')] | [.., Tok::Punct(b'.'), Tok::Punct(b'*')]
        )
    };
    for (d, t) in &toks[select + 1..] {
        if *d == 0 && ENDS.iter().any(|k| is_kw(t, k)) {
            break;
        }
        if *d == 0 && *t == Tok::Punct(b',') {
            if wildcard(&column) {
                return true;
            }
            column.clear();
            continue;
        }
        if column.is_empty() && *d == 0 && (is_kw(t, "distinct") || is_kw(t, "all")) {
            continue;
        }
        // Only the column's own top-level tokens decide (`count(*)` ends with `)`).
        if *d == 0 {
            column.push(t);
        } else if column.last() != Some(&&Tok::Other) {
            column.push(&Tok::Other);
        }
    }
    wildcard(&column)
}

/// Infer a view's fields from its query: a column read straight from a collection's table becomes
/// a clone of that field, `id` a plain text field, anything computed a json field (numbers for
/// counts and integer casts). The query is tried as a real view inside a savepoint that is
/// rolled back, so SQLite words its refusals as it will for the real view.
pub(crate) fn infer_view_fields(
    conn: Conn<'_>,
    schema: &Schema,
    query: &str,
) -> Result<Vec<Field>> {
    let conn = conn.0;
    // Other problems are reported by the view below, in the words SQLite uses there.
    if let Err(rusqlite::Error::MultipleStatement) = conn.prepare(query) {
        return Err(view_refused("multiple statements are not supported."));
    }
    if has_wildcard_column(query) {
        return Err(view_refused(
            "wildcard columns (*) are not supported - manually type the collection field names you want the view query to have.",
        ));
    }
    conn.execute_batch("SAVEPOINT view_probe")?;
    let probed = probe_view(conn, schema, query);
    conn.execute_batch("ROLLBACK TO view_probe; RELEASE view_probe")?;
    probed
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
    let mut view = c.clone();
    view.fields = fields.clone();
    let db = conn.0;
    db.execute_batch("SAVEPOINT view_dry_run")?;
    let rows = db
        .execute_batch(&format!("CREATE VIEW {} AS {}", q(&c.name), c.view_query()))
        .map_err(|e| view_refused(sqlite_reason(&e)))
        .and_then(|()| {
            super::records::list(conn, &view, &crate::query::Select::default(), limit, 0)
        });
    db.execute_batch("ROLLBACK TO view_dry_run; RELEASE view_dry_run")?;
    Ok((fields, rows?))
}

fn probe_view(conn: &Connection, schema: &Schema, query: &str) -> Result<Vec<Field>> {
    conn.execute_batch(&format!("CREATE VIEW `_ferrobase_view_probe` AS {query}"))
        .map_err(|e| view_refused(sqlite_reason(&e)))?;
    let stmt = conn
        .prepare("SELECT * FROM `_ferrobase_view_probe` LIMIT 0")
        .map_err(|e| view_refused(sqlite_reason(&e)))?;
    let lowered = query.to_ascii_lowercase();
    let mut fields = Vec::new();
    let mut has_id = false;
    for col in stmt.columns_with_metadata() {
        let name = col.name().to_owned();
        if name == "id" {
            has_id = true;
            let Value::Object(m) = json!({"id": "text3208210256", "name": "id", "type": "text", "primaryKey": true,
                "required": true, "system": true, "pattern": "^[a-z0-9]+$"})
            else {
                unreachable!("object literal")
            };
            fields.push(field_from_json(m).expect("valid"));
            continue;
        }
        let source = match (col.table_name(), col.origin_name()) {
            (Some(t), Some(o)) => schema.by_name(t).and_then(|c| c.field(o)).cloned(),
            _ => None,
        };
        let field = match source {
            Some(mut f) => {
                let clone_id = format!("_clone_{}", ids::lower_alnum(4));
                // A clone keeps every option of its source (required and system included, as
                // PocketBase keeps them), under its own id and the column's name.
                f.raw.insert("id".into(), json!(clone_id));
                f.raw.insert("name".into(), json!(name));
                field_from_json(f.raw).expect("cloned from a valid field")
            }
            None => {
                let alias_pos = lowered.find(&format!(" as {}", name.to_ascii_lowercase()));
                let expr_is_int = alias_pos.is_some_and(|p| {
                    let before = &lowered[..p];
                    let start = before.rfind([',', '\n']).map(|i| i + 1).unwrap_or(0);
                    let expr = before[start..].trim();
                    expr.contains("count(")
                        || expr.contains("as int")
                        || expr.contains("as integer")
                });
                let m = if expr_is_int {
                    json!({"id": ids::field_id("number", &name), "name": name, "type": "number", "onlyInt": true})
                } else {
                    json!({"id": ids::field_id("json", &name), "name": name, "type": "json", "maxSize": 1})
                };
                let Value::Object(m) = m else {
                    unreachable!("object literal")
                };
                field_from_json(m).expect("valid")
            }
        };
        fields.push(field);
    }
    if !has_id {
        return Err(StoreError::ViewQuery {
            why: "missing required id column (you can use `(ROW_NUMBER() OVER()) as id` if you don't have one).".into(),
            missing_id: true,
        });
    }
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::has_wildcard_column;

    #[test]
    fn wildcard_columns_of_the_outer_select_are_found() {
        for q in [
            "SELECT * FROM users",
            "select u.* from users u",
            "SELECT id, * FROM users",
            "SELECT DISTINCT * FROM users",
            "SELECT * FROM (SELECT id FROM users)",
            "SELECT id, `t`.* FROM users t",
        ] {
            assert!(has_wildcard_column(q), "{q}");
        }
        for q in [
            "SELECT id, count(*) AS c FROM users GROUP BY id",
            "SELECT id, '*' AS c FROM users",
            "SELECT id, 2*3 AS c FROM users",
            "SELECT id, (SELECT count(*) FROM users) AS c FROM users",
            "SELECT id /* * */ FROM users -- *",
            "SELECT \"*\" AS id FROM users",
        ] {
            assert!(!has_wildcard_column(q), "{q}");
        }
    }
}
