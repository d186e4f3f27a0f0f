// jinja-lib.c - what templates call: jinja2's filters and tests, the
// methods of Python's str, dict and list that templates use, the loop
// object, and the globals (range, namespace, dict, raise_exception,
// strftime_now). Each follows its Python original's arguments and result,
// generators included (select, map, items, unique, reverse return values
// that have no length and are always true, as in jinja2). A filter or test
// jinja2 has but this file does not, or a Python method it does not
// implement, is JINJA_UNSUPPORTED; an unknown name is an error as in jinja2.
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja-impl.h"
#include "unicode.h"

// --- arguments --------------------------------------------------------------------

int
jargs_bind(struct jrender *R, const char *what, struct jargs *a, const char *const *names, struct jv *vals, int *given)
{
	size_t n = 0;
	while (names[n])
		n++;
	for (size_t i = 0; i < n; i++) {
		vals[i] = JV_UNDEF;
		given[i] = 0;
	}
	if (a->npos > n)
		return jr_fail(R, JINJA_ERROR, "%s takes at most %zu arguments (%zu given)", what, n, a->npos);
	for (size_t i = 0; i < a->npos; i++) {
		vals[i] = a->pos[i];
		given[i] = 1;
	}
	for (size_t k = 0; k < a->nkw; k++) {
		size_t i;
		for (i = 0; i < n && strcmp(names[i], a->kw[k]); i++)
			;
		if (i == n)
			return jr_fail(R, JINJA_ERROR, "%s got an unexpected keyword argument '%s'", what, a->kw[k]);
		if (given[i])
			return jr_fail(R, JINJA_ERROR, "%s got multiple values for argument '%s'", what, a->kw[k]);
		vals[i] = a->kwv[k];
		given[i] = 1;
	}
	return 0;
}

#define BIND(what, ...)                                                                                                \
	static const char *const names_[] = {__VA_ARGS__, NULL};                                                       \
	struct jv arg[sizeof names_ / sizeof names_[0]];                                                               \
	int has[sizeof names_ / sizeof names_[0]];                                                                     \
	if (jargs_bind(R, what, a, names_, arg, has) != 0)                                                             \
	return -1

static int
no_args(struct jrender *R, const char *what, struct jargs *a)
{
	if (a->npos || a->nkw)
		return jr_fail(R, JINJA_ERROR, "%s takes no arguments", what);
	return 0;
}

static int
want_int(struct jrender *R, struct jv v, const char *what, int64_t *out)
{
	if (v.t != JT_INT && v.t != JT_BOOL)
		return jr_fail(R, JINJA_ERROR, "%s must be an integer, not %s", what, jv_type_name(v));
	*out = v.i;
	return 0;
}

static int
want_str(struct jrender *R, struct jv v, const char *what)
{
	if (v.t != JT_STR)
		return jr_fail(R, JINJA_ERROR, "%s must be a string, not %s", what, jv_type_name(v));
	return 0;
}

static int
ret_str(struct jrender *R, struct jbuf *b, struct jv *out)
{
	int fail = 0;
	if (R->status != JINJA_OK) {
		free(b->p);
		R->heap.bytes -= b->cap;
		return -1;
	}
	*out = jbuf_take(R, b, &fail);
	return fail ? -1 : 0;
}

static struct jv
list_v(struct jlist *l)
{
	return (struct jv){.t = JT_LIST, .o = &l->h};
}

// soft_str: str(v) as a value (a new reference)
static int
to_str(struct jrender *R, struct jv v, struct jv *out)
{
	int fail = 0;
	*out = jv_to_str(R, v, &fail);
	return fail ? -1 : 0;
}

// --- case mapping -------------------------------------------------------------------

static uint32_t (*upper_tab)[2];
static int n_upper;
static pthread_once_t upper_once = PTHREAD_ONCE_INIT;

static int
cmp_pair(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

// the inverse of the simple lowercase table; the smallest capital wins
static void
upper_init(void)
{
	upper_tab = malloc((size_t)unicode_n_lower * sizeof *upper_tab);
	if (!upper_tab)
		return;
	for (int i = 0; i < unicode_n_lower; i++) {
		upper_tab[i][0] = unicode_lower[i][1];
		upper_tab[i][1] = unicode_lower[i][0];
	}
	qsort(upper_tab, (size_t)unicode_n_lower, sizeof *upper_tab, cmp_pair);
	n_upper = unicode_n_lower;
}

static uint32_t
to_upper(uint32_t c)
{
	if (c < 0x80)
		return c >= 'a' && c <= 'z' ? c - 32 : c;
	pthread_once(&upper_once, upper_init);
	int lo = 0, hi = n_upper - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (upper_tab[mid][0] < c)
			lo = mid + 1;
		else if (upper_tab[mid][0] > c)
			hi = mid - 1;
		else {
			while (mid > 0 && upper_tab[mid - 1][0] == c)
				mid--;
			return upper_tab[mid][1];
		}
	}
	return c;
}

// Python's upper() beyond the inverse of the simple lowercase: letters
// whose capital does not lowercase back to them, and those that become two
static const uint32_t upper_extra[][3] = {
	{0x00B5, 0x039C, 0}, {0x00DF, 'S', 'S'},  {0x0131, 'I', 0},    {0x0149, 0x02BC, 'N'}, {0x017F, 'S', 0},
	{0x01C5, 0x01C4, 0}, {0x01C8, 0x01C7, 0}, {0x01CB, 0x01CA, 0}, {0x01F2, 0x01F1, 0},   {0x0345, 0x0399, 0},
	{0x03C2, 0x03A3, 0}, {0x03D0, 0x0392, 0}, {0x03D1, 0x0398, 0}, {0x03D5, 0x03A6, 0},   {0x03D6, 0x03A0, 0},
	{0x03F0, 0x039A, 0}, {0x03F1, 0x03A1, 0}, {0x03F5, 0x0395, 0}, {0x1E9B, 0x1E60, 0},   {0x1FBE, 0x0399, 0},
	{0xFB00, 'F', 'F'},  {0xFB01, 'F', 'I'},  {0xFB02, 'F', 'L'},  {0xFB05, 'S', 'T'},    {0xFB06, 'S', 'T'},
};

static uint32_t
to_lower(uint32_t c)
{
	if (c < 0x80)
		return c >= 'A' && c <= 'Z' ? c + 32 : c;
	return unicode_tolower(c);
}

static int
is_cased_upper(uint32_t c)
{
	return to_lower(c) != c;
}

static int
is_cased_lower(uint32_t c)
{
	return to_upper(c) != c;
}

static int
put_cp(struct jrender *R, struct jbuf *b, uint32_t c)
{
	char u[4];
	return jbuf_add(R, b, u, (size_t)unicode_encode(c, u));
}

enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE, CASE_JTITLE, CASE_SWAP };

static int
recase(struct jrender *R, const char *s, size_t n, int how, struct jv *out)
{
	struct jbuf b = {0};
	int prev_cased = 0, first = 1, word_start = 1, prev_letter = 0;
	for (size_t i = 0; i < n;) {
		uint32_t c;
		i += ju_decode(s + i, n - i, &c);
		uint32_t d = c;
		int letter = (unicode_flags(c) & UNICODE_LETTER) != 0;
		if (how == CASE_UPPER || how == CASE_SWAP || (how == CASE_CAPITALIZE && first)) {
			size_t k;
			for (k = 0; k < sizeof upper_extra / sizeof upper_extra[0] && upper_extra[k][0] != c; k++)
				;
			if (k < sizeof upper_extra / sizeof upper_extra[0]) {
				put_cp(R, &b, upper_extra[k][1]);
				if (upper_extra[k][2])
					put_cp(R, &b, upper_extra[k][2]);
				first = 0;
				prev_letter = letter;
				continue;
			}
		}
		if ((how == CASE_LOWER || (how == CASE_CAPITALIZE && !first) || how == CASE_SWAP) && c == 0x0130) {
			put_cp(R, &b, 'i'); // İ lowers to i and a combining dot
			put_cp(R, &b, 0x0307);
			first = 0;
			prev_letter = letter;
			continue;
		}
		if ((how == CASE_LOWER || (how == CASE_CAPITALIZE && !first)) && c == 0x03A3) {
			// final sigma: after a letter and not before one
			uint32_t nx = 0;
			if (i < n)
				ju_decode(s + i, n - i, &nx);
			int next_letter = i < n && (unicode_flags(nx) & UNICODE_LETTER);
			put_cp(R, &b, prev_letter && !next_letter ? 0x03C2 : 0x03C3);
			first = 0;
			prev_letter = letter;
			continue;
		}
		prev_letter = letter;
		switch (how) {
		case CASE_UPPER:
			d = to_upper(c);
			break;
		case CASE_LOWER:
			d = to_lower(c);
			break;
		case CASE_CAPITALIZE:
			d = first ? to_upper(c) : to_lower(c);
			break;
		case CASE_SWAP:
			d = is_cased_upper(c) ? to_lower(c) : to_upper(c);
			break;
		case CASE_TITLE: { // str.title(): words are runs of cased letters
			int cased = is_cased_upper(c) || is_cased_lower(c);
			d = cased ? (prev_cased ? to_lower(c) : to_upper(c)) : c;
			prev_cased = cased;
			break;
		}
		case CASE_JTITLE: { // jinja's title: words split by -, whitespace, ( { [ <
			int sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || ju_isspace(c);
			if (sep)
				word_start = 1;
			else {
				d = word_start ? to_upper(c) : to_lower(c);
				word_start = 0;
			}
			break;
		}
		}
		first = 0;
		put_cp(R, &b, d);
	}
	return ret_str(R, &b, out);
}

// --- str helpers ----------------------------------------------------------------------

// the code point index of byte offset o
static int64_t
cp_index(const char *s, size_t o)
{
	int64_t k = 0;
	for (size_t i = 0; i < o; i++)
		k += ((unsigned char)s[i] & 0xC0) != 0x80;
	return k;
}

static int
in_chars(const char *set, size_t setn, uint32_t c)
{
	for (size_t i = 0; i < setn;) {
		uint32_t d;
		i += ju_decode(set + i, setn - i, &d);
		if (d == c)
			return 1;
	}
	return 0;
}

// str.strip family: which 1 left, 2 right, 3 both; chars NULL: whitespace
static int
strip(struct jrender *R, struct jstr *s, const char *chars, size_t nchars, int which, struct jv *out)
{
	size_t a = 0, b = s->n;
	if (which & 1)
		while (a < b) {
			uint32_t c;
			size_t k = ju_decode(s->p + a, b - a, &c);
			if (chars ? !in_chars(chars, nchars, c) : !ju_isspace(c))
				break;
			a += k;
		}
	if (which & 2)
		while (b > a) {
			size_t st = b - 1;
			while (st > a && ((unsigned char)s->p[st] & 0xC0) == 0x80)
				st--;
			uint32_t c;
			ju_decode(s->p + st, b - st, &c);
			if (chars ? !in_chars(chars, nchars, c) : !ju_isspace(c))
				break;
			b = st;
		}
	return jv_newstr(R, s->p + a, b - a, out);
}

static int
str_replace(struct jrender *R, struct jstr *s, struct jstr *old, struct jstr *new, int64_t count, struct jv *out)
{
	struct jbuf b = {0};
	if (count < 0)
		count = INT64_MAX;
	if (old->n == 0) { // between every character, and at both ends
		size_t i = 0;
		while (count > 0) {
			jbuf_add(R, &b, new->p, new->n);
			count--;
			if (i >= s->n)
				break;
			size_t k = ju_offset(s->p + i, s->n - i, 1);
			jbuf_add(R, &b, s->p + i, k);
			i += k;
		}
		jbuf_add(R, &b, s->p + i, s->n - i);
		return ret_str(R, &b, out);
	}
	size_t i = 0;
	while (count > 0) {
		const char *hit = memmem(s->p + i, s->n - i, old->p, old->n);
		if (!hit)
			break;
		size_t h = (size_t)(hit - s->p);
		jbuf_add(R, &b, s->p + i, h - i);
		jbuf_add(R, &b, new->p, new->n);
		i = h + old->n;
		count--;
	}
	jbuf_add(R, &b, s->p + i, s->n - i);
	return ret_str(R, &b, out);
}

static int
space_at_str(struct jstr *s, size_t i)
{
	uint32_t c;
	ju_decode(s->p + i, s->n - i, &c);
	return ju_isspace(c);
}

static int
str_split(struct jrender *R, struct jstr *s, struct jv sep, int64_t maxsplit, int right, struct jv *out)
{
	struct jlist *l = jlist_new(R, JL_LIST, 0);
	if (!l)
		return -1;
	*out = list_v(l);
	if (maxsplit < 0)
		maxsplit = INT64_MAX;
	struct jv piece;
	if (sep.t == JT_NONE || sep.t == JT_UNDEF) {
		// runs of whitespace; no empty strings. Once maxsplit pieces are
		// cut, the rest is one piece with its far end as it is.
		if (!right) {
			size_t i = 0;
			while (1) {
				while (i < s->n && space_at_str(s, i))
					i += ju_offset(s->p + i, s->n - i, 1);
				if (i >= s->n)
					break;
				size_t j = i;
				if (maxsplit == 0)
					j = s->n;
				else
					while (j < s->n && !space_at_str(s, j))
						j += ju_offset(s->p + j, s->n - j, 1);
				if (jv_newstr(R, s->p + i, j - i, &piece) != 0 || jlist_push(R, l, piece) != 0)
					return -1;
				maxsplit--;
				i = j;
			}
			return 0;
		}
		size_t e = s->n;
		struct jlist *rev = jlist_new(R, JL_LIST, 0);
		if (!rev)
			return -1;
		while (1) {
			while (e > 0) {
				size_t st = e - 1;
				while (st > 0 && ((unsigned char)s->p[st] & 0xC0) == 0x80)
					st--;
				if (!space_at_str(s, st))
					break;
				e = st;
			}
			if (e == 0)
				break;
			size_t st = e;
			if (maxsplit == 0)
				st = 0;
			else
				while (st > 0) {
					size_t p = st - 1;
					while (p > 0 && ((unsigned char)s->p[p] & 0xC0) == 0x80)
						p--;
					if (space_at_str(s, p))
						break;
					st = p;
				}
			if (jv_newstr(R, s->p + st, e - st, &piece) != 0 || jlist_push(R, rev, piece) != 0) {
				jobj_unref(R, &rev->h);
				return -1;
			}
			maxsplit--;
			e = st;
		}
		for (size_t k = rev->n; k > 0; k--)
			jlist_push(R, l, jv_ref(rev->v[k - 1]));
		jobj_unref(R, &rev->h);
		return R->status == JINJA_OK ? 0 : -1;
	}
	if (want_str(R, sep, "the separator") != 0)
		return -1;
	struct jstr *p = jv_s(sep);
	if (!p->n)
		return jr_fail(R, JINJA_ERROR, "empty separator");
	if (!right) {
		size_t i = 0;
		while (maxsplit-- > 0) {
			const char *hit = memmem(s->p + i, s->n - i, p->p, p->n);
			if (!hit)
				break;
			size_t h = (size_t)(hit - s->p);
			if (jv_newstr(R, s->p + i, h - i, &piece) != 0 || jlist_push(R, l, piece) != 0)
				return -1;
			i = h + p->n;
		}
		if (jv_newstr(R, s->p + i, s->n - i, &piece) != 0 || jlist_push(R, l, piece) != 0)
			return -1;
		return 0;
	}
	struct jlist *rev = jlist_new(R, JL_LIST, 0);
	if (!rev)
		return -1;
	size_t e = s->n;
	while (maxsplit-- > 0 && e >= p->n) {
		size_t h = e - p->n + 1, found = SIZE_MAX;
		while (h-- > 0)
			if (memcmp(s->p + h, p->p, p->n) == 0) {
				found = h;
				break;
			}
		if (found == SIZE_MAX)
			break;
		if (jv_newstr(R, s->p + found + p->n, e - found - p->n, &piece) != 0 || jlist_push(R, rev, piece) != 0)
			break;
		e = found;
	}
	if (R->status == JINJA_OK && jv_newstr(R, s->p, e, &piece) == 0)
		jlist_push(R, rev, piece);
	for (size_t k = rev->n; k > 0; k--)
		jlist_push(R, l, jv_ref(rev->v[k - 1]));
	jobj_unref(R, &rev->h);
	return R->status == JINJA_OK ? 0 : -1;
}

// str.splitlines: \n \r \r\n \v \f \x1c \x1d \x1e \x85 \u2028 \u2029
static int
str_splitlines(struct jrender *R, const char *s, size_t n, int keepends, struct jlist *l)
{
	size_t i = 0, start = 0;
	while (i < n) {
		uint32_t c;
		size_t k = ju_decode(s + i, n - i, &c);
		int brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
		          c == 0x85 || c == 0x2028 || c == 0x2029;
		if (!brk) {
			i += k;
			continue;
		}
		size_t e = i + k;
		if (c == '\r' && e < n && s[e] == '\n')
			e++;
		struct jv piece;
		if (jv_newstr(R, s + start, (keepends ? e : i) - start, &piece) != 0 || jlist_push(R, l, piece) != 0)
			return -1;
		i = start = e;
	}
	if (start < n) {
		struct jv piece;
		if (jv_newstr(R, s + start, n - start, &piece) != 0 || jlist_push(R, l, piece) != 0)
			return -1;
	}
	return 0;
}

static int
pad(struct jrender *R, struct jstr *s, int64_t width, struct jv fill, int how, struct jv *out)
{
	const char *fc = " ";
	size_t fn = 1;
	if (fill.t != JT_UNDEF) {
		if (fill.t != JT_STR || jstr_ncp(jv_s(fill)) != 1)
			return jr_fail(R, JINJA_ERROR, "The fill character must be exactly one character long");
		fc = jv_s(fill)->p;
		fn = jv_s(fill)->n;
	}
	int64_t len = (int64_t)jstr_ncp(s);
	if (width <= len)
		return jv_newstr(R, s->p, s->n, out);
	if (width > (int64_t)R->max_output)
		return jr_fail(R, JINJA_LIMIT, "a string padded to %lld characters", (long long)width);
	int64_t padn = width - len, left;
	if (how == 0) // center: Python's rounding
		left = padn / 2 + (padn & width & 1);
	else
		left = how == 1 ? 0 : padn; // ljust, rjust
	struct jbuf b = {0};
	for (int64_t i = 0; i < left; i++)
		jbuf_add(R, &b, fc, fn);
	jbuf_add(R, &b, s->p, s->n);
	for (int64_t i = left; i < padn; i++)
		jbuf_add(R, &b, fc, fn);
	return ret_str(R, &b, out);
}

// --- % formatting and str.format -------------------------------------------------------

int
jstr_format_percent(struct jrender *R, struct jv fmt, struct jv args, struct jv *out)
{
	struct jstr *f = jv_s(fmt);
	struct jbuf b = {0};
	size_t argi = 0, nargs;
	const struct jv *argv;
	int mapping = args.t == JT_DICT;
	if (jv_is_seq(args) && jv_l(args)->kind == JL_TUPLE) {
		argv = jv_l(args)->v;
		nargs = jv_l(args)->n;
	} else {
		argv = &args;
		nargs = 1;
	}
	for (size_t i = 0; i < f->n; i++) {
		if (f->p[i] != '%') {
			jbuf_add(R, &b, f->p + i, 1);
			continue;
		}
		if (++i >= f->n) {
			jr_fail(R, JINJA_ERROR, "incomplete format");
			break;
		}
		struct jv v;
		if (f->p[i] == '%') {
			jbuf_add(R, &b, "%", 1);
			continue;
		}
		if (f->p[i] == '(' && mapping) {
			const char *e = memchr(f->p + i, ')', f->n - i);
			if (!e) {
				jr_fail(R, JINJA_ERROR, "incomplete format key");
				break;
			}
			struct jv *x = jdict_get_str(jv_d(args), f->p + i + 1, (size_t)(e - f->p) - i - 1);
			if (!x) {
				jr_fail(R, JINJA_ERROR, "format key not found");
				break;
			}
			v = *x;
			i = (size_t)(e - f->p) + 1;
			if (i >= f->n) {
				jr_fail(R, JINJA_ERROR, "incomplete format");
				break;
			}
		} else if (mapping && nargs == 1) {
			v = args; // Python formats the dict itself
			argi++;
		} else {
			if (argi >= nargs) {
				jr_fail(R, JINJA_ERROR, "not enough arguments for format string");
				break;
			}
			v = argv[argi++];
		}
		char c = f->p[i];
		if (f->safe && (c == 's' || c == 'r' || c == 'a')) { // Markup % arg escapes arg
			struct jv x = JV_UNDEF;
			if (c == 's') {
				if (jv_escape(R, v, &x) == 0)
					jbuf_add(R, &b, jv_s(x)->p, jv_s(x)->n);
			} else {
				struct jbuf rb = {0};
				jv_repr_of(R, &rb, v, 0);
				int fail = 0;
				struct jv rs = jbuf_take(R, &rb, &fail);
				if (!fail && jv_escape(R, rs, &x) == 0)
					jbuf_add(R, &b, jv_s(x)->p, jv_s(x)->n);
				jv_unref(R, rs);
			}
			jv_unref(R, x);
		} else if (c == 's') {
			jv_str_of(R, &b, v);
		} else if (c == 'r' || c == 'a') {
			jv_repr_of(R, &b, v, 0);
		} else if (c == 'd' || c == 'i') {
			char num[32];
			if (v.t == JT_FLOAT) {
				if (!isfinite(v.f)) {
					jr_fail(R, JINJA_ERROR, "cannot convert float to integer");
					break;
				}
				snprintf(num, sizeof num, "%.0f", trunc(v.f));
			} else if (v.t == JT_INT || v.t == JT_BOOL) {
				snprintf(num, sizeof num, "%lld", (long long)v.i);
			} else {
				jr_fail(R, JINJA_ERROR, "%%d format: a real number is required, not %s",
				        jv_type_name(v));
				break;
			}
			jbuf_str(R, &b, num);
		} else {
			jr_fail(R, JINJA_UNSUPPORTED, "the %%%c conversion", c);
			break;
		}
	}
	if (R->status == JINJA_OK && !mapping && argi < nargs)
		jr_fail(R, JINJA_ERROR, "not all arguments converted during string formatting");
	if (ret_str(R, &b, out) != 0)
		return -1;
	jv_s(*out)->safe = f->safe;
	return 0;
}

static int
str_format(struct jrender *R, struct jstr *f, struct jargs *a, struct jv *out)
{
	struct jbuf b = {0};
	size_t auto_i = 0;
	int manual = 0, autom = 0;
	for (size_t i = 0; i < f->n; i++) {
		char c = f->p[i];
		if (c == '}') {
			if (i + 1 < f->n && f->p[i + 1] == '}') {
				jbuf_add(R, &b, "}", 1);
				i++;
				continue;
			}
			jr_fail(R, JINJA_ERROR, "Single '}' encountered in format string");
			break;
		}
		if (c != '{') {
			jbuf_add(R, &b, f->p + i, 1);
			continue;
		}
		if (i + 1 < f->n && f->p[i + 1] == '{') {
			jbuf_add(R, &b, "{", 1);
			i++;
			continue;
		}
		const char *e = memchr(f->p + i, '}', f->n - i);
		if (!e) {
			jr_fail(R, JINJA_ERROR, "Single '{' encountered in format string");
			break;
		}
		const char *field = f->p + i + 1;
		size_t fn = (size_t)(e - field);
		i = (size_t)(e - f->p);
		int conv = 0;
		for (size_t k = 0; k < fn; k++) {
			if (field[k] == '!' && k + 2 == fn && (field[k + 1] == 'r' || field[k + 1] == 's')) {
				conv = field[k + 1];
				fn = k;
				break;
			}
			if (field[k] == ':' || field[k] == '.' || field[k] == '[' || field[k] == '!' ||
			    field[k] == '{') {
				jr_fail(R, JINJA_UNSUPPORTED, "str.format with a format spec or a field path");
				goto out;
			}
		}
		struct jv v = JV_UNDEF;
		if (fn == 0) {
			autom = 1;
			if (auto_i >= a->npos) {
				jr_fail(R, JINJA_ERROR, "Replacement index %zu out of range for positional args tuple",
				        auto_i);
				break;
			}
			v = a->pos[auto_i++];
		} else if (field[0] >= '0' && field[0] <= '9') {
			manual = 1;
			size_t k = 0;
			for (size_t d = 0; d < fn; d++) {
				if (field[d] < '0' || field[d] > '9') {
					jr_fail(R, JINJA_UNSUPPORTED, "str.format with a field path");
					goto out;
				}
				k = k * 10 + (size_t)(field[d] - '0');
				if (k > 1000000)
					break;
			}
			if (k >= a->npos) {
				jr_fail(R, JINJA_ERROR, "Replacement index %zu out of range for positional args tuple",
				        k);
				break;
			}
			v = a->pos[k];
		} else {
			size_t k;
			for (k = 0; k < a->nkw; k++)
				if (strlen(a->kw[k]) == fn && memcmp(a->kw[k], field, fn) == 0)
					break;
			if (k == a->nkw) {
				jr_fail(R, JINJA_ERROR, "a format key is missing");
				break;
			}
			v = a->kwv[k];
		}
		if (manual && autom) {
			jr_fail(R, JINJA_ERROR,
			        "cannot switch between automatic field numbering and manual field specification");
			break;
		}
		if (conv == 'r')
			jv_repr_of(R, &b, v, 0);
		else
			jv_str_of(R, &b, v);
	}
out:
	return ret_str(R, &b, out);
}

// --- methods ---------------------------------------------------------------------------

enum jfn {
	// globals
	F_RANGE = 1,
	F_NAMESPACE,
	F_DICT,
	F_RAISE,
	F_STRFTIME,
	// str
	S_CAPITALIZE,
	S_CENTER,
	S_COUNT,
	S_ENDSWITH,
	S_FIND,
	S_FORMAT,
	S_INDEX,
	S_ISALNUM,
	S_ISALPHA,
	S_ISDIGIT,
	S_ISLOWER,
	S_ISSPACE,
	S_ISUPPER,
	S_JOIN,
	S_LJUST,
	S_LOWER,
	S_LSTRIP,
	S_REMOVEPREFIX,
	S_REMOVESUFFIX,
	S_REPLACE,
	S_RFIND,
	S_RINDEX,
	S_RJUST,
	S_RSPLIT,
	S_RSTRIP,
	S_SPLIT,
	S_SPLITLINES,
	S_STARTSWITH,
	S_STRIP,
	S_SWAPCASE,
	S_TITLE,
	S_UPPER,
	S_ZFILL,
	// dict
	D_GET,
	D_ITEMS,
	D_KEYS,
	D_VALUES,
	// list, tuple
	L_COUNT,
	L_INDEX,
	// loop
	LOOP_CYCLE,
	LOOP_CHANGED,
};

static const struct {
	const char *name;
	int id;
} str_methods[] = {
	{"capitalize", S_CAPITALIZE},
	{"center", S_CENTER},
	{"count", S_COUNT},
	{"endswith", S_ENDSWITH},
	{"find", S_FIND},
	{"format", S_FORMAT},
	{"index", S_INDEX},
	{"isalnum", S_ISALNUM},
	{"isalpha", S_ISALPHA},
	{"isdigit", S_ISDIGIT},
	{"islower", S_ISLOWER},
	{"isspace", S_ISSPACE},
	{"isupper", S_ISUPPER},
	{"join", S_JOIN},
	{"ljust", S_LJUST},
	{"lower", S_LOWER},
	{"lstrip", S_LSTRIP},
	{"removeprefix", S_REMOVEPREFIX},
	{"removesuffix", S_REMOVESUFFIX},
	{"replace", S_REPLACE},
	{"rfind", S_RFIND},
	{"rindex", S_RINDEX},
	{"rjust", S_RJUST},
	{"rsplit", S_RSPLIT},
	{"rstrip", S_RSTRIP},
	{"split", S_SPLIT},
	{"splitlines", S_SPLITLINES},
	{"startswith", S_STARTSWITH},
	{"strip", S_STRIP},
	{"swapcase", S_SWAPCASE},
	{"title", S_TITLE},
	{"upper", S_UPPER},
	{"zfill", S_ZFILL},
};

// Python attributes this file does not implement: using one is unsupported
static const char *const str_other[] = {"casefold",  "encode",       "expandtabs", "format_map",  "isascii",
                                        "isdecimal", "isidentifier", "isnumeric",  "isprintable", "istitle",
                                        "maketrans", "partition",    "rpartition", "translate",   NULL};
static const char *const dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};
static const char *const dict_other[] = {"copy", "fromkeys", NULL};
static const char *const list_unsafe[] = {"append", "clear",   "extend", "insert", "pop",
                                          "remove", "reverse", "sort",   NULL};
static const char *const list_other[] = {"copy", NULL};

static int
name_in(const char *name, size_t n, const char *const *set)
{
	for (; *set; set++)
		if (strlen(*set) == n && memcmp(*set, name, n) == 0)
			return 1;
	return 0;
}

static int
bound(struct jrender *R, struct jv self, int id, struct jv *out)
{
	struct jfunc *fn = jheap_alloc(R, &R->heap, JT_FUNC, sizeof *fn);
	if (!fn)
		return -1;
	fn->id = id;
	fn->self = jv_ref(self);
	out->t = JT_FUNC;
	out->o = &fn->h;
	return 0;
}

int
jmethod(struct jrender *R, struct jv obj, const char *name, size_t n, struct jv *out)
{
	*out = JV_UNDEF;
	if (n && name[0] == '_') // the sandbox hides these
		return 0;
#define IS(s) (n == sizeof(s) - 1 && memcmp(name, s, n) == 0)
	switch (obj.t) {
	case JT_STR:
		for (size_t i = 0; i < sizeof str_methods / sizeof str_methods[0]; i++)
			if (strlen(str_methods[i].name) == n && memcmp(str_methods[i].name, name, n) == 0)
				return bound(R, obj, str_methods[i].id, out);
		if (name_in(name, n, str_other))
			return jr_fail(R, JINJA_UNSUPPORTED, "the str method '%.*s'", (int)n, name);
		return 0;
	case JT_DICT:
		if (IS("get"))
			return bound(R, obj, D_GET, out);
		if (IS("items"))
			return bound(R, obj, D_ITEMS, out);
		if (IS("keys"))
			return bound(R, obj, D_KEYS, out);
		if (IS("values"))
			return bound(R, obj, D_VALUES, out);
		if (name_in(name, n, dict_unsafe))
			return 0; // undefined; calling it fails as the sandbox's SecurityError does
		if (name_in(name, n, dict_other))
			return jr_fail(R, JINJA_UNSUPPORTED, "the dict method '%.*s'", (int)n, name);
		return 0;
	case JT_LIST:
		if (jv_l(obj)->kind == JL_LIST || jv_l(obj)->kind == JL_TUPLE) {
			if (IS("count"))
				return bound(R, obj, L_COUNT, out);
			if (IS("index"))
				return bound(R, obj, L_INDEX, out);
			if (jv_l(obj)->kind == JL_LIST && name_in(name, n, list_unsafe))
				return 0;
			if (jv_l(obj)->kind == JL_LIST && name_in(name, n, list_other))
				return jr_fail(R, JINJA_UNSUPPORTED, "the list method '%.*s'", (int)n, name);
		}
		return 0;
	case JT_INT:
	case JT_FLOAT:
	case JT_BOOL:
		if (IS("real") || IS("imag") || IS("numerator") || IS("denominator") || IS("bit_length") ||
		    IS("is_integer") || IS("conjugate"))
			return jr_fail(R, JINJA_UNSUPPORTED, "the number attribute '%.*s'", (int)n, name);
		return 0;
	case JT_MACRO:
	case JT_FUNC:
		return jr_fail(R, JINJA_UNSUPPORTED, "attributes of a %s", jv_type_name(obj));
	default:
		return 0;
	}
#undef IS
}

static int
view(struct jrender *R, struct jdict *d, char which, struct jv *out)
{
	struct jlist *l = jlist_new(R, JL_VIEW, d->n);
	if (!l)
		return -1;
	l->view = which;
	*out = list_v(l);
	for (size_t i = 0; i < d->n; i++) {
		if (which == 'k' || which == 'v') {
			jlist_push(R, l, jv_ref(which == 'k' ? d->k[i] : d->v[i]));
			continue;
		}
		struct jlist *t = jlist_new(R, JL_TUPLE, 2);
		if (!t)
			return -1;
		jlist_push(R, t, jv_ref(d->k[i]));
		jlist_push(R, t, jv_ref(d->v[i]));
		jlist_push(R, l, list_v(t));
	}
	return R->status == JINJA_OK ? 0 : -1;
}

// str.find's optional start and end, as byte offsets
static int
find_range(struct jrender *R, struct jstr *s, struct jv *arg, int *has, size_t *a, size_t *b)
{
	int64_t len = (int64_t)jstr_ncp(s), st = 0, en = len;
	if (has[1] && arg[1].t != JT_NONE && want_int(R, arg[1], "start", &st) != 0)
		return -1;
	if (has[2] && arg[2].t != JT_NONE && want_int(R, arg[2], "end", &en) != 0)
		return -1;
	if (st < 0)
		st = st + len < 0 ? 0 : st + len;
	if (en < 0)
		en = en + len < 0 ? 0 : en + len;
	if (st > len)
		st = len + 1; // nothing can be found
	if (en > len)
		en = len;
	*a = st > len ? s->n + 1 : ju_offset(s->p, s->n, (size_t)st);
	*b = ju_offset(s->p, s->n, (size_t)en);
	return 0;
}

static int
affix(struct jrender *R, struct jstr *s, struct jv *arg, int *has, int end, int *r)
{
	size_t a, b;
	if (find_range(R, s, arg, has, &a, &b) != 0)
		return -1;
	*r = 0;
	struct jv p = arg[0];
	size_t np = 1;
	const struct jv *pv = &p;
	if (jv_is_seq(p) && jv_l(p)->kind == JL_TUPLE) {
		pv = jv_l(p)->v;
		np = jv_l(p)->n;
	}
	for (size_t i = 0; i < np; i++) {
		if (pv[i].t != JT_STR)
			return jr_fail(R, JINJA_ERROR, "%s first arg must be str or a tuple of str, not %s",
			               end ? "endswith" : "startswith", jv_type_name(pv[i]));
		struct jstr *x = jv_s(pv[i]);
		if (a > s->n || b < a || b - a < x->n)
			continue;
		if (memcmp(end ? s->p + b - x->n : s->p + a, x->p, x->n) == 0)
			*r = 1;
	}
	return 0;
}

static int
str_method_plain(struct jrender *R, int id, struct jstr *s, struct jargs *a, struct jv *out)
{
	struct jv self = {.t = JT_STR, .o = &s->h};
	int r;
	switch (id) {
	case S_UPPER:
	case S_LOWER:
	case S_CAPITALIZE:
	case S_TITLE:
	case S_SWAPCASE:
		if (no_args(R, "a case method", a) != 0)
			return -1;
		return recase(R, s->p, s->n,
		              id == S_UPPER        ? CASE_UPPER
		              : id == S_LOWER      ? CASE_LOWER
		              : id == S_CAPITALIZE ? CASE_CAPITALIZE
		              : id == S_TITLE      ? CASE_TITLE
		                                   : CASE_SWAP,
		              out);
	case S_STRIP:
	case S_LSTRIP:
	case S_RSTRIP: {
		BIND("strip", "chars");
		if (has[0] && arg[0].t != JT_NONE && want_str(R, arg[0], "the characters") != 0)
			return -1;
		int strip_chars = has[0] && arg[0].t == JT_STR;
		return strip(R, s, strip_chars ? jv_s(arg[0])->p : NULL, strip_chars ? jv_s(arg[0])->n : 0,
		             id == S_STRIP    ? 3
		             : id == S_LSTRIP ? 1
		                              : 2,
		             out);
	}
	case S_SPLIT:
	case S_RSPLIT: {
		BIND("split", "sep", "maxsplit");
		int64_t m = -1;
		if (has[1] && want_int(R, arg[1], "maxsplit", &m) != 0)
			return -1;
		return str_split(R, s, has[0] ? arg[0] : JV_NONE, m, id == S_RSPLIT, out);
	}
	case S_SPLITLINES: {
		BIND("splitlines", "keepends");
		struct jlist *l = jlist_new(R, JL_LIST, 0);
		if (!l)
			return -1;
		*out = list_v(l);
		return str_splitlines(R, s->p, s->n, has[0] && jv_truthy(arg[0]), l);
	}
	case S_STARTSWITH:
	case S_ENDSWITH: {
		BIND("startswith", "prefix", "start", "end");
		if (!has[0])
			return jr_fail(R, JINJA_ERROR, "startswith() takes at least 1 argument (0 given)");
		if (affix(R, s, arg, has, id == S_ENDSWITH, &r) != 0)
			return -1;
		*out = jv_bool(r);
		return 0;
	}
	case S_FIND:
	case S_RFIND:
	case S_INDEX:
	case S_RINDEX:
	case S_COUNT: {
		BIND("find", "sub", "start", "end");
		if (!has[0] || want_str(R, arg[0], "the substring") != 0)
			return has[0] ? -1 : jr_fail(R, JINJA_ERROR, "find() takes at least 1 argument (0 given)");
		size_t lo, hi;
		if (find_range(R, s, arg, has, &lo, &hi) != 0)
			return -1;
		struct jstr *x = jv_s(arg[0]);
		if (id == S_COUNT) {
			int64_t c = 0;
			if (lo <= hi && lo <= s->n) {
				if (!x->n)
					c = cp_index(s->p + lo, hi - lo) + 1;
				else
					for (size_t i = lo; i + x->n <= hi;) {
						const char *h = memmem(s->p + i, hi - i, x->p, x->n);
						if (!h)
							break;
						c++;
						i = (size_t)(h - s->p) + x->n;
					}
			}
			*out = jv_int(c);
			return 0;
		}
		int64_t found = -1;
		if (lo <= hi && lo <= s->n && hi - lo >= x->n) {
			if (id == S_FIND || id == S_INDEX) {
				const char *h = x->n ? memmem(s->p + lo, hi - lo, x->p, x->n) : s->p + lo;
				if (h)
					found = cp_index(s->p, (size_t)(h - s->p));
			} else {
				for (size_t i = hi - x->n + 1; i-- > lo;)
					if (memcmp(s->p + i, x->p, x->n) == 0) {
						found = cp_index(s->p, i);
						break;
					}
			}
		}
		if (found < 0 && (id == S_INDEX || id == S_RINDEX))
			return jr_fail(R, JINJA_ERROR, "substring not found");
		*out = jv_int(found);
		return 0;
	}
	case S_REPLACE: {
		BIND("replace", "old", "new", "count");
		int64_t c = -1;
		if (!has[0] || !has[1] || want_str(R, arg[0], "old") != 0 || want_str(R, arg[1], "new") != 0)
			return R->status == JINJA_OK ? jr_fail(R, JINJA_ERROR, "replace expected at least 2 arguments")
			                             : -1;
		if (has[2] && want_int(R, arg[2], "count", &c) != 0)
			return -1;
		return str_replace(R, s, jv_s(arg[0]), jv_s(arg[1]), c, out);
	}
	case S_JOIN: {
		BIND("join", "iterable");
		struct jlist *l;
		if (!has[0])
			return jr_fail(R, JINJA_ERROR, "join() takes exactly one argument (0 given)");
		if (jiter(R, arg[0], &l) != 0)
			return -1;
		struct jbuf b = {0};
		for (size_t i = 0; i < l->n; i++) {
			if (l->v[i].t != JT_STR) {
				jr_fail(R, JINJA_ERROR, "sequence item %zu: expected str instance, %s found", i,
				        jv_type_name(l->v[i]));
				break;
			}
			if (i)
				jbuf_add(R, &b, s->p, s->n);
			jbuf_add(R, &b, jv_s(l->v[i])->p, jv_s(l->v[i])->n);
		}
		jobj_unref(R, &l->h);
		return ret_str(R, &b, out);
	}
	case S_FORMAT:
		return str_format(R, s, a, out);
	case S_REMOVEPREFIX:
	case S_REMOVESUFFIX: {
		BIND("removeprefix", "affix");
		if (!has[0] || want_str(R, arg[0], "the affix") != 0)
			return R->status == JINJA_OK
			               ? jr_fail(R, JINJA_ERROR, "removeprefix() takes exactly one argument")
			               : -1;
		struct jstr *x = jv_s(arg[0]);
		if (x->n <= s->n) {
			if (id == S_REMOVEPREFIX && memcmp(s->p, x->p, x->n) == 0)
				return jv_newstr(R, s->p + x->n, s->n - x->n, out);
			if (id == S_REMOVESUFFIX && x->n && memcmp(s->p + s->n - x->n, x->p, x->n) == 0)
				return jv_newstr(R, s->p, s->n - x->n, out);
		}
		*out = jv_ref(self);
		return 0;
	}
	case S_CENTER:
	case S_LJUST:
	case S_RJUST: {
		BIND("center", "width", "fillchar");
		int64_t w = 0;
		if (!has[0])
			return jr_fail(R, JINJA_ERROR, "center expected at least 1 argument, got 0");
		if (want_int(R, arg[0], "width", &w) != 0)
			return -1;
		return pad(R, s, w, arg[1], id == S_CENTER ? 0 : id == S_LJUST ? 1 : 2, out);
	}
	case S_ZFILL: {
		BIND("zfill", "width");
		int64_t w = 0;
		if (!has[0] || want_int(R, arg[0], "width", &w) != 0)
			return R->status == JINJA_OK ? jr_fail(R, JINJA_ERROR, "zfill() takes exactly one argument")
			                             : -1;
		int64_t len = (int64_t)jstr_ncp(s);
		if (w <= len)
			return jv_newstr(R, s->p, s->n, out);
		if (w > (int64_t)R->max_output)
			return jr_fail(R, JINJA_LIMIT, "a string padded to %lld characters", (long long)w);
		struct jbuf b = {0};
		size_t skip = s->n && (s->p[0] == '+' || s->p[0] == '-');
		jbuf_add(R, &b, s->p, skip);
		for (int64_t i = 0; i < w - len; i++)
			jbuf_add(R, &b, "0", 1);
		jbuf_add(R, &b, s->p + skip, s->n - skip);
		return ret_str(R, &b, out);
	}
	case S_ISALNUM:
	case S_ISALPHA:
	case S_ISDIGIT:
	case S_ISSPACE:
	case S_ISLOWER:
	case S_ISUPPER: {
		if (no_args(R, "is...", a) != 0)
			return -1;
		int ok = s->n > 0, cased = 0;
		for (size_t i = 0; i < s->n && ok;) {
			uint32_t c;
			i += ju_decode(s->p + i, s->n - i, &c);
			uint16_t fl = unicode_flags(c);
			switch (id) {
			case S_ISALNUM:
				ok = (fl & (UNICODE_LETTER | UNICODE_NUMBER)) != 0;
				break;
			case S_ISALPHA:
				ok = (fl & UNICODE_LETTER) != 0;
				break;
			case S_ISDIGIT:
				ok = c >= '0' && c <= '9';
				break; // ASCII digits; others are rare
			case S_ISSPACE:
				ok = ju_isspace(c);
				break;
			case S_ISLOWER:
				if (is_cased_upper(c))
					ok = 0;
				cased |= is_cased_lower(c);
				break;
			case S_ISUPPER:
				if (is_cased_lower(c))
					ok = 0;
				cased |= is_cased_upper(c);
				break;
			}
		}
		if (id == S_ISLOWER || id == S_ISUPPER)
			ok = ok && cased;
		*out = jv_bool(ok);
		return 0;
	}
	}
	return jr_fail(R, JINJA_UNSUPPORTED, "a str method");
}

static void
mark_safe(struct jv v, const struct jstr *not_this)
{
	if (v.t == JT_STR && jv_s(v) != not_this)
		jv_s(v)->safe = 1;
}

// A Markup's methods: markupsafe escapes the string arguments of most and
// makes their results Markup again; split and friends give Markup pieces,
// join escapes the items, format escapes the fields.
static int
str_method(struct jrender *R, int id, struct jstr *s, struct jargs *a, struct jv *out)
{
	if (!s->safe)
		return str_method_plain(R, id, s, a, out);
	int escape_args = 0, result = 0, pieces = 0;
	switch (id) {
	case S_STRIP:
	case S_LSTRIP:
	case S_RSTRIP:
	case S_UPPER:
	case S_LOWER:
	case S_CAPITALIZE:
	case S_TITLE:
	case S_SWAPCASE:
	case S_REPLACE:
	case S_CENTER:
	case S_LJUST:
	case S_RJUST:
	case S_ZFILL:
	case S_FORMAT:
		escape_args = result = 1;
		break;
	case S_SPLIT:
	case S_RSPLIT:
	case S_SPLITLINES:
		pieces = 1;
		break;
	case S_JOIN: {
		struct jlist *l;
		if (a->npos != 1 || a->nkw)
			return str_method_plain(R, id, s, a, out);
		if (jiter(R, a->pos[0], &l) != 0)
			return -1;
		struct jlist *e = jlist_new(R, JL_LIST, l->n);
		for (size_t i = 0; e && i < l->n; i++) {
			struct jv x = JV_UNDEF;
			if (jv_escape(R, l->v[i], &x) != 0 || jlist_push(R, e, x) != 0)
				break;
		}
		jobj_unref(R, &l->h);
		if (!e || R->status != JINJA_OK) {
			if (e)
				jobj_unref(R, &e->h);
			return -1;
		}
		struct jv ev = list_v(e);
		struct jargs ea = {&ev, 1, NULL, NULL, 0, JV_UNDEF};
		int rc = str_method_plain(R, id, s, &ea, out);
		jv_unref(R, ev);
		if (rc == 0)
			mark_safe(*out, s);
		return rc;
	}
	default:
		return str_method_plain(R, id, s, a, out);
	}
	struct jargs e = *a;
	struct jv *pos = NULL, *kwv = NULL;
	if (escape_args) {
		pos = calloc(a->npos + 1, sizeof *pos);
		kwv = calloc(a->nkw + 1, sizeof *kwv);
		if (!pos || !kwv) {
			free(pos);
			free(kwv);
			return jr_fail(R, JINJA_LIMIT, "out of memory");
		}
		for (size_t i = 0; i < a->npos; i++)
			pos[i] = a->pos[i].t == JT_STR ? (jv_escape(R, a->pos[i], &pos[i]), pos[i]) : jv_ref(a->pos[i]);
		for (size_t i = 0; i < a->nkw; i++)
			kwv[i] = a->kwv[i].t == JT_STR ? (jv_escape(R, a->kwv[i], &kwv[i]), kwv[i]) : jv_ref(a->kwv[i]);
		e.pos = pos;
		e.kwv = kwv;
		if (id == S_FORMAT) // every field is escaped, numbers too
			for (size_t i = 0; i < a->npos; i++)
				if (pos[i].t != JT_STR) {
					struct jv x;
					if (jv_escape(R, pos[i], &x) == 0) {
						jv_unref(R, pos[i]);
						pos[i] = x;
					}
				}
	}
	int rc = R->status == JINJA_OK ? str_method_plain(R, id, s, &e, out) : -1;
	if (escape_args) {
		for (size_t i = 0; i < a->npos; i++)
			jv_unref(R, pos[i]);
		for (size_t i = 0; i < a->nkw; i++)
			jv_unref(R, kwv[i]);
		free(pos);
		free(kwv);
	}
	if (rc == 0 && result)
		mark_safe(*out, s);
	if (rc == 0 && pieces && out->t == JT_LIST)
		for (size_t i = 0; i < jv_l(*out)->n; i++)
			mark_safe(jv_l(*out)->v[i], NULL);
	return rc;
}

static int strftime_now(struct jrender *R, struct jv fmt, struct jv *out);
static int make_namespace(struct jrender *R, struct jargs *a, enum jt t, struct jv *out);
static int make_range(struct jrender *R, struct jargs *a, struct jv *out);

int
jcall_builtin(struct jrender *R, struct jfunc *fn, struct jargs *a, struct jv *out)
{
	*out = JV_UNDEF;
	struct jv self = fn->self;
	switch (fn->id) {
	case F_RANGE:
		return make_range(R, a, out);
	case F_NAMESPACE:
		return make_namespace(R, a, JT_NS, out);
	case F_DICT:
		return make_namespace(R, a, JT_DICT, out);
	case F_RAISE: {
		struct jbuf b = {0};
		if (a->npos != 1 || a->nkw)
			return jr_fail(R, JINJA_ERROR, "raise_exception() takes exactly one argument");
		jv_str_of(R, &b, a->pos[0]);
		if (R->status == JINJA_OK)
			jr_fail(R, JINJA_RAISED, "%s", b.p ? b.p : "");
		free(b.p);
		return -1;
	}
	case F_STRFTIME:
		if (a->npos != 1 || a->nkw)
			return jr_fail(R, JINJA_ERROR, "strftime_now() takes exactly one argument");
		return strftime_now(R, a->pos[0], out);
	case D_GET: {
		BIND("get", "key", "default");
		if (!has[0])
			return jr_fail(R, JINJA_ERROR, "get expected at least 1 argument, got 0");
		if (!jv_hashable(arg[0]))
			return jr_fail(R, JINJA_ERROR, "unhashable type: '%s'", jv_type_name(arg[0]));
		struct jv *v = jdict_get(jv_d(self), arg[0]);
		*out = jv_ref(v ? *v : has[1] ? arg[1] : JV_NONE);
		return 0;
	}
	case D_ITEMS:
	case D_KEYS:
	case D_VALUES:
		if (no_args(R, "items", a) != 0)
			return -1;
		return view(R, jv_d(self), fn->id == D_ITEMS ? 'i' : fn->id == D_KEYS ? 'k' : 'v', out);
	case L_COUNT:
	case L_INDEX: {
		BIND("index", "value");
		if (!has[0])
			return jr_fail(R, JINJA_ERROR, "index() takes at least 1 argument (0 given)");
		struct jlist *l = jv_l(self);
		int64_t c = 0, at = -1;
		for (size_t i = 0; i < l->n; i++)
			if (jv_eq(l->v[i], arg[0], 0)) {
				c++;
				if (at < 0)
					at = (int64_t)i;
			}
		if (fn->id == L_INDEX && at < 0)
			return jr_fail(R, JINJA_ERROR, "the value is not in the list");
		*out = jv_int(fn->id == L_COUNT ? c : at);
		return 0;
	}
	case LOOP_CYCLE: {
		struct jloop *l = (struct jloop *)self.o;
		if (a->nkw)
			return jr_fail(R, JINJA_ERROR, "cycle() takes no keyword arguments");
		if (!a->npos)
			return jr_fail(R, JINJA_ERROR, "no items for cycling given");
		*out = jv_ref(a->pos[l->i % a->npos]);
		return 0;
	}
	case LOOP_CHANGED: {
		struct jloop *l = (struct jloop *)self.o;
		struct jlist *t = jlist_new(R, JL_TUPLE, a->npos);
		if (!t)
			return -1;
		for (size_t i = 0; i < a->npos; i++)
			jlist_push(R, t, jv_ref(a->pos[i]));
		struct jv tv = list_v(t);
		int changed = !l->has_changed || !jv_eq(l->changed, tv, 0);
		if (changed) {
			jv_unref(R, l->changed);
			l->changed = tv;
			l->has_changed = 1;
		} else {
			jv_unref(R, tv);
		}
		*out = jv_bool(changed);
		return 0;
	}
	default:
		if (fn->id >= S_CAPITALIZE && fn->id <= S_ZFILL)
			return str_method(R, fn->id, jv_s(self), a, out);
		return jr_fail(R, JINJA_UNSUPPORTED, "this function");
	}
}

// --- globals ----------------------------------------------------------------------------

int
jglobal(struct jrender *R, const char *name, struct jv *out)
{
	*out = JV_UNDEF;
	static const struct {
		const char *name;
		int id;
	} g[] = {{"range", F_RANGE},
	         {"namespace", F_NAMESPACE},
	         {"dict", F_DICT},
	         {"raise_exception", F_RAISE},
	         {"strftime_now", F_STRFTIME}};
	for (size_t i = 0; i < sizeof g / sizeof g[0]; i++)
		if (!strcmp(g[i].name, name))
			return bound(R, JV_UNDEF, g[i].id, out);
	if (!strcmp(name, "cycler") || !strcmp(name, "joiner") || !strcmp(name, "lipsum"))
		return jr_fail(R, JINJA_UNSUPPORTED, "the global '%s'", name);
	return 0;
}

static int
make_range(struct jrender *R, struct jargs *a, struct jv *out)
{
	int64_t v[3] = {0, 0, 1};
	if (a->nkw)
		return jr_fail(R, JINJA_ERROR, "range() takes no keyword arguments");
	if (a->npos < 1 || a->npos > 3)
		return jr_fail(R, JINJA_ERROR, "range expected 1 to 3 arguments, got %zu", a->npos);
	for (size_t i = 0; i < a->npos; i++)
		if (want_int(R, a->pos[i], "a range() argument", &v[a->npos == 1 ? 1 : i]) != 0)
			return -1;
	if (v[2] == 0)
		return jr_fail(R, JINJA_ERROR, "range() arg 3 must not be zero");
	__int128 len =
		v[2] > 0 ? ((__int128)v[1] - v[0] + v[2] - 1) / v[2] : ((__int128)v[0] - v[1] - v[2] - 1) / -v[2];
	if (len < 0)
		len = 0;
	if (len > 100000)
		return jr_fail(R, JINJA_ERROR,
		               "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
	struct jlist *l = jlist_new(R, JL_LIST, (size_t)len);
	if (!l)
		return -1;
	*out = list_v(l);
	for (int64_t i = 0, x = v[0]; i < (int64_t)len; i++, x += v[2])
		if (jlist_push(R, l, jv_int(x)) != 0)
			return -1;
	return 0;
}

static int
make_namespace(struct jrender *R, struct jargs *a, enum jt t, struct jv *out)
{
	struct jdict *d = jdict_new(R, t);
	if (!d)
		return -1;
	out->t = (uint8_t)t;
	out->o = &d->h;
	if (a->npos > 1)
		return jr_fail(R, JINJA_ERROR, "%s expected at most 1 argument, got %zu",
		               t == JT_NS ? "namespace" : "dict", a->npos);
	if (a->npos == 1) {
		struct jv src = a->pos[0];
		if (src.t == JT_DICT || src.t == JT_NS) {
			struct jdict *s = jv_d(src);
			for (size_t i = 0; i < s->n; i++)
				if (jdict_set(R, d, jv_ref(s->k[i]), jv_ref(s->v[i])) != 0)
					return -1;
		} else {
			struct jlist *l;
			if (jiter(R, src, &l) != 0)
				return -1;
			for (size_t i = 0; i < l->n; i++) {
				struct jv p = l->v[i];
				if (!jv_is_seq(p) || jv_l(p)->n != 2) {
					jobj_unref(R, &l->h);
					return jr_fail(R, JINJA_ERROR,
					               "dictionary update sequence element #%zu has the wrong length",
					               i);
				}
				if (!jv_hashable(jv_l(p)->v[0])) {
					jobj_unref(R, &l->h);
					return jr_fail(R, JINJA_ERROR, "unhashable type: '%s'",
					               jv_type_name(jv_l(p)->v[0]));
				}
				if (jdict_set(R, d, jv_ref(jv_l(p)->v[0]), jv_ref(jv_l(p)->v[1])) != 0) {
					jobj_unref(R, &l->h);
					return -1;
				}
			}
			jobj_unref(R, &l->h);
		}
	}
	for (size_t k = 0; k < a->nkw; k++) {
		struct jv key;
		if (jv_newstr(R, a->kw[k], strlen(a->kw[k]), &key) != 0 || jdict_set(R, d, key, jv_ref(a->kwv[k])) != 0)
			return -1;
	}
	return 0;
}

static int
strftime_now(struct jrender *R, struct jv fmt, struct jv *out)
{
	if (want_str(R, fmt, "the format") != 0)
		return -1;
	time_t t = R->now ? (time_t)R->now : time(NULL);
	struct tm tm;
	if (R->now)
		gmtime_r(&t, &tm);
	else
		localtime_r(&t, &tm);
	struct jstr *f = jv_s(fmt);
	if (!f->n)
		return jv_newstr(R, "", 0, out);
	if (f->n > 256)
		return jr_fail(R, JINJA_UNSUPPORTED, "a strftime format of %zu bytes", f->n);
	char buf[2048];
	size_t n = strftime(buf, sizeof buf, f->p, &tm);
	if (n == 0)
		return jr_fail(R, JINJA_UNSUPPORTED, "this strftime format");
	return jv_newstr(R, buf, n, out);
}

int
jloop_attr(struct jrender *R, struct jloop *l, const char *name, struct jv *out)
{
	int64_t n = (int64_t)l->items->n, i = (int64_t)l->i;
	*out = JV_UNDEF;
	if (!strcmp(name, "index"))
		*out = jv_int(i + 1);
	else if (!strcmp(name, "index0"))
		*out = jv_int(i);
	else if (!strcmp(name, "revindex"))
		*out = jv_int(n - i);
	else if (!strcmp(name, "revindex0"))
		*out = jv_int(n - i - 1);
	else if (!strcmp(name, "first"))
		*out = jv_bool(i == 0);
	else if (!strcmp(name, "last"))
		*out = jv_bool(i == n - 1);
	else if (!strcmp(name, "length"))
		*out = jv_int(n);
	else if (!strcmp(name, "depth"))
		*out = jv_int(1);
	else if (!strcmp(name, "depth0"))
		*out = jv_int(0);
	else if (!strcmp(name, "previtem")) {
		if (i > 0)
			*out = jv_ref(l->items->v[i - 1]);
	} else if (!strcmp(name, "nextitem")) {
		if (i + 1 < n)
			*out = jv_ref(l->items->v[i + 1]);
	} else if (!strcmp(name, "cycle"))
		return bound(R, (struct jv){.t = JT_LOOP, .o = &l->h}, LOOP_CYCLE, out);
	else if (!strcmp(name, "changed"))
		return bound(R, (struct jv){.t = JT_LOOP, .o = &l->h}, LOOP_CHANGED, out);
	return 0;
}

// --- filters ------------------------------------------------------------------------------

// len(v), or -1 (error set)
static int64_t
py_len(struct jrender *R, struct jv v)
{
	switch (v.t) {
	case JT_UNDEF:
		return 0;
	case JT_STR:
		return (int64_t)jstr_ncp(jv_s(v));
	case JT_LIST:
		if (jv_l(v)->kind != JL_GEN)
			return (int64_t)jv_l(v)->n;
		break;
	case JT_DICT:
		return (int64_t)jv_d(v)->n;
	default:
		break;
	}
	jr_fail(R, JINJA_ERROR, "object of type '%s' has no len()", jv_type_name(v));
	return -1;
}

// environment.getitem along an attribute path "a.b.0" (make_attrgetter)
static int
attr_path(struct jrender *R, struct jv item, struct jv attr, struct jv dflt, struct jv *out)
{
	*out = jv_ref(item);
	if (attr.t == JT_NONE || attr.t == JT_UNDEF)
		return 0;
	if (attr.t == JT_INT) {
		struct jv next;
		int rc = jgetitem(R, *out, attr, &next);
		jv_unref(R, *out);
		*out = next;
		return rc;
	}
	if (want_str(R, attr, "the attribute") != 0)
		return -1;
	const char *p = jv_s(attr)->p, *e = p + jv_s(attr)->n;
	while (1) {
		const char *dot = memchr(p, '.', (size_t)(e - p));
		size_t n = dot ? (size_t)(dot - p) : (size_t)(e - p);
		int digits = n > 0;
		int64_t iv = 0;
		for (size_t i = 0; i < n; i++) {
			if (p[i] < '0' || p[i] > '9') {
				digits = 0;
				break;
			}
			iv = iv * 10 + (p[i] - '0');
			if (iv > 1000000000)
				digits = 0;
		}
		struct jv key, next;
		if (digits)
			key = jv_int(iv);
		else if (jv_newstr(R, p, n, &key) != 0)
			return -1;
		int rc = jgetitem(R, *out, key, &next);
		jv_unref(R, key);
		jv_unref(R, *out);
		*out = next;
		if (rc != 0)
			return -1;
		if (dflt.t != JT_UNDEF && out->t == JT_UNDEF)
			*out = jv_ref(dflt);
		if (!dot)
			return 0;
		p = dot + 1;
	}
}

static int
lower_key(struct jrender *R, struct jv v, int case_sensitive, struct jv *out)
{
	if (case_sensitive || v.t != JT_STR) {
		*out = jv_ref(v);
		return 0;
	}
	return recase(R, jv_s(v)->p, jv_s(v)->n, CASE_LOWER, out);
}

// what min, max and unique compare an item by: its attribute (attr;
// JV_NONE for the item itself), lower-cased unless case_sensitive
static int
item_key(struct jrender *R, struct jv item, struct jv attr, int case_sensitive, struct jv *out)
{
	struct jv k;
	int rc = attr_path(R, item, attr, JV_UNDEF, &k);
	if (rc != 0)
		return rc;
	rc = lower_key(R, k, case_sensitive, out);
	jv_unref(R, k);
	return rc;
}

// a stable merge sort of idx by keys[idx]
static int
sort_idx(struct jrender *R, struct jv *keys, size_t *idx, size_t *tmp, size_t n, int reverse)
{
	if (n < 2)
		return 0;
	size_t h = n / 2;
	if (sort_idx(R, keys, idx, tmp, h, reverse) != 0 || sort_idx(R, keys, idx + h, tmp, n - h, reverse) != 0)
		return -1;
	size_t i = 0, j = h, k = 0;
	while (i < h && j < n) {
		int r;
		// Python's sorted: take the right one only when it is strictly smaller
		if (reverse ? jv_cmp(R, keys[idx[i]], keys[idx[j]], &r) : jv_cmp(R, keys[idx[j]], keys[idx[i]], &r))
			return -1;
		if (r < 0)
			tmp[k++] = idx[j++];
		else
			tmp[k++] = idx[i++];
	}
	while (i < h)
		tmp[k++] = idx[i++];
	while (j < n)
		tmp[k++] = idx[j++];
	memcpy(idx, tmp, n * sizeof *idx);
	return 0;
}

// items sorted by keys; both lists have the same length
static int
sorted(struct jrender *R, struct jlist *items, struct jlist *keys, int reverse, struct jv *out)
{
	size_t n = items->n;
	size_t *idx = malloc((n + 1) * sizeof *idx), *tmp = malloc((n + 1) * sizeof *tmp);
	int rc = -1;
	if (!idx || !tmp) {
		jr_fail(R, JINJA_LIMIT, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		idx[i] = i;
	if (sort_idx(R, keys->v, idx, tmp, n, reverse) != 0)
		goto out;
	struct jlist *l = jlist_new(R, JL_LIST, n);
	if (!l)
		goto out;
	*out = list_v(l);
	for (size_t i = 0; i < n; i++)
		jlist_push(R, l, jv_ref(items->v[idx[i]]));
	rc = R->status == JINJA_OK ? 0 : -1;
out:
	free(idx);
	free(tmp);
	return rc;
}

static int
f_sort(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("sort", "reverse", "case_sensitive", "attribute");
	struct jlist *items, *keys = NULL;
	if (jiter(R, v, &items) != 0)
		return -1;
	int rc = -1;
	if (!(keys = jlist_new(R, JL_LIST, items->n)))
		goto out;
	// "age,name": a list of keys per item
	int multi = has[2] && arg[2].t == JT_STR && memchr(jv_s(arg[2])->p, ',', jv_s(arg[2])->n);
	for (size_t i = 0; i < items->n; i++) {
		struct jv k, lk;
		if (!multi) {
			if (attr_path(R, items->v[i], has[2] ? arg[2] : JV_NONE, JV_UNDEF, &k) != 0)
				goto out;
			rc = lower_key(R, k, has[1] && jv_truthy(arg[1]), &lk);
			jv_unref(R, k);
			if (rc != 0 || jlist_push(R, keys, lk) != 0)
				goto out;
			rc = -1;
			continue;
		}
		struct jlist *kl = jlist_new(R, JL_LIST, 0);
		if (!kl || jlist_push(R, keys, list_v(kl)) != 0)
			goto out;
		const char *p = jv_s(arg[2])->p, *e = p + jv_s(arg[2])->n;
		while (1) {
			const char *c = memchr(p, ',', (size_t)(e - p));
			struct jv part;
			if (jv_newstr(R, p, c ? (size_t)(c - p) : (size_t)(e - p), &part) != 0)
				goto out;
			int r2 = attr_path(R, items->v[i], part, JV_UNDEF, &k);
			jv_unref(R, part);
			if (r2 != 0 || lower_key(R, k, has[1] && jv_truthy(arg[1]), &lk) != 0) {
				jv_unref(R, k);
				goto out;
			}
			jv_unref(R, k);
			if (jlist_push(R, kl, lk) != 0)
				goto out;
			if (!c)
				break;
			p = c + 1;
		}
	}
	rc = sorted(R, items, keys, has[0] && jv_truthy(arg[0]), out);
out:
	jobj_unref(R, &items->h);
	if (keys)
		jobj_unref(R, &keys->h);
	return rc;
}

static int
f_dictsort(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("dictsort", "case_sensitive", "by", "reverse");
	if (v.t != JT_DICT)
		return jr_fail(R, v.t == JT_UNDEF ? JINJA_ERROR : JINJA_ERROR, "dictsort needs a mapping, not %s",
		               jv_type_name(v));
	int pos = 0;
	if (has[1]) {
		if (arg[1].t == JT_STR && !strcmp(jv_s(arg[1])->p, "value"))
			pos = 1;
		else if (!(arg[1].t == JT_STR && !strcmp(jv_s(arg[1])->p, "key")))
			return jr_fail(R, JINJA_ERROR, "You can only sort by either \"key\" or \"value\"");
	}
	struct jv items;
	if (view(R, jv_d(v), 'i', &items) != 0)
		return -1;
	struct jlist *keys = jlist_new(R, JL_LIST, jv_l(items)->n);
	int rc = -1;
	for (size_t i = 0; keys && i < jv_l(items)->n; i++) {
		struct jv k;
		if (lower_key(R, jv_l(jv_l(items)->v[i])->v[pos], has[0] && jv_truthy(arg[0]), &k) != 0 ||
		    jlist_push(R, keys, k) != 0)
			goto out;
	}
	if (keys)
		rc = sorted(R, jv_l(items), keys, has[2] && jv_truthy(arg[2]), out);
out:
	jv_unref(R, items);
	if (keys)
		jobj_unref(R, &keys->h);
	return rc;
}

static int
f_minmax(struct jrender *R, struct jv v, struct jargs *a, int max, struct jv *out)
{
	BIND("min", "case_sensitive", "attribute");
	struct jlist *items;
	if (jiter(R, v, &items) != 0)
		return -1;
	int rc = 0;
	struct jv best = JV_UNDEF, bestk = JV_UNDEF;
	for (size_t i = 0; i < items->n && rc == 0; i++) {
		struct jv lk;
		if ((rc = item_key(R, items->v[i], has[1] ? arg[1] : JV_NONE, has[0] && jv_truthy(arg[0]), &lk)) != 0)
			break;
		int r = 0;
		if (i == 0 || (rc = jv_cmp(R, lk, bestk, &r)) == 0) {
			if (i == 0 || (max ? r > 0 : r < 0)) {
				jv_unref(R, bestk);
				bestk = lk;
				best = items->v[i];
				continue;
			}
		}
		jv_unref(R, lk);
	}
	jv_unref(R, bestk);
	if (rc == 0)
		*out = jv_ref(best); // undefined when empty
	jobj_unref(R, &items->h);
	return rc;
}

static int
f_join(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("join", "d", "attribute");
	struct jlist *items;
	struct jbuf b = {0};
	if (jiter(R, v, &items) != 0)
		return -1;
	for (size_t i = 0; i < items->n && R->status == JINJA_OK; i++) {
		if (i && has[0])
			jv_str_of(R, &b, arg[0]);
		struct jv x;
		if (attr_path(R, items->v[i], has[1] ? arg[1] : JV_NONE, JV_UNDEF, &x) != 0)
			break;
		jv_str_of(R, &b, x);
		jv_unref(R, x);
	}
	jobj_unref(R, &items->h);
	return ret_str(R, &b, out);
}

static int
f_indent(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("indent", "width", "first", "blank");
	struct jv s, ind;
	if (to_str(R, v, &s) != 0)
		return -1;
	int rc = -1;
	if (has[0] && arg[0].t == JT_STR)
		ind = jv_ref(arg[0]);
	else {
		int64_t w = 4;
		if (has[0] && want_int(R, arg[0], "width", &w) != 0)
			goto out;
		if (w < 0)
			w = 0;
		if (w > 4096) {
			jr_fail(R, JINJA_UNSUPPORTED, "an indent of %lld", (long long)w);
			goto out;
		}
		struct jstr *sp = jstr_new(R, (size_t)w);
		if (!sp)
			goto out;
		memset(sp->p, ' ', (size_t)w);
		ind = (struct jv){.t = JT_STR, .o = &sp->h};
	}
	{
		struct jlist *lines = jlist_new(R, JL_LIST, 0);
		struct jbuf b = {0};
		// s += "\n", then splitlines
		struct jstr *str = jv_s(s);
		char *tmp = malloc(str->n + 1);
		if (!lines || !tmp) {
			free(tmp);
			if (lines)
				jobj_unref(R, &lines->h);
			jv_unref(R, ind);
			jr_fail(R, JINJA_LIMIT, "out of memory");
			goto out;
		}
		memcpy(tmp, str->p, str->n);
		tmp[str->n] = '\n';
		str_splitlines(R, tmp, str->n + 1, 0, lines);
		free(tmp);
		struct jstr *in = jv_s(ind);
		int blank = has[2] && jv_truthy(arg[2]);
		if (has[1] && jv_truthy(arg[1]))
			jbuf_add(R, &b, in->p, in->n);
		for (size_t i = 0; i < lines->n; i++) {
			struct jstr *line = jv_s(lines->v[i]);
			if (i) {
				jbuf_add(R, &b, "\n", 1);
				if (blank || line->n)
					jbuf_add(R, &b, in->p, in->n);
			}
			jbuf_add(R, &b, line->p, line->n);
		}
		jobj_unref(R, &lines->h);
		jv_unref(R, ind);
		rc = ret_str(R, &b, out);
		if (rc == 0 && jv_safe(s))
			mark_safe(*out, NULL);
	}
out:
	jv_unref(R, s);
	return rc;
}

static int
f_tojson(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
	struct json_opts o = {.ensure_ascii = has[0] && jv_truthy(arg[0]),
	                      .sort_keys = has[3] && jv_truthy(arg[3]),
	                      .item_sep = ", ",
	                      .item_sep_n = 2,
	                      .key_sep = ": ",
	                      .key_sep_n = 2};
	char spaces[64];
	if (has[1] && arg[1].t != JT_NONE) {
		if (arg[1].t == JT_STR) {
			o.indent = jv_s(arg[1])->p;
			o.indent_n = jv_s(arg[1])->n;
		} else if (arg[1].t == JT_INT || arg[1].t == JT_BOOL) {
			int64_t w = arg[1].i < 0 ? 0 : arg[1].i;
			if (w > (int64_t)sizeof spaces)
				return jr_fail(R, JINJA_UNSUPPORTED, "tojson with an indent of %lld", (long long)w);
			memset(spaces, ' ', (size_t)w);
			o.indent = spaces;
			o.indent_n = (size_t)w;
		} else {
			return jr_fail(R, JINJA_UNSUPPORTED, "tojson with an indent of type %s", jv_type_name(arg[1]));
		}
		o.item_sep = ",";
		o.item_sep_n = 1;
	}
	if (has[2] && arg[2].t != JT_NONE) {
		struct jv s = arg[2];
		if (!jv_is_seq(s) || jv_l(s)->n != 2 || jv_l(s)->v[0].t != JT_STR || jv_l(s)->v[1].t != JT_STR)
			return jr_fail(R, JINJA_UNSUPPORTED, "tojson separators that are not two strings");
		o.item_sep = jv_s(jv_l(s)->v[0])->p;
		o.item_sep_n = jv_s(jv_l(s)->v[0])->n;
		o.key_sep = jv_s(jv_l(s)->v[1])->p;
		o.key_sep_n = jv_s(jv_l(s)->v[1])->n;
	}
	struct jbuf b = {0};
	jv_json_dump(R, &b, v, &o, 0);
	return ret_str(R, &b, out);
}

// Python's int(str, base) for what templates pass: optional sign and
// whitespace, digits with single underscores, 0x/0o/0b prefixes with base 0/16/8/2
static int
parse_int(const char *s, size_t n, int base, int64_t *out)
{
	size_t i = 0;
	while (i < n && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r')))
		i++;
	while (n > i && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r')))
		n--;
	int neg = 0;
	if (i < n && (s[i] == '+' || s[i] == '-'))
		neg = s[i++] == '-';
	if (i + 1 < n && s[i] == '0') {
		char p = (char)(s[i + 1] | 0x20);
		int pb = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
		if (pb && (base == 0 || base == pb)) {
			base = pb;
			i += 2;
			if (i < n && s[i] == '_')
				i++;
		}
	}
	if (base == 0)
		base = 10;
	if (i >= n)
		return -1;
	__int128 v = 0;
	int prev_us = 1;
	for (; i < n; i++) {
		if (s[i] == '_') {
			if (prev_us)
				return -1;
			prev_us = 1;
			continue;
		}
		char c = s[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
		        : c >= 'a' && c <= 'z' ? c - 'a' + 10
		        : c >= 'A' && c <= 'Z' ? c - 'A' + 10
		                               : 99;
		if (d >= base)
			return -1;
		v = v * base + d;
		if (v > INT64_MAX)
			return -2;
		prev_us = 0;
	}
	if (prev_us)
		return -1;
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

// Python's float(str): decimal, inf, nan, with whitespace and underscores
static int
parse_float(const char *s, size_t n, double *out)
{
	char buf[128];
	size_t m = 0;
	size_t i = 0;
	while (i < n && ju_isspace((unsigned char)s[i]))
		i++;
	while (n > i && ju_isspace((unsigned char)s[n - 1]))
		n--;
	if (i >= n || n - i >= sizeof buf)
		return -1;
	for (; i < n; i++) {
		if (s[i] == '_') {
			if (!m || !(buf[m - 1] >= '0' && buf[m - 1] <= '9') || i + 1 >= n ||
			    !(s[i + 1] >= '0' && s[i + 1] <= '9'))
				return -1;
			continue;
		}
		buf[m++] = s[i];
	}
	buf[m] = 0;
	const char *b = buf + (buf[0] == '+' || buf[0] == '-');
	if (!strcasecmp(b, "inf") || !strcasecmp(b, "infinity")) {
		*out = buf[0] == '-' ? -INFINITY : INFINITY;
		return 0;
	}
	if (!strcasecmp(b, "nan")) {
		*out = NAN;
		return 0;
	}
	for (const char *p = b; *p; p++)
		if (!((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' || *p == '-'))
			return -1;
	char *end;
	*out = strtod(buf, &end);
	return *end || end == buf ? -1 : 0;
}

static int
f_int(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("int", "default", "base");
	int64_t base = 10, r;
	if (has[1] && want_int(R, arg[1], "base", &base) != 0)
		return -1;
	struct jv dflt = has[0] ? arg[0] : jv_int(0);
	switch (v.t) {
	case JT_INT:
	case JT_BOOL:
		*out = jv_int(v.i);
		return 0;
	case JT_FLOAT:
		if (!isfinite(v.f))
			break;
		if (fabs(v.f) >= 9.2e18)
			return jr_fail(R, JINJA_UNSUPPORTED, "integers beyond 64 bits");
		*out = jv_int((int64_t)v.f);
		return 0;
	case JT_STR: {
		int rc = parse_int(jv_s(v)->p, jv_s(v)->n, (int)base, &r);
		if (rc == 0) {
			*out = jv_int(r);
			return 0;
		}
		if (rc == -2)
			return jr_fail(R, JINJA_UNSUPPORTED, "integers beyond 64 bits");
		double d;
		if (parse_float(jv_s(v)->p, jv_s(v)->n, &d) == 0 && isfinite(d)) {
			if (fabs(d) >= 9.2e18)
				return jr_fail(R, JINJA_UNSUPPORTED, "integers beyond 64 bits");
			*out = jv_int((int64_t)d);
			return 0;
		}
		break;
	}
	case JT_UNDEF:
		return jr_fail(R, JINJA_ERROR, "an undefined value cannot be an int");
	default:
		break;
	}
	*out = jv_ref(dflt);
	return 0;
}

static int
f_float(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("float", "default");
	double d;
	switch (v.t) {
	case JT_INT:
	case JT_BOOL:
		*out = jv_float((double)v.i);
		return 0;
	case JT_FLOAT:
		*out = v;
		return 0;
	case JT_STR:
		if (parse_float(jv_s(v)->p, jv_s(v)->n, &d) == 0) {
			*out = jv_float(d);
			return 0;
		}
		break;
	case JT_UNDEF:
		return jr_fail(R, JINJA_ERROR, "an undefined value cannot be a float");
	default:
		break;
	}
	*out = jv_ref(has[0] ? arg[0] : jv_float(0.0));
	return 0;
}

static int
f_round(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("round", "precision", "method");
	int64_t prec = 0;
	if (has[0] && want_int(R, arg[0], "precision", &prec) != 0)
		return -1;
	const char *method = "common";
	if (has[1]) {
		if (want_str(R, arg[1], "method") != 0)
			return -1;
		method = jv_s(arg[1])->p;
	}
	if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
		return jr_fail(R, JINJA_ERROR, "method must be common, ceil or floor");
	if (!jv_is_num(v))
		return jr_fail(R, JINJA_ERROR, "round() of a %s", jv_type_name(v));
	if (v.t != JT_FLOAT) { // round(int, n) stays an int; ceil/floor give floats
		if (!strcmp(method, "common")) {
			if (prec >= 0) {
				*out = jv_int(v.i);
				return 0;
			}
			return jr_fail(R, JINJA_UNSUPPORTED, "rounding an int to negative digits");
		}
	}
	double x = v.t == JT_FLOAT ? v.f : (double)v.i;
	if (prec < -300 || prec > 300)
		return jr_fail(R, JINJA_UNSUPPORTED, "rounding to %lld digits", (long long)prec);
	if (strcmp(method, "common")) {
		double p = pow(10, (double)prec);
		*out = jv_float((!strcmp(method, "ceil") ? ceil(x * p) : floor(x * p)) / p);
		return 0;
	}
	if (!isfinite(x) || prec < 0 || prec > 17) {
		if (prec < 0)
			return jr_fail(R, JINJA_UNSUPPORTED, "rounding to negative digits");
		*out = jv_float(x);
		return 0;
	}
	// correctly rounded, halves to even, like Python's round()
	char buf[400];
	snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
	*out = jv_float(strtod(buf, NULL));
	return 0;
}

static int
f_sum(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("sum", "attribute", "start");
	struct jlist *items;
	if (jiter(R, v, &items) != 0)
		return -1;
	struct jv acc = jv_ref(has[1] ? arg[1] : jv_int(0));
	int rc = 0;
	for (size_t i = 0; i < items->n && rc == 0; i++) {
		struct jv x, next;
		if ((rc = attr_path(R, items->v[i], has[0] ? arg[0] : JV_NONE, JV_UNDEF, &x)) != 0)
			break;
		rc = jbinop(R, OP_ADD, acc, x, &next);
		jv_unref(R, x);
		jv_unref(R, acc);
		acc = rc == 0 ? next : JV_UNDEF;
	}
	jobj_unref(R, &items->h);
	if (rc != 0) {
		jv_unref(R, acc);
		return -1;
	}
	*out = acc;
	return 0;
}

static int
f_truncate(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("truncate", "length", "killwords", "end", "leeway");
	int64_t length = 255, leeway = 5;
	if (has[0] && want_int(R, arg[0], "length", &length) != 0)
		return -1;
	if (has[3] && arg[3].t != JT_NONE && want_int(R, arg[3], "leeway", &leeway) != 0)
		return -1;
	struct jv end;
	if (has[2]) {
		if (want_str(R, arg[2], "end") != 0)
			return -1;
		end = jv_ref(arg[2]);
	} else if (jv_newstr(R, "...", 3, &end) != 0)
		return -1;
	struct jv s;
	if (to_str(R, v, &s) != 0) {
		jv_unref(R, end);
		return -1;
	}
	struct jstr *str = jv_s(s), *e = jv_s(end);
	int64_t len = (int64_t)jstr_ncp(str), elen = (int64_t)jstr_ncp(e);
	int rc = 0;
	if (length < elen || leeway < 0) {
		rc = jr_fail(R, JINJA_ERROR, "expected length >= %lld, got %lld", (long long)elen, (long long)length);
	} else if (len <= length + leeway) {
		*out = jv_ref(s);
	} else {
		size_t cut = ju_offset(str->p, str->n, (size_t)(length - elen));
		if (!(has[1] && jv_truthy(arg[1]))) { // rsplit(" ", 1)[0]
			size_t k = cut;
			while (k > 0 && str->p[k - 1] != ' ')
				k--;
			if (k > 0)
				cut = k - 1;
		}
		struct jbuf b = {0};
		jbuf_add(R, &b, str->p, cut);
		jbuf_add(R, &b, e->p, e->n);
		rc = ret_str(R, &b, out);
	}
	jv_unref(R, s);
	jv_unref(R, end);
	return rc;
}

static int
f_wordcount(struct jrender *R, struct jv v, struct jv *out)
{
	struct jv s;
	if (to_str(R, v, &s) != 0)
		return -1;
	struct jstr *str = jv_s(s);
	int64_t words = 0;
	int in = 0;
	for (size_t i = 0; i < str->n;) {
		uint32_t c;
		i += ju_decode(str->p + i, str->n - i, &c);
		int w = c == '_' || (unicode_flags(c) & (UNICODE_LETTER | UNICODE_NUMBER));
		words += w && !in;
		in = w;
	}
	jv_unref(R, s);
	*out = jv_int(words);
	return 0;
}


static int
f_first_last(struct jrender *R, struct jv v, int last, struct jv *out)
{
	if (last && v.t == JT_LIST && (jv_l(v)->kind == JL_GEN || jv_l(v)->kind == JL_VIEW))
		return jr_fail(R, JINJA_ERROR, "'%s' object is not reversible", jv_type_name(v));
	if (last && (v.t == JT_NS || v.t == JT_LOOP))
		return jr_fail(R, JINJA_ERROR, "'%s' object is not reversible", jv_type_name(v));
	struct jlist *items;
	if (jiter(R, v, &items) != 0)
		return -1;
	if (items->n)
		*out = jv_ref(items->v[last ? items->n - 1 : 0]);
	jobj_unref(R, &items->h);
	return 0;
}

// map, select, reject, selectattr, rejectattr: the result is a generator
static int
f_map_select(struct jrender *R, const char *which, struct jv v, struct jargs *a, struct jframe *f, struct jv *out)
{
	int is_map = !strcmp(which, "map"), attr = !strcmp(which, "selectattr") || !strcmp(which, "rejectattr");
	int reject = which[0] == 'r';
	struct jlist *res = jlist_new(R, JL_GEN, 0);
	if (!res)
		return -1;
	*out = list_v(res);
	if (!jv_truthy(v))
		return 0;
	struct jlist *items;
	if (jiter(R, v, &items) != 0)
		return -1;
	int rc = 0;
	struct jargs sub = {0};
	if (is_map) {
		struct jv attribute = JV_UNDEF, dflt = JV_UNDEF;
		int by_attr = !a->npos;
		if (by_attr) {
			int found = 0;
			for (size_t k = 0; k < a->nkw; k++) {
				if (!strcmp(a->kw[k], "attribute"))
					attribute = a->kwv[k], found = 1;
				else if (!strcmp(a->kw[k], "default"))
					dflt = a->kwv[k];
				else
					rc = jr_fail(R, JINJA_ERROR, "Unexpected keyword argument '%s'", a->kw[k]);
			}
			if (!found && rc == 0)
				rc = jr_fail(R, JINJA_ERROR, "map requires a filter argument");
		} else if (want_str(R, a->pos[0], "the filter name") != 0) {
			rc = -1;
		}
		sub = (struct jargs){
			a->npos ? a->pos + 1 : NULL, a->npos ? a->npos - 1 : 0, a->kw, a->kwv, a->nkw, JV_UNDEF};
		for (size_t i = 0; i < items->n && rc == 0; i++) {
			struct jv x;
			if (by_attr)
				rc = attr_path(R, items->v[i], attribute, dflt.t == JT_NONE ? JV_UNDEF : dflt, &x);
			else
				rc = jfilter(R, jv_s(a->pos[0])->p, items->v[i], &sub, f, &x);
			if (rc == 0)
				rc = jlist_push(R, res, x);
		}
		jobj_unref(R, &items->h);
		return rc;
	}
	size_t off = attr ? 1 : 0;
	if (attr && !a->npos)
		rc = jr_fail(R, JINJA_ERROR, "Missing parameter for attribute name");
	const char *test = NULL;
	if (rc == 0 && a->npos > off) {
		if (want_str(R, a->pos[off], "the test name") != 0)
			rc = -1;
		else
			test = jv_s(a->pos[off])->p;
	}
	sub = (struct jargs){a->npos > off + 1 ? a->pos + off + 1 : NULL,
	                     a->npos > off + 1 ? a->npos - off - 1 : 0,
	                     a->kw,
	                     a->kwv,
	                     a->nkw,
	                     JV_UNDEF};
	for (size_t i = 0; i < items->n && rc == 0; i++) {
		struct jv x;
		if ((rc = attr_path(R, items->v[i], attr ? a->pos[0] : JV_NONE, JV_UNDEF, &x)) != 0)
			break;
		int ok;
		if (test)
			rc = jtest(R, test, x, &sub, &ok);
		else
			ok = jv_truthy(x);
		jv_unref(R, x);
		if (rc == 0 && ok != reject)
			rc = jlist_push(R, res, jv_ref(items->v[i]));
	}
	jobj_unref(R, &items->h);
	return rc;
}

static int
f_unique(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("unique", "case_sensitive", "attribute");
	struct jlist *items, *seen = jlist_new(R, JL_LIST, 0), *res = jlist_new(R, JL_GEN, 0);
	if (!seen || !res)
		return -1;
	*out = list_v(res);
	if (jiter(R, v, &items) != 0) {
		jobj_unref(R, &seen->h);
		return -1;
	}
	int rc = 0;
	for (size_t i = 0; i < items->n && rc == 0; i++) {
		struct jv lk;
		if ((rc = item_key(R, items->v[i], has[1] ? arg[1] : JV_NONE, has[0] && jv_truthy(arg[0]), &lk)) != 0)
			break;
		if (!jv_hashable(lk)) {
			rc = jr_fail(R, JINJA_ERROR, "unhashable type: '%s'", jv_type_name(lk));
			jv_unref(R, lk);
			break;
		}
		int dup = 0;
		for (size_t j = 0; j < seen->n && !dup; j++)
			dup = jv_eq(seen->v[j], lk, 0);
		if (dup) {
			jv_unref(R, lk);
			continue;
		}
		if ((rc = jlist_push(R, seen, lk)) == 0)
			rc = jlist_push(R, res, jv_ref(items->v[i]));
	}
	jobj_unref(R, &items->h);
	jobj_unref(R, &seen->h);
	return rc;
}

static int
f_reverse(struct jrender *R, struct jv v, struct jv *out)
{
	if (v.t == JT_STR) {
		struct jstr *s = jv_s(v);
		struct jstr *r = jstr_new(R, s->n);
		if (!r)
			return -1;
		size_t o = s->n;
		for (size_t i = 0; i < s->n;) {
			size_t k = ju_offset(s->p + i, s->n - i, 1);
			o -= k;
			memcpy(r->p + o, s->p + i, k);
			i += k;
		}
		r->safe = s->safe;
		out->t = JT_STR;
		out->o = &r->h;
		return 0;
	}
	// reversed(): an iterator (no len, always true); a generator is listed first
	struct jlist *items;
	if (jiter(R, v, &items) != 0)
		return -1;
	int listed = v.t == JT_LIST && jv_l(v)->kind == JL_GEN;
	struct jlist *r = jlist_new(R, listed ? JL_LIST : JL_GEN, items->n);
	if (!r) {
		jobj_unref(R, &items->h);
		return -1;
	}
	for (size_t i = items->n; i > 0; i--)
		jlist_push(R, r, jv_ref(items->v[i - 1]));
	jobj_unref(R, &items->h);
	*out = list_v(r);
	return R->status == JINJA_OK ? 0 : -1;
}

static int
f_items(struct jrender *R, struct jv v, struct jv *out)
{
	if (v.t == JT_UNDEF) {
		struct jlist *l = jlist_new(R, JL_GEN, 0);
		if (!l)
			return -1;
		*out = list_v(l);
		return 0;
	}
	if (v.t != JT_DICT)
		return jr_fail(R, JINJA_ERROR, "Can only get item pairs from a mapping.");
	if (view(R, jv_d(v), 'i', out) != 0)
		return -1;
	jv_l(*out)->kind = JL_GEN;
	return 0;
}

static int
f_list(struct jrender *R, struct jv v, struct jv *out)
{
	struct jlist *items;
	if (jiter(R, v, &items) != 0)
		return -1;
	struct jlist *l = jlist_new(R, JL_LIST, items->n);
	if (l)
		for (size_t i = 0; i < items->n; i++)
			jlist_push(R, l, jv_ref(items->v[i]));
	jobj_unref(R, &items->h);
	if (!l)
		return -1;
	*out = list_v(l);
	return R->status == JINJA_OK ? 0 : -1;
}

static int
f_default(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("default", "default_value", "boolean");
	if (v.t == JT_UNDEF || (has[1] && jv_truthy(arg[1]) && !jv_truthy(v))) {
		if (has[0])
			*out = jv_ref(arg[0]);
		else
			return jv_newstr(R, "", 0, out);
		return 0;
	}
	*out = jv_ref(v);
	return 0;
}

static int
f_replace(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("replace", "old", "new", "count");
	if (!has[0] || !has[1])
		return jr_fail(R, JINJA_ERROR, "replace() missing a required argument");
	int64_t count = -1;
	if (has[2] && arg[2].t != JT_NONE && want_int(R, arg[2], "count", &count) != 0)
		return -1;
	struct jv s, o, n;
	if (to_str(R, v, &s) != 0)
		return -1;
	if (to_str(R, arg[0], &o) != 0) {
		jv_unref(R, s);
		return -1;
	}
	if (to_str(R, arg[1], &n) != 0) {
		jv_unref(R, s);
		jv_unref(R, o);
		return -1;
	}
	int rc = str_replace(R, jv_s(s), jv_s(o), jv_s(n), count, out);
	jv_unref(R, s);
	jv_unref(R, o);
	jv_unref(R, n);
	return rc;
}

static int
f_center(struct jrender *R, struct jv v, struct jargs *a, struct jv *out)
{
	BIND("center", "width");
	int64_t w = 80;
	if (has[0] && want_int(R, arg[0], "width", &w) != 0)
		return -1;
	struct jv s;
	if (to_str(R, v, &s) != 0)
		return -1;
	int rc = pad(R, jv_s(s), w, JV_UNDEF, 0, out);
	if (rc == 0 && jv_safe(s))
		mark_safe(*out, jv_s(s));
	jv_unref(R, s);
	return rc;
}

static const char *const known_filters[] = {
	"abs",       "attr",       "batch",       "capitalize", "center",  "count",
	"d",         "default",    "dictsort",    "e",          "escape",  "filesizeformat",
	"first",     "float",      "forceescape", "format",     "groupby", "indent",
	"int",       "join",       "last",        "length",     "list",    "lower",
	"items",     "map",        "min",         "max",        "pprint",  "random",
	"reject",    "rejectattr", "replace",     "reverse",    "round",   "safe",
	"select",    "selectattr", "slice",       "sort",       "string",  "striptags",
	"sum",       "title",      "trim",        "truncate",   "unique",  "upper",
	"urlencode", "urlize",     "wordcount",   "wordwrap",   "xmlattr", "tojson",
	NULL};

int
jfilter_known(const char *name)
{
	return name_in(name, strlen(name), known_filters);
}

int
jfilter(struct jrender *R, const char *name, struct jv v, struct jargs *a, struct jframe *f, struct jv *out)
{
	*out = JV_UNDEF;
	if (jstep(R) != 0)
		return -1;
#define IS(s) (!strcmp(name, s))
	if (IS("trim")) {
		BIND("trim", "chars");
		struct jv s;
		if (to_str(R, v, &s) != 0)
			return -1;
		if (has[0] && arg[0].t != JT_NONE && want_str(R, arg[0], "chars") != 0) {
			jv_unref(R, s);
			return -1;
		}
		int with = has[0] && arg[0].t == JT_STR;
		struct jv chars = JV_UNDEF;
		if (with && jv_safe(s) && jv_escape(R, arg[0], &chars) != 0) { // Markup.strip escapes its argument
			jv_unref(R, s);
			return -1;
		}
		struct jstr *cs = chars.t == JT_STR ? jv_s(chars) : with ? jv_s(arg[0]) : NULL;
		int rc = strip(R, jv_s(s), cs ? cs->p : NULL, cs ? cs->n : 0, 3, out);
		if (rc == 0 && jv_safe(s))
			mark_safe(*out, jv_s(s));
		jv_unref(R, chars);
		jv_unref(R, s);
		return rc;
	}
	if (IS("tojson"))
		return f_tojson(R, v, a, out);
	if (IS("length") || IS("count")) {
		if (no_args(R, name, a) != 0)
			return -1;
		int64_t n = py_len(R, v);
		if (n < 0)
			return -1;
		*out = jv_int(n);
		return 0;
	}
	if (IS("string")) {
		if (no_args(R, name, a) != 0)
			return -1;
		return to_str(R, v, out);
	}
	if (IS("safe")) {
		if (no_args(R, name, a) != 0)
			return -1;
		if (jv_safe(v)) {
			*out = jv_ref(v);
			return 0;
		}
		struct jv s;
		if (to_str(R, v, &s) != 0)
			return -1;
		if (s.o == v.o) { // a fresh Markup, not the caller's string
			int rc = jv_newstr(R, jv_s(s)->p, jv_s(s)->n, out);
			jv_unref(R, s);
			if (rc != 0)
				return -1;
		} else {
			*out = s;
		}
		jv_s(*out)->safe = 1;
		return 0;
	}
	if (IS("upper") || IS("lower") || IS("capitalize") || IS("title")) {
		if (no_args(R, name, a) != 0)
			return -1;
		struct jv s;
		if (to_str(R, v, &s) != 0)
			return -1;
		int rc = recase(R, jv_s(s)->p, jv_s(s)->n,
		                IS("upper")   ? CASE_UPPER
		                : IS("lower") ? CASE_LOWER
		                : IS("title") ? CASE_JTITLE
		                              : CASE_CAPITALIZE,
		                out);
		if (rc == 0 && jv_safe(s) && !IS("title"))
			mark_safe(*out, NULL);
		jv_unref(R, s);
		return rc;
	}
	if (IS("default") || IS("d"))
		return f_default(R, v, a, out);
	if (IS("join"))
		return f_join(R, v, a, out);
	if (IS("first") || IS("last")) {
		if (no_args(R, name, a) != 0)
			return -1;
		return f_first_last(R, v, IS("last"), out);
	}
	if (IS("items")) {
		if (no_args(R, name, a) != 0)
			return -1;
		return f_items(R, v, out);
	}
	if (IS("list")) {
		if (no_args(R, name, a) != 0)
			return -1;
		return f_list(R, v, out);
	}
	if (IS("map") || IS("select") || IS("reject") || IS("selectattr") || IS("rejectattr"))
		return f_map_select(R, name, v, a, f, out);
	if (IS("replace"))
		return f_replace(R, v, a, out);
	if (IS("indent"))
		return f_indent(R, v, a, out);
	if (IS("dictsort"))
		return f_dictsort(R, v, a, out);
	if (IS("sort"))
		return f_sort(R, v, a, out);
	if (IS("unique"))
		return f_unique(R, v, a, out);
	if (IS("reverse")) {
		if (no_args(R, name, a) != 0)
			return -1;
		return f_reverse(R, v, out);
	}
	if (IS("int"))
		return f_int(R, v, a, out);
	if (IS("float"))
		return f_float(R, v, a, out);
	if (IS("round"))
		return f_round(R, v, a, out);
	if (IS("sum"))
		return f_sum(R, v, a, out);
	if (IS("min") || IS("max"))
		return f_minmax(R, v, a, IS("max"), out);
	if (IS("abs")) {
		if (no_args(R, name, a) != 0)
			return -1;
		if (v.t == JT_FLOAT)
			*out = jv_float(fabs(v.f));
		else if (v.t == JT_INT || v.t == JT_BOOL) {
			if (v.i == INT64_MIN)
				return jr_fail(R, JINJA_UNSUPPORTED, "integers beyond 64 bits");
			*out = jv_int(v.i < 0 ? -v.i : v.i);
		} else
			return jr_fail(R, JINJA_ERROR, "bad operand type for abs(): '%s'", jv_type_name(v));
		return 0;
	}
	if (IS("format")) {
		struct jv s, args;
		if (to_str(R, v, &s) != 0)
			return -1;
		if (a->npos && a->nkw) {
			jv_unref(R, s);
			return jr_fail(R, JINJA_ERROR,
			               "can't handle positional and keyword arguments at the same time");
		}
		int rc;
		if (a->nkw) {
			struct jargs kw = {NULL, 0, a->kw, a->kwv, a->nkw, JV_UNDEF};
			rc = make_namespace(R, &kw, JT_DICT, &args);
		} else {
			struct jlist *t = jlist_new(R, JL_TUPLE, a->npos);
			rc = t ? 0 : -1;
			for (size_t i = 0; t && i < a->npos; i++)
				jlist_push(R, t, jv_ref(a->pos[i]));
			args = t ? list_v(t) : JV_UNDEF;
		}
		if (rc == 0)
			rc = jstr_format_percent(R, s, args, out);
		jv_unref(R, args);
		jv_unref(R, s);
		return rc;
	}
	if (IS("center"))
		return f_center(R, v, a, out);
	if (IS("truncate"))
		return f_truncate(R, v, a, out);
	if (IS("wordcount"))
		return no_args(R, name, a) ? -1 : f_wordcount(R, v, out);
	if (IS("e") || IS("escape"))
		return no_args(R, name, a) ? -1 : jv_escape(R, v, out);
	if (IS("attr")) {
		if (a->npos != 1 || a->nkw || want_str(R, a->pos[0], "the attribute name") != 0)
			return R->status == JINJA_OK ? jr_fail(R, JINJA_ERROR, "attr() takes exactly one argument")
			                             : -1;
		struct jstr *n = jv_s(a->pos[0]);
		if (v.t == JT_DICT)
			return jmethod(R, v, n->p, n->n, out);
		if (v.t == JT_UNDEF)
			return 0;
		return jgetattr(R, v, n->p, n->n, out);
	}
	if (jfilter_known(name))
		return jr_fail(R, JINJA_UNSUPPORTED, "the filter '%s'", name);
	return jr_fail(R, JINJA_ERROR, "No filter named '%s'", name);
#undef IS
}

// --- tests -------------------------------------------------------------------------------

static const char *const known_tests[] = {
	"odd",     "even",   "divisibleby", "defined",  "undefined", "filter", "test",    "none",
	"boolean", "false",  "true",        "integer",  "float",     "lower",  "upper",   "string",
	"mapping", "number", "sequence",    "iterable", "callable",  "sameas", "escaped", "in",
	"==",      "eq",     "equalto",     "!=",       "ne",        ">",      "gt",      "greaterthan",
	">=",      "ge",     "<",           "lt",       "lessthan",  "<=",     "le",      NULL};

int
jtest_known(const char *name)
{
	return name_in(name, strlen(name), known_tests);
}

int
jtest(struct jrender *R, const char *name, struct jv v, struct jargs *a, int *out)
{
	*out = 0;
	if (jstep(R) != 0)
		return -1;
#define IS(s) (!strcmp(name, s))
	if (IS("defined") || IS("undefined") || IS("none") || IS("boolean") || IS("false") || IS("true") ||
	    IS("integer") || IS("float") || IS("string") || IS("mapping") || IS("number") || IS("sequence") ||
	    IS("iterable") || IS("callable") || IS("escaped") || IS("lower") || IS("upper")) {
		if (no_args(R, name, a) != 0)
			return -1;
		if (IS("defined"))
			*out = v.t != JT_UNDEF;
		else if (IS("undefined"))
			*out = v.t == JT_UNDEF;
		else if (IS("none"))
			*out = v.t == JT_NONE;
		else if (IS("boolean"))
			*out = v.t == JT_BOOL;
		else if (IS("false"))
			*out = v.t == JT_BOOL && !v.i;
		else if (IS("true"))
			*out = v.t == JT_BOOL && v.i;
		else if (IS("integer"))
			*out = v.t == JT_INT;
		else if (IS("float"))
			*out = v.t == JT_FLOAT;
		else if (IS("string"))
			*out = v.t == JT_STR;
		else if (IS("mapping"))
			*out = v.t == JT_DICT;
		else if (IS("number"))
			*out = jv_is_num(v);
		else if (IS("sequence"))
			*out = v.t == JT_UNDEF || v.t == JT_STR || v.t == JT_DICT || jv_is_seq(v);
		else if (IS("iterable"))
			*out = v.t == JT_UNDEF || v.t == JT_STR || v.t == JT_DICT || v.t == JT_LIST;
		else if (IS("callable"))
			*out = v.t == JT_UNDEF || v.t == JT_MACRO || v.t == JT_FUNC;
		else if (IS("escaped"))
			*out = 0;
		else { // lower, upper: str(v).islower()
			struct jv s, r;
			if (to_str(R, v, &s) != 0)
				return -1;
			struct jargs none = {0};
			int rc = str_method(R, IS("lower") ? S_ISLOWER : S_ISUPPER, jv_s(s), &none, &r);
			jv_unref(R, s);
			if (rc != 0)
				return -1;
			*out = (int)r.i;
		}
		return 0;
	}
	if (IS("odd") || IS("even") || IS("divisibleby")) {
		struct jv m = jv_int(2), r;
		if (IS("divisibleby")) {
			BIND("divisibleby", "num");
			if (!has[0])
				return jr_fail(R, JINJA_ERROR, "divisibleby needs a number");
			m = arg[0];
		} else if (no_args(R, name, a) != 0)
			return -1;
		if (jbinop(R, OP_MOD, v, m, &r) != 0)
			return -1;
		*out = IS("odd") ? jv_eq(r, jv_int(1), 0) : jv_eq(r, jv_int(0), 0);
		jv_unref(R, r);
		return 0;
	}
	if (IS("filter") || IS("test")) {
		if (no_args(R, name, a) != 0)
			return -1;
		*out = v.t == JT_STR && (IS("filter") ? jfilter_known(jv_s(v)->p) : jtest_known(jv_s(v)->p));
		return 0;
	}
	// the comparisons take one argument
	struct jv other;
	{
		BIND(name, "other");
		if (!has[0])
			return jr_fail(R, JINJA_ERROR, "the test '%s' needs an argument", name);
		other = arg[0];
	}
	if (IS("sameas")) {
		*out = v.t == other.t && (jv_is_obj(v) ? v.o == other.o : jv_eq(v, other, 0));
		return 0;
	}
	int r;
	if (IS("==") || IS("eq") || IS("equalto"))
		*out = jv_eq(v, other, 0);
	else if (IS("!=") || IS("ne"))
		*out = !jv_eq(v, other, 0);
	else if (IS("in")) {
		struct jlist *l;
		if (other.t == JT_STR) {
			if (v.t != JT_STR)
				return jr_fail(R, JINJA_ERROR, "'in <string>' requires string as left operand");
			*out = jv_s(v)->n == 0 ||
			       memmem(jv_s(other)->p, jv_s(other)->n, jv_s(v)->p, jv_s(v)->n) != NULL;
		} else if (other.t == JT_DICT) {
			*out = jv_hashable(v) && jdict_get(jv_d(other), v) != NULL;
		} else {
			if (jiter(R, other, &l) != 0)
				return -1;
			for (size_t i = 0; i < l->n && !*out; i++)
				*out = jv_eq(l->v[i], v, 0);
			jobj_unref(R, &l->h);
		}
	} else if (IS(">") || IS("gt") || IS("greaterthan") || IS(">=") || IS("ge") || IS("<") || IS("lt") ||
	           IS("lessthan") || IS("<=") || IS("le")) {
		if (jv_cmp(R, v, other, &r) != 0)
			return -1;
		if (IS(">") || IS("gt") || IS("greaterthan"))
			*out = r > 0;
		else if (IS(">=") || IS("ge"))
			*out = r >= 0;
		else if (IS("<") || IS("lt") || IS("lessthan"))
			*out = r < 0;
		else
			*out = r <= 0;
	} else {
		return jr_fail(R, JINJA_ERROR, "No test named '%s'", name);
	}
	return 0;
#undef IS
}
