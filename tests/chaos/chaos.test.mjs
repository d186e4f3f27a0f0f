// chaos.test.mjs - no request lost to a crash: `anedvd serve --parallel 4`
// on stories260K, 8 clients streaming in both dialects (greedy and seeded;
// n = 2 with logprobs, penalties, stop sequences), while a loop SIGKILLs
// the ane-worker, the cpu-worker and the tokenizer at random moments, 20
// kills. Every request must complete with exactly what it gives without
// kills: the text of every choice, the finish, the usage, the logprobs.
// Then connections cut: bursts of connections to the workers' sockets that
// close at once make them listen anew, which closes the frontend's
// connections under its calls; again every request completes with its
// uninterrupted reply, and no process restarts. Then the frontend's own
// crash on a tcp:// engine, where its pid means
// nothing to the cpu-worker: its running job is cancelled within 1 s of
// the last renewal of the frontend's lease.
//
// Deterministic by design rather than by luck: what is compared does not
// depend on when a kill lands (that is the property under test), the kill
// order is a fixed shuffle (7 cpu-worker, 7 ane-worker, 6 tokenizer), each
// kill waits for its target to be back up, the ane-worker is slowed
// (ANEDVD_DEBUG_DELAY_US) so that a kill finds requests mid-stream, and no
// client has a timeout of its own: the server's deadline (600 s) is the
// only one. CHAOS_KILLS, CHAOS_SEED change the run.
//
// Environment (ctest sets it): ANEDVD_BIN, FE_MODEL.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { freePort, sse } from '../http/harness.mjs';

const BIN = process.env.ANEDVD_BIN;
const MODEL = process.env.FE_MODEL;
const skip = BIN && MODEL ? false : 'ANEDVD_BIN / FE_MODEL not set (run through ctest -R test-chaos)';
const KILLS = Number(process.env.CHAOS_KILLS || 20);
const SEED = Number(process.env.CHAOS_SEED || 20261214);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// a small seeded generator (mulberry32): the kill order and the pauses
function rng(seed) {
	let a = seed >>> 0;
	return () => {
		a = (a + 0x6d2b79f5) >>> 0;
		let t = a;
		t = Math.imul(t ^ (t >>> 15), t | 1);
		t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}

// one server: `anedvd serve` in a private runtime directory
async function serve(extra, env = {}) {
	const rt = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-chaos-'));
	const log = path.join(rt, 'serve.log');
	const port = await freePort();
	const out = fs.openSync(log, 'a');
	const p = spawn(BIN, ['serve', '--model', MODEL, '--port', String(port), ...extra], {
		stdio: ['ignore', out, out],
		env: { ...process.env, XDG_RUNTIME_DIR: rt, ...env },
	});
	fs.closeSync(out);
	const s = { p, rt, log, base: `http://127.0.0.1:${port}`, status: path.join(rt, `anedvd-${p.pid}`, 'status') };
	s.exited = new Promise((r) => p.once('exit', r));
	s.text = () => fs.readFileSync(log, 'utf8');
	// name -> {pid, restarts, state}
	s.procs = () => {
		try {
			return Object.fromEntries(fs.readFileSync(s.status, 'utf8').trim().split('\n').map((l) => l.split(/\s+/))
				.map(([n, pid, r, st]) => [n, { pid: Number(pid), restarts: Number(r), state: st }]));
		} catch {
			return {};
		}
	};
	for (let i = 0; i < 1200 && p.exitCode === null; i++) {
		try {
			const h = await (await fetch(`${s.base}/health`)).json();
			if (h.tokenizer === 'up' && h.engine === 'up') return s;
		} catch {
			// not listening yet
		}
		await sleep(50);
	}
	throw new Error(`anedvd serve did not come up:\n${s.text()}`);
}

// stop it (SIGINT) and return its log: no sanitizer may have spoken in any
// process (an ASan+UBSan build runs this too)
async function stop(s) {
	if (!s) return '';
	if (s.p.exitCode === null && s.p.signalCode === null) {
		s.p.kill('SIGINT');
		const t = setTimeout(() => s.p.kill('SIGKILL'), 20000);
		await s.exited;
		clearTimeout(t);
	}
	const text = s.text();
	if (process.env.ANEDVD_KEEP_TMP) console.error(`kept ${s.rt} (ANEDVD_KEEP_TMP)`);
	else fs.rmSync(s.rt, { recursive: true, force: true });
	return text;
}
const sanitizer = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/;

const user = (content) => [{ role: 'user', content }];

// the eight clients: [path, body]; every one streams
const CLIENTS = [
	['/v1/chat/completions', { messages: user('Tell me a story.'), max_tokens: 120, temperature: 0 }],
	['/v1/chat/completions', { messages: user('A story about a cat.'), max_tokens: 90, temperature: 0.9, seed: 1, n: 2, logprobs: true, top_logprobs: 2 }],
	['/v1/completions', { prompt: 'Once upon a time', max_tokens: 150, temperature: 1.0, seed: 7, frequency_penalty: 0.5, presence_penalty: 0.3 }],
	['/v1/completions', { prompt: 'Once upon a time', max_tokens: 150, temperature: 0, stop: ['too high'] }],
	['/v1/messages', { messages: user('Tell me a story.'), max_tokens: 120, temperature: 0 }],
	['/v1/messages', { messages: user('A story about a dog.'), max_tokens: 120, temperature: 0.8, seed: 3, top_k: 20 }],
	['/v1/completions', { prompt: 'The little bird', max_tokens: 130, temperature: 0.7, seed: 11, top_p: 0.9, logprobs: 3 }],
	['/v1/messages', { messages: user('Lily and the ball.'), max_tokens: 110, temperature: 0.6, seed: 5, stop_sequences: ['park'] }],
];

// what a stream gave, in a form to compare: per choice its text, finish and
// logprobs; the usage without the prefix cache's share (which depends on
// what ran before)
function assemble(p, body) {
	const ev = sse(body);
	const choices = {};
	const ch = (i) => (choices[i] ??= { text: '', finish: null, logprobs: [] });
	let usage = null;
	const errors = [];
	for (const e of ev) {
		if (!e.data || e.data === '[DONE]') continue;
		const d = JSON.parse(e.data);
		if (d.error || e.event === 'error') errors.push(d.error || d);
		if (p === '/v1/messages') {
			if (e.event === 'content_block_delta') ch(0).text += d.delta.text;
			if (e.event === 'message_delta') {
				ch(0).finish = d.delta.stop_reason;
				usage = d.usage.output_tokens;
			}
			if (e.event === 'message_start') ch(0).input = d.message.usage.input_tokens + d.message.usage.cache_read_input_tokens;
			continue;
		}
		for (const c of d.choices || []) {
			const x = ch(c.index);
			x.text += p === '/v1/completions' ? c.text ?? '' : c.delta?.content ?? '';
			if (c.finish_reason) x.finish = c.finish_reason;
			const lp = c.logprobs;
			if (lp?.content) x.logprobs.push(...lp.content.map((t) => [t.token, t.logprob, t.top_logprobs.map((a) => [a.token, a.logprob])]));
			if (lp?.tokens) x.logprobs.push(...lp.tokens.map((t, k) => [t, lp.token_logprobs[k], lp.top_logprobs[k]]));
		}
		if (d.usage) usage = [d.usage.prompt_tokens, d.usage.completion_tokens];
	}
	return { choices, usage, errors };
}

async function ask(s, [p, body]) {
	const r = await fetch(s.base + p, {
		method: 'POST',
		headers: { 'content-type': 'application/json' },
		body: JSON.stringify({ model: 'stories260K', stream: true, ...(p === '/v1/messages' ? {} : { stream_options: { include_usage: true } }), ...body }),
	});
	const text = await r.text();
	return { status: r.status, got: assemble(p, text), raw: text };
}

const metric = async (s, name) => Number(((await (await fetch(`${s.base}/metrics`)).text()).match(new RegExp(`^${name} (\\d+)$`, 'm')) || [])[1] ?? NaN);

// every client's reply with nothing disturbing the server
async function uninterrupted(s) {
	const want = [];
	for (const c of CLIENTS) {
		const r = await ask(s, c);
		assert.equal(r.status, 200, r.raw);
		assert.deepEqual(r.got.errors, [], r.raw);
		want.push(r.got);
	}
	return want;
}

// each client asks again and again while going() holds (once at least);
// .failures lists every reply that is not want's, .done counts the replies,
// .all settles when the clients have stopped
function keepAsking(s, want, going) {
	const k = { failures: [], done: 0 };
	k.all = Promise.all(CLIENTS.map(async (c, i) => {
		for (let round = 0; going() || round === 0; round++) {
			const r = await ask(s, c);
			k.done++;
			if (r.status !== 200 || r.got.errors.length) k.failures.push(`client ${i} round ${round}: status ${r.status} ${JSON.stringify(r.got.errors)}`);
			else if (JSON.stringify(r.got) !== JSON.stringify(want[i]))
				k.failures.push(`client ${i} round ${round}: got ${JSON.stringify(r.got)}\nwant ${JSON.stringify(want[i])}`);
		}
	}));
	return k;
}

describe('chaos: workers SIGKILLed under 8 streaming clients', { skip }, () => {
	let s;
	before(async () => {
		s = await serve(['--parallel', '4'], { ANEDVD_DEBUG_DELAY_US: '400' });
	});
	after(async () => {
		await stop(s);
	});

	it(`${KILLS} kills of random workers at random moments: every request completes with its uninterrupted reply`, async () => {
		const want = await uninterrupted(s);
		// they are what the cases are meant to be: two choices that differ,
		// a stop sequence that ended a reply, every reply non-empty
		assert.notEqual(want[1].choices[0].text, want[1].choices[1].text);
		assert.equal(want[3].choices[0].finish, 'stop');
		for (const w of want) for (const c of Object.values(w.choices)) assert.ok(c.text.length > 20, JSON.stringify(w));

		const resumed0 = await metric(s, 'anedvd_generations_resumed_total');
		let killing = true;
		// each client asks again and again until the kills are over
		const clients = keepAsking(s, want, () => killing);
		// the kills: a fixed shuffle of the three workers, each waiting for
		// its target to be up again, then a random pause into the traffic
		const rand = rng(SEED);
		const names = [];
		for (let k = 0; k < KILLS; k++) names.push(['cpu-worker', 'ane-worker', 'tokenizer'][k % 3]);
		for (let k = names.length - 1; k > 0; k--) {
			const j = Math.floor(rand() * (k + 1));
			[names[k], names[j]] = [names[j], names[k]];
		}
		const kills = [];
		for (const name of names) {
			await sleep(150 + Math.floor(rand() * 900));
			let p = s.procs()[name];
			for (let i = 0; i < 400 && !(p && p.state === 'up' && p.pid > 0); i++) {
				await sleep(50);
				p = s.procs()[name];
			}
			assert.ok(p && p.pid > 0, `${name} is not up: ${JSON.stringify(s.procs())}`);
			process.kill(p.pid, 'SIGKILL');
			kills.push([name, p.pid]);
			// the next kill only once it is back
			for (let i = 0; i < 600 && s.procs()[name]?.pid === p.pid; i++) await sleep(50);
		}
		killing = false;
		await clients.all;
		assert.deepEqual(clients.failures, [], clients.failures.join('\n\n'));
		// every kill was seen and survived: the supervisor restarted each process
		const st = s.procs();
		assert.equal(st['cpu-worker'].restarts + st['ane-worker'].restarts + st.tokenizer.restarts, KILLS, JSON.stringify(st));
		assert.equal(st.frontend.restarts, 0);
		// cpu-worker kills cut requests that went on on the restarted worker
		const resumed = (await metric(s, 'anedvd_generations_resumed_total')) - resumed0;
		assert.ok(resumed >= 1, `no job was resumed (${kills.length} kills)`);
		console.log(`# ${kills.length} kills (${names.filter((n) => n === 'cpu-worker').length} cpu-worker), ${clients.done} requests completed, ${resumed} jobs resumed on a restarted cpu-worker`);
		for (const [name, pid] of kills) assert.match(s.text(), new RegExp(`${name} \\(pid ${pid}\\) was killed by signal 9`));
		const log = await stop(s);
		s = null;
		assert.doesNotMatch(log, sanitizer, log);
	});
});

// a burst of connections to a worker's socket, each closed as soon as it is
// made: nng 1.5 stops accepting after one that closes before the server's
// handshake, and the worker then listens anew, closing the connections it
// had (common/ipc.c): to the frontend, a connection cut under its calls
async function cut(sock) {
	for (let i = 0; i < 8; i++) {
		await new Promise((resolve) => {
			const c = net.connect({ path: sock });
			c.once('connect', () => {
				c.destroy();
				resolve();
			});
			c.once('error', resolve);
		});
	}
}

describe('chaos: connections cut under 8 streaming clients', { skip }, () => {
	let s;
	before(async () => {
		s = await serve(['--parallel', '4'], { ANEDVD_DEBUG_DELAY_US: '400' });
	});
	after(async () => {
		await stop(s);
	});

	it('every request completes with its uninterrupted reply, and no worker is restarted', async () => {
		const want = await uninterrupted(s);
		let cutting = true;
		const clients = keepAsking(s, want, () => cutting);
		const rand = rng(SEED + 1);
		const dir = path.dirname(s.status);
		const names = ['cpu-worker', 'cpu-worker', 'tokenizer', 'ane-worker'];
		for (let k = 0; k < 16; k++) {
			await sleep(150 + Math.floor(rand() * 600));
			await cut(path.join(dir, `${names[k % names.length]}.sock`));
		}
		cutting = false;
		await clients.all;
		assert.deepEqual(clients.failures, [], clients.failures.join('\n\n'));
		const anew = s.text().match(/cpu-worker\.sock: a connection failed as it was made.*listening anew/g) || [];
		assert.ok(anew.length >= 1, `the cpu-worker never listened anew:\n${s.text()}`);
		const st = s.procs();
		for (const n of ['cpu-worker', 'ane-worker', 'tokenizer', 'frontend']) assert.equal(st[n].restarts, 0, JSON.stringify(st));
		console.log(`# the cpu-worker listened anew ${anew.length} times under the clients`);
		const log = await stop(s);
		s = null;
		assert.doesNotMatch(log, sanitizer, log);
	});
});

describe('chaos: the frontend SIGKILLed over a tcp:// engine', { skip }, () => {
	let s;
	before(async () => {
		const ep = await freePort();
		s = await serve(['--engine-url', `tcp://127.0.0.1:${ep}`], { ANEDVD_DEBUG_DELAY_US: '400' });
	});
	after(async () => {
		await stop(s);
	});

	it('its running job is cancelled within 1 s of its lease\'s last renewal; the restarted frontend answers', async () => {
		const fe = s.procs().frontend.pid;
		const res = await fetch(`${s.base}/v1/completions`, {
			method: 'POST',
			headers: { 'content-type': 'application/json' },
			body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 100000, temperature: 1, seed: 5, stream: true }),
		});
		const reader = res.body.getReader();
		await reader.read();
		const t0 = Date.now();
		process.kill(fe, 'SIGKILL');
		await reader.read().catch(() => {});
		const gone = /the lease of client frontend-\S+ ran out \(not renewed for (\d+) ms\): cancelled after (\d+) tokens/;
		for (let i = 0; i < 200 && !gone.test(s.text()); i++) await sleep(25);
		const m = s.text().match(gone);
		assert.ok(m, `no cancellation in the log within ${Date.now() - t0} ms:\n${s.text()}`);
		assert.ok(Number(m[1]) <= 1000, `noticed ${m[1]} ms after the last renewal`);
		// the pid check does not apply to a tcp:// engine: the lease did it
		assert.doesNotMatch(s.text(), /the client \(pid \d+\) is gone/);
		let r = null;
		for (let i = 0; i < 200 && !r; i++) {
			const x = await fetch(`${s.base}/v1/completions`, {
				method: 'POST', headers: { 'content-type': 'application/json' },
				body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }),
			}).catch(() => null);
			if (x?.status === 200) r = await x.json();
			else await sleep(50);
		}
		assert.ok(r && r.choices[0].text.startsWith(', there was'), JSON.stringify(r));
		assert.equal(s.procs().frontend.restarts, 1);
		const log = await stop(s);
		s = null;
		assert.doesNotMatch(log, sanitizer, log);
	});
});
