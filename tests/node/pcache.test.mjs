// The prefix cache through the official clients, on the real cpu-worker
// (emu backend, stories260K, its default --cache-mem): a repeated request
// reports its cached prompt tokens (OpenAI usage.prompt_tokens_details,
// Anthropic usage.cache_read_input_tokens, the timings object) and gives
// the same greedy text as the first; /metrics counts the lookups, hits and
// bytes; an Anthropic system block beginning "x-anthropic-billing-header:"
// is not part of the prompt (the count and the cache ignore it).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { request, startStack } from '../http/harness.mjs';

const skip = process.env.CPU_WORKER_BIN ? false : 'anedvd-cpu-worker is not built';
const BLOCK = 16;
const story = (who) =>
	`Once upon a time there was a little ${who} who lived in a big house with a red door. ` +
	'Every day she went to the park to play with her friends and look at the birds in the trees.';

describe('prefix cache on the real engine', { skip }, () => {
	let s, oai, ant;
	before(async () => {
		s = await startStack({ realEngine: true, frontend: ['--parallel', '2'] });
		oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		ant = new Anthropic({ baseURL: s.base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});
	after(async () => {
		await s?.stop();
	});

	it('openai: a repeated request reports cached tokens and gives the same greedy text', async () => {
		const req = { model: 'm', messages: [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: story('girl') }], max_tokens: 24, temperature: 0 };
		const a = await oai.chat.completions.create(req);
		const b = await oai.chat.completions.create(req);
		const P = a.usage.prompt_tokens;
		assert.ok(P > 2 * BLOCK, `prompt of ${P} tokens`);
		assert.equal(a.usage.prompt_tokens_details.cached_tokens, 0);
		const c = b.usage.prompt_tokens_details.cached_tokens;
		// whole blocks at least, never the last prompt token (its logits are needed)
		assert.ok(c >= BLOCK * Math.floor((P - 1) / BLOCK) && c <= P - 1, `cached ${c} of ${P}`);
		assert.equal(b.timings.cached_tokens, c);
		assert.equal(b.usage.prompt_tokens, P);
		assert.equal(b.choices[0].message.content, a.choices[0].message.content);
		// a streamed request with the same prompt: the usage chunk says it too
		const stream = await oai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
		let text = '', usage = null;
		for await (const ch of stream) {
			if (ch.choices[0]?.delta?.content) text += ch.choices[0].delta.content;
			if (ch.usage) usage = ch.usage;
		}
		assert.equal(text, a.choices[0].message.content);
		assert.ok(usage.prompt_tokens_details.cached_tokens >= c);
	});

	it('anthropic: cache_read_input_tokens on a repeat, input_tokens the rest', async () => {
		const req = { model: 'claude-x', system: 'Tell a story.', messages: [{ role: 'user', content: story('cat') }], max_tokens: 24, temperature: 0 };
		const a = await ant.messages.create(req);
		const b = await ant.messages.create(req);
		const total = (u) => u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens;
		const counted = await ant.messages.countTokens({ model: req.model, system: req.system, messages: req.messages });
		assert.equal(total(a.usage), counted.input_tokens);
		assert.equal(total(b.usage), counted.input_tokens);
		assert.ok(b.usage.cache_read_input_tokens >= BLOCK * Math.floor((counted.input_tokens - 1) / BLOCK), JSON.stringify(b.usage));
		assert.ok(b.usage.input_tokens >= 1);
		assert.equal(b.usage.cache_creation_input_tokens, 0);
		assert.equal(b.content[0].text, a.content[0].text);
	});

	it('anthropic: a billing-header system block is not prompt', async () => {
		const messages = [{ role: 'user', content: story('dog') }];
		const hdr = (v) => ({ type: 'text', text: `x-anthropic-billing-header: cc_version=1.0.${v}; cc_entrypoint=cli; cch=${v}abc;` });
		const plain = await ant.messages.countTokens({ model: 'claude-x', system: 'Be kind.', messages });
		const withHdr = await ant.messages.countTokens({ model: 'claude-x', system: [hdr(1), { type: 'text', text: 'Be kind.' }], messages });
		assert.equal(withHdr.input_tokens, plain.input_tokens);
		// only a header: as if there were no system prompt
		const none = await ant.messages.countTokens({ model: 'claude-x', messages });
		const onlyHdr = await ant.messages.countTokens({ model: 'claude-x', system: [hdr(2)], messages });
		assert.equal(onlyHdr.input_tokens, none.input_tokens);
		// a block that merely mentions it stays
		const mention = await ant.messages.countTokens({ model: 'claude-x', system: [{ type: 'text', text: 'Be kind. x-anthropic-billing-header: 1' }], messages });
		assert.ok(mention.input_tokens > plain.input_tokens);
		// the header changes on every request: the second still hits
		const a = await ant.messages.create({ model: 'claude-x', system: [hdr(3), { type: 'text', text: 'Be kind.' }], messages, max_tokens: 8, temperature: 0 });
		const b = await ant.messages.create({ model: 'claude-x', system: [hdr(4), { type: 'text', text: 'Be kind.' }], messages, max_tokens: 8, temperature: 0 });
		assert.ok(b.usage.cache_read_input_tokens >= BLOCK * Math.floor((plain.input_tokens - 1) / BLOCK), JSON.stringify(b.usage));
		assert.equal(b.content[0].text, a.content[0].text);
	});

	it('/metrics: lookups, hit tokens, bytes held and the bound', async () => {
		const r = await request(s, 'GET', '/metrics');
		const v = (name) => {
			const m = r.body.match(new RegExp(`^${name} (\\d+)$`, 'm'));
			assert.ok(m, `${name} in /metrics`);
			return Number(m[1]);
		};
		assert.ok(v('anedvd_prefix_cache_lookups_total') >= 6);
		assert.ok(v('anedvd_prefix_cache_hit_tokens_total') >= 3 * BLOCK);
		assert.ok(v('anedvd_prompt_cached_tokens_total') >= 3 * BLOCK);
		assert.ok(v('anedvd_prefix_cache_bytes') > 0);
		assert.ok(v('anedvd_prefix_cache_limit_bytes') >= v('anedvd_prefix_cache_bytes'));
		assert.ok(v('anedvd_prefix_cache_blocks') > 0);
		assert.equal(typeof v('anedvd_prefix_cache_evictions_total'), 'number');
	});
});
