//! Embeds the dashboard: every file of `dashboard/dist` (built and committed by the dashboard's
//! `npm run build`) becomes a static asset of the binary, stored both as is and gzipped, so the
//! server never compresses at run time. A checkout without `dist/` builds a binary without a
//! dashboard (`/_/` then answers PocketBase's 404).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let dist = manifest.join("../dashboard/dist");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it"));
    println!("cargo::rerun-if-changed={}", dist.display());

    let mut files = Vec::new();
    if dist.is_dir() {
        walk(&dist, &dist, &mut files);
    }
    files.sort();

    let gz_dir = out.join("dashboard");
    std::fs::create_dir_all(&gz_dir).expect("OUT_DIR is writable");
    let mut table = String::from("&[\n");
    for (i, rel) in files.iter().enumerate() {
        let src = dist.join(rel);
        println!("cargo::rerun-if-changed={}", src.display());
        let raw = std::fs::read(&src).expect("a dist file is readable");
        let gz = gz_dir.join(format!("{i}.gz"));
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        enc.write_all(&raw).expect("gzip into memory");
        std::fs::write(&gz, enc.finish().expect("gzip into memory")).expect("OUT_DIR is writable");
        writeln!(
            table,
            "    ({:?}, include_bytes!({:?}), include_bytes!({:?})),",
            rel,
            src.display().to_string(),
            gz.display().to_string()
        )
        .expect("write to a String");
    }
    table.push(']');
    std::fs::write(out.join("dashboard_assets.rs"), table).expect("OUT_DIR is writable");
}

/// Every file under `dir`, as a `/`-separated path relative to `root`.
fn walk(root: &Path, dir: &Path, files: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).expect("dist is readable");
    for entry in entries {
        let path = entry.expect("dist is readable").path();
        println!("cargo::rerun-if-changed={}", path.display());
        if path.is_dir() {
            walk(root, &path, files);
        } else if let Ok(rel) = path.strip_prefix(root) {
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            files.push(parts.join("/"));
        }
    }
}
