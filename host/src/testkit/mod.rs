//! The query compiler on a fixed fixture schema, for snapshot tests, the fuzz target, its corpus
//! replay and the compile benchmark. Not a stable API: it exists so those tools exercise the very
//! code the server runs (same schema builder, same DDL, same statement text). [`InProcess`] runs
//! the whole server inside a test process.

mod server;
pub use server::InProcess;

use crate::query::{Query, RequestInfo};
use crate::schema::define::build;
use crate::schema::{Collection, Schema};
use crate::store::Scratch;
use crate::store::ddl;
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// Who runs the query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    Superuser,
    /// A record of the fixture's `members` auth collection.
    Member,
    Guest,
}

/// A compiled list statement: its SQL text and its parameters (debug-printed).
#[derive(Debug, Clone, PartialEq)]
pub struct Compiled {
    pub sql: String,
    pub params: Vec<String>,
}

/// The fixture: collections `members` (auth), `tags`, `secrets` (listRule null), `items`
/// (every field type, relations to all of the above) and `notes` (back-relations to `items`),
/// with their tables created in an in-memory SQLite database.
pub struct Fixture {
    schema: Schema,
    conn: Scratch,
}

fn definitions() -> Vec<Value> {
    vec![
        json!({"id": "pbc_members00001", "name": "members", "type": "auth",
            "listRule": "id = @request.auth.id", "viewRule": "id = @request.auth.id",
            "fields": [{"name": "name", "type": "text"}, {"name": "roles", "type": "select",
                "values": ["admin", "editor"], "maxSelect": 2}]}),
        json!({"id": "pbc_tags00000001", "name": "tags", "listRule": "", "viewRule": "",
            "fields": [{"name": "name", "type": "text"}, {"name": "rank", "type": "number"}]}),
        json!({"id": "pbc_secrets00001", "name": "secrets",
            "fields": [{"name": "label", "type": "text"}]}),
        json!({"id": "pbc_items0000001", "name": "items", "listRule": "", "viewRule": "",
            "fields": [
                {"name": "title", "type": "text"}, {"name": "n", "type": "number"},
                {"name": "flag", "type": "bool"}, {"name": "when", "type": "date"},
                {"name": "kind", "type": "select", "values": ["a", "b", "c"], "maxSelect": 1},
                {"name": "colors", "type": "select", "values": ["red", "green", "blue"], "maxSelect": 3},
                {"name": "meta", "type": "json"}, {"name": "loc", "type": "geoPoint"},
                {"name": "owner", "type": "relation", "collectionId": "pbc_members00001", "maxSelect": 1},
                {"name": "tags", "type": "relation", "collectionId": "pbc_tags00000001", "maxSelect": 5},
                {"name": "secret", "type": "relation", "collectionId": "pbc_secrets00001", "maxSelect": 1},
                {"name": "hush", "type": "text", "hidden": true},
                {"name": "site", "type": "url"}, {"name": "body", "type": "editor"}]}),
        json!({"id": "pbc_notes0000001", "name": "notes", "listRule": "", "viewRule": "",
            "fields": [{"name": "body", "type": "text"}, {"name": "score", "type": "number"},
                {"name": "item", "type": "relation", "collectionId": "pbc_items0000001", "maxSelect": 1},
                {"name": "items", "type": "relation", "collectionId": "pbc_items0000001", "maxSelect": 9}]}),
    ]
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    pub fn new() -> Fixture {
        let conn = Scratch::new().expect("in-memory sqlite");
        let mut built: Vec<Collection> = Vec::new();
        for def in definitions() {
            let schema = Schema::new(built.clone());
            let c = build(&def, None, &schema).expect("fixture collection is valid");
            ddl::create(conn.conn(), &c).expect("fixture table");
            built.push(c);
        }
        Fixture {
            schema: Schema::new(built),
            conn,
        }
    }

    fn request(&self, caller: Caller) -> RequestInfo {
        let mut req = RequestInfo {
            method: "GET".into(),
            context: "default".into(),
            ..RequestInfo::default()
        };
        match caller {
            Caller::Superuser => {
                req.is_superuser = true;
                let mut m = Map::new();
                m.insert("id".into(), json!("su0000000000001"));
                m.insert("collectionId".into(), json!("pbc_3142635823"));
                m.insert("collectionName".into(), json!("_superusers"));
                req.auth = Some(m);
            }
            Caller::Member => {
                let mut m = Map::new();
                m.insert("id".into(), json!("member000000001"));
                m.insert("name".into(), json!("Ann"));
                m.insert("roles".into(), json!(["editor"]));
                m.insert("collectionId".into(), json!("pbc_members00001"));
                m.insert("collectionName".into(), json!("members"));
                req.auth = Some(m);
            }
            Caller::Guest => {}
        }
        req
    }

    fn collection(&self, name: &str) -> Result<Arc<Collection>, String> {
        self.schema
            .by_name(name)
            .cloned()
            .ok_or_else(|| format!("no fixture collection {name:?}"))
    }

    /// The listRule (for non-superusers), then `filter`, then `sort`, as one statement.
    fn select(
        &self,
        collection: &str,
        filter: &str,
        sort: &str,
        caller: Caller,
    ) -> Result<(Arc<Collection>, crate::query::Select), String> {
        let c = self.collection(collection)?;
        let req = self.request(caller);
        let mut q = Query::new(&self.schema, &c, &req);
        if caller != Caller::Superuser {
            match &c.rules.list {
                None => return Err("Only superusers can perform this action.".into()),
                Some(r) => q.rule(r).map_err(|e| e.to_string())?,
            }
        }
        q.filter(filter).map_err(|e| e.to_string())?;
        q.sort(sort).map_err(|e| e.to_string())?;
        Ok((c, q.finish()))
    }

    /// Compile a list request on `collection` into the statement the server would run.
    pub fn compile(
        &self,
        collection: &str,
        filter: &str,
        sort: &str,
        caller: Caller,
    ) -> Result<Compiled, String> {
        let (c, sel) = self.select(collection, filter, sort, caller)?;
        Ok(Compiled {
            sql: crate::store::records::list_sql(&c, &sel),
            params: sel.params.iter().map(|p| format!("{p:?}")).collect(),
        })
    }

    /// Prepare and run the statement on the (empty) fixture tables with its parameters bound.
    pub fn run(
        &self,
        collection: &str,
        filter: &str,
        sort: &str,
        caller: Caller,
    ) -> Result<usize, String> {
        let (c, sel) = self.select(collection, filter, sort, caller)?;
        crate::store::records::list(self.conn.conn(), &c, &sel, 30, 0)
            .map(|rows| rows.len())
            .map_err(|e| format!("statement failed: {e}"))
    }
}

/// One fuzz input: `collection \n caller \n filter \n sort` (missing parts default). Compiling
/// may fail; a statement that compiles must also prepare and run. Returns the panic-worthy
/// failure, if any.
pub fn fuzz_one(fixture: &Fixture, data: &[u8]) -> Result<(), String> {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(4, '\n');
    let collection = match parts.next().unwrap_or("").trim() {
        "tags" => "tags",
        "notes" => "notes",
        "members" => "members",
        _ => "items",
    };
    let caller = match parts.next().unwrap_or("").trim() {
        "guest" => Caller::Guest,
        "member" => Caller::Member,
        _ => Caller::Superuser,
    };
    let filter = parts.next().unwrap_or("");
    let sort = parts.next().unwrap_or("");
    if fixture.compile(collection, filter, sort, caller).is_err() {
        return Ok(());
    }
    fixture
        .run(collection, filter, sort, caller)
        .map(|_| ())
        .map_err(|e| format!("{collection} / {caller:?} / {filter:?} / {sort:?}: {e}"))
}

/// A page of `posts`-like rows (a ~500-character body, as in `bench/`) for the encoder bench.
pub struct PageFixture {
    coll: Collection,
    rows: Vec<crate::store::StoreRecord>,
}

impl PageFixture {
    pub fn new(n: usize) -> PageFixture {
        use crate::schema::value::Stored;
        let coll = build(
            &json!({"name": "posts", "fields": [
                {"name": "title", "type": "text"}, {"name": "body", "type": "text"},
                {"name": "published", "type": "bool"}, {"name": "views", "type": "number"},
                {"name": "owner", "type": "text"},
                {"name": "created", "type": "autodate", "onCreate": true},
                {"name": "updated", "type": "autodate", "onCreate": true, "onUpdate": true}]}),
            None,
            &Schema::default(),
        )
        .expect("page fixture collection");
        let body = "Lorem ipsum dolor sit amet, \"quoted\" and unicode é ".repeat(10);
        let rows = (0..n)
            .map(|i| {
                coll.fields
                    .iter()
                    .map(|f| match f.name.as_str() {
                        "id" => Stored::Text(format!("{i:015}")),
                        "title" => Stored::Text(format!("Post {i}: alpha beta")),
                        "body" => Stored::Text(body.clone()),
                        "published" => Stored::Int((i % 2) as i64),
                        "views" => Stored::Int(i as i64 * 7),
                        "owner" => Stored::Text("user00000000001".into()),
                        _ => Stored::Text("2026-11-30 12:00:00.000Z".into()),
                    })
                    .collect()
            })
            .collect();
        PageFixture { coll, rows }
    }

    /// The page as list items, written straight to bytes (the list path's encoder).
    pub fn encode_direct(&self) -> Vec<u8> {
        let order = crate::records::json::key_order(&self.coll);
        let viewer = crate::records::json::Viewer::default();
        let mut out = Vec::with_capacity(self.rows.len() * 700);
        for r in &self.rows {
            crate::records::json::write_record(&mut out, &self.coll, &order, r.clone(), &viewer);
        }
        out
    }

    /// The same page through JSON values first (the path `fields`/`expand` take).
    pub fn encode_values(&self) -> Vec<u8> {
        let viewer = crate::records::json::Viewer::default();
        let items: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                Value::Object(crate::records::json::record_json(
                    &self.coll,
                    r.clone(),
                    &viewer,
                ))
            })
            .collect();
        serde_json::to_vec(&items).unwrap_or_default()
    }
}

/// A signed auth token and what verifying it needs.
pub struct TokenFixture {
    token: String,
    key: String,
    secret: String,
    now: i64,
}

impl Default for TokenFixture {
    fn default() -> Self {
        Self::new()
    }
}

impl TokenFixture {
    pub fn new() -> TokenFixture {
        let (key, secret, now) = ("k".repeat(50), "s".repeat(50), 1_800_000_000);
        let mut extra = Map::new();
        extra.insert("refreshable".into(), json!(true));
        let token = crate::auth::token::sign(
            "user00000000001",
            "_pb_users_auth_",
            "auth",
            604_800,
            extra,
            &key,
            &secret,
            now,
        );
        TokenFixture {
            token,
            key,
            secret,
            now,
        }
    }

    /// Decode, check the signature and the expiry.
    pub fn verify(&self) -> bool {
        crate::auth::token::verify(&self.token, &self.key, &self.secret, self.now as f64).is_ok()
    }
}

/// `n` rows in a file-less SQLite table shaped like `bench/`'s posts, for the count path.
pub struct CountFixture {
    coll: Collection,
    conn: Scratch,
}

impl CountFixture {
    pub fn new(n: usize) -> CountFixture {
        let filled = PageFixture::new(n);
        let conn = Scratch::new().expect("in-memory sqlite");
        ddl::create(conn.conn(), &filled.coll).expect("table");
        let schema = Schema::new(vec![filled.coll.clone()]);
        conn.conn()
            .savepoint(|tx| {
                for r in &filled.rows {
                    let row: Vec<_> = r.iter().cloned().enumerate().collect();
                    crate::store::records::insert(tx, &schema, &filled.coll, &row)?;
                }
                Ok(crate::store::Keep::Commit(()))
            })
            .expect("rows");
        CountFixture {
            coll: filled.coll,
            conn,
        }
    }

    /// `SELECT count(*)` for an unfiltered list (what `list_100k` would run without the cache).
    pub fn count_all(&self) -> i64 {
        crate::store::records::count(
            self.conn.conn(),
            &self.coll,
            &crate::query::Select::default(),
        )
        .unwrap_or(-1)
    }

    /// A filtered page of 30 with its total, in one scan (`page_and_total`).
    pub fn filtered_page(&self, min_views: i64) -> i64 {
        let sel = crate::query::Select {
            where_sql: "`posts`.`views` > ?1 AND `posts`.`title` LIKE ?2 ESCAPE '\\'".into(),
            order_sql: "`posts`.`views` DESC".into(),
            params: vec![
                crate::schema::value::Stored::Int(min_views),
                crate::schema::value::Stored::Text("%alpha%".into()),
            ],
            ..crate::query::Select::default()
        };
        let mut cost = crate::store::records::ScanCost::default();
        crate::store::records::page_and_total(
            self.conn.conn(),
            &self.coll,
            &sel,
            (30, 0),
            &mut cost,
            None,
        )
        .map(|(_, total)| total)
        .unwrap_or(-1)
    }
}

// ---- request logs: what a `_logs` row costs the log thread, for `benches/pieces.rs` ----

/// An `auxiliary.db` under `work` written as the log thread writes it: rows of requests like
/// the bench's `list_1k` (a guest's GET of a list, PocketBase's default logs settings), built
/// and inserted in batches.
pub struct LogsFixture {
    db: crate::store::logs::BenchLog,
    ids: crate::schema::ids::Ascending,
    settings: crate::settings::Logs,
}

impl LogsFixture {
    /// `indexes: false` drops the table's secondary indexes (PocketBase's level, message and
    /// hourly ones), to show what they cost.
    pub fn new(work: &std::path::Path, indexes: bool) -> Result<LogsFixture, String> {
        let cfg = crate::app::store_config(&crate::config::Config::default());
        let db = crate::store::logs::BenchLog::open(&work.join("auxiliary.db"), &cfg, indexes)
            .map_err(|e| e.to_string())?;
        let settings = crate::settings::Settings::default().logs;
        Ok(LogsFixture {
            db,
            ids: crate::schema::ids::Ascending::default(),
            settings,
        })
    }

    /// Build and insert `n` request rows in one transaction, as the log thread does a batch.
    pub fn write_batch(&mut self, n: usize) -> Result<(), String> {
        let rows: Vec<_> = (0..n)
            .filter_map(|i| {
                let facts = crate::logs::RequestFacts {
                    method: "GET".into(),
                    uri: "/api/collections/posts/records".into(),
                    status: 200,
                    exec_ms: 0.05 + i as f64 * 1e-6,
                    referer: String::new(),
                    user_agent: String::new(),
                    auth: None,
                    user_ip: "127.0.0.1".into(),
                    remote_ip: "127.0.0.1".into(),
                    error: None,
                };
                crate::logs::request_entry(&self.settings, facts)
            })
            .map(|e| crate::logs::row(e, &mut self.ids))
            .collect();
        self.db.insert(&rows).map_err(|e| e.to_string())
    }

    /// Rows in the table.
    pub fn rows(&self) -> i64 {
        self.db.rows().unwrap_or(-1)
    }
}

// ---- plugins: the cost of a hook call and of loading a component, for `benches/plugins.rs` ----

/// A store with the collections the example plugins hook (`posts`: title, slug, note, status;
/// `audit_log`: action, record) and a tokio runtime to drive the plugin system, for the plugin
/// bench. Everything lives under the `work` directory the caller gives (and removes).
pub struct PluginFixture {
    rt: tokio::runtime::Runtime,
    store: Arc<crate::store::Store>,
    work: std::path::PathBuf,
    posts_id: String,
    /// Kept alive while hooks are timed (its runtime owns the engine).
    plugins: Option<Arc<crate::plugins::Plugins>>,
    hook: Option<Arc<crate::plugins::Loaded>>,
}

/// One load of one plugin file through the server's start path (`Plugins::start` on a folder
/// holding only that file).
#[derive(Debug, Clone)]
pub struct PluginLoad {
    /// The plugin's manifest name.
    pub name: String,
    /// Wall time of `Plugins::start`: engine and linker, compile or cache read, instantiate,
    /// `describe`, one warm instance.
    pub total: std::time::Duration,
    /// The runtime's own `compile_ms` (compile, or deserialize from the cache).
    pub compile_ms: u128,
    pub from_cache: bool,
}

impl PluginFixture {
    /// Open the store under `work/pb_data` and create the collections.
    pub fn new(work: &std::path::Path) -> Result<PluginFixture, String> {
        use crate::store::{Store, StoreConfig};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let cfg = StoreConfig {
            mmap_mib: 0,
            cache_size_kib: 16000,
            journal_size_limit: 200_000_000,
            wal_autocheckpoint: 1_000,
            busy_timeout_ms: 10_000,
            n_readers: 2,
            synchronous: crate::config::Synchronous::Normal,
        };
        let store =
            Arc::new(Store::open(&work.join("pb_data"), &cfg).map_err(|e| format!("store: {e}"))?);
        let defs = [
            json!({"name": "posts", "listRule": "", "viewRule": "", "createRule": "",
                "updateRule": "", "deleteRule": "",
                "fields": [{"name": "title", "type": "text"}, {"name": "slug", "type": "text"},
                    {"name": "note", "type": "text"}, {"name": "status", "type": "text"}]}),
            json!({"name": "audit_log",
                "fields": [{"name": "action", "type": "text"}, {"name": "record", "type": "text"}]}),
        ];
        for def in defs {
            let c = build(&def, None, &store.schema()).map_err(|e| format!("{def}: {e:?}"))?;
            rt.block_on(store.write_schema(move |tx| ddl::create_collection(tx, &c)))
                .map_err(|e| format!("creating a collection: {e}"))?;
        }
        let posts_id = store
            .schema()
            .by_id_or_name("posts")
            .map(|c| c.id.clone())
            .ok_or("posts was not created")?;
        Ok(PluginFixture {
            rt,
            store,
            work: work.to_owned(),
            posts_id,
            plugins: None,
            hook: None,
        })
    }

    /// The plugins config the bench runs with: the defaults, plus the grants `audit` and
    /// `cleanup` ask for (as their docs say to put in pb.toml).
    fn plugins_config() -> crate::config::PluginsConfig {
        use crate::config::{PluginEntry, PluginsConfig};
        let mut cfg = PluginsConfig {
            hot_reload: false,
            ..PluginsConfig::default()
        };
        for (name, grants) in [
            ("audit", &["db:write", "kv"][..]),
            ("cleanup", &["db:read", "db:write", "kv"][..]),
        ] {
            cfg.each.insert(
                name.into(),
                PluginEntry {
                    grants: Some(grants.iter().map(|g| (*g).to_owned()).collect()),
                    ..PluginEntry::default()
                },
            );
        }
        cfg
    }

    /// Start a plugin system on a folder holding only `wasm` (copied in), with its compile
    /// cache in `cache_parent/.plugin-cache`. `None` for `wasm` starts on an empty folder (what
    /// the engine and linker alone cost).
    fn start(
        &self,
        wasm: Option<&std::path::Path>,
        cache_parent: &std::path::Path,
    ) -> Result<(Arc<crate::plugins::Plugins>, std::time::Duration), String> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = self.work.join(format!("plugins-{n}"));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        if let Some(w) = wasm {
            let name = w.file_name().ok_or("no file name")?;
            std::fs::copy(w, dir.join(name)).map_err(|e| format!("{}: {e}", w.display()))?;
        }
        let store = Arc::clone(&self.store);
        let started = std::time::Instant::now();
        let plugins = self.rt.block_on(crate::plugins::Plugins::start(
            Self::plugins_config(),
            dir,
            None,
            cache_parent.to_owned(),
            store,
        ))?;
        Ok((plugins, started.elapsed()))
    }

    /// The engine and linker alone: `Plugins::start` on an empty folder.
    pub fn start_empty(&self) -> Result<std::time::Duration, String> {
        let cache = self
            .work
            .join(format!("cache-empty-{}", std::process::id()));
        self.start(None, &cache).map(|(_, d)| d)
    }

    /// Load `wasm` with its compile cache under `cache_parent` (a fresh folder: compiled from
    /// scratch; the folder of an earlier load of the same bytes: read from the cache).
    pub fn load(
        &self,
        wasm: &std::path::Path,
        cache_parent: &std::path::Path,
    ) -> Result<PluginLoad, String> {
        let (plugins, total) = self.start(Some(wasm), cache_parent)?;
        let reg = plugins.registry();
        let Some(p) = reg.plugins.first() else {
            return Err(format!(
                "{} did not load: {}",
                wasm.display(),
                plugins.report()["errors"]
            ));
        };
        Ok(PluginLoad {
            name: p.name().to_owned(),
            total,
            compile_ms: p.compile_ms,
            from_cache: p.from_cache,
        })
    }

    /// Load `wasm` (a plugin with a before-create hook on `posts`, such as slugger) and keep
    /// its hook for [`PluginFixture::time_before_create`].
    pub fn load_hook(&mut self, wasm: &std::path::Path) -> Result<(), String> {
        let cache = self.work.join("cache-hook");
        let (plugins, _) = self.start(Some(wasm), &cache)?;
        let hook = plugins
            .registry()
            .hooks(&self.posts_id)
            .and_then(|s| s.before_create.first().cloned())
            .ok_or_else(|| {
                format!(
                    "{} has no before-create hook on posts: {}",
                    wasm.display(),
                    plugins.report()
                )
            })?;
        self.hook = Some(hook);
        self.plugins = Some(plugins);
        Ok(())
    }

    /// A pending post as the create path hands it to before-create hooks: every field of
    /// `posts`, the slug empty.
    fn pending_post(&self, i: usize) -> crate::plugins::PluginRecord {
        use crate::plugins::{FieldValue, PluginRecord};
        let now = "2026-11-30 12:00:00.000Z".to_owned();
        PluginRecord {
            collection: "posts".into(),
            id: format!("{i:015}"),
            fields: vec![
                ("id".into(), FieldValue::Text(format!("{i:015}"))),
                ("title".into(), FieldValue::Text("Hello, World!".into())),
                ("slug".into(), FieldValue::Text(String::new())),
                (
                    "note".into(),
                    FieldValue::Text("a short note about this post".into()),
                ),
                ("status".into(), FieldValue::Text("published".into())),
                ("created".into(), FieldValue::Text(now.clone())),
                ("updated".into(), FieldValue::Text(now)),
            ],
        }
    }

    /// What the hook answers for one pending post, as text (for a check before timing).
    pub fn before_create_outcome(&self) -> Result<String, String> {
        let hook = self.hook.as_ref().ok_or("call load_hook first")?;
        let pending = self.pending_post(0);
        let out = self.rt.block_on(hook.before_write(
            Arc::new(crate::plugins::CallFacts::default()),
            None,
            &pending,
        ));
        Ok(format!("{out:?}"))
    }

    /// Run `warmup` calls, then time `n` calls of the before-create hook one by one (the same
    /// `Loaded::before_write` the create path awaits, on the warm instance pool). Nanoseconds,
    /// in call order. Fails on the first call that does not proceed.
    pub fn time_before_create(&self, warmup: usize, n: usize) -> Result<Vec<u64>, String> {
        use crate::plugins::{CallFacts, HookOutcome};
        let hook = Arc::clone(self.hook.as_ref().ok_or("call load_hook first")?);
        let pending = self.pending_post(1);
        self.rt.block_on(async move {
            let mut out = Vec::with_capacity(n);
            for i in 0..warmup + n {
                let facts = Arc::new(CallFacts::default());
                let t = std::time::Instant::now();
                let r = hook.before_write(facts, None, &pending).await;
                let dt = t.elapsed();
                match r {
                    HookOutcome::Proceed(changes) if !changes.is_empty() => {}
                    other => return Err(format!("call {i}: {other:?}")),
                }
                if i >= warmup {
                    out.push(u64::try_from(dt.as_nanos()).unwrap_or(u64::MAX));
                }
            }
            Ok(out)
        })
    }
}

impl Drop for PluginFixture {
    fn drop(&mut self) {
        self.hook = None;
        self.plugins = None;
        self.store.close();
    }
}

/// The built example plugins of the repository at `root`: the Rust ones
/// (`plugins/target/wasm32-wasip2/release/<crate>.wasm`) and the JS one
/// (`plugins/js-hello/dist/js-hello.wasm`).
pub fn plugin_wasm(root: &std::path::Path, name: &str) -> std::path::PathBuf {
    if name == "js-hello" {
        root.join("plugins/js-hello/dist/js-hello.wasm")
    } else {
        root.join("plugins/target/wasm32-wasip2/release")
            .join(format!("{name}.wasm"))
    }
}

/// Build the plugins of the repository at `root` from source: the Rust workspace for
/// wasm32-wasip2 (cargo is incremental), and the JS example with componentize-js
/// (`npm ci` first when its packages are missing).
pub fn build_plugins(root: &std::path::Path) -> Result<(), String> {
    use std::process::Command;
    fn run(what: &str, cmd: &mut Command) -> Result<(), String> {
        match cmd.status() {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("{what} failed: {s}")),
            Err(e) => Err(format!("{what}: {e}")),
        }
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(
        "building the Rust plugins",
        Command::new(cargo)
            .args([
                "build",
                "--release",
                "--target",
                "wasm32-wasip2",
                "--manifest-path",
            ])
            .arg(root.join("plugins/Cargo.toml"))
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS"),
    )?;
    let js = root.join("plugins/js-hello");
    if !js.join("node_modules").exists() {
        run(
            "npm ci in plugins/js-hello",
            Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund"])
                .current_dir(&js),
        )?;
    }
    run(
        "building the JS plugin",
        Command::new("node")
            .arg("build.mjs")
            .arg(plugin_wasm(root, "js-hello"))
            .current_dir(&js),
    )
}
