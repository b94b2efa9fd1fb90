//! Delivering one committed change: the clients whose subscriptions concern it, each
//! subscription's check for its caller (compiled once per subscription, schema and caller, then
//! cached), each distinct check run once per change, each distinct shape of the record
//! (`fields`, `expand`, what the caller may see) serialized once per change, and the messages
//! queued. A client whose queue is full is dropped.

use super::queue::Refused;
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
use std::hash::Hash;
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
    slots: HashMap<Bound<'a>, usize>,
    sets: Vec<&'a [Stored]>,
    /// (target, slot) pairs.
    members: Vec<(usize, usize)>,
}

/// A check's bound values as a map key: equal when they bind the same values (reals by their
/// bits), so subscribers binding the same values share one answer.
struct Bound<'a>(&'a [Stored]);

impl std::hash::Hash for Bound<'_> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_usize(self.0.len());
        for v in self.0 {
            match v {
                Stored::Null => h.write_u8(0),
                Stored::Int(i) => {
                    h.write_u8(1);
                    h.write_i64(*i);
                }
                Stored::Real(f) => {
                    h.write_u8(2);
                    h.write_u64(f.to_bits());
                }
                Stored::Text(t) => {
                    h.write_u8(3);
                    t.hash(h);
                }
            }
        }
    }
}

impl PartialEq for Bound<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self.0.iter().zip(other.0).all(|(a, b)| match (a, b) {
                (Stored::Real(x), Stored::Real(y)) => x.to_bits() == y.to_bits(),
                _ => a == b,
            })
    }
}

impl Eq for Bound<'_> {}

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
                let slot = *slots.entry(Bound(&sel.params)).or_insert_with(|| {
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
        let mut concerned = subs
            .iter()
            .filter(|s| s.since < change.seq && s.concerns(&c.name, &c.id, &id));
        let Some(first) = concerned.next() else {
            continue;
        };
        let auth = current_auth(&schema, auth);
        for sub in std::iter::once(first).chain(concerned) {
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
    let too_slow = records
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
            let mut payloads: HashMap<Shape<'_>, Bytes> = HashMap::new();
            let mut too_slow = Vec::new();
            for (t, _) in targets.iter().zip(&visible).filter(|(_, v)| **v) {
                let shape = Shape::of(c, t);
                let data = match payloads.get(&shape) {
                    Some(d) => d.clone(),
                    None => {
                        let fields = t.sub.text("fields").filter(|f| !f.is_empty());
                        let expand = t.sub.text("expand").filter(|e| !e.is_empty());
                        let record = watch::record_for(
                            conn,
                            &schema,
                            c,
                            change.record.clone(),
                            &t.access(),
                            fields,
                            expand,
                            t.sub.text("filter"),
                        )?;
                        let d = Bytes::from(crate::schema::value::go_json(
                            &json!({"record": record, "action": action}),
                        ));
                        payloads.insert(shape, d.clone());
                        d
                    }
                };
                // Queued as soon as it is built: a client's stream may write it while the
                // others' messages are still being made (when another worker is free).
                let queued = t.client.queue.push(Message {
                    name: Arc::clone(&t.sub.name),
                    data,
                });
                if queued == Err(Refused::Full) {
                    too_slow.push(Arc::clone(&t.client));
                }
            }
            Ok(too_slow)
        })
        .await?;
    for client in too_slow {
        hub.drop_client(&client.id);
    }
    Ok(())
}

/// What a serialized record depends on: its shape (`fields`, `expand`), what the caller may
/// see of it (superusers see hidden fields), and, for auth records (the email's visibility
/// depends on who asks) and expansions (which run under the caller's rules), who asks and the
/// request they replay.
#[derive(PartialEq, Eq, Hash)]
struct Shape<'a> {
    fields: &'a str,
    expand: &'a str,
    superuser: bool,
    who: Option<String>,
}

impl<'a> Shape<'a> {
    fn of(c: &Collection, t: &'a Target) -> Shape<'a> {
        let fields = t.sub.text("fields").unwrap_or("");
        let expand = t.sub.text("expand").unwrap_or("");
        let superuser = t.auth.as_deref().is_some_and(Caller::is_superuser);
        let who = (c.is_auth() || !expand.is_empty()).then(|| {
            let viewer = t.access().viewer();
            format!(
                "{}\0{}\0{:?}\0{:?}",
                viewer.caller_collection, viewer.caller_id, t.sub.query, t.sub.headers
            )
        });
        Shape {
            fields,
            expand,
            superuser,
            who,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

    /// Subscribers share a slot (one answer) exactly when their bound values print the same,
    /// which is how the slots were keyed before (`format!("{:?}")`): generated value sets of
    /// every kind, reals that equal integers, signed zeros and NaN included.
    #[test]
    fn bound_values_share_a_slot_exactly_when_they_are_the_same_values() {
        let mut next = crate::test_numbers(0x2545_f491_u64);
        let value = |next: &mut dyn FnMut(u64) -> u64| match next(7) {
            0 => Stored::Null,
            1 => Stored::Int(next(3) as i64),
            2 => Stored::Real(next(3) as f64),
            3 => Stored::Real([-0.0, 0.0, f64::NAN][next(3) as usize]),
            4 => Stored::Text(next(3).to_string()),
            5 => Stored::Text(String::new()),
            _ => Stored::Int(-1),
        };
        let sets: Vec<Vec<Stored>> = (0..400)
            .map(|_| (0..1 + next(3)).map(|_| value(&mut next)).collect())
            .collect();
        let hasher = RandomState::new();
        let (mut same, mut other) = (0, 0);
        for a in &sets {
            for b in &sets {
                let printed_same = format!("{a:?}") == format!("{b:?}");
                assert_eq!(Bound(a) == Bound(b), printed_same, "{a:?} vs {b:?}");
                if printed_same {
                    same += 1;
                    assert_eq!(hasher.hash_one(Bound(a)), hasher.hash_one(Bound(b)));
                } else {
                    other += 1;
                }
            }
        }
        assert!(same > sets.len() && other > 0, "the generator covers both");
    }
}
