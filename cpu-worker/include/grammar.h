// grammar.h - constrained decoding: a compiled GBNF grammar (gbnf.h) applied
// in the sampler, token by token.
//
// A gram_vocab belongs to a model: each token's bytes (what the token adds
// to a decoded stream: the tokenizer's tok_token_text, read by the process
// that runs the worker, cli/vocab-local.h) and a trie over them in
// depth-first order. It is built once, is immutable afterwards and may be
// shared by threads. A token that adds no bytes (a control token) is never
// allowed by the grammar's bytes, only by a token element (<[id]>) or, for
// the stop ids, where the grammar can end.
//
// A gram belongs to one sequence. Its state is the set of the grammar's
// pushdown stacks after the text so far. Two implementations keep it:
//   fast (the default): stacks are interned (position, parent) nodes and a
//     set of them an interned state; each state gets a row of 256 byte
//     transitions filled on first use. Stepping a byte is then one table
//     load, and the mask of allowed tokens is one pass over the trie in
//     depth-first order that skips every subtree whose prefix the grammar
//     rejects. The last masks are kept per state (inside a JSON string the
//     state repeats, and so does its mask). Beyond GRAM_MAX_STATES states or
//     GRAM_MAX_NODES nodes the tables are rebuilt from the current state.
//   ref (gram_opts.ref): a plain list of stacks, each an array of grammar
//     positions, stepped byte by byte as llama.cpp does; the mask tries every
//     token of the vocabulary on its own. Tests compare the two bit for bit.
// A gram is not thread-safe; it holds no global state.
//
// The rules of a step:
//   - a token is allowed if its bytes, fed one at a time, keep at least one
//     stack alive, or a stack's top is a token element it matches;
//   - a stop id is allowed exactly where the grammar can end (a stack is
//     empty), whatever its bytes; any other token with no bytes never is;
//   - gram_done: the grammar can end and nothing else can follow, so the
//     generation is complete without sampling a stop id.
// Lazy grammars (tool calls the model starts on its own): the gram waits,
// unconstrained, until a trigger word appears in the generated text or a
// trigger token is sampled; then the text from the trigger's first byte
// (the trigger token itself) is fed to the grammar, which constrains every
// token after. A replay the grammar rejects leaves the gram waiting.
//
// Sampling (gram_sample) takes the cheap path first, as llama.cpp's common
// sampler does: draw from the full row; keep the token if the grammar
// allows it; otherwise set every token the grammar rejects to -inf and draw
// again (with a second random number). For a greedy sampler that is the
// argmax among the allowed tokens; for a random one it is the draw from the
// allowed tokens' renormalised distribution. With ref the draws are
// sample_ref's and the mask gram_mask_ref's: the same token for the same
// generator.
//
// Errors (-1 with a message): a token the grammar does not allow passed to
// gram_accept; a transition that needs more than GRAM_MAX_WORK expansions,
// or a mask, check or accept more than GRAM_MAX_OP_WORK (a grammar too
// ambiguous to follow: the job ends with an error instead of hanging); a row
// on which the grammar allows no token that has a finite logit ("no token
// can continue").
#ifndef AD_GRAMMAR_H
#define AD_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gbnf.h"
#include "sample.h"

#define GRAM_MAX_STATES 16384 // transition rows (1 KiB each) before a rebuild
#define GRAM_MAX_NODES (1 << 21)
#define GRAM_MAX_WORK (1 << 16)    // expansion steps of one transition
#define GRAM_MAX_OP_WORK (1 << 22) // of one mask, check or accept (~0.3 s at worst)
#define GRAM_MAX_STACKS 4096       // stacks the plain twin holds at once
#define GRAM_MAX_STOP 64
#define GRAM_MAX_TRIGGERS 16
#define GRAM_MAX_WORD 128 // bytes of a trigger word

struct gram_vocab;
struct gram;

// bytes[i] and len[i] for each of n_vocab tokens (NULL or 0: no bytes); copied
struct gram_vocab *gram_vocab_new(int n_vocab, const char *const *bytes, const uint32_t *len, char *err);
void gram_vocab_free(struct gram_vocab *v); // NULL is fine
int gram_vocab_size(const struct gram_vocab *v);
int gram_vocab_nodes(const struct gram_vocab *v); // trie nodes, the root included
// the bytes of token id
const uint8_t *gram_vocab_bytes(const struct gram_vocab *v, int32_t id, uint32_t *len);

struct gram_opts {
	const struct gbnf *g;       // the caller keeps it alive as long as the gram
	const struct gram_vocab *v; // the same
	const int32_t *stop;        // the ids that end the generation
	int n_stop;                 // [0, GRAM_MAX_STOP]
	int lazy;                   // wait for a trigger
	const char *const *words;   // trigger words (lazy), NUL-terminated, 1..GRAM_MAX_WORD bytes
	int n_words;
	const int32_t *trigger_ids; // trigger tokens (lazy)
	int n_trigger_ids;
	int ref;        // the plain implementation
	int no_cache;   // never reuse a mask (benchmarks of the cold path)
	int max_states; // rebuild beyond this many states (0: GRAM_MAX_STATES)
};

// gram_new checks the grammar's token ids against the vocabulary (and that
// it has no unresolved <text> tokens) and computes the start state.
struct gram *gram_new(const struct gram_opts *o, char *err);
void gram_free(struct gram *m); // NULL is fine

int gram_active(const struct gram *m); // constraining: not lazy, or triggered
int gram_done(const struct gram *m);   // active, can end, nothing else can follow
int gram_can_end(const struct gram *m);

// 1 if id is allowed now, 0 if not, -1 on an error
int gram_allows(struct gram *m, int32_t id, char *err);
// the allowed tokens as a bitset of n_vocab bits (bit i of mask[i >> 6]);
// returns how many, or -1. gram_mask follows the implementation of the gram;
// gram_mask_ref is the brute-force mask, either way.
int gram_mask(struct gram *m, uint64_t *mask, char *err);
int gram_mask_ref(struct gram *m, uint64_t *mask, char *err);
// advance over id (lazy and waiting: record it and look for a trigger)
int gram_accept(struct gram *m, int32_t id, char *err);
// after gram_accept: 1 if that token switched the grammar on, with the
// offset in bytes of the generated text where the constrained text starts
int gram_triggered(const struct gram *m, uint32_t *at);

// sample one token under the grammar (see the top) and accept it into the
// sampler's window and the grammar; returns the id or -1
int32_t gram_sample(struct gram *m, struct sampler *s, const float *logits, char *err);

// for benchmarks and tests: states, nodes and rebuilds so far; masks computed
struct gram_stats {
	int states, nodes, rebuilds;
	uint64_t masks, mask_hits, rejected;
};
void gram_stats(const struct gram *m, struct gram_stats *st);

#endif
