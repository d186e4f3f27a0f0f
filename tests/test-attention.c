// test-attention.c - attention over the fp16 cache: the AVX2 path against
// its plain twin, and both against a double-precision computation, on
// random shapes (MHA, GQA, MQA, head sizes that are not multiples of 8,
// value heads of another size, windows, soft-caps); the cache split in two
// stretches at any row gives the same bits (fp16 and fp32, both paths);
// several columns in one call give each the bits of its own call.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "fp16.h"
#include "t.h"

static uint64_t rng = 0x9e3779b97f4a7c15u;

static float
frand(void) // uniform in [-1, 1)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

// the textbook formula in double
static void
attn_double(const struct attn_shape *sh, const float *q, const uint16_t *k, const uint16_t *v, int first, int last,
            double *out)
{
	const int hd = sh->head_dim, hdv = sh->head_dim_v, group = sh->n_head / sh->n_head_kv;
	double *s = malloc(sizeof(double) * (size_t)(last + 1));
	for (int h = 0; h < sh->n_head; h++) {
		int g = h / group;
		double mx = -INFINITY, sum = 0;
		for (int j = first; j <= last; j++) {
			double d = 0;
			for (int i = 0; i < hd; i++)
				d += (double)q[h * hd + i] * ad_fp16_to_f32(k[(size_t)j * sh->k_stride + g * hd + i]);
			d *= sh->scale;
			if (sh->softcap > 0)
				d = tanh(d / sh->softcap) * sh->softcap;
			s[j] = d;
			mx = d > mx ? d : mx;
		}
		for (int j = first; j <= last; j++)
			sum += s[j] = exp(s[j] - mx);
		for (int d = 0; d < hdv; d++) {
			double acc = 0;
			for (int j = first; j <= last; j++)
				acc += s[j] / sum * ad_fp16_to_f32(v[(size_t)j * sh->v_stride + g * hdv + d]);
			out[h * hdv + d] = acc;
		}
	}
	free(s);
}

static void
one(int n_head, int n_head_kv, int hd, int hdv, int rows, int first, float softcap, double *worst_fast,
    double *worst_ref)
{
	struct attn_shape sh = {n_head,
	                        n_head_kv,
	                        hd,
	                        hdv,
	                        (size_t)(n_head_kv * hd + 3),
	                        (size_t)(n_head_kv * hdv + 5),
	                        1.0f / sqrtf((float)hd),
	                        softcap};
	size_t kn = sh.k_stride * (size_t)rows, vn = sh.v_stride * (size_t)rows;
	uint16_t *k = malloc(kn * 2), *v = malloc(vn * 2);
	float *q = malloc(sizeof(float) * (size_t)(n_head * hd));
	float *a = malloc(sizeof(float) * (size_t)(n_head * hdv)), *b = malloc(sizeof(float) * (size_t)(n_head * hdv));
	double *d = malloc(sizeof(double) * (size_t)(n_head * hdv));
	float *scratch = malloc(sizeof(float) * attn_scratch_floats(&sh, rows));
	for (size_t i = 0; i < kn; i++)
		k[i] = ad_f32_to_fp16(3 * frand());
	for (size_t i = 0; i < vn; i++)
		v[i] = ad_f32_to_fp16(frand());
	for (int i = 0; i < n_head * hd; i++)
		q[i] = 3 * frand();
	attn_ref(&sh, q, k, v, first, rows - 1, a, scratch);
	attn_fast(&sh, q, k, v, first, rows - 1, b, scratch);
	attn_double(&sh, q, k, v, first, rows - 1, d);
	// the cache in two stretches (a fork's first rows in its parent's
	// store): rows below split from a copy, the others from the original,
	// give the same bits; the copy's other rows are poison
	uint16_t *k0 = malloc(kn * 2), *v0 = malloc(vn * 2);
	float *c = malloc(sizeof(float) * (size_t)(n_head * hdv)), *c2 = malloc(sizeof(float) * (size_t)(n_head * hdv));
	float *f32k = malloc(kn * 4), *f32v = malloc(vn * 4), *f32k0 = malloc(kn * 4), *f32v0 = malloc(vn * 4);
	for (size_t i = 0; i < kn; i++)
		f32k[i] = ad_fp16_to_f32(k[i]);
	for (size_t i = 0; i < vn; i++)
		f32v[i] = ad_fp16_to_f32(v[i]);
	const int splits[] = {0, first, first + 1, rows / 2, rows - 1, rows};
	for (int si = 0; si < 6; si++) {
		const int sp = splits[si];
		for (size_t i = 0; i < kn; i++) {
			k0[i] = i < sh.k_stride * (size_t)sp ? k[i] : 0x7e00; // NaN past the split
			f32k0[i] = i < sh.k_stride * (size_t)sp ? f32k[i] : NAN;
		}
		for (size_t i = 0; i < vn; i++) {
			v0[i] = i < sh.v_stride * (size_t)sp ? v[i] : 0x7e00;
			f32v0[i] = i < sh.v_stride * (size_t)sp ? f32v[i] : NAN;
		}
		attn_ref_split(&sh, q, k0, v0, k, v, sp, first, rows - 1, c, scratch);
		attn_fast_split(&sh, q, k0, v0, k, v, sp, first, rows - 1, c2, scratch);
		CHECK(!memcmp(c, a, sizeof(float) * (size_t)(n_head * hdv)) &&
		              !memcmp(c2, b, sizeof(float) * (size_t)(n_head * hdv)),
		      "split at %d of rows %d..%d: other bits", sp, first, rows - 1);
		attn_ref_f32(&sh, q, f32k, f32v, first, rows - 1, a, scratch);
		attn_ref_f32_split(&sh, q, f32k0, f32v0, f32k, f32v, sp, first, rows - 1, c, scratch);
		CHECK(!memcmp(c, a, sizeof(float) * (size_t)(n_head * hdv)), "fp32 split at %d: other bits", sp);
		attn_ref(&sh, q, k, v, first, rows - 1, a, scratch);
	}
	free(k0);
	free(v0);
	free(c);
	free(c2);
	free(f32k);
	free(f32v);
	free(f32k0);
	free(f32v0);
	double ef = 0, er = 0;
	for (int i = 0; i < n_head * hdv; i++) {
		double x = fabs(b[i] - d[i]), y = fabs(a[i] - d[i]);
		ef = x > ef || isnan(x) ? x : ef;
		er = y > er || isnan(y) ? y : er;
	}
	CHECK(ef < 2e-6, "fast: heads %d/%d hd %d/%d rows %d..%d cap %g: %g", n_head, n_head_kv, hd, hdv, first,
	      rows - 1, softcap, ef);
	CHECK(er < 2e-6, "ref: heads %d/%d hd %d/%d rows %d..%d cap %g: %g", n_head, n_head_kv, hd, hdv, first,
	      rows - 1, softcap, er);
	*worst_fast = ef > *worst_fast ? ef : *worst_fast;
	*worst_ref = er > *worst_ref ? er : *worst_ref;
	free(k);
	free(v);
	free(q);
	free(a);
	free(b);
	free(d);
	free(scratch);
}

// the shape of heads h (query, KV) and head dims dm (keys, values), each
// cache row padded by kpad and vpad fp16 values past its heads
static struct attn_shape
padded_shape(const int h[2], const int dm[2], int kpad, int vpad, float scale, float cap)
{
	return (struct attn_shape){
		h[0], h[1], dm[0], dm[1], (size_t)(h[1] * dm[0] + kpad), (size_t)(h[1] * dm[1] + vpad), scale, cap};
}

static void
test_random_shapes(void)
{
	static const int heads[][2] = {{8, 2}, {14, 2}, {9, 3}, {4, 4}, {4, 1}, {1, 1}, {16, 8}};
	static const int dims[][2] = {{64, 64},   {8, 8}, {12, 12}, {48, 48}, {16, 24},
	                              {128, 128}, {5, 3}, {16, 16}, {8, 16},  {16, 8}};
	// the fast path at its best (AVX-512 for heads of 8 or 16 where the
	// CPU has it), then kept to AVX2
	for (int isa = 0; isa < 1 + attn_have_avx512(); isa++) {
		double wf = 0, wr = 0;
		attn_isa = isa;
		for (int t = 0; t < 300; t++) {
			const int *h = heads[t % 7], *dm = dims[(t / 7) % 10];
			int rows = 1 + (int)((frand() + 1) * 150);
			int first = t % 3 == 0 ? (int)((frand() + 1) * 0.5 * (rows - 1)) : 0;
			float cap = t % 4 == 1 ? 5.0f : 0.0f;
			one(h[0], h[1], dm[0], dm[1], rows, first, cap, &wf, &wr);
		}
		printf("300 shapes: max |fast - double| %.3g, max |ref - double| %.3g (fast path %s)\n", wf, wr,
		       !attn_have_simd()                ? "plain C"
		       : isa == 0 && attn_have_avx512() ? "AVX-512 and AVX2"
		                                        : "AVX2");
	}
	attn_isa = 0;
}

// q·k scores: attn_fast's (both of its ways, for heads of up to 16
// dimensions) are attn_ref's bits, on every row count (the eight-row blocks
// and their remainders), window start and head layout
static void
test_scores_bits(void)
{
	static const int heads[][2] = {{8, 4}, {8, 2}, {9, 3}, {4, 4}, {4, 1}, {16, 2}, {6, 1}};
	static const int dims[] = {8, 16, 24, 12, 64, 5, 32, 128};
	int cases = 0, differ = 0;
	for (int t = 0; t < 300; t++) {
		const int *h = heads[t % 7], hd = dims[(t / 7) % 8];
		const int rows = 1 + t % 37 + (t % 5 == 0 ? 200 : 0), first = t % 3 == 0 ? rows / 3 : 0;
		struct attn_shape sh = {h[0], h[1], hd, hd, (size_t)(h[1] * hd + 3), (size_t)(h[1] * hd), 0.37f, 0};
		uint16_t *k = malloc(sizeof(uint16_t) * sh.k_stride * (size_t)rows);
		float *q = malloc(sizeof(float) * (size_t)(h[0] * hd));
		size_t ns = (size_t)h[0] * (size_t)(rows - first);
		float *a = malloc(sizeof(float) * ns), *b = malloc(sizeof(float) * ns), *c = malloc(sizeof(float) * ns);
		for (size_t i = 0; i < sh.k_stride * (size_t)rows; i++)
			k[i] = ad_f32_to_fp16(3 * frand());
		for (int i = 0; i < h[0] * hd; i++)
			q[i] = 3 * frand();
		attn_scores(&sh, q, k, first, rows - 1, 0, a);
		attn_path = 1;
		attn_scores(&sh, q, k, first, rows - 1, 1, b);
		attn_path = 0;
		attn_isa = t % 2; // by size: AVX-512 (where the CPU has it) or AVX2
		attn_scores(&sh, q, k, first, rows - 1, 1, c);
		attn_isa = 0;
		cases++;
		if (memcmp(a, b, sizeof(float) * ns) || memcmp(a, c, sizeof(float) * ns)) {
			differ++;
			CHECK(0,
			      "heads %d/%d hd %d rows %d..%d: scores differ from attn_ref's (four by two: %s, by size: %s)",
			      h[0], h[1], hd, first, rows - 1, memcmp(a, b, sizeof(float) * ns) ? "differ" : "same",
			      memcmp(a, c, sizeof(float) * ns) ? "differ" : "same");
		}
		free(k);
		free(q);
		free(a);
		free(b);
		free(c);
	}
	printf("%d shapes: scores of attn_fast and attn_ref differ in %d\n", cases, differ);
}

// one row: the output is that row's value
static void
test_single_row(void)
{
	struct attn_shape sh = {2, 1, 8, 8, 8, 8, 0.35f, 0};
	uint16_t k[8 * 3], v[8 * 3];
	for (int i = 0; i < 24; i++) {
		k[i] = ad_f32_to_fp16(frand());
		v[i] = ad_f32_to_fp16(frand());
	}
	float q[16], out[16], out2[16], *scratch = malloc(sizeof(float) * attn_scratch_floats(&sh, 3));
	for (int i = 0; i < 16; i++)
		q[i] = frand();
	attn_fast(&sh, q, k, v, 2, 2, out, scratch);
	attn_ref(&sh, q, k, v, 2, 2, out2, scratch);
	for (int h = 0; h < 2; h++)
		for (int d = 0; d < 8; d++) {
			CHECK(out[h * 8 + d] == ad_fp16_to_f32(v[16 + d]));
			CHECK(out2[h * 8 + d] == ad_fp16_to_f32(v[16 + d]));
		}
	free(scratch);
}

// random keys and values of rows rows (k, v), and the same below split in
// k0 and v0, NaN past it: the first stretch past the split is never read
static void
stretches(const struct attn_shape *sh, int rows, int split, uint16_t *k, uint16_t *v, uint16_t *k0, uint16_t *v0)
{
	const size_t kn = sh->k_stride * (size_t)rows, vn = sh->v_stride * (size_t)rows;
	for (size_t i = 0; i < kn; i++)
		k0[i] = k[i] = ad_f32_to_fp16(3 * frand());
	for (size_t i = 0; i < vn; i++)
		v0[i] = v[i] = ad_f32_to_fp16(frand());
	for (size_t i = sh->k_stride * (size_t)split; i < kn; i++)
		k0[i] = 0x7e00;
	for (size_t i = sh->v_stride * (size_t)split; i < vn; i++)
		v0[i] = 0x7e00;
}

// columns of one sequence in one call (attn_fast_cols, attn_ref_cols): each
// column's output has the bits of a call for it alone, on both paths and
// both ways to the scores, with columns that end in any row of an
// eight-row block, a common window start, the cache in two stretches, and
// strides between the columns' queries and outputs wider than a column
static void
test_columns(void)
{
	static const int heads[][2] = {{8, 4}, {14, 2}, {9, 3}, {4, 1}, {16, 8}, {2, 2}};
	static const int dims[][2] = {{8, 8}, {64, 64}, {16, 24}, {12, 12}, {5, 3}, {32, 8}, {16, 16}, {8, 16}};
	int cases = 0, differ = 0;
	for (int t = 0; t < 288; t++) {
		const int *h = heads[t % 6], *dm = dims[(t / 6) % 8], nc = 1 + t % ATTN_COLS_MAX;
		const int rows = nc + 1 + (int)((frand() + 1) * 90), first = t % 4 == 3 ? (rows - nc) / 2 : 0;
		const int split = t % 5 == 0 ? 0 : (int)((frand() + 1) * 0.5 * rows);
		struct attn_shape sh = padded_shape(h, dm, 1, 7, 0.29f, t % 7 == 2 ? 4.0f : 0.0f);
		const size_t qs = (size_t)h[0] * dm[0] + 3, os = (size_t)h[0] * dm[1] + 5;
		const size_t kn = sh.k_stride * (size_t)rows, vn = sh.v_stride * (size_t)rows;
		uint16_t *k = malloc(kn * 2), *v = malloc(vn * 2), *k0 = malloc(kn * 2), *v0 = malloc(vn * 2);
		float *q = malloc(sizeof(float) * qs * nc), *a = calloc(os * nc, sizeof(float));
		float *b = calloc(os * nc, sizeof(float));
		float *scratch = malloc(sizeof(float) * attn_cols_scratch_floats(&sh, rows, nc));
		int last[ATTN_COLS_MAX];
		stretches(&sh, rows, split, k, v, k0, v0);
		for (size_t i = 0; i < qs * nc; i++)
			q[i] = 3 * frand();
		// the positions of a verify step, and in every fourth case ones
		// that skip (columns need not be consecutive to share a call)
		for (int c = 0; c < nc; c++)
			last[c] = rows - nc + c - (t % 4 == 1 && c % 2 == 0 && c > 0 ? 1 : 0);
		// attn_ref; attn_fast at its best, kept to AVX2, four by two
		for (int way = 0; way < 4; way++) {
			attn_path = way == 3;
			attn_isa = way == 2;
			for (int c = 0; c < nc; c++)
				(way ? attn_fast_split : attn_ref_split)(&sh, q + (size_t)c * qs, k0, v0, k, v, split,
				                                         first, last[c], a + (size_t)c * os, scratch);
			(way ? attn_fast_cols : attn_ref_cols)(&sh, q, qs, k0, v0, k, v, split, first, last, nc, b, os,
			                                       scratch);
			cases++;
			int bad = -1;
			for (int c = 0; c < nc && bad < 0; c++)
				if (memcmp(a + (size_t)c * os, b + (size_t)c * os,
				           sizeof(float) * (size_t)h[0] * dm[1]))
					bad = c;
			if (bad >= 0) {
				differ++;
				CHECK(0,
				      "heads %d/%d hd %d/%d, %d columns to rows %d..%d from %d (split %d), %s: column %d "
				      "differs from its own call",
				      h[0], h[1], dm[0], dm[1], nc, last[0], last[nc - 1], first, split,
				      way == 0   ? "attn_ref"
				      : way == 1 ? "attn_fast"
				      : way == 2 ? "attn_fast, AVX2"
				                 : "attn_fast four by two",
				      bad);
			}
		}
		attn_path = 0;
		attn_isa = 0;
		free(k);
		free(v);
		free(k0);
		free(v0);
		free(q);
		free(a);
		free(b);
		free(scratch);
	}
	printf("%d cases of up to %d columns: %d differ from a call per column\n", cases, ATTN_COLS_MAX, differ);
}

// Heads of 24 to 256 dimensions (value heads a multiple of 64; 48 takes
// the AVX2 path both times): the AVX-512 paths (attn512w_col for one
// column, attn512w_cols for a prefill chunk's 9 to 16, where the CPU has
// them) give the AVX2 path's bits, on groups of one to twelve query heads
// (four at a time, so the last set short), rows past several P·V chunks,
// window starts, the cache in two stretches and soft-caps; the columns of
// a chunk end in consecutive rows, or every other one a row short
static void
test_wide_bits(void)
{
	static const int heads[][2] = {{9, 3}, {14, 2}, {32, 8}, {4, 1}, {8, 8}, {12, 1}, {6, 3}};
	static const int dims[][2] = {{64, 64}, {128, 128}, {24, 64}, {32, 128}, {80, 64}, {256, 256}, {64, 48}};
	if (!attn_have_avx512()) {
		printf("no AVX-512 here (or ANEDVD_SIMD caps it): the AVX-512 paths of wide heads not run\n");
		return;
	}
	int cases = 0, differ = 0, ccases = 0, cdiffer = 0;
	for (int t = 0; t < 140; t++) {
		const int *h = heads[t % 7], *dm = dims[(t / 7) % 7];
		const int nc = ATTN_WIDE_COLS + 1 + t % (ATTN_COLS_MAX - ATTN_WIDE_COLS);
		const int rows = nc + (int)((frand() + 1) * (t % 3 == 0 ? 400 : 60));
		const int first = t % 4 == 1 ? (int)((frand() + 1) * 0.5 * (rows - nc)) : 0;
		const int split = t % 5 == 0 ? 0 : (int)((frand() + 1) * 0.5 * rows);
		struct attn_shape sh = padded_shape(h, dm, t % 2 ? 8 : 0, t % 3 ? 0 : 24, 1.0f / sqrtf((float)dm[0]),
		                                    t % 6 == 5 ? 6.0f : 0.0f);
		const size_t kn = sh.k_stride * (size_t)rows, vn = sh.v_stride * (size_t)rows;
		const size_t no = (size_t)h[0] * dm[1], nq = (size_t)h[0] * dm[0];
		uint16_t *k = malloc(kn * 2), *v = malloc(vn * 2), *k0 = malloc(kn * 2), *v0 = malloc(vn * 2);
		float *q = malloc(sizeof(float) * nq * nc), *a = malloc(sizeof(float) * no * nc);
		float *b = malloc(sizeof(float) * no * nc),
		      *scratch = malloc(sizeof(float) * attn_cols_scratch_floats(&sh, rows, nc));
		int last[ATTN_COLS_MAX];
		stretches(&sh, rows, split, k, v, k0, v0);
		for (size_t i = 0; i < nq * nc; i++)
			q[i] = 3 * frand();
		attn_isa = 0;
		attn_fast_split(&sh, q, k0, v0, k, v, split, first, rows - 1, a, scratch);
		attn_isa = 1;
		attn_fast_split(&sh, q, k0, v0, k, v, split, first, rows - 1, b, scratch);
		cases++;
		if (memcmp(a, b, sizeof(float) * no)) {
			differ++;
			CHECK(0, "heads %d/%d hd %d/%d rows %d..%d (split %d, cap %g): AVX-512 and AVX2 differ", h[0],
			      h[1], dm[0], dm[1], first, rows - 1, split, sh.softcap);
		}
		for (int c = 0; c < nc; c++)
			last[c] = rows - nc + c - (t % 4 == 2 && c % 2 ? 1 : 0);
		attn_isa = 0;
		attn_fast_cols(&sh, q, nq, k0, v0, k, v, split, first, last, nc, a, no, scratch);
		attn_isa = 1;
		attn_fast_cols(&sh, q, nq, k0, v0, k, v, split, first, last, nc, b, no, scratch);
		attn_isa = 0;
		ccases++;
		if (memcmp(a, b, sizeof(float) * no * nc)) {
			cdiffer++;
			CHECK(0,
			      "heads %d/%d hd %d/%d, %d columns to rows %d..%d from %d (split %d, cap %g): AVX-512 and "
			      "AVX2 differ",
			      h[0], h[1], dm[0], dm[1], nc, last[0], last[nc - 1], first, split, sh.softcap);
		}
		free(k);
		free(v);
		free(k0);
		free(v0);
		free(q);
		free(a);
		free(b);
		free(scratch);
	}
	printf("%d one-column cases of wide heads: %d differ between AVX-512 and AVX2\n", cases, differ);
	printf("%d cases of %d to %d columns of wide heads: %d differ between AVX-512 and AVX2\n", ccases,
	       ATTN_WIDE_COLS + 1, ATTN_COLS_MAX, cdiffer);
}

// a column's rows in parts (attn_part, attn_merge): the merged output is
// the whole range's within a few 1e-7 of the largest value, on both paths
// where they have the parts, parts of any length (one row too), the cache
// in two stretches, soft-caps; one part's lse is log sum e^(score) in double
static void
test_parts(void)
{
	static const int heads[][2] = {{9, 3}, {14, 2}, {32, 8}, {3, 1}, {6, 3}};
	static const int dims[][2] = {{64, 64}, {128, 128}, {24, 64}, {64, 48}, {40, 40}};
	const struct attn_shape small = {4, 1, 8, 8, 8, 8, 0.3f, 0};
	if (attn_have_avx512())
		CHECK(!attn_part_ok(&small), "heads of 8 have no parts");
	if (!attn_part_ok(&(struct attn_shape){9, 3, 64, 64, 192, 192, 0.125f, 0})) {
		printf("no SIMD here (or ANEDVD_SIMD=ref): attention in parts not run\n");
		return;
	}
	double worst = 0, worst_lse = 0;
	int cases = 0;
	for (int t = 0; t < 100; t++) {
		const int *h = heads[t % 5], *dm = dims[(t / 5) % 5];
		const int rows = 2 + (int)((frand() + 1) * (t % 3 == 0 ? 900 : 150));
		const int first = t % 4 == 1 ? (int)((frand() + 1) * 0.25 * rows) : 0;
		const int split = t % 5 == 0 ? 0 : (int)((frand() + 1) * 0.5 * rows);
		struct attn_shape sh =
			padded_shape(h, dm, t % 2 ? 8 : 0, 0, 1.0f / sqrtf((float)dm[0]), t % 6 == 5 ? 6.0f : 0.0f);
		if (!attn_part_ok(&sh))
			continue;
		const size_t kn = sh.k_stride * (size_t)rows, vn = sh.v_stride * (size_t)rows;
		const size_t no = (size_t)h[0] * dm[1], nq = (size_t)h[0] * dm[0];
		uint16_t *k = malloc(kn * 2), *v = malloc(vn * 2), *k0 = malloc(kn * 2), *v0 = malloc(vn * 2);
		float *q = malloc(sizeof(float) * nq), *a = malloc(sizeof(float) * no),
		      *po = malloc(sizeof(float) * no * ATTN_PARTS_MAX), *b = malloc(sizeof(float) * no),
		      *lse = malloc(sizeof(float) * (size_t)h[0] * ATTN_PARTS_MAX),
		      *scratch = malloc(sizeof(float) * attn_scratch_floats(&sh, rows));
		stretches(&sh, rows, split, k, v, k0, v0);
		for (size_t i = 0; i < nq; i++)
			q[i] = 3 * frand();
		attn_fast_split(&sh, q, k0, v0, k, v, split, first, rows - 1, a, scratch);
		// parts: uneven lengths, the last of one row when t is odd
		const int n = rows - first, parts = 1 + t % 5 < n ? 1 + t % 5 : n;
		int at = first;
		for (int i = 0; i < parts; i++) {
			int end = i == parts - 1 ? rows - 1 : at + (n - (at - first)) / (parts - i) - (t % 2 && i == 0);
			if (end < at)
				end = at;
			attn_part(&sh, q, k0, v0, k, v, split, at, end, po + (size_t)i * no, lse + (size_t)i * h[0],
			          scratch);
			at = end + 1;
		}
		attn_merge(&sh, po, lse, parts, b);
		double mx = 0, md = 0;
		for (size_t i = 0; i < no; i++) {
			mx = fmax(mx, fabs(a[i]));
			md = fmax(md, fabs((double)a[i] - b[i]));
		}
		worst = fmax(worst, md / (mx > 0 ? mx : 1));
		cases++;
		CHECK(md <= 5e-6 * mx, "heads %d/%d hd %d/%d rows %d..%d in %d parts (split %d, cap %g): %g of %g",
		      h[0], h[1], dm[0], dm[1], first, rows - 1, parts, split, sh.softcap, md, mx);
		// one part over every row: its lse against double
		attn_part(&sh, q, k0, v0, k, v, split, first, rows - 1, po, lse, scratch);
		const int hd = dm[0], group = h[0] / h[1];
		for (int hh = 0; hh < h[0]; hh++) {
			double m = -INFINITY, e = 0, *sc = malloc(sizeof(double) * (size_t)rows);
			for (int j = first; j < rows; j++) {
				const uint16_t *kr =
					(j < split ? k0 : k) + (size_t)j * sh.k_stride + (size_t)(hh / group) * hd;
				double d = 0;
				for (int i = 0; i < hd; i++)
					d += (double)q[hh * hd + i] * ad_fp16_to_f32(kr[i]);
				d *= sh.scale;
				if (sh.softcap > 0)
					d = tanh(d / sh.softcap) * sh.softcap;
				sc[j] = d;
				m = d > m ? d : m;
			}
			for (int j = first; j < rows; j++)
				e += exp(sc[j] - m);
			const double want = m + log(e);
			worst_lse = fmax(worst_lse, fabs(lse[hh] - want));
			CHECK(fabs(lse[hh] - want) <= 1e-4 * fmax(1, fabs(want)), "lse of head %d: %g, double %g", hh,
			      lse[hh], want);
			free(sc);
		}
		free(k), free(v), free(k0), free(v0), free(q), free(a), free(po), free(b), free(lse), free(scratch);
	}
	printf("%d cases in parts: worst %.3g of the largest value; lse within %.3g\n", cases, worst, worst_lse);
	CHECK(cases >= 60, "%d cases", cases);
}

// ANEDVD_SIMD caps the paths as it caps the emu's (ctest runs this program
// once without it and once with avx2)
static void
test_cap(void)
{
	const char *cap = getenv("ANEDVD_SIMD");
	if (cap && !strcmp(cap, "ref"))
		CHECK(!attn_have_simd() && !attn_have_avx512(), "ANEDVD_SIMD=ref: the fast path still has SIMD");
	else if (cap && !strcmp(cap, "avx2"))
		CHECK(!attn_have_avx512() && attn_have_simd() == ad_cpu_simd(),
		      "ANEDVD_SIMD=avx2: AVX-512 %d, AVX2 %d on a CPU at level %d", attn_have_avx512(),
		      attn_have_simd(), ad_cpu_level());
	else
		CHECK(attn_have_avx512() == (ad_cpu_level() >= AD_SIMD_AVX512) && attn_have_simd() == ad_cpu_simd(),
		      "no cap: AVX-512 %d, AVX2 %d on a CPU at level %d", attn_have_avx512(), attn_have_simd(),
		      ad_cpu_level());
	// the path named for a decode step of 9/3 heads of 64 is the one the cap allows
	const struct attn_shape sh = {9, 3, 64, 64, 192, 192, 0.125f, 0};
	const char *way = attn_fast_path(&sh, 1);
	CHECK(!strcmp(way, attn_have_avx512() ? "AVX-512, a column at a time"
	                   : attn_have_simd() ? "AVX2"
	                                      : "plain C"),
	      "9/3 heads of 64, one column: \"%s\"", way);
	const char *chunk = attn_fast_path(&sh, ATTN_COLS_MAX);
	CHECK(!strcmp(chunk, attn_have_avx512() ? "AVX-512, the columns together"
	                     : attn_have_simd() ? "AVX2"
	                                        : "plain C"),
	      "9/3 heads of 64, %d columns: \"%s\"", ATTN_COLS_MAX, chunk);
	printf("ANEDVD_SIMD=%s: attention paths AVX-512 %d, AVX2 %d; 9/3 heads of 64: %s\n", cap ? cap : "",
	       attn_have_avx512(), attn_have_simd(), way);
}

int
main(void)
{
	T_RUN(test_cap);
	T_RUN(test_random_shapes);
	T_RUN(test_scores_bits);
	T_RUN(test_single_row);
	T_RUN(test_columns);
	T_RUN(test_wide_bits);
	T_RUN(test_parts);
	return t_done();
}
