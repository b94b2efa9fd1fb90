//! `ferrobase plugin new NAME`: the crate it writes builds for wasm32-wasip2 as it is (with
//! the SDK it vendors), and the component loads and answers in a real server.

use super::{eventually, plugins_built, root};
use crate::common::{Server, ferrobase_bin};
use serde_json::json;
use std::process::Command;
use std::time::Duration;

#[test]
fn a_new_plugin_crate_builds_for_wasm32_wasip2_and_loads() {
    if !plugins_built() {
        return;
    }
    // Under the repository's target folder, so its rust-toolchain.toml (and the wasm target it
    // installs) applies to the build.
    let base = root().join("target");
    std::fs::create_dir_all(&base).unwrap();
    let work = tempfile::tempdir_in(&base).unwrap();
    let out = Command::new(ferrobase_bin())
        .args(["plugin", "new", "starter-check", "--path"])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("cargo build --release --target wasm32-wasip2"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let krate = work.path().join("starter-check");
    // A second run refuses to overwrite it.
    let again = Command::new(ferrobase_bin())
        .args(["plugin", "new", "starter-check", "--path"])
        .arg(work.path())
        .output()
        .unwrap();
    assert!(!again.status.success());

    // The plugins' lock file pins the same dependency versions, and their target folder
    // already holds them compiled: the build is offline and compiles only the new crate and
    // its copy of the SDK.
    std::fs::copy(root().join("plugins/Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--offline",
        ])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", root().join("plugins/target"))
        .env_remove("RUSTFLAGS")
        .status()
        .unwrap();
    assert!(status.success(), "the new crate did not build");
    let wasm = root().join("plugins/target/wasm32-wasip2/release/starter_check.wasm");

    let s = Server::start_in_patient(tempfile::tempdir().unwrap(), Duration::from_secs(60));
    let pdir = s.data_dir().parent().unwrap().join("plugins");
    std::fs::create_dir_all(&pdir).unwrap();
    std::fs::copy(&wasm, pdir.join("starter_check.wasm")).unwrap();
    let r = eventually("the new plugin serving", || {
        let r = s.req("GET", "/api/starter-check/hello", None, None);
        (r.status == 200).then_some(r)
    });
    assert_eq!(r.json, json!({"hello": "guest", "plugin": "starter-check"}));
}
