//! Delivering one committed change: the clients whose subscriptions concern it, each
//! subscription's check for its caller (compiled once per subscription, schema and caller, then
//! cached), each distinct check run once per change, each distinct shape of the record
//! (`fields`, `expand`, what the caller may see) serialized once per change, and the messages
//! queued. A client whose queue is full is dropped.

use super::topic::Subscription;
use super::{Client, Hub, Message};
use crate::plugins::Action as Change;
use crate::records::feed::Committed;
use crate::records::watch::{self, Visibility};
use crate::records::{Access, Action, Caller, Records};
use crate::schema::{Collection, Schema};
use crate::store::StoreError;
use bytes::Bytes;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use tokio::sync::mpsc;

/// A subscription's check, for the schema, collection and caller it was compiled for.
#[derive(Debug)]
pub(crate) struct Compiled {
    schema: Arc<Schema>,
    collection: Arc<Collection>,
    auth_version: u64,
    visibility: Visibility,
}

/// The delivery task: changes in commit order, one at a time.
pub(super) async fn run(
    hub: Weak<Hub>,
    records: Weak<Records>,
    mut changes: mpsc::UnboundedReceiver<Arc<Committed>>,
) {
    while let Some(change) = changes.recv().await {
        let (Some(hub), Some(records)) = (hub.upgrade(), records.upgrade()) else {
            return;
        };
        if let Err(e) = deliver(&hub, &records, &change).await {
            tracing::warn!(error = %e, seq = change.seq, "realtime delivery failed");
        }
    }
}

/// One client's subscription that a change concerns, with the caller it was set by.
struct Target {
    client: Arc<Client>,
    auth: Option<Caller>,
    auth_version: u64,
    sub: Arc<Subscription>,
}

fn action_name(a: Change) -> &'static str {
    match a {
        Change::Create => "create",
        Change::Update => "update",
        Change::Delete => "delete",
    }
}

/// An auth record that changed: clients bound to it follow it (a new tokenKey, or its
/// deletion, makes them guests again, as in PocketBase).
fn follow_auth(hub: &Hub, change: &Committed) {
    let c = &change.collection;
    let id = c.stored_text(&change.record, "id");
    let key = c.stored_text(&change.record, "tokenKey");
    for client in hub.clients() {
        let Ok(mut st) = client.state.lock() else {
            continue;
        };
        let Some(a) = &st.auth else {
            continue;
        };
        if a.collection.id != c.id || a.id() != id {
            continue;
        }
        let keep = change.action == Change::Update
            && a.collection.stored_text(&a.record, "tokenKey") == key;
        if keep {
            st.auth = Some(Caller {
                collection: Arc::clone(c),
                record: change.record.clone(),
                refreshable: a.refreshable,
            });
        } else {
            st.auth = None;
            super::bump(&hub.bound, &c.id, false);
        }
        st.auth_version += 1;
    }
}

/// The caller a client's subscriptions run as now: a guest when its auth collection is gone or
/// its token secret changed (its tokens no longer verify).
fn current_auth(schema: &Schema, auth: Option<Caller>) -> Option<Caller> {
    let a = auth?;
    let now = schema.by_id(&a.collection.id)?;
    (now.token_secret("authToken") == a.collection.token_secret("authToken")).then_some(a)
}

async fn deliver(hub: &Hub, records: &Records, change: &Arc<Committed>) -> Result<(), StoreError> {
    let c = &change.collection;
    if c.is_auth() && change.action != Change::Create {
        follow_auth(hub, change);
    }
    let id = c.stored_text(&change.record, "id").to_owned();
    let schema = records.store.schema();
    let mut targets = Vec::new();
    for client in hub.clients() {
        let (auth, auth_version, subs) = client.snapshot();
        let concerned: Vec<&Arc<Subscription>> = subs
            .iter()
            .filter(|s| s.concerns(&c.name, &c.id, &id))
            .collect();
        if concerned.is_empty() {
            continue;
        }
        let auth = current_auth(&schema, auth);
        for sub in concerned {
            targets.push(Target {
                client: Arc::clone(&client),
                auth: auth.clone(),
                auth_version,
                sub: Arc::clone(sub),
            });
        }
    }
    if targets.is_empty() {
        return Ok(());
    }
    let event_c = watch::event_collection(c);
    let action = action_name(change.action);
    let out = records
        .store
        .read(|conn| {
            let mut checks: HashMap<String, bool> = HashMap::new();
            let mut payloads: HashMap<String, Bytes> = HashMap::new();
            let mut out: Vec<(Arc<Client>, Message)> = Vec::new();
            for t in &targets {
                let access = Access::request(
                    t.auth.as_ref(),
                    "GET",
                    "",
                    &t.sub.headers,
                    &t.sub.query,
                    None,
                )
                .in_context("realtime");
                let rule_action = if t.sub.record.is_some() {
                    Action::View
                } else {
                    Action::List
                };
                let visible = {
                    let mut cached = t.sub.compiled.lock().map_err(|_| StoreError::WriterGone)?;
                    let fresh = cached.as_ref().is_some_and(|k| {
                        Arc::ptr_eq(&k.schema, &schema)
                            && Arc::ptr_eq(&k.collection, c)
                            && k.auth_version == t.auth_version
                    });
                    if !fresh {
                        *cached = Some(Compiled {
                            schema: Arc::clone(&schema),
                            collection: Arc::clone(c),
                            auth_version: t.auth_version,
                            visibility: watch::visibility(
                                &schema,
                                &event_c,
                                rule_action,
                                &access,
                                t.sub.text("filter"),
                            ),
                        });
                    }
                    match cached.as_ref().map(|k| &k.visibility) {
                        Some(Visibility::All) => true,
                        Some(Visibility::When(sel)) => {
                            let key = format!("{}\0{}\0{:?}", sel.where_sql, sel.joins, sel.params);
                            match checks.get(&key) {
                                Some(v) => *v,
                                None => {
                                    let v = watch::admits(conn, &event_c, &change.record, sel)?;
                                    checks.insert(key, v);
                                    v
                                }
                            }
                        }
                        Some(Visibility::Nothing) | None => false,
                    }
                };
                if !visible {
                    continue;
                }
                let viewer = access.viewer();
                let fields = t.sub.text("fields").filter(|f| !f.is_empty());
                let expand = t.sub.text("expand").filter(|e| !e.is_empty());
                // What the serialized record depends on: its shape, what the caller may see of
                // it, and (with expansions, which run under the caller's rules) who asks.
                let mut shape = format!(
                    "{}\0{}\0{}",
                    fields.unwrap_or(""),
                    expand.unwrap_or(""),
                    viewer.superuser
                );
                if c.is_auth() || expand.is_some() {
                    shape.push_str(&format!(
                        "\0{}\0{}\0{:?}\0{:?}",
                        viewer.caller_collection, viewer.caller_id, t.sub.query, t.sub.headers
                    ));
                }
                let data = match payloads.get(&shape) {
                    Some(d) => d.clone(),
                    None => {
                        let record = watch::record_for(
                            conn,
                            &schema,
                            c,
                            change.record.clone(),
                            &access,
                            fields,
                            expand,
                        )?;
                        let d = Bytes::from(
                            serde_json::to_vec(&json!({"record": record, "action": action}))
                                .unwrap_or_default(),
                        );
                        payloads.insert(shape, d.clone());
                        d
                    }
                };
                out.push((
                    Arc::clone(&t.client),
                    Message {
                        name: Arc::clone(&t.sub.name),
                        data,
                    },
                ));
            }
            Ok(out)
        })
        .await?;
    for (client, msg) in out {
        if let Err(mpsc::error::TrySendError::Full(_)) = client.queue.try_send(msg) {
            hub.drop_client(&client.id);
        }
    }
    Ok(())
}
