// service.c - the ane-worker's service (ane-service.h): the projection
// kernels of one model, compiled at start or mapped from the disk cache,
// answering AneRequests and serving the data plane's attachments. The
// anedvd-ane-worker process (main-ane-worker.c, which says what the
// service does) is this between its flags and its signals.

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ane-service.h"
#include "ane.pb-c.h"
#include "build.h"
#include "clock.h"
#include "emu.h"
#include "common.pb-c.h"
#include "dataplane.h"
#include "hugemem.h"
#include "ipc.h"
#include "layout.h"
#include "log.h"
#include "model.h"
#include "resnorm.h"
#include "rpc.h"
#include "surface.h"
#include "trace.h"

#define MAX_PROBES 64
#define MAX_SURFACES 256
#define MAX_DP_CLIENTS 64

struct wsurf {
	struct ad_surface s;
	int fd; // kept open to notice an unlinked object (st_nlink 0)
};

struct kstat {
	uint64_t calls, exec_ns, columns;
};

struct worker;

// an attached data-plane object and the thread serving it
struct dpc {
	struct worker *w;
	struct dp_chan *ch; // closed by dpc_stop, after the thread ends
	char id[AD_SURFACE_ID_MAX];
	uint32_t gen;
	pthread_t th;
	volatile int stop;
	atomic_int done;
	struct ad_surface map[DP_MAX_SURF]; // by table index, mapped on first use (under worker.mu)
	float *scratch;                     // DP_RESNORM steps' gathered y and xn (under worker.mu)
	size_t scratch_cap;
	// the idle prefetch (this thread only): per kernel, the first kernel of
	// the call that came after a call ending with it, and the kernel after
	// it within a call (-1: not seen); the last kernel of the last call;
	// where the prefetch stands (kernel, constant, offset, bytes so far)
	int32_t *after_call, *after_step;
	int nk, last;
	int pf_kernel, pf_const, pf_kernels;
	size_t pf_off, pf_done;
	struct dpc *next;
};

struct worker {
	struct ane_set set;
	const char *backend;
	struct ane_kernel probes[MAX_PROBES];
	int nprobes;
	struct kstat *kstats; // set.plan.n + MAX_PROBES
	struct wsurf surf[MAX_SURFACES];
	int nsurf;
	pthread_mutex_t mu;       // kernels, surfaces, stats
	struct ad_rpc_server rpc; // the message dispatch (proto/rpc.h); data-plane calls count as its requests
	int delay_us;             // --debug-delay-ms, or ANEDVD_DEBUG_DELAY_US
	uint64_t model_us;
	char phases[1024];
	pthread_mutex_t dpmu; // dps
	struct dpc *dps;
	int ndps;
	enum ad_log_level log_level; // of the start and the data plane's comings and goings
	// the start: the server answers from the first, Health with how far
	// the kernels have come, every other request ERROR_UNAVAILABLE until
	// ready (rpc.h)
	_Atomic int built, total, ready;
	// a new cache entry is being written (ane_set_cache_wait has yet to
	// return): Health says so, and the supervisor waits for it at a stop
	_Atomic int cache_writing;
	_Atomic int stored;   // its kernels written so far, total + 1 while it commits (ane_build_opts.stored)
	_Atomic int store_go; // the worker is stopping: write the rest at once (store_pace)
	uint64_t store_seen, store_quiet_ns; // store_pace's: calls it last saw, since when
	// the kernels' weights moved off the cache file while idle (mover_main)
	_Atomic uint64_t calls; // kernel calls begun (a call holds mu while it runs)
	_Atomic int move_stop;
	int moving; // the mover's thread was started
	pthread_t mover;
	uint64_t move_seen, move_quiet_ns; // the mover's: calls it last saw, since when
	struct emu *hot;                   // the emu whose pool a data-plane call holds hot (dp_handle), or NULL
};

// the rpc server's finishing function
static int
finishing(void *arg, char *buf, size_t cap)
{
	struct worker *w = arg;
	if (!atomic_load(&w->cache_writing))
		return 0;
	const int k = atomic_load(&w->stored), n = atomic_load(&w->total);
	if (k > n)
		snprintf(buf, cap, "flushing its new kernel cache entry to disk");
	else
		snprintf(buf, cap, "writing its new kernel cache entry (%d of %d kernels)", k, n);
	return 1;
}

// the rpc server's starting function
static int
starting(void *arg, char *buf, size_t cap)
{
	struct worker *w = arg;
	if (atomic_load(&w->ready))
		return 0;
	const int total = atomic_load(&w->total);
	if (total)
		snprintf(buf, cap, "building its kernels for %s: %d of %d", w->backend, atomic_load(&w->built), total);
	else
		snprintf(buf, cap, "planning its kernels for %s", w->backend);
	return 1;
}

static int
nkernels(const struct worker *w)
{
	return w->set.plan.n + w->nprobes;
}

static struct ane_kernel *
kernel(struct worker *w, int id)
{
	return id < w->set.plan.n ? &w->set.k[id] : &w->probes[id - w->set.plan.n];
}

// --- surfaces ------------------------------------------------------------------------

static void
drop_surface(struct worker *w, int i)
{
	surface_close(&w->surf[i].s);
	close(w->surf[i].fd);
	memmove(&w->surf[i], &w->surf[i + 1], (size_t)(w->nsurf - i - 1) * sizeof w->surf[0]);
	w->nsurf--;
}

static void
drop_all(struct worker *w)
{
	while (w->nsurf > 0)
		drop_surface(w, w->nsurf - 1);
}

// the mapping of id for at least channels x width; code gets the error kind
// (never evicting the entry of keep, the call's other surface)
static struct ad_surface *
get_surface(struct worker *w, const char *id, int channels, int width, const char *keep, Anedvd__ErrorCode *code,
            char *err)
{
	for (int i = 0; i < w->nsurf; i++) {
		struct wsurf *ws = &w->surf[i];
		if (strcmp(ws->s.id, id) != 0)
			continue;
		struct stat st;
		if (fstat(ws->fd, &st) == 0 && st.st_nlink > 0 && ws->s.width == (size_t)width &&
		    ws->s.channels >= (size_t)channels)
			return &ws->s;
		drop_surface(w, i); // gone, or needed larger: map again
		break;
	}
	*code = ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	if (!id[0] || id[0] != '/' || strlen(id) >= AD_SURFACE_ID_MAX)
		return ad_err(err, "bad surface id '%.80s'", id), NULL;
	int fd = shm_open(id, O_RDONLY, 0);
	if (fd < 0) {
		*code = ANEDVD__ERROR_CODE__ERROR_NOT_FOUND;
		return ad_err(err, "surface %s: %s", id, strerror(errno)), NULL;
	}
	if (w->nsurf == MAX_SURFACES)
		drop_surface(w, strcmp(w->surf[0].s.id, keep) == 0 ? 1 : 0);
	struct wsurf *ws = &w->surf[w->nsurf];
	if (surface_open(&ws->s, id, (size_t)channels, (size_t)width, err)) {
		close(fd);
		return NULL;
	}
	ws->fd = fd;
	w->nsurf++;
	return &ws->s;
}

// --- replies -------------------------------------------------------------------------

// the reply under construction and everything it points to: the
// request's scratch (proto/rpc.h)
struct reply {
	struct ad_rpc_req *q;
	union {
		Anedvd__CompileReply compile;
		Anedvd__KernelReply call;
		Anedvd__StatsReply stats;
		Anedvd__AttachReply attach;
	} u;
	char msg[AD_ERRLEN];
	// compile / stats lists
	Anedvd__KernelInfo *infos;
	Anedvd__KernelInfo **infop;
	Anedvd__KernelStats *kst;
	Anedvd__KernelStats **kstp;
	char (*layouts)[64];
	Anedvd__StartPhase phase[9], *phasep[9];
};

static void
fail(struct reply *rp, Anedvd__ErrorCode code, const char *msg)
{
	ad_rpc_fail(rp->q, (int)code, "%s", msg);
}

static void
do_compile_reply(struct worker *w, struct reply *rp)
{
	int n = nkernels(w);
	rp->infos = calloc((size_t)n + 1, sizeof *rp->infos);
	rp->infop = calloc((size_t)n + 1, sizeof *rp->infop);
	rp->layouts = calloc((size_t)n + 1, sizeof *rp->layouts);
	if (!rp->infos || !rp->infop || !rp->layouts) {
		fail(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
		return;
	}
	uint64_t total_us = 0;
	for (int i = 0; i < n; i++) {
		Anedvd__KernelInfo *ki = &rp->infos[i];
		anedvd__kernel_info__init(ki);
		const struct ane_kernel *k = kernel(w, i);
		ki->id = (uint32_t)i;
		if (i < w->set.plan.n) {
			const struct ane_pk *pk = &w->set.plan.k[i];
			ki->kind = (Anedvd__KernelKind)pk->kind;
			ki->layer = pk->layer;
			ki->chunk = (uint32_t)pk->chunk;
			ki->row_offset = (uint32_t)pk->row_offset;
			ki->weight_bytes = pk->weight_bytes;
		} else {
			ki->kind = ANEDVD__KERNEL_KIND__KERNEL_PROBE;
			ki->layer = -1;
			ki->weight_bytes = k->weight_bytes;
		}
		ki->in_channels = (uint32_t)k->in_ch;
		ki->out_channels = (uint32_t)k->out_ch;
		ki->compile_us = k->compile_us;
		total_us += k->compile_us;
		const struct ane_layout *l = ane_kernel_input_layout(k);
		snprintf(rp->layouts[i], sizeof rp->layouts[i], "%zu x %zu, row %zu, plane %zu", l->channels, l->width,
		         l->row_stride, l->plane_stride);
		ki->input_surface_layout = rp->layouts[i];
		rp->infop[i] = ki;
	}
	Anedvd__CompileReply *c = &rp->u.compile;
	anedvd__compile_reply__init(c);
	c->n_kernels = (size_t)n;
	c->kernels = rp->infop;
	c->backend = (char *)w->backend;
	c->width = (uint32_t)w->set.plan.width;
	c->compile_count = ane_builder_compiles(w->set.b);
	c->compile_budget = ANE_COMPILE_BUDGET;
	c->compile_ms = total_us / 1000;
	// the ane backend copies into surfaces of its own (backend-ane.h)
	c->surfaces_shared = strcmp(w->backend, "ane") != 0;
	const struct ane_start *st = &w->set.start;
	static const char *const names[] = {
		"model", "plan", "key", "cache_load", "blobs", "compile", "cache_write", "cache_write_wait", "total"};
	const uint64_t us[] = {w->model_us,  st->plan_us,       st->key_us,
	                       st->load_us,  st->blob_us,       st->compile_us,
	                       st->store_us, st->store_wait_us, w->model_us + st->total_us};
	for (int i = 0; i < 9; i++) {
		anedvd__start_phase__init(&rp->phase[i]);
		rp->phase[i].name = (char *)names[i];
		rp->phase[i].ms = (double)us[i] / 1e3;
		rp->phasep[i] = &rp->phase[i];
	}
	c->n_start_phases = 9;
	c->start_phases = rp->phasep;
	c->cache = (char *)ane_cache_state_name(st->cache);
	rp->q->reply = &c->base;
}

static void
do_compile(struct worker *w, const Anedvd__CompileRequest *q, struct reply *rp)
{
	if (q->probe_size > 0) {
		if (w->nprobes == MAX_PROBES) {
			fail(rp, ANEDVD__ERROR_CODE__ERROR_TOO_LARGE, "compile: no room for more probe kernels");
			return;
		}
		int width = q->probe_width ? (int)q->probe_width : w->set.plan.width;
		if (q->probe_size > 8192 || q->probe_width > 4096) {
			fail(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "compile: probe size 1..8192, width 1..4096");
			return;
		}
		if (ane_build_probe(w->set.b, (int)q->probe_size, width, q->probe_seed, &w->probes[w->nprobes],
		                    rp->msg)) {
			fail(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, rp->msg);
			return;
		}
		memset(&w->kstats[nkernels(w)], 0, sizeof w->kstats[0]);
		w->nprobes++;
	}
	do_compile_reply(w, rp);
}

// a kernel's input and output as host rows instead of surfaces (ane_eval_host)
struct host_rows {
	const float *x_in;
	size_t in_ld;
	float *y_out;
	size_t out_ld;
};

// run kernel kid (checked by the caller) from in to out (or the host rows
// h names): the capacity check, the debug delay, the evaluation, trace and
// stats; 0 or an ErrorCode

static Anedvd__ErrorCode
exec_kernel(struct worker *w, uint32_t kid, struct ad_surface *in, struct ad_surface *out, uint32_t ncols,
            const struct host_rows *h, uint64_t *exec_ns, char *msg)
{
	struct ane_kernel *k = kernel(w, (int)kid);
	if (in->bytes < ane_kernel_input_capacity(k) || out->bytes < ane_kernel_output_capacity(k)) {
		snprintf(msg, AD_ERRLEN, "call: kernel %u: surface smaller than the kernel's capacity", kid);
		return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	if (w->delay_us > 0)
		usleep((useconds_t)w->delay_us);
	uint64_t t1 = ad_now_ns();
	if (h ? ane_eval_host(k, in->base, out->base, h->x_in, h->in_ld, h->y_out, h->out_ld, (int)ncols, msg)
	      : ane_eval(k, in->base, out->base, (int)ncols, msg)) {
		ad_err_prefix(msg, "call: kernel %u", kid);
		return ANEDVD__ERROR_CODE__ERROR_INTERNAL;
	}
	uint64_t t2 = ad_now_ns();
	if (trace_enabled()) {
		char name[48];
		const struct ane_pk *pk = kid < (uint32_t)w->set.plan.n ? &w->set.plan.k[kid] : NULL;
		if (!pk)
			snprintf(name, sizeof name, "probe %u", kid);
		else if (pk->layer >= 0)
			snprintf(name, sizeof name, "%s L%d", ane_kind_name(pk->kind), pk->layer);
		else
			snprintf(name, sizeof name, "%s c%d", ane_kind_name(pk->kind), pk->chunk);
		trace_event((long)getpid(), 1, name, "kernel", t1 / 1000u, (t2 - t1) / 1000u);
	}
	struct kstat *ks = &w->kstats[kid];
	ks->calls++;
	ks->exec_ns += t2 - t1;
	ks->columns += ncols;
	*exec_ns = t2 - t1;
	return ANEDVD__ERROR_CODE__ERROR_NONE;
}

// kernel id and column count of a call; 0 or an ErrorCode
static Anedvd__ErrorCode
check_kernel(struct worker *w, uint32_t kid, uint32_t ncols, char *msg)
{
	if (kid >= (uint32_t)nkernels(w)) {
		snprintf(msg, AD_ERRLEN, "call: no kernel %u (%d kernels)", kid, nkernels(w));
		return ANEDVD__ERROR_CODE__ERROR_NOT_FOUND;
	}
	struct ane_kernel *k = kernel(w, (int)kid);
	if (ncols < 1 || ncols > (uint32_t)k->width) {
		snprintf(msg, AD_ERRLEN, "call: kernel %u: %u columns (width %d)", kid, ncols, k->width);
		return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	return ANEDVD__ERROR_CODE__ERROR_NONE;
}

static void
do_call(struct worker *w, const Anedvd__KernelCall *q, struct reply *rp)
{
	uint64_t t0 = ad_now_ns();
	Anedvd__ErrorCode code = check_kernel(w, q->kernel, q->ncols, rp->msg);
	if (code) {
		fail(rp, code, rp->msg);
		return;
	}
	struct ane_kernel *k = kernel(w, (int)q->kernel);
	if (strcmp(q->input, q->output) == 0) {
		fail(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "call: input and output are the same surface");
		return;
	}
	struct ad_surface *in = get_surface(w, q->input, k->in_ch, k->width, q->output, &code, rp->msg);
	struct ad_surface *out = in ? get_surface(w, q->output, k->out_ch, k->width, q->input, &code, rp->msg) : NULL;
	if (out) // the entries may have moved; in is mapped, so this only looks it up
		in = get_surface(w, q->input, k->in_ch, k->width, q->output, &code, rp->msg);
	if (!in || !out) {
		ad_err_prefix(rp->msg, "call: kernel %u", q->kernel);
		fail(rp, code, rp->msg);
		return;
	}
	uint64_t exec = 0;
	if ((code = exec_kernel(w, q->kernel, in, out, q->ncols, NULL, &exec, rp->msg))) {
		fail(rp, code, rp->msg);
		return;
	}
	Anedvd__KernelReply *c = &rp->u.call;
	anedvd__kernel_reply__init(c);
	c->seq = q->seq;
	c->exec_ns = exec;
	c->total_ns = ad_now_ns() - t0;
	rp->q->reply = &c->base;
}

// --- the data plane ------------------------------------------------------------------

// the mapping of a step's surface: by table index (mapped once) or by id
static struct ad_surface *
dp_surf(struct dpc *d, uint16_t idx, const char *id, int channels, int width, const char *keep, Anedvd__ErrorCode *code,
        char *msg)
{
	if (idx == DP_BY_NAME)
		return get_surface(d->w, id, channels, width, keep, code, msg);
	struct dp_surf_entry e;
	*code = ANEDVD__ERROR_CODE__ERROR_NOT_FOUND;
	if (idx >= DP_MAX_SURF || dp_surface(d->ch, idx, &e))
		return ad_err(msg, "surface #%u is not registered", idx), NULL;
	*code = ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	if (e.width != (uint32_t)width || e.channels < (uint32_t)channels)
		return ad_err(msg, "surface %s: %u x %u, the kernel needs %d x %d", e.id, e.channels, e.width, channels,
		              width),
		       NULL;
	struct ad_surface *s = &d->map[idx];
	if (!s->base) {
		if (surface_open(s, e.id, e.channels, e.width, msg)) {
			*code = ANEDVD__ERROR_CODE__ERROR_NOT_FOUND;
			return NULL;
		}
	}
	return s;
}

// a wide resnorm step split by columns: task t of nt takes columns [c0, c1)
struct rn_job {
	const struct ad_resnorm *r;
	const struct ad_surface *ys;
	struct ad_surface *xs;
	const float *x_in, *y_rows;
	float *x_out, *xn_rows, *scratch;
	int n, nt; // columns, tasks
	atomic_int bad;
};

static void
rn_task(void *arg, size_t t)
{
	struct rn_job *j = arg;
	const int per = (j->n + j->nt - 1) / j->nt, c0 = (int)t * per, c1 = c0 + per < j->n ? c0 + per : j->n;
	if (c0 >= c1)
		return;
	const int E = j->r->E;
	// the surfaces seen from column c0: the same planes, c0 columns in
	struct ad_surface y, x;
	if (j->ys) {
		y = *j->ys;
		y.base = (uint16_t *)((char *)y.base + (size_t)c0 * 2);
		y.width -= (size_t)c0;
	}
	if (j->xs) {
		x = *j->xs;
		x.base = (uint16_t *)((char *)x.base + (size_t)c0 * 2);
		x.width -= (size_t)c0;
	}
	char e[AD_ERRLEN];
	const size_t at = (size_t)c0 * E;
	if (ane_resnorm_planar(j->r, c1 - c0, j->ys ? &y : NULL, j->y_rows ? j->y_rows + at : NULL, j->x_in + at,
	                       j->x_out + at, j->xs ? &x : NULL, j->xn_rows ? j->xn_rows + at : NULL,
	                       j->scratch + 2 * at, e))
		atomic_store(&j->bad, 1);
}

// arena spans [a, a + alen) and [b, b + blen) share a float
static int
spans_meet(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a < b + blen && b < a + alen;
}

// a DP_RESNORM step (dataplane.h): its vectors checked against the arena,
// its surfaces against the step's shape, then resnorm.h's arithmetic
static Anedvd__ErrorCode
dp_resnorm(struct dpc *d, const struct dp_step *st, uint64_t *exec_ns, char *msg)
{
	const struct dp_resnorm *q = &st->rn;
	const int width = d->w->set.plan.width;
	size_t abytes = 0;
	float *arena = dp_arena(d->ch, &abytes);
	const uint64_t na = abytes / sizeof(float), E = q->E, n = st->ncols;
	if (!arena) {
		snprintf(msg, AD_ERRLEN, "resnorm: the data-plane object has no arena");
		return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	if (E < 1 || E > (1u << 20) || n < 1 || n > (uint64_t)width || !(q->eps >= 0)) {
		snprintf(msg, AD_ERRLEN, "resnorm: %llu columns of %llu (width %d), eps %g", (unsigned long long)n,
		         (unsigned long long)E, width, (double)q->eps);
		return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	const uint64_t rows = n * E;
	const uint32_t vec[3] = {q->bias, q->post, q->w};
	int bad = q->x_in > na || rows > na - q->x_in || q->x_out > na || rows > na - q->x_out;
	for (int i = 0; i < 3; i++)
		bad |= vec[i] != DP_NO_VEC && (vec[i] > na || E > na - vec[i]);
	// x_out is x_in, or apart from it
	bad |= q->x_out != q->x_in && spans_meet(q->x_out, rows, q->x_in, rows);
	// y and xn as arena rows (dataplane.h): xn apart from every input and x_out
	const int y_rows = (st->host & DP_HOST_IN) != 0, xn_rows = (st->host & DP_HOST_OUT) != 0;
	bad |= (st->host & ~(DP_HOST_IN | DP_HOST_OUT)) != 0;
	if (y_rows)
		bad |= st->in_ld != E || st->in_off > na || rows > na - st->in_off;
	if (xn_rows) {
		bad |= st->out_ld != E || st->out_off > na || rows > na - st->out_off;
		const uint64_t at[6] = {q->x_in, q->x_out, y_rows ? st->in_off : DP_NO_VEC, q->bias, q->post, q->w};
		const uint64_t len[6] = {rows, rows, rows, E, E, E};
		for (int i = 0; i < 6; i++)
			bad |= at[i] != DP_NO_VEC && spans_meet(st->out_off, rows, at[i], len[i]);
	}
	if (bad) {
		snprintf(msg, AD_ERRLEN, "resnorm: vectors or rows outside the arena of %llu floats, or overlapping",
		         (unsigned long long)na);
		return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	// what the step writes, on present pages (dataplane.h)
	dp_arena_ready(d->ch, q->x_out * sizeof(float), rows * sizeof(float));
	if (xn_rows)
		dp_arena_ready(d->ch, (uint64_t)st->out_off * sizeof(float), rows * sizeof(float));
	Anedvd__ErrorCode code = 0;
	struct ad_surface *ys = NULL, *xs = NULL;
	if (!y_rows && st->in != DP_NO_SURF && !(ys = dp_surf(d, st->in, st->in_id, (int)E, width, "", &code, msg)))
		return ad_err_prefix(msg, "resnorm: y"), code;
	if (!xn_rows && st->out != DP_NO_SURF && !(xs = dp_surf(d, st->out, st->out_id, (int)E, width, "", &code, msg)))
		return ad_err_prefix(msg, "resnorm: xn"), code;
	if (ys && xs && st->in == DP_BY_NAME && st->out == DP_BY_NAME) // get_surface may have moved the entries
		ys = dp_surf(d, st->in, st->in_id, (int)E, width, "", &code, msg);
	if (2 * rows > d->scratch_cap) {
		float *p = realloc(d->scratch, 2 * rows * sizeof(float));
		if (!p) {
			snprintf(msg, AD_ERRLEN, "resnorm: out of memory");
			return ANEDVD__ERROR_CODE__ERROR_INTERNAL;
		}
		d->scratch = p;
		d->scratch_cap = 2 * rows;
	}
	const struct ad_resnorm r = {
		.E = (int)E,
		.eps = q->eps,
		.bias = q->bias == DP_NO_VEC ? NULL : arena + q->bias,
		.post = q->post == DP_NO_VEC ? NULL : arena + q->post,
		.w = q->w == DP_NO_VEC ? NULL : arena + q->w,
	};
	uint64_t t0 = ad_now_ns();
	struct emu *emu = d->w->set.b ? ane_builder_emu(d->w->set.b) : NULL;
	if (emu && n >= 8 && emu_nthreads(emu) > 1) {
		// wide (a prefill chunk): column blocks on the emu's threads, each
		// column computed as alone
		const int nt = emu_nthreads(emu) * 2;
		struct rn_job j = {&r,
		                   ys,
		                   xs,
		                   arena + q->x_in,
		                   y_rows ? arena + st->in_off : NULL,
		                   arena + q->x_out,
		                   xn_rows ? arena + st->out_off : NULL,
		                   d->scratch,
		                   (int)n,
		                   nt,
		                   0};
		emu_parallel(emu, rn_task, &j, (size_t)nt);
		if (j.bad)
			return snprintf(msg, AD_ERRLEN, "resnorm: a surface is too small"),
			       ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	} else if (ane_resnorm_planar(&r, (int)n, ys, y_rows ? arena + st->in_off : NULL, arena + q->x_in,
	                              arena + q->x_out, xs, xn_rows ? arena + st->out_off : NULL, d->scratch, msg)) {
		return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	uint64_t t1 = ad_now_ns();
	*exec_ns = t1 - t0;
	if (trace_enabled())
		trace_event((long)getpid(), 1, "resnorm", "kernel", t0 / 1000u, (t1 - t0) / 1000u);
	return 0;
}

// --- the idle prefetch ------------------------------------------------------------------
//
// Between two calls of a generation the client computes (attention, the
// residuals when unfused, sampling) and this thread spins, waiting. It
// spends the wait pulling the weights of the kernels the client is
// expected to call next into the caches, a piece at a time (dp_set_idle),
// so the next call reads part of them from the caches rather than from
// DRAM: the memory works while the CPU does. The expectation is learned
// from the calls served: after a call ending with kernel k comes a call
// starting with after_call[k], and within a call kernel j is followed by
// after_step[j]. At most PF_BUDGET bytes per wait (more would evict the
// first), PF_PIECE per piece. ANEDVD_PREFETCH=0 turns it off.

#define PF_BUDGET (12u << 20)
#define PF_PIECE (32u << 10)
#define PF_LOOK 4096u

static int prefetch_on = -1;

// learn from the kernels of a request served, and aim the next prefetch
static void
pf_learn(struct dpc *d, const struct dp_request *rq, uint32_t done)
{
	if (!d->after_call)
		return;
	int prev = -1, first = -1;
	for (uint32_t i = 0; i < done && i < rq->nsteps; i++) {
		uint32_t k = rq->step[i].kernel;
		if (k == DP_RESNORM || k >= (uint32_t)d->nk)
			continue;
		if (prev >= 0)
			d->after_step[prev] = (int32_t)k;
		else
			first = (int)k;
		prev = (int)k;
	}
	if (first < 0)
		return;
	if (d->last >= 0)
		d->after_call[d->last] = first;
	d->last = prev;
	d->pf_kernel = d->after_call[prev];
	d->pf_const = 0;
	d->pf_off = 0;
	d->pf_done = 0;
	d->pf_kernels = 0;
}

// one piece of the prefetch: 1 while there is more to do
static int
dp_prefetch(void *arg)
{
	struct dpc *d = arg;
	struct worker *w = d->w;
	if (d->pf_kernel < 0 || d->pf_done >= PF_BUDGET)
		return 0;
	if (pthread_mutex_trylock(&w->mu))
		return 0; // another client's call: not now
	uint64_t sum = 0;
	size_t piece = 0;
	int rung = 0;
	while (piece < PF_PIECE && d->pf_kernel >= 0) {
		struct ane_kernel *k = d->pf_kernel < w->set.plan.n ? &w->set.k[d->pf_kernel] : NULL;
		struct emu_const c;
		if (!k || !k->ek || emu_kernel_const(k->ek, d->pf_const, &c)) {
			// this kernel done: the one after it within a call, a few at most
			int nx = d->after_step[d->pf_kernel];
			d->pf_kernel = ++d->pf_kernels < 4 ? nx : -1;
			d->pf_const = 0;
			d->pf_off = 0;
			continue;
		}
		const char *p = c.data;
		size_t end = d->pf_off + (PF_PIECE - piece), o = d->pf_off;
		if (end > c.bytes)
			end = c.bytes;
		// a load per line (it cannot be dropped); a look at the bell every
		// PF_LOOK bytes: a call that comes meanwhile is taken at once
		for (; o < end && !(o != d->pf_off && o % PF_LOOK == 0 && dp_bell_rung(d->ch)); o += 64)
			sum += *(const volatile uint8_t *)(p + o);
		piece += o - d->pf_off;
		d->pf_off = o;
		if (o < end) { // a call: the rest later
			rung = 1;
			break;
		}
		if (d->pf_off >= c.bytes) {
			d->pf_const++;
			d->pf_off = 0;
		}
	}
	pthread_mutex_unlock(&w->mu);
	d->pf_done += piece;
	__asm__ volatile("" : : "r"(sum)); // the loads are used
	return !rung && d->pf_kernel >= 0 && d->pf_done < PF_BUDGET;
}

// a kernel step's host rows (dataplane.h: DP_HOST_IN, DP_HOST_OUT), checked
// against the arena and the kernel's channels
static Anedvd__ErrorCode
dp_host_rows(struct dpc *d, const struct dp_step *st, const struct ane_kernel *k, struct host_rows *h, char *msg)
{
	size_t abytes = 0;
	float *arena = dp_arena(d->ch, &abytes);
	const uint64_t na = abytes / sizeof(float), n = st->ncols;
	*h = (struct host_rows){0};
	if (!arena || (st->host & ~(DP_HOST_IN | DP_HOST_OUT))) {
		snprintf(msg, AD_ERRLEN, "call: kernel %u: host rows %#x without an arena, or unknown", st->kernel,
		         st->host);
		return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	const struct {
		uint32_t flag, off, ld;
		int ch;
	} io[2] = {{DP_HOST_IN, st->in_off, st->in_ld, k->in_ch}, {DP_HOST_OUT, st->out_off, st->out_ld, k->out_ch}};
	for (int i = 0; i < 2; i++) {
		if (!(st->host & io[i].flag))
			continue;
		// rows [n][ld], the last one only its channels long
		const uint64_t len = (n - 1) * io[i].ld + (uint64_t)io[i].ch;
		if (io[i].ld < (uint32_t)io[i].ch || io[i].off > na || len > na - io[i].off) {
			snprintf(
				msg, AD_ERRLEN,
				"call: kernel %u: host %s rows of %u floats at %u (%d channels) outside the arena of %llu floats",
				st->kernel, i ? "output" : "input", io[i].ld, io[i].off, io[i].ch,
				(unsigned long long)na);
			return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
		}
	}
	if (st->host & DP_HOST_IN)
		h->x_in = arena + st->in_off, h->in_ld = st->in_ld;
	if (st->host & DP_HOST_OUT) {
		h->y_out = arena + st->out_off, h->out_ld = st->out_ld;
		dp_arena_ready(d->ch, (uint64_t)st->out_off * sizeof(float),
		               ((n - 1) * st->out_ld + (uint64_t)k->out_ch) * sizeof(float));
	}
	// a re-posted call must find its input as it was
	if (h->x_in && h->y_out && spans_meet(st->in_off, n * st->in_ld, st->out_off, n * st->out_ld)) {
		snprintf(msg, AD_ERRLEN, "call: kernel %u: host input and output rows overlap", st->kernel);
		return ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
	}
	return 0;
}

// A data-plane call of at most HOT_COLS columns (a decode step's, a
// speculative verify's) holds the emu's pool hot (ad_pool_hot) while it
// runs: its workers poll for the call's next job with the pause hint
// rather than yielding the CPU between looks. Each yield made the worker
// 1-8 us late for most jobs of a decode step's call, jobs of a few tens
// of us (SmolLM2-135M Q8_0, an instrumented pool, not kept); pausing,
// under 1 us for most. A prefill chunk's jobs take milliseconds, and a
// worker that never yields only keeps others off its CPU between them.
// The nng path's calls, one kernel each, are left as they were.
// ANEDVD_POOL_HOT=0 turns it off.
#define HOT_COLS 8
static void
hot_start(struct worker *w)
{
	if (ad_env_on("ANEDVD_POOL_HOT", "holding the pool hot through a call"))
		w->hot = w->set.b ? ane_builder_emu(w->set.b) : NULL;
}

static void
dp_handle(void *arg, const struct dp_request *rq, struct dp_reply *rep)
{
	struct dpc *d = arg;
	struct worker *w = d->w;
	char msg[AD_ERRLEN];
	Anedvd__ErrorCode code = 0;
	__atomic_add_fetch(&w->rpc.requests, 1, __ATOMIC_RELAXED);
	atomic_fetch_add_explicit(&w->calls, 1, memory_order_relaxed);
	pthread_mutex_lock(&w->mu);
	// a decode-sized call runs its kernels' short jobs back to back while
	// the client sleeps until the reply: the emu's workers wait for each
	// without yielding their CPUs (hot_start)
	struct emu *hot = w->hot;
	for (uint32_t i = 0; i < rq->nsteps && hot; i++)
		if (rq->step[i].ncols > HOT_COLS)
			hot = NULL;
	if (hot)
		emu_hot(hot, 1);
	for (uint32_t i = 0; i < rq->nsteps && !code; i++) {
		const struct dp_step *st = &rq->step[i];
		if (st->kernel == DP_RESNORM) {
			if (!(code = dp_resnorm(d, st, &rep->exec_ns[i], msg)))
				rep->done_steps = i + 1;
			continue;
		}
		if ((code = check_kernel(w, st->kernel, st->ncols, msg)))
			break;
		struct ane_kernel *k = kernel(w, (int)st->kernel);
		if (st->in == st->out && (st->in != DP_BY_NAME || strcmp(st->in_id, st->out_id) == 0)) {
			code = ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST;
			snprintf(msg, sizeof msg, "call: kernel %u: input and output are the same surface", st->kernel);
			break;
		}
		const char *kin = st->in == DP_BY_NAME ? st->in_id : "",
			   *kout = st->out == DP_BY_NAME ? st->out_id : "";
		struct ad_surface *in = dp_surf(d, st->in, st->in_id, k->in_ch, k->width, kout, &code, msg);
		struct ad_surface *out =
			in ? dp_surf(d, st->out, st->out_id, k->out_ch, k->width, kin, &code, msg) : NULL;
		if (out && st->in == DP_BY_NAME) // get_surface may have moved the entries
			in = dp_surf(d, st->in, st->in_id, k->in_ch, k->width, kout, &code, msg);
		if (!in || !out) {
			ad_err_prefix(msg, "call: kernel %u", st->kernel);
			break;
		}
		struct host_rows h;
		if (st->host && (code = dp_host_rows(d, st, k, &h, msg)))
			break;
		code = exec_kernel(w, st->kernel, in, out, st->ncols, st->host ? &h : NULL, &rep->exec_ns[i], msg);
		if (!code)
			rep->done_steps = i + 1;
	}
	if (hot)
		emu_hot(hot, 0);
	pthread_mutex_unlock(&w->mu);
	pf_learn(d, rq, rep->done_steps);
	if (code) {
		rep->status = (int32_t)code;
		size_t n = strnlen(msg, sizeof rep->msg - 1); // cut to the slot's room
		memcpy(rep->msg, msg, n);
		rep->msg[n] = 0;
	}
}

static void *
dp_thread(void *arg)
{
	struct dpc *d = arg;
	static const char *why[] = {"stopping", "closed by the client", "the client is gone", "attached again"};
	ad_thread_name("data plane");
	int rc = dp_serve(d->ch, d->gen, dp_handle, d, &d->stop, 100);
	ad_log(d->w->log_level, "data plane %s (generation %u): %s", d->id, d->gen, rc >= 0 && rc <= 3 ? why[rc] : "?");
	pthread_mutex_lock(&d->w->mu);
	for (int i = 0; i < DP_MAX_SURF; i++)
		surface_close(&d->map[i]);
	free(d->scratch);
	d->scratch = NULL;
	pthread_mutex_unlock(&d->w->mu);
	free(d->after_call);
	free(d->after_step);
	d->after_call = d->after_step = NULL;
	atomic_store(&d->done, 1);
	return NULL;
}

// stop and free d (not in the list any more). The channel lives as long as
// d: the thread may end by itself (the client closed, a newer attach) at any
// moment, so it must not unmap what a kick here still rings
static void
dpc_stop(struct dpc *d)
{
	if (!atomic_load(&d->done)) {
		d->stop = 1;
		dp_kick(d->ch);
	}
	pthread_join(d->th, NULL);
	dp_close(d->ch);
	free(d);
}

// take the entries that are done, or (id) the one serving id, out of the list
static struct dpc *
dpc_take(struct worker *w, const char *id)
{
	struct dpc *out = NULL, **pp = &w->dps;
	while (*pp) {
		struct dpc *d = *pp;
		if (atomic_load(&d->done) || (id && strcmp(d->id, id) == 0)) {
			*pp = d->next;
			d->next = out;
			out = d;
			w->ndps--;
		} else {
			pp = &d->next;
		}
	}
	return out;
}

static void
do_attach(struct worker *w, const Anedvd__AttachRequest *q, struct reply *rp)
{
	const char *id = q->object ? q->object : "";
	pthread_mutex_lock(&w->dpmu);
	struct dpc *old = dpc_take(w, id);
	pthread_mutex_unlock(&w->dpmu);
	while (old) {
		struct dpc *n = old->next;
		dpc_stop(old);
		old = n;
	}
	struct dpc *d = calloc(1, sizeof *d);
	if (!d) {
		fail(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
		return;
	}
	d->w = w;
	snprintf(d->id, sizeof d->id, "%s", id);
	if (!(d->ch = dp_open(id, rp->msg))) {
		free(d);
		fail(rp, ANEDVD__ERROR_CODE__ERROR_NOT_FOUND, rp->msg);
		return;
	}
	pthread_mutex_lock(&w->dpmu);
	if (w->ndps >= MAX_DP_CLIENTS) {
		pthread_mutex_unlock(&w->dpmu);
		dp_close(d->ch);
		free(d);
		fail(rp, ANEDVD__ERROR_CODE__ERROR_TOO_LARGE, "attach: too many data-plane clients");
		return;
	}
	if (prefetch_on < 0) {
		const char *pe = getenv("ANEDVD_PREFETCH");
		prefetch_on = !(pe && strcmp(pe, "0") == 0);
	}
	d->last = d->pf_kernel = -1;
	d->nk = w->set.plan.n;
	if (prefetch_on && d->nk > 0) {
		d->after_call = malloc((size_t)d->nk * sizeof(int32_t));
		d->after_step = malloc((size_t)d->nk * sizeof(int32_t));
		if (d->after_call && d->after_step) {
			for (int i = 0; i < d->nk; i++)
				d->after_call[i] = d->after_step[i] = -1;
			dp_set_idle(d->ch, dp_prefetch, d);
		} else { // without: no prefetch
			free(d->after_call);
			free(d->after_step);
			d->after_call = d->after_step = NULL;
		}
	}
	d->gen = dp_attach(d->ch);
	if (pthread_create(&d->th, NULL, dp_thread, d)) {
		pthread_mutex_unlock(&w->dpmu);
		dp_close(d->ch);
		free(d);
		fail(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "attach: no thread");
		return;
	}
	d->next = w->dps;
	w->dps = d;
	w->ndps++;
	pthread_mutex_unlock(&w->dpmu);
	ad_log(w->log_level, "data plane %s attached (generation %u)", id, d->gen);
	Anedvd__AttachReply *a = &rp->u.attach;
	anedvd__attach_reply__init(a);
	a->generation = d->gen;
	a->pid = (uint32_t)getpid();
	a->slots = DP_SLOTS;
	a->max_steps = DP_MAX_STEPS;
	rp->q->reply = &a->base;
}

static void
dp_stop_all(struct worker *w)
{
	pthread_mutex_lock(&w->dpmu);
	struct dpc *d = w->dps;
	w->dps = NULL;
	w->ndps = 0;
	pthread_mutex_unlock(&w->dpmu);
	while (d) {
		struct dpc *n = d->next;
		dpc_stop(d);
		d = n;
	}
}

static void
do_stats(struct worker *w, struct reply *rp)
{
	int n = nkernels(w);
	rp->kst = calloc((size_t)n + 1, sizeof *rp->kst);
	rp->kstp = calloc((size_t)n + 1, sizeof *rp->kstp);
	if (!rp->kst || !rp->kstp) {
		fail(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
		return;
	}
	for (int i = 0; i < n; i++) {
		anedvd__kernel_stats__init(&rp->kst[i]);
		rp->kst[i].kernel = (uint32_t)i;
		rp->kst[i].calls = w->kstats[i].calls;
		rp->kst[i].exec_ns = w->kstats[i].exec_ns;
		rp->kst[i].columns = w->kstats[i].columns;
		rp->kstp[i] = &rp->kst[i];
	}
	anedvd__stats_reply__init(&rp->u.stats);
	rp->u.stats.n_kernels = (size_t)n;
	rp->u.stats.kernels = rp->kstp;
	rp->q->reply = &rp->u.stats.base;
}

static void
handle(void *arg, struct ad_rpc_req *q)
{
	struct worker *w = arg;
	struct reply *rp = q->scratch;
	rp->q = q;
	switch (q->method) {
	case ANEDVD__ANE_REQUEST__BODY_COMPILE:
		pthread_mutex_lock(&w->mu);
		do_compile(w, (const Anedvd__CompileRequest *)q->body, rp);
		pthread_mutex_unlock(&w->mu);
		break;
	case ANEDVD__ANE_REQUEST__BODY_CALL:
		atomic_fetch_add_explicit(&w->calls, 1, memory_order_relaxed);
		pthread_mutex_lock(&w->mu);
		do_call(w, (const Anedvd__KernelCall *)q->body, rp);
		pthread_mutex_unlock(&w->mu);
		break;
	case ANEDVD__ANE_REQUEST__BODY_STATS:
		pthread_mutex_lock(&w->mu);
		do_stats(w, rp);
		pthread_mutex_unlock(&w->mu);
		break;
	case ANEDVD__ANE_REQUEST__BODY_ATTACH:
		do_attach(w, (const Anedvd__AttachRequest *)q->body, rp);
		break;
	default:
		fail(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "request without a body");
	}
}

// what the reply pointed to, once packed
static void
release(void *scratch)
{
	struct reply *rp = scratch;
	free(rp->infos);
	free(rp->infop);
	free(rp->layouts);
	free(rp->kst);
	free(rp->kstp);
	if (rp->q && rp->q->method == ANEDVD__ANE_REQUEST__BODY_COMPILE)
		ad_heap_trim();
}

// --- the kernels' weights moved off the cache file ----------------------------------
//
// Kernels from the kernel cache read their weights where the file is
// mapped, in the page cache. On a VM that memory can stream markedly
// slower than fresh anonymous memory, in bands of the file (docs/
// RESULTS.md: Qwen2.5-0.5B F16 decode 7-15% faster with the weights copied
// into anonymous huge pages), and copying them at the start costs seconds
// there (fresh memory faults in at ~300 MB/s). So once the worker has
// been idle for MOVE_IDLE_NS, a thread of its own copies each kernel's
// weights into the emu's arena (emu_kernel_copy), a 2 MiB piece at a time,
// waiting again whenever calls come; the kernel adopts its copy under the
// worker's lock, between calls, and the file's pages are unmapped. A run,
// whose calls come back to back, moves next to nothing; a server moves
// them in its first idle seconds. ANEDVD_CACHE_MOVE=0 leaves them mapped
// (the page cache is shared by every process that maps the same entry;
// the copies are the process's own).
#define MOVE_IDLE_NS (200ull * 1000 * 1000)

// 1 when the worker is idle: no call begun for MOVE_IDLE_NS and none
// running (the worker's lock is free). The calls only count; the one
// asking keeps the clock (*seen, *quiet: the calls it last saw, since when)
static int
idle(struct worker *w, uint64_t *seen, uint64_t *quiet)
{
	uint64_t c = atomic_load_explicit(&w->calls, memory_order_relaxed), now = ad_now_ns();
	if (c != *seen) {
		*seen = c;
		*quiet = now;
		return 0;
	}
	if (now - *quiet < MOVE_IDLE_NS || pthread_mutex_trylock(&w->mu) != 0)
		return 0;
	pthread_mutex_unlock(&w->mu);
	return 1;
}

// emu_kernel_copy's pace: 0 once the worker is idle, -1 when stopping
static int
move_wait(void *arg)
{
	struct worker *w = arg;
	for (;;) {
		if (atomic_load(&w->move_stop))
			return -1;
		if (idle(w, &w->move_seen, &w->move_quiet_ns))
			return 0;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

// --- the kernel cache's new entry -----------------------------------------------------
//
// After a start that compiled, the new cache entry is written once the
// worker is ready and idle, a kernel at a time, pausing again whenever
// calls come; when the service is freed, at once.
// Written beside the compile, as it was, the entry took the disk, the
// memory and the second core from the start: the Qwen2.5-0.5B shape F16
// from a file out of the page cache came to its first token after 3.5-6.7
// s, against 2.0 s with no cache at all. A run, whose calls come back to
// back, writes it at its end, which the supervisor waits for.
static int
store_pace(void *arg)
{
	struct worker *w = arg;
	return atomic_load(&w->store_go) || (atomic_load(&w->ready) && idle(w, &w->store_seen, &w->store_quiet_ns));
}

// unmap the pages of a buffer no kernel reads any more (a shared read-only
// file mapping: they stay in the page cache). The buffers lie back to back
// in the file: a page it shares with a buffer not yet moved goes too, and
// faults back in from the page cache at that kernel's next call
static void
unmap_pages(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)4095, e = ((uintptr_t)p + n + 4095) & ~(uintptr_t)4095;
	if (e > a)
		(void)madvise((void *)a, e - a, MADV_DONTNEED);
}

static void *
mover_main(void *arg)
{
	struct worker *w = arg;
	char err[AD_ERRLEN];
	uint64_t t0 = ad_now_ns(), bytes = 0;
	int moved = 0;
	ad_thread_name("cache mover");
	for (int i = 0; i < w->set.plan.n && !atomic_load(&w->move_stop); i++) {
		struct ane_kernel *k = &w->set.k[i];
		size_t nb = k->ek ? emu_kernel_borrowed(k->ek) : 0;
		if (!nb)
			continue;
		struct emu_copy *c = emu_kernel_copy(k->ek, move_wait, w, err);
		if (!c) {
			if (!atomic_load(&w->move_stop))
				ad_warn("kernel %d: its weights stay in the cache file: %s", i, err);
			break;
		}
		int n = emu_kernel_nconsts(k->ek);
		struct emu_const *old = calloc((size_t)n + 1, sizeof *old); // the borrowed ones, to unmap
		pthread_mutex_lock(&w->mu);
		for (int j = 0; old && j < n; j++)
			emu_kernel_const(k->ek, j, &old[j]);
		emu_kernel_adopt(k->ek, c);
		pthread_mutex_unlock(&w->mu);
		for (int j = 0; old && j < n; j++)
			unmap_pages(old[j].data, old[j].bytes);
		free(old);
		bytes += nb;
		moved++;
	}
	if (moved)
		ad_log(w->log_level, "moved %d kernels' weights (%.1f MB) off the cache file in %.1f s", moved,
		       (double)bytes / 1e6, (double)(ad_now_ns() - t0) / 1e9);
	return NULL;
}

// the mover's thread, when kernels borrow their weights from a cache file
static void
mover_start(struct worker *w)
{
	if (!ad_env_on("ANEDVD_CACHE_MOVE", "moving the weights off the cache file when idle"))
		return;
	int any = 0;
	for (int i = 0; i < w->set.plan.n && !any; i++)
		any = w->set.k[i].ek && emu_kernel_borrowed(w->set.k[i].ek) > 0;
	if (!any)
		return;
	w->move_seen = atomic_load(&w->calls);
	w->move_quiet_ns = ad_now_ns();
	w->moving = pthread_create(&w->mover, NULL, mover_main, w) == 0;
}

static void
mover_stop(struct worker *w)
{
	if (!w->moving)
		return;
	atomic_store(&w->move_stop, 1);
	pthread_join(w->mover, NULL);
	w->moving = 0;
}

// --- the service, as a library entry (ane-service.h) ---------------------------------

struct ane_service {
	struct worker *w;
	struct ad_server *srv;
};

static void
worker_free(struct worker *w)
{
	atomic_store(&w->store_go, 1); // ane_set_free waits for the writer
	mover_stop(w);
	dp_stop_all(w);
	drop_all(w);
	for (int i = 0; i < w->nprobes; i++)
		ane_kernel_free(&w->probes[i]);
	ane_set_free(&w->set);
	free(w->kstats);
	pthread_mutex_destroy(&w->mu);
	pthread_mutex_destroy(&w->dpmu);
	free(w);
}

struct ane_service *
ane_service_start(const struct model *m, const struct ane_service_opts *o, char *err)
{
	const char *backend = o->backend ? o->backend : "emu";
	int chunk = o->chunk > 0 ? o->chunk : 64, threads = o->threads > 0 ? o->threads : 2;
	struct ane_service *sv = calloc(1, sizeof *sv);
	struct worker *w = calloc(1, sizeof *w);
	if (!sv || !w) {
		free(sv);
		free(w);
		return ad_err(err, "out of memory"), NULL;
	}
	sv->w = w;
	w->backend = backend;
	w->delay_us = o->delay_us;
	ad_rpc_server_init(&w->rpc, &ad_rpc_ane, "anedvd-ane-worker", handle, w, sizeof(struct reply), release);
	w->rpc.starting = starting;
	w->rpc.finishing = finishing;
	pthread_mutex_init(&w->mu, NULL);
	pthread_mutex_init(&w->dpmu, NULL);
	enum ane_wfmt wf = ane_plan_weights_default(m, backend);
	if (o->weights && ane_wfmt_parse(o->weights, &wf)) {
		ad_err(err, "weights: fp16, int8 or lut4, not '%s'", o->weights);
		goto fail;
	}
	struct ane_plan_opts po = {.width = chunk, .split = o->split, .weights = wf};
	// the weight format is in the plan (and so in every kernel's MIL text,
	// which the key hashes); the options text names it for the listing
	char copts[32];
	snprintf(copts, sizeof copts, "weights=%s", ane_wfmt_name(wf));
	struct ane_build_opts bo = {.backend = backend,
	                            .threads = threads,
	                            .cache_dir = o->cache_dir ? o->cache_dir : "",
	                            .cache_max_bytes = (uint64_t)o->cache_mb << 20,
	                            .options = copts,
	                            .cache_background = 1,
	                            .store_pace = store_pace,
	                            .store_pace_arg = w,
	                            .built = &w->built,
	                            .total = &w->total,
	                            .stored = &w->stored,
	                            .debug_delay_ms = o->build_delay_ms,
	                            .debug_store_delay_ms = o->store_delay_ms};
	enum ad_log_level lv = w->log_level = o->quiet ? AD_LOG_DEBUG : AD_LOG_INFO;
	// the server first: a long compile answers Health with its progress, so
	// that the supervisor tells it from a worker that does not answer
	sv->srv = ad_server_start(o->url, 4, ad_rpc_serve, &w->rpc, err);
	if (!sv->srv)
		goto fail;
	ad_log(lv, "compiling %s for %s, %d columns, %s weights%s", m->name, backend, chunk, ane_wfmt_name(wf),
	       o->split ? ", split FFN" : "");
	if (ane_set_build(&w->set, m, &po, &bo, !o->quiet, err))
		goto fail;
	w->kstats = calloc((size_t)w->set.plan.n + MAX_PROBES, sizeof *w->kstats);
	if (!w->kstats) {
		ad_err(err, "out of memory");
		goto fail;
	}
	ad_log(lv, "%d kernels, %u compiles in %llu ms", w->set.plan.n, ane_builder_compiles(w->set.b),
	       (unsigned long long)w->set.compile_ms);
	w->model_us = o->model_us;
	ane_start_describe(&w->set.start, w->phases, sizeof w->phases);
	ad_log(lv, "start: model %.1f ms, %s", o->model_us / 1e3, w->phases);
	atomic_store(&w->cache_writing, w->set.store != NULL);
	w->store_quiet_ns = ad_now_ns(); // idle from now on, not from the start
	hot_start(w);                    // before ready: a data-plane client attaches only to a ready worker
	atomic_store(&w->ready, 1);
	ad_log(lv, "ready on %s", o->url);
	mover_start(w);
	return sv;
fail:
	ad_server_stop(sv->srv); // NULL is fine
	worker_free(w);
	free(sv);
	return NULL;
}

void
ane_service_cache_wait(struct ane_service *sv)
{
	// a new cache entry is finished while the kernels already serve
	struct worker *w = sv->w;
	if (w->set.store) {
		enum ane_cache_state cs = ane_set_cache_wait(&w->set, &w->mu);
		atomic_store(&w->cache_writing, 0);
		ad_info("kernel cache: %s, %.1f ms of writing", ane_cache_state_name(cs),
		        (double)w->set.start.store_us / 1e3);
	}
}

void
ane_service_stop(struct ane_service *sv)
{
	if (!sv)
		return;
	ad_server_stop(sv->srv);
	worker_free(sv->w);
	free(sv);
}
