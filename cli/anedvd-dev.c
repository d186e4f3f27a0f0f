// anedvd-dev - the developer tools: kernel checks, probes and benchmarks.
//
// They look at the kernels and parts in this process (cli/cmd-tools.c) and
// are for working on anedvd itself, so they are kept out of the user's
// anedvd, whose --help lists the user's commands only. A build makes both
// programs; the package puts this one off the PATH, in /usr/lib/anedvd.
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "log.h"

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
} tools[] = {
	{"check", cmd_check,
         "check --model M [--split] [--chunk N] [--backend emu|ane] [--prompt T]\n"
         "        config, RoPE, every kernel of layer 0 and the LM head vs an fp32 matmul,\n"
         "        and sample predictions (top 5 after the prompt) against the reference"},
	{"layers", cmd_layers,
         "layers --model M --upto N [--prompt-ids 1,2,3] [--backend emu|ane]\n"
         "        top-5 next tokens after the first N layers, backend and reference"},
	{"kernels", cmd_kernels,
         "kernels --model M [--iters K] [--chunk N] [--cols N] [--backend emu|ane]\n"
         "        per-kernel time and achieved weight bandwidth (layer 0 + LM head)"},
	{"probe", cmd_probe,
         "probe [--size N] [--iters K] [--backend emu|ane]\n"
         "        one N x N projection vs the CPU: CORRECT or MISMATCH"},
	{"bench", cmd_bench,
         "bench [--iters K] [--backend emu|ane]\n"
         "        projection sweep 128 ... 4096: us/eval, GFLOP/s, GB/s"},
	{"width", cmd_width,
         "width [--size N] [--iters K] [--backend emu|ane]\n"
         "        projection cost vs activation width 1, 8, 32, 64, 128"},
	{"attnbench", cmd_attnbench,
         "attnbench [--ctx N] [--heads H] [--kv-heads G] [--head-dim D] [--iters K]\n"
         "        CPU attention over the fp16 KV cache: full, dot, softmax, AV"},
};

static void
usage(FILE *out)
{
	fprintf(out, "anedvd-dev %s - the developer tools of anedvd: kernel checks, probes, benchmarks\n\n",
	        ANEDVD_VERSION);
	fprintf(out, "usage: anedvd-dev <tool> [options]\n\ntools:\n");
	for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++)
		fprintf(out, "  %s\n", tools[i].usage);
	fprintf(out, "\nEach runs in this process (no worker processes): the kernels are built here on\n"
	             "the backend (emu, the CPU; ane in a macOS build). 'anedvd-dev <tool> --help' shows\n"
	             "a tool's options. The user's commands (run, chat, serve, verify, ...) are anedvd's.\n");
}

int
main(int argc, char **argv)
{
	ad_log_init("anedvd-dev");
	cli_prog = "anedvd-dev"; // in the flag messages of common/cli.c
	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
		printf("anedvd-dev %s\n", ANEDVD_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof tools / sizeof tools[0]; i++)
		if (strcmp(argv[1], tools[i].name) == 0)
			return tools[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "anedvd-dev: unknown tool '%s' (the user's commands are anedvd's)\n\n", argv[1]);
	usage(stderr);
	return 2;
}
