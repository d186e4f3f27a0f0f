// test-ane-worker: the kernel plan of every fixture model, kb_local against
// an fp32 matmul of the same dequantised weights, and the anedvd-ane-worker
// process (started here, on stories260K) through kb_remote: bit-equal to
// kb_local, error replies for bad requests, a SIGKILL in the middle of a
// call survived, SIGTERM a clean exit. Prints the IPC round trip per call.
// The data plane (dataplane.h): kb_remote attaches it and calls through it
// (bit-equal, lists longer than one slot holds, the nng path still right
// with no_dataplane); a raw object gets an error status for every bad step
// and Stats counts its kernels; an engine over kb_remote whose worker is
// SIGKILLed mid-generation gives kb_local's tokens; a worker hung in a
// kernel fails the call after the deadline; the polling doorbell on both
// sides gives kb_local's bits. A worker building its kernels slowly
// answers Health from the first, with how far it has come, refuses other
// requests with ERROR_UNAVAILABLE meanwhile, and then serves.
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <dirent.h>

#include "ane.pb-c.h"
#include "build.h"
#include "client-ane.h"
#include "common.pb-c.h"
#include "dataplane.h"
#include "dequant.h"
#include "engine.h"
#include "fp16.h"
#include "ipc.h"
#include "kernels.h"
#include "mil.h"
#include "plan.h"
#include "t.h"

#define MODELS T_DATA "/models/"
#define STORIES MODELS "stories260K.gguf"
#define W 8 // columns of the kernels under test (small: fast)

extern char **environ;

static const char *fixtures[] = {
	"stories260K",
	"llama",
	"llama256_q4_k",
	"llama256_q8_0",
	"llama256_bf16",
	"llama256_f16",
	"llama256_q2_k",
	"llama256_q5_0",
	"llama256_q6_k",
	"llama256_iq4_xs",
	"llama256_iq4_nl",
	"gemma2",
	"gemma3",
	"phi3",
	"qwen2",
	"qwen2moe",
	"qwen3",
	"models2/qwen3moe",
	"models2/phi3_longrope",
	"models2/hunyuan_dense",
	"models2/llama_yarn",
	"models2/smollm3",
	"models2/lfm2",
	"models2/lfm2moe",
	"models2/gemma4",
	"models2/qwen35",
};
#define NFIX ((int)(sizeof fixtures / sizeof fixtures[0]))

static uint32_t rng = 12345;
static float
frand(void)
{
	rng = rng * 1664525u + 1013904223u;
	return (float)(rng >> 8) / 16777216.0f - 0.5f;
}

static int
load(struct model *m, const char *name)
{
	char path[512], err[AD_ERRLEN];
	if (strchr(name, '/')) // another folder of tests/data
		snprintf(path, sizeof path, T_DATA "/%s.gguf", name);
	else
		snprintf(path, sizeof path, MODELS "%s.gguf", name);
	if (model_load(m, path, err)) {
		fprintf(stderr, "%s: %s\n", name, err);
		return -1;
	}
	return 0;
}

static float *
deq_all(const struct model_tensor *t)
{
	int64_t n = model_tensor_nelem(t);
	float *d = malloc((size_t)n * sizeof(float));
	char err[AD_ERRLEN];
	if (d && ad_dequant(t->type, t->data, d, n, err)) {
		fprintf(stderr, "%s: %s\n", t->name, err);
		free(d);
		return NULL;
	}
	return d;
}

// --- the plan ----------------------------------------------------------------------

static void
test_plan_fixtures(void)
{
	for (int f = 0; f < NFIX; f++) {
		struct model m;
		REQUIRE(load(&m, fixtures[f]) == 0, "%s", fixtures[f]);
		const struct model_hparams *hp = &m.hp;
		const int gelu =
			m.arch == MODEL_ARCH_GEMMA2 || m.arch == MODEL_ARCH_GEMMA3 || m.arch == MODEL_ARCH_GEMMA4;
		for (int split = 0; split < 2; split++) {
			struct ane_plan p;
			char err[AD_ERRLEN];
			struct ane_plan_opts po = {.width = W, .split = split};
			REQUIRE(ane_plan_build(&p, &m, &po, err) == 0, "%s: %s", fixtures[f], err);
			CHECK(p.width == W && p.gelu == gelu);
			int n = 0, E = (int)hp->n_embd;
			for (int il = 0; il < hp->n_layer; il++) {
				const struct model_layer *ml = &m.layers[il];
				// the layer's shapes (gemma4: per layer, q only where it shares K/V)
				const int own = ml->kv_src == il, nq = (int)(hp->n_head * ml->head_dim);
				const int nk = own ? (int)(hp->n_head_kv * ml->head_dim) : 0;
				const int nv = own ? (int)(hp->n_head_kv * ml->head_dim_v) : 0;
				const struct ane_pk *k = &p.k[n];
				CHECK(k->id == n && k->kind == ANE_K_QKV && k->layer == il, "%s L%d", fixtures[f], il);
				if (ml->conv) { // lfm2 ShortConv: in_proj, out_proj
					CHECK(k->in_ch == E && k->out_ch == 3 * E && k->nparts == 1 &&
					      k->parts[0].t == &ml->conv_in);
					k = &p.k[++n];
					CHECK(k->kind == ANE_K_O && k->layer == il && k->in_ch == E && k->out_ch == E &&
					      k->parts[0].t == &ml->conv_out);
				} else if (ml->recur) { // qwen35 delta-net: [qkv; z; beta; alpha], ssm_out
					const int d = (int)hp->ssm_d_state,
						  C = (int)(2 * hp->ssm_n_group + hp->ssm_dt_rank) * d;
					const int nvd = (int)hp->ssm_dt_rank * d, nvh = (int)hp->ssm_dt_rank;
					CHECK(k->in_ch == E && k->out_ch == C + nvd + 2 * nvh && k->nparts == 4 &&
					              k->parts[0].t == &ml->dn_qkv && k->parts[0].rows == C &&
					              k->parts[1].t == &ml->dn_z && k->parts[2].t == &ml->dn_beta &&
					              k->parts[3].t == &ml->dn_alpha && k->parts[3].rows == nvh,
					      "%s L%d", fixtures[f], il);
					k = &p.k[++n];
					CHECK(k->kind == ANE_K_O && k->in_ch == nvd && k->out_ch == E &&
					      k->parts[0].t == &ml->dn_out);
				} else if (ml->attn_gate) { // qwen35 attention: q and gate rows per head
					CHECK(k->in_ch == E && k->out_ch == 2 * nq + nk + nv && k->nparts == 3 &&
					      k->parts[0].t == &ml->wq && k->parts[0].rows == 2 * nq);
					k = &p.k[++n];
					CHECK(k->kind == ANE_K_O && k->in_ch == nq && k->out_ch == E);
				} else {
					CHECK(k->in_ch == E && k->out_ch == nq + nk + nv);
					if (ml->wqkv.name) {
						CHECK(k->nparts == 1 && k->parts[0].t == &ml->wqkv);
					} else if (!own) {
						CHECK(m.arch == MODEL_ARCH_GEMMA4 && k->nparts == 1 &&
						      k->parts[0].t == &ml->wq && k->parts[0].rows == nq);
					} else {
						CHECK(k->nparts == 3 && k->parts[0].t == &ml->wq &&
						      k->parts[1].t == &ml->wk && k->parts[2].t == &ml->wv &&
						      k->parts[0].rows == nq && k->parts[1].rows == nk);
					}
					CHECK(ane_plan_find(&p, ANE_K_QKV, il, 0) == n);
					k = &p.k[++n];
					CHECK(k->kind == ANE_K_O && k->in_ch == (int)(hp->n_head * ml->head_dim_v) &&
					      k->out_ch == E);
				}
				n++;
				if (ml->gate_inp.name) {
					CHECK(m.arch == MODEL_ARCH_QWEN2MOE || m.arch == MODEL_ARCH_QWEN3MOE ||
					      (m.arch == MODEL_ARCH_LFM2MOE && il >= hp->n_dense_lead));
					if (ml->gate_shexp.name) {
						k = &p.k[n++];
						CHECK(k->kind == ANE_K_SHEXP && k->ff == hp->n_ff_shexp &&
						      k->nparts == 3 && k->parts[0].t == &ml->gate_shexp &&
						      k->parts[2].t == &ml->down_shexp);
					}
					continue;
				}
				const int ff = (int)ml->n_ff;
				if (split || gelu) {
					k = &p.k[n++];
					CHECK(k->kind == ANE_K_GATE_UP && k->in_ch == E && k->out_ch == 2 * ff &&
					              k->nparts == 2,
					      "%s L%d", fixtures[f], il);
					k = &p.k[n++];
					CHECK(k->kind == ANE_K_DOWN && k->in_ch == ff && k->out_ch == E);
				} else {
					k = &p.k[n++];
					CHECK(k->kind == ANE_K_FFN && k->ff == ff && k->in_ch == E && k->out_ch == E);
					CHECK(k->weight_bytes == (uint64_t)3 * ff * E * 2);
				}
				if (m.arch == MODEL_ARCH_PHI3) { // gate|up fused: rows [0, ff) and [ff, 2ff) of ffn_up
					const struct ane_pk *g = &p.k[n - (split ? 2 : 1)];
					CHECK(!ml->gate.name && g->parts[0].t == &ml->up && g->parts[0].row0 == 0 &&
					      g->parts[1].t == &ml->up && g->parts[1].row0 == ff &&
					      g->parts[1].rows == ff);
				}
			}
			// the LM head: one chunk of all rows at these sizes
			const struct ane_pk *h = &p.k[n++];
			CHECK(h->kind == ANE_K_LM_HEAD && h->layer == -1 && h->chunk == 0 && h->row_offset == 0 &&
			      h->out_ch == hp->n_vocab && h->in_ch == E);
			CHECK(h->parts[0].t->data == (m.tied_output ? m.tok_embd.data : m.output.data));
			CHECK(n == p.n, "%s: %d kernels counted, plan has %d", fixtures[f], n, p.n);
			ane_plan_free(&p);
		}
		// LM-head chunking
		struct ane_plan p;
		struct ane_plan_opts po = {.width = W, .head_rows = 200};
		REQUIRE(ane_plan_build(&p, &m, &po, NULL) == 0);
		CHECK(p.head_chunks == 3 && p.k[p.n - 1].row_offset == 400 && p.k[p.n - 1].out_ch == 112 &&
		      p.k[p.n - 2].out_ch == 200 && p.k[p.n - 2].chunk == 1);
		CHECK(ane_plan_find(&p, ANE_K_LM_HEAD, -1, 2) == p.n - 1 &&
		      ane_plan_find(&p, ANE_K_LM_HEAD, -1, 3) == -1);
		ane_plan_free(&p);
		model_free(&m);
	}
	// the seed's chunk rule at real sizes
	CHECK(ane_head_chunk_rows(2304, 256000) == 116508);
	// bad options are refused
	struct model m;
	REQUIRE(load(&m, "stories260K") == 0);
	struct ane_plan p;
	char err[AD_ERRLEN] = "";
	CHECK(ane_plan_build(&p, &m, &(struct ane_plan_opts){.width = 5000}, err) == -1 && strstr(err, "width"));
	model_free(&m);
}

// --- kb_local against fp32 -----------------------------------------------------------

// y[out] for column x from the plan's parts, in fp32 with the dequantised weights
static void
ref_kernel(const struct ane_pk *k, float *const *wd, const float *x, float *y)
{
	if (k->ff) {
		float *g = malloc((size_t)k->ff * sizeof(float)), *u = malloc((size_t)k->ff * sizeof(float));
		const int E = k->in_ch;
		for (int i = 0; i < k->ff; i++) {
			const float *wg = wd[0] + (size_t)(k->parts[0].row0 + i) * E;
			const float *wu = wd[1] + (size_t)(k->parts[1].row0 + i) * E;
			double a = 0, b = 0;
			for (int c = 0; c < E; c++) {
				a += (double)wg[c] * x[c];
				b += (double)wu[c] * x[c];
			}
			g[i] = (float)(a / (1.0 + exp(-a)) * b);
		}
		for (int o = 0; o < k->out_ch; o++) {
			double a = 0;
			for (int i = 0; i < k->ff; i++)
				a += (double)wd[2][(size_t)o * k->ff + i] * g[i];
			y[o] = (float)a;
		}
		free(g);
		free(u);
		return;
	}
	int o = 0;
	for (int p = 0; p < k->nparts; p++)
		for (int64_t r = 0; r < k->parts[p].rows; r++, o++) {
			const float *w = wd[p] + (size_t)(k->parts[p].row0 + r) * k->in_ch;
			double a = 0;
			for (int c = 0; c < k->in_ch; c++)
				a += (double)w[c] * x[c];
			y[o] = (float)a;
		}
}

// one kernel on surfaces in/out vs the reference; returns the relative error
static double
check_kernel(struct kernel_backend *kb, const struct ane_pk *pk, int id, int ncols)
{
	char err[AD_ERRLEN];
	struct ad_surface in, out;
	if (kb->surface_new(kb, "in", pk->in_ch, 0, &in, err) || kb->surface_new(kb, "out", pk->out_ch, 0, &out, err)) {
		fprintf(stderr, "surface: %s\n", err);
		return 1e9;
	}
	float *x = malloc((size_t)ncols * pk->in_ch * sizeof(float));
	float *y = malloc((size_t)ncols * pk->out_ch * sizeof(float));
	float *r = malloc((size_t)pk->out_ch * sizeof(float));
	for (int i = 0; i < ncols * pk->in_ch; i++)
		x[i] = 2.0f * frand();
	surface_write(&in, x, (size_t)ncols, (size_t)pk->in_ch);
	surface_read(&in, x, (size_t)ncols, (size_t)pk->in_ch); // the fp16 values the kernel sees
	struct kb_timing t;
	double rel = 1e9;
	if (kb->call(kb, id, &in, &out, ncols, &t, err)) {
		fprintf(stderr, "call %d: %s\n", id, err);
		goto done;
	}
	surface_read(&out, y, (size_t)ncols, (size_t)pk->out_ch);
	float *wd[sizeof pk->parts / sizeof pk->parts[0]] = {0};
	for (int p = 0; p < pk->nparts; p++)
		wd[p] = deq_all(pk->parts[p].t);
	double maxd = 0, maxr = 0;
	for (int c = 0; c < ncols; c++) {
		ref_kernel(pk, wd, x + (size_t)c * pk->in_ch, r);
		for (int o = 0; o < pk->out_ch; o++) {
			double d = fabs((double)y[(size_t)c * pk->out_ch + o] - r[o]);
			maxd = d > maxd ? d : maxd;
			maxr = fabs(r[o]) > maxr ? fabs(r[o]) : maxr;
		}
	}
	for (int p = 0; p < pk->nparts; p++)
		free(wd[p]);
	rel = maxr > 0 ? maxd / maxr : maxd;
done:
	free(x);
	free(y);
	free(r);
	return rel;
}

static void
test_local_vs_fp32(void)
{
	for (int f = 0; f < NFIX; f++) {
		struct model m;
		REQUIRE(load(&m, fixtures[f]) == 0);
		for (int split = 0; split < 2; split++) {
			char err[AD_ERRLEN];
			struct kb_opts o = {.width = W, .split = split, .threads = 2};
			struct kernel_backend *kb = kb_local_new(&m, &o, err);
			REQUIRE(kb, "%s: %s", fixtures[f], err);
			struct ane_plan p;
			REQUIRE(ane_plan_build(&p, &m, &(struct ane_plan_opts){.width = W, .split = split}, err) == 0);
			CHECK(kb->n_kernels == p.n && kb->width == W && strcmp(kb->name, "emu") == 0);
			CHECK(kb->compile_count == (uint32_t)p.n);
			double worst = 0;
			for (int i = 0; i < p.n; i++) {
				CHECK(kb->kernels[i].kind == (enum ane_kind)p.k[i].kind &&
				      kb->kernels[i].out_ch == p.k[i].out_ch);
				double rel = check_kernel(kb, &p.k[i], i, 1 + i % W);
				CHECK(rel < 0.01, "%s kernel %d (%s): rel %g", fixtures[f], i,
				      ane_kind_name(p.k[i].kind), rel);
				worst = rel > worst ? rel : worst;
			}
			if (split == 0)
				printf("kb_local vs fp32 %-14s %2d kernels, worst rel %.2e\n", fixtures[f], p.n, worst);
			// decode column only, and the width's last column
			CHECK(kb_find(kb, ANE_K_LM_HEAD, -1, 0) == p.n - 1 && kb_find(kb, ANE_K_LM_HEAD, -1, 1) == -1);
			ane_plan_free(&p);
			kb->free(kb);
		}
		model_free(&m);
	}
}

// the LM head in chunks, through an ane_set directly
static void
test_head_chunks(void)
{
	struct model m;
	REQUIRE(load(&m, "qwen2") == 0);
	struct ane_set s;
	char err[AD_ERRLEN];
	struct ane_plan_opts po = {.width = W, .head_rows = 200};
	REQUIRE(ane_set_build(&s, &m, &po, NULL, 0, err) == 0, "%s", err);
	const int E = (int)m.hp.n_embd;
	struct ad_surface in, out;
	REQUIRE(surface_create(&in, NULL, (size_t)E, W, 0, err) == 0);
	REQUIRE(surface_create(&out, NULL, 200, W, 0, err) == 0);
	float x[4096], y[200], r[200];
	REQUIRE(E <= 4096);
	for (int i = 0; i < E; i++)
		x[i] = frand();
	surface_write(&in, x, 1, (size_t)E);
	surface_read(&in, x, 1, (size_t)E);
	float *full = deq_all(m.tied_output ? &m.tok_embd : &m.output);
	REQUIRE(full);
	for (int c = 0; c < 3; c++) {
		int id = ane_plan_find(&s.plan, ANE_K_LM_HEAD, -1, c);
		REQUIRE(id >= 0);
		const struct ane_pk *k = &s.plan.k[id];
		REQUIRE(ane_eval(&s.k[id], in.base, out.base, 1, err) == 0, "%s", err);
		surface_read(&out, y, 1, 200);
		double md = 0, mr = 0;
		for (int o = 0; o < k->out_ch; o++) {
			double a = 0;
			for (int i = 0; i < E; i++)
				a += (double)full[(size_t)(k->row_offset + o) * E + i] * x[i];
			r[o] = (float)a;
			md = fmax(md, fabs(y[o] - r[o]));
			mr = fmax(mr, fabs(r[o]));
		}
		CHECK(md / mr < 0.01, "chunk %d: rel %g", c, md / mr);
	}
	// bad calls of the set
	CHECK(ane_eval(&s.k[0], in.base, out.base, 0, err) == -1);
	CHECK(ane_eval(&s.k[0], in.base, out.base, W + 1, err) == -1);
	free(full);
	surface_close(&in);
	surface_close(&out);
	ane_set_free(&s);
	// unknown backend
	CHECK(ane_set_build(&s, &m, &po, &(struct ane_build_opts){.backend = "gpu"}, 0, err) == -1 &&
	      strstr(err, "backend"));
	model_free(&m);
}

// the kernel directories are gone after compile, and stay with
// ANEDVD_KEEP_ANE_FILES=1 (model.mil and weights/w.bin in each)
static int
count_ane_dirs(const char *tmp, int *files)
{
	DIR *d = opendir(tmp);
	int n = 0;
	*files = 0;
	struct dirent *e;
	while (d && (e = readdir(d))) {
		if (strncmp(e->d_name, "anedvd-ane-", 11) != 0)
			continue;
		n++;
		char p[1024];
		struct stat st;
		snprintf(p, sizeof p, "%s/%s/model.mil", tmp, e->d_name);
		*files += stat(p, &st) == 0 && st.st_size > 0;
		snprintf(p, sizeof p, "%s/%s/weights/w.bin", tmp, e->d_name);
		*files += stat(p, &st) == 0 && st.st_size > 128;
	}
	if (d)
		closedir(d);
	return n;
}

static void
test_build_files(void)
{
	char tmp[512];
	snprintf(tmp, sizeof tmp, "%s/keep", t_tmpdir());
	mkdir(tmp, 0700);
	const char *old = getenv("TMPDIR");
	char *saved = old ? strdup(old) : NULL;
	setenv("TMPDIR", tmp, 1);
	struct model m;
	REQUIRE(load(&m, "stories260K") == 0);
	char err[AD_ERRLEN];
	struct ane_set s;
	REQUIRE(ane_set_build(&s, &m, &(struct ane_plan_opts){.width = W}, NULL, 0, err) == 0, "%s", err);
	int files, dirs = count_ane_dirs(tmp, &files);
	CHECK(dirs == 0 && files == 0, "%d dirs, %d files left after the build", dirs, files);
	ane_set_free(&s);
	setenv("ANEDVD_KEEP_ANE_FILES", "1", 1);
	REQUIRE(ane_set_build(&s, &m, &(struct ane_plan_opts){.width = W}, NULL, 0, err) == 0, "%s", err);
	dirs = count_ane_dirs(tmp, &files);
	CHECK(dirs == s.plan.n && files == 2 * s.plan.n, "%d dirs, %d files kept for %d kernels", dirs, files,
	      s.plan.n);
	ane_set_free(&s);
	unsetenv("ANEDVD_KEEP_ANE_FILES");
	// the compile count goes on past the budget (with a warning in the log)
	struct ane_builder *b = ane_builder_new(NULL, err);
	REQUIRE(b, "%s", err);
	int ok = 0;
	for (int i = 0; i < ANE_COMPILE_BUDGET + 1; i++) {
		struct ane_kernel k;
		ok += ane_build_probe(b, 16, 4, (uint64_t)i, &k, err) == 0;
		ane_kernel_free(&k);
	}
	CHECK(ok == ANE_COMPILE_BUDGET + 1 && ane_builder_compiles(b) == ANE_COMPILE_BUDGET + 1);
	struct ane_kernel k;
	CHECK(ane_build_probe(b, 0, 4, 1, &k, err) == -1 && ane_build_probe(b, 16, 5000, 1, &k, err) == -1);
	ane_builder_free(b);
	if (saved)
		setenv("TMPDIR", saved, 1);
	else
		unsetenv("TMPDIR");
	free(saved);
	model_free(&m);
}

// --- the process ---------------------------------------------------------------------

static char url[300];

static pid_t
start(char **argv)
{
	pid_t pid;
	if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0)
		return -1;
	return pid;
}

static const char *worker_threads = "1"; // spawn_worker's --threads

static pid_t
spawn_worker(int delay_ms, int split)
{
	char d[32];
	snprintf(d, sizeof d, "%d", delay_ms);
	char *argv[16];
	int n = 0;
	argv[n++] = WORKER_BIN;
	argv[n++] = "--model";
	argv[n++] = STORIES;
	argv[n++] = "--listen";
	argv[n++] = url;
	argv[n++] = "--chunk";
	argv[n++] = "8";
	argv[n++] = "--threads";
	argv[n++] = (char *)worker_threads;
	if (delay_ms) {
		argv[n++] = "--debug-delay-ms";
		argv[n++] = d;
	}
	if (split)
		argv[n++] = "--split";
	argv[n] = NULL;
	return start(argv);
}

static pid_t worker = -1;
static struct model stories;
static struct kernel_backend *local, *remote;

static struct kernel_backend *
open_remote(int split, int deadline_ms, char *err)
{
	struct kb_opts o = {.width = W,
	                    .split = split,
	                    .url = url,
	                    .timeout_ms = 2000,
	                    .deadline_ms = deadline_ms,
	                    .instance = (long)getpid()};
	return kb_remote_new(&stories, &o, err);
}

// raw request, for the error paths
static Anedvd__AneReply *
raw(struct ad_client *c, const void *buf, size_t n)
{
	uint8_t *rep;
	size_t rlen;
	char err[AD_ERRLEN];
	if (ad_client_call(c, buf, n, &rep, &rlen, 5000, err))
		return NULL;
	Anedvd__AneReply *a = anedvd__ane_reply__unpack(NULL, rlen, rep);
	free(rep);
	return a;
}

static Anedvd__AneReply *
req(struct ad_client *c, Anedvd__AneRequest *q)
{
	size_t n = anedvd__ane_request__get_packed_size(q);
	uint8_t *buf = malloc(n + 1);
	anedvd__ane_request__pack(q, buf);
	Anedvd__AneReply *a = raw(c, buf, n);
	free(buf);
	return a;
}

static Anedvd__AneReply *
call_req(struct ad_client *c, uint32_t kernel, const char *in, const char *out, uint32_t ncols)
{
	Anedvd__KernelCall kc = ANEDVD__KERNEL_CALL__INIT;
	kc.kernel = kernel;
	kc.input = (char *)in;
	kc.output = (char *)out;
	kc.ncols = ncols;
	kc.seq = 7;
	Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_CALL;
	q.call = &kc;
	return req(c, &q);
}

static int
healthy(struct ad_client *c)
{
	Anedvd__HealthRequest h = ANEDVD__HEALTH_REQUEST__INIT;
	Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_HEALTH;
	q.health = &h;
	Anedvd__AneReply *a = req(c, &q);
	// up, and not still building its kernels (every other request is refused until then)
	int ok = a && !a->error && a->body_case == ANEDVD__ANE_REPLY__BODY_HEALTH &&
	         a->health->pid == (uint32_t)worker && strcmp(a->health->process, "anedvd-ane-worker") == 0 &&
	         !a->health->starting;
	if (a)
		anedvd__ane_reply__free_unpacked(a, NULL);
	return ok;
}

// a worker whose kernels take 150 ms each to build (--no-cache: built, not
// loaded): its Health during the start, a request refused, then served
static void
test_health_while_building(void)
{
	char u[300], err[AD_ERRLEN];
	REQUIRE(ad_ipc_url(u, sizeof u, t_tmpdir(), "ane-slow") == 0);
	setenv("ANEDVD_DEBUG_BUILD_DELAY_MS", "150", 1);
	char *argv[] = {WORKER_BIN, "--model",   STORIES, "--listen",   u,   "--chunk",
	                "8",        "--threads", "1",     "--no-cache", NULL};
	pid_t pid = start(argv);
	unsetenv("ANEDVD_DEBUG_BUILD_DELAY_MS");
	REQUIRE(pid > 0);
	struct ad_client *c = ad_client_open(u, err);
	REQUIRE(c, "%s", err);
	int starting = 0, midway = 0, refused = 0, ready = 0, code = 0;
	char progress[200] = "", refusal[AD_ERRLEN] = "";
	for (int i = 0; i < 1500 && !ready; i++) {
		Anedvd__HealthRequest h = ANEDVD__HEALTH_REQUEST__INIT;
		Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
		q.body_case = ANEDVD__ANE_REQUEST__BODY_HEALTH;
		q.health = &h;
		Anedvd__AneReply *a = req(c, &q);
		if (a && !a->error && a->body_case == ANEDVD__ANE_REPLY__BODY_HEALTH &&
		    a->health->pid == (uint32_t)pid) {
			if (!a->health->starting) {
				ready = 1;
			} else {
				starting++;
				snprintf(progress, sizeof progress, "%s",
				         a->health->progress ? a->health->progress : "");
				int k = -1, n = -1;
				const char *of = strstr(progress, ": ");
				if (of && sscanf(of + 2, "%d of %d", &k, &n) == 2 && k > 0 && k < n) {
					midway = 1;
					if (!refused) {
						Anedvd__AneReply *r = anec_compile(c, NULL, 2000, &code, refusal);
						refused = !r && code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE &&
						          strstr(refusal, "starting: building its kernels") != NULL;
						ad_rpc_free(r);
					}
				}
			}
		}
		if (a)
			anedvd__ane_reply__free_unpacked(a, NULL);
		struct timespec ts = {0, 20 * 1000000L};
		nanosleep(&ts, NULL);
	}
	CHECK(starting > 0 && midway, "Health while building: %d answers, the last '%s'", starting, progress);
	CHECK(refused, "a Compile while building: code %d, '%s'", code, refusal);
	CHECK(ready, "never ready");
	Anedvd__AneReply *r = anec_compile(c, NULL, 5000, &code, err);
	CHECK(r && r->compile && r->compile->n_kernels > 0, "after the start: %s", r ? "no kernels" : err);
	ad_rpc_free(r);
	printf("a slow start: %d Health answers while building (the last '%s'), then ready\n", starting, progress);
	ad_client_close(c);
	kill(pid, SIGTERM);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
}

static int
error_code(Anedvd__AneReply *a)
{
	int code = a && a->error ? (int)a->error->code : (a ? 0 : -1);
	if (a)
		anedvd__ane_reply__free_unpacked(a, NULL);
	return code;
}

static void
test_process_start(void)
{
	char err[AD_ERRLEN];
	REQUIRE(ad_ipc_url(url, sizeof url, t_tmpdir(), "ane") == 0);
	REQUIRE(load(&stories, "stories260K") == 0);
	local = kb_local_new(&stories, &(struct kb_opts){.width = W, .threads = 1}, err);
	REQUIRE(local, "%s", err);
	worker = spawn_worker(0, 0);
	REQUIRE(worker > 0);
	remote = open_remote(0, 30000, err);
	REQUIRE(remote, "%s", err);
	CHECK(strcmp(remote->name, "remote:emu") == 0, "%s", remote->name);
	CHECK(remote->n_kernels == local->n_kernels && remote->width == W);
	CHECK(remote->compile_count == (uint32_t)local->n_kernels);
	// a backend whose plan differs (split FFN) is refused at once
	uint64_t t0 = (uint64_t)time(NULL);
	struct kernel_backend *bad = open_remote(1, 20000, err);
	CHECK(!bad && strstr(err, "other kernels"), "%s", err);
	CHECK((uint64_t)time(NULL) - t0 < 10);
	// the instance's surfaces are shared memory under our pid
	struct ad_surface s;
	REQUIRE(remote->surface_new(remote, "probe", 16, 0, &s, err) == 0, "%s", err);
	char prefix[64];
	snprintf(prefix, sizeof prefix, "/anedvd-%ld-", (long)getpid());
	CHECK(s.shared && strncmp(s.id, prefix, strlen(prefix)) == 0, "%s", s.id);
}

// every kernel, random columns: kb_remote and kb_local give the same bits
static void
test_remote_bit_exact(void)
{
	REQUIRE(local && remote);
	char err[AD_ERRLEN];
	int diffs = 0;
	for (int id = 0; id < local->n_kernels; id++) {
		const struct kb_info *k = &local->kernels[id];
		struct ad_surface li, lo, ri, ro;
		REQUIRE(local->surface_new(local, "i", k->in_ch, 0, &li, err) == 0);
		REQUIRE(local->surface_new(local, "o", k->out_ch, 0, &lo, err) == 0);
		char n1[32], n2[32];
		snprintf(n1, sizeof n1, "i%d", id);
		snprintf(n2, sizeof n2, "o%d", id);
		REQUIRE(remote->surface_new(remote, n1, k->in_ch, 0, &ri, err) == 0, "%s", err);
		REQUIRE(remote->surface_new(remote, n2, k->out_ch, 0, &ro, err) == 0, "%s", err);
		for (int ncols = 1; ncols <= W; ncols += W - 1) {
			float x[W * 1024];
			REQUIRE(k->in_ch * ncols <= W * 1024);
			for (int i = 0; i < k->in_ch * ncols; i++)
				x[i] = 3.0f * frand();
			surface_write(&li, x, (size_t)ncols, (size_t)k->in_ch);
			surface_write(&ri, x, (size_t)ncols, (size_t)k->in_ch);
			struct kb_timing tl, tr;
			REQUIRE(local->call(local, id, &li, &lo, ncols, &tl, err) == 0, "%s", err);
			REQUIRE(remote->call(remote, id, &ri, &ro, ncols, &tr, err) == 0, "%s", err);
			CHECK(tr.total_ns >= tr.exec_ns && tr.exec_ns > 0);
			for (int o = 0; o < k->out_ch; o++)
				if (memcmp((char *)lo.base + (size_t)o * lo.plane_stride,
				           (char *)ro.base + (size_t)o * ro.plane_stride, (size_t)ncols * 2) != 0)
					diffs++;
		}
	}
	CHECK(diffs == 0, "%d channels differ", diffs);
	// the backend's own checks
	struct ad_surface a, b;
	REQUIRE(remote->surface_new(remote, "a", 64, 0, &a, err) == 0);
	REQUIRE(remote->surface_new(remote, "b", 64, 0, &b, err) == 0);
	CHECK(remote->call(remote, local->n_kernels, &a, &b, 1, NULL, err) == -1 && strstr(err, "no kernel"), "%s",
	      err);
	CHECK(remote->call(remote, 1, &a, &b, 0, NULL, err) == -1);
	CHECK(remote->call(remote, 1, &a, &b, W + 1, NULL, err) == -1);
	CHECK(remote->call(remote, 1, &a, &a, 1, NULL, err) == -1);
	CHECK(remote->call(remote, 0, &a, &b, 1, NULL, err) == -1 && strstr(err, "channels"), "%s", err);
	CHECK(remote->call(remote, 1, &a, &b, 1, NULL, err) == 0, "%s", err);
}

static void
test_remote_errors(void)
{
	REQUIRE(worker > 0 && remote);
	char err[AD_ERRLEN];
	struct ad_client *c = ad_client_open(url, err);
	REQUIRE(c);
	REQUIRE(healthy(c));
	struct ad_surface a, b;
	REQUIRE(remote->surface_new(remote, "ea", 512, 0, &a, err) == 0);
	REQUIRE(remote->surface_new(remote, "eb", 512, 0, &b, err) == 0);
	CHECK(error_code(call_req(c, 1, a.id, b.id, 1)) == 0);
	CHECK(error_code(call_req(c, 9999, a.id, b.id, 1)) == ANEDVD__ERROR_CODE__ERROR_NOT_FOUND);
	CHECK(error_code(call_req(c, 1, a.id, b.id, 0)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	CHECK(error_code(call_req(c, 1, a.id, b.id, W + 1)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	CHECK(error_code(call_req(c, 1, a.id, a.id, 1)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	CHECK(error_code(call_req(c, 1, "/anedvd-1-no-such-surface", b.id, 1)) == ANEDVD__ERROR_CODE__ERROR_NOT_FOUND);
	CHECK(error_code(call_req(c, 1, a.id, "/anedvd-1-no-such-surface", 1)) == ANEDVD__ERROR_CODE__ERROR_NOT_FOUND);
	CHECK(error_code(call_req(c, 1, "no-slash", b.id, 1)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	CHECK(error_code(call_req(c, 1, "", b.id, 1)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	// a surface too small for the kernel (an object of 4 KiB)
	char small[64];
	snprintf(small, sizeof small, "/anedvd-%ld-small", (long)getpid());
	int fd = shm_open(small, O_RDWR | O_CREAT | O_EXCL, 0600);
	REQUIRE(fd >= 0);
	CHECK(ftruncate(fd, 4096) == 0);
	close(fd);
	CHECK(error_code(call_req(c, 1, small, b.id, 1)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	CHECK(error_code(call_req(c, (uint32_t)local->n_kernels - 1, a.id, small, 1)) ==
	      ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	shm_unlink(small);
	// undecodable bytes, an empty message, a request without a body
	const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
	CHECK(error_code(raw(c, junk, sizeof junk)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
	CHECK(error_code(req(c, &q)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	// a surface recreated under the same id is mapped again (no stale
	// mapping): zeros in the first object, ones in the second
	char sid[64];
	snprintf(sid, sizeof sid, "/anedvd-%ld-own", (long)getpid());
	static float x[512], y[512]; // surface_write / read move every channel
	struct ad_surface own;
	REQUIRE(surface_create(&own, sid, 512, W, 1, err) == 0, "%s", err);
	CHECK(error_code(call_req(c, 1, sid, b.id, 1)) == 0);
	surface_read(&b, y, 1, 512);
	int nonzero = 0;
	for (int i = 0; i < 64; i++)
		nonzero += y[i] != 0;
	CHECK(nonzero == 0);
	surface_close(&own);
	REQUIRE(surface_create(&own, sid, 512, W, 1, err) == 0, "%s", err);
	for (int i = 0; i < 512; i++)
		x[i] = 1.0f;
	surface_write(&own, x, 1, 512);
	CHECK(error_code(call_req(c, 1, sid, b.id, 1)) == 0);
	surface_read(&b, y, 1, 512);
	for (int i = 0; i < 64; i++)
		nonzero += y[i] != 0;
	CHECK(nonzero > 0, "output of a remapped input is all zero");
	surface_close(&own);
	// a synthetic probe kernel, compiled on request
	Anedvd__CompileRequest cq = ANEDVD__COMPILE_REQUEST__INIT;
	cq.probe_size = 32;
	cq.probe_seed = 99;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_COMPILE;
	q.compile = &cq;
	Anedvd__AneReply *r = req(c, &q);
	REQUIRE(r && !r->error && r->body_case == ANEDVD__ANE_REPLY__BODY_COMPILE);
	CHECK(r->compile->n_kernels == (size_t)local->n_kernels + 1 && r->compile->width == W);
	CHECK(r->compile->compile_budget == ANE_COMPILE_BUDGET && r->compile->surfaces_shared);
	CHECK(strcmp(r->compile->backend, "emu") == 0);
	const Anedvd__KernelInfo *pk = r->compile->kernels[local->n_kernels];
	CHECK(pk->kind == ANEDVD__KERNEL_KIND__KERNEL_PROBE && pk->in_channels == 32 && pk->layer == -1);
	uint32_t probe = pk->id;
	anedvd__ane_reply__free_unpacked(r, NULL);
	struct ad_surface pi, po;
	REQUIRE(remote->surface_new(remote, "pi", 32, 0, &pi, err) == 0);
	REQUIRE(remote->surface_new(remote, "po", 32, 0, &po, err) == 0);
	float px[32], py[32], wt[32 * 32];
	for (int i = 0; i < 32; i++)
		px[i] = frand();
	surface_write(&pi, px, 1, 32);
	surface_read(&pi, px, 1, 32);
	CHECK(error_code(call_req(c, probe, pi.id, po.id, 1)) == 0);
	surface_read(&po, py, 1, 32);
	ane_probe_weights(wt, 32 * 32, 99);
	double md = 0, mr = 0;
	for (int o = 0; o < 32; o++) {
		double s = 0;
		for (int i = 0; i < 32; i++)
			s += (double)ad_fp16_to_f32(ad_f32_to_fp16(wt[o * 32 + i])) * px[i];
		md = fmax(md, fabs(s - py[o]));
		mr = fmax(mr, fabs(s));
	}
	CHECK(md / mr < 0.01, "probe rel %g", md / mr);
	cq.probe_size = 100000;
	CHECK(error_code(req(c, &q)) == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
	// Stats counts the calls
	Anedvd__StatsRequest sq = ANEDVD__STATS_REQUEST__INIT;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_STATS;
	q.stats = &sq;
	r = req(c, &q);
	REQUIRE(r && !r->error && r->body_case == ANEDVD__ANE_REPLY__BODY_STATS);
	CHECK(r->stats->n_kernels == (size_t)local->n_kernels + 1 && r->stats->kernels[1]->calls >= 3 &&
	      r->stats->kernels[probe]->calls == 1);
	anedvd__ane_reply__free_unpacked(r, NULL);
	// still serving
	CHECK(healthy(c));
	ad_client_close(c);
}

// the round trip of a small kernel through the data plane: to the
// ane-worker's service on threads of this process (kb_local) and to the
// anedvd-ane-worker process (kb_remote)
static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static void
test_round_trip(void)
{
	REQUIRE(local && remote);
	char err[AD_ERRLEN];
	const int id = kb_find(local, ANE_K_O, 0, 0);
	REQUIRE(id >= 0);
	const struct kb_info *k = &local->kernels[id];
	struct kernel_backend *kbs[2] = {local, remote};
	static uint64_t ns[2][1000], ex[2][1000];
	for (int b = 0; b < 2; b++) {
		struct ad_surface i, o;
		REQUIRE(kbs[b]->surface_new(kbs[b], "rti", k->in_ch, 0, &i, err) == 0);
		REQUIRE(kbs[b]->surface_new(kbs[b], "rto", k->out_ch, 0, &o, err) == 0);
		for (int n = 0; n < 1000; n++) {
			struct kb_timing t;
			REQUIRE(kbs[b]->call(kbs[b], id, &i, &o, 1, &t, err) == 0, "%s", err);
			ns[b][n] = t.total_ns;
			ex[b][n] = t.exec_ns;
		}
		qsort(ns[b], 1000, sizeof ns[b][0], cmp_u64);
		qsort(ex[b], 1000, sizeof ex[b][0], cmp_u64);
		printf("round trip %-10s kernel %d (%s %d -> %d, 1 column), 1000 calls: median %.1f us, range %.1f .. %.1f us; "
		       "exec median %.1f us\n",
		       kbs[b]->name, id, "o", k->in_ch, k->out_ch, ns[b][500] / 1e3, ns[b][0] / 1e3, ns[b][999] / 1e3,
		       ex[b][500] / 1e3);
	}
	printf("process boundary per call (median remote total - median local total): %.1f us\n",
	       ((double)ns[1][500] - (double)ns[0][500]) / 1e3);
	CHECK(ns[1][500] > 0);
	// the transport alone: Health round trips on one client
	struct ad_client *c = ad_client_open(url, err);
	REQUIRE(c);
	for (int n = 0; n < 1000; n++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC, &a);
		CHECK(healthy(c));
		clock_gettime(CLOCK_MONOTONIC, &b);
		ns[0][n] = (uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec;
	}
	qsort(ns[0], 1000, sizeof ns[0][0], cmp_u64);
	printf("round trip Health (nng req/rep + protobuf, no kernel), 1000 calls: median %.1f us, range %.1f .. %.1f us\n",
	       ns[0][500] / 1e3, ns[0][0] / 1e3, ns[0][999] / 1e3);
	ad_client_close(c);
}

struct seq_state {
	int ncalls;
	atomic_int started;
	int failed;
	char err[AD_ERRLEN];
	struct ad_surface in[12], out[12];
};

static void *
run_sequence(void *p)
{
	struct seq_state *s = p;
	for (int n = 0; n < s->ncalls; n++) {
		int id = n % remote->n_kernels;
		atomic_store(&s->started, n + 1);
		struct kb_timing t;
		if (remote->call(remote, id, &s->in[n], &s->out[n], 1 + n % W, &t, s->err)) {
			s->failed = n + 1;
			return NULL;
		}
	}
	return NULL;
}

static void
test_kill_restart(void)
{
	REQUIRE(worker > 0 && remote && local);
	char err[AD_ERRLEN];
	// a worker that sleeps 300 ms in every call, so one is surely in flight
	kill(worker, SIGTERM);
	int st;
	waitpid(worker, &st, 0);
	worker = spawn_worker(300, 0);
	REQUIRE(worker > 0);
	struct seq_state *s = calloc(1, sizeof *s);
	s->ncalls = 12;
	static float x[12][W * 512];
	for (int n = 0; n < s->ncalls; n++) {
		const struct kb_info *k = &remote->kernels[n % remote->n_kernels];
		char a[16], b[16];
		snprintf(a, sizeof a, "ki%d", n);
		snprintf(b, sizeof b, "ko%d", n);
		REQUIRE(remote->surface_new(remote, a, k->in_ch, 0, &s->in[n], err) == 0);
		REQUIRE(remote->surface_new(remote, b, k->out_ch, 0, &s->out[n], err) == 0);
		for (int i = 0; i < k->in_ch * W; i++)
			x[n][i] = frand();
		surface_write(&s->in[n], x[n], W, (size_t)k->in_ch);
	}
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, run_sequence, s) == 0);
	// wait until call 4 is issued, let it reach the worker, then kill
	while (atomic_load(&s->started) < 4)
		usleep(1000);
	usleep(100 * 1000);
	int in_flight = atomic_load(&s->started);
	kill(worker, SIGKILL);
	waitpid(worker, &st, 0);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	// the supervisor's back-off, longer than the call timeout (2 s): the
	// pending call times out and kb_remote waits for a worker, then re-issues
	usleep(2500 * 1000);
	CHECK(atomic_load(&s->started) == in_flight, "the call in flight returned while no worker was up");
	worker = spawn_worker(0, 0);
	REQUIRE(worker > 0);
	pthread_join(th, NULL);
	CHECK(s->failed == 0, "call %d failed: %s", s->failed, s->err);
	printf("SIGKILL during call %d of %d: the sequence completed on the restarted worker\n", in_flight, s->ncalls);
	// every output, the interrupted one included, equals kb_local's
	int diffs = 0;
	for (int n = 0; n < s->ncalls; n++) {
		int id = n % remote->n_kernels;
		const struct kb_info *k = &local->kernels[id];
		struct ad_surface li, lo;
		REQUIRE(local->surface_new(local, "ki", k->in_ch, 0, &li, err) == 0);
		REQUIRE(local->surface_new(local, "ko", k->out_ch, 0, &lo, err) == 0);
		surface_write(&li, x[n], W, (size_t)k->in_ch);
		REQUIRE(local->call(local, id, &li, &lo, 1 + n % W, NULL, err) == 0);
		for (int o = 0; o < k->out_ch; o++)
			if (memcmp((char *)lo.base + (size_t)o * lo.plane_stride,
			           (char *)s->out[n].base + (size_t)o * s->out[n].plane_stride,
			           (size_t)(1 + n % W) * 2))
				diffs++;
	}
	CHECK(diffs == 0, "%d channels differ after the restart", diffs);
	free(s);
	// a worker that stays away: a clear error after the deadline
	struct kernel_backend *r2 = open_remote(0, 1500, err);
	REQUIRE(r2, "%s", err);
	kill(worker, SIGKILL);
	waitpid(worker, &st, 0);
	worker = -1;
	struct ad_surface a, b;
	REQUIRE(r2->surface_new(r2, "da", 64, 0, &a, err) == 0);
	REQUIRE(r2->surface_new(r2, "db", 64, 0, &b, err) == 0);
	CHECK(r2->call(r2, 1, &a, &b, 1, NULL, err) == -1 && strstr(err, "did not come back"), "%s", err);
	r2->free(r2);
	worker = spawn_worker(0, 0);
	REQUIRE(worker > 0);
}


// --- the data plane ---------------------------------------------------------------------

static Anedvd__AneReply *
attach_req(struct ad_client *c, const char *id)
{
	Anedvd__AttachRequest aq = ANEDVD__ATTACH_REQUEST__INIT;
	aq.object = (char *)id;
	Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_ATTACH;
	q.attach = &aq;
	return req(c, &q);
}

static uint64_t
kernel_calls(struct ad_client *c, uint32_t id)
{
	Anedvd__StatsRequest sq = ANEDVD__STATS_REQUEST__INIT;
	Anedvd__AneRequest q = ANEDVD__ANE_REQUEST__INIT;
	q.body_case = ANEDVD__ANE_REQUEST__BODY_STATS;
	q.stats = &sq;
	Anedvd__AneReply *r = req(c, &q);
	uint64_t n = r && !r->error && r->body_case == ANEDVD__ANE_REPLY__BODY_STATS && id < r->stats->n_kernels
	                     ? r->stats->kernels[id]->calls
	                     : UINT64_MAX;
	if (r)
		anedvd__ane_reply__free_unpacked(r, NULL);
	return n;
}

// one step on a raw object; the reply's status (or -100 - dp_call's rc)
static int
dp_step1(struct dp_chan *ch, uint32_t pid, uint32_t gen, uint32_t kernel, uint32_t ncols, uint16_t in, uint16_t out,
         const char *in_id, const char *out_id, struct dp_reply *rep)
{
	struct dp_request rq;
	memset(&rq, 0, sizeof rq);
	rq.op = DP_OP_CALL;
	rq.nsteps = 1;
	rq.step[0] = (struct dp_step){.kernel = kernel, .ncols = ncols, .in = in, .out = out};
	snprintf(rq.step[0].in_id, sizeof rq.step[0].in_id, "%s", in_id ? in_id : "");
	snprintf(rq.step[0].out_id, sizeof rq.step[0].out_id, "%s", out_id ? out_id : "");
	int slot = -1;
	int rc = dp_call(ch, &slot, &rq, rep, pid, gen, 5000);
	dp_release(ch, slot);
	return rc == DP_DONE ? rep->status : -100 + rc;
}

// one step as given on a raw object; the reply's status (or -100 - dp_call's rc)
static int
step_call(struct dp_chan *ch, uint32_t pid, uint32_t gen, const struct dp_step *st, struct dp_reply *rep)
{
	struct dp_request rq;
	memset(&rq, 0, sizeof rq);
	rq.op = DP_OP_CALL;
	rq.nsteps = 1;
	rq.step[0] = *st;
	int slot = -1;
	int rc = dp_call(ch, &slot, &rq, rep, pid, gen, 5000);
	dp_release(ch, slot);
	return rc == DP_DONE ? rep->status : -100 + rc;
}

// one DP_RESNORM step on a raw object; the reply's status
static int
rn_step(struct dp_chan *ch, uint32_t pid, uint32_t gen, uint32_t ncols, uint16_t y, uint16_t xn, struct dp_resnorm rn,
        struct dp_reply *rep)
{
	struct dp_request rq;
	memset(&rq, 0, sizeof rq);
	rq.op = DP_OP_CALL;
	rq.nsteps = 1;
	rq.step[0] = (struct dp_step){.kernel = DP_RESNORM, .ncols = ncols, .in = y, .out = xn, .rn = rn};
	int slot = -1;
	int rc = dp_call(ch, &slot, &rq, rep, pid, gen, 5000);
	dp_release(ch, slot);
	return rc == DP_DONE ? rep->status : -100 + rc;
}

// the residual-norm step in the worker (a fused call's CPU work): the bits
// of resnorm.h here, its vectors checked against the arena, and through
// kb_remote a list of kernels and steps equal to kb_local's
static void
test_resnorm_steps(void)
{
	REQUIRE(worker > 0 && remote && local);
	// a worker of two threads: a wide step splits over them
	kill(worker, SIGTERM);
	waitpid(worker, NULL, 0);
	worker_threads = "2";
	worker = spawn_worker(0, 0);
	worker_threads = "1";
	REQUIRE(worker > 0);
	char err[AD_ERRLEN], id[AD_SURFACE_ID_MAX], sy[AD_SURFACE_ID_MAX], sx[AD_SURFACE_ID_MAX];
	struct ad_client *c = ad_client_open(url, err);
	REQUIRE(c);
	for (int i = 0; i < 600 && !healthy(c); i++) // compiling
		usleep(50 * 1000);
	REQUIRE(healthy(c));
	const long me = (long)getpid();
	const int E = (int)stories.hp.n_embd, n = 3;
	REQUIRE(surface_id(id, sizeof id, me, "rn-dp") == 0 && surface_id(sy, sizeof sy, me, "rn-y") == 0 &&
	        surface_id(sx, sizeof sx, me, "rn-x") == 0);
	// the arena: x_in [n][E] at 0, x_out at 1024, w at 2048, bias at 2112, post at 2176
	struct dp_chan *ch = dp_create_arena(id, 4096 * sizeof(float), err);
	REQUIRE(ch, "%s", err);
	size_t ab = 0;
	float *ar = dp_arena(ch, &ab);
	REQUIRE(ar && ab >= 4096 * sizeof(float) && ((uintptr_t)ar & 63) == 0);
	Anedvd__AneReply *a = attach_req(c, id);
	REQUIRE(a && !a->error && a->body_case == ANEDVD__ANE_REPLY__BODY_ATTACH);
	uint32_t gen = a->attach->generation, pid = a->attach->pid;
	anedvd__ane_reply__free_unpacked(a, NULL);
	struct ad_surface Y, X;
	REQUIRE(surface_create(&Y, sy, (size_t)E, W, 1, err) == 0 && surface_create(&X, sx, (size_t)E, W, 1, err) == 0,
	        "%s", err);
	CHECK(dp_add_surface(ch, sy, (uint32_t)E, W, err) == 0 && dp_add_surface(ch, sx, (uint32_t)E, W, err) == 1);
	float y[3 * 512], xin[3 * 512], w[512], bias[512], post[512], want_x[3 * 512], want_n[3 * 512], got[3 * 512];
	REQUIRE(E <= 512);
	for (int i = 0; i < n * E; i++) {
		y[i] = 4.0f * frand();
		xin[i] = 8.0f * frand();
	}
	for (int i = 0; i < E; i++) {
		w[i] = 1.0f + frand();
		bias[i] = frand();
		post[i] = 0.5f + frand();
	}
	surface_write(&Y, y, n, (size_t)E);
	surface_read(&Y, y, n, (size_t)E); // what the step reads: y in fp16
	memcpy(ar, xin, sizeof(float) * (size_t)(n * E));
	memcpy(ar + 2048, w, sizeof(float) * (size_t)E);
	memcpy(ar + 2112, bias, sizeof(float) * (size_t)E);
	memcpy(ar + 2176, post, sizeof(float) * (size_t)E);
	const float eps = 1e-5f;
	struct ad_resnorm r = {E, eps, bias, post, w};
	ad_resnorm(&r, n, y, (size_t)E, xin, want_x, want_n, (size_t)E);
	struct dp_reply rep;
	struct dp_resnorm good = {(uint32_t)E, eps, 0, 1024, 2112, 2176, 2048};
	CHECK(rn_step(ch, pid, gen, n, 0, 1, good, &rep) == DP_OK && rep.exec_ns[0] > 0, "%s", rep.msg);
	CHECK(memcmp(ar + 1024, want_x, sizeof(float) * (size_t)(n * E)) == 0, "x_out differs");
	surface_read(&X, got, n, (size_t)E);
	float want16[3 * 512];
	surface_write(&X, want_n, n, (size_t)E); // xn as the surface holds it: fp16
	surface_read(&X, want16, n, (size_t)E);
	CHECK(memcmp(got, want16, sizeof(float) * (size_t)(n * E)) == 0, "xn differs");
	// all W columns: the worker splits a wide step over its threads; each
	// column as alone
	{
		float yw[W * 512], xw[W * 512], wx[W * 512], wn[W * 512], gn[W * 512];
		for (int i = 0; i < W * E; i++) {
			yw[i] = 4.0f * frand();
			xw[i] = 8.0f * frand();
		}
		surface_write(&Y, yw, W, (size_t)E);
		surface_read(&Y, yw, W, (size_t)E);
		memcpy(ar, xw, sizeof(float) * (size_t)(W * E));
		ad_resnorm(&r, W, yw, (size_t)E, xw, wx, wn, (size_t)E);
		struct dp_resnorm wide = {(uint32_t)E, eps, 0, 1024, 2112, 2176, 2048};
		REQUIRE(W * E <= 1024);
		CHECK(rn_step(ch, pid, gen, W, 0, 1, wide, &rep) == DP_OK, "%s", rep.msg);
		CHECK(memcmp(ar + 1024, wx, sizeof(float) * (size_t)(W * E)) == 0, "x_out differs, %d columns", W);
		surface_read(&X, gn, W, (size_t)E);
		surface_write(&X, wn, W, (size_t)E);
		surface_read(&X, wn, W, (size_t)E);
		CHECK(memcmp(gn, wn, sizeof(float) * (size_t)(W * E)) == 0, "xn differs, %d columns", W);
		memcpy(ar, xin, sizeof(float) * (size_t)(n * E));
	}
	// no y: x copied, then normed; no w: no xn written
	struct ad_resnorm r0 = {E, eps, NULL, NULL, w};
	ad_resnorm(&r0, n, NULL, 0, xin, want_x, want_n, (size_t)E);
	struct dp_resnorm noy = {(uint32_t)E, eps, 0, 1024, DP_NO_VEC, DP_NO_VEC, 2048};
	CHECK(rn_step(ch, pid, gen, n, DP_NO_SURF, 1, noy, &rep) == DP_OK, "%s", rep.msg);
	CHECK(memcmp(ar + 1024, want_x, sizeof(float) * (size_t)(n * E)) == 0, "x_out differs without y");
	// x_out may be x_in (the first step of a token)
	struct dp_resnorm same = {(uint32_t)E, eps, 0, 0, DP_NO_VEC, DP_NO_VEC, 2048};
	CHECK(rn_step(ch, pid, gen, n, DP_NO_SURF, 1, same, &rep) == DP_OK, "%s", rep.msg);
	CHECK(memcmp(ar, xin, sizeof(float) * (size_t)(n * E)) == 0, "x_in changed");
	// refusals: each names what is wrong and changes nothing
	memcpy(ar + 1024, xin, sizeof(float) * (size_t)(n * E));
	struct dp_resnorm bad[] = {
		{(uint32_t)E, eps, 4000, 1024, DP_NO_VEC, DP_NO_VEC, 2048},     // x_in past the arena
		{(uint32_t)E, eps, 0, 4096 - 10, DP_NO_VEC, DP_NO_VEC, 2048},   // x_out past the arena
		{(uint32_t)E, eps, 0, 1024, DP_NO_VEC, DP_NO_VEC, 4090},        // w past the arena
		{(uint32_t)E, eps, 0, 1024, 0xfffffff0u, DP_NO_VEC, 2048},      // bias past the arena
		{(uint32_t)E, eps, 0, (uint32_t)E, DP_NO_VEC, DP_NO_VEC, 2048}, // x_out overlaps x_in
		{0, eps, 0, 1024, DP_NO_VEC, DP_NO_VEC, 2048},                  // no channels
		{(uint32_t)E, -1.0f, 0, 1024, DP_NO_VEC, DP_NO_VEC, 2048},      // a negative eps
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		CHECK(rn_step(ch, pid, gen, n, 0, 1, bad[i], &rep) == DP_BAD_REQUEST && strstr(rep.msg, "resnorm"),
		      "bad step %zu: %d %s", i, rep.status, rep.msg);
	CHECK(rn_step(ch, pid, gen, W + 1, 0, 1, good, &rep) == DP_BAD_REQUEST, "%s", rep.msg);
	CHECK(rn_step(ch, pid, gen, n, 7, 1, good, &rep) == DP_NOT_FOUND && strstr(rep.msg, "not registered"), "%s",
	      rep.msg);
	good.E = (uint32_t)E + 1; // wider than the surfaces
	CHECK(rn_step(ch, pid, gen, n, 0, 1, good, &rep) == DP_BAD_REQUEST, "%s", rep.msg);
	CHECK(memcmp(ar + 1024, xin, sizeof(float) * (size_t)(n * E)) == 0, "a refused step wrote x_out");
	good.E = (uint32_t)E;
	// y and xn as arena rows (DP_HOST_IN, DP_HOST_OUT): y at 2400, xn at
	// 3000; the bits of the surfaces' step, xn unrounded
	{
		REQUIRE(n * E <= 500);
		memcpy(ar, xin, sizeof(float) * (size_t)(n * E));
		memcpy(ar + 2400, y, sizeof(float) * (size_t)(n * E)); // fp16 values, as the surface held them
		ad_resnorm(&r, n, y, (size_t)E, xin, want_x, want_n, (size_t)E);
		// the surfaces named too: the flags say which the step takes
		const struct dp_step rows = {.kernel = DP_RESNORM,
		                             .ncols = n,
		                             .in = 0,
		                             .out = 1,
		                             .rn = good,
		                             .host = DP_HOST_IN | DP_HOST_OUT,
		                             .in_off = 2400,
		                             .in_ld = (uint32_t)E,
		                             .out_off = 3000,
		                             .out_ld = (uint32_t)E};
		surface_write(&Y, xin, n, (size_t)E); // not y: the rows must be read
		float x16[3 * 512];
		surface_write(&X, xin, n, (size_t)E); // and not written
		surface_read(&X, x16, n, (size_t)E);
		CHECK(step_call(ch, pid, gen, &rows, &rep) == DP_OK, "%s", rep.msg);
		surface_read(&X, got, n, (size_t)E);
		CHECK(memcmp(got, x16, sizeof(float) * (size_t)(n * E)) == 0, "rows: the xn surface was written");
		CHECK(memcmp(ar + 1024, want_x, sizeof(float) * (size_t)(n * E)) == 0, "rows: x_out differs");
		CHECK(memcmp(ar + 3000, want_n, sizeof(float) * (size_t)(n * E)) == 0, "rows: xn differs");
		// y from the rows, xn to the surface (rounded to fp16 there)
		struct dp_step y_only = rows;
		y_only.host = DP_HOST_IN;
		CHECK(step_call(ch, pid, gen, &y_only, &rep) == DP_OK, "%s", rep.msg);
		surface_write(&X, want_n, n, (size_t)E);
		surface_read(&X, want16, n, (size_t)E);
		surface_write(&X, xin, n, (size_t)E);
		CHECK(step_call(ch, pid, gen, &y_only, &rep) == DP_OK, "%s", rep.msg);
		surface_read(&X, got, n, (size_t)E);
		CHECK(memcmp(got, want16, sizeof(float) * (size_t)(n * E)) == 0, "y rows, xn surface: xn differs");
		// y from the surface, xn to the rows
		struct dp_step xn_only = rows;
		xn_only.host = DP_HOST_OUT;
		surface_write(&Y, y, n, (size_t)E);
		memset(ar + 3000, 0, sizeof(float) * (size_t)(n * E));
		CHECK(step_call(ch, pid, gen, &xn_only, &rep) == DP_OK, "%s", rep.msg);
		CHECK(memcmp(ar + 3000, want_n, sizeof(float) * (size_t)(n * E)) == 0,
		      "y surface, xn rows: xn differs");
		// refusals: each says what is wrong and writes nothing
		struct dp_step badr[8] = {rows, rows, rows, rows, rows, rows, rows, rows};
		badr[0].out_off = 0;             // xn over x_in
		badr[1].out_off = 2400;          // xn over y
		badr[2].out_off = 2048 - 10;     // xn over w
		badr[3].out_off = 1024;          // xn over x_out
		badr[4].out_off = 4096 - 10;     // xn past the arena
		badr[5].in_off = 4096 - 10;      // y past the arena
		badr[6].in_ld = (uint32_t)E + 1; // rows of another width
		badr[7].host = DP_HOST_IN | 4;   // an unknown flag
		memcpy(ar + 1024, xin, sizeof(float) * (size_t)(n * E));
		memset(ar + 3000, 0, sizeof(float) * (size_t)(n * E));
		for (int i = 0; i < 8; i++)
			CHECK(step_call(ch, pid, gen, &badr[i], &rep) == DP_BAD_REQUEST && strstr(rep.msg, "resnorm"),
			      "bad rows step %d: %d %s", i, rep.status, rep.msg);
		CHECK(memcmp(ar + 1024, xin, sizeof(float) * (size_t)(n * E)) == 0, "a refused step wrote x_out");
		float zero[3 * 512] = {0};
		CHECK(memcmp(ar + 3000, zero, sizeof(float) * (size_t)(n * E)) == 0, "a refused step wrote xn");
		CHECK(memcmp(ar, xin, sizeof(float) * (size_t)(n * E)) == 0, "a refused step wrote x_in");
	}
	// a kernel's host rows (DP_HOST_IN, DP_HOST_OUT), of any stride: the
	// bits of the same call through the surfaces
	const int ko0 = kb_find(local, ANE_K_O, 0, 0);
	REQUIRE(ko0 >= 0 && local->kernels[ko0].in_ch == E && local->kernels[ko0].out_ch == E);
	{
		const uint32_t lin = (uint32_t)E + 3, lout = (uint32_t)E + 5;
		float xs[3 * 512], want[3 * 512], zero[3 * 512] = {0}, row[512];
		for (int i = 0; i < n * E; i++)
			xs[i] = 2.0f * frand();
		surface_write(&Y, xs, n, (size_t)E);
		CHECK(dp_step1(ch, pid, gen, (uint32_t)ko0, n, 0, 1, NULL, NULL, &rep) == DP_OK, "%s", rep.msg);
		surface_read(&X, want, n, (size_t)E);
		// the rows unrounded: the worker takes them as fp16, as the surface did
		for (int j = 0; j < n; j++)
			memcpy(ar + (size_t)j * lin, xs + (size_t)j * E, sizeof(float) * (size_t)E);
		const struct dp_step both = {.kernel = (uint32_t)ko0,
		                             .ncols = n,
		                             .in = 0,
		                             .out = 1,
		                             .host = DP_HOST_IN | DP_HOST_OUT,
		                             .in_off = 0,
		                             .in_ld = lin,
		                             .out_off = 1024,
		                             .out_ld = lout};
		surface_write(&Y, zero, n, (size_t)E); // not what the rows say
		CHECK(step_call(ch, pid, gen, &both, &rep) == DP_OK, "%s", rep.msg);
		for (int j = 0; j < n; j++)
			CHECK(memcmp(ar + 1024 + (size_t)j * lout, want + (size_t)j * E, sizeof(float) * (size_t)E) ==
			              0,
			      "host rows: column %d differs", j);
		// the input from the rows, the output to the surface
		struct dp_step in_only = both;
		in_only.host = DP_HOST_IN;
		surface_write(&X, zero, n, (size_t)E);
		CHECK(step_call(ch, pid, gen, &in_only, &rep) == DP_OK, "%s", rep.msg);
		float got3[3 * 512];
		surface_read(&X, got3, n, (size_t)E);
		CHECK(memcmp(got3, want, sizeof(float) * (size_t)(n * E)) == 0, "host input: the output differs");
		// the input from the surface, the output to the rows
		struct dp_step out_only = both;
		out_only.host = DP_HOST_OUT;
		out_only.out_off = 2400;
		surface_write(&Y, xs, n, (size_t)E);
		CHECK(step_call(ch, pid, gen, &out_only, &rep) == DP_OK, "%s", rep.msg);
		for (int j = 0; j < n; j++) {
			memcpy(row, ar + 2400 + (size_t)j * lout, sizeof(float) * (size_t)E);
			CHECK(memcmp(row, want + (size_t)j * E, sizeof(float) * (size_t)E) == 0,
			      "host output: column %d differs", j);
		}
		// refusals: each says what is wrong
		struct dp_step badh[5] = {both, both, both, both, both};
		badh[0].out_off = 4096 - 10;     // output rows past the arena
		badh[1].in_ld = (uint32_t)E - 1; // rows narrower than the channels
		badh[2].out_off = (uint32_t)E;   // output over the input rows
		badh[3].host = 4;                // an unknown flag
		badh[4].in_off = 0xfffffff0u;    // input rows past the arena
		for (int i = 0; i < 5; i++)
			CHECK(step_call(ch, pid, gen, &badh[i], &rep) == DP_BAD_REQUEST && strstr(rep.msg, "host"),
			      "bad host step %d: %d %s", i, rep.status, rep.msg);
	}
	dp_destroy(ch);
	// an object without an arena has no room for the vectors
	REQUIRE((ch = dp_create(id, err)), "%s", err);
	a = attach_req(c, id);
	REQUIRE(a && !a->error);
	gen = a->attach->generation;
	anedvd__ane_reply__free_unpacked(a, NULL);
	CHECK(dp_arena(ch, NULL) == NULL);
	CHECK(dp_add_surface(ch, sy, (uint32_t)E, W, err) == 0 && dp_add_surface(ch, sx, (uint32_t)E, W, err) == 1);
	good.E = (uint32_t)E;
	CHECK(rn_step(ch, pid, gen, n, 0, 1, good, &rep) == DP_BAD_REQUEST && strstr(rep.msg, "no arena"), "%s",
	      rep.msg);
	const struct dp_step rows = {
		.kernel = (uint32_t)ko0, .ncols = n, .in = 0, .out = 1, .host = DP_HOST_OUT, .out_ld = (uint32_t)E};
	CHECK(step_call(ch, pid, gen, &rows, &rep) == DP_BAD_REQUEST && strstr(rep.msg, "without an arena"), "%s",
	      rep.msg);
	dp_destroy(ch);
	surface_close(&Y);
	surface_close(&X);
	CHECK(healthy(c));
	ad_client_close(c);

	// kb_remote and kb_local: [O, resnorm, FFN] of layer 0 on host vectors
	// of their own, the same bits
	const int ko = kb_find(local, ANE_K_O, 0, 0), kf = kb_find(local, ANE_K_FFN, 0, 0);
	REQUIRE(ko >= 0 && kf >= 0);
	struct kernel_backend *kb[2] = {local, remote};
	float *xo[2];
	struct ad_surface s[2][4];
	static float xa[W * 512];
	for (int i = 0; i < W * 512; i++)
		xa[i] = frand();
	for (int b = 0; b < 2; b++) {
		float *hv = kb_host_alloc(kb[b], (size_t)(3 * W * E), err);
		REQUIRE(hv, "%s", err);
		static const char *nm[4] = {"rn-oi", "rn-oo", "rn-fi", "rn-fo"};
		const int ch4[4] = {local->kernels[ko].in_ch, E, E, E};
		for (int i = 0; i < 4; i++)
			REQUIRE(kb[b]->surface_new(kb[b], nm[i], ch4[i], 0, &s[b][i], err) == 0, "%s", err);
		REQUIRE(ch4[0] <= 512);
		surface_write(&s[b][0], xa, W, (size_t)ch4[0]);
		memcpy(hv, xin, sizeof(float) * (size_t)(n * E));
		memcpy(hv + W * E, w, sizeof(float) * (size_t)E);
		xo[b] = hv + 2 * W * E;
		const struct kb_step st[3] = {
			{.id = ko, .in = &s[b][0], .out = &s[b][1], .ncols = n},
			{.kind = KB_RESNORM,
		         .ncols = n,
		         .in = &s[b][1],
		         .out = &s[b][2],
		         .x_in = hv,
		         .x_out = xo[b],
		         .rn = {E, eps, NULL, NULL, hv + W * E}},
			{.id = kf, .in = &s[b][2], .out = &s[b][3], .ncols = n},
		};
		struct kb_timing t[3];
		REQUIRE(kb_call_list(kb[b], st, 3, t, err) == 0, "%s", err);
		CHECK(t[1].exec_ns > 0 && t[0].exec_ns > 0);
	}
	CHECK(memcmp(xo[0], xo[1], sizeof(float) * (size_t)(n * E)) == 0, "x_out: local and remote differ");
	int diffs = 0;
	for (int o = 0; o < E; o++)
		diffs += memcmp((char *)s[0][3].base + (size_t)o * s[0][3].plane_stride,
		                (char *)s[1][3].base + (size_t)o * s[1][3].plane_stride, (size_t)n * 2) != 0;
	CHECK(diffs == 0, "%d channels of the FFN's output differ", diffs);
	// O again on kb_remote, its input and output host rows (kb_step): in
	// the arena (the data plane moves them) and in this process's memory
	// (through the surfaces, here): the bits of its call above
	CHECK(remote->host_io && local->host_io);
	const int ci = local->kernels[ko].in_ch, li = ci + 1, lo = E + 2;
	static float want[W * 512], rows_in[W * 520], rows_out[W * 520];
	surface_read(&s[1][1], want, (size_t)n, (size_t)E);
	float *ar_in = kb_host_alloc(remote, (size_t)(n * li), err),
	      *ar_out = ar_in ? kb_host_alloc(remote, (size_t)(n * lo), err) : NULL;
	REQUIRE(ar_out, "%s", err);
	for (int v = 0; v < 2; v++) {
		float *in = v ? rows_in : ar_in, *out = v ? rows_out : ar_out;
		for (int j = 0; j < n; j++)
			memcpy(in + (size_t)j * li, xa + (size_t)j * ci, sizeof(float) * (size_t)ci);
		const struct kb_step st = {.id = ko,
		                           .in = &s[1][0],
		                           .out = &s[1][1],
		                           .ncols = n,
		                           .x_in = in,
		                           .x_out = out,
		                           .in_ld = li,
		                           .out_ld = lo};
		CHECK(kb_call_list(remote, &st, 1, NULL, err) == 0, "%s", err);
		for (int j = 0; j < n; j++)
			CHECK(memcmp(out + (size_t)j * lo, want + (size_t)j * E, sizeof(float) * (size_t)E) == 0,
			      "O's host rows (%s): column %d differs", v ? "this process's" : "the arena's", j);
	}
	// the same list handing over through host rows (kb_step's y_rows and
	// xn_rows, O's x_out, the FFN's x_in): the bits of the surfaces' list,
	// on kb_local (through the surfaces, here) and kb_remote (the arena)
	{
		static float ffn_want[W * 512], ffn_got[W * 512];
		surface_read(&s[0][3], ffn_want, (size_t)n, (size_t)E);
		for (int b = 0; b < 2; b++) {
			float *hv = kb_host_alloc(kb[b], (size_t)(4 * n * E), err);
			REQUIRE(hv, "%s", err);
			float *hx = hv, *hxo = hv + n * E, *hy = hv + 2 * n * E, *hxn = hv + 3 * n * E;
			memcpy(hx, xin, sizeof(float) * (size_t)(n * E));
			float zero[512] = {0};
			for (int i = 1; i < 4; i++) // what the surfaces say must not matter
				surface_write(&s[b][i], zero, 1, (size_t)E);
			const struct kb_step st[3] = {
				{.id = ko, .in = &s[b][0], .out = &s[b][1], .ncols = n, .x_out = hy, .out_ld = E},
				{.kind = KB_RESNORM,
			         .ncols = n,
			         .in = &s[b][1],
			         .out = &s[b][2],
			         .x_in = hx,
			         .x_out = hxo,
			         .rn = {E, eps, NULL, NULL, xo[b] - W * E},
			         .y_rows = hy,
			         .xn_rows = hxn},
				{.id = kf, .in = &s[b][2], .out = &s[b][3], .ncols = n, .x_in = hxn, .in_ld = E},
			};
			REQUIRE(kb_call_list(kb[b], st, 3, NULL, err) == 0, "%s", err);
			CHECK(memcmp(hxo, xo[0], sizeof(float) * (size_t)(n * E)) == 0, "rows (%s): x_out differs",
			      kb[b]->name);
			surface_read(&s[b][3], ffn_got, (size_t)n, (size_t)E);
			CHECK(memcmp(ffn_got, ffn_want, sizeof(float) * (size_t)(n * E)) == 0,
			      "rows (%s): the FFN's output differs", kb[b]->name);
		}
	}
}

static void
test_dataplane(void)
{
	REQUIRE(worker > 0 && remote && local);
	char err[AD_ERRLEN], id[AD_SURFACE_ID_MAX], sa[AD_SURFACE_ID_MAX], sb[AD_SURFACE_ID_MAX],
		nosuch[AD_SURFACE_ID_MAX];
	CHECK(kb_remote_ping(remote, 0, err) == 0, "kb_remote has no data plane: %s", err);
	CHECK(kb_remote_ping(remote, 1, err) == 0, "%s", err);
	struct ad_client *c = ad_client_open(url, err);
	REQUIRE(c);
	// an object that is not there
	CHECK(error_code(attach_req(c, "/anedvd-1-no-such-object")) == ANEDVD__ERROR_CODE__ERROR_NOT_FOUND);
	long me = (long)getpid();
	REQUIRE(surface_id(id, sizeof id, me, "raw-dp") == 0 && surface_id(sa, sizeof sa, me, "raw-a") == 0 &&
	        surface_id(sb, sizeof sb, me, "raw-b") == 0 && surface_id(nosuch, sizeof nosuch, me, "raw-none") == 0);
	struct dp_chan *ch = dp_create(id, err);
	REQUIRE(ch, "%s", err);
	Anedvd__AneReply *a = attach_req(c, id);
	REQUIRE(a && !a->error && a->body_case == ANEDVD__ANE_REPLY__BODY_ATTACH);
	uint32_t gen = a->attach->generation, pid = a->attach->pid;
	CHECK(pid == (uint32_t)worker && gen == 1 && a->attach->slots == DP_SLOTS &&
	      a->attach->max_steps == DP_MAX_STEPS);
	anedvd__ane_reply__free_unpacked(a, NULL);
	struct ad_surface A, B;
	REQUIRE(surface_create(&A, sa, 512, W, 1, err) == 0 && surface_create(&B, sb, 512, W, 1, err) == 0, "%s", err);
	int ia = dp_add_surface(ch, sa, 512, W, err), ib = dp_add_surface(ch, sb, 512, W, err);
	int imiss = dp_add_surface(ch, nosuch, 512, W, err), ismall = dp_add_surface(ch, sb, 1, W, err);
	int iwide = dp_add_surface(ch, sa, 512, 2 * W, err);
	CHECK(ia == 0 && ib == 1 && imiss == 2 && ismall == 3 && iwide == 4);
	const uint32_t k1 = 1;
	uint64_t calls0 = kernel_calls(c, k1);
	struct dp_reply rep;
	CHECK(dp_step1(ch, pid, gen, k1, 1, 0, 1, NULL, NULL, &rep) == DP_OK && rep.exec_ns[0] > 0, "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, W, 0, 1, NULL, NULL, &rep) == DP_OK, "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, 9999, 1, 0, 1, NULL, NULL, &rep) == DP_NOT_FOUND && strstr(rep.msg, "no kernel"),
	      "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, 0, 0, 1, NULL, NULL, &rep) == DP_BAD_REQUEST);
	CHECK(dp_step1(ch, pid, gen, k1, W + 1, 0, 1, NULL, NULL, &rep) == DP_BAD_REQUEST);
	CHECK(dp_step1(ch, pid, gen, k1, 1, 0, 0, NULL, NULL, &rep) == DP_BAD_REQUEST && strstr(rep.msg, "same"), "%s",
	      rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, 1, 200, 1, NULL, NULL, &rep) == DP_NOT_FOUND &&
	              strstr(rep.msg, "not registered"),
	      "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, 1, 0, (uint16_t)imiss, NULL, NULL, &rep) == DP_NOT_FOUND, "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, 1, (uint16_t)ismall, 1, NULL, NULL, &rep) == DP_BAD_REQUEST, "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, 1, (uint16_t)iwide, 1, NULL, NULL, &rep) == DP_BAD_REQUEST, "%s", rep.msg);
	// by id, like KernelCall
	CHECK(dp_step1(ch, pid, gen, k1, 1, DP_BY_NAME, DP_BY_NAME, sa, sb, &rep) == DP_OK, "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, 1, DP_BY_NAME, 1, nosuch, NULL, &rep) == DP_NOT_FOUND, "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, 1, DP_BY_NAME, 1, "no-slash", NULL, &rep) == DP_BAD_REQUEST, "%s", rep.msg);
	CHECK(dp_step1(ch, pid, gen, k1, 1, DP_BY_NAME, DP_BY_NAME, sa, sa, &rep) == DP_BAD_REQUEST, "%s", rep.msg);
	// a list whose second step fails: the first ran
	struct dp_request rq;
	memset(&rq, 0, sizeof rq);
	rq.op = DP_OP_CALL;
	rq.nsteps = 2;
	rq.step[0] = (struct dp_step){.kernel = k1, .ncols = 1, .in = 0, .out = 1};
	rq.step[1] = (struct dp_step){.kernel = 9999, .ncols = 1, .in = 0, .out = 1};
	int slot = -1;
	CHECK(dp_call(ch, &slot, &rq, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_NOT_FOUND &&
	      rep.done_steps == 1);
	rq.op = DP_OP_NOP;
	CHECK(dp_call(ch, &slot, &rq, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_OK);
	dp_release(ch, slot);
	// Stats counted the kernels that ran: 2 + 1 by id + 1 of the list
	CHECK(kernel_calls(c, k1) == calls0 + 4, "%llu calls after %llu", (unsigned long long)kernel_calls(c, k1),
	      (unsigned long long)calls0);
	// attached again: the old generation's thread steps back, the new serves
	a = attach_req(c, id);
	REQUIRE(a && !a->error && a->body_case == ANEDVD__ANE_REPLY__BODY_ATTACH);
	CHECK(a->attach->generation == gen + 1);
	anedvd__ane_reply__free_unpacked(a, NULL);
	CHECK(dp_step1(ch, pid, gen, k1, 1, 0, 1, NULL, NULL, &rep) == -100 + DP_CHANGED);
	CHECK(dp_step1(ch, pid, gen + 1, k1, 1, 0, 1, NULL, NULL, &rep) == DP_OK, "%s", rep.msg);
	dp_destroy(ch);
	surface_close(&A);
	surface_close(&B);
	CHECK(healthy(c));
	ad_client_close(c);

	// kb_remote's lists: longer than a slot holds, bit-equal to kb_local
	enum { N = DP_MAX_STEPS + 3 };
	struct ad_surface li[N], lo[N], ri[N], ro[N];
	struct kb_step ls[N], rs[N];
	struct kb_timing t[N];
	for (int i = 0; i < N; i++) {
		int kid = i % local->n_kernels;
		const struct kb_info *k = &local->kernels[kid];
		char n1[16], n2[16];
		snprintf(n1, sizeof n1, "li%d", i);
		snprintf(n2, sizeof n2, "lo%d", i);
		REQUIRE(local->surface_new(local, n1, k->in_ch, 0, &li[i], err) == 0);
		REQUIRE(local->surface_new(local, n2, k->out_ch, 0, &lo[i], err) == 0);
		REQUIRE(remote->surface_new(remote, n1, k->in_ch, 0, &ri[i], err) == 0);
		REQUIRE(remote->surface_new(remote, n2, k->out_ch, 0, &ro[i], err) == 0);
		static float x[W * 1024];
		for (int j = 0; j < k->in_ch * W; j++)
			x[j] = frand();
		surface_write(&li[i], x, W, (size_t)k->in_ch);
		surface_write(&ri[i], x, W, (size_t)k->in_ch);
		ls[i] = (struct kb_step){.id = kid, .in = &li[i], .out = &lo[i], .ncols = 1 + i % W};
		rs[i] = (struct kb_step){.id = kid, .in = &ri[i], .out = &ro[i], .ncols = 1 + i % W};
	}
	REQUIRE(kb_call_list(local, ls, N, NULL, err) == 0, "%s", err);
	REQUIRE(kb_call_list(remote, rs, N, t, err) == 0, "%s", err);
	int diffs = 0, times = 0;
	for (int i = 0; i < N; i++) {
		const struct kb_info *k = &local->kernels[ls[i].id];
		times += t[i].exec_ns > 0 && t[i].total_ns >= t[i].exec_ns;
		for (int o = 0; o < k->out_ch; o++)
			diffs += memcmp((char *)lo[i].base + (size_t)o * lo[i].plane_stride,
			                (char *)ro[i].base + (size_t)o * ro[i].plane_stride,
			                (size_t)ls[i].ncols * 2) != 0;
	}
	CHECK(diffs == 0, "%d channels differ", diffs);
	CHECK(times == N);
	// a bad step fails the list with its kernel named; an empty list is an error
	rs[1].ncols = W + 1;
	CHECK(kb_call_list(remote, rs, 3, NULL, err) == -1 && strstr(err, "columns"), "%s", err);
	CHECK(kb_call_list(remote, rs, 0, NULL, err) == -1);
	CHECK(kb_call_list(local, ls, 0, NULL, err) == -1);

	// the same calls over nng only
	struct kb_opts o = {
		.width = W, .url = url, .timeout_ms = 2000, .deadline_ms = 30000, .instance = me, .no_dataplane = 1};
	struct kernel_backend *nn = kb_remote_new(&stories, &o, err);
	REQUIRE(nn, "%s", err);
	CHECK(kb_remote_ping(nn, 0, err) == -1 && strstr(err, "no data plane"), "%s", err);
	struct ad_surface ni, no;
	const struct kb_info *k = &local->kernels[ls[0].id];
	REQUIRE(nn->surface_new(nn, "ni", k->in_ch, 0, &ni, err) == 0 &&
	        nn->surface_new(nn, "no", k->out_ch, 0, &no, err) == 0);
	memcpy(ni.base, li[0].base, ni.bytes < li[0].bytes ? ni.bytes : li[0].bytes);
	struct kb_step ns = {.id = ls[0].id, .in = &ni, .out = &no, .ncols = ls[0].ncols};
	CHECK(kb_call_list(nn, &ns, 1, t, err) == 0, "%s", err);
	diffs = 0;
	for (int oc = 0; oc < k->out_ch; oc++)
		diffs += memcmp((char *)lo[0].base + (size_t)oc * lo[0].plane_stride,
		                (char *)no.base + (size_t)oc * no.plane_stride, (size_t)ns.ncols * 2) != 0;
	CHECK(diffs == 0, "nng: %d channels differ", diffs);
	nn->free(nn);
}

static int
argmax(const float *v, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (v[i] > v[b])
			b = i;
	return b;
}

struct gen_state {
	struct kernel_backend *kb;
	int n;
	int32_t ids[64];
	atomic_int done_tokens;
	int rc, fused;
	int direct; // the logits in engine_logits_alloc's rows
	char err[AD_ERRLEN];
};

// greedy tokens from the story prompt on kb
static void *
generate(void *p)
{
	struct gen_state *g = p;
	static const int32_t prompt[] = {1, 403, 407, 261, 378};
	struct engine_opts eo = {.max_seq = 256};
	struct engine *e = engine_new(&stories, g->kb, &eo, g->err);
	struct engine_seq *s = e ? engine_seq_new(e, g->err) : NULL;
	float *lg = !e          ? NULL
	            : g->direct ? engine_logits_alloc(e, 1, g->err)
	                        : malloc(sizeof(float) * (size_t)engine_n_vocab(e));
	g->rc = -1;
	g->fused = e && engine_fused(e);
	if (s && lg && engine_prefill(e, s, prompt, 5, lg, g->err) == 0) {
		int i = 0;
		for (; i < g->n; i++) {
			g->ids[i] = argmax(lg, engine_n_vocab(e));
			atomic_store(&g->done_tokens, i + 1);
			if (i + 1 < g->n && engine_step(e, &s, &g->ids[i], 1, lg, g->err))
				break;
		}
		g->rc = i == g->n ? 0 : -1;
	}
	if (!g->direct)
		free(lg);
	engine_seq_free(s);
	engine_free(e);
	return NULL;
}

// logits in rows the LM head writes into (engine_logits_alloc): on
// kb_remote the bits of the logits copied out of the engine's own rows,
// in whichever row; one set per engine; none on kb_exact
static void
test_logits_rows(void)
{
	REQUIRE(worker > 0 && local);
	char err[AD_ERRLEN];
	struct kernel_backend *kb = open_remote(0, 30000, err);
	REQUIRE(kb, "%s", err);
	struct engine_opts eo = {.max_seq = 64};
	struct engine *e = engine_new(&stories, kb, &eo, err);
	REQUIRE(e, "%s", err);
	const int V = engine_n_vocab(e);
	float *rows = engine_logits_alloc(e, 2, err);
	CHECK(rows, "%s", err);
	err[0] = 0;
	CHECK(!engine_logits_alloc(e, 1, err) && strstr(err, "logits"), "a second set of rows: %s", err);
	float *own = malloc(sizeof(float) * (size_t)V);
	static const int32_t prompt[] = {1, 403, 407, 261, 378};
	struct engine_seq *a = engine_seq_new(e, err), *b = engine_seq_new(e, err);
	REQUIRE(a && b && rows && own, "%s", err);
	CHECK(engine_prefill(e, a, prompt, 5, own, err) == 0, "%s", err);
	CHECK(engine_prefill(e, b, prompt, 5, rows + V, err) == 0, "%s", err);
	CHECK(memcmp(own, rows + V, sizeof(float) * (size_t)V) == 0, "prefill: the logits differ");
	for (int i = 0; i < 4; i++) {
		int32_t t = argmax(own, V);
		CHECK(engine_step(e, &a, &t, 1, own, err) == 0, "%s", err);
		CHECK(engine_step(e, &b, &t, 1, rows + (i & 1) * V, err) == 0, "%s", err);
		CHECK(memcmp(own, rows + (i & 1) * V, sizeof(float) * (size_t)V) == 0, "decode %d: the logits differ",
		      i);
	}
	engine_seq_free(a);
	engine_seq_free(b);
	engine_free(e);
	kb->free(kb);
	// kb_exact's LM head writes no host rows: nothing to spare
	struct kernel_backend *x = kb_exact_new(&stories, &(struct kb_opts){.width = W}, err);
	REQUIRE(x, "%s", err);
	struct engine *xe = engine_new(&stories, x, &eo, err);
	REQUIRE(xe, "%s", err);
	err[0] = 0;
	CHECK(!engine_logits_alloc(xe, 1, err) && strstr(err, "logits"), "kb_exact: %s", err);
	engine_free(xe);
	x->free(x);
	free(own);
}

// an engine on kb_remote (the data plane) whose worker is SIGKILLed in the
// middle of the generation, with a call in flight, gives kb_local's tokens
static void
test_kill_generation(void)
{
	REQUIRE(local);
	char err[AD_ERRLEN];
	struct gen_state *lg = calloc(1, sizeof *lg), *rg = calloc(1, sizeof *rg);
	lg->kb = local;
	lg->n = rg->n = 24;
	generate(lg);
	REQUIRE(lg->rc == 0, "%s", lg->err);
	// every kernel takes 3 ms: a token about 50 ms, a call in flight at any time
	if (worker > 0) {
		kill(worker, SIGTERM);
		waitpid(worker, NULL, 0);
	}
	worker = spawn_worker(3, 0);
	REQUIRE(worker > 0);
	rg->kb = open_remote(0, 30000, err);
	REQUIRE(rg->kb, "%s", err);
	CHECK(kb_remote_ping(rg->kb, 0, err) == 0, "not on the data plane: %s", err);
	rg->direct = 1; // the LM head writing into them is re-posted too
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, generate, rg) == 0);
	while (atomic_load(&rg->done_tokens) < 4)
		usleep(1000);
	usleep(20 * 1000);
	int at = atomic_load(&rg->done_tokens);
	kill(worker, SIGKILL);
	waitpid(worker, NULL, 0);
	usleep(300 * 1000); // no worker for a while: the call waits
	CHECK(atomic_load(&rg->done_tokens) == at, "tokens came while no worker was up");
	worker = spawn_worker(0, 0);
	REQUIRE(worker > 0);
	pthread_join(th, NULL);
	CHECK(rg->rc == 0, "%s", rg->err);
	CHECK(at > 0 && at < rg->n, "killed after %d tokens", at);
	CHECK(memcmp(lg->ids, rg->ids, sizeof(int32_t) * (size_t)lg->n) == 0, "other tokens across the SIGKILL");
	// one call per layer: the kill lands inside a call of three kernels and
	// two resnorm steps, which is posted again whole
	CHECK(rg->fused, "the engine on kb_remote does not fuse its calls");
	CHECK(kb_remote_ping(rg->kb, 0, err) == 0, "the data plane did not come back: %s", err);
	printf("SIGKILL of the ane-worker after %d of %d tokens (data plane): the same tokens as kb_local\n", at,
	       rg->n);
	rg->kb->free(rg->kb);
	free(lg);
	free(rg);
}

// a worker hung in a kernel (here: 1 s per call against a timeout of
// 300 ms and a deadline of 600 ms) ends the call with an error, not a wait
static void
test_hung_worker(void)
{
	char err[AD_ERRLEN];
	if (worker > 0) {
		kill(worker, SIGTERM);
		waitpid(worker, NULL, 0);
	}
	worker = spawn_worker(1000, 0);
	REQUIRE(worker > 0);
	struct kb_opts o = {.width = W, .url = url, .timeout_ms = 300, .deadline_ms = 600, .instance = (long)getpid()};
	struct kernel_backend *kb = NULL;
	for (int i = 0; i < 100 && !kb; i++) // the worker may still be compiling
		if (!(kb = kb_remote_new(&stories, &o, err)))
			usleep(100 * 1000);
	REQUIRE(kb, "%s", err);
	CHECK(kb_remote_ping(kb, 0, err) == 0, "%s", err);
	struct ad_surface a, b;
	REQUIRE(kb->surface_new(kb, "ha", 64, 0, &a, err) == 0 && kb->surface_new(kb, "hb", 64, 0, &b, err) == 0);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(kb->call(kb, 1, &a, &b, 1, NULL, err) == -1 &&
	              (strstr(err, "did not come back") || strstr(err, "deadline")),
	      "%s", err);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("a hung worker (1 s per kernel; timeout 300 ms, deadline 600 ms): the call failed after %.2f s: %s\n",
	       (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9, err);
	kb->free(kb);
	kill(worker, SIGKILL);
	waitpid(worker, NULL, 0);
	worker = spawn_worker(0, 0);
	REQUIRE(worker > 0);
}

// the polling doorbell (ANEDVD_DP_DOORBELL=sleep) on both sides: the same
// bits as kb_local
static void
test_sleep_doorbell(void)
{
	REQUIRE(local);
	char err[AD_ERRLEN];
	if (worker > 0) {
		kill(worker, SIGTERM);
		waitpid(worker, NULL, 0);
	}
	setenv("ANEDVD_DP_DOORBELL", "sleep", 1);
	worker = spawn_worker(0, 0);
	REQUIRE(worker > 0);
	struct kernel_backend *kb = open_remote(0, 30000, err);
	unsetenv("ANEDVD_DP_DOORBELL");
	REQUIRE(kb, "%s", err);
	CHECK(kb_remote_ping(kb, 0, err) == 0, "%s", err);
	int diffs = 0;
	for (int id = 0; id < local->n_kernels; id++) {
		const struct kb_info *k = &local->kernels[id];
		struct ad_surface li, lo, ri, ro;
		char n1[16], n2[16];
		snprintf(n1, sizeof n1, "si%d", id);
		snprintf(n2, sizeof n2, "so%d", id);
		REQUIRE(local->surface_new(local, n1, k->in_ch, 0, &li, err) == 0 &&
		        local->surface_new(local, n2, k->out_ch, 0, &lo, err) == 0);
		REQUIRE(kb->surface_new(kb, n1, k->in_ch, 0, &ri, err) == 0 &&
		                kb->surface_new(kb, n2, k->out_ch, 0, &ro, err) == 0,
		        "%s", err);
		static float x[W * 1024];
		for (int i = 0; i < k->in_ch * W; i++)
			x[i] = frand();
		surface_write(&li, x, W, (size_t)k->in_ch);
		surface_write(&ri, x, W, (size_t)k->in_ch);
		REQUIRE(local->call(local, id, &li, &lo, W, NULL, err) == 0, "%s", err);
		REQUIRE(kb->call(kb, id, &ri, &ro, W, NULL, err) == 0, "%s", err);
		for (int o = 0; o < k->out_ch; o++)
			diffs += memcmp((char *)lo.base + (size_t)o * lo.plane_stride,
			                (char *)ro.base + (size_t)o * ro.plane_stride, (size_t)W * 2) != 0;
	}
	CHECK(diffs == 0, "%d channels differ", diffs);
	kb->free(kb);
	kill(worker, SIGTERM);
	waitpid(worker, NULL, 0);
	worker = spawn_worker(0, 0);
	REQUIRE(worker > 0);
}

static int
shm_count(long pid)
{
	char prefix[64];
	snprintf(prefix, sizeof prefix, "anedvd-%ld-", pid);
	DIR *d = opendir("/dev/shm");
	int n = 0;
	struct dirent *e;
	while (d && (e = readdir(d)))
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	if (d)
		closedir(d);
	return n;
}

static void
test_sigterm(void)
{
	REQUIRE(worker > 0);
	char err[AD_ERRLEN];
	struct ad_client *c = ad_client_open(url, err);
	REQUIRE(c);
	int up = 0;
	for (int i = 0; i < 100 && !up; i++) {
		up = healthy(c);
		if (!up)
			usleep(50 * 1000);
	}
	CHECK(up);
	ad_client_close(c);
	kill(worker, SIGTERM);
	int st;
	waitpid(worker, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
	CHECK(shm_count(worker) == 0);
	worker = -1;
	remote->free(remote);
	remote = NULL;
	// kb_local's surfaces are shared memory of this process too
	local->free(local);
	local = NULL;
	CHECK(shm_count(getpid()) == 0, "our surfaces are left after free");
	model_free(&stories);
}

static void
test_bad_args(void)
{
	char *argv1[] = {WORKER_BIN, "--chunk", "zero", NULL};
	char *argv2[] = {WORKER_BIN, "--model", T_DATA "/models/README.md", "--listen", url, NULL};
	char *argv3[] = {WORKER_BIN, "--model", STORIES, "--listen", url, "--backend", "gpu", NULL};
	char **all[] = {argv1, argv2, argv3};
	for (int i = 0; i < 3; i++) {
		pid_t pid = start(all[i]);
		REQUIRE(pid > 0);
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0, "case %d: status %d", i, st);
	}
}

int
main(void)
{
	signal(SIGPIPE, SIG_IGN);
	T_RUN(test_plan_fixtures);
	T_RUN(test_local_vs_fp32);
	T_RUN(test_head_chunks);
	T_RUN(test_build_files);
	T_RUN(test_process_start);
	T_RUN(test_health_while_building);
	T_RUN(test_remote_bit_exact);
	T_RUN(test_remote_errors);
	T_RUN(test_round_trip);
	T_RUN(test_kill_restart);
	T_RUN(test_dataplane);
	T_RUN(test_resnorm_steps);
	T_RUN(test_logits_rows);
	T_RUN(test_kill_generation);
	T_RUN(test_hung_worker);
	T_RUN(test_sleep_doorbell);
	T_RUN(test_sigterm);
	T_RUN(test_bad_args);
	if (worker > 0) {
		kill(worker, SIGKILL);
		waitpid(worker, NULL, 0);
	}
	return t_done();
}
