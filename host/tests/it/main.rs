//! The integration suite as one test binary (one link, one process; `cargo test -p ferrobase`
//! runs it). Servers run in-process on a pre-bound port (`common::Server::start`); the tests that
//! need the process itself (SIGTERM and the WAL, memory use, the CLI, pb_data written by the
//! reference) spawn the built binary. Tests that need the reference PocketBase, npm or the
//! wasm32-wasip2 target or moto's S3 server skip with a one-line message when those are missing, unless
//! `FERROBASE_TEST_ALL=1` (set by `scripts/test.sh`) makes a missing one a failure.

mod common;
mod rng;

mod advice;
mod authflows;
mod backups;
mod batch;
mod bruteforce;
mod cache;
mod compat;
mod crash;
mod dashboard;
mod differential;
mod files;
mod fuzz_corpus;
mod http;
mod logs;
mod manage;
mod metrics;
mod oauth2;
mod operate;
mod plugins;
mod query_snapshots;
mod realtime;
mod replication;
mod s3;
mod security;
mod settings;
mod thumbs;
mod tidy;
mod tokens;
