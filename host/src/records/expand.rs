//! `?expand=`: related records fetched in batches (one query per relation path and level, never
//! one per row), each filtered by its own collection's viewRule, nested up to 6 levels.
//!
//! PocketBase's behaviour, kept here: the paths are normalised (spaces removed, dots trimmed,
//! a path that prefixes another dropped) and expanded one after the other, each merged into
//! what the earlier ones expanded. A path expands all or nothing: a step that cannot be expanded
//! (an unknown name, not a relation, a collection whose viewRule is `null` for this caller)
//! fails the whole path, silently. A step past the sixth level is ignored (the levels above it
//! stay). Every record of a level a path expands gets an `expand` object, `{}` when nothing was
//! found for it; related records the caller may not view are left out. Back-relations are
//! written `<collection>_via_<field>`, or in the older `<collection>(<field>)` form, and are
//! keyed as written.

use super::json::{Viewer, record_json};
use crate::query::{Query, RequestInfo, back_relation, keys_condition};
use crate::schema::value::Stored;
use crate::schema::{Collection, FieldType, Schema};
use crate::store::{Conn, StoreRecord, records as store_records};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// Levels of nesting PocketBase follows.
const MAX_DEPTH: usize = 6;
/// Records one back-relation contributes to one record.
const BACK_RELATION_LIMIT: usize = 1000;
/// Ids per `IN (...)` batch.
const BATCH: usize = 500;

/// The older back-relation form, `comments(post)` (Go's `\w` is ASCII).
static OLD_BACK_RELATION: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r"^([A-Za-z0-9_]+)\(([A-Za-z0-9_]+)\)$").expect("static regex")
});

/// The parsed `expand` parameter: PocketBase's normalised paths, in request order.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExpandPaths(Vec<String>);

impl ExpandPaths {
    /// None when the parameter is absent or names nothing.
    pub(crate) fn parse(raw: Option<&str>) -> Option<Self> {
        let cleaned: Vec<String> = raw?
            .split(',')
            .map(|p| p.replace(' ', "").trim_matches('.').to_owned())
            .filter(|p| !p.is_empty())
            .collect();
        // A path that another one extends is expanded by that one.
        let mut paths: Vec<String> = Vec::new();
        for (i, p) in cleaned.iter().enumerate() {
            let prefix = format!("{p}.");
            let extended = cleaned
                .iter()
                .enumerate()
                .any(|(j, q)| i != j && q.starts_with(&prefix));
            if !extended && !paths.contains(p) {
                paths.push(p.clone());
            }
        }
        (!paths.is_empty()).then_some(Self(paths))
    }
}

/// Who is expanding: rules see `@request.context = "expand"`.
pub(crate) struct ExpandCtx {
    pub schema: Arc<Schema>,
    pub req: RequestInfo,
    pub viewer: Viewer,
}

type ExpandMap = Map<String, Value>;

/// Why a path expands nothing (PocketBase drops the path and answers anyway).
enum Skip {
    Path,
    Store(crate::store::StoreError),
}

impl From<crate::store::StoreError> for Skip {
    fn from(e: crate::store::StoreError) -> Self {
        Skip::Store(e)
    }
}

/// The `expand` object of each row (None: no path expanded it, so no `expand` key).
pub(crate) fn expand_rows(
    conn: Conn<'_>,
    ctx: &ExpandCtx,
    coll: &Arc<Collection>,
    rows: &[StoreRecord],
    paths: &ExpandPaths,
) -> crate::store::Result<Vec<Option<ExpandMap>>> {
    let mut out: Vec<Option<ExpandMap>> = vec![None; rows.len()];
    for path in &paths.0 {
        let segments: Vec<&str> = path.split('.').collect();
        match level(conn, ctx, coll, rows, &segments, 1) {
            Ok(Some(maps)) => {
                for (slot, new) in out.iter_mut().zip(maps) {
                    let merged = slot.get_or_insert_with(Map::new);
                    merge_level(merged, new);
                }
            }
            Ok(None) | Err(Skip::Path) => {}
            Err(Skip::Store(e)) => return Err(e),
        }
    }
    Ok(out)
}

/// What one name refers to.
enum Relation {
    /// A relation field of the current collection.
    Direct {
        index: usize,
        target: Arc<Collection>,
        multi: bool,
    },
    /// Records of `source` whose `field` points here.
    Back {
        source: Arc<Collection>,
        field: String,
        field_multi: bool,
        /// A non-multi field with a single-column UNIQUE index expands to one object.
        single: bool,
    },
}

fn resolve(schema: &Schema, coll: &Collection, name: &str) -> Option<Relation> {
    let back = if let Some(m) = OLD_BACK_RELATION.captures(name) {
        Some(format!("{}_via_{}", &m[1], &m[2]))
    } else if name.contains('(') {
        return None;
    } else {
        name.contains("_via_").then(|| name.to_owned())
    };
    if let Some(via) = back {
        let b = back_relation(schema, coll, &via).ok()?;
        // PocketBase wants the field to point at this collection by id.
        if b.source.fields[b.field].opt_str("collectionId") != coll.id {
            return None;
        }
        return Some(Relation::Back {
            field: b.source.fields[b.field].name.clone(),
            field_multi: b.multi,
            single: b.unique,
            source: b.source,
        });
    }
    let index = coll.fields.iter().position(|f| f.name == name)?;
    let f = &coll.fields[index];
    if f.kind != FieldType::Relation {
        return None;
    }
    let target = schema.by_id_or_name(f.opt_str("collectionId"))?.clone();
    Some(Relation::Direct {
        index,
        target,
        multi: f.is_multi(),
    })
}

/// The viewRule of `target` as a query, or None when this caller may not view it at all.
fn view_query<'a>(ctx: &'a ExpandCtx, target: &Collection) -> Option<Query<'a>> {
    let mut q = Query::new(&ctx.schema, target, &ctx.req);
    if !ctx.req.is_superuser {
        match &target.rules.view {
            None => return None,
            Some(rule) => q.rule(rule).ok()?,
        }
    }
    Some(q)
}

fn text_values(v: &Stored) -> Vec<String> {
    match v {
        Stored::Text(t) if t.starts_with('[') => {
            serde_json::from_str::<Vec<String>>(t).unwrap_or_default()
        }
        Stored::Text(t) if !t.is_empty() => vec![t.clone()],
        _ => Vec::new(),
    }
}

fn id_of(c: &Collection, row: &StoreRecord) -> String {
    c.stored_text(row, "id").to_owned()
}

/// Rows of `target` passing `q` whose `column` (or, for multi fields, one of its items) is in
/// `keys`; in rowid order.
fn fetch(
    conn: Conn<'_>,
    target: &Collection,
    q: Query<'_>,
    column: &str,
    multi: bool,
    keys: &[String],
) -> crate::store::Result<Vec<StoreRecord>> {
    let base = q.finish();
    let mut out = Vec::new();
    for chunk in keys.chunks(BATCH) {
        let mut sel = base.clone();
        let cond = keys_condition(&target.name, column, multi, chunk.len());
        sel.where_sql = if sel.where_sql.is_empty() {
            cond
        } else {
            format!("({}) AND {cond}", sel.where_sql)
        };
        sel.params
            .extend(chunk.iter().map(|k| Stored::Text(k.clone())));
        out.extend(store_records::list(conn, target, &sel, -1, 0)?);
    }
    Ok(out)
}

/// Expand the path `segments` on `rows` (all of `coll`): each row's expand entries at this
/// level; None when the level is past the limit (nothing set, nothing failed).
fn level(
    conn: Conn<'_>,
    ctx: &ExpandCtx,
    coll: &Arc<Collection>,
    rows: &[StoreRecord],
    segments: &[&str],
    depth: usize,
) -> Result<Option<Vec<ExpandMap>>, Skip> {
    let Some((name, rest)) = segments.split_first() else {
        return Ok(None);
    };
    if depth > MAX_DEPTH || rows.is_empty() {
        return Ok(None);
    }
    let rel = resolve(&ctx.schema, coll, name).ok_or(Skip::Path)?;
    // The related ids of each row, in PocketBase's order.
    let per_row: Vec<Vec<String>> = match &rel {
        Relation::Direct { index, .. } => rows.iter().map(|r| text_values(&r[*index])).collect(),
        Relation::Back {
            source,
            field,
            field_multi,
            ..
        } => {
            // Which records point at each row (no rule here: the records are checked below).
            let ids: Vec<String> = rows.iter().map(|r| id_of(coll, r)).collect();
            let pointing = fetch(
                conn,
                source,
                Query::new(&ctx.schema, source, &ctx.req),
                field,
                *field_multi,
                &ids,
            )?;
            let fi = source.fields.iter().position(|f| &f.name == field);
            let links: Vec<(String, Vec<String>)> = pointing
                .iter()
                .map(|p| {
                    (
                        id_of(source, p),
                        fi.map(|i| text_values(&p[i])).unwrap_or_default(),
                    )
                })
                .collect();
            ids.iter()
                .map(|me| {
                    links
                        .iter()
                        .filter(|(_, to)| to.contains(me))
                        .take(BACK_RELATION_LIMIT)
                        .map(|(id, _)| id.clone())
                        .collect()
                })
                .collect()
        }
    };
    let (target, multi) = match &rel {
        Relation::Direct { target, multi, .. } => (Arc::clone(target), *multi),
        Relation::Back { source, single, .. } => (Arc::clone(source), !single),
    };
    let q = view_query(ctx, &target).ok_or(Skip::Path)?;
    let mut all: Vec<String> = Vec::new();
    for id in per_row.iter().flatten() {
        if !all.contains(id) {
            all.push(id.clone());
        }
    }
    let related = if all.is_empty() {
        Vec::new()
    } else {
        fetch(conn, &target, q, "id", false, &all)?
    };
    let nested = if rest.is_empty() {
        None
    } else {
        level(conn, ctx, &target, &related, rest, depth + 1)?
    };
    // Auth records show their email to the caller who manages them, as in any answer.
    let managing = match super::read::manage_select(&ctx.schema, &target, &ctx.req) {
        Some(m) if !related.is_empty() => {
            let ids = super::read::managed_ids(conn, &target, &m, &related)?;
            Some(Viewer {
                managed: Some(Arc::new(ids)),
                ..ctx.viewer.clone()
            })
        }
        _ => None,
    };
    let viewer = managing.as_ref().unwrap_or(&ctx.viewer);
    // The related records as JSON, with their own expansions.
    let mut docs: HashMap<String, Value> = HashMap::with_capacity(related.len());
    let mut nested = nested.map(Vec::into_iter);
    for row in related {
        let id = id_of(&target, &row);
        let mut m = record_json(&target, row, viewer);
        if let Some(e) = nested.as_mut().and_then(Iterator::next) {
            m.insert("expand".into(), Value::Object(e));
        }
        docs.insert(id, Value::Object(m));
    }
    let maps = per_row
        .iter()
        .map(|ids| {
            let mut m = Map::new();
            let found: Vec<Value> = ids.iter().filter_map(|id| docs.get(id).cloned()).collect();
            if !found.is_empty() {
                let v = if multi {
                    Value::Array(found)
                } else {
                    found.into_iter().next().unwrap_or(Value::Null)
                };
                m.insert((*name).to_owned(), v);
            }
            m
        })
        .collect();
    Ok(Some(maps))
}

/// A row's expansions from one more path, set over what earlier paths expanded: an entry this
/// path expands again replaces the earlier one, with the earlier records' own expansions merged
/// into the records of the same id.
fn merge_level(into: &mut ExpandMap, new: ExpandMap) {
    for (k, mut v) in new {
        if let Some(old) = into.get(&k) {
            let old_items: Vec<&Value> = match old {
                Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            let mut targets: Vec<&mut Value> = match &mut v {
                Value::Array(a) => a.iter_mut().collect(),
                other => vec![other],
            };
            for t in targets.iter_mut() {
                if let Some(o) = old_items.iter().find(|o| o.get("id") == t.get("id"))
                    && let Some(Value::Object(oe)) = o.get("expand")
                {
                    merge_into_record(t, oe);
                }
            }
        }
        into.insert(k, v);
    }
}

/// PocketBase's `MergeExpand`: `other`'s expansions merged into `record`'s (lists joined by id,
/// records of the same id merged in turn).
fn merge_into_record(record: &mut Value, other: &ExpandMap) {
    if other.is_empty() {
        return;
    }
    let Value::Object(rec) = record else { return };
    let Some(Value::Object(mine)) = rec.get_mut("expand") else {
        rec.insert("expand".into(), Value::Object(other.clone()));
        return;
    };
    for (k, theirs) in other {
        let Some(current) = mine.get_mut(k) else {
            mine.insert(k.clone(), theirs.clone());
            continue;
        };
        let was_list = current.is_array() || theirs.is_array();
        let mut list: Vec<Value> = match std::mem::take(current) {
            Value::Array(a) => a,
            v => vec![v],
        };
        let their_items: Vec<&Value> = match theirs {
            Value::Array(a) => a.iter().collect(),
            v => vec![v],
        };
        for t in their_items {
            match list.iter_mut().find(|m| m.get("id") == t.get("id")) {
                Some(m) => {
                    if let Some(Value::Object(te)) = t.get("expand") {
                        merge_into_record(m, te);
                    }
                }
                None => list.push(t.clone()),
            }
        }
        *current = if was_list || list.is_empty() {
            Value::Array(list)
        } else {
            list.swap_remove(0)
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_normalised_as_pocketbase_does() {
        let p = ExpandPaths::parse(Some(" a , b . c ,,a.,.d,b")).unwrap();
        assert_eq!(p.0, vec!["a", "b.c", "d"]);
        assert!(ExpandPaths::parse(Some(" , .")).is_none());
        assert!(ExpandPaths::parse(None).is_none());
    }
}
