//! Record rows: select, count, insert, update and delete (with PocketBase's relation integrity).

use super::Conn;
use super::ddl::q;
use super::{Result, StoreError};
use crate::query::Select;
use crate::query::push_qi;
use crate::schema::value::Stored;
use crate::schema::{Collection, FieldType, Schema};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, StatementStatus, ToSql};
use std::collections::HashSet;
use std::sync::Arc;

/// One row, aligned with the collection's `fields`.
pub(crate) type StoreRecord = Vec<Stored>;

impl ToSql for Stored {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Stored::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Stored::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
            Stored::Real(r) => ToSqlOutput::Borrowed(ValueRef::Real(*r)),
            Stored::Text(t) => ToSqlOutput::Borrowed(ValueRef::Text(t.as_bytes())),
        })
    }
}

fn stored_of(v: ValueRef<'_>) -> Stored {
    match v {
        ValueRef::Null => Stored::Null,
        ValueRef::Integer(i) => Stored::Int(i),
        ValueRef::Real(r) => Stored::Real(r),
        // Valid UTF-8 (always, for what we write) takes the fast validating copy.
        ValueRef::Text(t) | ValueRef::Blob(t) => Stored::Text(match std::str::from_utf8(t) {
            Ok(s) => s.to_owned(),
            Err(_) => String::from_utf8_lossy(t).into_owned(),
        }),
    }
}

/// `table.col, table.col, ...` for every field of `c`, appended to `sql`.
fn push_columns(sql: &mut String, c: &Collection) {
    for (i, f) in c.fields.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        push_qi(sql, &c.name);
        sql.push('.');
        push_qi(sql, &f.name);
    }
}

fn read_row(c: &Collection, r: &rusqlite::Row<'_>) -> rusqlite::Result<StoreRecord> {
    (0..c.fields.len())
        .map(|i| Ok(stored_of(r.get_ref(i)?)))
        .collect()
}

/// `SELECT [DISTINCT] <columns> FROM <table><joins> [WHERE ..] [ORDER BY ..] LIMIT ? OFFSET ?`.
fn select_sql(c: &Collection, joins: &str, where_sql: &str, order_sql: &str) -> String {
    // Joins can repeat a row; PocketBase de-duplicates with DISTINCT only then.
    let mut sql = String::with_capacity(64 * (c.fields.len() + 2) + where_sql.len() + joins.len());
    sql.push_str(if joins.is_empty() {
        "SELECT "
    } else {
        "SELECT DISTINCT "
    });
    push_columns(&mut sql, c);
    sql.push_str(" FROM ");
    push_qi(&mut sql, &c.name);
    sql.push_str(joins);
    if !where_sql.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(where_sql);
    }
    if !order_sql.is_empty() {
        sql.push_str(" ORDER BY ");
        sql.push_str(order_sql);
    }
    sql.push_str(" LIMIT ? OFFSET ?");
    sql
}

fn fetch(
    conn: &Connection,
    c: &Collection,
    sql: &str,
    params: &[&dyn ToSql],
) -> Result<Vec<StoreRecord>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params, |r| read_row(c, r))?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// What SQLite's own counters say a list's statements cost (`sqlite3_stmt_status`): table rows
/// stepped through in full scans (no index narrowed or ordered them), sorts made in temporary
/// b-trees, virtual machine steps. Reading them is a field load per counter: no allocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ScanCost {
    pub full_scan_rows: u64,
    pub sorts: u64,
    pub vm_steps: u64,
}

impl ScanCost {
    /// Zero `stmt`'s counters: a cached statement keeps counting across its runs, and the same
    /// text may have run for another caller since.
    fn start(stmt: &rusqlite::Statement<'_>) {
        for s in [
            StatementStatus::FullscanStep,
            StatementStatus::Sort,
            StatementStatus::VmStep,
        ] {
            stmt.reset_status(s);
        }
    }

    /// Add what `stmt` counted since [`ScanCost::start`].
    fn add(&mut self, stmt: &rusqlite::Statement<'_>) {
        let n = |s| u64::try_from(stmt.reset_status(s)).unwrap_or(0);
        self.full_scan_rows += n(StatementStatus::FullscanStep);
        self.sorts += n(StatementStatus::Sort);
        self.vm_steps += n(StatementStatus::VmStep);
    }

    /// Run `f` on `stmt` and add what it cost.
    pub(super) fn measure<R>(
        &mut self,
        stmt: &mut rusqlite::Statement<'_>,
        f: impl FnOnce(&mut rusqlite::Statement<'_>) -> rusqlite::Result<R>,
    ) -> rusqlite::Result<R> {
        Self::start(stmt);
        let out = f(stmt);
        self.add(stmt);
        out
    }
}

/// [`list`], with what its statement cost added to `cost`.
pub(crate) fn list_costed(
    conn: Conn<'_>,
    c: &Collection,
    sel: &Select,
    limit: i64,
    offset: i64,
    cost: &mut ScanCost,
) -> Result<Vec<StoreRecord>> {
    let sql = select_sql(c, &sel.joins, &sel.where_sql, &sel.order_sql);
    let mut params: Vec<&dyn ToSql> = sel.params.iter().map(|p| p as &dyn ToSql).collect();
    params.push(&limit);
    params.push(&offset);
    let mut stmt = conn.0.prepare_cached(&sql)?;
    ScanCost::start(&stmt);
    let rows = stmt
        .query_map(params.as_slice(), |r| read_row(c, r))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    cost.add(&stmt);
    Ok(rows)
}

/// `EXPLAIN QUERY PLAN` of the page statement [`list`] runs for `sel` (first page of 30): one
/// line per step, indented two spaces per level as the sqlite3 shell draws it.
pub(crate) fn explain_list(conn: Conn<'_>, c: &Collection, sel: &Select) -> Result<Vec<String>> {
    let sql = format!("EXPLAIN QUERY PLAN {}", list_sql(c, sel));
    let mut params: Vec<&dyn ToSql> = sel.params.iter().map(|p| p as &dyn ToSql).collect();
    params.push(&30_i64);
    params.push(&0_i64);
    let mut stmt = conn.0.prepare(&sql)?;
    let steps = stmt
        .query_map(params.as_slice(), |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(3)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut depth: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    Ok(steps
        .into_iter()
        .map(|(id, parent, detail)| {
            let d = depth.get(&parent).map_or(0, |d| d + 1);
            depth.insert(id, d);
            format!("{}{detail}", "  ".repeat(d))
        })
        .collect())
}

/// The statement [`list`] runs for `sel` (LIMIT and OFFSET left as parameters).
pub(crate) fn list_sql(c: &Collection, sel: &Select) -> String {
    select_sql(c, &sel.joins, &sel.where_sql, &sel.order_sql)
}

pub(crate) fn list(
    conn: Conn<'_>,
    c: &Collection,
    sel: &Select,
    limit: i64,
    offset: i64,
) -> Result<Vec<StoreRecord>> {
    let conn = conn.0;
    let sql = select_sql(c, &sel.joins, &sel.where_sql, &sel.order_sql);
    let mut params: Vec<&dyn ToSql> = sel.params.iter().map(|p| p as &dyn ToSql).collect();
    params.push(&limit);
    params.push(&offset);
    fetch(conn, c, &sql, &params)
}

/// A page and the total number of matches, in one scan where that is cheaper than two.
///
/// A filtered list with a total usually costs two scans of the table: the COUNT, and the page
/// query whose sorter copies every matching row (body included) while it looks for the top
/// rows. When the statement has a WHERE but no joins (and the table has rowids), one scan of
/// `rowid` in sort order gives both: the total is the number of rows it yields, and only the
/// page's rowids are kept; the page's rows are then read by rowid.
///
/// A list without joins (the whole table, or a filter over the row itself: see
/// `store::carried::Rows`) takes its total, and the rowids of its page when it is sorted by the
/// table's own columns, from `carried` (when given): carried over the inserts since they were
/// last read when they can be (see `store::Carried`); `before` is a stamp taken before the
/// snapshot's transaction read anything.
///
/// What the statements cost is added to `cost`.
pub(crate) fn page_and_total(
    conn: Conn<'_>,
    c: &Collection,
    sel: &Select,
    (limit, offset): (i64, i64),
    cost: &mut ScanCost,
    carried: Option<(&super::Carried, super::Stamp)>,
) -> Result<(Vec<StoreRecord>, i64)> {
    let conn = conn.0;
    let (lo, hi) = (offset.max(0), offset.max(0).saturating_add(limit.max(0)));
    if let Some((carried, before)) = carried
        && sel.joins.is_empty()
        && !sel.volatile
        && !c.is_view()
    {
        let sorted = limit > 0
            && hi <= super::carried::FIRST_MAX
            && super::carried::carriable_order(&c.name, &sel.order_sql);
        // A filtered page in an order that cannot be carried comes from the one scan below
        // (unsorted, it is the first matches a short walk finds).
        if sorted || sel.where_sql.is_empty() || sel.order_sql.is_empty() {
            let which = super::carried::Rows {
                where_sql: &sel.where_sql,
                params: &sel.params,
            };
            let carry = carried.begin(super::Conn(conn), &c.name, before)?;
            if !sorted {
                let rows = list_costed(super::Conn(conn), c, sel, limit, offset, cost)?;
                return Ok((rows, carry.rows(super::Conn(conn), which, cost)?));
            }
            let (first, total) = if sel.where_sql.is_empty() {
                let first = carry.first(super::Conn(conn), which, &sel.order_sql, hi, cost)?;
                (first, carry.rows(super::Conn(conn), which, cost)?)
            } else {
                carry.first_and_rows(super::Conn(conn), which, &sel.order_sql, hi, cost)?
            };
            let rows = by_rowids(conn, c, first.get(lo as usize..).unwrap_or(&[]))?;
            return Ok((rows, total));
        }
    }
    if sel.where_sql.is_empty() || !sel.joins.is_empty() || c.is_view() {
        let rows = list_costed(super::Conn(conn), c, sel, limit, offset, cost)?;
        return Ok((rows, count_costed(super::Conn(conn), c, sel, cost)?));
    }
    let t = q(&c.name);
    let mut sql = format!("SELECT {t}.`_rowid_` FROM {t} WHERE {}", sel.where_sql);
    if !sel.order_sql.is_empty() {
        sql.push_str(" ORDER BY ");
        sql.push_str(&sel.order_sql);
    }
    let params: Vec<&dyn ToSql> = sel.params.iter().map(|p| p as &dyn ToSql).collect();
    let mut stmt = conn.prepare_cached(&sql)?;
    let (page, total) = counted_window(&mut stmt, &params, (lo, hi), cost)?;
    Ok((by_rowids(conn, c, &page)?, total))
}

/// Run `stmt` (it selects rowids, in order) to its end: how many rows it gives, and the rowids
/// of those at positions `lo..hi`. What it cost is added to `cost`.
pub(super) fn counted_window(
    stmt: &mut rusqlite::Statement<'_>,
    params: &[&dyn ToSql],
    (lo, hi): (i64, i64),
    cost: &mut ScanCost,
) -> rusqlite::Result<(Vec<i64>, i64)> {
    cost.measure(stmt, |s| {
        let mut rows = s.query(params)?;
        let (mut window, mut total) = (Vec::new(), 0_i64);
        while let Some(r) = rows.next()? {
            if total >= lo && total < hi {
                window.push(r.get(0)?);
            }
            total += 1;
        }
        Ok((window, total))
    })
}

/// The rows of `c` with these rowids, in their order (a row gone meanwhile is skipped: the
/// caller read the rowids in the same snapshot, so none is).
fn by_rowids(conn: &Connection, c: &Collection, page: &[i64]) -> Result<Vec<StoreRecord>> {
    if page.is_empty() {
        return Ok(Vec::new());
    }
    let t = q(&c.name);
    let marks = vec!["?"; page.len()].join(", ");
    let mut by_rowid = String::from("SELECT ");
    push_columns(&mut by_rowid, c);
    by_rowid.push_str(&format!(
        ", {t}.`_rowid_` FROM {t} WHERE {t}.`_rowid_` IN ({marks})"
    ));
    let mut stmt = conn.prepare_cached(&by_rowid)?;
    let ids: Vec<&dyn ToSql> = page.iter().map(|i| i as &dyn ToSql).collect();
    let n = c.fields.len();
    let mut found: std::collections::HashMap<i64, StoreRecord> = stmt
        .query_map(ids.as_slice(), |r| {
            Ok((r.get::<_, i64>(n)?, read_row(c, r)?))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(page.iter().filter_map(|id| found.remove(id)).collect())
}

pub(crate) fn count(conn: Conn<'_>, c: &Collection, sel: &Select) -> Result<i64> {
    count_costed(conn, c, sel, &mut ScanCost::default())
}

fn count_costed(conn: Conn<'_>, c: &Collection, sel: &Select, cost: &mut ScanCost) -> Result<i64> {
    let conn = conn.0;
    let key = if c.is_view() {
        format!("{}.`id`", q(&c.name))
    } else {
        format!("{}.`_rowid_`", q(&c.name))
    };
    let what = if sel.joins.is_empty() {
        "count(*)".to_owned()
    } else {
        format!("count(DISTINCT {key})")
    };
    let mut sql = format!("SELECT {what} FROM {}{}", q(&c.name), sel.joins);
    if !sel.where_sql.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&sel.where_sql);
    }
    let params: Vec<&dyn ToSql> = sel.params.iter().map(|p| p as &dyn ToSql).collect();
    let mut stmt = conn.prepare_cached(&sql)?;
    ScanCost::start(&stmt);
    let n = stmt.query_row(params.as_slice(), |r| r.get(0))?;
    cost.add(&stmt);
    Ok(n)
}

/// The rowid of the record `id` of `c` (the change feed names rows by rowid).
pub(crate) fn rowid_of(conn: Conn<'_>, c: &Collection, id: &str) -> Result<Option<i64>> {
    let mut sql = String::with_capacity(c.name.len() + 40);
    // `_rowid_`, which no field may be named: a field may be called `rowid`.
    sql.push_str("SELECT `_rowid_` FROM ");
    push_qi(&mut sql, &c.name);
    sql.push_str(" WHERE `id` = ?");
    let mut stmt = conn.0.prepare_cached(&sql)?;
    let mut rows = stmt.query([id])?;
    Ok(match rows.next()? {
        Some(r) => Some(r.get(0)?),
        None => None,
    })
}

/// One record by id, optionally only if `extra` (a compiled rule) holds for it.
pub(crate) fn get(
    conn: Conn<'_>,
    c: &Collection,
    id: &str,
    extra: Option<&Select>,
) -> Result<Option<StoreRecord>> {
    let conn = conn.0;
    let mut cond = String::with_capacity(c.name.len() + 12);
    push_qi(&mut cond, &c.name);
    cond.push_str(".`id` = ?");
    let (joins, where_sql, mut params): (&str, String, Vec<&dyn ToSql>) = match extra {
        Some(sel) if !sel.where_sql.is_empty() => (
            &sel.joins,
            format!("({}) AND {cond}", sel.where_sql),
            sel.params.iter().map(|p| p as &dyn ToSql).collect(),
        ),
        _ => ("", cond, Vec::new()),
    };
    params.push(&id);
    params.push(&1_i64);
    params.push(&0_i64);
    let sql = select_sql(c, joins, &where_sql, "");
    Ok(fetch(conn, c, &sql, &params)?.into_iter().next())
}

/// The select list of a one-row CTE standing in for a record of `c`: each field as a bound
/// value, numbered from `after + 1` in field order.
fn row_columns(c: &Collection, after: usize) -> String {
    c.fields
        .iter()
        .enumerate()
        .map(|(i, f)| format!("?{} AS {}", after + i + 1, q(&f.name)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `row` (one record of `c`, held in memory) satisfies `sel`, compiled against `c`
/// under another name than its table's (`c.name` here is that other name): the row stands in
/// a one-row CTE of that name, so the condition sees the record as given while every other
/// table, the collection's own included through relations, is read as stored. This is how a
/// change is checked against subscribers' rules without reading it back, and how a deleted
/// record is checked at all.
pub(crate) fn row_matches(
    conn: Conn<'_>,
    c: &Collection,
    row: &[Stored],
    sel: &Select,
) -> Result<bool> {
    let conn = conn.0;
    let values = row_columns(c, sel.params.len());
    let t = q(&c.name);
    let mut sql = format!(
        "WITH {t} AS (SELECT {values}) SELECT 1 FROM {t}{}",
        sel.joins
    );
    if !sel.where_sql.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&sel.where_sql);
    }
    sql.push_str(" LIMIT 1");
    let params: Vec<&dyn ToSql> = sel
        .params
        .iter()
        .chain(row.iter())
        .map(|p| p as &dyn ToSql)
        .collect();
    let mut stmt = conn.prepare_cached(&sql)?;
    Ok(stmt.exists(params.as_slice())?)
}

/// SQLite's limit on bound values in one statement (`SQLITE_MAX_VARIABLE_NUMBER` of the bundled
/// build is 32,766), with room to spare.
const MAX_BOUND: usize = 30_000;

/// Rows of one `row_matches_each` statement at most: a statement of this size stays in the
/// connection's statement cache, and binding is what grows with it.
const EACH_ROWS_MAX: usize = 512;

/// [`row_matches`] for many sets of values of `sel`'s placeholders at once (subscribers whose
/// checks are the same statement and differ only in what they bind, typically their own
/// `@request.auth.id`): one cached statement of up to [`EACH_ROWS_MAX`] sets (and
/// [`MAX_BOUND`] bound values), run once per chunk of sets, the sets joined
/// in as the rows of a `VALUES` table and each `?N` of `sel` read from its column, so the
/// answers are the ones each set would get alone (the same values, compared the same way:
/// neither a bound value nor a `VALUES` column has an affinity). `sets[i]` holds
/// `sel.params.len()` values; the answer is one bool per set, in order.
pub(crate) fn row_matches_each(
    conn: Conn<'_>,
    c: &Collection,
    row: &[Stored],
    sel: &Select,
    sets: &[&[Stored]],
) -> Result<Vec<bool>> {
    let k = sel.params.len();
    if k == 0 || sets.len() < 2 {
        let mut out = Vec::with_capacity(sets.len());
        for set in sets {
            let one = Select {
                params: set.to_vec(),
                ..sel.clone()
            };
            out.push(row_matches(conn, c, row, &one)?);
        }
        return Ok(out);
    }
    // `:each` cannot be a collection's name, so it cannot shadow a table the condition reads.
    let each = q(":each");
    let rebind = |sql: &str| -> String {
        let mut out = String::with_capacity(sql.len() + 16);
        let mut rest = sql;
        while let Some(pos) = rest.find('?') {
            out.push_str(&rest[..pos]);
            let tail = &rest[pos + 1..];
            let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
            match tail[..digits].parse::<usize>() {
                Ok(n) if (1..=k).contains(&n) => out.push_str(&format!("{each}.`c{n}`")),
                _ => out.push_str(&rest[pos..pos + 1 + digits]),
            }
            rest = &tail[digits..];
        }
        out.push_str(rest);
        out
    };
    let joins = rebind(&sel.joins);
    let where_sql = rebind(&sel.where_sql);
    let fields = c.fields.len();
    let values = row_columns(c, 0);
    let columns = (1..=k).map(|n| format!(", `c{n}`")).collect::<String>();
    let t = q(&c.name);
    // Every chunk has the same number of rows (the last one padded with rows whose key is -1,
    // which no answer reads), so the statement is compiled once and then found in the cache:
    // compiling a `VALUES` table of 10,000 rows for every change was about 4% of the CPU of a
    // 10,000-subscriber realtime fan-out (perf).
    let rows_max = (MAX_BOUND.saturating_sub(fields) / (k + 1)).clamp(1, EACH_ROWS_MAX);
    let per_chunk = sets.len().next_power_of_two().min(rows_max);
    let mut next = fields;
    let rows = (0..per_chunk)
        .map(|_| {
            let cells = (0..=k)
                .map(|_| {
                    next += 1;
                    format!("?{next}")
                })
                .collect::<Vec<_>>()
                .join(", ");
            format!("({cells})")
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut sql = format!(
        "WITH {t} AS (SELECT {values}), {each}(`k`{columns}) AS (VALUES {rows}) \
         SELECT DISTINCT {each}.`k` FROM {each}, {t}{joins}"
    );
    if !where_sql.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&where_sql);
    }
    let mut stmt = conn.0.prepare_cached(&sql)?;
    let mut out = vec![false; sets.len()];
    if let Some(bad) = sets.iter().find(|s| s.len() != k) {
        return Err(StoreError::Invalid(format!(
            "a check bound {} values where its statement reads {k}",
            bad.len()
        )));
    }
    for (chunk_no, chunk) in sets.chunks(per_chunk).enumerate() {
        let first = chunk_no * per_chunk;
        let keys: Vec<i64> = (0..per_chunk)
            .map(|i| {
                if i < chunk.len() {
                    (first + i) as i64
                } else {
                    -1
                }
            })
            .collect();
        let mut params: Vec<&dyn ToSql> = row.iter().map(|p| p as &dyn ToSql).collect();
        for (i, key) in keys.iter().enumerate() {
            params.push(key);
            let set = chunk.get(i).unwrap_or(&chunk[0]);
            params.extend(set.iter().map(|p| p as &dyn ToSql));
        }
        let mut rows = stmt.query(params.as_slice())?;
        while let Some(r) = rows.next()? {
            let i: i64 = r.get(0)?;
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| out.get_mut(i)) {
                *slot = true;
            }
        }
    }
    Ok(out)
}

/// The subset of `ids` that exist in `c`.
pub(crate) fn existing_ids(
    conn: Conn<'_>,
    c: &Collection,
    ids: &[String],
) -> Result<HashSet<String>> {
    let conn = conn.0;
    let mut out = HashSet::new();
    let mut stmt = conn.prepare_cached(&format!("SELECT 1 FROM {} WHERE `id` = ?1", q(&c.name)))?;
    for id in ids {
        if stmt.exists([id])? {
            out.insert(id.clone());
        }
    }
    Ok(out)
}

/// Whether `id` names a record of an auth collection other than `c`.
///
/// Auth record ids are unique across every auth collection, as in PocketBase: rules compare
/// `@request.auth.id` alone (`owner = @request.auth.id`), so two auth records with one id would
/// let the second sign in as the first.
pub(crate) fn auth_id_taken(
    conn: Conn<'_>,
    schema: &Schema,
    c: &Collection,
    id: &str,
) -> Result<bool> {
    let conn = conn.0;
    for other in schema
        .collections
        .iter()
        .filter(|o| o.is_auth() && o.id != c.id)
    {
        let mut stmt =
            conn.prepare_cached(&format!("SELECT 1 FROM {} WHERE `id` = ?1", q(&other.name)))?;
        if stmt.exists([id])? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Insert one row. Every record insert passes here, so this is where an auth record's id is
/// checked against the other auth collections (inside the write's transaction, so no other
/// write can take the id in between).
pub(crate) fn insert(
    conn: Conn<'_>,
    schema: &Schema,
    c: &Collection,
    row: &[(usize, Stored)],
) -> Result<()> {
    let conn = conn.0;
    check_auth_id(conn, schema, c, row)?;
    let sql = insert_sql(c, row);
    let params: Vec<&dyn ToSql> = row.iter().map(|(_, v)| v as &dyn ToSql).collect();
    conn.prepare_cached(&sql)?
        .execute(params.as_slice())
        .map_err(StoreError::classify)?;
    drop_installer(conn, c, row)?;
    Ok(())
}

/// [`insert`], answering the row as stored (defaults filled, column affinities applied) from
/// the same statement, as a `get` after it would.
pub(crate) fn insert_returning(
    conn: Conn<'_>,
    schema: &Schema,
    c: &Collection,
    row: &[(usize, Stored)],
) -> Result<StoreRecord> {
    let conn = conn.0;
    check_auth_id(conn, schema, c, row)?;
    let mut sql = insert_sql(c, row);
    sql.push_str(" RETURNING ");
    push_columns(&mut sql, c);
    let params: Vec<&dyn ToSql> = row.iter().map(|(_, v)| v as &dyn ToSql).collect();
    let stored = conn
        .prepare_cached(&sql)?
        .query_row(params.as_slice(), |r| read_row(c, r))
        .map_err(StoreError::classify)?;
    drop_installer(conn, c, row)?;
    Ok(stored)
}

/// PocketBase's rule: the first real superuser ends the installer account.
fn drop_installer(conn: &Connection, c: &Collection, row: &[(usize, Stored)]) -> Result<()> {
    use super::superusers::INSTALLER_EMAIL;
    if c.id != crate::schema::SUPERUSERS_ID {
        return Ok(());
    }
    let email = row.iter().find_map(|(i, v)| match v {
        Stored::Text(t) if c.fields[*i].name == "email" => Some(t.as_str()),
        _ => None,
    });
    if email.is_some_and(|e| !e.eq_ignore_ascii_case(INSTALLER_EMAIL)) {
        conn.prepare_cached("DELETE FROM _superusers WHERE email = ?1")?
            .execute([INSTALLER_EMAIL])?;
    }
    Ok(())
}

/// An auth record's id must not be used by another auth collection's record.
fn check_auth_id(
    conn: &Connection,
    schema: &Schema,
    c: &Collection,
    row: &[(usize, Stored)],
) -> Result<()> {
    if c.is_auth() {
        let id = row
            .iter()
            .find(|(i, _)| c.fields[*i].name == "id")
            .and_then(|(_, v)| match v {
                Stored::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .ok_or_else(|| StoreError::Invalid("an auth record needs an id".into()))?;
        if auth_id_taken(super::Conn(conn), schema, c, id)? {
            return Err(StoreError::AuthIdTaken);
        }
    }
    Ok(())
}

/// `INSERT INTO <table> (<the row's columns>) VALUES (?, ...)`.
fn insert_sql(c: &Collection, row: &[(usize, Stored)]) -> String {
    let mut sql = String::with_capacity(32 * (row.len() + 1));
    sql.push_str("INSERT INTO ");
    push_qi(&mut sql, &c.name);
    sql.push_str(" (");
    for (n, (i, _)) in row.iter().enumerate() {
        if n > 0 {
            sql.push_str(", ");
        }
        push_qi(&mut sql, &c.fields[*i].name);
    }
    sql.push_str(") VALUES (");
    for n in 0..row.len() {
        sql.push_str(if n > 0 { ", ?" } else { "?" });
    }
    sql.push(')');
    sql
}

pub(crate) fn update(
    conn: Conn<'_>,
    c: &Collection,
    id: &str,
    row: &[(usize, Stored)],
) -> Result<()> {
    let conn = conn.0;
    if row.is_empty() {
        return Ok(());
    }
    let sets: Vec<String> = row
        .iter()
        .map(|(i, _)| format!("{} = ?", q(&c.fields[*i].name)))
        .collect();
    let sql = format!(
        "UPDATE {} SET {} WHERE `id` = ?",
        q(&c.name),
        sets.join(", ")
    );
    let mut params: Vec<&dyn ToSql> = row.iter().map(|(_, v)| v as &dyn ToSql).collect();
    params.push(&id);
    conn.prepare_cached(&sql)?
        .execute(params.as_slice())
        .map_err(StoreError::classify)?;
    if c.is_auth() {
        // PocketBase's guards against hijacking: a new tokenKey ends the record's OTPs, a new
        // password its MFA sessions and known sign-in origins.
        let written = |name: &str| {
            row.iter().any(|(i, v)| {
                c.fields[*i].name == name && matches!(v, Stored::Text(t) if !t.is_empty())
            })
        };
        if written("tokenKey") {
            forget_refs(conn, &["_otps"], &c.id, id)?;
        }
        if written("password") {
            forget_refs(conn, &["_mfas", "_authOrigins"], &c.id, id)?;
        }
    }
    Ok(())
}

/// Delete the rows of `table` (`_otps`, `_mfas`) of auth collection `collection_id` created
/// before `before` (a stored date): sessions past their duration. How many went.
pub(crate) fn delete_expired_refs(
    conn: Conn<'_>,
    table: &str,
    collection_id: &str,
    before: &str,
) -> Result<usize> {
    let sql = format!(
        "DELETE FROM {} WHERE `collectionRef` = ?1 AND `created` < ?2",
        q(table)
    );
    Ok(conn
        .0
        .prepare_cached(&sql)?
        .execute([collection_id, before])?)
}

/// Delete the rows of the system collections `tables` (`_otps`, `_mfas`, ...) that refer to
/// record `id` of collection `collection_id`.
fn forget_refs(conn: &Connection, tables: &[&str], collection_id: &str, id: &str) -> Result<()> {
    for t in tables {
        let sql = format!(
            "DELETE FROM {} WHERE `collectionRef` = ?1 AND `recordRef` = ?2",
            q(t)
        );
        conn.prepare_cached(&sql)?.execute([collection_id, id])?;
    }
    Ok(())
}

/// What a delete did to other records through their relations: a record deleted by a
/// cascade, or one whose reference was cleared (as it is after, then as it was before).
#[derive(Debug, Clone)]
pub(crate) enum Cascaded {
    Deleted(Arc<Collection>, StoreRecord),
    Updated(Arc<Collection>, StoreRecord, StoreRecord),
}

/// Delete a record and keep relations consistent the way PocketBase does: cascading relations
/// delete their records (recursively), required non-cascading ones refuse the delete, others
/// drop the id. Runs inside the caller's transaction.
pub(crate) fn delete(
    conn: Conn<'_>,
    schema: &Schema,
    c: &Collection,
    id: &str,
    depth: usize,
    mut trail: Option<&mut Vec<Cascaded>>,
) -> Result<()> {
    if depth > 32 {
        return Err(StoreError::Invalid("relation cascade is too deep".into()));
    }
    let db = conn.0;
    for other in schema.collections.iter().filter(|o| !o.is_view()) {
        for f in other
            .fields
            .iter()
            .filter(|f| f.kind == FieldType::Relation && f.opt_str("collectionId") == c.id)
        {
            let col = q(&f.name);
            let table = q(&other.name);
            let refs: Vec<String> = if f.is_multi() {
                let sql = format!(
                    "SELECT `id` FROM {table} WHERE EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid({col}) THEN {col} ELSE '[]' END) WHERE value = ?1)"
                );
                let mut stmt = db.prepare_cached(&sql)?;
                stmt.query_map([id], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?
            } else {
                let mut stmt =
                    db.prepare_cached(&format!("SELECT `id` FROM {table} WHERE {col} = ?1"))?;
                stmt.query_map([id], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?
            };
            for rid in refs {
                if other.id == c.id && rid == id {
                    continue;
                }
                // The record as it is now, for the trail (read only when someone keeps one).
                let before = match &trail {
                    Some(_) => get(conn, other, &rid, None)?,
                    None => None,
                };
                if f.opt_bool("cascadeDelete") {
                    delete(conn, schema, other, &rid, depth + 1, trail.as_deref_mut())?;
                    if let (Some(t), Some(row)) = (trail.as_deref_mut(), before) {
                        t.push(Cascaded::Deleted(Arc::clone(other), row));
                    }
                    continue;
                }
                if f.required {
                    return Err(StoreError::RequiredRelation);
                }
                if f.is_multi() {
                    let sql = format!(
                        "UPDATE {table} SET {col} = (SELECT json_group_array(value) FROM json_each({col}) WHERE value != ?1) WHERE `id` = ?2"
                    );
                    db.prepare_cached(&sql)?.execute([id, &rid])?;
                } else {
                    db.prepare_cached(&format!("UPDATE {table} SET {col} = '' WHERE `id` = ?1"))?
                        .execute([&rid])?;
                }
                if let (Some(t), Some(row)) = (trail.as_deref_mut(), before)
                    && let Some(after) = get(conn, other, &rid, None)?
                {
                    t.push(Cascaded::Updated(Arc::clone(other), after, row));
                }
            }
        }
    }
    db.prepare_cached(&format!("DELETE FROM {} WHERE `id` = ?1", q(&c.name)))?
        .execute([id])?;
    if c.is_auth() {
        // The record's sessions, codes, linked identities and origins go with it, as in
        // PocketBase.
        forget_refs(
            db,
            &["_mfas", "_otps", "_externalAuths", "_authOrigins"],
            &c.id,
            id,
        )?;
    }
    Ok(())
}

/// Every record of `c`, in storage order (a truncate's records as they were).
pub(crate) fn all(conn: Conn<'_>, c: &Collection) -> Result<Vec<StoreRecord>> {
    let sql = select_sql(c, "", "", "");
    let params: [&dyn ToSql; 2] = [&-1_i64, &0_i64];
    fetch(conn.0, c, &sql, &params)
}

/// The ids of every record of `c`, in storage order.
pub(crate) fn all_ids(conn: Conn<'_>, c: &Collection) -> Result<Vec<String>> {
    let mut stmt = conn
        .0
        .prepare(&format!("SELECT `id` FROM {}", q(&c.name)))?;
    let ids = stmt
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(ids)
}

/// Ids of `_collections` rows matching a filter compiled against the `_collections` pseudo-collection.
pub(crate) fn collection_ids(conn: Conn<'_>, sel: &Select) -> Result<Vec<String>> {
    let conn = conn.0;
    let mut sql = "SELECT `_collections`.`id` FROM `_collections`".to_owned();
    if !sel.where_sql.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&sel.where_sql);
    }
    sql.push_str(" ORDER BY ");
    sql.push_str(if sel.order_sql.is_empty() {
        "`_collections`.`rowid`"
    } else {
        &sel.order_sql
    });
    let params: Vec<&dyn ToSql> = sel.params.iter().map(|p| p as &dyn ToSql).collect();
    let mut stmt = conn.prepare(&sql)?;
    let ids = stmt
        .query_map(params.as_slice(), |r| r.get(0))?
        .collect::<rusqlite::Result<Vec<String>>>()?;
    Ok(ids)
}

/// The first record whose `field` equals `value` (identity lookups).
pub(crate) fn find_by(
    conn: Conn<'_>,
    c: &Collection,
    field: &str,
    value: &str,
) -> Result<Option<StoreRecord>> {
    let conn = conn.0;
    let sql = select_sql(c, "", &equal_to(c, field, value, ""), "");
    let params: [&dyn ToSql; 3] = [&value, &1_i64, &0_i64];
    Ok(fetch(conn, c, &sql, &params)?.into_iter().next())
}

/// `field = ?` (with `collate`), and, for a value that is not empty, `field != ''`: what it
/// implies, said so that SQLite may use PocketBase's partial unique indexes (`CREATE UNIQUE
/// INDEX ... (email) WHERE email != ''`); without it every sign-in scanned the whole table.
fn equal_to(c: &Collection, field: &str, value: &str, collate: &str) -> String {
    let col = format!("{}.{}", q(&c.name), q(field));
    if value.is_empty() {
        format!("{col} = ?{collate}")
    } else {
        format!("{col} = ?{collate} AND {col} != ''")
    }
}

/// The first record of `c` whose fields equal the given values, each exactly (PocketBase's
/// `_externalAuths` lookup by collection, provider and provider id).
pub(crate) fn find_by_all(
    conn: Conn<'_>,
    c: &Collection,
    equal: &[(&str, &str)],
) -> Result<Option<StoreRecord>> {
    let t = q(&c.name);
    let cond = equal
        .iter()
        .map(|(f, _)| format!("{t}.{} = ?", q(f)))
        .collect::<Vec<_>>()
        .join(" AND ");
    let sql = select_sql(c, "", &cond, "");
    let mut params: Vec<&dyn ToSql> = equal.iter().map(|(_, v)| v as &dyn ToSql).collect();
    params.push(&1_i64);
    params.push(&0_i64);
    Ok(fetch(conn.0, c, &sql, &params)?.into_iter().next())
}

/// The id of the first record of `c` whose file field `field` holds the file `name` (a view's
/// files are served from the folder of the record they came from).
pub(crate) fn id_by_file(
    conn: Conn<'_>,
    c: &Collection,
    field: &str,
    name: &str,
    multiple: bool,
) -> Result<Option<String>> {
    let (t, f) = (q(&c.name), q(field));
    let sql = if multiple {
        format!(
            "SELECT {t}.`id` FROM {t} INNER JOIN json_each(CASE WHEN json_valid({t}.{f}) THEN {t}.{f} ELSE json_array({t}.{f}) END) `__je_file` WHERE `__je_file`.`value` = ?1 LIMIT 1"
        )
    } else {
        format!("SELECT {t}.`id` FROM {t} WHERE {t}.{f} = ?1 LIMIT 1")
    };
    let mut stmt = conn.0.prepare_cached(&sql)?;
    let mut rows = stmt.query([name])?;
    Ok(match rows.next()? {
        Some(r) => Some(r.get(0)?),
        None => None,
    })
}

/// The auth record of `c` with this email, as PocketBase's `FindAuthRecordByEmail` finds it:
/// without case when the collection's unique email index is `COLLATE NOCASE`, exactly otherwise.
pub(crate) fn find_by_email(
    conn: Conn<'_>,
    c: &Collection,
    email: &str,
) -> Result<Option<StoreRecord>> {
    let nocase = c.indexes.iter().any(|ix| {
        let ix = ix.to_ascii_lowercase();
        ix.contains("unique") && ix.contains("email") && ix.contains("collate nocase")
    });
    let collate = if nocase { " COLLATE NOCASE" } else { "" };
    let sql = select_sql(c, "", &equal_to(c, "email", email, collate), "");
    let params: [&dyn ToSql; 3] = [&email, &1_i64, &0_i64];
    Ok(fetch(conn.0, c, &sql, &params)?.into_iter().next())
}

/// Every record of `c` (a system collection like `_otps`) whose `collectionRef` and
/// `recordRef` name `record_id` of `collection_id`, newest first.
pub(crate) fn find_by_record_ref(
    conn: Conn<'_>,
    c: &Collection,
    collection_id: &str,
    record_id: &str,
) -> Result<Vec<StoreRecord>> {
    let cond = format!(
        "{t}.{} = ? AND {t}.{} = ?",
        q("collectionRef"),
        q("recordRef"),
        t = q(&c.name)
    );
    let order = format!("{}.{} DESC", q(&c.name), q("created"));
    let sql = select_sql(c, "", &cond, &order);
    let params: [&dyn ToSql; 4] = [&collection_id, &record_id, &1000_i64, &0_i64];
    fetch(conn.0, c, &sql, &params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::SUPERUSERS_ID;
    use crate::store::{Store, StoreConfig};

    /// A sign-in's lookup by email (or another identity field) uses PocketBase's partial unique
    /// index (`WHERE email != ''`) instead of scanning every auth record.
    #[test]
    fn identity_lookups_use_the_partial_unique_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &crate::store::tests::cfg()).unwrap();
        let users = store.schema().by_name("users").unwrap().clone();
        let scanned = store
            .write_blocking(move |conn| {
                conn.execute_batch(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 300) \
                     INSERT INTO users (id, email, tokenKey, password) \
                     SELECT printf('u%014d', i), printf('u%d@x.test', i), printf('k%d', i), 'x' FROM n",
                )?;
                let found = find_by(Conn(conn), &users, "email", "u150@x.test")?;
                assert_eq!(
                    found.map(|r| users.stored_text(&r, "id").to_owned()),
                    Some("u00000000000150".to_owned())
                );
                let by_email = find_by_email(Conn(conn), &users, "u151@x.test")?;
                assert!(by_email.is_some());
                let mut scanned = Vec::new();
                for v in ["u150@x.test", "u151@x.test"] {
                    let sql = select_sql(&users, "", &equal_to(&users, "email", v, ""), "");
                    let stmt = conn.prepare_cached(&sql)?;
                    scanned.push(stmt.get_status(StatementStatus::FullscanStep));
                }
                Ok(scanned)
            })
            .unwrap();
        assert_eq!(scanned, [0, 0], "rows walked by a full scan");
    }

    #[test]
    fn expired_sessions_of_one_collection_are_deleted_and_an_auth_delete_takes_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            mmap_mib: 0,
            cache_size_kib: 1000,
            journal_size_limit: 1 << 20,
            wal_autocheckpoint: 1_000,
            busy_timeout_ms: 1000,
            n_readers: 1,
            synchronous: crate::config::Synchronous::Normal,
        };
        let store = Store::open(dir.path(), &cfg).unwrap();
        let schema = store.schema();
        let users = schema.by_name("users").unwrap().clone();
        let mfas = schema.by_name("_mfas").unwrap().clone();
        let left = store
            .write_blocking(move |conn| {
                let conn = crate::store::Conn(conn);
                let at = |c: &Collection, name: &str| {
                    c.fields.iter().position(|f| f.name == name).unwrap()
                };
                let mfa = |id: &str, coll: &str, rec: &str, created: &str| {
                    vec![
                        (at(&mfas, "id"), Stored::Text(id.into())),
                        (at(&mfas, "collectionRef"), Stored::Text(coll.into())),
                        (at(&mfas, "recordRef"), Stored::Text(rec.into())),
                        (at(&mfas, "method"), Stored::Text("password".into())),
                        (at(&mfas, "created"), Stored::Text(created.into())),
                    ]
                };
                insert(
                    conn,
                    &schema,
                    &users,
                    &[(at(&users, "id"), Stored::Text("u00000000000001".into()))],
                )?;
                insert(
                    conn,
                    &schema,
                    &mfas,
                    &mfa("m1", "_pb_users_auth_", "u1", "2026-01-01 09:00:00.000Z"),
                )?;
                insert(
                    conn,
                    &schema,
                    &mfas,
                    &mfa("m2", "_pb_users_auth_", "u1", "2026-01-01 11:00:00.000Z"),
                )?;
                insert(
                    conn,
                    &schema,
                    &mfas,
                    &mfa("m3", "other", "u1", "2026-01-01 09:00:00.000Z"),
                )?;
                insert(
                    conn,
                    &schema,
                    &mfas,
                    &mfa(
                        "m4",
                        "_pb_users_auth_",
                        "u00000000000001",
                        "2026-01-01 11:00:00.000Z",
                    ),
                )?;
                let gone = delete_expired_refs(
                    conn,
                    "_mfas",
                    "_pb_users_auth_",
                    "2026-01-01 10:00:00.000Z",
                )?;
                delete(conn, &schema, &users, "u00000000000001", 0, None)?;
                let ids = ["m1", "m2", "m3", "m4"]
                    .into_iter()
                    .filter(|id| get(conn, &mfas, id, None).unwrap().is_some())
                    .collect::<Vec<_>>();
                Ok((gone, ids))
            })
            .unwrap();
        assert_eq!(left, (1, vec!["m2", "m3"]));
    }

    #[test]
    fn an_auth_record_id_taken_by_another_auth_collection_is_refused_on_every_insert() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            mmap_mib: 0,
            cache_size_kib: 1000,
            journal_size_limit: 1 << 20,
            wal_autocheckpoint: 1_000,
            busy_timeout_ms: 1000,
            n_readers: 1,
            synchronous: crate::config::Synchronous::Normal,
        };
        let store = Store::open(dir.path(), &cfg).unwrap();
        let schema = store.schema();
        let users = schema.by_name("users").unwrap().clone();
        let su = schema.by_id(SUPERUSERS_ID).unwrap().clone();
        let mfas = schema.by_name("_mfas").unwrap().clone();
        let row = |c: &Collection, id: &str| {
            vec![(
                c.fields.iter().position(|f| f.name == "id").unwrap(),
                Stored::Text(id.into()),
            )]
        };
        let outcome = store
            .write_blocking(move |conn| {
                let conn = crate::store::Conn(conn);
                insert(conn, &schema, &users, &row(&users, "victim000000001"))?;
                let taken = insert(conn, &schema, &su, &row(&su, "victim000000001"));
                // A base collection may reuse the id: only auth ids name a caller.
                let base = insert(conn, &schema, &mfas, &row(&mfas, "victim000000001"));
                let fresh = insert(conn, &schema, &su, &row(&su, "other0000000001"));
                Ok((
                    matches!(taken, Err(StoreError::AuthIdTaken)),
                    base.is_ok(),
                    fresh.is_ok(),
                ))
            })
            .unwrap();
        assert_eq!(outcome, (true, true, true));
        store.close();
    }

    /// `row_matches_each` answers, for every set of bound values, what `row_matches` answers for
    /// that set alone: generated conditions (placeholders in the join and the WHERE, repeated,
    /// compared with text, numbers and NULL), generated rows and value sets, more sets than fit
    /// one statement.
    #[test]
    fn one_statement_for_many_value_sets_answers_as_each_set_alone() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = StoreConfig {
            mmap_mib: 0,
            cache_size_kib: 1000,
            journal_size_limit: 1 << 20,
            wal_autocheckpoint: 1_000,
            busy_timeout_ms: 1000,
            n_readers: 1,
            synchronous: crate::config::Synchronous::Normal,
        };
        let store = Store::open(dir.path(), &cfg).unwrap();
        let mut users = store.schema().by_name("users").unwrap().as_ref().clone();
        users.name = "users:change".into();
        let t = q(&users.name);
        let templates: [(&str, String, usize); 5] = [
            ("", format!("({t}.`id` = ?1 OR {t}.`verified` = ?2)"), 2),
            (
                "",
                format!("{t}.`email` LIKE ?1 || '%' AND ?2 > 3 AND {t}.`name` = ?1"),
                2,
            ),
            (
                " LEFT JOIN `_superusers` `su` ON `su`.`id` = ?2",
                format!("({t}.`id` = ?1 OR `su`.`id` IS NOT NULL) AND ?3 IS NULL"),
                3,
            ),
            (
                "",
                format!("{t}.`emailVisibility` = ?1 OR ?1 = ?2 OR ?3 = {t}.`name`"),
                3,
            ),
            ("", format!("coalesce(?1, '') = {t}.`id`"), 1),
        ];
        let mut next = crate::test_numbers(0x9e37_79b9_u64);
        let value = |next: &mut dyn FnMut(u64) -> u64| match next(6) {
            0 => Stored::Null,
            1 => Stored::Int(next(6) as i64),
            2 => Stored::Real(next(6) as f64),
            3 => Stored::Text(format!("u{}", next(3))),
            4 => Stored::Text("%".into()),
            _ => Stored::Text(next(3).to_string()),
        };
        let mut admitted = [0; 5];
        for round in 0..40 {
            let (joins, where_sql, k) = &templates[round % templates.len()];
            let sel = Select {
                joins: joins.to_string(),
                where_sql: where_sql.clone(),
                params: vec![Stored::Null; *k],
                ..Select::default()
            };
            let row: Vec<Stored> = users
                .fields
                .iter()
                .map(|f| match f.name.as_str() {
                    "id" | "name" => Stored::Text(format!("u{}", next(3))),
                    "verified" | "emailVisibility" => Stored::Int(next(2) as i64),
                    "email" => Stored::Text(format!("u{}@x.io", next(3))),
                    _ => Stored::Null,
                })
                .collect();
            // Past one statement's worth of bound values in one round in ten.
            let n = if round % 10 == 3 {
                9_000
            } else {
                1 + next(40) as usize
            };
            let sets: Vec<Vec<Stored>> = (0..n)
                .map(|_| (0..*k).map(|_| value(&mut next)).collect())
                .collect();
            let (users, sel) = (users.clone(), sel.clone());
            let (each, alone) = store
                .write_blocking(move |conn| {
                    let conn = crate::store::Conn(conn);
                    let refs: Vec<&[Stored]> = sets.iter().map(Vec::as_slice).collect();
                    let each = row_matches_each(conn, &users, &row, &sel, &refs)?;
                    let mut alone = Vec::new();
                    for set in &refs {
                        let one = Select {
                            params: set.to_vec(),
                            ..sel.clone()
                        };
                        alone.push(row_matches(conn, &users, &row, &one)?);
                    }
                    Ok((each, alone))
                })
                .unwrap();
            assert_eq!(each, alone, "round {round}: {where_sql}");
            admitted[round % templates.len()] += alone.iter().filter(|a| **a).count();
        }
        // Every condition admits some sets: the comparison is not between two empty answers.
        assert!(admitted.iter().all(|n| *n > 0), "{admitted:?}");
        store.close();
    }
}
