// web.test.mjs - the WebUI in a real browser (Debian's chromium driven by
// playwright-core), against tests/web/mock-server.mjs by default or against
// a running anedvd when ANEDVD_WEB_URL is set (e.g. http://127.0.0.1:8080);
// tests that need the mock's scripted replies are skipped then.
//
//   cd tests/web && npm ci && node --test
//
// Environment: ANEDVD_WEB_URL (server to test), CHROMIUM (browser binary,
// default /usr/bin/chromium), ANEDVD_WEB_ARTIFACTS (where screenshots go,
// default tests/web/artifacts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { startMock, REPLY, MODEL, THOUGHT, THOUGHT_REPLY } from './mock-server.mjs';
import { PAGE, scriptHash, policyHash } from './csp.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const EXTERNAL = (process.env.ANEDVD_WEB_URL || '').replace(/\/+$/, '');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.ANEDVD_WEB_ARTIFACTS || path.join(here, 'artifacts');
const MOCK_ONLY = EXTERNAL ? 'needs the scripted mock API' : false;
// a real model may be slow: give it more time
const WAIT = EXTERNAL ? 180000 : 30000;
const T = { timeout: EXTERNAL ? 600000 : 90000 };

let base, mock, ctx, profile;

before(async () => {
	if (!fs.existsSync(CHROMIUM))
		throw new Error(`no browser at ${CHROMIUM}: install the Debian package 'chromium' (or set CHROMIUM)`);
	if (EXTERNAL) {
		base = EXTERNAL;
	} else {
		mock = await startMock();
		base = mock.url;
	}
	fs.mkdirSync(ARTIFACTS, { recursive: true });
	profile = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-web-profile-'));
	ctx = await chromium.launchPersistentContext(profile, {
		executablePath: CHROMIUM,
		headless: true,
		viewport: { width: 1280, height: 800 },
		args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
			'--disable-background-networking', '--disable-component-update', '--disable-sync',
			'--disable-dev-shm-usage'],
	});
	ctx.setDefaultTimeout(WAIT);
});

after(async () => {
	if (ctx) await ctx.close();
	if (mock) await mock.close();
	if (profile) fs.rmSync(profile, { recursive: true, force: true });
});

// a fresh page on an empty localStorage; records chat request bodies and
// page errors
async function open(viewport) {
	const page = await ctx.newPage();
	if (viewport) await page.setViewportSize(viewport);
	page.bodies = [];
	page.errors = [];
	page.on('pageerror', (e) => page.errors.push(String(e)));
	page.on('console', (m) => { if (m.type() === 'error') page.errors.push(m.text()); });
	page.on('request', (r) => {
		if (r.method() === 'POST' && r.url().endsWith('/v1/chat/completions'))
			page.bodies.push(JSON.parse(r.postData()));
	});
	await page.goto(base + '/');
	await page.evaluate(() => localStorage.clear());
	await page.reload();
	await page.waitForFunction(() => {
		const m = document.getElementById('model');
		return m && m.textContent !== '…';
	});
	return page;
}

// errors the page itself logs, minus the ones a test provokes on purpose
function pageErrors(page) {
	return page.errors.filter((e) => !/Failed to load resource|ERR_CONNECTION_REFUSED|503/.test(e));
}

async function say(page, text) {
	await page.fill('#input', text);
	await page.press('#input', 'Enter');
}

// wait until there are n assistant messages and the last one is finished
async function waitReply(page, n) {
	await page.waitForFunction((n) => {
		const a = document.querySelectorAll('.msg.assistant');
		return a.length >= n && !a[n - 1].hasAttribute('aria-busy') &&
			!document.getElementById('send').hidden;
	}, n);
	return page.locator('.msg.assistant').nth(n - 1);
}

async function mockRequests() {
	const r = await fetch(base + '/__mock/requests');
	return r.json();
}

test('the page loads: model name, online status, empty conversation, labelled controls', T, async () => {
	const page = await open();
	assert.equal(await page.title(), 'anedvd');
	const model = await page.textContent('#model');
	if (!EXTERNAL) assert.equal(model, MODEL);
	else assert.ok(model && !/unknown|no model/.test(model), `model chip: ${model}`);
	await page.waitForSelector('#status[data-state="online"]');
	assert.equal(await page.locator('.msg').count(), 0);
	assert.ok(await page.isVisible('#empty'));
	// every form control has an accessible name
	const unnamed = await page.evaluate(() => [...document.querySelectorAll('input, textarea, select, button')]
		.filter((e) => !e.closest('[hidden]'))
		.filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())
		.map((e) => e.outerHTML.slice(0, 80)));
	assert.deepEqual(unnamed, []);
	await page.screenshot({ path: path.join(ARTIFACTS, 'desktop-empty.png') });
	assert.deepEqual(pageErrors(page), []);
	await page.close();
});

test('the status shows a service behind the frontend that is down; the model is fetched once the server is up', T, async () => {
	const page = await ctx.newPage();
	let up = false;
	await page.route('**/health', (r) => up ? r.continue() : r.fulfill({
		status: 200, contentType: 'application/json',
		body: JSON.stringify({ status: 'degraded', tokenizer: 'up', engine: 'down', running: 0, queued: 0 }),
	}));
	await page.route('**/v1/models', (r) => up ? r.continue() : r.abort('connectionrefused'));
	await page.goto(base + '/');
	await page.waitForSelector('#status[data-state="offline"]');
	assert.equal(await page.textContent('#status-text'), 'engine down');
	assert.equal(await page.textContent('#model'), 'model unknown');
	up = true;
	await page.evaluate(() => window.dispatchEvent(new Event('online')));
	await page.waitForSelector('#status[data-state="online"]');
	await page.waitForFunction(() => !/unknown/.test(document.getElementById('model').textContent));
	if (!EXTERNAL) assert.equal(await page.textContent('#model'), MODEL);
	await page.close();
});

test('a reply streams in piece by piece and is rendered safely and completely', T, async () => {
	const page = await open();
	await say(page, 'Hi there');
	const snaps = [];
	const t0 = Date.now();
	for (;;) {
		const s = await page.evaluate(() => {
			const a = [...document.querySelectorAll('.msg.assistant')].pop();
			if (!a) return null;
			const c = a.querySelector('.content');
			return { text: c.querySelector('.placeholder') ? '' : c.textContent, busy: a.hasAttribute('aria-busy') };
		});
		if (s && s.text && snaps[snaps.length - 1] !== s.text) snaps.push(s.text);
		if (s && !s.busy) break;
		assert.ok(Date.now() - t0 < WAIT, 'reply did not finish');
		await page.waitForTimeout(20);
	}
	assert.ok(snaps.length >= 3, `saw ${snaps.length} distinct partial states`);
	assert.ok(snaps[0].length < snaps[snaps.length - 1].length);

	const a = page.locator('.msg.assistant').last();
	const meta = await a.locator('.meta').textContent();
	assert.match(meta, /tok\/s/);
	if (!EXTERNAL) {
		// the mock cuts every event (and UTF-8 sequences) across reads
		assert.match(await a.locator('.content p').first().textContent(), /^Hello! Here is a tiny example/);
		assert.equal(await a.locator('.content strong').textContent(), 'bold');
		assert.equal(await a.locator('.content p code').textContent(), 'inline code');
		assert.equal(await a.locator('pre code').textContent(), 'int\nmain(void)\n{\n\treturn 0; /* <not a tag> */\n}');
		assert.equal(await a.locator('pre code').getAttribute('data-lang'), 'c');
		assert.equal(await a.locator('.content p').last().textContent(), 'That is all — ünïcödé 🙂 done.');
		assert.match(meta, /42\.7 tok\/s/);
		assert.match(meta, /21 tokens/);
		assert.match(meta, /prompt tokens in 32 ms \(286 tok\/s\)/);
		assert.match(meta, /34 ms to first token/);
		const sum = a.locator('summary', { hasText: 'stage timings' });
		assert.match(await sum.textContent(), /total 1\.27 s/);
		await sum.click();
		const stages = await a.locator('.stages').textContent();
		for (const s of ['tokenize', 'prefill', 'decode1.23 s', 'detokenize', 'engine', 'kernel980 ms', 'attention', 'ipc'])
			assert.ok(stages.includes(s), s);
		assert.ok(!stages.includes('moe'), 'zero engine stages are left out');
	}
	const b = page.bodies[0];
	assert.equal(b.stream, true);
	assert.deepEqual(b.stream_options, { include_usage: true });
	assert.deepEqual(b.messages, [{ role: 'user', content: 'Hi there' }]);
	assert.equal(b.temperature, 0.7);
	assert.equal(b.top_p, 0.9);
	assert.equal(b.top_k, 40);
	assert.equal(b.repetition_penalty, 1.1);
	assert.equal(b.max_tokens, 512);
	if (!EXTERNAL) assert.equal(b.model, MODEL);
	await page.screenshot({ path: path.join(ARTIFACTS, 'desktop-light.png') });
	await page.emulateMedia({ colorScheme: 'dark' });
	await page.screenshot({ path: path.join(ARTIFACTS, 'desktop-dark.png') });
	await page.click('#btn-settings');
	await page.screenshot({ path: path.join(ARTIFACTS, 'desktop-settings-dark.png') });
	assert.deepEqual(pageErrors(page), []);
	await page.close();
});

test('a thinking model: its thinking streams into a folded block above the answer, stays out of the answer and of the history, and survives a reload', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[think]] hi');
	const a = page.locator('.msg.assistant').last();
	// while it thinks: the block is there, folded, and says so
	const live = a.locator('details.thinking');
	await live.waitFor();
	assert.equal(await live.evaluate((d) => d.open), false, 'folded while streaming');
	await page.waitForFunction(() => {
		const m = [...document.querySelectorAll('.msg.assistant')].pop();
		return m && !m.hasAttribute('aria-busy');
	});
	const d = a.locator('details.thinking');
	assert.equal(await d.count(), 1);
	assert.equal(await d.evaluate((x) => x.open), false, 'folded when done');
	assert.match(await d.locator('summary').textContent(), /^Thinking \(\d+ characters\)$/);
	assert.equal(await d.locator('.thought').textContent(), THOUGHT);
	assert.equal(await d.locator('.thought').isVisible(), false, 'the thinking is not shown until opened');
	// the answer is the answer alone, after the block
	assert.equal(await a.locator('.content').textContent(), THOUGHT_REPLY);
	assert.ok(await a.evaluate((m) => {
		const t = m.querySelector('details.thinking'), c = m.querySelector('.content');
		return !!(t.compareDocumentPosition(c) & Node.DOCUMENT_POSITION_FOLLOWING);
	}), 'the thinking comes before the answer');
	await d.locator('summary').click();
	assert.equal(await d.evaluate((x) => x.open), true);
	assert.equal(await d.locator('.thought').isVisible(), true);
	await page.screenshot({ path: path.join(ARTIFACTS, 'thinking-open.png') });
	// the next turn sends the answer back, not the thinking
	await say(page, 'again');
	await page.waitForFunction(() => !document.querySelector('.msg.assistant[aria-busy]'));
	const b = page.bodies[page.bodies.length - 1];
	assert.deepEqual(b.messages.slice(0, 2), [{ role: 'user', content: '[[think]] hi' }, { role: 'assistant', content: THOUGHT_REPLY }]);
	// a reload draws it folded again
	await page.reload();
	const r = page.locator('.msg.assistant').first().locator('details.thinking');
	await r.waitFor();
	assert.equal(await r.evaluate((x) => x.open), false);
	assert.equal(await r.locator('.thought').textContent(), THOUGHT);
	assert.deepEqual(pageErrors(page), []);
	await page.close();
});

test('stop aborts the stream mid-reply; the partial reply is kept and the UI is usable again', T, async () => {
	const page = await open();
	if (!EXTERNAL) await fetch(base + '/__mock/reset', { method: 'POST' });
	await say(page, EXTERNAL ? 'Count from 1 to 300, one number per line.' : '[[slow]] count for me');
	assert.ok(await page.isVisible('#stop'));
	assert.ok(await page.isHidden('#send'));
	await page.waitForFunction(() => {
		const c = document.querySelector('.msg.assistant .content');
		return c && !c.querySelector('.placeholder') && c.textContent.length > 10;
	});
	await page.screenshot({ path: path.join(ARTIFACTS, 'desktop-streaming.png') });
	await page.click('#stop');
	const a = await waitReply(page, 1);
	const t1 = await a.locator('.content').textContent();
	await page.waitForTimeout(500);
	assert.equal(await a.locator('.content').textContent(), t1, 'text kept growing after stop');
	assert.ok(await a.locator('.tag', { hasText: 'stopped' }).isVisible());
	assert.ok(await page.isHidden('#stop'));
	assert.equal(await page.evaluate(() => document.activeElement.id), 'input');
	if (!EXTERNAL) {
		assert.ok(t1.length < 500, 'the whole reply arrived');
		let rec;
		for (let i = 0; i < 100; i++) {
			rec = (await mockRequests())[0];
			if (rec.aborted) break;
			await page.waitForTimeout(50);
		}
		assert.equal(rec.aborted, true, 'the server saw the connection close');
		assert.equal(rec.completed, false);
	}
	// usable again: the next turn goes out and carries the partial reply
	await say(page, 'thanks');
	await waitReply(page, 2);
	const m = page.bodies[1].messages;
	assert.equal(m.length, 3);
	assert.equal(m[1].role, 'assistant');
	assert.ok(m[1].content.length > 0);
	if (!EXTERNAL) assert.equal(m[1].content, t1, 'the history holds exactly the text shown');
	assert.deepEqual(pageErrors(page), []);
	await page.close();
});

test('Esc stops a reply too', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[slow]] again');
	await page.waitForFunction(() => {
		const c = document.querySelector('.msg.assistant .content');
		return c && !c.querySelector('.placeholder');
	});
	await page.keyboard.press('Escape');
	const a = await waitReply(page, 1);
	assert.ok(await a.locator('.tag', { hasText: 'stopped' }).isVisible());
	await page.close();
});

test('multi-turn: the second request carries the whole history, system prompt first', T, async () => {
	const page = await open();
	await page.click('#btn-settings');
	await page.fill('#set-system', 'You are terse.');
	await page.click('#btn-settings-close');
	await say(page, 'first question');
	const a1 = await waitReply(page, 1);
	await say(page, 'second question');
	await waitReply(page, 2);
	assert.equal(page.bodies.length, 2);
	const m = page.bodies[1].messages;
	assert.deepEqual(m.map((x) => x.role), ['system', 'user', 'assistant', 'user']);
	assert.equal(m[0].content, 'You are terse.');
	assert.equal(m[1].content, 'first question');
	assert.equal(m[3].content, 'second question');
	if (!EXTERNAL) {
		assert.equal(m[2].content, REPLY, 'the reassembled reply is exactly what was streamed');
		const rec = await mockRequests();
		assert.deepEqual(rec[rec.length - 1].body.messages, m);
	} else {
		assert.ok(m[2].content.length > 0);
		assert.ok((await a1.locator('.content').textContent()).length > 0);
	}
	assert.equal(await page.locator('.msg.user').count(), 2);
	await page.close();
});

test('new chat clears the conversation and the history sent', T, async () => {
	const page = await open();
	await say(page, 'remember the word kiwi');
	await waitReply(page, 1);
	await page.click('#btn-reset');
	assert.equal(await page.locator('.msg').count(), 0);
	assert.ok(await page.isVisible('#empty'));
	await say(page, 'what was the word?');
	await waitReply(page, 1);
	assert.deepEqual(page.bodies[1].messages, [{ role: 'user', content: 'what was the word?' }]);
	await page.close();
});

test('reset during a reply aborts it', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[slow]] long one');
	await page.waitForFunction(() => {
		const c = document.querySelector('.msg.assistant .content');
		return c && !c.querySelector('.placeholder');
	});
	await page.click('#btn-reset');
	await page.waitForSelector('#send', { state: 'visible' });
	assert.equal(await page.locator('.msg').count(), 0);
	await say(page, 'fresh');
	await waitReply(page, 1);
	assert.deepEqual(page.bodies[1].messages, [{ role: 'user', content: 'fresh' }]);
	await page.close();
});

test('Regenerate replaces the last reply and sends the same history', T, async () => {
	const page = await open();
	await say(page, 'q1');
	await waitReply(page, 1);
	await page.locator('.msg.assistant [data-regen]').click();
	await page.waitForFunction(() => document.querySelectorAll('.msg.assistant').length === 1 &&
		!document.querySelector('.msg.assistant').hasAttribute('aria-busy') && !document.getElementById('send').hidden &&
		document.querySelector('.msg.assistant .meta'));
	assert.equal(page.bodies.length, 2);
	assert.deepEqual(page.bodies[1].messages, page.bodies[0].messages);
	await say(page, 'q2');
	await waitReply(page, 2);
	assert.ok(await page.locator('.msg.assistant').nth(0).locator('[data-regen]').isHidden());
	assert.ok(await page.locator('.msg.assistant').nth(1).locator('[data-regen]').isVisible());
	assert.deepEqual(page.bodies[2].messages.map((m) => m.content.slice(0, 2)), ['q1', page.bodies[2].messages[1].content.slice(0, 2), 'q2']);
	await page.close();
});

test('the chat survives a reload of the tab; New chat clears it', T, async () => {
	const page = await open();
	await say(page, 'keep me');
	await waitReply(page, 1);
	const before = await page.locator('.msg.assistant .content').textContent();
	await page.reload();
	await page.waitForSelector('.msg.assistant');
	assert.equal(await page.locator('.msg.user .content').textContent(), 'keep me');
	assert.equal(await page.locator('.msg.assistant .content').textContent(), before);
	assert.match(await page.locator('.msg.assistant .meta').textContent(), /tok\/s/);
	await say(page, 'and me');
	await waitReply(page, 2);
	assert.deepEqual(page.bodies[1].messages.map((m) => m.role), ['user', 'assistant', 'user']);
	await page.click('#btn-reset');
	await page.reload();
	await page.waitForSelector('#empty', { state: 'visible' });
	assert.equal(await page.locator('.msg').count(), 0);
	// a corrupt store is ignored
	await page.evaluate(() => sessionStorage.setItem('anedvd.webui.chat.v1', '[{"role":"user"},{"role":"x","content":1},'));
	await page.reload();
	await page.waitForSelector('#empty', { state: 'visible' });
	assert.deepEqual(pageErrors(page), []);
	await page.close();
});

test('settings persist across a reload, are clamped, and go into the request', T, async () => {
	const page = await open();
	await page.click('#btn-settings');
	assert.equal(await page.getAttribute('#btn-settings', 'aria-expanded'), 'true');
	await page.fill('#set-system', 'Answer in French.');
	await page.fill('#set-temperature', '0.35');
	await page.fill('#set-top_p', '0.5');
	await page.fill('#set-top_k', '7');
	await page.fill('#set-repetition_penalty', '1.3');
	await page.fill('#set-max_tokens', '64');
	// out of range: clamped when the field is left
	await page.fill('#set-top_k', '5000');
	await page.press('#set-top_k', 'Tab');
	assert.equal(await page.inputValue('#set-top_k'), '1000');
	await page.fill('#set-top_k', '7');
	await page.press('#set-top_k', 'Tab');
	await page.reload();
	await page.click('#btn-settings');
	assert.equal(await page.inputValue('#set-system'), 'Answer in French.');
	assert.equal(await page.inputValue('#set-temperature'), '0.35');
	assert.equal(await page.inputValue('#set-top_p'), '0.5');
	assert.equal(await page.inputValue('#set-top_k'), '7');
	assert.equal(await page.inputValue('#set-repetition_penalty'), '1.3');
	assert.equal(await page.inputValue('#set-max_tokens'), '64');
	await page.keyboard.press('Escape');
	assert.ok(await page.isHidden('#settings'));
	await say(page, 'bonjour');
	await waitReply(page, 1);
	const b = page.bodies[0];
	assert.equal(b.temperature, 0.35);
	assert.equal(b.top_p, 0.5);
	assert.equal(b.top_k, 7);
	assert.equal(b.repetition_penalty, 1.3);
	assert.equal(b.max_tokens, 64);
	assert.deepEqual(b.messages[0], { role: 'system', content: 'Answer in French.' });
	// garbage in storage falls back to defaults
	await page.evaluate(() => localStorage.setItem('anedvd.webui.settings.v1', '{"temperature":"hot","top_k":-3,'));
	await page.reload();
	await page.click('#btn-settings');
	assert.equal(await page.inputValue('#set-temperature'), '0.7');
	await page.click('#btn-defaults');
	assert.equal(await page.inputValue('#set-top_k'), '40');
	await page.close();
});

test('an API key: asked for once on a 401, sent as Bearer, kept in localStorage, asked again when refused', { ...T, skip: MOCK_ONLY }, async () => {
	const KEY = 'sk-web-4f2a';
	const page = await ctx.newPage();
	page.errors = [];
	const seen = [];
	// the server as `serve --api-key`: every /v1 call needs the key
	await page.route('**/v1/**', (r) => {
		const auth = r.request().headers()['authorization'] || null;
		seen.push(auth);
		if (auth === 'Bearer ' + KEY) return r.continue();
		return r.fulfill({ status: 401, contentType: 'application/json', headers: { 'www-authenticate': 'Bearer' },
			body: JSON.stringify({ error: { message: 'invalid API key', type: 'invalid_request_error', param: null, code: 'invalid_api_key' } }) });
	});
	await page.goto(base + '/');
	await page.evaluate(() => localStorage.clear());
	await page.reload();
	await page.waitForSelector('#settings:not([hidden])');
	assert.equal(await page.evaluate(() => document.activeElement.id), 'set-apikey');
	assert.match(await page.textContent('#hint-apikey'), /needs an API key/);
	assert.equal(await page.getAttribute('#set-apikey', 'type'), 'password');
	await page.fill('#set-apikey', KEY);
	await page.press('#set-apikey', 'Tab');
	await page.waitForFunction((m) => document.getElementById('model').textContent === m, MODEL);
	await page.keyboard.press('Escape');
	await say(page, 'hello with a key');
	const a = await waitReply(page, 1);
	assert.match(await a.textContent(), /tiny example/);
	assert.equal(seen.at(-1), 'Bearer ' + KEY);
	// after a reload the stored key is used: no question
	await page.reload();
	await page.waitForFunction((m) => document.getElementById('model').textContent === m, MODEL);
	assert.ok(await page.isHidden('#settings'));
	assert.equal(await page.evaluate(() => localStorage.getItem('anedvd.webui.apikey.v1')), KEY);
	// Restore defaults keeps the key
	await page.click('#btn-settings');
	await page.click('#btn-defaults');
	assert.equal(await page.inputValue('#set-apikey'), KEY);
	// a stored key the server refuses: asked again, saying so
	await page.evaluate(() => localStorage.setItem('anedvd.webui.apikey.v1', 'stale'));
	await page.reload();
	await page.waitForSelector('#settings:not([hidden])');
	assert.match(await page.textContent('#hint-apikey'), /refused/);
	assert.deepEqual(page.errors.filter((e) => !/Failed to load resource|401/.test(e)), []);
	await page.close();
});

test('a truncated prompt shows a notice with the number of dropped tokens', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[trunc]] a very long question');
	const a = await waitReply(page, 1);
	const note = a.locator('.note[data-kind="truncated"]');
	assert.ok(await note.isVisible());
	assert.match(await note.textContent(), /oldest 37 prompt tokens were left out/);
	// a normal reply has no such notice
	await say(page, 'short');
	const a2 = await waitReply(page, 2);
	assert.equal(await a2.locator('.note').count(), 0);
	await page.close();
});

test('timings in the compact shape (decode_tok_s, stages) are shown too', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[stages]] hi');
	const a = await waitReply(page, 1);
	assert.match(await a.locator('.meta').textContent(), /17\.5 tok\/s/);
	await a.locator('summary', { hasText: 'stage timings' }).click();
	const stages = await a.locator('.stages').textContent();
	assert.equal(stages, 'tokenize0.4 msprefill32 msdecode1.23 s');
	await page.close();
});

test('a busy server (503) shows a notice and Retry; the unanswered turn is not resent', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[busy]] hello?');
	const a = await waitReply(page, 1);
	const note = a.locator('.note[data-kind="busy"]');
	assert.ok(await note.isVisible());
	const txt = await note.textContent();
	assert.match(txt, /busy/);
	assert.match(txt, /Try again in 2 s/);
	assert.match(txt, /the engine is busy with another request/);
	assert.equal(await page.getAttribute('#status', 'data-state'), 'busy');
	await page.setViewportSize({ width: 390, height: 500 });
	await page.screenshot({ path: path.join(ARTIFACTS, 'phone-busy.png') });
	await page.setViewportSize({ width: 1280, height: 800 });
	assert.ok(await page.locator('.msg.user').first().evaluate((e) => e.classList.contains('excluded')));
	// Retry sends it again (still busy)
	await note.locator('button', { hasText: 'Retry' }).click();
	await waitReply(page, 1);
	assert.equal(page.bodies.length, 2);
	assert.deepEqual(page.bodies[1].messages, [{ role: 'user', content: '[[busy]] hello?' }]);
	// a new message leaves the unanswered one out
	await say(page, 'hello again');
	await waitReply(page, 2);
	assert.deepEqual(page.bodies[2].messages, [{ role: 'user', content: 'hello again' }]);
	assert.equal(await page.locator('.note button[data-retry]').count(), 0);
	assert.equal(await page.getAttribute('#status', 'data-state'), 'online');
	await page.close();
});

test('CRLF events and "data:" without a space are read the same', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[crlf]] hi');
	const a = await waitReply(page, 1);
	assert.equal(await a.locator('pre code').textContent(), 'int\nmain(void)\n{\n\treturn 0; /* <not a tag> */\n}');
	assert.match(await a.locator('.meta').textContent(), /42\.7 tok\/s/);
	await say(page, 'next');
	await waitReply(page, 2);
	assert.equal(page.bodies[1].messages[1].content, REPLY);
	await page.close();
});

test('an error event mid-stream keeps the partial reply and says why it ended', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[fail]] go');
	const a = await waitReply(page, 1);
	const note = a.locator('.note[data-kind="stream"]');
	assert.match(await note.textContent(), /cut off: the engine stopped: worker crashed/);
	await page.emulateMedia({ colorScheme: 'dark' });
	await page.setViewportSize({ width: 700, height: 420 });
	await page.screenshot({ path: path.join(ARTIFACTS, 'error-dark.png') });
	assert.match(await a.locator('.content').textContent(), /^Hello! Here is/);
	assert.equal(await page.getAttribute('#status', 'data-state'), 'online');
	await page.close();
});

test('a connection cut mid-stream keeps the partial reply and says so', { ...T, skip: MOCK_ONLY }, async () => {
	const page = await open();
	await say(page, '[[drop]] go');
	const a = await waitReply(page, 1);
	assert.match(await a.locator('.note').textContent(), /cut off/);
	assert.match(await a.locator('.content').textContent(), /^Hello! Here is/);
	await say(page, 'again');
	await waitReply(page, 2);
	assert.equal(page.bodies[1].messages.length, 3, 'the partial reply stays in the history');
	await page.close();
});

test('a plain JSON answer (no stream) is shown too', T, async () => {
	const page = await open();
	await page.route('**/v1/chat/completions', (r) => r.fulfill({
		status: 200, contentType: 'application/json',
		body: JSON.stringify({
			id: 'x', object: 'chat.completion', model: 'm',
			choices: [{ index: 0, message: { role: 'assistant', content: 'plain answer' }, finish_reason: 'length' }],
			usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7, prompt_tokens_dropped: 3 },
		}),
	}));
	await say(page, 'hello');
	const a = await waitReply(page, 1);
	assert.equal(await a.locator('.content').textContent(), 'plain answer');
	const meta = await a.locator('.meta').textContent();
	assert.match(meta, /max tokens reached/);
	assert.match(meta, /5 prompt tokens/);
	assert.match(await a.locator('.note[data-kind="truncated"]').textContent(), /oldest 3 prompt tokens/);
	await page.close();
});

test('an unreachable server shows a notice; Retry works once it is back', T, async () => {
	const page = await open();
	await page.route('**/v1/chat/completions', (r) => r.abort('connectionrefused'));
	await say(page, 'anyone there?');
	const a = await waitReply(page, 1);
	const note = a.locator('.note[data-kind="unreachable"]');
	assert.ok(await note.isVisible());
	assert.match(await note.textContent(), /Cannot reach the server/);
	assert.equal(await page.getAttribute('#status', 'data-state'), 'offline');
	await page.unroute('**/v1/chat/completions');
	await note.locator('button', { hasText: 'Retry' }).click();
	const a2 = await waitReply(page, 1);
	assert.equal(await a2.locator('.note').count(), 0);
	assert.ok((await a2.locator('.content').textContent()).length > 0);
	assert.equal(await page.getAttribute('#status', 'data-state'), 'online');
	await page.close();
});

test('markup in a reply or a message is shown as text, never run', T, async () => {
	const page = await open();
	const evil = '<img src=x onerror="window.__pwned=9"><script>window.__pwned=8</script>';
	await say(page, (EXTERNAL ? '' : '[[html]] ') + evil);
	const a = await waitReply(page, 1);
	assert.equal(await page.evaluate(() => window.__pwned), undefined);
	assert.equal(await page.locator('#log img, #log script, #log iframe, .content b').count(), 0);
	assert.ok((await page.locator('.msg.user .content').textContent()).includes(evil));
	if (!EXTERNAL) {
		const t = await a.locator('.content').textContent();
		assert.ok(t.includes('<img src=x onerror="window.__pwned=1">'));
		assert.ok(t.includes('<script>window.__pwned=2</script>'));
		assert.equal(await a.locator('pre code').textContent(), '<script>window.__pwned=3</script>');
	}
	await page.close();
});

test('the Content-Security-Policy allows the page\'s own script and nothing injected', T, async () => {
	const html = fs.readFileSync(PAGE, 'utf8');
	assert.equal(policyHash(html), scriptHash(html), 'the script changed: run node tests/web/csp.mjs');
	const page = await open();
	// markup forced into the page (as a rendering bug would) still runs nothing
	await page.evaluate(() => {
		document.getElementById('log').insertAdjacentHTML('beforeend',
			'<img src="x" onerror="window.__csp=1"><span onclick="window.__csp=2" id="csp-probe">x</span>');
		const s = document.createElement('script');
		s.textContent = 'window.__csp = 3';
		document.body.append(s);
	});
	await page.click('#csp-probe');
	await page.waitForTimeout(200);
	assert.equal(await page.evaluate(() => window.__csp), undefined);
	// and it cannot send anything elsewhere
	const blocked = await page.evaluate(async () => {
		const seen = [];
		document.addEventListener('securitypolicyviolation', (e) => seen.push(e.effectiveDirective));
		await fetch('http://127.0.0.2:9/x').catch(() => null);
		await new Promise((r) => setTimeout(r, 100));
		return seen;
	});
	// one report per policy: the page's meta tag, and anedvd's header too
	assert.ok(blocked.length >= 1 && blocked.every((d) => d === 'connect-src'), JSON.stringify(blocked));
	if (EXTERNAL) assert.equal(blocked.length, 2, 'the header policy is enforced beside the meta tag');
	await page.close();
});

test('Enter sends, Shift+Enter adds a line', T, async () => {
	const page = await open();
	await page.click('#input');
	await page.keyboard.type('line one');
	await page.keyboard.press('Shift+Enter');
	await page.keyboard.type('line two');
	assert.equal(await page.inputValue('#input'), 'line one\nline two');
	assert.equal(page.bodies.length, 0);
	await page.keyboard.press('Enter');
	await waitReply(page, 1);
	assert.equal(page.bodies[0].messages[0].content, 'line one\nline two');
	assert.equal(await page.inputValue('#input'), '');
	// blank input sends nothing
	await page.keyboard.press('Enter');
	await page.waitForTimeout(200);
	assert.equal(page.bodies.length, 1);
	await page.close();
});

test('375 px wide: no horizontal overflow, settings fit, screenshots', T, async () => {
	const page = await open({ width: 375, height: 740 });
	await say(page, (EXTERNAL ? '' : '[[wide]] ') + 'a long unbroken word: ' + 'w'.repeat(120));
	await waitReply(page, 1);
	if (!EXTERNAL) {
		await say(page, '[[trunc]] and the code');
		await waitReply(page, 2);
	}
	const overflow = () => page.evaluate(() => {
		const vw = document.documentElement.clientWidth;
		const bad = [];
		if (document.documentElement.scrollWidth > vw) bad.push('document ' + document.documentElement.scrollWidth);
		for (const e of document.querySelectorAll('body *')) {
			if (e.closest('pre') && e.tagName !== 'PRE') continue;  // code scrolls inside its box
			if (e.closest('[hidden]') || e.classList.contains('sr-only')) continue;
			const r = e.getBoundingClientRect();
			if (r.width && (r.right > vw + 0.5 || r.left < -0.5)) bad.push(e.tagName + '.' + e.className + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
		}
		return bad;
	});
	assert.deepEqual(await overflow(), []);
	await page.screenshot({ path: path.join(ARTIFACTS, 'phone-light.png') });
	await page.emulateMedia({ colorScheme: 'dark' });
	await page.screenshot({ path: path.join(ARTIFACTS, 'phone-dark.png') });
	await page.click('#btn-settings');
	assert.deepEqual(await overflow(), []);
	await page.screenshot({ path: path.join(ARTIFACTS, 'phone-settings-dark.png') });
	await page.close();
});
