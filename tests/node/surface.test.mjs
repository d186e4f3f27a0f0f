// The official clients on the endpoints beside chat and messages: the
// Anthropic client's messages.countTokens against the usage of the same
// messages.create, the openai client's responses.create (stream and not,
// the output_text convenience, the event order), responses.stream, and
// models list/retrieve in both clients. First against the fake engine, then
// (when it is built) the real cpu-worker on stories260K, where the count is
// compared with the prompt the engine itself reports.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { startStack } from '../http/harness.mjs';

const user = (content) => [{ role: 'user', content }];

const EVENT_ORDER = (n) => [
	'response.created',
	'response.in_progress',
	'response.output_item.added',
	'response.content_part.added',
	...Array(n).fill('response.output_text.delta'),
	'response.output_text.done',
	'response.content_part.done',
	'response.output_item.done',
	'response.completed',
];

async function countEqualsUsage(ant, req) {
	const c = await ant.messages.countTokens(req);
	const m = await ant.messages.create({ ...req, max_tokens: 4 });
	assert.equal(typeof c.input_tokens, 'number');
	assert.ok(c.input_tokens > 0);
	// the three input fields of the usage add up to the prompt (the engine's
	// prefix cache may have read some of it)
	const u = m.usage;
	assert.equal(c.input_tokens, u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0), JSON.stringify(req));
	return c.input_tokens;
}

const conversations = [
	{ model: 'claude-x', messages: user('Hello there.') },
	{ model: 'claude-x', system: 'You are a kind storyteller.', messages: user('Tell me a story.') },
	{
		model: 'claude-x',
		system: [{ type: 'text', text: 'Be brief.' }, { type: 'text', text: 'Be kind.' }],
		messages: [
			{ role: 'user', content: 'Once upon a time' },
			{ role: 'assistant', content: [{ type: 'text', text: ' there was a cat.' }] },
			{ role: 'user', content: [{ type: 'text', text: 'And then?' }, { type: 'text', text: 'Go on.' }] },
		],
	},
];

describe('official SDKs: count_tokens, Responses, models', () => {
	let s, oai, ant;
	before(async () => {
		s = await startStack({ frontend: ['--parallel', '2'] });
		oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 20000 });
		ant = new Anthropic({ baseURL: s.base, apiKey: 'unused', maxRetries: 0, timeout: 20000 });
	});
	after(async () => {
		await s?.stop();
	});

	it('anthropic: messages.countTokens is the usage.input_tokens of the same request', async () => {
		const counts = [];
		for (const req of conversations) counts.push(await countEqualsUsage(ant, req));
		// a system prompt and more turns count
		assert.ok(counts[1] > counts[0] && counts[2] > counts[1], counts.join());
		await assert.rejects(ant.messages.countTokens({ model: 'x', messages: [] }), (e) => {
			assert.ok(e instanceof Anthropic.BadRequestError, e.constructor.name);
			assert.match(e.message, /messages/);
			return true;
		});
		// the server still answers
		await countEqualsUsage(ant, conversations[0]);
	});

	it('openai: responses.create, output_text and usage', async () => {
		const r = await oai.responses.create({ model: 'gpt-4o', instructions: 'Be brief.', input: 'ECHO:Hello from the Responses API.', max_output_tokens: 50 });
		assert.equal(r.object, 'response');
		assert.equal(r.status, 'completed');
		assert.equal(r.model, 'stories260K');
		assert.equal(r.output_text.trim(), 'Hello from the Responses API.');
		assert.equal(r.output[0].content[0].text, r.output_text);
		assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
		assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
		const items = await oai.responses.create({
			model: 'gpt-4o',
			input: [
				{ role: 'system', content: 'Be brief.' },
				{ role: 'user', content: [{ type: 'input_text', text: 'ECHO:Hello from the Responses API.' }] },
			],
		});
		assert.equal(items.output_text, r.output_text);
		assert.equal(items.usage.input_tokens, r.usage.input_tokens);
		const cut = await oai.responses.create({ model: 'm', input: 'a story [noeos]', max_output_tokens: 4 });
		assert.equal(cut.status, 'incomplete');
		assert.equal(cut.incomplete_details.reason, 'max_output_tokens');
		assert.equal(cut.usage.output_tokens, 4);
	});

	it('openai: responses.create streamed, the events in their documented order', async () => {
		const stream = await oai.responses.create({ model: 'm', input: 'ECHO:Streaming the Responses API. [delay=2]', stream: true });
		const evs = [];
		for await (const ev of stream) evs.push(ev);
		const n = evs.filter((e) => e.type === 'response.output_text.delta').length;
		assert.ok(n >= 2);
		assert.deepEqual(evs.map((e) => e.type), EVENT_ORDER(n));
		assert.deepEqual(evs.map((e) => e.sequence_number), evs.map((_, i) => i));
		const text = evs.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
		assert.equal(text.trim(), 'Streaming the Responses API. [delay=2]');
		const done = evs.at(-1).response;
		assert.equal(done.status, 'completed');
		assert.equal(done.output[0].content[0].text, text);
		assert.ok(done.usage.output_tokens > 0);

		// the stream helper rebuilds the response from the events
		const helper = oai.responses.stream({ model: 'm', input: 'ECHO:The helper works.' });
		let streamed = '';
		helper.on('response.output_text.delta', (e) => (streamed += e.delta));
		const final = await helper.finalResponse();
		assert.equal(final.output_text.trim(), 'The helper works.');
		assert.equal(streamed, final.output_text);
	});

	it('openai: what the Responses API refuses, as the client raises it', async () => {
		const refused = [
			[{ previous_response_id: 'resp_123' }, 'previous_response_id'],
			[{ store: true }, 'store'],
			[{ tools: [{ type: 'web_search_preview' }] }, 'tools[0].type'],
			[{ tools: [{ type: 'function', name: 'f', parameters: { type: 'array' } }] }, 'tools[0].parameters'],
			[{ text: { format: { type: 'json_schema', name: 'x', schema: { type: 'string', pattern: '^a' } } } }, 'text.format.schema'],
		];
		for (const [extra, param] of refused) {
			await assert.rejects(oai.responses.create({ model: 'm', input: 'x', ...extra }), (e) => {
				assert.ok(e instanceof OpenAI.BadRequestError, e.constructor.name);
				assert.equal(e.status, 400);
				assert.equal(e.param, param);
				return true;
			});
		}
		const stream = await oai.responses.create({ model: 'm', input: '[fail-after=2] x', stream: true });
		await assert.rejects(
			(async () => {
				for await (const ev of stream) void ev;
			})(),
			(e) => e instanceof OpenAI.APIError && /fail/.test(e.message),
		);
		const r = await oai.responses.create({ model: 'm', input: 'ECHO:still here' });
		assert.equal(r.output_text.trim(), 'still here');
	});

	it('models: list and retrieve in both clients', async () => {
		const list = [];
		for await (const m of oai.models.list()) list.push(m);
		assert.equal(list.length, 1);
		const m = await oai.models.retrieve('stories260K');
		assert.equal(m.id, 'stories260K');
		assert.equal(m.object, 'model');
		assert.equal(m.context_length, 2048);
		assert.deepEqual(m.capabilities, ['completion', 'chat']);
		assert.deepEqual(list[0], m);
		await assert.rejects(oai.models.retrieve('gpt-4o'), (e) => e instanceof OpenAI.NotFoundError);
		const a = await ant.models.retrieve('stories260K');
		assert.equal(a.id, 'stories260K');
		assert.equal(a.type, 'model');
		assert.equal(a.display_name, 'stories260K');
		assert.ok(!Number.isNaN(Date.parse(a.created_at)));
		const ids = [];
		for await (const x of ant.models.list()) ids.push(x.id);
		assert.deepEqual(ids, ['stories260K']);
		await assert.rejects(ant.models.retrieve('claude-x'), (e) => e instanceof Anthropic.NotFoundError);
	});
});

const skip = process.env.CPU_WORKER_BIN ? false : 'anedvd-cpu-worker is not built';

describe('official SDKs on the real engine: count_tokens, Responses', { skip }, () => {
	let s, oai, ant;
	before(async () => {
		s = await startStack({ realEngine: true, frontend: ['--parallel', '2'] });
		oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		ant = new Anthropic({ baseURL: s.base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});
	after(async () => {
		await s?.stop();
	});

	it('count_tokens equals the prompt the engine reports', async () => {
		for (const req of conversations) await countEqualsUsage(ant, req);
	});

	it('Responses: greedy text is the chat endpoint\'s for the same conversation, streamed and not', async () => {
		const input = 'Once upon a time';
		const chat = await oai.chat.completions.create({ model: 'm', messages: [{ role: 'system', content: 'Tell a story.' }, ...user(input)], max_tokens: 16, temperature: 0 });
		const r = await oai.responses.create({ model: 'm', instructions: 'Tell a story.', input, max_output_tokens: 16, temperature: 0 });
		assert.equal(r.output_text, chat.choices[0].message.content);
		assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
		assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
		const stream = await oai.responses.create({ model: 'm', instructions: 'Tell a story.', input, max_output_tokens: 16, temperature: 0, stream: true });
		let text = '', last = null;
		for await (const ev of stream) {
			if (ev.type === 'response.output_text.delta') text += ev.delta;
			last = ev;
		}
		assert.equal(text, r.output_text);
		assert.equal(last.type, r.status === 'completed' ? 'response.completed' : 'response.incomplete');
		assert.equal(last.response.status, r.status);
	});
});
