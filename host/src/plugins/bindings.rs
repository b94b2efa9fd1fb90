//! The host side of `plugin-sdk/wit` (package `ferrobase:plugin@0.1.1; components built against 0.1.0 link to it`), generated at build time.

wasmtime::component::bindgen!({
    path: "../plugin-sdk/wit",
    world: "plugin",
    imports: { default: async | trappable },
    exports: { default: async },
    with: { "ferrobase:plugin/context.call-context": super::host::CallCtx },
});
