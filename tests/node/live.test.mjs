// The official clients (openai, @anthropic-ai/sdk, pinned by
// package-lock.json) against the whole system as a user starts it:
// `anedvd serve --model stories260K.gguf`, which supervises the tokenizer,
// the ane-worker (emu), the cpu-worker and the frontend. Every endpoint,
// streaming and not; stop sequences; max_tokens; determinism at
// temperature 0 and with a seed; an error as the SDK raises it; a SIGKILLed
// frontend whose running job the cpu-worker cancels; and a clean
// shutdown on SIGINT that leaves no process, runtime dir or shared memory.
//
// Environment (ctest sets it): ANEDVD_BIN, the anedvd binary; FE_MODEL,
// the model. Skipped without ANEDVD_BIN (e.g. under test-fe-sdk, which runs
// every file of this directory).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { freePort } from '../http/harness.mjs';

const BIN = process.env.ANEDVD_BIN;
const MODEL = process.env.FE_MODEL;
const skip = BIN && MODEL ? false : 'ANEDVD_BIN / FE_MODEL not set (run through ctest -R test-live-sdk)';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const user = (content) => [{ role: 'user', content }];
// the model's own greedy continuation (tests/data/stories260K/SOURCES.md)
const STORY = ', there was a little girl named Lily';

const alive = (pid) => {
	try {
		process.kill(pid, 0);
		return true;
	} catch {
		return false;
	}
};

describe('anedvd serve on stories260K, through the official SDKs', { skip }, () => {
	let srv, rt, port, base, oai, ant, log, kids = [];

	before(async () => {
		// a private runtime base: other instances on the machine are not touched
		rt = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-live-'));
		log = path.join(rt, 'serve.log');
		port = await freePort();
		base = `http://127.0.0.1:${port}`;
		const out = fs.openSync(log, 'a');
		// four at once, so concurrent requests share the engine's batches
		srv = spawn(BIN, ['serve', '--model', MODEL, '--port', String(port), '--parallel', '4', '--embeddings'], {
			stdio: ['ignore', out, out],
			env: { ...process.env, XDG_RUNTIME_DIR: rt },
		});
		fs.closeSync(out);
		srv.exited = new Promise((r) => srv.once('exit', (code, sig) => r({ code, sig })));
		let up = false;
		for (let i = 0; i < 600 && srv.exitCode === null; i++) {
			try {
				const h = await (await fetch(`${base}/health`)).json();
				if (h.tokenizer === 'up' && h.engine === 'up') { up = true; break; }
			} catch {
				// not listening yet
			}
			await sleep(50);
		}
		if (!up) throw new Error(`anedvd serve did not come up:\n${fs.readFileSync(log, 'utf8')}`);
		const status = path.join(rt, `anedvd-${srv.pid}`, 'status');
		kids = fs.readFileSync(status, 'utf8').trim().split('\n').map((l) => Number(l.split(/\s+/)[1]));
		oai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		ant = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});

	after(async () => {
		if (srv && srv.exitCode === null && srv.signalCode === null) srv.kill('SIGKILL');
		if (rt && process.env.ANEDVD_KEEP_TMP) console.error(`kept ${rt} (ANEDVD_KEEP_TMP)`);
		else if (rt) fs.rmSync(rt, { recursive: true, force: true });
	});

	it('runs the four supervised children', () => {
		assert.equal(kids.length, 4, fs.readFileSync(path.join(rt, `anedvd-${srv.pid}`, 'status'), 'utf8'));
		for (const k of kids) assert.ok(alive(k), `child ${k} is not running`);
	});

	it('GET /health, /metrics, / and models.list', async () => {
		const h = await (await fetch(`${base}/health`)).json();
		assert.equal(h.status, 'ok');
		const m = await fetch(`${base}/metrics`);
		assert.equal(m.status, 200);
		assert.match(await m.text(), /^# (HELP|TYPE) /m);
		const page = await fetch(`${base}/`);
		assert.equal(page.status, 200);
		assert.match(page.headers.get('content-type'), /text\/html/);
		assert.match(await page.text(), /<title>anedvd<\/title>/);
		const ids = [];
		for await (const x of oai.models.list()) ids.push(x.id);
		assert.equal(ids.length, 1);
		assert.match(ids[0], /stories260K/);
		const one = await oai.models.retrieve(ids[0]).catch((e) => e);
		// retrieve is optional in the API; when it is there it names the model
		if (!(one instanceof Error)) assert.equal(one.id, ids[0]);
	});

	it('completions: the greedy story, max_tokens, stream with usage', async () => {
		const req = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
		const r = await oai.completions.create(req);
		assert.equal(r.object, 'text_completion');
		assert.ok(r.choices[0].text.startsWith(STORY), `greedy story: ${JSON.stringify(r.choices[0].text)}`);
		assert.equal(r.choices[0].finish_reason, 'length');
		assert.equal(r.usage.completion_tokens, 24);
		assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 24);
		const stream = await oai.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
		let text = '', finish = null, usage = null;
		for await (const c of stream) {
			text += c.choices[0]?.text ?? '';
			finish = c.choices[0]?.finish_reason ?? finish;
			if (c.usage) usage = c.usage;
		}
		assert.equal(text, r.choices[0].text);
		assert.equal(finish, 'length');
		assert.equal(usage?.completion_tokens, 24);
	});

	// llama.cpp's own /completion on the real pipeline: the greedy story
	// (llama.cpp's own continuation), its alternatives best first, the
	// chosen token the best of them at temperature 0
	it('llama.cpp\'s /completion: the greedy story, n_probs, stream', async () => {
		const body = { prompt: 'Once upon a time', n_predict: 12, temperature: 0, n_probs: 3 };
		const post = async (b) => {
			const r = await fetch(`${base}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
			assert.equal(r.status, 200);
			return r;
		};
		const b = await (await post(body)).json();
		assert.ok(b.content.startsWith(STORY.slice(0, 20)), JSON.stringify(b.content));
		assert.equal(b.tokens_predicted, 12);
		assert.equal(b.stop_type, 'limit');
		assert.equal(b.completion_probabilities.length, 12);
		for (const t of b.completion_probabilities) {
			assert.equal(t.top_logprobs.length, 3);
			assert.equal(t.top_logprobs[0].id, t.id, 'greedy: the chosen token is the best');
			assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
			for (let k = 1; k < 3; k++) assert.ok(t.top_logprobs[k].logprob <= t.top_logprobs[k - 1].logprob);
		}
		const v1 = await oai.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
		assert.equal(b.content, v1.choices[0].text, '/completion and /v1/completions make the same text');
		const streamed = await (await post({ ...body, stream: true, n_probs: 0 })).text();
		const ev = streamed.split('\n\n').filter((x) => x.startsWith('data: ')).map((x) => JSON.parse(x.slice(6)));
		assert.equal(ev.map((e) => e.content).join(''), b.content);
		assert.equal(ev.at(-1).stop, true);
	});

	it('completions: a prompt of token ids is the same prompt as its text', async () => {
		const req = { model: 'stories260K', max_tokens: 12, temperature: 0 };
		const text = await oai.completions.create({ ...req, prompt: 'Once upon a time' });
		const tok = await (
			await fetch(`${base}/tokenize`, {
				method: 'POST',
				headers: { 'content-type': 'application/json' },
				body: JSON.stringify({ content: 'Once upon a time' }),
			})
		).json();
		assert.ok(tok.tokens.length >= 3, JSON.stringify(tok));
		// the text prompt begins with BOS (1): the ids say so themselves
		const ids = [1, ...tok.tokens];
		for (const prompt of [ids, [ids]]) {
			const r = await oai.completions.create({ ...req, prompt });
			assert.equal(r.choices[0].text, text.choices[0].text);
			assert.equal(r.usage.prompt_tokens, text.usage.prompt_tokens);
		}
		// the refusals name the fault, as the SDK raises them
		for (const [prompt, want] of [
			[[1, 512], /token id 512 is outside the vocabulary of 512/],
			[[], /an empty list of token ids/],
			[[1, 2.5], /2.5 is not a token id/],
			[['a', 'b'], /one prompt a request \(2 given\)/],
			[[[1], [2]], /one prompt a request \(2 given\)/],
			[{ a: 1 }, /must be a string or an array of token ids/],
		]) {
			await assert.rejects(oai.completions.create({ ...req, prompt }), (e) => {
				assert.equal(e.status, 400, `${JSON.stringify(prompt)}: ${e.message}`);
				assert.match(e.message, want);
				return true;
			});
		}
	});

	it('completions: echo puts the prompt before the completion, streaming and not', async () => {
		const req = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 10, temperature: 0 };
		const plain = (await oai.completions.create(req)).choices[0].text;
		const r = await oai.completions.create({ ...req, echo: true });
		assert.equal(r.choices[0].text, 'Once upon a time' + plain);
		assert.equal(r.usage.completion_tokens, 10);
		// the ids' text (BOS, a special token, is not text)
		const ids = await oai.completions.create({ ...req, prompt: [1, 403, 407], echo: true, max_tokens: 3 });
		assert.match(ids.choices[0].text, /^Once upon./);
		const stream = await oai.completions.create({ ...req, echo: true, stream: true });
		const parts = [];
		for await (const c of stream) if (c.choices[0]?.text) parts.push(c.choices[0].text);
		assert.equal(parts[0], 'Once upon a time');
		assert.equal(parts.join(''), r.choices[0].text);
		await assert.rejects(oai.completions.create({ ...req, echo: true, logprobs: 1 }), (e) => {
			assert.equal(e.status, 400);
			assert.match(e.message, /'echo' with 'logprobs' is not supported/);
			return true;
		});
	});

	it('completions: stop as a string and as an array, streaming and not', async () => {
		const req = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 24, temperature: 0 };
		let r = await oai.completions.create({ ...req, stop: ' Lily' });
		assert.equal(r.choices[0].text, ', there was a little girl named');
		assert.equal(r.choices[0].finish_reason, 'stop');
		r = await oai.completions.create({ ...req, stop: ['never-there', ' girl'] });
		assert.equal(r.choices[0].text, ', there was a little');
		assert.equal(r.choices[0].finish_reason, 'stop');
		// a stop sequence that spans several tokens, cut in the stream too
		const stream = await oai.completions.create({ ...req, stop: ['a little g'], stream: true });
		let text = '', finish = null;
		for await (const c of stream) {
			text += c.choices[0]?.text ?? '';
			finish = c.choices[0]?.finish_reason ?? finish;
		}
		assert.equal(text, ', there was ');
		assert.equal(finish, 'stop');
	});

	it('chat: whole and streamed (include_usage) replies agree; stop; max_tokens', async () => {
		const req = { model: 'stories260K', messages: user('Tell me a story about a dog.'), max_tokens: 40, temperature: 0 };
		const whole = await oai.chat.completions.create(req);
		assert.equal(whole.object, 'chat.completion');
		const reply = whole.choices[0].message.content;
		assert.equal(whole.choices[0].message.role, 'assistant');
		assert.ok(reply.length > 0);
		assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
		const stream = await oai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
		let text = '', finish = null, usage = null, role = null, chunks = 0;
		for await (const c of stream) {
			assert.equal(c.object, 'chat.completion.chunk');
			role ??= c.choices[0]?.delta?.role;
			text += c.choices[0]?.delta?.content ?? '';
			finish = c.choices[0]?.finish_reason ?? finish;
			if (c.usage && c.choices.length === 0) usage = c.usage;
			chunks++;
		}
		assert.equal(role, 'assistant');
		assert.equal(text, reply);
		assert.ok(chunks > 3, 'the reply came in pieces');
		assert.equal(finish, whole.choices[0].finish_reason);
		// the same usage, but for the prefix cache: the repeat reuses the first one's prompt
		const { prompt_tokens_details: sd, ...su } = usage, { prompt_tokens_details: wd, ...wu } = whole.usage;
		assert.deepEqual(su, wu);
		assert.ok(sd.cached_tokens >= wd.cached_tokens && sd.cached_tokens < usage.prompt_tokens, JSON.stringify([sd, wd]));
		// the stream helper rebuilds the same message
		const final = await oai.chat.completions.stream(req).finalChatCompletion();
		assert.equal(final.choices[0].message.content, reply);

		// stop: a word from inside the greedy reply, as a string and in an array
		const words = reply.trim().split(/\s+/);
		assert.ok(words.length >= 4, reply);
		const stop = ' ' + words[3];
		const head = reply.slice(0, reply.indexOf(stop));
		let cut = await oai.chat.completions.create({ ...req, stop });
		assert.equal(cut.choices[0].message.content, head);
		assert.equal(cut.choices[0].finish_reason, 'stop');
		cut = await oai.chat.completions.create({ ...req, stop: ['never-there', stop] });
		assert.equal(cut.choices[0].message.content, head);
		assert.equal(cut.choices[0].finish_reason, 'stop');

		// max_tokens: exactly that many tokens, finish_reason length, streaming and not
		const short = await oai.chat.completions.create({ ...req, max_tokens: 5 });
		assert.equal(short.choices[0].finish_reason, 'length');
		assert.equal(short.usage.completion_tokens, 5);
		assert.ok(reply.startsWith(short.choices[0].message.content));
		const s5 = await oai.chat.completions.create({ ...req, max_tokens: 5, stream: true, stream_options: { include_usage: true } });
		let t5 = '', f5 = null, u5 = null;
		for await (const c of s5) {
			t5 += c.choices[0]?.delta?.content ?? '';
			f5 = c.choices[0]?.finish_reason ?? f5;
			if (c.usage) u5 = c.usage;
		}
		assert.equal(t5, short.choices[0].message.content);
		assert.equal(f5, 'length');
		assert.equal(u5.completion_tokens, 5);
	});

	it('anthropic messages: whole and streamed; stop_sequences; max_tokens', async () => {
		const req = { model: 'stories260K', max_tokens: 40, temperature: 0, messages: user('Tell me a story.') };
		const r = await ant.messages.create(req);
		assert.equal(r.type, 'message');
		assert.equal(r.role, 'assistant');
		assert.equal(r.content[0].type, 'text');
		const reply = r.content[0].text;
		assert.ok(reply.length > 0);
		assert.ok(['end_turn', 'max_tokens'].includes(r.stop_reason));
		assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
		// raw events
		const events = await ant.messages.create({ ...req, stream: true });
		let text = '', stopReason = null, types = [];
		for await (const e of events) {
			types.push(e.type);
			if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
			if (e.type === 'message_delta') stopReason = e.delta.stop_reason;
		}
		assert.equal(types[0], 'message_start');
		assert.equal(types.at(-1), 'message_stop');
		assert.equal(text, reply);
		assert.equal(stopReason, r.stop_reason);
		// the stream helper
		const final = await ant.messages.stream(req).finalMessage();
		assert.equal(final.content[0].text, reply);
		assert.equal(final.usage.output_tokens, r.usage.output_tokens);

		// stop_sequences: stop_reason stop_sequence, and which one matched
		const words = reply.trim().split(/\s+/);
		assert.ok(words.length >= 4, reply);
		const stop = words[3];
		const cut = await ant.messages.create({ ...req, stop_sequences: ['never-there', stop] });
		assert.equal(cut.stop_reason, 'stop_sequence');
		assert.equal(cut.stop_sequence, stop);
		assert.equal(cut.content[0].text, reply.slice(0, reply.indexOf(stop)));
		const cutFinal = await ant.messages.stream({ ...req, stop_sequences: [stop] }).finalMessage();
		assert.equal(cutFinal.stop_reason, 'stop_sequence');
		assert.equal(cutFinal.stop_sequence, stop);
		assert.equal(cutFinal.content[0].text, cut.content[0].text);

		// max_tokens: stop_reason max_tokens with exactly that many output tokens
		const short = await ant.messages.create({ ...req, max_tokens: 6 });
		assert.equal(short.stop_reason, 'max_tokens');
		assert.equal(short.usage.output_tokens, 6);
		const shortFinal = await ant.messages.stream({ ...req, max_tokens: 6 }).finalMessage();
		assert.equal(shortFinal.stop_reason, 'max_tokens');
		assert.equal(shortFinal.usage.output_tokens, 6);
		assert.equal(shortFinal.content[0].text, short.content[0].text);
	});

	it('determinism: temperature 0 repeats; a seed repeats a sampled reply, other seeds differ', async () => {
		const req = { model: 'stories260K', prompt: 'Once upon a time', max_tokens: 48 };
		const text = async (extra) => (await oai.completions.create({ ...req, ...extra })).choices[0].text;
		assert.equal(await text({ temperature: 0 }), await text({ temperature: 0 }));
		const a = await text({ temperature: 0.8, seed: 42 });
		const b = await text({ temperature: 0.8, seed: 42 });
		assert.equal(a, b);
		// with another seed the 48 sampled tokens almost surely differ somewhere
		const others = [await text({ temperature: 0.8, seed: 7 }), await text({ temperature: 0.8, seed: 1234567 })];
		assert.ok(others.some((o) => o !== a), `seeds 7 and 1234567 both gave seed 42's text: ${a}`);
		// without a seed every request draws a fresh one, as the OpenAI API does
		const unseeded = [await text({ temperature: 1.0 }), await text({ temperature: 1.0 }), await text({ temperature: 1.0 })];
		assert.ok(new Set(unseeded).size > 1, `three unseeded sampled replies were identical: ${unseeded[0]}`);
		// the same holds for chat, streamed against whole
		const chat = { model: 'stories260K', messages: user('A story, please.'), max_tokens: 32, temperature: 0.8, seed: 99 };
		const w = (await oai.chat.completions.create(chat)).choices[0].message.content;
		const f = (await oai.chat.completions.stream(chat).finalChatCompletion()).choices[0].message.content;
		assert.equal(w, f);
	});

	it('concurrent requests get the replies each gets alone', async () => {
		const req = (i) => ({ model: 'stories260K', prompt: ['Once upon a time', 'Tom had a dog', 'The sun was', 'Lily saw a'][i],
			max_tokens: 40, temperature: 0 });
		const alone = [];
		for (let i = 0; i < 4; i++) alone.push((await oai.completions.create(req(i))).choices[0].text);
		const together = await Promise.all([0, 1, 2, 3].map(async (i) => {
			let t = '';
			for await (const c of await oai.completions.create({ ...req(i), stream: true })) t += c.choices[0]?.text ?? '';
			return t;
		}));
		assert.deepEqual(together, alone);
		assert.equal(new Set(alone).size, 4);
	});

	it('serve --embeddings: /v1/embeddings, n choices and logprobs', async () => {
		const e = await oai.embeddings.create({ model: 'stories260K', input: ['Once upon a time', 'Lily'] });
		assert.equal(e.data.length, 2);
		for (const d of e.data) assert.ok(Math.abs(Math.hypot(...d.embedding) - 1) < 1e-5);
		const r = await oai.chat.completions.create({ model: 'stories260K', messages: user('Hi'), max_tokens: 8, n: 2, seed: 9, logprobs: true, top_logprobs: 2 });
		assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
		for (const c of r.choices) assert.equal(c.logprobs.content.map((t) => t.token).join(''), c.message.content);
	});

	it('errors come out as the SDK\'s error classes', async () => {
		await assert.rejects(
			oai.chat.completions.create({ model: 'stories260K', messages: user('hi'), temperature: 'hot' }),
			(e) => e instanceof OpenAI.BadRequestError && e.status === 400,
		);
		await assert.rejects(
			oai.completions.create({ model: 'stories260K', prompt: 'hi', max_tokens: -3 }),
			(e) => e instanceof OpenAI.BadRequestError && e.status === 400,
		);
		await assert.rejects(
			ant.messages.create({ model: 'stories260K', max_tokens: 8, messages: 'not a list' }),
			(e) => e instanceof Anthropic.BadRequestError && e.status === 400,
		);
		// and the server still answers afterwards
		const r = await oai.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 4, temperature: 0 });
		assert.equal(r.usage.completion_tokens, 4);
	});

	it('a SIGKILLed frontend: the cpu-worker cancels its running job; the restarted frontend answers', async () => {
		const status = () => Object.fromEntries(fs.readFileSync(path.join(rt, `anedvd-${srv.pid}`, 'status'), 'utf8')
			.trim().split('\n').map((l) => l.split(/\s+/)).map(([n, p, r]) => [n, { pid: Number(p), restarts: Number(r) }]));
		const fe = status().frontend.pid;
		// a long sampled story (the context is what ends it), killed at its first bytes
		const res = await fetch(`${base}/v1/completions`, {
			method: 'POST', headers: { 'content-type': 'application/json' },
			body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 100000, temperature: 1, seed: 5, stream: true }),
		});
		const reader = res.body.getReader();
		await reader.read();
		process.kill(fe, 'SIGKILL');
		await reader.read().catch(() => {});
		const gone = new RegExp(`the client \\(pid ${fe}\\) is gone: cancelled`);
		for (let i = 0; i < 100 && !gone.test(fs.readFileSync(log, 'utf8')); i++) await sleep(50);
		assert.match(fs.readFileSync(log, 'utf8'), gone);
		// the supervisor restarts the frontend; it answers
		let r = null;
		for (let i = 0; i < 200 && !r; i++) {
			r = await oai.completions.create({ model: 'stories260K', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 }).catch(() => null);
			if (!r) await sleep(50);
		}
		assert.ok(r, 'the restarted frontend answers');
		assert.ok(r.choices[0].text.startsWith(STORY.slice(0, 10)), r.choices[0].text);
		const st = status();
		assert.equal(st.frontend.restarts, 1);
		// /health shows the supervisor's view: the frontend's restart and how it ended
		const h = await (await fetch(`${base}/health`)).json();
		assert.equal(h.status, 'ok');
		assert.deepEqual(h.processes.frontend, { pid: st.frontend.pid, state: 'up', restarts: 1, last_exit: 'signal:9' });
		assert.match(await (await fetch(`${base}/metrics`)).text(), /^anedvd_process_restarts_total\{process="frontend"\} 1$/m);
		kids = Object.values(st).map((c) => c.pid);
	});

	it('SIGINT: exit 0, no child, no runtime dir, no shared memory left', async () => {
		srv.kill('SIGINT');
		let timer;
		const { code, sig } = await Promise.race([
			srv.exited,
			new Promise((r) => { timer = setTimeout(() => r({ code: 'timeout', sig: null }), 20000); }),
		]);
		clearTimeout(timer);
		assert.equal(sig, null, fs.readFileSync(log, 'utf8'));
		assert.equal(code, 0, fs.readFileSync(log, 'utf8'));
		for (let i = 0; i < 100 && kids.some(alive); i++) await sleep(50);
		assert.deepEqual(kids.filter(alive), [], 'children still running');
		assert.ok(!fs.existsSync(path.join(rt, `anedvd-${srv.pid}`)), 'runtime dir left');
		const shm = fs.existsSync('/dev/shm') ? fs.readdirSync('/dev/shm').filter((n) => n.startsWith(`anedvd-${srv.pid}-`)) : [];
		assert.deepEqual(shm, [], 'shared memory left');
		await assert.rejects(fetch(`${base}/health`));
	});
});
