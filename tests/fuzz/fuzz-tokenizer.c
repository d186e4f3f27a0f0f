// fuzz-tokenizer.c - arbitrary bytes through encode, decode and the stream,
// with the stories260K SentencePiece and the GPT-2 BPE vocabularies (loaded
// once). The first input byte picks the vocabulary and the flags.
#define _GNU_SOURCE // memmem
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

#ifndef T_DATA
#define T_DATA "tests/data"
#endif

static struct tokenizer *vocab[2];

static void
load_once(void)
{
	static int done;
	if (done)
		return;
	done = 1;
	char err[AD_ERRLEN];
	vocab[0] = tok_load(T_DATA "/stories260K/stories260K.gguf", err);
	if (!vocab[0]) {
		fprintf(stderr, "fuzz-tokenizer: %s\n", err);
		abort(); // the harness itself is broken
	}
	vocab[1] = tok_load(T_DATA "/tokenizer/ggml-vocab-gpt-2.gguf", err);
	if (!vocab[1]) // without byte-level BPE only SentencePiece is fuzzed
		fprintf(stderr, "fuzz-tokenizer: gpt-2 vocabulary: %s\n", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	load_once();
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	const struct tokenizer *t = vocab[mode & 1] ? vocab[mode & 1] : vocab[0];
	const char *text = (const char *)data + 1;
	size_t len = size - 1;
	int add_bos = (int)((mode >> 1) % 3) - 1;
	int special = (mode >> 3) & 1;
	char err[AD_ERRLEN];
	int32_t *ids;
	size_t n;
	if (tok_encode(t, text, len, add_bos, special, &ids, &n, err))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= tok_n_vocab(t))
			abort();
	char *s;
	size_t slen;
	if (tok_decode(t, ids, n, &s, &slen, err))
		abort();
	// without special tokens and BOS the bytes must come back unchanged
	// (SentencePiece reads a literal U+2581 as a space, so skip those)
	int has_sp = memmem(text, len, "\xe2\x96\x81", 3) != NULL;
	if (!special && add_bos == 0 && !has_sp && (slen != len || memcmp(s, text, len) != 0))
		abort();
	free(s);
	struct tok_stream st;
	tok_stream_init(&st, t);
	size_t total = 0, k;
	for (size_t i = 0; i < n; i++) {
		if (!tok_stream_push(&st, ids[i], &k, err))
			abort();
		total += k;
	}
	tok_stream_flush(&st, &k);
	total += k;
	tok_stream_free(&st);
	free(ids);
	// the stream also gives the ids' bytes, with the SPM space prefix kept
	(void)total;
	return 0;
}
