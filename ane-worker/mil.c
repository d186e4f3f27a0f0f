#include "mil.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blob.h"
#include "err.h"

const char ane_mil_build_info[] = "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, "
				  "{\"coremlc-version\", \"3505.4.1\"}, {\"coremltools-component-milinternal\", \"\"}, "
				  "{\"coremltools-version\", \"9.0\"}})]";

// conv parameters must be named consts, never inline literals
static const char mil_consts[] =
	"        string c_pad_type = const()[name = string(\"c_pad_type\"), val = string(\"valid\")];\n"
	"        tensor<int32, [2]> c_strides = const()[name = string(\"c_strides\"), val = tensor<int32, [2]>([1, 1])];\n"
	"        tensor<int32, [4]> c_pad = const()[name = string(\"c_pad\"), val = tensor<int32, [4]>([0, 0, 0, 0])];\n"
	"        tensor<int32, [2]> c_dilations = const()[name = string(\"c_dilations\"), val = tensor<int32, [2]>([1, 1])];\n"
	"        int32 c_groups = const()[name = string(\"c_groups\"), val = int32(1)];\n";

static void
fail(struct ane_mil *m, const char *fmt, ...)
{
	if (m->failed)
		return;
	m->failed = 1;
	va_list ap;
	va_start(ap, fmt);
	ad_verr(m->err, fmt, ap);
	va_end(ap);
}

static void
emit(struct ane_mil *m, const char *fmt, ...)
{
	if (m->failed)
		return;
	for (;;) {
		size_t room = m->cap - m->len;
		va_list ap;
		va_start(ap, fmt);
		int k = m->buf ? vsnprintf(m->buf + m->len, room, fmt, ap) : -2;
		va_end(ap);
		if (k == -1) {
			fail(m, "format error");
			return;
		}
		if (k >= 0 && (size_t)k < room) {
			m->len += (size_t)k;
			return;
		}
		size_t cap = m->cap ? m->cap * 2 : 4096;
		while (k >= 0 && cap - m->len <= (size_t)k)
			cap *= 2;
		char *p = realloc(m->buf, cap);
		if (!p) {
			fail(m, "out of memory");
			return;
		}
		m->buf = p;
		m->cap = cap;
	}
}

// names are MIL identifiers: letter or '_' first, then letters, digits, '_'
static int
check_name(struct ane_mil *m, const char *s)
{
	int ok = s && (s[0] == '_' || (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'));
	for (const char *p = s; ok && *p; p++)
		ok = *p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9');
	if (!ok)
		fail(m, "bad MIL name '%s'", s ? s : "(null)");
	return ok;
}

static int
check_dim(struct ane_mil *m, const char *what, int d)
{
	if (d < 1 || d > ANE_MIL_MAX_DIM) {
		fail(m, "%s %d out of range [1, %d]", what, d, ANE_MIL_MAX_DIM);
		return 0;
	}
	return 1;
}

void
ane_mil_init(struct ane_mil *m)
{
	memset(m, 0, sizeof *m);
	emit(m, "program(1.3)\n%s\n{\n    func main<ios18>(", ane_mil_build_info);
}

void
ane_mil_free(struct ane_mil *m)
{
	free(m->buf);
	memset(m, 0, sizeof *m);
}

void
ane_mil_input(struct ane_mil *m, const char *name, int c, int w)
{
	if (m->body) {
		fail(m, "input %s declared after the first op", name);
		return;
	}
	if (!check_name(m, name) || !check_dim(m, "channels", c) || !check_dim(m, "width", w))
		return;
	if (m->buf && m->buf[m->len - 1] != '(')
		emit(m, ", ");
	emit(m, "tensor<fp16, [1, %d, 1, %d]> %s", c, w, name);
}

static void
open_body(struct ane_mil *m)
{
	if (m->body || m->failed)
		return;
	if (m->buf[m->len - 1] == '(') {
		fail(m, "program has no inputs");
		return;
	}
	emit(m, ") {\n%s", mil_consts);
	m->body = 1;
}

void
ane_mil_conv(struct ane_mil *m, const char *y, const char *x, int cout, int cin, int w, uint64_t off)
{
	open_body(m);
	if (!check_name(m, y) || !check_name(m, x) || !check_dim(m, "cout", cout) || !check_dim(m, "cin", cin) ||
	    !check_dim(m, "width", w))
		return;
	int k = m->nweights++;
	m->nblob++;
	emit(m,
	     "        tensor<fp16, [%d, %d, 1, 1]> w%d = const()[name = string(\"w%d\"), val = "
	     "tensor<fp16, [%d, %d, 1, 1]>(BLOBFILE(path = string(\"" ANE_MIL_WEIGHT_PATH
	     "\"), offset = uint64(%llu)))];\n",
	     cout, cin, k, k, cout, cin, (unsigned long long)off);
	emit(m,
	     "        tensor<fp16, [1, %d, 1, %d]> %s = conv(dilations = c_dilations, groups = "
	     "c_groups, pad = c_pad, pad_type = c_pad_type, strides = c_strides, weight = w%d, x = "
	     "%s)[name = string(\"%s\")];\n",
	     cout, w, y, k, x, y);
}

void
ane_mil_conv_i8(struct ane_mil *m, const char *y, const char *x, int cout, int cin, int w, uint64_t off_q,
                uint64_t off_s)
{
	open_body(m);
	if (!check_name(m, y) || !check_name(m, x) || !check_dim(m, "cout", cout) || !check_dim(m, "cin", cin) ||
	    !check_dim(m, "width", w))
		return;
	int k = m->nweights++;
	m->nblob += 2;
	emit(m,
	     "        tensor<fp16, [%d, %d, 1, 1]> w%d = constexpr_affine_dequantize()[axis = int32(0), "
	     "name = string(\"w%d\"), quantized_data = tensor<int8, [%d, %d, 1, 1]>(BLOBFILE(path = "
	     "string(\"" ANE_MIL_WEIGHT_PATH "\"), offset = uint64(%llu))), scale = tensor<fp16, "
	     "[%d]>(BLOBFILE(path = string(\"" ANE_MIL_WEIGHT_PATH "\"), offset = uint64(%llu))), "
	     "zero_point = int8(0)];\n",
	     cout, cin, k, k, cout, cin, (unsigned long long)off_q, cout, (unsigned long long)off_s);
	emit(m,
	     "        tensor<fp16, [1, %d, 1, %d]> %s = conv(dilations = c_dilations, groups = "
	     "c_groups, pad = c_pad, pad_type = c_pad_type, strides = c_strides, weight = w%d, x = "
	     "%s)[name = string(\"%s\")];\n",
	     cout, w, y, k, x, y);
}

void
ane_mil_conv_l4(struct ane_mil *m, const char *y, const char *x, int cout, int cin, int w, uint64_t off_q,
                uint64_t off_t, uint64_t off_s)
{
	open_body(m);
	if (!check_name(m, y) || !check_name(m, x) || !check_dim(m, "cout", cout) || !check_dim(m, "cin", cin) ||
	    !check_dim(m, "width", w))
		return;
	int k = m->nweights++;
	m->nblob += 3;
	emit(m,
	     "        tensor<fp16, [%d, %d, 1, 1]> w%d_p = constexpr_lut_to_dense(indices = tensor<uint4, [%d, %d, 1, "
	     "1]>(BLOBFILE(path = string(\"" ANE_MIL_WEIGHT_PATH "\"), offset = uint64(%llu))), lut = tensor<fp16, "
	     "[%d, 1, 1, 1, 16, 1]>(BLOBFILE(path = string(\"" ANE_MIL_WEIGHT_PATH "\"), offset = "
	     "uint64(%llu))))[name = string(\"w%d_p\")];\n",
	     cout, cin, k, cout, cin, (unsigned long long)off_q, ane_mil_l4_tables(cout), (unsigned long long)off_t, k);
	emit(m,
	     "        tensor<fp16, [%d, %d, 1, 1]> w%d = constexpr_blockwise_shift_scale(data = w%d_p, scale = "
	     "tensor<fp16, [%d, 1, 1, 1]>(BLOBFILE(path = string(\"" ANE_MIL_WEIGHT_PATH "\"), offset = "
	     "uint64(%llu))))[name = string(\"w%d\")];\n",
	     cout, cin, k, k, cout, (unsigned long long)off_s, k);
	emit(m,
	     "        tensor<fp16, [1, %d, 1, %d]> %s = conv(dilations = c_dilations, groups = "
	     "c_groups, pad = c_pad, pad_type = c_pad_type, strides = c_strides, weight = w%d, x = "
	     "%s)[name = string(\"%s\")];\n",
	     cout, w, y, k, x, y);
}

int
ane_mil_l4_tables(int cout)
{
	return cout % 64 ? 1 : cout / 64;
}

static void
binary(struct ane_mil *m, const char *op, const char *y, const char *a, const char *b, int c, int w)
{
	open_body(m);
	if (!check_name(m, y) || !check_name(m, a) || (b && !check_name(m, b)) || !check_dim(m, "channels", c) ||
	    !check_dim(m, "width", w))
		return;
	if (b)
		emit(m, "        tensor<fp16, [1, %d, 1, %d]> %s = %s(x = %s, y = %s)[name = string(\"%s\")];\n", c, w,
		     y, op, a, b, y);
	else
		emit(m, "        tensor<fp16, [1, %d, 1, %d]> %s = %s(x = %s)[name = string(\"%s\")];\n", c, w, y, op,
		     a, y);
}

void
ane_mil_add(struct ane_mil *m, const char *y, const char *a, const char *b, int c, int w)
{
	binary(m, "add", y, a, b, c, w);
}

void
ane_mil_mul(struct ane_mil *m, const char *y, const char *a, const char *b, int c, int w)
{
	binary(m, "mul", y, a, b, c, w);
}

void
ane_mil_sigmoid(struct ane_mil *m, const char *y, const char *x, int c, int w)
{
	binary(m, "sigmoid", y, x, NULL, c, w);
}

char *
ane_mil_finish(struct ane_mil *m, const char *const *outs, int nout, char *err)
{
	if (!m->body && !m->failed)
		fail(m, "program has no ops");
	if (nout < 1)
		fail(m, "program has no outputs");
	if (m->nblob > ANE_MIL_MAX_BLOBFILES)
		fail(m, "%d BLOBFILE consts, the ANE accepts at most %d", m->nblob, ANE_MIL_MAX_BLOBFILES);
	emit(m, "    } -> (");
	for (int i = 0; i < nout; i++)
		if (check_name(m, outs[i]))
			emit(m, "%s%s", i ? ", " : "", outs[i]);
	emit(m, ");\n}\n");
	if (m->failed) {
		ad_err(err, "mil: %s", m->err);
		ane_mil_free(m);
		return NULL;
	}
	char *s = m->buf;
	m->buf = NULL;
	ane_mil_free(m);
	return s;
}

// conv number k (0-based) of a kernel whose convs are all [cout_j][cin_j]:
// its chunks are the k-th (fp16) or the 2k-th and 2k+1-th (int8) of off
static void
conv_w(struct ane_mil *m, enum ane_wfmt f, const char *y, const char *x, int cout, int cin, int w, const uint64_t *off,
       int k)
{
	if (f == ANE_W_INT8)
		ane_mil_conv_i8(m, y, x, cout, cin, w, off[2 * k], off[2 * k + 1]);
	else if (f == ANE_W_LUT4)
		ane_mil_conv_l4(m, y, x, cout, cin, w, off[3 * k], off[3 * k + 1], off[3 * k + 2]);
	else
		ane_mil_conv(m, y, x, cout, cin, w, off[k]);
}

// the chunk sizes of n convs of [cout][cin] each, in format f
static void
chunk_offsets(enum ane_wfmt f, const int *cout, const int *cin, int n, uint64_t *off)
{
	uint64_t bytes[9];
	int nb = 0;
	for (int k = 0; k < n; k++) {
		uint64_t co = cout[k] > 0 ? (uint64_t)cout[k] : 0, ci = cin[k] > 0 ? (uint64_t)cin[k] : 0;
		if (f == ANE_W_LUT4) {
			bytes[nb++] = (co * ci + 1) / 2;
			bytes[nb++] = (uint64_t)ane_mil_l4_tables((int)co) * 16 * 2;
			bytes[nb++] = co * 2;
		} else if (f == ANE_W_INT8) {
			bytes[nb++] = co * ci;
			bytes[nb++] = co * 2;
		} else {
			bytes[nb++] = co * ci * 2;
		}
	}
	ane_blob_offsets(bytes, nb, off);
}

char *
ane_mil_proj_w(int cin, int cout, int width, enum ane_wfmt f, char *err)
{
	struct ane_mil m;
	static const char *const out[] = {"o0"};
	uint64_t off[3];
	chunk_offsets(f, &cout, &cin, 1, off);
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", cin, width);
	conv_w(&m, f, "o0", "i0", cout, cin, width, off, 0);
	return ane_mil_finish(&m, out, 1, err);
}

char *
ane_mil_ffn_w(int hidden, int inter, int width, enum ane_wfmt f, char *err)
{
	struct ane_mil m;
	static const char *const out[] = {"o0"};
	const int co[3] = {inter, inter, hidden}, ci[3] = {hidden, hidden, inter};
	uint64_t off[9];
	chunk_offsets(f, co, ci, 3, off);
	ane_mil_init(&m);
	ane_mil_input(&m, "i0", hidden, width);
	conv_w(&m, f, "t0", "i0", inter, hidden, width, off, 0);
	conv_w(&m, f, "t1", "i0", inter, hidden, width, off, 1);
	ane_mil_sigmoid(&m, "t2", "t0", inter, width);
	ane_mil_mul(&m, "t3", "t0", "t2", inter, width);
	ane_mil_mul(&m, "t4", "t3", "t1", inter, width);
	conv_w(&m, f, "o0", "t4", hidden, inter, width, off, 2);
	return ane_mil_finish(&m, out, 1, err);
}

char *
ane_mil_proj(int cin, int cout, int width, char *err)
{
	return ane_mil_proj_w(cin, cout, width, ANE_W_FP16, err);
}

char *
ane_mil_ffn(int hidden, int inter, int width, char *err)
{
	return ane_mil_ffn_w(hidden, inter, width, ANE_W_FP16, err);
}
