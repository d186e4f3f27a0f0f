// Who may talk to the frontend and how, over raw HTTP (live frontend +
// tokenizer + fake engine): API keys (401 in each dialect's shape, which
// paths stay open, keys from flags, a file and the environment), the Host
// check against DNS rebinding (403), CORS origins (403 for others, the
// allowlist flag), JSON bodies only as application/json (415), bytes after
// the JSON value, conflicting Content-Length and Transfer-Encoding, h2o's
// own rejections in the dialect's JSON, strings echoed from the request
// always valid JSON, the nesting-depth limit named, the WebUI's security
// headers, and the warning for a non-loopback address without a key. After
// every rejection the server still answers.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';

import { env, freePort, post, request, startStack, waitFor } from './harness.mjs';

const CHAT = '/v1/chat/completions';
const MSGS = '/v1/messages';
const chat = (content) => ({ messages: [{ role: 'user', content }] });
const anth = (content) => ({ max_tokens: 8, messages: [{ role: 'user', content }] });

async function healthy(s, headers) {
	const r = await request(s, 'GET', '/health', undefined, headers);
	assert.equal(r.status, 200, 'the server still answers /health');
	assert.equal(JSON.parse(r.body).status, 'ok');
}

function openaiError(r, status, re) {
	assert.equal(r.status, status, r.body);
	const b = JSON.parse(r.body);
	assert.equal(typeof b.error.message, 'string');
	assert.equal(typeof b.error.type, 'string');
	if (re) assert.match(b.error.message, re);
	return b;
}

function anthropicError(r, status, type, re) {
	assert.equal(r.status, status, r.body);
	const b = JSON.parse(r.body);
	assert.equal(b.type, 'error');
	assert.equal(b.error.type, type);
	if (re) assert.match(b.error.message, re);
	return b;
}

// raw: bytes out, whatever comes back until the server closes (or 2 s);
// parsed into {status, headers, body, closed}
function raw(s, data) {
	return new Promise((resolve) => {
		const c = net.connect(s.port, '127.0.0.1', () => c.write(Buffer.from(data, 'latin1')));
		const chunks = [];
		let closed = false;
		const done = () => {
			const text = Buffer.concat(chunks).toString('utf8');
			const m = /^HTTP\/1\.[01] (\d+)/.exec(text);
			const at = text.indexOf('\r\n\r\n');
			const headers = {};
			for (const l of text.slice(0, at).split('\r\n').slice(1)) {
				const i = l.indexOf(':');
				headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
			}
			resolve({ status: m ? +m[1] : 0, headers, body: at >= 0 ? text.slice(at + 4) : '', text, closed });
		};
		c.on('data', (d) => chunks.push(d));
		c.on('end', () => { closed = true; });
		c.on('close', done);
		c.on('error', () => {});
		setTimeout(() => c.destroy(), 2000);
	});
}

const head = (p, lines, body = '') =>
	[`POST ${p} HTTP/1.1`, 'Host: 127.0.0.1', 'Content-Type: application/json', ...lines, '', body].join('\r\n');

describe('browser-origin safety and HTTP edges (defaults)', () => {
	let s;
	before(async () => {
		s = await startStack({ frontend: ['--max-body', '4096'] });
	});
	after(async () => {
		await s?.stop();
	});

	it('no Origin: no CORS headers; loopback and own origins are echoed; others get 403 naming --cors-origin', async () => {
		let r = await request(s, 'GET', '/v1/models');
		assert.equal(r.status, 200);
		assert.equal(r.headers['access-control-allow-origin'], undefined);
		for (const o of ['http://localhost:3000', 'http://127.0.0.1:5173', 'http://[::1]:8000', 'https://localhost', `http://127.0.0.1:${s.port}`]) {
			r = await request(s, 'GET', '/v1/models', undefined, { origin: o });
			assert.equal(r.status, 200, o);
			assert.equal(r.headers['access-control-allow-origin'], o);
			assert.match(r.headers.vary, /Origin/);
		}
		// the server's own origin under another name it answers to
		r = await request(s, 'GET', '/v1/models', undefined, { host: `10.1.2.3:${s.port}`, origin: `http://10.1.2.3:${s.port}` });
		assert.equal(r.headers['access-control-allow-origin'], `http://10.1.2.3:${s.port}`);
		for (const o of ['https://evil.example', 'http://localhost.evil.example', 'null', 'http://10.1.2.3', 'http://127.0.0.1.evil.example']) {
			const b = openaiError(await request(s, 'GET', '/v1/models', undefined, { origin: o }), 403, /--cors-origin/);
			assert.equal(b.error.type, 'permission_error');
			openaiError(await post(s, CHAT, chat('ECHO:x'), { origin: o }), 403, /--cors-origin/);
		}
		anthropicError(await post(s, MSGS, anth('x'), { origin: 'https://evil.example' }), 403, 'permission_error', /--cors-origin/);
		// a preflight from a foreign origin gets no CORS answer either
		r = await request(s, 'OPTIONS', CHAT, undefined, { origin: 'https://evil.example', 'access-control-request-method': 'POST' });
		assert.equal(r.status, 403);
		assert.equal(r.headers['access-control-allow-origin'], undefined);
		// an allowed preflight names the headers asked for (Authorization is not covered by "*")
		r = await request(s, 'OPTIONS', CHAT, undefined, { origin: 'http://localhost:3000', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' });
		assert.equal(r.status, 204);
		assert.equal(r.headers['access-control-allow-headers'], 'authorization, content-type');
		await healthy(s);
	});

	it('Host: names other than localhost, IP literals and the bound address get 403 naming --allowed-host', async () => {
		for (const h of ['localhost', `localhost:${s.port}`, 'LOCALHOST.', 'app.localhost', '127.0.0.1', `[::1]:${s.port}`, '192.168.1.20:8080'])
			assert.equal((await request(s, 'GET', '/v1/models', undefined, { host: h })).status, 200, h);
		for (const h of ['evil.example', `evil.example:${s.port}`, 'localhost.evil.example', '127.0.0.1.nip.io']) {
			openaiError(await request(s, 'GET', '/health', undefined, { host: h }), 403, /--allowed-host/);
			openaiError(await post(s, CHAT, chat('ECHO:x'), { host: h }), 403, /--allowed-host/);
		}
		anthropicError(await post(s, MSGS, anth('x'), { host: 'evil.example' }), 403, 'permission_error', /Host/);
		// HTTP/1.0 without a Host (not a browser) is served
		const r = await raw(s, 'GET /health HTTP/1.0\r\n\r\n');
		assert.equal(r.status, 200, r.text);
		await healthy(s);
	});

	it('415 for a JSON body not sent as application/json, in each dialect', async () => {
		const body = JSON.stringify(chat('ECHO:x'));
		for (const ct of ['text/plain', 'text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/jsonx', 'json'])
			openaiError(await post(s, CHAT, body, { 'content-type': ct }), 415, /application\/json/);
		openaiError(await post(s, '/v1/completions', JSON.stringify({ prompt: 'x' }), { 'content-type': 'text/plain' }), 415);
		anthropicError(await post(s, MSGS, JSON.stringify(anth('x')), { 'content-type': 'text/plain' }), 415, 'invalid_request_error', /application\/json/);
		// no Content-Type at all
		const r = await raw(s, [`POST ${CHAT} HTTP/1.1`, 'Host: 127.0.0.1', `Content-Length: ${body.length}`, 'Connection: close', '', body].join('\r\n'));
		openaiError(r, 415, /no Content-Type/);
		// parameters and case are fine
		for (const ct of ['application/json; charset=utf-8', 'Application/JSON'])
			assert.equal((await post(s, CHAT, body, { 'content-type': ct })).status, 200, ct);
		// counted under the route the client was going to, not "other"
		const m = (await request(s, 'GET', '/metrics')).body;
		assert.match(m, /anedvd_http_requests_total\{endpoint="\/v1\/chat\/completions",status="415"\} 7\n/);
		assert.match(m, /anedvd_http_requests_total\{endpoint="\/v1\/messages",status="415"\} 1\n/);
		assert.doesNotMatch(m, /endpoint="other",status="415"/);
		await healthy(s);
	});

	it('bytes after the JSON value: 400; whitespace is fine', async () => {
		const body = JSON.stringify(chat('ECHO:x'));
		for (const tail of ['x', '{}', ' 1', '\u0000', '}'])
			openaiError(await post(s, CHAT, body + tail), 400, /after the JSON value/);
		anthropicError(await post(s, MSGS, JSON.stringify(anth('x')) + 'garbage'), 400, 'invalid_request_error', /after the JSON value/);
		assert.equal((await post(s, CHAT, body + ' \r\n\t')).status, 200);
		await healthy(s);
	});

	it('too deep a nesting is named as the depth limit', async () => {
		const b = openaiError(await post(s, CHAT, '{"a":' + '['.repeat(1100)), 400, /deeper than 1000 levels/);
		assert.match(b.error.message, /limit/);
		await healthy(s);
	});

	it('conflicting Content-Length, Content-Length with Transfer-Encoding: 400 and the connection closed', async () => {
		const ok = JSON.stringify(chat('ECHO:x'));
		let r = await raw(s, head(CHAT, ['Content-Length: 2', 'Content-Length: 40'], '{}'));
		openaiError(r, 400, /two different Content-Length/);
		assert.equal(r.headers.connection, 'close');
		// (h2o reads as many bytes as the first one says before the request is seen)
		r = await raw(s, head(MSGS, [`Content-Length: ${ok.length}`, `Content-Length: ${ok.length + 5}`], ok + 'GET /'));
		anthropicError(r, 400, 'invalid_request_error', /Content-Length/);
		r = await raw(s, head(CHAT, ['Content-Length: 7', 'Transfer-Encoding: chunked'], '2\r\n{}\r\n0\r\n\r\n'));
		openaiError(r, 400, /both Content-Length and Transfer-Encoding/);
		r = await raw(s, head(CHAT, ['Transfer-Encoding: chunked', 'Content-Length: 7'], '2\r\n{}\r\n0\r\n\r\n'));
		openaiError(r, 400, /both/);
		r = await raw(s, head(CHAT, ['Transfer-Encoding: gzip', 'Transfer-Encoding: chunked'], '2\r\n{}\r\n0\r\n\r\n'));
		openaiError(r, 400, /Transfer-Encoding/);
		// the same length twice is no conflict; chunked alone works
		r = await raw(s, head(CHAT, [`Content-Length: ${ok.length}`, `Content-Length: ${ok.length}`, 'Connection: close'], ok));
		assert.equal(r.status, 200, r.text);
		r = await raw(s, head(CHAT, ['Transfer-Encoding: chunked', 'Connection: close'], `${ok.length.toString(16)}\r\n${ok}\r\n0\r\n\r\n`));
		assert.equal(r.status, 200, r.text);
		await healthy(s);
	});

	it("h2o's own rejections come in the dialect's JSON", async () => {
		// far over the limit: h2o refuses before reading the body
		let r = await raw(s, head(CHAT, ['Content-Length: 100000000'], ''));
		let b = openaiError(r, 413, /larger than this server takes/);
		assert.match(r.headers['content-type'], /application\/json/);
		assert.match(b.error.message, /--max-body 4096/);
		r = await raw(s, head(MSGS, ['Content-Length: 100000000'], ''));
		anthropicError(r, 413, 'request_too_large');
		r = await raw(s, head(CHAT, ['Content-Length: 12abc'], ''));
		openaiError(r, 400, /content-length/i);
		r = await raw(s, head(MSGS, ['Transfer-Encoding: chunked'], 'zz\r\n'));
		anthropicError(r, 400, 'invalid_request_error', /chunked/);
		r = await raw(s, head(CHAT, ['Transfer-Encoding: gzip'], ''));
		openaiError(r, 400, /transfer-encoding/i);
		r = await raw(s, head(CHAT, ['Content-Length: 2', 'Expect: 200-ok'], '{}'));
		openaiError(r, 417, /expectation/i);
		// a request h2o cannot parse at all gets its fixed plain-text 400:
		// no handler or filter sees it (see docs: what cannot be JSON)
		r = await raw(s, 'BLAH\x01 / HTTP/9\r\n\r\n');
		assert.equal(r.status, 400);
		await healthy(s);
	});

	it('strings echoed from the request are always valid JSON (invalid UTF-8 in model)', async () => {
		const bad = (obj) => {
			const [a, b] = JSON.stringify(obj).split('MODEL');
			return Buffer.concat([Buffer.from(a), Buffer.from([0x61, 0xff, 0xfe, 0xc0, 0x62]), Buffer.from(b)]);
		};
		for (const [p, obj] of [[CHAT, { model: 'MODEL', ...chat('ECHO:x') }], [CHAT, { model: 'MODEL', ...chat('ECHO:x'), stream: true }],
			['/v1/completions', { model: 'MODEL', prompt: 'ECHO:x' }], [MSGS, { model: 'MODEL', ...anth('ECHO:x') }], [MSGS, { model: 'MODEL', ...anth('ECHO:x'), stream: true }]]) {
			const r = await post(s, p, bad(obj));
			// refused (400) or answered (200): either way the bytes are UTF-8 and the JSON parses
			assert.ok([200, 400].includes(r.status), `${p}: ${r.status} ${r.body}`);
			assert.doesNotThrow(() => new TextDecoder('utf-8', { fatal: true }).decode(r.raw), `${p}: not UTF-8`);
			if (obj.stream && r.status === 200) {
				for (const l of r.body.split('\n')) if (l.startsWith('data: ') && l !== 'data: [DONE]') JSON.parse(l.slice(6));
			} else {
				const b = JSON.parse(r.body);
				if (r.status === 200) assert.ok(b.model.startsWith('a') && b.model.endsWith('b'), b.model);
			}
		}
		// a path echoed in a 404 message
		const r = await raw(s, 'GET /v1/models/a%ff%fe HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n');
		assert.equal(r.status, 404);
		JSON.parse(r.body);
		await healthy(s);
	});

	it("the WebUI comes with its CSP as a header, frame-ancestors 'none' and nosniff", async () => {
		const r = await request(s, 'GET', '/');
		assert.equal(r.status, 200);
		const csp = r.headers['content-security-policy'];
		assert.match(csp, /frame-ancestors 'none'/);
		assert.match(csp, /script-src 'sha256-/);
		assert.match(csp, /default-src 'none'/);
		assert.equal(r.headers['x-content-type-options'], 'nosniff');
		assert.equal(r.headers['x-frame-options'], 'DENY');
	});
});

describe('--cors-origin and --allowed-host', () => {
	let s, any;
	before(async () => {
		s = await startStack({ frontend: ['--cors-origin', 'https://app.example', '--cors-origin', 'https://other.example/', '--allowed-host', 'Box.Lan'] });
		any = await startStack({ frontend: ['--cors-origin', '*', '--allowed-host', '*'] });
	});
	after(async () => {
		await s?.stop();
		await any?.stop();
	});

	it('listed origins and hosts are accepted, others still refused; "*" accepts all', async () => {
		let r = await request(s, 'GET', '/v1/models', undefined, { origin: 'https://app.example' });
		assert.equal(r.status, 200);
		assert.equal(r.headers['access-control-allow-origin'], 'https://app.example');
		r = await request(s, 'GET', '/v1/models', undefined, { origin: 'https://other.example' });
		assert.equal(r.status, 200);
		openaiError(await request(s, 'GET', '/v1/models', undefined, { origin: 'https://app.example.evil' }), 403);
		assert.equal((await request(s, 'GET', '/v1/models', undefined, { host: 'box.lan:8080' })).status, 200);
		openaiError(await request(s, 'GET', '/v1/models', undefined, { host: 'box.lan.evil' }), 403);
		r = await request(any, 'GET', '/v1/models', undefined, { origin: 'https://anything.example', host: 'whatever.example' });
		assert.equal(r.status, 200);
		assert.equal(r.headers['access-control-allow-origin'], '*');
		await healthy(s);
	});
});

describe('API keys', () => {
	let s, dir;
	const K1 = 'sk-first-0123456789', K2 = 'second.key_ABC', KF = 'from-the-file', KE = 'from-the-env';
	before(async () => {
		dir = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-keys-'));
		fs.writeFileSync(path.join(dir, 'keys'), `# a comment\n\n  ${KF}  \r\nanother-one\n`);
		s = await startStack({
			frontend: ['--api-key', K1, '--api-key', K2, '--api-key-file', path.join(dir, 'keys')],
			env: { ANEDVD_API_KEY: `${KE}, env-two` },
		});
	});
	after(async () => {
		await s?.stop();
		fs.rmSync(dir, { recursive: true, force: true });
	});

	it('a missing or wrong key gets 401 in each dialect, with WWW-Authenticate', async () => {
		let b = openaiError(await post(s, CHAT, chat('ECHO:x')), 401, /needs an API key/);
		assert.equal(b.error.code, 'invalid_api_key');
		assert.equal(b.error.type, 'invalid_request_error');
		let r = await request(s, 'GET', '/v1/models', undefined, { authorization: `Bearer ${K1}x` });
		b = openaiError(r, 401, /invalid API key/);
		assert.equal(r.headers['www-authenticate'], 'Bearer');
		for (const h of [{ authorization: `Bearer ${K1.slice(0, -1)}` }, { authorization: K1 }, { authorization: `Basic ${K1}` }, { 'x-api-key': '' }, { 'x-api-key': K1.toUpperCase() }])
			assert.equal((await request(s, 'GET', '/v1/models', undefined, h)).status, 401, JSON.stringify(h));
		anthropicError(await post(s, MSGS, anth('x')), 401, 'authentication_error', /API key/);
		anthropicError(await post(s, MSGS, anth('x'), { 'x-api-key': 'nope' }), 401, 'authentication_error', /invalid/);
		// every path but /health and the page: /metrics, unknown paths
		openaiError(await request(s, 'GET', '/metrics'), 401);
		openaiError(await request(s, 'GET', '/v1/nope'), 401);
		openaiError(await request(s, 'GET', '/v1/models/stories260K'), 401);
		// counted by route; only the unknown path is "other"
		const m = (await request(s, 'GET', '/metrics', undefined, { authorization: `Bearer ${K1}` })).body;
		for (const [ep, n] of [['/v1/chat/completions', '1'], ['/v1/messages', '2'], ['/metrics', '1'], ['/v1/models', '7'], ['other', '1']])
			assert.match(m, new RegExp(`anedvd_http_requests_total\\{endpoint="${ep.replace(/\//g, '\\/')}",status="401"\\} ${n}\n`), ep);
		await healthy(s);
	});

	it('any configured key works, as Bearer or x-api-key, from flags, the file and the environment', async () => {
		for (const k of [K1, K2, KF, 'another-one', KE, 'env-two']) {
			let r = await post(s, CHAT, chat('ECHO:ok'), { authorization: `Bearer ${k}` });
			assert.equal(r.status, 200, `${k}: ${r.body}`);
			r = await post(s, MSGS, anth('ECHO:ok'), { 'x-api-key': k });
			assert.equal(r.status, 200, `${k}: ${r.body}`);
		}
		assert.equal((await request(s, 'GET', '/metrics', undefined, { authorization: `bearer  ${K2}` })).status, 200);
	});

	it('/health, the WebUI page and preflights need no key', async () => {
		assert.equal((await request(s, 'GET', '/health')).status, 200);
		assert.equal((await request(s, 'GET', '/')).status, 200);
		assert.equal((await request(s, 'GET', '/index.html')).status, 200);
		const r = await request(s, 'OPTIONS', CHAT, undefined, { origin: 'http://localhost:3000', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization' });
		assert.equal(r.status, 204);
	});
});

describe('the frontend refuses bad key settings and warns on an open address', () => {
	const run = (args, extraEnv = {}) => new Promise((resolve) => {
		const p = spawn(env('FE_BIN'), ['--listen', '127.0.0.1:1', '--tokenizer', 'ipc:///nonexistent/t', '--engine', 'ipc:///nonexistent/e', ...args],
			{ env: { ...process.env, ...extraEnv } });
		let err = '';
		p.stderr.on('data', (d) => (err += d));
		p.on('exit', (code) => resolve({ code, err }));
	});

	it('exit 2 naming the flag, the file line or the variable', async () => {
		let r = await run(['--api-key', 'has space']);
		assert.equal(r.code, 2);
		assert.match(r.err, /--api-key: an API key is/);
		r = await run(['--api-key', 'a,b']);
		assert.equal(r.code, 2);
		const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-keys-'));
		try {
			fs.writeFileSync(path.join(dir, 'empty'), '# nothing\n\n');
			fs.writeFileSync(path.join(dir, 'bad'), 'good\nbad key\n');
			r = await run(['--api-key-file', path.join(dir, 'empty')]);
			assert.equal(r.code, 2);
			assert.match(r.err, /holds no key/);
			r = await run(['--api-key-file', path.join(dir, 'bad')]);
			assert.equal(r.code, 2);
			assert.match(r.err, /line 2/);
			r = await run(['--api-key-file', path.join(dir, 'missing')]);
			assert.equal(r.code, 2);
			assert.match(r.err, /missing/);
			r = await run([], { ANEDVD_API_KEY: 'ok,bad key' });
			assert.equal(r.code, 2);
			assert.match(r.err, /ANEDVD_API_KEY/);
		} finally {
			fs.rmSync(dir, { recursive: true, force: true });
		}
	});

	it('a non-loopback address without a key gets a warning; with a key, none', async () => {
		for (const [args, warn] of [[[], true], [['--api-key', 'k'], false]]) {
			const port = await freePort();
			const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-warn-'));
			const p = spawn(env('FE_BIN'), ['--listen', `0.0.0.0:${port}`, '--tokenizer', `ipc://${dir}/t`, '--engine', `ipc://${dir}/e`, ...args]);
			const exited = new Promise((r) => p.on('exit', r));
			let err = '';
			p.stderr.on('data', (d) => (err += d));
			try {
				assert.ok(await waitFor(() => /listening on/.test(err), 5000), err);
			} finally {
				p.kill('SIGTERM');
				await exited;
				fs.rmSync(dir, { recursive: true, force: true });
			}
			assert.equal(/not a loopback address, with no API key/.test(err), warn, err);
		}
	});
});
