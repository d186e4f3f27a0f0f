// kcache.h - compiled kernels cached on disk.
//
// A start of the ane-worker spends most of its time turning the model's
// weights into what the kernels hold (for emu: fp16 blobs written, read
// back and repacked into panels). The cache keeps that result: one file
// per (model, options, backend, build) with the constant buffers of every
// kernel of the plan (emu_kernel_const: raw bytes with their kind, the
// weight they belong to and their size), which a later start maps
// (MAP_SHARED, read-only, at a 2 MiB-aligned address with MADV_HUGEPAGE)
// and hands to emu_compile_packed together with the MIL text it generates
// again (cheap). The worker's weights are then page-cache pages of that
// file: shared by every process that maps it, reclaimable, and nothing is
// read or repacked. The writer writes the file in whole, aligned 2 MiB
// blocks, so that the page cache holds it in 2 MiB folios, which map as
// huge pages: a decode streams every weight once per token, and from 4 KiB
// pages its kernels ran ~10% slower.
//
// The key, stored whole in the file and compared byte for byte (its hash
// is only the file name), is text:
//   format   KC_FORMAT, bumped whenever this file's layout or the meaning
//            of a buffer kind changes
//   build    ANEDVD_VERSION and the GNU build id (a hash the linker
//            computes over the whole binary: any change of the code that
//            compiled the kernels misses) of the object that holds that
//            code: libanedvd.so, not the small program that runs it (a
//            test linking the static library: the test); without a build
//            id, that file's size and mtime
//   backend  emu (or ane)
//   model    kc_model_digest: the file's size and mtime (ns), a hash of
//            its header (metadata and tensor infos), and a hash of 3
//            samples of 256 bytes (start, middle, end) of every tensor, or
//            of 64 evenly spread ones when there are more (a few hundred
//            reads: a start after a reboot pays them from disk).
//            Not a hash of all the data: that costs a read of the whole
//            file on every start (seconds when it is not in the page
//            cache, the cost the cache is there to avoid) and would pull
//            every weight page into memory. Size and mtime catch every
//            ordinary rewrite (a new download, gen-model, cp); the
//            samples catch a different model of the same shape copied
//            with its mtime kept. An in-place edit of a few bytes that
//            restores the mtime is not caught: --no-cache or
//            `anedvd cache --clear`.
//   options  the caller's: plan width, split, head rows, weights type and
//            whatever else changes the kernels
//   kernels  per kernel a hash of its MIL text and of its plan entry
//            (kind, shape, tensors and rows), so a change of the
//            generator also misses
//
// File layout (host byte order; the magic tells a foreign one apart):
//   [0, 4096)       header: magic, format, sizes, counts, the offset of
//                   the table, a checksum of the table and one of the
//                   header itself
//   [4096, T)       the buffers, each at a 4096-byte aligned offset
//   [T, end)        the table (T is 4096-aligned): per kernel {MIL hash,
//                   first buffer, buffer count}, then per buffer {kernel,
//                   weight, kind, offset, bytes, a checksum of its first
//                   and last 4 KiB, a checksum of all of it}, then the key
//                   text
// A file is never mapped before its header, sizes (the file's own and
// every buffer's range and alignment), table checksum and key have been
// checked with plain reads; then each buffer's sampled checksum is
// checked (and, with verify, the checksum of every byte). A file that
// fails is removed and rebuilt.
//
// Writing is safe against a crash: the file is written under a temporary
// name in the same directory (".<name>.tmp.<pid>"), fsynced, renamed into
// place and the directory fsynced; a reader only ever opens "<name>.kc",
// so a half-written file is never used. Temporary files whose writer is
// gone are removed by the next writer and by kc_clear.
//
// A mapped entry must not be truncated in place while in use (that would
// fault its readers): nothing here ever does, entries are only replaced
// by rename and removed by unlink, which leave a mapping intact.
//
// Size bound: after a store, the oldest entries (by mtime; a hit touches
// its file) are removed until the directory holds at most max_bytes (the
// new entry is kept even if it alone is larger).
//
// Location: kc_default_dir: $ANEDVD_CACHE_DIR, else $XDG_CACHE_HOME/anedvd,
// else $HOME/.cache/anedvd. A directory that cannot be made or written
// makes the caller build without the cache (one warning).
//
// The ane backend: the same key with backend "ane" and the same file, the
// buffers being what the device's compiler returns for a program (the
// compiled model's files, as raw bytes of a new kind), handed back to the
// framework instead of compiling; the ANE's per-process compile budget
// makes that worth more there than on emu.
#ifndef ANE_KCACHE_H
#define ANE_KCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "emu.h"
#include "err.h"
#include "model.h"

#define KC_FORMAT 3
#define KC_DEFAULT_MAX_MB 4096
// The header's page, then the buffers back to back, each on the alignment
// emu's constants need, then the table on a page. Each buffer on a page of
// its own left 0.8 MB of holes in SmolLM2-135M's 4-bit entry (453 buffers:
// a 4-bit weight's scales and tables are a few KiB), all of them mapped
// with the buffers around them
#define KC_ALIGN 4096
#define KC_BUF_ALIGN EMU_CONST_ALIGN

struct kc_opts {
	const char *dir;    // NULL: kc_default_dir
	uint64_t max_bytes; // 0: KC_DEFAULT_MAX_MB MiB
	int verify;         // on a hit, check the checksum of every byte (also ANEDVD_CACHE_VERIFY=1)
};

// 0 and the directory, or -1 when there is no HOME either
int kc_default_dir(char *buf, size_t cap);

// a fast 64-bit hash (not cryptographic)
uint64_t kc_hash(const void *p, size_t n, uint64_t seed);
// "<version> <build id hex>" of the running executable
const char *kc_build_id(void);
// the model's digest (see above) as text
int kc_model_digest(const struct model *m, char *out, size_t cap, char *err);
// model_drop_range (model.h): the pages around [p, p + n) unmapped when
// they lie in the model's file mapping
void kc_model_drop(const struct model *m, const void *p, size_t n);

// the key: text appended line by line, hashed when done
struct kc_key {
	char *text;
	size_t len, cap;
	int failed;
	char name[24]; // hex of the hash: the file is <name>.kc
};
void kc_key_init(struct kc_key *k);
void kc_key_add(struct kc_key *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// -1 if a line could not be added (out of memory)
int kc_key_finish(struct kc_key *k, char *err);
void kc_key_free(struct kc_key *k);

// an entry mapped for use
struct kc_kernel {
	uint64_t mil_hash;
	int nconsts;
	const struct emu_const *consts; // data points into the mapping
};
struct kc_entry;

// 1 and *out on a hit; 0 when there is no entry; -1 (err says why) when
// the entry is unusable, which is then removed
int kc_load(const char *dir, const struct kc_key *key, int nkernels, const struct kc_opts *o, struct kc_entry **out,
            char *err);
const struct kc_kernel *kc_entry_kernel(const struct kc_entry *e, int i);
uint64_t kc_entry_bytes(const struct kc_entry *e);
// unmaps: the kernels compiled from it must be freed first
void kc_entry_free(struct kc_entry *e);

// a new entry, written as the kernels are compiled or after (build.h,
// ane_build_opts.store_pace)
struct kc_writer;
struct kc_writer *kc_writer_new(const char *dir, const struct kc_key *key, int nkernels, char *err);
// kernel i's buffers (every kernel exactly once, in any order)
int kc_writer_add(struct kc_writer *w, int kernel, uint64_t mil_hash, const struct emu_const *c, int n, char *err);
// write the table, fsync, rename into place, evict down to max_bytes
// (0: KC_DEFAULT_MAX_MB); frees w
int kc_writer_commit(struct kc_writer *w, uint64_t max_bytes, char *err);
void kc_writer_abort(struct kc_writer *w); // removes the temporary file

// the directory
struct kc_info {
	char name[256]; // file name
	uint64_t bytes;
	int64_t mtime;     // seconds
	int valid;         // header and table check out
	uint32_t format;   // the header's format when the file has the magic (0: it has not)
	char model[160];   // the key's model line, when valid
	char options[160]; // the key's options line
	int nkernels;
	int temporary; // a temporary file (a writer's, maybe dead)
};
// calls fn for every entry and temporary file; the count, or -1
int kc_list(const char *dir, void (*fn)(const struct kc_info *, void *), void *arg, char *err);
// remove the oldest entries but keep until at most max_bytes remain
int kc_evict(const char *dir, uint64_t max_bytes, const char *keep, char *err);
// remove every entry and temporary file; *files / *bytes get what went
int kc_clear(const char *dir, int *files, uint64_t *bytes, char *err);

#endif
