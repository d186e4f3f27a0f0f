#include <stdlib.h>

#include "kernels.h"

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

int
kb_call_loop(struct kernel_backend *kb, const struct kb_step *steps, int n, struct kb_timing *t, char *err)
{
	for (int i = 0; i < n; i++)
		if (kb->call(kb, steps[i].id, steps[i].in, steps[i].out, steps[i].ncols, t ? &t[i] : NULL, err))
			return -1;
	return 0;
}

int
kb_call_list(struct kernel_backend *kb, const struct kb_step *steps, int n, struct kb_timing *t, char *err)
{
	if (n < 1)
		return ad_err(err, "%s: an empty list of kernels", kb->name);
	return kb->call_list ? kb->call_list(kb, steps, n, t, err) : kb_call_loop(kb, steps, n, t, err);
}
