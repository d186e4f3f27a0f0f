// Generation options through the official openai client, on the real
// pipeline (anedvd-frontend + anedvd-tokenizer + anedvd-cpu-worker, emu)
// running stories260K: logprobs and top_logprobs (chat, streamed and not),
// legacy logprobs checked against llama.cpp's own logits for the same
// prompt (tests/data/models/stories260K.*), n choices with and without a
// seed, logit_bias making a token certain or impossible, stop as token ids.
// Skipped when the cpu-worker is not built.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { startStack } from '../http/harness.mjs';

const skip = process.env.CPU_WORKER_BIN ? false : 'anedvd-cpu-worker is not built';
const data = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'data', 'models');
const user = (content) => [{ role: 'user', content }];

// llama.cpp's logits for "Once upon a time" ([1,403,407,261,378]) and its
// greedy continuation: row n_prompt-1+k holds the logits that chose greedy_ids[k]
function reference() {
	const meta = JSON.parse(fs.readFileSync(path.join(data, 'stories260K.json'), 'utf8'));
	const buf = fs.readFileSync(path.join(data, 'stories260K.logits.bin'));
	const V = meta.n_vocab;
	const rows = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
	const logSoftmax = (r) => {
		const x = rows.subarray(r * V, (r + 1) * V);
		let max = -Infinity;
		for (const v of x) max = Math.max(max, v);
		let z = 0;
		for (const v of x) z += Math.exp(v - max);
		const lz = max + Math.log(z);
		return Array.from(x, (v) => v - lz);
	};
	return { meta, logSoftmax };
}

const ascending = (a) => a.every((v, i) => i === 0 || a[i - 1] >= v);

describe('generation options on the real engine', { skip }, () => {
	let s, oai;
	before(async () => {
		s = await startStack({ realEngine: true, frontend: ['--parallel', '4'] });
		oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});
	after(async () => {
		await s?.stop();
	});

	it('legacy logprobs are the log-softmax of the model logits, as llama.cpp computes them', async () => {
		const { meta, logSoftmax } = reference();
		const steps = 12;
		const r = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: steps, temperature: 0, logprobs: 5 });
		const c = r.choices[0];
		const lp = c.logprobs;
		assert.equal(r.usage.prompt_tokens, meta.prompt_ids.length);
		assert.equal(lp.tokens.length, steps);
		assert.equal(lp.tokens.join(''), c.text);
		// text_offset: where each token starts in the text
		let off = 0;
		for (let k = 0; k < steps; k++) {
			assert.equal(lp.text_offset[k], off);
			off += Buffer.byteLength(lp.tokens[k]);
		}
		let worst = 0;
		for (let k = 0; k < steps; k++) {
			const want = logSoftmax(meta.prompt_ids.length - 1 + k);
			const chosen = want[meta.greedy_ids[k]];
			worst = Math.max(worst, Math.abs(lp.token_logprobs[k] - chosen));
			// the five best of llama.cpp's row, by value
			const best = [...want].sort((a, b) => b - a).slice(0, 5);
			const got = Object.values(lp.top_logprobs[k]).sort((a, b) => b - a);
			assert.equal(got.length, 5, JSON.stringify(lp.top_logprobs[k]));
			for (let j = 0; j < 5; j++) assert.ok(Math.abs(got[j] - best[j]) < 0.02, `step ${k} rank ${j}: ${got[j]} vs ${best[j]}`);
			// greedy: the chosen token is the top one
			assert.equal(lp.token_logprobs[k], got[0]);
			assert.equal(lp.top_logprobs[k][lp.tokens[k]], lp.token_logprobs[k]);
		}
		// tests/data/models/tolerances.json: llama.cpp's logits within 0.05 of the exact ones;
		// the emu runs fp16 kernels; measured 0.0018, allowed 0.02
		assert.ok(worst < 0.02, `largest difference from llama.cpp ${worst}`);
		if (process.env.SHOW_LOGPROB_ERROR) console.log(`logprobs vs llama.cpp: max abs difference ${worst}`);
		// logprobs: 0 gives the chosen tokens' logprobs and empty alternatives
		const z = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 3, temperature: 0, logprobs: 0 });
		assert.deepEqual(z.choices[0].logprobs.top_logprobs, [{}, {}, {}]);
		assert.deepEqual(z.choices[0].logprobs.token_logprobs, lp.token_logprobs.slice(0, 3));
		// streamed: the chunks' logprobs add up to the whole reply's
		const stream = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: steps, temperature: 0, logprobs: 5, stream: true });
		const tokens = [], lps = [], offs = [];
		let text = '';
		for await (const ch of stream) {
			text += ch.choices[0]?.text ?? '';
			const l = ch.choices[0]?.logprobs;
			if (l) tokens.push(...l.tokens), lps.push(...l.token_logprobs), offs.push(...l.text_offset);
		}
		assert.equal(text, c.text);
		assert.deepEqual(tokens, lp.tokens);
		assert.deepEqual(lps, lp.token_logprobs);
		assert.deepEqual(offs, lp.text_offset);
	});

	it('chat logprobs and top_logprobs, streamed and not', async () => {
		const req = { model: 'm', messages: user('Tell me a story about a cat.'), max_tokens: 16, temperature: 0, logprobs: true, top_logprobs: 4 };
		const r = await oai.chat.completions.create(req);
		const c = r.choices[0];
		const content = c.logprobs.content;
		assert.equal(content.length, r.usage.completion_tokens);
		assert.equal(content.map((t) => t.token).join(''), c.message.content);
		for (const t of content) {
			assert.deepEqual(t.bytes, [...Buffer.from(t.token)]);
			assert.ok(t.logprob <= 0);
			assert.equal(t.top_logprobs.length, 4);
			assert.ok(ascending(t.top_logprobs.map((a) => a.logprob)), JSON.stringify(t.top_logprobs));
			// temperature 0 and no penalties: the chosen token has the top logprob
			assert.equal(t.top_logprobs[0].token, t.token);
			assert.equal(t.top_logprobs[0].logprob, t.logprob);
			assert.ok(t.top_logprobs.reduce((a, x) => a + Math.exp(x.logprob), 0) <= 1.000001);
			for (const a of t.top_logprobs) assert.deepEqual(a.bytes, [...Buffer.from(a.token)]);
		}
		// the stream's chunks carry the same entries, in order
		const stream = await oai.chat.completions.create({ ...req, stream: true });
		const got = [];
		let text = '';
		for await (const ch of stream) {
			text += ch.choices[0]?.delta?.content ?? '';
			if (ch.choices[0]?.logprobs?.content) got.push(...ch.choices[0].logprobs.content);
		}
		assert.equal(text, c.message.content);
		assert.deepEqual(got, content);
		// and the SDK's stream helper rebuilds them
		const final = await oai.chat.completions.stream(req).finalChatCompletion();
		assert.deepEqual(final.choices[0].logprobs.content, content);
		// without top_logprobs: the chosen tokens only; without logprobs: null
		const plain = await oai.chat.completions.create({ ...req, top_logprobs: undefined });
		assert.deepEqual(plain.choices[0].logprobs.content.map((t) => [t.token, t.logprob, t.top_logprobs.length]),
			content.map((t) => [t.token, t.logprob, 0]));
		const none = await oai.chat.completions.create({ ...req, logprobs: undefined, top_logprobs: undefined });
		assert.equal(none.choices[0].logprobs, null);
		assert.equal(none.choices[0].message.content, c.message.content);
	});

	it('logprobs stop where a stop sequence cuts the text', async () => {
		const r = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 24, temperature: 0, logprobs: 1, stop: ' Lily' });
		const c = r.choices[0];
		assert.equal(c.text, ', there was a little girl named');
		assert.equal(c.finish_reason, 'stop');
		assert.equal(c.logprobs.tokens.join(''), c.text);
	});

	it('n choices: indexed, different from each other, and with a seed the same every time', async () => {
		const req = { model: 'm', messages: user('Tell me a story.'), max_tokens: 24, temperature: 1, n: 4, seed: 42, logprobs: true };
		const a = await oai.chat.completions.create(req);
		assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2, 3]);
		const texts = a.choices.map((c) => c.message.content);
		assert.equal(new Set(texts).size, 4, JSON.stringify(texts));
		// usage counts the tokens of every choice; the prompt once
		assert.equal(a.usage.completion_tokens, a.choices.reduce((n, c) => n + c.logprobs.content.length, 0));
		for (const c of a.choices) assert.equal(c.logprobs.content.map((t) => t.token).join(''), c.message.content);
		const b = await oai.chat.completions.create(req);
		assert.deepEqual(b.choices.map((c) => c.message.content), texts);
		// choice 0 is what n = 1 gives with the same seed
		const one = await oai.chat.completions.create({ ...req, n: 1 });
		assert.equal(one.choices[0].message.content, texts[0]);
		// streamed: the SDK's helper puts each choice together from its index
		const final = await oai.chat.completions.stream(req).finalChatCompletion();
		assert.deepEqual(final.choices.map((c) => c.message.content), texts);
		assert.deepEqual(final.choices.map((c) => c.finish_reason), a.choices.map((c) => c.finish_reason));
		// without a seed: n different choices, and not the same as last time
		const u = await oai.chat.completions.create({ ...req, seed: undefined, n: 3 });
		const ut = u.choices.map((c) => c.message.content);
		assert.equal(new Set(ut).size, 3, JSON.stringify(ut));
		// legacy completions, 8 choices (more than the engine runs at once), with logprobs
		const l = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 10, temperature: 1, n: 8, seed: 7, logprobs: 1 });
		assert.deepEqual(l.choices.map((c) => c.index), [0, 1, 2, 3, 4, 5, 6, 7]);
		assert.ok(new Set(l.choices.map((c) => c.text)).size >= 6);
		for (const c of l.choices) assert.equal(c.logprobs.tokens.join(''), c.text);
		assert.equal(l.usage.completion_tokens, l.choices.reduce((n, c) => n + c.logprobs.tokens.length, 0));
		const ls = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 10, temperature: 1, n: 8, seed: 7, stream: true });
		const st = Array(8).fill('');
		for await (const ch of ls) for (const c of ch.choices) st[c.index] += c.text;
		assert.deepEqual(st, l.choices.map((c) => c.text));
	});

	it('logit_bias makes a token certain or impossible; logprobs stay the model\'s own', async () => {
		// 261 is " a" in this vocabulary, 432 is "," (tests/data/models/stories260K.json)
		const base = { model: 'm', prompt: 'Once upon a time', max_tokens: 8 };
		const sure = await oai.completions.create({ ...base, temperature: 1, seed: 3, logit_bias: { 261: 100 }, logprobs: 1 });
		assert.equal(sure.choices[0].text, ' a'.repeat(8));
		const raw = await oai.completions.create({ ...base, temperature: 0, max_tokens: 1, logprobs: 5 });
		assert.equal(raw.choices[0].text, ',');
		const ban = await oai.completions.create({ ...base, temperature: 0, max_tokens: 1, logprobs: 5, logit_bias: { 432: -100 } });
		const t = ban.choices[0].logprobs;
		// the next best token is picked, with the logprob it has without the bias
		const ranked = Object.entries(raw.choices[0].logprobs.top_logprobs[0]).sort((a, b) => b[1] - a[1]);
		assert.equal(ban.choices[0].text, ranked[1][0]);
		assert.equal(t.token_logprobs[0], ranked[1][1]);
		assert.deepEqual(t.top_logprobs[0], raw.choices[0].logprobs.top_logprobs[0]);
		// sampled, the banned token never comes
		const many = await oai.completions.create({ ...base, temperature: 1.5, max_tokens: 1, n: 8, seed: 11, logit_bias: { 432: -100 } });
		for (const c of many.choices) assert.notEqual(c.text, ',');
		// chat too
		const chat = await oai.chat.completions.create({ model: 'm', messages: user('Hi'), max_tokens: 5, temperature: 0, logit_bias: { 261: 100 } });
		assert.equal(chat.choices[0].message.content, ' a'.repeat(5));
	});

	it('stop as token ids ends the choice before that token', async () => {
		// the greedy continuation is 432 383 286 ... (", there was")
		const r = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, stop: [286] });
		assert.equal(r.choices[0].text, ', there');
		assert.equal(r.choices[0].finish_reason, 'stop');
		assert.equal(r.usage.completion_tokens, 2);
		// with strings beside them; streamed the same
		const mixed = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 10, temperature: 0, stop: [' girl', 286] });
		assert.equal(mixed.choices[0].text, ', there');
		const chat = await oai.chat.completions.stream({ model: 'm', messages: user('Hi'), max_tokens: 6, temperature: 0, logit_bias: { 261: 100 }, stop: [261] }).finalChatCompletion();
		assert.equal(chat.choices[0].message.content ?? '', '');
		assert.equal(chat.choices[0].finish_reason, 'stop');
	});
});
