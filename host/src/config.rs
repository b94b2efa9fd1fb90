//! pb.toml + environment + command-line flags -> one typed Config.
//! Precedence: flags > env > pb.toml > built-in defaults. No other module reads env vars.

use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Config {
    pub http: HttpConfig,
    pub store: StoreSection,
    pub limits: Limits,
    pub cache: CacheConfig,
    pub log: LogConfig,
    pub plugins: PluginsConfig,
    pub realtime: RealtimeConfig,
    pub auth: AuthConfig,
    pub metrics: MetricsConfig,
    pub replication: ReplicationConfig,
    pub advisor: AdvisorConfig,
    /// The file this came from, when there was one (watched for plugin sections).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// `[plugins]`: the runtime's global knobs, then one `[plugins.<name>]` table per plugin.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub(crate) struct PluginsConfig {
    /// Where `*.wasm` files are loaded from; empty = `plugins` beside the data directory.
    pub dir: PathBuf,
    /// Watch `dir` (and this file's plugin sections) and swap in new versions live.
    pub hot_reload: bool,
    /// Milliseconds between epoch ticks: the granularity of every plugin time budget.
    pub epoch_tick_ms: u64,
    /// Plugin calls running at once, over all plugins; more wait their turn.
    pub max_concurrent_calls: usize,
    /// Where compiled plugins are cached by content hash; empty = `.plugin-cache` in the data
    /// directory.
    pub cache_dir: PathBuf,
    /// Grants of a plugin with no `[plugins.<name>]` table of its own.
    pub default_grants: Vec<String>,
    /// Defaults for every plugin; each `[plugins.<name>]` may override them.
    pub memory_mb: u64,
    pub hook_timeout_ms: u64,
    pub in_tx_timeout_ms: u64,
    pub route_timeout_ms: u64,
    pub job_timeout_ms: u64,
    pub max_instances: usize,
    pub max_calls_per_instance: u64,
    /// `[plugins.<name>]` tables.
    #[serde(flatten)]
    pub each: std::collections::BTreeMap<String, PluginEntry>,
}

impl Default for PluginsConfig {
    fn default() -> Self {
        Self {
            dir: PathBuf::new(),
            cache_dir: PathBuf::new(),
            hot_reload: true,
            epoch_tick_ms: 1,
            max_concurrent_calls: 64,
            default_grants: vec!["db:read".into()],
            memory_mb: 64,
            hook_timeout_ms: 50,
            in_tx_timeout_ms: 10,
            route_timeout_ms: 10_000,
            job_timeout_ms: 300_000,
            max_instances: 8,
            max_calls_per_instance: 10_000,
            each: Default::default(),
        }
    }
}

/// One plugin's section. Unset values fall back to `[plugins]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct PluginEntry {
    /// Off = the file is ignored even when present.
    pub enabled: Option<bool>,
    /// What the plugin may use: "db:read", "db:write", "kv", "http", "clock".
    pub grants: Option<Vec<String>>,
    /// host:port pairs outbound HTTP may reach (with the "http" grant).
    pub http_allow: Vec<String>,
    pub memory_mb: Option<u64>,
    pub hook_timeout_ms: Option<u64>,
    pub in_tx_timeout_ms: Option<u64>,
    pub route_timeout_ms: Option<u64>,
    pub job_timeout_ms: Option<u64>,
    pub max_instances: Option<usize>,
    /// Read by the plugin through `config.get`.
    pub config: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct CacheConfig {
    /// Verified tokens kept (0 = verify every request).
    pub tokens: usize,
    /// Whole list/view responses kept (0 = off).
    pub responses: usize,
    /// Bytes of response bodies kept, at most.
    pub response_bytes: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            tokens: 10_000,
            responses: 4_096,
            response_bytes: 8 << 20,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct HttpConfig {
    pub addr: String,
    pub body_bytes_max: usize,
    pub shutdown_grace_ms: u64,
    pub header_read_timeout_ms: u64,
    pub idle_timeout_ms: u64,
    /// 0 = the open-files limit minus the descriptors kept for everything else.
    pub max_connections: usize,
    pub max_headers: usize,
    pub max_header_bytes: usize,
    /// Serve the dashboard at `/_/` from this folder instead of the copy built into the
    /// binary; empty = the built-in one.
    pub dashboard_dir: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct StoreSection {
    pub dir: PathBuf,
    pub cache_size_kib: i64,
    pub journal_size_limit: i64,
    pub wal_autocheckpoint: i64,
    pub busy_timeout_ms: u64,
    pub readers: usize,
    /// SQLite's `synchronous` for every database file of the store.
    pub synchronous: Synchronous,
    /// How much of data.db the read connections map into memory, in MiB; 0 = none.
    pub mmap_mib: i64,
}

/// `[store] synchronous`: when a commit reaches the disk. Anything but these two values is
/// refused when the file is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub(crate) enum Synchronous {
    /// In WAL mode: a commit survives the process being killed; the last commits before a
    /// power loss or OS crash may be lost (never the file's consistency).
    #[default]
    #[serde(rename = "NORMAL")]
    Normal,
    /// Also fsyncs the WAL at every commit: it survives a power loss too.
    #[serde(rename = "FULL")]
    Full,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct Limits {
    pub page_size_default: i64,
    pub page_size_max: i64,
}

/// `[realtime]`: the SSE clients' limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct RealtimeConfig {
    /// Messages waiting for one client; a client that falls this far behind is disconnected.
    pub queue_len: usize,
    /// Topics one client may hold (PocketBase's 400 past it).
    pub max_subscriptions: usize,
    /// A stream with nothing to send for this long is closed (the SDK reconnects).
    pub idle_timeout_ms: u64,
    /// A stream is closed after this long whatever it sends.
    pub max_age_ms: u64,
}

impl Default for RealtimeConfig {
    fn default() -> Self {
        Self {
            queue_len: 256,
            max_subscriptions: 1000,
            idle_timeout_ms: 300_000,
            max_age_ms: 1_800_000,
        }
    }
}

/// `[auth]`: brute-force protection, on whatever `settings.rateLimits` says.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct AuthConfig {
    /// Failed sign-ins (wrong password, wrong OTP) for one identity of one collection per
    /// window before its sign-ins are answered 429 (0 = no limit).
    pub failures_per_identity: u32,
    /// Failed sign-ins from one client address per window (0 = no limit).
    pub failures_per_ip: u32,
    /// Verification, password-reset and OTP mails asked for by one client address per window
    /// (0 = no limit).
    pub mail_requests_per_ip: u32,
    /// The length of the windows above.
    pub window_ms: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            failures_per_identity: 20,
            failures_per_ip: 100,
            mail_requests_per_ip: 100,
            window_ms: 300_000,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct LogConfig {
    pub level: String,
    /// `text` (human-readable; colours only when stderr is a terminal) or `json` (one object
    /// per line, for log shippers).
    pub format: LogFormat,
    /// One info line per request (method, route, caller kind, status, duration).
    pub requests: bool,
}

/// `[metrics]`: where Prometheus scrapes. `GET /api/metrics` (superusers) is always there.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct MetricsConfig {
    /// A second listener serving `GET /metrics` without authentication, for a scraper on a
    /// private address (`127.0.0.1:9091`); empty = none.
    pub listen: String,
}

/// `[advisor]`: index advice. A record list whose statements step through more table rows in
/// full scans than `scan_threshold` is recorded with its plan and the index that would serve it
/// (`GET /api/collections/meta/index-advice`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct AdvisorConfig {
    pub enabled: bool,
    /// Rows stepped through in full table scans by one list (page and total together) past
    /// which it is recorded.
    pub scan_threshold: u64,
    /// Query shapes kept at most; past it the one with the least total time gives way.
    pub max_entries: usize,
}

impl Default for AdvisorConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            scan_threshold: 10_000,
            max_entries: 200,
        }
    }
}

/// `[replication]`: continuous replication of the databases by a supervised `litestream`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub(crate) struct ReplicationConfig {
    /// Off by default: nothing is started and the store checkpoints as it always does.
    pub enabled: bool,
    /// Where the replicas go: a directory path, `file:///path` or `s3://bucket/path`. Each
    /// database is replicated under `<url>/<file name>`.
    pub url: String,
    /// S3-compatible endpoint (empty = AWS); for `s3://` only.
    pub endpoint: String,
    /// S3 region (empty = Litestream's default lookup, or `us-east-1` with an endpoint).
    pub region: String,
    /// S3 credentials; empty = `LITESTREAM_ACCESS_KEY_ID`/`LITESTREAM_SECRET_ACCESS_KEY` or
    /// `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` from the environment, read by Litestream.
    pub access_key_id: String,
    pub secret_access_key: String,
    /// How often Litestream ships new WAL frames to the replica: the window of writes a lost
    /// machine can take with it.
    pub sync_interval_ms: u64,
    /// How long snapshots (and so the points in time a restore can reach) are kept.
    pub retention_hours: u64,
    /// How often a full snapshot is taken (restores replay from the newest one).
    pub snapshot_interval_hours: u64,
    /// The `litestream` binary; empty = found on PATH.
    pub litestream: PathBuf,
    /// true: a replica that cannot be written (or no usable litestream) stops the start.
    /// false: the error is logged and shown in /api/health, and the server serves anyway.
    pub required: bool,
    /// `serve` restores the databases from the replica when `data.db` is missing.
    pub restore_if_missing: bool,
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            url: String::new(),
            endpoint: String::new(),
            region: String::new(),
            access_key_id: String::new(),
            secret_access_key: String::new(),
            sync_interval_ms: 1_000,
            retention_hours: 24,
            snapshot_interval_hours: 6,
            litestream: PathBuf::new(),
            required: false,
            restore_if_missing: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            addr: "127.0.0.1:8090".into(),
            body_bytes_max: 32 << 20,
            shutdown_grace_ms: 10_000,
            header_read_timeout_ms: 30_000,
            idle_timeout_ms: 300_000,
            max_connections: 0,
            max_headers: 100,
            max_header_bytes: 64 << 10,
            dashboard_dir: PathBuf::new(),
        }
    }
}

impl Default for StoreSection {
    fn default() -> Self {
        Self {
            dir: PathBuf::from("pb_data"),
            cache_size_kib: 4_000,
            journal_size_limit: 200_000_000,
            wal_autocheckpoint: 10_000,
            busy_timeout_ms: 10_000,
            readers: 0,
            synchronous: Synchronous::Normal,
            mmap_mib: 0,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            page_size_default: 30,
            page_size_max: 1000,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Text,
            requests: false,
        }
    }
}

/// What the command line (and, through clap, the environment) said.
#[derive(Debug, Default, Clone)]
pub(crate) struct Overrides {
    pub config: Option<PathBuf>,
    pub http: Option<String>,
    pub dir: Option<PathBuf>,
    pub plugins_dir: Option<PathBuf>,
    pub dashboard_dir: Option<PathBuf>,
}

impl Config {
    /// Load pb.toml (the `--config` path, else ./pb.toml when present) and apply overrides.
    pub(crate) fn load(o: &Overrides) -> Result<Self, String> {
        let path = o
            .config
            .clone()
            .or_else(|| Some(PathBuf::from("pb.toml")).filter(|p| p.exists()));
        let mut cfg = match &path {
            Some(p) => Self::from_file(p)?,
            None => Self::default(),
        };
        cfg.source = path;
        if let Some(h) = &o.http {
            cfg.http.addr = h.clone();
        }
        if let Some(d) = &o.dir {
            cfg.store.dir = d.clone();
        }
        if let Some(d) = &o.plugins_dir {
            cfg.plugins.dir = d.clone();
        }
        if let Some(d) = &o.dashboard_dir {
            cfg.http.dashboard_dir = d.clone();
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub(crate) fn from_file(p: &Path) -> Result<Self, String> {
        let text =
            std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))?;
        toml::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    }

    fn validate(&self) -> Result<(), String> {
        if self.limits.page_size_max < 1 || self.limits.page_size_default < 1 {
            return Err("limits.page_size_* must be at least 1".into());
        }
        let p = &self.plugins;
        if p.epoch_tick_ms == 0 || p.max_concurrent_calls == 0 || p.max_instances == 0 {
            return Err(
                "plugins.epoch_tick_ms, max_concurrent_calls and max_instances must be at least 1"
                    .into(),
            );
        }
        if p.memory_mb == 0 || p.memory_mb > 4096 {
            return Err("plugins.memory_mb must be between 1 and 4096".into());
        }
        let h = &self.http;
        if h.body_bytes_max < 1024 {
            return Err("http.body_bytes_max must be at least 1024".into());
        }
        if h.header_read_timeout_ms == 0 || h.idle_timeout_ms == 0 {
            return Err(
                "http.header_read_timeout_ms and idle_timeout_ms must be at least 1".into(),
            );
        }
        if h.max_headers == 0 || h.max_header_bytes < 1024 {
            return Err(
                "http.max_headers must be at least 1 and http.max_header_bytes at least 1024"
                    .into(),
            );
        }
        let r = &self.replication;
        if r.enabled {
            if r.url.is_empty() {
                return Err("replication.url is needed when replication.enabled = true".into());
            }
            if r.sync_interval_ms == 0 || r.retention_hours == 0 || r.snapshot_interval_hours == 0 {
                return Err(
                    "replication.sync_interval_ms, retention_hours and snapshot_interval_hours must be at least 1"
                        .into(),
                );
            }
        }
        Ok(())
    }

    /// The plugins folder: `[plugins] dir`, else `plugins` beside the data directory
    /// (PocketBase keeps `pb_hooks` beside `pb_data` the same way).
    pub(crate) fn plugins_dir(&self) -> PathBuf {
        if !self.plugins.dir.as_os_str().is_empty() {
            return self.plugins.dir.clone();
        }
        let data = &self.store.dir;
        match data.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.join("plugins"),
            _ => PathBuf::from("plugins"),
        }
    }

    pub(crate) fn n_readers(&self) -> usize {
        if self.store.readers > 0 {
            self.store.readers
        } else {
            std::thread::available_parallelism()
                .map(|n| n.get() * 2)
                .unwrap_or(4)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_pb_toml_parses_to_the_defaults() {
        let shipped = Config::from_file(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../pb.toml"
        )))
        .unwrap();
        let d = Config::default();
        assert_eq!(shipped.http.addr, d.http.addr);
        assert_eq!(shipped.http.body_bytes_max, d.http.body_bytes_max);
        assert_eq!(shipped.store.dir, d.store.dir);
        assert_eq!(shipped.store.cache_size_kib, d.store.cache_size_kib);
        assert_eq!(shipped.store.synchronous, d.store.synchronous);
        assert_eq!(shipped.store.mmap_mib, d.store.mmap_mib);
        assert_eq!(shipped.limits.page_size_max, d.limits.page_size_max);
        assert_eq!(shipped.log.requests, d.log.requests);
        assert_eq!(shipped.metrics.listen, d.metrics.listen);
        let (r, dr) = (&shipped.replication, &d.replication);
        assert_eq!(
            (r.enabled, r.sync_interval_ms, r.retention_hours),
            (dr.enabled, dr.sync_interval_ms, dr.retention_hours)
        );
        assert_eq!(
            (r.snapshot_interval_hours, r.required, r.restore_if_missing),
            (
                dr.snapshot_interval_hours,
                dr.required,
                dr.restore_if_missing
            )
        );
        assert_eq!((&r.url, &r.litestream), (&dr.url, &dr.litestream));
        let (p, dp) = (&shipped.plugins, &d.plugins);
        assert_eq!(
            (
                p.dir.clone(),
                p.hot_reload,
                p.epoch_tick_ms,
                p.max_concurrent_calls
            ),
            (
                dp.dir.clone(),
                dp.hot_reload,
                dp.epoch_tick_ms,
                dp.max_concurrent_calls
            )
        );
        assert_eq!(p.default_grants, dp.default_grants);
        assert_eq!(
            (
                p.memory_mb,
                p.hook_timeout_ms,
                p.in_tx_timeout_ms,
                p.route_timeout_ms,
                p.job_timeout_ms
            ),
            (
                dp.memory_mb,
                dp.hook_timeout_ms,
                dp.in_tx_timeout_ms,
                dp.route_timeout_ms,
                dp.job_timeout_ms
            )
        );
        assert_eq!(
            (p.max_instances, p.max_calls_per_instance),
            (dp.max_instances, dp.max_calls_per_instance)
        );
        assert!(p.each.is_empty(), "the example sections are comments");
        let (a, da) = (&shipped.auth, &d.auth);
        assert_eq!(
            (
                a.failures_per_identity,
                a.failures_per_ip,
                a.mail_requests_per_ip,
                a.window_ms
            ),
            (
                da.failures_per_identity,
                da.failures_per_ip,
                da.mail_requests_per_ip,
                da.window_ms
            )
        );
    }

    #[test]
    fn plugin_sections_override_the_defaults_and_typos_are_refused() {
        let c: Config = toml::from_str(
            "[plugins]\nmemory_mb = 32\n[plugins.slugger]\ngrants = [\"kv\"]\nhook_timeout_ms = 5\n[plugins.slugger.config]\nk = \"v\"\n",
        )
        .unwrap();
        assert_eq!(c.plugins.memory_mb, 32);
        let e = &c.plugins.each["slugger"];
        assert_eq!(e.grants.as_deref(), Some(&["kv".to_owned()][..]));
        assert_eq!((e.hook_timeout_ms, e.config["k"].as_str()), (Some(5), "v"));
        // A misspelt global key reads as a plugin section and fails to parse as one.
        assert!(toml::from_str::<Config>("[plugins]\nmemroy_mb = 3\n").is_err());
        assert!(toml::from_str::<Config>("[plugins.x]\ngrant = []\n").is_err());
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pb.toml");
        std::fs::write(&p, "[http]\naddr = \"127.0.0.1:1\"\n[store]\ndir = \"x\"\n").unwrap();
        let c = Config::load(&Overrides {
            config: Some(p.clone()),
            http: None,
            dir: None,
            plugins_dir: None,
            dashboard_dir: None,
        })
        .unwrap();
        assert_eq!(c.http.addr, "127.0.0.1:1");
        let c = Config::load(&Overrides {
            config: Some(p),
            http: Some("127.0.0.1:2".into()),
            dir: Some("y".into()),
            plugins_dir: None,
            dashboard_dir: None,
        })
        .unwrap();
        assert_eq!(c.http.addr, "127.0.0.1:2");
        assert_eq!(c.store.dir, PathBuf::from("y"));
    }

    #[test]
    fn synchronous_is_normal_or_full_and_nothing_else() {
        let c: Config = toml::from_str("[store]\nsynchronous = \"FULL\"\n").unwrap();
        assert_eq!(c.store.synchronous, Synchronous::Full);
        let c: Config = toml::from_str("[store]\nsynchronous = \"NORMAL\"\n").unwrap();
        assert_eq!(c.store.synchronous, Synchronous::Normal);
        for bad in ["OFF", "full", "EXTRA", "2"] {
            let e = toml::from_str::<Config>(&format!("[store]\nsynchronous = {bad:?}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("synchronous") && e.contains("NORMAL") && e.contains("FULL"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn replication_needs_a_url_and_positive_intervals_when_enabled() {
        let load = |text: &str| {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("pb.toml");
            std::fs::write(&p, text).unwrap();
            Config::load(&Overrides {
                config: Some(p),
                ..Overrides::default()
            })
        };
        assert!(load("[replication]\nenabled = false\n").is_ok());
        let e = load("[replication]\nenabled = true\n").unwrap_err();
        assert!(e.contains("replication.url"), "{e}");
        let e = load("[replication]\nenabled = true\nurl = \"/r\"\nsync_interval_ms = 0\n")
            .unwrap_err();
        assert!(e.contains("sync_interval_ms"), "{e}");
        assert!(load("[replication]\nenabled = true\nurl = \"/r\"\n").is_ok());
        assert!(load("[replication]\nurll = \"/r\"\n").is_err());
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<Config>("[http]\nadr = \"x\"").is_err());
    }
}
