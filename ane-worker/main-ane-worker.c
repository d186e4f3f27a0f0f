// anedvd-ane-worker - the projection kernels of one model, as a process.
//
//   anedvd-ane-worker --model M --listen URL [--backend emu] [--chunk 64]
//                     [--split] [--threads N] [--weights fp16|int8|lut4]
//                     [--cache-dir D | --no-cache] [--cache-max-mb N]
//
// --weights: the kernels' weight format (plan.h); default int8 on emu for
// a model stored in 8 bits or fewer, else fp16 (always fp16 on ane).
//
// The compiled kernels are cached on disk (kcache.h): a start with the
// same model, options and build maps them instead of compiling. The
// directory: --cache-dir, else kc_default_dir ($ANEDVD_CACHE_DIR,
// $XDG_CACHE_HOME/anedvd, ~/.cache/anedvd). The start's phases are logged
// (info) and returned in CompileReply.start_phases.
//
// Compiles the model's whole kernel plan (plan.h) at start, logging one
// line per kernel, then answers AneRequests (proto/ane.proto) on URL until
// SIGINT or SIGTERM, and exits 0. A restarted worker compiles the same
// plan from the same command line, so it is ready without being told.
//
// KernelCall names two shared surfaces (surface.h) of the kernel's width;
// each is mapped on first use and kept, and remapped when its object was
// removed (a new one under the same id) or is now needed with more
// channels. Every request is checked: an undecodable message, an unknown
// kernel, ncols outside 1..width, a surface that does not exist or is too
// small get an error reply and change nothing. The worker creates no
// shared memory of its own.
//
// The data plane (common/dataplane.h): an AttachRequest names a client's
// shared-memory object; a thread of its own then serves the object's
// slots: each call a short list of kernels, run in order with the checks
// of KernelCall (an unknown kernel, ncols outside 1..width, a surface not
// registered, missing or too small get an error status in the slot and
// change nothing). Surfaces are named by their index in the object's
// table and mapped once per index, or by id (the mappings of KernelCall).
// The thread ends when the client closes the object, the client dies, or
// another attach takes it (a re-attach of the same object here first stops
// the thread serving it). Stats count the kernels of both paths.
//
// --debug-delay-ms N sleeps N ms inside every kernel call (either path),
// so a test can kill the worker while a call is in flight;
// ANEDVD_DEBUG_DELAY_US does the same in microseconds for a worker the
// supervisor starts (tests that need a reply to stream for a while), and
// ANEDVD_DEBUG_BUILD_DELAY_MS pauses after each kernel built (tests that
// watch a start: Health answers with the progress meanwhile).
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane-service.h"
#include "build.h"
#include "clock.h"
#include "emu.h"
#include "ipc.h"
#include "kcache.h"
#include "log.h"
#include "model.h"
#include "trace.h"

static void
usage(FILE *out)
{
	fprintf(out,
	        "usage: anedvd-ane-worker --model M --listen URL [--backend emu] [--chunk 64] [--split] [--threads N]\n"
	        "                         [--weights fp16|int8|lut4] [--cache-dir D | --no-cache] [--cache-max-mb N]\n"
	        "  --model M     a .gguf file or an HF directory\n"
	        "  --listen URL  ipc:///path/to/socket or tcp://127.0.0.1:PORT\n"
	        "  --backend B   emu (everywhere) or ane (macOS)\n"
	        "  --chunk N     columns every kernel is compiled for (default 64)\n"
	        "  --split       FFN as gate_up + down kernels (activation on the CPU)\n"
	        "  --threads N   emu threads (default 2)\n"
	        "  --weights W   fp16, int8 (per-row int8, fp16 scales) or lut4 (4-bit palettised); default\n"
	        "                int8 on emu for a model stored in 8 bits or fewer, else fp16; fp16 on ane\n"
	        "  --cache-dir D the compiled-kernel cache (default $ANEDVD_CACHE_DIR, $XDG_CACHE_HOME/anedvd\n"
	        "                or ~/.cache/anedvd)\n"
	        "  --no-cache    compile every kernel, store nothing\n"
	        "  --cache-max-mb N  bound of the cache directory (default %d)\n",
	        KC_DEFAULT_MAX_MB);
}

static int
num(const char *s, int lo, int hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

int
main(int argc, char **argv)
{
	const char *model = NULL, *url = NULL, *backend = "emu", *weights = NULL, *cache_dir = NULL;
	int chunk = 64, split = 0, threads = 2, delay = 0, no_cache = 0, cache_mb = 0;
	ad_log_init("anedvd-ane-worker");
	trace_from_env("anedvd-ane-worker");
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
		if (strcmp(a, "--no-cache") == 0) {
			no_cache = 1;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "anedvd-ane-worker: %s needs a value\n", a);
			usage(stderr);
			return 2;
		}
		const char *v = argv[++i];
		if (strcmp(a, "--model") == 0) {
			model = v;
		} else if (strcmp(a, "--listen") == 0) {
			url = v;
		} else if (strcmp(a, "--backend") == 0) {
			backend = v;
		} else if (strcmp(a, "--weights") == 0) {
			enum ane_wfmt f;
			if (ane_wfmt_parse(v, &f)) {
				fprintf(stderr, "anedvd-ane-worker: --weights takes fp16, int8 or lut4, not '%s'\n", v);
				return 2;
			}
			weights = v;
		} else if (strcmp(a, "--chunk") == 0) {
			if (num(v, 1, 4096, &chunk)) {
				fprintf(stderr, "anedvd-ane-worker: --chunk takes 1..4096, not '%s'\n", v);
				return 2;
			}
		} else if (strcmp(a, "--threads") == 0) {
			if (num(v, 1, 256, &threads)) {
				fprintf(stderr, "anedvd-ane-worker: --threads takes 1..256, not '%s'\n", v);
				return 2;
			}
		} else if (strcmp(a, "--cache-dir") == 0) {
			cache_dir = v;
		} else if (strcmp(a, "--cache-max-mb") == 0) {
			if (num(v, 1, 1 << 30, &cache_mb)) {
				fprintf(stderr, "anedvd-ane-worker: --cache-max-mb takes 1..%d, not '%s'\n", 1 << 30,
				        v);
				return 2;
			}
		} else if (strcmp(a, "--debug-delay-ms") == 0) {
			if (num(v, 0, 600000, &delay)) {
				fprintf(stderr, "anedvd-ane-worker: --debug-delay-ms takes 0..600000, not '%s'\n", v);
				return 2;
			}
		} else {
			fprintf(stderr, "anedvd-ane-worker: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
#ifndef ANEDVD_ANE
	if (strcmp(backend, "ane") == 0) {
		fprintf(stderr, "anedvd-ane-worker: " ANE_NO_BACKEND_MSG "\n");
		return 2;
	}
#endif
	if (strcmp(backend, "emu") != 0 && strcmp(backend, "ane") != 0) {
		fprintf(stderr, "anedvd-ane-worker: --backend takes emu or ane, not '%s'\n", backend);
		return 2;
	}
	if (!model || !url) {
		usage(stderr);
		return 2;
	}

	// block the signals before any thread exists, then wait for them here
	sigset_t set;
	ad_stop_block(&set);

	char err[AD_ERRLEN];
	int simd_env;
	if (emu_simd_env(&simd_env, err)) { // a setting, like a flag: exit 2, not restarted
		fprintf(stderr, "anedvd-ane-worker: %s\n", err);
		return 2;
	}
	struct model m;
	uint64_t t_model = ad_now_ns();
	if (model_load(&m, model, err)) {
		ad_error("%s", err);
		return 1;
	}
	struct ane_service_opts so = {.url = url,
	                              .backend = backend,
	                              .chunk = chunk,
	                              .split = split,
	                              .threads = threads,
	                              .weights = weights,
	                              .cache_mb = cache_mb,
	                              .delay_us = delay * 1000,
	                              .model_us = (ad_now_ns() - t_model) / 1000};
	const char *dus = getenv("ANEDVD_DEBUG_DELAY_US");
	int env_delay = 0;
	if (!delay && dus && num(dus, 0, 600000000, &env_delay) == 0)
		so.delay_us = env_delay;
	const char *bds = getenv("ANEDVD_DEBUG_BUILD_DELAY_MS");
	int build_delay = 0;
	if (bds && num(bds, 0, 60000, &build_delay) == 0)
		so.build_delay_ms = build_delay;
	const char *sds = getenv("ANEDVD_DEBUG_STORE_DELAY_MS");
	int store_delay = 0;
	if (sds && num(sds, 0, 600000, &store_delay) == 0)
		so.store_delay_ms = store_delay;
	char cdir[4096] = "";
	if (!no_cache) {
		if (cache_dir)
			snprintf(cdir, sizeof cdir, "%s", cache_dir);
		else if (kc_default_dir(cdir, sizeof cdir))
			ad_warn("no cache directory (no HOME, XDG_CACHE_HOME or ANEDVD_CACHE_DIR): compiling without the cache");
	}
	so.cache_dir = cdir;
	struct ane_service *sv = ane_service_start(&m, &so, err);
	if (!sv) {
		ad_error("%s", err);
		model_free(&m);
		return 1;
	}
	ane_service_cache_wait(sv);
	ad_stop_wait(&set);
	ane_service_stop(sv);
	model_free(&m);
	return 0;
}
