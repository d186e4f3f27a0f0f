// cmd-cache.c - `anedvd cache`: the compiled-kernel cache (ane-worker/kcache.h).
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "kcache.h"

static void
cache_usage(FILE *f)
{
	fprintf(f, "usage: anedvd cache [--dir D] [--clear]\n"
	           "  lists the compiled-kernel cache's entries (model, options, size, last use)\n"
	           "  --dir D   the cache directory (default $ANEDVD_CACHE_DIR, $XDG_CACHE_HOME/anedvd\n"
	           "            or ~/.cache/anedvd: what the ane-worker uses without --cache-dir)\n"
	           "  --clear   remove every entry (and any temporary file a writer left)\n");
}

struct tally {
	int n;
	uint64_t bytes;
};

static void
show(const struct kc_info *in, void *arg)
{
	struct tally *t = arg;
	t->n++;
	t->bytes += in->bytes;
	char when[32];
	time_t mt = (time_t)in->mtime;
	struct tm tm;
	strftime(when, sizeof when, "%Y-%m-%d %H:%M", localtime_r(&mt, &tm));
	if (in->temporary)
		printf("%-22s %9.1f MB  %s  (temporary: a writer's, or one that died)\n", in->name,
		       (double)in->bytes / 1e6, when);
	else if (!in->valid && in->format && in->format != KC_FORMAT)
		// another build's, whose key (which names the format) is not this
		// build's: nothing reads it, and it stays until evicted or cleared
		printf("%-22s %9.1f MB  %s  (format %u, this build reads %d: not used; the size bound or --clear "
		       "removes it)\n",
		       in->name, (double)in->bytes / 1e6, when, in->format, KC_FORMAT);
	else if (!in->valid)
		printf("%-22s %9.1f MB  %s  (unusable: rebuilt on its next use)\n", in->name, (double)in->bytes / 1e6,
		       when);
	else
		printf("%-22s %9.1f MB  %s  %d kernels  %s  [%s]\n", in->name, (double)in->bytes / 1e6, when,
		       in->nkernels, in->model, in->options);
}

int
cmd_cache(int argc, char **argv)
{
	const char *dir = NULL;
	int clear = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			cache_usage(stdout);
			return 0;
		} else if (!strcmp(argv[i], "--clear")) {
			clear = 1;
		} else if (!strcmp(argv[i], "--dir") && i + 1 < argc) {
			dir = argv[++i];
		} else {
			fprintf(stderr, "anedvd cache: unknown option '%s'\n", argv[i]);
			cache_usage(stderr);
			return 2;
		}
	}
	char d[4096], err[AD_ERRLEN];
	if (!dir) {
		if (kc_default_dir(d, sizeof d)) {
			fprintf(stderr,
			        "anedvd cache: no cache directory (set ANEDVD_CACHE_DIR or HOME, or give --dir)\n");
			return 1;
		}
		dir = d;
	}
	if (clear) {
		int files;
		uint64_t bytes;
		int rc = kc_clear(dir, &files, &bytes, err);
		printf("%s: removed %d file%s, %.1f MB\n", dir, files, files == 1 ? "" : "s", (double)bytes / 1e6);
		if (rc) {
			fprintf(stderr, "anedvd cache: %s\n", err);
			return 1;
		}
		return 0;
	}
	printf("%s\n", dir);
	struct tally t = {0};
	if (kc_list(dir, show, &t, err) < 0) {
		fprintf(stderr, "anedvd cache: %s\n", err);
		return 1;
	}
	printf("%d entr%s, %.1f MB (bound %d MB, --cache-max-mb)\n", t.n, t.n == 1 ? "y" : "ies", (double)t.bytes / 1e6,
	       KC_DEFAULT_MAX_MB);
	return 0;
}
