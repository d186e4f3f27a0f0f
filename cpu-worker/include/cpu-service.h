// cpu-service.h - the anedvd-cpu-worker service: EngineRequest in, EngineReply out.
//
// engine_service_handle is an ad_ipc_handler (common/ipc.h) over a
// scheduler (scheduler.h): proto/rpc.h's dispatch decodes one protobuf
// EngineRequest (proto/engine.proto), answers Health, hands every other
// body to the service and encodes the EngineReply, echoing the request's
// id. A request it cannot decode or with an invalid field gets
// ERROR_BAD_REQUEST naming the field; an unknown job ERROR_NOT_FOUND; a full
// queue, a busy session or a worker shutting down ERROR_UNAVAILABLE. A job
// that fails later reports FINISH_ERROR with its Error in the PollReply; a
// job cancelled by the worker itself (an abandoned job, a client gone or
// whose Lease ran out) reports FINISH_CANCELLED with the reason there.
// client_pid counts only on a local (ipc://) service; a Lease on any.
//
// SamplingParams follow proto3: an absent message is all zeros, i.e.
// greedy; top_p and repeat_penalty of 0 mean "not given" (off, as 1).
// An Eval whose logits would not fit one message is ERROR_TOO_LARGE.
//
// Poll holds a server thread for up to its max_wait_ms: the server needs a
// thread per concurrent poller plus a few for the other calls.
#ifndef AD_ENGINE_SERVICE_H
#define AD_ENGINE_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "model.h"
#include "rpc.h"
#include "scheduler.h"
#include "spec.h"

struct engine_service {
	struct sched *s;
	int local; // the callers share this machine (ipc://): their pids mean something
	int n_vocab, n_layer;
	struct ad_rpc_server rpc; // the dispatch (proto/rpc.h); Health reports its process name
};

void engine_service_init(struct engine_service *svc, struct sched *s, int n_vocab, int n_layer, const char *process);
void engine_service_handle(void *arg, const uint8_t *req, size_t req_len, uint8_t **reply, size_t *reply_len);

// --- the whole worker ---------------------------------------------------------------------
//
// cpu_worker_start loads the model, builds the kernel backend, the engine,
// the scheduler and the service, and serves on url: what anedvd-cpu-worker
// runs, and what the CLI's --in-process runs on inproc://, so that there is
// one decode loop. cpu_worker_stop ends every job with an error, stops
// serving and frees it all (the surfaces it created are unlinked).

// the "emu" backend's constructor (kb_local_new, cli/kb-local.c: it composes
// both workers' libraries, so this one does not link it)
typedef struct kernel_backend *(*cpu_kb_new_fn)(const struct model *m, const struct kb_opts *o, char *err);

// the grammars' vocabulary: open gives the scheduler's sched_vocab for the
// model at model_path, of n_vocab tokens (get NULL: out of memory; it may
// read the model on the first grammar, get reports a failure then), close
// frees its ctx. vocab_local (cli/vocab-local.c: the model's tokenizer, read
// through the tokenizer library, which this one does not link) is the one
// the processes pass. Without one a grammar is refused (SCHED_EUNSUPPORTED,
// "started without a vocabulary source").
struct cpu_vocab_source {
	struct sched_vocab (*open)(const char *model_path, int n_vocab);
	void (*close)(void *ctx);
};
extern const struct cpu_vocab_source vocab_local;

struct cpu_worker_opts {
	const char *model_path, *url;
	const char *process; // Health's name and the log's (NULL: anedvd-cpu-worker)
	const char *backend; // "emu", "exact" or "remote"
	cpu_kb_new_fn emu_new;
	// the grammars' vocabulary (&vocab_local; NULL: grammars are refused)
	const struct cpu_vocab_source *vocab;
	const char *ane_url; // remote
	const char *weights; // "fp16", "int8" or NULL: plan.h's default for emu
	int chunk, split, threads;
	int max_seq; // 0: 2048, or the model's training context if smaller
	int parallel, queue, sessions, cache_block;
	size_t cache_mem;
	int cache_mem_set; // 0: the default for the KV of max(4, parallel) contexts
	long instance;     // the surfaces' instance (0: this process)
	int kernel_timeout_ms, kernel_deadline_ms;
	enum model_rope rope;
	struct spec_opts spec;
	int no_spec;
};

struct cpu_worker;
struct cpu_worker *cpu_worker_start(const struct cpu_worker_opts *o, char *err);
// after the stop: the jobs and tokens it served (either pointer may be NULL)
void cpu_worker_stop(struct cpu_worker *w, uint64_t *jobs, uint64_t *tokens);

#endif
