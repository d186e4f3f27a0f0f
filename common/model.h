// model.h - a transformer model: architecture, hyper-parameters and typed
// weight views, loaded from a GGUF file or a Hugging Face directory.
//
// Weights are never copied: every struct model_tensor points into a mapping
// that the model owns (the GGUF file, or the safetensors files of an HF
// directory) and keeps its storage type (F32, F16, BF16 or a ggml quant).
// Consumers dequantise what they need (the reference engine all of it at
// once, the pipeline one layer at a time).
//
// model_load picks the format from the path: a name ending in ".gguf" is a
// GGUF file, anything else an HF directory. Loading validates everything a
// forward pass relies on: every tensor the architecture needs is present,
// has the shape the hyper-parameters imply and a type that can be
// dequantised; failures name the tensor. A model that loaded can be run.
//
// Loaders for other formats (model-hf.c) work in three steps:
//   1. model_init(m) and fill m->arch (model_arch_from_name) and m->hp;
//      zero means "not given" for the optional fields listed in
//      struct model_hparams, model_finish fills the architecture default;
//   2. model_add_tensor() for every weight, under its GGUF name
//      ("blk.3.attn_q.weight"), with ne[] fastest dimension first;
//   3. set m->src / m->src_free to release the mappings, then model_finish().
// On failure of any step the loader calls model_free(m).
#ifndef AD_MODEL_H
#define AD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

enum model_arch {
	MODEL_ARCH_LLAMA = 0, // also SmolLM2, TinyLlama, stories
	MODEL_ARCH_MISTRAL,   // llama + sliding window on every layer
	MODEL_ARCH_SMOLLM3,   // llama with no RoPE on every 4th layer
	MODEL_ARCH_QWEN2,     // q/k/v biases
	MODEL_ARCH_QWEN3,     // per-head q/k RMSNorm
	MODEL_ARCH_GEMMA2,
	MODEL_ARCH_GEMMA3,
	MODEL_ARCH_PHI3, // fused qkv and gate|up, partial rotary
	MODEL_ARCH_QWEN2MOE,
	MODEL_ARCH_QWEN3MOE,      // qwen3's q/k norms, routed experts only
	MODEL_ARCH_HUNYUAN_DENSE, // llama block, neox RoPE, q/k norms after RoPE
	MODEL_ARCH_LFM2,          // ShortConv blocks (gated 3-tap causal conv) and attention blocks
	MODEL_ARCH_LFM2MOE,       // lfm2 with sigmoid-routed experts after the leading dense blocks
	MODEL_ARCH_GEMMA4,        // per-layer head sizes and FFN widths, shared K/V, per-layer inputs
	MODEL_ARCH_QWEN35,        // gated delta-net blocks (a recurrent state) and gated attention blocks
	MODEL_ARCH_COUNT,
};

// RoPE pairing: NORM rotates adjacent pairs (2i, 2i+1) (ggml's mode 0, the
// GGUF llama convention: the converter permutes llama's q/k rows for it);
// NEOX rotates (i, i + n_rot/2) (HF's rotate_half, i.e. what unpermuted HF
// weights need). AUTO is resolved by model_finish from the architecture.
enum model_rope { MODEL_ROPE_AUTO = 0, MODEL_ROPE_NORM = 1, MODEL_ROPE_NEOX = 2 };

// the FFN activation: SwiGLU's SiLU, or gemma's GELU (tanh form; ggml's
// fp16 table on the CPU, common/numeric.h)
enum model_act { MODEL_ACT_SILU = 0, MODEL_ACT_GELU = 1 };

// RoPE scaling (GGUF rope.scaling.type, HF rope_scaling): LINEAR divides
// positions by the factor (rope_freq_scale); YARN blends interpolated and
// extrapolated frequencies per pair between the correction dims given by
// beta_fast/beta_slow and the original context, and scales cos/sin by
// 1 + 0.1 ln(factor); LONGROPE divides the frequencies by per-pair factors
// (rope_factors_long when the context is longer than the original one,
// rope_factors_short otherwise) and scales cos/sin by rope_attn_factor.
enum model_rope_scaling {
	MODEL_ROPE_SCALING_NONE = 0,
	MODEL_ROPE_SCALING_LINEAR,
	MODEL_ROPE_SCALING_YARN,
	MODEL_ROPE_SCALING_LONGROPE,
};

// one weight: a typed view into the mapping
struct model_tensor {
	const char *name; // GGUF name; NULL when the slot is empty
	uint32_t type;    // enum ad_type (wtype.h)
	uint32_t n_dims;
	int64_t ne[4]; // ne[0] fastest; unused dims are 1
	const void *data;
	size_t nbytes;
	int used; // bound to a slot by model_finish
};

struct model_hparams {
	int64_t n_vocab;
	int64_t n_embd;
	int64_t n_layer;
	int64_t n_head;
	int64_t n_head_kv;     // 0: = n_head
	int64_t head_dim;      // key length; 0: n_embd / n_head
	int64_t head_dim_v;    // value length; 0: = head_dim
	int64_t n_ff;          // dense FFN inner size (0 for MoE-only)
	int64_t n_rot;         // rotary dims per head; 0: = head_dim
	int64_t n_ctx_train;   // 0: unknown
	float rms_eps;         // 0: 1e-5 (1e-6 for qwen/gemma)
	float rope_base;       // 0: 10000
	float rope_freq_scale; // position multiplier (1/linear factor); 0: 1
	float rope_base_swa;   // base on sliding-window layers; 0: = rope_base
	enum model_rope_scaling rope_scaling;
	int64_t n_ctx_orig;     // context the RoPE was trained for (yarn, longrope); 0: n_ctx_train
	float yarn_ext_factor;  // < 0: not given (1 with yarn, else 0)
	float yarn_beta_fast;   // 0: 32
	float yarn_beta_slow;   // 0: 1
	float rope_attn_factor; // cos/sin multiplier (longrope's attention factor); 0: 1
	enum model_rope rope;   // AUTO: from the architecture (an HF loader sets NEOX)
	int64_t sliding_window; // 0: none
	int64_t swa_pattern;    // gemma: layer i slides unless (i+1) % pattern == 0
	float attn_softcap;     // 0: none
	float final_softcap;    // 0: none
	float q_scale;          // 0: 1/sqrt(head_dim)
	int64_t n_expert;       // MoE
	int64_t n_expert_used;
	int64_t n_ff_exp;        // 0: from the tensors
	int64_t n_ff_shexp;      // 0: from the tensors
	int expert_weights_norm; // renormalise the chosen experts' weights
	int64_t n_no_rope_step;  // smollm3: layer i has no RoPE if (i+1) % step == 0
	int qk_norm_post_rope;   // q/k norms after RoPE (hunyuan), not before; set by model_finish
	int64_t n_conv;          // lfm2: taps of the ShortConv (shortconv.l_cache); 0: 3
	int expert_gating;       // 0/1: softmax over the router; 2: sigmoid, chosen by sigmoid + exp_probs_b
	int64_t n_dense_lead;    // MoE: the first n blocks have a dense FFN (leading_dense_block_count)
	// gemma4 (head_dim, head_dim_v, n_rot and n_ff are then the largest of any layer;
	// struct model_layer has each layer's)
	int64_t head_dim_swa, head_dim_v_swa, n_rot_swa; // on sliding layers
	int64_t n_kv_shared; // the last n layers read an earlier layer's K/V (shared_kv_layers)
	int64_t n_embd_pl;   // per-layer input size (embedding_length_per_layer_input); 0: none
	// qwen35's gated delta-net blocks (the ssm.* keys): q, k and v heads of
	// ssm_d_state values, ssm_n_group q/k heads, ssm_dt_rank v heads (v head
	// j reads q/k head j mod ssm_n_group), ssm_d_inner = ssm_dt_rank *
	// ssm_d_state; the causal conv has n_conv taps (ssm.conv_kernel)
	int64_t ssm_d_state, ssm_n_group, ssm_dt_rank, ssm_d_inner;
	int64_t full_attn_interval; // qwen35: layer i attends when (i+1) % interval == 0; 0: 4
	int64_t bos_id, eos_id;     // -1 when unknown
	int64_t pooling;            // GGUF pooling_type: 0 none given, 1 mean, 2 cls, 3 last
	// the architecture's arithmetic, derived by model_finish (a loader's
	// value is replaced): every engine and kernel plan reads these rather
	// than deciding from the architecture
	enum model_act act; // the FFN's activation: gate = act(gate x) * up x
	float embd_scale;   // token embeddings are multiplied by this (gemma: sqrt(n_embd)), else 1
	int q_prescale;     // q itself is multiplied by q_scale before attention (gemma: other
			    // rounding), rather than the scores
};

// the weights of one block; empty slots have name == NULL
struct model_layer {
	struct model_tensor attn_norm;
	struct model_tensor wq, wk, wv, wqkv, wo;
	struct model_tensor bq, bk, bv, bqkv, bo;
	struct model_tensor q_norm, k_norm;
	struct model_tensor post_attn_norm;
	struct model_tensor ffn_norm;
	struct model_tensor gate, up, down;
	struct model_tensor post_ffw_norm;
	// MoE
	struct model_tensor gate_inp;                      // router [n_embd, n_expert]
	struct model_tensor gate_exps, up_exps, down_exps; // 3-D
	struct model_tensor gate_inp_shexp;                // [n_embd]
	struct model_tensor gate_shexp, up_shexp, down_shexp;
	struct model_tensor exp_probs_b; // [n_expert] selection bias (lfm2moe)
	// lfm2 ShortConv block (in place of attention)
	struct model_tensor conv_in;  // shortconv.in_proj [n_embd, 3 n_embd]: rows B, C, X
	struct model_tensor conv_w;   // shortconv.conv [n_conv, n_embd]: taps, the last one the current token
	struct model_tensor conv_out; // shortconv.out_proj [n_embd, n_embd]
	// qwen35 gated delta-net block (in place of attention)
	struct model_tensor dn_qkv;   // attn_qkv [n_embd, 2 n_k d + n_v d]: rows q, k, v (the conv's channels)
	struct model_tensor dn_z;     // attn_gate [n_embd, n_v d]: the output gate
	struct model_tensor dn_conv;  // ssm_conv1d [n_conv, channels]: taps, the last one the current token
	struct model_tensor dn_dt;    // ssm_dt.bias [n_v]
	struct model_tensor dn_a;     // ssm_a [n_v]: -exp(A_log)
	struct model_tensor dn_beta;  // ssm_beta [n_embd, n_v]
	struct model_tensor dn_alpha; // ssm_alpha [n_embd, n_v]
	struct model_tensor dn_norm;  // ssm_norm [d]: the per-head norm of the output
	struct model_tensor dn_out;   // ssm_out [n_v d, n_embd]
	// gemma4
	struct model_tensor out_scale; // layer_output_scale [1]
	struct model_tensor pl_gate;   // inp_gate [n_embd, n_embd_pl]
	struct model_tensor pl_proj;   // proj [n_embd_pl, n_embd]
	struct model_tensor pl_norm;   // post_norm [n_embd]

	// derived per layer by model_finish
	int conv;      // a ShortConv block: no attention, no KV cache (its B*X history instead)
	int recur;     // a gated delta-net block: no attention, no KV cache (a recurrent state instead)
	int attn_gate; // qwen35 attention: wq gives per head q then a gate, attn *= sigmoid(gate)
	int64_t head_dim, head_dim_v, n_rot, n_ff; // this layer's (= hp's but on gemma4)
	int kv_src;       // the layer whose K/V this one attends over (itself but for gemma4's shared)
	int rope_factors; // the model's rope_freqs / longrope factors apply (gemma4: full layers only)
	int sliding;      // attends to the last hp.sliding_window positions only
	int use_rope;
	float rope_base;
	float rope_freq_scale;
};

struct model {
	enum model_arch arch;
	char arch_name[32]; // general.architecture as found in the file
	char name[128];     // general.name or the file name
	char path[1024];
	int is_gguf;
	struct model_hparams hp;

	struct model_tensor tok_embd;
	struct model_tensor output_norm;
	struct model_tensor output; // type/data equal tok_embd's when tied
	int tied_output;
	struct model_tensor rope_freqs;            // optional [n_rot/2]: theta_i /= rope_freqs[i]
	struct model_tensor rope_long, rope_short; // longrope's factors, [n_rot/2]
	struct model_layer *layers;                // hp.n_layer entries
	int64_t *layer_kv_heads;                   // lfm2's per-layer head_count_kv (0: ShortConv), NULL when one value
	int64_t *layer_n_ff;                       // gemma4's per-layer feed_forward_length, NULL when one value
	int8_t *layer_swa;                         // gemma4's sliding_window_pattern (1: sliding), NULL when absent
	int8_t *layer_recr;                // qwen35's attention.recurrent_layers (1: delta-net), NULL when absent
	struct model_tensor pl_tok_embd;   // gemma4 per_layer_token_embd [n_layer * n_embd_pl, n_vocab]
	struct model_tensor pl_model_proj; // per_layer_model_proj [n_embd, n_layer * n_embd_pl]
	struct model_tensor pl_proj_norm;  // per_layer_proj_norm [n_embd_pl]

	// every tensor of the file, by GGUF name (owned names)
	struct model_tensor *tensors;
	int64_t n_tensors, cap_tensors;

	// statistics for `anedvd info`
	size_t file_bytes;
	int64_t n_params;

	// the source: gguf handle for GGUF files (NULL otherwise), and the
	// loader's private state with its destructor
	struct gguf *gguf;
	void *src;
	void (*src_free)(void *src);
};

// --- loading ---------------------------------------------------------------
int model_load(struct model *m, const char *path, char *err);
int model_load_gguf(struct model *m, const char *path, char *err);
// model_drop_range unmaps the pages around [p, p + n) (the 2 MiB-aligned
// window: a fault maps a page's whole large folio) when they lie in a GGUF
// model's file mapping, which is read-only: they stay in the page cache, and
// a later read faults them in again. model_drop_pages does it for the whole
// mapping. For a process that has copied what it reads (a few small tensors
// would otherwise hold megabytes each); no-op for anything else.
void model_drop_range(const struct model *m, const void *p, size_t n);
void model_drop_pages(const struct model *m);
int model_load_hf(struct model *m, const char *dir, char *err); // model-hf.c
void model_free(struct model *m);                               // safe on a zeroed or half-loaded model

// --- for loaders -----------------------------------------------------------
void model_init(struct model *m);
// -1 for an unknown name
int model_arch_from_name(const char *name);
const char *model_arch_name(enum model_arch a);
const char *model_rope_name(enum model_rope r);
// copies name; data must stay valid until src_free
int model_add_tensor(struct model *m, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                     const void *data, size_t nbytes, char *err);
const struct model_tensor *model_find_tensor(const struct model *m, const char *name);
// fill defaults, bind tensors to slots and validate shapes and types
int model_finish(struct model *m, char *err);

// --- queries ---------------------------------------------------------------
// the names of every architecture in the table, ", "-separated
const char *model_arch_list(void);
const char *model_rope_scaling_name(enum model_rope_scaling s);
// the RoPE convention in one line ("neox (halves), 16 dims, base 1e+07,
// yarn x4 ..."), as `info` and `check` print it
void model_describe_rope(const struct model *m, char *buf, size_t cap);
// the per-pair frequency divisors an engine with a context of n_ctx
// positions uses: rope_freqs, else longrope's long factors when n_ctx is
// beyond the original context and the short ones otherwise (llama.cpp's
// rule); NULL when the model has none
const struct model_tensor *model_rope_factors(const struct model *m, int64_t n_ctx);
// cos and sin of the n_rot/2 rotary pairs at pos into cs[2i], cs[2i+1], as
// ggml computes them: theta as a float running product of base^(-2/n_rot),
// divided by factors[i] (may be NULL), YaRN's blend and the cos/sin scale
// from hp; base and freq_scale are the layer's
void model_rope_angles(const struct model_hparams *hp, float base, float freq_scale, const float *factors, int pos,
                       float *cs);
// number of values in a tensor (product of ne)
int64_t model_tensor_nelem(const struct model_tensor *t);
// bytes of the KV cache per position in fp32, all layers (a ShortConv
// layer holds its n_embd B*X values per position instead, a delta-net
// layer nothing)
size_t model_kv_bytes_per_pos(const struct model *m);
// the recurrent state of a sequence in fp32 values, all layers (qwen35's
// delta-net blocks: the conv's last n_conv - 1 inputs and the n_v d x d
// state of each); 0 for a model without recurrent layers
size_t model_state_floats(const struct model *m);

#endif
