// test-numeric.c - common/numeric.h against plain loops that spell its
// documented arithmetic out: the 8-lane dot product (lane j sums elements
// i = j mod 8 with fmaf, folded (l0+l4 + l2+l6) + (l1+l5 + l3+l7), the tail
// after), the matrix-vector product row by row, RMSNorm's double sum, the
// GELU table's bits, bit for bit, and RoPE's pairs. The reference engine and
// the fast one both compute with these, so a change of order here would
// pass their comparison with each other; this test is what holds the order.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fp16.h"
#include "numeric.h"
#include "t.h"

static uint64_t rng = 0x2545f4914f6cdd1du;

static float
frand(void) // uniform in [-1, 1)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (float)((double)(rng >> 11) / (double)(1ull << 52) - 1.0);
}

// the documented order, one scalar at a time
static float
dot_spelled(const float *a, const float *b, int64_t n)
{
	float l[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			l[j] = fmaf(a[i + j], b[i + j], l[j]);
	float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
	for (; i < n; i++)
		s = fmaf(a[i], b[i], s);
	return s;
}

static int
same(float x, float y)
{
	return !memcmp(&x, &y, sizeof x);
}

static void
test_dot(void)
{
	static float a[1024], b[1024];
	int differs_from_sequential = 0;
	for (int n = 0; n <= 1000; n += (n < 40 ? 1 : 37)) {
		for (int rep = 0; rep < 8; rep++) {
			for (int i = 0; i < n; i++) {
				// values of mixed magnitude, so that the order shows in the bits
				a[i] = frand() * (i % 3 ? 1.0f : 1e3f);
				b[i] = frand();
			}
			float got = ad_dot(a, b, n), want = dot_spelled(a, b, n);
			CHECK(same(got, want), "n %d: ad_dot %a, spelled-out order %a", n, got, want);
			float seq = 0;
			for (int i = 0; i < n; i++)
				seq = fmaf(a[i], b[i], seq);
			differs_from_sequential += !same(got, seq);
		}
	}
	// the inputs are such that the order matters (else the checks above
	// would pass whatever the order)
	CHECK(differs_from_sequential > 100, "only %d dot products differ from a sequential sum",
	      differs_from_sequential);
}

static void
test_matvec(void)
{
	static float w[37 * 264], x[264], y[37];
	const int n_in[] = {264, 256, 13, 8, 1};
	for (size_t k = 0; k < sizeof n_in / sizeof *n_in; k++) {
		for (int n_out = 1; n_out <= 37; n_out += 4) {
			for (int i = 0; i < n_out * n_in[k]; i++)
				w[i] = frand() * 10.0f;
			for (int i = 0; i < n_in[k]; i++)
				x[i] = frand();
			ad_matvec(y, w, x, n_in[k], n_out);
			for (int r = 0; r < n_out; r++) {
				float want = dot_spelled(w + (size_t)r * n_in[k], x, n_in[k]);
				CHECK(same(y[r], want), "n_in %d n_out %d row %d: %a, want %a", n_in[k], n_out, r, y[r],
				      want);
			}
		}
	}
}

static void
test_rmsnorm(void)
{
	static float x[777], w[777], y[777];
	for (int n = 1; n <= 777; n += 64) {
		for (int i = 0; i < n; i++) {
			x[i] = frand() * 50.0f;
			w[i] = frand();
		}
		double ss = 0;
		for (int i = 0; i < n; i++)
			ss += (double)(x[i] * x[i]);
		float scale = 1.0f / sqrtf((float)(ss / n) + 1e-5f);
		ad_rmsnorm(y, x, w, n, 1e-5f);
		for (int i = 0; i < n; i++)
			CHECK(same(y[i], (x[i] * scale) * w[i]), "n %d at %d", n, i);
		ad_rmsnorm(x, x, w, n, 1e-5f); // in place
		CHECK(!memcmp(x, y, (size_t)n * sizeof *x), "n %d: in place differs", n);
	}
}

static void
test_gelu(void)
{
	ad_gelu_init();
	ad_gelu_init(); // twice is harmless
	int checked = 0;
	for (float x = -12.0f; x < 12.0f; x += 0.0137f) {
		float got = ad_gelu(x), want;
		if (x <= -10.0f)
			want = 0.0f;
		else if (x >= 10.0f)
			want = x;
		else {
			float h = ad_fp16_to_f32(ad_f32_to_fp16(x));
			float g = 0.5f * h *
			          (1.0f + tanhf(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
			want = ad_fp16_to_f32(ad_f32_to_fp16(g));
			// the result is an fp16 value
			CHECK(same(got, ad_fp16_to_f32(ad_f32_to_fp16(got))), "gelu(%g) = %a is not an fp16 value", x,
			      got);
		}
		CHECK(same(got, want), "gelu(%g) = %a, want %a", x, got, want);
		checked++;
	}
	CHECK(checked > 1000, "%d points", checked);
	CHECK_NEAR(ad_gelu(1.0f), 0.841192f, 1e-3); // GELU-tanh(1), to fp16
}

static void
test_rope(void)
{
	const int64_t hd = 12, n_rot = 8, heads = 3;
	float cs[8], v[36], orig[36];
	for (int i = 0; i < 4; i++) {
		float t = 0.3f * (float)(i + 1);
		cs[2 * i] = cosf(t);
		cs[2 * i + 1] = sinf(t);
	}
	for (int neox = 0; neox <= 1; neox++) {
		for (int i = 0; i < 36; i++)
			v[i] = orig[i] = frand();
		ad_rope(v, heads, hd, n_rot, neox, cs);
		for (int64_t h = 0; h < heads; h++) {
			const float *p = orig + h * hd, *q = v + h * hd;
			for (int i = 0; i < 4; i++) {
				int i0 = neox ? i : 2 * i, i1 = neox ? i + 4 : 2 * i + 1;
				float c = cs[2 * i], s = cs[2 * i + 1];
				// (the compiler may contract either side into a fused
				// multiply-add: the pairing is what is checked here)
				CHECK(fabsf(q[i0] - (p[i0] * c - p[i1] * s)) <= 1e-6f, "neox %d head %d pair %d", neox,
				      (int)h, i);
				CHECK(fabsf(q[i1] - (p[i0] * s + p[i1] * c)) <= 1e-6f, "neox %d head %d pair %d", neox,
				      (int)h, i);
			}
			for (int64_t i = n_rot; i < hd; i++) // past n_rot: untouched
				CHECK(same(q[i], p[i]), "neox %d head %d: value %d moved", neox, (int)h, (int)i);
		}
	}
}

int
main(void)
{
	T_RUN(test_dot);
	T_RUN(test_matvec);
	T_RUN(test_rmsnorm);
	T_RUN(test_gelu);
	T_RUN(test_rope);
	return t_done();
}
