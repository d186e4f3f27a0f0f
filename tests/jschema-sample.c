// jschema-sample.c - random JSON texts from a schema's grammar, for the
// node test that validates them with ajv (tests/node/jschema.test.mjs).
//
//   jschema-sample FILE N SEED
//
// FILE holds a JSON array of schemas. For each, N random walks through its
// grammar (jsg_schema_gbnf, then the matcher over a vocabulary of single
// bytes): at every step a random allowed byte, or the end where the grammar
// can end (more likely as the text grows; past 400 bytes a closing quote or
// bracket first). Prints {"samples": [[text, ...], ...], "unfinished": K}
// (K walks that reached 4000 bytes), or {"error": message} for a schema the
// compiler refuses. A test tool, not run by ctest by itself.
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "grammar.h"
#include "jschema.h"

enum { EOS = 256, NV = 257, MAX_LEN = 4000 };

static uint64_t rng;

static uint64_t
next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static int
allowed(const uint64_t *m, int i)
{
	return m[i >> 6] >> (i & 63) & 1;
}

// one walk into buf; 1 finished, 0 not within MAX_LEN, -1 an error
static int
walk(const struct gbnf *g, const struct gram_vocab *v, char *buf, size_t *len, char *err)
{
	int32_t stop = EOS;
	struct gram_opts o = {.g = g, .v = v, .stop = &stop, .n_stop = 1};
	struct gram *m = gram_new(&o, err);
	if (!m)
		return -1;
	uint64_t mask[(NV + 63) / 64];
	size_t n = 0;
	int rv = 0;
	while (n < MAX_LEN) {
		int c = gram_mask(m, mask, err);
		if (c <= 0) {
			rv = -1;
			snprintf(err, AD_ERRLEN, "no byte allowed after %zu bytes", n);
			break;
		}
		int end = allowed(mask, EOS);
		if (end && (c == 1 || next() % 1000 < (n > 400 ? 900 : 150))) {
			rv = 1;
			break;
		}
		int pick = -1;
		if (n > 400) // head for the end
			for (const char *p = "\"}]0e"; *p && pick < 0; p++)
				if (allowed(mask, (unsigned char)*p))
					pick = (unsigned char)*p;
		while (pick < 0) {
			int i = (int)(next() % 256);
			if (allowed(mask, i))
				pick = i;
		}
		if (gram_accept(m, pick, err)) {
			rv = -1;
			break;
		}
		buf[n++] = (char)pick;
	}
	buf[n] = 0;
	*len = n;
	gram_free(m);
	return rv;
}

int
main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: jschema-sample FILE N SEED\n");
		return 2;
	}
	FILE *f = fopen(argv[1], "rb");
	if (!f)
		return perror(argv[1]), 1;
	static char text[1 << 20];
	size_t tl = fread(text, 1, sizeof text - 1, f);
	fclose(f);
	text[tl] = 0;
	int count = atoi(argv[2]);
	rng = strtoull(argv[3], NULL, 10) * 0x9e3779b97f4a7c15ull + 1;
	cJSON *schemas = cJSON_Parse(text);
	if (!cJSON_IsArray(schemas))
		return fprintf(stderr, "%s: not a JSON array\n", argv[1]), 1;
	static char b[256][1];
	const char *bytes[NV];
	uint32_t len[NV];
	for (int i = 0; i < 256; i++) {
		b[i][0] = (char)i;
		bytes[i] = b[i];
		len[i] = 1;
	}
	bytes[EOS] = NULL;
	len[EOS] = 0;
	char err[AD_ERRLEN];
	struct gram_vocab *v = gram_vocab_new(NV, bytes, len, err);
	cJSON *out = cJSON_CreateObject(), *all = cJSON_AddArrayToObject(out, "samples");
	int unfinished = 0;
	const cJSON *s;
	cJSON_ArrayForEach(s, schemas)
	{
		size_t n;
		char *gt = jsg_schema_gbnf(s, "schema", &n, err);
		struct gbnf *g = NULL;
		if (!gt || gbnf_compile(gt, n, NULL, NULL, NULL, &g, err)) {
			cJSON *e = cJSON_CreateObject();
			cJSON_AddStringToObject(e, "error", err);
			cJSON_AddItemToArray(all, e);
			free(gt);
			continue;
		}
		cJSON *list = cJSON_CreateArray();
		cJSON_AddItemToArray(all, list);
		for (int k = 0; k < count; k++) {
			static char buf[MAX_LEN + 1];
			size_t bl;
			int rv = walk(g, v, buf, &bl, err);
			if (rv < 0) {
				fprintf(stderr, "jschema-sample: %s\n%s\n", err, gt);
				return 1;
			}
			if (rv == 0)
				unfinished++;
			else
				cJSON_AddItemToArray(list, cJSON_CreateString(buf));
		}
		gbnf_free(g);
		free(gt);
	}
	cJSON_AddNumberToObject(out, "unfinished", unfinished);
	char *j = cJSON_PrintUnformatted(out);
	puts(j);
	free(j);
	cJSON_Delete(out);
	cJSON_Delete(schemas);
	gram_vocab_free(v);
	return 0;
}
