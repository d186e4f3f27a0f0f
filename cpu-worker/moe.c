// moe.c - routed experts grouped by expert, weights dequantised by blocks.
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dequant.h"
#include "numeric.h"
#include "wtype.h"

#define ROWS 16 // rows dequantised at a time

struct moe {
	int width, E, ne, k, fe;
	int norm;       // renormalise the chosen experts' weights
	int sigmoid;    // lfm2moe: a sigmoid per expert instead of the softmax
	float *probs;   // [ne]
	float *bias;    // [ne]: the layer's selection bias (exp_probs_b), if it has one
	int *chosen;    // [width][k]
	float *w;       // [width][k]
	int *slots;     // (column, rank) pairs of one expert, as column * k + rank
	float *hg, *hu; // [width * k][fe]
	float *eo;      // [width * k][E]
	float *rows;    // [ROWS][max(E, fe)]
};

void
moe_free(struct moe *mo)
{
	if (!mo)
		return;
	free(mo->probs);
	free(mo->bias);
	free(mo->chosen);
	free(mo->w);
	free(mo->slots);
	free(mo->hg);
	free(mo->hu);
	free(mo->eo);
	free(mo->rows);
	free(mo);
}

static int
check_rows(const struct model_tensor *t, int64_t n_in, char *err)
{
	size_t rb;
	if (!ad_type_supported(t->type) || ad_type_row_bytes(t->type, n_in, &rb) || n_in % ad_type_block_size(t->type))
		return ad_err(err, "%s: rows of %lld %s values cannot be dequantised one by one", t->name,
		              (long long)n_in, ad_type_name(t->type));
	return 0;
}

struct moe *
moe_new(const struct model *m, int width, char *err)
{
	const struct model_hparams *hp = &m->hp;
	struct moe *mo = calloc(1, sizeof *mo);
	if (!mo)
		return ad_err(err, "out of memory"), NULL;
	mo->width = width;
	mo->E = (int)hp->n_embd;
	mo->ne = (int)hp->n_expert;
	mo->k = (int)(hp->n_expert_used < 64 ? hp->n_expert_used : 64);
	mo->fe = (int)hp->n_ff_exp;
	mo->norm = hp->expert_weights_norm;
	mo->sigmoid = hp->expert_gating == 2;
	for (int il = 0; il < hp->n_layer; il++) {
		const struct model_layer *ml = &m->layers[il];
		if (ml->gate_inp.name &&
		    (check_rows(&ml->gate_exps, mo->E, err) || check_rows(&ml->up_exps, mo->E, err) ||
		     check_rows(&ml->down_exps, mo->fe, err))) {
			moe_free(mo);
			return NULL;
		}
	}
	const size_t slots = (size_t)width * (size_t)(mo->k > 0 ? mo->k : 1);
	const size_t wide = (size_t)(mo->E > mo->fe ? mo->E : mo->fe);
	mo->probs = malloc(sizeof(float) * (size_t)(mo->ne > 0 ? mo->ne : 1));
	mo->bias = malloc(sizeof(float) * (size_t)(mo->ne > 0 ? mo->ne : 1));
	mo->chosen = malloc(sizeof(int) * slots);
	mo->w = malloc(sizeof(float) * slots);
	mo->slots = malloc(sizeof(int) * slots);
	mo->hg = malloc(sizeof(float) * slots * (size_t)(mo->fe > 0 ? mo->fe : 1));
	mo->hu = malloc(sizeof(float) * slots * (size_t)(mo->fe > 0 ? mo->fe : 1));
	mo->eo = malloc(sizeof(float) * slots * (size_t)mo->E);
	mo->rows = malloc(sizeof(float) * ROWS * wide);
	if (!mo->probs || !mo->bias || !mo->chosen || !mo->w || !mo->slots || !mo->hg || !mo->hu || !mo->eo ||
	    !mo->rows) {
		moe_free(mo);
		return ad_err(err, "MoE scratch: out of memory"), NULL;
	}
	return mo;
}

// rows [r0, r0 + nr) of a 2-D slice starting at row `base` of t, in fp32
static const float *
rows_f32(struct moe *mo, const struct model_tensor *t, int64_t n_in, size_t base, int r0, int nr, char *err)
{
	size_t rb;
	ad_type_row_bytes(t->type, n_in, &rb);
	const uint8_t *p = (const uint8_t *)t->data + (base + (size_t)r0) * rb;
	if (t->type == AD_TYPE_F32)
		return (const float *)p;
	if (ad_dequant(t->type, p, mo->rows, n_in * nr, err))
		return ad_err_prefix(err, "%s", t->name), NULL;
	return mo->rows;
}

// the router of one column, as ref.c computes it
// (bias: the selection bias, or NULL)
static void
route(struct moe *mo, const float *router, const float *bias, const float *x, int *chosen, float *w, int norm)
{
	const int ne = mo->ne;
	float *p = mo->probs;
	ad_matvec(p, router, x, mo->E, ne);
	if (mo->sigmoid) {
		for (int i = 0; i < ne; i++)
			p[i] = 1.0f / (1.0f + expf(-p[i]));
	} else {
		float mx = -INFINITY;
		for (int i = 0; i < ne; i++)
			mx = p[i] > mx ? p[i] : mx;
		double sum = 0;
		for (int i = 0; i < ne; i++) {
			p[i] = expf(p[i] - mx);
			sum += p[i];
		}
		for (int i = 0; i < ne; i++)
			p[i] = (float)(p[i] / sum);
	}
	float wsum = 0;
	for (int c = 0; c < mo->k; c++) {
		int best = -1;
		float bs = 0;
		for (int i = 0; i < ne; i++) {
			int taken = 0;
			for (int t = 0; t < c; t++)
				taken |= chosen[t] == i;
			float si = bias ? p[i] + bias[i] : p[i];
			if (!taken && (best < 0 || si > bs)) {
				best = i;
				bs = si;
			}
		}
		chosen[c] = best;
		w[c] = p[best];
		wsum += w[c];
	}
	if (norm) {
		if (mo->sigmoid && wsum < 6.103515625e-5f)
			wsum = 6.103515625e-5f; // llama.cpp's clamp of the sigmoid weights' sum
		for (int c = 0; c < mo->k; c++)
			w[c] /= wsum;
	}
}

int
moe_forward(struct moe *mo, const struct model_layer *ml, const float *router, const float *shexp_gate, const float *x,
            const float *shared, int n, float *out, char *err)
{
	const int E = mo->E, fe = mo->fe, k = mo->k;
	if (n < 1 || n > mo->width)
		return ad_err(err, "MoE: %d columns (width %d)", n, mo->width);
	const float *bias = NULL;
	if (ml->exp_probs_b.name) {
		if (ad_dequant(ml->exp_probs_b.type, ml->exp_probs_b.data, mo->bias, mo->ne, err))
			return ad_err_prefix(err, "%s", ml->exp_probs_b.name);
		bias = mo->bias;
	}
	for (int c = 0; c < n; c++)
		route(mo, router, bias, x + (size_t)c * E, mo->chosen + (size_t)c * k, mo->w + (size_t)c * k, mo->norm);

	// every (column, rank) slot's expert output into eo, expert by expert
	for (int xe = 0; xe < mo->ne; xe++) {
		int ns = 0;
		for (int sl = 0; sl < n * k; sl++)
			if (mo->chosen[sl] == xe)
				mo->slots[ns++] = sl;
		if (!ns)
			continue;
		const size_t gbase = (size_t)xe * (size_t)fe, dbase = (size_t)xe * (size_t)E;
		for (int r0 = 0; r0 < fe; r0 += ROWS) {
			const int nr = fe - r0 < ROWS ? fe - r0 : ROWS;
			const float *w = rows_f32(mo, &ml->gate_exps, E, gbase, r0, nr, err);
			if (!w)
				return -1;
			for (int i = 0; i < ns; i++) {
				const int sl = mo->slots[i];
				ad_matvec(mo->hg + (size_t)sl * fe + r0, w, x + (size_t)(sl / k) * E, E, nr);
			}
			if (!(w = rows_f32(mo, &ml->up_exps, E, gbase, r0, nr, err)))
				return -1;
			for (int i = 0; i < ns; i++) {
				const int sl = mo->slots[i];
				ad_matvec(mo->hu + (size_t)sl * fe + r0, w, x + (size_t)(sl / k) * E, E, nr);
			}
		}
		for (int i = 0; i < ns; i++) {
			float *g = mo->hg + (size_t)mo->slots[i] * fe, *u = mo->hu + (size_t)mo->slots[i] * fe;
			ad_glu(g, u, fe, 0);
		}
		for (int r0 = 0; r0 < E; r0 += ROWS) {
			const int nr = E - r0 < ROWS ? E - r0 : ROWS;
			const float *w = rows_f32(mo, &ml->down_exps, fe, dbase, r0, nr, err);
			if (!w)
				return -1;
			for (int i = 0; i < ns; i++) {
				const int sl = mo->slots[i];
				ad_matvec(mo->eo + (size_t)sl * E + r0, w, mo->hg + (size_t)sl * fe, fe, nr);
			}
		}
	}

	// the sum in rank order, then the shared expert (ref.c's order)
	for (int c = 0; c < n; c++) {
		float *o = out + (size_t)c * E;
		const float *xc = x + (size_t)c * E;
		memset(o, 0, (size_t)E * sizeof(float));
		for (int r = 0; r < k; r++) {
			const float wr = mo->w[(size_t)c * k + r], *eo = mo->eo + ((size_t)c * k + r) * E;
			for (int i = 0; i < E; i++)
				o[i] += wr * eo[i];
		}
		if (shared) {
			float g = 1.0f;
			if (shexp_gate) {
				float s = ad_dot(shexp_gate, xc, E);
				g = 1.0f / (1.0f + expf(-s));
			}
			const float *sh = shared + (size_t)c * E;
			for (int i = 0; i < E; i++)
				o[i] += g * sh[i];
		}
	}
	return 0;
}
