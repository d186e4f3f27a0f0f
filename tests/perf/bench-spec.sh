#!/usr/bin/env bash
# bench-spec.sh - speculative decoding (prompt lookup), measured.
#
#   tests/perf/bench-spec.sh BUILD_DIR
#
# Prints, never asserts (the machine may be busy: each repeat runs speculation
# on and off back to back, alternating which goes first, and the on/off ratio
# is taken within the repeat; the load average is printed):
#   stories260K, greedy, NGEN tokens, retelling a story it wrote (the story,
#     then its first words again), and after "Once upon a time" alone:
#     acceptance, decode tok/s on and off, their ratio, whether the tokens
#     are the same (they must be);
#   the Qwen2.5-0.5B shape (F16, BUILD_DIR/tests/gen-model, random weights,
#     written under $TMPDIR and removed) after a 400-token passage given
#     twice: the same figures;
#   the same shape where every draft is accepted (the random model repeats
#     one token), drafts of 1, 2, 4 and 8 verified in full against none:
#     ms per decode call and the cost of each extra column as a share of a
#     one-column call (the verify cost per column).
# Environment: REPEATS (default 5), NGEN (stories260K tokens, 512),
#   QWEN_NGEN (128), CASES (stories,qwen).
set -eu
B=${1:?usage: tests/perf/bench-spec.sh BUILD_DIR}
for f in bin/anedvd tests/gen-model; do
	[ -x "$B/$f" ] || { echo "bench-spec.sh: $B/$f is missing: build first (cmake --build $B)" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "bench-spec.sh: needs python3" >&2; exit 2; }
exec python3 "$(dirname "$0")/bench-spec.py" "$B"
