//! audit: writes an `audit_log` row inside each write's transaction and counts committed changes.
//!
//! - In the transaction of every create, update and delete of `posts`: inserts
//!   `(action, record)` into the `audit_log` collection's table with raw SQL, so the audit row
//!   commits or rolls back with the write. A post titled exactly `forbidden-in-tx` is refused
//!   there (field `title`, code `validation_audit`), which rolls the write back.
//! - Before a delete of `posts`: a post titled exactly `keep-forever` may not be deleted (field
//!   `title`, code `validation_audit_keep`). A truncate asks about every post, so one such post
//!   refuses the whole truncate.
//! - After commit: counts changes in kv (`commits`), keeps the last `seq` (`last_seq`) and the
//!   titles of the last 50 changes (`last_titles`, comma-separated).
//! - `GET /api/audit/stats`: `{"commits":N,"lastSeq":S,"titles":"a,b,c"}`.
//!
//! Needs a base collection `audit_log` with text fields `action` and `record`.
//!
//! Load it by putting `audit.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml), with its grants:
//!
//! ```toml
//! [plugins.audit]
//! grants = ["db:write", "kv"]
//! ```

use ferrobase_plugin::json::Object;
use ferrobase_plugin::prelude::*;

const VERSION: &str = "1.0.0";
const STATS: &str = "/api/audit/stats";
const TITLES_KEPT: usize = 50;
// PocketBase ids are 15 characters; 8 random bytes give 16 hex digits.
const INSERT: &str = "INSERT INTO audit_log (id, action, record) \
                      VALUES (substr(lower(hex(randomblob(8))), 1, 15), ?, ?)";

struct Audit;

impl Plugin for Audit {
    fn manifest() -> Manifest {
        Manifest::new("audit", VERSION)
            .hook(
                "posts",
                &[
                    Event::BeforeDelete,
                    Event::InTransaction,
                    Event::AfterCommit,
                ],
            )
            .route("GET", STATS)
            .wants(&["db:write", "kv"])
    }

    fn before_delete(_ctx: &Context, current: &Record) -> Result<(), Rejection> {
        if current.text("title") == Some("keep-forever") {
            return Err(Rejection::field(
                "title",
                "validation_audit_keep",
                "This post is kept forever.",
            )
            .with_message(Action::Delete.failed_message()));
        }
        Ok(())
    }

    fn in_transaction(_ctx: &Context, action: Action, record: &Record) -> Result<(), Rejection> {
        if record.text("title") == Some("forbidden-in-tx") {
            return Err(Rejection::field(
                "title",
                "validation_audit",
                "Refused inside the transaction.",
            )
            .with_message(action.failed_message()));
        }
        let params = [Value::from(action.as_str()), Value::from(record.id())];
        if let Err(e) = db::execute(INSERT, &params) {
            log::error(&format!("audit insert failed: {}", e.message()));
            return Err(Rejection::new(400, action.failed_message()));
        }
        Ok(())
    }

    fn after_commit(changes: &[Change]) -> Result<(), String> {
        let Some(last) = changes.last() else {
            return Ok(());
        };
        kv::set("last_seq", last.seq.to_string());
        let kept = kv::get_text("last_titles").unwrap_or_default();
        let mut titles: Vec<&str> = match kept.as_str() {
            "" => Vec::new(),
            kept => kept.split(',').collect(),
        };
        titles.extend(
            changes
                .iter()
                .map(|c| c.record.text("title").unwrap_or_default()),
        );
        let from = titles.len().saturating_sub(TITLES_KEPT);
        kv::set("last_titles", titles[from..].join(","));
        // Counted last: a reader that sees the new count sees the titles that came with it.
        kv::increment("commits", i64::try_from(changes.len()).unwrap_or(i64::MAX));
        Ok(())
    }

    fn handle(_ctx: &Context, req: &Request) -> Response {
        if req.route != STATS {
            return Response::not_found();
        }
        let last_seq = kv::get_text("last_seq")
            .and_then(|s| s.parse::<i64>().ok())
            .unwrap_or(0);
        let body = Object::new()
            .int("commits", kv::counter("commits"))
            .int("lastSeq", last_seq)
            .str("titles", &kv::get_text("last_titles").unwrap_or_default())
            .finish();
        Response::json(200, body)
    }
}

ferrobase_plugin::export!(Audit);
