// t.h - the test kit: one header, no framework.
//
// A test program defines functions `static void test_x(void)` and lists them
// in main with T_RUN(test_x). CHECK records a failure with file:line and
// goes on; REQUIRE stops the current test. t_done prints the closing line
// "N passed, N failed" (counted per CHECK) and returns the exit status.
//
// Tests find their data through T_DATA (set by CMake to tests/data in the
// source tree) and write scratch files under t_tmpdir().
#ifndef AD_T_H
#define AD_T_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef T_DATA
#define T_DATA "tests/data"
#endif

#include <stdarg.h>

static int t_pass, t_fail;
static const char *t_name;
static jmp_buf t_jmp;

// t_note prints a failure's message (no format attribute: the message is optional)
static inline void
t_note(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
}

#define CHECK(cond, ...)                                                                                               \
	do {                                                                                                           \
		if (cond) {                                                                                            \
			t_pass++;                                                                                      \
		} else {                                                                                               \
			t_fail++;                                                                                      \
			fprintf(stderr, "FAIL %s %s:%d: %s: ", t_name, __FILE__, __LINE__, #cond);                     \
			t_note("" __VA_ARGS__);                                                                        \
			fprintf(stderr, "\n");                                                                         \
		}                                                                                                      \
	} while (0)

#define REQUIRE(cond, ...)                                                                                             \
	do {                                                                                                           \
		int t_ok_ = !!(cond);                                                                                  \
		CHECK(t_ok_ &&#cond, __VA_ARGS__);                                                                     \
		if (!t_ok_)                                                                                            \
			longjmp(t_jmp, 1);                                                                             \
	} while (0)

#define CHECK_NEAR(a, b, tol)                                                                                          \
	do {                                                                                                           \
		double t_a_ = (a), t_b_ = (b);                                                                         \
		CHECK(fabs(t_a_ - t_b_) <= (tol), "%s=%.9g %s=%.9g tol=%g", #a, t_a_, #b, t_b_, (double)(tol));        \
	} while (0)

#define T_RUN(fn)                                                                                                      \
	do {                                                                                                           \
		t_name = #fn;                                                                                          \
		int t_before_ = t_fail;                                                                                \
		if (setjmp(t_jmp) == 0)                                                                                \
			fn();                                                                                          \
		fprintf(stderr, "%s %s\n", t_fail == t_before_ ? "ok  " : "FAIL", #fn);                                \
	} while (0)

static inline int
t_done(void)
{
	printf("%d passed, %d failed\n", t_pass, t_fail);
	return t_fail ? 1 : 0;
}

// t_rmtree removes a directory tree (symlinks are removed, not followed);
// 0 when it is gone.
static inline int
t_rmtree_at(int at, const char *name)
{
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == EACCES && fchmodat(at, name, S_IRWXU, 0) == 0) // a test's mode 000
		fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) // not a directory (or gone): a plain entry
		return unlinkat(at, name, 0) == 0 || errno == ENOENT ? 0 : -1;
	(void)fchmod(fd, S_IRWXU); // entries of a read-only directory can be removed
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && t_rmtree_at(dirfd(d), e->d_name))
			rc = -1;
	closedir(d);
	if (unlinkat(at, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
		rc = -1;
	return rc;
}

static inline int
t_rmtree(const char *path)
{
	return t_rmtree_at(AT_FDCWD, path);
}

// t_tmpdir returns a private scratch directory for this test process, made
// in $TMPDIR (else /tmp) on the first call. It is removed when the process
// that made it exits through exit() or main's return, passed or failed
// (a forked child that exits leaves it alone); a crash leaves it, and
// ctest's test-tmp-clean names it. ANEDVD_KEEP_TMP=1 keeps it and prints
// its path, for looking at what a test wrote.
static char t_tmp[256];
static pid_t t_tmp_owner;

static inline void
t_tmpdir_remove(void)
{
	if (!t_tmp[0] || getpid() != t_tmp_owner)
		return;
	const char *keep = getenv("ANEDVD_KEEP_TMP");
	if (keep && *keep) {
		fprintf(stderr, "kept the scratch directory %s (ANEDVD_KEEP_TMP)\n", t_tmp);
		return;
	}
	// a child the test stopped may still be closing a file in it: try again
	int rc = t_rmtree(t_tmp);
	for (int i = 0; i < 50 && rc != 0; i++) {
		usleep(20000);
		rc = t_rmtree(t_tmp);
	}
	if (rc != 0)
		fprintf(stderr, "could not remove the scratch directory %s: %s\n", t_tmp, strerror(errno));
}

static inline const char *
t_tmpdir(void)
{
	if (!t_tmp[0]) {
		const char *base = getenv("TMPDIR");
		snprintf(t_tmp, sizeof t_tmp, "%s/anedvd-test-XXXXXX", base && *base ? base : "/tmp");
		if (!mkdtemp(t_tmp)) {
			perror("mkdtemp");
			exit(2);
		}
		t_tmp_owner = getpid();
		atexit(t_tmpdir_remove);
	}
	return t_tmp;
}

// t_read_file reads a whole file; returns NULL (and *n = 0) on failure.
static inline void *
t_read_file(const char *path, size_t *n)
{
	*n = 0;
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)len + 1);
	if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf) {
		buf[len] = 0;
		*n = (size_t)len;
	}
	return buf;
}

#endif
