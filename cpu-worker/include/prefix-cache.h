// prefix-cache.h - KV rows of earlier prompts, shared by every request.
//
// The cache keeps the keys and values of token prefixes in blocks of a
// fixed number of positions (`block`). Block i of a sequence is keyed by
// the block before it (its parent, NULL for the first) and its own tokens,
// so a block stands for the whole prefix it completes: a chained hash of
// the prefix finds it, and the lookup then compares the parent and every
// token, so a hash collision can never give a wrong hit. A hit copies the
// stored rows into the sequence (engine_seq_kv_append): the attention of
// the next position reads the very bits a cold prefill would have written,
// so the logits are the same to the bit.
//
// A block is pinned (reference-counted) by each job that uses it: the
// blocks a job found or stored stay while it runs, so a request sharing a
// prefix with a running one finds the finished blocks. Unpinned blocks
// without children are evicted least recently used first when a new block
// would pass the memory bound; a block with children waits for them (a
// child is reachable only through its parent).
//
// A model with a recurrent state (engine_state_bytes) has no rows for its
// recurrent layers: a block may carry the state after its last position
// as well (pcache_set_state), which a hit needs to go on from there; a
// hit on such a model ends at the last block of its chain that has one.
// The states count against the bound like the rows; when room is needed a
// state goes before a block does (the oldest first, so a chain keeps the
// states near its end, where the next turn of a chat goes on).
//
// A block's rows come in two parts (engine.h): the full part, and the
// windowed part (the layers a position reads only a window back: sliding
// attention, lfm2's ShortConv), which the cache keeps only where a later
// prompt may still read it. The caller decides where (the scheduler keeps
// the windowed rows that lie within a window before the places a prompt is
// likely to leave a stored prefix: where its own prompt left the cached
// ones, its prompt's end, its sequence's end, a branch) and drops the rest
// (pcache_window); a hit that ends where some of the window's rows were
// dropped is cut back to where they are all kept, so it stays exact. A
// block that lost its windowed part gets it back from the next sequence
// that computes those rows and stores the block again (pcache_add's wfill).
//
// Thread-safe (one mutex): the scheduler's engine thread uses it, the
// service reads the counters.
#ifndef AD_PREFIX_CACHE_H
#define AD_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct pcache;
struct pcache_block;

struct pcache_stats {
	uint64_t lookups;    // pcache_match calls
	uint64_t hit_tokens; // tokens in the blocks they found
	uint64_t stored;     // blocks added
	uint64_t evictions;  // blocks evicted
	uint64_t full;       // blocks not stored: every block pinned or in a chain
	size_t bytes;        // KV bytes held (and recurrent states)
	size_t limit;        // the bound
	int blocks, pinned;
	int states;        // blocks that carry a recurrent state
	int block;         // positions per block
	uint64_t wdropped; // windowed parts dropped
	int wblocks;       // blocks that carry their windowed part
};

// block positions per block (1..4096), row_bytes the KV bytes of one
// position's full part and win_bytes its windowed part (0: none)
// (engine_kv_part_bytes), state_bytes a recurrent state's
// (engine_state_bytes; 0: the model has none), mem the bound on the bytes
// held
struct pcache *pcache_new(int block, size_t row_bytes, size_t win_bytes, size_t state_bytes, size_t mem, char *err);
void pcache_free(struct pcache *c); // NULL is fine; every block must be released
int pcache_block_size(const struct pcache *c);

// the longest stored prefix of toks[0..n): up to max blocks, each pinned
// for the caller; returns how many, and in *tokens the positions they
// give: whole blocks, then maybe the start of one more (a hit may end
// mid-block: the last block's tokens then go on differently, so it is not
// the parent of what the caller stores next)
int pcache_match(struct pcache *c, const int32_t *toks, int n, struct pcache_block **out, int max, int *tokens);
// the block after parent (NULL: the first) holding toks[0..block), pinned
// for the caller: the stored one if there is one (*fill NULL), else a new
// one whose full rows the caller writes at *fill (engine_seq_kv_read_parts)
// before it calls the cache again. wfill (NULL: the caller has no windowed
// rows to give): *wfill is where to write the windowed part, for a new
// block or a stored one that lost it (room permitting), else NULL. NULL
// when the bound leaves no room.
struct pcache_block *pcache_add(struct pcache *c, struct pcache_block *parent, const int32_t *toks, void **fill,
                                void **wfill);
// the full rows of a block, packed as engine_seq_kv_read_parts packs `block` rows
const void *pcache_rows(const struct pcache_block *b);
// its windowed rows, NULL when it has none
const void *pcache_wrows(struct pcache *c, const struct pcache_block *b);
// blocks stored after b (more than one: prompts went on differently there)
int pcache_children(struct pcache *c, const struct pcache_block *b);
// keep (1): b keeps its windowed rows from now on; 0: drop them unless it must keep them
void pcache_window(struct pcache *c, struct pcache_block *b, int keep);
// give a block the caller holds pinned the recurrent state after its last
// position (state_bytes from state; a block that has one keeps it); -1
// when the bound leaves no room (or the cache was made without states)
int pcache_set_state(struct pcache *c, struct pcache_block *b, const void *state);
// a block's state, or NULL
const void *pcache_state(const struct pcache_block *b);
void pcache_release(struct pcache *c, struct pcache_block *const *b, int n);
void pcache_stats(struct pcache *c, struct pcache_stats *st);

// the default bound: the KV rows of max(4, parallel) full contexts, so the
// cache costs about what the sequences it serves do (row_bytes per
// position): room for a few long conversations and their shared prefixes;
// with a recurrent state (state_bytes, 0 for none), 4 of them per context
size_t pcache_default_mem(size_t row_bytes, size_t state_bytes, int max_seq, int parallel);
// "--cache-mem" values: bytes with a K, M or G suffix (powers of 1024), a
// plain number being MiB; 0 turns the cache off. -1 on anything else.
int pcache_parse_mem(const char *v, size_t *out);

#endif
