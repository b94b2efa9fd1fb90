//! Process edge: the command line (PocketBase's verbs), config, tracing, listener, signals.

use crate::config::{Config, Overrides};
use crate::{app, replication, store};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Parser)]
#[command(
    name = "ferrobase",
    version,
    about = "A PocketBase-compatible backend: one binary, embedded SQLite"
)]
struct Cli {
    /// The data directory (default: ./pb_data).
    #[arg(long, global = true, env = "FERROBASE_DIR")]
    dir: Option<PathBuf>,
    /// The configuration file (default: ./pb.toml when present).
    #[arg(long, global = true, env = "FERROBASE_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Start the web server (the default command).
    Serve {
        /// TCP address to listen on, e.g. 127.0.0.1:8090.
        #[arg(long, env = "FERROBASE_HTTP")]
        http: Option<String>,
        /// The plugins folder (default: `plugins` beside the data directory).
        #[arg(long = "pluginsDir", env = "FERROBASE_PLUGINS_DIR")]
        plugins_dir: Option<PathBuf>,
        /// Serve the dashboard from this folder instead of the built-in copy (for working on
        /// the dashboard: point it at dashboard/dist).
        #[arg(long = "dashboardDir", env = "FERROBASE_DASHBOARD_DIR")]
        dashboard_dir: Option<PathBuf>,
    },
    /// Manage superusers.
    Superuser {
        #[command(subcommand)]
        action: SuperuserAction,
    },
    /// Work on plugins.
    Plugin {
        #[command(subcommand)]
        action: PluginAction,
    },
    /// Restore the databases from a Litestream replica (see pb.toml's [replication]) into the
    /// data directory; the server must be stopped. Endpoint, region and credentials of an
    /// s3:// replica come from pb.toml's [replication] or the environment.
    Restore {
        /// The replica: a directory, file:///path or s3://bucket/path.
        #[arg(long)]
        from: String,
        /// Restore the state as of this time (RFC 3339, e.g. 2026-12-04T18:00:00Z) instead of
        /// the latest.
        #[arg(long)]
        timestamp: Option<String>,
        /// Replace databases that exist (without it, an existing data.db refuses the restore).
        #[arg(long)]
        force: bool,
    },
    /// Back up or restore the data directory (the zips of `pb_data/backups`, as PocketBase
    /// makes them).
    Backup {
        #[command(subcommand)]
        action: BackupAction,
    },
}

#[derive(Subcommand)]
enum BackupAction {
    /// Make a backup while the server runs or not (default name:
    /// pb_backup_<app name>_<UTC time>.zip); prints its path.
    Create {
        /// The backup's name: lowercase letters, digits, _ and -, ending in .zip.
        name: Option<String>,
    },
    /// Replace the data directory's contents with a backup zip's (the server must be
    /// stopped). The archive is checked before anything changes.
    Restore {
        /// The backup zip (any path).
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum PluginAction {
    /// Write a new plugin crate, ready to build for wasm32-wasip2, with the SDK this binary was
    /// built with vendored into it.
    New {
        /// The plugin's name: lowercase letters, digits, - and _ (also its crate's and its
        /// routes' prefix, /api/NAME/...).
        name: String,
        /// Where to create the crate's folder (default: the current directory).
        #[arg(long)]
        path: Option<PathBuf>,
        /// Depend on the SDK at this path instead of vendoring a copy.
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SuperuserAction {
    /// Create the superuser, or set its password when it exists.
    Upsert { email: String, password: String },
    /// Create a new superuser.
    Create { email: String, password: String },
    /// Change an existing superuser's password.
    Update { email: String, password: String },
    /// Delete a superuser.
    Delete { email: String },
}

/// Sets the log level of the running process (SIGHUP applies pb.toml's); unset when RUST_LOG
/// decides the level.
type SetLevel = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;
static SET_LOG_LEVEL: std::sync::OnceLock<SetLevel> = std::sync::OnceLock::new();

fn init_tracing(log: &crate::config::LogConfig) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::EnvFilter;
    let from_env = EnvFilter::try_from_default_env().ok();
    let fixed = from_env.is_some();
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(&log.level));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    // The two formats are two builder types: install either with a handle to its filter.
    macro_rules! install {
        ($builder:expr) => {{
            let b = $builder.with_filter_reloading();
            let h = b.reload_handle();
            b.try_init().ok().map(|()| {
                Box::new(move |l: &str| h.reload(EnvFilter::new(l)).map_err(|e| e.to_string()))
                    as SetLevel
            })
        }};
    }
    let set: Option<SetLevel> = match log.format {
        // Colour codes only for a person at a terminal: in a file or journald they are noise.
        crate::config::LogFormat::Text => {
            install!(builder.with_ansi(std::io::stderr().is_terminal()))
        }
        crate::config::LogFormat::Json => install!(builder.json().flatten_event(true)),
    };
    if let Some(set) = set.filter(|_| !fixed) {
        let _ = SET_LOG_LEVEL.set(set);
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
    tracing::info!("shutting down: draining in-flight requests");
}

fn try_run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // Writing a plugin crate needs no configuration (nor a valid pb.toml).
    if let Some(Command::Plugin { action }) = &cli.command {
        return plugin(action);
    }
    let overrides = overrides(&cli);
    let cfg = Config::load(&overrides).map_err(anyhow::Error::msg)?;
    init_tracing(&cfg.log);
    match cli.command {
        Some(Command::Superuser { action }) => superuser(&cfg, action),
        Some(Command::Plugin { action }) => plugin(&action),
        Some(Command::Backup { action }) => backup(&cfg, action),
        Some(Command::Restore {
            from,
            timestamp,
            force,
        }) => restore_from_replica(&cfg, &from, timestamp.as_deref(), force),
        None | Some(Command::Serve { .. }) => serve(cfg, overrides),
    }
}

/// What the command line (and its environment) says over pb.toml.
fn overrides(cli: &Cli) -> Overrides {
    let http = match &cli.command {
        Some(Command::Serve { http, .. }) => http.clone(),
        _ => None,
    };
    let (plugins_dir, dashboard_dir) = match &cli.command {
        Some(Command::Serve {
            plugins_dir,
            dashboard_dir,
            ..
        }) => (plugins_dir.clone(), dashboard_dir.clone()),
        _ => (None, None),
    };
    Overrides {
        config: cli.config.clone(),
        http,
        dir: cli.dir.clone(),
        plugins_dir,
        dashboard_dir,
    }
}

fn serve(cfg: Config, overrides: Overrides) -> anyhow::Result<()> {
    let cfg = Arc::new(cfg);
    restore_if_missing(&cfg)?;
    let store = app::open_store(&cfg).map_err(anyhow::Error::msg)?;
    // Litestream starts once the databases exist (the store just opened or created them).
    let (replication, supervisor) = match start_replication(&cfg) {
        Ok(Some((r, s))) => (Some(r), s),
        Ok(None) => (None, None),
        Err(e) => {
            store.close();
            return Err(e);
        }
    };
    let served = serve_until_stopped(cfg, store, overrides, replication);
    // The store is closed by now: litestream's final sync ships the last commits.
    if let Some(s) = supervisor {
        s.stop();
    }
    served
}

/// `[replication]`'s `restore_if_missing` on `serve`: a missing data.db is restored from the
/// replica before the store opens. A failure stops the start only when `required = true`.
fn restore_if_missing(cfg: &Config) -> anyhow::Result<()> {
    let r = &cfg.replication;
    let dir = &cfg.store.dir;
    if r.enabled && r.restore_if_missing && !dir.join("data.db").exists() {
        let restored = replication::restore(&replication::Restore {
            cfg: r,
            from: &r.url,
            timestamp: None,
            force: false,
            dir,
        });
        match restored {
            Ok(dbs) => {
                tracing::info!(from = %r.url, ?dbs, "data.db was missing: restored from the replica")
            }
            Err(replication::ReplicationError::Empty(_)) => {
                tracing::info!(from = %r.url, "data.db is missing and the replica is empty: starting empty");
            }
            Err(e) if r.required => anyhow::bail!("replication (required): {e}"),
            Err(e) => {
                tracing::error!(error = %e, "restore_if_missing failed; starting without the replica's data")
            }
        }
    }
    Ok(())
}

/// `[replication]` on `serve`: supervise litestream. A failure stops the start only when
/// `required = true`.
fn start_replication(
    cfg: &Config,
) -> anyhow::Result<Option<(replication::Replication, Option<replication::Supervisor>)>> {
    let r = &cfg.replication;
    if !r.enabled {
        return Ok(None);
    }
    let (state, supervisor, started) = replication::Supervisor::start(r, &cfg.store.dir);
    if let Err(e) = started {
        if r.required {
            if let Some(s) = supervisor {
                s.stop();
            }
            anyhow::bail!("replication (required = true): {e}");
        }
        tracing::error!(error = %e, "replication is not working; serving anyway (required = false)");
    }
    Ok(Some((state, supervisor)))
}

fn restore_from_replica(
    cfg: &Config,
    from: &str,
    timestamp: Option<&str>,
    force: bool,
) -> anyhow::Result<()> {
    let dir = &cfg.store.dir;
    std::fs::create_dir_all(dir)?;
    let Some(_lock) = crate::backups::lock(dir)? else {
        anyhow::bail!("a server is running on {}: stop it first", dir.display());
    };
    let restored = replication::restore(&replication::Restore {
        cfg: &cfg.replication,
        from,
        timestamp,
        force,
        dir,
    })?;
    println!(
        "Restored {} from {from} into {}.",
        restored.join(", "),
        dir.display()
    );
    Ok(())
}

fn serve_until_stopped(
    cfg: Arc<Config>,
    store: Arc<store::Store>,
    overrides: Overrides,
    replication: Option<replication::Replication>,
) -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind(&cfg.http.addr)?;
    listener.set_nonblocking(true)?;
    tracing::info!(addr = %listener.local_addr()?, dir = %cfg.store.dir.display(), "ferrobase serving");
    let dashboard = crate::dashboard::embedded() || !cfg.http.dashboard_dir.as_os_str().is_empty();
    print_installer_link(&store, listener.local_addr()?, dashboard);
    app::start_metrics_listener(&cfg)?;
    let (stop, _) = tokio::sync::watch::channel(false);
    app::serve_generations(
        cfg,
        store,
        listener,
        Arc::new(stop),
        Some(|| Box::pin(shutdown_signal())),
        Some(Box::new(move || {
            // Loaded and validated whole before anything is applied.
            let next = Config::load(&overrides)?;
            if let Some(set) = SET_LOG_LEVEL.get() {
                set(&next.log.level)?;
            }
            Ok(next)
        })),
        replication,
    )
    .map_err(anyhow::Error::msg)
}

/// While no superuser exists, the dashboard's first-run link (PocketBase's installer): a
/// 30-minute, non-refreshable token of the installer account opens a page that creates the
/// first superuser. Without a built-in dashboard, the command that does it instead.
fn print_installer_link(store: &store::Store, addr: std::net::SocketAddr, dashboard: bool) {
    let cli_hint = "ferrobase superuser upsert EMAIL PASS";
    if !dashboard {
        if matches!(store::superusers::installer(store), Ok(Some(_))) {
            println!("No superuser yet: create the first one with `{cli_hint}`.");
        }
        return;
    }
    let (id, token_key) = match store::superusers::installer(store) {
        Ok(Some(found)) => found,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, "could not prepare the first-run link");
            return;
        }
    };
    let schema = store.schema();
    let Some(secret) = schema
        .by_id(crate::schema::SUPERUSERS_ID)
        .and_then(|c| c.token_secret("authToken"))
    else {
        return;
    };
    let mut extra = serde_json::Map::new();
    extra.insert("refreshable".into(), serde_json::Value::Bool(false));
    let now = chrono::Utc::now().timestamp();
    let token = crate::auth::token::sign(
        &id,
        crate::schema::SUPERUSERS_ID,
        "auth",
        30 * 60,
        extra,
        &token_key,
        secret,
        now,
    );
    let host = if addr.ip().is_unspecified() {
        format!("127.0.0.1:{}", addr.port())
    } else {
        addr.to_string()
    };
    println!(
        "\nNo superuser yet. Open this link in a browser within 30 minutes to create the first one:\n\
         http://{host}/_/#/pbinstall/{token}\n\
         (or from the command line: {cli_hint})\n"
    );
}

fn backup(cfg: &Config, action: BackupAction) -> anyhow::Result<()> {
    use crate::backups::{self, Backups};
    let dir = &cfg.store.dir;
    match action {
        BackupAction::Create { name } => {
            let name = match name {
                Some(n) if backups::valid_name(&n) => n,
                Some(n) => anyhow::bail!(
                    "{n:?} is not a valid backup name (lowercase letters, digits, _ and -, ending in .zip)"
                ),
                None => {
                    let store = app::open_store(cfg).map_err(anyhow::Error::msg)?;
                    let rt = tokio::runtime::Builder::new_current_thread().build()?;
                    let settings = rt.block_on(crate::settings::Live::load(&store))?;
                    store.close();
                    backups::default_name(
                        "pb_backup_",
                        &settings.current().meta.app_name,
                        chrono::Utc::now(),
                    )
                }
            };
            let b = Backups::open(dir);
            if b.exists(&name) {
                anyhow::bail!("a backup named {name} already exists");
            }
            b.create(&name)?;
            println!("{}", dir.join(backups::BACKUPS_DIR).join(&name).display());
            Ok(())
        }
        BackupAction::Restore { file } => {
            let Some(_lock) = backups::lock(dir)? else {
                anyhow::bail!(
                    "a server is running on {}: stop it first, or restore through its API (POST /api/backups/{{key}}/restore)",
                    dir.display()
                );
            };
            let b = Backups::open(dir);
            b.clean_temp()?;
            let prepared = b.prepare(&file, &file.display().to_string())?;
            let swapped = b.swap(prepared)?;
            match app::open_store(cfg) {
                Ok(store) => {
                    store.close();
                    swapped.commit();
                    println!("Restored {} into {}.", file.display(), dir.display());
                    Ok(())
                }
                Err(e) => {
                    swapped.revert()?;
                    anyhow::bail!(
                        "the restored data does not open ({e}); the previous data is back in place"
                    )
                }
            }
        }
    }
}

fn superuser(cfg: &Config, action: SuperuserAction) -> anyhow::Result<()> {
    let store = app::open_store(cfg).map_err(anyhow::Error::msg)?;
    let (email, password, mode) = match action {
        SuperuserAction::Upsert { email, password } => {
            (email, Some(password), store::superusers::Mode::Upsert)
        }
        SuperuserAction::Create { email, password } => {
            (email, Some(password), store::superusers::Mode::Create)
        }
        SuperuserAction::Update { email, password } => {
            (email, Some(password), store::superusers::Mode::Update)
        }
        SuperuserAction::Delete { email } => (email, None, store::superusers::Mode::Delete),
    };
    let msg = store::superusers::apply(&store, &email, password.as_deref(), mode)
        .map_err(anyhow::Error::msg)?;
    println!("{msg}");
    store.close();
    Ok(())
}

fn plugin(action: &PluginAction) -> anyhow::Result<()> {
    match action {
        PluginAction::New { name, path, sdk } => {
            let parent = path.clone().unwrap_or_else(|| PathBuf::from("."));
            let dir = crate::plugins::new_plugin(&parent, name, sdk.as_deref())
                .map_err(anyhow::Error::msg)?;
            let file = name.replace('-', "_");
            println!("Created the plugin crate {}.", dir.display());
            println!(
                "  cd {} && cargo build --release --target wasm32-wasip2",
                dir.display()
            );
            println!(
                "  then copy target/wasm32-wasip2/release/{file}.wasm into the server's plugins folder"
            );
            Ok(())
        }
    }
}

/// The `ferrobase` command line: parse, run, and map the outcome to an exit code.
pub fn run() -> ExitCode {
    match try_run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
