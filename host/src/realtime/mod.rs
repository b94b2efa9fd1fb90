//! Owns realtime: connected clients, their subscriptions and bounded queues, and which
//! committed changes each may see (through the records area's rules and serializer). Knows no
//! HTTP: `api/realtime.rs` frames the messages as SSE.
//!
//! Changes arrive from the records' feed (`records::feed`), in commit order, after their
//! COMMIT; the feed's call only queues them (the writer never waits on a subscriber). One task
//! delivers them in that order: each client gets each message it may see once per matching
//! subscription, in its own bounded queue; a client whose queue is full is disconnected (the
//! SDKs reconnect and subscribe again) instead of growing memory.

mod deliver;
mod queue;
pub(crate) mod topic;

use crate::config::RealtimeConfig;
use crate::records::feed::{Committed, Listener};
use crate::records::{Caller, Records};
use crate::schema::Collection;
use bytes::Bytes;
use queue::Queue;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use tokio::sync::mpsc;
use topic::Subscription;

/// One message for a client: the SSE event name and its JSON data.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub name: Arc<str>,
    pub data: Bytes,
}

/// A connected client.
pub(crate) struct Client {
    pub id: Arc<str>,
    /// The address the stream was opened from; subscriptions must come from it too.
    pub ip: String,
    state: Mutex<ClientState>,
    queue: Arc<Queue>,
}

/// A client's subscriptions, replaced whole by each subscription request.
type Subscriptions = Arc<Vec<Arc<Subscription>>>;

struct ClientState {
    /// The caller the client's subscriptions were set by (None: a guest).
    auth: Option<Arc<Caller>>,
    /// Bumped whenever `auth` changes, so compiled checks are redone.
    auth_version: u64,
    subs: Subscriptions,
}

impl Client {
    fn snapshot(&self) -> (Option<Arc<Caller>>, u64, Subscriptions) {
        match self.state.lock() {
            Ok(s) => (s.auth.clone(), s.auth_version, Arc::clone(&s.subs)),
            Err(_) => (None, 0, Arc::new(Vec::new())),
        }
    }
}

/// Why a subscription request was refused (PocketBase's answers: 404, 400, 403).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SubscribeError {
    UnknownClient,
    OtherAddress,
    OtherAuth,
}

/// The registry of clients, and the queue of committed changes to deliver.
pub(crate) struct Hub {
    cfg: RealtimeConfig,
    clients: Mutex<HashMap<Arc<str>, Arc<Client>>>,
    /// Subscriptions per collection key (a name or an id, as clients wrote it).
    interest: Mutex<HashMap<String, usize>>,
    /// Clients bound to an auth record, per auth collection id: their auth changes with it.
    bound: Mutex<HashMap<String, usize>>,
    /// All subscriptions: the writes' fast "nobody listens" answer.
    subscribed: AtomicUsize,
    /// The last commit queued for delivery (its `seq`).
    heard: AtomicU64,
    changes: mpsc::UnboundedSender<Arc<Committed>>,
}

/// A client's place in the hub for as long as its stream lives: dropping it disconnects the
/// client.
pub(crate) struct Registration {
    hub: Weak<Hub>,
    id: Arc<str>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            let _ = hub.remove(&self.id);
        }
    }
}

/// What a new stream gets: the client, the receiving end of its queue, and its registration.
pub(crate) struct Connection {
    pub client: Arc<Client>,
    pub messages: Messages,
    pub registration: Registration,
}

/// The receiving end of a client's queue.
pub(crate) struct Messages(Arc<Queue>);

impl Messages {
    /// Every message queued since the last call, in order, appended to `into`; `Ready(false)`
    /// once the client is disconnected and its queue is empty.
    pub(crate) fn poll_take(&self, cx: &mut Context<'_>, into: &mut Vec<Message>) -> Poll<bool> {
        self.0.poll_take(cx, into)
    }
}

fn bump(map: &Mutex<HashMap<String, usize>>, key: &str, up: bool) {
    if let Ok(mut m) = map.lock() {
        if up {
            *m.entry(key.to_owned()).or_default() += 1;
        } else if let Some(n) = m.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                m.remove(key);
            }
        }
    }
}

impl Hub {
    /// The hub, and its delivery task on the current runtime.
    pub(crate) fn start(cfg: RealtimeConfig, records: &Arc<Records>) -> Arc<Hub> {
        let (changes, rx) = mpsc::unbounded_channel();
        let hub = Arc::new(Hub {
            cfg,
            clients: Mutex::new(HashMap::new()),
            interest: Mutex::new(HashMap::new()),
            bound: Mutex::new(HashMap::new()),
            subscribed: AtomicUsize::new(0),
            heard: AtomicU64::new(0),
            changes,
        });
        tokio::spawn(deliver::run(
            Arc::downgrade(&hub),
            Arc::downgrade(records),
            rx,
        ));
        records.feed.listen(Arc::clone(&hub) as Arc<dyn Listener>);
        hub
    }

    /// Disconnect every client (the server is stopping): their streams end at once instead of
    /// holding the drain until its grace period is over.
    pub(crate) fn close_all(&self) {
        let all: Vec<Arc<str>> = self
            .clients
            .lock()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default();
        for id in all {
            let _ = self.remove(&id);
        }
    }

    pub(crate) fn config(&self) -> &RealtimeConfig {
        &self.cfg
    }

    /// A new client on a new stream opened from `ip`.
    pub(crate) fn connect(self: &Arc<Self>, ip: String) -> Connection {
        let queue = Queue::new(self.cfg.queue_len);
        let messages = Messages(Arc::clone(&queue));
        let id: Arc<str> = Arc::from(crate::schema::ids::secret(40));
        let client = Arc::new(Client {
            id: Arc::clone(&id),
            ip,
            state: Mutex::new(ClientState {
                auth: None,
                auth_version: 0,
                subs: Arc::new(Vec::new()),
            }),
            queue,
        });
        if let Ok(mut all) = self.clients.lock() {
            all.insert(Arc::clone(&id), Arc::clone(&client));
            crate::metrics::REALTIME_CLIENTS.inc();
        }
        Connection {
            client,
            messages,
            registration: Registration {
                hub: Arc::downgrade(self),
                id,
            },
        }
    }

    /// Take a client out of the hub; false when it was gone already.
    fn remove(&self, id: &str) -> bool {
        let gone = self.clients.lock().ok().and_then(|mut all| all.remove(id));
        let Some(client) = gone else {
            return false;
        };
        crate::metrics::REALTIME_CLIENTS.dec();
        client.queue.close();
        let (auth, _, subs) = client.snapshot();
        self.forget(&subs, auth.as_deref());
        true
    }

    fn forget(&self, subs: &[Arc<Subscription>], auth: Option<&Caller>) {
        for s in subs {
            bump(&self.interest, &s.collection, false);
        }
        self.subscribed.fetch_sub(subs.len(), Ordering::Relaxed);
        if let Some(a) = auth {
            bump(&self.bound, &a.collection.id, false);
        }
    }

    /// Replace a client's subscriptions (PocketBase's `POST /api/realtime`), binding it to the
    /// caller: a client bound to one auth record cannot be taken over by another (or by a
    /// guest); a guest client may be bound to an auth record.
    pub(crate) fn subscribe(
        &self,
        client_id: &str,
        ip: &str,
        who: Option<Caller>,
        topics: &[String],
    ) -> Result<(), SubscribeError> {
        let client = self
            .clients
            .lock()
            .ok()
            .and_then(|all| all.get(client_id).cloned())
            .ok_or(SubscribeError::UnknownClient)?;
        if !client.ip.is_empty() && client.ip != ip {
            return Err(SubscribeError::OtherAddress);
        }
        // One subscription per distinct topic; empty ones are skipped.
        let mut seen = std::collections::HashSet::new();
        let mut parsed: Vec<Subscription> = topics
            .iter()
            .filter(|t| !t.is_empty() && seen.insert(t.as_str()))
            .map(|t| Subscription::parse(t))
            .collect();
        let mut st = client
            .state
            .lock()
            .map_err(|_| SubscribeError::UnknownClient)?;
        if let Some(bound) = &st.auth
            && !who.as_ref().is_some_and(|w| same_auth(bound, w))
        {
            return Err(SubscribeError::OtherAuth);
        }
        // A new topic hears only commits after this one (PocketBase delivers a change to the
        // subscriptions there when it commits); a topic kept from before keeps its start.
        let now = self.heard.load(Ordering::SeqCst);
        for sub in &mut parsed {
            sub.since = st
                .subs
                .iter()
                .find(|old| old.name == sub.name)
                .map_or(now, |old| old.since);
        }
        let subs: Vec<Arc<Subscription>> = parsed.into_iter().map(Arc::new).collect();
        let old_subs = std::mem::replace(&mut st.subs, Arc::new(subs));
        let old_auth = std::mem::replace(&mut st.auth, who.map(Arc::new));
        st.auth_version += 1;
        for s in st.subs.iter() {
            bump(&self.interest, &s.collection, true);
        }
        self.subscribed.fetch_add(st.subs.len(), Ordering::Relaxed);
        if let Some(a) = &st.auth {
            bump(&self.bound, &a.collection.id, true);
        }
        drop(st);
        self.forget(&old_subs, old_auth.as_deref());
        Ok(())
    }

    /// Queue one message named `topic` for the client `id` alone, when it subscribed to `topic`
    /// and its stream was opened from `ip` (PocketBase's `@oauth2` delivery); false when it was
    /// not delivered.
    pub(crate) fn send_to(&self, id: &str, ip: &str, topic: &str, data: Bytes) -> bool {
        let Some(client) = self
            .clients
            .lock()
            .ok()
            .and_then(|all| all.get(id).cloned())
        else {
            return false;
        };
        let Ok(mut st) = client.state.lock() else {
            return false;
        };
        if !st.subs.iter().any(|s| &*s.name == topic) || (!client.ip.is_empty() && client.ip != ip)
        {
            return false;
        }
        // One message per subscription: the topic is dropped from the client's subscriptions.
        let (gone, kept): (Vec<_>, Vec<_>) =
            st.subs.iter().cloned().partition(|s| &*s.name == topic);
        st.subs = Arc::new(kept);
        drop(st);
        self.forget(&gone, None);
        let name = Arc::from(topic);
        client.queue.push(Message { name, data }).is_ok()
    }

    /// The clients now connected.
    fn clients(&self) -> Vec<Arc<Client>> {
        self.clients
            .lock()
            .map(|all| all.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Disconnect a client (its queue overflowed): its stream ends once it has written what
    /// was queued.
    fn drop_client(&self, id: &str) {
        if self.remove(id) {
            tracing::debug!(client = id, "realtime client too slow; disconnected");
            crate::metrics::REALTIME_DROPPED.inc();
        }
    }
}

fn same_auth(a: &Caller, b: &Caller) -> bool {
    a.collection.id == b.collection.id && a.id() == b.id()
}

impl Listener for Hub {
    fn wants(&self, c: &Collection) -> bool {
        if self.subscribed.load(Ordering::Relaxed) > 0
            && self
                .interest
                .lock()
                .is_ok_and(|m| m.contains_key(&c.name) || m.contains_key(&c.id))
        {
            return true;
        }
        c.is_auth() && self.bound.lock().is_ok_and(|m| m.contains_key(&c.id))
    }

    fn active(&self) -> bool {
        self.subscribed.load(Ordering::Relaxed) > 0
            || self.bound.lock().is_ok_and(|m| !m.is_empty())
    }

    fn committed(&self, change: &Arc<Committed>) {
        self.heard.fetch_max(change.seq, Ordering::SeqCst);
        let _ = self.changes.send(Arc::clone(change));
    }
}
