#include "wtype.h"

struct type_info {
	const char *name;
	int64_t block;
	size_t bytes;
	int supported;
};

// Block geometry as ggml_blck_size / ggml_type_size report it.
static const struct type_info types[AD_TYPE_COUNT] = {
	[AD_TYPE_F32] = {"F32", 1, 4, 1},
	[AD_TYPE_F16] = {"F16", 1, 2, 1},
	[AD_TYPE_Q4_0] = {"Q4_0", 32, 18, 1},
	[AD_TYPE_Q4_1] = {"Q4_1", 32, 20, 1},
	[4] = {"Q4_2 (removed from ggml)", 0, 0, 0},
	[5] = {"Q4_3 (removed from ggml)", 0, 0, 0},
	[AD_TYPE_Q5_0] = {"Q5_0", 32, 22, 1},
	[AD_TYPE_Q5_1] = {"Q5_1", 32, 24, 1},
	[AD_TYPE_Q8_0] = {"Q8_0", 32, 34, 1},
	[AD_TYPE_Q8_1] = {"Q8_1", 32, 36, 1},
	[AD_TYPE_Q2_K] = {"Q2_K", 256, 84, 1},
	[AD_TYPE_Q3_K] = {"Q3_K", 256, 110, 1},
	[AD_TYPE_Q4_K] = {"Q4_K", 256, 144, 1},
	[AD_TYPE_Q5_K] = {"Q5_K", 256, 176, 1},
	[AD_TYPE_Q6_K] = {"Q6_K", 256, 210, 1},
	[AD_TYPE_Q8_K] = {"Q8_K", 256, 292, 1},
	[16] = {"IQ2_XXS", 0, 0, 0},
	[17] = {"IQ2_XS", 0, 0, 0},
	[18] = {"IQ3_XXS", 0, 0, 0},
	[19] = {"IQ1_S", 0, 0, 0},
	[AD_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, 1},
	[21] = {"IQ3_S", 0, 0, 0},
	[22] = {"IQ2_S", 0, 0, 0},
	[AD_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, 1},
	[AD_TYPE_I8] = {"I8", 1, 1, 0},
	[AD_TYPE_I16] = {"I16", 1, 2, 0},
	[AD_TYPE_I32] = {"I32", 1, 4, 0},
	[AD_TYPE_I64] = {"I64", 1, 8, 0},
	[AD_TYPE_F64] = {"F64", 1, 8, 0},
	[29] = {"IQ1_M", 0, 0, 0},
	[AD_TYPE_BF16] = {"BF16", 1, 2, 1},
	[34] = {"TQ1_0", 0, 0, 0},
	[35] = {"TQ2_0", 0, 0, 0},
	[AD_TYPE_MXFP4] = {"MXFP4", 32, 17, 1},
	[40] = {"NVFP4", 0, 0, 0},
	[41] = {"Q1_0", 0, 0, 0},
	[42] = {"Q2_0", 0, 0, 0},
};

static const struct type_info *
info(uint32_t type)
{
	if (type >= AD_TYPE_COUNT || !types[type].name)
		return NULL;
	return &types[type];
}

const char *
ad_type_name(uint32_t type)
{
	const struct type_info *t = info(type);
	return t ? t->name : NULL;
}

int64_t
ad_type_block_size(uint32_t type)
{
	const struct type_info *t = info(type);
	return t ? t->block : 0;
}

size_t
ad_type_block_bytes(uint32_t type)
{
	const struct type_info *t = info(type);
	return t ? t->bytes : 0;
}

int
ad_type_supported(uint32_t type)
{
	const struct type_info *t = info(type);
	return t ? t->supported : 0;
}

int
ad_type_row_bytes(uint32_t type, int64_t n, size_t *out)
{
	const struct type_info *t = info(type);
	if (!t || t->block == 0 || n < 0 || n % t->block != 0)
		return -1;
	uint64_t blocks = (uint64_t)(n / t->block);
	if (blocks != 0 && t->bytes > SIZE_MAX / blocks)
		return -1;
	*out = (size_t)(blocks * t->bytes);
	return 0;
}
