//! Wiring: builds the store and the router from a Config and serves until shutdown, one
//! generation after another (a restore ends one and starts the next on the restored data).

use crate::api::{self, AppState};
use crate::backups::Backups;
use crate::config::Config;
use crate::plugins::Plugins;
use crate::store::{Store, StoreConfig};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A future that resolves when the process is asked to stop (SIGTERM, Ctrl-C).
pub(crate) type StopSignal = fn() -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// Re-read pb.toml (and apply what lives outside the server, the log level): the new
/// configuration, or why the file is refused (then nothing was applied).
pub(crate) type Reload = Box<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// Serve on `listener` until `stop` turns true: the binary's and the in-process test server's
/// loop. Each generation of the server runs on a runtime of its own; when a restore is asked
/// for, the generation stops (in-flight requests drain, realtime streams close), its runtime is
/// shut down with every task it spawned, the store closes, the data directory's contents are
/// swapped for the restored ones and a new generation opens them, in this process, on the same
/// listening socket (connections wait in its backlog meanwhile). A restored directory that does
/// not open is swapped back out. `signal`, when given, sets `stop` when it resolves.
///
/// With `reload`, SIGHUP re-reads pb.toml: a file that does not load leaves everything as it is
/// (the error is logged); a valid one ends the generation the same way and the next one runs
/// on it, the listening address and the data directory excepted (they need a restart, and the
/// log says so). Realtime clients reconnect, as they do after PocketBase restarts.
pub(crate) fn serve_generations(
    mut cfg: Arc<Config>,
    store: Arc<Store>,
    listener: std::net::TcpListener,
    stop: Arc<tokio::sync::watch::Sender<bool>>,
    signal: Option<StopSignal>,
    reload: Option<Reload>,
    replication: Option<crate::replication::Replication>,
) -> Result<(), String> {
    let reload = reload.map(Arc::new);
    let reloaded: Arc<std::sync::Mutex<Option<Config>>> = Arc::default();
    let reload_ready = Arc::new(tokio::sync::Notify::new());
    let dir = cfg.store.dir.clone();
    let backups = Arc::new(Backups::open(&dir));
    let _lock = match crate::backups::lock(&dir) {
        Ok(Some(lock)) => {
            if let Err(e) = backups.clean_temp() {
                tracing::warn!(error = %e, "the temporary folder was not emptied");
            }
            Some(lock)
        }
        Ok(None) => {
            tracing::warn!(dir = %dir.display(), "another process holds this data directory's lock (a second server?)");
            None
        }
        Err(e) => return Err(format!("locking {}: {e}", dir.display())),
    };
    let mut store = Some(store);
    loop {
        let current = store.take().ok_or("no store")?;
        let rt = runtime().map_err(|e| e.to_string())?;
        let socket = listener.try_clone().map_err(|e| e.to_string())?;
        let (c, b, st) = (Arc::clone(&cfg), Arc::clone(&backups), Arc::clone(&stop));
        let repl = replication.clone();
        let (rl, slot, ready) = (
            reload.clone(),
            Arc::clone(&reloaded),
            Arc::clone(&reload_ready),
        );
        let served = rt.block_on(async move {
            if let Some(signal) = signal {
                let st = Arc::clone(&st);
                tokio::spawn(async move {
                    signal().await;
                    st.send_replace(true);
                });
            }
            if let Some(rl) = rl {
                spawn_reload_on_hangup(rl, slot, Arc::clone(&ready));
            }
            let socket = tokio::net::TcpListener::from_std(socket)?;
            let mut stopped = st.subscribe();
            let waiting = Arc::clone(&b);
            let shutdown = async move {
                tokio::select! {
                    _ = stopped.wait_for(|s| *s) => {},
                    () = waiting.restore_requested() => {},
                    () = ready.notified() => {},
                }
            };
            serve(c, Arc::clone(&current), socket, shutdown, b, repl).await?;
            std::io::Result::Ok(current)
        });
        rt.shutdown_timeout(std::time::Duration::from_secs(10));
        let closed = served.map_err(|e| e.to_string())?;
        if *stop.borrow() {
            return Ok(());
        }
        let pending_config = reloaded.lock().ok().and_then(|mut c| c.take());
        let Some(prepared) = backups.take_pending() else {
            let Some(mut next) = pending_config else {
                return Ok(());
            };
            if next.http.addr != cfg.http.addr {
                tracing::warn!(kept = %cfg.http.addr, asked = %next.http.addr, "http.addr needs a restart to change");
                next.http.addr.clone_from(&cfg.http.addr);
            }
            if next.store.dir != cfg.store.dir {
                tracing::warn!(kept = %cfg.store.dir.display(), "the data directory needs a restart to change");
                next.store.dir.clone_from(&cfg.store.dir);
            }
            drop(closed);
            cfg = Arc::new(next);
            store = Some(open_store(&cfg)?);
            tracing::info!("pb.toml reloaded; serving with it");
            continue;
        };
        if Arc::strong_count(&closed) > 1 {
            tracing::warn!("the previous store is still referenced while the data is swapped");
        }
        drop(closed);
        store = Some(match backups.swap(prepared) {
            Ok(swapped) => match open_store(&cfg) {
                Ok(s) => {
                    swapped.commit();
                    tracing::info!("backup restored; serving the restored data");
                    if let Some(r) = &replication {
                        r.restart();
                    }
                    s
                }
                Err(e) => {
                    tracing::error!(error = %e, "the restored data does not open; putting the previous data back");
                    swapped
                        .revert()
                        .map_err(|e| format!("reverting a failed restore: {e}"))?;
                    open_store(&cfg)?
                }
            },
            Err(e) => {
                tracing::error!(error = %e, "restore failed; the previous data is in place");
                open_store(&cfg)?
            }
        });
    }
}

pub(crate) fn store_config(cfg: &Config) -> StoreConfig {
    StoreConfig {
        mmap_mib: cfg.store.mmap_mib,
        cache_size_kib: cfg.store.cache_size_kib,
        journal_size_limit: cfg.store.journal_size_limit,
        // Litestream checkpoints while it replicates; see pb.toml's [replication].
        wal_autocheckpoint: if cfg.replication.enabled {
            0
        } else {
            cfg.store.wal_autocheckpoint
        },
        busy_timeout_ms: cfg.store.busy_timeout_ms,
        n_readers: cfg.n_readers(),
        synchronous: cfg.store.synchronous,
    }
}

/// The connection limits from `[http]`; a cap of 0 becomes what the descriptor limit allows.
fn http_limits(cfg: &Config) -> crate::http::Limits {
    use std::time::Duration;
    let h = &cfg.http;
    let descriptors = crate::http::raise_descriptor_limit();
    let max_connections = if h.max_connections > 0 {
        h.max_connections
    } else {
        crate::http::auto_max_connections(descriptors)
    };
    tracing::info!(
        descriptors,
        max_connections,
        "open-files limit and connection cap"
    );
    crate::http::Limits {
        header_read_timeout: Duration::from_millis(h.header_read_timeout_ms),
        idle_timeout: Duration::from_millis(h.idle_timeout_ms),
        max_connections,
        max_headers: h.max_headers,
        max_header_bytes: h.max_header_bytes,
        shutdown_grace: Duration::from_millis(h.shutdown_grace_ms),
        // The SSE stream: an idle one then holds no HTTP/1 buffers (see http/stream.rs).
        stream_path: Some("/api/realtime"),
    }
}

pub(crate) fn open_store(cfg: &Config) -> Result<Arc<Store>, String> {
    Store::open(&cfg.store.dir, &store_config(cfg))
        .map(Arc::new)
        .map_err(|e| format!("opening {}: {e}", cfg.store.dir.display()))
}

/// The runtime a server runs on (the binary's and the in-process test server's).
/// pb.toml's `[metrics] listen`: bind it now (a bad address stops the start) and serve
/// `GET /metrics` on a thread of its own for the life of the process, whatever the server's
/// generations do. Nothing when it is empty.
pub(crate) fn start_metrics_listener(cfg: &Config) -> std::io::Result<()> {
    if cfg.metrics.listen.is_empty() {
        return Ok(());
    }
    let listener = std::net::TcpListener::bind(&cfg.metrics.listen)?;
    listener.set_nonblocking(true)?;
    tracing::info!(addr = %listener.local_addr()?, "metrics listener serving GET /metrics");
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            let served = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .and_then(|rt| {
                    rt.block_on(async move {
                        let listener = tokio::net::TcpListener::from_std(listener)?;
                        axum::serve(listener, api::metrics::listener_router()).await
                    })
                });
            if let Err(e) = served {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        })?;
    Ok(())
}

pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // JSON up to PocketBase's 10,000 levels is parsed, copied, compared and printed by
        // recursive code on these threads; 2 MiB (the default) is not enough for that, and the
        // extra reservation costs address space, not memory.
        .thread_stack_size(crate::THREAD_STACK_BYTES)
        .build()
}

/// On each SIGHUP, re-read pb.toml; a valid file is handed to the generation loop (which ends
/// this generation), an invalid one is logged and changes nothing.
fn spawn_reload_on_hangup(
    reload: Arc<Reload>,
    slot: Arc<std::sync::Mutex<Option<Config>>>,
    ready: Arc<tokio::sync::Notify>,
) {
    tokio::spawn(async move {
        let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
        else {
            return;
        };
        while hup.recv().await.is_some() {
            match reload() {
                Ok(next) => {
                    if let Ok(mut s) = slot.lock() {
                        *s = Some(next);
                    }
                    ready.notify_one();
                    return;
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: pb.toml not applied; the running configuration stays");
                }
            }
        }
    });
}

/// Serve on `listener` until `shutdown` resolves, then drain in-flight requests (bounded by the
/// configured grace period) and close the store, which checkpoints the WAL.
pub(crate) async fn serve(
    cfg: Arc<Config>,
    store: Arc<Store>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    backups: Arc<Backups>,
    replication: Option<crate::replication::Replication>,
) -> std::io::Result<()> {
    let plugins = Plugins::start(
        cfg.plugins.clone(),
        cfg.plugins_dir(),
        cfg.source.clone(),
        cfg.store.dir.clone(),
        Arc::clone(&store),
    )
    .await
    .map_err(std::io::Error::other)?;
    let feed = Arc::new(crate::records::feed::Feed::default());
    feed.listen(Arc::new(crate::records::feed::AfterCommitHooks(
        Arc::clone(&plugins),
    )));
    // Opening the storage removes the uploads a crash left in its temporary folder.
    let files = Arc::new(crate::files::Storage::open(&cfg.store.dir)?);
    let records = Arc::new(crate::records::Records {
        store: Arc::clone(&store),
        plugins: Arc::clone(&plugins),
        feed,
        files: Arc::clone(&files),
        advisor: Arc::new(crate::records::advice::Advisor::new(cfg.advisor.clone())),
    });
    plugins.set_services(Arc::new(crate::records::services::RecordServices {
        records: Arc::downgrade(&records),
    }));
    let realtime = crate::realtime::Hub::start(cfg.realtime.clone(), &records);
    let settings = Arc::new(
        crate::settings::Live::load(&store)
            .await
            .map_err(std::io::Error::other)?,
    );
    // Plugins' log lines become `_logs` rows under the same settings as requests.
    plugins.set_log_sink(Arc::new(crate::logs::PluginLines {
        store: Arc::clone(&store),
        settings: Arc::clone(&settings),
    }));
    // Files go where the stored settings say (and follow every settings change after).
    records.files.use_s3(settings.current().s3.bucket_config());
    // Uploads and deletes a crash cut short after their write's COMMIT, finished by what the
    // database holds (locally, or on S3 when the settings use a bucket).
    records.finish_interrupted_files().await;
    let jobs = Arc::new(crate::jobs::Jobs {
        store: Arc::clone(&store),
        settings: Arc::clone(&settings),
        backups: Arc::clone(&backups),
    });
    jobs.spawn();
    let state = Arc::new(AppState {
        store: Arc::clone(&store),
        settings,
        limiters: api::rate_limit::Limiters::default(),
        realtime: Arc::clone(&realtime),
        cfg: Arc::clone(&cfg),
        caches: api::cache::Caches::new(
            cfg.cache.tokens,
            cfg.cache.responses,
            cfg.cache.response_bytes,
        ),
        plugins: Arc::clone(&plugins),
        records,
        outbox: crate::auth::mail::Outbox::start(),
        otp_attempts: Default::default(),
        throttle: crate::auth::limits::Throttle::new(cfg.auth.clone()),
        mail_cooldowns: Default::default(),
        backups,
        replication,
        jobs,
        apple_names: Default::default(),
    });
    plugins.spawn_background();
    let router = api::router(state);
    // Realtime streams never end by themselves: they are closed once every connection has been
    // told the server is stopping (so a stream's end closes its connection, and a client that
    // reacts to it finds the server gone), and the drain does not wait its grace period for them.
    let stopping = move || realtime.close_all();
    crate::http::serve(listener, http_limits(&cfg), router, shutdown, stopping).await?;
    // Committed writes' uploads and deletes still going to S3 finish before the process ends.
    files.settle_all().await;
    let s = Arc::clone(&store);
    let _ = tokio::task::spawn_blocking(move || s.close()).await;
    Ok(())
}
