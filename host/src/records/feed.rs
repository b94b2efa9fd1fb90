//! The commit-ordered stream of record changes. Every committed create, update and delete is
//! numbered once, right after its COMMIT (on the writer thread, before anyone hears back), and
//! handed to the listeners that want its collection: plugins' after-commit hooks and realtime.
//! A write nobody listens to costs one check per listener. A rolled-back write is never
//! published.

use crate::plugins::{Action, Principal};
use crate::schema::Collection;
use crate::store::StoreRecord;
use arc_swap::ArcSwap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One committed change.
#[derive(Debug)]
pub(crate) struct Committed {
    /// Commit order, from 1, shared by every listener.
    pub seq: u64,
    pub action: Action,
    /// The collection as of the write.
    pub collection: Arc<Collection>,
    /// The record as written (for a delete: as it was).
    pub record: StoreRecord,
    /// An update's record before it.
    pub previous: Option<StoreRecord>,
    /// Who made the change (None: a guest, or the server itself).
    pub actor: Option<Principal>,
}

/// Something that hears of committed changes.
pub(crate) trait Listener: Send + Sync {
    /// Whether changes of `c` concern this listener now. Asked before every write: keep it cheap.
    fn wants(&self, c: &Collection) -> bool;
    /// Whether any change may concern it now (a delete's cascades reach other collections).
    fn active(&self) -> bool;
    /// A committed change, in commit order. Runs on the writer thread: must not block (queue
    /// the work and return).
    fn committed(&self, change: &Arc<Committed>);
}

pub(crate) struct Feed {
    seq: AtomicU64,
    listeners: ArcSwap<Vec<Arc<dyn Listener>>>,
}

impl Default for Feed {
    fn default() -> Self {
        Self {
            seq: AtomicU64::new(0),
            listeners: ArcSwap::from_pointee(Vec::new()),
        }
    }
}

impl Feed {
    /// Add a listener (at start).
    pub(crate) fn listen(&self, l: Arc<dyn Listener>) {
        let mut all = (**self.listeners.load()).clone();
        all.push(l);
        self.listeners.store(Arc::new(all));
    }

    /// Whether any listener may want any change now.
    pub(crate) fn active(&self) -> bool {
        self.listeners.load().iter().any(|l| l.active())
    }

    /// Whether any listener wants changes of `c`.
    pub(crate) fn wants(&self, c: &Collection) -> bool {
        self.listeners.load().iter().any(|l| l.wants(c))
    }

    /// Number `change` and hand it to every listener. Called in commit order (on the writer).
    pub(crate) fn publish(&self, mut change: Committed) {
        change.seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        let change = Arc::new(change);
        for l in self.listeners.load().iter() {
            l.committed(&change);
        }
    }
}

/// Plugins' after-commit hooks as a listener: the changes of collections some plugin hooks after
/// commit, converted to the plugins' records and queued for their dispatcher.
pub(crate) struct AfterCommitHooks(pub Arc<crate::plugins::Plugins>);

impl Listener for AfterCommitHooks {
    fn wants(&self, c: &Collection) -> bool {
        self.0
            .registry()
            .hooks(&c.id)
            .is_some_and(|s| !s.after_commit.is_empty())
    }

    fn active(&self) -> bool {
        !self.0.registry().plugins.is_empty()
    }

    fn committed(&self, change: &Arc<Committed>) {
        if !self.wants(&change.collection) {
            return;
        }
        let c = &change.collection;
        self.0.committed(vec![crate::plugins::Change {
            action: change.action,
            collection_id: c.id.clone(),
            record: crate::plugins::PluginRecord::from_stored(c, &change.record),
            previous: change
                .previous
                .as_ref()
                .map(|p| crate::plugins::PluginRecord::from_stored(c, p)),
            actor: change.actor.clone(),
            seq: change.seq,
        }]);
    }
}
