// model.c - architecture table, GGUF loading, tensor binding and validation.
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "log.h"
#include "wtype.h"

// --- architecture table ------------------------------------------------------

struct arch_info {
	const char *name;
	enum model_rope rope;
	float rms_eps; // used when the file has no epsilon
};

static const struct arch_info arch_table[MODEL_ARCH_COUNT] = {
	[MODEL_ARCH_LLAMA] = {"llama", MODEL_ROPE_NORM, 1e-5f},
	[MODEL_ARCH_MISTRAL] = {"mistral", MODEL_ROPE_NORM, 1e-5f},
	[MODEL_ARCH_SMOLLM3] = {"smollm3", MODEL_ROPE_NORM, 1e-6f},
	[MODEL_ARCH_QWEN2] = {"qwen2", MODEL_ROPE_NEOX, 1e-6f},
	[MODEL_ARCH_QWEN3] = {"qwen3", MODEL_ROPE_NEOX, 1e-6f},
	[MODEL_ARCH_GEMMA2] = {"gemma2", MODEL_ROPE_NEOX, 1e-6f},
	[MODEL_ARCH_GEMMA3] = {"gemma3", MODEL_ROPE_NEOX, 1e-6f},
	[MODEL_ARCH_PHI3] = {"phi3", MODEL_ROPE_NEOX, 1e-5f},
	[MODEL_ARCH_QWEN2MOE] = {"qwen2moe", MODEL_ROPE_NEOX, 1e-6f},
	[MODEL_ARCH_QWEN3MOE] = {"qwen3moe", MODEL_ROPE_NEOX, 1e-6f},
	[MODEL_ARCH_HUNYUAN_DENSE] = {"hunyuan-dense", MODEL_ROPE_NEOX, 1e-5f},
	[MODEL_ARCH_LFM2] = {"lfm2", MODEL_ROPE_NEOX, 1e-5f},
	[MODEL_ARCH_LFM2MOE] = {"lfm2moe", MODEL_ROPE_NEOX, 1e-5f},
	[MODEL_ARCH_GEMMA4] = {"gemma4", MODEL_ROPE_NEOX, 1e-6f},
	[MODEL_ARCH_QWEN35] = {"qwen35", MODEL_ROPE_NEOX, 1e-6f},
};

const char *
model_arch_list(void)
{
	static char buf[512];
	if (!buf[0]) {
		size_t n = 0;
		for (int i = 0; i < MODEL_ARCH_COUNT; i++)
			n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", i ? ", " : "", arch_table[i].name);
	}
	return buf;
}

const char *
model_rope_scaling_name(enum model_rope_scaling s)
{
	switch (s) {
	case MODEL_ROPE_SCALING_LINEAR:
		return "linear";
	case MODEL_ROPE_SCALING_YARN:
		return "yarn";
	case MODEL_ROPE_SCALING_LONGROPE:
		return "longrope";
	default:
		return "none";
	}
}

static int
is_moe(enum model_arch a)
{
	return a == MODEL_ARCH_QWEN2MOE || a == MODEL_ARCH_QWEN3MOE || a == MODEL_ARCH_LFM2MOE;
}

static int
is_lfm2(enum model_arch a)
{
	return a == MODEL_ARCH_LFM2 || a == MODEL_ARCH_LFM2MOE;
}

static int
is_gemma(enum model_arch a)
{
	return a == MODEL_ARCH_GEMMA2 || a == MODEL_ARCH_GEMMA3 || a == MODEL_ARCH_GEMMA4;
}

int
model_arch_from_name(const char *name)
{
	for (int i = 0; i < MODEL_ARCH_COUNT; i++)
		if (strcmp(arch_table[i].name, name) == 0)
			return i;
	return -1;
}

const char *
model_arch_name(enum model_arch a)
{
	return (unsigned)a < MODEL_ARCH_COUNT ? arch_table[a].name : "?";
}

const char *
model_rope_name(enum model_rope r)
{
	switch (r) {
	case MODEL_ROPE_NORM:
		return "norm (adjacent pairs)";
	case MODEL_ROPE_NEOX:
		return "neox (halves)";
	default:
		return "auto";
	}
}

// --- the tensor list ---------------------------------------------------------

void
model_init(struct model *m)
{
	memset(m, 0, sizeof *m);
	m->hp.bos_id = -1;
	m->hp.eos_id = -1;
	m->hp.yarn_ext_factor = -1;
}

void
model_free(struct model *m)
{
	if (!m)
		return;
	for (int64_t i = 0; i < m->n_tensors; i++)
		free((char *)m->tensors[i].name);
	free(m->tensors);
	free(m->layers);
	free(m->layer_kv_heads);
	free(m->layer_n_ff);
	free(m->layer_swa);
	free(m->layer_recr);
	if (m->src_free)
		m->src_free(m->src);
	gguf_close(m->gguf);
	model_init(m);
}

int64_t
model_tensor_nelem(const struct model_tensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < 4; i++)
		n *= t->ne[i] ? t->ne[i] : 1;
	return n;
}

int
model_add_tensor(struct model *m, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne, const void *data,
                 size_t nbytes, char *err)
{
	if (n_dims < 1 || n_dims > 4)
		return ad_err(err, "tensor %s: %u dimensions", name, n_dims);
	if (model_find_tensor(m, name))
		return ad_err(err, "tensor %s appears twice", name);
	if (m->n_tensors == m->cap_tensors) {
		int64_t cap = m->cap_tensors ? 2 * m->cap_tensors : 64;
		struct model_tensor *t = realloc(m->tensors, (size_t)cap * sizeof *t);
		if (!t)
			return ad_err(err, "out of memory");
		m->tensors = t;
		m->cap_tensors = cap;
	}
	struct model_tensor *t = &m->tensors[m->n_tensors];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	if (!t->name)
		return ad_err(err, "out of memory");
	t->type = type;
	t->n_dims = n_dims;
	for (int i = 0; i < 4; i++)
		t->ne[i] = i < (int)n_dims ? ne[i] : 1;
	t->data = data;
	t->nbytes = nbytes;
	m->n_tensors++;
	return 0;
}

const struct model_tensor *
model_find_tensor(const struct model *m, const char *name)
{
	// linear: a few hundred names, looked up once each at load time
	for (int64_t i = 0; i < m->n_tensors; i++)
		if (strcmp(m->tensors[i].name, name) == 0)
			return &m->tensors[i];
	return NULL;
}

size_t
model_kv_bytes_per_pos(const struct model *m)
{
	const struct model_hparams *hp = &m->hp;
	size_t n = 0;
	for (int64_t il = 0; il < hp->n_layer; il++) {
		const struct model_layer *L = m->layers ? &m->layers[il] : NULL;
		if (L && L->conv)
			n += (size_t)hp->n_embd;
		else if (L && L->recur) // a recurrent state instead (model_state_floats)
			continue;
		else if (L && L->kv_src != il) // gemma4: reads an earlier layer's
			continue;
		else if (L)
			n += (size_t)hp->n_head_kv * (size_t)(L->head_dim + L->head_dim_v);
		else
			n += (size_t)hp->n_head_kv * (size_t)(hp->head_dim + hp->head_dim_v);
	}
	return n * sizeof(float);
}

size_t
model_state_floats(const struct model *m)
{
	const struct model_hparams *hp = &m->hp;
	size_t n = 0;
	const size_t d = (size_t)hp->ssm_d_state, ch = (size_t)(2 * hp->ssm_n_group + hp->ssm_dt_rank) * d;
	for (int64_t il = 0; m->layers && il < hp->n_layer; il++)
		if (m->layers[il].recur)
			n += (size_t)(hp->n_conv - 1) * ch + (size_t)hp->ssm_dt_rank * d * d;
	return n;
}

const struct model_tensor *
model_rope_factors(const struct model *m, int64_t n_ctx)
{
	if (m->rope_freqs.name)
		return &m->rope_freqs;
	if (m->hp.rope_scaling != MODEL_ROPE_SCALING_LONGROPE)
		return NULL;
	const struct model_tensor *t = n_ctx > m->hp.n_ctx_orig ? &m->rope_long : &m->rope_short;
	return t->name ? t : NULL;
}

void
model_describe_rope(const struct model *m, char *buf, size_t cap)
{
	const struct model_hparams *hp = &m->hp;
	size_t n = 0;
#define ADD(...)                                                                                                       \
	do {                                                                                                           \
		if (n < cap)                                                                                           \
			n += (size_t)snprintf(buf + n, cap - n, __VA_ARGS__);                                          \
	} while (0)
	ADD("%s, %lld dims, base %g", model_rope_name(hp->rope), (long long)hp->n_rot, (double)hp->rope_base);
	if (hp->rope_scaling == MODEL_ROPE_SCALING_YARN)
		ADD(", yarn x%g from an original context of %lld (beta fast %g, slow %g, ext %g)",
		    1.0 / hp->rope_freq_scale, (long long)hp->n_ctx_orig, (double)hp->yarn_beta_fast,
		    (double)hp->yarn_beta_slow, (double)hp->yarn_ext_factor);
	else if (hp->rope_freq_scale != 1.0f)
		ADD(", linear scale x%g", 1.0 / hp->rope_freq_scale);
	if (hp->rope_scaling == MODEL_ROPE_SCALING_LONGROPE)
		ADD(", longrope (original context %lld: %s factors up to it, %s beyond)", (long long)hp->n_ctx_orig,
		    m->rope_short.name ? "short" : "no", m->rope_long.name ? "long" : "none");
	if (hp->rope_attn_factor != 1.0f)
		ADD(", cos/sin x%g", (double)hp->rope_attn_factor);
	if (m->rope_freqs.name)
		ADD(", per-pair frequency factors");
#undef ADD
	if (cap)
		buf[n < cap ? n : cap - 1] = 0;
}

// ggml_rope_yarn_corr_dim: the pair index whose wavelength fits n_rot_b
// turns into the original context
static float
yarn_corr_dim(int64_t n_dims, int64_t n_ctx_orig, float n_rot_b, float base)
{
	return (float)n_dims * logf((float)n_ctx_orig / (n_rot_b * 2 * (float)M_PI)) / (2 * logf(base));
}

void
model_rope_angles(const struct model_hparams *hp, float base, float freq_scale, const float *factors, int pos,
                  float *cs)
{
	const int64_t n_rot = hp->n_rot;
	const float theta_scale = powf(base, -2.0f / (float)n_rot);
	const float ext = hp->yarn_ext_factor > 0 ? hp->yarn_ext_factor : 0.0f;
	float mscale = hp->rope_attn_factor > 0 ? hp->rope_attn_factor : 1.0f;
	float lo = 0, hi = 0;
	if (ext != 0.0f) {
		lo = floorf(yarn_corr_dim(n_rot, hp->n_ctx_orig, hp->yarn_beta_fast, base));
		hi = ceilf(yarn_corr_dim(n_rot, hp->n_ctx_orig, hp->yarn_beta_slow, base));
		lo = lo > 0 ? lo : 0;
		hi = hi < (float)(n_rot - 1) ? hi : (float)(n_rot - 1);
		mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
	}
	float theta = (float)pos;
	for (int64_t i = 0; i < n_rot / 2; i++) {
		float extrap = factors ? theta / factors[i] : theta;
		float t = extrap * freq_scale;
		if (ext != 0.0f) {
			// rope_yarn_ramp: 1 below lo (extrapolate), 0 above hi (interpolate)
			float y = ((float)i - lo) / fmaxf(0.001f, hi - lo);
			float mix = (1 - fminf(1, fmaxf(0, y))) * ext;
			t = t * (1 - mix) + extrap * mix;
		}
		cs[2 * i] = cosf(t) * mscale;
		cs[2 * i + 1] = sinf(t) * mscale;
		theta *= theta_scale;
	}
}

// --- binding -------------------------------------------------------------------

enum { OPT = 0, REQ = 1 };

// bind looks a tensor up by name, checks its type and shape (dims given
// fastest first; trailing unit dims are fine) and copies the view into slot.
static int
bind(struct model *m, struct model_tensor *slot, int required, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
     char *err)
{
	const struct model_tensor *t = model_find_tensor(m, name);
	if (!t) {
		if (required)
			return ad_err(err, "missing tensor %s (needed by %s)", name, model_arch_name(m->arch));
		memset(slot, 0, sizeof *slot);
		return 0;
	}
	int64_t want[4] = {ne0, ne1 ? ne1 : 1, ne2 ? ne2 : 1, 1};
	if (t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != want[2] || t->ne[3] != want[3])
		return ad_err(err, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
		              name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
		              (long long)want[0], (long long)want[1], (long long)want[2], (long long)want[3]);
	if (!ad_type_supported(t->type)) {
		const char *tn = ad_type_name(t->type);
		if (tn)
			return ad_err(err, "tensor %s has type %s, which is not supported", name, tn);
		return ad_err(err, "tensor %s has unknown type id %u", name, t->type);
	}
	size_t row;
	if (ad_type_row_bytes(t->type, t->ne[0], &row))
		return ad_err(err, "tensor %s: row length %lld is not a multiple of the %s block size", name,
		              (long long)t->ne[0], ad_type_name(t->type));
	size_t need = row * (size_t)(t->ne[1] * t->ne[2] * t->ne[3]);
	if (t->nbytes != need || !t->data)
		return ad_err(err, "tensor %s holds %zu bytes, its type and shape need %zu", name, t->nbytes, need);
	m->tensors[t - m->tensors].used = 1;
	*slot = *t;
	return 0;
}

static int
bindl(struct model *m, struct model_tensor *slot, int required, int il, const char *what, int64_t ne0, int64_t ne1,
      int64_t ne2, char *err)
{
	char name[96];
	snprintf(name, sizeof name, "blk.%d.%s", il, what);
	return bind(m, slot, required, name, ne0, ne1, ne2, err);
}

static int
has_tensor_l(const struct model *m, int il, const char *what)
{
	char name[96];
	snprintf(name, sizeof name, "blk.%d.%s", il, what);
	return model_find_tensor(m, name) != NULL;
}

static int
bind_layer(struct model *m, int il, char *err)
{
	const struct model_hparams *hp = &m->hp;
	struct model_layer *L = &m->layers[il];
	const enum model_arch a = m->arch;
	// the layer's shape: the model's, but gemma4's sliding layers have their own
	// head sizes and its layers their own FFN widths
	L->sliding = 0;
	if (hp->sliding_window > 0 && a == MODEL_ARCH_GEMMA4)
		L->sliding = m->layer_swa && m->layer_swa[il];
	L->head_dim = L->sliding ? hp->head_dim_swa : hp->head_dim;
	L->head_dim_v = L->sliding ? hp->head_dim_v_swa : hp->head_dim_v;
	L->n_rot = L->sliding ? hp->n_rot_swa : hp->n_rot;
	L->n_ff = m->layer_n_ff ? m->layer_n_ff[il] : hp->n_ff;
	L->kv_src = il;
	L->rope_factors = !(a == MODEL_ARCH_GEMMA4 && L->sliding);
	if (a == MODEL_ARCH_GEMMA4 && il >= hp->n_layer - hp->n_kv_shared) {
		// gemma4's last layers attend over the last earlier layer of their kind
		L->kv_src = (int)(hp->n_layer - hp->n_kv_shared - (L->sliding ? 2 : 1));
		if (L->kv_src < 0 || m->layers[L->kv_src].sliding != L->sliding)
			return ad_err(err, "blk.%d shares the K/V of blk.%d, which is not a %s layer", il, L->kv_src,
			              L->sliding ? "sliding" : "full");
	}
	const int own_kv = L->kv_src == il;
	const int64_t E = hp->n_embd, hd = L->head_dim, hdv = L->head_dim_v;
	const int64_t nq = hp->n_head * hd, nk = hp->n_head_kv * hd, nv = hp->n_head_kv * hdv;
	const int64_t no = hp->n_head * hdv;
	int rc = 0;

	rc |= bindl(m, &L->attn_norm, REQ, il, "attn_norm.weight", E, 0, 0, err);
	if (rc)
		return -1;

	// lfm2: a ShortConv block where head_count_kv says 0 (or, with one
	// value for every layer, where the file has the block's tensors)
	L->conv = 0;
	if (is_lfm2(a))
		L->conv = m->layer_kv_heads ? m->layer_kv_heads[il] == 0
		                            : has_tensor_l(m, il, "shortconv.in_proj.weight");
	// qwen35: a gated delta-net block unless the layer attends (every
	// full_attn_interval-th, or as attention.recurrent_layers says)
	L->recur = 0;
	L->attn_gate = a == MODEL_ARCH_QWEN35;
	if (a == MODEL_ARCH_QWEN35)
		L->recur = m->layer_recr ? m->layer_recr[il] != 0 : (il + 1) % hp->full_attn_interval != 0;
	if (L->recur) {
		const int64_t d = hp->ssm_d_state, nkd = hp->ssm_n_group * d, nvd = hp->ssm_dt_rank * d;
		const int64_t nvh = hp->ssm_dt_rank;
		L->attn_gate = 0;
		if (bindl(m, &L->dn_qkv, REQ, il, "attn_qkv.weight", E, 2 * nkd + nvd, 0, err) ||
		    bindl(m, &L->dn_z, REQ, il, "attn_gate.weight", E, nvd, 0, err) ||
		    bindl(m, &L->dn_conv, REQ, il, "ssm_conv1d.weight", hp->n_conv, 2 * nkd + nvd, 0, err) ||
		    bindl(m, &L->dn_dt, REQ, il, "ssm_dt.bias", nvh, 0, 0, err) ||
		    bindl(m, &L->dn_a, REQ, il, "ssm_a", nvh, 0, 0, err) ||
		    bindl(m, &L->dn_beta, REQ, il, "ssm_beta.weight", E, nvh, 0, err) ||
		    bindl(m, &L->dn_alpha, REQ, il, "ssm_alpha.weight", E, nvh, 0, err) ||
		    bindl(m, &L->dn_norm, REQ, il, "ssm_norm.weight", d, 0, 0, err) ||
		    bindl(m, &L->dn_out, REQ, il, "ssm_out.weight", nvd, E, 0, err))
			return -1;
		if (has_tensor_l(m, il, "attn_q.weight"))
			return ad_err(
				err,
				"blk.%d is a gated delta-net block (full_attention_interval %lld), but it has attn_q",
				il, (long long)hp->full_attn_interval);
	} else if (L->conv) {
		if (bindl(m, &L->conv_in, REQ, il, "shortconv.in_proj.weight", E, 3 * E, 0, err) ||
		    bindl(m, &L->conv_w, REQ, il, "shortconv.conv.weight", hp->n_conv, E, 0, err) ||
		    bindl(m, &L->conv_out, REQ, il, "shortconv.out_proj.weight", E, E, 0, err))
			return -1;
		if (has_tensor_l(m, il, "attn_q.weight"))
			return ad_err(err, "blk.%d: head_count_kv 0 marks a ShortConv block, but it has attn_q", il);
	} else if (a == MODEL_ARCH_PHI3 && has_tensor_l(m, il, "attn_qkv.weight")) {
		if (bindl(m, &L->wqkv, REQ, il, "attn_qkv.weight", E, nq + nk + nv, 0, err) ||
		    bindl(m, &L->bqkv, OPT, il, "attn_qkv.bias", nq + nk + nv, 0, 0, err))
			return -1;
	} else if (!own_kv) { // gemma4's shared layers: q only
		if (bindl(m, &L->wq, REQ, il, "attn_q.weight", E, nq, 0, err))
			return -1;
		if (has_tensor_l(m, il, "attn_k.weight"))
			return ad_err(err, "blk.%d has attn_k, but shared_kv_layers says it reads blk.%d's K/V", il,
			              L->kv_src);
	} else {
		// qwen35: per head its q rows, then as many gate rows
		if (bindl(m, &L->wq, REQ, il, "attn_q.weight", E, L->attn_gate ? 2 * nq : nq, 0, err) ||
		    bindl(m, &L->wk, REQ, il, "attn_k.weight", E, nk, 0, err) ||
		    bindl(m, &L->wv, REQ, il, "attn_v.weight", E, nv, 0, err))
			return -1;
		int bias = (a == MODEL_ARCH_QWEN2 || a == MODEL_ARCH_QWEN2MOE) ? REQ : OPT;
		if (bindl(m, &L->bq, bias, il, "attn_q.bias", nq, 0, 0, err) ||
		    bindl(m, &L->bk, bias, il, "attn_k.bias", nk, 0, 0, err) ||
		    bindl(m, &L->bv, bias, il, "attn_v.bias", nv, 0, 0, err))
			return -1;
	}
	if (L->recur) {
		// no attention tensors
	} else if (!L->conv && (bindl(m, &L->wo, REQ, il, "attn_output.weight", no, E, 0, err) ||
	                        bindl(m, &L->bo, OPT, il, "attn_output.bias", E, 0, 0, err)))
		return -1;

	int qk_norm = (a == MODEL_ARCH_QWEN3 || a == MODEL_ARCH_QWEN3MOE || a == MODEL_ARCH_GEMMA3 ||
	               a == MODEL_ARCH_HUNYUAN_DENSE || is_lfm2(a) || a == MODEL_ARCH_GEMMA4 || a == MODEL_ARCH_QWEN35)
	                      ? REQ
	                      : OPT;
	if (!L->conv && !L->recur &&
	    (bindl(m, &L->q_norm, qk_norm, il, "attn_q_norm.weight", hd, 0, 0, err) ||
	     bindl(m, &L->k_norm, own_kv ? qk_norm : OPT, il, "attn_k_norm.weight", hd, 0, 0, err)))
		return -1;

	int gemma = is_gemma(a);
	if (a == MODEL_ARCH_GEMMA4) {
		const int64_t P = hp->n_embd_pl;
		if (bindl(m, &L->out_scale, REQ, il, "layer_output_scale.weight", 1, 0, 0, err))
			return -1;
		if (P > 0 && (bindl(m, &L->pl_gate, REQ, il, "inp_gate.weight", E, P, 0, err) ||
		              bindl(m, &L->pl_proj, REQ, il, "proj.weight", P, E, 0, err) ||
		              bindl(m, &L->pl_norm, REQ, il, "post_norm.weight", E, 0, 0, err)))
			return -1;
	}
	if (gemma) {
		if (bindl(m, &L->post_attn_norm, REQ, il, "post_attention_norm.weight", E, 0, 0, err) ||
		    bindl(m, &L->post_ffw_norm, REQ, il, "post_ffw_norm.weight", E, 0, 0, err))
			return -1;
	}
	// qwen35 names its pre-FFN norm post_attention_norm
	if (bindl(m, &L->ffn_norm, REQ, il, a == MODEL_ARCH_QWEN35 ? "post_attention_norm.weight" : "ffn_norm.weight",
	          E, 0, 0, err))
		return -1;

	// feed-forward (lfm2moe: dense in the leading blocks)
	if (is_moe(a) && il >= hp->n_dense_lead) {
		const int64_t ne = hp->n_expert, fe = hp->n_ff_exp, fs = hp->n_ff_shexp;
		if (bindl(m, &L->exp_probs_b, hp->expert_gating == 2 ? REQ : OPT, il, "exp_probs_b.bias", ne, 0, 0,
		          err))
			return -1;
		if (bindl(m, &L->gate_inp, REQ, il, "ffn_gate_inp.weight", E, ne, 0, err) ||
		    bindl(m, &L->gate_exps, REQ, il, "ffn_gate_exps.weight", E, fe, ne, err) ||
		    bindl(m, &L->up_exps, REQ, il, "ffn_up_exps.weight", E, fe, ne, err) ||
		    bindl(m, &L->down_exps, REQ, il, "ffn_down_exps.weight", fe, E, ne, err))
			return -1;
		if (fs > 0 && (bindl(m, &L->gate_inp_shexp, OPT, il, "ffn_gate_inp_shexp.weight", E, 0, 0, err) ||
		               bindl(m, &L->gate_shexp, REQ, il, "ffn_gate_shexp.weight", E, fs, 0, err) ||
		               bindl(m, &L->up_shexp, REQ, il, "ffn_up_shexp.weight", E, fs, 0, err) ||
		               bindl(m, &L->down_shexp, REQ, il, "ffn_down_shexp.weight", fs, E, 0, err)))
			return -1;
	} else if (a == MODEL_ARCH_PHI3) {
		// gate and up fused: the first n_ff rows are the gate
		if (bindl(m, &L->up, REQ, il, "ffn_up.weight", E, 2 * hp->n_ff, 0, err) ||
		    bindl(m, &L->down, REQ, il, "ffn_down.weight", hp->n_ff, E, 0, err))
			return -1;
	} else {
		if (bindl(m, &L->gate, REQ, il, "ffn_gate.weight", E, L->n_ff, 0, err) ||
		    bindl(m, &L->up, REQ, il, "ffn_up.weight", E, L->n_ff, 0, err) ||
		    bindl(m, &L->down, REQ, il, "ffn_down.weight", L->n_ff, E, 0, err))
			return -1;
	}

	// per-layer attention kind and RoPE
	if (hp->sliding_window > 0 && a != MODEL_ARCH_GEMMA4) {
		if (a == MODEL_ARCH_GEMMA2 || a == MODEL_ARCH_GEMMA3)
			L->sliding = hp->swa_pattern > 0 && (il + 1) % hp->swa_pattern != 0;
		else if (a == MODEL_ARCH_MISTRAL)
			L->sliding = 1;
	}
	L->use_rope = !(hp->n_no_rope_step > 0 && (il + 1) % hp->n_no_rope_step == 0);
	if (L->sliding && (a == MODEL_ARCH_GEMMA3 || a == MODEL_ARCH_GEMMA4)) {
		// local layers: their own base, never scaled
		L->rope_base = hp->rope_base_swa;
		L->rope_freq_scale = 1.0f;
	} else {
		L->rope_base = hp->rope_base;
		L->rope_freq_scale = hp->rope_freq_scale;
	}
	return 0;
}

int
model_finish(struct model *m, char *err)
{
	struct model_hparams *hp = &m->hp;
	const enum model_arch a = m->arch;
	if ((unsigned)a >= MODEL_ARCH_COUNT)
		return ad_err(err, "architecture id %d out of range", (int)a);
	if (!m->arch_name[0])
		snprintf(m->arch_name, sizeof m->arch_name, "%s", arch_table[a].name);

	// the embedding tells the vocabulary when the metadata does not
	const struct model_tensor *te = model_find_tensor(m, "token_embd.weight");
	if (!te)
		return ad_err(err, "missing tensor token_embd.weight");
	if (hp->n_embd <= 0)
		return ad_err(err, "embedding length missing or not positive");
	if (hp->n_vocab <= 0)
		hp->n_vocab = te->ne[1];

	// defaults
	if (hp->n_layer <= 0 || hp->n_layer > 4096)
		return ad_err(err, "block count %lld out of range", (long long)hp->n_layer);
	if (hp->n_head <= 0)
		return ad_err(err, "head count missing or not positive");
	if (hp->n_head_kv <= 0)
		hp->n_head_kv = hp->n_head;
	if (hp->n_head % hp->n_head_kv != 0)
		return ad_err(err, "head count %lld is not a multiple of the KV head count %lld", (long long)hp->n_head,
		              (long long)hp->n_head_kv);
	if (hp->head_dim <= 0) {
		if (hp->n_embd % hp->n_head != 0)
			return ad_err(err, "embedding length %lld not divisible by %lld heads and no key_length",
			              (long long)hp->n_embd, (long long)hp->n_head);
		hp->head_dim = hp->n_embd / hp->n_head;
	}
	if (hp->head_dim_v <= 0)
		hp->head_dim_v = hp->head_dim;
	if (hp->n_rot <= 0)
		hp->n_rot = hp->head_dim;
	if (hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
		return ad_err(err, "rope dimension count %lld invalid for head size %lld", (long long)hp->n_rot,
		              (long long)hp->head_dim);
	if (hp->rms_eps <= 0)
		hp->rms_eps = arch_table[a].rms_eps;
	if (hp->rope_base <= 0)
		hp->rope_base = 10000.0f;
	if (hp->rope_freq_scale <= 0)
		hp->rope_freq_scale = 1.0f;
	if (hp->rope_base_swa <= 0)
		hp->rope_base_swa = a == MODEL_ARCH_GEMMA3 || a == MODEL_ARCH_GEMMA4 ? 10000.0f : hp->rope_base;
	if (a == MODEL_ARCH_GEMMA4) {
		// the sliding layers' shapes (the _swa keys), the largest for the buffers
		if (hp->head_dim_swa <= 0)
			hp->head_dim_swa = hp->head_dim;
		if (hp->head_dim_v_swa <= 0)
			hp->head_dim_v_swa = hp->head_dim_swa;
		if (hp->n_rot_swa <= 0)
			hp->n_rot_swa = hp->head_dim_swa;
		if (hp->n_rot_swa > hp->head_dim_swa || hp->n_rot_swa % 2 || hp->head_dim_swa > hp->head_dim ||
		    hp->head_dim_v_swa > hp->head_dim_v)
			return ad_err(err, "sliding-layer head sizes %lld / %lld, rope %lld invalid beside %lld / %lld",
			              (long long)hp->head_dim_swa, (long long)hp->head_dim_v_swa,
			              (long long)hp->n_rot_swa, (long long)hp->head_dim, (long long)hp->head_dim_v);
		if (hp->n_kv_shared < 0 || hp->n_kv_shared > hp->n_layer - 2)
			return ad_err(err, "shared_kv_layers %lld out of range for %lld blocks",
			              (long long)hp->n_kv_shared, (long long)hp->n_layer);
		if (hp->n_embd_pl < 0 || hp->n_embd_pl > hp->n_embd)
			return ad_err(err, "embedding_length_per_layer_input %lld out of range",
			              (long long)hp->n_embd_pl);
		hp->q_scale = 1.0f; // no score scaling: the q/k norms take its place
		hp->attn_softcap = 0;
	} else {
		hp->head_dim_swa = hp->head_dim_v_swa = hp->n_rot_swa = 0;
		hp->n_kv_shared = hp->n_embd_pl = 0;
	}
	if (hp->rope == MODEL_ROPE_AUTO)
		hp->rope = arch_table[a].rope;
	if (hp->n_ctx_orig <= 0)
		hp->n_ctx_orig = hp->n_ctx_train;
	if (hp->yarn_ext_factor < 0)
		hp->yarn_ext_factor = hp->rope_scaling == MODEL_ROPE_SCALING_YARN ? 1.0f : 0.0f;
	if (hp->yarn_beta_fast <= 0)
		hp->yarn_beta_fast = 32.0f;
	if (hp->yarn_beta_slow <= 0)
		hp->yarn_beta_slow = 1.0f;
	if (hp->rope_attn_factor <= 0)
		hp->rope_attn_factor = 1.0f;
	if (hp->yarn_ext_factor > 0 && hp->n_ctx_orig <= 0)
		return ad_err(err, "yarn RoPE scaling needs the original context length "
		                   "(rope.scaling.original_context_length)");
	if (a == MODEL_ARCH_GEMMA2 && hp->swa_pattern <= 0)
		hp->swa_pattern = 2;
	if (a == MODEL_ARCH_GEMMA3 && hp->swa_pattern <= 0)
		hp->swa_pattern = 6;
	if (a == MODEL_ARCH_SMOLLM3 && hp->n_no_rope_step <= 0)
		hp->n_no_rope_step = 4; // llama.cpp hard-codes it; there is no key
	if (hp->q_scale <= 0) {
		// gemma 27B scales by the model width per head, not the head size
		int big =
			(a == MODEL_ARCH_GEMMA2 && hp->n_layer == 46) || (a == MODEL_ARCH_GEMMA3 && hp->n_layer == 62);
		hp->q_scale = big ? 1.0f / sqrtf((float)(hp->n_embd / hp->n_head)) : 1.0f / sqrtf((float)hp->head_dim);
	}
	hp->qk_norm_post_rope = a == MODEL_ARCH_HUNYUAN_DENSE;
	// gemma: GELU, sqrt(n_embd) on the embeddings, q scaled itself
	hp->act = is_gemma(a) ? MODEL_ACT_GELU : MODEL_ACT_SILU;
	hp->embd_scale = is_gemma(a) ? sqrtf((float)hp->n_embd) : 1.0f;
	hp->q_prescale = is_gemma(a);
	if (a == MODEL_ARCH_QWEN3MOE || a == MODEL_ARCH_LFM2MOE)
		hp->expert_weights_norm = 1; // llama.cpp always renormalises the chosen experts' weights
	if (is_lfm2(a) && hp->n_conv <= 0)
		hp->n_conv = 3;
	if (a == MODEL_ARCH_QWEN35) {
		if (hp->n_conv <= 0)
			hp->n_conv = 4;
		if (hp->full_attn_interval <= 0)
			hp->full_attn_interval = 4;
		const int64_t d = hp->ssm_d_state, nk = hp->ssm_n_group, nv = hp->ssm_dt_rank;
		if (d <= 0 || nk <= 0 || nv <= 0 || nv % nk != 0 || d > 4096 || nv > 4096)
			return ad_err(err,
			              "ssm.state_size %lld, ssm.group_count %lld, ssm.time_step_rank %lld: positive, "
			              "and the v heads a multiple of the q/k heads",
			              (long long)d, (long long)nk, (long long)nv);
		if (hp->ssm_d_inner <= 0)
			hp->ssm_d_inner = nv * d;
		if (hp->ssm_d_inner != nv * d)
			return ad_err(err, "ssm.inner_size %lld is not ssm.time_step_rank %lld x ssm.state_size %lld",
			              (long long)hp->ssm_d_inner, (long long)nv, (long long)d);
		if (hp->n_conv < 2)
			return ad_err(err, "ssm.conv_kernel %lld: at least 2 taps", (long long)hp->n_conv);
	} else {
		hp->ssm_d_state = hp->ssm_n_group = hp->ssm_dt_rank = hp->ssm_d_inner = 0;
		hp->full_attn_interval = 0;
	}
	if (hp->n_conv > 16)
		return ad_err(err, "shortconv.l_cache %lld: at most 16 taps are supported", (long long)hp->n_conv);
	if (a == MODEL_ARCH_LFM2MOE && hp->expert_gating == 0)
		hp->expert_gating = 2; // LFM2-MoE's router is a sigmoid
	if (hp->expert_gating != 0 && hp->expert_gating != 1 && hp->expert_gating != 2)
		return ad_err(err, "expert_gating_func %d is not supported (1 softmax, 2 sigmoid)", hp->expert_gating);
	if (!is_moe(a))
		hp->n_dense_lead = 0;
	if (hp->n_dense_lead < 0 || hp->n_dense_lead > hp->n_layer)
		return ad_err(err, "leading_dense_block_count %lld out of range", (long long)hp->n_dense_lead);
	if (is_moe(a)) {
		if (hp->n_expert <= 0 || hp->n_expert_used <= 0 || hp->n_expert_used > hp->n_expert)
			return ad_err(err, "expert counts %lld used of %lld invalid", (long long)hp->n_expert_used,
			              (long long)hp->n_expert);
		if (hp->n_expert_used > 64)
			return ad_err(err, "%lld experts per token; at most 64 are supported",
			              (long long)hp->n_expert_used);
		char first[64];
		snprintf(first, sizeof first, "blk.%lld.ffn_gate_exps.weight", (long long)hp->n_dense_lead);
		const struct model_tensor *t = model_find_tensor(m, first);
		if (hp->n_ff_exp <= 0 && t)
			hp->n_ff_exp = t->ne[1];
		if (hp->n_dense_lead > 0 && hp->n_ff <= 0)
			return ad_err(err,
			              "feed_forward_length missing or not positive (the leading dense blocks need it)");
		t = model_find_tensor(m, "blk.0.ffn_gate_shexp.weight");
		if (hp->n_ff_shexp <= 0 && t)
			hp->n_ff_shexp = t->ne[1];
	} else if (hp->n_ff <= 0) {
		return ad_err(err, "feed_forward_length missing or not positive");
	}

	// global tensors
	// lfm2 stores its final norm as token_embd_norm (applied after the last block)
	if (bind(m, &m->tok_embd, REQ, "token_embd.weight", hp->n_embd, hp->n_vocab, 0, err) ||
	    bind(m, &m->output_norm, REQ, is_lfm2(a) ? "token_embd_norm.weight" : "output_norm.weight", hp->n_embd, 0,
	         0, err) ||
	    bind(m, &m->rope_freqs, OPT, "rope_freqs.weight", hp->n_rot / 2, 0, 0, err) ||
	    bind(m, &m->rope_long, OPT, "rope_factors_long.weight", hp->n_rot / 2, 0, 0, err) ||
	    bind(m, &m->rope_short, OPT, "rope_factors_short.weight", hp->n_rot / 2, 0, 0, err))
		return -1;
	int gemma = is_gemma(a);
	if (!gemma && bind(m, &m->output, OPT, "output.weight", hp->n_embd, hp->n_vocab, 0, err))
		return -1;
	if (a == MODEL_ARCH_GEMMA4 && hp->n_embd_pl > 0) {
		const int64_t P = hp->n_embd_pl, LP = hp->n_layer * hp->n_embd_pl;
		if (bind(m, &m->pl_tok_embd, REQ, "per_layer_token_embd.weight", LP, hp->n_vocab, 0, err) ||
		    bind(m, &m->pl_model_proj, REQ, "per_layer_model_proj.weight", hp->n_embd, LP, 0, err) ||
		    bind(m, &m->pl_proj_norm, REQ, "per_layer_proj_norm.weight", P, 0, 0, err))
			return -1;
	}
	m->tied_output = gemma || !m->output.name; // gemma ignores output.weight
	if (m->tied_output)
		m->output = m->tok_embd;
	const struct model_tensor *fac[3] = {&m->rope_freqs, &m->rope_long, &m->rope_short};
	for (int i = 0; i < 3; i++)
		if (fac[i]->name && fac[i]->type != AD_TYPE_F32)
			return ad_err(err, "tensor %s must be F32", fac[i]->name);
	if (hp->rope_scaling != MODEL_ROPE_SCALING_LONGROPE && (m->rope_long.name || m->rope_short.name))
		ad_warn("%s: longrope factors present but the RoPE scaling is %s: they are not used",
		        m->name[0] ? m->name : m->path, model_rope_scaling_name(hp->rope_scaling));

	free(m->layers);
	m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
	if (!m->layers)
		return ad_err(err, "out of memory");
	for (int il = 0; il < hp->n_layer; il++)
		if (bind_layer(m, il, err))
			return -1;

	// a tensor nobody reads may be a feature this table does not know
	// (rope_factors_long, a bias): say so rather than stay silent
	int64_t unused = 0;
	const char *first = NULL;
	m->n_params = 0;
	for (int64_t i = 0; i < m->n_tensors; i++) {
		m->n_params += model_tensor_nelem(&m->tensors[i]);
		if (!m->tensors[i].used && !unused++)
			first = m->tensors[i].name;
	}
	if (unused)
		ad_warn("%s: %lld tensor%s not used by %s (first: %s)", m->name[0] ? m->name : m->path,
		        (long long)unused, unused > 1 ? "s are" : " is", model_arch_name(a), first);
	return 0;
}

// --- GGUF ----------------------------------------------------------------------

// integer key "<arch>.<suffix>"; an array of equal values counts as one value
static int
kv_int(const struct gguf *g, const char *arch, const char *suffix, int64_t *out, char *err)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	if (gguf_find_key(g, key) < 0)
		return 0;
	if (gguf_get_i64(g, key, out) == 0)
		return 0;
	struct gguf_arr arr;
	if (gguf_get_arr(g, key, &arr) == 0 && arr.n > 0) {
		int64_t v0 = 0, v;
		for (uint64_t i = 0; i < arr.n; i++) {
			if (gguf_arr_i64(&arr, i, &v) != 0)
				return ad_err(err, "key %s: element %llu is not an integer", key,
				              (unsigned long long)i);
			if (i == 0)
				v0 = v;
			else if (v != v0)
				return ad_err(err, "key %s: per-layer values differ, which is not supported", key);
		}
		*out = v0;
		return 0;
	}
	return ad_err(err, "key %s is not an integer", key);
}

static int
kv_float(const struct gguf *g, const char *arch, const char *suffix, float *out, char *err)
{
	char key[128];
	snprintf(key, sizeof key, "%s.%s", arch, suffix);
	if (gguf_find_key(g, key) < 0)
		return 0;
	if (gguf_get_f32(g, key, out) != 0)
		return ad_err(err, "key %s is not a float", key);
	return 0;
}

// lfm2's head_count_kv: one value, or one per layer with 0 marking a
// ShortConv block (the attention blocks must agree on the others)
static int
lfm2_kv_heads(struct model *m, const struct gguf *g, char *err)
{
	struct model_hparams *hp = &m->hp;
	char key[128];
	snprintf(key, sizeof key, "%s.attention.head_count_kv", m->arch_name);
	if (gguf_find_key(g, key) < 0)
		return 0;
	if (gguf_get_i64(g, key, &hp->n_head_kv) == 0)
		return 0;
	struct gguf_arr arr;
	if (gguf_get_arr(g, key, &arr) != 0 || arr.n == 0)
		return ad_err(err, "key %s is not an integer or an array of them", key);
	if (hp->n_layer <= 0 || arr.n != (uint64_t)hp->n_layer)
		return ad_err(err, "key %s has %llu values for %lld blocks", key, (unsigned long long)arr.n,
		              (long long)hp->n_layer);
	free(m->layer_kv_heads);
	m->layer_kv_heads = calloc((size_t)arr.n, sizeof *m->layer_kv_heads);
	if (!m->layer_kv_heads)
		return ad_err(err, "out of memory");
	hp->n_head_kv = 0;
	for (uint64_t i = 0; i < arr.n; i++) {
		int64_t v;
		if (gguf_arr_i64(&arr, i, &v) != 0 || v < 0)
			return ad_err(err, "key %s: element %llu is not a count", key, (unsigned long long)i);
		if (v > 0 && hp->n_head_kv > 0 && v != hp->n_head_kv)
			return ad_err(err, "key %s: attention blocks with %lld and %lld KV heads are not supported",
			              key, (long long)hp->n_head_kv, (long long)v);
		if (v > 0)
			hp->n_head_kv = v;
		m->layer_kv_heads[i] = v;
	}
	if (hp->n_head_kv == 0) // every block a ShortConv: the attention shape is unused
		hp->n_head_kv = hp->n_head;
	return 0;
}

// gemma4's per-layer keys: feed_forward_length (one value or one per
// layer) and sliding_window_pattern (one bool per layer: sliding)
static int
gemma4_layers(struct model *m, const struct gguf *g, char *err)
{
	struct model_hparams *hp = &m->hp;
	char key[128];
	struct gguf_arr arr;
	snprintf(key, sizeof key, "%s.feed_forward_length", m->arch_name);
	if (gguf_find_key(g, key) >= 0 && gguf_get_i64(g, key, &hp->n_ff) != 0) {
		if (gguf_get_arr(g, key, &arr) != 0 || arr.n != (uint64_t)hp->n_layer || hp->n_layer <= 0)
			return ad_err(err, "key %s: one integer or one per block (%lld)", key, (long long)hp->n_layer);
		free(m->layer_n_ff);
		if (!(m->layer_n_ff = calloc((size_t)arr.n, sizeof *m->layer_n_ff)))
			return ad_err(err, "out of memory");
		hp->n_ff = 0;
		for (uint64_t i = 0; i < arr.n; i++) {
			if (gguf_arr_i64(&arr, i, &m->layer_n_ff[i]) != 0 || m->layer_n_ff[i] <= 0)
				return ad_err(err, "key %s: element %llu is not a positive integer", key,
				              (unsigned long long)i);
			hp->n_ff = m->layer_n_ff[i] > hp->n_ff ? m->layer_n_ff[i] : hp->n_ff;
		}
	}
	snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", m->arch_name);
	if (gguf_find_key(g, key) < 0)
		return 0;
	if (gguf_get_arr(g, key, &arr) != 0 || arr.type != GGUF_TYPE_BOOL || arr.n != (uint64_t)hp->n_layer)
		return ad_err(err, "key %s: one bool per block (%lld) expected", key, (long long)hp->n_layer);
	free(m->layer_swa);
	if (!(m->layer_swa = calloc((size_t)arr.n, 1)))
		return ad_err(err, "out of memory");
	for (uint64_t i = 0; i < arr.n; i++)
		m->layer_swa[i] = arr.data[i] != 0;
	return 0;
}

// qwen35's attention.recurrent_layers: one bool (or integer) per block,
// true for a delta-net block; without it full_attention_interval decides
static int
qwen35_layers(struct model *m, const struct gguf *g, char *err)
{
	char key[128];
	struct gguf_arr arr;
	snprintf(key, sizeof key, "%s.attention.recurrent_layers", m->arch_name);
	if (gguf_find_key(g, key) < 0)
		return 0;
	if (gguf_get_arr(g, key, &arr) != 0 || arr.n != (uint64_t)m->hp.n_layer || m->hp.n_layer <= 0)
		return ad_err(err, "key %s: one value per block (%lld) expected", key, (long long)m->hp.n_layer);
	free(m->layer_recr);
	if (!(m->layer_recr = calloc((size_t)arr.n, 1)))
		return ad_err(err, "out of memory");
	for (uint64_t i = 0; i < arr.n; i++) {
		int64_t v;
		if (arr.type == GGUF_TYPE_BOOL)
			v = arr.data[i] != 0;
		else if (gguf_arr_i64(&arr, i, &v) != 0)
			return ad_err(err, "key %s: element %llu is not a bool or an integer", key,
			              (unsigned long long)i);
		m->layer_recr[i] = v != 0;
	}
	return 0;
}

static int
read_hparams(struct model *m, const struct gguf *g, char *err)
{
	struct model_hparams *hp = &m->hp;
	const char *an = m->arch_name;
	int64_t v;

	if (kv_int(g, an, "vocab_size", &hp->n_vocab, err) || kv_int(g, an, "embedding_length", &hp->n_embd, err) ||
	    kv_int(g, an, "block_count", &hp->n_layer, err) ||
	    (m->arch != MODEL_ARCH_GEMMA4 && kv_int(g, an, "feed_forward_length", &hp->n_ff, err)) ||
	    kv_int(g, an, "context_length", &hp->n_ctx_train, err) ||
	    kv_int(g, an, "attention.head_count", &hp->n_head, err) ||
	    (!is_lfm2(m->arch) && kv_int(g, an, "attention.head_count_kv", &hp->n_head_kv, err)) ||
	    kv_int(g, an, "shortconv.l_cache", &hp->n_conv, err) ||
	    kv_int(g, an, "leading_dense_block_count", &hp->n_dense_lead, err) ||
	    kv_int(g, an, "attention.key_length", &hp->head_dim, err) ||
	    kv_int(g, an, "attention.value_length", &hp->head_dim_v, err) ||
	    kv_int(g, an, "rope.dimension_count", &hp->n_rot, err) ||
	    kv_int(g, an, "attention.sliding_window", &hp->sliding_window, err) ||
	    (m->arch != MODEL_ARCH_GEMMA4 &&
	     kv_int(g, an, "attention.sliding_window_pattern", &hp->swa_pattern, err)) ||
	    kv_int(g, an, "attention.key_length_swa", &hp->head_dim_swa, err) ||
	    kv_int(g, an, "attention.value_length_swa", &hp->head_dim_v_swa, err) ||
	    kv_int(g, an, "rope.dimension_count_swa", &hp->n_rot_swa, err) ||
	    kv_int(g, an, "attention.shared_kv_layers", &hp->n_kv_shared, err) ||
	    kv_int(g, an, "embedding_length_per_layer_input", &hp->n_embd_pl, err) ||
	    kv_int(g, an, "expert_count", &hp->n_expert, err) ||
	    kv_int(g, an, "expert_used_count", &hp->n_expert_used, err) ||
	    kv_int(g, an, "expert_feed_forward_length", &hp->n_ff_exp, err) ||
	    kv_int(g, an, "expert_shared_feed_forward_length", &hp->n_ff_shexp, err) ||
	    kv_int(g, an, "pooling_type", &hp->pooling, err) ||
	    (m->arch == MODEL_ARCH_QWEN35 && (kv_int(g, an, "ssm.conv_kernel", &hp->n_conv, err) ||
	                                      kv_int(g, an, "ssm.state_size", &hp->ssm_d_state, err) ||
	                                      kv_int(g, an, "ssm.group_count", &hp->ssm_n_group, err) ||
	                                      kv_int(g, an, "ssm.time_step_rank", &hp->ssm_dt_rank, err) ||
	                                      kv_int(g, an, "ssm.inner_size", &hp->ssm_d_inner, err) ||
	                                      kv_int(g, an, "full_attention_interval", &hp->full_attn_interval, err))))
		return -1;
	if (kv_float(g, an, "attention.layer_norm_rms_epsilon", &hp->rms_eps, err) ||
	    kv_float(g, an, "rope.freq_base", &hp->rope_base, err) ||
	    kv_float(g, an, "rope.freq_base_swa", &hp->rope_base_swa, err) ||
	    kv_float(g, an, "attn_logit_softcapping", &hp->attn_softcap, err) ||
	    kv_float(g, an, "final_logit_softcapping", &hp->final_softcap, err))
		return -1;

	v = 0;
	if (kv_int(g, an, "expert_gating_func", &v, err))
		return -1;
	hp->expert_gating = (int)(v >= 0 && v < 16 ? v : 99);
	v = 0;
	if (is_lfm2(m->arch) && lfm2_kv_heads(m, g, err))
		return -1;
	if (m->arch == MODEL_ARCH_GEMMA4 && gemma4_layers(m, g, err))
		return -1;
	if (m->arch == MODEL_ARCH_QWEN35 && qwen35_layers(m, g, err))
		return -1;

	// gemma2 writes the soft-caps; gemma3 files may carry them but do not use
	// them; gemma4 has the final one
	if (m->arch != MODEL_ARCH_GEMMA2)
		hp->attn_softcap = 0;
	if (m->arch != MODEL_ARCH_GEMMA2 && m->arch != MODEL_ARCH_GEMMA4)
		hp->final_softcap = 0;

	char key[128];
	snprintf(key, sizeof key, "%s.expert_weights_norm", an);
	int b;
	if (gguf_get_bool(g, key, &b) == 0)
		hp->expert_weights_norm = b;

	// RoPE scaling
	struct gguf_str st;
	float factor = 0;
	snprintf(key, sizeof key, "%s.rope.scaling.type", an);
	int have_type = gguf_get_str(g, key, &st) == 0;
	if (kv_float(g, an, "rope.scaling.factor", &factor, err) ||
	    kv_float(g, an, "rope.scale_linear", &factor, err) ||
	    kv_int(g, an, "rope.scaling.original_context_length", &hp->n_ctx_orig, err) ||
	    kv_float(g, an, "rope.scaling.attn_factor", &hp->rope_attn_factor, err) ||
	    kv_float(g, an, "rope.scaling.yarn_ext_factor", &hp->yarn_ext_factor, err) ||
	    kv_float(g, an, "rope.scaling.yarn_beta_fast", &hp->yarn_beta_fast, err) ||
	    kv_float(g, an, "rope.scaling.yarn_beta_slow", &hp->yarn_beta_slow, err))
		return -1;
	hp->rope_scaling = factor > 0 ? MODEL_ROPE_SCALING_LINEAR : MODEL_ROPE_SCALING_NONE;
	if (have_type) {
		if (gguf_str_eq(st, "none"))
			hp->rope_scaling = MODEL_ROPE_SCALING_NONE, factor = 0;
		else if (gguf_str_eq(st, "linear"))
			hp->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
		else if (gguf_str_eq(st, "yarn"))
			hp->rope_scaling = MODEL_ROPE_SCALING_YARN;
		else if (gguf_str_eq(st, "longrope"))
			hp->rope_scaling = MODEL_ROPE_SCALING_LONGROPE, factor = 0;
		else
			return ad_err(err, "%s '%.*s' is not supported (none, linear, yarn, longrope)", key,
			              (int)(st.len > 32 ? 32 : st.len), st.ptr);
	}
	if (factor > 0)
		hp->rope_freq_scale = 1.0f / factor;
	// HunYuan's NTK alpha: convert_hf_to_gguf folds it into freq_base; a
	// file that also keeps the key would have it applied twice by llama.cpp,
	// which this loader does not reproduce
	snprintf(key, sizeof key, "%s.rope.scaling.alpha", an);
	if (gguf_find_key(g, key) >= 0)
		return ad_err(err, "%s is not supported (the converter folds it into rope.freq_base)", key);

	if (gguf_get_i64(g, "tokenizer.ggml.bos_token_id", &v) == 0)
		hp->bos_id = v;
	if (gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v) == 0)
		hp->eos_id = v;
	return 0;
}

void
model_drop_range(const struct model *m, const void *p, size_t n)
{
	size_t len = 0;
	const uint8_t *map = m->gguf ? gguf_file_map(m->gguf, &len, NULL) : NULL;
	const uint8_t *a = p, *b = a + n;
	if (!map || !n || a < map || b > map + len)
		return; // not a file mapping of ours: leave it
	// a fault maps more than the page it touched: the pages around it
	// (fault-around) or the whole large folio the page cache holds it in,
	// up to 2 MiB. So the window dropped is the 2 MiB-aligned one around
	// [a, b), within the mapping; without it, the digest's 256-byte samples
	// left 26 MB of a 258 MB model mapped in the ane-worker after a cache hit
	const uintptr_t win = (uintptr_t)2 << 20;
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)a & ~(win - 1), hi = ((uintptr_t)b + win - 1) & ~(win - 1);
	uintptr_t m0 = (uintptr_t)map & ~(pg - 1), m1 = ((uintptr_t)map + len + pg - 1) & ~(pg - 1);
	if (lo < m0)
		lo = m0;
	if (hi > m1)
		hi = m1;
	// a read-only private file mapping: dropping its pages only unmaps
	// them (the next read faults them in again from the page cache)
	madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void
model_drop_pages(const struct model *m)
{
	size_t len = 0;
	const void *map = m->gguf ? gguf_file_map(m->gguf, &len, NULL) : NULL;
	if (map)
		model_drop_range(m, map, len);
}

int
model_load_gguf(struct model *m, const char *path, char *err)
{
	model_init(m);
	snprintf(m->path, sizeof m->path, "%s", path);
	m->is_gguf = 1;
	m->gguf = gguf_open(path, err);
	if (!m->gguf)
		return -1;
	const struct gguf *g = m->gguf;
	m->file_bytes = gguf_file_size(g);

	struct gguf_str s;
	if (gguf_get_str(g, "general.architecture", &s) != 0) {
		ad_err(err, "%s: no general.architecture key", path);
		goto fail;
	}
	if (s.len == 0 || s.len >= sizeof m->arch_name || memchr(s.ptr, 0, s.len)) {
		ad_err(err, "%s: general.architecture is empty, too long or malformed", path);
		goto fail;
	}
	memcpy(m->arch_name, s.ptr, s.len);
	m->arch_name[s.len] = 0;
	if (gguf_get_str(g, "general.name", &s) == 0 && s.len < sizeof m->name && !memchr(s.ptr, 0, s.len)) {
		memcpy(m->name, s.ptr, s.len);
		m->name[s.len] = 0;
	} else {
		const char *base = strrchr(path, '/');
		snprintf(m->name, sizeof m->name, "%s", base ? base + 1 : path);
	}

	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		if (model_add_tensor(m, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, err))
			goto fail;
	}

	int a = model_arch_from_name(m->arch_name);
	const char *force = getenv("ANEDVD_ARCH");
	if (force && *force) {
		// the user's choice (--arch): read the file's keys, run it as force
		int f = model_arch_from_name(force);
		if (f < 0) {
			ad_err(err, "--arch %s: not an architecture anedvd implements (%s)", force, model_arch_list());
			goto fail;
		}
		if (f != a)
			ad_warn("%s: architecture '%s' run as %s (--arch): the logits are those of %s, "
			        "not necessarily of the model",
			        path, m->arch_name, force, force);
		a = f;
	}
	if (a < 0) {
		ad_err(err,
		       "%s: architecture '%s' is not implemented (anedvd implements: %s; "
		       "--arch NAME runs it as one of them, at your risk)",
		       path, m->arch_name, model_arch_list());
		goto fail;
	}
	m->arch = a;
	if (read_hparams(m, g, err) || model_finish(m, err)) {
		ad_err_prefix(err, "%s", path);
		goto fail;
	}
	return 0;
fail:
	model_free(m);
	return -1;
}

// The path decides, not its name: a directory is a Hugging Face model (its
// config.json too), a file a GGUF (Ollama's blobs have no .gguf)
int
model_load(struct model *m, const char *path, char *err)
{
	struct stat st;
	int rc;
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (stat(path, &st)) {
		model_init(m);
		rc = ad_err(err, "%s: %s", path, strerror(errno));
	} else if (S_ISDIR(st.st_mode)) {
		rc = model_load_hf(m, path, err);
	} else if (!strcmp(base, "config.json")) { // its directory
		char dir[sizeof m->path];
		snprintf(dir, sizeof dir, "%.*s", base > path + 1 ? (int)(base - path - 1) : 1,
		         base > path ? path : ".");
		rc = model_load_hf(m, dir, err);
	} else {
		rc = model_load_gguf(m, path, err);
	}
	// ANEDVD_LAYERS=N (verify --layers): every process builds the model with
	// its first N layers only (then the final norm and the head), so a
	// pipeline can be bisected against the reference layer by layer
	const char *cut = getenv("ANEDVD_LAYERS");
	if (rc == 0 && cut && *cut) {
		char *end;
		long v = strtol(cut, &end, 10);
		if (*end || v < 1 || v > m->hp.n_layer) {
			ad_err(err, "ANEDVD_LAYERS=%s: the model has %lld layers", cut, (long long)m->hp.n_layer);
			model_free(m);
			return -1;
		}
		m->hp.n_layer = v;
	}
	return rc;
}
