//! upload-guard: refuses files before they are stored, from what a before-hook is told of the
//! uploads (contract 0.1.3, `Context::uploads`).
//!
//! Before a create or an update of `documents`, each file the write is about to attach must:
//! - weigh at most `max_bytes` (config; 1 MiB when unset);
//! - when `allowed_types` is set (comma-separated content types, e.g. `"image/png,
//!   application/pdf"`), be of one of them, as detected from its bytes (a renamed file does
//!   not pass for another type);
//! - not have a client name ending in one of `blocked_extensions` (comma-separated, without the
//!   dot, compared without case; e.g. `"exe, bat"`).
//!
//! A refused file gets an error on its field, code `validation_upload_refused`, naming the file
//! and the reason; the write is refused with PocketBase's 400 body and nothing is stored. A
//! write that attaches no file is not looked at.
//!
//! Load it by putting `upload_guard.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder, with its config:
//!
//! ```toml
//! [plugins.upload-guard]
//! grants = []
//! [plugins.upload-guard.config]
//! max_bytes = "262144"
//! allowed_types = "image/png, image/jpeg, application/pdf"
//! blocked_extensions = "exe, bat"
//! ```

use ferrobase_plugin::prelude::*;

const VERSION: &str = "1.0.0";
const COLLECTION: &str = "documents";
const DEFAULT_MAX_BYTES: u64 = 1 << 20;
const CODE: &str = "validation_upload_refused";

struct UploadGuard;

impl Plugin for UploadGuard {
    fn manifest() -> Manifest {
        Manifest::new("upload-guard", VERSION)
            .hook(COLLECTION, &[Event::BeforeCreate, Event::BeforeUpdate])
    }

    fn before_create(ctx: &Context, _pending: &Record) -> Result<Verdict, Rejection> {
        check(&ctx.uploads(), Rejection::CREATE_FAILED).map(|()| Verdict::proceed())
    }

    fn before_update(
        ctx: &Context,
        _current: &Record,
        _pending: &Record,
    ) -> Result<Verdict, Rejection> {
        check(&ctx.uploads(), Rejection::UPDATE_FAILED).map(|()| Verdict::proceed())
    }
}

ferrobase_plugin::export!(UploadGuard);

/// The rules, read from the plugin's config on each call (a live config change applies at once).
struct Rules {
    max_bytes: u64,
    allowed_types: Vec<String>,
    blocked_extensions: Vec<String>,
}

impl Rules {
    fn from_config() -> Rules {
        Rules {
            max_bytes: config::get("max_bytes")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_MAX_BYTES),
            allowed_types: list(config::get("allowed_types")),
            blocked_extensions: list(config::get("blocked_extensions")),
        }
    }

    /// Why this file is refused, if it is.
    fn refuses(&self, name: &str, size: u64, content_type: &str) -> Option<String> {
        if size > self.max_bytes {
            return Some(format!(
                "{name} is {size} bytes; the limit is {} bytes.",
                self.max_bytes
            ));
        }
        if !self.allowed_types.is_empty()
            && !self
                .allowed_types
                .iter()
                .any(|t| t.eq_ignore_ascii_case(content_type))
        {
            return Some(format!("{name} is {content_type}, which is not allowed."));
        }
        let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or_default();
        if !ext.is_empty()
            && self
                .blocked_extensions
                .iter()
                .any(|b| b.eq_ignore_ascii_case(ext))
        {
            return Some(format!("{name}: .{ext} files are not allowed."));
        }
        None
    }
}

/// Each field's first refused file becomes that field's error.
fn check(uploads: &[Upload], message: &str) -> Result<(), Rejection> {
    if uploads.is_empty() {
        return Ok(());
    }
    let rules = Rules::from_config();
    let mut refused: Option<Rejection> = None;
    let mut fields: Vec<&str> = Vec::new();
    for u in uploads {
        if fields.contains(&u.field.as_str()) {
            continue;
        }
        if let Some(why) = rules.refuses(&u.original_name, u.size, &u.content_type) {
            fields.push(&u.field);
            refused = Some(match refused {
                None => Rejection::field(&u.field, CODE, &why).with_message(message),
                Some(r) => r.with_field(&u.field, CODE, &why),
            });
        }
    }
    refused.map_or(Ok(()), Err)
}

fn list(v: Option<String>) -> Vec<String> {
    v.unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(max: u64, types: &str, blocked: &str) -> Rules {
        Rules {
            max_bytes: max,
            allowed_types: list(Some(types.into())),
            blocked_extensions: list(Some(blocked.into())),
        }
    }

    #[test]
    fn each_rule_refuses_on_its_own() {
        let r = rules(10, "image/png, application/pdf", "exe, BAT");
        assert_eq!(r.refuses("a.png", 10, "image/png"), None);
        assert!(
            r.refuses("a.png", 11, "image/png")
                .unwrap()
                .contains("limit is 10")
        );
        assert!(
            r.refuses("a.png", 1, "text/plain")
                .unwrap()
                .contains("text/plain")
        );
        assert_eq!(r.refuses("a.pdf", 1, "Application/PDF"), None);
        assert!(
            r.refuses("setup.bat", 1, "image/png")
                .unwrap()
                .contains(".bat")
        );
        assert_eq!(r.refuses("noext", 1, "image/png"), None);
        let open = rules(u64::MAX, "", "");
        assert_eq!(open.refuses("x.exe", 5, "application/x-msdownload"), None);
    }
}
