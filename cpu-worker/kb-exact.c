// kb-exact.c - the kernel set in fp32 from the dequantised weights.
//
// kb_exact isolates the CPU side of the pipeline from fp16 kernels: every
// projection is a dot product per output row in the reference engine's
// order (8 lanes, one rounding per multiply-add, ref.c's fold), so a
// projection gives the same bits as ref.c's matvec. Its surfaces are
// private memory with an fp32 twin of the planes (kb_exact_shadow): the
// engine writes and reads the twin, so nothing is rounded to fp16 on the
// way in or out. The fp16 planes get a copy of every output all the same,
// so a reader of the planes sees the kernel's result.
//
// Kernels: QKV, O, per dense layer a fused FFN (SiLU) or, with o->split
// and always for GELU models, GATE_UP + DOWN (the activation then runs on
// the CPU), SHEXP for a MoE layer with a shared expert, and the LM head in
// two chunks (up to 32768 rows each, more chunks beyond) so the chunk loop
// of the caller is always exercised.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "dequant.h"
#include "engine.h"
#include "fp16.h"
#include "kernels.h"
#include "numeric.h"

struct xk {
	enum ane_kind kind;
	int in, out;
	// projections: up to four row blocks stacked in the output
	const float *w[4];
	int rows[4];
	int nparts;
	// fused FFN / SHEXP: gate [ff][in], up [ff][in], down [out][ff]
	const float *gate, *up, *down;
	int ff;
};

struct xsurf {
	struct ad_surface s; // a copy: the caller's struct may go first
	float *f32;          // [width][channels]
};

struct exact {
	struct kernel_backend kb;
	struct kb_info *info;
	struct xk *k;
	int nk, capk;
	float **bufs;
	int nbufs, capbufs;
	struct xsurf *surf;
	int nsurf, capsurf;
	float *hb, *hb2; // FFN scratch
	int max_ff;
};

static int
grow(void **p, int *cap, int need, size_t elem)
{
	if (need <= *cap)
		return 0;
	int c = *cap ? *cap : 16;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, (size_t)c * elem);
	if (!q)
		return -1;
	memset((char *)q + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
	*p = q;
	*cap = c;
	return 0;
}

static int
deq(struct exact *x, const struct model_tensor *t, const float **out, char *err)
{
	*out = NULL;
	if (!t->name)
		return 0;
	int64_t n = model_tensor_nelem(t);
	if (n <= 0 || (uint64_t)n > SIZE_MAX / sizeof(float))
		return ad_err(err, "tensor %s: bad size", t->name);
	if (grow((void **)&x->bufs, &x->capbufs, x->nbufs + 1, sizeof *x->bufs))
		return ad_err(err, "out of memory");
	float *d = malloc((size_t)n * sizeof(float));
	if (!d)
		return ad_err(err, "tensor %s: out of memory", t->name);
	x->bufs[x->nbufs++] = d;
	if (ad_dequant(t->type, t->data, d, n, err))
		return ad_err_prefix(err, "tensor %s", t->name);
	*out = d;
	return 0;
}

// --- the backend -------------------------------------------------------------------

static struct xsurf *
find_surf(struct exact *x, const struct ad_surface *s)
{
	for (int i = 0; i < x->nsurf; i++)
		if (x->surf[i].s.base == s->base)
			return &x->surf[i];
	return NULL;
}

float *
kb_exact_shadow(struct kernel_backend *kb, const struct ad_surface *s)
{
	if (!kb || strcmp(kb->name, "exact") != 0)
		return NULL;
	struct xsurf *xs = find_surf(kb->priv, s);
	return xs ? xs->f32 : NULL;
}

static int
x_surface_new(struct kernel_backend *kb, const char *name, int channels, unsigned flags, struct ad_surface *s,
              char *err)
{
	struct exact *x = kb->priv;
	(void)flags; // process memory: calloc's large blocks get their pages on first use anyway
	if (channels <= 0)
		return ad_err(err, "surface %s: %d channels", name, channels);
	if (grow((void **)&x->surf, &x->capsurf, x->nsurf + 1, sizeof *x->surf))
		return ad_err(err, "out of memory");
	if (surface_create(s, NULL, (size_t)channels, (size_t)kb->width, 0, err))
		return ad_err_prefix(err, "exact: surface %s", name);
	snprintf(s->id, sizeof s->id, "exact:%s", name);
	float *f = calloc(s->width * s->channels, sizeof(float));
	if (!f) {
		surface_close(s);
		return ad_err(err, "exact: surface %s: out of memory", name);
	}
	x->surf[x->nsurf++] = (struct xsurf){*s, f};
	return 0;
}

static int
x_call(struct kernel_backend *kb, int id, struct ad_surface *in, struct ad_surface *out, int ncols, struct kb_timing *t,
       char *err)
{
	uint64_t t0 = ad_now_ns();
	struct exact *x = kb->priv;
	if (id < 0 || id >= x->nk)
		return ad_err(err, "exact: no kernel %d", id);
	const struct xk *k = &x->k[id];
	struct xsurf *si = find_surf(x, in), *so = find_surf(x, out);
	if (!si || !so)
		return ad_err(err, "exact: kernel %d: not a surface of this backend", id);
	if (ncols < 1 || ncols > kb->width)
		return ad_err(err, "exact: kernel %d: %d columns (width %d)", id, ncols, kb->width);
	if (si->s.channels < (size_t)k->in || so->s.channels < (size_t)k->out)
		return ad_err(err, "exact: kernel %d: surfaces of %zu/%zu channels, need %d/%d", id, si->s.channels,
		              so->s.channels, k->in, k->out);
	for (int c = 0; c < ncols; c++) {
		const float *xi = si->f32 + (size_t)c * si->s.channels;
		float *yo = so->f32 + (size_t)c * so->s.channels;
		if (k->gate) {
			ad_matvec(x->hb, k->gate, xi, k->in, k->ff);
			ad_matvec(x->hb2, k->up, xi, k->in, k->ff);
			ad_glu(x->hb, x->hb2, k->ff, 0);
			ad_matvec(yo, k->down, x->hb, k->ff, k->out);
		} else {
			int r = 0;
			for (int p = 0; p < k->nparts; p++) {
				ad_matvec(yo + r, k->w[p], xi, k->in, k->rows[p]);
				r += k->rows[p];
			}
		}
		// the planes too, for readers of the fp16 surface
		for (int o = 0; o < k->out; o++)
			out->base[(size_t)o * out->plane_stride / 2 + (size_t)c] = ad_f32_to_fp16(yo[o]);
	}
	if (t) {
		t->exec_ns = ad_now_ns() - t0;
		t->total_ns = t->exec_ns;
	}
	return 0;
}

// a KB_RESNORM step on the fp32 twins: no fp16 rounding, as put/get in
// the engine
static int
x_resnorm(struct kernel_backend *kb, const struct kb_step *st, char *err)
{
	struct exact *x = kb->priv;
	const struct ad_surface *in = st->y_rows ? NULL : st->in, *out = st->xn_rows ? NULL : st->out;
	struct xsurf *ys = in ? find_surf(x, in) : NULL, *xs = out ? find_surf(x, out) : NULL;
	if ((in && !ys) || (out && !xs))
		return ad_err(err, "exact: resnorm: not a surface of this backend");
	if ((ys && ys->s.channels < (size_t)st->rn.E) || (xs && xs->s.channels < (size_t)st->rn.E) || st->ncols < 1 ||
	    st->ncols > kb->width)
		return ad_err(err, "exact: resnorm: %d columns of %d do not fit", st->ncols, st->rn.E);
	const size_t E = (size_t)st->rn.E;
	ad_resnorm(&st->rn, st->ncols,
	           st->y_rows ? st->y_rows
	           : ys       ? ys->f32
	                      : NULL,
	           st->y_rows ? E
	           : ys       ? ys->s.channels
	                      : 0,
	           st->x_in, st->x_out,
	           st->xn_rows ? st->xn_rows
	           : xs        ? xs->f32
	                       : NULL,
	           st->xn_rows ? E
	           : xs        ? xs->s.channels
	                       : 0);
	return 0;
}

static void
x_free(struct kernel_backend *kb)
{
	if (!kb)
		return;
	struct exact *x = kb->priv;
	kb_host_free(kb);
	for (int i = 0; i < x->nbufs; i++)
		free(x->bufs[i]);
	for (int i = 0; i < x->nsurf; i++) {
		surface_close(&x->surf[i].s);
		free(x->surf[i].f32);
	}
	free(x->bufs);
	free(x->surf);
	free(x->k);
	free(x->info);
	free(x->hb);
	free(x->hb2);
	free(x);
}

// room for every kernel is reserved up front
static struct xk *
add_kernel(struct exact *x, enum ane_kind kind, int layer, int chunk, int in, int out, int row_offset)
{
	struct kb_info *i = &x->info[x->nk];
	*i = (struct kb_info){.id = x->nk,
	                      .kind = kind,
	                      .layer = layer,
	                      .chunk = chunk,
	                      .in_ch = in,
	                      .out_ch = out,
	                      .row_offset = row_offset};
	struct xk *k = &x->k[x->nk++];
	*k = (struct xk){.kind = kind, .in = in, .out = out};
	return k;
}

struct kernel_backend *
kb_exact_new(const struct model *m, const struct kb_opts *o, char *err)
{
	const struct model_hparams *hp = &m->hp;
	struct exact *x = calloc(1, sizeof *x);
	if (!x)
		return ad_err(err, "out of memory"), NULL;
	x->kb.priv = x;
	x->kb.name = "exact";
	x->kb.width = o && o->width > 0 ? o->width : 64;
	x->kb.surface_new = x_surface_new;
	x->kb.call = x_call;
	x->kb.call_list = kb_call_loop;
	x->kb.free = x_free;
	x->kb.resnorm = x_resnorm;
	const int gelu = hp->act == MODEL_ACT_GELU;
	const int split = gelu || (o && o->split);
	const int E = (int)hp->n_embd;
	const int V = (int)hp->n_vocab;
	const int head_rows = V <= 65536 ? (V + 1) / 2 : 32768;
	const int n_head_chunks = (V + head_rows - 1) / head_rows;
	// at most QKV, O, GATE_UP, DOWN per layer
	x->capk = (int)hp->n_layer * 4 + n_head_chunks;
	x->k = calloc((size_t)x->capk, sizeof *x->k);
	x->info = calloc((size_t)x->capk, sizeof *x->info);
	if (!x->k || !x->info) {
		ad_err(err, "out of memory");
		goto fail;
	}

	for (int il = 0; il < hp->n_layer; il++) {
		const struct model_layer *ml = &m->layers[il];
		struct xk *k;
		// the layer's shapes (gemma4: per layer; its shared layers compute q only)
		const int nq = (int)(hp->n_head * ml->head_dim) * (ml->attn_gate ? 2 : 1); // qwen35: q and gate rows
		const int nk = ml->kv_src == il ? (int)(hp->n_head_kv * ml->head_dim) : 0;
		const int nv = ml->kv_src == il ? (int)(hp->n_head_kv * ml->head_dim_v) : 0;
		if (ml->recur) { // qwen35 delta-net: [qkv; z; beta; alpha] and ssm_out (plan.h)
			const int C = (int)ml->dn_qkv.ne[1], nvd = (int)ml->dn_z.ne[1], nvh = (int)ml->dn_beta.ne[1];
			k = add_kernel(x, ANE_K_QKV, il, 0, E, C + nvd + 2 * nvh, 0);
			if (deq(x, &ml->dn_qkv, &k->w[0], err) || deq(x, &ml->dn_z, &k->w[1], err) ||
			    deq(x, &ml->dn_beta, &k->w[2], err) || deq(x, &ml->dn_alpha, &k->w[3], err))
				goto fail;
			k->rows[0] = C;
			k->rows[1] = nvd;
			k->rows[2] = k->rows[3] = nvh;
			k->nparts = 4;
			k = add_kernel(x, ANE_K_O, il, 0, nvd, E, 0);
			if (deq(x, &ml->dn_out, &k->w[0], err))
				goto fail;
			k->rows[0] = E;
			k->nparts = 1;
			goto ffn;
		}
		if (ml->conv) { // lfm2 ShortConv: in_proj and out_proj (plan.h)
			k = add_kernel(x, ANE_K_QKV, il, 0, E, 3 * E, 0);
			if (deq(x, &ml->conv_in, &k->w[0], err))
				goto fail;
			k->rows[0] = 3 * E;
			k->nparts = 1;
			k = add_kernel(x, ANE_K_O, il, 0, E, E, 0);
			if (deq(x, &ml->conv_out, &k->w[0], err))
				goto fail;
			k->rows[0] = E;
			k->nparts = 1;
			goto ffn;
		}
		k = add_kernel(x, ANE_K_QKV, il, 0, E, nq + nk + nv, 0);
		if (ml->wqkv.name) {
			if (deq(x, &ml->wqkv, &k->w[0], err))
				goto fail;
			k->rows[0] = nq + nk + nv;
			k->nparts = 1;
		} else if (!nk) {
			if (deq(x, &ml->wq, &k->w[0], err))
				goto fail;
			k->rows[0] = nq;
			k->nparts = 1;
		} else {
			if (deq(x, &ml->wq, &k->w[0], err) || deq(x, &ml->wk, &k->w[1], err) ||
			    deq(x, &ml->wv, &k->w[2], err))
				goto fail;
			k->rows[0] = nq;
			k->rows[1] = nk;
			k->rows[2] = nv;
			k->nparts = 3;
		}
		k = add_kernel(x, ANE_K_O, il, 0, (int)(hp->n_head * ml->head_dim_v), E, 0);
		if (deq(x, &ml->wo, &k->w[0], err))
			goto fail;
		k->rows[0] = E;
		k->nparts = 1;
ffn:
		if (ml->gate_inp.name) {
			if (!ml->gate_shexp.name)
				continue;
			const int ff = (int)hp->n_ff_shexp;
			k = add_kernel(x, ANE_K_SHEXP, il, 0, E, E, 0);
			if (deq(x, &ml->gate_shexp, &k->gate, err) || deq(x, &ml->up_shexp, &k->up, err) ||
			    deq(x, &ml->down_shexp, &k->down, err))
				goto fail;
			k->ff = ff;
			x->max_ff = ff > x->max_ff ? ff : x->max_ff;
			continue;
		}
		const int ff = (int)ml->n_ff;
		const float *gate, *up, *down;
		if (ml->gate.name) {
			if (deq(x, &ml->gate, &gate, err) || deq(x, &ml->up, &up, err))
				goto fail;
		} else { // phi3: gate and up in one tensor, gate first
			if (deq(x, &ml->up, &gate, err))
				goto fail;
			up = gate + (size_t)ff * (size_t)E;
		}
		if (deq(x, &ml->down, &down, err))
			goto fail;
		if (split) {
			k = add_kernel(x, ANE_K_GATE_UP, il, 0, E, 2 * ff, 0);
			k->w[0] = gate;
			k->w[1] = up;
			k->rows[0] = k->rows[1] = ff;
			k->nparts = 2;
			k = add_kernel(x, ANE_K_DOWN, il, 0, ff, E, 0);
			k->w[0] = down;
			k->rows[0] = E;
			k->nparts = 1;
		} else {
			k = add_kernel(x, ANE_K_FFN, il, 0, E, E, 0);
			k->gate = gate;
			k->up = up;
			k->down = down;
			k->ff = ff;
			x->max_ff = ff > x->max_ff ? ff : x->max_ff;
		}
	}
	const float *out;
	if (deq(x, m->tied_output ? &m->tok_embd : &m->output, &out, err))
		goto fail;
	for (int c = 0; c < n_head_chunks; c++) {
		int r0 = c * head_rows, rows = V - r0 < head_rows ? V - r0 : head_rows;
		struct xk *k = add_kernel(x, ANE_K_LM_HEAD, -1, c, E, rows, r0);
		k->w[0] = out + (size_t)r0 * (size_t)E;
		k->rows[0] = rows;
		k->nparts = 1;
	}
	for (int i = 0; i < x->nk; i++) {
		const struct xk *k = &x->k[i];
		uint64_t b = 0;
		for (int p = 0; p < k->nparts; p++)
			b += (uint64_t)k->rows[p] * (uint64_t)k->in * 4;
		if (k->gate)
			b = 3 * (uint64_t)k->ff * (uint64_t)k->in * 4;
		x->info[i].weight_bytes = b;
	}
	x->hb = malloc((size_t)(x->max_ff > 0 ? x->max_ff : 1) * sizeof(float));
	x->hb2 = malloc((size_t)(x->max_ff > 0 ? x->max_ff : 1) * sizeof(float));
	if (!x->hb || !x->hb2) {
		ad_err(err, "out of memory");
		goto fail;
	}
	x->kb.n_kernels = x->nk;
	x->kb.kernels = x->info;
	return &x->kb;
fail:
	ad_err_prefix(err, "exact backend");
	x_free(&x->kb);
	return NULL;
}
