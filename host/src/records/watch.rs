//! What realtime asks of the records area: may this access see this committed change, and the
//! change's record as that access sees it. The same rule decision, compiler, expansion and
//! serializer as the REST API; the record is checked as the change carries it (held in memory),
//! not read back, so a deleted record is checked too.

use super::expand::expand_rows;
use super::json::{FieldsFilter, record_json};
use super::{Access, Action, Gate, gate, read};
use crate::query::{self, Query, Select};
use crate::schema::{Collection, Schema};
use crate::store::{Conn, StoreRecord, records as store_records};
use serde_json::{Map, Value};
use std::sync::Arc;

/// Whether a subscriber sees a change, decided once per subscription and caller.
#[derive(Debug, Clone)]
pub(crate) enum Visibility {
    /// Every change (a superuser, or an open rule and no filter).
    All,
    /// None (a `null` rule for a non-superuser, a filter that does not compile or reaches for
    /// what only superusers may, as PocketBase drops such subscribers silently).
    Nothing,
    /// The changes this condition admits.
    When(Select),
}

/// The collection under the name a change's record stands in for it (see
/// `store::records::row_matches`): no collection can have this name.
pub(crate) fn event_collection(c: &Collection) -> Collection {
    let mut v = c.clone();
    v.name = format!("{}:change", c.name);
    v
}

/// The check of one subscription for `access`: `action` is `List` for a collection topic and
/// `View` for a record topic; `filter` is the subscription's own (`options.query.filter`).
/// `event_c` is [`event_collection`] of the changed collection.
pub(crate) fn visibility(
    schema: &Schema,
    event_c: &Collection,
    action: Action,
    access: &Access<'_>,
    filter: Option<&str>,
) -> Visibility {
    let filter = filter.filter(|f| !f.trim().is_empty());
    let rule = match gate(event_c, action, access) {
        Gate::SuperusersOnly => return Visibility::Nothing,
        Gate::Open => None,
        Gate::Rule(r) => Some(r),
    };
    if rule.is_none() && filter.is_none() {
        return Visibility::All;
    }
    if !access.is_superuser() && query::forbid_client_refs(filter, None).is_err() {
        return Visibility::Nothing;
    }
    let mut q = Query::new(schema, event_c, access.info());
    if let Some(r) = rule
        && q.rule(r).is_err()
    {
        return Visibility::Nothing;
    }
    if let Some(f) = filter
        && q.filter(f).is_err()
    {
        return Visibility::Nothing;
    }
    Visibility::When(q.finish())
}

/// Whether the changed `row` satisfies `sel` (from [`visibility`]) for many subscribers whose
/// conditions are `sel` with other bound values (`sets[i]` in place of `sel.params`), in one
/// statement: one answer per set, in order.
pub(crate) fn admits_each(
    conn: Conn<'_>,
    event_c: &Collection,
    row: &StoreRecord,
    sel: &Select,
    sets: &[&[crate::schema::value::Stored]],
) -> crate::store::Result<Vec<bool>> {
    store_records::row_matches_each(conn, event_c, row, sel, sets)
}

/// The changed record as `access` sees it through a subscription with these `fields`,
/// `expand` and `filter` options: the REST API's serializer, expansions under the caller's
/// view rules. An auth record's email shows, beyond where the REST API shows it, to a caller
/// its collection's `manageRule` holds for, on the record as stored and within the
/// subscription's filter, as PocketBase checks it for realtime (a deleted record is no longer
/// stored: only its owner and superusers see its email).
#[allow(clippy::too_many_arguments, reason = "a subscription's three options")]
pub(crate) fn record_for(
    conn: Conn<'_>,
    schema: &Arc<Schema>,
    c: &Arc<Collection>,
    row: StoreRecord,
    access: &Access<'_>,
    fields: Option<&str>,
    expand: Option<&str>,
    filter: Option<&str>,
) -> crate::store::Result<Value> {
    let mut viewer = access.viewer();
    if let Some(manage) = super::manage_rule_text(c).filter(|_| !viewer.superuser) {
        let mut q = Query::new(schema, c, access.info());
        let filter = filter.filter(|f| !f.is_empty());
        let compiled = q.rule(manage).and_then(|()| match filter {
            Some(f) => query::forbid_client_refs(Some(f), None).and_then(|()| q.filter(f)),
            None => Ok(()),
        });
        if compiled.is_ok() {
            let sel = q.finish();
            viewer.owner_view =
                !read::managed_ids(conn, c, &sel, std::slice::from_ref(&row))?.is_empty();
        }
    }
    let expanded = match read::expanding(schema, access, expand) {
        Some((paths, ctx)) => expand_rows(conn, &ctx, c, std::slice::from_ref(&row), &paths)?
            .into_iter()
            .next()
            .flatten(),
        None => None,
    };
    let mut m: Map<String, Value> = record_json(c, row, &viewer);
    if let Some(e) = expanded {
        m.insert("expand".into(), Value::Object(e));
    }
    // A `fields` option that does not parse is ignored, as PocketBase ignores it.
    Ok(Value::Object(match FieldsFilter::parse(fields) {
        Ok(Some(f)) => f.apply(m),
        _ => m,
    }))
}
