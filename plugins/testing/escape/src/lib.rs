//! escape: a test fixture for the sandbox-escape test, not an example. It wants every
//! capability (and one hidden field, `posts.secret_note`), and tries whatever the test asks
//! through its routes (see `attempts.rs`): every attempt the sandbox must refuse even when
//! everything is granted.
//!
//! Load it by putting `escape.wasm` (built into `plugins/target/wasm32-wasip2/release/`) in the
//! server's plugins folder, with every grant it wants:
//!
//! ```toml
//! [plugins.escape]
//! grants = ["db:read", "db:write", "kv", "http", "clock", "db:hidden:posts.secret_note"]
//! http_allow = ["127.0.0.1:8090"]
//! ```

mod attempts;

use ferrobase_plugin::prelude::*;

const NAME: &str = "escape";
const WANTS: &[&str] = &[
    "db:read",
    "db:write",
    "kv",
    "http",
    "clock",
    "db:hidden:posts.secret_note",
];

struct Escape;

impl Plugin for Escape {
    fn manifest() -> Manifest {
        attempts::manifest(NAME, WANTS, true)
    }

    fn before_create(ctx: &Context, pending: &Record) -> Result<Verdict, Rejection> {
        attempts::before_create(ctx, pending)
    }

    fn handle(ctx: &Context, req: &Request) -> Response {
        attempts::handle(NAME, ctx, req)
    }
}

ferrobase_plugin::export!(Escape);
