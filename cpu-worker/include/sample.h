// sample.h - the token sampler shared by the CLI, the HTTP server and the WebUI.
//
// A struct sampler belongs to one sequence (one request): it holds the
// parameters, its own random generator and the penalty window, the last
// repeat_last_n token ids (prompt included) with their counts. The caller
// feeds the prompt with sample_accept; sample_next picks a token from one
// row of n_vocab logits and accepts it into the window itself. The logits
// are never modified.
//
// The pipeline, in this order:
//   0. logit_bias, on a copy of the logits: each entry's bias is added to
//      its token's logit; a bias of -100 bans the token (its logit becomes
//      -inf), as OpenAI's logit_bias promises.
//   1. penalties, on a copy of the logits, once per distinct token t of the
//      window with count c - not once per occurrence - as llama.cpp's
//      llama_sampler_penalties does:
//        repeat:    l = l <= 0 ? l * repeat_penalty : l / repeat_penalty
//        OpenAI:    l -= c * frequency_penalty + presence_penalty
//   2. a NaN or +inf logit, or a row that is all -inf, is an error (-1).
//   3. temperature <= 0: the argmax, lowest id on ties; no random draw.
//   4. the cut: keep the candidates l >= max - 20 * T (below that a token's
//      weight is under e^-20 of the best one's; -inf never passes).
//   5. top-k: the k best candidates (a k-entry heap, in the cut's pass).
//   6. softmax at T: p = expf((l - max) / T), so the best token has p = 1.
//   7. min-p: keep p >= min_p (that is min_p * p_max).
//   8. top-p: keep the smallest best-first prefix whose mass reaches top_p
//      of what is left (at least one token); found through logit buckets
//      and a selection inside one bucket, not a sort.
//   9. draw one token in proportion to p: one uniform integer below the
//      kept mass, walked through the kept tokens in id order.
// Min-p and top-p see the probabilities at T (llama.cpp's default chain
// applies them at T 1 and the temperature last). top_p 0 is refused by
// sample_check: greedy is temperature 0.
// "Best first" is one strict order everywhere: higher logit first, lower id
// first among equal logits. Every step keeps a prefix of that order, so
// ties at a boundary keep the lower ids. Masses are summed as integers
// (p scaled by 2^40), so the result does not depend on summation order:
// sample_ref (full sort, every step spelled out) and sample_next (no full
// sort) return the same token for the same random draw. A non-greedy
// sample consumes exactly one 64-bit number of the generator.
//
// Random numbers: xoshiro256** seeded through splitmix64 with params.seed,
// or with SAMPLE_DEFAULT_SEED when has_seed is 0, so a request without a
// seed is reproducible too.
#ifndef AD_SAMPLE_H
#define AD_SAMPLE_H

#include <stdint.h>

#include "err.h"
#include "gen-types.h" // struct sample_params, sample_bias, sample_tok

#define SAMPLE_DEFAULT_SEED 0x12345678u
#define SAMPLE_MAX_WINDOW (1 << 20) // repeat_last_n
#define SAMPLE_MAX_VOCAB (1 << 22)  // keeps the integer masses below 2^62

// sample_defaults: every filter off, T 1, window 64 (llama.cpp's), no seed.
// Entry points set their own temperature, top_k, ...
void sample_defaults(struct sample_params *p);

// sample_check returns 0, or -1 with a message naming the first field out
// of range (and its value); the HTTP layer passes the message on.
int sample_check(const struct sample_params *p, char *err);

// sample_new checks p and allocates about 40 bytes per vocabulary entry
// (plus 8 per top_k). There is no global state: samplers are independent.
struct sampler *sample_new(const struct sample_params *p, int n_vocab, char *err);
void sample_free(struct sampler *s); // NULL is fine
// forget the window and restart the generator from the seed
void sample_reset(struct sampler *s);
// the numbers the generator has given since the seed (sample_reset)
uint64_t sample_draws(const struct sampler *s);
// draw and discard n numbers: a sampler seeded as another one was and
// skipped by that one's sample_draws, with the same window (sample_accept
// of the same ids), picks the same tokens from then on. This is how a
// generation continues on a restarted worker.
void sample_skip(struct sampler *s, uint64_t n);
// push ids into the penalty window (the prompt, or tokens chosen elsewhere);
// -1 for an id outside the vocabulary (nothing is pushed then)
int sample_accept(struct sampler *s, const int32_t *ids, int n, char *err);

// sample_next returns the chosen id (and accepts it), or -1 with a message.
int32_t sample_next(struct sampler *s, const float *logits, char *err);
// sample_ref: the same contract, plainly computed (a full sort); for tests
// and benchmarks.
int32_t sample_ref(struct sampler *s, const float *logits, char *err);

// sample_draw: sample_next's choice without accepting it into the window;
// with allow (a bitset of n_vocab bits, bit i of allow[i >> 6]) every token
// outside it counts as -inf from step 1 on (constrained decoding). A row
// on which no allowed token is finite is an error. sample_draw_ref: the same
// by sample_ref's computation.
int32_t sample_draw(struct sampler *s, const float *logits, const uint64_t *allow, char *err);
int32_t sample_draw_ref(struct sampler *s, const float *logits, const uint64_t *allow, char *err);

// sample_penalise writes steps 0 and 1's logits (n_vocab) into out; returns 1 if
// any bias or penalty applied, 0 if out is a plain copy. The window is unchanged.
int sample_penalise(struct sampler *s, const float *logits, float *out);

// sample_kept writes the ids that steps 2-8 keep (the tokens the draw can
// return), in increasing order; returns how many, or -1 with a message. ref
// selects sample_ref's computation. No random number is used, nothing is
// accepted; ids needs room for n_vocab.
int sample_kept(struct sampler *s, const float *logits, int ref, int32_t *ids, char *err);

// how many candidates survive step 4 for these logits (penalties included);
// for benchmarks and diagnostics, -1 on a bad row
int sample_candidates(struct sampler *s, const float *logits, char *err);

// sample_top writes the n best raw logits, best first (lowest id first on
// ties), skipping NaN; returns how many were written (at most n_vocab).
int sample_top(const float *logits, int n_vocab, struct sample_tok *out, int n);

// sample_logprobs: the log-softmax of one row of the model's own logits
// (no bias, no penalties, no temperature: OpenAI's logprobs), so a greedy
// pick without bias or penalties is the top entry. *lp gets the logprob of
// id; top gets the k (at most SAMPLE_MAX_TOP_LOGPROBS) best tokens in
// sample_top's order with their logprobs in .logit. Returns how many were
// written to top, or -1 with a message for a NaN or +inf logit, a row that
// is all -inf, or an id outside the row. The sum runs in eight float lanes.
int sample_logprobs(const float *logits, int n_vocab, int32_t id, int k, float *lp, struct sample_tok *top, char *err);
// the same contract, plainly: a double sum in id order and a full sort
int sample_logprobs_ref(const float *logits, int n_vocab, int32_t id, int k, float *lp, struct sample_tok *top,
                        char *err);

#endif
