// scheduler.h - the job scheduler of the cpu-worker: many generations, one engine.
//
// One engine thread owns the engine and every sequence. A generation is a
// job: sched_generate validates it and puts it in a bounded queue; the
// engine thread admits up to `parallel` jobs at once and, turn after turn,
// steps every decoding job TOGETHER (one column per sequence) and feeds
// the next chunk of the oldest job still in its prompt: in the same kernel
// calls while the decode columns take at most half the width, otherwise in
// calls of their own. A long prompt thus goes in between the tokens of
// running streams and never stalls them. Each job samples with its own
// sampler and stops at a stop id (not reported), at max_tokens or the end
// of the context (FINISH_LENGTH), at its deadline (FINISH_ERROR,
// SCHED_ETIMEOUT), on a cancel, or when its client has not polled for
// abandon_ms (FINISH_CANCELLED).
//
// Tokens are buffered per job; sched_poll hands over everything since the
// last poll, waiting up to max_wait_ms (at most 60 s) for something new
// (sched_poll_ack: everything the caller has not acknowledged, and with
// hold_ms a streaming reader's frame: engine.proto's PollRequest).
// The poll that reports the finish carries the final timings; the job is
// kept for grace_ms after it (a repeated final poll gets the same finish,
// no tokens) and then forgotten.
//
// Sessions: a job naming a session uses the session's sequence and reuses
// the longest cached prefix of its prompt (as engine_prompt does: the last
// prompt token is always fed again for its logits). A session serves one
// job at a time: naming a busy session is SCHED_EUNAVAILABLE. At most
// `sessions` are kept; a new one evicts the least recently used idle one.
// An unnamed job gets a fresh sequence, freed when it ends.
//
// The prefix cache (cache_mem > 0; prefix-cache.h): every job, named or
// not, looks up the longest cached prefix of its prompt when its prefill
// is about to start and copies those rows into its sequence (beyond what
// its session already holds; never the last prompt token), then the rows
// a running sequence holds beyond them; it stores each full block it
// computes, the generated tokens' included when it ends. The logits after
// a hit are a cold prefill's to the bit. A job with a fresh sequence whose
// prompt a running sequence holds further than the cache does (n choices
// on one prompt: the first prefills, the others follow) forks from it
// instead (engine_seq_fork, cache or not): it reads those rows from the
// running sequence's store and copies none.
//
// Speculative decoding (spec.h): a decoding job whose text so far repeats
// itself gets a draft from it, fed as extra columns of its decode step
// (within the width: at most half of it when a prompt's chunk shares the
// call) and checked against its own samples; the tokens are the ones a
// plain decode gives, at any temperature, so on or off changes the speed
// only. On for every job unless no_spec; a request may choose
// (sched_gen.speculative). Each job's counters come with its timings.
//
// A prompt and its reply are fitted into the context by fit.h's one rule
// (the reply shortened first; a prompt that leaves no room loses its
// oldest tokens but a leading BOS), and the job reports what was dropped.
//
// Constrained decoding (grammar.h): a job with a grammar samples under it
// (gram_sample) and ends with SCHED_STOP as soon as the grammar can only
// end. Grammars are compiled in sched_generate (a bad one is SCHED_EBADREQ)
// and kept by text in a small cache, so the n choices of a request compile
// theirs once; each job has its own matcher. The vocabulary comes from
// sched_opts.vocab, built on the first grammar.
//
// Leases: a job naming a client (a frontend, say) is cancelled once that
// client's lease runs out (sched_lease renews it; so does each of its
// Generates): a client that died on another machine, which no pid check
// sees, leaves no job running for longer than its lease. The lease is
// looked at every housekeeping turn (10 ms while jobs run).
//
// A continued job (skip_draws): its sampler skips that many random numbers
// after seeding (sample_skip), so a job resubmitted on a restarted worker
// with prompt + the tokens already delivered draws what the lost one would
// have. Each event reports the sampler's draws after its token. Its
// grammar takes the last grammar_replay prompt tokens (those delivered)
// before the first new one, so it is where the lost job's grammar was and
// the redraws of rejected tokens repeat too.
//
// A failed engine call (a kernel backend that is gone, say) ends the jobs
// of that call with FINISH_ERROR and SCHED_EUNAVAILABLE; the scheduler goes
// on. Every function is safe to call from any thread.
#ifndef AD_SCHED_H
#define AD_SCHED_H

#include <stdint.h>

#include "engine.h"
#include "err.h"
#include "grammar.h"
#include "prefix-cache.h"
#include "sample.h"
#include "spec.h"

#define SCHED_TOP 5                                // candidates per token with want_top
#define SCHED_TOP_LOGPROBS SAMPLE_MAX_TOP_LOGPROBS // alternatives per token with logprobs
#define SCHED_SESSION_MAX 128                      // bytes of a session name, NUL included
#define SCHED_CLIENT_MAX 64                        // bytes of a lease's client name, NUL included
#define SCHED_MAX_LEASES 1024
#define SCHED_LEASE_MIN_MS 100
#define SCHED_LEASE_MAX_MS 60000

// error codes: the values of common.proto's ErrorCode (pinned in proto-pins.c)
enum sched_code {
	SCHED_OK = 0,
	SCHED_EBADREQ = 1,
	SCHED_EUNSUPPORTED = 2,
	SCHED_ENOTFOUND = 3,
	SCHED_ETOOLARGE = 4,
	SCHED_EINTERNAL = 5,
	SCHED_ETIMEOUT = 6,
	SCHED_EUNAVAILABLE = 7,
	SCHED_ECANCELLED = 8,
};

// the values of engine.proto's FinishReason
enum sched_finish {
	SCHED_RUNNING = 0,
	SCHED_STOP = 1,
	SCHED_LENGTH = 2,
	SCHED_CANCELLED = 3,
	SCHED_ERROR = 4,
};

struct sched_opts {
	int parallel;     // jobs admitted at once (0: 4)
	int queue;        // jobs waiting beyond them (0: 16)
	int sessions;     // named sessions kept (0: 8)
	int abandon_ms;   // cancel a job not polled for this long (0: 60000)
	int grace_ms;     // keep a finished job after its final poll (0: 10000)
	size_t cache_mem; // bytes of KV rows the prefix cache may hold (0: no cache)
	int cache_block;  // positions per cache block (0: SCHED_CACHE_BLOCK)
	// the model's vocabulary for grammars: get returns it (built on first
	// use, safe from any thread; NULL with a message when it cannot be);
	// find resolves a grammar's <text> tokens (NULL: they are refused).
	// Without get (the worker was started without a vocabulary source,
	// cpu_worker_opts.vocab) a grammar is SCHED_EUNSUPPORTED.
	struct sched_vocab {
		const struct gram_vocab *(*get)(void *ctx, char *err);
		int32_t (*find)(void *ctx, const char *s, size_t n);
		void *ctx;
	} vocab;
	const struct spec_opts *spec; // the drafts (NULL: spec_defaults); copied
	int no_spec;                  // jobs draft only when they ask (sched_gen.speculative)
};
#define SCHED_GRAMMARS 8 // compiled grammars kept
#define SCHED_CACHE_BLOCK 16

// a generation (engine.proto's GenerateRequest); the scheduler copies it
struct sched_gen {
	const int32_t *prompt;
	int n_prompt;
	int max_tokens; // >= 1
	struct sample_params sp;
	const int32_t *stop_ids;
	int n_stop;
	const char *session;  // NULL or "": a fresh sequence
	uint32_t deadline_ms; // 0: none
	int want_top;
	// report each token's logprob (sample_logprobs: the model's own logits,
	// before bias, penalties and temperature) and top_logprobs alternatives
	int logprobs;
	int top_logprobs; // [0, SCHED_TOP_LOGPROBS]
	int client_pid;   // > 0: cancel the job once this process is gone (checked every 100 ms)
	// constrained decoding: GBNF text (NULL or empty: none); lazy waits
	// for one of the trigger words or tokens
	const char *grammar;
	size_t grammar_len;
	int grammar_lazy;
	const char *const *grammar_words;
	int n_grammar_words;
	const int32_t *grammar_tokens;
	int n_grammar_tokens;
	int grammar_replay;  // a continued job: the last prompt tokens the grammar takes first
	const char *client;  // NULL or "": no lease; else renewed for lease_ms
	int lease_ms;        // [SCHED_LEASE_MIN_MS, SCHED_LEASE_MAX_MS]
	uint64_t skip_draws; // at most max_seq (see above)
	int speculative;     // SCHED_SPEC_*
	uint64_t request_id; // nonzero: a job with this id already is the answer (engine.proto)
};
// engine.proto's SpecMode (pinned in proto-pins.c)
enum { SCHED_SPEC_DEFAULT = 0, SCHED_SPEC_OFF = 1, SCHED_SPEC_ON = 2 };

struct sched_started {
	uint64_t job;
	int prompt_tokens; // in use, after the cut
	int dropped;       // cut (fit.h): prompt[dropped_from .. dropped_from + dropped)
	int dropped_from;  // 1 when a leading BOS stayed in front of the cut, else 0
	int max_tokens;    // the reply's room (fit.h: max_tokens, lowered to what the context leaves)
	int reused;        // already in the session's cache
};

struct sched_event {
	int32_t id;
	uint32_t index; // position among the generated tokens
	int n_top;
	struct sample_tok top[SCHED_TOP];
	uint64_t draws; // the sampler's draws once it chose id
	int has_lp;     // with logprobs
	float lp;       // the chosen token's
	int n_lp;       // alternatives, best first; .logit holds the logprob
	struct sample_tok lp_top[SCHED_TOP_LOGPROBS];
	int grammar_on;        // a lazy grammar switched on with this token
	uint32_t grammar_from; // bytes into the generated text where it applies
};


struct sched_poll {
	struct sched_event *events; // malloc'd (NULL when none); the caller frees
	int n_events;
	enum sched_finish finish;
	enum sched_code code;       // with SCHED_ERROR
	char msg[AD_ERRLEN];        // with SCHED_ERROR (and why a job was cancelled)
	struct gen_timings timings; // this job's since it was admitted, its queue and drafts
};

struct sched_stats {
	int queued, running, sessions;
	uint64_t jobs, tokens;        // since start
	uint64_t steps, step_columns; // decode steps and the sequences they carried
	uint64_t fused;               // steps that also carried a prefill chunk
	uint64_t forks, fork_rows;    // sequences forked from a running one, and the rows they share
	struct spec_stats spec;       // every job's drafts
	struct pcache_stats cache;    // all zero without a cache
};

struct sched;

// sched_new starts the engine thread; the engine must outlive the scheduler
struct sched *sched_new(struct engine *e, const struct sched_opts *o, char *err);
// refuse new work, end every job (FINISH_ERROR, SCHED_EUNAVAILABLE: the
// client should know its reply was cut), fail waiting evals, wake every
// poller; returns at once (sched_free joins the engine thread)
void sched_shutdown(struct sched *s);
void sched_free(struct sched *s); // NULL is fine; shuts down first

// The calls return 0, or -1 with *code (may be NULL) and a message.
int sched_generate(struct sched *s, const struct sched_gen *g, struct sched_started *out, enum sched_code *code,
                   char *err);
int sched_poll(struct sched *s, uint64_t job, int max_wait_ms, struct sched_poll *out, enum sched_code *code,
               char *err);
// the same, acknowledging: seen counts the events the caller has received
// (their indexes are below it); they are dropped, and the rest are handed
// over and kept until a later call acknowledges them, so a call repeated
// with the same seen gets the same events (and any new ones). seen beyond
// the events produced, or below those already dropped, is SCHED_EBADREQ.
// hold_ms > 0: tokens there are to hand over wait until hold_ms after the
// call for more, unless the job ends first (a holding poller is woken by
// the job's end and its own clock, not by every token)
int sched_poll_ack(struct sched *s, uint64_t job, uint64_t seen, int max_wait_ms, int hold_ms, struct sched_poll *out,
                   enum sched_code *code, char *err);
// cancelling a finished job is not an error
int sched_cancel(struct sched *s, uint64_t job, enum sched_code *code, char *err);
// renew client's lease for lease_ms from now (taking one out if it has
// none); *jobs (may be NULL) gets the client's jobs not finished
int sched_lease(struct sched *s, const char *client, int lease_ms, int *jobs, enum sched_code *code, char *err);
// teacher-forced logits (engine_eval; with layers > 0 engine_eval_layers,
// through the first `layers` layers) on the engine thread, between steps:
// *logits malloc'd, *rows of n_vocab (1 with last_only)
int sched_eval(struct sched *s, const int32_t *ids, int n, int per_token, int last_only, int layers, float **logits,
               int *rows, enum sched_code *code, char *err);
// embeddings of n inputs (ids[i], lens[i] tokens each, 1..max_seq) on the
// engine thread between steps: each input in a fresh sequence, up to
// SCHED_EMBED_SLOTS inputs sharing each call; the hidden states after the
// final norm pooled (pooling: SCHED_POOL_*, 0 the model's, mean when it
// declares none), then L2-normalised. *out malloc'd, n x *dims floats;
// *used the pooling applied. The bits do not depend on what shared a call.
enum { SCHED_POOL_MODEL = 0, SCHED_POOL_MEAN = 1, SCHED_POOL_CLS = 2, SCHED_POOL_LAST = 3 };
#define SCHED_EMBED_SLOTS 8
#define SCHED_EMBED_MAX_INPUTS 2048
int sched_embed(struct sched *s, const int32_t *const *ids, const int *lens, int n, int pooling, float **out, int *dims,
                int *used, enum sched_code *code, char *err);
// drop a session (not an error if there is none; a busy one goes when its
// job ends)
int sched_reset(struct sched *s, const char *session, enum sched_code *code, char *err);
void sched_stats(struct sched *s, struct sched_stats *st);

#endif
