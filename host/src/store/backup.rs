//! Database files as backups need them: a consistent copy of a live database (`VACUUM INTO` on
//! a read-only connection of its own, never a copy of the file and its WAL), and the checks a
//! restore makes on the databases it is about to put in place.

use super::{Result, StoreError};
use rusqlite::{Connection, OpenFlags};
use std::path::Path;

/// Copy the database at `src` into the new file `dst` as of one read snapshot, while writers
/// go on (they are never blocked: WAL readers do not lock them out). `dst` must not exist.
pub(crate) fn vacuum_into(src: &Path, dst: &Path) -> Result<()> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(src, flags)?;
    conn.busy_timeout(std::time::Duration::from_secs(30))?;
    let dst = dst
        .to_str()
        .ok_or_else(|| StoreError::Invalid(format!("not a UTF-8 path: {}", dst.display())))?;
    conn.execute("VACUUM INTO ?1", [dst])?;
    Ok(())
}

/// What a restore checks in an extracted database before it replaces the live one: SQLite
/// opens it, `PRAGMA integrity_check` says ok, and, with `tables`, those tables exist (a
/// PocketBase `data.db` has `_collections`, `_params` and `_migrations`). The error says what
/// is wrong.
pub(crate) fn check_database(path: &Path, tables: &[&str]) -> std::result::Result<(), String> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| e.to_string())?;
    let mut stmt = conn
        .prepare("PRAGMA integrity_check")
        .map_err(|e| e.to_string())?;
    let problems: Vec<String> = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .and_then(Iterator::collect)
        .map_err(|e| e.to_string())?;
    if problems != ["ok"] {
        return Err(format!(
            "integrity check failed: {}",
            problems.into_iter().take(3).collect::<Vec<_>>().join("; ")
        ));
    }
    for t in tables {
        let found: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                [t],
                |r| r.get(0),
            )
            .map_err(|e| e.to_string())?;
        if found == 0 {
            return Err(format!("it has no {t} table"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_has_the_rows_and_passes_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a.db");
        let c = Connection::open(&src).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.execute_batch("CREATE TABLE _collections(x); INSERT INTO _collections VALUES (1),(2);")
            .unwrap();
        let dst = dir.path().join("b.db");
        vacuum_into(&src, &dst).unwrap();
        // The writer's connection is still open: the copy did not need it closed.
        c.execute("INSERT INTO _collections VALUES (3)", [])
            .unwrap();
        let copy = Connection::open(&dst).unwrap();
        let n: i64 = copy
            .query_row("SELECT count(*) FROM _collections", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(check_database(&dst, &["_collections"]), Ok(()));
        assert_eq!(
            check_database(&dst, &["_params"]),
            Err("it has no _params table".into())
        );
        // A copy onto an existing file is refused rather than overwriting it.
        assert!(vacuum_into(&src, &dst).is_err());
    }

    #[test]
    fn garbage_is_not_a_database() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.db");
        std::fs::write(&p, vec![7u8; 8192]).unwrap();
        assert!(check_database(&p, &[]).is_err());
    }
}
