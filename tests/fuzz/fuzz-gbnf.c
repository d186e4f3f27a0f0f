// fuzz-gbnf.c - arbitrary bytes through the GBNF compiler and, when they
// compile, a few steps of the grammar matcher over a small vocabulary
// (single ASCII bytes, a few multi-byte and UTF-8 tokens, a control token,
// the stop id): masks of the trie walk and of the brute force must agree,
// every masked token must be accepted. The first byte picks the options
// (a resolver for <text> tokens, the plain twin too, a lazy trigger).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "grammar.h"

enum { NV = 140, EOS = 128, CTRL = 129 };
static struct gram_vocab *vocab;

static int32_t
resolve(void *ctx, const char *s, size_t n)
{
	(void)ctx;
	return n == 7 && !memcmp(s, "<think>", 7) ? CTRL : -1;
}

static void
load_once(void)
{
	if (vocab)
		return;
	static char b[128][1];
	static const char *multi[] = {"ab",   "\"}",          "{\"", "\xc3\xa9", "\xc3",
	                              "\xa9", "\xe4\xb8\xad", "  ",  "true",     "null"};
	const char *bytes[NV];
	uint32_t len[NV];
	for (int i = 0; i < 128; i++) {
		b[i][0] = (char)i;
		bytes[i] = b[i];
		len[i] = 1;
	}
	bytes[EOS] = NULL, len[EOS] = 0;
	bytes[CTRL] = "", len[CTRL] = 0;
	for (int i = 0; i < 10; i++) {
		bytes[130 + i] = multi[i];
		len[130 + i] = (uint32_t)strlen(multi[i]);
	}
	char err[AD_ERRLEN];
	vocab = gram_vocab_new(NV, bytes, len, err);
	if (!vocab) {
		fprintf(stderr, "fuzz-gbnf: %s\n", err);
		abort();
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	load_once();
	if (size < 1)
		return 0;
	uint8_t opt = data[0];
	char err[AD_ERRLEN];
	struct gbnf *g = NULL;
	if (gbnf_compile((const char *)data + 1, size - 1, NULL, opt & 1 ? resolve : NULL, NULL, &g, err)) {
		if (!err[0] || g)
			abort(); // a failure names itself and returns nothing
		return 0;
	}
	if (g->n_el > 4000 || g->n_unresolved) {
		gbnf_free(g);
		return 0;
	}
	int32_t stop = EOS;
	const char *words[] = {"{\""};
	struct gram_opts o = {.g = g,
	                      .v = vocab,
	                      .stop = &stop,
	                      .n_stop = 1,
	                      .lazy = (opt & 4) != 0,
	                      .words = words,
	                      .n_words = 1,
	                      .max_states = opt & 8 ? 4 : 0};
	struct gram *fast = gram_new(&o, err);
	int with_ref = (opt & 2) && g->n_el < 300;
	o.ref = 1;
	struct gram *ref = fast && with_ref ? gram_new(&o, err) : NULL;
	uint64_t a[(NV + 63) / 64], r[(NV + 63) / 64];
	uint32_t seed = (uint32_t)size * 2654435761u ^ opt;
	for (int step = 0; fast && step < 12; step++) {
		int na = gram_mask(fast, a, err);
		if (na < 0)
			break; // too ambiguous: a clean error
		if (ref) {
			int nr = gram_mask(ref, r, err);
			if (nr >= 0 && (nr != na || memcmp(a, r, sizeof a)))
				abort(); // the twins disagree
			if (nr < 0)
				break;
		}
		if (na == 0)
			break;
		seed = seed * 1103515245u + 12345u;
		int pick = (int)(seed >> 8) % na, id = -1;
		for (int i = 0; i < NV; i++)
			if ((a[i >> 6] >> (i & 63) & 1) && pick-- == 0) {
				id = i;
				break;
			}
		if (gram_allows(fast, id, err) != 1 || gram_accept(fast, id, err))
			abort(); // a masked token must be accepted
		if (ref && gram_accept(ref, id, err))
			abort();
		if (id == EOS || gram_done(fast))
			break;
	}
	gram_free(fast);
	gram_free(ref);
	gbnf_free(g);
	return 0;
}
