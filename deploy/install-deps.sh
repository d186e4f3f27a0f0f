#!/bin/sh
# install-deps.sh - install the Debian packages anedvd needs to build and test.
#
#   deploy/install-deps.sh            build dependencies
#   deploy/install-deps.sh --test     also what the test suites need
#
# Installs only what is missing; uses sudo when not run as root.
set -eu

pkgs="build-essential cmake pkg-config xz-utils libnng-dev libprotobuf-c-dev protobuf-c-compiler libh2o-evloop-dev libcjson-dev libpcre2-dev"
if [ "${1:-}" = "--test" ]; then
	# clang: fuzz targets; clang-format: test-format; chromium + a font: the
	# WebUI's browser tests; curl: CLI tests
	pkgs="$pkgs clang clang-format chromium fonts-dejavu-core curl"
	# test-package: dpkg-shlibdeps (cpack's dependency list), man -l of the
	# manual pages, systemd-analyze verify/security of the unit
	pkgs="$pkgs dpkg-dev man-db groff-base systemd"
	# python3 (standard library only): the benchmark scripts and their smoke test;
	# python3-jinja2: the judge of the chat-template interpreter (test-jinja-judge)
	if ! command -v python3 >/dev/null 2>&1; then
		pkgs="$pkgs python3"
	fi
	if ! python3 -c 'import jinja2' >/dev/null 2>&1; then
		pkgs="$pkgs python3-jinja2"
	fi
	# Node.js for the SDK and browser tests: use the one on the machine if
	# there is one (Debian's own nodejs is older than some tests need)
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		pkgs="$pkgs nodejs npm"
	fi
fi

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
	sudo=""
elif command -v sudo >/dev/null 2>&1; then
	sudo="sudo"
else
	echo "install-deps: need root or sudo to install:$missing" >&2
	exit 1
fi
echo "install-deps: installing$missing" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >&2
