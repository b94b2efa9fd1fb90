#!/usr/bin/env bash
# Checks of deploy/ that need neither root nor a running systemd; scripts/test.sh runs them on the
# binary and plugins it has just built.
#   scripts/deploy-check.sh BINARY PLUGIN.wasm CADDY LITESTREAM
# Needs shellcheck, systemd-analyze (package systemd, 250 or newer for `security --offline`),
# strace, curl, a caddy binary (CADDY) and a litestream 0.5 binary (LITESTREAM); a missing one
# fails the check.
#  1. shellcheck on every shell script in deploy/, scripts/, .ci/ and bench/;
#  2. the unit: `systemd-analyze verify` has nothing to say, `systemd-analyze security` rates it
#     at most 2.0 ("OK"; a dropped sandbox line raises it);
#  3. every system call the server makes while serving (reads, writes, sign-in, a realtime
#     stream, PLUGIN compiled and called, replication on with the Litestream child it supervises
#     shipping the writes to a directory replica, SIGTERM) passes the unit's SystemCallFilter
#     (the child runs under the same filter as the service);
#  4. every key of the sysctl file exists on this kernel;
#  5. deploy/install.sh --root into a throwaway root: the files and modes; a second run changes
#     nothing; an edited config survives a run with a new binary, which keeps the old one as
#     ferrobase.previous; installing ferrobase.previous swaps the two back (the roll back);
#  6. the Caddyfile: Caddy reads it without a warning (formatting included), and what it makes of
#     it still proxies to 127.0.0.1:8090 with flushing on.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

[ $# -eq 4 ] || { echo "usage: scripts/deploy-check.sh BINARY PLUGIN.wasm CADDY LITESTREAM" >&2; exit 2; }
BIN="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
PLUGIN="$2"
CADDY="$3"
LITESTREAM="$4"
[ -x "$BIN" ] || { echo "deploy-check: $BIN is not an executable" >&2; exit 1; }
[ -f "$PLUGIN" ] || { echo "deploy-check: no plugin at $PLUGIN" >&2; exit 1; }
[ -x "$LITESTREAM" ] || { echo "deploy-check: no litestream binary at $LITESTREAM" >&2; exit 1; }
for tool in shellcheck systemd-analyze strace curl "$CADDY"; do
  command -v "$tool" >/dev/null || { echo "deploy-check: $tool is missing" >&2; exit 1; }
done

TMP="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  # The server started under strace, if it is still running (its pid opens the trace).
  if [ -z "$SERVER_PID" ] && [ -s "$TMP/traces/serve.trace" ]; then
    SERVER_PID="$(head -n1 "$TMP/traces/serve.trace" | cut -d' ' -f1)"
  fi
  if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait 2>/dev/null || true; fi
  rm -rf "$TMP"
}
trap cleanup EXIT
fail() { printf 'deploy-check: FAILED: %s\n' "$*" >&2; exit 1; }
ok() { printf '  ok: %s\n' "$*"; }

# 1. shellcheck
mapfile -t SCRIPTS < <(find deploy scripts .ci bench -type f -not -path '*/node_modules/*' \
  -exec sh -c 'case "$1" in *.sh) exit 0;; esac; head -n1 "$1" | grep -qE "^#!.*[/ ](ba|da)?sh\b"' _ {} \; \
  -print | sort)
shellcheck "${SCRIPTS[@]}" || fail "shellcheck"
ok "shellcheck: ${SCRIPTS[*]}"

# 2. the unit, with ExecStart pointed at a binary that exists here (verify checks that it does)
UNIT="$TMP/ferrobase.service"
sed "s#^ExecStart=/usr/local/bin/ferrobase #ExecStart=$BIN #" deploy/ferrobase.service > "$UNIT"
grep -q "^ExecStart=$BIN serve " "$UNIT" || fail "the unit's ExecStart is not /usr/local/bin/ferrobase serve ..."
# verify exits 0 on some warnings (an unknown key, for one): any output is a failure.
verify_out="$(systemd-analyze verify "$UNIT" 2>&1)" || fail "systemd-analyze verify: $verify_out"
[ -z "$verify_out" ] || fail "systemd-analyze verify: $verify_out"
ok "systemd-analyze verify: no complaints"
# The threshold is on systemd's 0-100 scale (20 is the 2.0 it prints).
systemd-analyze security --offline=true --threshold=20 "$UNIT" > "$TMP/security.txt" 2>&1 \
  || { cat "$TMP/security.txt"; fail "systemd-analyze security: exposure above 2.0"; }
ok "systemd-analyze security: $(grep -o 'exposure level.*' "$TMP/security.txt")"

# 3. system calls against the unit's filter
expand() { # a syscall or @group -> syscall names
  case "$1" in
    @*) systemd-analyze syscall-filter "$1" | tail -n +2 | sed 's/^ *//; /^#/d; /^$/d' \
          | while read -r name; do expand "$name"; done ;;
    *) printf '%s\n' "$1" ;;
  esac
}
: > "$TMP/allow"
: > "$TMP/deny"
while IFS= read -r line; do
  spec="${line#SystemCallFilter=}"
  if [ "${spec#\~}" != "$spec" ]; then list=deny; spec="${spec#\~}"; else list=allow; fi
  for item in $spec; do expand "$item" >> "$TMP/$list"; done
done < <(grep '^SystemCallFilter=' deploy/ferrobase.service)
sort -u "$TMP/allow" > "$TMP/allow.s"
sort -u "$TMP/deny" > "$TMP/deny.s"
comm -23 "$TMP/allow.s" "$TMP/deny.s" > "$TMP/permitted"
[ -s "$TMP/permitted" ] || fail "no SystemCallFilter allow list in the unit"
# Every other call the kernel knows is refused with EPERM under strace, as the unit's filter
# (SystemCallErrorNumber=EPERM) refuses it: the serve step runs as it would under the unit.
expand @known | sort -u | comm -23 - "$TMP/permitted" > "$TMP/refused"
REFUSE="inject=$(sed 's/^/?/' "$TMP/refused" | paste -sd, -):error=EPERM"
# Calls outside the filter that are known to be harmless when refused, and why:
# - fchown, fchownat: Litestream 0.5 gives the files it creates next to a database the
#   database's owner (here the service user itself) and ignores a failure.
TOLERATED="fchown fchownat"

# The unit runs the server as an unprivileged user; so does this (as root, SQLite would also
# chown its journal files, which no service user does).
DATA="$TMP/srv"
TRACES="$TMP/traces"
mkdir -p "$DATA/plugins" "$DATA/bin" "$DATA/replica" "$TRACES"
cp "$PLUGIN" "$DATA/plugins/"
# Replication on, as a user turns it on: the serve step runs Litestream as its child.
cp "$LITESTREAM" "$DATA/bin/litestream"
AS_USER=()
if [ "$(id -u)" -eq 0 ]; then
  chown -R 65534:65534 "$DATA" "$TRACES"
  chmod 755 "$TMP"
  AS_USER=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fi
# strace -f follows every thread; one trace file per process (superuser upsert, then serve).
# From inside $DATA, so that no pb.toml of the current directory is read.
run_traced() { # TRACE_FILE ARGS...: the binary as the service user, under strace
  local trace="$1"
  shift
  (cd "$DATA" && exec "${AS_USER[@]}" env -u FERROBASE_CONFIG -u FERROBASE_PLUGINS_DIR \
    strace -f -qq -e "$REFUSE" -o "$trace" "$BIN" "$@")
}
run_traced "$TRACES/upsert.trace" superuser upsert ops@example.com 'deploy-check-password' \
  --dir "$DATA/pb_data" >/dev/null
printf '[replication]\nenabled = true\nurl = "%s"\nlitestream = "%s"\nrequired = true\n' \
  "$DATA/replica" "$DATA/bin/litestream" > "$DATA/pb.toml"
run_traced "$TRACES/serve.trace" serve --http 127.0.0.1:0 --dir "$DATA/pb_data" > "$TMP/serve.log" 2>&1 &
STRACE_PID=$!
base=""
for _ in $(seq 1 300); do
  # The address it bound, from its start line (colour codes, if any, stripped).
  addr="$(sed 's/\x1b\[[0-9;]*m//g' "$TMP/serve.log" | grep -oE 'addr=127\.0\.0\.1:[0-9]+' | head -n1 || true)"
  addr="${addr#addr=}"
  if [ -n "$addr" ] && curl -fsS "http://$addr/api/health" >/dev/null 2>&1; then base="http://$addr"; break; fi
  sleep 0.1
done
[ -n "$base" ] || { cat "$TMP/serve.log"; fail "the server did not answer /api/health"; }
SERVER_PID="$(head -n1 "$TRACES/serve.trace" | cut -d' ' -f1)"
json=(-fsS -H 'content-type: application/json')
token="$(curl "${json[@]}" -X POST "$base/api/collections/_superusers/auth-with-password" \
  -d '{"identity":"ops@example.com","password":"deploy-check-password"}' | sed -E 's/.*"token":"([^"]+)".*/\1/')"
curl "${json[@]}" -H "Authorization: $token" -X POST "$base/api/collections" >/dev/null \
  -d '{"name":"notes","type":"base","listRule":"","createRule":"","fields":[{"name":"title","type":"text"}]}'
curl "${json[@]}" -X POST "$base/api/collections/notes/records" -d '{"title":"hello"}' >/dev/null
listed="$(curl -fsS "$base/api/collections/notes/records?filter=title~'hell'")"
[[ "$listed" == *'"totalItems":1'* ]] || fail "the record written was not read back: $listed"
[ "$(curl -fsS -X POST "$base/api/posts-api/echo" -d 'echo')" = echo ] \
  || { cat "$TMP/serve.log"; fail "the plugin's route did not answer"; }
# The stream stays open: curl ends it after a second (and exits non-zero for that).
curl -sS -N --max-time 1 "$base/api/realtime" > "$TMP/realtime.txt" 2>/dev/null || true
grep -q PB_CONNECT "$TMP/realtime.txt" || fail "no realtime stream"
# Litestream ships the writes: the replica gets data.db's files (a sync a second by default).
for _ in $(seq 1 150); do
  [ -n "$(find "$DATA/replica" -path '*data.db*' -type f -print -quit)" ] && break
  sleep 0.2
done
[ -n "$(find "$DATA/replica" -path '*data.db*' -type f -print -quit)" ] \
  || { cat "$TMP/serve.log"; fail "Litestream wrote nothing to the replica"; }
grep -q "execve(\"$DATA/bin/litestream\"" "$TRACES/serve.trace" || fail "the trace has no litestream child"
kill -TERM "$SERVER_PID"
wait "$STRACE_PID" || fail "the server did not exit 0 on SIGTERM"
SERVER_PID=""
# Only the server's own calls: setpriv's, before it runs the binary, are not the server's.
awk -v bin="$BIN" 'index($0, "execve(\"" bin "\"") { on = 1 }
  on && match($0, /^[0-9]+ +(<\.\.\. )?[a-z_0-9]+/) {
    s = substr($0, RSTART, RLENGTH); sub(/^[0-9]+ +(<\.\.\. )?/, "", s); print s }' \
  "$TRACES/upsert.trace" "$TRACES/serve.trace" | sort -u > "$TMP/used"
outside="$(comm -23 "$TMP/used" "$TMP/permitted" | tr '\n' ' ')"
unexpected=""
for call in $outside; do
  case " $TOLERATED " in *" $call "*) ;; *) unexpected="$unexpected $call" ;; esac
done
[ -z "$unexpected" ] || fail "system calls outside the unit's SystemCallFilter:$unexpected"
refused_calls="$(grep -c 'EPERM (Operation not permitted) (INJECTED)' "$TRACES/serve.trace" || true)"
[ -z "$outside" ] || [ "$refused_calls" -gt 0 ] || fail "strace did not refuse the calls outside the filter"
ok "system calls: $(wc -l < "$TMP/used") distinct (the server's and its Litestream child's)," \
  "all inside the unit's SystemCallFilter but ${outside:-none}($refused_calls calls refused with EPERM" \
  "as the unit refuses them, and everything worked);" \
  "$(grep -c 'PROT_EXEC' "$TRACES/serve.trace" || true) mprotect/mmap calls with PROT_EXEC (the JIT: why no MemoryDenyWriteExecute)"

# 4. sysctl keys
while read -r key; do
  [ -e "/proc/sys/${key//.//}" ] || fail "deploy/99-ferrobase.conf: no sysctl $key on this kernel"
done < <(sed -nE 's/^([a-z0-9_.]+) *=.*/\1/p' deploy/99-ferrobase.conf)
ok "sysctl keys exist: $(sed -nE 's/^([a-z0-9_.]+) *=.*/\1/p' deploy/99-ferrobase.conf | tr '\n' ' ')"

# 5. install.sh into a throwaway root
R="$TMP/root"
snapshot() { (cd "$R" && find . -printf '%p %m %s %T@ %i\n' | sort); }
deploy/install.sh --root "$R" --binary "$BIN" > "$TMP/install1.txt"
for spec in usr/local/bin/ferrobase:755:"$BIN" \
    etc/systemd/system/ferrobase.service:644:deploy/ferrobase.service \
    etc/sysctl.d/99-ferrobase.conf:644:deploy/99-ferrobase.conf \
    etc/ferrobase/pb.toml:644:pb.toml; do
  IFS=: read -r path mode src <<< "$spec"
  [ -f "$R/$path" ] || fail "install.sh did not install /$path"
  [ "$(stat -c %a "$R/$path")" = "$mode" ] || fail "/$path has mode $(stat -c %a "$R/$path"), not $mode"
  cmp -s "$src" "$R/$path" || fail "/$path differs from $src"
done
grep -q '^Environment=FERROBASE_CONFIG=/etc/ferrobase/pb.toml$' "$R/etc/systemd/system/ferrobase.service" \
  || fail "the unit does not read the config install.sh installs"
before="$(snapshot)"
deploy/install.sh --root "$R" --binary "$BIN" > "$TMP/install2.txt"
[ "$before" = "$(snapshot)" ] || fail "a second install.sh run changed files: $(diff <(echo "$before") <(snapshot))"
if grep -q 'installed' "$TMP/install2.txt"; then
  fail "a second install.sh run reported: $(cat "$TMP/install2.txt")"
fi
echo '# edited by the operator' >> "$R/etc/ferrobase/pb.toml"
printf 'the next version\n' > "$TMP/next-binary"
deploy/install.sh --root "$R" --binary "$TMP/next-binary" > "$TMP/install3.txt"
tail -n1 "$R/etc/ferrobase/pb.toml" | grep -q 'edited by the operator' || fail "install.sh overwrote an edited config"
cmp -s "$TMP/next-binary" "$R/usr/local/bin/ferrobase" || fail "install.sh did not replace the binary"
cmp -s "$BIN" "$R/usr/local/bin/ferrobase.previous" || fail "install.sh did not keep the replaced binary"
# The roll back deploy/README.md describes: install the previous binary; the two swap.
deploy/install.sh --root "$R" --binary "$R/usr/local/bin/ferrobase.previous" > "$TMP/install4.txt"
cmp -s "$BIN" "$R/usr/local/bin/ferrobase" || fail "rolling back did not restore the previous binary"
cmp -s "$TMP/next-binary" "$R/usr/local/bin/ferrobase.previous" || fail "rolling back lost the newer binary"
ok "install.sh --root: files and modes, second run changes nothing, config kept, old binary kept, roll back swaps"

# 6. the Caddyfile, as Caddy reads it (adapt only: nothing listens, no certificate is asked for)
"$CADDY" adapt --adapter caddyfile --config deploy/Caddyfile > "$TMP/caddy.json" 2> "$TMP/caddy.err" \
  || fail "caddy adapt: $(cat "$TMP/caddy.err")"
[ ! -s "$TMP/caddy.err" ] || fail "caddy adapt warns: $(cat "$TMP/caddy.err")"
caddy_json="$(tr -d ' \t\n' < "$TMP/caddy.json")"
# The realtime route's own transport, keep-alive off: each stream opens a connection of its own
# (served by Ferrobase with lean buffers; http/stream.rs).
for want in '"dial":"127.0.0.1:8090"' '"flush_interval":-1' '"keep_alive":{"enabled":false}' \
  '"path":["/api/realtime"]'; do
  [[ "$caddy_json" == *"$want"* ]] || fail "the Caddyfile no longer gives $want"
done
ok "Caddyfile: read by $("$CADDY" version | cut -d' ' -f1) without warnings, proxies to 127.0.0.1:8090 unbuffered, streams on connections of their own"
