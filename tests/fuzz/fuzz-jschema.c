// fuzz-jschema.c - arbitrary bytes as a JSON Schema through the schema
// compiler: a schema it accepts must give a grammar gbnf_compile accepts,
// whose start state matches something; a refusal names itself.
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "grammar.h"
#include "jschema.h"

static struct gram_vocab *vocab;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!vocab) {
		static char b[256][1];
		const char *bytes[257];
		uint32_t len[257];
		for (int i = 0; i < 256; i++) {
			b[i][0] = (char)i;
			bytes[i] = b[i];
			len[i] = 1;
		}
		bytes[256] = NULL, len[256] = 0;
		char err[AD_ERRLEN];
		if (!(vocab = gram_vocab_new(257, bytes, len, err)))
			abort();
	}
	cJSON *s = cJSON_ParseWithLength((const char *)data, size);
	if (!s)
		return 0;
	char err[AD_ERRLEN] = "";
	size_t n = 0;
	char *t = jsg_schema_gbnf(s, "schema", &n, err);
	if (!t) {
		if (!err[0])
			abort();
		cJSON_Delete(s);
		return 0;
	}
	struct gbnf *g = NULL;
	if (gbnf_compile(t, n, NULL, NULL, NULL, &g, err)) {
		fprintf(stderr, "fuzz-jschema: the grammar does not compile: %s\n%s\n", err, t);
		abort();
	}
	int32_t stop = 256;
	struct gram_opts o = {.g = g, .v = vocab, .stop = &stop, .n_stop = 1};
	struct gram *m = gram_new(&o, err);
	if (!m && !strstr(err, "matches no text")) {
		fprintf(stderr, "fuzz-jschema: %s\n%s\n", err, t);
		abort();
	}
	// a few steps: the first allowed byte each time
	uint64_t mask[5];
	for (int step = 0; m && step < 24 && !gram_done(m); step++) {
		int c = gram_mask(m, mask, err);
		if (c <= 0)
			break;
		int id = -1;
		for (int i = 0; i < 257 && id < 0; i++)
			if (mask[i >> 6] >> (i & 63) & 1)
				id = i;
		if (id == 256 || gram_accept(m, id, err))
			break;
	}
	gram_free(m);
	gbnf_free(g);
	free(t);
	cJSON_Delete(s);
	return 0;
}
