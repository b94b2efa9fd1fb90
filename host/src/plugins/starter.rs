//! `ferrobase plugin new NAME`: a ready plugin crate, written from templates and the SDK this
//! binary was built with (vendored into the crate, so the plugin targets exactly the contract
//! the server links, and builds without a checkout of this repository or a registry).

use std::path::{Path, PathBuf};

/// The SDK's files, as this binary was built with them: (path inside the SDK, contents).
const SDK_FILES: &[(&str, &str)] = &[
    ("README.md", include_str!("../../../plugin-sdk/README.md")),
    (
        "wit/plugin.wit",
        include_str!("../../../plugin-sdk/wit/plugin.wit"),
    ),
    ("src/lib.rs", include_str!("../../../plugin-sdk/src/lib.rs")),
    (
        "src/adapter.rs",
        include_str!("../../../plugin-sdk/src/adapter.rs"),
    ),
    (
        "src/context.rs",
        include_str!("../../../plugin-sdk/src/context.rs"),
    ),
    ("src/db.rs", include_str!("../../../plugin-sdk/src/db.rs")),
    (
        "src/json.rs",
        include_str!("../../../plugin-sdk/src/json.rs"),
    ),
    (
        "src/manifest.rs",
        include_str!("../../../plugin-sdk/src/manifest.rs"),
    ),
    (
        "src/record.rs",
        include_str!("../../../plugin-sdk/src/record.rs"),
    ),
    (
        "src/route.rs",
        include_str!("../../../plugin-sdk/src/route.rs"),
    ),
];

/// The folder the vendored SDK goes to, inside the new crate.
const SDK_DIR: &str = "ferrobase-plugin-sdk";

/// The SDK's own manifest: the workspace's settings written out, since the copy stands alone.
fn sdk_manifest() -> String {
    format!(
        r#"[package]
name = "ferrobase-plugin-sdk"
description = "What Ferrobase plugin authors depend on: the WIT contract and typed wrappers over its bindings"
version = "{version}"
edition = "2024"
rust-version = "1.95"
license = "MIT"
publish = false

[lib]
name = "ferrobase_plugin"

[dependencies]
wit-bindgen = {{ version = "0.61", default-features = false, features = ["macros", "realloc", "std"] }}

# Generated bindings need unsafe code; it is denied here and allowed on the one `bindings`
# module only.
[lints.rust]
unsafe_code = "deny"
"#,
        version = env!("CARGO_PKG_VERSION")
    )
}

fn crate_manifest(name: &str, sdk: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

# A wasm component: `cargo build --release --target wasm32-wasip2`.
[lib]
crate-type = ["cdylib"]

[dependencies]
ferrobase-plugin-sdk = {{ path = {sdk:?} }}

# Small components load fast and cost the server less memory per instance.
[profile.release]
opt-level = "s"
lto = true
strip = true
codegen-units = 1
panic = "abort"

# A crate of its own, even inside another workspace's folder.
[workspace]
"#
    )
}

fn type_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn lib_rs(name: &str) -> String {
    let ty = type_name(name);
    format!(
        r#"//! {name}: a Ferrobase plugin. `GET /api/{name}/hello` answers who is asking.
//!
//! Build it with `cargo build --release --target wasm32-wasip2`, then copy
//! `target/wasm32-wasip2/release/{file}.wasm` into the server's plugins folder: it is loaded
//! (or swapped in) while the server runs. The SDK's README (`{SDK_DIR}/README.md`) is the
//! reference: hooks, routes, jobs, grants, and what a client sees.

use ferrobase_plugin::prelude::*;

struct {ty};

impl Plugin for {ty} {{
    fn manifest() -> Manifest {{
        // Add `.hook("posts", &[Event::BeforeCreate])`, `.job("{file}_nightly", "@daily")` or
        // `.wants(&["db:read"])` as the plugin grows; pb.toml grants what it wants.
        Manifest::new("{name}", "0.1.0").route("GET", "/api/{name}/hello")
    }}

    fn handle(ctx: &Context, req: &Request) -> Response {{
        if req.route != "/api/{name}/hello" {{
            return Response::not_found();
        }}
        let who = ctx.auth().map(|p| p.id).unwrap_or_else(|| "guest".to_owned());
        let body = json::Object::new()
            .str("hello", &who)
            .str("plugin", "{name}")
            .finish();
        Response::json(200, body)
    }}
}}

ferrobase_plugin::export!({ty});
"#,
        file = name.replace('-', "_")
    )
}

fn readme(name: &str) -> String {
    format!(
        r#"# {name}

A Ferrobase plugin, started with `ferrobase plugin new {name}`.

```sh
rustup target add wasm32-wasip2                # once
cargo build --release --target wasm32-wasip2
cp target/wasm32-wasip2/release/{file}.wasm /path/to/plugins/   # beside pb_data; loaded live
curl http://127.0.0.1:8090/api/{name}/hello    # {{"hello":"guest","plugin":"{name}"}}
```

`pb.toml` may give it a section of its own (grants, limits, settings it reads with
`config::get`):

```toml
[plugins.{name}]
grants = []        # what its manifest wants: "db:read", "db:write", "kv", "http", "clock"
```

The SDK this plugin builds against is in `{SDK_DIR}/` (the one the server that wrote this crate
was built with); its README is the reference.
"#,
        file = name.replace('-', "_")
    )
}

/// Why `name` cannot name a plugin crate: `None` when it can.
fn name_problem(name: &str) -> Option<String> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !ok {
        return Some(format!(
            "{name:?} is not a plugin name: lowercase letters, digits, - and _, starting with a letter"
        ));
    }
    let route = format!("/api/{name}/hello");
    super::registry::shadows_native(&route)
        .map(|native| format!("{name:?} would put its routes under the built-in {native} routes"))
}

/// Write the crate `name` under `parent`; `sdk` is a path to depend on instead of vendoring
/// the SDK. Returns the crate's folder.
pub(crate) fn new_plugin(parent: &Path, name: &str, sdk: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(problem) = name_problem(name) {
        return Err(problem);
    }
    let dir = parent.join(name);
    if dir.exists() {
        return Err(format!("{} exists already", dir.display()));
    }
    let write = |rel: &str, text: &str| -> Result<(), String> {
        let path = dir.join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
    };
    let sdk_path = match sdk {
        Some(p) => {
            let abs = std::path::absolute(p).map_err(|e| format!("{}: {e}", p.display()))?;
            if !abs.join("Cargo.toml").exists() {
                return Err(format!("{} holds no Cargo.toml", abs.display()));
            }
            abs.display().to_string()
        }
        None => {
            for (rel, text) in SDK_FILES {
                write(&format!("{SDK_DIR}/{rel}"), text)?;
            }
            write(&format!("{SDK_DIR}/Cargo.toml"), &sdk_manifest())?;
            SDK_DIR.to_owned()
        }
    };
    write("Cargo.toml", &crate_manifest(name, &sdk_path))?;
    write("src/lib.rs", &lib_rs(name))?;
    write("README.md", &readme(name))?;
    write(".gitignore", "/target\n")?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sdk_file_is_vendored() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugin-sdk");
        let mut on_disk: Vec<String> = Vec::new();
        for sub in ["src", "wit"] {
            for e in std::fs::read_dir(root.join(sub)).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                on_disk.push(format!("{sub}/{name}"));
            }
        }
        on_disk.push("README.md".into());
        on_disk.sort();
        let mut embedded: Vec<String> = SDK_FILES.iter().map(|(p, _)| (*p).to_owned()).collect();
        embedded.sort();
        assert_eq!(
            embedded, on_disk,
            "a new SDK file must be added to SDK_FILES"
        );
    }

    #[test]
    fn names_are_checked_before_anything_is_written() {
        let dir = tempfile::tempdir().unwrap();
        for bad in [
            "",
            "Hello",
            "9lives",
            "a b",
            "../up",
            "health",
            "collections",
        ] {
            assert!(new_plugin(dir.path(), bad, None).is_err(), "{bad}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let made = new_plugin(dir.path(), "my-plugin", None).unwrap();
        let lib = std::fs::read_to_string(made.join("src/lib.rs")).unwrap();
        assert!(lib.contains("struct MyPlugin;") && lib.contains("\"/api/my-plugin/hello\""));
        assert!(made.join("ferrobase-plugin-sdk/wit/plugin.wit").exists());
        assert!(
            new_plugin(dir.path(), "my-plugin", None).is_err(),
            "exists already"
        );
    }
}
