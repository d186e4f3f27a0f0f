// test-bpe.c - byte-level BPE against llama.cpp's tokenizer test vectors.
//
// gpt-2 runs from its vocab-only GGUF; qwen2 and llama-bpe run from the
// Qwen3 and Llama 3 tokenizer.json (the vectors were made by Hugging Face
// tokenizers from those). Every case must match exactly (add_special = 0,
// parse_special = 0), and decoding the ids must give the input back.
// Small hand-made vocabularies check merge order, ignore_merges, both merge
// formats and the refusals.
#define _GNU_SOURCE // memmem
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "err.h"
#include "gguf.h"
#include "t.h"
#include "tokenizer.h"
#include "unicode.h"

#define TOK_DIR T_DATA "/tokenizer"

struct cases {
	char *inp_buf;
	char **text;
	size_t *len;
	int32_t **ids;
	size_t *n_ids;
	size_t n;
};

static void
cases_free(struct cases *c)
{
	for (size_t i = 0; i < c->n; i++)
		free(c->ids[i]);
	free(c->ids);
	free(c->n_ids);
	free(c->text);
	free(c->len);
	free(c->inp_buf);
	memset(c, 0, sizeof *c);
}

// the .inp / .out format of llama.cpp's test-tokenizer-0
static int
cases_load(struct cases *c, const char *name)
{
	char path[512];
	size_t n_inp, n_out;
	memset(c, 0, sizeof *c);
	snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.inp", TOK_DIR, name);
	c->inp_buf = t_read_file(path, &n_inp);
	snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.out", TOK_DIR, name);
	char *out = t_read_file(path, &n_out);
	if (!c->inp_buf || !out) {
		free(out);
		return -1;
	}
	static const char sep[] = "\n__ggml_vocab_test__\n";
	size_t cap = 0;
	for (char *p = c->inp_buf; p < c->inp_buf + n_inp;) {
		char *q = memmem(p, (size_t)(c->inp_buf + n_inp - p), sep, sizeof sep - 1);
		size_t l = q ? (size_t)(q - p) : (size_t)(c->inp_buf + n_inp - p);
		if (c->n == cap) {
			cap = cap ? 2 * cap : 64;
			c->text = realloc(c->text, cap * sizeof *c->text);
			c->len = realloc(c->len, cap * sizeof *c->len);
			c->ids = realloc(c->ids, cap * sizeof *c->ids);
			c->n_ids = realloc(c->n_ids, cap * sizeof *c->n_ids);
		}
		c->text[c->n] = p;
		c->len[c->n] = l;
		c->ids[c->n] = NULL;
		c->n_ids[c->n] = 0;
		c->n++;
		if (!q)
			break;
		p = q + sizeof sep - 1;
	}
	size_t line = 0;
	for (char *p = out; p < out + n_out && line < c->n; line++) {
		char *e = memchr(p, '\n', (size_t)(out + n_out - p));
		if (!e)
			e = out + n_out;
		*e = 0;
		size_t k = 0;
		c->ids[line] = malloc((strlen(p) / 2 + 1) * sizeof(int32_t));
		for (char *s = p, *end; *s;) {
			long v = strtol(s, &end, 10);
			if (end == s)
				break;
			c->ids[line][k++] = (int32_t)v;
			s = end;
		}
		c->n_ids[line] = k;
		p = e + 1;
	}
	free(out);
	return line == c->n ? 0 : -1;
}

static int
same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
	return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void
print_ids(const char *what, const int32_t *v, size_t n)
{
	fprintf(stderr, "  %s:", what);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %d", v[i]);
	fprintf(stderr, "\n");
}

// run every case of ggml-vocab-<name>; check round trips; returns passes
static void
run_vectors(struct tokenizer *t, const char *name, const char *via, int nfc)
{
	struct cases c;
	char err[AD_ERRLEN];
	REQUIRE(cases_load(&c, name) == 0, "%s vectors", name);
	REQUIRE(c.n >= 40, "%zu cases", c.n);
	size_t pass = 0, round = 0;
	for (size_t i = 0; i < c.n; i++) {
		int32_t *ids;
		size_t n;
		int rc = tok_encode(t, c.text[i], c.len[i], 0, 0, &ids, &n, err);
		CHECK(rc == 0, "%s", err);
		if (rc)
			continue;
		int ok = same_ids(ids, n, c.ids[i], c.n_ids[i]);
		pass += ok;
		CHECK(ok, "%s case %zu \"%.*s\"", name, i, (int)c.len[i], c.text[i]);
		if (!ok) {
			print_ids("got ", ids, n);
			print_ids("want", c.ids[i], c.n_ids[i]);
		}
		char *back;
		size_t nb;
		if (nfc < 0) { // a normalising tokenizer (lowercase, accents): no round trip
			free(ids);
			continue;
		}
		if (tok_decode(t, ids, n, &back, &nb, err) == 0) {
			size_t wn = c.len[i];
			char *want = nfc ? unicode_nfc(c.text[i], c.len[i], &wn) : NULL;
			int same = nb == wn && !memcmp(back, want ? want : c.text[i], nb);
			round += same;
			CHECK(same, "%s round trip of case %zu: \"%.*s\"", name, i, (int)nb, back);
			free(want);
			free(back);
		} else {
			CHECK(0, "decode: %s", err);
		}
		free(ids);
	}
	if (nfc < 0)
		printf("%s (%s): %zu/%zu cases match\n", name, via, pass, c.n);
	else
		printf("%s (%s): %zu/%zu cases match, %zu/%zu round trips\n", name, via, pass, c.n, round, c.n);

	// throughput on the cases joined by spaces and repeated to 1 MiB (a
	// figure, not a check)
	size_t cap = 1 << 20, n = 0;
	char *big = malloc(cap);
	while (n < cap)
		for (size_t i = 0; i < c.n && n < cap; i++) {
			size_t l = c.len[i] < cap - n ? c.len[i] : cap - n;
			memcpy(big + n, c.text[i], l);
			n += l;
			if (n < cap)
				big[n++] = ' ';
		}
	struct timespec t0, t1;
	int32_t *ids;
	size_t n_ids;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = tok_encode(t, big, n, 0, 0, &ids, &n_ids, err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(rc == 0, "%s", err);
	double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	if (rc == 0) {
		printf("%s (%s): encode 1 MiB of the cases: %zu ids, %.1f MB/s, %.2f M tokens/s\n", name, via, n_ids,
		       (double)n / sec / 1e6, (double)n_ids / sec / 1e6);
		free(ids);
	}
	free(big);
	cases_free(&c);
}

// xz -dc the tokenizer.json into its own scratch directory
static char *
unxz(const char *file, const char *sub)
{
	static char path[1024];
	char cmd[2048], dir[768];
	snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), sub);
	mkdir(dir, 0700);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	snprintf(cmd, sizeof cmd, "xz -dc '%s/%s' > '%s'", TOK_DIR, file, path);
	return system(cmd) == 0 ? path : NULL;
}

// xz -dc a compressed GGUF into the scratch directory
static char *
unxz_gguf(const char *name)
{
	static char path[1024];
	char cmd[2048];
	snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", t_tmpdir(), name);
	snprintf(cmd, sizeof cmd, "xz -dc '%s/ggml-vocab-%s.gguf.xz' > '%s'", TOK_DIR, name, path);
	return system(cmd) == 0 ? path : NULL;
}

// random bytes (valid UTF-8 in several scripts, invalid sequences, spaces
// and digits) encode and decode back to themselves (to their NFC with nfc)
static void
random_round_trips(struct tokenizer *t, const char *name, int nfc)
{
	static const char *bits[] = {"a",
	                             "Z",
	                             " ",
	                             "  ",
	                             "\n",
	                             "\r\n",
	                             "\t",
	                             "7",
	                             "42",
	                             "'s",
	                             "'LL",
	                             ".",
	                             "!?",
	                             "\xc3\xa9",
	                             "e\xcc\x81",
	                             "\xe4\xb8\xad",
	                             "\xf0\x9f\xa6\x99",
	                             "\xd0\xb6",
	                             "\xd9\xa3",
	                             "\xe0\xa4\x95\xe0\xa4\xbf",
	                             "\xff",
	                             "\xc0\x80",
	                             "\xed\xa0\x80",
	                             "\xe2\x82",
	                             "\x80",
	                             "\xc2\xa0",
	                             "\xe3\x80\x80",
	                             "<|im_end|>",
	                             "\x00"};
	char err[AD_ERRLEN], buf[256];
	unsigned seed = 7;
	int bad = 0;
	for (int it = 0; it < 3000; it++) {
		size_t n = 0;
		seed = seed * 1103515245u + 12345u;
		int parts = (int)((seed >> 16) % 24);
		for (int k = 0; k < parts; k++) {
			seed = seed * 1103515245u + 12345u;
			const char *b = bits[(seed >> 16) % (sizeof bits / sizeof bits[0])];
			size_t l = *b ? strlen(b) : 1; // "\x00" is one NUL byte
			memcpy(buf + n, b, l);
			n += l;
		}
		int32_t *ids;
		size_t n_ids, nb;
		char *back;
		if (tok_encode(t, buf, n, 0, 0, &ids, &n_ids, err)) {
			bad++;
			continue;
		}
		if (tok_decode(t, ids, n_ids, &back, &nb, err) == 0) {
			size_t wn = n;
			char *want = nfc ? unicode_nfc(buf, n, &wn) : NULL;
			bad += !(nb == wn && !memcmp(back, want ? want : buf, nb));
			free(want);
			free(back);
		} else {
			bad++;
		}
		free(ids);
	}
	CHECK(bad == 0, "%s: %d of 3000 random strings do not round trip", name, bad);
}

// vocabularies whose pre-tokenizers have no hand-written matcher (PCRE2 runs
// their regexes: deepseek-llm, deepseek-coder, falcon) or share one (mpt:
// gpt-2; starcoder, refact: digits then gpt-2), against llama.cpp's vectors
static void
test_regex_vocabs(void)
{
	static const struct {
		const char *name, *pre;
		int regex; // rules through PCRE2
	} v[] = {
		{"deepseek-llm", "deepseek-llm", 1},
		{"deepseek-coder", "deepseek-coder", 1},
		{"falcon", "falcon", 1},
		{"mpt", "mpt", 0},
		{"starcoder", "starcoder", 0},
		{"refact", "refact", 0},
	};
	char err[AD_ERRLEN];
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		const char *path = unxz_gguf(v[i].name);
		REQUIRE(path, "xz -dc %s", v[i].name);
		struct tokenizer *t = tok_load(path, err);
		CHECK(t, "%s: %s", v[i].name, err);
		if (!t)
			continue;
		run_vectors(t, v[i].name, v[i].regex ? "gguf, PCRE2" : "gguf", 0);
		tok_free(t);
		unlink(path);
	}
}

// phi-3's SentencePiece vocabulary (32064 pieces, Phi-3's specials):
// llama.cpp's vectors
static void
test_phi3_vocab(void)
{
	char err[AD_ERRLEN];
	const char *path = unxz_gguf("phi-3");
	REQUIRE(path, "xz -dc phi-3");
	struct tokenizer *t = tok_load(path, err);
	REQUIRE(t, "%s", err);
	CHECK(!strcmp(tok_kind_name(t), "spm") && tok_n_vocab(t) == 32064);
	run_vectors(t, "phi-3", "gguf, SentencePiece", 0);
	tok_free(t);
	unlink(path);
}

// SentencePiece-style BPE (tokenizer.ggml.model "gemma4"): a vocabulary made
// like Gemma 4's from llama-spm's pieces (gemma4-vocab.py), against
// llama.cpp's own tokenizer on it (gemma4-out.py): spaces as U+2581, the
// merges over raw UTF-8, words of newlines whole, <0xNN> for characters
// without a token; BOS on although the file says no
static void
test_gemma4_vocab(void)
{
	char err[AD_ERRLEN];
	const char *path = unxz_gguf("gemma4-style");
	REQUIRE(path, "xz -dc gemma4-style");
	struct tokenizer *t = tok_load(path, err);
	REQUIRE(t, "%s", err);
	CHECK(!strcmp(tok_kind_name(t), "bpe") && tok_n_vocab(t) == 32005, "%s %d", tok_kind_name(t), tok_n_vocab(t));
	CHECK(tok_add_bos(t) == 1, "gemma4 adds BOS whatever add_bos_token says");
	run_vectors(t, "gemma4-style", "gguf, SentencePiece-style BPE", 0);
	random_round_trips(t, "gemma4-style", 0);
	// a character without a token: its bytes; ▁ and <0xNN> decode to a space and the byte
	int32_t *ids;
	size_t n;
	REQUIRE(tok_encode(t,
	                   "\xf0\x9f\xa6\x99"
	                   "5",
	                   5, 0, 0, &ids, &n, err) == 0,
	        "%s", err);
	const char *want[] = {"<0xF0>", "<0x9F>", "<0xA6>", "<0x99>", "5"};
	CHECK(n == 5, "the llama emoji as four bytes and the digit: %zu ids", n);
	for (size_t i = 0; i < n && i < 5; i++) {
		size_t pn;
		const char *p = tok_piece(t, ids[i], &pn);
		CHECK(pn == strlen(want[i]) && !memcmp(p, want[i], pn), "id %zu: %.*s, not %s", i, (int)pn, p, want[i]);
	}
	free(ids);
	// the turn markers parsed as specials: llama.cpp's llama-tokenize (no BOS,
	// specials parsed) gives 32003 1792 32000 2918 32004; "<turn|>" ends a turn
	const int32_t turn[] = {32003, 1792, 32000, 2918, 32004};
	REQUIRE(tok_encode(t, "<|turn>user\nhi<turn|>", 21, 0, 1, &ids, &n, err) == 0, "%s", err);
	CHECK(same_ids(ids, n, turn, 5), "<|turn>user\\nhi<turn|> with specials parsed");
	if (!same_ids(ids, n, turn, 5))
		print_ids("got ", ids, n);
	free(ids);
	CHECK(tok_is_eog(t, 32004) && !tok_is_eog(t, 32003), "<turn|> ends generation, <|turn> does not");
	tok_free(t);
	unlink(path);
}

static struct tokenizer *load_json_text(const char *name, const char *json, char *err);

// WordPiece (BERT-style GGUF): llama.cpp's vectors of bge-small
static void
test_wpm_vocab(void)
{
	char err[AD_ERRLEN];
	const char *path = unxz_gguf("bert-bge");
	REQUIRE(path, "xz -dc bert-bge");
	struct tokenizer *t = tok_load(path, err);
	REQUIRE(t, "%s", err);
	CHECK(!strcmp(tok_kind_name(t), "wpm"));
	run_vectors(t, "bert-bge", "gguf, WordPiece", -1);
	// with specials: [CLS] ... [SEP]; a word it cannot cover is [UNK]
	int32_t *ids;
	size_t n;
	REQUIRE(tok_encode(t, "Hello", 5, 1, 0, &ids, &n, err) == 0, "%s", err);
	CHECK(n == 3 && ids[0] == 101 && ids[2] == 102, "%zu ids", n);
	free(ids);
	REQUIRE(tok_encode(t, "\xf0\x9f\xa6\x99", 4, 0, 0, &ids, &n, err) == 0, "%s", err);
	CHECK(n == 1 && ids[0] == 100, "%zu ids, first %d", n, n ? ids[0] : -1);
	free(ids);
	// decoding: word starts become spaces, the first one dropped
	int32_t hw[2];
	REQUIRE(tok_encode(t, "hello world", 11, 0, 0, &ids, &n, err) == 0 && n == 2, "%s", err);
	memcpy(hw, ids, sizeof hw);
	free(ids);
	char *back;
	size_t nb;
	REQUIRE(tok_decode(t, hw, 2, &back, &nb, err) == 0, "%s", err);
	CHECK(nb == 11 && !memcmp(back, "hello world", 11), "\"%.*s\"", (int)nb, back);
	free(back);
	tok_free(t);
	unlink(path);

	// the same vocabulary as a Hugging Face tokenizer.json (WordPiece, ##
	// continuations, BertNormalizer, BertPreTokenizer, [CLS] $A [SEP]):
	// tests/data/tokenizer/bert-json.py made it from the GGUF
	path = unxz("bert-bge-tokenizer.json.xz", "bert-json");
	REQUIRE(path, "xz -dc bert-bge-tokenizer.json.xz");
	t = tok_load(path, err);
	REQUIRE(t, "%s", err);
	CHECK(!strcmp(tok_kind_name(t), "wpm"));
	run_vectors(t, "bert-bge", "tokenizer.json, WordPiece", -1);
	REQUIRE(tok_encode(t, "Hello", 5, 1, 0, &ids, &n, err) == 0, "%s", err);
	CHECK(n == 3 && ids[0] == 101 && ids[2] == 102, "%zu ids", n);
	free(ids);
	// Hugging Face's max_input_chars_per_word (100): a longer word is [UNK]
	char longw[102];
	memset(longw, 'a', 101);
	longw[101] = 0;
	REQUIRE(tok_encode(t, longw, 101, 0, 0, &ids, &n, err) == 0, "%s", err);
	CHECK(n == 1 && ids[0] == 100, "%zu ids", n);
	free(ids);
	REQUIRE(tok_encode(t, longw, 100, 0, 0, &ids, &n, err) == 0, "%s", err);
	CHECK(n > 1 && ids[0] != 100, "%zu ids", n);
	free(ids);
	tok_free(t);

	// what a WordPiece tokenizer.json may not have
	t = load_json_text(
		"wpm-bad1",
		"{\"pre_tokenizer\":{\"type\":\"Whitespace\"},\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
		err);
	CHECK(!t && strstr(err, "Whitespace") && strstr(err, "BertPreTokenizer"), "%s", err);
	tok_free(t);
	t = load_json_text("wpm-bad2",
	                   "{\"normalizer\":{\"type\":\"NFKC\"},\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},"
	                   "\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
	                   err);
	CHECK(!t && strstr(err, "NFKC"), "%s", err);
	tok_free(t);
	t = load_json_text(
		"wpm-bad3",
		"{\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"post_processor\":{\"type\":\"BertProcessing\","
		"\"cls\":[\"[CLS]\",1],\"sep\":[\"[SEP]\",2]},\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
		err);
	CHECK(!t && strstr(err, "[CLS]"), "%s", err);
	tok_free(t);
}

static void
test_gpt2_gguf(void)
{
	char err[AD_ERRLEN];
	struct tokenizer *t = tok_load(TOK_DIR "/ggml-vocab-gpt-2.gguf", err);
	REQUIRE(t, "%s", err);
	CHECK(!strcmp(tok_kind_name(t), "bpe"));
	run_vectors(t, "gpt-2", "gguf", 0);
	random_round_trips(t, "gpt-2", 0);

	// arbitrary bytes, invalid UTF-8 included, come back unchanged
	static const char *raw[] = {"\xff\xfe",
	                            "a\x80"
	                            "b",
	                            "\xc0\x80 overlong", "\xed\xa0\x80", "x\xe2\x82"};
	for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) {
		int32_t *ids;
		size_t n, nb;
		char *back;
		REQUIRE(tok_encode(t, raw[i], strlen(raw[i]), 0, 0, &ids, &n, err) == 0, "%s", err);
		CHECK(n > 0);
		REQUIRE(tok_decode(t, ids, n, &back, &nb, err) == 0, "%s", err);
		CHECK(nb == strlen(raw[i]) && !memcmp(back, raw[i], nb), "raw case %zu", i);
		free(back);
		free(ids);
	}
	tok_free(t);
}

static void
test_qwen3_json(void)
{
	char err[AD_ERRLEN];
	const char *path = unxz("qwen3-tokenizer.json.xz", "qwen3");
	REQUIRE(path, "xz");
	struct tokenizer *t = tok_load(path, err);
	REQUIRE(t, "%s", err);
	run_vectors(t, "qwen2", "tokenizer.json", 1);
	random_round_trips(t, "qwen2", 1);
	// NFC applies: e + combining acute encodes as é
	int32_t *a, *b;
	size_t na, nb;
	REQUIRE(tok_encode(t, "caf\x65\xcc\x81", 6, 0, 0, &a, &na, err) == 0, "%s", err);
	REQUIRE(tok_encode(t, "caf\xc3\xa9", 5, 0, 0, &b, &nb, err) == 0, "%s", err);
	CHECK(same_ids(a, na, b, nb));
	free(a);
	free(b);
	tok_free(t);
}

static void
test_llama3_json(void)
{
	char err[AD_ERRLEN];
	const char *path = unxz("llama3-tokenizer.json.xz", "llama3");
	REQUIRE(path, "xz");
	struct tokenizer *t = tok_load(path, err);
	REQUIRE(t, "%s", err);
	run_vectors(t, "llama-bpe", "tokenizer.json", 0);
	random_round_trips(t, "llama-bpe", 0);
	// a long run of one letter is one pre-token: must not be quadratic
	size_t n = 1 << 20;
	char *s = malloc(n);
	memset(s, 'a', n);
	int32_t *ids;
	size_t n_ids;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	REQUIRE(tok_encode(t, s, n, 0, 0, &ids, &n_ids, err) == 0, "%s", err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double sec = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
	printf("llama-bpe: 1 MiB single pre-token -> %zu ids in %.3f s\n", n_ids, sec);
	char *back;
	size_t nb;
	REQUIRE(tok_decode(t, ids, n_ids, &back, &nb, err) == 0, "%s", err);
	CHECK(nb == n && !memcmp(back, s, n));
	free(back);
	free(ids);
	free(s);
	tok_free(t);
}

// gguf_from_json writes what convert_hf_to_gguf.py would for a byte-level
// tokenizer.json (tokens, token types, "a b" merges, the pre name), so the
// GGUF path runs the same vectors; returns the tokenizer or NULL
static struct tokenizer *
gguf_from_json(const char *json_path, const char *pre, char *err)
{
	size_t len;
	char *text = t_read_file(json_path, &len);
	cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
	free(text);
	if (!root)
		return NULL;
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model"), *it;
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	int n = 0;
	cJSON_ArrayForEach(it, vocab) n = it->valueint + 1 > n ? it->valueint + 1 : n;
	cJSON_ArrayForEach(it, added)
	{
		int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
		n = id + 1 > n ? id + 1 : n;
	}
	const char **tok = calloc((size_t)n, sizeof *tok);
	int32_t *type = malloc((size_t)n * sizeof *type);
	char(*pad)[16] = malloc((size_t)n * sizeof *pad);
	for (int i = 0; i < n; i++) {
		snprintf(pad[i], sizeof pad[i], "[PAD%d]", i);
		tok[i] = pad[i];
		type[i] = 5; // unused
	}
	cJSON_ArrayForEach(it, vocab)
	{
		tok[it->valueint] = it->string;
		type[it->valueint] = 1;
	}
	cJSON_ArrayForEach(it, added)
	{
		int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
		tok[id] = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
		type[id] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) ? 3 : 4;
	}
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	int nm = cJSON_GetArraySize(merges), k = 0;
	char **mg = malloc((size_t)nm * sizeof *mg);
	cJSON_ArrayForEach(it, merges)
	{
		if (cJSON_IsString(it)) {
			mg[k++] = strdup(it->valuestring);
		} else {
			const char *a = cJSON_GetArrayItem(it, 0)->valuestring,
				   *b = cJSON_GetArrayItem(it, 1)->valuestring;
			mg[k] = malloc(strlen(a) + strlen(b) + 2);
			sprintf(mg[k++], "%s %s", a, b);
		}
	}
	struct gguf_writer *w = gguf_writer_new();
	gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
	gguf_writer_str(w, "tokenizer.ggml.pre", pre);
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", tok, (uint64_t)n);
	gguf_writer_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, type, (uint64_t)n);
	gguf_writer_arr_str(w, "tokenizer.ggml.merges", (const char *const *)mg, (uint64_t)k);
	size_t nbytes;
	void *buf = gguf_writer_bytes(w, &nbytes);
	gguf_writer_free(w);
	for (int i = 0; i < k; i++)
		free(mg[i]);
	free(mg);
	free(tok);
	free(type);
	free(pad);
	cJSON_Delete(root);
	struct gguf *g = buf ? gguf_open_memory(buf, nbytes, err) : NULL;
	struct tokenizer *t = g ? tok_load_gguf(g, err) : NULL;
	gguf_close(g);
	free(buf);
	return t;
}

static void
test_gguf_from_json(void)
{
	char err[AD_ERRLEN];
	const char *path = unxz("qwen3-tokenizer.json.xz", "qwen3-gguf");
	REQUIRE(path, "xz");
	struct tokenizer *t = gguf_from_json(path, "qwen2", err);
	REQUIRE(t, "%s", err);
	run_vectors(t, "qwen2", "gguf", 0); // llama.cpp does no NFC on GGUF; the vectors need none
	tok_free(t);
	path = unxz("llama3-tokenizer.json.xz", "llama3-gguf");
	REQUIRE(path, "xz");
	t = gguf_from_json(path, "llama-bpe", err);
	REQUIRE(t, "%s", err);
	run_vectors(t, "llama-bpe", "gguf", 0); // ignore_merges comes from the pre name
	tok_free(t);
}

// --- small hand-made vocabularies ----------------------------------------------
static struct tokenizer *
load_json_text(const char *name, const char *json, char *err)
{
	char path[1024], dir[768];
	snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
	mkdir(dir, 0700);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return NULL;
	fputs(json, f);
	fclose(f);
	return tok_load(path, err);
}

#define TINY_HEAD                                                                                                      \
	"{\"version\":\"1.0\",\"added_tokens\":[{\"id\":9,\"content\":\"<s>\",\"special\":true}],"                     \
	"\"normalizer\":null,"                                                                                         \
	"\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"

static int
encodes_to(struct tokenizer *t, const char *text, const int32_t *want, size_t n_want)
{
	int32_t *ids;
	size_t n;
	char err[AD_ERRLEN];
	if (tok_encode(t, text, strlen(text), 0, 0, &ids, &n, err)) {
		fprintf(stderr, "encode: %s\n", err);
		return 0;
	}
	int ok = same_ids(ids, n, want, n_want);
	if (!ok) {
		print_ids("got ", ids, n);
		print_ids("want", want, n_want);
	}
	free(ids);
	return ok;
}

static void
test_tiny(void)
{
	char err[AD_ERRLEN];
	// "b c" ranks before "a b": abc -> a + bc
	struct tokenizer *t = load_json_text(
		"tiny1",
		TINY_HEAD "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,\"bc\":4,\"abc\":5,"
			  "\"\\u0120\":6,\"\\u0120a\":7},\"merges\":[\"b c\",\"a b\",\"ab c\",\"\\u0120 a\"]}}",
		err);
	REQUIRE(t, "%s", err);
	CHECK(encodes_to(t, "abc", (int32_t[]){0, 4}, 2));
	CHECK(encodes_to(t, "ab", (int32_t[]){3}, 1));
	CHECK(encodes_to(t, "abab a", (int32_t[]){3, 3, 7}, 3));
	CHECK(encodes_to(t, "", NULL, 0));
	CHECK(tok_n_vocab(t) == 10); // ids 7..8 are holes, 9 is <s>
	tok_free(t);

	// same vocabulary, ignore_merges: a pre-token in the vocabulary wins
	t = load_json_text(
		"tiny2",
		TINY_HEAD
		"\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"ab\":3,"
		"\"bc\":4,\"abc\":5},\"merges\":[\"b c\",\"a b\",\"ab c\"]}}",
		err);
	REQUIRE(t, "%s", err);
	CHECK(encodes_to(t, "abc", (int32_t[]){5}, 1));
	CHECK(encodes_to(t, "abcc", (int32_t[]){0, 4, 2}, 3));
	tok_free(t);

	// merges as pairs; equal ranks cannot happen, so leftmost-first shows
	// with a repeated pair: aaa -> aa + a
	t = load_json_text(
		"tiny3",
		TINY_HEAD "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"aa\":1,\"b\":2,\"ab\":3,\"abc\":4,\"c\":5},"
			  "\"merges\":[[\"a\",\"a\"],[\"a\",\"b\"],[\"ab\",\"c\"]]}}",
		err);
	REQUIRE(t, "%s", err);
	CHECK(encodes_to(t, "aaa", (int32_t[]){1, 0}, 2));
	CHECK(encodes_to(t, "aaaa", (int32_t[]){1, 1}, 2));
	CHECK(encodes_to(t, "abc", (int32_t[]){4}, 1));
	CHECK(encodes_to(t, "aab", (int32_t[]){1, 2}, 2));
	tok_free(t);

	// SmolLM-style Sequence[Digits, ByteLevel]: digits stand alone
	t = load_json_text(
		"tiny4",
		"{\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
		"{\"type\":\"Digits\",\"individual_digits\":true},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
		"\"use_regex\":true}]},\"model\":{\"type\":\"BPE\",\"vocab\":{\"1\":0,\"2\":1,\"12\":2},"
		"\"merges\":[\"1 2\"]}}",
		err);
	REQUIRE(t, "%s", err);
	CHECK(encodes_to(t, "12", (int32_t[]){0, 1}, 2));
	tok_free(t);

	// GPT-2 style add_prefix_space: a fragment not starting with a space gets one
	t = load_json_text(
		"tiny5",
		"{\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\","
		"\"add_prefix_space\":true,\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u0120\":0,"
		"\"a\":1,\"\\u0120a\":2},\"merges\":[\"\\u0120 a\"]}}",
		err);
	REQUIRE(t, "%s", err);
	CHECK(encodes_to(t, "a", (int32_t[]){2}, 1));
	CHECK(encodes_to(t, " a", (int32_t[]){2}, 1));
	CHECK(encodes_to(t, "a a", (int32_t[]){2, 2}, 2));
	tok_free(t);
}

static void
test_refusals(void)
{
	char err[AD_ERRLEN] = "";
	// a Split regex PCRE2 cannot compile is refused, quoting it and why
	struct tokenizer *t = load_json_text(
		"bad1",
		"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\\\\w+|[^\\\\w\\\\s]+\"},"
		"\"behavior\":\"Isolated\",\"invert\":false},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		err);
	CHECK(!t && strstr(err, "(\\w+|[^\\w\\s]+") && strstr(err, "missing closing parenthesis"), "%s", err);
	tok_free(t);
	// one it can is run by PCRE2: words and the rest, spaces left alone
	t = load_json_text(
		"regex1",
		"{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+|[^\\\\w\\\\s]+\"},"
		"\"behavior\":\"Isolated\",\"invert\":false},\"model\":{\"type\":\"BPE\",\"vocab\":{\"h\":0,\"i\":1,"
		"\"hi\":2,\"!\":3,\"\\u0120\":4,\"i!\":5},\"merges\":[\"h i\",\"i !\"]}}",
		err);
	CHECK(t, "%s", err);
	if (t)
		CHECK(encodes_to(t, "hi! hi", (int32_t[]){2, 3, 4, 2}, 4)); // never "i!": \\w+ stops at "!"
	tok_free(t);
	t = load_json_text(
		"bad2",
		"{\"normalizer\":{\"type\":\"NFKC\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		err);
	CHECK(!t && strstr(err, "NFKC"), "%s", err);
	tok_free(t);
	t = load_json_text("bad3", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}", err);
	CHECK(!t && strstr(err, "WordPiece"), "%s", err);
	tok_free(t);
	// a BPE model with a Metaspace pre-tokenizer is SentencePiece-style
	// (Llama 2's tokenizer.json): taken by the SPM loader, not refused
	t = load_json_text(
		"spm4",
		"{\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		err);
	CHECK(t && !strcmp(tok_kind_name(t), "spm"), "%s", t ? tok_kind_name(t) : err);
	tok_free(t);
	t = load_json_text(
		"bad8",
		"{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\"},"
		"{\"type\":\"ByteLevel\",\"add_prefix_space\":true}]},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},"
		"\"merges\":[]}}",
		err);
	CHECK(!t && strstr(err, "add_prefix_space"), "%s", err);
	tok_free(t);
	t = load_json_text("bad5", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"ab\"]}}", err);
	CHECK(!t && strstr(err, "merge"), "%s", err);
	tok_free(t);
	t = load_json_text("bad6", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":-3},\"merges\":[]}}", err);
	CHECK(!t, "negative id accepted");
	tok_free(t);
	t = load_json_text("bad7", "{\"model\":", err);
	CHECK(!t, "truncated JSON accepted");
	tok_free(t);

	// a GGUF whose tokenizer.ggml.pre is unknown is refused by name
	struct gguf_writer *w = gguf_writer_new();
	const char *toks[] = {"a", "b", "ab"}, *merges[] = {"a b"};
	gguf_writer_str(w, "general.architecture", "gpt2");
	gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
	gguf_writer_str(w, "tokenizer.ggml.pre", "no-such-pre");
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
	gguf_writer_arr_str(w, "tokenizer.ggml.merges", merges, 1);
	size_t n;
	void *buf = gguf_writer_bytes(w, &n);
	gguf_writer_free(w);
	REQUIRE(buf);
	struct gguf *g = gguf_open_memory(buf, n, err);
	REQUIRE(g, "%s", err);
	t = tok_load_gguf(g, err);
	CHECK(!t && strstr(err, "no-such-pre") && strstr(err, "llama-bpe"), "%s", err);
	tok_free(t);
	gguf_close(g);
	free(buf);

	// the same with a known pre and a broken merge
	w = gguf_writer_new();
	const char *bad_merges[] = {"ab"};
	gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
	gguf_writer_str(w, "tokenizer.ggml.pre", "qwen2");
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
	gguf_writer_arr_str(w, "tokenizer.ggml.merges", bad_merges, 1);
	buf = gguf_writer_bytes(w, &n);
	gguf_writer_free(w);
	g = gguf_open_memory(buf, n, err);
	REQUIRE(g, "%s", err);
	t = tok_load_gguf(g, err);
	CHECK(!t && strstr(err, "merge"), "%s", err);
	tok_free(t);
	gguf_close(g);
	free(buf);
}

// a tiny byte-level BPE GGUF named pre, with add_bos_token when ab >= 0
static struct tokenizer *
tiny_named(const char *pre, int ab, char *err)
{
	struct gguf_writer *w = gguf_writer_new();
	const char *toks[] = {"a", "b", "ab", "\xc4\xa0", ".", "'", "s"}, *merges[] = {"a b"};
	gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
	gguf_writer_str(w, "tokenizer.ggml.pre", pre);
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 7);
	gguf_writer_arr_str(w, "tokenizer.ggml.merges", merges, 1);
	gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 0);
	if (ab >= 0)
		gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", ab);
	size_t n;
	void *buf = gguf_writer_bytes(w, &n);
	gguf_writer_free(w);
	struct gguf *g = buf ? gguf_open_memory(buf, n, err) : NULL;
	struct tokenizer *t = g ? tok_load_gguf(g, err) : NULL;
	gguf_close(g);
	free(buf);
	return t;
}

// llama.cpp's per-name flags: add_bos where the name sets it (llama-bpe,
// tekken) unless the file says otherwise; clean_spaces on for byte-level
// BPE but the names that turn it off (qwen2, deepseek-llm), off for
// SentencePiece; tok_detokenize cleans, tok_decode stays exact
static void
test_name_flags(void)
{
	char err[AD_ERRLEN] = "";
	static const struct {
		const char *pre;
		int ab, add_bos, clean;
	} v[] = {
		{"gpt-2", -1, 0, 1}, {"llama-bpe", -1, 1, 1}, {"llama-bpe", 0, 0, 1},     {"tekken", -1, 1, 0},
		{"qwen2", -1, 0, 0}, {"qwen2", 1, 1, 0},      {"deepseek-llm", -1, 0, 0}, {"falcon", -1, 0, 1},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		struct tokenizer *t = tiny_named(v[i].pre, v[i].ab, err);
		CHECK(t, "%s: %s", v[i].pre, err);
		if (!t)
			continue;
		CHECK(tok_add_bos(t) == v[i].add_bos && tok_clean_spaces(t) == v[i].clean,
		      "%s (add_bos_token %d): %d %d", v[i].pre, v[i].ab, tok_add_bos(t), tok_clean_spaces(t));
		tok_free(t);
	}
	// "a . b ' s . ab 's" decoded, then cleaned as llama.cpp's three passes do
	struct tokenizer *t = tiny_named("gpt-2", -1, err);
	REQUIRE(t, "%s", err);
	const int32_t ids[] = {0, 3, 4, 3, 1, 3, 5, 3, 6, 4, 3, 2, 3, 5, 6, 3, 5, 6, 2};
	char *s;
	size_t n;
	REQUIRE(tok_decode(t, ids, 19, &s, &n, err) == 0, "%s", err);
	CHECK(!strcmp(s, "a . b ' s. ab 's 'sab"), "[%s]", s);
	free(s);
	REQUIRE(tok_detokenize(t, ids, 19, &s, &n, err) == 0, "%s", err);
	// " ." goes; " ' " becomes "'"; " 's" loses its space
	CHECK(!strcmp(s, "a. b's. ab's'sab") && n == strlen(s), "[%s]", s);
	free(s);
	tok_free(t);
	t = tiny_named("qwen2", -1, err);
	REQUIRE(t, "%s", err);
	REQUIRE(tok_detokenize(t, ids, 19, &s, &n, err) == 0, "%s", err);
	CHECK(!strcmp(s, "a . b ' s. ab 's 'sab"), "[%s]", s); // qwen2: no cleaning
	free(s);
	tok_free(t);
}

int
main(void)
{
	T_RUN(test_gpt2_gguf);
	T_RUN(test_regex_vocabs);
	T_RUN(test_phi3_vocab);
	T_RUN(test_gemma4_vocab);
	T_RUN(test_wpm_vocab);
	T_RUN(test_qwen3_json);
	T_RUN(test_llama3_json);
	T_RUN(test_gguf_from_json);
	T_RUN(test_tiny);
	T_RUN(test_refusals);
	T_RUN(test_name_flags);
	return t_done();
}
