//! The query compiler on a fixed fixture schema, for snapshot tests, the fuzz target, its corpus
//! replay and the compile benchmark. Not a stable API: it exists so those tools exercise the very
//! code the server runs (same schema builder, same DDL, same statement text).

use crate::query::{Query, RequestInfo};
use crate::schema::define::build;
use crate::schema::{Collection, Schema};
use crate::store::ddl;
use rusqlite::Connection;
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
    conn: Connection,
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
        let conn = Connection::open_in_memory().expect("in-memory sqlite");
        crate::store::register_functions(&conn).expect("sql functions");
        let mut built: Vec<Collection> = Vec::new();
        for def in definitions() {
            let schema = Schema::new(built.clone());
            let c = build(&def, None, &schema).expect("fixture collection is valid");
            ddl::create(&conn, &c).expect("fixture table");
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
        crate::store::records::list(&self.conn, &c, &sel, 30, 0)
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
        let order = crate::api::serialize::key_order(&self.coll);
        let viewer = crate::api::serialize::Viewer::default();
        let mut out = Vec::with_capacity(self.rows.len() * 700);
        for r in &self.rows {
            crate::api::serialize::write_record(&mut out, &self.coll, &order, r.clone(), &viewer);
        }
        out
    }

    /// The same page through JSON values first (the path `fields`/`expand` take).
    pub fn encode_values(&self) -> Vec<u8> {
        let viewer = crate::api::serialize::Viewer::default();
        let items: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                Value::Object(crate::api::serialize::record_json(
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
        crate::auth::token::verify(&self.token, &self.key, &self.secret, self.now).is_ok()
    }
}

/// `n` rows in a file-less SQLite table shaped like `bench/`'s posts, for the count path.
pub struct CountFixture {
    coll: Collection,
    conn: Connection,
}

impl CountFixture {
    pub fn new(n: usize) -> CountFixture {
        let filled = PageFixture::new(n);
        let conn = Connection::open_in_memory().expect("in-memory sqlite");
        ddl::create(&conn, &filled.coll).expect("table");
        let tx = conn.unchecked_transaction().expect("tx");
        for r in &filled.rows {
            let row: Vec<_> = r.iter().cloned().enumerate().collect();
            crate::store::records::insert(&tx, &filled.coll, &row).expect("row");
        }
        tx.commit().expect("commit");
        CountFixture {
            coll: filled.coll,
            conn,
        }
    }

    /// `SELECT count(*)` for an unfiltered list (what `list_100k` would run without the cache).
    pub fn count_all(&self) -> i64 {
        crate::store::records::count(&self.conn, &self.coll, &crate::query::Select::default())
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
        crate::store::records::page_and_total(&self.conn, &self.coll, &sel, 30, 0)
            .map(|(_, total)| total)
            .unwrap_or(-1)
    }
}
