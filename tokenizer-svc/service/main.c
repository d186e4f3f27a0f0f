// anedvd-tokenizer - the tokenizer as a process.
//
//   anedvd-tokenizer --model M --listen URL [--threads N]
//
// Loads the model's tokenizer once and answers TokRequests (proto/
// tokenizer.proto) on URL (ipc://path or tcp://host:port) until SIGINT or
// SIGTERM.
//
// ANEDVD_DEBUG_DELAY_US=N (tests) sleeps N microseconds before each request
// is handled, so that a test can kill the process while a call is in
// flight (the ane-worker has the same knob).
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hugemem.h"
#include "ipc.h"
#include "log.h"
#include "service.h"
#include "tokenizer.h"
#include "trace.h"

static int delay_us;

static void
handle(void *arg, const uint8_t *req, size_t req_len, uint8_t **reply, size_t *reply_len)
{
	if (delay_us > 0)
		usleep((useconds_t)delay_us);
	tok_service_handle(arg, req, req_len, reply, reply_len);
}

static void
usage(FILE *out)
{
	fprintf(out, "usage: anedvd-tokenizer --model M --listen URL [--threads N]\n"
	             "  --model M     a .gguf file, an HF directory, a tokenizer.json or a llama2.c tokenizer .bin\n"
	             "  --listen URL  ipc:///path/to/socket or tcp://127.0.0.1:PORT\n"
	             "  --threads N   requests served at once (default 4)\n");
}

int
main(int argc, char **argv)
{
	const char *model = NULL, *url = NULL;
	int threads = 4;
	ad_log_init("anedvd-tokenizer");
	trace_from_env("anedvd-tokenizer");
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "anedvd-tokenizer: %s needs a value\n", argv[i]);
			usage(stderr);
			return 2;
		}
		if (strcmp(argv[i], "--model") == 0) {
			model = argv[++i];
		} else if (strcmp(argv[i], "--listen") == 0) {
			url = argv[++i];
		} else if (strcmp(argv[i], "--threads") == 0) {
			char *end;
			errno = 0;
			long v = strtol(argv[++i], &end, 10);
			if (errno || *end || v < 1 || v > 64) {
				fprintf(stderr, "anedvd-tokenizer: --threads takes a number from 1 to 64, not '%s'\n",
				        argv[i]);
				return 2;
			}
			threads = (int)v;
		} else {
			fprintf(stderr, "anedvd-tokenizer: unknown option '%s'\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}
	if (!model || !url) {
		usage(stderr);
		return 2;
	}

	// block the signals before any thread exists, then wait for them here
	sigset_t set;
	ad_stop_block(&set);

	char err[AD_ERRLEN];
	struct tokenizer *t = tok_load(model, err);
	if (!t) {
		ad_error("%s", err);
		return 1;
	}
	ad_heap_trim(); // what the load parsed and freed
	struct tok_service svc;
	tok_service_init(&svc, t, "anedvd-tokenizer");
	const char *dus = getenv("ANEDVD_DEBUG_DELAY_US");
	delay_us = dus ? atoi(dus) : 0;
	struct ad_server *srv = ad_server_start(url, threads, handle, &svc, err);
	if (!srv) {
		ad_error("%s", err);
		tok_free(t);
		return 1;
	}
	ad_info("ready on %s (%s, %d tokens, %d threads)", url, tok_kind_name(t), tok_n_vocab(t), threads);
	ad_stop_wait(&set);
	ad_server_stop(srv);
	tok_free(t);
	return 0;
}
