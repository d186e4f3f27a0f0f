// test-shim.c - the device-free parts of the ANE shim (shim/ane-shim-util.c):
// surface sizes, strides read back from a model and the formula they are
// checked against, re-striding copies, the load-retry schedule, status
// codes, weight-dictionary keys.
#include "t.h"

#include <stdint.h>

#include "ane-shim.h"
#include "layout.h"

static void
test_surface_bytes(void)
{
	CHECK(ane_shim_surface_bytes(0) == 49152);
	CHECK(ane_shim_surface_bytes(4096) == 49152);
	CHECK(ane_shim_surface_bytes(49152) == 49152);
	CHECK(ane_shim_surface_bytes(49153) == 49153);
	CHECK(ane_shim_surface_bytes(57344) == 57344);
	CHECK(ane_shim_elem_size("Float16") == 2);
	CHECK(ane_shim_elem_size("ANETensorType Float32") == 4);
	CHECK(ane_shim_elem_size("Int8") == 0);
	CHECK(ane_shim_elem_size(NULL) == 0);
}

// the strides and sizes the seed reports for real tensors
static void
test_formula_table(void)
{
	static const struct {
		size_t c, w, e, row, plane, batch, cap;
	} v[] = {
		{896, 1, 2, 64, 64, 57344, 57344},    {4, 2, 2, 64, 64, 256, 49152},
		{6, 2, 4, 64, 64, 384, 49152},        {4, 32, 2, 64, 64, 256, 49152},
		{576, 64, 2, 128, 128, 73728, 73728}, {896, 128, 2, 256, 256, 229376, 229376},
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		struct ane_shim_tensor t;
		char err[ANE_SHIM_ERRLEN];
		REQUIRE(ane_shim_tensor_formula(&t, v[i].c, 1, v[i].w, v[i].e, err) == 0, "%s", err);
		CHECK(t.row_stride == v[i].row, "case %zu: row %zu", i, t.row_stride);
		CHECK(t.plane_stride == v[i].plane, "case %zu: plane %zu", i, t.plane_stride);
		CHECK(t.batch_stride == v[i].batch, "case %zu: batch %zu", i, t.batch_stride);
		CHECK(t.nbytes == v[i].batch);
		CHECK(ane_shim_surface_bytes(t.nbytes) == v[i].cap, "case %zu", i);
		// the same numbers as the emu's layout.h
		struct ane_layout l;
		REQUIRE(ane_layout_init(&l, v[i].c, 1, v[i].w, v[i].e, err) == 0, "%s", err);
		CHECK(l.row_stride == t.row_stride && l.plane_stride == t.plane_stride && l.nbytes == t.nbytes,
		      "case %zu: layout.h disagrees", i);
		const struct ane_layout *lp = &l;
		CHECK(ane_surface_capacity(&lp, 1) == v[i].cap);
	}
	struct ane_shim_tensor t;
	CHECK(ane_shim_tensor_formula(&t, 4, 1, 1, 2, NULL) == 0 && !ane_shim_tensor_contiguous(&t));
	CHECK(ane_shim_tensor_formula(&t, 4, 1, 32, 2, NULL) == 0 && ane_shim_tensor_contiguous(&t));
	CHECK(ane_shim_tensor_formula(&t, 4, 1, 32, 3, NULL) == -1);
}

// what modelAttributes entries turn into, and what is refused
static void
test_tensor_set(void)
{
	struct ane_shim_tensor t;
	char err[ANE_SHIM_ERRLEN] = "";
	// the seed's fallbacks: BatchStride 0 -> Channels * PlaneStride, Batches 0 -> 1
	REQUIRE(ane_shim_tensor_set(&t, "i0", "Float16", 0, 896, 1, 1, 64, 64, 0, 0, err) == 0, "%s", err);
	CHECK(strcmp(t.name, "i0") == 0);
	CHECK(t.batches == 1 && t.batch_stride == 57344 && t.nbytes == 57344 && t.elem == 2);
	// strides larger than the formula are taken as given
	REQUIRE(ane_shim_tensor_set(&t, "o0", "Float16", 1, 6, 1, 40, 128, 128, 0, 1024, err) == 0, "%s", err);
	CHECK(t.row_stride == 128 && t.plane_stride == 128 && t.batch_stride == 1024 && t.nbytes == 1024);
	CHECK(t.width == 40 && t.height == 1);
	// refusals, each with its reason
	CHECK(ane_shim_tensor_set(&t, "x", "Int8", 1, 4, 1, 1, 64, 64, 0, 0, err) == -1 && strstr(err, "Int8"), "%s",
	      err);
	CHECK(ane_shim_tensor_set(&t, "x", "Float16", 1, 0, 1, 1, 64, 64, 0, 0, err) == -1 &&
	      strstr(err, "0 channels"));
	CHECK(ane_shim_tensor_set(&t, "x", "Float16", 1, 4, 1, 64, 64, 64, 0, 0, err) == -1 &&
	              strstr(err, "row stride"),
	      "%s", err);
	CHECK(ane_shim_tensor_set(&t, "x", "Float16", 1, 4, 2, 32, 64, 64, 0, 0, err) == -1 &&
	              strstr(err, "plane stride"),
	      "%s", err);
	CHECK(ane_shim_tensor_set(&t, "x", "Float16", 1, 4, 1, 1, 64, 64, 0, 128, err) == -1 &&
	              strstr(err, "batch stride"),
	      "%s", err);
	CHECK(ane_shim_tensor_set(&t, "x", "Float16", 1, 4, 1, 1, 0, 64, 0, 0, err) == -1);
	CHECK(ane_shim_tensor_set(&t, "x", "Float16", 1, (uint64_t)1 << 41, 1, 1, 64, 64, 0, 0, err) == -1);
	CHECK(ane_shim_tensor_set(&t, "x", "Float32", 1, (uint64_t)1 << 39, 1, 1, 64, (uint64_t)1 << 39, 0, 0, err) ==
	              -1,
	      "an overflowing size must be refused");
}

// host layout (formula) <-> device layout with other strides
static void
test_restride(void)
{
	struct ane_shim_tensor h, d;
	char err[ANE_SHIM_ERRLEN] = "";
	REQUIRE(ane_shim_tensor_formula(&h, 3, 1, 2, 2, err) == 0, "%s", err);
	REQUIRE(ane_shim_tensor_set(&d, "i0", "Float16", 1, 3, 1, 2, 96, 160, 0, 0, err) == 0, "%s", err);
	uint8_t hb[3 * 64], db[3 * 160], back[3 * 64];
	for (size_t i = 0; i < sizeof hb; i++)
		hb[i] = (uint8_t)(i * 7 + 1);
	memset(db, 0xAA, sizeof db);
	REQUIRE(ane_shim_restride(db, &d, hb, &h, 2, err) == 0, "%s", err);
	int ok = 1;
	for (size_t c = 0; c < 3; c++)
		for (size_t j = 0; j < 160; j++) {
			uint8_t want = j < 4 ? hb[c * 64 + j] : 0xAA; // 2 columns x 2 bytes, padding untouched
			ok &= db[c * 160 + j] == want;
		}
	CHECK(ok, "device bytes wrong");
	memset(back, 0x55, sizeof back);
	REQUIRE(ane_shim_restride(back, &h, db, &d, 2, err) == 0, "%s", err);
	ok = 1;
	for (size_t c = 0; c < 3; c++)
		for (size_t j = 0; j < 64; j++)
			ok &= back[c * 64 + j] == (j < 4 ? hb[c * 64 + j] : 0x55);
	CHECK(ok, "round trip wrong");
	// one column: only column 0 of each channel moves
	memset(db, 0xAA, sizeof db);
	REQUIRE(ane_shim_restride(db, &d, hb, &h, 1, err) == 0, "%s", err);
	CHECK(db[0] == hb[0] && db[1] == hb[1] && db[2] == 0xAA && db[160] == hb[64] && db[322] == 0xAA);
	// contiguous on both sides: one copy of the whole block
	struct ane_shim_tensor a, b;
	REQUIRE(ane_shim_tensor_formula(&a, 2, 1, 32, 2, err) == 0 &&
	        ane_shim_tensor_formula(&b, 2, 1, 32, 2, err) == 0);
	uint8_t x[128], y[128];
	for (int i = 0; i < 128; i++)
		x[i] = (uint8_t)i;
	memset(y, 0, sizeof y);
	CHECK(ane_shim_restride(y, &b, x, &a, 32, err) == 0 && memcmp(x, y, 128) == 0);
	// refusals
	CHECK(ane_shim_restride(db, &d, hb, &h, 0, err) == -1 && strstr(err, "columns"));
	CHECK(ane_shim_restride(db, &d, hb, &h, 3, err) == -1);
	CHECK(ane_shim_restride(y, &b, hb, &h, 1, err) == -1 && strstr(err, "restride"), "%s", err);
}

static void
test_retry_schedule(void)
{
	static const int want[] = {0, 100, 200, 400, 800, 1600, 3200};
	CHECK(ANE_SHIM_LOAD_ATTEMPTS == 7);
	int total = 0;
	for (int a = 1; a <= ANE_SHIM_LOAD_ATTEMPTS; a++) {
		CHECK(ane_shim_retry_delay_ms(a) == want[a - 1], "attempt %d: %d", a, ane_shim_retry_delay_ms(a));
		total += ane_shim_retry_delay_ms(a);
	}
	CHECK(total == 6300, "worst case %d ms", total);
	CHECK(ane_shim_retry_delay_ms(0) == -1);
	CHECK(ane_shim_retry_delay_ms(8) == -1);
}

static void
test_status(void)
{
	CHECK(ane_shim_status_name(0x5) && strstr(ane_shim_status_name(0x5), "no ANE resources"));
	CHECK(ane_shim_status_name(0x1d) && strstr(ane_shim_status_name(0x1d), "inference"));
	CHECK(ane_shim_status_name(0xe00002e2) && strstr(ane_shim_status_name(0xe00002e2), "NotPermitted"));
	CHECK(ane_shim_status_name(0xe00002c7) && strstr(ane_shim_status_name(0xe00002c7), "Unsupported"));
	CHECK(ane_shim_status_name(0x7) == NULL);

	uint64_t st = 0;
	CHECK(ane_shim_status_find("ANEProgramProcessRequestDirect() Failed with status=0x1d : Program Inference error",
	                           &st) == 0 &&
	      st == 0x1d);
	CHECK(ane_shim_status_find("load failed, status 0x5", &st) == 0 && st == 0x5);
	CHECK(ane_shim_status_find("Status: 0x5", &st) == 0 && st == 0x5);
	CHECK(ane_shim_status_find("IOKit error (0xe00002e2)", &st) == 0 && st == 0xe00002e2);
	CHECK(ane_shim_status_find("weights at 0x12 are bad", &st) == -1);
	CHECK(ane_shim_status_find("status=0x", &st) == -1);
	CHECK(ane_shim_status_find(NULL, &st) == -1);

	CHECK(ane_shim_status_transient(0x5, 1));
	CHECK(ane_shim_status_transient(0, 0));
	CHECK(!ane_shim_status_transient(0xe00002e2, 1));
	CHECK(!ane_shim_status_transient(0xe00002c7, 1));

	char err[ANE_SHIM_ERRLEN];
	CHECK(ane_shim_error(err, "load", "com.apple.appleneuralengine 5: no resources, status=0x5") == -1);
	CHECK(strncmp(err, "load: ", 6) == 0 && strstr(err, "[status 0x5: no ANE resources"), "%s", err);
	CHECK(ane_shim_error(err, "compile", "InvalidMILProgram") == -1 &&
	              strcmp(err, "compile: InvalidMILProgram") == 0,
	      "%s", err);
	CHECK(ane_shim_error(err, "eval", NULL) == -1 && strstr(err, "no error given"));
	CHECK(ane_shim_error(NULL, "eval", "x") == -1);
}

static void
test_weight_key(void)
{
	char k[64], err[ANE_SHIM_ERRLEN];
	CHECK(ane_shim_weight_key(k, sizeof k, "w.bin", err) == 0 && strcmp(k, "@model_path/weights/w.bin") == 0);
	CHECK(ane_shim_weight_key(k, sizeof k, "a/b.bin", err) == -1 && strstr(err, "plain file name"));
	CHECK(ane_shim_weight_key(k, sizeof k, "..", err) == -1);
	CHECK(ane_shim_weight_key(k, sizeof k, ".", err) == -1);
	CHECK(ane_shim_weight_key(k, sizeof k, "", err) == -1);
	CHECK(ane_shim_weight_key(k, sizeof k, NULL, err) == -1);
	CHECK(ane_shim_weight_key(k, 24, "w.bin", err) == -1 && strstr(err, "too long"));
	CHECK(strcmp(ane_shim_io_name(ANE_SHIM_IO_COPY), "copy") == 0);
	CHECK(strcmp(ane_shim_io_name(ANE_SHIM_IO_SHARED), "shared") == 0);
}

int
main(void)
{
	T_RUN(test_surface_bytes);
	T_RUN(test_formula_table);
	T_RUN(test_tensor_set);
	T_RUN(test_restride);
	T_RUN(test_retry_schedule);
	T_RUN(test_status);
	T_RUN(test_weight_key);
	return t_done();
}
