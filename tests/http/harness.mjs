// harness.mjs - starts anedvd-tokenizer, the fake engine (a test double of
// the engine service) and anedvd-frontend for a test file, and small HTTP
// helpers built on node's http module only.
//
// Binaries and the model come from the environment ctest sets:
// FE_BIN, TOK_BIN, FAKE_ENGINE_BIN, FE_MODEL, and CPU_WORKER_BIN when the
// real engine is built.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

export const env = (name) => {
	const v = process.env[name];
	if (!v) throw new Error(`${name} is not set (run through ctest)`);
	return v;
};

export function freePort() {
	return new Promise((resolve, reject) => {
		const s = net.createServer();
		s.on('error', reject);
		s.listen(0, '127.0.0.1', () => {
			const { port } = s.address();
			s.close(() => resolve(port));
		});
	});
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function start(bin, args, logFile, env) {
	const out = fs.openSync(logFile, 'a');
	const p = spawn(bin, args, { stdio: ['ignore', out, out], env: env ? { ...process.env, ...env } : process.env });
	fs.closeSync(out);
	return p;
}

function stopProc(p) {
	return new Promise((resolve) => {
		if (!p || p.exitCode !== null || p.signalCode !== null) return resolve();
		const t = setTimeout(() => p.kill('SIGKILL'), 3000);
		p.once('exit', () => {
			clearTimeout(t);
			resolve();
		});
		p.kill('SIGTERM');
	});
}

// startStack: tokenizer + fake engine + frontend in a fresh directory.
// opts.frontend: extra frontend arguments; opts.engine: extra fake-engine
// arguments; opts.noEngine: point the frontend at an engine that is not there;
// opts.noTokenizer: the same for the tokenizer.
// opts.env: extra environment of the frontend; opts.headers: sent with every
// request of the readiness check (an API key).
export async function startStack(opts = {}) {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-fe-'));
	const tokUrl = `ipc://${dir}/tok.sock`;
	const engUrl = `ipc://${dir}/eng.sock`;
	const engineLog = path.join(dir, 'engine.events');
	const port = await freePort();
	const s = {
		dir,
		port,
		base: `http://127.0.0.1:${port}`,
		engineLog,
		procs: {},
	};
	if (!opts.noTokenizer) s.procs.tok = start(env('TOK_BIN'), ['--model', env('FE_MODEL'), '--listen', tokUrl], path.join(dir, 'tok.log'));
	// opts.realEngine: the real anedvd-cpu-worker (CPU_WORKER_BIN) on the emu backend
	s.startEngine = () => {
		s.procs.eng = opts.realEngine
			? start(env('CPU_WORKER_BIN'), ['--model', env('FE_MODEL'), '--listen', engUrl, '--backend', 'emu', ...(opts.engine || [])], path.join(dir, 'engine.log'))
			: start(
				env('FAKE_ENGINE_BIN'),
				['--model', env('FE_MODEL'), '--listen', engUrl, '--log', engineLog, ...(opts.engine || [])],
				path.join(dir, 'engine.log'),
			);
	};
	s.stopEngine = async () => {
		await stopProc(s.procs.eng);
		s.procs.eng = null;
	};
	if (!opts.noEngine) s.startEngine();
	s.procs.fe = start(
		env('FE_BIN'),
		['--listen', `127.0.0.1:${port}`, '--tokenizer', tokUrl, '--engine', engUrl, '--name', 'stories260K',
			...(opts.frontend || [])],
		path.join(dir, 'frontend.log'),
		opts.env,
	);
	s.stop = async () => {
		await Promise.all(Object.values(s.procs).map(stopProc));
		if (process.env.ANEDVD_KEEP_TMP) console.error(`kept ${dir} (ANEDVD_KEEP_TMP)`);
		else fs.rmSync(dir, { recursive: true, force: true });
	};
	s.frontendLog = () => fs.readFileSync(path.join(dir, 'frontend.log'), 'utf8');
	s.events = () => (fs.existsSync(engineLog) ? fs.readFileSync(engineLog, 'utf8') : '');
	// ready: the frontend answers and its health probe has seen the upstreams
	const want = [opts.noTokenizer ? 'down' : 'up', opts.noEngine ? 'down' : 'up'];
	for (let i = 0; i < 200; i++) {
		try {
			const r = await request(s, 'GET', '/health', undefined, opts.headers);
			const h = JSON.parse(r.body);
			if (h.tokenizer === want[0] && h.engine === want[1]) return s;
		} catch {
			// not up yet
		}
		await sleep(50);
	}
	await s.stop();
	throw new Error('the stack did not come up');
}

// request: one HTTP request; resolves {status, headers, body}
export function request(s, method, p, body, headers = {}, agent) {
	return new Promise((resolve, reject) => {
		const data = body === undefined ? undefined : typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
		const req = http.request(
			s.base + p,
			{
				method,
				agent: agent || false,
				headers: { ...(data !== undefined ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}), ...headers },
			},
			(res) => {
				const chunks = [];
				res.on('data', (c) => chunks.push(c));
				res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), raw: Buffer.concat(chunks), socket: res.socket }));
				res.on('error', reject);
			},
		);
		req.on('error', reject);
		if (data !== undefined) req.write(data);
		req.end();
	});
}

export const post = (s, p, body, headers) => request(s, 'POST', p, body, headers);

// sse splits an event-stream body into {event, data} records
export function sse(body) {
	const out = [];
	for (const block of body.split('\n\n')) {
		if (!block.trim()) continue;
		const rec = { event: null, data: null };
		for (const line of block.split('\n')) {
			if (line.startsWith('event: ')) rec.event = line.slice(7);
			else if (line.startsWith('data: ')) rec.data = line.slice(6);
		}
		out.push(rec);
	}
	return out;
}

// rawChunks: the body as the network delivered it, one entry per data event
export function streamChunks(s, p, body) {
	return new Promise((resolve, reject) => {
		const data = JSON.stringify(body);
		const req = http.request(s.base + p, { method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } }, (res) => {
			const chunks = [];
			res.on('data', (c) => chunks.push(Buffer.from(c)));
			res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, chunks }));
		});
		req.on('error', reject);
		req.end(data);
	});
}

export async function waitFor(fn, ms = 3000) {
	const t0 = Date.now();
	while (Date.now() - t0 < ms) {
		if (await fn()) return true;
		await sleep(25);
	}
	return false;
}

export { sleep };
