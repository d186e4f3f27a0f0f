#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "kernels.h"
#include "layout.h"
#include "planar.h"

int
kb_surfaces_reserve(struct kb_surfaces *l, char *err)
{
	if (l->n < l->cap)
		return 0;
	int c = l->cap ? 2 * l->cap : 16;
	void *p = realloc(l->v, (size_t)c * sizeof *l->v);
	if (!p)
		return ad_err(err, "out of memory");
	l->v = p;
	l->cap = c;
	return 0;
}

void
kb_surfaces_keep(struct kb_surfaces *l, const struct ad_surface *s)
{
	l->v[l->n++] = *s; // room made by kb_surfaces_reserve
}

void
kb_surfaces_free(struct kb_surfaces *l)
{
	for (int i = 0; i < l->n; i++)
		surface_close(&l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = l->cap = 0;
}

static int
resnorm_here(struct kernel_backend *kb, const struct kb_step *st, struct kb_timing *t, char *err)
{
	uint64_t t0 = ad_now_ns();
	if (kb->resnorm) {
		if (kb->resnorm(kb, st, err))
			return -1;
	} else {
		size_t need = 2 * (size_t)st->ncols * (size_t)st->rn.E;
		if (need > kb->scratch_cap) {
			float *p = realloc(kb->scratch, need * sizeof(float));
			if (!p)
				return ad_err(err, "resnorm: out of memory");
			kb->scratch = p;
			kb->scratch_cap = need;
		}
		if (ane_resnorm_planar(&st->rn, st->ncols, st->in, st->y_rows, st->x_in, st->x_out, st->out,
		                       st->xn_rows, kb->scratch, err))
			return -1;
	}
	if (t) {
		t->exec_ns = ad_now_ns() - t0;
		t->total_ns = t->exec_ns;
	}
	return 0;
}

// a kernel step's host rows moved through its surfaces (kb_step)
static int
host_rows(struct kernel_backend *kb, const struct kb_step *st, int out, char *err)
{
	if (st->id < 0 || st->id >= kb->n_kernels)
		return ad_err(err, "%s: no kernel %d", kb->name, st->id);
	const struct kb_info *k = &kb->kernels[st->id];
	struct ad_surface *s = out ? st->out : st->in;
	const size_t C = (size_t)(out ? k->out_ch : k->in_ch), ldx = (size_t)(out ? st->out_ld : st->in_ld),
		     ld = ldx ? ldx : C;
	if (!s || !s->base || s->channels < C || s->width < (size_t)st->ncols || st->ncols < 1 || ld < C)
		return ad_err(err, "%s: kernel %d: host rows of %zu floats for %zu channels, %d columns", kb->name,
		              st->id, ld, C, st->ncols);
	if (out)
		ad_planar_gather(s->base, s->plane_stride, st->x_out, C, ld, (size_t)st->ncols);
	else
		ad_planar_scatter(s->base, s->plane_stride, st->x_in, C, ld, (size_t)st->ncols);
	return 0;
}

int
kb_call_loop(struct kernel_backend *kb, const struct kb_step *steps, int n, struct kb_timing *t, char *err)
{
	for (int i = 0; i < n; i++) {
		const struct kb_step *st = &steps[i];
		if (st->kind == KB_RESNORM) {
			if (resnorm_here(kb, st, t ? &t[i] : NULL, err))
				return -1;
			continue;
		}
		if (st->x_in && host_rows(kb, st, 0, err))
			return -1;
		if (kb->call(kb, st->id, st->in, st->out, st->ncols, t ? &t[i] : NULL, err))
			return -1;
		if (st->x_out && host_rows(kb, st, 1, err))
			return -1;
	}
	return 0;
}

// --- host memory ------------------------------------------------------------------------

struct kb_host {
	struct kb_host *next;
};

float *
kb_host_alloc(struct kernel_backend *kb, size_t n, char *err)
{
	if (kb->host_alloc)
		return kb->host_alloc(kb, n, err);
	// the block's link in its first line, the floats after it
	void *p = NULL;
	if (n > SIZE_MAX / sizeof(float) - 64 || posix_memalign(&p, 64, 64 + n * sizeof(float)))
		return ad_err(err, "out of memory for %zu host floats", n), NULL;
	memset(p, 0, 64 + n * sizeof(float));
	struct kb_host *h = p;
	h->next = kb->host;
	kb->host = h;
	return (float *)((char *)p + 64);
}

void
kb_host_free(struct kernel_backend *kb)
{
	while (kb->host) {
		struct kb_host *n = kb->host->next;
		free(kb->host);
		kb->host = n;
	}
	free(kb->scratch);
	kb->scratch = NULL;
	kb->scratch_cap = 0;
}

size_t
kb_host_floats(const struct model *m, int width)
{
	// three residual rows of [width][E] (a fused call reads one and writes
	// the other two), and per layer up to five [E] vectors (two norms, two
	// post-norms, the output bias), the output norm; each rounded to 16
	// floats (64 bytes)
	size_t E = ((size_t)m->hp.n_embd + 15) / 16 * 16;
	size_t w = width > 0 ? (size_t)width : 64;
	return 3 * ((w * (size_t)m->hp.n_embd + 15) / 16 * 16) + (5 * (size_t)m->hp.n_layer + 2) * E;
}

size_t
kb_host_rows_floats(const struct model *m, int width, size_t qkv, size_t o, size_t head, size_t gate_up)
{
	// as the engine sizes them: QKV's output rows hold at least 3 n_embd
	// (a ShortConv block's), O's input at least n_embd, the logits n_vocab;
	// and a fused call's y and xn rows, n_embd each, and the scheduler's
	// logits (engine_logits_alloc: a row per column and one more). Pages
	// no call writes are never touched
	const size_t E = (size_t)m->hp.n_embd, w = width > 0 ? (size_t)width : 64, V = (size_t)m->hp.n_vocab;
	qkv = qkv > 3 * E ? qkv : 3 * E;
	o = o > E ? o : E;
	head = head > V ? head : V;
	return (w * qkv + 15) / 16 * 16 + (w * o + 15) / 16 * 16 + (w * head + 15) / 16 * 16 +
	       (w * gate_up + 15) / 16 * 16 + 2 * ((w * E + 15) / 16 * 16) + ((w + 1) * head + 15) / 16 * 16;
}

int
kb_call_list(struct kernel_backend *kb, const struct kb_step *steps, int n, struct kb_timing *t, char *err)
{
	if (n < 1)
		return ad_err(err, "%s: an empty list of kernels", kb->name);
	return kb->call_list ? kb->call_list(kb, steps, n, t, err) : kb_call_loop(kb, steps, n, t, err);
}

int
kb_find(const struct kernel_backend *kb, enum ane_kind kind, int layer, int chunk)
{
	for (int i = 0; i < kb->n_kernels; i++)
		if (kb->kernels[i].kind == kind && kb->kernels[i].layer == layer && kb->kernels[i].chunk == chunk)
			return i;
	return -1;
}
