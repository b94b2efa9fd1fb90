//! The engine, compiled components, instance pools and the call path with its limits.

use super::bindings::exports::ferrobase::plugin::{
    commit_events as ev, manifest as mf, record_hooks as rh, routes as rt, transaction_hooks as th,
};
use super::bindings::{Plugin, PluginPre};
use super::convert::PluginRecord;
use super::host::{CallCtx, HostState, PluginEnv, TxOp};
use super::{CallFacts, Plugins, Principal, Rejection, Services};
use crate::config::{PluginEntry, PluginsConfig};
use crate::store::Store;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::{Semaphore, mpsc};
use wasmtime::component::{Component, Linker, Resource};
use wasmtime::{Config, Engine, OptLevel, Store as WStore, UpdateDeadline};

/// One per server: the engine every plugin shares, the linker of the host API, the epoch
/// ticker, the global cap on calls in flight and the after-commit queue.
pub(crate) struct Runtime {
    pub engine: Engine,
    linker: Linker<HostState>,
    cache_dir: PathBuf,
    pub store: Arc<Store>,
    services: OnceLock<Arc<dyn Services>>,
    permits: Arc<Semaphore>,
    /// Memory cap the engine was built for (the pooling allocator's slot size).
    pub max_memory: usize,
    pub pooling: bool,
    calls: AtomicU64,
    /// Wasm executions in progress, and the epoch ticker that runs while there are any.
    running: Arc<AtomicUsize>,
    ticker: std::thread::Thread,
    ticker_parked: Arc<AtomicBool>,
    seq: AtomicU64,
    commits_tx: mpsc::UnboundedSender<Vec<Change>>,
    commits_rx: Mutex<Option<mpsc::UnboundedReceiver<Vec<Change>>>>,
    handle: tokio::runtime::Handle,
}

fn engine_config(max_memory: usize, pooling: bool) -> Config {
    let mut c = Config::new();
    c.cranelift_opt_level(OptLevel::Speed);
    c.epoch_interruption(true);
    c.memory_init_cow(true);
    c.wasm_component_model(true);
    if pooling {
        let mut p = wasmtime::PoolingAllocationConfig::default();
        p.total_component_instances(256)
            .total_core_instances(1024)
            .total_memories(256)
            .total_tables(1024)
            .total_stacks(256)
            .max_memory_size(max_memory)
            .linear_memory_keep_resident(1 << 20)
            .table_keep_resident(64 << 10);
        c.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(p));
    }
    c
}

impl Runtime {
    pub(crate) fn new(
        cfg: &PluginsConfig,
        cache_dir: PathBuf,
        store: Arc<Store>,
    ) -> Result<Arc<Self>, String> {
        let largest_mb = cfg
            .each
            .values()
            .filter_map(|e| e.memory_mb)
            .chain([cfg.memory_mb])
            .max()
            .unwrap_or(cfg.memory_mb)
            .min(4096);
        let max_memory = usize::try_from(largest_mb << 20).unwrap_or(usize::MAX);
        // The pooling allocator reserves address space for every slot up front; where that is
        // refused (a ulimit -v, a small VPS) fall back to allocating on demand.
        let (engine, pooling) = match Engine::new(&engine_config(max_memory, true)) {
            Ok(e) => (e, true),
            Err(e) => {
                tracing::warn!(error = %e, "plugins: pooling allocator unavailable, allocating on demand");
                (
                    Engine::new(&engine_config(max_memory, false)).map_err(|e| e.to_string())?,
                    false,
                )
            }
        };
        let mut linker = Linker::new(&engine);
        super::host::link(&mut linker).map_err(|e| format!("linking the host API: {e}"))?;
        let tick = Duration::from_millis(cfg.epoch_tick_ms.max(1));
        let weak = engine.weak();
        let running = Arc::new(AtomicUsize::new(0));
        let parked = Arc::new(AtomicBool::new(false));
        let (busy, asleep) = (Arc::clone(&running), Arc::clone(&parked));
        // The ticker sleeps after a second without wasm running: an idle server (or one without
        // plugins) never wakes for it, and a busy one does not pay a wake-up per call. Deadlines
        // are instants checked at each tick, so a pause between calls changes nothing.
        let idle_ticks = (1000 / tick.as_millis().max(1)) as u32;
        let ticker = std::thread::Builder::new()
            .name("ferrobase-epoch".into())
            .spawn(move || {
                let mut idle = 0u32;
                loop {
                    if busy.load(Ordering::SeqCst) == 0 {
                        idle += 1;
                    } else {
                        idle = 0;
                    }
                    if idle >= idle_ticks {
                        asleep.store(true, Ordering::SeqCst);
                        // A call that began meanwhile may have seen `false`: look once more.
                        if busy.load(Ordering::SeqCst) == 0 {
                            std::thread::park();
                        }
                        asleep.store(false, Ordering::SeqCst);
                        idle = 0;
                        continue;
                    }
                    std::thread::sleep(tick);
                    match weak.upgrade() {
                        Some(e) => e.increment_epoch(),
                        None => return,
                    }
                }
            })
            .map_err(|e| e.to_string())?
            .thread()
            .clone();
        let (commits_tx, commits_rx) = mpsc::unbounded_channel();
        Ok(Arc::new(Self {
            engine,
            linker,
            cache_dir,
            store,
            services: OnceLock::new(),
            permits: Arc::new(Semaphore::new(cfg.max_concurrent_calls)),
            max_memory,
            pooling,
            calls: AtomicU64::new(0),
            running,
            ticker,
            ticker_parked: parked,
            seq: AtomicU64::new(0),
            commits_tx,
            commits_rx: Mutex::new(Some(commits_rx)),
            handle: tokio::runtime::Handle::current(),
        }))
    }

    pub(crate) fn set_services(&self, s: Arc<dyn Services>) {
        let _ = self.services.set(s);
    }

    pub(crate) fn services(&self) -> Option<Arc<dyn Services>> {
        self.services.get().cloned()
    }

    /// Keep the epoch ticking while the guard lives (wasm is about to run).
    fn running(&self) -> Running<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        if self.ticker_parked.load(Ordering::SeqCst) {
            self.ticker.unpark();
        }
        Running(&self.running)
    }

    pub(crate) fn next_call_id(&self) -> u64 {
        self.calls.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Compile `bytes`, or load the machine code compiled for them before (same content, same
    /// engine settings). Returns the component and whether it came from the cache.
    pub(crate) fn compile(&self, bytes: &[u8]) -> Result<(Component, bool), String> {
        if !wasmparser_is_component(bytes) {
            return Err(if bytes.starts_with(b"\0asm") {
                "a core wasm module, not a component (build for wasm32-wasip2, or wrap it with `wasm-tools component new`)".into()
            } else {
                "not a wasm component (no \\0asm header)".into()
            });
        }
        let key = self.cache_key(bytes);
        let path = self.cache_dir.join(format!("{key}.cwasm"));
        if path.exists() {
            match load_cached(&self.engine, &path) {
                Ok(c) => return Ok((c, true)),
                Err(e) => {
                    tracing::warn!(error = %e, file = %path.display(), "plugins: stale compile cache entry, recompiling")
                }
            }
        }
        let compiled = self
            .engine
            .precompile_component(bytes)
            .map_err(|e| format!("invalid component: {}", root_message(&e)))?;
        if std::fs::create_dir_all(&self.cache_dir).is_ok() {
            // Write then rename: a reader never maps a half-written file. The temporary name is
            // unique per write (two engines in one process may compile the same component at
            // once; a shared name would let one truncate a file the other has mapped).
            static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let tmp = self
                .cache_dir
                .join(format!("{key}.tmp{}-{n}", std::process::id()));
            // Compiled once: the machine code is loaded back from the cache file.
            if std::fs::write(&tmp, &compiled).is_ok()
                && std::fs::rename(&tmp, &path).is_ok()
                && let Ok(c) = load_cached(&self.engine, &path)
            {
                return Ok((c, false));
            }
        }
        let c = load_compiled(&self.engine, &compiled)
            .map_err(|e| format!("invalid component: {}", root_message(&e)))?;
        Ok((c, false))
    }

    fn cache_key(&self, bytes: &[u8]) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.engine.precompile_compatibility_hash().hash(&mut h);
        self.pooling.hash(&mut h);
        let sum = Sha256::digest(bytes);
        format!("{}-{:016x}", hex(&sum[..16]), h.finish())
    }

    /// Queue committed changes; the dispatcher hands them to after-commit hooks in order.
    pub(crate) fn committed(&self, mut changes: Vec<Change>) {
        for c in &mut changes {
            c.seq = self.seq.fetch_add(1, Ordering::Relaxed) + 1;
        }
        let _ = self.commits_tx.send(changes);
    }
}

/// A wasm execution in progress (see `Runtime::running`).
struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The component-model layer byte: `\0asm` then version 0x0d 0x00 and layer 0x01 0x00.
fn wasmparser_is_component(b: &[u8]) -> bool {
    b.len() >= 8 && &b[0..4] == b"\0asm" && b[6..8] == [0x01, 0x00]
}

#[allow(
    unsafe_code,
    reason = "mapping precompiled machine code is unsafe by nature; see SAFETY"
)]
fn load_cached(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file was written by `Runtime::compile` from `precompile_component` of this
    // engine's settings (its name carries the engine's compatibility hash) and is renamed into
    // place only when complete; wasmtime also checks the header against the engine.
    unsafe { Component::deserialize_file(engine, path) }
}

#[allow(
    unsafe_code,
    reason = "loading precompiled machine code is unsafe by nature; see SAFETY"
)]
fn load_compiled(engine: &Engine, compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `compiled` came from `precompile_component` on this very engine a moment ago.
    unsafe { Component::deserialize(engine, compiled) }
}

/// The innermost message of a wasmtime error chain (the useful part for a log line).
pub(crate) fn root_message(e: &wasmtime::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        msg = format!("{msg}: {cause}");
    }
    msg
}

/// The limits one plugin runs under (pb.toml's `[plugins.<name>]` over `[plugins]`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Settings {
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
    pub(crate) fn resolve(cfg: &PluginsConfig, e: Option<&PluginEntry>, engine_max: usize) -> Self {
        let d = PluginEntry::default();
        let e = e.unwrap_or(&d);
        let ms = |v: Option<u64>, dflt: u64| Duration::from_millis(v.unwrap_or(dflt));
        Self {
            grants: e
                .grants
                .clone()
                .unwrap_or_else(|| cfg.default_grants.clone()),
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
}

/// A warm instance: its store (with its limits) and the typed exports.
struct Inst {
    store: WStore<HostState>,
    plugin: Plugin,
    calls: u64,
}

/// One loaded version of one plugin file.
pub(crate) struct Loaded {
    pub file: PathBuf,
    pub hash: String,
    pub manifest: Manifest,
    pub settings: Settings,
    pub compile_ms: u128,
    pub from_cache: bool,
    pub loaded_at: String,
    rt: Arc<Runtime>,
    pre: PluginPre<HostState>,
    env: Arc<PluginEnv>,
    pool: Mutex<Vec<Inst>>,
    slots: Arc<Semaphore>,
    /// Set when a newer version replaced this one: instances are dropped, not pooled.
    retired: AtomicBool,
    pub stats: CallStats,
}

#[derive(Default)]
pub(crate) struct CallStats {
    pub calls: AtomicU64,
    pub failures: AtomicU64,
    pub last_error: Mutex<Option<String>>,
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
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout(d) => write!(f, "stopped after its {} ms budget", d.as_millis()),
            Self::OutOfMemory(m) => write!(f, "stopped at its memory cap of {} MiB", m >> 20),
            Self::Trap(t) => write!(f, "trapped: {t}"),
            Self::Unavailable(t) => write!(f, "unavailable: {t}"),
        }
    }
}

/// A call's arguments.
enum Call<'a> {
    Describe,
    BeforeCreate(&'a rh::RecordData),
    BeforeUpdate(&'a rh::RecordData, &'a rh::RecordData),
    BeforeDelete(&'a rh::RecordData),
    InTx(th::Action, &'a th::RecordData),
    AfterCommit(&'a [ev::Change]),
    Route(&'a rt::HttpRequest),
    Job(&'a str, u64),
}

enum Reply {
    Manifest(mf::Manifest),
    Verdict(Result<rh::Verdict, rh::Rejection>),
    Unit(Result<(), rh::Rejection>),
    Event(Result<(), String>),
    Response(rt::HttpResponse),
}

impl Loaded {
    /// Instantiate the component once, ask its manifest and keep the instance warm.
    pub(crate) async fn load(
        rt: &Arc<Runtime>,
        file: PathBuf,
        bytes: Vec<u8>,
        cfg: &PluginsConfig,
    ) -> Result<Arc<Self>, String> {
        let started = Instant::now();
        let hash = hex(&Sha256::digest(&bytes)[..8]);
        let rt2 = Arc::clone(rt);
        let (component, from_cache) = tokio::task::spawn_blocking(move || rt2.compile(&bytes))
            .await
            .map_err(|e| e.to_string())??;
        let compile_ms = started.elapsed().as_millis();
        let pre = rt.linker.instantiate_pre(&component).map_err(|e| {
            format!(
                "not a ferrobase:plugin@0.1.0 component: {}",
                root_message(&e)
            )
        })?;
        let pre = PluginPre::new(pre).map_err(|e| {
            format!(
                "not a ferrobase:plugin@0.1.0 component: {}",
                root_message(&e)
            )
        })?;
        // The name comes from the manifest, so the section in pb.toml is found after describe;
        // describe itself runs under the defaults and may not call the host.
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let boot = Settings::resolve(cfg, cfg.each.get(&stem), rt.max_memory);
        let env = Arc::new(PluginEnv::new(stem.clone(), boot.clone(), Arc::clone(rt)));
        let mut probe = Self {
            file,
            hash,
            manifest: Manifest {
                name: stem,
                version: String::new(),
                hooks: Vec::new(),
                routes: Vec::new(),
                jobs: Vec::new(),
                wants: Vec::new(),
            },
            settings: boot,
            compile_ms,
            from_cache,
            loaded_at: crate::schema::ids::now(),
            rt: Arc::clone(rt),
            pre,
            env,
            pool: Mutex::new(Vec::new()),
            slots: Arc::new(Semaphore::new(1)),
            retired: AtomicBool::new(false),
            stats: CallStats::default(),
        };
        let m = match probe
            .call(Call::Describe, Arc::new(CallFacts::default()), None)
            .await
            .map_err(|e| format!("describe failed: {e}"))?
        {
            Reply::Manifest(m) => m,
            _ => return Err("describe returned something else".into()),
        };
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
        };
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
        if cfg.each.get(&manifest.name).and_then(|e| e.enabled) == Some(false) {
            return Err(format!(
                "disabled in pb.toml ([plugins.{}] enabled = false)",
                manifest.name
            ));
        }
        let settings = Settings::resolve(cfg, cfg.each.get(&manifest.name), rt.max_memory);
        for want in &manifest.wants {
            if !settings.grants.iter().any(|g| g == want) {
                return Err(format!(
                    "wants {want:?}, which pb.toml does not grant (add it to [plugins.{}] grants)",
                    manifest.name
                ));
            }
            if !matches!(
                want.as_str(),
                "db:read" | "db:write" | "kv" | "http" | "clock"
            ) {
                return Err(format!("wants unknown capability {want:?}"));
            }
        }
        // The describe instance ran under boot settings: start the pool afresh.
        probe.pool.lock().map(|mut p| p.clear()).ok();
        probe.env = Arc::new(PluginEnv::new(
            manifest.name.clone(),
            settings.clone(),
            Arc::clone(rt),
        ));
        probe.slots = Arc::new(Semaphore::new(settings.max_instances));
        probe.manifest = manifest;
        probe.settings = settings;
        let me = Arc::new(probe);
        // Warm one instance now, so the first request does not pay for instantiation.
        if let Ok(inst) = me.instantiate().await {
            me.give_back(inst);
        }
        Ok(me)
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
        let plugin = self
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| classify(&e, &store, Duration::from_secs(30)))?;
        Ok(Inst {
            store,
            plugin,
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

    fn budget(&self, kind: CallKind) -> Duration {
        match kind {
            CallKind::Describe => Duration::from_secs(10),
            CallKind::BeforeHook => self.settings.hook_timeout,
            CallKind::InTransaction => self.settings.in_tx_timeout,
            CallKind::AfterCommit | CallKind::Job => self.settings.job_timeout,
            CallKind::Route => self.settings.route_timeout,
        }
    }

    /// One call into the plugin, within its budget, on a warm instance when one is free.
    /// Nested calls (a hook run for a plugin's own write) and in-transaction calls skip the
    /// queues: waiting there could wait on the very call that is waiting for them.
    async fn call(
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
        };
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
                if let Ok(mut l) = self.stats.last_error.lock() {
                    *l = Some(format!("{}: {err}", crate::schema::ids::now()));
                }
                tracing::warn!(plugin = %self.manifest.name, kind = ?kind, error = %err, elapsed_ms = started.elapsed().as_millis() as u64, "plugin call failed");
                Err(err)
            }
        }
    }
}

async fn run(inst: &mut Inst, call: Call<'_>, ctx: Resource<CallCtx>) -> wasmtime::Result<Reply> {
    let s = &mut inst.store;
    let p = &inst.plugin;
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
    };
    let _ = s.data_mut().table.delete(ctx);
    Ok(reply)
}

fn classify(e: &wasmtime::Error, store: &WStore<HostState>, budget: Duration) -> CallError {
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

// ---- the typed entry points the registry and api use ----

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
    /// before-create / before-update: (current for updates, pending).
    pub(crate) async fn before_write(
        &self,
        facts: Arc<CallFacts>,
        current: Option<&PluginRecord>,
        pending: &PluginRecord,
    ) -> HookOutcome {
        let p = rh::RecordData::from(pending);
        let r = match current {
            None => self.call(Call::BeforeCreate(&p), facts, None).await,
            Some(c) => {
                let c = rh::RecordData::from(c);
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
        let c = rh::RecordData::from(current);
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
        let r = th::RecordData::from(record);
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
                data: (&c.record).into(),
                previous: c.previous.as_ref().map(Into::into),
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

/// Run the in-transaction hooks of one write on the writer thread, with `db.execute` served on
/// the write's own connection. The first rejection or failure stops the chain.
pub(crate) fn run_in_transaction(
    hooks: &[Arc<Loaded>],
    facts: Arc<CallFacts>,
    action: Action,
    record: &PluginRecord,
    conn: crate::store::Conn<'_>,
) -> HookOutcome {
    let Some(first) = hooks.first() else {
        return HookOutcome::Proceed(Vec::new());
    };
    let handle = first.rt.handle.clone();
    let (tx, mut rx) = mpsc::unbounded_channel::<TxOp>();
    let calls = async move {
        for h in hooks {
            match h
                .in_transaction(Arc::clone(&facts), action, record, tx.clone())
                .await
            {
                HookOutcome::Proceed(_) => {}
                other => return other,
            }
        }
        HookOutcome::Proceed(Vec::new())
    };
    let serve = async {
        while let Some(op) = rx.recv().await {
            let r =
                crate::store::raw::execute(conn, &op.sql, &op.params).map_err(|e| e.to_string());
            let _ = op.reply.send(r);
        }
    };
    handle.block_on(async move {
        let (out, ()) = tokio::join!(calls, serve);
        out
    })
}

/// Deliver committed changes to after-commit hooks: one task, so every plugin sees them in
/// commit order; whatever queued meanwhile goes in one call.
pub(crate) fn spawn_commit_dispatcher(plugins: Arc<Plugins>) {
    let Some(mut rx) = plugins.rt.commits_rx.lock().ok().and_then(|mut r| r.take()) else {
        return;
    };
    tokio::spawn(async move {
        while let Some(mut batch) = rx.recv().await {
            while batch.len() < 256 {
                match rx.try_recv() {
                    Ok(more) => batch.extend(more),
                    Err(_) => break,
                }
            }
            let reg = plugins.registry();
            let mut by_plugin: Vec<(Arc<Loaded>, Vec<Change>)> = Vec::new();
            for c in batch {
                let Some(slots) = reg.hooks(&c.collection_id) else {
                    continue;
                };
                for h in &slots.after_commit {
                    match by_plugin.iter_mut().find(|(p, _)| Arc::ptr_eq(p, h)) {
                        Some((_, v)) => v.push(c.clone()),
                        None => by_plugin.push((Arc::clone(h), vec![c.clone()])),
                    }
                }
            }
            for (p, changes) in by_plugin {
                if let Err(e) = p.after_commit(&changes).await {
                    tracing::warn!(plugin = %p.name(), error = %e, changes = changes.len(), "after-commit hook failed");
                }
            }
        }
    });
}
