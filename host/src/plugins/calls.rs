//! The typed entry points the registry and the api call: record hooks, in-transaction hooks,
//! after-commit events, routes, cron jobs and the auth hook.

use super::bindings::auth::exports::ferrobase::plugin::auth_hooks as ah;
use super::bindings::exports::ferrobase::plugin::{
    commit_events as ev, record_hooks as rh, routes as rt, transaction_hooks as th,
};
use super::convert::PluginRecord;
use super::host::TxOp;
use super::instance::{Call, CallError, Loaded, Reply};
use super::{CallFacts, Principal, Rejection};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Create, update or delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Create,
    Update,
    Delete,
}

/// What a before-hook chain decided.
#[derive(Debug)]
pub(crate) enum HookOutcome {
    /// Go on; apply these (field, Some(value) | None = unset) changes first.
    Proceed(Vec<(String, Option<super::FieldValue>)>),
    Rejected(Rejection),
    /// The plugin failed (trap, timeout, memory): the write does not happen.
    Failed(String),
}

/// What an auth hook decided.
#[derive(Debug)]
pub(crate) enum AuthOutcome {
    /// Go on; add these (key, value) notes to the answer's `meta`.
    Proceed(Vec<(String, String)>),
    Rejected(Rejection),
    /// The plugin failed (trap, timeout, memory): the sign-in does not happen.
    Failed(String),
}

/// A committed change for after-commit hooks.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub action: Action,
    pub collection_id: String,
    pub record: PluginRecord,
    pub previous: Option<PluginRecord>,
    pub actor: Option<Principal>,
    pub seq: u64,
}

pub(crate) struct RouteRequest {
    pub method: String,
    pub path: String,
    pub route: String,
    pub params: Vec<(String, String)>,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

pub(crate) struct RouteResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Loaded {
    /// A record hook's answer (or its failure) as the write path sees it.
    fn hook_outcome(&self, r: Result<Reply, CallError>) -> HookOutcome {
        match r {
            Err(e) => HookOutcome::Failed(format!("plugin {} {e}", self.name())),
            Ok(Reply::Verdict(Ok(rh::Verdict::Proceed)) | Reply::Unit(Ok(()))) => {
                HookOutcome::Proceed(Vec::new())
            }
            Ok(Reply::Verdict(Ok(rh::Verdict::Patch(changes)))) => HookOutcome::Proceed(
                changes
                    .into_iter()
                    .map(|c| match c {
                        rh::FieldChange::Set((k, v)) => (k, Some(v.into())),
                        rh::FieldChange::Unset(k) => (k, None),
                    })
                    .collect(),
            ),
            Ok(Reply::Verdict(Err(rej)) | Reply::Unit(Err(rej))) => {
                HookOutcome::Rejected(rej.into())
            }
            Ok(_) => {
                HookOutcome::Failed(format!("plugin {} answered the wrong shape", self.name()))
            }
        }
    }
}

impl Loaded {
    /// A record as this plugin may see it (hidden fields only with their grant).
    fn record(&self, r: &PluginRecord) -> rh::RecordData {
        let schema = self.rt.store.schema();
        let live = self.env.live();
        super::convert::record_for(r, &schema, |c, f| live.hidden(c, f))
    }

    /// before-create / before-update: (current for updates, pending).
    pub(crate) async fn before_write(
        &self,
        facts: Arc<CallFacts>,
        current: Option<&PluginRecord>,
        pending: &PluginRecord,
    ) -> HookOutcome {
        let p = self.record(pending);
        let r = match current {
            None => self.call(Call::BeforeCreate(&p), facts, None).await,
            Some(c) => {
                let c = self.record(c);
                self.call(Call::BeforeUpdate(&c, &p), facts, None).await
            }
        };
        self.hook_outcome(r)
    }

    pub(crate) async fn before_delete(
        &self,
        facts: Arc<CallFacts>,
        current: &PluginRecord,
    ) -> HookOutcome {
        let c = self.record(current);
        self.hook_outcome(self.call(Call::BeforeDelete(&c), facts, None).await)
    }

    pub(crate) async fn in_transaction(
        &self,
        facts: Arc<CallFacts>,
        action: Action,
        record: &PluginRecord,
        tx: mpsc::UnboundedSender<TxOp>,
    ) -> HookOutcome {
        let a = match action {
            Action::Create => th::Action::Create,
            Action::Update => th::Action::Update,
            Action::Delete => th::Action::Delete,
        };
        let r = self.record(record);
        self.hook_outcome(self.call(Call::InTx(a, &r), facts, Some(tx)).await)
    }

    pub(crate) async fn after_commit(&self, changes: &[Change]) -> Result<(), String> {
        let list: Vec<ev::Change> = changes
            .iter()
            .map(|c| ev::Change {
                action: match c.action {
                    Action::Create => ev::Action::Create,
                    Action::Update => ev::Action::Update,
                    Action::Delete => ev::Action::Delete,
                },
                data: self.record(&c.record),
                previous: c.previous.as_ref().map(|p| self.record(p)),
                actor: c.actor.as_ref().map(Into::into),
                seq: c.seq,
            })
            .collect();
        let facts = Arc::new(CallFacts {
            system: true,
            ..CallFacts::default()
        });
        match self.call(Call::AfterCommit(&list), facts, None).await {
            Ok(Reply::Event(r)) => r,
            Ok(_) => Err("wrong shape".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    pub(crate) async fn route(
        &self,
        facts: Arc<CallFacts>,
        req: RouteRequest,
    ) -> Result<RouteResponse, CallError> {
        let r = rt::HttpRequest {
            method: req.method,
            path: req.path,
            route: req.route,
            params: req.params,
            query: req.query,
            headers: req.headers,
            body: req.body,
        };
        match self.call(Call::Route(&r), facts, None).await? {
            Reply::Response(r) => Ok(RouteResponse {
                status: r.status,
                headers: r.headers,
                body: r.body,
            }),
            _ => Err(CallError::Trap("wrong shape".into())),
        }
    }

    /// The auth hook on a sign-in about to succeed: `method` ("password", "otp", "oauth2",
    /// "refresh"), the auth record, the OAuth2 provider.
    pub(crate) async fn authenticate(
        &self,
        facts: Arc<CallFacts>,
        method: &str,
        record: &PluginRecord,
        provider: Option<&str>,
    ) -> AuthOutcome {
        let attempt = ah::AuthAttempt {
            method: method.to_owned(),
            auth_record: self.record(record),
            provider: provider.map(str::to_owned),
        };
        match self.call(Call::Authenticate(&attempt), facts, None).await {
            Ok(Reply::Notes(Ok(notes))) => AuthOutcome::Proceed(notes),
            Ok(Reply::Notes(Err(rej))) => AuthOutcome::Rejected(rej.into()),
            Ok(_) => {
                AuthOutcome::Failed(format!("plugin {} answered the wrong shape", self.name()))
            }
            Err(e) => AuthOutcome::Failed(format!("plugin {} {e}", self.name())),
        }
    }

    pub(crate) async fn job(&self, name: &str, at_ms: u64) -> Result<(), String> {
        let facts = Arc::new(CallFacts {
            system: true,
            ..CallFacts::default()
        });
        match self.call(Call::Job(name, at_ms), facts, None).await {
            Ok(Reply::Event(r)) => r,
            Ok(_) => Err("wrong shape".into()),
            Err(e) => Err(e.to_string()),
        }
    }
}
