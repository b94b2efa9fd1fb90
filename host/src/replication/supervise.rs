//! `litestream replicate` run as a child for the life of `serve`: started, restarted with a
//! growing backoff when it exits, its log lines forwarded to tracing, stopped with SIGTERM (its
//! final sync) on shutdown; the state health and the metrics show.

use super::{Replica, ReplicationError, command, config_text, find_litestream, probe};
use crate::config::ReplicationConfig;
use crate::metrics;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The first restart waits this long; each quick death doubles it up to [`BACKOFF_MAX`].
const BACKOFF_MIN: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// A run this long counts as healthy: the next death starts the backoff over.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// How long a stopping litestream may take for its final sync (its own limit is 10 s) before
/// it is killed.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// What health and the metrics show.
#[derive(Debug, Clone)]
struct Status {
    state: &'static str,
    replica: String,
    pid: Option<u32>,
    restarts: u64,
    last_error: Option<String>,
}

/// Replication while `serve` runs: the state health and the metrics show, and the supervisor's
/// ear (a restart after a restored backup). Made by [`Supervisor::start`], handed to the
/// server's state, kept across its generations.
#[derive(Debug, Clone)]
pub(crate) struct Replication(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    status: Mutex<Status>,
    ask: Flag,
}

impl Replication {
    fn new(replica: &str) -> Self {
        Self(Arc::new(Shared {
            status: Mutex::new(Status {
                state: "starting",
                replica: replica.to_owned(),
                pid: None,
                restarts: 0,
                last_error: None,
            }),
            ask: (Mutex::new(Ask::Nothing), Condvar::new()),
        }))
    }

    fn update(&self, f: impl FnOnce(&mut Status)) {
        if let Ok(mut s) = self.0.status.lock() {
            f(&mut s);
            metrics::REPLICATION_RUNNING.set(i64::from(s.state == "running"));
        }
    }

    /// The replication state for `/api/health` (superusers).
    pub(crate) fn status_json(&self) -> Value {
        let s = self
            .0
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        json!({
            "state": s.state,
            "replica": s.replica,
            "pid": s.pid,
            "restarts": s.restarts,
            "lastError": s.last_error.unwrap_or_default(),
        })
    }

    /// After the data directory's databases were replaced (a backup restored by the server):
    /// stop the litestream that still reads the old files and start one on the new ones.
    pub(crate) fn restart(&self) {
        ask(&self.0.ask, Ask::Restart);
    }
}

/// What the supervising thread is asked to do besides supervising.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ask {
    Nothing,
    /// The databases were replaced (a backup restored): start litestream again on the new files.
    Restart,
    Stop,
}

type Flag = (Mutex<Ask>, Condvar);

fn ask(flag: &Flag, what: Ask) {
    if let Ok(mut a) = flag.0.lock() {
        *a = what;
    }
    flag.1.notify_all();
}

/// The supervising thread's handle; [`Supervisor::stop`] ends it.
pub(crate) struct Supervisor {
    replication: Replication,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    /// Check what replication needs and start supervising `litestream replicate` for the
    /// databases of `data_dir`. An error that makes replication impossible (a bad URL, no
    /// usable litestream) or a replica that does not answer is returned and shown in health as
    /// `failed`; the caller decides by `required` whether the server starts anyway. An
    /// unreachable replica still gets a litestream (it retries until the replica answers).
    pub(crate) fn start(
        cfg: &ReplicationConfig,
        data_dir: &Path,
    ) -> (Replication, Option<Self>, Result<(), ReplicationError>) {
        metrics::REPLICATION_ENABLED.set(1);
        let replication = Replication::new(&cfg.url);
        let failed = |e: ReplicationError| {
            let msg = e.to_string();
            replication.update(|s| {
                s.state = "failed";
                s.last_error = Some(msg);
            });
            (replication.clone(), None, Err(e))
        };
        let prepared = Replica::parse(&cfg.url).and_then(|replica| {
            let bin = find_litestream(&cfg.litestream)?;
            let text = config_text(cfg, &replica, data_dir)?;
            let file = super::write_config(data_dir, &text)?;
            Ok((replica, bin, file))
        });
        let (replica, bin, file) = match prepared {
            Ok(p) => p,
            Err(e) => return failed(e),
        };
        replication.update(|s| s.replica = replica.display());
        let probed = probe(&bin, cfg, &replica, &file, data_dir);
        if let Err(e) = &probed {
            let msg = e.to_string();
            replication.update(|s| s.last_error = Some(msg));
        }
        let cfg = cfg.clone();
        let theirs = replication.clone();
        let thread = std::thread::Builder::new()
            .name("litestream".into())
            .spawn(move || supervise(&bin, &cfg, &file, &theirs));
        match thread {
            Ok(t) => (
                replication.clone(),
                Some(Self {
                    replication,
                    thread: Some(t),
                }),
                probed,
            ),
            Err(e) => failed(ReplicationError::Io {
                what: "starting the litestream supervisor".into(),
                source: e,
            }),
        }
    }

    /// SIGTERM litestream (it syncs every database one last time) and wait for it; call after
    /// the store is closed, so the last commits are in the WAL it ships.
    pub(crate) fn stop(mut self) {
        ask(&self.replication.0.ask, Ask::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What was asked (taken, so a restart is done once), waiting up to `d` for it.
fn wait_ask(flag: &Flag, d: Duration) -> Ask {
    let (m, cv) = flag;
    let Ok(g) = m.lock() else { return Ask::Stop };
    match cv.wait_timeout_while(g, d, |a| *a == Ask::Nothing) {
        Ok((mut g, _)) if *g == Ask::Restart => {
            *g = Ask::Nothing;
            Ask::Restart
        }
        Ok((g, _)) => *g,
        Err(_) => Ask::Stop,
    }
}

fn supervise(bin: &Path, cfg: &ReplicationConfig, file: &Path, replication: &Replication) {
    let flag = &replication.0.ask;
    let mut backoff = BACKOFF_MIN;
    loop {
        let started = Instant::now();
        match spawn(bin, cfg, file, replication) {
            Ok(mut child) => {
                let pid = child.id();
                tracing::info!(pid, "litestream replicating");
                replication.update(|s| {
                    s.state = "running";
                    s.pid = Some(pid);
                });
                let exited = loop {
                    match child.try_wait() {
                        Ok(Some(st)) => break Ok(st.to_string()),
                        Ok(None) => {}
                        Err(e) => break Ok(e.to_string()),
                    }
                    match wait_ask(flag, Duration::from_millis(100)) {
                        Ask::Nothing => {}
                        asked => break Err(asked),
                    }
                };
                let how = match exited {
                    Ok(how) => how,
                    Err(Ask::Restart) => {
                        tracing::info!(pid, "the databases were replaced: restarting litestream");
                        terminate(&mut child);
                        continue;
                    }
                    Err(_) => {
                        terminate(&mut child);
                        final_sync(bin, cfg, file);
                        replication.update(|s| {
                            s.state = "stopped";
                            s.pid = None;
                        });
                        return;
                    }
                };
                let msg = format!("litestream exited ({how})");
                tracing::error!(pid, restart_in_s = backoff.as_secs(), "{msg}");
                replication.update(|s| {
                    s.state = "restarting";
                    s.pid = None;
                    s.last_error = Some(msg);
                });
            }
            Err(e) => {
                let msg = format!("starting {}: {e}", bin.display());
                tracing::error!(restart_in_s = backoff.as_secs(), "{msg}");
                replication.update(|s| {
                    s.state = "restarting";
                    s.last_error = Some(msg);
                });
            }
        }
        if started.elapsed() >= HEALTHY_RUN {
            backoff = BACKOFF_MIN;
        }
        if wait_ask(flag, backoff) == Ask::Stop {
            replication.update(|s| s.state = "stopped");
            return;
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
        metrics::REPLICATION_RESTARTS.inc();
        replication.update(|s| s.restarts += 1);
    }
}

fn spawn(
    bin: &Path,
    cfg: &ReplicationConfig,
    file: &Path,
    replication: &Replication,
) -> std::io::Result<Child> {
    let mut c = command(bin, cfg);
    c.args(["replicate", "-no-expand-env", "-config"])
        .arg(file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut c);
    let mut child = c.spawn()?;
    // Litestream logs to stdout; stderr carries what goes wrong before its logger exists.
    if let Some(out) = child.stdout.take() {
        let r = replication.clone();
        let _ = std::thread::Builder::new()
            .name("litestream-log".into())
            .spawn(move || forward_log(BufReader::new(out), &r));
    }
    if let Some(err) = child.stderr.take() {
        let r = replication.clone();
        let _ = std::thread::Builder::new()
            .name("litestream-log".into())
            .spawn(move || forward_log(BufReader::new(err), &r));
    }
    Ok(child)
}

/// Litestream's lines (`time=... level=INFO msg=...`) into our log: errors and warnings at
/// their level (an error, or a line without a level such as Go's `Error: ...`, is also kept
/// as the last error health shows), the rest at debug.
fn forward_log(r: impl BufRead, replication: &Replication) {
    for line in r.lines().map_while(Result::ok) {
        if line.contains("level=ERROR") || !line.contains("level=") {
            tracing::error!(target: "litestream", "{line}");
            replication.update(|s| s.last_error = Some(line.clone()));
        } else if line.contains("level=WARN") {
            tracing::warn!(target: "litestream", "{line}");
        } else {
            tracing::debug!(target: "litestream", "{line}");
        }
    }
}

/// Litestream gets SIGTERM if this process dies without stopping it (a crash, SIGKILL), so a
/// next start never finds a second litestream shipping the same databases; SIGTERM still
/// makes it sync what was committed.
fn die_with_parent(c: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt as _;
        #[allow(
            unsafe_code,
            reason = "pre_exec runs between fork and exec; see SAFETY"
        )]
        // SAFETY: the closure calls only prctl, which is async-signal-safe, and allocates
        // nothing.
        unsafe {
            c.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// One more `litestream replicate -once` after the daemon stopped: Litestream 0.5 stopped
/// before its first sync (about a second after it starts) ships nothing on SIGTERM, and this
/// costs one incremental sync otherwise. Bounded by [`STOP_GRACE`].
fn final_sync(bin: &Path, cfg: &ReplicationConfig, file: &Path) {
    let mut c = command(bin, cfg);
    c.args(["replicate", "-once", "-no-expand-env", "-config"])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = match c.spawn() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "litestream's final sync did not start");
            return;
        }
    };
    let deadline = Instant::now() + STOP_GRACE;
    loop {
        match child.try_wait() {
            Ok(Some(st)) if st.success() => return,
            Ok(Some(st)) => {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut e, &mut err);
                }
                tracing::error!(status = %st, error = %super::last_line(&err), "litestream's final sync failed");
                return;
            }
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                tracing::error!("litestream's final sync did not finish in time; killed");
                let _ = child.kill();
                let _ = child.wait();
                return;
            }
        }
    }
}

/// SIGTERM, up to [`STOP_GRACE`] for the final sync, then SIGKILL.
fn terminate(child: &mut Child) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    #[allow(unsafe_code, reason = "a plain syscall; see SAFETY")]
    // SAFETY: kill(2) on our own child's pid, which we have not reaped yet (so not reused).
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    if rc == 0 {
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = child.try_wait() {
                tracing::info!(status = %st, "litestream stopped after its final sync");
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!("litestream did not stop within its grace; killed");
    }
    let _ = child.kill();
    let _ = child.wait();
}
