//! escape-bare: a test fixture for the sandbox-escape test, not an example. The same attempts
//! as `escape` (its `attempts.rs`), from a plugin that wants nothing: whatever pb.toml grants,
//! it holds nothing, and every gated call must be refused.
//!
//! Load it by putting `escape_bare.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder; it needs no grants.

#[path = "../../escape/src/attempts.rs"]
mod attempts;

use ferrobase_plugin::prelude::*;

const NAME: &str = "escape-bare";

struct EscapeBare;

impl Plugin for EscapeBare {
    fn manifest() -> Manifest {
        attempts::manifest(NAME, &[], false)
    }

    fn before_create(ctx: &Context, pending: &Record) -> Result<Verdict, Rejection> {
        // Never bound (the manifest hooks nothing); kept so both fixtures share all of
        // `attempts.rs`.
        attempts::before_create(ctx, pending)
    }

    fn handle(ctx: &Context, req: &Request) -> Response {
        attempts::handle(NAME, ctx, req)
    }
}

ferrobase_plugin::export!(EscapeBare);
