// service.h - the anedvd-cpu-worker service: EngineRequest in, EngineReply out.
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

#include "rpc.h"
#include "scheduler.h"

struct engine_service {
	struct sched *s;
	int local; // the callers share this machine (ipc://): their pids mean something
	int n_vocab, n_layer;
	struct ad_rpc_server rpc; // the dispatch (proto/rpc.h); Health reports its process name
};

void engine_service_init(struct engine_service *svc, struct sched *s, int n_vocab, int n_layer, const char *process);
void engine_service_handle(void *arg, const uint8_t *req, size_t req_len, uint8_t **reply, size_t *reply_len);

#endif
