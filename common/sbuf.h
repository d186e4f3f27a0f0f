// sbuf.h - a growable NUL-terminated string.
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

#endif
