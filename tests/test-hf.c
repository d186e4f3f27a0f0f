// test-hf: every fixture GGUF written out as a Hugging Face directory (with
// the inverse of the HF conventions), loaded back with model_load_hf, and
// compared with the GGUF: hyper-parameters, every dequantised weight, and
// the reference engine's logits. The conventions are convert_hf_to_gguf's:
// lfm2's own names, layer_types and FFN width rule; gemma4's head sizes,
// double-wide FFNs and proportional RoPE from config; qwen35's (1 + w)
// norms, A_log, and the delta-net's v heads grouped by q/k head in HF
// (tiled in GGUF), also as multimodal checkpoints.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>

#include "dequant.h"
#include "model.h"
#include "ref.h"
#include "safetensors.h"
#include "t.h"
#include "wtype.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" // CHECK without a message

// --- GGUF -> HF ------------------------------------------------------------------

struct out_tensor {
	char name[160];
	uint32_t type;
	uint32_t n_dims;
	int64_t shape[3]; // HF order, slowest first
	void *data;
	size_t nbytes;
};

struct hf_out {
	struct out_tensor *t;
	int n, cap;
};

static struct out_tensor *
push(struct hf_out *o, const char *name, uint32_t type, uint32_t nd, const int64_t *ne, size_t nbytes)
{
	if (o->n == o->cap) {
		o->cap = o->cap ? 2 * o->cap : 64;
		o->t = realloc(o->t, (size_t)o->cap * sizeof *o->t);
	}
	struct out_tensor *t = &o->t[o->n++];
	memset(t, 0, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name);
	t->type = type;
	t->n_dims = nd;
	for (uint32_t i = 0; i < nd; i++)
		t->shape[i] = ne[nd - 1 - i];
	t->nbytes = nbytes;
	t->data = malloc(nbytes ? nbytes : 1);
	return t;
}

static int
is_gemma(const struct model *m)
{
	return m->arch == MODEL_ARCH_GEMMA2 || m->arch == MODEL_ARCH_GEMMA3;
}

// GGUF llama rows of one head are (pair i, half) interleaved; HF keeps the
// halves apart. hf_row(h, half, i) = gguf_row(h, 2i + half)
static void
unpermute_rows(const uint8_t *src, uint8_t *dst, int64_t rows, int64_t n_heads, size_t row_bytes)
{
	int64_t hd = rows / n_heads;
	for (int64_t h = 0; h < n_heads; h++)
		for (int half = 0; half < 2; half++)
			for (int64_t i = 0; i < hd / 2; i++)
				memcpy(dst + (size_t)(h * hd + half * hd / 2 + i) * row_bytes,
				       src + (size_t)(h * hd + 2 * i + half) * row_bytes, row_bytes);
}

static const struct {
	const char *gguf, *hf;
} names[] = {
	{"attn_norm.weight", "input_layernorm.weight"},
	{"attn_q.weight", "self_attn.q_proj.weight"},
	{"attn_q.bias", "self_attn.q_proj.bias"},
	{"attn_k.weight", "self_attn.k_proj.weight"},
	{"attn_k.bias", "self_attn.k_proj.bias"},
	{"attn_v.weight", "self_attn.v_proj.weight"},
	{"attn_v.bias", "self_attn.v_proj.bias"},
	{"attn_output.weight", "self_attn.o_proj.weight"},
	{"attn_qkv.weight", "self_attn.qkv_proj.weight"},
	{"attn_q_norm.weight", "self_attn.q_norm.weight"},
	{"attn_k_norm.weight", "self_attn.k_norm.weight"},
	{"post_attention_norm.weight", "post_attention_layernorm.weight"},
	{"post_ffw_norm.weight", "post_feedforward_layernorm.weight"},
	{"ffn_gate.weight", "mlp.gate_proj.weight"},
	{"ffn_down.weight", "mlp.down_proj.weight"},
	{"ffn_gate_inp.weight", "mlp.gate.weight"},
	{"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
	{"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
	{"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
	{"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
};

// the architectures that name their layers their own way (lfm2moe as lfm2)
static const struct {
	enum model_arch arch;
	const char *gguf, *hf;
} arch_names[] = {
	{MODEL_ARCH_LFM2, "attn_norm.weight", "operator_norm.weight"},
	{MODEL_ARCH_LFM2, "ffn_norm.weight", "ffn_norm.weight"},
	{MODEL_ARCH_LFM2, "attn_q_norm.weight", "self_attn.q_layernorm.weight"},
	{MODEL_ARCH_LFM2, "attn_k_norm.weight", "self_attn.k_layernorm.weight"},
	{MODEL_ARCH_LFM2, "attn_output.weight", "self_attn.out_proj.weight"},
	{MODEL_ARCH_LFM2, "shortconv.in_proj.weight", "conv.in_proj.weight"},
	{MODEL_ARCH_LFM2, "shortconv.conv.weight", "conv.conv.weight"},
	{MODEL_ARCH_LFM2, "shortconv.out_proj.weight", "conv.out_proj.weight"},
	{MODEL_ARCH_LFM2, "ffn_gate.weight", "feed_forward.w1.weight"},
	{MODEL_ARCH_LFM2, "ffn_up.weight", "feed_forward.w3.weight"},
	{MODEL_ARCH_LFM2, "ffn_down.weight", "feed_forward.w2.weight"},
	{MODEL_ARCH_LFM2, "ffn_gate_inp.weight", "feed_forward.gate.weight"},
	{MODEL_ARCH_LFM2, "exp_probs_b.bias", "feed_forward.expert_bias"},
	{MODEL_ARCH_GEMMA4, "post_attention_norm.weight", "post_attention_layernorm.weight"},
	{MODEL_ARCH_GEMMA4, "ffn_norm.weight", "pre_feedforward_layernorm.weight"},
	{MODEL_ARCH_GEMMA4, "inp_gate.weight", "per_layer_input_gate.weight"},
	{MODEL_ARCH_GEMMA4, "proj.weight", "per_layer_projection.weight"},
	{MODEL_ARCH_GEMMA4, "post_norm.weight", "post_per_layer_input_norm.weight"},
	{MODEL_ARCH_GEMMA4, "layer_output_scale.weight", "layer_scalar"},
	{MODEL_ARCH_QWEN35, "attn_norm.weight", "input_layernorm.weight"},
	{MODEL_ARCH_QWEN35, "post_attention_norm.weight", "post_attention_layernorm.weight"},
	{MODEL_ARCH_QWEN35, "attn_qkv.weight", "linear_attn.in_proj_qkv.weight"},
	{MODEL_ARCH_QWEN35, "attn_gate.weight", "linear_attn.in_proj_z.weight"},
	{MODEL_ARCH_QWEN35, "ssm_beta.weight", "linear_attn.in_proj_b.weight"},
	{MODEL_ARCH_QWEN35, "ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
	{MODEL_ARCH_QWEN35, "ssm_a", "linear_attn.A_log"},
	{MODEL_ARCH_QWEN35, "ssm_dt.bias", "linear_attn.dt_bias"},
	{MODEL_ARCH_QWEN35, "ssm_conv1d.weight", "linear_attn.conv1d.weight"},
	{MODEL_ARCH_QWEN35, "ssm_norm.weight", "linear_attn.norm.weight"},
	{MODEL_ARCH_QWEN35, "ssm_out.weight", "linear_attn.out_proj.weight"},
};

static enum model_arch
names_arch(const struct model *m)
{
	return m->arch == MODEL_ARCH_LFM2MOE ? MODEL_ARCH_LFM2 : m->arch;
}

// qwen35: the GGUF's tiled v heads (position i n_k + g) back to HF's order
// grouped by q/k head (g r + i): n_v blocks of `block` bytes, `stride` apart
static void
v_grouped(const struct model *m, const uint8_t *src, uint8_t *dst, size_t block, size_t stride)
{
	const int64_t nk = m->hp.ssm_n_group, nv = m->hp.ssm_dt_rank, r = nv / nk;
	for (int64_t p = 0; p < nv; p++)
		memcpy(dst + (size_t)((p % nk) * r + p / nk) * stride, src + (size_t)p * stride, block);
}

// the HF name of a per-layer GGUF tensor suffix, NULL if not in the table
static const char *
hf_suffix(const struct model *m, const char *g)
{
	for (size_t i = 0; i < sizeof arch_names / sizeof arch_names[0]; i++)
		if (arch_names[i].arch == names_arch(m) && !strcmp(arch_names[i].gguf, g))
			return arch_names[i].hf;
	if (!strcmp(g, "ffn_norm.weight"))
		return is_gemma(m) ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
	if (!strcmp(g, "ffn_up.weight"))
		return m->arch == MODEL_ARCH_PHI3 ? "mlp.gate_up_proj.weight" : "mlp.up_proj.weight";
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (!strcmp(names[i].gguf, g))
			return names[i].hf;
	return NULL;
}

// every tensor of m in HF form; F32/F16/BF16 are copied as they are, quants
// dequantised to F32. skip names one tensor to leave out (for error tests).
static int
to_hf(const struct model *m, struct hf_out *o, const char *skip)
{
	char err[AD_ERRLEN];
	for (int64_t i = 0; i < m->n_tensors; i++) {
		const struct model_tensor *t = &m->tensors[i];
		if ((skip && !strcmp(t->name, skip)) || !strncmp(t->name, "rope_factors_", 13) ||
		    (m->arch == MODEL_ARCH_GEMMA4 && !strcmp(t->name, "rope_freqs.weight")))
			continue; // (longrope's factors and gemma4's partial RoPE are in config.json)
		int64_t n = model_tensor_nelem(t);
		int native = t->type == AD_TYPE_F32 || t->type == AD_TYPE_F16 || t->type == AD_TYPE_BF16;
		uint32_t type = native ? t->type : AD_TYPE_F32;
		size_t esz = ad_type_block_bytes(type);
		const void *src = t->data;
		float *deq = NULL;
		if (!native) {
			deq = malloc((size_t)n * 4);
			if (ad_dequant(t->type, t->data, deq, n, err)) {
				fprintf(stderr, "%s\n", err);
				return -1;
			}
			src = deq;
		}
		char hf[160];
		int il = -1, k = 0;
		const char *suffix = NULL;
		if (sscanf(t->name, "blk.%d.%n", &il, &k) == 1 && k > 0)
			suffix = t->name + k;
		static const char *globals[][2] = {
			{"token_embd_norm.weight", "model.embedding_norm.weight"}, // lfm2's final norm
			{"per_layer_token_embd.weight", "model.embed_tokens_per_layer.weight"},
			{"per_layer_model_proj.weight", "model.per_layer_model_projection.weight"},
			{"per_layer_proj_norm.weight", "model.per_layer_projection_norm.weight"},
		};
		const char *global = NULL;
		for (size_t g = 0; g < sizeof globals / sizeof globals[0]; g++)
			if (!strcmp(t->name, globals[g][0]))
				global = globals[g][1];
		if (global) {
			snprintf(hf, sizeof hf, "%s", global);
		} else if (!strcmp(t->name, "token_embd.weight")) {
			snprintf(hf, sizeof hf, "model.embed_tokens.weight");
		} else if (!strcmp(t->name, "output_norm.weight")) {
			snprintf(hf, sizeof hf, "model.norm.weight");
		} else if (!strcmp(t->name, "output.weight")) {
			snprintf(hf, sizeof hf, "lm_head.weight");
		} else if (suffix && strstr(suffix, "_exps.weight")) {
			// one 2-D tensor per expert
			const char *proj = !strncmp(suffix, "ffn_gate", 8) ? "gate"
			                   : !strncmp(suffix, "ffn_up", 6) ? "up"
			                                                   : "down";
			const char *w = proj[0] == 'g' ? "w1" : proj[0] == 'u' ? "w3" : "w2"; // lfm2moe
			int64_t ne2[2] = {t->ne[0], t->ne[1]};
			size_t per = (size_t)(t->ne[0] * t->ne[1]) * esz;
			for (int64_t e = 0; e < t->ne[2]; e++) {
				if (names_arch(m) == MODEL_ARCH_LFM2)
					snprintf(hf, sizeof hf, "model.layers.%d.feed_forward.experts.%lld.%s.weight",
					         il, (long long)e, w);
				else
					snprintf(hf, sizeof hf, "model.layers.%d.mlp.experts.%lld.%s_proj.weight", il,
					         (long long)e, proj);
				struct out_tensor *ot = push(o, hf, type, 2, ne2, per);
				memcpy(ot->data, (const uint8_t *)src + e * per, per);
			}
			free(deq);
			continue;
		} else if (suffix && m->arch == MODEL_ARCH_HUNYUAN_DENSE && strstr(suffix, "_norm.weight") &&
		           !strncmp(suffix, "attn_", 5) && suffix[5] != 'n') {
			snprintf(hf, sizeof hf, "model.layers.%d.self_attn.%s_layernorm.weight", il,
			         suffix[5] == 'q' ? "query" : "key");
		} else if (suffix && hf_suffix(m, suffix)) {
			snprintf(hf, sizeof hf, "model.layers.%d.%s", il, hf_suffix(m, suffix));
		} else {
			fprintf(stderr, "no HF name for %s\n", t->name);
			free(deq);
			return -1;
		}
		uint32_t nd = t->n_dims;
		int64_t ne[3] = {t->ne[0], t->ne[1], t->ne[2]};
		if (suffix && !strcmp(suffix, "ffn_gate_inp_shexp.weight")) {
			nd = 2; // HF keeps it as a [1, n_embd] linear layer
			ne[1] = 1;
		}
		if (suffix && (!strcmp(suffix, "shortconv.conv.weight") || !strcmp(suffix, "ssm_conv1d.weight"))) {
			nd = 3; // a Conv1d kernel [channels, 1, taps]
			ne[2] = ne[1];
			ne[1] = 1;
		}
		const int qwen35 = m->arch == MODEL_ARCH_QWEN35;
		const int qnorm = qwen35 && strstr(t->name, "norm.weight") && !strstr(t->name, "ssm_norm");
		struct out_tensor *ot = push(o, hf, type, nd, ne, (size_t)n * esz);
		int qk = suffix && (!strcmp(suffix, "attn_q.weight") || !strcmp(suffix, "attn_k.weight"));
		if ((m->arch == MODEL_ARCH_LLAMA || m->arch == MODEL_ARCH_SMOLLM3) && qk) {
			int64_t heads = !strcmp(suffix, "attn_q.weight") ? m->hp.n_head : m->hp.n_head_kv;
			unpermute_rows(src, ot->data, t->ne[1], heads, (size_t)t->ne[0] * esz);
		} else if (qwen35 && suffix &&
		           (!strcmp(suffix, "attn_qkv.weight") || !strcmp(suffix, "ssm_conv1d.weight") ||
		            !strcmp(suffix, "attn_gate.weight") || !strcmp(suffix, "ssm_beta.weight") ||
		            !strcmp(suffix, "ssm_alpha.weight") || !strcmp(suffix, "ssm_dt.bias") ||
		            !strcmp(suffix, "ssm_a") || !strcmp(suffix, "ssm_out.weight"))) {
			// the v heads back to HF's grouped order; A_log = log(-ssm_a)
			const size_t bytes = (size_t)n * esz;
			const uint8_t *sv = src;
			float *alog = NULL;
			if (!strcmp(suffix, "ssm_a")) {
				alog = malloc(bytes);
				for (int64_t j = 0; j < n; j++)
					alog[j] = logf(-((const float *)src)[j]);
				sv = (const uint8_t *)alog;
			}
			memcpy(ot->data, sv, bytes);
			const int64_t nv = m->hp.ssm_dt_rank, d = m->hp.ssm_d_state, nkd = m->hp.ssm_n_group * d;
			if (!strcmp(suffix, "ssm_out.weight")) {
				for (int64_t r = 0; r < t->ne[1]; r++)
					v_grouped(m, sv + (size_t)r * t->ne[0] * esz,
					          (uint8_t *)ot->data + (size_t)r * t->ne[0] * esz, (size_t)d * esz,
					          (size_t)d * esz);
			} else {
				const size_t row = t->n_dims == 1 ? esz : (size_t)t->ne[0] * esz;
				const size_t nqk =
					!strcmp(suffix, "attn_qkv.weight") || !strcmp(suffix, "ssm_conv1d.weight")
						? 2 * (size_t)nkd
						: 0;
				const size_t block = (bytes / row - nqk) / (size_t)nv * row;
				v_grouped(m, sv + nqk * row, (uint8_t *)ot->data + nqk * row, block, block);
			}
			free(alog);
		} else if (qnorm) {
			const float *sf = src;
			float *d = ot->data;
			for (int64_t j = 0; j < n; j++)
				d[j] = sf[j] - 1.0f;
		} else if (is_gemma(m) && strstr(t->name, "norm.weight")) {
			if (type != AD_TYPE_F32) {
				fprintf(stderr, "gemma norm %s is not F32\n", t->name);
				free(deq);
				return -1;
			}
			const float *s = src;
			float *d = ot->data;
			for (int64_t j = 0; j < n; j++)
				d[j] = s[j] - 1.0f;
		} else {
			memcpy(ot->data, src, (size_t)n * esz);
		}
		free(deq);
	}
	return 0;
}

static const char *
hf_arch(const struct model *m, const char **type)
{
	static const char *a[][2] = {
		[MODEL_ARCH_LLAMA] = {"LlamaForCausalLM", "llama"},
		[MODEL_ARCH_MISTRAL] = {"MistralForCausalLM", "mistral"},
		[MODEL_ARCH_SMOLLM3] = {"SmolLM3ForCausalLM", "smollm3"},
		[MODEL_ARCH_QWEN2] = {"Qwen2ForCausalLM", "qwen2"},
		[MODEL_ARCH_QWEN3] = {"Qwen3ForCausalLM", "qwen3"},
		[MODEL_ARCH_GEMMA2] = {"Gemma2ForCausalLM", "gemma2"},
		[MODEL_ARCH_GEMMA3] = {"Gemma3ForCausalLM", "gemma3_text"},
		[MODEL_ARCH_PHI3] = {"Phi3ForCausalLM", "phi3"},
		[MODEL_ARCH_QWEN2MOE] = {"Qwen2MoeForCausalLM", "qwen2_moe"},
		[MODEL_ARCH_QWEN3MOE] = {"Qwen3MoeForCausalLM", "qwen3_moe"},
		[MODEL_ARCH_HUNYUAN_DENSE] = {"HunYuanDenseV1ForCausalLM", "hunyuan_v1_dense"},
		[MODEL_ARCH_LFM2] = {"Lfm2ForCausalLM", "lfm2"},
		[MODEL_ARCH_LFM2MOE] = {"Lfm2MoeForCausalLM", "lfm2_moe"},
		[MODEL_ARCH_GEMMA4] = {"Gemma4ForCausalLM", "gemma4_text"},
		[MODEL_ARCH_QWEN35] = {"Qwen3_5ForCausalLM", "qwen3_5_text"},
	};
	*type = a[m->arch][1];
	return a[m->arch][0];
}

static cJSON *
make_config(const struct model *m)
{
	const struct model_hparams *hp = &m->hp;
	cJSON *c = cJSON_CreateObject();
	const char *type;
	cJSON *archs = cJSON_AddArrayToObject(c, "architectures");
	cJSON_AddItemToArray(archs, cJSON_CreateString(hf_arch(m, &type)));
	cJSON_AddStringToObject(c, "model_type", type);
	cJSON_AddNumberToObject(c, "vocab_size", (double)hp->n_vocab);
	cJSON_AddNumberToObject(c, "hidden_size", (double)hp->n_embd);
	cJSON_AddNumberToObject(c, "num_hidden_layers", (double)hp->n_layer);
	cJSON_AddNumberToObject(c, "num_attention_heads", (double)hp->n_head);
	cJSON_AddNumberToObject(c, "num_key_value_heads", (double)hp->n_head_kv);
	if (hp->head_dim * hp->n_head != hp->n_embd)
		cJSON_AddNumberToObject(c, "head_dim", (double)hp->head_dim);
	cJSON_AddNumberToObject(c, "intermediate_size", (double)hp->n_ff);
	cJSON_AddNumberToObject(c, "max_position_embeddings", (double)hp->n_ctx_train);
	cJSON_AddNumberToObject(c, "rms_norm_eps", (double)hp->rms_eps);
	if (m->arch == MODEL_ARCH_HUNYUAN_DENSE) {
		// the base before convert_hf_to_gguf folds the NTK alpha into it
		cJSON_AddNumberToObject(c, "rope_theta", 10000.0);
		cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
		cJSON_AddStringToObject(rs, "type", "dynamic");
		cJSON_AddNumberToObject(rs, "alpha", 1000.0);
		cJSON_AddNumberToObject(rs, "factor", 1.0);
		cJSON_AddBoolToObject(c, "use_qk_norm", 1);
	} else {
		cJSON_AddNumberToObject(c, "rope_theta", (double)hp->rope_base);
	}
	if (m->arch == MODEL_ARCH_SMOLLM3) {
		cJSON *nr = cJSON_AddArrayToObject(c, "no_rope_layers"); // 1: the layer uses RoPE
		for (int64_t i = 0; i < hp->n_layer; i++)
			cJSON_AddItemToArray(nr, cJSON_CreateNumber((i + 1) % hp->n_no_rope_step ? 1 : 0));
	}
	if (hp->rope_scaling == MODEL_ROPE_SCALING_YARN) {
		cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
		cJSON_AddStringToObject(rs, "rope_type", "yarn");
		cJSON_AddNumberToObject(rs, "factor", 1.0 / (double)hp->rope_freq_scale);
		cJSON_AddNumberToObject(rs, "original_max_position_embeddings", (double)hp->n_ctx_orig);
		cJSON_AddNumberToObject(rs, "beta_fast", 32);
		cJSON_AddNumberToObject(rs, "beta_slow", 1);
	}
	if (hp->rope_scaling == MODEL_ROPE_SCALING_LONGROPE) {
		// Phi-3 style: the original context beside max_position_embeddings,
		// the attention factor implied by their ratio
		cJSON_AddNumberToObject(c, "original_max_position_embeddings", (double)hp->n_ctx_orig);
		cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
		cJSON_AddStringToObject(rs, "type", "longrope");
		const struct model_tensor *f[2] = {&m->rope_long, &m->rope_short};
		const char *keys[2] = {"long_factor", "short_factor"};
		for (int k = 0; k < 2; k++) {
			cJSON *a = cJSON_AddArrayToObject(rs, keys[k]);
			for (int64_t i = 0; i < f[k]->ne[0]; i++)
				cJSON_AddItemToArray(a, cJSON_CreateNumber((double)((const float *)f[k]->data)[i]));
		}
	}
	cJSON_AddBoolToObject(c, "tie_word_embeddings", m->tied_output);
	cJSON_AddNumberToObject(c, "bos_token_id", 1);
	cJSON *eos = cJSON_AddArrayToObject(c, "eos_token_id");
	cJSON_AddItemToArray(eos, cJSON_CreateNumber(2));
	cJSON_AddItemToArray(eos, cJSON_CreateNumber(7));
	cJSON_AddStringToObject(c, "torch_dtype", "float32");
	if (hp->n_rot != hp->head_dim)
		cJSON_AddNumberToObject(c, "partial_rotary_factor", (double)hp->n_rot / (double)hp->head_dim);
	if (m->arch == MODEL_ARCH_PHI3 || m->arch == MODEL_ARCH_QWEN2) {
		cJSON_AddNullToObject(c, "sliding_window"); // as HF writes it when off
		if (!cJSON_GetObjectItem(c, "rope_scaling"))
			cJSON_AddNullToObject(c, "rope_scaling");
	}
	if (is_gemma(m)) {
		cJSON_AddNumberToObject(c, "sliding_window", (double)hp->sliding_window);
		cJSON_AddNumberToObject(c, "query_pre_attn_scalar", (double)hp->head_dim);
		cJSON_AddStringToObject(c, "hidden_activation", "gelu_pytorch_tanh");
	}
	if (m->arch == MODEL_ARCH_GEMMA2) {
		cJSON_AddNumberToObject(c, "attn_logit_softcapping", (double)hp->attn_softcap);
		cJSON_AddNumberToObject(c, "final_logit_softcapping", (double)hp->final_softcap);
	}
	if (m->arch == MODEL_ARCH_GEMMA3) {
		// the newer per-layer form of the pattern
		cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
		for (int64_t i = 0; i < hp->n_layer; i++)
			cJSON_AddItemToArray(lt, cJSON_CreateString((i + 1) % hp->swa_pattern ? "sliding_attention"
			                                                                      : "full_attention"));
		cJSON_AddNumberToObject(c, "rope_local_base_freq", (double)hp->rope_base_swa);
		cJSON *rs = cJSON_AddObjectToObject(c, "rope_scaling");
		cJSON_AddStringToObject(rs, "rope_type", "linear");
		cJSON_AddNumberToObject(rs, "factor", 1.0 / (double)hp->rope_freq_scale);
		cJSON_AddNullToObject(c, "final_logit_softcapping");
	}
	if (names_arch(m) == MODEL_ARCH_LFM2) {
		// LFM2's own keys: layer_types, norm_eps, conv_L_cache, tie_embedding;
		// the FFN width as the checkpoint gives it (2/3 of it, to a multiple)
		cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
		for (int64_t i = 0; i < hp->n_layer; i++)
			cJSON_AddItemToArray(lt, cJSON_CreateString(m->layers[i].conv ? "conv" : "full_attention"));
		cJSON_DeleteItemFromObject(c, "rms_norm_eps");
		cJSON_AddNumberToObject(c, "norm_eps", (double)hp->rms_eps);
		cJSON_AddNumberToObject(c, "conv_L_cache", (double)hp->n_conv);
		cJSON_DeleteItemFromObject(c, "tie_word_embeddings");
		cJSON_AddBoolToObject(c, "tie_embedding", m->tied_output);
		if (m->arch == MODEL_ARCH_LFM2) {
			cJSON_ReplaceItemInObject(c, "intermediate_size",
			                          cJSON_CreateNumber((double)(hp->n_ff * 3 / 2)));
			cJSON_AddNumberToObject(c, "block_ff_dim", (double)(hp->n_ff * 3 / 2));
			cJSON_AddBoolToObject(c, "block_auto_adjust_ff_dim", 1);
			cJSON_AddNumberToObject(c, "block_ffn_dim_multiplier", 1.0);
			cJSON_AddNumberToObject(c, "block_multiple_of", 64);
		} else {
			cJSON_AddNumberToObject(c, "num_experts", (double)hp->n_expert);
			cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)hp->n_expert_used);
			cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)hp->n_ff_exp);
			cJSON_AddNumberToObject(c, "num_dense_layers", (double)hp->n_dense_lead);
			cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
			cJSON_AddBoolToObject(c, "use_expert_bias", 1);
		}
	}
	if (m->arch == MODEL_ARCH_GEMMA4) {
		// head_dim is the sliding layers', global_head_dim the full ones'; the
		// base FFN width doubled on the shared layers; RoPE per layer kind
		cJSON_ReplaceItemInObject(c, "head_dim", cJSON_CreateNumber((double)hp->head_dim_swa));
		cJSON_AddNumberToObject(c, "global_head_dim", (double)hp->head_dim);
		cJSON_ReplaceItemInObject(c, "intermediate_size", cJSON_CreateNumber((double)m->layers[0].n_ff));
		cJSON_AddBoolToObject(c, "use_double_wide_mlp",
		                      m->layers[hp->n_layer - 1].n_ff == 2 * m->layers[0].n_ff);
		cJSON_AddNumberToObject(c, "num_kv_shared_layers", (double)hp->n_kv_shared);
		cJSON_AddNumberToObject(c, "hidden_size_per_layer_input", (double)hp->n_embd_pl);
		cJSON_AddNumberToObject(c, "sliding_window", (double)hp->sliding_window);
		cJSON_AddNumberToObject(c, "final_logit_softcapping", (double)hp->final_softcap);
		cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
		for (int64_t i = 0; i < hp->n_layer; i++)
			cJSON_AddItemToArray(
				lt, cJSON_CreateString(m->layers[i].sliding ? "sliding_attention" : "full_attention"));
		int rot = 0; // rope_freqs: 1 for the rotated pairs, 1e30 for the rest
		for (int64_t i = 0; i < m->rope_freqs.ne[0]; i++)
			rot += ((const float *)m->rope_freqs.data)[i] == 1.0f;
		cJSON_DeleteItemFromObject(c, "rope_theta");
		cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
		cJSON *full = cJSON_AddObjectToObject(rp, "full_attention");
		cJSON_AddStringToObject(full, "rope_type", "proportional");
		cJSON_AddNumberToObject(full, "rope_theta", (double)hp->rope_base);
		cJSON_AddNumberToObject(full, "partial_rotary_factor", 2.0 * rot / (double)hp->head_dim);
		cJSON *swa = cJSON_AddObjectToObject(rp, "sliding_attention");
		cJSON_AddStringToObject(swa, "rope_type", "default");
		cJSON_AddNumberToObject(swa, "rope_theta", (double)hp->rope_base_swa);
	}
	if (m->arch == MODEL_ARCH_QWEN35) {
		cJSON_AddNumberToObject(c, "linear_conv_kernel_dim", (double)hp->n_conv);
		cJSON_AddNumberToObject(c, "linear_key_head_dim", (double)hp->ssm_d_state);
		cJSON_AddNumberToObject(c, "linear_value_head_dim", (double)hp->ssm_d_state);
		cJSON_AddNumberToObject(c, "linear_num_key_heads", (double)hp->ssm_n_group);
		cJSON_AddNumberToObject(c, "linear_num_value_heads", (double)hp->ssm_dt_rank);
		cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
		for (int64_t i = 0; i < hp->n_layer; i++)
			cJSON_AddItemToArray(
				lt, cJSON_CreateString(m->layers[i].recur ? "linear_attention" : "full_attention"));
		// the newer form: theta and the partial factor in rope_parameters
		cJSON_DeleteItemFromObject(c, "rope_theta");
		cJSON_DeleteItemFromObject(c, "partial_rotary_factor");
		cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
		cJSON_AddStringToObject(rp, "rope_type", "default");
		cJSON_AddNumberToObject(rp, "rope_theta", (double)hp->rope_base);
		cJSON_AddNumberToObject(rp, "partial_rotary_factor", (double)hp->n_rot / (double)hp->head_dim);
		cJSON_AddItemToObject(rp, "mrope_section", cJSON_Parse("[3, 3, 2]"));
	}
	if (m->arch == MODEL_ARCH_QWEN2MOE || m->arch == MODEL_ARCH_QWEN3MOE) {
		cJSON_AddNumberToObject(c, "num_experts", (double)hp->n_expert);
		cJSON_AddNumberToObject(c, "num_experts_per_tok", (double)hp->n_expert_used);
		cJSON_AddNumberToObject(c, "moe_intermediate_size", (double)hp->n_ff_exp);
		if (m->arch == MODEL_ARCH_QWEN2MOE)
			cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", (double)hp->n_ff_shexp);
		cJSON_AddBoolToObject(c, "norm_topk_prob", hp->expert_weights_norm);
		cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
		cJSON_AddArrayToObject(c, "mlp_only_layers");
		cJSON_AddBoolToObject(c, "use_sliding_window", 0);
		cJSON_AddNumberToObject(c, "sliding_window", 4096);
	}
	return c;
}

static int
write_json(const char *path, const cJSON *j)
{
	char *s = cJSON_Print(j);
	FILE *fp = fopen(path, "wb");
	if (!fp || !s)
		return -1;
	fputs(s, fp);
	free(s);
	return fclose(fp);
}

// the directory: config.json and n_shards files; an index when with_index
static int
write_hf(const char *dir, const cJSON *config, const struct hf_out *o, int n_shards, int with_index)
{
	char path[600], err[AD_ERRLEN];
	mkdir(dir, 0755);
	snprintf(path, sizeof path, "%s/config.json", dir);
	if (write_json(path, config))
		return -1;
	const char **tnames = calloc((size_t)o->n, sizeof *tnames);
	const char **files = calloc((size_t)o->n, sizeof *files);
	static char fnames[8][64];
	uint64_t total = 0;
	int per = (o->n + n_shards - 1) / n_shards;
	for (int s = 0; s < n_shards; s++) {
		if (n_shards == 1)
			snprintf(fnames[s], sizeof fnames[s], "model.safetensors");
		else
			snprintf(fnames[s], sizeof fnames[s], "model-%05d-of-%05d.safetensors", s + 1, n_shards);
		int lo = s * per, hi = lo + per < o->n ? lo + per : o->n;
		struct st_wtensor *w = calloc((size_t)(hi - lo) + 1, sizeof *w);
		for (int i = lo; i < hi; i++) {
			const struct out_tensor *t = &o->t[i];
			w[i - lo] = (struct st_wtensor){
				t->name, t->type, t->n_dims, {t->shape[0], t->shape[1], t->shape[2]}, t->data};
			tnames[i] = t->name;
			files[i] = fnames[s];
			total += t->nbytes;
		}
		snprintf(path, sizeof path, "%s/%s", dir, fnames[s]);
		int rc = st_write(path, w, hi - lo, err);
		free(w);
		if (rc) {
			fprintf(stderr, "%s\n", err);
			return -1;
		}
	}
	int rc = 0;
	if (with_index) {
		snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
		rc = st_write_index(path, tnames, files, o->n, total, err);
	}
	free(tnames);
	free(files);
	return rc;
}

static void
free_out(struct hf_out *o)
{
	for (int i = 0; i < o->n; i++)
		free(o->t[i].data);
	free(o->t);
	memset(o, 0, sizeof *o);
}

// --- comparisons -------------------------------------------------------------

static float *
deq_all(const struct model_tensor *t)
{
	int64_t n = model_tensor_nelem(t);
	float *f = malloc((size_t)n * 4 + 4);
	char err[AD_ERRLEN];
	if (ad_dequant(t->type, t->data, f, n, err)) {
		fprintf(stderr, "%s\n", err);
		free(f);
		return NULL;
	}
	return f;
}

static void
compare_hparams(const char *name, const struct model *g, const struct model *h)
{
	const struct model_hparams *a = &g->hp, *b = &h->hp;
#define SAME(f) CHECK(a->f == b->f, "%s: hp." #f " %g vs %g", name, (double)a->f, (double)b->f)
	SAME(n_vocab);
	SAME(n_embd);
	SAME(n_layer);
	SAME(n_head);
	SAME(n_head_kv);
	SAME(head_dim);
	SAME(head_dim_v);
	SAME(n_rot);
	SAME(rms_eps);
	SAME(rope_base);
	SAME(rope_freq_scale);
	SAME(rope_base_swa);
	SAME(sliding_window);
	SAME(swa_pattern);
	SAME(attn_softcap);
	SAME(final_softcap);
	SAME(q_scale);
	SAME(n_expert);
	SAME(n_expert_used);
	SAME(n_ff_exp);
	SAME(n_ff_shexp);
	SAME(expert_weights_norm);
	SAME(n_no_rope_step);
	SAME(rope_scaling);
	SAME(n_ctx_orig);
	SAME(yarn_ext_factor);
	SAME(yarn_beta_fast);
	SAME(yarn_beta_slow);
	SAME(rope_attn_factor);
	SAME(qk_norm_post_rope);
	SAME(bos_id);
	SAME(n_conv);
	SAME(expert_gating);
	SAME(n_dense_lead);
	SAME(head_dim_swa);
	SAME(head_dim_v_swa);
	SAME(n_rot_swa);
	SAME(n_kv_shared);
	SAME(n_embd_pl);
	SAME(ssm_d_state);
	SAME(ssm_n_group);
	SAME(ssm_dt_rank);
	SAME(ssm_d_inner);
	SAME(full_attn_interval);
	if (g->arch != MODEL_ARCH_QWEN2MOE && g->arch != MODEL_ARCH_QWEN3MOE)
		SAME(n_ff);
#undef SAME
	CHECK(b->eos_id == 2, "%s: eos %lld", name, (long long)b->eos_id);
	CHECK(g->arch == h->arch && g->tied_output == h->tied_output, "%s", name);
	CHECK(h->hp.rope == MODEL_ROPE_NEOX, "%s: HF RoPE must be neox", name);
	CHECK(!h->is_gguf && h->file_bytes > 0);
	for (int64_t il = 0; il < a->n_layer; il++) {
		const struct model_layer *x = &g->layers[il], *y = &h->layers[il];
		CHECK(x->sliding == y->sliding && x->use_rope == y->use_rope && x->rope_base == y->rope_base &&
		              x->rope_freq_scale == y->rope_freq_scale,
		      "%s: layer %lld attention kind", name, (long long)il);
		CHECK(x->conv == y->conv && x->recur == y->recur && x->attn_gate == y->attn_gate &&
		              x->kv_src == y->kv_src && x->head_dim == y->head_dim && x->n_rot == y->n_rot &&
		              x->n_ff == y->n_ff && x->rope_factors == y->rope_factors,
		      "%s: layer %lld kind or shape", name, (long long)il);
	}
}

// every weight of the GGUF, in the GGUF meaning, against the HF load
static void
compare_weights(const char *name, const struct model *g, const struct model *h)
{
	CHECK(g->n_tensors == h->n_tensors, "%s: %lld vs %lld tensors", name, (long long)g->n_tensors,
	      (long long)h->n_tensors);
	int bad = 0;
	for (int64_t i = 0; i < g->n_tensors; i++) {
		const struct model_tensor *a = &g->tensors[i];
		const struct model_tensor *b = model_find_tensor(h, a->name);
		if (!b) {
			CHECK(b != NULL, "%s: %s missing from the HF load", name, a->name);
			continue;
		}
		CHECK(a->n_dims == b->n_dims && !memcmp(a->ne, b->ne, sizeof a->ne), "%s: %s shape differs", name,
		      a->name);
		float *x = deq_all(a), *y = deq_all(b);
		REQUIRE(x && y);
		int64_t n = model_tensor_nelem(a);
		int il, k = 0;
		const char *suffix = sscanf(a->name, "blk.%d.%n", &il, &k) == 1 && k ? a->name + k : "";
		int qk = !strcmp(suffix, "attn_q.weight") || !strcmp(suffix, "attn_k.weight");
		if ((g->arch == MODEL_ARCH_LLAMA || g->arch == MODEL_ARCH_SMOLLM3) && qk) {
			// HF keeps llama's q/k unpermuted; the GGUF rows are their permutation
			float *u = malloc((size_t)n * 4);
			int64_t heads = !strcmp(suffix, "attn_q.weight") ? g->hp.n_head : g->hp.n_head_kv;
			unpermute_rows((const uint8_t *)x, (uint8_t *)u, a->ne[1], heads, (size_t)a->ne[0] * 4);
			free(x);
			x = u;
		}
		if ((is_gemma(g) || (g->arch == MODEL_ARCH_QWEN35 && !strstr(a->name, "ssm_norm"))) &&
		    strstr(a->name, "norm.weight"))
			for (int64_t j = 0; j < n; j++)
				x[j] = (x[j] - 1.0f) + 1.0f; // what the round trip can give back
		if (g->arch == MODEL_ARCH_QWEN35 && !strcmp(suffix, "ssm_a"))
			for (int64_t j = 0; j < n; j++)
				x[j] = -expf(logf(-x[j])); // A_log and back
		int diff = 0;
		for (int64_t j = 0; j < n; j++)
			diff += !(x[j] == y[j]);
		if (diff) {
			bad++;
			fprintf(stderr, "  %s: %s: %d of %lld values differ\n", name, a->name, diff, (long long)n);
		}
		free(x);
		free(y);
	}
	CHECK(bad == 0, "%s: %d tensors differ", name, bad);
}

static const char *fixture_dir = "models"; // of the model being compared

static int32_t *
read_ids(const char *model, int *n)
{
	char path[512];
	size_t len;
	snprintf(path, sizeof path, "%s/%s/%s.json", T_DATA, fixture_dir, model);
	char *s = t_read_file(path, &len);
	cJSON *j = s ? cJSON_Parse(s) : NULL;
	free(s);
	if (!j)
		return NULL;
	const cJSON *p = cJSON_GetObjectItem(j, "prompt_ids"), *g = cJSON_GetObjectItem(j, "greedy_ids");
	int np = cJSON_GetArraySize(p), ng = cJSON_GetArraySize(g);
	int32_t *ids = malloc((size_t)(np + ng) * sizeof *ids);
	for (int i = 0; i < np; i++)
		ids[i] = (int32_t)cJSON_GetArrayItem(p, i)->valuedouble;
	for (int i = 0; i < ng; i++)
		ids[np + i] = (int32_t)cJSON_GetArrayItem(g, i)->valuedouble;
	cJSON_Delete(j);
	*n = np + ng;
	return ids;
}

static void
compare_logits(const char *name, const struct model *g, const struct model *h)
{
	int n;
	int32_t *ids = read_ids(name, &n);
	REQUIRE(ids, "%s: no token ids", name);
	char err[AD_ERRLEN];
	struct ref_engine *eg = ref_new(g, n, err);
	REQUIRE(eg, "%s: ref_new(gguf): %s", name, err);
	struct ref_engine *eh = ref_new(h, n, err);
	if (!eh)
		ref_free(eg);
	REQUIRE(eh, "%s: ref_new(hf): %s", name, err);
	int nv = ref_n_vocab(eg);
	float *lg = malloc((size_t)n * (size_t)nv * 4), *lh = malloc((size_t)n * (size_t)nv * 4);
	CHECK(ref_eval(eg, ids, n, lg) == 0);
	CHECK(ref_eval(eh, ids, n, lh) == 0);
	double md = 0;
	int argmax_same = 1;
	for (int r = 0; r < n; r++) {
		for (int v = 0; v < nv; v++)
			md = fmax(md, fabs((double)lg[r * nv + v] - (double)lh[r * nv + v]));
		argmax_same &= ref_argmax(lg + r * nv, nv) == ref_argmax(lh + r * nv, nv);
	}
	CHECK(md <= 1e-4, "%s: logits differ by %g", name, md);
	CHECK(argmax_same, "%s: argmax differs", name);
	fprintf(stderr, "  %-16s %2d positions, max |logit diff| GGUF vs HF %.3g\n", name, n, md);
	free(lg);
	free(lh);
	free(ids);
	ref_free(eg);
	ref_free(eh);
}

// --- the round trips ---------------------------------------------------------

static const struct {
	const char *model;
	int shards, index;
	const char *dir;
} cases[] = {
	{"llama", 2, 1, "models"},          {"qwen2", 1, 0, "models"},          {"qwen3", 1, 1, "models"},
	{"gemma2", 1, 0, "models"},         {"gemma3", 3, 1, "models"},         {"phi3", 1, 0, "models"},
	{"qwen2moe", 2, 0, "models"},       {"llama256_bf16", 2, 1, "models"},  {"llama256_f16", 1, 0, "models"},
	{"llama256_q4_k", 1, 0, "models"},  {"qwen3moe", 2, 1, "models2"},      {"llama_yarn", 1, 0, "models2"},
	{"phi3_longrope", 1, 0, "models2"}, {"hunyuan_dense", 1, 0, "models2"}, {"smollm3", 1, 0, "models2"},
	{"lfm2", 1, 0, "models2"},          {"lfm2moe", 2, 1, "models2"},       {"gemma4", 2, 1, "models2"},
	{"qwen35", 1, 0, "models2"},
};

static void
test_round_trips(void)
{
	char path[512], dir[512], err[AD_ERRLEN];
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		const char *name = cases[k].model;
		struct model g, h;
		fixture_dir = cases[k].dir;
		snprintf(path, sizeof path, "%s/%s/%s.gguf", T_DATA, fixture_dir, name);
		if (model_load_gguf(&g, path, err)) {
			CHECK(0, "%s: %s", name, err);
			continue;
		}
		struct hf_out o = {0};
		cJSON *cfg = make_config(&g);
		snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
		int ok = to_hf(&g, &o, NULL) == 0 && write_hf(dir, cfg, &o, cases[k].shards, cases[k].index) == 0;
		CHECK(ok, "%s: writing the HF directory", name);
		cJSON_Delete(cfg);
		free_out(&o);
		if (ok && model_load_hf(&h, dir, err) == 0) {
			CHECK(!strcmp(h.name, name), "%s: name %s", name, h.name);
			compare_hparams(name, &g, &h);
			compare_weights(name, &g, &h);
			compare_logits(name, &g, &h);
			model_free(&h);
		} else if (ok) {
			CHECK(0, "%s: model_load_hf: %s", name, err);
		}
		model_free(&g);
	}
	fixture_dir = "models";
}

// --- error paths ---------------------------------------------------------------

// the llama fixture as an HF directory, with a change: a config key set to
// raw JSON, a tensor left out, or an extra tensor
static int
load_variant(const char *tag, const char *key, const char *json, const char *skip, const struct st_wtensor *extra,
             char *err)
{
	char path[1024], dir[512];
	struct model g, h;
	snprintf(path, sizeof path, "%s/models/llama.gguf", T_DATA);
	if (model_load_gguf(&g, path, err))
		return -2;
	struct hf_out o = {0};
	cJSON *cfg = make_config(&g);
	if (key) {
		cJSON_DeleteItemFromObject(cfg, key);
		if (json)
			cJSON_AddItemToObject(cfg, key, cJSON_Parse(json));
	}
	snprintf(dir, sizeof dir, "%s/variant-%s", t_tmpdir(), tag);
	int rc = to_hf(&g, &o, skip) || write_hf(dir, cfg, &o, 1, 0);
	cJSON_Delete(cfg);
	free_out(&o);
	model_free(&g);
	if (rc)
		return -2;
	if (extra) {
		snprintf(path, sizeof path, "%s/zz-extra.safetensors", dir);
		if (st_write(path, extra, 1, err))
			return -2;
	}
	rc = model_load_hf(&h, dir, err);
	if (rc == 0)
		model_free(&h);
	return rc;
}

static void
expect_fail(const char *tag, const char *key, const char *json, const char *skip, const struct st_wtensor *extra,
            const char *want)
{
	char err[AD_ERRLEN] = "";
	int rc = load_variant(tag, key, json, skip, extra, err);
	CHECK(rc == -1, "%s: rc %d (%s)", tag, rc, err);
	CHECK(strstr(err, want) != NULL, "%s: \"%s\" lacks \"%s\"", tag, err, want);
}

static void
test_errors(void)
{
	char err[AD_ERRLEN] = "", dir[512];
	struct model m;
	snprintf(dir, sizeof dir, "%s/nothing", t_tmpdir());
	CHECK(model_load_hf(&m, dir, err) == -1 && strstr(err, "config.json"), "%s", err);
	CHECK(m.n_tensors == 0 && m.src == NULL);
	// through model_load: a path that is not there is named as missing
	CHECK(model_load(&m, dir, err) == -1 && strstr(err, "No such file") && strstr(err, "nothing"), "%s", err);

	mkdir(dir, 0755);
	// an empty directory is no Hugging Face model
	CHECK(model_load(&m, dir, err) == -1 && strstr(err, "no config.json"), "%s", err);
	char path[600];
	snprintf(path, sizeof path, "%s/config.json", dir);
	FILE *fp = fopen(path, "wb");
	fputs("{\"architectures\": [\"LlamaForCausalLM\"", fp);
	fclose(fp);
	CHECK(model_load_hf(&m, dir, err) == -1 && strstr(err, "not a JSON object"), "%s", err);

	char ok_err[AD_ERRLEN] = "";
	CHECK(load_variant("ok", NULL, NULL, NULL, NULL, ok_err) == 0, "%s", ok_err);
	expect_fail("arch", "architectures", "[\"FooForCausalLM\"]", NULL, NULL, "FooForCausalLM");
	expect_fail("hidden", "hidden_size", "\"128\"", NULL, NULL, "hidden_size");
	expect_fail("nohidden", "hidden_size", NULL, NULL, NULL, "hidden_size");
	expect_fail("shape", "intermediate_size", "300", NULL, NULL, "ffn_gate.weight");
	expect_fail("rope", "rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 4}", NULL, NULL, "dynamic");
	expect_fail("yarn-mscale", "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4, \"mscale\": 1}", NULL,
	            NULL, "mscale");
	expect_fail("yarn-factor", "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 0.5}", NULL, NULL,
	            "factor of at least 1");
	expect_fail("longrope-short", "rope_scaling",
	            "{\"type\": \"longrope\", \"long_factor\": [1, 2], \"short_factor\": [1, 2]}", NULL, NULL,
	            "rope_scaling.long_factor must be a list of 8");
	expect_fail("missing", NULL, NULL, "blk.1.ffn_down.weight", NULL, "blk.1.ffn_down.weight");
	int64_t ids[4] = {0};
	struct st_wtensor bad = {"model.layers.0.input_layernorm.weight", AD_TYPE_F32, 1, {4}, ids};
	// a name twice across shards
	expect_fail("dup", NULL, NULL, NULL, &bad, "input_layernorm.weight");

	// a weight stored in a dtype the loader cannot use is named with its dtype
	CHECK(load_variant("i64", NULL, NULL, "blk.0.attn_norm.weight", NULL, err) == -1 &&
	              strstr(err, "blk.0.attn_norm.weight"),
	      "%s", err);
	char hdr[] = "{\"model.layers.0.input_layernorm.weight\":{\"dtype\":\"I64\",\"shape\":[128],"
		     "\"data_offsets\":[0,1024]}}";
	snprintf(path, sizeof path, "%s/variant-i64/zz-i64.safetensors", t_tmpdir());
	fp = fopen(path, "wb");
	REQUIRE(fp);
	uint64_t hl = strlen(hdr);
	static uint8_t zeros[1024];
	fwrite(&hl, 8, 1, fp); // little-endian host
	fputs(hdr, fp);
	fwrite(zeros, 1, sizeof zeros, fp);
	fclose(fp);
	snprintf(path, sizeof path, "%s/variant-i64", t_tmpdir());
	CHECK(model_load_hf(&m, path, err) == -1 && strstr(err, "I64") && strstr(err, "input_layernorm"), "%s", err);

	// model_type alone is enough; unknown tensors are ignored
	static float junk[3] = {1, 2, 3};
	struct st_wtensor extra = {"model.rotary_emb.inv_freq", AD_TYPE_F32, 1, {3}, junk};
	CHECK(load_variant("type-only", "architectures", NULL, NULL, &extra, err) == 0, "%s", err);

	// expert tensors in a dense model are refused; a negative index is no expert
	struct st_wtensor exp = {"model.layers.0.mlp.experts.0.up_proj.weight", AD_TYPE_F32, 1, {3}, junk};
	expect_fail("dense-expert", NULL, NULL, NULL, &exp, "experts.0.up_proj");
	exp.name = "model.layers.0.mlp.experts.-1.up_proj.weight";
	CHECK(load_variant("neg-expert", NULL, NULL, NULL, &exp, err) == 0, "%s", err);

	// llama3 RoPE scaling becomes rope_freqs
	char e2[AD_ERRLEN];
	CHECK(load_variant("llama3", "rope_scaling",
	                   "{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
	                   " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16}",
	                   NULL, NULL, e2) == 0,
	      "%s", e2);
}

static void
test_llama3_freqs(void)
{
	// a separate load to look at the tensor
	char path[512], dir[512], err[AD_ERRLEN];
	struct model g, h;
	snprintf(path, sizeof path, "%s/models/llama.gguf", T_DATA);
	REQUIRE(model_load_gguf(&g, path, err) == 0, "%s", err);
	struct hf_out o = {0};
	cJSON *cfg = make_config(&g);
	cJSON_AddItemToObject(cfg, "rope_scaling",
	                      cJSON_Parse("{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
	                                  " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 64}"));
	snprintf(dir, sizeof dir, "%s/llama3", t_tmpdir());
	REQUIRE(to_hf(&g, &o, NULL) == 0 && write_hf(dir, cfg, &o, 1, 0) == 0);
	cJSON_Delete(cfg);
	free_out(&o);
	REQUIRE(model_load_hf(&h, dir, err) == 0, "%s", err);
	// model_load takes the directory, or its config.json for it
	struct model viajson;
	char cj[600];
	snprintf(cj, sizeof cj, "%s/config.json", dir);
	CHECK(model_load(&viajson, cj, err) == 0 && !viajson.is_gguf && !strcmp(viajson.path, dir) &&
	              viajson.hp.n_layer == h.hp.n_layer,
	      "%s", err);
	model_free(&viajson);
	REQUIRE(h.rope_freqs.name != NULL);
	CHECK(h.rope_freqs.ne[0] == h.hp.n_rot / 2);
	const float *f = h.rope_freqs.data;
	// head_dim 16, base 1e4: wavelengths 2*pi*1e4^(i/8); with an original
	// context of 64: i=0 (6.3) is high-frequency, i=7 (~19000) low
	CHECK(f[0] == 1.0f, "%g", f[0]);
	CHECK(f[7] == 8.0f, "%g", f[7]);
	for (int i = 1; i < 7; i++)
		CHECK(f[i] >= 1.0f && f[i] <= 8.0f && f[i] >= f[i - 1], "%d %g", i, f[i]);
	model_free(&h);
	model_free(&g);
}

// YaRN from config.json with an attention_factor: it replaces ggml's own
// 1 + 0.1 ln(factor) (here doubled, so the logits move), and a yarn without
// a factor takes max_position_embeddings / original_max_position_embeddings
static void
test_yarn_config(void)
{
	char path[512], dir[512], err[AD_ERRLEN];
	struct model g, h;
	snprintf(path, sizeof path, "%s/models2/llama_yarn.gguf", T_DATA);
	REQUIRE(model_load_gguf(&g, path, err) == 0, "%s", err);
	struct hf_out o = {0};
	REQUIRE(to_hf(&g, &o, NULL) == 0);
	for (int k = 0; k < 2; k++) {
		cJSON *cfg = make_config(&g);
		cJSON *rs = cJSON_GetObjectItem(cfg, "rope_scaling");
		if (k == 0) {
			cJSON_AddNumberToObject(rs, "attention_factor", 2 * (1 + 0.1 * log(4.0)));
		} else {
			cJSON_DeleteItemFromObject(rs, "factor");
			cJSON_ReplaceItemInObject(cfg, "max_position_embeddings", cJSON_CreateNumber(256));
		}
		snprintf(dir, sizeof dir, "%s/yarn-%d", t_tmpdir(), k);
		REQUIRE(write_hf(dir, cfg, &o, 1, 0) == 0);
		cJSON_Delete(cfg);
		REQUIRE(model_load_hf(&h, dir, err) == 0, "%s", err);
		CHECK(h.hp.rope_scaling == MODEL_ROPE_SCALING_YARN && h.hp.rope_freq_scale == 0.25f &&
		      h.hp.n_ctx_orig == 64);
		if (k == 0)
			CHECK(fabsf(h.hp.rope_attn_factor - 2.0f) < 1e-6f, "%g", (double)h.hp.rope_attn_factor);
		else
			CHECK(h.hp.rope_attn_factor == 1.0f);
		float a[32], b[32];
		model_rope_angles(&g.hp, g.hp.rope_base, g.hp.rope_freq_scale, NULL, 7, a);
		model_rope_angles(&h.hp, h.hp.rope_base, h.hp.rope_freq_scale, NULL, 7, b);
		for (int i = 0; i < 32; i++)
			CHECK(fabsf(b[i] - (k == 0 ? 2 : 1) * a[i]) < 1e-6f, "%d: %g vs %g", i, (double)b[i],
			      (double)a[i]);
		model_free(&h);
	}
	free_out(&o);
	model_free(&g);

	// qwen2 in Qwen2.5's form: "type" rather than "rope_type"
	snprintf(path, sizeof path, "%s/models/qwen2.gguf", T_DATA);
	REQUIRE(model_load_gguf(&g, path, err) == 0, "%s", err);
	REQUIRE(to_hf(&g, &o, NULL) == 0);
	cJSON *cfg = make_config(&g);
	cJSON_ReplaceItemInObject(
		cfg, "rope_scaling",
		cJSON_Parse("{\"type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 16}"));
	snprintf(dir, sizeof dir, "%s/qwen2-yarn", t_tmpdir());
	REQUIRE(write_hf(dir, cfg, &o, 1, 0) == 0);
	cJSON_Delete(cfg);
	free_out(&o);
	REQUIRE(model_load_hf(&h, dir, err) == 0, "%s", err);
	CHECK(h.arch == MODEL_ARCH_QWEN2 && h.hp.rope_scaling == MODEL_ROPE_SCALING_YARN && h.hp.n_ctx_orig == 16 &&
	      h.hp.rope_freq_scale == 0.25f && h.hp.yarn_ext_factor == 1.0f);
	// against the GGUF: the same weights, other logits from position 1 on
	int n;
	int32_t *ids = read_ids("qwen2", &n);
	struct ref_engine *eg = ref_new(&g, n, err), *eh = ref_new(&h, n, err);
	REQUIRE(ids && eg && eh, "%s", err);
	const int nv = ref_n_vocab(eg);
	float *lg = malloc(sizeof(float) * (size_t)nv * (size_t)n),
	      *lh = malloc(sizeof(float) * (size_t)nv * (size_t)n);
	CHECK(ref_eval(eg, ids, n, lg) == 0 && ref_eval(eh, ids, n, lh) == 0);
	double d0 = 0, d = 0;
	for (int i = 0; i < nv * n; i++) {
		double x = fabs((double)lg[i] - lh[i]);
		if (i < nv)
			d0 = fmax(d0, x);
		else
			d = fmax(d, x);
	}
	// position 0 has no rotation but YaRN's cos scale 1 + 0.1 ln 4 on k·q
	// of the token with itself only: softmax of one score is 1 anyway
	CHECK(d0 < 1e-4 && d > 0.1, "position 0: %g, later: %g", d0, d);
	free(lg);
	free(lh);
	free(ids);
	ref_free(eg);
	ref_free(eh);
	model_free(&h);
	model_free(&g);
}

// mistral and smollm3 have no fixture: the llama fixture under their names,
// with a window and a no-RoPE period that do not bite in 24 positions and 3
// layers, must give llama's logits
static void
test_llama_family(void)
{
	static const char *archs[][3] = {
		{"MistralForCausalLM", "mistral", "{\"sliding_window\": 4096}"},
		{"SmolLM3ForCausalLM", "smollm3", "{\"no_rope_layers\": [1, 1, 1], \"no_rope_layer_interval\": 4}"},
	};
	char path[512], dir[512], err[AD_ERRLEN];
	struct model g, h;
	snprintf(path, sizeof path, "%s/models/llama.gguf", T_DATA);
	REQUIRE(model_load_gguf(&g, path, err) == 0, "%s", err);
	struct hf_out o = {0};
	REQUIRE(to_hf(&g, &o, NULL) == 0);
	for (int k = 0; k < 2; k++) {
		cJSON *cfg = make_config(&g);
		cJSON_ReplaceItemInObject(cfg, "architectures", cJSON_Parse("[]"));
		cJSON_AddItemToArray(cJSON_GetObjectItem(cfg, "architectures"), cJSON_CreateString(archs[k][0]));
		cJSON_ReplaceItemInObject(cfg, "model_type", cJSON_CreateString(archs[k][1]));
		cJSON *extra = cJSON_Parse(archs[k][2]), *e;
		cJSON_ArrayForEach(e, extra) cJSON_AddItemToObject(cfg, e->string, cJSON_Duplicate(e, 1));
		cJSON_Delete(extra);
		snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), archs[k][1]);
		REQUIRE(write_hf(dir, cfg, &o, 1, 0) == 0);
		cJSON_Delete(cfg);
		// through model_load: a path not ending in .gguf is an HF directory
		REQUIRE(model_load(&h, dir, err) == 0, "%s", err);
		CHECK(!strcmp(h.arch_name, archs[k][1]), "%s", h.arch_name);
		if (k == 0)
			CHECK(h.hp.sliding_window == 4096 && h.layers[1].sliding);
		else
			CHECK(h.hp.n_no_rope_step == 4 && h.layers[2].use_rope);
		compare_weights("llama", &g, &h);
		compare_logits("llama", &g, &h);
		model_free(&h);
	}
	// a no-RoPE pattern that is not periodic is refused
	cJSON *cfg = make_config(&g);
	cJSON_ReplaceItemInObject(cfg, "architectures", cJSON_Parse("[\"SmolLM3ForCausalLM\"]"));
	cJSON_AddItemToObject(cfg, "no_rope_layers", cJSON_Parse("[0, 1, 0]"));
	snprintf(dir, sizeof dir, "%s/smollm3-bad", t_tmpdir());
	REQUIRE(write_hf(dir, cfg, &o, 1, 0) == 0);
	cJSON_Delete(cfg);
	CHECK(model_load(&h, dir, err) == -1 && strstr(err, "no_rope_layers"), "%s", err);
	free_out(&o);
	model_free(&g);
}

// a multimodal checkpoint as it is stored: the text model's keys in
// text_config, its tensors under model.language_model., a vision tower
// beside (and for qwen35 its multi-token-prediction block, unused)
static void
check_multimodal(const char *fdir, const char *name, const char *arch, const char *type)
{
	char path[512], dir[512], err[AD_ERRLEN];
	struct model g, h;
	fixture_dir = fdir;
	snprintf(path, sizeof path, "%s/%s/%s.gguf", T_DATA, fdir, name);
	REQUIRE(model_load_gguf(&g, path, err) == 0, "%s", err);
	struct hf_out o = {0};
	REQUIRE(to_hf(&g, &o, NULL) == 0);
	for (int i = 0; i < o.n; i++) {
		char tmp[160];
		if (!strncmp(o.t[i].name, "model.", 6)) {
			snprintf(tmp, sizeof tmp, "model.language_model.%s", o.t[i].name + 6);
			memcpy(o.t[i].name, tmp, sizeof tmp);
		}
	}
	int64_t ne[2] = {4, 2};
	struct out_tensor *v = push(&o, "model.vision_tower.patch_embedding.weight", AD_TYPE_F32, 2, ne, 32);
	memset(v->data, 0, 32);
	v = push(&o, "mtp.fc.weight", AD_TYPE_F32, 2, ne, 32);
	memset(v->data, 0, 32);
	cJSON *text = make_config(&g);
	cJSON_DeleteItemFromObject(text, "architectures");
	cJSON *cfg = cJSON_CreateObject();
	cJSON *archs = cJSON_AddArrayToObject(cfg, "architectures");
	cJSON_AddItemToArray(archs, cJSON_CreateString(arch));
	cJSON_AddStringToObject(cfg, "model_type", type);
	cJSON_AddItemToObject(cfg, "text_config", text);
	cJSON_AddItemToObject(cfg, "vision_config", cJSON_CreateObject());
	snprintf(dir, sizeof dir, "%s/%s-mm", t_tmpdir(), name);
	REQUIRE(write_hf(dir, cfg, &o, 2, 1) == 0);
	cJSON_Delete(cfg);
	free_out(&o);
	REQUIRE(model_load_hf(&h, dir, err) == 0, "%s", err);
	compare_hparams(name, &g, &h);
	compare_weights(name, &g, &h);
	compare_logits(name, &g, &h);
	model_free(&h);
	model_free(&g);
	fixture_dir = "models";
}

static void
test_multimodal(void)
{
	check_multimodal("models", "gemma3", "Gemma3ForConditionalGeneration", "gemma3");
	check_multimodal("models2", "qwen35", "Qwen3_5ForConditionalGeneration", "qwen3_5");
	check_multimodal("models2", "gemma4", "Gemma4ForConditionalGeneration", "gemma4");
}

// the new architectures' config errors: each named
static void
test_arch_errors(void)
{
	static const struct {
		const char *model, *key, *json, *want;
	} bad[] = {
		{"lfm2", "layer_types", "[\"conv\", \"conv\"]", "layer_types"},
		{"lfm2", "layer_types", "[\"conv\", \"conv\", \"mamba\", \"conv\", \"full_attention\"]", "mamba"},
		{"gemma4", "attention_k_eq_v", "true", "attention_k_eq_v"},
		{"gemma4", "num_global_key_value_heads", "4", "KV heads"},
		{"gemma4", "rope_parameters", "{}", "rope_parameters"},
		{"qwen35", "linear_value_head_dim", "64", "linear_value_head_dim"},
		{"qwen35", "linear_num_value_heads", "3", "linear heads (3 v, 2 q/k)"},
	};
	for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
		char path[512], dir[512], err[AD_ERRLEN] = "";
		struct model g, h;
		snprintf(path, sizeof path, "%s/models2/%s.gguf", T_DATA, bad[k].model);
		REQUIRE(model_load_gguf(&g, path, err) == 0, "%s", err);
		struct hf_out o = {0};
		REQUIRE(to_hf(&g, &o, NULL) == 0);
		cJSON *cfg = make_config(&g);
		cJSON_DeleteItemFromObject(cfg, bad[k].key);
		cJSON_AddItemToObject(cfg, bad[k].key, cJSON_Parse(bad[k].json));
		snprintf(dir, sizeof dir, "%s/bad-%s-%zu", t_tmpdir(), bad[k].model, k);
		REQUIRE(write_hf(dir, cfg, &o, 1, 0) == 0);
		cJSON_Delete(cfg);
		free_out(&o);
		model_free(&g);
		CHECK(model_load_hf(&h, dir, err) == -1 && strstr(err, bad[k].want), "%s %s: %s", bad[k].model,
		      bad[k].key, err);
	}
}

int
main(void)
{
	T_RUN(test_round_trips);
	T_RUN(test_llama_family);
	T_RUN(test_multimodal);
	T_RUN(test_arch_errors);
	T_RUN(test_errors);
	T_RUN(test_llama3_freqs);
	T_RUN(test_yarn_config);
	return t_done();
}
