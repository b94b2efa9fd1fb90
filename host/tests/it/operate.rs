//! What an operator sees: log lines without colour codes when stderr is not a terminal, one JSON
//! object per line with `[log] format = "json"`, and a pb.toml with a bad value refused at start
//! with the key and its line, before anything is opened.

use crate::common::ferrobase_bin;
use serde_json::Value;

/// `ferrobase backup create` (a command that logs at info) on a fresh data dir with `toml` as its
/// pb.toml; its exit success and stderr.
fn run_with(toml: &str) -> (bool, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pb.toml");
    std::fs::write(&cfg, toml).unwrap();
    let out = std::process::Command::new(ferrobase_bin())
        .current_dir(dir.path())
        .env_remove("RUST_LOG")
        .env_remove("FERROBASE_DIR")
        .args(["backup", "create", "first.zip", "--config"])
        .arg(&cfg)
        .arg("--dir")
        .arg(dir.path().join("pb_data"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        dir,
    )
}

/// `ferrobase serve` in `dir` on `addr` with `cfg` and `data`, its stderr in `dir/server.log`.
fn serve_in(
    dir: &std::path::Path,
    cfg: &std::path::Path,
    data: &std::path::Path,
    addr: &str,
) -> std::process::Child {
    std::process::Command::new(ferrobase_bin())
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .args(["serve", "--http", addr, "--config"])
        .arg(cfg)
        .arg("--dir")
        .arg(data)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("server.log")).unwrap())
        .spawn()
        .unwrap()
}

#[test]
fn text_logs_have_no_colour_codes_off_a_terminal() {
    let (ok, err, _dir) = run_with("[log]\nlevel = \"info\"\n");
    assert!(ok, "{err}");
    assert!(err.contains("backup created"), "{err}");
    assert!(
        !err.contains('\u{1b}'),
        "no ANSI escapes in a pipe: {err:?}"
    );
}

#[test]
fn json_logs_are_one_object_per_line() {
    let (ok, err, _dir) = run_with("[log]\nformat = \"json\"\n");
    assert!(ok, "{err}");
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let created = lines
        .iter()
        .find(|l| l["message"] == "backup created")
        .unwrap_or_else(|| panic!("{err}"));
    assert_eq!(created["level"], "INFO");
    assert_eq!(created["name"], "first.zip");
    assert!(created["timestamp"].is_string());
}

#[test]
fn a_bad_value_in_pb_toml_stops_the_start_with_its_key_and_line() {
    let (ok, err, dir) = run_with("[log]\nlevel = \"info\"\nformat = \"xml\"\n");
    assert!(!ok);
    assert!(err.contains("format") && err.contains("line 3"), "{err}");
    assert!(
        !dir.path().join("pb_data").exists(),
        "nothing opened or created before the config is read"
    );
}

#[test]
fn sighup_applies_a_valid_pb_toml_and_keeps_running_on_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pb.toml");
    std::fs::write(&cfg, "[limits]\npage_size_default = 30\n").unwrap();
    let data = dir.path().join("pb_data");
    let addr = format!("127.0.0.1:{}", crate::common::free_port());
    let mut child = serve_in(dir.path(), &cfg, &data, &addr);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(10)))
        .build()
        .into();
    // The default page size, as the public superusers-only list of `users` reports it.
    let per_page = || -> Option<i64> {
        let mut r = agent
            .get(format!("http://{addr}/api/collections/users/records"))
            .call()
            .ok()?;
        let v: Value = serde_json::from_str(&r.body_mut().read_to_string().ok()?).ok()?;
        v["perPage"].as_i64()
    };
    let wait_for = |want: i64| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while per_page() != Some(want) {
            assert!(
                std::time::Instant::now() < deadline,
                "perPage never became {want}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };
    let hup = || {
        let st = std::process::Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    };
    wait_for(30);
    std::fs::write(&cfg, "[limits]\npage_size_default = 7\n").unwrap();
    hup();
    wait_for(7);
    // A broken file: nothing changes, the server keeps serving, the error is in the log.
    std::fs::write(&cfg, "[limits]\npage_size_default = \"many\"\n").unwrap();
    hup();
    let log_path = dir.path().join("server.log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&log_path)
        .unwrap()
        .contains("pb.toml not applied")
    {
        assert!(std::time::Instant::now() < deadline, "no error logged");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(per_page(), Some(7));
    let log_text = std::fs::read_to_string(&log_path).unwrap();
    assert!(log_text.contains("page_size_default"), "{log_text}");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let st = child.wait().unwrap();
    assert!(st.success(), "{st}");
}

#[test]
fn log_requests_prints_one_info_line_per_request_with_method_route_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pb.toml");
    std::fs::write(&cfg, "[log]\nrequests = true\nformat = \"json\"\n").unwrap();
    let addr = format!("127.0.0.1:{}", crate::common::free_port());
    let log_path = dir.path().join("server.log");
    let mut child = serve_in(dir.path(), &cfg, &dir.path().join("pb_data"), &addr);
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(10)))
        .build()
        .into();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let lines = loop {
        let _ = agent
            .get(format!("http://{addr}/api/collections/nope/records?x=1"))
            .call();
        let text = std::fs::read_to_string(&log_path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["span"]["name"] == "request")
            .collect();
        if !lines.is_empty() {
            break lines;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no request line: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let l = &lines[0];
    assert_eq!(l["level"], "INFO", "{l}");
    assert_eq!(l["span"]["method"], "GET", "{l}");
    assert_eq!(
        l["span"]["route"], "/api/collections/{collection}/records",
        "{l}"
    );
    assert_eq!(l["span"]["status"], 404, "{l}");
    assert!(l["span"]["us"].as_u64().is_some(), "{l}");
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().unwrap().success());
}
