#!/usr/bin/env bash
# test-weights.sh - --weights fp16|int8|lut4 end to end, over the real processes.
#
#   test-weights.sh BIN_DIR GEN_MODEL
#
# On a generated Q8_0 model: the default is int8 (info, run --json), the
# flag reaches both workers (their logs, the JSON, a different result from
# fp16), verify with int8 reports the weight error and MATCHes with logits
# within the bound below, greedy tokens of int8 and fp16 are compared;
# lut4 runs, verifies, checks and comes back from the kernel cache;
# an F16 model defaults to fp16; a bad value exits 2 naming the flag on
# every command that takes it. Prints "N passed, N failed".
#
# The bound: per row, |s q - w| <= s / 2 with s = max|w| / 127, so the
# weights' RMS relative error is at most 1 / (2 sqrt(3) 127) x max|w| /
# rms(w) (uniform rounding error); verify prints the measured one. The
# logits' relative error is required below 10x that measured weight error
# (one layer's projections each add about the weight error, relative; the
# tiny model has 2 layers, residual connections keep it from compounding)
# and below 0.03 absolutely.
set -u
BIN=$1
GEN=$2
A=$BIN/anedvd
D=$BIN/anedvd-dev # the developer tools
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-test-weights.XXXXXX")
export XDG_RUNTIME_DIR=$T
trap 'if [ -n "${ANEDVD_KEEP_TMP:-}" ]; then echo "kept $T (ANEDVD_KEEP_TMP)" >&2; else rm -rf "$T"; fi' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
# the verdict goes to the stderr the script started with: a check run with
# 2>/dev/null (its command's own noise) must not hide its FAIL line
exec 3>&2
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&3; }
check() { # check "what" command...
	local what=$1
	shift
	if "$@"; then ok; else bad "$what"; fi
}
# (a random model's text need not be UTF-8)
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1], encoding="latin-1"))[sys.argv[2]])' "$1" "$2"; }
ids() { python3 -c 'import json,sys; print(" ".join(str(i) for i in json.load(open(sys.argv[1], encoding="latin-1"))["ids"]))' "$1"; }
# the number after "key" in file
num_after() { sed -n "s#.*$2 \([0-9.e+-]*\).*#\1#p" "$1" | head -1; }
lt() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$1" "$2"; }

Q=$T/q8.gguf
F=$T/f16.gguf
"$GEN" tiny q8_0 1 "$Q" || exit 1
"$GEN" tiny f16 1 "$F" || exit 1
P="--prompt-ids 1,300,307,314,20,41,99 --no-chat --max-tokens 24 --json --backend emu"

# --- defaults --------------------------------------------------------------------------
$A info --model "$Q" > "$T/info.txt" 2>&1
check "info: Q8_0 defaults to int8" grep -q "kernel weights (default)   int8 on emu" "$T/info.txt"
check "info: int8 bytes" grep -q "kernel weights as int8" "$T/info.txt"
check "info: lut4 bytes" grep -q "kernel weights as lut4" "$T/info.txt"
$A info --model "$F" > "$T/info2.txt" 2>&1
check "info: F16 defaults to fp16" grep -q "kernel weights (default)   fp16 on emu" "$T/info2.txt"

$A run --model "$Q" $P > "$T/d.json" 2> "$T/d.err"
check "run (default) on Q8_0" [ $? -eq 0 ]
check "run --json says int8" [ "$(field "$T/d.json" weights)" = int8 ]
$A run --model "$F" $P > "$T/f.json" 2> /dev/null
check "run (default) on F16 says fp16" [ "$(field "$T/f.json" weights)" = fp16 ]

# --- both workers get the flag ------------------------------------------------------------
for w in fp16 int8; do
	ANEDVD_LOG=info $A run --model "$Q" $P --weights $w > "$T/$w.json" 2> "$T/$w.err"
	check "run --weights $w" [ $? -eq 0 ]
	check "run --weights $w: json" [ "$(field "$T/$w.json" weights)" = $w ]
	check "run --weights $w: the ane-worker compiled $w" grep -q "columns, $w weights" "$T/$w.err"
done
check "default = --weights int8 (same tokens)" [ "$(ids "$T/d.json")" = "$(ids "$T/int8.json")" ]
# greedy tokens: printed for the record; on this model they agree
g8=$(ids "$T/int8.json") g16=$(ids "$T/fp16.json")
if [ "$g8" = "$g16" ]; then echo "greedy: int8 and fp16 give the same 24 tokens"
else echo "greedy: int8 and fp16 differ: int8 $g8 / fp16 $g16"; fi

# --- verify ------------------------------------------------------------------------------
V="--prompt-ids 1,300,307,314,20,41,99 --backend emu"
$A verify --model "$Q" $V --weights fp16 > "$T/v16.txt" 2>&1
check "verify fp16 MATCH" [ $? -eq 0 ]
$A verify --model "$Q" $V --weights int8 > "$T/v8.txt" 2>&1
check "verify int8 MATCH" [ $? -eq 0 ]
cat "$T/v8.txt" | tail -3
check "verify int8 says so" grep -q "backend emu, int8 weights" "$T/v8.txt"
check "verify int8 reports the weight error" grep -q "^int8 weights: .* RMS relative" "$T/v8.txt"
r8=$(num_after "$T/v8.txt" "last position: rel")
r16=$(num_after "$T/v16.txt" "last position: rel")
wr=$(num_after "$T/v8.txt" "RMS relative")
mx=$(num_after "$T/v8.txt" "max|dw|/row max")
echo "logits rel: int8 $r8, fp16 $r16; weights RMS rel $wr, max|dw|/row max $mx"
check "weights: max|dw| <= row max / 254 (+ the scale's fp16 rounding)" lt "$mx" 0.00395
check "int8 logits within 10x the weight error" lt "$r8" "$(python3 -c "print(10 * $wr)")"
check "int8 logits rel < 0.03" lt "$r8" 0.03
check "int8 differs from fp16 (the flag is not ignored)" lt "$r16" "$r8"

# --- lut4: 4-bit palettised weights, opt-in ----------------------------------------------
# A table of 16 values for each 64 rows and a scale a row (the tiny model's
# rows: one table each matrix): the weights' RMS relative error is that of a
# 16-level quantiser, about 0.06-0.10 on these weights; the logits within
# 3x that and the argmax kept
ANEDVD_LOG=info $A run --model "$Q" $P --weights lut4 > "$T/lut4.json" 2> "$T/lut4.err"
check "run --weights lut4" [ $? -eq 0 ]
check "run --weights lut4: json" [ "$(field "$T/lut4.json" weights)" = lut4 ]
check "run --weights lut4: the ane-worker compiled lut4" grep -q "columns, lut4 weights" "$T/lut4.err"
$A verify --model "$Q" $V --weights lut4 > "$T/v4.txt" 2>&1
check "verify lut4 MATCH" [ $? -eq 0 ]
tail -3 "$T/v4.txt"
check "verify lut4 reports the weight error" grep -q "^lut4 weights: .* RMS relative" "$T/v4.txt"
r4=$(num_after "$T/v4.txt" "last position: rel")
wr4=$(num_after "$T/v4.txt" "RMS relative")
echo "logits rel: lut4 $r4; weights RMS rel $wr4"
check "lut4 weights' RMS error below a 16-level quantiser's bound (0.12)" lt "$wr4" 0.12
check "lut4 weights coarser than int8" lt "$wr" "$wr4"
check "lut4 logits within 3x the weight error" lt "$r4" "$(python3 -c "print(3 * $wr4)")"
$D check --model "$Q" --weights lut4 > "$T/c4.txt" 2>&1
check "check --weights lut4 passes" [ $? -eq 0 ]
$D kernels --model "$Q" --weights lut4 --iters 2 > "$T/k4.txt" 2>&1
check "kernels --weights lut4" grep -q "lut4 weights" "$T/k4.txt"
# the second start maps the cached kernels: the same tokens
C="--cache-dir $T/kc"
$A run --model "$Q" $P --weights lut4 $C > "$T/l1.json" 2> /dev/null
$A run --model "$Q" $P --weights lut4 $C > "$T/l2.json" 2> /dev/null
check "lut4 from the kernel cache: the same tokens" [ "$(ids "$T/l1.json")" = "$(ids "$T/lut4.json")" ] &&
	[ "$(ids "$T/l2.json")" = "$(ids "$T/lut4.json")" ]
check "lut4: the second start hit the cache" python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1], encoding="latin-1"))["start"]["ane_worker"]["cache"] != "hit")' "$T/l2.json"

# --- the in-process decode loop and the tools ------------------------------------------------
$A run --model "$Q" $P --weights int8 --in-process > "$T/ip.json" 2> /dev/null
check "run --in-process --weights int8" [ "$(ids "$T/ip.json")" = "$(ids "$T/int8.json")" ]
$D check --model "$Q" --weights int8 > "$T/c.txt" 2>&1
check "check --weights int8 passes" [ $? -eq 0 ]
check "check says int8" grep -q "int8 weights" "$T/c.txt"
$D kernels --model "$Q" --weights int8 --iters 2 > "$T/k.txt" 2>&1
check "kernels --weights int8" [ $? -eq 0 ]
check "kernels says int8" grep -q "int8 weights" "$T/k.txt"

# --- bad values --------------------------------------------------------------------------
for c in run verify serve check kernels; do
	extra=
	[ $c = run ] || [ $c = verify ] && extra="--prompt-ids 1"
	prog=$A
	[ $c = check ] || [ $c = kernels ] && prog=$D
	$prog $c --model "$Q" $extra --weights int4 > /dev/null 2> "$T/bad.txt"
	check "$c --weights int4 exits 2" [ $? -eq 2 ]
	check "$c --weights int4 names the flag" grep -q -- "--weights takes fp16, int8 or lut4, not 'int4'" "$T/bad.txt"
done
$BIN/anedvd-ane-worker --model "$Q" --listen "ipc://$T/x" --weights 8 > /dev/null 2> "$T/bad.txt"
check "anedvd-ane-worker --weights 8 exits 2" [ $? -eq 2 ]
check "anedvd-ane-worker names the flag" grep -q -- "--weights takes fp16, int8 or lut4" "$T/bad.txt"
$BIN/anedvd-cpu-worker --model "$Q" --listen "ipc://$T/y" --weights x > /dev/null 2> "$T/bad.txt"
check "anedvd-cpu-worker --weights x exits 2" [ $? -eq 2 ]

# --- the two workers must agree ------------------------------------------------------------
# an ane-worker with int8 kernels and a cpu-worker told fp16: refused at the
# handshake, naming the flag (not a silent mix of two plans)
ANEDVD_LOG=info $BIN/anedvd-ane-worker --model "$Q" --listen "ipc://$T/aw" --weights int8 2> "$T/aw.log" &
aw=$!
for _ in $(seq 100); do grep -q "ready on" "$T/aw.log" && break; sleep 0.1; done
timeout 60 $BIN/anedvd-cpu-worker --model "$Q" --listen "ipc://$T/cw" --backend remote --ane "ipc://$T/aw" \
	--weights fp16 --kernel-deadline-ms 5000 > /dev/null 2> "$T/cw.log"
rc=$?
check "cpu-worker fp16 against an int8 ane-worker fails (rc $rc, not a timeout)" [ $rc -ne 0 ] && [ $rc -ne 124 ]
check "... saying why" grep -q -- "--weights must be the ane-worker's" "$T/cw.log"
kill $aw 2> /dev/null
wait $aw 2> /dev/null

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
