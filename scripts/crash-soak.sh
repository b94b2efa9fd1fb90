#!/usr/bin/env bash
# The long crash run: the test command's crash tests (host/tests/it/crash.rs) with many more kills.
# Writers on 4 connections create, update and delete records; the release binary is SIGKILLed at
# a random moment and restarted on the same data, FERROBASE_CRASH_KILLS times (default 200) per
# test; after each restart every acknowledged write must be there exactly, nothing half-written,
# `PRAGMA integrity_check` ok, (audit variant) one audit row per committed write, and (file
# variant, each write uploading a file) every record's file in place with its bytes, no file
# that no record names, nothing left in the upload folder.
#
#   scripts/crash-soak.sh                          # every variant, 200 kills each
#   scripts/crash-soak.sh acknowledged_writes      # only the plain one
#   scripts/crash-soak.sh uploaded_files           # only the file one
#   FERROBASE_CRASH_KILLS=500 FERROBASE_CRASH_SEED=7 scripts/crash-soak.sh
#
# Each test prints `crash: Report { kills, acked, in_flight_applied, in_flight_lost, records }`;
# a loss fails the test, naming the record, what was acknowledged and what is on disk.
# Servers listen on 127.0.0.1 only. The audit variant needs the plugins built (the
# wasm32-wasip2 target; scripts/test.sh sets up the rest).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export FERROBASE_CRASH_KILLS="${FERROBASE_CRASH_KILLS:-200}"
filter="crash::${1:-}"
exec cargo test --release -p ferrobase --test it -- "$filter" --nocapture --test-threads 1
