// The official clients against the real pipeline: anedvd-frontend +
// anedvd-tokenizer + anedvd-cpu-worker (emu backend) running stories260K.
// Greedy output is the model's own story; stop sequences cut it; a seed
// makes sampling repeatable. Skipped when the cpu-worker is not built.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { startStack } from '../http/harness.mjs';

const skip = process.env.CPU_WORKER_BIN ? false : 'anedvd-cpu-worker is not built';

describe('official SDKs on the real engine', { skip }, () => {
	let s, oai, ant;
	before(async () => {
		s = await startStack({ realEngine: true, frontend: ['--parallel', '4'] });
		oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		ant = new Anthropic({ baseURL: s.base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});
	after(async () => {
		await s?.stop();
	});

	it('greedy completion continues the story; stop and max_tokens cut it', async () => {
		let r = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 24, temperature: 0 });
		const text = r.choices[0].text;
		assert.match(text, /^, there was a little girl named Lily/);
		assert.equal(r.choices[0].finish_reason, 'length');
		assert.equal(r.usage.completion_tokens, 24);
		assert.ok(r.timings.decode_tokens_per_s > 0);
		r = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 24, temperature: 0, stop: ' Lily' });
		assert.equal(r.choices[0].text, ', there was a little girl named');
		assert.equal(r.choices[0].finish_reason, 'stop');
		const stream = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 24, temperature: 0, stream: true });
		let streamed = '';
		for await (const c of stream) streamed += c.choices[0]?.text ?? '';
		assert.equal(streamed, text);
	});

	it('chat: streamed and whole replies agree; a seed repeats a sampled reply', async () => {
		const req = { model: 'm', messages: [{ role: 'user', content: 'Tell me a story about a dog.' }], max_tokens: 30, temperature: 0 };
		const whole = await oai.chat.completions.create(req);
		const final = await oai.chat.completions.stream(req).finalChatCompletion();
		assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
		assert.ok(whole.choices[0].message.content.length > 0);
		const sampled = { ...req, temperature: 1, seed: 1234 };
		const a = await oai.chat.completions.create(sampled);
		const b = await oai.chat.completions.create(sampled);
		assert.equal(a.choices[0].message.content, b.choices[0].message.content);
	});

	it('anthropic: messages, stream helper, stop_sequences', async () => {
		const req = { model: 'm', max_tokens: 30, temperature: 0, messages: [{ role: 'user', content: 'Tell me a story.' }] };
		const r = await ant.messages.create(req);
		assert.ok(r.content[0].text.length > 0);
		assert.ok(['end_turn', 'max_tokens'].includes(r.stop_reason));
		const final = await ant.messages.stream(req).finalMessage();
		assert.equal(final.content[0].text, r.content[0].text);
		const words = r.content[0].text.trim().split(/\s+/);
		const stop = words[Math.min(3, words.length - 1)];
		const cut = await ant.messages.create({ ...req, stop_sequences: [stop] });
		assert.equal(cut.stop_reason, 'stop_sequence');
		assert.equal(cut.stop_sequence, stop);
		assert.ok(!cut.content[0].text.includes(stop));
		assert.ok(r.content[0].text.startsWith(cut.content[0].text));
	});
});
