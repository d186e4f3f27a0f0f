// kb-remote.c - the kernel set in the anedvd-ane-worker process.
//
// The worker is asked for its kernel list (Compile) and the list must be
// the plan this process derives from the same model and options: same
// count, kinds, layers, chunks, shapes and width. Surfaces are POSIX
// shared memory created here (surface_id with opts->instance, the name
// prefixed by a number unique in this process, so a backend never meets
// another's stale mapping in the worker); a call sends only their ids.
//
// A kernel call is a pure function of the input surface, written to a
// different output surface, so issuing it twice changes nothing. When the
// call fails in transport (the worker died, or did not answer within
// timeout_ms) or the worker says it is unavailable, the backend waits for
// a worker that answers Health and lists the same kernels, re-issues the
// SAME call, and returns its result: a generation survives a SIGKILL of
// the worker with no token lost or duplicated. It gives up after
// deadline_ms with a clear error, or at once when kb_remote_stop() was
// called (the process is shutting down). Error replies to the call itself (a bad
// request) fail at once.
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ane.pb-c.h"
#include "common.pb-c.h"
#include "ipc.h"
#include "kernels.h"
#include "log.h"
#include "plan.h"

struct remote {
	struct kernel_backend kb;
	struct ad_client *c;
	char url[512];
	char name[48];
	struct ane_plan plan;
	struct kb_info *info;
	struct kb_surfaces surf; // copies of those handed out; closed by free
	int timeout_ms, deadline_ms;
	long instance;
	unsigned gen;
	uint64_t seq, req_id;
	uint32_t worker_pid;
};

static atomic_uint remote_gen;
static atomic_int stopping;

// the process is stopping: a call waiting for a worker gives up now
void
kb_remote_stop(void)
{
	atomic_store(&stopping, 1);
}

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// one request / reply; -1 on transport failure (*transport = 1) or an
// error reply (the message in err, *code its ErrorCode)
static Anedvd__AneReply *
rpc(struct remote *r, Anedvd__AneRequest *q, int timeout_ms, int *transport, int *code, char *err)
{
	*transport = 0;
	*code = 0;
	q->id = ++r->req_id;
	size_t n = anedvd__ane_request__get_packed_size(q);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf)
		return ad_err(err, "out of memory"), NULL;
	anedvd__ane_request__pack(q, buf);
	uint8_t *rep = NULL;
	size_t rlen = 0;
	int rc = ad_client_call(r->c, buf, n, &rep, &rlen, timeout_ms, err);
	free(buf);
	if (rc) {
		*transport = 1;
		return NULL;
	}
	Anedvd__AneReply *a = anedvd__ane_reply__unpack(NULL, rlen, rep);
	free(rep);
	if (!a) {
		*transport = 1;
		return ad_err(err, "undecodable reply"), NULL;
	}
	if (a->error && a->error->code != ANEDVD__ERROR_CODE__ERROR_NONE) {
		*code = a->error->code;
		ad_err(err, "%s", a->error->message ? a->error->message : "error");
		anedvd__ane_reply__free_unpacked(a, NULL);
		return NULL;
	}
	return a;
}

// the worker's kernel list against the plan
static int
check_kernels(struct remote *r, const Anedvd__CompileReply *c, char *err)
{
	const struct ane_plan *p = &r->plan;
	if ((int)c->width != p->width)
		return ad_err(err, "the worker's kernels have width %u, this plan %d", c->width, p->width);
	if (c->n_kernels < (size_t)p->n)
		return ad_err(err, "the worker has %zu kernels, the plan %d", c->n_kernels, p->n);
	for (int i = 0; i < p->n; i++) {
		const Anedvd__KernelInfo *k = c->kernels[i];
		const struct ane_pk *pk = &p->k[i];
		if (k->id != (uint32_t)i || (int)k->kind != (int)pk->kind || k->layer != pk->layer ||
		    k->chunk != (uint32_t)pk->chunk || k->in_channels != (uint32_t)pk->in_ch ||
		    k->out_channels != (uint32_t)pk->out_ch || k->row_offset != (uint32_t)pk->row_offset)
			return ad_err(err, "kernel %d: the worker has %s L%d #%u %u -> %u, the plan %s L%d #%d %d -> %d",
			              i, ane_kind_name((enum ane_kind)k->kind), k->layer, k->chunk, k->in_channels,
			              k->out_channels, ane_kind_name(pk->kind), pk->layer, pk->chunk, pk->in_ch,
			              pk->out_ch);
		if (k->weight_bytes != pk->weight_bytes)
			return ad_err(err, "kernel %d: the worker's weights are %llu bytes, this plan's %llu (%s): "
			              "--weights must be the ane-worker's",
			              i, (unsigned long long)k->weight_bytes, (unsigned long long)pk->weight_bytes,
			              ane_wfmt_name(pk->wfmt));
	}
	return 0;
}

// Compile (describe) and check; *transport set when the worker is not there
static int
handshake(struct remote *r, int timeout_ms, int *transport, char *err)
{
	Anedvd__CompileRequest cq = ANEDVD__COMPILE_REQUEST__INIT;
	Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_COMPILE;
	q.compile = &cq;
	int code;
	Anedvd__AneReply *a = rpc(r, &q, timeout_ms, transport, &code, err);
	if (!a) {
		if (code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE)
			*transport = 1;
		return -1;
	}
	int rc = 0;
	if (a->body_case != ANEDVD__ANE_REPLY__BODY_COMPILE) {
		rc = ad_err(err, "compile: reply without a kernel list");
	} else {
		rc = check_kernels(r, a->compile, err);
		if (rc == 0) {
			snprintf(r->name, sizeof r->name, "remote:%s", a->compile->backend);
			r->kb.compile_count = a->compile->compile_count;
			r->kb.compile_ms = a->compile->compile_ms;
			for (int i = 0; i < r->plan.n; i++)
				r->info[i].compile_us = a->compile->kernels[i]->compile_us;
		}
	}
	anedvd__ane_reply__free_unpacked(a, NULL);
	return rc;
}

static int
health(struct remote *r, int timeout_ms, char *err)
{
	Anedvd__HealthRequest hq = ANEDVD__HEALTH_REQUEST__INIT;
	Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_HEALTH;
	q.health = &hq;
	int transport, code;
	Anedvd__AneReply *a = rpc(r, &q, timeout_ms, &transport, &code, err);
	if (!a)
		return -1;
	int rc = a->body_case == ANEDVD__ANE_REPLY__BODY_HEALTH ? 0 : ad_err(err, "health: no health reply");
	if (rc == 0)
		r->worker_pid = a->health->pid;
	anedvd__ane_reply__free_unpacked(a, NULL);
	return rc;
}

// wait for a worker that is healthy and has our kernels, until the deadline
static int
await_worker(struct remote *r, uint64_t deadline, char *err)
{
	char e[AD_ERRLEN] = "no answer";
	int probe_ms = r->timeout_ms < 1000 ? r->timeout_ms : 1000;
	for (;;) {
		int transport = 0;
		if (health(r, probe_ms, e) == 0) {
			if (handshake(r, r->timeout_ms, &transport, e) == 0)
				return 0;
			if (!transport) // a worker with other kernels will not get better
				return ad_err(err, "ane-worker at %s came back with other kernels: %s", r->url, e);
		}
		if (now_ns() >= deadline)
			return ad_err(err, "ane-worker at %s did not come back within %d ms: %s", r->url, r->deadline_ms,
			              e);
		if (atomic_load(&stopping))
			return ad_err(err, "stopping while waiting for the ane-worker at %s: %s", r->url, e);
		usleep(50 * 1000);
	}
}

static int
check_call(const struct kernel_backend *kb, int id, const struct ad_surface *in, const struct ad_surface *out,
           int ncols, char *err)
{
	if (id < 0 || id >= kb->n_kernels)
		return ad_err(err, "%s: no kernel %d", kb->name, id);
	const struct kb_info *k = &kb->kernels[id];
	if (ncols < 1 || ncols > kb->width)
		return ad_err(err, "%s: kernel %d: %d columns (width %d)", kb->name, id, ncols, kb->width);
	if (!in || !out || !in->base || !out->base || strcmp(in->id, out->id) == 0)
		return ad_err(err, "%s: kernel %d: needs two distinct surfaces", kb->name, id);
	if (!in->shared || !out->shared)
		return ad_err(err, "%s: kernel %d: surfaces must be shared memory", kb->name, id);
	if (in->width != (size_t)kb->width || out->width != (size_t)kb->width)
		return ad_err(err, "%s: kernel %d: surfaces of width %zu/%zu, kernels have %d", kb->name, id,
		              in->width, out->width, kb->width);
	if (in->channels < (size_t)k->in_ch || out->channels < (size_t)k->out_ch)
		return ad_err(err, "%s: kernel %d: surfaces of %zu/%zu channels, need %d/%d", kb->name, id,
		              in->channels, out->channels, k->in_ch, k->out_ch);
	return 0;
}

static int
r_call(struct kernel_backend *kb, int id, struct ad_surface *in, struct ad_surface *out, int ncols,
       struct kb_timing *t, char *err)
{
	struct remote *r = kb->priv;
	uint64_t t0 = now_ns();
	if (check_call(kb, id, in, out, ncols, err))
		return -1;
	Anedvd__KernelCall kc = ANEDVD__KERNEL_CALL__INIT;
	kc.kernel = (uint32_t)id;
	kc.input = in->id;
	kc.output = out->id;
	kc.ncols = (uint32_t)ncols;
	kc.seq = ++r->seq;
	Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_CALL;
	q.call = &kc;
	const uint64_t deadline = t0 + (uint64_t)r->deadline_ms * 1000000u;
	int retries = 0;
	for (;;) {
		int transport, code;
		char e[AD_ERRLEN];
		Anedvd__AneReply *a = rpc(r, &q, r->timeout_ms, &transport, &code, e);
		if (a) {
			int rc = 0;
			if (a->body_case != ANEDVD__ANE_REPLY__BODY_CALL || a->call->seq != kc.seq)
				rc = ad_err(err, "%s: kernel %d: reply does not answer call %llu", kb->name, id,
				            (unsigned long long)kc.seq);
			else if (t) {
				t->exec_ns = a->call->exec_ns;
				t->total_ns = now_ns() - t0;
			}
			anedvd__ane_reply__free_unpacked(a, NULL);
			if (retries && rc == 0)
				ad_info("kernel %d: answered after %d retries (worker pid %u)", id, retries, r->worker_pid);
			return rc;
		}
		if (!transport && code != ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE)
			return ad_err(err, "%s: kernel %d: %s", kb->name, id, e);
		ad_warn("kernel %d: %s; waiting for the ane-worker", id, e);
		if (await_worker(r, deadline, err))
			return ad_err_prefix(err, "kernel %d", id);
		retries++;
	}
}

static int
r_surface_new(struct kernel_backend *kb, const char *name, int channels, struct ad_surface *s, char *err)
{
	struct remote *r = kb->priv;
	if (kb_surfaces_reserve(&r->surf, err))
		return -1;
	if (channels <= 0)
		return ad_err(err, "surface %s: %d channels", name ? name : "?", channels);
	char sub[AD_SURFACE_ID_MAX], id[AD_SURFACE_ID_MAX];
	int n = snprintf(sub, sizeof sub, "r%u-%s", r->gen, name ? name : "s");
	if (n < 0 || (size_t)n >= sizeof sub || surface_id(id, sizeof id, r->instance, sub))
		return ad_err(err, "surface %s: name too long", name ? name : "?");
	if (surface_create(s, id, (size_t)channels, (size_t)kb->width, 1, err))
		return -1;
	kb_surfaces_keep(&r->surf, s);
	return 0;
}

static void
r_free(struct kernel_backend *kb)
{
	if (!kb)
		return;
	struct remote *r = kb->priv;
	kb_surfaces_free(&r->surf);
	ad_client_close(r->c);
	ane_plan_free(&r->plan);
	free(r->info);
	free(r);
}

struct kernel_backend *
kb_remote_new(const struct model *m, const struct kb_opts *o, char *err)
{
	if (!o || !o->url)
		return ad_err(err, "remote backend: no ane-worker URL"), NULL;
	struct remote *r = calloc(1, sizeof *r);
	if (!r)
		return ad_err(err, "out of memory"), NULL;
	r->kb.priv = r;
	snprintf(r->url, sizeof r->url, "%s", o->url);
	snprintf(r->name, sizeof r->name, "remote");
	r->kb.name = r->name;
	r->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
	r->deadline_ms = o->deadline_ms > 0 ? o->deadline_ms : 120000;
	r->instance = o->instance > 0 ? o->instance : (long)getpid();
	r->gen = atomic_fetch_add(&remote_gen, 1);
	r->kb.surface_new = r_surface_new;
	r->kb.call = r_call;
	r->kb.free = r_free;
	struct ane_plan_opts po = {.width = o->width, .split = o->split, .weights = (enum ane_wfmt)o->weights};
	if (ane_plan_build(&r->plan, m, &po, err))
		goto fail;
	r->info = calloc((size_t)r->plan.n, sizeof *r->info);
	if (!r->info) {
		ad_err(err, "out of memory");
		goto fail;
	}
	for (int i = 0; i < r->plan.n; i++) {
		const struct ane_pk *pk = &r->plan.k[i];
		r->info[i] = (struct kb_info){.id = i, .kind = (enum kb_kind)pk->kind, .layer = pk->layer,
		                              .chunk = pk->chunk, .in_ch = pk->in_ch, .out_ch = pk->out_ch,
		                              .row_offset = pk->row_offset, .weight_bytes = pk->weight_bytes};
	}
	r->kb.width = r->plan.width;
	r->kb.n_kernels = r->plan.n;
	r->kb.kernels = r->info;
	r->c = ad_client_open(r->url, err);
	if (!r->c)
		goto fail;
	// the worker may still be compiling: wait for it like after a restart
	if (await_worker(r, now_ns() + (uint64_t)r->deadline_ms * 1000000u, err))
		goto fail;
	return &r->kb;
fail:
	ad_err_prefix(err, "remote backend");
	r_free(&r->kb);
	return NULL;
}
