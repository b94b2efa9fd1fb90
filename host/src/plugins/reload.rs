//! Loading the plugins folder, watching it (and pb.toml), the cron scheduler, and what
//! `/api/plugins` reports.

use super::Plugins;
use super::engine::Runtime;
use super::instance::{CallStats, Code, Loaded, Verdict, allowed_now, configure};
use super::registry::Registry;
use crate::config::{Config, PluginsConfig};
use crate::schema::Schema;
use chrono::Timelike;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long the folder must be quiet before a reload (editors and copies write in steps).
const DEBOUNCE: Duration = Duration::from_millis(250);
const HISTORY: usize = 50;

/// Where one plugin file stands; exactly one state per file in the folder.
///
/// ```text
///            file appears / changes
///                     |
///          compiles and describes? --no--> refused (the file's error)
///                     | yes
///        pb.toml: enabled = false? --yes--> disabled
///                     | no
///      wants only what is granted? --no--> refused (the configuration's reason)
///                     | yes
///   the registry admits it (hooked
///   collections exist, routes and   --no--> parked (re-admitted when the schema or
///   job ids free)?                          another plugin changes)
///                     | yes
///                  loaded
/// ```
///
/// Every reload (a file, pb.toml or the schema changed) runs every file through these
/// questions again, so configuration always wins over what is running: a version that pb.toml
/// no longer allows stops serving at once, and one whose settings changed is re-instantiated
/// under the new ones (calls in flight finish on the old version, and their next host call is
/// checked against the new grants). A file whose new bytes fail to load, want more than pb.toml
/// grants or are not admitted keeps its previous version serving only while that version is
/// serving and pb.toml still allows it.
#[derive(Debug, Clone, PartialEq)]
enum State {
    Loaded,
    Parked(String),
    Refused(String),
    Disabled,
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            Self::Loaded => "loaded",
            Self::Parked(_) => "parked",
            Self::Refused(_) => "refused",
            Self::Disabled => "disabled",
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            Self::Parked(r) | Self::Refused(r) => Some(r),
            Self::Loaded | Self::Disabled => None,
        }
    }
}

/// One plugin file as the last reload left it.
#[derive(Clone)]
struct Entry {
    /// The newest version of the file that compiled and described itself.
    code: Option<Arc<Code>>,
    /// The file's current bytes when they did not load: (hash, why).
    file_error: Option<(String, String)>,
    /// Why a previous version serves in the place of the file's current one.
    note: Option<String>,
    /// The version serving (loaded), or ready to (parked).
    version: Option<Arc<Loaded>>,
    state: State,
    /// When it entered this state.
    since: String,
    /// Calls, failures, refusals and the last error of every version of this file.
    stats: Arc<CallStats>,
}

impl Entry {
    /// Why it does not serve, or why an older version serves in its place.
    fn error(&self) -> Option<&str> {
        self.state.reason().or(self.note.as_deref())
    }
}

pub(crate) struct ReloadState {
    cfg: Mutex<PluginsConfig>,
    dir: PathBuf,
    config_file: Option<PathBuf>,
    entries: Mutex<BTreeMap<PathBuf, Entry>>,
    history: Mutex<VecDeque<Value>>,
    /// One reload at a time.
    busy: tokio::sync::Mutex<()>,
}

fn file_hash(bytes: &[u8]) -> String {
    super::engine::hex(&Sha256::digest(bytes)[..8])
}

fn file_name(f: &Path) -> String {
    f.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The version to serve `code` under `settings`: the one running when it is that already.
async fn version_for(
    rt: &Arc<Runtime>,
    code: &Arc<Code>,
    settings: super::instance::Settings,
    running: Option<&Arc<Loaded>>,
    stats: &Arc<CallStats>,
) -> Arc<Loaded> {
    match running {
        Some(r) if r.is(code, &settings) => Arc::clone(r),
        _ => Loaded::start(code, settings, rt, Arc::clone(stats)).await,
    }
}

impl ReloadState {
    pub(crate) fn new(cfg: PluginsConfig, dir: PathBuf, config_file: Option<PathBuf>) -> Self {
        Self {
            cfg: Mutex::new(cfg),
            dir,
            config_file,
            entries: Mutex::new(BTreeMap::new()),
            history: Mutex::new(VecDeque::new()),
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

    /// pb.toml's plugin settings as they are now. A broken edit keeps the ones we had; knobs
    /// of the runtime itself (folder, cache, epoch tick, global call cap) need a restart.
    fn reread_config(&self) {
        let Some(f) = &self.config_file else { return };
        match Config::from_file(f) {
            Ok(c) => {
                if let Ok(mut cur) = self.cfg.lock() {
                    let n = c.plugins;
                    cur.each = n.each;
                    cur.default_grants = n.default_grants;
                    cur.memory_mb = n.memory_mb;
                    cur.hook_timeout_ms = n.hook_timeout_ms;
                    cur.in_tx_timeout_ms = n.in_tx_timeout_ms;
                    cur.route_timeout_ms = n.route_timeout_ms;
                    cur.job_timeout_ms = n.job_timeout_ms;
                    cur.max_instances = n.max_instances;
                    cur.max_calls_per_instance = n.max_calls_per_instance;
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "pb.toml unreadable; plugin settings unchanged")
            }
        }
    }

    /// Re-read the folder and pb.toml's plugin sections, load what changed off to the side,
    /// decide every file's state and build the registry of what serves, handed to `publish`
    /// before the new states are reported.
    pub(crate) async fn reload(
        &self,
        rt: &Arc<Runtime>,
        current: &Registry,
        schema: &Schema,
        why: &str,
        publish: impl FnOnce(Registry),
    ) -> Option<()> {
        let _one = self.busy.lock().await;
        if why != "start" {
            self.reread_config();
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
        let old = self.entries.lock().ok()?.clone();
        let now = crate::schema::ids::now();
        let mut next: BTreeMap<PathBuf, Entry> = BTreeMap::new();
        let mut candidates: Vec<(Arc<Loaded>, Option<Arc<Loaded>>)> = Vec::new();
        for f in &files {
            let prev = old.get(f);
            let Ok(bytes) = std::fs::read(f) else {
                // Mid-copy or gone between listing and reading: leave it as it was.
                if let Some(p) = prev {
                    if let Some(v) = p.version.as_ref().filter(|_| p.state == State::Loaded) {
                        candidates.push((Arc::clone(v), None));
                    }
                    next.insert(f.clone(), p.clone());
                }
                continue;
            };
            let hash = file_hash(&bytes);
            let mut code = prev.and_then(|p| p.code.clone());
            let mut file_error = prev.and_then(|p| p.file_error.clone());
            let known = code.as_ref().is_some_and(|c| c.hash == hash)
                || file_error.as_ref().is_some_and(|(h, _)| *h == hash);
            if !known {
                match Code::load(rt, f.clone(), bytes).await {
                    Ok(c) => {
                        tracing::info!(
                            plugin = %c.name(), version = %c.manifest.version, file = %f.display(),
                            compile_ms = c.compile_ms as u64, cached = c.from_cache,
                            "plugin compiled"
                        );
                        code = Some(c);
                        file_error = None;
                    }
                    Err(e) => {
                        tracing::error!(file = %f.display(), error = %e, "plugin file not loaded");
                        file_error = Some((hash.clone(), e));
                    }
                }
            }
            // The version serving now. When the file's current bytes cannot serve (they do not
            // load, pb.toml refuses what they want, the registry does not admit them), it stands
            // in for them, as long as pb.toml allows it: a broken update never takes a running
            // plugin down, and configuration always wins.
            let running = prev
                .filter(|p| p.state == State::Loaded)
                .and_then(|p| p.version.clone());
            let current = code.clone().filter(|c| c.hash == hash);
            let stats = prev.map(|p| Arc::clone(&p.stats)).unwrap_or_default();
            let mut entry = Entry {
                code: current.clone().or_else(|| code.clone()),
                file_error: file_error.clone(),
                note: None,
                version: None,
                state: State::Refused(String::new()),
                since: now.clone(),
                stats: Arc::clone(&stats),
            };
            let stand_in = running
                .as_ref()
                .filter(|r| current.as_ref().is_none_or(|c| !Arc::ptr_eq(&r.code, c)));
            let verdict = match &current {
                Some(c) => configure(&cfg, &c.manifest, rt.max_memory),
                None => Verdict::Refused(
                    file_error
                        .as_ref()
                        .map(|(_, e)| e.clone())
                        .unwrap_or_default(),
                ),
            };
            let stand_in_verdict =
                stand_in.map(|r| configure(&cfg, &r.code.manifest, rt.max_memory));
            match (verdict, stand_in_verdict) {
                (Verdict::Run(settings), other) => {
                    let c = current
                        .as_ref()
                        .expect("a verdict to run comes from loaded code");
                    let v = version_for(rt, c, settings, running.as_ref(), &stats).await;
                    let fallback = match (other, stand_in) {
                        (Some(Verdict::Run(s)), Some(r)) => {
                            Some(version_for(rt, &r.code, s, Some(r), &stats).await)
                        }
                        _ => None,
                    };
                    candidates.push((Arc::clone(&v), fallback));
                    entry.version = Some(v);
                    entry.state = State::Loaded;
                }
                (_, Some(Verdict::Disabled)) | (Verdict::Disabled, _) => {
                    entry.state = State::Disabled;
                }
                (Verdict::Refused(why), Some(Verdict::Run(s))) => {
                    let r = stand_in.expect("a stand-in verdict comes from a stand-in");
                    let v = version_for(rt, &r.code, s, Some(r), &stats).await;
                    candidates.push((Arc::clone(&v), None));
                    entry.note = Some(format!(
                        "the file's new version was refused: {why}; the previous version keeps serving"
                    ));
                    entry.version = Some(v);
                    entry.state = State::Loaded;
                }
                (Verdict::Refused(why), _) => entry.state = State::Refused(why),
            }
            next.insert(f.clone(), entry);
        }
        candidates.sort_by(|a, b| a.0.name().cmp(b.0.name()));
        let (reg, refused) = Registry::build(candidates, schema);
        for (f, e) in next.iter_mut() {
            let Some(v) = e.version.clone() else { continue };
            if reg.plugins.iter().any(|p| Arc::ptr_eq(p, &v)) {
                continue;
            }
            let why = refused
                .iter()
                .find(|(rf, _)| rf == f)
                .map(|(_, w)| w.clone())
                .unwrap_or_else(|| "not admitted".into());
            if let Some(stand_in) = reg.plugins.iter().find(|p| p.file == *f) {
                // The previous version serves in its place.
                e.note = Some(format!(
                    "the file's new version was not admitted: {why}; the previous version keeps serving"
                ));
                e.version = Some(Arc::clone(stand_in));
            } else {
                e.state = State::Parked(why);
            }
        }
        // A state that did not change keeps its date; the history notes the changes.
        for (f, e) in next.iter_mut() {
            let p = old.get(f);
            let same_version = match (p.and_then(|p| p.version.as_ref()), e.version.as_ref()) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            let same_error = p.map(|p| (&p.file_error, &p.note)) == Some((&e.file_error, &e.note));
            if let Some(p) = p
                && p.state == e.state
                && same_version
            {
                e.since = p.since.clone();
                if same_error {
                    continue;
                }
            }
            let mut ev = json!({
                "at": now, "file": file_name(f), "outcome": e.state.name(), "trigger": why,
            });
            if let Some(c) = &e.code {
                ev["plugin"] = json!(c.name());
                ev["version"] = json!(c.manifest.version);
            }
            if let Some(v) = &e.version {
                ev["compileMs"] = json!(v.compile_ms as u64);
                ev["fromCache"] = json!(v.from_cache);
            }
            if let Some(r) = e.error() {
                ev["error"] = json!(r);
            }
            match &e.state {
                State::Loaded => {
                    tracing::info!(file = %f.display(), trigger = why, "plugin loaded")
                }
                other => {
                    tracing::warn!(file = %f.display(), state = other.name(), reason = other.reason().unwrap_or(""), trigger = why, "plugin not serving")
                }
            }
            self.note(ev);
        }
        for f in old.keys() {
            if !next.contains_key(f) {
                self.note(
                    json!({"at": now, "file": file_name(f), "outcome": "removed", "trigger": why}),
                );
            }
        }
        // Versions that stop serving: calls in flight finish, with no more than what pb.toml
        // allows now; nothing more is pooled.
        for p in &current.plugins {
            if reg.plugins.iter().any(|n| Arc::ptr_eq(n, p)) {
                continue;
            }
            p.narrow(&allowed_now(&cfg, &p.manifest, rt.max_memory));
            p.retire();
        }
        // The registry serves before the report says so: whoever reads "loaded" in
        // `/api/plugins` and then writes gets the plugin's hooks.
        publish(reg);
        if let Ok(mut e) = self.entries.lock() {
            *e = next;
        }
        Some(())
    }

    /// The `/api/plugins` report: one entry per plugin file, with its one state.
    pub(crate) fn report(&self) -> Value {
        use std::sync::atomic::Ordering::Relaxed;
        let entries = self.entries.lock().map(|e| e.clone()).unwrap_or_default();
        let plugins: Vec<Value> = entries
            .iter()
            .map(|(f, e)| {
                let stem = f
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let mut o = json!({
                    "file": file_name(f),
                    "name": e.code.as_ref().map_or(stem, |c| c.name().to_owned()),
                    "state": e.state.name(),
                    "since": e.since,
                });
                o["error"] = json!(e.error());
                if let Some(c) = &e.code {
                    let m = &c.manifest;
                    o["version"] = json!(m.version);
                    o["hooks"] = json!(m.hooks.iter().map(|(c, ev)| json!({"collection": c, "events": ev.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>()})).collect::<Vec<_>>());
                    o["routes"] = json!(m.routes.iter().map(|r| json!({"method": r.method, "path": r.path, "requireAuth": r.require_auth})).collect::<Vec<_>>());
                    o["jobs"] = json!(m.jobs.iter().map(|j| json!({"id": j.name, "expression": j.cron})).collect::<Vec<_>>());
                    o["wants"] = json!(m.wants);
                }
                if let Some(p) = &e.version {
                    o["hash"] = json!(p.hash);
                    o["loadedAt"] = json!(p.loaded_at);
                    o["compileMs"] = json!(p.compile_ms as u64);
                    o["fromCache"] = json!(p.from_cache);
                    let live = p.env.live();
                    o["grants"] = json!(live.grants);
                    o["httpAllow"] = json!(live.http_allow);
                }
                let st = &e.stats;
                o["calls"] = json!(st.calls.load(Relaxed));
                o["failures"] = json!(st.failures.load(Relaxed));
                o["refusals"] = json!(st.refusals.load(Relaxed));
                o["inFlight"] = json!(st.in_flight.load(Relaxed));
                o["lastError"] = json!(st.last_error.lock().ok().and_then(|l| l.clone()));
                o
            })
            .collect();
        let history: Vec<Value> = self
            .history
            .lock()
            .map(|h| h.iter().cloned().collect())
            .unwrap_or_default();
        json!({"plugins": plugins, "history": history})
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
