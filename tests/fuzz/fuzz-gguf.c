// fuzz-gguf.c - libFuzzer target for the GGUF reader: open the input as a
// buffer and touch everything the reader hands out, so that any view that
// points outside the input shows up under the address sanitizer.
#include "gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

// must hold: the reader says yes or gives a one-line reason
#define MUST(cond)                                                                                                     \
	do {                                                                                                           \
		if (!(cond))                                                                                           \
			abort();                                                                                       \
	} while (0)

static void
touch(const void *p, uint64_t n)
{
	const uint8_t *b = p;
	uint64_t s = 0;
	for (uint64_t i = 0; i < n; i++)
		s += b[i];
	sink += s;
}

static void
walk_arr(const struct gguf_arr *a, int depth)
{
	MUST(depth < 64);
	for (uint64_t i = 0; i < a->n; i++) {
		int64_t v;
		float f;
		struct gguf_str s;
		struct gguf_arr sub;
		switch (a->type) {
		case GGUF_TYPE_STRING:
			MUST(gguf_arr_str(a, i, &s) == 0);
			touch(s.ptr, s.len);
			break;
		case GGUF_TYPE_ARRAY:
			MUST(gguf_arr_sub(a, i, &sub) == 0);
			walk_arr(&sub, depth + 1);
			break;
		case GGUF_TYPE_FLOAT32:
		case GGUF_TYPE_FLOAT64:
			if (gguf_arr_f32(a, i, &f) == 0)
				sink += (uint64_t)(f == f);
			break;
		case GGUF_TYPE_BOOL:
			MUST(gguf_arr_i64(a, i, &v) == -1);
			touch(a->data + i, 1);
			break;
		default:
			if (gguf_arr_i64(a, i, &v) == 0)
				sink += (uint64_t)v;
			break;
		}
	}
	int64_t v;
	struct gguf_str s;
	struct gguf_arr sub;
	MUST(gguf_arr_i64(a, a->n, &v) == -1);
	MUST(gguf_arr_str(a, a->n, &s) == -1);
	MUST(gguf_arr_sub(a, a->n, &sub) == -1);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[AD_ERRLEN];
	err[0] = 0;
	struct gguf *g = gguf_open_memory(data, size, err);
	if (!g) {
		MUST(err[0] != 0 && strchr(err, '\n') == NULL);
		return 0;
	}
	MUST(gguf_version(g) == 2 || gguf_version(g) == 3);
	size_t align = gguf_alignment(g);
	MUST(align && (align & (align - 1)) == 0);
	for (int64_t i = 0; i < gguf_n_kv(g); i++) {
		const char *key = gguf_kv_key(g, i);
		MUST(key && gguf_find_key(g, key) == i);
		enum gguf_vtype t = gguf_kv_type(g, i);
		MUST(t < GGUF_TYPE_COUNT);
		uint32_t u;
		int64_t v;
		float f;
		int b;
		struct gguf_str s;
		struct gguf_arr a;
		if (gguf_kv_u32(g, i, &u) == 0)
			sink += u;
		if (gguf_kv_i64(g, i, &v) == 0)
			sink += (uint64_t)v;
		if (gguf_kv_f32(g, i, &f) == 0)
			sink += (uint64_t)(f == f);
		if (gguf_get_bool(g, key, &b) == 0)
			sink += (uint64_t)b;
		if (gguf_kv_str(g, i, &s) == 0) {
			MUST(t == GGUF_TYPE_STRING);
			touch(s.ptr, s.len);
		}
		if (gguf_kv_arr(g, i, &a) == 0) {
			MUST(t == GGUF_TYPE_ARRAY);
			walk_arr(&a, 0);
		}
	}
	for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
		const struct gguf_tensor *t = gguf_tensor_at(g, i);
		MUST(t && gguf_find_tensor(g, t->name) == t);
		MUST(t->n_dims <= GGUF_MAX_DIMS && t->nbytes > 0);
		const uint8_t *p = t->data;
		MUST(p >= data && p + t->nbytes <= data + size);
		sink += p[0] + p[t->nbytes - 1];
	}
	gguf_close(g);
	return 0;
}
