// trace.c - see trace.h.
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "trace.h"

static char env_prefix[PATH_MAX];

struct tev {
	long pid, tid;
	char name[48], cat[16];
	uint64_t ts, dur;
	int nargs;
	const char *key[TRACE_ARGS];
	double val[TRACE_ARGS];
};

struct tproc {
	long pid;
	char name[32];
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct tev *ev;
static size_t nev, capev;
static struct tproc procs[16];
static int nprocs;
static int enabled;

void
trace_enable(void)
{
	enabled = 1;
}

int
trace_enabled(void)
{
	return enabled;
}

uint64_t
trace_now_us(void)
{
	return ad_now_ns() / 1000u;
}

void
trace_event(long pid, long tid, const char *name, const char *cat, uint64_t ts_us, uint64_t dur_us)
{
	trace_event_args(pid, tid, name, cat, ts_us, dur_us, NULL, NULL, 0);
}

void
trace_event_args(long pid, long tid, const char *name, const char *cat, uint64_t ts_us, uint64_t dur_us,
                 const char *const *keys, const double *vals, int nargs)
{
	if (!enabled)
		return;
	pthread_mutex_lock(&mu);
	if (nev == capev) {
		size_t nc = capev ? capev * 2 : 4096;
		struct tev *n = realloc(ev, nc * sizeof *n);
		if (!n) {
			pthread_mutex_unlock(&mu);
			return;
		}
		ev = n;
		capev = nc;
	}
	struct tev *e = &ev[nev++];
	e->pid = pid;
	e->tid = tid;
	snprintf(e->name, sizeof e->name, "%s", name);
	snprintf(e->cat, sizeof e->cat, "%s", cat);
	e->ts = ts_us;
	e->dur = dur_us;
	e->nargs = nargs < 0 ? 0 : nargs > TRACE_ARGS ? TRACE_ARGS : nargs;
	for (int i = 0; i < e->nargs; i++) {
		e->key[i] = keys[i];
		e->val[i] = vals[i];
	}
	pthread_mutex_unlock(&mu);
}

void
trace_process(long pid, const char *name)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < nprocs; i++)
		if (procs[i].pid == pid) {
			snprintf(procs[i].name, sizeof procs[i].name, "%s", name);
			pthread_mutex_unlock(&mu);
			return;
		}
	if (nprocs < (int)(sizeof procs / sizeof procs[0])) {
		procs[nprocs].pid = pid;
		snprintf(procs[nprocs].name, sizeof procs[nprocs].name, "%s", name);
		nprocs++;
	}
	pthread_mutex_unlock(&mu);
}

// a JSON string body: names here are plain, but escape what JSON needs
static void
put_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

// call fn(path, arg) for every file "<prefix>*.json"
static void
each_part(const char *prefix, void (*fn)(const char *path, void *arg), void *arg)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof dir, "%s", prefix);
	char *sl = strrchr(dir, '/');
	const char *stem = sl ? sl + 1 : dir;
	if (sl)
		*sl = 0;
	DIR *d = opendir(sl ? dir : ".");
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t L = strlen(de->d_name);
		if (strncmp(de->d_name, stem, strlen(stem)) != 0 || L < 5 || strcmp(de->d_name + L - 5, ".json"))
			continue;
		char p[PATH_MAX + 256];
		snprintf(p, sizeof p, "%s/%s", sl ? dir : ".", de->d_name);
		fn(p, arg);
	}
	if (d)
		closedir(d);
}

struct merge {
	FILE *out;
	int first; // nothing written yet
};

// append the elements of a file holding one JSON array
static void
merge_file(const char *path, void *arg)
{
	struct merge *m = arg;
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = n > 0 ? malloc((size_t)n + 1) : NULL;
	if (b && fread(b, 1, (size_t)n, f) == (size_t)n) {
		b[n] = 0;
		char *l = strchr(b, '['), *r = strrchr(b, ']');
		if (l && r && r > l) {
			char *p = l + 1;
			while (p < r && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
				p++;
			if (p < r) {
				if (!m->first)
					fputs(",\n", m->out);
				fwrite(p, 1, (size_t)(r - p), m->out);
				m->first = 0;
			}
		}
	}
	free(b);
	fclose(f);
}

static void
remove_file(const char *path, void *arg)
{
	unlink(path);
}

int
trace_write(const char *path, const char *merge_prefix, char *err)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return ad_err(err, "--trace %s: cannot write", path);
	pthread_mutex_lock(&mu);
	fputs("[\n", f);
	int first = 1;
	for (int i = 0; i < nprocs; i++) {
		fprintf(f, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%ld,\"tid\":0,\"args\":{\"name\":",
		        first ? "" : ",\n", procs[i].pid);
		put_str(f, procs[i].name);
		fputs("}}", f);
		first = 0;
	}
	for (size_t i = 0; i < nev; i++) {
		struct tev *e = &ev[i];
		fprintf(f, "%s{\"ph\":\"X\",\"name\":", first ? "" : ",\n");
		put_str(f, e->name);
		fputs(",\"cat\":", f);
		put_str(f, e->cat);
		fprintf(f, ",\"pid\":%ld,\"tid\":%ld,\"ts\":%llu,\"dur\":%llu", e->pid, e->tid,
		        (unsigned long long)e->ts, (unsigned long long)e->dur);
		for (int a = 0; a < e->nargs; a++) {
			fputs(a ? "," : ",\"args\":{", f);
			put_str(f, e->key[a]);
			// a number JSON can hold (not NaN or infinite)
			fprintf(f, ":%.6g", e->val[a] == e->val[a] && e->val[a] - e->val[a] == 0 ? e->val[a] : 0.0);
		}
		fputs(e->nargs ? "}}" : "}", f);
		first = 0;
	}
	pthread_mutex_unlock(&mu);
	if (merge_prefix) {
		struct merge m = {f, first};
		each_part(merge_prefix, merge_file, &m);
	}
	fputs("\n]\n", f);
	if (fclose(f) != 0)
		return ad_err(err, "--trace %s: cannot write", path);
	return 0;
}

void
trace_remove_parts(const char *merge_prefix)
{
	each_part(merge_prefix, remove_file, NULL);
}

void
trace_reset(void)
{
	pthread_mutex_lock(&mu);
	free(ev);
	ev = NULL;
	nev = capev = 0;
	nprocs = 0;
	pthread_mutex_unlock(&mu);
}

int
trace_flush_env(char *err)
{
	if (!env_prefix[0])
		return 0;
	char path[PATH_MAX + 32];
	snprintf(path, sizeof path, "%s.%ld.json", env_prefix, (long)getpid());
	return trace_write(path, NULL, err);
}

static void
flush_at_exit(void)
{
	trace_flush_env(NULL);
}

int
trace_from_env(const char *process)
{
	const char *p = getenv("ANEDVD_TRACE");
	if (!p || !*p || strlen(p) >= sizeof env_prefix)
		return 0;
	snprintf(env_prefix, sizeof env_prefix, "%s", p);
	trace_enable();
	trace_process((long)getpid(), process);
	atexit(flush_at_exit);
	return 1;
}
