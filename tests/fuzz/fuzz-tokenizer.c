// fuzz-tokenizer.c - arbitrary bytes through encode, decode and the stream,
// with the stories260K SentencePiece vocabulary, the GPT-2 BPE one and a
// small synthetic one with overlapping special tokens (loaded once). The
// first input byte picks the vocabulary and the flags.
#define _GNU_SOURCE // memmem
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

#ifndef T_DATA
#define T_DATA "tests/data"
#endif

static struct tokenizer *vocab[3];

// a small SentencePiece vocabulary whose special tokens overlap each other,
// to stress the special-token partition
static struct tokenizer *
synthetic(char *err)
{
	static const char *fixed[] = {"<unk>",
	                              "<s>",
	                              "</s>",
	                              "<|x|>",
	                              "<|x|><|y|>",
	                              "|>",
	                              "<|y|>",
	                              "\xe2\x96\x81",
	                              "\xe2\x96\x81\xe2\x96\x81",
	                              "a",
	                              "b",
	                              "ab",
	                              "\xe2\x96\x81"
	                              "a",
	                              "<",
	                              "x"};
	static const int32_t fixed_type[] = {2, 3, 3, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1};
	enum { NF = sizeof fixed / sizeof fixed[0] };
	const char *toks[NF + 256];
	char bytes[256][8];
	int32_t types[NF + 256];
	float scores[NF + 256];
	for (int i = 0; i < NF; i++) {
		toks[i] = fixed[i];
		types[i] = fixed_type[i];
		scores[i] = (float)-i;
	}
	for (int b = 0; b < 256; b++) {
		snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
		toks[NF + b] = bytes[b];
		types[NF + b] = 6;
		scores[NF + b] = 0;
	}
	struct gguf_writer *w = gguf_writer_new();
	gguf_writer_str(w, "tokenizer.ggml.model", "llama");
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, NF + 256);
	gguf_writer_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, NF + 256);
	gguf_writer_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, NF + 256);
	size_t n;
	void *buf = gguf_writer_bytes(w, &n);
	gguf_writer_free(w);
	struct gguf *g = buf ? gguf_open_memory(buf, n, err) : NULL;
	struct tokenizer *t = g ? tok_load_gguf(g, err) : NULL;
	gguf_close(g);
	free(buf);
	return t;
}

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
	vocab[2] = synthetic(err);
	if (!vocab[2]) {
		fprintf(stderr, "fuzz-tokenizer: synthetic vocabulary: %s\n", err);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	load_once();
	if (size < 1)
		return 0;
	uint8_t mode = data[0];
	// bit 0: gpt-2; else bit 4: the synthetic vocabulary
	const struct tokenizer *t = (mode & 1) && vocab[1] ? vocab[1] : (mode & 16) ? vocab[2] : vocab[0];
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
	// (SentencePiece reads a literal U+2581 as a space, so skip those; the
	// synthetic vocabulary's user-defined tokens are matched even so, and
	// text after them gets the SPM space prefix, so skip it too)
	int has_sp = memmem(text, len, "\xe2\x96\x81", 3) != NULL;
	if (!special && add_bos == 0 && !has_sp && t != vocab[2] && (slen != len || memcmp(s, text, len) != 0))
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
