#!/usr/bin/env bash
# run.sh - everything a Mac with a Neural Engine can tell us, in one command.
#
#   tests/device/run.sh BUILD_DIR [MODEL]
#   (or: ANEDVD_DEVICE_MODEL=MODEL ctest -L device --output-on-failure)
#
# For macOS on Apple Silicon and a build configured with -DANEDVD_ANE=ON.
# Runs, on the ane backend where the command has one:
#   anedvd info and selftest; anedvd-dev probe, bench, width, and layers on stories260K
#   for stories260K (tests/data) and MODEL (a .gguf or HF directory, optional),
#   and for --weights fp16, int8 and lut4 (int8 and lut4 are skipped with a note
#   when the build has no --weights, lut4 when its --weights lacks it): check,
#   verify, kernels and a timed run (64-token prompt,
#   64 tokens decoded, --json: decode and prefill tok/s, the wall time)
#   the data plane's round trip (BUILD_DIR/tests/bench-dataplane, if built)
# and prints one summary table (command, result, figure), in markdown so it can
# be pasted as it is. Every command's whole output is kept in a log directory,
# named at the end. Exit 0 when everything that ran passed, 1 when something
# failed, 77 (ctest: skipped) off macOS on Apple Silicon or without the ane
# backend in the build.
#
# Environment: BACKEND (default ane), NGEN (tokens decoded, default 64),
# LOGDIR (the log directory, default a new one under $TMPDIR);
# DEVICE_ANY_HOST=1 with BACKEND=emu runs the same steps on any machine (to
# try the script itself: the ane rows then say emu).
# Needs only bash 3.2, awk, sed and grep (what macOS has).
set -u
B=${1:?usage: tests/device/run.sh BUILD_DIR [MODEL]}
MODEL=${2:-${ANEDVD_DEVICE_MODEL:-}}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
A=$B/bin/anedvd
D=$B/bin/anedvd-dev # the developer tools: check, layers, kernels, probe, bench, width
BACKEND=${BACKEND:-ane}
NGEN=${NGEN:-64}
STORIES=$SRC/tests/data/stories260K/stories260K.gguf

os=$(uname -s) arch=$(uname -m)
# DEVICE_ANY_HOST=1 BACKEND=emu runs the same steps anywhere: to try the script itself
if [ "${DEVICE_ANY_HOST:-}" != 1 ] && { [ "$os" != Darwin ] || [ "$arch" != arm64 ]; }; then
	echo "device: SKIPPED: needs macOS on Apple Silicon with a -DANEDVD_ANE=ON build; this is $os $arch"
	exit 77
fi
for p in "$A" "$D"; do
	[ -x "$p" ] || { echo "device: $p is missing: build first" >&2; exit 2; }
done
if [ "$BACKEND" = ane ] && ! "$A" info 2>&1 | grep -E '^ *ane ' | grep -vq 'not in this build'; then
	echo "device: SKIPPED: this build has no ane backend (configure with -DANEDVD_ANE=ON)"
	exit 77
fi
if [ -n "$MODEL" ] && [ ! -e "$MODEL" ]; then
	echo "device: no such model: $MODEL" >&2
	exit 2
fi

if [ -n "${LOGDIR:-}" ]; then
	LOG=$LOGDIR
	mkdir -p "$LOG" && rm -f "$LOG"/[0-9][0-9]-*.txt
else
	LOG=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-device.XXXXXX")
fi
ROWS=$LOG/rows
: > "$ROWS"
status=0
n=0

now() { # seconds, with milliseconds where perl has them
	perl -MTime::HiRes=time -e 'printf "%.3f\n", time' 2>/dev/null || date +%s
}
row() { # row COMMAND RESULT FIGURE; a failed command's figure is its last line (the error)
	f=$3
	case $2 in FAIL* | MISMATCH* | "exit "*) [ -n "${out:-}" ] && f=$(tail -1 "$out" | cut -c1-160) ;; esac
	printf '| %s | %s | %s |\n' "$1" "$2" "$(echo "$f" | sed 's/|/\//g')" >> "$ROWS"
	case $2 in FAIL* | MISMATCH* | "exit "*) status=1 ;; esac
}
# prog CMD: the program that has CMD (anedvd, or anedvd-dev for a developer tool)
prog() { case $1 in check | layers | kernels | probe | bench | width | attnbench) echo "$D" ;; *) echo "$A" ;; esac; }
# has CMD FLAG: does 'PROG CMD --help' name FLAG?
has() { "$(prog "$1")" "$1" --help 2>&1 | grep -q -- "$2"; }
# go NAME CMD...: runs, logs to LOG/NN-NAME.txt, sets $out (the log) and $rc
go() {
	n=$((n + 1))
	out=$LOG/$(printf '%02d' $n)-$1.txt
	shift
	echo "== $*" >&2
	{ echo "\$ $*"; "$@"; } > "$out" 2>&1
	rc=$?
	echo "   exit $rc" >&2
}
last() { grep -E "$1" "$out" | tail -1; }
num() { # num KEY: a number field of the JSON in $out
	grep -o "\"$1\": *[0-9.eE+-]*" "$out" | head -1 | sed 's/.*: *//'
}
fmt() { awk -v x="${1:-0}" 'BEGIN { printf "%.1f", x }'; }
be_opt() { # the --backend option when the command has one
	if has "$1" --backend; then echo "--backend $BACKEND"; fi
}
prompt=$(awk 'BEGIN { s = "1"; for (i = 0; i < 63; i++) s = s "," (300 + (7 * i) % 200); print s }')

go info "$A" info
row "info" "$([ $rc = 0 ] && echo ok || echo "exit $rc")" "$(last '^ *ane ' | sed 's/^ *//; s/|/\//g')"

# shellcheck disable=SC2046
go probe "$D" probe $(be_opt probe)
r=$(last 'CORRECT|MISMATCH' | sed 's/.*-> //')
row "probe [$(has probe --backend && echo "$BACKEND" || echo emu)]" "${r:-exit $rc}" "$(last 'us/eval' | sed -E 's/.*(rel = [^ ]+) +([^ ]+ us\/eval).*/\1, \2/')"

# shellcheck disable=SC2046
go selftest "$A" selftest $(be_opt selftest)
r=$(last 'PASS|FAIL' | sed 's/.*-> //')
row "selftest [$BACKEND]" "${r:-exit $rc}" "$(last 'max rel' | sed -E 's/.*(backend [^,]+).*(max rel [^,]+).*/\1, \2/')"

# shellcheck disable=SC2046
go bench "$D" bench --iters 20 $(be_opt bench)
row "bench [$(has bench --backend && echo "$BACKEND" || echo emu)]" "$([ $rc = 0 ] && echo ok || echo "FAIL (exit $rc)")" \
	"$(last '^ +4096 ' | awk '{ printf "4096x4096: %s us/eval, %s GB/s, rel %s", $2, $4, $5 }')"

# shellcheck disable=SC2046
go width "$D" width --size 2048 --iters 10 $(be_opt width)
row "width [$(has width --backend && echo "$BACKEND" || echo emu)]" "$([ $rc = 0 ] && echo ok || echo "FAIL (exit $rc)")" \
	"$(last '^ +128 ' | awk '{ printf "2048x2048, 128 columns: %s us/eval, %s the cost of one", $2, $3 }')"

# shellcheck disable=SC2046
go layers "$D" layers --model "$STORIES" --upto 2 --prompt-ids "1,403,407,261,378" $(be_opt layers)
if [ $rc = 0 ] && grep -q 'argmax equal' "$out"; then r=ok; else r="FAIL (exit $rc)"; fi
row "layers stories260K --upto 2 [$(has layers --backend && echo "$BACKEND" || echo emu)]" "$r" \
	"$(last '^ *last position' | sed -E 's/^ *last position: (rel [^,]+).*/last \1/')"

models=$STORIES
[ -n "$MODEL" ] && models="$STORIES
$MODEL"
weights="fp16 int8 lut4"
while IFS= read -r m; do
	mn=$(basename "$m")
	for w in $weights; do
		for c in check verify kernels run; do
			if ! has "$c" --weights; then
				if [ "$w" != fp16 ]; then
					row "$c $mn --weights $w" "skipped" "this build has no --weights"
					continue
				fi
				wo=""
			elif [ "$w" = lut4 ] && ! has "$c" lut4; then
				row "$c $mn --weights lut4" "skipped" "this build's --weights has no lut4"
				continue
			else
				wo="--weights $w"
			fi
			# a command without --backend runs on emu, and the row says so
			if has "$c" --backend; then on=$BACKEND; else on=emu; fi
			label="$c $mn ${wo:-(default weights)} [$on]"
			# shellcheck disable=SC2046,SC2086
			case $c in
			check)
				go "check-$w" "$D" check --model "$m" $(be_opt check) $wo
				worst=$(grep -o 'rel = [0-9.eE+-]*' "$out" | sed 's/rel = //' |
					awk 'BEGIN { w = 0 } { if ($1 + 0 > w) w = $1 + 0 } END { printf "%.2e", w }')
				if [ $rc = 0 ] && grep -q 'all kernels ok' "$out"; then r=ok; else r="FAIL (exit $rc)"; fi
				row "$label" "$r" "worst rel $worst"
				;;
			verify)
				go "verify-$w" "$A" verify --model "$m" --prompt-ids "1,403,407,261,378" $(be_opt verify) $wo
				r=$(last 'MATCH|MISMATCH' | sed 's/.*-> //')
				row "$label" "${r:-exit $rc}" "$(last '^last position' | sed -E 's/^last position: (rel [^,]+).*/last \1/')"
				;;
			kernels)
				go "kernels-$w" "$D" kernels --model "$m" --iters 10 $(be_opt kernels) $wo
				row "$label" "$([ $rc = 0 ] && echo ok || echo "FAIL (exit $rc)")" \
					"$(last 'TOTAL per token' | sed -E 's/.*TOTAL per token: ([^ ]+ ms).*, ([^ ]+ GB\/s).*/\1 per token, \2/'); pass / read $(last '^  pass / read' | sed -E 's/^  pass \/ read: ([^ ]+x).*/\1/')"
				;;
			run)
				t0=$(now)
				go "run-$w" "$A" run --model "$m" --prompt-ids "$prompt" --no-chat --max-tokens "$NGEN" --json \
					$(be_opt run) $wo
				t1=$(now)
				if [ $rc = 0 ]; then
					row "$label" ok "decode $(fmt "$(num decode_tok_s)") tok/s, prefill-64 $(fmt "$(num prefill_tok_s)") tok/s, wall $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
				else
					row "$label" "FAIL (exit $rc)" ""
				fi
				;;
			esac
		done
	done
done <<EOF
$models
EOF

if [ -x "$B/tests/bench-dataplane" ]; then
	go dataplane "$B/tests/bench-dataplane"
	# its first two figures: the empty call and one kernel through the data plane
	row "bench-dataplane" "$([ $rc = 0 ] && echo ok || echo "FAIL (exit $rc)")" \
		"$(grep 'median' "$out" | head -2 | sed -E 's/ +/ /g; s/ range.*//; s/^ //' | paste -s -d ';' - | sed 's/;/; /g')"
else
	row "bench-dataplane" "skipped" "not in this build"
fi
grep -Eq '\| (FAIL|MISMATCH|exit )' "$ROWS" && status=1

echo
echo "anedvd device run: $(sw_vers -productName 2>/dev/null) $(sw_vers -productVersion 2>/dev/null)," \
	"$(sysctl -n machdep.cpu.brand_string 2>/dev/null), $(date -u '+%Y-%m-%d %H:%M UTC'), commit" \
	"$(git -C "$SRC" rev-parse --short=10 HEAD 2>/dev/null || echo '?'), backend $BACKEND"
echo
echo "| command | result | figure |"
echo "|---|---|---|"
cat "$ROWS"
echo
echo "every command's output: $LOG"
exit $status
