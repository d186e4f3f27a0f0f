#include "numeric.h"

#include <pthread.h>

void
ad_matvec(float *y, const float *w, const float *x, int64_t n_in, int64_t n_out)
{
	int64_t r = 0;
	if (n_in % 8 == 0) {
		for (; r + 4 <= n_out; r += 4) {
			const float *w0 = w + r * n_in, *w1 = w0 + n_in, *w2 = w1 + n_in, *w3 = w2 + n_in;
			ad_v8f a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
			for (int64_t i = 0; i < n_in; i += 8) {
				ad_v8f xv = ad_load8(x + i);
				a0 = ad_madd8(ad_load8(w0 + i), xv, a0);
				a1 = ad_madd8(ad_load8(w1 + i), xv, a1);
				a2 = ad_madd8(ad_load8(w2 + i), xv, a2);
				a3 = ad_madd8(ad_load8(w3 + i), xv, a3);
			}
			y[r] = ad_fold8(a0);
			y[r + 1] = ad_fold8(a1);
			y[r + 2] = ad_fold8(a2);
			y[r + 3] = ad_fold8(a3);
		}
	}
	for (; r < n_out; r++)
		y[r] = ad_dot(w + r * n_in, x, n_in);
}

void
ad_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps)
{
	// eight lanes of double sums (lane k: i = k mod 8) folded in a fixed
	// order, the tail after them: eight chains of adds, not one (3 cycles an
	// element in one chain, 0.5 us of a 576-wide norm here, twice a layer)
	double l[8] = {0};
	int64_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int k = 0; k < 8; k++)
			l[k] += (double)(x[i + k] * x[i + k]);
	double ss = ((l[0] + l[4]) + (l[1] + l[5])) + ((l[2] + l[6]) + (l[3] + l[7]));
	for (; i < n; i++)
		ss += (double)(x[i] * x[i]);
	float mean = (float)(ss / (double)n);
	float scale = 1.0f / sqrtf(mean + eps);
	for (i = 0; i < n; i++)
		y[i] = (x[i] * scale) * w[i];
}

static float
gelu_tanh(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
}

float ad_gelu_table[1 << 16];
static pthread_once_t gelu_once = PTHREAD_ONCE_INIT;

static void
gelu_fill(void)
{
	for (int i = 0; i < 1 << 16; i++)
		ad_gelu_table[i] = ad_fp16_to_f32(ad_f32_to_fp16(gelu_tanh(ad_fp16_to_f32((uint16_t)i))));
}

void
ad_gelu_init(void)
{
	pthread_once(&gelu_once, gelu_fill);
}
