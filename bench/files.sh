#!/usr/bin/env bash
# Files under load (uploads, downloads, cached thumbnails, peak RSS under big uploads), ferrobase
# against the reference PocketBase 0.40.6 in one run. From a fresh clone:
#
#   bench/files.sh                         # every scenario, 2 reps x 6 s per server (about 3 min)
#   bench/files.sh --only download_1m --reps 3
#   bench/files.sh --help                  # every option (they belong to bench/files.py)
#
# It builds ferrobase first (skip with BENCH_SKIP_BUILD=1). The reference and wrk are installed by
# bench/run.sh; run it once first if they are missing. Results: stdout, bench/results/files-<run>.md
# and one JSON line per run in bench/results/files.jsonl. Scratch data dirs: bench/work/files/.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
cd "$ROOT"
for arg in "$@"; do
  case "$arg" in -h|--help) exec python3 -B "$HERE/files.py" --root "$ROOT" --help;; esac
done
if [[ "${BENCH_SKIP_BUILD:-0}" != 1 ]]; then
  cargo build --release -p ferrobase
fi
[[ -x .venv-ref/bin/pocketbase ]] || { echo "run bench/run.sh once first (it installs the reference)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "run bench/run.sh once first (it installs wrk)" >&2; exit 1; }
exec python3 -B "$HERE/files.py" --root "$ROOT" "$@"
