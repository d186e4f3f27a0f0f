// live.test.mjs - the WebUI in Debian's chromium against a real anedvd
// (ANEDVD_WEB_URL, started by live-run.sh): a long reply streams in piece by
// piece, Stop ends it and the server lets go of the request, and a reload
// finds the settings and the conversation kept. Against a second one
// started with --api-key (ANEDVD_WEB_KEY_URL, ANEDVD_WEB_KEY): the page asks
// for the key on the server's own 401, a reply comes once it is given, the
// key is kept across a reload and asked for again when refused. Screenshots
// go to ANEDVD_WEB_ARTIFACTS (live-*.png). Skipped without ANEDVD_WEB_URL.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const here = path.dirname(fileURLToPath(import.meta.url));
const BASE = (process.env.ANEDVD_WEB_URL || '').replace(/\/+$/, '');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.ANEDVD_WEB_ARTIFACTS || path.join(here, 'artifacts');
const T = { timeout: 120000, skip: BASE ? false : 'ANEDVD_WEB_URL is not set (tests/web/live-run.sh sets it)' };

let ctx, profile;

before(async () => {
	if (!BASE) return;
	fs.mkdirSync(ARTIFACTS, { recursive: true });
	profile = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-web-live-'));
	ctx = await chromium.launchPersistentContext(profile, {
		executablePath: CHROMIUM,
		headless: true,
		viewport: { width: 1280, height: 800 },
		args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run',
			'--disable-background-networking', '--disable-component-update', '--disable-sync',
			'--disable-dev-shm-usage'],
	});
	ctx.setDefaultTimeout(60000);
});

after(async () => {
	if (ctx) await ctx.close();
	if (profile) fs.rmSync(profile, { recursive: true, force: true });
});

const health = async () => (await fetch(BASE + '/health')).json();
// the reply's text so far ('' while the "thinking…" placeholder shows)
const content = (page) => page.evaluate(() => {
	const c = [...document.querySelectorAll('.msg.assistant .content')].at(-1);
	return !c || c.querySelector('.placeholder') ? '' : c.textContent;
});

test('live: settings, a streamed reply, Stop, and a reload that keeps both', T, async () => {
	const page = await ctx.newPage();
	const errors = [];
	page.on('pageerror', (e) => errors.push(String(e)));
	await page.goto(BASE + '/');
	await page.evaluate(() => localStorage.clear());
	await page.reload();
	await page.waitForSelector('#status[data-state="online"]');
	assert.match(await page.textContent('#model'), /stories260K/);

	// a reply long enough to stop: the context's worth of tokens
	await page.click('#btn-settings');
	await page.fill('#set-max_tokens', '4000');
	await page.fill('#set-temperature', '0.6');
	await page.fill('#set-system', 'Tell long stories.');
	await page.press('#set-system', 'Tab');
	await page.keyboard.press('Escape');

	await page.fill('#input', 'Tell me a story about a cat.');
	await page.press('#input', 'Enter');
	await page.waitForSelector('#stop:not([hidden])');
	// streamed: the text is seen growing while the request is still running
	const seen = [];
	for (let i = 0; i < 400 && seen.length < 3; i++) {
		const t = (await content(page)) || '';
		if (t.length > 0 && t !== seen.at(-1) && !(await page.isHidden('#stop'))) seen.push(t);
		await page.waitForTimeout(25);
	}
	assert.equal(seen.length, 3, `the text did not grow in steps: ${JSON.stringify(seen)}`);
	assert.ok(seen[1].startsWith(seen[0]) && seen[2].startsWith(seen[1]), `not a growing text: ${JSON.stringify(seen)}`);
	assert.equal((await health()).running, 1, 'the server is generating');
	await page.screenshot({ path: path.join(ARTIFACTS, 'live-streaming.png') });

	await page.click('#stop');
	await page.waitForSelector('#send:not([hidden])');
	const kept = await content(page);
	assert.ok(kept.length >= seen[2].length);
	await page.waitForTimeout(500);
	assert.equal(await content(page), kept, 'text kept growing after Stop');
	assert.ok(await page.locator('.msg.assistant .tag', { hasText: 'stopped' }).isVisible());
	// the server let go of the request: nothing running, well before 4000 tokens
	let h;
	for (let i = 0; i < 100; i++) {
		h = await health();
		if (h.running === 0) break;
		await page.waitForTimeout(50);
	}
	assert.equal(h.running, 0, 'the server still generates after Stop');
	await page.screenshot({ path: path.join(ARTIFACTS, 'live-stopped.png') });

	// reload: the settings and the conversation are still there
	await page.reload();
	await page.waitForSelector('#status[data-state="online"]');
	assert.equal(await page.locator('.msg.user').count(), 1);
	assert.equal(await content(page), kept);
	await page.click('#btn-settings');
	assert.equal(await page.inputValue('#set-max_tokens'), '4000');
	assert.equal(await page.inputValue('#set-temperature'), '0.6');
	assert.equal(await page.inputValue('#set-system'), 'Tell long stories.');
	await page.screenshot({ path: path.join(ARTIFACTS, 'live-reloaded.png') });
	assert.deepEqual(errors, []);
	await page.close();
});

const KEY_URL = (process.env.ANEDVD_WEB_KEY_URL || '').replace(/\/+$/, '');
const KEY = process.env.ANEDVD_WEB_KEY || '';

test('live, serve --api-key: asked on the 401, a reply with the key, kept across a reload, asked again when refused', {
	...T, skip: BASE && KEY_URL && KEY ? false : 'ANEDVD_WEB_KEY_URL / ANEDVD_WEB_KEY not set (tests/web/live-run.sh sets them)',
}, async () => {
	// the server really wants it: the API refuses without, the page and /health need none
	assert.equal((await fetch(KEY_URL + '/v1/models')).status, 401);
	assert.equal((await fetch(KEY_URL + '/')).status, 200);
	assert.equal((await fetch(KEY_URL + '/health')).status, 200);
	const metrics = async () => (await fetch(KEY_URL + '/metrics', { headers: { authorization: 'Bearer ' + KEY } })).text();
	const page = await ctx.newPage();
	const errors = [];
	page.on('pageerror', (e) => errors.push(String(e)));
	const sent = [];
	page.on('request', (r) => { if (r.url().includes('/v1/')) sent.push([new URL(r.url()).pathname, r.headers()['authorization'] || null]); });
	await page.goto(KEY_URL + '/');
	await page.evaluate(() => localStorage.clear());
	await page.reload();
	// the first /v1/models got the server's 401: the settings open on the key
	await page.waitForSelector('#settings:not([hidden])');
	assert.equal(await page.evaluate(() => document.activeElement.id), 'set-apikey');
	assert.match(await page.textContent('#hint-apikey'), /needs an API key/);
	await page.screenshot({ path: path.join(ARTIFACTS, 'live-key-asked.png') });
	await page.fill('#set-apikey', KEY);
	await page.press('#set-apikey', 'Tab');
	await page.waitForFunction(() => /stories260K/.test(document.getElementById('model').textContent));
	await page.keyboard.press('Escape');
	await page.fill('#input', 'Tell me a short story.');
	await page.press('#input', 'Enter');
	await page.waitForSelector('#stop:not([hidden])');
	await page.waitForSelector('#send:not([hidden])', { timeout: 60000 });
	const reply = await content(page);
	assert.ok(reply.length > 10, `no reply: '${reply}'`);
	assert.equal(await page.locator('.msg.assistant .tag', { hasText: /error/i }).count(), 0);
	// what the server saw: the generation with the key, after the refusals without
	assert.ok(sent.some(([p, a]) => p === '/v1/chat/completions' && a === 'Bearer ' + KEY), JSON.stringify(sent));
	const m = await metrics();
	assert.match(m, /^anedvd_http_requests_total\{endpoint="\/v1\/chat\/completions",status="200"\} [1-9]/m);
	assert.match(m, /^anedvd_http_requests_total\{endpoint="other",status="401"\} [1-9]/m); // refusals before routing
	await page.screenshot({ path: path.join(ARTIFACTS, 'live-key-reply.png') });
	// a reload uses the stored key: no question, the model is there
	await page.reload();
	await page.waitForFunction(() => /stories260K/.test(document.getElementById('model').textContent));
	assert.ok(await page.isHidden('#settings'));
	assert.equal(await page.evaluate(() => localStorage.getItem('anedvd.webui.apikey.v1')), KEY);
	// a stored key the server refuses: asked again, saying so
	await page.evaluate(() => localStorage.setItem('anedvd.webui.apikey.v1', 'sk-wrong'));
	await page.reload();
	await page.waitForSelector('#settings:not([hidden])');
	assert.match(await page.textContent('#hint-apikey'), /refused/);
	assert.deepEqual(errors, []);
	await page.close();
});
