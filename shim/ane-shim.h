// ane-shim.h - the Apple Neural Engine through Apple's private framework,
// as a plain C API.
//
// ane-shim.m is the only Objective-C and the only private-API code of the
// project. It loads AppleNeuralEngine.framework with dlopen at its
// absolute path (the Mach-O lives in the dyld shared cache only; a bare
// framework path fails), resolves _ANEInMemoryModelDescriptor,
// _ANEInMemoryModel, _ANERequest and _ANEIOSurfaceObject, and drives the
// in-memory model path in the order known to work with no entitlement:
//   descriptor(MIL as NSData, weight dictionary, nil options)
//   -> model -> hexStringIdentifier -> $NSTemporaryDirectory/<hex>/
//      {model.mil, weights/<name>} -> compile (QoS 21, not retried)
//   -> load (QoS 21, 7 attempts, 100..3200 ms apart) -> delete the dir
//   -> modelAttributes: NetworkStatusList[0].LiveInputList/LiveOutputList
//   -> one IOSurface per tensor, max(49152, largest nbytes) bytes per
//      direction -> one _ANERequest reused for every eval.
// The weight dictionary maps "@model_path/weights/<name>" to {offset: 0,
// data: SHA-256 of the file}: the compiler reads the files, but the
// dictionary feeds the model's identity, and equal MIL text with equal
// dictionary data could reuse another weight set's compiled program.
//
// Strides are those the compiled model reports, never the formula: a
// caller hands its buffers with its own layout and the shim re-strides
// into and out of the device surfaces (ane_shim_write_input /
// ane_shim_read_output). That copy is the "copy" I/O path. Binding a
// caller's IOSurface directly (ane_shim_bind) is the "shared" path; that
// the ANE accepts a surface another process created is unverified, so a
// bind is checked with one eval and undone on failure, and
// ane_shim_io_path says which path a kernel uses.
//
// The ane_shim_* functions without a kernel argument below the "pure C"
// line need no device and build everywhere (ane-shim-util.c); the rest
// exist only where ANEDVD_ANE is on. Errors: functions return 0 / -1 (or
// NULL) and fill err (ANE_SHIM_ERRLEN bytes, may be NULL) with one line,
// device status codes decoded where known.
//
// A kernel is used by one thread at a time. A process gets about 119
// compiles before the framework becomes unreliable; the caller counts.
#ifndef ANE_SHIM_H
#define ANE_SHIM_H

#include <stddef.h>
#include <stdint.h>

#define ANE_SHIM_ERRLEN 512
#define ANE_SHIM_FRAMEWORK "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine"
#define ANE_SHIM_QOS 21            // every known user passes 21 (= QOS_CLASS_DEFAULT)
#define ANE_SHIM_MIN_SURFACE 49152 // some OS versions reject smaller surfaces (0x1d)
#define ANE_SHIM_LOAD_ATTEMPTS 7
#define ANE_SHIM_MAX_IO 16
#define ANE_SHIM_WEIGHT_PREFIX "@model_path/weights/"

// one tensor of a compiled model, as its attributes report it
struct ane_shim_tensor {
	char name[64];
	size_t elem; // 2 (Float16) or 4 (Float32)
	size_t batches, channels, height, width;
	size_t row_stride, plane_stride, depth_stride, batch_stride;
	size_t nbytes; // batch_stride * batches
};

// a weight file the MIL names as @model_path/weights/<name>: read from
// path, or from data (len bytes) when data is set
struct ane_shim_file {
	const char *name;
	const char *path;
	const void *data;
	size_t len;
};

enum ane_shim_io {
	ANE_SHIM_IO_COPY = 0,   // caller buffers are copied into kernel-owned surfaces
	ANE_SHIM_IO_SHARED = 1, // a caller's IOSurface is bound directly (unverified path)
};

// --- pure C (ane-shim-util.c) -------------------------------------------------------

// bytes of a surface for a tensor of `declared` bytes: max(declared, 49152)
size_t ane_shim_surface_bytes(size_t declared);
// element size of an attribute Type string ("Float16" -> 2, "Float32" -> 4); 0 if unknown
size_t ane_shim_elem_size(const char *type);
// fill t from one LiveInputList / LiveOutputList entry's numbers; batch 0
// -> plane * channels, batches 0 -> 1, height / width 0 -> 1; -1 with err
// if the type is unknown or the strides cannot hold the tensor
int ane_shim_tensor_set(struct ane_shim_tensor *t, const char *name, const char *type, uint64_t batches,
                        uint64_t channels, uint64_t height, uint64_t width, uint64_t row_stride, uint64_t plane_stride,
                        uint64_t depth_stride, uint64_t batch_stride, char *err);
// the layout the seed formula predicts (row = max(64, W e), plane =
// max(64, row H), batch = plane C): what a host surface uses
int ane_shim_tensor_formula(struct ane_shim_tensor *t, size_t channels, size_t height, size_t width, size_t elem,
                            char *err);
// the strides are a packed [C][H][W] array
int ane_shim_tensor_contiguous(const struct ane_shim_tensor *t);
// copy the first ncols columns of every channel and row from src (laid out
// as s) to dst (laid out as d); same channels, height and element size
int ane_shim_restride(void *dst, const struct ane_shim_tensor *d, const void *src, const struct ane_shim_tensor *s,
                      size_t ncols, char *err);

// milliseconds to sleep before load attempt n (1-based): 0 for the first,
// then 100, 200, 400, 800, 1600, 3200; -1 past ANE_SHIM_LOAD_ATTEMPTS
int ane_shim_retry_delay_ms(int attempt);
// a device status the sources name, or NULL: 0x5 (no ANE resources), 0x1d
// (program inference error), 0xe00002e2 (not permitted), 0xe00002c7
// (unsupported)
const char *ane_shim_status_name(uint64_t status);
// the first "status=0x..." / "status 0x..." / "(0x...)" in an error text; 0 if found
int ane_shim_status_find(const char *text, uint64_t *status);
// a failed load with this status is worth retrying (0x5, and unknown
// codes: the pool is machine-wide and frees up); not-permitted,
// unsupported and the inference error 0x1d are final
int ane_shim_status_transient(uint64_t status, int known);
// "what failed: <text> [status 0x5: no ANE resources ...]" into err; returns -1
int ane_shim_error(char *err, const char *what, const char *text);
// "@model_path/weights/<name>" into buf; name must be a plain file name
// (no '/', not "." or "..", not empty)
int ane_shim_weight_key(char *buf, size_t cap, const char *name, char *err);
// the formatted message into err (ANE_SHIM_ERRLEN bytes; NULL: none);
// returns -1 (the shim's one error helper, for ane-shim.m too)
int ane_shim_fail(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// --- the device (ane-shim.m; only where ANEDVD_ANE is on) ---------------------------

struct ane_shim_kernel;

// dlopen the framework and resolve the four classes, once per process;
// 0 if usable, else -1 with the reason
int ane_shim_init(char *err);
// one line for `anedvd info`: "AppleNeuralEngine: 4 classes resolved" or why not
const char *ane_shim_describe(void);

struct ane_shim_kernel *ane_shim_compile(const char *mil, const struct ane_shim_file *files, int nfiles, char *err);
void ane_shim_free(struct ane_shim_kernel *k); // unload, release surfaces

int ane_shim_ninputs(const struct ane_shim_kernel *k);
int ane_shim_noutputs(const struct ane_shim_kernel *k);
const struct ane_shim_tensor *ane_shim_input(const struct ane_shim_kernel *k, int i);
const struct ane_shim_tensor *ane_shim_output(const struct ane_shim_kernel *k, int i);
size_t ane_shim_input_capacity(const struct ane_shim_kernel *k);
size_t ane_shim_output_capacity(const struct ane_shim_kernel *k);
// microseconds spent compiling and loading, and load attempts used
uint64_t ane_shim_compile_us(const struct ane_shim_kernel *k);
uint64_t ane_shim_load_us(const struct ane_shim_kernel *k);
int ane_shim_load_attempts(const struct ane_shim_kernel *k);

// src laid out as s (NULL: the device's own strides) -> input surface i
int ane_shim_write_input(struct ane_shim_kernel *k, int i, const void *src, const struct ane_shim_tensor *s,
                         size_t ncols, char *err);
int ane_shim_eval(struct ane_shim_kernel *k, char *err);
// output surface i -> dst laid out as d (NULL: the device's strides)
int ane_shim_read_output(struct ane_shim_kernel *k, int i, void *dst, const struct ane_shim_tensor *d, size_t ncols,
                         char *err);

// bind a caller's IOSurfaceRef (passed as void *) as input (output = 0) or
// output (output = 1) i, checked by one eval (which writes the bound
// output); -1 and the kernel unchanged
// (still on its own surfaces) if the device refuses it
int ane_shim_bind(struct ane_shim_kernel *k, int output, int i, void *iosurface, char *err);
// back to the kernel's own surface for input / output i
int ane_shim_unbind(struct ane_shim_kernel *k, int output, int i, char *err);
enum ane_shim_io ane_shim_io_path(const struct ane_shim_kernel *k);
const char *ane_shim_io_name(enum ane_shim_io io);

#endif
