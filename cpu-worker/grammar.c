// grammar.c - the grammar matcher: vocabulary trie, the fast state machine
// and its plain twin, lazy triggers, sampling; see grammar.h.
//
// A stack is a chain of nodes: node (pos, parent) reads "continue matching
// at grammar element pos; at the end of that alternative, continue with
// parent". Node 0 is the empty stack (the grammar has matched a whole
// string). The nodes a state holds always sit on a terminal (a byte set or a
// token element) or are node 0; expand() takes any (pos, parent) there,
// entering rules at the leftmost position and leaving finished alternatives,
// with a rule reference in tail position continuing straight to the parent
// (so x* keeps a constant depth). Left recursion is refused by gbnf_compile,
// so expansion ends; a visited set keeps ambiguous grammars from repeating
// work, and GRAM_MAX_WORK bounds it.

#include "grammar.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// --- the vocabulary ------------------------------------------------------------------

struct gram_vocab {
	int n_vocab;
	uint8_t *bytes;
	uint32_t *off, *len;
	// the trie in depth-first order; node 0 is the root (no byte)
	int n_nodes, max_depth;
	uint8_t *byte; // the edge into node i
	uint16_t *depth;
	int32_t *end;   // one past the last node of i's subtree
	int32_t *tok;   // a token whose bytes end at node i, -1 none
	int32_t *tnext; // per token: the next token with the same bytes, -1
};

struct ventry {
	const uint8_t *b;
	uint32_t len;
	int32_t id;
};

static int
cmp_ventry(const void *x, const void *y)
{
	const struct ventry *a = x, *b = y;
	uint32_t n = a->len < b->len ? a->len : b->len;
	int c = memcmp(a->b, b->b, n);
	if (c)
		return c;
	if (a->len != b->len)
		return a->len < b->len ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

void
gram_vocab_free(struct gram_vocab *v)
{
	if (!v)
		return;
	free(v->bytes);
	free(v->off);
	free(v->len);
	free(v->byte);
	free(v->depth);
	free(v->end);
	free(v->tok);
	free(v->tnext);
	free(v);
}

struct gram_vocab *
gram_vocab_new(int n_vocab, const char *const *bytes, const uint32_t *len, char *err)
{
	if (n_vocab < 1 || n_vocab > SAMPLE_MAX_VOCAB) {
		ad_err(err, "grammar: a vocabulary of %d tokens", n_vocab);
		return NULL;
	}
	struct gram_vocab *v = calloc(1, sizeof *v);
	if (!v) {
		ad_err(err, "grammar: out of memory");
		return NULL;
	}
	size_t n = (size_t)n_vocab, total = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t l = bytes[i] ? len[i] : 0;
		if (l > 65535) {
			ad_err(err, "grammar: token %zu has %u bytes", i, l);
			free(v);
			return NULL;
		}
		total += l;
	}
	v->n_vocab = n_vocab;
	v->bytes = malloc(total ? total : 1);
	v->off = malloc(n * sizeof *v->off);
	v->len = malloc(n * sizeof *v->len);
	v->tnext = malloc(n * sizeof *v->tnext);
	struct ventry *e = malloc(n * sizeof *e);
	size_t cap = total + 1;
	v->byte = malloc(cap);
	v->depth = malloc(cap * sizeof *v->depth);
	v->end = malloc(cap * sizeof *v->end);
	v->tok = malloc(cap * sizeof *v->tok);
	uint16_t *path = NULL;
	int32_t *pnode = malloc(65537 * sizeof *pnode);
	(void)path;
	if (!v->bytes || !v->off || !v->len || !v->tnext || !e || !v->byte || !v->depth || !v->end || !v->tok ||
	    !pnode) {
		free(e);
		free(pnode);
		gram_vocab_free(v);
		ad_err(err, "grammar: out of memory for a vocabulary of %d tokens", n_vocab);
		return NULL;
	}
	size_t at = 0, ne = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t l = bytes[i] ? len[i] : 0;
		v->off[i] = (uint32_t)at;
		v->len[i] = l;
		v->tnext[i] = -1;
		if (l) {
			memcpy(v->bytes + at, bytes[i], l);
			e[ne++] = (struct ventry){v->bytes + at, l, (int32_t)i};
		}
		at += l;
	}
	qsort(e, ne, sizeof *e, cmp_ventry);
	// depth-first order falls out of the sorted order: each entry shares its
	// longest common prefix with the one before, the rest are new nodes
	int nn = 1, cur = 0;
	v->byte[0] = 0;
	v->depth[0] = 0;
	v->tok[0] = -1;
	pnode[0] = 0;
	const struct ventry *prev = NULL;
	for (size_t i = 0; i < ne; i++) {
		uint32_t k = 0;
		if (prev)
			while (k < prev->len && k < e[i].len && prev->b[k] == e[i].b[k])
				k++;
		while (cur > (int)k) {
			v->end[pnode[cur]] = nn;
			cur--;
		}
		for (uint32_t d = k + 1; d <= e[i].len; d++) {
			v->byte[nn] = e[i].b[d - 1];
			v->depth[nn] = (uint16_t)d;
			v->tok[nn] = -1;
			pnode[d] = nn++;
			cur = (int)d;
		}
		int32_t node = pnode[e[i].len];
		v->tnext[e[i].id] = v->tok[node];
		v->tok[node] = e[i].id;
		if ((int)e[i].len > v->max_depth)
			v->max_depth = (int)e[i].len;
		prev = &e[i];
	}
	while (cur >= 0) {
		v->end[pnode[cur]] = nn;
		cur--;
	}
	v->n_nodes = nn;
	free(e);
	free(pnode);
	return v;
}

int
gram_vocab_size(const struct gram_vocab *v)
{
	return v->n_vocab;
}

int
gram_vocab_nodes(const struct gram_vocab *v)
{
	return v->n_nodes;
}

const uint8_t *
gram_vocab_bytes(const struct gram_vocab *v, int32_t id, uint32_t *len)
{
	*len = v->len[id];
	return v->bytes + v->off[id];
}

// --- growable arrays ------------------------------------------------------------------

static int
reserve(void **a, int *cap, int need, size_t size)
{
	if (need <= *cap)
		return 0;
	int c = *cap ? *cap : 64;
	while (c < need)
		c *= 2;
	void *t = realloc(*a, (size_t)c * size);
	if (!t)
		return -1;
	*a = t;
	*cap = c;
	return 0;
}

static inline int
in_set(const struct gbnf *g, uint32_t set, unsigned b)
{
	return g->set[set][b >> 3] >> (b & 7) & 1;
}

static inline int
is_terminal(unsigned op)
{
	return op == GBNF_SET || op == GBNF_TOKEN || op == GBNF_NOT_TOKEN;
}

static inline int
token_matches(struct gbnf_el e, int32_t id)
{
	return (e.op == GBNF_TOKEN && (int32_t)e.arg == id) || (e.op == GBNF_NOT_TOKEN && (int32_t)e.arg != id);
}

// --- the fast state machine ----------------------------------------------------------

enum { S_ACCEPT = 1, S_TOKENS = 2, S_ONLY_END = 4 };
#define T_UNKNOWN (-2)

struct dfa {
	const struct gbnf *g;
	// nodes
	int32_t *npos, *npar;
	int n_nodes, cap_npos, cap_npar;
	int32_t *nh; // hash of nodes: id, -1 empty
	int nhcap;
	// states: sorted node lists in pool
	int32_t *soff, *slen;
	uint8_t *sflag;
	int n_states, cap_soff, cap_slen, cap_sflag;
	int32_t *pool;
	int n_pool, cap_pool;
	int32_t *sh;
	int shcap;
	int32_t *trans; // 256 per state
	int cap_trans;
	// one transition's scratch
	int32_t *out;
	int n_out, cap_out;
	int64_t *work;
	int n_work, cap_work;
	uint64_t *vis; // visited (pos, parent) keys of this transition; ~0 empty
	int viscap, n_vis;
	int32_t *vlist; // the slots used, to clear them
	int cap_vlist;
	long steps;  // of this transition
	long budget; // left for this operation (gram_mask, gram_allows, ...)
	int failed;
	char err[AD_ERRLEN];
};

static void
dfa_free(struct dfa *d)
{
	free(d->npos);
	free(d->npar);
	free(d->nh);
	free(d->soff);
	free(d->slen);
	free(d->sflag);
	free(d->pool);
	free(d->sh);
	free(d->trans);
	free(d->out);
	free(d->work);
	free(d->vis);
	free(d->vlist);
	memset(d, 0, sizeof *d);
}

static int
dfa_fail(struct dfa *d, const char *msg)
{
	if (!d->failed) {
		d->failed = 1;
		snprintf(d->err, sizeof d->err, "%s", msg);
	}
	return -1;
}

static inline uint32_t
mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return (uint32_t)x;
}

static int
node_rehash(struct dfa *d, int cap)
{
	int32_t *h = malloc((size_t)cap * sizeof *h);
	if (!h)
		return -1;
	memset(h, 0xff, (size_t)cap * sizeof *h);
	for (int i = 1; i < d->n_nodes; i++) {
		uint32_t k = mix((uint64_t)(uint32_t)d->npos[i] << 32 | (uint32_t)d->npar[i]) & (uint32_t)(cap - 1);
		while (h[k] >= 0)
			k = (k + 1) & (uint32_t)(cap - 1);
		h[k] = i;
	}
	free(d->nh);
	d->nh = h;
	d->nhcap = cap;
	return 0;
}

// the id of node (pos, par), added when new; -1 when out of memory
static int32_t
node(struct dfa *d, int32_t pos, int32_t par)
{
	uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)par;
	uint32_t k = mix(key) & (uint32_t)(d->nhcap - 1);
	for (; d->nh[k] >= 0; k = (k + 1) & (uint32_t)(d->nhcap - 1)) {
		int32_t i = d->nh[k];
		if (d->npos[i] == pos && d->npar[i] == par)
			return i;
	}
	if (reserve((void **)&d->npos, &d->cap_npos, d->n_nodes + 1, sizeof *d->npos) ||
	    reserve((void **)&d->npar, &d->cap_npar, d->n_nodes + 1, sizeof *d->npar))
		return dfa_fail(d, "grammar: out of memory");
	int32_t id = d->n_nodes++;
	d->npos[id] = pos;
	d->npar[id] = par;
	d->nh[k] = id;
	if (d->n_nodes * 2 > d->nhcap && node_rehash(d, d->nhcap * 2))
		return dfa_fail(d, "grammar: out of memory");
	return id;
}

static int
visit(struct dfa *d, int32_t pos, int32_t par)
{
	uint64_t key = (uint64_t)(uint32_t)pos << 32 | (uint32_t)par;
	if ((d->n_vis + 1) * 2 > d->viscap) {
		int cap = d->viscap ? d->viscap * 2 : 1024;
		uint64_t *v = malloc((size_t)cap * sizeof *v);
		if (!v || reserve((void **)&d->vlist, &d->cap_vlist, cap, sizeof *d->vlist)) {
			free(v);
			return dfa_fail(d, "grammar: out of memory");
		}
		memset(v, 0xff, (size_t)cap * sizeof *v);
		int n = 0;
		for (int i = 0; i < d->n_vis; i++) {
			uint64_t x = d->vis[d->vlist[i]];
			uint32_t k = mix(x) & (uint32_t)(cap - 1);
			while (v[k] != ~(uint64_t)0)
				k = (k + 1) & (uint32_t)(cap - 1);
			v[k] = x;
			d->vlist[n++] = (int32_t)k;
		}
		free(d->vis);
		d->vis = v;
		d->viscap = cap;
	}
	uint32_t k = mix(key) & (uint32_t)(d->viscap - 1);
	for (; d->vis[k] != ~(uint64_t)0; k = (k + 1) & (uint32_t)(d->viscap - 1))
		if (d->vis[k] == key)
			return 0;
	d->vis[k] = key;
	d->vlist[d->n_vis++] = (int32_t)k;
	return 1;
}

static void
visit_reset(struct dfa *d)
{
	for (int i = 0; i < d->n_vis; i++)
		d->vis[d->vlist[i]] = ~(uint64_t)0;
	d->n_vis = 0;
	d->steps = 0;
}

static int
emit(struct dfa *d, int32_t id)
{
	if (reserve((void **)&d->out, &d->cap_out, d->n_out + 1, sizeof *d->out))
		return dfa_fail(d, "grammar: out of memory");
	d->out[d->n_out++] = id;
	return 0;
}

static int
push_work(struct dfa *d, int32_t pos, int32_t par)
{
	if (reserve((void **)&d->work, &d->cap_work, d->n_work + 1, sizeof *d->work))
		return dfa_fail(d, "grammar: out of memory");
	d->work[d->n_work++] = (int64_t)((uint64_t)(uint32_t)pos << 32 | (uint32_t)par);
	return 0;
}

// every terminal-topped stack (and the empty one) that continuing at pos,
// then par, can reach without consuming anything, into d->out
static int
expand(struct dfa *d, int32_t pos, int32_t par)
{
	const struct gbnf *g = d->g;
	if (push_work(d, pos, par))
		return -1;
	while (d->n_work) {
		uint64_t w = (uint64_t)d->work[--d->n_work];
		int32_t p = (int32_t)(w >> 32), q = (int32_t)(uint32_t)w;
		int v = visit(d, p, q);
		if (v < 0)
			return -1;
		if (!v)
			continue;
		if (++d->steps > GRAM_MAX_WORK)
			return dfa_fail(d,
			                "grammar: too ambiguous to follow (one byte needs more than 2^16 expansions)");
		if (--d->budget < 0)
			return dfa_fail(d,
			                "grammar: too ambiguous to follow (one token needs more than 2^22 expansions)");
		struct gbnf_el e = g->el[p];
		if (e.op == GBNF_END) {
			if (q == 0) {
				if (emit(d, 0))
					return -1;
			} else if (push_work(d, d->npos[q], d->npar[q])) {
				return -1;
			}
		} else if (is_terminal(e.op)) {
			int32_t id = node(d, p, q);
			if (id < 0 || emit(d, id))
				return -1;
		} else { // a rule: its alternatives, then what follows it
			int32_t cont = q;
			if (g->el[p + 1].op != GBNF_END && (cont = node(d, p + 1, q)) < 0)
				return -1;
			for (int a = g->rule_alt[e.arg + 1] - 1; a >= g->rule_alt[e.arg]; a--)
				if (push_work(d, g->alt[a], cont))
					return -1;
		}
	}
	return 0;
}

static int
cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

static uint32_t
hash_list(const int32_t *a, int n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)n;
	for (int i = 0; i < n; i++)
		h = (h ^ (uint32_t)a[i]) * 0x100000001b3ull;
	return mix(h);
}

static int
state_rehash(struct dfa *d, int cap)
{
	int32_t *h = malloc((size_t)cap * sizeof *h);
	if (!h)
		return -1;
	memset(h, 0xff, (size_t)cap * sizeof *h);
	for (int s = 0; s < d->n_states; s++) {
		uint32_t k = hash_list(d->pool + d->soff[s], d->slen[s]) & (uint32_t)(cap - 1);
		while (h[k] >= 0)
			k = (k + 1) & (uint32_t)(cap - 1);
		h[k] = s;
	}
	free(d->sh);
	d->sh = h;
	d->shcap = cap;
	return 0;
}

// the state of d->out (sorted and deduplicated here); -1 dead (empty), -2 failure
static int32_t
intern_out(struct dfa *d)
{
	if (d->n_out == 0)
		return -1;
	qsort(d->out, (size_t)d->n_out, sizeof *d->out, cmp_i32);
	int n = 1;
	for (int i = 1; i < d->n_out; i++)
		if (d->out[i] != d->out[n - 1])
			d->out[n++] = d->out[i];
	d->n_out = n;
	uint32_t k = hash_list(d->out, n) & (uint32_t)(d->shcap - 1);
	for (; d->sh[k] >= 0; k = (k + 1) & (uint32_t)(d->shcap - 1)) {
		int32_t s = d->sh[k];
		if (d->slen[s] == n && memcmp(d->pool + d->soff[s], d->out, (size_t)n * sizeof *d->out) == 0)
			return s;
	}
	int ns = d->n_states + 1;
	if (reserve((void **)&d->soff, &d->cap_soff, ns, sizeof *d->soff) ||
	    reserve((void **)&d->slen, &d->cap_slen, ns, sizeof *d->slen) ||
	    reserve((void **)&d->sflag, &d->cap_sflag, ns, 1) ||
	    reserve((void **)&d->trans, &d->cap_trans, ns * 256, sizeof *d->trans) ||
	    reserve((void **)&d->pool, &d->cap_pool, d->n_pool + n, sizeof *d->pool)) {
		dfa_fail(d, "grammar: out of memory");
		return -2;
	}
	int32_t s = d->n_states++;
	d->soff[s] = d->n_pool;
	d->slen[s] = n;
	memcpy(d->pool + d->n_pool, d->out, (size_t)n * sizeof *d->out);
	d->n_pool += n;
	uint8_t f = 0;
	for (int i = 0; i < n; i++) {
		if (d->out[i] == 0)
			f |= S_ACCEPT;
		else if (d->g->el[d->npos[d->out[i]]].op != GBNF_SET)
			f |= S_TOKENS;
	}
	if (n == 1 && d->out[0] == 0)
		f |= S_ONLY_END;
	d->sflag[s] = f;
	for (int b = 0; b < 256; b++)
		d->trans[(size_t)s * 256 + (size_t)b] = T_UNKNOWN;
	d->sh[k] = s;
	if (d->n_states * 2 > d->shcap && state_rehash(d, d->shcap * 2)) {
		dfa_fail(d, "grammar: out of memory");
		return -2;
	}
	return s;
}

static int
dfa_init(struct dfa *d, const struct gbnf *g)
{
	memset(d, 0, sizeof *d);
	d->g = g;
	d->nhcap = 1024;
	d->shcap = 256;
	d->nh = malloc((size_t)d->nhcap * sizeof *d->nh);
	d->sh = malloc((size_t)d->shcap * sizeof *d->sh);
	if (!d->nh || !d->sh || reserve((void **)&d->npos, &d->cap_npos, 64, sizeof *d->npos) ||
	    reserve((void **)&d->npar, &d->cap_npar, 64, sizeof *d->npar))
		return -1;
	memset(d->nh, 0xff, (size_t)d->nhcap * sizeof *d->nh);
	memset(d->sh, 0xff, (size_t)d->shcap * sizeof *d->sh);
	d->npos[0] = -1; // node 0: the empty stack
	d->npar[0] = -1;
	d->n_nodes = 1;
	return 0;
}

// the start state
static int32_t
dfa_start(struct dfa *d)
{
	const struct gbnf *g = d->g;
	d->n_out = 0;
	visit_reset(d);
	for (int a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++)
		if (expand(d, g->alt[a], 0))
			return -2;
	int32_t s = intern_out(d);
	return s == -1 ? -3 : s; // -3: a grammar that matches nothing at all
}

// the transition of state s on byte b: -1 dead, -2 failure
static int32_t
dfa_step_slow(struct dfa *d, int32_t s, unsigned b)
{
	const struct gbnf *g = d->g;
	d->n_out = 0;
	visit_reset(d);
	int n = d->slen[s];
	for (int i = 0; i < n; i++) {
		int32_t id = d->pool[d->soff[s] + i];
		if (id == 0)
			continue;
		struct gbnf_el e = g->el[d->npos[id]];
		if (e.op == GBNF_SET && in_set(g, e.arg, b) && expand(d, d->npos[id] + 1, d->npar[id]))
			return -2;
	}
	int32_t t = intern_out(d);
	if (t >= -1)
		d->trans[(size_t)s * 256 + b] = t;
	return t;
}

static inline int32_t
dfa_step(struct dfa *d, int32_t s, unsigned b)
{
	int32_t t = d->trans[(size_t)s * 256 + b];
	return t != T_UNKNOWN ? t : dfa_step_slow(d, s, b);
}

// state s after the bytes: -1 dead, -2 failure
static int32_t
dfa_walk(struct dfa *d, int32_t s, const uint8_t *b, uint32_t n)
{
	for (uint32_t i = 0; i < n && s >= 0; i++)
		s = dfa_step(d, s, b[i]);
	return s;
}

// state s after token id: its bytes, united with the stacks whose top is a
// token element it matches. -1 dead, -2 failure
static int32_t
dfa_token(struct dfa *d, int32_t s, int32_t id, const uint8_t *b, uint32_t n)
{
	int32_t by = n ? dfa_walk(d, s, b, n) : -1;
	if (by == -2 || !(d->sflag[s] & S_TOKENS))
		return by;
	const struct gbnf *g = d->g;
	d->n_out = 0;
	visit_reset(d);
	for (int i = 0; i < d->slen[s]; i++) {
		int32_t x = d->pool[d->soff[s] + i];
		if (x && token_matches(g->el[d->npos[x]], id) && expand(d, d->npos[x] + 1, d->npar[x]))
			return -2;
	}
	if (d->n_out == 0)
		return by;
	for (int i = 0; by >= 0 && i < d->slen[by]; i++)
		if (emit(d, d->pool[d->soff[by] + i]))
			return -2;
	int32_t t = intern_out(d);
	return t;
}

// a fresh machine holding only state s of *d (its stacks re-interned); *s
// becomes its id there
static int
dfa_rebase(struct dfa *d, int32_t *s)
{
	struct dfa n;
	if (dfa_init(&n, d->g) || (n.budget = GRAM_MAX_OP_WORK, 0)) {
		dfa_free(&n);
		return dfa_fail(d, "grammar: out of memory");
	}
	int32_t *chain = NULL;
	int cap = 0, rv = 0;
	for (int i = 0; i < d->slen[*s] && !rv; i++) {
		int k = 0;
		for (int32_t x = d->pool[d->soff[*s] + i]; x; x = d->npar[x]) {
			if (reserve((void **)&chain, &cap, k + 1, sizeof *chain)) {
				rv = -1;
				break;
			}
			chain[k++] = x;
		}
		int32_t id = 0;
		while (!rv && k > 0) {
			k--;
			if ((id = node(&n, d->npos[chain[k]], id)) < 0)
				rv = -1;
		}
		if (!rv && emit(&n, id))
			rv = -1;
	}
	free(chain);
	int32_t t = rv ? -2 : intern_out(&n);
	if (t < 0) {
		dfa_free(&n);
		return dfa_fail(d, "grammar: out of memory");
	}
	dfa_free(d);
	*d = n;
	*s = t;
	return 0;
}

// --- the plain twin: lists of stacks --------------------------------------------------

struct pstack {
	int32_t *a; // positions, the top last
	int n;
};

struct plain {
	struct pstack *s;
	int n, cap;
};

static void
plain_free(struct plain *p)
{
	for (int i = 0; i < p->n; i++)
		free(p->s[i].a);
	free(p->s);
	memset(p, 0, sizeof *p);
}

static int
pstack_eq(const struct pstack *a, const struct pstack *b)
{
	return a->n == b->n && (a->n == 0 || memcmp(a->a, b->a, (size_t)a->n * sizeof *a->a) == 0);
}

// add a copy of st (plus extra positions on top) unless already there; 1 added
static int
plain_add(struct plain *p, const int32_t *a, int n, const int32_t *extra, int n_extra)
{
	struct pstack t = {malloc((size_t)(n + n_extra + 1) * sizeof *t.a), n + n_extra};
	if (!t.a)
		return -1;
	if (n)
		memcpy(t.a, a, (size_t)n * sizeof *a);
	if (n_extra)
		memcpy(t.a + n, extra, (size_t)n_extra * sizeof *extra);
	for (int i = 0; i < p->n; i++)
		if (pstack_eq(&p->s[i], &t)) {
			free(t.a);
			return 0;
		}
	if (p->n >= GRAM_MAX_STACKS || reserve((void **)&p->s, &p->cap, p->n + 1, sizeof *p->s)) {
		free(t.a);
		return -1;
	}
	p->s[p->n++] = t;
	return 1;
}

// llama.cpp's advance_stack: the stacks a stack becomes once its top is a
// terminal (or it is empty), into out; *work counts the steps
static int
plain_advance(const struct gbnf *g, const int32_t *a, int n, struct plain *out, long *work)
{
	struct plain todo = {0}, seen = {0};
	int rv = 0;
	if (plain_add(&todo, a, n, NULL, 0) < 0)
		return -1;
	while (todo.n && !rv) {
		struct pstack cur = todo.s[--todo.n];
		int added = plain_add(&seen, cur.a, cur.n, NULL, 0);
		if (added < 0 || ++*work > GRAM_MAX_WORK) {
			rv = -1;
		} else if (added) {
			int32_t top = cur.n ? cur.a[cur.n - 1] : -1;
			if (top < 0 || is_terminal(g->el[top].op)) {
				rv = plain_add(out, cur.a, cur.n, NULL, 0) < 0 ? -1 : 0;
			} else {
				uint32_t r = g->el[top].arg;
				for (int k = g->rule_alt[r]; k < g->rule_alt[r + 1] && !rv; k++) {
					int32_t extra[2];
					int ne = 0;
					if (g->el[top + 1].op != GBNF_END)
						extra[ne++] = top + 1;
					if (g->el[g->alt[k]].op != GBNF_END)
						extra[ne++] = g->alt[k];
					rv = plain_add(&todo, cur.a, cur.n - 1, extra, ne) < 0 ? -1 : 0;
				}
			}
		}
		free(cur.a);
	}
	plain_free(&todo);
	plain_free(&seen);
	return rv;
}

// the stacks after a stack's terminal top at position top matched
static int
plain_after(const struct gbnf *g, const struct pstack *st, struct plain *out, long *work)
{
	int32_t top = st->a[st->n - 1];
	int32_t *t = malloc((size_t)(st->n + 1) * sizeof *t);
	if (!t)
		return -1;
	memcpy(t, st->a, (size_t)(st->n - 1) * sizeof *t);
	int n = st->n - 1;
	if (g->el[top + 1].op != GBNF_END)
		t[n++] = top + 1;
	int rv = plain_advance(g, t, n, out, work);
	free(t);
	return rv;
}

static int
plain_byte(const struct gbnf *g, const struct plain *in, unsigned b, struct plain *out, long *work)
{
	for (int i = 0; i < in->n; i++) {
		const struct pstack *st = &in->s[i];
		if (!st->n)
			continue;
		struct gbnf_el e = g->el[st->a[st->n - 1]];
		if (e.op == GBNF_SET && in_set(g, e.arg, b) && plain_after(g, st, out, work))
			return -1;
	}
	return 0;
}

// the stacks after token id (its bytes, or a token element it matches)
static int
plain_token(const struct gbnf *g, const struct plain *in, int32_t id, const uint8_t *b, uint32_t n, struct plain *out,
            long *work)
{
	for (int i = 0; i < in->n; i++) {
		const struct pstack *st = &in->s[i];
		if (st->n && token_matches(g->el[st->a[st->n - 1]], id) && plain_after(g, st, out, work))
			return -1;
	}
	if (!n)
		return 0;
	struct plain cur = {0}, next = {0};
	for (int i = 0; i < in->n; i++)
		if (plain_add(&cur, in->s[i].a, in->s[i].n, NULL, 0) < 0) {
			plain_free(&cur);
			return -1;
		}
	for (uint32_t k = 0; k < n && cur.n; k++) {
		if (plain_byte(g, &cur, b[k], &next, work)) {
			plain_free(&cur);
			plain_free(&next);
			return -1;
		}
		plain_free(&cur);
		cur = next;
		memset(&next, 0, sizeof next);
	}
	for (int i = 0; i < cur.n; i++)
		if (plain_add(out, cur.s[i].a, cur.s[i].n, NULL, 0) < 0) {
			plain_free(&cur);
			return -1;
		}
	plain_free(&cur);
	return 0;
}

static int
plain_accepts(const struct plain *p)
{
	for (int i = 0; i < p->n; i++)
		if (p->s[i].n == 0)
			return 1;
	return 0;
}

// --- the gram ---------------------------------------------------------------------------

#define MASK_CACHE 8

struct gram {
	const struct gbnf *g;
	const struct gram_vocab *v;
	int32_t stop[GRAM_MAX_STOP];
	int n_stop;
	int ref, no_cache, max_states;
	int lazy, on, finished;
	// triggers
	char *words[GRAM_MAX_TRIGGERS];
	size_t wlen[GRAM_MAX_TRIGGERS];
	int n_words, max_word;
	int32_t trig[GRAM_MAX_TRIGGERS];
	int n_trig;
	uint8_t *tail; // the last bytes of the text while waiting
	size_t n_tail, cap_tail;
	uint64_t produced; // bytes of text so far
	int trig_now;
	uint32_t trig_at;
	// fast
	struct dfa d;
	int32_t cur;
	int32_t *st; // the trie walk's states by depth
	uint64_t *cmask[MASK_CACHE];
	int32_t cstate[MASK_CACHE];
	int ccount[MASK_CACHE];
	uint64_t cused[MASK_CACHE], clock;
	// ref
	struct plain pcur;
	struct gram_stats stats;
};

static int
is_stop(const struct gram *m, int32_t id)
{
	for (int i = 0; i < m->n_stop; i++)
		if (m->stop[i] == id)
			return 1;
	return 0;
}

static int
failed(struct gram *m, char *err)
{
	return ad_err(err, "%s", m->d.err[0] ? m->d.err : "grammar: out of memory");
}

void
gram_free(struct gram *m)
{
	if (!m)
		return;
	for (int i = 0; i < m->n_words; i++)
		free(m->words[i]);
	free(m->tail);
	dfa_free(&m->d);
	free(m->st);
	for (int i = 0; i < MASK_CACHE; i++)
		free(m->cmask[i]);
	plain_free(&m->pcur);
	free(m);
}

// the start: the fast machine's start state, or the plain start stacks
static int
restart(struct gram *m, char *err)
{
	const struct gbnf *g = m->g;
	if (m->ref) {
		plain_free(&m->pcur);
		long work = 0;
		for (int a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
			int32_t p = g->alt[a];
			int empty = g->el[p].op == GBNF_END;
			if (plain_advance(g, &p, empty ? 0 : 1, &m->pcur, &work))
				return ad_err(err, "grammar: too ambiguous to follow, or out of memory");
		}
		if (!m->pcur.n)
			return ad_err(err, "grammar: it matches no text at all");
		return 0;
	}
	m->d.budget = GRAM_MAX_OP_WORK;
	int32_t s = dfa_start(&m->d);
	if (s == -3)
		return ad_err(err, "grammar: it matches no text at all");
	if (s < 0)
		return failed(m, err);
	m->cur = s;
	return 0;
}

struct gram *
gram_new(const struct gram_opts *o, char *err)
{
	const struct gbnf *g = o->g;
	if (!g || !o->v) {
		ad_err(err, "grammar: no grammar or no vocabulary");
		return NULL;
	}
	if (g->n_unresolved) {
		ad_err(err, "grammar: %d <text> tokens are not resolved", g->n_unresolved);
		return NULL;
	}
	for (int i = 0; i < g->n_el; i++)
		if ((g->el[i].op == GBNF_TOKEN || g->el[i].op == GBNF_NOT_TOKEN) &&
		    (int)g->el[i].arg >= o->v->n_vocab) {
			ad_err(err, "grammar: token <[%u]> is outside the vocabulary of %d", g->el[i].arg,
			       o->v->n_vocab);
			return NULL;
		}
	if (o->n_stop < 0 || o->n_stop > GRAM_MAX_STOP || o->n_words < 0 || o->n_words > GRAM_MAX_TRIGGERS ||
	    o->n_trigger_ids < 0 || o->n_trigger_ids > GRAM_MAX_TRIGGERS) {
		ad_err(err, "grammar: at most %d stop ids and %d trigger words and %d trigger tokens", GRAM_MAX_STOP,
		       GRAM_MAX_TRIGGERS, GRAM_MAX_TRIGGERS);
		return NULL;
	}
	if (o->lazy && o->n_words + o->n_trigger_ids == 0) {
		ad_err(err, "grammar: a lazy grammar needs a trigger word or token");
		return NULL;
	}
	struct gram *m = calloc(1, sizeof *m);
	if (!m) {
		ad_err(err, "grammar: out of memory");
		return NULL;
	}
	m->g = g;
	m->v = o->v;
	m->ref = o->ref;
	m->no_cache = o->no_cache;
	m->max_states = o->max_states > 0 && o->max_states < GRAM_MAX_STATES ? o->max_states : GRAM_MAX_STATES;
	m->lazy = o->lazy;
	m->on = !o->lazy;
	m->n_stop = o->n_stop;
	for (int i = 0; i < o->n_stop; i++)
		m->stop[i] = o->stop[i];
	for (int i = 0; i < o->n_trigger_ids; i++) {
		if (o->trigger_ids[i] < 0 || o->trigger_ids[i] >= o->v->n_vocab) {
			ad_err(err, "grammar: trigger token %d is outside the vocabulary of %d", o->trigger_ids[i],
			       o->v->n_vocab);
			gram_free(m);
			return NULL;
		}
		m->trig[m->n_trig++] = o->trigger_ids[i];
	}
	for (int i = 0; i < o->n_words; i++) {
		size_t n = o->words[i] ? strlen(o->words[i]) : 0;
		if (n == 0 || n > GRAM_MAX_WORD) {
			ad_err(err, "grammar: trigger word %d: 1 to %d bytes", i, GRAM_MAX_WORD);
			gram_free(m);
			return NULL;
		}
		if (!(m->words[m->n_words] = strdup(o->words[i]))) {
			ad_err(err, "grammar: out of memory");
			gram_free(m);
			return NULL;
		}
		m->wlen[m->n_words++] = n;
		if ((int)n > m->max_word)
			m->max_word = (int)n;
	}
	if (dfa_init(&m->d, g) || !(m->st = malloc((size_t)(o->v->max_depth + 1) * sizeof *m->st))) {
		ad_err(err, "grammar: out of memory");
		gram_free(m);
		return NULL;
	}
	for (int i = 0; i < MASK_CACHE; i++)
		m->cstate[i] = -1;
	if (restart(m, err)) {
		gram_free(m);
		return NULL;
	}
	return m;
}

int
gram_active(const struct gram *m)
{
	return m->on && !m->finished;
}

int
gram_can_end(const struct gram *m)
{
	if (!m->on)
		return 1;
	return m->ref ? plain_accepts(&m->pcur) : (m->d.sflag[m->cur] & S_ACCEPT) != 0;
}

int
gram_done(const struct gram *m)
{
	if (!m->on)
		return 0;
	if (m->finished)
		return 1;
	if (m->ref)
		return m->pcur.n == 1 && m->pcur.s[0].n == 0;
	return (m->d.sflag[m->cur] & S_ONLY_END) != 0;
}

int
gram_triggered(const struct gram *m, uint32_t *at)
{
	if (m->trig_now && at)
		*at = m->trig_at;
	return m->trig_now;
}

int
gram_allows(struct gram *m, int32_t id, char *err)
{
	if (id < 0 || id >= m->v->n_vocab)
		return ad_err(err, "grammar: token %d outside the vocabulary", id);
	if (!gram_active(m))
		return 1;
	if (is_stop(m, id))
		return gram_can_end(m);
	uint32_t n;
	const uint8_t *b = gram_vocab_bytes(m->v, id, &n);
	if (m->ref) {
		struct plain out = {0};
		long work = 0;
		int rv = plain_token(m->g, &m->pcur, id, b, n, &out, &work);
		int ok = out.n > 0;
		plain_free(&out);
		return rv ? ad_err(err, "grammar: too ambiguous to follow, or out of memory") : ok;
	}
	m->d.budget = GRAM_MAX_OP_WORK;
	int32_t s = dfa_token(&m->d, m->cur, id, b, n);
	return s == -2 ? failed(m, err) : s >= 0;
}

static void
set_bit(uint64_t *mask, int32_t i)
{
	mask[i >> 6] |= (uint64_t)1 << (i & 63);
}

static int
popcount_mask(const uint64_t *mask, int n)
{
	int c = 0;
	for (int w = 0; w < (n + 63) / 64; w++)
		c += __builtin_popcountll(mask[w]);
	return c;
}

// the stop ids where the grammar can end; never elsewhere
static void
mask_stops(struct gram *m, uint64_t *mask)
{
	int end = gram_can_end(m);
	for (int i = 0; i < m->n_stop; i++) {
		int32_t t = m->stop[i];
		if (end)
			set_bit(mask, t);
		else
			mask[t >> 6] &= ~((uint64_t)1 << (t & 63));
	}
}

int
gram_mask_ref(struct gram *m, uint64_t *mask, char *err)
{
	int nv = m->v->n_vocab, words = (nv + 63) / 64;
	if (!gram_active(m)) {
		memset(mask, 0xff, (size_t)words * sizeof *mask);
		if (nv & 63)
			mask[words - 1] = ((uint64_t)1 << (nv & 63)) - 1;
		return nv;
	}
	memset(mask, 0, (size_t)words * sizeof *mask);
	for (int32_t t = 0; t < nv; t++) {
		if (is_stop(m, t))
			continue;
		int a = gram_allows(m, t, err);
		if (a < 0)
			return -1;
		if (a)
			set_bit(mask, t);
	}
	mask_stops(m, mask);
	return popcount_mask(mask, nv);
}

// the trie walk from state s: every token whose bytes keep the grammar alive
static int
mask_walk(struct gram *m, int32_t s, uint64_t *mask)
{
	const struct gram_vocab *v = m->v;
	struct dfa *d = &m->d;
	int32_t *st = m->st;
	st[0] = s;
	int n = v->n_nodes;
	for (int i = 1; i < n;) {
		int32_t t = dfa_step(d, st[v->depth[i] - 1], v->byte[i]);
		if (t < 0) {
			if (t == -2)
				return -1;
			i = v->end[i];
			continue;
		}
		st[v->depth[i]] = t;
		for (int32_t k = v->tok[i]; k >= 0; k = v->tnext[k])
			set_bit(mask, k);
		i++;
	}
	// token elements: the one token, or every token but one
	if (d->sflag[s] & S_TOKENS) {
		const struct gbnf *g = m->g;
		for (int i = 0; i < d->slen[s]; i++) {
			int32_t x = d->pool[d->soff[s] + i];
			if (!x)
				continue;
			struct gbnf_el e = g->el[d->npos[x]];
			if (e.op == GBNF_TOKEN) {
				set_bit(mask, (int32_t)e.arg);
			} else if (e.op == GBNF_NOT_TOKEN) {
				for (int32_t k = 0; k < v->n_vocab; k++)
					if (k != (int32_t)e.arg)
						set_bit(mask, k);
			}
		}
	}
	return 0;
}

int
gram_mask(struct gram *m, uint64_t *mask, char *err)
{
	if (m->ref || !gram_active(m))
		return gram_mask_ref(m, mask, err);
	int nv = m->v->n_vocab, words = (nv + 63) / 64;
	size_t bytes = (size_t)words * sizeof *mask;
	m->stats.masks++;
	if (!m->no_cache)
		for (int i = 0; i < MASK_CACHE; i++)
			if (m->cstate[i] == m->cur) {
				memcpy(mask, m->cmask[i], bytes);
				m->cused[i] = ++m->clock;
				m->stats.mask_hits++;
				return m->ccount[i];
			}
	memset(mask, 0, bytes);
	int32_t s = m->cur;
	m->d.budget = GRAM_MAX_OP_WORK;
	if (mask_walk(m, s, mask))
		return failed(m, err);
	mask_stops(m, mask);
	int c = popcount_mask(mask, nv);
	if (!m->no_cache) {
		int lru = 0;
		for (int i = 1; i < MASK_CACHE; i++)
			if (m->cused[i] < m->cused[lru])
				lru = i;
		if (!m->cmask[lru])
			m->cmask[lru] = malloc(bytes);
		if (m->cmask[lru]) {
			memcpy(m->cmask[lru], mask, bytes);
			m->cstate[lru] = s;
			m->ccount[lru] = c;
			m->cused[lru] = ++m->clock;
		}
	}
	return c;
}

// feed token id to the constrained grammar
static int
advance(struct gram *m, int32_t id, char *err)
{
	if (is_stop(m, id)) {
		if (!gram_can_end(m))
			return ad_err(err, "grammar: a stop token where the grammar cannot end");
		m->finished = 1;
		return 0;
	}
	uint32_t n;
	const uint8_t *b = gram_vocab_bytes(m->v, id, &n);
	if (m->ref) {
		struct plain out = {0};
		long work = 0;
		if (plain_token(m->g, &m->pcur, id, b, n, &out, &work)) {
			plain_free(&out);
			return ad_err(err, "grammar: too ambiguous to follow, or out of memory");
		}
		if (!out.n)
			return ad_err(err, "grammar: token %d is not allowed here", id);
		plain_free(&m->pcur);
		m->pcur = out;
		return 0;
	}
	m->d.budget = GRAM_MAX_OP_WORK;
	int32_t s = dfa_token(&m->d, m->cur, id, b, n);
	if (s == -2)
		return failed(m, err);
	if (s < 0)
		return ad_err(err, "grammar: token %d is not allowed here", id);
	m->cur = s;
	if (m->d.n_states >= m->max_states || m->d.n_nodes >= GRAM_MAX_NODES) {
		if (dfa_rebase(&m->d, &m->cur))
			return failed(m, err);
		for (int i = 0; i < MASK_CACHE; i++)
			m->cstate[i] = -1;
		m->stats.rebuilds++;
	}
	return 0;
}

// replay bytes b[0..n) (or the trigger token id when n is 0) from the
// start; 0 switched on, 1 the grammar rejects them (still waiting)
static int
switch_on(struct gram *m, int32_t id, const uint8_t *b, size_t n, char *err)
{
	if (!m->ref) {
		int32_t s = m->cur;
		m->d.budget = GRAM_MAX_OP_WORK;
		if (n) {
			s = dfa_walk(&m->d, s, b, (uint32_t)n);
		} else {
			uint32_t k;
			const uint8_t *tb = gram_vocab_bytes(m->v, id, &k);
			s = dfa_token(&m->d, s, id, tb, k);
		}
		if (s == -2)
			return failed(m, err);
		if (s < 0)
			return 1;
		m->cur = s;
		m->on = 1;
		return 0;
	}
	struct plain out = {0};
	long work = 0;
	int rv;
	if (n) {
		struct plain cur = {0};
		rv = 0;
		for (int i = 0; i < m->pcur.n && !rv; i++)
			rv = plain_add(&cur, m->pcur.s[i].a, m->pcur.s[i].n, NULL, 0) < 0;
		for (size_t k = 0; k < n && cur.n && !rv; k++) {
			rv = plain_byte(m->g, &cur, b[k], &out, &work);
			plain_free(&cur);
			cur = out;
			memset(&out, 0, sizeof out);
		}
		out = cur;
	} else {
		uint32_t k;
		const uint8_t *tb = gram_vocab_bytes(m->v, id, &k);
		rv = plain_token(m->g, &m->pcur, id, tb, k, &out, &work);
	}
	if (rv) {
		plain_free(&out);
		return ad_err(err, "grammar: too ambiguous to follow, or out of memory");
	}
	if (!out.n)
		return 1;
	plain_free(&m->pcur);
	m->pcur = out;
	m->on = 1;
	return 0;
}

// waiting: keep the text's tail, look for a trigger token or word
static int
wait_trigger(struct gram *m, int32_t id, char *err)
{
	uint32_t n;
	const uint8_t *b = gram_vocab_bytes(m->v, id, &n);
	uint64_t before = m->produced;
	m->produced += n;
	for (int i = 0; i < m->n_trig; i++)
		if (m->trig[i] == id) {
			int rv = switch_on(m, id, NULL, 0, err);
			if (rv < 0)
				return -1;
			if (rv == 0) {
				m->trig_now = 1;
				m->trig_at = (uint32_t)before;
				m->n_tail = 0;
				return 0;
			}
		}
	if (!m->n_words)
		return 0;
	// the tail keeps max_word - 1 bytes of earlier text before the new ones
	size_t keep = (size_t)m->max_word - 1;
	if (m->n_tail > keep) {
		memmove(m->tail, m->tail + m->n_tail - keep, keep);
		m->n_tail = keep;
	}
	size_t old = m->n_tail;
	if (m->n_tail + n > m->cap_tail) {
		size_t cap = m->n_tail + n + 64;
		uint8_t *t = realloc(m->tail, cap);
		if (!t)
			return ad_err(err, "grammar: out of memory");
		m->tail = t;
		m->cap_tail = cap;
	}
	if (n)
		memcpy(m->tail + m->n_tail, b, n);
	m->n_tail += n;
	// the earliest occurrence that ends in the new bytes
	size_t best = (size_t)-1;
	for (int w = 0; w < m->n_words; w++) {
		size_t wl = m->wlen[w];
		size_t from = old + 1 > wl ? old + 1 - wl : 0;
		for (size_t at = from; at + wl <= m->n_tail; at++)
			if (memcmp(m->tail + at, m->words[w], wl) == 0) {
				if (at < best)
					best = at;
				break;
			}
	}
	if (best == (size_t)-1)
		return 0;
	uint64_t start = m->produced - (m->n_tail - best);
	int rv = switch_on(m, id, m->tail + best, m->n_tail - best, err);
	if (rv < 0)
		return -1;
	if (rv == 0) {
		m->trig_now = 1;
		m->trig_at = (uint32_t)start;
		m->n_tail = 0;
	}
	return 0;
}

int
gram_accept(struct gram *m, int32_t id, char *err)
{
	m->trig_now = 0;
	if (id < 0 || id >= m->v->n_vocab)
		return ad_err(err, "grammar: token %d outside the vocabulary", id);
	if (m->finished)
		return ad_err(err, "grammar: a token after the end");
	if (!m->on)
		return wait_trigger(m, id, err);
	return advance(m, id, err);
}

int32_t
gram_sample(struct gram *m, struct sampler *s, const float *logits, char *err)
{
	int32_t id;
	if (!gram_active(m)) {
		id = m->ref ? sample_ref(s, logits, err) : sample_next(s, logits, err);
		if (id < 0 || gram_accept(m, id, err))
			return -1;
		return id;
	}
	id = m->ref ? sample_draw_ref(s, logits, NULL, err) : sample_draw(s, logits, NULL, err);
	if (id < 0)
		return -1;
	int a = gram_allows(m, id, err);
	if (a < 0)
		return -1;
	if (!a) {
		m->stats.rejected++;
		size_t words = (size_t)(m->v->n_vocab + 63) / 64;
		uint64_t *mask = malloc(words * sizeof *mask);
		if (!mask)
			return ad_err(err, "grammar: out of memory");
		int c = gram_mask(m, mask, err);
		if (c < 0) {
			free(mask);
			return -1;
		}
		char why[AD_ERRLEN];
		id = -1;
		if (c)
			id = m->ref ? sample_draw_ref(s, logits, mask, why) : sample_draw(s, logits, mask, why);
		free(mask);
		if (id < 0 && c)
			return ad_err(err,
			              "grammar: no token can continue the text here: the %d the grammar allows "
			              "have no finite logit",
			              c);
		if (id < 0)
			return ad_err(err, "grammar: no token of the vocabulary can continue the text here");
	}
	if (sample_accept(s, &id, 1, err) || gram_accept(m, id, err))
		return -1;
	return id;
}

void
gram_stats(const struct gram *m, struct gram_stats *st)
{
	*st = m->stats;
	st->states = m->d.n_states;
	st->nodes = m->d.n_nodes;
}
