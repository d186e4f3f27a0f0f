#!/bin/sh
# install.sh - install anedvd from a build directory, with its service.
#
#   deploy/install.sh [--build DIR] [--prefix P] [--sysconfdir D] [--unit-dir D]
#                     [--no-service]
#   deploy/install.sh --uninstall [--prefix P] [--sysconfdir D] [--unit-dir D] [--purge]
#
# `cmake --install DIR --prefix P` (default build/ and /usr/local) puts in
# place what deploy/install.cmake lists: the five programs, the manual
# pages, the bundled model, SYSCONFDIR/anedvd/anedvd.conf unless that file
# exists (SYSCONFDIR: /etc for the prefix /usr, else P/etc) and the service
# definition with the prefix's paths:
#   Linux  the systemd unit in UNIT_DIR (default P/lib/systemd/system)
#   macOS  the launchd job in UNIT_DIR (default ~/Library/LaunchAgents)
# What was installed is recorded in P/share/anedvd/installed-files. As root
# on Linux, with the unit where systemd looks for units, it also makes the
# system user anedvd the service runs as (deploy/debian/postinst, as the
# .deb does). It enables nothing; it prints the command that does.
# --uninstall removes what was recorded; the settings stay unless --purge.
# Exit status: 0 done, 1 failed, 2 bad usage.
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
# the rule of deploy/install-config.cmake
if [ -z "$sysconfdir" ]; then
	if [ "$prefix" = /usr ] || [ "$prefix" = / ]; then sysconfdir=/etc; else sysconfdir=$prefix/etc; fi
fi
p=${prefix%/}
case $os in
Darwin)
	unit=com.anedvd.serve.plist
	[ -n "$unitdir" ] || unitdir=$HOME/Library/LaunchAgents
	;;
*)
	unit=anedvd.service
	[ -n "$unitdir" ] || unitdir=$p/lib/systemd/system
	;;
esac
record=$p/share/anedvd/installed-files
conf=$sysconfdir/anedvd/anedvd.conf

if [ "$uninstall" = 1 ]; then
	if [ -f "$record" ]; then
		while IFS= read -r f; do
			[ -n "$f" ] && rm -f "$f"
		done <"$record"
		rm -f "$record"
		for d in "$p/share/anedvd" "$p/share/doc/anedvd" "$p/lib/anedvd"; do
			[ -d "$d" ] && find "$d" -depth -type d -empty -exec rmdir {} \; 2>/dev/null || true
		done
		echo "removed the files listed in $record"
	else
		echo "install.sh: no record of an installation under $prefix ($record)" >&2
	fi
	if [ -f "$unitdir/$unit" ]; then
		rm -f "$unitdir/$unit"
		echo "removed $unitdir/$unit"
	fi
	[ "$os" = Darwin ] || ! command -v systemctl >/dev/null 2>&1 || [ "$(id -u)" != 0 ] ||
		[ ! -d /run/systemd/system ] || systemctl daemon-reload || true
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

had_conf=0
[ -f "$conf" ] && had_conf=1
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
# deploy/install-config.cmake reads these
export ANEDVD_SYSCONFDIR="$sysconfdir"
if [ "$os" != Darwin ]; then
	export ANEDVD_UNITDIR="$unitdir"
	[ "$service" = 1 ] || export ANEDVD_NO_UNIT=1
fi
if ! cmake --install "$build" --prefix "$prefix" >"$tmp" 2>&1; then
	cat "$tmp" >&2
	echo "install.sh: cmake --install failed (is the build complete?)" >&2
	exit 1
fi
mkdir -p "$p/share/anedvd"
# the files (not the folders) installed; the settings are the user's: not
# in the record, so an uninstall keeps them
sed -n -e 's/^-- Installing: //p' -e 's/^-- Up-to-date: //p' "$tmp" | grep -v -x -F "$conf" |
	while IFS= read -r f; do [ -d "$f" ] || printf '%s\n' "$f"; done >"$record"
for b in anedvd anedvd-frontend anedvd-tokenizer anedvd-ane-worker anedvd-cpu-worker; do
	if [ ! -x "$p/bin/$b" ]; then
		echo "install.sh: $p/bin/$b was not installed (build it first)" >&2
		exit 1
	fi
done
echo "installed $(wc -l <"$record" | tr -d ' ') files under $prefix"
if [ "$had_conf" = 1 ]; then
	echo "kept the settings $conf"
else
	echo "wrote the settings $conf (set ANEDVD_MODEL; the bundled stories260K is the default)"
fi

[ "$service" = 1 ] || exit 0
case $os in
Darwin)
	mkdir -p "$unitdir" "$p/var/log"
	cp "$p/share/anedvd/launchd/$unit" "$unitdir/$unit"
	echo "wrote $unitdir/$unit"
	echo "start it with: launchctl bootstrap gui/$(id -u) $unitdir/$unit"
	;;
*)
	echo "wrote $unitdir/$unit"
	case $unitdir in
	/etc/systemd/system | /usr/local/lib/systemd/system | /usr/lib/systemd/system | /lib/systemd/system)
		if [ "$(id -u)" = 0 ]; then
			sh "$here/debian/postinst" configure
			echo "the service runs as the system user anedvd"
		else
			echo "as root: deploy/debian/postinst configure (makes the user anedvd the service runs as)"
		fi
		echo "start it with: systemctl enable --now $unit"
		;;
	*)
		echo "systemd does not look in $unitdir: systemctl link $unitdir/$unit, and as root" \
			"deploy/debian/postinst configure (makes the user anedvd the service runs as)"
		;;
	esac
	;;
esac
