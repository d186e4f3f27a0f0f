// memread.h - the memory-bandwidth baseline: a plain streaming read.
//
// A buffer allocated as the emu holds its weights (hugemem.h), read on
// N threads of an ad_pool, each summing one
// contiguous share with 256-bit loads in eight independent chains. This is
// the roofline a one-column conv is measured against: on this project's
// reference VM, a read of 4 KiB pages with 8-byte loads reached about 31
// GB/s in the phases where this one reached 55-60 (the loads and the TLB,
// not the memory, set the pace there), and both 33 in the slow ones.
#ifndef AD_MEMREAD_H
#define AD_MEMREAD_H

#include <stddef.h>
#include <stdint.h>

struct ad_memread;

// a buffer of bytes (rounded down to 256 a thread) filled once, and
// threads (1..64) - 1 reader threads besides the caller; NULL with err set
// when out of memory or when bytes leave a thread less than 256
struct ad_memread *ad_memread_new(size_t bytes, int threads, char *err);
void ad_memread_free(struct ad_memread *r);
size_t ad_memread_bytes(const struct ad_memread *r);
// one pass over the whole buffer: its GB/s (bytes over the wall time)
double ad_memread_pass(struct ad_memread *r);
// the last pass's sum of the buffer's 64-bit words (mod 2^64), which word
// i holds as i * AD_MEMREAD_MUL: what shows that every byte was read
uint64_t ad_memread_sum(const struct ad_memread *r);
#define AD_MEMREAD_MUL 0x9e3779b97f4a7c15ull

#endif
