// hugemem.h - memory on 2 MiB pages for data read in long streams: the
// emu's weight panels and the bandwidth baseline (memread.h).
//
// A one-column conv reads its weights once a token. On 4 KiB pages every
// page is a TLB miss (a two-level walk in a VM) and a new stream for the
// hardware prefetcher: on this project's reference VM the SmolLM2-135M
// shape decoded at 111 tok/s with its kernel cache mapped on 4 KiB pages
// and 119 on 2 MiB ones. Transparent huge pages in madvise mode come only
// to whole, 2 MiB-aligned pages of an advised range, so:
//   ad_huge_map     one mapping (fresh anonymous memory, or a file read-
//                   only), aligned and advised;
//   ad_huge_arena   many small ones (a SmolLM2 layer's weights are 0.7 to
//                   1.8 MB each) packed into shared, aligned and advised
//                   chunks, instead of each on 4 KiB pages or rounded up
//                   to a huge page of its own.
// Where the kernel has no transparent huge pages (or not for this range),
// the same memory comes on 4 KiB pages and everything works the same.
#ifndef AD_HUGEMEM_H
#define AD_HUGEMEM_H

#include <stddef.h>
#include <stdint.h>

#define AD_HUGE_PAGE ((size_t)2 << 20)

// len bytes (whole 4 KiB pages) at a 2 MiB boundary, its whole huge pages
// advised onto transparent huge pages (the tail stays on 4 KiB pages):
// fd < 0, fresh anonymous memory, read-write and zeroed (fresh, because
// advice does not turn pages already faulted in, which malloc recycles,
// into huge ones); else the file fd from offset 0, read-only and shared,
// so that a page cache holding it in 2 MiB folios maps it huge. Released
// with ad_huge_unmap(p, len). NULL (errno set) when it cannot be mapped.
void *ad_huge_map(size_t len, int fd);
void ad_huge_unmap(void *p, size_t len);

struct ad_huge_arena;

// an arena whose shared chunks hold chunk bytes (rounded up to whole huge
// pages; 0: 32 MiB); NULL when out of memory. Thread-safe.
struct ad_huge_arena *ad_huge_arena_new(size_t chunk);
// releases every chunk, whatever is still allocated from it; NULL: no-op
void ad_huge_arena_free(struct ad_huge_arena *a);
// n bytes (64-byte aligned): from the newest shared chunk while it has
// room, else from a new one; more than a quarter of a chunk gets a chunk of
// its own. Chunks are ad_huge_map's anonymous mappings. NULL when out of
// memory.
void *ad_huge_arena_alloc(struct ad_huge_arena *a, size_t n);
// gives back what ad_huge_arena_alloc returned (NULL: no-op); a chunk is
// released once nothing in it is allocated (the newest shared one is
// reused instead). A pointer the arena did not give is a programming error
// (abort).
void ad_huge_arena_release(struct ad_huge_arena *a, void *p);
// the bytes of the chunks the arena holds now
size_t ad_huge_arena_bytes(const struct ad_huge_arena *a);

// the pages of [p, p + n) made present and writable now, as one system
// call where the kernel has MADV_POPULATE_WRITE (Linux 5.14), else a
// write fault per page that changes no byte (an atomic add of zero, so
// the memory may be in use by other threads). A fault taken one at a time
// is dear in a VM: on this project's reference VMs a 4 KiB page's first
// write cost 26-31 us, populated in bulk 2 us. For memory a hot path
// writes into for the first time (a sequence's KV rows, the emu's scratch
// and activation buffers): populate it before it is timed. n = 0: no-op.
void ad_prefault(void *p, size_t n);

// which 4 KiB pieces of a buffer are present already, a bit each, so
// that a hot path makes each present once and then pays a few bit tests:
// ad_ready_range makes bytes [off, off + n) of the buffer at base (size
// bytes; any alignment) present, those pieces not yet marked, and marks
// them. Zero-initialised; ad_ready_clear forgets every mark (the buffer
// moved) and frees the bitmap. Without memory for the bitmap the range
// is left to fault in as it is written. Not thread-safe.
struct ad_ready {
	uint64_t *bits;
	size_t npieces;
};
void ad_ready_range(struct ad_ready *r, void *base, size_t size, size_t off, size_t n);
void ad_ready_clear(struct ad_ready *r);

// the kernel's transparent-huge-page mode: "always", "madvise" or
// "never" (/sys/kernel/mm/transparent_hugepage/enabled), written into buf;
// NULL where it does not say
const char *ad_huge_thp_mode(char *buf, size_t cap);

// the bytes this process maps on huge pages (anonymous, shared-memory and
// file-backed PMD mappings, from /proc/self/smaps_rollup); -1 where the
// kernel does not say (not Linux, no /proc)
long long ad_huge_process_bytes(void);

// the heap's free pages given back to the system: after a load phase that
// freed much in small blocks (a parsed tokenizer.json's tree, freed under
// the tables built from it, kept Qwen3's tokenizer process at 76 MiB of
// anonymous memory). glibc's malloc_trim; nothing elsewhere
void ad_heap_trim(void);

#endif
