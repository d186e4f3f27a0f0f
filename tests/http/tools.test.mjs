// Tool calls the model starts on its own (tool_choice auto), over raw HTTP
// against the frontend + tokenizer + fake engine. The fake engine echoes a
// scripted reply and, for a lazy grammar, reports the token that completes
// a trigger word as a real engine does (grammar_on); the frontend must
// split the reply there: text before it is content, the markup after it is
// calls. Checked in the three APIs, streamed and not: no byte of the
// markup leaks into the content (the holdback of text that may begin a
// trigger word), the arguments arrive in pieces, the finish says the reply
// ended with calls; a look-alike that never completes stays text; the
// request sends the lazy grammar and its trigger words to the engine.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { after, before, describe, it } from 'node:test';

import { post, sse, startStack } from './harness.mjs';

const TOOLS = [
	{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
	{ type: 'function', function: { name: 'search', parameters: { type: 'object', properties: { q: { type: 'string' } } } } },
];
const CALL = '{"tool_call": {"name": "get_weather", "arguments": {"city": "Paris"}}}';
const TWO = '{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}, {"name": "search", "arguments": {"q": "x y"}}]}';

describe('tool calls the model starts (auto), through the fake engine', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--parallel', '4'] });
	});
	after(async () => {
		await s?.stop();
	});

	const chat = (content, extra = {}) => post(s, '/v1/chat/completions', { messages: [{ role: 'user', content }], tools: TOOLS, max_tokens: 400, ...extra });

	it('openai: text, then a call: content and tool_calls apart', async () => {
		const r = await chat(`ECHO:Let me check. ${CALL}`);
		assert.equal(r.status, 200, r.body);
		const c = JSON.parse(r.body).choices[0];
		assert.equal(c.finish_reason, 'tool_calls');
		assert.equal(c.message.content.trimStart(), 'Let me check. '); // SentencePiece's leading space
		assert.equal(c.message.tool_calls.length, 1);
		assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
		assert.deepEqual(JSON.parse(c.message.tool_calls[0].function.arguments), { city: 'Paris' });
		// the engine was asked for a lazy grammar with the generic markup's words
		const log = fs.readFileSync(s.engineLog, 'utf8').trim().split('\n').filter((l) => l.startsWith('generate')).at(-1);
		assert.match(log, /grammar=[1-9]\d* lazy=1 words=2/);
	});

	it('a worker lost before the markup or inside it: the same reply, the grammar replays what was delivered', async () => {
		for (const lose of [3, 20]) {
			for (const stream of [false, true]) {
				const r = await chat(`[lose-after=${lose}] [delay=2] ECHO:Let me check. ${CALL}`, { stream });
				assert.equal(r.status, 200, r.body);
				let content = '', args = '', name = '', finish = null;
				if (stream) {
					for (const e of sse(r.body)) {
						if (e.data === '[DONE]') continue;
						const ch = JSON.parse(e.data).choices[0];
						if (!ch) continue;
						content += ch.delta?.content ?? '';
						for (const d of ch.delta?.tool_calls ?? []) {
							name += d.function?.name ?? '';
							args += d.function?.arguments ?? '';
						}
						finish = ch.finish_reason ?? finish;
					}
				} else {
					const c = JSON.parse(r.body).choices[0];
					content = c.message.content;
					name = c.message.tool_calls[0].function.name;
					args = c.message.tool_calls[0].function.arguments;
					finish = c.finish_reason;
				}
				assert.equal(content.trimStart(), 'Let me check. ', `lose after ${lose}`);
				assert.equal(name, 'get_weather');
				assert.deepEqual(JSON.parse(args), { city: 'Paris' });
				assert.equal(finish, 'tool_calls');
				// the continued job carried the grammar and the tokens it had given
				const gens = fs.readFileSync(s.engineLog, 'utf8').trim().split('\n').filter((l) => l.startsWith('generate')).slice(-2);
				assert.match(gens[0], /skip=0 .*lazy=1 words=2 replay=0/);
				assert.match(gens[1], new RegExp(`skip=${lose} .*lazy=1 words=2 replay=${lose}$`));
			}
		}
	});

	it('openai: two calls at once, streamed: no markup in the content, arguments in pieces', async () => {
		const r = await chat(`[delay=10] ECHO:On it.${TWO}`, { stream: true }); // a token per 10 ms: a poll per 20 ms frame, many of them
		assert.equal(r.status, 200);
		let content = '', finish = null;
		const calls = [];
		let pieces = 0;
		for (const e of sse(r.body)) {
			if (e.data === '[DONE]') continue;
			const ch = JSON.parse(e.data).choices[0];
			if (!ch) continue;
			content += ch.delta?.content ?? '';
			finish = ch.finish_reason ?? finish;
			for (const d of ch.delta?.tool_calls ?? []) {
				if (d.id) calls[d.index] = { name: d.function.name, args: '' };
				calls[d.index].args += d.function.arguments ?? '';
				pieces++;
			}
		}
		assert.equal(content.trimStart(), 'On it.');
		assert.equal(finish, 'tool_calls');
		assert.deepEqual(calls.map((c) => c.name), ['get_weather', 'search']);
		assert.deepEqual(JSON.parse(calls[0].args), { city: 'Oslo' });
		assert.deepEqual(JSON.parse(calls[1].args), { q: 'x y' });
		assert.ok(pieces > 4, `${pieces} deltas`);
	});

	it('openai: a look-alike that never completes stays text; tool_choice none is no grammar', async () => {
		let r = await chat('ECHO:A brace {"tool_ then nothing');
		let c = JSON.parse(r.body).choices[0];
		assert.equal(c.message.content.trimStart(), 'A brace {"tool_ then nothing');
		assert.equal(c.message.tool_calls, undefined);
		assert.equal(c.finish_reason, 'stop');
		r = await chat(`ECHO:${CALL}`, { tool_choice: 'none', stream: true });
		let content = '';
		for (const e of sse(r.body)) if (e.data !== '[DONE]') content += JSON.parse(e.data).choices[0]?.delta?.content ?? '';
		assert.equal(content.trimStart(), CALL);
		const log = fs.readFileSync(s.engineLog, 'utf8').trim().split('\n').filter((l) => l.startsWith('generate')).at(-1);
		assert.match(log, /grammar=0 lazy=0/);
	});

	it('anthropic: a text block, then tool_use blocks; streamed as blocks', async () => {
		const body = {
			model: 'm', max_tokens: 400,
			messages: [{ role: 'user', content: `ECHO:Sure. ${TWO}` }],
			tools: TOOLS.map((t) => ({ name: t.function.name, input_schema: t.function.parameters })),
		};
		let r = await post(s, '/v1/messages', body);
		const m = JSON.parse(r.body);
		assert.equal(m.stop_reason, 'tool_use');
		assert.deepEqual(m.content.map((b) => b.type), ['text', 'tool_use', 'tool_use']);
		assert.equal(m.content[0].text.trimStart(), 'Sure. ');
		assert.deepEqual(m.content[1].input, { city: 'Oslo' });
		assert.match(m.content[2].id, /^toolu_/);
		r = await post(s, '/v1/messages', { ...body, stream: true });
		const ev = sse(r.body).map((e) => ({ event: e.event, ...JSON.parse(e.data) }));
		const starts = ev.filter((e) => e.event === 'content_block_start');
		assert.deepEqual(starts.map((e) => [e.index, e.content_block.type]), [[0, 'text'], [1, 'tool_use'], [2, 'tool_use']]);
		assert.equal(ev.filter((e) => e.event === 'content_block_stop').length, 3);
		const json = (i) => ev.filter((e) => e.event === 'content_block_delta' && e.index === i).map((e) => e.delta.partial_json).join('');
		assert.deepEqual(JSON.parse(json(1)), { city: 'Oslo' });
		assert.deepEqual(JSON.parse(json(2)), { q: 'x y' });
		assert.equal(ev.filter((e) => e.delta?.type === 'text_delta').map((e) => e.delta.text).join('').trimStart(), 'Sure. ');
		assert.equal(ev.find((e) => e.event === 'message_delta').delta.stop_reason, 'tool_use');
	});

	it('responses: a message item, then function_call items; streamed', async () => {
		const body = {
			model: 'm', max_output_tokens: 400, input: `ECHO:Fine: ${CALL}`,
			tools: TOOLS.map((t) => ({ type: 'function', name: t.function.name, parameters: t.function.parameters })),
		};
		let r = await post(s, '/v1/responses', body);
		const o = JSON.parse(r.body);
		assert.deepEqual(o.output.map((x) => x.type), ['message', 'function_call']);
		assert.equal(o.output[0].content[0].text.trimStart(), 'Fine: ');
		assert.deepEqual(JSON.parse(o.output[1].arguments), { city: 'Paris' });
		r = await post(s, '/v1/responses', { ...body, stream: true });
		const ev = sse(r.body).map((e) => JSON.parse(e.data));
		const added = ev.filter((e) => e.type === 'response.output_item.added');
		assert.deepEqual(added.map((e) => [e.output_index, e.item.type]), [[0, 'message'], [1, 'function_call']]);
		const done = ev.find((e) => e.type === 'response.function_call_arguments.done');
		assert.deepEqual(JSON.parse(done.arguments), { city: 'Paris' });
		const fin = ev.at(-1);
		assert.equal(fin.type, 'response.completed');
		assert.deepEqual(fin.response.output.map((x) => x.type), ['message', 'function_call']);
		// the sequence numbers count up without a gap
		ev.forEach((e, i) => assert.equal(e.sequence_number, i));
	});
});
