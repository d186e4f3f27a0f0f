// backend-ane.c - the builder's ane backend over the shim (see backend-ane.h).
// Compiled only when ANEDVD_ANE is on.
#ifdef ANEDVD_ANE

#include "backend-ane.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ane-shim.h"
#include "err.h"
#include "log.h"

_Static_assert(ANE_SHIM_ERRLEN == AD_ERRLEN, "the shim fills err buffers of AD_ERRLEN bytes");
_Static_assert(ANE_SHIM_MIN_SURFACE == ANE_MIN_SURFACE, "one surface floor");

struct ane_dev {
	struct ane_shim_kernel *k;
	struct ane_layout in_l, out_l;      // host (formula) layouts
	struct ane_shim_tensor in_h, out_h; // the same, in the shim's terms
	size_t in_cap, out_cap;
	uint64_t weight_bytes;
	int bound; // both surfaces bound: no copies
	char strides[160];
};

int
ane_dev_init(char *err)
{
	return ane_shim_init(err);
}

const char *
ane_dev_describe(void)
{
	return ane_shim_describe();
}

// the host layout of a device tensor: fp16, height 1, the formula's strides
static int
host_layout(const struct ane_shim_tensor *t, struct ane_layout *l, struct ane_shim_tensor *h, const char *what,
            char *err)
{
	if (t->elem != 2 || t->height != 1 || t->batches != 1)
		return ad_err(err, "%s %s: %zu-byte elements, height %zu, %zu batches (fp16, 1, 1 expected)", what,
		              t->name, t->elem, t->height, t->batches);
	if (ane_layout_init(l, t->channels, 1, t->width, 2, err) ||
	    ane_shim_tensor_formula(h, t->channels, 1, t->width, 2, err))
		return ad_err_prefix(err, "%s %s", what, t->name);
	return 0;
}

struct ane_dev *
ane_dev_compile(const char *mil, const char *wname, const char *wpath, char *err)
{
	struct ane_dev *d = calloc(1, sizeof *d);
	if (!d) {
		ad_err(err, "ane: out of memory");
		return NULL;
	}
	struct ane_shim_file f = {.name = wname, .path = wpath};
	struct stat st;
	if (stat(wpath, &st) == 0)
		d->weight_bytes = (uint64_t)st.st_size;
	d->k = ane_shim_compile(mil, &f, 1, err);
	if (!d->k)
		goto fail;
	if (ane_shim_ninputs(d->k) != 1 || ane_shim_noutputs(d->k) != 1) {
		ad_err(err, "ane: %d inputs and %d outputs (one each expected)", ane_shim_ninputs(d->k),
		       ane_shim_noutputs(d->k));
		goto fail;
	}
	const struct ane_shim_tensor *ti = ane_shim_input(d->k, 0), *to = ane_shim_output(d->k, 0);
	if (host_layout(ti, &d->in_l, &d->in_h, "input", err) || host_layout(to, &d->out_l, &d->out_h, "output", err))
		goto fail;
	if (ti->width != to->width) {
		ad_err(err, "ane: input width %zu, output width %zu", ti->width, to->width);
		goto fail;
	}
	const struct ane_layout *li = &d->in_l, *lo = &d->out_l;
	d->in_cap = ane_surface_capacity(&li, 1);
	d->out_cap = ane_surface_capacity(&lo, 1);
	snprintf(d->strides, sizeof d->strides, "device: in row %zu plane %zu, out row %zu plane %zu; %s path",
	         ti->row_stride, ti->plane_stride, to->row_stride, to->plane_stride,
	         ane_shim_io_name(ane_shim_io_path(d->k)));
	if (ti->row_stride != li->row_stride || ti->plane_stride != li->plane_stride ||
	    to->row_stride != lo->row_stride || to->plane_stride != lo->plane_stride)
		ad_info("ane: strides differ from the formula (in row %zu plane %zu, formula %zu %zu); re-strided on copy",
		        ti->row_stride, ti->plane_stride, li->row_stride, li->plane_stride);
	static int told;
	if (!told++)
		ad_info("ane: kernel I/O by copy into the worker's own IOSurfaces (re-strided to the device's layout)");
	if (ane_shim_load_attempts(d->k) > 1)
		ad_info("ane: loaded after %d attempts", ane_shim_load_attempts(d->k));
	return d;
fail:
	ane_dev_free(d);
	return NULL;
}

void
ane_dev_free(struct ane_dev *d)
{
	if (!d)
		return;
	ane_shim_free(d->k);
	free(d);
}

size_t
ane_dev_width(const struct ane_dev *d)
{
	return d->in_l.width;
}

int
ane_dev_in_channels(const struct ane_dev *d)
{
	return (int)d->in_l.channels;
}

int
ane_dev_out_channels(const struct ane_dev *d)
{
	return (int)d->out_l.channels;
}

const struct ane_layout *
ane_dev_input_layout(const struct ane_dev *d)
{
	return &d->in_l;
}

const struct ane_layout *
ane_dev_output_layout(const struct ane_dev *d)
{
	return &d->out_l;
}

size_t
ane_dev_input_capacity(const struct ane_dev *d)
{
	return d->in_cap;
}

size_t
ane_dev_output_capacity(const struct ane_dev *d)
{
	return d->out_cap;
}

const char *
ane_dev_strides(const struct ane_dev *d)
{
	return d->strides;
}

uint64_t
ane_dev_compile_us(const struct ane_dev *d)
{
	return ane_shim_compile_us(d->k) + ane_shim_load_us(d->k);
}

uint64_t
ane_dev_weight_bytes(const struct ane_dev *d)
{
	return d->weight_bytes;
}

const char *
ane_dev_io_path(const struct ane_dev *d)
{
	return ane_shim_io_name(ane_shim_io_path(d->k));
}

int
ane_dev_eval(struct ane_dev *d, const void *in, void *out, int ncols, char *err)
{
	if (ncols < 1 || (size_t)ncols > d->in_l.width)
		return ad_err(err, "ane: %d columns (width %zu)", ncols, d->in_l.width);
	if (d->bound)
		return ane_shim_eval(d->k, err) ? ad_err_prefix(err, "ane") : 0;
	if (ane_shim_write_input(d->k, 0, in, &d->in_h, (size_t)ncols, err) || ane_shim_eval(d->k, err) ||
	    ane_shim_read_output(d->k, 0, out, &d->out_h, (size_t)ncols, err))
		return ad_err_prefix(err, "ane");
	return 0;
}

int
ane_dev_bind(struct ane_dev *d, void *in_iosurface, void *out_iosurface, char *err)
{
	if (ane_shim_bind(d->k, 0, 0, in_iosurface, err))
		return ad_err_prefix(err, "ane");
	if (ane_shim_bind(d->k, 1, 0, out_iosurface, err)) {
		// both directions or neither: back to the copy path
		char e2[AD_ERRLEN];
		if (ane_shim_unbind(d->k, 0, 0, e2))
			ad_warn("ane: unbinding the input: %s", e2);
		return ad_err_prefix(err, "ane");
	}
	d->bound = ane_shim_io_path(d->k) == ANE_SHIM_IO_SHARED;
	ad_info("ane: kernel I/O on shared IOSurfaces (%s path)", ane_shim_io_name(ane_shim_io_path(d->k)));
	return 0;
}

#else
// without ANEDVD_ANE this file is empty; ISO C wants a declaration
typedef int ane_backend_ane_unused;
#endif
