// test-rpc.c - the typed RPC layer (proto/rpc.h) over a real nng server.
//
//   - a call returns the reply body matching its request, under its id;
//     Health is answered by the server itself (name, pid, requests);
//   - every failure maps to one code and a message naming the service:
//     a remote error (its code and message), a timeout and a peer that is
//     gone (ERROR_UNAVAILABLE), a reply that does not decode, answers
//     another request or carries another body (ERROR_INTERNAL);
//   - the server side: a request that does not decode or has no body is
//     ERROR_BAD_REQUEST, a function that sets no reply ERROR_INTERNAL; the
//     request's scratch is released after every request;
//   - a server still starting answers Health with its progress (not ready:
//     ERROR_UNAVAILABLE for ad_rpc_health) and fails every other request
//     with ERROR_UNAVAILABLE, without calling its function; once started,
//     both work.
#include <stdatomic.h>
#include <time.h>

#include "common.pb-c.h"
#include "engine.pb-c.h"
#include "rpc.h"
#include "t.h"
#include "tokenizer.pb-c.h"

struct scratch {
	Anedvd__GenerateReply g;
	Anedvd__CancelReply c;
	int *mark;
};

static atomic_int released;

static void
release(void *p)
{
	struct scratch *s = p;
	atomic_fetch_add(&released, 1);
	free(s->mark);
}

// generate: job = the prompt's length; poll: sleeps max_wait_ms and sets
// no reply; cancel: ERROR_NOT_FOUND naming the job
static void
fn(void *arg, struct ad_rpc_req *q)
{
	(void)arg;
	struct scratch *s = q->scratch;
	s->mark = malloc(16); // released after packing (LeakSanitizer checks)
	switch (q->method) {
	case ANEDVD__ENGINE_REQUEST__BODY_GENERATE: {
		const Anedvd__GenerateRequest *g = (const Anedvd__GenerateRequest *)q->body;
		anedvd__generate_reply__init(&s->g);
		s->g.job = g->n_prompt;
		q->reply = &s->g.base;
		break;
	}
	case ANEDVD__ENGINE_REQUEST__BODY_POLL: {
		const Anedvd__PollRequest *p = (const Anedvd__PollRequest *)q->body;
		struct timespec ts = {0, (long)p->max_wait_ms * 1000000L};
		nanosleep(&ts, NULL);
		break;
	}
	case ANEDVD__ENGINE_REQUEST__BODY_CANCEL: {
		const Anedvd__CancelRequest *c = (const Anedvd__CancelRequest *)q->body;
		ad_rpc_fail(q, ANEDVD__ERROR_CODE__ERROR_NOT_FOUND, "job %llu: no such job",
		            (unsigned long long)c->job);
		break;
	}
	case ANEDVD__ENGINE_REQUEST__BODY_RESET:
		// the wrong body for a Reset
		anedvd__cancel_reply__init(&s->c);
		q->reply = &s->c.base;
		break;
	default:
		ad_rpc_fail(q, ANEDVD__ERROR_CODE__ERROR_UNSUPPORTED, "not here");
	}
}

static struct ad_rpc_server S;
static struct ad_server *srv;
static struct ad_client *cl;
static char url[256];

static void
start(void)
{
	char err[AD_ERRLEN];
	REQUIRE(ad_ipc_url(url, sizeof url, t_tmpdir(), "rpc") == 0);
	ad_rpc_server_init(&S, &ad_rpc_engine, "test-rpc", fn, NULL, sizeof(struct scratch), release);
	REQUIRE((srv = ad_server_start(url, 4, ad_rpc_serve, &S, err)), "%s", err);
	REQUIRE((cl = ad_client_open(url, err)), "%s", err);
}

static void
test_call(void)
{
	char err[AD_ERRLEN] = "";
	int code = -1;
	int32_t prompt[3] = {1, 2, 3};
	Anedvd__GenerateRequest g = ANEDVD__GENERATE_REQUEST__INIT;
	g.prompt = prompt;
	g.n_prompt = 3;
	int before = atomic_load(&released);
	Anedvd__EngineReply *r = ad_rpc_call(cl, &ad_rpc_engine, &g.base, 2000, &code, err);
	REQUIRE(r, "%s", err);
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_NONE);
	CHECK(r->body_case == ANEDVD__ENGINE_REPLY__BODY_GENERATE && r->generate && r->generate->job == 3);
	CHECK(r->id != 0);
	ad_rpc_free(r);
	CHECK(atomic_load(&released) == before + 1, "released %d", atomic_load(&released) - before);
	// ids never repeat
	Anedvd__EngineReply *r2 = ad_rpc_call(cl, &ad_rpc_engine, &g.base, 2000, &code, err);
	REQUIRE(r2, "%s", err);
	ad_rpc_free(r2);
}

static void
test_health(void)
{
	char err[AD_ERRLEN] = "";
	struct ad_rpc_health h;
	int code = -1;
	REQUIRE(ad_rpc_health(cl, &ad_rpc_engine, &h, 2000, &code, err) == 0, "%s", err);
	CHECK(code == 0);
	CHECK(strcmp(h.process, "test-rpc") == 0, "%s", h.process);
	CHECK(h.pid == (uint32_t)getpid());
	CHECK(h.requests >= 1 && h.requests == __atomic_load_n(&S.requests, __ATOMIC_RELAXED));
	// h may be NULL
	CHECK(ad_rpc_health(cl, &ad_rpc_engine, NULL, 2000, NULL, err) == 0, "%s", err);
}

static void
test_remote_error(void)
{
	char err[AD_ERRLEN] = "";
	int code = -1;
	Anedvd__CancelRequest c = ANEDVD__CANCEL_REQUEST__INIT;
	c.job = 77;
	CHECK(ad_rpc_call(cl, &ad_rpc_engine, &c.base, 2000, &code, err) == NULL);
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_NOT_FOUND, "code %d", code);
	CHECK(strcmp(err, "engine service: job 77: no such job") == 0, "%s", err);
	// a function that sets no reply is the server's fault
	Anedvd__PollRequest p = ANEDVD__POLL_REQUEST__INIT;
	CHECK(ad_rpc_call(cl, &ad_rpc_engine, &p.base, 2000, &code, err) == NULL);
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_INTERNAL, "code %d", code);
	CHECK(strstr(err, "engine service: poll: no reply"), "%s", err);
	// so is the wrong body
	Anedvd__ResetRequest rr = ANEDVD__RESET_REQUEST__INIT;
	rr.session = "s";
	CHECK(ad_rpc_call(cl, &ad_rpc_engine, &rr.base, 2000, &code, err) == NULL);
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_INTERNAL, "code %d", code);
	CHECK(strstr(err, "reset: no reply"), "%s", err);
	// a body that is not one of the service's requests never leaves
	Anedvd__EncodeRequest e = ANEDVD__ENCODE_REQUEST__INIT;
	CHECK(ad_rpc_call(cl, &ad_rpc_engine, &e.base, 2000, &code, err) == NULL);
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_INTERNAL && strstr(err, "is not one of its requests"), "%d %s", code,
	      err);
}

static void
test_timeout(void)
{
	char err[AD_ERRLEN] = "";
	int code = -1;
	Anedvd__PollRequest p = ANEDVD__POLL_REQUEST__INIT;
	p.max_wait_ms = 600;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(ad_rpc_call(cl, &ad_rpc_engine, &p.base, 100, &code, err) == NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE, "code %d", code);
	CHECK(strncmp(err, "engine service: no reply within 100 ms", 38) == 0, "%s", err);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	CHECK(s < 0.55, "the call waited %.3f s", s); // not the handler's 600 ms
}

static void
test_peer_gone(void)
{
	char u[256], err[AD_ERRLEN] = "";
	REQUIRE(ad_ipc_url(u, sizeof u, t_tmpdir(), "gone") == 0);
	struct ad_server *s = ad_server_start(u, 1, ad_rpc_serve, &S, err);
	REQUIRE(s, "%s", err);
	struct ad_client *c = ad_client_open(u, err);
	REQUIRE(c, "%s", err);
	int code = -1;
	CHECK(ad_rpc_health(c, &ad_rpc_engine, NULL, 2000, &code, err) == 0, "%s", err);
	ad_server_stop(s);
	CHECK(ad_rpc_health(c, &ad_rpc_engine, NULL, 200, &code, err) == -1);
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE, "code %d", code);
	CHECK(strncmp(err, "engine service: ", 16) == 0, "%s", err);
	ad_client_close(c);
	// and one that was never there, through the tokenizer's envelopes
	REQUIRE(ad_ipc_url(u, sizeof u, t_tmpdir(), "nobody") == 0);
	REQUIRE((c = ad_client_open(u, err)), "%s", err);
	Anedvd__VocabInfoRequest v = ANEDVD__VOCAB_INFO_REQUEST__INIT;
	CHECK(ad_rpc_call(c, &ad_rpc_tokenizer, &v.base, 100, &code, err) == NULL);
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE, "code %d", code);
	CHECK(strncmp(err, "tokenizer service: ", 19) == 0, "%s", err);
	ad_client_close(c);
}

// raw servers whose replies are wrong in one way each
static int bad_mode;

static void
bad(void *arg, const uint8_t *req, size_t len, uint8_t **reply, size_t *reply_len)
{
	(void)arg;
	Anedvd__EngineRequest *q = anedvd__engine_request__unpack(NULL, len, req);
	Anedvd__EngineReply r = ANEDVD__ENGINE_REPLY__INIT;
	Anedvd__HealthReply h = ANEDVD__HEALTH_REPLY__INIT;
	Anedvd__CancelReply c = ANEDVD__CANCEL_REPLY__INIT;
	r.id = q ? q->id : 0;
	if (q)
		anedvd__engine_request__free_unpacked(q, NULL);
	r.body_case = ANEDVD__ENGINE_REPLY__BODY_HEALTH;
	r.health = &h;
	if (bad_mode == 0) { // not protobuf at all
		*reply = malloc(4);
		memcpy(*reply, "\xff\xff\xff\xff", 4);
		*reply_len = 4;
		return;
	}
	if (bad_mode == 1) // another request's id
		r.id += 1000;
	if (bad_mode == 2) { // another body
		r.body_case = ANEDVD__ENGINE_REPLY__BODY_CANCEL;
		r.cancel = &c;
	}
	if (bad_mode == 3) // no body
		r.body_case = ANEDVD__ENGINE_REPLY__BODY__NOT_SET;
	*reply_len = anedvd__engine_reply__get_packed_size(&r);
	*reply = malloc(*reply_len ? *reply_len : 1);
	anedvd__engine_reply__pack(&r, *reply);
}

static void
test_malformed_reply(void)
{
	char u[256], err[AD_ERRLEN] = "";
	REQUIRE(ad_ipc_url(u, sizeof u, t_tmpdir(), "bad") == 0);
	struct ad_server *s = ad_server_start(u, 1, bad, NULL, err);
	REQUIRE(s, "%s", err);
	struct ad_client *c = ad_client_open(u, err);
	REQUIRE(c, "%s", err);
	static const char *want[] = {"engine service: undecodable reply",
	                             "engine service: the reply answers another request",
	                             "engine service: the reply to health carries cancel",
	                             "engine service: the reply to health carries no body"};
	for (bad_mode = 0; bad_mode < 4; bad_mode++) {
		int code = -1;
		CHECK(ad_rpc_health(c, &ad_rpc_engine, NULL, 2000, &code, err) == -1, "mode %d", bad_mode);
		CHECK(code == ANEDVD__ERROR_CODE__ERROR_INTERNAL, "mode %d: code %d", bad_mode, code);
		CHECK(strcmp(err, want[bad_mode]) == 0, "mode %d: %s", bad_mode, err);
	}
	bad_mode = 4; // and the same server answering right
	CHECK(ad_rpc_health(c, &ad_rpc_engine, NULL, 2000, NULL, err) == 0, "%s", err);
	ad_server_stop(s);
	ad_client_close(c);
}

// the server's answers to requests no client library sends
static void
test_bad_requests(void)
{
	char err[AD_ERRLEN] = "";
	uint8_t junk[] = {0xff, 0xff, 0xff, 0x07}, *rep = NULL;
	size_t rlen = 0;
	REQUIRE(ad_client_call(cl, junk, sizeof junk, &rep, &rlen, 2000, err) == 0, "%s", err);
	Anedvd__EngineReply *r = anedvd__engine_reply__unpack(NULL, rlen, rep);
	free(rep);
	REQUIRE(r);
	CHECK(r->error && r->error->code == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	CHECK(r->error && strcmp(r->error->message, "could not decode the request as EngineRequest") == 0, "%s",
	      r->error ? r->error->message : "");
	anedvd__engine_reply__free_unpacked(r, NULL);
	// an envelope without a body, its id echoed
	Anedvd__EngineRequest q = ANEDVD__ENGINE_REQUEST__INIT;
	q.id = 4242;
	uint8_t buf[32];
	size_t n = anedvd__engine_request__pack(&q, buf);
	REQUIRE(ad_client_call(cl, buf, n, &rep, &rlen, 2000, err) == 0, "%s", err);
	r = anedvd__engine_reply__unpack(NULL, rlen, rep);
	free(rep);
	REQUIRE(r);
	CHECK(r->id == 4242 && r->body_case == ANEDVD__ENGINE_REPLY__BODY__NOT_SET);
	CHECK(r->error && r->error->code == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST &&
	      strcmp(r->error->message, "the request has no body") == 0);
	anedvd__engine_reply__free_unpacked(r, NULL);
}

static atomic_int warming = 1, fn_calls;

static int
warm(void *arg, char *buf, size_t cap)
{
	(void)arg;
	if (!atomic_load(&warming))
		return 0;
	snprintf(buf, cap, "warming up: %d of 7", 3);
	return 1;
}

static void
counting_fn(void *arg, struct ad_rpc_req *q)
{
	atomic_fetch_add(&fn_calls, 1);
	fn(arg, q);
}

static void
test_starting(void)
{
	char u[256], err[AD_ERRLEN] = "";
	REQUIRE(ad_ipc_url(u, sizeof u, t_tmpdir(), "rpc-starting") == 0);
	static struct ad_rpc_server s2;
	ad_rpc_server_init(&s2, &ad_rpc_engine, "test-rpc-starting", counting_fn, NULL, sizeof(struct scratch),
	                   release);
	s2.starting = warm;
	struct ad_server *sv = ad_server_start(u, 2, ad_rpc_serve, &s2, err);
	REQUIRE(sv, "%s", err);
	struct ad_client *c = ad_client_open(u, err);
	REQUIRE(c, "%s", err);
	struct ad_rpc_health h;
	int code = 0;
	CHECK(ad_rpc_health(c, &ad_rpc_engine, &h, 2000, &code, err) == -1, "a starting server is not ready");
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE, "code %d", code);
	CHECK(strcmp(err, "engine service: starting: warming up: 3 of 7") == 0, "%s", err);
	CHECK(h.starting && strcmp(h.progress, "warming up: 3 of 7") == 0 && h.pid == (uint32_t)getpid(),
	      "starting %d, progress '%s'", h.starting, h.progress);
	int32_t prompt[2] = {4, 5};
	Anedvd__GenerateRequest g = ANEDVD__GENERATE_REQUEST__INIT;
	g.prompt = prompt;
	g.n_prompt = 2;
	code = 0;
	CHECK(ad_rpc_call(c, &ad_rpc_engine, &g.base, 2000, &code, err) == NULL, "a call while starting");
	CHECK(code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE, "code %d", code);
	CHECK(strstr(err, "starting: warming up: 3 of 7") != NULL, "%s", err);
	CHECK(atomic_load(&fn_calls) == 0, "the function ran %d times while starting", atomic_load(&fn_calls));
	atomic_store(&warming, 0);
	CHECK(ad_rpc_health(c, &ad_rpc_engine, &h, 2000, &code, err) == 0, "%s", err);
	CHECK(!h.starting && h.progress[0] == 0, "started: starting %d, progress '%s'", h.starting, h.progress);
	Anedvd__EngineReply *r = ad_rpc_call(c, &ad_rpc_engine, &g.base, 2000, &code, err);
	CHECK(r && r->generate && r->generate->job == 2, "%s", r ? "another reply" : err);
	ad_rpc_free(r);
	CHECK(atomic_load(&fn_calls) == 1);
	ad_client_close(c);
	ad_server_stop(sv);
}

int
main(void)
{
	T_RUN(start);
	T_RUN(test_call);
	T_RUN(test_health);
	T_RUN(test_remote_error);
	T_RUN(test_timeout);
	T_RUN(test_peer_gone);
	T_RUN(test_malformed_reply);
	T_RUN(test_bad_requests);
	T_RUN(test_starting);
	ad_client_close(cl);
	ad_server_stop(srv);
	ad_ipc_fini();
	return t_done();
}
