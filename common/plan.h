// plan.h - the projection kernels of a model, and where their weights come from.
//
// With layout.h this is the kernel contract of the two workers: the
// ane-worker compiles the plan, the cpu-worker calls its kernels by id, and
// both include it from here (neither worker's folder owns it).
//
// A plan lists, in a fixed order, every kernel the pipeline needs (the
// kernel set of cpu-worker/include/kernels.h; kinds have the values of KernelKind
// in proto/ane.proto), with its shape and, for each weight chunk of its
// blob, the model tensor and the rows of it that feed the chunk. Building
// a plan touches no weight data: the ane-worker and the cpu-worker build
// the same plan from the same model and so agree on kernel ids without
// talking. Order, per layer:
//
//   QKV      rows [Wq; Wk; Wv] (three parts), or phi3's fused wqkv as is;
//            an lfm2 ShortConv block: its in_proj (n_embd -> 3 n_embd, B C X);
//            a qwen35 delta-net block: [attn_qkv; attn_gate; ssm_beta;
//            ssm_alpha] (four parts: the conv's channels, z, beta, alpha);
//            qwen35 attention: its Wq gives per head q then gate rows
//   O        wo; a ShortConv block: its out_proj (n_embd -> n_embd); a
//            delta-net block: ssm_out (n_v d -> n_embd)
//   FFN      fused gate / up / down chunks; act SiLU          (dense layer)
//   GATE_UP  rows [Wgate; Wup], then DOWN                (split dense layer)
//   SHEXP    the shared expert of a MoE layer, fused, SiLU (if it has one)
// then the LM head, chunk 0, 1, ... of ane_head_chunk_rows(n_embd, n_vocab)
// rows each (the output matrix, or the token embeddings when tied).
// phi3 stores gate and up in one tensor (ffn_up, gate rows first): the
// gate part is rows [0, n_ff) of it, the up part rows [n_ff, 2 n_ff).
//
// The activation (GELU-tanh of gemma 2 and 3): such a layer always gets
// the split form, GATE_UP + DOWN, and the CPU applies the activation
// between them (the engine does it through ggml's fp16 table, as the
// reference engine does). Expressed in the ANE's ops, gelu_tanh(g) =
// g * sigmoid(a g + b g^3) needs the constants a and b; the programs carry
// no scalar constants (an inline scalar would also cost a BLOBFILE slot),
// so they would have to be folded into the weights: the gate conv twice
// (a Wg and b^(1/3) Wg), 4 weight matrices instead of 3, +33% of the
// FFN's weight traffic on every call, against one more launch (~0.1 ms on
// the device) and one surface round trip for the split form. So only
// SiLU layers (and every shared expert) are fused. A caller tells the
// forms apart by the kinds present for a layer: FFN, or GATE_UP + DOWN.
//
// Weights (weights = ANE_W_FP16 or ANE_W_INT8, below): the format every
// kernel of the plan stores its weights in; weight_bytes are that format's
// payload bytes (int8: one byte per weight plus an fp16 scale per output
// row). The ane-worker and the cpu-worker must be given the same format:
// kb_remote checks every kernel's weight_bytes against the worker's.
// ane_plan_weights_default is the rule when the user does not choose:
// int8 on the emu backend when every weight of the plan is stored in 8
// bits or fewer (Q8_0, Q4_*, Q5_*, K-quants); fp16 otherwise, and always
// fp16 on the ane backend, where int8 is not yet confirmed on a device.
//
// --split (split = 1) gives every dense layer the split form (the fallback
// when a fused program does not compile); shared experts stay fused.
#ifndef ANE_PLAN_H
#define ANE_PLAN_H

#include <stdint.h>

#include "model.h"

// the largest dimension of a kernel (the MIL generator, emu and the plan
// accept); larger is certainly a bug
#define ANE_MIL_MAX_DIM (1 << 24)

// weight formats of a kernel
enum ane_wfmt {
	ANE_W_FP16 = 0,
	ANE_W_INT8 = 1,
	ANE_W_LUT4 = 2, // 4-bit palettised: a table of 16 a group of 64 rows, a scale a row (mil.h)
};
const char *ane_wfmt_name(enum ane_wfmt f); // "fp16", "int8", "lut4"
// "fp16" / "int8" -> *f; -1 for anything else
int ane_wfmt_parse(const char *s, enum ane_wfmt *f);
// payload bytes of one [cout][cin] weight in format f (int8: data + scales)
uint64_t ane_wfmt_bytes(enum ane_wfmt f, uint64_t cout, uint64_t cin);
// LM-head split: rows per head kernel so that no blob exceeds 512 MiB,
// min(vocab, max(1, floor(512 MiB / (hidden * 2)))); and how many kernels
#define ANE_HEAD_TARGET_BYTES ((uint64_t)512 << 20)
int ane_head_chunk_rows(int hidden, int vocab);
// the same rule for another byte target (tests, smaller devices)
int ane_head_rows_for(int hidden, int vocab, uint64_t target_bytes);
int ane_head_nchunks(int hidden, int vocab);

// the kernel kinds: the values of KernelKind in proto/ane.proto (pinned in
// plan.c); the one C enum of them, for both workers
enum ane_kind {
	ANE_K_QKV = 1,
	ANE_K_O = 2,
	ANE_K_FFN = 3,
	ANE_K_GATE_UP = 4,
	ANE_K_DOWN = 5,
	ANE_K_LM_HEAD = 6,
	ANE_K_SHEXP = 7,
	ANE_K_PROBE = 8,
};

// rows [row0, row0 + rows) of a 2-D weight [rows][ne0] (ne[0] = in)
struct ane_part {
	const struct model_tensor *t;
	int64_t row0, rows;
};

struct ane_pk {
	int id;
	enum ane_kind kind;
	int layer; // -1 for the LM head and probes
	int chunk; // LM head chunk
	int in_ch, out_ch;
	int row_offset; // LM head: first logit row
	int ff;         // FFN / SHEXP: inner size (0 for a projection)
	// projection: parts stacked into one chunk, in order;
	// FFN / SHEXP: parts[0] gate, parts[1] up, parts[2] down, one chunk each
	struct ane_part parts[4];
	int nparts;
	uint64_t weight_bytes; // payload bytes of the blob (format wfmt)
	enum ane_wfmt wfmt;
};

struct ane_plan_opts {
	int width;             // columns (0: 64)
	int split;             // split every dense FFN
	int head_rows;         // LM-head rows per chunk (0: ane_head_chunk_rows)
	enum ane_wfmt weights; // 0: fp16
};

struct ane_plan {
	struct ane_pk *k;
	int n;
	int width;
	int split;
	int head_rows, head_chunks;
	int gelu; // the model's FFN activation is GELU-tanh (so split)
	enum ane_wfmt weights;
};

int ane_plan_build(struct ane_plan *p, const struct model *m, const struct ane_plan_opts *o, char *err);
void ane_plan_free(struct ane_plan *p);
// the default weight format for model m on backend ("emu", "ane"; NULL: emu)
enum ane_wfmt ane_plan_weights_default(const struct model *m, const char *backend);

const char *ane_kind_name(enum ane_kind k); // "qkv", "o", ...
// the kernel of (kind, layer, chunk), or -1
int ane_plan_find(const struct ane_plan *p, enum ane_kind kind, int layer, int chunk);
// one line for logs: "qkv L3 64 -> 192"
void ane_pk_describe(const struct ane_pk *k, char *buf, int cap);

#endif
