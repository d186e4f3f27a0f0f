// wtype.h - the ggml weight types: ids as stored in GGUF, block geometry.
//
// The numeric values are ggml's (enum ggml_type) because GGUF stores them.
// A type is "supported" when dequant.c can turn it into float32.
#ifndef AD_WTYPE_H
#define AD_WTYPE_H

#include <stddef.h>
#include <stdint.h>

enum ad_type {
	AD_TYPE_F32 = 0,
	AD_TYPE_F16 = 1,
	AD_TYPE_Q4_0 = 2,
	AD_TYPE_Q4_1 = 3,
	AD_TYPE_Q5_0 = 6,
	AD_TYPE_Q5_1 = 7,
	AD_TYPE_Q8_0 = 8,
	AD_TYPE_Q8_1 = 9,
	AD_TYPE_Q2_K = 10,
	AD_TYPE_Q3_K = 11,
	AD_TYPE_Q4_K = 12,
	AD_TYPE_Q5_K = 13,
	AD_TYPE_Q6_K = 14,
	AD_TYPE_Q8_K = 15,
	AD_TYPE_IQ4_NL = 20,
	AD_TYPE_IQ4_XS = 23,
	AD_TYPE_I8 = 24,
	AD_TYPE_I16 = 25,
	AD_TYPE_I32 = 26,
	AD_TYPE_I64 = 27,
	AD_TYPE_F64 = 28,
	AD_TYPE_BF16 = 30,
	AD_TYPE_MXFP4 = 39,
	AD_TYPE_COUNT = 43, // upper bound of ids this table knows
};

// ad_type_name returns ggml's name ("Q4_K") or NULL for an id it does not know.
const char *ad_type_name(uint32_t type);

// Values per block and bytes per block; 0 for an unknown id. Types that ggml
// defines but this project cannot dequantise (the IQ types but IQ4_NL and
// IQ4_XS, TQ*, NVFP4, Q1_0, Q2_0) are known by name so errors can say which
// type it was, but have block size 0.
int64_t ad_type_block_size(uint32_t type);
size_t ad_type_block_bytes(uint32_t type);

// ad_type_supported is true when dequantisation to float32 is implemented.
int ad_type_supported(uint32_t type);

// ad_type_row_bytes computes the bytes of n consecutive values of type.
// Returns -1 (and leaves *out alone) if n is not a multiple of the block
// size, the type is unknown, or the product overflows.
int ad_type_row_bytes(uint32_t type, int64_t n, size_t *out);

#endif
