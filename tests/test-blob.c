// test-blob: the weight-blob writer byte for byte against the reference
// files, streaming from several buffers, and the reader's refusals.
#include <stdint.h>
#include <string.h>

#include "blob.h"
#include "err.h"
#include "fp16.h"
#include "t.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" // CHECK without a message
#include "wtype.h"

static char *
tmp_path(const char *name)
{
	static char p[4][512];
	static int k;
	char *s = p[k++ & 3];
	snprintf(s, 512, "%s/%s", t_tmpdir(), name);
	return s;
}

static void
check_same(const char *path, const char *golden)
{
	char g[512];
	size_t n, m;
	snprintf(g, sizeof g, "%s/ane/%s", T_DATA, golden);
	uint8_t *a = t_read_file(path, &n), *b = t_read_file(g, &m);
	REQUIRE(a && b, "cannot read %s or %s", path, g);
	CHECK(n == m, "%s: %zu bytes, golden %zu", golden, n, m);
	CHECK(n == m && !memcmp(a, b, n), "%s differs", golden);
	free(a);
	free(b);
}

static uint32_t
u32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

// Espresso's ffn fixture: w1 = i + 0.5, w3 = i + 400.75 from f32 buffers
static void
test_ffn_ref(void)
{
	char err[AD_ERRLEN];
	float w1[24], w3[24];
	for (int i = 0; i < 24; i++) {
		w1[i] = i + 0.5f;
		w3[i] = i + 400.75f;
	}
	struct ane_blob_writer w;
	uint64_t off[2];
	const char *p = tmp_path("ffn.bin");
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_add(&w, &(struct ane_wsrc){w1, AD_TYPE_F32, 24}, &off[0], err) == 0, "%s", err);
	CHECK(ane_blob_add(&w, &(struct ane_wsrc){w3, AD_TYPE_F32, 24}, &off[1], err) == 0, "%s", err);
	REQUIRE(ane_blob_close(&w, err) == 0, "%s", err);
	CHECK(off[0] == 64 && off[1] == 176, "%llu %llu", (unsigned long long)off[0], (unsigned long long)off[1]);
	check_same(p, "ffn_blob_ref.bin");
}

// qkv fixture written as ONE stream per chunk from fp16 buffers in pieces
static void
test_qkv_ref_fp16_pieces(void)
{
	char err[AD_ERRLEN];
	uint16_t q[16], k[16], v[16];
	for (int i = 0; i < 16; i++) {
		q[i] = ad_f32_to_fp16(i + 0.125f);
		k[i] = ad_f32_to_fp16(i + 100.25f);
		v[i] = ad_f32_to_fp16(i - 50.5f);
	}
	const uint16_t *src[3] = {q, k, v};
	struct ane_blob_writer w;
	uint64_t off[3];
	const char *p = tmp_path("qkv.bin");
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	for (int c = 0; c < 3; c++) {
		CHECK(ane_blob_begin(&w, 16, &off[c], err) == 0, "%s", err);
		// in three uneven pieces
		CHECK(ane_blob_put(&w, &(struct ane_wsrc){src[c], AD_TYPE_F16, 5}, err) == 0);
		CHECK(ane_blob_put(&w, &(struct ane_wsrc){src[c] + 5, AD_TYPE_F16, 10}, err) == 0);
		CHECK(ane_blob_put(&w, &(struct ane_wsrc){src[c] + 15, AD_TYPE_F16, 1}, err) == 0);
		CHECK(ane_blob_end(&w, err) == 0, "%s", err);
	}
	REQUIRE(ane_blob_close(&w, err) == 0, "%s", err);
	CHECK(off[0] == 64 && off[1] == 160 && off[2] == 256);
	check_same(p, "qkv_blob_ref.bin");
}

// the seed's weights.zig vector: a = 0.5 i, b = -0.25 i
static void
test_seed_vector(void)
{
	char err[AD_ERRLEN];
	float a[24], b[24];
	for (int i = 0; i < 24; i++) {
		a[i] = 0.5f * i;
		b[i] = -0.25f * i;
	}
	const char *p = tmp_path("seed.bin");
	struct ane_wsrc parts[2] = {{a, AD_TYPE_F32, 24}, {b, AD_TYPE_F32, 24}};
	// as one fused-FFN-like two-chunk file
	struct ane_blob_writer w;
	REQUIRE(ane_blob_open(&w, p, err) == 0);
	CHECK(ane_blob_add(&w, &parts[0], NULL, err) == 0);
	CHECK(ane_blob_add(&w, &parts[1], NULL, err) == 0);
	REQUIRE(ane_blob_close(&w, err) == 0);
	size_t n;
	uint8_t *img = t_read_file(p, &n);
	REQUIRE(img && n == 288);
	CHECK(img[64] == 0xEF && img[67] == 0xDE);
	CHECK(u32(img + 72) == 48 && u32(img + 184) == 48);
	CHECK(u32(img + 80) == 128 && u32(img + 192) == 240);
	for (int i = 0; i < 24; i++)
		CHECK(ad_fp16_to_f32((uint16_t)(img[128 + 2 * i] | img[129 + 2 * i] << 8)) == a[i]);
	free(img);
	check_same(p, "seed_blob_ref.bin");
}

static void
test_offsets(void)
{
	uint64_t off[3], sizes[3] = {96, 192, 48};
	CHECK(ane_blob_offsets(sizes, 3, off) == 592);
	CHECK(off[0] == 64 && off[1] == 224 && off[2] == 480);
	uint64_t g = 1769472, ffn[3] = {g, g, g};
	CHECK(ane_blob_offsets(ffn, 3, off) == 5308672);
	CHECK(off[0] == 64 && off[1] == 1769600 && off[2] == 3539136);
}

// kernel blob writers: QKV rows from three buffers make one chunk; FFN three
static void
test_kernel_blobs(void)
{
	char err[AD_ERRLEN];
	float q[8 * 4], k[2 * 4], v[2 * 4];
	for (int i = 0; i < 32; i++)
		q[i] = (float)i;
	for (int i = 0; i < 8; i++) {
		k[i] = 100.0f + i;
		v[i] = -100.0f - i;
	}
	const char *p = tmp_path("qkvk.bin");
	struct ane_wsrc parts[3] = {{q, AD_TYPE_F32, 32}, {k, AD_TYPE_F32, 8}, {v, AD_TYPE_F32, 8}};
	REQUIRE(ane_blob_write_proj(p, parts, 3, err) == 0, "%s", err);
	size_t n;
	uint8_t *img = t_read_file(p, &n);
	REQUIRE(img && n == 64 + 64 + 48 * 2);
	struct ane_blob_chunk ch[4];
	CHECK(ane_blob_scan(img, n, ch, 4, err) == 1, "%s", err);
	CHECK(ch[0].header == 64 && ch[0].data == 128 && ch[0].bytes == 96);
	// row 8 (first of Wk) starts at element 32
	CHECK(ad_fp16_to_f32((uint16_t)(img[128 + 64] | img[129 + 64] << 8)) == 100.0f);
	free(img);

	float g[6], u[6], d[6];
	for (int i = 0; i < 6; i++)
		g[i] = u[i] = d[i] = (float)i;
	p = tmp_path("ffnk.bin");
	struct ane_wsrc gs = {g, AD_TYPE_F32, 6}, us = {u, AD_TYPE_F32, 6}, ds = {d, AD_TYPE_F32, 6};
	REQUIRE(ane_blob_write_ffn(p, &gs, &us, &ds, err) == 0, "%s", err);
	img = t_read_file(p, &n);
	REQUIRE(img);
	CHECK(ane_blob_scan(img, n, ch, 4, err) == 3, "%s", err);
	CHECK(ch[1].header == 64 + 64 + 12 && ch[2].data == ch[2].header + 64);
	free(img);
	ds.n = 5;
	CHECK(ane_blob_write_ffn(p, &gs, &us, &ds, err) < 0);
	CHECK(strstr(err, "differ"), "%s", err);
}

static void
test_writer_errors(void)
{
	char err[AD_ERRLEN];
	struct ane_blob_writer w;
	float x[4] = {1, 2, 3, 4};
	const char *p = tmp_path("bad.bin");

	// short chunk
	REQUIRE(ane_blob_open(&w, p, err) == 0);
	CHECK(ane_blob_begin(&w, 4, NULL, err) == 0);
	CHECK(ane_blob_put(&w, &(struct ane_wsrc){x, AD_TYPE_F32, 3}, err) == 0);
	CHECK(ane_blob_end(&w, err) < 0);
	CHECK(strstr(err, "header says"), "%s", err);
	CHECK(ane_blob_close(&w, err) < 0);
	CHECK(access(p, F_OK) != 0, "a failed file must be removed");

	// overflowing chunk
	REQUIRE(ane_blob_open(&w, p, err) == 0);
	CHECK(ane_blob_begin(&w, 2, NULL, err) == 0);
	CHECK(ane_blob_put(&w, &(struct ane_wsrc){x, AD_TYPE_F32, 4}, err) < 0);
	CHECK(strstr(err, "overflow"), "%s", err);
	ane_blob_abort(&w);

	// a type the writer does not convert
	REQUIRE(ane_blob_open(&w, p, err) == 0);
	CHECK(ane_blob_begin(&w, 4, NULL, err) == 0);
	CHECK(ane_blob_put(&w, &(struct ane_wsrc){x, AD_TYPE_BF16, 4}, err) < 0);
	CHECK(strstr(err, "neither"), "%s", err);
	ane_blob_abort(&w);

	// unfinished chunk at close, and an empty file
	REQUIRE(ane_blob_open(&w, p, err) == 0);
	CHECK(ane_blob_begin(&w, 4, NULL, err) == 0);
	CHECK(ane_blob_close(&w, err) < 0);
	CHECK(strstr(err, "unfinished"), "%s", err);
	REQUIRE(ane_blob_open(&w, p, err) == 0);
	CHECK(ane_blob_close(&w, err) < 0);
	CHECK(strstr(err, "no chunks"), "%s", err);

	// a directory that does not exist
	CHECK(ane_blob_open(&w, "/nonexistent-dir/x.bin", err) < 0);
	CHECK(strstr(err, "create"), "%s", err);
}

static void
test_scan_errors(void)
{
	char err[AD_ERRLEN], g[512];
	size_t n;
	snprintf(g, sizeof g, "%s/ane/ffn_blob_ref.bin", T_DATA);
	uint8_t *img = t_read_file(g, &n);
	REQUIRE(img && n == 288);
	struct ane_blob_chunk ch[2];
	CHECK(ane_blob_scan(img, n, ch, 2, err) == 2, "%s", err);
	CHECK(ch[1].header == 176 && ch[1].data == 240 && ch[1].bytes == 48);

	// truncation anywhere is caught
	CHECK(ane_blob_scan(img, 287, NULL, 0, err) < 0);
	CHECK(strstr(err, "truncated"), "%s", err);
	CHECK(ane_blob_scan(img, 200, NULL, 0, err) < 0);
	CHECK(strstr(err, "truncated"), "%s", err);
	CHECK(ane_blob_scan(img, 32, NULL, 0, err) < 0);
	CHECK(ane_blob_scan(img, 64, NULL, 0, err) < 0);
	CHECK(strstr(err, "no chunks"), "%s", err);

	// the old constant data_off (128 in every chunk) is refused
	uint8_t *bad = malloc(n);
	memcpy(bad, img, n);
	bad[176 + 16] = 128;
	bad[176 + 17] = 0;
	CHECK(ane_blob_scan(bad, n, NULL, 0, err) < 0);
	CHECK(strstr(err, "data offset 128, expected 240"), "%s", err);

	memcpy(bad, img, n);
	bad[176] = 0;
	CHECK(ane_blob_scan(bad, n, NULL, 0, err) < 0);
	CHECK(strstr(err, "magic"), "%s", err);
	memcpy(bad, img, n);
	bad[68] = 2;
	CHECK(ane_blob_scan(bad, n, NULL, 0, err) < 0);
	CHECK(strstr(err, "element type 2, expected 1 (fp16), 4 (int8) or 11 (uint4)"), "%s", err);
	memcpy(bad, img, n);
	bad[4] = 0;
	CHECK(ane_blob_scan(bad, n, NULL, 0, err) < 0);
	CHECK(strstr(err, "file header"), "%s", err);
	memcpy(bad, img, n);
	bad[72] = 47; // odd payload size
	CHECK(ane_blob_scan(bad, n, NULL, 0, err) < 0);
	free(bad);
	free(img);
}

// an int8 chunk (element type 0x04) and its fp16 scales, byte for byte;
// the reader reports the element types; a writer refuses mixing them up
static void
test_int8_ref(void)
{
	char err[AD_ERRLEN];
	int8_t q[32];
	for (int i = 0; i < 32; i++)
		q[i] = (int8_t)(i - 16);
	const float sc[4] = {0.5f, 0.25f, 0.125f, 1.0f};
	struct ane_blob_writer w;
	uint64_t off[2];
	const char *p = tmp_path("i8.bin");
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin_i8(&w, 32, &off[0], err) == 0, "%s", err);
	CHECK(ane_blob_put_i8(&w, q, 20, err) == 0, "%s", err); // in two pieces
	CHECK(ane_blob_put_i8(&w, q + 20, 12, err) == 0, "%s", err);
	CHECK(ane_blob_end(&w, err) == 0, "%s", err);
	CHECK(ane_blob_add(&w, &(struct ane_wsrc){sc, AD_TYPE_F32, 4}, &off[1], err) == 0, "%s", err);
	REQUIRE(ane_blob_close(&w, err) == 0, "%s", err);
	CHECK(off[0] == 64 && off[1] == 160, "%llu %llu", (unsigned long long)off[0], (unsigned long long)off[1]);
	uint64_t bytes[2] = {32, 8}, o2[2];
	CHECK(ane_blob_offsets(bytes, 2, o2) == 232 && o2[1] == 160);
	check_same(p, "proj_8x4_int8_blob.bin");
	size_t n;
	uint8_t *img = t_read_file(p, &n);
	REQUIRE(img);
	struct ane_blob_chunk ch[2];
	CHECK(ane_blob_scan(img, n, ch, 2, err) == 2, "%s", err);
	CHECK(ch[0].dtype == ANE_BLOB_DT_INT8 && ch[0].bytes == 32 && ch[0].data == 128);
	CHECK(ch[1].dtype == ANE_BLOB_DT_FP16 && ch[1].bytes == 8 && ch[1].data == 224);
	// an odd payload is fine for int8, not for fp16
	img[64 + 8] = 31;
	img[160] = 0; // (and the chain now breaks at the second header)
	CHECK(ane_blob_scan(img, n, NULL, 0, err) < 0);
	CHECK(strstr(err, "chunk 1 at 159: magic"), "%s", err);
	free(img);

	// fp16 values into an int8 chunk, int8 into an fp16 one, overflow
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin_i8(&w, 4, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_put(&w, &(struct ane_wsrc){sc, AD_TYPE_F32, 2}, err) < 0);
	CHECK(strstr(err, "overflow chunk 0"), "%s", err);
	ane_blob_abort(&w);
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin(&w, 4, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_put_i8(&w, q, 4, err) < 0);
	CHECK(strstr(err, "4 int8 values do not fit chunk 0"), "%s", err);
	ane_blob_abort(&w);
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin_i8(&w, 4, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_put_i8(&w, q, 5, err) < 0);
	ane_blob_abort(&w);
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin_i8(&w, 4, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_put_i8(&w, q, 3, err) == 0, "%s", err);
	CHECK(ane_blob_end(&w, err) < 0);
	CHECK(ane_blob_close(&w, err) < 0);
}

// uint4 chunks (constexpr_lut_to_dense's indices): MILBlob's element type
// 11, two values a byte with element 0 in the low nibble, the bytes of an
// odd count rounded up and its 4 bits of padding in the header
static void
test_uint4(void)
{
	char err[AD_ERRLEN];
	const uint8_t packed[4] = {0x21, 0x43, 0x65, 0x07}; // 1, 2, .., 7
	const float lut[2] = {0.5f, -2.0f};
	struct ane_blob_writer w;
	uint64_t off[2];
	const char *p = tmp_path("u4.bin");
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin_u4(&w, 7, &off[0], err) == 0, "%s", err);
	CHECK(ane_blob_put_u4(&w, packed, 3, err) == 0, "%s", err); // in two pieces
	CHECK(ane_blob_put_u4(&w, packed + 3, 1, err) == 0, "%s", err);
	CHECK(ane_blob_end(&w, err) == 0, "%s", err);
	CHECK(ane_blob_add(&w, &(struct ane_wsrc){lut, AD_TYPE_F32, 2}, &off[1], err) == 0, "%s", err);
	REQUIRE(ane_blob_close(&w, err) == 0, "%s", err);
	CHECK(off[0] == 64 && off[1] == 132, "%llu %llu", (unsigned long long)off[0], (unsigned long long)off[1]);
	size_t n;
	uint8_t *img = t_read_file(p, &n);
	REQUIRE(img);
	CHECK(n == 132 + 64 + 4, "%zu bytes", n);
	const uint8_t *h = img + 64;
	CHECK(h[0] == 0xef && h[3] == 0xde && h[4] == 11 && h[8] == 4 && h[16] == 128 && h[24] == 4,
	      "header %02x %02x %02x %02x %02x %02x", h[0], h[3], h[4], h[8], h[16], h[24]);
	CHECK(!memcmp(img + 128, packed, 4));
	CHECK(img[132 + 24] == 0, "an fp16 chunk with padding bits");
	struct ane_blob_chunk ch[2];
	CHECK(ane_blob_scan(img, n, ch, 2, err) == 2, "%s", err);
	CHECK(ch[0].dtype == ANE_BLOB_DT_UINT4 && ch[0].bytes == 4 && ch[0].data == 128 && ch[0].pad == 4);
	CHECK(ch[1].dtype == ANE_BLOB_DT_FP16 && ch[1].bytes == 4 && ch[1].pad == 0);
	// padding on an fp16 chunk, or other than 4 bits, is refused
	img[132 + 24] = 4;
	CHECK(ane_blob_scan(img, n, NULL, 0, err) < 0 && strstr(err, "4 bits of padding in a chunk of element type 1"),
	      "%s", err);
	img[132 + 24] = 0;
	img[64 + 24] = 2;
	CHECK(ane_blob_scan(img, n, NULL, 0, err) < 0 && strstr(err, "2 bits of padding"), "%s", err);
	free(img);
	// an even count has no padding; overflow and the wrong kind are refused
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin_u4(&w, 8, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_put_u4(&w, packed, 5, err) < 0 && strstr(err, "5 bytes of uint4 values do not fit chunk 0"),
	      "%s", err);
	ane_blob_abort(&w);
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin_i8(&w, 8, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_put_u4(&w, packed, 4, err) < 0);
	ane_blob_abort(&w);
	REQUIRE(ane_blob_open(&w, p, err) == 0, "%s", err);
	CHECK(ane_blob_begin_u4(&w, 8, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_put_u4(&w, packed, 4, err) == 0, "%s", err);
	CHECK(ane_blob_end(&w, err) == 0, "%s", err);
	REQUIRE(ane_blob_close(&w, err) == 0, "%s", err);
	img = t_read_file(p, &n);
	REQUIRE(img);
	CHECK(n == 64 + 64 + 4 && img[64 + 24] == 0 && img[64 + 8] == 4);
	free(img);
}

// the int8 golden blob written by w (opened by the caller)
static int
write_i8_golden(struct ane_blob_writer *w, char *err)
{
	int8_t q[32];
	for (int i = 0; i < 32; i++)
		q[i] = (int8_t)(i - 16);
	const float sc[4] = {0.5f, 0.25f, 0.125f, 1.0f};
	if (ane_blob_begin_i8(w, 32, NULL, err) || ane_blob_put_i8(w, q, 20, err) ||
	    ane_blob_put_i8(w, q + 20, 12, err) || ane_blob_end(w, err) ||
	    ane_blob_add(w, &(struct ane_wsrc){sc, AD_TYPE_F32, 4}, NULL, err))
		return -1;
	return ane_blob_close(w, err);
}

// the writer into memory (the emu's blobs): the file's bytes, whatever
// room it was given, the memory reused; a failed blob leaves no length
static void
test_mem_writer(void)
{
	char err[AD_ERRLEN], g[512];
	snprintf(g, sizeof g, "%s/ane/proj_8x4_int8_blob.bin", T_DATA);
	size_t gn;
	uint8_t *gold = t_read_file(g, &gn);
	REQUIRE(gold, "cannot read %s", g);
	struct ane_blob_mem m = {0};
	struct ane_blob_writer w;
	// room for the header alone (it grows twice), then for all of it
	static const size_t hints[] = {0, 64, 4096};
	for (int h = 0; h < 3; h++) {
		REQUIRE(ane_blob_open_mem(&w, &m, hints[h], err) == 0, "%s", err);
		CHECK(write_i8_golden(&w, err) == 0, "%s", err);
		CHECK(m.len == gn && m.cap >= gn && !memcmp(m.data, gold, gn), "hint %zu: %zu bytes, golden %zu",
		      hints[h], m.len, gn);
	}
	const uint8_t *kept = m.data;
	REQUIRE(ane_blob_open_mem(&w, &m, 16, err) == 0, "%s", err);
	CHECK(m.data == kept && m.len == 0, "the memory is reused, its length reset");
	// an overflowing chunk: close fails, the length stays 0
	float x[4] = {1, 2, 3, 4};
	CHECK(ane_blob_begin(&w, 2, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_put(&w, &(struct ane_wsrc){x, AD_TYPE_F32, 4}, err) < 0);
	CHECK(strstr(err, "blob in memory") && strstr(err, "overflow"), "%s", err);
	CHECK(ane_blob_close(&w, err) < 0 && m.len == 0, "%zu", m.len);
	// an unfinished one; an aborted one
	REQUIRE(ane_blob_open_mem(&w, &m, 0, err) == 0, "%s", err);
	CHECK(ane_blob_begin(&w, 4, NULL, err) == 0, "%s", err);
	CHECK(ane_blob_close(&w, err) < 0 && strstr(err, "unfinished") && m.len == 0, "%s", err);
	REQUIRE(ane_blob_open_mem(&w, &m, 0, err) == 0, "%s", err);
	CHECK(ane_blob_add(&w, &(struct ane_wsrc){x, AD_TYPE_F32, 4}, NULL, err) == 0, "%s", err);
	ane_blob_abort(&w);
	CHECK(m.len == 0 && ane_blob_close(&w, err) < 0, "an aborted writer is closed");
	ane_blob_mem_free(&m);
	CHECK(!m.data && !m.cap && !m.len);
	ane_blob_mem_free(&m); // twice: a no-op
	free(gold);
}

int
main(void)
{
	T_RUN(test_ffn_ref);
	T_RUN(test_qkv_ref_fp16_pieces);
	T_RUN(test_seed_vector);
	T_RUN(test_int8_ref);
	T_RUN(test_uint4);
	T_RUN(test_offsets);
	T_RUN(test_kernel_blobs);
	T_RUN(test_writer_errors);
	T_RUN(test_mem_writer);
	T_RUN(test_scan_errors);
	return t_done();
}
