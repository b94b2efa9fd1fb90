//! Plugin costs, outside HTTP: one before-create hook call on a warm pooled instance (slugger),
//! and the load time of each example plugin, compiled from scratch and read from the compile
//! cache. A custom harness (percentiles of single calls, not criterion's means).
//!
//! Run: `cargo bench -p ferrobase --bench plugins` (options after `--`: `--calls N`,
//! `--warmup N`, `--rounds N`, `--load-reps N`, `--no-build`). The example plugins are built
//! first when missing:
//!
//! ```sh
//! cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml
//! (cd plugins/js-hello && npm ci && node build.mjs)
//! ```
//!
//! Prints markdown tables, then one `PLUGINS_BENCH_JSON {...}` line (bench/plugins.sh keeps it).

use ferrobase::testkit::{self, PluginFixture, PluginLoad};
use std::path::{Path, PathBuf};

struct Opts {
    calls: usize,
    warmup: usize,
    rounds: usize,
    load_reps: usize,
    build: bool,
}

fn opts() -> Opts {
    let mut o = Opts {
        calls: 20_000,
        warmup: 1_000,
        rounds: 3,
        load_reps: 3,
        build: true,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let num = |j: usize| -> usize {
            args.get(j)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{} needs a number", args[i]))
        };
        match args[i].as_str() {
            "--calls" => (o.calls, i) = (num(i + 1), i + 1),
            "--warmup" => (o.warmup, i) = (num(i + 1), i + 1),
            "--rounds" => (o.rounds, i) = (num(i + 1), i + 1),
            "--load-reps" => (o.load_reps, i) = (num(i + 1), i + 1),
            "--no-build" => o.build = false,
            _ => {} // cargo's own (--bench) and filters
        }
        i += 1;
    }
    o
}

/// The repository root (this crate is `host/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_owned()
}

const RUST_PLUGINS: &[&str] = &["slugger", "posts_api", "cleanup", "audit"];

fn plugin_files() -> Vec<(&'static str, PathBuf)> {
    let r = root();
    RUST_PLUGINS
        .iter()
        .chain(&["js-hello"])
        .map(|n| (*n, testkit::plugin_wasm(&r, n)))
        .collect()
}

/// Build the example plugins when any is missing (`build`), else say what to run.
fn ensure_built(build: bool) {
    let missing = || -> Vec<String> {
        plugin_files()
            .iter()
            .filter(|(_, p)| !p.is_file())
            .map(|(n, p)| format!("{n} ({})", p.display()))
            .collect()
    };
    if build && !missing().is_empty() {
        eprintln!("[plugins bench] building the plugins");
        if let Err(e) = testkit::build_plugins(&root()) {
            eprintln!("[plugins bench] {e}");
        }
    }
    let missing = missing();
    if !missing.is_empty() {
        eprintln!(
            "[plugins bench] missing plugin builds: {}\n  from the repository root run:\n    \
             cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml\n    \
             cd plugins/js-hello && npm ci && node build.mjs",
            missing.join(", ")
        );
        std::process::exit(2);
    }
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn us(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1000.0)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn main() {
    let o = opts();
    // The runtime's warnings (a refused plugin, a stale cache entry) go to stderr.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    ensure_built(o.build);
    let work = tempfile::tempdir().expect("temp dir");
    let mut fx = PluginFixture::new(work.path()).expect("fixture");
    let mut json_rounds = Vec::new();
    let mut json_loads = Vec::new();

    // 1. One before-create hook call (slugger) on a warm pooled instance.
    let slugger = &plugin_files()[0].1;
    fx.load_hook(slugger).expect("slugger loads");
    let outcome = fx.before_create_outcome().expect("outcome");
    assert!(
        outcome.contains("\"slug\"") && outcome.contains("hello-world"),
        "slugger should set slug = hello-world, got {outcome}"
    );
    println!("## before-create hook call (slugger, warm pooled instance)\n");
    println!(
        "{} calls per round after {} warm-up calls; `Loaded::before_write` awaited one at a time on a\n\
         tokio multi-thread runtime, each call timed alone. The instance is recycled every\n\
         10,000 calls (`max_calls_per_instance`), so a round includes re-instantiations.\n",
        o.calls, o.warmup
    );
    println!("| round | p50 µs | p90 µs | p99 µs | p99.9 µs | max µs | mean µs |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for round in 1..=o.rounds {
        let mut t = fx
            .time_before_create(o.warmup, o.calls)
            .expect("hook calls");
        let mean = t.iter().sum::<u64>() / t.len().max(1) as u64;
        t.sort_unstable();
        let (p50, p90, p99, p999, max) = (
            pct(&t, 50.0),
            pct(&t, 90.0),
            pct(&t, 99.0),
            pct(&t, 99.9),
            *t.last().unwrap_or(&0),
        );
        println!(
            "| {round} | {} | {} | {} | {} | {} | {} |",
            us(p50),
            us(p90),
            us(p99),
            us(p999),
            us(max),
            us(mean)
        );
        json_rounds.push(format!(
            "{{\"round\":{round},\"calls\":{},\"p50_ns\":{p50},\"p90_ns\":{p90},\"p99_ns\":{p99},\"p999_ns\":{p999},\"max_ns\":{max},\"mean_ns\":{mean}}}",
            o.calls
        ));
    }
    println!("\nGoal: p99 under 20 µs.\n");

    // 2. Load time per plugin: compiled from scratch (fresh cache folder), then from the cache.
    let mut empty = Vec::new();
    for _ in 0..o.load_reps {
        empty.push(fx.start_empty().expect("empty start").as_secs_f64() * 1000.0);
    }
    let engine_ms = median(empty);
    println!(
        "## plugin load time (median of {} runs, min–max)\n",
        o.load_reps
    );
    println!(
        "`Plugins::start` on a folder holding one plugin: engine + linker, compile (cold) or read\n\
         the compiled code back from the on-disk cache (cached), instantiate, `describe`, one warm\n\
         instance. `compile` is the runtime's own `compile_ms` for the compile / cache-read step.\n\
         The engine + linker alone (an empty folder): {engine_ms:.1} ms.\n"
    );
    println!(
        "| plugin | .wasm KiB | cold total ms | cold compile ms | cached total ms | cached read ms |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (file_name, path) in plugin_files() {
        let size_kib = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) / 1024;
        let mut cold: Vec<PluginLoad> = Vec::new();
        let mut warm: Vec<PluginLoad> = Vec::new();
        for rep in 0..o.load_reps {
            let cache = work.path().join(format!("cache-{file_name}-{rep}"));
            let c = fx
                .load(&path, &cache)
                .unwrap_or_else(|e| panic!("{file_name}: {e}"));
            assert!(!c.from_cache, "{file_name}: a fresh cache folder was hit");
            if std::env::var_os("PLUGINS_BENCH_DEBUG").is_some() {
                for e in std::fs::read_dir(cache.join(".plugin-cache"))
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    eprintln!(
                        "cache entry {:?} {:?}",
                        e.file_name(),
                        e.metadata().map(|m| m.len())
                    );
                }
            }
            let w = fx
                .load(&path, &cache)
                .unwrap_or_else(|e| panic!("{file_name}: {e}"));
            assert!(
                w.from_cache,
                "{file_name}: the second load did not read the cache"
            );
            cold.push(c);
            warm.push(w);
        }
        let stat = |v: &[PluginLoad], f: &dyn Fn(&PluginLoad) -> f64| {
            let xs: Vec<f64> = v.iter().map(f).collect();
            let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = xs.iter().copied().fold(0.0, f64::max);
            (median(xs), lo, hi)
        };
        let total = |l: &PluginLoad| l.total.as_secs_f64() * 1000.0;
        let comp = |l: &PluginLoad| l.compile_ms as f64;
        let (ct, ct_lo, ct_hi) = stat(&cold, &total);
        let (cc, _, _) = stat(&cold, &comp);
        let (wt, wt_lo, wt_hi) = stat(&warm, &total);
        let (wc, _, _) = stat(&warm, &comp);
        let name = &cold[0].name;
        println!(
            "| {name} | {size_kib} | {ct:.1} ({ct_lo:.1}–{ct_hi:.1}) | {cc:.0} | {wt:.1} ({wt_lo:.1}–{wt_hi:.1}) | {wc:.0} |"
        );
        json_loads.push(format!(
            "{{\"plugin\":\"{name}\",\"wasm_kib\":{size_kib},\"cold_total_ms\":{ct:.2},\"cold_compile_ms\":{cc},\"cached_total_ms\":{wt:.2},\"cached_read_ms\":{wc},\"reps\":{}}}",
            o.load_reps
        ));
    }
    println!();
    println!(
        "PLUGINS_BENCH_JSON {{\"hook\":[{}],\"engine_ms\":{engine_ms:.2},\"loads\":[{}]}}",
        json_rounds.join(","),
        json_loads.join(",")
    );
    drop(fx);
}
