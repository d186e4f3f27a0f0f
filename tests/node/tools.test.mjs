// Tool calls and structured output through the official clients (openai,
// @anthropic-ai/sdk) against `anedvd serve` on stories260K, a model far too
// small to follow instructions: whatever it writes, the grammar makes a
// forced call parse and validate, and a json_schema reply validate. The
// judge of "validates" is ajv (pinned in package-lock.json), not the
// server. Both dialects and the Responses API, streamed and not, through
// the clients' own stream helpers (which rebuild calls from the deltas);
// histories with tool calls and results; the 400s that name their field;
// a reply cut by max_tokens inside a call; n > 1, logprobs and penalties
// with a schema; llama.cpp's grammar field.
//
// Environment (ctest sets it): ANEDVD_BIN, FE_MODEL. Skipped without them
// (e.g. under test-fe-sdk, which runs every file of this directory).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import OpenAI from 'openai';

import { freePort } from '../http/harness.mjs';

const BIN = process.env.ANEDVD_BIN;
const MODEL = process.env.FE_MODEL;
const skip = BIN && MODEL ? false : 'ANEDVD_BIN / FE_MODEL not set (run through ctest -R test-live-tools)';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const ajv = new Ajv2020({ strict: false });
addFormats(ajv);
const valid = (schema, v) => {
	const f = ajv.compile(schema);
	assert.ok(f(v), `${JSON.stringify(v)} fails ${JSON.stringify(schema)}: ${ajv.errorsText(f.errors)}`);
};

// small bounds keep the replies of a 260K-parameter model short
const WEATHER = {
	type: 'object',
	properties: {
		city: { type: 'string', maxLength: 12 },
		unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
		days: { type: 'integer', minimum: 1, maximum: 7 },
	},
	required: ['city', 'unit'],
	additionalProperties: false,
};
const SEARCH = {
	type: 'object',
	properties: { query: { type: 'string', maxLength: 10 }, limit: { type: 'integer', minimum: 1, maximum: 9 } },
	required: ['query'],
};
const PERSON = {
	type: 'object',
	properties: {
		name: { type: 'string', maxLength: 10 },
		age: { type: 'integer', minimum: 0, maximum: 120 },
		pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 2 },
		born: { type: 'string', format: 'date' },
	},
	required: ['name', 'age', 'pets', 'born'],
	additionalProperties: false,
};
const oaiTools = [
	{ type: 'function', function: { name: 'get_weather', description: 'The weather in a city', parameters: WEATHER } },
	{ type: 'function', function: { name: 'search', description: 'Search the web', parameters: SEARCH } },
];
const antTools = [
	{ name: 'get_weather', description: 'The weather in a city', input_schema: WEATHER },
	{ name: 'search', description: 'Search the web', input_schema: SEARCH },
];
const schemaOf = { get_weather: WEATHER, search: SEARCH };
const user = (content) => [{ role: 'user', content }];

describe('tool calls and structured output on stories260K, through the official SDKs', { skip }, () => {
	let srv, rt, base, oai, ant, log;

	before(async () => {
		rt = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-tools-'));
		log = path.join(rt, 'serve.log');
		const port = await freePort();
		base = `http://127.0.0.1:${port}`;
		const out = fs.openSync(log, 'a');
		srv = spawn(BIN, ['serve', '--model', MODEL, '--port', String(port), '--parallel', '4'], {
			stdio: ['ignore', out, out],
			env: { ...process.env, XDG_RUNTIME_DIR: rt },
		});
		fs.closeSync(out);
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
		oai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		ant = new Anthropic({ baseURL: base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});

	after(async () => {
		if (srv && srv.exitCode === null) {
			srv.kill('SIGINT');
			await new Promise((r) => srv.once('exit', r));
		}
		if (rt && process.env.ANEDVD_KEEP_TMP) console.error(`kept ${rt} (ANEDVD_KEEP_TMP)`);
		else if (rt) fs.rmSync(rt, { recursive: true, force: true });
	});

	const checkOpenAICall = (c, name) => {
		assert.equal(c.type, 'function');
		assert.match(c.id, /^call_[A-Za-z0-9]{24}$/);
		if (name) assert.equal(c.function.name, name);
		assert.ok(schemaOf[c.function.name], c.function.name);
		valid(schemaOf[c.function.name], JSON.parse(c.function.arguments));
	};

	it('openai: tool_choice required, whole and streamed, validates', async () => {
		const req = { model: 'm', messages: user('What is the weather in Paris?'), tools: oaiTools, tool_choice: 'required', max_tokens: 600, seed: 1 };
		const r = await oai.chat.completions.create(req);
		const m = r.choices[0].message;
		assert.equal(r.choices[0].finish_reason, 'tool_calls');
		assert.equal(m.content, null);
		assert.ok(m.tool_calls.length >= 1);
		for (const c of m.tool_calls) checkOpenAICall(c);
		// streamed: the deltas by index, as the client's helper puts them together
		const final = await oai.chat.completions.stream({ ...req, seed: 2 }).finalChatCompletion();
		assert.equal(final.choices[0].finish_reason, 'tool_calls');
		assert.ok(final.choices[0].message.tool_calls.length >= 1);
		for (const c of final.choices[0].message.tool_calls) checkOpenAICall(c);
		// the raw deltas: the first names the call, the later ones carry pieces
		const stream = await oai.chat.completions.create({ ...req, seed: 3, stream: true });
		const calls = [];
		let pieces = 0, finish = null;
		for await (const ch of stream) {
			finish = ch.choices[0]?.finish_reason ?? finish;
			for (const d of ch.choices[0]?.delta?.tool_calls ?? []) {
				if (d.id) calls[d.index] = { id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } };
				calls[d.index].function.arguments += d.function.arguments ?? '';
				pieces++;
			}
		}
		assert.equal(finish, 'tool_calls');
		// (how many pieces depends on how many tokens each poll of the engine brings)
		assert.ok(pieces > calls.length, `${pieces} pieces for ${calls.length} calls: the arguments came after the start`);
		for (const c of calls) checkOpenAICall(c);
	});

	it('openai: a named tool, one call without parallel calls', async () => {
		for (const stream of [false, true]) {
			const req = {
				model: 'm', messages: user('Find cats'), tools: oaiTools, max_tokens: 400, seed: 7,
				tool_choice: { type: 'function', function: { name: 'search' } }, parallel_tool_calls: false,
			};
			const r = stream ? await oai.chat.completions.stream(req).finalChatCompletion() : await oai.chat.completions.create(req);
			const calls = r.choices[0].message.tool_calls;
			assert.equal(calls.length, 1);
			checkOpenAICall(calls[0], 'search');
			assert.equal(r.choices[0].finish_reason, 'tool_calls');
		}
	});

	it('openai: response_format json_schema (strict) and json_object validate; parse(), n > 1, logprobs, penalties', async () => {
		const rf = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: PERSON } };
		const req = { model: 'm', messages: user('Describe a person.'), response_format: rf, max_tokens: 400 };
		const r = await oai.chat.completions.create({ ...req, n: 3, seed: 11, logprobs: true, top_logprobs: 2, frequency_penalty: 0.5 });
		assert.equal(r.choices.length, 3);
		for (const c of r.choices) {
			assert.equal(c.finish_reason, 'stop');
			valid(PERSON, JSON.parse(c.message.content));
			assert.ok(c.logprobs.content.length > 5);
			assert.equal(c.logprobs.content.map((t) => t.token).join(''), c.message.content);
		}
		// the client's parse() reads the reply as the schema's object
		const p = await oai.chat.completions.parse({ ...req, seed: 12 });
		valid(PERSON, p.choices[0].message.parsed);
		// streamed, through the helper
		const s = await oai.chat.completions.stream({ ...req, seed: 13 }).finalChatCompletion();
		valid(PERSON, JSON.parse(s.choices[0].message.content));
		// json_object: any object
		const o = await oai.chat.completions.create({ ...req, response_format: { type: 'json_object' }, max_tokens: 300, seed: 14 });
		if (o.choices[0].finish_reason === 'stop') {
			const v = JSON.parse(o.choices[0].message.content);
			assert.equal(typeof v, 'object');
			assert.ok(!Array.isArray(v) && v !== null);
		} else {
			assert.match(o.choices[0].message.content, /^\{/);
		}
	});

	it('openai: a history with tool calls and results is accepted', async () => {
		const messages = [
			{ role: 'system', content: 'You help.' },
			{ role: 'user', content: 'Weather in Paris and Rome?' },
			{
				role: 'assistant', content: null, tool_calls: [
					{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","unit":"celsius"}' } },
					{ id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome","unit":"celsius"}' } },
				],
			},
			{ role: 'tool', tool_call_id: 'call_1', content: '21 C, sunny' },
			{ role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: '25 C' }] },
		];
		const r = await oai.chat.completions.create({ model: 'm', messages, tools: oaiTools, max_tokens: 20 });
		assert.ok(['stop', 'length', 'tool_calls'].includes(r.choices[0].finish_reason));
		// the prompt carries the calls and results: longer than without them
		const t1 = await (await fetch(`${base}/apply-template`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages }) })).json();
		assert.match(t1.prompt, /Result of get_weather \(call_1\): 21 C, sunny/);
		assert.match(t1.prompt, /"tool_calls": \[\{"name": "get_weather", "arguments": \{"city":"Paris","unit":"celsius"\}\}/);
	});

	it('openai: the 400s name their field', async () => {
		const cases = [
			[{ tools: oaiTools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', /no tool is named 'nope'/],
			[{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'array' } } }] }, 'tools[0].function.parameters', /object schema/],
			[{ tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 'string', pattern: 'x' } } } } }] },
				'tools[0].function.parameters', /\.properties\.a: 'pattern' is not supported/],
			[{ tools: [{ type: 'retrieval' }] }, 'tools[0].type', /only function tools/],
			[{ tool_choice: 'required' }, 'tool_choice', /no tools/],
			[{ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'integer', minimum: 5, maximum: 1 } } } },
				'response_format.json_schema.schema', /no integer lies between/],
			[{ response_format: { type: 'yaml' } }, 'response_format.type', /not text, json_object or json_schema/],
			[{ messages: [{ role: 'tool', tool_call_id: 'call_9', content: 'x' }] }, 'messages[0].tool_call_id', /answers no tool call before it/],
			[{ messages: [{ role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: 'nope' } }] }] },
				'messages[0].tool_calls[0].function.arguments', /JSON object/],
			[{ grammar: 'root ::= missing' }, 'grammar', /'missing' is used but not defined/],
			[{ grammar: 'root ::= "a"', tools: oaiTools, tool_choice: 'required' }, 'grammar', /cannot be combined with tools/],
		];
		for (const [extra, param, re] of cases) {
			await assert.rejects(oai.chat.completions.create({ model: 'm', messages: user('x'), max_tokens: 5, ...extra }), (e) => {
				assert.ok(e instanceof OpenAI.BadRequestError, `${JSON.stringify(extra)}: ${e}`);
				assert.equal(e.param, param, JSON.stringify(extra));
				assert.match(e.message, re);
				return true;
			});
		}
	});

	it('openai: a call cut by max_tokens ends with length, its arguments as far as they came', async () => {
		const r = await oai.chat.completions.create({ model: 'm', messages: user('x'), tools: oaiTools, tool_choice: { type: 'function', function: { name: 'get_weather' } }, max_tokens: 30 });
		assert.equal(r.choices[0].finish_reason, 'length');
		const c = r.choices[0].message.tool_calls?.[0];
		if (c) {
			assert.equal(c.function.name, 'get_weather');
			assert.ok('{"city": "'.startsWith(c.function.arguments.slice(0, 10)) || c.function.arguments.startsWith('{'), c.function.arguments);
		}
	});

	it('llama.cpp grammar and json_schema fields on completions', async () => {
		const r = await oai.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 40, grammar: 'root ::= "yes" | "no" | [0-9]{3}' });
		assert.match(r.choices[0].text, /^(yes|no|[0-9]{3})$/);
		assert.equal(r.choices[0].finish_reason, 'stop');
		const j = await oai.completions.create({ model: 'm', prompt: 'x', max_tokens: 300, json_schema: PERSON, seed: 5 });
		valid(PERSON, JSON.parse(j.choices[0].text));
	});

	const checkToolUse = (b, name) => {
		assert.equal(b.type, 'tool_use');
		assert.match(b.id, /^toolu_[A-Za-z0-9]{24}$/);
		if (name) assert.equal(b.name, name);
		valid(schemaOf[b.name], b.input);
	};

	it('anthropic: a forced tool (structured output), whole and streamed', async () => {
		const req = { model: 'm', max_tokens: 500, messages: user('Weather?'), tools: antTools, tool_choice: { type: 'tool', name: 'get_weather' } };
		const r = await ant.messages.create(req);
		// parallel calls: the model may go on calling until max_tokens (no
		// seed in this dialect); the calls before a cut one validate
		assert.ok(['tool_use', 'max_tokens'].includes(r.stop_reason), r.stop_reason);
		assert.ok(r.content.length >= 1);
		for (const b of r.stop_reason === 'tool_use' ? r.content : r.content.slice(0, -1)) checkToolUse(b, 'get_weather');
		// the stream helper rebuilds the input from input_json_delta events
		const stream = ant.messages.stream({ ...req, tool_choice: { type: 'any', disable_parallel_tool_use: true } });
		let deltas = '';
		stream.on('inputJson', (piece) => { deltas += piece; });
		const final = await stream.finalMessage();
		assert.equal(final.stop_reason, 'tool_use');
		assert.equal(final.content.length, 1);
		checkToolUse(final.content[0]);
		assert.deepEqual(JSON.parse(deltas), final.content[0].input);
	});

	it('anthropic: tool_result history (string, blocks, is_error) and count_tokens with tools', async () => {
		const messages = [
			{ role: 'user', content: 'Weather in Oslo?' },
			{ role: 'assistant', content: [{ type: 'text', text: 'Let me look.' }, { type: 'tool_use', id: 'toolu_a', name: 'get_weather', input: { city: 'Oslo', unit: 'celsius' } }] },
			{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_a', content: [{ type: 'text', text: '-3 C' }] }, { type: 'text', text: 'And search for it?' }] },
			{ role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_b', name: 'search', input: { query: 'oslo' } }] },
			{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_b', content: 'timeout', is_error: true }] },
		];
		const r = await ant.messages.create({ model: 'm', max_tokens: 20, messages, tools: antTools });
		assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(r.stop_reason));
		const withTools = await ant.messages.countTokens({ model: 'm', messages, tools: antTools });
		const without = await ant.messages.countTokens({ model: 'm', messages });
		assert.ok(withTools.input_tokens > without.input_tokens + 20, `${withTools.input_tokens} vs ${without.input_tokens}`);
	});

	it('anthropic: the 400s name their field', async () => {
		const cases = [
			[{ tools: antTools, tool_choice: { type: 'tool', name: 'nope' } }, /tool_choice: no tool is named 'nope'|no tool is named 'nope'/],
			[{ tools: [{ name: 'f', input_schema: { type: 'string' } }] }, /tools\[0\]\.input_schema.*object schema/],
			[{ tools: [{ name: 'f' }] }, /tools\[0\]\.input_schema' is required/],
			[{ tools: [{ type: 'bash_20250124', name: 'bash' }] }, /tools\[0\]\.type/],
			[{ messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'x' }] }] }, /messages\[0\]\.content\[0\]\.tool_use_id.*answers no tool call before it/],
			[{ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }, /messages\[0\]\.content\[0\]\.type.*'image' blocks are not supported/],
			[{ messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: 5 }] }] }, /messages\[0\]\.content\[0\].*an object 'input'/],
		];
		for (const [extra, re] of cases) {
			await assert.rejects(ant.messages.create({ model: 'm', max_tokens: 5, messages: user('x'), ...extra }), (e) => {
				assert.ok(e instanceof Anthropic.BadRequestError, `${JSON.stringify(extra)}: ${e}`);
				assert.equal(e.error?.error?.type, 'invalid_request_error');
				assert.match(e.message, re);
				return true;
			});
		}
	});

	it('anthropic: a call cut by max_tokens: stop_reason max_tokens, an input object', async () => {
		const r = await ant.messages.create({ model: 'm', max_tokens: 40, messages: user('x'), tools: antTools, tool_choice: { type: 'tool', name: 'get_weather' } });
		assert.equal(r.stop_reason, 'max_tokens');
		for (const b of r.content) {
			assert.equal(b.type, 'tool_use');
			assert.equal(typeof b.input, 'object');
		}
		// cut before the name is whole: the named tool's call, no markup as text
		for (const stream of [false, true]) {
			const req = { model: 'm', max_tokens: 3, messages: user('x'), tools: antTools, tool_choice: { type: 'tool', name: 'search' } };
			const c = stream ? await ant.messages.stream(req).finalMessage() : await ant.messages.create(req);
			assert.equal(c.stop_reason, 'max_tokens');
			assert.deepEqual(c.content.map((b) => [b.type, b.name, b.input]), [['tool_use', 'search', {}]]);
			const o = await oai.chat.completions.create({ model: 'm', max_tokens: 3, messages: user('x'), tools: oaiTools, tool_choice: 'required', stream: false });
			assert.equal(o.choices[0].finish_reason, 'length');
			assert.equal(o.choices[0].message.content, '');
			assert.equal(o.choices[0].message.tool_calls, undefined);
		}
	});

	it('responses: function tools, text.format json_schema, function_call history', async () => {
		const tools = [{ type: 'function', name: 'get_weather', description: 'weather', parameters: WEATHER, strict: true }];
		const r = await oai.responses.create({ model: 'm', input: 'Weather?', tools, tool_choice: 'required', max_output_tokens: 500 });
		const calls = r.output.filter((o) => o.type === 'function_call');
		assert.ok(calls.length >= 1);
		// parallel calls may run to max_output_tokens: the last one is cut then
		for (const c of r.status === 'completed' ? calls : calls.slice(0, -1)) {
			assert.equal(c.name, 'get_weather');
			assert.match(c.call_id, /^call_/);
			valid(WEATHER, JSON.parse(c.arguments));
		}
		// streamed, through the helper
		const s = oai.responses.stream({ model: 'm', input: 'Weather?', tools, tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false, max_output_tokens: 500 });
		let deltas = '';
		s.on('response.function_call_arguments.delta', (e) => { deltas += e.delta; });
		const f = await s.finalResponse();
		const fc = f.output.filter((o) => o.type === 'function_call');
		assert.equal(fc.length, 1);
		valid(WEATHER, JSON.parse(fc[0].arguments));
		assert.equal(deltas, fc[0].arguments);
		// structured output
		const j = await oai.responses.create({ model: 'm', input: 'A person', text: { format: { type: 'json_schema', name: 'p', schema: PERSON, strict: true } }, max_output_tokens: 400 });
		valid(PERSON, JSON.parse(j.output_text));
		// a history with a call and its output
		const h = await oai.responses.create({
			model: 'm', max_output_tokens: 10, tools,
			input: [
				{ role: 'user', content: 'Weather in Lima?' },
				{ type: 'function_call', call_id: 'call_x', name: 'get_weather', arguments: '{"city":"Lima","unit":"celsius"}' },
				{ type: 'function_call_output', call_id: 'call_x', output: '19 C' },
			],
		});
		assert.ok(['completed', 'incomplete'].includes(h.status));
	});
});

// The model's own template: gen-model's scripted thinking model with
// Qwen3's chat template, which writes the tools itself and asks for the
// Hermes markup (<tool_call>...</tool_call>): the prompt is the template's,
// a forced call is parsed out of that markup, and without a call the
// thinking and the answer come as they do without tools.
const GEN = process.env.GEN_MODEL, JINJA = process.env.JINJA_DATA;
describe('tool calls in the markup of the model\'s own template (Qwen3: hermes)', { skip: skip || (GEN && JINJA ? false : 'GEN_MODEL / JINJA_DATA not set') }, () => {
	let rt, srv, base, oai;
	before(async () => {
		rt = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-tools-q3-'));
		const model = path.join(rt, 'qwen3-think.gguf');
		execFileSync(GEN, ['think', 'f16', '0', model, '--template', path.join(JINJA, 'templates', 'Qwen-Qwen3-0.6B.jinja')]);
		const port = await freePort();
		base = `http://127.0.0.1:${port}`;
		const out = fs.openSync(path.join(rt, 'serve.log'), 'a');
		srv = spawn(BIN, ['serve', '--model', model, '--port', String(port)], { stdio: ['ignore', out, out], env: { ...process.env, XDG_RUNTIME_DIR: rt } });
		fs.closeSync(out);
		for (let i = 0; i < 600 && srv.exitCode === null; i++) {
			try {
				const h = await (await fetch(`${base}/health`)).json();
				if (h.tokenizer === 'up' && h.engine === 'up') break;
			} catch {
				// not listening yet
			}
			await sleep(50);
		}
		oai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});
	after(async () => {
		if (srv && srv.exitCode === null) {
			srv.kill('SIGINT');
			await new Promise((r) => srv.once('exit', r));
		}
		if (rt && process.env.ANEDVD_KEEP_TMP) console.error(`kept ${rt} (ANEDVD_KEEP_TMP)`);
		else if (rt) fs.rmSync(rt, { recursive: true, force: true });
	});

	const TOOL = [{ type: 'function', function: { name: 'pick', parameters: { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 99 } }, required: ['n'] } } }];

	it('the template writes the tools; a forced call comes in its markup and validates', async () => {
		const t = await (await fetch(`${base}/apply-template`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ messages: user('Hi'), tools: TOOL }) })).json();
		assert.match(t.prompt, /<tools>\n\{"type": "function", "function": \{"name": "pick"/);
		assert.match(t.prompt, /within <tool_call><\/tool_call> XML tags/);
		for (const stream of [false, true]) {
			// one call: the grammar ends after it (the scripted model's
			// end-of-text chance is small, parallel calls run to max_tokens)
			const req = { model: 'm', messages: user('Hi'), tools: TOOL, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 400 };
			const r = stream ? await oai.chat.completions.stream(req).finalChatCompletion() : await oai.chat.completions.create(req);
			assert.equal(r.choices[0].finish_reason, 'tool_calls');
			const calls = r.choices[0].message.tool_calls;
			assert.equal(calls.length, 1);
			for (const c of calls) {
				assert.equal(c.function.name, 'pick');
				valid(TOOL[0].function.parameters, JSON.parse(c.function.arguments));
			}
		}
	});

	it('auto: no call made, the thinking and the answer as without tools', async () => {
		const r = await oai.chat.completions.create({ model: 'm', messages: user('Hi'), tools: TOOL, max_tokens: 64 });
		const m = r.choices[0].message;
		assert.equal(r.choices[0].finish_reason, 'stop');
		assert.equal(m.tool_calls, undefined);
		assert.equal(m.content, 'Hello!');
		assert.equal(m.reasoning_content, 'Let me think.');
	});
});
