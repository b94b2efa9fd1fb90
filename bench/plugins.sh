#!/usr/bin/env bash
# What wasm plugins cost: the in-process bench (one before-create hook call, load times) and the HTTP
# bench (create and list, ferrobase with plugins vs without), in one run. From a fresh clone:
#
#   bench/plugins.sh                 # 3 reps x 10 s after 3 s warm-up per mode (about 5 min, plus builds)
#   bench/plugins.sh --quick         # 1 rep x 3 s (a smoke test)
#   bench/plugins.sh --only create --reps 5
#   bench/plugins.sh --help          # every option (they belong to bench/plugins.py)
#
# Before handing over to bench/plugins.py it
#   1. builds ferrobase (cargo build --release -p ferrobase)                 -- skip with BENCH_SKIP_BUILD=1
#   2. builds the example plugins when missing (wasm32-wasip2; js-hello with npm ci && node build.mjs)
#   3. installs wrk with apt-get if it is missing
#   4. runs `cargo bench -p ferrobase --bench plugins` (hook-call percentiles, cold/cached load per plugin)
#                                                                            -- skip with BENCH_SKIP_MICRO=1
# Results: the tables on stdout and in bench/results/plugins-latest.md (and plugins-<run id>.md); one JSON
# line per run appended to bench/results/plugins.jsonl. Scratch (data template, run copy, logs): bench/work/.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
cd "$ROOT"

for arg in "$@"; do
  case "$arg" in -h|--help) exec python3 -B "$HERE/plugins.py" --help;; esac
done

say() { printf '[plugins.sh] %s\n' "$*" >&2; }

# 1. ferrobase
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  say "cargo build --release -p ferrobase"
  cargo build --release -p ferrobase
fi
[[ -x target/release/ferrobase ]] || { say "target/release/ferrobase is missing"; exit 1; }

# 2. the example plugins
WASM=plugins/target/wasm32-wasip2/release
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]] || ! ls "$WASM"/{slugger,posts_api,cleanup,audit}.wasm >/dev/null 2>&1; then
  say "cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml"
  cargo build --release --target wasm32-wasip2 --manifest-path plugins/Cargo.toml
fi
if [[ ! -f plugins/js-hello/dist/js-hello.wasm ]]; then
  say "building js-hello: (cd plugins/js-hello && npm ci && node build.mjs)"
  (cd plugins/js-hello && npm ci && node build.mjs)
fi

# 3. wrk
if ! command -v wrk >/dev/null; then
  say "wrk not found: apt-get install -y wrk"
  SUDO=""; [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null && SUDO="sudo"
  if ! { $SUDO apt-get install -y wrk >/dev/null || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y wrk >/dev/null; }; }; then
    say "could not install wrk with apt-get; install it (https://github.com/wg/wrk) and run again"
    exit 1
  fi
fi

# 4. the in-process bench (its tables go into the same results file)
mkdir -p "$HERE/work"
MICRO="$HERE/work/plugins-micro.txt"
rm -f "$MICRO"
if [[ "${BENCH_SKIP_MICRO:-0}" != 1 ]]; then
  say "cargo bench -p ferrobase --bench plugins"
  timeout 1800 cargo bench -p ferrobase --bench plugins -- --no-build | tee "$MICRO"
fi

exec python3 -B "$HERE/plugins.py" --root "$ROOT" --micro "$MICRO" "$@"
