//! old-abi: a test fixture, not an example. Built against `wit/plugin.wit`, a copy of the SDK's
//! contract whose only change is the package version (`ferrobase:plugin@0.0.9`), so the host
//! must refuse it as an unknown contract version. It uses wit-bindgen directly, not the SDK.
//!
//! Load it by putting `old_abi.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml).

#[allow(unsafe_code, reason = "generated canonical ABI glue")]
mod bindings {
    wit_bindgen::generate!({ world: "plugin", path: "wit" });
}

use bindings::exports::ferrobase::plugin::{
    commit_events, jobs, manifest, record_hooks, routes, transaction_hooks,
};
use bindings::ferrobase::plugin::context::CallContext;
use bindings::ferrobase::plugin::types::{RecordData, Rejection};

struct OldAbi;

impl manifest::Guest for OldAbi {
    fn describe() -> manifest::Manifest {
        manifest::Manifest {
            name: "old-abi".to_owned(),
            version: "0.0.9".to_owned(),
            hooks: Vec::new(),
            routes: Vec::new(),
            jobs: Vec::new(),
            wants: Vec::new(),
            extra: Vec::new(),
        }
    }
}

impl record_hooks::Guest for OldAbi {
    fn before_create(_: &CallContext, _: RecordData) -> Result<record_hooks::Verdict, Rejection> {
        Ok(record_hooks::Verdict::Proceed)
    }

    fn before_update(
        _: &CallContext,
        _: RecordData,
        _: RecordData,
    ) -> Result<record_hooks::Verdict, Rejection> {
        Ok(record_hooks::Verdict::Proceed)
    }

    fn before_delete(_: &CallContext, _: RecordData) -> Result<(), Rejection> {
        Ok(())
    }
}

impl transaction_hooks::Guest for OldAbi {
    fn in_transaction(
        _: &CallContext,
        _: transaction_hooks::Action,
        _: RecordData,
    ) -> Result<(), Rejection> {
        Ok(())
    }
}

impl commit_events::Guest for OldAbi {
    fn after_commit(_: Vec<commit_events::Change>) -> Result<(), String> {
        Ok(())
    }
}

impl routes::Guest for OldAbi {
    fn handle(_: &CallContext, _: routes::HttpRequest) -> routes::HttpResponse {
        routes::HttpResponse {
            status: 404,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }
}

impl jobs::Guest for OldAbi {
    fn run(_: &CallContext, _: String, _: u64) -> Result<(), String> {
        Err("unknown job".to_owned())
    }
}

bindings::export!(OldAbi with_types_in bindings);
