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
