//! route-clash: a test fixture, not an example. It declares `GET /api/collections/posts/records`,
//! which would shadow a native route, so the host must refuse to load it. It depends on the
//! SDK under the key `sdk` (not `ferrobase_plugin`): its manifest reaching the host shows that
//! `export!` works under any dependency key.
//!
//! Load it by putting `route_clash.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml).

use sdk::prelude::*;

struct RouteClash;

impl Plugin for RouteClash {
    fn manifest() -> Manifest {
        Manifest::new("route-clash", "1.0.0").route("GET", "/api/collections/posts/records")
    }

    fn handle(_ctx: &Context, _req: &Request) -> Response {
        Response::json(200, r#"{"shadowed":true}"#)
    }
}

sdk::export!(RouteClash);
