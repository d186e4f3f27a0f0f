// test-ugm.c - tokenizer.json normalizers, pre-tokenizers and the Unigram
// model, against what the tokenizers library does, written down by hand.
//
// No Unigram vocabulary with reference ids is at hand, so the expectations
// here are worked out from the library's definitions (its normalizers,
// pre-tokenizers and Unigram::encode_optimized, read from its source), each
// with the reasoning next to it: a segmentation is checked against the sums
// of the scores of every path, ties against the order in which the library
// visits candidates, unknown characters against its fusing and byte
// fallback. The normalizers and pre-tokenizers reproduce the examples of the
// library's documentation where it has them (Punctuation, Digits, Split).
#define _GNU_SOURCE // memmem
#include <cjson/cJSON.h>
#include <stdint.h>
#include <sys/stat.h>

#include "hfpipe.h"
#include "t.h"
#include "tokenizer-impl.h"
#include "tokenizer.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length"

#ifndef T_TOKDATA
#define T_TOKDATA "tokdata"
#endif

#define SP "\xe2\x96\x81" // ▁

// --- normalizers ----------------------------------------------------------------------

static int
norm_is(const char *json, const char *in, const char *want)
{
	char err[AD_ERRLEN] = "";
	cJSON *j = cJSON_Parse(json);
	struct hf_norm *n = NULL;
	char *out = NULL;
	size_t len = 0;
	int ok = j && hf_norm_parse(j, &n, err) == 0 && hf_norm_apply(n, in, strlen(in), &out, &len, err) == 0 &&
	         len == strlen(want) && !memcmp(out, want, len);
	if (!ok)
		fprintf(stderr, "  normalizer %s on \"%s\": \"%s\", want \"%s\" %s\n", json, in, out ? out : "(none)",
		        want, err);
	free(out);
	hf_norm_free(n);
	cJSON_Delete(j);
	return ok;
}

static int
norm_refused(const char *json, const char *want)
{
	char err[AD_ERRLEN] = "";
	cJSON *j = cJSON_Parse(json);
	struct hf_norm *n = NULL;
	int ok = j && hf_norm_parse(j, &n, err) == -1 && strstr(err, want);
	if (!ok)
		fprintf(stderr, "  normalizer %s: \"%s\" lacks \"%s\"\n", json, err, want);
	hf_norm_free(n);
	cJSON_Delete(j);
	return ok;
}

static void
test_normalizers(void)
{
	CHECK(norm_is("null", "As is", "As is"));
	// compatibility forms: ligature, circled digit, fullwidth letter, NBSP
	CHECK(norm_is("{\"type\":\"NFKC\"}", "\xef\xac\x81\xe2\x91\xa0\xef\xbc\xa1\xc2\xa0x", "fi1A x"));
	CHECK(norm_is("{\"type\":\"NFC\"}", "e\xcc\x81\xef\xac\x81", "\xc3\xa9\xef\xac\x81")); // NFC keeps the ligature
	CHECK(norm_is("{\"type\":\"NFD\"}", "\xc3\xa9", "e\xcc\x81"));
	CHECK(norm_is("{\"type\":\"NFKD\"}", "\xef\xac\x81\xc3\xa9", "fie\xcc\x81"));
	CHECK(norm_is("{\"type\":\"Lowercase\"}", "HeLLo \xc3\x89T\xc3\x89", "hello \xc3\xa9t\xc3\xa9"));
	// Strip: White_Space (here NBSP, tab, ideographic space) on either side
	CHECK(norm_is("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":true}", "\xc2\xa0\t a b \xe3\x80\x80",
	              "a b"));
	CHECK(norm_is("{\"type\":\"Strip\",\"strip_left\":false,\"strip_right\":true}", "  a  ", "  a"));
	CHECK(norm_is("{\"type\":\"Strip\",\"strip_left\":true,\"strip_right\":false}", "  a  ", "a  "));
	CHECK(norm_is("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"},{\"type\":\"StripAccents\"}]}",
	              "caf\xc3\xa9 na\xc3\xafve", "cafe naive"));
	// Replace: every match, left to right, without overlap
	CHECK(norm_is("{\"type\":\"Replace\",\"pattern\":{\"String\":\"aa\"},\"content\":\"b\"}", "aaaaa", "bba"));
	CHECK(norm_is("{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"" SP "\"}", " a b",
	              SP "a" SP "b"));
	CHECK(norm_is("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},\"content\":\" \"}", "a  b     c d",
	              "a b c d"));
	CHECK(norm_is("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"\\\\p{Nd}\"},\"content\":\"#\"}", "a1\xd9\xa3",
	              "a##"));
	// Prepend: only in front of text
	CHECK(norm_is("{\"type\":\"Prepend\",\"prepend\":\"" SP "\"}", "Hey", SP "Hey"));
	CHECK(norm_is("{\"type\":\"Prepend\",\"prepend\":\"" SP "\"}", "", ""));
	// a Sequence in order: the Replace sees the NFKC result
	CHECK(norm_is("{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFKC\"},{\"type\":\"Replace\",\"pattern\":"
	              "{\"String\":\"fi\"},\"content\":\"F\"},{\"type\":\"Lowercase\"}]}",
	              "\xef\xac\x81 FI", "f fi"));
	CHECK(norm_is("{\"type\":\"Precompiled\",\"precompiled_charsmap\":null}", "x", "x"));
	CHECK(norm_refused("{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"AAAA\"}", "Precompiled"));
	CHECK(norm_refused("{\"type\":\"BertNormalizer\"}", "BertNormalizer"));
	CHECK(norm_refused("{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"(\"},\"content\":\"\"}", "regex"));
	CHECK(norm_refused("{\"type\":\"Replace\",\"content\":\"x\"}", "pattern"));
	CHECK(norm_refused("{\"normalizers\":[]}", "without a type"));
}

// --- pre-tokenizers ---------------------------------------------------------------------

// want: the pieces joined by '|'
static int
pre_is(const char *json, const char *in, int first, const char *want)
{
	char err[AD_ERRLEN] = "";
	cJSON *j = cJSON_Parse(json);
	struct hf_pretok *p = NULL;
	struct hf_pieces pc = {0};
	char got[512] = "";
	size_t g = 0;
	int ok = j && hf_pretok_parse(j, &p, err) == 0 && hf_pretok_apply(p, in, strlen(in), first, &pc, err) == 0;
	for (size_t i = 0; ok && i < pc.n && g + pc.len[i] + 2 < sizeof got; i++) {
		if (i)
			got[g++] = '|';
		memcpy(got + g, pc.buf + pc.off[i], pc.len[i]);
		g += pc.len[i];
		got[g] = 0;
	}
	ok = ok && !strcmp(got, want);
	if (!ok)
		fprintf(stderr, "  pre_tokenizer %s on \"%s\": \"%s\", want \"%s\" %s\n", json, in, got, want, err);
	hf_pieces_free(&pc);
	hf_pretok_free(p);
	cJSON_Delete(j);
	return ok;
}

static void
test_pretokenizers(void)
{
	// Whitespace: \w+|[^\w\s]+
	CHECK(pre_is("{\"type\":\"Whitespace\"}", "Hello, world! foo_bar 12x ...?", 1,
	             "Hello|,|world|!|foo_bar|12x|...?"));
	CHECK(pre_is("{\"type\":\"Whitespace\"}", "caf\xc3\xa9\xe3\x80\x80na\xc3\xafve-ok", 1,
	             "caf\xc3\xa9|na\xc3\xafve|-|ok"));
	CHECK(pre_is("{\"type\":\"WhitespaceSplit\"}", " a,b  c\td ", 1, "a,b|c|d"));
	// Metaspace: spaces become ▁, one in front (always; first only on the
	// text that starts the input; never), split in front of every ▁
	const char *ms =
		"{\"type\":\"Metaspace\",\"replacement\":\"" SP "\",\"prepend_scheme\":\"always\",\"split\":true}";
	CHECK(pre_is(ms, "Hello world", 1, SP "Hello|" SP "world"));
	CHECK(pre_is(ms, "Hello world", 0, SP "Hello|" SP "world"));
	CHECK(pre_is(ms, "  a", 1, SP "|" SP "a")); // starts with ▁ already: none added
	CHECK(pre_is(ms, "Hello  world ", 1, SP "Hello|" SP "|" SP "world|" SP));
	const char *first = "{\"type\":\"Metaspace\",\"replacement\":\"" SP "\",\"prepend_scheme\":\"first\"}";
	CHECK(pre_is(first, "a b", 1, SP "a|" SP "b"));
	CHECK(pre_is(first, "a b", 0, "a|" SP "b"));
	CHECK(pre_is("{\"type\":\"Metaspace\",\"prepend_scheme\":\"never\"}", "a b", 1, "a|" SP "b"));
	CHECK(pre_is("{\"type\":\"Metaspace\",\"prepend_scheme\":\"always\",\"split\":false}", "a b", 1,
	             SP "a" SP "b"));
	CHECK(pre_is("{\"type\":\"Metaspace\",\"add_prefix_space\":true}", "a", 1, SP "a")); // the older key
	CHECK(pre_is("{\"type\":\"Metaspace\",\"replacement\":\"_\",\"add_prefix_space\":false}", "a b", 1, "a|_b"));
	// Punctuation, the library's example: isolated by default
	CHECK(pre_is("{\"type\":\"Punctuation\"}", "Hey friend!     How are you?!?", 1,
	             "Hey friend|!|     How are you|?|!|?"));
	CHECK(pre_is("{\"type\":\"Punctuation\",\"behavior\":\"Contiguous\"}", "Hey!?! you.", 1, "Hey|!?!| you|."));
	CHECK(pre_is("{\"type\":\"Punctuation\",\"behavior\":\"MergedWithPrevious\"}", "a,b.c", 1, "a,|b.|c"));
	CHECK(pre_is("{\"type\":\"Punctuation\",\"behavior\":\"MergedWithNext\"}", "a,b.c", 1, "a|,b|.c"));
	CHECK(pre_is("{\"type\":\"Punctuation\",\"behavior\":\"Removed\"}",
	             "a,b\xe3\x80\x82"
	             "c",
	             1, "a|b|c"));
	// Digits, the library's example
	CHECK(pre_is("{\"type\":\"Digits\",\"individual_digits\":true}", "Call 123 please", 1, "Call |1|2|3| please"));
	CHECK(pre_is("{\"type\":\"Digits\",\"individual_digits\":false}", "Call 123 please", 1, "Call |123| please"));
	// Split
	CHECK(pre_is("{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},\"behavior\":\"Removed\",\"invert\":false}",
	             "Hello  world", 1, "Hello|world"));
	CHECK(pre_is("{\"type\":\"Split\",\"pattern\":{\"String\":\"-\"},\"behavior\":\"Contiguous\"}", "a--b-c", 1,
	             "a|--|b|-|c"));
	CHECK(pre_is("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\w+\"},\"behavior\":\"Removed\",\"invert\":true}",
	             "Hello, world!", 1, "Hello|world"));
	CHECK(pre_is("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s\"},\"behavior\":\"MergedWithPrevious\"}",
	             "a b c", 1, "a |b |c"));
	// a Sequence: each step on every piece of the one before
	CHECK(pre_is("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"WhitespaceSplit\"},{\"type\":\"Metaspace\","
	             "\"prepend_scheme\":\"first\"}]}",
	             "ab cd", 1, SP "ab|cd"));
	CHECK(pre_is("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Punctuation\"},{\"type\":\"Digits\","
	             "\"individual_digits\":true}]}",
	             "a1,2", 1, "a|1|,|2"));
	char err[AD_ERRLEN] = "";
	struct hf_pretok *p = NULL;
	cJSON *j = cJSON_Parse("{\"type\":\"ByteLevel\"}");
	CHECK(hf_pretok_parse(j, &p, err) == -1 && strstr(err, "ByteLevel"), "%s", err);
	cJSON_Delete(j);
	j = cJSON_Parse("{\"type\":\"Metaspace\",\"prepend_scheme\":\"sometimes\"}");
	CHECK(hf_pretok_parse(j, &p, err) == -1 && strstr(err, "sometimes"), "%s", err);
	cJSON_Delete(j);
	j = cJSON_Parse("{\"type\":\"Split\",\"pattern\":{\"String\":\"x\"},\"behavior\":\"Sideways\"}");
	CHECK(hf_pretok_parse(j, &p, err) == -1 && strstr(err, "Sideways"), "%s", err);
	cJSON_Delete(j);
}

// --- the Unigram model ----------------------------------------------------------------

// a T5-style tokenizer.json: Metaspace pre-tokenizer, Unigram scores, the
// post-processor appending </s>
static const char *VOCAB_JSON =
	"[[\"<pad>\",0.0],[\"</s>\",0.0],[\"<unk>\",0.0],[\"" SP "\",-2.0],[\"" SP "the\",-3.0],"
	"[\"" SP "a\",-3.5],[\"b\",-4.0],[\"ab\",-4.5],[\"a\",-4.2],[\"c\",-5.0],[\"abc\",-10.0],[\"" SP "ab\",-6.0],"
	"[\"x\",-1.0],[\"y\",-1.0],[\"xy\",-2.0],[\"\xc3\xa9\",-3.0],[\"<0x7A>\",-9.0],[\"<0xC3>\",-9.0],"
	"[\"" SP "\xe2\x82\xac\",-4.0]]";

static struct tokenizer *
make(const char *name, const char *normalizer, const char *pre, int byte_fallback, int unk, const char *post)
{
	char dir[512], path[600], err[AD_ERRLEN] = "";
	snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	FILE *f = fopen(path, "w");
	if (!f)
		return NULL;
	fprintf(f,
	        "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":0,\"content\":\"<pad>\",\"special\":true},"
	        "{\"id\":1,\"content\":\"</s>\",\"special\":true},{\"id\":2,\"content\":\"<unk>\",\"special\":true},"
	        "{\"id\":19,\"content\":\"<extra_id_0>\",\"special\":true}],"
	        "\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":%s,\"decoder\":{\"type\":\"Metaspace\"},"
	        "\"model\":{\"type\":\"Unigram\",\"unk_id\":%s,\"byte_fallback\":%s,\"vocab\":%s}}",
	        normalizer, pre, post, unk ? "2" : "null", byte_fallback ? "true" : "false", VOCAB_JSON);
	fclose(f);
	struct tokenizer *t = tok_load(dir, err);
	if (!t)
		fprintf(stderr, "  %s: %s\n", name, err);
	return t;
}

// want: ids, terminated by -1
static int
ids_are(const struct tokenizer *t, const char *text, int add_special, const int32_t *want)
{
	char err[AD_ERRLEN] = "";
	int32_t *ids = NULL;
	size_t n = 0, k = 0;
	while (want[k] >= 0)
		k++;
	int ok = tok_encode(t, text, strlen(text), add_special, 1, &ids, &n, err) == 0 && n == k &&
	         (!n || !memcmp(ids, want, n * sizeof *ids));
	if (!ok) {
		fprintf(stderr, "  \"%s\":", text);
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, " %d", ids[i]);
		fprintf(stderr, " (want");
		for (size_t i = 0; i < k; i++)
			fprintf(stderr, " %d", want[i]);
		fprintf(stderr, ") %s\n", err);
	}
	free(ids);
	return ok;
}

#define IDS(...) ((const int32_t[]){__VA_ARGS__, -1})
#define NONE ((const int32_t[]){-1})

static const char *MS_ALWAYS = "{\"type\":\"Metaspace\",\"replacement\":\"" SP "\",\"prepend_scheme\":\"always\"}";
static const char *MS_FIRST = "{\"type\":\"Metaspace\",\"replacement\":\"" SP "\",\"prepend_scheme\":\"first\"}";
static const char *T5_POST = "{\"type\":\"TemplateProcessing\",\"single\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},"
			     "{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}],\"pair\":[],\"special_tokens\":{}}";

static void
test_unigram(void)
{
	struct tokenizer *t = make("ugm1", "null", MS_ALWAYS, 0, 1, T5_POST);
	REQUIRE(t);
	CHECK(!strcmp(tok_kind_name(t), "ugm"));
	CHECK(tok_n_vocab(t) == 20 && tok_eos(t) == 1 && tok_bos(t) < 0);
	// "abc" -> ▁abc: ▁ab+c -6-5 = -11 beats ▁+ab+c -11.5, ▁+abc -12,
	// ▁a+b+c -12.5, ▁+a+b+c -15.2
	CHECK(ids_are(t, "abc", 0, IDS(11, 9)));
	// "the a": ▁the (-3) and ▁a (-3.5); no ▁t... alternatives exist
	CHECK(ids_are(t, "the a", 0, IDS(4, 5)));
	// a tie: xy (-2) against x+y (-1-1): the first path to reach the end
	// (xy, from position 0) stays, a later one must be strictly better
	CHECK(ids_are(t, "xy", 0, IDS(3, 14)));
	// unknown characters: "zz" has no single-character entry; each z is the
	// unknown token (min score -10, minus 10), the two fused into one
	CHECK(ids_are(t, "zz", 0, IDS(3, 2)));
	CHECK(ids_are(t, "azzb", 0, IDS(5, 2, 6)));
	// a two-byte character that is an entry, and one that is not
	CHECK(ids_are(t, "\xc3\xa9", 0, IDS(3, 15)));
	CHECK(ids_are(t, "\xc3\xa8", 0, IDS(3, 2)));
	// a multi-byte entry with ▁: €
	CHECK(ids_are(t, "\xe2\x82\xac", 0, IDS(18)));
	// the post-processor's </s> with add_special, specials from the text
	CHECK(ids_are(t, "ab", 1, IDS(11, 1)));
	CHECK(ids_are(t, "ab</s>c", 0, IDS(11, 1, 3, 9)));
	CHECK(ids_are(t, "x<extra_id_0>", 0, IDS(3, 12, 19)));
	CHECK(ids_are(t, "", 0, NONE));
	// decoding: ▁ is a space, the leading one dropped
	const int32_t back[] = {4, 5, 11, 9};
	char *s = NULL, err[AD_ERRLEN];
	size_t n;
	CHECK(tok_decode(t, back, 4, &s, &n, err) == 0 && n == 9 && !strcmp(s, "the a abc"), "\"%s\"", s ? s : "");
	free(s);
	tok_free(t);

	// prepend_scheme first: only the text that starts the input gets the ▁
	t = make("ugm2", "null", MS_FIRST, 0, 1, "null");
	REQUIRE(t);
	CHECK(ids_are(t, "ab</s>ab", 0, IDS(11, 1, 7)));
	CHECK(!tok_add_bos(t) && tok_eos(t) < 0);
	tok_free(t);

	// byte fallback: the fused unknown piece as its bytes when every byte
	// has a token (z = 0x7A), else the unknown token (è = C3 A8, no <0xA8>)
	t = make("ugm3", "null", MS_ALWAYS, 1, 1, "null");
	REQUIRE(t);
	CHECK(ids_are(t, "zz", 0, IDS(3, 16, 16)));
	CHECK(ids_are(t, "\xc3\xa8", 0, IDS(3, 2)));
	int32_t zz[] = {3, 16, 16};
	s = NULL;
	CHECK(tok_decode(t, zz, 3, &s, &n, err) == 0 && n == 2 && !strcmp(s, "zz"), "\"%s\"", s ? s : "");
	free(s);
	tok_free(t);

	// a normalizer before the pre-tokenizer: runs of spaces become one,
	// NFKC turns the ligature-free fullwidth "ａｂ" into "ab"
	t = make("ugm4",
	         "{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Replace\",\"pattern\":{\"Regex\":\" {2,}\"},"
	         "\"content\":\" \"},{\"type\":\"NFKC\"}]}",
	         MS_ALWAYS, 0, 1, "null");
	REQUIRE(t);
	CHECK(ids_are(t, "the     \xef\xbd\x81\xef\xbd\x82", 0, IDS(4, 11)));
	tok_free(t);

	// no unknown token: a character without an entry is an error
	t = make("ugm5", "null", MS_ALWAYS, 0, 0, "null");
	REQUIRE(t);
	int32_t *ids;
	CHECK(tok_encode(t, "q", 1, 0, 0, &ids, &n, err) == -1 && strstr(err, "unknown"), "%s", err);
	CHECK(ids_are(t, "ab", 0, IDS(11)));
	tok_free(t);

	// refusals, each named
	struct {
		const char *name, *norm, *pre, *post, *want;
	} bad[] = {
		{"bad1", "{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"ALAAAA\"}", MS_ALWAYS, "null",
	         "Precompiled"},
		{"bad2", "null", "{\"type\":\"ByteLevel\"}", "null", "ByteLevel"},
		{"bad3", "null", MS_ALWAYS, "{\"type\":\"BertProcessing\"}", "BertProcessing"},
		{"bad4", "null", MS_ALWAYS,
	         "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<nope>\"}},"
	         "{\"Sequence\":{\"id\":\"A\"}}]}",
	         "<nope>"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char dir[512], path[600];
		snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), bad[i].name);
		mkdir(dir, 0755);
		snprintf(path, sizeof path, "%s/tokenizer.json", dir);
		FILE *f = fopen(path, "w");
		REQUIRE(f);
		fprintf(f,
		        "{\"added_tokens\":[],\"normalizer\":%s,\"pre_tokenizer\":%s,\"post_processor\":%s,"
		        "\"model\":{\"type\":\"Unigram\",\"unk_id\":2,\"vocab\":%s}}",
		        bad[i].norm, bad[i].pre, bad[i].post, VOCAB_JSON);
		fclose(f);
		CHECK(tok_load(dir, err) == NULL && strstr(err, bad[i].want), "%s: %s", bad[i].name, err);
	}
	const char *vocabs[][2] = {
		{"{\"type\":\"Unigram\",\"unk_id\":0,\"vocab\":[[\"a\"]]}", "[piece, score]"},
		{"{\"type\":\"Unigram\",\"unk_id\":99,\"vocab\":[[\"a\",-1.0]]}", "unk_id"},
		{"{\"type\":\"Unigram\",\"vocab\":[]}", "model.vocab"},
	};
	for (size_t i = 0; i < 3; i++) {
		char dir[512], path[600];
		snprintf(dir, sizeof dir, "%s/badv%zu", t_tmpdir(), i);
		mkdir(dir, 0755);
		snprintf(path, sizeof path, "%s/tokenizer.json", dir);
		FILE *f = fopen(path, "w");
		REQUIRE(f);
		fprintf(f, "{\"model\":%s}", vocabs[i][0]);
		fclose(f);
		CHECK(tok_load(dir, err) == NULL && strstr(err, vocabs[i][1]), "%s", err);
	}
}

// a vocabulary of realistic size: llama-spm's 32000 pieces and scores as a
// Unigram model (Metaspace, always, no split), on llama.cpp's 46 test
// strings, against the ids tokenizers.js (@huggingface/tokenizers 0.2.0)
// gives with adjacent unknown tokens fused as the Rust library does
// (tests/data/tokenizer/ugm-gen.mjs; the README says how they were made)
static void
test_unigram_llama(void)
{
	char err[AD_ERRLEN] = "";
	struct tokenizer *t = tok_load(T_TOKDATA "/ugm-llama", err);
	REQUIRE(t, "%s", err);
	size_t ni, no;
	char *inp = t_read_file(T_DATA "/tokenizer/ggml-vocab-llama-spm.gguf.inp", &ni);
	char *out = t_read_file(T_DATA "/tokenizer/ugm-llama.out", &no);
	REQUIRE(inp && out);
	const char *sep = "\n__ggml_vocab_test__\n";
	char *p = inp, *q = out, *end = inp + ni;
	int cases = 0, same = 0;
	while (p < end) {
		char *e = memmem(p, (size_t)(end - p), sep, strlen(sep));
		size_t len = e ? (size_t)(e - p) : (size_t)(end - p);
		char *nl = strchr(q, '\n');
		REQUIRE(nl, "case %d: no expected line", cases);
		*nl = 0;
		int32_t want[256];
		size_t k = 0;
		for (char *r = q, *x; k < 256; r = x) {
			long v = strtol(r, &x, 10);
			if (x == r)
				break;
			want[k++] = (int32_t)v;
		}
		int32_t *ids = NULL;
		size_t n = 0;
		int ok = tok_encode(t, p, len, 0, 0, &ids, &n, err) == 0 && n == k && (!n || !memcmp(ids, want, n * 4));
		if (!ok) {
			fprintf(stderr, "  case %d \"%.*s\": got", cases, (int)len, p);
			for (size_t i = 0; i < n; i++)
				fprintf(stderr, " %d", ids[i]);
			fprintf(stderr, ", want %s\n", q);
		}
		same += ok;
		free(ids);
		cases++;
		q = nl + 1;
		p = e ? e + strlen(sep) : end;
	}
	printf("ugm-llama: %d/%d cases match tokenizers.js\n", same, cases);
	CHECK(cases == 46 && same == cases, "%d of %d", same, cases);
	free(inp);
	free(out);
	tok_free(t);
}

int
main(void)
{
	T_RUN(test_normalizers);
	T_RUN(test_pretokenizers);
	T_RUN(test_unigram);
	T_RUN(test_unigram_llama);
	return t_done();
}
