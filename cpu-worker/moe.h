// moe.h - the routed experts of a mixture-of-experts layer, on the CPU.
//
// For every column: the router (softmax over all experts of gate_inp·x,
// or with expert_gating 2 a sigmoid per expert), the top k experts by
// probability plus the layer's exp_probs_b where it has one (lowest index
// first on ties; the bias only selects, the weights are the unbiased
// probabilities), their
// weights renormalised when the model says so, and
//   out = sum over the chosen, best first, of w * down(silu(gate x) * up x)
// plus, when given, the shared expert's output scaled by
// sigmoid(gate_inp_shexp · x). The arithmetic and its order are ref.c's, so
// the result has ref.c's bits.
//
// The expert weights stay in the model's mapping in their stored type and
// are dequantised a block of rows at a time, as they are used (F32 experts
// are read in place): a MoE model costs no more memory than its file. The
// columns of a call are grouped by expert, so each chosen expert's weights
// are read and dequantised once per call, however many columns chose it.
#ifndef AD_MOE_H
#define AD_MOE_H

#include "err.h"
#include "model.h"

struct moe;

// scratch for up to width columns of model m; NULL with err if the model's
// expert tensors cannot be read row by row
struct moe *moe_new(const struct model *m, int width, char *err);
void moe_free(struct moe *mo);

// x, shared, out: [n][n_embd]; router [n_expert][n_embd] and shexp_gate
// [n_embd] (or NULL: gate 1) in fp32; shared NULL for no shared expert
int moe_forward(struct moe *mo, const struct model_layer *ml, const float *router, const float *shexp_gate,
                const float *x, const float *shared, int n, float *out, char *err);

#endif
