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
//
// The data plane: once the worker answers, this backend creates its
// shared-memory object (dataplane.h; surface_id with the instance, so the
// instance's sweeps take it) and asks the worker to attach it; every
// surface it hands out is registered in the object's table and named by
// index, any other by id. Every call (and call_list: up to DP_MAX_STEPS
// kernels in one round trip) then goes through a slot of the object. A
// wait on a reply wakes every few ms to check the worker's pid and
// generation: a dead worker, another generation or no reply within
// timeout_ms take the path above (Health, Compile check), re-attach and
// re-post the SAME call on the same slot. nng carries only the control
// plane then. A worker that does not know AttachRequest, no_dataplane or
// ANEDVD_DATAPLANE=0 leave every call on nng (KernelCall).
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ane.pb-c.h"
#include "client-ane.h"
#include "common.pb-c.h"
#include "dataplane.h"
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
	int quiet; // kb_opts.quiet
	long instance;
	unsigned gen;
	uint64_t seq;
	uint32_t worker_pid;
	// the data plane, NULL when calls go over nng
	struct dp_chan *dp;
	int16_t dp_idx[DP_MAX_SURF]; // kb_surfaces position -> table index, -1: by id
	float *arena;                // the object's arena (KB_RESNORM vectors), NULL without one
	size_t arena_n, arena_used;  // floats
	_Atomic uint64_t dp_worker;  // pid << 32 | generation of the attached worker
	atomic_uint attaches;        // bumped by every attach
	pthread_mutex_t amu;         // one thread re-attaches at a time
	// per kernel (and at n_kernels, a KB_RESNORM step), one column and
	// more: a running mean of exec_ns, the guess of how long the next call
	// takes (dp_call_expect); races between threads only blur a guess
	uint32_t *expect[2];
	size_t host_floats; // the arena to make: kb_host_floats of the model
};

static atomic_uint remote_gen;
static atomic_int stopping;

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

// *transport: the call failed for want of a worker (no reply, or it says
// it is unavailable: rpc.h's ERROR_UNAVAILABLE); otherwise an error reply
// or a malformed one (*code, err)
static Anedvd__AneReply *
transport_of(Anedvd__AneReply *a, const int *code, int *transport)
{
	*transport = !a && *code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE;
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
			return ad_err(
				err, "kernel %d: the worker has %s L%d #%u %u -> %u, the plan %s L%d #%d %d -> %d", i,
				ane_kind_name((enum ane_kind)k->kind), k->layer, k->chunk, k->in_channels,
				k->out_channels, ane_kind_name(pk->kind), pk->layer, pk->chunk, pk->in_ch, pk->out_ch);
		if (k->weight_bytes != pk->weight_bytes)
			return ad_err(err,
			              "kernel %d: the worker's weights are %llu bytes, this plan's %llu (%s): "
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
	int code;
	Anedvd__AneReply *a = transport_of(anec_compile(r->c, NULL, timeout_ms, &code, err), &code, transport);
	if (!a)
		return -1;
	int rc = check_kernels(r, a->compile, err);
	if (rc == 0) {
		snprintf(r->name, sizeof r->name, "remote:%s", a->compile->backend);
		r->kb.compile_count = a->compile->compile_count;
		r->kb.compile_ms = a->compile->compile_ms;
		for (int i = 0; i < r->plan.n; i++)
			r->info[i].compile_us = a->compile->kernels[i]->compile_us;
	}
	ad_rpc_free(a);
	return rc;
}

static int
health(struct remote *r, int timeout_ms, char *err)
{
	struct ad_rpc_health h;
	if (ad_rpc_health(r->c, &ad_rpc_ane, &h, timeout_ms, NULL, err) != 0)
		return -1;
	r->worker_pid = h.pid;
	return 0;
}

// have the worker attach the data-plane object; *transport when it is not there
static int
attach(struct remote *r, int timeout_ms, int *transport, char *err)
{
	int code;
	Anedvd__AneReply *a = transport_of(anec_attach(r->c, dp_id(r->dp), timeout_ms, &code, err), &code, transport);
	if (!a)
		return -1;
	int rc = 0;
	if (a->attach->max_steps < 1) {
		rc = ad_err(err, "attach: no attach reply");
	} else {
		uint32_t pid, gen;
		dp_worker(r->dp, &pid, &gen);
		if (pid != a->attach->pid || gen != a->attach->generation)
			rc = ad_err(err, "attach: the object names worker %u generation %u, the reply %u %u", pid, gen,
			            a->attach->pid, a->attach->generation);
		atomic_store(&r->dp_worker, (uint64_t)a->attach->pid << 32 | a->attach->generation);
		atomic_fetch_add(&r->attaches, 1);
	}
	ad_rpc_free(a);
	return rc;
}

// wait for a worker that is healthy and has our kernels (and has attached
// the data plane), until the deadline
static int
await_worker(struct remote *r, uint64_t deadline, char *err)
{
	char e[AD_ERRLEN] = "no answer";
	int probe_ms = r->timeout_ms < 1000 ? r->timeout_ms : 1000;
	for (;;) {
		int transport = 0;
		if (health(r, probe_ms, e) == 0) {
			if (handshake(r, r->timeout_ms, &transport, e) == 0) {
				if (!r->dp || attach(r, r->timeout_ms, &transport, e) == 0)
					return 0;
				if (!transport)
					return ad_err(err, "ane-worker at %s: %s", r->url, e);
			} else if (!transport) { // a worker with other kernels will not get better
				return ad_err(err, "ane-worker at %s came back with other kernels: %s", r->url, e);
			}
		}
		if (now_ns() >= deadline)
			return ad_err(err, "ane-worker at %s did not come back within %d ms: %s", r->url,
			              r->deadline_ms, e);
		// stopped, or told to stop while starting (the signal still pending:
		// the process takes it only once started)
		if (atomic_load(&stopping) || ad_stop_pending())
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
		return ad_err(err, "%s: kernel %d: surfaces of width %zu/%zu, kernels have %d", kb->name, id, in->width,
		              out->width, kb->width);
	if (in->channels < (size_t)k->in_ch || out->channels < (size_t)k->out_ch)
		return ad_err(err, "%s: kernel %d: surfaces of %zu/%zu channels, need %d/%d", kb->name, id,
		              in->channels, out->channels, k->in_ch, k->out_ch);
	return 0;
}

// the table index of a surface this backend handed out, else DP_BY_NAME
// (a live mapping's address names it: no other can have it meanwhile)
static uint16_t
surf_ref(const struct remote *r, const struct ad_surface *s)
{
	for (int i = 0; i < r->surf.n && i < DP_MAX_SURF; i++)
		if (r->surf.v[i].base == s->base)
			return r->dp_idx[i] >= 0 ? (uint16_t)r->dp_idx[i] : DP_BY_NAME;
	return DP_BY_NAME;
}

static int r_call(struct kernel_backend *kb, int id, struct ad_surface *in, struct ad_surface *out, int ncols,
                  struct kb_timing *t, char *err);

// wait for the worker and re-attach, unless another thread did since seen
static int
reattach(struct remote *r, unsigned seen, uint64_t deadline, char *err)
{
	pthread_mutex_lock(&r->amu);
	int rc = 0;
	if (atomic_load(&r->attaches) == seen)
		rc = await_worker(r, deadline, err);
	pthread_mutex_unlock(&r->amu);
	return rc;
}

// post rq and wait for its reply, through worker restarts (re-attach and
// re-post the same request on the same slot) until the deadline; the
// reply's own status is the caller's to read
static int
dp_roundtrip(struct remote *r, const struct dp_request *rq, struct dp_reply *rep, int kid, uint64_t t0,
             uint64_t expect_ns, char *err)
{
	const uint64_t deadline = t0 + (uint64_t)r->deadline_ms * 1000000u;
	int slot = -1, retries = 0, rc;
	for (;;) {
		unsigned seen = atomic_load(&r->attaches);
		uint64_t wk = atomic_load(&r->dp_worker);
		rc = dp_call_expect(r->dp, &slot, rq, rep, (uint32_t)(wk >> 32), (uint32_t)wk, r->timeout_ms,
		                    retries ? 0 : expect_ns);
		if (rc == DP_DONE && rep->status != DP_UNAVAILABLE)
			break;
		if (rc == DP_DONE)
			rc = DP_CHANGED; // unavailable: as if the worker had gone
		if (rc == DP_NOSLOT) {
			ad_err(err, "%s: kernel %d: every data-plane slot stayed busy for %d ms", r->kb.name, kid,
			       r->timeout_ms);
			break;
		}
		static const char *why[] = {"", "no reply in time", "the worker died", "another worker attached"};
		const char *what = rc == DP_DONE ? rep->msg : why[-rc < 4 ? -rc : 0];
		// a worker that answers Health and Compile but not the call (hung
		// in a kernel, or far too slow) would be re-posted to for ever
		if (now_ns() >= deadline) {
			ad_err(err, "%s: kernel %d: %s, and the deadline of %d ms has passed", r->kb.name, kid, what,
			       r->deadline_ms);
			rc = DP_TIMEOUT;
			break;
		}
		ad_warn("kernel %d: %s; waiting for the ane-worker", kid, what);
		if (reattach(r, seen, deadline, err)) {
			ad_err_prefix(err, "kernel %d", kid);
			break;
		}
		retries++;
	}
	dp_release(r->dp, slot);
	if (rc != DP_DONE)
		return -1;
	if (retries && rep->status == DP_OK)
		ad_info("kernel %d: answered after %d retries (worker pid %u)", kid, retries,
		        (unsigned)(atomic_load(&r->dp_worker) >> 32));
	return 0;
}

// a host vector's offset in the arena, in floats (DP_NO_VEC: NULL)
static uint32_t
arena_off(const struct remote *r, const float *p)
{
	return p ? (uint32_t)(p - r->arena) : DP_NO_VEC;
}

// the host vectors of a KB_RESNORM step lie in the arena
static int
in_arena(const struct remote *r, const struct kb_step *st)
{
	const size_t rows = (size_t)st->ncols * st->rn.E;
	const float *v[7] = {st->x_in, st->x_out, st->rn.bias, st->rn.post, st->rn.w, st->y_rows, st->xn_rows};
	const size_t len[7] = {rows, rows, st->rn.E, st->rn.E, st->rn.E, rows, rows};
	for (int i = 0; i < 7; i++) {
		if (!v[i] && i >= 2)
			continue;
		if (!r->arena || !v[i] || v[i] < r->arena || (size_t)(v[i] - r->arena) > r->arena_n ||
		    len[i] > r->arena_n - (size_t)(v[i] - r->arena))
			return 0;
	}
	return 1;
}

// a kernel step's host rows (NULL ones aside) lie in the arena
static int
rows_in_arena(const struct remote *r, const struct kb_step *st)
{
	const struct kb_info *k = &r->info[st->id];
	const float *v[2] = {st->x_in, st->x_out};
	const int ld[2] = {st->in_ld ? st->in_ld : k->in_ch, st->out_ld ? st->out_ld : k->out_ch},
		  ch[2] = {k->in_ch, k->out_ch};
	for (int i = 0; i < 2; i++) {
		if (!v[i])
			continue;
		const size_t len = (size_t)(st->ncols - 1) * (size_t)ld[i] + (size_t)ch[i];
		if (!r->arena || v[i] < r->arena || (size_t)(v[i] - r->arena) > r->arena_n ||
		    len > r->arena_n - (size_t)(v[i] - r->arena) || ld[i] < ch[i])
			return 0;
	}
	return 1;
}

// the expect[] entry of a step
static int
step_slot(const struct remote *r, const struct kb_step *st)
{
	return st->kind == KB_RESNORM ? r->kb.n_kernels : st->id;
}

// up to DP_MAX_STEPS steps (checked) in one round trip of the data plane
static int
dp_list(struct remote *r, const struct kb_step *steps, int n, struct kb_timing *t, char *err)
{
	uint64_t t0 = now_ns();
	struct dp_request rq;
	rq.op = DP_OP_CALL;
	rq.nsteps = (uint32_t)n;
	for (int i = 0; i < n; i++) {
		const struct kb_step *st = &steps[i];
		struct dp_step *d = &rq.step[i];
		d->kernel = st->kind == KB_RESNORM ? DP_RESNORM : (uint32_t)st->id;
		d->ncols = (uint32_t)st->ncols;
		// a resnorm step's y or xn as rows names no surface (below)
		const int rn = st->kind == KB_RESNORM;
		d->in = st->in && !(rn && st->y_rows) ? surf_ref(r, st->in) : DP_NO_SURF;
		d->out = st->out && !(rn && st->xn_rows) ? surf_ref(r, st->out) : DP_NO_SURF;
		if (d->in == DP_BY_NAME)
			snprintf(d->in_id, sizeof d->in_id, "%s", st->in->id);
		if (d->out == DP_BY_NAME)
			snprintf(d->out_id, sizeof d->out_id, "%s", st->out->id);
		d->host = 0;
		if (st->kind != KB_RESNORM && st->x_in) {
			d->host |= DP_HOST_IN;
			d->in_off = arena_off(r, st->x_in);
			d->in_ld = (uint32_t)(st->in_ld ? st->in_ld : r->info[st->id].in_ch);
		}
		if (st->kind != KB_RESNORM && st->x_out) {
			d->host |= DP_HOST_OUT;
			d->out_off = arena_off(r, st->x_out);
			d->out_ld = (uint32_t)(st->out_ld ? st->out_ld : r->info[st->id].out_ch);
		}
		if (st->kind == KB_RESNORM) {
			d->rn = (struct dp_resnorm){(uint32_t)st->rn.E,        st->rn.eps,
			                            arena_off(r, st->x_in),    arena_off(r, st->x_out),
			                            arena_off(r, st->rn.bias), arena_off(r, st->rn.post),
			                            arena_off(r, st->rn.w)};
			// y and xn as arena rows [ncols][E] (dataplane.h)
			if (st->y_rows) {
				d->host |= DP_HOST_IN;
				d->in_off = arena_off(r, st->y_rows);
				d->in_ld = (uint32_t)st->rn.E;
			}
			if (st->xn_rows) {
				d->host |= DP_HOST_OUT;
				d->out_off = arena_off(r, st->xn_rows);
				d->out_ld = (uint32_t)st->rn.E;
			}
		}
	}
	uint64_t expect = 0;
	for (int i = 0; i < n; i++)
		expect += r->expect[steps[i].ncols > 1][step_slot(r, &steps[i])];
	static _Thread_local struct dp_reply rep;
	int kid = -1; // the first kernel, to name the call in messages
	for (int i = 0; i < n && kid < 0; i++)
		if (steps[i].kind != KB_RESNORM)
			kid = steps[i].id;
	if (dp_roundtrip(r, &rq, &rep, kid, t0, expect, err))
		return -1;
	for (int i = 0; i < n && i < (int)rep.done_steps; i++) {
		uint32_t *e = &r->expect[steps[i].ncols > 1][step_slot(r, &steps[i])];
		uint64_t x = rep.exec_ns[i] < UINT32_MAX ? rep.exec_ns[i] : UINT32_MAX;
		*e = *e ? (uint32_t)((3 * (uint64_t)*e + x) / 4) : (uint32_t)x;
	}
	if (rep.status != DP_OK) {
		const struct kb_step *st = &steps[rep.done_steps < (uint32_t)n ? rep.done_steps : 0];
		if (st->kind == KB_RESNORM)
			return ad_err(err, "%s: %s", r->kb.name, rep.msg);
		return ad_err(err, "%s: kernel %d: %s", r->kb.name, st->id, rep.msg);
	}
	if (t) {
		uint64_t total = now_ns() - t0, exec = 0;
		for (int i = 0; i < n; i++)
			exec += rep.exec_ns[i];
		uint64_t over = total > exec ? (total - exec) / (uint64_t)n : 0;
		for (int i = 0; i < n; i++)
			t[i] = (struct kb_timing){rep.exec_ns[i], rep.exec_ns[i] + over, 0, 0};
		// both clocks are the system's monotonic one: a difference
		// below zero is the two reads' order, not time
		t[0].pickup_ns = rep.start_ns > rep.posted_ns ? rep.start_ns - rep.posted_ns : 0;
		t[0].reply_ns = rep.seen_ns > rep.done_ns ? rep.seen_ns - rep.done_ns : 0;
	}
	return 0;
}

static int
r_call_list(struct kernel_backend *kb, const struct kb_step *steps, int n, struct kb_timing *t, char *err)
{
	struct remote *r = kb->priv;
	if (n < 1)
		return ad_err(err, "%s: an empty list of kernels", kb->name);
	if (!r->dp)
		return kb_call_loop(kb, steps, n, t, err);
	for (int i = 0; i < n; i++) {
		const struct kb_step *st = &steps[i];
		if (st->kind != KB_RESNORM) {
			if (check_call(kb, st->id, st->in, st->out, st->ncols, err))
				return -1;
			if ((st->x_in || st->x_out) && !rows_in_arena(r, st)) // through the surfaces, here
				return kb_call_loop(kb, steps, n, t, err);
		} else if (!in_arena(r, st)) { // host memory of this process only: run it all here
			return kb_call_loop(kb, steps, n, t, err);
		} else if (st->ncols < 1 || st->ncols > kb->width || st->rn.E < 1) {
			return ad_err(err, "%s: resnorm: %d columns of %d (width %d)", kb->name, st->ncols, st->rn.E,
			              kb->width);
		}
	}
	for (int i = 0; i < n; i += DP_MAX_STEPS)
		if (dp_list(r, steps + i, n - i < DP_MAX_STEPS ? n - i : DP_MAX_STEPS, t ? t + i : NULL, err))
			return -1;
	return 0;
}

int
kb_remote_ping(struct kernel_backend *kb, int via_nng, char *err)
{
	struct remote *r = kb->priv;
	if (via_nng)
		return health(r, r->timeout_ms, err);
	if (!r->dp)
		return ad_err(err, "%s: no data plane", kb->name);
	struct dp_request rq = {.op = DP_OP_NOP};
	static _Thread_local struct dp_reply rep;
	if (dp_roundtrip(r, &rq, &rep, -1, now_ns(), 0, err))
		return -1;
	if (rep.status != DP_OK)
		return ad_err(err, "%s: data-plane round trip: %s", kb->name, rep.msg);
	return 0;
}

static int
r_call(struct kernel_backend *kb, int id, struct ad_surface *in, struct ad_surface *out, int ncols, struct kb_timing *t,
       char *err)
{
	struct remote *r = kb->priv;
	uint64_t t0 = now_ns();
	if (check_call(kb, id, in, out, ncols, err))
		return -1;
	if (r->dp) {
		struct kb_step st = {.id = id, .in = in, .out = out, .ncols = ncols};
		return dp_list(r, &st, 1, t, err);
	}
	const uint64_t seq = ++r->seq;
	const uint64_t deadline = t0 + (uint64_t)r->deadline_ms * 1000000u;
	int retries = 0;
	for (;;) {
		int transport, code;
		char e[AD_ERRLEN];
		Anedvd__AneReply *a = transport_of(
			anec_call(r->c, (uint32_t)id, in->id, out->id, (uint32_t)ncols, seq, r->timeout_ms, &code, e),
			&code, &transport);
		if (a) {
			if (t) {
				t->exec_ns = a->call->exec_ns;
				t->total_ns = now_ns() - t0;
			}
			ad_rpc_free(a);
			if (retries)
				ad_info("kernel %d: answered after %d retries (worker pid %u)", id, retries,
				        r->worker_pid);
			return 0;
		}
		if (!transport)
			return ad_err(err, "%s: kernel %d: %s", kb->name, id, e);
		ad_warn("kernel %d: %s; waiting for the ane-worker", id, e);
		if (await_worker(r, deadline, err))
			return ad_err_prefix(err, "kernel %d", id);
		retries++;
	}
}

static int
r_surface_new(struct kernel_backend *kb, const char *name, int channels, unsigned flags, struct ad_surface *s,
              char *err)
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
	if (surface_create(s, id, (size_t)channels, (size_t)kb->width, AD_SURFACE_SHARED | (flags & KB_SURF_LAZY), err))
		return -1;
	int pos = r->surf.n;
	kb_surfaces_keep(&r->surf, s);
	if (pos < DP_MAX_SURF) {
		char e[AD_ERRLEN];
		r->dp_idx[pos] = -1;
		if (r->dp) // a full table only means calls name it by id
			r->dp_idx[pos] = (int16_t)dp_add_surface(r->dp, id, (uint32_t)channels, (uint32_t)kb->width, e);
	}
	return 0;
}

// host memory: the arena's, bump-allocated; over nng this process's
static float *
r_host_alloc(struct kernel_backend *kb, size_t n, char *err)
{
	struct remote *r = kb->priv;
	if (!r->dp) {
		kb->host_alloc = NULL; // kb_host_alloc's own, once
		float *p = kb_host_alloc(kb, n, err);
		kb->host_alloc = r_host_alloc;
		return p;
	}
	size_t a = (n + 15) / 16 * 16;
	if (!r->arena || a > r->arena_n - r->arena_used)
		return ad_err(err, "%s: %zu host floats: the data-plane arena has %zu of %zu left", kb->name, n,
		              r->arena_n - r->arena_used, r->arena_n),
		       NULL;
	float *p = r->arena + r->arena_used;
	r->arena_used += a;
	return p;
}

static void
r_free(struct kernel_backend *kb)
{
	if (!kb)
		return;
	struct remote *r = kb->priv;
	kb_host_free(kb);
	dp_destroy(r->dp); // the worker's thread sees it closed and unmaps
	kb_surfaces_free(&r->surf);
	ad_client_close(r->c);
	pthread_mutex_destroy(&r->amu);
	ane_plan_free(&r->plan);
	free(r->info);
	free(r->expect[0]);
	free(r->expect[1]);
	free(r);
}

// the data-plane object, attached; a worker without the data plane leaves
// the calls on nng
static int
dp_start(struct remote *r, char *err)
{
	char sub[AD_SURFACE_ID_MAX], id[AD_SURFACE_ID_MAX];
	snprintf(sub, sizeof sub, "r%u-dp", r->gen);
	if (surface_id(id, sizeof id, r->instance, sub))
		return ad_err(err, "data plane: id too long");
	if (!(r->dp = dp_create_arena(id, r->host_floats * sizeof(float), err)))
		return -1;
	size_t ab = 0;
	r->arena = dp_arena(r->dp, &ab);
	r->arena_n = ab / sizeof(float);
	r->arena_used = 0;
	for (int i = 0; i < r->surf.n && i < DP_MAX_SURF; i++) // none yet, in practice
		r->dp_idx[i] = -1;
	int transport = 0;
	char e[AD_ERRLEN];
	if (attach(r, r->timeout_ms, &transport, e) == 0) {
		ad_log(r->quiet ? AD_LOG_DEBUG : AD_LOG_INFO, "data plane %s attached", id);
		r->kb.host_io = 1;
		return 0;
	}
	if (transport) { // gone again right after answering: the first call waits for it
		ad_warn("data plane %s: %s", id, e);
		r->kb.host_io = 1;
		return 0;
	}
	dp_destroy(r->dp);
	r->dp = NULL;
	r->arena = NULL;
	r->arena_n = 0;
	ad_warn("the ane-worker has no data plane (%s): kernel calls over nng", e);
	return 0;
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
	r->quiet = o->quiet;
	r->gen = atomic_fetch_add(&remote_gen, 1);
	r->kb.surface_new = r_surface_new;
	r->kb.call = r_call;
	r->kb.call_list = r_call_list;
	r->kb.host_alloc = r_host_alloc;
	r->kb.free = r_free;
	pthread_mutex_init(&r->amu, NULL);
	struct ane_plan_opts po = {.width = o->width, .split = o->split, .weights = (enum ane_wfmt)o->weights};
	if (ane_plan_build(&r->plan, m, &po, err))
		goto fail;
	r->info = calloc((size_t)r->plan.n, sizeof *r->info);
	r->expect[0] = calloc((size_t)r->plan.n + 1, sizeof *r->expect[0]);
	r->expect[1] = calloc((size_t)r->plan.n + 1, sizeof *r->expect[1]);
	if (!r->info || !r->expect[0] || !r->expect[1]) {
		ad_err(err, "out of memory");
		goto fail;
	}
	for (int i = 0; i < r->plan.n; i++) {
		const struct ane_pk *pk = &r->plan.k[i];
		r->info[i] = (struct kb_info){.id = i,
		                              .kind = (enum ane_kind)pk->kind,
		                              .layer = pk->layer,
		                              .chunk = pk->chunk,
		                              .in_ch = pk->in_ch,
		                              .out_ch = pk->out_ch,
		                              .row_offset = pk->row_offset,
		                              .weight_bytes = pk->weight_bytes};
	}
	r->kb.width = r->plan.width;
	// and the host rows of the kernels' inputs and outputs the engine
	// reads and writes (kb_step): QKV's output, O's input, the logits, a
	// split FFN's GATE_UP output (DOWN's input)
	size_t qkv = 0, oin = 0, head = 0, gu = 0;
	for (int i = 0; i < r->plan.n; i++) {
		const struct ane_pk *pk = &r->plan.k[i];
		if (pk->kind == ANE_K_QKV && (size_t)pk->out_ch > qkv)
			qkv = (size_t)pk->out_ch;
		else if (pk->kind == ANE_K_O && (size_t)pk->in_ch > oin)
			oin = (size_t)pk->in_ch;
		else if (pk->kind == ANE_K_LM_HEAD && (size_t)(pk->row_offset + pk->out_ch) > head)
			head = (size_t)(pk->row_offset + pk->out_ch);
		else if (pk->kind == ANE_K_GATE_UP && (size_t)pk->out_ch > gu)
			gu = (size_t)pk->out_ch;
	}
	r->host_floats = kb_host_floats(m, r->plan.width) + kb_host_rows_floats(m, r->plan.width, qkv, oin, head, gu);
	r->kb.n_kernels = r->plan.n;
	r->kb.kernels = r->info;
	r->c = ad_client_open(r->url, err);
	if (!r->c)
		goto fail;
	// the worker may still be compiling: wait for it like after a restart
	if (await_worker(r, now_ns() + (uint64_t)r->deadline_ms * 1000000u, err))
		goto fail;
	const char *env = getenv("ANEDVD_DATAPLANE");
	if (!o->no_dataplane && !(env && strcmp(env, "0") == 0) && dp_start(r, err))
		goto fail;
	return &r->kb;
fail:
	ad_err_prefix(err, "remote backend");
	r_free(&r->kb);
	return NULL;
}
