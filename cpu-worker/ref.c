// ref.c - the fp32 reference forward pass.
//
// One token at a time, everything in float32, written to be read: each
// step of the block is a plain loop over rows. The matrices are stored the
// way GGUF stores them (n_out rows of n_in values), so every projection is
// a sequence of contiguous dot products.
//
// Where fp32 leaves a choice, the choice is ggml's CPU backend's, so that
// llama.cpp's fp32 logits are met to a few ulp: the summation order of dot
// products (see common/numeric.h), RMSNorm's mean rounded to float, RoPE angles as a
// float running product, q pre-scaled on gemma, and GELU through an fp16
// table. Softmax uses libm's expf where ggml has its own vector exp; that
// is the main remaining difference.
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deltanet.h"
#include "dequant.h"
#include "fp16.h"
#include "numeric.h"
#include "wtype.h"

struct ref_layer {
	const float *attn_norm;
	const float *wq, *wk, *wv, *wo;
	const float *bq, *bk, *bv, *bo;
	const float *q_norm, *k_norm;
	const float *post_attn_norm;
	const float *ffn_norm;
	const float *gate, *up, *down;
	const float *post_ffw_norm;
	const float *gate_inp, *gate_exps, *up_exps, *down_exps;
	const float *gate_inp_shexp, *gate_shexp, *up_shexp, *down_shexp;
	const float *exp_probs_b;
	const float *conv_in, *conv_w, *conv_out; // lfm2 ShortConv
	float *bx_cache;                          // ShortConv: [max_seq][n_embd], B*X of every position
	int conv;
	// qwen35: a gated delta-net block (projections, its CPU part, its state
	// after the last position fed), or attention with an output gate
	const float *dn_qkv, *dn_z, *dn_beta, *dn_alpha, *dn_out;
	struct dn_layer dn;
	float *dn_state;
	int recur, attn_gate;
	int64_t hd, hdv, n_rot, n_ff; // this layer's shapes (gemma4: per layer)
	int own_kv;                   // computes K/V (gemma4's shared layers read kv_src's caches)
	const float *rope_freqs;      // the frequency factors this layer uses, or NULL
	const float *out_scale, *pl_gate, *pl_proj, *pl_norm; // gemma4
	int sliding, use_rope;
	float rope_base, rope_freq_scale;
	float *k_cache; // [max_seq][n_head_kv * head_dim]
	float *v_cache; // [max_seq][n_head_kv * head_dim_v]
};

struct ref_engine {
	enum model_arch arch;
	struct model_hparams hp;
	int max_seq;
	int n_pos; // positions held in the cache

	const float *tok_embd, *output_norm, *output, *rope_freqs;
	const float *pl_tok_embd, *pl_model_proj, *pl_proj_norm; // gemma4's per-layer inputs
	int gemma4;
	struct ref_layer *layers;

	// every allocation, for ref_free
	void **bufs;
	int n_bufs, cap_bufs;
	size_t bytes;

	// scratch
	float *x, *xn, *q, *k, *v, *att, *proj, *hb, *hb2, *moe, *scores, *router, *rope_cs;
	float *pv_part;                                    // [8][head_dim_v]: per-lane partial sums of P·V
	float *bcx;                                        // [3 n_embd]: a ShortConv's in_proj output
	float *pl;                                         // gemma4: [n_layer][n_embd_pl] per-layer inputs of the token
	float *ones;                                       // [head_dim] of 1: gemma4's unweighted V norm
	float *gate;                                       // qwen35: [n_head * head_dim] the attention's output gate
	float *dn_mix, *dn_zb, *dn_ba, *dn_o, *dn_scratch; // qwen35's delta-net projections and output
	int recurrent;                                     // some layer keeps a recurrent state: no rewinding
	int64_t *route_hist;                               // ref_route_hist: [n_layer][n_expert] counts, or NULL
};

// --- allocation ------------------------------------------------------------------

static void *
eng_alloc(struct ref_engine *e, size_t n, char *err)
{
	if (e->n_bufs == e->cap_bufs) {
		int cap = e->cap_bufs ? 2 * e->cap_bufs : 64;
		void **b = realloc(e->bufs, (size_t)cap * sizeof *b);
		if (!b) {
			ad_err(err, "out of memory");
			return NULL;
		}
		e->bufs = b;
		e->cap_bufs = cap;
	}
	void *p = calloc(1, n ? n : 1);
	if (!p) {
		ad_err(err, "out of memory (%zu bytes)", n);
		return NULL;
	}
	e->bufs[e->n_bufs++] = p;
	e->bytes += n;
	return p;
}

// deq turns a weight into a fresh float32 array (NULL slot → NULL, no error)
static int
deq(struct ref_engine *e, const struct model_tensor *t, const float **out, char *err)
{
	*out = NULL;
	if (!t->name)
		return 0;
	int64_t n = model_tensor_nelem(t);
	if (n <= 0 || (uint64_t)n > SIZE_MAX / sizeof(float))
		return ad_err(err, "tensor %s: bad size", t->name);
	float *dst = eng_alloc(e, (size_t)n * sizeof(float), err);
	if (!dst)
		return -1;
	if (ad_dequant(t->type, t->data, dst, n, err))
		return ad_err_prefix(err, "tensor %s", t->name);
	*out = dst;
	return 0;
}

void
ref_free(struct ref_engine *e)
{
	if (!e)
		return;
	for (int i = 0; i < e->n_bufs; i++)
		free(e->bufs[i]);
	free(e->bufs);
	free(e->layers);
	free(e);
}

static int64_t
max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

// the frequency factors for a context of n_ctx (an empty slot when none)
static const struct model_tensor *
rope_factors(const struct model *m, int n_ctx)
{
	static const struct model_tensor none;
	const struct model_tensor *t = model_rope_factors(m, n_ctx);
	return t ? t : &none;
}

struct ref_engine *
ref_new(const struct model *m, int max_seq, char *err)
{
	return ref_new_ctx(m, max_seq, max_seq, err);
}

struct ref_engine *
ref_new_ctx(const struct model *m, int max_seq, int n_ctx, char *err)
{
	if (max_seq <= 0)
		return ad_err(err, "max_seq must be positive, got %d", max_seq), NULL;
	struct ref_engine *e = calloc(1, sizeof *e);
	if (!e)
		return ad_err(err, "out of memory"), NULL;
	const struct model_hparams *hp = &m->hp;
	e->arch = m->arch;
	e->hp = *hp;
	e->max_seq = max_seq;
	e->gemma4 = m->arch == MODEL_ARCH_GEMMA4;
	if (hp->act == MODEL_ACT_GELU)
		ad_gelu_init();
	e->layers = calloc((size_t)hp->n_layer, sizeof *e->layers);
	if (!e->layers) {
		ad_err(err, "out of memory");
		goto fail;
	}

	if (deq(e, &m->tok_embd, &e->tok_embd, err) || deq(e, &m->output_norm, &e->output_norm, err) ||
	    deq(e, rope_factors(m, n_ctx), &e->rope_freqs, err))
		goto fail;
	if (m->tied_output)
		e->output = e->tok_embd;
	else if (deq(e, &m->output, &e->output, err))
		goto fail;
	if (deq(e, &m->pl_tok_embd, &e->pl_tok_embd, err) || deq(e, &m->pl_model_proj, &e->pl_model_proj, err) ||
	    deq(e, &m->pl_proj_norm, &e->pl_proj_norm, err))
		goto fail;

	const int64_t E = hp->n_embd;
	const int64_t nq = hp->n_head * hp->head_dim, nk = hp->n_head_kv * hp->head_dim;
	const int64_t nv = hp->n_head_kv * hp->head_dim_v;
	for (int il = 0; il < hp->n_layer; il++) {
		const struct model_layer *ml = &m->layers[il];
		struct ref_layer *L = &e->layers[il];
		if (deq(e, &ml->attn_norm, &L->attn_norm, err) || deq(e, &ml->wo, &L->wo, err) ||
		    deq(e, &ml->bo, &L->bo, err) || deq(e, &ml->q_norm, &L->q_norm, err) ||
		    deq(e, &ml->k_norm, &L->k_norm, err) || deq(e, &ml->post_attn_norm, &L->post_attn_norm, err) ||
		    deq(e, &ml->ffn_norm, &L->ffn_norm, err) || deq(e, &ml->down, &L->down, err) ||
		    deq(e, &ml->post_ffw_norm, &L->post_ffw_norm, err) || deq(e, &ml->gate_inp, &L->gate_inp, err) ||
		    deq(e, &ml->gate_exps, &L->gate_exps, err) || deq(e, &ml->up_exps, &L->up_exps, err) ||
		    deq(e, &ml->down_exps, &L->down_exps, err) ||
		    deq(e, &ml->gate_inp_shexp, &L->gate_inp_shexp, err) ||
		    deq(e, &ml->gate_shexp, &L->gate_shexp, err) || deq(e, &ml->up_shexp, &L->up_shexp, err) ||
		    deq(e, &ml->down_shexp, &L->down_shexp, err) || deq(e, &ml->exp_probs_b, &L->exp_probs_b, err) ||
		    deq(e, &ml->out_scale, &L->out_scale, err) || deq(e, &ml->pl_gate, &L->pl_gate, err) ||
		    deq(e, &ml->pl_proj, &L->pl_proj, err) || deq(e, &ml->pl_norm, &L->pl_norm, err))
			goto fail;
		L->hd = ml->head_dim;
		L->hdv = ml->head_dim_v;
		L->n_rot = ml->n_rot;
		L->n_ff = ml->n_ff;
		L->own_kv = ml->kv_src == il;
		L->rope_freqs = ml->rope_factors ? e->rope_freqs : NULL;
		L->conv = ml->conv;
		L->recur = ml->recur;
		L->attn_gate = ml->attn_gate;
		if (L->recur) {
			const float *cw, *dt, *a, *nw;
			if (deq(e, &ml->dn_qkv, &L->dn_qkv, err) || deq(e, &ml->dn_z, &L->dn_z, err) ||
			    deq(e, &ml->dn_beta, &L->dn_beta, err) || deq(e, &ml->dn_alpha, &L->dn_alpha, err) ||
			    deq(e, &ml->dn_out, &L->dn_out, err) || deq(e, &ml->dn_conv, &cw, err) ||
			    deq(e, &ml->dn_dt, &dt, err) || deq(e, &ml->dn_a, &a, err) ||
			    deq(e, &ml->dn_norm, &nw, err))
				goto fail;
			L->dn = dn_layer_of(hp, cw, dt, a, nw);
			if (!(L->dn_state = eng_alloc(e, dn_state_floats(&L->dn) * sizeof(float), err)))
				goto fail;
			e->recurrent = 1;
			L->own_kv = 0;
		} else if (L->conv) {
			if (deq(e, &ml->conv_in, &L->conv_in, err) || deq(e, &ml->conv_w, &L->conv_w, err) ||
			    deq(e, &ml->conv_out, &L->conv_out, err) ||
			    !(L->bx_cache = eng_alloc(e, (size_t)max_seq * (size_t)E * sizeof(float), err)))
				goto fail;
		} else if (ml->wqkv.name) {
			// fused: q rows, then k rows, then v rows
			const float *w, *b;
			if (deq(e, &ml->wqkv, &w, err) || deq(e, &ml->bqkv, &b, err))
				goto fail;
			L->wq = w;
			L->wk = w + nq * E;
			L->wv = w + (nq + nk) * E;
			(void)nv;
			if (b) {
				L->bq = b;
				L->bk = b + nq;
				L->bv = b + nq + nk;
			}
		} else {
			if (deq(e, &ml->wq, &L->wq, err) || deq(e, &ml->wk, &L->wk, err) ||
			    deq(e, &ml->wv, &L->wv, err) || deq(e, &ml->bq, &L->bq, err) ||
			    deq(e, &ml->bk, &L->bk, err) || deq(e, &ml->bv, &L->bv, err))
				goto fail;
		}
		if (ml->gate.name) {
			if (deq(e, &ml->gate, &L->gate, err) || deq(e, &ml->up, &L->up, err))
				goto fail;
		} else if (ml->up.name) {
			// phi3: gate and up fused, the gate is the first half
			const float *w;
			if (deq(e, &ml->up, &w, err))
				goto fail;
			L->gate = w;
			L->up = w + hp->n_ff * E;
		}
		if (!L->own_kv) { // gemma4: the caches of an earlier layer (set below)
			L->sliding = ml->sliding;
			L->use_rope = ml->use_rope;
			L->rope_base = ml->rope_base;
			L->rope_freq_scale = ml->rope_freq_scale;
			continue;
		}
		L->sliding = ml->sliding;
		L->use_rope = ml->use_rope;
		L->rope_base = ml->rope_base;
		L->rope_freq_scale = ml->rope_freq_scale;
		if (L->conv || L->recur)
			continue;
		L->k_cache = eng_alloc(e, (size_t)max_seq * (size_t)(hp->n_head_kv * L->hd) * sizeof(float), err);
		L->v_cache = eng_alloc(e, (size_t)max_seq * (size_t)(hp->n_head_kv * L->hdv) * sizeof(float), err);
		if (!L->k_cache || !L->v_cache)
			goto fail;
	}
	for (int il = 0; il < hp->n_layer; il++)
		if (!e->layers[il].own_kv && !e->layers[il].conv && !e->layers[il].recur) {
			e->layers[il].k_cache = e->layers[m->layers[il].kv_src].k_cache;
			e->layers[il].v_cache = e->layers[m->layers[il].kv_src].v_cache;
		}

	int64_t nff = max64(max64(hp->n_ff, hp->n_embd_pl), max64(hp->n_ff_exp, hp->n_ff_shexp));
	int64_t wide = max64(E, max64(nq, hp->n_head * hp->head_dim_v));
	if (!(e->x = eng_alloc(e, (size_t)E * 4, err)) || !(e->xn = eng_alloc(e, (size_t)wide * 4, err)) ||
	    !(e->q = eng_alloc(e, (size_t)nq * 4, err)) || !(e->k = eng_alloc(e, (size_t)nk * 4, err)) ||
	    !(e->v = eng_alloc(e, (size_t)nv * 4, err)) || !(e->att = eng_alloc(e, (size_t)wide * 4, err)) ||
	    !(e->proj = eng_alloc(e, (size_t)E * 4, err)) || !(e->hb = eng_alloc(e, (size_t)nff * 4, err)) ||
	    !(e->hb2 = eng_alloc(e, (size_t)nff * 4, err)) || !(e->moe = eng_alloc(e, (size_t)E * 4, err)) ||
	    !(e->scores = eng_alloc(e, (size_t)max_seq * 4, err)) ||
	    !(e->router = eng_alloc(e, (size_t)max64(hp->n_expert, 1) * 4, err)) ||
	    !(e->rope_cs = eng_alloc(e, (size_t)hp->n_rot * 4, err)) ||
	    !(e->pv_part = eng_alloc(e, 8 * (size_t)hp->head_dim_v * 4, err)) ||
	    !(e->bcx = eng_alloc(e, 3 * (size_t)E * 4, err)) ||
	    !(e->pl = eng_alloc(e, (size_t)max64(hp->n_layer * hp->n_embd_pl, 1) * 4, err)) ||
	    !(e->ones = eng_alloc(e, (size_t)max64(hp->head_dim, hp->head_dim_v) * 4, err)) ||
	    !(e->gate = eng_alloc(e, (size_t)nq * 4, err)))
		goto fail;
	if (e->recurrent) {
		const int64_t d = hp->ssm_d_state, nvd = hp->ssm_dt_rank * d;
		const int64_t C = (2 * hp->ssm_n_group + hp->ssm_dt_rank) * d;
		if (!(e->dn_mix = eng_alloc(e, (size_t)C * 4, err)) ||
		    !(e->dn_zb = eng_alloc(e, (size_t)nvd * 4, err)) ||
		    !(e->dn_ba = eng_alloc(e, 2 * (size_t)hp->ssm_dt_rank * 4, err)) ||
		    !(e->dn_o = eng_alloc(e, (size_t)nvd * 4, err)) ||
		    !(e->dn_scratch = eng_alloc(e, (size_t)C * 4, err)))
			goto fail;
	}
	for (int64_t i = 0; i < max64(hp->head_dim, hp->head_dim_v); i++)
		e->ones[i] = 1.0f;
	return e;
fail:
	ad_err_prefix(err, "reference engine");
	ref_free(e);
	return NULL;
}

void
ref_reset(struct ref_engine *e)
{
	e->n_pos = 0;
}

int
ref_n_vocab(const struct ref_engine *e)
{
	return (int)e->hp.n_vocab;
}

int
ref_max_seq(const struct ref_engine *e)
{
	return e->max_seq;
}

size_t
ref_bytes(const struct ref_engine *e)
{
	return e->bytes;
}

int
ref_argmax(const float *x, int n)
{
	int best = 0;
	for (int i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return best;
}

// --- kernels ---------------------------------------------------------------------

// The arithmetic is common/numeric.h's (the 8-lane dot products, RMSNorm,
// the GELU table, the RoPE rotation), which engine.c uses too.

// y[n_out] = W[n_out][n_in] · x (+ bias)
static void
matvec(float *y, const float *w, const float *x, const float *bias, int64_t n_in, int64_t n_out)
{
	ad_matvec(y, w, x, n_in, n_out);
	if (bias)
		for (int64_t r = 0; r < n_out; r++)
			y[r] += bias[r];
}

// cos/sin of each rotary pair for one position (model_rope_angles: theta
// as ggml's float running product, so the angles match its bits, with
// the model's RoPE scaling)
static void
rope_angles(const struct ref_engine *e, const struct ref_layer *L, int pos, float *cs)
{
	struct model_hparams hp = e->hp;
	hp.n_rot = L->n_rot;
	model_rope_angles(&hp, L->rope_base, L->rope_freq_scale, L->rope_freqs, pos, cs);
}

static void
rope(const struct ref_engine *e, const struct ref_layer *L, float *v, int64_t n_heads, const float *cs)
{
	ad_rope(v, n_heads, L->hd, L->n_rot, e->hp.rope == MODEL_ROPE_NEOX, cs);
}

// --- the block -----------------------------------------------------------------

// per-head RMSNorm of q and k (where the layer has the weights)
static void
qk_norm(struct ref_engine *e, const struct ref_layer *L)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t hd = L->hd;
	if (L->q_norm)
		for (int64_t h = 0; h < hp->n_head; h++)
			ad_rmsnorm(e->q + h * hd, e->q + h * hd, L->q_norm, hd, hp->rms_eps);
	if (L->k_norm)
		for (int64_t h = 0; h < hp->n_head_kv; h++)
			ad_rmsnorm(e->k + h * hd, e->k + h * hd, L->k_norm, hd, hp->rms_eps);
	if (e->gemma4 && L->own_kv) // V normed too, with no weight
		for (int64_t h = 0; h < hp->n_head_kv; h++)
			ad_rmsnorm(e->v + h * L->hdv, e->v + h * L->hdv, e->ones, L->hdv, hp->rms_eps);
}

static void
attention(struct ref_engine *e, struct ref_layer *L, int pos)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t E = hp->n_embd, hd = L->hd, hdv = L->hdv;
	const int64_t nk = hp->n_head_kv * hd, nv = hp->n_head_kv * hdv;

	ad_rmsnorm(e->xn, e->x, L->attn_norm, E, hp->rms_eps);
	if (L->attn_gate) {
		// qwen35: per head hd q rows, then hd gate rows
		for (int64_t h = 0; h < hp->n_head; h++) {
			matvec(e->q + h * hd, L->wq + (size_t)(2 * h) * hd * E, e->xn, NULL, E, hd);
			matvec(e->gate + h * hd, L->wq + (size_t)(2 * h + 1) * hd * E, e->xn, NULL, E, hd);
		}
	} else {
		matvec(e->q, L->wq, e->xn, L->bq, E, hp->n_head * hd);
	}
	if (L->own_kv) {
		matvec(e->k, L->wk, e->xn, L->bk, E, nk);
		matvec(e->v, L->wv, e->xn, L->bv, E, nv);
	}
	if (!hp->qk_norm_post_rope)
		qk_norm(e, L);
	if (L->use_rope) {
		rope_angles(e, L, pos, e->rope_cs);
		rope(e, L, e->q, hp->n_head, e->rope_cs);
		if (L->own_kv)
			rope(e, L, e->k, hp->n_head_kv, e->rope_cs);
	}
	if (hp->qk_norm_post_rope)
		qk_norm(e, L);
	// gemma scales q itself; the others scale the scores (same maths,
	// different rounding)
	float score_scale = hp->q_scale;
	if (hp->q_prescale) {
		for (int64_t i = 0; i < hp->n_head * hd; i++)
			e->q[i] *= hp->q_scale;
		score_scale = 1.0f;
	}
	if (L->own_kv) {
		memcpy(L->k_cache + (size_t)pos * nk, e->k, (size_t)nk * sizeof(float));
		memcpy(L->v_cache + (size_t)pos * nv, e->v, (size_t)nv * sizeof(float));
	}

	int start = 0;
	if (L->sliding && pos - hp->sliding_window + 1 > 0)
		start = (int)(pos - hp->sliding_window + 1);
	const int64_t group = hp->n_head / hp->n_head_kv;
	const float cap = hp->attn_softcap;
	for (int64_t h = 0; h < hp->n_head; h++) {
		const float *qh = e->q + h * hd;
		const int64_t kvh = h / group;
		float mx = -INFINITY;
		for (int j = start; j <= pos; j++) {
			float s = ad_dot(qh, L->k_cache + (size_t)j * nk + kvh * hd, hd) * score_scale;
			if (cap > 0)
				s = tanhf(s * (1.0f / cap)) * cap;
			e->scores[j] = s;
			if (s > mx)
				mx = s;
		}
		double sum = 0;
		for (int j = start; j <= pos; j++) {
			e->scores[j] = expf(e->scores[j] - mx);
			sum += e->scores[j];
		}
		float inv = (float)(1.0 / sum);
		for (int j = start; j <= pos; j++)
			e->scores[j] *= inv;
		// out[d] = sum_j p_j v_j[d], position j in lane j mod 8 (see dot)
		// (part[lane] holds lane's partial sums for every d, so the inner
		// loop runs along contiguous v rows)
		float *out = e->att + h * hdv, *part = e->pv_part;
		memset(part, 0, 8 * (size_t)hdv * sizeof(float));
		for (int j = start; j <= pos; j++) {
			const float *vj = L->v_cache + (size_t)j * nv + kvh * hdv;
			float *pl = part + (size_t)(j & 7) * hdv, pj = e->scores[j];
			for (int64_t d = 0; d < hdv; d++)
				pl[d] = fmaf(pj, vj[d], pl[d]);
		}
		for (int64_t d = 0; d < hdv; d++) {
			ad_v8f acc;
			for (int l = 0; l < 8; l++)
				acc[l] = part[(size_t)l * hdv + d];
			out[d] = ad_fold8(acc);
		}
	}
	if (L->attn_gate)
		for (int64_t i = 0; i < hp->n_head * hdv; i++)
			e->att[i] *= 1.0f / (1.0f + expf(-e->gate[i]));
	matvec(e->proj, L->wo, e->att, L->bo, hp->n_head * hdv, E);
	if (L->post_attn_norm)
		ad_rmsnorm(e->proj, e->proj, L->post_attn_norm, E, hp->rms_eps);
	for (int64_t i = 0; i < E; i++)
		e->x[i] += e->proj[i];
}

// lfm2's ShortConv block: [B; C; X] = in_proj · norm(x), bx = B ⊙ X kept
// per position (the block's cache), y = Σ_k w[c][k] · bx[pos - n_conv + 1 + k]
// (ggml_ssm_conv's order: taps oldest first, from 0; bx is 0 before
// position 0), then out_proj · (C ⊙ y) into the residual
static void
shortconv(struct ref_engine *e, struct ref_layer *L, int pos)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t E = hp->n_embd, K = hp->n_conv;
	ad_rmsnorm(e->xn, e->x, L->attn_norm, E, hp->rms_eps);
	matvec(e->bcx, L->conv_in, e->xn, NULL, E, 3 * E);
	const float *b = e->bcx, *c = b + E, *xv = c + E;
	float *bx = L->bx_cache + (size_t)pos * (size_t)E;
	for (int64_t i = 0; i < E; i++)
		bx[i] = b[i] * xv[i];
	for (int64_t i = 0; i < E; i++) {
		float sum = 0;
		for (int64_t k = 0; k < K; k++) {
			int64_t p = pos - (K - 1) + k;
			if (p >= 0)
				sum = fmaf(L->bx_cache[(size_t)p * (size_t)E + (size_t)i], L->conv_w[i * K + k], sum);
		}
		e->att[i] = c[i] * sum;
	}
	matvec(e->proj, L->conv_out, e->att, NULL, E, E);
	for (int64_t i = 0; i < E; i++)
		e->x[i] += e->proj[i];
}

// qwen35's gated delta-net block: the four projections of norm(x), the
// token step with the layer's state (deltanet.h), ssm_out into the residual
static void
deltanet(struct ref_engine *e, struct ref_layer *L, int pos)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t E = hp->n_embd, nvd = (int64_t)L->dn.n_v * L->dn.d;
	ad_rmsnorm(e->xn, e->x, L->attn_norm, E, hp->rms_eps);
	matvec(e->dn_mix, L->dn_qkv, e->xn, NULL, E, L->dn.channels);
	matvec(e->dn_zb, L->dn_z, e->xn, NULL, E, nvd);
	matvec(e->dn_ba, L->dn_beta, e->xn, NULL, E, L->dn.n_v);
	matvec(e->dn_ba + L->dn.n_v, L->dn_alpha, e->xn, NULL, E, L->dn.n_v);
	dn_token(&L->dn, e->dn_mix, e->dn_zb, e->dn_ba, e->dn_ba + L->dn.n_v, pos ? L->dn_state : NULL, L->dn_state,
	         e->dn_o, e->dn_scratch);
	matvec(e->proj, L->dn_out, e->dn_o, NULL, nvd, E);
	for (int64_t i = 0; i < E; i++)
		e->x[i] += e->proj[i];
}

// out = down(act(gate·x) * up·x) for one SwiGLU / GELU expert of size n_ff
static void
ffn(struct ref_engine *e, float *out, const float *gate, const float *up, const float *down, const float *x,
    int64_t n_ff, int use_gelu)
{
	const int64_t E = e->hp.n_embd;
	matvec(e->hb, gate, x, NULL, E, n_ff);
	matvec(e->hb2, up, x, NULL, E, n_ff);
	ad_glu(e->hb, e->hb2, n_ff, use_gelu);
	matvec(out, down, e->hb, NULL, n_ff, E);
}

static void
moe(struct ref_engine *e, struct ref_layer *L, const float *x, float *out)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t E = hp->n_embd, ne = hp->n_expert, fe = hp->n_ff_exp;

	// softmax over all experts (or a sigmoid each, lfm2moe), then the top
	// k by probability (plus the selection bias where there is one: it
	// picks the experts, the weights stay the unbiased probabilities)
	matvec(e->router, L->gate_inp, x, NULL, E, ne);
	if (hp->expert_gating == 2) {
		for (int64_t i = 0; i < ne; i++)
			e->router[i] = 1.0f / (1.0f + expf(-e->router[i]));
	} else {
		float mx = -INFINITY;
		for (int64_t i = 0; i < ne; i++)
			mx = e->router[i] > mx ? e->router[i] : mx;
		double sum = 0;
		for (int64_t i = 0; i < ne; i++) {
			e->router[i] = expf(e->router[i] - mx);
			sum += e->router[i];
		}
		for (int64_t i = 0; i < ne; i++)
			e->router[i] = (float)(e->router[i] / sum);
	}
	const float *bias = L->exp_probs_b;

	int chosen[64];
	float w[64], wsum = 0;
	int64_t k = hp->n_expert_used < 64 ? hp->n_expert_used : 64;
	for (int64_t c = 0; c < k; c++) {
		int best = -1;
		float bs = 0;
		for (int64_t i = 0; i < ne; i++) {
			int taken = 0;
			for (int64_t t = 0; t < c; t++)
				taken |= chosen[t] == i;
			float si = bias ? e->router[i] + bias[i] : e->router[i];
			if (!taken && (best < 0 || si > bs)) {
				best = (int)i;
				bs = si;
			}
		}
		chosen[c] = best;
		w[c] = e->router[best];
		wsum += w[c];
	}
	if (hp->expert_weights_norm) {
		if (hp->expert_gating == 2 && wsum < 6.103515625e-5f)
			wsum = 6.103515625e-5f; // llama.cpp clamps the sum of sigmoid weights
		for (int64_t c = 0; c < k; c++)
			w[c] /= wsum;
	}
	if (e->route_hist)
		for (int64_t c = 0; c < k; c++)
			e->route_hist[(L - e->layers) * ne + chosen[c]]++;

	memset(out, 0, (size_t)E * sizeof(float));
	for (int64_t c = 0; c < k; c++) {
		size_t off = (size_t)chosen[c] * (size_t)fe * (size_t)E;
		ffn(e, e->proj, L->gate_exps + off, L->up_exps + off, L->down_exps + off, x, fe, 0);
		for (int64_t i = 0; i < E; i++)
			out[i] += w[c] * e->proj[i];
	}
	if (L->gate_shexp) {
		float g = 1.0f;
		if (L->gate_inp_shexp) {
			float s = ad_dot(L->gate_inp_shexp, x, E);
			g = 1.0f / (1.0f + expf(-s));
		}
		ffn(e, e->proj, L->gate_shexp, L->up_shexp, L->down_shexp, x, hp->n_ff_shexp, 0);
		for (int64_t i = 0; i < E; i++)
			out[i] += g * e->proj[i];
	}
}

static void
feed_forward(struct ref_engine *e, struct ref_layer *L)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t E = hp->n_embd;
	ad_rmsnorm(e->xn, e->x, L->ffn_norm, E, hp->rms_eps);
	if (L->gate_inp)
		moe(e, L, e->xn, e->moe);
	else
		ffn(e, e->moe, L->gate, L->up, L->down, e->xn, L->n_ff, hp->act == MODEL_ACT_GELU);
	if (L->post_ffw_norm)
		ad_rmsnorm(e->moe, e->moe, L->post_ffw_norm, E, hp->rms_eps);
	for (int64_t i = 0; i < E; i++)
		e->x[i] += e->moe[i];
}

// gemma4's per-layer inputs of a token: pl = (norm_slices(per_layer_model_proj
// x0 / sqrt(E)) + per_layer_token_embd[tok] sqrt(P)) / sqrt(2)
static void
per_layer_inputs(struct ref_engine *e, int32_t token)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t E = hp->n_embd, P = hp->n_embd_pl, LP = hp->n_layer * P;
	matvec(e->pl, e->pl_model_proj, e->x, NULL, E, LP);
	const float ps = 1.0f / sqrtf((float)E), ts = sqrtf((float)P), ss = 1.0f / sqrtf(2.0f);
	for (int64_t i = 0; i < LP; i++)
		e->pl[i] *= ps;
	const float *tok = e->pl_tok_embd + (size_t)token * (size_t)LP;
	for (int64_t l = 0; l < hp->n_layer; l++) {
		float *p = e->pl + l * P;
		ad_rmsnorm(p, p, e->pl_proj_norm, P, hp->rms_eps);
		for (int64_t i = 0; i < P; i++)
			p[i] = (p[i] + tok[l * P + i] * ts) * ss;
	}
}

// gemma4 after the FFN: x += post_norm(proj (gelu(inp_gate x) * pl[layer])),
// then x *= layer_output_scale
static void
per_layer_branch(struct ref_engine *e, struct ref_layer *L, int64_t il)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t E = hp->n_embd, P = hp->n_embd_pl;
	if (L->pl_gate) {
		matvec(e->hb, L->pl_gate, e->x, NULL, E, P);
		for (int64_t i = 0; i < P; i++)
			e->hb[i] = ad_gelu(e->hb[i]) * e->pl[il * P + i];
		matvec(e->proj, L->pl_proj, e->hb, NULL, P, E);
		ad_rmsnorm(e->proj, e->proj, L->pl_norm, E, hp->rms_eps);
		for (int64_t i = 0; i < E; i++)
			e->x[i] += e->proj[i];
	}
	if (L->out_scale)
		for (int64_t i = 0; i < E; i++)
			e->x[i] *= L->out_scale[0];
}

int
ref_forward(struct ref_engine *e, int32_t token, int pos, float *logits)
{
	const struct model_hparams *hp = &e->hp;
	const int64_t E = hp->n_embd;
	if (token < 0 || token >= hp->n_vocab || pos < 0 || pos >= e->max_seq || pos > e->n_pos)
		return -1;
	if (e->recurrent && pos != 0 && pos != e->n_pos)
		return -1; // a recurrent state cannot go back (but to the start)
	e->n_pos = pos;    // rewinding drops the later positions

	const float *row = e->tok_embd + (size_t)token * (size_t)E;
	for (int64_t i = 0; i < E; i++)
		e->x[i] = row[i] * e->hp.embd_scale;
	if (e->pl_model_proj)
		per_layer_inputs(e, token);
	for (int64_t il = 0; il < hp->n_layer; il++) {
		if (e->layers[il].conv)
			shortconv(e, &e->layers[il], pos);
		else if (e->layers[il].recur)
			deltanet(e, &e->layers[il], pos);
		else
			attention(e, &e->layers[il], pos);
		feed_forward(e, &e->layers[il]);
		if (e->gemma4)
			per_layer_branch(e, &e->layers[il], il);
	}
	e->n_pos = pos + 1;

	ad_rmsnorm(e->xn, e->x, e->output_norm, E, hp->rms_eps);
	matvec(logits, e->output, e->xn, NULL, E, hp->n_vocab);
	if (hp->final_softcap > 0) {
		const float cap = hp->final_softcap;
		for (int64_t i = 0; i < hp->n_vocab; i++)
			logits[i] = tanhf(logits[i] * (1.0f / cap)) * cap;
	}
	return 0;
}

void
ref_route_hist(struct ref_engine *e, int64_t *counts)
{
	e->route_hist = counts;
}

int
ref_eval(struct ref_engine *e, const int32_t *ids, int n, float *logits)
{
	ref_reset(e);
	for (int i = 0; i < n; i++)
		if (ref_forward(e, ids[i], i, logits + (size_t)i * (size_t)e->hp.n_vocab))
			return -1;
	return 0;
}
