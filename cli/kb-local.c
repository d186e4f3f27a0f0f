// kb-local.c - the kernel set in this process, on the emu backend (or, in
// a macOS build, the ane one: kb_opts.backend).
//
// The plan of the model (common/plan.h) is compiled at once with the
// ane-worker's own builder, so this backend runs the very MIL programs and
// weight blobs the anedvd-ane-worker process runs: kb_local and kb_remote
// give the same bits. Surfaces are private memory in the planar layout.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "build.h"
#include "kernels.h"

struct local {
	struct kernel_backend kb;
	struct ane_set set;
	struct kb_info *info;
	struct kb_surfaces surf; // copies of those handed out; closed by free
};

static uint64_t
now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int
l_surface_new(struct kernel_backend *kb, const char *name, int channels, struct ad_surface *s, char *err)
{
	struct local *l = kb->priv;
	if (kb_surfaces_reserve(&l->surf, err))
		return -1;
	if (channels <= 0)
		return ad_err(err, "surface %s: %d channels", name ? name : "?", channels);
	if (surface_create(s, name, (size_t)channels, (size_t)kb->width, 0, err))
		return -1;
	kb_surfaces_keep(&l->surf, s);
	return 0;
}

// the checks the worker makes too, so both backends refuse the same calls
static int
kb_check_call(const struct kernel_backend *kb, int id, const struct ad_surface *in, const struct ad_surface *out,
              int ncols, char *err)
{
	if (id < 0 || id >= kb->n_kernels)
		return ad_err(err, "%s: no kernel %d", kb->name, id);
	const struct kb_info *k = &kb->kernels[id];
	if (ncols < 1 || ncols > kb->width)
		return ad_err(err, "%s: kernel %d: %d columns (width %d)", kb->name, id, ncols, kb->width);
	if (!in || !out || !in->base || !out->base || in->base == out->base)
		return ad_err(err, "%s: kernel %d: needs two distinct surfaces", kb->name, id);
	if (in->width != (size_t)kb->width || out->width != (size_t)kb->width)
		return ad_err(err, "%s: kernel %d: surfaces of width %zu/%zu, kernels have %d", kb->name, id,
		              in->width, out->width, kb->width);
	if (in->channels < (size_t)k->in_ch || out->channels < (size_t)k->out_ch)
		return ad_err(err, "%s: kernel %d: surfaces of %zu/%zu channels, need %d/%d", kb->name, id,
		              in->channels, out->channels, k->in_ch, k->out_ch);
	return 0;
}

static int
l_call(struct kernel_backend *kb, int id, struct ad_surface *in, struct ad_surface *out, int ncols,
       struct kb_timing *t, char *err)
{
	uint64_t t0 = now_ns();
	struct local *l = kb->priv;
	if (kb_check_call(kb, id, in, out, ncols, err))
		return -1;
	struct ane_kernel *k = &l->set.k[id];
	if (in->bytes < ane_kernel_input_capacity(k) || out->bytes < ane_kernel_output_capacity(k))
		return ad_err(err, "%s: kernel %d: surfaces too small", kb->name, id);
	if (ane_eval(k, in->base, out->base, ncols, err))
		return ad_err_prefix(err, "%s: kernel %d", kb->name, id);
	if (t) {
		t->exec_ns = now_ns() - t0;
		t->total_ns = t->exec_ns;
	}
	return 0;
}

static void
l_free(struct kernel_backend *kb)
{
	if (!kb)
		return;
	struct local *l = kb->priv;
	kb_host_free(kb);
	kb_surfaces_free(&l->surf);
	free(l->info);
	ane_set_free(&l->set);
	free(l);
}

struct kernel_backend *
kb_local_new(const struct model *m, const struct kb_opts *o, char *err)
{
	struct local *l = calloc(1, sizeof *l);
	if (!l)
		return ad_err(err, "out of memory"), NULL;
	struct ane_plan_opts po = {.width = o ? o->width : 0, .split = o ? o->split : 0,
	                           .weights = o ? (enum ane_wfmt)o->weights : ANE_W_FP16};
	const char *be = o && o->backend ? o->backend : "emu";
	struct ane_build_opts bo = {.backend = be, .threads = o ? o->threads : 0};
	if (ane_set_build(&l->set, m, &po, &bo, 0, err)) {
		ad_err_prefix(err, "%s backend", be);
		free(l);
		return NULL;
	}
	const struct ane_plan *p = &l->set.plan;
	l->info = calloc((size_t)p->n, sizeof *l->info);
	if (!l->info) {
		ane_set_free(&l->set);
		free(l);
		return ad_err(err, "out of memory"), NULL;
	}
	for (int i = 0; i < p->n; i++) {
		const struct ane_pk *pk = &p->k[i];
		l->info[i] = (struct kb_info){.id = i, .kind = (enum ane_kind)pk->kind, .layer = pk->layer,
		                              .chunk = pk->chunk, .in_ch = pk->in_ch, .out_ch = pk->out_ch,
		                              .row_offset = pk->row_offset, .weight_bytes = pk->weight_bytes,
		                              .compile_us = l->set.k[i].compile_us};
	}
	l->kb.priv = l;
	l->kb.name = strcmp(be, "ane") ? "emu" : "ane";
	l->kb.width = p->width;
	l->kb.n_kernels = p->n;
	l->kb.kernels = l->info;
	l->kb.compile_count = ane_builder_compiles(l->set.b);
	l->kb.compile_ms = l->set.compile_ms;
	l->kb.surface_new = l_surface_new;
	l->kb.call = l_call;
	l->kb.call_list = kb_call_loop;
	l->kb.free = l_free;
	return &l->kb;
}
