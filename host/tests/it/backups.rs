//! Backups and restore: a backup made under write load restores every write acknowledged before
//! it began (through the CLI into a fresh data dir, and through the API in place, the server
//! going on on the restored data); archives that are broken, foreign or unsafe are refused with
//! the data untouched and nothing written outside; a backup that runs out of space fails and
//! leaves nothing behind; the built-in crons, scheduled backups and their retention; backups
//! moving both ways between ferrobase and the reference PocketBase; and backups kept in S3
//! (`settings.backups.s3`, on moto's server): made, listed, downloaded, uploaded in parts,
//! deleted, restored, pruned, and answered as the reference answers on the same server.

use crate::common::{Resp, Server, ferrobase_bin, reference_bin};
use crate::s3::{Moto, SECRET, moto};
use serde_json::{Value, json};
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

fn posts(s: &Server, su: &str) {
    let r = s.req(
        "POST",
        "/api/collections",
        Some(su),
        Some(
            &json!({"name": "posts", "type": "base", "listRule": "", "viewRule": "",
                     "fields": [{"name": "title", "type": "text"}]}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.json);
}

fn titles(s: &Server, su: &str) -> Vec<String> {
    let r = s.req(
        "GET",
        "/api/collections/posts/records?perPage=500&sort=title&fields=title",
        Some(su),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.json);
    r.json["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["title"].as_str().unwrap().to_owned())
        .collect()
}

/// `POST /api/backups` for the backup `name`.
fn backup(s: &Server, su: &str, name: &str) -> Resp {
    s.req(
        "POST",
        "/api/backups",
        Some(su),
        Some(&json!({"name": name})),
    )
}

/// `POST /api/backups/{key}/restore`.
fn restore(s: &Server, su: &str, key: &str) -> Resp {
    s.req(
        "POST",
        &format!("/api/backups/{key}/restore"),
        Some(su),
        None,
    )
}

/// The bytes of backup `key`, downloaded with a superuser file token.
fn download(s: &Server, su: &str, key: &str) -> Vec<u8> {
    let tok = s.req("POST", "/api/files/token", Some(su), None);
    let tok = tok.json["token"].as_str().unwrap().to_owned();
    let mut r = agent()
        .get(format!("http://{}/api/backups/{key}?token={tok}", s.addr))
        .call()
        .unwrap();
    assert_eq!(r.status(), 200);
    r.body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .unwrap()
}

/// Upload `bytes` as the backup `name` (multipart `file`).
fn upload(s: &Server, su: &str, name: &str, bytes: &[u8]) -> u16 {
    let boundary = "ferrobase-backup-test-boundary";
    let mut body = Vec::new();
    write!(
        body,
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
         Content-Type: application/zip\r\n\r\n"
    )
    .unwrap();
    body.extend_from_slice(bytes);
    write!(body, "\r\n--{boundary}--\r\n").unwrap();
    let ct = format!("multipart/form-data; boundary={boundary}");
    s.raw("POST", "/api/backups/upload", Some(su), Some((&ct, &body)))
        .status
}

fn keys(s: &Server, su: &str) -> Vec<String> {
    let r = s.req("GET", "/api/backups", Some(su), None);
    assert_eq!(r.status, 200, "{}", r.json);
    r.json
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["key"].as_str().unwrap().to_owned())
        .collect()
}

/// The public list's items, or None while the server does not answer (it is restarting).
fn items_now(s: &Server) -> Option<Value> {
    let mut r = agent()
        .get(format!(
            "http://{}/api/collections/posts/records?fields=title",
            s.addr
        ))
        .call()
        .ok()?;
    let v: Value = serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()?;
    Some(v["items"].clone())
}

/// Wait until `f` holds (the server restarting on restored data answers again).
fn eventually(what: &str, wait: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + wait;
    while !f() {
        assert!(Instant::now() < deadline, "{what}: not within {wait:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn integrity(db: &Path) -> String {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

fn temp_entries(data: &Path) -> usize {
    std::fs::read_dir(data.join(".pb_temp_to_delete")).map_or(0, Iterator::count)
}

#[test]
fn a_backup_under_write_load_restores_every_write_acknowledged_before_it() {
    let s = Server::start();
    let su = s.su_token();
    posts(&s, &su);
    let stop = Arc::new(AtomicBool::new(false));
    // Titles acknowledged (a 200 received), in order, by each writer.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (addr, su, stop, acked) = (
                s.addr.clone(),
                su.clone(),
                Arc::clone(&stop),
                Arc::clone(&acked),
            );
            std::thread::spawn(move || {
                let a = agent();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) && n < 5000 {
                    let title = format!("w{w}-{n:05}");
                    let r = a
                        .post(format!("http://{addr}/api/collections/posts/records"))
                        .header("Authorization", &su)
                        .send_json(json!({"title": title}));
                    if r.is_ok_and(|r| r.status() == 200) {
                        acked.lock().unwrap().push(title);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    eventually("writes acknowledged", Duration::from_secs(30), || {
        acked.lock().unwrap().len() >= 200
    });
    let before: Vec<String> = acked.lock().unwrap().clone();
    let r = backup(&s, &su, "loaded.zip");
    assert_eq!(r.status, 204, "{}", r.json);
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    let total = acked.lock().unwrap().len();
    assert!(total > before.len(), "the writes went on during the backup");
    let zip = download(&s, &su, "loaded.zip");

    // Restore into a fresh data dir through the CLI, then serve it.
    let fresh = tempfile::tempdir().unwrap();
    let file = fresh.path().join("loaded.zip");
    std::fs::write(&file, &zip).unwrap();
    let data = fresh.path().join("pb_data");
    let out = std::process::Command::new(ferrobase_bin())
        .current_dir(fresh.path())
        .args(["backup", "restore"])
        .arg(&file)
        .arg("--dir")
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(integrity(&data.join("data.db")), "ok");
    assert_eq!(integrity(&data.join("auxiliary.db")), "ok");
    let restored = Server::start_in(fresh);
    let su2 = restored.su_token();
    let have: std::collections::HashSet<String> = {
        let mut all = Vec::new();
        let mut page = 1;
        loop {
            let r = restored.req(
                "GET",
                &format!("/api/collections/posts/records?perPage=500&page={page}&fields=title&skipTotal=1"),
                Some(&su2),
                None,
            );
            let items = r.json["items"].as_array().unwrap().clone();
            if items.is_empty() {
                break;
            }
            all.extend(
                items
                    .iter()
                    .map(|i| i["title"].as_str().unwrap().to_owned()),
            );
            page += 1;
        }
        all.into_iter().collect()
    };
    let missing: Vec<&String> = before.iter().filter(|t| !have.contains(*t)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} writes acknowledged before the backup are missing: {:?}",
        missing.len(),
        before.len(),
        &missing[..missing.len().min(5)]
    );
    assert!(
        have.len() <= total,
        "nothing unacknowledged beyond the writes sent"
    );
}

#[test]
fn a_restore_through_the_api_swaps_the_data_and_the_server_goes_on() {
    let s = Server::start();
    let su = s.su_token();
    posts(&s, &su);
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        Some(&su),
        Some(&json!({"title": "before"})),
    );
    assert_eq!(r.status, 200);
    assert_eq!(backup(&s, &su, "snap.zip").status, 204);
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        Some(&su),
        Some(&json!({"title": "after"})),
    );
    assert_eq!(r.status, 200);
    let r = restore(&s, &su, "snap.zip");
    assert_eq!(r.status, 204, "{}", r.json);
    eventually("the restored data served", Duration::from_secs(30), || {
        // No answer while the generation swaps (its connections close): ask again.
        s.try_req(
            "GET",
            "/api/collections/posts/records?fields=title",
            Some(&su),
            None,
        )
        .is_some_and(|r| r.status == 200 && r.json["items"] == json!([{"title": "before"}]))
    });
    // The token signed before the restore still works (same superuser, same key); the
    // backups folder is kept; the previous data is gone from the temporary folder; writes go on.
    assert_eq!(keys(&s, &su), ["snap.zip"]);
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        Some(&su),
        Some(&json!({"title": "later"})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(titles(&s, &su), ["before", "later"]);
    let h = s.req("GET", "/api/health", Some(&su), None);
    assert_eq!(h.json["data"]["canBackup"], json!(true));
    assert_eq!(temp_entries(&s.data_dir()), 0);
    // A missing backup is PocketBase's 400.
    let r = restore(&s, &su, "nope.zip");
    assert_eq!(
        (r.status, r.json["message"].as_str()),
        (400, Some("Missing or invalid backup file."))
    );
}

/// A zip with the given entries: (name, bytes, unix mode; a mode with the symlink bit makes
/// a symbolic link whose target is the bytes).
fn zip_of(entries: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes, mode) in entries {
        let o = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
        if mode & 0o170000 == 0o120000 {
            w.add_symlink(*name, String::from_utf8_lossy(bytes), o)
                .unwrap();
        } else {
            w.start_file(*name, o).unwrap();
            w.write_all(bytes).unwrap();
        }
    }
    w.finish().unwrap().into_inner()
}

#[test]
fn broken_foreign_and_unsafe_archives_are_refused_and_nothing_changes() {
    let s = Server::start();
    let su = s.su_token();
    posts(&s, &su);
    s.req(
        "POST",
        "/api/collections/posts/records",
        Some(&su),
        Some(&json!({"title": "kept"})),
    );
    assert_eq!(backup(&s, &su, "good.zip").status, 204);
    let good = download(&s, &su, "good.zip");
    let good_db = {
        let mut a = zip::ZipArchive::new(std::io::Cursor::new(good.clone())).unwrap();
        let mut f = a.by_name("data.db").unwrap();
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut v).unwrap();
        v
    };
    // A SQLite database that is not PocketBase's.
    let foreign_db = {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.db");
        let c = rusqlite::Connection::open(&p).unwrap();
        c.execute_batch("CREATE TABLE notes(x); INSERT INTO notes VALUES (1);")
            .unwrap();
        drop(c);
        std::fs::read(&p).unwrap()
    };
    // PocketBase's data.db with pages overwritten past its header.
    let mut damaged_db = good_db.clone();
    for b in damaged_db.iter_mut().skip(4096).take(8192) {
        *b = 0x5a;
    }
    let escape = s.data_dir().parent().unwrap().join("escaped.txt");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("truncated.zip", good[..good.len() / 2].to_vec()),
        ("no_data.zip", zip_of(&[("auxiliary.db", b"x", 0o644)])),
        (
            "slip.zip",
            zip_of(&[
                ("data.db", &good_db, 0o644),
                ("../escaped.txt", b"x", 0o644),
            ]),
        ),
        (
            "absolute.zip",
            zip_of(&[
                ("data.db", &good_db, 0o644),
                (escape.to_str().unwrap(), b"x", 0o644),
            ]),
        ),
        (
            "symlink.zip",
            zip_of(&[("data.db", &good_db, 0o644), ("storage", b"/etc", 0o120777)]),
        ),
        ("foreign.zip", zip_of(&[("data.db", &foreign_db, 0o644)])),
        ("damaged.zip", zip_of(&[("data.db", &damaged_db, 0o644)])),
    ];
    for (name, bytes) in &cases {
        assert_eq!(upload(&s, &su, name, bytes), 204, "{name} uploaded");
        let r = restore(&s, &su, name);
        assert_eq!(
            (r.status, r.json["message"].as_str()),
            (400, Some("Missing or invalid backup file.")),
            "{name}"
        );
        assert_eq!(titles(&s, &su), ["kept"], "{name}: the data is untouched");
        assert_eq!(
            temp_entries(&s.data_dir()),
            0,
            "{name}: nothing extracted is left"
        );
        assert!(
            !escape.exists(),
            "{name}: nothing written outside the data dir"
        );
    }
    // The good one still restores after all those refusals.
    let r = restore(&s, &su, "good.zip");
    assert_eq!(r.status, 204, "{}", r.json);
}

#[test]
fn a_backup_that_runs_out_of_space_fails_and_leaves_nothing() {
    let s = Server::start();
    let su = s.su_token();
    posts(&s, &su);
    let big = "x".repeat(4000);
    for i in 0..300 {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            Some(&su),
            Some(&json!({"title": format!("{i:04}{big}")})),
        );
        assert_eq!(r.status, 200);
    }
    let data = s.data_dir();
    // The CLI makes the backup with a file-size limit well under the data's size: its writes
    // fail with EFBIG as they would on a full disk (SIGXFSZ ignored, so the error is returned).
    // (The shell sets both and execs the binary: the limit and the ignored signal carry over.)
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 512; exec \"$0\" backup create full.zip --dir \"$1\"")
        .arg(ferrobase_bin())
        .arg(&data)
        .output()
        .unwrap();
    assert!(!out.status.success(), "the backup cannot fit");
    assert!(keys(&s, &su).is_empty(), "nothing listed");
    assert_eq!(temp_entries(&data), 0, "no partial file left");
    assert_eq!(integrity(&data.join("data.db")), "ok");
    assert_eq!(titles(&s, &su).len(), 300, "the server serves on");
    // Without the limit the same backup succeeds.
    let out = std::process::Command::new(ferrobase_bin())
        .args(["backup", "create", "full.zip", "--dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(keys(&s, &su), ["full.zip"]);
}

#[test]
fn built_in_crons_are_listed_run_and_scheduled_backups_keep_cron_max_keep() {
    let s = Server::start();
    let su = s.su_token();
    let ids = |s: &Server| -> Vec<Value> {
        s.req("GET", "/api/crons", Some(&su), None)
            .json
            .as_array()
            .unwrap()
            .clone()
    };
    assert_eq!(
        ids(&s),
        json!([
            {"id": "__pbDBOptimize__", "expression": "0 0 * * *"},
            {"id": "__pbMFACleanup__", "expression": "0 * * * *"},
            {"id": "__pbOTPCleanup__", "expression": "0 * * * *"},
            {"id": "__pbLogsCleanup__", "expression": "0 */6 * * *"},
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"backups": {"cron": "*/5 * * * *", "cronMaxKeep": 2}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(
        ids(&s).last().unwrap(),
        &json!({"id": "__pbAutoBackup__", "expression": "*/5 * * * *"})
    );
    for id in [
        "__pbDBOptimize__",
        "__pbMFACleanup__",
        "__pbOTPCleanup__",
        "__pbLogsCleanup__",
    ] {
        assert_eq!(
            s.req("POST", &format!("/api/crons/{id}"), Some(&su), None)
                .status,
            204
        );
    }
    // Three scheduled backups a second apart (their names carry the second): two are kept.
    for n in 1..=3 {
        let r = s.req("POST", "/api/crons/__pbAutoBackup__", Some(&su), None);
        assert_eq!(r.status, 204);
        eventually("the scheduled backup", Duration::from_secs(30), || {
            keys(&s, &su).len() == n.min(2) && {
                let h = s.req("GET", "/api/health", Some(&su), None);
                h.json["data"]["canBackup"] == json!(true)
            }
        });
        std::thread::sleep(Duration::from_millis(1100));
    }
    let k = keys(&s, &su);
    assert!(
        k.iter()
            .all(|k| k.starts_with("@auto_pb_backup_acme_") && k.ends_with(".zip")),
        "{k:?}"
    );
    // A backup made by hand is never pruned.
    assert_eq!(backup(&s, &su, "mine.zip").status, 204);
    s.req("POST", "/api/crons/__pbAutoBackup__", Some(&su), None);
    std::thread::sleep(Duration::from_millis(1100));
    eventually("pruned again", Duration::from_secs(30), || {
        let k = keys(&s, &su);
        k.len() == 3 && k.contains(&"mine.zip".to_owned())
    });
    // Unknown jobs: PocketBase's 404.
    let r = s.req("POST", "/api/crons/__nope__", Some(&su), None);
    assert_eq!(r.status, 404);
}

#[test]
fn backups_move_both_ways_between_ferrobase_and_the_reference() {
    let Some(ref_bin) = reference_bin() else {
        return;
    };
    let pb = Server::start_bin(ref_bin.to_str().unwrap());
    let fb = Server::start();
    let (pb_su, fb_su) = (pb.su_token(), fb.su_token());
    posts(&pb, &pb_su);
    posts(&fb, &fb_su);
    for (s, su, t) in [
        (&pb, &pb_su, "from pocketbase"),
        (&fb, &fb_su, "from ferrobase"),
    ] {
        let r = s.req(
            "POST",
            "/api/collections/posts/records",
            Some(su),
            Some(&json!({"title": t})),
        );
        assert_eq!(r.status, 200);
        let r = backup(s, su, "x.zip");
        assert_eq!(r.status, 204);
    }
    let (pb_zip, fb_zip) = (
        download(&pb, &pb_su, "x.zip"),
        download(&fb, &fb_su, "x.zip"),
    );
    // PocketBase's backup restored by ferrobase.
    assert_eq!(upload(&fb, &fb_su, "from_pb.zip", &pb_zip), 204);
    let r = restore(&fb, &fb_su, "from_pb.zip");
    assert_eq!(r.status, 204, "{}", r.json);
    eventually(
        "ferrobase on PocketBase's backup",
        Duration::from_secs(30),
        || items_now(&fb) == Some(json!([{"title": "from pocketbase"}])),
    );
    // Ferrobase's backup restored by PocketBase (which restarts its process on it). PocketBase
    // wrote a migration when `posts` was created through its API (automigrate); on restart it
    // would replay it over the restored data, whose `posts` is another collection, and stop. A
    // user moving data in removes such migrations too.
    std::fs::remove_dir_all(pb.data_dir().parent().unwrap().join("pb_migrations")).unwrap();
    assert_eq!(upload(&pb, &pb_su, "from_fb.zip", &fb_zip), 204);
    let r = restore(&pb, &pb_su, "from_fb.zip");
    assert_eq!(r.status, 204, "{}", r.json);
    eventually(
        "PocketBase on ferrobase's backup",
        Duration::from_secs(60),
        || items_now(&pb) == Some(json!([{"title": "from ferrobase"}])),
    );
}

// ---- Backups kept in S3 (`settings.backups.s3`), on moto's server ----

/// Keep `s`'s backups in `bucket` of the moto server.
fn backups_in(s: &Server, su: &str, moto: &Moto, bucket: &str) {
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(su),
        Some(
            &json!({"backups": {"s3": {"enabled": true, "bucket": bucket, "region": "us-east-1",
            "endpoint": moto.endpoint, "accessKey": "ferrobase-test", "secret": SECRET,
            "forcePathStyle": true}}}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.json);
}

/// `GET /api/backups/{key}` with a superuser file token (and a `Range` header): the status,
/// the headers that describe the file, and the bytes.
fn fetch(s: &Server, su: &str, key: &str, range: Option<&str>) -> (u16, Value, Vec<u8>) {
    let tok = s.req("POST", "/api/files/token", Some(su), None);
    let tok = tok.json["token"].as_str().unwrap().to_owned();
    let mut req = agent().get(format!("http://{}/api/backups/{key}?token={tok}", s.addr));
    if let Some(r) = range {
        req = req.header("range", r);
    }
    let mut r = req.call().unwrap();
    let h = |k: &str| {
        r.headers()
            .get(k)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let headers = json!({
        "type": h("content-type"),
        "disposition": h("content-disposition"),
        "length": h("content-length"),
        "range": h("content-range"),
    });
    let status = r.status().as_u16();
    let bytes = r
        .body_mut()
        .with_config()
        .limit(1 << 30)
        .read_to_vec()
        .unwrap();
    (status, headers, bytes)
}

/// The multipart upload of `bytes` as the backup `name`: status and body.
fn upload_answer(s: &Server, su: &str, name: &str, bytes: &[u8]) -> (u16, Value) {
    let boundary = "ferrobase-backup-test-boundary";
    let mut body = Vec::new();
    write!(
        body,
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
         Content-Type: application/zip\r\n\r\n"
    )
    .unwrap();
    body.extend_from_slice(bytes);
    write!(body, "\r\n--{boundary}--\r\n").unwrap();
    let ct = format!("multipart/form-data; boundary={boundary}");
    let r = s.raw("POST", "/api/backups/upload", Some(su), Some((&ct, &body)));
    (r.status, r.json)
}

fn add_post(s: &Server, su: &str, title: &str) {
    let r = s.req(
        "POST",
        "/api/collections/posts/records",
        Some(su),
        Some(&json!({"title": title})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
}

#[test]
fn backups_in_s3_are_made_listed_downloaded_uploaded_deleted_and_restored() {
    let Some(moto) = moto() else {
        return;
    };
    let s = Server::start();
    let su = s.su_token();
    let bucket = moto.bucket();
    backups_in(&s, &su, moto, &bucket);
    posts(&s, &su);
    add_post(&s, &su, "before");
    assert_eq!(keys(&s, &su), Vec::<String>::new());

    // Made: the object is the backup, at the bucket's root, typed and named as PocketBase
    // stores it; nothing is left in the data dir (no backups folder, an empty temp folder).
    assert_eq!(backup(&s, &su, "snap.zip").status, 204);
    assert_eq!(moto.keys(&bucket, ""), ["snap.zip"]);
    let (stored, meta) = moto.object(&bucket, "snap.zip").unwrap();
    assert_eq!(
        meta,
        json!({"type": "application/zip", "original": "snap.zip"})
    );
    assert!(!s.data_dir().join("backups").exists());
    assert_eq!(temp_entries(&s.data_dir()), 0);

    // Listed with the object's size and date.
    let r = s.req("GET", "/api/backups", Some(&su), None);
    assert_eq!(r.status, 200);
    let items = r.json.as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["key"], "snap.zip");
    assert_eq!(items[0]["size"], json!(stored.len()));
    let modified = items[0]["modified"].as_str().unwrap();
    assert!(
        regex::Regex::new(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z$")
            .unwrap()
            .is_match(modified),
        "{modified}"
    );

    // Downloaded whole and by range, as an attachment.
    let (status, headers, bytes) = fetch(&s, &su, "snap.zip", None);
    assert_eq!(status, 200);
    assert_eq!(bytes, stored);
    assert_eq!(headers["type"], "application/zip");
    assert_eq!(headers["disposition"], "attachment; filename=\"snap.zip\"");
    let (status, headers, bytes) = fetch(&s, &su, "snap.zip", Some("bytes=2-9"));
    assert_eq!(status, 206);
    assert_eq!(bytes, stored[2..10]);
    assert_eq!(headers["range"], format!("bytes 2-9/{}", stored.len()));

    // The name is taken, in the bucket.
    let r = backup(&s, &su, "snap.zip");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json["data"]["name"]["code"],
        "validation_backup_name_exists"
    );

    // Uploaded: a zip larger than one part goes up in parts and comes back the same.
    let mut big = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    big.start_file(
        "noise.bin",
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored),
    )
    .unwrap();
    let mut noise = vec![0u8; 7 << 20];
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    for b in &mut noise {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    big.write_all(&noise).unwrap();
    let big = big.finish().unwrap().into_inner();
    assert_eq!(upload_answer(&s, &su, "big.zip", &big).0, 204);
    let (got, meta) = moto.object(&bucket, "big.zip").unwrap();
    assert!(got == big, "the uploaded zip differs");
    assert_eq!(
        meta,
        json!({"type": "application/zip", "original": "big.zip"})
    );
    let (status, body) = upload_answer(&s, &su, "big.zip", &big);
    assert_eq!(status, 400);
    assert_eq!(
        body["data"]["file"]["code"],
        "validation_backup_name_exists"
    );
    assert_eq!(keys(&s, &su), ["big.zip", "snap.zip"]);
    assert_eq!(temp_entries(&s.data_dir()), 0);

    // Deleted (a missing key too: S3 answers so).
    let r = s.req("DELETE", "/api/backups/big.zip", Some(&su), None);
    assert_eq!(r.status, 204, "{}", r.json);
    assert_eq!(moto.keys(&bucket, ""), ["snap.zip"]);
    let r = s.req("DELETE", "/api/backups/big.zip", Some(&su), None);
    assert_eq!(r.status, 204, "{}", r.json);

    // Restored: downloaded, checked, swapped in; the server goes on on it.
    add_post(&s, &su, "after");
    let r = restore(&s, &su, "nope.zip");
    assert_eq!(
        (r.status, r.json["message"].as_str()),
        (400, Some("Missing or invalid backup file."))
    );
    // An object that is no backup is downloaded, refused, and removed; nothing changes.
    moto.put(
        &bucket,
        "junk.zip",
        "application/zip",
        b"PK\x03\x04 not a zip",
    );
    let r = restore(&s, &su, "junk.zip");
    assert_eq!(
        (r.status, r.json["message"].as_str()),
        (400, Some("Missing or invalid backup file."))
    );
    assert_eq!(temp_entries(&s.data_dir()), 0);
    assert_eq!(titles(&s, &su), ["after", "before"]);
    let r = s.req("DELETE", "/api/backups/junk.zip", Some(&su), None);
    assert_eq!(r.status, 204, "{}", r.json);
    let r = restore(&s, &su, "snap.zip");
    assert_eq!(r.status, 204, "{}", r.json);
    eventually("the restored data served", Duration::from_secs(30), || {
        items_now(&s) == Some(json!([{"title": "before"}]))
    });
    add_post(&s, &su, "later");
    assert_eq!(titles(&s, &su), ["before", "later"]);
    // The restored settings are the backup's, made with `backups.s3` on: still on the bucket.
    let r = s.req("GET", "/api/settings", Some(&su), None);
    assert_eq!(r.json["backups"]["s3"]["enabled"], json!(true));
    assert_eq!(moto.keys(&bucket, ""), ["snap.zip"]);
    let h = s.req("GET", "/api/health", Some(&su), None);
    assert_eq!(h.json["data"]["canBackup"], json!(true));
    eventually(
        "the temporary folder emptied",
        Duration::from_secs(10),
        || temp_entries(&s.data_dir()) == 0,
    );
}

#[test]
fn scheduled_backups_in_s3_keep_cron_max_keep() {
    let Some(moto) = moto() else {
        return;
    };
    let s = Server::start();
    let su = s.su_token();
    let bucket = moto.bucket();
    backups_in(&s, &su, moto, &bucket);
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"backups": {"cron": "0 0 * * *", "cronMaxKeep": 2}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    // A backup made by hand and an object that is no scheduled backup are never pruned.
    assert_eq!(backup(&s, &su, "mine.zip").status, 204);
    moto.put(&bucket, "notes/readme.txt", "text/plain", b"hello");
    // S3 keeps dates to the second: the runs are more than a second apart.
    for n in 1..=3 {
        let r = s.req("POST", "/api/crons/__pbAutoBackup__", Some(&su), None);
        assert_eq!(r.status, 204);
        eventually("the scheduled backup", Duration::from_secs(30), || {
            moto.keys(&bucket, "@auto_pb_backup_").len() == n.min(2) && {
                let h = s.req("GET", "/api/health", Some(&su), None);
                h.json["data"]["canBackup"] == json!(true)
            }
        });
        std::thread::sleep(Duration::from_millis(1100));
    }
    let auto = moto.keys(&bucket, "@auto_pb_backup_");
    assert!(
        auto.iter()
            .all(|k| k.starts_with("@auto_pb_backup_acme_") && k.ends_with(".zip")),
        "{auto:?}"
    );
    // The two newest: the first run's name (the smallest time) is gone.
    let mut listed = keys(&s, &su);
    listed.sort();
    assert_eq!(listed.len(), 4, "{listed:?}");
    assert!(listed.contains(&"mine.zip".to_owned()));
    assert!(listed.contains(&"notes/readme.txt".to_owned()));
    assert!(!s.data_dir().join("backups").exists());
    assert_eq!(temp_entries(&s.data_dir()), 0);
}

/// The answers of one server to the same steps on S3, with what differs by nature (dates,
/// zip sizes) masked.
fn s3_answers(s: &Server, moto: &Moto, bucket: &str, missing: &str, closed: u16) -> Vec<Value> {
    let su = s.su_token();
    let mut out = Vec::new();
    backups_in(s, &su, moto, bucket);
    let mut step = |what: &str, r: Resp| out.push(json!([what, r.status, r.json]));
    step("empty list", s.req("GET", "/api/backups", Some(&su), None));
    step("create", backup(s, &su, "one.zip"));
    moto.put(bucket, "dir/x.txt", "text/plain", b"hello");
    let mut list = s.req("GET", "/api/backups", Some(&su), None);
    // S3's dates are to the second.
    let date = regex::Regex::new(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.000Z$").unwrap();
    for item in list.json.as_array_mut().unwrap() {
        let modified = item["modified"].as_str().unwrap().to_owned();
        item["modified"] = json!(date.is_match(&modified));
        if item["key"] == "one.zip" {
            item["size"] = json!(item["size"].as_u64().unwrap() > 0);
        }
    }
    step("list", list);
    step("create a taken name", backup(s, &su, "one.zip"));
    step("create a bad name", backup(s, &su, "One.zip"));
    let (_, _, zip) = fetch(s, &su, "one.zip", None);
    let (status, json) = upload_answer(s, &su, "one.zip", &zip);
    step(
        "upload a taken name",
        Resp {
            status,
            content_type: String::new(),
            headers: Vec::new(),
            json,
        },
    );
    let fetched = |key: &str| {
        let (status, headers, bytes) = fetch(s, &su, key, None);
        json!([status, headers, String::from_utf8_lossy(&bytes)])
    };
    let nested = fetched("dir%2Fx.txt");
    let missing_key = fetched("nope.zip");
    step(
        "delete a missing key",
        s.req("DELETE", "/api/backups/nope.zip", Some(&su), None),
    );
    step("restore a missing key", restore(s, &su, "nope.zip"));
    // The bucket is gone.
    backups_in(s, &su, moto, missing);
    step(
        "list, no bucket",
        s.req("GET", "/api/backups", Some(&su), None),
    );
    step("create, no bucket", backup(s, &su, "two.zip"));
    // The zip made for the upload that failed is gone.
    assert_eq!(temp_entries(&s.data_dir()), 0);
    step(
        "delete, no bucket",
        s.req("DELETE", "/api/backups/one.zip", Some(&su), None),
    );
    step("restore, no bucket", restore(s, &su, "one.zip"));
    let (status, json) = upload_answer(s, &su, "three.zip", &zip);
    step(
        "upload, no bucket",
        Resp {
            status,
            content_type: String::new(),
            headers: Vec::new(),
            json,
        },
    );
    let no_bucket = fetched("one.zip");
    // Nothing listens at the endpoint.
    let r = s.req(
        "PATCH",
        "/api/settings",
        Some(&su),
        Some(&json!({"backups": {"s3": {"endpoint": format!("http://127.0.0.1:{closed}")}}})),
    );
    assert_eq!(r.status, 200, "{}", r.json);
    step(
        "list, no server",
        s.req("GET", "/api/backups", Some(&su), None),
    );
    step("create, no server", backup(s, &su, "two.zip"));
    step(
        "delete, no server",
        s.req("DELETE", "/api/backups/one.zip", Some(&su), None),
    );
    step("restore, no server", restore(s, &su, "one.zip"));
    out.push(json!(["download nested", nested]));
    out.push(json!(["download missing", missing_key]));
    out.push(json!(["download, no bucket", no_bucket]));
    out.push(json!(["download, no server", fetched("one.zip")]));
    out
}

#[test]
fn backups_in_s3_answer_as_the_reference_does() {
    let Some(moto) = moto() else {
        return;
    };
    let Some(ref_bin) = reference_bin() else {
        return;
    };
    let missing = format!("fb-missing-{}", std::process::id());
    let pb = Server::start_bin(ref_bin.to_str().unwrap());
    let fb = Server::start();
    let closed = crate::common::free_port();
    let want = s3_answers(&pb, moto, &moto.bucket(), &missing, closed);
    let got = s3_answers(&fb, moto, &moto.bucket(), &missing, closed);
    assert_eq!(want.len(), got.len());
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(g, w, "ferrobase (left) and PocketBase (right) differ");
    }
    // The S3 error is PocketBase's raw text, with the service's answer in it.
    let listed = want.iter().find(|s| s[0] == "list, no bucket").unwrap();
    assert!(
        listed[2]["message"]
            .as_str()
            .unwrap()
            .contains("404 NoSuchBucket"),
        "{listed}"
    );
}
