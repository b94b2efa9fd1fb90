//! The one rule decision: for an action on a collection, is the caller let through, kept out,
//! or held to an expression? Every caller (REST, plugins, expand, the auth endpoints) asks here.

use super::{Access, Caller, RecordError, Result};
use crate::query::{self, Select};
use crate::schema::{Collection, Schema};
use crate::store::{Store, records as store_records};
use serde_json::{Map, Value};
use std::sync::Arc;

/// What a rule guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    List,
    View,
    Create,
    Update,
    Delete,
}

/// What an action needs of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate<'c> {
    /// Nothing: a superuser, the system, or a rule that is `""`.
    Open,
    /// The rule is `null`: superusers only.
    SuperusersOnly,
    /// The records this expression admits.
    Rule(&'c str),
}

/// The decision: superusers and the system pass, a `null` rule is superusers only, `""` is
/// public, an expression is a condition on the records.
pub(crate) fn gate<'c>(c: &'c Collection, action: Action, access: &Access<'_>) -> Gate<'c> {
    if access.is_superuser() {
        return Gate::Open;
    }
    let rule = match action {
        Action::List => &c.rules.list,
        Action::View => &c.rules.view,
        Action::Create => &c.rules.create,
        Action::Update => &c.rules.update,
        Action::Delete => &c.rules.delete,
    };
    match rule {
        None => Gate::SuperusersOnly,
        Some(r) if r.trim().is_empty() => Gate::Open,
        Some(r) => Gate::Rule(r),
    }
}

/// The decision as an extra condition on one statement: None when none is needed.
pub(crate) fn condition(
    schema: &Schema,
    c: &Collection,
    action: Action,
    access: &Access<'_>,
) -> Result<Option<Select>> {
    match gate(c, action, access) {
        Gate::Open => Ok(None),
        Gate::SuperusersOnly => Err(RecordError::SuperusersOnly),
        Gate::Rule(r) => Ok(Some(query::compile_rule(schema, c, r, access.info())?)),
    }
}

/// The auth collection's `manageRule` when it may grant this caller manager access (PocketBase's
/// `hasAuthManageAccess`): only an auth collection's, only a signed-in caller who is not a
/// superuser (superusers have it already), and never from a `null` or `""` rule (neither is
/// "everyone": both leave managing to superusers). The rule is then checked against the record
/// the write is about.
pub(crate) fn manage_rule<'c>(c: &'c Collection, access: &Access<'_>) -> Option<&'c str> {
    if access.who.is_none() || access.is_superuser() {
        return None;
    }
    manage_rule_text(c)
}

/// The auth collection's `manageRule` when it is an expression (not `null`, not blank).
pub(crate) fn manage_rule_text(c: &Collection) -> Option<&str> {
    if !c.is_auth() {
        return None;
    }
    match c.auth_option("manageRule") {
        Some(Value::String(r)) if !r.trim().is_empty() => Some(r.as_str()),
        _ => None,
    }
}

/// The auth collection's `authRule` for the record about to authenticate: unset or `""` lets
/// it in, `null` keeps everyone out, an expression must hold for the record (with the record
/// itself as `@request.auth`).
pub(crate) async fn auth_rule_allows(
    store: &Store,
    c: &Arc<Collection>,
    row: &crate::store::StoreRecord,
) -> Result<()> {
    let rule = match c.auth_option("authRule") {
        Some(Value::String(r)) => r.clone(),
        Some(Value::Null) => return Err(RecordError::AuthRuleDenied),
        _ => String::new(),
    };
    if rule.trim().is_empty() {
        return Ok(());
    }
    let who = Caller {
        collection: Arc::clone(c),
        record: row.clone(),
        refreshable: true,
    };
    let empty = Map::new();
    let access = Access::request(Some(&who), "POST", "", &(), &empty, None);
    let sel = query::compile_rule(&store.schema(), c, &rule, access.info())?;
    let id = who.id();
    let found = store
        .read(|conn| store_records::get(conn, c, &id, Some(&sel)))
        .await?;
    if found.is_some() {
        Ok(())
    } else {
        Err(RecordError::AuthRuleDenied)
    }
}

/// Whether the collection's `mfa.rule` asks `row` for a second method: an empty rule asks
/// everyone; an expression asks the records it matches (read with the request's facts, the
/// caller a guest as at sign-in). A rule that fails to compile asks too, the safer answer, as
/// PocketBase answers it (it then refuses the sign-in).
pub(crate) async fn mfa_rule_wants(
    store: &Store,
    c: &Arc<Collection>,
    row: &crate::store::StoreRecord,
) -> Result<bool> {
    let rule = c
        .auth_option("mfa")
        .and_then(|m| m.get("rule"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if rule.trim().is_empty() {
        return Ok(true);
    }
    let empty = Map::new();
    let access = Access::request(None, "POST", "", &(), &empty, None);
    let sel = query::compile_rule(&store.schema(), c, &rule, access.info())?;
    let id = c.stored_text(row, "id").to_owned();
    let found = store
        .read(|conn| store_records::get(conn, c, &id, Some(&sel)))
        .await?;
    Ok(found.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::define::build;
    use crate::schema::value::Stored;
    use serde_json::json;

    fn collection(rules: Value) -> Collection {
        let mut def = json!({"name": "posts", "fields": [{"name": "title", "type": "text"}]});
        for (k, v) in rules.as_object().unwrap() {
            def[k] = v.clone();
        }
        build(&def, None, &Schema::default()).unwrap()
    }

    fn superuser() -> Caller {
        let su = build(
            &json!({"id": crate::schema::SUPERUSERS_ID, "name": "_superusers", "type": "auth"}),
            None,
            &Schema::default(),
        )
        .unwrap();
        let record = su.fields.iter().map(|_| Stored::Text("x".into())).collect();
        Caller {
            collection: Arc::new(su),
            record,
            refreshable: true,
        }
    }

    #[test]
    fn each_action_reads_its_own_rule_for_every_kind_of_caller() {
        let c = collection(json!({
            "listRule": "", "viewRule": "title = 'a'", "createRule": null,
            "updateRule": " ", "deleteRule": "title != ''"
        }));
        let q = Map::new();
        let guest = Access::request(None, "GET", "/", &(), &q, None);
        assert_eq!(gate(&c, Action::List, &guest), Gate::Open);
        assert_eq!(gate(&c, Action::View, &guest), Gate::Rule("title = 'a'"));
        assert_eq!(gate(&c, Action::Create, &guest), Gate::SuperusersOnly);
        assert_eq!(gate(&c, Action::Update, &guest), Gate::Open);
        assert_eq!(gate(&c, Action::Delete, &guest), Gate::Rule("title != ''"));
        // Superusers and the system are past every rule, null ones included.
        let su = superuser();
        let as_su = Access::request(Some(&su), "GET", "/", &(), &q, None);
        let system = Access::system(0);
        for action in [
            Action::List,
            Action::View,
            Action::Create,
            Action::Update,
            Action::Delete,
        ] {
            assert_eq!(gate(&c, action, &as_su), Gate::Open);
            assert_eq!(gate(&c, action, &system), Gate::Open);
        }
    }

    #[test]
    fn a_null_rule_is_an_error_and_an_expression_a_condition() {
        let c = collection(json!({"viewRule": "title = 'a'"}));
        let schema = Schema::new(vec![c.clone()]);
        let q = Map::new();
        let guest = Access::request(None, "GET", "/", &(), &q, None);
        assert!(matches!(
            condition(&schema, &c, Action::List, &guest),
            Err(RecordError::SuperusersOnly)
        ));
        let sel = condition(&schema, &c, Action::View, &guest)
            .unwrap()
            .unwrap();
        assert!(sel.where_sql.contains("title"));
        assert!(
            condition(&schema, &c, Action::View, &Access::system(0))
                .unwrap()
                .is_none()
        );
    }
}
