// jschema.c - JSON Schema to GBNF; see jschema.h.
//
// Every schema node becomes a rule (memoised by node, so a $ref target is
// one rule however often it is used, and recursion through $ref works);
// the shared rules (ws, json-string, json-value, ...) are written once at
// the end, only those used. The first error sticks.
#include "jschema.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "sbuf.h"

// the shared rules, written once when used
enum {
	U_WS = 1 << 0,
	U_CHAR = 1 << 1,
	U_STRING = 1 << 2,
	U_NUMBER = 1 << 3,
	U_INTEGER = 1 << 4,
	U_BOOLEAN = 1 << 5,
	U_NULL = 1 << 6,
	U_VALUE = 1 << 7,
	U_FRAC = 1 << 8,
	U_DATE = 1 << 9,
	U_TIME = 1 << 10,
	U_OCTET = 1 << 11,
	U_LABEL = 1 << 12,
	U_KCHAR = 1 << 13,
};

struct memo {
	const cJSON *node;
	char name[80];
};

struct jsg {
	struct sbuf rules;
	struct memo *m;
	int n_memo, cap_memo;
	int counter;
	unsigned used;
	const cJSON *doc; // the schema being added, for $ref
	const char *base; // its rule name
	cJSON *keep[8];   // schemas made here (allOf merges), freed with the document
	int n_keep;
	int depth;
	char *err;
	int failed;
};

static int __attribute__((format(printf, 3, 4))) fail(struct jsg *g, const char *path, const char *fmt, ...)
{
	if (g->failed)
		return -1;
	g->failed = 1;
	va_list ap;
	va_start(ap, fmt);
	ad_verr(g->err, fmt, ap);
	va_end(ap);
	return ad_err_prefix(g->err, "%.200s", path);
}

struct jsg *
jsg_new(void)
{
	return calloc(1, sizeof(struct jsg));
}

void
jsg_free(struct jsg *g)
{
	if (!g)
		return;
	free(g->rules.s);
	free(g->m);
	for (int i = 0; i < g->n_keep; i++)
		cJSON_Delete(g->keep[i]);
	free(g);
}

char *
jsg_literal(const char *s, size_t n)
{
	struct sbuf b = {0};
	sbuf_add(&b, "\"", 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			char e[2] = {'\\', (char)c};
			sbuf_add(&b, e, 2);
		} else if (c < 0x20 || c == 0x7f) {
			sbuf_printf(&b, "\\x%02X", c);
		} else {
			sbuf_add(&b, (const char *)&c, 1);
		}
	}
	sbuf_add(&b, "\"", 1);
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	return b.s;
}

// a literal for the expression in out
static void
lit(struct sbuf *out, const char *s, size_t n)
{
	char *l = jsg_literal(s, n);
	if (!l) {
		out->oom = 1;
		return;
	}
	sbuf_str(out, l);
	free(l);
}

int
jsg_rule(struct jsg *g, const char *name, const char *body, char *err)
{
	g->err = err;
	sbuf_printf(&g->rules, "%s ::= %s\n", name, body);
	return g->rules.oom ? ad_err(err, "out of memory") : 0;
}

// --- keywords ------------------------------------------------------------------------

static const char *const IGNORED[] = {"title",  "description", "default",    "examples",        "$schema",
                                      "$id",    "$comment",    "deprecated", "readOnly",        "writeOnly",
                                      "$defs",  "definitions", "$anchor",    "contentEncoding", "contentMediaType",
                                      "strict", NULL};
static const char *const HANDLED[] = {"type",
                                      "enum",
                                      "const",
                                      "anyOf",
                                      "oneOf",
                                      "allOf",
                                      "properties",
                                      "required",
                                      "additionalProperties",
                                      "items",
                                      "prefixItems",
                                      "minItems",
                                      "maxItems",
                                      "minLength",
                                      "maxLength",
                                      "format",
                                      "minimum",
                                      "maximum",
                                      "exclusiveMinimum",
                                      "exclusiveMaximum",
                                      "$ref",
                                      "nullable",
                                      "uniqueItems",
                                      NULL};
static const char *const REFUSED[] = {"pattern",
                                      "patternProperties",
                                      "propertyNames",
                                      "multipleOf",
                                      "not",
                                      "if",
                                      "then",
                                      "else",
                                      "contains",
                                      "minContains",
                                      "maxContains",
                                      "minProperties",
                                      "maxProperties",
                                      "dependentRequired",
                                      "dependentSchemas",
                                      "dependencies",
                                      "unevaluatedProperties",
                                      "unevaluatedItems",
                                      "additionalItems",
                                      "$dynamicRef",
                                      "$recursiveRef",
                                      NULL};

static int
in_list(const char *k, const char *const *l)
{
	for (; *l; l++)
		if (strcmp(k, *l) == 0)
			return 1;
	return 0;
}

static const cJSON *
get(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

// the keywords of a schema object: refused ones are errors
static int
check_keywords(struct jsg *g, const cJSON *s, const char *path)
{
	const cJSON *k;
	cJSON_ArrayForEach(k, s)
	{
		if (in_list(k->string, REFUSED))
			return fail(g, path, "'%s' is not supported", k->string);
		if (!strcmp(k->string, "uniqueItems") && cJSON_IsTrue(k))
			return fail(g, path, "'uniqueItems': true is not supported");
	}
	return 0;
}

static int
has_assertions(const cJSON *s, const char *except1, const char *except2)
{
	const cJSON *k;
	cJSON_ArrayForEach(k, s)
	{
		if (in_list(k->string, IGNORED) || !in_list(k->string, HANDLED))
			continue;
		if ((except1 && !strcmp(k->string, except1)) || (except2 && !strcmp(k->string, except2)))
			continue;
		if (!strcmp(k->string, "uniqueItems") || (!strcmp(k->string, "nullable") && !cJSON_IsTrue(k)))
			continue;
		return 1;
	}
	return 0;
}

// --- $ref ---------------------------------------------------------------------------

static const cJSON *
resolve(struct jsg *g, const char *ref, const char *path)
{
	if (ref[0] != '#') {
		fail(g, path, "'$ref' '%.64s': only references inside the schema (#...) are supported", ref);
		return NULL;
	}
	const cJSON *cur = g->doc;
	const char *p = ref + 1;
	if (*p && *p != '/') {
		fail(g, path, "'$ref' '%.64s': anchors are not supported, use a JSON pointer", ref);
		return NULL;
	}
	while (*p == '/') {
		p++;
		char tok[256];
		size_t n = 0;
		while (*p && *p != '/' && n + 1 < sizeof tok) {
			if (p[0] == '~' && p[1] == '0')
				tok[n++] = '~', p += 2;
			else if (p[0] == '~' && p[1] == '1')
				tok[n++] = '/', p += 2;
			else
				tok[n++] = *p++;
		}
		tok[n] = 0;
		if (cJSON_IsArray(cur)) {
			char *end;
			long i = strtol(tok, &end, 10);
			cur = *end || !n ? NULL : cJSON_GetArrayItem(cur, (int)i);
		} else {
			cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, tok) : NULL;
		}
		if (!cur) {
			fail(g, path, "'$ref' '%.64s' points at nothing", ref);
			return NULL;
		}
	}
	return cur;
}

// --- rules -----------------------------------------------------------------------------

static int rule_for(struct jsg *g, const cJSON *s, const char *path, char *name);
static int expr(struct jsg *g, const cJSON *s, const char *path, struct sbuf *out);

static int
memo_add(struct jsg *g, const cJSON *s, const char *name)
{
	if (g->n_memo == g->cap_memo) {
		int cap = g->cap_memo ? 2 * g->cap_memo : 32;
		struct memo *m = realloc(g->m, (size_t)cap * sizeof *m);
		if (!m)
			return -1;
		g->m = m;
		g->cap_memo = cap;
	}
	g->m[g->n_memo].node = s;
	snprintf(g->m[g->n_memo].name, sizeof g->m[g->n_memo].name, "%s", name);
	g->n_memo++;
	return 0;
}

// the rule of schema s (made now unless already made); its name into name
static int
rule_for(struct jsg *g, const cJSON *s, const char *path, char *name)
{
	for (int i = 0; i < g->n_memo; i++)
		if (g->m[i].node == s) {
			strcpy(name, g->m[i].name);
			return 0;
		}
	if (g->depth >= JSG_MAX_DEPTH)
		return fail(g, path, "nested deeper than %d", JSG_MAX_DEPTH);
	snprintf(name, 80, "%.40s-%d", g->base, ++g->counter);
	if (memo_add(g, s, name))
		return fail(g, path, "out of memory");
	struct sbuf e = {0};
	g->depth++;
	int rv = expr(g, s, path, &e);
	g->depth--;
	if (!rv) {
		sbuf_printf(&g->rules, "%s ::= %s\n", name, e.s ? e.s : "\"\"");
		if (e.oom || g->rules.oom)
			rv = fail(g, path, "out of memory");
		else if (g->rules.n > JSG_MAX_TEXT)
			rv = fail(g, path, "the grammar would be larger than %d bytes", JSG_MAX_TEXT);
	}
	free(e.s);
	return rv;
}

static int
ref_to(struct jsg *g, const cJSON *s, const char *path, struct sbuf *out)
{
	char name[80];
	if (rule_for(g, s, path, name))
		return -1;
	sbuf_str(out, name);
	return 0;
}

// whether s is valid UTF-8 (cJSON reads strings that are not)
static int
utf8_valid(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	while (*u) {
		int n = u[0] < 0x80                   ? 1
		        : u[0] >= 0xc2 && u[0] < 0xe0 ? 2
		        : u[0] >= 0xe0 && u[0] < 0xf0 ? 3
		        : u[0] >= 0xf0 && u[0] < 0xf5 ? 4
		                                      : 0;
		if (!n)
			return 0;
		uint32_t c = n == 1 ? u[0] : u[0] & (0x7f >> n);
		for (int i = 1; i < n; i++) {
			if ((u[i] & 0xc0) != 0x80)
				return 0;
			c = c << 6 | (u[i] & 0x3f);
		}
		static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
		if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
			return 0;
		u += n;
	}
	return 1;
}

// the compact JSON text of v as a literal
static int
json_lit(struct jsg *g, const cJSON *v, const char *path, struct sbuf *out)
{
	char *j = cJSON_PrintUnformatted(v);
	if (!j)
		return fail(g, path, "out of memory");
	if (!utf8_valid(j)) {
		free(j);
		return fail(g, path, "a value of 'const' or 'enum' is not valid UTF-8");
	}
	lit(out, j, strlen(j));
	free(j);
	return 0;
}

// --- integers and numbers ----------------------------------------------------------------

#define MAX_INT 999999999999999.0 // 15 digits: the bounds handled exactly

// naturals of the same number of digits in [a, b] (decimal strings)
static void
same_len(struct sbuf *o, const char *a, const char *b, size_t n)
{
	if (n == 0) {
		sbuf_str(o, "\"\"");
		return;
	}
	if (!memcmp(a, b, n)) {
		lit(o, a, n);
		return;
	}
	if (a[0] == b[0]) {
		sbuf_printf(o, "\"%c\" ", a[0]);
		same_len(o, a + 1, b + 1, n - 1);
		return;
	}
	char nines[32], zeros[32];
	memset(nines, '9', sizeof nines);
	memset(zeros, '0', sizeof zeros);
	int a_low = !memcmp(a + 1, zeros, n - 1), b_high = !memcmp(b + 1, nines, n - 1);
	char lo = a_low ? a[0] : (char)(a[0] + 1), hi = b_high ? b[0] : (char)(b[0] - 1);
	int first = 1;
	sbuf_str(o, "(");
	if (!a_low) {
		sbuf_printf(o, "\"%c\" (", a[0]);
		same_len(o, a + 1, nines, n - 1);
		sbuf_str(o, ")");
		first = 0;
	}
	if (lo <= hi) {
		sbuf_printf(o, "%s[%c-%c]", first ? "" : " | ", lo, hi);
		if (n > 1)
			sbuf_printf(o, " [0-9]{%zu}", n - 1);
		first = 0;
	}
	if (!b_high) {
		sbuf_printf(o, "%s\"%c\" (", first ? "" : " | ", b[0]);
		same_len(o, zeros, b + 1, n - 1);
		sbuf_str(o, ")");
	}
	sbuf_str(o, ")");
}

// naturals in [a, b] without leading zeros; b < 0: no upper bound (up to
// 16 digits, as json-integer)
static void
nat_range(struct sbuf *o, long long a, long long b)
{
	char as[32], bs[32];
	int la = snprintf(as, sizeof as, "%lld", a), lb = b >= 0 ? snprintf(bs, sizeof bs, "%lld", b) : la;
	sbuf_str(o, "(");
	for (int d = la; d <= lb; d++) {
		char lo[32], hi[32];
		if (d == la)
			memcpy(lo, as, (size_t)d);
		else
			lo[0] = '1', memset(lo + 1, '0', (size_t)d - 1);
		if (b >= 0 && d == lb)
			memcpy(hi, bs, (size_t)d);
		else
			memset(hi, '9', (size_t)d);
		if (d > la)
			sbuf_str(o, " | ");
		same_len(o, lo, hi, (size_t)d);
	}
	if (b < 0 && la < 16) // every longer natural
		sbuf_printf(o, " | [1-9] [0-9]{%d,15}", la);
	sbuf_str(o, ")");
}

// integers in [lo, hi] (has_lo/has_hi: bounded; the caller keeps lo <= hi)
static void
int_range(struct sbuf *o, int has_lo, long long lo, int has_hi, long long hi)
{
	int first = 1;
	sbuf_str(o, "(");
	if (!has_lo || lo < 0) { // negative: "-" and a magnitude in [max(1, -hi), -lo]
		sbuf_str(o, "\"-\" ");
		nat_range(o, has_hi && hi < 0 ? -hi : 1, has_lo ? -lo : -1);
		first = 0;
	}
	long long plo = has_lo && lo > 0 ? lo : 0;
	if (!has_hi || hi >= plo) {
		if (!first)
			sbuf_str(o, " | ");
		nat_range(o, plo, has_hi ? hi : -1);
	}
	sbuf_str(o, ")");
}

// the bound kw of s: 1 with its value when present (a number), 0 absent
static int
bound(struct jsg *g, const cJSON *s, const char *kw, const char *path, double *v)
{
	const cJSON *b = get(s, kw);
	if (!b)
		return 0;
	if (!cJSON_IsNumber(b) || !isfinite(b->valuedouble))
		return fail(g, path, "'%s' must be a number", kw), -1;
	*v = b->valuedouble;
	return 1;
}

// integer: exact bounds; number: bounds that are integers
static int
numeric(struct jsg *g, const cJSON *s, const char *path, int integer, struct sbuf *out)
{
	double mn = 0, mx = 0, xmn = 0, xmx = 0;
	int hmn = bound(g, s, "minimum", path, &mn), hmx = bound(g, s, "maximum", path, &mx);
	int hxmn = bound(g, s, "exclusiveMinimum", path, &xmn), hxmx = bound(g, s, "exclusiveMaximum", path, &xmx);
	if (hmn < 0 || hmx < 0 || hxmn < 0 || hxmx < 0)
		return -1;
	if (!hmn && !hmx && !hxmn && !hxmx) {
		g->used |= integer ? U_INTEGER : U_NUMBER;
		sbuf_str(out, integer ? "json-integer" : "json-number");
		return 0;
	}
	// the effective bounds: lo (excl: lo is left out), hi (excl)
	int has_lo = hmn || hxmn, has_hi = hmx || hxmx, lo_x = 0, hi_x = 0;
	double lo = -INFINITY, hi = INFINITY;
	if (hmn)
		lo = mn;
	if (hxmn && (!hmn || xmn >= mn))
		lo = xmn, lo_x = 1;
	if (hmx)
		hi = mx;
	if (hxmx && (!hmx || xmx <= mx))
		hi = xmx, hi_x = 1;
	if ((has_lo && fabs(lo) > MAX_INT) || (has_hi && fabs(hi) > MAX_INT))
		return fail(g, path, "bounds beyond +-%.0f are not supported", MAX_INT);
	if (integer) {
		long long a = has_lo ? (long long)ceil(lo) : 0, b = has_hi ? (long long)floor(hi) : 0; // no cast of inf
		if (has_lo && lo_x && (double)a == lo)
			a++;
		if (has_hi && hi_x && (double)b == hi)
			b--;
		if (has_lo && has_hi && a > b)
			return fail(g, path, "no integer lies between the bounds");
		int_range(out, has_lo, a, has_hi, b);
		return 0;
	}
	if ((has_lo && lo != floor(lo)) || (has_hi && hi != floor(hi)))
		return fail(g, path,
		            "bounds of a number that are not integers are not supported (use integer bounds, or "
		            "type integer)");
	if (has_lo && has_hi && (lo > hi || (lo == hi && (lo_x || hi_x))))
		return fail(g, path, "no number lies between the bounds");
	// x = sign (i + f): per sign, the integer parts i with any fraction, and
	// the edges: a fraction of zeros only at an inclusive top, a non-zero
	// fraction only at an exclusive (or zero, for negatives) bottom
	g->used |= U_FRAC;
	struct sbuf alt = {0};
	int n_alt = 0;
	for (int neg = 0; neg < 2; neg++) {
		// the magnitudes m in [A, B] this sign covers (a_x, b_x: exclusive)
		int a_x, b_x, b_inf;
		long long A, B;
		if (!neg) {
			if (has_hi && (hi < 0 || (hi == 0 && hi_x)))
				continue;
			A = has_lo && lo > 0 ? (long long)lo : 0;
			a_x = has_lo && lo >= 0 && lo_x;
			b_inf = !has_hi;
			B = has_hi ? (long long)hi : 0;
			b_x = hi_x;
		} else {
			if (has_lo && lo >= 0)
				continue;
			A = has_hi && hi < 0 ? (long long)-hi : 0;
			a_x = has_hi && hi < 0 ? hi_x : 1; // m > 0: "-0" is not a negative number
			b_inf = !has_lo;
			B = has_lo ? (long long)-lo : 0;
			b_x = lo_x;
		}
		long long start = A;
		struct sbuf one = {0};
		int n_one = 0;
		if (a_x && (b_inf || A < B)) { // i = A with a non-zero fraction
			int_range(&one, 1, A, 1, A);
			sbuf_str(&one, " json-frac-nz");
			n_one++;
			start = A + 1;
		} else if (a_x) {
			start = A + 1;
		}
		if (b_inf || start <= B - 1) {
			if (n_one++)
				sbuf_str(&one, " | ");
			int_range(&one, 1, start, !b_inf, B - 1);
			sbuf_str(&one, " json-frac?");
		}
		if (!b_inf && !b_x && B >= start && !(neg && B == 0)) {
			if (n_one++)
				sbuf_str(&one, " | ");
			int_range(&one, 1, B, 1, B);
			sbuf_str(&one, " json-frac-zero?");
		}
		if (n_one) {
			if (n_alt++)
				sbuf_str(&alt, " | ");
			sbuf_printf(&alt, "%s(%s)", neg ? "\"-\" " : "", one.s);
		}
		free(one.s);
	}
	if (!n_alt) {
		free(alt.s);
		return fail(g, path, "no number lies between the bounds");
	}
	sbuf_printf(out, "(%s)", alt.s);
	free(alt.s);
	return alt.oom ? fail(g, path, "out of memory") : 0;
}

// --- strings -------------------------------------------------------------------------------

static int
count(struct jsg *g, const cJSON *s, const char *kw, const char *path, long *v)
{
	const cJSON *b = get(s, kw);
	if (!b)
		return 0;
	if (!cJSON_IsNumber(b) || b->valuedouble < 0 || b->valuedouble != floor(b->valuedouble) || b->valuedouble > 1e9)
		return fail(g, path, "'%s' must be a non-negative integer", kw), -1;
	*v = (long)b->valuedouble;
	return 1;
}

static int
string(struct jsg *g, const cJSON *s, const char *path, struct sbuf *out)
{
	long mn = 0, mx = -1;
	int hmn = count(g, s, "minLength", path, &mn), hmx = count(g, s, "maxLength", path, &mx);
	if (hmn < 0 || hmx < 0)
		return -1;
	const cJSON *f = get(s, "format");
	if (f) {
		if (!cJSON_IsString(f))
			return fail(g, path, "'format' must be a string");
		if (hmn || hmx)
			return fail(g, path, "'minLength'/'maxLength' beside 'format' are not supported");
		const char *fs = f->valuestring;
		if (!strcmp(fs, "date")) {
			g->used |= U_DATE;
			sbuf_str(out, "\"\\\"\" json-date \"\\\"\"");
		} else if (!strcmp(fs, "time")) {
			g->used |= U_TIME;
			sbuf_str(out, "\"\\\"\" json-time \"\\\"\"");
		} else if (!strcmp(fs, "date-time")) {
			g->used |= U_DATE | U_TIME;
			sbuf_str(out, "\"\\\"\" json-date \"T\" json-time \"\\\"\"");
		} else if (!strcmp(fs, "uuid")) {
			sbuf_str(out,
			         "\"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
			         "[0-9a-f]{12} \"\\\"\"");
		} else if (!strcmp(fs, "email")) {
			g->used |= U_LABEL;
			sbuf_str(out,
			         "\"\\\"\" [a-zA-Z0-9_+-]{1,16} (\".\" [a-zA-Z0-9_+-]{1,16}){0,3} \"@\" json-label "
			         "(\".\" json-label){1,4} \"\\\"\"");
		} else if (!strcmp(fs, "hostname")) {
			g->used |= U_LABEL;
			sbuf_str(out, "\"\\\"\" json-label (\".\" json-label){0,6} \"\\\"\"");
		} else if (!strcmp(fs, "uri")) {
			g->used |= U_LABEL;
			sbuf_str(out, "\"\\\"\" \"http\" \"s\"? \"://\" json-label (\".\" json-label){1,6} (\"/\" "
			              "[a-zA-Z0-9._~-]{0,32}){0,8} \"\\\"\"");
		} else if (!strcmp(fs, "ipv4")) {
			g->used |= U_OCTET;
			sbuf_str(out,
			         "\"\\\"\" json-octet \".\" json-octet \".\" json-octet \".\" json-octet \"\\\"\"");
		} else {
			return fail(g, path,
			            "'format': '%.32s' is not supported (date, time, date-time, uuid, email, uri, "
			            "hostname, ipv4)",
			            fs);
		}
		return 0;
	}
	if (hmn && hmx && mn > mx)
		return fail(g, path, "'minLength' %ld is above 'maxLength' %ld", mn, mx);
	if (mn > 10000 || mx > 10000)
		return fail(g, path, "string lengths above 10000 are not supported");
	if (!hmn && !hmx) {
		g->used |= U_STRING;
		sbuf_str(out, "json-string");
		return 0;
	}
	g->used |= U_CHAR;
	if (hmx)
		sbuf_printf(out, "\"\\\"\" json-char{%ld,%ld} \"\\\"\"", mn, mx);
	else
		sbuf_printf(out, "\"\\\"\" json-char{%ld,} \"\\\"\"", mn);
	return 0;
}

// --- objects and arrays -------------------------------------------------------------------

struct prop {
	const char *key;
	const cJSON *schema;
	int required;
};

static int
in_required(const cJSON *req, const char *k)
{
	const cJSON *r;
	cJSON_ArrayForEach(r, req)
	{
		if (cJSON_IsString(r) && !strcmp(r->valuestring, k))
			return 1;
	}
	return 0;
}

// one strict UTF-8 character of s: its length, 0 when invalid
static int
utf8_len(const unsigned char *s)
{
	int n = s[0] < 0x80                   ? 1
	        : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
	        : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
	        : s[0] >= 0xf0 && s[0] < 0xf5 ? 4
	                                      : 0;
	for (int i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	return n;
}

// a character that JSON writes as itself (no escape)
static int
plain(const unsigned char *c)
{
	return *c >= 0x20 && *c != '"' && *c != '\\' && *c != 0x7f;
}

// the text of a key, after its opening quote, that is none of the keys of
// p[0..n) and has no escapes (an escape could spell a declared key): a
// trie of the keys, one rule per node (so long keys nest no groups), each
// closing the key where no key ends there, leaving the trie with any other
// character, or going on to a child; name gets the node's rule
static int
not_keys(struct jsg *g, const struct prop *p, int n, const char *prefix, size_t plen, const char *path, char *name,
         int depth)
{
	const char *next[64];
	int nlen[64], n_next = 0, ends = 0;
	if (depth > 256)
		return fail(g, path, "a property name longer than 256 characters beside additional properties");
	for (int i = 0; i < n; i++) {
		const unsigned char *k = (const unsigned char *)p[i].key;
		if (strncmp((const char *)k, prefix, plen) != 0)
			continue;
		int bad = 0;
		for (const unsigned char *c = k; *c && !bad; c++)
			bad = !plain(c);
		if (bad) // written with an escape: no key without escapes equals it
			continue;
		if (k[plen] == 0) {
			ends = 1;
			continue;
		}
		int l = utf8_len(k + plen);
		if (!l)
			return fail(g, path, "property '%.64s' is not valid UTF-8", p[i].key);
		int seen = 0;
		for (int j = 0; j < n_next; j++)
			seen |= nlen[j] == l && !memcmp(next[j], k + plen, (size_t)l);
		if (!seen) {
			if (n_next == 64)
				return fail(g, path,
				            "more than 64 property names share a prefix beside additional properties");
			next[n_next] = (const char *)k + plen;
			nlen[n_next++] = l;
		}
	}
	g->used |= U_KCHAR;
	struct sbuf out = {0};
	if (!ends)
		sbuf_str(&out, "\"\\\"\" | ");
	sbuf_str(&out, "[^\"\\\\\\x7F\\x00-\\x1F");
	for (int j = 0; j < n_next; j++) {
		unsigned char c = (unsigned char)next[j][0];
		if (nlen[j] == 1 && (c == ']' || c == '[' || c == '^' || c == '-'))
			sbuf_printf(&out, "\\x%02X", c);
		else
			sbuf_add(&out, next[j], (size_t)nlen[j]);
	}
	sbuf_str(&out, "] json-kchar* \"\\\"\"");
	for (int j = 0; j < n_next; j++) {
		char np[1100], child[80]; // 256 characters of 4 bytes at most
		if (plen + (size_t)nlen[j] >= sizeof np) {
			free(out.s);
			return fail(g, path, "a property name longer than 1024 bytes beside additional properties");
		}
		memcpy(np, prefix, plen);
		memcpy(np + plen, next[j], (size_t)nlen[j]);
		if (not_keys(g, p, n, np, plen + (size_t)nlen[j], path, child, depth + 1)) {
			free(out.s);
			return -1;
		}
		sbuf_str(&out, " | ");
		lit(&out, next[j], (size_t)nlen[j]);
		sbuf_printf(&out, " %s", child);
	}
	snprintf(name, 80, "%.40s-%d", g->base, ++g->counter);
	sbuf_printf(&g->rules, "%s ::= %s\n", name, out.s ? out.s : "\"\"");
	int oom = out.oom;
	free(out.s);
	return oom ? fail(g, path, "out of memory") : 0;
}

static int
object(struct jsg *g, const cJSON *s, const char *path, struct sbuf *out)
{
	const cJSON *props = get(s, "properties"), *req = get(s, "required"), *add = get(s, "additionalProperties");
	if (props && !cJSON_IsObject(props))
		return fail(g, path, "'properties' must be an object");
	if (req && !cJSON_IsArray(req))
		return fail(g, path, "'required' must be an array of strings");
	const cJSON *r;
	cJSON_ArrayForEach(r, req)
	{
		if (!cJSON_IsString(r))
			return fail(g, path, "'required' must be an array of strings");
	}
	if (add && !cJSON_IsBool(add) && !cJSON_IsObject(add))
		return fail(g, path, "'additionalProperties' must be a boolean or a schema");
	int n = (props ? cJSON_GetArraySize(props) : 0) + (req ? cJSON_GetArraySize(req) : 0);
	struct prop *p = calloc((size_t)(n ? n : 1), sizeof *p);
	if (!p)
		return fail(g, path, "out of memory");
	int np = 0;
	const cJSON *kv;
	cJSON_ArrayForEach(kv, props)
	{
		if (!utf8_valid(kv->string)) {
			free(p);
			return fail(g, path, "a property name is not valid UTF-8");
		}
		p[np++] = (struct prop){kv->string, kv, in_required(req, kv->string)};
	}
	static const cJSON any = {.type = cJSON_True};
	cJSON_ArrayForEach(r, req) // required keys without a schema: any value
	{
		if (!utf8_valid(r->valuestring)) {
			free(p);
			return fail(g, path, "a name in 'required' is not valid UTF-8");
		}
		int found = 0;
		for (int i = 0; i < np; i++)
			found |= !strcmp(p[i].key, r->valuestring);
		if (!found)
			p[np++] = (struct prop){r->valuestring, &any, 1};
	}
	// free-form: no properties, additional ones allowed
	int extra = add ? !cJSON_IsFalse(add) : np == 0;
	const cJSON *extra_schema = add && cJSON_IsObject(add) ? add : NULL;
	g->used |= U_WS;
	char **names = calloc((size_t)(np ? np : 1), sizeof *names);
	int rv = 0;
	for (int i = 0; i < np && !rv; i++) {
		char pp[512];
		snprintf(pp, sizeof pp, "%.400s.properties.%.80s", path, p[i].key);
		names[i] = malloc(80);
		if (!names[i] || rule_for(g, p[i].schema, pp, names[i]))
			rv = -1;
	}
	// the extra key-value rule
	char xkv[80] = "";
	if (!rv && extra) {
		char vname[80] = "json-value";
		char pp[512];
		snprintf(pp, sizeof pp, "%.400s.additionalProperties", path);
		if (extra_schema) {
			if (rule_for(g, extra_schema, pp, vname))
				rv = -1;
		} else {
			g->used |= U_VALUE;
		}
		struct sbuf k = {0};
		if (!rv && np) {
			char root[80];
			if (!(rv = not_keys(g, p, np, "", 0, path, root, 0)))
				sbuf_printf(&k, "\"\\\"\" %s", root);
		} else if (!rv) {
			g->used |= U_STRING;
			sbuf_str(&k, "json-string");
		}
		if (!rv) {
			snprintf(xkv, sizeof xkv, "%.40s-%d", g->base, ++g->counter);
			sbuf_printf(&g->rules, "%s ::= %s \":\" ws %s\n", xkv, k.s, vname);
		}
		free(k.s);
	}
	if (rv) {
		for (int i = 0; i < np; i++)
			free(names[i]);
		free(names);
		free(p);
		return -1;
	}
	// R_i: properties i.. with nothing written yet; S_i: i.. after one was
	// written (each with its comma); R_n / S_n: the extra properties
	char base[80];
	snprintf(base, sizeof base, "%.40s-%d", g->base, ++g->counter);
	for (int i = np; i >= 0; i--) {
		struct sbuf kvi = {0};
		if (i < np) { // the key as JSON writes it, as a literal
			cJSON *k = cJSON_CreateString(p[i].key);
			char *j = k ? cJSON_PrintUnformatted(k) : NULL;
			if (j)
				lit(&kvi, j, strlen(j));
			else
				kvi.oom = 1;
			free(j);
			cJSON_Delete(k);
			sbuf_printf(&kvi, " \":\" ws %s", names[i]);
		}
		if (i == np) {
			if (extra) {
				sbuf_printf(&g->rules, "%s-s%d ::= (\",\" ws %s)*\n", base, i, xkv);
				sbuf_printf(&g->rules, "%s-r%d ::= (%s (\",\" ws %s)*)?\n", base, i, xkv, xkv);
			} else {
				sbuf_printf(&g->rules, "%s-s%d ::= \"\"\n", base, i);
				sbuf_printf(&g->rules, "%s-r%d ::= \"\"\n", base, i);
			}
		} else if (p[i].required) {
			sbuf_printf(&g->rules, "%s-s%d ::= \",\" ws %s %s-s%d\n", base, i, kvi.s, base, i + 1);
			sbuf_printf(&g->rules, "%s-r%d ::= %s %s-s%d\n", base, i, kvi.s, base, i + 1);
		} else {
			sbuf_printf(&g->rules, "%s-s%d ::= (\",\" ws %s)? %s-s%d\n", base, i, kvi.s, base, i + 1);
			sbuf_printf(&g->rules, "%s-r%d ::= %s %s-s%d | %s-r%d\n", base, i, kvi.s, base, i + 1, base,
			            i + 1);
		}
		if (kvi.oom)
			g->rules.oom = 1;
		free(kvi.s);
	}
	sbuf_printf(out, "\"{\" ws %s-r0 ws \"}\"", base);
	for (int i = 0; i < np; i++)
		free(names[i]);
	free(names);
	free(p);
	return g->rules.oom ? fail(g, path, "out of memory") : 0;
}

static int
array(struct jsg *g, const cJSON *s, const char *path, struct sbuf *out)
{
	long mn = 0, mx = -1;
	int hmn = count(g, s, "minItems", path, &mn), hmx = count(g, s, "maxItems", path, &mx);
	if (hmn < 0 || hmx < 0)
		return -1;
	if (hmx && mn > mx)
		return fail(g, path, "'minItems' %ld is above 'maxItems' %ld", mn, mx);
	if (mn > 1000)
		return fail(g, path, "'minItems' above 1000 is not supported");
	if (hmx && mx > 1000)
		hmx = 0, mx = -1; // as good as unbounded for a reply
	const cJSON *items = get(s, "items"), *prefix = get(s, "prefixItems");
	if (items && cJSON_IsArray(items)) // draft 4-7 tuples
		prefix = items, items = get(s, "additionalItems");
	if (items && !cJSON_IsBool(items) && !cJSON_IsObject(items))
		return fail(g, path, "'items' must be a schema");
	if (prefix && !cJSON_IsArray(prefix))
		return fail(g, path, "'prefixItems' must be an array of schemas");
	int np = prefix ? cJSON_GetArraySize(prefix) : 0;
	int rest = !(items && cJSON_IsFalse(items));
	if (!rest && !hmx)
		mx = np, hmx = 1;
	if (!rest && mx > np)
		mx = np;
	if (hmx && mn > mx)
		return fail(g, path, "no array has between %ld and %ld items here", mn, mx);
	g->used |= U_WS;
	char item[80] = "json-value";
	if (rest) {
		char pp[512];
		snprintf(pp, sizeof pp, "%.400s.items", path);
		if (items && !cJSON_IsTrue(items)) {
			if (rule_for(g, items, pp, item))
				return -1;
		} else {
			g->used |= U_VALUE;
		}
	}
	char(*pn)[80] = calloc((size_t)(np ? np : 1), sizeof *pn);
	if (!pn)
		return fail(g, path, "out of memory");
	for (int i = 0; i < np; i++) {
		char pp[512];
		snprintf(pp, sizeof pp, "%.400s.prefixItems[%d]", path, i);
		if (rule_for(g, cJSON_GetArrayItem(prefix, i), pp, pn[i])) {
			free(pn);
			return -1;
		}
	}
	// the items from position i on (i > 0: each after a comma); nested
	// optional groups past minItems
	struct sbuf e = {0};
	sbuf_str(&e, "\"[\" ws ");
	int open = 0;
	long i = 0;
	for (; i < np && (!hmx || i < mx); i++) {
		if (i >= mn) {
			sbuf_str(&e, "(");
			open++;
		}
		if (i > 0)
			sbuf_str(&e, "\",\" ws ");
		sbuf_printf(&e, "%s ", pn[i]);
	}
	if (rest && (!hmx || i < mx)) {
		long lo = mn > i ? mn - i : 0, hi = hmx ? mx - i : -1;
		if (i == 0) { // the first item has no comma
			if (lo == 0) {
				sbuf_str(&e, "(");
				open++;
			}
			sbuf_printf(&e, "%s ", item);
			lo = lo ? lo - 1 : 0;
			hi = hi > 0 ? hi - 1 : hi;
		}
		if (hi < 0)
			sbuf_printf(&e, "(\",\" ws %s){%ld,} ", item, lo);
		else if (hi > 0)
			sbuf_printf(&e, "(\",\" ws %s){%ld,%ld} ", item, lo, hi);
	}
	for (; open > 0; open--)
		sbuf_str(&e, ")? ");
	sbuf_str(&e, "ws \"]\"");
	sbuf_str(out, e.s ? e.s : "");
	int oom = e.oom;
	free(e.s);
	free(pn);
	return oom ? fail(g, path, "out of memory") : 0;
}

// --- a schema ------------------------------------------------------------------------------

static int
typed(struct jsg *g, const cJSON *s, const char *type, const char *path, struct sbuf *out)
{
	if (!strcmp(type, "object"))
		return object(g, s, path, out);
	if (!strcmp(type, "array"))
		return array(g, s, path, out);
	if (!strcmp(type, "string"))
		return string(g, s, path, out);
	if (!strcmp(type, "integer"))
		return numeric(g, s, path, 1, out);
	if (!strcmp(type, "number"))
		return numeric(g, s, path, 0, out);
	if (!strcmp(type, "boolean")) {
		g->used |= U_BOOLEAN;
		sbuf_str(out, "json-boolean");
		return 0;
	}
	if (!strcmp(type, "null")) {
		g->used |= U_NULL;
		sbuf_str(out, "json-null");
		return 0;
	}
	return fail(g, path, "'type': '%.32s' is not a JSON Schema type", type);
}

// the type a schema without "type" implies by its keywords, or NULL (any)
static const char *
implied_type(const cJSON *s)
{
	if (get(s, "properties") || get(s, "required") || get(s, "additionalProperties"))
		return "object";
	if (get(s, "items") || get(s, "prefixItems") || get(s, "minItems") || get(s, "maxItems"))
		return "array";
	if (get(s, "minLength") || get(s, "maxLength") || get(s, "format"))
		return "string";
	if (get(s, "minimum") || get(s, "maximum") || get(s, "exclusiveMinimum") || get(s, "exclusiveMaximum"))
		return "number";
	return NULL;
}

// allOf of object schemas (through $ref too): one object with every property
static int
all_of(struct jsg *g, const cJSON *s, const cJSON *all, const char *path, struct sbuf *out)
{
	cJSON *m = cJSON_CreateObject(), *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
	int rv = 0, closed = 0;
	if (!m || !props || !req) {
		cJSON_Delete(m);
		cJSON_Delete(props);
		cJSON_Delete(req);
		return fail(g, path, "out of memory");
	}
	cJSON_AddItemToObject(m, "type", cJSON_CreateString("object"));
	cJSON_AddItemToObject(m, "properties", props);
	cJSON_AddItemToObject(m, "required", req);
	int k = 0;
	const cJSON *part;
	cJSON_ArrayForEach(part, all)
	{
		char pp[512];
		snprintf(pp, sizeof pp, "%.400s.allOf[%d]", path, k++);
		const cJSON *x = part;
		for (int hops = 0; x && cJSON_IsObject(x) && get(x, "$ref") && hops < 16; hops++) {
			const cJSON *ref = get(x, "$ref");
			x = cJSON_IsString(ref) ? resolve(g, ref->valuestring, pp) : NULL;
		}
		if (g->failed) {
			rv = -1;
			break;
		}
		const cJSON *t = x ? get(x, "type") : NULL;
		if (!x || !cJSON_IsObject(x) || (t && (!cJSON_IsString(t) || strcmp(t->valuestring, "object"))) ||
		    get(x, "anyOf") || get(x, "oneOf") || get(x, "allOf") || get(x, "enum") || get(x, "const")) {
			rv = fail(g, pp, "'allOf' is supported for object schemas only");
			break;
		}
		if (check_keywords(g, x, pp)) {
			rv = -1;
			break;
		}
		const cJSON *kv, *r, *xp = get(x, "properties"), *xr = get(x, "required");
		if ((xp && !cJSON_IsObject(xp)) || (xr && !cJSON_IsArray(xr))) {
			rv = fail(g, pp, "'properties' must be an object and 'required' an array");
			break;
		}
		cJSON_ArrayForEach(kv, xp)
		{
			cJSON_DeleteItemFromObjectCaseSensitive(props, kv->string);
			cJSON *dup = cJSON_Duplicate(kv, 1);
			if (!dup || !cJSON_AddItemToObject(props, kv->string, dup)) {
				cJSON_Delete(dup);
				rv = fail(g, pp, "out of memory");
				break;
			}
		}
		if (rv)
			break;
		cJSON_ArrayForEach(r, xr)
		{
			if (cJSON_IsString(r) && !in_required(req, r->valuestring))
				cJSON_AddItemToArray(req, cJSON_CreateString(r->valuestring));
		}
		const cJSON *ap = get(x, "additionalProperties");
		if (ap && cJSON_IsFalse(ap))
			closed = 1;
	}
	(void)closed; // only the declared properties are produced either way
	if (!rv && !has_assertions(s, "allOf", NULL))
		rv = object(g, m, path, out);
	else if (!rv)
		rv = fail(g, path, "'allOf' beside other keywords is not supported");
	// the merged schema lives as long as the memo of this document (its
	// nodes' addresses must not be reused meanwhile)
	if (g->n_keep == 8 || !(g->keep[g->n_keep++] = m)) {
		cJSON_Delete(m);
		if (!rv)
			rv = fail(g, path, "more than 8 allOf merges in one schema");
	}
	return rv;
}

static int
expr(struct jsg *g, const cJSON *s, const char *path, struct sbuf *out)
{
	if (cJSON_IsTrue(s)) {
		g->used |= U_VALUE;
		sbuf_str(out, "json-value");
		return 0;
	}
	if (cJSON_IsFalse(s))
		return fail(g, path, "the schema false matches nothing");
	if (!cJSON_IsObject(s))
		return fail(g, path, "a schema must be an object or a boolean");
	if (check_keywords(g, s, path))
		return -1;
	const cJSON *ref = get(s, "$ref");
	if (ref) {
		if (!cJSON_IsString(ref))
			return fail(g, path, "'$ref' must be a string");
		if (has_assertions(s, "$ref", NULL))
			return fail(g, path, "'$ref' beside other keywords is not supported");
		const cJSON *t = resolve(g, ref->valuestring, path);
		if (!t)
			return -1;
		char pp[512];
		snprintf(pp, sizeof pp, "%.200s ($ref %.200s)", path, ref->valuestring);
		return ref_to(g, t, pp, out);
	}
	const cJSON *nullable = get(s, "nullable");
	int nul = nullable && cJSON_IsTrue(nullable);
	if (nul) {
		g->used |= U_NULL;
		sbuf_str(out, "(json-null | ");
	}
	int rv = 0;
	const cJSON *c = get(s, "const"), *en = get(s, "enum"), *any = get(s, "anyOf"), *one = get(s, "oneOf"),
		    *all = get(s, "allOf"), *type = get(s, "type");
	if (c || cJSON_GetObjectItemCaseSensitive(s, "const")) {
		if (!c) // const: null
			c = cJSON_GetObjectItemCaseSensitive(s, "const");
		rv = json_lit(g, c, path, out);
	} else if (en) {
		if (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0)
			return fail(g, path, "'enum' must be a non-empty array");
		sbuf_str(out, "(");
		const cJSON *v;
		int k = 0;
		cJSON_ArrayForEach(v, en)
		{
			if (k++)
				sbuf_str(out, " | ");
			if (json_lit(g, v, path, out))
				return -1;
		}
		sbuf_str(out, ")");
	} else if (any || one) {
		const cJSON *alts = any ? any : one;
		const char *kw = any ? "anyOf" : "oneOf";
		if (!cJSON_IsArray(alts) || cJSON_GetArraySize(alts) == 0)
			return fail(g, path, "'%s' must be a non-empty array of schemas", kw);
		if (any && one)
			return fail(g, path, "'anyOf' beside 'oneOf' is not supported");
		if (has_assertions(s, kw, "nullable"))
			return fail(g, path, "'%s' beside other keywords is not supported", kw);
		sbuf_str(out, "(");
		const cJSON *v;
		int k = 0;
		cJSON_ArrayForEach(v, alts)
		{
			char pp[512];
			snprintf(pp, sizeof pp, "%.400s.%s[%d]", path, kw, k);
			if (k++)
				sbuf_str(out, " | ");
			if (ref_to(g, v, pp, out))
				return -1;
		}
		sbuf_str(out, ")");
	} else if (all) {
		if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) == 0)
			return fail(g, path, "'allOf' must be a non-empty array of schemas");
		rv = all_of(g, s, all, path, out);
	} else if (type && cJSON_IsArray(type)) {
		int n = cJSON_GetArraySize(type), k = 0;
		if (n == 0)
			return fail(g, path, "'type' must not be an empty list");
		sbuf_str(out, "(");
		const cJSON *t;
		cJSON_ArrayForEach(t, type)
		{
			if (!cJSON_IsString(t))
				return fail(g, path, "'type' must be a string or a list of strings");
			if (k++)
				sbuf_str(out, " | ");
			if (typed(g, s, t->valuestring, path, out))
				return -1;
		}
		sbuf_str(out, ")");
	} else if (type) {
		if (!cJSON_IsString(type))
			return fail(g, path, "'type' must be a string or a list of strings");
		rv = typed(g, s, type->valuestring, path, out);
	} else {
		const char *t = implied_type(s);
		if (t) {
			rv = typed(g, s, t, path, out);
		} else {
			g->used |= U_VALUE;
			sbuf_str(out, "json-value");
		}
	}
	if (nul)
		sbuf_str(out, ")");
	return rv || out->oom ? (rv ? rv : fail(g, path, "out of memory")) : 0;
}

int
jsg_schema(struct jsg *g, const char *name, const cJSON *schema, const char *path, char *err)
{
	g->err = err;
	if (g->failed)
		return -1;
	g->doc = schema;
	g->base = name;
	g->depth = 0;
	struct sbuf e = {0};
	int rv = expr(g, schema, path, &e);
	if (!rv) {
		sbuf_printf(&g->rules, "%s ::= %s\n", name, e.s ? e.s : "\"\"");
		if (e.oom || g->rules.oom)
			rv = fail(g, path, "out of memory");
	}
	free(e.s);
	// nodes of this document must not match another's (pointers may be reused)
	g->n_memo = 0;
	for (int i = 0; i < g->n_keep; i++)
		cJSON_Delete(g->keep[i]);
	g->n_keep = 0;
	return rv;
}

static const struct {
	unsigned bit, needs;
	const char *rule;
} SHARED[] = {
	{U_WS, 0, "ws ::= | \" \" | \"\\n\" [ \\t]{0,12}"},
	{U_CHAR, 0, "json-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})"},
	{U_STRING, U_CHAR, "json-string ::= \"\\\"\" json-char* \"\\\"\""},
	{U_NUMBER, 0,
         "json-number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?"},
	{U_INTEGER, 0, "json-integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})"},
	{U_BOOLEAN, 0, "json-boolean ::= \"true\" | \"false\""},
	{U_NULL, 0, "json-null ::= \"null\""},
	{U_VALUE, U_WS | U_STRING | U_NUMBER | U_BOOLEAN | U_NULL,
         "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n"
         "json-object ::= \"{\" ws (json-string \":\" ws json-value (\",\" ws json-string \":\" ws "
         "json-value)* ws)? \"}\"\n"
         "json-array ::= \"[\" ws (json-value (\",\" ws json-value)* ws)? \"]\""},
	{U_FRAC, 0,
         "json-frac ::= \".\" [0-9]{1,16}\n"
         "json-frac-zero ::= \".\" \"0\"{1,16}\n"
         "json-frac-nz ::= \".\" \"0\"{0,15} [1-9] [0-9]{0,15}"},
	{U_DATE, 0,
         "json-date ::= [0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
         "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02\" \"-\" (\"0\" [1-9] | \"1\" [0-9] | "
         "\"2\" [0-8]))"},
	{U_TIME, 0,
         "json-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? (\"Z\" | "
         "[+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])"},
	{U_OCTET, 0, "json-octet ::= \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9]"},
	{U_LABEL, 0, "json-label ::= [a-zA-Z0-9] [a-zA-Z0-9]{0,19}"},
	{U_KCHAR, 0, "json-kchar ::= [^\"\\\\\\x7F\\x00-\\x1F]"},
};

char *
jsg_text(struct jsg *g, size_t *len, char *err)
{
	if (g->failed)
		return ad_err(err, "%s", "the grammar has failed"), NULL;
	unsigned used = g->used;
	for (int k = 0; k < 4; k++)
		for (size_t i = 0; i < sizeof SHARED / sizeof SHARED[0]; i++)
			if (used & SHARED[i].bit)
				used |= SHARED[i].needs;
	struct sbuf b = {0};
	sbuf_add(&b, g->rules.s ? g->rules.s : "", g->rules.n);
	for (size_t i = 0; i < sizeof SHARED / sizeof SHARED[0]; i++)
		if (used & SHARED[i].bit)
			sbuf_printf(&b, "%s\n", SHARED[i].rule);
	if (b.oom) {
		free(b.s);
		return ad_err(err, "out of memory"), NULL;
	}
	if (len)
		*len = b.n;
	return b.s;
}

char *
jsg_schema_gbnf(const cJSON *schema, const char *path, size_t *len, char *err)
{
	struct jsg *g = jsg_new();
	if (!g)
		return ad_err(err, "out of memory"), NULL;
	char *t = NULL;
	size_t n = 0;
	if (jsg_schema(g, "root", schema, path, err) == 0)
		t = jsg_text(g, &n, err);
	jsg_free(g);
	// what the rules cannot show one by one: a $ref that comes back to
	// itself before any value ({"$ref": "#"}, two $defs naming each
	// other) is a grammar without a first byte, which gbnf refuses
	struct gbnf *c = NULL;
	char e[AD_ERRLEN];
	if (t && gbnf_compile(t, n, NULL, NULL, NULL, &c, e)) {
		free(t);
		if (strstr(e, "left recursion"))
			return ad_err(err,
			              "%s: '$ref' comes back to the schema it is in before any value (a schema may "
			              "refer to itself only inside an object or an array)",
			              path),
			       NULL;
		return ad_err(err, "%s: the schema's grammar: %.400s", path, e), NULL;
	}
	gbnf_free(c);
	if (t && len)
		*len = n;
	return t;
}
