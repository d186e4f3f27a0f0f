// hfpipe.c - tokenizer.json normalizers and pre-tokenizers (hfpipe.h).
//
// Both are lists of steps, a Sequence flattened into its parent. A
// normalizer step maps a string to a string; a pre-tokenizer step maps a
// list of pieces to a new list (each piece alone, as the library's
// PreTokenizedString::split does), so Metaspace may rewrite its pieces.
#define _GNU_SOURCE
#include "hfpipe.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>

#include "err.h"
#include "unicode.h"

// --- growable byte strings ------------------------------------------------------

struct sbuf {
	char *p;
	size_t n, cap;
};

static int
sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p)
			return -1;
		b->p = p;
		b->cap = cap;
	}
	if (n) {
		memcpy(b->p + b->n, s, n);
		b->n += n;
	}
	b->p[b->n] = 0;
	return 0;
}

static int
sb_cp(struct sbuf *b, uint32_t cp)
{
	char u[4];
	int k = unicode_encode(cp, u);
	return k > 0 && k <= 4 ? sb_put(b, u, (size_t)k) : 0;
}

// --- patterns (Replace, Split) ------------------------------------------------------

// a String pattern (literal) or a Regex one (PCRE2 on code points)
struct pattern {
	char *lit; // the literal, or NULL
	size_t lit_n;
	pcre2_code *re;
	pcre2_match_data *md;
};

static void
pattern_free(struct pattern *p)
{
	free(p->lit);
	if (p->md)
		pcre2_match_data_free(p->md);
	if (p->re)
		pcre2_code_free(p->re);
}

static int
pattern_parse(const cJSON *j, struct pattern *p, const char *what, char *err)
{
	memset(p, 0, sizeof *p);
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "String");
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "Regex");
	if (cJSON_IsString(s)) {
		p->lit_n = strlen(s->valuestring);
		if (!p->lit_n)
			return ad_err(err, "%s: an empty String pattern", what);
		if (!(p->lit = strdup(s->valuestring)))
			return ad_err(err, "out of memory");
		return 0;
	}
	if (!cJSON_IsString(r))
		return ad_err(err, "%s: pattern is neither {\"String\": ...} nor {\"Regex\": ...}", what);
	// the pattern as code points
	size_t n = strlen(r->valuestring), m = 0;
	PCRE2_UCHAR32 *cps = malloc((n + 1) * sizeof *cps);
	if (!cps)
		return ad_err(err, "out of memory");
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		i += (size_t)unicode_decode(r->valuestring + i, n - i, &cp, NULL);
		cps[m++] = cp;
	}
	int ec;
	PCRE2_SIZE eo;
	p->re = pcre2_compile(cps, m, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
	free(cps);
	if (!p->re) {
		PCRE2_UCHAR32 msg[128];
		char m8[128];
		int k = pcre2_get_error_message(ec, msg, 128);
		for (int i = 0; i < k && i < 127; i++)
			m8[i] = msg[i] < 128 ? (char)msg[i] : '?';
		m8[k > 0 && k < 127 ? k : 0] = 0;
		return ad_err(err, "%s: regex \"%.64s\": %s at %zu", what, r->valuestring, m8, (size_t)eo);
	}
	pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE); // the interpreter if it fails
	if (!(p->md = pcre2_match_data_create_from_pattern(p->re, NULL)))
		return ad_err(err, "out of memory");
	return 0;
}

// the matches of p in s[0..n): each as a byte range, into *m (pairs)
static int
pattern_find(const struct pattern *p, const char *s, size_t n, size_t **m, size_t *nm)
{
	size_t cap = 0;
	*m = NULL;
	*nm = 0;
#define PUSH(a, b)                                                                                                     \
	do {                                                                                                           \
		if (*nm + 2 > cap) {                                                                                   \
			cap = cap ? 2 * cap : 16;                                                                      \
			size_t *q = realloc(*m, cap * sizeof *q);                                                      \
			if (!q)                                                                                        \
				return -1;                                                                             \
			*m = q;                                                                                        \
		}                                                                                                      \
		(*m)[(*nm)++] = (a);                                                                                   \
		(*m)[(*nm)++] = (b);                                                                                   \
	} while (0)
	if (p->lit) {
		for (size_t i = 0; i + p->lit_n <= n;) {
			const char *h = memmem(s + i, n - i, p->lit, p->lit_n);
			if (!h)
				break;
			size_t at = (size_t)(h - s);
			PUSH(at, at + p->lit_n);
			i = at + p->lit_n;
		}
		*nm /= 2;
		return 0;
	}
	// decode, keeping each code point's byte offset
	PCRE2_UCHAR32 *cps = malloc((n + 1) * sizeof *cps);
	size_t *boff = malloc((n + 1) * sizeof *boff);
	if (!cps || !boff) {
		free(cps);
		free(boff);
		return -1;
	}
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		boff[k] = i;
		i += (size_t)unicode_decode(s + i, n - i, &cp, NULL);
		cps[k++] = cp;
	}
	boff[k] = n;
	PCRE2_SIZE at = 0;
	while (at <= k) {
		int rc = pcre2_match(p->re, cps, k, at, 0, p->md, NULL);
		if (rc < 0)
			break;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
		if (ov[1] == ov[0]) { // an empty match: the library skips it
			at = ov[0] + 1;
			continue;
		}
		if (*nm + 2 > cap) {
			cap = cap ? 2 * cap : 16;
			size_t *q = realloc(*m, cap * sizeof *q);
			if (!q) {
				free(cps);
				free(boff);
				return -1;
			}
			*m = q;
		}
		(*m)[(*nm)++] = boff[ov[0]];
		(*m)[(*nm)++] = boff[ov[1]];
		at = ov[1];
	}
#undef PUSH
	free(cps);
	free(boff);
	*nm /= 2;
	return 0;
}

// --- normalizers ---------------------------------------------------------------------

enum norm_kind { N_NFC, N_NFKC, N_NFD, N_NFKD, N_LOWER, N_STRIP, N_STRIP_ACCENTS, N_REPLACE, N_PREPEND };

struct norm_step {
	enum norm_kind kind;
	int left, right;    // Strip
	struct pattern pat; // Replace
	char *str;          // Replace: content; Prepend: prepend
};

struct hf_norm {
	struct norm_step *v;
	int n, cap;
};

void
hf_norm_free(struct hf_norm *n)
{
	if (!n)
		return;
	for (int i = 0; i < n->n; i++) {
		pattern_free(&n->v[i].pat);
		free(n->v[i].str);
	}
	free(n->v);
	free(n);
}

static struct norm_step *
norm_add(struct hf_norm *n, enum norm_kind k)
{
	if (n->n == n->cap) {
		int cap = n->cap ? 2 * n->cap : 8;
		struct norm_step *v = realloc(n->v, (size_t)cap * sizeof *v);
		if (!v)
			return NULL;
		n->v = v;
		n->cap = cap;
	}
	struct norm_step *s = &n->v[n->n++];
	memset(s, 0, sizeof *s);
	s->kind = k;
	return s;
}

static const char *
jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int
norm_parse_into(struct hf_norm *n, const cJSON *j, char *err)
{
	const char *type = jstr(j, "type");
	if (!type)
		return ad_err(err, "normalizer without a type");
	if (!strcmp(type, "Sequence")) {
		const cJSON *it;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "normalizers"))
		{
			if (norm_parse_into(n, it, err))
				return -1;
		}
		return 0;
	}
	static const struct {
		const char *name;
		enum norm_kind kind;
	} simple[] = {
		{"NFC", N_NFC},   {"NFKC", N_NFKC},       {"NFD", N_NFD},
		{"NFKD", N_NFKD}, {"Lowercase", N_LOWER}, {"StripAccents", N_STRIP_ACCENTS},
	};
	for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
		if (!strcmp(type, simple[i].name))
			return norm_add(n, simple[i].kind) ? 0 : ad_err(err, "out of memory");
	struct norm_step *s;
	if (!strcmp(type, "Strip")) {
		if (!(s = norm_add(n, N_STRIP)))
			return ad_err(err, "out of memory");
		s->left = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "strip_left"));
		s->right = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "strip_right"));
		return 0;
	}
	if (!strcmp(type, "Replace")) {
		const char *content = jstr(j, "content");
		if (!content)
			return ad_err(err, "Replace normalizer without a content string");
		if (!(s = norm_add(n, N_REPLACE)) || !(s->str = strdup(content)))
			return ad_err(err, "out of memory");
		return pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), &s->pat, "Replace normalizer",
		                     err);
	}
	if (!strcmp(type, "Prepend")) {
		const char *p = jstr(j, "prepend");
		if (!p)
			return ad_err(err, "Prepend normalizer without a prepend string");
		if (!(s = norm_add(n, N_PREPEND)) || !(s->str = strdup(p)))
			return ad_err(err, "out of memory");
		return 0;
	}
	if (!strcmp(type, "Precompiled")) {
		const cJSON *cm = cJSON_GetObjectItemCaseSensitive(j, "precompiled_charsmap");
		if (!cm || cJSON_IsNull(cm) || (cJSON_IsString(cm) && !cm->valuestring[0]))
			return 0; // an empty charsmap changes nothing
		return ad_err(err, "the Precompiled normalizer (SentencePiece's charsmap) is not supported");
	}
	return ad_err(err,
	              "normalizer %s is not supported (NFC, NFKC, NFD, NFKD, Lowercase, Strip, StripAccents, "
	              "Replace, Prepend, Sequence)",
	              type);
}

int
hf_norm_parse(const cJSON *j, struct hf_norm **out, char *err)
{
	*out = NULL;
	if (!j || cJSON_IsNull(j))
		return 0;
	struct hf_norm *n = calloc(1, sizeof *n);
	if (!n)
		return ad_err(err, "out of memory");
	if (norm_parse_into(n, j, err)) {
		hf_norm_free(n);
		return -1;
	}
	*out = n;
	return 0;
}

int
hf_norm_prepends(const struct hf_norm *n, const char *p)
{
	for (int i = 0; n && i < n->n; i++)
		if (n->v[i].kind == N_PREPEND && !strcmp(n->v[i].str, p))
			return 1;
	return 0;
}

static int
is_ws(uint32_t cp)
{
	return (unicode_flags(cp) & UNICODE_WHITESPACE) != 0;
}

static int
norm_step(const struct norm_step *st, const char *s, size_t n, struct sbuf *o)
{
	switch (st->kind) {
	case N_NFC:
	case N_NFKC:
	case N_NFD:
	case N_NFKD: {
		size_t m;
		char *r = st->kind == N_NFC    ? unicode_nfc(s, n, &m)
		          : st->kind == N_NFKC ? unicode_nfkc(s, n, &m)
		          : st->kind == N_NFD  ? unicode_nfd(s, n, &m)
		                               : unicode_nfkd(s, n, &m);
		if (!r)
			return -1;
		int rc = sb_put(o, r, m);
		free(r);
		return rc;
	}
	case N_LOWER:
	case N_STRIP_ACCENTS:
		for (size_t i = 0; i < n;) {
			uint32_t cp;
			int bad = 0;
			int k = unicode_decode(s + i, n - i, &cp, &bad);
			int rc = 0;
			if (bad)
				rc = sb_put(o, s + i, 1);
			else if (st->kind == N_LOWER)
				rc = sb_cp(o, unicode_tolower(cp));
			else if (!(unicode_flags(cp) & UNICODE_MARK))
				rc = sb_put(o, s + i, (size_t)k);
			if (rc)
				return -1;
			i += (size_t)k;
		}
		return 0;
	case N_STRIP: {
		size_t a = 0, b = n;
		while (st->left && a < b) {
			uint32_t cp;
			int k = unicode_decode(s + a, b - a, &cp, NULL);
			if (!is_ws(cp))
				break;
			a += (size_t)k;
		}
		while (st->right && b > a) {
			size_t c = b - 1;
			while (c > a && ((unsigned char)s[c] & 0xC0) == 0x80)
				c--;
			uint32_t cp;
			unicode_decode(s + c, b - c, &cp, NULL);
			if (!is_ws(cp))
				break;
			b = c;
		}
		return sb_put(o, s + a, b - a);
	}
	case N_REPLACE: {
		size_t *m, nm;
		if (pattern_find(&st->pat, s, n, &m, &nm))
			return -1;
		size_t at = 0;
		int rc = 0;
		for (size_t i = 0; i < nm && !rc; i++) {
			rc = sb_put(o, s + at, m[2 * i] - at) || sb_put(o, st->str, strlen(st->str));
			at = m[2 * i + 1];
		}
		free(m);
		return rc || sb_put(o, s + at, n - at);
	}
	case N_PREPEND:
		if (n && sb_put(o, st->str, strlen(st->str)))
			return -1;
		return sb_put(o, s, n);
	}
	return -1;
}

int
hf_norm_apply(const struct hf_norm *n, const char *s, size_t len, char **out, size_t *out_len, char *err)
{
	struct sbuf a = {0};
	if (sb_put(&a, s, len))
		goto oom;
	for (int i = 0; n && i < n->n; i++) {
		struct sbuf b = {0};
		if (sb_put(&b, "", 0) || norm_step(&n->v[i], a.p, a.n, &b)) {
			free(b.p);
			goto oom;
		}
		free(a.p);
		a = b;
	}
	*out = a.p;
	*out_len = a.n;
	return 0;
oom:
	free(a.p);
	return ad_err(err, "tokenizer: out of memory");
}

// --- pieces --------------------------------------------------------------------------

void
hf_pieces_free(struct hf_pieces *p)
{
	free(p->buf);
	free(p->off);
	free(p->len);
	free(p->first);
	memset(p, 0, sizeof *p);
}

static void
pieces_clear(struct hf_pieces *p)
{
	p->used = 0;
	p->n = 0;
}

// append a piece made of s[0..n) (copied); first: it starts the input
static int
piece_add(struct hf_pieces *p, const char *s, size_t n, int first)
{
	if (!n)
		return 0; // the library drops empty pieces
	if (p->n == p->ncap) {
		size_t cap = p->ncap ? 2 * p->ncap : 16;
		size_t *o = realloc(p->off, cap * sizeof *o);
		if (o)
			p->off = o;
		size_t *l = o ? realloc(p->len, cap * sizeof *l) : NULL;
		if (l)
			p->len = l;
		unsigned char *f = l ? realloc(p->first, cap) : NULL;
		if (!f)
			return -1;
		p->first = f;
		p->ncap = cap;
	}
	p->first[p->n] = (unsigned char)first;
	if (p->used + n > p->cap) {
		size_t cap = p->cap ? p->cap : 256;
		while (cap < p->used + n)
			cap *= 2;
		char *b = realloc(p->buf, cap);
		if (!b)
			return -1;
		p->buf = b;
		p->cap = cap;
	}
	memcpy(p->buf + p->used, s, n);
	p->off[p->n] = p->used;
	p->len[p->n++] = n;
	p->used += n;
	return 0;
}

// --- pre-tokenizers --------------------------------------------------------------------

enum pre_kind { P_WHITESPACE, P_WS_SPLIT, P_METASPACE, P_PUNCT, P_DIGITS, P_SPLIT };

// SplitDelimiterBehavior
enum behavior { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS };

enum prepend { PS_ALWAYS, PS_FIRST, PS_NEVER };

struct pre_step {
	enum pre_kind kind;
	enum behavior behavior;
	char rep[8]; // Metaspace: the replacement (UTF-8)
	size_t rep_n;
	enum prepend scheme;
	int split;  // Metaspace
	int each;   // Digits: individual_digits
	int invert; // Split
	struct pattern pat;
};

struct hf_pretok {
	struct pre_step *v;
	int n, cap;
};

void
hf_pretok_free(struct hf_pretok *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n; i++)
		pattern_free(&p->v[i].pat);
	free(p->v);
	free(p);
}

static struct pre_step *
pre_add(struct hf_pretok *p, enum pre_kind k)
{
	if (p->n == p->cap) {
		int cap = p->cap ? 2 * p->cap : 8;
		struct pre_step *v = realloc(p->v, (size_t)cap * sizeof *v);
		if (!v)
			return NULL;
		p->v = v;
		p->cap = cap;
	}
	struct pre_step *s = &p->v[p->n++];
	memset(s, 0, sizeof *s);
	s->kind = k;
	return s;
}

static int
behavior_parse(const cJSON *j, enum behavior def, enum behavior *out, char *err)
{
	const char *b = jstr(j, "behavior");
	*out = def;
	if (!b)
		return 0;
	static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
	for (int i = 0; i < 5; i++)
		if (!strcmp(b, names[i])) {
			*out = (enum behavior)i;
			return 0;
		}
	return ad_err(err, "split behavior %.32s is not known", b);
}

static int
pre_parse_into(struct hf_pretok *p, const cJSON *j, char *err)
{
	const char *type = jstr(j, "type");
	if (!type)
		return ad_err(err, "pre_tokenizer without a type");
	struct pre_step *s;
	if (!strcmp(type, "Sequence")) {
		const cJSON *it;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "pretokenizers"))
		{
			if (pre_parse_into(p, it, err))
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "Whitespace") || !strcmp(type, "WhitespaceSplit"))
		return pre_add(p, type[10] ? P_WS_SPLIT : P_WHITESPACE) ? 0 : ad_err(err, "out of memory");
	if (!strcmp(type, "Metaspace")) {
		if (!(s = pre_add(p, P_METASPACE)))
			return ad_err(err, "out of memory");
		const char *rep = jstr(j, "replacement");
		if (!rep)
			rep = "\xe2\x96\x81";
		uint32_t cp;
		s->rep_n = strlen(rep);
		if (!s->rep_n || s->rep_n > 4 || unicode_decode(rep, s->rep_n, &cp, NULL) != (int)s->rep_n)
			return ad_err(err, "Metaspace: the replacement must be one character");
		memcpy(s->rep, rep, s->rep_n);
		const char *scheme = jstr(j, "prepend_scheme");
		const cJSON *aps = cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space");
		if (scheme && !strcmp(scheme, "always"))
			s->scheme = PS_ALWAYS;
		else if (scheme && !strcmp(scheme, "first"))
			s->scheme = PS_FIRST;
		else if (scheme && !strcmp(scheme, "never"))
			s->scheme = PS_NEVER;
		else if (scheme)
			return ad_err(err, "Metaspace: prepend_scheme %.32s (always, first, never)", scheme);
		else // older files: add_prefix_space, true by default
			s->scheme = cJSON_IsFalse(aps) ? PS_NEVER : PS_ALWAYS;
		s->split = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "split"));
		return 0;
	}
	if (!strcmp(type, "Punctuation")) {
		if (!(s = pre_add(p, P_PUNCT)))
			return ad_err(err, "out of memory");
		return behavior_parse(j, B_ISOLATED, &s->behavior, err);
	}
	if (!strcmp(type, "Digits")) {
		if (!(s = pre_add(p, P_DIGITS)))
			return ad_err(err, "out of memory");
		s->each = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "individual_digits"));
		s->behavior = s->each ? B_ISOLATED : B_CONTIGUOUS;
		return 0;
	}
	if (!strcmp(type, "Split")) {
		if (!(s = pre_add(p, P_SPLIT)))
			return ad_err(err, "out of memory");
		s->invert = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "invert"));
		if (behavior_parse(j, B_REMOVED, &s->behavior, err))
			return -1;
		return pattern_parse(cJSON_GetObjectItemCaseSensitive(j, "pattern"), &s->pat, "Split pre_tokenizer",
		                     err);
	}
	return ad_err(err,
	              "pre_tokenizer %s is not supported here (Whitespace, WhitespaceSplit, Metaspace, Punctuation, "
	              "Digits, Split, Sequence)",
	              type);
}

int
hf_pretok_parse(const cJSON *j, struct hf_pretok **out, char *err)
{
	*out = NULL;
	if (!j || cJSON_IsNull(j))
		return 0;
	struct hf_pretok *p = calloc(1, sizeof *p);
	if (!p)
		return ad_err(err, "out of memory");
	if (pre_parse_into(p, j, err)) {
		hf_pretok_free(p);
		return -1;
	}
	*out = p;
	return 0;
}

int
hf_pretok_prepends(const struct hf_pretok *p)
{
	for (int i = 0; p && i < p->n; i++)
		if (p->v[i].kind == P_METASPACE && p->v[i].scheme != PS_NEVER)
			return 1;
	return 0;
}

// the word characters of Whitespace's \w
static int
is_word(uint32_t cp)
{
	if (cp == '_' || cp == 0x203F || cp == 0x2040 || cp == 0x2054 || cp == 0xFE33 || cp == 0xFE34 ||
	    (cp >= 0xFE4D && cp <= 0xFE4F) || cp == 0xFF3F || cp == 0x200C || cp == 0x200D)
		return 1;
	return (unicode_flags(cp) & (UNICODE_LETTER | UNICODE_MARK | UNICODE_NUMBER)) != 0;
}

static int
is_punct(uint32_t cp)
{
	if (cp < 128)
		return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
		       (cp >= 123 && cp <= 126);
	return (unicode_flags(cp) & UNICODE_PUNCTUATION) != 0;
}

// split s[0..n) at the matches m (nm byte ranges), each match treated by
// behavior as the library's split does
static int
split_by(const char *s, size_t n, const size_t *m, size_t nm, enum behavior b, int first, struct hf_pieces *out)
{
#define ADD(from, len) piece_add(out, s + (from), (len), first && (from) == 0)
	size_t at = 0;
	size_t pend = (size_t)-1; // MergedWithNext: start of the match waiting for what follows
	for (size_t i = 0; i < nm; i++) {
		size_t a = m[2 * i], e = m[2 * i + 1];
		switch (b) {
		case B_REMOVED:
			if (ADD(at, a - at))
				return -1;
			break;
		case B_ISOLATED:
			if (ADD(at, a - at) || ADD(a, e - a))
				return -1;
			break;
		case B_MERGED_PREV:
			if (ADD(at, e - at))
				return -1;
			break;
		case B_MERGED_NEXT: {
			size_t from = pend != (size_t)-1 ? pend : at;
			if (ADD(from, a - from))
				return -1;
			pend = a;
			break;
		}
		case B_CONTIGUOUS:
			// runs of adjacent matches are one piece (the caller merged them)
			if (ADD(at, a - at) || ADD(a, e - a))
				return -1;
			break;
		}
		at = e;
	}
	if (b == B_MERGED_NEXT && pend != (size_t)-1)
		return ADD(pend, n - pend);
	return ADD(at, n - at);
#undef ADD
}

// the matches of a character class, one per character or one per run
static int
class_matches(const char *s, size_t n, int (*is)(uint32_t), int runs, size_t **m, size_t *nm)
{
	size_t cap = 16;
	*nm = 0;
	if (!(*m = malloc(cap * sizeof **m)))
		return -1;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int k = unicode_decode(s + i, n - i, &cp, NULL);
		if (!is(cp)) {
			i += (size_t)k;
			continue;
		}
		size_t a = i;
		i += (size_t)k;
		while (runs && i < n) {
			k = unicode_decode(s + i, n - i, &cp, NULL);
			if (!is(cp))
				break;
			i += (size_t)k;
		}
		if (2 * *nm + 2 > cap) {
			cap *= 2;
			size_t *q = realloc(*m, cap * sizeof *q);
			if (!q)
				return -1;
			*m = q;
		}
		(*m)[2 * *nm] = a;
		(*m)[2 * *nm + 1] = i;
		(*nm)++;
	}
	return 0;
}

static int
is_digit(uint32_t cp)
{
	return (unicode_flags(cp) & UNICODE_NUMBER) != 0;
}

// Whitespace: \w+|[^\w\s]+, whitespace dropped
static int
whitespace_split(const char *s, size_t n, int words, int first, struct hf_pieces *out)
{
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int k = unicode_decode(s + i, n - i, &cp, NULL);
		if (is_ws(cp)) {
			i += (size_t)k;
			continue;
		}
		size_t a = i;
		int w = words && is_word(cp);
		i += (size_t)k;
		while (i < n) {
			k = unicode_decode(s + i, n - i, &cp, NULL);
			if (is_ws(cp) || (words && is_word(cp) != w))
				break;
			i += (size_t)k;
		}
		if (piece_add(out, s + a, i - a, first && a == 0))
			return -1;
	}
	return 0;
}

static int
pre_step(const struct pre_step *st, const char *s, size_t n, int first, struct hf_pieces *out)
{
	size_t *m = NULL, nm = 0;
	int rc = 0;
	switch (st->kind) {
	case P_WHITESPACE:
	case P_WS_SPLIT:
		return whitespace_split(s, n, st->kind == P_WHITESPACE, first, out);
	case P_METASPACE: {
		// spaces become the replacement, then maybe one in front
		struct sbuf b = {0};
		if (sb_put(&b, "", 0))
			return -1;
		for (size_t i = 0; i < n && !rc; i++)
			rc = s[i] == ' ' ? sb_put(&b, st->rep, st->rep_n) : sb_put(&b, s + i, 1);
		int starts = b.n >= st->rep_n && !memcmp(b.p, st->rep, st->rep_n);
		if (!rc && !starts && (st->scheme == PS_ALWAYS || (st->scheme == PS_FIRST && first))) {
			struct sbuf c = {0};
			rc = sb_put(&c, st->rep, st->rep_n) || sb_put(&c, b.p, b.n);
			free(b.p);
			b = c;
		}
		if (!rc && st->split) {
			struct pattern lit = {.lit = (char *)st->rep, .lit_n = st->rep_n};
			rc = pattern_find(&lit, b.p, b.n, &m, &nm) ||
			     split_by(b.p, b.n, m, nm, B_MERGED_NEXT, first, out);
		} else if (!rc) {
			rc = piece_add(out, b.p, b.n, first);
		}
		free(b.p);
		free(m);
		return rc;
	}
	case P_PUNCT:
		rc = class_matches(s, n, is_punct, st->behavior == B_CONTIGUOUS, &m, &nm) ||
		     split_by(s, n, m, nm, st->behavior, first, out);
		break;
	case P_DIGITS:
		rc = class_matches(s, n, is_digit, !st->each, &m, &nm) ||
		     split_by(s, n, m, nm, st->behavior, first, out);
		break;
	case P_SPLIT:
		if (pattern_find(&st->pat, s, n, &m, &nm))
			return -1;
		if (st->invert) {
			// the matches are the pieces: the gaps between them are the
			// delimiters, treated by the behaviour
			size_t *g = malloc((2 * nm + 2) * sizeof *g), ng = 0, at = 0;
			if (!g) {
				free(m);
				return -1;
			}
			for (size_t i = 0; i < nm; i++) {
				if (m[2 * i] > at) {
					g[2 * ng] = at;
					g[2 * ng++ + 1] = m[2 * i];
				}
				at = m[2 * i + 1];
			}
			if (at < n) {
				g[2 * ng] = at;
				g[2 * ng++ + 1] = n;
			}
			free(m);
			m = g;
			nm = ng;
		} else if (st->behavior == B_CONTIGUOUS && nm > 1) {
			size_t k = 0;
			for (size_t i = 1; i < nm; i++)
				if (m[2 * i] == m[2 * k + 1])
					m[2 * k + 1] = m[2 * i + 1];
				else {
					k++;
					m[2 * k] = m[2 * i];
					m[2 * k + 1] = m[2 * i + 1];
				}
			nm = k + 1;
		}
		rc = split_by(s, n, m, nm, st->behavior, first, out);
		break;
	}
	free(m);
	return rc;
}

int
hf_pretok_apply(const struct hf_pretok *p, const char *s, size_t len, int first, struct hf_pieces *out, char *err)
{
	pieces_clear(out);
	if (piece_add(out, s, len, first))
		return ad_err(err, "tokenizer: out of memory");
	struct hf_pieces next = {0};
	for (int i = 0; p && i < p->n; i++) {
		pieces_clear(&next);
		for (size_t k = 0; k < out->n; k++)
			if (pre_step(&p->v[i], out->buf + out->off[k], out->len[k], out->first[k], &next)) {
				hf_pieces_free(&next);
				return ad_err(err, "tokenizer: out of memory");
			}
		struct hf_pieces t = *out;
		*out = next;
		next = t;
	}
	hf_pieces_free(&next);
	return 0;
}
