// Raw HTTP against a live anedvd-frontend + anedvd-tokenizer (stories260K)
// + fake engine: every error path (each followed by a /health check),
// response and stream shapes of the three APIs, stop sequences with
// holdback, UTF-8 across events, client disconnects reaching the engine as
// Cancel, the bounded queue, an engine that is down, keep-alive and idle
// connections. Uses only node's own modules.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';

import { post, request, sleep, sse, startStack, streamChunks, waitFor } from './harness.mjs';

const CHAT = '/v1/chat/completions';
const user = (content) => ({ messages: [{ role: 'user', content }] });

async function healthy(s) {
	const r = await request(s, 'GET', '/health');
	assert.equal(r.status, 200, 'the server still answers /health');
	assert.equal(JSON.parse(r.body).status, 'ok');
}

function openaiError(r, status, param) {
	assert.equal(r.status, status, r.body);
	const b = JSON.parse(r.body);
	assert.equal(typeof b.error.message, 'string');
	assert.ok(b.error.type);
	if (param !== undefined) assert.equal(b.error.param, param, b.error.message);
	// no Origin sent: no CORS answer (guard.test.mjs tests CORS)
	assert.equal(r.headers['access-control-allow-origin'], undefined);
	return b;
}

function anthropicError(r, status, type) {
	assert.equal(r.status, status, r.body);
	const b = JSON.parse(r.body);
	assert.equal(b.type, 'error');
	assert.equal(b.error.type, type);
	assert.equal(typeof b.error.message, 'string');
	return b;
}

describe('frontend over raw HTTP', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--parallel', '4', '--max-body', '4096'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('GET /health, /v1/models, /metrics, / and OPTIONS', async () => {
		let r = await request(s, 'GET', '/health');
		assert.equal(r.status, 200);
		assert.deepEqual(Object.keys(JSON.parse(r.body)).slice(0, 3), ['status', 'tokenizer', 'engine']);
		assert.equal(r.headers['access-control-allow-origin'], undefined);
		r = await request(s, 'GET', '/v1/models');
		const m = JSON.parse(r.body);
		assert.equal(m.object, 'list');
		assert.equal(m.data[0].id, 'stories260K');
		assert.equal(m.data[0].object, 'model');
		r = await request(s, 'GET', '/v1/models/stories260K');
		assert.equal(JSON.parse(r.body).id, 'stories260K');
		openaiError(await request(s, 'GET', '/v1/models/nope'), 404, 'model');
		r = await request(s, 'GET', '/');
		assert.equal(r.status, 200);
		assert.match(r.headers['content-type'], /text\/html/);
		assert.match(r.body, /<html/i);
		r = await request(s, 'OPTIONS', CHAT, undefined, { origin: 'http://localhost:5173', 'access-control-request-method': 'POST' });
		assert.equal(r.status, 204);
		assert.equal(r.headers['access-control-allow-origin'], 'http://localhost:5173');
		assert.match(r.headers['access-control-allow-methods'], /POST/);
		r = await request(s, 'GET', '/metrics');
		assert.equal(r.status, 200);
		assert.match(r.headers['content-type'], /text\/plain/);
		assert.match(r.body, /# TYPE anedvd_http_requests_total counter/);
		assert.match(r.body, /anedvd_stage_seconds_bucket\{stage="queue",le="\+Inf"\}/);
		assert.match(r.body, /anedvd_queue_length \d+/);
		assert.match(r.body, /anedvd_worker_restarts_total\{process="engine"\} \d+/);
	});

	it('404 and 405 in each dialect', async () => {
		openaiError(await request(s, 'GET', '/nope'), 404);
		openaiError(await post(s, '/v1/nope', {}), 404);
		let r = await request(s, 'GET', CHAT);
		openaiError(r, 405);
		assert.match(r.headers.allow, /POST/);
		openaiError(await post(s, '/health', {}), 405);
		anthropicError(await request(s, 'GET', '/v1/messages'), 405, 'invalid_request_error');
		// embeddings are off unless --embeddings
		r = await post(s, '/v1/embeddings', { input: 'x' });
		openaiError(r, 501);
		assert.match(JSON.parse(r.body).error.message, /--embeddings/);
		await healthy(s);
	});

	it('400 for malformed JSON, non-objects and empty bodies', async () => {
		openaiError(await post(s, CHAT, '{"messages": ['), 400);
		openaiError(await post(s, CHAT, '[1,2]'), 400);
		openaiError(await post(s, CHAT, '"x"'), 400);
		openaiError(await post(s, CHAT, ''), 400);
		openaiError(await post(s, '/v1/completions', 'nul'), 400);
		anthropicError(await post(s, '/v1/messages', '{'), 400, 'invalid_request_error');
		await healthy(s);
	});

	it('400 names the missing, wrongly typed or out-of-range field', async () => {
		const cases = [
			[{}, 'messages'],
			[{ messages: [] }, 'messages'],
			[{ messages: 'hi' }, 'messages'],
			[{ messages: [{ role: 'user' , content: 5 }] }, 'messages[0].content'],
			[{ messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
			[{ messages: [{ content: 'x' }] }, 'messages[0].role'],
			[{ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] }, 'messages[0].content'],
			[{ ...user('x'), temperature: 'hot' }, 'temperature'],
			[{ ...user('x'), temperature: 9 }, 'temperature'],
			[{ ...user('x'), top_p: 1.5 }, 'top_p'],
			[{ ...user('x'), top_k: -1 }, 'top_k'],
			[{ ...user('x'), top_k: 2.5 }, 'top_k'],
			[{ ...user('x'), min_p: 2 }, 'min_p'],
			[{ ...user('x'), max_tokens: 0 }, 'max_tokens'],
			[{ ...user('x'), max_tokens: '10' }, 'max_tokens'],
			[{ ...user('x'), max_completion_tokens: -3 }, 'max_completion_tokens'],
			[{ ...user('x'), presence_penalty: 3 }, 'presence_penalty'],
			[{ ...user('x'), frequency_penalty: -3 }, 'frequency_penalty'],
			[{ ...user('x'), repetition_penalty: 0 }, 'repetition_penalty'],
			[{ ...user('x'), seed: 'x' }, 'seed'],
			[{ ...user('x'), stop: 5 }, 'stop'],
			[{ ...user('x'), stop: ['a', true] }, 'stop'],
			[{ ...user('x'), stop: ['a', 7.5] }, 'stop'],
			[{ ...user('x'), stop: [-1] }, 'stop'],
			[{ ...user('x'), stop: [''] }, 'stop'],
			[{ ...user('x'), stream: 'yes' }, 'stream'],
			[{ ...user('x'), stream_options: 1 }, 'stream_options'],
			[{ ...user('x'), n: 9 }, 'n'],
			[{ ...user('x'), n: 0 }, 'n'],
			[{ ...user('x'), model: 3 }, 'model'],
			[{ ...user('x'), speculative: 'no' }, 'speculative'],
			[{ ...user('x'), speculative: 0 }, 'speculative'],
		];
		for (const [body, param] of cases) {
			const r = await post(s, CHAT, body);
			const b = openaiError(r, 400, param);
			assert.ok(b.error.message.includes(param.replace(/\[.*$/, '')), b.error.message);
		}
		openaiError(await post(s, '/v1/completions', {}), 400, 'prompt');
		// a prompt of token ids is one prompt; a batch of several is not served
		for (const prompt of [[], [[1], [2]], ['a', 'b'], [1, -2], 7])
			openaiError(await post(s, '/v1/completions', { prompt }), 400, 'prompt');
		// no insertion: a suffix is refused, an empty or null one is no suffix
		openaiError(await post(s, '/v1/completions', { prompt: 'ECHO:x', suffix: 'end' }), 400, 'suffix');
		for (const suffix of ['', null]) {
			const r = await post(s, '/v1/completions', { prompt: 'ECHO:x', suffix, max_tokens: 3 });
			assert.equal(r.status, 200, JSON.stringify(suffix));
		}
		const anth = [
			[{ messages: [{ role: 'user', content: 'x' }] }, /max_tokens/],
			[{ max_tokens: 5 }, /messages/],
			[{ max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }, /role/],
			[{ max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }] }, /image/],
			[{ max_tokens: 5, messages: [{ role: 'user', content: 'x' }], system: 4 }, /system/],
			[{ max_tokens: 5, messages: [{ role: 'user', content: 'x' }], stop_sequences: 'x' }, /stop_sequences/],
			[{ max_tokens: 5, messages: [{ role: 'user', content: 'x' }], temperature: -1 }, /temperature/],
			[{ max_tokens: 5, messages: [{ role: 'user', content: 'x' }], speculative: 'off' }, /speculative/],
		];
		for (const [body, re] of anth) {
			const b = anthropicError(await post(s, '/v1/messages', body), 400, 'invalid_request_error');
			assert.match(b.error.message, re);
		}
		await healthy(s);
	});

	it('400 for bad generation options (logprobs, n, best_of, logit_bias, token-id stops), streamed or not', async () => {
		// stories260K has 512 tokens
		const chat = [
			[{ logprobs: 'yes' }, 'logprobs', /logprobs/],
			[{ logprobs: 1 }, 'logprobs', /true or false/],
			[{ top_logprobs: 3 }, 'top_logprobs', /needs 'logprobs'/],
			[{ logprobs: false, top_logprobs: 3 }, 'top_logprobs', /needs 'logprobs'/],
			[{ logprobs: true, top_logprobs: 21 }, 'top_logprobs', /between 0 and 20/],
			[{ logprobs: true, top_logprobs: -1 }, 'top_logprobs', /between 0 and 20/],
			[{ logprobs: true, top_logprobs: 1.5 }, 'top_logprobs', /integer/],
			[{ n: 9 }, 'n', /between 1 and 8/],
			[{ n: 0 }, 'n', /between 1 and 8/],
			[{ n: 2.5 }, 'n', /integer/],
			[{ best_of: 2 }, 'best_of', /best_of/],
			[{ best_of: 'x' }, 'best_of', /best_of/],
			[{ logit_bias: [1, 2] }, 'logit_bias', /object/],
			[{ logit_bias: 5 }, 'logit_bias', /object/],
			[{ logit_bias: { abc: 1 } }, 'logit_bias', /not a token id/],
			[{ logit_bias: { '': 1 } }, 'logit_bias', /not a token id/],
			[{ logit_bias: { '-1': 1 } }, 'logit_bias', /not a token id/],
			[{ logit_bias: { 1.5: 1 } }, 'logit_bias', /not a token id/],
			[{ logit_bias: { 512: 1 } }, 'logit_bias', /outside the vocabulary of 512/],
			[{ logit_bias: { 5: 101 } }, 'logit_bias', /between -100 and 100/],
			[{ logit_bias: { 5: -100.5 } }, 'logit_bias', /between -100 and 100/],
			[{ logit_bias: { 5: 'x' } }, 'logit_bias', /between -100 and 100/],
			[{ logit_bias: { 5: null } }, 'logit_bias', /between -100 and 100/],
			[{ stop: [512] }, 'stop', /outside the vocabulary of 512/],
			[{ stop: [3, -2] }, 'stop', /not a token id/],
			[{ stop: ['a', true] }, 'stop', /'stop\[1\]' must be a string or a token id/],
			[{ stop: 5 }, 'stop', /a string or an array of strings and token ids/],
			[{ stop: Array.from({ length: 17 }, (_, i) => i) }, 'stop', /at most 16 token ids/],
		];
		for (const [extra, param, re] of chat)
			for (const stream of [false, true]) {
				const r = await post(s, CHAT, { ...user('ECHO:x'), ...extra, stream });
				const b = openaiError(r, 400, param);
				assert.match(b.error.message, re, JSON.stringify(extra));
			}
		const legacy = [
			[{ logprobs: 6 }, 'logprobs', /between 0 and 5/],
			[{ logprobs: -1 }, 'logprobs', /between 0 and 5/],
			[{ logprobs: true }, 'logprobs', /integer/],
			[{ n: 9 }, 'n', /between 1 and 8/],
			[{ best_of: 3 }, 'best_of', /best_of/],
			[{ logit_bias: { 700: 1 } }, 'logit_bias', /outside the vocabulary/],
			[{ stop: ['ok', 600] }, 'stop', /outside the vocabulary/],
		];
		for (const [extra, param, re] of legacy) {
			const r = await post(s, '/v1/completions', { prompt: 'ECHO:x', ...extra });
			assert.match(openaiError(r, 400, param).error.message, re, JSON.stringify(extra));
		}
		await healthy(s);
		// the valid edges pass, and the server still answers
		for (const extra of [{ n: 8 }, { best_of: 1 }, { logprobs: true, top_logprobs: 20 }, { logprobs: false }, { logit_bias: { 511: -100, 0: 100 } }, { stop: ['a', 511] }]) {
			const r = await post(s, CHAT, { ...user('ECHO:fine'), ...extra });
			assert.equal(r.status, 200, `${JSON.stringify(extra)}: ${r.body}`);
			const b = JSON.parse(r.body);
			assert.equal(b.choices.length, extra.n ?? 1);
			assert.deepEqual(b.choices.map((c) => c.index), [...Array(extra.n ?? 1).keys()]);
		}
		const ok = await post(s, '/v1/completions', { prompt: 'ECHO:fine', logprobs: 0 });
		assert.equal(ok.status, 200, ok.body);
		await healthy(s);
	});

	it('413 for a body over --max-body, in the dialect, and far over it', async () => {
		const big = JSON.stringify(user('x'.repeat(5000)));
		openaiError(await post(s, CHAT, big), 413);
		anthropicError(await post(s, '/v1/messages', big), 413, 'request_too_large');
		// far beyond the limit h2o refuses before reading; still a 413
		const huge = 'x'.repeat(200000);
		const r = await post(s, CHAT, huge).catch((e) => ({ status: 'reset', e }));
		assert.ok(r.status === 413 || r.status === 'reset', `status ${r.status}`);
		await healthy(s);
	});

	it('malformed HTTP gets 400 and the server stays up', async () => {
		const reply = await new Promise((resolve) => {
			const c = net.connect(s.port, '127.0.0.1', () => c.write('BLAH\x01 / HTTP/9\r\n\r\n'));
			let out = '';
			c.on('data', (d) => (out += d));
			c.on('close', () => resolve(out));
			c.on('error', () => resolve(out));
			setTimeout(() => c.destroy(), 1000);
		});
		assert.match(reply, /^HTTP\/1\.1 400/);
		await healthy(s);
	});

	it('mangled bodies never crash the server and never get a 5xx other than 503', async () => {
		// a fixed-seed generator: the same 400 mutations every run
		let x = 0x2545f491;
		const rnd = (n) => {
			x ^= x << 13;
			x ^= x >>> 17;
			x ^= x << 5;
			return (x >>> 0) % n;
		};
		const seeds = [
			JSON.stringify({ ...user('ECHO:hi'), max_tokens: 3, stop: ['x'], temperature: 0.5, stream: false }),
			JSON.stringify({ max_tokens: 3, system: [{ type: 'text', text: 's' }], messages: [{ role: 'user', content: [{ type: 'text', text: 'ECHO:hi' }] }] }),
			JSON.stringify({ prompt: 'ECHO:hi', max_tokens: 3, stream_options: { include_usage: true } }),
		];
		const paths = [CHAT, '/v1/messages', '/v1/completions'];
		const junk = ['{', '}', '[', ']', '"', ':', ',', 'null', '-1', '1e999', '\\u0000', 'true', '\xff', '0'];
		for (let i = 0; i < 400; i++) {
			const k = rnd(3);
			let b = seeds[k];
			for (let m = 1 + rnd(3); m > 0; m--) {
				const at = rnd(b.length);
				const op = rnd(3);
				if (op === 0) b = b.slice(0, at) + b.slice(at + 1 + rnd(4));
				else if (op === 1) b = b.slice(0, at) + junk[rnd(junk.length)] + b.slice(at);
				else b = b.slice(0, at) + String.fromCharCode(rnd(256)) + b.slice(at + 1);
			}
			const r = await post(s, paths[k], b);
			assert.ok([200, 400, 413].includes(r.status), `${r.status} for ${JSON.stringify(b)}: ${r.body}`);
		}
		await healthy(s);
	});

	it('chat completion: shape, usage, timings', async () => {
		const r = await post(s, CHAT, { model: 'm1', ...user('ECHO:Hello there, friend.') });
		assert.equal(r.status, 200);
		assert.match(r.headers['content-type'], /application\/json/);
		const b = JSON.parse(r.body);
		assert.match(b.id, /^chatcmpl-/);
		assert.equal(b.object, 'chat.completion');
		assert.equal(b.model, 'stories260K', 'the reply names the served model, not the id asked for');
		assert.equal(b.choices[0].message.role, 'assistant');
		assert.equal(b.choices[0].message.content.trim(), 'Hello there, friend.');
		assert.equal(b.choices[0].finish_reason, 'stop');
		assert.ok(b.usage.prompt_tokens > 0);
		assert.ok(b.usage.completion_tokens > 0);
		assert.equal(b.usage.total_tokens, b.usage.prompt_tokens + b.usage.completion_tokens);
		assert.equal(b.usage.prompt_tokens_dropped, 0);
		for (const k of ['prompt_tokens', 'prefill_ms', 'decode_tokens_per_s', 'queue_ms', 'tokenize_ms', 'ttft_ms', 'total_ms'])
			assert.equal(typeof b.timings[k], 'number', k);
		assert.equal(typeof b.timings.engine.kernel_ms, 'number');
		// without a model, too, the reply names --name
		const r2 = JSON.parse((await post(s, CHAT, user('ECHO:x'))).body);
		assert.equal(r2.model, 'stories260K');
	});

	it('content as text blocks, system prompts and sampling fields reach the engine', async () => {
		const r = await post(s, CHAT, {
			messages: [
				{ role: 'system', content: [{ type: 'text', text: 'Be brief.' }] },
				{ role: 'user', content: [{ type: 'text', text: 'ECHO:blocks' }, 'work'] },
			],
			temperature: 0, top_k: 7, seed: 42, top_p: 0.9, min_p: 0.05, repetition_penalty: 1.1,
			presence_penalty: 0.5, frequency_penalty: 0.25, max_completion_tokens: 30,
		});
		assert.equal(r.status, 200, r.body);
		const b = JSON.parse(r.body);
		assert.equal(b.choices[0].message.content.trim(), 'blocks');
		assert.match(s.events(), /temp=0 top_k=7 seed=42\/1/);
		assert.match(s.events(), /max=30 /);
	});

	it('max_tokens ends with length', async () => {
		const b = JSON.parse((await post(s, CHAT, { ...user('story'), max_tokens: 4 })).body);
		assert.equal(b.choices[0].finish_reason, 'length');
		assert.equal(b.usage.completion_tokens, 4);
		const a = JSON.parse((await post(s, '/v1/messages', { max_tokens: 3, messages: [{ role: 'user', content: 'story' }] })).body);
		assert.equal(a.stop_reason, 'max_tokens');
		assert.equal(a.usage.output_tokens, 3);
	});

	it('chat stream: role delta first, content deltas, finish chunk, usage chunk, [DONE]', async () => {
		const r = await post(s, CHAT, { ...user('ECHO:One two three four.'), stream: true, stream_options: { include_usage: true } });
		assert.equal(r.status, 200);
		assert.match(r.headers['content-type'], /text\/event-stream/);
		const ev = sse(r.body);
		assert.equal(ev.at(-1).data, '[DONE]');
		const chunks = ev.slice(0, -1).map((e) => JSON.parse(e.data));
		for (const c of chunks) {
			assert.equal(c.object, 'chat.completion.chunk');
			assert.equal(c.id, chunks[0].id);
		}
		assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
		const usage = chunks.at(-1);
		assert.deepEqual(usage.choices, []);
		assert.ok(usage.usage.completion_tokens > 0);
		const fin = chunks.at(-2);
		assert.equal(fin.choices[0].finish_reason, 'stop');
		assert.deepEqual(fin.choices[0].delta, {});
		assert.equal(typeof fin.timings.ttft_ms, 'number');
		const text = chunks.slice(1, -2).map((c) => c.choices[0].delta.content).join('');
		assert.equal(text.trim(), 'One two three four.');
		for (const c of chunks.slice(1, -2)) assert.equal(c.choices[0].finish_reason, null);
	});

	it('legacy completions: no chat template, stream and not', async () => {
		let r = await post(s, '/v1/completions', { prompt: 'ECHO:plain text', max_tokens: 20 });
		let b = JSON.parse(r.body);
		assert.equal(b.object, 'text_completion');
		assert.match(b.id, /^cmpl-/);
		assert.equal(b.choices[0].text.trim(), 'plain text');
		assert.equal(b.choices[0].finish_reason, 'stop');
		// the prompt went in as is: fewer tokens than through the chat template
		const chat = JSON.parse((await post(s, CHAT, user('ECHO:plain text'))).body);
		assert.ok(b.usage.prompt_tokens < chat.usage.prompt_tokens);
		r = await post(s, '/v1/completions', { prompt: 'ECHO:plain text', stream: true });
		const ev = sse(r.body);
		assert.equal(ev.at(-1).data, '[DONE]');
		const chunks = ev.slice(0, -1).map((e) => JSON.parse(e.data));
		assert.ok(chunks.every((c) => c.object === 'text_completion'));
		assert.equal(chunks.map((c) => c.choices[0].text).join('').trim(), 'plain text');
		assert.equal(chunks.at(-1).choices[0].finish_reason, 'stop');
	});

	it('Anthropic messages: response and the event sequence', async () => {
		const body = { model: 'claude-x', max_tokens: 50, system: 'Be kind.', messages: [{ role: 'user', content: [{ type: 'text', text: 'ECHO:Hi from the messages API.' }] }] };
		let r = await post(s, '/v1/messages', body);
		const b = JSON.parse(r.body);
		assert.equal(b.type, 'message');
		assert.equal(b.role, 'assistant');
		assert.match(b.id, /^msg_/);
		assert.equal(b.model, 'stories260K');
		assert.equal(b.content[0].type, 'text');
		assert.equal(b.content[0].text.trim(), 'Hi from the messages API.');
		assert.equal(b.stop_reason, 'end_turn');
		assert.equal(b.stop_sequence, null);
		assert.ok(b.usage.input_tokens > 0 && b.usage.output_tokens > 0);
		assert.equal(typeof b.timings.prefill_ms, 'number');
		r = await post(s, '/v1/messages', { ...body, stream: true });
		const ev = sse(r.body);
		const names = ev.map((e) => e.event);
		assert.deepEqual(names.slice(0, 3), ['message_start', 'content_block_start', 'ping']);
		assert.deepEqual(names.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
		assert.ok(names.slice(3, -3).every((n) => n === 'content_block_delta'));
		for (const e of ev) assert.equal(JSON.parse(e.data).type, e.event);
		const start = JSON.parse(ev[0].data).message;
		assert.equal(start.usage.input_tokens, b.usage.input_tokens);
		assert.deepEqual(start.content, []);
		const text = ev.slice(3, -3).map((e) => JSON.parse(e.data).delta.text).join('');
		assert.equal(text.trim(), 'Hi from the messages API.');
		const delta = JSON.parse(ev.at(-2).data);
		assert.equal(delta.delta.stop_reason, 'end_turn');
		assert.equal(delta.usage.output_tokens, b.usage.output_tokens);
	});

	it('stop sequences: applied to streams and whole replies, never leaked', async () => {
		// "on a t" spans three tokens of the reply " Once upon a time"
		const prompt = 'ECHO:Once upon a time there was [delay=5]';
		let b = JSON.parse((await post(s, CHAT, { ...user(prompt), stop: 'on a t' })).body);
		assert.equal(b.choices[0].message.content, ' Once up');
		assert.equal(b.choices[0].finish_reason, 'stop');
		const r = await streamChunks(s, CHAT, { ...user(prompt), stop: ['zzz', 'on a t'], stream: true });
		const ev = sse(Buffer.concat(r.chunks).toString('utf8'));
		const deltas = ev.slice(1, -2).map((e) => JSON.parse(e.data).choices[0].delta.content);
		assert.equal(deltas.join(''), ' Once up');
		let seen = '';
		for (const d of deltas) {
			seen += d;
			assert.ok(!seen.includes('on a'), `leaked: ${seen}`);
		}
		b = JSON.parse((await post(s, '/v1/completions', { prompt, stop: ['there'] })).body);
		assert.equal(b.choices[0].text, ' Once upon a time ');
		const a = JSON.parse((await post(s, '/v1/messages', { max_tokens: 40, messages: [{ role: 'user', content: prompt }], stop_sequences: ['upon'] })).body);
		assert.equal(a.content[0].text, ' Once ');
		assert.equal(a.stop_reason, 'stop_sequence');
		assert.equal(a.stop_sequence, 'upon');
		const ar = await post(s, '/v1/messages', { max_tokens: 40, stream: true, messages: [{ role: 'user', content: prompt }], stop_sequences: ['a time'] });
		const aev = sse(ar.body);
		assert.equal(aev.slice(3, -3).map((e) => JSON.parse(e.data).delta.text).join(''), ' Once upon ');
		const md = JSON.parse(aev.at(-2).data);
		assert.equal(md.delta.stop_reason, 'stop_sequence');
		assert.equal(md.delta.stop_sequence, 'a time');
		// the engine job was cancelled once the stop matched
		await waitFor(() => /cancel \d+/.test(s.events()));
		// the usage counts the tokens up to the one that completed the match,
		// however the engine's tokens were batched: all at once ([delay=0])
		// or one per poll
		const usage = async (d) => JSON.parse((await post(s, CHAT, { ...user(`ECHO:Once upon a time there was a cat that sat on a mat [delay=${d}]`), stop: 'on a t' })).body).usage.completion_tokens;
		const all = await usage(0), one = await usage(20);
		assert.equal(all, one);
		assert.ok(one >= 3 && one <= 5, `${one} tokens for ' Once upon a t'`);
	});

	it('UTF-8 is never split across events', async () => {
		const text = 'héllo 你好 wörld 🙂';
		const r = await streamChunks(s, CHAT, { ...user(`ECHO:${text} [delay=2]`), stream: true });
		const raw = Buffer.concat(r.chunks);
		const ev = sse(raw.toString('utf8'));
		const deltas = ev.slice(1, -2).map((e) => JSON.parse(e.data).choices[0].delta.content);
		assert.ok(deltas.length > 3, 'several events');
		for (const d of deltas) assert.ok(!d.includes('\ufffd'), `a delta holds a broken character: ${JSON.stringify(d)}`);
		assert.equal(deltas.join('').trim(), `${text} [delay=2]`);
		const b = JSON.parse((await post(s, CHAT, user(`ECHO:${text}`))).body);
		assert.equal(b.choices[0].message.content.trim(), text);
	});

	it('identical requests give identical replies', async () => {
		const body = { ...user('tell me a story'), max_tokens: 12, temperature: 0.8 };
		const a = JSON.parse((await post(s, CHAT, body)).body).choices[0].message.content;
		const b = JSON.parse((await post(s, CHAT, body)).body).choices[0].message.content;
		assert.equal(a, b);
		assert.ok(a.length > 0);
	});

	it('a client that disconnects mid-stream cancels its engine job', async () => {
		const before = (s.events().match(/cancel/g) || []).length;
		await new Promise((resolve, reject) => {
			const data = JSON.stringify({ ...user('[noeos] [delay=50] go'), max_tokens: 500, stream: true });
			const req = http.request(s.base + CHAT, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } }, (res) => {
				res.once('data', () => {
					req.destroy();
					resolve();
				});
			});
			req.on('error', () => {});
			req.end(data);
			setTimeout(() => reject(new Error('no data')), 5000);
		});
		assert.ok(await waitFor(() => (s.events().match(/cancel/g) || []).length > before, 3000), 'the engine saw a Cancel');
		await healthy(s);
	});

	it('a client that disconnects while waiting for a whole reply cancels too', async () => {
		const before = (s.events().match(/cancel/g) || []).length;
		const jobsBefore = (s.events().match(/generate/g) || []).length;
		const req = http.request(s.base + CHAT, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
		req.on('error', () => {});
		req.end(JSON.stringify({ ...user('[noeos] [delay=50] go'), max_tokens: 500 }));
		await waitFor(() => (s.events().match(/generate/g) || []).length > jobsBefore);
		await sleep(100);
		req.destroy();
		assert.ok(await waitFor(() => (s.events().match(/cancel/g) || []).length > before, 3000), 'the engine saw a Cancel');
		await healthy(s);
	});

	it('cheap GETs are answered during a long generation; keep-alive reuses the connection', async () => {
		const long = post(s, CHAT, { ...user('[noeos] [delay=20] go'), max_tokens: 60 });
		await sleep(100);
		const t0 = Date.now();
		await healthy(s);
		await request(s, 'GET', '/v1/models');
		assert.ok(Date.now() - t0 < 1000, 'health and models did not wait for the generation');
		const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
		const a = await request(s, 'GET', '/health', undefined, {}, agent);
		const b = await request(s, 'POST', CHAT, user('ECHO:k'), {}, agent);
		const c = await request(s, 'GET', '/health', undefined, {}, agent);
		assert.equal(b.status, 200);
		assert.equal(a.socket, c.socket, 'one connection for three requests');
		agent.destroy();
		const r = await long;
		assert.equal(JSON.parse(r.body).choices[0].finish_reason, 'length');
	});

	it('many idle connections do not starve an active one', async () => {
		const idle = await Promise.all(
			Array.from({ length: 200 }, () => new Promise((resolve) => {
				const c = net.connect(s.port, '127.0.0.1', () => resolve(c));
				c.on('error', () => resolve(c));
			})),
		);
		const t0 = Date.now();
		const r = await post(s, CHAT, user('ECHO:still here'));
		assert.equal(JSON.parse(r.body).choices[0].message.content.trim(), 'still here');
		await healthy(s);
		assert.ok(Date.now() - t0 < 3000);
		for (const c of idle) c.destroy();
	});

	it('a job that fails inside the engine: an error event inside a stream', async () => {
		let r = await post(s, CHAT, { ...user('[fail-after=2] [delay=5] x'), stream: true });
		let ev = sse(r.body);
		assert.equal(ev[0].data.includes('"role":"assistant"'), true);
		assert.ok(JSON.parse(ev.at(-1).data).error, r.body);
		r = await post(s, '/v1/messages', { max_tokens: 50, stream: true, messages: [{ role: 'user', content: '[fail-after=2] x' }] });
		ev = sse(r.body);
		assert.equal(ev[0].event, 'message_start');
		assert.equal(ev.at(-1).event, 'error');
		assert.equal(JSON.parse(ev.at(-1).data).type, 'error');
		await healthy(s);
	});

	it('an engine that refuses for a while (unavailable, full) is asked again: the reply comes', async () => {
		const before = (s.events().match(/fail-generate/g) || []).length;
		const r = await post(s, CHAT, user('[fail=3] ECHO:third time lucky'));
		assert.equal(r.status, 200, r.body);
		assert.equal(JSON.parse(r.body).choices[0].message.content.trim(), 'third time lucky');
		assert.equal((s.events().match(/fail-generate/g) || []).length - before, 3);
	});

	it('a job the engine loses (a restarted worker: NOT_FOUND) goes on there: one reply, nothing lost', async () => {
		const text = 'The quick brown fox jumps over the lazy dog and runs far away';
		const gens = () => s.events().split('\n').filter((l) => l.startsWith('generate '));
		for (const [path, body, get] of [
			[CHAT, { ...user(`[lose-after=4] [delay=2] ECHO:${text}`) }, (r) => JSON.parse(r.body).choices[0].message.content],
			[CHAT, { ...user(`[lose-after=4] [delay=2] ECHO:${text}`), stream: true },
				(r) => sse(r.body).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data).choices[0]?.delta?.content ?? '').join('')],
			['/v1/messages', { max_tokens: 64, stream: true, messages: [{ role: 'user', content: `[lose-after=4] [delay=2] ECHO:${text}` }] },
				(r) => sse(r.body).filter((e) => e.event === 'content_block_delta').map((e) => JSON.parse(e.data).delta.text).join('')],
		]) {
			const n0 = gens().length;
			const r = await post(s, path, body);
			assert.equal(r.status, 200, r.body);
			assert.equal(get(r).trim(), text, r.body);
			assert.ok(!/"error"/.test(r.body), r.body);
			// the first job, lost after 4 tokens, and its continuation: the prompt
			// and those 4 tokens, 4 fewer to go, the sampler 4 draws on
			const g = gens().slice(n0).map((l) => Object.fromEntries(l.split(' ').slice(2).map((kv) => kv.split('='))));
			assert.equal(g.length, 2, s.events());
			assert.equal(Number(g[1].prompt), Number(g[0].prompt) + 4);
			assert.equal(Number(g[1].max), Number(g[0].max) - 4);
			assert.equal(g[0].skip, '0');
			assert.equal(g[1].skip, '4');
			assert.equal(g[1].seed, g[0].seed);
			assert.equal(g[0].client, 'yes', 'the job carries the lease');
		}
		assert.match((await request(s, 'GET', '/metrics')).body, /^anedvd_generations_resumed_total 3$/m);
		// a stop sequence whose first half came before the loss and the rest after
		const r = await post(s, CHAT, { ...user('[lose-after=3] [delay=2] ECHO:one two three four five six'), stop: ['three four'], stream: true });
		const out = sse(r.body).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
		assert.equal(out.map((c) => c.choices[0]?.delta?.content ?? '').join('').trim(), 'one two');
		assert.equal(out.at(-1).choices[0].finish_reason, 'stop');
	});

	it('/metrics counts requests, tokens and stages', async () => {
		const r = await request(s, 'GET', '/metrics');
		assert.match(r.body, /anedvd_http_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} [1-9]/);
		assert.match(r.body, /anedvd_http_requests_total\{endpoint="\/v1\/chat\/completions",status="400"\} [1-9]/);
		assert.match(r.body, /anedvd_generated_tokens_total [1-9]/);
		assert.match(r.body, /anedvd_prompt_tokens_total [1-9]/);
		assert.match(r.body, /anedvd_cancelled_total [1-9]/);
		assert.match(r.body, /anedvd_stage_seconds_count\{stage="tokenize"\} [1-9]/);
		assert.match(r.body, /anedvd_stage_seconds_count\{stage="ttft"\} [1-9]/);
	});
});

describe('bounded queue', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--parallel', '1', '--queue', '1'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('a request beyond the running one and the queue gets 503 with Retry-After', async () => {
		const slow = (n) => {
			const req = http.request(s.base + CHAT, { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
			req.on('error', () => {});
			req.end(JSON.stringify({ ...user(`[noeos] [delay=50] job ${n}`), max_tokens: 200 }));
			return req;
		};
		const a = slow(1);
		await waitFor(() => /generate/.test(s.events()));
		const b = slow(2);
		let m;
		await waitFor(async () => {
			m = (await request(s, 'GET', '/metrics')).body;
			return /anedvd_queue_length 1/.test(m);
		});
		assert.match(m, /anedvd_running 1/);
		const r = await post(s, CHAT, user('ECHO:third'));
		openaiError(r, 503);
		assert.equal(r.headers['retry-after'], '1');
		const an = await post(s, '/v1/messages', { max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
		anthropicError(an, 503, 'overloaded_error');
		await healthy(s);
		// the waiting client leaves: it never reaches the engine
		const gens = (s.events().match(/generate/g) || []).length;
		b.destroy();
		await waitFor(async () => /anedvd_queue_length 0/.test((await request(s, 'GET', '/metrics')).body));
		a.destroy();
		await waitFor(() => /cancel/.test(s.events()));
		const ok = await post(s, CHAT, user('ECHO:after'));
		assert.equal(ok.status, 200);
		assert.equal((s.events().match(/generate/g) || []).length, gens + 1, 'the abandoned request was never generated');
		assert.match((await request(s, 'GET', '/metrics')).body, /anedvd_rejected_total 2/);
	});
});

describe('upstream down', () => {
	let s;
	before(async () => {
		s = await startStack({ noEngine: true, frontend: ['--timeout-ms', '300', '--deadline-ms', '800'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('no engine: 503 for a whole reply, an error event for a stream; then it recovers', async () => {
		// the engine is waited for until the deadline (800 ms), then 503
		const t0 = Date.now();
		let r = await post(s, CHAT, user('ECHO:x'));
		openaiError(r, 503);
		assert.match(JSON.parse(r.body).error.message, /engine.*unavailable.*deadline/);
		assert.ok(Date.now() - t0 >= 700, `answered after ${Date.now() - t0} ms, before the deadline`);
		assert.equal(r.headers['retry-after'], '1');
		r = await post(s, '/v1/messages', { max_tokens: 5, messages: [{ role: 'user', content: 'x' }] });
		anthropicError(r, 503, 'overloaded_error');
		r = await post(s, CHAT, { ...user('ECHO:x'), stream: true });
		assert.equal(r.status, 200);
		const ev = sse(r.body);
		assert.match(JSON.parse(ev.at(-1).data).error.message, /engine/);
		r = await post(s, '/v1/messages', { max_tokens: 5, stream: true, messages: [{ role: 'user', content: 'x' }] });
		assert.equal(sse(r.body).at(-1).event, 'error');
		await healthy(s);
		s.startEngine();
		assert.ok(await waitFor(async () => (await post(s, CHAT, user('ECHO:back'))).status === 200, 5000));
		// a restarted engine (a new pid) is counted by the health probe
		assert.ok(await waitFor(async () => JSON.parse((await request(s, 'GET', '/health')).body).engine === 'up', 5000));
		await s.stopEngine();
		s.startEngine();
		assert.ok(
			await waitFor(async () => /anedvd_worker_restarts_total\{process="engine"\} 1/.test((await request(s, 'GET', '/metrics')).body), 8000),
			'the restart shows in /metrics',
		);
		assert.ok(await waitFor(async () => (await post(s, CHAT, user('ECHO:again'))).status === 200, 5000));
		// an engine that refuses past the deadline: 503 (overloaded), an error event in a stream
		r = await post(s, CHAT, user('[fail] now'));
		openaiError(r, 503);
		assert.match(JSON.parse(r.body).error.message, /fail/);
		r = await post(s, '/v1/messages', { max_tokens: 5, messages: [{ role: 'user', content: '[fail] now' }] });
		anthropicError(r, 503, 'overloaded_error');
		r = await post(s, CHAT, { ...user('[fail] now'), stream: true });
		assert.equal(r.status, 200);
		assert.ok(JSON.parse(sse(r.body).at(-1).data).error.message.includes('fail'), r.body);
		r = await post(s, '/v1/messages', { max_tokens: 5, stream: true, messages: [{ role: 'user', content: '[fail] now' }] });
		const aev = sse(r.body);
		assert.equal(aev.at(-1).event, 'error');
		assert.equal(JSON.parse(aev.at(-1).data).error.type, 'overloaded_error');
		// a generation that outlives --deadline-ms ends with 504 and its job is cancelled
		r = await post(s, CHAT, { ...user('[noeos] [delay=50] slow'), max_tokens: 500 });
		openaiError(r, 504);
		assert.match(JSON.parse(r.body).error.message, /deadline/);
		assert.ok(await waitFor(() => /cancel/.test(s.events())));
		r = await post(s, '/v1/messages', { max_tokens: 500, stream: true, messages: [{ role: 'user', content: '[noeos] [delay=50] slow' }] });
		assert.equal(sse(r.body).at(-1).event, 'error');
		// a tokenizer that goes away is the same: 503, server up
		s.procs.tok.kill('SIGKILL');
		await waitFor(() => s.procs.tok.exitCode !== null || s.procs.tok.signalCode !== null);
		r = await post(s, CHAT, user('ECHO:x'));
		openaiError(r, 503);
		assert.match(JSON.parse(r.body).error.message, /tokenizer/);
		await healthy(s);
	});
});

describe('context limit', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--max-seq', '48', '--max-tokens', '16', '--keepalive-ms', '100'],
			engine: ['--max-seq', '48'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('a prompt longer than the context loses its oldest tokens and says how many', async () => {
		const long = 'ECHO:ok\n' + 'the cat sat on the mat and '.repeat(20);
		let r = await post(s, CHAT, { ...user(long), max_tokens: 8 });
		assert.equal(r.status, 200, r.body);
		const b = JSON.parse(r.body);
		assert.ok(b.usage.prompt_tokens_dropped > 0, JSON.stringify(b.usage));
		assert.ok(b.usage.prompt_tokens + 8 + 1 <= 48, JSON.stringify(b.usage));
		assert.equal(b.timings.prompt_tokens_dropped, b.usage.prompt_tokens_dropped);
		// the engine fits them (cpu-worker/fit.h): what it kept and the reply's room
		const sent = [...s.events().matchAll(/kept=(\d+) room=(\d+)/g)].at(-1);
		assert.ok(Number(sent[1]) + Number(sent[2]) < 48, sent[0]);
		// a short prompt keeps everything and the reply is cut to fit
		r = await post(s, '/v1/completions', { prompt: 'ECHO:hi', max_tokens: 1000 });
		const c = JSON.parse(r.body);
		assert.equal(c.usage.prompt_tokens_dropped, 0);
		const last = [...s.events().matchAll(/kept=(\d+) room=(\d+)/g)].at(-1);
		assert.equal(Number(last[1]) + Number(last[2]) + 1, 48, last[0]);
		// the stream's final chunk carries it too
		r = await post(s, CHAT, { ...user(long), stream: true, stream_options: { include_usage: true } });
		const ev = sse(r.body);
		assert.ok(JSON.parse(ev.at(-2).data).usage.prompt_tokens_dropped > 0);
		// a stream that stays silent (a long prefill) gets SSE comments; clients skip them
		r = await post(s, CHAT, { ...user('[prefill=600] ECHO:late'), stream: true });
		assert.match(r.body, /^: keep-alive$/m);
		assert.equal(sse(r.body).filter((e) => e.data?.startsWith('{')).map((e) => JSON.parse(e.data).choices[0]?.delta?.content ?? '').join('').trim(), 'late');
		// Anthropic reports it in usage as well
		r = await post(s, '/v1/messages', { max_tokens: 8, messages: [{ role: 'user', content: long }] });
		assert.ok(JSON.parse(r.body).usage.prompt_tokens_dropped > 0);
	});
});
