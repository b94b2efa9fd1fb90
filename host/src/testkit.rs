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

    /// Compile a list request on `collection`: its listRule (for non-superusers), then
    /// `filter`, then `sort`, into the statement the server would run.
    pub fn compile(
        &self,
        collection: &str,
        filter: &str,
        sort: &str,
        caller: Caller,
    ) -> Result<Compiled, String> {
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
        let sel = q.finish();
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
        let c = self.collection(collection)?;
        let req = self.request(caller);
        let mut q = Query::new(&self.schema, &c, &req);
        if caller != Caller::Superuser
            && let Some(r) = &c.rules.list
        {
            q.rule(r).map_err(|e| e.to_string())?;
        }
        q.filter(filter).map_err(|e| e.to_string())?;
        q.sort(sort).map_err(|e| e.to_string())?;
        let sel = q.finish();
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
