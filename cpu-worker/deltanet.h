// deltanet.h - the CPU part of Qwen3.5's gated delta-net block, one token
// at a time: the causal depthwise conv over the projected q/k/v channels,
// the per-head L2 norms, the gated delta rule with its recurrent state, and
// the gated per-head norm of the output.
//
// The block around it (both engines): h = RMSNorm(x)·attn_norm, then four
// projections of h (attn_qkv: the conv's channels q, k, v; attn_gate: z;
// ssm_beta; ssm_alpha), dn_token per token in order, and ssm_out of its
// output into the residual. The reference engine (ref.c) and the pipeline
// (engine.c) both call dn_token, so given the same projections they
// compute the same bits; llama.cpp's fused CPU op is the judge from
// outside (the models2 fixture).
//
// Per token, with d the head size, n_k q/k heads and n_v v heads:
//   c = silu(conv(window of the last n_conv mixed inputs))   (channels q|k|v)
//   q_h, k_h = c's heads / max(|.|, eps)                       (L2, per head)
//   beta = sigmoid(beta_in), g = softplus(alpha_in + dt_bias) · a   (per v head)
//   v head j reads q/k head j mod n_k (the converter's tiled order), and
//   its state S (d x d, S[i][j] over key dims i) does
//     S ← exp(g)·S;  δ = beta·(v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀq / sqrt(d)
//   out_j = RMSNorm(o)·norm ⊙ silu(z_j)
//
// The state of one layer, dn_state_floats values: the conv's last n_conv-1
// inputs (oldest first, [n_conv-1][channels]), then S of every v head,
// stored by columns ([n_v][d columns][d]: S's column j contiguous, as
// ggml keeps it). The state before position 0 is all zeros; `in` NULL
// means that state. Everything is fp32; summation orders are fixed (the
// dot products are ad_dot's), so the result does not depend on the
// caller.
#ifndef AD_DELTANET_H
#define AD_DELTANET_H

#include <stddef.h>

struct dn_layer {
	int d, n_k, n_v, n_conv, channels; // channels = (2 n_k + n_v) d
	float eps;                         // the L2 and RMS norms' epsilon
	const float *conv_w;               // [channels][n_conv], the last tap the current token
	const float *dt_bias, *a;          // [n_v]
	const float *norm;                 // [d]
};

// a layer's shapes from the model's hyperparameters, with its dequantised
// weights (the reference engine and the engine build it the same way)
struct model_hparams;
struct dn_layer dn_layer_of(const struct model_hparams *hp, const float *conv_w, const float *dt_bias, const float *a,
                            const float *norm);

// values of one layer's state
size_t dn_state_floats(const struct dn_layer *l);
// scratch floats dn_token needs
size_t dn_scratch_floats(const struct dn_layer *l);

// one token: mix [channels] = attn_qkv·h, z [n_v d], beta_in and alpha_in
// [n_v] the projections; in (NULL: zeros) the state before, out the state
// after (out may be in); o [n_v d] the gated, normed output for ssm_out
void dn_token(const struct dn_layer *l, const float *mix, const float *z, const float *beta_in, const float *alpha_in,
              const float *in, float *out, float *o, float *scratch);

#endif
