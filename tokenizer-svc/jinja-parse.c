// jinja-parse.c - the Jinja lexer and parser: template text to the AST of
// jinja-impl.h.
//
// Both follow jinja2's lexer.py and parser.py rule for rule, because the
// output depends on their details: newlines are normalised and one trailing
// newline dropped; "{%-"/"-%}" strip whitespace (Python's notion of it)
// around a tag; with lstrip_blocks the spaces between a line's start and a
// block or comment tag go; with trim_blocks the newline after a block or
// comment tag goes ("+%}" keeps it); a tag ends only where its brackets are
// balanced. Nesting is bounded (JINJA_MAX_NEST) so that no template can
// exhaust the stack, here or when it is evaluated.
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja-impl.h"
#include "unicode.h"

#define JINJA_MAX_NEST 96

// --- an arena for nodes and strings ---------------------------------------------
struct chunk {
	struct chunk *next;
	size_t used, cap;
	max_align_t data[];
};

static void *
arena_alloc(void **arena, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct chunk *c = *arena;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > 16384 ? n : 16384;
		struct chunk *d = malloc(sizeof *d + cap);
		if (!d)
			return NULL;
		d->next = c;
		d->used = 0;
		d->cap = cap;
		*arena = c = d;
	}
	void *p = (char *)c->data + c->used;
	c->used += n;
	memset(p, 0, n);
	return p;
}

static void
arena_free(void *arena)
{
	struct chunk *c = arena;
	while (c) {
		struct chunk *next = c->next;
		free(c);
		c = next;
	}
}

// --- tokens ----------------------------------------------------------------------
enum tk {
	TK_EOF,
	TK_DATA,
	TK_VAR_BEGIN,
	TK_VAR_END,
	TK_BLOCK_BEGIN,
	TK_BLOCK_END,
	TK_NAME,
	TK_STRING,
	TK_INT,
	TK_FLOAT,
	// operators
	TK_ADD,
	TK_SUB,
	TK_DIV,
	TK_FLOORDIV,
	TK_MUL,
	TK_MOD,
	TK_POW,
	TK_TILDE,
	TK_LBRACKET,
	TK_RBRACKET,
	TK_LPAREN,
	TK_RPAREN,
	TK_LBRACE,
	TK_RBRACE,
	TK_EQ,
	TK_NE,
	TK_GT,
	TK_GTEQ,
	TK_LT,
	TK_LTEQ,
	TK_ASSIGN,
	TK_DOT,
	TK_COLON,
	TK_PIPE,
	TK_COMMA,
	TK_SEMICOLON,
};

static const struct {
	const char *s;
	uint8_t t;
} ops[] = {
	{"//", TK_FLOORDIV}, {"**", TK_POW},   {"==", TK_EQ},      {"!=", TK_NE},      {">=", TK_GTEQ},
	{"<=", TK_LTEQ},     {"+", TK_ADD},    {"-", TK_SUB},      {"/", TK_DIV},      {"*", TK_MUL},
	{"%", TK_MOD},       {"~", TK_TILDE},  {"[", TK_LBRACKET}, {"]", TK_RBRACKET}, {"(", TK_LPAREN},
	{")", TK_RPAREN},    {"{", TK_LBRACE}, {"}", TK_RBRACE},   {">", TK_GT},       {"<", TK_LT},
	{"=", TK_ASSIGN},    {".", TK_DOT},    {":", TK_COLON},    {"|", TK_PIPE},     {",", TK_COMMA},
	{";", TK_SEMICOLON},
};

struct tok {
	uint8_t t;
	int line;
	const char *s; // names, strings (unescaped), data; in the arena
	size_t n;
	int64_t i;
	double f;
};

struct parser {
	// the source, newlines normalised
	const char *src;
	size_t n, pos;
	int line, line_starting;
	// the tokens
	struct tok *toks;
	size_t ntok, cap, cur;
	void **arena;
	struct jrender *R; // for constants (an immortal heap)
	enum jinja_status status;
	char *err;
	int depth;
	int loops; // for loops around the statement being parsed (break/continue)
	int in_macro;
};

static int pfail(struct parser *P, enum jinja_status s, int line, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int
pfail(struct parser *P, enum jinja_status s, int line, const char *fmt, ...)
{
	if (P->status != JINJA_OK)
		return -1;
	P->status = s;
	va_list ap;
	va_start(ap, fmt);
	ad_verr(P->err, fmt, ap);
	va_end(ap);
	return ad_err_prefix(P->err, "line %d", line);
}

static char *
pstrdup(struct parser *P, const char *s, size_t n)
{
	char *p = arena_alloc(P->arena, n + 1);
	if (!p)
		return NULL;
	memcpy(p, s, n);
	p[n] = 0;
	return p;
}

static struct tok *
emit(struct parser *P, uint8_t t)
{
	if (P->ntok == P->cap) {
		size_t cap = P->cap ? 2 * P->cap : 256;
		struct tok *q = realloc(P->toks, cap * sizeof *q);
		if (!q) {
			pfail(P, JINJA_LIMIT, P->line, "out of memory");
			return NULL;
		}
		P->toks = q;
		P->cap = cap;
	}
	struct tok *k = &P->toks[P->ntok++];
	memset(k, 0, sizeof *k);
	k->t = t;
	k->line = P->line;
	return k;
}

static void
count_lines(struct parser *P, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		P->line += P->src[i] == '\n';
}

// Python whitespace at s[i]: its length in bytes, 0 if none
static size_t
space_at(const char *s, size_t n, size_t i)
{
	if (i >= n)
		return 0;
	uint32_t cp;
	size_t k = ju_decode(s + i, n - i, &cp);
	return ju_isspace(cp) ? k : 0;
}

static size_t
skip_space(const char *s, size_t n, size_t i)
{
	size_t k;
	while ((k = space_at(s, n, i)))
		i += k;
	return i;
}

// the length of s[0..n) without trailing whitespace (str.rstrip())
static size_t
rstrip_len(const char *s, size_t n)
{
	size_t keep = 0, i = 0;
	while (i < n) {
		size_t k = space_at(s, n, i);
		if (k) {
			i += k;
		} else {
			uint32_t cp;
			i += ju_decode(s + i, n - i, &cp);
			keep = i;
		}
	}
	return keep;
}

static int
all_space(const char *s, size_t n)
{
	if (!n)
		return 0; // \s+ needs one
	return skip_space(s, n, 0) == n;
}

// data before a tag, with the tag's whitespace control (sign) and lstrip_blocks
static int
emit_data(struct parser *P, size_t from, size_t to, char sign, int lstrip_ok)
{
	const char *text = P->src + from;
	size_t n = to - from;
	if (sign == '-') {
		n = rstrip_len(text, n);
	} else if (sign != '+' && lstrip_ok) {
		size_t l = n;
		while (l > 0 && text[l - 1] != '\n')
			l--;
		if ((l > 0 || P->line_starting) && all_space(text + l, n - l))
			n = l;
	}
	if (n) {
		struct tok *k = emit(P, TK_DATA);
		if (!k)
			return -1;
		k->s = text;
		k->n = n;
	}
	count_lines(P, from, to);
	return 0;
}

// jinja2 unescapes a string literal with Python's "unicode-escape" codec
// after backslash-replacing what is not ASCII
static int
unescape(struct parser *P, const char *s, size_t n, struct tok *k)
{
	char *o = arena_alloc(P->arena, 4 * n + 1), *p = o;
	if (!o)
		return pfail(P, JINJA_LIMIT, P->line, "out of memory");
	for (size_t i = 0; i < n;) {
		if (s[i] != '\\') {
			*p++ = s[i++];
			continue;
		}
		if (i + 1 >= n) { // cannot happen: the lexer's regex pairs backslashes
			*p++ = s[i++];
			continue;
		}
		char c = s[i + 1];
		i += 2;
		uint32_t cp;
		int digits = 0;
		switch (c) {
		case '\n':
			continue;
		case '\\':
			*p++ = '\\';
			continue;
		case '\'':
			*p++ = '\'';
			continue;
		case '"':
			*p++ = '"';
			continue;
		case 'a':
			*p++ = '\a';
			continue;
		case 'b':
			*p++ = '\b';
			continue;
		case 'f':
			*p++ = '\f';
			continue;
		case 'n':
			*p++ = '\n';
			continue;
		case 'r':
			*p++ = '\r';
			continue;
		case 't':
			*p++ = '\t';
			continue;
		case 'v':
			*p++ = '\v';
			continue;
		case 'x':
			digits = 2;
			break;
		case 'u':
			digits = 4;
			break;
		case 'U':
			digits = 8;
			break;
		case 'N':
			return pfail(P, JINJA_UNSUPPORTED, k->line, "\\N{...} escapes in strings");
		default:
			if (c >= '0' && c <= '7') {
				cp = (uint32_t)(c - '0');
				for (int d = 0; d < 2 && i < n && s[i] >= '0' && s[i] <= '7'; d++)
					cp = cp * 8 + (uint32_t)(s[i++] - '0');
				p += unicode_encode(cp, p);
				continue;
			}
			if ((unsigned char)c >= 0x80) {
				// backslashreplace made the character an escape; the
				// backslash before it escapes that escape's backslash
				uint32_t u;
				size_t k2 = ju_decode(s + i - 1, n - (i - 1), &u);
				i += k2 - 1;
				p += sprintf(p, u <= 0xff ? "\\x%02x" : u <= 0xffff ? "\\u%04x" : "\\U%08x", u);
				continue;
			}
			*p++ = '\\';
			*p++ = c;
			continue;
		}
		cp = 0;
		for (int d = 0; d < digits; d++, i++) {
			char h = i < n ? s[i] : 0;
			int v = h >= '0' && h <= '9'   ? h - '0'
			        : h >= 'a' && h <= 'f' ? h - 'a' + 10
			        : h >= 'A' && h <= 'F' ? h - 'A' + 10
			                               : -1;
			if (v < 0)
				return pfail(P, JINJA_SYNTAX, k->line, "truncated \\%c escape in a string", c);
			cp = cp * 16 + (uint32_t)v;
		}
		if (cp > UNICODE_MAX)
			return pfail(P, JINJA_SYNTAX, k->line, "illegal Unicode character in a string");
		if (cp >= 0xD800 && cp < 0xE000)
			return pfail(P, JINJA_UNSUPPORTED, k->line, "a surrogate in a string");
		p += unicode_encode(cp, p);
	}
	*p = 0;
	k->s = o;
	k->n = (size_t)(p - o);
	return 0;
}

static int
is_digit(char c)
{
	return c >= '0' && c <= '9';
}

// (\d+_)*\d+ at s[i]: the end, or i when there is none
static size_t
digits_(const char *s, size_t n, size_t i)
{
	if (i >= n || !is_digit(s[i]))
		return i;
	size_t j = i;
	while (j < n && is_digit(s[j]))
		j++;
	while (j + 1 < n && s[j] == '_' && is_digit(s[j + 1])) {
		j++;
		while (j < n && is_digit(s[j]))
			j++;
	}
	return j;
}

static size_t
match_float(const char *s, size_t n, size_t i)
{
	if (i > 0 && s[i - 1] == '.')
		return 0;
	size_t j = digits_(s, n, i);
	if (j == i)
		return 0;
	// (\.D)? e[+-]?D
	size_t k = j;
	if (k < n && s[k] == '.') {
		size_t f = digits_(s, n, k + 1);
		if (f > k + 1)
			k = f;
	}
	if (k < n && (s[k] == 'e' || s[k] == 'E')) {
		size_t e = k + 1;
		if (e < n && (s[e] == '+' || s[e] == '-'))
			e++;
		size_t d = digits_(s, n, e);
		if (d > e)
			return d;
	}
	// \.D
	if (j < n && s[j] == '.') {
		size_t f = digits_(s, n, j + 1);
		if (f > j + 1)
			return f;
	}
	return 0;
}

static int
xdigit(char c, int base)
{
	int v = c >= '0' && c <= '9'   ? c - '0'
	        : c >= 'a' && c <= 'f' ? c - 'a' + 10
	        : c >= 'A' && c <= 'F' ? c - 'A' + 10
	                               : 99;
	return v < base ? v : -1;
}

static size_t
match_int(const char *s, size_t n, size_t i, int *base)
{
	*base = 10;
	if (i + 1 < n && s[i] == '0') {
		char b = (char)(s[i + 1] | 0x20);
		int bs = b == 'b' ? 2 : b == 'o' ? 8 : b == 'x' ? 16 : 0;
		if (bs) {
			size_t j = i + 2;
			for (;;) {
				size_t k = j < n && s[j] == '_' ? j + 1 : j;
				if (k < n && xdigit(s[k], bs) >= 0)
					j = k + 1;
				else
					break;
			}
			if (j > i + 2) {
				*base = bs;
				return j;
			}
		}
	}
	if (i < n && s[i] >= '1' && s[i] <= '9') {
		size_t j = i + 1;
		for (;;) {
			size_t k = j < n && s[j] == '_' ? j + 1 : j;
			if (k < n && is_digit(s[k]))
				j = k + 1;
			else
				break;
		}
		return j;
	}
	if (i < n && s[i] == '0') {
		size_t j = i + 1;
		for (;;) {
			size_t k = j < n && s[j] == '_' ? j + 1 : j;
			if (k < n && s[k] == '0')
				j = k + 1;
			else
				break;
		}
		return j;
	}
	return i;
}

static int
ident_char(const char *s, size_t n, size_t i, int first, size_t *len)
{
	unsigned char c = (unsigned char)s[i];
	*len = 1;
	if (c < 0x80)
		return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && is_digit((char)c));
	uint32_t cp;
	*len = ju_decode(s + i, n - i, &cp);
	uint16_t f = unicode_flags(cp);
	return (f & UNICODE_LETTER) || (!first && (f & (UNICODE_NUMBER | UNICODE_MARK)));
}

// the tokens inside {{ }} or {% %}
static int
lex_tag(struct parser *P, int block)
{
	const char *s = P->src;
	size_t n = P->n;
	char balance[JINJA_MAX_NEST];
	int nb = 0;
	for (;;) {
		size_t i = P->pos;
		if (i >= n)
			return pfail(P, JINJA_SYNTAX, P->line,
			             "unexpected end of template, expected the end of the tag");
		if (!nb) {
			size_t end = 0;
			int trim = 0;
			if (block) {
				if (s[i] == '+' && i + 2 < n && s[i + 1] == '%' && s[i + 2] == '}')
					end = i + 3;
				else if (s[i] == '-' && i + 2 < n && s[i + 1] == '%' && s[i + 2] == '}')
					end = i + 3, trim = 1;
				else if (s[i] == '%' && i + 1 < n && s[i + 1] == '}') {
					end = i + 2;
					if (end < n && s[end] == '\n')
						end++;
				}
			} else {
				if (s[i] == '-' && i + 2 < n && s[i + 1] == '}' && s[i + 2] == '}')
					end = i + 3, trim = 1;
				else if (s[i] == '}' && i + 1 < n && s[i + 1] == '}')
					end = i + 2;
			}
			if (end) {
				if (trim)
					end = skip_space(s, n, end);
				if (!emit(P, block ? TK_BLOCK_END : TK_VAR_END))
					return -1;
				count_lines(P, i, end);
				P->line_starting = s[end - 1] == '\n';
				P->pos = end;
				return 0;
			}
		}
		size_t k = skip_space(s, n, i);
		if (k > i) {
			count_lines(P, i, k);
			P->line_starting = s[k - 1] == '\n';
			P->pos = k;
			continue;
		}
		P->line_starting = 0;
		struct tok *t;
		int base;
		if ((k = match_float(s, n, i))) {
			char buf[128];
			size_t m = 0;
			for (size_t j = i; j < k && m + 1 < sizeof buf; j++)
				if (s[j] != '_')
					buf[m++] = s[j];
			buf[m] = 0;
			if (!(t = emit(P, TK_FLOAT)))
				return -1;
			t->f = strtod(buf, NULL);
			P->pos = k;
			continue;
		}
		if ((k = match_int(s, n, i, &base)) > i) {
			uint64_t v = 0;
			int over = 0;
			for (size_t j = i + (base == 10 ? 0 : 2); j < k; j++) {
				if (s[j] == '_')
					continue;
				uint64_t d = (uint64_t)xdigit(s[j], base);
				if (v > (UINT64_MAX - d) / (uint64_t)base)
					over = 1;
				v = v * (uint64_t)base + d;
			}
			if (over || v > INT64_MAX)
				return pfail(P, JINJA_UNSUPPORTED, P->line, "an integer literal beyond 64 bits");
			if (!(t = emit(P, TK_INT)))
				return -1;
			t->i = (int64_t)v;
			P->pos = k;
			continue;
		}
		size_t cl;
		if (ident_char(s, n, i, 1, &cl)) {
			size_t j = i + cl;
			while (j < n && ident_char(s, n, j, 0, &cl))
				j += cl;
			if (!(t = emit(P, TK_NAME)) || !(t->s = pstrdup(P, s + i, j - i)))
				return pfail(P, JINJA_LIMIT, P->line, "out of memory");
			t->n = j - i;
			P->pos = j;
			continue;
		}
		if (s[i] == '\'' || s[i] == '"') {
			char q = s[i];
			size_t j = i + 1;
			while (j < n && s[j] != q)
				j += s[j] == '\\' && j + 1 < n ? 2 : 1;
			if (j >= n)
				return pfail(P, JINJA_SYNTAX, P->line, "unexpected char '%c' at %zu", q, i);
			if (!(t = emit(P, TK_STRING)) || unescape(P, s + i + 1, j - i - 1, t) != 0)
				return -1;
			count_lines(P, i, j);
			P->pos = j + 1;
			continue;
		}
		size_t o;
		for (o = 0; o < sizeof ops / sizeof ops[0]; o++) {
			size_t m = strlen(ops[o].s);
			if (i + m <= n && memcmp(s + i, ops[o].s, m) == 0)
				break;
		}
		if (o == sizeof ops / sizeof ops[0])
			return pfail(P, JINJA_SYNTAX, P->line, "unexpected char '%c' at %zu", s[i], i);
		uint8_t ot = ops[o].t;
		if (ot == TK_LBRACE || ot == TK_LPAREN || ot == TK_LBRACKET) {
			if (nb == JINJA_MAX_NEST)
				return pfail(P, JINJA_UNSUPPORTED, P->line, "brackets nested deeper than %d",
				             JINJA_MAX_NEST);
			balance[nb++] = ot == TK_LBRACE ? '}' : ot == TK_LPAREN ? ')' : ']';
		} else if (ot == TK_RBRACE || ot == TK_RPAREN || ot == TK_RBRACKET) {
			char c = s[i];
			if (!nb)
				return pfail(P, JINJA_SYNTAX, P->line, "unexpected '%c'", c);
			if (balance[--nb] != c)
				return pfail(P, JINJA_SYNTAX, P->line, "unexpected '%c', expected '%c'", c,
				             balance[nb]);
		}
		if (!emit(P, ot))
			return -1;
		P->pos = i + strlen(ops[o].s);
	}
}

// {%(-|+|)\s*raw\s*(-%}\s*|%}) at i: the end, or 0
static size_t
match_raw(const char *s, size_t n, size_t i, const char *word, int endtag)
{
	size_t j = i + 2;
	if (j < n && (s[j] == '-' || s[j] == '+'))
		j++;
	j = skip_space(s, n, j);
	size_t w = strlen(word);
	if (j + w > n || memcmp(s + j, word, w) != 0)
		return 0;
	j = skip_space(s, n, j + w);
	if (endtag && j + 2 < n && s[j] == '+' && s[j + 1] == '%' && s[j + 2] == '}')
		return j + 3;
	if (j + 2 < n && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}')
		return skip_space(s, n, j + 3);
	if (j + 1 < n && s[j] == '%' && s[j + 1] == '}') {
		j += 2;
		if (endtag && j < n && s[j] == '\n')
			j++;
		return j;
	}
	return 0;
}

static int
lex(struct parser *P)
{
	const char *s = P->src;
	size_t n = P->n;
	P->line = 1;
	P->line_starting = 1;
	while (P->pos < n) {
		size_t i = P->pos;
		while (i + 1 < n && !(s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')))
			i++;
		if (i + 1 >= n) { // the rest is data
			if (emit_data(P, P->pos, n, 0, 0) != 0)
				return -1;
			break;
		}
		char kind = s[i + 1];
		char sign = i + 2 < n && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
		size_t raw = kind == '%' ? match_raw(s, n, i, "raw", 0) : 0;
		if (emit_data(P, P->pos, i, sign, kind != '{') != 0)
			return -1;
		if (raw) {
			count_lines(P, i, raw);
			P->line_starting = s[raw - 1] == '\n';
			size_t j = raw, end = 0;
			for (; j + 1 < n; j++)
				if (s[j] == '{' && s[j + 1] == '%' && (end = match_raw(s, n, j, "endraw", 1)))
					break;
			if (!end)
				return pfail(P, JINJA_SYNTAX, P->line, "Missing end of raw directive");
			char esign = s[j + 2] == '-' || s[j + 2] == '+' ? s[j + 2] : 0;
			P->pos = raw;
			if (emit_data(P, raw, j, esign, 1) != 0)
				return -1;
			count_lines(P, j, end);
			P->line_starting = s[end - 1] == '\n';
			P->pos = end;
			continue;
		}
		size_t after = i + 2 + (sign != 0);
		if (kind == '#') {
			size_t j = after, end = 0;
			for (; j + 1 < n; j++) {
				if (s[j] == '+' && j + 2 < n && s[j + 1] == '#' && s[j + 2] == '}') {
					end = j + 3;
				} else if (s[j] == '-' && j + 2 < n && s[j + 1] == '#' && s[j + 2] == '}') {
					end = skip_space(s, n, j + 3);
				} else if (s[j] == '#' && s[j + 1] == '}') {
					end = j + 2;
					if (end < n && s[end] == '\n')
						end++;
				}
				if (end)
					break;
			}
			if (!end)
				return pfail(P, JINJA_SYNTAX, P->line, "Missing end of comment tag");
			count_lines(P, i, end);
			P->line_starting = s[end - 1] == '\n';
			P->pos = end;
			continue;
		}
		if (!emit(P, kind == '{' ? TK_VAR_BEGIN : TK_BLOCK_BEGIN))
			return -1;
		P->line_starting = 0;
		P->pos = after;
		if (lex_tag(P, kind == '%') != 0)
			return -1;
	}
	return emit(P, TK_EOF) ? 0 : -1;
}

// --- the parser -------------------------------------------------------------------

static struct tok *
cur(struct parser *P)
{
	return &P->toks[P->cur];
}

static struct tok *
look(struct parser *P)
{
	return &P->toks[P->cur + (P->toks[P->cur].t != TK_EOF)];
}

static struct tok *
next(struct parser *P)
{
	struct tok *t = cur(P);
	if (t->t != TK_EOF)
		P->cur++;
	return t;
}

static int
is_name(struct tok *t, const char *name)
{
	return t->t == TK_NAME && strcmp(t->s, name) == 0;
}

static const char *
tok_desc(struct tok *t)
{
	switch (t->t) {
	case TK_EOF:
		return "end of template";
	case TK_DATA:
		return "template data";
	case TK_VAR_BEGIN:
		return "begin of print statement";
	case TK_VAR_END:
		return "end of print statement";
	case TK_BLOCK_BEGIN:
		return "begin of statement block";
	case TK_BLOCK_END:
		return "end of statement block";
	case TK_NAME:
		return t->s;
	case TK_STRING:
		return "string";
	case TK_INT:
		return "integer";
	case TK_FLOAT:
		return "float";
	default:
		for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
			if (ops[o].t == t->t)
				return ops[o].s;
		return "token";
	}
}

static int
expect(struct parser *P, uint8_t t, const char *what)
{
	if (cur(P)->t != t)
		return pfail(P, JINJA_SYNTAX, cur(P)->line, "expected token '%s', got '%s'", what, tok_desc(cur(P)));
	next(P);
	return 0;
}

static int
expect_name(struct parser *P, const char *name)
{
	if (!is_name(cur(P), name))
		return pfail(P, JINJA_SYNTAX, cur(P)->line, "expected token '%s', got '%s'", name, tok_desc(cur(P)));
	next(P);
	return 0;
}

static struct jnode *
node(struct parser *P, uint8_t k, int line)
{
	struct jnode *n = arena_alloc(P->arena, sizeof *n);
	if (!n) {
		pfail(P, JINJA_LIMIT, line, "out of memory");
		return NULL;
	}
	n->k = k;
	n->line = line;
	return n;
}

// a growable list of nodes, moved into the arena when done
struct nlist {
	struct jnode **v;
	size_t n, cap;
	const char **names;
};

static int
nl_push(struct parser *P, struct nlist *l, struct jnode *x, const char *name)
{
	if (!x)
		return -1;
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 8;
		struct jnode **v = realloc(l->v, cap * sizeof *v);
		const char **nm = realloc(l->names, cap * sizeof *nm);
		if (v)
			l->v = v;
		if (nm)
			l->names = nm;
		if (!v || !nm)
			return pfail(P, JINJA_LIMIT, P->line, "out of memory");
		l->cap = cap;
	}
	l->names[l->n] = name;
	l->v[l->n++] = x;
	return 0;
}

static struct jnode **
nl_done(struct parser *P, struct nlist *l, size_t *n, const char ***names)
{
	struct jnode **v = NULL;
	*n = l->n;
	if (l->n) {
		v = arena_alloc(P->arena, l->n * sizeof *v);
		if (v)
			memcpy(v, l->v, l->n * sizeof *v);
		if (names) {
			*names = arena_alloc(P->arena, l->n * sizeof **names);
			if (*names)
				memcpy(*names, l->names, l->n * sizeof **names);
		}
		if (!v || (names && !*names))
			pfail(P, JINJA_LIMIT, P->line, "out of memory");
	}
	free(l->v);
	free(l->names);
	l->v = NULL;
	l->names = NULL;
	return v;
}

static int
enter(struct parser *P)
{
	if (++P->depth > JINJA_MAX_NEST)
		return pfail(P, JINJA_UNSUPPORTED, cur(P)->line, "expressions or blocks nested deeper than %d",
		             JINJA_MAX_NEST);
	return 0;
}

static struct jnode *parse_expression(struct parser *P, int with_condexpr);
static struct jnode *parse_tuple(struct parser *P, int simplified, int with_condexpr, const char *const *extra_end,
                                 int explicit_parens);
static struct jnode *parse_primary(struct parser *P);
static struct jnode *parse_postfix(struct parser *P, struct jnode *n);
static struct jnode *parse_filter(struct parser *P, struct jnode *n, int start_inline);
static int subparse(struct parser *P, const char *const *end, struct nlist *body);

static struct jnode *
const_node(struct parser *P, struct jv v, int line)
{
	struct jnode *n = node(P, N_CONST, line);
	if (n)
		n->val = v;
	return n;
}

static struct jnode *
parse_call_args(struct parser *P, struct jnode *call)
{
	// call->v positional, call->names/w keywords, c *args, d **kwargs
	int line = cur(P)->line;
	if (expect(P, TK_LPAREN, "(") != 0)
		return NULL;
	struct nlist args = {0}, kw = {0};
	int require_comma = 0;
	while (cur(P)->t != TK_RPAREN) {
		if (require_comma) {
			if (expect(P, TK_COMMA, ",") != 0)
				goto fail;
			if (cur(P)->t == TK_RPAREN)
				break;
		}
		if (cur(P)->t == TK_MUL) {
			if (call->c || call->d)
				goto bad;
			next(P);
			if (!(call->c = parse_expression(P, 1)))
				goto fail;
		} else if (cur(P)->t == TK_POW) {
			if (call->d)
				goto bad;
			next(P);
			if (!(call->d = parse_expression(P, 1)))
				goto fail;
		} else if (cur(P)->t == TK_NAME && look(P)->t == TK_ASSIGN) {
			if (call->d)
				goto bad;
			const char *key = next(P)->s;
			next(P);
			if (nl_push(P, &kw, parse_expression(P, 1), key) != 0)
				goto fail;
		} else {
			if (call->c || call->d || kw.n)
				goto bad;
			if (nl_push(P, &args, parse_expression(P, 1), NULL) != 0)
				goto fail;
		}
		require_comma = 1;
	}
	if (expect(P, TK_RPAREN, ")") != 0)
		goto fail;
	call->v = nl_done(P, &args, &call->nv, NULL);
	call->w = nl_done(P, &kw, &call->nw, &call->names);
	call->nnames = call->nw;
	return P->status == JINJA_OK ? call : NULL;
bad:
	pfail(P, JINJA_SYNTAX, line, "invalid syntax for function call expression");
fail:
	nl_done(P, &args, &call->nv, NULL);
	nl_done(P, &kw, &call->nw, NULL);
	return NULL;
}

static struct jnode *
parse_call(struct parser *P, struct jnode *fn)
{
	struct jnode *n = node(P, N_CALL, cur(P)->line);
	if (!n)
		return NULL;
	n->a = fn;
	return parse_call_args(P, n);
}

static struct jnode *
parse_subscribed(struct parser *P)
{
	int line = cur(P)->line;
	struct jnode *args[3] = {NULL, NULL, NULL};
	if (cur(P)->t == TK_COLON) {
		next(P);
	} else {
		struct jnode *x = parse_expression(P, 1);
		if (!x || cur(P)->t != TK_COLON)
			return x;
		next(P);
		args[0] = x;
	}
	if (cur(P)->t != TK_COLON && cur(P)->t != TK_RBRACKET && cur(P)->t != TK_COMMA)
		if (!(args[1] = parse_expression(P, 1)))
			return NULL;
	if (cur(P)->t == TK_COLON) {
		next(P);
		if (cur(P)->t != TK_RBRACKET && cur(P)->t != TK_COMMA)
			if (!(args[2] = parse_expression(P, 1)))
				return NULL;
	}
	struct jnode *n = node(P, N_SLICE, line);
	if (n) {
		n->a = args[0];
		n->b = args[1];
		n->c = args[2];
	}
	return n;
}

static struct jnode *
parse_subscript(struct parser *P, struct jnode *obj)
{
	struct tok *t = next(P);
	if (t->t == TK_DOT) {
		struct tok *a = next(P);
		if (a->t == TK_NAME) {
			struct jnode *n = node(P, N_ATTR, t->line);
			if (n) {
				n->a = obj;
				n->s = a->s;
				n->slen = a->n;
			}
			return n;
		}
		if (a->t != TK_INT) {
			pfail(P, JINJA_SYNTAX, a->line, "expected name or number");
			return NULL;
		}
		struct jnode *n = node(P, N_ITEM, t->line);
		if (n) {
			n->a = obj;
			n->b = const_node(P, jv_int(a->i), a->line);
		}
		return n && n->b ? n : NULL;
	}
	// '['
	struct nlist args = {0};
	while (cur(P)->t != TK_RBRACKET) {
		if (args.n && expect(P, TK_COMMA, ",") != 0)
			goto fail;
		if (nl_push(P, &args, parse_subscribed(P), NULL) != 0)
			goto fail;
	}
	if (expect(P, TK_RBRACKET, "]") != 0)
		goto fail;
	struct jnode *n = node(P, N_ITEM, t->line);
	if (!n)
		goto fail;
	n->a = obj;
	if (args.n == 1) {
		n->b = args.v[0];
		nl_done(P, &args, &n->nv, NULL);
		n->nv = 0;
	} else {
		struct jnode *tu = node(P, N_TUPLE, t->line);
		if (!tu)
			goto fail;
		tu->v = nl_done(P, &args, &tu->nv, NULL);
		n->b = tu;
	}
	return P->status == JINJA_OK ? n : NULL;
fail:
	nl_done(P, &args, &(size_t){0}, NULL);
	return NULL;
}

static struct jnode *
parse_postfix(struct parser *P, struct jnode *n)
{
	while (n) {
		uint8_t t = cur(P)->t;
		if (t == TK_DOT || t == TK_LBRACKET)
			n = parse_subscript(P, n);
		else if (t == TK_LPAREN)
			n = parse_call(P, n);
		else
			break;
	}
	return n;
}

static const char *
dotted_name(struct parser *P)
{
	struct tok *t = cur(P);
	if (expect(P, TK_NAME, "name") != 0)
		return NULL;
	const char *name = t->s;
	while (cur(P)->t == TK_DOT) {
		next(P);
		struct tok *u = cur(P);
		if (expect(P, TK_NAME, "name") != 0)
			return NULL;
		size_t a = strlen(name), b = strlen(u->s);
		char *s = arena_alloc(P->arena, a + b + 2);
		if (!s)
			return NULL;
		memcpy(s, name, a);
		s[a] = '.';
		memcpy(s + a + 1, u->s, b + 1);
		name = s;
	}
	return name;
}

static struct jnode *
parse_filter(struct parser *P, struct jnode *operand, int start_inline)
{
	struct jnode *n = operand;
	while (cur(P)->t == TK_PIPE || start_inline) {
		if (!start_inline)
			next(P);
		int line = cur(P)->line;
		const char *name = dotted_name(P);
		if (!name)
			return NULL;
		struct jnode *f = node(P, N_FILTER, line);
		if (!f)
			return NULL;
		f->a = n;
		f->s = name;
		if (cur(P)->t == TK_LPAREN && !parse_call_args(P, f))
			return NULL;
		n = f;
		start_inline = 0;
	}
	return n;
}

static struct jnode *
parse_test(struct parser *P, struct jnode *operand)
{
	struct tok *is = next(P);
	int negated = 0;
	if (is_name(cur(P), "not")) {
		next(P);
		negated = 1;
	}
	const char *name = dotted_name(P);
	if (!name)
		return NULL;
	struct jnode *t = node(P, N_TEST, is->line);
	if (!t)
		return NULL;
	t->a = operand;
	t->s = name;
	uint8_t c = cur(P)->t;
	if (c == TK_LPAREN) {
		if (!parse_call_args(P, t))
			return NULL;
	} else if ((c == TK_NAME || c == TK_STRING || c == TK_INT || c == TK_FLOAT || c == TK_LBRACKET ||
	            c == TK_LBRACE) &&
	           !is_name(cur(P), "else") && !is_name(cur(P), "or") && !is_name(cur(P), "and")) {
		if (is_name(cur(P), "is")) {
			pfail(P, JINJA_SYNTAX, cur(P)->line, "You cannot chain multiple tests with is");
			return NULL;
		}
		struct jnode *arg = parse_postfix(P, parse_primary(P));
		if (!arg)
			return NULL;
		t->v = arena_alloc(P->arena, sizeof *t->v);
		if (!t->v)
			return NULL;
		t->v[0] = arg;
		t->nv = 1;
	}
	if (negated) {
		struct jnode *n = node(P, N_NOT, is->line);
		if (n)
			n->a = t;
		return n;
	}
	return t;
}

static struct jnode *
parse_filter_expr(struct parser *P, struct jnode *n)
{
	while (n) {
		struct tok *t = cur(P);
		if (t->t == TK_PIPE)
			n = parse_filter(P, n, 0);
		else if (is_name(t, "is"))
			n = parse_test(P, n);
		else if (t->t == TK_LPAREN)
			n = parse_call(P, n);
		else
			break;
	}
	return n;
}

static struct jnode *
parse_unary(struct parser *P, int with_filter)
{
	if (enter(P) != 0)
		return NULL;
	struct tok *t = cur(P);
	struct jnode *n;
	if (t->t == TK_SUB || t->t == TK_ADD) {
		next(P);
		n = node(P, t->t == TK_SUB ? N_NEG : N_POS, t->line);
		if (n && !(n->a = parse_unary(P, 0)))
			n = NULL;
	} else {
		n = parse_primary(P);
	}
	n = parse_postfix(P, n);
	if (with_filter)
		n = parse_filter_expr(P, n);
	P->depth--;
	return n;
}

static struct jnode *
parse_list(struct parser *P)
{
	struct jnode *n = node(P, N_LIST, next(P)->line);
	struct nlist items = {0};
	if (!n)
		return NULL;
	while (cur(P)->t != TK_RBRACKET) {
		if (items.n && expect(P, TK_COMMA, ",") != 0)
			goto fail;
		if (cur(P)->t == TK_RBRACKET)
			break;
		if (nl_push(P, &items, parse_expression(P, 1), NULL) != 0)
			goto fail;
	}
	if (expect(P, TK_RBRACKET, "]") != 0)
		goto fail;
	n->v = nl_done(P, &items, &n->nv, NULL);
	return P->status == JINJA_OK ? n : NULL;
fail:
	nl_done(P, &items, &n->nv, NULL);
	return NULL;
}

static struct jnode *
parse_dict(struct parser *P)
{
	struct jnode *n = node(P, N_DICT, next(P)->line);
	struct nlist keys = {0}, vals = {0};
	if (!n)
		return NULL;
	while (cur(P)->t != TK_RBRACE) {
		if (keys.n && expect(P, TK_COMMA, ",") != 0)
			goto fail;
		if (cur(P)->t == TK_RBRACE)
			break;
		if (nl_push(P, &keys, parse_expression(P, 1), NULL) != 0 || expect(P, TK_COLON, ":") != 0 ||
		    nl_push(P, &vals, parse_expression(P, 1), NULL) != 0)
			goto fail;
	}
	if (expect(P, TK_RBRACE, "}") != 0)
		goto fail;
	n->v = nl_done(P, &keys, &n->nv, NULL);
	n->w = nl_done(P, &vals, &n->nw, NULL);
	return P->status == JINJA_OK ? n : NULL;
fail:
	nl_done(P, &keys, &n->nv, NULL);
	nl_done(P, &vals, &n->nw, NULL);
	return NULL;
}

static struct jnode *
parse_primary(struct parser *P)
{
	struct tok *t = cur(P);
	if (t->t == TK_NAME) {
		next(P);
		if (!strcmp(t->s, "true") || !strcmp(t->s, "True"))
			return const_node(P, jv_bool(1), t->line);
		if (!strcmp(t->s, "false") || !strcmp(t->s, "False"))
			return const_node(P, jv_bool(0), t->line);
		if (!strcmp(t->s, "none") || !strcmp(t->s, "None"))
			return const_node(P, JV_NONE, t->line);
		struct jnode *n = node(P, N_NAME, t->line);
		if (n) {
			n->s = t->s;
			n->slen = t->n;
		}
		return n;
	}
	if (t->t == TK_STRING) {
		// adjacent strings concatenate
		size_t total = 0, k = P->cur;
		while (P->toks[k].t == TK_STRING)
			total += P->toks[k++].n;
		struct jstr *s = jstr_new(P->R, total);
		if (!s) {
			pfail(P, JINJA_LIMIT, t->line, "out of memory");
			return NULL;
		}
		size_t o = 0;
		while (cur(P)->t == TK_STRING) {
			struct tok *u = next(P);
			memcpy(s->p + o, u->s, u->n);
			o += u->n;
		}
		return const_node(P, (struct jv){.t = JT_STR, .o = &s->h}, t->line);
	}
	if (t->t == TK_INT) {
		next(P);
		return const_node(P, jv_int(t->i), t->line);
	}
	if (t->t == TK_FLOAT) {
		next(P);
		return const_node(P, jv_float(t->f), t->line);
	}
	if (t->t == TK_LPAREN) {
		next(P);
		struct jnode *n = parse_tuple(P, 0, 1, NULL, 1);
		if (!n || expect(P, TK_RPAREN, ")") != 0)
			return NULL;
		return n;
	}
	if (t->t == TK_LBRACKET)
		return parse_list(P);
	if (t->t == TK_LBRACE)
		return parse_dict(P);
	pfail(P, JINJA_SYNTAX, t->line, "unexpected '%s'", tok_desc(t));
	return NULL;
}

static struct jnode *
binary(struct parser *P, uint8_t k, int op, struct jnode *a, struct jnode *b, int line)
{
	if (!a || !b)
		return NULL;
	struct jnode *n = node(P, k, line);
	if (n) {
		n->op = (uint8_t)op;
		n->a = a;
		n->b = b;
	}
	return n;
}

static struct jnode *
parse_pow(struct parser *P)
{
	struct jnode *l = parse_unary(P, 1);
	while (l && cur(P)->t == TK_POW) {
		int line = next(P)->line;
		l = binary(P, N_BIN, OP_POW, l, parse_unary(P, 1), line);
	}
	return l;
}

static struct jnode *
parse_math2(struct parser *P)
{
	struct jnode *l = parse_pow(P);
	for (;;) {
		uint8_t t = cur(P)->t;
		int op = t == TK_MUL        ? OP_MUL
		         : t == TK_DIV      ? OP_DIV
		         : t == TK_FLOORDIV ? OP_FLOORDIV
		         : t == TK_MOD      ? OP_MOD
		                            : -1;
		if (!l || op < 0)
			return l;
		int line = next(P)->line;
		l = binary(P, N_BIN, op, l, parse_pow(P), line);
	}
}

static struct jnode *
parse_concat(struct parser *P)
{
	int line = cur(P)->line;
	struct jnode *first = parse_math2(P);
	if (!first || cur(P)->t != TK_TILDE)
		return first;
	struct nlist args = {0};
	nl_push(P, &args, first, NULL);
	while (cur(P)->t == TK_TILDE) {
		next(P);
		if (nl_push(P, &args, parse_math2(P), NULL) != 0) {
			nl_done(P, &args, &(size_t){0}, NULL);
			return NULL;
		}
	}
	struct jnode *n = node(P, N_CONCAT, line);
	if (!n) {
		nl_done(P, &args, &(size_t){0}, NULL);
		return NULL;
	}
	n->v = nl_done(P, &args, &n->nv, NULL);
	return P->status == JINJA_OK ? n : NULL;
}

static struct jnode *
parse_math1(struct parser *P)
{
	struct jnode *l = parse_concat(P);
	while (l && (cur(P)->t == TK_ADD || cur(P)->t == TK_SUB)) {
		int op = cur(P)->t == TK_ADD ? OP_ADD : OP_SUB;
		int line = next(P)->line;
		l = binary(P, N_BIN, op, l, parse_concat(P), line);
	}
	return l;
}

static struct jnode *
parse_compare(struct parser *P)
{
	int line = cur(P)->line;
	struct jnode *e = parse_math1(P);
	if (!e)
		return NULL;
	struct nlist operands = {0};
	uint8_t opv[64];
	for (;;) {
		uint8_t t = cur(P)->t;
		int op = t == TK_EQ     ? OP_EQ
		         : t == TK_NE   ? OP_NE
		         : t == TK_LT   ? OP_LT
		         : t == TK_LTEQ ? OP_LE
		         : t == TK_GT   ? OP_GT
		         : t == TK_GTEQ ? OP_GE
		                        : -1;
		if (op >= 0) {
			next(P);
		} else if (is_name(cur(P), "in")) {
			next(P);
			op = OP_IN;
		} else if (is_name(cur(P), "not") && is_name(look(P), "in")) {
			next(P);
			next(P);
			op = OP_NOTIN;
		} else {
			break;
		}
		if (operands.n == sizeof opv) {
			pfail(P, JINJA_UNSUPPORTED, line, "more than %zu chained comparisons", sizeof opv);
			break;
		}
		opv[operands.n] = (uint8_t)op;
		if (nl_push(P, &operands, parse_math1(P), NULL) != 0)
			break;
	}
	if (P->status != JINJA_OK) {
		nl_done(P, &operands, &(size_t){0}, NULL);
		return NULL;
	}
	if (!operands.n)
		return e;
	struct jnode *n = node(P, N_CMP, line);
	if (!n || !(n->ops = arena_alloc(P->arena, operands.n))) {
		nl_done(P, &operands, &(size_t){0}, NULL);
		return NULL;
	}
	memcpy(n->ops, opv, operands.n);
	n->a = e;
	n->v = nl_done(P, &operands, &n->nv, NULL);
	return P->status == JINJA_OK ? n : NULL;
}

static struct jnode *
parse_not(struct parser *P)
{
	if (is_name(cur(P), "not")) {
		int line = next(P)->line;
		if (enter(P) != 0)
			return NULL;
		struct jnode *n = node(P, N_NOT, line);
		if (n && !(n->a = parse_not(P)))
			n = NULL;
		P->depth--;
		return n;
	}
	return parse_compare(P);
}

static struct jnode *
parse_and(struct parser *P)
{
	struct jnode *l = parse_not(P);
	while (l && is_name(cur(P), "and")) {
		int line = next(P)->line;
		l = binary(P, N_AND, 0, l, parse_not(P), line);
	}
	return l;
}

static struct jnode *
parse_or(struct parser *P)
{
	struct jnode *l = parse_and(P);
	while (l && is_name(cur(P), "or")) {
		int line = next(P)->line;
		l = binary(P, N_OR, 0, l, parse_and(P), line);
	}
	return l;
}

static struct jnode *
parse_condexpr(struct parser *P)
{
	struct jnode *e1 = parse_or(P);
	while (e1 && is_name(cur(P), "if")) {
		int line = next(P)->line;
		if (enter(P) != 0)
			return NULL;
		struct jnode *e2 = parse_or(P), *e3 = NULL;
		if (e2 && is_name(cur(P), "else")) {
			next(P);
			e3 = parse_condexpr(P);
			if (!e3)
				e2 = NULL;
		}
		P->depth--;
		if (!e2)
			return NULL;
		struct jnode *n = node(P, N_COND, line);
		if (!n)
			return NULL;
		n->a = e2;
		n->b = e1;
		n->c = e3;
		e1 = n;
	}
	return e1;
}

static struct jnode *
parse_expression(struct parser *P, int with_condexpr)
{
	if (enter(P) != 0)
		return NULL;
	struct jnode *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
	P->depth--;
	return n;
}

static int
is_tuple_end(struct parser *P, const char *const *extra)
{
	uint8_t t = cur(P)->t;
	if (t == TK_VAR_END || t == TK_BLOCK_END || t == TK_RPAREN)
		return 1;
	for (; extra && *extra; extra++)
		if (is_name(cur(P), *extra))
			return 1;
	return 0;
}

static struct jnode *
parse_tuple(struct parser *P, int simplified, int with_condexpr, const char *const *extra_end, int explicit_parens)
{
	int line = cur(P)->line;
	struct nlist args = {0};
	int is_tuple = 0;
	for (;;) {
		if (args.n && expect(P, TK_COMMA, ",") != 0)
			goto fail;
		if (is_tuple_end(P, extra_end))
			break;
		struct jnode *x = simplified ? parse_primary(P) : parse_expression(P, with_condexpr);
		if (nl_push(P, &args, x, NULL) != 0)
			goto fail;
		if (cur(P)->t == TK_COMMA)
			is_tuple = 1;
		else
			break;
	}
	if (!is_tuple) {
		if (args.n) {
			struct jnode *x = args.v[0];
			nl_done(P, &args, &(size_t){0}, NULL);
			return x;
		}
		if (!explicit_parens) {
			pfail(P, JINJA_SYNTAX, cur(P)->line, "Expected an expression, got '%s'", tok_desc(cur(P)));
			goto fail;
		}
	}
	struct jnode *n = node(P, N_TUPLE, line);
	if (!n)
		goto fail;
	n->v = nl_done(P, &args, &n->nv, NULL);
	return P->status == JINJA_OK ? n : NULL;
fail:
	nl_done(P, &args, &(size_t){0}, NULL);
	return NULL;
}

// --- statements --------------------------------------------------------------------

static int
can_assign(struct jnode *n)
{
	if (n->k == N_NAME)
		return strcmp(n->s, "true") && strcmp(n->s, "false") && strcmp(n->s, "none") && strcmp(n->s, "True") &&
		       strcmp(n->s, "False") && strcmp(n->s, "None");
	if (n->k == N_TUPLE) {
		for (size_t i = 0; i < n->nv; i++)
			if (!can_assign(n->v[i]))
				return 0;
		return 1;
	}
	return n->k == N_NSREF;
}

static struct jnode *
parse_assign_target(struct parser *P, int with_tuple, int name_only, const char *const *extra_end, int with_ns)
{
	struct jnode *t;
	if (with_ns && look(P)->t == TK_DOT) {
		struct tok *a = cur(P);
		if (expect(P, TK_NAME, "name") != 0)
			return NULL;
		next(P);
		struct tok *b = cur(P);
		if (expect(P, TK_NAME, "name") != 0)
			return NULL;
		if (!(t = node(P, N_NSREF, a->line)))
			return NULL;
		t->s = a->s;
		t->slen = a->n;
		t->s2 = b->s;
	} else if (name_only) {
		struct tok *a = cur(P);
		if (expect(P, TK_NAME, "name") != 0)
			return NULL;
		if (!(t = node(P, N_NAME, a->line)))
			return NULL;
		t->s = a->s;
		t->slen = a->n;
	} else {
		t = with_tuple ? parse_tuple(P, 1, 1, extra_end, 0) : parse_primary(P);
		if (!t)
			return NULL;
	}
	if (!can_assign(t)) {
		pfail(P, JINJA_SYNTAX, t->line, "can't assign to this expression");
		return NULL;
	}
	return t;
}

static int
parse_statements(struct parser *P, const char *const *end, int drop_needle, struct jnode ***v, size_t *n)
{
	if (cur(P)->t == TK_COLON)
		next(P);
	if (expect(P, TK_BLOCK_END, "end of statement block") != 0)
		return -1;
	struct nlist body = {0};
	if (subparse(P, end, &body) != 0) {
		nl_done(P, &body, n, NULL);
		return -1;
	}
	*v = nl_done(P, &body, n, NULL);
	if (cur(P)->t == TK_EOF)
		return pfail(P, JINJA_SYNTAX, cur(P)->line, "Unexpected end of template, expected '%s'", end[0]);
	if (drop_needle)
		next(P);
	return P->status == JINJA_OK ? 0 : -1;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR_ONLY[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF_ONLY[] = {"endif", NULL};
static const char *const END_SET[] = {"endset", NULL};
static const char *const END_MACRO[] = {"endmacro", NULL};
static const char *const END_CALL[] = {"endcall", NULL};
static const char *const END_FILTER[] = {"endfilter", NULL};
static const char *const END_WITH[] = {"endwith", NULL};
static const char *const END_GEN[] = {"endgeneration", NULL};
static const char *const IN_END[] = {"in", NULL};
static const char *const RECURSIVE_END[] = {"recursive", NULL};

static struct jnode *
parse_for(struct parser *P)
{
	struct jnode *n = node(P, N_FOR, next(P)->line);
	if (!n || !(n->a = parse_assign_target(P, 1, 0, IN_END, 0)) || expect_name(P, "in") != 0 ||
	    !(n->b = parse_tuple(P, 0, 0, RECURSIVE_END, 0)))
		return NULL;
	if (is_name(cur(P), "if")) {
		next(P);
		if (!(n->c = parse_expression(P, 1)))
			return NULL;
	}
	if (is_name(cur(P), "recursive")) {
		return pfail(P, JINJA_UNSUPPORTED, cur(P)->line, "recursive for loops"), NULL;
	}
	P->loops++;
	int rc = parse_statements(P, END_FOR, 0, &n->v, &n->nv);
	P->loops--;
	if (rc != 0)
		return NULL;
	if (is_name(next(P), "else") && parse_statements(P, END_FOR_ONLY, 1, &n->w, &n->nw) != 0)
		return NULL;
	return n;
}

static struct jnode *
parse_if(struct parser *P)
{
	struct jnode *top = node(P, N_IF, next(P)->line), *n = top;
	while (n) {
		if (!(n->a = parse_tuple(P, 0, 0, NULL, 0)) || parse_statements(P, END_IF, 0, &n->v, &n->nv) != 0)
			return NULL;
		struct tok *t = next(P);
		if (is_name(t, "elif")) {
			// an elif is an N_IF marked op 1 alone in the else branch;
			// the evaluator walks such chains in a loop
			struct jnode *e = node(P, N_IF, cur(P)->line);
			if (!e || !(n->w = arena_alloc(P->arena, sizeof *n->w)))
				return NULL;
			e->op = 1;
			n->w[0] = e;
			n->nw = 1;
			n = e;
			continue;
		}
		if (is_name(t, "else") && parse_statements(P, END_IF_ONLY, 1, &n->w, &n->nw) != 0)
			return NULL;
		break;
	}
	return top;
}

static struct jnode *
parse_set(struct parser *P)
{
	struct jnode *n = node(P, N_SET, next(P)->line);
	if (!n || !(n->a = parse_assign_target(P, 1, 0, NULL, 1)))
		return NULL;
	if (cur(P)->t == TK_ASSIGN) {
		next(P);
		return (n->b = parse_tuple(P, 0, 1, NULL, 0)) ? n : NULL;
	}
	n->k = N_SETBLOCK;
	if (cur(P)->t == TK_PIPE && !(n->b = parse_filter(P, NULL, 0)))
		return NULL;
	return parse_statements(P, END_SET, 1, &n->v, &n->nv) == 0 ? n : NULL;
}

static int
parse_signature(struct parser *P, struct jnode *n)
{
	struct nlist defaults = {0};
	const char *names[256];
	size_t nn = 0;
	if (expect(P, TK_LPAREN, "(") != 0)
		return -1;
	while (cur(P)->t != TK_RPAREN) {
		if (nn && expect(P, TK_COMMA, ",") != 0)
			goto fail;
		struct jnode *a = parse_assign_target(P, 0, 1, NULL, 0);
		if (!a)
			goto fail;
		if (nn == sizeof names / sizeof names[0]) {
			pfail(P, JINJA_UNSUPPORTED, a->line, "more than %zu parameters", nn);
			goto fail;
		}
		names[nn++] = a->s;
		if (cur(P)->t == TK_ASSIGN) {
			next(P);
			if (nl_push(P, &defaults, parse_expression(P, 1), NULL) != 0)
				goto fail;
		} else if (defaults.n) {
			pfail(P, JINJA_SYNTAX, a->line, "non-default argument follows default argument");
			goto fail;
		}
	}
	if (expect(P, TK_RPAREN, ")") != 0)
		goto fail;
	n->w = nl_done(P, &defaults, &n->nw, NULL);
	n->nnames = nn;
	if (nn && (n->names = arena_alloc(P->arena, nn * sizeof *n->names)))
		memcpy(n->names, names, nn * sizeof *names);
	return P->status == JINJA_OK ? 0 : -1;
fail:
	nl_done(P, &defaults, &(size_t){0}, NULL);
	return -1;
}

static struct jnode *
parse_macro(struct parser *P)
{
	struct jnode *n = node(P, N_MACRO, next(P)->line), *name;
	if (!n || !(name = parse_assign_target(P, 0, 1, NULL, 0)))
		return NULL;
	n->s = name->s;
	n->slen = name->slen;
	if (parse_signature(P, n) != 0)
		return NULL;
	int loops = P->loops;
	P->loops = 0;
	P->in_macro++;
	int rc = parse_statements(P, END_MACRO, 1, &n->v, &n->nv);
	P->in_macro--;
	P->loops = loops;
	return rc == 0 ? n : NULL;
}

static struct jnode *
parse_call_block(struct parser *P)
{
	struct jnode *n = node(P, N_CALLBLOCK, next(P)->line);
	if (!n)
		return NULL;
	if (cur(P)->t == TK_LPAREN && parse_signature(P, n) != 0)
		return NULL;
	if (!(n->a = parse_expression(P, 1)))
		return NULL;
	if (n->a->k != N_CALL)
		return pfail(P, JINJA_SYNTAX, n->line, "expected call"), NULL;
	int loops = P->loops;
	P->loops = 0;
	int rc = parse_statements(P, END_CALL, 1, &n->v, &n->nv);
	P->loops = loops;
	return rc == 0 ? n : NULL;
}

static struct jnode *
parse_with(struct parser *P)
{
	struct jnode *n = node(P, N_WITH, next(P)->line);
	struct nlist pairs = {0};
	if (!n)
		return NULL;
	while (cur(P)->t != TK_BLOCK_END) {
		if (pairs.n && expect(P, TK_COMMA, ",") != 0)
			goto fail;
		if (nl_push(P, &pairs, parse_assign_target(P, 1, 0, NULL, 0), NULL) != 0 ||
		    expect(P, TK_ASSIGN, "=") != 0 || nl_push(P, &pairs, parse_expression(P, 1), NULL) != 0)
			goto fail;
	}
	n->w = nl_done(P, &pairs, &n->nw, NULL);
	return parse_statements(P, END_WITH, 1, &n->v, &n->nv) == 0 ? n : NULL;
fail:
	nl_done(P, &pairs, &(size_t){0}, NULL);
	return NULL;
}

static struct jnode *
parse_statement(struct parser *P)
{
	struct tok *t = cur(P);
	if (t->t != TK_NAME)
		return pfail(P, JINJA_SYNTAX, t->line, "tag name expected"), NULL;
	if (enter(P) != 0)
		return NULL;
	struct jnode *n = NULL;
	const char *s = t->s;
	if (!strcmp(s, "for"))
		n = parse_for(P);
	else if (!strcmp(s, "if"))
		n = parse_if(P);
	else if (!strcmp(s, "set"))
		n = parse_set(P);
	else if (!strcmp(s, "macro"))
		n = parse_macro(P);
	else if (!strcmp(s, "call"))
		n = parse_call_block(P);
	else if (!strcmp(s, "filter")) {
		n = node(P, N_FILTERBLOCK, next(P)->line);
		if (n && (!(n->a = parse_filter(P, NULL, 1)) || parse_statements(P, END_FILTER, 1, &n->v, &n->nv) != 0))
			n = NULL;
	} else if (!strcmp(s, "with"))
		n = parse_with(P);
	else if (!strcmp(s, "print")) {
		next(P);
		struct nlist outs = {0};
		while (cur(P)->t != TK_BLOCK_END) {
			if (outs.n && expect(P, TK_COMMA, ",") != 0)
				break;
			struct jnode *o = node(P, N_OUT, cur(P)->line);
			if (!o || !(o->a = parse_expression(P, 1)) || nl_push(P, &outs, o, NULL) != 0)
				break;
		}
		n = node(P, N_BODY, t->line);
		if (n)
			n->v = nl_done(P, &outs, &n->nv, NULL);
		else
			nl_done(P, &outs, &(size_t){0}, NULL);
		if (P->status != JINJA_OK)
			n = NULL;
		if (n)
			n->op = 1; // no scope of its own
	} else if (!strcmp(s, "break") || !strcmp(s, "continue")) {
		next(P);
		if (!P->loops)
			pfail(P, JINJA_SYNTAX, t->line, "'%s' outside a loop", s);
		else
			n = node(P, s[0] == 'b' ? N_BREAK : N_CONTINUE, t->line);
	} else if (!strcmp(s, "generation")) {
		n = node(P, N_BODY, next(P)->line);
		if (n && parse_statements(P, END_GEN, 1, &n->v, &n->nv) != 0)
			n = NULL;
	} else if (!strcmp(s, "block") || !strcmp(s, "extends") || !strcmp(s, "include") || !strcmp(s, "import") ||
	           !strcmp(s, "from") || !strcmp(s, "autoescape") || !strcmp(s, "do")) {
		pfail(P, JINJA_UNSUPPORTED, t->line, "the '%s' tag", s);
	} else {
		pfail(P, JINJA_SYNTAX, t->line, "Encountered unknown tag '%s'", s);
	}
	P->depth--;
	return n;
}

static int
in_list(struct tok *t, const char *const *end)
{
	for (; end && *end; end++)
		if (is_name(t, *end))
			return 1;
	return 0;
}

static int
subparse(struct parser *P, const char *const *end, struct nlist *body)
{
	while (cur(P)->t != TK_EOF) {
		struct tok *t = cur(P);
		if (t->t == TK_DATA) {
			struct jnode *d = node(P, N_DATA, t->line);
			if (!d || !(d->s = pstrdup(P, t->s, t->n)))
				return pfail(P, JINJA_LIMIT, t->line, "out of memory");
			d->slen = t->n;
			if (nl_push(P, body, d, NULL) != 0)
				return -1;
			next(P);
		} else if (t->t == TK_VAR_BEGIN) {
			next(P);
			struct jnode *o = node(P, N_OUT, t->line);
			if (!o || !(o->a = parse_tuple(P, 0, 1, NULL, 0)) ||
			    expect(P, TK_VAR_END, "end of print statement") != 0)
				return -1;
			if (nl_push(P, body, o, NULL) != 0)
				return -1;
		} else if (t->t == TK_BLOCK_BEGIN) {
			next(P);
			if (end && in_list(cur(P), end))
				return 0;
			struct jnode *s = parse_statement(P);
			if (!s || nl_push(P, body, s, NULL) != 0 ||
			    expect(P, TK_BLOCK_END, "end of statement block") != 0)
				return -1;
		} else {
			return pfail(P, JINJA_SYNTAX, t->line, "unexpected '%s'", tok_desc(t));
		}
	}
	return 0;
}

// jinja2 refuses a template that names an unknown filter or test when it
// compiles it, except inside an if or a conditional expression (a "soft"
// frame, until a loop, macro or block opens a frame of its own), where the
// error waits until the filter runs
static int
check_names(struct parser *P, const struct jnode *n, int soft, int depth)
{
	if (!n || depth > 4 * JINJA_MAX_NEST)
		return 0;
	if ((n->k == N_FILTER && !jfilter_known(n->s)) || (n->k == N_TEST && !jtest_known(n->s))) {
		if (!soft)
			return pfail(P, JINJA_SYNTAX, n->line, "No %s named '%s'.",
			             n->k == N_FILTER ? "filter" : "test", n->s);
	}
	int inner = soft; // for the children that stay in this frame
	int body = soft;  // for the bodies
	switch (n->k) {
	case N_IF:
	case N_COND:
		inner = body = 1;
		break;
	case N_FOR:
	case N_MACRO:
	case N_CALLBLOCK:
	case N_FILTERBLOCK:
	case N_WITH:
	case N_SETBLOCK:
		body = 0;
		break;
	case N_BODY:
		body = n->op == 1 ? soft : 0;
		break;
	default:
		break;
	}
	// children: a..d are expressions of this frame except where a block's
	// own frame evaluates them (the loop test, the filters of blocks)
	int sa = inner, sb = inner, sc = inner;
	if (n->k == N_FOR)
		sc = 0;
	if (n->k == N_FILTERBLOCK)
		sa = 0;
	if (n->k == N_SETBLOCK)
		sb = 0;
	if (check_names(P, n->a, sa, depth + 1) || check_names(P, n->b, sb, depth + 1) ||
	    check_names(P, n->c, sc, depth + 1) || check_names(P, n->d, inner, depth + 1))
		return -1;
	for (size_t i = 0; i < n->nv; i++)
		if (check_names(P, n->v[i], n->k >= N_DATA ? body : inner, depth + 1))
			return -1;
	for (size_t i = 0; i < n->nw; i++)
		if (check_names(P, n->w[i],
		                n->k == N_IF || n->k == N_FOR ? body
		                : n->k == N_MACRO             ? 0
		                                              : inner,
		                depth + 1))
			return -1;
	return 0;
}

// the source with \r\n and \r as \n, and one trailing newline dropped
static char *
normalise(const char *src, size_t n, size_t *out_n)
{
	char *s = malloc(n + 1), *o = s;
	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (src[i] == '\r') {
			*o++ = '\n';
			if (i + 1 < n && src[i + 1] == '\n')
				i++;
		} else {
			*o++ = src[i];
		}
	}
	if (o > s && o[-1] == '\n')
		o--;
	*o = 0;
	*out_n = (size_t)(o - s);
	return s;
}

struct jinja_tmpl *
jinja_parse(const char *src, size_t n, enum jinja_status *status, char *err)
{
	enum jinja_status dummy;
	if (!status)
		status = &dummy;
	*status = JINJA_OK;
	struct jinja_tmpl *t = calloc(1, sizeof *t);
	if (!t) {
		*status = JINJA_LIMIT;
		ad_err(err, "out of memory");
		return NULL;
	}
	struct jrender R0 = {.status = JINJA_OK};
	R0.heap.immortal = 1; // constants; moved into the template at the end
	struct parser P = {.arena = &t->arena, .R = &R0, .status = JINJA_OK, .err = err};
	char *s = NULL;
	if (!unicode_valid(src, n)) {
		pfail(&P, JINJA_SYNTAX, 1, "the template is not valid UTF-8");
		goto done;
	}
	if (memchr(src, 0, n)) {
		pfail(&P, JINJA_UNSUPPORTED, 1, "a NUL byte in the template");
		goto done;
	}
	s = normalise(src, n, &P.n);
	if (!s) {
		pfail(&P, JINJA_LIMIT, 1, "out of memory");
		goto done;
	}
	P.src = s;
	if (lex(&P) != 0)
		goto done;
	struct nlist body = {0};
	int rc = subparse(&P, NULL, &body);
	t->root = node(&P, N_BODY, 1);
	if (t->root)
		t->root->v = nl_done(&P, &body, &t->root->nv, NULL);
	else
		nl_done(&P, &body, &(size_t){0}, NULL);
	if (rc == 0 && t->root)
		check_names(&P, t->root, 0, 0);
	if (R0.status != JINJA_OK && P.status == JINJA_OK)
		pfail(&P, R0.status, 1, "%s", R0.err);
done:
	jheap_move(&t->consts, &R0.heap);
	free(s);
	free(P.toks);
	if (P.status != JINJA_OK) {
		*status = P.status;
		jinja_free(t);
		return NULL;
	}
	return t;
}

void
jinja_free(struct jinja_tmpl *t)
{
	if (!t)
		return;
	jheap_free_all(&t->consts);
	arena_free(t->arena);
	free(t);
}
