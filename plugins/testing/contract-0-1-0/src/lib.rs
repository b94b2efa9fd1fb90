//! contract-0-1-0: a test fixture, not an example. Built against `wit/plugin.wit`, a frozen copy
//! of the published contract `ferrobase:plugin@0.1.0`, with wit-bindgen directly (not the SDK),
//! so it stays what a plugin built before 0.1.1 looks like. Later hosts must keep loading it.
//!
//! `GET /api/contract-0-1-0/ping` answers `{"rows":N,"error":"..."}` after one `db.query`
//! (`SELECT count(*) FROM posts`), to show its imports link and work.
//!
//! Load it by putting `contract_0_1_0.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder; it wants `db:read`.

#[allow(unsafe_code, reason = "generated canonical ABI glue")]
mod bindings {
    wit_bindgen::generate!({ world: "plugin", path: "wit" });
}

use bindings::exports::ferrobase::plugin::{
    commit_events, jobs, manifest, record_hooks, routes, transaction_hooks,
};
use bindings::ferrobase::plugin::context::CallContext;
use bindings::ferrobase::plugin::db;
use bindings::ferrobase::plugin::types::{RecordData, Rejection, Value};

const PING: &str = "/api/contract-0-1-0/ping";

struct Contract010;

impl manifest::Guest for Contract010 {
    fn describe() -> manifest::Manifest {
        manifest::Manifest {
            name: "contract-0-1-0".to_owned(),
            version: "0.1.0".to_owned(),
            hooks: Vec::new(),
            routes: vec![manifest::RouteBinding {
                method: "GET".to_owned(),
                path: PING.to_owned(),
                require_auth: false,
            }],
            jobs: Vec::new(),
            wants: vec!["db:read".to_owned()],
            extra: Vec::new(),
        }
    }
}

impl record_hooks::Guest for Contract010 {
    fn before_create(_: &CallContext, _: RecordData) -> Result<record_hooks::Verdict, Rejection> {
        Ok(record_hooks::Verdict::Proceed)
    }

    fn before_update(
        _: &CallContext,
        _: RecordData,
        _: RecordData,
    ) -> Result<record_hooks::Verdict, Rejection> {
        Ok(record_hooks::Verdict::Proceed)
    }

    fn before_delete(_: &CallContext, _: RecordData) -> Result<(), Rejection> {
        Ok(())
    }
}

impl transaction_hooks::Guest for Contract010 {
    fn in_transaction(
        _: &CallContext,
        _: transaction_hooks::Action,
        _: RecordData,
    ) -> Result<(), Rejection> {
        Ok(())
    }
}

impl commit_events::Guest for Contract010 {
    fn after_commit(_: Vec<commit_events::Change>) -> Result<(), String> {
        Ok(())
    }
}

impl routes::Guest for Contract010 {
    fn handle(_: &CallContext, req: routes::HttpRequest) -> routes::HttpResponse {
        if req.route != PING {
            return routes::HttpResponse {
                status: 404,
                headers: Vec::new(),
                body: Vec::new(),
            };
        }
        let (rows, error) = match db::query("SELECT count(*) FROM posts", &[]) {
            Ok(r) => match r.rows.first().and_then(|row| row.first()) {
                Some(Value::Integer(n)) => (*n, String::new()),
                _ => (-1, "no count".to_owned()),
            },
            Err(e) => (-1, format!("{e:?}")),
        };
        let body = format!(
            "{{\"rows\":{rows},\"error\":\"{}\"}}",
            error.replace('\\', "\\\\").replace('"', "\\\"")
        );
        routes::HttpResponse {
            status: 200,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            body: body.into_bytes(),
        }
    }
}

impl jobs::Guest for Contract010 {
    fn run(_: &CallContext, _: String, _: u64) -> Result<(), String> {
        Err("unknown job".to_owned())
    }
}

bindings::export!(Contract010 with_types_in bindings);
