// jinja-eval.c - evaluating the AST: statements, expressions, scopes,
// macros, and jinja_render itself. See jinja-impl.h.
//
// Scopes are jinja2's: the root frame holds the context and whatever the
// template sets at the top level; every for-loop iteration, macro call,
// caller, with block, block set, filter block, generation block and for-else
// gets a child frame, so what it sets is gone when it ends (the reason
// templates keep state in namespace() objects); if blocks share their
// frame. A name is looked up through the frames, then among the globals.
// Macros see the frame they were defined in as it is when they run.
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "jinja-impl.h"

#define JINJA_MAX_CALLS 48 // macro calls in progress

enum { EX_OK = 0, EX_BREAK = 1, EX_CONTINUE = 2 };

int
jstep(struct jrender *R)
{
	if (R->status != JINJA_OK)
		return -1;
	if (++R->steps > R->max_steps)
		return jr_fail(R, JINJA_LIMIT, "the template took more than %llu steps",
		               (unsigned long long)R->max_steps);
	if ((R->steps & 1023) == 0 && ad_now_ns() > R->deadline_ns)
		return jr_fail(R, JINJA_LIMIT, "the template took too long");
	return 0;
}

// --- frames -----------------------------------------------------------------------

struct jframe *
jframe_new(struct jrender *R, struct jframe *parent)
{
	struct jframe *f = jheap_alloc(R, &R->heap, JT_FRAME, sizeof *f);
	if (!f)
		return NULL;
	f->parent = parent;
	if (parent)
		parent->h.rc += parent->h.rc >= 0;
	return f;
}

static void
frame_drop(struct jrender *R, struct jframe *f)
{
	if (f)
		jobj_unref(R, &f->h);
}

int
jframe_set(struct jrender *R, struct jframe *f, const char *name, struct jv v)
{
	for (size_t i = 0; i < f->n; i++)
		if (!strcmp(f->names[i], name)) {
			jv_unref(R, f->vals[i]);
			f->vals[i] = v;
			return 0;
		}
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 8;
		size_t add = (cap - f->cap) * (sizeof *f->names + sizeof *f->vals);
		if (R->heap.bytes + add > R->heap.limit) {
			jv_unref(R, v);
			return jr_fail(R, JINJA_LIMIT, "the template used more than %zu bytes of memory",
			               R->heap.limit);
		}
		const char **nm = realloc(f->names, cap * sizeof *nm);
		if (nm)
			f->names = nm;
		struct jv *vals = nm ? realloc(f->vals, cap * sizeof *vals) : NULL;
		if (!vals) {
			jv_unref(R, v);
			return jr_fail(R, JINJA_LIMIT, "out of memory");
		}
		f->vals = vals;
		f->cap = cap;
		f->h.bytes += add;
		R->heap.bytes += add;
	}
	f->names[f->n] = name;
	f->vals[f->n++] = v;
	return 0;
}

static struct jv *
frame_find(struct jframe *f, const char *name)
{
	for (; f; f = f->parent)
		for (size_t i = 0; i < f->n; i++)
			if (!strcmp(f->names[i], name))
				return &f->vals[i];
	return NULL;
}

static int
lookup(struct jrender *R, struct jframe *f, const char *name, struct jv *out)
{
	struct jv *v = frame_find(f, name);
	if (v) {
		*out = jv_ref(*v);
		return 0;
	}
	return jglobal(R, name, out);
}

// --- attribute and item access ------------------------------------------------------

static int
undef_error(struct jrender *R, const char *what)
{
	return jr_fail(R, JINJA_ERROR, "an undefined value has no %s", what);
}

int
jgetattr(struct jrender *R, struct jv obj, const char *name, size_t n, struct jv *out)
{
	*out = JV_UNDEF;
	switch (obj.t) {
	case JT_UNDEF:
		return undef_error(R, "attributes");
	case JT_DICT: {
		if (jmethod(R, obj, name, n, out) != 0)
			return -1;
		if (out->t != JT_UNDEF)
			return 0;
		struct jv *v = jdict_get_str(jv_d(obj), name, n);
		if (v)
			*out = jv_ref(*v);
		return 0;
	}
	case JT_NS: {
		struct jv *v = jdict_get_str(jv_d(obj), name, n);
		if (v)
			*out = jv_ref(*v);
		return 0;
	}
	case JT_LOOP:
		return jloop_attr(R, (struct jloop *)obj.o, name, out);
	default:
		return jmethod(R, obj, name, n, out);
	}
}

// Python's slice.indices()
static int
slice_indices(struct jrender *R, struct jv start, struct jv stop, struct jv step, int64_t len, int64_t *a, int64_t *b,
              int64_t *s)
{
	struct jv parts[3] = {start, stop, step};
	for (int i = 0; i < 3; i++)
		if (parts[i].t != JT_NONE && parts[i].t != JT_UNDEF && parts[i].t != JT_INT && parts[i].t != JT_BOOL)
			return jr_fail(R, JINJA_ERROR, "slice indices must be integers or None");
	*s = step.t == JT_INT || step.t == JT_BOOL ? step.i : 1;
	if (*s == 0)
		return jr_fail(R, JINJA_ERROR, "slice step cannot be zero");
	int64_t lo = *s < 0 ? -1 : 0, hi = *s < 0 ? len - 1 : len;
	if (start.t == JT_INT || start.t == JT_BOOL) {
		*a = start.i < 0 ? start.i + len : start.i;
		*a = *a < lo ? lo : *a > hi ? hi : *a;
	} else {
		*a = *s < 0 ? hi : lo;
	}
	if (stop.t == JT_INT || stop.t == JT_BOOL) {
		*b = stop.i < 0 ? stop.i + len : stop.i;
		*b = *b < lo ? lo : *b > hi ? hi : *b;
	} else {
		*b = *s < 0 ? lo : hi;
	}
	return 0;
}

static int
slice(struct jrender *R, struct jv obj, const struct jnode *sl, struct jframe *f, struct jv *out)
{
	struct jv part[3] = {JV_NONE, JV_NONE, JV_NONE};
	const struct jnode *pn[3] = {sl->a, sl->b, sl->c};
	int rc = -1;
	for (int i = 0; i < 3; i++)
		if (pn[i] && jeval(R, pn[i], f, &part[i]) != 0)
			goto out;
	*out = JV_UNDEF;
	if (obj.t == JT_UNDEF) {
		undef_error(R, "items");
		goto out;
	}
	int64_t a, b, s;
	if (obj.t == JT_STR) {
		struct jstr *str = jv_s(obj);
		int64_t len = (int64_t)jstr_ncp(str);
		if (slice_indices(R, part[0], part[1], part[2], len, &a, &b, &s) != 0)
			goto out;
		if (s == 1) {
			if (b < a)
				b = a;
			size_t oa = ju_offset(str->p, str->n, (size_t)a), ob = ju_offset(str->p, str->n, (size_t)b);
			rc = jv_newstr(R, str->p + oa, ob - oa, out);
			if (rc == 0)
				jv_s(*out)->safe = str->safe;
			goto out;
		}
		// a general step: collect the code points' offsets
		size_t *off = malloc(((size_t)len + 1) * sizeof *off);
		struct jbuf buf = {0};
		if (!off) {
			jr_fail(R, JINJA_LIMIT, "out of memory");
			goto out;
		}
		for (int64_t k = 0, o = 0; k <= len; k++) {
			off[k] = (size_t)o;
			if (k < len)
				o = (int64_t)ju_offset(str->p + o, str->n - (size_t)o, 1) + o;
		}
		for (int64_t k = a; s > 0 ? k < b : k > b; k += s)
			jbuf_add(R, &buf, str->p + off[k], off[k + 1] - off[k]);
		free(off);
		int fail = 0;
		*out = jbuf_take(R, &buf, &fail);
		rc = fail ? -1 : 0;
		if (rc == 0)
			jv_s(*out)->safe = str->safe;
		goto out;
	}
	if (jv_is_seq(obj)) {
		struct jlist *l = jv_l(obj);
		if (slice_indices(R, part[0], part[1], part[2], (int64_t)l->n, &a, &b, &s) != 0)
			goto out;
		struct jlist *r = jlist_new(R, l->kind, 0);
		if (!r)
			goto out;
		out->t = JT_LIST;
		out->o = &r->h;
		for (int64_t k = a; s > 0 ? k < b : k > b; k += s)
			if (jlist_push(R, r, jv_ref(l->v[k])) != 0)
				goto out;
		rc = 0;
		goto out;
	}
	if (obj.t == JT_LIST && jv_l(obj)->kind == JL_GEN) {
		jr_fail(R, JINJA_ERROR, "'generator' object is not subscriptable");
		goto out;
	}
	rc = 0; // jinja2 answers undefined when the object cannot be sliced
out:
	for (int i = 0; i < 3; i++)
		jv_unref(R, part[i]);
	return R->status == JINJA_OK ? rc : -1;
}

int
jgetitem(struct jrender *R, struct jv obj, struct jv key, struct jv *out)
{
	*out = JV_UNDEF;
	if (obj.t == JT_UNDEF)
		return undef_error(R, "items");
	if (obj.t == JT_DICT) {
		if (jv_hashable(key)) {
			struct jv *v = jdict_get(jv_d(obj), key);
			if (v) {
				*out = jv_ref(*v);
				return 0;
			}
		}
	} else if ((jv_is_seq(obj) || obj.t == JT_STR) && (key.t == JT_INT || key.t == JT_BOOL)) {
		int64_t len = obj.t == JT_STR ? (int64_t)jstr_ncp(jv_s(obj)) : (int64_t)jv_l(obj)->n;
		int64_t i = key.i < 0 ? key.i + len : key.i;
		if (i < 0 || i >= len)
			return 0;
		if (obj.t != JT_STR) {
			*out = jv_ref(jv_l(obj)->v[i]);
			return 0;
		}
		struct jstr *s = jv_s(obj);
		size_t o = ju_offset(s->p, s->n, (size_t)i);
		if (jv_newstr(R, s->p + o, ju_offset(s->p + o, s->n - o, 1), out) != 0)
			return -1;
		jv_s(*out)->safe = s->safe;
		return 0;
	}
	if (key.t == JT_STR) // jinja2 falls back to the attribute
		return obj.t == JT_NS     ? jgetattr(R, obj, jv_s(key)->p, jv_s(key)->n, out)
		       : obj.t == JT_DICT ? jmethod(R, obj, jv_s(key)->p, jv_s(key)->n, out)
		                          : jgetattr(R, obj, jv_s(key)->p, jv_s(key)->n, out);
	return 0;
}

int
jiter(struct jrender *R, struct jv v, struct jlist **out)
{
	*out = NULL;
	switch (v.t) {
	case JT_UNDEF:
		*out = jlist_new(R, JL_LIST, 0);
		break;
	case JT_LIST: {
		struct jlist *l = jv_l(v);
		if (l->kind == JL_GEN) {
			if (l->consumed) {
				*out = jlist_new(R, JL_LIST, 0);
				break;
			}
			l->consumed = 1;
		}
		l->h.rc += l->h.rc >= 0;
		*out = l;
		break;
	}
	case JT_DICT: {
		struct jdict *d = jv_d(v);
		if (!(*out = jlist_new(R, JL_LIST, d->n)))
			return -1;
		for (size_t i = 0; i < d->n; i++)
			jlist_push(R, *out, jv_ref(d->k[i]));
		break;
	}
	case JT_STR: {
		struct jstr *s = jv_s(v);
		if (!(*out = jlist_new(R, JL_LIST, jstr_ncp(s))))
			return -1;
		for (size_t i = 0; i < s->n;) {
			size_t k = ju_offset(s->p + i, s->n - i, 1);
			struct jv c;
			if (jv_newstr(R, s->p + i, k, &c) != 0 || jlist_push(R, *out, c) != 0)
				return -1;
			i += k;
		}
		break;
	}
	default:
		return jr_fail(R, JINJA_ERROR, "'%s' object is not iterable", jv_type_name(v));
	}
	return *out && R->status == JINJA_OK ? 0 : -1;
}

// --- operators ----------------------------------------------------------------------

static int
int_result(struct jrender *R, __int128 r, struct jv *out)
{
	if (r > INT64_MAX || r < INT64_MIN)
		return jr_fail(R, JINJA_UNSUPPORTED, "integers beyond 64 bits");
	*out = jv_int((int64_t)r);
	return 0;
}

static double
fnum(struct jv v)
{
	return v.t == JT_FLOAT ? v.f : (double)v.i;
}

static int
repeat(struct jrender *R, struct jv seq, int64_t k, struct jv *out)
{
	if (k < 0)
		k = 0;
	if (seq.t == JT_STR) {
		struct jstr *s = jv_s(seq);
		if (s->n && (uint64_t)k > R->max_output / s->n + 1)
			return jr_fail(R, JINJA_LIMIT, "a string repeated %lld times", (long long)k);
		struct jstr *r = jstr_new(R, s->n * (size_t)k);
		if (!r)
			return -1;
		for (int64_t i = 0; i < k; i++)
			memcpy(r->p + (size_t)i * s->n, s->p, s->n);
		r->safe = s->safe;
		out->t = JT_STR;
		out->o = &r->h;
		return 0;
	}
	struct jlist *l = jv_l(seq);
	if (l->n && (uint64_t)k > R->heap.limit / (l->n * sizeof(struct jv)))
		return jr_fail(R, JINJA_LIMIT, "a list repeated %lld times", (long long)k);
	struct jlist *r = jlist_new(R, l->kind, l->n * (size_t)k);
	if (!r)
		return -1;
	out->t = JT_LIST;
	out->o = &r->h;
	for (int64_t i = 0; i < k; i++)
		for (size_t j = 0; j < l->n; j++)
			if (jlist_push(R, r, jv_ref(l->v[j])) != 0)
				return -1;
	return 0;
}

int jstr_format_percent(struct jrender *R, struct jv fmt, struct jv args, struct jv *out); // jinja-lib.c

int
jbinop(struct jrender *R, int op, struct jv a, struct jv b, struct jv *out)
{
	*out = JV_UNDEF;
	if (a.t == JT_UNDEF || b.t == JT_UNDEF)
		return jr_fail(R, JINJA_ERROR, "an undefined value in arithmetic");
	int nums = jv_is_num(a) && jv_is_num(b), ints = nums && a.t != JT_FLOAT && b.t != JT_FLOAT;
	switch (op) {
	case OP_ADD:
		if (ints)
			return int_result(R, (__int128)a.i + b.i, out);
		if (nums) {
			*out = jv_float(fnum(a) + fnum(b));
			return 0;
		}
		if (a.t == JT_STR && b.t == JT_STR) {
			if (jv_safe(a) != jv_safe(b)) { // Markup + str escapes the str
				struct jv ea, eb;
				if (jv_escape(R, a, &ea) != 0)
					return -1;
				if (jv_escape(R, b, &eb) != 0) {
					jv_unref(R, ea);
					return -1;
				}
				int rc = jbinop(R, op, ea, eb, out);
				jv_unref(R, ea);
				jv_unref(R, eb);
				return rc;
			}
			struct jstr *x = jv_s(a), *y = jv_s(b), *r = jstr_new(R, x->n + y->n);
			if (!r)
				return -1;
			memcpy(r->p, x->p, x->n);
			memcpy(r->p + x->n, y->p, y->n);
			r->safe = x->safe;
			out->t = JT_STR;
			out->o = &r->h;
			return 0;
		}
		if (jv_is_seq(a) && jv_is_seq(b) && jv_l(a)->kind == jv_l(b)->kind) {
			struct jlist *x = jv_l(a), *y = jv_l(b), *r = jlist_new(R, x->kind, x->n + y->n);
			if (!r)
				return -1;
			out->t = JT_LIST;
			out->o = &r->h;
			for (size_t i = 0; i < x->n; i++)
				jlist_push(R, r, jv_ref(x->v[i]));
			for (size_t i = 0; i < y->n; i++)
				jlist_push(R, r, jv_ref(y->v[i]));
			return R->status == JINJA_OK ? 0 : -1;
		}
		break;
	case OP_SUB:
		if (ints)
			return int_result(R, (__int128)a.i - b.i, out);
		if (nums) {
			*out = jv_float(fnum(a) - fnum(b));
			return 0;
		}
		break;
	case OP_MUL:
		if (ints)
			return int_result(R, (__int128)a.i * b.i, out);
		if (nums) {
			*out = jv_float(fnum(a) * fnum(b));
			return 0;
		}
		if ((a.t == JT_STR || jv_is_seq(a)) && (b.t == JT_INT || b.t == JT_BOOL))
			return repeat(R, a, b.i, out);
		if ((b.t == JT_STR || jv_is_seq(b)) && (a.t == JT_INT || a.t == JT_BOOL))
			return repeat(R, b, a.i, out);
		break;
	case OP_DIV:
		if (nums) {
			if (fnum(b) == 0)
				return jr_fail(R, JINJA_ERROR, "division by zero");
			*out = jv_float(fnum(a) / fnum(b));
			return 0;
		}
		break;
	case OP_FLOORDIV:
	case OP_MOD:
		if (ints) {
			if (b.i == 0)
				return jr_fail(R, JINJA_ERROR, "integer division or modulo by zero");
			if (a.i == INT64_MIN && b.i == -1)
				return jr_fail(R, JINJA_UNSUPPORTED, "integers beyond 64 bits");
			int64_t q = a.i / b.i, r = a.i % b.i;
			if (r != 0 && ((r < 0) != (b.i < 0))) {
				q--;
				r += b.i;
			}
			*out = jv_int(op == OP_FLOORDIV ? q : r);
			return 0;
		}
		if (nums) {
			double x = fnum(a), y = fnum(b);
			if (y == 0)
				return jr_fail(R, JINJA_ERROR, "float division by zero");
			double m = fmod(x, y);
			if (m != 0 && ((m < 0) != (y < 0)))
				m += y;
			if (op == OP_MOD) {
				*out = jv_float(m == 0 ? copysign(0.0, y) : m);
			} else {
				double d = (x - m) / y;
				double q = floor(d);
				if (d - q > 0.5)
					q += 1;
				*out = jv_float(q == 0 ? copysign(0.0, x / y) : q);
			}
			return 0;
		}
		if (op == OP_MOD && a.t == JT_STR)
			return jstr_format_percent(R, a, b, out);
		break;
	case OP_POW:
		if (ints && b.i >= 0) {
			__int128 r = 1, base = a.i;
			for (int64_t e = b.i; e > 0; e--) {
				r *= base;
				if (r > INT64_MAX || r < INT64_MIN)
					return jr_fail(R, JINJA_UNSUPPORTED, "integers beyond 64 bits");
				if (r == 0 || r == 1)
					break;
			}
			if (r == 1 && a.i == -1 && (b.i & 1))
				r = -1;
			return int_result(R, r, out);
		}
		if (nums) {
			if (fnum(a) == 0 && fnum(b) < 0)
				return jr_fail(R, JINJA_ERROR, "0.0 cannot be raised to a negative power");
			*out = jv_float(pow(fnum(a), fnum(b)));
			return 0;
		}
		break;
	}
	static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
	return jr_fail(R, JINJA_ERROR, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op], jv_type_name(a),
	               jv_type_name(b));
}

static int
contains(struct jrender *R, struct jv hay, struct jv needle, int *r)
{
	*r = 0;
	switch (hay.t) {
	case JT_UNDEF:
		return 0;
	case JT_STR:
		if (needle.t != JT_STR)
			return jr_fail(R, JINJA_ERROR, "'in <string>' requires string as left operand, not %s",
			               jv_type_name(needle));
		*r = jv_s(needle)->n == 0 ||
		     memmem(jv_s(hay)->p, jv_s(hay)->n, jv_s(needle)->p, jv_s(needle)->n) != NULL;
		return 0;
	case JT_DICT:
		if (!jv_hashable(needle))
			return jr_fail(R, JINJA_ERROR, "unhashable type: '%s'", jv_type_name(needle));
		*r = jdict_get(jv_d(hay), needle) != NULL;
		return 0;
	case JT_LIST: {
		struct jlist *l;
		if (jiter(R, hay, &l) != 0)
			return -1;
		for (size_t i = 0; i < l->n && !*r; i++)
			*r = jv_eq(l->v[i], needle, 0);
		jobj_unref(R, &l->h);
		return 0;
	}
	default:
		return jr_fail(R, JINJA_ERROR, "argument of type '%s' is not iterable", jv_type_name(hay));
	}
}

static int
compare(struct jrender *R, int op, struct jv a, struct jv b, int *r)
{
	int c;
	switch (op) {
	case OP_EQ:
		*r = jv_eq(a, b, 0);
		return 0;
	case OP_NE:
		*r = !jv_eq(a, b, 0);
		return 0;
	case OP_IN:
		return contains(R, b, a, r);
	case OP_NOTIN:
		if (contains(R, b, a, r) != 0)
			return -1;
		*r = !*r;
		return 0;
	default:
		if (jv_cmp(R, a, b, &c) != 0)
			return -1;
		*r = op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
		return 0;
	}
}

// --- calls --------------------------------------------------------------------------

static void
args_free(struct jrender *R, struct jargs *a)
{
	for (size_t i = 0; i < a->npos; i++)
		jv_unref(R, a->pos[i]);
	for (size_t i = 0; i < a->nkw; i++)
		jv_unref(R, a->kwv[i]);
	jv_unref(R, a->hold);
	free(a->pos);
	free(a->kw);
	free(a->kwv);
	memset(a, 0, sizeof *a);
}

// the arguments of a call node: v positional, names/w keywords, c *args, d **kwargs
static int
eval_args(struct jrender *R, const struct jnode *n, struct jframe *f, struct jargs *a)
{
	memset(a, 0, sizeof *a);
	struct jv star = JV_UNDEF, dstar = JV_UNDEF;
	struct jlist *sl = NULL;
	if (n->c && (jeval(R, n->c, f, &star) != 0 || jiter(R, star, &sl) != 0))
		goto fail;
	if (n->d) {
		if (jeval(R, n->d, f, &dstar) != 0)
			goto fail;
		if (dstar.t != JT_DICT) {
			jr_fail(R, JINJA_ERROR, "argument after ** must be a mapping, not %s", jv_type_name(dstar));
			goto fail;
		}
	}
	size_t np = n->nv + (sl ? sl->n : 0), nk = n->nw + (n->d ? jv_d(dstar)->n : 0);
	a->pos = calloc(np + 1, sizeof *a->pos);
	a->kw = calloc(nk + 1, sizeof *a->kw);
	a->kwv = calloc(nk + 1, sizeof *a->kwv);
	if (!a->pos || !a->kw || !a->kwv) {
		jr_fail(R, JINJA_LIMIT, "out of memory");
		goto fail;
	}
	for (size_t i = 0; i < n->nv; i++, a->npos++)
		if (jeval(R, n->v[i], f, &a->pos[i]) != 0)
			goto fail;
	for (size_t i = 0; sl && i < sl->n; i++)
		a->pos[a->npos++] = jv_ref(sl->v[i]);
	for (size_t i = 0; i < n->nw; i++, a->nkw++) {
		a->kw[i] = n->names[i];
		if (jeval(R, n->w[i], f, &a->kwv[i]) != 0)
			goto fail;
	}
	if (n->d) {
		struct jdict *d = jv_d(dstar);
		for (size_t i = 0; i < d->n; i++) {
			if (d->k[i].t != JT_STR) {
				jr_fail(R, JINJA_ERROR, "keywords must be strings");
				goto fail;
			}
			a->kw[a->nkw] = jv_s(d->k[i])->p; // lives as long as dstar, held below
			a->kwv[a->nkw++] = jv_ref(d->v[i]);
		}
	}
	if (sl)
		jobj_unref(R, &sl->h);
	jv_unref(R, star);
	a->hold = dstar; // a->kw points into its keys
	return 0;
fail:
	if (sl)
		jobj_unref(R, &sl->h);
	jv_unref(R, star);
	jv_unref(R, dstar);
	args_free(R, a);
	return -1;
}

static int exec_body(struct jrender *R, struct jnode *const *v, size_t n, struct jframe *f);

// render a body into a string value, in frame f
static int
capture(struct jrender *R, struct jnode *const *v, size_t n, struct jframe *f, struct jv *out)
{
	struct jbuf buf = {0}, *saved = R->out;
	R->out = &buf;
	int rc = exec_body(R, v, n, f);
	R->out = saved;
	int fail = 0;
	*out = jbuf_take(R, &buf, &fail);
	if (rc < 0 || fail) {
		jv_unref(R, *out);
		*out = JV_UNDEF;
		return -1;
	}
	return 0;
}

static int
name_used(const struct jnode *n, const char *name, int depth)
{
	if (!n || depth > 200)
		return 0;
	if (n->k == N_NAME && !strcmp(n->s, name))
		return 1;
	if (n->k == N_MACRO && depth > 0)
		return 0; // a nested macro has its own
	if (name_used(n->a, name, depth + 1) || name_used(n->b, name, depth + 1) || name_used(n->c, name, depth + 1) ||
	    name_used(n->d, name, depth + 1))
		return 1;
	for (size_t i = 0; i < n->nv; i++)
		if (name_used(n->v[i], name, depth + 1))
			return 1;
	for (size_t i = 0; i < n->nw; i++)
		if (name_used(n->w[i], name, depth + 1))
			return 1;
	return 0;
}

static int
call_macro(struct jrender *R, struct jmacro *m, struct jargs *a, struct jv caller, struct jv *out)
{
	const struct jnode *n = m->node;
	const char *what = n->k == N_MACRO ? n->s : "caller";
	if (R->depth >= JINJA_MAX_CALLS)
		return jr_fail(R, JINJA_LIMIT, "macro calls nested deeper than %d", JINJA_MAX_CALLS);
	struct jframe *f = jframe_new(R, m->frame ? m->frame : R->root);
	if (!f)
		return -1;
	int rc = -1;
	int want_varargs = name_used(n, "varargs", 0), want_kwargs = name_used(n, "kwargs", 0);
	size_t np = n->nnames, ndef = n->nw;
	if (a->npos > np && !want_varargs) {
		jr_fail(R, JINJA_ERROR, "macro '%s' takes not more than %zu argument(s)", what, np);
		goto out;
	}
	struct jdict *kwargs = NULL;
	if (want_kwargs) {
		if (!(kwargs = jdict_new(R, JT_DICT)))
			goto out;
		if (jframe_set(R, f, "kwargs", (struct jv){.t = JT_DICT, .o = &kwargs->h}) != 0)
			goto out;
	}
	char given[256] = {0};
	for (size_t i = 0; i < a->npos && i < np; i++) {
		given[i] = 1;
		if (jframe_set(R, f, n->names[i], jv_ref(a->pos[i])) != 0)
			goto out;
	}
	for (size_t k = 0; k < a->nkw; k++) {
		size_t i;
		for (i = 0; i < np && strcmp(n->names[i], a->kw[k]); i++)
			;
		if (i < np) {
			if (given[i]) {
				jr_fail(R, JINJA_ERROR, "macro '%s' got multiple values for argument '%s'", what,
				        a->kw[k]);
				goto out;
			}
			given[i] = 1;
			if (jframe_set(R, f, n->names[i], jv_ref(a->kwv[k])) != 0)
				goto out;
		} else if (!strcmp(a->kw[k], "caller") && caller.t == JT_UNDEF && name_used(n, "caller", 0)) {
			caller = a->kwv[k];
		} else if (kwargs) {
			struct jv key;
			if (jv_newstr(R, a->kw[k], strlen(a->kw[k]), &key) != 0 ||
			    jdict_set(R, kwargs, key, jv_ref(a->kwv[k])) != 0)
				goto out;
		} else {
			jr_fail(R, JINJA_ERROR, "macro '%s' takes no keyword argument '%s'", what, a->kw[k]);
			goto out;
		}
	}
	for (size_t i = 0; i < np; i++) {
		if (given[i])
			continue;
		struct jv v = JV_UNDEF;
		if (i >= np - ndef && jeval(R, n->w[i - (np - ndef)], f, &v) != 0)
			goto out;
		if (jframe_set(R, f, n->names[i], v) != 0)
			goto out;
	}
	if (want_varargs) {
		struct jlist *va = jlist_new(R, JL_TUPLE, 0);
		if (!va || jframe_set(R, f, "varargs", (struct jv){.t = JT_LIST, .o = &va->h}) != 0)
			goto out;
		for (size_t i = np; i < a->npos; i++)
			if (jlist_push(R, va, jv_ref(a->pos[i])) != 0)
				goto out;
	}
	if (caller.t != JT_UNDEF && jframe_set(R, f, "caller", jv_ref(caller)) != 0)
		goto out;
	R->depth++;
	rc = capture(R, n->v, n->nv, f, out);
	R->depth--;
out:
	frame_drop(R, f);
	return rc;
}

int
jcall(struct jrender *R, struct jv fn, struct jargs *a, struct jframe *f, struct jv *out)
{
	(void)f;
	*out = JV_UNDEF;
	switch (fn.t) {
	case JT_MACRO:
		return call_macro(R, (struct jmacro *)fn.o, a, JV_UNDEF, out);
	case JT_FUNC:
		return jcall_builtin(R, (struct jfunc *)fn.o, a, out);
	case JT_UNDEF:
		return jr_fail(R, JINJA_ERROR, "an undefined value was called");
	default:
		return jr_fail(R, JINJA_ERROR, "'%s' object is not callable", jv_type_name(fn));
	}
}

// --- expressions ----------------------------------------------------------------------

static int
apply_filters(struct jrender *R, const struct jnode *n, struct jv input, struct jframe *f, struct jv *out)
{
	// a filter chain whose innermost operand is the input (blocks)
	struct jv v;
	if (n->a) {
		if (apply_filters(R, n->a, input, f, &v) != 0)
			return -1;
	} else {
		v = jv_ref(input);
	}
	struct jargs a;
	if (eval_args(R, n, f, &a) != 0) {
		jv_unref(R, v);
		return -1;
	}
	int rc = jfilter(R, n->s, v, &a, f, out);
	args_free(R, &a);
	jv_unref(R, v);
	return rc;
}

int
jeval(struct jrender *R, const struct jnode *n, struct jframe *f, struct jv *out)
{
	*out = JV_UNDEF;
	if (jstep(R) != 0)
		return -1;
	struct jv a = JV_UNDEF, b = JV_UNDEF;
	int rc = -1, r;
	switch (n->k) {
	case N_CONST:
		*out = jv_ref(n->val);
		return 0;
	case N_NAME:
		return lookup(R, f, n->s, out);
	case N_ATTR:
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		rc = jgetattr(R, a, n->s, n->slen, out);
		break;
	case N_ITEM:
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		if (n->b->k == N_SLICE) {
			rc = slice(R, a, n->b, f, out);
			break;
		}
		if (jeval(R, n->b, f, &b) != 0)
			break;
		rc = jgetitem(R, a, b, out);
		break;
	case N_CALL: {
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		struct jargs args;
		if (eval_args(R, n, f, &args) != 0)
			break;
		rc = jcall(R, a, &args, f, out);
		args_free(R, &args);
		break;
	}
	case N_FILTER: {
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		struct jargs args;
		if (eval_args(R, n, f, &args) != 0)
			break;
		rc = jfilter(R, n->s, a, &args, f, out);
		args_free(R, &args);
		break;
	}
	case N_TEST: {
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		struct jargs args;
		if (eval_args(R, n, f, &args) != 0)
			break;
		rc = jtest(R, n->s, a, &args, &r);
		args_free(R, &args);
		if (rc == 0)
			*out = jv_bool(r);
		break;
	}
	case N_NOT:
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		*out = jv_bool(!jv_truthy(a));
		rc = 0;
		break;
	case N_NEG:
	case N_POS:
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		if (a.t == JT_FLOAT)
			*out = jv_float(n->k == N_NEG ? -a.f : a.f);
		else if (a.t == JT_INT || a.t == JT_BOOL) {
			if (n->k == N_NEG && a.i == INT64_MIN) {
				jr_fail(R, JINJA_UNSUPPORTED, "integers beyond 64 bits");
				break;
			}
			*out = jv_int(n->k == N_NEG ? -a.i : a.i);
		} else if (a.t == JT_UNDEF) {
			jr_fail(R, JINJA_ERROR, "an undefined value in arithmetic");
			break;
		} else {
			jr_fail(R, JINJA_ERROR, "bad operand type for unary %c: '%s'", n->k == N_NEG ? '-' : '+',
			        jv_type_name(a));
			break;
		}
		rc = 0;
		break;
	case N_BIN:
		if (jeval(R, n->a, f, &a) != 0 || jeval(R, n->b, f, &b) != 0)
			break;
		rc = jbinop(R, n->op, a, b, out);
		break;
	case N_CONCAT: {
		struct jbuf buf = {0};
		for (size_t i = 0; i < n->nv; i++) {
			struct jv x;
			if (jeval(R, n->v[i], f, &x) != 0)
				break;
			jv_str_of(R, &buf, x);
			jv_unref(R, x);
		}
		int fail = 0;
		*out = jbuf_take(R, &buf, &fail);
		rc = R->status == JINJA_OK && !fail ? 0 : -1;
		break;
	}
	case N_CMP: {
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		r = 1;
		for (size_t i = 0; i < n->nv && r; i++) {
			if (jeval(R, n->v[i], f, &b) != 0 || compare(R, n->ops[i], a, b, &r) != 0)
				goto done;
			jv_unref(R, a);
			a = b;
			b = JV_UNDEF;
		}
		*out = jv_bool(r);
		rc = 0;
		break;
	}
	case N_AND:
	case N_OR:
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		if (jv_truthy(a) == (n->k == N_OR)) {
			*out = a;
			return 0;
		}
		jv_unref(R, a);
		return jeval(R, n->b, f, out);
	case N_COND:
		if (jeval(R, n->a, f, &a) != 0)
			return -1;
		r = jv_truthy(a);
		jv_unref(R, a);
		if (r)
			return jeval(R, n->b, f, out);
		return n->c ? jeval(R, n->c, f, out) : 0;
	case N_LIST:
	case N_TUPLE: {
		struct jlist *l = jlist_new(R, n->k == N_LIST ? JL_LIST : JL_TUPLE, n->nv);
		if (!l)
			return -1;
		out->t = JT_LIST;
		out->o = &l->h;
		for (size_t i = 0; i < n->nv; i++) {
			struct jv x;
			if (jeval(R, n->v[i], f, &x) != 0 || jlist_push(R, l, x) != 0)
				return -1;
		}
		return 0;
	}
	case N_DICT: {
		struct jdict *d = jdict_new(R, JT_DICT);
		if (!d)
			return -1;
		out->t = JT_DICT;
		out->o = &d->h;
		for (size_t i = 0; i < n->nv; i++) {
			struct jv k, v;
			if (jeval(R, n->v[i], f, &k) != 0)
				return -1;
			if (!jv_hashable(k)) {
				jr_fail(R, JINJA_ERROR, "unhashable type: '%s'", jv_type_name(k));
				jv_unref(R, k);
				return -1;
			}
			if (jeval(R, n->w[i], f, &v) != 0) {
				jv_unref(R, k);
				return -1;
			}
			if (jdict_set(R, d, k, v) != 0)
				return -1;
		}
		return 0;
	}
	default:
		return jr_fail(R, JINJA_UNSUPPORTED, "line %d: this expression", n->line);
	}
done:
	jv_unref(R, a);
	jv_unref(R, b);
	if (rc != 0) {
		jv_unref(R, *out);
		*out = JV_UNDEF;
	}
	return rc;
}

// --- statements -----------------------------------------------------------------------

static int
assign(struct jrender *R, const struct jnode *t, struct jv v, struct jframe *f)
{
	switch (t->k) {
	case N_NAME:
		return jframe_set(R, f, t->s, jv_ref(v));
	case N_NSREF: {
		struct jv *ns = frame_find(f, t->s);
		if (!ns || ns->t != JT_NS)
			return jr_fail(R, JINJA_ERROR, "cannot assign attribute on non-namespace object");
		struct jv key;
		if (jv_newstr(R, t->s2, strlen(t->s2), &key) != 0)
			return -1;
		return jdict_set(R, jv_d(*ns), key, jv_ref(v));
	}
	case N_TUPLE: {
		struct jlist *l;
		if (jiter(R, v, &l) != 0)
			return -1;
		int rc = 0;
		if (l->n != t->nv)
			rc = jr_fail(R, JINJA_ERROR,
			             l->n > t->nv ? "too many values to unpack (expected %zu)"
			                          : "not enough values to unpack (expected %zu)",
			             t->nv);
		for (size_t i = 0; rc == 0 && i < t->nv; i++)
			rc = assign(R, t->v[i], l->v[i], f);
		jobj_unref(R, &l->h);
		return rc;
	}
	default:
		return jr_fail(R, JINJA_UNSUPPORTED, "line %d: this assignment", t->line);
	}
}

static int
exec_for(struct jrender *R, const struct jnode *n, struct jframe *f)
{
	struct jv it;
	struct jlist *items = NULL;
	if (jeval(R, n->b, f, &it) != 0)
		return -1;
	int rc = jiter(R, it, &items);
	jv_unref(R, it);
	if (rc != 0)
		return -1;
	if (n->c) { // for x in xs if test: only the items that pass
		struct jlist *kept = jlist_new(R, JL_LIST, 0);
		for (size_t i = 0; kept && i < items->n; i++) {
			if (jstep(R) != 0)
				break;
			struct jframe *g = jframe_new(R, f);
			struct jv ok = JV_UNDEF;
			rc = g ? assign(R, n->a, items->v[i], g) : -1;
			if (rc == 0)
				rc = jeval(R, n->c, g, &ok);
			if (rc == 0 && jv_truthy(ok))
				rc = jlist_push(R, kept, jv_ref(items->v[i]));
			jv_unref(R, ok);
			frame_drop(R, g);
			if (rc != 0)
				break;
		}
		jobj_unref(R, &items->h);
		if (!kept || R->status != JINJA_OK) {
			if (kept)
				jobj_unref(R, &kept->h);
			return -1;
		}
		items = kept;
	}
	if (items->n == 0) {
		jobj_unref(R, &items->h);
		if (!n->nw)
			return 0;
		struct jframe *g = jframe_new(R, f);
		rc = g ? exec_body(R, n->w, n->nw, g) : -1;
		frame_drop(R, g);
		return rc < 0 ? -1 : 0;
	}
	struct jloop *loop = jheap_alloc(R, &R->heap, JT_LOOP, sizeof *loop);
	if (!loop) {
		jobj_unref(R, &items->h);
		return -1;
	}
	loop->items = items; // the loop holds the reference
	rc = 0;
	for (size_t i = 0; i < items->n && rc >= 0; i++) {
		if (jstep(R) != 0) {
			rc = -1;
			break;
		}
		loop->i = i;
		struct jframe *g = jframe_new(R, f);
		if (!g || assign(R, n->a, items->v[i], g) != 0 ||
		    jframe_set(R, g, "loop", jv_ref((struct jv){.t = JT_LOOP, .o = &loop->h})) != 0) {
			frame_drop(R, g);
			rc = -1;
			break;
		}
		rc = exec_body(R, n->v, n->nv, g);
		frame_drop(R, g);
		if (rc == EX_BREAK)
			break;
	}
	jobj_unref(R, &loop->h);
	return rc < 0 ? -1 : 0;
}

static int
exec_stmt(struct jrender *R, const struct jnode *n, struct jframe *f)
{
	struct jv v = JV_UNDEF, w = JV_UNDEF;
	int rc = -1;
	switch (n->k) {
	case N_DATA:
		return jbuf_add(R, R->out, n->s, n->slen);
	case N_OUT:
		if (jeval(R, n->a, f, &v) != 0)
			return -1;
		rc = jv_str_of(R, R->out, v);
		break;
	case N_IF:
		for (;;) {
			if (jeval(R, n->a, f, &v) != 0)
				return -1;
			int t = jv_truthy(v);
			jv_unref(R, v);
			if (t)
				return exec_body(R, n->v, n->nv, f);
			if (n->nw == 1 && n->w[0]->k == N_IF && n->w[0]->op == 1) {
				n = n->w[0];
				if (jstep(R) != 0)
					return -1;
				continue;
			}
			return exec_body(R, n->w, n->nw, f);
		}
	case N_FOR:
		return exec_for(R, n, f);
	case N_SET:
		if (jeval(R, n->b, f, &v) != 0)
			return -1;
		rc = assign(R, n->a, v, f);
		break;
	case N_SETBLOCK:
	case N_FILTERBLOCK: {
		struct jframe *g = jframe_new(R, f);
		rc = g ? capture(R, n->v, n->nv, g, &v) : -1;
		frame_drop(R, g);
		if (rc != 0)
			break;
		const struct jnode *chain = n->k == N_SETBLOCK ? n->b : n->a;
		if (chain) {
			if ((rc = apply_filters(R, chain, v, f, &w)) != 0)
				break;
			jv_unref(R, v);
			v = w;
			w = JV_UNDEF;
		}
		if (n->k == N_SETBLOCK)
			rc = assign(R, n->a, v, f);
		else
			rc = jv_str_of(R, R->out, v);
		break;
	}
	case N_MACRO: {
		struct jmacro *m = jheap_alloc(R, &R->heap, JT_MACRO, sizeof *m);
		if (!m)
			return -1;
		m->node = n;
		if (f != R->root) {
			m->frame = f;
			f->h.rc += f->h.rc >= 0;
		}
		return jframe_set(R, f, n->s, (struct jv){.t = JT_MACRO, .o = &m->h});
	}
	case N_CALLBLOCK: {
		struct jmacro *c = jheap_alloc(R, &R->heap, JT_MACRO, sizeof *c);
		if (!c)
			return -1;
		c->node = n;
		c->frame = f;
		f->h.rc += f->h.rc >= 0;
		struct jv caller = {.t = JT_MACRO, .o = &c->h};
		struct jargs args;
		if (jeval(R, n->a->a, f, &v) != 0 || eval_args(R, n->a, f, &args) != 0) {
			jv_unref(R, caller);
			break;
		}
		if (v.t == JT_MACRO)
			rc = call_macro(R, (struct jmacro *)v.o, &args, caller, &w);
		else
			rc = jr_fail(R, JINJA_UNSUPPORTED, "line %d: a call block around a %s", n->line,
			             jv_type_name(v));
		args_free(R, &args);
		jv_unref(R, caller);
		if (rc == 0)
			rc = jv_str_of(R, R->out, w);
		break;
	}
	case N_WITH: {
		struct jframe *g = jframe_new(R, f);
		if (!g)
			return -1;
		rc = 0;
		for (size_t i = 0; rc == 0 && i + 1 < n->nw; i += 2) {
			rc = jeval(R, n->w[i + 1], f, &v);
			if (rc == 0)
				rc = assign(R, n->w[i], v, g);
			jv_unref(R, v);
			v = JV_UNDEF;
		}
		if (rc == 0)
			rc = exec_body(R, n->v, n->nv, g);
		frame_drop(R, g);
		return rc < 0 ? -1 : rc;
	}
	case N_BREAK:
		return EX_BREAK;
	case N_CONTINUE:
		return EX_CONTINUE;
	case N_BODY: {
		if (n->op == 1)
			return exec_body(R, n->v, n->nv, f);
		struct jframe *g = jframe_new(R, f);
		rc = g ? exec_body(R, n->v, n->nv, g) : -1;
		frame_drop(R, g);
		return rc;
	}
	default:
		return jr_fail(R, JINJA_UNSUPPORTED, "line %d: this statement", n->line);
	}
	jv_unref(R, v);
	jv_unref(R, w);
	return rc < 0 || R->status != JINJA_OK ? -1 : rc;
}

static int
exec_body(struct jrender *R, struct jnode *const *v, size_t n, struct jframe *f)
{
	for (size_t i = 0; i < n; i++) {
		if (jstep(R) != 0)
			return -1;
		int rc = exec_stmt(R, v[i], f);
		if (rc != 0)
			return rc;
	}
	return 0;
}

// --- jinja_render ------------------------------------------------------------------------

const char *
jinja_status_name(enum jinja_status s)
{
	switch (s) {
	case JINJA_OK:
		return "ok";
	case JINJA_SYNTAX:
		return "syntax error";
	case JINJA_UNSUPPORTED:
		return "unsupported";
	case JINJA_RAISED:
		return "raised";
	case JINJA_ERROR:
		return "error";
	case JINJA_LIMIT:
		return "limit";
	case JINJA_INPUT:
		return "bad input";
	}
	return "unknown";
}

enum jinja_status
jinja_render(const struct jinja_tmpl *t, const char *ctx, size_t ctx_len, const struct jinja_limits *lim, char **out,
             size_t *out_len, char *err)
{
	*out = NULL;
	if (out_len)
		*out_len = 0;
	struct jinja_limits L = lim ? *lim : (struct jinja_limits){0};
	struct jrender *R = calloc(1, sizeof *R);
	if (!R) {
		ad_err(err, "out of memory");
		return JINJA_LIMIT;
	}
	R->t = t;
	R->status = JINJA_OK;
	R->heap.limit = L.max_memory ? L.max_memory : (size_t)64 << 20;
	R->max_output = L.max_output ? L.max_output : (size_t)8 << 20;
	R->max_steps = L.max_steps ? L.max_steps : 50000000u;
	R->deadline_ns = ad_now_ns() + (uint64_t)(L.timeout_ms > 0 ? L.timeout_ms : 2000) * 1000000u;
	R->now = L.now;
	struct jbuf buf = {0};
	R->out = &buf;
	struct jv ctxv = JV_UNDEF;
	if (jv_json_parse(R, ctx ? ctx : "{}", ctx ? ctx_len : 2, &ctxv) == 0) {
		if (ctxv.t != JT_DICT)
			jr_fail(R, JINJA_INPUT, "the context is not a JSON object");
		else if ((R->root = jframe_new(R, NULL)) != NULL) {
			struct jdict *d = jv_d(ctxv);
			for (size_t i = 0; i < d->n && R->status == JINJA_OK; i++)
				jframe_set(R, R->root, jv_s(d->k[i])->p, jv_ref(d->v[i]));
			// the names point into ctxv's keys, which live until the end
			if (R->status == JINJA_OK)
				exec_body(R, t->root->v, t->root->nv, R->root);
		}
	}
	enum jinja_status st = R->status;
	if (st == JINJA_OK) {
		*out = buf.p ? buf.p : strdup("");
		if (!*out) {
			st = JINJA_LIMIT;
			ad_err(err, "out of memory");
		} else if (out_len)
			*out_len = buf.n;
	} else {
		free(buf.p);
		ad_err(err, "%s", R->err);
	}
	// everything the render made, cycles included
	jheap_free_all(&R->heap);
	free(R->dead);
	free(R);
	return st;
}
