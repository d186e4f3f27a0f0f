// Random JSON texts from the grammars the schema compiler (common/jschema.c)
// makes, judged by a validator from outside the project: ajv (draft 2020-12,
// with ajv-formats), pinned by package-lock.json. For each schema, 60 random
// walks through its grammar (tests/jschema-sample.c): every finished text
// must parse and validate. The schemas cover each supported keyword and a
// few real tool definitions.
//
// Environment (ctest sets it): JSCHEMA_SAMPLE_BIN. Skipped without it (e.g.
// under test-fe-sdk, which runs every file of this directory).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, it } from 'node:test';

import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const BIN = process.env.JSCHEMA_SAMPLE_BIN;
const skip = BIN ? false : 'JSCHEMA_SAMPLE_BIN not set (run through ctest -R test-jschema-ajv)';

const SCHEMAS = [
	{ type: 'string' },
	{ type: 'integer' },
	{ type: 'number' },
	{ type: ['string', 'null'] },
	{ type: 'integer', nullable: true },
	{},
	{ enum: ['red', 'green', 3, null, { a: [1, 2] }] },
	{ const: { deep: ['x', true] } },
	{ anyOf: [{ type: 'integer', minimum: 3 }, { type: 'string', maxLength: 2 }] },
	{ oneOf: [{ type: 'boolean' }, { type: 'null' }] },
	{
		type: 'object',
		properties: { a: { type: 'integer' }, b: { type: 'string' }, c: { type: 'boolean' } },
		required: ['b'],
		additionalProperties: false,
	},
	{
		type: 'object',
		properties: { id: { type: 'integer' }, idx: { type: 'integer' }, 'a"b': { type: 'null' } },
		additionalProperties: { type: 'string', maxLength: 4 },
	},
	{ type: 'object', additionalProperties: false },
	{ type: 'object' },
	{ type: 'object', required: ['k'] },
	{ type: 'array', items: { type: 'integer', minimum: -5, maximum: 5 }, minItems: 2, maxItems: 4 },
	{ type: 'array', prefixItems: [{ type: 'string' }, { type: 'number' }], items: false },
	{ type: 'array', prefixItems: [{ type: 'string' }], items: { type: 'boolean' }, minItems: 3 },
	{ type: 'string', minLength: 3, maxLength: 5 },
	{ type: 'string', format: 'date' },
	{ type: 'string', format: 'time' },
	{ type: 'string', format: 'date-time' },
	{ type: 'string', format: 'uuid' },
	{ type: 'string', format: 'email' },
	{ type: 'string', format: 'uri' },
	{ type: 'string', format: 'hostname' },
	{ type: 'string', format: 'ipv4' },
	{ type: 'integer', minimum: -37, maximum: 1234 },
	{ type: 'integer', exclusiveMinimum: 0 },
	{ type: 'integer', maximum: -12 },
	{ type: 'number', minimum: 0, maximum: 10 },
	{ type: 'number', exclusiveMinimum: -3, exclusiveMaximum: -1 },
	{ type: 'number', minimum: -5, exclusiveMaximum: 3 },
	{
		$defs: {
			node: {
				type: 'object',
				properties: { v: { type: 'integer' }, next: { anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }] } },
				required: ['v', 'next'],
				additionalProperties: false,
			},
		},
		$ref: '#/$defs/node',
	},
	{
		allOf: [
			{ properties: { a: { type: 'integer' } }, required: ['a'] },
			{ type: 'object', properties: { b: { type: 'string' } }, required: ['b'] },
		],
	},
	// real tool definitions
	{
		type: 'object',
		properties: {
			location: { type: 'string', description: 'The city and state, e.g. San Francisco, CA' },
			unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
		},
		required: ['location'],
	},
	{
		type: 'object',
		properties: {
			query: { type: 'string' },
			max_results: { type: 'integer', minimum: 1, maximum: 50 },
			filters: {
				type: 'object',
				properties: {
					after: { type: 'string', format: 'date' },
					tags: { type: 'array', items: { type: 'string' }, maxItems: 5 },
				},
				additionalProperties: false,
			},
		},
		required: ['query', 'filters'],
		additionalProperties: false,
	},
];

describe('schema grammars against ajv', { skip }, () => {
	it('every finished random text of each grammar parses and validates', () => {
		const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-jschema-'));
		const file = path.join(dir, 'schemas.json');
		let out;
		try {
			fs.writeFileSync(file, JSON.stringify(SCHEMAS));
			out = JSON.parse(execFileSync(BIN, [file, '60', '7'], { maxBuffer: 64 << 20 }).toString());
		} finally {
			fs.rmSync(dir, { recursive: true, force: true });
		}
		assert.equal(out.samples.length, SCHEMAS.length);
		const ajv = new Ajv2020({ strict: false, allErrors: false });
		addFormats(ajv);
		let total = 0;
		out.samples.forEach((list, i) => {
			assert.ok(Array.isArray(list), `schema ${i} refused: ${JSON.stringify(list)}`);
			assert.ok(list.length >= 50, `schema ${i}: only ${list.length} of 60 walks finished`);
			let schema = SCHEMAS[i];
			// OpenAPI's nullable, which ajv reads only beside a type, as a type list
			if (schema.nullable) schema = { ...schema, type: [schema.type, 'null'], nullable: undefined };
			const validate = ajv.compile(schema);
			for (const text of list) {
				let v;
				assert.doesNotThrow(() => { v = JSON.parse(text); }, `schema ${i}: not JSON: ${JSON.stringify(text)}`);
				assert.ok(validate(v), `schema ${i} ${JSON.stringify(SCHEMAS[i])}: ${JSON.stringify(text)} fails: ${ajv.errorsText(validate.errors)}`);
				total++;
			}
		});
		assert.ok(total > SCHEMAS.length * 50, `${total} texts`);
	});

	it('refuses what it cannot express, naming the keyword', () => {
		const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'anedvd-jschema-'));
		const file = path.join(dir, 'schemas.json');
		let out;
		try {
			fs.writeFileSync(file, JSON.stringify([{ type: 'string', pattern: 'a+' }, { type: 'number', multipleOf: 3 }]));
			out = JSON.parse(execFileSync(BIN, [file, '1', '1']).toString());
		} finally {
			fs.rmSync(dir, { recursive: true, force: true });
		}
		assert.match(out.samples[0].error, /'pattern' is not supported/);
		assert.match(out.samples[1].error, /'multipleOf' is not supported/);
	});
});
