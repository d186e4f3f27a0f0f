#!/bin/sh
# bench-http.sh - how fast anedvd-frontend answers, through real HTTP.
#
#   tests/bench-http.sh [BUILD_DIR]      (default: build)
#   ENGINE=real tests/bench-http.sh ...  the real anedvd-cpu-worker (emu backend)
#
# Starts anedvd-tokenizer (stories260K), the fake engine (a test double that
# emits a fixed script of tokens; or with ENGINE=real the cpu-worker running
# stories260K) and anedvd-frontend, then prints:
#   - requests/s on GET /health with many connections (wrk; apt install wrk),
#     5 runs: median and range;
#   - time to first token of a streamed chat completion when the engine
#     answers at once: the frontend's own cost (tokenize, Generate, Poll,
#     decode_stream, SSE), 30 requests: median and range;
#   - inter-token latency when the engine emits a token every 5 ms: the
#     delay the frontend adds on top of 5 ms, median and range.
# With ENGINE=real: time to first token and inter-token latency of the
# whole pipeline on stories260K.
# Figures only: nothing here passes or fails on speed.
set -eu

build=${1:-build}
bin=$build/bin
here=$(cd "$(dirname "$0")" && pwd)
model=$here/data/stories260K/stories260K.gguf
engine=${ENGINE:-fake}
engine_bin=fake-engine
[ "$engine" = real ] && engine_bin=anedvd-cpu-worker
for b in anedvd-frontend anedvd-tokenizer $engine_bin; do
	[ -x "$bin/$b" ] || { echo "bench-http: $bin/$b not built (cmake --build $build)" >&2; exit 2; }
done
command -v node >/dev/null || { echo "bench-http: needs node (apt install nodejs)" >&2; exit 2; }

dir=$(mktemp -d)
port=${PORT:-18397}
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

"$bin/anedvd-tokenizer" --model "$model" --listen "ipc://$dir/tok.sock" >"$dir/tok.log" 2>&1 &
pids="$pids $!"
if [ "$engine" = real ]; then
	"$bin/anedvd-cpu-worker" --model "$model" --listen "ipc://$dir/eng.sock" --backend emu >"$dir/eng.log" 2>&1 &
else
	"$bin/fake-engine" --model "$model" --listen "ipc://$dir/eng.sock" >"$dir/eng.log" 2>&1 &
fi
pids="$pids $!"
"$bin/anedvd-frontend" --listen "127.0.0.1:$port" --tokenizer "ipc://$dir/tok.sock" \
	--engine "ipc://$dir/eng.sock" --parallel 4 >"$dir/fe.log" 2>&1 &
pids="$pids $!"
base=http://127.0.0.1:$port
i=0
until node -e "fetch('$base/health').then(r=>r.json()).then(h=>process.exit(h.engine==='up'&&h.tokenizer==='up'?0:1)).catch(()=>process.exit(1))"; do
	i=$((i + 1))
	[ $i -lt 100 ] || { echo "bench-http: the stack did not come up" >&2; cat "$dir"/*.log >&2; exit 1; }
	sleep 0.1
done

echo "anedvd-frontend HTTP benchmark ($(nproc) cores; $engine engine, stories260K)"
if command -v wrk >/dev/null; then
	runs=""
	for r in 1 2 3 4 5; do
		v=$(wrk -t2 -c${CONNS:-100} -d${SECS:-3}s "$base/health" | awk '/Requests\/sec/ {print $2}')
		runs="$runs $v"
	done
	echo "$runs" | tr ' ' '\n' | grep . | sort -n | awk -v c="${CONNS:-100}" '
		{ v[NR] = $1 }
		END { printf "GET /health, %d connections: %.0f req/s median (range %.0f .. %.0f, %d runs)\n", c, v[int((NR + 1) / 2)], v[1], v[NR], NR }'
else
	echo "GET /health: skipped (wrk not installed: apt install wrk)"
fi

node - "$base" "$engine" <<'EOF'
const base = process.argv[2];
const real = process.argv[3] === 'real';
const url = `${base}/v1/chat/completions`;
async function once(content) {
	const t0 = performance.now();
	const res = await fetch(url, {
		method: 'POST',
		headers: { 'content-type': 'application/json' },
		body: JSON.stringify({ messages: [{ role: 'user', content }], stream: true, max_tokens: 64, temperature: 0 }),
	});
	const reader = res.body.getReader();
	const dec = new TextDecoder();
	let buf = '', first = null, last = null;
	const gaps = [];
	for (;;) {
		const { value, done } = await reader.read();
		if (done) break;
		buf += dec.decode(value, { stream: true });
		let k;
		while ((k = buf.indexOf('\n\n')) >= 0) {
			const ev = buf.slice(0, k);
			buf = buf.slice(k + 2);
			if (!ev.startsWith('data: {')) continue;
			const c = JSON.parse(ev.slice(6));
			if (!c.choices?.[0]?.delta?.content) continue;
			const t = performance.now();
			if (first === null) first = t - t0;
			else gaps.push(t - last);
			last = t;
		}
	}
	return { ttft: first, gaps };
}
const stat = (xs) => {
	const v = [...xs].sort((a, b) => a - b);
	return `${v[Math.floor((v.length - 1) / 2)].toFixed(2)} ms median (range ${v[0].toFixed(2)} .. ${v.at(-1).toFixed(2)}, n=${v.length})`;
};
const ttft = [], gaps = [];
if (real) {
	for (let i = 0; i < 20; i++) {
		const r = await once('Tell me a story about a cat and a dog.');
		ttft.push(r.ttft);
		gaps.push(...r.gaps);
	}
	console.log(`time to first token, whole pipeline: ${stat(ttft)}`);
	console.log(`inter-token latency, whole pipeline: ${stat(gaps)}`);
} else {
	for (let i = 0; i < 30; i++) ttft.push((await once('ECHO:The quick brown fox jumps over the lazy dog.')).ttft);
	console.log(`time to first token, engine answering at once: ${stat(ttft)}`);
	for (let i = 0; i < 10; i++) gaps.push(...(await once('[delay=5] ECHO:One two three four five six seven eight nine ten eleven twelve.')).gaps);
	console.log(`inter-token latency, engine emitting every 5 ms: ${stat(gaps)}`);
}
EOF
