// live.test.mjs - the WebUI in Debian's chromium against a real anedvd
// (ANEDVD_WEB_URL, started by live-run.sh): a long reply streams in piece by
// piece, Stop ends it and the server lets go of the request, and a reload
// finds the settings and the conversation kept. Screenshots go to
// ANEDVD_WEB_ARTIFACTS (live-*.png). Skipped without ANEDVD_WEB_URL.
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
