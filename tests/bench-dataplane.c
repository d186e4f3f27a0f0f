// bench-dataplane - the round trip of a kernel call, data plane against nng.
//
//   bench-dataplane [MODEL] [CALLS] [REPEATS]
//
// Starts an anedvd-ane-worker on MODEL (default stories260K, chunk 16, one
// emu thread) and two kb_remote backends on it, one with the data plane and
// one without (every call over nng), then prints per call, median and range
// of REPEATS (default 5) runs of CALLS (default 20000; a tenth of that over
// nng, which is ~15x slower):
//   - the empty round trip: a NOP through the data plane; a Health request
//     over nng (the smallest message the worker answers);
//   - a one-kernel call (the model's smallest kernel, and its largest, one
//     column), with its time inside the worker, through both: for a long
//     kernel the caller sleeps, and being woken is the overhead;
//   - the first layer's FFN kernel (a decode call's usual size), called back
//     to back and with 20 us of the caller's own work between two calls
//     (as a decode step's attention), timed without that work;
//   - the LM head as one call (call_list) against one call per chunk.
// Not a test: figures only. The machine's load shows in the ranges.
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "ipc.h"
#include "kernels.h"
#include "model.h"

extern char **environ;

static int
cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void
report(const char *what, double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	printf("  %-44s median %8.2f us   range %8.2f .. %8.2f  (%d runs)\n", what, v[n / 2], v[0], v[n - 1], n);
}

struct ctx {
	struct kernel_backend *kb;
	int id, big, ffn;
	struct ad_surface *in, *out, *bin, *bout, *fin, *fout;
	struct kb_step *head;
	int nhead;
	uint64_t exec;
	uint64_t gap_ns; // the caller's own work before each call (not timed)
};

enum what { PING_DP, PING_NNG, KERNEL, BIG, FFN, HEAD_LIST, HEAD_EACH };

// the caller busy for ns, on its own data (a decode step's attention reads
// its cache between two calls)
static void
busy(uint64_t ns)
{
	static volatile float sink[4096];
	const uint64_t end = ad_now_ns() + ns;
	for (int i = 0; ad_now_ns() < end; i = (i + 1) & 4095)
		sink[i] = sink[i] * 0.5f + 1.0f;
}

static int
once(struct ctx *c, enum what w, char *err)
{
	struct kb_timing t[64];
	switch (w) {
	case PING_DP:
		return kb_remote_ping(c->kb, 0, err);
	case PING_NNG:
		return kb_remote_ping(c->kb, 1, err);
	case KERNEL:
		if (c->kb->call(c->kb, c->id, c->in, c->out, 1, t, err))
			return -1;
		c->exec += t[0].exec_ns;
		return 0;
	case BIG:
		if (c->kb->call(c->kb, c->big, c->bin, c->bout, 1, t, err))
			return -1;
		c->exec += t[0].exec_ns;
		return 0;
	case FFN:
		if (c->kb->call(c->kb, c->ffn, c->fin, c->fout, 1, t, err))
			return -1;
		c->exec += t[0].exec_ns;
		return 0;
	case HEAD_LIST:
		return kb_call_list(c->kb, c->head, c->nhead, t, err);
	case HEAD_EACH:
		return kb_call_loop(c->kb, c->head, c->nhead, t, err);
	}
	return -1;
}

static int
bench(const char *what, struct ctx *c, enum what w, int calls, int reps)
{
	char err[AD_ERRLEN];
	double v[64];
	double exec = 0;
	for (int i = 0; i < calls / 10 + 1; i++) // warm up
		if (once(c, w, err))
			return fprintf(stderr, "%s: %s\n", what, err), -1;
	for (int r = 0; r < reps; r++) {
		c->exec = 0;
		uint64_t in_calls = 0, t0 = ad_now_ns();
		for (int i = 0; i < calls; i++) {
			if (c->gap_ns)
				busy(c->gap_ns);
			const uint64_t t1 = ad_now_ns();
			if (once(c, w, err))
				return fprintf(stderr, "%s: %s\n", what, err), -1;
			in_calls += ad_now_ns() - t1;
		}
		v[r] = (double)(c->gap_ns ? in_calls : ad_now_ns() - t0) / 1e3 / calls;
		exec += (double)c->exec / 1e3 / calls;
	}
	report(what, v, reps);
	if (w == KERNEL || w == BIG || w == FFN)
		printf("  %-44s mean   %8.2f us inside the worker\n", "", exec / reps);
	return 0;
}

int
main(int argc, char **argv)
{
	const char *model = argc > 1 ? argv[1] : T_DATA "/stories260K/stories260K.gguf";
	int calls = argc > 2 ? atoi(argv[2]) : 20000, reps = argc > 3 ? atoi(argv[3]) : 5;
	if (calls < 10)
		calls = 10;
	if (reps < 1 || reps > 64)
		reps = 5;
	signal(SIGPIPE, SIG_IGN);
	char err[AD_ERRLEN], url[300], dir[] = "/tmp/bench-dp.XXXXXX";
	if (!mkdtemp(dir) || ad_ipc_url(url, sizeof url, dir, "ane"))
		return fprintf(stderr, "no scratch directory\n"), 1;
	struct model m;
	if (model_load(&m, model, err))
		return fprintf(stderr, "%s\n", err), 1;
	char *av[] = {ANE_WORKER_BIN, "--model", (char *)model, "--listen", url,
	              "--chunk",      "16",      "--threads",   "1",        NULL};
	pid_t ane;
	if (posix_spawn(&ane, av[0], NULL, NULL, av, environ) != 0)
		return fprintf(stderr, "cannot start %s\n", av[0]), 1;
	int rc = 1;
	struct kb_opts o = {.width = 16, .url = url, .timeout_ms = 30000, .deadline_ms = 60000};
	struct kernel_backend *dp = kb_remote_new(&m, &o, err);
	o.no_dataplane = 1;
	struct kernel_backend *nn = dp ? kb_remote_new(&m, &o, err) : NULL;
	if (!dp || !nn) {
		fprintf(stderr, "%s\n", err);
		goto out;
	}
	// the smallest kernel, the largest, layer 0's FFN (or its GATE_UP), and
	// the LM head's chunks
	int id = 0, big = 0, ffn = -1;
	struct kb_step head[64];
	int nhead = 0;
	for (int i = 0; i < dp->n_kernels; i++) {
		if (dp->kernels[i].weight_bytes < dp->kernels[id].weight_bytes && dp->kernels[i].kind != ANE_K_PROBE)
			id = i;
		if (dp->kernels[i].weight_bytes > dp->kernels[big].weight_bytes && dp->kernels[i].kind != ANE_K_PROBE)
			big = i;
		if (ffn < 0 && (dp->kernels[i].kind == ANE_K_FFN || dp->kernels[i].kind == ANE_K_GATE_UP))
			ffn = i;
		if (dp->kernels[i].kind == ANE_K_LM_HEAD && nhead < 64)
			head[nhead++] = (struct kb_step){.id = i, .ncols = 1};
	}
	if (ffn < 0)
		ffn = big;
	struct ad_surface s[4], bs[4], fs[4], hs[2][64];
	const struct kb_info *k = &dp->kernels[id], *kbig = &dp->kernels[big], *kffn = &dp->kernels[ffn];
	struct kernel_backend *kbs[2] = {dp, nn};
	for (int b = 0; b < 2; b++) {
		if (kbs[b]->surface_new(kbs[b], "bin", k->in_ch, 0, &s[2 * b], err) ||
		    kbs[b]->surface_new(kbs[b], "bout", k->out_ch, 0, &s[2 * b + 1], err) ||
		    kbs[b]->surface_new(kbs[b], "gin", kbig->in_ch, 0, &bs[2 * b], err) ||
		    kbs[b]->surface_new(kbs[b], "gout", kbig->out_ch, 0, &bs[2 * b + 1], err) ||
		    kbs[b]->surface_new(kbs[b], "fin", kffn->in_ch, 0, &fs[2 * b], err) ||
		    kbs[b]->surface_new(kbs[b], "fout", kffn->out_ch, 0, &fs[2 * b + 1], err))
			goto fail;
		for (int h = 0; h < nhead; h++) {
			char name[32];
			snprintf(name, sizeof name, "h%d", h);
			if (h == 0 &&
			    kbs[b]->surface_new(kbs[b], "hin", dp->kernels[head[0].id].in_ch, 0, &hs[b][63], err))
				goto fail;
			if (kbs[b]->surface_new(kbs[b], name, dp->kernels[head[h].id].out_ch, 0, &hs[b][h], err))
				goto fail;
		}
	}
	printf("bench-dataplane: %s, %d calls (nng: %d) x %d runs; kernel %d (%d -> %d, %llu weight bytes); LM head "
	       "in %d chunks\n",
	       m.name, calls, calls / 10, reps, id, k->in_ch, k->out_ch, (unsigned long long)k->weight_bytes, nhead);
	printf("  largest kernel %d (%d -> %d, %llu weight bytes); layer 0's FFN %d (%d -> %d, %llu weight bytes)\n",
	       big, kbig->in_ch, kbig->out_ch, (unsigned long long)kbig->weight_bytes, ffn, kffn->in_ch, kffn->out_ch,
	       (unsigned long long)kffn->weight_bytes);
	struct ctx c = {dp, id, big, ffn, &s[0], &s[1], &bs[0], &bs[1], &fs[0], &fs[1], head, nhead, 0, 0};
	struct ctx cn = {nn, id, big, ffn, &s[2], &s[3], &bs[2], &bs[3], &fs[2], &fs[3], head, nhead, 0, 0};
	struct ctx cg = c;
	cg.gap_ns = 20000;
	struct kb_step hn[64];
	for (int h = 0; h < nhead; h++) {
		head[h].in = &hs[0][63];
		head[h].out = &hs[0][h];
		hn[h] = head[h];
		hn[h].in = &hs[1][63];
		hn[h].out = &hs[1][h];
	}
	cn.head = hn;
	if (bench("empty call: data plane (NOP)", &c, PING_DP, calls, reps) ||
	    bench("empty call: nng (Health)", &cn, PING_NNG, calls / 10, reps) ||
	    bench("one kernel, 1 column: data plane", &c, KERNEL, calls, reps) ||
	    bench("one kernel, 1 column: nng", &cn, KERNEL, calls / 10, reps) ||
	    bench("largest kernel, 1 column: data plane", &c, BIG, calls / 100 + 1, reps) ||
	    bench("largest kernel, 1 column: nng", &cn, BIG, calls / 100 + 1, reps) ||
	    bench("layer 0's FFN, 1 column: data plane", &c, FFN, calls / 10 + 1, reps) ||
	    bench("  with 20 us of the caller's work between", &cg, FFN, calls / 10 + 1, reps) ||
	    bench("LM head as one call: data plane", &c, HEAD_LIST, calls / 10, reps) ||
	    bench("LM head, one call per chunk: data plane", &c, HEAD_EACH, calls / 10, reps) ||
	    bench("LM head, one call per chunk: nng", &cn, HEAD_EACH, calls / 100 + 1, reps))
		goto fail;
	rc = 0;
	goto out;
fail:
	if (rc)
		fprintf(stderr, "%s\n", err);
out:
	if (nn)
		nn->free(nn);
	if (dp)
		dp->free(dp);
	kill(ane, SIGTERM);
	waitpid(ane, NULL, 0);
	model_free(&m);
	char sock[400];
	snprintf(sock, sizeof sock, "%s/ane.sock", dir);
	unlink(sock);
	rmdir(dir);
	return rc;
}
