// deltanet.c - the gated delta-net token step (deltanet.h).
//
// Where fp32 leaves a choice the choice is ggml's CPU backend's: the conv
// sums its taps oldest first with one rounding per multiply-add; the L2
// norm sums the squares in double and divides by max(sqrtf(sum), eps);
// the state is scaled by exp(g) before δ is taken; the output is Sᵀq
// times 1/sqrt(d) (q itself is not scaled); the gated norm is RMSNorm
// (double sum, mean rounded to float) times the weight, then times
// silu(z). The dot products are ad_dot's 8-lane order (ggml's order on
// AVX-512 differs in the last bits; the fixture's tolerance covers it).
#include "deltanet.h"
#include "model.h"

#include <math.h>
#include <string.h>

#include "numeric.h"

struct dn_layer
dn_layer_of(const struct model_hparams *hp, const float *conv_w, const float *dt_bias, const float *a,
            const float *norm)
{
	const int d = (int)hp->ssm_d_state;
	return (struct dn_layer){d,
	                         (int)hp->ssm_n_group,
	                         (int)hp->ssm_dt_rank,
	                         (int)hp->n_conv,
	                         (int)((2 * hp->ssm_n_group + hp->ssm_dt_rank) * d),
	                         hp->rms_eps,
	                         conv_w,
	                         dt_bias,
	                         a,
	                         norm};
}

size_t
dn_state_floats(const struct dn_layer *l)
{
	return (size_t)(l->n_conv - 1) * (size_t)l->channels + (size_t)l->n_v * (size_t)l->d * (size_t)l->d;
}

size_t
dn_scratch_floats(const struct dn_layer *l)
{
	return (size_t)l->channels;
}

// x /= max(|x|, eps), the norm summed in double
static void
l2norm(float *x, int n, float eps)
{
	double sum = 0;
	for (int i = 0; i < n; i++)
		sum += (double)(x[i] * x[i]);
	const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
	for (int i = 0; i < n; i++)
		x[i] *= scale;
}

void
dn_token(const struct dn_layer *l, const float *mix, const float *z, const float *beta_in, const float *alpha_in,
         const float *in, float *out, float *o, float *scratch)
{
	const int d = l->d, C = l->channels, K = l->n_conv;
	const size_t tail = (size_t)(K - 1) * (size_t)C, dd = (size_t)d * (size_t)d;

	// the conv over the window (the state's K-1 inputs, then this one), SiLU
	float *c = scratch;
	for (int ch = 0; ch < C; ch++) {
		const float *w = l->conv_w + (size_t)ch * K;
		float sum = 0;
		for (int k = 0; k < K - 1; k++)
			sum = fmaf(in ? in[(size_t)k * C + ch] : 0.0f, w[k], sum);
		sum = fmaf(mix[ch], w[K - 1], sum);
		c[ch] = ad_silu(sum);
	}
	// the window moves on by one input
	if (K > 2) {
		if (in)
			memmove(out, in + C, (size_t)(K - 2) * (size_t)C * sizeof(float));
		else
			memset(out, 0, (size_t)(K - 2) * (size_t)C * sizeof(float));
	}
	memcpy(out + (size_t)(K - 2) * C, mix, (size_t)C * sizeof(float));

	float *q = c, *k = c + (size_t)l->n_k * d, *v = c + 2 * (size_t)l->n_k * d;
	for (int h = 0; h < l->n_k; h++) {
		l2norm(q + (size_t)h * d, d, l->eps);
		l2norm(k + (size_t)h * d, d, l->eps);
	}
	const float scale = 1.0f / sqrtf((float)d);
	for (int j = 0; j < l->n_v; j++) {
		const float beta = 1.0f / (1.0f + expf(-beta_in[j]));
		const float sp = alpha_in[j] + l->dt_bias[j];
		const float g = (sp > 20.0f ? sp : logf(1.0f + expf(sp))) * l->a[j];
		const float eg = expf(g);
		const float *qh = q + (size_t)(j % l->n_k) * d, *kh = k + (size_t)(j % l->n_k) * d;
		const float *vh = v + (size_t)j * d;
		const float *si = in ? in + tail + (size_t)j * dd : NULL;
		float *so = out + tail + (size_t)j * dd, *oh = o + (size_t)j * d;
		// column by column: each column of S is updated on its own
		for (int col = 0; col < d; col++) {
			float *m = so + (size_t)col * d;
			if (si)
				for (int i = 0; i < d; i++)
					m[i] = si[(size_t)col * d + i] * eg;
			else
				memset(m, 0, (size_t)d * sizeof(float));
			const float delta = (vh[col] - ad_dot(m, kh, d)) * beta;
			for (int i = 0; i < d; i++)
				m[i] = fmaf(kh[i], delta, m[i]);
			oh[col] = ad_dot(m, qh, d) * scale;
		}
		// RMSNorm(o)·norm ⊙ silu(z)
		ad_rmsnorm(oh, oh, l->norm, d, l->eps);
		const float *zh = z + (size_t)j * d;
		for (int i = 0; i < d; i++)
			oh[i] *= ad_silu(zh[i]);
	}
}
