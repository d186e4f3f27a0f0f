// gguf.c - the GGUF reader: one validating pass over the bytes, then views.
//
// Everything untrusted is read through struct rd, which refuses to step past
// the end and names the byte offset when it does. Counts are checked against
// the bytes left (times the smallest possible element) before anything is
// allocated for them, so a hostile header cannot make us allocate more than a
// small multiple of the file size.
#include "gguf.h"
#include "wtype.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// arrays of arrays nest at most this deep (real files use one level)
#define GGUF_MAX_DEPTH 8

struct kv {
	char *key;
	size_t at; // byte offset of the entry
	enum gguf_vtype type;
	const uint8_t *val; // scalar value bytes
	struct gguf_str str;
	struct gguf_arr arr;
};

struct gguf {
	const uint8_t *base;
	size_t size;
	void *map; // non-NULL when we own a mapping of size bytes
	uint32_t version;
	size_t alignment;
	uint64_t data_off;

	int64_t n_kv;
	struct kv *kv;
	int64_t *kv_order; // indices sorted by key

	int64_t n_tensors;
	struct gguf_tensor *t;
	int64_t *t_order; // indices sorted by name

	// every allocation for keys, names and array indices, freed at close
	void **pool;
	size_t n_pool, cap_pool;
};

struct rd {
	const uint8_t *p;
	size_t size, pos;
	char *err;
	struct gguf *g;
};

// --- little-endian loads --------------------------------------------------

static uint16_t
ld16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t
ld32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t
ld64(const uint8_t *p)
{
	return (uint64_t)ld32(p) | (uint64_t)ld32(p + 4) << 32;
}

static const char *const vtype_names[GGUF_TYPE_COUNT] = {
	"uint8", "int8",   "uint16", "int16",  "uint32", "int32",   "float32",
	"bool",  "string", "array",  "uint64", "int64",  "float64",
};

size_t
gguf_vtype_size(enum gguf_vtype t)
{
	switch (t) {
	case GGUF_TYPE_UINT8:
	case GGUF_TYPE_INT8:
	case GGUF_TYPE_BOOL:
		return 1;
	case GGUF_TYPE_UINT16:
	case GGUF_TYPE_INT16:
		return 2;
	case GGUF_TYPE_UINT32:
	case GGUF_TYPE_INT32:
	case GGUF_TYPE_FLOAT32:
		return 4;
	case GGUF_TYPE_UINT64:
	case GGUF_TYPE_INT64:
	case GGUF_TYPE_FLOAT64:
		return 8;
	default:
		return 0; // string, array: variable
	}
}

// smallest encoding of one value of type t (for count checks)
static size_t
vtype_min_size(enum gguf_vtype t)
{
	if (t == GGUF_TYPE_STRING)
		return 8; // length
	if (t == GGUF_TYPE_ARRAY)
		return 12; // element type + count
	return gguf_vtype_size(t);
}

// a string array's index holds where every GGUF_STR_STRIDE-th element
// starts; gguf_arr_str walks at most GGUF_STR_STRIDE - 1 lengths from there
#define GGUF_STR_STRIDE 16

// --- the pool ---------------------------------------------------------------

static void *
pool_alloc(struct gguf *g, size_t n)
{
	if (g->n_pool == g->cap_pool) {
		size_t cap = g->cap_pool ? g->cap_pool * 2 : 64;
		void **p = realloc(g->pool, cap * sizeof *p);
		if (!p)
			return NULL;
		g->pool = p;
		g->cap_pool = cap;
	}
	void *m = calloc(1, n ? n : 1);
	if (m)
		g->pool[g->n_pool++] = m;
	return m;
}

// grow makes room for element i of a list of n elements of size sz that
// lives in the pool at *slot, doubling as it goes: memory follows what was
// actually parsed, never the count a header claims
static void *
grow(struct gguf *g, void *list, size_t *slot, uint64_t i, uint64_t n, size_t sz)
{
	// capacities run 16, 32, 64, ... capped at n
	if (list && (i < 16 || (i & (i - 1)) != 0))
		return list;
	uint64_t cap = list ? i * 2 : 16;
	if (cap > n)
		cap = n;
	if (!list) {
		void *m = pool_alloc(g, (size_t)cap * sz);
		if (m)
			*slot = g->n_pool - 1;
		return m;
	}
	void *m = realloc(list, (size_t)cap * sz);
	if (!m)
		return NULL;
	memset((char *)m + i * sz, 0, (size_t)(cap - i) * sz);
	g->pool[*slot] = m;
	return m;
}

// --- the cursor -------------------------------------------------------------

static size_t
left(const struct rd *r)
{
	return r->size - r->pos;
}

static int
need(struct rd *r, size_t n, const char *what)
{
	if (n > left(r))
		return ad_err(r->err, "truncated: %s needs %zu bytes at offset %zu, only %zu left", what, n, r->pos,
		              left(r));
	return 0;
}

static int
rd_u32(struct rd *r, uint32_t *v, const char *what)
{
	if (need(r, 4, what))
		return -1;
	*v = ld32(r->p + r->pos);
	r->pos += 4;
	return 0;
}

static int
rd_u64(struct rd *r, uint64_t *v, const char *what)
{
	if (need(r, 8, what))
		return -1;
	*v = ld64(r->p + r->pos);
	r->pos += 8;
	return 0;
}

static int
rd_str(struct rd *r, struct gguf_str *s, const char *what)
{
	size_t at = r->pos;
	uint64_t len;
	if (rd_u64(r, &len, what))
		return -1;
	if (len > left(r))
		return ad_err(r->err, "%s at offset %zu has length %" PRIu64 ", more than the %zu bytes left", what, at,
		              len, left(r));
	s->ptr = (const char *)r->p + r->pos;
	s->len = len;
	r->pos += (size_t)len;
	return 0;
}

// a NUL-terminated copy of a name; names with a NUL inside are refused so
// that the copy means the same as the view
static char *
dup_name(struct rd *r, struct gguf_str s, size_t at, const char *what)
{
	if (memchr(s.ptr, 0, (size_t)s.len)) {
		ad_err(r->err, "%s at offset %zu contains a NUL byte", what, at);
		return NULL;
	}
	char *c = pool_alloc(r->g, (size_t)s.len + 1);
	if (!c) {
		ad_err(r->err, "out of memory for %s at offset %zu", what, at);
		return NULL;
	}
	memcpy(c, s.ptr, (size_t)s.len);
	return c;
}

// names go into one-line error messages: control bytes become '?' and long
// names are cut
#define NAMEBUF 100

static const char *
esc(const char *s, char *buf)
{
	size_t i = 0;
	for (; s[i] && i < NAMEBUF - 4; i++)
		buf[i] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	if (s[i])
		memcpy(buf + i, "...", 3), i += 3;
	buf[i] = 0;
	return buf;
}

// --- values -----------------------------------------------------------------

static int rd_arr(struct rd *r, struct gguf_arr *a, int depth);

static int
rd_type(struct rd *r, enum gguf_vtype *t, const char *what)
{
	size_t at = r->pos;
	uint32_t v;
	if (rd_u32(r, &v, what))
		return -1;
	if (v >= GGUF_TYPE_COUNT)
		return ad_err(r->err, "unknown %s %" PRIu32 " at offset %zu", what, v, at);
	*t = (enum gguf_vtype)v;
	return 0;
}

static int
rd_arr(struct rd *r, struct gguf_arr *a, int depth)
{
	size_t at = r->pos;
	if (depth >= GGUF_MAX_DEPTH)
		return ad_err(r->err, "arrays nested deeper than %d at offset %zu", GGUF_MAX_DEPTH, at);
	if (rd_type(r, &a->type, "array element type"))
		return -1;
	if (rd_u64(r, &a->n, "array length"))
		return -1;
	size_t min = vtype_min_size(a->type);
	if (a->n > left(r) / min)
		return ad_err(r->err,
		              "array at offset %zu claims %" PRIu64
		              " %s elements, more than the %zu bytes left can hold",
		              at, a->n, vtype_names[a->type], left(r));
	a->data = r->p + r->pos;
	a->priv = NULL;
	size_t slot = 0;
	if (a->type == GGUF_TYPE_STRING) {
		// where every GGUF_STR_STRIDE-th string starts (a vocabulary's
		// tokens held as views would be 16 bytes each, in every process
		// that opens the file)
		uint64_t *at_k = NULL, nk = (a->n + GGUF_STR_STRIDE - 1) / GGUF_STR_STRIDE;
		for (uint64_t i = 0; i < a->n; i++) {
			if (i % GGUF_STR_STRIDE == 0) {
				uint64_t k = i / GGUF_STR_STRIDE;
				if (!(at_k = grow(r->g, at_k, &slot, k, nk, sizeof *at_k)))
					return ad_err(r->err, "out of memory for the array at offset %zu", at);
				at_k[k] = (uint64_t)(r->p + r->pos - a->data);
			}
			struct gguf_str s;
			if (rd_str(r, &s, "array string"))
				return -1;
		}
		a->priv = at_k;
	} else if (a->type == GGUF_TYPE_ARRAY) {
		struct gguf_arr *s = NULL;
		for (uint64_t i = 0; i < a->n; i++) {
			if (!(s = grow(r->g, s, &slot, i, a->n, sizeof *s)))
				return ad_err(r->err, "out of memory for the array at offset %zu", at);
			if (rd_arr(r, &s[i], depth + 1))
				return -1;
		}
		a->priv = s;
	} else {
		r->pos += (size_t)a->n * min; // checked above
	}
	return 0;
}

static int
rd_kv(struct rd *r, struct kv *kv, int64_t i)
{
	size_t at = r->pos;
	struct gguf_str key;
	kv->at = at;
	if (rd_str(r, &key, "key"))
		return ad_err_prefix(r->err, "key %" PRId64, i);
	if (!(kv->key = dup_name(r, key, at, "key")))
		return -1;
	char nm[NAMEBUF];
	if (rd_type(r, &kv->type, "value type"))
		return ad_err_prefix(r->err, "key '%s'", esc(kv->key, nm));
	kv->val = r->p + r->pos;
	int rc = 0;
	if (kv->type == GGUF_TYPE_STRING)
		rc = rd_str(r, &kv->str, "string value");
	else if (kv->type == GGUF_TYPE_ARRAY)
		rc = rd_arr(r, &kv->arr, 0);
	else if (!(rc = need(r, gguf_vtype_size(kv->type), "value")))
		r->pos += gguf_vtype_size(kv->type);
	return rc ? ad_err_prefix(r->err, "key '%s'", esc(kv->key, nm)) : 0;
}

// --- tensors ----------------------------------------------------------------

static int
rd_tensor(struct rd *r, struct gguf_tensor *t, int64_t i)
{
	size_t at = r->pos;
	struct gguf_str name;
	if (rd_str(r, &name, "tensor name"))
		return ad_err_prefix(r->err, "tensor %" PRId64, i);
	if (!(t->name = dup_name(r, name, at, "tensor name")))
		return -1;
	char nmbuf[NAMEBUF];
	const char *nm = esc(t->name, nmbuf);
	size_t dims_at = r->pos;
	if (rd_u32(r, &t->n_dims, "tensor n_dims"))
		return ad_err_prefix(r->err, "tensor '%s'", nm);
	if (t->n_dims > GGUF_MAX_DIMS)
		return ad_err(r->err, "tensor '%s' at offset %zu has %" PRIu32 " dimensions (at most %d)", nm, dims_at,
		              t->n_dims, GGUF_MAX_DIMS);
	int64_t total = 1;
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < t->n_dims; d++) {
		size_t ne_at = r->pos;
		uint64_t v;
		if (rd_u64(r, &v, "tensor dimension"))
			return ad_err_prefix(r->err, "tensor '%s'", nm);
		int64_t ne = (int64_t)v;
		if (ne <= 0)
			return ad_err(r->err,
			              "tensor '%s' dimension %" PRIu32 " at offset %zu is %" PRId64
			              " (must be positive)",
			              nm, d, ne_at, ne);
		if (total > INT64_MAX / ne)
			return ad_err(r->err,
			              "tensor '%s' element count overflows at dimension %" PRIu32 " (offset %zu)", nm,
			              d, ne_at);
		total *= ne;
		t->ne[d] = ne;
	}
	size_t type_at = r->pos;
	if (rd_u32(r, &t->type, "tensor type"))
		return ad_err_prefix(r->err, "tensor '%s'", nm);
	const char *tn = ad_type_name(t->type);
	if (!tn)
		return ad_err(r->err, "tensor '%s' at offset %zu has unknown type id %" PRIu32, nm, type_at, t->type);
	int64_t blk = ad_type_block_size(t->type);
	if (blk == 0)
		return ad_err(r->err, "tensor '%s' at offset %zu has type %s, which this reader cannot size", nm,
		              type_at, tn);
	size_t row;
	if (t->ne[0] % blk != 0)
		return ad_err(r->err,
		              "tensor '%s' (%s) at offset %zu: ne[0]=%" PRId64
		              " is not a multiple of the block size %" PRId64,
		              nm, tn, at, t->ne[0], blk);
	if (ad_type_row_bytes(t->type, t->ne[0], &row))
		return ad_err(r->err, "tensor '%s' at offset %zu: row size overflows", nm, at);
	size_t nb = row;
	for (int d = 1; d < GGUF_MAX_DIMS; d++) {
		if (nb > SIZE_MAX / (uint64_t)t->ne[d])
			return ad_err(r->err, "tensor '%s' at offset %zu: byte size overflows", nm, at);
		nb *= (size_t)t->ne[d];
	}
	t->nbytes = nb;
	if (rd_u64(r, &t->offset, "tensor offset"))
		return ad_err_prefix(r->err, "tensor '%s'", nm);
	return 0;
}

// --- sorting helpers for duplicate checks and look-ups ----------------------

static int
cmp_kv(const void *a, const void *b, void *ctx)
{
	const struct kv *kv = ctx;
	return strcmp(kv[*(const int64_t *)a].key, kv[*(const int64_t *)b].key);
}

static int
cmp_tname(const void *a, const void *b, void *ctx)
{
	const struct gguf_tensor *t = ctx;
	return strcmp(t[*(const int64_t *)a].name, t[*(const int64_t *)b].name);
}

static int
cmp_toff(const void *a, const void *b, void *ctx)
{
	const struct gguf_tensor *t = ctx;
	uint64_t x = t[*(const int64_t *)a].offset, y = t[*(const int64_t *)b].offset;
	return x < y ? -1 : x > y;
}

static void
sift(int64_t *o, int64_t i, int64_t n, int (*cmp)(const void *, const void *, void *), void *items)
{
	for (;;) {
		int64_t big = i, l = 2 * i + 1, r = l + 1;
		if (l < n && cmp(&o[l], &o[big], items) > 0)
			big = l;
		if (r < n && cmp(&o[r], &o[big], items) > 0)
			big = r;
		if (big == i)
			return;
		int64_t x = o[i];
		o[i] = o[big];
		o[big] = x;
		i = big;
	}
}

static int64_t *
order(struct gguf *g, int64_t n, void *items, int (*cmp)(const void *, const void *, void *))
{
	int64_t *o = pool_alloc(g, (size_t)n * sizeof *o);
	if (!o)
		return NULL;
	for (int64_t i = 0; i < n; i++)
		o[i] = i;
	// heap sort: qsort_r's signature differs between glibc and macOS
	for (int64_t i = n / 2 - 1; i >= 0; i--)
		sift(o, i, n, cmp, items);
	for (int64_t end = n - 1; end > 0; end--) {
		int64_t x = o[0];
		o[0] = o[end];
		o[end] = x;
		sift(o, 0, end, cmp, items);
	}
	return o;
}

// --- the whole file ---------------------------------------------------------

static int
parse(struct gguf *g, char *err)
{
	char nm[NAMEBUF], nm2[NAMEBUF];
	struct rd r = {.p = g->base, .size = g->size, .err = err, .g = g};

	if (g->size < 4 || memcmp(g->base, GGUF_MAGIC, 4) != 0) {
		static const char lfs[] = "version https://git-lfs";
		if (g->size >= 4 && memcmp(g->base, "FUGG", 4) == 0)
			return ad_err(err, "big-endian GGUF (magic FUGG) is unsupported");
		if (g->size >= sizeof lfs - 1 && memcmp(g->base, lfs, sizeof lfs - 1) == 0)
			return ad_err(err, "a Git LFS pointer, not the model itself: fetch the file (git lfs pull)");
		if (g->size == 0)
			return ad_err(err, "an empty file, not a GGUF");
		return ad_err(err, "not a GGUF file (no 'GGUF' magic at offset 0)");
	}
	r.pos = 4;
	uint32_t ver;
	if (rd_u32(&r, &ver, "version"))
		return -1;
	if (ver == 1)
		return ad_err(err, "GGUF v1 (32-bit counts) is unsupported; convert the file to v3");
	if ((ver & 0xffff) == 0 && (ver >> 16) != 0) {
		uint32_t sw = __builtin_bswap32(ver);
		return ad_err(err,
		              "big-endian GGUF (version field reads 0x%08" PRIx32 ", byte-swapped %" PRIu32
		              ") is unsupported",
		              ver, sw);
	}
	if (ver != 2 && ver != 3)
		return ad_err(err, "unsupported GGUF version %" PRIu32 " at offset 4 (only 2 and 3 are read)", ver);
	g->version = ver;

	uint64_t n_tensors, n_kv;
	if (rd_u64(&r, &n_tensors, "tensor count") || rd_u64(&r, &n_kv, "key count"))
		return -1;
	// smallest kv: empty key (8) + type (4) + one byte; smallest tensor
	// info: empty name (8) + n_dims (4) + type (4) + offset (8)
	if (n_kv > left(&r) / 13)
		return ad_err(err, "key count %" PRIu64 " at offset 16 is more than the %zu bytes left can hold", n_kv,
		              left(&r));
	if (n_tensors > left(&r) / 24 || n_kv * 13 + n_tensors * 24 > left(&r))
		return ad_err(err, "tensor count %" PRIu64 " at offset 8 is more than the %zu bytes left can hold",
		              n_tensors, left(&r));
	g->n_kv = (int64_t)n_kv;
	g->n_tensors = (int64_t)n_tensors;

	size_t slot = 0;
	for (int64_t i = 0; i < g->n_kv; i++) {
		if (!(g->kv = grow(g, g->kv, &slot, (uint64_t)i, n_kv, sizeof *g->kv)))
			return ad_err(err, "out of memory at key %" PRId64, i);
		if (rd_kv(&r, &g->kv[i], i))
			return -1;
	}
	if (!(g->kv_order = order(g, g->n_kv, g->kv, cmp_kv)))
		return ad_err(err, "out of memory");
	for (int64_t i = 1; i < g->n_kv; i++)
		if (!strcmp(g->kv[g->kv_order[i - 1]].key, g->kv[g->kv_order[i]].key))
			return ad_err(err, "duplicate key '%s' at offsets %zu and %zu",
			              esc(g->kv[g->kv_order[i]].key, nm), g->kv[g->kv_order[i - 1]].at,
			              g->kv[g->kv_order[i]].at);

	g->alignment = GGUF_DEFAULT_ALIGNMENT;
	int64_t ai = gguf_find_key(g, "general.alignment");
	if (ai >= 0) {
		const struct kv *kv = &g->kv[ai];
		if (kv->type != GGUF_TYPE_UINT32)
			return ad_err(err, "general.alignment at offset %zu has type %s, not uint32",
			              (size_t)(kv->val - g->base), vtype_names[kv->type]);
		uint32_t a = ld32(kv->val);
		if (a == 0 || (a & (a - 1)) != 0)
			return ad_err(err,
			              "general.alignment at offset %zu is %" PRIu32 ", not a non-zero power of two",
			              (size_t)(kv->val - g->base), a);
		g->alignment = a;
	}

	if (g->n_tensors > (int64_t)(left(&r) / 24))
		return ad_err(err,
		              "tensor count %" PRId64 " is more than the %zu bytes left after the metadata can hold",
		              g->n_tensors, left(&r));
	for (int64_t i = 0; i < g->n_tensors; i++) {
		if (!(g->t = grow(g, g->t, &slot, (uint64_t)i, n_tensors, sizeof *g->t)))
			return ad_err(err, "out of memory at tensor %" PRId64, i);
		if (rd_tensor(&r, &g->t[i], i))
			return -1;
	}
	if (!(g->t_order = order(g, g->n_tensors, g->t, cmp_tname)))
		return ad_err(err, "out of memory");
	for (int64_t i = 1; i < g->n_tensors; i++)
		if (!strcmp(g->t[g->t_order[i - 1]].name, g->t[g->t_order[i]].name))
			return ad_err(err, "duplicate tensor name '%s' (tensors %" PRId64 " and %" PRId64 ")",
			              esc(g->t[g->t_order[i]].name, nm), g->t_order[i - 1], g->t_order[i]);

	// the data section starts at the next multiple of the alignment; a file
	// without tensors may end before that padding
	size_t end = r.pos, pad = (g->alignment - end % g->alignment) % g->alignment;
	g->data_off = (uint64_t)end + pad;
	if (g->n_tensors == 0)
		return 0;
	if (pad > left(&r))
		return ad_err(err,
		              "data section would start at offset %" PRIu64 ", past the end of the file (%zu bytes)",
		              g->data_off, g->size);
	uint64_t avail = g->size - g->data_off;
	for (int64_t i = 0; i < g->n_tensors; i++) {
		struct gguf_tensor *t = &g->t[i];
		if (t->offset % g->alignment != 0)
			return ad_err(err, "tensor '%s' data offset %" PRIu64 " is not a multiple of the alignment %zu",
			              esc(t->name, nm), t->offset, g->alignment);
		if (t->offset > avail || t->nbytes > avail - t->offset)
			return ad_err(err,
			              "tensor '%s' data [%" PRIu64
			              ", +%zu) lies outside the file (data section at offset %" PRIu64 " holds %" PRIu64
			              " bytes)",
			              esc(t->name, nm), t->offset, t->nbytes, g->data_off, avail);
		t->data = g->base + g->data_off + t->offset;
	}
	int64_t *by_off = order(g, g->n_tensors, g->t, cmp_toff);
	if (!by_off)
		return ad_err(err, "out of memory");
	for (int64_t i = 1; i < g->n_tensors; i++) {
		const struct gguf_tensor *a = &g->t[by_off[i - 1]], *b = &g->t[by_off[i]];
		if (a->offset + a->nbytes > b->offset) // both inside the file: no overflow
			return ad_err(err, "tensor '%s' data [%" PRIu64 ", +%zu) overlaps tensor '%s' at %" PRIu64,
			              esc(a->name, nm), a->offset, a->nbytes, esc(b->name, nm2), b->offset);
	}
	return 0;
}

static struct gguf *
open_buf(const void *buf, size_t n, void *map, char *err)
{
	struct gguf *g = calloc(1, sizeof *g);
	if (!g) {
		if (map)
			munmap(map, n);
		ad_err(err, "out of memory");
		return NULL;
	}
	g->base = buf;
	g->size = n;
	g->map = map;
	if (parse(g, err)) {
		gguf_close(g);
		return NULL;
	}
	return g;
}

struct gguf *
gguf_open_memory(const void *buf, size_t n, char *err)
{
	if (!buf && n) {
		ad_err(err, "NULL buffer");
		return NULL;
	}
	return open_buf(buf ? buf : "", n, NULL, err);
}

struct gguf *
gguf_open(const char *path, char *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ad_err(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		ad_err(err, "%s: %s", path, strerror(errno));
		close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		ad_err(err, "%s: not a regular file", path);
		close(fd);
		return NULL;
	}
	size_t n = (size_t)st.st_size;
	void *map = NULL;
	if (n > 0) {
		map = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
		if (map == MAP_FAILED) {
			ad_err(err, "%s: mmap: %s", path, strerror(errno));
			close(fd);
			return NULL;
		}
	}
	close(fd);
	// open_buf owns the mapping from here on
	struct gguf *g = open_buf(map ? map : "", n, map, err);
	if (!g)
		ad_err_prefix(err, "%s", path);
	return g;
}

void
gguf_close(struct gguf *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n_pool; i++)
		free(g->pool[i]);
	free(g->pool);
	if (g->map)
		munmap(g->map, g->size);
	free(g);
}

uint32_t
gguf_version(const struct gguf *g)
{
	return g->version;
}

size_t
gguf_alignment(const struct gguf *g)
{
	return g->alignment;
}

size_t
gguf_file_size(const struct gguf *g)
{
	return g->size;
}

const void *
gguf_file_map(const struct gguf *g, size_t *len, uint64_t *data_off)
{
	if (len)
		*len = g->map ? g->size : 0;
	if (data_off)
		*data_off = g->data_off;
	return g->map;
}

// --- metadata ---------------------------------------------------------------

int64_t
gguf_n_kv(const struct gguf *g)
{
	return g->n_kv;
}

static const struct kv *
kv_at(const struct gguf *g, int64_t i)
{
	return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const char *
gguf_kv_key(const struct gguf *g, int64_t i)
{
	const struct kv *kv = kv_at(g, i);
	return kv ? kv->key : NULL;
}

enum gguf_vtype
gguf_kv_type(const struct gguf *g, int64_t i)
{
	const struct kv *kv = kv_at(g, i);
	return kv ? kv->type : GGUF_TYPE_COUNT;
}

int64_t
gguf_find_key(const struct gguf *g, const char *key)
{
	int64_t lo = 0, hi = g->n_kv;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		int c = strcmp(g->kv[g->kv_order[mid]].key, key);
		if (c == 0)
			return g->kv_order[mid];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

// load_int reads an integer of type t at p as either a negative value (*s)
// or a non-negative one (*u). Returns -1 for non-integer types.
static int
load_int(enum gguf_vtype t, const uint8_t *p, int *neg, int64_t *s, uint64_t *u)
{
	int64_t v;
	switch (t) {
	case GGUF_TYPE_UINT8:
		*neg = 0;
		*u = p[0];
		return 0;
	case GGUF_TYPE_UINT16:
		*neg = 0;
		*u = ld16(p);
		return 0;
	case GGUF_TYPE_UINT32:
		*neg = 0;
		*u = ld32(p);
		return 0;
	case GGUF_TYPE_UINT64:
		*neg = 0;
		*u = ld64(p);
		return 0;
	case GGUF_TYPE_INT8:
		v = (int8_t)p[0];
		break;
	case GGUF_TYPE_INT16:
		v = (int16_t)ld16(p);
		break;
	case GGUF_TYPE_INT32:
		v = (int32_t)ld32(p);
		break;
	case GGUF_TYPE_INT64:
		v = (int64_t)ld64(p);
		break;
	default:
		return -1;
	}
	*neg = v < 0;
	if (v < 0)
		*s = v;
	else
		*u = (uint64_t)v;
	return 0;
}

static int
to_u32(enum gguf_vtype t, const uint8_t *p, uint32_t *out)
{
	int neg;
	int64_t s;
	uint64_t u;
	if (load_int(t, p, &neg, &s, &u) || neg || u > UINT32_MAX)
		return -1;
	*out = (uint32_t)u;
	return 0;
}

static int
to_i64(enum gguf_vtype t, const uint8_t *p, int64_t *out)
{
	int neg;
	int64_t s;
	uint64_t u;
	if (load_int(t, p, &neg, &s, &u))
		return -1;
	if (neg) {
		*out = s;
		return 0;
	}
	if (u > INT64_MAX)
		return -1;
	*out = (int64_t)u;
	return 0;
}

static int
to_f32(enum gguf_vtype t, const uint8_t *p, float *out)
{
	if (t == GGUF_TYPE_FLOAT32) {
		uint32_t b = ld32(p);
		memcpy(out, &b, 4);
		return 0;
	}
	if (t == GGUF_TYPE_FLOAT64) {
		uint64_t b = ld64(p);
		double d;
		memcpy(&d, &b, 8);
		if (isfinite(d) && fabs(d) > FLT_MAX)
			return -1;
		*out = (float)d;
		return 0;
	}
	return -1;
}

int
gguf_kv_u32(const struct gguf *g, int64_t i, uint32_t *out)
{
	const struct kv *kv = kv_at(g, i);
	return kv ? to_u32(kv->type, kv->val, out) : -1;
}

int
gguf_kv_i64(const struct gguf *g, int64_t i, int64_t *out)
{
	const struct kv *kv = kv_at(g, i);
	return kv ? to_i64(kv->type, kv->val, out) : -1;
}

int
gguf_kv_f32(const struct gguf *g, int64_t i, float *out)
{
	const struct kv *kv = kv_at(g, i);
	return kv ? to_f32(kv->type, kv->val, out) : -1;
}

int
gguf_kv_str(const struct gguf *g, int64_t i, struct gguf_str *out)
{
	const struct kv *kv = kv_at(g, i);
	if (!kv || kv->type != GGUF_TYPE_STRING)
		return -1;
	*out = kv->str;
	return 0;
}

int
gguf_kv_arr(const struct gguf *g, int64_t i, struct gguf_arr *out)
{
	const struct kv *kv = kv_at(g, i);
	if (!kv || kv->type != GGUF_TYPE_ARRAY)
		return -1;
	*out = kv->arr;
	return 0;
}

int
gguf_get_u32(const struct gguf *g, const char *key, uint32_t *out)
{
	return gguf_kv_u32(g, gguf_find_key(g, key), out);
}

int
gguf_get_i64(const struct gguf *g, const char *key, int64_t *out)
{
	return gguf_kv_i64(g, gguf_find_key(g, key), out);
}

int
gguf_get_f32(const struct gguf *g, const char *key, float *out)
{
	return gguf_kv_f32(g, gguf_find_key(g, key), out);
}

int
gguf_get_bool(const struct gguf *g, const char *key, int *out)
{
	const struct kv *kv = kv_at(g, gguf_find_key(g, key));
	if (!kv || kv->type != GGUF_TYPE_BOOL)
		return -1;
	*out = kv->val[0] != 0;
	return 0;
}

int
gguf_get_str(const struct gguf *g, const char *key, struct gguf_str *out)
{
	return gguf_kv_str(g, gguf_find_key(g, key), out);
}

int
gguf_get_arr(const struct gguf *g, const char *key, struct gguf_arr *out)
{
	return gguf_kv_arr(g, gguf_find_key(g, key), out);
}

// --- array elements ---------------------------------------------------------

int
gguf_arr_i64(const struct gguf_arr *a, uint64_t i, int64_t *out)
{
	if (i >= a->n)
		return -1;
	size_t sz = gguf_vtype_size(a->type);
	return sz ? to_i64(a->type, a->data + i * sz, out) : -1;
}

int
gguf_arr_f32(const struct gguf_arr *a, uint64_t i, float *out)
{
	if (i >= a->n)
		return -1;
	size_t sz = gguf_vtype_size(a->type);
	return sz ? to_f32(a->type, a->data + i * sz, out) : -1;
}

int
gguf_arr_str(const struct gguf_arr *a, uint64_t i, struct gguf_str *out)
{
	if (i >= a->n || a->type != GGUF_TYPE_STRING || !a->priv)
		return -1;
	// from the last checkpoint, over lengths the reader has checked
	const uint8_t *p = a->data + ((const uint64_t *)a->priv)[i / GGUF_STR_STRIDE];
	for (uint64_t j = i % GGUF_STR_STRIDE; j; j--)
		p += 8 + ld64(p);
	out->ptr = (const char *)p + 8;
	out->len = ld64(p);
	return 0;
}

int
gguf_arr_sub(const struct gguf_arr *a, uint64_t i, struct gguf_arr *out)
{
	if (i >= a->n || a->type != GGUF_TYPE_ARRAY || !a->priv)
		return -1;
	*out = ((const struct gguf_arr *)a->priv)[i];
	return 0;
}

int
gguf_str_eq(struct gguf_str s, const char *cstr)
{
	size_t n = strlen(cstr);
	return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

// --- tensors ----------------------------------------------------------------

int64_t
gguf_n_tensors(const struct gguf *g)
{
	return g->n_tensors;
}

const struct gguf_tensor *
gguf_tensor_at(const struct gguf *g, int64_t i)
{
	return i >= 0 && i < g->n_tensors ? &g->t[i] : NULL;
}

const struct gguf_tensor *
gguf_find_tensor(const struct gguf *g, const char *name)
{
	int64_t lo = 0, hi = g->n_tensors;
	while (lo < hi) {
		int64_t mid = lo + (hi - lo) / 2;
		int c = strcmp(g->t[g->t_order[mid]].name, name);
		if (c == 0)
			return &g->t[g->t_order[mid]];
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}
