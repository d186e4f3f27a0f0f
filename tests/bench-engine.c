// bench-engine.c - the pipeline on a written llama model: prefill speed and
// the decode split (kernel, IPC, attention, other CPU) at several contexts.
//
//   bench-engine [emu|exact] [n_embd n_layer n_ff n_vocab n_head n_head_kv]
//   bench-engine --model M [--tokens N] [--weights fp16|int8] [--threads T]
//
// With --model: a real model file, its kernels run in this process
// (kb_local: the same emu programs the ane-worker runs, with no process
// boundary); prints decode tok/s after a 64-token prompt, the median and
// range of 5 runs of N tokens (default 64), with the split. Set beside
// `anedvd run --json` on the same file, the difference is what the
// boundary between the workers costs.
//
// Defaults: emu, a Qwen2.5-0.5B-shaped block (896, 14/2 heads of 64, n_ff
// 4864) but 4 layers and a 32000 vocabulary, width 64. Each figure is the
// median [min..max] of 5 runs of 16 decode steps after a prefill to that
// context. Built, not run by ctest.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "engine.h"
#include "gguf.h"
#include "model.h"
#include "wtype.h"

static double
now(void)
{
	return (double)ad_now_ns() / 1e9;
}

static int
tensor(struct gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, float base)
{
	char err[AD_ERRLEN];
	size_t n = (size_t)(ne0 * ne1);
	float *d = malloc(n * sizeof *d);
	uint32_t r = 1;
	for (size_t i = 0; i < n; i++) {
		r = r * 1664525u + 1013904223u;
		d[i] = base + 0.05f * ((float)(r >> 8) / 16777216.0f - 0.5f);
	}
	int64_t ne[2] = {ne0, ne1};
	int rc = gguf_writer_tensor(w, name, AD_TYPE_F32, ne1 > 1 ? 2 : 1, ne, d, n * sizeof *d, err);
	if (rc)
		fprintf(stderr, "%s\n", err);
	free(d);
	return rc;
}

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

#define RUNS 5

static int
bench_model(int argc, char **argv)
{
	const char *path = NULL;
	int ntok = 64, threads = 2, weights = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--model") && i + 1 < argc)
			path = argv[++i];
		else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
			ntok = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--weights") && i + 1 < argc) {
			const char *v = argv[++i];
			if (strcmp(v, "fp16") && strcmp(v, "int8")) {
				fprintf(stderr, "bench-engine: --weights fp16 or int8\n");
				return 2;
			}
			weights = !strcmp(v, "int8");
		} else {
			fprintf(stderr,
			        "usage: bench-engine --model M [--tokens N] [--weights fp16|int8] [--threads T]\n");
			return 2;
		}
	}
	if (!path || ntok < 1 || threads < 1) {
		fprintf(stderr, "usage: bench-engine --model M [--tokens N] [--weights fp16|int8] [--threads T]\n");
		return 2;
	}
	char err[AD_ERRLEN];
	struct model m;
	if (model_load(&m, path, err)) {
		fprintf(stderr, "bench-engine: %s\n", err);
		return 1;
	}
	struct kb_opts ko = {.width = 64, .threads = threads, .weights = weights};
	double t0 = now();
	struct kernel_backend *kb = kb_local_new(&m, &ko, err);
	struct engine *e = kb ? engine_new(&m, kb, &(struct engine_opts){.max_seq = 64 + ntok + 1}, err) : NULL;
	struct engine_seq *s = e ? engine_seq_new(e, err) : NULL;
	if (!s) {
		fprintf(stderr, "bench-engine: %s\n", err);
		return 1;
	}
	const int V = engine_n_vocab(e);
	printf("%s: %s weights, %d threads, in this process, ready in %.2f s\n", path, weights ? "int8" : "fp16",
	       threads, now() - t0);
	float *lg = malloc((size_t)V * sizeof *lg);
	int32_t ids[64];
	for (int i = 0; i < 64; i++)
		ids[i] = 1 + i;
	double pf[RUNS], tk[RUNS], kn[RUNS], at[RUNS], ot[RUNS];
	for (int run = 0; run < RUNS; run++) {
		engine_seq_reset(s);
		t0 = now();
		if (engine_prefill(e, s, ids, 64, lg, err)) {
			fprintf(stderr, "bench-engine: %s\n", err);
			return 1;
		}
		pf[run] = 64 / (now() - t0);
		struct gen_timings b = *engine_seq_timings(s);
		int32_t tok = 1;
		t0 = now();
		for (int i = 0; i < ntok; i++) {
			if (engine_step(e, &s, &tok, 1, lg, err)) {
				fprintf(stderr, "bench-engine: %s\n", err);
				return 1;
			}
			int best = 0; // greedy, as a run at temperature 0
			for (int v = 1; v < V; v++)
				if (lg[v] > lg[best])
					best = v;
			tok = best;
		}
		double dt = now() - t0;
		tk[run] = ntok / dt;
		const struct gen_timings *t = engine_seq_timings(s);
		kn[run] = (double)(t->kernel_ns - b.kernel_ns) / 1e6 / ntok;
		at[run] = (double)(t->attention_ns - b.attention_ns) / 1e6 / ntok;
		ot[run] = dt * 1e3 / ntok - kn[run] - at[run];
	}
	double *all[] = {pf, tk, kn, at, ot};
	for (int i = 0; i < 5; i++)
		qsort(all[i], RUNS, sizeof(double), cmp);
	printf("prefill-64 %.1f tok/s [%.1f..%.1f]; decode %.1f tok/s [%.1f..%.1f]; per token: kernels %.2f ms, "
	       "attention %.3f, the rest %.3f (medians)\n",
	       pf[RUNS / 2], pf[0], pf[RUNS - 1], tk[RUNS / 2], tk[0], tk[RUNS - 1], kn[RUNS / 2], at[RUNS / 2],
	       ot[RUNS / 2]);
	free(lg);
	engine_seq_free(s);
	kb->free(kb);
	engine_free(e);
	model_free(&m);
	return 0;
}

int
main(int argc, char **argv)
{
	if (argc > 1 && !strncmp(argv[1], "--", 2))
		return bench_model(argc, argv);
	int64_t E = 896, L = 4, FF = 4864, V = 32000, H = 14, KV = 2;
	int exact = argc > 1 && !strcmp(argv[1], "exact");
	if (argc == 8) {
		E = atoll(argv[2]);
		L = atoll(argv[3]);
		FF = atoll(argv[4]);
		V = atoll(argv[5]);
		H = atoll(argv[6]);
		KV = atoll(argv[7]);
	}
	char path[512], name[96], err[AD_ERRLEN];
	const char *tmp = getenv("TMPDIR");
	snprintf(path, sizeof path, "%s/anedvd-bench-engine-%d.gguf", tmp ? tmp : "/tmp", (int)getpid());
	struct gguf_writer *w = gguf_writer_new();
	gguf_writer_str(w, "general.architecture", "llama");
	gguf_writer_u32(w, "llama.embedding_length", (uint32_t)E);
	gguf_writer_u32(w, "llama.block_count", (uint32_t)L);
	gguf_writer_u32(w, "llama.feed_forward_length", (uint32_t)FF);
	gguf_writer_u32(w, "llama.attention.head_count", (uint32_t)H);
	gguf_writer_u32(w, "llama.attention.head_count_kv", (uint32_t)KV);
	int rc = tensor(w, "token_embd.weight", E, V, 0) || tensor(w, "output_norm.weight", E, 1, 1) ||
	         tensor(w, "output.weight", E, V, 0);
	const int64_t hd = E / H;
	for (int il = 0; il < L && !rc; il++) {
#define T(what, a, b, base) (snprintf(name, sizeof name, "blk.%d." what, il), tensor(w, name, a, b, base))
		rc = T("attn_norm.weight", E, 1, 1) || T("attn_q.weight", E, E, 0) ||
		     T("attn_k.weight", E, KV * hd, 0) || T("attn_v.weight", E, KV * hd, 0) ||
		     T("attn_output.weight", E, E, 0) || T("ffn_norm.weight", E, 1, 1) ||
		     T("ffn_gate.weight", E, FF, 0) || T("ffn_up.weight", E, FF, 0) || T("ffn_down.weight", FF, E, 0);
#undef T
	}
	if (rc || gguf_writer_save(w, path, err)) {
		fprintf(stderr, "bench-engine: cannot write the model\n");
		return 1;
	}
	gguf_writer_free(w);
	struct model m;
	int ok = model_load(&m, path, err) == 0;
	unlink(path);
	if (!ok) {
		fprintf(stderr, "bench-engine: %s\n", err);
		return 1;
	}

	struct kb_opts ko = {.width = 64, .threads = 2};
	double t0 = now();
	struct kernel_backend *kb = exact ? kb_exact_new(&m, &ko, err) : kb_local_new(&m, &ko, err);
	if (!kb) {
		fprintf(stderr, "bench-engine: %s\n", err);
		return 1;
	}
	printf("model: n_embd %lld, %lld layers, heads %lld/%lld x%lld, n_ff %lld, vocab %lld (%.1f M params); "
	       "backend %s, width %d, ready in %.2f s\n",
	       (long long)E, (long long)L, (long long)H, (long long)KV, (long long)hd, (long long)FF, (long long)V,
	       (double)m.n_params / 1e6, kb->name, kb->width, now() - t0);
	struct engine *e = engine_new(&m, kb, &(struct engine_opts){.max_seq = 4096 + 64}, err);
	struct engine_seq *s = e ? engine_seq_new(e, err) : NULL;
	if (!s) {
		fprintf(stderr, "bench-engine: %s\n", err);
		return 1;
	}
	float *lg = malloc((size_t)V * sizeof *lg);
	int32_t *ids = malloc(sizeof(int32_t) * (4096 + 64));
	for (int i = 0; i < 4096 + 64; i++)
		ids[i] = (int32_t)((i * 7919) % V);
	static const int ctxs[] = {16, 256, 1024, 4096};
	printf("ctx    prefill tok/s       decode ms/token       kernel     ipc   attention   other (ms/token, medians)\n");
	for (size_t ci = 0; ci < sizeof ctxs / sizeof *ctxs; ci++) {
		const int ctx = ctxs[ci], nd = 16;
		double pf[RUNS], dt[RUNS], kn[RUNS], ipc[RUNS], at[RUNS], ot[RUNS];
		for (int run = 0; run < RUNS; run++) {
			engine_seq_reset(s);
			t0 = now();
			if (engine_prefill(e, s, ids, ctx, lg, err)) {
				fprintf(stderr, "bench-engine: %s\n", err);
				return 1;
			}
			pf[run] = ctx / (now() - t0);
			struct gen_timings b = *engine_seq_timings(s);
			t0 = now();
			for (int i = 0; i < nd; i++)
				if (engine_step(e, &s, &ids[ctx + i], 1, lg, err)) {
					fprintf(stderr, "bench-engine: %s\n", err);
					return 1;
				}
			dt[run] = (now() - t0) * 1e3 / nd;
			const struct gen_timings *t = engine_seq_timings(s);
			kn[run] = (double)(t->kernel_ns - b.kernel_ns) / 1e6 / nd;
			ipc[run] = (double)(t->ipc_ns - b.ipc_ns) / 1e6 / nd;
			at[run] = (double)(t->attention_ns - b.attention_ns) / 1e6 / nd;
			ot[run] = (double)(t->cpu_other_ns - b.cpu_other_ns) / 1e6 / nd;
		}
		double *all[] = {pf, dt, kn, ipc, at, ot};
		for (int i = 0; i < 6; i++)
			qsort(all[i], RUNS, sizeof(double), cmp);
		printf("%4d  %7.1f [%.1f..%.1f]  %7.2f [%.2f..%.2f]  %8.2f  %6.3f  %9.3f  %6.3f\n", ctx, pf[RUNS / 2],
		       pf[0], pf[RUNS - 1], dt[RUNS / 2], dt[0], dt[RUNS - 1], kn[RUNS / 2], ipc[RUNS / 2],
		       at[RUNS / 2], ot[RUNS / 2]);
	}
	free(lg);
	free(ids);
	engine_seq_free(s);
	kb->free(kb); // before the engine: kb_local holds the engine's surface structs
	engine_free(e);
	model_free(&m);
	return 0;
}
