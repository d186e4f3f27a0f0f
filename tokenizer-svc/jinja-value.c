// jinja-value.c - the values of the Jinja interpreter: the heap and its
// reference counts, strings, lists and dicts, and the Python behaviour the
// output depends on (truth, ==, ordering, str(), repr(), float repr, and
// json.loads / json.dumps). See jinja-impl.h.
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja-impl.h"
#include "unicode.h"

int
jr_fail(struct jrender *R, enum jinja_status s, const char *fmt, ...)
{
	if (R->status != JINJA_OK)
		return -1;
	R->status = s;
	va_list ap;
	va_start(ap, fmt);
	ad_verr(R->err, fmt, ap); // (err: AD_ERRLEN bytes)
	va_end(ap);
	return -1;
}

// --- the heap ---------------------------------------------------------------

static void
heap_link(struct jheap *h, struct jobj *o)
{
	if (!h->head.next)
		h->head.next = h->head.prev = &h->head;
	o->next = &h->head;
	o->prev = h->head.prev;
	h->head.prev->next = o;
	h->head.prev = o;
}

static int
heap_charge(struct jrender *R, struct jheap *h, size_t bytes)
{
	if (!h->immortal && h->bytes + bytes > h->limit) {
		h->failed = 1;
		return jr_fail(R, JINJA_LIMIT, "the template used more than %zu bytes of memory", h->limit);
	}
	h->bytes += bytes;
	return 0;
}

void *
jheap_alloc(struct jrender *R, struct jheap *h, enum jt t, size_t size)
{
	if (R->status != JINJA_OK || heap_charge(R, h, size) != 0)
		return NULL;
	struct jobj *o = calloc(1, size);
	if (!o) {
		h->bytes -= size;
		jr_fail(R, JINJA_LIMIT, "out of memory");
		return NULL;
	}
	o->rc = h->immortal ? -1 : 1;
	o->t = (uint8_t)t;
	o->bytes = size;
	heap_link(h, o);
	return o;
}

// the arrays an object owns besides itself
static void
obj_free_arrays(struct jobj *o)
{
	switch (o->t) {
	case JT_LIST:
		free(((struct jlist *)o)->v);
		break;
	case JT_DICT:
	case JT_NS:
		free(((struct jdict *)o)->k);
		free(((struct jdict *)o)->v);
		break;
	case JT_FRAME:
		free(((struct jframe *)o)->names);
		free(((struct jframe *)o)->vals);
		break;
	default:
		break;
	}
}

void
jheap_free_all(struct jheap *h)
{
	if (!h->head.next)
		return;
	struct jobj *o = h->head.next;
	while (o != &h->head) {
		struct jobj *next = o->next;
		obj_free_arrays(o);
		free(o);
		o = next;
	}
	h->head.next = h->head.prev = &h->head;
	h->bytes = 0;
}

void
jheap_move(struct jheap *dst, struct jheap *src)
{
	*dst = *src;
	dst->head.next = dst->head.prev = &dst->head;
	if (!src->head.next || src->head.next == &src->head)
		return;
	dst->head.next = src->head.next;
	dst->head.prev = src->head.prev;
	dst->head.next->prev = &dst->head;
	dst->head.prev->next = &dst->head;
	src->head.next = src->head.prev = &src->head;
}

struct jv
jv_ref(struct jv v)
{
	if (jv_is_obj(v) && v.o->rc >= 0)
		v.o->rc++;
	return v;
}

static void
dead_push(struct jrender *R, struct jobj *o)
{
	if (R->n_dead == R->cap_dead) {
		size_t cap = R->cap_dead ? 2 * R->cap_dead : 64;
		struct jobj **d = realloc(R->dead, cap * sizeof *d);
		if (!d)
			return; // leaked until the sweep at the end of the render
		R->dead = d;
		R->cap_dead = cap;
	}
	R->dead[R->n_dead++] = o;
}

static void
release(struct jrender *R, struct jobj *o)
{
	if (o && o->rc > 0 && --o->rc == 0)
		dead_push(R, o);
}

static void
release_v(struct jrender *R, struct jv v)
{
	if (jv_is_obj(v))
		release(R, v.o);
}

// Freeing is iterative (a work list) so that a deeply nested value cannot
// exhaust the stack.
void
jobj_unref(struct jrender *R, struct jobj *o)
{
	size_t base = R->n_dead;
	release(R, o);
	while (R->n_dead > base) {
		struct jobj *d = R->dead[--R->n_dead];
		switch (d->t) {
		case JT_LIST: {
			struct jlist *l = (struct jlist *)d;
			for (size_t i = 0; i < l->n; i++)
				release_v(R, l->v[i]);
			break;
		}
		case JT_DICT:
		case JT_NS: {
			struct jdict *m = (struct jdict *)d;
			for (size_t i = 0; i < m->n; i++) {
				release_v(R, m->k[i]);
				release_v(R, m->v[i]);
			}
			break;
		}
		case JT_FUNC:
			release_v(R, ((struct jfunc *)d)->self);
			break;
		case JT_MACRO:
			if (((struct jmacro *)d)->frame) // NULL for a macro of the root frame
				release(R, &((struct jmacro *)d)->frame->h);
			break;
		case JT_LOOP:
			release(R, &((struct jloop *)d)->items->h);
			release_v(R, ((struct jloop *)d)->changed);
			break;
		case JT_FRAME: {
			struct jframe *f = (struct jframe *)d;
			if (f->parent)
				release(R, &f->parent->h);
			for (size_t i = 0; i < f->n; i++)
				release_v(R, f->vals[i]);
			break;
		}
		default:
			break;
		}
		d->prev->next = d->next;
		d->next->prev = d->prev;
		R->heap.bytes -= d->bytes;
		obj_free_arrays(d);
		free(d);
	}
}

void
jv_unref(struct jrender *R, struct jv v)
{
	if (jv_is_obj(v))
		jobj_unref(R, v.o);
}

// grow an owned array of an object, charging the heap
static int
grow(struct jrender *R, struct jobj *o, void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t cap2 = *cap ? *cap : 4;
	while (cap2 < need)
		cap2 *= 2;
	size_t add = (cap2 - *cap) * elem;
	if (heap_charge(R, &R->heap, add) != 0)
		return -1;
	void *q = realloc(*p, cap2 * elem);
	if (!q) {
		R->heap.bytes -= add;
		return jr_fail(R, JINJA_LIMIT, "out of memory");
	}
	*p = q;
	*cap = cap2;
	o->bytes += add;
	return 0;
}

// --- strings ------------------------------------------------------------------

struct jstr *
jstr_new(struct jrender *R, size_t n)
{
	if (n > ((size_t)1 << 40))
		return jr_fail(R, JINJA_LIMIT, "a string of %zu bytes", n), NULL;
	struct jstr *s = jheap_alloc(R, &R->heap, JT_STR, sizeof *s + n + 1);
	if (!s)
		return NULL;
	s->n = n;
	s->ncp = SIZE_MAX;
	s->p[n] = 0;
	return s;
}

int
jv_newstr(struct jrender *R, const char *p, size_t n, struct jv *out)
{
	struct jstr *s = jstr_new(R, n);
	if (!s)
		return -1;
	if (n)
		memcpy(s->p, p, n);
	out->t = JT_STR;
	out->o = &s->h;
	return 0;
}

size_t
ju_decode(const char *s, size_t n, uint32_t *cp)
{
	int bad = 0;
	return (size_t)unicode_decode(s, n, cp, &bad);
}

size_t
jstr_ncp(struct jstr *s)
{
	if (s->ncp == SIZE_MAX) {
		size_t k = 0;
		for (size_t i = 0; i < s->n; i++)
			k += ((unsigned char)s->p[i] & 0xC0) != 0x80;
		s->ncp = k;
	}
	return s->ncp;
}

size_t
ju_offset(const char *s, size_t n, size_t k)
{
	size_t i = 0;
	while (i < n && k) {
		i++;
		while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
			i++;
		k--;
	}
	return i;
}

int
ju_isspace(uint32_t cp)
{
	if (cp < 0x80)
		return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20);
	return (unicode_flags(cp) & UNICODE_WHITESPACE) != 0;
}

// --- lists and dicts ----------------------------------------------------------

struct jlist *
jlist_new(struct jrender *R, enum jl_kind kind, size_t cap)
{
	struct jlist *l = jheap_alloc(R, &R->heap, JT_LIST, sizeof *l);
	if (!l)
		return NULL;
	l->kind = (uint8_t)kind;
	if (cap && grow(R, &l->h, (void **)&l->v, &l->cap, cap, sizeof *l->v) != 0) {
		jobj_unref(R, &l->h);
		return NULL;
	}
	return l;
}

int
jlist_push(struct jrender *R, struct jlist *l, struct jv v)
{
	if (grow(R, &l->h, (void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) != 0) {
		jv_unref(R, v);
		return -1;
	}
	l->v[l->n++] = v;
	return 0;
}

struct jdict *
jdict_new(struct jrender *R, enum jt t)
{
	return jheap_alloc(R, &R->heap, t, sizeof(struct jdict));
}

int
jv_hashable(struct jv v)
{
	if (v.t == JT_LIST) {
		struct jlist *l = jv_l(v);
		if (l->kind != JL_TUPLE)
			return l->kind == JL_GEN; // generators hash by identity
		for (size_t i = 0; i < l->n; i++)
			if (!jv_hashable(l->v[i]))
				return 0;
		return 1;
	}
	return v.t != JT_DICT && v.t != JT_NS;
}

struct jv *
jdict_get(struct jdict *d, struct jv k)
{
	for (size_t i = 0; i < d->n; i++)
		if (jv_eq(d->k[i], k, 0))
			return &d->v[i];
	return NULL;
}

struct jv *
jdict_get_str(struct jdict *d, const char *k, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].t == JT_STR && jv_s(d->k[i])->n == n && memcmp(jv_s(d->k[i])->p, k, n) == 0)
			return &d->v[i];
	return NULL;
}

int
jdict_set(struct jrender *R, struct jdict *d, struct jv k, struct jv v)
{
	struct jv *old = jdict_get(d, k);
	if (old) { // Python keeps the first key and its place
		jv_unref(R, k);
		jv_unref(R, *old);
		*old = v;
		return 0;
	}
	size_t cap = d->cap;
	if (grow(R, &d->h, (void **)&d->k, &cap, d->n + 1, sizeof *d->k) != 0 ||
	    grow(R, &d->h, (void **)&d->v, &d->cap, d->n + 1, sizeof *d->v) != 0) {
		jv_unref(R, k);
		jv_unref(R, v);
		return -1;
	}
	d->k[d->n] = k;
	d->v[d->n++] = v;
	return 0;
}

// --- Python semantics -----------------------------------------------------------

int
jv_truthy(struct jv v)
{
	switch (v.t) {
	case JT_UNDEF:
	case JT_NONE:
		return 0;
	case JT_BOOL:
	case JT_INT:
		return v.i != 0;
	case JT_FLOAT:
		return v.f != 0.0;
	case JT_STR:
		return jv_s(v)->n != 0;
	case JT_LIST:
		return jv_l(v)->kind == JL_GEN || jv_l(v)->n != 0;
	case JT_DICT:
		return jv_d(v)->n != 0;
	default:
		return 1;
	}
}

static double
num_f(struct jv v)
{
	return v.t == JT_FLOAT ? v.f : (double)v.i;
}

int
jv_eq(struct jv a, struct jv b, int depth)
{
	if (jv_is_num(a) && jv_is_num(b)) {
		if (a.t != JT_FLOAT && b.t != JT_FLOAT)
			return a.i == b.i;
		if (a.t == JT_FLOAT && b.t == JT_FLOAT)
			return a.f == b.f;
		// int vs float: exact, as Python compares them
		double f = a.t == JT_FLOAT ? a.f : b.f;
		int64_t i = a.t == JT_FLOAT ? b.i : a.i;
		if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0) || f != floor(f))
			return 0;
		return (int64_t)f == i;
	}
	if (a.t != b.t)
		return 0;
	switch (a.t) {
	case JT_UNDEF:
	case JT_NONE:
		return 1;
	case JT_STR:
		return jv_s(a)->n == jv_s(b)->n && memcmp(jv_s(a)->p, jv_s(b)->p, jv_s(a)->n) == 0;
	case JT_LIST: {
		struct jlist *x = jv_l(a), *y = jv_l(b);
		if (x == y)
			return 1;
		if (x->kind != y->kind || x->kind == JL_GEN || x->kind == JL_VIEW || x->n != y->n ||
		    depth > JV_MAX_DEPTH)
			return 0;
		for (size_t i = 0; i < x->n; i++)
			if (!jv_eq(x->v[i], y->v[i], depth + 1))
				return 0;
		return 1;
	}
	case JT_DICT: {
		struct jdict *x = jv_d(a), *y = jv_d(b);
		if (x == y)
			return 1;
		if (x->n != y->n || depth > JV_MAX_DEPTH)
			return 0;
		for (size_t i = 0; i < x->n; i++) {
			struct jv *w = jdict_get(y, x->k[i]);
			if (!w || !jv_eq(x->v[i], *w, depth + 1))
				return 0;
		}
		return 1;
	}
	default:
		return a.o == b.o;
	}
}

const char *
jv_type_name(struct jv v)
{
	switch (v.t) {
	case JT_UNDEF:
		return "Undefined";
	case JT_NONE:
		return "NoneType";
	case JT_BOOL:
		return "bool";
	case JT_INT:
		return "int";
	case JT_FLOAT:
		return "float";
	case JT_STR:
		return "str";
	case JT_LIST:
		switch (jv_l(v)->kind) {
		case JL_TUPLE:
			return "tuple";
		case JL_GEN:
			return "generator";
		case JL_VIEW:
			return jv_l(v)->view == 'k' ? "dict_keys" : jv_l(v)->view == 'v' ? "dict_values" : "dict_items";
		default:
			return "list";
		}
	case JT_DICT:
		return "dict";
	case JT_NS:
		return "Namespace";
	case JT_MACRO:
		return "Macro";
	case JT_LOOP:
		return "LoopContext";
	default:
		return "builtin_function_or_method";
	}
}

int
jv_cmp(struct jrender *R, struct jv a, struct jv b, int *r)
{
	if (jv_is_num(a) && jv_is_num(b)) {
		if (a.t != JT_FLOAT && b.t != JT_FLOAT)
			*r = (a.i > b.i) - (a.i < b.i);
		else {
			double x = num_f(a), y = num_f(b);
			*r = (x > y) - (x < y); // NaN compares as equal here; never sorted on
		}
		return 0;
	}
	if (a.t == JT_STR && b.t == JT_STR) {
		struct jstr *x = jv_s(a), *y = jv_s(b);
		size_t n = x->n < y->n ? x->n : y->n;
		int c = memcmp(x->p, y->p, n); // UTF-8 orders as code points do
		*r = c ? (c > 0) - (c < 0) : (x->n > y->n) - (x->n < y->n);
		return 0;
	}
	if (jv_is_seq(a) && jv_is_seq(b) && jv_l(a)->kind == jv_l(b)->kind) {
		struct jlist *x = jv_l(a), *y = jv_l(b);
		for (size_t i = 0; i < x->n && i < y->n; i++) {
			if (jv_eq(x->v[i], y->v[i], 0))
				continue;
			return jv_cmp(R, x->v[i], y->v[i], r);
		}
		*r = (x->n > y->n) - (x->n < y->n);
		return 0;
	}
	if (a.t == JT_UNDEF || b.t == JT_UNDEF)
		return jr_fail(R, JINJA_ERROR, "an undefined value cannot be compared");
	return jr_fail(R, JINJA_ERROR, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a),
	               jv_type_name(b));
}

// --- output buffers ---------------------------------------------------------------

int
jbuf_add(struct jrender *R, struct jbuf *b, const char *s, size_t n)
{
	if (R->status != JINJA_OK)
		return -1;
	if (!n)
		return 0;
	if (b->n + n > R->max_output)
		return jr_fail(R, JINJA_LIMIT, "the output is longer than %zu bytes", R->max_output);
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n + 1)
			cap *= 2;
		if (heap_charge(R, &R->heap, cap - b->cap) != 0)
			return -1;
		char *p = realloc(b->p, cap);
		if (!p) {
			R->heap.bytes -= cap - b->cap;
			return jr_fail(R, JINJA_LIMIT, "out of memory");
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = 0;
	return 0;
}

struct jv
jbuf_take(struct jrender *R, struct jbuf *b, int *fail)
{
	struct jv v = JV_UNDEF;
	if (jv_newstr(R, b->p ? b->p : "", b->n, &v) != 0)
		*fail = 1;
	free(b->p);
	R->heap.bytes -= b->cap;
	b->p = NULL;
	b->n = b->cap = 0;
	return v;
}

// --- str() and repr() ---------------------------------------------------------------

// Python's repr of a float: the shortest digits that read back as the same
// double, positional for exponents -4..15, else d.ddde+XX.
void
jfloat_repr(double f, char out[32])
{
	if (isnan(f)) {
		strcpy(out, "nan");
		return;
	}
	if (isinf(f)) {
		strcpy(out, f < 0 ? "-inf" : "inf");
		return;
	}
	if (f == 0) {
		strcpy(out, signbit(f) ? "-0.0" : "0.0");
		return;
	}
	char buf[40];
	for (int prec = 1; prec <= 17; prec++) {
		snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
		if (strtod(buf, NULL) == f)
			break;
	}
	// buf: [-]d[.ddd]e(+|-)XX
	char digits[24];
	int nd = 0, neg = 0;
	const char *p = buf;
	if (*p == '-')
		neg = 1, p++;
	for (; *p && *p != 'e'; p++)
		if (*p >= '0' && *p <= '9')
			digits[nd++] = *p;
	int e = atoi(p + 1);
	while (nd > 1 && digits[nd - 1] == '0')
		nd--;
	char *o = out;
	if (neg)
		*o++ = '-';
	if (e >= -4 && e < 16) {
		if (e < 0) {
			*o++ = '0';
			*o++ = '.';
			for (int i = 0; i < -e - 1; i++)
				*o++ = '0';
			for (int i = 0; i < nd; i++)
				*o++ = digits[i];
		} else {
			for (int i = 0; i <= e; i++)
				*o++ = i < nd ? digits[i] : '0';
			*o++ = '.';
			if (nd > e + 1)
				for (int i = e + 1; i < nd; i++)
					*o++ = digits[i];
			else
				*o++ = '0';
		}
		*o = 0;
		return;
	}
	*o++ = digits[0];
	if (nd > 1) {
		*o++ = '.';
		for (int i = 1; i < nd; i++)
			*o++ = digits[i];
	}
	snprintf(o, 14, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
}

static int
repr_str(struct jrender *R, struct jbuf *b, const char *s, size_t n)
{
	int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	if (jbuf_add(R, b, &q, 1) != 0)
		return -1;
	for (size_t i = 0; i < n;) {
		uint32_t c;
		size_t k = ju_decode(s + i, n - i, &c);
		char e[16];
		if (c == (uint32_t)q || c == '\\') {
			e[0] = '\\';
			e[1] = (char)c;
			jbuf_add(R, b, e, 2);
		} else if (c == '\t') {
			jbuf_add(R, b, "\\t", 2);
		} else if (c == '\n') {
			jbuf_add(R, b, "\\n", 2);
		} else if (c == '\r') {
			jbuf_add(R, b, "\\r", 2);
		} else if (c < 0x20 || c == 0x7f) {
			snprintf(e, sizeof e, "\\x%02x", c);
			jbuf_add(R, b, e, 4);
		} else if (c < 0x7f || !(unicode_flags(c) & (UNICODE_CONTROL | UNICODE_UNDEF | UNICODE_SEPARATOR))) {
			jbuf_add(R, b, s + i, k);
		} else {
			int m = c <= 0xff     ? snprintf(e, sizeof e, "\\x%02x", c)
			        : c <= 0xffff ? snprintf(e, sizeof e, "\\u%04x", c)
			                      : snprintf(e, sizeof e, "\\U%08x", c);
			jbuf_add(R, b, e, (size_t)m);
		}
		i += k;
	}
	return jbuf_add(R, b, &q, 1);
}

static int
repr_items(struct jrender *R, struct jbuf *b, struct jlist *l, int depth)
{
	for (size_t i = 0; i < l->n; i++) {
		if (i)
			jbuf_add(R, b, ", ", 2);
		if (jv_repr_of(R, b, l->v[i], depth + 1) != 0)
			return -1;
	}
	return R->status == JINJA_OK ? 0 : -1;
}

static int
repr_dict(struct jrender *R, struct jbuf *b, struct jdict *d, int depth)
{
	jbuf_add(R, b, "{", 1);
	for (size_t i = 0; i < d->n; i++) {
		if (i)
			jbuf_add(R, b, ", ", 2);
		if (jv_repr_of(R, b, d->k[i], depth + 1) != 0)
			return -1;
		jbuf_add(R, b, ": ", 2);
		if (jv_repr_of(R, b, d->v[i], depth + 1) != 0)
			return -1;
	}
	return jbuf_add(R, b, "}", 1);
}

int
jv_repr_of(struct jrender *R, struct jbuf *b, struct jv v, int depth)
{
	if (depth > JV_MAX_DEPTH)
		return jr_fail(R, JINJA_ERROR, "maximum recursion depth exceeded in repr()");
	switch (v.t) {
	case JT_UNDEF:
		return jbuf_str(R, b, "Undefined");
	case JT_STR:
		if (!jv_s(v)->safe)
			return repr_str(R, b, jv_s(v)->p, jv_s(v)->n);
		jbuf_str(R, b, "Markup(");
		repr_str(R, b, jv_s(v)->p, jv_s(v)->n);
		return jbuf_add(R, b, ")", 1);
	case JT_LIST: {
		struct jlist *l = jv_l(v);
		switch (l->kind) {
		case JL_LIST:
			jbuf_add(R, b, "[", 1);
			if (repr_items(R, b, l, depth) != 0)
				return -1;
			return jbuf_add(R, b, "]", 1);
		case JL_TUPLE:
			jbuf_add(R, b, "(", 1);
			if (repr_items(R, b, l, depth) != 0)
				return -1;
			return jbuf_add(R, b, l->n == 1 ? ",)" : ")", l->n == 1 ? 2 : 1);
		case JL_VIEW:
			jbuf_str(R, b,
			         l->view == 'k'   ? "dict_keys(["
			         : l->view == 'v' ? "dict_values(["
			                          : "dict_items([");
			if (repr_items(R, b, l, depth) != 0)
				return -1;
			return jbuf_add(R, b, "])", 2);
		default:
			return jr_fail(R, JINJA_UNSUPPORTED, "printing a %s", jv_type_name(v));
		}
	}
	case JT_DICT:
		return repr_dict(R, b, jv_d(v), depth);
	case JT_NS:
		jbuf_str(R, b, "<Namespace ");
		if (repr_dict(R, b, jv_d(v), depth) != 0)
			return -1;
		return jbuf_add(R, b, ">", 1);
	default:
		return jv_str_of(R, b, v);
	}
}

int
jv_str_of(struct jrender *R, struct jbuf *b, struct jv v)
{
	char num[32];
	switch (v.t) {
	case JT_UNDEF:
		return 0;
	case JT_NONE:
		return jbuf_str(R, b, "None");
	case JT_BOOL:
		return jbuf_str(R, b, v.i ? "True" : "False");
	case JT_INT:
		snprintf(num, sizeof num, "%lld", (long long)v.i);
		return jbuf_str(R, b, num);
	case JT_FLOAT:
		jfloat_repr(v.f, num);
		return jbuf_str(R, b, num);
	case JT_STR:
		return jbuf_add(R, b, jv_s(v)->p, jv_s(v)->n);
	case JT_LIST:
	case JT_DICT:
	case JT_NS:
		return jv_repr_of(R, b, v, 0);
	default:
		return jr_fail(R, JINJA_UNSUPPORTED, "printing a %s", jv_type_name(v));
	}
}

struct jv
jv_to_str(struct jrender *R, struct jv v, int *fail)
{
	if (v.t == JT_STR)
		return jv_ref(v);
	struct jbuf b = {0};
	if (jv_str_of(R, &b, v) != 0) {
		free(b.p);
		R->heap.bytes -= b.cap;
		*fail = 1;
		return JV_UNDEF;
	}
	return jbuf_take(R, &b, fail);
}

int
jv_escape(struct jrender *R, struct jv v, struct jv *out)
{
	if (jv_safe(v)) {
		*out = jv_ref(v);
		return 0;
	}
	struct jbuf b = {0}, t = {0};
	if (jv_str_of(R, &t, v) != 0) {
		free(t.p);
		R->heap.bytes -= t.cap;
		return -1;
	}
	for (size_t i = 0; i < t.n; i++) {
		const char *e = NULL;
		switch (t.p[i]) {
		case '&':
			e = "&amp;";
			break;
		case '<':
			e = "&lt;";
			break;
		case '>':
			e = "&gt;";
			break;
		case '"':
			e = "&#34;";
			break;
		case '\'':
			e = "&#39;";
			break;
		}
		if (e)
			jbuf_str(R, &b, e);
		else
			jbuf_add(R, &b, t.p + i, 1);
	}
	free(t.p);
	R->heap.bytes -= t.cap;
	int fail = 0;
	*out = jbuf_take(R, &b, &fail);
	if (fail)
		return -1;
	jv_s(*out)->safe = 1;
	return 0;
}

// --- json.dumps --------------------------------------------------------------------

static int
json_str(struct jrender *R, struct jbuf *b, const char *s, size_t n, int ascii)
{
	jbuf_add(R, b, "\"", 1);
	size_t run = 0; // bytes copied as they are, flushed lazily
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		const char *esc = NULL;
		char e[16];
		size_t k = 1;
		if (c == '"')
			esc = "\\\"";
		else if (c == '\\')
			esc = "\\\\";
		else if (c == '\n')
			esc = "\\n";
		else if (c == '\r')
			esc = "\\r";
		else if (c == '\t')
			esc = "\\t";
		else if (c == '\b')
			esc = "\\b";
		else if (c == '\f')
			esc = "\\f";
		else if (c < 0x20 || (ascii && c == 0x7f)) {
			snprintf(e, sizeof e, "\\u%04x", c);
			esc = e;
		} else if (ascii && c >= 0x80) {
			uint32_t cp;
			k = ju_decode(s + i, n - i, &cp);
			if (cp >= 0x10000) {
				uint32_t x = cp - 0x10000;
				snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + (x >> 10), 0xDC00 + (x & 0x3FF));
			} else {
				snprintf(e, sizeof e, "\\u%04x", cp);
			}
			esc = e;
		}
		if (esc) {
			jbuf_add(R, b, s + i - run, run);
			run = 0;
			jbuf_str(R, b, esc);
		} else {
			run++;
		}
		i += k;
	}
	jbuf_add(R, b, s + n - run, run);
	return jbuf_add(R, b, "\"", 1);
}

static int
json_newline(struct jrender *R, struct jbuf *b, const struct json_opts *o, int level)
{
	if (!o->indent)
		return 0;
	jbuf_add(R, b, "\n", 1);
	for (int i = 0; i < level; i++)
		jbuf_add(R, b, o->indent, o->indent_n);
	return R->status == JINJA_OK ? 0 : -1;
}

static int
json_key(struct jrender *R, struct jbuf *b, struct jv k, const struct json_opts *o)
{
	char num[32];
	switch (k.t) {
	case JT_STR:
		return json_str(R, b, jv_s(k)->p, jv_s(k)->n, o->ensure_ascii);
	case JT_BOOL:
		return jbuf_str(R, b, k.i ? "\"true\"" : "\"false\"");
	case JT_NONE:
		return jbuf_str(R, b, "\"null\"");
	case JT_INT:
		snprintf(num, sizeof num, "\"%lld\"", (long long)k.i);
		return jbuf_str(R, b, num);
	case JT_FLOAT:
		if (isnan(k.f))
			return jbuf_str(R, b, "\"NaN\"");
		if (isinf(k.f))
			return jbuf_str(R, b, k.f < 0 ? "\"-Infinity\"" : "\"Infinity\"");
		jfloat_repr(k.f, num);
		jbuf_add(R, b, "\"", 1);
		jbuf_str(R, b, num);
		return jbuf_add(R, b, "\"", 1);
	default:
		return jr_fail(R, JINJA_ERROR, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
	}
}

static int
key_order(struct jrender *R, struct jdict *d, size_t *idx)
{
	// insertion sort: stable, and dicts here are small
	for (size_t i = 0; i < d->n; i++) {
		size_t j = i;
		while (j > 0) {
			int r;
			if (jv_cmp(R, d->k[idx[j - 1]], d->k[i], &r) != 0)
				return -1;
			if (r <= 0)
				break;
			idx[j] = idx[j - 1];
			j--;
		}
		idx[j] = i;
	}
	return 0;
}

int
jv_json_dump(struct jrender *R, struct jbuf *b, struct jv v, const struct json_opts *o, int level)
{
	char num[32];
	if (level > JV_MAX_DEPTH)
		return jr_fail(R, JINJA_ERROR, "maximum recursion depth exceeded while encoding a JSON object");
	switch (v.t) {
	case JT_NONE:
		return jbuf_str(R, b, "null");
	case JT_BOOL:
		return jbuf_str(R, b, v.i ? "true" : "false");
	case JT_INT:
		snprintf(num, sizeof num, "%lld", (long long)v.i);
		return jbuf_str(R, b, num);
	case JT_FLOAT:
		if (isnan(v.f))
			return jbuf_str(R, b, "NaN");
		if (isinf(v.f))
			return jbuf_str(R, b, v.f < 0 ? "-Infinity" : "Infinity");
		jfloat_repr(v.f, num);
		return jbuf_str(R, b, num);
	case JT_STR:
		return json_str(R, b, jv_s(v)->p, jv_s(v)->n, o->ensure_ascii);
	case JT_LIST: {
		struct jlist *l = jv_l(v);
		if (l->kind != JL_LIST && l->kind != JL_TUPLE)
			break;
		if (!l->n)
			return jbuf_str(R, b, "[]");
		jbuf_add(R, b, "[", 1);
		for (size_t i = 0; i < l->n; i++) {
			if (i)
				jbuf_add(R, b, o->item_sep, o->item_sep_n);
			json_newline(R, b, o, level + 1);
			if (jv_json_dump(R, b, l->v[i], o, level + 1) != 0)
				return -1;
		}
		json_newline(R, b, o, level);
		return jbuf_add(R, b, "]", 1);
	}
	case JT_DICT: {
		struct jdict *d = jv_d(v);
		if (!d->n)
			return jbuf_str(R, b, "{}");
		size_t *idx = malloc(d->n * sizeof *idx);
		if (!idx)
			return jr_fail(R, JINJA_LIMIT, "out of memory");
		for (size_t i = 0; i < d->n; i++)
			idx[i] = i;
		if (o->sort_keys && key_order(R, d, idx) != 0) {
			free(idx);
			return -1;
		}
		jbuf_add(R, b, "{", 1);
		for (size_t j = 0; j < d->n; j++) {
			size_t i = idx[j];
			if (j)
				jbuf_add(R, b, o->item_sep, o->item_sep_n);
			json_newline(R, b, o, level + 1);
			if (json_key(R, b, d->k[i], o) != 0 || jbuf_add(R, b, o->key_sep, o->key_sep_n) != 0 ||
			    jv_json_dump(R, b, d->v[i], o, level + 1) != 0) {
				free(idx);
				return -1;
			}
		}
		free(idx);
		json_newline(R, b, o, level);
		return jbuf_add(R, b, "}", 1);
	}
	default:
		break;
	}
	return jr_fail(R, JINJA_ERROR, "Object of type %s is not JSON serializable", jv_type_name(v));
}

// --- json.loads -------------------------------------------------------------------

struct jp {
	struct jrender *R;
	const char *s, *e, *start;
	int depth;
};

static int
jp_fail(struct jp *p, const char *what)
{
	return jr_fail(p->R, JINJA_INPUT, "context JSON: %s at byte %zu", what, (size_t)(p->s - p->start));
}

static void
jp_ws(struct jp *p)
{
	while (p->s < p->e && (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r'))
		p->s++;
}

static int
hex4(const char *s, uint32_t *v)
{
	*v = 0;
	for (int i = 0; i < 4; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9'   ? c - '0'
		        : c >= 'a' && c <= 'f' ? c - 'a' + 10
		        : c >= 'A' && c <= 'F' ? c - 'A' + 10
		                               : -1;
		if (d < 0)
			return -1;
		*v = *v * 16 + (uint32_t)d;
	}
	return 0;
}

static int
jp_string(struct jp *p, struct jv *out)
{
	p->s++; // the quote
	struct jbuf b = {0};
	const char *run = p->s;
	int rc = -1;
	while (1) {
		if (p->s >= p->e) {
			jp_fail(p, "an unterminated string");
			break;
		}
		unsigned char c = (unsigned char)*p->s;
		if (c == '"' || c == '\\' || c < 0x20) {
			jbuf_add(p->R, &b, run, (size_t)(p->s - run));
			if (c == '"') {
				p->s++;
				int fail = 0;
				*out = jbuf_take(p->R, &b, &fail);
				return fail ? -1 : 0;
			}
			if (c < 0x20) {
				jp_fail(p, "a control character in a string");
				break;
			}
			if (p->e - p->s < 2) {
				jp_fail(p, "an unterminated string");
				break;
			}
			char e = p->s[1], ch = 0;
			p->s += 2;
			switch (e) {
			case '"':
				ch = '"';
				break;
			case '\\':
				ch = '\\';
				break;
			case '/':
				ch = '/';
				break;
			case 'b':
				ch = '\b';
				break;
			case 'f':
				ch = '\f';
				break;
			case 'n':
				ch = '\n';
				break;
			case 'r':
				ch = '\r';
				break;
			case 't':
				ch = '\t';
				break;
			case 'u': {
				uint32_t cp;
				if (p->e - p->s < 4 || hex4(p->s, &cp) != 0) {
					jp_fail(p, "a bad \\u escape");
					goto out;
				}
				p->s += 4;
				if (cp >= 0xD800 && cp < 0xDC00 && p->e - p->s >= 6 && p->s[0] == '\\' &&
				    p->s[1] == 'u') {
					uint32_t lo;
					if (hex4(p->s + 2, &lo) == 0 && lo >= 0xDC00 && lo < 0xE000) {
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
						p->s += 6;
					}
				}
				if (cp >= 0xD800 && cp < 0xE000) {
					jr_fail(p->R, JINJA_UNSUPPORTED, "context JSON: a lone surrogate \\u%04x", cp);
					goto out;
				}
				char u[4];
				jbuf_add(p->R, &b, u, (size_t)unicode_encode(cp, u));
				run = p->s;
				continue;
			}
			default:
				jp_fail(p, "a bad escape");
				goto out;
			}
			jbuf_add(p->R, &b, &ch, 1);
			run = p->s;
			continue;
		}
		p->s++;
	}
out:
	free(b.p);
	p->R->heap.bytes -= b.cap;
	return rc;
}

static int jp_value(struct jp *p, struct jv *out);

static int
jp_number(struct jp *p, struct jv *out)
{
	const char *s = p->s;
	int is_float = 0;
	if (s < p->e && *s == '-')
		s++;
	if (s >= p->e || !(*s >= '0' && *s <= '9'))
		return jp_fail(p, "a bad number");
	if (*s == '0')
		s++;
	else
		while (s < p->e && *s >= '0' && *s <= '9')
			s++;
	if (s < p->e && *s == '.') {
		const char *d = ++s;
		while (s < p->e && *s >= '0' && *s <= '9')
			s++;
		if (s == d)
			return jp_fail(p, "a bad number");
		is_float = 1;
	}
	if (s < p->e && (*s == 'e' || *s == 'E')) {
		s++;
		if (s < p->e && (*s == '+' || *s == '-'))
			s++;
		const char *d = s;
		while (s < p->e && *s >= '0' && *s <= '9')
			s++;
		if (s == d)
			return jp_fail(p, "a bad number");
		is_float = 1;
	}
	char buf[64];
	size_t n = (size_t)(s - p->s);
	if (n >= sizeof buf)
		return jr_fail(p->R, JINJA_UNSUPPORTED, "context JSON: a number of %zu digits", n);
	memcpy(buf, p->s, n);
	buf[n] = 0;
	p->s = s;
	if (is_float) {
		*out = jv_float(strtod(buf, NULL));
		return 0;
	}
	char *end;
	errno = 0;
	long long v = strtoll(buf, &end, 10);
	if (errno)
		return jr_fail(p->R, JINJA_UNSUPPORTED, "context JSON: the integer %s is too large", buf);
	*out = jv_int(v);
	return 0;
}

static int
jp_lit(struct jp *p, const char *word, struct jv v, struct jv *out)
{
	size_t n = strlen(word);
	if ((size_t)(p->e - p->s) < n || memcmp(p->s, word, n) != 0)
		return jp_fail(p, "an unexpected character");
	p->s += n;
	*out = v;
	return 0;
}

static int
jp_value(struct jp *p, struct jv *out)
{
	jp_ws(p);
	if (p->s >= p->e)
		return jp_fail(p, "an unexpected end");
	switch (*p->s) {
	case '"':
		return jp_string(p, out);
	case '{': {
		if (++p->depth > 200)
			return jp_fail(p, "nesting deeper than 200");
		p->s++;
		struct jdict *d = jdict_new(p->R, JT_DICT);
		if (!d)
			return -1;
		out->t = JT_DICT;
		out->o = &d->h;
		jp_ws(p);
		if (p->s < p->e && *p->s == '}') {
			p->s++;
			p->depth--;
			return 0;
		}
		while (1) {
			jp_ws(p);
			struct jv k, v;
			if (p->s >= p->e || *p->s != '"')
				return jp_fail(p, "an object key that is not a string");
			if (jp_string(p, &k) != 0)
				return -1;
			jp_ws(p);
			if (p->s >= p->e || *p->s != ':') {
				jv_unref(p->R, k);
				return jp_fail(p, "a missing ':'");
			}
			p->s++;
			if (jp_value(p, &v) != 0) {
				jv_unref(p->R, k);
				return -1;
			}
			if (jdict_set(p->R, d, k, v) != 0)
				return -1;
			jp_ws(p);
			if (p->s < p->e && *p->s == ',') {
				p->s++;
				continue;
			}
			if (p->s < p->e && *p->s == '}') {
				p->s++;
				p->depth--;
				return 0;
			}
			return jp_fail(p, "a missing ',' or '}'");
		}
	}
	case '[': {
		if (++p->depth > 200)
			return jp_fail(p, "nesting deeper than 200");
		p->s++;
		struct jlist *l = jlist_new(p->R, JL_LIST, 0);
		if (!l)
			return -1;
		out->t = JT_LIST;
		out->o = &l->h;
		jp_ws(p);
		if (p->s < p->e && *p->s == ']') {
			p->s++;
			p->depth--;
			return 0;
		}
		while (1) {
			struct jv v;
			if (jp_value(p, &v) != 0 || jlist_push(p->R, l, v) != 0)
				return -1;
			jp_ws(p);
			if (p->s < p->e && *p->s == ',') {
				p->s++;
				continue;
			}
			if (p->s < p->e && *p->s == ']') {
				p->s++;
				p->depth--;
				return 0;
			}
			return jp_fail(p, "a missing ',' or ']'");
		}
	}
	case 't':
		return jp_lit(p, "true", jv_bool(1), out);
	case 'f':
		return jp_lit(p, "false", jv_bool(0), out);
	case 'n':
		return jp_lit(p, "null", JV_NONE, out);
	case 'N':
		return jp_lit(p, "NaN", jv_float(NAN), out);
	case 'I':
		return jp_lit(p, "Infinity", jv_float(INFINITY), out);
	default:
		if (*p->s == '-' && p->e - p->s > 1 && p->s[1] == 'I') {
			p->s++;
			return jp_lit(p, "Infinity", jv_float(-INFINITY), out);
		}
		return jp_number(p, out);
	}
}

int
jv_json_parse(struct jrender *R, const char *s, size_t n, struct jv *out)
{
	*out = JV_UNDEF;
	if (!unicode_valid(s, n))
		return jr_fail(R, JINJA_INPUT, "context JSON: not valid UTF-8");
	struct jp p = {R, s, s + n, s, 0};
	struct jv v = JV_UNDEF;
	if (jp_value(&p, &v) != 0) {
		jv_unref(R, v);
		return -1;
	}
	jp_ws(&p);
	if (p.s != p.e) {
		jv_unref(R, v);
		return jp_fail(&p, "extra data");
	}
	*out = v;
	return 0;
}
