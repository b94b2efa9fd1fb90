//! Ferrobase: a PocketBase-compatible backend. The `ferrobase` binary is a thin wrapper over
//! [`run`]; [`testkit`] opens the query compiler to benches, fuzzing and tests. Everything else is
//! crate-private: the HTTP API is the product's interface.

mod api;
mod app;
mod auth;
mod backups;
mod cli;
mod config;
mod cron;
mod dashboard;
mod files;
mod http;
mod jobs;
mod logs;
mod metrics;
mod plugins;
mod query;
mod realtime;
mod records;
mod replication;
mod schema;
mod settings;
mod store;
pub mod testkit;

pub use cli::run;

/// The unit tests' generator of cases (xorshift64 from `seed`): each call gives a number below
/// its argument.
#[cfg(test)]
pub(crate) fn test_numbers(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

/// Stack size of every thread that handles request data (the runtime's workers and blocking
/// threads, the writer): room for JSON nested to `schema::value::JSON_DEPTH_MAX` levels.
const THREAD_STACK_BYTES: usize = 32 << 20;

/// Mark the calling thread as a batch thread (Linux's `SCHED_BATCH`): it gets its fair share of
/// the CPU but does not preempt the request workers when it wakes. For the writer and the epoch
/// ticker: on a busy core the worker goes on taking requests until it waits, so the writer then
/// finds a larger group to commit at once and the ticker's wake-ups stop cutting into requests.
/// With an idle core the thread runs at once, as before. Best effort: elsewhere a no-op.
pub(crate) fn batch_thread() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        #[allow(
            unsafe_code,
            reason = "a plain syscall on the calling thread; see SAFETY"
        )]
        // SAFETY: `param` is a valid sched_param that outlives the call; pid 0 is this thread.
        let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
        if rc != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "SCHED_BATCH refused");
        }
    }
}
