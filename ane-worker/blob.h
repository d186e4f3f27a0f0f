// blob.h - the ANE weight-blob file: writer and validating reader.
//
// Layout (little-endian):
//   file header, 64 bytes: [0] = 0x01, [4] = 0x02, the rest zero
//   per tensor k, packed with no padding, a 64-byte chunk header at H_k:
//     [0..3] EF BE AD DE (0xDEADBEEF), [4] = the element type: 0x01 fp16,
//     0x04 int8, 0x0b uint4, [8..11] u32 payload bytes, [16..19] u32
//     absolute file offset of the payload (= H_k + 64), [24] the bits of
//     padding in the last byte (uint4 of an odd count: 4), the rest zero
//   then the payload: fp16, int8 or uint4 (two a byte, the low nibble
//   first), row-major [out][in]
//   H_0 = 64, H_{k+1} = H_k + 64 + bytes_k
// The MIL BLOBFILE offset of tensor k is H_k, the chunk header, i.e. the
// payload offset minus 64. Every chunk must carry its own absolute payload
// offset: a constant one (128 everywhere) makes every chunk after the first
// read the wrong bytes with no error on the device.
//
// Byte 4 of a chunk header, which the seed called a version and always set
// to 1, is the element type of the chunk in CoreML's MIL blob format
// (MILBlob BlobDataType: Float16 = 1, Float32 = 2, UInt8 = 3, Int8 = 4);
// the seed's fp16 chunks are that format's Float16 chunks. So int8 chunks
// (the quantized_data of constexpr_affine_dequantize, mil.h) are written
// with 0x04 there and otherwise exactly like fp16 ones, size and absolute
// data offset included: those two fields are what makes a file of several
// chunks readable (the seed's multi-chunk bug). The one other int8 layout
// on record (a bench that sets byte 10 to 0x08 and leaves size and data
// offset zero) puts its marker inside this format's size field, and was
// only ever used with a single chunk; which of the two the device takes is
// to be probed on it.
//
// The writer streams: a chunk is opened with its element count (the header
// is written at once), filled from any number of caller buffers (fp16 as is,
// fp32 rounded to nearest-even), and closed; nothing is held in memory but a
// small conversion buffer. The reader walks the chunk chain of a whole file
// image and refuses anything inconsistent.
#ifndef ANE_BLOB_H
#define ANE_BLOB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define ANE_BLOB_HEADER 64
#define ANE_BLOB_CHUNK_HEADER 64
#define ANE_BLOB_MAGIC 0xDEADBEEFu
#define ANE_BLOB_VERSION 1 // = ANE_BLOB_DT_FP16: what every fp16 chunk carries
// element types (byte 4 of a chunk header)
#define ANE_BLOB_DT_FP16 1
#define ANE_BLOB_DT_INT8 4
#define ANE_BLOB_DT_UINT4 11 // two a byte, element 0 in the low nibble (MILBlob's UInt4)
// data_off is a u32: payloads must start below 4 GiB
#define ANE_BLOB_MAX_FILE ((uint64_t)UINT32_MAX)

// a source of weights: n values of type AD_TYPE_F16 or AD_TYPE_F32
struct ane_wsrc {
	const void *data;
	int type;
	size_t n;
};

// a blob in memory, the emu's input in place of a file (ane_blob_open_mem):
// len bytes at data, cap mapped; kept from one kernel to the next, so its
// pages are faulted in once, not once a kernel
struct ane_blob_mem {
	uint8_t *data;
	size_t len, cap;
};

struct ane_blob_writer {
	FILE *f;                  // the file, or NULL when writing to mem
	struct ane_blob_mem *mem; // or the memory
	uint64_t pos;             // bytes written so far
	uint64_t chunk_end;       // where the open chunk's payload ends (0: none open)
	int dtype;                // of the open chunk
	int nchunks;
	int failed;
	char path[4096];
};

// create path and write the file header
int ane_blob_open(struct ane_blob_writer *w, const char *path, char *err);
// the same blob written to m instead (m->len set on close), room for hint
// bytes reserved at once (it grows past them if need be)
int ane_blob_open_mem(struct ane_blob_writer *w, struct ane_blob_mem *m, size_t hint, char *err);
// unmaps m's memory; m is then empty
void ane_blob_mem_free(struct ane_blob_mem *m);
// start a chunk of n fp16 values; *mil_off gets its BLOBFILE offset
int ane_blob_begin(struct ane_blob_writer *w, size_t n, uint64_t *mil_off, char *err);
// start a chunk of n int8 values (element type 0x04)
int ane_blob_begin_i8(struct ane_blob_writer *w, size_t n, uint64_t *mil_off, char *err);
// start a chunk of n uint4 values (element type 0x0b): (n + 1) / 2 bytes,
// the header's bits of padding ([24..31], u64) 4 when n is odd, as MILBlob
int ane_blob_begin_u4(struct ane_blob_writer *w, size_t n, uint64_t *mil_off, char *err);
// append bytes of packed uint4 values to the open chunk (a uint4 one)
int ane_blob_put_u4(struct ane_blob_writer *w, const uint8_t *packed, size_t nbytes, char *err);
// append values to the open chunk (an fp16 one)
int ane_blob_put(struct ane_blob_writer *w, const struct ane_wsrc *src, char *err);
// append n int8 values to the open chunk (an int8 one)
int ane_blob_put_i8(struct ane_blob_writer *w, const int8_t *q, size_t n, char *err);
// finish the open chunk; fails if it did not get exactly n values
int ane_blob_end(struct ane_blob_writer *w, char *err);
// one whole chunk from one buffer
int ane_blob_add(struct ane_blob_writer *w, const struct ane_wsrc *src, uint64_t *mil_off, char *err);
// flush and close; on any earlier failure the file is removed (or the
// memory's length left 0) and -1 returned
int ane_blob_close(struct ane_blob_writer *w, char *err);
// close and remove after an error of the caller
void ane_blob_abort(struct ane_blob_writer *w);

// BLOBFILE offsets of chunks with the given payload sizes in bytes;
// returns the file size
uint64_t ane_blob_offsets(const uint64_t *bytes, int n, uint64_t *off);

// kernel blobs (see mil.h): a projection chunk whose rows are the
// concatenation of the parts (each rows x cin, e.g. Wq, Wk, Wv), and the
// fused FFN's three chunks gate [inter][hidden], up, down [hidden][inter]
int ane_blob_write_proj(const char *path, const struct ane_wsrc *parts, int nparts, char *err);
int ane_blob_write_ffn(const char *path, const struct ane_wsrc *gate, const struct ane_wsrc *up,
                       const struct ane_wsrc *down, char *err);

// reader: one validated chunk
struct ane_blob_chunk {
	uint64_t header; // offset of the chunk header (the BLOBFILE offset)
	uint64_t data;   // absolute payload offset
	uint64_t bytes;  // payload size
	int dtype;       // ANE_BLOB_DT_FP16, ANE_BLOB_DT_INT8 or ANE_BLOB_DT_UINT4
	unsigned pad;    // bits of padding at the end (uint4: 0 or 4)
};

// walk the chunk chain of a file image; fills up to max chunks into out (may
// be NULL) and returns how many there are, or -1 with err if the image is
// not a well-formed blob (bad header, magic, element type, data_off, an odd
// fp16 payload, truncation)
int ane_blob_scan(const uint8_t *img, size_t len, struct ane_blob_chunk *out, int max, char *err);

#endif
