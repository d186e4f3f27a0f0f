#include "build.h"
#include "gguf.h"
#include "hugemem.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blob.h"
#include "clock.h"
#include "dequant.h"
#include "fp16.h"
#include "log.h"
#include "mil.h"
#include "wtype.h"
#ifdef ANEDVD_ANE
#include "backend-ane.h"
#endif

// fp32 scratch for dequantising a block of rows
#define SCRATCH_VALUES ((size_t)1 << 20)
#define L4_GROUP 64 // rows of a 4-bit matrix's table, when it has more than one (mil.h)
// the largest blob written to memory for the emu (larger ones go to files)
#define BLOB_MEM_MAX ((size_t)32 << 20)

struct ane_builder {
	char backend[16];
	int ane; // the ane backend (else emu)
	struct emu *emu;
	char tmp[4000]; // where each kernel's directory is made
	int keep;
	uint32_t compiles;
	int warned;
	float *scratch;
	const struct model *model; // ane_set_build's: its pages are dropped once written into a blob
	// the emu's blobs, written here rather than to files the emu maps
	// back: a first start wrote (and zeroed, and dropped) as many bytes of
	// page cache as the weights for them
	struct ane_blob_mem blob;
	int files; // blobs to files all the same (the ane backend, kept files, tests)
};

static uint64_t
now_us(void)
{
	return ad_now_ns() / 1000u;
}

struct ane_builder *
ane_builder_new(const struct ane_build_opts *o, char *err)
{
	const char *be = o && o->backend ? o->backend : "emu";
	if (strcmp(be, "emu") != 0) {
		if (strcmp(be, "ane") != 0) {
			ad_err(err, "unknown backend '%s' (emu or ane)", be);
			return NULL;
		}
#ifdef ANEDVD_ANE
		if (ane_dev_init(err)) {
			ad_err_prefix(err, "backend ane");
			return NULL;
		}
#else
		ad_err(err, ANE_NO_BACKEND_MSG);
		return NULL;
#endif
	}
	struct ane_builder *b = calloc(1, sizeof *b);
	if (!b || !(b->scratch = malloc(SCRATCH_VALUES * sizeof(float)))) {
		free(b);
		ad_err(err, "builder: out of memory");
		return NULL;
	}
	snprintf(b->backend, sizeof b->backend, "%s", be);
	b->ane = strcmp(be, "ane") == 0;
	const char *keep = getenv("ANEDVD_KEEP_ANE_FILES");
	b->keep = keep && strcmp(keep, "1") == 0;
	b->files = b->ane || b->keep || (o && o->blob_files);
	const char *tmp = getenv("TMPDIR");
	snprintf(b->tmp, sizeof b->tmp, "%s", tmp && *tmp ? tmp : "/tmp");
	struct emu_opts eo = {.threads = o ? o->threads : 0};
	b->emu = emu_open(&eo, err);
	if (!b->emu) {
		free(b->scratch);
		free(b);
		return NULL;
	}
	return b;
}

void
ane_builder_free(struct ane_builder *b)
{
	if (!b)
		return;
	emu_close(b->emu);
	ane_blob_mem_free(&b->blob);
	free(b->scratch);
	free(b);
}

struct emu *
ane_builder_emu(const struct ane_builder *b)
{
	return b->emu;
}

const char *
ane_builder_backend(const struct ane_builder *b)
{
	return b->backend;
}

uint32_t
ane_builder_compiles(const struct ane_builder *b)
{
	return b->compiles;
}

void
ane_kernel_free(struct ane_kernel *k)
{
	if (k && k->ek)
		emu_kernel_free(k->ek);
#ifdef ANEDVD_ANE
	if (k && k->dev)
		ane_dev_free(k->dev);
#endif
	if (k)
		memset(k, 0, sizeof *k);
}

const struct ane_layout *
ane_kernel_input_layout(const struct ane_kernel *k)
{
#ifdef ANEDVD_ANE
	if (k->dev)
		return ane_dev_input_layout(k->dev);
#endif
	return emu_input_layout(k->ek, 0);
}

size_t
ane_kernel_input_capacity(const struct ane_kernel *k)
{
#ifdef ANEDVD_ANE
	if (k->dev)
		return ane_dev_input_capacity(k->dev);
#endif
	return emu_input_capacity(k->ek);
}

size_t
ane_kernel_output_capacity(const struct ane_kernel *k)
{
#ifdef ANEDVD_ANE
	if (k->dev)
		return ane_dev_output_capacity(k->dev);
#endif
	return emu_output_capacity(k->ek);
}

// a row's largest |w| as the largest of the bit patterns without their
// sign, in order for floats >= 0: a loop the compiler vectorises; an
// infinity or a NaN makes it 0x7f800000 or more
static uint32_t
row_absmax_bits(const float *w, size_t n)
{
	uint32_t m = 0;
	for (size_t i = 0; i < n; i++) {
		uint32_t u;
		memcpy(&u, &w[i], sizeof u);
		u &= 0x7fffffffu;
		m = u > m ? u : m;
	}
	return m;
}

int
ane_quant_row(const float *w, size_t n, int8_t *q, uint16_t *scale, char *err)
{
	uint32_t m = row_absmax_bits(w, n);
	if (m >= 0x7f800000u) // an infinity or a NaN
		for (size_t i = 0; i < n; i++)
			if (!isfinite(w[i]))
				return ad_err(err, "weight %zu of a row is %g", i, (double)w[i]);
	float amax;
	memcpy(&amax, &m, sizeof amax);
	uint16_t h = ad_f32_to_fp16(amax / 127.0f);
	float s = ad_fp16_to_f32(h);
	if (!isfinite(s))
		return ad_err(err, "a row's largest weight %g is beyond fp16 x 127", (double)amax);
	*scale = h;
	if (s == 0) { // an all-zero row (or one below fp16's smallest step)
		memset(q, 0, n);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		float v = rintf(w[i] / s); // the current rounding mode: nearest, ties to even
		q[i] = (int8_t)(v > 127 ? 127 : v < -127 ? -127 : v);
	}
	return 0;
}

void
ane_qerr_row(struct ane_qerr *e, const float *w, const int8_t *q, uint16_t scale, size_t n)
{
	float s = ad_fp16_to_f32(scale);
	double amax = 0, mx = 0;
	for (size_t i = 0; i < n; i++) {
		double d = fabs((double)s * q[i] - (double)w[i]);
		if (fabs(w[i]) > amax)
			amax = fabs(w[i]);
		if (d > mx)
			mx = d;
		e->sum_sq_err += d * d;
		e->sum_sq_w += (double)w[i] * w[i];
	}
	e->n += n;
	if (mx > e->max_abs)
		e->max_abs = mx;
	if (amax > 0 && mx / amax > e->max_rel_row)
		e->max_rel_row = mx / amax;
}

double
ane_qerr_rms_rel(const struct ane_qerr *e)
{
	return e->sum_sq_w > 0 ? sqrt(e->sum_sq_err / e->sum_sq_w) : 0;
}

// the rows of part p, a block at a time, handed to fn(ctx, ws, k, n): k rows
// of n values, F16/F32 rows as the file stores them and others dequantised
// to fp32 into scratch (raw 1), or every type's rows as stored (raw 2: fn
// dequantises). Each block's model pages then leave this process
// (kc_model_drop, when m is the model they belong to), so a large tensor is
// never in memory whole
static int
each_rows(const struct model *m, float *scratch, const struct ane_part *p, int raw,
          int (*fn)(void *ctx, const struct ane_wsrc *ws, size_t k, size_t n, char *err), void *ctx, char *err)
{
	const struct model_tensor *t = p->t;
	size_t rb;
	if (ad_type_row_bytes(t->type, t->ne[0], &rb) != 0)
		return ad_err(err, "%s: rows of %lld %s values", t->name, (long long)t->ne[0],
		              ad_type_name(t->type) ? ad_type_name(t->type) : "?");
	if ((uint64_t)(p->row0 + p->rows) * rb > t->nbytes)
		return ad_err(err, "%s: rows beyond the tensor's %zu bytes", t->name, t->nbytes);
	const uint8_t *src = (const uint8_t *)t->data + (size_t)p->row0 * rb;
	const size_t n = (size_t)t->ne[0];
	size_t block = SCRATCH_VALUES / n;
	if (block == 0) // a row of more than a million values: no model has one
		return ad_err(err, "%s: rows of %zu values are too long", t->name, n);
	if (block >= L4_GROUP) // whole groups of a 4-bit matrix's 64 rows (l4_rows)
		block -= block % L4_GROUP;
	for (int64_t r = 0; r < p->rows; r += (int64_t)block) {
		size_t k = (size_t)(p->rows - r) < block ? (size_t)(p->rows - r) : block;
		const uint8_t *rows = src + (size_t)r * rb;
		struct ane_wsrc ws = {rows, (int)t->type, k * n};
		if (raw == 1 && t->type != AD_TYPE_F16 && t->type != AD_TYPE_F32) {
			if (ad_dequant(t->type, rows, scratch, (int64_t)(k * n), err))
				return ad_err_prefix(err, "%s", t->name);
			ws = (struct ane_wsrc){scratch, AD_TYPE_F32, k * n};
		}
		if (fn(ctx, &ws, k, n, err))
			return ad_err_prefix(err, "%s", t->name);
		if (m)
			kc_model_drop(m, rows, k * rb);
	}
	return 0;
}

// rows into the open fp16 chunk (the writer converts)
static int
blob_rows(void *ctx, const struct ane_wsrc *ws, size_t k, size_t n, char *err)
{
	return ane_blob_put(ctx, ws, err);
}

// Quantising rows into the open int8 chunk (or, with qerr, summing their
// error); their scales are collected. A block of rows comes as the file
// stores it (each_rows raw 2) and is dequantised and quantised in tasks of
// whole rows on the emu's pool, into scratch and q; then its bytes go to
// the chunk in order. Each row's bytes depend on that row alone, so the
// blob is the same on any thread count (a first start of Qwen2.5-0.5B
// Q8_0 spent 1.2 s here on one thread).
#define QPUT_TASKS 64 // the most tasks a block is quantised in

// what a quantiser's task (int8, 4-bit) ends with: its first member
struct rtask {
	int rc;
	char err[AD_ERRLEN];
};

// how many tasks a block of k rows is quantised in: at least 16 rows a
// task, 4 a thread at most (even tails, few jobs), max at most
static size_t
row_tasks(struct emu *emu, size_t k, size_t max)
{
	size_t nt = emu ? (size_t)emu_nthreads(emu) * 4 : 1;
	if (nt > (k + 15) / 16)
		nt = (k + 15) / 16;
	return nt > max ? max : nt;
}

// fn's tasks [0, nt) on the pool (without one, in order here), then the
// first failure's message: tasks holds nt of them, stride bytes apart,
// each beginning with its struct rtask
static int
run_row_tasks(struct emu *emu, void (*fn)(void *arg, size_t task), void *arg, size_t nt, const void *tasks,
              size_t stride, char *err)
{
	if (emu && nt > 1)
		emu_parallel(emu, fn, arg, nt);
	else
		for (size_t i = 0; i < nt; i++)
			fn(arg, i);
	for (size_t i = 0; i < nt; i++) {
		const struct rtask *o = (const struct rtask *)(const void *)((const char *)tasks + i * stride);
		if (o->rc) {
			snprintf(err, AD_ERRLEN, "%s", o->err);
			return -1;
		}
	}
	return 0;
}

struct qput {
	struct ane_blob_writer *w; // or NULL (qerr)
	struct emu *emu;           // or NULL: one thread
	float *scratch;            // SCRATCH_VALUES
	int8_t *q;                 // SCRATCH_VALUES
	uint16_t *scales;          // of the whole matrix
	size_t nrows;
	struct ane_qerr *qerr; // or NULL
	// the block at hand, for the tasks
	const struct ane_wsrc *ws;
	size_t k, n, per, rb;
	struct rtask *t; // QPUT_TASKS
};

// row r of the block in fp32: as stored (F32) or dequantised into scratch
static const float *
qput_row(const struct qput *qp, size_t r)
{
	if (qp->ws->type == AD_TYPE_F32)
		return (const float *)(const void *)((const uint8_t *)qp->ws->data + r * qp->rb);
	return qp->scratch + r * qp->n;
}

// rows [i * per, (i + 1) * per) of the block
static void
qput_task(void *arg, size_t i)
{
	struct qput *qp = arg;
	struct rtask *t = &qp->t[i];
	size_t r0 = i * qp->per, r1 = r0 + qp->per < qp->k ? r0 + qp->per : qp->k;
	const size_t n = qp->n;
	t->rc = 0;
	if (r0 >= r1)
		return;
	if (qp->ws->type != AD_TYPE_F32 &&
	    ad_dequant((uint32_t)qp->ws->type, (const uint8_t *)qp->ws->data + r0 * qp->rb, qp->scratch + r0 * n,
	               (int64_t)((r1 - r0) * n), t->err)) {
		t->rc = -1;
		return;
	}
	for (size_t r = r0; r < r1; r++)
		if (ane_quant_row(qput_row(qp, r), n, qp->q + r * n, &qp->scales[qp->nrows + r], t->err)) {
			t->rc = -1;
			return;
		}
}

static int
qput_rows(void *ctx, const struct ane_wsrc *ws, size_t k, size_t n, char *err)
{
	struct qput *qp = ctx;
	if (ad_type_row_bytes((uint32_t)ws->type, (int64_t)n, &qp->rb) != 0)
		return ad_err(err, "rows of %zu %s values", n, ad_type_name((uint32_t)ws->type));
	const size_t nt = row_tasks(qp->emu, k, QPUT_TASKS);
	qp->ws = ws;
	qp->k = k;
	qp->n = n;
	qp->per = (k + nt - 1) / nt;
	if (run_row_tasks(qp->emu, qput_task, qp, nt, qp->t, sizeof *qp->t, err))
		return -1;
	if (qp->qerr)
		for (size_t r = 0; r < k; r++)
			ane_qerr_row(qp->qerr, qput_row(qp, r), qp->q + r * n, qp->scales[qp->nrows + r], n);
	qp->nrows += k;
	return qp->w ? ane_blob_put_i8(qp->w, qp->q, k * n, err) : 0;
}

// one int8 matrix from parts [j0, j1) (rows stacked): the int8 chunk, then
// the fp16 scale chunk; with w NULL only the error is summed into qerr.
// scratch: SCRATCH_VALUES floats; emu: the pool to quantise on, or NULL
static int
put_i8_matrix(const struct model *m, float *scratch, struct emu *emu, struct ane_blob_writer *w,
              const struct ane_part *parts, int j0, int j1, struct ane_qerr *qerr, char *err)
{
	size_t rows = 0, n = (size_t)parts[j0].t->ne[0];
	for (int j = j0; j < j1; j++)
		rows += (size_t)parts[j].rows;
	struct qput qp = {.w = w,
	                  .emu = emu,
	                  .scratch = scratch,
	                  .q = malloc(SCRATCH_VALUES),
	                  .scales = malloc(rows * 2),
	                  .qerr = qerr,
	                  .t = calloc(QPUT_TASKS, sizeof(struct rtask))};
	int rc = -1;
	if (!qp.q || !qp.scales || !qp.t) {
		ad_err(err, "out of memory");
		goto out;
	}
	if (w && ane_blob_begin_i8(w, rows * n, NULL, err))
		goto out;
	for (int j = j0; j < j1; j++)
		if (each_rows(m, scratch, &parts[j], 2, qput_rows, &qp, err))
			goto out;
	if (w) {
		struct ane_wsrc ws = {qp.scales, AD_TYPE_F16, rows};
		if (ane_blob_end(w, err) || ane_blob_add(w, &ws, NULL, err))
			goto out;
	}
	rc = 0;
out:
	free(qp.q);
	free(qp.scales);
	free(qp.t);
	return rc;
}

// ---- 4-bit palettised weights (ANE_W_LUT4)

void
ane_l4_tables(const double *hist, size_t nbins, float *tab)
{
	// the bins' centres over [-1, 1]; 16 starting centroids at the
	// quantiles (k + 1/2) / 16 of the histogram
	double tot = 0, c[16];
	for (size_t b = 0; b < nbins; b++)
		tot += hist[b];
	const double step = 2.0 / (double)nbins;
	if (tot <= 0) {
		for (int k = 0; k < 16; k++)
			tab[k] = ad_fp16_to_f32(ad_f32_to_fp16((float)(-1.0 + (k + 0.5) / 8.0)));
		return;
	}
	double acc = 0;
	size_t b = 0;
	for (int k = 0; k < 16; k++) {
		double want = tot * (k + 0.5) / 16;
		while (b + 1 < nbins && acc + hist[b] < want)
			acc += hist[b++];
		c[k] = -1.0 + (b + 0.5) * step;
	}
	// Lloyd's steps over the bins (sorted, so each centroid takes the bins
	// between the midpoints to its neighbours); a centroid left with none
	// stays where it is
	for (int it = 0; it < 40; it++) {
		double sw[16] = {0}, sx[16] = {0};
		int k = 0;
		for (b = 0; b < nbins; b++) {
			double x = -1.0 + (b + 0.5) * step;
			while (k < 15 && x > (c[k] + c[k + 1]) / 2)
				k++;
			sw[k] += hist[b];
			sx[k] += hist[b] * x;
		}
		double moved = 0;
		for (k = 0; k < 16; k++)
			if (sw[k] > 0) {
				double v = sx[k] / sw[k];
				moved += fabs(v - c[k]);
				c[k] = v;
			}
		for (k = 1; k < 16; k++) // keep them sorted (ties from empty clusters)
			for (int j = k; j > 0 && c[j] < c[j - 1]; j--) {
				double t = c[j];
				c[j] = c[j - 1];
				c[j - 1] = t;
			}
		if (moved < 1e-7)
			break;
	}
	for (int k = 0; k < 16; k++)
		tab[k] = ad_fp16_to_f32(ad_f32_to_fp16((float)c[k]));
}

unsigned
ane_l4_index(const float *tab, float u)
{
	unsigned q = 0;
	for (int k = 0; k < 15; k++)
		q += u > (tab[k] + tab[k + 1]) * 0.5f;
	return q;
}

#define L4_BINS 1024
#define L4_TASKS 64 // the most tasks a block is quantised in

// Quantising a matrix to 4-bit palettised weights, in two passes over its
// rows: the first takes each row's scale (its largest |w|, in fp16) and a
// histogram of w / scale for each table's rows, whose k-means gives the
// table (ane_l4_tables); the second gives each weight its entry
// (ane_l4_index), the rows on the pool's threads in both.
struct l4put {
	size_t n, rows, per; // values a row, rows, rows a table
	size_t row0;         // the block's first row in the matrix
	int pass;
	int single; // both passes on each block (each table's rows in one block): pass 1 reuses its dequantised rows
	struct emu *emu;        // or NULL: one thread
	float *scratch;         // SCRATCH_VALUES: the block dequantised, by the tasks
	size_t rb;              // bytes of a row as stored
	uint16_t *scales;       // rows
	double *hist;           // tables * L4_BINS, and a table's more for each task when one table takes all rows
	struct l4count *counts; // L4_TASKS: each task's on their way to hist
	float *tab;             // tables * 16
	float *buf;             // L4_TASKS rows in fp32 (fp16 sources)
	uint8_t *q;             // the block's indices, one a byte (SCRATCH_VALUES)
	uint8_t *out;           // the block's indices packed
	uint8_t carry;          // an odd element count's last index, for the next block
	uint64_t el;            // elements packed so far
	const struct ane_wsrc *ws;
	size_t k, nt;            // the block's rows, tasks
	size_t at[L4_TASKS + 1]; // task i's rows: [at[i], at[i + 1])
	struct ane_blob_writer *w;
	struct ane_qerr *qerr;
	struct l4task {
		struct rtask o;
		struct ane_qerr e;
	} * t; // L4_TASKS
};

static const float *
l4_row(struct l4put *lp, size_t r, size_t task)
{
	if (lp->ws->type == AD_TYPE_F32)
		return (const float *)lp->ws->data + r * lp->n;
	if (lp->ws->type != AD_TYPE_F16)
		return lp->scratch + r * lp->n;
	float *b = lp->buf + task * lp->n;
	ad_fp16_to_f32_row((const uint16_t *)lp->ws->data + r * lp->n, b, lp->n);
	return b;
}

// a task's counts of the bins of w / scale, on their way to a table's
// histogram (doubles): in four interleaved sets, so that a run of weights
// in one bin does not wait on its own increments
struct l4count {
	uint32_t c[4][L4_BINS];
	double *to; // the histogram they go to, or NULL
};

static void
l4_count_flush(struct l4count *lc)
{
	if (lc->to)
		for (size_t b = 0; b < L4_BINS; b++) {
			lc->to[b] += (double)lc->c[0][b] + lc->c[1][b] + lc->c[2][b] + lc->c[3][b];
			lc->c[0][b] = lc->c[1][b] = lc->c[2][b] = lc->c[3][b] = 0;
		}
	lc->to = NULL;
}

// n weights of a row scaled by s (> 0) into lc's bins: the bins worked out
// 64 at a time in a loop the compiler vectorises, then counted (this took
// 60% of the quantiser's time as one scalar loop into the doubles). The
// bin of w / s clamped to [-1, 1], as the bin clamped to [0, L4_BINS):
// the same bins, with no branch on a float (|w / s| is below 2: s is the
// row's largest |w| in fp16)
static void
l4_count_row(struct l4count *lc, const float *w, size_t n, float s)
{
	int bin[64];
	for (size_t j0 = 0; j0 < n; j0 += 64) {
		const size_t m = n - j0 < 64 ? n - j0 : 64;
		for (size_t k = 0; k < m; k++) {
			int b = (int)((w[j0 + k] / s + 1.0f) * (0.5f * (L4_BINS - 1)) + 0.5f);
			bin[k] = b < 0 ? 0 : b > L4_BINS - 1 ? L4_BINS - 1 : b;
		}
		for (size_t k = 0; k < m; k++)
			lc->c[k & 3][bin[k]]++;
	}
}

// rows [i * rpt, (i + 1) * rpt) of the block
static void
l4_task(void *arg, size_t i)
{
	struct l4put *lp = arg;
	struct rtask *t = &lp->t[i].o;
	struct ane_qerr *qe = &lp->t[i].e;
	const size_t n = lp->n, r0 = lp->at[i], r1 = lp->at[i + 1];
	t->rc = 0;
	struct l4count *lc = lp->pass == 0 ? lp->counts + i : NULL;
	if (r0 < r1 && lp->ws->type != AD_TYPE_F32 && lp->ws->type != AD_TYPE_F16 && !(lp->single && lp->pass == 1) &&
	    ad_dequant((uint32_t)lp->ws->type, (const uint8_t *)lp->ws->data + r0 * lp->rb, lp->scratch + r0 * n,
	               (int64_t)((r1 - r0) * n), t->err)) {
		t->rc = -1;
		return;
	}
	for (size_t r = r0; r < r1; r++) {
		const float *wr = l4_row(lp, r, i);
		const size_t row = lp->row0 + r, g = row / lp->per;
		if (lp->pass == 0) {
			uint32_t mb = row_absmax_bits(wr, n);
			if (mb >= 0x7f800000u) { // an infinity or a NaN
				for (size_t j = 0; j < n; j++)
					if (!isfinite(wr[j])) {
						t->rc = ad_err(t->err, "weight %zu of row %zu is %g", j, row,
						               (double)wr[j]);
						break;
					}
				l4_count_flush(lc);
				return;
			}
			float amax;
			memcpy(&amax, &mb, sizeof amax);
			uint16_t h = ad_f32_to_fp16(amax);
			if (!isfinite(ad_fp16_to_f32(h))) {
				t->rc = ad_err(t->err, "a row's largest weight %g is beyond fp16", (double)amax);
				l4_count_flush(lc);
				return;
			}
			lp->scales[row] = h;
			const float s = ad_fp16_to_f32(h);
			// one table for all rows: a histogram of this task's own
			double *hg = lp->per == lp->rows ? lp->hist + (1 + i) * L4_BINS : lp->hist + g * L4_BINS;
			if (hg != lc->to) {
				l4_count_flush(lc);
				lc->to = hg;
			}
			if (s == 0) {
				hg[L4_BINS / 2] += (double)n;
				continue;
			}
			l4_count_row(lc, wr, n, s);
			continue;
		}
		const float s = ad_fp16_to_f32(lp->scales[row]), *tb = lp->tab + g * 16;
		uint8_t *q = lp->q + r * n;
		// ane_l4_index, in a loop the compiler vectorises
		float mid[15];
		for (int c = 0; c < 15; c++)
			mid[c] = (tb[c] + tb[c + 1]) * 0.5f;
		const float sd = s > 0 ? s : 1.0f, sz = s > 0 ? 1.0f : 0.0f;
		for (size_t j = 0; j < n; j++) {
			const float u = wr[j] / sd * sz;
			unsigned c = 0;
			for (int m = 0; m < 15; m++)
				c += u > mid[m];
			q[j] = (uint8_t)c;
		}
		if (lp->qerr) {
			double amax = 0, mx = 0;
			for (size_t j = 0; j < n; j++) {
				double d = fabs((double)s * tb[q[j]] - (double)wr[j]);
				amax = fabs(wr[j]) > amax ? fabs(wr[j]) : amax;
				mx = d > mx ? d : mx;
				qe->sum_sq_err += d * d;
				qe->sum_sq_w += (double)wr[j] * wr[j];
			}
			qe->n += n;
			qe->max_abs = mx > qe->max_abs ? mx : qe->max_abs;
			if (amax > 0 && mx / amax > qe->max_rel_row)
				qe->max_rel_row = mx / amax;
		}
	}
	if (lc)
		l4_count_flush(lc);
}

static int
l4_rows(void *ctx, const struct ane_wsrc *ws, size_t k, size_t n, char *err)
{
	struct l4put *lp = ctx;
	if (ad_type_row_bytes((uint32_t)ws->type, (int64_t)n, &lp->rb) != 0)
		return ad_err(err, "rows of %zu %s values", n, ad_type_name((uint32_t)ws->type));
	// tasks of whole tables' rows (each table's histogram is one task's)
	const size_t nt = row_tasks(lp->emu, k, L4_TASKS);
	// the tasks split where a table's rows start (matrix rows), so that
	// each table's histogram is one task's (one table for all: each task
	// has its own)
	lp->at[0] = 0;
	for (size_t i = 1; i < nt; i++) {
		size_t r = lp->row0 + k * i / nt;
		if (lp->per < lp->rows)
			r = (r + lp->per - 1) / lp->per * lp->per;
		r -= lp->row0;
		lp->at[i] = r > k ? k : r < lp->at[i - 1] ? lp->at[i - 1] : r;
	}
	lp->at[nt] = k;
	lp->ws = ws;
	lp->k = k;
	lp->nt = nt;
	// one pass, or in single mode the first, the block's tables, the second
	const int last = lp->pass;
	for (int pass = lp->single ? 0 : last; pass <= last; pass++) {
		if (lp->single) {
			lp->pass = pass;
			for (size_t g = lp->row0 / lp->per; pass == 1 && g < (lp->row0 + k) / lp->per; g++)
				ane_l4_tables(lp->hist + g * L4_BINS, L4_BINS, lp->tab + g * 16);
		}
		if (run_row_tasks(lp->emu, l4_task, lp, lp->nt, lp->t, sizeof *lp->t, err))
			return -1;
	}
	lp->row0 += k;
	if (lp->pass == 0)
		return 0;
	// pack the indices two a byte, element 0 of the matrix in a low nibble:
	// an odd one left by the block before first, then pairs (a loop the
	// compiler vectorises), then an odd one for the next block
	size_t nb = 0, e = 0, ne = k * n;
	if (lp->el & 1 && ne) {
		lp->out[nb++] = (uint8_t)(lp->carry | lp->q[0] << 4);
		e = 1;
	}
	const size_t pairs = (ne - e) / 2;
	const uint8_t *qe = lp->q + e;
	uint8_t *ob = lp->out + nb;
	for (size_t i = 0; i < pairs; i++)
		ob[i] = (uint8_t)(qe[2 * i] | qe[2 * i + 1] << 4);
	nb += pairs;
	e += 2 * pairs;
	if (e < ne)
		lp->carry = lp->q[e];
	lp->el += ne;
	return lp->w && nb ? ane_blob_put_u4(lp->w, lp->out, nb, err) : 0;
}

// one 4-bit matrix from parts [j0, j1) (rows stacked): the indices, the
// tables and the scales (mil.h); with w NULL only the error is summed into
// qerr. scratch: SCRATCH_VALUES floats; emu: the pool, or NULL
static int
put_l4_matrix(const struct model *m, float *scratch, struct emu *emu, struct ane_blob_writer *w,
              const struct ane_part *parts, int j0, int j1, struct ane_qerr *qerr, char *err)
{
	size_t rows = 0, n = (size_t)parts[j0].t->ne[0];
	for (int j = j0; j < j1; j++)
		rows += (size_t)parts[j].rows;
	const size_t ntab = (size_t)ane_mil_l4_tables((int)rows);
	// one table for all rows: a histogram for each task besides
	const size_t nhist = ntab == 1 ? 1 + L4_TASKS : ntab;
	struct l4put lp = {.n = n,
	                   .rows = rows,
	                   .per = rows / ntab,
	                   .emu = emu,
	                   .scratch = scratch,
	                   .scales = malloc(rows * 2),
	                   .hist = calloc(nhist * L4_BINS, sizeof(double)),
	                   .tab = malloc(ntab * 16 * sizeof(float)),
	                   .buf = malloc(L4_TASKS * n * sizeof(float)),
	                   .q = malloc(SCRATCH_VALUES),
	                   .out = malloc(SCRATCH_VALUES / 2 + 1),
	                   .w = w,
	                   .qerr = qerr,
	                   .t = calloc(L4_TASKS, sizeof(struct l4task)),
	                   .counts = calloc(L4_TASKS, sizeof(struct l4count))};
	uint16_t *th = malloc(ntab * 16 * 2);
	int rc = -1;
	if (!lp.scales || !lp.hist || !lp.tab || !lp.buf || !lp.q || !lp.out || !lp.t || !lp.counts || !th) {
		ad_err(err, "out of memory");
		goto out;
	}
	// a table for each 64 rows, each part's rows whole tables and a block
	// of rows (each_rows) whole tables: both passes on each block, the
	// second over the rows the first dequantised (the first start of a
	// Qwen2.5-0.5B Q4_0 file spent a quarter of its time dequantising)
	lp.single = ntab > 1 && lp.per == L4_GROUP && SCRATCH_VALUES / n >= L4_GROUP;
	for (int j = j0; j < j1; j++)
		lp.single &= parts[j].rows % L4_GROUP == 0;
	if (!lp.single) {
		// the first pass reads the rows without dropping their pages: the
		// second reads them again
		for (int j = j0; j < j1; j++)
			if (each_rows(NULL, scratch, &parts[j], 2, l4_rows, &lp, err))
				goto out;
		if (ntab == 1)
			for (size_t i = 1; i < nhist; i++)
				for (size_t b = 0; b < L4_BINS; b++)
					lp.hist[b] += lp.hist[i * L4_BINS + b];
		for (size_t g = 0; g < ntab; g++)
			ane_l4_tables(lp.hist + g * L4_BINS, L4_BINS, lp.tab + g * 16);
	}
	lp.pass = 1;
	lp.row0 = 0;
	if (w && ane_blob_begin_u4(w, rows * n, NULL, err))
		goto out;
	for (int j = j0; j < j1; j++)
		if (each_rows(m, scratch, &parts[j], 2, l4_rows, &lp, err))
			goto out;
	if (qerr)
		for (size_t i = 0; i < L4_TASKS; i++) {
			const struct ane_qerr *e = &lp.t[i].e;
			qerr->n += e->n;
			qerr->sum_sq_err += e->sum_sq_err;
			qerr->sum_sq_w += e->sum_sq_w;
			qerr->max_abs = e->max_abs > qerr->max_abs ? e->max_abs : qerr->max_abs;
			qerr->max_rel_row = e->max_rel_row > qerr->max_rel_row ? e->max_rel_row : qerr->max_rel_row;
		}
	if (w) {
		if (lp.el & 1 && ane_blob_put_u4(w, &lp.carry, 1, err))
			goto out;
		for (size_t i = 0; i < ntab * 16; i++)
			th[i] = ad_f32_to_fp16(lp.tab[i]);
		if (ane_blob_end(w, err) ||
		    ane_blob_add(w, &(struct ane_wsrc){th, AD_TYPE_F16, ntab * 16}, NULL, err) ||
		    ane_blob_add(w, &(struct ane_wsrc){lp.scales, AD_TYPE_F16, rows}, NULL, err))
			goto out;
	}
	rc = 0;
out:
	free(lp.scales), free(lp.hist), free(lp.tab), free(lp.buf), free(lp.q), free(lp.out), free(lp.t), free(th);
	free(lp.counts);
	return rc;
}

int
ane_qerr_plan(const struct ane_plan *p, struct ane_qerr *e, char *err)
{
	memset(e, 0, sizeof *e);
	float *scratch = malloc(SCRATCH_VALUES * sizeof(float));
	if (!scratch)
		return ad_err(err, "out of memory");
	int rc = 0;
	for (int i = 0; i < p->n && !rc; i++) {
		const struct ane_pk *pk = &p->k[i];
		for (int j = 0; j < (pk->ff ? pk->nparts : 1) && !rc; j++) {
			const int j0 = pk->ff ? j : 0, j1 = pk->ff ? j + 1 : pk->nparts;
			rc = pk->wfmt == ANE_W_LUT4
			             ? put_l4_matrix(NULL, scratch, NULL, NULL, pk->parts, j0, j1, e, err)
			             : put_i8_matrix(NULL, scratch, NULL, NULL, pk->parts, j0, j1, e, err);
		}
	}
	free(scratch);
	return rc;
}

static void
count_compile(struct ane_builder *b)
{
	b->compiles++;
	if (b->compiles == ANE_COMPILE_WARN)
		ad_warn("%u compiles in this process: the ANE allows about %d per process", b->compiles,
		        ANE_COMPILE_BUDGET);
	if (b->compiles > ANE_COMPILE_BUDGET && !b->warned) {
		b->warned = 1;
		ad_warn("%u compiles: beyond the ANE's budget of about %d per process (%s backend)", b->compiles,
		        ANE_COMPILE_BUDGET, b->backend);
	}
}

// one kernel's directory, laid out as the ANE compiler reads it:
// <tmp>/anedvd-ane-<name>-XXXXXX/{model.mil, weights/w.bin}
struct kdir {
	char dir[4100], wdir[4120], blob[4140], mil[4120];
};

static int
kdir_make(struct ane_builder *b, struct kdir *d, const char *name, char *err)
{
	snprintf(d->dir, sizeof d->dir, "%s/anedvd-ane-%s-XXXXXX", b->tmp, name);
	if (!mkdtemp(d->dir))
		return ad_err(err, "temporary directory %s: %s", d->dir, strerror(errno));
	snprintf(d->wdir, sizeof d->wdir, "%s/weights", d->dir);
	snprintf(d->blob, sizeof d->blob, "%s/" ANE_MIL_WEIGHT_FILE, d->wdir);
	snprintf(d->mil, sizeof d->mil, "%s/model.mil", d->dir);
	if (mkdir(d->wdir, 0700) != 0) {
		int e = errno;
		rmdir(d->dir);
		return ad_err(err, "%s: %s", d->wdir, strerror(e));
	}
	return 0;
}

// remove the files (unless kept) and the directories
static void
kdir_done(struct ane_builder *b, struct kdir *d)
{
	if (b->keep) {
		ad_info("kept %s", d->dir);
		return;
	}
	unlink(d->blob);
	unlink(d->mil);
	rmdir(d->wdir);
	rmdir(d->dir);
}

// compile mil with the blob of d, then clean d up; d NULL: the blob in
// b->blob (the emu only)
static int
compile(struct ane_builder *b, const char *mil, struct kdir *d, struct ane_kernel *out, char *err)
{
	if (d && b->keep) {
		FILE *f = fopen(d->mil, "w");
		if (f) {
			fputs(mil, f);
			fclose(f);
		}
	}
#ifdef ANEDVD_ANE
	if (b->ane) {
		out->dev = ane_dev_compile(mil, ANE_MIL_WEIGHT_FILE, d->blob, err);
		kdir_done(b, d);
		if (!out->dev)
			return -1;
		count_compile(b);
		out->compile_us = ane_dev_compile_us(out->dev);
		out->weight_bytes = ane_dev_weight_bytes(out->dev);
		out->width = (int)ane_dev_width(out->dev);
		return 0;
	}
#endif
	struct emu_file file = {.name = ANE_MIL_WEIGHT_FILE};
	if (d)
		file.path = d->blob;
	else
		file.data = b->blob.data, file.len = b->blob.len;
	uint64_t t0 = now_us();
	out->ek = emu_compile(b->emu, mil, &file, 1, err);
	out->compile_us = now_us() - t0;
	if (d)
		kdir_done(b, d);
	if (!out->ek)
		return -1;
	count_compile(b);
	out->weight_bytes = emu_weight_bytes(out->ek);
	out->width = (int)emu_width(out->ek);
	return 0;
}

// the bytes of pk's blob, near enough to reserve them at once: the file
// header, and a chunk header and payload per part (int8: its scales too)
static size_t
blob_bytes(const struct ane_pk *pk)
{
	size_t n = ANE_BLOB_HEADER;
	for (int j = 0; j < pk->nparts; j++) {
		size_t rows = (size_t)pk->parts[j].rows, cin = (size_t)pk->parts[j].t->ne[0];
		n += 2 * ANE_BLOB_CHUNK_HEADER + rows * cin * (pk->wfmt == ANE_W_INT8 ? 1 : 2);
		if (pk->wfmt == ANE_W_INT8)
			n += rows * 2;
		if (pk->wfmt == ANE_W_LUT4) // less than counted above: the indices, tables and scales
			n += ANE_BLOB_CHUNK_HEADER + rows * 2 + 32 * (rows / 64 + 1);
	}
	return n;
}

static char *
kernel_mil(const struct ane_pk *pk, int width, char *err)
{
	return pk->ff > 0 ? ane_mil_ffn_w(pk->in_ch, pk->ff, width, pk->wfmt, err)
	                  : ane_mil_proj_w(pk->in_ch, pk->out_ch, width, pk->wfmt, err);
}

int
ane_build(struct ane_builder *b, const struct ane_pk *pk, int width, struct ane_kernel *out, char *err)
{
	memset(out, 0, sizeof *out);
	char name[64];
	if (pk->layer >= 0)
		snprintf(name, sizeof name, "%s%d", ane_kind_name(pk->kind), pk->layer);
	else
		snprintf(name, sizeof name, "%s%d", ane_kind_name(pk->kind), pk->chunk);
	uint64_t t0 = now_us();
	// the emu reads its blob from memory; the ANE's compiler, or a look at
	// the files (ANEDVD_KEEP_ANE_FILES), needs them on disk, and so does a
	// blob too large to hold whole beside the panels made of it: a file's
	// pages leave the emu as it repacks them (an LM head of 272 MB in
	// memory added as much to a first start's peak)
	struct kdir d, *dp = b->files || blob_bytes(pk) > BLOB_MEM_MAX ? &d : NULL;
	if (dp && kdir_make(b, dp, name, err))
		return -1;
	struct ane_blob_writer w;
	if (dp ? ane_blob_open(&w, d.blob, err) : ane_blob_open_mem(&w, &b->blob, blob_bytes(pk), err)) {
		if (dp)
			kdir_done(b, dp);
		return -1;
	}
	int fused = pk->ff > 0;
	if (pk->wfmt == ANE_W_LUT4) {
		int rc = 0;
		for (int j = 0; j < (fused ? pk->nparts : 1) && !rc; j++)
			rc = put_l4_matrix(b->model, b->scratch, b->emu, &w, pk->parts, fused ? j : 0,
			                   fused ? j + 1 : pk->nparts, NULL, err);
		if (rc)
			goto fail;
	}
	if (pk->wfmt == ANE_W_INT8) {
		int rc = 0;
		if (fused)
			for (int j = 0; j < pk->nparts && !rc; j++)
				rc = put_i8_matrix(b->model, b->scratch, b->emu, &w, pk->parts, j, j + 1, NULL, err);
		else
			rc = put_i8_matrix(b->model, b->scratch, b->emu, &w, pk->parts, 0, pk->nparts, NULL, err);
		if (rc)
			goto fail;
	}
	for (int i = 0; i < pk->nparts && pk->wfmt == ANE_W_FP16; i++) {
		if (fused || i == 0) {
			size_t n = 0;
			for (int j = fused ? i : 0; j < (fused ? i + 1 : pk->nparts); j++)
				n += (size_t)pk->parts[j].rows * (size_t)pk->parts[j].t->ne[0];
			if (ane_blob_begin(&w, n, NULL, err))
				goto fail;
		}
		if (each_rows(b->model, b->scratch, &pk->parts[i], 1, blob_rows, &w, err))
			goto fail;
		if (fused || i == pk->nparts - 1)
			if (ane_blob_end(&w, err))
				goto fail;
	}
	if (ane_blob_close(&w, err)) {
		if (dp)
			kdir_done(b, dp);
		return -1;
	}
	out->blob_us = now_us() - t0;
	char *mil = kernel_mil(pk, width, err);
	if (!mil) {
		if (dp)
			kdir_done(b, dp);
		return -1;
	}
	uint64_t blob_us = out->blob_us;
	int rc = compile(b, mil, dp, out, err);
	out->blob_us = blob_us;
	free(mil);
	out->in_ch = pk->in_ch;
	out->out_ch = pk->out_ch;
	return rc;
fail:
	ane_blob_abort(&w);
	if (dp)
		kdir_done(b, dp);
	return -1;
}

void
ane_probe_weights(float *w, size_t n, uint64_t seed)
{
	uint32_t s = (uint32_t)seed;
	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		w[i] = 0.03f * ((float)(s >> 8) / 16777216.0f - 0.5f);
	}
}

int
ane_build_probe(struct ane_builder *b, int n, int width, uint64_t seed, struct ane_kernel *out, char *err)
{
	memset(out, 0, sizeof *out);
	if (n < 1 || n > 8192 || width < 1 || width > 4096)
		return ad_err(err, "probe: size %d width %d (1..8192, 1..4096)", n, width);
	float *wt = malloc((size_t)n * (size_t)n * sizeof(float));
	if (!wt)
		return ad_err(err, "probe: out of memory");
	ane_probe_weights(wt, (size_t)n * (size_t)n, seed);
	struct kdir d;
	if (kdir_make(b, &d, "probe", err)) {
		free(wt);
		return -1;
	}
	struct ane_wsrc ws = {wt, AD_TYPE_F32, (size_t)n * (size_t)n};
	int rc = ane_blob_write_proj(d.blob, &ws, 1, err);
	free(wt);
	char *mil = rc ? NULL : ane_mil_proj(n, n, width, err);
	if (!mil) {
		kdir_done(b, &d);
		return -1;
	}
	rc = compile(b, mil, &d, out, err);
	free(mil);
	out->in_ch = out->out_ch = n;
	return rc;
}

int
ane_eval(struct ane_kernel *k, const void *in, void *out, int ncols, char *err)
{
	if (!k->ek && !k->dev)
		return ad_err(err, "kernel not compiled");
	if (ncols < 1 || ncols > k->width)
		return ad_err(err, "%d columns (width %d)", ncols, k->width);
#ifdef ANEDVD_ANE
	if (k->dev)
		return ane_dev_eval(k->dev, in, out, ncols, err);
#endif
	return emu_eval(k->ek, &in, &out, (size_t)ncols, err);
}

int
ane_eval_host(struct ane_kernel *k, const void *in, void *out, const float *x_in, size_t in_ld, float *y_out,
              size_t out_ld, int ncols, char *err)
{
	if (!k->ek && !k->dev)
		return ad_err(err, "kernel not compiled");
	if (ncols < 1 || ncols > k->width)
		return ad_err(err, "%d columns (width %d)", ncols, k->width);
#ifdef ANEDVD_ANE
	if (k->dev) {
		// the device reads and writes the surfaces: the rows go through them
		// (emu_eval_host checks the rows' strides for the emu)
		if ((x_in && in_ld < (size_t)k->in_ch) || (y_out && out_ld < (size_t)k->out_ch))
			return ad_err(err, "host rows of %zu and %zu floats, the kernel has %d and %d channels", in_ld,
			              out_ld, k->in_ch, k->out_ch);
		if (x_in && ane_scatter_f32(ane_dev_input_layout(k->dev), (void *)(uintptr_t)in, x_in, (size_t)ncols,
		                            in_ld, err))
			return -1;
		if (ane_dev_eval(k->dev, in, out, ncols, err))
			return -1;
		return y_out ? ane_gather_f32(ane_dev_output_layout(k->dev), out, y_out, (size_t)ncols, out_ld, err)
		             : 0;
	}
#endif
	return emu_eval_host(k->ek, in, out, x_in, in_ld, y_out, out_ld, (size_t)ncols, err);
}

const char *
ane_cache_state_name(enum ane_cache_state st)
{
	switch (st) {
	case ANE_CACHE_HIT:
		return "hit";
	case ANE_CACHE_MISS:
		return "miss";
	case ANE_CACHE_REBUILT:
		return "rebuilt";
	case ANE_CACHE_NOT_STORED:
		return "not-stored";
	default:
		return "off";
	}
}

void
ane_start_describe(const struct ane_start *st, char *buf, size_t cap)
{
	char huge[96] = "";
	if (st->weight_bytes && st->huge_bytes >= 0)
		snprintf(huge, sizeof huge, "; weights %.1f MB, %.1f MB of the process on 2 MiB pages",
		         (double)st->weight_bytes / 1e6, (double)st->huge_bytes / 1e6);
	snprintf(buf, cap,
	         "plan %.1f ms, MIL+key %.1f ms, cache %s (load %.1f ms), blobs %.1f ms, compile+repack %.1f ms, "
	         "cache write %.1f ms (beside them; waited for %.1f ms); total %.1f ms%s%s%s",
	         st->plan_us / 1e3, st->key_us / 1e3, ane_cache_state_name(st->cache), st->load_us / 1e3,
	         st->blob_us / 1e3, st->compile_us / 1e3, st->store_us / 1e3, st->store_wait_us / 1e3,
	         st->total_us / 1e3, huge, st->cache_note[0] ? ": " : "", st->cache_note);
}

void
ane_set_free(struct ane_set *s)
{
	ane_set_cache_wait(s, NULL); // the writer reads the kernels
	if (s->k)
		for (int i = 0; i < s->plan.n; i++)
			ane_kernel_free(&s->k[i]);
	free(s->k);
	kc_entry_free(s->cache); // after the kernels that borrow its buffers
	ane_builder_free(s->b);
	ane_plan_free(&s->plan);
	memset(s, 0, sizeof *s);
}

// the cache key of a plan: see kcache.h
static int
set_key(struct kc_key *key, const struct ane_set *s, const struct model *m, const char *backend, const char *options,
        char *err)
{
	char digest[256];
	if (kc_model_digest(m, digest, sizeof digest, err))
		return -1;
	kc_key_init(key);
	kc_key_add(key, "format %d", KC_FORMAT);
	kc_key_add(key, "build %s", kc_build_id());
	kc_key_add(key, "backend %s", backend);
	kc_key_add(key, "model %s %s", m->name, digest);
	kc_key_add(key, "options width=%d split=%d head_rows=%d %s", s->plan.width, s->plan.split, s->plan.head_rows,
	           options ? options : "");
	uint64_t h = 0x6b6e;
	for (int i = 0; i < s->plan.n; i++) {
		const struct ane_pk *pk = &s->plan.k[i];
		char *mil = kernel_mil(pk, s->plan.width, err);
		if (!mil) {
			kc_key_free(key);
			return -1;
		}
		h = kc_hash(mil, strlen(mil), h);
		free(mil);
		int64_t shape[7] = {pk->kind, pk->layer, pk->chunk, pk->in_ch, pk->out_ch, pk->row_offset, pk->ff};
		h = kc_hash(shape, sizeof shape, h);
		for (int j = 0; j < pk->nparts; j++) {
			const struct ane_part *pt = &pk->parts[j];
			int64_t rows[3] = {pt->row0, pt->rows, pt->t->type};
			h = kc_hash(pt->t->name, strlen(pt->t->name), h);
			h = kc_hash(rows, sizeof rows, h);
		}
	}
	kc_key_add(key, "kernels %d %016llx", s->plan.n, (unsigned long long)h);
	return kc_key_finish(key, err);
}

// every kernel from a mapped entry; -1 leaves no kernel behind
static int
set_from_cache(struct ane_set *s, struct kc_entry *e, char *err)
{
	for (int i = 0; i < s->plan.n; i++) {
		const struct ane_pk *pk = &s->plan.k[i];
		const struct kc_kernel *ck = kc_entry_kernel(e, i);
		char *mil = kernel_mil(pk, s->plan.width, err);
		if (!mil)
			goto fail;
		uint64_t t0 = now_us();
		if (ck->mil_hash != kc_hash(mil, strlen(mil), 0x6d696c)) {
			ad_err(err, "kernel %d: the cached program is not this one", i);
			free(mil);
			goto fail;
		}
		struct ane_kernel *k = &s->k[i];
		k->ek = emu_compile_packed(s->b->emu, mil, ck->consts, ck->nconsts, err);
		free(mil);
		if (!k->ek) {
			ad_err_prefix(err, "kernel %d", i);
			goto fail;
		}
		k->compile_us = now_us() - t0;
		count_compile(s->b);
		k->weight_bytes = emu_weight_bytes(k->ek);
		k->width = (int)emu_width(k->ek);
		k->in_ch = pk->in_ch;
		k->out_ch = pk->out_ch;
	}
	return 0;
fail:
	for (int i = 0; i < s->plan.n; i++)
		ane_kernel_free(&s->k[i]);
	return -1;
}

// kernel i's buffers into the entry being written
static int
store_kernel(struct kc_writer *w, const struct ane_set *s, int i, char *err)
{
	const struct ane_kernel *k = &s->k[i];
	int n = emu_kernel_nconsts(k->ek);
	struct emu_const *c = calloc((size_t)n + 1, sizeof *c);
	if (!c)
		return ad_err(err, "out of memory");
	for (int j = 0; j < n; j++)
		emu_kernel_const(k->ek, j, &c[j]);
	char *mil = kernel_mil(&s->plan.k[i], s->plan.width, err);
	int rc = mil ? kc_writer_add(w, i, kc_hash(mil, strlen(mil), 0x6d696c), c, n, err) : -1;
	free(mil);
	free(c);
	return rc;
}

// the cache file is written by a thread of its own while the next kernels
// compile: kernels [0, ready) are compiled (and no longer change); once
// done it commits the entry (or, on abort, removes it)
struct ane_store {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t th;
	int threaded;
	int ready, done, abort;
	struct kc_writer *w;
	const struct ane_set *s;
	uint64_t max_bytes;
	_Atomic int *stored;    // ane_build_opts.stored
	int (*pace)(void *arg); // ane_build_opts.store_pace
	void *pace_arg;
	int delay_ms; // ane_build_opts.debug_store_delay_ms
	int failed;
	char err[AD_ERRLEN];
	uint64_t us;
};

// the writer's wait until its pace lets it go on (ane_build_opts
// store_pace); 1 when the build failed meanwhile. The wait is not counted
// in the writer's time
#define STORE_PACE_MS 10

static int
store_paced(struct ane_store *q)
{
	while (q->pace && !q->pace(q->pace_arg)) {
		pthread_mutex_lock(&q->mu);
		int abort = q->abort;
		pthread_mutex_unlock(&q->mu);
		if (abort)
			return 1;
		struct timespec ts = {0, STORE_PACE_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void *
store_main(void *arg)
{
	struct ane_store *q = arg;
	int i = 0, abort = 0;
	ad_thread_name("cache writer");
	for (;;) {
		pthread_mutex_lock(&q->mu);
		while (i >= q->ready && !q->done)
			pthread_cond_wait(&q->cv, &q->mu);
		int ready = q->ready, done = q->done;
		abort = q->abort;
		pthread_mutex_unlock(&q->mu);
		if (abort || (i >= ready && done))
			break;
		for (; i < ready && !abort; i++) {
			if (!q->failed && (abort = store_paced(q)))
				break;
			uint64_t t0 = now_us();
			if (!q->failed && store_kernel(q->w, q->s, i, q->err))
				q->failed = 1;
			if (q->stored)
				atomic_store(q->stored, i + 1);
			q->us += now_us() - t0;
		}
	}
	uint64_t t0 = now_us();
	if (q->stored)
		atomic_store(q->stored, i + 1); // committing
	if (!abort && !q->failed && q->delay_ms > 0) {
		struct timespec ts = {q->delay_ms / 1000, (long)(q->delay_ms % 1000) * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (abort || q->failed)
		kc_writer_abort(q->w);
	else if (kc_writer_commit(q->w, q->max_bytes, q->err))
		q->failed = 1;
	q->w = NULL;
	q->us += now_us() - t0;
	return NULL;
}

static void
store_publish(struct ane_store *q, int ready, int done, int abort)
{
	pthread_mutex_lock(&q->mu);
	q->ready = ready;
	q->done |= done;
	q->abort |= abort;
	pthread_cond_signal(&q->cv);
	pthread_mutex_unlock(&q->mu);
}

static struct ane_store *
store_start(struct kc_writer *w, const struct ane_set *s, const struct ane_build_opts *bo)
{
	struct ane_store *q = calloc(1, sizeof *q);
	if (!q)
		return NULL;
	q->w = w;
	q->s = s;
	q->max_bytes = bo->cache_max_bytes;
	q->stored = bo->stored;
	q->delay_ms = bo->debug_store_delay_ms;
	if (bo->cache_background) {
		q->pace = bo->store_pace;
		q->pace_arg = bo->store_pace_arg;
	}
	pthread_mutex_init(&q->mu, NULL);
	pthread_cond_init(&q->cv, NULL);
	q->threaded = pthread_create(&q->th, NULL, store_main, q) == 0;
	return q;
}

// the writer's end: joined (or, without a thread, run here), its outcome booked
static void
store_finish(struct ane_store *q, struct ane_start *st, pthread_mutex_t *mu)
{
	if (q->threaded)
		pthread_join(q->th, NULL);
	else
		store_main(q);
	if (mu)
		pthread_mutex_lock(mu);
	st->store_us += q->us;
	if (q->failed && !q->abort) {
		st->cache = ANE_CACHE_NOT_STORED;
		snprintf(st->cache_note, sizeof st->cache_note, "not cached: %s", q->err);
		ad_warn("kernel cache: %s", st->cache_note);
	}
	if (mu)
		pthread_mutex_unlock(mu);
	pthread_mutex_destroy(&q->mu);
	pthread_cond_destroy(&q->cv);
	free(q);
}

enum ane_cache_state
ane_set_cache_wait(struct ane_set *s, pthread_mutex_t *mu)
{
	if (s->store) {
		struct ane_store *q = s->store;
		s->store = NULL;
		store_finish(q, &s->start, mu);
	}
	return s->start.cache;
}

// the pages of the model a kernel was built from, out of this process
static void
drop_kernel_pages(const struct model *m, const struct ane_pk *pk)
{
	for (int j = 0; j < pk->nparts; j++) {
		const struct ane_part *pt = &pk->parts[j];
		size_t rb;
		if (ad_type_row_bytes(pt->t->type, pt->t->ne[0], &rb))
			continue;
		kc_model_drop(m, (const uint8_t *)pt->t->data + (size_t)pt->row0 * rb, (size_t)pt->rows * rb);
	}
}

// the weights, and how much of the process is on huge pages (the emu's
// panels: its arena, or the cache file's folios)
static void
note_weights(struct ane_set *s)
{
	struct ane_start *st = &s->start;
	st->weight_bytes = 0;
	for (int i = 0; i < s->plan.n; i++)
		st->weight_bytes += s->k[i].weight_bytes;
	st->huge_bytes = s->b->ane ? -1 : ad_huge_process_bytes();
}

int
ane_set_build(struct ane_set *s, const struct model *m, const struct ane_plan_opts *po, const struct ane_build_opts *bo,
              int progress, char *err)
{
	memset(s, 0, sizeof *s);
	uint64_t t_start = now_us();
	if (ane_plan_build(&s->plan, m, po, err))
		return -1;
	if (bo && bo->total)
		atomic_store(bo->total, s->plan.n);
	s->k = calloc((size_t)s->plan.n, sizeof *s->k);
	s->b = s->k ? ane_builder_new(bo, err) : NULL;
	if (!s->b) {
		if (!s->k)
			ad_err(err, "out of memory");
		ane_set_free(s);
		return -1;
	}
	struct ane_start *st = &s->start;
	uint64_t t0 = now_us();
	st->plan_us = t0 - t_start;
	s->b->model = m;
	// the cache: emu only for now (see kcache.h for the ane backend)
	struct kc_key key = {0};
	struct kc_writer *w = NULL;
	const char *dir = bo && bo->cache_dir && bo->cache_dir[0] && !s->b->ane ? bo->cache_dir : NULL;
	if (dir) {
		char e[AD_ERRLEN];
		if (set_key(&key, s, m, s->b->backend, bo->options, e)) {
			snprintf(st->cache_note, sizeof st->cache_note, "no key: %s", e);
			st->cache = ANE_CACHE_NOT_STORED;
			dir = NULL;
		}
		uint64_t t1 = now_us();
		st->key_us = t1 - t0;
		struct kc_opts ko = {.dir = dir, .verify = bo->cache_verify};
		int r = dir ? kc_load(dir, &key, s->plan.n, &ko, &s->cache, e) : 0;
		if (r == 1 && set_from_cache(s, s->cache, e) == 0) {
			// nothing here reads the model's data again: the pages the
			// plan and the key read (the header, the digest's samples) go
			size_t mlen = 0;
			const uint8_t *map = m->gguf ? gguf_file_map(m->gguf, &mlen, NULL) : NULL;
			if (map)
				kc_model_drop(m, map, mlen);
			st->cache = ANE_CACHE_HIT;
			if (bo && bo->built)
				atomic_store(bo->built, s->plan.n);
			st->cache_bytes = kc_entry_bytes(s->cache);
			note_weights(s);
			st->load_us = now_us() - t1;
			st->total_us = now_us() - t_start;
			s->compile_ms = (now_us() - t0) / 1000;
			if (progress)
				ad_info("%d kernels from the cache (%s/%s.kc, %.1f MB)", s->plan.n, dir, key.name,
				        (double)st->cache_bytes / 1e6);
			kc_key_free(&key);
			return 0;
		}
		if (r == 1) { // mapped but a kernel refused it: drop it, build afresh
			kc_entry_free(s->cache);
			s->cache = NULL;
			char p[4200];
			snprintf(p, sizeof p, "%s/%s.kc", dir, key.name);
			unlink(p);
			r = -1;
		}
		if (r < 0) {
			snprintf(st->cache_note, sizeof st->cache_note, "cache entry unusable, rebuilt: %s", e);
			ad_warn("%s", st->cache_note);
		}
		st->load_us = now_us() - t1;
		if (dir) {
			w = kc_writer_new(dir, &key, s->plan.n, e);
			if (!w) {
				st->cache = ANE_CACHE_NOT_STORED;
				snprintf(st->cache_note, sizeof st->cache_note, "not cached: %s", e);
				ad_warn("kernel cache: %s", st->cache_note);
			} else {
				st->cache = r < 0 ? ANE_CACHE_REBUILT : ANE_CACHE_MISS;
			}
		}
	}
	struct ane_store *q = NULL;
	if (w && !(q = store_start(w, s, bo))) {
		kc_writer_abort(w);
		st->cache = ANE_CACHE_NOT_STORED;
		snprintf(st->cache_note, sizeof st->cache_note, "not cached: out of memory");
	}
	t0 = now_us();
	for (int i = 0; i < s->plan.n; i++) {
		const struct ane_pk *pk = &s->plan.k[i];
		char what[96];
		ane_pk_describe(pk, what, sizeof what);
		if (ane_build(s->b, pk, s->plan.width, &s->k[i], err)) {
			ad_err_prefix(err, "kernel %d (%s)", i, what);
			if (q) {
				store_publish(q, i, 1, 1);
				store_finish(q, st, NULL);
			}
			kc_key_free(&key);
			ane_set_free(s);
			return -1;
		}
		st->blob_us += s->k[i].blob_us;
		st->compile_us += s->k[i].compile_us;
		// the kernel holds its own copy now: the model's pages can go
		drop_kernel_pages(m, pk);
		if (bo && bo->built)
			atomic_store(bo->built, i + 1);
		if (bo && bo->debug_delay_ms > 0) {
			struct timespec ts = {bo->debug_delay_ms / 1000, (long)(bo->debug_delay_ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
		if (q && q->threaded)
			store_publish(q, i + 1, 0, 0);
		if (progress)
			ad_info("compiled %d/%d %s: %.1f MB in %.1f ms", i + 1, s->plan.n, what,
			        (double)s->k[i].weight_bytes / 1e6, (double)s->k[i].compile_us / 1e3);
	}
	ane_blob_mem_free(&s->b->blob); // the largest kernel's blob: not needed again
	if (q) {
		store_publish(q, s->plan.n, 1, 0);
		if (bo->cache_background && q->threaded) {
			s->store = q; // ane_set_cache_wait
		} else {
			uint64_t t1 = now_us();
			store_finish(q, st, NULL);
			st->store_wait_us = now_us() - t1; // the last kernels, the fsync and the rename
		}
	}
	kc_key_free(&key);
	note_weights(s);
	s->compile_ms = (now_us() - t0) / 1000;
	st->total_us = now_us() - t_start;
	return 0;
}
