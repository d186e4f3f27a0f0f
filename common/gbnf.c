// gbnf.c - the GBNF parser and its lowering to byte sets; see gbnf.h.
//
// The parser follows llama.cpp's recursive descent: a rule body is built as
// one vector of elements with OP_ALT between alternatives, groups and
// repetitions become generated rules (x* is x_N ::= x x_N | ""), and the
// bodies are flattened at the end. Every parse function returns the
// position after what it read, or NULL with the error filled (the first
// error sticks; nothing is read after it).
#include "gbnf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OP_ALT 7 // between alternatives while a body is built

struct body {
	struct gbnf_el *a;
	int n, cap;
};

struct rule {
	char *name;
	struct body b;
	int defined;
};

// a cached class rule: its code point ranges
struct class
{
	uint32_t *r; // lo, hi pairs
	int n;
	int rule;
};

struct parser {
	const char *src; // NUL-terminated
	struct rule *rules;
	int n_rules, cap_rules;
	int *hash; // open addressing over rule names: rule index + 1, 0 empty
	int hcap;
	uint8_t (*set)[32];
	int n_set, cap_set;
	int *shash; // over sets: index + 1
	int scap;
	struct class *cls;
	int n_cls, cap_cls;
	long total; // elements so far, over every body
	int depth;
	gbnf_resolve_fn resolve;
	void *ctx;
	int n_tokens, n_unresolved;
	char *err;
	int failed;
};

// --- errors ----------------------------------------------------------------------

// fail records "line L, column C: msg (near '...')" for the position at
static const char *__attribute__((format(printf, 3, 4))) fail(struct parser *p, const char *at, const char *fmt, ...)
{
	if (p->failed)
		return NULL;
	p->failed = 1;
	if (!p->err)
		return NULL;
	int line = 1, col = 1;
	for (const char *s = p->src; at && s < at && *s; s++) {
		if (*s == '\n') {
			line++;
			col = 1;
		} else {
			col++;
		}
	}
	char msg[AD_ERRLEN / 2];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	char near[24];
	size_t k = 0;
	for (const char *s = at; s && *s && *s != '\n' && k < 16; s++)
		near[k++] = (unsigned char)*s < 0x20 ? ' ' : *s;
	near[k] = 0;
	if (at)
		snprintf(p->err, AD_ERRLEN, "grammar: line %d, column %d: %s%s%s%s", line, col, msg,
		         k ? " (at '" : " (at the end)", near, k ? "')" : "");
	else
		snprintf(p->err, AD_ERRLEN, "grammar: %s", msg);
	return NULL;
}

// --- storage -----------------------------------------------------------------------

static int
push_el(struct parser *p, struct body *b, unsigned op, uint32_t arg)
{
	if (p->total >= GBNF_MAX_ELEMENTS) {
		fail(p, NULL, "the grammar is too large (over %d elements once its repetitions are expanded)",
		     GBNF_MAX_ELEMENTS);
		return -1;
	}
	if (b->n == b->cap) {
		int cap = b->cap ? 2 * b->cap : 8;
		struct gbnf_el *a = realloc(b->a, (size_t)cap * sizeof *a);
		if (!a) {
			fail(p, NULL, "out of memory");
			return -1;
		}
		b->a = a;
		b->cap = cap;
	}
	b->a[b->n++] = (struct gbnf_el){op, arg};
	p->total++;
	return 0;
}

static uint32_t
hash_bytes(const void *s, size_t n)
{
	const unsigned char *b = s;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 16777619u;
	return h;
}

static int
grow_hash(int **h, int *cap, int n, uint32_t (*key)(struct parser *, int), struct parser *p)
{
	if (n * 2 < *cap)
		return 0;
	// room for all n: generated rules join the count without passing here
	int nc = *cap ? *cap * 2 : 64;
	while (nc < 2 * (n + 1))
		nc *= 2;
	int *t = calloc((size_t)nc, sizeof *t);
	if (!t)
		return -1;
	for (int i = 0; i < n; i++) {
		uint32_t k = key(p, i) & (uint32_t)(nc - 1);
		while (t[k])
			k = (k + 1) & (uint32_t)(nc - 1);
		t[k] = i + 1;
	}
	free(*h);
	*h = t;
	*cap = nc;
	return 0;
}

static uint32_t
rule_key(struct parser *p, int i)
{
	return hash_bytes(p->rules[i].name, strlen(p->rules[i].name));
}

static uint32_t
set_key(struct parser *p, int i)
{
	return hash_bytes(p->set[i], 32);
}

// the index of rule name s[0..n), added (undefined) when new; -1 on failure
static int
rule_id(struct parser *p, const char *s, size_t n, int named)
{
	if (named && p->hcap) {
		uint32_t k = hash_bytes(s, n) & (uint32_t)(p->hcap - 1);
		for (; p->hash[k]; k = (k + 1) & (uint32_t)(p->hcap - 1)) {
			const char *x = p->rules[p->hash[k] - 1].name;
			if (strlen(x) == n && memcmp(x, s, n) == 0)
				return p->hash[k] - 1;
		}
	}
	if (p->n_rules == p->cap_rules) {
		int cap = p->cap_rules ? 2 * p->cap_rules : 16;
		struct rule *r = realloc(p->rules, (size_t)cap * sizeof *r);
		if (!r)
			return fail(p, NULL, "out of memory"), -1;
		p->rules = r;
		p->cap_rules = cap;
	}
	struct rule *r = &p->rules[p->n_rules];
	memset(r, 0, sizeof *r);
	if (!(r->name = malloc(n + 1)))
		return fail(p, NULL, "out of memory"), -1;
	memcpy(r->name, s, n);
	r->name[n] = 0;
	int id = p->n_rules++;
	if (named) {
		if (grow_hash(&p->hash, &p->hcap, p->n_rules, rule_key, p))
			return fail(p, NULL, "out of memory"), -1;
		uint32_t k = hash_bytes(s, n) & (uint32_t)(p->hcap - 1);
		while (p->hash[k] && p->hash[k] != id + 1)
			k = (k + 1) & (uint32_t)(p->hcap - 1);
		p->hash[k] = id + 1;
	}
	return id;
}

// a generated rule: parent_N
static int
gen_rule(struct parser *p, const char *parent)
{
	char name[96];
	int n = snprintf(name, sizeof name, "%.64s_%d", parent, p->n_rules);
	int id = rule_id(p, name, (size_t)n, 0);
	if (id >= 0)
		p->rules[id].defined = 1;
	return id;
}

// the index of this byte set, added when new
static int
set_id(struct parser *p, const uint8_t s[32])
{
	if (p->scap) {
		uint32_t k = hash_bytes(s, 32) & (uint32_t)(p->scap - 1);
		for (; p->shash[k]; k = (k + 1) & (uint32_t)(p->scap - 1))
			if (memcmp(p->set[p->shash[k] - 1], s, 32) == 0)
				return p->shash[k] - 1;
	}
	if (p->n_set == p->cap_set) {
		int cap = p->cap_set ? 2 * p->cap_set : 64;
		uint8_t(*t)[32] = realloc(p->set, (size_t)cap * sizeof *t);
		if (!t)
			return fail(p, NULL, "out of memory"), -1;
		p->set = t;
		p->cap_set = cap;
	}
	memcpy(p->set[p->n_set], s, 32);
	int id = p->n_set++;
	if (grow_hash(&p->shash, &p->scap, p->n_set, set_key, p))
		return fail(p, NULL, "out of memory"), -1;
	uint32_t k = hash_bytes(s, 32) & (uint32_t)(p->scap - 1);
	while (p->shash[k] && p->shash[k] != id + 1)
		k = (k + 1) & (uint32_t)(p->scap - 1);
	p->shash[k] = id + 1;
	return id;
}

static int
byte_set(struct parser *p, unsigned lo, unsigned hi)
{
	uint8_t s[32] = {0};
	for (unsigned b = lo; b <= hi; b++)
		s[b >> 3] |= (uint8_t)(1u << (b & 7));
	return set_id(p, s);
}

// --- UTF-8 ----------------------------------------------------------------------------

int
gbnf_utf8(uint32_t c, uint8_t b[4])
{
	if (c < 0x80) {
		b[0] = (uint8_t)c;
		return 1;
	}
	if (c < 0x800) {
		b[0] = (uint8_t)(0xc0 | c >> 6);
		b[1] = (uint8_t)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c >= 0xd800 && c <= 0xdfff)
		return 0;
	if (c < 0x10000) {
		b[0] = (uint8_t)(0xe0 | c >> 12);
		b[1] = (uint8_t)(0x80 | (c >> 6 & 0x3f));
		b[2] = (uint8_t)(0x80 | (c & 0x3f));
		return 3;
	}
	if (c > 0x10ffff)
		return 0;
	b[0] = (uint8_t)(0xf0 | c >> 18);
	b[1] = (uint8_t)(0x80 | (c >> 12 & 0x3f));
	b[2] = (uint8_t)(0x80 | (c >> 6 & 0x3f));
	b[3] = (uint8_t)(0x80 | (c & 0x3f));
	return 4;
}

// decode one strict UTF-8 character of the grammar text; NULL when invalid
static const char *
decode(const char *s, uint32_t *c)
{
	const unsigned char *u = (const unsigned char *)s;
	if (u[0] < 0x80) {
		*c = u[0];
		return s + 1;
	}
	int n = u[0] >= 0xf0 && u[0] <= 0xf4 ? 4 : u[0] >= 0xe0 ? 3 : u[0] >= 0xc2 && u[0] < 0xe0 ? 2 : 0;
	if (u[0] >= 0xf5)
		n = 0;
	if (!n)
		return NULL;
	uint32_t v = u[0] & (0x7f >> n);
	for (int i = 1; i < n; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return NULL;
		v = v << 6 | (u[i] & 0x3f);
	}
	static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
	if (v < min[n] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return NULL;
	*c = v;
	return s + n;
}

// --- lexing ---------------------------------------------------------------------------

static int
is_word(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

static int
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static const char *
space(const char *s, int newline_ok)
{
	while (*s == ' ' || *s == '\t' || *s == '#' || (newline_ok && (*s == '\r' || *s == '\n'))) {
		if (*s == '#')
			while (*s && *s != '\r' && *s != '\n')
				s++;
		else
			s++;
	}
	return s;
}

static int
hexval(char c)
{
	return c >= '0' && c <= '9'   ? c - '0'
	       : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                              : -1;
}

// one character of a literal or class: an escape or a UTF-8 character
static const char *
parse_char(struct parser *p, const char *s, uint32_t *c)
{
	if (*s == '\\') {
		int digits = s[1] == 'x' ? 2 : s[1] == 'u' ? 4 : s[1] == 'U' ? 8 : 0;
		if (digits) {
			uint32_t v = 0;
			for (int i = 0; i < digits; i++) {
				int h = hexval(s[2 + i]);
				if (h < 0)
					return fail(p, s, "expecting %d hex digits after \\%c", digits, s[1]);
				v = v << 4 | (uint32_t)h;
			}
			if (v > 0x10ffff)
				return fail(p, s, "U+%X is beyond the last code point U+10FFFF", v);
			*c = v;
			return s + 2 + digits;
		}
		switch (s[1]) {
		case 't':
			*c = '\t';
			return s + 2;
		case 'r':
			*c = '\r';
			return s + 2;
		case 'n':
			*c = '\n';
			return s + 2;
		case '\\':
		case '"':
		case '[':
		case ']':
			*c = (unsigned char)s[1];
			return s + 2;
		default:
			return fail(p, s, "unknown escape");
		}
	}
	if (!*s)
		return fail(p, s, "unexpected end of the grammar");
	const char *e = decode(s, c);
	return e ? e : fail(p, s, "invalid UTF-8");
}

// --- character classes ------------------------------------------------------------------

static int
cmp_range(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

// sorted, merged ranges; negated over [0, 10FFFF]; surrogates removed.
// r holds n pairs and room for n + 2; returns the new count
static int
normalize(uint32_t *r, int n, int negate)
{
	int m = 0;
	for (int i = 0; i < n; i++) // empty ranges (a reversed a-b) match nothing, as in llama.cpp
		if (r[2 * i] <= r[2 * i + 1]) {
			r[2 * m] = r[2 * i];
			r[2 * m + 1] = r[2 * i + 1];
			m++;
		}
	qsort(r, (size_t)m, 2 * sizeof *r, cmp_range);
	int k = 0;
	for (int i = 0; i < m; i++) {
		if (k && r[2 * i] <= r[2 * k - 1] + 1) {
			if (r[2 * i + 1] > r[2 * k - 1])
				r[2 * k - 1] = r[2 * i + 1];
		} else {
			r[2 * k] = r[2 * i];
			r[2 * k + 1] = r[2 * i + 1];
			k++;
		}
	}
	if (negate) {
		uint32_t *t = malloc((size_t)(2 * k + 2) * sizeof *t);
		if (!t)
			return -1;
		int j = 0;
		uint32_t next = 0;
		for (int i = 0; i < k; i++) {
			if (r[2 * i] > next) {
				t[2 * j] = next;
				t[2 * j + 1] = r[2 * i] - 1;
				j++;
			}
			next = r[2 * i + 1] + 1;
		}
		if (next <= 0x10ffff) {
			t[2 * j] = next;
			t[2 * j + 1] = 0x10ffff;
			j++;
		}
		memcpy(r, t, (size_t)(2 * j) * sizeof *t);
		free(t);
		k = j;
	}
	// cut the surrogates out (at most one range grows into two)
	int out = 0;
	uint32_t *t = malloc((size_t)(2 * k + 2) * sizeof *t);
	if (!t)
		return -1;
	for (int i = 0; i < k; i++) {
		uint32_t lo = r[2 * i], hi = r[2 * i + 1];
		if (hi < 0xd800 || lo > 0xdfff) {
			t[2 * out] = lo;
			t[2 * out + 1] = hi;
			out++;
			continue;
		}
		if (lo < 0xd800) {
			t[2 * out] = lo;
			t[2 * out + 1] = 0xd7ff;
			out++;
		}
		if (hi > 0xdfff) {
			t[2 * out] = 0xe000;
			t[2 * out + 1] = hi;
			out++;
		}
	}
	memcpy(r, t, (size_t)(2 * out) * sizeof *t);
	free(t);
	return out;
}

// a byte sequence of a class: up to 4 byte sets, as ranges first
struct seq {
	int n;
	uint8_t lo[4], hi[4];
	uint8_t set[4][32];
};

struct seqs {
	struct seq *a;
	int n, cap;
};

static int
add_seq(struct seqs *s, const uint8_t *lo, const uint8_t *hi, int n)
{
	if (s->n == s->cap) {
		int cap = s->cap ? 2 * s->cap : 16;
		struct seq *a = realloc(s->a, (size_t)cap * sizeof *a);
		if (!a)
			return -1;
		s->a = a;
		s->cap = cap;
	}
	struct seq *q = &s->a[s->n++];
	memset(q, 0, sizeof *q);
	q->n = n;
	memcpy(q->lo, lo, (size_t)n);
	memcpy(q->hi, hi, (size_t)n);
	for (int i = 0; i < n; i++)
		for (unsigned b = lo[i]; b <= hi[i]; b++)
			q->set[i][b >> 3] |= (uint8_t)(1u << (b & 7));
	return 0;
}

// the UTF-8 byte-range sequences of [lo, hi] (same encoded length): split
// until, at every byte position, the bytes of lo..hi form one range
static int
utf8_split(struct seqs *s, uint32_t lo, uint32_t hi)
{
	uint8_t a[4], b[4];
	int n = gbnf_utf8(lo, a);
	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if (lo & m)
				return utf8_split(s, lo, lo | m) || utf8_split(s, (lo | m) + 1, hi);
			if ((hi & m) != m)
				return utf8_split(s, lo, (hi & ~m) - 1) || utf8_split(s, hi & ~m, hi);
		}
	}
	gbnf_utf8(hi, b);
	return add_seq(s, a, b, n);
}

// the alternatives of a class rule for these ranges: one set for the
// single bytes, then multi-byte sequences whose later sets agree merged
// into one with the union of their first sets
static int
class_rule(struct parser *p, const uint32_t *r, int n, const char *parent)
{
	for (int i = 0; i < p->n_cls; i++)
		if (p->cls[i].n == n && memcmp(p->cls[i].r, r, (size_t)(2 * n) * sizeof *r) == 0)
			return p->cls[i].rule;
	struct seqs s = {0};
	static const uint32_t len_lo[4] = {0, 0x80, 0x800, 0x10000}, len_hi[4] = {0x7f, 0x7ff, 0xffff, 0x10ffff};
	for (int i = 0; i < n; i++)
		for (int k = 0; k < 4; k++) {
			uint32_t lo = r[2 * i] > len_lo[k] ? r[2 * i] : len_lo[k];
			uint32_t hi = r[2 * i + 1] < len_hi[k] ? r[2 * i + 1] : len_hi[k];
			if (lo <= hi && utf8_split(&s, lo, hi)) {
				free(s.a);
				return fail(p, NULL, "out of memory"), -1;
			}
		}
	// merge: later positions equal, union the first
	for (int i = 0; i < s.n; i++) {
		if (!s.a[i].n)
			continue;
		for (int j = i + 1; j < s.n; j++) {
			if (s.a[j].n != s.a[i].n)
				continue;
			int same = 1;
			for (int k = 1; k < s.a[i].n && same; k++)
				same = memcmp(s.a[i].set[k], s.a[j].set[k], 32) == 0;
			if (!same)
				continue;
			for (int b = 0; b < 32; b++)
				s.a[i].set[0][b] |= s.a[j].set[0][b];
			s.a[j].n = 0;
		}
	}
	int id = gen_rule(p, parent);
	if (id < 0) {
		free(s.a);
		return -1;
	}
	int first = 1;
	for (int i = 0; i < s.n; i++) {
		if (!s.a[i].n)
			continue;
		if (!first && push_el(p, &p->rules[id].b, OP_ALT, 0)) {
			free(s.a);
			return -1;
		}
		first = 0;
		for (int k = 0; k < s.a[i].n; k++) {
			int si = set_id(p, s.a[i].set[k]);
			if (si < 0 || push_el(p, &p->rules[id].b, GBNF_SET, (uint32_t)si)) {
				free(s.a);
				return -1;
			}
		}
	}
	free(s.a);
	if (first) { // an empty class matches nothing: one empty set
		uint8_t none[32] = {0};
		int si = set_id(p, none);
		if (si < 0 || push_el(p, &p->rules[id].b, GBNF_SET, (uint32_t)si))
			return -1;
	}
	if (p->n_cls == p->cap_cls) {
		int cap = p->cap_cls ? 2 * p->cap_cls : 8;
		struct class *c = realloc(p->cls, (size_t)cap * sizeof *c);
		if (!c)
			return fail(p, NULL, "out of memory"), -1;
		p->cls = c;
		p->cap_cls = cap;
	}
	uint32_t *copy = malloc((size_t)(2 * n + 1) * sizeof *copy);
	if (!copy)
		return fail(p, NULL, "out of memory"), -1;
	memcpy(copy, r, (size_t)(2 * n) * sizeof *r);
	p->cls[p->n_cls++] = (struct class){copy, n, id};
	return id;
}

// one element for the class with these ranges: a byte set within ASCII,
// else a reference to its class rule
static int
push_class(struct parser *p, int rule, uint32_t *r, int n)
{
	if (n == 0 || r[2 * n - 1] < 0x80) {
		uint8_t s[32] = {0};
		for (int i = 0; i < n; i++)
			for (uint32_t c = r[2 * i]; c <= r[2 * i + 1]; c++)
				s[c >> 3] |= (uint8_t)(1u << (c & 7));
		int si = set_id(p, s);
		return si < 0 ? -1 : push_el(p, &p->rules[rule].b, GBNF_SET, (uint32_t)si);
	}
	int id = class_rule(p, r, n, p->rules[rule].name);
	return id < 0 ? -1 : push_el(p, &p->rules[rule].b, GBNF_RULE, (uint32_t)id);
}

// --- the grammar -------------------------------------------------------------------------

static const char *parse_alternates(struct parser *p, const char *s, int rule, int nested);

// x{min,max} (max < 0: no limit) on b->a[start..n)
static int
repeat(struct parser *p, int rule, int start, long min, long max, const char *at)
{
	struct body *b = &p->rules[rule].b;
	if (start == b->n) {
		fail(p, at, "expecting an item before the repetition");
		return -1;
	}
	int n = b->n - start;
	struct gbnf_el *prev = malloc((size_t)n * sizeof *prev);
	if (!prev) {
		fail(p, NULL, "out of memory");
		return -1;
	}
	memcpy(prev, b->a + start, (size_t)n * sizeof *prev);
	int rv = -1;
	if (min == 0)
		b->n = start, p->total -= n;
	for (long i = 1; i < min; i++)
		for (int k = 0; k < n; k++)
			if (push_el(p, &p->rules[rule].b, prev[k].op, prev[k].arg))
				goto out;
	long n_opt = max < 0 ? 1 : max - min;
	int last = -1;
	for (long i = 0; i < n_opt; i++) {
		int id = gen_rule(p, p->rules[rule].name);
		if (id < 0)
			goto out;
		struct body *rb = &p->rules[id].b;
		for (int k = 0; k < n; k++)
			if (push_el(p, rb, prev[k].op, prev[k].arg))
				goto out;
		if ((i > 0 || max < 0) && push_el(p, rb, GBNF_RULE, (uint32_t)(max < 0 ? id : last)))
			goto out;
		if (push_el(p, rb, OP_ALT, 0))
			goto out;
		last = id;
	}
	if (n_opt > 0 && push_el(p, &p->rules[rule].b, GBNF_RULE, (uint32_t)last))
		goto out;
	rv = 0;
out:
	free(prev);
	return rv;
}

static const char *
parse_int(struct parser *p, const char *s, long *v)
{
	if (!is_digit(*s))
		return fail(p, s, "expecting a number");
	long x = 0;
	while (is_digit(*s)) {
		x = x * 10 + (*s++ - '0');
		if (x > GBNF_MAX_REPEAT)
			return fail(p, s, "a repetition count above %d", GBNF_MAX_REPEAT);
	}
	*v = x;
	return s;
}

// a token: <[id]> or <text>
static const char *
parse_token(struct parser *p, const char *s, uint32_t *id)
{
	const char *start = s++;
	if (*s == '[') {
		s++;
		if (!is_digit(*s))
			return fail(p, s, "expecting a token id");
		uint64_t v = 0;
		while (is_digit(*s)) {
			v = v * 10 + (uint64_t)(*s++ - '0');
			if (v >= GBNF_UNRESOLVED)
				return fail(p, start, "token id too large");
		}
		if (s[0] != ']' || s[1] != '>')
			return fail(p, s, "expecting ]> after a token id");
		*id = (uint32_t)v;
		return s + 2;
	}
	while (*s && *s != '>' && *s != '\n')
		s++;
	if (*s != '>')
		return fail(p, start, "expecting > to close a token");
	s++;
	if (!p->resolve) {
		*id = GBNF_UNRESOLVED;
		p->n_unresolved++;
		return s;
	}
	int32_t t = p->resolve(p->ctx, start, (size_t)(s - start));
	if (t < 0 || (uint32_t)t >= GBNF_UNRESOLVED)
		return fail(p, start, "'%.*s' is not one token of this model", (int)(s - start > 64 ? 64 : s - start),
		            start);
	*id = (uint32_t)t;
	return s;
}

static const char *
parse_sequence(struct parser *p, const char *s, int rule, int nested)
{
	int last = p->rules[rule].b.n;
	while (*s && !p->failed) {
		struct body *b = &p->rules[rule].b;
		if (*s == '"') {
			s++;
			last = b->n;
			while (*s != '"') {
				uint32_t c;
				const char *e = parse_char(p, s, &c);
				if (!e)
					return NULL;
				uint8_t u[4];
				int k = gbnf_utf8(c, u);
				if (!k)
					return fail(p, s, "U+%04X is a surrogate, not a character", c);
				for (int i = 0; i < k; i++) {
					int si = byte_set(p, u[i], u[i]);
					if (si < 0 || push_el(p, &p->rules[rule].b, GBNF_SET, (uint32_t)si))
						return NULL;
				}
				s = e;
			}
			s = space(s + 1, nested);
		} else if (*s == '[') {
			const char *at = s++;
			int neg = *s == '^';
			s += neg;
			uint32_t *r = NULL;
			int n = 0, cap = 0;
			while (*s != ']') {
				uint32_t lo, hi;
				const char *e = parse_char(p, s, &lo);
				if (!e) {
					free(r);
					return NULL;
				}
				s = e;
				hi = lo;
				if (s[0] == '-' && s[1] != ']') {
					if (!(e = parse_char(p, s + 1, &hi))) {
						free(r);
						return NULL;
					}
					s = e;
				}
				if (n + 2 >= cap) {
					cap = cap ? 2 * cap : 16;
					uint32_t *t = realloc(r, (size_t)(2 * cap) * sizeof *t);
					if (!t) {
						free(r);
						return fail(p, NULL, "out of memory");
					}
					r = t;
				}
				r[2 * n] = lo;
				r[2 * n + 1] = hi;
				n++;
			}
			if (!r && !(r = malloc(4 * sizeof *r)))
				return fail(p, NULL, "out of memory");
			int m = normalize(r, n, neg);
			last = p->rules[rule].b.n;
			int rv = m < 0 ? (fail(p, at, "out of memory"), -1) : push_class(p, rule, r, m);
			free(r);
			if (rv)
				return NULL;
			s = space(s + 1, nested);
		} else if (*s == '<' || (*s == '!' && s[1] == '<')) {
			int neg = *s == '!';
			uint32_t id = 0;
			if (!(s = parse_token(p, s + neg, &id)))
				return NULL;
			last = b->n;
			if (push_el(p, b, neg ? GBNF_NOT_TOKEN : GBNF_TOKEN, id))
				return NULL;
			p->n_tokens++;
			s = space(s, nested);
		} else if (is_word(*s)) {
			const char *e = s;
			while (is_word(*e))
				e++;
			int id = rule_id(p, s, (size_t)(e - s), 1);
			if (id < 0)
				return NULL;
			last = p->rules[rule].b.n;
			if (push_el(p, &p->rules[rule].b, GBNF_RULE, (uint32_t)id))
				return NULL;
			s = space(e, nested);
		} else if (*s == '(') {
			if (p->depth >= GBNF_MAX_DEPTH)
				return fail(p, s, "groups nested deeper than %d", GBNF_MAX_DEPTH);
			int id = gen_rule(p, p->rules[rule].name);
			if (id < 0)
				return NULL;
			p->depth++;
			s = parse_alternates(p, space(s + 1, 1), id, 1);
			p->depth--;
			if (!s)
				return NULL;
			if (*s != ')')
				return fail(p, s, "expecting )");
			last = p->rules[rule].b.n;
			if (push_el(p, &p->rules[rule].b, GBNF_RULE, (uint32_t)id))
				return NULL;
			s = space(s + 1, nested);
		} else if (*s == '.') {
			uint32_t any[4] = {0, 0x10ffff};
			int m = normalize(any, 1, 0);
			last = b->n;
			if (m < 0 || push_class(p, rule, any, m))
				return NULL;
			s = space(s + 1, nested);
		} else if (*s == '*' || *s == '+' || *s == '?') {
			long min = *s == '+', max = *s == '?' ? 1 : -1;
			if (repeat(p, rule, last, min, max, s))
				return NULL;
			s = space(s + 1, nested);
		} else if (*s == '{') {
			const char *at = s;
			long min = 0, max = 0;
			if (!(s = parse_int(p, space(s + 1, nested), &min)))
				return NULL;
			s = space(s, nested);
			if (*s == '}') {
				max = min;
			} else if (*s == ',') {
				s = space(s + 1, nested);
				max = -1;
				if (is_digit(*s)) {
					if (!(s = parse_int(p, s, &max)))
						return NULL;
					s = space(s, nested);
				}
				if (*s != '}')
					return fail(p, s, "expecting }");
				if (max >= 0 && max < min)
					return fail(p, at, "a repetition {%ld,%ld} whose maximum is below its minimum",
					            min, max);
			} else {
				return fail(p, s, "expecting , or }");
			}
			if (repeat(p, rule, last, min, max, at))
				return NULL;
			s = space(s + 1, nested);
		} else {
			break;
		}
	}
	return p->failed ? NULL : s;
}

static const char *
parse_alternates(struct parser *p, const char *s, int rule, int nested)
{
	p->rules[rule].b.n = 0; // a redefinition replaces the body
	if (!(s = parse_sequence(p, s, rule, nested)))
		return NULL;
	while (*s == '|') {
		if (push_el(p, &p->rules[rule].b, OP_ALT, 0))
			return NULL;
		if (!(s = parse_sequence(p, space(s + 1, 1), rule, nested)))
			return NULL;
	}
	p->rules[rule].defined = 1;
	return s;
}

static const char *
parse_rule(struct parser *p, const char *s)
{
	const char *e = s;
	while (is_word(*e))
		e++;
	if (e == s)
		return fail(p, s, "expecting a rule name");
	int id = rule_id(p, s, (size_t)(e - s), 1);
	if (id < 0)
		return NULL;
	s = space(e, 0);
	if (strncmp(s, "::=", 3) != 0)
		return fail(p, s, "expecting ::=");
	if (!(s = parse_alternates(p, space(s + 3, 1), id, 0)))
		return NULL;
	if (*s == '\r')
		s += s[1] == '\n' ? 2 : 1;
	else if (*s == '\n')
		s++;
	else if (*s)
		return fail(p, s, "expecting a newline or the end");
	return space(s, 1);
}

// --- checks -------------------------------------------------------------------------------

// nullable rules by fixed point, then left recursion: an edge r -> s when s
// appears in an alternative of r after only nullable elements; a cycle is
// refused (found by an iterative depth-first search)
static int
check(struct parser *p, struct gbnf *g)
{
	int nr = g->n_rules;
	for (int changed = 1; changed;) {
		changed = 0;
		for (int r = 0; r < nr; r++) {
			if (g->nullable[r])
				continue;
			for (int a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !g->nullable[r]; a++) {
				int ok = 1;
				for (int i = g->alt[a]; g->el[i].op != GBNF_END && ok; i++)
					ok = g->el[i].op == GBNF_RULE && g->nullable[g->el[i].arg];
				if (ok)
					g->nullable[r] = 1, changed = 1;
			}
		}
	}
	// colour: 0 new, 1 on the path, 2 done; the stack holds (rule, next alt, next element)
	if (nr < 1)
		return 0;
	uint8_t *col = calloc((size_t)nr, 1);
	int32_t *st = malloc((size_t)nr * 3 * sizeof *st);
	if (!col || !st) {
		free(col);
		free(st);
		fail(p, NULL, "out of memory");
		return -1;
	}
	int rv = 0;
	for (int r0 = 0; r0 < nr && !rv; r0++) {
		if (col[r0])
			continue;
		int sp = 0;
		st[0] = r0, st[1] = g->rule_alt[r0], st[2] = -1;
		col[r0] = 1;
		sp = 1;
		while (sp && !rv) {
			int32_t *f = &st[3 * (sp - 1)];
			int r = f[0];
			// the next leftmost rule reference of r
			int next = -1;
			while (f[1] < g->rule_alt[r + 1]) {
				int i = f[2] < 0 ? g->alt[f[1]] : f[2];
				if (g->el[i].op == GBNF_RULE) {
					next = (int)g->el[i].arg;
					if (g->nullable[next]) {
						f[2] = i + 1;
					} else {
						f[1]++;
						f[2] = -1;
					}
					break;
				}
				f[1]++; // a terminal or the end: nothing further left in this alternative
				f[2] = -1;
			}
			if (next < 0) {
				col[r] = 2;
				sp--;
				continue;
			}
			if (col[next] == 1) {
				fail(p, NULL, "left recursion: rule '%s' can reach itself without consuming anything",
				     g->name[next]);
				rv = -1;
			} else if (col[next] == 0) {
				col[next] = 1;
				st[3 * sp] = next, st[3 * sp + 1] = g->rule_alt[next], st[3 * sp + 2] = -1;
				sp++;
			}
		}
	}
	free(col);
	free(st);
	return rv;
}

// --- entry points -------------------------------------------------------------------------

void
gbnf_free(struct gbnf *g)
{
	if (!g)
		return;
	for (int i = 0; g->name && i < g->n_rules; i++)
		free(g->name[i]);
	free(g->name);
	free(g->el);
	free(g->alt);
	free(g->rule_alt);
	free(g->set);
	free(g->nullable);
	free(g);
}

static void
parser_free(struct parser *p)
{
	for (int i = 0; i < p->n_rules; i++) {
		free(p->rules[i].name);
		free(p->rules[i].b.a);
	}
	free(p->rules);
	free(p->hash);
	free(p->set);
	free(p->shash);
	for (int i = 0; i < p->n_cls; i++)
		free(p->cls[i].r);
	free(p->cls);
}

// flatten the bodies into g
static int
flatten(struct parser *p, struct gbnf *g)
{
	int nr = p->n_rules;
	long n_el = 0, n_alt = 0;
	for (int r = 0; r < nr; r++) {
		n_alt++;
		n_el++;
		for (int i = 0; i < p->rules[r].b.n; i++)
			if (p->rules[r].b.a[i].op == OP_ALT)
				n_alt++, n_el++;
			else
				n_el++;
	}
	g->el = malloc((size_t)n_el * sizeof *g->el);
	g->alt = malloc((size_t)n_alt * sizeof *g->alt);
	g->rule_alt = malloc((size_t)(nr + 1) * sizeof *g->rule_alt);
	g->name = calloc((size_t)(nr ? nr : 1), sizeof *g->name);
	g->nullable = calloc((size_t)(nr ? nr : 1), 1);
	if (!g->el || !g->alt || !g->rule_alt || !g->name || !g->nullable) {
		fail(p, NULL, "out of memory");
		return -1;
	}
	g->n_rules = nr;
	int e = 0, a = 0;
	for (int r = 0; r < nr; r++) {
		struct rule *ru = &p->rules[r];
		g->name[r] = ru->name;
		ru->name = NULL;
		g->rule_alt[r] = a;
		g->alt[a++] = e;
		for (int i = 0; i < ru->b.n; i++) {
			if (ru->b.a[i].op == OP_ALT) {
				g->el[e++] = (struct gbnf_el){GBNF_END, 0};
				g->alt[a++] = e;
			} else {
				g->el[e++] = ru->b.a[i];
			}
		}
		g->el[e++] = (struct gbnf_el){GBNF_END, 0};
	}
	g->rule_alt[nr] = a;
	g->n_el = e;
	g->n_alt = a;
	g->set = p->set;
	g->n_set = p->n_set;
	p->set = NULL;
	return 0;
}

int
gbnf_compile(const char *text, size_t len, const char *root, gbnf_resolve_fn resolve, void *ctx, struct gbnf **out,
             char *err)
{
	*out = NULL;
	if (len > GBNF_MAX_TEXT)
		return ad_err(err, "grammar: %zu bytes, at most %d", len, GBNF_MAX_TEXT);
	const char *nul = memchr(text, 0, len);
	if (nul)
		return ad_err(err, "grammar: a NUL byte at offset %zu", (size_t)(nul - text));
	char *src = malloc(len + 1);
	struct gbnf *g = calloc(1, sizeof *g);
	if (!src || !g) {
		free(src);
		free(g);
		return ad_err(err, "grammar: out of memory");
	}
	memcpy(src, text, len);
	src[len] = 0;
	struct parser p = {.src = src, .resolve = resolve, .ctx = ctx, .err = err};
	const char *s = space(src, 1);
	if (!*s)
		fail(&p, NULL, "the grammar is empty");
	while (s && *s)
		s = parse_rule(&p, s);
	if (!p.failed)
		for (int r = 0; r < p.n_rules; r++)
			if (!p.rules[r].defined) {
				fail(&p, NULL, "rule '%s' is used but not defined", p.rules[r].name);
				break;
			}
	const char *want = root ? root : "root";
	int start = -1;
	for (int r = 0; !p.failed && r < p.n_rules && start < 0; r++)
		if (strcmp(p.rules[r].name, want) == 0)
			start = r;
	if (!p.failed && start < 0)
		fail(&p, NULL, "no rule named '%s' to start from", want);
	if (!p.failed) {
		g->root = start;
		g->n_tokens = p.n_tokens;
		g->n_unresolved = p.n_unresolved;
		if (flatten(&p, g) == 0)
			check(&p, g);
	}
	parser_free(&p);
	free(src);
	if (p.failed) {
		gbnf_free(g);
		return -1;
	}
	*out = g;
	return 0;
}
