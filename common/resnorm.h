// resnorm.h - the CPU step between two kernels of a layer: the residual
// add and the next RMSNorm.
//
// For each column c of ncols (rows of E floats):
//   p        = y[c] + bias                  (bias: optional)
//   p        = rmsnorm(p, post)             (post: optional, gemma's post-norms)
//   x_out[c] = x_in[c] + p                  (no y: x_out[c] = x_in[c])
//   xn[c]    = rmsnorm(x_out[c], w)         (no w: no xn)
// in the reference engine's arithmetic (ad_rmsnorm: the squares summed in
// double, in order; the scale applied before the weight), so the step gives
// the same bits wherever it runs: in the cpu-worker between two kernel
// calls, or in the ane-worker between two kernels of one call (a fused
// call: dataplane.h's DP_RESNORM step). x_out may be x_in; y and xn are
// [ncols][ld] with ld >= E. No allocation, no failure.
#ifndef AD_RESNORM_H
#define AD_RESNORM_H

#include <stddef.h>
#include <stdint.h>

#include "numeric.h" // ad_rmsnorm

struct ad_resnorm {
	int E;
	float eps;
	const float *bias, *post, *w; // [E] each, or NULL
};

void ad_resnorm(const struct ad_resnorm *r, int ncols, const float *y, size_t ld_y, const float *x_in, float *x_out,
                float *xn, size_t ld_xn);

#endif
