//! Raw SQL from plugins: one statement, bound parameters, and an authorizer that keeps it
//! away from system tables, secrets, schema changes, PRAGMAs and ATTACH.

use super::Conn;
use super::{Result, StoreError};
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::types::{ToSqlOutput, Value as SqlV, ValueRef};

/// A value crossing between plugin SQL and SQLite.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SqlValue {
    Null,
    Integer(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl rusqlite::ToSql for SqlValue {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Self::Null => ToSqlOutput::Owned(SqlV::Null),
            Self::Integer(i) => ToSqlOutput::Owned(SqlV::Integer(*i)),
            Self::Real(r) => ToSqlOutput::Owned(SqlV::Real(*r)),
            Self::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Self::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
        })
    }
}

/// Rows of a plugin query: column names, then values.
pub(crate) type Rows = (Vec<String>, Vec<Vec<SqlValue>>);

/// Most rows one plugin query returns.
const MAX_ROWS: usize = 10_000;

fn private_table(t: &str) -> bool {
    let t = t.to_ascii_lowercase();
    (t.starts_with('_') && t != "_collections") || t.starts_with("sqlite_")
}

/// What plugin SQL may do: read and write user tables; read `_collections`; never touch other
/// system tables, secrets columns, the schema, PRAGMAs or other databases.
fn policy(write: bool) -> impl for<'r> FnMut(AuthContext<'r>) -> Authorization + Send + 'static {
    move |ctx: AuthContext<'_>| match ctx.action {
        AuthAction::Select | AuthAction::Function { .. } | AuthAction::Recursive => {
            Authorization::Allow
        }
        AuthAction::Read {
            table_name,
            column_name,
        } => {
            if private_table(table_name) || matches!(column_name, "password" | "tokenKey") {
                Authorization::Deny
            } else {
                Authorization::Allow
            }
        }
        AuthAction::Insert { table_name }
        | AuthAction::Delete { table_name }
        | AuthAction::Update { table_name, .. }
            if write =>
        {
            if private_table(table_name) || table_name.eq_ignore_ascii_case("_collections") {
                Authorization::Deny
            } else {
                Authorization::Allow
            }
        }
        _ => Authorization::Deny,
    }
}

fn one_statement(sql: &str) -> Result<()> {
    // rusqlite's prepare takes the first statement only; refuse trailing ones outright.
    let trimmed = sql.trim().trim_end_matches(';');
    if trimmed.contains(';') {
        return Err(StoreError::Invalid("only one statement per call".into()));
    }
    Ok(())
}

fn denied(e: rusqlite::Error) -> StoreError {
    match &e {
        rusqlite::Error::SqliteFailure(code, _)
            if code.code == rusqlite::ErrorCode::AuthorizationForStatementDenied =>
        {
            StoreError::Denied("not allowed for plugins".into())
        }
        _ => StoreError::classify(e),
    }
}

/// A read-only statement. `conn` is a reader (or the writer inside a job).
pub(crate) fn query(conn: Conn<'_>, sql: &str, params: &[SqlValue]) -> Result<Rows> {
    let conn = conn.0;
    one_statement(sql)?;
    conn.authorizer(Some(policy(false)));
    let out = (|| {
        let mut stmt = conn.prepare(sql).map_err(denied)?;
        if !stmt.readonly() {
            return Err(StoreError::Denied(
                "query runs reads only; use execute".into(),
            ));
        }
        let cols: Vec<String> = stmt
            .column_names()
            .iter()
            .map(|c| (*c).to_owned())
            .collect();
        let n = cols.len();
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            if out.len() >= MAX_ROWS {
                return Err(StoreError::Invalid(format!("more than {MAX_ROWS} rows")));
            }
            let mut row = Vec::with_capacity(n);
            for i in 0..n {
                row.push(match r.get_ref(i)? {
                    ValueRef::Null => SqlValue::Null,
                    ValueRef::Integer(v) => SqlValue::Integer(v),
                    ValueRef::Real(v) => SqlValue::Real(v),
                    ValueRef::Text(t) => SqlValue::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => SqlValue::Blob(b.to_vec()),
                });
            }
            out.push(row);
        }
        Ok((cols, out))
    })();
    conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>);
    out
}

/// A write statement on the writer's connection (inside the caller's savepoint or job).
pub(crate) fn execute(conn: Conn<'_>, sql: &str, params: &[SqlValue]) -> Result<u64> {
    let conn = conn.0;
    one_statement(sql)?;
    conn.authorizer(Some(policy(true)));
    let out = (|| {
        let mut stmt = conn.prepare(sql).map_err(denied)?;
        let n = stmt
            .execute(rusqlite::params_from_iter(params.iter()))
            .map_err(StoreError::classify)?;
        Ok(n as u64)
    })();
    conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_sql_stays_out_of_system_tables_and_secrets() {
        let c = rusqlite::Connection::open_in_memory().unwrap();
        c.execute_batch(
            "CREATE TABLE posts (id TEXT, title TEXT); CREATE TABLE _superusers (id TEXT, password TEXT);
             CREATE TABLE users (id TEXT, tokenKey TEXT); INSERT INTO posts VALUES ('a', 'x');",
        )
        .unwrap();
        let (cols, rows) = query(
            Conn(&c),
            "SELECT id, title FROM posts WHERE id = ?",
            &[SqlValue::Text("a".into())],
        )
        .unwrap();
        assert_eq!(cols, ["id", "title"]);
        assert_eq!(
            rows,
            vec![vec![SqlValue::Text("a".into()), SqlValue::Text("x".into())]]
        );
        for bad in [
            "SELECT * FROM _superusers",
            "SELECT tokenKey FROM users",
            "SELECT name FROM sqlite_master",
            "PRAGMA table_info(posts)",
        ] {
            assert!(
                matches!(query(Conn(&c), bad, &[]), Err(StoreError::Denied(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            query(Conn(&c), "DELETE FROM posts", &[]),
            Err(StoreError::Denied(_))
        ));
        assert_eq!(
            execute(
                Conn(&c),
                "UPDATE posts SET title = ? WHERE id = 'a'",
                &[SqlValue::Text("y".into())]
            )
            .unwrap(),
            1
        );
        for bad in [
            "DELETE FROM _superusers",
            "DROP TABLE posts",
            "CREATE TABLE t (a)",
            "ATTACH DATABASE 'x.db' AS x",
            "PRAGMA journal_mode = DELETE",
        ] {
            assert!(
                matches!(execute(Conn(&c), bad, &[]), Err(StoreError::Denied(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            execute(Conn(&c), "DELETE FROM posts; DROP TABLE posts", &[]),
            Err(StoreError::Invalid(_))
        ));
        // The authorizer is gone afterwards: the host's own statements are unaffected.
        c.execute("CREATE TABLE after_plugin (a)", []).unwrap();
    }
}
