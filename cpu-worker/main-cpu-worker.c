// anedvd-cpu-worker - the decode loop as a process (proto/engine.proto).
//
// Loads the model, builds the kernel backend (in-process emu or exact, or
// the anedvd-ane-worker process over nng), and serves Generate / Poll /
// Cancel / Eval / Reset / Health on --listen until SIGINT or SIGTERM; then
// it ends every job with an error, stops accepting, and frees its surfaces
// (the shared-memory ones it created are unlinked). A stop that takes
// longer than STOP_GRACE_MS (a call waiting on a dead ane-worker) ends the
// process anyway, trace written and surfaces unlinked. At start it removes
// the surfaces a killed predecessor with the same --instance left behind.
// With ANEDVD_TRACE set (trace.h) it writes its steps, kernel calls,
// attention and sampling as trace events.
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "ipc.h"
#include "kernels.h"
#include "log.h"
#include "model.h"
#include "plan.h"
#include "scheduler.h"
#include "cpu-service.h"
#include "surface.h"
#include "trace.h"

// kb-remote.c: a call waiting for a dead ane-worker gives up (belongs in kernels.h)

// the orderly stop may wait on a kernel call in flight to a worker that is
// gone (up to --kernel-timeout-ms): past this, the process ends anyway with
// its trace written and its surfaces unlinked
#define STOP_GRACE_MS 1500

static long stop_instance;

static void *
stop_watchdog(void *arg)
{
	(void)arg;
	ad_thread_name("stop watchdog");
	usleep(STOP_GRACE_MS * 1000);
	ad_warn("still stopping after %d ms: exiting now", STOP_GRACE_MS);
	trace_flush_env(NULL);
	surface_cleanup_pid(stop_instance);
	_exit(0);
	return NULL;
}

static void
usage(FILE *out)
{
	fprintf(out,
	        "usage: anedvd-cpu-worker --model M --listen URL [options]\n"
	        "  --model M        a .gguf file or a Hugging Face directory\n"
	        "  --listen URL     ipc:///path/to/socket or tcp://127.0.0.1:PORT\n"
	        "  --backend B      where the projections run: emu (in this process, the ane-worker's\n"
	        "                   emulator; the default), exact (in this process, fp32) or remote\n"
	        "                   (the anedvd-ane-worker at --ane)\n"
	        "  --ane URL        the ane-worker's URL (with --backend remote)\n"
	        "  --chunk N        columns per kernel call: the prefill chunk and the most sequences\n"
	        "                   one decode step carries (default 64)\n"
	        "  --split          split FFN kernels (gate|up, then down) instead of fused\n"
	        "  --weights W      fp16, int8 or lut4 kernel weights (default: int8 for a model stored in 8\n"
	        "                   bits or fewer, else fp16; with --backend remote, the ane-worker's)\n"
	        "                   (with --backend remote, --chunk and --split must be the ane-worker's)\n"
	        "  --max-seq N      positions per sequence (default 2048, or the model's training\n"
	        "                   context if smaller)\n"
	        "  --parallel N     generations decoded together (default 4)\n"
	        "  --queue N        generations waiting beyond those (default 16)\n"
	        "  --sessions N     named sessions kept with their caches (default 8)\n"
	        "  --cache-mem SIZE the prefix cache: KV rows of earlier prompts shared by every request\n"
	        "                   (bytes with K/M/G, a plain number is MiB; 0: off; default the KV of\n"
	        "                   max(4, --parallel) full contexts)\n"
	        "  --cache-block N  positions per prefix-cache block (default 16)\n"
	        "  --no-spec        no speculative decoding unless a request asks for it\n"
	        "  --draft N        speculative decoding: at most N draft tokens per step, taken from\n"
	        "                   the text so far (prompt lookup) and checked in the decode step's\n"
	        "                   own call; the tokens are the same as without (default 8; 0: off)\n"
	        "  --ngram-max N    the longest n-gram a draft is looked up by (default 8)\n"
	        "  --ngram-min N    the shortest (default 2)\n"
	        "  --draft-cost F   the cost of one more column of a decode call as a share of a\n"
	        "                   one-column call, which sets how long a draft is worth verifying:\n"
	        "                   auto (the default) measures it on the decode calls, 0 verifies\n"
	        "                   every draft in full\n"
	        "  --threads N      emu threads for the in-process emu backend, and attention threads (default 2)\n"
	        "  --instance PID   the instance's pid in shared-memory surface ids (default: this\n"
	        "                   process)\n"
	        "  --kernel-timeout-ms N   remote: wait this long for a kernel call before retrying it\n"
	        "                   (default 30000)\n"
	        "  --kernel-deadline-ms N  remote: give up on an ane-worker that stays away this long;\n"
	        "                   the jobs of that call end with an error (default 120000)\n"
	        "  --rope-hf        force neox RoPE pairing (i, i+n_rot/2)\n"
	        "  --rope-adjacent  force norm RoPE pairing (2i, 2i+1)\n");
}

static int
number(const char *opt, const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr, "anedvd-cpu-worker: %s takes a number from %ld to %ld, not '%s'\n", opt, lo, hi, s);
		return -1;
	}
	*out = v;
	return 0;
}

int
main(int argc, char **argv)
{
	const char *model_path = NULL, *url = NULL, *backend = "emu", *ane_url = NULL, *weights = NULL;
	long chunk = 64, max_seq = 0, parallel = 4, queue = 16, sessions = 8, threads = 2, instance = 0;
	long kernel_timeout = 0, kernel_deadline = 0;
	int split = 0;
	long cache_block = SCHED_CACHE_BLOCK;
	size_t cache_mem = 0;
	int cache_mem_set = 0;
	enum model_rope rope = MODEL_ROPE_AUTO;
	struct spec_opts spec;
	spec_defaults(&spec);
	int no_spec = 0;
	long x = 0;
	ad_log_init("anedvd-cpu-worker");
	trace_from_env("anedvd-cpu-worker");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(a, "--split") == 0) {
			split = 1;
			continue;
		}
		if (strcmp(a, "--no-spec") == 0) {
			no_spec = 1;
			continue;
		}
		if (strcmp(a, "--rope-hf") == 0 || strcmp(a, "--rope-adjacent") == 0) {
			rope = a[7] == 'h' ? MODEL_ROPE_NEOX : MODEL_ROPE_NORM;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "anedvd-cpu-worker: %s needs a value\n", a);
			usage(stderr);
			return 2;
		}
		const char *v = argv[++i];
		int bad = 0;
		if (strcmp(a, "--model") == 0)
			model_path = v;
		else if (strcmp(a, "--listen") == 0)
			url = v;
		else if (strcmp(a, "--backend") == 0)
			backend = v;
		else if (strcmp(a, "--ane") == 0)
			ane_url = v;
		else if (strcmp(a, "--weights") == 0) {
			enum ane_wfmt f;
			if (ane_wfmt_parse(v, &f)) {
				fprintf(stderr, "anedvd-cpu-worker: --weights takes fp16, int8 or lut4, not '%s'\n", v);
				return 2;
			}
			weights = v;
		} else if (strcmp(a, "--chunk") == 0)
			bad = number(a, v, 1, 4096, &chunk);
		else if (strcmp(a, "--max-seq") == 0)
			bad = number(a, v, 2, 1 << 20, &max_seq);
		else if (strcmp(a, "--parallel") == 0)
			bad = number(a, v, 1, 256, &parallel);
		else if (strcmp(a, "--queue") == 0)
			bad = number(a, v, 1, 4096, &queue);
		else if (strcmp(a, "--sessions") == 0)
			bad = number(a, v, 1, 4096, &sessions);
		else if (strcmp(a, "--cache-mem") == 0) {
			if (pcache_parse_mem(v, &cache_mem)) {
				fprintf(stderr,
				        "anedvd-cpu-worker: --cache-mem takes a size such as 256M, 2G or 0, not '%s'\n",
				        v);
				return 2;
			}
			cache_mem_set = 1;
		} else if (strcmp(a, "--cache-block") == 0)
			bad = number(a, v, 1, 4096, &cache_block);
		else if (strcmp(a, "--threads") == 0)
			bad = number(a, v, 1, 256, &threads);
		else if (strcmp(a, "--draft") == 0)
			bad = number(a, v, 0, SPEC_DRAFT_MAX, &x), spec.draft = (int)x;
		else if (strcmp(a, "--ngram-max") == 0)
			bad = number(a, v, 1, SPEC_NGRAM_MAX, &x), spec.ngram_max = (int)x;
		else if (strcmp(a, "--ngram-min") == 0)
			bad = number(a, v, 1, SPEC_NGRAM_MAX, &x), spec.ngram_min = (int)x;
		else if (strcmp(a, "--draft-cost") == 0) {
			char *end;
			errno = 0;
			double c = strcmp(v, "auto") == 0 ? SPEC_COST_AUTO : strtod(v, &end);
			if (c != SPEC_COST_AUTO && (errno || end == v || *end || !(c >= 0 && c <= 100))) {
				fprintf(stderr,
				        "anedvd-cpu-worker: --draft-cost takes auto or a number from 0 to 100, not '%s'\n",
				        v);
				return 2;
			}
			spec.col_cost = (float)c;
		} else if (strcmp(a, "--instance") == 0)
			bad = number(a, v, 1, 1L << 30, &instance);
		else if (strcmp(a, "--kernel-timeout-ms") == 0)
			bad = number(a, v, 1, 3600000, &kernel_timeout);
		else if (strcmp(a, "--kernel-deadline-ms") == 0)
			bad = number(a, v, 1, 86400000, &kernel_deadline);
		else {
			fprintf(stderr, "anedvd-cpu-worker: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		}
		if (bad)
			return 2;
	}
	if (!model_path || !url) {
		fprintf(stderr, "anedvd-cpu-worker: --model and --listen are required\n");
		usage(stderr);
		return 2;
	}
	char err[AD_ERRLEN];
	if (spec_check(&spec, err)) {
		fprintf(stderr, "anedvd-cpu-worker: %s\n", err);
		return 2;
	}
	int remote = strcmp(backend, "remote") == 0;
	if (!remote && strcmp(backend, "emu") != 0 && strcmp(backend, "exact") != 0) {
		fprintf(stderr, "anedvd-cpu-worker: --backend is emu, exact or remote, not '%s'\n", backend);
		return 2;
	}
	if (remote && !ane_url) {
		fprintf(stderr, "anedvd-cpu-worker: --backend remote needs --ane URL\n");
		return 2;
	}

	// block the signals before any thread exists, then wait for them here
	sigset_t set;
	ad_stop_block(&set);

	stop_instance = instance ? instance : (long)getpid();
	struct cpu_worker_opts wo = {.model_path = model_path,
	                             .url = url,
	                             .backend = backend,
	                             .emu_new = kb_local_new,
	                             .vocab = &vocab_local,
	                             .ane_url = ane_url,
	                             .weights = weights,
	                             .chunk = (int)chunk,
	                             .split = split,
	                             .threads = (int)threads,
	                             .max_seq = (int)max_seq,
	                             .parallel = (int)parallel,
	                             .queue = (int)queue,
	                             .sessions = (int)sessions,
	                             .cache_block = (int)cache_block,
	                             .cache_mem = cache_mem,
	                             .cache_mem_set = cache_mem_set,
	                             .instance = stop_instance,
	                             .kernel_timeout_ms = (int)kernel_timeout,
	                             .kernel_deadline_ms = (int)kernel_deadline,
	                             .rope = rope,
	                             .spec = spec,
	                             .no_spec = no_spec};
	struct cpu_worker *w = cpu_worker_start(&wo, err);
	if (!w && ad_stop_pending()) { // told to stop while waiting for the ane-worker
		ad_info("stopped while starting: %s", err);
		ad_ipc_fini();
		return 0;
	}
	if (!w) {
		ad_error("%s", err);
		return 1;
	}

	ad_stop_wait(&set);
	pthread_t wd;
	if (pthread_create(&wd, NULL, stop_watchdog, NULL) == 0)
		pthread_detach(wd);
	uint64_t jobs = 0, tokens = 0;
	cpu_worker_stop(w, &jobs, &tokens);
	ad_info("stopped after %llu jobs, %llu tokens", (unsigned long long)jobs, (unsigned long long)tokens);
	// nng frees a closed context on its own threads: a health probe that
	// timed out while the ane-worker restarted could still hold one here
	// (LeakSanitizer saw it in test-worker's restart tests, now and then)
	ad_ipc_fini();
	return 0;
}
