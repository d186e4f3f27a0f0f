// jinja-impl.h - the insides of the Jinja interpreter (jinja.h), shared by
// jinja-value.c (values, JSON, Python's str/repr), jinja-parse.c (lexer and
// parser), jinja-eval.c (statements and expressions) and jinja-lib.c
// (filters, tests, methods, globals).
//
// Values: struct jv is a small tagged value passed by value. Scalars live in
// it; strings, lists, dicts and the rest are struct jobj heap objects with a
// reference count. Ownership: a function that returns a jv (through an out
// parameter) hands over one reference; parameters are borrowed. Containers
// hand out borrowed items (jv_ref to keep one). Objects made by the parser
// (constants) are immortal (rc < 0) so that a template can be shared by
// threads; every other object belongs to the render's heap, which also links
// them all so that jinja_render can sweep cycles away at the end.
//
// Errors are sticky: the first one is kept in the render (status + message)
// and every function returns -1 from then on; the caller checks once.
#ifndef AD_JINJA_IMPL_H
#define AD_JINJA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

enum jt {
	JT_UNDEF,
	JT_NONE,
	JT_BOOL,
	JT_INT,
	JT_FLOAT, // scalars
	JT_STR,
	JT_LIST,
	JT_DICT,
	JT_NS,
	JT_FUNC,
	JT_MACRO,
	JT_LOOP,
	JT_FRAME,
};

struct jobj {
	int32_t rc;               // < 0: immortal
	uint8_t t;                // enum jt
	struct jobj *prev, *next; // the heap's list
	size_t bytes;             // what it costs against the memory limit
};

struct jv {
	uint8_t t;
	union {
		int64_t i; // JT_BOOL, JT_INT
		double f;
		struct jobj *o;
	};
};

struct jstr {
	struct jobj h;
	size_t n;     // bytes (valid UTF-8)
	size_t ncp;   // code points, SIZE_MAX until counted
	uint8_t safe; // a markupsafe Markup (|safe, |e): what it is added to is HTML-escaped
	char p[];     // NUL-terminated
};

enum jl_kind { JL_LIST, JL_TUPLE, JL_GEN, JL_VIEW };
struct jlist {
	struct jobj h;
	uint8_t kind;     // JL_GEN: a jinja2 generator (select, map, ...): no len, no index, truthy,
	uint8_t consumed; // iterable once; JL_VIEW: dict.items()/keys()/values()
	char view;        // JL_VIEW: 'i', 'k' or 'v' (how it prints)
	size_t n, cap;
	struct jv *v;
};

struct jdict { // also JT_NS (a namespace() object)
	struct jobj h;
	size_t n, cap;
	struct jv *k, *v; // insertion order; keys are compared with Python's ==
};

struct jfunc {
	struct jobj h;
	int id;         // enum jfn (jinja-lib.c)
	struct jv self; // the bound object of a method, else undefined
};

struct jnode;
struct jframe;
struct jmacro {
	struct jobj h;
	const struct jnode *node; // N_MACRO, or N_CALLBLOCK for a caller
	struct jframe *frame;     // a caller's defining frame (referenced); NULL for macros
};

struct jloop {
	struct jobj h;
	struct jlist *items; // referenced
	size_t i;            // index0
	struct jv changed;   // loop.changed's last arguments (a tuple), undefined at first
	int has_changed;
};

struct jframe {
	struct jobj h;
	struct jframe *parent; // referenced; NULL at the root
	size_t n, cap;
	const char **names; // borrowed from the template
	struct jv *vals;
};

// --- the heap ---------------------------------------------------------------
struct jheap {
	struct jobj head; // sentinel of the list of live objects
	size_t bytes, limit;
	int immortal; // a template's heap: objects get rc -1
	int failed;   // the limit was hit
};

// --- the render -------------------------------------------------------------
struct jbuf {
	char *p;
	size_t n, cap;
};

struct jrender {
	struct jheap heap;
	const struct jinja_tmpl *t;
	enum jinja_status status;
	char err[AD_ERRLEN];
	struct jframe *root;
	struct jbuf *out; // where output goes now (a macro or block set captures)
	size_t max_output;
	uint64_t steps, max_steps;
	uint64_t deadline_ns;
	int64_t now;
	int depth;          // macro calls and nested evaluation, bounded
	struct jobj **dead; // the iterative free's work list
	size_t n_dead, cap_dead;
};

#define JV_UNDEF ((struct jv){.t = JT_UNDEF})
#define JV_NONE ((struct jv){.t = JT_NONE})
#define JV_MAX_DEPTH 400 // nesting of values walked recursively (repr, ==, tojson)

static inline struct jv
jv_bool(int b)
{
	return (struct jv){.t = JT_BOOL, .i = b != 0};
}
static inline struct jv
jv_int(int64_t i)
{
	return (struct jv){.t = JT_INT, .i = i};
}
static inline struct jv
jv_float(double f)
{
	return (struct jv){.t = JT_FLOAT, .f = f};
}
static inline struct jstr *
jv_s(struct jv v)
{
	return (struct jstr *)v.o;
}
static inline struct jlist *
jv_l(struct jv v)
{
	return (struct jlist *)v.o;
}
static inline struct jdict *
jv_d(struct jv v)
{
	return (struct jdict *)v.o;
}
static inline int
jv_is_obj(struct jv v)
{
	return v.t >= JT_STR;
}
static inline int
jv_is_num(struct jv v) // Python's numbers: bool is an int
{
	return v.t == JT_BOOL || v.t == JT_INT || v.t == JT_FLOAT;
}
static inline int
jv_is_seq(struct jv v) // list or tuple (not a generator or view)
{
	return v.t == JT_LIST && (jv_l(v)->kind == JL_LIST || jv_l(v)->kind == JL_TUPLE);
}

// --- jinja-value.c ------------------------------------------------------------
int jr_fail(struct jrender *R, enum jinja_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void *jheap_alloc(struct jrender *R, struct jheap *h, enum jt t, size_t size);
void jheap_free_all(struct jheap *h);
void jheap_move(struct jheap *dst, struct jheap *src); // the objects of src now belong to dst
struct jv jv_ref(struct jv v);
void jv_unref(struct jrender *R, struct jv v);
void jobj_unref(struct jrender *R, struct jobj *o);

// strings: NULL/-1 on failure (the render's error is set)
int jv_newstr(struct jrender *R, const char *s, size_t n, struct jv *out);
struct jstr *jstr_new(struct jrender *R, size_t n); // uninitialised bytes; NUL added
size_t jstr_ncp(struct jstr *s);                    // code points
// lists and dicts take over the references given to them
struct jlist *jlist_new(struct jrender *R, enum jl_kind kind, size_t cap);
int jlist_push(struct jrender *R, struct jlist *l, struct jv v);
struct jdict *jdict_new(struct jrender *R, enum jt t);
int jdict_set(struct jrender *R, struct jdict *d, struct jv k, struct jv v); // k must be hashable
struct jv *jdict_get(struct jdict *d, struct jv k);                          // borrowed, NULL if absent
struct jv *jdict_get_str(struct jdict *d, const char *k, size_t n);
int jv_hashable(struct jv v);

// Python semantics
int jv_truthy(struct jv v);
int jv_eq(struct jv a, struct jv b, int depth);
// jv_cmp: -1, 0, 1 into *r, or -1 (error set) for types Python cannot order
int jv_cmp(struct jrender *R, struct jv a, struct jv b, int *r);
const char *jv_type_name(struct jv v); // Python's type(v).__name__
// jv_str_of: str(v) (what {{ v }} prints) appended to b; jv_repr_of: repr(v)
int jv_str_of(struct jrender *R, struct jbuf *b, struct jv v);
int jv_repr_of(struct jrender *R, struct jbuf *b, struct jv v, int depth);
struct jv jv_to_str(struct jrender *R, struct jv v, int *fail); // str(v) as a value
// markupsafe.escape(v): v itself when it is a Markup, else str(v) escaped, as a Markup
int jv_escape(struct jrender *R, struct jv v, struct jv *out);
static inline int
jv_safe(struct jv v)
{
	return v.t == JT_STR && jv_s(v)->safe;
}
void jfloat_repr(double f, char out[32]);
// json.dumps(v, ensure_ascii, indent, separators, sort_keys)
struct json_opts {
	int ensure_ascii, sort_keys;
	const char *indent; // NULL: no newlines
	size_t indent_n;
	const char *item_sep, *key_sep;
	size_t item_sep_n, key_sep_n;
};
int jv_json_dump(struct jrender *R, struct jbuf *b, struct jv v, const struct json_opts *o, int level);
// json.loads of s[0..n) into *out
int jv_json_parse(struct jrender *R, const char *s, size_t n, struct jv *out);

// output buffers (bounded by R->max_output)
int jbuf_add(struct jrender *R, struct jbuf *b, const char *s, size_t n);
static inline int
jbuf_str(struct jrender *R, struct jbuf *b, const char *s)
{
	size_t n = 0;
	while (s[n])
		n++;
	return jbuf_add(R, b, s, n);
}
struct jv jbuf_take(struct jrender *R, struct jbuf *b, int *fail); // as a string value; b emptied

// UTF-8 and Python's notion of whitespace
int ju_isspace(uint32_t cp);
size_t ju_decode(const char *s, size_t n, uint32_t *cp); // bytes used (input is valid UTF-8)
size_t ju_offset(const char *s, size_t n, size_t k);     // byte offset of code point k (clamped)

// --- the AST (jinja-parse.c) --------------------------------------------------
enum jk {
	// expressions
	N_CONST,
	N_NAME,
	N_ATTR,
	N_ITEM,
	N_SLICE,
	N_CALL,
	N_FILTER,
	N_TEST,
	N_NOT,
	N_NEG,
	N_POS,
	N_BIN,
	N_CONCAT,
	N_CMP,
	N_AND,
	N_OR,
	N_COND,
	N_LIST,
	N_TUPLE,
	N_DICT,
	N_NSREF,
	// statements
	N_DATA,
	N_OUT,
	N_FOR,
	N_IF,
	N_SET,
	N_SETBLOCK,
	N_MACRO,
	N_CALLBLOCK,
	N_FILTERBLOCK,
	N_WITH,
	N_BREAK,
	N_CONTINUE,
	N_BODY,
};

enum jop { // N_BIN and N_CMP operators
	OP_ADD,
	OP_SUB,
	OP_MUL,
	OP_DIV,
	OP_FLOORDIV,
	OP_MOD,
	OP_POW,
	OP_EQ,
	OP_NE,
	OP_LT,
	OP_LE,
	OP_GT,
	OP_GE,
	OP_IN,
	OP_NOTIN,
};

// Fields by kind (unused ones are NULL / 0):
//   N_CONST val · N_NAME s · N_ATTR a.s · N_ITEM a[b] · N_SLICE a:b:c
//   N_CALL a(v..., names=w..., *c, **d) · N_FILTER a|s(v..., names=w...) (a NULL in blocks)
//   N_TEST a is s(v..., names=w...) · N_NOT/N_NEG/N_POS a · N_BIN a op b
//   N_CONCAT v · N_CMP a ops[i] v[i] · N_AND/N_OR a b · N_COND b if a else c
//   N_LIST/N_TUPLE v · N_DICT v: w · N_NSREF s.s2 (an assignment target)
//   N_DATA s · N_OUT a · N_FOR for a in b if c: v else w (op: recursive)
//   N_IF if a: v else w · N_SET a = b · N_SETBLOCK a |b: v · N_MACRO s(names = w defaults): v
//   N_CALLBLOCK (names = w defaults) a: v · N_FILTERBLOCK a: v · N_WITH w (target, value pairs): v
//   N_BODY v (a {% generation %} block, rendered as is)
struct jnode {
	uint8_t k, op;
	int line;
	struct jnode *a, *b, *c, *d;
	struct jnode **v, **w;
	size_t nv, nw;
	const char **names; // kwarg names (aligned with w) or parameter names
	size_t nnames;
	uint8_t *ops; // N_CMP
	const char *s, *s2;
	size_t slen;
	struct jv val;
};

struct jinja_tmpl {
	struct jnode *root; // N_BODY
	struct jheap consts;
	void *arena; // nodes and strings
};

// --- jinja-eval.c -------------------------------------------------------------
struct jargs { // the arguments of a call, filter, test or method
	struct jv *pos;
	size_t npos;
	const char **kw;
	struct jv *kwv;
	size_t nkw;
	struct jv hold; // keeps the strings kw points into alive (a **kwargs dict)
};
int jeval(struct jrender *R, const struct jnode *n, struct jframe *f, struct jv *out);
int jcall(struct jrender *R, struct jv fn, struct jargs *a, struct jframe *f, struct jv *out);
int jgetattr(struct jrender *R, struct jv obj, const char *name, size_t n, struct jv *out);
int jgetitem(struct jrender *R, struct jv obj, struct jv key, struct jv *out);
int jiter(struct jrender *R, struct jv v, struct jlist **out); // the items a for loop sees
int jbinop(struct jrender *R, int op, struct jv a, struct jv b, struct jv *out);
int jstep(struct jrender *R); // counts a step, checks the limits
struct jframe *jframe_new(struct jrender *R, struct jframe *parent);
int jframe_set(struct jrender *R, struct jframe *f, const char *name, struct jv v); // takes v

// --- jinja-lib.c --------------------------------------------------------------
// jargs_bind maps a call's arguments onto Python-style parameters: names
// (NULL-terminated) in order; vals[i] is left JV_UNDEF-tagged with given[i]
// 0 when the argument was not passed. Too many or unknown arguments fail.
int jargs_bind(struct jrender *R, const char *what, struct jargs *a, const char *const *names, struct jv *vals,
               int *given);
int jfilter(struct jrender *R, const char *name, struct jv v, struct jargs *a, struct jframe *f, struct jv *out);
int jtest(struct jrender *R, const char *name, struct jv v, struct jargs *a, int *out);
int jfilter_known(const char *name);
int jtest_known(const char *name);
// jmethod: obj.name as a bound method (JT_FUNC); 0 with *out undefined when
// obj has no such attribute; -1 (unsupported) for a Python method not implemented
int jmethod(struct jrender *R, struct jv obj, const char *name, size_t n, struct jv *out);
int jcall_builtin(struct jrender *R, struct jfunc *fn, struct jargs *a, struct jv *out);
int jglobal(struct jrender *R, const char *name, struct jv *out); // 0 with undefined when none
int jloop_attr(struct jrender *R, struct jloop *l, const char *name, struct jv *out);

#endif
