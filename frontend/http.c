// http.c - the h2o side of anedvd-frontend: routing, responses, SSE output,
// the workers' messages, and noticing clients that went away.
//
// Everything here runs on the loop thread. A generation's request keeps a
// struct fe_req (allocated in the request's pool, so h2o's disposal of the
// request is our signal that it is gone). SSE output is buffered: h2o takes
// one h2o_send at a time and calls proceed when it is written, and whatever
// arrived meanwhile goes out in the next send.
//
// h2o 2.2.5 stops reading a connection while its request is handled, so a
// client that closes during a long prefill or a non-streamed generation
// would only be noticed when the reply is written. A 50 ms tick therefore
// peeks at the sockets of the requests waiting on a worker.
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <errno.h>
#include <h2o.h>
#include <h2o/http1.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fe.h"
#include "guard.h"
#include "log.h"

extern const unsigned char fe_webui[];
extern const size_t fe_webui_len;

struct buf {
	char *s;
	size_t len, cap;
};

struct fe_req {
	h2o_generator_t gen; // first: h2o hands it back to proceed/stop
	h2o_req_t *req;
	struct fe_gen *g;
	const struct fe_dialect *d;
	const char *endpoint;
	int started; // response headers are out (SSE)
	int flushed; // at least one h2o_send happened
	int sending; // an h2o_send is being written
	int closing; // the last bytes are in out
	int done;    // the final send happened
	int fd;      // the connection's socket, -1 if unknown
	uint64_t last_write_ns;
	struct buf out, inflight;
	h2o_linklist_t active;
};

struct fe_msg {
	h2o_multithread_message_t super;
	struct fe_gen *g;
	enum fe_msg_kind kind;
	int index;     // the choice (FE_MSG_TEXT)
	int part;      // FE_PART_CONTENT or FE_PART_REASONING
	int call;      // 0: text; else a tool call's arguments (fe_chunk)
	int has_start; // the call starts here: start holds its id and name
	struct fe_call start;
	struct fe_lp_tok *lp; // malloc'd, n_lp tokens with logprobs
	size_t n_lp;
	size_t len;
	char text[];
};

static struct {
	const struct fe_config *cfg;
	h2o_globalconf_t config;
	h2o_context_t ctx;
	h2o_accept_ctx_t accept_ctx;
	h2o_multithread_receiver_t receiver;
	h2o_timeout_t tick;
	h2o_timeout_entry_t tick_entry;
	h2o_linklist_t active;
	h2o_socket_t *listener;
	long long started_at;
	char *csp; // the WebUI's Content-Security-Policy header
	volatile sig_atomic_t stop;
} S;

static const char *
reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 204:
		return "No Content";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 413:
		return "Payload Too Large";
	case 415:
		return "Unsupported Media Type";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	default:
		return "Error";
	}
}

static void
hdr(h2o_req_t *req, const char *name, const char *value)
{
	h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 1, NULL, value, strlen(value));
}

static void
cors(h2o_req_t *req)
{
	fe_guard_cors(S.cfg, req);
}

// respond sends a whole response; body is copied unless it is static
static void
respond(h2o_req_t *req, const char *endpoint, int status, const char *ctype, const void *body, size_t len, int copy)
{
	static h2o_generator_t none = {NULL, NULL};
	req->res.status = status;
	req->res.reason = reason(status);
	cors(req);
	hdr(req, "cache-control", "no-store");
	if (ctype)
		hdr(req, "content-type", ctype);
	req->res.content_length = len;
	h2o_iovec_t b = copy ? h2o_strdup(&req->pool, body, len) : h2o_iovec_init(body, len);
	fe_metrics_request(endpoint, status);
	h2o_start_response(req, &none);
	h2o_send(req, &b, len ? 1 : 0, H2O_SEND_STATE_FINAL);
}

static void
respond_json(h2o_req_t *req, const char *endpoint, int status, char *json, size_t len)
{
	if (!json) {
		static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}";
		respond(req, endpoint, 503, "application/json", oom, sizeof oom - 1, 0);
		return;
	}
	respond(req, endpoint, status, "application/json", json, len, 1);
	free(json);
}

static void respond_error(h2o_req_t *req, const struct fe_dialect *d, const char *endpoint, int status,
                          const char *param, const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static void
respond_error(h2o_req_t *req, const struct fe_dialect *d, const char *endpoint, int status, const char *param,
              const char *fmt, ...)
{
	char msg[AD_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (status == 503)
		hdr(req, "retry-after", "1");
	if (status == 401)
		hdr(req, "www-authenticate", "Bearer");
	size_t len = 0;
	char *json = d->error(status, msg, param, &len);
	respond_json(req, endpoint, status, json, len);
}

// --- generations ---------------------------------------------------------------------

static void
gen_unref(struct fe_gen *g)
{
	if (--g->refs > 0)
		return;
	fe_params_free(&g->p);
	free(g->text);
	fe_choices_free(g);
	free(g);
}

static int
buf_add(struct buf *b, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		while (cap < b->len + n)
			cap *= 2;
		char *t = realloc(b->s, cap);
		if (!t)
			return -1;
		b->s = t;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	return 0;
}

static void
mark_cancelled(struct fe_gen *g)
{
	__atomic_store_n(&g->cancelled, 1, __ATOMIC_RELEASE);
}

static void
deactivate(struct fe_req *rq)
{
	if (h2o_linklist_is_linked(&rq->active))
		h2o_linklist_unlink(&rq->active);
}

// flush writes what is buffered, once the previous write is done. After the
// final send the request may be gone: nothing touches rq after it.
static void
flush(struct fe_req *rq)
{
	if (!rq->started || rq->sending || rq->done)
		return;
	if (rq->out.len == 0 && !rq->closing && rq->flushed)
		return;
	struct buf t = rq->inflight;
	rq->inflight = rq->out;
	rq->out = t;
	rq->out.len = 0;
	h2o_iovec_t v = h2o_iovec_init(rq->inflight.s, rq->inflight.len);
	rq->sending = 1;
	rq->last_write_ns = fe_now_ns();
	rq->flushed = 1;
	if (rq->closing) {
		rq->done = 1;
		h2o_send(rq->req, &v, v.len ? 1 : 0, H2O_SEND_STATE_FINAL);
	} else {
		h2o_send(rq->req, &v, v.len ? 1 : 0, H2O_SEND_STATE_IN_PROGRESS);
	}
}

static void
on_proceed(h2o_generator_t *self, h2o_req_t *req)
{
	struct fe_req *rq = (struct fe_req *)self;
	rq->sending = 0;
	rq->inflight.len = 0;
	flush(rq);
}

static void
on_stop(h2o_generator_t *self, h2o_req_t *req)
{
	struct fe_req *rq = (struct fe_req *)self;
	if (rq->g)
		mark_cancelled(rq->g);
}

static void
on_dispose(void *p)
{
	struct fe_req *rq = p;
	deactivate(rq);
	free(rq->out.s);
	free(rq->inflight.s);
	struct fe_gen *g = rq->g;
	if (!g)
		return;
	g->req = NULL;
	mark_cancelled(g);
	if (fe_unqueue(g))
		g->refs--; // the worker never took it; the request's own reference remains
	gen_unref(g);
}

static void
append(struct fe_req *rq, char *s, size_t n)
{
	if (!s || buf_add(&rq->out, s, n) != 0) {
		ad_warn("out of memory writing a stream");
		mark_cancelled(rq->g);
	}
	free(s);
}

static void
sse_start(struct fe_req *rq, int with_events)
{
	if (rq->started)
		return;
	h2o_req_t *req = rq->req;
	req->res.status = 200;
	req->res.reason = "OK";
	cors(req);
	hdr(req, "content-type", "text/event-stream; charset=utf-8");
	hdr(req, "cache-control", "no-cache");
	hdr(req, "x-accel-buffering", "no");
	fe_metrics_request(rq->endpoint, 200);
	h2o_start_response(req, &rq->gen);
	rq->started = 1;
	if (with_events) {
		size_t n = 0;
		char *s = rq->d->stream_start(rq->g, &n);
		append(rq, s, n);
	}
}

static void
finish(struct fe_req *rq)
{
	struct fe_gen *g = rq->g;
	h2o_req_t *req = rq->req;
	deactivate(rq);
	const struct fe_result *r = &g->r;
	int error = r->finish == FE_FINISH_ERROR;
	if (error)
		ad_warn("%s %s: %s", rq->endpoint, g->id, r->err);
	size_t n = 0;
	if (!g->p.stream) {
		rq->done = 1;
		int status = error ? (r->status ? r->status : 502) : 200;
		char *body = error ? rq->d->error(status, r->err, r->param[0] ? r->param : NULL, &n)
		                   : rq->d->response(g, &n);
		if (status == 503)
			hdr(req, "retry-after", "1");
		respond_json(req, rq->endpoint, status, body, n);
		return;
	}
	char *ev;
	if (error) {
		sse_start(rq, 0);
		ev = rq->d->stream_error(r->status, r->err, &n);
	} else {
		sse_start(rq, 1);
		ev = rq->d->stream_end(g, &n);
	}
	append(rq, ev, n);
	rq->closing = 1;
	flush(rq);
}

static void
on_message(struct fe_msg *m)
{
	struct fe_gen *g = m->g;
	struct fe_req *rq = g->req;
	if (rq && !rq->done) {
		size_t n = 0;
		switch (m->kind) {
		case FE_MSG_START:
			if (g->p.stream) {
				sse_start(rq, 1);
				flush(rq);
			}
			break;
		case FE_MSG_TEXT:
			if (g->p.stream) {
				sse_start(rq, 1);
				struct fe_chunk c = {.index = m->index,
				                     .text = m->text,
				                     .len = m->len,
				                     .lp = m->lp,
				                     .n_lp = m->n_lp,
				                     .part = m->part,
				                     .call = m->call,
				                     .start = m->has_start ? &m->start : NULL};
				char *ev = rq->d->stream_chunk ? rq->d->stream_chunk(g, &c, &n)
				                               : rq->d->stream_text(g, m->text, m->len, &n);
				append(rq, ev, n);
				flush(rq);
			}
			break;
		case FE_MSG_DONE:
			finish(rq);
			break;
		}
	}
	if (m->kind == FE_MSG_DONE)
		gen_unref(g);
}

static void
on_messages(h2o_multithread_receiver_t *receiver, h2o_linklist_t *list)
{
	while (!h2o_linklist_is_empty(list)) {
		struct fe_msg *m = H2O_STRUCT_FROM_MEMBER(struct fe_msg, super.link, list->next);
		h2o_linklist_unlink(&m->super.link);
		on_message(m);
		free(m->lp);
		free(m);
	}
}

void
fe_post(struct fe_gen *g, enum fe_msg_kind kind, const char *text, size_t len)
{
	struct fe_msg *m = malloc(sizeof *m + len + 1);
	if (!m) {
		ad_error("out of memory passing a message to the loop");
		if (kind != FE_MSG_DONE)
			return;
		// the final message must arrive: wait for memory rather than leak the request
		while (!(m = malloc(sizeof *m + 1)))
			usleep(1000);
		len = 0;
	}
	memset(&m->super, 0, sizeof m->super);
	m->g = g;
	m->kind = kind;
	m->index = 0;
	m->part = FE_PART_CONTENT;
	m->call = 0;
	m->has_start = 0;
	m->lp = NULL;
	m->n_lp = 0;
	m->len = len;
	if (len)
		memcpy(m->text, text, len);
	m->text[len] = 0;
	h2o_multithread_send_message(&S.receiver, &m->super);
}

void
fe_post_chunk(struct fe_gen *g, const struct fe_chunk *c)
{
	struct fe_msg *m = malloc(sizeof *m + c->len + 1);
	struct fe_lp_tok *lp = c->n_lp ? malloc(c->n_lp * sizeof *lp) : NULL;
	if (!m || (c->n_lp && !lp)) {
		ad_error("out of memory passing a message to the loop");
		free(m);
		free(lp);
		return;
	}
	memset(&m->super, 0, sizeof m->super);
	m->g = g;
	m->kind = FE_MSG_TEXT;
	m->index = c->index;
	m->part = c->part;
	m->call = c->call;
	m->has_start = c->start != NULL;
	if (c->start) {
		m->start = *c->start;
		m->start.args = NULL; // the id and name only
		m->start.len = m->start.cap = 0;
	}
	m->lp = lp;
	m->n_lp = c->n_lp;
	if (lp)
		memcpy(lp, c->lp, c->n_lp * sizeof *lp);
	m->len = c->len;
	if (c->len)
		memcpy(m->text, c->text, c->len);
	m->text[c->len] = 0;
	h2o_multithread_send_message(&S.receiver, &m->super);
}

// the socket of an HTTP/1 connection: h2o 2.2.5 keeps it right after the
// public part of its connection struct (lib/http1.c, struct st_h2o_http1_conn_t)
static h2o_socket_t *
conn_sock(h2o_req_t *req)
{
	if (req->version >= 0x200)
		return NULL;
	struct http1_conn_head {
		h2o_conn_t super;
		h2o_socket_t *sock;
	} *c = (void *)req->conn;
	return c->sock;
}

static int
conn_fd(h2o_req_t *req)
{
	h2o_socket_t *sock = conn_sock(req);
	return sock ? h2o_socket_get_fd(sock) : -1;
}

// the raw head of a request with a body: h2o 2.2.5 reads an HTTP/1 request
// into the socket's input buffer, head first, and points the entity into
// the same buffer right after it
static const char *
request_head(h2o_req_t *req, size_t *len)
{
	h2o_socket_t *sock = conn_sock(req);
	*len = 0;
	if (!sock || !sock->input || !req->entity.base)
		return NULL;
	const char *b = sock->input->bytes, *e = req->entity.base;
	if (e < b || e > b + sock->input->size)
		return NULL;
	*len = (size_t)(e - b);
	return b;
}

static int
peer_gone(int fd)
{
	char c;
	ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void
on_tick(h2o_timeout_entry_t *e)
{
	for (h2o_linklist_t *l = S.active.next; l != &S.active;) {
		struct fe_req *rq = H2O_STRUCT_FROM_MEMBER(struct fe_req, active, l);
		l = l->next;
		if (rq->fd < 0 || !peer_gone(rq->fd)) {
			// a silent stream (long prefill, slow engine) gets an SSE comment so
			// proxies and clients do not give up on it
			uint64_t ka = (uint64_t)S.cfg->keepalive_ms * 1000000u;
			if (ka && rq->started && !rq->done && !rq->sending && fe_now_ns() - rq->last_write_ns >= ka) {
				buf_add(&rq->out, ": keep-alive\n\n", 14);
				flush(rq);
			}
			continue;
		}
		struct fe_gen *g = rq->g;
		deactivate(rq);
		mark_cancelled(g);
		if (fe_unqueue(g)) {
			// it never reached a worker: end the request here
			g->r.finish = FE_FINISH_ERROR;
			g->r.status = 503;
			snprintf(g->r.err, sizeof g->r.err, "the client closed the connection");
			fe_metrics_cancel();
			finish(rq);
			gen_unref(g); // the worker's reference
		}
	}
	h2o_timeout_link(S.ctx.loop, &S.tick, &S.tick_entry);
}

// parse_body: the request's JSON object, or NULL when a response was sent
// (fe_body_parse's 400s)
static cJSON *
parse_body(h2o_req_t *req, const struct fe_dialect *d, const char *endpoint)
{
	struct fe_bad bad = {0};
	cJSON *body = fe_body_parse(req->entity.base, req->entity.len, &bad);
	if (!body)
		respond_error(req, d, endpoint, bad.status, NULL, "%s", bad.msg);
	return body;
}

static int
start_generation(h2o_req_t *req, enum fe_api api, const struct fe_dialect *d, const char *endpoint)
{
	if (req->entity.base == NULL || req->entity.len == 0) {
		respond_error(req, d, endpoint, 400, NULL, "the request body is empty: send a JSON object");
		return 0;
	}
	if (req->entity.len > S.cfg->max_body) {
		respond_error(req, d, endpoint, 413, NULL, "the request body is %zu bytes; the limit is %zu",
		              req->entity.len, S.cfg->max_body);
		return 0;
	}
	cJSON *body = parse_body(req, d, endpoint);
	if (!body)
		return 0;
	struct fe_gen *g = calloc(1, sizeof *g);
	if (!g) {
		cJSON_Delete(body);
		respond_error(req, d, endpoint, 503, NULL, "out of memory");
		return 0;
	}
	struct fe_bad bad = {0};
	int rv = d->parse(body, api, S.cfg, &g->p, &bad);
	cJSON_Delete(body);
	if (rv != 0) {
		fe_params_free(&g->p);
		free(g);
		respond_error(req, d, endpoint, bad.status ? bad.status : 400, bad.param, "%s", bad.msg);
		return 0;
	}
	fe_new_id(g, api == FE_API_CHAT          ? "chatcmpl-"
	             : api == FE_API_COMPLETIONS ? "cmpl-"
	             : api == FE_API_RESPONSES   ? "resp_"
	             : api == FE_API_EMBEDDINGS  ? "embd-"
	                                         : "msg_");
	g->refs = 2;
	if ((fe_api_generates(api) ? fe_admit(g) : fe_extra_admit(g)) != 0) {
		fe_params_free(&g->p);
		free(g);
		fe_metrics_rejected();
		respond_error(req, d, endpoint, 503, NULL,
		              "the server is busy: %d generations running and %d waiting; retry shortly",
		              S.cfg->parallel, S.cfg->queue);
		return 0;
	}
	struct fe_req *rq = h2o_mem_alloc_shared(&req->pool, sizeof *rq, on_dispose);
	memset(rq, 0, sizeof *rq);
	rq->gen.proceed = on_proceed;
	rq->gen.stop = on_stop;
	rq->req = req;
	rq->g = g;
	rq->d = d;
	rq->endpoint = endpoint;
	rq->fd = conn_fd(req);
	g->req = rq;
	h2o_linklist_insert(&S.active, &rq->active);
	return 0;
}

// --- the cheap endpoints ----------------------------------------------------------------

#define MAX_PROCS 16

// a process the supervisor reports as crash-looping or stopped, in words
static int
proc_trouble(const struct fe_proc *p, char *out, size_t cap)
{
	const char *how = p->last_exit;
	char last[64] = "";
	if (!strncmp(how, "signal:", 7))
		snprintf(last, sizeof last, "; the last was killed by signal %s", how + 7);
	else if (!strncmp(how, "exit:", 5))
		snprintf(last, sizeof last, "; the last exited with status %s", how + 5);
	if (p->looping)
		return snprintf(out, cap, "%s is crash-looping: %d exits in the last %d s%s", p->name, p->recent,
		                FE_LOOP_WINDOW_MS / 1000, last) > 0;
	if (!strcmp(p->state, "stopped"))
		return snprintf(out, cap, "%s is down and not restarted%s", p->name, last) > 0;
	return 0;
}

static void
health(h2o_req_t *req)
{
	int tok_up, eng_up, waiting, running;
	fe_metrics_upstream_state(&tok_up, &eng_up);
	fe_queue_state(&waiting, &running);
	static const char *state[] = {"unknown", "down", "up"};
	cJSON *o = cJSON_CreateObject();
	cJSON *st = cJSON_AddStringToObject(o, "status", "ok");
	cJSON_AddStringToObject(o, "tokenizer", state[tok_up + 1]);
	cJSON_AddStringToObject(o, "engine", state[eng_up + 1]);
	cJSON_AddNumberToObject(o, "running", running);
	cJSON_AddNumberToObject(o, "queued", waiting);
	// the supervisor's view: crash loops and processes that stay down
	struct fe_proc pr[MAX_PROCS];
	int np = fe_procs_read(S.cfg->status_file, pr, MAX_PROCS);
	if (np >= 0) {
		char reason[AD_ERRLEN] = "";
		size_t rl = 0;
		cJSON *ps = cJSON_AddObjectToObject(o, "processes");
		for (int i = 0; i < np; i++) {
			cJSON *p = cJSON_AddObjectToObject(ps, pr[i].name);
			cJSON_AddNumberToObject(p, "pid", (double)pr[i].pid);
			cJSON_AddStringToObject(p, "state", pr[i].state);
			cJSON_AddNumberToObject(p, "restarts", pr[i].restarts);
			if (pr[i].last_exit[0])
				cJSON_AddStringToObject(p, "last_exit", pr[i].last_exit);
			char t[256];
			if (proc_trouble(&pr[i], t, sizeof t) && rl + strlen(t) + 3 < sizeof reason)
				rl += (size_t)snprintf(reason + rl, sizeof reason - rl, "%s%s", rl ? "; " : "", t);
		}
		if (rl) {
			cJSON_SetValuestring(st, "degraded");
			cJSON_AddStringToObject(o, "reason", reason);
		}
	}
	size_t n = 0;
	char *s = fe_json_print(o, &n);
	respond_json(req, "/health", 200, s, n);
}

// the supervisor's counts in Prometheus text, appended to the metrics
static char *
procs_metrics(char *m, size_t *n)
{
	struct fe_proc pr[MAX_PROCS];
	int np = fe_procs_read(S.cfg->status_file, pr, MAX_PROCS);
	if (np <= 0)
		return m;
	size_t cap = *n + 512 + (size_t)np * 384;
	char *t = realloc(m, cap);
	if (!t)
		return m;
	size_t k = *n;
	k += (size_t)snprintf(t + k, cap - k,
	                      "# HELP anedvd_process_restarts_total Restarts of each supervised process.\n"
	                      "# TYPE anedvd_process_restarts_total counter\n");
	for (int i = 0; i < np; i++)
		k += (size_t)snprintf(t + k, cap - k, "anedvd_process_restarts_total{process=\"%s\"} %d\n", pr[i].name,
		                      pr[i].restarts);
	k += (size_t)snprintf(t + k, cap - k,
	                      "# HELP anedvd_process_crash_looping 1 while a process exited %d times within %d s.\n"
	                      "# TYPE anedvd_process_crash_looping gauge\n",
	                      FE_LOOP_N, FE_LOOP_WINDOW_MS / 1000);
	for (int i = 0; i < np; i++)
		k += (size_t)snprintf(t + k, cap - k, "anedvd_process_crash_looping{process=\"%s\"} %d\n", pr[i].name,
		                      pr[i].looping);
	k += (size_t)snprintf(t + k, cap - k,
	                      "# HELP anedvd_process_last_exit How each process last ended (signal:N or exit:N).\n"
	                      "# TYPE anedvd_process_last_exit gauge\n");
	for (int i = 0; i < np; i++)
		if (pr[i].last_exit[0])
			k += (size_t)snprintf(t + k, cap - k,
			                      "anedvd_process_last_exit{process=\"%s\",reason=\"%s\"} 1\n", pr[i].name,
			                      pr[i].last_exit);
	*n = k;
	return t;
}

static void
models(h2o_req_t *req)
{
	size_t n = 0;
	int status;
	char *s = fe_models_json(NULL, 0, &status, &n);
	respond_json(req, "/v1/models", 200, s, n);
}

static void
props(h2o_req_t *req)
{
	size_t n = 0;
	int status;
	char *s = fe_props_json(&status, &n);
	if (!s && status == 503) {
		respond_error(req, &fe_llama, "/props", 503, NULL, "the tokenizer has not answered yet; retry shortly");
		return;
	}
	respond_json(req, "/props", 200, s, n);
}

static void
metrics(h2o_req_t *req)
{
	size_t n = 0;
	char *s = fe_metrics_render(&n);
	if (!s) {
		respond(req, "/metrics", 503, "text/plain", "out of memory\n", 14, 0);
		return;
	}
	s = procs_metrics(s, &n);
	respond(req, "/metrics", 200, "text/plain; version=0.0.4; charset=utf-8", s, n, 1);
	free(s);
}

static int
path_is(h2o_req_t *req, const char *p)
{
	return h2o_memis(req->path_normalized.base, req->path_normalized.len, p, strlen(p));
}

static int
method_is(h2o_req_t *req, const char *m)
{
	return h2o_memis(req->method.base, req->method.len, m, strlen(m));
}

// the endpoint a request is counted under in /metrics: its route when the
// path is one, "other" for an unknown path (so a rejection before routing,
// a 401 say, is counted where the client was going)
static const char *
route_label(h2o_req_t *req)
{
	static const char *routes[] = {"/v1/chat/completions", "/v1/completions", "/completion",
	                               "/completions",         "/v1/messages",    "/v1/messages/count_tokens",
	                               "/v1/embeddings",       "/v1/responses",   "/tokenize",
	                               "/detokenize",          "/apply-template", "/health",
	                               "/v1/models",           "/metrics",        "/",
	                               "/index.html",          "/props"};
	for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
		if (path_is(req, routes[i]))
			return routes[i];
	size_t ml = strlen("/v1/models/");
	if (req->path_normalized.len > ml && memcmp(req->path_normalized.base, "/v1/models/", ml) == 0)
		return "/v1/models";
	return "other";
}

static int
on_req(h2o_handler_t *self, h2o_req_t *req)
{
	int is_get = method_is(req, "GET") || method_is(req, "HEAD");
	int is_post = method_is(req, "POST");
	const struct fe_dialect *d = &fe_openai;
	if (path_is(req, "/v1/messages"))
		d = &fe_anthropic;
	else if (path_is(req, "/props"))
		d = &fe_llama;
	else if (path_is(req, "/completion") || path_is(req, "/completions"))
		d = &fe_llama_completion;

	// framing, then where the request comes from, then who sends it
	char msg[AD_ERRLEN];
	size_t head_len = 0;
	const char *head = request_head(req, &head_len);
	int st = fe_guard_framing(req, head, head_len, msg, sizeof msg);
	if (st) {
		req->http1_is_persistent = 0; // where the next request starts is unclear
		respond_error(req, d, route_label(req), st, NULL, "%s", msg);
		return 0;
	}
	if ((st = fe_guard_host(S.cfg, req, msg, sizeof msg)) || (st = fe_guard_origin(S.cfg, req, msg, sizeof msg))) {
		respond_error(req, d, route_label(req), st, NULL, "%s", msg);
		return 0;
	}
	if (method_is(req, "OPTIONS")) {
		// a preflight carries no credentials: answered before the key check
		hdr(req, "access-control-max-age", "86400");
		respond(req, "OPTIONS", 204, NULL, "", 0, 0);
		return 0;
	}
	if ((st = fe_guard_auth(S.cfg, req, msg, sizeof msg))) {
		respond_error(req, d, route_label(req), st, NULL, "%s", msg);
		return 0;
	}
	if (is_post && (st = fe_guard_json_type(req, msg, sizeof msg))) {
		respond_error(req, d, route_label(req), st, NULL, "%s", msg);
		return 0;
	}
	// POST routes
	if (path_is(req, "/v1/embeddings")) {
		if (!is_post) {
			hdr(req, "allow", "POST, OPTIONS");
			respond_error(req, d, "/v1/embeddings", 405, NULL, "/v1/embeddings takes POST");
		} else if (!S.cfg->embeddings) {
			respond_error(req, d, "/v1/embeddings", 501, NULL,
			              "embeddings are off on this server: start it with --embeddings");
		} else {
			return start_generation(req, FE_API_EMBEDDINGS, d, "/v1/embeddings");
		}
		return 0;
	}
	// the generations: chat, completions (OpenAI's, and llama.cpp's own under
	// both its names, api-llama.c) and messages, each in its dialect
	static const struct {
		const char *path;
		enum fe_api api;
	} gens[] = {{"/v1/chat/completions", FE_API_CHAT},
	            {"/v1/completions", FE_API_COMPLETIONS},
	            {"/v1/messages", FE_API_MESSAGES},
	            {"/completion", FE_API_COMPLETIONS},
	            {"/completions", FE_API_COMPLETIONS}};
	for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++) {
		if (!path_is(req, gens[i].path))
			continue;
		if (!is_post) {
			hdr(req, "allow", "POST, OPTIONS");
			respond_error(req, d, gens[i].path, 405, NULL, "%s takes POST", gens[i].path);
			return 0;
		}
		return start_generation(req, gens[i].api, d, gens[i].path);
	}
	// the POST routes beside chat, completions and messages (api-extra.c, api-responses.c)
	static const struct {
		const char *path;
		enum fe_api api;
		const struct fe_dialect *d;
	} extra[] = {
		{"/v1/responses", FE_API_RESPONSES, &fe_responses},
		{"/v1/messages/count_tokens", FE_API_COUNT_TOKENS, &fe_count_tokens},
		{"/tokenize", FE_API_TOKENIZE, &fe_llama},
		{"/detokenize", FE_API_DETOKENIZE, &fe_llama},
		{"/apply-template", FE_API_APPLY_TEMPLATE, &fe_llama},
	};
	for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
		if (!path_is(req, extra[i].path))
			continue;
		if (!is_post) {
			hdr(req, "allow", "POST, OPTIONS");
			respond_error(req, extra[i].d, extra[i].path, 405, NULL, "%s takes POST", extra[i].path);
			return 0;
		}
		return start_generation(req, extra[i].api, extra[i].d, extra[i].path);
	}
	// GET routes
	static const char *gets[] = {"/health", "/v1/models", "/metrics", "/", "/index.html", "/props"};
	int found = -1;
	for (int i = 0; i < (int)(sizeof gets / sizeof gets[0]); i++)
		if (path_is(req, gets[i]))
			found = i;
	size_t ml = strlen("/v1/models/");
	int model_path = req->path_normalized.len > ml && memcmp(req->path_normalized.base, "/v1/models/", ml) == 0;
	if (found < 0 && !model_path) {
		respond_error(req, d, "other", 404, NULL, "unknown endpoint %.*s %.*s", (int)req->method.len,
		              req->method.base, (int)(req->path_normalized.len > 200 ? 200 : req->path_normalized.len),
		              req->path_normalized.base);
		return 0;
	}
	if (!is_get) {
		hdr(req, "allow", "GET, HEAD, OPTIONS");
		respond_error(req, d, found >= 0 ? gets[found] : "/v1/models", 405, NULL, "this endpoint takes GET");
		return 0;
	}
	if (model_path) {
		const char *id = req->path_normalized.base + ml;
		size_t idl = req->path_normalized.len - ml;
		size_t n = 0;
		int status;
		char *s = fe_models_json(id, idl, &status, &n);
		if (!s && status == 404) {
			respond_error(req, d, "/v1/models", 404, "model", "model '%.*s' does not exist",
			              (int)(idl > 200 ? 200 : idl), id);
			return 0;
		}
		respond_json(req, "/v1/models", 200, s, n);
		return 0;
	}
	switch (found) {
	case 0:
		health(req);
		break;
	case 1:
		models(req);
		break;
	case 2:
		metrics(req);
		break;
	case 5:
		props(req);
		break;
	default:
		// the page's own policy (its meta tag) as a header, which can also
		// forbid framing
		if (S.csp)
			hdr(req, "content-security-policy", S.csp);
		hdr(req, "x-content-type-options", "nosniff");
		hdr(req, "x-frame-options", "DENY");
		hdr(req, "referrer-policy", "no-referrer");
		respond(req, "/", 200, "text/html; charset=utf-8", fe_webui, fe_webui_len, 0);
	}
	return 0;
}

// --- the server ---------------------------------------------------------------------------

// the WebUI's Content-Security-Policy: the page's meta tag (its script hash
// lives there) plus what only a header can say
static char *
webui_csp(void)
{
	static const char tag[] = "http-equiv=\"Content-Security-Policy\" content=\"";
	const char *p = memmem(fe_webui, fe_webui_len, tag, sizeof tag - 1);
	const char *base = p ? p + sizeof tag - 1 : NULL;
	const char *q = base ? memchr(base, '"', fe_webui_len - (size_t)(base - (const char *)fe_webui)) : NULL;
	const char *extra = "frame-ancestors 'none'";
	size_t n = q ? (size_t)(q - base) : 0;
	char *s = malloc(n + strlen(extra) + 3);
	if (!s)
		return NULL;
	if (n)
		sprintf(s, "%.*s; %s", (int)n, base, extra);
	else
		sprintf(s, "%s", extra);
	return s;
}

// 127.0.0.0/8, ::1 or localhost
static int
listen_is_loopback(const char *hostport)
{
	const char *c = strrchr(hostport, ':');
	size_t n = c ? (size_t)(c - hostport) : strlen(hostport);
	if ((n == 9 && !strncasecmp(hostport, "localhost", 9)) || (n == 5 && !strncmp(hostport, "[::1]", 5)))
		return 1;
	return n > 4 && !strncmp(hostport, "127.", 4);
}

static void
on_accept(h2o_socket_t *listener, const char *err)
{
	if (err)
		return;
	h2o_socket_t *sock = h2o_evloop_socket_accept(listener);
	if (sock)
		h2o_accept(&S.accept_ctx, sock);
}

static int
listen_on(const char *hostport, char *err)
{
	char host[256];
	const char *colon = strrchr(hostport, ':');
	if (!colon || colon == hostport || (size_t)(colon - hostport) >= sizeof host)
		return ad_err(err, "--listen wants HOST:PORT, not '%s'", hostport);
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = 0;
	char *h = host;
	if (h[0] == '[' && h[strlen(h) - 1] == ']') { // [::1]:8080
		h[strlen(h) - 1] = 0;
		h++;
	}
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	struct addrinfo *ai;
	int rv = getaddrinfo(h, colon + 1, &hints, &ai);
	if (rv != 0)
		return ad_err(err, "--listen %s: %s", hostport, gai_strerror(rv));
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
		int e = errno;
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return ad_err(err, "listen on %s: %s", hostport, strerror(e));
	}
	freeaddrinfo(ai);
	S.listener = h2o_evloop_socket_create(S.ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
	h2o_socket_read_start(S.listener, on_accept);
	return 0;
}

int
fe_http_run(const struct fe_config *cfg, char *err)
{
	S.cfg = cfg;
	S.started_at = (long long)time(NULL);
	h2o_config_init(&S.config);
	// bodies a little over the limit still reach us and get the dialect's 413;
	// h2o refuses far larger ones itself before reading them
	S.config.max_request_entity_size = cfg->max_body * 4 + 65536;
	S.config.http1.upgrade_to_http2 = 0;
	h2o_hostconf_t *host = h2o_config_register_host(&S.config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
	h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
	h2o_handler_t *handler = h2o_create_handler(path, sizeof *handler);
	handler->on_req = on_req;
	// what h2o refuses itself goes out through the fallback path
	fe_guard_register(&host->fallback_path, cfg);
	S.csp = webui_csp();

	h2o_context_init(&S.ctx, h2o_evloop_create(), &S.config);
	h2o_multithread_register_receiver(S.ctx.queue, &S.receiver, on_messages);
	S.accept_ctx.ctx = &S.ctx;
	S.accept_ctx.hosts = S.config.hosts;
	h2o_linklist_init_anchor(&S.active);
	h2o_timeout_init(S.ctx.loop, &S.tick, 50);
	S.tick_entry.cb = on_tick;
	h2o_timeout_link(S.ctx.loop, &S.tick, &S.tick_entry);

	if (listen_on(cfg->listen, err) != 0)
		return -1;
	ad_info("listening on http://%s (model %s, %d at once, queue %d)", cfg->listen, cfg->name, cfg->parallel,
	        cfg->queue);
	if (cfg->n_api_keys == 0 && !listen_is_loopback(cfg->listen))
		ad_warn("listening on %s, which is not a loopback address, with no API key: anyone who can reach it "
		        "can use it (--api-key, --api-key-file or ANEDVD_API_KEY)",
		        cfg->listen);
	// a wait interrupted (a signal handled, a debugger attaching) goes on:
	// h2o's loop returns -1 for it as for a failure
	while (!S.stop)
		if (h2o_evloop_run(S.ctx.loop, 100) != 0 && errno != EINTR)
			return ad_err(err, "the event loop: %s", strerror(errno));
	return 0;
}

void
fe_http_stop(void)
{
	S.stop = 1;
}
