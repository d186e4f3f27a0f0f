// sbuf.h - growable buffers: a NUL-terminated string, and ad_grow for
// any malloc'd array.
//
// Appends never report failure one by one: the first failed allocation
// sticks in oom, later appends do nothing, and the caller checks oom once
// (the sticky-error habit of ane-worker/mil.h). s is malloc'd (NULL until
// the first append); the caller frees it.
#ifndef AD_SBUF_H
#define AD_SBUF_H

#include <stddef.h>

struct sbuf {
	char *s;
	size_t n, cap;
	int oom;
};

void sbuf_add(struct sbuf *b, const char *s, size_t n);
void sbuf_str(struct sbuf *b, const char *s);
void sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// ad_grow: room for need elements of size bytes in the malloc'd array whose
// pointer is at pp (NULL at first) and whose room is *cap: first elements,
// doubled until need fits. -1 when realloc fails (the array and *cap stay).
int ad_grow(void *pp, size_t *cap, size_t need, size_t size, size_t first);

#endif
