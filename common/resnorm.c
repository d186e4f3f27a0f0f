#include "resnorm.h"

#include <math.h>

void
ad_resnorm(const struct ad_resnorm *r, int ncols, const float *y, size_t ld_y, const float *x_in, float *x_out,
           float *xn, size_t ld_xn)
{
	const int E = r->E;
	for (int c = 0; c < ncols; c++) {
		const float *xi = x_in + (size_t)c * E;
		float *xo = x_out + (size_t)c * E;
		if (y) {
			const float *yc = y + (size_t)c * ld_y;
			if (r->bias || r->post) {
				// p in the output row first: xo may be xi, so keep x apart
				float p[E];
				for (int i = 0; i < E; i++)
					p[i] = r->bias ? yc[i] + r->bias[i] : yc[i];
				if (r->post)
					ad_rmsnorm(p, p, r->post, E, r->eps);
				for (int i = 0; i < E; i++)
					xo[i] = xi[i] + p[i];
			} else {
				for (int i = 0; i < E; i++)
					xo[i] = xi[i] + yc[i];
			}
		} else if (xo != xi) {
			for (int i = 0; i < E; i++)
				xo[i] = xi[i];
		}
		if (r->w && xn)
			ad_rmsnorm(xn + (size_t)c * ld_xn, xo, r->w, E, r->eps);
	}
}
