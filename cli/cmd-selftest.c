// cmd-selftest.c - `anedvd selftest`: a tiny random llama, written here,
// through the pipeline (the cpu-worker's service in this process, the
// kernels in the anedvd-ane-worker process) against the fp32 reference engine: PASS or
// FAIL. It needs no model, so it checks an installation on its own.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd-common.h"
#include "cmd-genmodel.h"
#include "commands.h"
#include "ref.h"

int
cmd_selftest(int argc, char **argv)
{
	struct pipe_opts po = {.cmd = "selftest"};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fprintf(stdout,
			        "usage: anedvd selftest [--split] [--backend emu|exact]\n"
			        "  writes a tiny random llama (n_embd 64, 2 layers, 4/2 heads, ff 128, vocab 320)\n"
			        "  to a temporary GGUF, runs tokens 1,42,7,200,13 through the pipeline (the decode\n"
			        "  loop here, the kernels in the anedvd-ane-worker process on emu) and through the\n"
			        "  fp32 reference engine:\n"
			        "  PASS if the relative error of every position is below 0.05 and the argmaxes\n"
			        "  agree, else FAIL (exit 1)\n");
			return 0;
		}
		int r = pipe_flag(&po, argc, argv, &i);
		if (r <= 0 || !strcmp(argv[i], "--model") || !strcmp(argv[i], "--max-seq")) {
			if (r == 0)
				fprintf(stderr, "anedvd selftest: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	char path[512], err[AD_ERRLEN];
	const char *tmp = getenv("TMPDIR");
	snprintf(path, sizeof path, "%s/anedvd-selftest-%ld.gguf", tmp && *tmp ? tmp : "/tmp", (long)getpid());
	struct genmodel g = {.preset = "tiny", .wtype = "f32", .seed = 42};
	if (genmodel_write(&g, path, err)) {
		fprintf(stderr, "anedvd selftest: %s\n", err);
		return 1;
	}
	po.model = path;
	po.max_seq = 64;
	po.in_process = 1; // the decode loop here, the kernels in the ane-worker process
	struct pipe p;
	if (pipe_open(&p, &po, err)) {
		fprintf(stderr, "anedvd selftest: %s\n", err);
		unlink(path);
		return 1;
	}
	unlink(path); // mapped, and the worker has compiled
	int32_t ids[] = {1, 42, 7, 200, 13};
	int n = 5, nv = p.n_vocab, status = 1;
	float *a = malloc((size_t)n * nv * sizeof *a), *b = malloc((size_t)n * nv * sizeof *b);
	struct ref_engine *ref = ref_new(&p.m, n, err);
	uint64_t c0[PIPE_KINDS], c1[PIPE_KINDS], ns[PIPE_KINDS], calls = 0;
	int stats = pipe_ane_stats(&p, c0, ns, NULL) == 0;
	if (!a || !b || !ref) {
		fprintf(stderr, "anedvd selftest: %s\n", err);
		goto out;
	}
	double t0 = cli_now_ms();
	if (pipe_eval(&p, ids, n, 0, a, err)) {
		fprintf(stderr, "anedvd selftest: %s\n", err);
		goto out;
	}
	double ms = cli_now_ms() - t0;
	if (stats && pipe_ane_stats(&p, c1, ns, NULL) == 0)
		for (int k = 0; k < PIPE_KINDS; k++)
			calls += c1[k] - c0[k];
	ref_eval(ref, ids, n, b);
	double worst = 0;
	int same = 1;
	for (int r = 0; r < n; r++) {
		double rel = cli_rel_err(a + (size_t)r * nv, b + (size_t)r * nv, (size_t)nv, NULL, NULL);
		worst = rel > worst ? rel : worst;
		same &= ref_argmax(a + (size_t)r * nv, nv) == ref_argmax(b + (size_t)r * nv, nv);
	}
	int ok = worst < 0.05 && same;
	printf("selftest: tiny llama, backend %s, %d positions in %.1f ms (%llu kernel calls): max rel %.3e, "
	       "argmax %s -> %s\n",
	       p.backend, n, ms, (unsigned long long)calls, worst, same ? "equal" : "DIFFERENT", ok ? "PASS" : "FAIL");
	status = ok ? 0 : 1;
out:
	free(a);
	free(b);
	ref_free(ref);
	pipe_close(&p);
	return status;
}
