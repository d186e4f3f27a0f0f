// test-unicode.c - UTF-8 coding, category flags, lowercase, NFC and the
// pre-tokenizer splits, checked against hand-worked expectations.
#include <stdarg.h>

#include "err.h"
#include "pretok.h"
#include "t.h"
#include "unicode.h"

static void
test_decode(void)
{
	static const struct {
		const char *s;
		size_t n;
		uint32_t cp;
		int len, bad;
	} cases[] = {
		{"A", 1, 'A', 1, 0},
		{"\xc3\xa4", 2, 0xE4, 2, 0},
		{"\xe2\x82\xac", 3, 0x20AC, 3, 0},
		{"\xf0\x9f\xa6\x99", 4, 0x1F999, 4, 0},
		{"\xf4\x8f\xbf\xbf", 4, 0x10FFFF, 4, 0},
		{"\xc0\x80", 2, 0xFFFD, 1, 1},         // overlong NUL
		{"\xc1\xbf", 2, 0xFFFD, 1, 1},         // overlong
		{"\xe0\x80\xaf", 3, 0xFFFD, 1, 1},     // overlong '/'
		{"\xf0\x80\x80\xaf", 4, 0xFFFD, 1, 1}, // overlong '/'
		{"\xed\xa0\x80", 3, 0xFFFD, 1, 1},     // surrogate D800
		{"\xed\xbf\xbf", 3, 0xFFFD, 1, 1},     // surrogate DFFF
		{"\xf4\x90\x80\x80", 4, 0xFFFD, 1, 1}, // 110000
		{"\xf5\x80\x80\x80", 4, 0xFFFD, 1, 1},
		{"\x80", 1, 0xFFFD, 1, 1},         // stray continuation
		{"\xe2\x82", 2, 0xFFFD, 1, 1},     // truncated
		{"\xe2\x28\xa1", 3, 0xFFFD, 1, 1}, // bad continuation
		{"\xff", 1, 0xFFFD, 1, 1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint32_t cp = 0;
		int bad = 0;
		int len = unicode_decode(cases[i].s, cases[i].n, &cp, &bad);
		CHECK(len == cases[i].len && cp == cases[i].cp && bad == cases[i].bad, "case %zu: len %d cp %X bad %d",
		      i, len, cp, bad);
		CHECK(unicode_valid(cases[i].s, cases[i].n) == !cases[i].bad, "case %zu", i);
	}
	CHECK(unicode_valid("", 0));
	CHECK(unicode_valid("h\xc3\xa9llo \xf0\x9f\xa6\x99", 11));
	CHECK(!unicode_valid("h\xc3\xa9llo \xf0\x9f\xa6", 10));
}

static void
test_encode(void)
{
	char b[4];
	static const uint32_t ok[] = {0,      'a',    0x7F,   0x80,   0x7FF,   0x800,
	                              0xD7FF, 0xE000, 0xFFFD, 0xFFFF, 0x10000, 0x10FFFF};
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		int n = unicode_encode(ok[i], b);
		uint32_t cp;
		int bad = 0;
		CHECK(n >= 1 && unicode_decode(b, (size_t)n, &cp, &bad) == n && cp == ok[i] && !bad, "U+%X", ok[i]);
	}
	CHECK(unicode_encode(0xE4, b) == 2 && !memcmp(b, "\xc3\xa4", 2));
	CHECK(unicode_encode(0xD800, b) == 0);
	CHECK(unicode_encode(0xDFFF, b) == 0);
	CHECK(unicode_encode(0x110000, b) == 0);
	// every code point survives a round trip
	int fails = 0;
	for (uint32_t cp = 0; cp <= UNICODE_MAX; cp++) {
		if (cp >= 0xD800 && cp <= 0xDFFF)
			continue;
		uint32_t back;
		int n = unicode_encode(cp, b), bad = 0;
		fails += unicode_decode(b, (size_t)n, &back, &bad) != n || back != cp || bad;
	}
	CHECK(fails == 0, "%d round trip failures", fails);
}

static void
test_flags(void)
{
	static const struct {
		uint32_t cp;
		uint16_t flags;
	} cases[] = {
		{'a', UNICODE_LETTER},
		{'Z', UNICODE_LETTER},
		{'5', UNICODE_NUMBER},
		{'_', UNICODE_PUNCTUATION},
		{'$', UNICODE_SYMBOL},
		{'+', UNICODE_SYMBOL},
		{' ', UNICODE_SEPARATOR | UNICODE_WHITESPACE},
		{'\n', UNICODE_CONTROL | UNICODE_WHITESPACE},
		{'\t', UNICODE_CONTROL | UNICODE_WHITESPACE},
		{0x1C, UNICODE_CONTROL}, // not White_Space
		{0x00, UNICODE_CONTROL},
		{0x85, UNICODE_CONTROL | UNICODE_WHITESPACE},
		{0xA0, UNICODE_SEPARATOR | UNICODE_WHITESPACE},
		{0xBD, UNICODE_NUMBER},  // ½
		{0xB2, UNICODE_NUMBER},  // ²
		{0xC4, UNICODE_LETTER},  // Ä
		{0x301, UNICODE_MARK},   // combining acute
		{0x378, UNICODE_UNDEF},  // unassigned
		{0x416, UNICODE_LETTER}, // Ж
		{0x663, UNICODE_NUMBER}, // Arabic-Indic three
		{0x915, UNICODE_LETTER}, // Devanagari ka
		{0x93F, UNICODE_MARK},   // Devanagari vowel sign i
		{0x2003, UNICODE_SEPARATOR | UNICODE_WHITESPACE},
		{0x200B, UNICODE_CONTROL}, // zero width space is Cf, not \s
		{0x2014, UNICODE_PUNCTUATION},
		{0x201C, UNICODE_PUNCTUATION},
		{0x20AC, UNICODE_SYMBOL}, // €
		{0x216B, UNICODE_NUMBER}, // Ⅻ
		{0x2028, UNICODE_SEPARATOR | UNICODE_WHITESPACE},
		{0x3000, UNICODE_SEPARATOR | UNICODE_WHITESPACE},
		{0x3002, UNICODE_PUNCTUATION}, // 。
		{0x4E2D, UNICODE_LETTER},      // 中
		{0xAC00, UNICODE_LETTER},      // 가
		{0xE000, UNICODE_CONTROL},     // private use
		{0xFFFD, UNICODE_SYMBOL},
		{0x1F999, UNICODE_SYMBOL}, // llama emoji
		{0x20000, UNICODE_LETTER}, // CJK ext B
		{0x10FFFF, UNICODE_UNDEF},
		{0x110000, UNICODE_UNDEF},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
		CHECK(unicode_flags(cases[i].cp) == cases[i].flags, "U+%X: %#x", cases[i].cp,
		      unicode_flags(cases[i].cp));
	CHECK(unicode_data_version[0] >= '1', "%s", unicode_data_version);
}

static void
test_lower_ccc(void)
{
	CHECK(unicode_tolower('A') == 'a');
	CHECK(unicode_tolower('a') == 'a');
	CHECK(unicode_tolower('1') == '1');
	CHECK(unicode_tolower(0xC4) == 0xE4);       // Ä
	CHECK(unicode_tolower(0x3A3) == 0x3C3);     // Σ
	CHECK(unicode_tolower(0x416) == 0x436);     // Ж
	CHECK(unicode_tolower(0x130) == 'i');       // İ
	CHECK(unicode_tolower(0x10400) == 0x10428); // Deseret
	CHECK(unicode_tolower(0x4E2D) == 0x4E2D);
	CHECK(unicode_ccc('a') == 0);
	CHECK(unicode_ccc(0x301) == 230);
	CHECK(unicode_ccc(0x323) == 220);
	CHECK(unicode_ccc(0x93C) == 7);
}

static int
nfc_is(const char *in, const char *want)
{
	size_t n;
	char *out = unicode_nfc(in, strlen(in), &n);
	int ok = out && n == strlen(want) && !memcmp(out, want, n) && out[n] == 0;
	if (!ok)
		fprintf(stderr, "nfc(\"%s\") = \"%s\", want \"%s\"\n", in, out ? out : "(null)", want);
	free(out);
	return ok;
}

// invalid sequences become U+FFFD, valid text is kept byte for byte
static void
test_sanitize(void)
{
	size_t n;
	char *o = unicode_sanitize("a\xc3\xa9"
	                           "b",
	                           4, &n);
	CHECK(o && n == 4 &&
	      !memcmp(o,
	              "a\xc3\xa9"
	              "b",
	              5));
	free(o);
	o = unicode_sanitize("x\xff\xe4\xb8", 4, &n); // a stray byte, a cut character
	CHECK(o && n == 1 + 3 * 3 && !memcmp(o, "x\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 11), "%zu", n);
	CHECK(o && unicode_valid(o, n));
	free(o);
	o = unicode_sanitize("", 0, &n);
	CHECK(o && n == 0 && o[0] == 0);
	free(o);
}

// what WordPiece keeps of a code point: the start of its decomposition
// "hex hex ...": code points as UTF-8 into out (room for 4 per code point)
static size_t
hex_utf8(const char *h, const char *end, char *out)
{
	size_t n = 0;
	while (h < end) {
		char *e;
		unsigned long cp = strtoul(h, &e, 16);
		if (e == h)
			break;
		n += (size_t)unicode_encode((uint32_t)cp, out + n);
		h = e;
	}
	return n;
}

// NFKC against Python's unicodedata (Unicode 14, the tables' version):
// every code point that NFKC changes, and 3000 mixed strings
// (tests/data/tokenizer/nfkc-tests.txt, written by gen-unicode.py
// --nfkc-tests)
static void
test_nfkc(void)
{
	size_t len;
	char *data = t_read_file(T_DATA "/tokenizer/nfkc-tests.txt", &len);
	REQUIRE(data, "nfkc-tests.txt");
	int lines = 0, bad = 0;
	char in[256], want[256];
	for (char *p = data, *end = data + len; p < end;) {
		char *nl = memchr(p, '\n', (size_t)(end - p)), *tab = memchr(p, '\t', (size_t)(end - p));
		if (!nl)
			nl = end;
		REQUIRE(tab && tab < nl, "line %d", lines + 1);
		size_t ni = hex_utf8(p, tab, in), nw = hex_utf8(tab + 1, nl, want);
		size_t no;
		char *out = unicode_nfkc(in, ni, &no);
		if (!out || no != nw || memcmp(out, want, nw)) {
			if (bad++ < 5)
				fprintf(stderr, "nfkc line %d: %.*s\n", lines + 1, (int)(nl - p), p);
		}
		free(out);
		lines++;
		p = nl + 1;
	}
	free(data);
	CHECK(lines > 7000 && bad == 0, "%d of %d NFKC vectors differ", bad, lines);
	// the compatibility forms, and what NFC keeps of them
	size_t n;
	char *o = unicode_nfkc("\xef\xac\x81 \xe2\x91\xa0 \xef\xbc\xa1", 11, &n); // ﬁ ① Ａ
	CHECK(o && n == 6 && !memcmp(o, "fi 1 A", 6), "%s", o ? o : "(null)");
	free(o);
	o = unicode_nfc("\xef\xac\x81", 3, &n);
	CHECK(o && n == 3 && !memcmp(o, "\xef\xac\x81", 3));
	free(o);
	// invalid bytes go through
	o = unicode_nfkc("a\xff\xc2\xa0", 4, &n);
	CHECK(o && n == 3 && !memcmp(o, "a\xff ", 3));
	free(o);
}

static void
test_nfd_first(void)
{
	CHECK(unicode_nfd_first('a') == 'a' && unicode_nfd_first(0) == 0);
	CHECK(unicode_nfd_first(0xE9) == 'e');      // é
	CHECK(unicode_nfd_first(0x1D5) == 'U');     // Ǖ: Ü + macron, Ü: U + diaeresis
	CHECK(unicode_nfd_first(0x1E69) == 's');    // ṩ: two marks
	CHECK(unicode_nfd_first(0xAC00) == 0x1100); // 가: its leading jamo
	CHECK(unicode_nfd_first(0xD7A3) == 0x1112); // the last syllable
	CHECK(unicode_nfd_first(0x4E2D) == 0x4E2D); // 中: none
	CHECK(unicode_nfd_first(0x2126) == 0x3A9);  // Ohm sign -> Omega (a singleton)
}

static void
test_nfc(void)
{
	CHECK(nfc_is("", ""));
	CHECK(nfc_is("plain ascii", "plain ascii"));
	CHECK(nfc_is("e\xcc\x81", "\xc3\xa9"));                                // e + acute -> é
	CHECK(nfc_is("\xc3\xa9", "\xc3\xa9"));                                 // stays
	CHECK(nfc_is("a\xcc\x82\xcc\xa3", "\xe1\xba\xad"));                    // a + circumflex + dot below -> ậ
	CHECK(nfc_is("a\xcc\xa3\xcc\x82", "\xe1\xba\xad"));                    // other order, same result
	CHECK(nfc_is("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8", "\xea\xb0\x81")); // Hangul jamo -> 각
	CHECK(nfc_is("\xea\xb0\x81", "\xea\xb0\x81"));
	CHECK(nfc_is("\xe2\x84\xab", "\xc3\x85"));                     // Angstrom sign -> Å
	CHECK(nfc_is("\xcd\x84", "\xcc\x88\xcc\x81"));                 // U+0344 decomposes for good
	CHECK(nfc_is("\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"));     // U+0958 is excluded from composition
	CHECK(nfc_is("\xc3\x85\xcc\x81", "\xc7\xba"));                 // Å + acute -> Ǻ
	CHECK(nfc_is("\xe1\xba\x9b\xcc\xa3", "\xe1\xba\x9b\xcc\xa3")); // ẛ̣ stays
	CHECK(nfc_is("caf\x65\xcc\x81 \xc3\x84pfel", "caf\xc3\xa9 \xc3\x84pfel"));
	// invalid bytes pass through and block composition
	CHECK(nfc_is("e\xff\xcc\x81", "e\xff\xcc\x81"));
	CHECK(nfc_is("\xffx\xc0", "\xffx\xc0"));
	// long input (buffer growth)
	char in[3 * 300 + 1], want[2 * 300 + 1];
	for (int i = 0; i < 300; i++) {
		memcpy(in + 3 * i, "e\xcc\x81", 3);
		memcpy(want + 2 * i, "\xc3\xa9", 2);
	}
	in[900] = want[600] = 0;
	CHECK(nfc_is(in, want));
}

// split text with the named pre-tokenizer and compare with the expected
// pieces (a NULL-terminated list)
static int
split_is(const char *pre, const char *text, ...)
{
	struct pretok p;
	struct pretok_out o = {0};
	char err[AD_ERRLEN];
	int ok = pretok_init_pre(&p, pre, err) == 0 && pretok_split(&p, text, strlen(text), &o, err) == 0;
	va_list ap;
	va_start(ap, text);
	size_t k = 0;
	for (const char *w; ok && (w = va_arg(ap, const char *)); k++)
		ok = k < o.n && o.v[k].len == strlen(w) && !memcmp(text + o.v[k].off, w, o.v[k].len);
	va_end(ap);
	ok = ok && k == o.n;
	if (!ok) {
		fprintf(stderr, "%s split of \"%s\":", pre, text);
		for (size_t i = 0; i < o.n; i++)
			fprintf(stderr, " [%.*s]", (int)o.v[i].len, text + o.v[i].off);
		fprintf(stderr, "\n");
	}
	pretok_out_free(&o);
	return ok;
}

static void
test_split_gpt2(void)
{
	CHECK(split_is("gpt-2", "", NULL));
	CHECK(split_is("gpt-2", "Hello world", "Hello", " world", NULL));
	CHECK(split_is("gpt-2", "I'm here", "I", "'m", " here", NULL));
	CHECK(split_is("gpt-2", "I'M", "I", "'", "M", NULL)); // case-sensitive
	CHECK(split_is("gpt-2", "they'll've", "they", "'ll", "'ve", NULL));
	CHECK(split_is("gpt-2", "  a", " ", " a", NULL));
	CHECK(split_is("gpt-2", "a  ", "a", "  ", NULL));
	CHECK(split_is("gpt-2", "a   b", "a", "  ", " b", NULL));
	CHECK(split_is("gpt-2", "123456", "123456", NULL));
	CHECK(split_is("gpt-2", " 12ab", " 12", "ab", NULL));
	CHECK(split_is("gpt-2", "\xc2\xa1Hola!", "\xc2\xa1", "Hola", "!", NULL));
	CHECK(split_is("gpt-2", "\xe6\x97\xa5\xe6\x9c\xac \xe8\xaa\x9e", "\xe6\x97\xa5\xe6\x9c\xac", " \xe8\xaa\x9e",
	               NULL));
	CHECK(split_is("gpt-2", "\n\n hi", "\n\n", " hi", NULL));
	CHECK(split_is("gpt-2", "\xc3\x84\xc2\xbd", "\xc3\x84", "\xc2\xbd", NULL)); // Ä½: letter, number
	CHECK(split_is("gpt-2", "x\xc2\xb2", "x", "\xc2\xb2", NULL));               // x²
	CHECK(split_is("gpt-2", " ...!? x", " ...!?", " x", NULL));
	CHECK(split_is("gpt-2",
	               "a\xff"
	               "b",
	               "a", "\xff", "b", NULL)); // invalid byte: a symbol
	CHECK(split_is("gpt-2",
	               "na\xc3\xaf"
	               "ve caf\xc3\xa9",
	               "na\xc3\xaf"
	               "ve",
	               " caf\xc3\xa9", NULL));
}

static void
test_split_llama3(void)
{
	CHECK(split_is("llama-bpe", "I'M here", "I", "'M", " here", NULL)); // case-insensitive
	CHECK(split_is("llama-bpe", "don't", "don", "'t", NULL));
	CHECK(split_is("llama-bpe", "WE'LL'Ve", "WE", "'LL", "'Ve", NULL));
	CHECK(split_is("llama-bpe", "1234567", "123", "456", "7", NULL));
	CHECK(split_is("llama-bpe", "\xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6", "\xd9\xa3\xd9\xa4\xd9\xa5", "\xd9\xa6", NULL));
	CHECK(split_is("llama-bpe", "hello, world!\n\n", "hello", ",", " world", "!\n\n", NULL));
	CHECK(split_is("llama-bpe", "  \n  x", "  \n", " ", " x", NULL));
	CHECK(split_is("llama-bpe", "(hello)", "(hello", ")", NULL));
	CHECK(split_is("llama-bpe", "$100", "$", "100", NULL));
	CHECK(split_is("llama-bpe", " ...\r\nabc", " ...\r\n", "abc", NULL));
	CHECK(split_is("llama-bpe", "\tfoo", "\tfoo", NULL));
	CHECK(split_is("llama-bpe", "\nfoo", "\n", "foo", NULL)); // \n may not lead a word
	CHECK(split_is("llama-bpe", "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\xbc\xd0\xb8\xd1\x80",
	               "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82", " \xd0\xbc\xd0\xb8\xd1\x80", NULL));
	CHECK(split_is("llama-bpe", "a \n\n b", "a", " \n\n", " b", NULL));
	CHECK(split_is("llama-bpe", "end   ", "end", "   ", NULL));
	CHECK(split_is("llama-bpe", "x\xc2\xa0y", "x", "\xc2\xa0y", NULL)); // NBSP leads a word
	CHECK(split_is("qwen2", "1234", "1", "2", "3", "4", NULL));
	CHECK(split_is("qwen2", "I'LL go", "I", "'LL", " go", NULL));
	CHECK(split_is("qwen2", "v2.0", "v", "2", ".", "0", NULL));
}

static void
test_split_multi(void)
{
	// smollm: each number alone first, then gpt-2 inside every piece
	CHECK(split_is("smollm", "a 12b", "a", " ", "1", "2", "b", NULL));
	CHECK(split_is("smollm", "hello world", "hello", " world", NULL));
	CHECK(split_is("default", "a+b=3.14", "a", "+", "b", "=", "3", ".", "14", NULL));
	CHECK(split_is("default", "1234567", "123", "456", "7", NULL));
	CHECK(split_is("default", "Hi there", "Hi", " there", NULL));
	CHECK(split_is(NULL, "x", "x", NULL)); // NULL means default
}

static void
test_names(void)
{
	struct pretok p;
	char err[AD_ERRLEN] = "";
	CHECK(pretok_init_pre(&p, "nonexistent-pre", err) == -1);
	CHECK(strstr(err, "nonexistent-pre") && strstr(err, "llama-bpe") && strstr(err, "smollm"), "%s", err);
	CHECK(pretok_init_pre(&p, "llama-bpe", err) == 0 && p.ignore_merges == 1);
	CHECK(pretok_init_pre(&p, "qwen2", err) == 0 && p.ignore_merges == 0);
	CHECK(pretok_init_pre(&p, "smollm", err) == 0 && p.n == 2 && p.rule[0] == PRETOK_DIGIT);
	// every name in the list is accepted
	char names[1024];
	snprintf(names, sizeof names, "%s", pretok_pre_names());
	int n = 0;
	for (char *s = strtok(names, ", "); s; s = strtok(NULL, ", "), n++)
		CHECK(pretok_init_pre(&p, s, err) == 0, "%s: %s", s, err);
	CHECK(n >= 5);

	memset(&p, 0, sizeof p);
	CHECK(pretok_add_regex(
		      &p,
		      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
		      err) == 0 &&
	      p.rule[0] == PRETOK_QWEN2);
	CHECK(pretok_add_regex(
		      &p,
		      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
		      err) == 0 &&
	      p.rule[1] == PRETOK_LLAMA3);
	// any other regex runs through PCRE2; one it cannot compile is refused
	CHECK(pretok_add_regex(&p, "\\w+|[^\\w\\s]+", err) == 0 && p.rule[2] == PRETOK_REGEX && p.re[2], "%s", err);
	CHECK(pretok_add_regex(&p, "[a-", err) == -1);
	CHECK(strstr(err, "\"[a-\"") && strstr(err, "missing terminating ]"), "%s", err);
	CHECK(pretok_add_regex(&p, "\xff", err) == -1 && strstr(err, "UTF-8"), "%s", err);
	CHECK(p.n == 3);
	while (p.n < PRETOK_MAX_RULES)
		pretok_add(&p, PRETOK_DIGIT, err);
	CHECK(pretok_add(&p, PRETOK_DIGIT, err) == -1);
	CHECK(pretok_add(&p, PRETOK_N_RULES, err) == -1);
	CHECK(pretok_add(&p, PRETOK_REGEX, err) == -1); // only with a pattern
	CHECK(pretok_add_regex(&p, "x+", err) == -1 && strstr(err, "rules"), "%s", err);
	pretok_free(&p);
	CHECK(p.n == 0 && !p.re[2]);

	// every name llama.cpp knows loads, through PCRE2 where no matcher is
	// hand-written, or is refused saying why
	int names_ok = 0, refused = 0;
	const char *const *re;
	const char *why;
	const char *nm;
	for (int i = 0; (nm = pretok_known_name(i, &re, &why)); i++) {
		int rc = pretok_init_pre(&p, nm, err);
		if (why) {
			refused++;
			CHECK(rc == -1 && strstr(err, nm) && strstr(err, why), "%s: %s", nm, err);
			continue;
		}
		CHECK(rc == 0, "%s: %s", nm, err);
		int nre = 0;
		while (re[nre])
			nre++;
		CHECK(rc || p.n == nre, "%s: %d rules for %d regexes", nm, p.n, nre);
		pretok_free(&p);
		CHECK(pretok_init_pre_opt(&p, nm, PRETOK_ENGINE, err) == 0, "%s (PCRE2 only): %s", nm, err);
		for (int r = 0; r < p.n; r++)
			CHECK(p.rule[r] == PRETOK_REGEX, "%s: rule %d by hand with PRETOK_ENGINE", nm, r);
		pretok_free(&p);
		names_ok += rc == 0;
	}
	CHECK(names_ok >= 70 && refused == 2, "%d names load, %d refused", names_ok, refused);
	CHECK(pretok_init_pre(&p, "kimi-k2", err) == -1 && strstr(err, "Han"), "%s", err);
	// Gemma 4's: one regex (runs of newlines, runs of the rest); bpe.c escapes the spaces
	CHECK(pretok_init_pre(&p, "gemma4", err) == 0 && p.n == 1, "%s", err);
	pretok_free(&p);
	struct pretok_flags fl = {0};
	CHECK(pretok_name_flags("gemma4", &fl) == 0 && fl.escape && fl.newline_words && fl.force_bos &&
	      fl.clean_spaces);
	CHECK(pretok_name_flags("sarvam-moe", &fl) == 0 && fl.escape && !fl.newline_words && !fl.clean_spaces);
	CHECK(pretok_name_flags("gpt-2", &fl) == 0 && !fl.escape && !fl.force_bos);
	CHECK(pretok_name_flags("no-such-name", &fl) == -1);
	CHECK(pretok_init_pre(&p, "deepseek-llm", err) == 0 && p.n == 6 && p.rule[0] == PRETOK_REGEX);
	pretok_free(&p);
}

// the hand-written matchers and PCRE2 running the same regexes cut every
// text the same way: each pre name with a matcher, on random strings over
// an alphabet that exercises every branch (contractions in both cases,
// CR/LF runs, digits of several scripts, letters, marks, symbols, NBSP,
// CJK, emoji, invalid bytes)
static void
test_engine_equal(void)
{
	static const char *bits[] = {"a",
	                             "Z",
	                             "xy",
	                             " ",
	                             "  ",
	                             "\n",
	                             "\r\n",
	                             "\r",
	                             "\t",
	                             "7",
	                             "42",
	                             "123",
	                             "'s",
	                             "'LL",
	                             "'Re",
	                             "'d",
	                             "'",
	                             ".",
	                             "!?",
	                             ",",
	                             "$",
	                             "+",
	                             "<=",
	                             "^~|",
	                             "`",
	                             "(",
	                             ")",
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
	                             "\xc2\xa0",
	                             "\xe3\x80\x80",
	                             "\xc2\xb2",
	                             "\xe2\x80\x94",
	                             "\xef\xbc\x81",
	                             "\xe2\x85\xa2",
	                             "\xe3\x81\x82"};
	static const char *pres[] = {"default",   "gpt-2",  "llama-bpe", "qwen2",     "smollm",
	                             "starcoder", "refact", "command-r", "codeshell", "stablelm2",
	                             "mpt",       "olmo",   "falcon3",   "pixtral",   "deepseek-r1-qwen"};
	struct pretok_out a = {0}, b = {0};
	char err[AD_ERRLEN], buf[512];
	unsigned seed = 99;
	int differ = 0, runs = 0;
	for (size_t pi = 0; pi < sizeof pres / sizeof pres[0]; pi++) {
		struct pretok ph, pe;
		REQUIRE(pretok_init_pre(&ph, pres[pi], err) == 0, "%s", err);
		REQUIRE(pretok_init_pre_opt(&pe, pres[pi], PRETOK_ENGINE, err) == 0, "%s: %s", pres[pi], err);
		for (int r = 0; r < ph.n; r++)
			REQUIRE(ph.rule[r] != PRETOK_REGEX, "%s: no hand-written rule", pres[pi]);
		for (int it = 0; it < 2000; it++) {
			size_t n = 0;
			seed = seed * 1103515245u + 12345u;
			int parts = (int)((seed >> 16) % 40);
			for (int k = 0; k < parts; k++) {
				seed = seed * 1103515245u + 12345u;
				const char *w = bits[(seed >> 16) % (sizeof bits / sizeof bits[0])];
				memcpy(buf + n, w, strlen(w));
				n += strlen(w);
			}
			runs++;
			if (pretok_split(&ph, buf, n, &a, err) || pretok_split(&pe, buf, n, &b, err)) {
				differ++;
				continue;
			}
			int same = a.n == b.n;
			for (size_t k = 0; same && k < a.n; k++)
				same = a.v[k].off == b.v[k].off && a.v[k].len == b.v[k].len;
			if (!same && differ++ < 5) {
				fprintf(stderr, "%s: \"%.*s\"\n  hand:", pres[pi], (int)n, buf);
				for (size_t k = 0; k < a.n; k++)
					fprintf(stderr, " [%.*s]", (int)a.v[k].len, buf + a.v[k].off);
				fprintf(stderr, "\n  pcre2:");
				for (size_t k = 0; k < b.n; k++)
					fprintf(stderr, " [%.*s]", (int)b.v[k].len, buf + b.v[k].off);
				fprintf(stderr, "\n");
			}
		}
		pretok_free(&pe);
	}
	CHECK(differ == 0, "%d of %d splits differ between the matchers and PCRE2", differ, runs);
	pretok_out_free(&a);
	pretok_out_free(&b);
}

// pieces always tile the input, whatever the bytes
static void
test_split_cover(void)
{
	struct pretok p;
	struct pretok_out o = {0};
	char err[AD_ERRLEN];
	const char *pres[] = {"gpt-2", "llama-bpe", "qwen2", "smollm", "default"};
	unsigned seed = 12345;
	char buf[64];
	int bad = 0;
	for (int it = 0; it < 20000; it++) {
		size_t n = (size_t)(seed % 40);
		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			static const char alpha[] = "a Z'\n\r\t1.\xc3\xa9\xe4\xb8\xad\xff\x80";
			buf[i] = alpha[(seed >> 16) % (sizeof alpha - 1)];
		}
		seed = seed * 1103515245u + 12345u;
		pretok_init_pre(&p, pres[it % 5], err);
		if (pretok_split(&p, buf, n, &o, err)) {
			bad++;
			continue;
		}
		uint32_t at = 0;
		for (size_t k = 0; k < o.n; k++) {
			bad += o.v[k].off != at || o.v[k].len == 0;
			at += o.v[k].len;
		}
		bad += at != n;
	}
	CHECK(bad == 0, "%d bad splits", bad);
	pretok_out_free(&o);
}

int
main(void)
{
	T_RUN(test_decode);
	T_RUN(test_encode);
	T_RUN(test_flags);
	T_RUN(test_lower_ccc);
	T_RUN(test_nfc);
	T_RUN(test_nfkc);
	T_RUN(test_nfd_first);
	T_RUN(test_sanitize);
	T_RUN(test_split_gpt2);
	T_RUN(test_split_llama3);
	T_RUN(test_split_multi);
	T_RUN(test_names);
	T_RUN(test_engine_equal);
	T_RUN(test_split_cover);
	return t_done();
}
