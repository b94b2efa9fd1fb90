//! The server run inside a test process: the binary's own wiring (`app::serve`) on its own
//! runtime thread, on a listener bound before the thread starts, so no port is ever guessed.

use crate::config::{Config, Overrides};
use crate::{app, store};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

/// A running in-process server. Stopping it (or dropping it) is what SIGTERM does to the binary:
/// in-flight requests drain and the store closes, which checkpoints the WAL.
pub struct InProcess {
    addr: SocketAddr,
    stop: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl InProcess {
    /// Serve the data directory `data` with `superuser` (email, password) upserted first, as
    /// `ferrobase superuser upsert` then `ferrobase serve --dir data` would. `config` is the
    /// pb.toml to read (`None`: the defaults, whatever the working directory holds).
    pub fn start(
        data: &Path,
        config: Option<&Path>,
        superuser: (&str, &str),
    ) -> Result<InProcess, String> {
        let cfg = match config {
            Some(p) => Config::load(&Overrides {
                config: Some(p.to_path_buf()),
                dir: Some(data.to_path_buf()),
                ..Overrides::default()
            })?,
            None => {
                let mut c = Config::default();
                c.store.dir = PathBuf::from(data);
                c
            }
        };
        let cfg = std::sync::Arc::new(cfg);
        let db = app::open_store(&cfg)?;
        store::superusers::apply(
            &db,
            superuser.0,
            Some(superuser.1),
            store::superusers::Mode::Upsert,
        )?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        listener.set_nonblocking(true).map_err(|e| e.to_string())?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let stop = std::sync::Arc::new(tokio::sync::watch::channel(false).0);
        let stopping = std::sync::Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("server {addr}"))
            .spawn(move || app::serve_generations(cfg, db, listener, stopping, None, None, None))
            .map_err(|e| e.to_string())?;
        Ok(InProcess {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens (always 127.0.0.1).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether the server has stopped on its own (it failed to start, or it crashed); its error.
    pub fn exited(&mut self) -> Option<Result<(), String>> {
        if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
            return Some(self.join());
        }
        None
    }

    /// Shut down as SIGTERM does and wait for the store to close.
    pub fn stop(&mut self) -> Result<(), String> {
        self.stop.send_replace(true);
        self.join()
    }

    fn join(&mut self) -> Result<(), String> {
        match self.thread.take() {
            Some(t) => t
                .join()
                .unwrap_or_else(|_| Err("the server thread panicked".into())),
            None => Ok(()),
        }
    }
}

impl Drop for InProcess {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
