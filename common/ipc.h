// ipc.h - request/reply between the anedvd processes, over nng.
//
// A server answers on one URL (ipc:// in the instance's runtime directory,
// or tcp://) with a pool of threads, each with its own nng context, so many
// requests are served at once. The handler receives the raw request bytes
// (a protobuf message) and must always produce reply bytes: a request it
// cannot decode gets an error reply, never silence.
//
// A client is safe to use from several threads: every call opens its own
// context. Every call has a timeout; a peer that is not there (yet, or any
// more) is an error after that timeout, never a hang. A call whose server
// dies before it answers is sent again to the server that next listens on
// the URL (a restarted service), within the same timeout: so the calls of
// the services are idempotent (test-toksvc kills the tokenizer under one).
// It is never sent twice to a server that is alive but slow. nng 1.5 stops
// redialing after some failed handshakes, so a client with a call in
// progress (waiting to send or for its reply) that has had no connection
// for a second dials anew (a thread of the process looks four times a
// second), as does one whose request found no connection within its
// timeout.
#ifndef AD_IPC_H
#define AD_IPC_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "err.h"

// The largest message either side accepts.
#define AD_IPC_MAX_MSG (64u << 20)

// handler: reply is malloc'd by the handler and freed by the server.
typedef void (*ad_ipc_handler)(void *arg, const uint8_t *req, size_t req_len, uint8_t **reply, size_t *reply_len);

struct ad_server;
struct ad_client;

struct ad_server *ad_server_start(const char *url, int nthreads, ad_ipc_handler fn, void *arg, char *err);
void ad_server_stop(struct ad_server *s); // closes, waits for in-flight handlers
// how often the server listened anew since its start: nng 1.5 stops
// accepting after a connection that fails as it is made (ipc.c, the guard)
unsigned ad_server_relistens(struct ad_server *s);
// how often the guard found new errors on its listener and weighed them
// (each client that closes its connection counts one)
unsigned ad_server_looks(struct ad_server *s);
// for tests: the next n listens anew fail (the guard tries again)
void ad_server_fail_listens(struct ad_server *s, int n);

// A service process's stop: SIGINT and SIGTERM blocked in every thread
// (ad_stop_block before the process starts its first thread) and taken by
// ad_stop_wait, which logs "signal N: stopping" and returns N.
void ad_stop_block(sigset_t *set);
int ad_stop_wait(const sigset_t *set);
// 1 when SIGINT or SIGTERM is pending (blocked by ad_stop_block, not yet
// taken): a long wait before ad_stop_wait (a start) checks it to give up
int ad_stop_pending(void);

struct ad_client *ad_client_open(const char *url, char *err);
// a client never connected to a server that is there waits up to 100 ms
// for its first connection before it closes (ipc.c: a close mid-handshake
// stops nng 1.5's listener)
void ad_client_close(struct ad_client *c);

// ad_client_drop_dialer: for tests, what nng 1.5 does by itself at times:
// the client stops dialing its server (the next call that finds no
// connection dials again)
void ad_client_drop_dialer(struct ad_client *c);
// for tests: the connections the client counts, and a connection event as
// nng would deliver it (id: the pipe's; added: 1 ADD_POST, 0 REM_POST)
int ad_client_pipes(struct ad_client *c);
void ad_client_pipe_event(struct ad_client *c, uint32_t id, int added);

// ad_client_call sends req and waits up to timeout_ms for the reply (malloc'd
// into *reply; the caller frees it). Returns -1 with a message on timeout or
// transport failure.
int ad_client_call(struct ad_client *c, const void *req, size_t req_len, uint8_t **reply, size_t *reply_len,
                   int timeout_ms, char *err);

// ad_ipc_fini, at the end of a process that used nng, once every server
// and client is closed: nng frees a closed socket's objects on its own
// threads after nng_close returns, so a process that exits at once can
// leave them behind (LeakSanitizer reported them now and then on error
// paths); this waits for them.
void ad_ipc_fini(void);

// ad_ipc_url builds "ipc://<rundir>/<name>.sock". Returns -1 if it does not
// fit (unix socket paths are short).
int ad_ipc_url(char *buf, size_t cap, const char *rundir, const char *name);

#endif
