#!/bin/sh
# install.sh - install anedvd from a build directory, with its service.
#
#   deploy/install.sh [--build DIR] [--prefix P] [--sysconfdir D] [--unit-dir D]
#                     [--no-service]
#   deploy/install.sh --uninstall [--prefix P] [--sysconfdir D] [--unit-dir D] [--purge]
#
# Installs the five programs with `cmake --install DIR --prefix P` (default
# build/ and /usr/local), records what it installed in
# P/share/anedvd/installed-files, writes the example settings to
# SYSCONFDIR/anedvd/anedvd.conf unless that file exists (SYSCONFDIR: /etc
# for the prefix /usr, else P/etc), and the service definition with the
# prefix's paths:
#   Linux  the systemd unit in UNIT_DIR (default /etc/systemd/system)
#   macOS  the launchd job in UNIT_DIR (default ~/Library/LaunchAgents)
# It enables nothing; it prints the command that does.
# --uninstall removes what was recorded and the service definition; the
# settings stay unless --purge. Exit status: 0 done, 1 failed, 2 bad usage.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
build=$here/../build
prefix=/usr/local
sysconfdir=
unitdir=
service=1
uninstall=0
purge=0
os=$(uname -s)

usage() {
	sed -n '3,6p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
}
need() { [ $# -ge 2 ] || { echo "install.sh: $1 needs a value" >&2; exit 2; }; }

while [ $# -gt 0 ]; do
	case $1 in
	--build) need "$@"; build=$2; shift 2 ;;
	--prefix) need "$@"; prefix=$2; shift 2 ;;
	--sysconfdir) need "$@"; sysconfdir=$2; shift 2 ;;
	--unit-dir) need "$@"; unitdir=$2; shift 2 ;;
	--no-service) service=0; shift ;;
	--uninstall) uninstall=1; shift ;;
	--purge) purge=1; shift ;;
	-h | --help) usage ;;
	*) echo "install.sh: unknown option '$1'" >&2; usage ;;
	esac
done

case $prefix in
/*) ;;
*) prefix=$(pwd)/$prefix ;;
esac
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/
if [ -z "$sysconfdir" ]; then
	if [ "$prefix" = /usr ]; then sysconfdir=/etc; else sysconfdir=$prefix/etc; fi
fi
if [ -z "$unitdir" ]; then
	case $os in
	Darwin) unitdir=$HOME/Library/LaunchAgents ;;
	*) unitdir=/etc/systemd/system ;;
	esac
fi
case $os in
Darwin) unit=com.anedvd.serve.plist; src=$here/launchd/$unit ;;
*) unit=anedvd.service; src=$here/systemd/$unit ;;
esac
record=$prefix/share/anedvd/installed-files
conf=$sysconfdir/anedvd/anedvd.conf

if [ "$uninstall" = 1 ]; then
	if [ -f "$record" ]; then
		while IFS= read -r f; do
			[ -n "$f" ] && rm -f "$f"
		done <"$record"
		rm -f "$record"
		find "$prefix/share/anedvd" -depth -type d -empty -exec rmdir {} \; 2>/dev/null || true
		echo "removed the files listed in $record"
	else
		echo "install.sh: no record of an installation under $prefix ($record)" >&2
	fi
	if [ -f "$unitdir/$unit" ]; then
		rm -f "$unitdir/$unit"
		echo "removed $unitdir/$unit"
		[ "$os" = Darwin ] || ! command -v systemctl >/dev/null 2>&1 || [ "$(id -u)" != 0 ] ||
			systemctl daemon-reload || true
	fi
	if [ "$purge" = 1 ]; then
		rm -f "$conf"
		rmdir "$sysconfdir/anedvd" 2>/dev/null || true
		echo "removed $conf"
	elif [ -f "$conf" ]; then
		echo "kept the settings $conf (--purge removes them)"
	fi
	exit 0
fi

command -v cmake >/dev/null 2>&1 || { echo "install.sh: cmake not found" >&2; exit 1; }
[ -f "$build/CMakeCache.txt" ] || { echo "install.sh: $build is not a configured build directory (--build DIR)" >&2; exit 1; }

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
if ! cmake --install "$build" --prefix "$prefix" >"$tmp" 2>&1; then
	cat "$tmp" >&2
	echo "install.sh: cmake --install failed (is the build complete?)" >&2
	exit 1
fi
mkdir -p "$prefix/share/anedvd"
sed -n -e 's/^-- Installing: //p' -e 's/^-- Up-to-date: //p' "$tmp" >"$record"
for b in anedvd anedvd-frontend anedvd-tokenizer anedvd-ane-worker anedvd-cpu-worker; do
	if [ ! -x "$prefix/bin/$b" ]; then
		echo "install.sh: $prefix/bin/$b was not installed (build it first)" >&2
		exit 1
	fi
done
echo "installed $(wc -l <"$record" | tr -d ' ') files under $prefix"

if [ ! -f "$conf" ]; then
	mkdir -p "$sysconfdir/anedvd"
	cp "$here/anedvd.conf" "$conf"
	echo "wrote the settings $conf (set ANEDVD_MODEL)"
fi

[ "$service" = 1 ] || exit 0
mkdir -p "$unitdir"
# the definitions are written for /usr/local; put in this prefix's paths
sed -e "s|/usr/local/etc/anedvd/|@SYSCONF@/anedvd/|g" -e "s|/usr/local/|$prefix/|g" -e "s|@SYSCONF@|$sysconfdir|g" \
	"$src" >"$unitdir/$unit"
echo "wrote $unitdir/$unit"
case $os in
Darwin)
	mkdir -p "$prefix/var/log"
	echo "start it with: launchctl bootstrap gui/$(id -u) $unitdir/$unit"
	;;
*)
	if command -v systemctl >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && [ "$unitdir" = /etc/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	echo "start it with: systemctl enable --now $unit"
	;;
esac
