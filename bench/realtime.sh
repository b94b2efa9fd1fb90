#!/usr/bin/env bash
# Realtime (SSE) under load, ferrobase against the reference PocketBase 0.40.6. From a fresh clone:
#
#   bench/realtime.sh                    # memory, list, fanout, sustain on both servers (about 10-15 min)
#   bench/realtime.sh --quick            # small counts, short runs (a smoke test, about 2 min)
#   bench/realtime.sh --only fanout --servers ferrobase
#   bench/realtime.sh --help             # every option (they belong to bench/realtime.py)
#
# Before handing over to bench/realtime.py it
#   1. builds ferrobase (cargo build --release -p ferrobase)          -- skip with BENCH_SKIP_BUILD=1
#   2. builds the load tool bench/realtime/ (its own Cargo project, not in the workspace)
# The reference PocketBase and wrk are installed by bench/run.sh; run it once first if they are missing.
# Results: the table on stdout and in bench/results/realtime-latest.md (and realtime-<run id>.md); one
# JSON line per scenario and server appended to bench/results/realtime.jsonl. Scratch: bench/work/.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
cd "$ROOT"

for arg in "$@"; do
  case "$arg" in -h|--help) exec python3 -B "$HERE/realtime.py" --help;; esac
done

say() { printf '[realtime.sh] %s\n' "$*" >&2; }

if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  say "cargo build --release -p ferrobase"
  cargo build --release -p ferrobase
fi
[[ -x target/release/ferrobase ]] || { say "target/release/ferrobase is missing"; exit 1; }
[[ -x .venv-ref/bin/pocketbase ]] || { say "the reference PocketBase is missing: run bench/run.sh --quick once"; exit 1; }
command -v wrk >/dev/null || { say "wrk is missing: run bench/run.sh --quick once (it installs it)"; exit 1; }

# the load tool (offline first: its lockfile only holds crates the workspace already uses)
say "building bench/realtime"
TOOL=(cargo build --release --quiet --manifest-path "$HERE/realtime/Cargo.toml" --target-dir "$HERE/work/target")
"${TOOL[@]}" --offline 2>/dev/null || "${TOOL[@]}"

exec python3 -B "$HERE/realtime.py" --root "$ROOT" "$@"
