// test-tokenizer.c - SentencePiece and byte-level BPE against llama.cpp's
// test vectors, round trips, streaming, chat templates and error paths.
#define _GNU_SOURCE // memmem
#include <stdint.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "gguf.h"
#include "t.h"
#include "tokenizer-impl.h"
#include "tokenizer.h"
#include "unicode.h"

#ifndef T_TOKDATA
#define T_TOKDATA "tokdata"
#endif

static const char *VOCAB = T_DATA "/tokenizer";

// --- helpers -----------------------------------------------------------------

static struct tokenizer *
load(const char *path)
{
	char err[AD_ERRLEN] = "";
	struct tokenizer *t = tok_load(path, err);
	if (!t)
		fprintf(stderr, "  load %s: %s\n", path, err);
	return t;
}

// is_bpe_missing: the BPE loader is a stub in this build (bpe.c absent)
static int
bpe_missing(const char *path)
{
	char err[AD_ERRLEN] = "";
	struct tokenizer *t = tok_load(path, err);
	if (t) {
		tok_free(t);
		return 0;
	}
	return strstr(err, "not built") != NULL;
}

static int
encode(const struct tokenizer *t, const char *s, size_t n, int add_bos, int special, int32_t **ids, size_t *n_ids)
{
	char err[AD_ERRLEN] = "";
	int rc = tok_encode(t, s, n, add_bos, special, ids, n_ids, err);
	if (rc)
		fprintf(stderr, "  encode: %s\n", err);
	return rc;
}

static int
same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
	return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static void
print_ids(const char *label, const int32_t *v, size_t n)
{
	fprintf(stderr, "  %s:", label);
	for (size_t i = 0; i < n && i < 64; i++)
		fprintf(stderr, " %d", v[i]);
	fprintf(stderr, "\n");
}

// round_trip: decode(encode(s)) == s, and the stream gives the same bytes;
// with nfc, the model normalises and s must come back in NFC
static int
round_trip_nfc(const struct tokenizer *t, const char *in, size_t in_n, int nfc)
{
	const char *s = in;
	size_t n = in_n;
	char *norm = NULL;
	if (nfc) {
		norm = unicode_nfc(in, in_n, &n);
		if (!norm)
			return 0;
		s = norm;
	}
	int32_t *ids;
	size_t n_ids;
	char err[AD_ERRLEN];
	if (encode(t, in, in_n, 0, 0, &ids, &n_ids)) {
		free(norm);
		return 0;
	}
	char *out;
	size_t out_len;
	int ok = tok_decode(t, ids, n_ids, &out, &out_len, err) == 0 && out_len == n && memcmp(out, s, n) == 0;
	if (ok) {
		// streaming: the same bytes, and every chunk but the last ends on a
		// character boundary when the input is valid UTF-8
		struct tok_stream st;
		tok_stream_init(&st, t);
		char *acc = malloc(n + 8);
		size_t m = 0;
		for (size_t i = 0; i < n_ids && ok; i++) {
			size_t k;
			const char *p = tok_stream_push(&st, ids[i], &k, err);
			ok = p != NULL && m + k <= n + 1;
			if (ok) {
				memcpy(acc + m, p, k);
				m += k;
			}
		}
		size_t k;
		const char *p = tok_stream_flush(&st, &k);
		if (ok && m + k <= n + 1) {
			memcpy(acc + m, p, k);
			m += k;
		}
		// the stream keeps the SPM leading space that decode strips
		const char *want = s;
		size_t skip = (m == n + 1 && acc[0] == ' ') ? 1 : 0;
		ok = ok && m - skip == n && memcmp(acc + skip, want, n) == 0;
		tok_stream_free(&st);
		free(acc);
	}
	free(out);
	free(ids);
	free(norm);
	return ok;
}

static int
round_trip(const struct tokenizer *t, const char *s, size_t n)
{
	return round_trip_nfc(t, s, n, 0);
}

// split a .inp file on "\n__ggml_vocab_test__\n"
static size_t
split_inp(char *buf, size_t len, char **s, size_t *n, size_t max)
{
	const char *sep = "\n__ggml_vocab_test__\n";
	size_t k = 0, seplen = strlen(sep), off = 0;
	while (off < len && k < max) {
		char *m = memmem(buf + off, len - off, sep, seplen);
		size_t e = m ? (size_t)(m - buf) : len;
		s[k] = buf + off;
		n[k] = e - off;
		k++;
		off = m ? e + seplen : len;
	}
	return k;
}

// parse one .out line into ids
static size_t
parse_ids(char *line, int32_t *ids, size_t max)
{
	size_t k = 0;
	char *p = line, *end;
	while (k < max) {
		long v = strtol(p, &end, 10);
		if (end == p)
			break;
		ids[k++] = (int32_t)v;
		p = end;
	}
	return k;
}

// run_vectors: every case of NAME.inp/.out; returns the number of passes
static int
run_vectors(const struct tokenizer *t, const char *name, int *n_cases)
{
	char path[512];
	size_t in_len, out_len;
	snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.inp", VOCAB, name);
	char *in = t_read_file(path, &in_len);
	snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf.out", VOCAB, name);
	char *out = t_read_file(path, &out_len);
	*n_cases = 0;
	if (!in || !out) {
		CHECK(0, "missing vectors for %s", name);
		free(in);
		free(out);
		return 0;
	}
	char *s[256];
	size_t n[256];
	size_t cases = split_inp(in, in_len, s, n, 256);
	char *lines[256];
	size_t n_lines = 0;
	for (char *p = out; *p && n_lines < 256;) {
		char *nl = strchr(p, '\n');
		lines[n_lines++] = p;
		if (!nl)
			break;
		*nl = 0;
		p = nl + 1;
	}
	CHECK(cases == n_lines, "%s: %zu inputs, %zu outputs", name, cases, n_lines);
	int pass = 0, rt = 0;
	static int32_t want[4096];
	for (size_t i = 0; i < cases && i < n_lines; i++) {
		size_t n_want = parse_ids(lines[i], want, 4096);
		int32_t *ids;
		size_t n_ids;
		int ok = encode(t, s[i], n[i], 0, 0, &ids, &n_ids) == 0;
		if (ok && same_ids(ids, n_ids, want, n_want)) {
			pass++;
		} else {
			fprintf(stderr, "  %s case %zu \"%.*s\":\n", name, i, (int)(n[i] > 60 ? 60 : n[i]), s[i]);
			if (ok)
				print_ids("got ", ids, n_ids);
			print_ids("want", want, n_want);
		}
		if (ok)
			free(ids);
		if (round_trip(t, s[i], n[i]))
			rt++;
		else
			fprintf(stderr, "  %s case %zu: decode(encode(x)) != x\n", name, i);
	}
	*n_cases = (int)cases;
	printf("%-10s %d/%zu vectors match, %d/%zu round trips\n", name, pass, cases, rt, cases);
	CHECK(pass == (int)cases, "%s: %d of %zu vectors match", name, pass, cases);
	CHECK(rt == (int)cases, "%s: %d of %zu round trips", name, rt, cases);
	free(in);
	free(out);
	return pass;
}

// --- SentencePiece -----------------------------------------------------------

static void
check_once_upon(struct tokenizer *t)
{
	int32_t *ids;
	size_t n;
	static const int32_t want[] = {1, 403, 407, 261, 378};
	REQUIRE(encode(t, "Once upon a time", 16, -1, 0, &ids, &n) == 0);
	CHECK(same_ids(ids, n, want, 5), "Once upon a time");
	if (!same_ids(ids, n, want, 5))
		print_ids("got", ids, n);
	char *s, err[AD_ERRLEN];
	size_t len;
	REQUIRE(tok_decode(t, ids, n, &s, &len, err) == 0, "%s", err);
	CHECK(strcmp(s, "Once upon a time") == 0, "decoded \"%s\"", s);
	free(s);
	free(ids);
	// no BOS when asked, BOS when forced
	REQUIRE(encode(t, "Once upon a time", 16, 0, 0, &ids, &n) == 0);
	CHECK(n == 4 && ids[0] == 403);
	free(ids);
	REQUIRE(encode(t, "", 0, 1, 0, &ids, &n) == 0);
	CHECK(n == 1 && ids[0] == 1);
	free(ids);
	REQUIRE(encode(t, "", 0, 0, 0, &ids, &n) == 0);
	CHECK(n == 0 && ids != NULL);
	free(ids);
	CHECK(tok_n_vocab(t) == 512);
	CHECK(tok_bos(t) == 1 && tok_eos(t) == 2);
	CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 403));
	CHECK(strcmp(tok_kind_name(t), "spm") == 0);
	size_t pl;
	const char *p = tok_piece(t, 403, &pl);
	CHECK(p && pl == 7 && memcmp(p, "\xe2\x96\x81Once", 7) == 0);
	CHECK(tok_piece(t, 512, &pl) == NULL && tok_piece(t, -1, &pl) == NULL);
	CHECK(tok_find(t, "\xe2\x96\x81time", 7) == 378);
}

static void
test_stories_gguf(void)
{
	struct tokenizer *t = load(T_DATA "/stories260K/stories260K.gguf");
	REQUIRE(t);
	check_once_upon(t);
	CHECK(t->score != NULL, "SentencePiece keeps its scores");
	tok_free(t);
}

static void
test_stories_bin(void)
{
	struct tokenizer *t = load(T_DATA "/stories260K/tok512.bin");
	REQUIRE(t);
	check_once_upon(t);
	// the .bin and the GGUF must agree on everything
	struct tokenizer *g = load(T_DATA "/stories260K/stories260K.gguf");
	REQUIRE(g);
	int same = tok_n_vocab(t) == tok_n_vocab(g);
	for (int32_t i = 0; same && i < tok_n_vocab(t); i++) {
		size_t a, b;
		const char *pa = tok_piece(t, i, &a), *pb = tok_piece(g, i, &b);
		same = a == b && memcmp(pa, pb, a) == 0;
		if (!same)
			fprintf(stderr, "  piece %d differs: \"%.*s\" vs \"%.*s\"\n", i, (int)a, pa, (int)b, pb);
	}
	CHECK(same, "tok512.bin and stories260K.gguf vocabularies differ");
	const char *text = "One day, Lily met a big dog. \"Hello!\" she said.\n\nThe end \xe4\xbd\xa0\xe5\xa5\xbd.";
	int32_t *x, *y;
	size_t nx, ny;
	REQUIRE(encode(t, text, strlen(text), -1, 0, &x, &nx) == 0);
	REQUIRE(encode(g, text, strlen(text), -1, 0, &y, &ny) == 0);
	CHECK(same_ids(x, nx, y, ny));
	free(x);
	free(y);
	tok_free(g);
	tok_free(t);
}

static void
test_spm_special(void)
{
	struct tokenizer *t = load(T_DATA "/stories260K/stories260K.gguf");
	REQUIRE(t);
	int32_t *ids;
	size_t n;
	// parse_special: "<s>" is BOS, and the text after it gets the space prefix
	REQUIRE(encode(t, "<s>Once", 7, 0, 1, &ids, &n) == 0);
	CHECK(n == 2 && ids[0] == 1 && ids[1] == 403, "n=%zu", n);
	free(ids);
	// without it, "<s>" is plain text
	REQUIRE(encode(t, "<s>Once", 7, 0, 0, &ids, &n) == 0);
	int has_bos = 0;
	for (size_t i = 0; i < n; i++)
		has_bos |= ids[i] == 1;
	CHECK(!has_bos && n > 2);
	char *s, err[AD_ERRLEN];
	size_t len;
	REQUIRE(tok_decode(t, ids, n, &s, &len, err) == 0);
	CHECK(strcmp(s, "<s>Once") == 0, "\"%s\"", s);
	free(s);
	free(ids);
	// control tokens are skipped by decode; an id out of range is an error
	int32_t bad[] = {1, 403, 2};
	REQUIRE(tok_decode(t, bad, 3, &s, &len, err) == 0);
	CHECK(strcmp(s, "Once") == 0, "\"%s\"", s);
	free(s);
	int32_t oob[] = {403, 512};
	CHECK(tok_decode(t, oob, 2, &s, &len, err) == -1 && strstr(err, "512"));
	struct tok_stream st;
	tok_stream_init(&st, t);
	CHECK(tok_stream_push(&st, -5, &len, err) == NULL);
	tok_stream_free(&st);
	tok_free(t);
}

// overlapping special tokens: control ones only with parse_special,
// user-defined ones always, longest first
static void
test_spm_partition(void)
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
	enum { NF = 15 };
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
	char err[AD_ERRLEN];
	struct gguf *g = gguf_open_memory(buf, n, err);
	REQUIRE(g, "%s", err);
	struct tokenizer *t = tok_load_gguf(g, err);
	gguf_close(g);
	free(buf);
	REQUIRE(t, "%s", err);
	int32_t *ids;
	const char *text = "<|x|><|y|>ab";
	REQUIRE(encode(t, text, strlen(text), 0, 1, &ids, &n) == 0);
	int32_t a[] = {4, 7, 11}; // the longest special, then "▁ab" merged by score: ▁ + ab
	CHECK(same_ids(ids, n, a, 3));
	if (!same_ids(ids, n, a, 3))
		print_ids("parse_special", ids, n);
	free(ids);
	REQUIRE(encode(t, text, strlen(text), 0, 0, &ids, &n) == 0);
	// "<|x" ▁ < |(byte) x, then |> and <|y|> (user-defined), then ▁ ab
	int32_t b[] = {7, 13, NF + '|', 14, 5, 6, 7, 11};
	CHECK(same_ids(ids, n, b, 8));
	if (!same_ids(ids, n, b, 8))
		print_ids("plain", ids, n);
	char *s;
	REQUIRE(tok_decode(t, ids, n, &s, &n, err) == 0);
	CHECK(strcmp(s, "<|x|><|y|> ab") == 0, "[%s]", s); // the space after a special is the encoder's
	free(s);
	free(ids);
	tok_free(t);
}

static void
test_llama_spm_vectors(void)
{
	struct tokenizer *t = load(T_DATA "/tokenizer/ggml-vocab-llama-spm.gguf");
	REQUIRE(t);
	int n;
	run_vectors(t, "llama-spm", &n);
	CHECK(n == 46, "%d cases", n);
	tok_free(t);
}

static uint32_t rnd(void);
static size_t put_utf8(char *p, uint32_t cp);
static uint32_t random_cp(void);

// A SentencePiece-style tokenizer.json (as Llama 2 and Mistral ship) made
// from the llama-spm GGUF: vocab, byte fallback, merges ordered by the
// merged piece's score. Loaded from JSON it must tokenize like the GGUF.
static void
test_spm_json(void)
{
	struct tokenizer *g = load(T_DATA "/tokenizer/ggml-vocab-llama-spm.gguf");
	REQUIRE(g);
	int32_t nv = tok_n_vocab(g);
	cJSON *root = cJSON_CreateObject(), *model = cJSON_AddObjectToObject(root, "model");
	cJSON_AddStringToObject(model, "type", "BPE");
	cJSON_AddStringToObject(model, "unk_token", "<unk>");
	cJSON_AddBoolToObject(model, "byte_fallback", 1);
	cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
	char piece[256];
	for (int32_t id = 0; id < nv; id++) {
		size_t n;
		const char *p = tok_piece(g, id, &n);
		if (n >= sizeof piece)
			n = sizeof piece - 1; // none is this long
		memcpy(piece, p, n);
		piece[n] = 0;
		cJSON_AddNumberToObject(vocab, piece, id);
	}
	// merges: every split of a normal piece into two pieces, best score first
	struct m {
		float score;
		int32_t id, left, right;
	} *ms = malloc(sizeof *ms * (size_t)nv * 8);
	size_t nm = 0;
	for (int32_t id = 0; id < nv; id++) {
		size_t n;
		const char *p = tok_piece(g, id, &n);
		if (!p || tok_is_control(g, id) || (n == 6 && p[0] == '<' && p[1] == '0'))
			continue;
		for (size_t k = 1; k < n && nm < (size_t)nv * 8; k++) {
			if (((uint8_t)p[k] & 0xc0) == 0x80)
				continue;
			int32_t l = tok_find(g, p, k), r = tok_find(g, p + k, n - k);
			if (l > 2 && r > 2)
				ms[nm++] = (struct m){tok_score(g, id), id, l, r};
		}
	}
	// best score first; equal scores by id (insertion sort keeps it stable)
	for (size_t i = 1; i < nm; i++) {
		struct m x = ms[i];
		size_t j = i;
		while (j > 0 && ms[j - 1].score < x.score)
			ms[j] = ms[j - 1], j--;
		ms[j] = x;
	}
	cJSON *merges = cJSON_AddArrayToObject(model, "merges");
	for (size_t i = 0; i < nm; i++) {
		size_t a, b;
		const char *pa = tok_piece(g, ms[i].left, &a), *pb = tok_piece(g, ms[i].right, &b);
		char line[512];
		snprintf(line, sizeof line, "%.*s %.*s", (int)a, pa, (int)b, pb);
		cJSON_AddItemToArray(merges, cJSON_CreateString(line));
	}
	free(ms);
	cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
	const char *sp[] = {"<unk>", "<s>", "</s>"};
	for (int i = 0; i < 3; i++) {
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "id", i);
		cJSON_AddStringToObject(o, "content", sp[i]);
		cJSON_AddBoolToObject(o, "special", 1);
		cJSON_AddItemToArray(added, o);
	}
	cJSON *norm = cJSON_AddObjectToObject(root, "normalizer");
	cJSON_AddStringToObject(norm, "type", "Sequence");
	cJSON *seq = cJSON_AddArrayToObject(norm, "normalizers");
	cJSON *pre = cJSON_CreateObject();
	cJSON_AddStringToObject(pre, "type", "Prepend");
	cJSON_AddStringToObject(pre, "prepend", "\xe2\x96\x81");
	cJSON_AddItemToArray(seq, pre);
	char *text = cJSON_PrintUnformatted(root);
	cJSON_Delete(root);
	REQUIRE(text);

	char dir[512], path[600];
	snprintf(dir, sizeof dir, "%s/spmjson", t_tmpdir());
	mkdir(dir, 0700);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	FILE *f = fopen(path, "w");
	REQUIRE(f);
	fputs(text, f);
	fclose(f);
	free(text);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	f = fopen(path, "w");
	REQUIRE(f);
	fputs("{\"add_bos_token\": true, \"add_eos_token\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
	      " \"chat_template\": \"{{ bos_token + '[INST] ' + message['content'] + ' [/INST]' }}\"}",
	      f);
	fclose(f);

	struct tokenizer *t = load(dir);
	REQUIRE(t);
	CHECK(strcmp(tok_kind_name(t), "spm") == 0);
	CHECK(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_add_bos(t) == 1);
	CHECK(tok_chat_family(t) == TOK_CHAT_LLAMA2);
	int n;
	printf("(from tokenizer.json) ");
	run_vectors(t, "llama-spm", &n);
	// and random text, against the GGUF
	int same = 0;
	for (int it = 0; it < 300; it++) {
		char buf[512];
		size_t len = 0, chars = 1 + rnd() % 60;
		for (size_t c = 0; c < chars; c++)
			len += put_utf8(buf + len, rnd() % 3 ? 0x20 + rnd() % 0x5f : random_cp());
		int32_t *a, *b;
		size_t na, nb;
		if (encode(t, buf, len, -1, 0, &a, &na) || encode(g, buf, len, -1, 0, &b, &nb))
			continue;
		if (same_ids(a, na, b, nb))
			same++;
		free(a);
		free(b);
	}
	printf("(from tokenizer.json) %d/300 random texts as the GGUF\n", same);
	CHECK(same == 300);
	tok_free(t);
	tok_free(g);
}

// --- byte-level BPE ----------------------------------------------------------

static void
test_gpt2_vectors(void)
{
	const char *path = T_DATA "/tokenizer/ggml-vocab-gpt-2.gguf";
	if (bpe_missing(path)) {
		printf("gpt-2      skipped: byte-level BPE not built\n");
		return;
	}
	struct tokenizer *t = load(path);
	REQUIRE(t);
	CHECK(strcmp(tok_kind_name(t), "bpe") == 0);
	CHECK(t->score == NULL, "byte-level BPE keeps no scores");
	int n;
	run_vectors(t, "gpt-2", &n);
	CHECK(n == 46, "%d cases", n);
	tok_free(t);
}

static void
test_hf_vectors(const char *dir, const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", T_TOKDATA, dir);
	struct stat st;
	if (stat(path, &st)) {
		CHECK(0, "%s is missing (the build unpacks it with xz)", path);
		return;
	}
	if (bpe_missing(path)) {
		printf("%-10s skipped: byte-level BPE not built\n", name);
		return;
	}
	struct tokenizer *t = load(path);
	REQUIRE(t);
	int n;
	run_vectors(t, name, &n);
	CHECK(n == 46, "%d cases", n);
	tok_free(t);
}

// the vocabulary as kept: t->strs holds each piece and, right after it,
// its text where that differs, and nothing else (not the texts of an earlier
// tok_finish: Qwen3's tokenizer.json with its config finishes twice); the
// map is the least power of two at most 3/4 full, finds every piece, and
// misses what is not one (a linear scan says which)
static void
test_vocab_layout(void)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/qwen3", T_TOKDATA);
	if (bpe_missing(dir))
		return;
	struct tokenizer *t = load(dir);
	REQUIRE(t);
	size_t want = 0;
	int32_t after = 0, same = 0;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		const struct tok_entry *e = &t->tok[id];
		want += e->len + (e->tafter ? e->tlen : 0);
		after += e->tafter && e->tlen;
		same += !e->tafter && e->tlen;
	}
	CHECK(t->strs_len == want, "%zu bytes of strings, the pieces and their own texts are %zu", t->strs_len, want);
	CHECK(after > 100000 && same > 1000, "%d texts after their pieces, %d the pieces themselves", after, same);
	// "Ġthe" decodes to " the" from right after its piece; "the" is its own text
	size_t n;
	int32_t id = tok_find(t, "\xc4\xa0the", 5);
	const char *x = tok_token_text(t, id, &n);
	CHECK(id >= 0 && t->tok[id].tafter && n == 4 && memcmp(x, " the", 4) == 0);
	id = tok_find(t, "the", 3);
	x = tok_token_text(t, id, &n);
	CHECK(id >= 0 && !t->tok[id].tafter && x == t->strs + t->tok[id].off && n == 3);
	uint32_t cap = t->map_mask + 1;
	CHECK((uint64_t)cap * 3 >= (uint64_t)t->n_vocab * 4 && (uint64_t)cap * 3 / 2 < (uint64_t)t->n_vocab * 4,
	      "a map of %u for %d pieces", cap, t->n_vocab);
	int lost = 0;
	for (int32_t i = 0; i < t->n_vocab; i++) {
		const struct tok_entry *e = &t->tok[i];
		if (!e->len)
			continue;
		int32_t f = tok_find(t, t->strs + e->off, e->len);
		lost += f < 0 || t->tok[f].len != e->len || memcmp(t->strs + t->tok[f].off, t->strs + e->off, e->len);
	}
	CHECK(lost == 0, "%d pieces not found", lost);
	// pieces and near misses: the piece with a byte changed or dropped
	uint64_t r = 12345;
	int wrong = 0;
	for (int k = 0; k < 400; k++) {
		r = r * 6364136223846793005ull + 1442695040888963407ull;
		const struct tok_entry *e = &t->tok[(r >> 33) % (uint64_t)t->n_vocab];
		char q[64];
		size_t m = e->len < sizeof q ? e->len : sizeof q;
		memcpy(q, t->strs + e->off, m);
		if (k % 2 && m)
			q[(r >> 20) % m] ^= (char)(1 + (r >> 8) % 255);
		else if (m)
			m--;
		int32_t scan = -1;
		for (int32_t i = 0; i < t->n_vocab; i++)
			if (t->tok[i].len == m && m && memcmp(t->strs + t->tok[i].off, q, m) == 0)
				scan = i; // the last, as the map keeps
		wrong += tok_find(t, q, m) != scan;
	}
	CHECK(wrong == 0, "%d of 400 lookups differ from a linear scan", wrong);
	tok_free(t);
}

static void
test_qwen2_vectors(void)
{
	test_hf_vectors("qwen3", "qwen2");
}

static void
test_llama_bpe_vectors(void)
{
	test_hf_vectors("llama3", "llama-bpe");
}

static void
test_hf_specials(void)
{
	char path[512];
	snprintf(path, sizeof path, "%s/qwen3", T_TOKDATA);
	if (bpe_missing(path))
		return;
	struct tokenizer *t = load(path);
	REQUIRE(t);
	int32_t im_start = tok_find(t, "<|im_start|>", 12), im_end = tok_find(t, "<|im_end|>", 10);
	CHECK(im_start >= 0 && im_end >= 0);
	CHECK(tok_bos(t) == -1 && tok_add_bos(t) == 0);
	CHECK(tok_eos(t) == im_end);
	CHECK(tok_is_eog(t, im_end));
	CHECK(tok_chat_family(t) == TOK_CHAT_CHATML);
	int32_t *ids;
	size_t n;
	REQUIRE(encode(t, "<|im_start|>user\nhi<|im_end|>", 29, -1, 1, &ids, &n) == 0);
	CHECK(n >= 4 && ids[0] == im_start && ids[n - 1] == im_end);
	free(ids);
	REQUIRE(encode(t, "<|im_start|>", 12, -1, 0, &ids, &n) == 0);
	CHECK(n > 1, "control token text must not be parsed without parse_special");
	free(ids);
	tok_free(t);

	snprintf(path, sizeof path, "%s/llama3", T_TOKDATA);
	t = load(path);
	REQUIRE(t);
	int32_t bot = tok_find(t, "<|begin_of_text|>", 17), eot = tok_find(t, "<|eot_id|>", 10);
	CHECK(bot >= 0 && tok_bos(t) == bot && tok_add_bos(t) == 1);
	CHECK(tok_eot(t) == eot && tok_is_eog(t, eot));
	CHECK(tok_chat_family(t) == TOK_CHAT_LLAMA3);
	REQUIRE(encode(t, "Hello", 5, -1, 0, &ids, &n) == 0);
	CHECK(n == 2 && ids[0] == bot);
	free(ids);
	tok_free(t);
}

// tokenizer_config.json variants: token objects, an explicit add_bos_token,
// a list of named templates; a lone tokenizer.json path finds its config
static void
test_hf_config(void)
{
	char src[512], dir[512], path[600];
	snprintf(src, sizeof src, "%s/qwen3/tokenizer.json", T_TOKDATA);
	if (bpe_missing(src))
		return;
	snprintf(dir, sizeof dir, "%s/hfcfg", t_tmpdir());
	mkdir(dir, 0700);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	REQUIRE(symlink(src, path) == 0);
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	FILE *f = fopen(path, "w");
	REQUIRE(f);
	fputs("{\"bos_token\": {\"content\": \"<|endoftext|>\", \"lstrip\": false}, \"add_bos_token\": true,"
	      " \"eos_token\": \"<|im_end|>\", \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"},"
	      " {\"name\": \"default\", \"template\": \"{{ '<start_of_turn>' }}\"}]}",
	      f);
	fclose(f);
	struct tokenizer *t = load(dir);
	REQUIRE(t);
	int32_t eot = tok_find(t, "<|endoftext|>", 13);
	CHECK(eot >= 0 && tok_bos(t) == eot && tok_add_bos(t) == 1);
	CHECK(tok_chat_family(t) == TOK_CHAT_GEMMA);
	int32_t *ids;
	size_t n;
	REQUIRE(encode(t, "hi", 2, -1, 0, &ids, &n) == 0);
	CHECK(n == 2 && ids[0] == eot);
	free(ids);
	tok_free(t);
	// the same through the tokenizer.json path
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	t = load(path);
	REQUIRE(t);
	CHECK(tok_bos(t) == eot && tok_chat_family(t) == TOK_CHAT_GEMMA);
	tok_free(t);
	// a config that is not JSON is an error that names the file
	snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
	f = fopen(path, "w");
	REQUIRE(f);
	fputs("{ nope", f);
	fclose(f);
	char err[AD_ERRLEN] = "";
	CHECK(tok_load(dir, err) == NULL && strstr(err, "tokenizer_config.json"), "%s", err);
}

// --- round trips and hostile input -------------------------------------------

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static size_t
put_utf8(char *p, uint32_t cp)
{
	if (cp < 0x80) {
		p[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		p[0] = (char)(0xc0 | cp >> 6);
		p[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		p[0] = (char)(0xe0 | cp >> 12);
		p[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		p[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	p[0] = (char)(0xf0 | cp >> 18);
	p[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	p[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	p[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static uint32_t
random_cp(void)
{
	for (;;) {
		uint32_t r = rnd() % 100, cp;
		if (r < 40)
			cp = 0x20 + rnd() % 0x5f; // ASCII
		else if (r < 50)
			cp = " \n\t"[rnd() % 3];
		else if (r < 65)
			cp = 0x80 + rnd() % 0x780; // Latin, Greek, Cyrillic...
		else if (r < 85)
			cp = 0x800 + rnd() % 0xf800; // BMP: CJK and the rest
		else
			cp = 0x10000 + rnd() % 0x100000; // astral: emoji, ...
		if (cp >= 0xd800 && cp <= 0xdfff)
			continue;
		return cp;
	}
}

static void
random_round_trips(const struct tokenizer *t, const char *name, int iters, int nfc)
{
	char buf[512];
	int ok = 0;
	for (int it = 0; it < iters; it++) {
		size_t n = 0, chars = 1 + rnd() % 40;
		for (size_t c = 0; c < chars; c++)
			n += put_utf8(buf + n, random_cp());
		if (round_trip_nfc(t, buf, n, nfc))
			ok++;
		else if (ok + 5 > it)
			fprintf(stderr, "  %s: round trip failed for \"%.*s\"\n", name, (int)n, buf);
	}
	printf("%-10s %d/%d random UTF-8 round trips\n", name, ok, iters);
	CHECK(ok == iters, "%s: %d/%d", name, ok, iters);
}

// random_bytes: never a crash; without normalisation the bytes come back
static void
random_bytes(const struct tokenizer *t, const char *name, int iters, int nfc)
{
	char buf[256], err[AD_ERRLEN];
	int ok = 0;
	for (int it = 0; it < iters; it++) {
		size_t n = rnd() % sizeof buf;
		for (size_t i = 0; i < n; i++)
			buf[i] = (char)rnd();
		int32_t *ids;
		size_t n_ids;
		if (tok_encode(t, buf, n, -1, it & 1, &ids, &n_ids, err))
			continue;
		char *s;
		size_t len;
		if (tok_decode(t, ids, n_ids, &s, &len, err) == 0) {
			// arbitrary bytes come back unchanged when nothing was special
			if ((it & 1) || nfc || (len == n && memcmp(s, buf, n) == 0))
				ok++;
			free(s);
		}
		struct tok_stream st;
		tok_stream_init(&st, t);
		for (size_t i = 0; i < n_ids; i++) {
			size_t k;
			tok_stream_push(&st, ids[i], &k, err);
		}
		tok_stream_free(&st);
		free(ids);
	}
	printf("%-10s %d/%d random byte strings survive\n", name, ok, iters);
	CHECK(ok == iters, "%s: %d/%d", name, ok, iters);
}

static void
test_random(void)
{
	struct tokenizer *t = load(T_DATA "/stories260K/stories260K.gguf");
	REQUIRE(t);
	random_round_trips(t, "stories", 2000, 0);
	random_bytes(t, "stories", 2000, 0);
	tok_free(t);
	t = load(T_DATA "/tokenizer/ggml-vocab-llama-spm.gguf");
	REQUIRE(t);
	random_round_trips(t, "llama-spm", 2000, 0);
	random_bytes(t, "llama-spm", 2000, 0);
	tok_free(t);
	const char *gpt2 = T_DATA "/tokenizer/ggml-vocab-gpt-2.gguf";
	if (!bpe_missing(gpt2)) {
		t = load(gpt2);
		REQUIRE(t);
		random_round_trips(t, "gpt-2", 2000, 0);
		random_bytes(t, "gpt-2", 2000, 0);
		tok_free(t);
	}
	// Qwen's tokenizer.json normalises to NFC; Llama 3's does not
	static const char *hf[][2] = {{"qwen3", "qwen3"}, {"llama3", "llama3"}};
	for (int i = 0; i < 2; i++) {
		char path[512];
		snprintf(path, sizeof path, "%s/%s", T_TOKDATA, hf[i][0]);
		if (bpe_missing(path))
			continue;
		t = load(path);
		REQUIRE(t);
		random_round_trips(t, hf[i][1], 1000, i == 0);
		random_bytes(t, hf[i][1], 1000, i == 0);
		tok_free(t);
	}
}

// SentencePiece merges word by word when no piece spans a word start; the
// ids must be those of merging the whole text at once
static void
test_spm_word_split(void)
{
	const char *paths[] = {T_DATA "/stories260K/stories260K.gguf", T_DATA "/tokenizer/ggml-vocab-llama-spm.gguf"};
	for (int v = 0; v < 2; v++) {
		struct tokenizer *t = load(paths[v]);
		REQUIRE(t);
		CHECK(t->spm_word_split, "%s", paths[v]);
		size_t cap = 200000, n = 0;
		char *buf = malloc(cap + 8);
		while (n < cap) {
			uint32_t cp = random_cp();
			if (rnd() % 4 == 0)
				cp = ' ';
			n += put_utf8(buf + n, cp);
		}
		int32_t *a, *b;
		size_t na, nb;
		REQUIRE(encode(t, buf, n, 0, 0, &a, &na) == 0);
		t->spm_word_split = 0;
		REQUIRE(encode(t, buf, n, 0, 0, &b, &nb) == 0);
		CHECK(same_ids(a, na, b, nb), "%s: %zu vs %zu ids", paths[v], na, nb);
		free(a);
		free(b);
		free(buf);
		tok_free(t);
	}
}

static void
test_stream_holdback(void)
{
	struct tokenizer *t = load(T_DATA "/stories260K/tok512.bin");
	REQUIRE(t);
	// "你" is not in the vocabulary: three byte tokens
	int32_t *ids;
	size_t n, k;
	char err[AD_ERRLEN];
	REQUIRE(encode(t, "\xe4\xbd\xa0", 3, 0, 0, &ids, &n) == 0);
	REQUIRE(n == 4, "n=%zu", n); // ▁ then three bytes
	struct tok_stream st;
	tok_stream_init(&st, t);
	const char *p = tok_stream_push(&st, ids[0], &k, err);
	CHECK(p && k == 1 && *p == ' ');
	p = tok_stream_push(&st, ids[1], &k, err);
	CHECK(p && k == 0, "the lead byte must be held back");
	p = tok_stream_push(&st, ids[2], &k, err);
	CHECK(p && k == 0, "two of three bytes must be held back");
	p = tok_stream_push(&st, ids[3], &k, err);
	CHECK(p && k == 3 && memcmp(p, "\xe4\xbd\xa0", 3) == 0);
	// an unfinished character is handed out by flush
	tok_stream_push(&st, ids[1], &k, err);
	p = tok_stream_flush(&st, &k);
	CHECK(k == 1 && (uint8_t)p[0] == 0xe4);
	p = tok_stream_flush(&st, &k);
	CHECK(k == 0);
	// a lead byte followed by something that is not a continuation: both out
	tok_stream_push(&st, ids[1], &k, err);
	p = tok_stream_push(&st, ids[0], &k, err);
	CHECK(k == 2 && (uint8_t)p[0] == 0xe4 && p[1] == ' ');
	tok_stream_free(&st);
	free(ids);
	tok_free(t);
}

// --- loading errors ------------------------------------------------------------

static void
test_load_errors(void)
{
	char err[AD_ERRLEN] = "";
	CHECK(tok_load("/nonexistent/tokenizer.gguf", err) == NULL && strstr(err, "nonexistent"));
	// truncated llama2.c tokenizer
	size_t n;
	char *d = t_read_file(T_DATA "/stories260K/tok512.bin", &n);
	REQUIRE(d);
	char path[512];
	snprintf(path, sizeof path, "%s/trunc.bin", t_tmpdir());
	FILE *f = fopen(path, "wb");
	REQUIRE(f);
	fwrite(d, 1, n - 3, f);
	fclose(f);
	err[0] = 0;
	CHECK(tok_load(path, err) == NULL && strstr(err, "past the end"), "%s", err);
	free(d);
	// an empty directory and a directory without tokenizer.json
	snprintf(path, sizeof path, "%s", t_tmpdir());
	CHECK(tok_load(path, err) == NULL && strstr(err, "tokenizer.json"), "%s", err);
	// GGUFs: unsupported model, no tokens, mismatched scores
	struct gguf_writer *w = gguf_writer_new();
	gguf_writer_str(w, "tokenizer.ggml.model", "t5");
	const char *toks[] = {"<unk>", "<s>", "</s>", "a"};
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
	snprintf(path, sizeof path, "%s/t5.gguf", t_tmpdir());
	REQUIRE(gguf_writer_save(w, path, err) == 0, "%s", err);
	gguf_writer_free(w);
	CHECK(tok_load(path, err) == NULL && strstr(err, "t5") && strstr(err, "bert"), "%s", err);

	w = gguf_writer_new();
	gguf_writer_str(w, "tokenizer.ggml.model", "llama");
	snprintf(path, sizeof path, "%s/notoks.gguf", t_tmpdir());
	REQUIRE(gguf_writer_save(w, path, err) == 0, "%s", err);
	gguf_writer_free(w);
	CHECK(tok_load(path, err) == NULL && strstr(err, "tokens"), "%s", err);

	w = gguf_writer_new();
	gguf_writer_str(w, "tokenizer.ggml.model", "llama");
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
	float sc[3] = {0, 0, 0};
	gguf_writer_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, 3);
	snprintf(path, sizeof path, "%s/scores.gguf", t_tmpdir());
	REQUIRE(gguf_writer_save(w, path, err) == 0, "%s", err);
	gguf_writer_free(w);
	CHECK(tok_load(path, err) == NULL && strstr(err, "scores"), "%s", err);

	// a minimal SPM vocabulary with no byte tokens: unknown bytes become unk,
	// a bos id outside the vocabulary is dropped
	w = gguf_writer_new();
	gguf_writer_str(w, "tokenizer.ggml.model", "llama");
	const char *toks2[] = {"<unk>",
	                       "<s>",
	                       "</s>",
	                       "\xe2\x96\x81",
	                       "a",
	                       "\xe2\x96\x81"
	                       "a"};
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks2, 6);
	int32_t types[6] = {2, 3, 3, 1, 1, 1};
	gguf_writer_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, 6);
	gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 99);
	snprintf(path, sizeof path, "%s/tiny.gguf", t_tmpdir());
	REQUIRE(gguf_writer_save(w, path, err) == 0, "%s", err);
	gguf_writer_free(w);
	struct tokenizer *t = tok_load(path, err);
	REQUIRE(t, "%s", err);
	CHECK(tok_bos(t) == -1);
	int32_t *ids;
	REQUIRE(encode(t, "a b", 3, -1, 0, &ids, &n) == 0);
	int32_t want[] = {5, 3, 0};
	CHECK(same_ids(ids, n, want, 3), "n=%zu", n);
	free(ids);
	CHECK(t->score == NULL, "a vocabulary without scores keeps no array of them");
	tok_free(t);
	tok_free(NULL);

	// byte-level BPE merges by rank: scores in its file are not kept
	w = gguf_writer_new();
	gguf_writer_str(w, "tokenizer.ggml.model", "gpt2");
	const char *btoks[] = {"a", "b", "ab"}, *bmerges[] = {"a b"};
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", btoks, 3);
	gguf_writer_arr_str(w, "tokenizer.ggml.merges", bmerges, 1);
	float bsc[3] = {-1, -2, -3};
	gguf_writer_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, bsc, 3);
	snprintf(path, sizeof path, "%s/bpe-scores.gguf", t_tmpdir());
	REQUIRE(gguf_writer_save(w, path, err) == 0, "%s", err);
	gguf_writer_free(w);
	t = tok_load(path, err);
	CHECK(t != NULL, "%s", err);
	if (t) {
		CHECK(strcmp(tok_kind_name(t), "bpe") == 0 && t->score == NULL, "%s keeps scores", tok_kind_name(t));
		REQUIRE(encode(t, "ab", 2, -1, 0, &ids, &n) == 0);
		int32_t ab[] = {2};
		CHECK(same_ids(ids, n, ab, 1), "n=%zu", n);
		free(ids);
	}
	tok_free(t);

	// a piece of TOK_PIECE_MAX bytes loads, one byte more is refused
	char *big = malloc(TOK_PIECE_MAX + 2);
	REQUIRE(big);
	for (int extra = 0; extra < 2; extra++) {
		memset(big, 'a', TOK_PIECE_MAX + 1);
		big[TOK_PIECE_MAX + extra] = 0;
		const char *toks3[] = {"<unk>", "<s>", "</s>", big};
		w = gguf_writer_new();
		gguf_writer_str(w, "tokenizer.ggml.model", "llama");
		gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks3, 4);
		snprintf(path, sizeof path, "%s/long.gguf", t_tmpdir());
		REQUIRE(gguf_writer_save(w, path, err) == 0, "%s", err);
		gguf_writer_free(w);
		err[0] = 0;
		t = tok_load(path, err);
		if (extra) {
			CHECK(t == NULL && strstr(err, "token 3 is 65536 bytes long (at most 65535)"), "%s", err);
		} else {
			CHECK(t != NULL, "%s", err);
			size_t len = 0;
			CHECK(t && tok_entry_piece(t, 3, &len) && len == TOK_PIECE_MAX, "%zu", len);
		}
		tok_free(t);
	}
	free(big);
}

// --- chat templates --------------------------------------------------------------

static void
chat_case(const struct tokenizer *t, enum tok_chat_family f, const struct tok_msg *m, size_t n, int gen,
          const char *want)
{
	char *out, err[AD_ERRLEN];
	int rc = tok_apply_chat_family(t, f, m, n, gen, &out, err);
	CHECK(rc == 0, "%s", err);
	if (rc)
		return;
	CHECK(strcmp(out, want) == 0, "%s:\n got: [%s]\nwant: [%s]", tok_chat_family_name(f), out, want);
	free(out);
}

static void
test_chat(void)
{
	struct tokenizer *t = load(T_DATA "/stories260K/stories260K.gguf");
	REQUIRE(t);
	const struct tok_msg conv[] = {
		{.role = TOK_ROLE_SYSTEM, .content = "You are terse."},
		{.role = TOK_ROLE_USER, .content = " Hi there "},
		{.role = TOK_ROLE_ASSISTANT, .content = "Hello."},
		{.role = TOK_ROLE_USER, .content = "Bye"},
	};
	// ChatML: no trimming
	chat_case(t, TOK_CHAT_CHATML, conv, 4, 1,
	          "<|im_start|>system\nYou are terse.<|im_end|>\n"
	          "<|im_start|>user\n Hi there <|im_end|>\n"
	          "<|im_start|>assistant\nHello.<|im_end|>\n"
	          "<|im_start|>user\nBye<|im_end|>\n"
	          "<|im_start|>assistant\n");
	chat_case(t, TOK_CHAT_CHATML, conv + 1, 1, 0, "<|im_start|>user\n Hi there <|im_end|>\n");
	// Llama 2: the template's bos_token + '[INST] ' + content.strip() + ' [/INST]'
	// and ' ' + content.strip() + ' ' + eos_token, the first BOS left to the encoder
	chat_case(t, TOK_CHAT_LLAMA2, conv, 4, 1,
	          "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello. </s><s>[INST] Bye [/INST]");
	chat_case(t, TOK_CHAT_LLAMA2, conv + 1, 1, 1, "[INST] Hi there [/INST]");
	// Llama 3: content | trim, generation prompt with the blank line
	chat_case(t, TOK_CHAT_LLAMA3, conv, 4, 1,
	          "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
	          "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
	          "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
	          "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
	          "<|start_header_id|>assistant<|end_header_id|>\n\n");
	// Gemma: system folded into the first user turn, assistant is "model"
	chat_case(t, TOK_CHAT_GEMMA, conv, 4, 1,
	          "<start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n"
	          "<start_of_turn>model\nHello.<end_of_turn>\n"
	          "<start_of_turn>user\nBye<end_of_turn>\n"
	          "<start_of_turn>model\n");
	// Phi-3
	chat_case(t, TOK_CHAT_PHI3, conv, 4, 1,
	          "<|system|>\nYou are terse.<|end|>\n<|user|>\n Hi there <|end|>\n"
	          "<|assistant|>\nHello.<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n");
	// Zephyr: every turn ends with the EOS text and a newline
	chat_case(t, TOK_CHAT_ZEPHYR, conv, 4, 1,
	          "<|system|>\nYou are terse.</s>\n<|user|>\n Hi there </s>\n"
	          "<|assistant|>\nHello.</s>\n<|user|>\nBye</s>\n<|assistant|>\n");
	chat_case(t, TOK_CHAT_PLAIN, conv, 4, 1,
	          "System: You are terse.\nUser:  Hi there \nAssistant: Hello.\nUser: Bye\nAssistant:");
	// stories260K has no template and no <|im_start|>: plain transcript
	CHECK(tok_chat_family(t) == TOK_CHAT_PLAIN);
	char *out, err[AD_ERRLEN];
	REQUIRE(tok_apply_chat(t, conv + 1, 1, 1, &out, err) == 0);
	CHECK(strcmp(out, "User:  Hi there \nAssistant:") == 0, "%s", out);
	free(out);
	struct tok_msg bad = {.role = (enum tok_role)7, .content = "x"};
	CHECK(tok_apply_chat(t, &bad, 1, 1, &out, err) == -1 && strstr(err, "role"));
	tok_free(t);

	// detection from real templates
	char path[512];
	snprintf(path, sizeof path, "%s/llama3", T_TOKDATA);
	if (!bpe_missing(path)) {
		t = load(path);
		REQUIRE(t);
		CHECK(tok_chat_family(t) == TOK_CHAT_LLAMA3);
		REQUIRE(tok_apply_chat(t, conv + 1, 1, 1, &out, err) == 0);
		CHECK(strcmp(out, "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
		                  "<|start_header_id|>assistant<|end_header_id|>\n\n") == 0);
		// the rendered prompt encodes to header tokens, with BOS first
		int32_t *ids;
		size_t n;
		REQUIRE(encode(t, out, strlen(out), -1, 1, &ids, &n) == 0);
		CHECK(n > 3 && ids[0] == tok_bos(t) && ids[1] == tok_find(t, "<|start_header_id|>", 19));
		free(ids);
		free(out);
		tok_free(t);
	}
	// a template per family, detected by its markers
	static const struct {
		const char *tmpl;
		enum tok_chat_family f;
	} probes[] = {
		{"{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n'}}{% endfor %}", TOK_CHAT_CHATML},
		{"{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}", TOK_CHAT_LLAMA2},
		{"{{'<|user|>\\n' + message['content'] + '<|end|>\\n' + '<|assistant|>\\n'}}", TOK_CHAT_PHI3},
		{"{{ '<|user|>\\n' + message['content'] + eos_token }}", TOK_CHAT_ZEPHYR},
		{"{{ '<start_of_turn>' + role + '\\n' }}", TOK_CHAT_GEMMA},
		{"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}", TOK_CHAT_LLAMA3},
		{"{{ messages }}", TOK_CHAT_PLAIN},
	};
	for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
		struct gguf_writer *w = gguf_writer_new();
		gguf_writer_str(w, "tokenizer.ggml.model", "llama");
		const char *toks[] = {"<unk>", "<s>", "</s>", "a"};
		gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
		gguf_writer_str(w, "tokenizer.chat_template", probes[i].tmpl);
		snprintf(path, sizeof path, "%s/chat%zu.gguf", t_tmpdir(), i);
		REQUIRE(gguf_writer_save(w, path, err) == 0, "%s", err);
		gguf_writer_free(w);
		t = load(path);
		REQUIRE(t);
		CHECK(tok_chat_family(t) == probes[i].f, "probe %zu: %s", i, tok_chat_family_name(tok_chat_family(t)));
		CHECK(tok_chat_template(t) && strcmp(tok_chat_template(t), probes[i].tmpl) == 0);
		tok_free(t);
	}
}

// --- the tokenize command ----------------------------------------------------------

int cmd_tokenize(int argc, char **argv);

// run_cmd runs `anedvd tokenize ARGS` with stdout captured into out
static int
run_cmd(char *out, size_t cap, int argc, char **argv)
{
	char path[512];
	snprintf(path, sizeof path, "%s/stdout.txt", t_tmpdir());
	fflush(stdout);
	int saved = dup(1);
	FILE *f = fopen(path, "w");
	if (!f || saved < 0)
		return -100;
	dup2(fileno(f), 1);
	int rc = cmd_tokenize(argc, argv);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	fclose(f);
	size_t n;
	char *d = t_read_file(path, &n);
	snprintf(out, cap, "%s", d ? d : "");
	free(d);
	return rc;
}

static void
test_cmd_tokenize(void)
{
	char out[4096];
	char *a1[] = {"tokenize", "--model", T_DATA "/stories260K/tok512.bin", "--ids", "Once upon a time"};
	CHECK(run_cmd(out, sizeof out, 5, a1) == 0);
	CHECK(strcmp(out, "1 403 407 261 378\n") == 0, "[%s]", out);
	char *a2[] = {"tokenize", "--model", T_DATA "/stories260K/stories260K.gguf", "--no-bos", "Once upon"};
	CHECK(run_cmd(out, sizeof out, 5, a2) == 0);
	CHECK(strcmp(out, "   403 ' Once'\n   407 ' upon'\n") == 0, "[%s]", out);
	char *a3[] = {"tokenize", "--model", T_DATA "/stories260K/stories260K.gguf", "--ids", "--parse-special",
	              "--no-bos", "<s>a</s>"};
	CHECK(run_cmd(out, sizeof out, 7, a3) == 0);
	CHECK(strncmp(out, "1 ", 2) == 0 && strstr(out, " 2\n"), "[%s]", out);
	char *a4[] = {"tokenize", "--model", T_DATA "/stories260K/stories260K.gguf",
	              "--ids",    "--chat",  "[{\"role\":\"user\",\"content\":\"Hi\"}]"};
	CHECK(run_cmd(out, sizeof out, 6, a4) == 0);
	CHECK(strncmp(out, "1 ", 2) == 0, "[%s]", out);
	// bad usage is 2, a bad model is 1
	char *b1[] = {"tokenize", "text"};
	CHECK(run_cmd(out, sizeof out, 2, b1) == 2);
	char *b2[] = {"tokenize", "--model", "m", "a", "b"};
	CHECK(run_cmd(out, sizeof out, 5, b2) == 2);
	char *b3[] = {"tokenize", "--model", "m", "--bogus", "a"};
	CHECK(run_cmd(out, sizeof out, 5, b3) == 2);
	char *b4[] = {"tokenize", "--model"};
	CHECK(run_cmd(out, sizeof out, 2, b4) == 2);
	char *b5[] = {"tokenize", "--model", "/nonexistent.gguf", "a"};
	CHECK(run_cmd(out, sizeof out, 4, b5) == 1);
	char *b6[] = {"tokenize", "--model", T_DATA "/stories260K/tok512.bin", "--chat", "{not json"};
	CHECK(run_cmd(out, sizeof out, 5, b6) == 2);
	char *b7[] = {"tokenize", "--model", T_DATA "/stories260K/tok512.bin", "--chat",
	              "[{\"role\":\"bot\",\"content\":\"x\"}]"};
	CHECK(run_cmd(out, sizeof out, 5, b7) == 2);
	char *b8[] = {"tokenize", "--model", T_DATA "/stories260K/tok512.bin", "--file", "/nonexistent.txt"};
	CHECK(run_cmd(out, sizeof out, 5, b8) == 1);
}

int
main(void)
{
	T_RUN(test_stories_gguf);
	T_RUN(test_stories_bin);
	T_RUN(test_vocab_layout);
	T_RUN(test_spm_special);
	T_RUN(test_spm_partition);
	T_RUN(test_llama_spm_vectors);
	T_RUN(test_spm_json);
	T_RUN(test_gpt2_vectors);
	T_RUN(test_qwen2_vectors);
	T_RUN(test_llama_bpe_vectors);
	T_RUN(test_hf_specials);
	T_RUN(test_hf_config);
	T_RUN(test_random);
	T_RUN(test_spm_word_split);
	T_RUN(test_stream_holdback);
	T_RUN(test_load_errors);
	T_RUN(test_chat);
	T_RUN(test_cmd_tokenize);
	return t_done();
}
