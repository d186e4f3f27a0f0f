// rpc.h - typed request/reply between the anedvd processes: protobuf-c
// messages over common/ipc (which moves bytes).
//
// A service is a pair of envelope messages (proto/*.proto): a request
// with `uint64 id = 1` and a oneof `body`, a reply with `uint64 id = 1`,
// `Error error = 2` and a oneof `body` whose fields carry the same names
// as the request's (generate -> generate, health -> health). Every body
// field of a reply envelope has a message type of its own (a reply body
// names its field by its type).
//
// Client: ad_rpc_call wraps a request body in its envelope, gives it a
// fresh id, packs it, waits up to timeout_ms for the reply and unpacks it.
// Every failure comes out the same way, as an ErrorCode in *code (may be
// NULL) and a message in err that starts with the service's name:
//   - no reply within the timeout, or no peer (gone, restarting, never
//     there): ERROR_UNAVAILABLE, the transport's message;
//   - a reply that does not decode, answers another request (its id) or
//     carries another body than the request asked for: ERROR_INTERNAL;
//   - an error reply: the peer's code and message.
// A call is sent again to a restarted peer (common/ipc.h), so calls are
// idempotent. Safe from several threads on one client.
//
// Server: ad_rpc_serve is an ad_ipc_handler over an ad_rpc_server. It
// decodes the request envelope (one that does not decode, or has no body,
// is ERROR_BAD_REQUEST), answers Health itself (the process's name and
// pid, uptime, requests served; while the server's starting function says
// it is starting, that and its progress, and every other request fails
// with ERROR_UNAVAILABLE), hands every other body to the service's
// function and packs the reply: the body the function set, or the error it
// raised (ad_rpc_fail), under the request's id. A function's reply body and
// whatever it points to must stay valid until the reply is packed: they
// live in the request's scratch (scratch_size bytes, zeroed, released by
// the server's release function and freed after packing).
#ifndef AD_RPC_H
#define AD_RPC_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "ipc.h"

// a service's envelopes
struct ad_rpc_service {
	const char *name; // "engine service", ...: the first word of every message
	const ProtobufCMessageDescriptor *request, *reply;
};

extern const struct ad_rpc_service ad_rpc_engine;    // engine.proto: EngineRequest / EngineReply
extern const struct ad_rpc_service ad_rpc_tokenizer; // tokenizer.proto: TokRequest / TokReply
extern const struct ad_rpc_service ad_rpc_ane;       // ane.proto: AneRequest / AneReply

// --- client ------------------------------------------------------------------------------

// ad_rpc_call sends body (a message of one of the request envelope's body
// fields) and returns the reply envelope (its body set to the matching
// field; ad_rpc_free), or NULL with *code and err (see above).
void *ad_rpc_call(struct ad_client *c, const struct ad_rpc_service *s, const ProtobufCMessage *body, int timeout_ms,
                  int *code, char *err);
void ad_rpc_free(void *reply); // NULL is fine

// common.proto's HealthReply
struct ad_rpc_health {
	char process[64];
	uint32_t pid;
	uint64_t uptime_ms, requests;
	int starting;        // alive, not ready yet
	char progress[160];  // how far its start has come
	char finishing[160]; // what it completes before it exits when told to stop ("": nothing)
};

// ad_rpc_health asks the service's Health (h may be NULL): 0, or -1 with
// *code and err as ad_rpc_call's. A service still starting is not ready:
// -1, ERROR_UNAVAILABLE and "<service>: starting: <progress>" (h filled)
int ad_rpc_health(struct ad_client *c, const struct ad_rpc_service *s, struct ad_rpc_health *h, int timeout_ms,
                  int *code, char *err);

// --- server ------------------------------------------------------------------------------

// one request in the service function's hands
struct ad_rpc_req {
	int method;                   // the body's field number in the request envelope (its body_case)
	const ProtobufCMessage *body; // the request's body
	ProtobufCMessage *reply;      // set by the function: the reply's body
	void *scratch;                // the request's scratch
	int code;                     // set by ad_rpc_fail
	char msg[AD_ERRLEN];
};

// ad_rpc_fail: the request fails with code (common.proto's ErrorCode) and
// the formatted message; returns -1
int ad_rpc_fail(struct ad_rpc_req *q, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef void (*ad_rpc_fn)(void *arg, struct ad_rpc_req *q);

struct ad_rpc_server {
	const struct ad_rpc_service *svc;
	const char *process; // Health's name of the process
	ad_rpc_fn fn;
	void *arg;
	size_t scratch_size;
	void (*release)(void *scratch); // may be NULL
	uint64_t started_ns;
	uint64_t requests; // served, Health included (atomic)
	// NULL, or called for every request from any server thread: 1 while
	// the process is starting (its progress into buf), 0 once it serves
	int (*starting)(void *arg, char *buf, size_t cap);
	// NULL, or called for Health: 1 while the process has work it completes
	// before it exits when told to stop (what, into buf), else 0
	int (*finishing)(void *arg, char *buf, size_t cap);
};

void ad_rpc_server_init(struct ad_rpc_server *s, const struct ad_rpc_service *svc, const char *process, ad_rpc_fn fn,
                        void *arg, size_t scratch_size, void (*release)(void *scratch));
// an ad_ipc_handler: arg is the struct ad_rpc_server
void ad_rpc_serve(void *server, const uint8_t *req, size_t req_len, uint8_t **reply, size_t *reply_len);

#endif
