// anedvd - the command-line entry point.
//
// Dispatches to the subcommands. Only commands that work are listed, and
// only the user's: the developer tools (benchmarks, kernel probes) are in
// anedvd-dev (cli/anedvd-dev.c), which anedvd names when asked for one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "ipc.h"
#include "log.h"
#include "supervisor.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
};

static const struct command commands[] = {
	{"run", cmd_run,
         "run [--model M] (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N] [--temp T] ... [--json] [--trace F]\n"
         "        generate text on the pipeline (tokenizer, cpu-worker, ane-worker processes), streamed"},
	{"chat", cmd_chat,
         "chat [--model M] [--system TEXT] [--max-seq N]\n"
         "        multi-turn chat in the terminal (/help, /reset, /temp, /topp, /rep, /exit)"},
	{"serve", cmd_serve,
         "serve [--model M] [--host 127.0.0.1] [--port 8080] [--name ID] [--system TEXT]\n"
         "        HTTP server: OpenAI and Anthropic APIs and the WebUI, workers supervised"},
	{"verify", cmd_verify,
         "verify [--model M] [--prompt TEXT | --prompt-ids 1,2,3]\n"
         "        whole prompt through the pipeline vs the fp32 reference: MATCH or MISMATCH"},
	{"selftest", cmd_selftest,
         "selftest [--split]\n"
         "        a tiny random llama through the pipeline vs the reference: PASS or FAIL"},
	{"cpu", cmd_cpu,
         "cpu --model M (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N] [--json] [--dump-logits FILE]\n"
         "        pure-CPU fp32 reference engine: greedy generation, top-5, timings"},
	{"route", cmd_route,
         "route --model M (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N] [--json]\n"
         "        MoE models: per-layer expert-use histogram from the fp32 reference engine"},
	{"info", cmd_info,
         "info [--model M]\n"
         "        version, backends in this build, and a model's architecture, shapes and memory"},
	{"cache", cmd_cache,
         "cache [--dir D] [--clear]\n"
         "        the compiled-kernel cache: entries, sizes, last use; --clear empties it"},
	{"tokenize", cmd_tokenize,
         "tokenize --model M (TEXT | --file F) [--ids] [--no-bos] [--parse-special] [--chat]\n"
         "        token ids and pieces of a text"},
};

// where anedvd-dev is: beside anedvd (the build tree), else in
// ../lib/anedvd (an installation: it is not on the PATH); else its bare name
static void
dev_path(char *out, size_t cap)
{
	snprintf(out, cap, "anedvd-dev");
#ifdef __linux__
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	char *slash = n > 0 ? (self[n] = 0, strrchr(self, '/')) : NULL;
	if (!slash)
		return;
	*slash = 0;
	static const char *const rel[] = {"/anedvd-dev", "/../lib/anedvd/anedvd-dev"};
	for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
		char p[4200];
		snprintf(p, sizeof p, "%s%s", self, rel[i]);
		if (access(p, X_OK) == 0) {
			char real[4096];
			snprintf(out, cap, "%s", realpath(p, real) ? real : p);
			return;
		}
	}
#endif
}

static void
usage(FILE *out)
{
	fprintf(out, "anedvd %s - LLM inference on the Apple Neural Engine, without CoreML\n\n", ANEDVD_VERSION);
	fprintf(out, "usage: anedvd <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(out, "  %s\n", commands[i].usage);
	fprintf(out, "\n--model takes a GGUF file (whatever its name) or a HuggingFace directory (config.json,\n"
	             "tokenizer.json, *.safetensors) or its config.json. Without it, run, chat, serve and\n"
	             "verify take the bundled stories260K (share/anedvd/models/ beside the bin/ of anedvd).\n"
	             "'anedvd <command> --help' shows a command's options. The developer tools (kernel\n"
	             "checks and benchmarks) are a program of their own: anedvd-dev --help.\n"
	             "\nenvironment:\n"
	             "  ANEDVD_LOG=LEVEL\n"
	             "        error, warn, info (default) or debug: what every process logs on stderr\n"
	             "  ANEDVD_CACHE_DIR=DIR\n"
	             "        the compiled-kernel cache (else $XDG_CACHE_HOME/anedvd or ~/.cache/anedvd)\n"
	             "  ANEDVD_API_KEY=KEY[,KEY...]\n"
	             "        serve: the API keys, kept off the command line\n"
	             "  ANEDVD_SIMD=ref|avx2|avx512\n"
	             "        caps the emu's kernels and the attention (otherwise the best this CPU has,\n"
	             "        picked at run time)\n"
	             "  ANEDVD_BIN_DIR=DIR\n"
	             "        where the worker programs are (default: beside anedvd)\n"
	             "  ANEDVD_HUNG_MS=MS\n"
	             "        a worker that answered its health check and then stays silent this long\n"
	             "        (default 30000) is killed and restarted; 0: never\n"
	             "  XDG_RUNTIME_DIR, TMPDIR\n"
	             "        where an instance keeps its sockets (anedvd-PID in the first, else a fresh\n"
	             "        anedvd-PID-XXXXXX in the second or /tmp)\n");
}

// the edit distance of a and b (both short), for a misspelt command
static int
distance(const char *a, const char *b)
{
	int na = (int)strlen(a), nb = (int)strlen(b), d[32][32];
	if (na > 30 || nb > 30)
		return 99;
	for (int i = 0; i <= na; i++)
		for (int j = 0; j <= nb; j++) {
			if (!i || !j) {
				d[i][j] = i + j;
				continue;
			}
			int x = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]), y = d[i - 1][j] + 1, z = d[i][j - 1] + 1;
			d[i][j] = x < y ? (x < z ? x : z) : (y < z ? y : z);
		}
	return d[na][nb];
}

int
main(int argc, char **argv)
{
	// the supervisor's trampoline (supervisor.h): becomes a child process
	if (argc > 1 && strcmp(argv[1], "__child") == 0)
		return sup_child_main(argc, argv);
	ad_log_init("anedvd");
#ifdef __linux__
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n > 0) {
		self[n] = 0;
		sup_set_trampoline(self);
	}
#endif
	// help CMD: that command's --help
	char help_flag[] = "--help";
	char *help_argv[] = {argv[0], argc > 2 ? argv[2] : NULL, help_flag, NULL};
	if (argc == 3 && strcmp(argv[1], "help") == 0) {
		argc = 3;
		argv = help_argv;
	}
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
		printf("anedvd %s\n", ANEDVD_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (strcmp(argv[1], commands[i].name) == 0) {
			int rc = commands[i].fn(argc - 1, argv + 1);
			ad_ipc_fini(); // every command has closed its clients and children by now
			return rc;
		}
	static const char *const dev[] = {AD_DEV_COMMANDS};
	for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++)
		if (strcmp(argv[1], dev[i]) == 0) {
			char where[4200];
			dev_path(where, sizeof where);
			fprintf(stderr,
			        "anedvd: unknown command '%s': it is a developer tool, in anedvd-dev: run '%s %s'\n",
			        argv[1], where, argv[1]);
			return 2;
		}
	const char *near = NULL;
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (distance(argv[1], commands[i].name) <= 2 && !near)
			near = commands[i].name;
	if (near) {
		fprintf(stderr, "anedvd: unknown command '%s': did you mean '%s'? ('anedvd --help' lists them)\n",
		        argv[1], near);
		return 2;
	}
	fprintf(stderr, "anedvd: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
