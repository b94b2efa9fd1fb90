//! Wiring: builds the store and the router from a Config and serves until shutdown.

use crate::api::{self, AppState};
use crate::config::Config;
use crate::plugins::Plugins;
use crate::store::{Store, StoreConfig};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

pub(crate) fn store_config(cfg: &Config) -> StoreConfig {
    StoreConfig {
        cache_size_kib: cfg.store.cache_size_kib,
        journal_size_limit: cfg.store.journal_size_limit,
        busy_timeout_ms: cfg.store.busy_timeout_ms,
        n_readers: cfg.n_readers(),
    }
}

pub(crate) fn open_store(cfg: &Config) -> Result<Arc<Store>, String> {
    Store::open(&cfg.store.dir, &store_config(cfg))
        .map(Arc::new)
        .map_err(|e| format!("opening {}: {e}", cfg.store.dir.display()))
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
    let state = Arc::new(AppState {
        store: Arc::clone(&store),
        cfg: Arc::clone(&cfg),
        caches: api::cache::Caches::new(
            cfg.cache.tokens,
            cfg.cache.responses,
            cfg.cache.response_bytes,
        ),
        plugins: Arc::clone(&plugins),
    });
    plugins.set_services(Arc::new(api::plugin_services::ApiServices {
        state: Arc::downgrade(&state),
    }));
    plugins.spawn_background();
    let app = api::router(state).into_make_service_with_connect_info::<SocketAddr>();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let graceful = axum::serve(listener, app).with_graceful_shutdown(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let grace = std::time::Duration::from_millis(cfg.http.shutdown_grace_ms);
    let mut stop_rx2 = stop_rx.clone();
    tokio::select! {
        r = graceful => r?,
        _ = async move {
            let _ = stop_rx2.wait_for(|v| *v).await;
            tokio::time::sleep(grace).await;
        } => tracing::warn!("in-flight requests did not finish within the grace period"),
    }
    drop(stop_rx);
    let s = Arc::clone(&store);
    let _ = tokio::task::spawn_blocking(move || s.close()).await;
    Ok(())
}
