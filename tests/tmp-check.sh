#!/bin/sh
# tmp-check.sh - every test cleans up its scratch files.
#
#   tmp-check.sh setup ROOT TEST...   empty ROOT, make ROOT/TEST for each test
#   tmp-check.sh clean ROOT           fail if any ROOT/TEST holds anything;
#                                     then remove ROOT
#
# ctest gives each test TMPDIR=ROOT/<its name> (tests/CMakeLists.txt): the
# setup runs before every test and the clean after all of them (a ctest
# fixture, so `ctest -j N` and `ctest -R` keep the order), and names each test
# that left something, with what. Whatever was left is removed either way, so
# a failed run does not fill the temporary folder; with ANEDVD_KEEP_TMP set
# (the tests keep their directories then) it lists and keeps everything.
# Exit status: 0 clean, 1 something was left, 2 bad usage.
set -u
mode=${1:-}
root=${2:-}
[ -n "$root" ] || { echo "usage: tmp-check.sh setup ROOT TEST... | clean ROOT" >&2; exit 2; }
case $mode in
setup)
	shift 2
	rm -rf "$root"
	mkdir -p "$root" || exit 1
	for t in "$@"; do
		mkdir "$root/$t" || exit 1
	done
	exit 0
	;;
clean)
	[ -d "$root" ] || { echo "tmp-check: $root is missing (did the setup run?)" >&2; exit 1; }
	left=0
	for d in "$root"/*; do
		[ -d "$d" ] || continue
		entries=$(ls -A "$d")
		[ -n "$entries" ] || continue
		left=$((left + 1))
		echo "$(basename "$d") left in its TMPDIR:"
		ls -A "$d" | sed 's/^/  /'
	done
	if [ -n "${ANEDVD_KEEP_TMP:-}" ]; then
		echo "kept $root (ANEDVD_KEEP_TMP)"
		exit 0
	fi
	rm -rf "$root"
	if [ "$left" != 0 ]; then
		echo "FAIL: $left test(s) left files in the temporary folder (removed now);" \
			"a test that crashed leaves its own: see its failure first"
		exit 1
	fi
	echo "every test removed its scratch files"
	exit 0
	;;
esac
echo "usage: tmp-check.sh setup ROOT TEST... | clean ROOT" >&2
exit 2
