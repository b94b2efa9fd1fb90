//! bad-manifest: a test fixture, not an example. Its manifest hooks `no_such_collection`, so the
//! host must refuse to load it.
//!
//! Load it by putting `bad_manifest.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml).

use ferrobase_plugin::prelude::*;

struct BadManifest;

impl Plugin for BadManifest {
    fn manifest() -> Manifest {
        Manifest::new("bad-manifest", "1.0.0").hook("no_such_collection", &[Event::BeforeCreate])
    }
}

ferrobase_plugin::export!(BadManifest);
