// safetensors.h - read (and, for tests, write) .safetensors files and the
// sharded sets of a Hugging Face model directory.
//
// A file is an 8-byte little-endian header length, a JSON object
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...}
// (with an optional "__metadata__" entry, ignored) and the data buffer.
// st_open maps the file read-only and validates the whole header before
// handing anything out: the header length is bounded and lies inside the
// file, every entry is well-formed, end - begin matches dtype and shape,
// and the tensors tile the data buffer exactly (no overlap, no hole, no
// byte outside the file). A malformed or truncated file gives an error
// naming the file and the entry, never a crash.
//
// Tensors of every dtype the format defines are indexed so that offsets can
// be checked, but only F32, F16 and BF16 carry an ad_type; for the others
// type is AD_TYPE_COUNT and st_tensor_check names the dtype.
//
// Shapes are kept as the file stores them, slowest dimension first (a
// PyTorch [out, in] weight is shape {out, in}); data points into the
// mapping and has no alignment guarantee.
#ifndef AD_SAFETENSORS_H
#define AD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define ST_MAX_DIMS 8
#define ST_MAX_HEADER (100u << 20) // the reference implementation's bound

struct st_tensor {
	char *name;
	char dtype[12]; // as in the file: "F32", "BF16", "I64", ...
	uint32_t type;  // AD_TYPE_F32/F16/BF16, or AD_TYPE_COUNT for other dtypes
	uint32_t n_dims;
	int64_t shape[ST_MAX_DIMS]; // slowest first
	int64_t nelem;
	const void *data;
	size_t nbytes;
	size_t offset; // of data in the file
	int file;      // index of the file in its set (0 for a lone file)
};

struct st_file {
	char *path;
	const uint8_t *base; // the whole file
	size_t size;
	int mapped;                // base is an mmap that st_close unmaps
	struct st_tensor *tensors; // sorted by name
	int64_t n_tensors;
};

// st_open maps and validates path; st_parse validates a caller's buffer
// (which must outlive f). Both leave f zeroed on failure.
int st_open(struct st_file *f, const char *path, char *err);
int st_parse(struct st_file *f, const void *buf, size_t size, const char *label, char *err);
void st_close(struct st_file *f); // safe on a zeroed struct
const struct st_tensor *st_find(const struct st_file *f, const char *name);

// st_tensor_check fails unless t has one of the supported dtypes.
int st_tensor_check(const struct st_tensor *t, char *err);

// The shards of an HF directory: the files named by
// model.safetensors.index.json's weight_map (each once), or else every
// *.safetensors in the directory in name order. With an index, every tensor
// it lists must be in the shard it names. A tensor name may occur once only.
struct st_set {
	struct st_file *files;
	int n_files;
	int64_t n_tensors;
	int has_index;
};

int st_set_open(struct st_set *s, const char *dir, char *err);
void st_set_close(struct st_set *s); // safe on a zeroed struct
const struct st_tensor *st_set_find(const struct st_set *s, const char *name);

// --- writing (tests and tools) ----------------------------------------------
struct st_wtensor {
	const char *name;
	uint32_t type; // AD_TYPE_F32, F16 or BF16
	uint32_t n_dims;
	int64_t shape[ST_MAX_DIMS]; // slowest first
	const void *data;           // nelem values of type
};

// st_write writes the tensors in the order given, with an optional
// "__metadata__" {"format": "pt"}.
int st_write(const char *path, const struct st_wtensor *t, int n, char *err);

// st_write_index writes model.safetensors.index.json: tensor name i lives in
// file files[i] (a file name, not a path).
int st_write_index(const char *path, const char *const *names, const char *const *files, int n, uint64_t total_size,
                   char *err);

#endif
