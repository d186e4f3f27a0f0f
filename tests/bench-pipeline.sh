#!/usr/bin/env bash
# bench-pipeline.sh - what the multi-process pipeline costs, in figures.
#
#   tests/bench-pipeline.sh BUILD_DIR [REPEATS]
#
# Not a ctest: it prints numbers, the median and the range (min..max) of
# REPEATS (default 3, at least 3) runs each:
#   1. the IPC round trip of one kernel call (us) and the share of decode
#      time spent outside the kernels, on stories260K (tiny kernels: the
#      round trip dominates) and on the generated SmolLM2-135M shapes;
#   2. emu weight bandwidth (anedvd-dev kernels): per kernel, and a decode
#      pass (every kernel once) against a streaming read of as many bytes
#      measured in the same process;
#   3. decode and prefill tok/s on generated models with the exact shapes of
#      SmolLM2-135M and Qwen2.5-0.5B, F16 weights (tests/gen-model.c).
# Needs python3 for the statistics. The generated models (~0.3 and ~1 GB)
# are written under $TMPDIR and removed at the end.
set -eu
B=${1:?usage: bench-pipeline.sh BUILD_DIR [REPEATS]}
N=${2:-3}
[ "$N" -ge 3 ] || { echo "REPEATS must be at least 3" >&2; exit 2; }
A=$B/bin/anedvd
D=$B/bin/anedvd-dev # the developer tools
GEN=$B/tests/gen-model
SRC=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-bench-pipeline.XXXXXX")
trap 'rm -rf "$T"' EXIT
export ANEDVD_LOG=${ANEDVD_LOG:-error}

stats() { # stats LABEL UNIT values... -> "label: median X unit (min..max, n)"
	python3 - "$@" <<'EOF'
import statistics, sys
label, unit, *v = sys.argv[1:]
v = [float(x) for x in v]
print(f"  {label:<44} median {statistics.median(v):10.3f} {unit:<6} range {min(v):.3f} .. {max(v):.3f}  (n={len(v)})")
EOF
}

field() { # field FILE.json python-expression-on-j
	python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print($2)" "$1"
}

# run MODEL TAG PROMPT_IDS MAX_TOKENS: N runs, collecting the figures
run_model() {
	local m=$1 tag=$2 ids=$3 mt=$4
	local ipc="" out="" dec="" pre="" calls=""
	for i in $(seq 1 "$N"); do
		"$A" run --model "$m" --prompt-ids "$ids" --no-chat --max-tokens "$mt" --json --backend emu \
			> "$T/$tag.$i.json" 2> /dev/null
		local f=$T/$tag.$i.json
		calls=$(field "$f" 'j["timings"]["kernel_calls_per_token"]')
		ipc="$ipc $(field "$f" '1000*j["timings"]["per_token_ms"]["ipc"]/max(1,j["timings"]["kernel_calls_per_token"])')"
		out="$out $(field "$f" '100*j["timings"]["outside_kernels_share"]')"
		dec="$dec $(field "$f" 'j["timings"]["decode_tok_s"]')"
		pre="$pre $(field "$f" 'j["timings"]["prefill_tok_s"]')"
	done
	echo "$tag: $mt tokens after a prompt of $(echo "$ids" | tr ',' '\n' | wc -l), $calls kernel calls per token"
	stats "IPC round trip per kernel call" us $ipc
	stats "decode time outside the kernels" % $out
	stats "decode" tok/s $dec
	stats "prefill" tok/s $pre
}

ids() { # ids N: N token ids starting with BOS
	python3 -c "import sys; n=int(sys.argv[1]); print(','.join(['1']+[str(300+7*i%200) for i in range(n-1)]))" "$1"
}

echo "machine: $(nproc) CPUs, $(uname -sm); emu threads 2; $N repeats each"
echo
run_model "$SRC/tests/data/stories260K/stories260K.gguf" stories260K 1,403,407,261,378 64
echo

"$GEN" smollm2-135m f16 1 "$T/smollm2-135m-f16.gguf"
"$GEN" qwen2.5-0.5b f16 1 "$T/qwen2.5-0.5b-f16.gguf"

for m in smollm2-135m qwen2.5-0.5b; do
	echo "emu kernels of $m (F16, layer 0 + LM head, one column):"
	gbs=""
	pass=""
	base=""
	for i in $(seq 1 "$N"); do
		"$D" kernels --model "$T/$m-f16.gguf" --iters 10 > "$T/k.$i.txt" 2> /dev/null
		gbs="$gbs $(awk '/TOTAL per token/ {print $(NF-1)}' "$T/k.$i.txt")"
		pass="$pass $(sed -nE 's/^  pass: .*, ([0-9.]+) GB\/s.*/\1/p' "$T/k.$i.txt")"
		base="$base $(sed -nE 's/^  streaming read: .*, ([0-9.]+) GB\/s.*/\1/p' "$T/k.$i.txt")"
	done
	sed -n '/kernel  /,/TOTAL/p' "$T/k.1.txt"
	stats "weight bandwidth, each kernel repeated" GB/s $gbs
	stats "weight bandwidth, decode pass (every kernel once)" GB/s $pass
	stats "streaming read of as many bytes, same process" GB/s $base
	echo
done

run_model "$T/smollm2-135m-f16.gguf" "SmolLM2-135M shapes (F16)" "$(ids 64)" 32
echo
run_model "$T/qwen2.5-0.5b-f16.gguf" "Qwen2.5-0.5B shapes (F16)" "$(ids 64)" 16
