//! What plugins call back into (`plugins::Services`), implemented over the record operations:
//! reads under the rules of the request the call was made for (or none, for the server's own
//! calls), writes through the same path as REST, made as the system.

use super::{Access, Action, Caller, RecordError, Records, Writer, condition, read};
use crate::plugins::{BoxFut, CallFacts, DbFailure, PluginRecord, Rejection, Services};
use crate::query::QueryError;
use crate::schema::Collection;
use crate::store::{StoreError, records as store_records};
use serde_json::{Map, Value};
use std::sync::{Arc, Weak};

/// PocketBase's words for the refusals plugins hear back.
const MSG_NOT_FOUND: &str = "The requested resource wasn't found.";
const MSG_SUPERUSERS_ONLY: &str = "Only superusers can perform this action.";
const MSG_BAD_REQUEST: &str = "Something went wrong while processing your request.";

pub(crate) struct RecordServices {
    pub records: Weak<Records>,
}

fn records(w: &Weak<Records>) -> Result<Arc<Records>, DbFailure> {
    w.upgrade()
        .ok_or_else(|| DbFailure::Other("the server is shutting down".into()))
}

fn who(facts: &CallFacts) -> Option<Caller> {
    facts
        .caller
        .as_ref()
        .and_then(|c| c.downcast_ref::<Caller>())
        .cloned()
}

fn rejection(status: u16, message: impl Into<String>, data: &Map<String, Value>) -> DbFailure {
    DbFailure::Rejected(Rejection {
        status,
        message: message.into(),
        fields: data
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v["code"].as_str().unwrap_or("").to_owned(),
                    v["message"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect(),
    })
}

/// A record operation's refusal as a plugin hears it: what a client would have been told
/// (status and body) as a rejection; anything that is the server's own trouble as a failure.
fn failure(e: RecordError) -> DbFailure {
    let none = Map::new();
    match e {
        RecordError::NotFound => rejection(404, MSG_NOT_FOUND, &none),
        RecordError::SuperusersOnly => rejection(403, MSG_SUPERUSERS_ONLY, &none),
        RecordError::AuthRuleDenied => rejection(403, super::MSG_AUTH_RULE_DENIED, &none),
        RecordError::Query(QueryError::Forbidden(what)) => {
            rejection(403, format!("Only superusers can filter by {what}"), &none)
        }
        RecordError::Query(_) => rejection(400, MSG_BAD_REQUEST, &none),
        RecordError::Invalid { message, data } => rejection(400, message, &data),
        RecordError::Refused(message) => rejection(400, message, &none),
        RecordError::Rejected(r) => DbFailure::Rejected(r),
        RecordError::Store(
            StoreError::Invalid(_)
            | StoreError::Denied(_)
            | StoreError::NotUnique(_)
            | StoreError::RequiredRelation,
        ) => rejection(400, MSG_BAD_REQUEST, &none),
        RecordError::Store(e) => DbFailure::Other(e.to_string()),
        RecordError::Internal(e) => DbFailure::Other(e),
    }
}

/// `{:name}` placeholders as filter literals (strings quoted and escaped), so a value can never
/// change the filter's shape; the compiler then binds every literal as a SQL parameter.
pub(crate) fn bind_placeholders(
    filter: &str,
    params: &Map<String, Value>,
) -> Result<String, String> {
    let mut out = String::with_capacity(filter.len());
    let mut rest = filter;
    while let Some(i) = rest.find("{:") {
        out.push_str(&rest[..i]);
        let after = &rest[i + 2..];
        let Some(j) = after.find('}') else {
            return Err("unclosed {: placeholder".into());
        };
        let name = &after[..j];
        let v = params
            .get(name)
            .ok_or_else(|| format!("no value for placeholder {{:{name}}}"))?;
        match v {
            Value::Null => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Number(n) => out.push_str(&n.to_string()),
            Value::String(s) => quote(&mut out, s),
            other => quote(&mut out, &other.to_string()),
        }
        rest = &after[j + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

fn quote(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn collection(records: &Records, name: &str) -> Result<Arc<Collection>, DbFailure> {
    records
        .store
        .schema()
        .by_id_or_name(name)
        .cloned()
        .ok_or_else(|| DbFailure::Invalid(format!("unknown collection {name:?}")))
}

impl Services for RecordServices {
    fn find_records(
        &self,
        facts: &CallFacts,
        collection: String,
        filter: String,
        params: Map<String, Value>,
        sort: String,
        limit: u32,
    ) -> BoxFut<Result<Vec<PluginRecord>, DbFailure>> {
        let w = self.records.clone();
        let facts = facts.clone();
        Box::pin(async move {
            let records = records(&w)?;
            let schema = records.store.schema();
            let c = self::collection(&records, &collection)?;
            let who = who(&facts);
            let text = bind_placeholders(&filter, &params).map_err(DbFailure::Invalid)?;
            let sel = {
                let access = Access::for_plugin(who.as_ref(), facts.system);
                let filter = Some(text.as_str()).filter(|t| !t.trim().is_empty());
                let sort = Some(sort.as_str()).filter(|t| !t.trim().is_empty());
                read::list_select(&schema, &c, &access, filter, sort).map_err(|e| match e {
                    RecordError::SuperusersOnly => {
                        DbFailure::Denied("only superusers may list this collection".into())
                    }
                    other => DbFailure::Invalid(other.to_string()),
                })?
            };
            let limit = i64::from(limit.clamp(1, 1000));
            let rows = records
                .store
                .read(|conn| store_records::list(conn, &c, &sel, limit, 0))
                .await
                .map_err(|e| DbFailure::Other(e.to_string()))?;
            Ok(rows
                .iter()
                .map(|r| PluginRecord::from_stored(&c, r))
                .collect())
        })
    }

    fn get_record(
        &self,
        facts: &CallFacts,
        collection: String,
        id: String,
    ) -> BoxFut<Result<Option<PluginRecord>, DbFailure>> {
        let w = self.records.clone();
        let facts = facts.clone();
        Box::pin(async move {
            let records = records(&w)?;
            let schema = records.store.schema();
            let c = self::collection(&records, &collection)?;
            let who = who(&facts);
            let rule = {
                let access = Access::for_plugin(who.as_ref(), facts.system);
                condition(&schema, &c, Action::View, &access).map_err(|e| match e {
                    RecordError::SuperusersOnly => {
                        DbFailure::Denied("only superusers may view this collection".into())
                    }
                    other => DbFailure::Invalid(other.to_string()),
                })?
            };
            let row = records
                .store
                .read(|conn| store_records::get(conn, &c, &id, rule.as_ref()))
                .await
                .map_err(|e| DbFailure::Other(e.to_string()))?;
            Ok(row.map(|r| PluginRecord::from_stored(&c, &r)))
        })
    }

    fn create_record(
        &self,
        facts: &CallFacts,
        collection: String,
        data: Map<String, Value>,
    ) -> BoxFut<Result<PluginRecord, DbFailure>> {
        let w = self.records.clone();
        let depth = facts.depth;
        Box::pin(async move {
            let records = records(&w)?;
            let c = self::collection(&records, &collection)?;
            let access = Access::system(depth);
            let saved = Writer::new(&records, &access)
                .create(&c, &data)
                .await
                .map_err(failure)?;
            Ok(PluginRecord::from_stored(&c, &saved))
        })
    }

    fn update_record(
        &self,
        facts: &CallFacts,
        collection: String,
        id: String,
        data: Map<String, Value>,
    ) -> BoxFut<Result<PluginRecord, DbFailure>> {
        let w = self.records.clone();
        let depth = facts.depth;
        Box::pin(async move {
            let records = records(&w)?;
            let c = self::collection(&records, &collection)?;
            let access = Access::system(depth);
            let saved = Writer::new(&records, &access)
                .update(&c, id, &data)
                .await
                .map_err(failure)?;
            Ok(PluginRecord::from_stored(&c, &saved))
        })
    }

    fn delete_record(
        &self,
        facts: &CallFacts,
        collection: String,
        id: String,
    ) -> BoxFut<Result<(), DbFailure>> {
        let w = self.records.clone();
        let depth = facts.depth;
        Box::pin(async move {
            let records = records(&w)?;
            let c = self::collection(&records, &collection)?;
            let access = Access::system(depth);
            Writer::new(&records, &access)
                .delete(&c, id)
                .await
                .map_err(failure)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::bind_placeholders;
    use serde_json::json;

    #[test]
    fn placeholders_become_quoted_literals() {
        let p = json!({"q": "a\" || 1=1 || \"", "n": 3, "b": true, "z": null});
        let m = p.as_object().unwrap();
        assert_eq!(
            bind_placeholders("title ~ {:q} && n > {:n} && ok = {:b} && x = {:z}", m).unwrap(),
            r#"title ~ "a\" || 1=1 || \"" && n > 3 && ok = true && x = null"#
        );
        assert!(bind_placeholders("a = {:missing}", m).is_err());
        assert!(bind_placeholders("a = {:q", m).is_err());
    }
}
