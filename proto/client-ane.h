// client-ane.h - talking to anedvd-ane-worker's control plane
// (proto/ane.proto): Compile (the worker's kernel list, or a synthetic
// kernel built now), Stats, Attach (the data-plane object) and KernelCall
// for clients without the data plane. Kernel calls over the data plane do
// not come through here (common/dataplane.h).
//
// Each call is ad_rpc_call (rpc.h) with its one error mapping; it returns
// the AneReply with its body set (r->compile, r->stats, ...; ad_rpc_free)
// or NULL with *code and err. Health is ad_rpc_health(c, &ad_rpc_ane, ...).
#ifndef AD_CLIENT_ANE_H
#define AD_CLIENT_ANE_H

#include <stdint.h>

#include "ane.pb-c.h"
#include "rpc.h"

// q NULL: describe what the worker built at start
Anedvd__AneReply *anec_compile(struct ad_client *c, const Anedvd__CompileRequest *q, int timeout_ms, int *code,
                               char *err);
Anedvd__AneReply *anec_stats(struct ad_client *c, int timeout_ms, int *code, char *err);
Anedvd__AneReply *anec_attach(struct ad_client *c, const char *object, int timeout_ms, int *code, char *err);
// one kernel over nng; the reply's seq is checked against seq (ERROR_INTERNAL)
Anedvd__AneReply *anec_call(struct ad_client *c, uint32_t kernel, const char *input, const char *output, uint32_t ncols,
                            uint64_t seq, int timeout_ms, int *code, char *err);

#endif
