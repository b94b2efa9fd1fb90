//! `?expand=`: related records fetched in batches (one query per relation path and level, never
//! one per row), each filtered by its own collection's viewRule, nested up to 6 levels.
//!
//! PocketBase's behaviour, kept here: a path that cannot be expanded (unknown name, not a
//! relation, a collection whose viewRule is `null` for this caller, a failing nested step) is
//! skipped silently; a path that can be expanded sets `expand` on every record (`{}` when it
//! found nothing); related records the caller may not view are left out.

use super::json::{Viewer, record_json};
use crate::query::{Query, RequestInfo, back_relation, keys_condition};
use crate::schema::value::Stored;
use crate::schema::{Collection, FieldType, Schema};
use crate::store::{Conn, StoreRecord, records as store_records};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Levels of nesting PocketBase follows.
const MAX_DEPTH: usize = 6;
/// Records one back-relation contributes to one record.
const BACK_RELATION_LIMIT: usize = 1000;
/// Ids per `IN (...)` batch.
const BATCH: usize = 500;

/// The parsed `expand` parameter: dot paths, in request order.
#[derive(Debug, Clone, Default)]
pub(crate) struct ExpandPaths(Vec<Vec<String>>);

impl ExpandPaths {
    /// None when the parameter is absent or names nothing.
    pub(crate) fn parse(raw: Option<&str>) -> Option<Self> {
        let paths: Vec<Vec<String>> = raw?
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(|p| p.split('.').map(|s| s.trim().to_owned()).collect())
            .collect();
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

/// The `expand` object of each row (None: no path could be expanded, so no `expand` key).
pub(crate) fn expand_rows(
    conn: Conn<'_>,
    ctx: &ExpandCtx,
    coll: &Arc<Collection>,
    rows: &[StoreRecord],
    paths: &ExpandPaths,
) -> crate::store::Result<Vec<Option<ExpandMap>>> {
    let refs: Vec<&[String]> = paths.0.iter().map(Vec::as_slice).collect();
    Ok(level(conn, ctx, coll, rows, &refs, 1)?.0)
}

/// What one root name refers to.
enum Relation {
    /// A relation field of the current collection.
    Direct {
        index: usize,
        target: Arc<Collection>,
        multi: bool,
    },
    /// `<collection>_via_<field>`: records of `source` whose `field` points here.
    Back {
        source: Arc<Collection>,
        field: String,
        field_multi: bool,
        /// A non-multi field with a single-column UNIQUE index expands to one object.
        single: bool,
    },
}

fn resolve(schema: &Schema, coll: &Collection, name: &str) -> Option<Relation> {
    if let Some(index) = coll.fields.iter().position(|f| f.name == name) {
        let f = &coll.fields[index];
        if f.kind != FieldType::Relation {
            return None;
        }
        let target = schema.by_id_or_name(f.opt_str("collectionId"))?.clone();
        return Some(Relation::Direct {
            index,
            target,
            multi: f.is_multi(),
        });
    }
    let back = back_relation(schema, coll, name).ok()?;
    Some(Relation::Back {
        field: back.source.fields[back.field].name.clone(),
        field_multi: back.multi,
        single: !back.multi && back.unique,
        source: back.source,
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

/// Expand `paths` on `rows` (all of `coll`). Returns each row's expand map and how many paths
/// succeeded.
fn level(
    conn: Conn<'_>,
    ctx: &ExpandCtx,
    coll: &Arc<Collection>,
    rows: &[StoreRecord],
    paths: &[&[String]],
    depth: usize,
) -> crate::store::Result<(Vec<Option<ExpandMap>>, usize)> {
    let mut out: Vec<Option<ExpandMap>> = vec![None; rows.len()];
    let mut succeeded = 0;
    // Group by root name, keeping request order; `a` and `a.b` expand `a` once.
    let mut groups: Vec<(&str, Vec<&[String]>)> = Vec::new();
    for p in paths {
        let Some((root, rest)) = p.split_first() else {
            continue;
        };
        match groups.iter_mut().find(|(r, _)| *r == root.as_str()) {
            Some((_, rests)) => rests.push(rest),
            None => groups.push((root.as_str(), vec![rest])),
        }
    }
    for (root, rests) in groups {
        if depth > MAX_DEPTH || root.is_empty() {
            continue;
        }
        let bare = rests.iter().any(|r| r.is_empty());
        let nested: Vec<&[String]> = rests.into_iter().filter(|r| !r.is_empty()).collect();
        if nested.iter().any(|r| r.iter().any(String::is_empty)) && !bare {
            continue;
        }
        let Some(rel) = resolve(&ctx.schema, coll, root) else {
            continue;
        };
        let target = match &rel {
            Relation::Direct { target, .. } => Arc::clone(target),
            Relation::Back { source, .. } => Arc::clone(source),
        };
        let Some(q) = view_query(ctx, &target) else {
            continue;
        };
        // Fetch every related record of every row at once.
        let related = match &rel {
            Relation::Direct { index, .. } => {
                let mut ids: Vec<String> =
                    rows.iter().flat_map(|r| text_values(&r[*index])).collect();
                ids.sort_unstable();
                ids.dedup();
                if ids.is_empty() {
                    Vec::new()
                } else {
                    fetch(conn, &target, q, "id", false, &ids)?
                }
            }
            Relation::Back {
                field, field_multi, ..
            } => {
                let ids: Vec<String> = rows.iter().map(|r| id_of(coll, r)).collect();
                if ids.is_empty() {
                    Vec::new()
                } else {
                    fetch(conn, &target, q, field, *field_multi, &ids)?
                }
            }
        };
        let nested_ok = if nested.is_empty() {
            (vec![None; related.len()], 0)
        } else {
            level(conn, ctx, &target, &related, &nested, depth + 1)?
        };
        if !bare && nested_ok.1 == 0 {
            continue;
        }
        succeeded += 1;
        // The related records as JSON, with their own expands.
        let mut by_id: HashMap<String, usize> = HashMap::new();
        let mut links: Vec<Vec<String>> = Vec::new();
        let mut docs: Vec<Value> = Vec::with_capacity(related.len());
        for (row, exp) in related.into_iter().zip(nested_ok.0) {
            by_id.insert(id_of(&target, &row), docs.len());
            if let Relation::Back { field, .. } = &rel {
                let i = target.fields.iter().position(|f| &f.name == field);
                links.push(i.map(|i| text_values(&row[i])).unwrap_or_default());
            }
            let mut m = record_json(&target, row, &ctx.viewer);
            if let Some(e) = exp {
                m.insert("expand".into(), Value::Object(e));
            }
            docs.push(Value::Object(m));
        }
        for (i, row) in rows.iter().enumerate() {
            let slot = out[i].get_or_insert_with(Map::new);
            let value = match &rel {
                Relation::Direct { index, multi, .. } => {
                    let found: Vec<Value> = text_values(&row[*index])
                        .iter()
                        .filter_map(|id| by_id.get(id).map(|&d| docs[d].clone()))
                        .collect();
                    if found.is_empty() {
                        continue;
                    }
                    if *multi {
                        Value::Array(found)
                    } else {
                        found.into_iter().next().unwrap_or(Value::Null)
                    }
                }
                Relation::Back { single, .. } => {
                    let me = id_of(coll, row);
                    let found: Vec<Value> = links
                        .iter()
                        .enumerate()
                        .filter(|(_, ids)| ids.contains(&me))
                        .take(BACK_RELATION_LIMIT)
                        .map(|(d, _)| docs[d].clone())
                        .collect();
                    if found.is_empty() {
                        continue;
                    }
                    if *single {
                        found.into_iter().next().unwrap_or(Value::Null)
                    } else {
                        Value::Array(found)
                    }
                }
            };
            slot.insert(root.to_owned(), value);
        }
    }
    Ok((out, succeeded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_trimmed_and_empty_entries_dropped() {
        let p = ExpandPaths::parse(Some(" a , b.c ,,")).unwrap();
        assert_eq!(
            p.0,
            vec![vec!["a".to_owned()], vec!["b".into(), "c".into()]]
        );
        assert!(ExpandPaths::parse(Some(" , ")).is_none());
        assert!(ExpandPaths::parse(None).is_none());
    }
}
