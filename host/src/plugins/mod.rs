//! Plugins: wasm components (WIT package `ferrobase:plugin@0.1.3`, `plugin-sdk/wit/`) that add
//! record hooks, routes and cron jobs. The only module that names wasmtime.
//!
//! - `engine`: one engine (Cranelift, pooling allocator, epoch interruption), compiled
//!   components cached on disk by content hash.
//! - `instance`: one `PluginPre` per loaded version, warm instance pools, the call path with
//!   its per-call memory cap and time budget, typed call errors.
//! - `calls`: the typed entry points (hooks, events, routes, jobs); `dispatch`: where hooks run
//!   (the in-transaction chain on the writer thread, the after-commit task).
//! - `host`: what a plugin may import (context, db, log, config, kv, http), each checked
//!   against the grants pb.toml gave it.
//! - `registry`: the immutable dispatch tables built from the manifests; swapped whole.
//! - `reload`: loading the folder, watching it, each plugin's state (loaded, parked, refused,
//!   disabled), the reload history.
//! - `sandbox`: where outbound HTTP may go (`http_allow`, checked on the dialled address).
//! - `starter`: `ferrobase plugin new NAME`, a ready plugin crate with the SDK vendored.
//!
//! Reads never look here. A write asks `Registry::hooks(collection id)` once: `None` unless a
//! plugin bound that collection.

mod bindings;
mod calls;
mod convert;
mod dispatch;
mod engine;
mod host;
mod instance;
mod registry;
mod reload;
mod sandbox;
mod starter;

pub(crate) use calls::{Action, AuthOutcome, Change, HookOutcome, RouteRequest};
pub(crate) use convert::{FieldValue, PluginRecord};
pub(crate) use dispatch::run_in_transaction;
pub(crate) use instance::Loaded;
pub(crate) use registry::{HookSlots, Registry};
pub(crate) use starter::new_plugin;

use crate::config::PluginsConfig;
use crate::store::Store;
use arc_swap::ArcSwap;
use serde_json::{Map, Value};
use std::any::Any;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

pub(crate) type BoxFut<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// An authenticated caller, as plugins see it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Principal {
    pub collection: String,
    pub id: String,
    pub is_superuser: bool,
}

/// Who and what a plugin call is for. Requests fill the HTTP facts; jobs and after-commit
/// events run as the system (no caller, rules bypassed).
#[derive(Clone, Default)]
pub(crate) struct CallFacts {
    pub principal: Option<Principal>,
    /// Rules do not apply to record reads made by this call.
    pub system: bool,
    pub method: Option<String>,
    pub path: Option<String>,
    pub headers: Vec<(String, String)>,
    pub remote_ip: Option<String>,
    /// The api's caller, handed back to `Services` so rules see `@request.auth.*`.
    pub caller: Option<Arc<dyn Any + Send + Sync>>,
    /// How many plugin calls this one is nested in (a hook run by a plugin's own write).
    pub depth: u8,
    /// The files a before-hook's write is about to attach (empty for every other call).
    pub uploads: Vec<PendingUpload>,
}

/// A file a record write is about to attach, as before-hooks see it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PendingUpload {
    pub field: String,
    /// The name it will be stored under.
    pub name: String,
    /// The client's name for it.
    pub original: String,
    pub size: u64,
    /// Its detected content type.
    pub content_type: String,
}

/// Why a record service refused.
#[derive(Debug, Clone)]
pub(crate) enum DbFailure {
    Denied(String),
    Invalid(String),
    Rejected(Rejection),
    Other(String),
}

/// PocketBase's error body, from a hook or from a record write a plugin asked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rejection {
    pub status: u16,
    pub message: String,
    /// (field, code, message)
    pub fields: Vec<(String, String, String)>,
}

/// What plugins reach of the rest of the server: record reads under the call's rules and
/// record writes through the REST path. Implemented by the api layer.
pub(crate) trait Services: Send + Sync + 'static {
    fn find_records(
        &self,
        facts: &CallFacts,
        collection: String,
        filter: String,
        params: Map<String, Value>,
        sort: String,
        limit: u32,
    ) -> BoxFut<Result<Vec<PluginRecord>, DbFailure>>;
    fn get_record(
        &self,
        facts: &CallFacts,
        collection: String,
        id: String,
    ) -> BoxFut<Result<Option<PluginRecord>, DbFailure>>;
    fn create_record(
        &self,
        facts: &CallFacts,
        collection: String,
        data: Map<String, Value>,
    ) -> BoxFut<Result<PluginRecord, DbFailure>>;
    fn update_record(
        &self,
        facts: &CallFacts,
        collection: String,
        id: String,
        data: Map<String, Value>,
    ) -> BoxFut<Result<PluginRecord, DbFailure>>;
    fn delete_record(
        &self,
        facts: &CallFacts,
        collection: String,
        id: String,
    ) -> BoxFut<Result<(), DbFailure>>;
}

/// A plugin's log line, as it reaches the [`LogSink`].
pub(crate) struct LogLine {
    /// The plugin's name (its manifest's).
    pub plugin: String,
    pub level: LogLevel,
    pub message: String,
    /// The fields in the order the plugin gave them.
    pub fields: Vec<(String, String)>,
}

/// The levels of the WIT `log` interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogLevel {
    Trace,
    Debug,
    Info,
    Warn,
    Error,
}

/// Where plugins' log lines go besides the process log: the `_logs` table. Implemented by
/// `logs` and handed in at wiring; `line` runs on the plugin's call, so it only queues.
pub(crate) trait LogSink: Send + Sync + 'static {
    fn line(&self, line: LogLine);
}

/// The plugin system of one server: runtime, current registry, reload state.
pub(crate) struct Plugins {
    rt: Arc<engine::Runtime>,
    registry: ArcSwap<Registry>,
    reload: reload::ReloadState,
}

impl Plugins {
    /// Build the runtime and load every plugin in the folder. A plugin that fails to load is
    /// logged and left out; the server starts regardless.
    pub(crate) async fn start(
        cfg: PluginsConfig,
        dir: PathBuf,
        config_file: Option<PathBuf>,
        data_dir: PathBuf,
        store: Arc<Store>,
    ) -> Result<Arc<Self>, String> {
        let cache = if cfg.cache_dir.as_os_str().is_empty() {
            data_dir.join(".plugin-cache")
        } else {
            cfg.cache_dir.clone()
        };
        let rt = engine::Runtime::new(&cfg, cache, store)?;
        let me = Arc::new(Self {
            rt,
            registry: ArcSwap::from_pointee(Registry::empty()),
            reload: reload::ReloadState::new(cfg, dir, config_file),
        });
        me.reload_now("start").await;
        Ok(me)
    }

    /// Hand over the services plugins call back into (the api layer builds them after us).
    pub(crate) fn set_services(&self, s: Arc<dyn Services>) {
        self.rt.set_services(s);
    }

    /// Hand over where log lines go besides the process log (the logs area, wired after us).
    /// Lines written before this only reach the process log.
    pub(crate) fn set_log_sink(&self, s: Arc<dyn LogSink>) {
        self.rt.set_log_sink(s);
    }

    /// The registry as it is now. Load once per operation and use only that.
    pub(crate) fn registry(&self) -> Arc<Registry> {
        self.registry.load_full()
    }

    /// Run queued after-commit deliveries, the cron scheduler and (when on) the folder watcher
    /// until the process ends.
    pub(crate) fn spawn_background(self: &Arc<Self>) {
        dispatch::spawn_commit_dispatcher(Arc::clone(self));
        reload::spawn_scheduler(Arc::clone(self));
        reload::spawn_watcher(Arc::clone(self));
    }

    /// Queue committed changes for after-commit hooks. Called on the writer, in commit order.
    pub(crate) fn committed(&self, changes: Vec<Change>) {
        self.rt.committed(changes);
    }

    /// The `/api/plugins` report: one state per plugin file (loaded, parked, refused,
    /// disabled), its bindings, grants, call counts and last error; the reload history.
    pub(crate) fn report(&self) -> Value {
        self.reload.report()
    }

    /// Collections changed: rebuild the registry (hooks are bound to collections by id, and a
    /// plugin refused for a missing collection may fit now). Nothing is recompiled.
    pub(crate) fn schema_changed(self: &Arc<Self>) {
        let me = Arc::clone(self);
        tokio::spawn(async move { me.reload_now("schema").await });
    }

    /// Reload the folder now (the watcher calls this after its debounce).
    pub(crate) async fn reload_now(&self, why: &str) {
        let schema = self.rt.store.schema();
        let _ = self
            .reload
            .reload(&self.rt, &self.registry(), &schema, why, |next| {
                self.registry.store(Arc::new(next));
            })
            .await;
    }
}
