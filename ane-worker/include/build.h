// build.h - from a plan entry to a compiled kernel on a backend.
//
// ane_build makes one kernel: it dequantises that kernel's weights only,
// a block of rows at a time, straight into the fp16 weight blob (blob.h)
// in a directory of its own, laid out as the ANE compiler reads one
// ($TMPDIR/anedvd-ane-<kernel>-XXXXXX/weights/w.bin, model.mil next to
// it), generates its MIL (mil.h), compiles both on the backend and
// removes the directory again (it stays, with the MIL, when
// ANEDVD_KEEP_ANE_FILES=1). So a model never exists as fp16 in memory or
// on disk as a whole: one kernel's blob at a time, and the backend's
// compiled copy; a process killed mid-build leaves one directory at most.
//
// int8 weights (the plan's format, plan.h): each output row of a weight
// matrix is quantised on its own, from the model's weights dequantised to
// fp32 (ane_quant_row): symmetric, s = fp16(max_i |w_i| / 127), q_i =
// clamp(round_half_even(w_i / s), -127, 127), dequantised s * q_i. For a
// Q8_0 row, whose values are d_b * q_bj (fp16 block scale d_b per 32
// values), that is s = max_b(|d_b| max_j |q_bj|) / 127 (rounded to fp16)
// and q'_bj = round(d_b q_bj / s): exact (q' = q) when every block of the
// row has the same d_b and reaches |q| = 127, else an error of at most s/2
// per value (blocks with a smaller d_b lose the low bits their own scale
// had). The blob then holds per matrix an int8 chunk and an fp16 scale
// chunk (mil.h). ane_qerr_* measure what that costs against the fp32
// dequantised weights.
//
// Backends: "emu" (the CPU executor of emu.h, everywhere) and "ane" (the
// Neural Engine through the shim, backend-ane.h; only in builds with
// ANEDVD_ANE, elsewhere refused with a clear error).
//
// The ANE allows about 119 compiles per process before it becomes
// unreliable; the builder counts compiles and warns when a process comes
// near that budget (the emu has no such limit, but a plan that needs more
// is worth knowing about before it meets a device).
//
// A builder and its kernels are used by one thread at a time (the emu
// context's rule); a server serialises evals itself.
//
// ane_set is the whole plan of a model, compiled: what kb_local and the
// anedvd-ane-worker process both hold. Given a cache directory
// (ane_build_opts.cache_dir, emu only), ane_set_build first looks for the
// plan's entry in the on-disk cache (kcache.h) and, on a hit, compiles
// every kernel from the mapped file's buffers (emu_compile_packed): no blob
// is written, no model page is read. On a miss it builds as above and a
// thread of its own writes each compiled kernel into a new entry while the
// next ones compile. Either way it drops the model's pages it read (the
// kernels hold their own copy), and records where the time went
// (ane_set.start).
#ifndef ANE_BUILD_H
#define ANE_BUILD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "emu.h"
#include "err.h"
#include "kcache.h"
#include "model.h"
#include "plan.h"

#define ANE_COMPILE_BUDGET 119
#define ANE_COMPILE_WARN 100
// what a build without ANEDVD_ANE says to --backend ane
#define ANE_NO_BACKEND_MSG "the ane backend needs macOS on Apple silicon; this build has emu only"

struct ane_build_opts {
	const char *backend; // NULL: "emu"
	int threads;         // emu threads (0: 2)
	// the on-disk cache of compiled kernels (kcache.h), for ane_set_build
	// on emu: NULL or "" builds without it
	const char *cache_dir;
	uint64_t cache_max_bytes; // 0: KC_DEFAULT_MAX_MB MiB
	int cache_verify;         // check every cached byte's checksum on a hit
	// what else changes the kernels, for the cache key ("weights=fp16")
	const char *options;
	// on a miss, return once the kernels are compiled and let the writer
	// finish the entry (the last kernels, fsync, rename) in the background:
	// ane_set_cache_wait (or ane_set_free) waits for it
	int cache_background;
	// with cache_background: NULL, the writer stores each kernel as soon as
	// it is compiled; else, before each kernel, it waits (looking every
	// STORE_PACE_MS, and giving up when the build fails) until
	// store_pace(store_pace_arg) is nonzero: the ane-worker's says so once
	// the worker is ready and idle, or stopping
	int (*store_pace)(void *arg);
	void *store_pace_arg;
	// NULL, or where ane_set_build counts the kernels it has and will
	// have, for another thread to read (the ane-worker's Health)
	_Atomic int *built, *total;
	// NULL, or where the writer of a new cache entry counts the kernels it
	// has written into it, and then one more while it commits it (fsync,
	// rename), for another thread to read (the ane-worker's Health)
	_Atomic int *stored;
	int debug_delay_ms;       // a pause after each kernel built (tests)
	int debug_store_delay_ms; // a pause before a new cache entry is committed (tests)
	// write each kernel's blob to a file and compile from it, as the ane
	// backend must, on emu too (tests; the emu reads its blobs from
	// memory otherwise)
	int blob_files;
};

struct ane_builder;

struct ane_dev;

struct ane_kernel {
	struct emu_kernel *ek; // emu backend
	struct ane_dev *dev;   // ane backend
	int width;
	int in_ch, out_ch;
	uint64_t compile_us;
	uint64_t blob_us; // writing its blob (dequantising included)
	uint64_t weight_bytes;
};

struct ane_builder *ane_builder_new(const struct ane_build_opts *o, char *err);
void ane_builder_free(struct ane_builder *b); // the kernels must be freed first
const char *ane_builder_backend(const struct ane_builder *b);
// the emu context (its thread pool), NULL on the ane backend
struct emu *ane_builder_emu(const struct ane_builder *b);
uint32_t ane_builder_compiles(const struct ane_builder *b);

int ane_build(struct ane_builder *b, const struct ane_pk *pk, int width, struct ane_kernel *out, char *err);
// a synthetic n x n projection with weights ane_probe_weights(seed)
int ane_build_probe(struct ane_builder *b, int n, int width, uint64_t seed, struct ane_kernel *out, char *err);
// n values of the seed's LCG (s = s * 1664525 + 1013904223 mod 2^32,
// v = 0.03 * ((s >> 8) / 2^24 - 0.5)), starting from s = seed
void ane_probe_weights(float *w, size_t n, uint64_t seed);
void ane_kernel_free(struct ane_kernel *k);
// the kernel's host surface layout and sizes, whatever its backend
const struct ane_layout *ane_kernel_input_layout(const struct ane_kernel *k);
size_t ane_kernel_input_capacity(const struct ane_kernel *k);
size_t ane_kernel_output_capacity(const struct ane_kernel *k);

// in / out: fp16 planar surfaces of the kernel's width with at least
// in_ch / out_ch channels and emu_input_capacity / output_capacity bytes
int ane_eval(struct ane_kernel *k, const void *in, void *out, int ncols, char *err);
// ane_eval with host rows in place of a surface (emu_eval_host): the input
// from x_in ([ncols][in_ld] fp32, rounded to fp16) when it is not NULL, the
// output to y_out ([ncols][out_ld]) when it is not NULL. The surfaces are
// still the kernel's: on the device the rows go through them.
int ane_eval_host(struct ane_kernel *k, const void *in, void *out, const float *x_in, size_t in_ld, float *y_out,
                  size_t out_ld, int ncols, char *err);

// one row of n fp32 weights to int8 q and the fp16 scale *scale (bits);
// -1 with err for a non-finite weight or one beyond fp16's range x 127
int ane_quant_row(const float *w, size_t n, int8_t *q, uint16_t *scale, char *err);

// 4-bit palettised weights (ANE_W_LUT4): each row's scale is its largest
// |w| (fp16), and each group of 64 rows (or all rows, when they are not a
// multiple of 64) shares a table of 16 fp16 values for w / scale, the
// k-means of their histogram over [-1, 1] (ane_l4_tables: nbins bins,
// Lloyd's steps from the quantiles; tab sorted ascending); a weight's
// index is its nearest entry: the count of midpoints (tab[k] + tab[k+1])
// / 2 below w / scale (ane_l4_index; at a midpoint, the lower). Dequantised:
// scale * tab[q]. ane_qerr_* measure it too.
void ane_l4_tables(const double *hist, size_t nbins, float *tab);
unsigned ane_l4_index(const float *tab, float u);

// the int8 quantisation error of weights w vs their dequantised values
struct ane_qerr {
	uint64_t n;
	double max_abs;     // max |s q - w|
	double max_rel_row; // max |s q - w| / max |w| of its row
	double sum_sq_err, sum_sq_w;
};
void ane_qerr_row(struct ane_qerr *e, const float *w, const int8_t *q, uint16_t scale, size_t n);
// RMS relative error: sqrt(sum (s q - w)^2 / sum w^2)
double ane_qerr_rms_rel(const struct ane_qerr *e);
// quantise every weight of the plan's kernels as ane_build does and sum up
// the error (reads the whole model once; nothing is kept)
int ane_qerr_plan(const struct ane_plan *p, struct ane_qerr *e, char *err);
enum ane_cache_state {
	ANE_CACHE_OFF = 0,    // not asked for, or not for this backend
	ANE_CACHE_HIT,        // every kernel from the cache's file
	ANE_CACHE_MISS,       // compiled, and stored
	ANE_CACHE_REBUILT,    // the entry was unusable (cache_note says why): compiled, and stored again
	ANE_CACHE_NOT_STORED, // compiled; storing failed (cache_note says why, warned once)
};

// where a start's time went (us), for the log and `run --json`
struct ane_start {
	uint64_t plan_us;       // the plan
	uint64_t key_us;        // MIL texts, the model digest and the cache key
	uint64_t load_us;       // cache lookup, checks and mapping, packed compiles (hit)
	uint64_t blob_us;       // dequantising into blob files (miss)
	uint64_t compile_us;    // emu_compile / device compile: parse, read and repack (miss)
	uint64_t store_us;      // writing the cache file (miss) in a thread of its own, not its pace waits
	uint64_t store_wait_us; // of which the build waited for at its end (the last kernels, fsync, rename)
	uint64_t total_us;
	enum ane_cache_state cache;
	char cache_note[AD_ERRLEN + 64];
	uint64_t cache_bytes; // the entry's file
	// emu: the kernels' weight bytes, and the bytes the process maps on
	// 2 MiB pages once they are built (hugemem.h; -1: unknown, or the ane
	// backend): a decode streams the weights, and from 4 KiB pages slower
	uint64_t weight_bytes;
	long long huge_bytes;
};

struct ane_set {
	struct ane_plan plan;
	struct ane_builder *b;
	struct ane_kernel *k; // plan.n entries
	uint64_t compile_ms;
	struct kc_entry *cache; // the mapped entry the kernels' weights live in (hit)
	struct ane_start start;
	struct ane_store *store; // the entry being written (cache_background)
};
// wait for an entry written in the background and book its outcome in
// s->start (with mu held, if given, while doing so); the cache state
enum ane_cache_state ane_set_cache_wait(struct ane_set *s, pthread_mutex_t *mu);
const char *ane_cache_state_name(enum ane_cache_state s); // "off", "hit", ...
// one line: "plan 1 ms, key 3 ms, ..."
void ane_start_describe(const struct ane_start *s, char *buf, size_t cap);

// progress: log one line per kernel (info level)
int ane_set_build(struct ane_set *s, const struct model *m, const struct ane_plan_opts *po,
                  const struct ane_build_opts *bo, int progress, char *err);
void ane_set_free(struct ane_set *s);

#endif
