// anedvd-frontend - the HTTP server: OpenAI and Anthropic APIs, SSE, WebUI.
//
//   anedvd-frontend --listen HOST:PORT --tokenizer URL --engine URL [options]
//
// Talks to anedvd-tokenizer and to the engine (anedvd-cpu-worker) over nng;
// serves until SIGINT or SIGTERM.
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"
#include "ipc.h"
#include "log.h"

static void
usage(FILE *out)
{
	fprintf(out, "usage: anedvd-frontend --listen HOST:PORT --tokenizer URL --engine URL [options]\n"
	             "  --listen HOST:PORT  address to serve HTTP on (e.g. 127.0.0.1:8080)\n"
	             "  --tokenizer URL     the anedvd-tokenizer service (ipc://... or tcp://...)\n"
	             "  --engine URL        the engine service (anedvd-cpu-worker)\n"
	             "  --name ID           the model id reported by /v1/models (default anedvd)\n"
	             "  --model-file PATH   the model's file, whose name GET /props reports (default: the id)\n"
	             "  --system TEXT       system prompt for chats that bring none\n"
	             "  --temp T, --top-p P, --top-k K, --min-p P, --repeat-penalty R\n"
	             "                      sampling for a request that does not set it (defaults: 0.7, 1,\n"
	             "                      40 for chat and 0 for completions, 0, 1)\n"
	             "  --max-tokens N      reply length when a request gives none (default 512)\n"
	             "  --max-seq N         the engine's context: prompt + reply, as reported (default 2048;\n"
	             "                      the cpu-worker fits prompts into its own --max-seq)\n"
	             "  --max-body BYTES    largest request body (default 4194304)\n"
	             "  --parallel N        generations the engine runs at once (default 1)\n"
	             "  --queue N           requests waiting beyond those; more get 503 (default 16)\n"
	             "  --timeout-ms N      each call to the tokenizer or the engine (default 10000)\n"
	             "  --keepalive-ms N    SSE comment on a stream silent this long; 0 never (default 5000)\n"
	             "  --deadline-ms N     a generation's whole time, queue included; 0 none (default 600000).\n"
	             "                      A crashed engine's jobs go on on the restarted one; an engine still\n"
	             "                      away at the deadline (60 s with none) ends the request with 503\n"
	             "  --embeddings        serve POST /v1/embeddings (off: 501)\n"
	             "  --no-spec           the engine runs without speculative decoding (for GET /props;\n"
	             "                      anedvd serve passes the cpu-worker's setting)\n"
	             "  --status-file F     the supervisor's status file: crash-looping processes in /health\n"
	             "                      and /metrics (anedvd serve passes it)\n"
	             "access (defaults: no key; the server's own and loopback origins; localhost, IP addresses\n"
	             "and the bound name as Host):\n"
	             "  --api-key KEY       every request but /health and the WebUI page needs\n"
	             "                      'Authorization: Bearer KEY' or 'x-api-key: KEY' (repeatable)\n"
	             "  --api-key-file F    keys, one a line ('#' comments); ANEDVD_API_KEY: keys, comma-separated\n"
	             "  --cors-origin O     a browser origin allowed beside the server's own and loopback ones,\n"
	             "                      e.g. https://app.example (repeatable; '*' allows every origin)\n"
	             "  --allowed-host H    a Host name accepted beside localhost, IP addresses and the bound\n"
	             "                      name (repeatable; '*' accepts any; guards against DNS rebinding)\n");
}

static int
number(const char *opt, const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi) {
		fprintf(stderr, "anedvd-frontend: %s takes a number from %ld to %ld, not '%s'\n", opt, lo, hi, s);
		return -1;
	}
	*out = v;
	return 0;
}

// a sampling default: a number in [lo, hi] (and > lo when open)
static int
fnumber(const char *opt, const char *s, double lo, double hi, int open, float *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || end == s || !(v >= lo && v <= hi) || (open && v == lo)) {
		fprintf(stderr, "anedvd-frontend: %s takes a number from %g%s to %g, not '%s'\n", opt, lo,
		        open ? " (exclusive)" : "", hi, s);
		return -1;
	}
	*out = (float)v;
	return 0;
}

#define MAX_LIST 64

struct list {
	const char *v[MAX_LIST];
	size_t n;
};

static int
list_add(struct list *l, const char *opt, const char *v)
{
	if (l->n == MAX_LIST) {
		fprintf(stderr, "anedvd-frontend: %s: at most %d\n", opt, MAX_LIST);
		return -1;
	}
	l->v[l->n++] = v;
	return 0;
}

static int
key_add(struct list *l, const char *where, char *k)
{
	if (!fe_key_valid(k)) {
		fprintf(stderr,
		        "anedvd-frontend: %s: an API key is 1 to %d visible ASCII characters with no space or comma\n",
		        where, FE_MAX_KEY_LEN);
		return -1;
	}
	return list_add(l, where, k);
}

// one key a line; blank lines and '#' comments skipped (the strings live
// until exit)
static int
key_file(struct list *l, const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "anedvd-frontend: --api-key-file %s: %s\n", path, strerror(errno));
		return -1;
	}
	char line[FE_MAX_KEY_LEN + 64], where[PATH_MAX + 64];
	int no = 0, rv = 0, any = 0;
	while (fgets(line, sizeof line, f)) {
		no++;
		size_t n = strlen(line);
		while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
			line[--n] = 0;
		char *k = line;
		while (*k == ' ' || *k == '\t')
			k++;
		if (!*k || *k == '#')
			continue;
		snprintf(where, sizeof where, "--api-key-file %s line %d", path, no);
		char *dup = strdup(k);
		if (!dup || key_add(l, where, dup) != 0) {
			free(dup);
			rv = -1;
			break;
		}
		any = 1;
	}
	fclose(f);
	if (rv == 0 && !any) {
		fprintf(stderr, "anedvd-frontend: --api-key-file %s holds no key\n", path);
		rv = -1;
	}
	return rv;
}

static void
on_signal(int sig)
{
	fe_http_stop();
}

int
main(int argc, char **argv)
{
	struct fe_config cfg = {
		.name = "anedvd",
		.max_tokens = 512,
		.max_seq = 2048,
		.max_body = 4u << 20,
		.queue = 16,
		.parallel = 1,
		.timeout_ms = 10000,
		.keepalive_ms = 5000,
		.deadline_ms = 600000,
	};
	ad_log_init("anedvd-frontend");
	// static: the keys (some malloc'd) live until exit and stay reachable
	static struct list keys, origins, hosts;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(a, "--embeddings") == 0) {
			cfg.embeddings = 1;
			continue;
		}
		if (strcmp(a, "--no-spec") == 0) {
			cfg.no_spec = 1;
			continue;
		}
		if (i + 1 >= argc) {
			fprintf(stderr, "anedvd-frontend: %s needs a value\n", a);
			usage(stderr);
			return 2;
		}
		const char *v = argv[++i];
		long n;
		if (strcmp(a, "--listen") == 0) {
			cfg.listen = v;
		} else if (strcmp(a, "--tokenizer") == 0) {
			cfg.tok_url = v;
		} else if (strcmp(a, "--engine") == 0) {
			cfg.engine_url = v;
		} else if (strcmp(a, "--name") == 0) {
			if (!v[0] || strlen(v) > 128) {
				fprintf(stderr, "anedvd-frontend: --name takes 1 to 128 characters\n");
				return 2;
			}
			cfg.name = v;
		} else if (strcmp(a, "--model-file") == 0) {
			cfg.model_file = v;
		} else if (strcmp(a, "--system") == 0) {
			cfg.system = v;
		} else if (strcmp(a, "--temp") == 0) {
			if (fnumber(a, v, 0, 2, 0, &cfg.def.temperature))
				return 2;
			cfg.def.set |= FE_DEF_TEMP;
		} else if (strcmp(a, "--top-p") == 0) {
			if (fnumber(a, v, 0, 1, 0, &cfg.def.top_p))
				return 2;
			cfg.def.set |= FE_DEF_TOP_P;
		} else if (strcmp(a, "--min-p") == 0) {
			if (fnumber(a, v, 0, 1, 0, &cfg.def.min_p))
				return 2;
			cfg.def.set |= FE_DEF_MIN_P;
		} else if (strcmp(a, "--repeat-penalty") == 0) {
			if (fnumber(a, v, 0, 10, 1, &cfg.def.repeat_penalty))
				return 2;
			cfg.def.set |= FE_DEF_REPEAT;
		} else if (strcmp(a, "--top-k") == 0) {
			if (number(a, v, 0, 1 << 20, &n))
				return 2;
			cfg.def.top_k = (int)n;
			cfg.def.set |= FE_DEF_TOP_K;
		} else if (strcmp(a, "--max-tokens") == 0) {
			if (number(a, v, 1, 1 << 20, &n))
				return 2;
			cfg.max_tokens = (unsigned)n;
		} else if (strcmp(a, "--max-seq") == 0) {
			if (number(a, v, 8, 1 << 24, &n))
				return 2;
			cfg.max_seq = (unsigned)n;
		} else if (strcmp(a, "--max-body") == 0) {
			if (number(a, v, 1024, 1L << 30, &n))
				return 2;
			cfg.max_body = (size_t)n;
		} else if (strcmp(a, "--queue") == 0) {
			if (number(a, v, 0, 100000, &n))
				return 2;
			cfg.queue = (int)n;
		} else if (strcmp(a, "--parallel") == 0) {
			if (number(a, v, 1, 256, &n))
				return 2;
			cfg.parallel = (int)n;
		} else if (strcmp(a, "--deadline-ms") == 0) {
			if (number(a, v, 0, 86400000, &n))
				return 2;
			cfg.deadline_ms = (int)n;
		} else if (strcmp(a, "--keepalive-ms") == 0) {
			if (number(a, v, 0, 3600000, &n))
				return 2;
			cfg.keepalive_ms = (int)n;
		} else if (strcmp(a, "--api-key") == 0) {
			if (key_add(&keys, a, (char *)v))
				return 2;
		} else if (strcmp(a, "--api-key-file") == 0) {
			if (key_file(&keys, v))
				return 2;
		} else if (strcmp(a, "--cors-origin") == 0) {
			if (!v[0] || list_add(&origins, a, v))
				return 2;
			cfg.cors_any |= strcmp(v, "*") == 0;
		} else if (strcmp(a, "--allowed-host") == 0) {
			if (!v[0] || list_add(&hosts, a, v))
				return 2;
			cfg.hosts_any |= strcmp(v, "*") == 0;
		} else if (strcmp(a, "--status-file") == 0) {
			cfg.status_file = v;
		} else if (strcmp(a, "--timeout-ms") == 0) {
			if (number(a, v, 10, 3600000, &n))
				return 2;
			cfg.timeout_ms = (int)n;
		} else {
			fprintf(stderr, "anedvd-frontend: unknown option '%s'\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (!cfg.listen || !cfg.tok_url || !cfg.engine_url) {
		usage(stderr);
		return 2;
	}
	// ANEDVD_API_KEY: how a service manager hands keys over without a
	// command line that every user can read
	const char *ek = getenv("ANEDVD_API_KEY");
	if (ek && *ek) {
		static char *all;
		char *save = NULL;
		all = strdup(ek);
		for (char *k = all ? strtok_r(all, ",", &save) : NULL; k; k = strtok_r(NULL, ",", &save)) {
			while (*k == ' ')
				k++;
			size_t n = strlen(k);
			while (n && k[n - 1] == ' ')
				k[--n] = 0;
			if (*k && key_add(&keys, "ANEDVD_API_KEY", k))
				return 2;
		}
	}
	cfg.api_keys = keys.v;
	cfg.n_api_keys = keys.n;
	cfg.cors_origins = origins.v;
	cfg.n_cors_origins = origins.n;
	cfg.allowed_hosts = hosts.v;
	cfg.n_allowed_hosts = hosts.n;
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	char err[AD_ERRLEN];
	fe_metrics_init();
	if (fe_upstream_start(&cfg, err) != 0 || fe_extra_start(&cfg, err) != 0) {
		ad_error("%s", err);
		return 1;
	}
	int rv = fe_http_run(&cfg, err);
	if (rv != 0)
		ad_error("%s", err);
	ad_info("stopping");
	fe_extra_stop();
	fe_upstream_stop();
	// every client is closed: nng's own threads free what a call that timed
	// out left to them (else LeakSanitizer sees it now and then, as in the
	// cpu-worker)
	ad_ipc_fini();
	return rv ? 1 : 0;
}
