//! fetcher: a test fixture for outbound HTTP, not an example.
//!
//! `GET /api/fetcher/fetch?url=...` GETs `url` through the host and answers
//! `{"ok":bool,"status":N,"error":"..."}` (`ok`: the host made the request; `status`: its answer).
//!
//! Load it by putting `fetcher.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml), with its grants:
//!
//! ```toml
//! [plugins.fetcher]
//! grants = ["http"]
//! http_allow = ["127.0.0.1:8080"]
//! ```

use ferrobase_plugin::json::Object;
use ferrobase_plugin::prelude::*;

const VERSION: &str = "1.0.0";
const FETCH: &str = "/api/fetcher/fetch";

struct Fetcher;

impl Plugin for Fetcher {
    fn manifest() -> Manifest {
        Manifest::new("fetcher", VERSION)
            .route("GET", FETCH)
            .wants(&["http"])
    }

    fn handle(_ctx: &Context, req: &Request) -> Response {
        if req.route != FETCH {
            return Response::not_found();
        }
        let url = req.query_param("url").unwrap_or_default();
        let (ok, status, error) = match http::get(&url) {
            Ok(res) => (true, res.status, String::new()),
            Err(e) => (false, 0, e),
        };
        let body = Object::new()
            .bool("ok", ok)
            .int("status", i64::from(status))
            .str("error", &error)
            .finish();
        Response::json(200, body)
    }
}

ferrobase_plugin::export!(Fetcher);
