// anedvd - the command-line entry point.
//
// Dispatches to the subcommands. Only commands that work are listed.
#include <stdio.h>
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
	{ "run", cmd_run,
	  "run [--model M] (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N] [--temp T] ... [--json] [--trace F]\n"
	  "        generate text on the pipeline (tokenizer, cpu-worker, ane-worker processes), streamed" },
	{ "chat", cmd_chat,
	  "chat [--model M] [--system TEXT] [--max-seq N]\n"
	  "        multi-turn chat in the terminal (/help, /reset, /temp, /topp, /rep, /exit)" },
	{ "serve", cmd_serve,
	  "serve [--model M] [--host 127.0.0.1] [--port 8080] [--name ID] [--system TEXT]\n"
	  "        HTTP server: OpenAI and Anthropic APIs and the WebUI, workers supervised" },
	{ "verify", cmd_verify,
	  "verify [--model M] [--prompt TEXT | --prompt-ids 1,2,3]\n"
	  "        whole prompt through the pipeline vs the fp32 reference: MATCH or MISMATCH" },
	{ "check", cmd_check,
	  "check --model M [--split] [--chunk N] [--backend emu|ane] [--prompt T]\n"
	  "        config, RoPE, every kernel of layer 0 and the LM head vs an fp32 matmul,\n"
	  "        and sample predictions (top 5 after the prompt) against the reference" },
	{ "layers", cmd_layers,
	  "layers --model M --upto N [--prompt-ids 1,2,3] [--backend emu|ane]\n"
	  "        top-5 next tokens after the first N layers, backend and reference" },
	{ "kernels", cmd_kernels,
	  "kernels --model M [--iters K] [--chunk N] [--backend emu|ane]\n"
	  "        per-kernel time and achieved weight bandwidth (layer 0 + LM head)" },
	{ "selftest", cmd_selftest,
	  "selftest [--split]\n"
	  "        a tiny random llama through the pipeline vs the reference: PASS or FAIL" },
	{ "probe", cmd_probe,
	  "probe [--size N] [--iters K] [--backend emu|ane]\n"
	  "        one N x N projection vs the CPU: CORRECT or MISMATCH" },
	{ "bench", cmd_bench,
	  "bench [--iters K] [--backend emu|ane]\n"
	  "        projection sweep 128 ... 4096: us/eval, GFLOP/s, GB/s" },
	{ "width", cmd_width,
	  "width [--size N] [--iters K] [--backend emu|ane]\n"
	  "        projection cost vs activation width 1, 8, 32, 64, 128" },
	{ "attnbench", cmd_attnbench,
	  "attnbench [--ctx N] [--heads H] [--kv-heads G] [--head-dim D] [--iters K]\n"
	  "        CPU attention over the fp16 KV cache: full, dot, softmax, AV" },
	{ "cpu", cmd_cpu,
	  "cpu --model M (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N] [--json] [--dump-logits FILE]\n"
	  "        pure-CPU fp32 reference engine: greedy generation, top-5, timings" },
	{ "route", cmd_route,
	  "route --model M (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N] [--json]\n"
	  "        MoE models: per-layer expert-use histogram from the fp32 reference engine" },
	{ "info", cmd_info,
	  "info [--model M]\n"
	  "        version, backends in this build, and a model's architecture, shapes and memory" },
	{ "cache", cmd_cache,
	  "cache [--dir D] [--clear]\n"
	  "        the compiled-kernel cache: entries, sizes, last use; --clear empties it" },
	{ "tokenize", cmd_tokenize,
	  "tokenize --model M (TEXT | --file F) [--ids] [--no-bos] [--parse-special] [--chat]\n"
	  "        token ids and pieces of a text" },
};

static void
usage(FILE *out)
{
	fprintf(out, "anedvd %s - LLM inference on the Apple Neural Engine, without CoreML\n\n", ANEDVD_VERSION);
	fprintf(out, "usage: anedvd <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(out, "  %s\n", commands[i].usage);
	fprintf(out, "\n--model takes a .gguf file or a HuggingFace directory (config.json, tokenizer.json,\n"
	             "*.safetensors); the path decides. Without it, run, chat, serve and verify take the\n"
	             "bundled stories260K (share/anedvd/models/ beside the bin/ of anedvd).\n"
	             "'anedvd <command> --help' shows a command's options.\n"
	             "\nenvironment:\n"
	             "  ANEDVD_LOG=LEVEL\n"
	             "        error, warn, info (default) or debug: what every process logs on stderr\n"
	             "  ANEDVD_CACHE_DIR=DIR\n"
	             "        the compiled-kernel cache (else $XDG_CACHE_HOME/anedvd or ~/.cache/anedvd)\n"
	             "  ANEDVD_API_KEY=KEY[,KEY...]\n"
	             "        serve: the API keys, kept off the command line\n"
	             "  ANEDVD_SIMD=ref|avx2|avx512\n"
	             "        caps the emu's kernels (otherwise the best this CPU has, picked at run time)\n"
	             "  ANEDVD_BIN_DIR=DIR\n"
	             "        where the worker programs are (default: beside anedvd)\n"
	             "  XDG_RUNTIME_DIR, TMPDIR\n"
	             "        where an instance keeps its sockets (anedvd-PID in the first, else a fresh\n"
	             "        anedvd-PID-XXXXXX in the second or /tmp)\n");
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
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "help") == 0) {
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
	fprintf(stderr, "anedvd: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
