#define _GNU_SOURCE // dl_iterate_phdr, dladdr
#include "kcache.h"
#include "hugemem.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <elf.h>
#include <link.h>
#endif

#include "gguf.h"

#ifdef __APPLE__
#include <mach-o/dyld.h>
#define MTIM(st) ((st).st_mtimespec)
#else
#define MTIM(st) ((st).st_mtim)
#endif

#define MAGIC "ANEDVDKC"
#define SAMPLE 4096 // bytes at each end of a buffer in its sampled checksum
#define MAX_KERNELS 65536
#define MAX_CONSTS (MAX_KERNELS * 8)
#define DIGEST_TENSORS 64 // tensors whose data the model digest samples

struct header {
	char magic[8];
	uint32_t format, header_bytes;
	uint64_t file_bytes;
	uint64_t table_off, table_bytes; // key text, kernels, buffers
	uint32_t key_bytes, nkernels, nconsts, pad;
	uint64_t table_sum;
	uint64_t header_sum; // of this header with header_sum = 0
};

struct rec_kernel {
	uint64_t mil_hash;
	uint32_t first, n;
};

struct rec_const {
	uint32_t kernel;
	int32_t weight;
	uint32_t kind, pad;
	uint64_t off, bytes;
	uint64_t sample_sum, full_sum;
};

// --- hashing -------------------------------------------------------------------

static inline uint64_t
fmix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

uint64_t
kc_hash(const void *p, size_t n, uint64_t seed)
{
	const uint8_t *b = p;
	uint64_t a[4] = {seed ^ 0x9e3779b97f4a7c15ULL, seed + n, ~seed, seed * 3 + 1};
	size_t i = 0;
	// four independent lanes of 8 bytes: a few GB/s, enough to check a
	// file no slower than it is read
	for (; i + 32 <= n; i += 32)
		for (int j = 0; j < 4; j++) {
			uint64_t v;
			memcpy(&v, b + i + 8 * (size_t)j, 8);
			a[j] = (a[j] ^ v) * 0x9fb21c651e98df25ULL;
			a[j] ^= a[j] >> 29;
		}
	uint64_t h = seed ^ (uint64_t)n;
	for (int j = 0; j < 4; j++)
		h = fmix(h ^ a[j]) + (uint64_t)j;
	for (; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return fmix(h);
}

static uint64_t
sample_sum(const uint8_t *p, uint64_t n)
{
	if (n <= 2 * SAMPLE)
		return kc_hash(p, (size_t)n, 1);
	return kc_hash(p, SAMPLE, 1) ^ fmix(kc_hash(p + n - SAMPLE, SAMPLE, 2) + n);
}

// --- build id, directory ---------------------------------------------------------

static char build_id[160];

#ifdef __linux__
// the object whose code is running here: libanedvd.so, or the program
// that links the ane-worker's library statically (a test)
static int
find_build_id(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	const uintptr_t self = (uintptr_t)arg;
	int here = 0;
	for (int i = 0; i < info->dlpi_phnum && !here; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t a = info->dlpi_addr + ph->p_vaddr;
		here = ph->p_type == PT_LOAD && self >= a && self - a < ph->p_memsz;
	}
	if (!here)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			const uint8_t *name = p + sizeof *nh;
			const uint8_t *desc = name + ((nh->n_namesz + 3) & ~3u);
			if (desc + nh->n_descsz > end)
				break;
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
				size_t o = strlen(build_id);
				o += (size_t)snprintf(build_id + o, sizeof build_id - o, " gnu-");
				for (uint32_t j = 0; j < nh->n_descsz && o + 3 < sizeof build_id; j++)
					o += (size_t)snprintf(build_id + o, sizeof build_id - o, "%02x", desc[j]);
				return 1;
			}
			p = desc + ((nh->n_descsz + 3) & ~3u);
		}
	}
	return 1;
}
#endif

const char *
kc_build_id(void)
{
	if (build_id[0])
		return build_id;
#ifdef ANEDVD_VERSION
	snprintf(build_id, sizeof build_id, "%s", ANEDVD_VERSION);
#else
	snprintf(build_id, sizeof build_id, "?");
#endif
	size_t n0 = strlen(build_id);
#ifdef __linux__
	dl_iterate_phdr(find_build_id, (void *)(uintptr_t)kc_build_id);
#endif
	if (strlen(build_id) == n0) {
		// no build id: the size and mtime of the file that holds this code
		// (the library, or the program) stand in
		struct stat st;
		char exe[4096] = "";
		Dl_info di;
		if (dladdr((void *)(uintptr_t)kc_build_id, &di) && di.dli_fname && di.dli_fname[0] == '/')
			snprintf(exe, sizeof exe, "%s", di.dli_fname);
#ifdef __APPLE__
		uint32_t n = sizeof exe;
		if (!exe[0] && _NSGetExecutablePath(exe, &n) != 0)
			exe[0] = 0;
#else
		if (!exe[0])
			snprintf(exe, sizeof exe, "/proc/self/exe");
#endif
		if (exe[0] && stat(exe, &st) == 0)
			snprintf(build_id + n0, sizeof build_id - n0, " exe-%lld-%lld.%09ld", (long long)st.st_size,
			         (long long)MTIM(st).tv_sec, MTIM(st).tv_nsec);
	}
	return build_id;
}

int
kc_default_dir(char *buf, size_t cap)
{
	const char *d = getenv("ANEDVD_CACHE_DIR");
	if (d && *d)
		return snprintf(buf, cap, "%s", d) < (int)cap ? 0 : -1;
	d = getenv("XDG_CACHE_HOME");
	if (d && *d == '/')
		return snprintf(buf, cap, "%s/anedvd", d) < (int)cap ? 0 : -1;
	d = getenv("HOME");
	if (d && *d)
		return snprintf(buf, cap, "%s/.cache/anedvd", d) < (int)cap ? 0 : -1;
	return -1;
}

// mkdir -p
static int
make_dir(const char *dir, char *err)
{
	char p[4096];
	if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
		return ad_err(err, "cache directory name too long");
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0700) != 0 && errno != EEXIST)
			return ad_err(err, "%s: %s", p, strerror(errno));
		*s = '/';
	}
	if (mkdir(p, 0700) != 0 && errno != EEXIST)
		return ad_err(err, "%s: %s", p, strerror(errno));
	return 0;
}

// --- model digest ----------------------------------------------------------------

static void
hash_stat(const struct stat *st, uint64_t *h)
{
	uint64_t v[3] = {(uint64_t)st->st_size, (uint64_t)MTIM(*st).tv_sec, (uint64_t)MTIM(*st).tv_nsec};
	*h = kc_hash(v, sizeof v, *h);
}

void
kc_model_drop(const struct model *m, const void *p, size_t n)
{
	model_drop_range(m, p, n);
}

// the pages of [p, p + n) asked for ahead (readahead without waiting)
static void
will_need(const void *p, size_t n)
{
	const uintptr_t pg = 4096, a = (uintptr_t)p & ~(pg - 1), e = ((uintptr_t)p + n + pg - 1) & ~(pg - 1);
	(void)madvise((void *)a, e - a, MADV_WILLNEED);
}

int
kc_model_digest(const struct model *m, char *out, size_t cap, char *err)
{
	struct stat st;
	if (stat(m->path, &st) != 0)
		return ad_err(err, "%s: %s", m->path, strerror(errno));
	uint64_t hs = 0x5157;
	hash_stat(&st, &hs);
	if (S_ISDIR(st.st_mode)) {
		// a Hugging Face directory: every file's name, size and mtime, in name order
		struct dirent **list = NULL;
		int n = scandir(m->path, &list, NULL, alphasort);
		for (int i = 0; i < n; i++) {
			char p[4096];
			struct stat fs;
			snprintf(p, sizeof p, "%s/%s", m->path, list[i]->d_name);
			if (list[i]->d_name[0] != '.' && stat(p, &fs) == 0 && S_ISREG(fs.st_mode)) {
				hs = kc_hash(list[i]->d_name, strlen(list[i]->d_name), hs);
				hash_stat(&fs, &hs);
			}
			free(list[i]);
		}
		free(list);
	}
	uint64_t hh = 0x4844;
	size_t len = 0;
	uint64_t data_off = 0;
	const uint8_t *map = m->gguf ? gguf_file_map(m->gguf, &len, &data_off) : NULL;
	if (map && data_off <= len)
		hh = kc_hash(map, (size_t)data_off, hh);
	// the tensors as the model sees them, and 3 samples of the data of
	// each of at most DIGEST_TENSORS of them, evenly spread: a few hundred
	// reads at most, cheap even when the file is not in the page cache
	uint64_t hd = 0x4454;
	int64_t stride = m->n_tensors > DIGEST_TENSORS ? (m->n_tensors + DIGEST_TENSORS - 1) / DIGEST_TENSORS : 1;
	// all the samples asked for first: read one by one from a file not in
	// the page cache they took 270-320 ms (Qwen2.5-0.5B F16), each fault a
	// wait for the disk; asked for at once, the reads overlap
	for (int64_t i = 0; i < m->n_tensors; i += stride) {
		const struct model_tensor *t = &m->tensors[i];
		if (!t->name || !t->data || !t->nbytes)
			continue;
		size_t s = t->nbytes < 256 ? t->nbytes : 256;
		will_need(t->data, s);
		will_need((const uint8_t *)t->data + (t->nbytes - s) / 2, s);
		will_need((const uint8_t *)t->data + t->nbytes - s, s);
	}
	for (int64_t i = 0; i < m->n_tensors; i++) {
		const struct model_tensor *t = &m->tensors[i];
		if (!t->name)
			continue;
		hh = kc_hash(t->name, strlen(t->name), hh);
		int64_t meta[6] = {t->type, t->n_dims, t->ne[0], t->ne[1], t->ne[2], (int64_t)t->nbytes};
		hh = kc_hash(meta, sizeof meta, hh);
		if (!t->data || !t->nbytes || i % stride)
			continue;
		const uint8_t *d = t->data;
		size_t s = t->nbytes < 256 ? t->nbytes : 256;
		hd = kc_hash(d, s, hd);
		hd = kc_hash(d + (t->nbytes - s) / 2, s, hd);
		hd = kc_hash(d + t->nbytes - s, s, hd);
		kc_model_drop(m, d, s);
		kc_model_drop(m, d + (t->nbytes - s) / 2, s);
		kc_model_drop(m, d + t->nbytes - s, s);
	}
	int n = snprintf(out, cap, "size %lld mtime %lld.%09ld header %016llx data %016llx files %016llx",
	                 (long long)st.st_size, (long long)MTIM(st).tv_sec, MTIM(st).tv_nsec, (unsigned long long)hh,
	                 (unsigned long long)hd, (unsigned long long)hs);
	if (n < 0 || (size_t)n >= cap)
		return ad_err(err, "model digest: buffer too small");
	return 0;
}

// --- key -------------------------------------------------------------------------

void
kc_key_init(struct kc_key *k)
{
	memset(k, 0, sizeof *k);
}

void
kc_key_add(struct kc_key *k, const char *fmt, ...)
{
	if (k->failed)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = k->cap - k->len;
		int n = k->text ? vsnprintf(k->text + k->len, room, fmt, ap) : -2;
		va_end(ap);
		if (n == -1) {
			k->failed = 1;
			return;
		}
		if (n >= 0 && (size_t)n + 1 < room) {
			k->len += (size_t)n;
			k->text[k->len++] = '\n';
			k->text[k->len] = 0;
			return;
		}
		size_t nc = k->cap ? k->cap * 2 : 1024;
		while (n >= 0 && nc < k->len + (size_t)n + 2)
			nc *= 2;
		char *t = realloc(k->text, nc);
		if (!t) {
			k->failed = 1;
			return;
		}
		k->text = t;
		k->cap = nc;
	}
}

int
kc_key_finish(struct kc_key *k, char *err)
{
	if (k->failed || !k->text)
		return ad_err(err, "cache key: out of memory");
	snprintf(k->name, sizeof k->name, "%016llx", (unsigned long long)kc_hash(k->text, k->len, 0x6b6579));
	return 0;
}

void
kc_key_free(struct kc_key *k)
{
	free(k->text);
	memset(k, 0, sizeof *k);
}

// --- reading ---------------------------------------------------------------------

struct kc_entry {
	void *data; // the whole file, mapped huge where it can be (ad_huge_map)
	size_t len;
	int nkernels;
	struct kc_kernel *k;
	struct emu_const *c;
};

// all of n bytes at off, or -1 (pread or pwrite: short transfers and
// EINTR retried)
static int
xfer_at(int fd, void *buf, size_t n, uint64_t off, int write)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t r = write ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		n -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int
read_at(int fd, void *buf, size_t n, uint64_t off)
{
	return xfer_at(fd, buf, n, off, 0);
}

// every page of [off, off + n) mapped now (not the holes between
// buffers: a hole read through a shared mapping becomes page-cache zeros)
static void
populate(const struct kc_entry *e, uint64_t off, uint64_t n)
{
	if (!n)
		return;
	uint8_t *p = (uint8_t *)e->data + off / 4096 * 4096;
	size_t len = (size_t)(off % 4096 + n);
#ifdef MADV_POPULATE_READ
	if (madvise(p, len, MADV_POPULATE_READ) == 0)
		return;
#endif
	madvise(p, len, MADV_WILLNEED);
}

static uint64_t
header_sum(const struct header *h)
{
	struct header c = *h;
	c.header_sum = 0;
	return kc_hash(&c, sizeof c, 0x6864);
}

// the key text in a table read by read_table: after the records
static const uint8_t *
table_key(const uint8_t *table, const struct header *h)
{
	return table + (size_t)h->nkernels * sizeof(struct rec_kernel) + (size_t)h->nconsts * sizeof(struct rec_const);
}

// the header and table of an open file, checked; *table is malloc'd (key
// text, kernels, buffers)
static int
read_table(int fd, struct header *h, uint8_t **table, char *err)
{
	*table = NULL;
	struct stat st;
	if (fstat(fd, &st) != 0)
		return ad_err(err, "fstat: %s", strerror(errno));
	if ((uint64_t)st.st_size < KC_ALIGN || read_at(fd, h, sizeof *h, 0))
		return ad_err(err, "truncated header (%lld bytes)", (long long)st.st_size);
	if (memcmp(h->magic, MAGIC, 8))
		return ad_err(err, "not a kernel cache file (bad magic)");
	if (h->format != KC_FORMAT)
		return ad_err(err, "format %u, this build reads %d", h->format, KC_FORMAT);
	if (h->header_bytes != sizeof *h || h->header_sum != header_sum(h))
		return ad_err(err, "header checksum mismatch");
	if (h->file_bytes != (uint64_t)st.st_size)
		return ad_err(err, "file is %lld bytes, its header says %llu", (long long)st.st_size,
		              (unsigned long long)h->file_bytes);
	if (h->nkernels > MAX_KERNELS || h->nconsts > MAX_CONSTS || h->table_off < KC_ALIGN ||
	    h->table_off > h->file_bytes || h->table_bytes != h->file_bytes - h->table_off ||
	    h->table_bytes != (uint64_t)h->key_bytes + (uint64_t)h->nkernels * sizeof(struct rec_kernel) +
	                              (uint64_t)h->nconsts * sizeof(struct rec_const))
		return ad_err(err, "inconsistent sizes in the header");
	*table = malloc(h->table_bytes ? (size_t)h->table_bytes : 1);
	if (!*table)
		return ad_err(err, "out of memory");
	if (read_at(fd, *table, (size_t)h->table_bytes, h->table_off) ||
	    kc_hash(*table, (size_t)h->table_bytes, 0x7462) != h->table_sum) {
		free(*table);
		*table = NULL;
		return ad_err(err, "table checksum mismatch");
	}
	// every buffer inside the data area, aligned, and every kernel's range inside the list
	const struct rec_kernel *rk = (const struct rec_kernel *)*table;
	const struct rec_const *rc = (const struct rec_const *)(rk + h->nkernels);
	for (uint32_t i = 0; i < h->nconsts; i++)
		if (rc[i].off % KC_BUF_ALIGN || rc[i].off < KC_ALIGN || rc[i].off > h->table_off ||
		    rc[i].bytes > h->table_off - rc[i].off || rc[i].kernel >= h->nkernels) {
			free(*table);
			*table = NULL;
			return ad_err(err, "buffer %u lies outside the data", i);
		}
	for (uint32_t i = 0; i < h->nkernels; i++)
		if (rk[i].first > h->nconsts || rk[i].n > h->nconsts - rk[i].first) {
			free(*table);
			*table = NULL;
			return ad_err(err, "kernel %u's buffers are out of range", i);
		}
	return 0;
}

static void
entry_path(char *buf, size_t cap, const char *dir, const char *name)
{
	snprintf(buf, cap, "%s/%s.kc", dir, name);
}

int
kc_load(const char *dir, const struct kc_key *key, int nkernels, const struct kc_opts *o, struct kc_entry **out,
        char *err)
{
	*out = NULL;
	char path[4200];
	entry_path(path, sizeof path, dir, key->name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0; // none, or a directory we cannot read: a miss (a writer says why it cannot store)
	struct header h;
	uint8_t *table = NULL;
	struct kc_entry *e = NULL;
	if (read_table(fd, &h, &table, err))
		goto bad;
	if (h.key_bytes != key->len || memcmp(table_key(table, &h), key->text, key->len)) {
		// another key with the same hash: not ours, leave it
		free(table);
		close(fd);
		return 0;
	}
	if (h.nkernels != (uint32_t)nkernels) {
		ad_err(err, "%u kernels, the plan has %d", h.nkernels, nkernels);
		goto bad;
	}
	e = calloc(1, sizeof *e);
	if (!e || !(e->k = calloc((size_t)nkernels + 1, sizeof *e->k)) ||
	    !(e->c = calloc((size_t)h.nconsts + 1, sizeof *e->c))) {
		ad_err(err, "out of memory");
		goto bad;
	}
	e->len = (size_t)h.file_bytes;
	e->nkernels = nkernels;
	// mapped on a huge-page boundary, advised onto huge pages: the
	// writer puts every buffer of 2 MiB or more on a 2 MiB boundary of
	// the file, so the page cache holds most of the weights in 2 MiB
	// folios, mapped as huge pages. On 4 KiB pages a decode, which streams
	// every weight once per token, takes a TLB miss and a restart of the
	// hardware prefetcher at every page (Qwen2.5-0.5B shape F16: 58 ms of
	// kernels a token from 4 KiB pages, 47-50 with 854 of its 988 MB
	// mapped huge; reading the file into anonymous huge pages instead
	// gave 46 but cost the start 0.6-1.3 s on a VM, where fresh huge
	// pages fault in slowly; the ane-worker copies them once idle: its
	// mover). Every buffer's pages mapped now, as llama.cpp
	// maps a model: the first prefill reads all the weights, and faulting
	// them in there one 64 KiB window at a time cost it about a quarter of
	// its time
	if (!(e->data = ad_huge_map(e->len, fd))) {
		ad_err(err, "mmap: %s", strerror(errno));
		goto bad;
	}
	const struct rec_kernel *rk = (const struct rec_kernel *)table;
	const struct rec_const *rc = (const struct rec_const *)(rk + h.nkernels);
	const char *env = getenv("ANEDVD_CACHE_VERIFY");
	int verify = (o && o->verify) || (env && !strcmp(env, "1"));
	for (uint32_t i = 0; i < h.nconsts; i++) {
		const uint8_t *d = (const uint8_t *)e->data + rc[i].off;
		if (sample_sum(d, rc[i].bytes) != rc[i].sample_sum ||
		    (verify && kc_hash(d, (size_t)rc[i].bytes, 3) != rc[i].full_sum)) {
			ad_err(err, "buffer %u (kernel %u): checksum mismatch", i, rc[i].kernel);
			goto bad;
		}
		e->c[i] = (struct emu_const){
			.weight = rc[i].weight, .kind = (int)rc[i].kind, .bytes = (size_t)rc[i].bytes, .data = d};
		populate(e, rc[i].off, rc[i].bytes);
	}
	for (int i = 0; i < nkernels; i++) {
		e->k[i].mil_hash = rk[i].mil_hash;
		e->k[i].nconsts = (int)rk[i].n;
		e->k[i].consts = e->c + rk[i].first;
		for (uint32_t j = rk[i].first; j < rk[i].first + rk[i].n; j++)
			if (rc[j].kernel != (uint32_t)i) {
				ad_err(err, "kernel %d lists a buffer of kernel %u", i, rc[j].kernel);
				goto bad;
			}
	}
	free(table);
	// a hit counts as a use for the eviction order
	futimens(fd, NULL);
	close(fd);
	*out = e;
	return 1;
bad:
	free(table);
	kc_entry_free(e);
	close(fd);
	unlink(path); // unusable: rebuilt by this start
	return -1;
}

const struct kc_kernel *
kc_entry_kernel(const struct kc_entry *e, int i)
{
	return i >= 0 && i < e->nkernels ? &e->k[i] : NULL;
}

uint64_t
kc_entry_bytes(const struct kc_entry *e)
{
	return e->len;
}

void
kc_entry_free(struct kc_entry *e)
{
	if (!e)
		return;
	if (e->data)
		ad_huge_unmap(e->data, e->len);
	free(e->k);
	free(e->c);
	free(e);
}

// --- writing ---------------------------------------------------------------------

// The data goes to the file in whole, aligned blocks of AD_HUGE_PAGE bytes
// (the last one short): a write of such a block lands in the page cache as
// one 2 MiB folio (where the filesystem has large folios), which a load maps
// as a huge page. The many buffers under 2 MiB (a SmolLM2-135M layer's are
// 0.7 to 1.8 MB) written one by one came back as 4 KiB pages, and the
// SmolLM2 shape decoded at 111 tok/s from them against 119 from 2 MiB
// folios; the pages of a file stay as they were written for as long as
// the page cache keeps them.
struct kc_writer {
	int fd;
	char dir[4096], tmp[4200], final[4200];
	char *key;
	size_t key_len;
	uint64_t pos; // end of the data so far
	uint8_t *blk; // the block at file offset blk_off, filled up to pos
	uint64_t blk_off;
	int nkernels;
	struct rec_kernel *rk;
	uint8_t *have; // kernel added
	struct rec_const *rc;
	uint32_t nconsts, capconsts;
};

static int
write_at(int fd, const void *buf, size_t n, uint64_t off)
{
	return xfer_at(fd, (void *)buf, n, off, 1);
}

// n bytes at off (>= pos; the gap is zeros) through the block buffer: each
// block written once it is full, and its write-back started, so the fsync
// at the end has little left
static int
emit(struct kc_writer *w, const void *buf, size_t n, uint64_t off)
{
	const uint8_t *p = buf;
	while (w->pos < off + n) {
		if (w->pos - w->blk_off == AD_HUGE_PAGE) {
			if (write_at(w->fd, w->blk, AD_HUGE_PAGE, w->blk_off))
				return -1;
#ifdef __linux__
			sync_file_range(w->fd, (off_t)w->blk_off, (off_t)AD_HUGE_PAGE, SYNC_FILE_RANGE_WRITE);
#endif
			w->blk_off += AD_HUGE_PAGE;
		}
		uint64_t end = w->blk_off + AD_HUGE_PAGE < off + n ? w->blk_off + AD_HUGE_PAGE : off + n;
		uint8_t *d = w->blk + (w->pos - w->blk_off);
		if (w->pos < off) { // the gap before the data
			uint64_t g = off < end ? off : end;
			memset(d, 0, (size_t)(g - w->pos));
			w->pos = g;
			continue;
		}
		memcpy(d, p + (w->pos - off), (size_t)(end - w->pos));
		w->pos = end;
	}
	return 0;
}

// the partial last block
static int
emit_flush(struct kc_writer *w)
{
	return w->pos > w->blk_off && write_at(w->fd, w->blk, (size_t)(w->pos - w->blk_off), w->blk_off) ? -1 : 0;
}

static int
is_tmp_name(const char *n, long *pid)
{
	const char *t = strstr(n, ".kc.tmp.");
	if (n[0] != '.' || !t)
		return 0;
	char *end;
	*pid = strtol(t + 8, &end, 10);
	return *end == 0;
}

// temporary files of writers that are gone
static void
remove_stale_tmp(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		long pid;
		if (!is_tmp_name(de->d_name, &pid))
			continue;
		if (pid == (long)getpid())
			continue; // ours: an open writer of this process
		if (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno != ESRCH))
			continue; // its writer is alive
		char p[4400];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		unlink(p);
	}
	if (d)
		closedir(d);
}

struct kc_writer *
kc_writer_new(const char *dir, const struct kc_key *key, int nkernels, char *err)
{
	if (nkernels < 0 || nkernels > MAX_KERNELS) {
		ad_err(err, "cache: %d kernels", nkernels);
		return NULL;
	}
	if (make_dir(dir, err))
		return NULL;
	remove_stale_tmp(dir);
	struct kc_writer *w = calloc(1, sizeof *w);
	if (!w || !(w->rk = calloc((size_t)nkernels + 1, sizeof *w->rk)) ||
	    !(w->have = calloc((size_t)nkernels + 1, 1)) || !(w->key = malloc(key->len + 1)) ||
	    !(w->blk = malloc(AD_HUGE_PAGE))) {
		if (w) {
			free(w->rk);
			free(w->have);
			free(w->key);
		}
		free(w);
		ad_err(err, "out of memory");
		return NULL;
	}
	memcpy(w->key, key->text, key->len);
	w->key_len = key->len;
	w->nkernels = nkernels;
	snprintf(w->dir, sizeof w->dir, "%s", dir);
	snprintf(w->tmp, sizeof w->tmp, "%s/.%s.kc.tmp.%ld", dir, key->name, (long)getpid());
	entry_path(w->final, sizeof w->final, dir, key->name);
	w->fd = open(w->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (w->fd < 0) {
		ad_err(err, "%s: %s", w->tmp, strerror(errno));
		free(w->rk);
		free(w->have);
		free(w->key);
		free(w->blk);
		free(w);
		return NULL;
	}
	// the header's page: written last (kc_writer_commit)
	memset(w->blk, 0, KC_ALIGN);
	w->pos = KC_ALIGN;
	return w;
}

int
kc_writer_add(struct kc_writer *w, int kernel, uint64_t mil_hash, const struct emu_const *c, int n, char *err)
{
	if (kernel < 0 || kernel >= w->nkernels || w->have[kernel] || n < 0)
		return ad_err(err, "cache: kernel %d added twice or out of range", kernel);
	if (w->nconsts + (uint32_t)n > w->capconsts) {
		uint32_t nc = w->capconsts ? w->capconsts * 2 : 64;
		while (nc < w->nconsts + (uint32_t)n)
			nc *= 2;
		struct rec_const *r = realloc(w->rc, nc * sizeof *r);
		if (!r)
			return ad_err(err, "out of memory");
		w->rc = r;
		w->capconsts = nc;
	}
	w->rk[kernel] = (struct rec_kernel){.mil_hash = mil_hash, .first = w->nconsts, .n = (uint32_t)n};
	for (int i = 0; i < n; i++) {
		const uint8_t *d = c[i].data;
		uint64_t off = (w->pos + KC_BUF_ALIGN - 1) / KC_BUF_ALIGN * KC_BUF_ALIGN;
		if (emit(w, d, c[i].bytes, off))
			return ad_err(err, "%s: %s", w->tmp, strerror(errno ? errno : EIO));
		w->rc[w->nconsts++] = (struct rec_const){.kernel = (uint32_t)kernel,
		                                         .weight = c[i].weight,
		                                         .kind = (uint32_t)c[i].kind,
		                                         .off = off,
		                                         .bytes = c[i].bytes,
		                                         .sample_sum = sample_sum(d, c[i].bytes),
		                                         .full_sum = kc_hash(d, c[i].bytes, 3)};
	}
	w->have[kernel] = 1;
	return 0;
}

static void
writer_free(struct kc_writer *w)
{
	free(w->blk);
	free(w->rk);
	free(w->have);
	free(w->rc);
	free(w->key);
	free(w);
}

void
kc_writer_abort(struct kc_writer *w)
{
	if (!w)
		return;
	close(w->fd);
	unlink(w->tmp);
	writer_free(w);
}

int
kc_writer_commit(struct kc_writer *w, uint64_t max_bytes, char *err)
{
	for (int i = 0; i < w->nkernels; i++)
		if (!w->have[i]) {
			ad_err(err, "cache: kernel %d was never added", i);
			kc_writer_abort(w);
			return -1;
		}
	size_t kb = (size_t)w->nkernels * sizeof *w->rk, cb = (size_t)w->nconsts * sizeof *w->rc;
	size_t tb = w->key_len + kb + cb;
	uint8_t *table = malloc(tb ? tb : 1);
	if (!table) {
		kc_writer_abort(w);
		return ad_err(err, "out of memory");
	}
	// the records first (at the table's aligned offset), the key text last
	memcpy(table, w->rk, kb);
	if (cb)
		memcpy(table + kb, w->rc, cb);
	memcpy(table + kb + cb, w->key, w->key_len);
	struct header h;
	memset(&h, 0, sizeof h);
	memcpy(h.magic, MAGIC, 8);
	h.format = KC_FORMAT;
	h.header_bytes = sizeof h;
	h.table_off = (w->pos + KC_ALIGN - 1) / KC_ALIGN * KC_ALIGN;
	h.table_bytes = tb;
	h.file_bytes = h.table_off + tb;
	h.key_bytes = (uint32_t)w->key_len;
	h.nkernels = (uint32_t)w->nkernels;
	h.nconsts = w->nconsts;
	h.table_sum = kc_hash(table, tb, 0x7462);
	h.header_sum = header_sum(&h);
	uint8_t page[KC_ALIGN];
	memset(page, 0, sizeof page);
	memcpy(page, &h, sizeof h);
	int rc = emit(w, table, tb, h.table_off) || emit_flush(w) || write_at(w->fd, page, sizeof page, 0) ||
	         fsync(w->fd);
	free(table);
	if (rc) {
		ad_err(err, "%s: %s", w->tmp, strerror(errno ? errno : EIO));
		kc_writer_abort(w);
		return -1;
	}
	close(w->fd);
	w->fd = -1;
	if (rename(w->tmp, w->final) != 0) {
		ad_err(err, "%s: %s", w->final, strerror(errno));
		unlink(w->tmp);
		writer_free(w);
		return -1;
	}
	int dfd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		fsync(dfd);
		close(dfd);
	}
	const char *name = strrchr(w->final, '/') + 1;
	char keep[4200];
	snprintf(keep, sizeof keep, "%s", name);
	char dir[4096];
	snprintf(dir, sizeof dir, "%s", w->dir);
	writer_free(w);
	return kc_evict(dir, max_bytes, keep, err) < 0 ? -1 : 0;
}

// --- the directory ---------------------------------------------------------------

static int
is_entry_name(const char *n)
{
	size_t L = strlen(n);
	return L > 3 && n[0] != '.' && !strcmp(n + L - 3, ".kc");
}

// the line of the key that starts with word
static void
key_line(const uint8_t *key, size_t n, const char *word, char *out, size_t cap)
{
	out[0] = 0;
	size_t wl = strlen(word);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		while (j < n && key[j] != '\n')
			j++;
		if (j - i > wl && !memcmp(key + i, word, wl) && key[i + wl] == ' ') {
			size_t l = j - i - wl - 1;
			if (l >= cap)
				l = cap - 1;
			memcpy(out, key + i + wl + 1, l);
			out[l] = 0;
			return;
		}
		i = j + 1;
	}
}

int
kc_list(const char *dir, void (*fn)(const struct kc_info *, void *), void *arg, char *err)
{
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return ad_err(err, "%s: %s", dir, strerror(errno));
	}
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		long pid;
		int tmp = is_tmp_name(de->d_name, &pid);
		if (!tmp && !is_entry_name(de->d_name))
			continue;
		struct kc_info in;
		memset(&in, 0, sizeof in);
		snprintf(in.name, sizeof in.name, "%s", de->d_name);
		in.temporary = tmp;
		char p[4400];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) != 0) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		in.bytes = (uint64_t)st.st_size;
		in.mtime = (int64_t)MTIM(st).tv_sec;
		struct header h;
		memset(&h, 0, sizeof h);
		uint8_t *table = NULL;
		char e[AD_ERRLEN];
		int ok = !tmp && read_table(fd, &h, &table, e) == 0;
		if (!memcmp(h.magic, MAGIC, 8))
			in.format = h.format;
		if (ok) {
			in.valid = 1;
			in.nkernels = (int)h.nkernels;
			key_line(table_key(table, &h), h.key_bytes, "model", in.model, sizeof in.model);
			key_line(table_key(table, &h), h.key_bytes, "options", in.options, sizeof in.options);
		}
		free(table);
		close(fd);
		if (fn)
			fn(&in, arg);
		n++;
	}
	closedir(d);
	return n;
}

struct evict_item {
	char name[256];
	uint64_t bytes;
	int64_t mtime;
	long mtime_ns;
};

static int
cmp_age(const void *a, const void *b)
{
	const struct evict_item *x = a, *y = b;
	if (x->mtime != y->mtime)
		return x->mtime < y->mtime ? -1 : 1;
	return (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
}

int
kc_evict(const char *dir, uint64_t max_bytes, const char *keep, char *err)
{
	if (!max_bytes)
		max_bytes = (uint64_t)KC_DEFAULT_MAX_MB << 20;
	DIR *d = opendir(dir);
	if (!d)
		return ad_err(err, "%s: %s", dir, strerror(errno));
	struct evict_item *it = NULL;
	int n = 0, cap = 0;
	uint64_t total = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!is_entry_name(de->d_name) || strlen(de->d_name) >= sizeof it->name)
			continue;
		char p[4400];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		if (stat(p, &st) != 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 16;
			struct evict_item *t = realloc(it, (size_t)cap * sizeof *t);
			if (!t) {
				free(it);
				closedir(d);
				return ad_err(err, "out of memory");
			}
			it = t;
		}
		snprintf(it[n].name, sizeof it[n].name, "%s", de->d_name);
		it[n].bytes = (uint64_t)st.st_size;
		it[n].mtime = (int64_t)MTIM(st).tv_sec;
		it[n].mtime_ns = MTIM(st).tv_nsec;
		total += it[n].bytes;
		n++;
	}
	closedir(d);
	if (n > 1)
		qsort(it, (size_t)n, sizeof *it, cmp_age);
	int removed = 0;
	for (int i = 0; i < n && total > max_bytes; i++) {
		if (keep && !strcmp(it[i].name, keep))
			continue;
		char p[4400];
		snprintf(p, sizeof p, "%s/%s", dir, it[i].name);
		if (unlink(p) == 0) {
			total -= it[i].bytes;
			removed++;
		}
	}
	free(it);
	return removed;
}

int
kc_clear(const char *dir, int *files, uint64_t *bytes, char *err)
{
	*files = 0;
	*bytes = 0;
	DIR *d = opendir(dir);
	if (!d) {
		if (errno == ENOENT)
			return 0;
		return ad_err(err, "%s: %s", dir, strerror(errno));
	}
	struct dirent *de;
	int rc = 0;
	while ((de = readdir(d))) {
		long pid;
		if (!is_entry_name(de->d_name) && !is_tmp_name(de->d_name, &pid))
			continue;
		char p[4400];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		if (stat(p, &st) != 0)
			continue;
		if (unlink(p) != 0) {
			rc = ad_err(err, "%s: %s", p, strerror(errno));
			continue;
		}
		(*files)++;
		*bytes += (uint64_t)st.st_size;
	}
	closedir(d);
	return rc;
}
