// surface.h - activation surfaces shared between processes.
//
// A surface holds a [channels x width] fp16 activation in the ANE's planar
// layout (layout.h, height 1: channel c at base + c * plane_stride;
// row_stride = max(64, width * 2); plane_stride = row_stride), at no less
// than layout.h's floor, so the same bytes can be handed to the ANE. On Linux it is a POSIX shared-memory
// object named by its id; the creator owns it and unlinks it on close.
// Another process maps it by id (surface_open) and only unmaps on close.
//
// Ids have the form "/anedvd-<pid>-<name>", <pid> being the process that
// created the instance's surfaces (the supervisor, or the cpu-worker when it
// runs alone). surface_cleanup_stale removes the objects of instances whose
// pid is no longer alive, so a crash never leaks shared memory for good.
#ifndef AD_SURFACE_H
#define AD_SURFACE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "layout.h"

#define AD_SURFACE_ID_MAX 64

struct ad_surface {
	char id[AD_SURFACE_ID_MAX];
	size_t channels, width;
	size_t row_stride, plane_stride;
	size_t bytes;   // mapped size (>= plane_stride * channels, >= ANE_MIN_SURFACE)
	uint16_t *base; // fp16 data
	int owner;      // unlink on close
	int shared;     // 1: POSIX shm; 0: private memory (single-process use)
};

#define AD_SURFACE_SHARED 1 // a POSIX shm object (else process memory)
#define AD_SURFACE_LAZY 2   // shared: pages on first use, not at creation

// surface_create makes a new zeroed surface. Without AD_SURFACE_SHARED it
// is plain process memory (no id needed: pass NULL). A shared one has
// every page in place at once (Linux), unless AD_SURFACE_LAZY: for a
// surface that may never be written, whose pages would only be memory.
// Fails if the id exists.
int surface_create(struct ad_surface *s, const char *id, size_t channels, size_t width, unsigned flags, char *err);
// surface_open maps an existing shared surface; its size must fit the
// shape. The pages its creator put in place are mapped at once; it adds
// none (a lazy surface stays so).
int surface_open(struct ad_surface *s, const char *id, size_t channels, size_t width, char *err);
void surface_close(struct ad_surface *s); // unmap; the owner also unlinks

// surface_id formats "/anedvd-<pid>-<name>"; -1 if it does not fit
int surface_id(char *buf, size_t cap, long pid, const char *name);
// remove every /anedvd-<pid>-* object whose pid is not a live process;
// returns how many were removed (Linux: scans /dev/shm)
int surface_cleanup_stale(void);
// remove every object of one instance (at clean shutdown)
int surface_cleanup_pid(long pid);

// x: [ncols][ld] fp32 rows -> the first ncols columns (fp16, nearest-even)
void surface_write(struct ad_surface *s, const float *x, size_t ncols, size_t ld);
// the first ncols columns -> x: [ncols][ld] fp32
void surface_read(const struct ad_surface *s, float *x, size_t ncols, size_t ld);

#endif
