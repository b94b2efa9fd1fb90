//! Turns a [`Plugin`] into the seven generated `Guest` traits. The generated export macro takes an
//! identifier, so `export!` names `Adapter<YourPlugin>` with a local type alias.

use core::marker::PhantomData;

use crate::Plugin;
use crate::bindings::exports::ferrobase::plugin::{
    auth_hooks, commit_events, jobs, manifest, record_hooks, routes, transaction_hooks,
};
use crate::bindings::ferrobase::plugin::context::CallContext;
use crate::bindings::ferrobase::plugin::types::{RecordData, Rejection};
use crate::context::Context;
use crate::record::{Action, Change, Verdict};

/// The type the generated bindings are exported for.
pub struct Adapter<P>(PhantomData<P>);

impl<P: Plugin> manifest::Guest for Adapter<P> {
    fn describe() -> manifest::Manifest {
        P::manifest().into_wit()
    }
}

impl<P: Plugin> record_hooks::Guest for Adapter<P> {
    fn before_create(ctx: &CallContext, pending: RecordData) -> Result<Verdict, Rejection> {
        P::before_create(&Context::new(ctx), &pending)
    }

    fn before_update(
        ctx: &CallContext,
        current: RecordData,
        pending: RecordData,
    ) -> Result<Verdict, Rejection> {
        P::before_update(&Context::new(ctx), &current, &pending)
    }

    fn before_delete(ctx: &CallContext, current: RecordData) -> Result<(), Rejection> {
        P::before_delete(&Context::new(ctx), &current)
    }
}

impl<P: Plugin> transaction_hooks::Guest for Adapter<P> {
    fn in_transaction(
        ctx: &CallContext,
        action: transaction_hooks::Action,
        data: RecordData,
    ) -> Result<(), Rejection> {
        P::in_transaction(&Context::new(ctx), action.into(), &data)
    }
}

impl<P: Plugin> commit_events::Guest for Adapter<P> {
    fn after_commit(changes: Vec<commit_events::Change>) -> Result<(), String> {
        let changes: Vec<Change> = changes.into_iter().map(Change::from).collect();
        P::after_commit(&changes)
    }
}

impl<P: Plugin> routes::Guest for Adapter<P> {
    fn handle(ctx: &CallContext, req: routes::HttpRequest) -> routes::HttpResponse {
        P::handle(&Context::new(ctx), &req)
    }
}

impl<P: Plugin> jobs::Guest for Adapter<P> {
    fn run(ctx: &CallContext, name: String, scheduled_at_ms: u64) -> Result<(), String> {
        P::run(&Context::new(ctx), &name, scheduled_at_ms)
    }
}

impl<P: Plugin> auth_hooks::Guest for Adapter<P> {
    fn authenticate(
        ctx: &CallContext,
        attempt: auth_hooks::AuthAttempt,
    ) -> Result<Vec<(String, String)>, Rejection> {
        P::authenticate(&Context::new(ctx), &attempt)
    }
}

impl From<transaction_hooks::Action> for Action {
    fn from(action: transaction_hooks::Action) -> Self {
        match action {
            transaction_hooks::Action::Create => Action::Create,
            transaction_hooks::Action::Update => Action::Update,
            transaction_hooks::Action::Delete => Action::Delete,
        }
    }
}

impl From<commit_events::Action> for Action {
    fn from(action: commit_events::Action) -> Self {
        match action {
            commit_events::Action::Create => Action::Create,
            commit_events::Action::Update => Action::Update,
            commit_events::Action::Delete => Action::Delete,
        }
    }
}

impl From<commit_events::Change> for Change {
    fn from(change: commit_events::Change) -> Self {
        Change {
            action: change.action.into(),
            record: change.data,
            previous: change.previous,
            actor: change.actor,
            seq: change.seq,
        }
    }
}
