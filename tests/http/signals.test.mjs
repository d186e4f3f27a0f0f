// The frontend under signals that must not end it: stopped and continued
// (SIGSTOP and SIGCONT sent to it, a debugger attaching), its event loop's
// wait comes back interrupted (EINTR), and the frontend goes on serving in
// the same process; it used to take that for the end of its loop and exit
// with status 0, which `anedvd serve` answered with a restart. SIGTERM
// still ends it, with status 0.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';

import { post, request, sleep, startStack } from './harness.mjs';

describe('the frontend under signals', () => {
	let s;
	before(async () => {
		s = await startStack();
	});
	after(async () => {
		await s?.stop();
	});

	it('stopped and continued, it goes on serving in the same process', async () => {
		const fe = s.procs.fe;
		for (let i = 0; i < 3; i++) {
			fe.kill('SIGSTOP');
			await sleep(100);
			fe.kill('SIGCONT');
			await sleep(200);
			assert.equal(fe.exitCode, null, `the frontend exited (${fe.exitCode}) after SIGSTOP and SIGCONT`);
		}
		const r = await request(s, 'GET', '/health');
		assert.equal(r.status, 200);
		const c = await post(s, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
		assert.equal(c.status, 200, c.body);
		assert.equal(fe.exitCode, null);
	});

	it('SIGTERM ends it, with status 0', async () => {
		const fe = s.procs.fe;
		assert.equal(fe.exitCode, null, 'the frontend is still running');
		const done = new Promise((r) => fe.once('exit', (code, sig) => r({ code, sig })));
		fe.kill('SIGTERM');
		const e = await Promise.race([done, sleep(5000).then(() => 'still running 5 s after SIGTERM')]);
		assert.deepEqual(e, { code: 0, sig: null });
		s.procs.fe = null;
	});
});
