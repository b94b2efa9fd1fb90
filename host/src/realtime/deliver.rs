//! Delivering one committed change: the clients whose subscriptions concern it, each
//! subscription's check for its caller (compiled once per subscription, schema and caller, then
//! cached), each distinct check run once per change, each distinct shape of the record
//! (`fields`, `expand`, what the caller may see) serialized once per change, and the messages
//! queued. A client whose queue is full is dropped.

use super::topic::Subscription;
use super::{Client, Hub, Message};
use crate::plugins::Action as Change;
use crate::query::Select;
use crate::records::feed::Committed;
use crate::records::watch::{self, Visibility};
use crate::records::{Access, Action, Caller, Records};
use crate::schema::value::Stored;
use crate::schema::{Collection, Schema};
use crate::store::{Conn, StoreError, StoreRecord};
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
    visibility: Arc<Visibility>,
}

/// Subscribers whose checks are the same statement with other bound values.
struct Group<'a> {
    sel: &'a Select,
    /// Distinct bound values -> their slot in `sets`.
    slots: HashMap<String, usize>,
    sets: Vec<&'a [Stored]>,
    /// (target, slot) pairs.
    members: Vec<(usize, usize)>,
}

/// Which targets see the change. Each distinct check runs once, and checks that differ only
/// in what they bind (typically each subscriber's own `@request.auth.id`) run as one statement
/// over all their values, so a change reaching thousands of signed-in subscribers costs a few
/// statements, not one per subscriber.
fn decide(
    conn: Conn<'_>,
    event_c: &Collection,
    row: &StoreRecord,
    checks: &[Option<Arc<Visibility>>],
) -> Result<Vec<bool>, StoreError> {
    let mut out = vec![false; checks.len()];
    let mut groups: HashMap<(&str, &str), Group<'_>> = HashMap::new();
    for (i, check) in checks.iter().enumerate() {
        match check.as_deref() {
            Some(Visibility::All) => out[i] = true,
            Some(Visibility::Nothing) | None => {}
            Some(Visibility::When(sel)) => {
                let g = groups
                    .entry((sel.where_sql.as_str(), sel.joins.as_str()))
                    .or_insert_with(|| Group {
                        sel,
                        slots: HashMap::new(),
                        sets: Vec::new(),
                        members: Vec::new(),
                    });
                let Group { slots, sets, .. } = g;
                let slot = *slots.entry(format!("{:?}", sel.params)).or_insert_with(|| {
                    sets.push(&sel.params);
                    sets.len() - 1
                });
                g.members.push((i, slot));
            }
        }
    }
    for g in groups.values() {
        let answers = watch::admits_each(conn, event_c, row, g.sel, &g.sets)?;
        for &(i, slot) in &g.members {
            out[i] = answers.get(slot).copied().unwrap_or(false);
        }
    }
    Ok(out)
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
    auth: Option<Arc<Caller>>,
    auth_version: u64,
    sub: Arc<Subscription>,
}

impl Target {
    /// The subscription's request as PocketBase replays it for a realtime check.
    fn access(&self) -> Access<'_> {
        Access::request(
            self.auth.as_deref(),
            "GET",
            "",
            &self.sub.headers,
            &self.sub.query,
            None,
        )
        .in_context("realtime")
    }
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
            st.auth = Some(Arc::new(Caller {
                collection: Arc::clone(c),
                record: change.record.clone(),
                refreshable: a.refreshable,
            }));
        } else {
            st.auth = None;
            super::bump(&hub.bound, &c.id, false);
        }
        st.auth_version += 1;
    }
}

/// The caller a client's subscriptions run as now: a guest when its auth collection is gone or
/// its token secret changed (its tokens no longer verify).
fn current_auth(schema: &Schema, auth: Option<Arc<Caller>>) -> Option<Arc<Caller>> {
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
            let mut checks = Vec::with_capacity(targets.len());
            for t in &targets {
                let mut cached = t.sub.compiled.lock().map_err(|_| StoreError::WriterGone)?;
                let fresh = cached.as_ref().is_some_and(|k| {
                    Arc::ptr_eq(&k.schema, &schema)
                        && Arc::ptr_eq(&k.collection, c)
                        && k.auth_version == t.auth_version
                });
                if !fresh {
                    let rule_action = if t.sub.record.is_some() {
                        Action::View
                    } else {
                        Action::List
                    };
                    *cached = Some(Compiled {
                        schema: Arc::clone(&schema),
                        collection: Arc::clone(c),
                        auth_version: t.auth_version,
                        visibility: Arc::new(watch::visibility(
                            &schema,
                            &event_c,
                            rule_action,
                            &t.access(),
                            t.sub.text("filter"),
                        )),
                    });
                }
                checks.push(cached.as_ref().map(|k| Arc::clone(&k.visibility)));
            }
            let visible = decide(conn, &event_c, &change.record, &checks)?;
            let mut payloads: HashMap<String, Bytes> = HashMap::new();
            let mut out: Vec<(Arc<Client>, Message)> = Vec::new();
            for (t, _) in targets.iter().zip(&visible).filter(|(_, v)| **v) {
                let access = t.access();
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
