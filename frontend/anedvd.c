// anedvd - the command-line entry point.
//
// Dispatches to the subcommands. Only commands that work are listed; the
// pipeline commands (run, chat, serve, verify, ...) arrive with the worker
// processes.
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "log.h"

struct command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
};

static const struct command commands[] = {
	{ "cpu", cmd_cpu,
	  "cpu --model M (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N] [--json] [--dump-logits FILE]\n"
	  "        pure-CPU fp32 reference engine: greedy generation, top-5, timings" },
	{ "info", cmd_info,
	  "info [--model M]\n"
	  "        version, backends in this build, and a model's architecture, shapes and memory" },
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
	             "*.safetensors); the path decides. 'anedvd <command> --help' shows a command's options.\n");
}

int
main(int argc, char **argv)
{
	ad_log_init("anedvd");
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
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "anedvd: unknown command '%s'\n\n", argv[1]);
	usage(stderr);
	return 2;
}
