//! Metrics: the process's counters, gauges and histograms (requests by route and status with
//! their latency, the caches, the writer and its group commits, reader waits, plugins, realtime,
//! mail), updated with atomics only, and their rendering in the OpenMetrics text format that
//! Prometheus scrapes. No HTTP.
//!
//! Every cell is a static or an `Arc` handed out once: the hot path finds its cell without a
//! lock (a request's cell through a per-thread map, a plugin's through the handle it keeps) and
//! bumps an atomic. Registration (the first time a thread sees a route, a plugin loads) takes
//! a mutex; so does a scrape, which reads every cell with relaxed loads.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The content type of [`render`]'s text.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Request latency bounds, in microseconds (100 µs .. 10 s; the last bucket is +Inf).
const LATENCY_US: [u64; 15] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// Group commit sizes (writes per COMMIT).
const BATCH_SIZES: [u64; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Reader waits, in microseconds.
const WAIT_US: [u64; 8] = [
    100, 1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000,
];

/// A histogram of integer observations: `N` upper bounds (inclusive) and one more bucket past
/// the last (+Inf). Counts are per bucket; the encoder makes them cumulative.
pub(crate) struct Histogram<const N: usize> {
    bounds: &'static [u64; N],
    counts: [AtomicU64; N],
    over: AtomicU64,
    sum: AtomicU64,
}

impl<const N: usize> Histogram<N> {
    const fn new(bounds: &'static [u64; N]) -> Self {
        Self {
            bounds,
            counts: [const { AtomicU64::new(0) }; N],
            over: AtomicU64::new(0),
            sum: AtomicU64::new(0),
        }
    }

    fn observe(&self, v: u64) {
        let i = self.bounds.partition_point(|b| *b < v);
        match self.counts.get(i) {
            Some(c) => c.fetch_add(1, Relaxed),
            None => self.over.fetch_add(1, Relaxed),
        };
        self.sum.fetch_add(v, Relaxed);
    }

    /// `(sum, count, buckets)` with the bounds and the sum divided by `unit` (1e6 for
    /// microseconds shown as seconds).
    fn read(&self, unit: f64) -> (f64, u64, Vec<(f64, u64)>) {
        let mut buckets: Vec<(f64, u64)> = self
            .bounds
            .iter()
            .zip(&self.counts)
            .map(|(b, c)| (as_f64(*b) / unit, c.load(Relaxed)))
            .collect();
        buckets.push((f64::INFINITY, self.over.load(Relaxed)));
        let count = buckets.iter().map(|(_, c)| c).sum();
        (as_f64(self.sum.load(Relaxed)) / unit, count, buckets)
    }
}

#[expect(
    clippy::cast_precision_loss,
    reason = "metric values: 2^53 is far away"
)]
fn as_f64(v: u64) -> f64 {
    v as f64
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// A gauge (goes up and down).
pub(crate) struct Gauge(AtomicI64);

impl Gauge {
    const fn new() -> Self {
        Self(AtomicI64::new(0))
    }
    pub(crate) fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }
    pub(crate) fn dec(&self) {
        self.0.fetch_sub(1, Relaxed);
    }
    pub(crate) fn set(&self, v: i64) {
        self.0.store(v, Relaxed);
    }
}

/// A counter (only goes up).
pub(crate) struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Self {
        Self(AtomicU64::new(0))
    }
    pub(crate) fn inc(&self) {
        self.0.fetch_add(1, Relaxed);
    }
}

/// Which cache a hit or miss is counted for.
#[derive(Clone, Copy)]
pub(crate) enum Cache {
    /// Whole list and view responses.
    Responses,
    /// Verified auth tokens.
    Tokens,
}

struct CacheCells {
    hits: Counter,
    misses: Counter,
}

static RESPONSES: CacheCells = CacheCells {
    hits: Counter::new(),
    misses: Counter::new(),
};
static TOKENS: CacheCells = CacheCells {
    hits: Counter::new(),
    misses: Counter::new(),
};

/// Count a lookup in `cache`.
pub(crate) fn cache(cache: Cache, hit: bool) {
    let cells = match cache {
        Cache::Responses => &RESPONSES,
        Cache::Tokens => &TOKENS,
    };
    if hit {
        cells.hits.inc();
    } else {
        cells.misses.inc();
    }
}

/// Jobs sent to the writer thread and not yet taken by it.
pub(crate) static WRITER_QUEUE: Gauge = Gauge::new();
static GROUP_COMMITS: Histogram<9> = Histogram::new(&BATCH_SIZES);
static READER_WAITS: Histogram<8> = Histogram::new(&WAIT_US);
/// Realtime streams open now.
pub(crate) static REALTIME_CLIENTS: Gauge = Gauge::new();
/// Realtime clients disconnected because their queue was full.
pub(crate) static REALTIME_DROPPED: Counter = Counter::new();
/// Mails waiting in the outbox.
pub(crate) static MAIL_QUEUE: Gauge = Gauge::new();
/// Mails handed to the SMTP server.
pub(crate) static MAIL_SENT: Counter = Counter::new();
/// Mails given up on (after the retries, or refused by a full queue).
pub(crate) static MAIL_FAILED: Counter = Counter::new();
/// Replication (`[replication]`): 1 while it is configured, 1 while its litestream runs, and
/// how many times that litestream was started again after it died.
pub(crate) static REPLICATION_ENABLED: Gauge = Gauge::new();
pub(crate) static REPLICATION_RUNNING: Gauge = Gauge::new();
pub(crate) static REPLICATION_RESTARTS: Counter = Counter::new();

/// One commit of the writer with `writes` writes in it (a group commit when more than one).
pub(crate) fn group_commit(writes: usize) {
    GROUP_COMMITS.observe(u64::try_from(writes).unwrap_or(u64::MAX));
}

/// A read that found no free connection and waited `waited` for one.
pub(crate) fn reader_wait(waited: Duration) {
    READER_WAITS.observe(micros(waited));
}

/// One plugin's calls and failures, kept across its reloads (by name).
#[derive(Default)]
pub(crate) struct PluginCells {
    calls: AtomicU64,
    failures: AtomicU64,
}

impl PluginCells {
    /// One call into the plugin ended; `failed` when it trapped, timed out or returned an error.
    pub(crate) fn call(&self, failed: bool) {
        self.calls.fetch_add(1, Relaxed);
        if failed {
            self.failures.fetch_add(1, Relaxed);
        }
    }
}

static PLUGINS: Mutex<Vec<(String, Arc<PluginCells>)>> = Mutex::new(Vec::new());

/// The cells of the plugin named `name` (made on first use; a reloaded plugin gets the same).
pub(crate) fn plugin(name: &str) -> Arc<PluginCells> {
    let Ok(mut all) = PLUGINS.lock() else {
        return Arc::default();
    };
    if let Some((_, c)) = all.iter().find(|(n, _)| n == name) {
        return Arc::clone(c);
    }
    let cells = Arc::new(PluginCells::default());
    all.push((name.to_owned(), Arc::clone(&cells)));
    cells
}

/// Collections with a label of their own in `ferrobase_index_advice_scans`; the others share
/// [`ADVICE_OTHER`], so a server with thousands of collections keeps a bounded exposition.
const ADVICE_LABELS_MAX: usize = 100;
const ADVICE_OTHER: &str = "_other";

/// Lists over `[advisor].scan_threshold`, per collection name.
static ADVICE_SCANS: Mutex<Vec<(String, u64)>> = Mutex::new(Vec::new());

/// One record list of `collection` stepped through more rows in full scans than
/// `[advisor].scan_threshold`. Called only past the threshold, so the lock is off the common path.
pub(crate) fn index_advice_scan(collection: &str) {
    let Ok(mut all) = ADVICE_SCANS.lock() else {
        return;
    };
    let label = if all.len() < ADVICE_LABELS_MAX || all.iter().any(|(n, _)| n == collection) {
        collection
    } else {
        ADVICE_OTHER
    };
    match all.iter_mut().find(|(n, _)| n == label) {
        Some((_, v)) => *v += 1,
        None => all.push((label.to_owned(), 1)),
    }
}

fn encode_advice(enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let all = ADVICE_SCANS.lock().map(|v| v.clone()).unwrap_or_default();
    let mut m = enc.encode_descriptor(
        "ferrobase_index_advice_scans",
        "Record lists whose full table scans stepped through more rows than [advisor].scan_threshold.",
        None,
        MetricType::Counter,
    )?;
    for (collection, v) in &all {
        m.encode_family(&[("collection", collection.as_str())])?
            .encode_counter::<NoLabelSet, _, u64>(v, None)?;
    }
    Ok(())
}

type Latency = Histogram<15>;

struct RequestCell {
    method: &'static str,
    route: Arc<str>,
    status: u16,
    latency: Latency,
}

static REQUESTS: Mutex<Vec<Arc<RequestCell>>> = Mutex::new(Vec::new());

thread_local! {
    /// This thread's handles, by route, then (method, status) in a short list.
    static MINE: RefCell<HashMap<Arc<str>, Vec<Arc<RequestCell>>>> = RefCell::new(HashMap::new());
}

/// The methods kept as labels; any other (an extension method) is counted as `OTHER`.
fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        _ => "OTHER",
    }
}

/// The route label of a request that matched no route (its path is not used: unbounded).
pub(crate) const UNMATCHED: &str = "unmatched";

/// One answered request: `route` is the matched pattern (`/api/collections/{collection}/records`,
/// a plugin route's pattern, or [`UNMATCHED`]), `took` the time until its response head was
/// ready.
pub(crate) fn request(method: &str, route: &str, status: u16, took: Duration) {
    let method = method_label(method);
    let cell = MINE.with(|mine| {
        let mut mine = mine.borrow_mut();
        if let Some(c) = mine
            .get(route)
            .and_then(|v| v.iter().find(|c| c.status == status && c.method == method))
        {
            return Arc::clone(c);
        }
        let c = register(method, route, status);
        match mine.get_mut(route) {
            Some(v) => v.push(Arc::clone(&c)),
            None => {
                mine.insert(Arc::clone(&c.route), vec![Arc::clone(&c)]);
            }
        }
        c
    });
    cell.latency.observe(micros(took));
}

/// The one cell of (method, route, status), made on first use by any thread.
fn register(method: &'static str, route: &str, status: u16) -> Arc<RequestCell> {
    let made = || {
        Arc::new(RequestCell {
            method,
            route: Arc::from(route),
            status,
            latency: Latency::new(&LATENCY_US),
        })
    };
    let Ok(mut all) = REQUESTS.lock() else {
        return made();
    };
    if let Some(c) = all
        .iter()
        .find(|c| c.status == status && c.method == method && &*c.route == route)
    {
        return Arc::clone(c);
    }
    let c = made();
    all.push(Arc::clone(&c));
    c
}

/// Every metric, in the OpenMetrics text format.
pub(crate) fn render() -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(All));
    let mut out = String::with_capacity(16 << 10);
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

#[derive(Debug)]
struct All;

impl Collector for All {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_requests(&mut enc)?;
        for (name, help, hits) in [
            (
                "ferrobase_cache_hits",
                "Lookups answered from a cache.",
                true,
            ),
            (
                "ferrobase_cache_misses",
                "Lookups a cache could not answer.",
                false,
            ),
        ] {
            let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (cache, cells) in [("responses", &RESPONSES), ("tokens", &TOKENS)] {
                let v = if hits { &cells.hits } else { &cells.misses };
                m.encode_family(&[("cache", cache)])?
                    .encode_counter::<NoLabelSet, _, u64>(&v.0.load(Relaxed), None)?;
            }
        }
        gauge(
            &mut enc,
            "ferrobase_writer_queue",
            "Writes waiting for the writer thread.",
            WRITER_QUEUE.0.load(Relaxed),
        )?;
        histogram(
            &mut enc,
            "ferrobase_writer_commit_writes",
            "Writes made durable by one COMMIT (group commit).",
            NONE,
            GROUP_COMMITS.read(1.0),
        )?;
        histogram(
            &mut enc,
            "ferrobase_reader_wait_seconds",
            "Time a read waited for a free read-only connection (only reads that waited).",
            NONE,
            READER_WAITS.read(1e6),
        )?;
        encode_plugins(&mut enc)?;
        encode_advice(&mut enc)?;
        gauge(
            &mut enc,
            "ferrobase_realtime_clients",
            "Realtime (SSE) streams open now.",
            REALTIME_CLIENTS.0.load(Relaxed),
        )?;
        counter(
            &mut enc,
            "ferrobase_realtime_dropped_clients",
            "Realtime clients disconnected because they fell a whole queue behind.",
            NONE,
            REALTIME_DROPPED.0.load(Relaxed),
        )?;
        gauge(
            &mut enc,
            "ferrobase_mail_queue",
            "Mails waiting to be sent.",
            MAIL_QUEUE.0.load(Relaxed),
        )?;
        counter(
            &mut enc,
            "ferrobase_mail_sent",
            "Mails accepted by the SMTP server.",
            NONE,
            MAIL_SENT.0.load(Relaxed),
        )?;
        counter(
            &mut enc,
            "ferrobase_mail_failed",
            "Mails given up on.",
            NONE,
            MAIL_FAILED.0.load(Relaxed),
        )?;
        gauge(
            &mut enc,
            "ferrobase_replication_enabled",
            "1 when [replication] is on.",
            REPLICATION_ENABLED.0.load(Relaxed),
        )?;
        gauge(
            &mut enc,
            "ferrobase_replication_running",
            "1 while the supervised litestream process runs.",
            REPLICATION_RUNNING.0.load(Relaxed),
        )?;
        counter(
            &mut enc,
            "ferrobase_replication_restarts",
            "Times litestream was started again after it exited.",
            NONE,
            REPLICATION_RESTARTS.0.load(Relaxed),
        )?;
        encode_process(&mut enc)
    }
}

fn encode_requests(enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let cells: Vec<Arc<RequestCell>> = REQUESTS.lock().map(|v| v.clone()).unwrap_or_default();
    let read: Vec<_> = cells
        .iter()
        .map(|c| {
            let status = c.status.to_string();
            (c, status, c.latency.read(1e6))
        })
        .collect();
    {
        let mut m = enc.encode_descriptor(
            "ferrobase_http_requests",
            "Requests answered, by method, matched route and status.",
            None,
            MetricType::Counter,
        )?;
        for (c, status, (_, count, _)) in &read {
            let labels = [
                ("method", c.method),
                ("route", &*c.route),
                ("status", status.as_str()),
            ];
            m.encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(count, None)?;
        }
    }
    let mut m = enc.encode_descriptor(
        "ferrobase_http_request_duration_seconds",
        "Time from a request's head to its response's head, by method, matched route and status.",
        None,
        MetricType::Histogram,
    )?;
    for (c, status, (sum, count, buckets)) in &read {
        let labels = [
            ("method", c.method),
            ("route", &*c.route),
            ("status", status.as_str()),
        ];
        m.encode_family(&labels)?
            .encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
    }
    Ok(())
}

fn encode_plugins(enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    let all: Vec<(String, Arc<PluginCells>)> =
        PLUGINS.lock().map(|v| v.clone()).unwrap_or_default();
    for (name, help, failures) in [
        ("ferrobase_plugin_calls", "Calls into each plugin.", false),
        (
            "ferrobase_plugin_failures",
            "Plugin calls that trapped, ran out of time or memory, or returned an error.",
            true,
        ),
    ] {
        let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
        for (plugin, cells) in &all {
            let v = if failures {
                cells.failures.load(Relaxed)
            } else {
                cells.calls.load(Relaxed)
            };
            m.encode_family(&[("plugin", plugin.as_str())])?
                .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
        }
    }
    Ok(())
}

/// The process's resident memory, CPU time and open descriptors, from `/proc/self` (Linux).
fn encode_process(enc: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
    if let Some((cpu, rss)) = proc_stat() {
        let mut m = enc.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time spent.",
            None,
            MetricType::Counter,
        )?;
        m.encode_counter::<NoLabelSet, _, f64>(&cpu, None)?;
        gauge(
            enc,
            "process_resident_memory_bytes",
            "Resident memory size.",
            rss,
        )?;
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        let n = i64::try_from(dir.count()).unwrap_or(i64::MAX);
        gauge(enc, "process_open_fds", "Open file descriptors.", n)?;
    }
    Ok(())
}

/// (CPU seconds, resident bytes) from `/proc/self/stat`.
fn proc_stat() -> Option<(f64, i64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) start at field 3.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks = rustix::param::clock_ticks_per_second();
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    let pages: i64 = f.get(21)?.parse().ok()?;
    let page = i64::try_from(rustix::param::page_size()).ok()?;
    Some((as_f64(utime + stime) / as_f64(ticks), pages * page))
}

/// No labels.
const NONE: &[(&str, &str)] = &[];

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    labels: &[(&str, &str)],
    v: u64,
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    m.encode_family(&labels)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

fn gauge(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    v: i64,
) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    let mut m = m;
    m.encode_gauge(&v)
}

fn histogram(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    labels: &[(&str, &str)],
    (sum, count, buckets): (f64, u64, Vec<(f64, u64)>),
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    m.encode_family(&labels)?
        .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_puts_each_value_in_the_first_bucket_that_holds_it() {
        static B: [u64; 3] = [10, 100, 1000];
        let h = Histogram::new(&B);
        for v in [0, 10, 11, 100, 5000] {
            h.observe(v);
        }
        let (sum, count, buckets) = h.read(1.0);
        assert_eq!(count, 5);
        assert!((sum - 5121.0).abs() < 1e-9);
        let counts: Vec<u64> = buckets.iter().map(|(_, c)| *c).collect();
        assert_eq!(counts, vec![2, 2, 0, 1]);
        assert!(buckets[3].0.is_infinite());
    }

    #[test]
    fn requests_are_counted_per_method_route_and_status_from_any_thread() {
        let route = "/api/test-metrics/{id}";
        request("GET", route, 200, Duration::from_micros(50));
        std::thread::spawn(move || {
            request("GET", route, 200, Duration::from_millis(3));
            request("BREW", route, 418, Duration::from_millis(3));
        })
        .join()
        .unwrap();
        let text = render();
        assert!(
            text.contains(
                "ferrobase_http_requests_total{method=\"GET\",route=\"/api/test-metrics/{id}\",status=\"200\"} 2"
            ),
            "{text}"
        );
        assert!(text.contains(
            "ferrobase_http_requests_total{method=\"OTHER\",route=\"/api/test-metrics/{id}\",status=\"418\"} 1"
        ));
        assert!(text.contains("ferrobase_http_request_duration_seconds_bucket{le=\"0.0001\",method=\"GET\",route=\"/api/test-metrics/{id}\",status=\"200\"} 1"), "{text}");
        assert!(text.trim_end().ends_with("# EOF"));
    }

    #[test]
    fn a_plugin_keeps_its_cells_across_reloads() {
        let a = plugin("metrics_test_plugin");
        a.call(false);
        let b = plugin("metrics_test_plugin");
        b.call(true);
        let text = render();
        assert!(text.contains("ferrobase_plugin_calls_total{plugin=\"metrics_test_plugin\"} 2"));
        assert!(text.contains("ferrobase_plugin_failures_total{plugin=\"metrics_test_plugin\"} 1"));
    }
}
