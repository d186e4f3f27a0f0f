// cmd-genmodel.c - see cmd-genmodel.h.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd-genmodel.h"
#include "fp16.h"
#include "gguf.h"
#include "wtype.h"

struct preset {
	const char *name, *arch;
	int64_t E, L, H, KV, FF, V;
	int tied, qkv_bias;
	float rope_base, eps;
};

static const struct preset presets[] = {
	{"tiny", "llama", 64, 2, 4, 2, 128, 320, 0, 0, 10000.0f, 1e-5f},
	{"think", "llama", 64, 2, 4, 2, 128, 320, 0, 0, 10000.0f, 1e-5f},
	{"smollm2-135m", "llama", 576, 30, 9, 3, 1536, 49152, 1, 0, 100000.0f, 1e-5f},
	{"qwen2.5-0.5b", "qwen2", 896, 24, 14, 2, 4864, 151936, 1, 1, 1000000.0f, 1e-6f},
};

// splitmix64: a stream per tensor, so the values do not depend on order
static uint64_t
mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t
name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static uint32_t
type_of(const char *w)
{
	if (!strcmp(w, "f32"))
		return AD_TYPE_F32;
	if (!strcmp(w, "f16"))
		return AD_TYPE_F16;
	if (!strcmp(w, "bf16"))
		return AD_TYPE_BF16;
	if (!strcmp(w, "q8_0"))
		return AD_TYPE_Q8_0;
	if (!strcmp(w, "q4_0"))
		return AD_TYPE_Q4_0;
	return UINT32_MAX;
}

// one tensor [ne1][ne0]: base + spread * uniform(-1, 1), stored as type
// one block of 32 weights as ggml's reference quantisers write it: q4_0,
// the fp16 scale (the value of the largest magnitude, signed, / -8) and 32
// nibbles; q8_0, the fp16 scale (largest |x| / 127) and 32 int8
static void
q4_0_block(const float *x, uint8_t *out)
{
	float amax = 0, max = 0;
	for (int j = 0; j < 32; j++)
		if (fabsf(x[j]) > amax) {
			amax = fabsf(x[j]);
			max = x[j];
		}
	float dd = max / -8, id = dd ? 1.0f / dd : 0;
	uint16_t h = ad_f32_to_fp16(dd);
	memcpy(out, &h, 2);
	for (int j = 0; j < 16; j++) {
		int a = (int)(int8_t)(x[j] * id + 8.5f), c = (int)(int8_t)(x[16 + j] * id + 8.5f);
		out[2 + j] = (uint8_t)((a < 15 ? a : 15) | (c < 15 ? c : 15) << 4);
	}
}

static void
q8_0_block(const float *x, uint8_t *out)
{
	float amax = 0;
	for (int j = 0; j < 32; j++)
		amax = fmaxf(amax, fabsf(x[j]));
	float dd = amax / 127.0f, id = dd ? 1.0f / dd : 0;
	uint16_t h = ad_f32_to_fp16(dd);
	memcpy(out, &h, 2);
	for (int j = 0; j < 32; j++)
		out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
}

static int
put(struct gguf_writer *w, uint64_t seed, const char *name, int64_t ne0, int64_t ne1, float base, float spread,
    uint32_t type, char *err)
{
	size_t n = (size_t)(ne0 * ne1);
	float *d = malloc(n * sizeof *d);
	if (!d)
		return ad_err(err, "out of memory");
	uint64_t s = seed ^ name_hash(name);
	for (size_t i = 0; i < n; i++)
		d[i] = base + spread * ((float)(mix(&s) >> 40) / 8388608.0f - 1.0f);
	int64_t ne[2] = {ne0, ne1};
	uint32_t nd = ne1 > 1 ? 2 : 1;
	void *buf = d;
	size_t nbytes = n * sizeof *d;
	if (ne1 == 1 || type == AD_TYPE_F32) {
		type = AD_TYPE_F32;
	} else if (type == AD_TYPE_F16 || type == AD_TYPE_BF16) {
		uint16_t *h = malloc(n * sizeof *h);
		if (!h) {
			free(d);
			return ad_err(err, "out of memory");
		}
		for (size_t i = 0; i < n; i++)
			h[i] = type == AD_TYPE_F16 ? ad_f32_to_fp16(d[i]) : ad_f32_to_bf16(d[i]);
		buf = h;
		nbytes = n * sizeof *h;
	} else { // q4_0 or q8_0: blocks of 32 weights, each an fp16 scale and its values
		const size_t bsz = type == AD_TYPE_Q4_0 ? 18 : 34;
		if (ne0 % 32) {
			free(d);
			return ad_err(err, "%s: %lld columns is not a multiple of 32 (%s)", name, (long long)ne0,
			              type == AD_TYPE_Q4_0 ? "q4_0" : "q8_0");
		}
		size_t nb = n / 32;
		uint8_t *q = malloc(nb * bsz);
		if (!q) {
			free(d);
			return ad_err(err, "out of memory");
		}
		for (size_t b = 0; b < nb; b++)
			(type == AD_TYPE_Q4_0 ? q4_0_block : q8_0_block)(d + b * 32, q + b * bsz);
		buf = q;
		nbytes = nb * bsz;
	}
	int rc = gguf_writer_tensor(w, name, type, nd, ne, buf, nbytes, err);
	if (buf != d)
		free(buf);
	free(d);
	return rc;
}

// the think preset: its extra vocabulary (after the bytes) and its script
static const struct {
	const char *piece;
	int32_t type; // 1 normal, 3 control, 4 user-defined
} think_vocab[] = {
	{"<|im_start|>", 3},       {"<|im_end|>", 3}, {"<think>", 4}, {"</think>", 4}, {"<tool_call>", 4},
	{"</tool_call>", 4},       {"\n", 1},         {"\n\n", 1},    {"Let", 1},      {"\xe2\x96\x81me", 1},
	{"\xe2\x96\x81think.", 1}, {"Hello", 1},      {"!", 1},
};
static const char *const think_script[][2] = {
	{"\n", "<think>"},
	{"<think>", "Let"},
	{"Let", "\xe2\x96\x81me"},
	{"\xe2\x96\x81me", "\xe2\x96\x81think."},
	{"\xe2\x96\x81think.", "</think>"},
	{"</think>", "\n\n"},
	{"\n\n", "Hello"},
	{"Hello", "!"},
	{"!", "<|im_end|>"},
};
#define THINK_FIRST 259 // the index of think_vocab[0]

static int64_t
think_id(const char *piece)
{
	for (size_t i = 0; i < sizeof think_vocab / sizeof think_vocab[0]; i++)
		if (!strcmp(think_vocab[i].piece, piece))
			return THINK_FIRST + (int64_t)i;
	return -1;
}

// a tensor of given values, stored as type (2-D ones; 1-D stay f32)
static int
put_values(struct gguf_writer *w, const char *name, float *d, int64_t ne0, int64_t ne1, uint32_t type, char *err)
{
	int64_t ne[2] = {ne0, ne1};
	uint32_t nd = ne1 > 1 ? 2 : 1;
	size_t n = (size_t)(ne0 * ne1);
	if (nd == 1 || type == AD_TYPE_F32)
		return gguf_writer_tensor(w, name, AD_TYPE_F32, nd, ne, d, n * sizeof *d, err);
	uint16_t *h = malloc(n * sizeof *h);
	if (!h)
		return ad_err(err, "out of memory");
	for (size_t i = 0; i < n; i++)
		h[i] = type == AD_TYPE_BF16 ? ad_f32_to_bf16(d[i]) : ad_f32_to_fp16(d[i]);
	int rc = gguf_writer_tensor(w, name, type == AD_TYPE_BF16 ? AD_TYPE_BF16 : AD_TYPE_F16, nd, ne, h,
	                            n * sizeof *h, err);
	free(h);
	return rc;
}

// the think preset's weights: see cmd-genmodel.h
static int
think_weights(struct gguf_writer *w, int64_t E, int64_t L, int64_t H, int64_t KV, int64_t FF, int64_t V, uint32_t type,
              char *err)
{
	int64_t hd = E / H, big = V * E > FF * E ? V * E : FF * E;
	float *z = calloc((size_t)(big > H * hd * E ? big : H * hd * E), sizeof *z),
	      *emb = calloc((size_t)(V * E), sizeof *emb), *out = calloc((size_t)(V * E), sizeof *out),
	      *ones = malloc((size_t)E * sizeof *ones);
	int rc = -1;
	if (!z || !emb || !out || !ones) {
		ad_err(err, "out of memory");
		goto done;
	}
	for (int64_t i = 0; i < E; i++)
		ones[i] = 1;
	// token "from" gets its own direction k; the output row of "to" reads it
	for (size_t k = 0; k < sizeof think_script / sizeof think_script[0]; k++) {
		int64_t from = think_id(think_script[k][0]), to = think_id(think_script[k][1]);
		emb[from * E + (int64_t)k] = 1;
		out[to * E + (int64_t)k] = 10;
	}
	char name[96];
	rc = put_values(w, "token_embd.weight", emb, E, V, type, err) ||
	     put_values(w, "output_norm.weight", ones, E, 1, type, err) ||
	     put_values(w, "output.weight", out, E, V, type, err);
	for (int64_t il = 0; il < L && !rc; il++) {
#define Z(what, n0, n1)                                                                                                \
	(snprintf(name, sizeof name, "blk.%lld." what, (long long)il), put_values(w, name, z, n0, n1, type, err))
#define ONE(what)                                                                                                      \
	(snprintf(name, sizeof name, "blk.%lld." what, (long long)il), put_values(w, name, ones, E, 1, type, err))
		rc = ONE("attn_norm.weight") || Z("attn_q.weight", E, H * hd) || Z("attn_k.weight", E, KV * hd) ||
		     Z("attn_v.weight", E, KV * hd) || Z("attn_output.weight", H * hd, E) || ONE("ffn_norm.weight") ||
		     Z("ffn_gate.weight", E, FF) || Z("ffn_up.weight", E, FF) || Z("ffn_down.weight", FF, E);
#undef Z
#undef ONE
	}
done:
	free(z);
	free(emb);
	free(out);
	free(ones);
	return rc ? -1 : 0;
}

static void
vocab(struct gguf_writer *w, int64_t V, int think, int eos)
{
	char **tok = calloc((size_t)V, sizeof *tok);
	float *score = calloc((size_t)V, sizeof *score);
	int32_t *type = calloc((size_t)V, sizeof *type);
	for (int64_t i = 0; i < V; i++) {
		char b[32];
		if (i == 0)
			snprintf(b, sizeof b, "<unk>");
		else if (i == 1)
			snprintf(b, sizeof b, "<s>");
		else if (i == 2)
			snprintf(b, sizeof b, "</s>");
		else if (i < 259)
			snprintf(b, sizeof b, "<0x%02X>", (unsigned)(i - 3));
		else
			snprintf(b, sizeof b, "\xe2\x96\x81w%lld", (long long)(i - 259));
		tok[i] = strdup(b);
		type[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
		score[i] = i < 259 ? 0.0f : -(float)(i - 259);
		if (think && i >= THINK_FIRST &&
		    i - THINK_FIRST < (int64_t)(sizeof think_vocab / sizeof think_vocab[0])) {
			free(tok[i]);
			tok[i] = strdup(think_vocab[i - THINK_FIRST].piece);
			type[i] = think_vocab[i - THINK_FIRST].type;
		}
	}
	gguf_writer_str(w, "tokenizer.ggml.model", "llama");
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)V);
	gguf_writer_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, score, (uint64_t)V);
	gguf_writer_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, type, (uint64_t)V);
	gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 1);
	// Qwen3 ends a turn, and a reply, with <|im_end|> and adds no BOS
	if (eos > 0) {
		gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
		gguf_writer_u32(w, "tokenizer.ggml.eot_token_id", (uint32_t)eos);
	} else {
		gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", think ? (uint32_t)think_id("<|im_end|>") : 2);
	}
	gguf_writer_u32(w, "tokenizer.ggml.unknown_token_id", 0);
	gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", !think);
	if (think) // byte-level BPE like Qwen's puts no space after special tokens
		gguf_writer_bool(w, "tokenizer.ggml.add_space_prefix", 0);
	for (int64_t i = 0; i < V; i++)
		free(tok[i]);
	free(tok);
	free(score);
	free(type);
}

int
genmodel_write(const struct genmodel *g, const char *path, char *err)
{
	const struct preset *p = NULL;
	for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
		if (!strcmp(presets[i].name, g->preset))
			p = &presets[i];
	if (!p)
		return ad_err(err, "unknown preset '%s' (tiny, smollm2-135m, qwen2.5-0.5b, think)", g->preset);
	int think = !strcmp(p->name, "think");
	uint32_t type = type_of(g->wtype ? g->wtype : "f16");
	if (type == UINT32_MAX)
		return ad_err(err, "unknown weight type '%s' (f32, f16, bf16, q8_0, q4_0)", g->wtype);
	int64_t E = p->E, L = g->n_layer > 0 ? g->n_layer : p->L, H = p->H, KV = p->KV, FF = p->FF, V = p->V;
	int64_t hd = E / H;
	const char *a = p->arch;
	char key[128], name[96];
	struct gguf_writer *w = gguf_writer_new();
	if (!w)
		return ad_err(err, "out of memory");
	gguf_writer_str(w, "general.architecture", a);
	snprintf(name, sizeof name, "gen-%s-%s", p->name, g->wtype ? g->wtype : "f16");
	gguf_writer_str(w, "general.name", name);
#define KU(k, v) (snprintf(key, sizeof key, "%s." k, a), gguf_writer_u32(w, key, (uint32_t)(v)))
#define KF(k, v) (snprintf(key, sizeof key, "%s." k, a), gguf_writer_f32(w, key, (v)))
	KU("context_length", 4096);
	KU("embedding_length", E);
	KU("block_count", L);
	KU("feed_forward_length", FF);
	KU("attention.head_count", H);
	KU("attention.head_count_kv", KV);
	KU("rope.dimension_count", hd);
	KF("rope.freq_base", p->rope_base);
	KF("attention.layer_norm_rms_epsilon", p->eps);
#undef KU
#undef KF
	vocab(w, V, think, g->eos);
	if (g->chat_template)
		gguf_writer_str(w, "tokenizer.chat_template", g->chat_template);
	if (think) {
		int rc = think_weights(w, E, L, H, KV, FF, V, type, err);
		if (!rc)
			rc = gguf_writer_save(w, path, err);
		gguf_writer_free(w);
		return rc ? -1 : 0;
	}
	uint64_t sd = g->seed;
	float se = 1.0f / sqrtf((float)E), sf = 1.0f / sqrtf((float)FF);
	int rc = put(w, sd, "token_embd.weight", E, V, 0, 1.0f, type, err) ||
	         put(w, sd, "output_norm.weight", E, 1, 1, 0.05f, type, err) ||
	         (!p->tied && put(w, sd, "output.weight", E, V, 0, se, type, err));
	for (int64_t il = 0; il < L && !rc; il++) {
#define T(what, n0, n1, base, spread)                                                                                  \
	(snprintf(name, sizeof name, "blk.%lld." what, (long long)il),                                                 \
	 put(w, sd, name, n0, n1, base, spread, type, err))
		rc = T("attn_norm.weight", E, 1, 1, 0.05f) || T("attn_q.weight", E, H * hd, 0, se) ||
		     T("attn_k.weight", E, KV * hd, 0, se) || T("attn_v.weight", E, KV * hd, 0, se) ||
		     T("attn_output.weight", H * hd, E, 0, se) || T("ffn_norm.weight", E, 1, 1, 0.05f) ||
		     T("ffn_gate.weight", E, FF, 0, se) || T("ffn_up.weight", E, FF, 0, se) ||
		     T("ffn_down.weight", FF, E, 0, sf);
		if (!rc && p->qkv_bias)
			rc = T("attn_q.bias", H * hd, 1, 0, 0.1f) || T("attn_k.bias", KV * hd, 1, 0, 0.1f) ||
			     T("attn_v.bias", KV * hd, 1, 0, 0.1f);
#undef T
	}
	if (!rc)
		rc = gguf_writer_save(w, path, err);
	gguf_writer_free(w);
	return rc ? -1 : 0;
}
