#include "rpc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ane.pb-c.h"
#include "clock.h"
#include "common.pb-c.h"
#include "engine.pb-c.h"
#include "tokenizer.pb-c.h"

const struct ad_rpc_service ad_rpc_engine = {"engine service", &anedvd__engine_request__descriptor,
                                             &anedvd__engine_reply__descriptor};
const struct ad_rpc_service ad_rpc_tokenizer = {"tokenizer service", &anedvd__tok_request__descriptor,
                                                &anedvd__tok_reply__descriptor};
const struct ad_rpc_service ad_rpc_ane = {"ane-worker", &anedvd__ane_request__descriptor,
                                          &anedvd__ane_reply__descriptor};

// --- the envelope, through the descriptors ------------------------------------------------

#define AT(msg, off, type) ((type *)((char *)(msg) + (off)))

static const ProtobufCFieldDescriptor *
field(const ProtobufCMessageDescriptor *d, const char *name)
{
	return protobuf_c_message_descriptor_get_field_by_name(d, name);
}

// the body field of envelope d whose message type is m (NULL: none)
static const ProtobufCFieldDescriptor *
body_field_of_type(const ProtobufCMessageDescriptor *d, const ProtobufCMessageDescriptor *m)
{
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && f->type == PROTOBUF_C_TYPE_MESSAGE &&
		    f->descriptor == m)
			return f;
	}
	return NULL;
}

// the body of an envelope: its field (NULL: not set) and message
static const ProtobufCFieldDescriptor *
body_of(const ProtobufCMessage *msg, ProtobufCMessage **body)
{
	const ProtobufCMessageDescriptor *d = msg->descriptor;
	for (unsigned i = 0; i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && *AT(msg, f->quantifier_offset, uint32_t) == f->id) {
			*body = *AT(msg, f->offset, ProtobufCMessage *);
			return f;
		}
	}
	*body = NULL;
	return NULL;
}

static void
set_body(ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f, const ProtobufCMessage *body)
{
	*AT(msg, f->quantifier_offset, uint32_t) = f->id;
	*AT(msg, f->offset, const ProtobufCMessage *) = body;
}

static ProtobufCMessage *
new_message(const ProtobufCMessageDescriptor *d)
{
	ProtobufCMessage *m = calloc(1, d->sizeof_message);
	if (m)
		d->message_init(m);
	return m;
}

// --- client ------------------------------------------------------------------------------

static int
fail_code(int *code, int c)
{
	if (code)
		*code = c;
	return -1;
}

void *
ad_rpc_call(struct ad_client *c, const struct ad_rpc_service *s, const ProtobufCMessage *body, int timeout_ms,
            int *code, char *err)
{
	static uint64_t next_id;
	fail_code(code, ANEDVD__ERROR_CODE__ERROR_INTERNAL);
	const ProtobufCFieldDescriptor *qf = body_field_of_type(s->request, body->descriptor);
	const ProtobufCFieldDescriptor *rf = qf ? field(s->reply, qf->name) : NULL;
	if (!qf || !rf)
		return ad_err(err, "%s: %s is not one of its requests", s->name, body->descriptor->name), NULL;
	ProtobufCMessage *q = new_message(s->request);
	if (!q)
		return ad_err(err, "out of memory"), NULL;
	uint64_t id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
	*AT(q, field(s->request, "id")->offset, uint64_t) = id;
	set_body(q, qf, body);
	size_t n = protobuf_c_message_get_packed_size(q);
	uint8_t *buf = malloc(n ? n : 1), *rep = NULL;
	size_t rlen = 0;
	if (!buf) {
		free(q);
		return ad_err(err, "out of memory"), NULL;
	}
	protobuf_c_message_pack(q, buf);
	free(q); // the envelope alone: the body is the caller's
	int rv = ad_client_call(c, buf, n, &rep, &rlen, timeout_ms, err);
	free(buf);
	if (rv != 0) {
		fail_code(code, ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE);
		ad_err_prefix(err, "%s", s->name);
		return NULL;
	}
	ProtobufCMessage *r = protobuf_c_message_unpack(s->reply, NULL, rlen, rep);
	free(rep);
	if (!r)
		return ad_err(err, "%s: undecodable reply", s->name), NULL;
	const Anedvd__Error *e = *AT(r, field(s->reply, "error")->offset, Anedvd__Error *);
	ProtobufCMessage *rb;
	const ProtobufCFieldDescriptor *got = body_of(r, &rb);
	if (*AT(r, field(s->reply, "id")->offset, uint64_t) != id) {
		ad_err(err, "%s: the reply answers another request", s->name);
	} else if (e && e->code != ANEDVD__ERROR_CODE__ERROR_NONE) {
		fail_code(code, e->code);
		ad_err(err, "%s: %s", s->name, e->message && e->message[0] ? e->message : "error");
	} else if (got != rf || !rb) {
		ad_err(err, "%s: the reply to %s carries %s", s->name, qf->name, got ? got->name : "no body");
	} else {
		fail_code(code, ANEDVD__ERROR_CODE__ERROR_NONE);
		return r;
	}
	protobuf_c_message_free_unpacked(r, NULL);
	return NULL;
}

void
ad_rpc_free(void *reply)
{
	if (reply)
		protobuf_c_message_free_unpacked(reply, NULL);
}

int
ad_rpc_health(struct ad_client *c, const struct ad_rpc_service *s, struct ad_rpc_health *h, int timeout_ms, int *code,
              char *err)
{
	Anedvd__HealthRequest hq = ANEDVD__HEALTH_REQUEST__INIT;
	ProtobufCMessage *r = ad_rpc_call(c, s, &hq.base, timeout_ms, code, err);
	if (!r)
		return -1;
	ProtobufCMessage *b;
	body_of(r, &b);
	const Anedvd__HealthReply *hr = (const Anedvd__HealthReply *)b;
	if (h) {
		memset(h, 0, sizeof *h);
		snprintf(h->process, sizeof h->process, "%s", hr->process ? hr->process : "");
		h->pid = hr->pid;
		h->uptime_ms = hr->uptime_ms;
		h->requests = hr->requests;
		h->starting = hr->starting;
		snprintf(h->progress, sizeof h->progress, "%s", hr->progress ? hr->progress : "");
		snprintf(h->finishing, sizeof h->finishing, "%s", hr->finishing ? hr->finishing : "");
	}
	int starting = hr->starting;
	if (starting) {
		if (code)
			*code = ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE;
		ad_err(err, "%s: starting: %s", s->name, hr->progress && hr->progress[0] ? hr->progress : "not ready");
	}
	ad_rpc_free(r);
	return starting ? -1 : 0;
}

// --- server ------------------------------------------------------------------------------

int
ad_rpc_fail(struct ad_rpc_req *q, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(q->msg, sizeof q->msg, fmt, ap);
	va_end(ap);
	q->code = code ? code : ANEDVD__ERROR_CODE__ERROR_INTERNAL;
	q->reply = NULL;
	return -1;
}

void
ad_rpc_server_init(struct ad_rpc_server *s, const struct ad_rpc_service *svc, const char *process, ad_rpc_fn fn,
                   void *arg, size_t scratch_size, void (*release)(void *scratch))
{
	memset(s, 0, sizeof *s);
	s->svc = svc;
	s->process = process;
	s->fn = fn;
	s->arg = arg;
	s->scratch_size = scratch_size;
	s->release = release;
	s->started_ns = ad_now_ns();
}

void
ad_rpc_serve(void *server, const uint8_t *req, size_t req_len, uint8_t **out, size_t *out_len)
{
	struct ad_rpc_server *s = server;
	const struct ad_rpc_service *svc = s->svc;
	*out = NULL;
	*out_len = 0;
	__atomic_add_fetch(&s->requests, 1, __ATOMIC_RELAXED);
	struct ad_rpc_req *rq = calloc(1, sizeof *rq);
	ProtobufCMessage *r = new_message(svc->reply);
	void *scratch = s->scratch_size ? calloc(1, s->scratch_size) : NULL;
	if (!rq || !r || (s->scratch_size && !scratch)) {
		free(rq);
		free(r);
		free(scratch);
		return;
	}
	rq->scratch = scratch;
	char progress[160] = "", finishing[160] = "";
	const int starting = s->starting && s->starting(s->arg, progress, sizeof progress);
	Anedvd__HealthReply health = ANEDVD__HEALTH_REPLY__INIT;
	Anedvd__Error error = ANEDVD__ERROR__INIT;
	ProtobufCMessage *q = protobuf_c_message_unpack(svc->request, NULL, req_len, req);
	ProtobufCMessage *qb = NULL;
	const ProtobufCFieldDescriptor *qf = q ? body_of(q, &qb) : NULL;
	const ProtobufCFieldDescriptor *rf = qf ? field(svc->reply, qf->name) : NULL;
	if (!q) {
		ad_rpc_fail(rq, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "could not decode the request as %s",
		            svc->request->short_name);
	} else if (!qf || !qb || !rf) {
		ad_rpc_fail(rq, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "the request has no body");
	} else if (qb->descriptor == &anedvd__health_request__descriptor) {
		health.process = (char *)(s->process ? s->process : "");
		health.pid = (uint32_t)getpid();
		health.uptime_ms = (ad_now_ns() - s->started_ns) / 1000000u;
		health.requests = __atomic_load_n(&s->requests, __ATOMIC_RELAXED);
		health.starting = starting;
		health.progress = progress;
		if (s->finishing && s->finishing(s->arg, finishing, sizeof finishing))
			health.finishing = finishing;
		rq->reply = &health.base;
	} else if (starting) {
		ad_rpc_fail(rq, ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE, "starting: %s", progress);
	} else {
		rq->method = (int)qf->id;
		rq->body = qb;
		s->fn(s->arg, rq);
		if (!rq->code && (!rq->reply || rq->reply->descriptor != rf->descriptor))
			ad_rpc_fail(rq, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "%s: no reply", qf->name);
	}
	if (q)
		*AT(r, field(svc->reply, "id")->offset, uint64_t) = *AT(q, field(svc->request, "id")->offset, uint64_t);
	if (rq->code) {
		error.code = (Anedvd__ErrorCode)rq->code;
		error.message = rq->msg;
		*AT(r, field(svc->reply, "error")->offset, Anedvd__Error *) = &error;
	} else {
		set_body(r, rf, rq->reply);
	}
	size_t n = protobuf_c_message_get_packed_size(r);
	uint8_t *buf = malloc(n ? n : 1);
	if (buf) {
		protobuf_c_message_pack(r, buf);
		*out = buf;
		*out_len = n;
	}
	if (q)
		protobuf_c_message_free_unpacked(q, NULL);
	if (s->release && scratch)
		s->release(scratch);
	free(scratch);
	free(r);
	free(rq);
}
