#!/bin/sh
# Install Ferrobase as a systemd service on a Debian or Ubuntu host. Idempotent: a second run
# changes nothing, and a run with a new binary replaces only the binary (and restarts).
#
#   sudo deploy/install.sh [--binary PATH] [--root DIR]
#
#   --binary PATH  the server binary (default: target/dist/ferrobase of this checkout, built by
#                  `cargo build --profile dist -p ferrobase`)
#   --root DIR     install the files under DIR instead of / (a throwaway root, for tests or image
#                  building); then no user is created, no sysctl is applied and systemctl is not
#                  run, since those act on the running system.
#
# Files (under the root):
#   /usr/local/bin/ferrobase               the binary; the one it replaces stays beside it as
#                                          ferrobase.previous (for a roll back)
#   /etc/systemd/system/ferrobase.service  the unit; put local changes in a drop-in
#                                          (`systemctl edit ferrobase`), which this never touches
#   /etc/ferrobase/pb.toml                 the annotated default config, only if none exists
#   /etc/sysctl.d/99-ferrobase.conf        kernel settings for many connections
# On the real root also: the `ferrobase` system user, the sysctl settings applied, the service
# enabled and started, or restarted when its binary or unit changed.
set -eu
umask 022

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
root=/
binary=$repo/target/dist/ferrobase

say() { printf 'install: %s\n' "$*"; }
die() {
	printf 'install: error: %s\n' "$*" >&2
	exit 1
}

while [ $# -gt 0 ]; do
	case $1 in
	--root | --binary)
		[ $# -ge 2 ] || die "$1 needs a path"
		if [ "$1" = --root ]; then root=$2; else binary=$2; fi
		shift 2
		;;
	-h | --help)
		sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument: $1 (see --help)" ;;
	esac
done

[ -f "$binary" ] || die "no binary at $binary (build it with: cargo build --profile dist -p ferrobase, or pass --binary PATH)"
for f in "$here/ferrobase.service" "$here/99-ferrobase.conf" "$repo/pb.toml"; do
	[ -f "$f" ] || die "missing $f (run this script from a Ferrobase checkout)"
done

if [ "$root" != / ]; then
	mkdir -p "$root"
	root=$(cd "$root" && pwd)
fi
if [ "$root" = / ]; then
	[ "$(id -u)" -eq 0 ] || die "installing on this system needs root (sudo), or pass --root DIR"
	command -v systemctl >/dev/null || die "systemctl not found: this installs a systemd service"
	prefix=
else
	prefix=$root
fi

# put SRC DEST MODE: copy SRC to DEST with MODE unless DEST already has those bytes and that mode.
# The new file is written beside DEST and renamed over it, so DEST is never half-written (and a
# running binary is replaced, not overwritten). Sets `changed` to 1 when it wrote something.
changed=0
put() {
	if [ -f "$2" ] && cmp -s "$1" "$2" && [ "$(stat -c %a "$2")" = "$3" ]; then
		say "unchanged $2"
		return 0
	fi
	mkdir -p "$(dirname "$2")"
	cp "$1" "$2.new.$$"
	chmod "$3" "$2.new.$$"
	if [ "${keep_previous:-0}" = 1 ] && [ -f "$2" ]; then
		ln -f "$2" "$2.previous"
		say "kept the replaced file as $2.previous"
	fi
	mv -f "$2.new.$$" "$2"
	say "installed $2 (mode $3)"
	changed=1
}

restart=0
keep_previous=1
put "$binary" "$prefix/usr/local/bin/ferrobase" 755
keep_previous=0
[ "$changed" = 0 ] || restart=1
changed=0
put "$here/ferrobase.service" "$prefix/etc/systemd/system/ferrobase.service" 644
[ "$changed" = 0 ] || restart=1
put "$here/99-ferrobase.conf" "$prefix/etc/sysctl.d/99-ferrobase.conf" 644
if [ -e "$prefix/etc/ferrobase/pb.toml" ]; then
	say "kept the existing $prefix/etc/ferrobase/pb.toml (a config is never overwritten)"
else
	put "$repo/pb.toml" "$prefix/etc/ferrobase/pb.toml" 644
fi

if [ "$root" != / ]; then
	say "--root $root: skipped the ferrobase user, applying the sysctl settings and enabling the service"
	exit 0
fi

if id -u ferrobase >/dev/null 2>&1; then
	say "unchanged user ferrobase"
else
	useradd --system --user-group --home-dir /var/lib/ferrobase --no-create-home \
		--shell /usr/sbin/nologin ferrobase
	say "created the system user ferrobase"
fi
# Applying the same values again changes nothing; a refused key (e.g. inside a container) is
# reported, not fatal.
sysctl -q -p /etc/sysctl.d/99-ferrobase.conf || say "warning: some sysctl settings were not applied"
systemctl daemon-reload
systemctl is-enabled --quiet ferrobase || systemctl enable ferrobase
if ! systemctl is-active --quiet ferrobase; then
	systemctl start ferrobase
	say "started ferrobase.service"
elif [ "$restart" = 1 ]; then
	systemctl restart ferrobase
	say "restarted ferrobase.service (its binary or unit changed)"
else
	say "ferrobase.service is running and unchanged"
fi
