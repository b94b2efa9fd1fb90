//! misbehave: a test fixture for the host's sandbox and budgets, not an example.
//!
//! `GET /api/misbehave/{what}`:
//! - `loop`: spins forever; `alloc`: allocates 1 MiB blocks without end; `panic`: panics;
//!   `trap`: executes `unreachable`. The host must stop each and answer for it.
//! - `ok`: `{"ok":true}`.
//! - `env`: what the sandbox shows: `{"envVars":N,"fsReadable":bool,"fsError":"...",
//!   "clockAfter2001":bool}` (expected: 0 variables, no filesystem, a clock that is not real).
//! - `fetch?url=...`: an outbound GET without the `http` grant (expected to fail):
//!   `{"ok":bool,"status":N,"error":"..."}`.
//!
//! Also a before-create hook on `posts`: titles `hook-loop`, `hook-panic` and `hook-alloc`
//! misbehave the same way; anything else proceeds.
//!
//! Load it by putting `misbehave.wasm` (built into `plugins/target/wasm32-wasip2/release/`)
//! in the server's plugins folder (`[plugins] dir` in pb.toml), with its grants:
//!
//! ```toml
//! [plugins.misbehave]
//! grants = ["db:read"]
//! ```

use ferrobase_plugin::json::Object;
use ferrobase_plugin::prelude::*;

const VERSION: &str = "1.0.0";
const ROUTE: &str = "/api/misbehave/{what}";
const BLOCK_BYTES: usize = 1 << 20;
const PAGE_BYTES: usize = 4096;

struct Misbehave;

impl Plugin for Misbehave {
    fn manifest() -> Manifest {
        Manifest::new("misbehave", VERSION)
            .route("GET", ROUTE)
            .hook("posts", &[Event::BeforeCreate])
            .wants(&["db:read"])
    }

    fn before_create(ctx: &Context, pending: &Record) -> Result<Verdict, Rejection> {
        match pending.text("title") {
            // Echo the call context into the record, to show what a hook sees.
            Some("hook-context") => Ok(Verdict::proceed().set(
                "note",
                format!(
                    "{} {} {}",
                    ctx.method().unwrap_or_default(),
                    ctx.path().unwrap_or_default(),
                    ctx.remote_ip().unwrap_or_default()
                ),
            )),
            Some("hook-loop") => spin(),
            Some("hook-panic") => panic!("boom"),
            Some("hook-alloc") => allocate_forever(),
            _ => Ok(Verdict::proceed()),
        }
    }

    fn handle(_ctx: &Context, req: &Request) -> Response {
        match req.param("what") {
            Some("loop") => spin(),
            Some("alloc") => allocate_forever(),
            Some("panic") => panic!("boom"),
            Some("trap") => trap(),
            Some("ok") => Response::json(200, r#"{"ok":true}"#),
            Some("env") => Response::json(200, sandbox_facts()),
            Some("fetch") => Response::json(200, fetch(req)),
            _ => Response::not_found(),
        }
    }
}

ferrobase_plugin::export!(Misbehave);

fn spin() -> ! {
    let mut n = 0u64;
    loop {
        n = core::hint::black_box(n.wrapping_add(1));
    }
}

fn allocate_forever() -> ! {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; BLOCK_BYTES];
        // Touch every page so the memory is really used, whatever the allocator does.
        for i in (0..BLOCK_BYTES).step_by(PAGE_BYTES) {
            block[i] = 1;
        }
        blocks.push(core::hint::black_box(block));
    }
}

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    std::process::abort();
}

fn sandbox_facts() -> String {
    const YEAR_2001_SECS: u64 = 978_307_200;
    let env_vars = std::env::vars().count();
    let fs = std::fs::read_dir("/");
    let clock_after_2001 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .is_ok_and(|d| d.as_secs() > YEAR_2001_SECS);
    Object::new()
        .int("envVars", i64::try_from(env_vars).unwrap_or(i64::MAX))
        .bool("fsReadable", fs.is_ok())
        .str(
            "fsError",
            &fs.err().map(|e| e.to_string()).unwrap_or_default(),
        )
        .bool("clockAfter2001", clock_after_2001)
        .finish()
}

fn fetch(req: &Request) -> String {
    let url = req.query_param("url").unwrap_or_default();
    let (ok, status, error) = match http::get(&url) {
        Ok(res) => (true, res.status, String::new()),
        Err(e) => (false, 0, e),
    };
    Object::new()
        .bool("ok", ok)
        .int("status", i64::from(status))
        .str("error", &error)
        .finish()
}
