// test-emu: the planar surface layout, the conv kernels (fast vs _ref),
// every kernel the engine generates run by the emu backend against a plain
// fp32 computation, and the ANE rules the emu enforces.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blob.h"
#include "build.h"
#include "emu.h"
#include "err.h"
#include "fp16.h"
#include "hugemem.h"
#include "layout.h"
#include "mil.h"
#include "t.h"
#include "wtype.h"

#pragma GCC diagnostic ignored "-Wformat-zero-length" // CHECK without a message

static uint32_t rng = 12345;

// the seed's LCG, value in [-scale/2, scale/2)
static float
lcg(float scale)
{
	rng = rng * 1664525u + 1013904223u;
	return scale * ((float)(rng >> 8) / 16777216.0f - 0.5f);
}

static float *
randv(size_t n, float scale)
{
	float *v = malloc(n * sizeof *v);
	for (size_t i = 0; i < n; i++)
		v[i] = lcg(scale);
	return v;
}

static char *
tmp_path(const char *name)
{
	static char p[8][512];
	static int k;
	char *s = p[k++ & 7];
	snprintf(s, 512, "%s/%s", t_tmpdir(), name);
	return s;
}

static struct emu *E;

// ---------------------------------------------------------------------------
// layout

static void
test_layout_table(void)
{
	static const struct {
		size_t c, w, elem, row, plane, batch, cap;
	} t[] = {
		{896, 1, 2, 64, 64, 57344, 57344},    {4, 2, 2, 64, 64, 256, 49152},
		{6, 2, 4, 64, 64, 384, 49152},        {4, 32, 2, 64, 64, 256, 49152},
		{576, 64, 2, 128, 128, 73728, 73728}, {896, 128, 2, 256, 256, 229376, 229376},
	};
	char err[AD_ERRLEN];
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		struct ane_layout l;
		REQUIRE(ane_layout_init(&l, t[i].c, 1, t[i].w, t[i].elem, err) == 0, "%s", err);
		CHECK(l.row_stride == t[i].row && l.plane_stride == t[i].plane && l.batch_stride == t[i].batch &&
		              l.nbytes == t[i].batch,
		      "row %zu: %zu %zu %zu", i, l.row_stride, l.plane_stride, l.batch_stride);
		const struct ane_layout *lp = &l;
		CHECK(ane_surface_capacity(&lp, 1) == t[i].cap, "row %zu", i);
	}
	struct ane_layout a, b;
	ane_layout_init(&a, 4, 1, 1, 2, err);
	CHECK(!ane_layout_contiguous(&a));
	ane_layout_init(&b, 4, 1, 32, 2, err);
	CHECK(ane_layout_contiguous(&b));
	CHECK(ane_layout_offset(&a, 3, 0, 0) == 192);
	// height > 1: plane = row * H
	ane_layout_init(&a, 2, 3, 40, 2, err);
	CHECK(a.row_stride == 80 && a.plane_stride == 240 && a.nbytes == 480);
	// one capacity for several surfaces
	ane_layout_init(&a, 896, 1, 128, 2, err);
	ane_layout_init(&b, 4, 1, 1, 2, err);
	const struct ane_layout *two[2] = {&a, &b};
	CHECK(ane_surface_capacity(two, 2) == 229376);

	// refusals
	CHECK(ane_layout_init(&a, 0, 1, 1, 2, err) < 0);
	CHECK(ane_layout_init(&a, 4, 1, 1, 3, err) < 0);
	CHECK(ane_layout_init(&a, SIZE_MAX / 8, 1, 1, 2, err) < 0, "overflow must be caught");
	CHECK(ane_layout_from_strides(&a, 4, 1, 64, 2, 64, 64, 0, 0, err) < 0,
	      "a row of 64 fp16 does not fit 64 bytes");
	CHECK(strstr(err, "cannot hold"), "%s", err);
	CHECK(ane_layout_from_strides(&a, 4, 1, 32, 2, 64, 64, 0, 0, err) == 0);
	CHECK(a.batch_stride == 256 && a.batches == 1 && a.nbytes == 256);
}

static void
test_scatter_gather(void)
{
	char err[AD_ERRLEN];
	size_t C = 37, W = 40;
	struct ane_layout l;
	REQUIRE(ane_layout_init(&l, C, 1, W, 2, err) == 0);
	CHECK(l.row_stride == 80);
	uint8_t *s = calloc(1, l.nbytes);
	float *x = randv(W * C, 4.0f), *back = calloc(W * C, sizeof(float));
	for (size_t ncols = 1; ncols <= W; ncols += 13) {
		memset(s, 0xAB, l.nbytes);
		REQUIRE(ane_scatter_f32(&l, s, x, ncols, C, err) == 0, "%s", err);
		int ok = 1, untouched = 1;
		for (size_t c = 0; c < C; c++)
			for (size_t j = 0; j < W; j++) {
				uint16_t h;
				memcpy(&h, s + ane_layout_offset(&l, c, 0, j), 2);
				if (j < ncols)
					ok &= h == ad_f32_to_fp16(x[j * C + c]);
				else
					untouched &= h == 0xABAB;
			}
		CHECK(ok, "ncols %zu: planar bytes wrong", ncols);
		CHECK(untouched, "ncols %zu: columns past ncols written", ncols);
		// padding between rows not touched either
		REQUIRE(ane_gather_f32(&l, s, back, ncols, C, err) == 0, "%s", err);
		ok = 1;
		for (size_t j = 0; j < ncols; j++)
			for (size_t c = 0; c < C; c++)
				ok &= back[j * C + c] == ad_fp16_to_f32(ad_f32_to_fp16(x[j * C + c]));
		CHECK(ok, "ncols %zu: gather does not invert scatter", ncols);
	}
	// padding after a row is never written: 20 columns are 40 of 64 bytes
	struct ane_layout pad;
	ane_layout_init(&pad, C, 1, 20, 2, err);
	memset(s, 0xAB, pad.nbytes);
	CHECK(ane_scatter_f32(&pad, s, x, 20, C, err) == 0);
	int clean = 1;
	for (size_t c = 0; c < C; c++)
		for (size_t b = 40; b < 64; b++)
			clean &= s[c * 64 + b] == 0xAB;
	CHECK(clean, "row padding written");
	// decode: one channel per 64-byte plane
	struct ane_layout d;
	ane_layout_init(&d, 5, 1, 1, 2, err);
	float v[5] = {1, 2, 3, 4, 5};
	memset(s, 0, d.nbytes);
	CHECK(ane_scatter_f32(&d, s, v, 1, 5, err) == 0);
	CHECK(s[0] == 0x00 && s[1] == 0x3c && s[64] == 0x00 && s[65] == 0x40 && s[2] == 0);
	// refusals
	CHECK(ane_scatter_f32(&l, s, x, W + 1, C, err) < 0);
	CHECK(strstr(err, "columns"), "%s", err);
	CHECK(ane_gather_f32(&l, s, x, 1, C - 1, err) < 0);
	struct ane_layout f32;
	ane_layout_init(&f32, 4, 1, 4, 4, err);
	CHECK(ane_scatter_f32(&f32, s, x, 1, 4, err) < 0);
	free(s);
	free(x);
	free(back);
}

// ---------------------------------------------------------------------------
// conv kernels

// every kernel sums output (o, j) as one fp32 FMA chain over i from 0, so
// each fast path (AVX2, AVX-512 where the CPU has it) equals the plain one
// bit for bit, at every width and panel split (the AVX2 tiles take 1 to 4
// panels and 1 to 3 columns at once, the AVX-512 ones up to 4 x 12)
static void
test_conv_fast_vs_ref(void)
{
	// 1100 inputs: x packed for the AVX-512 tiles in three runs of steps
	static const size_t sizes[][2] = {{16, 16},  {17, 3},           {5, 64},       {48, 33},   {100, 257}, {64, 1},
	                                  {200, 40}, {16 * 13 + 7, 24}, {16 * 9, 131}, {33, 1100}, {19, 2100}};
	static const size_t widths[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 17, 19, 24, 25, 31, 36, 37, 48, 63, 64};
	int top = emu_cpu_simd();
	if (top < EMU_SIMD_AVX2)
		fprintf(stderr, "  (no AVX2/FMA/F16C here: the fast path is the reference)\n");
	if (top < EMU_SIMD_AVX512)
		fprintf(stderr, "  (no AVX-512 here: that path is not run)\n");
	int bad_exact = 0, bad_split = 0, runs = 0;
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		size_t cout = sizes[s][0], cin = sizes[s][1];
		for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
			size_t ncols = widths[wi];
			float *wf = randv(cout * cin, 2.0f), *x = randv(ncols * cin, 2.0f);
			uint16_t *w = malloc(cout * cin * 2);
			ad_f32_to_fp16_row_ref(wf, w, cout * cin);
			// x is left in fp32 (the emu feeds fp16 values, whose products with
			// fp16 weights are exact in fp32): a kernel that rounds the product
			// before adding it differs from a fused multiply-add here
			uint16_t *p = aligned_alloc(64, (emu_panel_bytes(cout, cin) + 63) / 64 * 64);
			emu_pack(w, cout, cin, p);
			// a guard column past the end catches a tile storing too far
			size_t n = (ncols + 1) * cout;
			float *y0 = calloc(n, 4), *y1 = calloc(n, 4), *y2 = calloc(n, 4);
			size_t np = (cout + 15) / 16;
			emu_conv_ref(p, cout, cin, x, ncols, y0, 0, np);
			for (int l = EMU_SIMD_AVX2; l <= top; l++) {
				runs++;
				memset(y1, 0, n * 4);
				memset(y2, 0, n * 4);
				// in two halves, as threads would
				emu_conv_simd(l, p, cout, cin, x, ncols, y1, 0, np / 2);
				emu_conv_simd(l, p, cout, cin, x, ncols, y1, np / 2, np);
				// one panel at a time
				for (size_t q = 0; q < np; q++)
					emu_conv_simd(l, p, cout, cin, x, ncols, y2, q, q + 1);
				if (memcmp(y0, y1, n * 4)) {
					if (!bad_exact++)
						CHECK(0, "%s %zux%zu ncols %zu: differs from ref", emu_simd_name(l),
						      cout, cin, ncols);
				}
				bad_split += memcmp(y1, y2, n * 4) != 0;
			}
			double mr = 0, mexact = 0;
			for (size_t j = 0; j < ncols; j++)
				for (size_t o = 0; o < cout; o++) {
					double r = 0;
					for (size_t i = 0; i < cin; i++)
						r += (double)ad_fp16_to_f32(w[o * cin + i]) * x[j * cin + i];
					mr = fmax(mr, fabs(r));
					mexact = fmax(mexact, fabs(y0[j * cout + o] - r));
				}
			// fp32 accumulation, one fp16 rounding
			CHECK(mexact <= 1e-3 * mr + 1e-6, "%zux%zu ncols %zu: ref vs exact %g", cout, cin, ncols,
			      mexact);
			free(wf), free(x), free(w), free(p), free(y0), free(y1), free(y2);
		}
	}
	fprintf(stderr, "  %d shape x width x path runs\n", runs);
	CHECK(bad_exact == 0, "%d shapes where a fast path and ref differ", bad_exact);
	CHECK(bad_split == 0, "%d shapes where a panel split changes the bits", bad_split);
}

// decode and prefill give the same bits: each column of a wide call equals
// that column computed alone, and any prefix of the columns equals the
// same columns of the wide call
static void
test_conv_columns_independent(void)
{
	size_t cout = 16 * 9 + 5, cin = 77, W = 40;
	float *wf = randv(cout * cin, 1.0f), *x = randv(W * cin, 3.0f);
	uint16_t *w = malloc(cout * cin * 2);
	ad_f32_to_fp16_row_ref(wf, w, cout * cin);
	uint16_t *p = aligned_alloc(64, (emu_panel_bytes(cout, cin) + 63) / 64 * 64);
	emu_pack(w, cout, cin, p);
	size_t np = (cout + 15) / 16;
	float *yw = calloc(W * cout, 4), *y = calloc(W * cout, 4);
	emu_conv_fast(p, cout, cin, x, W, yw, 0, np);
	int alone = 0, prefix = 0;
	for (size_t j = 0; j < W; j++) {
		emu_conv_fast(p, cout, cin, x + j * cin, 1, y, 0, np);
		alone += memcmp(y, yw + j * cout, cout * 4) != 0;
	}
	for (size_t n = 1; n <= W; n++) {
		memset(y, 0, W * cout * 4);
		emu_conv_fast(p, cout, cin, x, n, y, 0, np);
		prefix += memcmp(y, yw, n * cout * 4) != 0;
		// the columns past n are left alone
		for (size_t i = n * cout; i < W * cout; i++)
			if (y[i] != 0) {
				prefix++;
				break;
			}
	}
	CHECK(alone == 0, "%d columns differ alone vs in a batch of %zu", alone, W);
	CHECK(prefix == 0, "%d widths whose columns differ from the full width", prefix);
	// and the same through the plain kernel
	memset(y, 0, W * cout * 4);
	emu_conv_ref(p, cout, cin, x, W, y, 0, np);
	CHECK(!memcmp(y, yw, W * cout * 4), "ref differs from fast at width %zu", W);
	free(wf), free(x), free(w), free(p), free(yw), free(y);
}

// ---------------------------------------------------------------------------
// kernels through MIL text, blob files and surfaces

// write x ([ncols][C] fp32) into a fresh zeroed surface, eval, read back
static int
run(struct emu_kernel *k, const float *x, size_t ncols, float *y, char *err)
{
	const struct ane_layout *li = emu_input_layout(k, 0), *lo = emu_output_layout(k, 0);
	void *in = calloc(1, emu_input_capacity(k)), *out = calloc(1, emu_output_capacity(k));
	int rc = ane_scatter_f32(li, in, x, ncols, li->channels, err);
	if (!rc)
		rc = emu_eval(k, (const void *const *)&in, &out, ncols, err);
	if (!rc)
		rc = ane_gather_f32(lo, out, y, ncols, lo->channels, err);
	free(in);
	free(out);
	return rc;
}

static struct emu_kernel *
compile(const char *mil, const char *blob, char *err)
{
	struct emu_file f = {.name = "w.bin", .path = blob};
	return emu_compile(E, mil, &f, 1, err);
}

// a projection of fp32 weights w [cout][cin] for W columns, its blob at
// tmp_path(file), compiled on E; NULL with err
static struct emu_kernel *
compile_proj(const float *w, size_t cin, size_t cout, size_t W, const char *file, char *err)
{
	const char *blob = tmp_path(file);
	if (ane_blob_write_proj(blob, &(struct ane_wsrc){w, AD_TYPE_F32, cout * cin}, 1, err))
		return NULL;
	char *mil = ane_mil_proj((int)cin, (int)cout, (int)W, err);
	struct emu_kernel *k = mil ? compile(mil, blob, err) : NULL;
	free(mil);
	return k;
}

// y[j][o] = sum_i w[o][i] x[j][i], in double
static void
ref_conv(const float *w, size_t cout, size_t cin, const float *x, size_t ncols, float *y)
{
	for (size_t j = 0; j < ncols; j++)
		for (size_t o = 0; o < cout; o++) {
			double s = 0;
			for (size_t i = 0; i < cin; i++)
				s += (double)w[o * cin + i] * x[j * cin + i];
			y[j * cout + o] = (float)s;
		}
}

static double
rel_err(const float *a, const float *ref, size_t n)
{
	double md = 0, mr = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]))
			return INFINITY;
		md = fmax(md, fabs((double)a[i] - ref[i]));
		mr = fmax(mr, fabs((double)ref[i]));
	}
	return md / (mr > 0 ? mr : 1);
}

// the seed's first probe: exact in fp16
static void
test_probe_vector(void)
{
	char err[AD_ERRLEN];
	float w[6 * 4], x[2 * 4], y[2 * 6];
	for (int o = 0; o < 6; o++)
		for (int c = 0; c < 4; c++)
			w[o * 4 + c] = 0.5f * (o + 1) - 0.125f * c;
	// x[c*2 + j] in channel-major terms; ours is [j][c]
	for (int c = 0; c < 4; c++)
		for (int j = 0; j < 2; j++)
			x[j * 4 + c] = 0.25f * (c * 2 + j + 1);
	const char *blob = tmp_path("probe.bin");
	REQUIRE(ane_blob_write_proj(blob, &(struct ane_wsrc){w, AD_TYPE_F32, 24}, 1, err) == 0);
	char *mil = ane_mil_proj(4, 6, 2, err);
	struct emu_kernel *k = compile(mil, blob, err);
	REQUIRE(k, "%s", err);
	REQUIRE(run(k, x, 2, y, err) == 0, "%s", err);
	static const float want[12] = {0.9375, 1.25, 2.9375, 3.75,  4.9375,  6.25,
	                               6.9375, 8.75, 8.9375, 11.25, 10.9375, 13.75};
	for (int o = 0; o < 6; o++)
		for (int j = 0; j < 2; j++)
			CHECK(y[j * 6 + o] == want[o * 2 + j], "o %d j %d: %g", o, j, y[j * 6 + o]);
	CHECK(emu_ninputs(k) == 1 && emu_noutputs(k) == 1 && emu_width(k) == 2);
	CHECK(!strcmp(emu_input_name(k, 0), "i0") && !strcmp(emu_output_name(k, 0), "o0"));
	CHECK(emu_input_capacity(k) == 49152 && emu_weight_bytes(k) == 48);
	emu_kernel_free(k);
	free(mil);
}

// the kernels of a context share its activation buffers: a small kernel
// evaluated before and after a wider one (which grows and moves them) gives
// the same bits, and so does the wide one after the small one ran
static void
test_shared_activations(void)
{
	char err[AD_ERRLEN];
	const size_t ci = 32, co = 48, Ws = 2, Wb = 64;
	float *w = randv(co * ci, 0.5f), *x = randv(Wb * ci, 1.0f);
	const char *blob = tmp_path("act.bin");
	REQUIRE(ane_blob_write_proj(blob, &(struct ane_wsrc){w, AD_TYPE_F32, co * ci}, 1, err) == 0);
	char *ms = ane_mil_proj(ci, co, Ws, err), *mb = ms ? ane_mil_proj(ci, co, Wb, err) : NULL;
	REQUIRE(mb, "%s", err);
	struct emu_kernel *ks = compile(ms, blob, err), *kb = ks ? compile(mb, blob, err) : NULL;
	REQUIRE(kb, "%s", err);
	float *ys1 = calloc(Ws * co, 4), *ys2 = calloc(Ws * co, 4), *yb1 = calloc(Wb * co, 4),
	      *yb2 = calloc(Wb * co, 4);
	REQUIRE(run(ks, x, Ws, ys1, err) == 0, "%s", err);
	REQUIRE(run(kb, x, Wb, yb1, err) == 0, "%s", err);
	REQUIRE(run(ks, x, Ws, ys2, err) == 0, "%s", err);
	REQUIRE(run(kb, x, Wb, yb2, err) == 0, "%s", err);
	CHECK(!memcmp(ys1, ys2, Ws * co * 4), "the small kernel changed after the wide one ran");
	CHECK(!memcmp(yb1, yb2, Wb * co * 4), "the wide kernel changed after the small one ran");
	// and the columns the two share agree with each other
	CHECK(!memcmp(ys1, yb1, Ws * co * 4), "the first columns differ between the widths");
	emu_kernel_free(ks);
	emu_kernel_free(kb);
	free(ms), free(mb), free(w), free(x), free(ys1), free(ys2), free(yb1), free(yb2);
}

static const char *
small_blob(void)
{
	static char p[512];
	if (!p[0]) {
		char err[AD_ERRLEN];
		float w[4 * 8];
		for (int i = 0; i < 32; i++)
			w[i] = (float)i;
		snprintf(p, sizeof p, "%s", tmp_path("small.bin"));
		ane_blob_write_proj(p, &(struct ane_wsrc){w, AD_TYPE_F32, 32}, 1, err);
	}
	return p;
}

// single projections (o, a split-FFN half, a head chunk) at several shapes
static void
test_proj(void)
{
	static const size_t shapes[][3] = {{64, 48, 64}, {200, 33, 1}, {33, 200, 8}, {128, 96, 32}};
	char err[AD_ERRLEN];
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		size_t cin = shapes[s][0], cout = shapes[s][1], W = shapes[s][2];
		float *w = randv(cout * cin, 0.4f), *x = randv(W * cin, 2.0f);
		struct emu_kernel *k = compile_proj(w, cin, cout, W, "proj.bin", err);
		REQUIRE(k, "%s", err);
		float *y = calloc(W * cout, 4), *r = calloc(W * cout, 4);
		REQUIRE(run(k, x, W, y, err) == 0, "%s", err);
		ref_conv(w, cout, cin, x, W, r);
		double e = rel_err(y, r, W * cout);
		CHECK(e < 2e-3, "%zu -> %zu w%zu: rel %g", cin, cout, W, e);
		emu_kernel_free(k);
		free(w), free(x), free(y), free(r);
	}
	// a huge declared tensor is refused, not allocated
	char *mil = ane_mil_proj(8, 4, 1, err);
	char *p = strstr(mil, "[1, 8, 1, 1]> i0");
	REQUIRE(p);
	size_t n = strlen(mil) + 16;
	char *big = malloc(n);
	snprintf(big, n, "%.*s[1, 8, 1, 99999999]> i0%s", (int)(p - mil), mil, p + strlen("[1, 8, 1, 1]> i0"));
	CHECK(!compile(big, small_blob(), err));
	CHECK(strstr(err, "dimension 99999999 out of range"), "%s", err);
	free(big);
	free(mil);
}

// host rows (emu_eval_host): input and output as fp32 rows of any stride
// give the surfaces' bits; rows narrower than the channels are refused
static void
test_eval_host(void)
{
	char err[AD_ERRLEN];
	const size_t cin = 40, cout = 24, W = 5, ldi = cin + 3, ldo = cout + 7;
	float *w = randv(cout * cin, 0.4f), *x = randv(W * cin, 2.0f);
	struct emu_kernel *k = compile_proj(w, cin, cout, W, "host.bin", err);
	REQUIRE(k, "%s", err);
	float *y = calloc(W * cout, 4), *xr = calloc(W * ldi, 4), *yr = calloc(W * ldo, 4);
	for (size_t j = 0; j < W; j++)
		memcpy(xr + j * ldi, x + j * cin, cin * 4);
	REQUIRE(run(k, x, W, y, err) == 0, "%s", err);
	void *in = calloc(1, emu_input_capacity(k)), *out = calloc(1, emu_output_capacity(k));
	REQUIRE(emu_eval_host(k, in, out, xr, ldi, yr, ldo, W, err) == 0, "%s", err);
	int same = 1;
	for (size_t j = 0; j < W; j++)
		same &= !memcmp(yr + j * ldo, y + j * cout, cout * 4);
	CHECK(same, "host rows differ from the surfaces");
	CHECK(emu_eval_host(k, in, out, xr, cin - 1, NULL, 0, W, err) < 0 && strstr(err, "channels"), "%s", err);
	CHECK(emu_eval_host(k, in, out, NULL, 0, yr, cout - 1, W, err) < 0 && strstr(err, "channels"), "%s", err);
	emu_kernel_free(k);
	free(in), free(out), free(w), free(x), free(y), free(xr), free(yr);
}

// the thread pool: many back-to-back parallel evals give the single-thread
// bits every time (the split is by output rows, so sums are unchanged)
static void
test_threads(void)
{
	char err[AD_ERRLEN];
	size_t cin = 128, cout = 272, W = 32;
	float *w = randv(cout * cin, 0.4f), *x = randv(W * cin, 2.0f);
	const char *blob = tmp_path("thr.bin");
	REQUIRE(ane_blob_write_proj(blob, &(struct ane_wsrc){w, AD_TYPE_F32, cout * cin}, 1, err) == 0);
	char *mil = ane_mil_proj((int)cin, (int)cout, (int)W, err);
	struct emu_file f = {.name = "w.bin", .path = blob};
	struct emu *e1 = emu_open(&(struct emu_opts){.threads = 1}, err);
	struct emu *e3 = emu_open(&(struct emu_opts){.threads = 3}, err);
	REQUIRE(e1 && e3, "%s", err);
	struct emu_kernel *k1 = emu_compile(e1, mil, &f, 1, err), *k3 = emu_compile(e3, mil, &f, 1, err);
	REQUIRE(k1 && k3, "%s", err);
	float *y1 = calloc(W * cout, 4), *y3 = calloc(W * cout, 4);
	REQUIRE(run(k1, x, W, y1, err) == 0, "%s", err);
	int same = 1;
	for (int i = 0; i < 200; i++) {
		memset(y3, 0, W * cout * 4);
		REQUIRE(run(k3, x, W, y3, err) == 0, "%s", err);
		same &= !memcmp(y1, y3, W * cout * 4);
	}
	CHECK(same, "3 threads differ from 1");
	emu_kernel_free(k1);
	emu_kernel_free(k3);
	emu_close(e1);
	emu_close(e3);
	free(mil), free(w), free(x), free(y1), free(y3);
}

// the emu's own surface moves (8x8 blocks, partial blocks, a width whose
// last block would cross a plane's end, channel tails): an identity conv
// returns its input bit for bit in the first ncols columns, leaves every
// other byte of the output surface alone, and the plain path writes the
// same bytes
static void
test_surface_moves(void)
{
	static const size_t chans[] = {8, 13, 64};
	static const size_t widths[] = {8, 12, 32, 41, 64};
	static const size_t cols[] = {1, 2, 3, 7, 8, 9, 17, 40, 64};
	char err[AD_ERRLEN];
	struct emu *eref = emu_open(&(struct emu_opts){.threads = 1, .force_ref = 1}, err);
	REQUIRE(eref, "%s", err);
	int bad_val = 0, bad_pad = 0, bad_ref = 0, runs = 0;
	for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++) {
		size_t C = chans[ci];
		float *w = calloc(C * C, 4);
		for (size_t c = 0; c < C; c++)
			w[c * C + c] = 1.0f;
		const char *blob = tmp_path("ident.bin");
		REQUIRE(ane_blob_write_proj(blob, &(struct ane_wsrc){w, AD_TYPE_F32, C * C}, 1, err) == 0);
		for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
			size_t W = widths[wi];
			char *mil = ane_mil_proj((int)C, (int)C, (int)W, err);
			struct emu_file f = {.name = "w.bin", .path = blob};
			struct emu_kernel *k = emu_compile(E, mil, &f, 1, err);
			struct emu_kernel *kr = emu_compile(eref, mil, &f, 1, err);
			REQUIRE(k && kr, "%s", err);
			size_t icap = emu_input_capacity(k), ocap = emu_output_capacity(k);
			const struct ane_layout *lo = emu_output_layout(k, 0);
			uint8_t *in = malloc(icap), *out = malloc(ocap), *outr = malloc(ocap);
			// every input byte random (fp16 NaNs included: they are
			// converted and dropped past ncols, copied as they are inside)
			for (size_t i = 0; i < icap; i++)
				in[i] = (uint8_t)(lcg(128.0f) + 128.0f);
			// no NaN or infinity in the columns that are computed
			for (size_t c = 0; c < C; c++)
				for (size_t j = 0; j < W; j++) {
					uint16_t h = ad_f32_to_fp16(lcg(8.0f));
					memcpy(in + c * lo->plane_stride + j * 2, &h, 2);
				}
			for (size_t ni = 0; ni < sizeof cols / sizeof cols[0]; ni++) {
				size_t n = cols[ni];
				if (n > W)
					continue;
				runs++;
				memset(out, 0xa5, ocap);
				memset(outr, 0xa5, ocap);
				REQUIRE(emu_eval(k, (const void *const *)&in, (void *const *)&out, n, err) == 0, "%s",
				        err);
				REQUIRE(emu_eval(kr, (const void *const *)&in, (void *const *)&outr, n, err) == 0, "%s",
				        err);
				bad_ref += memcmp(out, outr, ocap) != 0;
				int v = 0, pad = 0;
				for (size_t c = 0; c < C; c++) {
					const uint8_t *po = out + c * lo->plane_stride;
					const uint8_t *pi = in + c * lo->plane_stride;
					// -0 comes back as +0 (0 + -0 * 1 ... is +0): compare values
					for (size_t j = 0; j < n; j++) {
						uint16_t a, b;
						memcpy(&a, po + j * 2, 2);
						memcpy(&b, pi + j * 2, 2);
						v += ad_fp16_to_f32(a) != ad_fp16_to_f32(b);
					}
					for (size_t bi = n * 2; bi < lo->plane_stride; bi++)
						pad += po[bi] != 0xa5;
				}
				for (size_t bi = C * lo->plane_stride; bi < ocap; bi++)
					pad += out[bi] != 0xa5;
				bad_val += v != 0;
				bad_pad += pad != 0;
			}
			emu_kernel_free(k);
			emu_kernel_free(kr);
			free(mil), free(in), free(out), free(outr);
		}
		free(w);
	}
	CHECK(runs > 80, "%d runs", runs);
	CHECK(bad_val == 0, "%d runs where the identity changed a value", bad_val);
	CHECK(bad_pad == 0, "%d runs that wrote past ncols", bad_pad);
	CHECK(bad_ref == 0, "%d runs where the plain path wrote other bytes", bad_ref);
	emu_close(eref);
}

// fused QKV: rows [Wq; Wk; Wv] from three buffers, one conv
static void
test_qkv(void)
{
	char err[AD_ERRLEN];
	size_t hidden = 96, qd = 64, kvd = 32, W = 32, cout = qd + 2 * kvd;
	float *wq = randv(qd * hidden, 0.3f), *wk = randv(kvd * hidden, 0.3f), *wv = randv(kvd * hidden, 0.3f),
	      *x = randv(W * hidden, 2.0f);
	const char *blob = tmp_path("qkv.bin");
	struct ane_wsrc parts[3] = {
		{wq, AD_TYPE_F32, qd * hidden}, {wk, AD_TYPE_F32, kvd * hidden}, {wv, AD_TYPE_F32, kvd * hidden}};
	REQUIRE(ane_blob_write_proj(blob, parts, 3, err) == 0, "%s", err);
	char *mil = ane_mil_proj((int)hidden, (int)cout, (int)W, err);
	struct emu_kernel *k = compile(mil, blob, err);
	REQUIRE(k, "%s", err);
	float *y = calloc(W * cout, 4), *r = calloc(W * cout, 4);
	REQUIRE(run(k, x, W, y, err) == 0, "%s", err);
	float *wall = malloc(cout * hidden * 4);
	memcpy(wall, wq, qd * hidden * 4);
	memcpy(wall + qd * hidden, wk, kvd * hidden * 4);
	memcpy(wall + (qd + kvd) * hidden, wv, kvd * hidden * 4);
	ref_conv(wall, cout, hidden, x, W, r);
	double e = rel_err(y, r, W * cout);
	CHECK(e < 2e-3, "qkv rel %g", e);
	// q, k, v land in their channel ranges: k's block on its own
	double ek = 0, mk = 0;
	for (size_t j = 0; j < W; j++)
		for (size_t o = qd; o < qd + kvd; o++) {
			double s = 0;
			for (size_t i = 0; i < hidden; i++)
				s += (double)wk[(o - qd) * hidden + i] * x[j * hidden + i];
			ek = fmax(ek, fabs(y[j * cout + o] - s));
			mk = fmax(mk, fabs(s));
		}
	CHECK(ek / mk < 2e-3, "k block rel %g", ek / mk);

	// decode: only column 0 written and read; same values as the full eval
	float *y1 = calloc(cout, 4);
	REQUIRE(run(k, x, 1, y1, err) == 0, "%s", err);
	CHECK(!memcmp(y1, y, cout * 4), "column 0 differs between decode and prefill");
	// five columns: four through the wide kernel, one alone; same bits
	float *y5 = calloc(5 * cout, 4);
	REQUIRE(run(k, x, 5, y5, err) == 0, "%s", err);
	CHECK(!memcmp(y5, y, 5 * cout * 4), "5 columns differ from the full width");
	free(y5);
	// bad calls
	void *in = calloc(1, emu_input_capacity(k)), *out = calloc(1, emu_output_capacity(k));
	CHECK(emu_eval(k, (const void *const *)&in, &out, W + 1, err) < 0);
	CHECK(strstr(err, "33 columns, the program is 32 wide"), "%s", err);
	void *none = NULL;
	CHECK(emu_eval(k, (const void *const *)&none, &out, 1, err) < 0);
	CHECK(strstr(err, "input 0 (i0) has no surface"), "%s", err);
	free(in);
	free(out);
	// threads and the plain kernels agree with the default path
	struct emu *e1 = emu_open(&(struct emu_opts){.threads = 1, .force_ref = 1}, err);
	struct emu_file f = {.name = "w.bin", .path = blob};
	struct emu_kernel *k1 = emu_compile(e1, mil, &f, 1, err);
	REQUIRE(k1, "%s", err);
	float *y2 = calloc(W * cout, 4);
	REQUIRE(run(k1, x, W, y2, err) == 0, "%s", err);
	CHECK(rel_err(y2, y, W * cout) < 2e-3, "ref path %g", rel_err(y2, y, W * cout));
	emu_kernel_free(k1);
	emu_close(e1);
	emu_kernel_free(k);
	free(mil), free(wq), free(wk), free(wv), free(x), free(y), free(r), free(wall), free(y1), free(y2);
}

static float
silu(float v)
{
	return v / (1.0f + expf(-v));
}

static void
ref_ffn(const float *g, const float *u, const float *d, size_t hidden, size_t inter, const float *x, size_t W, float *y)
{
	float *a = malloc(W * inter * 4), *b = malloc(W * inter * 4);
	ref_conv(g, inter, hidden, x, W, a);
	ref_conv(u, inter, hidden, x, W, b);
	for (size_t i = 0; i < W * inter; i++)
		a[i] = silu(a[i]) * b[i];
	ref_conv(d, hidden, inter, a, W, y);
	free(a);
	free(b);
}

static void
test_ffn_fused(void)
{
	char err[AD_ERRLEN];
	size_t hidden = 64, inter = 176, W = 32;
	float *g = randv(inter * hidden, 0.5f), *u = randv(inter * hidden, 0.5f), *d = randv(hidden * inter, 0.3f),
	      *x = randv(W * hidden, 2.0f);
	const char *blob = tmp_path("ffn.bin");
	struct ane_wsrc gs = {g, AD_TYPE_F32, inter * hidden}, us = {u, AD_TYPE_F32, inter * hidden},
			ds = {d, AD_TYPE_F32, hidden * inter};
	REQUIRE(ane_blob_write_ffn(blob, &gs, &us, &ds, err) == 0, "%s", err);
	char *mil = ane_mil_ffn((int)hidden, (int)inter, (int)W, err);
	struct emu_kernel *k = compile(mil, blob, err);
	REQUIRE(k, "%s", err);
	CHECK(emu_nblobfiles(k) == 3);
	float *y = calloc(W * hidden, 4), *r = calloc(W * hidden, 4);
	REQUIRE(run(k, x, W, y, err) == 0, "%s", err);
	ref_ffn(g, u, d, hidden, inter, x, W, r);
	double e = rel_err(y, r, W * hidden);
	CHECK(e < 3e-3, "fused ffn rel %g", e);
	fprintf(stderr, "  fused ffn rel %.2e\n", e);
	// its activations: x, gate, up and the gate's result; the output shares
	// x's bytes (x is dead by then) and the two intermediates the fused gate
	// never writes take none; op by op they take room, and the gate's
	// result takes the bytes of gate, dead by then
	CHECK(emu_act_bytes(k) == W * (hidden + 3 * inter) * 4, "fused: %zu bytes", emu_act_bytes(k));
	struct emu *e1 = emu_open(&(struct emu_opts){.threads = 1, .no_fuse = 1}, err);
	REQUIRE(e1, "%s", err);
	struct emu_file f1 = {.name = "w.bin", .path = blob};
	struct emu_kernel *k1 = emu_compile(e1, mil, &f1, 1, err);
	REQUIRE(k1, "%s", err);
	CHECK(emu_act_bytes(k1) == W * (hidden + 4 * inter) * 4, "op by op: %zu bytes", emu_act_bytes(k1));
	emu_kernel_free(k1);
	emu_close(e1);
	emu_kernel_free(k);
	free(mil), free(g), free(u), free(d), free(x), free(y), free(r);
}

// every path through the whole program gives the same bits: a projection
// and the fused FFN (its gate fused or op by op) on contexts of each path
// the CPU has, 1 and 2 threads, at odd widths; the op-by-op ref context is
// the baseline
static void
test_paths_same_bits(void)
{
	char err[AD_ERRLEN];
	static const size_t cols[] = {1, 2, 5, 7, 13, 31, 64};
	size_t hidden = 93, inter = 170, W = 64;
	float *g = randv(inter * hidden, 0.5f), *u = randv(inter * hidden, 0.5f), *d = randv(hidden * inter, 0.3f),
	      *x = randv(W * hidden, 2.0f);
	const char *fblob = tmp_path("ffnbits.bin"), *pblob = tmp_path("projbits.bin");
	struct ane_wsrc gs = {g, AD_TYPE_F32, inter * hidden}, us = {u, AD_TYPE_F32, inter * hidden},
			ds = {d, AD_TYPE_F32, hidden * inter};
	REQUIRE(ane_blob_write_ffn(fblob, &gs, &us, &ds, err) == 0, "%s", err);
	REQUIRE(ane_blob_write_proj(pblob, &gs, 1, err) == 0, "%s", err);
	char *mils[2] = {ane_mil_ffn((int)hidden, (int)inter, (int)W, err),
	                 ane_mil_proj((int)hidden, (int)inter, (int)W, err)};
	const char *blobs[2] = {fblob, pblob};
	size_t couts[2] = {hidden, inter};
	int top = emu_cpu_simd(), bad = 0, runs = 0;
	for (int m = 0; m < 2; m++) {
		struct emu_file f = {.name = "w.bin", .path = blobs[m]};
		struct emu *e0 = emu_open(&(struct emu_opts){.threads = 1, .simd = EMU_SIMD_REF, .no_fuse = 1}, err);
		REQUIRE(e0, "%s", err);
		CHECK(emu_simd(e0) == EMU_SIMD_REF);
		struct emu_kernel *k0 = emu_compile(e0, mils[m], &f, 1, err);
		REQUIRE(k0, "%s", err);
		float *y0 = calloc(W * couts[m], 4), *y1 = calloc(W * couts[m], 4);
		for (int l = EMU_SIMD_REF; l <= top; l++)
			for (int th = 1; th <= 2; th++)
				for (int nf = 0; nf <= 1; nf++) {
					struct emu *e = emu_open(
						&(struct emu_opts){.threads = th, .simd = l, .no_fuse = nf}, err);
					REQUIRE(e, "%s", err);
					CHECK(emu_simd(e) == l, "%s", emu_simd_name(l));
					struct emu_kernel *k = emu_compile(e, mils[m], &f, 1, err);
					REQUIRE(k, "%s", err);
					for (size_t ci = 0; ci < sizeof cols / sizeof cols[0]; ci++) {
						size_t n = cols[ci];
						memset(y0, 0, W * couts[m] * 4);
						memset(y1, 0, W * couts[m] * 4);
						REQUIRE(run(k0, x, n, y0, err) == 0, "%s", err);
						REQUIRE(run(k, x, n, y1, err) == 0, "%s", err);
						runs++;
						if (memcmp(y0, y1, W * couts[m] * 4) && !bad++)
							CHECK(0,
							      "%s: %s, %d thread(s), %s, %zu columns: differs from ref",
							      m ? "proj" : "ffn", emu_simd_name(l), th,
							      nf ? "op by op" : "fused", n);
					}
					emu_kernel_free(k);
					emu_close(e);
				}
		emu_kernel_free(k0);
		emu_close(e0);
		free(y0), free(y1);
	}
	fprintf(stderr, "  %d runs on paths ref..%s\n", runs, emu_simd_name(top));
	CHECK(bad == 0, "%d runs differ from the op-by-op ref", bad);
	CHECK(runs >= 2 * 2 * 2 * 2 * 7);
	free(mils[0]), free(mils[1]), free(g), free(u), free(d), free(x);
}

// weights of 2 MiB and more sit on huge-page-aligned panels: such a conv
// (and the 8-stream one-column tiles over 65 panels, a 1-panel tail) gives
// the ref's bits on every path
static void
test_big_panels(void)
{
	char err[AD_ERRLEN];
	size_t cin = 1024, cout = 1040, W = 4;
	float *w = randv(cout * cin, 0.1f), *x = randv(W * cin, 2.0f);
	const char *blob = tmp_path("big.bin");
	REQUIRE(ane_blob_write_proj(blob, &(struct ane_wsrc){w, AD_TYPE_F32, cout * cin}, 1, err) == 0);
	CHECK(emu_panel_bytes(cout, cin) >= (size_t)2 << 20);
	char *mil = ane_mil_proj((int)cin, (int)cout, (int)W, err);
	struct emu_file f = {.name = "w.bin", .path = blob};
	float *y0 = calloc(W * cout, 4), *y1 = calloc(W * cout, 4);
	struct emu *e0 = emu_open(&(struct emu_opts){.threads = 1, .force_ref = 1}, err);
	REQUIRE(e0, "%s", err);
	struct emu_kernel *k0 = emu_compile(e0, mil, &f, 1, err);
	REQUIRE(k0, "%s", err);
	CHECK(emu_weight_bytes(k0) == cout * cin * 2);
	for (int l = EMU_SIMD_AVX2; l <= emu_cpu_simd(); l++) {
		struct emu *e = emu_open(&(struct emu_opts){.threads = 2, .simd = l}, err);
		REQUIRE(e, "%s", err);
		struct emu_kernel *k = emu_compile(e, mil, &f, 1, err);
		REQUIRE(k, "%s", err);
		for (size_t n = 1; n <= W; n += 2) {
			REQUIRE(run(k0, x, n, y0, err) == 0, "%s", err);
			REQUIRE(run(k, x, n, y1, err) == 0, "%s", err);
			CHECK(!memcmp(y0, y1, n * cout * 4), "%s, %zu columns", emu_simd_name(l), n);
		}
		emu_kernel_free(k);
		emu_close(e);
	}
	emu_kernel_free(k0);
	emu_close(e0);
	free(mil), free(w), free(x), free(y0), free(y1);
}

// weights under 2 MiB are on huge pages too (a SmolLM2-135M layer's are
// 0.7 to 1.8 MB): four 1.1 MB kernels hold at least two huge pages more
// than before they were compiled, where the kernel gives advised memory
// transparent huge pages
static void
test_small_panels_huge(void)
{
	char err[AD_ERRLEN], mode[16];
	const char *m = ad_huge_thp_mode(mode, sizeof mode);
	if (!m || !strcmp(m, "never") || ad_huge_process_bytes() < 0) {
		printf("test_small_panels_huge: transparent huge pages %s here: not checked\n", m ? m : "unknown");
		return;
	}
	size_t cin = 576, cout = 960;
	float *w = randv(cout * cin, 0.1f);
	const char *blob = tmp_path("small.bin");
	REQUIRE(ane_blob_write_proj(blob, &(struct ane_wsrc){w, AD_TYPE_F32, cout * cin}, 1, err) == 0);
	CHECK(emu_panel_bytes(cout, cin) < (size_t)2 << 20);
	char *mil = ane_mil_proj((int)cin, (int)cout, 1, err);
	struct emu_file f = {.name = "w.bin", .path = blob};
	struct emu *e = emu_open(&(struct emu_opts){.threads = 1}, err);
	REQUIRE(e, "%s", err);
	long long before = ad_huge_process_bytes();
	struct emu_kernel *k[4];
	for (int i = 0; i < 4; i++)
		REQUIRE(k[i] = emu_compile(e, mil, &f, 1, err), "%s", err);
	long long after = ad_huge_process_bytes();
	CHECK(after - before >= (long long)(4u << 20), "%lld -> %lld bytes on huge pages for 4 x %zu bytes", before,
	      after, emu_panel_bytes(cout, cin));
	for (int i = 0; i < 4; i++)
		emu_kernel_free(k[i]);
	emu_close(e);
	free(mil), free(w);
}

// the path a context runs: emu_opts.simd, else ANEDVD_SIMD, capped at the
// CPU's; force_ref wins; a bad level or name is an error
static void
test_simd_select(void)
{
	char err[AD_ERRLEN];
	int top = emu_cpu_simd();
	CHECK(top >= EMU_SIMD_REF && top <= EMU_SIMD_AVX512, "%d", top);
	CHECK(emu_have_simd() == (top >= EMU_SIMD_AVX2));
	CHECK(!strcmp(emu_simd_name(EMU_SIMD_AVX512), "avx512"));
	CHECK(!strcmp(emu_simd_name(99), "auto"));
	const char *old = getenv("ANEDVD_SIMD");
	char *saved = old ? strdup(old) : NULL;
	unsetenv("ANEDVD_SIMD");
	struct emu *e = emu_open(NULL, err);
	REQUIRE(e, "%s", err);
	CHECK(emu_simd(e) == top, "auto: %s", emu_simd_name(emu_simd(e)));
	CHECK(emu_nthreads(e) == 2);
	emu_close(e);
	static const char *const names[] = {"ref", "avx2", "avx512"};
	for (int l = EMU_SIMD_REF; l <= EMU_SIMD_AVX512; l++) {
		int want = l < top ? l : top;
		setenv("ANEDVD_SIMD", names[l - EMU_SIMD_REF], 1);
		e = emu_open(NULL, err);
		REQUIRE(e, "%s", err);
		CHECK(emu_simd(e) == want, "ANEDVD_SIMD=%s: %s", names[l - 1], emu_simd_name(emu_simd(e)));
		emu_close(e);
		// the option wins over the environment, force_ref over both
		e = emu_open(&(struct emu_opts){.simd = EMU_SIMD_REF}, err);
		REQUIRE(e, "%s", err);
		CHECK(emu_simd(e) == EMU_SIMD_REF);
		emu_close(e);
		e = emu_open(&(struct emu_opts){.simd = l, .force_ref = 1}, err);
		REQUIRE(e, "%s", err);
		CHECK(emu_simd(e) == EMU_SIMD_REF);
		emu_close(e);
	}
	setenv("ANEDVD_SIMD", "sse9", 1);
	CHECK(!emu_open(NULL, err));
	CHECK(strstr(err, "ANEDVD_SIMD=sse9"), "%s", err);
	unsetenv("ANEDVD_SIMD");
	CHECK(!emu_open(&(struct emu_opts){.simd = 7}, err));
	CHECK(strstr(err, "simd level 7"), "%s", err);
	CHECK(!emu_open(&(struct emu_opts){.simd = -1}, err));
	if (saved)
		setenv("ANEDVD_SIMD", saved, 1);
	free(saved);
}

// split FFN: conv hidden -> 2 inter (rows [Wgate; Wup]), SiLU on the CPU,
// conv inter -> hidden
static void
test_ffn_split(void)
{
	char err[AD_ERRLEN];
	size_t hidden = 48, inter = 80, W = 32;
	float *g = randv(inter * hidden, 0.5f), *u = randv(inter * hidden, 0.5f), *d = randv(hidden * inter, 0.3f),
	      *x = randv(W * hidden, 2.0f);
	const char *b1 = tmp_path("up.bin"), *b2 = tmp_path("down.bin");
	struct ane_wsrc up[2] = {{g, AD_TYPE_F32, inter * hidden}, {u, AD_TYPE_F32, inter * hidden}};
	REQUIRE(ane_blob_write_proj(b1, up, 2, err) == 0, "%s", err);
	REQUIRE(ane_blob_write_proj(b2, &(struct ane_wsrc){d, AD_TYPE_F32, hidden * inter}, 1, err) == 0);
	char *m1 = ane_mil_proj((int)hidden, (int)(2 * inter), (int)W, err);
	char *m2 = ane_mil_proj((int)inter, (int)hidden, (int)W, err);
	struct emu_kernel *k1 = compile(m1, b1, err), *k2 = compile(m2, b2, err);
	REQUIRE(k1 && k2, "%s", err);
	float *gu = calloc(W * 2 * inter, 4), *h = calloc(W * inter, 4), *y = calloc(W * hidden, 4),
	      *r = calloc(W * hidden, 4);
	REQUIRE(run(k1, x, W, gu, err) == 0, "%s", err);
	for (size_t j = 0; j < W; j++)
		for (size_t i = 0; i < inter; i++)
			h[j * inter + i] = silu(gu[j * 2 * inter + i]) * gu[j * 2 * inter + inter + i];
	REQUIRE(run(k2, h, W, y, err) == 0, "%s", err);
	ref_ffn(g, u, d, hidden, inter, x, W, r);
	double e = rel_err(y, r, W * hidden);
	CHECK(e < 3e-3, "split ffn rel %g", e);
	emu_kernel_free(k1);
	emu_kernel_free(k2);
	free(m1), free(m2), free(g), free(u), free(d), free(x), free(gu), free(h), free(y), free(r);
}

// LM head split so that no blob exceeds the target; width 1
static void
test_lm_head_chunks(void)
{
	char err[AD_ERRLEN];
	size_t hidden = 64, vocab = 1000;
	uint64_t target = 48 << 10; // 384 rows per chunk at hidden 64
	int rows = ane_head_rows_for((int)hidden, (int)vocab, target);
	CHECK(rows == 384);
	float *w = randv(vocab * hidden, 0.5f), *x = randv(hidden, 2.0f);
	float *y = calloc(vocab, 4), *r = calloc(vocab, 4);
	int nk = 0;
	for (size_t r0 = 0; r0 < vocab; r0 += (size_t)rows, nk++) {
		size_t n = vocab - r0 < (size_t)rows ? vocab - r0 : (size_t)rows;
		const char *blob = tmp_path("head.bin");
		REQUIRE(ane_blob_write_proj(blob, &(struct ane_wsrc){w + r0 * hidden, AD_TYPE_F32, n * hidden}, 1,
		                            err) == 0);
		size_t len;
		free(t_read_file(blob, &len));
		CHECK(len <= target + 128, "head blob of %zu bytes", len);
		char *mil = ane_mil_proj((int)hidden, (int)n, 1, err);
		struct emu_kernel *k = compile(mil, blob, err);
		REQUIRE(k, "%s", err);
		REQUIRE(run(k, x, 1, y + r0, err) == 0, "%s", err);
		emu_kernel_free(k);
		free(mil);
	}
	CHECK(nk == 3);
	ref_conv(w, vocab, hidden, x, 1, r);
	double e = rel_err(y, r, vocab);
	CHECK(e < 2e-3, "lm head rel %g", e);
	free(w), free(x), free(y), free(r);
}

// a hand-built program: o projection, residual add, inline scalar mul, and
// a weight file given from memory
static void
test_o_residual_scalar(void)
{
	char err[AD_ERRLEN];
	size_t qd = 32, hidden = 48, W = 32;
	float *wo = randv(hidden * qd, 0.5f), *a = randv(W * qd, 2.0f), *res = randv(W * hidden, 2.0f);
	const char *blob = tmp_path("o.bin");
	REQUIRE(ane_blob_write_proj(blob, &(struct ane_wsrc){wo, AD_TYPE_F32, hidden * qd}, 1, err) == 0);
	struct ane_mil m;
	const char *outs[] = {"o0"};
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", (int)qd, (int)W);
	ane_mil_input(&m, "i1", (int)hidden, (int)W);
	ane_mil_conv(&m, "t0", "i0", (int)hidden, (int)qd, (int)W, 64);
	ane_mil_add(&m, "t1", "t0", "i1", (int)hidden, (int)W);
	ane_mil_mul(&m, "o0", "t1", "t1", (int)hidden, (int)W);
	char *mil = ane_mil_finish(&m, outs, 1, err);
	REQUIRE(mil, "%s", err);
	// swap "mul(x = t1, y = t1)" for an inline scalar operand
	char *p = strstr(mil, "mul(x = t1, y = t1)");
	REQUIRE(p);
	size_t len = strlen(mil);
	char *mil2 = malloc(len + 32);
	snprintf(mil2, len + 32, "%.*smul(x = t1, y = fp16(0x1p-1))%s", (int)(p - mil), mil,
	         p + strlen("mul(x = t1, y = t1)"));
	size_t blen;
	void *img = t_read_file(blob, &blen);
	struct emu_file f = {.name = "w.bin", .data = img, .len = blen};
	struct emu_kernel *k = emu_compile(E, mil2, &f, 1, err);
	REQUIRE(k, "%s", err);
	free(img); // copied or used only during compile
	REQUIRE(emu_ninputs(k) == 2);
	void *in[2] = {calloc(1, emu_input_capacity(k)), calloc(1, emu_input_capacity(k))};
	void *out = calloc(1, emu_output_capacity(k));
	ane_scatter_f32(emu_input_layout(k, 0), in[0], a, W, qd, err);
	ane_scatter_f32(emu_input_layout(k, 1), in[1], res, W, hidden, err);
	REQUIRE(emu_eval(k, (const void *const *)in, &out, 0, err) == 0, "%s", err);
	float *y = calloc(W * hidden, 4), *r = calloc(W * hidden, 4);
	ane_gather_f32(emu_output_layout(k, 0), out, y, W, hidden, err);
	ref_conv(wo, hidden, qd, a, W, r);
	for (size_t i = 0; i < W * hidden; i++)
		r[i] = (r[i] + res[i]) * 0.5f;
	double e = rel_err(y, r, W * hidden);
	CHECK(e < 2e-3, "o + residual rel %g", e);
	emu_kernel_free(k);
	free(in[0]), free(in[1]), free(out), free(y), free(r), free(mil), free(mil2), free(wo), free(a), free(res);
}

// ---------------------------------------------------------------------------
// the rules

// replace the first occurrence of a with b in the proj 8 -> 4 program
static char *
edit(const char *base, const char *a, const char *b)
{
	const char *p = strstr(base, a);
	if (!p)
		return NULL;
	size_t n = strlen(base) + strlen(b) + 1;
	char *s = malloc(n);
	snprintf(s, n, "%.*s%s%s", (int)(p - base), base, b, p + strlen(a));
	return s;
}

static void
expect_fail(const char *mil, const char *blob, const char *want)
{
	char err[AD_ERRLEN] = "";
	REQUIRE(mil, "edit did not apply (%s)", want);
	struct emu_kernel *k = compile(mil, blob, err);
	CHECK(!k, "compiled, expected '%s'", want);
	CHECK(strstr(err, want), "error '%s', expected '%s'", err, want);
	if (!k)
		fprintf(stderr, "  refused: %s\n", err);
	emu_kernel_free(k);
}

static void
test_rule_matmul(void)
{
	char err[AD_ERRLEN];
	char *base = ane_mil_proj(8, 4, 1, err);
	char *s = edit(
		base,
		"conv(dilations = c_dilations, groups = c_groups, pad = c_pad, pad_type = c_pad_type, strides = c_strides, weight = w0, x = i0)",
		"matmul(x = i0, y = w0)");
	expect_fail(s, small_blob(), "op 'matmul'");
	free(s);
	s = edit(base, "conv(", "gelu(");
	expect_fail(s, small_blob(), "op 'gelu'");
	free(s);
	s = edit(base, "conv(", "tanh(");
	expect_fail(s, small_blob(), "op 'tanh' ('o0') is not supported");
	free(s);
	free(base);
}

static void
test_rule_offsets(void)
{
	char err[AD_ERRLEN];
	char *base = ane_mil_proj(8, 4, 1, err);
	// the payload offset instead of the chunk header
	char *s = edit(base, "uint64(64)", "uint64(128)");
	expect_fail(s, small_blob(), "offset 128 in 'w.bin' is not a chunk header (headers at 64)");
	free(s);
	// a chunk of the wrong size for the tensor
	s = edit(base, "[4, 8, 1, 1]> w0 = const()[name = string(\"w0\"), val = tensor<fp16, [4, 8, 1, 1]>",
	         "[2, 8, 1, 1]> w0 = const()[name = string(\"w0\"), val = tensor<fp16, [2, 8, 1, 1]>");
	expect_fail(s, small_blob(), "needs 32 bytes, the chunk at 64 in 'w.bin' holds 64");
	free(s);
	// a file that is not given, or a path outside weights/
	s = edit(base, "weights/w.bin", "weights/x.bin");
	expect_fail(s, small_blob(), "no weight file named 'x.bin'");
	free(s);
	s = edit(base, "@model_path/weights/w.bin", "/tmp/w.bin");
	expect_fail(s, small_blob(), "does not start with @model_path/weights/");
	free(s);

	// truncated blob
	size_t n;
	uint8_t *img = t_read_file(small_blob(), &n);
	const char *t = tmp_path("trunc.bin");
	FILE *f = fopen(t, "wb");
	fwrite(img, 1, n - 2, f);
	fclose(f);
	expect_fail(base, t, "truncated");
	// the constant data_off bug in a two-chunk file
	char *ffn = ane_mil_ffn(4, 6, 32, err);
	float w[24] = {0};
	const char *fb = tmp_path("ffnbad.bin");
	struct ane_wsrc ws = {w, AD_TYPE_F32, 24};
	REQUIRE(ane_blob_write_ffn(fb, &ws, &ws, &ws, err) == 0);
	free(img);
	img = t_read_file(fb, &n);
	img[176 + 16] = 128; // chunk 1's data_off as the old writer had it
	f = fopen(fb, "wb");
	fwrite(img, 1, n, f);
	fclose(f);
	expect_fail(ffn, fb, "data offset 128, expected 240");
	free(img);
	free(ffn);
	free(base);
}

static void
test_rule_shapes(void)
{
	char err[AD_ERRLEN];
	char *base = ane_mil_proj(8, 4, 1, err);
	// the conv's declared output disagrees with its weight
	char *s = edit(base, "tensor<fp16, [1, 4, 1, 1]> o0", "tensor<fp16, [1, 5, 1, 1]> o0");
	expect_fail(s, small_blob(), "expected [5, 8, 1, 1]");
	free(s);
	// x has other channels than the weight's cin
	s = edit(base, "tensor<fp16, [1, 8, 1, 1]> i0", "tensor<fp16, [1, 6, 1, 1]> i0");
	expect_fail(s, small_blob(), "is tensor<fp16, [4, 8, 1, 1]>, expected [4, 6, 1, 1]");
	free(s);
	// a width that differs from the program's
	s = edit(base, "tensor<fp16, [1, 4, 1, 1]> o0", "tensor<fp16, [1, 4, 1, 2]> o0");
	expect_fail(s, small_blob(), "has width 2");
	free(s);
	// elementwise operands of different shapes
	struct ane_mil m;
	const char *outs[] = {"o0"};
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", 8, 1);
	ane_mil_conv(&m, "t0", "i0", 4, 8, 1, 64);
	ane_mil_add(&m, "o0", "t0", "i0", 4, 1);
	char *mil = ane_mil_finish(&m, outs, 1, err);
	expect_fail(mil, small_blob(),
	            "y 'i0' is tensor<fp16, [1, 8, 1, 1]>, the result is tensor<fp16, [1, 4, 1, 1]>");
	free(mil);
	// undefined names, an input returned, a conv with bias, inline conv params
	s = edit(base, "x = i0)", "x = i9)");
	expect_fail(s, small_blob(), "'i9' is not defined");
	free(s);
	s = edit(base, "} -> (o0);", "} -> (i0);");
	expect_fail(s, small_blob(), "output 'i0' is an input");
	free(s);
	s = edit(base, "weight = w0,", "weight = w0, bias = w0,");
	expect_fail(s, small_blob(), "bias=");
	free(s);
	s = edit(base, "strides = c_strides", "strides = tensor<int32, [2]>([1, 1])");
	expect_fail(s, small_blob(), "conv strides given inline");
	free(s);
	s = edit(base, "val = tensor<int32, [2]>([1, 1])];\n        tensor<int32, [4]>",
	         "val = tensor<int32, [2]>([2, 1])];\n        tensor<int32, [4]>");
	expect_fail(s, small_blob(), "conv strides = c_strides is not [1, 1]");
	free(s);
	s = edit(base, "[name = string(\"o0\")]", "[name = string(\"out\")]");
	expect_fail(s, small_blob(), "is named \"out\"");
	free(s);
	s = edit(base, "program(1.3)", "program(1.4)");
	expect_fail(s, small_blob(), "mil line 1: program version must be 1.3");
	free(s);
	{
		char *cut = strndup(base, (size_t)(strstr(base, "        string c_pad_type") - base));
		expect_fail(cut, small_blob(), "unexpected end of program");
		free(cut);
	}
	s = edit(base, "\"9.0\"", "\"9.1\"");
	expect_fail(s, small_blob(), "line 2 is not the expected");
	free(s);
	free(base);
}

// 16 BLOBFILE consts pass; 17 fail; 16 with an inline scalar fail
static void
test_rule_slots(void)
{
	char err[AD_ERRLEN];
	float w[16 * 16];
	for (int i = 0; i < 256; i++)
		w[i] = (i % 17 == 0) ? 1.0f : 0.0f; // the identity
	for (int n = 16; n <= 17; n++) {
		const char *blob = tmp_path("slots.bin");
		struct ane_blob_writer bw;
		uint64_t off[17];
		REQUIRE(ane_blob_open(&bw, blob, err) == 0);
		for (int i = 0; i < n; i++)
			REQUIRE(ane_blob_add(&bw, &(struct ane_wsrc){w, AD_TYPE_F32, 256}, &off[i], err) == 0);
		REQUIRE(ane_blob_close(&bw, err) == 0);
		// written by hand: the builder itself refuses 17
		struct ane_mil m;
		ane_mil_init(&m);
		ane_mil_input(&m, "i0", 16, 32);
		char prev[8] = "i0", cur[8];
		for (int i = 0; i < 16 && i < n; i++) {
			snprintf(cur, sizeof cur, "t%d", i);
			ane_mil_conv(&m, cur, prev, 16, 16, 32, off[i]);
			memcpy(prev, cur, sizeof cur);
		}
		const char *o15[] = {"t15"};
		char *mil = ane_mil_finish(&m, o15, 1, err);
		REQUIRE(mil, "%s", err);
		if (n == 16) {
			struct emu_kernel *k = compile(mil, blob, err);
			CHECK(k, "16 BLOBFILEs must compile: %s", err);
			// the identity 16 times
			float x[32 * 16], y[32 * 16];
			for (int i = 0; i < 32 * 16; i++)
				x[i] = (float)(i % 97) * 0.25f;
			if (k) {
				CHECK(run(k, x, 32, y, err) == 0, "%s", err);
				CHECK(!memcmp(x, y, sizeof x), "16 identity convs changed the values");
			}
			emu_kernel_free(k);
			// plus one inline scalar: the budget drops to 15
			char *body = edit(
				mil, "    } -> (t15);",
				"        tensor<fp16, [1, 16, 1, 32]> s0 = mul(x = t15, y = fp16(2))[name = string(\"s0\")];\n    } -> (s0);");
			expect_fail(body, blob, "at most 15 once an op has an inline scalar");
			free(body);
		} else {
			// the 17th const, declared but unused, still takes a slot
			char decl[512];
			snprintf(
				decl, sizeof decl,
				"        tensor<fp16, [16, 16, 1, 1]> w16 = const()[name = string(\"w16\"), val = tensor<fp16, [16, 16, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(%llu)))];\n    } -> (t15);",
				(unsigned long long)off[16]);
			char *s = edit(mil, "    } -> (t15);", decl);
			expect_fail(s, blob, "17 BLOBFILE consts, the ANE takes at most 16");
			free(s);
		}
		free(mil);
	}
}

// every prefix of a valid program, and single-byte corruptions of it, are
// refused with a message (never a crash: run under the sanitizers)
static void
test_rule_mangled(void)
{
	char err[AD_ERRLEN];
	char *mil = ane_mil_ffn(4, 6, 32, err);
	float w[24];
	for (int i = 0; i < 24; i++)
		w[i] = 0.125f * i;
	const char *blob = tmp_path("mangle.bin");
	struct ane_wsrc ws = {w, AD_TYPE_F32, 24};
	REQUIRE(ane_blob_write_ffn(blob, &ws, &ws, &ws, err) == 0);
	size_t n = strlen(mil);
	char *buf = malloc(n + 1);
	int refused = 0, silent = 0;
	for (size_t len = 0; len < n; len++) {
		memcpy(buf, mil, len);
		buf[len] = 0;
		err[0] = 0;
		struct emu_kernel *k = compile(buf, blob, err);
		// dropping only the final newline leaves a valid program
		if (k && len == n - 1) {
			emu_kernel_free(k);
			continue;
		}
		refused += !k;
		silent += !k && !err[0];
		emu_kernel_free(k);
	}
	CHECK(refused == (int)n - 1, "%d of %zu prefixes refused", refused, n - 1);
	CHECK(silent == 0, "%d refusals without a message", silent);
	static const char junk[] = {'(', ')', '[', ']', '<', '>', ',', '=', ';', '"', '9', 'x', ' ', 0x7f};
	int compiled = 0;
	for (size_t i = 0; i < n; i += 3) {
		memcpy(buf, mil, n + 1);
		buf[i] = junk[i % sizeof junk];
		err[0] = 0;
		struct emu_kernel *k = compile(buf, blob, err);
		compiled += k != NULL;
		silent += !k && !err[0];
		emu_kernel_free(k);
	}
	CHECK(silent == 0, "%d refusals without a message", silent);
	fprintf(stderr, "  %d of %zu corruptions still compile (whitespace, name edits)\n", compiled, (n + 2) / 3);
	// a weight file that cannot be opened
	struct emu_file f = {.name = "w.bin", .path = "/nonexistent/w.bin"};
	CHECK(!emu_compile(E, mil, &f, 1, err));
	CHECK(strstr(err, "/nonexistent/w.bin"), "%s", err);
	free(buf);
	free(mil);
}


// ---------------------------------------------------------------------------
// int8 weights

static int8_t *
rand_q(size_t n)
{
	int8_t *q = malloc(n ? n : 1);
	for (size_t i = 0; i < n; i++) {
		rng = rng * 1664525u + 1013904223u;
		q[i] = (int8_t)((int)(rng >> 24) % 255 - 127); // -127 .. 127
	}
	return q;
}

// ref, AVX2 and AVX-512 kernels agree bit for bit on odd shapes and every
// width 1..64, split by panels or not; ref is the exact sum within fp32
static void
test_i8_kernels(void)
{
	static const size_t sizes[][2] = {{16, 16}, {17, 3},   {5, 64},           {48, 33}, {100, 257}, {1, 1},
	                                  {64, 1},  {200, 40}, {16 * 13 + 7, 24}, {31, 7},  {40, 1100}, {19, 2100}};
	int isa = emu_i8_isa();
	if (isa < 2)
		fprintf(stderr, "  (isa %d: %s not compared)\n", isa, isa ? "AVX-512" : "AVX2 and AVX-512");
	int bad = 0, bad_split = 0, bad_exact = 0, bad_x512 = 0;
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		size_t cout = sizes[s][0], cin = sizes[s][1], np = (cout + 15) / 16;
		int8_t *q = rand_q(cout * cin);
		int8_t *p = aligned_alloc(64, (emu_i8_panel_bytes(cout, cin) + 63) / 64 * 64);
		emu_i8_pack(q, cout, cin, p);
		uint16_t *sc = calloc(np * 16, sizeof *sc);
		for (size_t o = 0; o < cout; o++)
			sc[o] = ad_f32_to_fp16(0.001f + 0.01f * (float)(o % 7));
		for (size_t ncols = 1; ncols <= 64; ncols += ncols < 13 ? 1 : 7) {
			float *x = randv(ncols * cin, 2.0f);
			size_t ny = (ncols + 1) * cout; // a guard column past the end
			float *y0 = calloc(ny, 4), *y1 = calloc(ny, 4), *y2 = calloc(ny, 4), *y3 = calloc(ny, 4);
			emu_conv_i8_ref(p, sc, cout, cin, x, ncols, y0, 0, np);
			if (isa >= 1) {
				emu_conv_i8_avx2(p, sc, cout, cin, x, ncols, y1, 0, np / 2);
				emu_conv_i8_avx2(p, sc, cout, cin, x, ncols, y1, np / 2, np);
				bad += memcmp(y0, y1, ny * 4) != 0;
			}
			if (isa >= 2) {
				emu_conv_i8_avx512(p, sc, cout, cin, x, ncols, y2, 0, np);
				bad += memcmp(y0, y2, ny * 4) != 0;
				for (size_t k = 0; k < np; k++)
					emu_conv_i8_avx512(p, sc, cout, cin, x, ncols, y3, k, k + 1);
				bad_split += memcmp(y0, y3, ny * 4) != 0;
#ifdef AD_FP16_X86
				// the tiles over packed x: whole, then a panel at a time
				// and a column block at a time
				float *xp = malloc(ncols * cin * sizeof(float));
				emu_x512_pack(x, cin, ncols, xp);
				size_t nb = emu_x512_blocks(ncols);
				memset(y2, 0, ny * 4);
				CHECK(emu_conv_i8_x512(p, sc, cout, cin, xp, ncols, y2, 0, np, 0, nb, NULL) == 0,
				      "x512: out of memory");
				bad_x512 += memcmp(y0, y2, ny * 4) != 0;
				memset(y2, 0, ny * 4);
				for (size_t k = 0; k < np; k++)
					for (size_t b = 0; b < nb; b++)
						emu_conv_i8_x512(p, sc, cout, cin, xp, ncols, y2, k, k + 1, b, b + 1,
						                 NULL);
				bad_x512 += memcmp(y0, y2, ny * 4) != 0;
				free(xp);
#endif
			}
			emu_conv_i8_fast(p, sc, cout, cin, x, ncols, y3, 0, np);
			bad += memcmp(y0, y3, ny * 4) != 0;
			double mr = 0;
			for (size_t j = 0; j < ncols; j++)
				for (size_t o = 0; o < cout; o++) {
					double r = 0, a = 0;
					for (size_t i = 0; i < cin; i++) {
						r += (double)q[o * cin + i] * x[j * cin + i];
						a += fabs((double)q[o * cin + i] * x[j * cin + i]);
					}
					r *= ad_fp16_to_f32(sc[o]);
					mr = fmax(mr, fabs(r));
					// fp32 chain: <= cin * 2^-24 * sum |q x|, then two roundings
					double tol = (double)cin * 6e-8 * a * ad_fp16_to_f32(sc[o]) +
					             fabs(r) * (1.0 / 2048 + 1e-7) + 1e-7;
					if (fabs(y0[j * cout + o] - r) > tol && !bad_exact++)
						CHECK(0, "%zux%zu ncols %zu row %zu: ref %g, exact %g", cout, cin,
						      ncols, o, (double)y0[j * cout + o], r);
				}
			(void)mr;
			free(x), free(y0), free(y1), free(y2), free(y3);
		}
		free(q), free(p), free(sc);
	}
	CHECK(bad == 0, "%d cases where a SIMD int8 kernel differs from ref", bad);
	CHECK(bad_split == 0, "%d cases where a panel split changes the bits", bad_split);
	CHECK(bad_x512 == 0, "%d cases where the AVX-512 tiles over packed x differ from ref", bad_x512);
	CHECK(bad_exact == 0, "%d shapes where ref is off the exact sum", bad_exact);
}

// 4-bit palettised weights: the layout emu.h documents, and ref, AVX2 and
// AVX-512 agreeing bit for bit on odd shapes, widths 1..13 and on to 100,
// whole or a panel at a time, and the wide AVX-512 path over packed x from
// EMU_L4_X512_COLS columns on (in slices of the steps from 1025 on, some
// starting at an odd step before they are made even); ref is the sum of
// scale * lut[q] * x within fp32
static void
test_l4_kernels(void)
{
	static const size_t sizes[][2] = {{16, 16},  {17, 3},   {5, 64}, {48, 33},   {100, 257},        {1, 1},
	                                  {64, 1},   {200, 40}, {31, 7}, {40, 1100}, {16 * 13 + 7, 24}, {128, 576},
	                                  {72, 2051}};
	int isa = emu_i8_isa();
	if (isa < 2)
		fprintf(stderr, "  (isa %d: %s not compared)\n", isa, isa ? "AVX-512" : "AVX2 and AVX-512");
	int bad = 0, bad_split = 0, bad_exact = 0, bad_layout = 0, bad_x512 = 0, n_x512 = 0;
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
		size_t cout = sizes[s][0], cin = sizes[s][1], np = (cout + 15) / 16, nq = (cout + 63) / 64;
		uint8_t *q = malloc(cout * cin);
		for (size_t i = 0; i < cout * cin; i++) {
			rng = rng * 1664525u + 1013904223u;
			q[i] = (uint8_t)(rng >> 28); // 0 .. 15
		}
		size_t nb = emu_l4_panel_bytes(cout, cin);
		CHECK(nb == nq * 64 * ((cin + 1) / 2), "%zux%zu: %zu panel bytes", cout, cin, nb);
		uint8_t *p = aligned_alloc(64, (nb + 63) / 64 * 64);
		memset(p, 0xa5, nb); // emu_l4_pack writes every byte
		emu_l4_pack(q, cout, cin, p);
		// the same from the indices packed as a uint4 BLOBFILE holds them, a
		// quad at a time
		uint8_t *nib = calloc((cout * cin + 1) / 2, 1), *p2 = aligned_alloc(64, (nb + 63) / 64 * 64);
		for (size_t e = 0; e < cout * cin; e++)
			nib[e / 2] |= (uint8_t)(q[e] << (4 * (e & 1)));
		memset(p2, 0x5a, nb);
		for (size_t g = 0; g < nq; g++)
			emu_l4_pack_quads(nib, cout, cin, p2, g, g + 1);
		bad_layout += memcmp(p, p2, nb) != 0;
		free(nib), free(p2);
		for (size_t o = 0; o < nq * 64; o++)
			for (size_t i = 0; i < cin; i++) {
				// emu.h: quad o / 64, line i / 2, word o % 16, nibble o % 64 / 16 + 4 (i % 2)
				size_t jn = o % 64 / 16 + 4 * (i % 2);
				uint8_t b = p[(o / 64) * 64 * ((cin + 1) / 2) + i / 2 * 64 + 4 * (o % 16) + jn / 2];
				unsigned v = (jn % 2 ? b >> 4 : b) & 15u;
				bad_layout += v != (o < cout ? q[o * cin + i] : 0u);
			}
		uint16_t *lut = malloc(nq * 16 * sizeof *lut), *sc = calloc(np * 16, sizeof *sc);
		for (size_t k = 0; k < nq * 16; k++)
			lut[k] = ad_f32_to_fp16(lcg(1.0f));
		for (size_t o = 0; o < cout; o++)
			sc[o] = ad_f32_to_fp16(0.01f + 0.1f * (float)(o % 7));
		for (size_t ncols = 1; ncols <= 100; ncols += ncols < 13 ? 1 : ncols < 62 ? 7 : 38) {
			float *x = randv(ncols * cin, 2.0f);
			size_t ny = (ncols + 1) * cout; // a guard column past the end
			float *y0 = calloc(ny, 4), *y1 = calloc(ny, 4), *y2 = calloc(ny, 4), *y3 = calloc(ny, 4);
			emu_conv_l4_ref(p, lut, sc, cout, cin, x, ncols, y0, 0, np);
			if (isa >= 1) {
				emu_conv_l4_avx2(p, lut, sc, cout, cin, x, ncols, y1, 0, np / 2);
				emu_conv_l4_avx2(p, lut, sc, cout, cin, x, ncols, y1, np / 2, np);
				bad += memcmp(y0, y1, ny * 4) != 0;
			}
			if (isa >= 2) {
				emu_conv_l4_avx512(p, lut, sc, cout, cin, x, ncols, y2, 0, np);
				bad += memcmp(y0, y2, ny * 4) != 0;
				for (size_t k = 0; k < np; k++)
					emu_conv_l4_avx512(p, lut, sc, cout, cin, x, ncols, y3, k, k + 1);
				bad_split += memcmp(y0, y3, ny * 4) != 0;
#ifdef AD_FP16_X86
				// wide: whole, then a panel at a time (odd panels start a
				// pair across two quads); too few columns: refused
				float *xp = malloc(ncols * cin * sizeof(float));
				emu_x512_pack(x, cin, ncols, xp);
				memset(y2, 0, ny * 4);
				int rc = emu_conv_l4_x512(p, lut, sc, cout, cin, xp, ncols, y2, 0, np, NULL);
				if (ncols < EMU_L4_X512_COLS) {
					CHECK(rc == -1, "%zu columns: the wide path took them", ncols);
				} else {
					CHECK(rc == 0, "x512: out of memory");
					bad_x512 += memcmp(y0, y2, ny * 4) != 0;
					memset(y2, 0, ny * 4);
					for (size_t k = 0; k < np; k++)
						emu_conv_l4_x512(p, lut, sc, cout, cin, xp, ncols, y2, k, k + 1, NULL);
					bad_x512 += memcmp(y0, y2, ny * 4) != 0;
					n_x512 += 2;
				}
				free(xp);
#endif
			}
			memset(y3, 0, ny * 4);
			emu_conv_l4_fast(p, lut, sc, cout, cin, x, ncols, y3, 0, np);
			bad += memcmp(y0, y3, ny * 4) != 0;
			for (size_t j = 0; j < ncols; j++)
				for (size_t o = 0; o < cout; o++) {
					double r = 0, a = 0;
					for (size_t i = 0; i < cin; i++) {
						double w = ad_fp16_to_f32(lut[(o / 64) * 16 + q[o * cin + i]]);
						r += w * x[j * cin + i];
						a += fabs(w * x[j * cin + i]);
					}
					r *= ad_fp16_to_f32(sc[o]);
					// fp32 chain: <= cin * 2^-24 * sum |w x|, then two roundings
					double tol = (double)cin * 6e-8 * a * ad_fp16_to_f32(sc[o]) +
					             fabs(r) * (1.0 / 2048 + 1e-7) + 1e-7;
					if (fabs(y0[j * cout + o] - r) > tol && !bad_exact++)
						CHECK(0, "%zux%zu ncols %zu row %zu: ref %g, exact %g", cout, cin,
						      ncols, o, (double)y0[j * cout + o], r);
				}
			free(x), free(y0), free(y1), free(y2), free(y3);
		}
		free(q), free(p), free(lut), free(sc);
	}
	CHECK(bad_layout == 0, "%d weights where emu_l4_pack's layout is not emu.h's", bad_layout);
	CHECK(bad == 0, "%d cases where a SIMD 4-bit kernel differs from ref", bad);
	CHECK(bad_x512 == 0, "%d of %d cases where the wide AVX-512 path differs from ref", bad_x512, n_x512);
	CHECK(bad_split == 0, "%d cases where a panel split changes the bits", bad_split);
	CHECK(bad_exact == 0, "%d outputs where ref is off the exact sum", bad_exact);
}

static uint16_t *rand_scales(size_t n);

// a 4-bit blob: per weight the uint4 indices (packed, low nibble first),
// the tables (ntab[k] x 16 fp16), the scales
static void
write_l4_blob(const char *path, const uint8_t *const *q, const uint16_t *const *tab, const size_t *ntab,
              const uint16_t *const *sc, const size_t *cout, const size_t *cin, int n)
{
	char err[AD_ERRLEN];
	struct ane_blob_writer w;
	REQUIRE(ane_blob_open(&w, path, err) == 0, "%s", err);
	for (int k = 0; k < n; k++) {
		size_t ne = cout[k] * cin[k];
		uint8_t *pk = calloc((ne + 1) / 2, 1);
		for (size_t e = 0; e < ne; e++)
			pk[e / 2] |= (uint8_t)(q[k][e] << (4 * (e & 1)));
		REQUIRE(ane_blob_begin_u4(&w, ne, NULL, err) == 0, "%s", err);
		REQUIRE(ane_blob_put_u4(&w, pk, (ne + 1) / 2, err) == 0, "%s", err);
		REQUIRE(ane_blob_end(&w, err) == 0, "%s", err);
		REQUIRE(ane_blob_add(&w, &(struct ane_wsrc){tab[k], AD_TYPE_F16, ntab[k] * 16}, NULL, err) == 0, "%s",
		        err);
		REQUIRE(ane_blob_add(&w, &(struct ane_wsrc){sc[k], AD_TYPE_F16, cout[k]}, NULL, err) == 0, "%s", err);
		free(pk);
	}
	REQUIRE(ane_blob_close(&w, err) == 0, "%s", err);
}

// 4-bit palettised projections as mil.h writes them, compiled and run:
// the very bits of emu_conv_l4_ref (one table, or one per 64 rows; 1, 8
// and 64 columns: a wide input is read as it is, not packed from the
// surface), and against fp32 with the dense weights scale * table[q]
static void
test_l4_proj(void)
{
	char err[AD_ERRLEN];
	static const size_t shapes[][3] = {{40, 128, 1}, {40, 128, 8}, {33, 100, 64}, {64, 192, 3}, {7, 64, 1}};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		size_t cin = shapes[s][0], cout = shapes[s][1], W = shapes[s][2];
		size_t ntab = (size_t)ane_mil_l4_tables((int)cout), nq = (cout + 63) / 64, np = (cout + 15) / 16;
		uint8_t *q = malloc(cout * cin);
		for (size_t i = 0; i < cout * cin; i++) {
			rng = rng * 1664525u + 1013904223u;
			q[i] = (uint8_t)(rng >> 28);
		}
		uint16_t *tab = malloc(ntab * 16 * 2), *sc = rand_scales(cout);
		for (size_t i = 0; i < ntab * 16; i++)
			tab[i] = ad_f32_to_fp16(lcg(2.0f));
		const char *blob = tmp_path("proj-l4.bin");
		write_l4_blob(blob, (const uint8_t *const[]){q}, (const uint16_t *const[]){tab}, &ntab,
		              (const uint16_t *const[]){sc}, &cout, &cin, 1);
		char *mil = ane_mil_proj_w((int)cin, (int)cout, (int)W, ANE_W_LUT4, err);
		REQUIRE(mil, "%s", err);
		struct emu_kernel *k = compile(mil, blob, err);
		REQUIRE(k, "%zu -> %zu: %s", cin, cout, err);
		CHECK(emu_weight_bytes(k) == (cout * cin + 1) / 2 + 2 * cout + 32 * nq, "%llu bytes",
		      (unsigned long long)emu_weight_bytes(k));
		CHECK(emu_nblobfiles(k) == 1);
		float *x = randv(W * cin, 2.0f), *y = calloc(W * cout, 4), *r = calloc(W * cout, 4);
		for (size_t i = 0; i < W * cin; i++)
			x[i] = ad_fp16_to_f32(ad_f32_to_fp16(x[i]));
		REQUIRE(run(k, x, W, y, err) == 0, "%s", err);
		float *wd = malloc(cout * cin * 4);
		uint16_t *lut = malloc(nq * 16 * 2), *scf = calloc(np * 16, 2);
		for (size_t i = 0; i < nq * 16; i++)
			lut[i] = tab[ntab == 1 ? i % 16 : i];
		for (size_t o = 0; o < cout; o++) {
			scf[o] = sc[o];
			for (size_t i = 0; i < cin; i++)
				wd[o * cin + i] =
					ad_fp16_to_f32(sc[o]) * ad_fp16_to_f32(lut[(o / 64) * 16 + q[o * cin + i]]);
		}
		ref_conv(wd, cout, cin, x, W, r);
		double e = rel_err(y, r, W * cout);
		CHECK(e < 2e-3, "lut4 %zu -> %zu w%zu: rel %g", cin, cout, W, e);
		uint8_t *p = aligned_alloc(64, (emu_l4_panel_bytes(cout, cin) + 63) / 64 * 64);
		emu_l4_pack(q, cout, cin, p);
		float *yk = calloc(W * cout, 4);
		emu_conv_l4_ref(p, lut, scf, cout, cin, x, W, yk, 0, np);
		CHECK(!memcmp(y, yk, W * cout * 4), "lut4 %zu -> %zu w%zu: eval differs from the kernel", cin, cout, W);
		// the constants a cache keeps, and a kernel compiled from them: the same bits
		int nc = emu_kernel_nconsts(k);
		CHECK(nc == 3, "%d constants", nc);
		struct emu_const cs[3];
		for (int i = 0; i < nc && i < 3; i++)
			CHECK(emu_kernel_const(k, i, &cs[i]) == 0);
		struct emu_kernel *k2 = emu_compile_packed(E, mil, cs, nc, err);
		REQUIRE(k2, "%s", err);
		float *y2 = calloc(W * cout, 4);
		REQUIRE(run(k2, x, W, y2, err) == 0, "%s", err);
		CHECK(!memcmp(y, y2, W * cout * 4), "lut4 %zu -> %zu: from its constants, different bits", cin, cout);
		emu_kernel_free(k2);
		emu_kernel_free(k);
		free(q), free(tab), free(sc), free(mil), free(x), free(y), free(r), free(wd), free(lut), free(scf);
		free(p), free(yk), free(y2);
	}
}

// what the emu refuses of the palettised form, each with what it expected
static void
test_l4_rules(void)
{
	char err[AD_ERRLEN];
	size_t cout = 4, cin = 8, ntab = 1;
	uint8_t q[32] = {0};
	uint16_t tab[16], *sc = rand_scales(cout);
	for (int i = 0; i < 16; i++)
		tab[i] = ad_f32_to_fp16((float)i - 7.5f);
	const char *blob = tmp_path("rule-l4.bin");
	write_l4_blob(blob, (const uint8_t *const[]){q}, (const uint16_t *const[]){tab}, &ntab,
	              (const uint16_t *const[]){sc}, &cout, &cin, 1);
	char *base = ane_mil_proj_w((int)cin, (int)cout, 1, ANE_W_LUT4, err);
	REQUIRE(base, "%s", err);
	struct emu_kernel *k = compile(base, blob, err);
	CHECK(k, "the generator's form: %s", err);
	emu_kernel_free(k);
	static const struct {
		const char *a, *b, *want;
	} e[] = {
		{"indices = tensor<uint4, [4, 8, 1, 1]>", "indices = tensor<uint8, [4, 8, 1, 1]>",
	         "indices must be tensor<uint4, [4, 8, 1, 1]>(BLOBFILE(...))"},
		{"lut = tensor<fp16, [1, 1, 1, 1, 16, 1]>", "lut = tensor<fp16, [1, 1, 1, 1, 8, 1]>",
	         "lut must be tensor<fp16, [1, 1, 1, 1, 16, 1]>(BLOBFILE(...)): one table, as 4 rows are not a multiple "
	         "of 64"},
		{"lut = tensor<fp16, [1, 1, 1, 1, 16, 1]>", "lut = tensor<fp16, [2, 1, 1, 1, 16, 1]>",
	         "one table, as 4 rows"},
		{"lut = ", "table = ", "unknown argument 'table' (expected indices, lut)"},
		{")[name = string(\"w0_p\")]", ")[name = string(\"w0_p\"), vector_axis = int32(0)]",
	         "the only attribute allowed is name (its operands are arguments)"},
		{"scale = tensor<fp16, [4, 1, 1, 1]>", "scale = tensor<fp16, [4]>",
	         "scale must be tensor<fp16, [4, 1, 1, 1]>(BLOBFILE(...)), one per output row"},
		{"data = w0_p", "data = i0", "data must name a constexpr_lut_to_dense"},
		{"weight = w0,", "weight = w0_p,", "weight 'w0_p' is palettised without its per-row scales"},
		// the scales pointed at the indices: a uint4 chunk
		{"offset = uint64(240)", "offset = uint64(64)", "holds uint4 values"},
		{"tensor<fp16, [4, 8, 1, 1]> w0_p = constexpr", "tensor<fp16, [4, 8, 1, 2]> w0_p = constexpr",
	         "only conv weights tensor<fp16, [COUT, CIN, 1, 1]>"},
	};
	for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
		char *m = edit(base, e[i].a, e[i].b);
		expect_fail(m, blob, e[i].want);
		free(m);
	}
	free(base), free(sc);
	// 128 rows: one table, or two (one a 64 rows); three is neither
	cout = 128;
	ntab = 2;
	uint8_t *q2 = calloc(cout * cin, 1);
	uint16_t tab2[32], *sc2 = rand_scales(cout);
	for (int i = 0; i < 32; i++)
		tab2[i] = ad_f32_to_fp16((float)(i % 16) - 7.5f);
	write_l4_blob(blob, (const uint8_t *const[]){q2}, (const uint16_t *const[]){tab2}, &ntab,
	              (const uint16_t *const[]){sc2}, &cout, &cin, 1);
	base = ane_mil_proj_w((int)cin, (int)cout, 1, ANE_W_LUT4, err);
	REQUIRE(base, "%s", err);
	k = compile(base, blob, err);
	CHECK(k, "two tables: %s", err);
	emu_kernel_free(k);
	char *m = edit(base, "lut = tensor<fp16, [2, 1, 1, 1, 16, 1]>", "lut = tensor<fp16, [3, 1, 1, 1, 16, 1]>");
	expect_fail(m, blob, "with G = 1 (one table) or G = 2 (a table of 16 for each group of 64 output rows)");
	free(m), free(base), free(q2), free(sc2);
}

// the 4-bit tables and indices (build.h): the k-means finds a histogram's
// clusters, a value's index is its nearest entry, ties to the lower
static void
test_l4_quant(void)
{
	enum { B = 1024 };
	static double h[B];
	float tab[16];
	// 16 narrow clusters at -0.9 .. 0.9
	memset(h, 0, sizeof h);
	for (int c = 0; c < 16; c++) {
		int b = (int)((-0.9 + 1.8 * c / 15.0 + 1.0) / 2.0 * (B - 1) + 0.5);
		h[b] += 100 + c, h[b + 1] += 50;
	}
	ane_l4_tables(h, B, tab);
	for (int c = 0; c < 16; c++) {
		double want = -0.9 + 1.8 * c / 15.0;
		CHECK(fabs(tab[c] - want) < 2.5 / B + 1e-3, "entry %d: %g, cluster at %g", c, (double)tab[c], want);
		CHECK(tab[c] == ad_fp16_to_f32(ad_f32_to_fp16(tab[c])), "entry %d is not an fp16 value", c);
		CHECK(c == 0 || tab[c] > tab[c - 1]);
	}
	// an empty histogram: still 16 sorted fp16 entries
	memset(h, 0, sizeof h);
	ane_l4_tables(h, B, tab);
	for (int c = 1; c < 16; c++)
		CHECK(tab[c] > tab[c - 1]);
	for (int c = 0; c < 16; c++)
		tab[c] = (float)c - 7.5f;
	CHECK(ane_l4_index(tab, -100.0f) == 0 && ane_l4_index(tab, 100.0f) == 15);
	CHECK(ane_l4_index(tab, 0.2f) == 8 && ane_l4_index(tab, -0.2f) == 7);
	CHECK(ane_l4_index(tab, 0.0f) == 7, "a tie goes to the lower entry");
	for (float u = -9; u <= 9; u += 0.37f) {
		unsigned q = ane_l4_index(tab, u);
		for (int c = 0; c < 16; c++)
			CHECK(fabsf(u - tab[q]) <= fabsf(u - tab[c]), "%g: entry %u, %d is nearer", (double)u, q, c);
	}
}

// which kernel takes one int8 column (emu_i8_one_col_avx2): what
// ANEDVD_I8_ONE_COL says (ctest runs this file with it set to each), else
// the CPU's verdict; never AVX2 where the CPU lacks it. Every run of this
// file compares the path it takes with ref (test_i8_kernels, the int8
// projections below).
static void
test_i8_one_col(void)
{
	char err[AD_ERRLEN];
	const char *e = getenv("ANEDVD_I8_ONE_COL");
	int isa = emu_i8_isa(), v = emu_i8_one_col_avx2();
	if (isa < 1)
		CHECK(v == 0, "one int8 column on AVX2 without AVX2");
	else if (e && !strcmp(e, "avx2"))
		CHECK(v == 1, "ANEDVD_I8_ONE_COL=avx2 not followed");
	else if (e && !strcmp(e, "avx512"))
		CHECK(v == 0, "ANEDVD_I8_ONE_COL=avx512 not followed");
	else
		CHECK(v == ad_cpu_avx512_halved(), "the CPU's verdict (%d) not followed", ad_cpu_avx512_halved());
	fprintf(stderr, "  one int8 column: %s\n",
	        v          ? "AVX2"
	        : isa >= 2 ? "AVX-512"
	        : isa      ? "AVX2 (no AVX-512)"
	                   : "ref");
	// another value: emu_open (and the ane-worker's start, through
	// emu_simd_env) refuses it, naming it; empty is unset
	char *saved = e ? strdup(e) : NULL;
	setenv("ANEDVD_I8_ONE_COL", "avx1024", 1);
	CHECK(emu_i8_one_col_env() == -2);
	int lvl;
	CHECK(emu_simd_env(&lvl, err) != 0 && strstr(err, "ANEDVD_I8_ONE_COL=avx1024"), "%s", err);
	CHECK(!emu_open(&(struct emu_opts){.simd = EMU_SIMD_REF}, err), "ANEDVD_I8_ONE_COL=avx1024 accepted");
	CHECK(strstr(err, "ANEDVD_I8_ONE_COL=avx1024"), "%s", err);
	setenv("ANEDVD_I8_ONE_COL", "", 1);
	CHECK(emu_i8_one_col_env() == -1);
	struct emu *x = emu_open(NULL, err);
	CHECK(x, "ANEDVD_I8_ONE_COL empty: %s", err);
	emu_close(x);
	if (saved)
		setenv("ANEDVD_I8_ONE_COL", saved, 1);
	else
		unsetenv("ANEDVD_I8_ONE_COL");
	free(saved);
}

// an emu setting read from the environment: each bad value read as -2 and
// refused, with the setting and what it expects named, by emu_simd_env and
// so by emu_open; each good one read as its value; the variable restored
struct env_case {
	const char *val;
	long want;
};

static void
check_env_setting(const char *name, long (*read)(void), const char *expect, const char *const *bad, size_t nbad,
                  const struct env_case *good, size_t ngood)
{
	char err[AD_ERRLEN];
	const char *e = getenv(name);
	char *saved = e ? strdup(e) : NULL;
	for (size_t k = 0; k < nbad; k++) {
		setenv(name, bad[k], 1);
		CHECK(read() == -2, "%s=%s accepted", name, bad[k]);
		int lvl;
		CHECK(emu_simd_env(&lvl, err) != 0 && strstr(err, name) && strstr(err, expect), "%s=%s: %s", name,
		      bad[k], err);
		CHECK(!emu_open(&(struct emu_opts){.simd = EMU_SIMD_REF}, err), "%s=%s: opened", name, bad[k]);
	}
	for (size_t k = 0; k < ngood; k++) {
		setenv(name, good[k].val, 1);
		CHECK(read() == good[k].want, "%s=%s: read as %ld", name, good[k].val, read());
	}
	if (saved)
		setenv(name, saved, 1);
	else
		unsetenv(name);
	free(saved);
}

static long
nta_env(void)
{
	return emu_prefetch_nta_env();
}

// how far one column prefetches (emu_prefetch_steps), of fp16 weights and of
// narrow ones: ANEDVD_PREFETCH_AHEAD's bytes in whole lines (ctest runs this
// file with it at 0 and at its most too, so every kernel is compared with ref
// at those distances), else the distance measured best on the CPU's kind; a
// value that is not a whole number of bytes from 0 to EMU_PREFETCH_MAX is
// refused at start
static void
test_prefetch(void)
{
	const char *e = getenv("ANEDVD_PREFETCH_AHEAD");
	for (int narrow = 0; narrow < 2; narrow++) {
		size_t steps = emu_prefetch_steps(narrow);
		size_t want = ad_cpu_amd_family() == 0x19 ? (narrow ? 8192u : 1024u)
		              : ad_cpu_amd_family()       ? 8192u
		                                          : 6144u;
		if (e && *e)
			CHECK(steps == strtoul(e, NULL, 10) / 64, "ANEDVD_PREFETCH_AHEAD=%s: %zu steps (%s)", e, steps,
			      narrow ? "narrow" : "fp16");
		else
			CHECK(steps == want / 64, "the CPU's distance not taken: %zu steps (%s)", steps,
			      narrow ? "narrow" : "fp16");
		fprintf(stderr, "  one column of %s weights prefetches %zu bytes ahead\n", narrow ? "narrow" : "fp16",
		        steps * 64);
	}
	// non-temporal: ANEDVD_PREFETCH_NTA's 0 or 1, else narrow weights on Zen 4
	const char *ne = getenv("ANEDVD_PREFETCH_NTA");
	for (int narrow = 0; narrow < 2; narrow++) {
		int want = ne && *ne ? *ne == '1' : narrow && ad_cpu_amd_family() == 0x19;
		CHECK(emu_prefetch_nta(narrow) == want, "%s weights: non-temporal %d, want %d",
		      narrow ? "narrow" : "fp16", emu_prefetch_nta(narrow), want);
	}
	static const char *const nbad[] = {"2", "yes", "01", " ", "-1"};
	static const struct env_case ngood[] = {{"0", 0}, {"1", 1}, {"", -1}};
	check_env_setting("ANEDVD_PREFETCH_NTA", nta_env, "expected 0 or 1", nbad, 5, ngood, 3);
	static const char *const bad[] = {"-64", "65537", "4k", "1e3", " ", "99999999999999999999999"};
	static const struct env_case good[] = {{"65536", 65536}, {"0", 0}, {"", -1}};
	check_env_setting("ANEDVD_PREFETCH_AHEAD", emu_prefetch_env, "expected bytes from 0 to 65536", bad, 6, good, 3);
}

// an int8 projection's blob: the int8 chunk of q, then the fp16 scales
static void
write_i8_blob(const char *path, const int8_t *const *q, const uint16_t *const *sc, const size_t *cout,
              const size_t *cin, int n)
{
	char err[AD_ERRLEN];
	struct ane_blob_writer w;
	REQUIRE(ane_blob_open(&w, path, err) == 0, "%s", err);
	for (int k = 0; k < n; k++) {
		REQUIRE(ane_blob_begin_i8(&w, cout[k] * cin[k], NULL, err) == 0, "%s", err);
		REQUIRE(ane_blob_put_i8(&w, q[k], cout[k] * cin[k], err) == 0, "%s", err);
		REQUIRE(ane_blob_end(&w, err) == 0, "%s", err);
		REQUIRE(ane_blob_add(&w, &(struct ane_wsrc){sc[k], AD_TYPE_F16, cout[k]}, NULL, err) == 0, "%s", err);
	}
	REQUIRE(ane_blob_close(&w, err) == 0, "%s", err);
}

static uint16_t *
rand_scales(size_t n)
{
	uint16_t *s = malloc(n * 2);
	for (size_t i = 0; i < n; i++)
		s[i] = ad_f32_to_fp16(0.002f + fabsf(lcg(0.01f)));
	return s;
}

// the generated int8 programs through emu_compile / emu_eval: one byte per
// weight held, results = the direct kernel's, and = fp32 math within fp16
static void
test_i8_proj_ffn(void)
{
	char err[AD_ERRLEN];
	static const size_t shapes[][3] = {{64, 48, 64}, {200, 33, 1}, {33, 200, 8}, {7, 17, 3}};
	for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
		size_t cin = shapes[s][0], cout = shapes[s][1], W = shapes[s][2];
		int8_t *q = rand_q(cout * cin);
		uint16_t *sc = rand_scales(cout);
		const char *blob = tmp_path("proj-i8.bin");
		write_i8_blob(blob, (const int8_t *const[]){q}, (const uint16_t *const[]){sc}, &cout, &cin, 1);
		char *mil = ane_mil_proj_w((int)cin, (int)cout, (int)W, ANE_W_INT8, err);
		REQUIRE(mil, "%s", err);
		struct emu_kernel *k = compile(mil, blob, err);
		REQUIRE(k, "%s", err);
		CHECK(emu_weight_bytes(k) == cout * cin + 2 * cout, "%llu bytes",
		      (unsigned long long)emu_weight_bytes(k));
		CHECK(emu_nblobfiles(k) == 1);
		float *x = randv(W * cin, 2.0f), *y = calloc(W * cout, 4), *r = calloc(W * cout, 4);
		// the surface holds fp16: feed fp16 values
		for (size_t i = 0; i < W * cin; i++)
			x[i] = ad_fp16_to_f32(ad_f32_to_fp16(x[i]));
		REQUIRE(run(k, x, W, y, err) == 0, "%s", err);
		float *wd = malloc(cout * cin * 4);
		for (size_t o = 0; o < cout; o++)
			for (size_t i = 0; i < cin; i++)
				wd[o * cin + i] = ad_fp16_to_f32(sc[o]) * q[o * cin + i];
		ref_conv(wd, cout, cin, x, W, r);
		double e = rel_err(y, r, W * cout);
		CHECK(e < 2e-3, "int8 %zu -> %zu w%zu: rel %g", cin, cout, W, e);
		// and the very bits of the kernel called directly
		size_t np = (cout + 15) / 16;
		int8_t *p = aligned_alloc(64, (emu_i8_panel_bytes(cout, cin) + 63) / 64 * 64);
		emu_i8_pack(q, cout, cin, p);
		uint16_t *scf = calloc(np * 16, 2);
		float *yk = calloc(W * cout, 4);
		for (size_t o = 0; o < cout; o++)
			scf[o] = sc[o];
		emu_conv_i8_ref(p, scf, cout, cin, x, W, yk, 0, np);
		CHECK(!memcmp(y, yk, W * cout * 4), "int8 %zu -> %zu: eval differs from the kernel", cin, cout);
		emu_kernel_free(k);
		free(q), free(sc), free(mil), free(x), free(y), free(r), free(wd), free(p), free(scf), free(yk);
	}
	// fused FFN, hidden 24, inter 40, 5 columns, against fp32 with fp16 steps
	size_t H = 24, F = 40, W = 5;
	int8_t *qg = rand_q(F * H), *qu = rand_q(F * H), *qd = rand_q(H * F);
	uint16_t *sg = rand_scales(F), *su = rand_scales(F), *sd = rand_scales(H);
	const char *blob = tmp_path("ffn-i8.bin");
	write_i8_blob(blob, (const int8_t *const[]){qg, qu, qd}, (const uint16_t *const[]){sg, su, sd},
	              (const size_t[]){F, F, H}, (const size_t[]){H, H, F}, 3);
	char *mil = ane_mil_ffn_w((int)H, (int)F, 8, ANE_W_INT8, err);
	REQUIRE(mil, "%s", err);
	struct emu_kernel *k = compile(mil, blob, err);
	REQUIRE(k, "%s", err);
	CHECK(emu_weight_bytes(k) == 3 * F * H + 2 * (2 * F + H));
	float *x = randv(W * H, 2.0f), *y = calloc(W * H, 4);
	for (size_t i = 0; i < W * H; i++)
		x[i] = ad_fp16_to_f32(ad_f32_to_fp16(x[i]));
	REQUIRE(run(k, x, W, y, err) == 0, "%s", err);
	double md = 0, mr = 0;
	for (size_t j = 0; j < W; j++) {
		float h[64];
		for (size_t f = 0; f < F; f++) {
			double g = 0, u = 0;
			for (size_t i = 0; i < H; i++) {
				g += (double)ad_fp16_to_f32(sg[f]) * qg[f * H + i] * x[j * H + i];
				u += (double)ad_fp16_to_f32(su[f]) * qu[f * H + i] * x[j * H + i];
			}
			h[f] = (float)(g / (1 + exp(-g)) * u);
		}
		for (size_t o = 0; o < H; o++) {
			double r = 0;
			for (size_t f = 0; f < F; f++)
				r += (double)ad_fp16_to_f32(sd[o]) * qd[o * F + f] * h[f];
			md = fmax(md, fabs(r - y[j * H + o]));
			mr = fmax(mr, fabs(r));
		}
	}
	CHECK(md <= 1e-2 * mr, "int8 ffn: max diff %g of %g", md, mr);
	emu_kernel_free(k);
	free(qg), free(qu), free(qd), free(sg), free(su), free(sd), free(mil), free(x), free(y);
}

// a wide conv shared out in many small tasks (int8 on AVX-512: quads and
// groups of columns; int8 widened on AVX2: pairs; fp16: pairs) gives the
// plain kernel's bits on every path, 1 to 3 threads, at widths that split
// the columns unevenly; 9 panels (odd quads and pairs) of enough work for
// the threads
static void
test_wide_tasks(void)
{
	char err[AD_ERRLEN];
	const size_t cin = 200, cout = 144, W = 64;
	int8_t *q = rand_q(cout * cin);
	uint16_t *sc = rand_scales(cout);
	float *w = randv(cout * cin, 0.1f);
	const char *ib = tmp_path("wide-i8.bin"), *fb = tmp_path("wide-f16.bin");
	write_i8_blob(ib, (const int8_t *const[]){q}, (const uint16_t *const[]){sc}, &cout, &cin, 1);
	REQUIRE(ane_blob_write_proj(fb, &(struct ane_wsrc){w, AD_TYPE_F32, cout * cin}, 1, err) == 0, "%s", err);
	char *mils[2] = {ane_mil_proj_w((int)cin, (int)cout, (int)W, ANE_W_INT8, err),
	                 ane_mil_proj((int)cin, (int)cout, (int)W, err)};
	const char *blobs[2] = {ib, fb};
	REQUIRE(mils[0] && mils[1], "%s", err);
	float *x = randv(W * cin, 2.0f), *x2 = randv(W * cin, 2.0f), *y0 = calloc(W * cout, 4),
	      *y1 = calloc(W * cout, 4);
	for (size_t i = 0; i < W * cin; i++) {
		x[i] = ad_fp16_to_f32(ad_f32_to_fp16(x[i]));
		x2[i] = ad_fp16_to_f32(ad_f32_to_fp16(x2[i]));
	}
	static const size_t cols[] = {24, 25, 37, 48, 63, 64};
	int bad = 0, runs = 0;
	for (int m = 0; m < 2; m++) {
		struct emu_file f = {.name = "w.bin", .path = blobs[m]};
		struct emu *e0 = emu_open(&(struct emu_opts){.threads = 1, .simd = EMU_SIMD_REF}, err);
		REQUIRE(e0, "%s", err);
		struct emu_kernel *k0 = emu_compile(e0, mils[m], &f, 1, err);
		REQUIRE(k0, "%s", err);
		for (int l = EMU_SIMD_REF; l <= emu_cpu_simd(); l++)
			for (int th = 1; th <= 3; th++) {
				struct emu *e = emu_open(&(struct emu_opts){.threads = th, .simd = l}, err);
				REQUIRE(e, "%s", err);
				struct emu_kernel *k = emu_compile(e, mils[m], &f, 1, err);
				REQUIRE(k, "%s", err);
				// two inputs in turn: an output the kernel leaves unwritten
				// then holds the other input's values, not the ref's
				for (size_t c = 0; c < 2 * sizeof cols / sizeof cols[0]; c++) {
					const float *xi = c % 2 ? x2 : x;
					size_t n = cols[c / 2];
					memset(y0, 0, W * cout * 4);
					memset(y1, 0xff, W * cout * 4);
					REQUIRE(run(k0, xi, n, y0, err) == 0, "%s", err);
					REQUIRE(run(k, xi, n, y1, err) == 0, "%s", err);
					runs++;
					if (memcmp(y0, y1, n * cout * 4) && !bad++)
						CHECK(0, "%s, %s, %d thread(s), %zu columns: differs from ref",
						      m ? "fp16" : "int8", emu_simd_name(l), th, n);
				}
				emu_kernel_free(k);
				emu_close(e);
			}
		emu_kernel_free(k0);
		emu_close(e0);
	}
	CHECK(bad == 0, "%d of %d runs differ", bad, runs);
	free(q), free(sc), free(w), free(mils[0]), free(mils[1]), free(x), free(x2), free(y0), free(y1);
}

// every other form of constexpr_affine_dequantize is refused, naming the line
static void
test_i8_rules(void)
{
	char err[AD_ERRLEN];
	size_t cout = 4, cin = 8;
	int8_t *q = rand_q(cout * cin);
	uint16_t *sc = rand_scales(cout);
	const char *blob = tmp_path("rule-i8.bin");
	write_i8_blob(blob, (const int8_t *const[]){q}, (const uint16_t *const[]){sc}, &cout, &cin, 1);
	char *base = ane_mil_proj_w((int)cin, (int)cout, 1, ANE_W_INT8, err);
	REQUIRE(base, "%s", err);
	struct emu_kernel *k = compile(base, blob, err);
	CHECK(k, "the generator's form: %s", err);
	emu_kernel_free(k);
	static const struct {
		const char *a, *b, *want;
	} e[] = {
		{"constexpr_affine_dequantize()[axis = int32(0), ", "constexpr_affine_dequantize(axis = int32(0))[",
	         "mil line 10: constexpr_affine_dequantize 'w0' takes its operands as arguments"},
		{"axis = int32(0)", "axis = int32(1)",
	         "mil line 10: constexpr_affine_dequantize 'w0': axis must be int32(0)"},
		{"zero_point = int8(0)", "zero_point = int8(3)", "zero_point must be int8(0)"},
		{", zero_point = int8(0)", "", "constexpr_affine_dequantize 'w0' without zero_point"},
		{"zero_point", "zeropoint", "unknown attribute 'zeropoint'"},
		{"quantized_data = tensor<int8, [4, 8, 1, 1]>", "quantized_data = tensor<fp16, [4, 8, 1, 1]>",
	         "quantized_data must be tensor<int8, [4, 8, 1, 1]>(BLOBFILE(...))"},
		{"scale = tensor<fp16, [4]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(160)))",
	         "scale = fp16(0.5)", "scale must be tensor<fp16, [4]>(BLOBFILE(...)), one per output channel"},
		{"scale = tensor<fp16, [4]>", "scale = tensor<fp16, [8]>", "one per output channel"},
		// the scale pointed at the int8 chunk, the data at the scales
		{"offset = uint64(160)", "offset = uint64(64)", "holds int8 values"},
		{"offset = uint64(64)", "offset = uint64(160)", "the chunk at 160 in 'w.bin' holds fp16 values"},
		{"tensor<fp16, [4, 8, 1, 1]> w0 = constexpr", "tensor<fp16, [4, 8, 1, 2]> w0 = constexpr",
	         "only conv weights tensor<fp16, [COUT, CIN, 1, 1]>"},
	};
	for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
		char *m = edit(base, e[i].a, e[i].b);
		if (m && !strcmp(e[i].b, "scale = tensor<fp16, [8]>")) {
			k = compile(m, blob, err);
			CHECK(!k && strstr(err, e[i].want), "%s", err);
			emu_kernel_free(k);
			free(m);
			continue;
		}
		expect_fail(m, blob, e[i].want);
		free(m);
	}
	// an int8 BLOBFILE as a plain const, and the dequantized weight used as
	// an activation
	char *m = edit(
		base, "tensor<fp16, [1, 4, 1, 1]> o0 = conv(",
		"tensor<int8, [4, 8, 1, 1]> wq = const()[name = string(\"wq\"), val = tensor<int8, [4, 8, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/w.bin\"), offset = uint64(64)))];\n"
		"        tensor<fp16, [1, 4, 1, 1]> o0 = conv(");
	expect_fail(m, blob, "only fp16 weights are supported (int8 ones as the quantized_data");
	free(m);
	m = edit(base, "x = i0)[name", "x = w0)[name");
	expect_fail(m, blob, "'w0' is a const, not an activation");
	free(m);
	free(base), free(q), free(sc);
}

// per-row int8 quantisation (build.h): Q8_0 rows whose blocks share a
// scale come back exactly; otherwise |s q - w| <= s / 2; refusals
static void
test_i8_quant(void)
{
	char err[AD_ERRLEN];
	enum { N = 96 }; // three Q8_0 blocks
	float w[N];
	int8_t q[N];
	uint16_t sc;
	// Q8_0 values d * qb with one d and max |qb| = 127: q = qb, s = d
	const float d = ad_fp16_to_f32(ad_f32_to_fp16(0.0123f));
	int8_t qb[N];
	for (int i = 0; i < N; i++) {
		qb[i] = (int8_t)((i * 53) % 255 - 127);
		w[i] = d * qb[i];
	}
	qb[5] = 127, w[5] = d * 127;
	REQUIRE(ane_quant_row(w, N, q, &sc, err) == 0, "%s", err);
	CHECK(ad_fp16_to_f32(sc) == d, "scale %g, d %g", (double)ad_fp16_to_f32(sc), (double)d);
	CHECK(!memcmp(q, qb, N), "a shared-scale Q8_0 row is not exact");
	// blocks with other scales: within half a step of the row's scale
	for (int i = 32; i < 64; i++)
		w[i] = ad_fp16_to_f32(ad_f32_to_fp16(0.0031f)) * qb[i];
	for (int i = 64; i < N; i++)
		w[i] = ad_fp16_to_f32(ad_f32_to_fp16(0.0007f)) * qb[i];
	REQUIRE(ane_quant_row(w, N, q, &sc, err) == 0, "%s", err);
	float s = ad_fp16_to_f32(sc);
	double worst = 0;
	for (int i = 0; i < N; i++)
		worst = fmax(worst, fabs((double)s * q[i] - w[i]));
	CHECK(worst <= s / 2 * (1 + 1e-6), "max error %g, s/2 %g", worst, (double)s / 2);
	struct ane_qerr e = {0};
	ane_qerr_row(&e, w, q, sc, N);
	CHECK(e.n == N && fabs(e.max_abs - worst) < 1e-12 && e.max_rel_row <= 1.0 / 254 * (1 + 1.0 / 2048));
	CHECK(ane_qerr_rms_rel(&e) > 0 && ane_qerr_rms_rel(&e) < 0.01, "%g", ane_qerr_rms_rel(&e));
	// the largest weight is +-127 exactly; a zero row is all zero
	int m = 0;
	for (int i = 0; i < N; i++)
		m = abs(q[i]) > m ? abs(q[i]) : m;
	CHECK(m == 127, "max |q| %d", m);
	memset(w, 0, sizeof w);
	REQUIRE(ane_quant_row(w, N, q, &sc, err) == 0, "%s", err);
	CHECK(sc == 0 && q[0] == 0 && q[N - 1] == 0);
	// refusals
	w[7] = NAN;
	CHECK(ane_quant_row(w, N, q, &sc, err) < 0 && strstr(err, "weight 7 of a row is nan"), "%s", err);
	w[7] = 1e9f;
	CHECK(ane_quant_row(w, N, q, &sc, err) < 0 && strstr(err, "beyond fp16 x 127"), "%s", err);
	w[7] = INFINITY;
	CHECK(ane_quant_row(w, N, q, &sc, err) < 0 && strstr(err, "weight 7"), "%s", err);
}

// the emu's sigmoid and gate: every path gives the plain twin's bits, on
// every fp16 value (what the gate's inputs are) and on fp32 specials; the
// sigmoid within 3 ulp of the true one in double; the gate equal to its
// three ops one by one
static void
test_sigmoid_gate(void)
{
	enum { N = 65536 + 16 };
	float *a = malloc(N * sizeof *a), *u = malloc(N * sizeof *u);
	float *y[3], *h[3];
	for (int l = 0; l < 3; l++) {
		y[l] = malloc(N * sizeof(float));
		h[l] = malloc(N * sizeof(float));
	}
	for (int i = 0; i < 65536; i++) {
		a[i] = ad_fp16_to_f32((uint16_t)i);
		u[i] = ad_fp16_to_f32((uint16_t)(i * 7919));
	}
	const float sp[16] = {0.0f,   -0.0f, INFINITY, -INFINITY, NAN,     88.0f,  -88.0f,  87.9f,
	                      -87.9f, 89.0f, -89.0f,   1e-30f,    -1e-30f, 100.0f, -104.0f, 0.5f};
	for (int i = 0; i < 16; i++) {
		a[65536 + i] = sp[i];
		u[65536 + i] = 1.0f + (float)i;
	}
	const int lv[3] = {EMU_SIMD_REF, EMU_SIMD_AVX2, EMU_SIMD_AVX512};
	for (int l = 0; l < 3; l++) {
		emu_sigmoid(lv[l], a, y[l], N);
		emu_gate(lv[l], a, u, h[l], N);
	}
	int diff = 0, gdiff = 0, nan_ok = 1;
	for (int l = 1; l < 3; l++)
		for (int i = 0; i < N; i++) {
			diff += memcmp(&y[0][i], &y[l][i], 4) != 0;
			gdiff += memcmp(&h[0][i], &h[l][i], 4) != 0;
		}
	CHECK(diff == 0 && gdiff == 0, "%d sigmoid and %d gate values differ from the plain twin", diff, gdiff);
	double worst = 0;
	int ones = 1, zeros = 1;
	for (int i = 0; i < N; i++) {
		if (isnan(a[i])) {
			nan_ok &= isnan(y[0][i]) && isnan(h[0][i]);
			continue;
		}
		double t = 1.0 / (1.0 + exp(-(double)a[i]));
		if (a[i] >= 20.0f)
			ones &= y[0][i] == 1.0f;
		if (a[i] <= -104.0f)
			zeros &= ad_fp16_to_f32(ad_f32_to_fp16(y[0][i])) == 0.0f;
		if (t < 1e-37) // below fp32's normals the ulp is no measure
			continue;
		double ulp = ldexp(1.0, ilogb(t) - 23), e = fabs(y[0][i] - t) / ulp;
		worst = e > worst ? e : worst;
		// the gate: its three ops one by one, through the same sigmoid
		float s = ad_fp16_to_f32(ad_f32_to_fp16(y[0][i]));
		s = ad_fp16_to_f32(ad_f32_to_fp16(a[i] * s));
		float g = ad_fp16_to_f32(ad_f32_to_fp16(s * u[i]));
		gdiff += memcmp(&g, &h[0][i], 4) != 0;
	}
	CHECK(worst <= 3.0, "sigmoid: %.2f ulp from the true value", worst);
	CHECK(gdiff == 0, "%d gate values differ from the ops one by one", gdiff);
	CHECK(nan_ok && ones && zeros, "NaN %d, saturation %d %d", nan_ok, ones, zeros);
	printf("sigmoid: the plain twin's bits on every path; worst %.2f ulp (fp32) over every fp16 input\n", worst);
	free(a), free(u);
	for (int l = 0; l < 3; l++)
		free(y[l]), free(h[l]);
}

// a cout x cin projection W columns wide, written twice with random
// weights: mil[0] and blob[0] fp16, mil[1] and blob[1] int8 (files named
// after tag)
static void
proj_fp16_int8(const char *tag, size_t cout, size_t cin, size_t W, char *mil[2], char blob[2][512])
{
	char err[AD_ERRLEN], name[64];
	float *w = randv(cout * cin, 0.1f);
	int8_t *q = rand_q(cout * cin);
	uint16_t *sc = rand_scales(cout);
	for (int i = 0; i < 2; i++) {
		snprintf(name, sizeof name, "%s%s.bin", tag, i ? "-i8" : "");
		snprintf(blob[i], 512, "%s", tmp_path(name));
	}
	REQUIRE(ane_blob_write_proj(blob[0], &(struct ane_wsrc){w, AD_TYPE_F32, cout * cin}, 1, err) == 0);
	write_i8_blob(blob[1], (const int8_t *const[]){q}, (const uint16_t *const[]){sc}, &cout, &cin, 1);
	mil[0] = ane_mil_proj((int)cin, (int)cout, (int)W, err);
	mil[1] = ane_mil_proj_w((int)cin, (int)cout, (int)W, ANE_W_INT8, err);
	REQUIRE(mil[0] && mil[1], "%s", err);
	free(w), free(q), free(sc);
}

// a compile's repacking (emu.c, repack_task): in tasks on the pool, in
// blocks of steps, from a mapped blob whose pages go as they are done:
// the panels are emu_pack's and emu_i8_pack's of the same weights, for
// shapes whose rows end inside a pair or quad and whose cin ends inside
// a block, on one thread and on four
static void
test_compile_repack(void)
{
	char err[AD_ERRLEN];
	static const size_t shapes[][2] = {{200, 130}, {1040, 72}, {16, 1000}};
	for (int th = 1; th <= 4; th += 3)
		for (int si = 0; si < 3; si++) {
			size_t cout = shapes[si][0], cin = shapes[si][1];
			float *w = randv(cout * cin, 0.1f);
			int8_t *q = rand_q(cout * cin);
			uint16_t *sc = rand_scales(cout);
			char fb[512], qb[512], name[64];
			snprintf(name, sizeof name, "repack%d-%d.bin", th, si);
			snprintf(fb, sizeof fb, "%s", tmp_path(name));
			snprintf(name, sizeof name, "repack%d-%d-i8.bin", th, si);
			snprintf(qb, sizeof qb, "%s", tmp_path(name));
			REQUIRE(ane_blob_write_proj(fb, &(struct ane_wsrc){w, AD_TYPE_F32, cout * cin}, 1, err) == 0);
			write_i8_blob(qb, (const int8_t *const[]){q}, (const uint16_t *const[]){sc}, &cout, &cin, 1);
			char *mf = ane_mil_proj((int)cin, (int)cout, 1, err),
			     *mq = ane_mil_proj_w((int)cin, (int)cout, 1, ANE_W_INT8, err);
			REQUIRE(mf && mq, "%s", err);
			struct emu *e = emu_open(&(struct emu_opts){.threads = th}, err);
			REQUIRE(e, "%s", err);
			// fp16: the blob holds w rounded to fp16
			uint16_t *h = malloc(cout * cin * 2), *want = malloc(emu_panel_bytes(cout, cin));
			for (size_t i = 0; i < cout * cin; i++)
				h[i] = ad_f32_to_fp16(w[i]);
			emu_pack(h, cout, cin, want);
			struct emu_kernel *k =
				emu_compile(e, mf, &(struct emu_file){.name = "w.bin", .path = fb}, 1, err);
			REQUIRE(k, "%s", err);
			struct emu_const c;
			REQUIRE(emu_kernel_const(k, 0, &c) == 0);
			CHECK(c.kind == EMU_CONST_F16_PANELS && c.bytes == emu_panel_bytes(cout, cin) &&
			              !memcmp(c.data, want, c.bytes),
			      "fp16 %zux%zu, %d threads: other panels", cout, cin, th);
			emu_kernel_free(k);
			int8_t *qwant = malloc(emu_i8_panel_bytes(cout, cin));
			emu_i8_pack(q, cout, cin, qwant);
			k = emu_compile(e, mq, &(struct emu_file){.name = "w.bin", .path = qb}, 1, err);
			REQUIRE(k, "%s", err);
			REQUIRE(emu_kernel_const(k, 0, &c) == 0);
			CHECK(c.kind == EMU_CONST_I8_PANELS && c.bytes == emu_i8_panel_bytes(cout, cin) &&
			              !memcmp(c.data, qwant, c.bytes),
			      "int8 %zux%zu, %d threads: other panels", cout, cin, th);
			emu_kernel_free(k);
			emu_close(e);
			free(mf), free(mq), free(h), free(want), free(qwant), free(w), free(q), free(sc);
		}
}

// one column from DRAM (emu_opts.cold): each thread streams one range,
// and a thread done with its own takes the back half of what another has
// left. Every panel is still computed whole by one thread, so with more
// threads than CPUs (some run late, so ranges are stolen) each eval gives
// the one-thread bits, fp16 on every path and int8, a partial last unit
// included; turned off, nothing is stolen; by default, stealing is on
// but on AMD Zen 4 (family 19h)
static void
test_steal(void)
{
	char err[AD_ERRLEN];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	int nt = ncpu > 0 && ncpu < 62 ? (int)ncpu + 2 : 64;
	size_t cin = 1024, cout = 1040; // 65 panels
	float *x = randv(cin, 2.0f);
	for (size_t i = 0; i < cin; i++)
		x[i] = ad_fp16_to_f32(ad_f32_to_fp16(x[i]));
	char *mils[2], blobs[2][512];
	proj_fp16_int8("steal", cout, cin, 4, mils, blobs);
	float *y1 = calloc(cout, 4), *yn = calloc(cout, 4);
	for (int wi = 0; wi < 2; wi++) {
		struct emu_file f = {.name = "w.bin", .path = blobs[wi]};
		struct emu *e1 = emu_open(&(struct emu_opts){.threads = 1, .force_ref = 1}, err);
		REQUIRE(e1, "%s", err);
		struct emu_kernel *k1 = emu_compile(e1, mils[wi], &f, 1, err);
		REQUIRE(k1, "%s", err);
		REQUIRE(run(k1, x, 1, y1, err) == 0, "%s", err);
		for (int l = EMU_SIMD_REF; l <= emu_cpu_simd(); l++) {
			struct emu *e =
				emu_open(&(struct emu_opts){.threads = nt, .simd = l, .cold = 1, .steal = 1}, err);
			REQUIRE(e, "%s", err);
			struct emu_kernel *k = emu_compile(e, mils[wi], &f, 1, err);
			REQUIRE(k, "%s", err);
			int bad = 0;
			for (int i = 0; i < 300 && !bad; i++) {
				memset(yn, 0, cout * 4);
				REQUIRE(run(k, x, 1, yn, err) == 0, "%s", err);
				bad = memcmp(y1, yn, cout * 4) != 0;
			}
			CHECK(!bad, "%s, %s, %d threads: differs from one thread", wi ? "int8" : "fp16",
			      emu_simd_name(l), nt);
			fprintf(stderr, "  %s, %s, %d threads: %llu ranges stolen in 300 evals\n", wi ? "int8" : "fp16",
			        emu_simd_name(l), nt, (unsigned long long)emu_steals(e));
			if (l > EMU_SIMD_REF)
				CHECK(emu_steals(e) > 0, "%s, %s: %d threads on %ld CPUs stole nothing",
				      wi ? "int8" : "fp16", emu_simd_name(l), nt, ncpu);
			emu_kernel_free(k);
			emu_close(e);
		}
		// off (-1): nothing stolen; the default: on but on Zen 4
		for (int st = -1; st <= 0; st++) {
			struct emu *e = emu_open(&(struct emu_opts){.threads = nt, .cold = 1, .steal = st}, err);
			REQUIRE(e, "%s", err);
			struct emu_kernel *k = emu_compile(e, mils[wi], &f, 1, err);
			REQUIRE(k, "%s", err);
			for (int i = 0; i < 100; i++)
				REQUIRE(run(k, x, 1, yn, err) == 0, "%s", err);
			CHECK(!memcmp(y1, yn, cout * 4), "steal %d: differs from one thread", st);
			if (st < 0 || ad_cpu_amd_family() == 0x19)
				CHECK(emu_steals(e) == 0, "steal %d: %llu ranges stolen", st,
				      (unsigned long long)emu_steals(e));
			else
				CHECK(emu_steals(e) > 0, "the default stole nothing (%d threads, %ld CPUs)", nt, ncpu);
			emu_kernel_free(k);
			emu_close(e);
		}
		emu_kernel_free(k1);
		emu_close(e1);
	}
	free(x), free(mils[0]), free(mils[1]), free(y1), free(yn);
}

static int
count_pace(void *arg)
{
	int *n = arg;
	return ++n[0] == n[1]; // n[1]: the call that stops the copy (0: none)
}

// emu_kernel_copy / emu_kernel_adopt: a kernel compiled from borrowed
// constants (as from a mapped cache file), fp16 (one 5 MiB weight: three
// pieces), int8 (two) and lut4 (one), runs from copies of its own once it adopts them: the
// same bits after the borrowed buffers are overwritten, nothing borrowed
// left; before the adoption it still runs from the originals; a copy that
// pace stops returns NULL and leaves the kernel as it was
static void
test_copy_adopt(void)
{
	char err[AD_ERRLEN];
	size_t cin = 1024, cout = 2560, W = 3;
	float *x = randv(W * cin, 2.0f);
	for (size_t i = 0; i < W * cin; i++)
		x[i] = ad_fp16_to_f32(ad_f32_to_fp16(x[i]));
	char *mils[3], blobs[3][512];
	proj_fp16_int8("adopt", cout, cin, W, mils, blobs);
	{ // and 4-bit: 40 tables
		size_t ntab = cout / 64;
		uint8_t *q = malloc(cout * cin);
		for (size_t i = 0; i < cout * cin; i++)
			q[i] = (uint8_t)(i * 7 % 16);
		uint16_t *tab = malloc(ntab * 16 * 2), *sc = rand_scales(cout);
		for (size_t i = 0; i < ntab * 16; i++)
			tab[i] = ad_f32_to_fp16(lcg(1.0f));
		snprintf(blobs[2], 512, "%s", tmp_path("adopt-l4.bin"));
		write_l4_blob(blobs[2], (const uint8_t *const[]){q}, (const uint16_t *const[]){tab}, &ntab,
		              (const uint16_t *const[]){sc}, &cout, &cin, 1);
		mils[2] = ane_mil_proj_w((int)cin, (int)cout, (int)W, ANE_W_LUT4, err);
		REQUIRE(mils[2], "%s", err);
		free(q), free(tab), free(sc);
	}
	static const char *const kind[3] = {"fp16", "int8", "lut4"};
	float *y0 = calloc(W * cout, 4), *y1 = calloc(W * cout, 4);
	struct emu *e = emu_open(&(struct emu_opts){.threads = 2}, err);
	REQUIRE(e, "%s", err);
	for (int wi = 0; wi < 3; wi++) {
		struct emu_file f = {.name = "w.bin", .path = blobs[wi]};
		struct emu_kernel *k0 = emu_compile(e, mils[wi], &f, 1, err);
		REQUIRE(k0, "%s", err);
		CHECK(emu_kernel_borrowed(k0) == 0, "a kernel from blob files borrows");
		REQUIRE(run(k0, x, W, y0, err) == 0, "%s", err);
		// its constants, as a cache file would hold them, in buffers of ours
		int n = emu_kernel_nconsts(k0);
		struct emu_const *c = calloc((size_t)n, sizeof *c);
		size_t total = 0;
		for (int i = 0; i < n; i++) {
			REQUIRE(emu_kernel_const(k0, i, &c[i]) == 0);
			void *b = aligned_alloc(64, (c[i].bytes + 63) / 64 * 64);
			memcpy(b, c[i].data, c[i].bytes);
			c[i].data = b;
			total += c[i].bytes;
		}
		struct emu_kernel *k = emu_compile_packed(e, mils[wi], c, n, err);
		REQUIRE(k, "%s", err);
		CHECK(emu_kernel_borrowed(k) == total, "%zu bytes borrowed, %zu given", emu_kernel_borrowed(k), total);
		int pc[2] = {0, wi == 2 ? 1 : 2}; // stopped before the second piece (lut4: the first)
		struct emu_copy *cp = emu_kernel_copy(k, count_pace, pc, err);
		CHECK(!cp && strstr(err, "stopped"), "a stopped copy: %s", cp ? "returned" : err);
		CHECK(emu_kernel_borrowed(k) == total, "a stopped copy changed the kernel");
		pc[0] = pc[1] = 0;
		cp = emu_kernel_copy(k, count_pace, pc, err);
		REQUIRE(cp, "%s", err);
		CHECK(pc[0] == 3 - wi, "%d pieces for %zu bytes", pc[0], total);
		REQUIRE(run(k, x, W, y1, err) == 0, "%s", err);
		CHECK(!memcmp(y0, y1, W * cout * 4), "%s: before the adoption, not the same bits", kind[wi]);
		emu_kernel_adopt(k, cp);
		CHECK(emu_kernel_borrowed(k) == 0, "%zu bytes still borrowed", emu_kernel_borrowed(k));
		for (int i = 0; i < n; i++) // the originals gone
			memset((void *)c[i].data, 0x7b, c[i].bytes);
		memset(y1, 0, W * cout * 4);
		REQUIRE(run(k, x, W, y1, err) == 0, "%s", err);
		CHECK(!memcmp(y0, y1, W * cout * 4), "%s: after the adoption, not the same bits", kind[wi]);
		emu_kernel_free(k);
		for (int i = 0; i < n; i++)
			free((void *)c[i].data);
		free(c);
		emu_kernel_free(k0);
	}
	emu_copy_free(NULL);
	emu_kernel_adopt(NULL, NULL);
	emu_close(e);
	free(x), free(mils[0]), free(mils[1]), free(mils[2]), free(y0), free(y1);
}

int
main(void)
{
	char err[AD_ERRLEN];
	E = emu_open(NULL, err);
	if (!E) {
		fprintf(stderr, "emu_open: %s\n", err);
		return 1;
	}
	T_RUN(test_layout_table);
	T_RUN(test_scatter_gather);
	T_RUN(test_conv_fast_vs_ref);
	T_RUN(test_conv_columns_independent);
	T_RUN(test_probe_vector);
	T_RUN(test_shared_activations);
	T_RUN(test_proj);
	T_RUN(test_threads);
	T_RUN(test_eval_host);
	T_RUN(test_surface_moves);
	T_RUN(test_qkv);
	T_RUN(test_ffn_fused);
	T_RUN(test_ffn_split);
	T_RUN(test_paths_same_bits);
	T_RUN(test_big_panels);
	T_RUN(test_simd_select);
	T_RUN(test_lm_head_chunks);
	T_RUN(test_o_residual_scalar);
	T_RUN(test_rule_matmul);
	T_RUN(test_rule_offsets);
	T_RUN(test_rule_shapes);
	T_RUN(test_rule_slots);
	T_RUN(test_rule_mangled);
	T_RUN(test_sigmoid_gate);
	T_RUN(test_steal);
	T_RUN(test_copy_adopt);
	T_RUN(test_compile_repack);
	T_RUN(test_prefetch);
	T_RUN(test_i8_one_col);
	T_RUN(test_i8_kernels);
	T_RUN(test_l4_kernels);
	T_RUN(test_l4_proj);
	T_RUN(test_l4_rules);
	T_RUN(test_l4_quant);
	T_RUN(test_i8_proj_ffn);
	T_RUN(test_wide_tasks);
	T_RUN(test_i8_rules);
	T_RUN(test_i8_quant);
	T_RUN(test_small_panels_huge);
	emu_close(E);
	return t_done();
}
