// /health and /metrics with the supervisor's status file (--status-file, as
// `anedvd serve` passes it): a process that exited 5 times within 30 s or
// stays stopped makes the status "degraded" with the reason; restarts and
// the last exit of every process are in /metrics. The file is written here
// in the supervisor's format (cli/supervisor.h).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { request, startStack } from './harness.mjs';

describe('the supervisor status in /health and /metrics', () => {
	let s, dir, file;
	const write = (lines) => fs.writeFileSync(file, lines.join('\n') + '\n');
	const health = async () => {
		const r = await request(s, 'GET', '/health');
		assert.equal(r.status, 200);
		return JSON.parse(r.body);
	};
	before(async () => {
		dir = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-procs-'));
		file = path.join(dir, 'status');
		write(['tokenizer 100 0 up - -']);
		s = await startStack({ frontend: ['--status-file', file] });
	});
	after(async () => {
		await s?.stop();
		fs.rmSync(dir, { recursive: true, force: true });
	});

	it('every process up: ok, with the processes listed', async () => {
		write(['tokenizer 100 0 up - -', 'ane-worker 101 1 up signal:9 ' + (Date.now() - 5000), 'cpu-worker 102 0 up - -']);
		const h = await health();
		assert.equal(h.status, 'ok');
		assert.equal(h.reason, undefined);
		assert.deepEqual(h.processes['ane-worker'], { pid: 101, state: 'up', restarts: 1, last_exit: 'signal:9' });
		assert.equal(h.processes.tokenizer.restarts, 0);
	});

	it('5 exits within 30 s: degraded, naming the process and how it last ended; old exits do not count', async () => {
		const now = Date.now();
		const recent = [25000, 20000, 9000, 3000, 500].map((d) => now - d).join(',');
		write(['tokenizer 100 0 up - -', `cpu-worker 0 7 restarting signal:11 ${now - 900000},${recent}`]);
		let h = await health();
		assert.equal(h.status, 'degraded');
		assert.match(h.reason, /cpu-worker is crash-looping: 5 exits in the last 30 s; the last was killed by signal 11/);
		assert.equal(h.processes['cpu-worker'].state, 'restarting');
		// the same exits long ago: ok again
		const old = [25000, 20000, 9000, 3000, 500].map((d) => now - 60000 - d).join(',');
		write(['tokenizer 100 0 up - -', `cpu-worker 103 7 up signal:11 ${old}`]);
		h = await health();
		assert.equal(h.status, 'ok');
	});

	it('a stopped process: degraded', async () => {
		write(['tokenizer 0 0 stopped exit:2 ' + Date.now(), 'cpu-worker 102 0 up - -']);
		const h = await health();
		assert.equal(h.status, 'degraded');
		assert.match(h.reason, /tokenizer is down and not restarted; the last exited with status 2/);
	});

	it('/metrics: restarts, crash loops and the last exit by process', async () => {
		const now = Date.now();
		write(['tokenizer 100 0 up - -', `ane-worker 0 6 restarting signal:9 ${[4, 3, 2, 1, 0].map((d) => now - d * 1000).join(',')}`]);
		const r = await request(s, 'GET', '/metrics');
		assert.equal(r.status, 200);
		assert.match(r.body, /# TYPE anedvd_process_restarts_total counter/);
		assert.match(r.body, /^anedvd_process_restarts_total\{process="ane-worker"\} 6$/m);
		assert.match(r.body, /^anedvd_process_restarts_total\{process="tokenizer"\} 0$/m);
		assert.match(r.body, /^anedvd_process_crash_looping\{process="ane-worker"\} 1$/m);
		assert.match(r.body, /^anedvd_process_crash_looping\{process="tokenizer"\} 0$/m);
		assert.match(r.body, /^anedvd_process_last_exit\{process="ane-worker",reason="signal:9"\} 1$/m);
		assert.doesNotMatch(r.body, /anedvd_process_last_exit\{process="tokenizer"/);
		// the frontend's own metrics are still there
		assert.match(r.body, /# TYPE anedvd_http_requests_total counter/);
	});

	it('no status file (or an unreadable one): /health as without a supervisor', async () => {
		fs.rmSync(file);
		const h = await health();
		assert.equal(h.status, 'ok');
		assert.equal(h.processes, undefined);
		assert.equal((await request(s, 'GET', '/metrics')).status, 200);
	});
});
