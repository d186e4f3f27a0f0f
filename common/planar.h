// planar.h - moves between planar fp16 surfaces and fp32 rows.
//
// A planar surface (the ANE's layout, height 1) holds channel c's columns
// in one plane of fp16 values, planes ps bytes apart, columns contiguous.
// The engines work on rows: x[j * ld + c] is channel c of column j. A
// gather reads channels [0, C) of columns [0, ncols) into rows, a scatter
// writes them back (rounded to nearest even); a scatter writes only the
// first ncols columns of each plane.
//
// The fast versions transpose 8 channels x 8 columns in registers (AVX2
// and F16C, checked at run time) and convert 8 values at once for one
// column; the _ref twins go one value at a time. The bits are the same:
// widening is exact and both round to nearest even (fp16.h).
#ifndef AD_PLANAR_H
#define AD_PLANAR_H

#include <stddef.h>

void ad_planar_gather(const void *base, size_t ps, float *x, size_t C, size_t ld, size_t ncols);
void ad_planar_scatter(void *base, size_t ps, const float *x, size_t C, size_t ld, size_t ncols);

// the same on a thread pool (common/pool.h; NULL: the caller alone), in
// channel ranges, for a surface of at least AD_PLANAR_PAR_CHANNELS
// channels (an LM head's output: one line per channel, 1.4-1.6 ms for
// 151936 of them on one thread) or AD_PLANAR_PAR_VALUES values (channels x
// columns); smaller ones on the caller. ref: the _ref twins
#define AD_PLANAR_PAR_CHANNELS 16384
#define AD_PLANAR_PAR_VALUES 32768
struct ad_pool;
void ad_planar_gather_pool(struct ad_pool *p, const void *base, size_t ps, float *x, size_t C, size_t ld, size_t ncols,
                           int ref);
void ad_planar_scatter_pool(struct ad_pool *p, void *base, size_t ps, const float *x, size_t C, size_t ld, size_t ncols,
                            int ref);

void ad_planar_gather_ref(const void *base, size_t ps, float *x, size_t C, size_t ld, size_t ncols);
void ad_planar_scatter_ref(void *base, size_t ps, const float *x, size_t C, size_t ld, size_t ncols);

#endif
