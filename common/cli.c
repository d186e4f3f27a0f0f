#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

const char *cli_prog = "anedvd";

int
cli_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!*s || *end || errno || v < lo || v > hi) {
		fprintf(stderr, "%s %s: %s takes an integer from %lld to %lld, not '%s'\n", cli_prog, cmd, flag, lo, hi,
		        s);
		return -1;
	}
	*out = v;
	return 0;
}

int
cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi, float *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (!*s || *end || errno || !isfinite(v) || v < lo || v > hi) {
		fprintf(stderr, "%s %s: %s takes a number from %g to %g, not '%s'\n", cli_prog, cmd, flag, lo, hi, s);
		return -1;
	}
	*out = (float)v;
	return 0;
}

int
cli_ids(const char *cmd, const char *flag, const char *s, int32_t **ids, int *n)
{
	int cap = 16, k = 0;
	int32_t *v = malloc((size_t)cap * sizeof *v);
	if (!v)
		return -1;
	const char *p = s;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char tok[32];
		long long x;
		if (len == 0 || len >= sizeof tok) {
			fprintf(stderr, "%s %s: %s takes comma-separated token ids, not '%s'\n", cli_prog, cmd, flag,
			        s);
			free(v);
			return -1;
		}
		memcpy(tok, p, len);
		tok[len] = 0;
		if (cli_int(cmd, flag, tok, 0, INT32_MAX, &x)) {
			free(v);
			return -1;
		}
		if (k == cap) {
			cap *= 2;
			int32_t *nv = realloc(v, (size_t)cap * sizeof *v);
			if (!nv) {
				free(v);
				return -1;
			}
			v = nv;
		}
		v[k++] = (int32_t)x;
		if (!comma)
			break;
		p = comma + 1;
	}
	*ids = v;
	*n = k;
	return 0;
}

const char *
cli_val(const char *cmd, int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		fprintf(stderr, "%s %s: %s needs a value\n", cli_prog, cmd, argv[*i]);
		return NULL;
	}
	return argv[++*i];
}

int
cli_arch(const char *cmd, const char *name)
{
	if (model_arch_from_name(name) < 0) {
		fprintf(stderr, "%s %s: --arch takes one of %s, not '%s'\n", cli_prog, cmd, model_arch_list(), name);
		return -1;
	}
	setenv("ANEDVD_ARCH", name, 1);
	return 0;
}
