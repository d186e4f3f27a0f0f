// engine-client.h - talking to anedvd-cpu-worker (proto/engine.proto).
//
// Thin typed wrappers over ad_client_call: each builds an EngineRequest,
// waits up to timeout_ms for the EngineReply and turns an error reply into
// -1 with the service's message and its ErrorCode in *code (may be NULL;
// a transport failure or a timeout is ERROR_UNAVAILABLE). A job's own
// failure is not a call failure: engc_poll returns 0 with finish
// FINISH_ERROR and the job's code and message. Safe to call from several
// threads on one client. engc_run is the whole life of a job in one call
// (generate, then poll until the finish), for tools and tests.
#ifndef AD_ENGINE_CLIENT_H
#define AD_ENGINE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "ipc.h"
#include "sample.h"

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
	int client_pid; // > 0: an ipc:// engine cancels the job once this process is gone
	const char *grammar; // GBNF (NULL: none); lazy with its trigger words and tokens
	int grammar_lazy;
	const char *const *grammar_words;
	size_t n_grammar_words;
	const int32_t *grammar_tokens;
	size_t n_grammar_tokens;
};

struct engc_started {
	uint64_t job;
	uint32_t prompt_tokens, dropped, reused;
};

struct engc_event {
	int32_t id;
	uint32_t index;
	int n_top;
	struct sample_tok top[ENGC_TOP];
	int grammar_on;        // a lazy grammar switched on here
	uint32_t grammar_from; // bytes into the text where it applies
};

// engine.proto's Timings
struct engc_timings {
	uint64_t queue_ns, prefill_ns, decode_ns, kernel_ns, ipc_ns, attention_ns, sampling_ns, cpu_other_ns, moe_ns;
	uint64_t round_trips; // calls to the kernel backend
	uint32_t prefill_tokens, decode_tokens;
	uint32_t cached_tokens; // prompt tokens reused (session, prefix cache)
};

struct engc_poll {
	struct engc_event *events; // malloc'd; engc_poll_free
	size_t n_events;
	enum engc_finish finish;
	int code;            // the job's ErrorCode with ENGC_ERROR
	char msg[AD_ERRLEN]; // and its message
	struct engc_timings timings;
};

struct engc_health {
	char process[64];
	uint32_t pid;
	uint64_t uptime_ms, requests;
};

int engc_generate(struct ad_client *c, const struct engc_gen *g, struct engc_started *out, int timeout_ms,
                  int *code, char *err);
// waits up to max_wait_ms for tokens; the call itself gets max_wait_ms + timeout_ms
int engc_poll(struct ad_client *c, uint64_t job, uint32_t max_wait_ms, struct engc_poll *out, int timeout_ms,
              int *code, char *err);
void engc_poll_free(struct engc_poll *p);
int engc_cancel(struct ad_client *c, uint64_t job, int timeout_ms, int *code, char *err);
// *logits malloc'd: *rows x *n_vocab; upto_layer 0: the whole model
int engc_eval(struct ad_client *c, const int32_t *ids, size_t n, int per_token, int last_only, uint32_t upto_layer,
              float **logits, uint32_t *rows, uint32_t *n_vocab, int timeout_ms, int *code, char *err);
int engc_reset(struct ad_client *c, const char *session, int timeout_ms, int *code, char *err);
int engc_health(struct ad_client *c, struct engc_health *h, int timeout_ms, int *code, char *err);

// engc_run: generate and poll to the end. *ids (malloc'd) gets every token,
// *finish the outcome; a job that ends in FINISH_ERROR returns 0 with the
// job's message in err. timings and started may be NULL.
int engc_run(struct ad_client *c, const struct engc_gen *g, int32_t **ids, size_t *n_ids, enum engc_finish *finish,
             struct engc_started *started, struct engc_timings *timings, int timeout_ms, int *code, char *err);

#endif
