// POST /v1/embeddings through the official openai client, on the real
// pipeline (anedvd-frontend --embeddings + anedvd-tokenizer +
// anedvd-cpu-worker, emu) running stories260K: the vector is the mean of
// the hidden states after the final norm, L2-normalised, checked against
// hidden states recovered from llama.cpp's own logits for the same prompt
// (each logits row is output.weight · h, with no bias or soft-cap, so h is
// its least-squares solution); deterministic to the bit, alone or batched with other
// inputs; float and base64 agree; token-id inputs; usage; a 400 naming
// the field for bad input, and the server answers after each.
// Skipped when the cpu-worker is not built.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';

import OpenAI from 'openai';

import { post, request, startStack } from '../http/harness.mjs';

const skip = process.env.CPU_WORKER_BIN ? false : 'anedvd-cpu-worker is not built';
const data = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'data', 'models');

// one F32 tensor of a GGUF v3 file, as [rows][ne0]
function ggufTensor(file, name) {
	const b = fs.readFileSync(file);
	let o = 0;
	const u32 = () => ((o += 4), b.readUInt32LE(o - 4));
	const u64 = () => ((o += 8), Number(b.readBigUInt64LE(o - 8)));
	const str = () => {
		const n = u64();
		o += n;
		return b.toString('utf8', o - n, o);
	};
	const size = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
	const skipValue = (t) => {
		if (t === 8) str();
		else if (t === 9) {
			const et = u32(), n = u64();
			for (let i = 0; i < n; i++) skipValue(et);
		} else o += size[t];
	};
	assert.equal(b.toString('latin1', 0, 4), 'GGUF');
	o = 4;
	assert.equal(u32(), 3);
	const nt = u64(), nkv = u64();
	let align = 32;
	for (let i = 0; i < nkv; i++) {
		const k = str(), t = u32();
		if (k === 'general.alignment') align = u32();
		else skipValue(t);
	}
	const infos = [];
	for (let i = 0; i < nt; i++) {
		const n = str(), nd = u32(), dims = [];
		for (let d = 0; d < nd; d++) dims.push(u64());
		infos.push({ name: n, dims, type: u32(), offset: u64() });
	}
	const base = Math.ceil(o / align) * align;
	const t = infos.find((x) => x.name === name);
	assert.ok(t, `${name} in ${file}`);
	assert.equal(t.type, 0, 'F32');
	const [ne0, rows] = t.dims;
	return { ne0, rows, at: (r, i) => b.readFloatLE(base + t.offset + (r * ne0 + i) * 4) };
}

// h from l = E h by least squares (the normal equations, in double)
function solve(E, l) {
	const n = E.ne0, A = Array.from({ length: n }, () => new Float64Array(n + 1));
	for (let r = 0; r < E.rows; r++)
		for (let i = 0; i < n; i++) {
			const ei = E.at(r, i);
			for (let j = 0; j < n; j++) A[i][j] += ei * E.at(r, j);
			A[i][n] += ei * l[r];
		}
	for (let c = 0; c < n; c++) {
		let p = c;
		for (let r = c + 1; r < n; r++) if (Math.abs(A[r][c]) > Math.abs(A[p][c])) p = r;
		[A[c], A[p]] = [A[p], A[c]];
		for (let r = 0; r < n; r++) {
			if (r === c) continue;
			const f = A[r][c] / A[c][c];
			for (let j = c; j <= n; j++) A[r][j] -= f * A[c][j];
		}
	}
	return A.map((row, i) => row[n] / row[i]);
}

const norm = (v) => Math.sqrt(v.reduce((a, x) => a + x * x, 0));

describe('embeddings on the real engine', { skip }, () => {
	let s, oai;
	before(async () => {
		s = await startStack({ realEngine: true, frontend: ['--parallel', '2', '--embeddings'] });
		oai = new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
	});
	after(async () => {
		await s?.stop();
	});

	it('the mean of the final hidden states, normalised, as llama.cpp computes them', async () => {
		const meta = JSON.parse(fs.readFileSync(path.join(data, 'stories260K.json'), 'utf8'));
		const buf = fs.readFileSync(path.join(data, 'stories260K.logits.bin'));
		const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
		const E = ggufTensor(path.join(data, 'stories260K.gguf'), 'output.weight');
		const V = meta.n_vocab, P = meta.prompt_ids.length;
		const mean = new Float64Array(E.ne0);
		for (let p = 0; p < P; p++) {
			const h = solve(E, logits.subarray(p * V, (p + 1) * V));
			for (let i = 0; i < E.ne0; i++) mean[i] += h[i] / P;
		}
		const want = Array.from(mean, (x) => x / norm(mean));

		const r = await oai.embeddings.create({ model: 'm', input: 'Once upon a time' });
		assert.equal(r.object, 'list');
		assert.equal(r.data.length, 1);
		assert.equal(r.data[0].index, 0);
		const got = r.data[0].embedding;
		assert.equal(got.length, E.ne0);
		assert.ok(Math.abs(norm(got) - 1) < 1e-5, `norm ${norm(got)}`);
		assert.equal(r.usage.prompt_tokens, P);
		assert.equal(r.usage.total_tokens, P);
		let worst = 0;
		for (let i = 0; i < E.ne0; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
		// the emu's fp16 kernels against llama.cpp's fp32: measured 1.5e-4
		assert.ok(worst < 2e-3, `largest difference from llama.cpp ${worst}`);
		if (process.env.SHOW_EMBED_ERROR) console.log(`embedding vs llama.cpp: max abs difference ${worst}`);
		// the prompt's own ids give the same vector
		const ids = await oai.embeddings.create({ model: 'm', input: [meta.prompt_ids] });
		assert.deepEqual(ids.data[0].embedding, got);
		const flat = await oai.embeddings.create({ model: 'm', input: meta.prompt_ids });
		assert.deepEqual(flat.data[0].embedding, got);
	});

	it('deterministic to the bit, alone or batched; float and base64 agree', async () => {
		const texts = Array.from({ length: 21 }, (_, i) => `Story ${i}: ${'the little dog ran and '.repeat(1 + (i % 7) * 3)}home.`);
		texts.push('x', 'Lily and Ben went to the park to play.');
		const batch = await oai.embeddings.create({ model: 'm', input: texts, encoding_format: 'float' });
		assert.deepEqual(batch.data.map((d) => d.index), texts.map((_, i) => i));
		let tokens = 0;
		for (const [i, t] of texts.entries()) {
			const one = await oai.embeddings.create({ model: 'm', input: t, encoding_format: 'float' });
			assert.deepEqual(one.data[0].embedding, batch.data[i].embedding, `input ${i}`);
			tokens += one.usage.prompt_tokens;
		}
		assert.equal(batch.usage.prompt_tokens, tokens);
		assert.ok(tokens > 23 * 64 / 8, 'some inputs are longer than a kernel call');
		const again = await oai.embeddings.create({ model: 'm', input: texts, encoding_format: 'float' });
		assert.deepEqual(again.data, batch.data);
		// base64 is the float32 bits; the SDK decodes it when no format is asked for
		const b64 = await oai.embeddings.create({ model: 'm', input: texts.slice(0, 3), encoding_format: 'base64' });
		const sdk = await oai.embeddings.create({ model: 'm', input: texts.slice(0, 3) });
		for (let i = 0; i < 3; i++) {
			const raw = Buffer.from(b64.data[i].embedding, 'base64');
			const f = Array.from(new Float32Array(raw.buffer, raw.byteOffset, raw.length / 4));
			assert.deepEqual(f, batch.data[i].embedding.map(Math.fround));
			assert.deepEqual(sdk.data[i].embedding, f);
		}
		// distinct texts, distinct vectors
		assert.notDeepEqual(batch.data[0].embedding, batch.data[1].embedding);
	});

	it('a generation running beside a large request gives its own reply', async () => {
		const req = { model: 'm', prompt: 'Once upon a time', max_tokens: 40, temperature: 0 };
		const alone = await oai.completions.create(req);
		const inputs = Array.from({ length: 300 }, (_, i) => `Tale ${i}: the cat sat on the mat and looked at the sun.`);
		const [emb, beside] = await Promise.all([oai.embeddings.create({ model: 'm', input: inputs }), oai.completions.create(req)]);
		assert.equal(emb.data.length, 300);
		assert.equal(beside.choices[0].text, alone.choices[0].text);
	});

	it('400 names the field; the server answers after each', async () => {
		const cases = [
			[{}, 'input'],
			[{ input: null }, 'input'],
			[{ input: 5 }, 'input'],
			[{ input: [] }, 'input'],
			[{ input: '' }, 'input'],
			[{ input: ['ok', ''] }, 'input'],
			[{ input: ['ok', 5] }, 'input'],
			[{ input: [[]] }, 'input'],
			[{ input: [[1, 600]] }, 'input'],
			[{ input: [1, 'a'] }, 'input'],
			[{ input: [[1.5]] }, 'input'],
			[{ input: Array(2049).fill('a') }, 'input'],
			[{ input: [Array(2049).fill(5)] }, null],
			[{ input: 'x', encoding_format: 'hex' }, 'encoding_format'],
			[{ input: 'x', encoding_format: 3 }, 'encoding_format'],
			[{ input: 'x', dimensions: 0 }, 'dimensions'],
			[{ input: 'x', dimensions: 32 }, 'dimensions'],
			[{ input: 'x', model: 4 }, 'model'],
		];
		for (const [body, param] of cases) {
			const r = await post(s, '/v1/embeddings', body);
			assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.body}`);
			const e = JSON.parse(r.body).error;
			assert.equal(e.type, 'invalid_request_error');
			if (param) assert.equal(e.param, param, e.message);
			else assert.match(e.message, /context/);
			assert.equal((await request(s, 'GET', '/health')).status, 200);
		}
		await assert.rejects(oai.embeddings.create({ model: 'm', input: 'x', dimensions: 8 }), (e) => e.status === 400 && /dimensions/.test(e.message));
		const ok = await oai.embeddings.create({ model: 'm', input: 'x', dimensions: 64 });
		assert.equal(ok.data[0].embedding.length, 64);
		const g = await post(s, '/v1/embeddings', { input: 'x' }, {});
		assert.equal(g.status, 200);
		assert.equal((await request(s, 'GET', '/v1/embeddings')).status, 405);
	});
});
