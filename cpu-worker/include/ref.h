// ref.h - the fp32 reference engine: a plain forward pass that every other
// backend is checked against.
//
// ref_new dequantises every weight of the model to float32 once and
// allocates an fp32 KV cache for max_seq positions. The model must outlive
// the engine only for the duration of ref_new (the engine keeps its own
// copies). Activations, the KV cache and every dot product are fp32; no
// threads. The one deliberate deviation from textbook fp32 is GELU, which
// goes through the same fp16 table as ggml's CPU backend; where fp32 leaves
// a choice (summation order, rounding of intermediate values) ref.c follows
// ggml too, so llama.cpp's fp32 logits are met to about 1e-5.
//
// ref_forward feeds one token at position pos and writes n_vocab logits.
// Positions must be fed in order: pos may be at most the number of positions
// already in the cache; a smaller pos rewinds (the cache is truncated to
// pos first). It returns -1 for a token outside the vocabulary or a
// position outside [0, max_seq). A model with a recurrent state (qwen35's
// delta-net blocks) keeps only the state after the last position fed, so
// there pos must be that position or 0 (which starts over).
#ifndef AD_REF_H
#define AD_REF_H

#include <stdint.h>

#include "err.h"
#include "model.h"

struct ref_engine;

struct ref_engine *ref_new(const struct model *m, int max_seq, char *err);
// ref_new for an engine whose context is n_ctx positions where that picks
// the RoPE factors (longrope: the long ones beyond the original context),
// so that it computes what a pipeline of that context computes
struct ref_engine *ref_new_ctx(const struct model *m, int max_seq, int n_ctx, char *err);
void ref_free(struct ref_engine *e);  // NULL is fine
void ref_reset(struct ref_engine *e); // forget the cache
int ref_forward(struct ref_engine *e, int32_t token, int pos, float *logits);

// ref_eval resets and feeds ids[0..n) at positions 0..n-1, writing the
// logits of every position (n rows of n_vocab) - teacher forcing.
int ref_eval(struct ref_engine *e, const int32_t *ids, int n, float *logits);

// count the experts every MoE layer routes each token to (lfm2moe: chosen
// by sigmoid + selection bias) into counts[layer * n_expert + expert],
// adding to what is there; NULL stops counting. counts must hold n_layer *
// n_expert values and outlive the counting.
void ref_route_hist(struct ref_engine *e, int64_t *counts);

int ref_n_vocab(const struct ref_engine *e);
int ref_max_seq(const struct ref_engine *e);
// bytes the engine holds (fp32 weights + KV cache + scratch)
size_t ref_bytes(const struct ref_engine *e);

// index of the largest value; the lowest index wins ties
int ref_argmax(const float *x, int n);

#endif
