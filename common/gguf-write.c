// gguf-write.c - the GGUF v3 writer: metadata is encoded at the time of the
// call into small byte buffers; serialising concatenates them, then the
// tensor infos and the tensor data, each tensor padded to the alignment.
#include "gguf.h"
#include "wtype.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct buf {
	uint8_t *p;
	size_t n, cap;
	int bad; // out of memory or misuse: the result is unusable
};

struct gguf_warr {
	enum gguf_vtype type;
	uint64_t n;
	struct buf b; // encoded elements
};

struct wkv {
	char *key;
	struct buf val; // type + encoded value
};

struct wtensor {
	char *name;
	uint32_t type, n_dims;
	int64_t ne[GGUF_MAX_DIMS];
	void *data;
	size_t nbytes;
};

struct gguf_writer {
	struct wkv *kv;
	size_t n_kv, cap_kv;
	struct wtensor *t;
	size_t n_t, cap_t;
	uint32_t alignment;
	int bad;
};

static void
put(struct buf *b, const void *p, size_t n)
{
	if (b->bad)
		return;
	if (n > SIZE_MAX - b->n) {
		b->bad = 1;
		return;
	}
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n)
			cap = cap > SIZE_MAX / 2 ? b->n + n : cap * 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q) {
			b->bad = 1;
			return;
		}
		b->p = q;
		b->cap = cap;
	}
	if (n)
		memcpy(b->p + b->n, p, n);
	b->n += n;
}

static void
put_le(struct buf *b, uint64_t v, int bytes)
{
	uint8_t x[8];
	for (int i = 0; i < bytes; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	put(b, x, (size_t)bytes);
}

static void
put_str(struct buf *b, const char *s)
{
	size_t n = strlen(s);
	put_le(b, n, 8);
	put(b, s, n);
}

static int
scalar_size(enum gguf_vtype t)
{
	return (int)gguf_vtype_size(t);
}

// v is one value in host representation
static void
put_scalar(struct buf *b, enum gguf_vtype t, const void *v)
{
	int sz = scalar_size(t);
	uint64_t x = 0;
	switch (sz) {
	case 1: {
		uint8_t y;
		memcpy(&y, v, 1);
		x = y;
		break;
	}
	case 2: {
		uint16_t y;
		memcpy(&y, v, 2);
		x = y;
		break;
	}
	case 4: {
		uint32_t y;
		memcpy(&y, v, 4);
		x = y;
		break;
	}
	case 8:
		memcpy(&x, v, 8);
		break;
	default:
		b->bad = 1;
		return;
	}
	if (t == GGUF_TYPE_BOOL)
		x = x != 0;
	put_le(b, x, sz);
}

// --- the writer -------------------------------------------------------------

struct gguf_writer *
gguf_writer_new(void)
{
	struct gguf_writer *w = calloc(1, sizeof *w);
	if (w)
		w->alignment = GGUF_DEFAULT_ALIGNMENT;
	return w;
}

void
gguf_writer_free(struct gguf_writer *w)
{
	if (!w)
		return;
	for (size_t i = 0; i < w->n_kv; i++) {
		free(w->kv[i].key);
		free(w->kv[i].val.p);
	}
	for (size_t i = 0; i < w->n_t; i++) {
		free(w->t[i].name);
		free(w->t[i].data);
	}
	free(w->kv);
	free(w->t);
	free(w);
}

// set_kv takes val; a key set twice keeps its first position, last value
static void
set_kv(struct gguf_writer *w, const char *key, struct buf val)
{
	if (val.bad) {
		free(val.p);
		w->bad = 1;
		return;
	}
	for (size_t i = 0; i < w->n_kv; i++) {
		if (!strcmp(w->kv[i].key, key)) {
			free(w->kv[i].val.p);
			w->kv[i].val = val;
			return;
		}
	}
	if (w->n_kv == w->cap_kv) {
		size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
		struct wkv *p = realloc(w->kv, cap * sizeof *p);
		if (!p) {
			free(val.p);
			w->bad = 1;
			return;
		}
		w->kv = p;
		w->cap_kv = cap;
	}
	char *k = strdup(key);
	if (!k) {
		free(val.p);
		w->bad = 1;
		return;
	}
	w->kv[w->n_kv++] = (struct wkv){k, val};
}

void
gguf_writer_val(struct gguf_writer *w, const char *key, enum gguf_vtype type, const void *v)
{
	struct buf b = {0};
	put_le(&b, (uint32_t)type, 4);
	put_scalar(&b, type, v);
	set_kv(w, key, b);
}

void
gguf_writer_set_alignment(struct gguf_writer *w, uint32_t alignment)
{
	if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
		w->bad = 1;
		return;
	}
	w->alignment = alignment;
	gguf_writer_u32(w, "general.alignment", alignment);
}

void
gguf_writer_u32(struct gguf_writer *w, const char *key, uint32_t v)
{
	gguf_writer_val(w, key, GGUF_TYPE_UINT32, &v);
}

void
gguf_writer_i32(struct gguf_writer *w, const char *key, int32_t v)
{
	gguf_writer_val(w, key, GGUF_TYPE_INT32, &v);
}

void
gguf_writer_u64(struct gguf_writer *w, const char *key, uint64_t v)
{
	gguf_writer_val(w, key, GGUF_TYPE_UINT64, &v);
}

void
gguf_writer_f32(struct gguf_writer *w, const char *key, float v)
{
	gguf_writer_val(w, key, GGUF_TYPE_FLOAT32, &v);
}

void
gguf_writer_bool(struct gguf_writer *w, const char *key, int v)
{
	uint8_t b = v != 0;
	gguf_writer_val(w, key, GGUF_TYPE_BOOL, &b);
}

void
gguf_writer_str(struct gguf_writer *w, const char *key, const char *v)
{
	struct buf b = {0};
	put_le(&b, GGUF_TYPE_STRING, 4);
	put_str(&b, v);
	set_kv(w, key, b);
}

void
gguf_writer_arr(struct gguf_writer *w, const char *key, enum gguf_vtype type, const void *data, uint64_t n)
{
	struct gguf_warr *a = gguf_warr_new(type);
	if (!a) {
		w->bad = 1;
		return;
	}
	int sz = scalar_size(type);
	for (uint64_t i = 0; i < n && !a->b.bad; i++)
		gguf_warr_push(a, (const uint8_t *)data + i * (uint64_t)sz);
	if (!sz && n)
		a->b.bad = 1;
	gguf_writer_warr(w, key, a);
}

void
gguf_writer_arr_str(struct gguf_writer *w, const char *key, const char *const *v, uint64_t n)
{
	struct gguf_warr *a = gguf_warr_new(GGUF_TYPE_STRING);
	if (!a) {
		w->bad = 1;
		return;
	}
	for (uint64_t i = 0; i < n; i++)
		gguf_warr_push_str(a, v[i]);
	gguf_writer_warr(w, key, a);
}

// --- array builder ------------------------------------------------------------

struct gguf_warr *
gguf_warr_new(enum gguf_vtype type)
{
	struct gguf_warr *a = calloc(1, sizeof *a);
	if (a) {
		a->type = type;
		a->b.bad = (unsigned)type >= GGUF_TYPE_COUNT;
	}
	return a;
}

void
gguf_warr_free(struct gguf_warr *a)
{
	if (a) {
		free(a->b.p);
		free(a);
	}
}

void
gguf_warr_push(struct gguf_warr *a, const void *v)
{
	if (!scalar_size(a->type)) {
		a->b.bad = 1;
		return;
	}
	put_scalar(&a->b, a->type, v);
	a->n++;
}

void
gguf_warr_push_str(struct gguf_warr *a, const char *s)
{
	if (a->type != GGUF_TYPE_STRING) {
		a->b.bad = 1;
		return;
	}
	put_str(&a->b, s);
	a->n++;
}

// encode type, count and elements of a into b
static void
put_warr(struct buf *b, const struct gguf_warr *a)
{
	if (a->b.bad)
		b->bad = 1;
	put_le(b, (uint32_t)a->type, 4);
	put_le(b, a->n, 8);
	put(b, a->b.p, a->b.n);
}

void
gguf_warr_push_arr(struct gguf_warr *a, struct gguf_warr *sub)
{
	if (!sub || a->type != GGUF_TYPE_ARRAY)
		a->b.bad = 1;
	else
		put_warr(&a->b, sub);
	a->n++;
	gguf_warr_free(sub);
}

void
gguf_writer_warr(struct gguf_writer *w, const char *key, struct gguf_warr *a)
{
	if (!a) {
		w->bad = 1;
		return;
	}
	struct buf b = {0};
	put_le(&b, GGUF_TYPE_ARRAY, 4);
	put_warr(&b, a);
	gguf_warr_free(a);
	set_kv(w, key, b);
}

// --- tensors ------------------------------------------------------------------

int
gguf_writer_tensor(struct gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                   const void *data, size_t nbytes, char *err)
{
	const char *tn = ad_type_name(type);
	if (!tn)
		return ad_err(err, "tensor '%s': unknown type id %" PRIu32, name, type);
	if (ad_type_block_size(type) == 0)
		return ad_err(err, "tensor '%s': type %s cannot be sized", name, tn);
	if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
		return ad_err(err, "tensor '%s': %" PRIu32 " dimensions (1 to %d)", name, n_dims, GGUF_MAX_DIMS);
	for (size_t i = 0; i < w->n_t; i++)
		if (!strcmp(w->t[i].name, name))
			return ad_err(err, "tensor '%s' added twice", name);
	struct wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
	for (uint32_t d = 0; d < n_dims; d++)
		if (ne[d] <= 0)
			return ad_err(err, "tensor '%s': dimension %" PRIu32 " is %" PRId64, name, d, ne[d]);
	size_t want;
	if (ad_type_row_bytes(type, ne[0], &want))
		return ad_err(err, "tensor '%s': ne[0]=%" PRId64 " is not a multiple of the %s block size %" PRId64,
		              name, ne[0], tn, ad_type_block_size(type));
	for (uint32_t d = 0; d < n_dims; d++) {
		if (d > 0) {
			if (want > SIZE_MAX / (uint64_t)ne[d])
				return ad_err(err, "tensor '%s': size overflows", name);
			want *= (size_t)ne[d];
		}
		t.ne[d] = ne[d];
	}
	if (nbytes != want)
		return ad_err(err, "tensor '%s': %zu bytes given, %s of this shape takes %zu", name, nbytes, tn, want);
	if (w->n_t == w->cap_t) {
		size_t cap = w->cap_t ? w->cap_t * 2 : 16;
		struct wtensor *p = realloc(w->t, cap * sizeof *p);
		if (!p)
			return ad_err(err, "out of memory");
		w->t = p;
		w->cap_t = cap;
	}
	t.name = strdup(name);
	t.data = malloc(nbytes ? nbytes : 1);
	t.nbytes = nbytes;
	if (!t.name || !t.data) {
		free(t.name);
		free(t.data);
		return ad_err(err, "out of memory for tensor '%s' (%zu bytes)", name, nbytes);
	}
	memcpy(t.data, data, nbytes);
	w->t[w->n_t++] = t;
	return 0;
}

// --- serialising --------------------------------------------------------------

struct sink {
	FILE *f;
	struct buf *b;
	uint64_t n; // bytes emitted so far
	int bad;
};

static void
emit(struct sink *s, const void *p, size_t n)
{
	s->n += n;
	if (s->bad || !n)
		return;
	if (s->f) {
		if (fwrite(p, 1, n, s->f) != n)
			s->bad = 1;
	} else {
		put(s->b, p, n);
		s->bad = s->b->bad;
	}
}

static void
emit_le(struct sink *s, uint64_t v, int bytes)
{
	uint8_t x[8];
	for (int i = 0; i < bytes; i++)
		x[i] = (uint8_t)(v >> (8 * i));
	emit(s, x, (size_t)bytes);
}

static void
emit_pad(struct sink *s, uint32_t align)
{
	static const uint8_t zero[256];
	size_t pad = (size_t)((align - s->n % align) % align);
	while (pad) {
		size_t k = pad < sizeof zero ? pad : sizeof zero;
		emit(s, zero, k);
		pad -= k;
	}
}

static uint64_t
padded(uint64_t n, uint32_t align)
{
	return n + (align - n % align) % align;
}

static int
serialise(struct gguf_writer *w, struct sink *s)
{
	if (w->bad)
		return -1;
	emit(s, GGUF_MAGIC, 4);
	emit_le(s, 3, 4);
	emit_le(s, w->n_t, 8);
	emit_le(s, w->n_kv, 8);
	for (size_t i = 0; i < w->n_kv; i++) {
		size_t kn = strlen(w->kv[i].key);
		emit_le(s, kn, 8);
		emit(s, w->kv[i].key, kn);
		emit(s, w->kv[i].val.p, w->kv[i].val.n);
	}
	uint64_t off = 0;
	for (size_t i = 0; i < w->n_t; i++) {
		const struct wtensor *t = &w->t[i];
		size_t nn = strlen(t->name);
		emit_le(s, nn, 8);
		emit(s, t->name, nn);
		emit_le(s, t->n_dims, 4);
		for (uint32_t d = 0; d < t->n_dims; d++)
			emit_le(s, (uint64_t)t->ne[d], 8);
		emit_le(s, t->type, 4);
		emit_le(s, off, 8);
		off += padded(t->nbytes, w->alignment);
	}
	if (w->n_t) {
		emit_pad(s, w->alignment);
		for (size_t i = 0; i < w->n_t; i++) {
			emit(s, w->t[i].data, w->t[i].nbytes);
			emit_pad(s, w->alignment);
		}
	}
	return s->bad ? -1 : 0;
}

int
gguf_writer_save(struct gguf_writer *w, const char *path, char *err)
{
	if (w->bad)
		return ad_err(err, "%s: the writer was given an invalid value or ran out of memory", path);
	FILE *f = fopen(path, "wb");
	if (!f)
		return ad_err(err, "%s: %s", path, strerror(errno));
	struct sink s = {.f = f};
	int rc = serialise(w, &s);
	if (fclose(f) != 0)
		rc = -1;
	if (rc)
		return ad_err(err, "%s: write failed: %s", path, strerror(errno));
	return 0;
}

void *
gguf_writer_bytes(struct gguf_writer *w, size_t *n)
{
	struct buf b = {0};
	struct sink s = {.b = &b};
	*n = 0;
	if (serialise(w, &s)) {
		free(b.p);
		return NULL;
	}
	*n = b.n;
	return b.p ? b.p : calloc(1, 1);
}
