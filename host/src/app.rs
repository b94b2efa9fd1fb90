//! Wiring: builds the store and the router from a Config and serves until shutdown.

use crate::api::{self, AppState};
use crate::config::Config;
use crate::plugins::Plugins;
use crate::store::{Store, StoreConfig};
use std::future::Future;
use std::sync::Arc;

pub(crate) fn store_config(cfg: &Config) -> StoreConfig {
    StoreConfig {
        cache_size_kib: cfg.store.cache_size_kib,
        journal_size_limit: cfg.store.journal_size_limit,
        wal_autocheckpoint: cfg.store.wal_autocheckpoint,
        busy_timeout_ms: cfg.store.busy_timeout_ms,
        n_readers: cfg.n_readers(),
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
    }
}

pub(crate) fn open_store(cfg: &Config) -> Result<Arc<Store>, String> {
    Store::open(&cfg.store.dir, &store_config(cfg))
        .map(Arc::new)
        .map_err(|e| format!("opening {}: {e}", cfg.store.dir.display()))
}

/// The runtime a server runs on (the binary's and the in-process test server's).
pub(crate) fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // JSON up to PocketBase's 10,000 levels is parsed, copied, compared and printed by
        // recursive code on these threads; 2 MiB (the default) is not enough for that, and the
        // extra reservation costs address space, not memory.
        .thread_stack_size(crate::THREAD_STACK_BYTES)
        .build()
}

/// Serve on `listener` until `shutdown` resolves, then drain in-flight requests (bounded by the
/// configured grace period) and close the store, which checkpoints the WAL.
pub(crate) async fn serve(
    cfg: Arc<Config>,
    store: Arc<Store>,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
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
    // Files go where the stored settings say (and follow every settings change after).
    records
        .files
        .use_s3(api::settings::s3_config(&settings.current().s3));
    let settings_live = Arc::clone(&settings);
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
    });
    plugins.spawn_background();
    spawn_session_cleanup(Arc::clone(&store));
    spawn_logs_cleanup(Arc::clone(&store), Arc::clone(&settings_live));
    let router = api::router(state);
    // Realtime streams never end by themselves: close them when the server stops, so the drain
    // does not wait its whole grace period for them.
    let shutdown = async move {
        shutdown.await;
        realtime.close_all();
    };
    crate::http::serve(listener, http_limits(&cfg), router, shutdown).await?;
    // Committed writes' uploads and deletes still going to S3 finish before the process ends.
    files.settle_all().await;
    let s = Arc::clone(&store);
    let _ = tokio::task::spawn_blocking(move || s.close()).await;
    Ok(())
}

/// At start and every 6 hours, as PocketBase's `__pbLogsCleanup__` job does: request-log rows
/// older than `settings.logs.maxDays` are deleted.
fn spawn_logs_cleanup(store: Arc<Store>, settings: Arc<crate::settings::Live>) {
    tokio::spawn(async move {
        let every = std::time::Duration::from_secs(6 * 3600);
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            let max_days = settings.peek().logs.max_days;
            if max_days <= 0 {
                continue;
            }
            if let Err(e) = crate::logs::cleanup(Arc::clone(&store), max_days).await {
                tracing::warn!(error = %e, "request logs cleanup failed");
            }
        }
    });
}

/// Every hour, as PocketBase's `__pbOTPCleanup__` and `__pbMFACleanup__` jobs do: the `_otps`
/// and `_mfas` rows older than their auth collection's `otp.duration` / `mfa.duration` are
/// deleted (the flows already refuse them; this keeps the tables small).
fn spawn_session_cleanup(store: Arc<Store>) {
    tokio::spawn(async move {
        let hour = std::time::Duration::from_secs(3600);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + hour, hour);
        loop {
            tick.tick().await;
            let schema = store.schema();
            let now = chrono::Utc::now();
            for c in schema.collections.iter().filter(|c| c.is_auth()) {
                for (table, option) in [("_otps", "otp"), ("_mfas", "mfa")] {
                    let duration = c
                        .auth_option(option)
                        .and_then(|o| o.get("duration"))
                        .and_then(serde_json::Value::as_i64)
                        .unwrap_or(0);
                    let before = crate::schema::ids::format_time(
                        now - chrono::Duration::seconds(duration.max(0)),
                    );
                    let id = c.id.clone();
                    if let Err(e) = store
                        .write(move |conn| {
                            crate::store::records::delete_expired_refs(conn, table, &id, &before)
                        })
                        .await
                    {
                        tracing::warn!(error = %e, table, "expired session cleanup failed");
                    }
                }
            }
        }
    });
}
