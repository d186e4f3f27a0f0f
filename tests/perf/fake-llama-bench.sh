#!/usr/bin/env bash
# fake-llama-bench.sh - a stand-in for llama.cpp's llama-bench in the smoke
# test of tests/perf/bench.sh: it takes the same options and prints a JSON
# array of the same form (-o json) with fixed figures, so the comparison path
# of the script (parsing, ratios, targets) runs without llama.cpp.
set -eu
p=512 n=128 d=0 m=""
while [ $# -gt 0 ]; do
	case $1 in
	--help) echo "usage: llama-bench [options]"; echo "  --no-warmup"; echo "  -d, --n-depth <n>"; exit 0 ;;
	-m) m=$2; shift ;;
	-p) p=$2; shift ;;
	-n) n=$2; shift ;;
	-d) d=$2; shift ;;
	-t | -r | -o) shift ;;
	esac
	shift
done
[ -r "$m" ] || { echo "fake-llama-bench: cannot read model '$m'" >&2; exit 1; }
# FAKE_LLAMA_SIGILL=1: die as llama-bench does on a CPU that lists an
# extension it cannot use, on every run with a prompt (the script's first
# check, -p 0, still passes)
if [ "${FAKE_LLAMA_SIGILL:-0}" = 1 ] && [ "$p" -gt 0 ]; then kill -ILL $$; fi
# live long enough for the memory sampler (10 ms) to see it, however busy the machine
sleep 0.3
entry() { # n_prompt n_gen tok/s
	printf '  {"build_commit": "fake000", "model_filename": "%s", "n_threads": 2, "n_prompt": %d, "n_gen": %d, "avg_ts": %s, "stddev_ts": 0.0}' "$m" "$1" "$2" "$3"
}
echo "["
sep=""
if [ "$p" -gt 0 ]; then entry "$p" 0 1000.0; sep=","; fi
# decode after a filled context (-d) at half the speed: its rows must not be the others'
if [ "$n" -gt 0 ]; then echo "$sep"; entry 0 "$n" "$([ "$d" -gt 0 ] && echo 50.0 || echo 100.0)"; fi
echo
echo "]"
