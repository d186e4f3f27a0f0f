// gen-model - write a deterministic random model for benchmarks and tests.
//
//   gen-model PRESET WTYPE SEED OUT.gguf [N_LAYER] [--template FILE] [--eos ID]
//
// PRESET: tiny, smollm2-135m, qwen2.5-0.5b (the exact shapes of the
// published models), think (a scripted Qwen3-style model); WTYPE: f32,
// f16, bf16, q8_0, q4_0. --template writes FILE as the chat template; --eos ID
// writes ID as the EOS and EOT ids (a further end-of-generation id: see
// struct genmodel). The same
// arguments give the same bytes. See cli/cmd-genmodel.h.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd-genmodel.h"

int
main(int argc, char **argv)
{
	char *tmpl = NULL;
	int eos = 0;
	if (argc >= 7 && !strcmp(argv[argc - 2], "--eos")) {
		char *e;
		long v = strtol(argv[argc - 1], &e, 10);
		if (*e || v < 1 || v > 1000000) {
			fprintf(stderr, "gen-model: --eos must be a token id, not '%s'\n", argv[argc - 1]);
			return 2;
		}
		eos = (int)v;
		argc -= 2;
	}
	if (argc >= 7 && !strcmp(argv[argc - 2], "--template")) {
		FILE *f = fopen(argv[argc - 1], "rb");
		if (!f) {
			fprintf(stderr, "gen-model: cannot read %s\n", argv[argc - 1]);
			return 1;
		}
		fseek(f, 0, SEEK_END);
		long n = ftell(f);
		fseek(f, 0, SEEK_SET);
		tmpl = calloc((size_t)n + 1, 1);
		if (!tmpl || fread(tmpl, 1, (size_t)n, f) != (size_t)n) {
			fprintf(stderr, "gen-model: cannot read %s\n", argv[argc - 1]);
			fclose(f);
			return 1;
		}
		fclose(f);
		argc -= 2;
	}
	if (argc != 5 && argc != 6) {
		fprintf(stderr,
		        "usage: gen-model PRESET WTYPE SEED OUT.gguf [N_LAYER] [--template FILE] [--eos ID]\n"
		        "  PRESET tiny | smollm2-135m | qwen2.5-0.5b | think, WTYPE f32 | f16 | bf16 | q8_0 | q4_0\n");
		return 2;
	}
	char *end;
	struct genmodel g = {.preset = argv[1],
	                     .wtype = argv[2],
	                     .seed = strtoull(argv[3], &end, 10),
	                     .chat_template = tmpl,
	                     .eos = eos};
	if (*end) {
		fprintf(stderr, "gen-model: SEED must be a number, not '%s'\n", argv[3]);
		return 2;
	}
	if (argc == 6) {
		long l = strtol(argv[5], &end, 10);
		if (*end || l < 1 || l > 1000) {
			fprintf(stderr, "gen-model: N_LAYER must be 1..1000, not '%s'\n", argv[5]);
			return 2;
		}
		g.n_layer = (int)l;
	}
	char err[AD_ERRLEN];
	int rc = genmodel_write(&g, argv[4], err);
	free(tmpl);
	if (rc) {
		fprintf(stderr, "gen-model: %s\n", err);
		return 1;
	}
	return 0;
}
