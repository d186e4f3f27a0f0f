// Speculative decoding through the official clients, on the real cpu-worker
// (emu backend, stories260K; 1-grams and every draft in full, so the drafts
// come at once): a request reports its drafts in the timings object (by n
// too), gives the same greedy text with `speculative: false` in the body
// (OpenAI chat, legacy completions and Anthropic messages, streamed or not,
// cut by a stop sequence), which then drafts nothing; /metrics adds the
// drafts up by n; /props says speculative decoding is on.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { request, startStack } from '../http/harness.mjs';

const skip = process.env.CPU_WORKER_BIN ? false : 'anedvd-cpu-worker is not built';
const text =
	'Once upon a time there was a little girl who lived in a big house with a red door. ' +
	'Once upon a time there was a little girl who lived in a big house with a red door. Once upon a time';

describe('speculative decoding on the real engine', { skip }, () => {
	let s, oai, ant;
	before(async () => {
		s = await startStack({ realEngine: true, engine: ['--ngram-min', '1', '--draft-cost', '0'] });
		oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		ant = new Anthropic({ baseURL: s.base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});
	after(async () => {
		await s?.stop();
	});

	const drafted = (t) => t.speculative.drafted;

	it('openai chat: drafts in the timings, the same text with speculative: false', async () => {
		const req = { model: 'm', messages: [{ role: 'user', content: text }], max_tokens: 40, temperature: 0 };
		const on = await oai.chat.completions.create(req);
		const off = await oai.chat.completions.create({ ...req, speculative: false });
		const sp = on.timings.speculative;
		assert.ok(sp.drafted > 0 && sp.accepted <= sp.drafted && sp.steps > 0, JSON.stringify(sp));
		assert.equal(sp.acceptance, sp.accepted / sp.drafted);
		const byN = Object.values(sp.by_n);
		assert.equal(byN.reduce((a, b) => a + b.drafted, 0), sp.drafted);
		assert.equal(byN.reduce((a, b) => a + b.accepted, 0), sp.accepted);
		assert.equal(drafted(off.timings), 0);
		assert.equal(off.choices[0].message.content, on.choices[0].message.content);
		assert.equal(off.usage.completion_tokens, on.usage.completion_tokens);
		// streamed, and speculative: true is accepted as well
		const st = await oai.chat.completions.create({ ...req, speculative: true, stream: true });
		let streamed = '';
		for await (const ch of st) streamed += ch.choices[0]?.delta?.content ?? '';
		assert.equal(streamed, on.choices[0].message.content);
	});

	it('openai: a stop sequence cuts the reply at the same place either way', async () => {
		const req = { model: 'm', messages: [{ role: 'user', content: text }], max_tokens: 40, temperature: 0 };
		const full = (await oai.chat.completions.create(req)).choices[0].message.content;
		const stop = full.slice(Math.floor(full.length / 2), Math.floor(full.length / 2) + 6);
		const on = await oai.chat.completions.create({ ...req, stop: [stop] });
		const off = await oai.chat.completions.create({ ...req, stop: [stop], speculative: false });
		assert.equal(on.choices[0].finish_reason, 'stop');
		assert.equal(on.choices[0].message.content, off.choices[0].message.content);
		assert.ok(full.startsWith(on.choices[0].message.content) && !on.choices[0].message.content.includes(stop));
	});

	it('openai: a seeded sampled request and n choices are the same either way', async () => {
		const req = { model: 'm', messages: [{ role: 'user', content: text }], max_tokens: 32, temperature: 0.9, seed: 5, n: 2 };
		const on = await oai.chat.completions.create(req);
		const off = await oai.chat.completions.create({ ...req, speculative: false });
		assert.deepEqual(on.choices.map((c) => c.message.content), off.choices.map((c) => c.message.content));
	});

	it('legacy completions with logprobs: the same tokens and logprobs', async () => {
		const req = { model: 'm', prompt: text, max_tokens: 30, temperature: 0, logprobs: 2 };
		const on = await oai.completions.create(req);
		const off = await oai.completions.create({ ...req, speculative: false });
		assert.equal(off.choices[0].text, on.choices[0].text);
		assert.deepEqual(off.choices[0].logprobs.token_logprobs, on.choices[0].logprobs.token_logprobs);
		assert.ok(drafted(on.timings) > 0);
	});

	it('anthropic: speculative: false is accepted, the text is the same', async () => {
		const req = { model: 'claude-x', messages: [{ role: 'user', content: text }], max_tokens: 40, temperature: 0 };
		const on = await ant.messages.create(req);
		const off = await ant.messages.create({ ...req, speculative: false });
		assert.equal(off.content[0].text, on.content[0].text);
		assert.ok(drafted(on.timings) > 0);
		assert.equal(drafted(off.timings), 0);
	});

	it('/metrics adds the drafts up by n; /props says it is on', async () => {
		const r = await request(s, 'GET', '/metrics');
		const sum = (name) => {
			let t = 0, k = 0;
			for (const m of r.body.matchAll(new RegExp(`^${name}\\{n="(\\d+)"\\} (\\d+)$`, 'gm'))) {
				t += Number(m[2]);
				k++;
			}
			assert.ok(k > 0, `${name} in /metrics`);
			return t;
		};
		const d = sum('anedvd_spec_drafted_tokens_total'), a = sum('anedvd_spec_accepted_tokens_total');
		assert.ok(d > 0 && a > 0 && a <= d, `${a} of ${d}`);
		assert.match(r.body, /^anedvd_spec_steps_total [1-9]\d*$/m);
		const all = Number(r.body.match(/^anedvd_spec_acceptance_ratio\{n="all"\} ([\d.]+)$/m)[1]);
		assert.ok(Math.abs(all - a / d) < 1e-6, `${all} vs ${a / d}`);
		const props = JSON.parse((await request(s, 'GET', '/props')).body);
		assert.equal(props.default_generation_settings.speculative, true);
	});
});
