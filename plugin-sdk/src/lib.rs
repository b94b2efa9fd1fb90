//! Owns the Rust side of the plugin contract: bindings for `wit/plugin.wit` and the small types a
//! plugin is written against. Knows nothing of the host beyond that contract.
//!
//! A plugin is one type implementing [`Plugin`] and one [`export!`]. Every method but
//! [`Plugin::manifest`] has a default, and the manifest says which ones the host calls.
//!
//! ```no_run
//! use ferrobase_plugin::prelude::*;
//!
//! struct Slugger;
//!
//! impl Plugin for Slugger {
//!     fn manifest() -> Manifest {
//!         Manifest::new("slugger", "1.0.0")
//!             .hook("posts", &[Event::BeforeCreate])
//!             .route("GET", "/api/slugger/hello")
//!     }
//!
//!     fn before_create(_ctx: &Context, pending: &Record) -> Result<Verdict, Rejection> {
//!         if pending.text("slug").is_some_and(|s| !s.is_empty()) {
//!             return Ok(Verdict::proceed());
//!         }
//!         let slug: String = pending
//!             .text("title")
//!             .unwrap_or_default()
//!             .to_ascii_lowercase()
//!             .split(|c: char| !c.is_ascii_alphanumeric())
//!             .filter(|part| !part.is_empty())
//!             .collect::<Vec<_>>()
//!             .join("-");
//!         if slug.is_empty() {
//!             let why = "Cannot make a slug from this title.";
//!             return Err(Rejection::field("title", "validation_slug_empty", why));
//!         }
//!         Ok(Verdict::proceed().set("slug", slug))
//!     }
//!
//!     fn handle(ctx: &Context, req: &Request) -> Response {
//!         let who = ctx.auth().map(|p| p.id).unwrap_or_default();
//!         let name = req.query_param("name").unwrap_or_default();
//!         let body = json::Object::new().str("hello", &name).str("caller", &who).finish();
//!         Response::json(200, body)
//!     }
//! }
//!
//! ferrobase_plugin::export!(Slugger);
//! # fn main() {}
//! ```
//!
//! Build it with `cargo build --release --target wasm32-wasip2`: a `cdylib` crate comes out as a
//! component the host loads. See the crate README for the contract (value mapping, hook order,
//! grants).

mod adapter;
mod context;
pub mod db;
pub mod json;
mod manifest;
mod record;
mod route;

pub use context::{Context, Upload};
pub use manifest::{Event, Manifest};
pub use record::{
    Action, AuthAttempt, Change, OutOfRange, Principal, Record, Rejection, Value, Verdict,
};
pub use route::{Request, Response};

// The README's examples compile as doctests too.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

/// The generated bindings of `wit/plugin.wit`. Plugins rarely need them: every type they see is
/// re-exported with helpers at the crate root.
#[allow(
    unsafe_code,
    reason = "wit-bindgen's canonical ABI glue is unsafe by nature"
)]
#[allow(missing_docs, clippy::pedantic, reason = "generated code")]
pub mod bindings {
    wit_bindgen::generate!({
        // Everything `plugin` exports and the auth hook (0.1.2).
        world: "plugin-auth",
        path: "wit",
        pub_export_macro: true,
        // The public `export!` is ours (it adapts a `Plugin`); the generated one stays hidden.
        // No `default_bindings_module`: it would hard-code this crate's name into the generated
        // macro, and a plugin may depend on the SDK under any key. `export!` passes `$crate`.
        export_macro_name: "__export_plugin_bindings",
        additional_derives: [PartialEq],
    });
}

/// What most plugins import: `use ferrobase_plugin::prelude::*;`.
pub mod prelude {
    pub use crate::db::DbError;
    pub use crate::{
        Action, AuthAttempt, Change, Context, Event, Manifest, Plugin, Principal, Record,
        Rejection, Request, Response, Upload, Value, Verdict, config, db, http, json, kv, log,
    };
}

/// A plugin. Implement [`Plugin::manifest`] and the methods for what it binds, then
/// `ferrobase_plugin::export!(YourType);`.
///
/// The host calls a method only when the manifest binds it; the defaults answer the way the host
/// would if nothing were bound (proceed, 404, unknown job).
pub trait Plugin {
    /// Called once per loaded version, before anything else.
    fn manifest() -> Manifest;

    /// Before a record is created. `pending` is the client's input coerced to the fields'
    /// types, not yet validated: validation runs on the record (patches included) after the
    /// last before-hook, as PocketBase's model hooks do. Reads only.
    fn before_create(_ctx: &Context, _pending: &Record) -> Result<Verdict, Rejection> {
        Ok(Verdict::proceed())
    }

    /// Before a record is updated: `current` is stored, `pending` is what would be written
    /// (coerced, not yet validated, as for [`Plugin::before_create`]).
    fn before_update(
        _ctx: &Context,
        _current: &Record,
        _pending: &Record,
    ) -> Result<Verdict, Rejection> {
        Ok(Verdict::proceed())
    }

    /// Before a record is deleted.
    fn before_delete(_ctx: &Context, _current: &Record) -> Result<(), Rejection> {
        Ok(())
    }

    /// Inside the write's transaction, after the row is written and before COMMIT. A rejection
    /// rolls the write back; [`db::execute`] joins the transaction.
    fn in_transaction(_ctx: &Context, _action: Action, _record: &Record) -> Result<(), Rejection> {
        Ok(())
    }

    /// Committed changes, in commit order. An error is logged by the host and undoes nothing.
    fn after_commit(_changes: &[Change]) -> Result<(), String> {
        Ok(())
    }

    /// A request on one of the manifest's routes.
    fn handle(_ctx: &Context, _req: &Request) -> Response {
        Response::not_found()
    }

    /// A scheduled run of the job `name`.
    fn run(_ctx: &Context, _name: &str, _scheduled_at_ms: u64) -> Result<(), String> {
        Err("unknown job".to_owned())
    }

    /// A sign-in about to succeed on an auth collection the manifest names with
    /// [`Manifest::auth_hook`], before its token is issued (password, OTP, OAuth2, refresh).
    /// `Ok(notes)` lets it through and adds each `(key, value)` to the answer's `meta`; `Err`
    /// refuses it with the rejection's status and body.
    fn authenticate(
        _ctx: &Context,
        _attempt: &AuthAttempt,
    ) -> Result<Vec<(String, String)>, Rejection> {
        Ok(Vec::new())
    }
}

/// Exports a [`Plugin`] as the component's implementation of the `plugin-auth` world.
///
/// Use it once, at the crate root of a `cdylib`: `ferrobase_plugin::export!(MyPlugin);`.
#[macro_export]
macro_rules! export {
    ($plugin:ty) => {
        // The generated export macro takes an identifier, so the adapter gets a local name.
        #[doc(hidden)]
        type __FerrobasePluginExport = $crate::__private::Adapter<$plugin>;
        $crate::bindings::__export_plugin_bindings!(
            __FerrobasePluginExport with_types_in $crate::bindings
        );
    };
}

/// Support for [`export!`]; not part of the API.
#[doc(hidden)]
pub mod __private {
    pub use crate::adapter::Adapter;
}

/// Settings from `[plugins.<name>.config]` in pb.toml (read-only, no grant needed).
pub mod config {
    /// The setting `key`, if pb.toml has it.
    pub fn get(key: &str) -> Option<String> {
        crate::bindings::ferrobase::plugin::config::get(key)
    }
}

/// A persistent key/value store scoped to this plugin (needs the `kv` grant).
pub mod kv {
    use crate::bindings::ferrobase::plugin::kv as wit;

    /// The bytes under `key`.
    pub fn get(key: &str) -> Option<Vec<u8>> {
        wit::get(key)
    }

    /// The value under `key` as UTF-8 text; `None` when absent or not UTF-8.
    pub fn get_text(key: &str) -> Option<String> {
        wit::get(key).and_then(|bytes| String::from_utf8(bytes).ok())
    }

    /// Stores `value` under `key`, without expiry.
    pub fn set(key: &str, value: impl AsRef<[u8]>) {
        wit::set(key, value.as_ref(), None);
    }

    /// Stores `value` under `key`; the host forgets it after `ttl_ms`.
    pub fn set_with_ttl(key: &str, value: impl AsRef<[u8]>, ttl_ms: u64) {
        wit::set(key, value.as_ref(), Some(ttl_ms));
    }

    /// Forgets `key`.
    pub fn delete(key: &str) {
        wit::delete(key);
    }

    /// Atomically adds `delta` to the counter `key` (a missing key counts as 0); returns the new
    /// value.
    pub fn increment(key: &str, delta: i64) -> i64 {
        wit::increment(key, delta)
    }

    /// The counter `key` (0 when absent). The contract does not fix how counters are stored, so
    /// this reads through `increment` rather than `get`.
    pub fn counter(key: &str) -> i64 {
        wit::increment(key, 0)
    }
}

/// Lines in the host log, tagged by the host with the plugin's name.
pub mod log {
    pub use crate::bindings::ferrobase::plugin::log::Level;

    /// One line with structured fields.
    pub fn write(level: Level, message: &str, fields: &[(&str, &str)]) {
        let fields: Vec<(String, String)> = fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        crate::bindings::ferrobase::plugin::log::write(level, message, &fields);
    }

    /// A trace line.
    pub fn trace(message: &str) {
        write(Level::Trace, message, &[]);
    }

    /// A debug line.
    pub fn debug(message: &str) {
        write(Level::Debug, message, &[]);
    }

    /// An info line.
    pub fn info(message: &str) {
        write(Level::Info, message, &[]);
    }

    /// A warning.
    pub fn warn(message: &str) {
        write(Level::Warn, message, &[]);
    }

    /// An error line.
    pub fn error(message: &str) {
        write(Level::Error, message, &[]);
    }
}

/// Outbound HTTP (needs the `http` grant and the host:port in pb.toml's `http_allow`).
pub mod http {
    pub use crate::bindings::ferrobase::plugin::http::Response as FetchResponse;

    /// One request; `Err` carries the host's reason (not allowed, unreachable, timeout...).
    /// A non-2xx answer is still `Ok`.
    pub fn fetch(
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<FetchResponse, String> {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        crate::bindings::ferrobase::plugin::http::fetch(method, url, &headers, body)
    }

    /// A GET without headers.
    pub fn get(url: &str) -> Result<FetchResponse, String> {
        fetch("GET", url, &[], &[])
    }
}
