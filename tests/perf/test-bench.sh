#!/usr/bin/env bash
# test-bench.sh - smoke test of tests/perf/bench.sh (ctest bench-smoke).
#
#   tests/perf/test-bench.sh BUILD_DIR
#
# Runs the benchmark in QUICK mode on stories260K only, twice: alone (no
# LLAMA_BENCH: the comparison is skipped with a note; 3 repeats) and, one
# repeat, in markdown beside
# fake-llama-bench.sh (fixed figures in llama-bench's JSON form, so the
# parsing, the ratios and the summary run without llama.cpp). Checks that
# every row is there and holds numbers; never the figures themselves.
set -eu
B=${1:?usage: test-bench.sh BUILD_DIR}
D=$(cd "$(dirname "$0")" && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-bench-smoke.XXXXXX")
trap 'if [ -n "${ANEDVD_KEEP_TMP:-}" ]; then echo "kept $T (ANEDVD_KEEP_TMP)" >&2; else rm -rf "$T"; fi' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

env -u LLAMA_BENCH QUICK=1 REPEATS=3 NGEN=4 MODELS=stories260K TMPDIR="$T" \
	bash "$D/bench.sh" "$B" > "$T/text.out" 2> "$T/text.err" || { cat "$T/text.err" >&2; fail "bench.sh exited $?"; }
cat "$T/text.out"
# a figure: median (min..max)
num='[0-9][0-9.]*'
fig="$num \\($num\\.\\.$num\\)"
for row in "decode tok/s" "prefill tok/s (64-token prompt)" "start to first token, cold s" \
	"start to first token, warm s" "peak RSS, all processes (sum of VmRSS), MiB" \
	"peak memory, all processes together (sum of PSS), MiB" "peak private (RssAnon), MiB" \
	"IPC per call to the ane-worker, us" "decode time outside the kernels, %" "emu weight GB/s (kernels, 1 column)" \
	"decode weight GB/s (weight bytes per token x tok/s)" \
	"2-thread streaming read GB/s" "emu weight GB/s, decode pass (every kernel once, 1 column)" \
	"2-thread streaming read GB/s, same process" "emu decode pass / streaming read, same process"; do
	grep -F "$row" "$T/text.out" | grep -Eq "$fig" || fail "no figure in row '$row'"
done
grep -F "ms per generated token, whole job" "$T/text.out" | grep -Eq " $num = $num \+ $num \+ $num " ||
	fail "no per-token split"
grep -q "llama.cpp: not compared (set LLAMA_BENCH" "$T/text.out" || fail "no note that the comparison is skipped"
grep -q "median (min..max) of 3 repeats" "$T/text.out" || fail "repeats not stated"
grep -Eq "^  machine: .+ CPUs, .+ RAM" "$T/text.out" || fail "no machine line"
grep -Eq -- "--weights: (int8|n/a)" "$T/text.out" || fail "no --weights line"
grep -q "^== Kernel call round trip ==" "$T/text.out" || fail "no round-trip section"
grep -Eq "^(n/a \(this build has no tests/bench-dataplane\)|  empty call: data plane.* $fig)" "$T/text.out" ||
	fail "no round trip figure, nor its n/a"
[ -z "$(ls "$T" | grep anedvd-bench. || true)" ] || fail "the models' temporary directory was left behind"

# one repeat is enough for the form (this test must stay fast, sanitizer builds included);
# a long context too (DEPTH)
QUICK=1 REPEATS=1 NGEN=4 DEPTH=24 MODELS=stories260K TMPDIR="$T" FORMAT=md LLAMA_BENCH="$D/fake-llama-bench.sh" \
	bash "$D/bench.sh" "$B" > "$T/md.out" 2> "$T/md.err" || { cat "$T/md.err" >&2; fail "bench.sh (md) exited $?"; }
cat "$T/md.out"
grep -q "^| measure | anedvd | llama.cpp | anedvd/llama.cpp | target |$" "$T/md.out" || fail "no markdown table head"
grep -q "^|---|---|---|---|---|$" "$T/md.out" || fail "no markdown rule"
grep -q "build commit fake000" "$T/md.out" || fail "the peer's build commit is not reported"
# the fake prints 100 tok/s decode, 1000 tok/s prefill: the peer columns and the ratios are numbers
grep -F "| decode tok/s |" "$T/md.out" | grep -Eq "\| 100 \(100\.\.100\) \| $fig+x \|" || fail "decode: no peer figure and ratio"
grep -F "| prefill tok/s" "$T/md.out" | grep -Eq "\| 1000 \(1000\.\.1000\) \| $fig+x \|" || fail "prefill: no peer figure and ratio"
grep -F "| prefill tok/s (24-token prompt) |" "$T/md.out" | grep -Eq "\| 1000 \(1000\.\.1000\) \| $fig+x \|" ||
	fail "DEPTH: no prefill row with the peer's figure"
grep -F "| decode tok/s after a 24-token prompt |" "$T/md.out" | grep -Eq "\| 50\.0 \(50\.0\.\.50\.0\) \| $fig+x \|" ||
	fail "DEPTH: no decode row with the peer's figure"
grep -F "| attention ms per decode token after a 24-token prompt |" "$T/md.out" | grep -Eq "\| $fig \|" ||
	fail "DEPTH: no attention row"
! grep -q "after a 24-token prompt" "$T/text.out" || fail "DEPTH rows without DEPTH"
# a setting that is not a count: a clear refusal, not a traceback
if DEPTH=abc MODELS=stories260K TMPDIR="$T" bash "$D/bench.sh" "$B" > "$T/bad.out" 2> "$T/bad.err"; then
	fail "DEPTH=abc was accepted"
fi
grep -q "DEPTH=abc: want an integer >= 0" "$T/bad.err" || { cat "$T/bad.err" >&2; fail "no clear error for DEPTH=abc"; }
! grep -q Traceback "$T/bad.err" || fail "a traceback for DEPTH=abc"
grep -F "| start to first token, cold s |" "$T/md.out" | grep -Eq "\| $fig \| $fig \| $fig+x \|" || fail "cold start: no peer figure"
grep -F "| peak RSS, all processes (sum of VmRSS), MiB |" "$T/md.out" | grep -Eq "\| $fig \| $fig \| $fig+x \|" || fail "RSS: no peer figure"
grep -F "| peak memory, all processes together (sum of PSS), MiB |" "$T/md.out" | grep -Eq "\| $fig \| $fig \| $fig+x \|" || fail "PSS: no peer figure"
grep -q "^## Against llama.cpp" "$T/md.out" || fail "no summary of the ratios"
grep -Eq "^\| stories260K F32 \| fp16 \| $num+x \| *\| $num+x \| $num+x \| *\| $num+x \|$" "$T/md.out" || fail "no summary row"
# a peer that dies on a model: that model's comparison is skipped, saying why, and the run goes on
QUICK=1 REPEATS=1 NGEN=4 MODELS=stories260K TMPDIR="$T" FAKE_LLAMA_SIGILL=1 LLAMA_BENCH="$D/fake-llama-bench.sh" \
	bash "$D/bench.sh" "$B" > "$T/ill.out" 2> "$T/ill.err" || { cat "$T/ill.err" >&2; fail "bench.sh (peer dies) exited $?"; }
grep -q "^llama.cpp: not compared on this model: llama-bench failed (killed by SIGILL)" "$T/ill.out" ||
	fail "a peer killed by SIGILL is not reported"
grep -F "decode tok/s" "$T/ill.out" | grep -Eq "$fig +n/a" || fail "the failed peer still has figures"
echo "bench-smoke: ok"
