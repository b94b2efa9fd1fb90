//! auth-guard: an email-domain allow-list and an audit trail for sign-ins on `users`.
//!
//! - Before a sign-in on `users` gets its token (password, OTP, OAuth2 or a refresh): when
//!   `allowed_domains` is set in its pb.toml config (comma-separated, e.g. `"example.com"`),
//!   a record whose email's domain is not listed is refused with 403
//!   `{"status":403,"message":"Sign-ins from this email domain are not allowed.","data":{}}`.
//! - Every sign-in it lets through is counted in kv per method (`signins:<method>`) and its
//!   answer gets `meta.guard = "checked"` and `meta.signIns` (the record's count so far).
//! - `GET /api/auth-guard/stats`: `{"password":N,"otp":N,"oauth2":N,"refresh":N}`.
//!
//! Load it by putting `auth_guard.wasm` (built into `plugins/target/wasm32-wasip2/release/`) in
//! the server's plugins folder, with its grant and config:
//!
//! ```toml
//! [plugins.auth-guard]
//! grants = ["kv"]
//! [plugins.auth-guard.config]
//! allowed_domains = "example.com"
//! ```

use ferrobase_plugin::json::Object;
use ferrobase_plugin::prelude::*;

const VERSION: &str = "1.0.0";
const STATS: &str = "/api/auth-guard/stats";
const METHODS: [&str; 4] = ["password", "otp", "oauth2", "refresh"];

struct AuthGuard;

impl Plugin for AuthGuard {
    fn manifest() -> Manifest {
        Manifest::new("auth-guard", VERSION)
            .auth_hook("users")
            .route("GET", STATS)
            .wants(&["kv"])
    }

    fn authenticate(
        _ctx: &Context,
        attempt: &AuthAttempt,
    ) -> Result<Vec<(String, String)>, Rejection> {
        let email = attempt.auth_record.text("email").unwrap_or_default();
        if let Some(allowed) = config::get("allowed_domains") {
            let domain = email.rsplit_once('@').map(|(_, d)| d).unwrap_or_default();
            let ok = allowed
                .split(',')
                .map(str::trim)
                .any(|d| !d.is_empty() && d.eq_ignore_ascii_case(domain));
            if !ok {
                return Err(Rejection::new(
                    403,
                    "Sign-ins from this email domain are not allowed.",
                ));
            }
        }
        kv::increment(&format!("signins:{}", attempt.method), 1);
        let mine = kv::increment(&format!("record:{}", attempt.auth_record.id()), 1);
        Ok(vec![
            ("guard".to_owned(), "checked".to_owned()),
            ("signIns".to_owned(), mine.to_string()),
        ])
    }

    fn handle(_ctx: &Context, _req: &Request) -> Response {
        let mut body = Object::new();
        for m in METHODS {
            body = body.int(m, kv::counter(&format!("signins:{m}")));
        }
        Response::json(200, body.finish())
    }
}

ferrobase_plugin::export!(AuthGuard);
