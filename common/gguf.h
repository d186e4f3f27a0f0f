// gguf.h - GGUF v2/v3 reader (over mmap or a caller's buffer) and writer.
//
// The reader validates everything before handing it out: every count,
// length and offset is checked against the end of the data, tensor sizes
// must match their type and shape, and tensor data must lie inside the file.
// A malformed, truncated or hostile file gives an error, never a crash or an
// out-of-bounds read. GGUF v1 (32-bit counts) is refused by name.
//
// Strings inside a GGUF are not NUL-terminated; they are handed out as
// (pointer, length) views into the file. The reader keeps its own
// NUL-terminated copies of keys and tensor names.
#ifndef AD_GGUF_H
#define AD_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

enum gguf_vtype {
	GGUF_TYPE_UINT8 = 0,
	GGUF_TYPE_INT8 = 1,
	GGUF_TYPE_UINT16 = 2,
	GGUF_TYPE_INT16 = 3,
	GGUF_TYPE_UINT32 = 4,
	GGUF_TYPE_INT32 = 5,
	GGUF_TYPE_FLOAT32 = 6,
	GGUF_TYPE_BOOL = 7,
	GGUF_TYPE_STRING = 8,
	GGUF_TYPE_ARRAY = 9,
	GGUF_TYPE_UINT64 = 10,
	GGUF_TYPE_INT64 = 11,
	GGUF_TYPE_FLOAT64 = 12,
	GGUF_TYPE_COUNT,
};

// bytes of one value of a scalar type; 0 for a string, an array or an
// unknown type (the reader's and the writer's one table)
size_t gguf_vtype_size(enum gguf_vtype t);

struct gguf_str {
	const char *ptr; // into the file; not NUL-terminated
	uint64_t len;
};

// An array value. Elements of a scalar type lie packed at data (unaligned,
// little-endian); elements of type STRING or ARRAY are reached through
// gguf_arr_str / gguf_arr_sub.
struct gguf_arr {
	enum gguf_vtype type;
	uint64_t n;
	const uint8_t *data; // first element in the file
	const void *priv;    // reader's index for nested / string elements
};

struct gguf_tensor {
	const char *name; // NUL-terminated copy
	uint32_t n_dims;
	int64_t ne[GGUF_MAX_DIMS]; // ne[0] is the fastest dimension; unused dims are 1
	uint32_t type;             // enum ad_type (wtype.h)
	uint64_t offset;           // relative to the start of the data section
	const void *data;          // into the mapping
	size_t nbytes;
};

struct gguf; // opaque

// Open and validate. gguf_open maps the file read-only; gguf_open_memory
// reads a caller-owned buffer that must outlive the handle (no copy).
struct gguf *gguf_open(const char *path, char *err);
struct gguf *gguf_open_memory(const void *buf, size_t n, char *err);
void gguf_close(struct gguf *g); // NULL is fine

uint32_t gguf_version(const struct gguf *g);
size_t gguf_alignment(const struct gguf *g);
size_t gguf_file_size(const struct gguf *g);
// the file's read-only private mapping (NULL for gguf_open_memory) and where
// the tensor data starts: the header (metadata and tensor infos) is before it
const void *gguf_file_map(const struct gguf *g, size_t *len, uint64_t *data_off);

// --- metadata --------------------------------------------------------------
int64_t gguf_n_kv(const struct gguf *g);
const char *gguf_kv_key(const struct gguf *g, int64_t i);
enum gguf_vtype gguf_kv_type(const struct gguf *g, int64_t i);
int64_t gguf_find_key(const struct gguf *g, const char *key); // -1 if absent

// Typed getters by key. They return 0 on success, -1 if the key is absent or
// its value cannot be represented in the requested type (integers of any
// width convert when the value fits; float32/float64 convert to each other;
// bool is not an integer). Nothing is written on failure.
int gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out);
int gguf_get_i64(const struct gguf *g, const char *key, int64_t *out);
int gguf_get_f32(const struct gguf *g, const char *key, float *out);
int gguf_get_bool(const struct gguf *g, const char *key, int *out);
int gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out);
int gguf_get_arr(const struct gguf *g, const char *key, struct gguf_arr *out);

// Same, by index.
int gguf_kv_u32(const struct gguf *g, int64_t i, uint32_t *out);
int gguf_kv_i64(const struct gguf *g, int64_t i, int64_t *out);
int gguf_kv_f32(const struct gguf *g, int64_t i, float *out);
int gguf_kv_str(const struct gguf *g, int64_t i, struct gguf_str *out);
int gguf_kv_arr(const struct gguf *g, int64_t i, struct gguf_arr *out);

// Array elements (bounds-checked; return -1 when i >= a->n or the element
// type does not convert).
int gguf_arr_i64(const struct gguf_arr *a, uint64_t i, int64_t *out);
int gguf_arr_f32(const struct gguf_arr *a, uint64_t i, float *out);
int gguf_arr_str(const struct gguf_arr *a, uint64_t i, struct gguf_str *out);
int gguf_arr_sub(const struct gguf_arr *a, uint64_t i, struct gguf_arr *out);

// gguf_str_eq compares a view with a C string.
int gguf_str_eq(struct gguf_str s, const char *cstr);

// --- tensors ---------------------------------------------------------------
int64_t gguf_n_tensors(const struct gguf *g);
const struct gguf_tensor *gguf_tensor_at(const struct gguf *g, int64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf *g, const char *name);

// --- writer ----------------------------------------------------------------
// Builds a GGUF v3 file in memory and writes it out. Used by the tests and
// benchmarks to make models of any architecture, shape and weight type.
// Values are copied at the time of the call.
struct gguf_writer;

struct gguf_writer *gguf_writer_new(void);
void gguf_writer_free(struct gguf_writer *w);
void gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment); // also writes general.alignment

void gguf_writer_u32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_i32(struct gguf_writer *w, const char *key, int32_t v);
void gguf_writer_u64(struct gguf_writer *w, const char *key, uint64_t v);
void gguf_writer_f32(struct gguf_writer *w, const char *key, float v);
void gguf_writer_bool(struct gguf_writer *w, const char *key, int v);
void gguf_writer_str(struct gguf_writer *w, const char *key, const char *v);
// Array of scalars: type is the element type, data holds n packed elements.
void gguf_writer_arr(struct gguf_writer *w, const char *key, enum gguf_vtype type, const void *data, uint64_t n);
void gguf_writer_arr_str(struct gguf_writer *w, const char *key, const char *const *v, uint64_t n);

// Add a tensor. data holds the bytes of the tensor in its type (nbytes must
// match type and shape); ne has n_dims entries, fastest first.
int gguf_writer_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                       const void *data, size_t nbytes, char *err);

// Serialise. gguf_writer_save writes a file; gguf_writer_bytes returns a
// malloc'd buffer the caller frees.
int gguf_writer_save(struct gguf_writer *w, const char *path, char *err);
void *gguf_writer_bytes(struct gguf_writer *w, size_t *n);

// A scalar of any type (type < GGUF_TYPE_STRING or >= GGUF_TYPE_UINT64);
// v points at one value in host representation (bool: one byte).
void gguf_writer_val(struct gguf_writer *w, const char *key, enum gguf_vtype type, const void *v);

// Arrays of any element type, nested as deep as wanted: build a gguf_warr
// and hand it over. push adds a scalar (host representation), push_str a
// string, push_arr a sub-array (consumed). A push whose kind does not match
// the element type poisons the writer: save then fails.
struct gguf_warr;
struct gguf_warr *gguf_warr_new(enum gguf_vtype type);
void gguf_warr_free(struct gguf_warr *a);
void gguf_warr_push(struct gguf_warr *a, const void *v);
void gguf_warr_push_str(struct gguf_warr *a, const char *s);
void gguf_warr_push_arr(struct gguf_warr *a, struct gguf_warr *sub);
void gguf_writer_warr(struct gguf_writer *w, const char *key, struct gguf_warr *a); // consumes a

#endif
