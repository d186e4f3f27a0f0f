// Fitting a prompt longer than the context has one owner, the cpu-worker
// (cpu-worker/fit.h): `anedvd serve` (through the HTTP frontend) and
// `anedvd run` hand it the whole prompt and fit it the same way. With a
// context of 64 on stories260K and a prompt of ~100 tokens, both keep the
// BOS and the last 64 - 8 - 1 - 1 tokens for a reply of 8, report the same
// number of dropped tokens, and give the same greedy reply, which is the
// reply to that cut prompt given as ids; a short prompt with a max_tokens
// beyond the context is kept whole and its reply cut to the room left.
//
// Environment (ctest sets it): ANEDVD_BIN, FE_MODEL (stories260K).
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { freePort } from '../http/harness.mjs';

const BIN = process.env.ANEDVD_BIN;
const MODEL = process.env.FE_MODEL;
const skip = BIN && MODEL ? false : 'ANEDVD_BIN / FE_MODEL not set (run through ctest -R test-live-fit)';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const CTX = 64;
const PROMPT = 'Once upon a time, there was a little girl named Lily. ' +
	'She loved to play outside in the park with her friends and her dog. '.repeat(5);

describe('a prompt longer than the context: one rule for serve and run', { skip }, () => {
	let rt, srv, base, log;

	before(async () => {
		rt = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-fit-'));
		log = path.join(rt, 'serve.log');
		const port = await freePort();
		base = `http://127.0.0.1:${port}`;
		const out = fs.openSync(log, 'a');
		srv = spawn(BIN, ['serve', '--model', MODEL, '--port', String(port), '--max-seq', String(CTX)], {
			stdio: ['ignore', out, out], env: { ...process.env, XDG_RUNTIME_DIR: rt },
		});
		fs.closeSync(out);
		for (let i = 0; i < 600 && srv.exitCode === null; i++) {
			try {
				const h = await (await fetch(`${base}/health`)).json();
				if (h.tokenizer === 'up' && h.engine === 'up') return;
			} catch {
				// not listening yet
			}
			await sleep(50);
		}
		throw new Error(`anedvd serve did not come up:\n${fs.readFileSync(log, 'utf8')}`);
	});

	after(async () => {
		if (srv && srv.exitCode === null && srv.signalCode === null) srv.kill('SIGKILL');
		if (rt && process.env.ANEDVD_KEEP_TMP) console.error(`kept ${rt} (ANEDVD_KEEP_TMP)`);
		else if (rt) fs.rmSync(rt, { recursive: true, force: true });
	});

	const complete = async (body) => {
		const r = await fetch(`${base}/v1/completions`, {
			method: 'POST', headers: { 'content-type': 'application/json' },
			body: JSON.stringify({ temperature: 0, ...body }),
		});
		assert.equal(r.status, 200);
		return r.json();
	};
	const run = (args) => JSON.parse(execFileSync(BIN, ['run', '--model', MODEL, '--max-seq', String(CTX), '--temp', '0',
		'--json', ...args], { env: { ...process.env, XDG_RUNTIME_DIR: rt }, stdio: ['ignore', 'pipe', 'ignore'] })
		.toString());

	it('serve and run drop the same tokens, keep the BOS, and reply the same', async () => {
		const c = await complete({ prompt: PROMPT, max_tokens: 8 });
		const r = run(['--prompt', PROMPT, '--no-chat', '--max-tokens', '8']);
		const n = r.prompt_ids.length;
		assert.ok(n > CTX, `the prompt is ${n} tokens`);
		assert.equal(r.prompt_ids[0], 1); // stories260K's BOS
		const keep = CTX - 8 - 1;
		assert.equal(c.usage.prompt_tokens, keep, JSON.stringify(c.usage));
		assert.equal(c.usage.prompt_tokens_dropped, n - keep);
		assert.equal(r.prompt_tokens_dropped, n - keep);
		assert.equal(r.ids.length, 8);
		assert.equal(c.choices[0].text, r.text);
		// the cut prompt (the BOS, then the last keep - 1 tokens) as ids: the same reply
		const cut = [r.prompt_ids[0], ...r.prompt_ids.slice(n - (keep - 1))];
		const r2 = run(['--prompt-ids', cut.join(','), '--max-tokens', '8']);
		assert.equal(r2.prompt_tokens_dropped, 0);
		assert.deepEqual(r2.ids, r.ids);
	});

	it('a prompt that fits is kept whole; the reply gets the room left', async () => {
		const c = await complete({ prompt: 'Once upon a time', max_tokens: 1000 });
		assert.equal(c.usage.prompt_tokens_dropped, 0);
		assert.equal(c.usage.prompt_tokens + c.usage.completion_tokens + 1 <= CTX, true, JSON.stringify(c.usage));
		const r = run(['--prompt', 'Once upon a time', '--no-chat', '--max-tokens', '1000']);
		assert.equal(r.prompt_tokens_dropped, 0);
		assert.equal(r.text, c.choices[0].text);
	});
});
