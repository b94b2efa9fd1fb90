//! What a plugin may import: the call context, db, log, config, kv and http. Every entry point
//! checks the grants the plugin holds now and the kind of call it is in; every refusal is
//! kept as the plugin's last error, so an operator sees what a plugin tried.

use super::bindings::ferrobase::plugin::{config, context, db, http, kv, log, types};
use super::convert::{FieldValue, PluginRecord, fields_to_json};
use super::engine::Runtime;
use super::instance::{CallKind, CallStats, Settings};
use super::sandbox::{self, Target};
use super::{CallFacts, DbFailure};
use crate::store::StoreError;
use crate::store::raw::{Budget, Policy, Rows as SqlRows, SqlValue};
use arc_swap::ArcSwap;
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

/// A raw statement from an in-transaction hook, served by the writer on the write's own
/// connection: `query` sees the pending write, `execute` joins it.
pub(crate) struct TxOp {
    pub write: bool,
    pub sql: String,
    pub params: Vec<SqlValue>,
    pub policy: Arc<Policy>,
    pub budget: Budget,
    pub reply: oneshot::Sender<Result<TxAnswer, StoreError>>,
}

/// What the writer answers a [`TxOp`].
pub(crate) enum TxAnswer {
    Rows(SqlRows),
    Changed(u64),
}

/// What a plugin may use right now: its grants and `http_allow`. Swapped for a narrower set
/// when pb.toml revokes something, so a call already running is checked against the new set
/// at its next host call.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Live {
    pub grants: Vec<String>,
    pub http_allow: Vec<String>,
}

/// The grant that opens one hidden field to a plugin.
pub(crate) const HIDDEN_PREFIX: &str = "db:hidden:";

impl Live {
    pub(crate) fn has(&self, grant: &str) -> bool {
        self.grants.iter().any(|g| g == grant)
    }

    /// Whether a `db:hidden:<collection>.<field>` grant names this field (both compared
    /// case-insensitively, as SQLite and PocketBase look names up).
    pub(crate) fn hidden(&self, collection: &str, field: &str) -> bool {
        self.grants.iter().any(|g| {
            g.strip_prefix(HIDDEN_PREFIX)
                .and_then(|rest| rest.split_once('.'))
                .is_some_and(|(c, f)| {
                    c.eq_ignore_ascii_case(collection) && f.eq_ignore_ascii_case(field)
                })
        })
    }

    /// What both allow: never wider than either.
    pub(crate) fn narrowed(&self, next: &Live) -> Live {
        let keep = |a: &[String], b: &[String]| -> Vec<String> {
            a.iter().filter(|x| b.contains(x)).cloned().collect()
        };
        Live {
            grants: keep(&self.grants, &next.grants),
            http_allow: keep(&self.http_allow, &next.http_allow),
        }
    }
}

/// What every instance of one plugin version shares.
pub(crate) struct PluginEnv {
    pub name: String,
    pub settings: Settings,
    pub rt: Arc<Runtime>,
    live: ArcSwap<Live>,
    pub stats: Arc<CallStats>,
    /// The raw SQL policy last built: a new one is built only when the schema or the grants
    /// change.
    policy: std::sync::Mutex<Option<CachedPolicy>>,
}

/// A raw SQL policy and the schema and grants it was built from.
struct CachedPolicy {
    schema: Arc<crate::schema::Schema>,
    live: Arc<Live>,
    policy: Arc<Policy>,
}

impl PluginEnv {
    pub(crate) fn new(
        name: String,
        settings: Settings,
        rt: Arc<Runtime>,
        stats: Arc<CallStats>,
    ) -> Self {
        let live = Live {
            grants: settings.grants.clone(),
            http_allow: settings.http_allow.clone(),
        };
        Self {
            name,
            settings,
            rt,
            live: ArcSwap::from_pointee(live),
            stats,
            policy: std::sync::Mutex::new(None),
        }
    }

    /// The raw SQL policy for `schema` and `live`, built once per pair.
    fn policy_for(&self, schema: &Arc<crate::schema::Schema>, live: &Arc<Live>) -> Arc<Policy> {
        if let Ok(cached) = self.policy.lock()
            && let Some(c) = cached.as_ref()
            && Arc::ptr_eq(&c.schema, schema)
            && Arc::ptr_eq(&c.live, live)
        {
            return Arc::clone(&c.policy);
        }
        let p = Arc::new(Policy::new(schema, |c, f| live.hidden(c, f)));
        if let Ok(mut cached) = self.policy.lock() {
            *cached = Some(CachedPolicy {
                schema: Arc::clone(schema),
                live: Arc::clone(live),
                policy: Arc::clone(&p),
            });
        }
        p
    }

    pub(crate) fn live(&self) -> Arc<Live> {
        self.live.load_full()
    }

    /// Narrow what calls still running on this version may do (pb.toml revoked something).
    pub(crate) fn narrow(&self, next: &Live) {
        let now = self.live.load();
        self.live.store(Arc::new(now.narrowed(next)));
    }

    fn granted(&self, g: &str) -> bool {
        self.live.load().has(g)
    }

    /// Keep a refusal as the plugin's last error (and count it): what the plugin tried is
    /// visible in `/api/plugins`.
    pub(crate) fn refused(&self, what: &str, why: &str) {
        self.stats.refusal(format!("refused {what}: {why}"));
        tracing::info!(plugin = %self.name, call = what, reason = why, "plugin call refused");
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
        // A nested write has its own uploads (none: plugins write no files).
        f.uploads = Vec::new();
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
    async fn uploads(&mut self, c: Resource<CallCtx>) -> wasmtime::Result<Vec<context::Upload>> {
        Ok(self
            .table
            .get(&c)?
            .facts
            .uploads
            .iter()
            .map(|u| context::Upload {
                field: u.field.clone(),
                name: u.name.clone(),
                original_name: u.original.clone(),
                size: u.size,
                content_type: u.content_type.clone(),
            })
            .collect())
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

fn rows(columns: Vec<String>, rows: Vec<Vec<SqlValue>>) -> db::Rows {
    db::Rows {
        columns,
        rows: rows
            .into_iter()
            .map(|r| r.into_iter().map(from_sql).collect())
            .collect(),
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

fn store_err(e: StoreError) -> db::DbError {
    match e {
        StoreError::Denied(s) => db::DbError::Denied(s),
        StoreError::Invalid(s) => db::DbError::Invalid(s),
        StoreError::Sqlite(e) => db::DbError::Invalid(e.to_string()),
        other => db::DbError::Other(other.to_string()),
    }
}

impl HostState {
    /// A refusal for the guest, kept as the plugin's last error too.
    fn refuse<T>(&self, what: &str, e: db::DbError) -> Result<T, db::DbError> {
        if let db::DbError::Denied(why) = &e {
            self.env.refused(what, why);
        }
        Err(e)
    }

    fn need(&self, what: &str, grant: &str) -> Result<(), db::DbError> {
        if self.env.granted(grant) {
            Ok(())
        } else {
            self.refuse(
                what,
                db::DbError::Denied(format!("plugin {} has no {grant:?} grant", self.env.name)),
            )
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
    fn may_write_records(&self, what: &str) -> Result<(), db::DbError> {
        self.need(what, "db:write")?;
        match self.kind {
            CallKind::BeforeHook | CallKind::InTransaction | CallKind::Describe => self.refuse(
                what,
                db::DbError::Denied("record writes are not allowed in this hook".into()),
            ),
            _ if self.facts.depth >= 3 => self.refuse(
                what,
                db::DbError::Denied("plugin writes nested more than 3 deep".into()),
            ),
            _ => Ok(()),
        }
    }

    /// The raw SQL policy for this plugin on the schema the server runs now.
    fn policy(&self) -> Arc<Policy> {
        let live = self.env.live();
        let schema = self.env.rt.store.schema();
        self.env.policy_for(&schema, &live)
    }

    fn budget(&self) -> Budget {
        Budget {
            deadline: self.deadline,
            max_bytes: self.env.settings.memory,
        }
    }

    /// A record as this plugin may see it: hidden fields only with their grant.
    fn out(&self, r: PluginRecord) -> types::RecordData {
        let schema = self.env.rt.store.schema();
        let live = self.env.live();
        (&super::convert::visible(r, &schema, |c, f| live.hidden(c, f))).into()
    }

    /// A raw statement, on the write's own connection in an in-transaction hook, else on a
    /// reader (`query`) or as its own job on the writer (`execute`).
    async fn raw(
        &mut self,
        write: bool,
        sql: String,
        params: Vec<types::Value>,
    ) -> Result<TxAnswer, db::DbError> {
        let what = if write { "db.execute" } else { "db.query" };
        self.need(what, if write { "db:write" } else { "db:read" })?;
        let params: Vec<SqlValue> = params.into_iter().map(to_sql).collect();
        let (policy, budget) = (self.policy(), self.budget());
        let store = &self.env.rt.store;
        let r = match self.kind {
            CallKind::Describe => Err(StoreError::Denied(
                "describe may not use the database".into(),
            )),
            CallKind::BeforeHook if write => Err(StoreError::Denied(
                "writes are not allowed before the write (use an in-transaction hook)".into(),
            )),
            CallKind::InTransaction => {
                let over = || StoreError::Invalid("the transaction is over".into());
                let (reply, rx) = oneshot::channel();
                let op = TxOp {
                    write,
                    sql,
                    params,
                    policy,
                    budget,
                    reply,
                };
                match self.tx.as_ref().map(|tx| tx.send(op)) {
                    Some(Ok(())) => rx.await.unwrap_or_else(|_| Err(over())),
                    _ => Err(over()),
                }
            }
            _ if write => store
                .write(move |c| {
                    c.savepoint(|sp| {
                        crate::store::raw::execute(sp, policy, budget, &sql, &params)
                            .map(crate::store::Keep::Commit)
                    })
                })
                .await
                .map(TxAnswer::Changed),
            _ => store
                .read(move |c| crate::store::raw::query(c, policy, budget, &sql, &params))
                .await
                .map(TxAnswer::Rows),
        };
        match r {
            Ok(a) => Ok(a),
            Err(e) => self.refuse(what, store_err(e)),
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

/// A collection's shape for plugins: never its options (token secrets, OAuth2 secrets).
fn collection_info(c: &crate::schema::Collection) -> db::CollectionInfo {
    db::CollectionInfo {
        id: c.id.clone(),
        name: c.name.clone(),
        type_: c.kind.as_str().to_owned(),
        system: c.system,
        fields: c
            .fields
            .iter()
            .map(|f| db::FieldInfo {
                id: f.id.clone(),
                name: f.name.clone(),
                type_: f.kind.as_str().to_owned(),
                system: f.system,
                hidden: f.hidden,
                required: f.required,
                definition: serde_json::Value::Object(f.raw.clone()).to_string(),
            })
            .collect(),
        list_rule: c.rules.list.clone(),
        view_rule: c.rules.view.clone(),
        create_rule: c.rules.create.clone(),
        update_rule: c.rules.update.clone(),
        delete_rule: c.rules.delete.clone(),
        indexes: c.indexes.clone(),
    }
}

// Each import answers `Ok(result)`: a refusal is the guest's `db-error`, never a trap.
impl db::Host for HostState {
    async fn query(
        &mut self,
        sql: String,
        params: Vec<types::Value>,
    ) -> wasmtime::Result<Result<db::Rows, db::DbError>> {
        Ok(match self.raw(false, sql, params).await {
            Ok(TxAnswer::Rows((c, r))) => Ok(rows(c, r)),
            Ok(TxAnswer::Changed(_)) => Err(db::DbError::Other("not rows".into())),
            Err(e) => Err(e),
        })
    }

    async fn execute(
        &mut self,
        sql: String,
        params: Vec<types::Value>,
    ) -> wasmtime::Result<Result<u64, db::DbError>> {
        Ok(match self.raw(true, sql, params).await {
            Ok(TxAnswer::Changed(n)) => Ok(n),
            Ok(TxAnswer::Rows(_)) => Err(db::DbError::Other("not a count".into())),
            Err(e) => Err(e),
        })
    }

    async fn get_record(
        &mut self,
        collection: String,
        id: String,
    ) -> wasmtime::Result<Result<Option<types::RecordData>, db::DbError>> {
        let me = &mut *self;
        Ok(async move {
            me.need("db.get-record", "db:read")?;
            match me.services()?.get_record(&me.facts, collection, id).await {
                Ok(r) => Ok(r.map(|r| me.out(r))),
                Err(e) => me.refuse("db.get-record", db_err(e)),
            }
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
            me.need("db.find-records", "db:read")?;
            let params = json_fields(params)?;
            let r = me
                .services()?
                .find_records(&me.facts, collection, filter, params, sort, limit.min(1000))
                .await;
            match r {
                Ok(v) => Ok(v.into_iter().map(|r| me.out(r)).collect()),
                Err(e) => me.refuse("db.find-records", db_err(e)),
            }
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
            me.may_write_records("db.create-record")?;
            let data = json_fields(fields)?;
            let r = me
                .services()?
                .create_record(&me.nested_facts(), collection, data)
                .await;
            match r {
                Ok(r) => Ok(me.out(r)),
                Err(e) => me.refuse("db.create-record", db_err(e)),
            }
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
            me.may_write_records("db.update-record")?;
            let data = json_fields(fields)?;
            let r = me
                .services()?
                .update_record(&me.nested_facts(), collection, id, data)
                .await;
            match r {
                Ok(r) => Ok(me.out(r)),
                Err(e) => me.refuse("db.update-record", db_err(e)),
            }
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
            me.may_write_records("db.delete-record")?;
            let r = me
                .services()?
                .delete_record(&me.nested_facts(), collection, id)
                .await;
            match r {
                Ok(()) => Ok(()),
                Err(e) => me.refuse("db.delete-record", db_err(e)),
            }
        }
        .await)
    }

    async fn collections(
        &mut self,
    ) -> wasmtime::Result<Result<Vec<db::CollectionInfo>, db::DbError>> {
        Ok(self.need("db.collections", "db:read").map(|()| {
            self.env
                .rt
                .store
                .schema()
                .collections
                .iter()
                .map(|c| collection_info(c))
                .collect()
        }))
    }
}

impl log::Host for HostState {
    async fn write(
        &mut self,
        level: log::Level,
        message: String,
        fields: Vec<(String, String)>,
    ) -> wasmtime::Result<()> {
        let p = &self.env.name;
        // The process log gets the line whatever the settings; `_logs` gets it through the
        // sink, which only queues it (the row is built on the log thread).
        let text: String = fields
            .iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join(" ");
        match level {
            log::Level::Trace => tracing::trace!(plugin = %p, fields = %text, "{message}"),
            log::Level::Debug => tracing::debug!(plugin = %p, fields = %text, "{message}"),
            log::Level::Info => tracing::info!(plugin = %p, fields = %text, "{message}"),
            log::Level::Warn => tracing::warn!(plugin = %p, fields = %text, "{message}"),
            log::Level::Error => tracing::error!(plugin = %p, fields = %text, "{message}"),
        }
        if let Some(sink) = self.env.rt.log_sink() {
            sink.line(super::LogLine {
                plugin: p.clone(),
                level: match level {
                    log::Level::Trace => super::LogLevel::Trace,
                    log::Level::Debug => super::LogLevel::Debug,
                    log::Level::Info => super::LogLevel::Info,
                    log::Level::Warn => super::LogLevel::Warn,
                    log::Level::Error => super::LogLevel::Error,
                },
                message,
                fields,
            });
        }
        Ok(())
    }
}

impl config::Host for HostState {
    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.env.settings.config.get(&key).cloned())
    }
}

/// A refusal that stops the call (an import with no error type to answer it with): the call
/// fails with it, and the plugin's last error names it.
#[derive(Debug)]
pub(crate) struct Refusal(pub String);

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refusal {}

impl HostState {
    fn kv(&self, what: &str) -> wasmtime::Result<&crate::store::kv::Kv> {
        if !self.env.granted("kv") {
            // kv has no error in its signature: a missing grant stops the call.
            let why = format!("plugin {} has no \"kv\" grant", self.env.name);
            self.env.refused(what, &why);
            return Err(wasmtime::Error::new(Refusal(format!(
                "refused {what}: {why}"
            ))));
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
        Ok(self.kv("kv.get")?.get(&self.env.name, &key)?)
    }
    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<()> {
        Ok(self
            .kv("kv.set")?
            .set(&self.env.name, &key, &value, ttl_ms)?)
    }
    async fn delete(&mut self, key: String) -> wasmtime::Result<()> {
        Ok(self.kv("kv.delete")?.delete(&self.env.name, &key)?)
    }
    async fn increment(&mut self, key: String, delta: i64) -> wasmtime::Result<i64> {
        Ok(self
            .kv("kv.increment")?
            .increment(&self.env.name, &key, delta)?)
    }
}

impl HostState {
    /// The grant, the url's target against `http_allow` (checked here for a quick answer, and
    /// again by the resolver on what it dials), and no Host header of the plugin's own.
    fn may_fetch(&self, url: &str, headers: &[(String, String)]) -> Result<(), String> {
        if !self.env.granted("http") {
            return Err(format!("plugin {} has no \"http\" grant", self.env.name));
        }
        let allow = sandbox::Allowlist::parse(&self.env.live().http_allow);
        allow.admits(&Target::of(url)?)?;
        if headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            return Err("a Host header is set by the host from the url".into());
        }
        Ok(())
    }
}

impl http::Host for HostState {
    async fn fetch(
        &mut self,
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> wasmtime::Result<Result<http::Response, String>> {
        if let Err(why) = self.may_fetch(&url, &headers) {
            self.env.refused("http.fetch", &why);
            return Ok(Err(why));
        }
        let allow = sandbox::Allowlist::parse(&self.env.live().http_allow);
        let left = self.deadline.saturating_duration_since(Instant::now());
        let r = tokio::task::spawn_blocking(move || {
            sandbox::fetch(allow, &method, &url, &headers, body, left)
        })
        .await
        .map_err(|e| wasmtime::Error::msg(e.to_string()))?;
        match r {
            Ok(res) => Ok(Ok(http::Response {
                status: res.status,
                headers: res.headers,
                body: res.body,
            })),
            Err(sandbox::FetchError::Refused(why)) => {
                self.env.refused("http.fetch", &why);
                Ok(Err(why))
            }
            Err(sandbox::FetchError::Failed(why)) => Ok(Err(why)),
        }
    }
}
