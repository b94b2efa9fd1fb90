//! Request logs as PocketBase keeps them: the row a request leaves (`level`, `message`, the
//! `data` object under `settings.logs`, `maxDataSize` truncation), the logs API's reads through
//! the query compiler over `_logs`, and retention (`logs.maxDays`). The rows themselves live in
//! `store::logs`; HTTP framing stays in `api/`.

use crate::query::{Query, QueryError, RequestInfo, Select};
use crate::schema::define::build;
use crate::schema::{Collection, Schema};
use crate::settings;
use crate::store::Store;
use crate::store::logs::{LogRow, NewLog};
use serde_json::{Map, Value, json};
use std::sync::{Arc, LazyLock};

/// PocketBase's cap on a message (bytes) and its `data` size when `maxDataSize` is 0.
const MESSAGE_MAX: usize = 8000;
const DATA_MAX_DEFAULT: usize = 16 << 10;

/// Go's slog levels as PocketBase stores them.
const LEVEL_INFO: i64 = 0;
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

/// Whether a request is logged at all under these settings (nothing is while `maxDays` is 0),
/// decided before anything is gathered for it.
pub(crate) fn enabled(s: &settings::Logs) -> bool {
    s.max_days > 0
}

/// Queue the row of a finished request, unless its level is below `logs.minLevel`.
pub(crate) fn record(store: &Store, s: &settings::Logs, f: RequestFacts) {
    let level = if f.error.is_some() {
        LEVEL_ERROR
    } else {
        LEVEL_INFO
    };
    if level < s.min_level {
        return;
    }
    // Keys in Go's (sorted) map order.
    let mut data = std::collections::BTreeMap::<&str, Value>::new();
    let cut = |s: &str, n: usize| cut_chars(s, n).to_owned();
    data.insert("type", json!("request"));
    data.insert("execTime", json!(f.exec_ms));
    if let Some((message, details)) = f.error {
        data.insert("error", json!(message));
        data.insert("details", details);
    }
    let method = cut(&f.method.to_uppercase(), 50);
    let uri = cut(&f.uri, 3000);
    data.insert("url", json!(uri));
    data.insert("method", json!(method));
    data.insert("status", json!(f.status));
    data.insert("referer", json!(cut(&f.referer, 2000)));
    data.insert("userAgent", json!(cut(&f.user_agent, 2000)));
    match &f.auth {
        Some((collection, id)) => {
            data.insert("auth", json!(collection));
            if s.log_auth_id {
                data.insert("authId", json!(id));
            }
        }
        None => {
            data.insert("auth", json!(""));
        }
    }
    if s.log_ip {
        data.insert("userIP", json!(f.user_ip));
        data.insert("remoteIP", json!(f.remote_ip));
    }
    let text = serde_json::to_string(&data).unwrap_or_else(|_| "{}".into());
    let max = usize::try_from(s.max_data_size)
        .ok()
        .filter(|&m| m > 0)
        .unwrap_or(DATA_MAX_DEFAULT);
    let data = if text.len() > max {
        truncated(&text, max)
    } else {
        text
    };
    let mut message = format!("{method} {}", path_unescape(&uri).unwrap_or(uri.clone()));
    if message.len() > MESSAGE_MAX {
        message = cut_bytes(&message, MESSAGE_MAX).to_owned();
    }
    store.logs().push(NewLog {
        id: crate::schema::ids::lower_alnum(15),
        created: crate::schema::ids::now(),
        level,
        message,
        data,
    });
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
/// `"__pb_truncated__": true`.
fn truncated(text: &str, max: usize) -> String {
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
    let sorted: std::collections::BTreeMap<String, Value> = out.into_iter().collect();
    serde_json::to_string(&sorted).unwrap_or_else(|_| "{}".into())
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
        let cut: Value = serde_json::from_str(&truncated(text, 60)).unwrap();
        assert_eq!(
            cut,
            json!({"__pb_truncated__": true, "auth": "", "execTime": 0.5, "method": "GET", "referer": ""})
        );
        // A string cut short keeps its decoded characters.
        let cut: Value = serde_json::from_str(&truncated(text, 80)).unwrap();
        let start = text.find("\"userAgent\":\"").unwrap() + "\"userAgent\":\"".len();
        assert_eq!(cut["userAgent"], json!("u".repeat(80 - start)));
        // A number cut short is dropped.
        let cut: Value = serde_json::from_str(&truncated(r#"{"a":"x","n":12345}"#, 16)).unwrap();
        assert_eq!(cut, json!({"__pb_truncated__": true, "a": "x"}));
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
