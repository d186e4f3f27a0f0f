#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane.pb-c.h"
#include "wtype.h"

// enum ane_kind is KernelKind of proto/ane.proto, value for value: the
// workers put one into the other's field without a table
#define PIN(k) _Static_assert((int)ANE_K_##k == (int)ANEDVD__KERNEL_KIND__KERNEL_##k, "ane_kind " #k " is KernelKind's")
PIN(QKV);
PIN(O);
PIN(FFN);
PIN(GATE_UP);
PIN(DOWN);
PIN(LM_HEAD);
PIN(SHEXP);
PIN(PROBE);
#undef PIN

const char *
ane_kind_name(enum ane_kind k)
{
	switch (k) {
	case ANE_K_QKV:
		return "qkv";
	case ANE_K_O:
		return "o";
	case ANE_K_FFN:
		return "ffn";
	case ANE_K_GATE_UP:
		return "gate_up";
	case ANE_K_DOWN:
		return "down";
	case ANE_K_LM_HEAD:
		return "lm_head";
	case ANE_K_SHEXP:
		return "shexp";
	case ANE_K_PROBE:
		return "probe";
	}
	return "?";
}

void
ane_pk_describe(const struct ane_pk *k, char *buf, int cap)
{
	if (k->kind == ANE_K_LM_HEAD)
		snprintf(buf, (size_t)cap, "%s #%d rows %d.. %d -> %d", ane_kind_name(k->kind), k->chunk, k->row_offset,
		         k->in_ch, k->out_ch);
	else if (k->ff)
		snprintf(buf, (size_t)cap, "%s L%d %d -> %d -> %d", ane_kind_name(k->kind), k->layer, k->in_ch, k->ff,
		         k->out_ch);
	else
		snprintf(buf, (size_t)cap, "%s L%d %d -> %d", ane_kind_name(k->kind), k->layer, k->in_ch, k->out_ch);
}

int
ane_plan_find(const struct ane_plan *p, enum ane_kind kind, int layer, int chunk)
{
	for (int i = 0; i < p->n; i++)
		if (p->k[i].kind == kind && p->k[i].layer == layer && p->k[i].chunk == chunk)
			return i;
	return -1;
}

void
ane_plan_free(struct ane_plan *p)
{
	free(p->k);
	memset(p, 0, sizeof *p);
}

// a part must be rows of a 2-D weight whose rows are `in` long
static int
part(struct ane_part *pt, const struct model_tensor *t, int64_t row0, int64_t rows, int64_t in, char *err)
{
	if (!t || !t->name)
		return ad_err(err, "missing weight");
	if (t->ne[0] != in || t->ne[2] != 1 || t->ne[3] != 1 || row0 < 0 || rows <= 0 || row0 + rows > t->ne[1])
		return ad_err(err, "%s: shape [%lld, %lld] has no rows %lld..%lld of %lld", t->name,
		              (long long)t->ne[0], (long long)t->ne[1], (long long)row0, (long long)(row0 + rows),
		              (long long)in);
	*pt = (struct ane_part){t, row0, rows};
	return 0;
}

static struct ane_pk *
add(struct ane_plan *p, enum ane_kind kind, int layer, int chunk, int64_t in, int64_t out)
{
	struct ane_pk *k = &p->k[p->n];
	*k = (struct ane_pk){
		.id = p->n, .kind = kind, .layer = layer, .chunk = chunk, .in_ch = (int)in, .out_ch = (int)out};
	p->n++;
	return k;
}

static int
fused(struct ane_pk *k, const struct model_tensor *gate, int64_t g0, const struct model_tensor *up, int64_t u0,
      const struct model_tensor *down, int64_t E, int64_t ff, char *err)
{
	k->ff = (int)ff;
	k->nparts = 3;
	if (part(&k->parts[0], gate, g0, ff, E, err) || part(&k->parts[1], up, u0, ff, E, err) ||
	    part(&k->parts[2], down, 0, E, ff, err))
		return -1;
	return 0;
}

int
ane_plan_build(struct ane_plan *p, const struct model *m, const struct ane_plan_opts *o, char *err)
{
	const struct model_hparams *hp = &m->hp;
	memset(p, 0, sizeof *p);
	p->width = o && o->width > 0 ? o->width : 64;
	p->split = o && o->split;
	p->weights = o ? o->weights : ANE_W_FP16;
	if (p->weights != ANE_W_FP16 && p->weights != ANE_W_INT8 && p->weights != ANE_W_LUT4)
		return ad_err(err, "plan: weight format %d (fp16, int8 or lut4)", (int)p->weights);
	p->gelu = m->hp.act == MODEL_ACT_GELU;
	const int64_t E = hp->n_embd, V = hp->n_vocab, L = hp->n_layer;
	// the largest shapes of any layer
	const int64_t nq_max = hp->n_head * hp->head_dim, nk_max = hp->n_head_kv * hp->head_dim;
	const int64_t nv_max = hp->n_head_kv * hp->head_dim_v, no_max = hp->n_head * hp->head_dim_v;
	const int64_t lim = ANE_MIL_MAX_DIM;
	if (p->width > 4096)
		return ad_err(err, "plan: width %d (at most 4096)", p->width);
	if (E <= 0 || V <= 0 || L <= 0 || E > lim || 3 * E > lim || V > lim || 2 * nq_max + nk_max + nv_max > lim ||
	    no_max > lim || (3 * hp->ssm_n_group + hp->ssm_dt_rank) * hp->ssm_d_state + 2 * hp->ssm_dt_rank > lim ||
	    hp->n_ff > lim || hp->n_ff_shexp > lim || L > 100000)
		return ad_err(err, "plan: hyper-parameters out of range (n_embd %lld, n_vocab %lld, n_layer %lld)",
		              (long long)E, (long long)V, (long long)L);
	if (o && o->head_rows > 0)
		p->head_rows = o->head_rows < V ? o->head_rows : (int)V;
	else
		p->head_rows = ane_head_chunk_rows((int)E, (int)V);
	if (p->head_rows <= 0)
		return ad_err(err, "plan: no LM-head chunk size for %lld x %lld", (long long)E, (long long)V);
	p->head_chunks = (int)((V + p->head_rows - 1) / p->head_rows);
	p->k = calloc((size_t)(L * 4 + p->head_chunks), sizeof *p->k);
	if (!p->k)
		return ad_err(err, "plan: out of memory");

	for (int il = 0; il < L; il++) {
		const struct model_layer *ml = &m->layers[il];
		struct ane_pk *k;
		// the layer's own shapes (gemma4's differ per layer; its shared
		// layers compute q only)
		const int64_t nq = hp->n_head * ml->head_dim, no = hp->n_head * ml->head_dim_v;
		const int64_t nk = ml->kv_src == il ? hp->n_head_kv * ml->head_dim : 0;
		const int64_t nv = ml->kv_src == il ? hp->n_head_kv * ml->head_dim_v : 0;
		if (ml->recur) {
			// qwen35 delta-net: the four projections of the block's input in
			// the QKV slot, ssm_out in O's
			const int64_t C = ml->dn_qkv.ne[1], nvd = ml->dn_z.ne[1], nvh = ml->dn_beta.ne[1];
			k = add(p, ANE_K_QKV, il, 0, E, C + nvd + 2 * nvh);
			k->nparts = 4;
			if (part(&k->parts[0], &ml->dn_qkv, 0, C, E, err) ||
			    part(&k->parts[1], &ml->dn_z, 0, nvd, E, err) ||
			    part(&k->parts[2], &ml->dn_beta, 0, nvh, E, err) ||
			    part(&k->parts[3], &ml->dn_alpha, 0, nvh, E, err))
				goto fail;
			k = add(p, ANE_K_O, il, 0, nvd, E);
			k->nparts = 1;
			if (part(&k->parts[0], &ml->dn_out, 0, E, nvd, err))
				goto fail;
		} else if (ml->conv) {
			// lfm2 ShortConv: in_proj in the QKV slot, out_proj in O's
			k = add(p, ANE_K_QKV, il, 0, E, 3 * E);
			k->nparts = 1;
			if (part(&k->parts[0], &ml->conv_in, 0, 3 * E, E, err))
				goto fail;
			k = add(p, ANE_K_O, il, 0, E, E);
			k->nparts = 1;
			if (part(&k->parts[0], &ml->conv_out, 0, E, E, err))
				goto fail;
		} else {
			const int64_t qw = ml->attn_gate ? 2 * nq : nq; // qwen35: q and gate rows per head
			k = add(p, ANE_K_QKV, il, 0, E, qw + nk + nv);
			if (ml->wqkv.name) {
				k->nparts = 1;
				if (part(&k->parts[0], &ml->wqkv, 0, nq + nk + nv, E, err))
					goto fail;
			} else if (!nk) {
				k->nparts = 1;
				if (part(&k->parts[0], &ml->wq, 0, qw, E, err))
					goto fail;
			} else {
				k->nparts = 3;
				if (part(&k->parts[0], &ml->wq, 0, qw, E, err) ||
				    part(&k->parts[1], &ml->wk, 0, nk, E, err) ||
				    part(&k->parts[2], &ml->wv, 0, nv, E, err))
					goto fail;
			}
			k = add(p, ANE_K_O, il, 0, no, E);
			k->nparts = 1;
			if (part(&k->parts[0], &ml->wo, 0, E, no, err))
				goto fail;
		}

		if (ml->gate_inp.name) { // MoE: the routed experts run on the CPU
			if (!ml->gate_shexp.name)
				continue;
			k = add(p, ANE_K_SHEXP, il, 0, E, E);
			if (fused(k, &ml->gate_shexp, 0, &ml->up_shexp, 0, &ml->down_shexp, E, hp->n_ff_shexp, err))
				goto fail;
			continue;
		}
		const int64_t ff = ml->n_ff;
		// phi3: gate and up in one tensor, gate rows first
		const struct model_tensor *gate = ml->gate.name ? &ml->gate : &ml->up;
		const int64_t u0 = ml->gate.name ? 0 : ff;
		if (p->split || p->gelu) {
			k = add(p, ANE_K_GATE_UP, il, 0, E, 2 * ff);
			k->nparts = 2;
			if (part(&k->parts[0], gate, 0, ff, E, err) || part(&k->parts[1], &ml->up, u0, ff, E, err))
				goto fail;
			k = add(p, ANE_K_DOWN, il, 0, ff, E);
			k->nparts = 1;
			if (part(&k->parts[0], &ml->down, 0, E, ff, err))
				goto fail;
		} else {
			k = add(p, ANE_K_FFN, il, 0, E, E);
			if (fused(k, gate, 0, &ml->up, u0, &ml->down, E, ff, err))
				goto fail;
		}
	}
	const struct model_tensor *out = m->tied_output ? &m->tok_embd : &m->output;
	for (int c = 0; c < p->head_chunks; c++) {
		int64_t r0 = (int64_t)c * p->head_rows, rows = V - r0 < p->head_rows ? V - r0 : p->head_rows;
		struct ane_pk *k = add(p, ANE_K_LM_HEAD, -1, c, E, rows);
		k->row_offset = (int)r0;
		k->nparts = 1;
		if (part(&k->parts[0], out, r0, rows, E, err))
			goto fail;
	}
	for (int i = 0; i < p->n; i++) {
		struct ane_pk *k = &p->k[i];
		// a projection's parts are one [rows][in] matrix, a fused FFN's three
		uint64_t b = 0, rows = 0;
		for (int j = 0; j < k->nparts; j++) {
			if (k->ff)
				b += ane_wfmt_bytes(p->weights, (uint64_t)k->parts[j].rows,
				                    (uint64_t)k->parts[j].t->ne[0]);
			rows += (uint64_t)k->parts[j].rows;
		}
		if (!k->ff)
			b = ane_wfmt_bytes(p->weights, rows, (uint64_t)k->in_ch);
		k->weight_bytes = b;
		k->wfmt = p->weights;
	}
	return 0;
fail:
	ad_err_prefix(err, "plan: layer kernel %d", p->n - 1);
	ane_plan_free(p);
	return -1;
}

// stored in 8 bits or fewer per weight: every block type (ggml's quants)
static int
low_bits(uint32_t type)
{
	switch (type) {
	case AD_TYPE_F32:
	case AD_TYPE_F16:
	case AD_TYPE_BF16:
	case AD_TYPE_F64:
	case AD_TYPE_I16:
	case AD_TYPE_I32:
	case AD_TYPE_I64:
		return 0;
	default:
		return 1;
	}
}

enum ane_wfmt
ane_plan_weights_default(const struct model *m, const char *backend)
{
	if (backend && strcmp(backend, "emu") != 0)
		return ANE_W_FP16;
	struct ane_plan p;
	char err[AD_ERRLEN];
	if (ane_plan_build(&p, m, NULL, err))
		return ANE_W_FP16; // the caller's own plan will report the error
	int all = p.n > 0;
	for (int i = 0; i < p.n && all; i++)
		for (int j = 0; j < p.k[i].nparts; j++)
			all &= low_bits(p.k[i].parts[j].t->type);
	ane_plan_free(&p);
	return all ? ANE_W_INT8 : ANE_W_FP16;
}

const char *
ane_wfmt_name(enum ane_wfmt f)
{
	return f == ANE_W_INT8 ? "int8" : f == ANE_W_LUT4 ? "lut4" : "fp16";
}

int
ane_wfmt_parse(const char *s, enum ane_wfmt *f)
{
	if (s && !strcmp(s, "fp16"))
		*f = ANE_W_FP16;
	else if (s && !strcmp(s, "int8"))
		*f = ANE_W_INT8;
	else if (s && !strcmp(s, "lut4"))
		*f = ANE_W_LUT4;
	else
		return -1;
	return 0;
}

uint64_t
ane_wfmt_bytes(enum ane_wfmt f, uint64_t cout, uint64_t cin)
{
	if (f == ANE_W_LUT4) // indices, tables (one a 64 rows, or one), scales
		return (cout * cin + 1) / 2 + (cout % 64 ? 1 : cout / 64) * 32 + cout * 2;
	return f == ANE_W_INT8 ? cout * cin + cout * 2 : cout * cin * 2;
}

int
ane_head_chunk_rows(int hidden, int vocab)
{
	return ane_head_rows_for(hidden, vocab, ANE_HEAD_TARGET_BYTES);
}

int
ane_head_rows_for(int hidden, int vocab, uint64_t target_bytes)
{
	if (hidden < 1 || vocab < 1)
		return 0;
	uint64_t rows = target_bytes / ((uint64_t)hidden * 2);
	if (rows < 1)
		rows = 1;
	return rows < (uint64_t)vocab ? (int)rows : vocab;
}

int
ane_head_nchunks(int hidden, int vocab)
{
	int rows = ane_head_chunk_rows(hidden, vocab);
	return rows ? (vocab + rows - 1) / rows : 0;
}
