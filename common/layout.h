// layout.h - the ANE's planar surface layout and moves in and out of it.
//
// The one copy of the layout and of the surface floor: the ane-worker's
// kernels, the cpu-worker's engine and the shared surfaces (surface.h) use
// it alike.
//
// A tensor [1, C, H, W] with element size e lives in a surface as
//   byte(c, y, x) = c * plane_stride + y * row_stride + x * e
//   row_stride    = max(64, W * e)
//   plane_stride  = max(64, row_stride * H)
//   batch_stride  = plane_stride * C,   nbytes = batch_stride * batches
// so a decode tensor (W = 1) puts each channel in its own 64-byte plane and
// fp16 with W a multiple of 32 is plain contiguous [C][W]. These are the
// seed project's formula; on the device the strides the compiled model
// reports win, so ane_layout_from_strides takes them as given. Surfaces are
// allocated at no less than 49152 bytes (some OS versions reject smaller
// ones), one capacity for all inputs of a kernel and one for all outputs.
//
// Activations on the host are row-major [cols][channels] fp32 (one token's
// vector after another). Scatter writes ncols of them into the first ncols
// columns of an fp16 surface (rounding to nearest-even); gather reads them
// back. Columns beyond ncols and the padding are not touched: zero a
// surface once after creating it.
#ifndef ANE_LAYOUT_H
#define ANE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define ANE_MIN_SURFACE 49152
#define ANE_MIN_STRIDE 64

struct ane_layout {
	size_t elem; // bytes per element: 2 (fp16) or 4 (fp32)
	size_t channels, height, width, batches;
	size_t row_stride, plane_stride, batch_stride;
	size_t nbytes;
};

// the seed formula; 0 on success, -1 with err on zero sizes or overflow
int ane_layout_init(struct ane_layout *l, size_t channels, size_t height, size_t width, size_t elem, char *err);
// strides read back from a compiled model (0 batch_stride -> plane * C,
// 0 batches -> 1); -1 with err if they cannot hold the tensor
int ane_layout_from_strides(struct ane_layout *l, size_t channels, size_t height, size_t width, size_t elem,
                            size_t row_stride, size_t plane_stride, size_t batch_stride, size_t batches, char *err);
// the layout is a packed [C][H][W] array
int ane_layout_contiguous(const struct ane_layout *l);
// byte offset of (c, y, x)
static inline size_t
ane_layout_offset(const struct ane_layout *l, size_t c, size_t y, size_t x)
{
	return c * l->plane_stride + y * l->row_stride + x * l->elem;
}
// allocation size shared by n surfaces: max(49152, max nbytes)
size_t ane_surface_capacity(const struct ane_layout *const *ls, int n);

// x: [ncols][ld] fp32 (channel c of column j at x[j * ld + c], ld >= C);
// surf: an fp16 layout with height 1 and ncols <= width
int ane_scatter_f32(const struct ane_layout *l, void *surf, const float *x, size_t ncols, size_t ld, char *err);
int ane_gather_f32(const struct ane_layout *l, const void *surf, float *x, size_t ncols, size_t ld, char *err);
// the same, a wide surface on pool p's threads (planar.h; NULL: the caller)
struct ad_pool;
int ane_gather_f32_pool(struct ad_pool *p, const struct ane_layout *l, const void *surf, float *x, size_t ncols,
                        size_t ld, char *err);

// resnorm.h's step on fp16 planar surfaces (height 1): y gathered from the
// first E channels of ys (NULL: no y), xn scattered into the first E
// channels of xs (NULL: no xn); x_in and x_out are host rows [ncols][E];
// scratch holds 2 * ncols * E floats. y_rows, when not NULL, is y as host
// rows [ncols][E] read in place of ys (the fp16 values a gather would give),
// and xn_rows, when not NULL, takes xn (fp32, as computed) in place of xs:
// between two kernels of one call on the emu, which read and write such
// rows directly, the surfaces' line per channel on both sides is spared.
// -1 with err if a surface is too small.
struct ad_resnorm;
struct ad_surface;
int ane_resnorm_planar(const struct ad_resnorm *r, int ncols, const struct ad_surface *ys, const float *y_rows,
                       const float *x_in, float *x_out, struct ad_surface *xs, float *xn_rows, float *scratch,
                       char *err);

#endif
