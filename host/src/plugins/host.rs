//! What a plugin may import: the call context, db, log, config, kv and http. Every entry point
//! checks the grants pb.toml gave the plugin and the kind of call it is in.

use super::bindings::ferrobase::plugin::{config, context, db, http, kv, log, types};
use super::convert::{FieldValue, PluginRecord, fields_to_json};
use super::engine::Runtime;
use super::instance::{CallKind, Settings};
use super::{CallFacts, DbFailure};
use crate::store::raw::SqlValue;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use wasmtime::component::{HasSelf, Linker, Resource, ResourceTable};
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// The call context a guest borrows: facts of the request and the deadline.
pub struct CallCtx {
    pub id: u64,
    pub facts: Arc<CallFacts>,
    pub deadline: Instant,
}

/// A `db.execute` from an in-transaction hook, served by the writer on the write's connection.
pub(crate) struct TxOp {
    pub sql: String,
    pub params: Vec<SqlValue>,
    pub reply: oneshot::Sender<Result<u64, String>>,
}

/// What every instance of one plugin version shares.
pub(crate) struct PluginEnv {
    pub name: String,
    pub settings: Settings,
    pub rt: Arc<Runtime>,
}

impl PluginEnv {
    pub(crate) fn new(name: String, settings: Settings, rt: Arc<Runtime>) -> Self {
        Self { name, settings, rt }
    }
    fn granted(&self, g: &str) -> bool {
        self.settings.grants.iter().any(|x| x == g)
    }
}

/// The data of one instance's store.
pub(crate) struct HostState {
    pub env: Arc<PluginEnv>,
    pub table: ResourceTable,
    pub limits: MemoryCap,
    wasi: WasiCtx,
    pub deadline: Instant,
    kind: CallKind,
    facts: Arc<CallFacts>,
    tx: Option<mpsc::UnboundedSender<TxOp>>,
}

/// A wall clock stopped at the Unix epoch: what a plugin without the "clock" grant sees.
struct FrozenClock;
impl wasmtime_wasi::HostWallClock for FrozenClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}
impl wasmtime_wasi::HostMonotonicClock for FrozenClock {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl HostState {
    pub(crate) fn new(env: Arc<PluginEnv>) -> Self {
        // No environment, arguments, preopened directories, sockets or name lookups; stdio
        // goes nowhere (plugins log through `log`). Clocks only when granted.
        let mut b = WasiCtxBuilder::new();
        b.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if !env.granted("clock") {
            b.wall_clock(FrozenClock).monotonic_clock(FrozenClock);
        }
        let limits = MemoryCap {
            inner: StoreLimitsBuilder::new()
                .memory_size(env.settings.memory)
                .instances(64)
                .tables(64)
                .memories(8)
                .trap_on_grow_failure(true)
                .build(),
            reached: false,
        };
        Self {
            env,
            table: ResourceTable::new(),
            limits,
            wasi: b.build(),
            deadline: Instant::now(),
            kind: CallKind::Describe,
            facts: Arc::new(CallFacts::default()),
            tx: None,
        }
    }

    pub(crate) fn begin(
        &mut self,
        kind: CallKind,
        facts: Arc<CallFacts>,
        deadline: Instant,
        _id: u64,
        tx: Option<mpsc::UnboundedSender<TxOp>>,
    ) {
        self.kind = kind;
        self.limits.reached = false;
        self.facts = facts;
        self.deadline = deadline;
        self.tx = tx;
    }

    /// Forget the call (its facts and its channel to the writer) before the instance is pooled.
    pub(crate) fn end(&mut self) {
        self.tx = None;
        self.facts = Arc::new(CallFacts::default());
    }

    fn nested_facts(&self) -> CallFacts {
        let mut f = (*self.facts).clone();
        f.depth = f.depth.saturating_add(1);
        f
    }
}

/// The store's limits, remembering whether the memory cap is what stopped a call (so a
/// failure is told apart by this flag, not by the text of wasmtime's message).
pub(crate) struct MemoryCap {
    inner: StoreLimits,
    /// A memory grow past the cap was refused during the current call.
    pub reached: bool,
}

impl ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let r = self.inner.memory_growing(current, desired, maximum);
        if !matches!(r, Ok(true)) {
            self.reached = true;
        }
        r
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.inner.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Link the host API: WASI (locked down in `HostState::new`) and `ferrobase:plugin`.
pub(crate) fn link(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    super::bindings::Plugin::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)?;
    Ok(())
}

impl types::Host for HostState {}
impl context::Host for HostState {}

impl context::HostCallContext for HostState {
    async fn call_id(&mut self, c: Resource<CallCtx>) -> wasmtime::Result<u64> {
        Ok(self.table.get(&c)?.id)
    }
    async fn auth(&mut self, c: Resource<CallCtx>) -> wasmtime::Result<Option<types::Principal>> {
        Ok(self.table.get(&c)?.facts.principal.as_ref().map(Into::into))
    }
    async fn method(&mut self, c: Resource<CallCtx>) -> wasmtime::Result<Option<String>> {
        Ok(self.table.get(&c)?.facts.method.clone())
    }
    async fn path(&mut self, c: Resource<CallCtx>) -> wasmtime::Result<Option<String>> {
        Ok(self.table.get(&c)?.facts.path.clone())
    }
    async fn header(
        &mut self,
        c: Resource<CallCtx>,
        name: String,
    ) -> wasmtime::Result<Option<String>> {
        Ok(self
            .table
            .get(&c)?
            .facts
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(&name))
            .map(|(_, v)| v.clone()))
    }
    async fn remote_ip(&mut self, c: Resource<CallCtx>) -> wasmtime::Result<Option<String>> {
        Ok(self.table.get(&c)?.facts.remote_ip.clone())
    }
    async fn remaining_ms(&mut self, c: Resource<CallCtx>) -> wasmtime::Result<u32> {
        let d = self.table.get(&c)?.deadline;
        Ok(
            u32::try_from(d.saturating_duration_since(Instant::now()).as_millis())
                .unwrap_or(u32::MAX),
        )
    }
    async fn drop(&mut self, _c: Resource<CallCtx>) -> wasmtime::Result<()> {
        // The host owns every context; the guest only ever borrows one.
        Ok(())
    }
}

fn to_sql(v: types::Value) -> SqlValue {
    match v {
        types::Value::Null => SqlValue::Null,
        types::Value::Boolean(b) => SqlValue::Integer(i64::from(b)),
        types::Value::Integer(i) => SqlValue::Integer(i),
        types::Value::Real(r) => SqlValue::Real(r),
        types::Value::Text(s) | types::Value::Json(s) => SqlValue::Text(s),
        types::Value::Blob(b) => SqlValue::Blob(b),
    }
}

fn from_sql(v: SqlValue) -> types::Value {
    match v {
        SqlValue::Null => types::Value::Null,
        SqlValue::Integer(i) => types::Value::Integer(i),
        SqlValue::Real(r) => types::Value::Real(r),
        SqlValue::Text(s) => types::Value::Text(s),
        SqlValue::Blob(b) => types::Value::Blob(b),
    }
}

fn db_err(f: DbFailure) -> db::DbError {
    match f {
        DbFailure::Denied(s) => db::DbError::Denied(s),
        DbFailure::Invalid(s) => db::DbError::Invalid(s),
        DbFailure::Rejected(r) => db::DbError::Rejected((&r).into()),
        DbFailure::Other(s) => db::DbError::Other(s),
    }
}

fn store_err(e: crate::store::StoreError) -> db::DbError {
    use crate::store::StoreError as E;
    match e {
        E::Denied(s) => db::DbError::Denied(s),
        E::Invalid(s) => db::DbError::Invalid(s),
        E::Sqlite(e) => db::DbError::Invalid(e.to_string()),
        other => db::DbError::Other(other.to_string()),
    }
}

fn out(r: PluginRecord) -> types::RecordData {
    (&r).into()
}

impl HostState {
    fn need(&self, grant: &str) -> Result<(), db::DbError> {
        if self.env.granted(grant) {
            Ok(())
        } else {
            Err(db::DbError::Denied(format!(
                "plugin {} has no {grant:?} grant",
                self.env.name
            )))
        }
    }

    fn services(&self) -> Result<Arc<dyn super::Services>, db::DbError> {
        self.env
            .rt
            .services()
            .ok_or_else(|| db::DbError::Other("the server is still starting".into()))
    }

    /// Record writes go through the REST path: not from before-hooks (outside any write) nor
    /// in-transaction hooks (the writer is busy with this very write), and not too deep.
    fn may_write_records(&self) -> Result<(), db::DbError> {
        self.need("db:write")?;
        match self.kind {
            CallKind::BeforeHook | CallKind::InTransaction | CallKind::Describe => Err(
                db::DbError::Denied("record writes are not allowed in this hook".into()),
            ),
            _ if self.facts.depth >= 3 => Err(db::DbError::Denied(
                "plugin writes nested more than 3 deep".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// Field pairs from a guest as the API's JSON body.
fn json_fields(
    fields: Vec<(String, types::Value)>,
) -> Result<serde_json::Map<String, serde_json::Value>, db::DbError> {
    let fields: Vec<(String, FieldValue)> =
        fields.into_iter().map(|(k, v)| (k, v.into())).collect();
    fields_to_json(&fields).map_err(db::DbError::Invalid)
}

// Each import answers `Ok(result)`: a refusal is the guest's `db-error`, never a trap.
impl db::Host for HostState {
    async fn query(
        &mut self,
        sql: String,
        params: Vec<types::Value>,
    ) -> wasmtime::Result<Result<db::Rows, db::DbError>> {
        let me = &mut *self;
        Ok(async move {
            me.need("db:read")?;
            let params: Vec<SqlValue> = params.into_iter().map(to_sql).collect();
            let (columns, rows) = me
                .env
                .rt
                .store
                .read(move |c| crate::store::raw::query(c, &sql, &params))
                .await
                .map_err(store_err)?;
            Ok(db::Rows {
                columns,
                rows: rows
                    .into_iter()
                    .map(|r| r.into_iter().map(from_sql).collect())
                    .collect(),
            })
        }
        .await)
    }

    async fn execute(
        &mut self,
        sql: String,
        params: Vec<types::Value>,
    ) -> wasmtime::Result<Result<u64, db::DbError>> {
        let me = &mut *self;
        Ok(async move {
            me.need("db:write")?;
            let params: Vec<SqlValue> = params.into_iter().map(to_sql).collect();
            match me.kind {
                CallKind::BeforeHook | CallKind::Describe => Err(db::DbError::Denied(
                    "writes are not allowed before the write (use an in-transaction hook)".into(),
                )),
                CallKind::InTransaction => {
                    let over = || db::DbError::Other("the transaction is over".into());
                    let tx = me.tx.clone().ok_or_else(over)?;
                    let (reply, rx) = oneshot::channel();
                    tx.send(TxOp { sql, params, reply }).map_err(|_| over())?;
                    rx.await.map_err(|_| over())?.map_err(db::DbError::Invalid)
                }
                _ => me
                    .env
                    .rt
                    .store
                    .write(move |c| {
                        c.savepoint(|sp| {
                            crate::store::raw::execute(sp, &sql, &params)
                                .map(crate::store::Keep::Commit)
                        })
                    })
                    .await
                    .map_err(store_err),
            }
        }
        .await)
    }

    async fn get_record(
        &mut self,
        collection: String,
        id: String,
    ) -> wasmtime::Result<Result<Option<types::RecordData>, db::DbError>> {
        let me = &mut *self;
        Ok(async move {
            me.need("db:read")?;
            let r = me.services()?.get_record(&me.facts, collection, id).await;
            r.map(|r| r.map(out)).map_err(db_err)
        }
        .await)
    }

    async fn find_records(
        &mut self,
        collection: String,
        filter: String,
        params: Vec<(String, types::Value)>,
        sort: String,
        limit: u32,
    ) -> wasmtime::Result<Result<Vec<types::RecordData>, db::DbError>> {
        let me = &mut *self;
        Ok(async move {
            me.need("db:read")?;
            let params = json_fields(params)?;
            let r = me
                .services()?
                .find_records(&me.facts, collection, filter, params, sort, limit.min(1000))
                .await;
            r.map(|v| v.into_iter().map(out).collect()).map_err(db_err)
        }
        .await)
    }

    async fn create_record(
        &mut self,
        collection: String,
        fields: Vec<(String, types::Value)>,
    ) -> wasmtime::Result<Result<types::RecordData, db::DbError>> {
        let me = &mut *self;
        Ok(async move {
            me.may_write_records()?;
            let data = json_fields(fields)?;
            let r = me
                .services()?
                .create_record(&me.nested_facts(), collection, data)
                .await;
            r.map(out).map_err(db_err)
        }
        .await)
    }

    async fn update_record(
        &mut self,
        collection: String,
        id: String,
        fields: Vec<(String, types::Value)>,
    ) -> wasmtime::Result<Result<types::RecordData, db::DbError>> {
        let me = &mut *self;
        Ok(async move {
            me.may_write_records()?;
            let data = json_fields(fields)?;
            let r = me
                .services()?
                .update_record(&me.nested_facts(), collection, id, data)
                .await;
            r.map(out).map_err(db_err)
        }
        .await)
    }

    async fn delete_record(
        &mut self,
        collection: String,
        id: String,
    ) -> wasmtime::Result<Result<(), db::DbError>> {
        let me = &mut *self;
        Ok(async move {
            me.may_write_records()?;
            let r = me
                .services()?
                .delete_record(&me.nested_facts(), collection, id)
                .await;
            r.map_err(db_err)
        }
        .await)
    }
}

impl log::Host for HostState {
    async fn write(
        &mut self,
        level: log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let fields: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        let p = &self.env.name;
        match level {
            log::Level::Trace => tracing::trace!(plugin = %p, %fields, "{message}"),
            log::Level::Debug => tracing::debug!(plugin = %p, %fields, "{message}"),
            log::Level::Info => tracing::info!(plugin = %p, %fields, "{message}"),
            log::Level::Warn => tracing::warn!(plugin = %p, %fields, "{message}"),
            log::Level::Error => tracing::error!(plugin = %p, %fields, "{message}"),
        }
        Ok(())
    }
}

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.env.settings.config.get(&key).cloned())
    }
}

impl HostState {
    fn kv(&self) -> wasmtime::Result<&crate::store::kv::Kv> {
        if !self.env.granted("kv") {
            // kv has no error in its signature: a missing grant stops the call.
            wasmtime::bail!("plugin {} has no \"kv\" grant", self.env.name);
        }
        self.env
            .rt
            .store
            .kv()
            .ok_or_else(|| wasmtime::Error::msg("the key/value store is not open"))
    }
}

impl kv::Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(self.kv()?.get(&self.env.name, &key)?)
    }
    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<()> {
        Ok(self.kv()?.set(&self.env.name, &key, &value, ttl_ms)?)
    }
    async fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        Ok(self.kv()?.delete(&self.env.name, &key)?)
    }
    async fn increment(&mut self, key: String, delta: i64) -> wasmtime::Result<i64> {
        Ok(self.kv()?.increment(&self.env.name, &key, delta)?)
    }
}

/// `host:port` of an http(s) URL, with the scheme's default port.
fn authority(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let host_port = rest.split(['/', '?', '#']).next()?;
    let host_port = host_port.rsplit('@').next()?;
    if host_port.is_empty() {
        return None;
    }
    Some(if host_port.contains(':') && !host_port.ends_with(']') {
        host_port.to_ascii_lowercase()
    } else {
        format!("{}:{default}", host_port.to_ascii_lowercase())
    })
}

impl http::Host for HostState {
    async fn fetch(
        &mut self,
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> wasmtime::Result<Result<http::Response, String>> {
        if !self.env.granted("http") {
            return Ok(Err(format!(
                "plugin {} has no \"http\" grant",
                self.env.name
            )));
        }
        let Some(auth) = authority(&url) else {
            return Ok(Err(format!("not an http(s) url: {url}")));
        };
        if !self
            .env
            .settings
            .http_allow
            .iter()
            .any(|a| a.eq_ignore_ascii_case(&auth))
        {
            return Ok(Err(format!("{auth} is not in http_allow")));
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        let r = tokio::task::spawn_blocking(move || {
            fetch_blocking(&method, &url, &headers, body, left)
        })
        .await
        .map_err(|e| wasmtime::Error::msg(e.to_string()))?;
        Ok(r)
    }
}

fn fetch_blocking(
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: Vec<u8>,
    timeout: Duration,
) -> Result<http::Response, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout.max(Duration::from_millis(1))))
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let mut req = ureq::http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let req = req.body(body).map_err(|e| e.to_string())?;
    let mut res = agent.run(req).map_err(|e| e.to_string())?;
    let status = res.status().as_u16();
    let headers = res
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let body = res
        .body_mut()
        .with_config()
        .limit(16 << 20)
        .read_to_vec()
        .map_err(|e| e.to_string())?;
    Ok(http::Response {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::authority;

    #[test]
    fn authorities_carry_the_default_port() {
        assert_eq!(
            authority("http://127.0.0.1:9/x").as_deref(),
            Some("127.0.0.1:9")
        );
        assert_eq!(
            authority("https://API.example.com/v1?q").as_deref(),
            Some("api.example.com:443")
        );
        assert_eq!(
            authority("http://u:p@h.example/").as_deref(),
            Some("h.example:80")
        );
        assert_eq!(authority("file:///etc/passwd"), None);
        assert_eq!(authority("http://"), None);
    }
}
