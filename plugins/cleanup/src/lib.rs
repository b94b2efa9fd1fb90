//! cleanup: a nightly job that deletes draft posts.
//!
//! - Job `cleanup_drafts` (`0 3 * * *`): deletes every post with `status = "draft"` (up to 1000
//!   per run) through the record API, logs the count, stores it in kv as `last_deleted` and
//!   counts runs in `runs`.
//! - `GET /api/cleanup/stats`: `{"runs":N,"lastDeleted":M}` (0 before the first run).
//!
//! Load it by putting `cleanup.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml), with its grants:
//!
//! ```toml
//! [plugins.cleanup]
//! grants = ["db:read", "db:write", "kv"]
//! ```

use ferrobase_plugin::json::Object;
use ferrobase_plugin::prelude::*;

const VERSION: &str = "1.0.0";
const JOB: &str = "cleanup_drafts";
const STATS: &str = "/api/cleanup/stats";
const BATCH_MAX: u32 = 1000;

struct Cleanup;

impl Plugin for Cleanup {
    fn manifest() -> Manifest {
        Manifest::new("cleanup", VERSION)
            .job(JOB, "0 3 * * *")
            .route("GET", STATS)
            .wants(&["db:read", "db:write", "kv"])
    }

    fn run(_ctx: &Context, name: &str, _scheduled_at_ms: u64) -> Result<(), String> {
        if name != JOB {
            return Err("unknown job".to_owned());
        }
        let drafts = db::find_records("posts", "status = \"draft\"", &[], "", BATCH_MAX)
            .map_err(|e| format!("listing drafts: {}", e.message()))?;
        let mut deleted = 0u64;
        let mut first_error = None;
        for post in &drafts {
            match db::delete_record("posts", post.id()) {
                Ok(()) => deleted += 1,
                Err(e) => {
                    first_error
                        .get_or_insert_with(|| format!("deleting {}: {}", post.id(), e.message()));
                }
            }
        }
        let deleted_text = deleted.to_string();
        log::write(
            log::Level::Info,
            &format!("deleted {deleted} draft posts"),
            &[("deleted", &deleted_text)],
        );
        kv::set("last_deleted", &deleted_text);
        kv::increment("runs", 1);
        first_error.map_or(Ok(()), Err)
    }

    fn handle(_ctx: &Context, req: &Request) -> Response {
        if req.route != STATS {
            return Response::not_found();
        }
        let last_deleted = kv::get_text("last_deleted")
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0);
        let body = Object::new()
            .int("runs", kv::counter("runs"))
            .int("lastDeleted", last_deleted)
            .finish();
        Response::json(200, body)
    }
}

ferrobase_plugin::export!(Cleanup);
