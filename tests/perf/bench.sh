#!/usr/bin/env bash
# bench.sh - anedvd beside llama.cpp on the same files, in figures.
#
#   tests/perf/bench.sh BUILD_DIR
#   LLAMA_BENCH=/path/to/llama-bench tests/perf/bench.sh BUILD_DIR
#   FORMAT=md tests/perf/bench.sh BUILD_DIR > table.md     (markdown, for docs/RESULTS.md)
#
# Writes the test models with the project's own GGUF writer (BUILD_DIR/tests/
# gen-model: the SmolLM2-135M and Qwen2.5-0.5B shapes, F16 and Q8_0, Q4_0 on request) under
# $TMPDIR, removed at the end, and takes tests/data/stories260K/stories260K.gguf
# as it is. For each model, REPEATS times, alternating the tools (anedvd run,
# then llama-bench, then the starts of both, then anedvd-dev kernels and the
# streaming read), it measures and prints the median and the range:
#   decode tok/s and prefill tok/s (64-token prompt), anedvd and llama.cpp
#   IPC per kernel call and the share of decode outside the kernels (run --json)
#   emu weight GB/s (anedvd-dev kernels): each kernel repeated, and its decode
#     pass (every kernel once, in order) against a 2-thread streaming read in
#     the same process; and the read of BUILD_DIR/tests/bench-stream, measured
#     in the same loop
#   start to first token, cold (file out of the page cache, empty kernel cache)
#     and warm (the same start again)
#   peak RSS of a run's whole process tree (anedvd and its children)
# and the ratios anedvd/llama.cpp beside the targets of the issue they serve.
# Options a build may lack (--weights, a kernel cache) are found in
# 'anedvd run --help' and used when present; the tables say n/a otherwise.
#
# Environment:
#   LLAMA_BENCH  a llama.cpp llama-bench binary (CPU build): compare with it
#   MODELS       comma-separated, default all five:
#                stories260K,smollm2-135m:f16,smollm2-135m:q8_0,qwen2.5-0.5b:f16,qwen2.5-0.5b:q8_0
#                (shape:wtype, wtype f16, q8_0 or q4_0; shape:wtype:weights names the
#                kernels' weights, e.g. qwen2.5-0.5b:q4_0:lut4, else anedvd's default)
#   REPEATS      repeats per model (default 5; QUICK: 3)
#   NGEN         tokens decoded (default 64; QUICK: 8)
#   DEPTH        also a long context (off by default): prefill of DEPTH tokens
#                and decode after them (llama-bench -p DEPTH, and -d DEPTH for
#                its decode), with anedvd's attention ms per decode token
#   QUICK=1      fewer repeats, tokens, kernel iterations and a smaller read
#   FORMAT=md    markdown tables instead of aligned text
# Needs python3 (standard library only). Progress goes to stderr, the tables to stdout.
set -eu
B=${1:?usage: tests/perf/bench.sh BUILD_DIR}
for f in bin/anedvd bin/anedvd-dev tests/gen-model tests/bench-stream; do
	[ -x "$B/$f" ] || { echo "bench.sh: $B/$f is missing: build first (cmake --build $B)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "bench.sh: needs python3" >&2; exit 2; }
exec python3 "$(dirname "$0")/bench.py" "$B"
