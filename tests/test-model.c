// test-model.c - the model loader's architecture table and its errors, the
// engine's per-architecture switches on small written models, and the
// `cpu` / `info` commands.
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "gguf.h"
#include "model.h"
#include "ref.h"
#include "t.h"
#include "wtype.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" // CHECK without a message

#define MODELS T_DATA "/models"

int cmd_cpu(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_route(int argc, char **argv);

// --- a small llama-shaped model written with the GGUF writer ----------------

enum { E = 32, L = 4, H = 4, KV = 2, HD = 8, FF = 64, V = 64 };

struct spec {
	const char *arch;    // general.architecture; NULL: no key at all
	const char *drop;    // leave this tensor out
	const char *reshape; // give this tensor one row too many
	const char *q8_1;    // store this tensor as Q8_1 (zeros)
	const char *i32;     // store this tensor as I32 (not a weight type)
	int64_t sliding_window;
	int qwen2_biases;
	const char *rope_scaling; // rope.scaling.type
	float rope_alpha;         // rope.scaling.alpha
	int flat_attn;            // attn_q and ffn_down all zero: uniform attention, no FFN
	// YaRN's keys, written when yarn_keys: rope.scaling.original_context_length,
	// yarn_ext_factor, yarn_beta_fast, yarn_beta_slow
	int yarn_keys;
	uint32_t orig_ctx;
	float yarn_ext, beta_fast, beta_slow;
};

static uint32_t rng = 12345;

static float
frand(float scale)
{
	rng = rng * 1664525u + 1013904223u;
	return scale * ((float)(rng >> 8) / 16777216.0f - 0.5f);
}

static int
add(struct gguf_writer *w, const struct spec *s, const char *name, int64_t ne0, int64_t ne1, float base, float scale,
    char *err)
{
	if (s->drop && !strcmp(s->drop, name))
		return 0;
	if (s->reshape && !strcmp(s->reshape, name)) {
		if (ne1 > 1)
			ne1++; // one row too many
		else
			ne0++; // a vector one too long
	}
	int64_t ne[2] = {ne0, ne1};
	uint32_t nd = ne1 > 1 ? 2 : 1;
	if (s->q8_1 && !strcmp(s->q8_1, name)) {
		size_t nb = (size_t)(ne0 / 32) * 36 * (size_t)ne1;
		void *z = calloc(1, nb);
		int rc = gguf_writer_tensor(w, name, AD_TYPE_Q8_1, nd, ne, z, nb, err);
		free(z);
		return rc;
	}
	if (s->i32 && !strcmp(s->i32, name)) {
		size_t nb = (size_t)(ne0 * ne1) * 4;
		void *z = calloc(1, nb);
		int rc = gguf_writer_tensor(w, name, AD_TYPE_I32, nd, ne, z, nb, err);
		free(z);
		return rc;
	}
	size_t n = (size_t)(ne0 * ne1);
	float *d = malloc(n * sizeof *d);
	for (size_t i = 0; i < n; i++)
		d[i] = base + frand(scale);
	if (s->flat_attn && (strstr(name, "attn_q.weight") || strstr(name, "ffn_down.weight")))
		memset(d, 0, n * sizeof *d);
	int rc = gguf_writer_tensor(w, name, AD_TYPE_F32, nd, ne, d, n * sizeof *d, err);
	free(d);
	return rc;
}

static int
write_model(const char *path, const struct spec *s)
{
	char err[AD_ERRLEN] = "", key[128], name[96];
	struct gguf_writer *w = gguf_writer_new();
	const char *a = s->arch ? s->arch : "llama";
	rng = 12345;
	if (s->arch)
		gguf_writer_str(w, "general.architecture", s->arch);
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
	gguf_writer_u32(w, KEY("embedding_length"), E);
	gguf_writer_u32(w, KEY("block_count"), L);
	gguf_writer_u32(w, KEY("feed_forward_length"), FF);
	gguf_writer_u32(w, KEY("context_length"), 64);
	gguf_writer_u32(w, KEY("attention.head_count"), H);
	gguf_writer_u32(w, KEY("attention.head_count_kv"), KV);
	gguf_writer_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
	if (s->sliding_window)
		gguf_writer_u32(w, KEY("attention.sliding_window"), (uint32_t)s->sliding_window);
	if (s->rope_alpha > 0)
		gguf_writer_f32(w, KEY("rope.scaling.alpha"), s->rope_alpha);
	if (s->rope_scaling) {
		gguf_writer_str(w, KEY("rope.scaling.type"), s->rope_scaling);
		gguf_writer_f32(w, KEY("rope.scaling.factor"), 2.0f);
	}
	if (s->yarn_keys) {
		gguf_writer_u32(w, KEY("rope.scaling.original_context_length"), s->orig_ctx);
		gguf_writer_f32(w, KEY("rope.scaling.yarn_ext_factor"), s->yarn_ext);
		gguf_writer_f32(w, KEY("rope.scaling.yarn_beta_fast"), s->beta_fast);
		gguf_writer_f32(w, KEY("rope.scaling.yarn_beta_slow"), s->beta_slow);
	}
#undef KEY
	int rc = add(w, s, "token_embd.weight", E, V, 0, 0.4f, err) ||
	         add(w, s, "output_norm.weight", E, 1, 1, 0.2f, err) || add(w, s, "output.weight", E, V, 0, 0.4f, err);
	for (int il = 0; il < L && !rc; il++) {
#define T(what, ne0, ne1, base, scale)                                                                                 \
	(snprintf(name, sizeof name, "blk.%d." what, il), add(w, s, name, ne0, ne1, base, scale, err))
		rc = T("attn_norm.weight", E, 1, 1, 0.2f) || T("attn_q.weight", E, H * HD, 0, 0.5f) ||
		     T("attn_k.weight", E, KV * HD, 0, 0.5f) || T("attn_v.weight", E, KV * HD, 0, 0.5f) ||
		     T("attn_output.weight", H * HD, E, 0, 0.5f) || T("ffn_norm.weight", E, 1, 1, 0.2f) ||
		     T("ffn_gate.weight", E, FF, 0, 0.5f) || T("ffn_up.weight", E, FF, 0, 0.5f) ||
		     T("ffn_down.weight", FF, E, 0, 0.5f);
		if (s->qwen2_biases)
			rc = rc || T("attn_q.bias", H * HD, 1, 0, 0.1f) || T("attn_k.bias", KV * HD, 1, 0, 0.1f) ||
			     T("attn_v.bias", KV * HD, 1, 0, 0.1f);
#undef T
	}
	if (!rc)
		rc = gguf_writer_save(w, path, err);
	if (rc)
		fprintf(stderr, "write_model: %s\n", err);
	gguf_writer_free(w);
	return rc;
}

static const char *
tmp(const char *name)
{
	static char buf[4][512];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", t_tmpdir(), name);
	return buf[k];
}

// load a written model; returns 0 on success, else err holds the message
static int
load_spec(const struct spec *s, struct model *m, char *err)
{
	const char *p = tmp("m.gguf");
	if (write_model(p, s))
		return ad_err(err, "(could not write the model)");
	return model_load(m, p, err);
}

// --- the architecture table on the fixtures ----------------------------------

static void
test_fixture_hparams(void)
{
	char err[AD_ERRLEN] = "";
	struct model m;

	REQUIRE(model_load(&m, MODELS "/llama.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_LLAMA && m.hp.rope == MODEL_ROPE_NORM && !m.tied_output);
	CHECK(m.hp.n_head == 8 && m.hp.n_head_kv == 2 && m.hp.head_dim == 16 && m.hp.n_ff == 320);
	CHECK(m.hp.n_vocab == 512 && m.hp.bos_id == 1 && m.hp.eos_id == 2);
	model_free(&m);

	REQUIRE(model_load(&m, MODELS "/qwen2.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_QWEN2 && m.hp.rope == MODEL_ROPE_NEOX && m.tied_output);
	CHECK(m.layers[0].bq.name && m.layers[1].bv.name && !m.layers[0].bo.name);
	CHECK(m.output.data == m.tok_embd.data);
	model_free(&m);

	REQUIRE(model_load(&m, MODELS "/qwen3.gguf", err) == 0, "%s", err);
	CHECK(m.hp.head_dim == 64 && m.layers[1].q_norm.name && m.layers[1].k_norm.name);
	model_free(&m);

	REQUIRE(model_load(&m, MODELS "/gemma2.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_GEMMA2 && m.tied_output && m.hp.head_dim == 48);
	CHECK(m.layers[0].sliding && !m.layers[1].sliding && m.layers[2].sliding);
	CHECK(m.hp.sliding_window == 6 && m.hp.attn_softcap == 5.0f && m.hp.final_softcap == 5.0f);
	CHECK_NEAR(m.hp.q_scale, 1.0 / sqrt(48.0), 1e-7);
	CHECK(m.layers[2].rope_base == 10000.0f && m.layers[1].rope_base == 10000.0f);
	model_free(&m);

	REQUIRE(model_load(&m, MODELS "/gemma3.gguf", err) == 0, "%s", err);
	CHECK(m.layers[0].sliding && m.layers[1].sliding && !m.layers[2].sliding);
	CHECK(m.layers[0].rope_base == 10000.0f && m.layers[0].rope_freq_scale == 1.0f);
	CHECK(m.layers[2].rope_base == 1e6f && m.layers[2].rope_freq_scale == 0.125f);
	CHECK(m.hp.attn_softcap == 0 && m.hp.final_softcap == 0 && m.hp.n_head_kv == 1);
	CHECK(m.layers[0].q_norm.name && m.layers[0].post_ffw_norm.name);
	model_free(&m);

	REQUIRE(model_load(&m, MODELS "/phi3.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_PHI3 && m.hp.n_rot == 24 && m.hp.head_dim == 32);
	CHECK(m.layers[0].wqkv.name && !m.layers[0].wq.name && m.layers[0].up.ne[1] == 512);
	model_free(&m);

	REQUIRE(model_load(&m, MODELS "/qwen2moe.gguf", err) == 0, "%s", err);
	CHECK(m.hp.n_expert == 8 && m.hp.n_expert_used == 2 && m.hp.n_ff_exp == 64 && m.hp.n_ff_shexp == 128);
	CHECK(!m.hp.expert_weights_norm && m.layers[1].gate_inp_shexp.name && m.layers[1].down_exps.ne[2] == 8);
	model_free(&m);

	REQUIRE(model_load(&m, MODELS "/stories260K.gguf", err) == 0, "%s", err);
	CHECK(m.hp.rope_base == 10000.0f && m.hp.n_layer == 5 && m.hp.n_rot == 8);
	CHECK(m.n_tensors == 48 && m.n_params > 250000 && m.n_params < 300000, "%lld", (long long)m.n_params);
	model_free(&m);

	REQUIRE(model_load(&m, MODELS "/llama256_q4_k.gguf", err) == 0, "%s", err);
	CHECK(m.layers[0].wq.type == AD_TYPE_Q4_K && m.output_norm.type == AD_TYPE_F32);
	model_free(&m);
}

// the newer architectures and RoPE scalings (tests/data/models2)
static void
test_fixture2_hparams(void)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(model_load(&m, T_DATA "/models2/qwen3moe.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_QWEN3MOE && m.hp.head_dim == 64 && m.hp.n_expert == 8 && m.hp.n_expert_used == 2);
	CHECK(m.hp.n_ff_exp == 64 && m.hp.expert_weights_norm == 1 && !m.tied_output);
	CHECK(m.layers[1].q_norm.name && !m.layers[1].gate_shexp.name && m.layers[1].gate_exps.ne[2] == 8);
	model_free(&m);

	REQUIRE(model_load(&m, T_DATA "/models2/llama_yarn.gguf", err) == 0, "%s", err);
	CHECK(m.hp.rope_scaling == MODEL_ROPE_SCALING_YARN && m.hp.rope_freq_scale == 0.25f);
	CHECK(m.hp.n_ctx_orig == 64 && m.hp.yarn_ext_factor == 1.0f && m.hp.yarn_beta_fast == 32.0f &&
	      m.hp.yarn_beta_slow == 1.0f && m.hp.rope_attn_factor == 1.0f && m.hp.rope == MODEL_ROPE_NORM);
	CHECK(model_rope_factors(&m, 4096) == NULL);
	// YaRN at position 1: pair 0 extrapolates, pairs 5.. interpolate, all
	// scaled by 1 + 0.1 ln 4
	float cs[32];
	model_rope_angles(&m.hp, m.hp.rope_base, m.hp.rope_freq_scale, NULL, 1, cs);
	const float ms = 1.0f + 0.1f * logf(4.0f);
	CHECK_NEAR(cs[0], cosf(1.0f) * ms, 1e-6);
	CHECK_NEAR(cs[11], sinf(0.25f * powf(1e4f, -10.0f / 32)) * ms, 1e-6);
	model_free(&m);

	REQUIRE(model_load(&m, T_DATA "/models2/phi3_longrope.gguf", err) == 0, "%s", err);
	CHECK(m.hp.rope_scaling == MODEL_ROPE_SCALING_LONGROPE && m.hp.n_rot == 24 && m.hp.head_dim == 32);
	CHECK(m.hp.n_ctx_orig == 4 && m.hp.yarn_ext_factor == 0 && fabsf(m.hp.rope_attn_factor - sqrtf(3)) < 1e-6f);
	CHECK(model_rope_factors(&m, 5) == &m.rope_long && model_rope_factors(&m, 4) == &m.rope_short);
	CHECK(m.rope_long.ne[0] == 12 && m.tied_output);

	// the reference engine picks the factors by its context: short ones up
	// to the original context of 4 (8.7 away, README), the long ones beyond
	{
		const int32_t ids[8] = {1, 403, 407, 261, 378, 432, 383, 286};
		float *lg[3];
		struct ref_engine *re[3] = {ref_new(&m, 8, err), ref_new_ctx(&m, 8, 4, err),
		                            ref_new_ctx(&m, 8, 5, err)};
		for (int k = 0; k < 3; k++) {
			REQUIRE(re[k], "%s", err);
			lg[k] = malloc(8 * 512 * sizeof(float));
			CHECK(ref_eval(re[k], ids, 8, lg[k]) == 0);
			ref_free(re[k]);
		}
		double d_short = 0;
		for (int i = 0; i < 8 * 512; i++)
			d_short = fmax(d_short, fabs(lg[0][i] - lg[1][i]));
		CHECK(d_short > 1.0, "short factors moved the logits only %g", d_short);
		CHECK(memcmp(lg[0], lg[2], 8 * 512 * sizeof(float)) == 0);
		printf("phi3_longrope: short instead of long factors moves the logits by %.2f\n", d_short);
		for (int k = 0; k < 3; k++)
			free(lg[k]);
	}
	model_free(&m);
	REQUIRE(model_load(&m, T_DATA "/models2/hunyuan_dense.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_HUNYUAN_DENSE && m.hp.rope == MODEL_ROPE_NEOX && m.hp.qk_norm_post_rope);
	CHECK(m.hp.rope_scaling == MODEL_ROPE_SCALING_NONE && m.hp.rope_base == 1.5848932e7f && m.tied_output);
	model_free(&m);

	REQUIRE(model_load(&m, T_DATA "/models2/smollm3.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_SMOLLM3 && m.layers[2].use_rope && !m.layers[3].use_rope && !m.hp.qk_norm_post_rope);
	model_free(&m);
}

// YaRN's ext_factor and beta keys: read from the GGUF, and the angles as
// ggml computes them (ggml_rope_yarn_corr_dims, rope_yarn_ramp, rope_yarn),
// written out here in double precision: with n_rot 8, base 1e4, an original
// context of 4096, beta_fast 4 and beta_slow 0.5 the correction dims are
// floor(8 ln(4096 / 8 pi) / (2 ln 1e4)) = floor(2.21) = 2 and
// ceil(8 ln(4096 / pi) / (2 ln 1e4)) = ceil(3.12) = 4 (the defaults 32 and
// 1 give 1 and 3), so with ext_factor 0.5 pairs 0 to 2 take half the
// extrapolated angle and pair 3 a quarter; cos and sin are scaled by
// 1 + 0.1 ln 2 (the factor is 2).
// ext_factor 0 is linear scaling with no YaRN magnitude scale.
static double
yarn_corr(double n_dims, double orig, double beta, double base)
{
	return n_dims * log(orig / (beta * 2 * M_PI)) / (2 * log(base));
}

static void
test_yarn_keys(void)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	struct spec s = {.arch = "llama",
	                 .rope_scaling = "yarn",
	                 .yarn_keys = 1,
	                 .orig_ctx = 4096,
	                 .yarn_ext = 0.5f,
	                 .beta_fast = 4,
	                 .beta_slow = 0.5f};
	REQUIRE(load_spec(&s, &m, err) == 0, "%s", err);
	CHECK(m.hp.rope_scaling == MODEL_ROPE_SCALING_YARN && m.hp.rope_freq_scale == 0.5f && m.hp.n_ctx_orig == 4096);
	CHECK(m.hp.yarn_ext_factor == 0.5f && m.hp.yarn_beta_fast == 4.0f && m.hp.yarn_beta_slow == 0.5f &&
	              m.hp.n_rot == 8,
	      "ext %g beta %g %g", (double)m.hp.yarn_ext_factor, (double)m.hp.yarn_beta_fast,
	      (double)m.hp.yarn_beta_slow);
	const double lo = fmax(0, floor(yarn_corr(8, 4096, 4, 1e4))), hi = fmin(7, ceil(yarn_corr(8, 4096, 0.5, 1e4)));
	CHECK(lo == 2 && hi == 4, "corr dims %g %g", lo, hi);
	const double want_mix[4] = {0.5, 0.5, 0.5, 0.25};
	for (int pos = 0; pos < 200; pos += 37) {
		float cs[8];
		model_rope_angles(&m.hp, m.hp.rope_base, m.hp.rope_freq_scale, NULL, pos, cs);
		for (int i = 0; i < 4; i++) {
			double extrap = pos * pow(1e4, -2.0 * i / 8), interp = 0.5 * extrap;
			double ramp = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
			double mix = ramp * 0.5;
			CHECK(mix == want_mix[i]);
			double th = interp * (1 - mix) + extrap * mix, ms = 1 + 0.1 * log(2.0);
			CHECK_NEAR(cs[2 * i], cos(th) * ms, 2e-5);
			CHECK_NEAR(cs[2 * i + 1], sin(th) * ms, 2e-5);
		}
	}
	// the keys change the angles: the defaults (ext 1, beta 32 and 1) give others
	struct model_hparams d = m.hp;
	d.yarn_ext_factor = 1, d.yarn_beta_fast = 32, d.yarn_beta_slow = 1;
	float a[8], b[8];
	model_rope_angles(&m.hp, m.hp.rope_base, m.hp.rope_freq_scale, NULL, 111, a);
	model_rope_angles(&d, d.rope_base, d.rope_freq_scale, NULL, 111, b);
	CHECK(fabsf(a[2] - b[2]) > 1e-4f && fabsf(a[6] - b[6]) > 1e-4f, "%g %g / %g %g", (double)a[2], (double)b[2],
	      (double)a[6], (double)b[6]);
	model_free(&m);
	// ext_factor 0: linear, no magnitude scale
	s.yarn_ext = 0;
	REQUIRE(load_spec(&s, &m, err) == 0, "%s", err);
	CHECK(m.hp.yarn_ext_factor == 0.0f);
	float cs[8];
	model_rope_angles(&m.hp, m.hp.rope_base, m.hp.rope_freq_scale, NULL, 74, cs);
	for (int i = 0; i < 4; i++) {
		double th = 0.5 * 74 * pow(1e4, -2.0 * i / 8);
		CHECK_NEAR(cs[2 * i], cos(th), 2e-5);
		CHECK_NEAR(cs[2 * i + 1], sin(th), 2e-5);
	}
	model_free(&m);
	// and the reference engine follows them: other logits than the defaults'
	s.yarn_ext = 0.5f;
	struct model m2;
	REQUIRE(load_spec(&s, &m, err) == 0, "%s", err);
	s.yarn_keys = 0; // yarn with its defaults (original context: the training one, 64)
	REQUIRE(load_spec(&s, &m2, err) == 0, "%s", err);
	CHECK(m2.hp.yarn_ext_factor == 1.0f && m2.hp.yarn_beta_fast == 32.0f && m2.hp.n_ctx_orig == 64);
	const int32_t ids[6] = {1, 5, 9, 17, 33, 2};
	float la[6 * V], lb[6 * V];
	struct ref_engine *ra = ref_new(&m, 6, err), *rb = ref_new(&m2, 6, err);
	REQUIRE(ra && rb, "%s", err);
	CHECK(ref_eval(ra, ids, 6, la) == 0 && ref_eval(rb, ids, 6, lb) == 0);
	double dmax = 0;
	for (int i = 0; i < 6 * V; i++)
		dmax = fmax(dmax, fabs((double)la[i] - lb[i]));
	CHECK(dmax > 1e-4, "the YaRN keys left the logits alone (%g)", dmax);
	ref_free(ra);
	ref_free(rb);
	model_free(&m);
	model_free(&m2);
}

// --- errors ------------------------------------------------------------------

static void
expect_error(const struct spec *s, const char *a, const char *b)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	int rc = load_spec(s, &m, err);
	CHECK(rc == -1, "loaded although it should not");
	CHECK(strstr(err, a) && (!b || strstr(err, b)), "message: %s", err);
	if (rc == 0)
		model_free(&m);
}

// --- lfm2 written by hand: a ShortConv block, an attention block, a MoE block

struct lfm2_spec {
	int moe;          // lfm2moe, block 2 MoE after 2 dense ones
	int kv_n;         // values in head_count_kv (0: 3, right)
	int kv_differ;    // the attention blocks disagree on their KV heads
	int attn_in_conv; // block 0 also has attn_q
	const char *drop; // leave this tensor out
	int gating;       // expert_gating_func (0: 2)
	int lead;         // leading_dense_block_count (0: 2)
};

static int
write_lfm2(const char *path, const struct lfm2_spec *ls)
{
	char err[AD_ERRLEN] = "", key[128], name[96];
	const char *a = ls->moe ? "lfm2moe" : "lfm2";
	const int NL = 3, NE = 4;
	struct spec s = {.drop = ls->drop};
	struct gguf_writer *w = gguf_writer_new();
	rng = 777;
	gguf_writer_str(w, "general.architecture", a);
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, a), key)
	gguf_writer_u32(w, KEY("embedding_length"), E);
	gguf_writer_u32(w, KEY("block_count"), NL);
	gguf_writer_u32(w, KEY("feed_forward_length"), FF);
	gguf_writer_u32(w, KEY("context_length"), 64);
	gguf_writer_u32(w, KEY("attention.head_count"), H);
	uint32_t kv[4] = {0, KV, ls->kv_differ ? 1 : KV, KV};
	gguf_writer_arr(w, KEY("attention.head_count_kv"), GGUF_TYPE_UINT32, kv, ls->kv_n ? (uint64_t)ls->kv_n : 3);
	gguf_writer_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
	gguf_writer_u32(w, KEY("shortconv.l_cache"), 3);
	if (ls->moe) {
		gguf_writer_u32(w, KEY("expert_count"), NE);
		gguf_writer_u32(w, KEY("expert_used_count"), 2);
		gguf_writer_u32(w, KEY("expert_feed_forward_length"), 16);
		gguf_writer_u32(w, KEY("leading_dense_block_count"), (uint32_t)(ls->lead ? ls->lead : 2));
		gguf_writer_u32(w, KEY("expert_gating_func"), (uint32_t)(ls->gating ? ls->gating : 2));
	}
#undef KEY
	int rc = add(w, &s, "token_embd.weight", E, V, 0, 0.4f, err) ||
	         add(w, &s, "token_embd_norm.weight", E, 1, 1, 0.2f, err);
	for (int il = 0; il < NL && !rc; il++) {
#define T(what, ne0, ne1, base, scale)                                                                                 \
	(snprintf(name, sizeof name, "blk.%d." what, il), add(w, &s, name, ne0, ne1, base, scale, err))
		rc = T("attn_norm.weight", E, 1, 1, 0.2f) || T("ffn_norm.weight", E, 1, 1, 0.2f);
		if (il == 0) {
			rc = rc || T("shortconv.in_proj.weight", E, 3 * E, 0, 0.5f) ||
			     T("shortconv.conv.weight", 3, E, 0, 0.5f) || T("shortconv.out_proj.weight", E, E, 0, 0.5f);
		}
		if (il > 0 || ls->attn_in_conv)
			rc = rc || T("attn_q.weight", E, H * HD, 0, 0.5f);
		if (il > 0)
			rc = rc || T("attn_k.weight", E, KV * HD, 0, 0.5f) || T("attn_v.weight", E, KV * HD, 0, 0.5f) ||
			     T("attn_output.weight", H * HD, E, 0, 0.5f) || T("attn_q_norm.weight", HD, 1, 1, 0.1f) ||
			     T("attn_k_norm.weight", HD, 1, 1, 0.1f);
		if (ls->moe && il == 2) {
			int64_t ne3[3] = {E, 16, NE}, nd3[3] = {16, E, NE};
			float *z = calloc((size_t)E * 16 * NE, sizeof *z);
			snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", il);
			rc = rc || gguf_writer_tensor(w, name, AD_TYPE_F32, 3, ne3, z, (size_t)E * 16 * NE * 4, err);
			snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", il);
			rc = rc || gguf_writer_tensor(w, name, AD_TYPE_F32, 3, ne3, z, (size_t)E * 16 * NE * 4, err);
			snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", il);
			rc = rc || gguf_writer_tensor(w, name, AD_TYPE_F32, 3, nd3, z, (size_t)E * 16 * NE * 4, err);
			free(z);
			rc = rc || T("ffn_gate_inp.weight", E, NE, 0, 0.5f) || T("exp_probs_b.bias", NE, 1, 0, 0.1f);
		} else {
			rc = rc || T("ffn_gate.weight", E, FF, 0, 0.5f) || T("ffn_up.weight", E, FF, 0, 0.5f) ||
			     T("ffn_down.weight", FF, E, 0, 0.5f);
		}
#undef T
	}
	if (!rc)
		rc = gguf_writer_save(w, path, err);
	if (rc)
		fprintf(stderr, "write_lfm2: %s\n", err);
	gguf_writer_free(w);
	return rc;
}

static int
load_lfm2(const struct lfm2_spec *ls, struct model *m, char *err)
{
	const char *p = tmp("lfm2.gguf");
	if (write_lfm2(p, ls))
		return ad_err(err, "(could not write the model)");
	return model_load(m, p, err);
}

static void
test_lfm2(void)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	// the fixtures: the layer kinds from head_count_kv, the final norm
	REQUIRE(model_load(&m, T_DATA "/models2/lfm2.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_LFM2 && m.hp.n_head_kv == 2 && m.hp.n_conv == 3 && m.tied_output);
	CHECK(m.layers[0].conv && m.layers[1].conv && !m.layers[2].conv && m.layers[3].conv && !m.layers[4].conv);
	CHECK(m.layers[0].conv_w.ne[0] == 3 && m.layers[0].conv_in.ne[1] == 384 && !m.layers[0].wq.name);
	CHECK(m.layers[2].q_norm.name && !m.hp.qk_norm_post_rope && m.hp.rope == MODEL_ROPE_NEOX);
	CHECK(m.output_norm.name && !strcmp(m.output_norm.name, "token_embd_norm.weight"));
	// three ShortConv layers of 128 B*X values, two attention layers of 2 x 2 x 32
	CHECK(model_kv_bytes_per_pos(&m) == (3 * 128 + 2 * 128) * 4, "%zu", model_kv_bytes_per_pos(&m));
	model_free(&m);
	REQUIRE(model_load(&m, T_DATA "/models2/lfm2moe.gguf", err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_LFM2MOE && m.hp.n_dense_lead == 2 && m.hp.expert_gating == 2 &&
	      m.hp.expert_weights_norm && m.hp.n_ff == 192 && m.hp.n_ff_exp == 32);
	CHECK(!m.layers[1].gate_inp.name && m.layers[1].gate.name && m.layers[2].gate_inp.name &&
	      m.layers[2].exp_probs_b.name && m.layers[4].exp_probs_b.ne[0] == 8);
	model_free(&m);

	// written by hand: the right one loads
	CHECK(load_lfm2(&(struct lfm2_spec){0}, &m, err) == 0, "%s", err);
	model_free(&m);
	CHECK(load_lfm2(&(struct lfm2_spec){.moe = 1}, &m, err) == 0, "%s", err);
	CHECK(m.layers[2].gate_inp.name && !m.layers[1].gate_inp.name && m.layers[0].conv);
	model_free(&m);
	// and each fault is named
	CHECK(load_lfm2(&(struct lfm2_spec){.kv_n = 4}, &m, err) == -1 &&
	              strstr(err, "head_count_kv has 4 values for 3"),
	      "%s", err);
	CHECK(load_lfm2(&(struct lfm2_spec){.kv_differ = 1}, &m, err) == -1 && strstr(err, "2 and 1 KV heads"), "%s",
	      err);
	CHECK(load_lfm2(&(struct lfm2_spec){.attn_in_conv = 1}, &m, err) == -1 &&
	              strstr(err, "blk.0: head_count_kv 0 marks a ShortConv block, but it has attn_q"),
	      "%s", err);
	CHECK(load_lfm2(&(struct lfm2_spec){.drop = "blk.0.shortconv.conv.weight"}, &m, err) == -1 &&
	              strstr(err, "missing tensor blk.0.shortconv.conv.weight"),
	      "%s", err);
	CHECK(load_lfm2(&(struct lfm2_spec){.drop = "token_embd_norm.weight"}, &m, err) == -1 &&
	              strstr(err, "missing tensor token_embd_norm.weight"),
	      "%s", err);
	CHECK(load_lfm2(&(struct lfm2_spec){.moe = 1, .drop = "blk.2.exp_probs_b.bias"}, &m, err) == -1 &&
	              strstr(err, "missing tensor blk.2.exp_probs_b.bias"),
	      "%s", err);
	CHECK(load_lfm2(&(struct lfm2_spec){.moe = 1, .gating = 3}, &m, err) == -1 &&
	              strstr(err, "expert_gating_func 3 is not supported"),
	      "%s", err);
	CHECK(load_lfm2(&(struct lfm2_spec){.moe = 1, .lead = 7}, &m, err) == -1 &&
	              strstr(err, "leading_dense_block_count 7 out of range"),
	      "%s", err);
}

// gemma4 rebuilt through the loader API from the fixture's tensors, with
// one more tensor (extra, a copy of blk.0.attn_k) and shared_kv_layers kv
static int
gemma4_variant(const struct model *g, const char *extra, int64_t kv, char *err)
{
	struct model m;
	model_init(&m);
	m.arch = MODEL_ARCH_GEMMA4;
	m.hp = g->hp;
	m.hp.n_kv_shared = kv;
	m.layer_n_ff = malloc((size_t)g->hp.n_layer * sizeof *m.layer_n_ff);
	m.layer_swa = malloc((size_t)g->hp.n_layer);
	memcpy(m.layer_n_ff, g->layer_n_ff, (size_t)g->hp.n_layer * sizeof *m.layer_n_ff);
	memcpy(m.layer_swa, g->layer_swa, (size_t)g->hp.n_layer);
	int rc = 0;
	for (int64_t i = 0; i < g->n_tensors && !rc; i++) {
		const struct model_tensor *t = &g->tensors[i];
		rc = model_add_tensor(&m, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes, err);
	}
	const struct model_tensor *k0 = model_find_tensor(g, "blk.0.attn_k.weight");
	if (!rc && extra)
		rc = model_add_tensor(&m, extra, k0->type, k0->n_dims, k0->ne, k0->data, k0->nbytes, err);
	if (!rc)
		rc = model_finish(&m, err);
	model_free(&m);
	return rc;
}

// model_finish derives the architecture's arithmetic once: GELU, the
// embedding scale sqrt(n_embd) and q scaled itself on gemma; SiLU, 1 and
// the scores scaled elsewhere; whatever a loader left in the fields
static void
test_arch_facts(void)
{
	char err[AD_ERRLEN] = "";
	static const struct {
		const char *file;
		int gelu;
	} cases[] = {{MODELS "/llama.gguf", 0},
	             {MODELS "/qwen2.gguf", 0},
	             {MODELS "/gemma2.gguf", 1},
	             {MODELS "/gemma3.gguf", 1},
	             {T_DATA "/models2/gemma4.gguf", 1}};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		struct model m;
		REQUIRE(model_load(&m, cases[i].file, err) == 0, "%s", err);
		const struct model_hparams *hp = &m.hp;
		const float scale = cases[i].gelu ? sqrtf((float)hp->n_embd) : 1.0f;
		CHECK(hp->act == (cases[i].gelu ? MODEL_ACT_GELU : MODEL_ACT_SILU), "%s: act %d", cases[i].file,
		      hp->act);
		CHECK(hp->embd_scale == scale, "%s: embd_scale %g, want %g", cases[i].file, hp->embd_scale, scale);
		CHECK(hp->q_prescale == cases[i].gelu, "%s: q_prescale %d", cases[i].file, hp->q_prescale);
		// the loader API: a value left in the fields is replaced
		struct model r;
		model_init(&r);
		r.arch = m.arch;
		r.hp = m.hp;
		r.hp.act = cases[i].gelu ? MODEL_ACT_SILU : MODEL_ACT_GELU;
		r.hp.embd_scale = 7.0f;
		r.hp.q_prescale = !cases[i].gelu;
		if (m.layer_n_ff) {
			r.layer_n_ff = malloc((size_t)m.hp.n_layer * sizeof *r.layer_n_ff);
			memcpy(r.layer_n_ff, m.layer_n_ff, (size_t)m.hp.n_layer * sizeof *r.layer_n_ff);
		}
		if (m.layer_swa) {
			r.layer_swa = malloc((size_t)m.hp.n_layer);
			memcpy(r.layer_swa, m.layer_swa, (size_t)m.hp.n_layer);
		}
		int rc = 0;
		for (int64_t t = 0; t < m.n_tensors && !rc; t++) {
			const struct model_tensor *x = &m.tensors[t];
			rc = model_add_tensor(&r, x->name, x->type, x->n_dims, x->ne, x->data, x->nbytes, err);
		}
		CHECK(!rc && model_finish(&r, err) == 0, "%s: %s", cases[i].file, err);
		CHECK(r.hp.act == hp->act && r.hp.embd_scale == hp->embd_scale && r.hp.q_prescale == hp->q_prescale,
		      "%s: the loader's values kept", cases[i].file);
		model_free(&r);
		model_free(&m);
	}
}

static void
test_gemma4(void)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(model_load(&m, T_DATA "/models2/gemma4.gguf", err) == 0, "%s", err);
	const struct model_hparams *hp = &m.hp;
	CHECK(m.arch == MODEL_ARCH_GEMMA4 && hp->head_dim == 64 && hp->head_dim_swa == 32 && hp->n_rot_swa == 32 &&
	      hp->n_rot == 64 && hp->n_kv_shared == 3 && hp->n_embd_pl == 16 && hp->n_ff == 256);
	CHECK(hp->q_scale == 1.0f && hp->final_softcap == 30.0f && hp->attn_softcap == 0 && m.tied_output);
	const int sliding[6] = {1, 1, 0, 1, 1, 0}, ff[6] = {128, 128, 128, 256, 256, 256}, src[6] = {0, 1, 2, 1, 1, 2};
	for (int il = 0; il < 6; il++) {
		const struct model_layer *ly = &m.layers[il];
		CHECK(ly->sliding == sliding[il] && ly->n_ff == ff[il] && ly->kv_src == src[il], "layer %d", il);
		CHECK(ly->head_dim == (sliding[il] ? 32 : 64) && ly->rope_factors == !sliding[il], "layer %d", il);
		CHECK(ly->rope_base == (sliding[il] ? 1e4f : 1e6f) && ly->out_scale.name && ly->pl_gate.ne[1] == 16);
		CHECK(!!ly->wk.name == (il < 3) && !!ly->k_norm.name == (il < 3), "layer %d", il);
	}
	CHECK(m.pl_tok_embd.ne[0] == 96 && m.pl_model_proj.ne[1] == 96 && m.rope_freqs.ne[0] == 32);
	// K/V per position: layers 0, 1 (sliding, 32 + 32) and 2 (full, 64 + 64); 3-5 none
	CHECK(model_kv_bytes_per_pos(&m) == (2 * 64 + 128) * 4, "%zu", model_kv_bytes_per_pos(&m));
	// rebuilt as it is, it loads; a shared layer with its own attn_k, or a
	// sharing that would reach a layer of the other kind, is refused
	CHECK(gemma4_variant(&m, NULL, 3, err) == 0, "%s", err);
	CHECK(gemma4_variant(&m, "blk.4.attn_k.weight", 3, err) == -1 &&
	              strstr(err, "blk.4 has attn_k, but shared_kv_layers says it reads blk.1's K/V"),
	      "%s", err);
	CHECK(gemma4_variant(&m, NULL, 4, err) == -1 &&
	              strstr(err, "blk.2 shares the K/V of blk.1, which is not a full layer"),
	      "%s", err);
	CHECK(gemma4_variant(&m, NULL, 2, err) == -1 && strstr(err, "missing tensor blk.3.attn_k.weight"), "%s", err);
	CHECK(gemma4_variant(&m, NULL, 5, err) == -1 && strstr(err, "shared_kv_layers 5 out of range"), "%s", err);
	model_free(&m);
}

static void
test_errors(void)
{
	struct spec s = {.arch = "llama", .drop = "blk.2.attn_k.weight"};
	expect_error(&s, "missing tensor blk.2.attn_k.weight", NULL);

	s = (struct spec){.arch = "llama", .reshape = "blk.1.ffn_down.weight"};
	expect_error(&s, "blk.1.ffn_down.weight", "shape");

	s = (struct spec){.arch = "llama", .reshape = "blk.3.ffn_norm.weight"};
	expect_error(&s, "blk.3.ffn_norm.weight", "expected [32");

	s = (struct spec){.arch = "llama", .i32 = "blk.0.attn_q.weight"};
	expect_error(&s, "blk.0.attn_q.weight", "I32");
	// Q8_1 is read (d x q)
	s = (struct spec){.arch = "llama", .q8_1 = "blk.0.attn_q.weight"};
	{
		struct model m;
		char err[AD_ERRLEN] = "";
		CHECK(load_spec(&s, &m, err) == 0, "%s", err);
		model_free(&m);
	}

	s = (struct spec){.arch = "mystery", .drop = "blk.0.ffn_gate.weight"};
	expect_error(&s, "'mystery' is not implemented", NULL);

	s = (struct spec){.arch = NULL};
	expect_error(&s, "general.architecture", NULL);

	s = (struct spec){.arch = "llama", .rope_scaling = "su"};
	expect_error(&s, "llama.rope.scaling.type 'su' is not supported", "yarn, longrope");

	s = (struct spec){.arch = "hunyuan-dense", .rope_alpha = 1000};
	expect_error(&s, "hunyuan-dense.rope.scaling.alpha is not supported", NULL);
	s = (struct spec){.arch = "hunyuan-dense"}; // its q/k norms are required
	expect_error(&s, "missing tensor blk.0.attn_q_norm.weight", NULL);

	s = (struct spec){.arch = "qwen2"}; // qwen2 requires q/k/v biases
	expect_error(&s, "missing tensor blk.0.attn_q.bias", NULL);

	s = (struct spec){.arch = "llama", .drop = "token_embd.weight"};
	expect_error(&s, "token_embd.weight", NULL);

	char err[AD_ERRLEN] = "";
	struct model m;
	CHECK(model_load(&m, tmp("absent.gguf"), err) == -1 && strstr(err, "No such file"), "%s", err);
	err[0] = 0;
	CHECK(model_load(&m, tmp("no-such-directory"), err) == -1 && strstr(err, "No such file"), "%s", err);

	// the path decides, not its name: a GGUF without .gguf (as Ollama keeps
	// its blobs) loads; files that are not one say what they are
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "cp '%s/models/llama.gguf' '%s'", T_DATA, tmp("sha256-0123abcd"));
	REQUIRE(system(cmd) == 0, "%s", cmd);
	CHECK(model_load(&m, tmp("sha256-0123abcd"), err) == 0 && m.is_gguf, "%s", err);
	if (m.is_gguf)
		model_free(&m);
	FILE *f = fopen(tmp("lfs.gguf"), "w");
	REQUIRE(f);
	fputs("version https://git-lfs.github.com/spec/v1\noid sha256:0123\nsize 4096\n", f);
	fclose(f);
	CHECK(model_load(&m, tmp("lfs.gguf"), err) == -1 && strstr(err, "Git LFS pointer") && strstr(err, "lfs.gguf"),
	      "%s", err);
	f = fopen(tmp("empty.gguf"), "w");
	REQUIRE(f);
	fclose(f);
	CHECK(model_load(&m, tmp("empty.gguf"), err) == -1 && strstr(err, "an empty file"), "%s", err);
	CHECK(model_load(&m, T_DATA "/models/README.md", err) == -1 && strstr(err, "not a GGUF file"), "%s", err);
	// a directory: of GGUF files (give one), or of nothing a model needs
	CHECK(model_load(&m, T_DATA "/models2", err) == -1 && strstr(err, "GGUF files") && strstr(err, "give the file"),
	      "%s", err);
	CHECK(model_load(&m, T_DATA "/grammars", err) == -1 && strstr(err, "no config.json"), "%s", err);
}

// an architecture anedvd does not implement is refused by name, with the
// list of those it does, even with llama's tensor names (it used to run as
// llama: a hunyuan-dense file came out 6.6 away from llama.cpp's logits);
// ANEDVD_ARCH (--arch) runs it as a named one
static void
test_unknown_arch_with_llama_tensors(void)
{
	struct spec s = {.arch = "mystery"};
	char err[AD_ERRLEN] = "";
	struct model m;
	unsetenv("ANEDVD_ARCH");
	CHECK(load_spec(&s, &m, err) == -1, "an unknown architecture loaded");
	CHECK(strstr(err, "'mystery' is not implemented") && strstr(err, "llama, mistral, smollm3") &&
	              strstr(err, "qwen3moe") && strstr(err, "hunyuan-dense") && strstr(err, "--arch"),
	      "%s", err);
	s.arch = "hunyuan-moe";
	CHECK(load_spec(&s, &m, err) == -1 && strstr(err, "'hunyuan-moe' is not implemented"), "%s", err);

	setenv("ANEDVD_ARCH", "llama", 1);
	s.arch = "mystery";
	REQUIRE(load_spec(&s, &m, err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_LLAMA && !strcmp(m.arch_name, "mystery"));
	CHECK(m.hp.n_embd == E && m.hp.n_layer == L && m.hp.n_head_kv == KV); // keys read under "mystery."
	model_free(&m);
	setenv("ANEDVD_ARCH", "gpt2", 1);
	CHECK(load_spec(&s, &m, err) == -1 && strstr(err, "--arch gpt2") && strstr(err, "qwen2moe"), "%s", err);
	// a forced architecture also applies to a known one: smollm3's NoPE layer
	setenv("ANEDVD_ARCH", "smollm3", 1);
	s.arch = "llama";
	REQUIRE(load_spec(&s, &m, err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_SMOLLM3 && !m.layers[3].use_rope);
	model_free(&m);
	unsetenv("ANEDVD_ARCH");

	s.arch = "qwen2";
	s.qwen2_biases = 1;
	REQUIRE(load_spec(&s, &m, err) == 0, "%s", err);
	CHECK(m.arch == MODEL_ARCH_QWEN2 && m.hp.rope == MODEL_ROPE_NEOX && m.layers[3].bk.name);
	model_free(&m);
}

// the loader API that other formats use: model_init, model_add_tensor,
// model_finish; a tensor whose byte count does not fit its shape is refused
static void
test_loader_api(void)
{
	char err[AD_ERRLEN] = "";
	struct model src, m;
	REQUIRE(model_load(&src, MODELS "/llama.gguf", err) == 0, "%s", err);
	for (int bad = 0; bad < 2; bad++) {
		model_init(&m);
		m.arch = (enum model_arch)model_arch_from_name("llama");
		m.hp = src.hp;
		m.hp.rope = MODEL_ROPE_NEOX; // as an HF loader would
		int rc = 0;
		for (int64_t i = 0; i < src.n_tensors && !rc; i++) {
			const struct model_tensor *t = &src.tensors[i];
			size_t nb = t->nbytes - (bad && !strcmp(t->name, "blk.1.ffn_up.weight") ? 4 : 0);
			rc = model_add_tensor(&m, t->name, t->type, t->n_dims, t->ne, t->data, nb, err);
		}
		CHECK(rc == 0, "%s", err);
		CHECK(model_add_tensor(&m, "output.weight", 0, 1, src.output.ne, NULL, 0, err) == -1 &&
		              strstr(err, "twice"),
		      "%s", err);
		rc = model_finish(&m, err);
		if (!bad) {
			CHECK(rc == 0, "%s", err);
			CHECK(m.hp.rope == MODEL_ROPE_NEOX && m.layers[2].wq.data == src.layers[2].wq.data);
			CHECK(model_find_tensor(&m, "blk.0.attn_q.weight") &&
			      !model_find_tensor(&m, "blk.9.attn_q.weight"));
		} else {
			CHECK(rc == -1 && strstr(err, "blk.1.ffn_up.weight") && strstr(err, "bytes"), "%s", err);
		}
		model_free(&m);
	}
	CHECK(model_arch_from_name("gemma3") == MODEL_ARCH_GEMMA3 && model_arch_from_name("gpt2") == -1);
	model_free(&src);
}

// --- per-architecture switches in the engine -----------------------------------

static float *
eval_spec(const struct spec *s, enum model_rope rope, const int32_t *ids, int n)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	if (load_spec(s, &m, err)) {
		fprintf(stderr, "eval_spec: %s\n", err);
		return NULL;
	}
	if (rope)
		m.hp.rope = rope;
	struct ref_engine *e = ref_new(&m, n, err);
	model_free(&m);
	if (!e)
		return NULL;
	float *lg = malloc((size_t)n * V * sizeof *lg);
	if (ref_eval(e, ids, n, lg)) {
		free(lg);
		lg = NULL;
	}
	ref_free(e);
	return lg;
}

static double
row_diff(const float *a, const float *b, int row)
{
	double mx = 0;
	for (int i = 0; i < V; i++)
		mx = fmax(mx, fabs((double)a[row * V + i] - b[row * V + i]));
	return mx;
}

static void
test_sliding_window_and_nope(void)
{
	const int32_t ids[8] = {1, 5, 9, 13, 17, 21, 25, 29};
	struct spec llama = {.arch = "llama"};
	struct spec mistral = {.arch = "mistral", .sliding_window = 3};
	struct spec smol = {.arch = "smollm3"};
	float *a = eval_spec(&llama, 0, ids, 8);
	float *b = eval_spec(&mistral, 0, ids, 8);
	float *c = eval_spec(&smol, 0, ids, 8);
	REQUIRE(a && b && c);
	// a window of 3 sees everything up to position 2, then drops keys
	for (int r = 0; r < 3; r++)
		CHECK(row_diff(a, b, r) == 0, "row %d differs: %g", r, row_diff(a, b, r));
	for (int r = 3; r < 8; r++)
		CHECK(row_diff(a, b, r) > 1e-3, "row %d: window has no effect", r);
	// smollm3: layer 3 has no RoPE, which only shows once positions differ
	CHECK(row_diff(a, c, 0) == 0);
	CHECK(row_diff(a, c, 5) > 1e-3);
	free(a);
	free(b);
	free(c);

	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(load_spec(&smol, &m, err) == 0, "%s", err);
	CHECK(m.layers[0].use_rope && m.layers[2].use_rope && !m.layers[3].use_rope);
	CHECK(m.hp.rope == MODEL_ROPE_NORM);
	model_free(&m);
	REQUIRE(load_spec(&mistral, &m, err) == 0, "%s", err);
	CHECK(m.layers[0].sliding && m.layers[3].sliding);
	model_free(&m);
}

// a sliding window against a hand computation: with q = 0 every score is 0,
// so attention is the plain mean of the values in the window, and with
// ffn_down = 0 the FFN adds nothing; RoPE then acts on nothing either
// (k is only dotted with q). So layer by layer, in double,
//   x_p += wo · mean_{j in (p-W, p]} wv · (rmsnorm(x_j) · attn_norm)
// and the logits are output · (rmsnorm(x_p) · output_norm)
// max |d| between lg and the hand computation with a window of win
static double
by_hand(const struct model *m, const int32_t *ids, int n, const float *lg, int win)
{
	static double x[8][E], xn[8][E], v[8][KV * HD];
	const float *emb = m->tok_embd.data;
	for (int p = 0; p < n; p++)
		for (int i = 0; i < E; i++)
			x[p][i] = emb[ids[p] * E + i];
	for (int il = 0; il < L; il++) {
		const struct model_layer *ly = &m->layers[il];
		const float *an = ly->attn_norm.data, *wv = ly->wv.data, *wo = ly->wo.data;
		for (int p = 0; p < n; p++) {
			double ss = 0;
			for (int i = 0; i < E; i++)
				ss += x[p][i] * x[p][i];
			double sc = 1 / sqrt(ss / E + m->hp.rms_eps);
			for (int i = 0; i < E; i++)
				xn[p][i] = x[p][i] * sc * an[i];
			for (int r = 0; r < KV * HD; r++) {
				double a = 0;
				for (int i = 0; i < E; i++)
					a += (double)wv[r * E + i] * xn[p][i];
				v[p][r] = a;
			}
		}
		for (int p = 0; p < n; p++) {
			double att[H * HD] = {0};
			int first = p - win + 1 > 0 ? p - win + 1 : 0;
			for (int h = 0; h < H; h++)
				for (int d = 0; d < HD; d++) {
					for (int j = first; j <= p; j++)
						att[h * HD + d] += v[j][(h / (H / KV)) * HD + d];
					att[h * HD + d] /= p - first + 1;
				}
			for (int o = 0; o < E; o++) {
				double a = 0;
				for (int i = 0; i < H * HD; i++)
					a += (double)wo[o * H * HD + i] * att[i];
				x[p][o] += a;
			}
		}
	}
	const float *on = m->output_norm.data, *out = m->output.data;
	double md = 0;
	for (int p = 0; p < n; p++) {
		double ss = 0;
		for (int i = 0; i < E; i++)
			ss += x[p][i] * x[p][i];
		double sc = 1 / sqrt(ss / E + m->hp.rms_eps);
		for (int t = 0; t < V; t++) {
			double a = 0;
			for (int i = 0; i < E; i++)
				a += (double)out[t * E + i] * x[p][i] * sc * on[i];
			md = fmax(md, fabs(a - lg[p * V + t]));
		}
	}
	return md;
}

// a sliding window against a hand computation: with q = 0 every score is 0,
// so attention is the plain mean of the values in the window, and with
// ffn_down = 0 the FFN adds nothing; RoPE then acts on nothing either
// (k is only dotted with q). So layer by layer, in double,
//   x_p += wo · mean_{j in (p-W, p]} wv · (rmsnorm(x_j) · attn_norm)
// and the logits are output · (rmsnorm(x_p) · output_norm)
static void
test_sliding_window_by_hand(void)
{
	enum { N = 8, WIN = 3 };
	struct spec s = {.arch = "mistral", .sliding_window = WIN, .flat_attn = 1};
	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(load_spec(&s, &m, err) == 0, "%s", err);
	const int32_t ids[N] = {1, 5, 9, 13, 17, 21, 25, 29};
	struct ref_engine *e = ref_new(&m, N, err);
	REQUIRE(e, "%s", err);
	float *lg = malloc(sizeof(float) * N * V);
	REQUIRE(ref_eval(e, ids, N, lg) == 0);
	ref_free(e);
	double md = by_hand(&m, ids, N, lg, WIN), full = by_hand(&m, ids, N, lg, N);
	CHECK(md < 1e-4, "window of %d by hand vs the reference engine: max |d| %g", WIN, md);
	CHECK(full > 1e-2, "the window has no effect: %g", full); // the test can tell
	printf("mistral, window %d, by hand vs the reference engine: max |logit diff| %.2e (%.2e without the "
	       "window)\n",
	       WIN, md, full);
	free(lg);
	model_free(&m);
}

static void
test_rope_override(void)
{
	char err[AD_ERRLEN] = "";
	struct model m;
	const int32_t ids[8] = {1, 403, 407, 261, 378, 432, 383, 286};
	float *lg[3];
	enum model_rope modes[3] = {MODEL_ROPE_AUTO, MODEL_ROPE_NORM, MODEL_ROPE_NEOX};
	for (int k = 0; k < 3; k++) {
		REQUIRE(model_load(&m, MODELS "/llama.gguf", err) == 0, "%s", err);
		if (modes[k])
			m.hp.rope = modes[k];
		struct ref_engine *e = ref_new(&m, 8, err);
		model_free(&m);
		REQUIRE(e, "%s", err);
		lg[k] = malloc(8 * 512 * sizeof(float));
		CHECK(ref_eval(e, ids, 8, lg[k]) == 0);
		ref_free(e);
	}
	double d_norm = 0, d_neox = 0;
	for (int i = 0; i < 8 * 512; i++) {
		d_norm = fmax(d_norm, fabs(lg[0][i] - lg[1][i]));
		d_neox = fmax(d_neox, fabs(lg[0][i] - lg[2][i]));
	}
	CHECK(d_norm == 0, "--rope-adjacent on llama changed the logits by %g", d_norm);
	CHECK(d_neox > 0.5, "--rope-hf on llama moved the logits only %g", d_neox);
	printf("llama: neox instead of norm RoPE moves the logits by %.3f\n", d_neox);
	for (int k = 0; k < 3; k++)
		free(lg[k]);
}

// --- commands ------------------------------------------------------------------

// run a command with stdout sent to a file; returns its exit status
static int
run(int (*cmd)(int, char **), const char *out, int argc, const char **argv)
{
	fflush(stdout);
	int saved = dup(1);
	int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	dup2(fd, 1);
	close(fd);
	int rc = cmd(argc, (char **)argv);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	return rc;
}

#define RUN(cmd, ...)                                                                                                  \
	({                                                                                                             \
		const char *argv_[] = {__VA_ARGS__};                                                                   \
		run(cmd, tmp("out.txt"), (int)(sizeof argv_ / sizeof argv_[0]), argv_);                                \
	})

static void
test_cmd_usage(void)
{
	const char *st = MODELS "/stories260K.gguf";
	CHECK(RUN(cmd_cpu, "cpu") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st) == 2); // no prompt
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1", "--prompt", "x") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1", "--max-tokens", "12x") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1", "--max-tokens", "-1") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1", "--max-seq", "") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1,,2") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1,x") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1,600") == 2); // outside the vocabulary
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1", "--max-tokens", "8", "--max-seq", "4") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids", "1", "--bogus") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", st, "--prompt-ids") == 2);
	CHECK(RUN(cmd_cpu, "cpu", "--model", tmp("absent.gguf"), "--prompt-ids", "1") == 1);
	CHECK(RUN(cmd_info, "info", "--model") == 2);
	CHECK(RUN(cmd_info, "info", "--what") == 2);
	CHECK(RUN(cmd_info, "info", "--model", tmp("absent.gguf")) == 1);
}

static void
test_cmd_cpu(void)
{
	const char *dump = tmp("dump.bin");
	int rc = RUN(cmd_cpu, "cpu", "--model", MODELS "/stories260K.gguf", "--prompt-ids", "1,403,407,261,378",
	             "--max-tokens", "64", "--ignore-eos", "--json", "--dump-logits", dump);
	CHECK(rc == 0);
	size_t n;
	char *out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	cJSON *j = cJSON_Parse(out);
	free(out);
	REQUIRE(j, "stdout is not one JSON object");
	char *fx = t_read_file(MODELS "/stories260K.json", &n);
	cJSON *want = cJSON_Parse(fx);
	free(fx);
	REQUIRE(want);
	const cJSON *g = cJSON_GetObjectItemCaseSensitive(j, "generated_ids");
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(want, "greedy_ids");
	CHECK(cJSON_GetArraySize(g) == 64 && cJSON_GetArraySize(w) == 64);
	int same = 0;
	for (int i = 0; i < cJSON_GetArraySize(g); i++)
		same += cJSON_GetArrayItem(g, i)->valueint == cJSON_GetArrayItem(w, i)->valueint;
	CHECK(same == 64, "%d of 64 ids match", same);
	CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "prompt_ids")) == 5);
	const cJSON *top = cJSON_GetObjectItemCaseSensitive(j, "top5");
	CHECK(cJSON_GetArraySize(top) == 64 && cJSON_GetArraySize(cJSON_GetArrayItem(top, 0)) == 5);
	const cJSON *t0 = cJSON_GetArrayItem(cJSON_GetArrayItem(top, 0), 0);
	CHECK(cJSON_GetObjectItemCaseSensitive(t0, "id")->valueint == cJSON_GetArrayItem(w, 0)->valueint);
	const cJSON *tm = cJSON_GetObjectItemCaseSensitive(j, "timings");
	CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tm, "decode_tok_s")));
	CHECK(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(tm, "prefill_ms")));
	cJSON_Delete(j);
	cJSON_Delete(want);

	// the dump has the fixture layout: 69 rows of 512
	float *d = t_read_file(dump, &n);
	float *ref = t_read_file(MODELS "/stories260K.fp32ref.bin", &n);
	REQUIRE(d && ref);
	double mx = 0;
	for (size_t i = 0; i < 69 * 512; i++)
		mx = fmax(mx, fabs((double)d[i] - ref[i]));
	CHECK(mx < 5e-4, "dump vs fp32ref %g", mx);
	free(d);
	free(ref);

	// text output and the rope override
	CHECK(RUN(cmd_cpu, "cpu", "--model", MODELS "/llama.gguf", "--prompt-ids", "1,403", "--max-tokens", "3",
	          "--rope-hf") == 0);
	out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "generated ids:") && strstr(out, "neox") && strstr(out, "tok/s") && strstr(out, "peak rss"),
	      "%s", out);
	free(out);
}

// --prompt goes through the model's tokenizer when the build has one
static void
test_cmd_prompt(void)
{
	int rc = RUN(cmd_cpu, "cpu", "--model", MODELS "/stories260K.gguf", "--prompt", "Once upon a time",
	             "--max-tokens", "3", "--json");
#ifdef AD_HAVE_TOKENIZER
	CHECK(rc == 0);
	size_t n;
	char *out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	cJSON *j = cJSON_Parse(out);
	free(out);
	REQUIRE(j);
	const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt_ids");
	const int want[5] = {1, 403, 407, 261, 378};
	CHECK(cJSON_GetArraySize(p) == 5);
	for (int i = 0; i < 5 && i < cJSON_GetArraySize(p); i++)
		CHECK(cJSON_GetArrayItem(p, i)->valueint == want[i]);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "text");
	CHECK(cJSON_IsString(t) && !strcmp(t->valuestring, ", there was"), "%s",
	      cJSON_IsString(t) ? t->valuestring : "");
	cJSON_Delete(j);
#else
	CHECK(rc == 2, "--prompt without a tokenizer must be a usage error");
#endif
}

static void
test_cmd_info(void)
{
	CHECK(RUN(cmd_info, "info") == 0);
	size_t n;
	char *out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "cpu   fp32 reference engine: yes") &&
	              strstr(out, "emu   the ANE programs executed on the CPU: yes") &&
	              strstr(out, "ane   Apple Neural Engine: not in this build"),
	      "%s", out);
	free(out);
	CHECK(RUN(cmd_info, "info", "--model", MODELS "/qwen2moe.gguf") == 0);
	out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "qwen2moe") && strstr(out, "experts") && strstr(out, "F32:") && strstr(out, "KV cache"), "%s",
	      out);
	free(out);
	CHECK(RUN(cmd_info, "info", "--model", MODELS "/llama256_q6_k.gguf") == 0);
	out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "Q6_K:") && strstr(out, "norm (adjacent"), "%s", out);
	free(out);
	CHECK(RUN(cmd_info, "info", "--model", T_DATA "/models2/phi3_longrope.gguf") == 0);
	out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "24 dims") &&
	              strstr(out, "longrope (original context 4: short factors up to it, long beyond)") &&
	              strstr(out, "cos/sin x1.73205") && strstr(out, "kernels per layer          qkv + o + ffn (3)"),
	      "%s", out);
	free(out);
	CHECK(RUN(cmd_info, "info", "--model", T_DATA "/models2/llama_yarn.gguf") == 0);
	out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "yarn x4 from an original context of 64 (beta fast 32, slow 1"), "%s", out);
	free(out);
	CHECK(RUN(cmd_info, "info", "--model", T_DATA "/models2/qwen3moe.gguf") == 0);
	out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "qwen3moe") && strstr(out, "8, 2 used, size 64, shared 0, renormalised") &&
	              strstr(out, "per head, before RoPE") && strstr(out, "qkv + o (2)") &&
	              strstr(out, "routed experts on the CPU"),
	      "%s", out);
	free(out);
	CHECK(RUN(cmd_info, "info", "--model", T_DATA "/models2/hunyuan_dense.gguf") == 0);
	out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "hunyuan-dense") && strstr(out, "per head, after RoPE"), "%s", out);
	free(out);
	CHECK(RUN(cmd_info, "info", "--model", T_DATA "/models2/lfm2moe.gguf") == 0);
	out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out,
	             "ShortConv blocks           3 of 5 (3 taps, the conv and its state on the CPU): 0,1,3; attention on 2,4") &&
	              strstr(out, "8, 2 used, size 32, shared 0, renormalised, sigmoid router") &&
	              strstr(out, "dense blocks first         2, feed-forward 192") && strstr(out, "exp_probs_b") &&
	              strstr(out, "in_proj + out_proj + ffn (3) on ShortConv layers (first: 0)") &&
	              strstr(out, "qkv + o (2) on attention MoE layers (first: 2)") &&
	              strstr(out, "in_proj + out_proj (2) on ShortConv MoE layers (first: 3)") &&
	              strstr(out, "kernels in all             13 with 1 LM-head chunk; routed experts on the CPU"),
	      "%s", out);
	free(out);
	CHECK(RUN(cmd_info, "info", "--arch", "gpt9") == 2);
	unsetenv("ANEDVD_ARCH");
}

static cJSON *
route_json(const char *model, const char *ids, const char *max_tokens)
{
	if (RUN(cmd_route, "route", "--model", model, "--prompt-ids", ids, "--max-tokens", max_tokens, "--json") != 0)
		return NULL;
	size_t n;
	char *out = t_read_file(tmp("out.txt"), &n);
	cJSON *j = out ? cJSON_Parse(out) : NULL;
	free(out);
	return j;
}

static double
vec_rms(const float *x, int n)
{
	double ss = 0;
	for (int i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	return sqrt(ss / n);
}

// the experts qwen3moe's layer 0 picks for token id 1 at position 0, by
// hand from the weights: one position, so attention returns each KV
// head's own v (no q, k, norms or RoPE involved); then the residual, the
// FFN norm and the router's two largest logits (softmax keeps the order)
static void
route_by_hand(const struct model *m, int *e0, int *e1, double *gap)
{
	const int nE = (int)m->hp.n_embd, hd = (int)m->hp.head_dim, nkv = (int)m->hp.n_head_kv;
	const int nh = (int)m->hp.n_head, ne = (int)m->hp.n_expert;
	const struct model_layer *l0 = &m->layers[0];
	const float *emb = (const float *)m->tok_embd.data + (size_t)1 * nE;
	float x[128] = {0}, xn[128] = {0}, v[512] = {0}, att[1024] = {0}, r[64] = {0};
	REQUIRE(nE <= 128 && nkv * hd <= 512 && nh * hd <= 1024 && ne <= 64 && m->tok_embd.type == 0);
	double s = vec_rms(emb, nE);
	for (int i = 0; i < nE; i++)
		xn[i] = (float)(emb[i] / sqrt(s * s + m->hp.rms_eps)) * ((const float *)l0->attn_norm.data)[i];
	for (int o = 0; o < nkv * hd; o++) {
		double acc = 0;
		for (int i = 0; i < nE; i++)
			acc += (double)((const float *)l0->wv.data)[(size_t)o * nE + i] * xn[i];
		v[o] = (float)acc;
	}
	for (int h = 0; h < nh; h++)
		memcpy(att + h * hd, v + (h / (nh / nkv)) * hd, (size_t)hd * sizeof(float));
	for (int o = 0; o < nE; o++) {
		double acc = 0;
		for (int i = 0; i < nh * hd; i++)
			acc += (double)((const float *)l0->wo.data)[(size_t)o * nh * hd + i] * att[i];
		x[o] = emb[o] + (float)acc;
	}
	s = vec_rms(x, nE);
	for (int i = 0; i < nE; i++)
		xn[i] = (float)(x[i] / sqrt(s * s + m->hp.rms_eps)) * ((const float *)l0->ffn_norm.data)[i];
	for (int o = 0; o < ne; o++) {
		double acc = 0;
		for (int i = 0; i < nE; i++)
			acc += (double)((const float *)l0->gate_inp.data)[(size_t)o * nE + i] * xn[i];
		r[o] = (float)acc;
	}
	*e0 = 0;
	for (int o = 1; o < ne; o++)
		*e0 = r[o] > r[*e0] ? o : *e0;
	*e1 = *e0 == 0 ? 1 : 0;
	for (int o = 0; o < ne; o++)
		*e1 = o != *e0 && r[o] > r[*e1] ? o : *e1;
	double third = -INFINITY;
	for (int o = 0; o < ne; o++)
		if (o != *e0 && o != *e1 && r[o] > third)
			third = r[o];
	*gap = r[*e1] - third;
}

static void
test_cmd_route(void)
{
	const char *q3 = T_DATA "/models2/qwen3moe.gguf", *lf = T_DATA "/models2/lfm2moe.gguf";
	// one token: layer 0 of qwen3moe picks the two experts the weights say
	char err[AD_ERRLEN] = "";
	struct model m;
	REQUIRE(model_load(&m, q3, err) == 0, "%s", err);
	int e0, e1;
	double gap;
	route_by_hand(&m, &e0, &e1, &gap);
	model_free(&m);
	CHECK(gap > 1e-3, "a near-tie between the second and third expert: %g", gap);
	cJSON *j = route_json(q3, "1", "0");
	REQUIRE(j, "route --json did not print JSON");
	const cJSON *layers = cJSON_GetObjectItem(j, "layers");
	CHECK(cJSON_GetArraySize(layers) == 2 && cJSON_GetObjectItem(j, "tokens")->valueint == 1);
	const cJSON *c0 = cJSON_GetObjectItem(cJSON_GetArrayItem(layers, 0), "counts");
	for (int x = 0; x < 8; x++)
		CHECK(cJSON_GetArrayItem(c0, x)->valueint == (x == e0 || x == e1), "expert %d (by hand: %d, %d)", x, e0,
		      e1);
	printf("qwen3moe, token 1 at position 0: layer 0 routes to experts %d and %d, by hand and by route\n", e0, e1);
	cJSON_Delete(j);

	// lfm2moe, prompt + 16 greedy: only the MoE blocks 2-4, each counting 2
	// experts for every token fed (the last generated one is not), and the
	// generated ids are the fixture's greedy ones
	j = route_json(lf, "1,403,407,261,378,432,383,286", "16");
	REQUIRE(j);
	layers = cJSON_GetObjectItem(j, "layers");
	CHECK(cJSON_GetArraySize(layers) == 3 && cJSON_GetObjectItem(j, "tokens")->valueint == 23);
	for (int l = 0; l < cJSON_GetArraySize(layers); l++) {
		const cJSON *ly = cJSON_GetArrayItem(layers, l), *c = cJSON_GetObjectItem(ly, "counts");
		int sum = 0;
		for (int x = 0; x < cJSON_GetArraySize(c); x++)
			sum += cJSON_GetArrayItem(c, x)->valueint;
		CHECK(cJSON_GetObjectItem(ly, "layer")->valueint == l + 2 && cJSON_GetArraySize(c) == 8 && sum == 46,
		      "layer %d: %d", l, sum);
	}
	const int greedy[16] = {198, 242, 454, 114, 365, 504, 348, 192, 315, 470, 190, 419, 147, 508, 441, 6};
	const cJSON *g = cJSON_GetObjectItem(j, "generated_ids");
	CHECK(cJSON_GetArraySize(g) == 16);
	for (int i = 0; i < 16 && i < cJSON_GetArraySize(g); i++)
		CHECK(cJSON_GetArrayItem(g, i)->valueint == greedy[i]);
	cJSON_Delete(j);
	// the expert bias changes the choice: a histogram without it differs
	// (README: ignoring it moves the logits by 1.8), checked through ref.c
	REQUIRE(model_load(&m, lf, err) == 0, "%s", err);
	const int32_t ids[8] = {1, 403, 407, 261, 378, 432, 383, 286};
	int64_t with[5 * 8] = {0}, without[5 * 8] = {0};
	float lg[8 * 512];
	struct ref_engine *re = ref_new(&m, 8, err);
	REQUIRE(re, "%s", err);
	ref_route_hist(re, with);
	CHECK(ref_eval(re, ids, 8, lg) == 0);
	ref_free(re);
	for (int il = 2; il < 5; il++)
		m.layers[il].exp_probs_b = (struct model_tensor){0};
	re = ref_new(&m, 8, err);
	REQUIRE(re, "%s", err);
	ref_route_hist(re, without);
	CHECK(ref_eval(re, ids, 8, lg) == 0);
	ref_free(re);
	model_free(&m);
	CHECK(memcmp(with, without, sizeof with) != 0, "the selection bias changed no choice");
	for (int il = 0; il < 2; il++)
		for (int x = 0; x < 8; x++)
			CHECK(with[il * 8 + x] == 0, "dense layer %d counted", il);

	// the text table; and the refusals
	CHECK(RUN(cmd_route, "route", "--model", lf, "--prompt-ids", "1,403,407") == 0);
	size_t n;
	char *out = t_read_file(tmp("out.txt"), &n);
	REQUIRE(out);
	CHECK(strstr(out, "sigmoid router with selection bias") &&
	              strstr(out, "tokens routed: 3 (3 of the prompt, 0 generated)") && strstr(out, "\n    2 ") &&
	              strstr(out, "\n    4 ") && !strstr(out, "\n    1 "),
	      "%s", out);
	free(out);
	CHECK(RUN(cmd_route, "route", "--model", T_DATA "/models2/lfm2.gguf", "--prompt-ids", "1") == 1);
	CHECK(RUN(cmd_route, "route", "--model", lf) == 2);
	CHECK(RUN(cmd_route, "route", "--prompt-ids", "1") == 2);
	CHECK(RUN(cmd_route, "route", "--model", lf, "--prompt-ids", "1,9999") == 2);
	CHECK(RUN(cmd_route, "route", "--model", lf, "--prompt-ids", "1", "--max-tokens", "-1") == 2);
	CHECK(RUN(cmd_route, "route", "--model", lf, "--prompt-ids", "1", "--bogus") == 2);
	CHECK(RUN(cmd_route, "route", "--model", lf, "--prompt-ids") == 2);
	CHECK(RUN(cmd_route, "route", "--help") == 0);
}

int
main(void)
{
	T_RUN(test_fixture_hparams);
	T_RUN(test_fixture2_hparams);
	T_RUN(test_yarn_keys);
	T_RUN(test_lfm2);
	T_RUN(test_gemma4);
	T_RUN(test_arch_facts);
	T_RUN(test_errors);
	T_RUN(test_unknown_arch_with_llama_tensors);
	T_RUN(test_loader_api);
	T_RUN(test_sliding_window_and_nope);
	T_RUN(test_sliding_window_by_hand);
	T_RUN(test_rope_override);
	T_RUN(test_cmd_usage);
	T_RUN(test_cmd_cpu);
	T_RUN(test_cmd_prompt);
	T_RUN(test_cmd_info);
	T_RUN(test_cmd_route);
	return t_done();
}
