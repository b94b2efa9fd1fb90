//! Record reads: the list statement (rule, filter, sort), a page with its total, one record,
//! and the expansions of either, each under the caller's rules.

use super::advice::Watch;
use super::expand::{ExpandCtx, ExpandPaths, expand_rows};
use super::{Access, Action, Gate, RecordError, Result, gate};
use crate::query::{self, Query, RequestInfo, Select};
use crate::schema::value::Stored;
use crate::schema::{Collection, Schema};
use crate::store::records::ScanCost;
use crate::store::{Conn, Store, StoreRecord, records as store_records};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// One row's expansions (None: no path could be expanded, so no `expand` key).
pub(crate) type Expanded = Option<Map<String, Value>>;

/// A page of a list.
pub(crate) struct Page {
    pub rows: Vec<StoreRecord>,
    pub expanded: Vec<Expanded>,
    /// The number of matches; -1 when the client skipped it.
    pub total: i64,
    /// The rows whose email the caller sees through the collection's `manageRule`.
    pub managed: Option<HashSet<String>>,
}

/// The statement of `c`'s `manageRule` for this caller, when it decides whose email the caller
/// sees: an auth collection with a rule that is not blank, and a caller who is not a superuser
/// (superusers see every email). PocketBase checks it on every answer carrying such records,
/// for guests too (a rule need not read `@request.auth`). A rule that does not compile shows
/// nothing more.
pub(crate) fn manage_select(schema: &Schema, c: &Collection, info: &RequestInfo) -> Option<Select> {
    if info.is_superuser {
        return None;
    }
    let rule = super::manage_rule_text(c)?;
    query::compile_rule(schema, c, rule, info).ok()
}

/// The ids among `rows` (records of `c`) for which `manage` (from [`manage_select`]) holds.
pub(crate) fn managed_ids(
    conn: Conn<'_>,
    c: &Collection,
    manage: &Select,
    rows: &[StoreRecord],
) -> crate::store::Result<HashSet<String>> {
    let ids: Vec<&str> = rows.iter().map(|r| c.stored_text(r, "id")).collect();
    let mut out = HashSet::new();
    for chunk in ids.chunks(MANAGED_BATCH) {
        let mut sel = manage.clone();
        let cond = query::keys_condition(&c.name, "id", false, chunk.len());
        sel.where_sql = if sel.where_sql.is_empty() {
            cond
        } else {
            format!("({}) AND {cond}", sel.where_sql)
        };
        sel.params
            .extend(chunk.iter().map(|id| Stored::Text((*id).to_owned())));
        for r in store_records::list(conn, c, &sel, -1, 0)? {
            out.insert(c.stored_text(&r, "id").to_owned());
        }
    }
    Ok(out)
}

/// Ids per `IN (...)` of [`managed_ids`].
const MANAGED_BATCH: usize = 500;

/// The list statement for `access`: the list rule (a `null` rule is superusers only), then the
/// client's filter and sort. A client's filter or sort may not name `@collection.` or
/// `@request.` (superusers aside): that is checked on the raw texts first, as PocketBase does,
/// so it answers 403 even where the rest would not parse.
pub(crate) fn list_select(
    schema: &Schema,
    c: &Collection,
    access: &Access<'_>,
    filter: Option<&str>,
    sort: Option<&str>,
) -> Result<Select> {
    let rule = match gate(c, Action::List, access) {
        Gate::SuperusersOnly => return Err(RecordError::SuperusersOnly),
        Gate::Open => None,
        Gate::Rule(r) => Some(r),
    };
    if !access.is_superuser() {
        query::forbid_client_refs(filter, sort)?;
    }
    let mut q = Query::new(schema, c, access.info());
    if let Some(r) = rule {
        q.rule(r)?;
    }
    if let Some(f) = filter {
        q.filter(f)?;
    }
    if let Some(s) = sort {
        q.sort(s)?;
    }
    Ok(q.finish())
}

/// The expansions a request asks for, and the context they run in (`@request.context` is
/// "expand" for the related records' view rules).
pub(crate) fn expanding(
    schema: &Arc<Schema>,
    access: &Access<'_>,
    raw: Option<&str>,
) -> Option<(ExpandPaths, ExpandCtx)> {
    let paths = ExpandPaths::parse(raw)?;
    let mut info = access.info().clone();
    info.context = "expand".into();
    Some((
        paths,
        ExpandCtx {
            schema: Arc::clone(schema),
            req: info,
            viewer: access.viewer(),
        },
    ))
}

fn run_expand(
    conn: Conn<'_>,
    c: &Arc<Collection>,
    rows: &[StoreRecord],
    expand: Option<&(ExpandPaths, ExpandCtx)>,
) -> crate::store::Result<Vec<Expanded>> {
    match expand {
        Some((paths, ctx)) => expand_rows(conn, ctx, c, rows, paths),
        None => Ok(vec![None; rows.len()]),
    }
}

/// A page of `sel` and (unless `skip_total`) its total, with the rows' expansions: one read
/// transaction, so all of it sees one snapshot. With a `watch`, a page whose statements scanned
/// past the advisor's threshold is recorded there (see `advice`); under it, the cost is one
/// comparison of counters SQLite kept anyway.
#[allow(
    clippy::too_many_arguments,
    reason = "the list's parts, each from its own place in the request"
)]
pub(crate) async fn page(
    store: &Store,
    c: &Arc<Collection>,
    sel: Select,
    (page, per_page): (i64, i64),
    skip_total: bool,
    expand: Option<(ExpandPaths, ExpandCtx)>,
    manage: Option<Select>,
    watch: Option<Watch<'_>>,
) -> Result<Page> {
    let started = Instant::now();
    let mut cost = ScanCost::default();
    let found = store
        .read_snapshot(|conn| {
            // Before the transaction reads anything (see `store::Carried`).
            let before = store.changes().stamp();
            let offset = (page - 1) * per_page;
            let (rows, total) = if skip_total {
                let rows = store_records::list_costed(conn, c, &sel, per_page, offset, &mut cost)?;
                (rows, -1)
            } else {
                store_records::page_and_total(
                    conn,
                    c,
                    &sel,
                    (per_page, offset),
                    &mut cost,
                    Some((store.carried(), before)),
                )?
            };
            let expanded = run_expand(conn, c, &rows, expand.as_ref())?;
            let managed = match &manage {
                Some(m) if !rows.is_empty() => Some(managed_ids(conn, c, m, &rows)?),
                _ => None,
            };
            Ok(Page {
                rows,
                expanded,
                total,
                managed,
            })
        })
        .await?;
    if let Some(w) = watch
        && w.advisor.over(&cost)
    {
        let took = started.elapsed();
        w.advisor.record(store, c, w, &sel, cost, took).await;
    }
    Ok(found)
}

/// One record passing `rule` (the caller's view rule, as a condition), with its expansions,
/// and whether `manage` (from [`manage_select`]) holds for it. With `rowid`, also the row's
/// rowid (read first: a row deleted and made again under the same id meanwhile leaves the old
/// rowid, whose delete tells a cache the answer is stale).
pub(crate) async fn view(
    store: &Store,
    c: &Arc<Collection>,
    id: String,
    rule: Option<Select>,
    expand: Option<(ExpandPaths, ExpandCtx)>,
    manage: Option<Select>,
    rowid: bool,
) -> Result<(StoreRecord, Expanded, bool, Option<i64>)> {
    store
        .read(|conn| {
            let rowid = match rowid {
                true => store_records::rowid_of(conn, c, &id)?,
                false => None,
            };
            let Some(row) = store_records::get(conn, c, &id, rule.as_ref())? else {
                return Ok(None);
            };
            let rows = vec![row];
            let e = run_expand(conn, c, &rows, expand.as_ref())?;
            let managed = match &manage {
                Some(m) => !managed_ids(conn, c, m, &rows)?.is_empty(),
                None => false,
            };
            Ok(rows
                .into_iter()
                .zip(e)
                .next()
                .map(|(r, e)| (r, e, managed, rowid)))
        })
        .await?
        .ok_or(RecordError::NotFound)
}

/// The collection and record whose folder holds a view's file `name` of its file field
/// `field`: the view's source collection (see `schema::view::file_source`) and the first of its
/// records holding that file, as PocketBase looks it up.
pub(crate) async fn view_file_origin(
    store: &Store,
    schema: &Schema,
    view: &Collection,
    field: &str,
    name: &str,
) -> Result<(Arc<Collection>, String)> {
    let (source, original) =
        crate::schema::view::file_source(schema, view, field).ok_or(RecordError::NotFound)?;
    let multiple = source.field(&original).is_some_and(|f| f.is_multi());
    let (c, name) = (Arc::clone(&source), name.to_owned());
    let id = store
        .read(move |conn| store_records::id_by_file(conn, &c, &original, &name, multiple))
        .await?
        .ok_or(RecordError::NotFound)?;
    Ok((source, id))
}

/// A record just written, with the expansions its response asks for.
pub(crate) async fn expand_written(
    store: &Store,
    c: &Arc<Collection>,
    row: StoreRecord,
    expand: Option<(ExpandPaths, ExpandCtx)>,
) -> Result<(StoreRecord, Expanded)> {
    let Some(e) = expand else {
        return Ok((row, None));
    };
    store
        .read(|conn| {
            let rows = vec![row];
            let x = run_expand(conn, c, &rows, Some(&e))?;
            Ok(rows.into_iter().zip(x).next())
        })
        .await?
        .ok_or(RecordError::NotFound)
}

/// Who sees a record just written: the caller, plus its email when the auth collection's
/// `manageRule` holds for the stored record (PocketBase checks it when it shapes the answer,
/// for any caller, guests included: a rule that reads only `@request.body` can hold for one).
/// `access` carries the write's body.
pub(crate) async fn viewer_for_written(
    store: &Store,
    c: &Collection,
    access: &Access<'_>,
    row: &StoreRecord,
) -> super::json::Viewer {
    let mut viewer = access.viewer();
    if viewer.superuser {
        return viewer;
    }
    let Some(rule) = super::manage_rule_text(c) else {
        return viewer;
    };
    let Ok(sel) = query::compile_rule(&store.schema(), c, rule, access.info()) else {
        return viewer;
    };
    let id = c.stored_text(row, "id").to_owned();
    viewer.owner_view = matches!(
        store
            .read(|conn| store_records::get(conn, c, &id, Some(&sel)))
            .await,
        Ok(Some(_))
    );
    viewer
}
