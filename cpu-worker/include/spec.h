// spec.h - speculative decoding by prompt lookup: drafts taken from the
// text itself, verified as extra columns of one engine call.
//
// Drafts. The history is the sequence's tokens (the prompt as kept, a
// session's earlier turns, what was generated) followed by the token about
// to be fed. For n from ngram_max down to ngram_min, the last n tokens of
// the history are looked for earlier in it; the most recent earlier match
// of the longest n that has one gives the draft: the tokens that followed
// it, up to the length asked for (fewer where the history ends).
//
// Verify. The scheduler feeds the token and its k draft tokens to the
// sequence as k + 1 consecutive columns of ONE engine call (the columns
// attend causally, like a prefill chunk), so row i of the logits is the
// distribution after draft tokens 0..i-1, bit for bit what a plain decode
// step would compute there (engine.h: a column's logits do not depend on
// what shares its call). It samples row 0, then row i + 1 only while the
// token sampled from row i equals draft token i; the first mismatch, or
// row k, gives the last token of the step. The rows (KV, lfm2's conv
// state: both kept per position) of the draft tokens after the first
// mismatch are dropped by truncating the sequence.
//
// Acceptance. A draft token d is a point mass (q(d) = 1), so the standard
// rule - accept d with probability min(1, p(d) / q(d)) = p(d), else draw
// from the residual max(0, p - q) renormalised, which is p without d - is
// realised exactly by drawing x from p with the sampler and accepting d
// iff x = d: P(d) = p(d), and P(x) = p(x) for x != d after a rejection.
// The sampler draws one number per row as a plain decode does and sees
// the same penalty window, so the tokens are the same as without
// speculation at any temperature, seed for seed; at temperature 0 this is
// the greedy check.
//
// Length. A draft costs its columns whether or not it is accepted. With a
// the sequence's running chance that a draft token found by an n-gram of
// this n is accepted, and c the cost of one more column as a share of a
// one-column call, the length verified is the k <= the draft found that
// maximises the tokens a call yields per unit of cost,
// (1 + a + ... + a^k) / (1 + c k); k = 0 (no draft) when no length gains;
// c = 0 takes the whole draft. The chance: accepted over reached (draft
// tokens compared with a sample) for this n, with two tokens at the
// sequence's rate for every n as prior, which has one accepted and one
// rejected token as its own.
//
// Cost. c depends on the backend (on the ANE a column costs almost
// nothing; on emu the weights are read once for all columns, but the
// arithmetic grows), the model and the context (attention runs per column
// on the CPU). Unless it is fixed, the scheduler measures it: a
// least-squares line time = a + b * columns through its recent decode
// calls (spec_cost), c = b / (a + b); until the calls have varied enough
// in width, SPEC_COL_COST.
#ifndef AD_SPEC_H
#define AD_SPEC_H

#include <stdint.h>

#include "err.h"
#include "gen-types.h" // SPEC_NGRAM_MAX, struct spec_stats, spec_add

#define SPEC_DRAFT_MAX 64 // the largest --draft

struct spec_opts {
	int draft;      // most draft tokens per step (0: off)
	int ngram_min;  // 1..ngram_max
	int ngram_max;  // ..SPEC_NGRAM_MAX
	float col_cost; // c above, >= 0, or SPEC_COST_AUTO: measured
};

// the defaults: draft 8, n-grams 8 down to 2, the cost measured
#define SPEC_DEF_DRAFT 8
#define SPEC_DEF_NGRAM_MIN 2
#define SPEC_DEF_NGRAM_MAX 8
#define SPEC_COST_AUTO (-1.0f)
#define SPEC_COL_COST 0.1f // c until it is measured
void spec_defaults(struct spec_opts *o);
// 0, or -1 with a message naming the option out of range
int spec_check(const struct spec_opts *o, char *err);


// spec_find writes up to max tokens of the draft for the history h[0..n)
// followed by last into out; returns how many (0: no match, or max 0) and
// the n of the match in *ngram (0 when none)
int spec_find(const int32_t *h, int n, int32_t last, int ngram_min, int ngram_max, int max, int32_t *out, int *ngram);

// spec_len: how many of the k tokens found by an n-gram of ngram to
// verify, given the counters of the sequence so far and c (see Length)
int spec_len(const struct spec_stats *st, int ngram, float c, int k);

// the measured cost of a column (see Cost above): sums of the calls'
// columns and times, each call's weight decaying (by half over about 45
// calls)
struct spec_cost {
	double s0, s1, s2, sy, sxy;
};
void spec_cost_add(struct spec_cost *m, int cols, double ns);
// c from the calls so far, or prior while their widths have varied too
// little to tell
float spec_cost_get(const struct spec_cost *m, float prior);

// spec_note books a verify: k tokens drafted from an n-gram of ngram,
// accepted of them the sampled token, and whether a draft token was
// rejected (a sample compared with it and differed)
void spec_note(struct spec_stats *st, int ngram, int k, int accepted, int rejected);


// spec_probe replays a finished generation as speculation would have run
// it alone: history h[0..n_hist) (the prompt as kept), then gen[0..n_gen)
// the generated tokens (the ones a plain decode gave: with speculation
// they are the same). Each step drafts as the scheduler does (at most the
// tokens left of max_tokens minus one, and the room left in max_seq),
// accepts the draft tokens that equal the generated ones, and moves on by
// the accepted tokens and one more. st gets the counters (steps counts
// every verify), *calls the decode calls that would have been made, both
// for the tokens after the first (which comes with the prompt's logits).
// A measured cost (SPEC_COST_AUTO) is taken as SPEC_COL_COST here, so the
// lengths, and the counts, are then those of a run that measured that.
// Needs room for n_hist + n_gen tokens in scratch.
void spec_probe(const struct spec_opts *o, const int32_t *h, int n_hist, const int32_t *gen, int n_gen, int max_tokens,
                int max_seq, int32_t *scratch, struct spec_stats *st, int *calls);

#endif
