// The official clients (openai, @anthropic-ai/sdk) against a frontend
// started with --api-key: the right key works for every kind of call,
// streams included; a wrong or missing key is the SDK's AuthenticationError
// (HTTP 401, Anthropic's authentication_error), and nothing reaches the
// engine.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';

import { startStack } from '../http/harness.mjs';

const KEY = 'sk-anedvd-test-7f3c9a';
const user = (content) => [{ role: 'user', content }];
const opts = { maxRetries: 0, timeout: 20000 };

describe('official SDKs with an API key', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--api-key', 'another-key', '--api-key', KEY] });
	});
	after(async () => {
		await s?.stop();
	});

	it('openai: the right key works (models, chat, stream, completions)', async () => {
		const oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: KEY, ...opts });
		const ids = [];
		for await (const m of oai.models.list()) ids.push(m.id);
		assert.deepEqual(ids, ['stories260K']);
		const r = await oai.chat.completions.create({ model: 'm', messages: user('ECHO:Keyed.') });
		assert.equal(r.choices[0].message.content.trim(), 'Keyed.');
		const final = await oai.chat.completions.stream({ model: 'm', messages: user('ECHO:Keyed stream.') }).finalChatCompletion();
		assert.equal(final.choices[0].message.content.trim(), 'Keyed stream.');
		const c = await oai.completions.create({ model: 'm', prompt: 'ECHO:Legacy.', max_tokens: 10 });
		assert.equal(c.choices[0].text.trim(), 'Legacy.');
	});

	it('openai: a wrong or missing key is an AuthenticationError (401, invalid_api_key)', async () => {
		const jobs = (s.events().match(/generate/g) || []).length;
		for (const o of [{ apiKey: 'wrong' }, { apiKey: KEY.slice(0, -1) }, { apiKey: 'x', defaultHeaders: { Authorization: null } }]) {
			const oai = new OpenAI({ baseURL: `${s.base}/v1`, ...o, ...opts });
			await assert.rejects(oai.chat.completions.create({ model: 'm', messages: user('ECHO:no') }), (e) => {
				assert.ok(e instanceof OpenAI.AuthenticationError, `${e.constructor.name}: ${e.message}`);
				assert.equal(e.status, 401);
				assert.equal(e.code, 'invalid_api_key');
				return true;
			});
			await assert.rejects(oai.models.list(), OpenAI.AuthenticationError);
			await assert.rejects(
				(async () => {
					for await (const _ of await oai.chat.completions.create({ model: 'm', messages: user('ECHO:no'), stream: true }));
				})(),
				OpenAI.AuthenticationError,
			);
		}
		assert.equal((s.events().match(/generate/g) || []).length, jobs, 'no job reached the engine');
	});

	it('anthropic: the right key works (messages, stream, models)', async () => {
		const ant = new Anthropic({ baseURL: s.base, apiKey: KEY, ...opts });
		const m = await ant.messages.create({ model: 'm', max_tokens: 30, messages: user('ECHO:Keyed message.') });
		assert.equal(m.content[0].text.trim(), 'Keyed message.');
		const final = await ant.messages.stream({ model: 'm', max_tokens: 30, messages: user('ECHO:Keyed events.') }).finalMessage();
		assert.equal(final.content[0].text.trim(), 'Keyed events.');
		const ids = [];
		for await (const x of ant.models.list()) ids.push(x.id);
		assert.deepEqual(ids, ['stories260K']);
	});

	it('anthropic: a wrong or missing key is an AuthenticationError (authentication_error)', async () => {
		const jobs = (s.events().match(/generate/g) || []).length;
		for (const o of [{ apiKey: 'wrong' }, { apiKey: 'x', defaultHeaders: { 'x-api-key': null, authorization: null } }]) {
			const ant = new Anthropic({ baseURL: s.base, ...o, ...opts });
			await assert.rejects(ant.messages.create({ model: 'm', max_tokens: 5, messages: user('ECHO:no') }), (e) => {
				assert.ok(e instanceof Anthropic.AuthenticationError, `${e.constructor.name}: ${e.message}`);
				assert.equal(e.status, 401);
				assert.equal(e.error.error.type, 'authentication_error');
				return true;
			});
			await assert.rejects(ant.messages.stream({ model: 'm', max_tokens: 5, messages: user('ECHO:no') }).finalMessage(), Anthropic.AuthenticationError);
		}
		assert.equal((s.events().match(/generate/g) || []).length, jobs, 'no job reached the engine');
	});
});
