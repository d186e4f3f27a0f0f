// cmd-common.c - what the commands share besides the pipeline
// (cmd-common.h): their usage, their flags, ids as JSON.
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cmd-common.h"

void
cli_usage(const char *cmd, int full, const char *text)
{
	const char *nl = strchr(text, '\n');
	int n = nl ? (int)(nl - text) : (int)strlen(text);
	// asked for (--help): stdout, to page or grep; after a mistake: stderr
	FILE *out = full ? stdout : stderr;
	fprintf(out, "usage: anedvd %s %.*s\n", cmd, n, text);
	if (!full)
		fprintf(out, "       anedvd %s --help  lists the options\n", cmd);
	else if (nl)
		fputs(nl + 1, out);
}

int
cli_help_or_unknown(const char *cmd, const char *a)
{
	if (!strcmp(a, "-h") || !strcmp(a, "--help"))
		return 1;
	fprintf(stderr, "%s %s: unknown argument '%s'\n", cli_prog, cmd, a);
	return -1;
}

const char *
cli_long_flag(const char *a)
{
	static const char *const alias[][2] = {{"-m", "--model"},   {"-p", "--prompt"}, {"-n", "--max-tokens"},
	                                       {"-c", "--max-seq"}, {"-s", "--seed"},   {"-t", "--threads"}};
	for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
		if (!strcmp(a, alias[i][0]))
			return alias[i][1];
	return NULL;
}

int
cli_plain_flag(const char *cmd, const struct cli_plain *f, int argc, char **argv, int *i)
{
	for (; f->flag; f++) {
		if (strcmp(argv[*i], f->flag))
			continue;
		const char *v = NULL;
		long long x;
		if (f->on)
			*f->on = 1;
		else if (!(v = cli_val(cmd, argc, argv, i)))
			return -1;
		else if (f->val)
			*f->val = v;
		else if (cli_int(cmd, f->flag, v, f->lo, f->hi, &x))
			return -1;
		else
			*f->num = (int)x;
		return 1;
	}
	return 0;
}

int
cli_model_flag(const char *cmd, enum model_rope *rope, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;
	if (!strcmp(a, "--rope-hf")) {
		*rope = MODEL_ROPE_NEOX;
	} else if (!strcmp(a, "--rope-adjacent")) {
		*rope = MODEL_ROPE_NORM;
	} else if (!strcmp(a, "--arch")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_arch(cmd, v))
			return -1;
	} else {
		return 0;
	}
	return 1;
}

cJSON *
cli_json_ids(const int32_t *ids, int n)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
	return a;
}
