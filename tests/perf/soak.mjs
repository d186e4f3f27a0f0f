// soak.mjs - a long run of mixed traffic with periodic kills (a benchmark,
// not a test: it prints figures, asserts nothing; run it niced).
//
//   node tests/perf/soak.mjs BUILD_DIR [MINUTES]     (default 20)
//
// Starts `anedvd serve --parallel 4 --embeddings` on MODEL (default
// stories260K), and for MINUTES runs CLIENTS (default 8) client loops, each
// picking requests at random (a fixed seed): chat, completions, messages and
// Responses, streamed and not, greedy and seeded, n = 2 with logprobs, stop
// sequences; embeddings, count_tokens, /tokenize, /v1/models, /health.
// Every KILL_EVERY seconds (default 30) one of the ane-worker, cpu-worker and
// tokenizer, in turn, is SIGKILLed. A request is an error when it does not
// answer 200, when a stream carries an error event, or when a reply that has
// a reference (every generation: greedy or seeded) differs from it; the
// references are taken before the first kill.
//
// Prints: requests completed and errors (by kind), the kills, jobs resumed
// on a restarted cpu-worker, and the resident memory (VmRSS) of every
// process after a 30 s warm-up and at the end (a process that was killed
// and restarted is a new process: its figure is its own incarnation's;
// the frontend and the CLI live throughout), and each worker's VmRSS just
// before each of its kills: its incarnations compared at the same age,
// first with last. KILL_EVERY=0: no kills (every process lives throughout).
// Also the load average.
//
// Environment: MODEL, CLIENTS, KILL_EVERY (s), DELAY_US (the ane-worker's
// ANEDVD_DEBUG_DELAY_US, default 200: kills then land mid-request), SEED.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const build = process.argv[2];
const minutes = Number(process.argv[3] || 20);
if (!build) {
	console.error('usage: node tests/perf/soak.mjs BUILD_DIR [MINUTES]');
	process.exit(2);
}
const BIN = path.resolve(build, 'bin', 'anedvd');
const t00 = new Date().toISOString().slice(11, 19);
const MODEL = process.env.MODEL || path.join(here, '..', 'data', 'stories260K', 'stories260K.gguf');
const CLIENTS = Number(process.env.CLIENTS || 8);
const KILL_EVERY = Number(process.env.KILL_EVERY || 30) * 1000;
const DELAY_US = process.env.DELAY_US || '200';
let seed = Number(process.env.SEED || 7) >>> 0;
const rand = () => {
	seed = (seed + 0x6d2b79f5) >>> 0;
	let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
	t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
	return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const freePort = () => new Promise((res) => {
	import('node:net').then(({ createServer }) => {
		const s = createServer().listen(0, '127.0.0.1', () => {
			const { port } = s.address();
			s.close(() => res(port));
		});
	});
});

const rt = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-soak-'));
const log = path.join(rt, 'serve.log');
const port = await freePort();
const base = `http://127.0.0.1:${port}`;
const out = fs.openSync(log, 'a');
const srv = spawn(BIN, ['serve', '--model', MODEL, '--port', String(port), '--parallel', '4', '--embeddings'], {
	stdio: ['ignore', out, out],
	env: { ...process.env, XDG_RUNTIME_DIR: rt, ANEDVD_DEBUG_DELAY_US: DELAY_US },
});
fs.closeSync(out);
const statusFile = path.join(rt, `anedvd-${srv.pid}`, 'status');
const procs = () => {
	try {
		return Object.fromEntries(fs.readFileSync(statusFile, 'utf8').trim().split('\n').map((l) => l.split(/\s+/))
			.map(([n, pid, r]) => [n, { pid: Number(pid), restarts: Number(r) }]));
	} catch {
		return {};
	}
};
const rss = (pid) => {
	try {
		return Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m)[1]) / 1024;
	} catch {
		return NaN;
	}
};
const snapshot = () => {
	const p = procs();
	const r = { cli: { pid: srv.pid, mib: rss(srv.pid) } };
	for (const [n, { pid }] of Object.entries(p)) r[n] = { pid, mib: rss(pid) };
	return r;
};

for (let i = 0; ; i++) {
	try {
		const h = await (await fetch(`${base}/health`)).json();
		if (h.tokenizer === 'up' && h.engine === 'up') break;
	} catch {
		// not yet
	}
	if (i > 1200 || srv.exitCode !== null) {
		console.error(fs.readFileSync(log, 'utf8'));
		process.exit(1);
	}
	await sleep(50);
}

const user = (content) => [{ role: 'user', content }];
// the generations: [name, path, body]; each has a reference reply
const GENS = [
	['chat-greedy', '/v1/chat/completions', { messages: user('Tell me a story.'), max_tokens: 100, temperature: 0 }],
	['chat-seeded-n2-logprobs', '/v1/chat/completions', { messages: user('A cat.'), max_tokens: 60, temperature: 0.9, seed: 1, n: 2, logprobs: true, top_logprobs: 2 }],
	['completions-penalties', '/v1/completions', { prompt: 'Once upon a time', max_tokens: 120, temperature: 1, seed: 7, frequency_penalty: 0.5, presence_penalty: 0.3 }],
	['completions-stop', '/v1/completions', { prompt: 'Once upon a time', max_tokens: 120, temperature: 0, stop: ['too high'] }],
	['messages-greedy', '/v1/messages', { messages: user('Tell me a story.'), max_tokens: 100, temperature: 0 }],
	['messages-seeded-stop', '/v1/messages', { messages: user('Lily and the ball.'), max_tokens: 100, temperature: 0.6, seed: 5, stop_sequences: ['park'] }],
	['responses', '/v1/responses', { input: 'A story about a dog.', max_output_tokens: 80, temperature: 0.8, seed: 3 }],
];
// the rest: [name, method, path, body, check]
const OTHERS = [
	['embeddings', 'POST', '/v1/embeddings', { input: ['Once upon a time', 'Lily'] }, (j) => j.data?.length === 2],
	['count_tokens', 'POST', '/v1/messages/count_tokens', { messages: user('Tell me a story.') }, (j) => j.input_tokens > 0],
	['tokenize', 'POST', '/tokenize', { content: 'Once upon a time' }, (j) => j.tokens?.length > 0],
	['models', 'GET', '/v1/models', undefined, (j) => j.data?.length === 1],
	['health', 'GET', '/health', undefined, (j) => j.tokenizer !== undefined],
];

// what a generation gave, streamed or not, in one comparable form
function reply(p, stream, text) {
	if (!stream) {
		const j = JSON.parse(text);
		if (j.error || j.type === 'error') return { error: j.error || j };
		if (p === '/v1/messages') return { t: [j.content.map((c) => c.text).join('')], f: [j.stop_reason], u: j.usage.output_tokens };
		if (p === '/v1/responses') return { t: [j.output_text ?? j.output.map((o) => o.content.map((c) => c.text).join('')).join('')], f: [j.status], u: j.usage.output_tokens };
		return {
			t: j.choices.map((c) => c.message?.content ?? c.text),
			f: j.choices.map((c) => c.finish_reason),
			l: j.choices.map((c) => JSON.stringify(c.logprobs?.content?.map((x) => [x.token, x.logprob]) ?? null)),
			u: j.usage.completion_tokens,
		};
	}
	const t = [], f = [], l = [];
	let u = null, error = null;
	for (const block of text.split('\n\n')) {
		const line = block.split('\n').find((x) => x.startsWith('data: '));
		const ev = (block.split('\n').find((x) => x.startsWith('event: ')) || '').slice(7);
		if (!line || line === 'data: [DONE]') continue;
		const d = JSON.parse(line.slice(6));
		if (d.error || ev === 'error') error = d.error || d;
		if (p === '/v1/messages') {
			if (ev === 'content_block_delta') t[0] = (t[0] || '') + d.delta.text;
			if (ev === 'message_delta') { f[0] = d.delta.stop_reason; u = d.usage.output_tokens; }
		} else if (p === '/v1/responses') {
			if (ev === 'response.output_text.delta') t[0] = (t[0] || '') + d.delta;
			if (ev === 'response.completed' || ev === 'response.incomplete') { f[0] = d.response.status; u = d.response.usage.output_tokens; }
		} else {
			for (const c of d.choices || []) {
				t[c.index] = (t[c.index] || '') + (c.delta?.content ?? c.text ?? '');
				if (c.finish_reason) f[c.index] = c.finish_reason;
				if (c.logprobs?.content) l[c.index] = [...(l[c.index] || []), ...c.logprobs.content.map((x) => [x.token, x.logprob])];
			}
			if (d.usage) u = d.usage.completion_tokens;
		}
	}
	if (error) return { error };
	return { t, f, l: p.startsWith('/v1/chat') ? t.map((_, i) => JSON.stringify(l[i] ?? null)) : undefined, u };
}

async function generate([, p, body], stream) {
	const r = await fetch(base + p, {
		method: 'POST',
		headers: { 'content-type': 'application/json' },
		body: JSON.stringify({ model: 'm', ...body, stream, ...(stream && !p.startsWith('/v1/messages') && !p.startsWith('/v1/responses') ? { stream_options: { include_usage: true } } : {}) }),
	});
	const text = await r.text();
	if (r.status !== 200) return { error: `status ${r.status}: ${text.slice(0, 200)}` };
	return reply(p, stream, text);
}

const refs = [];
for (const g of GENS) {
	const a = await generate(g, false), b = await generate(g, true);
	if (a.error || b.error) {
		console.error(`reference of ${g[0]} failed: ${JSON.stringify(a.error || b.error)}`);
		process.exit(1);
	}
	const same = JSON.stringify(a.t) === JSON.stringify(b.t) && JSON.stringify(a.f) === JSON.stringify(b.f) && a.u === b.u;
	if (!same) {
		console.error(`${g[0]}: the whole reply and the stream differ before any kill:\n${JSON.stringify(a)}\n${JSON.stringify(b)}`);
		process.exit(1);
	}
	refs.push(b);
}

const stats = { completed: 0, errors: 0, byKind: {}, errorSamples: [], slow: [] };
const count = (kind, ok, detail, ms) => {
	if (ms !== undefined) stats.slow.push([ms, kind, new Date(Date.now() - ms).toISOString().slice(11, 19), ok]);
	const k = (stats.byKind[kind] ??= { ok: 0, err: 0 });
	stats.completed++;
	if (ok) k.ok++;
	else {
		k.err++;
		stats.errors++;
		if (stats.errorSamples.length < 10) stats.errorSamples.push(`${kind}: ${detail}`);
	}
};
const t0 = Date.now(), until = t0 + minutes * 60000;
let startRss = null;
const kills = [], killLog = [], atKill = {};
const clients = Array.from({ length: CLIENTS }, async () => {
	while (Date.now() < until) {
		const x = rand();
		if (x < 0.75) {
			const i = Math.floor(rand() * GENS.length);
			const stream = rand() < 0.6;
			const q0 = Date.now();
			const got = await generate(GENS[i], stream).catch((e) => ({ error: String(e) }));
			// a whole reply has no logprob deltas of its own kind: compare what both have
			const want = refs[i];
			const same = !got.error && JSON.stringify(got.t) === JSON.stringify(want.t) && JSON.stringify(got.f) === JSON.stringify(want.f)
				&& got.u === want.u && (!got.l || !want.l || JSON.stringify(got.l) === JSON.stringify(want.l));
			count(`${GENS[i][0]}${stream ? ' (stream)' : ''}`, same, got.error ? JSON.stringify(got.error) : `differs: ${JSON.stringify(got).slice(0, 300)}`, Date.now() - q0);
		} else {
			const [kind, method, p, body, check] = OTHERS[Math.floor(rand() * OTHERS.length)];
			try {
				const r = await fetch(base + p, { method, headers: body ? { 'content-type': 'application/json' } : {}, body: body ? JSON.stringify(body) : undefined });
				const j = await r.json();
				count(kind, r.status === 200 && check(j), `status ${r.status}: ${JSON.stringify(j).slice(0, 200)}`);
			} catch (e) {
				count(kind, false, String(e));
			}
		}
	}
});
const killer = (async () => {
	await sleep(30000);
	startRss = snapshot();
	const names = ['ane-worker', 'cpu-worker', 'tokenizer'];
	for (let k = 0; KILL_EVERY > 0 && Date.now() + KILL_EVERY < until; k++) {
		await sleep(KILL_EVERY);
		const name = names[k % 3];
		const p = procs()[name];
		if (p && p.pid > 0) {
			try {
				const mib = rss(p.pid);
				process.kill(p.pid, 'SIGKILL');
				kills.push(name);
				if (!Number.isNaN(mib)) (atKill[name] ||= []).push(mib);
				killLog.push(`${new Date().toISOString().slice(11, 19)} ${name} ${p.pid}`);
			} catch {
				// it was restarting
			}
		}
	}
})();
await Promise.all([...clients, killer]);
await sleep(2000);
const endRss = snapshot();
const metrics = await (await fetch(`${base}/metrics`)).text();
const resumed = Number((metrics.match(/^anedvd_generations_resumed_total (\d+)$/m) || [])[1] ?? NaN);
const load = fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');
const st = procs();
srv.kill('SIGINT');
const code = await new Promise((r) => srv.once('exit', (c) => r(c)));

console.log(`soak: ${minutes} min of mixed traffic, ${CLIENTS} clients, a kill every ${KILL_EVERY / 1000} s, model ${path.basename(MODEL)}, ANEDVD_DEBUG_DELAY_US=${DELAY_US}`);
console.log(`requests completed: ${stats.completed}`);
console.log(`errors: ${stats.errors}`);
for (const [k, v] of Object.entries(stats.byKind).sort()) console.log(`  ${k.padEnd(36)} ${String(v.ok).padStart(6)} ok ${String(v.err).padStart(4)} errors`);
for (const e of stats.errorSamples) console.log(`  error: ${e}`);
const ms = stats.slow.map((x) => x[0]).sort((a, b) => a - b);
const pct = (p) => ms[Math.min(ms.length - 1, Math.floor((p / 100) * ms.length))];
console.log(`generation time (ms): median ${pct(50)}, p90 ${pct(90)}, p99 ${pct(99)}, max ${ms.at(-1)}`);
for (const [t, kind, at, ok] of stats.slow.sort((a, b) => b[0] - a[0]).slice(0, 5)) console.log(`  slowest: ${t} ms ${kind} (started ${at}${ok ? '' : ', an error'})`);
const byName = {};
for (const k of kills) byName[k] = (byName[k] || 0) + 1;
console.log(`kills: ${kills.length} (${Object.entries(byName).map(([k, v]) => `${k} ${v}`).join(', ')}); jobs resumed on a restarted cpu-worker: ${resumed}`);
console.log('resident memory (VmRSS, MiB) after the 30 s warm-up and at the end:');
console.log(`  ${'process'.padEnd(12)} ${'start'.padStart(8)} ${'end'.padStart(8)} ${'change'.padStart(8)}  restarts`);
for (const n of Object.keys(endRss)) {
	const a = startRss?.[n]?.mib, b = endRss[n].mib;
	const same = startRss?.[n]?.pid === endRss[n].pid;
	console.log(`  ${n.padEnd(12)} ${a?.toFixed(1).padStart(8)} ${b.toFixed(1).padStart(8)} ${(((b - a) / a) * 100).toFixed(1).padStart(7)}%  ${st[n]?.restarts ?? 0}${same ? '' : ' (a new process since the start)'}`);
}
// a worker lives 3 x KILL_EVERY between its kills: its incarnations are
// compared at the same age, the moment before their kill
if (Object.keys(atKill).length) {
	console.log(`resident memory (VmRSS, MiB) of each worker just before its kills: each incarnation had lived ${(3 * KILL_EVERY) / 1000} s (the first: since the start)`);
	console.log(`  ${'process'.padEnd(12)} ${'first'.padStart(8)} ${'last'.padStart(8)} ${'change'.padStart(8)}  ${'min'.padStart(6)} ${'median'.padStart(6)} ${'max'.padStart(6)}  kills`);
	for (const [n, v] of Object.entries(atKill)) {
		const o = [...v].sort((a, b) => a - b), a = v[0], b = v.at(-1);
		console.log(`  ${n.padEnd(12)} ${a.toFixed(1).padStart(8)} ${b.toFixed(1).padStart(8)} ${(((b - a) / a) * 100).toFixed(1).padStart(7)}%  ${o[0].toFixed(1).padStart(6)} ${o[o.length >> 1].toFixed(1).padStart(6)} ${o.at(-1).toFixed(1).padStart(6)}  ${v.length}`);
	}
}
console.log(`load average at the end: ${load}; serve exited ${code} on SIGINT`);
if (!process.env.ANEDVD_KEEP_TMP) fs.rmSync(rt, { recursive: true, force: true });
else {
	fs.writeFileSync(path.join(rt, 'kills.txt'), killLog.join('\n') + '\n');
	console.log(`logs: ${rt} (started ${t00})`);
}
