//! Loading the plugins folder, watching it (and pb.toml), the cron scheduler, and what
//! `/api/plugins` reports.

use super::Plugins;
use super::engine::Runtime;
use super::instance::Loaded;
use super::registry::Registry;
use crate::config::{Config, PluginsConfig};
use crate::schema::Schema;
use chrono::Timelike;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the folder must be quiet before a reload (editors and copies write in steps).
const DEBOUNCE: Duration = Duration::from_millis(250);
const HISTORY: usize = 50;

pub(crate) struct ReloadState {
    cfg: Mutex<PluginsConfig>,
    dir: PathBuf,
    config_file: Option<PathBuf>,
    /// file -> (content hash, the version loaded from it)
    loaded: Mutex<HashMap<PathBuf, (String, Arc<Loaded>)>>,
    /// file -> (when, why it is not (or no longer) loading)
    errors: Mutex<HashMap<PathBuf, (String, String)>>,
    history: Mutex<VecDeque<Value>>,
    /// file -> (when, why the registry refused its plugin) as of the last build.
    admission: Mutex<HashMap<PathBuf, (String, String)>>,
    /// One reload at a time.
    busy: tokio::sync::Mutex<()>,
}

fn file_hash(bytes: &[u8]) -> String {
    super::engine::hex(&Sha256::digest(bytes)[..8])
}

impl ReloadState {
    pub(crate) fn new(cfg: PluginsConfig, dir: PathBuf, config_file: Option<PathBuf>) -> Self {
        Self {
            cfg: Mutex::new(cfg),
            dir,
            config_file,
            loaded: Mutex::new(HashMap::new()),
            errors: Mutex::new(HashMap::new()),
            history: Mutex::new(VecDeque::new()),
            admission: Mutex::new(HashMap::new()),
            busy: tokio::sync::Mutex::new(()),
        }
    }

    fn note(&self, event: Value) {
        if let Ok(mut h) = self.history.lock() {
            h.push_back(event);
            while h.len() > HISTORY {
                h.pop_front();
            }
        }
    }

    fn set_error(&self, file: &Path, msg: String) {
        tracing::error!(file = %file.display(), error = %msg, "plugin not loaded");
        if let Ok(mut e) = self.errors.lock() {
            e.insert(file.to_owned(), (crate::schema::ids::now(), msg));
        }
    }

    /// Re-read the folder (and pb.toml's plugin sections); load what changed off to the side;
    /// build a new registry. None when nothing changed.
    pub(crate) async fn reload(
        &self,
        rt: &Arc<Runtime>,
        current: &Registry,
        schema: &Schema,
        why: &str,
    ) -> Option<Registry> {
        let _one = self.busy.lock().await;
        // pb.toml: a broken edit keeps the sections we had.
        let mut cfg_changed = false;
        if let Some(f) = &self.config_file
            && why != "start"
        {
            match Config::from_file(f) {
                Ok(c) => {
                    if let Ok(mut cur) = self.cfg.lock()
                        && format!("{:?}", cur.each) != format!("{:?}", c.plugins.each)
                    {
                        cur.each = c.plugins.each;
                        cur.default_grants = c.plugins.default_grants;
                        cfg_changed = true;
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "pb.toml unreadable; plugin settings unchanged")
                }
            }
        }
        let cfg = self.cfg.lock().ok()?.clone();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "wasm") && p.is_file())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        let old: HashMap<PathBuf, (String, Arc<Loaded>)> = self.loaded.lock().ok()?.clone();
        let mut candidates: Vec<(Arc<Loaded>, Option<Arc<Loaded>>)> = Vec::new();
        let mut changed = cfg_changed || why == "schema" || old.len() != files.len();
        let mut newly: Vec<(PathBuf, String)> = Vec::new();
        for f in &files {
            let Ok(bytes) = std::fs::read(f) else {
                continue;
            };
            let hash = file_hash(&bytes);
            let prev = old.get(f);
            if let Some((h, p)) = prev
                && *h == hash
                && !cfg_changed
            {
                candidates.push((Arc::clone(p), None));
                continue;
            }
            // Bytes that failed to load before fail again: do not retry them on every event.
            if !cfg_changed
                && self
                    .errors
                    .lock()
                    .ok()
                    .and_then(|e| e.get(f).map(|(_, m)| m.starts_with(&format!("{hash}: "))))
                    .unwrap_or(false)
            {
                if let Some((_, o)) = prev {
                    candidates.push((Arc::clone(o), None));
                }
                continue;
            }
            changed = true;
            match Loaded::load(rt, f.clone(), bytes, &cfg).await {
                Ok(p) => {
                    tracing::info!(
                        plugin = %p.name(), version = %p.manifest.version, file = %f.display(),
                        compile_ms = p.compile_ms as u64, cached = p.from_cache,
                        "plugin loaded"
                    );
                    newly.push((f.clone(), hash.clone()));
                    candidates.push((p, prev.map(|(_, o)| Arc::clone(o))));
                }
                Err(e) => {
                    self.set_error(f, format!("{hash}: {e}"));
                    self.note(json!({"at": crate::schema::ids::now(), "file": f.display().to_string(), "outcome": "refused", "error": e, "trigger": why}));
                    if let Some((_, o)) = prev {
                        candidates.push((Arc::clone(o), None));
                    }
                }
            }
        }
        if !changed {
            return None;
        }
        candidates.sort_by(|a, b| a.0.name().cmp(b.0.name()));
        // Every loaded version stays known (parked when refused), so a schema change that
        // creates the collection it hooks admits it without recompiling.
        let parked: Vec<Arc<Loaded>> = candidates.iter().map(|(p, _)| Arc::clone(p)).collect();
        let (reg, refused) = Registry::build(candidates, schema);
        if let Ok(mut e) = self.admission.lock() {
            e.clear();
            for (f, msg) in &refused {
                tracing::error!(file = %f.display(), error = %msg, "plugin not admitted");
                e.insert(f.clone(), (crate::schema::ids::now(), msg.clone()));
                if why != "schema" {
                    self.note(json!({"at": crate::schema::ids::now(), "file": f.display().to_string(), "outcome": "refused", "error": msg, "trigger": why}));
                }
            }
        }
        // Versions no longer served: finish in-flight calls, pool nothing more.
        for p in &current.plugins {
            if !reg.plugins.iter().any(|n| Arc::ptr_eq(n, p)) {
                p.retire();
            }
        }
        for p in &reg.plugins {
            if newly.iter().any(|(f, _)| *f == p.file) {
                if let Ok(mut e) = self.errors.lock() {
                    e.remove(&p.file);
                }
                self.note(json!({"at": crate::schema::ids::now(), "file": p.file.display().to_string(), "plugin": p.name(), "version": p.manifest.version, "outcome": "loaded", "compileMs": p.compile_ms as u64, "fromCache": p.from_cache, "trigger": why}));
            }
        }
        // Files that vanished: their plugin is unloaded; their errors go with them.
        if let Ok(mut e) = self.errors.lock() {
            e.retain(|f, _| files.contains(f));
        }
        for f in old.keys() {
            if !files.contains(f) {
                self.note(json!({"at": crate::schema::ids::now(), "file": f.display().to_string(), "outcome": "removed", "trigger": why}));
            }
        }
        let mut next_loaded: HashMap<PathBuf, (String, Arc<Loaded>)> = HashMap::new();
        for p in parked.iter().chain(reg.plugins.iter()) {
            // What serves wins over what is parked for the same file.
            next_loaded.insert(p.file.clone(), (p.hash.clone(), Arc::clone(p)));
        }
        if let Ok(mut l) = self.loaded.lock() {
            *l = next_loaded;
        }
        Some(reg)
    }

    pub(crate) fn report(&self, reg: &Registry) -> Value {
        let plugins: Vec<Value> = reg
            .plugins
            .iter()
            .map(|p| {
                let m = &p.manifest;
                json!({
                    "name": m.name,
                    "version": m.version,
                    "file": p.file.file_name().map(|f| f.to_string_lossy().into_owned()),
                    "hash": p.hash,
                    "loadedAt": p.loaded_at,
                    "compileMs": p.compile_ms as u64,
                    "fromCache": p.from_cache,
                    "hooks": m.hooks.iter().map(|(c, ev)| json!({"collection": c, "events": ev.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>()})).collect::<Vec<_>>(),
                    "routes": m.routes.iter().map(|r| json!({"method": r.method, "path": r.path, "requireAuth": r.require_auth})).collect::<Vec<_>>(),
                    "jobs": m.jobs.iter().map(|j| json!({"id": j.name, "expression": j.cron})).collect::<Vec<_>>(),
                    "grants": p.settings.grants,
                    "wants": m.wants,
                    "calls": p.stats.calls.load(std::sync::atomic::Ordering::Relaxed),
                    "failures": p.stats.failures.load(std::sync::atomic::Ordering::Relaxed),
                    "lastError": p.stats.last_error.lock().ok().and_then(|l| l.clone()),
                })
            })
            .collect();
        let mut errors: Vec<Value> = Vec::new();
        let name = |f: &Path| f.file_name().map(|f| f.to_string_lossy().into_owned());
        if let Ok(e) = self.errors.lock() {
            for (f, (at, msg)) in e.iter() {
                let msg = msg.split_once(": ").map(|(_, m)| m).unwrap_or(msg);
                errors.push(json!({"file": name(f), "at": at, "error": msg}));
            }
        }
        if let Ok(e) = self.admission.lock() {
            for (f, (at, msg)) in e.iter() {
                errors.push(json!({"file": name(f), "at": at, "error": msg}));
            }
        }
        errors.sort_by(|a, b| a["file"].as_str().cmp(&b["file"].as_str()));
        let history: Vec<Value> = self
            .history
            .lock()
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default();
        json!({"plugins": plugins, "errors": errors, "history": history})
    }

    pub(crate) fn hot_reload(&self) -> bool {
        self.cfg.lock().map(|c| c.hot_reload).unwrap_or(false)
    }
}

/// Watch the plugins folder and pb.toml; reload after things settle.
pub(crate) fn spawn_watcher(plugins: Arc<Plugins>) {
    use notify::Watcher;
    if !plugins.reload.hot_reload() {
        return;
    }
    let dir = plugins.reload.dir.clone();
    let config_file = plugins.reload.config_file.clone();
    let _ = std::fs::create_dir_all(&dir);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let cfg_name = config_file
        .as_ref()
        .and_then(|f| f.file_name().map(|n| n.to_owned()));
    let watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
        let Ok(ev) = ev else { return };
        if matches!(ev.kind, notify::EventKind::Access(_)) {
            return;
        }
        let relevant = ev.paths.iter().any(|p| {
            p.extension().is_some_and(|x| x == "wasm")
                || cfg_name
                    .as_ref()
                    .is_some_and(|n| p.file_name() == Some(n.as_os_str()))
        });
        if relevant {
            let _ = tx.send(());
        }
    });
    let mut watcher = match watcher {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(error = %e, "plugins: cannot watch the folder; hot reload is off");
            return;
        }
    };
    if let Err(e) = watcher.watch(&dir, notify::RecursiveMode::NonRecursive) {
        tracing::error!(error = %e, dir = %dir.display(), "plugins: cannot watch the folder; hot reload is off");
        return;
    }
    if let Some(parent) = config_file.as_ref().and_then(|f| f.parent()) {
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        if parent != dir {
            let _ = watcher.watch(parent, notify::RecursiveMode::NonRecursive);
        }
    }
    tokio::spawn(async move {
        let _keep = watcher;
        while rx.recv().await.is_some() {
            // Debounce: wait until nothing happened for a while.
            loop {
                match tokio::time::timeout(DEBOUNCE, rx.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            plugins.reload_now("watch").await;
        }
    });
}

/// Run due cron jobs: at every new minute, each job whose expression matches it.
pub(crate) fn spawn_scheduler(plugins: Arc<Plugins>) {
    tokio::spawn(async move {
        let mut last_minute: Option<i64> = None;
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = chrono::Utc::now();
            let minute = now.timestamp() / 60;
            if last_minute == Some(minute) {
                continue;
            }
            let first = last_minute.is_none();
            last_minute = Some(minute);
            if first {
                continue;
            }
            let at = now
                .with_second(0)
                .and_then(|t| t.with_nanosecond(0))
                .unwrap_or(now);
            for job in plugins.registry().jobs.clone() {
                if job.schedule.is_time_matching(&at).unwrap_or(false) {
                    let at_ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
                    tokio::spawn(async move {
                        if let Err(e) = job.plugin.job(&job.id, at_ms).await {
                            tracing::warn!(job = %job.id, plugin = %job.plugin.name(), error = %e, "cron job failed");
                        }
                    });
                }
            }
        }
    });
}
