// sample.c - penalties, truncation and the draw; see sample.h for the order.
#include "sample.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// one candidate: its (penalised) logit, id and integer weight p * 2^40
struct cand {
	float l;
	int32_t id;
	uint64_t w;
};

struct sampler {
	struct sample_params p;
	int n_vocab;
	uint64_t rng[4];
	uint64_t draws; // numbers drawn from rng since the seed
	int32_t *win;   // ring of the last repeat_last_n ids
	int win_len, win_pos;
	int32_t *cnt;             // n_vocab: occurrences in the window
	float *pen;               // n_vocab: the penalised logits
	struct cand *cand;        // n_vocab: candidates, in id order
	struct cand *tmp;         // n_vocab: scratch (nucleus, reference sort)
	struct sample_tok *heap;  // top_k (when below n_vocab): the bounded selection
	struct sample_bias *bias; // the parameters' logit_bias, owned
};

// --- parameters ----------------------------------------------------------------

void
sample_defaults(struct sample_params *p)
{
	*p = (struct sample_params){
		.temperature = 1.0f,
		.top_k = 0,
		.top_p = 1.0f,
		.min_p = 0.0f,
		.repeat_penalty = 1.0f,
		.repeat_last_n = 64,
		.presence_penalty = 0.0f,
		.frequency_penalty = 0.0f,
	};
}

int
sample_check(const struct sample_params *p, char *err)
{
	if (!(p->temperature >= 0.0f && p->temperature <= FLT_MAX))
		return ad_err(err, "temperature %g: must be a finite number >= 0", (double)p->temperature);
	if (p->top_k < 0)
		return ad_err(err, "top_k %d: must be >= 0 (0: off)", (int)p->top_k);
	if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
		return ad_err(err, "top_p %g: must be in (0, 1] (1: off)", (double)p->top_p);
	if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
		return ad_err(err, "min_p %g: must be in [0, 1] (0: off)", (double)p->min_p);
	if (!(p->repeat_penalty > 0.0f && p->repeat_penalty <= FLT_MAX))
		return ad_err(err, "repeat_penalty %g: must be a finite number > 0 (1: off)",
		              (double)p->repeat_penalty);
	if (p->repeat_last_n < 0 || p->repeat_last_n > SAMPLE_MAX_WINDOW)
		return ad_err(err, "repeat_last_n %d: must be in [0, %d]", (int)p->repeat_last_n, SAMPLE_MAX_WINDOW);
	if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
		return ad_err(err, "presence_penalty %g: must be in [-2, 2]", (double)p->presence_penalty);
	if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
		return ad_err(err, "frequency_penalty %g: must be in [-2, 2]", (double)p->frequency_penalty);
	if (p->n_bias < 0 || p->n_bias > SAMPLE_MAX_BIAS || (p->n_bias && !p->bias))
		return ad_err(err, "logit_bias: %d entries, at most %d", p->n_bias, SAMPLE_MAX_BIAS);
	for (int i = 0; i < p->n_bias; i++) {
		if (p->bias[i].id < 0)
			return ad_err(err, "logit_bias[%d]: token id %d is negative", i, (int)p->bias[i].id);
		if (!(p->bias[i].bias >= -100.0f && p->bias[i].bias <= 100.0f))
			return ad_err(err, "logit_bias[%d]: bias %g for token %d: must be in [-100, 100]", i,
			              (double)p->bias[i].bias, (int)p->bias[i].id);
	}
	return 0;
}

// --- random numbers: xoshiro256**, seeded by splitmix64 ---------------------------

static uint64_t
splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static inline uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static uint64_t
rng_next(uint64_t *s)
{
	uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

// a number in [0, n) from one draw of the sampler's generator (multiply-high:
// the bias is below n / 2^64 per unit, and a token spans thousands of units)
static uint64_t
rng_below(struct sampler *s, uint64_t n)
{
	s->draws++;
	return (uint64_t)(((unsigned __int128)rng_next(s->rng) * n) >> 64);
}

// --- the sampler --------------------------------------------------------------------

void
sample_reset(struct sampler *s)
{
	uint64_t x = s->p.has_seed ? s->p.seed : SAMPLE_DEFAULT_SEED;
	for (int i = 0; i < 4; i++)
		s->rng[i] = splitmix64(&x);
	s->draws = 0;
	for (int i = 0; i < s->win_len; i++)
		s->cnt[s->win[i]] = 0;
	s->win_len = s->win_pos = 0;
}

struct sampler *
sample_new(const struct sample_params *p, int n_vocab, char *err)
{
	if (sample_check(p, err))
		return NULL;
	if (n_vocab < 1 || n_vocab > SAMPLE_MAX_VOCAB) {
		ad_err(err, "sampler: n_vocab %d outside [1, %d]", n_vocab, SAMPLE_MAX_VOCAB);
		return NULL;
	}
	for (int i = 0; i < p->n_bias; i++)
		if (p->bias[i].id >= n_vocab) {
			ad_err(err, "logit_bias[%d]: token id %d is outside the vocabulary of %d", i,
			       (int)p->bias[i].id, n_vocab);
			return NULL;
		}
	struct sampler *s = calloc(1, sizeof *s);
	if (!s) {
		ad_err(err, "sampler: out of memory");
		return NULL;
	}
	s->p = *p;
	s->n_vocab = n_vocab;
	size_t n = (size_t)n_vocab;
	s->win = malloc((size_t)(p->repeat_last_n ? p->repeat_last_n : 1) * sizeof *s->win);
	s->cnt = calloc(n, sizeof *s->cnt);
	s->pen = malloc(n * sizeof *s->pen);
	s->cand = malloc(n * sizeof *s->cand);
	s->tmp = malloc(n * sizeof *s->tmp);
	int k = p->top_k > 0 && p->top_k < n_vocab ? p->top_k : 1;
	s->heap = malloc((size_t)k * sizeof *s->heap);
	s->bias = malloc((size_t)(p->n_bias ? p->n_bias : 1) * sizeof *s->bias);
	if (s->bias && p->n_bias)
		memcpy(s->bias, p->bias, (size_t)p->n_bias * sizeof *s->bias);
	s->p.bias = s->bias;
	if (!s->win || !s->cnt || !s->pen || !s->cand || !s->tmp || !s->heap || !s->bias) {
		sample_free(s);
		ad_err(err, "sampler: out of memory for a vocabulary of %d", n_vocab);
		return NULL;
	}
	sample_reset(s);
	return s;
}

uint64_t
sample_draws(const struct sampler *s)
{
	return s->draws;
}

void
sample_skip(struct sampler *s, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		rng_next(s->rng);
	s->draws += n;
}

void
sample_free(struct sampler *s)
{
	if (!s)
		return;
	free(s->win);
	free(s->cnt);
	free(s->pen);
	free(s->cand);
	free(s->tmp);
	free(s->heap);
	free(s->bias);
	free(s);
}

static void
push(struct sampler *s, int32_t id)
{
	int n = s->p.repeat_last_n;
	if (n == 0)
		return;
	if (s->win_len == n)
		s->cnt[s->win[s->win_pos]]--;
	else
		s->win_len++;
	s->win[s->win_pos] = id;
	s->cnt[id]++;
	s->win_pos = s->win_pos + 1 == n ? 0 : s->win_pos + 1;
}

int
sample_accept(struct sampler *s, const int32_t *ids, int n, char *err)
{
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= s->n_vocab)
			return ad_err(err, "sampler: token %d (at %d) outside the vocabulary of %d", (int)ids[i], i,
			              s->n_vocab);
	for (int i = 0; i < n; i++)
		push(s, ids[i]);
	return 0;
}

static int
has_penalties(const struct sampler *s)
{
	const struct sample_params *p = &s->p;
	return s->win_len > 0 &&
	       (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
}

// step 0 on x, the same in both pipelines: -100 is a ban
static void
add_bias(const struct sample_params *p, float *x)
{
	for (int i = 0; i < p->n_bias; i++) {
		float b = p->bias[i].bias;
		x[p->bias[i].id] = b <= -100.0f ? -INFINITY : x[p->bias[i].id] + b;
	}
}

// the one formula both pipelines use for a token seen c times
static inline float
penalise(const struct sample_params *p, float l, int c)
{
	if (p->repeat_penalty != 1.0f)
		l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
	return l - ((float)c * p->frequency_penalty + p->presence_penalty);
}

// the logits the pipeline reads: the caller's, or a penalised copy. Each
// distinct id of the window is visited once: its count is negated while
// it is being applied, then restored.
static const float *
penalised(struct sampler *s, const float *logits)
{
	if (!has_penalties(s) && s->p.n_bias == 0)
		return logits;
	memcpy(s->pen, logits, (size_t)s->n_vocab * sizeof *s->pen);
	add_bias(&s->p, s->pen);
	if (!has_penalties(s))
		return s->pen;
	for (int i = 0; i < s->win_len; i++) {
		int32_t t = s->win[i];
		if (s->cnt[t] > 0) {
			s->pen[t] = penalise(&s->p, s->pen[t], s->cnt[t]);
			s->cnt[t] = -s->cnt[t];
		}
	}
	for (int i = 0; i < s->win_len; i++) {
		int32_t t = s->win[i];
		if (s->cnt[t] < 0)
			s->cnt[t] = -s->cnt[t];
	}
	return s->pen;
}

static int
bad_row(const float *x, int n, char *err)
{
	for (int i = 0; i < n; i++) {
		if (isnan(x[i]))
			return ad_err(err, "sampler: logit %d is NaN", i);
		if (x[i] > FLT_MAX)
			return ad_err(err, "sampler: logit %d is +inf", i);
	}
	return ad_err(err, "sampler: every logit is -inf");
}

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef int64_t v4l __attribute__((vector_size(32)));

// the largest logit and its lowest id; -1 for NaN, +inf or a row without a
// finite value. Eight lanes by hand (the compiler will not reorder a float
// max): NaN and +inf both fail x <= FLT_MAX, and a NaN never wins x > m.
static int
row_max(const float *x, int n, float *max, int32_t *at, char *err)
{
	v8f m = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
	v8f lim = {FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX, FLT_MAX};
	v8i ok = ~(v8i){0}, idx = {0}, lane = {0, 1, 2, 3, 4, 5, 6, 7}, eight = lane * 0 + 8;
	int i = 0;
	for (; i + 8 <= n; i += 8, lane += eight) {
		v8f v;
		memcpy(&v, x + i, sizeof v);
		v8i gt = v > m; // strict: a lane keeps its first maximum
		m = (v8f)(((v8i)v & gt) | ((v8i)m & ~gt));
		idx = (lane & gt) | (idx & ~gt);
		ok &= v <= lim;
	}
	float best = -INFINITY;
	int32_t id = 0;
	int bad = 0;
	for (int j = 0; j < 8; j++) {
		if (m[j] > best || (m[j] == best && m[j] > -INFINITY && idx[j] < id))
			best = m[j], id = idx[j];
		bad |= !ok[j];
	}
	for (; i < n; i++) {
		if (x[i] > best)
			best = x[i], id = i;
		bad |= !(x[i] <= FLT_MAX);
	}
	*max = best;
	*at = id;
	return bad || best == -INFINITY ? bad_row(x, n, err) : 0;
}

// best-first order: higher logit, then lower id
static inline int
before(float la, int32_t ia, float lb, int32_t ib)
{
	return la > lb || (la == lb && ia < ib);
}

static inline float
cut_of(float max, float t)
{
	float c = max - 20.0f * t;
	return c > -FLT_MAX ? c : -FLT_MAX; // -inf never passes
}

static inline float
prob(float l, float max, float t)
{
	return expf((l - max) / t);
}

static inline uint64_t
weight(float p)
{
	return (uint64_t)(p * 0x1p40f);
}

// how much of the mass z top-p keeps: at least one unit, at most z
static uint64_t
need_of(float top_p, uint64_t z)
{
	double t = ceil((double)top_p * (double)z);
	if (t >= (double)z)
		return z;
	return t < 1.0 ? 1 : (uint64_t)t;
}

static int
cmp_id(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return (x->id > y->id) - (x->id < y->id);
}

static int
cmp_best(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;
	return before(x->l, x->id, y->l, y->id) ? -1 : before(y->l, y->id, x->l, x->id);
}

// --- bounded selection: a heap whose root is the worst of the k kept -------

static void
sift_down(struct sample_tok *h, int n, int i)
{
	struct sample_tok v = h[i];
	for (;;) {
		int c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && before(h[c].logit, h[c].id, h[c + 1].logit, h[c + 1].id))
			c++;
		if (!before(v.logit, v.id, h[c].logit, h[c].id))
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = v;
}

static void
sift_up(struct sample_tok *h, int i)
{
	struct sample_tok v = h[i];
	while (i > 0) {
		int up = (i - 1) / 2;
		if (!before(h[up].logit, h[up].id, v.logit, v.id))
			break;
		h[i] = h[up];
		i = up;
	}
	h[i] = v;
}

// offers x[i] to the heap of m (at most k) entries; returns the new m.
// ids arrive in increasing order, so a newcomer that only ties the root
// loses to it: a strict > is the whole test once the heap is full.
static inline int
offer(struct sample_tok *h, int m, int k, float lo, const float *x, int i)
{
	if (m < k) {
		if (x[i] >= lo) {
			h[m] = (struct sample_tok){i, x[i]};
			sift_up(h, m++);
		}
	} else if (x[i] > h[0].logit) {
		h[0] = (struct sample_tok){i, x[i]};
		sift_down(h, m, 0);
	}
	return m;
}

// the k best of x[0..n) with x >= lo, into h (unordered); returns how many.
// A block of 32 none of whose values could enter is skipped on four vector
// compares, which is nearly every block once the heap is full.
static int
select_k(const float *x, int n, float lo, struct sample_tok *h, int k)
{
	int m = 0, i = 0;
	for (; i + 32 <= n; i += 32) {
		v8f a, b, c, d;
		memcpy(&a, x + i, sizeof a);
		memcpy(&b, x + i + 8, sizeof b);
		memcpy(&c, x + i + 16, sizeof c);
		memcpy(&d, x + i + 24, sizeof d);
		v8i in;
		if (m < k) {
			in = (a >= lo) | (b >= lo) | (c >= lo) | (d >= lo);
		} else {
			float r = h[0].logit;
			in = (a > r) | (b > r) | (c > r) | (d > r);
		}
		v4l q = (v4l)in;
		if (!(q[0] | q[1] | q[2] | q[3]))
			continue;
		for (int j = 0; j < 32; j++)
			m = offer(h, m, k, lo, x, i + j);
	}
	for (; i < n; i++)
		m = offer(h, m, k, lo, x, i);
	return m;
}

int
sample_top(const float *logits, int n_vocab, struct sample_tok *out, int n)
{
	if (n <= 0 || n_vocab <= 0)
		return 0;
	int m = select_k(logits, n_vocab, -INFINITY, out, n); // NaN fails >= and >
	// heap sort: the worst goes to the end each time
	for (int e = m - 1; e > 0; e--) {
		struct sample_tok t = out[0];
		out[0] = out[e];
		out[e] = t;
		sift_down(out, e, 0);
	}
	return m;
}

// the candidates x >= lo of x[0..n) into c, in id order; returns how many.
// Blocks of 32 without one are skipped as in select_k; inside a block the
// store always happens and the count moves on a keep (no branch).
static int
collect(const float *x, int n, float lo, struct cand *c)
{
	int m = 0, i = 0;
	for (; i + 32 <= n; i += 32) {
		v8f a, b, d, e;
		memcpy(&a, x + i, sizeof a);
		memcpy(&b, x + i + 8, sizeof b);
		memcpy(&d, x + i + 16, sizeof d);
		memcpy(&e, x + i + 24, sizeof e);
		v4l q = (v4l)((a >= lo) | (b >= lo) | (d >= lo) | (e >= lo));
		if (!(q[0] | q[1] | q[2] | q[3]))
			continue;
		for (int j = i; j < i + 32; j++) {
			c[m].l = x[j];
			c[m].id = j;
			m += x[j] >= lo;
		}
	}
	for (; i < n; i++) {
		c[m].l = x[i];
		c[m].id = i;
		m += x[i] >= lo;
	}
	return m;
}

// --- the nucleus without sorting -------------------------------------------------

// a[0..n) in any order, with total weight >= need >= 1. Finds the element at
// which the best-first running mass first reaches need; returns its index
// in a (a is permuted) and the mass up to it in *mass.
static int
nucleus(struct cand *a, int n, uint64_t need, uint64_t *mass)
{
	int lo = 0, hi = n;
	uint64_t acc = 0; // mass of a[0..lo), all better than a[lo..hi)
	while (hi - lo > 16) {
		int mid = lo + (hi - lo) / 2, last = hi - 1;
		// median of three to a[last]
		struct cand *x = &a[lo], *y = &a[mid], *z = &a[last], t;
		if (before(y->l, y->id, x->l, x->id))
			t = *x, *x = *y, *y = t;
		if (before(z->l, z->id, y->l, y->id))
			t = *y, *y = *z, *z = t;
		if (before(y->l, y->id, x->l, x->id))
			t = *x, *x = *y, *y = t;
		t = *y, *y = *z, *z = t;
		struct cand pv = a[last];
		int p = lo;
		uint64_t s = 0;
		for (int j = lo; j < last; j++)
			if (before(a[j].l, a[j].id, pv.l, pv.id)) {
				s += a[j].w;
				t = a[p], a[p] = a[j], a[j] = t;
				p++;
			}
		a[last] = a[p];
		a[p] = pv;
		if (acc + s >= need) {
			hi = p;
		} else if (acc + s + pv.w >= need) {
			*mass = acc + s + pv.w;
			return p;
		} else {
			acc += s + pv.w;
			lo = p + 1;
		}
	}
	qsort(a + lo, (size_t)(hi - lo), sizeof *a, cmp_best);
	for (int i = lo; i < hi; i++) {
		acc += a[i].w;
		if (acc >= need) {
			*mass = acc;
			return i;
		}
	}
	*mass = acc; // not reached while the weights add up to need
	return hi - 1;
}

enum { NBUCKET = 1024 };

// buckets of equal logit width from max (0) down to the lowest candidate
static inline int
bucket(float l, float max, float scale)
{
	float f = (max - l) * scale;
	return f < (float)NBUCKET ? (int)f : NBUCKET - 1;
}

// the top-p boundary among s->cand[0..n) (total weight >= need), into
// s->tmp; returns its index there and the mass through it in *mass. The
// masses of logit buckets find the boundary's bucket in one pass; only that
// bucket's members go through the selection. Buckets are monotone in the
// logit and equal logits share one, so this is the sorted walk's answer.
static int
top_p_boundary(struct sampler *s, int n, float max, float lmin, uint64_t need, uint64_t *mass)
{
	const struct cand *c = s->cand;
	if (n <= 256) {
		memcpy(s->tmp, c, (size_t)n * sizeof *c);
		return nucleus(s->tmp, n, need, mass);
	}
	uint64_t hist[NBUCKET] = {0}, acc = 0;
	float scale = (float)NBUCKET / (max - lmin);
	if (!(scale <= FLT_MAX))
		scale = FLT_MAX; // max == lmin: one bucket
	for (int i = 0; i < n; i++)
		hist[bucket(c[i].l, max, scale)] += c[i].w;
	int b = 0;
	while (b < NBUCKET - 1 && acc + hist[b] < need)
		acc += hist[b++];
	int m = 0;
	for (int i = 0; i < n; i++)
		if (bucket(c[i].l, max, scale) == b)
			s->tmp[m++] = c[i];
	int at = nucleus(s->tmp, m, need - acc, mass);
	*mass += acc;
	return at;
}

// --- the fast pipeline ------------------------------------------------------------------

// what survives steps 4-8: those of the candidates s->cand[0..n) (id order)
// that are the boundary (bl, bid) or before it, with total weight z
struct kept {
	int n;
	float bl;
	int32_t bid;
	uint64_t z;
};

static struct kept
keep_fast(struct sampler *s, const float *x, float max)
{
	const struct sample_params *p = &s->p;
	int nv = s->n_vocab;
	float t = p->temperature, cut = cut_of(max, t);

	// cut and top-k: the candidates, in id order
	struct cand *c = s->cand;
	int n = 0;
	if (p->top_k > 0 && p->top_k < nv) {
		struct sample_tok *h = s->heap;
		n = select_k(x, nv, cut, h, p->top_k);
		for (int i = 0; i < n; i++)
			c[i] = (struct cand){h[i].logit, h[i].id, 0};
		qsort(c, (size_t)n, sizeof *c, cmp_id);
	} else {
		n = collect(x, nv, cut, c);
	}

	// softmax at T, and min-p on the way (p_max is exactly 1)
	uint64_t z = 0;
	float lmin = max;
	int m = 0;
	if (p->min_p > 0.0f) {
		for (int i = 0; i < n; i++) {
			float pr = prob(c[i].l, max, t);
			uint64_t w = weight(pr);
			int keep = pr >= p->min_p;
			c[m] = c[i];
			c[m].w = w;
			m += keep;
			z += keep ? w : 0;
		}
	} else {
		for (m = 0; m < n; m++)
			z += c[m].w = weight(prob(c[m].l, max, t));
	}
	for (int i = 0; i < m; i++)
		lmin = c[i].l < lmin ? c[i].l : lmin;
	struct kept k = {m, -INFINITY, INT32_MAX, z};

	// top-p: find the boundary without sorting
	if (p->top_p < 1.0f) {
		uint64_t need = need_of(p->top_p, z);
		if (need < z) {
			int b = top_p_boundary(s, m, max, lmin, need, &k.z);
			k.bl = s->tmp[b].l;
			k.bid = s->tmp[b].id;
		}
	}
	return k;
}

static inline int
member(const struct kept *k, const struct cand *c)
{
	return !before(k->bl, k->bid, c->l, c->id);
}

// step 1's row with every token outside allow at -inf (in s->pen)
static const float *
allowed_only(struct sampler *s, const float *x, const uint64_t *allow)
{
	if (x != s->pen)
		memcpy(s->pen, x, (size_t)s->n_vocab * sizeof *s->pen);
	int nv = s->n_vocab;
	for (int w = 0; w < (nv + 63) / 64; w++) {
		uint64_t m = allow[w];
		if (m == ~(uint64_t)0)
			continue;
		int end = w * 64 + 64 < nv ? w * 64 + 64 : nv;
		for (int i = w * 64; i < end; i++)
			if (!(m >> (i & 63) & 1))
				s->pen[i] = -INFINITY;
	}
	return s->pen;
}

int32_t
sample_draw(struct sampler *s, const float *logits, const uint64_t *allow, char *err)
{
	const float *x = penalised(s, logits);
	if (allow)
		x = allowed_only(s, x, allow);
	float max;
	int32_t id;
	if (row_max(x, s->n_vocab, &max, &id, err))
		return -1;
	if (s->p.temperature <= 0.0f)
		return id;
	struct kept k = keep_fast(s, x, max);
	const struct cand *c = s->cand;
	uint64_t r = rng_below(s, k.z), acc = 0;
	for (int i = 0; i < k.n; i++) {
		if (!member(&k, &c[i]))
			continue;
		acc += c[i].w;
		if (acc > r) {
			id = c[i].id;
			break;
		}
	}
	return id;
}

int32_t
sample_next(struct sampler *s, const float *logits, char *err)
{
	int32_t id = sample_draw(s, logits, NULL, err);
	if (id >= 0)
		push(s, id);
	return id;
}

int
sample_candidates(struct sampler *s, const float *logits, char *err)
{
	const float *x = penalised(s, logits);
	float max;
	int32_t id;
	if (row_max(x, s->n_vocab, &max, &id, err))
		return -1;
	if (s->p.temperature <= 0.0f)
		return 1;
	float cut = cut_of(max, s->p.temperature);
	int n = 0;
	for (int i = 0; i < s->n_vocab; i++)
		n += x[i] >= cut;
	return n;
}

// --- the reference: every step on a fully sorted list -----------------------------

// penalties, plainly: each window id where it first occurs (oldest first)
// gets the count of the whole window
static void
penalise_ref(struct sampler *s, float *x)
{
	const struct sample_params *p = &s->p;
	int w = p->repeat_last_n, first = s->win_len < w ? 0 : s->win_pos;
	int len = has_penalties(s) ? s->win_len : 0;
	for (int i = 0; i < len; i++) {
		int32_t t = s->win[(first + i) % w];
		int seen = 0, c = 0;
		for (int j = 0; j < len; j++) {
			int32_t u = s->win[(first + j) % w];
			seen |= j < i && u == t;
			c += u == t;
		}
		if (!seen)
			x[t] = penalise(p, x[t], c);
	}
}

// the penalised row into s->pen (tokens outside allow, when given, at
// -inf: one token at a time), checked; -1 on a bad row
static int
row_ref(struct sampler *s, const float *logits, const uint64_t *allow, char *err)
{
	int nv = s->n_vocab, finite = 0;
	float *x = s->pen;
	memcpy(x, logits, (size_t)nv * sizeof *x);
	add_bias(&s->p, x);
	penalise_ref(s, x);
	for (int i = 0; allow && i < nv; i++)
		if (!(allow[i / 64] & (uint64_t)1 << (i % 64)))
			x[i] = -INFINITY;
	for (int i = 0; i < nv; i++) {
		if (isnan(x[i]) || x[i] > FLT_MAX)
			return bad_row(x, nv, err);
		finite |= x[i] > -INFINITY;
	}
	return finite ? 0 : bad_row(x, nv, err);
}

// steps 3-8 on s->pen: the kept tokens into s->tmp[0..n), in id order
static int
keep_ref(struct sampler *s)
{
	const struct sample_params *p = &s->p;
	int nv = s->n_vocab;
	const float *x = s->pen;
	struct cand *a = s->tmp;
	if (p->temperature <= 0.0f) {
		int32_t id = 0;
		for (int i = 1; i < nv; i++)
			if (x[i] > x[id])
				id = i;
		a[0] = (struct cand){x[id], id, 1};
		return 1;
	}
	for (int i = 0; i < nv; i++)
		a[i] = (struct cand){x[i], i, 0};
	qsort(a, (size_t)nv, sizeof *a, cmp_best);
	float t = p->temperature, max = a[0].l, cut = cut_of(max, t);
	int n = 0;
	while (n < nv && a[n].l >= cut)
		n++;
	if (p->top_k > 0 && p->top_k < n)
		n = p->top_k;
	for (int i = 0; i < n; i++)
		a[i].w = weight(prob(a[i].l, max, t));
	for (int i = 0; i < n; i++)
		if (prob(a[i].l, max, t) < p->min_p) {
			n = i;
			break;
		}
	if (p->top_p < 1.0f) {
		uint64_t z = 0, acc = 0;
		for (int i = 0; i < n; i++)
			z += a[i].w;
		uint64_t need = need_of(p->top_p, z);
		for (int i = 0; i < n; i++) {
			acc += a[i].w;
			if (acc >= need) {
				n = i + 1;
				break;
			}
		}
	}
	qsort(a, (size_t)n, sizeof *a, cmp_id);
	return n;
}

int32_t
sample_draw_ref(struct sampler *s, const float *logits, const uint64_t *allow, char *err)
{
	if (row_ref(s, logits, allow, err))
		return -1;
	int n = keep_ref(s);
	const struct cand *a = s->tmp;
	int32_t id = a[0].id;
	if (s->p.temperature > 0.0f) {
		// the draw walks the kept tokens in id order, as sample_next does
		uint64_t z = 0, acc = 0;
		for (int i = 0; i < n; i++)
			z += a[i].w;
		uint64_t r = rng_below(s, z);
		for (int i = 0; i < n; i++) {
			acc += a[i].w;
			if (acc > r) {
				id = a[i].id;
				break;
			}
		}
	}
	return id;
}

int32_t
sample_ref(struct sampler *s, const float *logits, char *err)
{
	int32_t id = sample_draw_ref(s, logits, NULL, err);
	if (id >= 0)
		push(s, id);
	return id;
}

// --- inspection ---------------------------------------------------------------------

int
sample_penalise(struct sampler *s, const float *logits, float *out)
{
	const float *x = penalised(s, logits);
	memcpy(out, x, (size_t)s->n_vocab * sizeof *out);
	return has_penalties(s) || s->p.n_bias > 0;
}

int
sample_kept(struct sampler *s, const float *logits, int ref, int32_t *ids, char *err)
{
	if (ref) {
		if (row_ref(s, logits, NULL, err))
			return -1;
		int n = keep_ref(s);
		for (int i = 0; i < n; i++)
			ids[i] = s->tmp[i].id;
		return n;
	}
	const float *x = penalised(s, logits);
	float max;
	if (row_max(x, s->n_vocab, &max, ids, err))
		return -1;
	if (s->p.temperature <= 0.0f)
		return 1;
	struct kept k = keep_fast(s, x, max);
	int n = 0;
	for (int i = 0; i < k.n; i++)
		if (member(&k, &s->cand[i]))
			ids[n++] = s->cand[i].id;
	return n;
}

// --- logprobs -------------------------------------------------------------------------

static int
lp_args(const float *logits, int n_vocab, int32_t id, int *k, char *err)
{
	if (n_vocab < 1 || !logits)
		return ad_err(err, "logprobs: an empty row");
	if (id < 0 || id >= n_vocab)
		return ad_err(err, "logprobs: token %d outside the vocabulary of %d", (int)id, n_vocab);
	if (*k < 0)
		*k = 0;
	if (*k > SAMPLE_MAX_TOP_LOGPROBS)
		*k = SAMPLE_MAX_TOP_LOGPROBS;
	if (*k > n_vocab)
		*k = n_vocab;
	return 0;
}

int
sample_logprobs(const float *logits, int n_vocab, int32_t id, int k, float *lp, struct sample_tok *top, char *err)
{
	if (lp_args(logits, n_vocab, id, &k, err))
		return -1;
	float max;
	int32_t at;
	if (row_max(logits, n_vocab, &max, &at, err))
		return -1;
	// exp(l - max) in eight float lanes, moved into a double every 1024
	// values so no lane sums more than 128 terms; then the tail
	double z = 0;
	int i = 0;
	while (i + 8 <= n_vocab) {
		v8f acc = {0};
		for (int end = i + 1024; i + 8 <= n_vocab && i < end; i += 8) {
			v8f e;
			for (int j = 0; j < 8; j++)
				e[j] = expf(logits[i + j] - max);
			acc += e;
		}
		for (int j = 0; j < 8; j++)
			z += (double)acc[j];
	}
	for (; i < n_vocab; i++)
		z += (double)expf(logits[i] - max);
	float lz = max + (float)log(z); // z >= 1: the max itself contributes 1
	*lp = logits[id] - lz;
	int m = sample_top(logits, n_vocab, top, k);
	for (int j = 0; j < m; j++)
		top[j].logit -= lz;
	return m;
}

int
sample_logprobs_ref(const float *logits, int n_vocab, int32_t id, int k, float *lp, struct sample_tok *top, char *err)
{
	if (lp_args(logits, n_vocab, id, &k, err))
		return -1;
	double max = -INFINITY;
	for (int i = 0; i < n_vocab; i++) {
		if (isnan(logits[i]) || logits[i] > FLT_MAX)
			return bad_row(logits, n_vocab, err);
		if (logits[i] > max)
			max = logits[i];
	}
	if (max == -INFINITY)
		return bad_row(logits, n_vocab, err);
	double z = 0;
	for (int i = 0; i < n_vocab; i++)
		z += exp((double)logits[i] - max);
	double lz = max + log(z);
	*lp = (float)((double)logits[id] - lz);
	struct cand *a = malloc((size_t)n_vocab * sizeof *a);
	if (!a)
		return ad_err(err, "logprobs: out of memory");
	for (int i = 0; i < n_vocab; i++)
		a[i] = (struct cand){logits[i], i, 0};
	qsort(a, (size_t)n_vocab, sizeof *a, cmp_best);
	for (int j = 0; j < k; j++)
		top[j] = (struct sample_tok){a[j].id, (float)((double)a[j].l - lz)};
	free(a);
	return k;
}
