//! A loaded plugin: its settings and manifest, its instance pool, and the one call path with
//! its budgets, memory cap and error classification.

use super::CallFacts;
use super::bindings::auth::exports::ferrobase::plugin::auth_hooks as ah;
use super::bindings::exports::ferrobase::plugin::{
    commit_events as ev, manifest as mf, record_hooks as rh, routes as rt, transaction_hooks as th,
};
use super::bindings::{Plugin, PluginIndices, PluginPre};
use super::engine::{Runtime, hex, root_message};
use super::host::{CallCtx, HIDDEN_PREFIX, HostState, Live, PluginEnv, TxOp};
use crate::config::{PluginEntry, PluginsConfig};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc};
use wasmtime::component::Resource;
use wasmtime::{Store as WStore, UpdateDeadline};

/// The capabilities a plugin may want (and pb.toml grant), besides
/// `db:hidden:<collection>.<field>`.
const CAPABILITIES: &[&str] = &["db:read", "db:write", "kv", "http", "clock"];

/// Why a capability name is not one: `None` when it is.
fn capability_problem(want: &str) -> Option<String> {
    if CAPABILITIES.contains(&want) {
        return None;
    }
    let ok = want
        .strip_prefix(HIDDEN_PREFIX)
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(c, f)| {
            let word =
                |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            word(c) && word(f)
        });
    (!ok).then(|| format!("wants unknown capability {want:?}"))
}

/// The limits one plugin runs under (pb.toml's `[plugins.<name>]` over `[plugins]`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
    /// What the plugin holds: pb.toml's grants that its manifest also wants.
    pub grants: Vec<String>,
    pub http_allow: Vec<String>,
    pub memory: usize,
    pub hook_timeout: Duration,
    pub in_tx_timeout: Duration,
    pub route_timeout: Duration,
    pub job_timeout: Duration,
    pub max_instances: usize,
    pub max_calls_per_instance: u64,
    pub config: std::collections::BTreeMap<String, String>,
}

impl Settings {
    /// The settings of a plugin that wants `wants`. Grants are pb.toml's intersected with
    /// `wants`: a plugin holds only what it asked for.
    pub(crate) fn resolve(
        cfg: &PluginsConfig,
        e: Option<&PluginEntry>,
        engine_max: usize,
        wants: &[String],
    ) -> Self {
        let d = PluginEntry::default();
        let e = e.unwrap_or(&d);
        let ms = |v: Option<u64>, dflt: u64| Duration::from_millis(v.unwrap_or(dflt));
        let configured = e.grants.as_ref().unwrap_or(&cfg.default_grants);
        Self {
            grants: configured
                .iter()
                .filter(|g| wants.contains(g))
                .cloned()
                .collect(),
            http_allow: e.http_allow.clone(),
            memory: usize::try_from(e.memory_mb.unwrap_or(cfg.memory_mb) << 20)
                .unwrap_or(usize::MAX)
                .min(engine_max),
            hook_timeout: ms(e.hook_timeout_ms, cfg.hook_timeout_ms),
            in_tx_timeout: ms(e.in_tx_timeout_ms, cfg.in_tx_timeout_ms),
            route_timeout: ms(e.route_timeout_ms, cfg.route_timeout_ms),
            job_timeout: ms(e.job_timeout_ms, cfg.job_timeout_ms),
            max_instances: e.max_instances.unwrap_or(cfg.max_instances).max(1),
            max_calls_per_instance: cfg.max_calls_per_instance.max(1),
            config: e.config.clone(),
        }
    }

    /// What its instances hold while a call runs (see [`Live`]).
    pub(crate) fn live(&self) -> Live {
        Live {
            grants: self.grants.clone(),
            http_allow: self.http_allow.clone(),
        }
    }
}

/// What pb.toml says about one described plugin.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    /// It may run, with these settings.
    Run(Settings),
    /// `enabled = false`.
    Disabled,
    /// It wants what pb.toml does not grant (or something that is no capability).
    Refused(String),
}

/// Decide what pb.toml allows a plugin with this manifest.
pub(crate) fn configure(cfg: &PluginsConfig, m: &Manifest, engine_max: usize) -> Verdict {
    let entry = cfg.each.get(&m.name);
    if entry.and_then(|e| e.enabled) == Some(false) {
        return Verdict::Disabled;
    }
    let configured = entry
        .and_then(|e| e.grants.as_ref())
        .unwrap_or(&cfg.default_grants);
    for want in &m.wants {
        if let Some(problem) = capability_problem(want) {
            return Verdict::Refused(problem);
        }
        if !configured.contains(want) {
            return Verdict::Refused(format!(
                "wants {want:?}, which pb.toml does not grant (add it to [plugins.{}] grants)",
                m.name
            ));
        }
    }
    if let Some(problem) = entry
        .into_iter()
        .flat_map(|e| e.http_allow.iter())
        .find_map(|a| super::sandbox::entry_problem(a))
    {
        return Verdict::Refused(problem);
    }
    Verdict::Run(Settings::resolve(cfg, entry, engine_max, &m.wants))
}

/// What pb.toml lets a plugin with this manifest hold now, whether or not it may run: calls
/// still in flight on a version that stops serving keep no more than this.
pub(crate) fn allowed_now(cfg: &PluginsConfig, m: &Manifest, engine_max: usize) -> Live {
    let entry = cfg.each.get(&m.name);
    if entry.and_then(|e| e.enabled) == Some(false) {
        return Live::default();
    }
    Settings::resolve(cfg, entry, engine_max, &m.wants).live()
}

/// The manifest, as plain data.
#[derive(Debug, Clone)]
pub(crate) struct Manifest {
    pub name: String,
    pub version: String,
    pub hooks: Vec<(String, Vec<mf::HookEvent>)>,
    pub routes: Vec<mf::RouteBinding>,
    pub jobs: Vec<mf::JobBinding>,
    pub wants: Vec<String>,
    /// The auth collections (names, or `*`) whose sign-ins it hooks: the manifest extra
    /// `auth-hooks`, comma-separated.
    pub auth_hooks: Vec<String>,
}

/// The manifest extra naming the auth collections a plugin hooks.
const AUTH_HOOKS_EXTRA: &str = "auth-hooks";

/// A warm instance: its store (with its limits) and the typed exports.
struct Inst {
    pub(super) store: WStore<HostState>,
    pub(super) plugin: Plugin,
    /// The auth hook, when the component exports it (world `plugin-auth`).
    pub(super) auth: Option<ah::Guest>,
    pub(super) calls: u64,
}

/// One version of one plugin file as compiled and described: everything that does not depend
/// on pb.toml. Instances are made from it under the settings pb.toml gives (a [`Loaded`]).
pub(crate) struct Code {
    pub file: PathBuf,
    pub hash: String,
    pub manifest: Manifest,
    pub compile_ms: u128,
    pub from_cache: bool,
    pub loaded_at: String,
    pre: PluginPre<HostState>,
    indices: PluginIndices,
    /// Where the auth hook is, when the component exports one.
    auth: Option<ah::GuestIndices>,
}

/// One version of one plugin, instantiated under one set of settings.
pub(crate) struct Loaded {
    pub code: Arc<Code>,
    pub file: PathBuf,
    pub hash: String,
    pub manifest: Manifest,
    pub settings: Settings,
    pub compile_ms: u128,
    pub from_cache: bool,
    pub loaded_at: String,
    pub(super) rt: Arc<Runtime>,
    pub(super) env: Arc<PluginEnv>,
    pool: Mutex<Vec<Inst>>,
    pub(super) slots: Arc<Semaphore>,
    /// Set when a newer version replaced this one: instances are dropped, not pooled.
    retired: AtomicBool,
    pub stats: Arc<CallStats>,
    /// The plugin's cells in the process's metrics (by name: they outlive its versions).
    metrics: Arc<crate::metrics::PluginCells>,
}

#[derive(Default)]
pub(crate) struct CallStats {
    pub calls: AtomicU64,
    pub failures: AtomicU64,
    /// Host calls the sandbox refused (missing grant, denied SQL, http not allowed...).
    pub refusals: AtomicU64,
    /// Calls running now (on any version of the plugin).
    pub in_flight: AtomicU64,
    pub last_error: Mutex<Option<String>>,
}

/// One call counted in flight while it lives.
struct InFlight<'a>(&'a AtomicU64);

impl<'a> InFlight<'a> {
    fn new(n: &'a AtomicU64) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Self(n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl CallStats {
    fn last(&self, what: String) {
        if let Ok(mut l) = self.last_error.lock() {
            *l = Some(format!("{}: {what}", crate::schema::ids::now()));
        }
    }

    pub(crate) fn refusal(&self, what: String) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
        self.last(what);
    }
}

/// What kind of call: decides the time budget and what the host API allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CallKind {
    Describe,
    BeforeHook,
    InTransaction,
    AfterCommit,
    Route,
    Job,
    /// A sign-in about to succeed (the hook-timeout budget; writes run as their own jobs).
    AuthHook,
}

/// Why a call did not produce an answer.
#[derive(Debug, Clone)]
pub(crate) enum CallError {
    /// Ran past its time budget.
    Timeout(Duration),
    /// Tried to grow memory past its cap.
    OutOfMemory(usize),
    /// Trapped, panicked, or returned something the host could not take.
    Trap(String),
    /// The runtime could not make an instance.
    Unavailable(String),
    /// The sandbox refused a host call that has no error to answer with (kv without its grant).
    Refused(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout(d) => write!(f, "stopped after its {} ms budget", d.as_millis()),
            Self::OutOfMemory(m) => write!(f, "stopped at its memory cap of {} MiB", m >> 20),
            Self::Trap(t) => write!(f, "trapped: {t}"),
            Self::Unavailable(t) => write!(f, "unavailable: {t}"),
            Self::Refused(t) => f.write_str(t),
        }
    }
}

/// A call's arguments.
pub(super) enum Call<'a> {
    Describe,
    BeforeCreate(&'a rh::RecordData),
    BeforeUpdate(&'a rh::RecordData, &'a rh::RecordData),
    BeforeDelete(&'a rh::RecordData),
    InTx(th::Action, &'a th::RecordData),
    AfterCommit(&'a [ev::Change]),
    Route(&'a rt::HttpRequest),
    Job(&'a str, u64),
    Authenticate(&'a ah::AuthAttempt),
}

pub(super) enum Reply {
    Manifest(mf::Manifest),
    Verdict(Result<rh::Verdict, rh::Rejection>),
    Unit(Result<(), rh::Rejection>),
    Event(Result<(), String>),
    Response(rt::HttpResponse),
    Notes(Result<Vec<(String, String)>, rh::Rejection>),
}

impl Code {
    /// Compile the component (or map it from the compile cache), instantiate it once with no
    /// grants at all, and ask its manifest. Nothing about pb.toml is decided here.
    pub(crate) async fn load(
        rt: &Arc<Runtime>,
        file: PathBuf,
        bytes: Vec<u8>,
    ) -> Result<Arc<Self>, String> {
        let started = Instant::now();
        let hash = hex(&Sha256::digest(&bytes)[..8]);
        let rt2 = Arc::clone(rt);
        let (component, from_cache) = tokio::task::spawn_blocking(move || rt2.compile(&bytes))
            .await
            .map_err(|e| e.to_string())??;
        let compile_ms = started.elapsed().as_millis();
        let not_ours = |e: wasmtime::Error| {
            format!(
                "not a ferrobase:plugin@0.1.x component: {}",
                root_message(&e)
            )
        };
        let pre = rt.linker.instantiate_pre(&component).map_err(not_ours)?;
        let pre = PluginPre::new(pre).map_err(not_ours)?;
        let indices = PluginIndices::new(pre.instance_pre()).map_err(not_ours)?;
        let auth = ah::GuestIndices::new(pre.instance_pre()).ok();
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let code = Arc::new(Self {
            file,
            hash,
            manifest: Manifest {
                name: stem,
                version: String::new(),
                hooks: Vec::new(),
                routes: Vec::new(),
                jobs: Vec::new(),
                wants: Vec::new(),
                auth_hooks: Vec::new(),
            },
            compile_ms,
            from_cache,
            loaded_at: crate::schema::ids::now(),
            pre,
            indices,
            auth,
        });
        // describe runs with no grants and the default limits: it may not use the host.
        let boot = Settings::resolve(&PluginsConfig::default(), None, rt.max_memory, &[]);
        let probe = Loaded::new(Arc::clone(&code), boot, rt, Arc::default());
        let m = match probe
            .call(Call::Describe, Arc::new(CallFacts::default()), None)
            .await
            .map_err(|e| format!("describe failed: {e}"))?
        {
            Reply::Manifest(m) => m,
            _ => return Err("describe returned something else".into()),
        };
        drop(probe);
        let manifest = Manifest {
            name: m.name,
            version: m.version,
            hooks: m
                .hooks
                .into_iter()
                .map(|h| (h.collection, h.events))
                .collect(),
            routes: m.routes,
            jobs: m.jobs,
            wants: m.wants,
            auth_hooks: m
                .extra
                .iter()
                .filter(|(k, _)| k == AUTH_HOOKS_EXTRA)
                .flat_map(|(_, v)| v.split(','))
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect(),
        };
        if !manifest.auth_hooks.is_empty() && code.auth.is_none() {
            return Err(format!(
                "its manifest hooks sign-ins ({AUTH_HOOKS_EXTRA}) but it does not export \
                 ferrobase:plugin/auth-hooks (0.1.2 or later: build it for the world plugin-auth)"
            ));
        }
        if manifest.name.is_empty()
            || !manifest
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(format!(
                "manifest name {:?} must be non-empty letters, digits, - and _",
                manifest.name
            ));
        }
        let mut code = Arc::try_unwrap(code)
            .map_err(|_| "the describe instance outlived its call".to_owned())?;
        code.manifest = manifest;
        Ok(Arc::new(code))
    }

    pub(crate) fn name(&self) -> &str {
        &self.manifest.name
    }
}

impl Loaded {
    /// Instances of `code` under `settings`: a fresh pool, nothing instantiated yet. `stats`
    /// are the plugin file's (they outlive its versions).
    fn new(code: Arc<Code>, settings: Settings, rt: &Arc<Runtime>, stats: Arc<CallStats>) -> Self {
        let env = Arc::new(PluginEnv::new(
            code.manifest.name.clone(),
            settings.clone(),
            Arc::clone(rt),
            stats,
        ));
        Self {
            file: code.file.clone(),
            hash: code.hash.clone(),
            manifest: code.manifest.clone(),
            compile_ms: code.compile_ms,
            from_cache: code.from_cache,
            loaded_at: code.loaded_at.clone(),
            slots: Arc::new(Semaphore::new(settings.max_instances)),
            stats: Arc::clone(&env.stats),
            metrics: crate::metrics::plugin(&code.manifest.name),
            settings,
            rt: Arc::clone(rt),
            env,
            pool: Mutex::new(Vec::new()),
            retired: AtomicBool::new(false),
            code,
        }
    }

    /// `code` ready to serve under `settings`, with one instance warm so the first request
    /// does not pay for instantiation.
    pub(crate) async fn start(
        code: &Arc<Code>,
        settings: Settings,
        rt: &Arc<Runtime>,
        stats: Arc<CallStats>,
    ) -> Arc<Self> {
        let me = Arc::new(Self::new(Arc::clone(code), settings, rt, stats));
        if let Ok(inst) = me.instantiate().await {
            me.give_back(inst);
        }
        me
    }

    /// Whether this serves `code` under exactly `settings` (nothing to re-instantiate).
    pub(crate) fn is(&self, code: &Arc<Code>, settings: &Settings) -> bool {
        Arc::ptr_eq(&self.code, code) && self.settings == *settings
    }

    /// What calls still running on this version may do from now on: never more than `next`.
    pub(crate) fn narrow(&self, next: &Live) {
        self.env.narrow(next);
    }

    pub(crate) fn name(&self) -> &str {
        &self.manifest.name
    }

    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
        if let Ok(mut p) = self.pool.lock() {
            p.clear();
        }
    }

    async fn instantiate(&self) -> Result<Inst, CallError> {
        let _ticking = self.rt.running();
        let state = HostState::new(Arc::clone(&self.env));
        let mut store = WStore::new(&self.rt.engine, state);
        store.limiter(|s| &mut s.limits);
        store.epoch_deadline_callback(|ctx| {
            if Instant::now() >= ctx.data().deadline {
                Ok(UpdateDeadline::Interrupt)
            } else {
                // Give the executor a turn every tick: a long call never holds a worker.
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store.data_mut().deadline = Instant::now() + Duration::from_secs(30);
        store.set_epoch_deadline(1);
        let failed = |e: wasmtime::Error, store: &WStore<HostState>| {
            classify(&e, store, Duration::from_secs(30))
        };
        let instance = match self
            .code
            .pre
            .instance_pre()
            .instantiate_async(&mut store)
            .await
        {
            Ok(i) => i,
            Err(e) => return Err(failed(e, &store)),
        };
        let plugin = match self.code.indices.load(&mut store, &instance) {
            Ok(p) => p,
            Err(e) => return Err(failed(e, &store)),
        };
        let auth = match self
            .code
            .auth
            .as_ref()
            .map(|ix| ix.load(&mut store, &instance))
        {
            None => None,
            Some(Ok(g)) => Some(g),
            Some(Err(e)) => return Err(failed(e, &store)),
        };
        Ok(Inst {
            store,
            plugin,
            auth,
            calls: 0,
        })
    }

    fn give_back(&self, inst: Inst) {
        if self.retired.load(Ordering::Relaxed)
            || inst.calls >= self.settings.max_calls_per_instance
        {
            return;
        }
        if let Ok(mut p) = self.pool.lock()
            && p.len() < self.settings.max_instances
        {
            p.push(inst);
        }
    }

    pub(super) fn budget(&self, kind: CallKind) -> Duration {
        match kind {
            CallKind::Describe => Duration::from_secs(10),
            CallKind::BeforeHook | CallKind::AuthHook => self.settings.hook_timeout,
            CallKind::InTransaction => self.settings.in_tx_timeout,
            CallKind::AfterCommit | CallKind::Job => self.settings.job_timeout,
            CallKind::Route => self.settings.route_timeout,
        }
    }

    /// One call into the plugin, within its budget, on a warm instance when one is free.
    /// Nested calls (a hook run for a plugin's own write) and in-transaction calls skip the
    /// queues: waiting there could wait on the very call that is waiting for them.
    pub(super) async fn call(
        &self,
        call: Call<'_>,
        facts: Arc<CallFacts>,
        tx: Option<mpsc::UnboundedSender<TxOp>>,
    ) -> Result<Reply, CallError> {
        let kind = match &call {
            Call::Describe => CallKind::Describe,
            Call::BeforeCreate(_) | Call::BeforeUpdate(..) | Call::BeforeDelete(_) => {
                CallKind::BeforeHook
            }
            Call::InTx(..) => CallKind::InTransaction,
            Call::AfterCommit(_) => CallKind::AfterCommit,
            Call::Route(_) => CallKind::Route,
            Call::Job(..) => CallKind::Job,
            Call::Authenticate(_) => CallKind::AuthHook,
        };
        let _in_flight = InFlight::new(&self.stats.in_flight);
        let _ticking = self.rt.running();
        let queued = facts.depth == 0 && kind != CallKind::InTransaction;
        let _global = if queued {
            Some(
                Arc::clone(&self.rt.permits)
                    .acquire_owned()
                    .await
                    .map_err(|_| CallError::Unavailable("shutting down".into()))?,
            )
        } else {
            None
        };
        let _slot = if queued {
            Some(
                Arc::clone(&self.slots)
                    .acquire_owned()
                    .await
                    .map_err(|_| CallError::Unavailable("shutting down".into()))?,
            )
        } else {
            None
        };
        let pooled = self.pool.lock().ok().and_then(|mut p| p.pop());
        let mut inst = match pooled {
            Some(i) => i,
            None => self.instantiate().await?,
        };
        let budget = self.budget(kind);
        let started = Instant::now();
        let deadline = started + budget;
        let call_id = self.rt.next_call_id();
        {
            let d = inst.store.data_mut();
            d.begin(kind, Arc::clone(&facts), deadline, call_id, tx);
        }
        inst.store.set_epoch_deadline(1);
        let ctx = inst
            .store
            .data_mut()
            .table
            .push(CallCtx {
                id: call_id,
                facts,
                deadline,
            })
            .map_err(|e| CallError::Unavailable(e.to_string()))?;
        // Epochs stop guest code; this also bounds time spent waiting in host calls.
        let outer = budget + Duration::from_millis(250);
        let fut = run(&mut inst, call, ctx);
        let result = match tokio::time::timeout(outer, fut).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(classify(&e, &inst.store, budget)),
            // Stuck in a host call past the budget (epochs only stop guest code).
            Err(_) => Err(CallError::Timeout(budget)),
        };
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        self.metrics.call(result.is_err());
        match result {
            Ok(reply) => {
                inst.calls += 1;
                inst.store.data_mut().end();
                self.give_back(inst);
                Ok(reply)
            }
            Err(err) => {
                // A trapped instance is never reused: its memory may be mid-update.
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                self.stats.last(err.to_string());
                tracing::warn!(plugin = %self.manifest.name, kind = ?kind, error = %err, elapsed_ms = started.elapsed().as_millis() as u64, "plugin call failed");
                Err(err)
            }
        }
    }
}

async fn run(inst: &mut Inst, call: Call<'_>, ctx: Resource<CallCtx>) -> wasmtime::Result<Reply> {
    let s = &mut inst.store;
    let p = &inst.plugin;
    let auth = inst.auth.as_ref();
    // The guest borrows the host's table entry for the length of the call.
    let lent = Resource::new_borrow(ctx.rep());
    let reply = match call {
        Call::Describe => {
            Reply::Manifest(p.ferrobase_plugin_manifest().call_describe(&mut *s).await?)
        }
        Call::BeforeCreate(r) => Reply::Verdict(
            p.ferrobase_plugin_record_hooks()
                .call_before_create(&mut *s, lent, r)
                .await?,
        ),
        Call::BeforeUpdate(cur, new) => Reply::Verdict(
            p.ferrobase_plugin_record_hooks()
                .call_before_update(&mut *s, lent, cur, new)
                .await?,
        ),
        Call::BeforeDelete(r) => Reply::Unit(
            p.ferrobase_plugin_record_hooks()
                .call_before_delete(&mut *s, lent, r)
                .await?,
        ),
        Call::InTx(a, r) => Reply::Unit(
            p.ferrobase_plugin_transaction_hooks()
                .call_in_transaction(&mut *s, lent, a, r)
                .await?,
        ),
        Call::AfterCommit(changes) => Reply::Event(
            p.ferrobase_plugin_commit_events()
                .call_after_commit(&mut *s, changes)
                .await?,
        ),
        Call::Route(req) => Reply::Response(
            p.ferrobase_plugin_routes()
                .call_handle(&mut *s, lent, req)
                .await?,
        ),
        Call::Job(name, at) => Reply::Event(
            p.ferrobase_plugin_jobs()
                .call_run(&mut *s, lent, name, at)
                .await?,
        ),
        Call::Authenticate(attempt) => match auth {
            Some(a) => Reply::Notes(a.call_authenticate(&mut *s, lent, attempt).await?),
            None => wasmtime::bail!("the component exports no auth hook"),
        },
    };
    let _ = s.data_mut().table.delete(ctx);
    Ok(reply)
}

fn classify(e: &wasmtime::Error, store: &WStore<HostState>, budget: Duration) -> CallError {
    if let Some(r) = e.downcast_ref::<super::host::Refusal>() {
        return CallError::Refused(r.0.clone());
    }
    if let Some(t) = e.downcast_ref::<wasmtime::Trap>()
        && *t == wasmtime::Trap::Interrupt
    {
        return CallError::Timeout(budget);
    }
    if store.data().limits.reached {
        return CallError::OutOfMemory(store.data().env.settings.memory);
    }
    CallError::Trap(root_message(e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PluginEntry;

    fn manifest(wants: &[&str]) -> Manifest {
        Manifest {
            name: "p".into(),
            version: "1".into(),
            hooks: Vec::new(),
            routes: Vec::new(),
            jobs: Vec::new(),
            wants: wants.iter().map(|w| (*w).to_owned()).collect(),
            auth_hooks: Vec::new(),
        }
    }

    fn cfg(entry: Option<PluginEntry>) -> PluginsConfig {
        let mut c = PluginsConfig::default();
        if let Some(e) = entry {
            c.each.insert("p".into(), e);
        }
        c
    }

    fn granting(grants: &[&str]) -> PluginEntry {
        PluginEntry {
            grants: Some(grants.iter().map(|g| (*g).to_owned()).collect()),
            ..PluginEntry::default()
        }
    }

    #[test]
    fn a_plugin_holds_what_it_wants_and_is_granted_and_nothing_else() {
        let c = cfg(Some(granting(&[
            "db:read",
            "kv",
            "http",
            "db:hidden:users.tokenKey",
        ])));
        let Verdict::Run(s) = configure(&c, &manifest(&["db:read", "kv"]), 1 << 30) else {
            panic!("runs")
        };
        assert_eq!(s.grants, ["db:read", "kv"]);
        // Without a section: default_grants, still intersected.
        let Verdict::Run(s) = configure(&cfg(None), &manifest(&[]), 1 << 30) else {
            panic!("runs")
        };
        assert!(s.grants.is_empty(), "{:?}", s.grants);
        let Verdict::Run(s) = configure(&cfg(None), &manifest(&["db:read"]), 1 << 30) else {
            panic!("runs")
        };
        assert_eq!(s.grants, ["db:read"]);
    }

    #[test]
    fn configuration_refuses_or_disables_before_anything_runs() {
        let wants = manifest(&["db:read", "http"]);
        assert!(matches!(
            configure(&cfg(Some(granting(&["db:read"]))), &wants, 1 << 30),
            Verdict::Refused(why) if why.contains("wants \"http\"")
        ));
        let off = PluginEntry {
            enabled: Some(false),
            ..granting(&["db:read", "http"])
        };
        assert_eq!(
            configure(&cfg(Some(off)), &wants, 1 << 30),
            Verdict::Disabled
        );
        for bad in [
            "db:admin",
            "db:hidden:users",
            "db:hidden:.x",
            "db:hidden:a b.c",
            "fs",
        ] {
            let c = cfg(Some(granting(&[bad])));
            assert!(
                matches!(configure(&c, &manifest(&[bad]), 1 << 30), Verdict::Refused(why) if why.contains("unknown capability")),
                "{bad}"
            );
        }
        let c = cfg(Some(granting(&["db:hidden:users.tokenKey"])));
        assert!(matches!(
            configure(&c, &manifest(&["db:hidden:users.tokenKey"]), 1 << 30),
            Verdict::Run(_)
        ));
        let bad_allow = PluginEntry {
            http_allow: vec!["https://api.example.com".into()],
            ..granting(&["http"])
        };
        assert!(matches!(
            configure(&cfg(Some(bad_allow)), &manifest(&["http"]), 1 << 30),
            Verdict::Refused(why) if why.contains("not host:port")
        ));
    }

    #[test]
    fn calls_in_flight_keep_no_more_than_pb_toml_allows_now() {
        let m = manifest(&["db:read", "http"]);
        let now = allowed_now(&cfg(Some(granting(&["db:read"]))), &m, 1 << 30);
        assert_eq!(now.grants, ["db:read"]);
        let before = Live {
            grants: vec!["db:read".into(), "http".into()],
            http_allow: vec!["a.example:443".into()],
        };
        let narrowed = before.narrowed(&now);
        assert_eq!(
            (narrowed.grants.as_slice(), narrowed.http_allow.len()),
            (&["db:read".to_owned()][..], 0)
        );
        let off = PluginEntry {
            enabled: Some(false),
            ..granting(&["db:read", "http"])
        };
        assert_eq!(allowed_now(&cfg(Some(off)), &m, 1 << 30), Live::default());
        // Never wider than before, whatever pb.toml says now.
        let wider = Live {
            grants: vec!["db:read".into(), "db:write".into(), "http".into()],
            http_allow: vec!["a.example:443".into(), "b.example:443".into()],
        };
        assert_eq!(before.narrowed(&wider), before);
    }
}
