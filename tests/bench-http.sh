#!/bin/sh
# bench-http.sh - how fast anedvd answers, through real HTTP.
#
#   tests/bench-http.sh [BUILD_DIR]      (default: build)
#   ENGINE=real tests/bench-http.sh ...  the real anedvd-cpu-worker (emu backend)
#   ENGINE=serve tests/bench-http.sh ... the whole system: `anedvd serve`
#
# ENGINE=fake (default) and real start anedvd-tokenizer (stories260K), the
# fake engine (a test double that emits a fixed script of tokens) or the
# cpu-worker running stories260K, and anedvd-frontend; ENGINE=serve starts
# `anedvd serve --model stories260K.gguf` (tokenizer, ane-worker on emu,
# cpu-worker, frontend, supervised). Then prints:
#   - requests/s on GET /health with many connections (wrk; apt install wrk),
#     5 runs: median and range;
#   - fake: time to first token of a streamed chat completion when the
#     engine answers at once: the frontend's own cost (tokenize, Generate,
#     Poll, decode_stream, SSE), 30 requests: median and range; and
#     inter-token latency when the engine emits a token every 5 ms: the
#     delay the frontend adds on top of 5 ms, median and range;
#   - real and serve: time to first token and inter-token latency of the
#     whole pipeline on stories260K (20 streamed chat completions);
#   - serve: the same prompt through the CLI (`anedvd run --json`, 5 runs:
#     its prefill_ms is its time to first token, decode_ms / decode_tokens
#     its inter-token latency), so HTTP's share shows;
#   - real and serve: 8 concurrent streaming clients (128 tokens each),
#     5 repeats: total tok/s, per-client time to first token median and max,
#     each as median and range over the repeats; for serve at --parallel 1
#     (its default) and 8 (PARALLELS="1 8").
# Figures only: nothing here passes or fails on speed.
set -eu

build=${1:-build}
bin=$build/bin
here=$(cd "$(dirname "$0")" && pwd)
model=$here/data/stories260K/stories260K.gguf
engine=${ENGINE:-fake}
case $engine in
fake) need="anedvd-frontend anedvd-tokenizer fake-engine" ;;
real) need="anedvd-frontend anedvd-tokenizer anedvd-cpu-worker" ;;
serve) need="anedvd anedvd-frontend anedvd-tokenizer anedvd-cpu-worker anedvd-ane-worker" ;;
*) echo "bench-http: ENGINE is fake, real or serve, not '$engine'" >&2; exit 2 ;;
esac
for b in $need; do
	[ -x "$bin/$b" ] || { echo "bench-http: $bin/$b not built (cmake --build $build)" >&2; exit 2; }
done
command -v node >/dev/null || { echo "bench-http: needs node (apt install nodejs)" >&2; exit 2; }

dir=$(mktemp -d)
port=${PORT:-18397}
base=http://127.0.0.1:$port
pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

# start [PARALLEL]: the stack of $engine, ready when /health sees both upstreams
start() {
	if [ "$engine" = serve ]; then
		# a private runtime base: other instances on the machine are not touched
		XDG_RUNTIME_DIR=$dir "$bin/anedvd" serve --model "$model" --port "$port" --parallel "${1:-1}" \
			>"$dir/serve.log" 2>&1 &
		pids="$pids $!"
	else
		"$bin/anedvd-tokenizer" --model "$model" --listen "ipc://$dir/tok.sock" >"$dir/tok.log" 2>&1 &
		pids="$pids $!"
		if [ "$engine" = real ]; then
			"$bin/anedvd-cpu-worker" --model "$model" --listen "ipc://$dir/eng.sock" --backend emu >"$dir/eng.log" 2>&1 &
		else
			"$bin/fake-engine" --model "$model" --listen "ipc://$dir/eng.sock" >"$dir/eng.log" 2>&1 &
		fi
		pids="$pids $!"
		"$bin/anedvd-frontend" --listen "127.0.0.1:$port" --tokenizer "ipc://$dir/tok.sock" \
			--engine "ipc://$dir/eng.sock" --parallel "${1:-4}" >"$dir/fe.log" 2>&1 &
		pids="$pids $!"
	fi
	i=0
	until node -e "fetch('$base/health').then(r=>r.json()).then(h=>process.exit(h.engine==='up'&&h.tokenizer==='up'?0:1)).catch(()=>process.exit(1))"; do
		i=$((i + 1))
		[ $i -lt 100 ] || { echo "bench-http: the stack did not come up" >&2; cat "$dir"/*.log >&2; exit 1; }
		sleep 0.1
	done
}
stop() {
	for p in $pids; do kill -INT "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	pids=""
}

# the measuring client: streamed chat completions, timed per content event
cat >"$dir/bench.mjs" <<'JS'
const [base, what, arg] = process.argv.slice(2);
const url = `${base}/v1/chat/completions`;
const PROMPT = 'Tell me a story about a cat and a dog.';
async function once(content, max_tokens = 64) {
	const t0 = performance.now();
	const res = await fetch(url, {
		method: 'POST',
		headers: { 'content-type': 'application/json' },
		body: JSON.stringify({ messages: [{ role: 'user', content }], stream: true, max_tokens, temperature: 0,
			stream_options: { include_usage: true } }),
	});
	const reader = res.body.getReader();
	const dec = new TextDecoder();
	let buf = '', first = null, last = null, tokens = 0;
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
			if (c.usage && !c.choices?.length) tokens = c.usage.completion_tokens;
			if (!c.choices?.[0]?.delta?.content) continue;
			const t = performance.now();
			if (first === null) first = t - t0;
			else gaps.push(t - last);
			last = t;
		}
	}
	return { ttft: first, gaps, tokens, end: performance.now() };
}
const sorted = (xs) => [...xs].sort((a, b) => a - b);
const med = (v) => v[Math.floor((v.length - 1) / 2)];
const stat = (xs, unit = 'ms', d = 2) => {
	const v = sorted(xs);
	return `${med(v).toFixed(d)} ${unit} median (range ${v[0].toFixed(d)} .. ${v.at(-1).toFixed(d)}, n=${v.length})`;
};
if (what === 'fake') {
	const ttft = [], gaps = [];
	for (let i = 0; i < 30; i++) ttft.push((await once('ECHO:The quick brown fox jumps over the lazy dog.')).ttft);
	console.log(`time to first token, engine answering at once: ${stat(ttft)}`);
	for (let i = 0; i < 10; i++) gaps.push(...(await once('[delay=5] ECHO:One two three four five six seven eight nine ten eleven twelve.')).gaps);
	console.log(`inter-token latency, engine emitting every 5 ms: ${stat(gaps)}`);
} else if (what === 'pipe') {
	const ttft = [], gaps = [];
	for (let i = 0; i < 20; i++) {
		const r = await once(PROMPT);
		ttft.push(r.ttft);
		gaps.push(...r.gaps);
	}
	console.log(`  HTTP: time to first token: ${stat(ttft)}`);
	console.log(`  HTTP: inter-token latency: ${stat(gaps)}`);
} else if (what === 'cli') {
	// arg: a file of `anedvd run --json` outputs, one a line
	const fs = await import('node:fs');
	const runs = fs.readFileSync(arg, 'utf8').trim().split('\n').map((l) => JSON.parse(l).timings);
	console.log(`  CLI:  time to first token (prefill_ms): ${stat(runs.map((t) => t.prefill_ms))}`);
	console.log(`  CLI:  inter-token latency (decode_ms / decode_tokens): ${stat(runs.map((t) => t.decode_ms / t.decode_tokens))}`);
} else if (what === 'conc') {
	// arg: clients; 5 repeats of that many streams started together, 128 tokens each
	const n = Number(arg), rate = [], ttftMed = [], ttftMax = [];
	await once(PROMPT, 8); // warm
	for (let r = 0; r < 5; r++) {
		const t0 = performance.now();
		const res = await Promise.all(Array.from({ length: n }, (_, i) => once(`${PROMPT} (${i})`, 128)));
		const wall = Math.max(...res.map((x) => x.end)) - t0;
		rate.push(res.reduce((a, x) => a + x.tokens, 0) / wall * 1000);
		const tt = sorted(res.map((x) => x.ttft));
		ttftMed.push(med(tt));
		ttftMax.push(tt.at(-1));
	}
	console.log(`  total decode rate: ${stat(rate, 'tok/s', 0)}`);
	console.log(`  per-client time to first token, median of the ${n}: ${stat(ttftMed, 'ms', 1)}`);
	console.log(`  per-client time to first token, max of the ${n}: ${stat(ttftMax, 'ms', 1)}`);
} else if (what === 'health') {
	// without wrk: arg connections as as many fetch loops, 3 s, 5 runs
	const conns = Number(arg), runs = [];
	for (let r = 0; r < 5; r++) {
		let n = 0;
		const until = performance.now() + 3000;
		await Promise.all(Array.from({ length: conns }, async () => {
			while (performance.now() < until) {
				await (await fetch(`${base}/health`)).arrayBuffer();
				n++;
			}
		}));
		runs.push(n / 3);
	}
	console.log(`GET /health, ${conns} connections (node fetch loops; wrk not installed): ${stat(runs, 'req/s', 0)}`);
}
JS

start
echo "anedvd HTTP benchmark ($(nproc) cores; $engine engine, stories260K)"
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
	node "$dir/bench.mjs" "$base" health "${CONNS:-100}"
fi

if [ "$engine" = fake ]; then
	node "$dir/bench.mjs" "$base" fake
	exit 0
fi

echo "one chat prompt, 64 tokens, greedy, one client:"
node "$dir/bench.mjs" "$base" pipe
if [ "$engine" = serve ]; then
	# the CLI runs the same pipeline without HTTP (its own processes, beside the server)
	for r in 1 2 3 4 5; do
		XDG_RUNTIME_DIR=$dir "$bin/anedvd" run --model "$model" --prompt "Tell me a story about a cat and a dog." \
			--max-tokens 64 --temp 0 --json 2>/dev/null | tail -n 1 >>"$dir/cli.jsonl"
	done
	node "$dir/bench.mjs" "$base" cli "$dir/cli.jsonl"
fi

for par in ${PARALLELS:-1 8}; do
	stop
	start "$par"
	echo "8 concurrent streaming clients, 128 tokens each, --parallel $par (5 repeats):"
	node "$dir/bench.mjs" "$base" conc 8
done
