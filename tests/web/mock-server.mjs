// mock-server.mjs - a static server for web/index.html and a scripted fake of
// the API it calls, for the browser tests (and for working on the page by hand:
// `node mock-server.mjs 8099` then open http://127.0.0.1:8099/).
//
// The chat route streams a known reply slowly, writing each SSE event in two
// pieces cut at an odd byte so that lines (and UTF-8 sequences) are split
// across reads. The last user message picks a scenario by keyword:
//   [[busy]]   503 with Retry-After and an OpenAI-style error body
//   [[trunc]]  the final chunk reports usage.prompt_tokens_dropped = 37
//   [[html]]   the reply contains markup and script text
//   [[wide]]   the reply has a long unbroken word and a long code line
//   [[slow]]   a long reply, one piece every 60 ms (for stop tests)
//   [[length]] finish_reason "length"
//   [[echo]]   the reply is the last user message, verbatim
//   [[stages]] timings as { decode_tok_s, stages: {name: ms} }
//   [[crlf]]   events with CRLF line ends and "data:" without a space
//   [[fail]]   an error event after a few pieces, then the end
//   [[drop]]   the connection is cut after a few pieces
//   [[think]]  a thinking model: reasoning_content deltas (THOUGHT) before the
//              content ones (THOUGHT_REPLY), as the frontend sends them
// Every chat request is recorded: GET /__mock/requests returns them (body,
// whether the client hung up before the end), POST /__mock/reset clears them.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const INDEX = process.env.ANEDVD_WEB_INDEX || path.resolve(here, '../../web/index.html');
export const MODEL = 'mock-llama-1b';

export const REPLY =
	'Hello! Here is a tiny example, with **bold** and `inline code`:\n\n' +
	'```c\nint\nmain(void)\n{\n\treturn 0; /* <not a tag> */\n}\n```\n\n' +
	'That is all — ünïcödé 🙂 done.';

export const HTML_REPLY =
	'Markup stays text: <img src=x onerror="window.__pwned=1"> and ' +
	'<script>window.__pwned=2</script> and <b>not bold</b>.\n\n' +
	'```html\n<script>window.__pwned=3</script>\n```';

export const THOUGHT = 'The user says hi. A short, friendly answer will do.\n\nNo tools needed.';
export const THOUGHT_REPLY = 'Hello! Nice to meet you.';

const WIDE_REPLY =
	'A long word: ' + 'x'.repeat(300) + '\n\n' +
	'```\n' + 'const a_very_long_line = ' + '"y"'.repeat(120) + ';\n```\n\nEnd.';

// cut a reply into pieces of 1-4 words, like tokens
function pieces(text) {
	const words = text.match(/\S+\s*|\s+/g) || [];
	const out = [];
	for (let i = 0; i < words.length; ) {
		const n = 1 + (i % 3);
		out.push(words.slice(i, i + n).join(''));
		i += n;
	}
	return out;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function json(res, code, obj, headers = {}) {
	const body = JSON.stringify(obj);
	res.writeHead(code, { 'Content-Type': 'application/json', ...headers });
	res.end(body);
}

function lastUser(messages) {
	for (let i = (messages || []).length - 1; i >= 0; i--)
		if (messages[i].role === 'user') return String(messages[i].content ?? '');
	return '';
}

export function startMock(port = 0, host = '127.0.0.1') {
	const requests = [];

	async function chat(req, res, body) {
		const rec = { body, aborted: false, completed: false, at: Date.now() };
		requests.push(rec);
		const text = lastUser(body.messages);
		if (text.includes('[[busy]]')) {
			return json(res, 503, { error: { message: 'the engine is busy with another request', type: 'server_busy' } },
				{ 'Retry-After': '2' });
		}
		let reply = REPLY, delay = 35, finish = 'stop';
		if (text.includes('[[html]]')) reply = HTML_REPLY;
		if (text.includes('[[wide]]')) reply = WIDE_REPLY;
		if (text.includes('[[echo]]')) reply = text;
		if (text.includes('[[slow]]')) { reply = ('one two three four five six seven eight nine ten. ').repeat(40); delay = 60; }
		if (text.includes('[[length]]')) finish = 'length';
		const think = text.includes('[[think]]');
		if (think) reply = THOUGHT_REPLY;
		const dropped = text.includes('[[trunc]]') ? 37 : 0;

		const id = 'chatcmpl-mock' + requests.length;
		const created = Math.floor(Date.now() / 1000);
		const chunk = (delta, extra = {}) => ({
			id, object: 'chat.completion.chunk', created, model: MODEL,
			choices: [{ index: 0, delta, finish_reason: null }], ...extra,
		});
		res.on('close', () => { if (!rec.completed) rec.aborted = true; });
		res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
		res.flushHeaders();

		let cut = 0;
		const crlf = text.includes('[[crlf]]');
		const send = async (obj) => {
			if (res.destroyed) return false;
			const data = typeof obj === 'string' ? obj : JSON.stringify(obj);
			const buf = Buffer.from(crlf ? 'data:' + data + '\r\n\r\n' : 'data: ' + data + '\n\n');
			// split every event in two at a moving byte offset: lines and
			// multi-byte characters then straddle reads
			const at = 1 + (cut++ * 7) % (buf.length - 1);
			res.write(buf.subarray(0, at));
			await sleep(Math.max(2, delay >> 2));
			if (res.destroyed) return false;
			res.write(buf.subarray(at));
			await sleep(delay);
			return !res.destroyed;
		};

		res.write(': mock keep-alive\n\n');
		if (!await send(chunk({ role: 'assistant', content: '' }))) return;
		if (think)
			for (const p of pieces(THOUGHT))
				if (!await send(chunk({ reasoning_content: p }))) return;
		const parts = pieces(reply);
		for (const [i, p] of parts.entries()) {
			if (i === 5 && text.includes('[[fail]]')) {
				await send({ error: { message: 'the engine stopped: worker crashed', type: 'server_error' } });
				rec.completed = true;
				return res.end('data: [DONE]\n\n');
			}
			if (i === 5 && text.includes('[[drop]]')) {
				rec.completed = true;
				return res.destroy();
			}
			if (!await send(chunk({ content: p }))) return;
		}
		const prompt_tokens = JSON.stringify(body.messages || []).length >> 2;
		// the frontend's shape; [[stages]] asks for the compact one
		const timings = text.includes('[[stages]]') ? {
			prompt_tokens, prefill_ms: 31.5, decode_tok_s: 17.5, prompt_tokens_dropped: dropped,
			stages: { tokenize: 0.4, prefill: 31.5, decode: 1230.2 },
		} : {
			prompt_tokens, prompt_tokens_dropped: dropped, completion_tokens: parts.length,
			queue_ms: 0.1, tokenize_ms: 0.4, prefill_ms: 31.5, prefill_tokens_per_s: 285.7,
			decode_ms: 1230.2, decode_tokens_per_s: 42.7, ttft_ms: 33.9, detokenize_ms: 0.3, total_ms: 1266.1,
			engine: { queue_ms: 0.05, kernel_ms: 980.4, ipc_ms: 12.1, attention_ms: 150.2, sampling_ms: 20.3, cpu_other_ms: 60.8, moe_ms: 0 },
		};
		const usage = { prompt_tokens, completion_tokens: parts.length, total_tokens: prompt_tokens + parts.length };
		if (dropped) usage.prompt_tokens_dropped = dropped;
		// as the frontend does: usage rides on the final chunk, or with
		// include_usage in a chunk of its own with no choices
		const last = chunk({}, { timings });
		last.choices[0].finish_reason = finish;
		const own = body.stream_options && body.stream_options.include_usage;
		if (!own) last.usage = usage;
		if (!await send(last)) return;
		if (own && !await send({ id, object: 'chat.completion.chunk', created, model: MODEL, choices: [], usage })) return;
		rec.completed = true;
		res.end('data: [DONE]\n\n');
	}

	const server = http.createServer((req, res) => {
		const url = new URL(req.url, 'http://x');
		let raw = '';
		req.setEncoding('utf8');
		req.on('data', (d) => { raw += d; });
		req.on('end', () => {
			if (req.method === 'GET' && (url.pathname === '/' || url.pathname === '/index.html')) {
				fs.readFile(INDEX, (err, data) => {
					if (err) return json(res, 500, { error: { message: String(err), type: 'mock' } });
					res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
					res.end(data);
				});
				return;
			}
			if (req.method === 'GET' && url.pathname === '/health')
				return json(res, 200, { status: 'ok' });
			if (req.method === 'GET' && url.pathname === '/v1/models')
				return json(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model', owned_by: 'anedvd' }] });
			if (req.method === 'GET' && url.pathname === '/__mock/requests')
				return json(res, 200, requests);
			if (req.method === 'POST' && url.pathname === '/__mock/reset') {
				requests.length = 0;
				return json(res, 200, { ok: true });
			}
			if (req.method === 'POST' && url.pathname === '/v1/chat/completions') {
				let body;
				try { body = JSON.parse(raw); } catch {
					return json(res, 400, { error: { message: 'bad JSON', type: 'invalid_request_error' } });
				}
				chat(req, res, body).catch(() => res.destroy());
				return;
			}
			json(res, 404, { error: { message: 'not found', type: 'not_found' } });
		});
	});
	return new Promise((resolve) => {
		server.listen(port, host, () => {
			const { port: p } = server.address();
			resolve({
				url: `http://${host}:${p}`,
				requests,
				close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }),
			});
		});
	});
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
	const m = await startMock(Number(process.argv[2] || 8099));
	console.log(`mock API and WebUI at ${m.url}/`);
}
