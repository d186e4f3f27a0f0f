#!/bin/sh
# run-fuzz.sh NAME SECONDS [libFuzzer options...]
#
# Configures a clang build with libFuzzer and the sanitizers (in
# $FUZZ_BUILD, default build-fuzz at the top of the tree), builds fuzz-NAME
# and runs it for SECONDS on one core. New inputs go to a working corpus in
# the build directory, seeded from tests/fuzz/corpus-NAME; crash inputs land
# in the build directory as fuzz-NAME-crash-*, to be copied (with a name
# that says what they broke) to tests/fuzz/crashes-NAME/.
set -eu
[ $# -ge 2 ] || { echo "usage: $0 NAME SECONDS [libFuzzer options...]" >&2; exit 2; }
name=$1
secs=$2
shift 2
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD:-$src/build-fuzz}

cmake -S "$src" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DANEDVD_FUZZ=ON -DANEDVD_SANITIZE=ON >/dev/null
cmake --build "$build" --target "fuzz-$name" -j2

work="$build/fuzz-$name-corpus"
mkdir -p "$work"
dict="$src/tests/fuzz/$name.dict"
set -- -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$build/fuzz-$name-" "$@"
[ -f "$dict" ] && set -- -dict="$dict" "$@"
seeds="$src/tests/fuzz/corpus-$name"
# more seed directories (relative to tests/), one a line, in NAME.seeds
if [ -f "$src/tests/fuzz/$name.seeds" ]; then
	while read -r d; do
		[ -n "$d" ] && seeds="$seeds $src/tests/$d"
	done <"$src/tests/fuzz/$name.seeds"
fi
crashes="$src/tests/fuzz/crashes-$name"
[ -d "$crashes" ] || crashes=
log="$build/fuzz-$name.log"
echo "fuzzing $name for $secs s; log in $log"
rc=0
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	"$build/tests/fuzz-$name" "$@" "$work" $seeds $crashes >"$log" 2>&1 || rc=$?
grep -E '^(Done|stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)' "$log" || true
grep -E '#[0-9]+ +(DONE|INITED)' "$log" | tail -2 || true
if [ $rc -ne 0 ]; then
	echo "fuzz-$name stopped with status $rc:" >&2
	grep -E 'ERROR|SUMMARY|Test unit written|artifact' "$log" >&2 || tail -30 "$log" >&2
fi
exit $rc
