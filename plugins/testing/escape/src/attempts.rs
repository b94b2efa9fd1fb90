//! The attempts both escape fixtures make: any host call, named by the request, with its
//! outcome as JSON. Shared by `escape` (wants every capability) and `escape-bare` (wants none)
//! through `#[path]`, so the two differ only in what they ask for.
//!
//! `GET /api/<name>/try?call=<call>&...` makes one attempt and answers
//! `{"call":..,"ok":bool,"kind":"denied|invalid|rejected|other|error","error":"..","out":".."}`:
//! `out` renders everything the call gave back (rows, records, the schema, a response body),
//! so a test can look for a secret in it.
//!
//! Calls and their query parameters:
//! - `db.query` / `db.execute` (`sql`), `db.get-record` (`collection`, `id`),
//!   `db.find-records` (`collection`, `filter`), `db.create-record` (`collection`, `field`,
//!   `value`), `db.update-record` (`collection`, `id`, `field`, `value`), `db.delete-record`
//!   (`collection`, `id`), `db.collections`;
//! - `kv.get`, `kv.set`, `kv.delete`, `kv.increment` (`key`): without the grant the host stops
//!   the call (kv has no error type), so the route fails;
//! - `http.fetch` (`url`, optional `header` as `name:value`);
//! - `clock` (the wall clock's seconds), `config.get` (`key`), `log.write`, `context`, `env`.
//!
//! `GET /api/<name>/slow?ms=N&url=..` spins N ms (by the host's own deadline clock, which needs
//! no grant), then makes one attempt of every call but kv and answers their outcomes as a
//! JSON array: what a call still in flight may do after pb.toml changed under it. With `kv=1`
//! it ends with a `kv.increment` (which stops the call when the grant is gone).
//!
//! `GET /api/<name>/redirect?to=URL` answers 302 to `URL` (a granted host that redirects).
//!
//! With `hook = true`, a before-create hook on `escape_probe` makes the attempt named by the
//! pending record's `call` field (and `sql`) and writes the outcome into `outcome`: what a
//! before-hook may do.

use ferrobase_plugin::json::{Array, Object};
use ferrobase_plugin::prelude::*;

/// The manifest: three routes under `/api/<name>/`, the hook when asked, and `wants`.
pub fn manifest(name: &str, wants: &[&str], hook: bool) -> Manifest {
    let mut m = Manifest::new(name, "1.0.0")
        .route("GET", &format!("/api/{name}/try"))
        .route("GET", &format!("/api/{name}/slow"))
        .route("GET", &format!("/api/{name}/redirect"))
        .wants(wants);
    if hook {
        m = m.hook("escape_probe", &[Event::BeforeCreate]);
    }
    m
}

/// One attempt's outcome.
struct Outcome {
    ok: bool,
    kind: &'static str,
    error: String,
    out: String,
}

impl Outcome {
    fn ok(out: String) -> Self {
        Outcome {
            ok: true,
            kind: "",
            error: String::new(),
            out,
        }
    }

    fn db(e: &DbError) -> Self {
        let kind = match e {
            DbError::Denied(_) => "denied",
            DbError::Invalid(_) => "invalid",
            DbError::Rejected(_) => "rejected",
            DbError::Other(_) => "other",
        };
        Outcome {
            ok: false,
            kind,
            error: e.message().to_owned(),
            out: String::new(),
        }
    }

    fn failed(error: String) -> Self {
        Outcome {
            ok: false,
            kind: "error",
            error,
            out: String::new(),
        }
    }

    fn json(&self, call: &str) -> String {
        Object::new()
            .str("call", call)
            .bool("ok", self.ok)
            .str("kind", self.kind)
            .str("error", &self.error)
            .str("out", &self.out)
            .finish()
    }
}

fn render_value(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Boolean(b) => b.to_string(),
        Value::Integer(n) => n.to_string(),
        Value::Real(n) => n.to_string(),
        Value::Text(s) | Value::Json(s) => s.clone(),
        Value::Blob(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

fn render_record(r: &Record) -> String {
    let mut out = format!("{}/{}:", r.collection(), r.id());
    for (k, v) in &r.fields {
        out.push_str(&format!(" {k}={}", render_value(v)));
    }
    out
}

fn render_collections(list: &[db::CollectionInfo]) -> String {
    let mut out = String::new();
    for c in list {
        out.push_str(&format!(
            "{} {} {} system={} rules={:?}/{:?}/{:?}/{:?}/{:?} indexes={:?};",
            c.id,
            c.name,
            c.type_,
            c.system,
            c.list_rule,
            c.view_rule,
            c.create_rule,
            c.update_rule,
            c.delete_rule,
            c.indexes
        ));
        for f in &c.fields {
            out.push_str(&format!(" {}", f.definition));
        }
    }
    out
}

/// Make the attempt `call`, reading its arguments with `arg`.
fn attempt(ctx: &Context, call: &str, arg: &dyn Fn(&str) -> String) -> Outcome {
    let field = arg("field");
    let fields = [(field.as_str(), Value::from(arg("value")))];
    match call {
        "db.query" => match db::query(&arg("sql"), &[]) {
            Ok(rows) => {
                let mut out = rows.columns.join(",");
                for row in &rows.rows {
                    out.push('|');
                    let cells: Vec<String> = row.iter().map(render_value).collect();
                    out.push_str(&cells.join(","));
                }
                Outcome::ok(out)
            }
            Err(e) => Outcome::db(&e),
        },
        "db.execute" => match db::execute(&arg("sql"), &[]) {
            Ok(n) => Outcome::ok(n.to_string()),
            Err(e) => Outcome::db(&e),
        },
        "db.get-record" => match db::get_record(&arg("collection"), &arg("id")) {
            Ok(r) => Outcome::ok(r.map(|r| render_record(&r)).unwrap_or_default()),
            Err(e) => Outcome::db(&e),
        },
        "db.find-records" => {
            match db::find_records(&arg("collection"), &arg("filter"), &[], "", 100) {
                Ok(list) => Outcome::ok(
                    list.iter()
                        .map(render_record)
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                Err(e) => Outcome::db(&e),
            }
        }
        "db.create-record" => match db::create_record(&arg("collection"), &fields) {
            Ok(r) => Outcome::ok(render_record(&r)),
            Err(e) => Outcome::db(&e),
        },
        "db.update-record" => match db::update_record(&arg("collection"), &arg("id"), &fields) {
            Ok(r) => Outcome::ok(render_record(&r)),
            Err(e) => Outcome::db(&e),
        },
        "db.delete-record" => match db::delete_record(&arg("collection"), &arg("id")) {
            Ok(()) => Outcome::ok(String::new()),
            Err(e) => Outcome::db(&e),
        },
        "db.collections" => match db::collections() {
            Ok(list) => Outcome::ok(render_collections(&list)),
            Err(e) => Outcome::db(&e),
        },
        "kv.get" => Outcome::ok(kv::get_text(&arg("key")).unwrap_or_default()),
        "kv.set" => {
            kv::set(&arg("key"), "v");
            Outcome::ok(String::new())
        }
        "kv.delete" => {
            kv::delete(&arg("key"));
            Outcome::ok(String::new())
        }
        "kv.increment" => Outcome::ok(kv::increment(&arg("key"), 1).to_string()),
        "http.fetch" => {
            let header = arg("header");
            let headers: Vec<(&str, &str)> = header.split_once(':').into_iter().collect();
            match http::fetch("GET", &arg("url"), &headers, &[]) {
                Ok(r) => Outcome::ok(format!("{} {}", r.status, String::from_utf8_lossy(&r.body))),
                Err(e) => Outcome::failed(e),
            }
        }
        "clock" => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            Outcome::ok(secs.to_string())
        }
        "config.get" => Outcome::ok(config::get(&arg("key")).unwrap_or_default()),
        "log.write" => {
            log::info("an escape attempt writes a log line");
            Outcome::ok(String::new())
        }
        "context" => Outcome::ok(format!(
            "{} {} {} {} {}",
            ctx.method().unwrap_or_default(),
            ctx.path().unwrap_or_default(),
            ctx.remote_ip().unwrap_or_default(),
            ctx.auth().map(|p| p.id).unwrap_or_default(),
            u32::from(ctx.remaining_ms() > 0)
        )),
        "env" => Outcome::ok(format!(
            "vars={} fs={}",
            std::env::vars().count(),
            std::fs::read_dir("/").is_ok()
        )),
        other => Outcome::failed(format!("unknown call {other}")),
    }
}

/// The route handler.
pub fn handle(name: &str, ctx: &Context, req: &Request) -> Response {
    let arg = |k: &str| req.query_param(k).unwrap_or_default();
    let call = arg("call");
    if req.route == format!("/api/{name}/try") {
        Response::json(200, attempt(ctx, &call, &arg).json(&call))
    } else if req.route == format!("/api/{name}/slow") {
        let ms: u32 = arg("ms").parse().unwrap_or(0);
        let start = ctx.remaining_ms();
        while start.saturating_sub(ctx.remaining_ms()) < ms {
            core::hint::spin_loop();
        }
        let mut all = Array::new();
        for call in [
            "db.query",
            "db.execute",
            "db.find-records",
            "db.collections",
            "http.fetch",
            "clock",
            "config.get",
        ] {
            let arg = |k: &str| match (call, k) {
                ("db.query", "sql") => "SELECT count(*) FROM posts".to_owned(),
                ("db.execute", "sql") => "UPDATE posts SET title = title WHERE 0".to_owned(),
                ("db.find-records", "collection") => "posts".to_owned(),
                _ => arg(k),
            };
            all = all.raw(&attempt(ctx, call, &arg).json(call));
        }
        if arg("kv") == "1" {
            all = all.raw(&attempt(ctx, "kv.increment", &arg).json("kv.increment"));
        }
        Response::json(200, all.finish())
    } else if req.route == format!("/api/{name}/redirect") {
        Response::new(302).header("location", &arg("to"))
    } else {
        Response::not_found()
    }
}

/// The before-create hook on `escape_probe`: the attempt named by the pending record.
pub fn before_create(ctx: &Context, pending: &Record) -> Result<Verdict, Rejection> {
    let call = pending.text("call").unwrap_or_default().to_owned();
    let arg = |k: &str| pending.text(k).unwrap_or_default().to_owned();
    let outcome = attempt(ctx, &call, &arg).json(&call);
    Ok(Verdict::proceed().set("outcome", outcome))
}
