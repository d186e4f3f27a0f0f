// bench-tokenizer.c - encode and decode throughput on a few MB of mixed
// English, C code and CJK text (generated here, deterministically), for
// every vocabulary at hand. Prints the median and range of 5 runs.
//
//   bench-tokenizer [MB]        (default 4)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "pretok.h"
#include "tokenizer.h"

#ifndef T_DATA
#define T_DATA "tests/data"
#endif
#ifndef T_TOKDATA
#define T_TOKDATA "tokdata"
#endif

#define RUNS 5

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint32_t
rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)((rng >> 16) % n);
}

struct buf {
	char *p;
	size_t n, cap;
};

static void
add(struct buf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		b->cap = (b->n + n + 1) * 2;
		b->p = realloc(b->p, b->cap);
		if (!b->p) {
			fprintf(stderr, "out of memory\n");
			exit(1);
		}
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
}

static void
adds(struct buf *b, const char *s)
{
	add(b, s, strlen(s));
}

static const char *words[] = {
	"the",       "a",     "little",  "girl",    "named",      "Lily",      "went",           "to",      "park",
	"and",       "saw",   "big",     "dog",     "it's",       "they'll",   "we've",          "running", "quickly",
	"because",   "sun",   "was",     "shining", "over",       "mountains", "1984",           "3.14159", "GPU",
	"tokenizer", "don't", "however", "Once",    "upon",       "time",      "implementation", "naïve",   "café",
	"résumé",    "über",  "Ελλάδα",  "Москва",  "2024-11-29", "e-mail",
};

static const char *code[] = {
	"static int\nfoo(const char *s, size_t n)\n{\n\tfor (size_t i = 0; i < n; i++)\n\t\tif (s[i] == '\\n')\n\t\t\treturn (int)i;\n\treturn -1;\n}\n",
	"def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n",
	"    if (x->len > 0x7fffffff) { return ERR_TOO_BIG; } // TODO: check overflow\n",
	"const data = await fetch(`https://example.com/api?q=${encodeURIComponent(q)}`);\n",
	"SELECT id, name FROM users WHERE created_at >= '2024-01-01' ORDER BY id DESC;\n",
};

static void
gen_text(struct buf *b, size_t target)
{
	char tmp[8];
	while (b->n < target) {
		uint32_t kind = rnd(10);
		if (kind < 5) { // an English paragraph
			size_t n = 20 + rnd(60);
			for (size_t i = 0; i < n; i++) {
				adds(b, words[rnd(sizeof words / sizeof words[0])]);
				adds(b, rnd(12) == 0 ? ". " : rnd(10) == 0 ? ", " : " ");
			}
			adds(b, "\n\n");
		} else if (kind < 8) { // code
			adds(b, code[rnd(sizeof code / sizeof code[0])]);
		} else { // CJK: Han, kana, hangul, with CJK punctuation
			size_t n = 20 + rnd(80);
			for (size_t i = 0; i < n; i++) {
				uint32_t r = rnd(10), cp;
				if (r < 6)
					cp = 0x4e00 + rnd(0x2000); // common Han
				else if (r < 8)
					cp = 0x3041 + rnd(0x56); // hiragana
				else if (r < 9)
					cp = 0xac00 + rnd(0x2000); // hangul
				else
					cp = rnd(2) ? 0x3001 : 0x3002; // 、。
				tmp[0] = (char)(0xe0 | cp >> 12);
				tmp[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
				tmp[2] = (char)(0x80 | (cp & 0x3f));
				add(b, tmp, 3);
			}
			adds(b, "\n");
		}
	}
}

static double
now(void)
{
	return (double)ad_now_ns() * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void
bench(const char *name, const char *path, const struct buf *text)
{
	char err[AD_ERRLEN];
	struct stat st;
	if (stat(path, &st)) {
		printf("%-10s not available (%s)\n", name, path);
		return;
	}
	double t0 = now();
	struct tokenizer *t = tok_load(path, err);
	double load_ms = (now() - t0) * 1e3;
	if (!t) {
		printf("%-10s cannot load: %s\n", name, err);
		return;
	}
	double enc[RUNS], dec[RUNS];
	size_t n_ids = 0, out_len = 0;
	for (int r = 0; r < RUNS; r++) {
		int32_t *ids;
		char *out;
		t0 = now();
		if (tok_encode(t, text->p, text->n, 0, 0, &ids, &n_ids, err)) {
			printf("%-10s encode failed: %s\n", name, err);
			tok_free(t);
			return;
		}
		double t1 = now();
		if (tok_decode(t, ids, n_ids, &out, &out_len, err)) {
			printf("%-10s decode failed: %s\n", name, err);
			free(ids);
			tok_free(t);
			return;
		}
		double t2 = now();
		enc[r] = (double)text->n / (t1 - t0) / 1e6;
		dec[r] = (double)out_len / (t2 - t1) / 1e6;
		free(out);
		free(ids);
	}
	qsort(enc, RUNS, sizeof enc[0], cmp_double);
	qsort(dec, RUNS, sizeof dec[0], cmp_double);
	printf("%-10s %-4s vocab %6d  load %7.1f ms  %8zu tokens (%.2f bytes/token)  "
	       "encode %7.2f MB/s [%.2f..%.2f]  decode %8.1f MB/s [%.1f..%.1f]\n",
	       name, tok_kind_name(t), tok_n_vocab(t), load_ms, n_ids, (double)text->n / (double)n_ids, enc[RUNS / 2],
	       enc[0], enc[RUNS - 1], dec[RUNS / 2], dec[0], dec[RUNS - 1]);
	tok_free(t);
}

// pre-tokenization alone, MB/s: the hand-written matchers against PCRE2
// running the same regexes (PRETOK_ENGINE), median [min..max] of RUNS
static double
split_mbs(const struct pretok *p, const char *s, size_t n, double *lo, double *hi)
{
	struct pretok_out o = {0};
	char err[AD_ERRLEN];
	double v[RUNS];
	for (int r = 0; r < RUNS; r++) {
		double t0 = now();
		if (pretok_split(p, s, n, &o, err)) {
			printf("split failed: %s\n", err);
			pretok_out_free(&o);
			return 0;
		}
		v[r] = (double)n / (now() - t0) / 1e6;
	}
	pretok_out_free(&o);
	qsort(v, RUNS, sizeof v[0], cmp_double);
	*lo = v[0], *hi = v[RUNS - 1];
	return v[RUNS / 2];
}

static void
bench_pretok(const struct buf *text)
{
	static const char *pres[] = {"gpt-2", "llama-bpe", "qwen2", "smollm", "default"};
	char err[AD_ERRLEN];
	printf("pre-tokenizer alone, MB/s: hand-written matchers / PCRE2 (JIT) on the same regexes\n");
	for (size_t i = 0; i < sizeof pres / sizeof pres[0]; i++) {
		struct pretok h, e;
		if (pretok_init_pre(&h, pres[i], err) || pretok_init_pre_opt(&e, pres[i], PRETOK_ENGINE, err)) {
			printf("%-10s %s\n", pres[i], err);
			continue;
		}
		double hl, hh, el, eh;
		double hv = split_mbs(&h, text->p, text->n, &hl, &hh), ev = split_mbs(&e, text->p, text->n, &el, &eh);
		printf("%-10s hand %7.1f [%.1f..%.1f]  pcre2 %7.1f [%.1f..%.1f]  hand/pcre2 %.2fx\n", pres[i], hv, hl,
		       hh, ev, el, eh, ev > 0 ? hv / ev : 0);
		pretok_free(&e);
	}
	// the worst case, one huge pre-token: the time must grow with the size,
	// not its square. A run of letters, and spaces before a word (\s+(?!\S)
	// backtracks once per run)
	static const char fill[] = {'a', ' '};
	for (int f = 0; f < 2; f++)
		for (size_t mb = 1; mb <= 4; mb *= 4) {
			size_t n = mb << 20;
			char *s = malloc(n);
			if (!s)
				return;
			memset(s, fill[f], n);
			s[n - 1] = 'x';
			struct pretok h, e;
			pretok_init_pre(&h, "llama-bpe", err);
			pretok_init_pre_opt(&e, "llama-bpe", PRETOK_ENGINE, err);
			double lo, hi;
			double hv = split_mbs(&h, s, n, &lo, &hi), ev = split_mbs(&e, s, n, &lo, &hi);
			printf("one %zu MiB pre-token of '%s': hand %.1f MB/s, pcre2 %.1f MB/s\n", mb,
			       f ? "space" : "a", hv, ev);
			pretok_free(&e);
			free(s);
		}
}

int
main(int argc, char **argv)
{
	double mb = argc > 1 ? atof(argv[1]) : 4;
	if (mb <= 0 || mb > 1024) {
		fprintf(stderr, "usage: bench-tokenizer [MB]\n");
		return 2;
	}
	struct buf text = {0};
	gen_text(&text, (size_t)(mb * 1e6));
	printf("text: %.2f MB of English, C/Python/JS/SQL code and CJK; one encode call per run; "
	       "median [min..max] of %d runs\n",
	       (double)text.n / 1e6, RUNS);
	bench("stories", T_DATA "/stories260K/stories260K.gguf", &text);
	bench("llama-spm", T_DATA "/tokenizer/ggml-vocab-llama-spm.gguf", &text);
	bench("gpt-2", T_DATA "/tokenizer/ggml-vocab-gpt-2.gguf", &text);
	bench("qwen3", T_TOKDATA "/qwen3", &text);
	bench("llama3", T_TOKDATA "/llama3", &text);
	bench("ugm-llama", T_TOKDATA "/ugm-llama", &text); // Unigram over llama-spm's pieces
	bench_pretok(&text);
	free(text.p);
	return 0;
}
