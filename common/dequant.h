// dequant.h - weight types to float32, bit-exact against ggml.
#ifndef AD_DEQUANT_H
#define AD_DEQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "wtype.h"

// ad_dequant converts n values of type (starting at a block boundary) to
// float32. n must be a multiple of the type's block size. Returns -1 with a
// message naming the type if it is not supported.
int ad_dequant(uint32_t type, const void *src, float *dst, int64_t n, char *err);

#endif
