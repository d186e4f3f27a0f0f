// ane-shim-util.c - the parts of the shim that need no device: surface
// sizes, strides read back from a model, the load-retry schedule, status
// codes. Plain C, built and tested everywhere.
#include "ane-shim.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
ane_shim_fail(char *err, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, ANE_SHIM_ERRLEN, fmt, ap);
		va_end(ap);
	}
	return -1;
}

size_t
ane_shim_surface_bytes(size_t declared)
{
	return declared > ANE_SHIM_MIN_SURFACE ? declared : ANE_SHIM_MIN_SURFACE;
}

size_t
ane_shim_elem_size(const char *type)
{
	if (!type)
		return 0;
	if (strstr(type, "Float16"))
		return 2;
	if (strstr(type, "Float32"))
		return 4;
	return 0;
}

// a * b, or 0 on overflow (no size here is legitimately 0 after the defaults)
static size_t
mul(size_t a, size_t b)
{
	size_t r;
	return __builtin_mul_overflow(a, b, &r) ? 0 : r;
}

int
ane_shim_tensor_set(struct ane_shim_tensor *t, const char *name, const char *type, uint64_t batches, uint64_t channels,
                    uint64_t height, uint64_t width, uint64_t row_stride, uint64_t plane_stride, uint64_t depth_stride,
                    uint64_t batch_stride, char *err)
{
	memset(t, 0, sizeof *t);
	snprintf(t->name, sizeof t->name, "%s", name ? name : "");
	t->elem = ane_shim_elem_size(type);
	if (!t->elem)
		return ane_shim_fail(err, "tensor %s: type '%s' is neither Float16 nor Float32", t->name,
		                     type ? type : "(none)");
	if (channels == 0)
		return ane_shim_fail(err, "tensor %s: 0 channels", t->name);
	const uint64_t lim = (uint64_t)1 << 40;
	if (batches > lim || channels > lim || height > lim || width > lim || row_stride > lim || plane_stride > lim ||
	    depth_stride > lim || batch_stride > lim)
		return ane_shim_fail(err, "tensor %s: sizes or strides beyond 2^40", t->name);
	t->batches = batches ? batches : 1;
	t->channels = channels;
	t->height = height ? height : 1;
	t->width = width ? width : 1;
	t->row_stride = row_stride;
	t->plane_stride = plane_stride;
	t->depth_stride = depth_stride;
	// the seed's fallbacks: no batch stride -> channels planes
	t->batch_stride = batch_stride ? batch_stride : mul(plane_stride, channels);
	size_t row = mul(t->width, t->elem);
	if (!row || t->row_stride < row)
		return ane_shim_fail(err, "tensor %s: row stride %zu < %zu x %zu bytes", t->name, t->row_stride,
		                     t->width, t->elem);
	if (t->plane_stride < mul(t->row_stride, t->height))
		return ane_shim_fail(err, "tensor %s: plane stride %zu < %zu rows of %zu", t->name, t->plane_stride,
		                     t->height, t->row_stride);
	size_t planes = mul(t->plane_stride, t->channels);
	if (!planes || t->batch_stride < planes)
		return ane_shim_fail(err, "tensor %s: batch stride %zu < %zu planes of %zu", t->name, t->batch_stride,
		                     t->channels, t->plane_stride);
	t->nbytes = mul(t->batch_stride, t->batches);
	if (!t->nbytes)
		return ane_shim_fail(err, "tensor %s: size overflows", t->name);
	return 0;
}

int
ane_shim_tensor_formula(struct ane_shim_tensor *t, size_t channels, size_t height, size_t width, size_t elem, char *err)
{
	if (elem != 2 && elem != 4)
		return ane_shim_fail(err, "element size %zu (2 or 4)", elem);
	size_t row = mul(width, elem);
	row = row > 64 ? row : 64;
	size_t plane = mul(row, height ? height : 1);
	plane = plane > 64 ? plane : 64;
	return ane_shim_tensor_set(t, "formula", elem == 2 ? "Float16" : "Float32", 1, channels, height, width, row,
	                           plane, 0, 0, err);
}

int
ane_shim_tensor_contiguous(const struct ane_shim_tensor *t)
{
	return t->row_stride == t->width * t->elem && t->plane_stride == t->row_stride * t->height &&
	       t->batch_stride == t->plane_stride * t->channels;
}

int
ane_shim_restride(void *dst, const struct ane_shim_tensor *d, const void *src, const struct ane_shim_tensor *s,
                  size_t ncols, char *err)
{
	if (d->elem != s->elem || d->channels != s->channels || d->height != s->height)
		return ane_shim_fail(err, "restride: %zu x %zu x %zu-byte tensor into %zu x %zu x %zu-byte one",
		                     s->channels, s->height, s->elem, d->channels, d->height, d->elem);
	if (ncols < 1 || ncols > d->width || ncols > s->width)
		return ane_shim_fail(err, "restride: %zu columns (widths %zu and %zu)", ncols, s->width, d->width);
	const size_t n = ncols * d->elem;
	if (ane_shim_tensor_contiguous(d) && ane_shim_tensor_contiguous(s) && ncols == d->width) {
		memcpy(dst, src, d->plane_stride * d->channels);
		return 0;
	}
	for (size_t c = 0; c < d->channels; c++)
		for (size_t y = 0; y < d->height; y++)
			memcpy((char *)dst + c * d->plane_stride + y * d->row_stride,
			       (const char *)src + c * s->plane_stride + y * s->row_stride, n);
	return 0;
}

int
ane_shim_retry_delay_ms(int attempt)
{
	if (attempt < 1 || attempt > ANE_SHIM_LOAD_ATTEMPTS)
		return -1;
	return attempt == 1 ? 0 : 100 << (attempt - 2);
}

const char *
ane_shim_status_name(uint64_t status)
{
	switch (status) {
	case 0x5:
		return "no ANE resources: the machine-wide program pool is busy (transient; another process may hold it)";
	case 0x1d:
		return "program inference error: an op or shape the device runs but refuses (matmul, a surface under 49152 bytes, uneven I/O sizes)";
	case 0xe00002e2:
		return "kIOReturnNotPermitted: a program the daemon did not compile";
	case 0xe00002c7:
		return "kIOReturnUnsupported: an entitlement-gated feature";
	}
	return NULL;
}

int
ane_shim_status_find(const char *text, uint64_t *status)
{
	if (!text)
		return -1;
	for (const char *p = text; (p = strstr(p, "0x")) != NULL; p += 2) {
		// accept "status=0x..", "status 0x..", "status: 0x.." and "(0x..)"
		const char *q = p;
		while (q > text && (q[-1] == ' ' || q[-1] == '=' || q[-1] == ':'))
			q--;
		int ok = (p > text && p[-1] == '(') || (q - text >= 6 && strncasecmp(q - 6, "status", 6) == 0);
		if (!ok || !isxdigit((unsigned char)p[2]))
			continue;
		char *end;
		unsigned long long v = strtoull(p + 2, &end, 16);
		if (end - (p + 2) > 16)
			continue;
		*status = v;
		return 0;
	}
	return -1;
}

int
ane_shim_status_transient(uint64_t status, int known)
{
	if (!known)
		return 1;
	return status != 0xe00002e2 && status != 0xe00002c7 && status != 0x1d;
}

int
ane_shim_error(char *err, const char *what, const char *text)
{
	uint64_t st;
	const char *name = ane_shim_status_find(text, &st) == 0 ? ane_shim_status_name(st) : NULL;
	if (name)
		return ane_shim_fail(err, "%s: %s [status 0x%llx: %s]", what, text ? text : "no error given",
		                     (unsigned long long)st, name);
	return ane_shim_fail(err, "%s: %s", what, text && *text ? text : "no error given");
}

int
ane_shim_weight_key(char *buf, size_t cap, const char *name, char *err)
{
	if (!name || !*name || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return ane_shim_fail(err, "weight file name '%s': a plain file name is needed", name ? name : "(null)");
	int n = snprintf(buf, cap, ANE_SHIM_WEIGHT_PREFIX "%s", name);
	if (n < 0 || (size_t)n >= cap)
		return ane_shim_fail(err, "weight file name '%.64s': too long", name);
	return 0;
}

const char *
ane_shim_io_name(enum ane_shim_io io)
{
	return io == ANE_SHIM_IO_SHARED ? "shared" : "copy";
}
