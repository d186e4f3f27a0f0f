#!/bin/sh
# bench-start.sh - start to first token, cold (empty kernel cache) and warm
# (kernels mapped from the cache), and the peak memory of every process of
# the pipeline, median and range over alternating runs.
#
#   sh tests/bench-start.sh [BUILD_DIR]     (default: build)
#   MODEL=path.gguf   the model (default: a generated Qwen2.5-0.5B-shaped F16
#                     file, written once with the project's GGUF writer)
#   SHAPE=qwen2.5-0.5b TYPE=f16   what gen-model writes when MODEL is unset
#   RUNS=5            pairs of runs (cold, warm)
#   ARGS="..."        more flags for anedvd run (e.g. --threads 2)
#
# Each run is `anedvd run --max-tokens 1 --json` with the kernel cache in a
# directory of its own (cleared before each cold run); a third run of each
# round has --no-cache (the start as it was before the cache: what writing
# it costs a first start). While it runs, every
# 20 ms, /proc/<pid>/status of the CLI and each child it spawned is read:
# VmHWM (the kernel's peak RSS of that process; the last value read before
# it exits), and the largest RssAnon, RssFile and RssShmem seen. RSS counts
# mapped file pages: the model's pages a process touched and, on a warm
# start, the ane-worker's kernels, which are the cache file's pages (shared
# page cache, reclaimable) rather than anonymous memory. So both are
# printed: the sum of the processes' peaks, and the sum of their anonymous
# (+ shmem) peaks. The kernels' weight bytes come from the ane-worker
# (run --json start.ane_worker.weight_bytes).
set -eu
B=${1:-build}
BIN=$B/bin/anedvd
[ -x "$BIN" ] || { echo "bench-start: $BIN is not built" >&2; exit 1; }
RUNS=${RUNS:-5}
ARGS=${ARGS:-}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-bench-start-XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
if [ -z "${MODEL:-}" ]; then
	SHAPE=${SHAPE:-qwen2.5-0.5b}
	TYPE=${TYPE:-f16}
	MODEL=${TMPDIR:-/tmp}/anedvd-bench-$SHAPE-$TYPE.gguf
	[ -s "$MODEL" ] || "$B/tests/gen-model" "$SHAPE" "$TYPE" 1 "$MODEL" >/dev/null
fi
CACHE=$WORK/kcache
echo "model $MODEL ($(( $(wc -c < "$MODEL") / 1000000 )) MB), $RUNS rounds of cold, warm, no cache, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# one run: prints "wall_ms first_token_ms cache sum_hwm_kb sum_anon_kb weight_bytes ane_hwm ane_anon ane_file cpu_hwm tok_hwm cli_hwm"
one() {
	out=$WORK/out.json
	t0=$(date +%s%N)
	"$BIN" run --model "$MODEL" --prompt-ids 1,2,3 --max-tokens 1 --json --cache-dir "$CACHE" $ARGS ${1:-} >"$out" 2>"$WORK/err" &
	cli=$!
	: >"$WORK/samples"
	while kill -0 $cli 2>/dev/null; do
		for p in $cli $(pgrep -P $cli 2>/dev/null || true); do
			n=$(cat /proc/$p/comm 2>/dev/null) || continue
			awk -v p=$p -v n="$n" '/^(VmHWM|RssAnon|RssFile|RssShmem):/ {print p, n, $1, $2}' /proc/$p/status 2>/dev/null >>"$WORK/samples" || true
		done
		sleep 0.02
	done
	wait $cli || { echo "bench-start: anedvd run failed:" >&2; cat "$WORK/err" >&2; exit 1; }
	t1=$(date +%s%N)
	node_or_sed=$(tr -d '\n' <"$out")
	ftt=$(printf '%s' "$node_or_sed" | sed -n 's/.*"to_first_token_ms":\([0-9.]*\).*/\1/p')
	cache=$(printf '%s' "$node_or_sed" | sed -n 's/.*"cache":"\([a-z-]*\)".*/\1/p')
	wb=$(printf '%s' "$node_or_sed" | sed -n 's/.*"weight_bytes":\([0-9.e+]*\).*/\1/p')
	awk -v wall=$(( (t1 - t0) / 1000000 )) -v ftt="${ftt:-0}" -v cache="${cache:-?}" -v wb="${wb:-0}" '
		{ k = $1 " " $3; if ($4 > m[k]) m[k] = $4; name[$1] = $2 }
		END {
			for (p in name) {
				hwm += m[p " VmHWM:"]; anon += m[p " RssAnon:"] + m[p " RssShmem:"]
				if (name[p] ~ /ane-work/) { ah = m[p " VmHWM:"]; aa = m[p " RssAnon:"]; af = m[p " RssFile:"] }
				else if (name[p] ~ /cpu-work/) ch = m[p " VmHWM:"]
				else if (name[p] ~ /tokeniz/) th = m[p " VmHWM:"]
				else lh = m[p " VmHWM:"]
			}
			printf "%d %.0f %s %d %d %s %d %d %d %d %d %d\n", wall, ftt, cache, hwm, anon, wb, ah, aa, af, ch, th, lh
		}' "$WORK/samples"
}

: >"$WORK/cold"
: >"$WORK/warm"
: >"$WORK/nocache"
for r in $(seq "$RUNS"); do
	"$BIN" cache --dir "$CACHE" --clear >/dev/null
	one >>"$WORK/cold"
	one >>"$WORK/warm"
	one --no-cache >>"$WORK/nocache"
done

# median and range of column c of file f
stat() {
	sort -n -k"$2","$2" "$1" | awk -v c="$2" -v d="${3:-1}" '{v[NR] = $c} END {
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%.0f (%.0f-%.0f)", m / d, v[1] / d, v[NR] / d }'
}
for kind in cold warm nocache; do
	f=$WORK/$kind
	echo "$kind: cache $(cut -d' ' -f3 "$f" | sort | uniq -c | awk '{printf "%s%s x%s", (NR > 1 ? ", " : ""), $2, $1}')"
	echo "  to first token  $(stat "$f" 2) ms   wall (run of 1 token, start to exit) $(stat "$f" 1) ms"
	echo "  peak RSS, sum of processes $(stat "$f" 4 1024) MiB, anonymous part $(stat "$f" 5 1024) MiB"
	echo "  ane-worker: peak $(stat "$f" 7 1024) MiB (anon $(stat "$f" 8 1024), file $(stat "$f" 9 1024));" \
	     "cpu-worker $(stat "$f" 10 1024) MiB; tokenizer $(stat "$f" 11 1024) MiB; CLI $(stat "$f" 12 1024) MiB"
done
wb=$(head -1 "$WORK/warm" | cut -d' ' -f6)
awk -v wb="$wb" -v c="$(sort -n -k4,4 "$WORK/cold" | awk '{v[NR]=$4} END {print v[int((NR+1)/2)]}')" \
    -v w="$(sort -n -k4,4 "$WORK/warm" | awk '{v[NR]=$4} END {print v[int((NR+1)/2)]}')" 'BEGIN {
	if (wb > 0) printf "kernel weights %.0f MiB: peak RSS sum / weights = %.2f cold, %.2f warm (median)\n",
	    wb / 1048576, c * 1024 / wb, w * 1024 / wb }'
