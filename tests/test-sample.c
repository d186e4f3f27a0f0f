// test-sample.c - the sampler: parameter checks, penalties, truncation sets,
// seeds, the drawn distribution, and sample_next against sample_ref.
#include <float.h>
#include <stdint.h>

#include "sample.h"
#include "t.h"

// --- test data --------------------------------------------------------------

static uint64_t t_rng = 0x9e3779b97f4a7c15u;

static uint64_t
rnd(void)
{
	uint64_t z = (t_rng += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static double
unif(void)
{
	return (double)(rnd() >> 11) * 0x1p-53;
}

static double
gauss(void)
{
	double u = unif() + 1e-300, v = unif();
	return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

enum { K_GAUSS, K_TIES, K_HOLES, K_FLAT, K_PEAK, K_KINDS };

// a row of logits of one of five shapes
static void
logits(int kind, int n, float *x)
{
	for (int i = 0; i < n; i++) {
		switch (kind) {
		case K_GAUSS:
			x[i] = (float)(3.0 * gauss());
			break;
		case K_TIES:
			x[i] = (float)(int)(rnd() % 7) - 3.0f;
			break;
		case K_HOLES:
			x[i] = rnd() % 5 == 0 ? -INFINITY : (float)(2.0 * gauss());
			break;
		case K_FLAT:
			x[i] = 0.5f;
			break;
		default:
			x[i] = (float)(3.0 * gauss());
			break;
		}
	}
	if (kind == K_HOLES)
		x[rnd() % (uint64_t)n] = 1.0f; // a row of only -inf is an error, tested apart
	if (kind == K_PEAK)
		for (int j = 0; j < 3; j++)
			x[rnd() % (uint64_t)n] = 18.0f + (float)j;
}

static struct sampler *
make(const struct sample_params *p, int n_vocab)
{
	char err[AD_ERRLEN];
	struct sampler *s = sample_new(p, n_vocab, err);
	if (!s)
		fprintf(stderr, "sample_new: %s\n", err);
	return s;
}

static int
same_ids(const int32_t *a, int na, const int32_t *b, int nb)
{
	return na == nb && (na <= 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

// kept set of both pipelines; REQUIREs they agree, returns it in ids
static int
kept_both(struct sampler *s, const float *x, int32_t *ids, int32_t *tmp)
{
	char err[AD_ERRLEN];
	int n = sample_kept(s, x, 0, ids, err);
	int m = sample_kept(s, x, 1, tmp, err);
	REQUIRE(n > 0 && same_ids(ids, n, tmp, m), "fast %d ref %d", n, m);
	return n;
}

static int
set_is(const int32_t *ids, int n, const int32_t *want, int nw)
{
	return same_ids(ids, n, want, nw);
}

// --- parameters -----------------------------------------------------------------

static void
check_bad(struct sample_params p, const char *field)
{
	char err[AD_ERRLEN] = "";
	CHECK(sample_check(&p, err) == -1, "%s accepted", field);
	CHECK(strstr(err, field) != NULL, "message '%s' does not name %s", err, field);
	err[0] = 0;
	struct sampler *s = sample_new(&p, 10, err);
	CHECK(s == NULL && strstr(err, field), "sample_new: '%s'", err);
	sample_free(s);
}

static void
test_check(void)
{
	struct sample_params d, p;
	char err[AD_ERRLEN];
	sample_defaults(&d);
	CHECK(sample_check(&d, err) == 0);
	CHECK(d.temperature == 1.0f && d.top_k == 0 && d.top_p == 1.0f && d.min_p == 0.0f);
	CHECK(d.repeat_penalty == 1.0f && d.repeat_last_n == 64 && !d.has_seed);

	float bad_t[] = {-0.1f, NAN, INFINITY, -INFINITY};
	for (int i = 0; i < 4; i++)
		p = d, p.temperature = bad_t[i], check_bad(p, "temperature");
	p = d, p.top_k = -1, check_bad(p, "top_k");
	float bad_p[] = {0.0f, -0.1f, 1.0001f, NAN};
	for (int i = 0; i < 4; i++)
		p = d, p.top_p = bad_p[i], check_bad(p, "top_p");
	float bad_m[] = {-0.01f, 1.01f, NAN};
	for (int i = 0; i < 3; i++)
		p = d, p.min_p = bad_m[i], check_bad(p, "min_p");
	float bad_r[] = {0.0f, -1.0f, INFINITY, NAN};
	for (int i = 0; i < 4; i++)
		p = d, p.repeat_penalty = bad_r[i], check_bad(p, "repeat_penalty");
	p = d, p.repeat_last_n = -1, check_bad(p, "repeat_last_n");
	p = d, p.repeat_last_n = SAMPLE_MAX_WINDOW + 1, check_bad(p, "repeat_last_n");
	p = d, p.presence_penalty = 2.5f, check_bad(p, "presence_penalty");
	p = d, p.presence_penalty = NAN, check_bad(p, "presence_penalty");
	p = d, p.frequency_penalty = -2.01f, check_bad(p, "frequency_penalty");

	// the message carries the value
	p = d, p.top_p = 1.5f;
	sample_check(&p, err);
	CHECK(strstr(err, "1.5") && strstr(err, "(0, 1]"), "'%s'", err);

	// the edges of each range are fine
	p = d;
	p.temperature = 0.0f, p.top_p = 1.0f, p.min_p = 1.0f, p.repeat_last_n = 0;
	p.presence_penalty = -2.0f, p.frequency_penalty = 2.0f, p.top_k = 1 << 30;
	CHECK(sample_check(&p, err) == 0, "%s", err);
	p = d, p.top_p = 1e-9f, p.repeat_penalty = 1e-3f, p.repeat_last_n = SAMPLE_MAX_WINDOW;
	CHECK(sample_check(&p, err) == 0, "%s", err);

	CHECK(sample_new(&d, 0, err) == NULL && strstr(err, "n_vocab"), "'%s'", err);
	CHECK(sample_new(&d, SAMPLE_MAX_VOCAB + 1, err) == NULL);
	sample_free(NULL);
}

// --- greedy ----------------------------------------------------------------------

static void
test_greedy(void)
{
	struct sample_params p;
	sample_defaults(&p);
	p.temperature = 0.0f, p.top_k = 3, p.top_p = 0.5f, p.min_p = 0.2f; // no effect at T 0
	int n = 5003;                                                      // not a multiple of the 8 lanes
	float *x = malloc((size_t)n * sizeof *x);
	struct sampler *s = make(&p, n);
	REQUIRE(s && x);
	char err[AD_ERRLEN];
	for (int it = 0; it < 50; it++) {
		logits(it % K_KINDS, n, x);
		int best = 0;
		for (int i = 1; i < n; i++)
			if (x[i] > x[best])
				best = i;
		CHECK(sample_next(s, x, err) == best, "row %d", it);
		CHECK(sample_ref(s, x, err) == best, "row %d", it);
	}
	// ties: the lowest id
	for (int i = 0; i < n; i++)
		x[i] = -1.0f;
	x[4000] = x[17] = x[3] = 2.0f;
	CHECK(sample_next(s, x, err) == 3);
	CHECK(sample_ref(s, x, err) == 3);
	x[4000] = x[17] = x[3] = -1.0f;
	x[n - 1] = x[n - 2] = 2.0f; // in the tail past the last full 8 lanes
	CHECK(sample_next(s, x, err) == n - 2);
	x[4992] = 2.0f; // in the lanes, before the tail
	CHECK(sample_next(s, x, err) == 4992);
	// -inf first, the max at the end
	for (int i = 0; i < n; i++)
		x[i] = -INFINITY;
	x[n - 1] = -1e30f;
	CHECK(sample_next(s, x, err) == n - 1);
	CHECK(sample_ref(s, x, err) == n - 1);
	sample_free(s);
	free(x);
}

// --- penalties ------------------------------------------------------------------

static void
pen_case(float rep, float pres, float freq, const int32_t *ids, int nids, int last_n, const float *want)
{
	struct sample_params p;
	sample_defaults(&p);
	p.repeat_penalty = rep, p.presence_penalty = pres, p.frequency_penalty = freq;
	p.repeat_last_n = last_n;
	float x[10] = {1.0f, 3.0f, -3.0f, 0.0f, 4.0f, 2.0f, -1.0f, 0.5f, 1.5f, -2.0f}, y[10];
	struct sampler *s = make(&p, 10);
	REQUIRE(s);
	char err[AD_ERRLEN];
	CHECK(sample_accept(s, ids, nids, err) == 0);
	sample_penalise(s, x, y);
	for (int i = 0; i < 10; i++)
		CHECK(y[i] == want[i], "rep %g pres %g freq %g: logit %d is %.9g, want %.9g", (double)rep, (double)pres,
		      (double)freq, i, (double)y[i], (double)want[i]);
	sample_free(s);
}

static void
test_penalties(void)
{
	//                  0     1     2     3     4     5     6     7     8     9
	float x[10] = {1.0f, 3.0f, -3.0f, 0.0f, 4.0f, 2.0f, -1.0f, 0.5f, 1.5f, -2.0f};
	int32_t w[] = {1, 1, 1, 2, 3, 4, 4};
	float want[10];

	// repetition: positive / rep, non-positive * rep, once per distinct id
	memcpy(want, x, sizeof x);
	want[1] = 1.5f, want[2] = -6.0f, want[3] = 0.0f, want[4] = 2.0f;
	pen_case(2.0f, 0, 0, w, 7, 64, want);
	// rep < 1 boosts
	memcpy(want, x, sizeof x);
	want[1] = 6.0f, want[2] = -1.5f, want[3] = 0.0f, want[4] = 8.0f;
	pen_case(0.5f, 0, 0, w, 7, 64, want);
	// presence: once per distinct id, whatever the count
	memcpy(want, x, sizeof x);
	want[1] = 2.5f, want[2] = -3.5f, want[3] = -0.5f, want[4] = 3.5f;
	pen_case(1.0f, 0.5f, 0, w, 7, 64, want);
	// frequency: times the count (1 three times, 4 twice)
	memcpy(want, x, sizeof x);
	want[1] = 2.25f, want[2] = -3.25f, want[3] = -0.25f, want[4] = 3.5f;
	pen_case(1.0f, 0, 0.25f, w, 7, 64, want);
	// all three: rep first, then the OpenAI terms
	memcpy(want, x, sizeof x);
	want[1] = 1.5f - (3 * 0.5f + 1.0f); // -1
	want[2] = -6.0f - (0.5f + 1.0f);    // -7.5
	want[3] = 0.0f - (0.5f + 1.0f);     // -1.5
	want[4] = 2.0f - (2 * 0.5f + 1.0f); // 0
	pen_case(2.0f, 1.0f, 0.5f, w, 7, 64, want);
	// a window of 3 sees only 3, 4, 4
	memcpy(want, x, sizeof x);
	want[3] = -1.0f, want[4] = 2.0f;
	pen_case(1.0f, 0, 1.0f, w, 7, 3, want);
	// no window: nothing
	pen_case(2.0f, 1.0f, 1.0f, w, 7, 0, x);
	// neutral values: nothing
	pen_case(1.0f, 0, 0, w, 7, 64, x);

	// the window slides as tokens are accepted, sampled ones included
	struct sample_params p;
	sample_defaults(&p);
	p.temperature = 0.0f, p.repeat_last_n = 2, p.frequency_penalty = 1.0f;
	struct sampler *s = make(&p, 10);
	REQUIRE(s);
	char err[AD_ERRLEN];
	float y[10];
	int32_t a[] = {4, 4};
	sample_accept(s, a, 2, err);
	sample_penalise(s, x, y);
	CHECK(y[4] == 2.0f);
	// 4 is at 2 now, 1 (3) is the best: greedy takes 1 and the window is {4, 1}
	CHECK(sample_next(s, x, err) == 1);
	sample_penalise(s, x, y);
	CHECK(y[4] == 3.0f && y[1] == 2.0f, "%g %g", (double)y[4], (double)y[1]);
	CHECK(sample_next(s, x, err) == 4); // 4 at 3, 1 at 2; the window is {1, 4}
	CHECK(sample_ref(s, x, err) == 4);  // the same; the window is {4, 4}
	CHECK(sample_next(s, x, err) == 1); // 4 at 2 again
	sample_free(s);

	// greedy sees the penalty, in both pipelines; the caller's row is untouched
	float keep[10];
	memcpy(keep, x, sizeof x);
	sample_defaults(&p);
	p.temperature = 0.0f, p.repeat_penalty = 2.0f;
	s = make(&p, 10);
	REQUIRE(s);
	int32_t four = 4;
	sample_accept(s, &four, 1, err);
	CHECK(sample_next(s, x, err) == 1); // 4 -> 2, 1 stays 3
	sample_reset(s);
	sample_accept(s, &four, 1, err);
	CHECK(sample_ref(s, x, err) == 1);
	CHECK(memcmp(keep, x, sizeof x) == 0, "the logits were modified");

	// bad ids are refused and nothing is pushed
	sample_reset(s);
	int32_t badid[] = {1, 10};
	CHECK(sample_accept(s, badid, 2, err) == -1 && strstr(err, "10"), "'%s'", err);
	int32_t neg = -1;
	CHECK(sample_accept(s, &neg, 1, err) == -1);
	CHECK(sample_penalise(s, x, y) == 0);
	CHECK(sample_next(s, x, err) == 4);
	// reset forgets the window
	CHECK(sample_penalise(s, x, y) == 1);
	sample_reset(s);
	CHECK(sample_penalise(s, x, y) == 0);
	sample_free(s);
}

// --- truncation sets on known logits --------------------------------------------

static void
sets(float t, int k, float top_p, float min_p, const float *x, int n, const int32_t *want, int nw)
{
	struct sample_params p;
	sample_defaults(&p);
	p.temperature = t, p.top_k = k, p.top_p = top_p, p.min_p = min_p;
	struct sampler *s = make(&p, n);
	REQUIRE(s);
	int32_t ids[64], tmp[64];
	int m = kept_both(s, x, ids, tmp);
	CHECK(set_is(ids, m, want, nw), "T %g k %d p %g min_p %g: %d kept (want %d)", (double)t, k, (double)top_p,
	      (double)min_p, m, nw);
	sample_free(s);
}

static void
test_sets(void)
{
	// softmax at T 1: .6364 .2341 .0861 .0317 .0117 .0043 .0016 0
	float x[8] = {4, 3, 2, 1, 0, -1, -2, -INFINITY};
	int32_t all[] = {0, 1, 2, 3, 4, 5, 6}, i01[] = {0, 1}, i012[] = {0, 1, 2}, i0[] = {0};
	sets(1.0f, 0, 1.0f, 0.0f, x, 8, all, 7); // -inf never kept
	sets(1.0f, 3, 1.0f, 0.0f, x, 8, i012, 3);
	sets(1.0f, 100, 1.0f, 0.0f, x, 8, all, 7); // top_k beyond the vocabulary: off
	sets(1.0f, 8, 1.0f, 0.0f, x, 8, all, 7);
	sets(1.0f, 1, 1.0f, 0.0f, x, 8, i0, 1);
	sets(1.0f, 0, 0.6f, 0.0f, x, 8, i0, 1);
	sets(1.0f, 0, 0.7f, 0.0f, x, 8, i01, 2);
	sets(1.0f, 0, 0.9f, 0.0f, x, 8, i012, 3); // .8705 < .9 needs the third
	sets(1.0f, 0, 1e-9f, 0.0f, x, 8, i0, 1);  // the nucleus keeps at least one
	sets(1.0f, 0, 1.0f, 0.3f, x, 8, i01, 2);  // e^-1 = .37 >= .3 > e^-2
	sets(1.0f, 0, 1.0f, 0.1f, x, 8, i012, 3);
	sets(1.0f, 0, 1.0f, 1.0f, x, 8, i0, 1);
	sets(0.1f, 0, 1.0f, 0.0f, x, 8, i012, 3);                    // cut at 4 - 2
	sets(0.05f, 0, 1.0f, 0.0f, x, 8, i01, 2);                    // cut at 4 - 1
	sets(0.0f, 0, 1.0f, 0.0f, x, 8, i0, 1);                      // greedy
	sets(2.0f, 5, 0.9f, 0.1f, x, 8, (int32_t[]){0, 1, 2, 3}, 4); // T 2: .50 .30 .18 .11 .07
	sets(1e38f, 0, 1.0f, 0.0f, x, 8, all, 7);                    // max - 20 T overflows: -inf still out

	// a logit exactly at the cut, inside the 32-wide blocks of the scans
	float w[96];
	for (int i = 0; i < 96; i++)
		w[i] = -10.0f;
	w[40] = 4.0f, w[70] = 2.0f, w[71] = 1.999f; // T 0.1: the cut is 4 - 2
	sets(0.1f, 0, 1.0f, 0.0f, w, 96, (int32_t[]){40, 70}, 2);
	sets(0.1f, 5, 1.0f, 0.0f, w, 96, (int32_t[]){40, 70}, 2);
	sets(1.0f, 2, 1.0f, 0.0f, w, 96, (int32_t[]){40, 70}, 2);

	// ties: top-k and top-p keep the lower ids, min-p 1 keeps every tie of the max
	float e[50];
	for (int i = 0; i < 50; i++)
		e[i] = 0.25f;
	int32_t first[50];
	for (int i = 0; i < 50; i++)
		first[i] = i;
	sets(1.0f, 10, 1.0f, 0.0f, e, 50, first, 10);
	sets(1.0f, 0, 0.5f, 0.0f, e, 50, first, 25);
	sets(1.0f, 0, 0.51f, 0.0f, e, 50, first, 26);
	sets(1.0f, 0, 1.0f, 1.0f, e, 50, first, 50);
	sets(0.7f, 0, 1.0f, 0.0f, e, 50, first, 50);
	float t[5] = {2, 1, 2, 0, 2};
	sets(1.0f, 0, 1.0f, 1.0f, t, 5, (int32_t[]){0, 2, 4}, 3);
	sets(1.0f, 2, 1.0f, 0.0f, t, 5, (int32_t[]){0, 2}, 2);
	sets(1.0f, 4, 1.0f, 0.0f, t, 5, (int32_t[]){0, 1, 2, 4}, 4);
	// the nucleus of three equal bests: a third is not enough for .34
	sets(1.0f, 0, 0.34f, 0.0f, t, 5, (int32_t[]){0, 2}, 2);
}

// --- the two pipelines on random rows ---------------------------------------------

static void
random_params(struct sample_params *p)
{
	static const float ts[] = {0.0f, 0.05f, 0.3f, 0.7f, 1.0f, 1.5f, 4.0f};
	static const int ks[] = {0, 0, 1, 2, 5, 40, 1000, 1 << 20};
	static const float ps[] = {1.0f, 1.0f, 0.95f, 0.9f, 0.5f, 0.1f, 1e-6f};
	static const float ms[] = {0.0f, 0.0f, 0.0f, 0.01f, 0.05f, 0.5f, 1.0f};
	sample_defaults(p);
	p->temperature = ts[rnd() % 7];
	p->top_k = ks[rnd() % 8];
	p->top_p = ps[rnd() % 7];
	p->min_p = ms[rnd() % 7];
	if (rnd() % 2) {
		p->repeat_penalty = 0.8f + (float)(rnd() % 8) * 0.1f;
		p->presence_penalty = (float)((int)(rnd() % 9) - 4) * 0.25f;
		p->frequency_penalty = (float)((int)(rnd() % 9) - 4) * 0.25f;
		p->repeat_last_n = (int)(rnd() % 100);
	}
	p->seed = rnd();
	p->has_seed = 1;
}

// returns the number of rows on which the pipelines agreed
static int
compare(int n, int rows, int psets)
{
	float *x = malloc((size_t)n * sizeof *x);
	int32_t *ids = malloc((size_t)n * sizeof *ids), *tmp = malloc((size_t)n * sizeof *tmp);
	REQUIRE(x && ids && tmp);
	char err[AD_ERRLEN];
	int agree = 0, total = 0;
	for (int ps = 0; ps < psets; ps++) {
		struct sample_params p;
		random_params(&p);
		struct sampler *a = make(&p, n), *b = make(&p, n);
		REQUIRE(a && b);
		int32_t prompt[20];
		for (int i = 0; i < 20; i++)
			prompt[i] = (int32_t)(rnd() % (uint64_t)(n < 8 ? n : 8)); // repeats
		sample_accept(a, prompt, 20, err);
		sample_accept(b, prompt, 20, err);
		int kind = (int)(rnd() % K_KINDS);
		for (int r = 0; r < rows; r++) {
			logits(kind, n, x);
			if (r == 0) { // the kept sets too
				int k1 = sample_kept(a, x, 0, ids, err), k2 = sample_kept(b, x, 1, tmp, err);
				CHECK(same_ids(ids, k1, tmp, k2), "n %d T %g k %d p %g min_p %g: kept %d vs %d", n,
				      (double)p.temperature, p.top_k, (double)p.top_p, (double)p.min_p, k1, k2);
			}
			int32_t u = sample_next(a, x, err), v = sample_ref(b, x, err);
			total++;
			agree += u == v;
			CHECK(u == v && u >= 0, "n %d kind %d T %g k %d p %g min_p %g rep %g row %d: %d vs %d", n, kind,
			      (double)p.temperature, p.top_k, (double)p.top_p, (double)p.min_p,
			      (double)p.repeat_penalty, r, u, v);
			if (u != v)
				break; // the windows differ from here on
		}
		sample_free(a);
		sample_free(b);
	}
	free(x);
	free(ids);
	free(tmp);
	return agree == total;
}

static void
test_fast_vs_ref(void)
{
	CHECK(compare(1, 20, 20));
	CHECK(compare(2, 50, 40));
	CHECK(compare(3, 50, 40));
	CHECK(compare(17, 50, 100));
	CHECK(compare(100, 50, 100));
	CHECK(compare(1000, 20, 60));
	CHECK(compare(32000, 5, 20));
	CHECK(compare(151936, 3, 12));
}

// the nucleus on many candidates (the bucketed path) against the sorted walk
static void
test_nucleus(void)
{
	enum { N = 5000 };
	static float x[N];
	static int32_t ids[N], tmp[N];
	char err[AD_ERRLEN];
	float ts[] = {0.2f, 1.0f, 3.0f, 100.0f};
	float ps[] = {0.01f, 0.3f, 0.5f, 0.9f, 0.99f, 0.999f};
	int cases = 0;
	for (int kind = 0; kind < K_KINDS; kind++)
		for (int ti = 0; ti < 4; ti++)
			for (int pi = 0; pi < 6; pi++) {
				struct sample_params p;
				sample_defaults(&p);
				p.temperature = ts[ti], p.top_p = ps[pi];
				p.min_p = pi % 2 ? 0.0f : 1e-4f;
				struct sampler *s = make(&p, N);
				REQUIRE(s);
				logits(kind, N, x);
				int n = sample_kept(s, x, 0, ids, err), m = sample_kept(s, x, 1, tmp, err);
				CHECK(n > 0 && same_ids(ids, n, tmp, m), "kind %d T %g top_p %g: %d vs %d", kind,
				      (double)p.temperature, (double)p.top_p, n, m);
				cases += n > 256;
				sample_free(s);
			}
	CHECK(cases > 20, "only %d cases with more than 256 kept", cases);
}

// the configurations the CLI and server use, on the largest vocabulary
static void
test_fast_vs_ref_151936(void)
{
	int n = 151936;
	float *x = malloc((size_t)n * sizeof *x);
	REQUIRE(x);
	char err[AD_ERRLEN];
	float ts[] = {0.3f, 0.7f, 1.0f};
	for (int ti = 0; ti < 3; ti++)
		for (int mode = 0; mode < 3; mode++) {
			struct sample_params p;
			sample_defaults(&p);
			p.temperature = ts[ti];
			p.top_k = mode == 0 ? 40 : 0;
			p.top_p = mode == 2 ? 1.0f : 0.9f;
			p.repeat_penalty = 1.15f;
			struct sampler *a = make(&p, n), *b = make(&p, n);
			REQUIRE(a && b);
			for (int r = 0; r < 3; r++) {
				logits(K_PEAK, n, x);
				int32_t u = sample_next(a, x, err), v = sample_ref(b, x, err);
				CHECK(u == v && u >= 0, "T %g mode %d: %d vs %d", (double)ts[ti], mode, u, v);
			}
			sample_free(a);
			sample_free(b);
		}
	free(x);
}

// --- seeds ------------------------------------------------------------------------------

static void
run(const struct sample_params *p, const float *x, int n, int32_t *out, int count)
{
	struct sampler *s = make(p, n);
	REQUIRE(s);
	char err[AD_ERRLEN];
	for (int i = 0; i < count; i++)
		out[i] = sample_next(s, x, err);
	sample_free(s);
}

static void
test_seed(void)
{
	enum { N = 1000, C = 300 };
	float x[N];
	logits(K_GAUSS, N, x);
	struct sample_params p;
	sample_defaults(&p);
	p.temperature = 1.0f, p.repeat_last_n = 0;
	int32_t a[C], b[C], c[C], d[C];
	p.seed = 42, p.has_seed = 1;
	run(&p, x, N, a, C);
	run(&p, x, N, b, C);
	CHECK(memcmp(a, b, sizeof a) == 0, "seed 42 twice differs");
	p.seed = 43;
	run(&p, x, N, c, C);
	int diff = 0;
	for (int i = 0; i < C; i++)
		diff += a[i] != c[i];
	CHECK(diff > C / 2, "seeds 42 and 43 differ at only %d of %d", diff, C);
	// no seed: the documented default, every time
	p.has_seed = 0, p.seed = 42;
	run(&p, x, N, c, C);
	p.has_seed = 1, p.seed = SAMPLE_DEFAULT_SEED;
	run(&p, x, N, d, C);
	CHECK(memcmp(c, d, sizeof c) == 0, "has_seed 0 is not SAMPLE_DEFAULT_SEED");
	// reset restarts the sequence
	p.seed = 42;
	struct sampler *s = make(&p, N);
	REQUIRE(s);
	char err[AD_ERRLEN];
	for (int i = 0; i < 10; i++)
		sample_next(s, x, err);
	sample_reset(s);
	for (int i = 0; i < C; i++)
		b[i] = sample_next(s, x, err);
	CHECK(memcmp(a, b, sizeof a) == 0, "reset does not restart");
	sample_free(s);
}

// --- the drawn distribution ----------------------------------------------------------

// draws 200k tokens and compares the frequencies with the softmax of x at T,
// restricted to the first `keep` (x sorted best first); returns max |diff|
static double
draws(const float *x, int n, float t, int top_k, float top_p, int keep, double *chi2)
{
	struct sample_params p;
	sample_defaults(&p);
	p.temperature = t, p.top_k = top_k, p.top_p = top_p, p.seed = 7, p.has_seed = 1;
	struct sampler *s = make(&p, n);
	if (!s)
		return 1.0;
	enum { D = 200000 };
	int cnt[16] = {0};
	char err[AD_ERRLEN];
	for (int i = 0; i < D; i++) {
		int32_t id = sample_next(s, x, err);
		if (id >= 0 && id < 16)
			cnt[id]++;
	}
	sample_free(s);
	double z = 0, want[16] = {0}, maxd = 0;
	for (int i = 0; i < keep; i++)
		z += want[i] = exp(((double)x[i] - (double)x[0]) / (double)t);
	*chi2 = 0;
	for (int i = 0; i < n; i++) {
		want[i] /= z;
		double f = (double)cnt[i] / D, dd = fabs(f - want[i]);
		maxd = dd > maxd ? dd : maxd;
		if (want[i] > 0)
			*chi2 += (cnt[i] - D * want[i]) * (cnt[i] - D * want[i]) / (D * want[i]);
		else if (cnt[i])
			*chi2 = INFINITY; // a token outside the kept set was drawn
	}
	return maxd;
}

static void
test_distribution(void)
{
	float x[6] = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -2.0f};
	double chi2, d;
	// chi-square 0.999 quantiles: 5 df 20.52, 3 df 16.27, 2 df 13.82, 1 df 10.83
	d = draws(x, 6, 0.8f, 0, 1.0f, 6, &chi2);
	CHECK(d < 0.005 && chi2 < 20.52, "T .8: max diff %.5f chi2 %.2f", d, chi2);
	d = draws(x, 6, 1.7f, 0, 1.0f, 6, &chi2);
	CHECK(d < 0.005 && chi2 < 20.52, "T 1.7: max diff %.5f chi2 %.2f", d, chi2);
	d = draws(x, 6, 1.0f, 3, 1.0f, 3, &chi2);
	CHECK(d < 0.005 && chi2 < 13.82, "top_k 3: max diff %.5f chi2 %.2f", d, chi2);
	// T 1: .4197 .2546 .1544 .0937 .0568 .0209: .75 needs three, .85 four
	d = draws(x, 6, 1.0f, 0, 0.75f, 3, &chi2);
	CHECK(d < 0.005 && chi2 < 13.82, "top_p .75: max diff %.5f chi2 %.2f", d, chi2);
	d = draws(x, 6, 1.0f, 0, 0.85f, 4, &chi2);
	CHECK(d < 0.005 && chi2 < 16.27, "top_p .85: max diff %.5f chi2 %.2f", d, chi2);
	float two[2] = {0.0f, 0.0f};
	d = draws(two, 2, 1.0f, 0, 1.0f, 2, &chi2);
	CHECK(d < 0.005 && chi2 < 10.83, "equal pair: max diff %.5f chi2 %.2f", d, chi2);
}

// --- edges ---------------------------------------------------------------------------------

static void
expect_err(struct sampler *s, const float *x, const char *what)
{
	char err[AD_ERRLEN];
	int32_t ids[16];
	err[0] = 0;
	CHECK(sample_next(s, x, err) == -1 && strstr(err, what), "next: '%s' (want %s)", err, what);
	err[0] = 0;
	CHECK(sample_ref(s, x, err) == -1 && strstr(err, what), "ref: '%s' (want %s)", err, what);
	err[0] = 0;
	CHECK(sample_kept(s, x, 0, ids, err) == -1 && strstr(err, what), "kept: '%s'", err);
	CHECK(sample_kept(s, x, 1, ids, err) == -1);
	CHECK(sample_candidates(s, x, err) == -1);
	CHECK(sample_next(s, x, NULL) == -1);
}

static void
test_edges(void)
{
	struct sample_params p;
	sample_defaults(&p);
	char err[AD_ERRLEN];
	float x[10];
	for (int temp = 0; temp < 2; temp++) {
		p.temperature = temp ? 0.8f : 0.0f;
		struct sampler *s = make(&p, 10);
		REQUIRE(s);
		for (int i = 0; i < 10; i++)
			x[i] = (float)i;
		x[7] = NAN;
		expect_err(s, x, "logit 7 is NaN");
		x[7] = 7, x[3] = INFINITY;
		expect_err(s, x, "logit 3 is +inf");
		for (int i = 0; i < 10; i++)
			x[i] = -INFINITY;
		expect_err(s, x, "every logit is -inf");
		// errors push nothing into the window
		float y[10];
		CHECK(sample_penalise(s, x, y) == 0);
		sample_free(s);
	}

	// a vocabulary of one
	p.temperature = 1.0f, p.top_k = 5, p.top_p = 0.5f;
	struct sampler *s = make(&p, 1);
	REQUIRE(s);
	float one = -3.0f;
	for (int i = 0; i < 10; i++)
		CHECK(sample_next(s, &one, err) == 0 && sample_ref(s, &one, err) == 0);
	sample_free(s);

	// -inf tokens are never drawn, even at a high temperature
	enum { N = 200 };
	float h[N];
	for (int i = 0; i < N; i++)
		h[i] = i % 2 ? -INFINITY : (float)(i % 7);
	sample_defaults(&p);
	p.temperature = 50.0f;
	s = make(&p, N);
	REQUIRE(s);
	int odd = 0, seen = 0;
	for (int i = 0; i < 5000; i++) {
		int32_t id = sample_next(s, h, err);
		odd += id % 2 != 0;
		seen += id == 0;
	}
	CHECK(odd == 0 && seen > 0, "%d draws of -inf tokens", odd);
	sample_free(s);

	// all equal: every token is drawn about as often
	float e[8] = {3, 3, 3, 3, 3, 3, 3, 3};
	s = make(&p, 8);
	REQUIRE(s);
	int cnt[8] = {0};
	for (int i = 0; i < 8000; i++) {
		int32_t id = sample_next(s, e, err);
		if (id >= 0)
			cnt[id]++;
	}
	for (int i = 0; i < 8; i++)
		CHECK(cnt[i] > 850 && cnt[i] < 1150, "token %d drawn %d of 8000", i, cnt[i]);
	sample_free(s);

	// candidates after the cut
	float c[8] = {4, 3, 2, 1, 0, -1, -2, -INFINITY};
	p.temperature = 0.1f;
	s = make(&p, 8);
	REQUIRE(s);
	CHECK(sample_candidates(s, c, err) == 3);
	sample_free(s);
	p.temperature = 1.0f;
	s = make(&p, 8);
	REQUIRE(s);
	CHECK(sample_candidates(s, c, err) == 7);
	sample_free(s);
}

// --- top-N of raw logits -------------------------------------------------------------

static void
test_top(void)
{
	enum { N = 3000 };
	float x[N];
	logits(K_TIES, N, x); // many ties
	struct sample_tok top[40];
	int n = sample_top(x, N, top, 40);
	REQUIRE(n == 40);
	// the 40 best by (logit desc, id asc), found by brute force
	int used[N] = {0};
	for (int k = 0; k < 40; k++) {
		int best = -1;
		for (int i = 0; i < N; i++)
			if (!used[i] && (best < 0 || x[i] > x[best]))
				best = i;
		used[best] = 1;
		CHECK(top[k].id == best && top[k].logit == x[best], "rank %d: %d vs %d", k, top[k].id, best);
	}
	float y[4] = {1.0f, NAN, 5.0f, -INFINITY};
	struct sample_tok t[8];
	n = sample_top(y, 4, t, 8);
	CHECK(n == 3 && t[0].id == 2 && t[1].id == 0 && t[2].id == 3, "n %d", n);
	CHECK(sample_top(y, 4, t, 0) == 0);
	n = sample_top(y, 4, t, 1);
	CHECK(n == 1 && t[0].id == 2 && t[0].logit == 5.0f);
}

// --- logit_bias and logprobs ---------------------------------------------------

static void
test_bias(void)
{
	char err[AD_ERRLEN];
	struct sample_params p;
	sample_defaults(&p);
	struct sample_bias b[3] = {{3, 100.0f}, {4, -100.0f}, {5, 0.5f}};
	p.bias = b, p.n_bias = 3;
	float x[10] = {1.0f, 3.0f, -3.0f, 0.0f, 4.0f, 2.0f, -1.0f, 0.5f, 1.5f, -2.0f}, y[10];
	struct sampler *s = make(&p, 10);
	REQUIRE(s);
	b[0].bias = 0; // the sampler keeps its own copy
	CHECK(sample_penalise(s, x, y) == 1);
	CHECK(y[3] == 100.0f && y[4] == -INFINITY && y[5] == 2.5f && y[1] == 3.0f, "%g %g %g", (double)y[3],
	      (double)y[4], (double)y[5]);
	// +100 makes token 3 certain, at T 1 and at T 2
	for (int i = 0; i < 200; i++)
		CHECK(sample_next(s, x, err) == 3);
	sample_free(s);
	b[0].bias = 100.0f;
	p.temperature = 2.0f;
	s = make(&p, 10);
	REQUIRE(s);
	for (int i = 0; i < 200; i++)
		CHECK(sample_ref(s, x, err) == 3);
	sample_free(s);
	// -100 bans the argmax: greedy takes the next best; sampling never draws it
	struct sample_bias ban = {4, -100.0f};
	p.bias = &ban, p.n_bias = 1, p.temperature = 0.0f;
	s = make(&p, 10);
	REQUIRE(s);
	CHECK(sample_next(s, x, err) == 1);
	CHECK(sample_ref(s, x, err) == 1);
	sample_free(s);
	p.temperature = 1.0f;
	s = make(&p, 10);
	REQUIRE(s);
	int32_t ids[10], tmp[10];
	int n = kept_both(s, x, ids, tmp);
	for (int i = 0; i < n; i++)
		CHECK(ids[i] != 4);
	for (int i = 0; i < 500; i++)
		CHECK(sample_next(s, x, err) != 4);
	sample_free(s);
	// biases with penalties: the fast pipeline and the reference keep the same sets
	enum { V = 3000 };
	static float row[V];
	static int32_t ka[V], kb[V];
	struct sample_bias many[64];
	for (int r = 0; r < 20; r++) {
		logits(r % K_KINDS, V, row);
		for (int i = 0; i < 64; i++)
			many[i] = (struct sample_bias){(int32_t)(rnd() % V),
			                               (float)((double)(rnd() % 2001) / 10.0 - 100.0)};
		sample_defaults(&p);
		p.bias = many, p.n_bias = 64, p.top_p = 0.9f, p.repeat_penalty = 1.3f, p.top_k = r % 2 ? 40 : 0;
		s = make(&p, V);
		REQUIRE(s);
		int32_t hist[32];
		for (int i = 0; i < 32; i++)
			hist[i] = many[i].id;
		CHECK(sample_accept(s, hist, 32, err) == 0);
		kept_both(s, row, ka, kb);
		sample_free(s);
	}
	// out of range: named, with the value
	sample_defaults(&p);
	struct sample_bias bad = {2, 100.5f};
	p.bias = &bad, p.n_bias = 1;
	check_bad(p, "logit_bias[0]");
	bad = (struct sample_bias){-1, 1.0f};
	check_bad(p, "logit_bias[0]");
	bad = (struct sample_bias){2, NAN};
	check_bad(p, "logit_bias[0]");
	bad = (struct sample_bias){10, 1.0f}; // the vocabulary has 10
	CHECK(sample_check(&p, err) == 0);
	err[0] = 0;
	CHECK(sample_new(&p, 10, err) == NULL && strstr(err, "logit_bias[0]") && strstr(err, "vocabulary"), "%s", err);
	p.n_bias = SAMPLE_MAX_BIAS + 1;
	check_bad(p, "logit_bias");
}

static void
lp_compare(const float *x, int n, int k)
{
	char err[AD_ERRLEN];
	struct sample_tok a[SAMPLE_MAX_TOP_LOGPROBS], b[SAMPLE_MAX_TOP_LOGPROBS];
	int32_t id = (int32_t)(rnd() % (uint64_t)n);
	float la, lb;
	int ma = sample_logprobs(x, n, id, k, &la, a, err);
	REQUIRE(ma >= 0, "%s", err);
	int mb = sample_logprobs_ref(x, n, id, k, &lb, b, err);
	REQUIRE(ma == mb && ma == (k < n ? k : n), "n %d k %d: fast %d ref %d", n, k, ma, mb);
	CHECK(isinf(lb) ? la == lb : fabs(la - lb) <= 2e-5, "%.9g vs %.9g", (double)la, (double)lb);
	for (int i = 0; i < ma; i++) {
		CHECK(a[i].id == b[i].id, "rank %d: %d vs %d", i, a[i].id, b[i].id);
		CHECK(isinf(b[i].logit) ? a[i].logit == b[i].logit : fabs(a[i].logit - b[i].logit) <= 2e-5,
		      "rank %d: %.9g vs %.9g", i, (double)a[i].logit, (double)b[i].logit);
		CHECK(i == 0 || a[i].logit <= a[i - 1].logit);
	}
}

static void
test_logprobs(void)
{
	char err[AD_ERRLEN];
	// a row whose softmax is known: p = 1/10, 2/10, 3/10, 4/10
	float x[4] = {logf(1.0f) + 7.0f, logf(2.0f) + 7.0f, logf(3.0f) + 7.0f, logf(4.0f) + 7.0f};
	struct sample_tok t[SAMPLE_MAX_TOP_LOGPROBS];
	float lp;
	for (int ref = 0; ref < 2; ref++) {
		int (*f)(const float *, int, int32_t, int, float *, struct sample_tok *, char *) =
			ref ? sample_logprobs_ref : sample_logprobs;
		REQUIRE(f(x, 4, 1, 3, &lp, t, err) == 3);
		CHECK_NEAR(lp, log(0.2), 1e-6);
		CHECK(t[0].id == 3 && t[1].id == 2 && t[2].id == 1);
		CHECK_NEAR(t[0].logit, log(0.4), 1e-6);
		CHECK_NEAR(t[2].logit, log(0.2), 1e-6);
		CHECK(f(x, 4, 0, 25, &lp, t, err) == 4); // k is capped by the row
		CHECK(f(x, 4, 0, 0, &lp, t, err) == 0);
		CHECK_NEAR(lp, log(0.1), 1e-6);
		CHECK(f(x, 4, 4, 1, &lp, t, err) == -1 && strstr(err, "outside"));
		float bad[3] = {0.0f, NAN, 1.0f};
		CHECK(f(bad, 3, 0, 1, &lp, t, err) == -1 && strstr(err, "NaN"), "%s", err);
		float inf[3] = {-INFINITY, -INFINITY, -INFINITY};
		CHECK(f(inf, 3, 0, 1, &lp, t, err) == -1 && strstr(err, "-inf"), "%s", err);
	}
	// the fast sum against the double reference on every shape, tails included
	static float row[151936];
	const int sizes[] = {1, 7, 8, 1000, 1031, 32000, 49152, 151936};
	for (int si = 0; si < (int)(sizeof sizes / sizeof *sizes); si++)
		for (int kind = 0; kind < K_KINDS; kind++) {
			int n = sizes[si];
			logits(kind, n, row);
			if (kind == K_HOLES && n == 1)
				row[0] = 0.5f;
			lp_compare(row, n, (kind * 7) % (SAMPLE_MAX_TOP_LOGPROBS + 1));
			lp_compare(row, n, SAMPLE_MAX_TOP_LOGPROBS);
		}
	// the probabilities sum to 1, and a greedy pick is the top entry
	logits(K_GAUSS, 1000, row);
	double sum = 0;
	for (int32_t i = 0; i < 1000; i++) {
		REQUIRE(sample_logprobs(row, 1000, i, 1, &lp, t, err) == 1);
		sum += exp((double)lp);
	}
	CHECK_NEAR(sum, 1.0, 1e-5);
	struct sample_params p;
	sample_defaults(&p);
	p.temperature = 0.0f;
	struct sampler *s = make(&p, 1000);
	REQUIRE(s);
	int32_t id = sample_next(s, row, err);
	REQUIRE(sample_logprobs(row, 1000, id, 5, &lp, t, err) == 5);
	CHECK(t[0].id == id && t[0].logit == lp);
	sample_free(s);
}

// a generation continued elsewhere: a sampler with the same parameters,
// the prompt and the tokens so far in its window, skipped by the first
// one's draws, picks exactly the tokens the first one goes on to pick, at
// every cut, greedy, sampled and with every penalty
static void
test_continue(void)
{
	enum { V = 300, N = 40, P = 12 };
	float *rows = malloc((size_t)N * V * sizeof *rows);
	REQUIRE(rows);
	for (int i = 0; i < N; i++)
		logits(i % 3 ? K_GAUSS : K_TIES, V, rows + (size_t)i * V);
	int32_t prompt[P];
	for (int i = 0; i < P; i++)
		prompt[i] = (int32_t)(rnd() % V);
	struct sample_bias bias[] = {{7, 2.5f}, {11, -100.0f}};
	for (int mode = 0; mode < 3; mode++) {
		struct sample_params p;
		sample_defaults(&p);
		p.temperature = mode == 0 ? 0.0f : 0.9f;
		p.top_k = mode == 2 ? 40 : 0;
		p.top_p = mode == 2 ? 0.9f : 1.0f;
		p.min_p = mode == 2 ? 0.02f : 0.0f;
		p.repeat_penalty = 1.3f;
		p.repeat_last_n = 16; // shorter than prompt + tokens: the window slides
		p.presence_penalty = mode == 2 ? 0.5f : 0.0f;
		p.frequency_penalty = mode == 2 ? 0.4f : 0.0f;
		p.seed = 1234 + (uint64_t)mode;
		p.has_seed = 1;
		p.bias = bias;
		p.n_bias = 2;
		char err[AD_ERRLEN];
		struct sampler *a = make(&p, V);
		REQUIRE(a);
		REQUIRE(sample_accept(a, prompt, P, err) == 0, "%s", err);
		int32_t ids[P + N];
		uint64_t draws[N];
		memcpy(ids, prompt, sizeof prompt);
		for (int i = 0; i < N; i++) {
			ids[P + i] = sample_next(a, rows + (size_t)i * V, err);
			REQUIRE(ids[P + i] >= 0, "%s", err);
			draws[i] = sample_draws(a);
		}
		CHECK(draws[N - 1] == (mode == 0 ? 0u : (uint64_t)N), "mode %d: %llu draws", mode,
		      (unsigned long long)draws[N - 1]);
		sample_free(a);
		int bad = -1;
		for (int k = 1; k < N && bad < 0; k++) {
			struct sampler *b = make(&p, V);
			REQUIRE(b);
			REQUIRE(sample_accept(b, ids, P + k, err) == 0, "%s", err);
			sample_skip(b, draws[k - 1]);
			for (int i = k; i < N && bad < 0; i++)
				if (sample_next(b, rows + (size_t)i * V, err) != ids[P + i])
					bad = k;
			CHECK(bad >= 0 || sample_draws(b) == draws[N - 1]);
			sample_free(b);
		}
		CHECK(bad < 0, "mode %d: continued after %d tokens, the tokens differ", mode, bad);
		// without the skip a sampled continuation goes its own way
		if (mode > 0) {
			struct sampler *b = make(&p, V);
			REQUIRE(b);
			REQUIRE(sample_accept(b, ids, P + 5, err) == 0, "%s", err);
			int same = 1;
			for (int i = 5; i < N; i++)
				same &= sample_next(b, rows + (size_t)i * V, err) == ids[P + i];
			CHECK(!same, "mode %d: the same tokens without the skip", mode);
			sample_free(b);
		}
	}
	free(rows);
}

int
main(void)
{
	T_RUN(test_check);
	T_RUN(test_greedy);
	T_RUN(test_penalties);
	T_RUN(test_sets);
	T_RUN(test_fast_vs_ref);
	T_RUN(test_nucleus);
	T_RUN(test_fast_vs_ref_151936);
	T_RUN(test_seed);
	T_RUN(test_distribution);
	T_RUN(test_edges);
	T_RUN(test_top);
	T_RUN(test_bias);
	T_RUN(test_logprobs);
	T_RUN(test_continue);
	return t_done();
}
