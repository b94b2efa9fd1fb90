//! The host side of `plugin-sdk/wit` (package `ferrobase:plugin@0.1.3`; components built against
//! 0.1.0, 0.1.1 and 0.1.2 link to it), generated at build time: the world `plugin`, and in `auth` the
//! world `plugin-auth`, of which the host uses only its one addition, the auth hook.

wasmtime::component::bindgen!({
    path: "../plugin-sdk/wit",
    world: "plugin",
    imports: { default: async | trappable },
    exports: { default: async },
    with: { "ferrobase:plugin/context.call-context": super::host::CallCtx },
});

/// The world `plugin-auth`. Its imports are the ones above (not generated twice); a component
/// of the world `plugin` simply has no `auth-hooks` export, which the host looks up on its own.
pub(crate) mod auth {
    wasmtime::component::bindgen!({
        path: "../plugin-sdk/wit",
        world: "plugin-auth",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "ferrobase:plugin/types": super::ferrobase::plugin::types,
            "ferrobase:plugin/context": super::ferrobase::plugin::context,
            "ferrobase:plugin/db": super::ferrobase::plugin::db,
            "ferrobase:plugin/log": super::ferrobase::plugin::log,
            "ferrobase:plugin/config": super::ferrobase::plugin::config,
            "ferrobase:plugin/kv": super::ferrobase::plugin::kv,
            "ferrobase:plugin/http": super::ferrobase::plugin::http,
        },
    });
}
