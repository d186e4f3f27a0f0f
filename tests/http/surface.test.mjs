// Raw HTTP for the endpoints beside the generations: llama.cpp's /tokenize,
// /detokenize, /apply-template and /props, /v1/models with the context
// length, Anthropic's /v1/messages/count_tokens, the Responses API's shapes
// and event stream, and the check of every request's "model". Every 400 is
// followed by a /health check: the server still answers.
//
// Outside references: llama.cpp's server README documents the /tokenize
// with_pieces reply for 'á' on stories260K (ids 198 and 164, pieces [195]
// and [161]: bytes, not valid UTF-8 alone) and the shapes of /detokenize,
// /apply-template and /props; OpenAI's Responses API reference the event
// names and their order.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, it } from 'node:test';

import { env, post, request, sse, startStack, waitFor } from './harness.mjs';

async function healthy(s) {
	const r = await request(s, 'GET', '/health');
	assert.equal(r.status, 200, 'the server still answers /health');
	assert.equal(JSON.parse(r.body).status, 'ok');
}

// llama.cpp's error shape: {"error":{"code","message","type"}}
async function llamaError(s, r, status, re) {
	assert.equal(r.status, status, r.body);
	const b = JSON.parse(r.body);
	assert.equal(b.error.code, status);
	assert.equal(typeof b.error.type, 'string');
	if (re) assert.match(b.error.message, re);
	await healthy(s);
	return b;
}

async function openaiError(s, r, status, param) {
	assert.equal(r.status, status, r.body);
	const b = JSON.parse(r.body);
	assert.equal(typeof b.error.message, 'string');
	assert.equal(b.error.param, param, b.error.message);
	await healthy(s);
	return b;
}

async function anthropicError(s, r, status, re) {
	assert.equal(r.status, status, r.body);
	const b = JSON.parse(r.body);
	assert.equal(b.type, 'error');
	assert.equal(b.error.type, 'invalid_request_error');
	if (re) assert.match(b.error.message, re);
	await healthy(s);
	return b;
}

const tokenize = async (s, body) => {
	const r = await post(s, '/tokenize', body);
	assert.equal(r.status, 200, r.body);
	return JSON.parse(r.body).tokens;
};
const detokenize = async (s, tokens) => {
	const r = await post(s, '/detokenize', { tokens });
	assert.equal(r.status, 200, r.body);
	return JSON.parse(r.body).content;
};

describe('the API surface beside the generations', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--model-file', env('FE_MODEL'), '--max-seq', '1024'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('/tokenize and /detokenize: ids, pieces, special tokens, a round trip', async () => {
		const text = 'Once upon a time, there was a little girl named Lily.';
		const ids = await tokenize(s, { content: text });
		assert.ok(ids.length > 5 && ids.every((t) => Number.isInteger(t) && t > 0));
		// add_special: llama.cpp's default is false; true puts the BOS first
		const withBos = await tokenize(s, { content: text, add_special: true });
		assert.deepEqual(withBos, [1, ...ids]);
		// llama.cpp's detokenize concatenates the pieces: the SentencePiece
		// space in front of the first word stays
		assert.equal(await detokenize(s, ids), ' ' + text);
		assert.equal(await detokenize(s, withBos), '<s> ' + text);
		assert.equal(await detokenize(s, []), '');
		// a byte token alone is not UTF-8: U+FFFD, as in every reply's text
		assert.equal(await detokenize(s, [198]), '\ufffd');
		assert.equal(await detokenize(s, [198, 164]), 'á');
		// parse_special (default true) reads "<s>" as the BOS token
		assert.equal((await tokenize(s, { content: '<s>Once' }))[0], 1);
		assert.notEqual((await tokenize(s, { content: '<s>Once', parse_special: false }))[0], 1);

		// with_pieces: the README's example of bytes that are not UTF-8 alone
		const pieces = await tokenize(s, { content: 'á', with_pieces: true });
		const at = pieces.findIndex((t) => t.id === 198);
		assert.ok(at >= 0, JSON.stringify(pieces));
		assert.deepEqual(pieces.slice(at, at + 2), [{ id: 198, piece: [195] }, { id: 164, piece: [161] }]);
		// llama.cpp's own test text: every piece there, ids as without pieces,
		// the pieces' bytes are the detokenized text
		const uni = 'This is a test string with unicode 媽 and emoji 🤗';
		const wp = await tokenize(s, { content: uni, with_pieces: true, add_special: true });
		assert.deepEqual(wp.map((t) => t.id), await tokenize(s, { content: uni, add_special: true }));
		assert.deepEqual(wp[0], { id: 1, piece: '<s>' });
		const bytes = Buffer.concat(wp.map((t) => (typeof t.piece === 'string' ? Buffer.from(t.piece) : Buffer.from(t.piece))));
		for (const t of wp) assert.ok(t.id > 0 && t.piece.length > 0, JSON.stringify(t));
		assert.equal(bytes.toString('utf8'), await detokenize(s, wp.map((t) => t.id)));
		assert.equal(bytes.toString('utf8'), '<s> ' + uni);

		// llama.cpp's mixed content: strings and ids in order, the BOS only
		// where the first part is a string
		const once = await tokenize(s, { content: 'Once' }), upon = await tokenize(s, { content: ' upon' });
		assert.deepEqual(await tokenize(s, { content: ['Once', 5, ' upon'], add_special: true }), [1, ...once, 5, ...upon]);
		assert.deepEqual(await tokenize(s, { content: [5, 'Once'], add_special: true }), [5, ...once]);
		assert.deepEqual(await tokenize(s, { content: [] }), []);
		const mp = await tokenize(s, { content: [7, 'Once'], with_pieces: true });
		assert.deepEqual(mp.map((t) => t.id), [7, ...once]);
	});

	it('/apply-template renders what the chat endpoint and count_tokens encode', async () => {
		const messages = [
			{ role: 'system', content: 'You are kind.' },
			{ role: 'user', content: 'Tell me a story.' },
			{ role: 'assistant', content: 'Once upon a time.' },
			{ role: 'user', content: 'More.' },
		];
		const r = await post(s, '/apply-template', { messages });
		assert.equal(r.status, 200, r.body);
		const { prompt } = JSON.parse(r.body);
		for (const m of messages) assert.ok(prompt.includes(m.content), prompt);
		assert.ok(prompt.indexOf('You are kind.') < prompt.indexOf('More.'));
		// the template's prompt, encoded as a generation encodes it (the
		// model's BOS, special tokens read), is count_tokens' number
		const ids = await tokenize(s, { content: prompt, add_special: true });
		const c = await post(s, '/v1/messages/count_tokens', { model: 'x', system: 'You are kind.', messages: messages.slice(1) });
		assert.equal(c.status, 200, c.body);
		assert.deepEqual(JSON.parse(c.body), { input_tokens: ids.length });
		// and the same body on /v1/messages reports it as usage.input_tokens
		const m = await post(s, '/v1/messages', { model: 'x', max_tokens: 4, system: 'You are kind.', messages: messages.slice(1) });
		assert.equal(JSON.parse(m.body).usage.input_tokens, ids.length);
		// a billing-header system block is client metadata: the same prompt
		const hdr = { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.0.14; cch=4f1e;' };
		const h = await post(s, '/v1/messages/count_tokens', { model: 'x', system: [hdr, { type: 'text', text: 'You are kind.' }], messages: messages.slice(1) });
		assert.deepEqual(JSON.parse(h.body), { input_tokens: ids.length });
		const mh = await post(s, '/v1/messages', { model: 'x', max_tokens: 4, system: [hdr, { type: 'text', text: 'You are kind.' }], messages: messages.slice(1) });
		assert.equal(JSON.parse(mh.body).usage.input_tokens, ids.length);
		// a system of nothing but the header is as no system (the server's --system then applies)
		const none = await post(s, '/v1/messages/count_tokens', { model: 'x', messages: messages.slice(1) });
		const only = await post(s, '/v1/messages/count_tokens', { model: 'x', system: [hdr], messages: messages.slice(1) });
		assert.deepEqual(JSON.parse(only.body), JSON.parse(none.body));
	});

	it('/props, /v1/models and /v1/models/{id}', async () => {
		let r;
		// the vocabulary is fetched when the tokenizer first answers
		assert.ok(await waitFor(async () => (r = await request(s, 'GET', '/props')).status === 200));
		const p = JSON.parse(r.body);
		assert.equal(p.default_generation_settings.n_ctx, 1024);
		assert.equal(typeof p.default_generation_settings.params.temperature, 'number');
		assert.equal(p.default_generation_settings.params.n_predict, 512);
		assert.equal(p.total_slots, 1);
		assert.equal(p.model_path, 'stories260K.gguf');
		assert.equal(p.model_alias, 'stories260K');
		assert.equal(p.n_ctx, 1024);
		assert.equal(p.n_vocab, 512);
		assert.equal(typeof p.chat_template, 'string');
		assert.equal(p.chat_template_family, 'plain');
		assert.equal(p.bos_token, '<s>');
		assert.equal(p.eos_token, '</s>');
		assert.match(p.build_info, /^anedvd-/);
		await llamaError(s, await post(s, '/props', {}), 405);

		r = await request(s, 'GET', '/v1/models');
		const m = JSON.parse(r.body).data[0];
		assert.equal(m.id, 'stories260K');
		assert.equal(m.context_length, 1024);
		assert.deepEqual(m.capabilities, ['completion', 'chat']);
		assert.equal(m.meta.n_vocab, 512);
		r = await request(s, 'GET', '/v1/models/stories260K');
		assert.deepEqual(JSON.parse(r.body), m);
		await openaiError(s, await request(s, 'GET', '/v1/models/gpt-4o'), 404, 'model');
	});

	it('the model field: any id is served by the one model, a bad one is a 400', async () => {
		const long = 'm'.repeat(257), ok = 'm'.repeat(256);
		const chat = { messages: [{ role: 'user', content: 'ECHO:hi' }] };
		let r = await post(s, '/v1/chat/completions', { model: ok, ...chat });
		assert.equal(JSON.parse(r.body).model, 'stories260K');
		r = await post(s, '/v1/completions', { model: 'gpt-3.5-turbo-instruct', prompt: 'ECHO:hi' });
		assert.equal(JSON.parse(r.body).model, 'stories260K');
		r = await post(s, '/v1/messages', { model: 'claude-x', max_tokens: 5, ...chat });
		assert.equal(JSON.parse(r.body).model, 'stories260K');
		r = await post(s, '/v1/responses', { model: 'gpt-4o', input: 'ECHO:hi' });
		assert.equal(JSON.parse(r.body).model, 'stories260K');

		await openaiError(s, await post(s, '/v1/chat/completions', { model: long, ...chat }), 400, 'model');
		await openaiError(s, await post(s, '/v1/completions', { model: long, prompt: 'x' }), 400, 'model');
		await openaiError(s, await post(s, '/v1/responses', { model: long, input: 'x' }), 400, 'model');
		await openaiError(s, await post(s, '/v1/chat/completions', { model: 7, ...chat }), 400, 'model');
		await anthropicError(s, await post(s, '/v1/messages', { model: long, max_tokens: 5, ...chat }), 400, /'model'/);
		await anthropicError(s, await post(s, '/v1/messages/count_tokens', { model: long, ...chat }), 400, /'model'/);
		await llamaError(s, await post(s, '/tokenize', { model: long, content: 'x' }), 400, /'model'/);
		// bytes that are not UTF-8 inside the JSON string
		const bad = Buffer.concat([Buffer.from('{"model":"ab'), Buffer.from([0xff, 0xfe]), Buffer.from('","messages":[{"role":"user","content":"x"}]}')]);
		const b = await openaiError(s, await post(s, '/v1/chat/completions', bad), 400, 'model');
		assert.match(b.error.message, /UTF-8/);
		const surrogate = Buffer.concat([Buffer.from('{"model":"'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('","max_tokens":5,"messages":[{"role":"user","content":"x"}]}')]);
		await anthropicError(s, await post(s, '/v1/messages', surrogate), 400, /UTF-8/);
	});

	it('/tokenize, /detokenize, /apply-template and count_tokens: every 400', async () => {
		await llamaError(s, await post(s, '/tokenize', {}), 400, /'content' is required/);
		await llamaError(s, await post(s, '/tokenize', { content: 5 }), 400, /'content' must be a string or an array/);
		await llamaError(s, await post(s, '/tokenize', { content: ['x', true] }), 400, /'content\[1\]' must be a string or a token id/);
		await llamaError(s, await post(s, '/tokenize', { content: [-1] }), 400, /'content\[0\]'/);
		await llamaError(s, await post(s, '/tokenize', { content: [2.5] }), 400, /'content\[0\]'/);
		await llamaError(s, await post(s, '/tokenize', { content: 'x', add_special: 'yes' }), 400, /'add_special'/);
		await llamaError(s, await post(s, '/tokenize', { content: 'x', with_pieces: 1 }), 400, /'with_pieces'/);
		await llamaError(s, await post(s, '/tokenize', { content: 'x', parse_special: [] }), 400, /'parse_special'/);
		await llamaError(s, await post(s, '/tokenize', '{"content":'), 400, /malformed JSON/);
		await llamaError(s, await post(s, '/tokenize', '[1]'), 400, /JSON object/);
		await llamaError(s, await request(s, 'GET', '/tokenize'), 405, /POST/);
		await llamaError(s, await post(s, '/detokenize', {}), 400, /'tokens' is required/);
		await llamaError(s, await post(s, '/detokenize', { tokens: 'abc' }), 400, /'tokens' must be an array/);
		await llamaError(s, await post(s, '/detokenize', { tokens: [1, 'x'] }), 400, /'tokens\[1\]' must be an integer/);
		await llamaError(s, await post(s, '/detokenize', { tokens: [1, 2.5] }), 400, /'tokens\[1\]'/);
		await llamaError(s, await post(s, '/detokenize', { tokens: [1, 4294967296] }), 400, /'tokens\[1\]'/);
		await llamaError(s, await post(s, '/detokenize', { tokens: [1, 2, 512] }), 400, /'tokens\[2\]': 512 is outside the vocabulary \(0 to 511\)/);
		await llamaError(s, await post(s, '/detokenize', { tokens: [-1] }), 400, /'tokens\[0\]'/);
		await llamaError(s, await request(s, 'GET', '/detokenize'), 405);
		await llamaError(s, await post(s, '/apply-template', {}), 400, /'messages' is required/);
		await llamaError(s, await post(s, '/apply-template', { messages: [{ role: 'function', content: 'x' }] }), 400, /messages\[0\]\.role/);
		// a tool result names the call it answers, one made before it
		await llamaError(s, await post(s, '/apply-template', { messages: [{ role: 'tool', content: 'x' }] }), 400,
			/messages\[0\]\.tool_call_id' is required/);
		await llamaError(s, await post(s, '/apply-template', { messages: [{ role: 'tool', tool_call_id: 'c9', content: 'x' }] }),
			400, /messages\[0\]\.tool_call_id': the tool result for 'c9' answers no tool call/);
		await anthropicError(s, await post(s, '/v1/messages/count_tokens', { model: 'x' }), 400, /'messages' is required/);
		await anthropicError(s, await post(s, '/v1/messages/count_tokens', { messages: [{ role: 'system', content: 'x' }] }), 400, /role/);
		await anthropicError(s, await post(s, '/v1/messages/count_tokens', { system: 5, messages: [{ role: 'user', content: 'x' }] }), 400, /system/);
		const r = await request(s, 'GET', '/v1/messages/count_tokens');
		assert.equal(r.status, 405);
		assert.equal(JSON.parse(r.body).type, 'error');
		await healthy(s);
	});

	// llama.cpp's own /completion (tools/server/README.md): content, stop,
	// tokens_predicted/evaluated, stop_type and stopping_word, timings with
	// prompt_n and predicted_n; streamed, {"content", "stop": false} events
	// and a last one with stop true and no [DONE]
	it('/completion and /completions in llama.cpp\'s shapes', async () => {
		const text = 'A short answer.';
		let r = await post(s, '/completion', { prompt: `ECHO:${text}`, n_predict: 40, temperature: 0 });
		assert.equal(r.status, 200, r.body);
		let b = JSON.parse(r.body);
		// (the fake engine's text comes through stories260K's SentencePiece: a leading space)
		assert.equal(b.content.trim(), text);
		assert.equal(b.stop, true);
		assert.equal(typeof b.tokens_predicted, 'number');
		assert.ok(b.tokens_predicted > 0 && b.tokens_evaluated > 0, r.body);
		assert.equal(b.stop_type, 'eos');
		assert.equal(b.stopping_word, '');
		assert.equal(b.truncated, false);
		assert.equal(b.timings.predicted_n, b.tokens_predicted);
		assert.equal(b.timings.prompt_n + b.timings.cache_n, b.tokens_evaluated);
		assert.equal(b.generation_settings.n_predict, 40);
		assert.equal(b.completion_probabilities, undefined, 'no n_probs, no probabilities');
		// the same under /completions; n_predict stops it: a limit
		r = await post(s, '/completions', { prompt: 'ECHO:one two three four five six', n_predict: 2 });
		b = JSON.parse(r.body);
		assert.equal(r.status, 200, r.body);
		assert.equal(b.tokens_predicted, 2);
		assert.equal(b.stop_type, 'limit');
		// a stop word: the text before it, the word named
		r = await post(s, '/completion', { prompt: 'ECHO:one two three', stop: [' three'] });
		b = JSON.parse(r.body);
		assert.equal(b.content.trim(), 'one two');
		assert.equal(b.stop_type, 'word');
		assert.equal(b.stopping_word, ' three');
		// n_predict -1: as long as the context lets it (here: to the end of the script)
		r = await post(s, '/completion', { prompt: `ECHO:${text}`, n_predict: -1 });
		assert.equal(JSON.parse(r.body).content.trim(), text);
		assert.equal(JSON.parse(r.body).generation_settings.n_predict, -1);
		// n_probs: each token with its best alternatives, its text and bytes
		r = await post(s, '/completion', { prompt: `ECHO:${text}`, n_probs: 3 });
		b = JSON.parse(r.body);
		assert.ok(Array.isArray(b.completion_probabilities) && b.completion_probabilities.length === b.tokens_predicted, r.body);
		const p0 = b.completion_probabilities[0];
		assert.equal(typeof p0.id, 'number');
		assert.equal(typeof p0.logprob, 'number');
		assert.deepEqual(p0.bytes, [...Buffer.from(p0.token, 'utf8')]);
		assert.ok(Array.isArray(p0.top_logprobs) && p0.top_logprobs.length <= 3); // (the fake engine has no alternatives; live.test has)
		assert.equal(b.completion_probabilities.map((t) => t.token).join(''), b.content);

		// streamed: the pieces make the text; the last event carries the rest
		r = await post(s, '/completion', { prompt: `ECHO:${text}`, stream: true });
		assert.equal(r.status, 200, r.body);
		assert.ok(!r.body.includes('[DONE]'), 'llama.cpp\'s stream has no [DONE]');
		const ev = sse(r.body).map((e) => JSON.parse(e.data));
		const last = ev.pop();
		assert.ok(ev.length >= 1 && ev.every((e) => e.stop === false), r.body);
		assert.equal(ev.map((e) => e.content).join('').trim(), text);
		assert.equal(last.stop, true);
		assert.equal(last.content, '');
		assert.equal(last.stop_type, 'eos');
		assert.ok(last.tokens_predicted > 0 && last.timings.predicted_n === last.tokens_predicted, JSON.stringify(last));

		// the errors are llama.cpp's, and the server goes on
		await llamaError(s, await post(s, '/completion', {}), 400, /prompt/);
		await llamaError(s, await post(s, '/completion', { prompt: 'x', n_predict: 0 }), 400, /n_predict/);
		await llamaError(s, await post(s, '/completion', { prompt: 'x', n_predict: -2 }), 400, /n_predict/);
		await llamaError(s, await post(s, '/completion', { prompt: 'x', n_probs: 99 }), 400, /n_probs/);
		await llamaError(s, await post(s, '/completion', { prompt: 'x', n: 2 }), 400, /one completion/);
		await llamaError(s, await post(s, '/completion', { prompt: 'x', temperature: 'hot' }), 400, /temperature/);
		await llamaError(s, await request(s, 'GET', '/completion'), 405, /POST/);
	});

	it('the Responses API: the reply, the event stream, a cut reply', async () => {
		let r = await post(s, '/v1/responses', { model: 'gpt-4o', instructions: 'Be brief.', input: 'ECHO:A short answer.', max_output_tokens: 40, temperature: 0.5, top_p: 0.9 });
		assert.equal(r.status, 200, r.body);
		let b = JSON.parse(r.body);
		assert.match(b.id, /^resp_/);
		assert.equal(b.object, 'response');
		assert.equal(b.status, 'completed');
		assert.equal(b.incomplete_details, null);
		assert.equal(b.instructions, 'Be brief.');
		assert.equal(b.max_output_tokens, 40);
		assert.equal(b.temperature, 0.5);
		assert.equal(b.top_p, 0.9);
		assert.equal(b.store, false);
		assert.equal(b.output.length, 1);
		assert.equal(b.output[0].type, 'message');
		assert.equal(b.output[0].role, 'assistant');
		assert.equal(b.output[0].content[0].type, 'output_text');
		assert.equal(b.output[0].content[0].text.trim(), 'A short answer.');
		assert.equal(b.usage.total_tokens, b.usage.input_tokens + b.usage.output_tokens);
		assert.ok(b.usage.output_tokens > 0);
		// instructions and the input items are a chat: the same prompt as /v1/chat/completions
		const chat = await post(s, '/v1/chat/completions', { messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'ECHO:A short answer.' }] });
		assert.equal(b.usage.input_tokens, JSON.parse(chat.body).usage.prompt_tokens);
		const items = await post(s, '/v1/responses', {
			input: [
				{ role: 'developer', content: 'Be brief.' },
				{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'ECHO:A short answer.' }] },
			],
		});
		assert.equal(JSON.parse(items.body).usage.input_tokens, b.usage.input_tokens);

		// the stream: the documented order, sequence numbers from 0, event name = data.type
		r = await post(s, '/v1/responses', { input: 'ECHO:Events in their order. [delay=2]', stream: true });
		assert.equal(r.status, 200);
		assert.match(r.headers['content-type'], /text\/event-stream/);
		const evs = sse(r.body).map((e) => ({ event: e.event, data: JSON.parse(e.data) }));
		const types = evs.map((e) => e.data.type);
		evs.forEach((e, i) => {
			assert.equal(e.event, e.data.type);
			assert.equal(e.data.sequence_number, i);
		});
		const n = types.filter((t) => t === 'response.output_text.delta').length;
		assert.ok(n >= 2, types.join());
		assert.deepEqual(types, [
			'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
			...Array(n).fill('response.output_text.delta'),
			'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed',
		]);
		const text = evs.filter((e) => e.data.type === 'response.output_text.delta').map((e) => e.data.delta).join('');
		assert.equal(text.trim(), 'Events in their order. [delay=2]');
		assert.equal(evs.at(-4).data.text, text);
		assert.equal(evs.at(-2).data.item.content[0].text, text);
		const fin = evs.at(-1).data.response;
		assert.equal(fin.status, 'completed');
		assert.equal(fin.output[0].content[0].text, text);
		assert.equal(evs[0].data.response.status, 'in_progress');
		assert.deepEqual(evs[0].data.response.output, []);
		for (const e of evs.slice(2, -1)) assert.equal(e.data.output_index, 0);

		// cut at max_output_tokens: incomplete, streamed and not
		r = await post(s, '/v1/responses', { input: 'a story [noeos]', max_output_tokens: 3 });
		b = JSON.parse(r.body);
		assert.equal(b.status, 'incomplete');
		assert.deepEqual(b.incomplete_details, { reason: 'max_output_tokens' });
		assert.equal(b.usage.output_tokens, 3);
		r = await post(s, '/v1/responses', { input: 'a story [noeos]', max_output_tokens: 3, stream: true });
		const last = JSON.parse(sse(r.body).at(-1).data);
		assert.equal(last.type, 'response.incomplete');
		assert.equal(last.response.status, 'incomplete');

		// a failure once the stream has begun: the error event
		r = await post(s, '/v1/responses', { input: '[fail-after=2] x', stream: true });
		const end = sse(r.body).at(-1);
		assert.equal(end.event, 'error');
		assert.match(JSON.parse(end.data).message, /fail/);
		await healthy(s);
	});

	it('the Responses API: every 400 names its field', async () => {
		const cases = [
			[{ input: 'x', previous_response_id: 'resp_1' }, 'previous_response_id', /stateless/],
			[{ input: 'x', store: true }, 'store', /stateless/],
			[{ input: 'x', store: 'no' }, 'store', /true or false/],
			[{ input: 'x', conversation: 'conv_1' }, 'conversation', /stateless/],
			[{ input: 'x', background: true }, 'background', /stored/],
			[{ input: 'x', tools: [{ type: 'web_search_preview' }] }, 'tools[0].type', /only function tools/],
			[{ input: 'x', tools: [{ type: 'function', name: 'f', parameters: { type: 'string' } }] }, 'tools[0].parameters', /object schema/],
			[{ input: 'x', tools: [{ type: 'function', name: 'f b' }] }, 'tools[0].name', /not a function name/],
			[{ input: 'x', tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', pattern: 'x' } } } }] },
				'tools[0].parameters', /properties\.a: 'pattern' is not supported/],
			[{ input: 'x', tool_choice: 'required' }, 'tool_choice', /no tools/],
			[{ input: 'x', tools: [{ type: 'function', name: 'f' }], tool_choice: { type: 'function', name: 'g' } }, 'tool_choice', /no tool is named 'g'/],
			[{ input: 'x', tool_choice: 'sometimes' }, 'tool_choice', /none, auto, required/],
			[{ input: 'x', text: { format: { type: 'json_schema', name: 'x', schema: { type: 'number', multipleOf: 2 } } } }, 'text.format.schema', /'multipleOf' is not supported/],
			[{ input: 'x', text: { format: { type: 'json_schema', name: 'x' } } }, 'text.format.schema', /JSON Schema object/],
			[{ input: 'x', text: { format: { type: 'xml' } } }, 'text.format.type', /'xml' is not text, json_object or json_schema/],
			[{ input: 'x', text: 'plain' }, 'text', /object/],
			[{}, 'input', /required/],
			[{ input: 5 }, 'input', /string or an array/],
			[{ input: [] }, 'input', /empty/],
			[{ input: ['x'] }, 'input[0]', /message item/],
			[{ input: [{ type: 'function_call_output', call_id: 'c', output: 'x' }] }, 'input[0].call_id', /no function_call item before it/],
			[{ input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }, 'input[0].call_id', /required/],
			[{ input: [{ type: 'function_call', call_id: 'c', name: 'f', arguments: '[1]' }] }, 'input[0].arguments', /JSON object/],
			[{ input: [{ type: 'reasoning', summary: [] }] }, 'input[0].type', /'reasoning' items are not supported/],
			[{ input: [{ role: 'tool', content: 'x' }] }, 'input[0].role', /not supported/],
			[{ input: [{ role: 'user' }] }, 'input[0].content', /required/],
			[{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content[0].type', /input_image/],
			[{ input: [{ role: 'user', content: [{ type: 'input_text' }] }] }, 'input[0].content[0].text', /string/],
			[{ input: 'x', instructions: 5 }, 'instructions', /string/],
			[{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens', /between/],
			[{ input: 'x', temperature: 3 }, 'temperature', /between/],
			[{ input: 'x', top_p: 1.5 }, 'top_p', /between/],
		];
		for (const [body, param, re] of cases) {
			const b = await openaiError(s, await post(s, '/v1/responses', body), 400, param);
			assert.match(b.error.message, re, `${JSON.stringify(body)}: ${b.error.message}`);
			assert.equal(b.error.type, 'invalid_request_error');
		}
		// empty tools and tool_choice none/auto are no tools at all
		const r = await post(s, '/v1/responses', { input: 'ECHO:ok', tools: [], tool_choice: 'auto', text: { format: { type: 'text' } }, store: false });
		assert.equal(r.status, 200, r.body);
		assert.equal(JSON.parse(r.body).output[0].content[0].text.trim(), 'ok');
		const g = await request(s, 'GET', '/v1/responses');
		assert.equal(g.status, 405);
		await healthy(s);
	});
});

describe('the server\'s --system prompt is counted as it is sent', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--system', 'You are the server default.'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('count_tokens, /apply-template and usage agree on the default system prompt', async () => {
		const messages = [{ role: 'user', content: 'ECHO:hi' }];
		const count = async (body) => JSON.parse((await post(s, '/v1/messages/count_tokens', body)).body).input_tokens;
		const none = await count({ messages });
		// the server's prompt stands in for a missing one: the same as sending it
		assert.equal(none, await count({ system: 'You are the server default.', messages }));
		assert.ok(none > (await count({ system: 'x', messages })));
		const m = JSON.parse((await post(s, '/v1/messages', { max_tokens: 4, messages })).body);
		assert.equal(m.usage.input_tokens, none);
		const { prompt } = JSON.parse((await post(s, '/apply-template', { messages })).body);
		assert.ok(prompt.includes('You are the server default.'), prompt);
		const r = JSON.parse((await post(s, '/v1/responses', { input: 'ECHO:hi' })).body);
		assert.equal(r.usage.input_tokens, none);
	});
});

describe('the server\'s sampling defaults (--temp, --top-k, ...)', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--temp', '0.25', '--top-k', '5', '--top-p', '0.5', '--repeat-penalty', '1.2'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('stand in for what a request does not set, in every dialect and in /props', async () => {
		const user = { messages: [{ role: 'user', content: 'ECHO:a' }] };
		let r = await post(s, '/v1/chat/completions', { ...user, seed: 101 });
		assert.equal(r.status, 200, r.body);
		assert.match(s.events(), /temp=0.25 top_k=5 seed=101\//);
		r = await post(s, '/v1/messages', { ...user, max_tokens: 4, seed: 102 });
		assert.equal(r.status, 200, r.body);
		assert.match(s.events(), /temp=0.25 top_k=5 seed=102\//);
		r = await post(s, '/v1/completions', { prompt: 'ECHO:b', seed: 103 });
		assert.equal(r.status, 200, r.body);
		assert.match(s.events(), /temp=0.25 top_k=5 seed=103\//);
		// a request's own values win
		r = await post(s, '/v1/chat/completions', { ...user, temperature: 1, top_k: 9, seed: 104 });
		assert.match(s.events(), /temp=1 top_k=9 seed=104\//);
		const p = JSON.parse((await request(s, 'GET', '/props')).body).default_generation_settings.params;
		assert.equal(p.temperature, 0.25);
		assert.equal(p.top_k, 5);
		assert.equal(p.top_p, 0.5);
		assert.ok(Math.abs(p.repeat_penalty - 1.2) < 1e-6, String(p.repeat_penalty));
	});
});

describe('a tokenizer that is not there', () => {
	let s;
	before(async () => {
		s = await startStack({ noTokenizer: true, frontend: ['--timeout-ms', '300'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('every endpoint that needs it answers 503 in its dialect, and the server goes on', async () => {
		let r = await request(s, 'GET', '/props');
		await llamaError(s, r, 503, /tokenizer has not answered/);
		assert.equal(JSON.parse(r.body).error.type, 'unavailable_error');
		for (const [p, body] of [
			['/tokenize', { content: 'x' }],
			['/detokenize', { tokens: [1] }],
			['/apply-template', { messages: [{ role: 'user', content: 'x' }] }],
		])
			await llamaError(s, await post(s, p, body), 503, /tokenizer/);
		r = await post(s, '/v1/messages/count_tokens', { messages: [{ role: 'user', content: 'x' }] });
		assert.equal(r.status, 503, r.body);
		assert.equal(JSON.parse(r.body).error.type, 'overloaded_error');
		r = await post(s, '/v1/responses', { input: 'x' });
		assert.equal(r.status, 503, r.body);
		assert.match(JSON.parse(r.body).error.message, /tokenizer/);
		// the models list needs no tokenizer; it names what it cannot know yet by leaving it out
		r = await request(s, 'GET', '/v1/models');
		assert.equal(r.status, 200);
		const m = JSON.parse(r.body).data[0];
		assert.equal(m.context_length, 2048);
		assert.equal(m.meta.n_vocab, undefined);
		await healthy(s);
	});
});

describe('count_tokens of a prompt longer than the context', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--max-seq', '48'], engine: ['--max-seq', '48'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('is the whole prompt: what usage kept plus what it dropped', async () => {
		const messages = [{ role: 'user', content: 'ECHO:ok\n' + 'the cat sat on the mat and '.repeat(20) }];
		const c = JSON.parse((await post(s, '/v1/messages/count_tokens', { messages })).body).input_tokens;
		assert.ok(c > 48, String(c));
		const u = JSON.parse((await post(s, '/v1/messages', { max_tokens: 8, messages })).body).usage;
		assert.ok(u.prompt_tokens_dropped > 0);
		assert.equal(u.input_tokens + u.prompt_tokens_dropped, c, JSON.stringify(u));
		const r = JSON.parse((await post(s, '/v1/responses', { input: messages, max_output_tokens: 8 })).body).usage;
		assert.equal(r.input_tokens + r.prompt_tokens_dropped, c, JSON.stringify(r));
	});
});

describe('a busy engine does not hold up the tokenizer\'s endpoints', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--parallel', '1', '--queue', '0'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('with every generation slot taken, chat is refused and the others answer', async () => {
		const req = http.request(s.base + '/v1/chat/completions', { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } });
		req.on('error', () => {});
		req.end(JSON.stringify({ messages: [{ role: 'user', content: '[noeos] [delay=50] busy' }], max_tokens: 400 }));
		await waitFor(() => /generate/.test(s.events()));
		const busy = await post(s, '/v1/responses', { input: 'ECHO:x' });
		assert.equal(busy.status, 503, busy.body);
		assert.equal(busy.headers['retry-after'], '1');
		assert.deepEqual(await tokenize(s, { content: 'Once' }), [403]);
		assert.equal(await detokenize(s, [403]), ' Once');
		const c = await post(s, '/v1/messages/count_tokens', { messages: [{ role: 'user', content: 'x' }] });
		assert.equal(c.status, 200, c.body);
		assert.equal((await post(s, '/apply-template', { messages: [{ role: 'user', content: 'x' }] })).status, 200);
		assert.equal((await request(s, 'GET', '/props')).status, 200);
		// the generation was running all along
		assert.doesNotMatch(s.events(), /^done /m);
		assert.match((await request(s, 'GET', '/metrics')).body, /anedvd_running 1/);
		req.destroy();
		await waitFor(() => /cancel/.test(s.events()));
		await healthy(s);
	});
});
