// pretok.c - hand-written matchers for the byte-level BPE split regexes.
//
// Each matcher answers "how long is the match of this regex at position i of
// the piece [i, e)?" (0: none), trying the alternatives in order as a
// backtracking regex engine would. The split loop then walks the piece the
// way find-all does: a match becomes a piece, unmatched stretches between
// matches become pieces too.
#include "pretok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include "err.h"
#include "sbuf.h"
#include "unicode.h"

#include "pretok-names.h"

#define L_ UNICODE_LETTER
#define N_ UNICODE_NUMBER
#define WS_ UNICODE_WHITESPACE

static const char *const rule_names[PRETOK_N_RULES] = {
	[PRETOK_GPT2] = "gpt2",       [PRETOK_LLAMA3] = "llama3", [PRETOK_QWEN2] = "qwen2",   [PRETOK_DIGIT] = "digit",
	[PRETOK_NUMBERS] = "numbers", [PRETOK_PUNCT] = "punct",   [PRETOK_DIGIT3] = "digit3", [PRETOK_REGEX] = "regex",
};

const char *
pretok_rule_name(enum pretok_rule r)
{
	return (unsigned)r < PRETOK_N_RULES ? rule_names[r] : "?";
}

// the regexes as they appear in tokenizer.json (and in llama.cpp, which
// writes some without the trailing |\s+ that changes nothing for find-all)
static const struct {
	const char *re;
	enum pretok_rule rule;
} known_regex[] = {
	{"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", PRETOK_GPT2},
	{"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", PRETOK_GPT2},
	{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
         PRETOK_LLAMA3},
	{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
         PRETOK_LLAMA3},
	{"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
         PRETOK_QWEN2},
	{"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
         PRETOK_QWEN2},
	{"\\p{N}", PRETOK_DIGIT},
	{"\\p{N}+", PRETOK_NUMBERS},
	{"[\\p{P}\\$\\+<=>\\^~\\|]+", PRETOK_PUNCT},
	{"[0-9][0-9][0-9]", PRETOK_DIGIT3},
};

// tokenizer.ggml.pre values, after llama.cpp's llama-vocab.cpp: each name
// maps to the same regex list there
static const struct {
	const char *name;
	enum pretok_rule rules[4];
	int n, ignore_merges;
} known_pre[] = {
	{"default", {PRETOK_PUNCT, PRETOK_GPT2, PRETOK_NUMBERS, PRETOK_DIGIT3}, 4, 0},
	{"gpt-2", {PRETOK_GPT2}, 1, 0},
	{"mpt", {PRETOK_GPT2}, 1, 0},
	{"olmo", {PRETOK_GPT2}, 1, 0},
	{"llama-bpe", {PRETOK_LLAMA3}, 1, 1},
	{"llama3", {PRETOK_LLAMA3}, 1, 1},
	{"llama-v3", {PRETOK_LLAMA3}, 1, 1},
	{"falcon3", {PRETOK_LLAMA3}, 1, 1},
	{"pixtral", {PRETOK_LLAMA3}, 1, 1},
	{"qwen2", {PRETOK_QWEN2}, 1, 0},
	{"deepseek-r1-qwen", {PRETOK_QWEN2}, 1, 0},
	{"stablelm2", {PRETOK_QWEN2}, 1, 0},
	{"smollm", {PRETOK_DIGIT, PRETOK_GPT2}, 2, 0},
	{"starcoder", {PRETOK_DIGIT, PRETOK_GPT2}, 2, 0},
	{"refact", {PRETOK_DIGIT, PRETOK_GPT2}, 2, 0},
	{"command-r", {PRETOK_DIGIT, PRETOK_GPT2}, 2, 0},
	{"codeshell", {PRETOK_DIGIT, PRETOK_GPT2}, 2, 0},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

// keep in step with known_pre (the tests check it)
const char *
pretok_pre_names(void)
{
	return "default, gpt-2, mpt, olmo, llama-bpe, llama3, llama-v3, falcon3, pixtral, qwen2, "
	       "deepseek-r1-qwen, stablelm2, smollm, starcoder, refact, command-r, codeshell";
}

const char *
pretok_known_name(int n, const char *const **re, const char **unsupported)
{
	if (n < 0 || (size_t)n >= COUNT(pre_names))
		return NULL;
	if (re)
		*re = pre_names[n].re;
	if (unsupported)
		*unsupported = pre_names[n].unsupported;
	return pre_names[n].name;
}

int
pretok_name_flags(const char *pre, struct pretok_flags *f)
{
	for (size_t i = 0; i < COUNT(pre_names); i++)
		if (!strcmp(pre, pre_names[i].name)) {
			const struct pre_name *q = &pre_names[i];
			*f = (struct pretok_flags){q->clean_spaces, q->add_bos, q->escape, q->newline_words,
			                           q->force_bos};
			return 0;
		}
	return -1;
}

int
pretok_init_pre(struct pretok *p, const char *pre, char *err)
{
	return pretok_init_pre_opt(p, pre, 0, err);
}

int
pretok_init_pre_opt(struct pretok *p, const char *pre, int flags, char *err)
{
	memset(p, 0, sizeof *p);
	if (!pre || !*pre)
		pre = "default";
	for (size_t i = 0; !(flags & PRETOK_ENGINE) && i < COUNT(known_pre); i++) {
		if (strcmp(pre, known_pre[i].name))
			continue;
		p->n = known_pre[i].n;
		memcpy(p->rule, known_pre[i].rules, sizeof known_pre[i].rules);
		p->ignore_merges = known_pre[i].ignore_merges;
		return 0;
	}
	for (size_t i = 0; i < COUNT(pre_names); i++) {
		const struct pre_name *q = &pre_names[i];
		if (strcmp(pre, q->name))
			continue;
		if (q->unsupported)
			return ad_err(err, "pre-tokenizer \"%s\" is not supported: it %s", pre, q->unsupported);
		for (const char *const *re = q->re; *re; re++)
			if (pretok_add_regex_opt(p, *re, flags, err)) {
				pretok_free(p);
				return ad_err_prefix(err, "pre-tokenizer \"%s\"", pre);
			}
		p->ignore_merges = q->ignore_merges;
		return 0;
	}
	int more = 0;
	for (size_t i = 0; i < COUNT(pre_names); i++) {
		int hand = 0;
		for (size_t j = 0; j < COUNT(known_pre); j++)
			hand |= !strcmp(pre_names[i].name, known_pre[j].name);
		more += !hand && !pre_names[i].unsupported;
	}
	return ad_err(err, "unsupported pre-tokenizer \"%s\" (supported: %s, and %d more of llama.cpp's names)", pre,
	              pretok_pre_names(), more);
}

int
pretok_add(struct pretok *p, enum pretok_rule r, char *err)
{
	if ((unsigned)r >= PRETOK_N_RULES || r == PRETOK_REGEX)
		return ad_err(err, "unknown pre-tokenizer rule %d", (int)r);
	if (p->n >= PRETOK_MAX_RULES)
		return ad_err(err, "more than %d pre-tokenizer rules", PRETOK_MAX_RULES);
	p->re[p->n] = NULL;
	p->rule[p->n++] = r;
	return 0;
}

struct pretok_re {
	pcre2_code *code;
};

int
pretok_add_regex(struct pretok *p, const char *pattern, char *err)
{
	return pretok_add_regex_opt(p, pattern, 0, err);
}

int
pretok_add_regex_opt(struct pretok *p, const char *pattern, int flags, char *err)
{
	for (size_t i = 0; !(flags & PRETOK_ENGINE) && i < COUNT(known_regex); i++)
		if (!strcmp(pattern, known_regex[i].re))
			return pretok_add(p, known_regex[i].rule, err);
	if (p->n >= PRETOK_MAX_RULES)
		return ad_err(err, "more than %d pre-tokenizer rules", PRETOK_MAX_RULES);
	// the pattern is UTF-8; the subject will be the text's code points.
	// Compiled in the 32-bit library from the pattern's code points.
	size_t len = strlen(pattern), n = 0;
	uint32_t *cp = malloc((len + 1) * sizeof *cp);
	if (!cp)
		return ad_err(err, "pre-tokenizer: out of memory");
	for (size_t i = 0; i < len;) {
		int bad = 0;
		i += (size_t)unicode_decode(pattern + i, len - i, &cp[n++], &bad);
		if (bad) {
			free(cp);
			return ad_err(err, "pre-tokenizer regex \"%.200s\" is not valid UTF-8", pattern);
		}
	}
	int ec;
	PCRE2_SIZE eoff;
	// UCP: \s, \d, \w and the POSIX classes are Unicode's. $ is the end
	// of the text only, as in llama.cpp's std::regex (ECMAScript)
	pcre2_code *code =
		pcre2_compile((PCRE2_SPTR)cp, n, PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eoff, NULL);
	free(cp);
	if (!code) {
		PCRE2_UCHAR msg[256];
		char m8[256];
		int k = pcre2_get_error_message(ec, msg, sizeof msg / sizeof msg[0]);
		size_t j = 0;
		for (int i = 0; i < k && j + 1 < sizeof m8; i++)
			m8[j++] = msg[i] < 128 ? (char)msg[i] : '?';
		m8[j] = 0;
		return ad_err(err, "unsupported pre-tokenizer regex \"%.200s\": %s at character %zu", pattern, m8,
		              (size_t)eoff);
	}
	pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); // the interpreter runs what JIT cannot
	struct pretok_re *r = malloc(sizeof *r);
	if (!r) {
		pcre2_code_free(code);
		return ad_err(err, "pre-tokenizer: out of memory");
	}
	r->code = code;
	p->re[p->n] = r;
	p->rule[p->n++] = PRETOK_REGEX;
	return 0;
}

void
pretok_free(struct pretok *p)
{
	for (int i = 0; i < p->n; i++)
		if (p->re[i]) {
			pcre2_code_free(p->re[i]->code);
			free(p->re[i]);
			p->re[i] = NULL;
		}
	p->n = 0;
}

// --- matchers ------------------------------------------------------------------
struct text {
	const uint32_t *cp;
	const uint16_t *fl;
};

static inline int
is_other(uint16_t f) // [^\s\p{L}\p{N}]
{
	return !(f & (WS_ | L_ | N_));
}

static inline uint32_t
run(const uint16_t *fl, uint32_t i, uint32_t e, uint16_t any) // flags & any
{
	while (i < e && (fl[i] & any))
		i++;
	return i;
}

static inline uint32_t
run_other(const uint16_t *fl, uint32_t i, uint32_t e)
{
	while (i < e && is_other(fl[i]))
		i++;
	return i;
}

static inline int
is_crlf(uint32_t c)
{
	return c == '\r' || c == '\n';
}

// 's 't 're 've 'm 'll 'd at i; fold: case-insensitive
static uint32_t
contraction(const uint32_t *cp, uint32_t i, uint32_t e, int fold)
{
	if (cp[i] != '\'' || i + 1 >= e)
		return 0;
	uint32_t a = cp[i + 1], b = i + 2 < e ? cp[i + 2] : 0;
	if (fold) {
		// simple case folding; U+017F (long s) folds to s
		a = a == 0x17F ? 's' : unicode_tolower(a);
		b = b == 0x17F ? 's' : unicode_tolower(b);
	}
	if (a == 's' || a == 't' || a == 'm' || a == 'd')
		return 2;
	if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
		return 3;
	return 0;
}

// \s+(?!\S)|\s+ at a whitespace code point i
static uint32_t
spaces(const uint16_t *fl, uint32_t i, uint32_t e)
{
	uint32_t j = run(fl, i, e, WS_);
	if (j < e && j - i >= 2)
		return j - 1 - i; // leave the last space to the next word
	return j - i;
}

static uint32_t
match_gpt2(struct text t, uint32_t i, uint32_t e)
{
	uint32_t n = contraction(t.cp, i, e, 0);
	if (n)
		return n;
	uint32_t k = t.cp[i] == ' ' && i + 1 < e ? i + 1 : i; // " ?"
	uint16_t f = t.fl[k];
	if (f & L_)
		return run(t.fl, k, e, L_) - i;
	if (f & N_)
		return run(t.fl, k, e, N_) - i;
	if (is_other(f))
		return run_other(t.fl, k, e) - i;
	return spaces(t.fl, i, e);
}

static uint32_t
match_llama3(struct text t, uint32_t i, uint32_t e, uint32_t max_digits)
{
	uint32_t c = t.cp[i];
	uint16_t f = t.fl[i];
	uint32_t n = contraction(t.cp, i, e, 1);
	if (n)
		return n;
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if (!(f & (L_ | N_)) && !is_crlf(c) && i + 1 < e && (t.fl[i + 1] & L_))
		return run(t.fl, i + 1, e, L_) - i;
	if (f & L_)
		return run(t.fl, i, e, L_) - i;
	// \p{N}{1,3}
	if (f & N_) {
		uint32_t j = i + 1;
		while (j < e && j - i < max_digits && (t.fl[j] & N_))
			j++;
		return j - i;
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	uint32_t k = c == ' ' && i + 1 < e && is_other(t.fl[i + 1]) ? i + 1 : i;
	if (is_other(t.fl[k])) {
		uint32_t j = run_other(t.fl, k, e);
		while (j < e && is_crlf(t.cp[j]))
			j++;
		return j - i;
	}
	// \s*[\r\n]+ : up to and including the last \r or \n of the space run
	uint32_t j = run(t.fl, i, e, WS_);
	for (uint32_t m = j; m > i; m--)
		if (is_crlf(t.cp[m - 1]))
			return m - i;
	return spaces(t.fl, i, e);
}

static int
is_punct_class(uint32_t c, uint16_t f) // [\p{P}\$\+<=>\^~\|]
{
	return (f & UNICODE_PUNCTUATION) || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' ||
	       c == '~' || c == '|';
}

static uint32_t
match(enum pretok_rule r, struct text t, uint32_t i, uint32_t e)
{
	switch (r) {
	case PRETOK_GPT2:
		return match_gpt2(t, i, e);
	case PRETOK_LLAMA3:
		return match_llama3(t, i, e, 3);
	case PRETOK_QWEN2:
		return match_llama3(t, i, e, 1);
	case PRETOK_DIGIT:
		return (t.fl[i] & N_) ? 1 : 0;
	case PRETOK_NUMBERS:
		return run(t.fl, i, e, N_) - i;
	case PRETOK_PUNCT: {
		uint32_t j = i;
		while (j < e && is_punct_class(t.cp[j], t.fl[j]))
			j++;
		return j - i;
	}
	case PRETOK_DIGIT3:
		if (i + 3 <= e) {
			for (uint32_t j = i; j < i + 3; j++)
				if (t.cp[j] < '0' || t.cp[j] > '9')
					return 0;
			return 3;
		}
		return 0;
	default:
		return 0;
	}
}

// --- split ------------------------------------------------------------------------
static int
push(struct pretok_piece **v, size_t *n, size_t *cap, uint32_t off, uint32_t len)
{
	if (ad_grow(v, cap, *n + 1, sizeof **v, 64))
		return -1;
	(*v)[(*n)++] = (struct pretok_piece){off, len};
	return 0;
}

// a PCRE2 rule over every piece of o->v into o->tmp[0..*tn): find-all on
// the piece's code points alone (no lookaround sees past it), an empty match
// skipped, the text between matches a piece of its own
#define MATCH_LIMIT 10000000 // a guard against a pattern that backtracks without end

static int
split_regex(const struct pretok_re *re, struct pretok_out *o, size_t *tn, char *err)
{
	if (!o->md) {
		o->md = pcre2_match_data_create(1, NULL);
		o->mctx = pcre2_match_context_create(NULL);
		o->jit = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
		if (!o->md || !o->mctx || !o->jit)
			return ad_err(err, "pre-tokenizer: out of memory");
		pcre2_jit_stack_assign(o->mctx, NULL, o->jit);
		pcre2_set_match_limit(o->mctx, MATCH_LIMIT);
	}
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(o->md);
	for (size_t k = 0; k < o->n; k++) {
		uint32_t s = o->v[k].off, e = s + o->v[k].len, gap = s;
		PCRE2_SPTR sub = (PCRE2_SPTR)(o->cp + s);
		PCRE2_SIZE at = 0, n = e - s;
		while (at < n) {
			// the code points are valid: the decoder made every bad byte U+FFFD
			int rc = pcre2_match(re->code, sub, n, at, PCRE2_NO_UTF_CHECK, o->md, o->mctx);
			if (rc == PCRE2_ERROR_NOMATCH)
				break;
			if (rc < 0) // (0: the ovector is short for the groups; the match stands)
				return ad_err(err, "pre-tokenizer: regex match failed (PCRE2 error %d)", rc);
			PCRE2_SIZE m0 = ov[0], m1 = ov[1];
			if (m1 <= m0) { // empty: find-all moves on
				at = m0 + 1;
				continue;
			}
			if (s + m0 > gap && push(&o->tmp, tn, &o->tmp_cap, gap, s + (uint32_t)m0 - gap))
				return ad_err(err, "pre-tokenizer: out of memory");
			if (push(&o->tmp, tn, &o->tmp_cap, s + (uint32_t)m0, (uint32_t)(m1 - m0)))
				return ad_err(err, "pre-tokenizer: out of memory");
			gap = s + (uint32_t)m1;
			at = m1;
		}
		if (gap < e && push(&o->tmp, tn, &o->tmp_cap, gap, e - gap))
			return ad_err(err, "pre-tokenizer: out of memory");
	}
	return 0;
}

int
pretok_split(const struct pretok *p, const char *text, size_t len, struct pretok_out *o, char *err)
{
	o->n = 0;
	if (len == 0)
		return 0;
	if (len >= UINT32_MAX)
		return ad_err(err, "pre-tokenizer: text of %zu bytes is too long", len);
	if (len + 1 > o->cp_cap) {
		// cp, boff and flags share one capacity
		size_t cap = len + 1;
		uint32_t *c = realloc(o->cp, cap * sizeof *c);
		if (c)
			o->cp = c;
		uint32_t *b = realloc(o->boff, cap * sizeof *b);
		if (b)
			o->boff = b;
		uint16_t *f = realloc(o->flags, cap * sizeof *f);
		if (f)
			o->flags = f;
		if (!c || !b || !f)
			return ad_err(err, "pre-tokenizer: out of memory");
		o->cp_cap = cap;
	}
	uint32_t n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t c;
		int step = unicode_decode(text + i, len - i, &c, NULL);
		o->cp[n] = c;
		o->flags[n] = unicode_flags(c);
		o->boff[n++] = (uint32_t)i;
		i += (size_t)step;
	}
	o->boff[n] = (uint32_t)len;

	struct text t = {o->cp, o->flags};
	// pieces in code point units; the first rule sees the whole text
	o->n = 0;
	if (push(&o->v, &o->n, &o->cap, 0, n))
		goto oom;
	for (int r = 0; r < p->n; r++) {
		size_t tn = 0;
		if (p->rule[r] == PRETOK_REGEX) {
			if (split_regex(p->re[r], o, &tn, err)) {
				o->n = 0;
				return -1;
			}
			goto next;
		}
		for (size_t k = 0; k < o->n; k++) {
			uint32_t s = o->v[k].off, e = s + o->v[k].len, gap = s;
			for (uint32_t i = s; i < e;) {
				uint32_t m = match(p->rule[r], t, i, e);
				if (!m) {
					i++;
					continue;
				}
				if (gap < i && push(&o->tmp, &tn, &o->tmp_cap, gap, i - gap))
					goto oom;
				if (push(&o->tmp, &tn, &o->tmp_cap, i, m))
					goto oom;
				i += m;
				gap = i;
			}
			if (gap < e && push(&o->tmp, &tn, &o->tmp_cap, gap, e - gap))
				goto oom;
		}
next:;
		struct pretok_piece *sw = o->v;
		size_t swc = o->cap;
		o->v = o->tmp, o->cap = o->tmp_cap, o->n = tn;
		o->tmp = sw, o->tmp_cap = swc;
	}
	// to bytes
	for (size_t k = 0; k < o->n; k++) {
		uint32_t s = o->v[k].off, e = s + o->v[k].len;
		o->v[k].off = o->boff[s];
		o->v[k].len = o->boff[e] - o->boff[s];
	}
	return 0;
oom:
	o->n = 0;
	return ad_err(err, "pre-tokenizer: out of memory");
}

void
pretok_out_free(struct pretok_out *o)
{
	free(o->v);
	free(o->tmp);
	free(o->cp);
	free(o->boff);
	free(o->flags);
	pcre2_match_data_free(o->md);
	pcre2_match_context_free(o->mctx);
	pcre2_jit_stack_free(o->jit);
	memset(o, 0, sizeof *o);
}
