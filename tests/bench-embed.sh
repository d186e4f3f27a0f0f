#!/usr/bin/env bash
# bench-embed.sh - POST /v1/embeddings throughput on the SmolLM2-135M shapes.
#
#   tests/bench-embed.sh BUILD_DIR [REPEATS]
#
# Not a ctest: it prints the median and the range (min..max) of REPEATS
# (default 3, at least 3) timings of 64 short inputs (8 token ids each):
# in one request (the cpu-worker packs up to 8 inputs into each kernel
# call) and as 64 requests of one input, one after the other. The model is
# written by tests/gen-model.c (F16, ~0.3 GB under $TMPDIR, removed at the
# end) and served by `anedvd serve --embeddings` on the emu backend.
# Needs python3 and curl.
set -eu
B=${1:?usage: bench-embed.sh BUILD_DIR [REPEATS]}
N=${2:-3}
[ "$N" -ge 3 ] || { echo "REPEATS must be at least 3" >&2; exit 2; }
A=$B/bin/anedvd
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-bench-embed.XXXXXX")
PID=
cleanup() {
	[ -n "$PID" ] && kill -INT "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
	rm -rf "$T"
}
trap cleanup EXIT
export ANEDVD_LOG=${ANEDVD_LOG:-error}

"$B/tests/gen-model" smollm2-135m f16 1 "$T/smollm2.gguf" > /dev/null
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
XDG_RUNTIME_DIR=$T "$A" serve --model "$T/smollm2.gguf" --port "$PORT" --embeddings --backend emu > "$T/serve.log" 2>&1 &
PID=$!
URL=http://127.0.0.1:$PORT
for _ in $(seq 1 1200); do
	curl -sf "$URL/health" | grep -q '"engine":"up"' && break
	kill -0 "$PID" 2>/dev/null || { cat "$T/serve.log"; exit 1; }
	sleep 0.5
done

python3 - "$URL" "$N" <<'PY'
import json, statistics, sys, time, urllib.request
url, n = sys.argv[1], int(sys.argv[2])
inputs = [[1] + [300 + (7 * i + 13 * k) % 4000 for k in range(7)] for i in range(64)]
def post(body):
    r = urllib.request.Request(url + "/v1/embeddings", json.dumps(body).encode(), {"content-type": "application/json"})
    return json.load(urllib.request.urlopen(r))
dims = len(post({"input": inputs[:1]})["data"][0]["embedding"])  # warm-up
def stats(label, v):
    print(f"  {label:<44} median {statistics.median(v):9.1f} inputs/s  range {min(v):.1f} .. {max(v):.1f}  (n={len(v)})")
one, batch = [], []
for _ in range(n):
    t = time.perf_counter(); post({"input": inputs}); batch.append(64 / (time.perf_counter() - t))
    t = time.perf_counter()
    for x in inputs:
        post({"input": [x]})
    one.append(64 / (time.perf_counter() - t))
print(f"embeddings, SmolLM2-135M shapes (F16, emu), {dims} dimensions, 64 inputs of 8 tokens:")
stats("one request of 64 inputs", batch)
stats("64 requests of one input", one)
PY
