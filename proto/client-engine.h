// client-engine.h - talking to anedvd-cpu-worker (proto/engine.proto): the
// one place that packs and unpacks its messages (the CLI, the HTTP
// frontend and the tests all come through here).
//
// Thin typed wrappers over ad_rpc_call (proto/rpc.h): each sends one
// request body, waits up to timeout_ms for the EngineReply and turns every
// failure into -1 with rpc.h's one mapping: the service's message and its
// ErrorCode in *code (may be NULL; a transport failure or a timeout is
// ERROR_UNAVAILABLE). Health is rpc.h's ad_rpc_health(c, &ad_rpc_engine, ...). A job's own
// failure is not a call failure: engc_poll returns 0 with finish
// FINISH_ERROR and the job's code and message. Safe to call from several
// threads on one client. engc_run is the whole life of a job in one call
// (generate, then poll until the finish), for tools and tests.
//
// engc_job (below) is a generation that outlives the worker: what the CLI
// and the frontend run, so that a crashed cpu-worker loses no request.
#ifndef AD_ENGINE_CLIENT_H
#define AD_ENGINE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gen-types.h"
#include "ipc.h"
#include "rpc.h"

#define ENGC_TOP 5

// engine.proto's FinishReason
enum engc_finish {
	ENGC_RUNNING = 0,
	ENGC_STOP = 1,
	ENGC_LENGTH = 2,
	ENGC_CANCELLED = 3,
	ENGC_ERROR = 4,
};

struct engc_gen {
	const int32_t *prompt;
	size_t n_prompt;
	uint32_t max_tokens;
	const struct sample_params *sp; // NULL: greedy
	const int32_t *stop_ids;
	size_t n_stop;
	const char *session; // NULL: none
	uint32_t deadline_ms;
	int want_top;
	int logprobs;       // report each token's logprob
	int top_logprobs;   // and this many alternatives (0-20)
	int client_pid;     // > 0: an ipc:// engine cancels the job once this process is gone
	const char *client; // NULL: no lease; else the lease renewed for lease_ms (engc_lease)
	uint32_t lease_ms;
	uint64_t skip_draws; // the sampler's draws to skip: a continued job (engc_job does it)
	const char *grammar; // GBNF (NULL: none); lazy with its trigger words and tokens
	int grammar_lazy;
	const char *const *grammar_words;
	size_t n_grammar_words;
	const int32_t *grammar_tokens;
	size_t n_grammar_tokens;
	uint32_t grammar_replay; // a continued job: its last prompt tokens the grammar takes first (engc_job)
	int speculative;         // 0 the worker's default, 1 off, 2 on (engine.proto's SpecMode)
	uint64_t request_id;     // 0: engc_generate draws one (engine.proto: a Generate sent again)
};

// what Generate answered; the engine fitted the prompt and the reply into
// its context (cpu-worker/fit.h): it kept prompt[0 .. dropped_from) and
// prompt[dropped_from + dropped ..], and the reply has max_tokens of room
struct engc_started {
	uint64_t job;
	uint32_t prompt_tokens, dropped, reused;
	uint32_t dropped_from, max_tokens;
};

struct engc_event {
	int32_t id;
	uint32_t index; // position among the generated tokens
	uint64_t draws; // the sampler's draws once it chose id
	int n_top;
	struct sample_tok top[ENGC_TOP];
	int has_lp; // with logprobs
	float lp;
	int n_lp; // alternatives, best first; .logit holds the logprob
	struct sample_tok lp_top[SAMPLE_MAX_TOP_LOGPROBS];
	int grammar_on;        // a lazy grammar switched on here
	uint32_t grammar_from; // bytes into the generated text where it applies
};

// engine.proto's Timings: struct gen_timings (common/gen-types.h)

// engine.proto's CacheStats: the worker's prefix cache
struct engc_cache {
	uint64_t lookups, hit_tokens, evictions, bytes, limit_bytes, stored;
	uint32_t blocks, block_tokens;
	uint64_t windows_dropped; // windowed parts of blocks dropped
};

struct engc_poll {
	struct engc_event *events; // malloc'd; engc_poll_free
	size_t n_events;
	enum engc_finish finish;
	int code;            // the job's ErrorCode with ENGC_ERROR (and why with ENGC_CANCELLED)
	char msg[AD_ERRLEN]; // and its message
	struct gen_timings timings;
	int has_cache; // with the final poll
	struct engc_cache cache;
};

int engc_generate(struct ad_client *c, const struct engc_gen *g, struct engc_started *out, int timeout_ms, int *code,
                  char *err);
// waits up to max_wait_ms for tokens; the call itself gets max_wait_ms + timeout_ms
int engc_poll(struct ad_client *c, uint64_t job, uint32_t max_wait_ms, struct engc_poll *out, int timeout_ms, int *code,
              char *err);
// the same, acknowledging the seen events the caller has received of this
// job (PollRequest.ack): a call repeated with the same seen after a lost
// reply gets the same events again. engc_run and engc_job poll so.
// hold_ms > 0: tokens there are wait until hold_ms after the call for
// more, unless the job ends first (PollRequest.hold_ms; at most max_wait_ms)
int engc_poll_ack(struct ad_client *c, uint64_t job, uint64_t seen, uint32_t max_wait_ms, uint32_t hold_ms,
                  struct engc_poll *out, int timeout_ms, int *code, char *err);
void engc_poll_free(struct engc_poll *p);
int engc_cancel(struct ad_client *c, uint64_t job, int timeout_ms, int *code, char *err);
// *logits malloc'd: *rows x *n_vocab; upto_layer 0: the whole model
int engc_eval(struct ad_client *c, const int32_t *ids, size_t n, int per_token, int last_only, uint32_t upto_layer,
              float **logits, uint32_t *rows, uint32_t *n_vocab, int timeout_ms, int *code, char *err);
int engc_reset(struct ad_client *c, const char *session, int timeout_ms, int *code, char *err);
// renew client's lease for lease_ms; *jobs (may be NULL): its jobs running
int engc_lease(struct ad_client *c, const char *client, uint32_t lease_ms, uint32_t *jobs, int timeout_ms, int *code,
               char *err);
// embeddings of n inputs (ids[i], lens[i] tokens); *vectors malloc'd, n x *dims
int engc_embed(struct ad_client *c, const int32_t *const *ids, const size_t *lens, size_t n, uint32_t pooling,
               float **vectors, uint32_t *dims, int timeout_ms, int *code, char *err);

// engc_run: generate and poll to the end. *ids (malloc'd) gets every token,
// *finish the outcome; a job that ends in FINISH_ERROR returns 0 with the
// job's message in err. timings and started may be NULL.
int engc_run(struct ad_client *c, const struct engc_gen *g, int32_t **ids, size_t *n_ids, enum engc_finish *finish,
             struct engc_started *started, struct gen_timings *timings, int timeout_ms, int *code, char *err);

// --- a generation that outlives the worker -------------------------------------------
//
// An engc_job runs one generation and keeps what it takes to continue it on
// a restarted worker: the prompt the engine kept, every token delivered so
// far and the sampler's draws after the last one. The job is lost when a
// Poll gets no answer (the worker died or hangs: the old job is cancelled
// in case it still runs) or NOT_FOUND (a restarted worker: job ids never
// repeat), or when the engine ends it with ERROR_UNAVAILABLE (a worker
// shutting down, an ane-worker away past the kernel deadline) or cancels
// it unasked (a lease that ran out, an abandoned job). engc_job_poll then
// waits for the engine (Health) and submits the prompt + the delivered
// tokens as a new job: max_tokens less those, the same sampling with
// skip_draws, the grammar with grammar_replay (it takes the delivered
// tokens first, a lazy one's triggers included), the deadline's rest. The worker prefills them again (its
// caches died with it) and the tokens that follow are those the lost job
// would have given, greedy or sampled: a position's logits do not depend
// on how it was fed (engine.h) and the sampler's window and generator are
// restored (sample.h). The caller sees one stream: events keep counting
// their index, the timings add up every incarnation's (cached_tokens is
// the first one's). An engine that refuses with ERROR_UNAVAILABLE (its
// queue is full) is asked again. Only when the engine is still away at
// `until` does a call fail, with ERROR_UNAVAILABLE and a message saying
// so; other errors (a bad request, a job's own failure, its deadline) are
// passed on as they come. A job lost ENGC_MAX_FRUITLESS times in a row
// with no token delivered in between fails with ERROR_INTERNAL: a request
// that crashes the worker every time must not crash it for ever (and every
// other request with it).
//
// One thread drives a job; jobs may share a client.
#define ENGC_WAIT_MS 60000 // how long a lost job waits for the engine without an `until`
#define ENGC_MAX_FRUITLESS 5

struct engc_job;
// g is copied (prompt, stop ids, sampling and its bias, session, client).
// until_ns: CLOCK_MONOTONIC ns past which an engine that is away is an
// error; 0: ENGC_WAIT_MS after the job was lost. timeout_ms: each call.
struct engc_job *engc_job_new(struct ad_client *c, const struct engc_gen *g, int timeout_ms, uint64_t until_ns,
                              char *err);
void engc_job_free(struct engc_job *j); // NULL is fine; cancels a job still running
// submit it: 0 when started (*info: the first incarnation's), 1 when the
// engine is away or full (the call waited up to wait_ms: call again), -1
// on a failure (*code, err)
int engc_job_start(struct engc_job *j, uint32_t wait_ms, struct engc_started *info, int *code, char *err);
// engc_poll_ack's contract for a started job, across losses: 0 with the
// new tokens and the finish (ENGC_RUNNING, with no tokens, while it waits
// for the engine), -1 on a failure
int engc_job_poll(struct engc_job *j, uint32_t max_wait_ms, uint32_t hold_ms, struct engc_poll *out, int *code,
                  char *err);
// A reader that streams a job's tokens (run, the server) takes a frame's
// tokens at a time: after a poll that came back with tokens at t0_ns
// (ad_now_ns), the next one holds the new ones for the rest of
// ENGC_FRAME_NS, engc_frame_left_ms (its hold_ms). A poll per decode step
// woke the reader, the engine's service thread and the tokenizer in the
// middle of every step, and on a small machine each wake took a core from
// the workers (stories260K: the ane-worker picked up a step's first call
// 84 us late at the median, where 2 us is usual, and decoded at half
// speed). The first token is never held back, nor the job's end: a reply
// of 20 tokens of stories260K, done in 3 ms, came 41 ms after its request
// while the reader slept out whole frames.
#define ENGC_FRAME_NS 20000000u
uint32_t engc_frame_left_ms(uint64_t t0_ns);
// end it (best effort; a lost job has nothing to cancel)
void engc_job_cancel(struct engc_job *j);
int engc_job_replays(const struct engc_job *j); // incarnations after the first
int engc_job_waiting(const struct engc_job *j); // lost and waiting for the engine
// the tokens delivered so far (engc_job_delivered(j, &n))
const int32_t *engc_job_delivered(const struct engc_job *j, size_t *n);

#endif
