// ane-service.h - the ane-worker's service, as a library entry.
//
// ane_service_start compiles the kernel plan of a model (plan.h; from the
// disk cache when cache_dir names one) and answers AneRequests
// (proto/ane.proto) and the data plane's attachments on url until
// ane_service_stop (service.c). The anedvd-ane-worker process is this,
// between its flags and its signals (main-ane-worker.c); a single process
// can run the very same service on a thread of its own over inproc:// and
// reach it through kb_remote (cpu-worker/include/kernels.h) like the
// pipeline does.
//
// The model is the caller's and must outlive the service (the plan points
// into its tensors). The service logs its start (info, or debug when
// quiet) like the process.
#ifndef ANE_SERVICE_H
#define ANE_SERVICE_H

#include <stdint.h>

#include "model.h"

struct ane_service_opts {
	const char *url;       // where to listen: inproc://, ipc:// or tcp://
	const char *backend;   // "emu" (NULL) or "ane" (a macOS build)
	int chunk;             // columns every kernel is compiled for (0: 64)
	int split;             // split every dense FFN
	int threads;           // emu threads (0: 2)
	const char *weights;   // "fp16", "int8" or NULL: ane_plan_weights_default
	const char *cache_dir; // the compiled-kernel cache (NULL or "": none)
	int cache_mb;          // bound of the cache directory (0: KC_DEFAULT_MAX_MB)
	int delay_us;          // sleep inside every kernel call (tests)
	int build_delay_ms;    // a pause after each kernel built (tests: a start slow enough to watch)
	int store_delay_ms;    // a pause before a new cache entry is committed (tests: a slow disk)
	uint64_t model_us;     // the model's load time, for the start's log line
	int quiet;             // log the start at debug level (a service inside another program)
};

struct ane_service;

// listening from the first (Health, while the kernels are built, says how
// far they have come, and every other request fails with ERROR_UNAVAILABLE:
// rpc.h) and returning once they are; or NULL with err
struct ane_service *ane_service_start(const struct model *m, const struct ane_service_opts *o, char *err);
// wait for a new cache entry being written beside the start (a no-op
// without one), logging how it went
void ane_service_cache_wait(struct ane_service *s);
// stop answering, detach every data-plane client, free the kernels
void ane_service_stop(struct ane_service *s);

#endif
