// The official clients (openai, @anthropic-ai/sdk, versions pinned by
// package-lock.json) against a live anedvd-frontend + anedvd-tokenizer
// (stories260K) + fake engine: every endpoint, streaming and not, the
// streaming helpers that rebuild a whole reply from the events, stop
// sequences, max_tokens, determinism and errors as the clients raise them.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { startStack } from '../http/harness.mjs';

const user = (content) => [{ role: 'user', content }];

describe('official SDKs', () => {
	let s, oai, ant;
	before(async () => {
		// an engine that refuses ([fail]) is asked again until the deadline, then 503
		s = await startStack({ frontend: ['--parallel', '2', '--deadline-ms', '2000'] });
		oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 20000 });
		ant = new Anthropic({ baseURL: s.base, apiKey: 'unused', maxRetries: 0, timeout: 20000 });
	});
	after(async () => {
		await s?.stop();
	});

	it('openai: models.list', async () => {
		const ids = [];
		for await (const m of oai.models.list()) ids.push(m.id);
		assert.deepEqual(ids, ['stories260K']);
	});

	it('openai: chat.completions.create', async () => {
		const r = await oai.chat.completions.create({ model: 'stories260K', messages: user('ECHO:Hello from the SDK.') });
		assert.equal(r.object, 'chat.completion');
		assert.equal(r.choices[0].message.role, 'assistant');
		assert.equal(r.choices[0].message.content.trim(), 'Hello from the SDK.');
		assert.equal(r.choices[0].finish_reason, 'stop');
		assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
		assert.equal(typeof r.timings.decode_tokens_per_s, 'number');
	});

	it('openai: chat stream with usage, and the stream helper', async () => {
		const stream = await oai.chat.completions.create({
			model: 'stories260K',
			messages: [{ role: 'system', content: 'Be brief.' }, ...user('ECHO:Streaming works fine. [delay=2]')],
			stream: true,
			stream_options: { include_usage: true },
		});
		let text = '', finish = null, usage = null, first = null;
		for await (const c of stream) {
			first ??= c;
			if (c.choices[0]?.delta?.content) text += c.choices[0].delta.content;
			if (c.choices[0]?.finish_reason) finish = c.choices[0].finish_reason;
			if (c.usage && c.choices.length === 0) usage = c.usage;
		}
		assert.equal(first.choices[0].delta.role, 'assistant');
		assert.equal(text.trim(), 'Streaming works fine. [delay=2]');
		assert.equal(finish, 'stop');
		assert.ok(usage.completion_tokens > 0);

		const helper = oai.chat.completions.stream({ model: 'stories260K', messages: user('ECHO:Helper text.') });
		const final = await helper.finalChatCompletion();
		assert.equal(final.choices[0].message.content.trim(), 'Helper text.');
		assert.equal(final.choices[0].finish_reason, 'stop');
	});

	it('openai: legacy completions, stream and not', async () => {
		const r = await oai.completions.create({ model: 'stories260K', prompt: 'ECHO:Legacy prompt.', max_tokens: 30 });
		assert.equal(r.choices[0].text.trim(), 'Legacy prompt.');
		assert.equal(r.choices[0].finish_reason, 'stop');
		const stream = await oai.completions.create({ model: 'stories260K', prompt: 'ECHO:Legacy stream.', stream: true });
		let text = '';
		for await (const c of stream) text += c.choices[0]?.text ?? '';
		assert.equal(text.trim(), 'Legacy stream.');
	});

	it('openai: stop sequences and max_tokens', async () => {
		const msgs = user('ECHO:Once upon a time there was a cat. [delay=2]');
		let r = await oai.chat.completions.create({ model: 'm', messages: msgs, stop: ['a time'] });
		assert.equal(r.choices[0].message.content, ' Once upon ');
		assert.equal(r.choices[0].finish_reason, 'stop');
		const stream = await oai.chat.completions.create({ model: 'm', messages: msgs, stop: 'there', stream: true });
		let text = '';
		for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
		assert.equal(text, ' Once upon a time ');
		r = await oai.chat.completions.create({ model: 'm', messages: user('a story'), max_tokens: 5 });
		assert.equal(r.choices[0].finish_reason, 'length');
		assert.equal(r.usage.completion_tokens, 5);
	});

	it('openai: determinism', async () => {
		const req = { model: 'm', messages: user('tell a story'), max_tokens: 20, temperature: 0.9, seed: 7 };
		const a = await oai.chat.completions.create(req);
		const b = await oai.chat.completions.create(req);
		assert.equal(a.choices[0].message.content, b.choices[0].message.content);
	});

	it('openai: errors surface as the client\'s error classes', async () => {
		await assert.rejects(oai.chat.completions.create({ model: 'm', messages: user('x'), temperature: 9 }), (e) => {
			assert.ok(e instanceof OpenAI.BadRequestError, e.constructor.name);
			assert.equal(e.status, 400);
			assert.equal(e.param, 'temperature');
			return true;
		});
		await assert.rejects(oai.chat.completions.create({ model: 'm', messages: user('[fail] x') }), (e) => {
			assert.ok(e instanceof OpenAI.APIError);
			assert.equal(e.status, 503);
			return true;
		});
		const stream = await oai.chat.completions.create({ model: 'm', messages: user('[fail-after=2] x'), stream: true });
		await assert.rejects(
			(async () => {
				for await (const c of stream) void c;
			})(),
			(e) => e instanceof OpenAI.APIError && /fail/.test(e.message),
		);
	});

	it('anthropic: messages.create', async () => {
		const r = await ant.messages.create({
			model: 'stories260K',
			max_tokens: 64,
			system: 'You are kind.',
			messages: user('ECHO:Hello from Anthropic.'),
		});
		assert.equal(r.type, 'message');
		assert.equal(r.role, 'assistant');
		assert.equal(r.content[0].type, 'text');
		assert.equal(r.content[0].text.trim(), 'Hello from Anthropic.');
		assert.equal(r.stop_reason, 'end_turn');
		assert.equal(r.stop_sequence, null);
		assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
	});

	it('anthropic: raw event stream and the stream helper', async () => {
		const stream = await ant.messages.create({
			model: 'stories260K',
			max_tokens: 64,
			messages: user('ECHO:Events in order. [delay=2]'),
			stream: true,
		});
		const types = [];
		let text = '';
		for await (const ev of stream) {
			types.push(ev.type);
			if (ev.type === 'content_block_delta') text += ev.delta.text;
		}
		assert.equal(types[0], 'message_start');
		assert.equal(types.at(-1), 'message_stop');
		assert.equal(text.trim(), 'Events in order. [delay=2]');

		const helper = ant.messages.stream({ model: 'stories260K', max_tokens: 64, messages: user('ECHO:Helper message.') });
		let streamed = '';
		helper.on('text', (t) => (streamed += t));
		const final = await helper.finalMessage();
		assert.equal(final.content[0].text.trim(), 'Helper message.');
		assert.equal(streamed, final.content[0].text);
		assert.equal(final.stop_reason, 'end_turn');
		assert.ok(final.usage.output_tokens > 0);
	});

	it('anthropic: stop_sequences and max_tokens', async () => {
		const msgs = user('ECHO:Once upon a time there was a dog. [delay=2]');
		let r = await ant.messages.create({ model: 'm', max_tokens: 64, messages: msgs, stop_sequences: ['there'] });
		assert.equal(r.content[0].text, ' Once upon a time ');
		assert.equal(r.stop_reason, 'stop_sequence');
		assert.equal(r.stop_sequence, 'there');
		const helper = ant.messages.stream({ model: 'm', max_tokens: 64, messages: msgs, stop_sequences: ['zz', 'a dog'] });
		const final = await helper.finalMessage();
		assert.equal(final.content[0].text, ' Once upon a time there was ');
		assert.equal(final.stop_reason, 'stop_sequence');
		assert.equal(final.stop_sequence, 'a dog');
		r = await ant.messages.create({ model: 'm', max_tokens: 4, messages: user('a story') });
		assert.equal(r.stop_reason, 'max_tokens');
		assert.equal(r.usage.output_tokens, 4);
	});

	it('anthropic: determinism and errors', async () => {
		const req = { model: 'm', max_tokens: 20, messages: user('tell a story'), temperature: 0.9 };
		const a = await ant.messages.create(req);
		const b = await ant.messages.create(req);
		assert.equal(a.content[0].text, b.content[0].text);
		await assert.rejects(ant.messages.create({ model: 'm', max_tokens: 0, messages: user('x') }), (e) => {
			assert.ok(e instanceof Anthropic.BadRequestError, e.constructor.name);
			assert.equal(e.status, 400);
			return true;
		});
		const stream = await ant.messages.create({ model: 'm', max_tokens: 50, messages: user('[fail-after=2] x'), stream: true });
		await assert.rejects(
			(async () => {
				for await (const ev of stream) void ev;
			})(),
			(e) => e instanceof Anthropic.APIError,
		);
	});

	it('anthropic: models.list', async () => {
		const ids = [];
		for await (const m of ant.models.list()) ids.push(m.id);
		assert.deepEqual(ids, ['stories260K']);
	});
});
