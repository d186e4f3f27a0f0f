#include "layout.h"

#include <string.h>

#include "err.h"
#include "fp16.h"
#include "planar.h"
#include "resnorm.h"
#include "surface.h"

static size_t
max_sz(size_t a, size_t b)
{
	return a > b ? a : b;
}

int
ane_layout_from_strides(struct ane_layout *l, size_t channels, size_t height, size_t width, size_t elem,
                        size_t row_stride, size_t plane_stride, size_t batch_stride, size_t batches, char *err)
{
	memset(l, 0, sizeof *l);
	if (!channels || !height || !width)
		return ad_err(err, "layout: zero size [1, %zu, %zu, %zu]", channels, height, width);
	if (elem != 2 && elem != 4)
		return ad_err(err, "layout: element size %zu is neither 2 nor 4", elem);
	if (!batch_stride)
		batch_stride = plane_stride * channels;
	if (!batches)
		batches = 1;
	// the tensor must fit its own strides, and nothing may overflow
	if (width > SIZE_MAX / elem || row_stride < width * elem || height > SIZE_MAX / row_stride ||
	    plane_stride < row_stride * height || channels > SIZE_MAX / plane_stride ||
	    batch_stride < plane_stride * channels || batches > SIZE_MAX / batch_stride)
		return ad_err(
			err, "layout: strides row %zu plane %zu batch %zu cannot hold [%zu, %zu, %zu, %zu] x %zu bytes",
			row_stride, plane_stride, batch_stride, batches, channels, height, width, elem);
	*l = (struct ane_layout){
		.elem = elem,
		.channels = channels,
		.height = height,
		.width = width,
		.batches = batches,
		.row_stride = row_stride,
		.plane_stride = plane_stride,
		.batch_stride = batch_stride,
		.nbytes = batch_stride * batches,
	};
	return 0;
}

int
ane_layout_init(struct ane_layout *l, size_t channels, size_t height, size_t width, size_t elem, char *err)
{
	if (!channels || !height || !width || (elem != 2 && elem != 4) || width > (SIZE_MAX >> 8) / elem ||
	    height > (SIZE_MAX >> 8) / (width * elem + 64))
		return ad_err(err, "layout: bad tensor [1, %zu, %zu, %zu] x %zu bytes", channels, height, width, elem);
	size_t row = max_sz(ANE_MIN_STRIDE, width * elem);
	size_t plane = max_sz(ANE_MIN_STRIDE, row * height);
	if (channels > SIZE_MAX / plane)
		return ad_err(err, "layout: %zu channels overflow", channels);
	return ane_layout_from_strides(l, channels, height, width, elem, row, plane, plane * channels, 1, err);
}

int
ane_layout_contiguous(const struct ane_layout *l)
{
	return l->row_stride == l->width * l->elem && l->plane_stride == l->row_stride * l->height &&
	       l->batch_stride == l->plane_stride * l->channels;
}

size_t
ane_surface_capacity(const struct ane_layout *const *ls, int n)
{
	size_t cap = ANE_MIN_SURFACE;
	for (int i = 0; i < n; i++)
		cap = max_sz(cap, ls[i]->nbytes);
	return cap;
}

static int
check_io(const struct ane_layout *l, size_t ncols, size_t ld, char *err)
{
	if (l->elem != 2 || l->height != 1)
		return ad_err(err, "layout: scatter/gather needs fp16 with height 1 (have %zu-byte, height %zu)",
		              l->elem, l->height);
	if (ncols > l->width)
		return ad_err(err, "layout: %zu columns, the surface holds %zu", ncols, l->width);
	if (ld < l->channels)
		return ad_err(err, "layout: row length %zu < %zu channels", ld, l->channels);
	return 0;
}

int
ane_scatter_f32(const struct ane_layout *l, void *surf, const float *x, size_t ncols, size_t ld, char *err)
{
	if (check_io(l, ncols, ld, err) < 0)
		return -1;
	ad_planar_scatter(surf, l->plane_stride, x, l->channels, ld, ncols);
	return 0;
}

int
ane_gather_f32(const struct ane_layout *l, const void *surf, float *x, size_t ncols, size_t ld, char *err)
{
	return ane_gather_f32_pool(NULL, l, surf, x, ncols, ld, err);
}

int
ane_gather_f32_pool(struct ad_pool *p, const struct ane_layout *l, const void *surf, float *x, size_t ncols, size_t ld,
                    char *err)
{
	if (check_io(l, ncols, ld, err) < 0)
		return -1;
	ad_planar_gather_pool(p, surf, l->plane_stride, x, l->channels, ld, ncols, 0);
	return 0;
}

// the first E channels of surface s, as a layout of height 1
static int
surf_layout(struct ane_layout *l, const struct ad_surface *s, int E, int ncols, char *err)
{
	if (!s->base || s->channels < (size_t)E || s->width < (size_t)ncols)
		return ad_err(err, "resnorm: surface %s is %zu x %zu, the step needs %d x %d", s->id, s->channels,
		              s->width, E, ncols);
	return ane_layout_from_strides(l, (size_t)E, 1, s->width, 2, s->row_stride, s->plane_stride, 0, 1, err);
}

int
ane_resnorm_planar(const struct ad_resnorm *r, int ncols, const struct ad_surface *ys, const float *y_rows,
                   const float *x_in, float *x_out, struct ad_surface *xs, float *xn_rows, float *scratch, char *err)
{
	struct ane_layout ly, lx;
	const float *y = y_rows;
	float *xn = xn_rows ? xn_rows : scratch + (size_t)ncols * r->E;
	if (y_rows)
		ys = NULL;
	if (xn_rows)
		xs = NULL;
	if ((ys && surf_layout(&ly, ys, r->E, ncols, err)) || (xs && surf_layout(&lx, xs, r->E, ncols, err)))
		return -1;
	if (ys) {
		if (ane_gather_f32(&ly, ys->base, scratch, (size_t)ncols, (size_t)r->E, err))
			return -1;
		y = scratch;
	}
	ad_resnorm(r, ncols, y, (size_t)r->E, x_in, x_out, xs || xn_rows ? xn : NULL, (size_t)r->E);
	if (xs && r->w && ane_scatter_f32(&lx, xs->base, xn, (size_t)ncols, (size_t)r->E, err))
		return -1;
	return 0;
}
