// model-hf.c - a Hugging Face model directory (config.json + safetensors)
// loaded into the same struct model as a GGUF file.
//
// HF tensors are renamed to their GGUF names and, where the two formats
// disagree, brought to the GGUF meaning:
//   - RoPE: HF checkpoints are written for rotate_half (neox pairing) in
//     every architecture, so hp.rope is NEOX and llama's q/k rows are used
//     as stored (GGUF llama files instead permute them for adjacent pairs);
//   - gemma norms store w and mean (1 + w): the loader adds the 1 (into an
//     F32 copy), which GGUF files already have baked in;
//   - per-expert MoE matrices are stacked into GGUF's 3-D expert tensors;
//   - lfm2: the conv's [n_embd, 1, taps] kernel is squeezed to 2-D, the
//     final norm (embedding_norm) is GGUF's token_embd_norm;
//   - gemma4: norms as stored (no 1 to add), the full layers' proportional
//     RoPE as rope_freqs (1 for the rotated pairs, 1e30 for the others);
//   - qwen35: norms store w and mean (1 + w) but the delta-net's own; A_log
//     becomes ssm_a = -exp(A_log); the conv kernel is squeezed; the v heads
//     of the delta-net (rows of in_proj_qkv's v part, in_proj_z, in_proj_a,
//     in_proj_b, A_log, dt_bias, the conv's v channels, columns of
//     out_proj) go from HF's grouped order (by q/k head) to the tiled
//     order GGUF files have (v head j reads q/k head j mod n_k).
// Everything else points into the mapped safetensors files.
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dequant.h"
#include "log.h"
#include "model.h"
#include "safetensors.h"
#include "wtype.h"

#define HF_MAX_CONFIG (16u << 20)

// the loader's private state: the mapped shards and the buffers it made
struct hf_src {
	struct st_set set;
	void **bufs;
	int n_bufs, cap_bufs;
};

static void
hf_src_free(void *p)
{
	struct hf_src *s = p;
	if (!s)
		return;
	st_set_close(&s->set);
	for (int i = 0; i < s->n_bufs; i++)
		free(s->bufs[i]);
	free(s->bufs);
	free(s);
}

static void *
hf_alloc(struct hf_src *s, size_t n)
{
	if (s->n_bufs == s->cap_bufs) {
		int cap = s->cap_bufs ? 2 * s->cap_bufs : 16;
		void **b = realloc(s->bufs, (size_t)cap * sizeof *b);
		if (!b)
			return NULL;
		s->bufs = b;
		s->cap_bufs = cap;
	}
	void *p = malloc(n ? n : 1);
	if (p)
		s->bufs[s->n_bufs++] = p;
	return p;
}

// --- config.json -------------------------------------------------------------

static const struct {
	const char *hf;   // architectures[0]
	const char *type; // model_type
	enum model_arch arch;
} hf_archs[] = {
	{"LlamaForCausalLM", "llama", MODEL_ARCH_LLAMA},
	{"MistralForCausalLM", "mistral", MODEL_ARCH_MISTRAL},
	{"Qwen2ForCausalLM", "qwen2", MODEL_ARCH_QWEN2},
	{"Qwen3ForCausalLM", "qwen3", MODEL_ARCH_QWEN3},
	{"Qwen2MoeForCausalLM", "qwen2_moe", MODEL_ARCH_QWEN2MOE},
	{"Qwen3MoeForCausalLM", "qwen3_moe", MODEL_ARCH_QWEN3MOE},
	{"HunYuanDenseV1ForCausalLM", "hunyuan_v1_dense", MODEL_ARCH_HUNYUAN_DENSE},
	{"Gemma2ForCausalLM", "gemma2", MODEL_ARCH_GEMMA2},
	{"Gemma3ForCausalLM", "gemma3_text", MODEL_ARCH_GEMMA3},
	{"Gemma3ForConditionalGeneration", "gemma3", MODEL_ARCH_GEMMA3}, // text part only
	{"Phi3ForCausalLM", "phi3", MODEL_ARCH_PHI3},
	{"SmolLM3ForCausalLM", "smollm3", MODEL_ARCH_SMOLLM3},
	{"Lfm2ForCausalLM", "lfm2", MODEL_ARCH_LFM2},
	{"LFM2ForCausalLM", "lfm2", MODEL_ARCH_LFM2},
	{"Lfm2MoeForCausalLM", "lfm2_moe", MODEL_ARCH_LFM2MOE},
	{"Gemma4ForCausalLM", "gemma4_text", MODEL_ARCH_GEMMA4},
	{"Gemma4ForConditionalGeneration", "gemma4", MODEL_ARCH_GEMMA4}, // text part only
	{"Qwen3_5ForCausalLM", "qwen3_5_text", MODEL_ARCH_QWEN35},
	{"Qwen3_5ForConditionalGeneration", "qwen3_5", MODEL_ARCH_QWEN35}, // text part only
};

static const cJSON *
jget(const cJSON *o, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(o, key);
}

// optional integer key; absent or null leaves *out alone
static int
cfg_int(const cJSON *c, const char *key, int64_t *out, char *err)
{
	const cJSON *j = jget(c, key);
	if (!j || cJSON_IsNull(j))
		return 0;
	if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble) || fabs(j->valuedouble) > 9.0e15)
		return ad_err(err, "config.json: \"%s\" is not an integer", key);
	*out = (int64_t)j->valuedouble;
	return 0;
}

static int
cfg_float(const cJSON *c, const char *key, float *out, char *err)
{
	const cJSON *j = jget(c, key);
	if (!j || cJSON_IsNull(j))
		return 0;
	if (!cJSON_IsNumber(j))
		return ad_err(err, "config.json: \"%s\" is not a number", key);
	*out = (float)j->valuedouble;
	return 0;
}

static int
cfg_bool(const cJSON *c, const char *key, int *out, char *err)
{
	const cJSON *j = jget(c, key);
	if (!j || cJSON_IsNull(j))
		return 0;
	if (!cJSON_IsBool(j))
		return ad_err(err, "config.json: \"%s\" is not true or false", key);
	*out = cJSON_IsTrue(j);
	return 0;
}

// the token id, or the first of a list of them
static void
cfg_token(const cJSON *c, const char *key, int64_t *out)
{
	const cJSON *j = jget(c, key);
	if (cJSON_IsArray(j))
		j = cJSON_GetArrayItem(j, 0);
	if (cJSON_IsNumber(j) && j->valuedouble >= 0)
		*out = (int64_t)j->valuedouble;
}

static cJSON *
read_json(const char *path, char *err)
{
	FILE *fp = fopen(path, "rb");
	if (!fp) {
		ad_err(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	long len = -1;
	if (!fseek(fp, 0, SEEK_END))
		len = ftell(fp);
	if (len < 0 || len > (long)HF_MAX_CONFIG || fseek(fp, 0, SEEK_SET)) {
		fclose(fp);
		ad_err(err, "%s: unreadable or larger than %u bytes", path, HF_MAX_CONFIG);
		return NULL;
	}
	char *buf = malloc((size_t)len + 1);
	if (!buf || fread(buf, 1, (size_t)len, fp) != (size_t)len) {
		free(buf);
		fclose(fp);
		ad_err(err, "%s: read failed", path);
		return NULL;
	}
	fclose(fp);
	cJSON *j = cJSON_ParseWithLength(buf, (size_t)len);
	free(buf);
	if (!j || !cJSON_IsObject(j)) {
		cJSON_Delete(j);
		ad_err(err, "%s: not a JSON object", path);
		return NULL;
	}
	return j;
}

// the period of a per-layer flag list: the first index where it is set, + 1,
// checked to repeat over the whole list; *out is left alone when never set
static int
flag_period(const cJSON *list, const char *key, const char *set_value, int set_bool, int64_t *out, char *err)
{
	int n = cJSON_GetArraySize(list), first = -1;
	for (int i = 0; i < n; i++) {
		const cJSON *e = cJSON_GetArrayItem(list, i);
		int on = set_value           ? cJSON_IsString(e) && !strcmp(e->valuestring, set_value)
		         : cJSON_IsNumber(e) ? (e->valuedouble != 0) == set_bool
		                             : cJSON_IsBool(e) && cJSON_IsTrue(e) == set_bool;
		if (on && first < 0)
			first = i;
		if (first >= 0 && on != ((i + 1) % (first + 1) == 0))
			return ad_err(err,
			              "config.json: \"%s\" does not follow a fixed period, "
			              "which is not supported",
			              key);
	}
	if (first >= 0)
		*out = first + 1;
	return 0;
}

// a per-layer list of strings, each one of two values: out[i] = 1 for `one`
static int
layer_list(const struct model *m, const cJSON *c, const char *key, const char *one, const char *zero, int8_t **out,
           char *err)
{
	const cJSON *lt = jget(c, key);
	if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != m->hp.n_layer)
		return ad_err(err, "config.json: \"%s\" must list every one of the %lld layers", key,
		              (long long)m->hp.n_layer);
	if (!(*out = calloc((size_t)m->hp.n_layer, 1)))
		return ad_err(err, "out of memory");
	for (int i = 0; i < m->hp.n_layer; i++) {
		const cJSON *e = cJSON_GetArrayItem(lt, i);
		const char *v = cJSON_IsString(e) ? e->valuestring : "";
		if (strcmp(v, one) && strcmp(v, zero))
			return ad_err(err, "config.json: %s[%d] \"%.32s\" (%s or %s)", key, i, v, one, zero);
		(*out)[i] = !strcmp(v, one);
	}
	return 0;
}

// lfm2 / lfm2moe: layer_types ("conv" or "full_attention") as GGUF's
// per-layer head_count_kv, the conv's taps, the FFN width as
// convert_hf_to_gguf adjusts it, the MoE keys
static int
lfm2_config(struct model *m, const cJSON *c, char *err)
{
	struct model_hparams *hp = &m->hp;
	int8_t *conv = NULL;
	if (layer_list(m, c, "layer_types", "conv", "full_attention", &conv, err)) {
		free(conv);
		return -1;
	}
	free(m->layer_kv_heads);
	m->layer_kv_heads = calloc((size_t)hp->n_layer, sizeof *m->layer_kv_heads);
	if (!m->layer_kv_heads) {
		free(conv);
		return ad_err(err, "out of memory");
	}
	if (hp->n_head_kv <= 0)
		hp->n_head_kv = hp->n_head;
	for (int i = 0; i < hp->n_layer; i++)
		m->layer_kv_heads[i] = conv[i] ? 0 : hp->n_head_kv;
	free(conv);
	if (cfg_int(c, "conv_L_cache", &hp->n_conv, err) || cfg_float(c, "norm_eps", &hp->rms_eps, err))
		return -1;
	if (m->arch == MODEL_ARCH_LFM2) {
		int64_t ff = 0, mult_of = 256;
		int adjust = 0;
		float mult = 0;
		if (cfg_int(c, "intermediate_size", &ff, err) || cfg_int(c, "block_ff_dim", &ff, err) ||
		    cfg_bool(c, "block_auto_adjust_ff_dim", &adjust, err) ||
		    cfg_float(c, "block_ffn_dim_multiplier", &mult, err) ||
		    cfg_int(c, "block_multiple_of", &mult_of, err))
			return -1;
		if (adjust) {
			ff = 2 * ff / 3;
			if (mult > 0)
				ff = (int64_t)(mult * (float)ff);
			if (mult_of <= 0)
				return ad_err(err, "config.json: block_multiple_of must be positive");
			ff = mult_of * ((ff + mult_of - 1) / mult_of);
		}
		hp->n_ff = ff;
	} else {
		hp->expert_gating = 2; // sigmoid, chosen with the expert bias
		hp->expert_weights_norm = 1;
		if (cfg_int(c, "num_dense_layers", &hp->n_dense_lead, err))
			return -1;
	}
	return 0;
}

// gemma4: the sliding / full layer pattern, the two head sizes, shared
// K/V, per-layer inputs, double-wide FFNs on the shared layers, the two
// RoPE settings (the full layers' partial factor is made into rope_freqs)
static int
gemma4_config(struct model *m, const cJSON *c, char *err)
{
	struct model_hparams *hp = &m->hp;
	free(m->layer_swa);
	m->layer_swa = NULL;
	if (layer_list(m, c, "layer_types", "sliding_attention", "full_attention", &m->layer_swa, err))
		return -1;
	int64_t g_hd = 0, g_kv = 0;
	int double_wide = 0, k_eq_v = 0;
	if (cfg_int(c, "global_head_dim", &g_hd, err) || cfg_int(c, "num_kv_shared_layers", &hp->n_kv_shared, err) ||
	    cfg_int(c, "hidden_size_per_layer_input", &hp->n_embd_pl, err) ||
	    cfg_bool(c, "use_double_wide_mlp", &double_wide, err) ||
	    cfg_int(c, "num_global_key_value_heads", &g_kv, err) || cfg_bool(c, "attention_k_eq_v", &k_eq_v, err) ||
	    cfg_float(c, "final_logit_softcapping", &hp->final_softcap, err))
		return -1;
	if (jget(c, "per_layer_config") && !cJSON_IsNull(jget(c, "per_layer_config")))
		return ad_err(err, "config.json: gemma4 per_layer_config is not supported");
	if (k_eq_v)
		return ad_err(err, "config.json: gemma4 attention_k_eq_v is not supported");
	if (g_kv > 0 && hp->n_head_kv > 0 && g_kv != hp->n_head_kv)
		return ad_err(err,
		              "config.json: gemma4 with %lld KV heads on full layers and %lld on sliding ones "
		              "is not supported",
		              (long long)g_kv, (long long)hp->n_head_kv);
	// head_dim is the sliding layers'; global_head_dim the full ones'
	hp->head_dim_swa = hp->head_dim;
	if (g_hd > 0)
		hp->head_dim = g_hd;
	hp->head_dim_v = hp->head_dim;
	hp->head_dim_v_swa = hp->head_dim_swa;
	if (double_wide) {
		free(m->layer_n_ff);
		if (!(m->layer_n_ff = calloc((size_t)hp->n_layer, sizeof *m->layer_n_ff)))
			return ad_err(err, "out of memory");
		for (int64_t i = 0; i < hp->n_layer; i++)
			m->layer_n_ff[i] = i < hp->n_layer - hp->n_kv_shared ? hp->n_ff : 2 * hp->n_ff;
		hp->n_ff *= 2;
	}
	const cJSON *rp = jget(c, "rope_parameters");
	const cJSON *full = cJSON_IsObject(rp) ? jget(rp, "full_attention") : NULL;
	const cJSON *swa = cJSON_IsObject(rp) ? jget(rp, "sliding_attention") : NULL;
	if (!cJSON_IsObject(full) || !cJSON_IsObject(swa))
		return ad_err(err, "config.json: gemma4 needs rope_parameters.full_attention and .sliding_attention");
	float prf_swa = 1;
	if (cfg_float(full, "rope_theta", &hp->rope_base, err) ||
	    cfg_float(swa, "rope_theta", &hp->rope_base_swa, err) ||
	    cfg_float(swa, "partial_rotary_factor", &prf_swa, err))
		return -1;
	hp->n_rot = hp->head_dim; // proportional: rope_freqs holds the rest (add_gemma4_rope_freqs)
	hp->n_rot_swa = (int64_t)((float)hp->head_dim_swa * prf_swa);
	return 0;
}

// qwen35: the delta-net's shape (linear_* keys) and which layers attend
static int
qwen35_config(struct model *m, const cJSON *c, char *err)
{
	struct model_hparams *hp = &m->hp;
	int64_t vd = 0;
	if (cfg_int(c, "linear_conv_kernel_dim", &hp->n_conv, err) ||
	    cfg_int(c, "linear_key_head_dim", &hp->ssm_d_state, err) ||
	    cfg_int(c, "linear_num_key_heads", &hp->ssm_n_group, err) ||
	    cfg_int(c, "linear_num_value_heads", &hp->ssm_dt_rank, err) ||
	    cfg_int(c, "linear_value_head_dim", &vd, err) ||
	    cfg_int(c, "full_attention_interval", &hp->full_attn_interval, err))
		return -1;
	if (vd > 0 && vd != hp->ssm_d_state)
		return ad_err(err,
		              "config.json: linear_value_head_dim %lld differs from linear_key_head_dim %lld, "
		              "which is not supported",
		              (long long)vd, (long long)hp->ssm_d_state);
	hp->ssm_d_inner = hp->ssm_dt_rank * hp->ssm_d_state;
	if (jget(c, "layer_types") &&
	    layer_list(m, c, "layer_types", "linear_attention", "full_attention", &m->layer_recr, err))
		return -1;
	return 0;
}

static int
read_config(struct model *m, const cJSON *root, int *tied, char *err)
{
	struct model_hparams *hp = &m->hp;
	const cJSON *c = root;
	// multimodal wrappers keep the language model's keys in text_config
	if (cJSON_IsObject(jget(root, "text_config")))
		c = jget(root, "text_config");

	const cJSON *archs = jget(root, "architectures");
	const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
	const char *aname = cJSON_IsString(a0) ? a0->valuestring : NULL;
	const cJSON *mt = jget(root, "model_type");
	const char *type = cJSON_IsString(mt) ? mt->valuestring : NULL;
	int arch = -1;
	for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0] && arch < 0; i++)
		if (aname && !strcmp(aname, hf_archs[i].hf))
			arch = (int)hf_archs[i].arch;
	for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0] && arch < 0; i++)
		if (!aname && type && !strcmp(type, hf_archs[i].type))
			arch = (int)hf_archs[i].arch;
	if (arch < 0) {
		char known[512];
		size_t kn = 0;
		for (size_t i = 0; i < sizeof hf_archs / sizeof hf_archs[0]; i++)
			kn += (size_t)snprintf(known + kn, sizeof known - kn, "%s%s", i ? ", " : "", hf_archs[i].hf);
		return ad_err(err,
		              "config.json: architecture %s%s%s (model_type %s) is not implemented "
		              "(anedvd implements: %s)",
		              aname ? "\"" : "", aname ? aname : "(none)", aname ? "\"" : "", type ? type : "(none)",
		              known);
	}
	m->arch = (enum model_arch)arch;
	snprintf(m->arch_name, sizeof m->arch_name, "%s", model_arch_name(m->arch));

	int gemma = arch == MODEL_ARCH_GEMMA2 || arch == MODEL_ARCH_GEMMA3;
	if (cfg_int(c, "vocab_size", &hp->n_vocab, err) || cfg_int(c, "hidden_size", &hp->n_embd, err) ||
	    cfg_int(c, "num_hidden_layers", &hp->n_layer, err) || cfg_int(c, "num_attention_heads", &hp->n_head, err) ||
	    cfg_int(c, "num_key_value_heads", &hp->n_head_kv, err) || cfg_int(c, "head_dim", &hp->head_dim, err) ||
	    cfg_int(c, "intermediate_size", &hp->n_ff, err) ||
	    cfg_int(c, "max_position_embeddings", &hp->n_ctx_train, err) ||
	    cfg_int(c, "num_experts", &hp->n_expert, err) ||
	    cfg_int(c, "num_experts_per_tok", &hp->n_expert_used, err) ||
	    cfg_int(c, "moe_intermediate_size", &hp->n_ff_exp, err) ||
	    cfg_int(c, "shared_expert_intermediate_size", &hp->n_ff_shexp, err) ||
	    cfg_float(c, "rms_norm_eps", &hp->rms_eps, err) || cfg_float(c, "rope_theta", &hp->rope_base, err) ||
	    cfg_float(c, "rope_local_base_freq", &hp->rope_base_swa, err) ||
	    cfg_bool(c, "norm_topk_prob", &hp->expert_weights_norm, err))
		return -1;
	if (hp->n_embd <= 0 || hp->n_layer <= 0 || hp->n_layer > 4096 || hp->n_head <= 0)
		return ad_err(err, "config.json: hidden_size, num_hidden_layers and "
		                   "num_attention_heads must be given and positive");
	// newer configs keep the base in rope_parameters
	const cJSON *rp = jget(c, "rope_parameters");
	if (cJSON_IsObject(rp) && !jget(c, "rope_theta") && cfg_float(rp, "rope_theta", &hp->rope_base, err))
		return -1;
	if ((arch == MODEL_ARCH_LFM2 || arch == MODEL_ARCH_LFM2MOE) && lfm2_config(m, c, err))
		return -1;
	if (arch == MODEL_ARCH_GEMMA4 && gemma4_config(m, c, err))
		return -1;
	if (arch == MODEL_ARCH_QWEN35 && qwen35_config(m, c, err))
		return -1;
	cfg_token(root, "bos_token_id", &hp->bos_id);
	cfg_token(root, "eos_token_id", &hp->eos_id);
	cfg_token(c, "bos_token_id", &hp->bos_id);
	cfg_token(c, "eos_token_id", &hp->eos_id);

	// every HF checkpoint is laid out for rotate_half
	hp->rope = MODEL_ROPE_NEOX;
	float prf = arch == MODEL_ARCH_QWEN35 ? 0.25f : 0; // Qwen3.5's default
	if (cfg_float(c, "partial_rotary_factor", &prf, err) ||
	    (cJSON_IsObject(rp) && arch != MODEL_ARCH_GEMMA4 && cfg_float(rp, "partial_rotary_factor", &prf, err)))
		return -1;
	if (prf > 0 && prf < 1) {
		int64_t hd = hp->head_dim > 0 ? hp->head_dim : hp->n_embd / hp->n_head;
		hp->n_rot = (int64_t)((float)hd * prf);
	}

	// sliding window: only where the architecture has one
	int64_t sw = 0;
	int use_sw = 1;
	if (cfg_int(c, "sliding_window", &sw, err) || cfg_bool(c, "use_sliding_window", &use_sw, err))
		return -1;
	if (arch == MODEL_ARCH_QWEN2 || arch == MODEL_ARCH_QWEN3 || arch == MODEL_ARCH_QWEN2MOE ||
	    arch == MODEL_ARCH_QWEN3MOE)
		use_sw = use_sw && cJSON_IsTrue(jget(c, "use_sliding_window"));
	if (use_sw && sw > 0)
		hp->sliding_window = sw;
	if (gemma) {
		const cJSON *lt = jget(c, "layer_types");
		if (cfg_int(c, "sliding_window_pattern", &hp->swa_pattern, err))
			return -1;
		if (cJSON_IsArray(lt) && flag_period(lt, "layer_types", "full_attention", 0, &hp->swa_pattern, err))
			return -1;
		float qpas = 0;
		if (cfg_float(c, "query_pre_attn_scalar", &qpas, err))
			return -1;
		if (qpas > 0)
			hp->q_scale = 1.0f / sqrtf(qpas);
	}
	if (arch == MODEL_ARCH_GEMMA2 && (cfg_float(c, "attn_logit_softcapping", &hp->attn_softcap, err) ||
	                                  cfg_float(c, "final_logit_softcapping", &hp->final_softcap, err)))
		return -1;
	if (arch == MODEL_ARCH_SMOLLM3) {
		const cJSON *nr = jget(c, "no_rope_layers");
		if (cfg_int(c, "no_rope_layer_interval", &hp->n_no_rope_step, err))
			return -1;
		// no_rope_layers[i] is 1 where layer i uses RoPE
		if (cJSON_IsArray(nr) && flag_period(nr, "no_rope_layers", NULL, 0, &hp->n_no_rope_step, err))
			return -1;
	}
	if (arch == MODEL_ARCH_QWEN2MOE || arch == MODEL_ARCH_QWEN3MOE) {
		int64_t step = 1;
		const cJSON *mlp_only = jget(c, "mlp_only_layers");
		if (cfg_int(c, "decoder_sparse_step", &step, err))
			return -1;
		if (step != 1 || (cJSON_IsArray(mlp_only) && cJSON_GetArraySize(mlp_only) > 0))
			return ad_err(err, "config.json: dense layers between MoE layers "
			                   "(decoder_sparse_step, mlp_only_layers) are not supported");
	}

	// RoPE scaling: linear, yarn, longrope (its factors and llama3's are
	// made into tensors below), HunYuan's NTK alpha folded into the base
	const cJSON *rs = jget(c, "rope_scaling");
	if (cJSON_IsObject(rs)) {
		const cJSON *t = jget(rs, "rope_type");
		if (!cJSON_IsString(t))
			t = jget(rs, "type");
		const char *ts = cJSON_IsString(t) ? t->valuestring : "(none)";
		float factor = 0;
		if (cfg_float(rs, "factor", &factor, err))
			return -1;
		if (!strcmp(ts, "linear")) {
			if (factor > 0)
				hp->rope_freq_scale = 1.0f / factor;
			hp->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
		} else if (!strcmp(ts, "yarn")) {
			float attn = 0;
			if (cfg_int(rs, "original_max_position_embeddings", &hp->n_ctx_orig, err) ||
			    cfg_float(rs, "beta_fast", &hp->yarn_beta_fast, err) ||
			    cfg_float(rs, "beta_slow", &hp->yarn_beta_slow, err) ||
			    cfg_float(rs, "attention_factor", &attn, err))
				return -1;
			if (hp->n_ctx_orig <= 0)
				hp->n_ctx_orig = hp->n_ctx_train;
			if (factor <= 0 && hp->n_ctx_orig > 0 && hp->n_ctx_train > hp->n_ctx_orig)
				factor = (float)((double)hp->n_ctx_train / (double)hp->n_ctx_orig);
			if (!(factor >= 1))
				return ad_err(err, "config.json: rope_scaling yarn needs a factor of at least 1");
			if (jget(rs, "mscale") || jget(rs, "mscale_all_dim"))
				return ad_err(err, "config.json: rope_scaling yarn with mscale / mscale_all_dim "
				                   "is not supported");
			hp->rope_scaling = MODEL_ROPE_SCALING_YARN;
			hp->rope_freq_scale = 1.0f / factor;
			// ggml scales cos/sin by 1 + 0.1 ln(factor) itself: a given
			// attention factor replaces that one
			if (attn > 0)
				hp->rope_attn_factor = (float)(attn / (1.0 + 0.1 * log(factor)));
		} else if (!strcmp(ts, "longrope") || !strcmp(ts, "su")) {
			// the factors are read by add_rope_factors; the attention
			// factor is HF's (and convert_hf_to_gguf's) unless given
			float attn = 0;
			int64_t orig = 0;
			if (cfg_int(rs, "original_max_position_embeddings", &orig, err) ||
			    cfg_int(c, "original_max_position_embeddings", &orig, err) ||
			    cfg_float(rs, "attention_factor", &attn, err))
				return -1;
			if (orig <= 0)
				orig = hp->n_ctx_train;
			if (orig <= 0)
				return ad_err(err, "config.json: rope_scaling longrope needs "
				                   "original_max_position_embeddings");
			hp->rope_scaling = MODEL_ROPE_SCALING_LONGROPE;
			hp->n_ctx_orig = orig;
			double scale = (double)hp->n_ctx_train / (double)orig;
			if (attn <= 0)
				attn = scale > 1 ? (float)sqrt(1 + log(scale) / log((double)orig)) : 1.0f;
			hp->rope_attn_factor = attn;
		} else if (!strcmp(ts, "dynamic") && arch == MODEL_ARCH_HUNYUAN_DENSE) {
			// NTK alpha, as convert_hf_to_gguf folds it: base * alpha^(d/(d-2))
			float alpha = 50;
			if (cfg_float(rs, "alpha", &alpha, err))
				return -1;
			int64_t hd = hp->head_dim > 0 ? hp->head_dim : hp->n_embd / hp->n_head;
			double base = hp->rope_base > 0 ? hp->rope_base : 10000.0;
			if (hd <= 2 || !(alpha > 0))
				return ad_err(err, "config.json: rope_scaling dynamic alpha out of range");
			hp->rope_base = (float)(base * pow((double)alpha, (double)hd / (double)(hd - 2)));
		} else if (strcmp(ts, "llama3") && strcmp(ts, "default")) {
			return ad_err(err,
			              "config.json: rope_scaling type \"%.32s\" is not supported "
			              "(linear, llama3, yarn, longrope)",
			              ts);
		}
	} else if (rs && !cJSON_IsNull(rs)) {
		return ad_err(err, "config.json: rope_scaling is not an object");
	}

	*tied = gemma; // gemma always ties, whatever the key says
	cfg_bool(root, "tie_word_embeddings", tied, NULL);
	cfg_bool(c, "tie_word_embeddings", tied, NULL);
	cfg_bool(c, "tie_embedding", tied, NULL); // lfm2's name for it
	if (gemma || arch == MODEL_ARCH_GEMMA4)
		*tied = 1;
	return 0;
}

// llama3 RoPE scaling as per-dimension divisors of theta (GGUF rope_freqs)
static int
add_llama3_rope_freqs(struct model *m, struct hf_src *s, const cJSON *c, char *err)
{
	const cJSON *rs = jget(c, "rope_scaling");
	const cJSON *t = cJSON_IsObject(rs) ? jget(rs, "rope_type") : NULL;
	if (!cJSON_IsString(t) || strcmp(t->valuestring, "llama3"))
		return 0;
	float factor = 8, lo = 1, hi = 4, base = m->hp.rope_base > 0 ? m->hp.rope_base : 10000;
	int64_t old_ctx = 8192;
	if (cfg_float(rs, "factor", &factor, err) || cfg_float(rs, "low_freq_factor", &lo, err) ||
	    cfg_float(rs, "high_freq_factor", &hi, err) ||
	    cfg_int(rs, "original_max_position_embeddings", &old_ctx, err))
		return -1;
	int64_t hd = m->hp.head_dim > 0 ? m->hp.head_dim : m->hp.n_embd / m->hp.n_head;
	int64_t n_rot = m->hp.n_rot > 0 ? m->hp.n_rot : hd, n = n_rot / 2;
	if (n <= 0 || hi <= lo)
		return ad_err(err, "config.json: llama3 rope_scaling parameters out of range");
	float *f = hf_alloc(s, (size_t)n * sizeof *f);
	if (!f)
		return ad_err(err, "out of memory");
	double lo_wl = (double)old_ctx / lo, hi_wl = (double)old_ctx / hi;
	for (int64_t i = 0; i < n; i++) {
		double freq = 1.0 / pow(base, (double)(2 * i) / (double)n_rot);
		double wl = 2 * M_PI / freq;
		if (wl < hi_wl)
			f[i] = 1;
		else if (wl > lo_wl)
			f[i] = factor;
		else {
			double smooth = ((double)old_ctx / wl - lo) / (hi - lo);
			f[i] = (float)(1 / ((1 - smooth) / factor + smooth));
		}
	}
	int64_t ne[1] = {n};
	return model_add_tensor(m, "rope_freqs.weight", AD_TYPE_F32, 1, ne, f, (size_t)n * 4, err);
}

// longrope's long_factor / short_factor lists as rope_factors_long/short
static int
add_rope_factors(struct model *m, struct hf_src *s, const cJSON *c, char *err)
{
	if (m->hp.rope_scaling != MODEL_ROPE_SCALING_LONGROPE)
		return 0;
	const cJSON *rs = jget(c, "rope_scaling");
	int64_t hd = m->hp.head_dim > 0 ? m->hp.head_dim : m->hp.n_embd / m->hp.n_head;
	int64_t n = (m->hp.n_rot > 0 ? m->hp.n_rot : hd) / 2;
	static const char *keys[2] = {"long_factor", "short_factor"};
	static const char *names[2] = {"rope_factors_long.weight", "rope_factors_short.weight"};
	for (int k = 0; k < 2; k++) {
		const cJSON *a = jget(rs, keys[k]);
		if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
			return ad_err(err,
			              "config.json: rope_scaling.%s must be a list of %lld numbers "
			              "(rotary dims / 2)",
			              keys[k], (long long)n);
		float *f = hf_alloc(s, (size_t)n * sizeof *f);
		if (!f)
			return ad_err(err, "out of memory");
		for (int64_t i = 0; i < n; i++) {
			const cJSON *e = cJSON_GetArrayItem(a, (int)i);
			if (!cJSON_IsNumber(e) || !(e->valuedouble > 0))
				return ad_err(err, "config.json: rope_scaling.%s[%lld] is not a positive number",
				              keys[k], (long long)i);
			f[i] = (float)e->valuedouble;
		}
		int64_t ne[1] = {n};
		if (model_add_tensor(m, names[k], AD_TYPE_F32, 1, ne, f, (size_t)n * 4, err))
			return -1;
	}
	return 0;
}

// gemma4's full layers rotate partial_rotary_factor of their pairs
// ("proportional"): the others get a frequency divisor of 1e30, as
// convert_hf_to_gguf writes rope_freqs
static int
add_gemma4_rope_freqs(struct model *m, struct hf_src *s, const cJSON *c, char *err)
{
	if (m->arch != MODEL_ARCH_GEMMA4)
		return 0;
	const cJSON *full = jget(jget(c, "rope_parameters"), "full_attention");
	float prf = 1;
	if (cfg_float(full, "partial_rotary_factor", &prf, err))
		return -1;
	const int64_t n = m->hp.head_dim / 2, rot = (int64_t)((float)m->hp.head_dim * prf / 2);
	if (!(prf > 0 && prf <= 1) || n <= 0)
		return ad_err(err, "config.json: rope_parameters.full_attention.partial_rotary_factor out of range");
	float *f = hf_alloc(s, (size_t)n * sizeof *f);
	if (!f)
		return ad_err(err, "out of memory");
	for (int64_t i = 0; i < n; i++)
		f[i] = i < rot ? 1.0f : 1e30f;
	int64_t ne[1] = {n};
	return model_add_tensor(m, "rope_freqs.weight", AD_TYPE_F32, 1, ne, f, (size_t)n * 4, err);
}

// --- tensors -----------------------------------------------------------------

enum {
	X_NONE = 0,
	X_PLUS_ONE,  // w -> 1 + w (F32)
	X_SQUEEZE,   // drop a unit dimension
	X_NEG_EXP,   // qwen35's A_log -> ssm_a = -exp(A_log) (F32, v heads tiled)
	X_VROWS,     // qwen35: v-head rows to the tiled order (rows of d values, or of 1)
	X_VCOLS,     // qwen35: ssm_out's v-head columns to the tiled order (F32)
	X_QKV_VROWS, // qwen35: in_proj_qkv, its v rows (after q and k) to the tiled order
	X_CONV_V,    // qwen35: the conv kernel squeezed, its v channels to the tiled order
};

static const struct {
	const char *hf;   // after "model.layers.N."
	const char *gguf; // after "blk.N."
} layer_names[] = {
	{"input_layernorm.weight", "attn_norm.weight"},
	{"self_attn.q_proj.weight", "attn_q.weight"},
	{"self_attn.q_proj.bias", "attn_q.bias"},
	{"self_attn.k_proj.weight", "attn_k.weight"},
	{"self_attn.k_proj.bias", "attn_k.bias"},
	{"self_attn.v_proj.weight", "attn_v.weight"},
	{"self_attn.v_proj.bias", "attn_v.bias"},
	{"self_attn.o_proj.weight", "attn_output.weight"},
	{"self_attn.o_proj.bias", "attn_output.bias"},
	{"self_attn.qkv_proj.weight", "attn_qkv.weight"},
	{"self_attn.qkv_proj.bias", "attn_qkv.bias"},
	{"self_attn.q_norm.weight", "attn_q_norm.weight"},
	{"self_attn.k_norm.weight", "attn_k_norm.weight"},
	{"self_attn.query_layernorm.weight", "attn_q_norm.weight"}, // hunyuan
	{"self_attn.key_layernorm.weight", "attn_k_norm.weight"},
	{"post_attention_layernorm.weight", "ffn_norm.weight"}, // gemma: see below
	{"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
	{"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
	{"mlp.gate_proj.weight", "ffn_gate.weight"},
	{"mlp.up_proj.weight", "ffn_up.weight"},
	{"mlp.down_proj.weight", "ffn_down.weight"},
	{"mlp.gate_up_proj.weight", "ffn_up.weight"}, // phi3: gate rows first, as GGUF
	{"mlp.gate.weight", "ffn_gate_inp.weight"},
	{"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
	{"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
	{"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
	{"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};

// the architectures whose layers name things their own way
static const struct {
	enum model_arch arch;
	const char *hf, *gguf;
	int xform;
} arch_names[] = {
	{MODEL_ARCH_LFM2, "operator_norm.weight", "attn_norm.weight", X_NONE},
	{MODEL_ARCH_LFM2, "ffn_norm.weight", "ffn_norm.weight", X_NONE},
	{MODEL_ARCH_LFM2, "self_attn.q_layernorm.weight", "attn_q_norm.weight", X_NONE},
	{MODEL_ARCH_LFM2, "self_attn.k_layernorm.weight", "attn_k_norm.weight", X_NONE},
	{MODEL_ARCH_LFM2, "self_attn.out_proj.weight", "attn_output.weight", X_NONE},
	{MODEL_ARCH_LFM2, "conv.in_proj.weight", "shortconv.in_proj.weight", X_NONE},
	{MODEL_ARCH_LFM2, "conv.conv.weight", "shortconv.conv.weight", X_SQUEEZE},
	{MODEL_ARCH_LFM2, "conv.out_proj.weight", "shortconv.out_proj.weight", X_NONE},
	{MODEL_ARCH_LFM2, "feed_forward.w1.weight", "ffn_gate.weight", X_NONE},
	{MODEL_ARCH_LFM2, "feed_forward.w3.weight", "ffn_up.weight", X_NONE},
	{MODEL_ARCH_LFM2, "feed_forward.w2.weight", "ffn_down.weight", X_NONE},
	{MODEL_ARCH_LFM2, "feed_forward.gate.weight", "ffn_gate_inp.weight", X_NONE},
	{MODEL_ARCH_LFM2, "feed_forward.expert_bias", "exp_probs_b.bias", X_NONE},
	{MODEL_ARCH_GEMMA4, "post_attention_layernorm.weight", "post_attention_norm.weight", X_NONE},
	{MODEL_ARCH_GEMMA4, "pre_feedforward_layernorm.weight", "ffn_norm.weight", X_NONE},
	{MODEL_ARCH_GEMMA4, "per_layer_input_gate.weight", "inp_gate.weight", X_NONE},
	{MODEL_ARCH_GEMMA4, "per_layer_projection.weight", "proj.weight", X_NONE},
	{MODEL_ARCH_GEMMA4, "post_per_layer_input_norm.weight", "post_norm.weight", X_NONE},
	{MODEL_ARCH_GEMMA4, "layer_scalar", "layer_output_scale.weight", X_NONE},
	{MODEL_ARCH_QWEN35, "input_layernorm.weight", "attn_norm.weight", X_PLUS_ONE},
	{MODEL_ARCH_QWEN35, "post_attention_layernorm.weight", "post_attention_norm.weight", X_PLUS_ONE},
	{MODEL_ARCH_QWEN35, "self_attn.q_norm.weight", "attn_q_norm.weight", X_PLUS_ONE},
	{MODEL_ARCH_QWEN35, "self_attn.k_norm.weight", "attn_k_norm.weight", X_PLUS_ONE},
	{MODEL_ARCH_QWEN35, "linear_attn.in_proj_qkv.weight", "attn_qkv.weight", X_QKV_VROWS},
	{MODEL_ARCH_QWEN35, "linear_attn.in_proj_z.weight", "attn_gate.weight", X_VROWS},
	{MODEL_ARCH_QWEN35, "linear_attn.in_proj_b.weight", "ssm_beta.weight", X_VROWS},
	{MODEL_ARCH_QWEN35, "linear_attn.in_proj_a.weight", "ssm_alpha.weight", X_VROWS},
	{MODEL_ARCH_QWEN35, "linear_attn.A_log", "ssm_a", X_NEG_EXP},
	{MODEL_ARCH_QWEN35, "linear_attn.dt_bias", "ssm_dt.bias", X_VROWS},
	{MODEL_ARCH_QWEN35, "linear_attn.conv1d.weight", "ssm_conv1d.weight", X_CONV_V},
	{MODEL_ARCH_QWEN35, "linear_attn.norm.weight", "ssm_norm.weight", X_NONE},
	{MODEL_ARCH_QWEN35, "linear_attn.out_proj.weight", "ssm_out.weight", X_VCOLS},
};

// the architecture as the name tables know it (lfm2moe names as lfm2)
static enum model_arch
names_arch(enum model_arch a)
{
	return a == MODEL_ARCH_LFM2MOE ? MODEL_ARCH_LFM2 : a;
}

// the GGUF name of an HF tensor and how to transform it; -1 if unknown.
// Expert tensors report their layer, expert and projection instead.
static int
map_name(const struct model *m, const char *hf, char *out, size_t cap, int *xform, int *layer, int *expert, int *proj)
{
	int gemma = m->arch == MODEL_ARCH_GEMMA2 || m->arch == MODEL_ARCH_GEMMA3;
	*xform = X_NONE;
	*expert = -1;
	// multimodal checkpoints prefix the language model:
	// "language_model.model.x" (older) or "model.language_model.x" (newer)
	char buf[256];
	const char *rest = hf;
	if (!strncmp(rest, "language_model.", 15))
		rest += 15;
	else if (!strncmp(rest, "model.language_model.", 21) &&
	         snprintf(buf, sizeof buf, "model.%s", rest + 21) < (int)sizeof buf)
		rest = buf;
	if (!strcmp(rest, "model.embed_tokens.weight")) {
		snprintf(out, cap, "token_embd.weight");
		return 0;
	}
	if (!strcmp(rest, "model.norm.weight")) {
		snprintf(out, cap, "output_norm.weight");
		*xform = gemma || m->arch == MODEL_ARCH_QWEN35 ? X_PLUS_ONE : X_NONE;
		return 0;
	}
	static const struct {
		enum model_arch arch;
		const char *hf, *gguf;
	} globals[] = {
		{MODEL_ARCH_LFM2, "model.embedding_norm.weight", "token_embd_norm.weight"},
		{MODEL_ARCH_GEMMA4, "model.embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
		{MODEL_ARCH_GEMMA4, "model.per_layer_model_projection.weight", "per_layer_model_proj.weight"},
		{MODEL_ARCH_GEMMA4, "model.per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
	};
	for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
		if (globals[i].arch == names_arch(m->arch) && !strcmp(rest, globals[i].hf)) {
			snprintf(out, cap, "%s", globals[i].gguf);
			return 0;
		}
	if (!strcmp(rest, "lm_head.weight")) {
		snprintf(out, cap, "output.weight");
		return 0;
	}
	int il, ie, n = 0;
	if (sscanf(rest, "model.layers.%d.%n", &il, &n) != 1 || n == 0 || il < 0 || il >= m->hp.n_layer)
		return -1;
	rest += n;
	*layer = il;
	char pname[16];
	int k = 0;
	if (sscanf(rest, "mlp.experts.%d.%15[a-z]_proj.weight%n", &ie, pname, &k) == 2 && k > 0 && rest[k] == 0) {
		if (ie < 0)
			return -1;
		static const char *projs[] = {"gate", "up", "down"};
		for (int p = 0; p < 3; p++)
			if (!strcmp(pname, projs[p])) {
				*expert = ie;
				*proj = p;
				return 0;
			}
		return -1;
	}
	// lfm2moe: feed_forward.experts.E.w1 (gate), w3 (up), w2 (down)
	int w = 0;
	k = 0;
	if (names_arch(m->arch) == MODEL_ARCH_LFM2 &&
	    sscanf(rest, "feed_forward.experts.%d.w%d.weight%n", &ie, &w, &k) == 2 && k > 0 && rest[k] == 0) {
		if (ie < 0 || w < 1 || w > 3)
			return -1;
		*expert = ie;
		*proj = w == 1 ? 0 : w == 3 ? 1 : 2;
		return 0;
	}
	for (size_t i = 0; i < sizeof arch_names / sizeof arch_names[0]; i++)
		if (arch_names[i].arch == names_arch(m->arch) && !strcmp(rest, arch_names[i].hf)) {
			snprintf(out, cap, "blk.%d.%s", il, arch_names[i].gguf);
			*xform = arch_names[i].xform;
			return 0;
		}
	for (size_t i = 0; i < sizeof layer_names / sizeof layer_names[0]; i++) {
		if (strcmp(rest, layer_names[i].hf))
			continue;
		const char *g = layer_names[i].gguf;
		if (gemma && !strcmp(rest, "post_attention_layernorm.weight"))
			g = "post_attention_norm.weight";
		snprintf(out, cap, "blk.%d.%s", il, g);
		if (gemma && strstr(g, "norm.weight"))
			*xform = X_PLUS_ONE;
		if (!strcmp(rest, "mlp.shared_expert_gate.weight"))
			*xform = X_SQUEEZE;
		return 0;
	}
	return -1;
}

// HF shape (slowest first) to GGUF ne (fastest first)
static int
to_ne(const struct st_tensor *t, int64_t *ne, uint32_t *nd, char *err)
{
	if (t->n_dims < 1 || t->n_dims > 3)
		return ad_err(err, "tensor %s has %u dimensions", t->name, t->n_dims);
	for (uint32_t i = 0; i < t->n_dims; i++)
		ne[i] = t->shape[t->n_dims - 1 - i];
	*nd = t->n_dims;
	return 0;
}

static int
add_plus_one(struct model *m, struct hf_src *s, const char *name, const struct st_tensor *t, const int64_t *ne,
             uint32_t nd, char *err)
{
	float *f = hf_alloc(s, (size_t)t->nelem * sizeof *f);
	if (!f)
		return ad_err(err, "out of memory");
	if (ad_dequant(t->type, t->data, f, t->nelem, err))
		return ad_err_prefix(err, "tensor %s", t->name);
	for (int64_t i = 0; i < t->nelem; i++)
		f[i] += 1.0f;
	return model_add_tensor(m, name, AD_TYPE_F32, nd, ne, f, (size_t)t->nelem * 4, err);
}

// qwen35's v heads, from HF's order (grouped by q/k head: head g r + i is
// the i-th of q/k head g, r = n_v / n_k) to the tiled one GGUF files have
// (position i n_k + g): the v part of src, n_v blocks of `block` bytes
// each `stride` bytes apart (a block per head; stride = block for
// contiguous heads), into dst
static void
v_tiled(const struct model_hparams *hp, const uint8_t *src, uint8_t *dst, size_t block, size_t stride)
{
	const int64_t nk = hp->ssm_n_group, nv = hp->ssm_dt_rank, r = nv / nk;
	for (int64_t p = 0; p < nv; p++) {
		int64_t i = p / nk, g = p % nk;
		memcpy(dst + (size_t)p * stride, src + (size_t)(g * r + i) * stride, block);
	}
}

// the qwen35 delta-net tensors HF keeps in its own order (see the top)
static int
add_v_tiled(struct model *m, struct hf_src *s, const char *name, const struct st_tensor *t, const int64_t *ne,
            uint32_t nd, int xform, char *err)
{
	const struct model_hparams *hp = &m->hp;
	const int64_t nv = hp->ssm_dt_rank, d = hp->ssm_d_state, nkd = hp->ssm_n_group * d;
	if (nv <= 0 || hp->ssm_n_group <= 0 || nv % hp->ssm_n_group)
		return ad_err(err, "tensor %s: the config's linear heads (%lld v, %lld q/k) do not fit", t->name,
		              (long long)nv, (long long)hp->ssm_n_group);
	uint32_t type = t->type;
	const uint8_t *src = t->data;
	size_t nbytes = t->nbytes, esz = ad_type_block_bytes(t->type);
	if (xform == X_NEG_EXP || xform == X_VCOLS) { // on F32 values
		float *f = hf_alloc(s, (size_t)t->nelem * sizeof *f);
		if (!f)
			return ad_err(err, "out of memory");
		if (ad_dequant(t->type, t->data, f, t->nelem, err))
			return ad_err_prefix(err, "tensor %s", t->name);
		if (xform == X_NEG_EXP)
			for (int64_t i = 0; i < t->nelem; i++)
				f[i] = -expf(f[i]);
		type = AD_TYPE_F32;
		src = (const uint8_t *)f;
		nbytes = (size_t)t->nelem * 4;
		esz = 4;
	}
	uint8_t *dst = hf_alloc(s, nbytes);
	if (!dst)
		return ad_err(err, "out of memory");
	memcpy(dst, src, nbytes);
	// where the v heads are: the rows after q and k (qkv and the conv's
	// channels), every row (z, a, b, A_log, dt_bias), or the columns (out_proj)
	// (a 1-D tensor, A_log or dt_bias, is n_v rows of one value)
	const size_t row = nd == 1 ? esz : (size_t)ne[0] * esz, rows = nbytes / row;
	size_t skip = 0;
	if (xform == X_QKV_VROWS || xform == X_CONV_V)
		skip = 2 * (size_t)nkd;
	if (xform == X_VCOLS) {
		if (ne[0] != nv * d)
			return ad_err(err, "tensor %s: %lld columns, not %lld v-head values", t->name, (long long)ne[0],
			              (long long)(nv * d));
		for (size_t r = 0; r < rows; r++)
			v_tiled(hp, src + r * row, dst + r * row, (size_t)d * esz, (size_t)d * esz);
	} else {
		if (rows <= skip || (rows - skip) % (size_t)nv)
			return ad_err(err, "tensor %s: %zu rows do not hold %lld v heads", t->name, rows - skip,
			              (long long)nv);
		size_t block = (rows - skip) / (size_t)nv * row;
		v_tiled(hp, src + skip * row, dst + skip * row, block, block);
	}
	return model_add_tensor(m, name, type, nd, ne, dst, nbytes, err);
}

// stack experts 0..n_expert-1 of one projection into a 3-D tensor
static int
add_experts(struct model *m, struct hf_src *s, const char *prefix, int il, int proj, char *err)
{
	static const char *hf[] = {"gate", "up", "down"}, *lfm[] = {"w1", "w3", "w2"};
	int64_t n_exp = m->hp.n_expert;
	char name[200];
	const struct st_tensor *first = NULL;
	char *buf = NULL;
	for (int64_t e = 0; e < n_exp; e++) {
		if (names_arch(m->arch) == MODEL_ARCH_LFM2)
			snprintf(name, sizeof name, "%smodel.layers.%d.feed_forward.experts.%lld.%s.weight", prefix, il,
			         (long long)e, lfm[proj]);
		else
			snprintf(name, sizeof name, "%smodel.layers.%d.mlp.experts.%lld.%s_proj.weight", prefix, il,
			         (long long)e, hf[proj]);
		const struct st_tensor *t = st_set_find(&s->set, name);
		if (!t)
			return ad_err(err, "missing tensor %s (num_experts is %lld)", name, (long long)n_exp);
		if (st_tensor_check(t, err))
			return -1;
		if (!first) {
			first = t;
			if (t->n_dims != 2)
				return ad_err(err, "tensor %s is not 2-D", name);
			buf = hf_alloc(s, t->nbytes * (size_t)n_exp);
			if (!buf)
				return ad_err(err, "out of memory");
		} else if (t->type != first->type || t->n_dims != 2 || t->shape[0] != first->shape[0] ||
		           t->shape[1] != first->shape[1]) {
			return ad_err(err, "tensor %s differs in dtype or shape from expert 0", name);
		}
		memcpy(buf + (size_t)e * first->nbytes, t->data, first->nbytes);
	}
	static const char *gg[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
	snprintf(name, sizeof name, "blk.%d.%s.weight", il, gg[proj]);
	int64_t ne[3] = {first->shape[1], first->shape[0], n_exp};
	return model_add_tensor(m, name, first->type, 3, ne, buf, first->nbytes * (size_t)n_exp, err);
}

static int
add_tensors(struct model *m, struct hf_src *s, int tied, char *err)
{
	int64_t ignored = 0;
	const char *first_ignored = NULL;
	// which (layer, projection) expert stacks exist
	int64_t nl = m->hp.n_layer;
	char *has_exp = calloc((size_t)nl * 3, 1);
	if (!has_exp)
		return ad_err(err, "out of memory");
	int rc = -1;
	for (int f = 0; f < s->set.n_files; f++) {
		const struct st_file *sf = &s->set.files[f];
		for (int64_t i = 0; i < sf->n_tensors; i++) {
			const struct st_tensor *t = &sf->tensors[i];
			char name[160];
			int xform, il = -1, ie, proj = 0;
			if (map_name(m, t->name, name, sizeof name, &xform, &il, &ie, &proj)) {
				if (!first_ignored)
					first_ignored = t->name;
				ignored++;
				continue;
			}
			if (ie >= 0) {
				if ((m->arch != MODEL_ARCH_QWEN2MOE && m->arch != MODEL_ARCH_QWEN3MOE &&
				     m->arch != MODEL_ARCH_LFM2MOE) ||
				    ie >= m->hp.n_expert) {
					ad_err(err, "tensor %s: expert %d but num_experts is %lld", t->name, ie,
					       (long long)m->hp.n_expert);
					goto out;
				}
				has_exp[il * 3 + proj] = 1;
				continue;
			}
			if (tied && !strcmp(name, "output.weight"))
				continue; // the embedding is the output
			if (st_tensor_check(t, err))
				goto out;
			int64_t ne[3];
			uint32_t nd = 0;
			if (to_ne(t, ne, &nd, err))
				goto out;
			if (xform == X_SQUEEZE || xform == X_CONV_V) { // drop the unit dimensions
				uint32_t k = 0;
				for (uint32_t d = 0; d < nd; d++)
					if (ne[d] != 1)
						ne[k++] = ne[d];
				nd = k ? k : 1;
			}
			if (xform == X_PLUS_ONE) {
				if (add_plus_one(m, s, name, t, ne, nd, err))
					goto out;
			} else if (xform > X_SQUEEZE) {
				if (add_v_tiled(m, s, name, t, ne, nd, xform, err))
					goto out;
			} else if (model_add_tensor(m, name, t->type, nd, ne, t->data, t->nbytes, err)) {
				goto out;
			}
		}
	}
	for (int il = 0; il < nl; il++)
		for (int p = 0; p < 3; p++)
			if (has_exp[il * 3 + p] && add_experts(m, s, "", il, p, err))
				goto out;
	if (ignored)
		ad_info("%s: %lld tensors not used by %s (first: %s)", m->path, (long long)ignored,
		        model_arch_name(m->arch), first_ignored);
	rc = 0;
out:
	free(has_exp);
	return rc;
}

int
model_load_hf(struct model *m, const char *dir, char *err)
{
	model_init(m);
	snprintf(m->path, sizeof m->path, "%s", dir);
	m->is_gguf = 0;
	const char *force = getenv("ANEDVD_ARCH");
	if (force && *force)
		ad_warn("%s: --arch %s is for GGUF files; a Hugging Face directory is loaded as its "
		        "config.json says",
		        dir, force);
	char path[PATH_MAX];
	if (snprintf(path, sizeof path, "%s/config.json", dir) >= (int)sizeof path)
		return ad_err(err, "%s: path too long", dir);
	if (access(path, F_OK) != 0) {
		int ggufs = 0;
		DIR *d = opendir(dir);
		for (struct dirent *e; d && (e = readdir(d));) {
			size_t n = strlen(e->d_name);
			ggufs += n > 5 && !strcmp(e->d_name + n - 5, ".gguf");
		}
		if (d)
			closedir(d);
		if (ggufs)
			return ad_err(err,
			              "%s: a directory of %d GGUF file%s, not a Hugging Face model (no config.json): "
			              "give the file",
			              dir, ggufs, ggufs > 1 ? "s" : "");
		return ad_err(err, "%s: no config.json: not a Hugging Face model directory", dir);
	}
	cJSON *cfg = read_json(path, err);
	if (!cfg)
		return -1;
	struct hf_src *s = calloc(1, sizeof *s);
	if (!s) {
		cJSON_Delete(cfg);
		return ad_err(err, "out of memory");
	}
	m->src = s;
	m->src_free = hf_src_free;

	// the model's name is the directory's
	char tmp[sizeof m->name];
	snprintf(tmp, sizeof tmp, "%s", dir);
	for (size_t n = strlen(tmp); n > 1 && tmp[n - 1] == '/'; n--)
		tmp[n - 1] = 0;
	const char *base = strrchr(tmp, '/');
	snprintf(m->name, sizeof m->name, "%s", base && base[1] ? base + 1 : tmp);

	int tied = 0;
	const cJSON *c = cJSON_IsObject(jget(cfg, "text_config")) ? jget(cfg, "text_config") : cfg;
	if (read_config(m, cfg, &tied, err) || st_set_open(&s->set, dir, err) || add_llama3_rope_freqs(m, s, c, err) ||
	    add_rope_factors(m, s, c, err) || add_gemma4_rope_freqs(m, s, c, err) || add_tensors(m, s, tied, err) ||
	    model_finish(m, err)) {
		ad_err_prefix(err, "%s", dir);
		cJSON_Delete(cfg);
		model_free(m);
		return -1;
	}
	for (int i = 0; i < s->set.n_files; i++)
		m->file_bytes += s->set.files[i].size;
	cJSON_Delete(cfg);
	return 0;
}
