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
