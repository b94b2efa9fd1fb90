//! What plugins call back into: record reads under the call's rules, record writes through
//! the same path as the REST API.

use super::error::ApiError;
use super::records::{Writer, rule_condition};
use super::{AppState, Caller, RequestCtx, Shared};
use crate::plugins::{BoxFut, CallFacts, DbFailure, PluginRecord, Rejection, Services};
use crate::query::Query;
use crate::schema::Collection;
use crate::store::records as store_records;
use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::{Map, Value};
use std::sync::{Arc, Weak};

pub(crate) struct ApiServices {
    pub state: Weak<AppState>,
}

fn state(w: &Weak<AppState>) -> Result<Shared, DbFailure> {
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

/// An ApiError as a plugin sees it: 4xx are refusals with PocketBase's body, the rest failures.
fn failure(e: ApiError) -> DbFailure {
    if e.status.is_client_error() {
        DbFailure::Rejected(Rejection {
            status: e.status.as_u16(),
            message: e.message.clone(),
            fields: e
                .data
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
    } else {
        DbFailure::Other(e.message)
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

/// The request a plugin's record call stands in for: none (no headers, no query).
struct NoRequest {
    method: Method,
    headers: HeaderMap,
    q: Map<String, Value>,
}

impl NoRequest {
    fn new(method: Method) -> Self {
        Self {
            method,
            headers: HeaderMap::new(),
            q: Map::new(),
        }
    }

    /// The rules' view of the call: the caller it was made for, or the system.
    fn ctx<'a>(&'a self, who: Option<&'a Caller>, system: bool) -> RequestCtx<'a> {
        RequestCtx::new(who, &self.method, &self.headers, &self.q, None).made_by_system(system)
    }

    /// A record write made by the server itself, `depth` plugin calls deep.
    fn writer<'a>(&'a self, state: &'a Shared, depth: u8) -> Writer<'a> {
        Writer {
            state,
            who: None,
            system: true,
            method: &self.method,
            path: "",
            headers: &self.headers,
            q: &self.q,
            depth,
            remote_ip: None,
        }
    }
}

fn collection(state: &AppState, name: &str) -> Result<Arc<Collection>, DbFailure> {
    super::find_collection(state, name)
        .ok_or_else(|| DbFailure::Invalid(format!("unknown collection {name:?}")))
}

impl Services for ApiServices {
    fn find_records(
        &self,
        facts: &CallFacts,
        collection: String,
        filter: String,
        params: Map<String, Value>,
        sort: String,
        limit: u32,
    ) -> BoxFut<Result<Vec<PluginRecord>, DbFailure>> {
        let w = self.state.clone();
        let facts = facts.clone();
        Box::pin(async move {
            let state = state(&w)?;
            let schema = state.store.schema();
            let c = self::collection(&state, &collection)?;
            let who = who(&facts);
            let text = bind_placeholders(&filter, &params).map_err(DbFailure::Invalid)?;
            let sel = {
                let none = NoRequest::new(Method::GET);
                let req = none.ctx(who.as_ref(), facts.system);
                let mut query = Query::new(&schema, &c, req.info());
                if !req.is_superuser() {
                    match &c.rules.list {
                        None => {
                            return Err(DbFailure::Denied(
                                "only superusers may list this collection".into(),
                            ));
                        }
                        Some(r) => query
                            .rule(r)
                            .map_err(|e| DbFailure::Invalid(e.to_string()))?,
                    }
                }
                if !text.trim().is_empty() {
                    query
                        .filter(&text)
                        .map_err(|e| DbFailure::Invalid(e.to_string()))?;
                }
                if !sort.trim().is_empty() {
                    query
                        .sort(&sort)
                        .map_err(|e| DbFailure::Invalid(e.to_string()))?;
                }
                query.finish()
            };
            let limit = i64::from(limit.clamp(1, 1000));
            let c2 = Arc::clone(&c);
            let rows = state
                .store
                .read(move |conn| store_records::list(conn, &c2, &sel, limit, 0))
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
        let w = self.state.clone();
        let facts = facts.clone();
        Box::pin(async move {
            let state = state(&w)?;
            let schema = state.store.schema();
            let c = self::collection(&state, &collection)?;
            let who = who(&facts);
            let rule = {
                let none = NoRequest::new(Method::GET);
                rule_condition(
                    &schema,
                    &c,
                    &c.rules.view,
                    &none.ctx(who.as_ref(), facts.system),
                )
                .map_err(|e| {
                    if e.status == StatusCode::FORBIDDEN {
                        DbFailure::Denied("only superusers may view this collection".into())
                    } else {
                        DbFailure::Invalid(e.message)
                    }
                })?
            };
            let c2 = Arc::clone(&c);
            let row = state
                .store
                .read(move |conn| store_records::get(conn, &c2, &id, rule.as_ref()))
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
        let w = self.state.clone();
        let depth = facts.depth;
        Box::pin(async move {
            let state = state(&w)?;
            let c = self::collection(&state, &collection)?;
            let none = NoRequest::new(Method::POST);
            let wr = none.writer(&state, depth);
            let saved = wr.create(&c, &data).await.map_err(failure)?;
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
        let w = self.state.clone();
        let depth = facts.depth;
        Box::pin(async move {
            let state = state(&w)?;
            let c = self::collection(&state, &collection)?;
            let none = NoRequest::new(Method::POST);
            let wr = none.writer(&state, depth);
            let saved = wr.update(&c, id, &data).await.map_err(failure)?;
            Ok(PluginRecord::from_stored(&c, &saved))
        })
    }

    fn delete_record(
        &self,
        facts: &CallFacts,
        collection: String,
        id: String,
    ) -> BoxFut<Result<(), DbFailure>> {
        let w = self.state.clone();
        let depth = facts.depth;
        Box::pin(async move {
            let state = state(&w)?;
            let c = self::collection(&state, &collection)?;
            let none = NoRequest::new(Method::POST);
            let wr = none.writer(&state, depth);
            wr.delete(&c, id).await.map_err(failure)
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
