#include "blob.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "err.h"
#include "fp16.h"
#include "wtype.h"

static void
put_u32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static uint32_t
get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int
wfail(struct ane_blob_writer *w, char *err, const char *what)
{
	w->failed = 1;
	return ad_err(err, "%s: %s: %s", w->path, what, strerror(errno ? errno : EIO));
}

// m holds at least n bytes, its first keep kept
static int
mem_reserve(struct ane_blob_mem *m, size_t n, size_t keep)
{
	if (n <= m->cap)
		return 0;
	uint8_t *d = malloc(n);
	if (!d)
		return -1;
	if (keep)
		memcpy(d, m->data, keep);
	free(m->data);
	m->data = d;
	m->cap = n;
	return 0;
}

static int
wbytes(struct ane_blob_writer *w, const void *p, size_t n, char *err)
{
	if (w->mem) {
		struct ane_blob_mem *m = w->mem;
		if (w->pos + n > m->cap && mem_reserve(m, 2 * m->cap > w->pos + n ? 2 * m->cap : w->pos + n, w->pos)) {
			errno = ENOMEM;
			return wfail(w, err, "write");
		}
		memcpy(m->data + w->pos, p, n);
	} else if (fwrite(p, 1, n, w->f) != n) {
		return wfail(w, err, "write");
	}
	w->pos += n;
	return 0;
}

// the header, both kinds of writer
static int
start(struct ane_blob_writer *w, char *err)
{
	uint8_t h[ANE_BLOB_HEADER] = {0};
	h[0] = 0x01;
	h[4] = 0x02;
	if (wbytes(w, h, sizeof h, err) < 0) {
		ane_blob_abort(w);
		return -1;
	}
	return 0;
}

int
ane_blob_open(struct ane_blob_writer *w, const char *path, char *err)
{
	memset(w, 0, sizeof *w);
	snprintf(w->path, sizeof w->path, "%s", path);
	w->f = fopen(path, "wb");
	if (!w->f)
		return ad_err(err, "%s: create: %s", path, strerror(errno));
	return start(w, err);
}

int
ane_blob_open_mem(struct ane_blob_writer *w, struct ane_blob_mem *m, size_t hint, char *err)
{
	memset(w, 0, sizeof *w);
	snprintf(w->path, sizeof w->path, "blob in memory");
	m->len = 0;
	if (mem_reserve(m, hint > ANE_BLOB_HEADER ? hint : ANE_BLOB_HEADER, 0))
		return ad_err(err, "%s: out of memory for %zu bytes", w->path, hint);
	w->mem = m;
	return start(w, err);
}

void
ane_blob_mem_free(struct ane_blob_mem *m)
{
	free(m->data);
	*m = (struct ane_blob_mem){0};
}

static int
begin(struct ane_blob_writer *w, int dtype, size_t n, uint64_t *mil_off, char *err)
{
	if (w->failed)
		return ad_err(err, "%s: writer already failed", w->path);
	if (w->chunk_end) {
		w->failed = 1;
		return ad_err(err, "%s: chunk %d still open", w->path, w->nchunks - 1);
	}
	uint64_t bytes =
		dtype == ANE_BLOB_DT_UINT4 ? ((uint64_t)n + 1) / 2 : (uint64_t)n * (dtype == ANE_BLOB_DT_INT8 ? 1 : 2);
	uint64_t data = w->pos + ANE_BLOB_CHUNK_HEADER;
	if (n == 0 || bytes > UINT32_MAX || data + bytes > ANE_BLOB_MAX_FILE) {
		w->failed = 1;
		return ad_err(err, "%s: chunk %d of %zu values does not fit the u32 fields", w->path, w->nchunks, n);
	}
	uint8_t h[ANE_BLOB_CHUNK_HEADER] = {0};
	put_u32(h, ANE_BLOB_MAGIC);
	h[4] = (uint8_t)dtype;
	put_u32(h + 8, (uint32_t)bytes);
	put_u32(h + 16, (uint32_t)data);
	if (dtype == ANE_BLOB_DT_UINT4 && n % 2)
		h[24] = 4;
	if (mil_off)
		*mil_off = w->pos;
	if (wbytes(w, h, sizeof h, err) < 0)
		return -1;
	w->chunk_end = data + bytes;
	w->dtype = dtype;
	w->nchunks++;
	return 0;
}

int
ane_blob_begin(struct ane_blob_writer *w, size_t n, uint64_t *mil_off, char *err)
{
	return begin(w, ANE_BLOB_DT_FP16, n, mil_off, err);
}

int
ane_blob_begin_i8(struct ane_blob_writer *w, size_t n, uint64_t *mil_off, char *err)
{
	return begin(w, ANE_BLOB_DT_INT8, n, mil_off, err);
}

int
ane_blob_begin_u4(struct ane_blob_writer *w, size_t n, uint64_t *mil_off, char *err)
{
	return begin(w, ANE_BLOB_DT_UINT4, n, mil_off, err);
}

int
ane_blob_put_u4(struct ane_blob_writer *w, const uint8_t *packed, size_t nbytes, char *err)
{
	if (w->failed)
		return ad_err(err, "%s: writer already failed", w->path);
	if (!w->chunk_end || w->dtype != ANE_BLOB_DT_UINT4 || w->pos + nbytes > w->chunk_end) {
		w->failed = 1;
		return ad_err(err, "%s: %zu bytes of uint4 values do not fit chunk %d", w->path, nbytes,
		              w->nchunks - 1);
	}
	return wbytes(w, packed, nbytes, err);
}

int
ane_blob_put_i8(struct ane_blob_writer *w, const int8_t *q, size_t n, char *err)
{
	if (w->failed)
		return ad_err(err, "%s: writer already failed", w->path);
	if (!w->chunk_end || w->dtype != ANE_BLOB_DT_INT8 || w->pos + n > w->chunk_end) {
		w->failed = 1;
		return ad_err(err, "%s: %zu int8 values do not fit chunk %d", w->path, n, w->nchunks - 1);
	}
	return wbytes(w, q, n, err);
}

int
ane_blob_put(struct ane_blob_writer *w, const struct ane_wsrc *src, char *err)
{
	if (w->failed)
		return ad_err(err, "%s: writer already failed", w->path);
	if (!w->chunk_end || w->dtype != ANE_BLOB_DT_FP16 || w->pos + (uint64_t)src->n * 2 > w->chunk_end) {
		w->failed = 1;
		return ad_err(err, "%s: %zu values overflow chunk %d", w->path, src->n, w->nchunks - 1);
	}
	if (src->type == AD_TYPE_F16) {
		// fp16 is little-endian on every host we build for
		return wbytes(w, src->data, src->n * 2, err);
	}
	if (src->type != AD_TYPE_F32) {
		w->failed = 1;
		return ad_err(err, "%s: weight source type %d is neither f32 nor f16", w->path, src->type);
	}
	uint16_t tmp[4096];
	const float *f = src->data;
	for (size_t i = 0; i < src->n; i += 4096) {
		size_t k = src->n - i < 4096 ? src->n - i : 4096;
		ad_f32_to_fp16_row(f + i, tmp, k);
		if (wbytes(w, tmp, k * 2, err) < 0)
			return -1;
	}
	return 0;
}

int
ane_blob_end(struct ane_blob_writer *w, char *err)
{
	if (w->failed)
		return ad_err(err, "%s: writer already failed", w->path);
	if (!w->chunk_end || w->pos != w->chunk_end) {
		w->failed = 1;
		return ad_err(err, "%s: chunk %d ends at %llu, header says %llu", w->path, w->nchunks - 1,
		              (unsigned long long)w->pos, (unsigned long long)w->chunk_end);
	}
	w->chunk_end = 0;
	return 0;
}

int
ane_blob_add(struct ane_blob_writer *w, const struct ane_wsrc *src, uint64_t *mil_off, char *err)
{
	if (ane_blob_begin(w, src->n, mil_off, err) < 0 || ane_blob_put(w, src, err) < 0)
		return -1;
	return ane_blob_end(w, err);
}

int
ane_blob_close(struct ane_blob_writer *w, char *err)
{
	if (!w->f && !w->mem)
		return ad_err(err, "blob writer not open");
	if (!w->failed && w->chunk_end) {
		w->failed = 1;
		ad_err(err, "%s: closed with chunk %d unfinished", w->path, w->nchunks - 1);
	}
	if (!w->failed && w->nchunks == 0) {
		w->failed = 1;
		ad_err(err, "%s: no chunks", w->path);
	}
	if (w->mem) {
		w->mem->len = w->failed ? 0 : w->pos;
		w->mem = NULL;
		return w->failed ? -1 : 0;
	}
	int rc = fclose(w->f);
	w->f = NULL;
	if (!w->failed && rc != 0) {
		w->failed = 1;
		ad_err(err, "%s: close: %s", w->path, strerror(errno));
	}
	if (w->failed) {
		unlink(w->path);
		return -1;
	}
	return 0;
}

void
ane_blob_abort(struct ane_blob_writer *w)
{
	w->failed = 1;
	if (w->mem) {
		w->mem->len = 0;
		w->mem = NULL;
		return;
	}
	if (w->f)
		fclose(w->f);
	w->f = NULL;
	unlink(w->path);
}

uint64_t
ane_blob_offsets(const uint64_t *bytes, int n, uint64_t *off)
{
	uint64_t pos = ANE_BLOB_HEADER;
	for (int k = 0; k < n; k++) {
		if (off)
			off[k] = pos;
		pos += ANE_BLOB_CHUNK_HEADER + bytes[k];
	}
	return pos;
}

int
ane_blob_write_proj(const char *path, const struct ane_wsrc *parts, int nparts, char *err)
{
	struct ane_blob_writer w;
	size_t n = 0;
	for (int i = 0; i < nparts; i++)
		n += parts[i].n;
	if (ane_blob_open(&w, path, err) < 0)
		return -1;
	if (ane_blob_begin(&w, n, NULL, err) < 0)
		goto fail;
	for (int i = 0; i < nparts; i++)
		if (ane_blob_put(&w, &parts[i], err) < 0)
			goto fail;
	if (ane_blob_end(&w, err) < 0)
		goto fail;
	return ane_blob_close(&w, err);
fail:
	ane_blob_abort(&w);
	return -1;
}

int
ane_blob_write_ffn(const char *path, const struct ane_wsrc *gate, const struct ane_wsrc *up,
                   const struct ane_wsrc *down, char *err)
{
	struct ane_blob_writer w;
	if (gate->n != up->n || gate->n != down->n)
		return ad_err(err, "%s: ffn parts differ in size (%zu, %zu, %zu)", path, gate->n, up->n, down->n);
	if (ane_blob_open(&w, path, err) < 0)
		return -1;
	if (ane_blob_add(&w, gate, NULL, err) < 0 || ane_blob_add(&w, up, NULL, err) < 0 ||
	    ane_blob_add(&w, down, NULL, err) < 0) {
		ane_blob_abort(&w);
		return -1;
	}
	return ane_blob_close(&w, err);
}

int
ane_blob_scan(const uint8_t *img, size_t len, struct ane_blob_chunk *out, int max, char *err)
{
	if (len < ANE_BLOB_HEADER)
		return ad_err(err, "blob truncated: %zu bytes, the file header alone is 64", len);
	if (img[0] != 0x01 || img[4] != 0x02)
		return ad_err(err, "blob file header: bytes 0/4 are %02x/%02x, expected 01/02", img[0], img[4]);
	uint64_t pos = ANE_BLOB_HEADER;
	int n = 0;
	while (pos < len) {
		if (len - pos < ANE_BLOB_CHUNK_HEADER)
			return ad_err(err, "blob truncated: chunk %d header at %llu needs 64 bytes, %llu left", n,
			              (unsigned long long)pos, (unsigned long long)(len - pos));
		const uint8_t *h = img + pos;
		if (get_u32(h) != ANE_BLOB_MAGIC)
			return ad_err(err, "blob chunk %d at %llu: magic %08x, expected deadbeef", n,
			              (unsigned long long)pos, get_u32(h));
		if (h[4] != ANE_BLOB_DT_FP16 && h[4] != ANE_BLOB_DT_INT8 && h[4] != ANE_BLOB_DT_UINT4)
			return ad_err(
				err,
				"blob chunk %d at %llu: element type %u, expected 1 (fp16), 4 (int8) or 11 (uint4)", n,
				(unsigned long long)pos, h[4]);
		const unsigned pad = h[24];
		if (pad && (h[4] != ANE_BLOB_DT_UINT4 || pad != 4))
			return ad_err(err, "blob chunk %d at %llu: %u bits of padding in a chunk of element type %u", n,
			              (unsigned long long)pos, pad, h[4]);
		uint64_t bytes = get_u32(h + 8), data = get_u32(h + 16);
		if (data != pos + ANE_BLOB_CHUNK_HEADER)
			return ad_err(err, "blob chunk %d at %llu: data offset %llu, expected %llu (header + 64)", n,
			              (unsigned long long)pos, (unsigned long long)data,
			              (unsigned long long)(pos + ANE_BLOB_CHUNK_HEADER));
		if (bytes == 0 || (h[4] == ANE_BLOB_DT_FP16 && bytes % 2))
			return ad_err(err, "blob chunk %d at %llu: payload of %llu bytes is not fp16", n,
			              (unsigned long long)pos, (unsigned long long)bytes);
		if (bytes > len - data)
			return ad_err(err, "blob truncated: chunk %d at %llu needs %llu payload bytes, %llu left", n,
			              (unsigned long long)pos, (unsigned long long)bytes,
			              (unsigned long long)(len - data));
		if (out && n < max)
			out[n] = (struct ane_blob_chunk){
				.header = pos, .data = data, .bytes = bytes, .dtype = h[4], .pad = pad};
		n++;
		pos = data + bytes;
	}
	if (n == 0)
		return ad_err(err, "blob has no chunks");
	return n;
}
