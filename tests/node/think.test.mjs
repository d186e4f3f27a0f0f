// The official clients (openai, @anthropic-ai/sdk, pinned by
// package-lock.json) against `anedvd serve` on a thinking model: gen-model's
// scripted "think" fixture carrying Qwen3's own chat template (from
// tests/data/jinja/templates). After Qwen3's generation prompt the model
// writes "<think>Let me think.</think>\n\nHello!", after the no-think form of
// the prompt only "Hello!". So: the thinking reaches OpenAI's
// reasoning_content / delta.reasoning_content and Anthropic's thinking
// blocks (thinking_delta, signature_delta), never the answer; the switches
// (chat_template_kwargs.enable_thinking, reasoning_effort, Anthropic thinking
// disabled) render the template's no-think form; tools and tool history reach
// the template, byte for byte as Python's jinja2 renders them; bad input is a
// 400 naming the field; and a template's raise_exception() is a 400 carrying
// its message (a second server, on Gemma 2's template).
//
// Environment (ctest sets it): ANEDVD_BIN, GEN_MODEL (gen-model), JINJA_DATA
// (tests/data/jinja). Skipped without them (e.g. under test-fe-sdk).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { freePort } from '../http/harness.mjs';

const BIN = process.env.ANEDVD_BIN;
const GEN = process.env.GEN_MODEL;
const DATA = process.env.JINJA_DATA;
const skip = BIN && GEN && DATA ? false : 'ANEDVD_BIN / GEN_MODEL / JINJA_DATA not set (run through ctest -R test-live-think)';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const user = (content) => [{ role: 'user', content }];
const THOUGHT = 'Let me think.';
const ANSWER = 'Hello!';

async function serve(rt, model) {
	const port = await freePort();
	const log = path.join(rt, `serve-${port}.log`);
	const out = fs.openSync(log, 'a');
	const srv = spawn(BIN, ['serve', '--model', model, '--port', String(port)], {
		stdio: ['ignore', out, out],
		// the judge's strftime_now, should a template read the date
		env: { ...process.env, XDG_RUNTIME_DIR: rt, ANEDVD_TEMPLATE_NOW: '1767225600' },
	});
	fs.closeSync(out);
	const base = `http://127.0.0.1:${port}`;
	for (let i = 0; i < 600 && srv.exitCode === null; i++) {
		try {
			const h = await (await fetch(`${base}/health`)).json();
			if (h.tokenizer === 'up' && h.engine === 'up') return { srv, base, log };
		} catch {
			// not listening yet
		}
		await sleep(50);
	}
	throw new Error(`anedvd serve did not come up:\n${fs.readFileSync(log, 'utf8')}`);
}

async function post(base, route, body) {
	const r = await fetch(base + route, {
		method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
	});
	return { status: r.status, body: await r.json() };
}

describe('a thinking model (Qwen3 template) through the official SDKs', { skip }, () => {
	let rt, qwen, gemma, oai, ant;

	before(async () => {
		rt = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-think-'));
		const mk = (name, tmpl) => {
			const m = path.join(rt, name);
			execFileSync(GEN, ['think', 'f16', '0', m, '--template', path.join(DATA, 'templates', tmpl)]);
			return m;
		};
		qwen = await serve(rt, mk('qwen3-think.gguf', 'Qwen-Qwen3-0.6B.jinja'));
		gemma = await serve(rt, mk('gemma2-think.gguf', 'google-gemma-2-2b-it.jinja'));
		oai = new OpenAI({ baseURL: `${qwen.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		ant = new Anthropic({ baseURL: qwen.base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});

	after(async () => {
		for (const s of [qwen, gemma])
			if (s && s.srv.exitCode === null && s.srv.signalCode === null) s.srv.kill('SIGKILL');
		if (rt && process.env.ANEDVD_KEEP_TMP) console.error(`kept ${rt} (ANEDVD_KEEP_TMP)`);
		else if (rt) fs.rmSync(rt, { recursive: true, force: true });
	});

	it('OpenAI chat: the thinking in message.reasoning_content, the answer alone in content', async () => {
		const r = await oai.chat.completions.create({ model: 'think', messages: user('Hi'), max_tokens: 32 });
		const m = r.choices[0].message;
		assert.equal(m.content, ANSWER);
		assert.equal(m.reasoning_content, THOUGHT);
		assert.equal(r.choices[0].finish_reason, 'stop');
		assert.equal(r.usage.completion_tokens, 8); // <think> Let " me" " think." </think> \n\n Hello !
	});

	it('OpenAI stream: delta.reasoning_content first, then delta.content; both whole at the end', async () => {
		const s = await oai.chat.completions.create({ model: 'think', messages: user('Hi'), max_tokens: 32, stream: true });
		const order = [];
		let reasoning = '', content = '', finish = null;
		for await (const c of s) {
			const d = c.choices[0]?.delta ?? {};
			if (d.reasoning_content) {
				reasoning += d.reasoning_content;
				order.push('r');
			}
			if (d.content) {
				content += d.content;
				order.push('c');
			}
			finish = c.choices[0]?.finish_reason ?? finish;
		}
		assert.equal(reasoning, THOUGHT);
		assert.equal(content, ANSWER);
		assert.equal(finish, 'stop');
		// (how many pieces depends on how many tokens each poll brings: test-fe-think cuts every way)
		assert.ok(order.indexOf('c') > order.lastIndexOf('r'), order.join(''));
	});

	it('OpenAI: chat_template_kwargs.enable_thinking false and reasoning_effort none render the no-think prompt', async () => {
		for (const extra of [{ chat_template_kwargs: { enable_thinking: false } }, { reasoning_effort: 'none' },
			{ reasoning_effort: 'minimal' }]) {
			const r = await oai.chat.completions.create({ model: 'think', messages: user('Hi'), max_tokens: 32, ...extra });
			assert.equal(r.choices[0].message.content, ANSWER, JSON.stringify(extra));
			assert.equal(r.choices[0].message.reasoning_content, undefined, JSON.stringify(extra));
			assert.equal(r.usage.completion_tokens, 2, JSON.stringify(extra)); // Hello !
		}
		const on = await oai.chat.completions.create({ model: 'think', messages: user('Hi'), max_tokens: 32,
			reasoning_effort: 'high' });
		assert.equal(on.choices[0].message.reasoning_content, THOUGHT);
		const p = await post(qwen.base, '/apply-template', { messages: user('Hi'), reasoning_effort: 'none' });
		assert.equal(p.status, 200);
		assert.equal(p.body.prompt, '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n');
	});

	it('OpenAI: reasoning_format none keeps the thinking in the text', async () => {
		const r = await oai.chat.completions.create({ model: 'think', messages: user('Hi'), max_tokens: 32,
			reasoning_format: 'none' });
		assert.equal(r.choices[0].message.content, `<think>${THOUGHT}</think>\n\n${ANSWER}`);
		assert.equal(r.choices[0].message.reasoning_content, undefined);
	});

	it('OpenAI: max_tokens inside the thinking leaves all of it as reasoning', async () => {
		const r = await oai.chat.completions.create({ model: 'think', messages: user('Hi'), max_tokens: 3 });
		assert.equal(r.choices[0].finish_reason, 'length');
		assert.equal(r.choices[0].message.content, '');
		assert.equal(r.choices[0].message.reasoning_content, 'Let me');
	});

	it('tools, tool calls, tool results and thinking in history: the prompt is jinja2\'s, byte for byte', async () => {
		// the judge's "tool_answer" and "think_tools" conversations, as an OpenAI client sends them
		const ctxs = JSON.parse(fs.readFileSync(path.join(DATA, 'contexts.json'), 'utf8'));
		const expected = JSON.parse(fs.readFileSync(path.join(DATA, 'expected', 'Qwen-Qwen3-0.6B.json'), 'utf8'));
		for (const name of ['tool_answer', 'parallel', 'think_tools', 'think_off', 'multi']) {
			const c = ctxs[name];
			const messages = c.messages.map((m) => {
				const o = { ...m };
				if (m.tool_calls)
					o.tool_calls = m.tool_calls.map((t) => ({ ...t,
						function: { name: t.function.name, arguments: JSON.stringify(t.function.arguments) } }));
				return o;
			});
			const body = { messages };
			if (c.tools) body.tools = c.tools;
			if (c.enable_thinking === false) body.chat_template_kwargs = { enable_thinking: false };
			const p = await post(qwen.base, '/apply-template', body);
			assert.equal(p.status, 200, JSON.stringify(p.body));
			const want = expected.cases.find((x) => x.context === name).output;
			assert.equal(p.body.prompt, want, name);
			// and the SDK takes the same conversation
			const r = await oai.chat.completions.create({ model: 'think', max_tokens: 16, ...body });
			assert.equal(r.choices[0].finish_reason, 'stop', name);
		}
	});

	it('tools count in /v1/messages/count_tokens and /apply-template', async () => {
		const tools = [{ name: 'get_weather', description: 'The weather in a city.',
			input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
		const bare = await ant.messages.countTokens({ model: 'think', messages: user('Weather in Paris?') });
		const withTools = await ant.messages.countTokens({ model: 'think', messages: user('Weather in Paris?'), tools });
		assert.ok(withTools.input_tokens > bare.input_tokens + 20, `${withTools.input_tokens} vs ${bare.input_tokens}`);
		const r = await ant.messages.create({ model: 'think', max_tokens: 32, messages: user('Weather in Paris?'), tools });
		assert.equal(r.usage.input_tokens + r.usage.cache_read_input_tokens, withTools.input_tokens);
		const p = await post(qwen.base, '/apply-template', { messages: user('Weather?'),
			tools: [{ type: 'function', function: { name: 'get_weather', parameters: tools[0].input_schema } }] });
		assert.match(p.body.prompt, /<tools>\n\{"type": "function", "function": \{"name": "get_weather", "parameters": /);
	});

	it('Anthropic: a thinking block with its signature, then the text block', async () => {
		const r = await ant.messages.create({ model: 'think', max_tokens: 32, messages: user('Hi'),
			thinking: { type: 'enabled', budget_tokens: 1024 } });
		assert.equal(r.content.length, 2);
		assert.equal(r.content[0].type, 'thinking');
		assert.equal(r.content[0].thinking, THOUGHT);
		assert.equal(typeof r.content[0].signature, 'string');
		assert.ok(r.content[0].signature.length > 8);
		assert.deepEqual(r.content[1], { type: 'text', text: ANSWER });
		assert.equal(r.stop_reason, 'end_turn');
		// the template's default is to think too
		const d = await ant.messages.create({ model: 'think', max_tokens: 32, messages: user('Hi') });
		assert.deepEqual(d.content.map((b) => b.type), ['thinking', 'text']);
	});

	it('Anthropic stream: thinking_delta events, a signature_delta, then text; finalMessage as the plain reply', async () => {
		const s = ant.messages.stream({ model: 'think', max_tokens: 32, messages: user('Hi') });
		const kinds = [];
		s.on('streamEvent', (e) => {
			if (e.type === 'content_block_start') kinds.push(`start:${e.content_block.type}`);
			if (e.type === 'content_block_delta') kinds.push(e.delta.type);
		});
		let thinkingText = '';
		s.on('thinking', (delta) => { thinkingText += delta; });
		const m = await s.finalMessage();
		assert.equal(thinkingText, THOUGHT);
		assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
		assert.equal(m.content[0].thinking, THOUGHT);
		assert.equal(m.content[1].text, ANSWER);
		const plain = await ant.messages.create({ model: 'think', max_tokens: 32, messages: user('Hi') });
		assert.equal(m.content[0].signature, plain.content[0].signature, 'the signature is the same streamed or not');
		const first = (k) => kinds.indexOf(k), last = (k) => kinds.lastIndexOf(k);
		assert.equal(kinds[0], 'start:thinking');
		assert.ok(first('signature_delta') > last('thinking_delta'));
		assert.ok(first('start:text') > first('signature_delta'));
		assert.ok(first('text_delta') > first('start:text'));
	});

	it('Anthropic thinking disabled: the no-think prompt, only a text block', async () => {
		const r = await ant.messages.create({ model: 'think', max_tokens: 32, messages: user('Hi'),
			thinking: { type: 'disabled' } });
		assert.deepEqual(r.content, [{ type: 'text', text: ANSWER }]);
		const s = ant.messages.stream({ model: 'think', max_tokens: 32, messages: user('Hi'), thinking: { type: 'disabled' } });
		const m = await s.finalMessage();
		assert.deepEqual(m.content, [{ type: 'text', text: ANSWER }]);
	});

	it('Anthropic history: thinking, tool_use and tool_result blocks are taken', async () => {
		const tools = [{ name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
		const history = [
			{ role: 'user', content: 'Weather in Paris?' },
			{ role: 'assistant', content: [
				{ type: 'thinking', thinking: 'I need the tool.', signature: 'anedvd-0' },
				{ type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } }] },
			{ role: 'user', content: [
				{ type: 'tool_result', tool_use_id: 'toolu_01', content: '21 C, sunny' },
				{ type: 'text', text: 'Thanks!' }] },
		];
		const r = await ant.messages.create({ model: 'think', max_tokens: 32, messages: history, tools });
		assert.equal(r.stop_reason, 'end_turn');
		const n = await ant.messages.countTokens({ model: 'think', messages: history, tools });
		const n0 = await ant.messages.countTokens({ model: 'think', messages: history.slice(0, 1), tools });
		assert.ok(n.input_tokens > n0.input_tokens + 10);
	});

	it('bad input: a 400 in each dialect\'s shape, naming the field', async () => {
		const bad = async (p, re, param) => {
			const e = await p.then(() => null, (x) => x);
			assert.ok(e, 'the request was refused');
			assert.equal(e.status, 400, String(e));
			assert.match(e.message, re);
			if (param) assert.equal(e.error?.error?.param ?? e.param, param);
		};
		await bad(oai.chat.completions.create({ model: 'think', messages: [{ role: 'user', content: 'x' },
			{ role: 'tool', tool_call_id: 'nope', content: 'r' }] }), /answers no tool call/, 'messages[1].tool_call_id');
		await bad(oai.chat.completions.create({ model: 'think', messages: user('x'), reasoning_effort: 'extreme' }),
			/reasoning_effort/, 'reasoning_effort');
		await bad(oai.chat.completions.create({ model: 'think', messages: user('x'), chat_template_kwargs: { messages: [] } }),
			/chat_template_kwargs\.messages/, 'chat_template_kwargs');
		await bad(oai.chat.completions.create({ model: 'think', messages: user('x'), tools: [{ type: 'function' }] }),
			/tools\[0\]\.function' must be an object/, 'tools[0].function');
		await bad(ant.messages.create({ model: 'think', max_tokens: 8, messages: user('x'), thinking: { type: 'sometimes' } }),
			/thinking\.type/);
		await bad(ant.messages.create({ model: 'think', max_tokens: 8, messages: [{ role: 'user', content: [
			{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'r' }] }] }), /answers no tool call/);
		await bad(ant.messages.create({ model: 'think', max_tokens: 8, messages: [{ role: 'user', content: [
			{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] }),
			/'image' blocks are not supported/);
	});

	it('a template\'s raise_exception() is a 400 with its message (Gemma 2: no system role)', async () => {
		const g = new OpenAI({ baseURL: `${gemma.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		const e = await g.chat.completions.create({ model: 'g', max_tokens: 8, messages: [
			{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }] }).then(() => null, (x) => x);
		assert.ok(e);
		assert.equal(e.status, 400);
		assert.match(e.message, /chat template: System role not supported/);
		const ga = new Anthropic({ baseURL: gemma.base, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
		const e2 = await ga.messages.create({ model: 'g', max_tokens: 8, system: 'Be brief.', messages: user('Hi') })
			.then(() => null, (x) => x);
		assert.equal(e2?.status, 400);
		assert.equal(e2.error.error.type, 'invalid_request_error');
		// without a system message the same server answers (Gemma's turns, no thinking)
		const ok = await g.chat.completions.create({ model: 'g', max_tokens: 8, messages: user('Hi') });
		assert.equal(ok.choices[0].message.reasoning_content, undefined);
	});
});

// The stop set is the tokenizer's: every id its end-of-generation list holds,
// not EOS and EOT alone. The same scripted model written with EOS = EOT = </s>
// still ends its reply with <|im_end|>, which the tokenizer counts as a further
// end-of-generation id: the HTTP server and `anedvd run` stop there.
describe('an end-of-generation id beyond EOS and EOT', { skip }, () => {
	let rt, srv, model, oai;

	before(async () => {
		rt = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-eog-'));
		model = path.join(rt, 'eog.gguf');
		execFileSync(GEN, ['think', 'f16', '0', model, '--template',
			path.join(DATA, 'templates', 'Qwen-Qwen3-0.6B.jinja'), '--eos', '2']);
		srv = await serve(rt, model);
		oai = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});

	after(async () => {
		if (srv && srv.srv.exitCode === null && srv.srv.signalCode === null) srv.srv.kill('SIGKILL');
		if (rt && process.env.ANEDVD_KEEP_TMP) console.error(`kept ${rt} (ANEDVD_KEEP_TMP)`);
		else if (rt) fs.rmSync(rt, { recursive: true, force: true });
	});

	it('the tokenizer lists <|im_end|> beside EOS and EOT', async () => {
		const t = await post(srv.base, '/tokenize', { content: '<|im_end|>', add_special: false, parse_special: true });
		assert.equal(t.status, 200);
		assert.equal(t.body.tokens.length, 1);
		const props = await (await fetch(`${srv.base}/props`)).json();
		assert.equal(props.eos_token, '</s>');
	});

	it('OpenAI chat stops on it: finish_reason stop, nothing after the answer', async () => {
		const r = await oai.chat.completions.create({ model: 'eog', messages: user('Hi'), max_tokens: 24,
			reasoning_effort: 'none' });
		assert.equal(r.choices[0].message.content, ANSWER);
		assert.equal(r.choices[0].finish_reason, 'stop');
		assert.equal(r.usage.completion_tokens, 2); // Hello !
		const s = await oai.chat.completions.create({ model: 'eog', messages: user('Hi'), max_tokens: 24, stream: true });
		let content = '', finish = null;
		for await (const c of s) {
			content += c.choices[0]?.delta?.content ?? '';
			finish = c.choices[0]?.finish_reason ?? finish;
		}
		assert.equal(content, ANSWER);
		assert.equal(finish, 'stop');
	});

	it('anedvd run stops on it too', () => {
		const out = execFileSync(BIN, ['run', '--model', model, '--prompt', 'Hi', '--max-tokens', '24', '--json'], {
			env: { ...process.env, XDG_RUNTIME_DIR: rt }, stdio: ['ignore', 'pipe', 'ignore'],
		});
		const j = JSON.parse(out.toString());
		assert.equal(j.stop, 'stop');
		assert.ok(j.text.endsWith(ANSWER), j.text);
		assert.equal(j.ids.length, 8); // <think> Let " me" " think." </think> \n\n Hello ! (then <|im_end|>)
	});

	it('and so does the reference engine (anedvd cpu)', () => {
		const out = execFileSync(BIN, ['cpu', '--model', model, '--prompt', 'Hi', '--chat', '--max-tokens', '24', '--json'], {
			stdio: ['ignore', 'pipe', 'ignore'],
		});
		const g = JSON.parse(out.toString()).generated_ids;
		assert.equal(g.length, 9, JSON.stringify(g)); // the 8 above and <|im_end|>, where it stopped
	});
});
