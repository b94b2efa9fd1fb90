//! Ferrobase: a PocketBase-compatible backend. The `ferrobase` binary is a thin wrapper over
//! [`run`]; [`testkit`] opens the query compiler to benches, fuzzing and tests. Everything else is
//! crate-private: the HTTP API is the product's interface.

mod api;
mod app;
mod auth;
mod cli;
mod config;
mod http;
mod plugins;
mod query;
mod records;
mod schema;
mod store;
pub mod testkit;

pub use cli::run;

/// Stack size of every thread that handles request data (the runtime's workers and blocking
/// threads, the writer): room for JSON nested to `schema::value::JSON_DEPTH_MAX` levels.
const THREAD_STACK_BYTES: usize = 32 << 20;
