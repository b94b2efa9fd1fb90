//! Replays the fuzz corpus (`host/fuzz/corpus/compile/`: seeds and saved crash inputs) through
//! `ferrobase::testkit::fuzz_one` on stable: every input must either fail to compile or compile
//! to a statement that prepares and runs, and nothing may panic.

use ferrobase::testkit::{Fixture, fuzz_one};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[test]
fn fuzz_corpus_replays_cleanly() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join("corpus")
        .join("compile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "empty corpus at {}", dir.display());

    let fx = Fixture::new();
    let started = Instant::now();
    let mut failures = Vec::new();
    for path in &files {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_default();
        let t = Instant::now();
        match panic::catch_unwind(AssertUnwindSafe(|| fuzz_one(&fx, &data))) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(format!("{name}: error: {}", shorten(&e))),
            Err(p) => {
                let msg = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic".into());
                failures.push(format!("{name}: panic: {msg}"));
            }
        }
        if t.elapsed() > Duration::from_secs(1) {
            failures.push(format!("{name}: slow: took {:?}", t.elapsed()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus input(s) failed (in {:?}):\n{}",
        failures.len(),
        files.len(),
        started.elapsed(),
        failures.join("\n")
    );
}

/// Keep failure lines readable: drop the echoed SQL after " in SELECT".
fn shorten(e: &str) -> String {
    match e.find(" in SELECT") {
        Some(i) => format!("{} in SELECT …", &e[..i]),
        None => e.to_string(),
    }
}
