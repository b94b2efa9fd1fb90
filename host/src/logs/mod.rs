//! Request logs as PocketBase keeps them: the row a request leaves (`level`, `message`, the
//! `data` object under `settings.logs`, `maxDataSize` truncation), the row of a plugin's log
//! line (through [`PluginLines`], the sink plugins are handed), the logs API's reads through
//! the query compiler over `_logs`, and retention (`logs.maxDays`). The rows themselves live in
//! `store::logs`; HTTP framing stays in `api/`.

use crate::plugins::{LogLevel, LogLine, LogSink};
use crate::query::{Query, QueryError, RequestInfo, Select};
use crate::schema::define::build;
use crate::schema::ids::Ascending;
use crate::schema::{Collection, Schema};
use crate::settings;
use crate::store::Store;
use crate::store::logs::{LogRow, NewLog};
use serde_json::{Map, Value, json};
use std::sync::{Arc, LazyLock};

/// PocketBase's cap on a message (bytes) and its `data` size when `maxDataSize` is 0.
const MESSAGE_MAX: usize = 8000;
const DATA_MAX_DEFAULT: usize = 16 << 10;

/// Go's slog levels as PocketBase stores them (trace is slog's usual `LevelDebug - 4`).
const LEVEL_TRACE: i64 = -8;
const LEVEL_DEBUG: i64 = -4;
const LEVEL_INFO: i64 = 0;
const LEVEL_WARN: i64 = 4;
const LEVEL_ERROR: i64 = 8;

/// What the HTTP layer knows of a finished request.
pub(crate) struct RequestFacts {
    pub method: String,
    /// The request URI as sent (path and query).
    pub uri: String,
    pub status: u16,
    pub exec_ms: f64,
    pub referer: String,
    pub user_agent: String,
    /// The caller's collection name and record id (None for guests).
    pub auth: Option<(String, String)>,
    pub user_ip: String,
    pub remote_ip: String,
    /// A refused request's public message and its details (validation messages, or null).
    pub error: Option<(String, Value)>,
}

/// A row waiting for the log thread: what happened, when, its level and the `data` cap it was
/// logged under. The row is built there ([`row`]), off the request's (or plugin call's) path.
pub(crate) struct Entry {
    what: What,
    created: chrono::DateTime<chrono::Utc>,
    level: i64,
    data_max: usize,
}

#[allow(
    clippy::large_enum_variant,
    reason = "requests are nearly every entry: boxing their facts would cost each an allocation"
)]
enum What {
    /// A finished request, with the settings that decide its row's members.
    Request {
        facts: RequestFacts,
        log_ip: bool,
        log_auth_id: bool,
    },
    /// A plugin's log line.
    Line(LogLine),
}

/// Whether a request is logged at all under these settings (nothing is while `maxDays` is 0),
/// decided before anything is gathered for it.
pub(crate) fn enabled(s: &settings::Logs) -> bool {
    s.max_days > 0
}

/// Queue the row of a finished request, unless its level is below `logs.minLevel`. The request
/// pays for a clock read and a queue push; the row is built on the log thread.
pub(crate) fn record(store: &Store, s: &settings::Logs, facts: RequestFacts) {
    if let Some(e) = request_entry(s, facts) {
        store.logs().push(e);
    }
}

/// A finished request's entry, stamped now; None below `logs.minLevel`.
pub(crate) fn request_entry(s: &settings::Logs, facts: RequestFacts) -> Option<Entry> {
    let level = if facts.error.is_some() {
        LEVEL_ERROR
    } else {
        LEVEL_INFO
    };
    if level < s.min_level {
        return None;
    }
    Some(Entry {
        what: What::Request {
            facts,
            log_ip: s.log_ip,
            log_auth_id: s.log_auth_id,
        },
        created: chrono::Utc::now(),
        level,
        data_max: data_max(s),
    })
}

/// `maxDataSize` in bytes (0 means PocketBase's default).
fn data_max(s: &settings::Logs) -> usize {
    usize::try_from(s.max_data_size)
        .ok()
        .filter(|&m| m > 0)
        .unwrap_or(DATA_MAX_DEFAULT)
}

/// Plugins' log lines into `_logs`, under the same settings as requests (nothing while
/// `maxDays` is 0, nothing below `minLevel`): handed to plugins at wiring.
pub(crate) struct PluginLines {
    pub store: Arc<Store>,
    pub settings: Arc<settings::Live>,
}

impl LogSink for PluginLines {
    /// Runs on the plugin's call: a settings look, a clock read and a queue push, as a request
    /// pays. The strings are cut to what a row can keep, so a chatty plugin cannot fill the
    /// queue with more than the rows will hold.
    fn line(&self, mut line: LogLine) {
        let s = self.settings.peek();
        if !enabled(&s.logs) {
            return;
        }
        let level = match line.level {
            LogLevel::Trace => LEVEL_TRACE,
            LogLevel::Debug => LEVEL_DEBUG,
            LogLevel::Info => LEVEL_INFO,
            LogLevel::Warn => LEVEL_WARN,
            LogLevel::Error => LEVEL_ERROR,
        };
        if level < s.logs.min_level {
            return;
        }
        let data_max = data_max(&s.logs);
        truncate_bytes(&mut line.message, MESSAGE_MAX);
        for (k, v) in &mut line.fields {
            truncate_bytes(k, data_max);
            truncate_bytes(v, data_max);
        }
        self.store.logs().push(Entry {
            what: What::Line(line),
            created: chrono::Utc::now(),
            level,
            data_max,
        });
    }
}

/// Cut `s` to at most `n` bytes at a character boundary.
fn truncate_bytes(s: &mut String, n: usize) {
    let keep = cut_bytes(s, n).len();
    s.truncate(keep);
}

/// The `_logs` row of a queued entry, as PocketBase writes it: an id in its format (from
/// `ids`, ascending), `data` with its keys in Go's (sorted) map order cut at `maxDataSize`.
pub(crate) fn row(e: Entry, ids: &mut Ascending) -> NewLog {
    let (mut message, text, plugin) = match e.what {
        What::Request {
            facts,
            log_ip,
            log_auth_id,
        } => {
            let (message, text) = request_row(&facts, log_ip, log_auth_id);
            (message, text, None)
        }
        What::Line(line) => line_row(line),
    };
    let data = if text.len() > e.data_max {
        let mut cut = truncated(&text, e.data_max);
        // A cut line still names its plugin, so `data.plugin` finds every one of its rows.
        if let Some(p) = plugin {
            cut.insert("plugin".into(), Value::String(p));
        }
        serde_json::to_string(&cut).unwrap_or_else(|_| "{}".into())
    } else {
        text
    };
    if message.len() > MESSAGE_MAX {
        message = cut_bytes(&message, MESSAGE_MAX).to_owned();
    }
    NewLog {
        id: ids.next(e.created.timestamp_millis()),
        created: crate::schema::ids::format_time(e.created),
        level: e.level,
        message,
        data,
    }
}

/// A request's message (`METHOD unescaped-uri`) and `data` text.
fn request_row(f: &RequestFacts, log_ip: bool, log_auth_id: bool) -> (String, String) {
    let upper = f.method.to_uppercase();
    let method = cut_chars(&upper, 50);
    let uri = cut_chars(&f.uri, 3000);
    let mut data = Members::default();
    match &f.auth {
        Some((collection, id)) => {
            data.put("auth", collection.as_str());
            if log_auth_id {
                data.put("authId", id.as_str());
            }
        }
        None => data.put("auth", ""),
    }
    if let Some((message, details)) = &f.error {
        data.put("details", details);
        data.put("error", message.as_str());
    }
    data.put("execTime", &f.exec_ms);
    data.put("method", method);
    data.put("referer", cut_chars(&f.referer, 2000));
    if log_ip {
        data.put("remoteIP", f.remote_ip.as_str());
    }
    data.put("status", &f.status);
    data.put("type", "request");
    data.put("url", uri);
    data.put("userAgent", cut_chars(&f.user_agent, 2000));
    if log_ip {
        data.put("userIP", f.user_ip.as_str());
    }
    let message = match path_unescape(uri) {
        Some(u) => format!("{method} {u}"),
        None => format!("{method} {uri}"),
    };
    (message, data.finish())
}

/// A plugin line's message and `data` text: its fields as PocketBase stores a JS hook's
/// `$app.logger().info(msg, "k", v)` attributes (a sorted object, a repeated key's last value),
/// plus `plugin`, the plugin's name, which a field of that name does not override. The name
/// comes back too, for a cut `data`.
fn line_row(line: LogLine) -> (String, String, Option<String>) {
    let mut data: std::collections::BTreeMap<&str, &str> = line
        .fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    data.insert("plugin", &line.plugin);
    let text = serde_json::to_string(&data).unwrap_or_else(|_| "{}".into());
    (line.message, text, Some(line.plugin))
}

/// A JSON object written member by member (the caller keeps the keys in order; they need no
/// escaping), as serde_json writes the same values.
#[derive(Default)]
struct Members(Vec<u8>);

impl Members {
    fn put(&mut self, key: &str, value: &(impl serde::Serialize + ?Sized)) {
        self.0.push(if self.0.is_empty() { b'{' } else { b',' });
        self.0.push(b'"');
        self.0.extend_from_slice(key.as_bytes());
        self.0.extend_from_slice(b"\":");
        if serde_json::to_writer(&mut self.0, value).is_err() {
            self.0.extend_from_slice(b"null");
        }
    }

    fn finish(mut self) -> String {
        self.0.push(b'}');
        String::from_utf8(self.0).unwrap_or_else(|_| "{}".into())
    }
}

/// At most `n` characters of `s`.
fn cut_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// At most `n` bytes of `s`, cut at a character boundary.
fn cut_bytes(s: &str, n: usize) -> &str {
    let mut end = n.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Go's `url.PathUnescape`: `%XX` decoded (None on a bad escape or invalid UTF-8).
fn path_unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// PocketBase's cut of a `data` object past `max` bytes: the members that read whole from the
/// first `max` bytes (a string member cut short keeps its decoded characters), plus
/// `"__pb_truncated__": true`; sorted, as it is written.
fn truncated(text: &str, max: usize) -> std::collections::BTreeMap<String, Value> {
    let head = cut_bytes(text, max);
    let mut out = Map::new();
    // Walk the top-level members with a streaming reader over the prefix.
    let mut rest = head.strip_prefix('{').unwrap_or("");
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        let Some((key, after)) = read_string(rest) else {
            break;
        };
        let Some(after) = after.strip_prefix(':') else {
            break;
        };
        if after.starts_with('"') {
            match read_string(after) {
                Some((value, next)) => {
                    out.insert(key, json!(value));
                    rest = next;
                    continue;
                }
                None => {
                    out.insert(key, json!(partial_string(after)));
                    break;
                }
            }
        }
        let mut de = serde_json::Deserializer::from_str(after).into_iter::<Value>();
        match de.next() {
            Some(Ok(v)) if de.byte_offset() < after.len() => {
                let used = de.byte_offset();
                out.insert(key, v);
                rest = &after[used..];
            }
            _ => break,
        }
    }
    out.insert("__pb_truncated__".into(), json!(true));
    out.into_iter().collect()
}

/// A whole JSON string at the start of `s` and what follows it.
fn read_string(s: &str) -> Option<(String, &str)> {
    if !s.starts_with('"') {
        return None;
    }
    let mut de = serde_json::Deserializer::from_str(s).into_iter::<String>();
    match de.next() {
        Some(Ok(v)) => {
            let used = de.byte_offset();
            Some((v, &s[used..]))
        }
        _ => None,
    }
}

/// The characters of a JSON string cut short (an escape cut in the middle dropped).
fn partial_string(s: &str) -> String {
    let body = &s[1..];
    for end in (0..=body.len()).rev() {
        if !body.is_char_boundary(end) {
            continue;
        }
        if let Ok(v) = serde_json::from_str::<String>(&format!("\"{}\"", &body[..end])) {
            return v;
        }
    }
    String::new()
}

// ---------------------------------------------------------------------------------------------
// the logs API's reads

/// What filters and sorts over `_logs` see: `id`, `created`, `level`, `message`, `data` (and
/// `data.*` paths), as PocketBase's logs resolver offers them.
static LOGS_COLLECTION: LazyLock<Arc<Collection>> = LazyLock::new(|| {
    // Built under another name: a collection may not be named after an internal table.
    let def = json!({"name": "logs", "fields": [
        {"name": "created", "type": "text"}, {"name": "level", "type": "number"},
        {"name": "message", "type": "text"}, {"name": "data", "type": "json"}]});
    let mut c = build(&def, None, &Schema::default()).expect("static definition");
    c.name = "_logs".into();
    Arc::new(c)
});

/// A log row as the API answers it.
pub(crate) fn row_json(r: &LogRow) -> Value {
    let data: Value = serde_json::from_str(&r.data).unwrap_or_else(|_| json!({}));
    json!({"id": r.id, "created": r.created, "data": data, "message": r.message, "level": r.level})
}

/// The statement of a logs list or stats: the superuser's filter and sort over `_logs`.
pub(crate) fn select(filter: Option<&str>, sort: Option<&str>) -> Result<Select, QueryError> {
    let schema = Schema::new(vec![(**LOGS_COLLECTION).clone()]);
    let info = RequestInfo {
        is_superuser: true,
        ..RequestInfo::default()
    };
    let mut q = Query::new(&schema, &LOGS_COLLECTION, &info);
    if let Some(f) = filter.filter(|f| !f.is_empty()) {
        q.filter(f)?;
    }
    if let Some(s) = sort.filter(|s| !s.is_empty()) {
        q.sort(s)?;
    }
    Ok(q.finish())
}

/// A page of rows and (unless skipped) the total.
pub(crate) async fn page(
    store: Arc<Store>,
    sel: Select,
    (page, per_page): (i64, i64),
    skip_total: bool,
) -> crate::store::Result<(Vec<LogRow>, i64)> {
    blocking(move || {
        let rows = store.logs().list(&sel, per_page, (page - 1) * per_page)?;
        let total = if skip_total {
            -1
        } else {
            store.logs().count(&sel)?
        };
        Ok((rows, total))
    })
    .await
}

pub(crate) async fn one(store: Arc<Store>, id: String) -> crate::store::Result<Option<LogRow>> {
    blocking(move || store.logs().get(&id)).await
}

/// Hourly counts, `[{date, total}]` with dates in the stored form.
pub(crate) async fn stats(store: Arc<Store>, sel: Select) -> crate::store::Result<Value> {
    let buckets = blocking(move || store.logs().hourly(&sel)).await?;
    Ok(Value::Array(
        buckets
            .into_iter()
            .map(|(date, total)| json!({"date": format!("{date}.000Z"), "total": total}))
            .collect(),
    ))
}

pub(crate) async fn delete_all(store: Arc<Store>) -> crate::store::Result<()> {
    blocking(move || store.logs().delete_all()).await
}

/// Settings changed: a raised `minLevel` drops the stored rows below it.
pub(crate) async fn settings_changed(
    store: Arc<Store>,
    old: &settings::Logs,
    new: &settings::Logs,
) {
    if new.min_level > old.min_level {
        let level = new.min_level;
        if let Err(e) = blocking(move || store.logs().delete_below(level)).await {
            tracing::warn!(error = %e, "old log rows below the new minLevel not deleted");
        }
    }
}

/// `logs.maxDays`: delete the rows older than that (PocketBase's `__pbLogsCleanup__`).
pub(crate) async fn cleanup(store: Arc<Store>, max_days: i64) -> crate::store::Result<usize> {
    let cutoff = crate::schema::ids::format_time(
        chrono::Utc::now() - chrono::Duration::days(max_days.max(0)),
    );
    blocking(move || store.logs().delete_before(&cutoff)).await
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::store::Result<T> + Send + 'static,
) -> crate::store::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| crate::store::StoreError::WriterGone)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_past_the_limit_keeps_whole_members_and_is_flagged() {
        let text = r#"{"auth":"","execTime":0.5,"method":"GET","referer":"","userAgent":"uuuuuuuuuuuuuuuu"}"#;
        let cut: Value = json!(truncated(text, 60));
        assert_eq!(
            cut,
            json!({"__pb_truncated__": true, "auth": "", "execTime": 0.5, "method": "GET", "referer": ""})
        );
        // A string cut short keeps its decoded characters.
        let cut: Value = json!(truncated(text, 80));
        let start = text.find("\"userAgent\":\"").unwrap() + "\"userAgent\":\"".len();
        assert_eq!(cut["userAgent"], json!("u".repeat(80 - start)));
        // A number cut short is dropped.
        let cut: Value = json!(truncated(r#"{"a":"x","n":12345}"#, 16));
        assert_eq!(cut, json!({"__pb_truncated__": true, "a": "x"}));
    }

    fn facts(error: Option<(String, Value)>, auth: bool) -> RequestFacts {
        RequestFacts {
            method: "patch".into(),
            uri: "/api/x%20y?q=\"é\"\\".into(),
            status: 400,
            exec_ms: 1.25,
            referer: "http://a/\u{1}".into(),
            user_agent: "curl/8 <ü>".into(),
            auth: auth.then(|| ("users".into(), "abc".into())),
            user_ip: "10.0.0.1".into(),
            remote_ip: "127.0.0.1".into(),
            error,
        }
    }

    fn entry(facts: RequestFacts, log_ip: bool, data_max: usize) -> Entry {
        Entry {
            what: What::Request {
                facts,
                log_ip,
                log_auth_id: true,
            },
            created: chrono::Utc::now(),
            level: 8,
            data_max,
        }
    }

    #[test]
    fn data_is_the_sorted_object_serde_json_writes() {
        let details =
            json!({"title": {"code": "validation_required", "message": "Cannot be blank."}});
        for error in [
            None,
            Some(("Bad.".to_owned(), details)),
            Some(("x".into(), Value::Null)),
        ] {
            for (auth, log_ip) in [(false, false), (true, true), (true, false)] {
                let f = facts(error.clone(), auth);
                let mut want = std::collections::BTreeMap::<&str, Value>::new();
                want.insert("type", json!("request"));
                want.insert("execTime", json!(f.exec_ms));
                if let Some((m, d)) = &f.error {
                    want.insert("error", json!(m));
                    want.insert("details", d.clone());
                }
                want.insert("url", json!(f.uri));
                want.insert("method", json!("PATCH"));
                want.insert("status", json!(f.status));
                want.insert("referer", json!(f.referer));
                want.insert("userAgent", json!(f.user_agent));
                want.insert("auth", json!(if auth { "users" } else { "" }));
                if auth {
                    want.insert("authId", json!("abc"));
                }
                if log_ip {
                    want.insert("userIP", json!(f.user_ip));
                    want.insert("remoteIP", json!(f.remote_ip));
                }
                let r = row(entry(f, log_ip, 16 << 10), &mut Ascending::default());
                assert_eq!(r.data, serde_json::to_string(&want).unwrap());
                assert_eq!(r.message, "PATCH /api/x y?q=\"é\"\\");
                assert_eq!(r.level, 8);
                assert!(
                    r.id.len() == 15
                        && r.id
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                );
            }
        }
        // Past maxDataSize the object is cut and flagged.
        let cut: Value = serde_json::from_str(
            &row(
                entry(facts(None, true), true, 40),
                &mut Ascending::default(),
            )
            .data,
        )
        .unwrap();
        assert_eq!(cut["__pb_truncated__"], json!(true));
    }

    #[test]
    fn a_plugin_line_is_a_sorted_object_of_its_fields_and_its_plugin() {
        let line = |fields: &[(&str, &str)]| Entry {
            what: What::Line(LogLine {
                plugin: "posts_api".into(),
                level: LogLevel::Warn,
                message: "slow \"query\"".into(),
                fields: fields
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            }),
            created: chrono::Utc::now(),
            level: LEVEL_WARN,
            data_max: 16 << 10,
        };
        let r = row(
            line(&[("z", "1"), ("a\"b", "<x>"), ("z", "2"), ("plugin", "spoof")]),
            &mut Ascending::default(),
        );
        assert_eq!(r.data, r#"{"a\"b":"<x>","plugin":"posts_api","z":"2"}"#);
        assert_eq!((r.level, r.message.as_str()), (4, "slow \"query\""));
        assert_eq!(
            row(line(&[]), &mut Ascending::default()).data,
            r#"{"plugin":"posts_api"}"#
        );
        let mut cut = line(&[("big", &"x".repeat(100))]);
        cut.data_max = 40;
        let cut: Value = serde_json::from_str(&row(cut, &mut Ascending::default()).data).unwrap();
        assert_eq!(
            cut,
            json!({"__pb_truncated__": true, "big": "x".repeat(32), "plugin": "posts_api"})
        );
    }

    #[test]
    fn messages_are_unescaped_as_go_does() {
        assert_eq!(
            path_unescape("/a%20b?x=%C3%A9").as_deref(),
            Some("/a b?x=é")
        );
        assert_eq!(path_unescape("/a%zz"), None);
        assert_eq!(path_unescape("/a%"), None);
        assert_eq!(cut_chars("héllo", 2), "hé");
        assert_eq!(cut_bytes("héllo", 2), "h");
    }

    #[test]
    fn filters_and_sorts_over_logs_compile() {
        assert!(select(Some("data.status = 400 && level > 0"), Some("-@rowid")).is_ok());
        assert!(select(Some("nope = 1"), None).is_err());
        assert!(select(Some("bad(("), None).is_err());
    }
}
