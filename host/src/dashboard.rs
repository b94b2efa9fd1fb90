//! The dashboard's files: embedded at build time from `dashboard/dist` (see host/build.rs),
//! or read from a folder on disk when `[http] dashboard_dir` names one. No HTTP.

use std::borrow::Cow;
use std::path::{Component, Path};

/// `(path under dist/, the bytes, the bytes gzipped)`, in path order.
static EMBEDDED: &[(&str, &[u8], &[u8])] =
    include!(concat!(env!("OUT_DIR"), "/dashboard_assets.rs"));

/// One file of the dashboard.
pub(crate) struct Asset {
    pub body: Cow<'static, [u8]>,
    /// The same bytes gzipped (embedded files only).
    pub gzip: Option<&'static [u8]>,
    pub content_type: &'static str,
    /// Under `assets/`: named by their content's hash, so they never change under a name.
    pub hashed: bool,
}

/// Whether this binary carries a dashboard (a checkout without `dashboard/dist` builds none).
pub(crate) fn embedded() -> bool {
    EMBEDDED.iter().any(|(p, _, _)| *p == "index.html")
}

/// The file at `path` (relative to `/_/`; empty = `index.html`), from `dir` when given, else
/// from the binary. None for a missing file or a path that would leave the folder.
pub(crate) fn find(dir: Option<&Path>, path: &str) -> Option<Asset> {
    let path = if path.is_empty() { "index.html" } else { path };
    let content_type = content_type(path);
    let hashed = path.starts_with("assets/");
    match dir {
        Some(dir) => {
            let rel = Path::new(path);
            if !rel.components().all(|c| matches!(c, Component::Normal(_))) {
                return None;
            }
            let body = std::fs::read(dir.join(rel)).ok()?;
            Some(Asset {
                body: Cow::Owned(body),
                gzip: None,
                content_type,
                hashed,
            })
        }
        None => {
            let i = EMBEDDED.binary_search_by(|(p, _, _)| (*p).cmp(path)).ok()?;
            let (_, raw, gz) = EMBEDDED[i];
            Some(Asset {
                body: Cow::Borrowed(raw),
                gzip: Some(gz),
                content_type,
                hashed,
            })
        }
    }
}

fn content_type(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    match ext {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "json" | "map" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "webp" => "image/webp",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_serves_its_files_and_nothing_outside_it() {
        let dir = std::env::temp_dir().join(format!("fb-dash-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("assets")).expect("mkdir");
        std::fs::write(dir.join("index.html"), "<!doctype html>").expect("write");
        std::fs::write(dir.join("assets/a-1.js"), "x").expect("write");
        let index = find(Some(&dir), "").expect("index");
        assert_eq!(&*index.body, b"<!doctype html>");
        assert_eq!(index.content_type, "text/html; charset=utf-8");
        assert!(!index.hashed);
        let js = find(Some(&dir), "assets/a-1.js").expect("asset");
        assert!(js.hashed);
        assert_eq!(js.content_type, "text/javascript; charset=utf-8");
        assert!(find(Some(&dir), "../etc/passwd").is_none());
        assert!(find(Some(&dir), "/etc/passwd").is_none());
        assert!(find(Some(&dir), "assets/missing.js").is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_embedded_files_are_in_path_order_and_gzip_to_themselves() {
        use std::io::Read;
        for w in EMBEDDED.windows(2) {
            assert!(w[0].0 < w[1].0, "{} before {}", w[0].0, w[1].0);
        }
        for (path, raw, gz) in EMBEDDED {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(*gz)
                .read_to_end(&mut out)
                .expect("gunzip");
            assert_eq!(&out[..], *raw, "{path}");
        }
        if embedded() {
            assert!(find(None, "").is_some_and(|a| a.gzip.is_some()));
        }
    }
}
