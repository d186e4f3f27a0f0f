// engine.h - the pipeline's decode loop: one model, one kernel backend,
// any number of sequences.
//
// The engine runs everything but the projections on the CPU (embeddings,
// RMSNorm, biases, q/k norms, RoPE, attention over the fp16 KV cache,
// residuals, post-norms, the FFN activation of the split form, the MoE
// router and routed experts, the final soft-cap) and asks the kernel
// backend (kernels.h) for the projections, through surfaces allocated once
// by engine_new and reused by every call. Its arithmetic mirrors the
// reference engine (ref.c) step by step, in the same order, so with the
// exact backend the only difference from ref.c is the fp16 rounding of
// the keys and values stored in the cache (with kv_f32 there is none: the
// logits are ref.c's to the bit).
//
// Weights on the CPU side: norms, biases, q/k norms and MoE routers are
// dequantised to fp32 once by engine_new; token embeddings are dequantised
// a row per token as tokens arrive and routed experts a block of rows at a
// time (moe.h), both straight from the model's mapping, so neither costs
// memory beyond the file.
//
// A sequence (struct engine_seq) owns its KV cache (max_seq positions per
// layer, fp16; an lfm2 ShortConv layer keeps B*X, n_embd values per
// position, instead: the conv state, per position so that truncating needs
// nothing more), its token history and its timings.
//
// Recurrent models (qwen35's gated delta-net blocks, deltanet.h) keep no
// rows per position in those layers but a state (fp32, engine_state_bytes)
// after the last position: the recurrence cannot be undone. A sequence
// keeps that state twice (the one a call writes becomes the sequence's
// only when the call succeeds) and copies of it at every state_every-th
// position, the last state_keep of them; truncating goes back to the
// latest copy at or before the length asked for (engine_seq_len says
// where), or to the start, and the caller feeds the tokens from there.
// A prefix cache restores a sequence with engine_seq_kv_append (the
// attention layers' rows) and then engine_seq_state_load (the state at
// the new length, as engine_seq_state_read gave it): until then the
// sequence refuses to go on. The states are exact copies, so a restored
// sequence computes the bits a cold one does. engine_forward feeds
// up to width columns in ONE set of kernel calls: column i is tokens[i]
// at the next position of seqs[i]; a sequence may take several columns
// (consecutive positions, in column order), which is how prefill works,
// and several sequences one column each, which is a batched decode step.
// Every kernel computes columns independently, so a token's logits do not
// depend on what else shares its call: chunked prefill, per-token feeding
// and batched steps give the same bits.
//
// Gemma's GELU-tanh: if the backend has a fused FFN kernel for the layer
// it computes the activation itself; otherwise the engine calls GATE_UP,
// applies the activation on the CPU through ggml's fp16 table (as ref.c
// does) and calls DOWN. The exact backend always gives gemma the split
// form.
//
// Bad input (a token outside the vocabulary, a position at or beyond
// max_seq, more columns than the width) is refused with a message before
// anything changes. A failing kernel call leaves the sequences involved
// with their old length (the cache rows past it are scratch).
//
// The model and the backend must outlive the engine; the backend owns the
// surfaces it hands out. One thread uses an engine at a time; the engine
// spreads attention over its own threads (every column and KV head is
// computed the same way on any of them, so the bits do not depend on the
// thread count).
#ifndef AD_ENGINE_H
#define AD_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gen-types.h"
#include "kernels.h"
#include "model.h"

struct engine_opts {
	int max_seq;     // positions per sequence (0: 2048)
	int threads;     // attention threads, the caller included (0: 1). More
			 // threads pay off on idle cores only: a worker descheduled
			 // in the middle of its share stalls the whole layer
	int attn_ref;    // plain-C attention (attn_ref) instead of attn_fast
	int kv_f32;      // keys and values in fp32 (a check: with kb_exact the
			 // logits are then ref.c's bits)
	int state_every; // recurrent models: keep the state at every n-th position (0: 16;
			 // the prefix cache's block, so that its blocks can carry one)
	int state_keep;  // ... the last n of those copies per sequence (0: 6)
	// the least q·k multiply-adds of a layer that wake the attention threads
	// (0: 2^18; the tests set 1 to run every step on them)
	int attn_pool_work;
	// the least q·k multiply-adds of a decode step whose rows then go in
	// parts (odd KV heads; 0: 2^20; the output differs in the last bits)
	int attn_parts_work;
};

// time spent on behalf of a sequence (struct gen_timings, common/gen-types.h:
// the engine books everything but queue_ns, cached_tokens and spec); a call
// shared by several sequences is split between them by their share of its
// columns

struct engine;
struct engine_seq;

struct engine *engine_new(const struct model *m, struct kernel_backend *kb, const struct engine_opts *o, char *err);
void engine_free(struct engine *e); // NULL is fine; free the sequences first

int engine_n_vocab(const struct engine *e);
// 1 when a layer is one call (engine.c, "one call per layer"): the backend
// runs the residual and norm steps beside its kernels; 0: three calls
int engine_fused(const struct engine *e);
// 1 when a fused layer's QKV output, O input and the logits are host rows
// the backend reads and writes itself (kernels.h, kb_step), not surfaces;
// ANEDVD_HOST_ROWS=0 keeps the surfaces
int engine_host_rows(const struct engine *e);
int engine_max_seq(const struct engine *e);
int32_t engine_bos(const struct engine *e); // the model's BOS id, -1: none
int engine_width(const struct engine *e);
// how many layers' attention of a decode step went in parts (the tests)
int engine_attn_parted(const struct engine *e);
// totals over every call the engine made
const struct gen_timings *engine_timings(const struct engine *e);

// the warm-up (engine.c): the first layer over a whole chunk, so that a
// first request finds its buffers in place; -1 with err when a call fails
int engine_warm(struct engine *e, char *err);

struct engine_seq *engine_seq_new(struct engine *e, char *err);
void engine_seq_free(struct engine_seq *s);
// forget every token (the timings stay)
void engine_seq_reset(struct engine_seq *s);
// keep the first n tokens (n <= length); the next position is n. A
// recurrent model's sequence goes back to its latest kept state at or
// before n, or to 0; a sequence that forks read from, with no memory to
// copy the rows they share before it would rewrite them, stays as it was:
// engine_seq_len tells
void engine_seq_truncate(struct engine_seq *s, int n);
// engine_seq_fork makes the empty child hold the first n tokens of parent
// (n <= its length; a recurrent model: where the parent has its state, at
// its length or a kept copy) without copying their rows: the child reads them from
// the parent's store (the rows the parent itself reads from its own parent
// are shared from there, any others it holds are copied). The store lives
// as long as a sequence reads it; a parent truncated below rows a fork
// reads copies its own rows before it rewrites them, so neither ever sees
// the other's later tokens. Attention reads each row where it lives in the
// same order, so the logits are those of a copy, to the bit.
int engine_seq_fork(struct engine_seq *child, struct engine_seq *parent, int n, char *err);
// the positions a fork reads from its parent (0: none)
int engine_seq_shared(const struct engine_seq *s);
// tokens in the cache, which is also the next position
int engine_seq_len(const struct engine_seq *s);
const int32_t *engine_seq_tokens(const struct engine_seq *s);
// engine_seq_common: how many leading tokens of p (at most upto) s holds:
// the prefix a prompt reuses (engine_prompt, the scheduler's sessions and
// running jobs)
int engine_seq_common(const struct engine_seq *s, const int32_t *p, int upto);
struct gen_timings *engine_seq_timings(struct engine_seq *s);
// KV rows, as a prefix cache keeps them: the bytes of one position's keys
// and values over every layer, in the cache's own precision
size_t engine_kv_row_bytes(const struct engine *e);
// copy the rows of positions [pos, pos + n) (within the length) to dst,
// packed: per layer its n K rows, then its n V rows
void engine_seq_kv_read(const struct engine_seq *s, int pos, int n, void *dst);
// append n tokens with their rows taken from src, packed as
// engine_seq_kv_read packs `stride` rows, starting at row off: the next
// position's attention then reads exactly the bits that were stored
int engine_seq_kv_append(struct engine_seq *s, const int32_t *tokens, int n, const void *src, int stride, int off,
                         char *err);
// The rows in two parts: the windowed layers, whose rows a position reads
// only engine_kv_window positions back, its own included (an lfm2
// ShortConv's, n_conv; a sliding-window layer's, when every layer reading
// its cache slides), and the full ones (the rest). A prefix cache may keep
// the windowed part only where a later position can still read it. The
// _parts forms take ENGINE_KV_FULL, ENGINE_KV_WINDOWED or both, and pack
// only their layers; an append of one part leaves the other's rows of
// those positions as they were.
#define ENGINE_KV_FULL 1
#define ENGINE_KV_WINDOWED 2
#define ENGINE_KV_ALL 3
int engine_kv_window(const struct engine *e); // 0: no windowed layer
size_t engine_kv_part_bytes(const struct engine *e, int parts);
void engine_seq_kv_read_parts(const struct engine_seq *s, int parts, int pos, int n, void *dst);
int engine_seq_kv_append_parts(struct engine_seq *s, int parts, const int32_t *tokens, int n, const void *src,
                               int stride, int off, char *err);
// overwrite the rows of parts at positions [pos, pos + n), within the length
int engine_seq_kv_write(struct engine_seq *s, int parts, int pos, int n, const void *src, int stride, int off,
                        char *err);

// the recurrent state of a sequence in bytes (0: the model has none)
size_t engine_state_bytes(const struct engine *e);
// the positions at which sequences keep a copy of it (0: no state)
int engine_state_every(const struct engine *e);
// the state after position pos (its length, or a kept copy) into dst; -1
// when the sequence has none for pos (or the model keeps no state)
int engine_seq_state_read(const struct engine_seq *s, int pos, void *dst);
// make src (from engine_seq_state_read at this length) the sequence's
// state at its length: after engine_seq_kv_append, before going on
int engine_seq_state_load(struct engine_seq *s, const void *src, char *err);

// engine_forward: the core (see above). n in 1..width. logits: n rows of
// n_vocab; row i is written if want is NULL or want[i] is nonzero (other
// rows are left alone; logits may be NULL when nothing is wanted).
// prefill only decides which timing the work is booked under.
int engine_forward(struct engine *e, struct engine_seq *const *seqs, const int32_t *tokens, int n, const uint8_t *want,
                   float *logits, int prefill, char *err);

// rows [rows][n_vocab] for engine_forward's logits that the LM head writes
// into directly, in the memory the ane-worker maps (the data plane's
// arena): without them its logits are copied out of the engine's own rows
// (a SmolLM2-sized vocabulary: 23 us a token here). They are the caller's
// until the engine is freed; one set per engine. NULL with err where the
// backend has no such memory: the caller then uses its own.
float *engine_logits_alloc(struct engine *e, int rows, char *err);

// engine_forward_hidden: the same columns, no LM head: hidden gets n rows
// of n_embd, each column's last hidden state after the final norm (what
// embeddings pool); booked as prefill
int engine_forward_hidden(struct engine *e, struct engine_seq *const *seqs, const int32_t *tokens, int n, float *hidden,
                          char *err);
int engine_n_embd(const struct engine *e);
// the model's GGUF pooling_type: 0 none given, 1 mean, 2 cls, 3 last
int engine_pooling(const struct engine *e);
// a decode step: one token for each of n distinct sequences (n <= width),
// logits n rows
int engine_step(struct engine *e, struct engine_seq *const *seqs, const int32_t *tokens, int n, float *logits,
                char *err);

// append ids to s in chunks of the width; the logits of the last one
// (n_vocab values) if logits is not NULL
int engine_prefill(struct engine *e, struct engine_seq *s, const int32_t *ids, int n, float *logits, char *err);

// teacher forcing: reset s, feed ids (per_token: one column per call,
// otherwise chunks of the width) and write the logits of every position
// (n rows of n_vocab)
int engine_eval(struct engine *e, struct engine_seq *s, const int32_t *ids, int n, int per_token, float *logits,
                char *err);

// the same through the first `layers` layers only (0: all): the final norm
// and the LM head read the residual after them, as `verify --layers` wants.
// A partial run leaves s empty (its later layers' cache was not written).
int engine_eval_layers(struct engine *e, struct engine_seq *s, const int32_t *ids, int n, int per_token, int layers,
                       float *logits, char *err);

// what engine_prompt did
struct engine_prompt_info {
	int prompt_tokens; // tokens of the prompt in use (after the cut)
	int dropped;       // cut from the front to fit the context
	int reused;        // already in the cache
	int prefilled;     // fed now
	int max_tokens;    // the reply's room (fit.h)
};

// engine_prompt makes s hold prompt (a session's next request), fitted
// into the context by fit.h's rule (its oldest tokens but a leading BOS
// dropped when it leaves no room for the reply); the longest prefix it
// shares with the tokens in the cache is reused (never the whole prompt:
// its last token is fed again for its logits) and the rest is prefilled.
// logits (n_vocab) get the last position's.
int engine_prompt(struct engine *e, struct engine_seq *s, const int32_t *prompt, int n, int max_tokens, float *logits,
                  struct engine_prompt_info *info, char *err);

// book sampling time on a sequence (and the engine's totals)
void engine_add_sampling(struct engine *e, struct engine_seq *s, uint64_t ns);

// kb_exact's fp32 twin of one of its surfaces ([width][channels]); NULL
// for another backend's surface. The engine writes and reads the twin so
// that nothing is rounded to fp16 on the way to the exact kernels.
float *kb_exact_shadow(struct kernel_backend *kb, const struct ad_surface *s);

#endif
