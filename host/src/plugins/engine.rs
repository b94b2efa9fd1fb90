//! The engine every plugin shares: its configuration, the linker, the epoch ticker, the global
//! call cap, and compiling components (with the on-disk compile cache).

use super::calls::Change;
use super::host::HostState;
use super::{LogSink, Services};
use crate::config::PluginsConfig;
use crate::store::Store;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, OptLevel};

/// One per server: the engine every plugin shares, the linker of the host API, the epoch
/// ticker, the global cap on calls in flight and the after-commit queue.
pub(crate) struct Runtime {
    pub engine: Engine,
    pub(super) linker: Linker<HostState>,
    pub(super) cache_dir: PathBuf,
    pub store: Arc<Store>,
    pub(super) services: OnceLock<Arc<dyn Services>>,
    /// Where log lines go besides the process log (the `_logs` table), once wired.
    pub(super) log_sink: OnceLock<Arc<dyn LogSink>>,
    pub(super) permits: Arc<Semaphore>,
    /// Memory cap the engine was built for (the pooling allocator's slot size).
    pub max_memory: usize,
    pub pooling: bool,
    pub(super) calls: AtomicU64,
    /// Wasm executions in progress, and the epoch ticker that runs while there are any.
    pub(super) running: Arc<AtomicUsize>,
    ticker: std::thread::Thread,
    ticker_parked: Arc<AtomicBool>,
    commits_tx: mpsc::UnboundedSender<Vec<Change>>,
    pub(super) commits_rx: Mutex<Option<mpsc::UnboundedReceiver<Vec<Change>>>>,
    pub(super) handle: tokio::runtime::Handle,
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
                crate::batch_thread();
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
            log_sink: OnceLock::new(),
            permits: Arc::new(Semaphore::new(cfg.max_concurrent_calls)),
            max_memory,
            pooling,
            calls: AtomicU64::new(0),
            running,
            ticker,
            ticker_parked: parked,
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

    pub(crate) fn set_log_sink(&self, s: Arc<dyn LogSink>) {
        let _ = self.log_sink.set(s);
    }

    pub(crate) fn log_sink(&self) -> Option<&Arc<dyn LogSink>> {
        self.log_sink.get()
    }

    /// Keep the epoch ticking while the guard lives (wasm is about to run).
    pub(super) fn running(&self) -> Running<'_> {
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
    /// Queue committed changes (numbered by the records' feed, in commit order) for the
    /// after-commit dispatcher.
    pub(crate) fn committed(&self, changes: Vec<Change>) {
        let _ = self.commits_tx.send(changes);
    }
}

/// A wasm execution in progress (see `Runtime::running`).
pub(super) struct Running<'a>(&'a AtomicUsize);

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
