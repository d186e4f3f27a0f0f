// test-grammar.c - the GBNF compiler and the grammar matcher.
//
// The compiler: llama.cpp's example grammars compile; every refusal names
// its reason and place. The matcher: what a grammar accepts (byte by byte,
// with the fast machine and its plain twin agreeing), UTF-8 classes and
// byte-fallback tokens, stop ids only where the grammar can end, token
// elements, lazy triggers; then random walks over real vocabularies
// (stories260K's SentencePiece 512, llama's 32000 with byte fallback,
// Qwen3's 151,936 byte-level BPE) comparing the trie mask with the
// brute-force mask bit for bit at every step, also across rebuilds of the
// tables; and sampling under a grammar, fast against reference, token for
// token.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "grammar.h"
#include "sample.h"
#include "t.h"
#include "tokenizer.h"
#include "vocab-local.h"

#ifndef T_TOKDATA
#define T_TOKDATA "tests/tokdata"
#endif

static struct gbnf *
compile(const char *text)
{
	char err[AD_ERRLEN] = "";
	struct gbnf *g = NULL;
	int rc = gbnf_compile(text, strlen(text), NULL, NULL, NULL, &g, err);
	CHECK(rc == 0, "%s: %s", text, err);
	return g;
}

static int
compile_fails(const char *text, const char *want)
{
	char err[AD_ERRLEN] = "";
	struct gbnf *g = NULL;
	int rc = gbnf_compile(text, strlen(text), NULL, NULL, NULL, &g, err);
	gbnf_free(g);
	CHECK(rc == -1 && strstr(err, want), "'%s': got rc %d, '%s', want '%s'", text, rc, err, want);
	return rc == -1;
}

static char *
read_data(const char *name)
{
	char path[512];
	size_t n;
	snprintf(path, sizeof path, "%s/grammars/%s", T_DATA, name);
	char *s = t_read_file(path, &n);
	CHECK(s != NULL, "%s", path);
	return s;
}

static const char *const EXAMPLES[] = {"json.gbnf",  "arithmetic.gbnf", "japanese.gbnf",
                                       "chess.gbnf", "list.gbnf",       "c.gbnf"};
enum { N_EXAMPLES = sizeof EXAMPLES / sizeof EXAMPLES[0] };

static void
test_examples_compile(void)
{
	for (int i = 0; i < N_EXAMPLES; i++) {
		char *s = read_data(EXAMPLES[i]);
		REQUIRE(s);
		struct gbnf *g = compile(s);
		CHECK(g && g->n_rules > 1 && g->n_el > 10, "%s", EXAMPLES[i]);
		gbnf_free(g);
		free(s);
	}
}

static void
test_compile_errors(void)
{
	compile_fails("", "empty");
	compile_fails("root ::= foo", "rule 'foo' is used but not defined");
	compile_fails("start ::= \"a\"", "no rule named 'root'");
	compile_fails("root ::= root \"a\" | \"b\"", "left recursion");
	compile_fails("root ::= x\nx ::= y \"a\"\ny ::= \"\" | x", "left recursion");
	compile_fails("root ::= (\"\")*", "left recursion"); // x* of a nullable x, as llama.cpp
	compile_fails("root ::= \"abc", "unexpected end");
	compile_fails("root ::= [abc", "unexpected end");
	compile_fails("root ::= \"\\q\"", "unknown escape");
	compile_fails("root ::= \"\\x4\"", "hex digits");
	compile_fails("root ::= \"\\U00110000\"", "beyond the last code point");
	compile_fails("root ::= \"\\uD800\"", "surrogate");
	compile_fails("root ::= \"a\"{3,2}", "below its minimum");
	compile_fails("root ::= \"a\"{99999}", "above 10000");
	compile_fails("root ::= * \"a\"", "expecting an item");
	compile_fails("root ::= \"a\" )", "expecting a newline");
	compile_fails("root := \"a\"", "expecting ::=");
	compile_fails("root ::= (\"a\"", "expecting )");
	compile_fails("root ::= \"a\"\n  \"b\"", "line 2, column 3");
	compile_fails("root ::= \"\xff\"", "invalid UTF-8");
	compile_fails("root ::= <[abc]>", "token id");
	char deep[2000];
	int n = snprintf(deep, sizeof deep, "root ::= ");
	for (int i = 0; i < 200; i++)
		deep[n++] = '(';
	deep[n] = 0;
	compile_fails(deep, "deeper than");
	char nul[] = "root ::= \"a\"\0 junk";
	char err[AD_ERRLEN];
	struct gbnf *g = NULL;
	CHECK(gbnf_compile(nul, sizeof nul - 1, NULL, NULL, NULL, &g, err) == -1 &&
	              strstr(err, "NUL byte at offset 12"),
	      "%s", err);
	// repetitions that would expand past the element budget
	compile_fails("root ::= a b c\na ::= \"0123456789012345678901234567890123456789\"{10000}\n"
	              "b ::= \"0123456789012345678901234567890123456789\"{10000}\n"
	              "c ::= \"0123456789012345678901234567890123456789\"{10000}",
	              "too large");
	// many generated rules (repetitions) before a named one: the table of
	// rule names must still hold them all (fuzz-gbnf found it full)
	char many[4096];
	n = snprintf(many, sizeof many, "root ::= ( \"a\"");
	for (int i = 0; i < 300; i++)
		many[n++] = '?';
	n += snprintf(many + n, sizeof many - (size_t)n, " x )\nx ::= \"b\"\n");
	g = NULL;
	CHECK(gbnf_compile(many, (size_t)n, NULL, NULL, NULL, &g, err) == 0 && g->n_rules > 300, "%s", err);
	gbnf_free(g);
	// a named start rule
	g = NULL;
	CHECK(gbnf_compile("s ::= \"a\"", 9, "s", NULL, NULL, &g, err) == 0, "%s", err);
	gbnf_free(g);
}

// --- a vocabulary of single bytes --------------------------------------------------

enum { BYTE_EOS = 256, BYTE_CTRL = 257, BYTE_ABC = 258, BYTE_N = 259 };

static struct gram_vocab *
byte_vocab(void)
{
	static char b[256][1];
	const char *bytes[BYTE_N];
	uint32_t len[BYTE_N];
	for (int i = 0; i < 256; i++) {
		b[i][0] = (char)i;
		bytes[i] = b[i];
		len[i] = 1;
	}
	bytes[BYTE_EOS] = NULL, len[BYTE_EOS] = 0;
	bytes[BYTE_CTRL] = "", len[BYTE_CTRL] = 0;
	bytes[BYTE_ABC] = "abc", len[BYTE_ABC] = 3;
	char err[AD_ERRLEN];
	struct gram_vocab *v = gram_vocab_new(BYTE_N, bytes, len, err);
	CHECK(v != NULL, "%s", err);
	return v;
}

static struct gram *
new_gram(const struct gbnf *g, const struct gram_vocab *v, int ref)
{
	char err[AD_ERRLEN] = "";
	int32_t stop = BYTE_EOS;
	struct gram_opts o = {.g = g, .v = v, .stop = &stop, .n_stop = 1, .ref = ref};
	struct gram *m = gram_new(&o, err);
	CHECK(m != NULL, "%s", err);
	return m;
}

// 1 if the grammar accepts s as a whole string; both implementations must agree
static int
accepts(const struct gbnf *g, const struct gram_vocab *v, const char *s, size_t n)
{
	int verdict[2];
	for (int ref = 0; ref < 2; ref++) {
		struct gram *m = new_gram(g, v, ref);
		if (!m)
			return -1;
		char err[AD_ERRLEN];
		int ok = 1;
		for (size_t i = 0; i < n && ok; i++) {
			int a = gram_allows(m, (unsigned char)s[i], err);
			ok = a == 1 && gram_accept(m, (unsigned char)s[i], err) == 0;
		}
		verdict[ref] = ok && gram_can_end(m) && gram_allows(m, BYTE_EOS, err) == 1;
		gram_free(m);
	}
	CHECK(verdict[0] == verdict[1], "fast %d, ref %d on '%.*s'", verdict[0], verdict[1], (int)n, s);
	return verdict[0];
}

static void
expect(const char *grammar, const char *const *yes, const char *const *no)
{
	struct gbnf *g = compile(grammar);
	struct gram_vocab *v = byte_vocab();
	if (!g || !v)
		goto out;
	for (; yes && *yes; yes++)
		CHECK(accepts(g, v, *yes, strlen(*yes)) == 1, "%s should accept '%s'", grammar, *yes);
	for (; no && *no; no++)
		CHECK(accepts(g, v, *no, strlen(*no)) == 0, "%s should reject '%s'", grammar, *no);
out:
	gbnf_free(g);
	gram_vocab_free(v);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void
test_accepts(void)
{
	expect("root ::= \"ab\" | \"cd\"", L("ab", "cd"), L("", "a", "abc", "ac"));
	expect("root ::= [a-c]+ \"!\"?", L("a", "abc!", "ccc"), L("", "!", "ad", "a!!"));
	expect("root ::= \"x\"{2,3}", L("xx", "xxx"), L("x", "xxxx"));
	expect("root ::= \"x\"{2}", L("xx"), L("x", "xxx"));
	expect("root ::= \"x\"{2,}", L("xx", "xxxxxxx"), L("x"));
	expect("root ::= \"x\"{0,2} \"y\"", L("y", "xy", "xxy"), L("xxxy"));
	expect("root ::= [^a-z]", L("A", "0", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80"), L("a", "z", "AB"));
	expect("root ::= [α-ω]+", L("\xce\xb2", "\xce\xb1\xcf\x89"), L("a", "\xce\x91")); // β, αω; not A or Α
	expect("root ::= .", L("a", "\x7f", "\xc2\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"),
	       L("\xed\xa0\x80", "\xc0\x80", "\xf4\x90\x80\x80", "\xc3", "ab")); // no surrogates, overlongs, > 10FFFF
	expect("root ::= \"\\u00e9\\U0001F600\\x41\"",
	       L("\xc3\xa9\xf0\x9f\x98\x80"
	         "A"),
	       L("\xe9\x41"));
	expect("root ::= [\\[\\]\\\\]", L("[", "]", "\\"), L("a"));
	expect("root ::= a b\na ::= \"x\" | \"\"\nb ::= \"y\"* # comment\n", L("", "x", "y", "xyy"), L("yx"));
	expect("root ::= ( \"a\"\n | \"b\" )\n\n# trailing", L("a", "b"), L(""));
	expect("root ::= x\nx ::= \"(\" x \")\" | \"\"", L("", "()", "(())"), L("(", "())"));
	expect("root ::= [-a]", L("-", "a"), L("b"));
	expect("root ::= [a-]", L("-", "a"), L("b"));
	expect("root ::= [z-a]", NULL, L("a", "z"));              // an empty range matches nothing, as in llama.cpp
	expect("root ::= \"a\"\nroot ::= \"b\"", L("b"), L("a")); // the last definition wins, as in llama.cpp
	char *json = read_data("json.gbnf");
	if (json) {
		expect(json, L("{}", "{\"a\": [1, 2.5e3, true, null, \"x\\u00e9\"]}", "{\"\xe4\xb8\xad\": {}}"),
		       L("[]", "{a:1}", "{\"a\":}", "{\"\x01\": 1}", "{\"a\": 01}"));
		free(json);
	}
}

// a multi-byte token inside a literal, a control token, the stop id
static void
test_tokens_and_stops(void)
{
	struct gram_vocab *v = byte_vocab();
	struct gbnf *g = compile("root ::= \"abc\" \"d\"?");
	char err[AD_ERRLEN];
	for (int ref = 0; v && g && ref < 2; ref++) {
		struct gram *m = new_gram(g, v, ref);
		REQUIRE(m);
		uint64_t mask[(BYTE_N + 63) / 64], mref[(BYTE_N + 63) / 64];
		int n = gram_mask(m, mask, err);
		CHECK(n == 2, "the start allows 'a' and 'abc', got %d", n);
		CHECK(mask['a' / 64] >> ('a' % 64) & 1);
		CHECK(mask[BYTE_ABC / 64] >> (BYTE_ABC % 64) & 1);
		CHECK(!(mask[BYTE_EOS / 64] >> (BYTE_EOS % 64) & 1), "no stop before the end");
		CHECK(!(mask[BYTE_CTRL / 64] >> (BYTE_CTRL % 64) & 1), "a control token never");
		CHECK(gram_accept(m, 'b', err) == -1 && strstr(err, "not allowed"), "%s", err);
		CHECK(gram_accept(m, BYTE_EOS, err) == -1, "stop where it cannot end");
		CHECK(gram_accept(m, BYTE_ABC, err) == 0, "%s", err);
		CHECK(gram_can_end(m) && !gram_done(m));
		n = gram_mask(m, mask, err);
		CHECK(n == 2 && gram_mask_ref(m, mref, err) == 2 && !memcmp(mask, mref, sizeof mask),
		      "'d' or the stop");
		CHECK(mask[BYTE_EOS / 64] >> (BYTE_EOS % 64) & 1, "the stop where it can end");
		CHECK(gram_accept(m, 'd', err) == 0, "%s", err);
		CHECK(gram_done(m), "nothing can follow 'abcd'");
		n = gram_mask(m, mask, err);
		CHECK(n == 1 && (mask[BYTE_EOS / 64] >> (BYTE_EOS % 64) & 1), "only the stop");
		CHECK(gram_accept(m, BYTE_EOS, err) == 0, "%s", err);
		CHECK(gram_accept(m, 'a', err) == -1, "nothing after the stop");
		gram_free(m);
	}
	gbnf_free(g);
	// token elements: <[id]> and !<[id]>, with the control token
	char text[128];
	snprintf(text, sizeof text, "root ::= <[%d]> \"x\" !<[%d]>", BYTE_CTRL, 'y');
	g = compile(text);
	for (int ref = 0; v && g && ref < 2; ref++) {
		struct gram *m = new_gram(g, v, ref);
		REQUIRE(m);
		uint64_t mask[(BYTE_N + 63) / 64];
		CHECK(gram_mask(m, mask, err) == 1 && (mask[BYTE_CTRL / 64] >> (BYTE_CTRL % 64) & 1), "only the token");
		CHECK(gram_accept(m, BYTE_CTRL, err) == 0 && gram_accept(m, 'x', err) == 0, "%s", err);
		int n = gram_mask(m, mask, err);
		CHECK(n == BYTE_N - 2, "every token but 'y' and the stop: %d", n);
		CHECK(!(mask['y' / 64] >> ('y' % 64) & 1));
		CHECK(gram_accept(m, 'z', err) == 0 && gram_done(m), "%s", err);
		gram_free(m);
	}
	gbnf_free(g);
	// ids the vocabulary does not have; unresolved <text>
	g = compile("root ::= <[9999]>");
	int32_t stop = BYTE_EOS;
	struct gram_opts o = {.g = g, .v = v, .stop = &stop, .n_stop = 1};
	CHECK(g && !gram_new(&o, err) && strstr(err, "outside the vocabulary"), "%s", err);
	gbnf_free(g);
	g = compile("root ::= <think> \"x\"");
	o.g = g;
	CHECK(g && g->n_unresolved == 1 && !gram_new(&o, err) && strstr(err, "not resolved"), "%s", err);
	gbnf_free(g);
	gram_vocab_free(v);
}

// --- real vocabularies ---------------------------------------------------------------

static struct tokenizer *
load_tok(const char *path)
{
	char err[AD_ERRLEN];
	struct tokenizer *t = tok_load(path, err);
	CHECK(t != NULL, "%s: %s", path, err);
	return t;
}

static uint64_t
rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

// stop ids of a tokenizer: eos and eot
static int
stops_of(const struct tokenizer *t, int32_t *stop)
{
	int n = 0;
	if (tok_eos(t) >= 0)
		stop[n++] = tok_eos(t);
	if (tok_eot(t) >= 0 && tok_eot(t) != tok_eos(t))
		stop[n++] = tok_eot(t);
	return n;
}

// steps of a random walk: at each, the fast mask (trie walk, cache off and
// on) equals the brute-force mask of the fast gram and the mask of the plain
// twin; then both accept the same random allowed token
static int
walk(const char *what, const struct gbnf *g, const struct tokenizer *t, const struct gram_vocab *v, int steps,
     uint64_t seed, int max_states, int full_ref)
{
	char err[AD_ERRLEN] = "";
	int32_t stop[2];
	int n_stop = stops_of(t, stop);
	struct gram_opts o = {.g = g, .v = v, .stop = stop, .n_stop = n_stop, .max_states = max_states};
	struct gram *fast = gram_new(&o, err);
	o.ref = 1;
	struct gram *ref = full_ref ? gram_new(&o, err) : NULL;
	CHECK(fast && (ref || !full_ref), "%s: %s", what, err);
	int nv = gram_vocab_size(v), words = (nv + 63) / 64, done = 0;
	uint64_t *a = malloc((size_t)words * 8), *b = malloc((size_t)words * 8), *c = malloc((size_t)words * 8);
	int32_t *pick = malloc((size_t)nv * sizeof *pick);
	char text[4096];
	size_t tl = 0;
	for (int step = 0; fast && a && b && c && pick && step < steps; step++) {
		int na = gram_mask(fast, a, err);
		int nc = gram_mask(fast, c, err); // the cached copy
		int nb = full_ref ? gram_mask(ref, b, err) : gram_mask_ref(fast, b, err);
		CHECK(na >= 0 && na == nb && na == nc, "%s step %d: %d allowed by the trie, %d by brute force (%s)",
		      what, step, na, nb, err);
		if (memcmp(a, b, (size_t)words * 8) || memcmp(a, c, (size_t)words * 8)) {
			int shown = 0;
			for (int i = 0; i < nv && shown < 5; i++)
				if ((a[i / 64] ^ b[i / 64]) >> (i % 64) & 1) {
					size_t k;
					const char *s = tok_token_text(t, i, &k);
					t_note("%s step %d after '%.*s': token %d '%.*s' trie %d ref %d\n", what, step,
					       (int)tl, text, i, (int)k, s, (int)(a[i / 64] >> (i % 64) & 1),
					       (int)(b[i / 64] >> (i % 64) & 1));
					shown++;
				}
			CHECK(0, "%s step %d: the masks differ", what, step);
			break;
		}
		int m = 0;
		for (int i = 0; i < nv; i++)
			if (a[i / 64] >> (i % 64) & 1)
				pick[m++] = i;
		if (m == 0)
			break;
		int32_t id = pick[rnd(&seed) % (uint64_t)m];
		// the stop id ends a walk; prefer going on while there is more
		for (int tries = 0; tries < 4 && m > 1 && (id == stop[0] || (n_stop > 1 && id == stop[1])); tries++)
			id = pick[rnd(&seed) % (uint64_t)m];
		CHECK(gram_allows(fast, id, err) == 1, "%s: a masked token must be allowed", what);
		CHECK(gram_accept(fast, id, err) == 0, "%s: %s", what, err);
		CHECK(!ref || gram_accept(ref, id, err) == 0, "%s: %s", what, err);
		size_t k;
		const char *s = tok_token_text(t, id, &k);
		if (tl + k < sizeof text) {
			memcpy(text + tl, s, k);
			tl += k;
		}
		done = step + 1;
		if (gram_done(fast)) {
			CHECK(!ref || gram_done(ref), "%s: done in one twin only", what);
			break;
		}
	}
	if (getenv("T_VERBOSE"))
		printf("%s: %d steps: '%.*s'\n", what, done, (int)(tl > 200 ? 200 : tl), text);
	free(a);
	free(b);
	free(c);
	free(pick);
	struct gram_stats st;
	if (fast)
		gram_stats(fast, &st);
	gram_free(fast);
	gram_free(ref);
	return fast ? st.rebuilds : -1;
}

static void
walks_on(const char *name, const char *path, int steps, int full_ref)
{
	struct tokenizer *t = load_tok(path);
	if (!t)
		return;
	char err[AD_ERRLEN];
	struct gram_vocab *v = gram_vocab_from_tokenizer(t, 0, err);
	CHECK(v != NULL, "%s", err);
	for (int i = 0; v && i < N_EXAMPLES; i++) {
		char *s = read_data(EXAMPLES[i]);
		struct gbnf *g = s ? compile(s) : NULL;
		char what[128];
		for (uint64_t seed = 1; g && seed <= 2; seed++) {
			snprintf(what, sizeof what, "%s/%s/%llu", name, EXAMPLES[i], (unsigned long long)seed);
			walk(what, g, t, v, steps, seed * 0x9e3779b97f4a7c15ull, 0, full_ref);
		}
		gbnf_free(g);
		free(s);
	}
	// UTF-8 beyond ASCII through byte tokens and partial-character tokens
	struct gbnf *g =
		compile("root ::= \"\xc3\xa9t\xc3\xa9 \" [\xe4\xb8\x80-\xe9\xbf\xbf]{1,4} \"\xf0\x9f\x98\x80\"");
	char what[128];
	snprintf(what, sizeof what, "%s/utf8", name);
	if (g && v)
		walk(what, g, t, v, 40, 7, 0, full_ref);
	gbnf_free(g);
	gram_vocab_free(v);
	tok_free(t);
}

static void
test_walk_stories(void)
{
	walks_on("stories260K", T_DATA "/stories260K/stories260K.gguf", 60, 1);
}

static void
test_walk_llama_spm(void)
{
	walks_on("llama-spm", T_DATA "/tokenizer/ggml-vocab-llama-spm.gguf", 12, 1);
}

static void
test_walk_qwen3(void)
{
	walks_on("qwen3", T_TOKDATA "/qwen3", 3, 0);
}

// the byte tokens of a SentencePiece vocabulary carry characters it has no piece for
static void
test_byte_fallback(void)
{
	struct tokenizer *t = load_tok(T_DATA "/stories260K/stories260K.gguf");
	if (!t)
		return;
	char err[AD_ERRLEN];
	struct gram_vocab *v = gram_vocab_from_tokenizer(t, 0, err);
	struct gbnf *g = compile("root ::= \"\xe4\xb8\xad\"");
	int32_t stop[2];
	struct gram_opts o = {.g = g, .v = v, .stop = stop, .n_stop = stops_of(t, stop)};
	struct gram *m = v && g ? gram_new(&o, err) : NULL;
	REQUIRE(m, "%s", err);
	int32_t b0 = tok_find(t, "<0xE4>", 6), b1 = tok_find(t, "<0xB8>", 6), b2 = tok_find(t, "<0xAD>", 6);
	REQUIRE(b0 >= 0 && b1 >= 0 && b2 >= 0);
	uint64_t mask[8];
	CHECK(gram_mask(m, mask, err) == 1 && (mask[b0 / 64] >> (b0 % 64) & 1), "only <0xE4>");
	CHECK(gram_accept(m, b0, err) == 0 && gram_mask(m, mask, err) == 1 && (mask[b1 / 64] >> (b1 % 64) & 1));
	CHECK(gram_accept(m, b1, err) == 0 && gram_accept(m, b2, err) == 0 && gram_done(m), "%s", err);
	gram_free(m);
	gbnf_free(g);
	gram_vocab_free(v);
	tok_free(t);
}

// the tables rebuilt every few states: the masks stay the brute force's
static void
test_rebuild(void)
{
	struct tokenizer *t = load_tok(T_DATA "/stories260K/stories260K.gguf");
	char err[AD_ERRLEN];
	struct gram_vocab *v = t ? gram_vocab_from_tokenizer(t, 0, err) : NULL;
	int rebuilds = 0;
	for (int k = 0; k < 2; k++) {
		char *s = read_data(k ? "c.gbnf" : "json.gbnf");
		struct gbnf *g = s ? compile(s) : NULL;
		for (uint64_t seed = 1; g && v && seed <= 3; seed++) {
			char what[64];
			snprintf(what, sizeof what, "rebuild/%d/%llu", k, (unsigned long long)seed);
			int r = walk(what, g, t, v, 80, seed * 7919, 6, 1);
			rebuilds += r > 0 ? r : 0;
		}
		gbnf_free(g);
		free(s);
	}
	CHECK(rebuilds > 5, "the walks should have rebuilt the tables (%d)", rebuilds);
	gram_vocab_free(v);
	tok_free(t);
}

// lazy: free text until a trigger, then the grammar from the trigger's first byte
static void
test_lazy(void)
{
	struct gram_vocab *v = byte_vocab();
	struct gbnf *g = compile("root ::= \"<call>\" [a-z]+ \"</call>\"");
	const char *words[] = {"<call>"};
	char err[AD_ERRLEN];
	for (int ref = 0; v && g && ref < 2; ref++) {
		int32_t stop = BYTE_EOS;
		struct gram_opts o = {.g = g,
		                      .v = v,
		                      .stop = &stop,
		                      .n_stop = 1,
		                      .lazy = 1,
		                      .words = words,
		                      .n_words = 1,
		                      .ref = ref};
		struct gram *m = gram_new(&o, err);
		REQUIRE(m, "%s", err);
		CHECK(!gram_active(m) && gram_allows(m, 'Z', err) == 1 && gram_allows(m, BYTE_EOS, err) == 1);
		const char *pre = "Hi <cal";
		uint32_t at = 0;
		for (const char *p = pre; *p; p++)
			CHECK(gram_accept(m, (unsigned char)*p, err) == 0 && !gram_triggered(m, &at), "%s", err);
		CHECK(!gram_active(m));
		CHECK(gram_accept(m, 'l', err) == 0 && !gram_triggered(m, &at), "%s", err);
		CHECK(gram_accept(m, '>', err) == 0 && gram_triggered(m, &at) && at == 3, "triggered at %u", at);
		CHECK(gram_active(m) && gram_allows(m, 'Z', err) == 0 && gram_allows(m, 'q', err) == 1);
		CHECK(gram_allows(m, BYTE_EOS, err) == 0, "no stop inside the call");
		CHECK(gram_accept(m, 'q', err) == 0 && !gram_triggered(m, NULL), "%s", err);
		gram_free(m);
	}
	// a trigger inside a token with bytes after it: "x<call>ab" in one token
	const char *bytes[BYTE_N + 1];
	uint32_t len[BYTE_N + 1];
	static char b[256][1];
	for (int i = 0; i < 256; i++) {
		b[i][0] = (char)i;
		bytes[i] = b[i];
		len[i] = 1;
	}
	bytes[256] = NULL, len[256] = 0;
	bytes[257] = "", len[257] = 0;
	bytes[258] = "x<call>ab", len[258] = 9;
	bytes[259] = "x<call>AB", len[259] = 9;
	struct gram_vocab *v2 = gram_vocab_new(BYTE_N + 1, bytes, len, err);
	for (int ref = 0; v2 && g && ref < 2; ref++) {
		int32_t stop = BYTE_EOS;
		struct gram_opts o = {.g = g,
		                      .v = v2,
		                      .stop = &stop,
		                      .n_stop = 1,
		                      .lazy = 1,
		                      .words = words,
		                      .n_words = 1,
		                      .ref = ref};
		struct gram *m = gram_new(&o, err);
		REQUIRE(m, "%s", err);
		uint32_t at = 0;
		// the grammar rejects "<call>AB": still waiting
		CHECK(gram_accept(m, 'Q', err) == 0 && gram_accept(m, 259, err) == 0 && !gram_triggered(m, &at));
		CHECK(!gram_active(m));
		CHECK(gram_accept(m, 258, err) == 0 && gram_triggered(m, &at) && at == 11, "at %u", at);
		CHECK(gram_active(m) && gram_allows(m, 'c', err) == 1 && gram_allows(m, '<', err) == 1);
		gram_free(m);
	}
	gram_vocab_free(v2);
	// a trigger token: the token is the grammar's first element
	gbnf_free(g);
	char text[64];
	snprintf(text, sizeof text, "root ::= <[%d]> \"[\" [0-9]+ \"]\"", BYTE_CTRL);
	g = compile(text);
	for (int ref = 0; v && g && ref < 2; ref++) {
		int32_t stop = BYTE_EOS, trig = BYTE_CTRL;
		struct gram_opts o = {.g = g,
		                      .v = v,
		                      .stop = &stop,
		                      .n_stop = 1,
		                      .lazy = 1,
		                      .trigger_ids = &trig,
		                      .n_trigger_ids = 1,
		                      .ref = ref};
		struct gram *m = gram_new(&o, err);
		REQUIRE(m, "%s", err);
		uint32_t at = 0;
		CHECK(gram_accept(m, 'o', err) == 0 && gram_accept(m, 'k', err) == 0 && !gram_triggered(m, &at));
		CHECK(gram_accept(m, BYTE_CTRL, err) == 0 && gram_triggered(m, &at) && at == 2, "at %u", at);
		CHECK(gram_allows(m, '[', err) == 1 && gram_allows(m, 'o', err) == 0);
		gram_free(m);
	}
	struct gram_opts bad = {.g = g, .v = v, .lazy = 1};
	CHECK(g && !gram_new(&bad, err) && strstr(err, "trigger"), "%s", err);
	gbnf_free(g);
	gram_vocab_free(v);
}

// sampling under the grammar: fast (cheap path, trie mask) and reference
// (plain matcher, brute-force mask, sample_ref) pick the same tokens for the
// same generator, with penalties and truncation on; every text parses
static void
test_sample_twins(void)
{
	struct tokenizer *t = load_tok(T_DATA "/stories260K/stories260K.gguf");
	char err[AD_ERRLEN];
	struct gram_vocab *v = t ? gram_vocab_from_tokenizer(t, 0, err) : NULL;
	char *s = read_data("json.gbnf");
	struct gbnf *g = s ? compile(s) : NULL;
	REQUIRE(t && v && g);
	int nv = gram_vocab_size(v);
	float *logits = malloc((size_t)nv * sizeof *logits);
	int32_t stop[2];
	int n_stop = stops_of(t, stop);
	uint64_t rejected = 0;
	for (int trial = 0; trial < 6; trial++) {
		struct sample_params p;
		sample_defaults(&p);
		p.temperature = trial == 0 ? 0.0f : 0.7f + 0.1f * (float)trial;
		p.top_k = trial % 2 ? 40 : 0;
		p.top_p = trial % 3 == 2 ? 0.9f : 1.0f;
		p.min_p = trial == 4 ? 0.05f : 0.0f;
		p.repeat_penalty = trial == 5 ? 1.3f : 1.0f;
		p.frequency_penalty = trial == 3 ? 0.5f : 0.0f;
		p.seed = 1000 + (uint64_t)trial;
		p.has_seed = 1;
		struct sampler *sa = sample_new(&p, nv, err), *sb = sample_new(&p, nv, err);
		struct gram_opts o = {.g = g, .v = v, .stop = stop, .n_stop = n_stop};
		struct gram *fa = gram_new(&o, err);
		o.ref = 1;
		struct gram *fb = gram_new(&o, err);
		REQUIRE(sa && sb && fa && fb, "%s", err);
		uint64_t seed = 77 + (uint64_t)trial;
		int steps = 0;
		for (; steps < 80 && !gram_done(fa); steps++) {
			for (int i = 0; i < nv; i++)
				logits[i] = (float)(rnd(&seed) % 2000) / 100.0f - 10.0f;
			int32_t a = gram_sample(fa, sa, logits, err);
			int32_t b = gram_sample(fb, sb, logits, err);
			CHECK(a >= 0 && a == b, "trial %d step %d: fast %d, ref %d (%s)", trial, steps, a, b, err);
			if (a < 0 || a != b || a == stop[0] || (n_stop > 1 && a == stop[1]))
				break;
		}
		CHECK(steps >= 2, "trial %d: %d steps", trial, steps);
		struct gram_stats st;
		gram_stats(fa, &st);
		rejected += st.rejected;
		gram_free(fa);
		gram_free(fb);
		sample_free(sa);
		sample_free(sb);
	}
	CHECK(rejected > 0, "random logits must hit the masked path");
	// a greedy pick under a grammar is the argmax among the allowed tokens
	struct sample_params p;
	sample_defaults(&p);
	p.temperature = 0;
	struct sampler *sa = sample_new(&p, nv, err);
	struct gram_opts o = {.g = g, .v = v, .stop = stop, .n_stop = n_stop};
	struct gram *fa = gram_new(&o, err);
	uint64_t *mask = malloc((size_t)(nv + 63) / 64 * 8);
	uint64_t seed = 5;
	for (int step = 0; sa && fa && mask && step < 20 && !gram_done(fa); step++) {
		for (int i = 0; i < nv; i++)
			logits[i] = (float)(rnd(&seed) % 2000) / 100.0f;
		gram_mask(fa, mask, err);
		int32_t best = -1;
		for (int i = 0; i < nv; i++)
			if ((mask[i / 64] >> (i % 64) & 1) && (best < 0 || logits[i] > logits[best]))
				best = i;
		int32_t got = gram_sample(fa, sa, logits, err);
		CHECK(got == best, "greedy: %d, the best allowed %d", got, best);
	}
	free(mask);
	gram_free(fa);
	sample_free(sa);
	// no allowed token with a finite logit: an error, not a hang
	struct gbnf *g2 = compile("root ::= \"\xe4\xb8\xad\"");
	sa = sample_new(&p, nv, err);
	o.g = g2;
	fa = gram_new(&o, err);
	for (int i = 0; i < nv; i++)
		logits[i] = (float)i;
	int32_t b0 = tok_find(t, "<0xE4>", 6);
	logits[b0] = -INFINITY;
	CHECK(fa && sa && gram_sample(fa, sa, logits, err) == -1 && strstr(err, "no token can continue"), "%s", err);
	gram_free(fa);
	sample_free(sa);
	gbnf_free(g2);
	free(logits);
	gbnf_free(g);
	free(s);
	gram_vocab_free(v);
	tok_free(t);
}

// the trie: every token under its bytes, duplicates and control tokens handled
static void
test_vocab_trie(void)
{
	const char *bytes[] = {"b", "ab", "a", "", "ab", NULL, "abc", "b"};
	uint32_t len[] = {1, 2, 1, 0, 2, 0, 3, 1};
	char err[AD_ERRLEN];
	struct gram_vocab *v = gram_vocab_new(8, bytes, len, err);
	REQUIRE(v, "%s", err);
	CHECK(gram_vocab_nodes(v) == 5, "root a ab abc b: %d", gram_vocab_nodes(v)); // root, a, ab, abc, b
	struct gbnf *g = compile("root ::= \"a\" \"b\"?");
	int32_t stop = 5;
	struct gram_opts o = {.g = g, .v = v, .stop = &stop, .n_stop = 1};
	struct gram *m = gram_new(&o, err);
	uint64_t mask[1];
	CHECK(m && gram_mask(m, mask, err) == 3 && mask[0] == ((1u << 1) | (1u << 2) | (1u << 4)), "%llx",
	      (unsigned long long)mask[0]);
	gram_free(m);
	gbnf_free(g);
	gram_vocab_free(v);
}

int
main(void)
{
	T_RUN(test_examples_compile);
	T_RUN(test_compile_errors);
	T_RUN(test_accepts);
	T_RUN(test_tokens_and_stops);
	T_RUN(test_vocab_trie);
	T_RUN(test_lazy);
	T_RUN(test_byte_fallback);
	T_RUN(test_sample_twins);
	T_RUN(test_walk_stories);
	T_RUN(test_rebuild);
	T_RUN(test_walk_llama_spm);
	T_RUN(test_walk_qwen3);
	return t_done();
}
