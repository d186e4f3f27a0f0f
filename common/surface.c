#include "surface.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fp16.h"

// every page of a surface mapped at once (Linux): a surface's first call
// touches all its pages anyway (a plane per channel, at most a few lines
// each), and faulting them in one by one there cost the first prefill
// 4 to 8 ms on the SmolLM2-135M shape (its LM head writes 49152 planes)
#ifdef MAP_POPULATE
#define MAP_PREFAULT MAP_POPULATE
#else
#define MAP_PREFAULT 0
#endif

#define SHM_PREFIX "/anedvd-"

// the layout of an fp16 [1, channels, 1, width] tensor (layout.h) and its
// allocation; check_shape has bounded the sizes, so the layout cannot fail
static void
surface_shape(struct ad_surface *s, size_t channels, size_t width)
{
	struct ane_layout l;
	ane_layout_init(&l, channels, 1, width, 2, NULL);
	const struct ane_layout *lp = &l;
	s->channels = channels;
	s->width = width;
	s->row_stride = l.row_stride;
	s->plane_stride = l.plane_stride;
	s->bytes = ane_surface_capacity(&lp, 1);
}

static int
check_shape(size_t channels, size_t width, char *err)
{
	if (channels == 0 || width == 0 || channels > (1u << 24) || width > 4096)
		return ad_err(err, "surface: bad shape %zu x %zu", channels, width);
	return 0;
}

int
surface_create(struct ad_surface *s, const char *id, size_t channels, size_t width, unsigned flags, char *err)
{
	memset(s, 0, sizeof *s);
	if (check_shape(channels, width, err))
		return -1;
	surface_shape(s, channels, width);
	s->owner = 1;
	s->shared = (flags & AD_SURFACE_SHARED) != 0;
	if (!s->shared) {
		s->base = calloc(1, s->bytes);
		if (!s->base)
			return ad_err(err, "surface: out of memory for %zu bytes", s->bytes);
		if (id)
			snprintf(s->id, sizeof s->id, "%s", id);
		return 0;
	}
	if (!id || id[0] != '/' || strlen(id) >= sizeof s->id)
		return ad_err(err, "surface: bad id '%s'", id ? id : "(null)");
	snprintf(s->id, sizeof s->id, "%s", id);
	int fd = shm_open(id, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		return ad_err(err, "surface %s: shm_open: %s", id, strerror(errno));
	if (ftruncate(fd, (off_t)s->bytes) != 0) {
		int e = errno;
		close(fd);
		shm_unlink(id);
		return ad_err(err, "surface %s: ftruncate %zu: %s", id, s->bytes, strerror(e));
	}
	int pre = flags & AD_SURFACE_LAZY ? 0 : MAP_PREFAULT;
	void *p = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | pre, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		shm_unlink(id);
		return ad_err(err, "surface %s: mmap: %s", id, strerror(errno));
	}
	s->base = p; // ftruncate zero-fills
	return 0;
}

int
surface_open(struct ad_surface *s, const char *id, size_t channels, size_t width, char *err)
{
	memset(s, 0, sizeof *s);
	if (check_shape(channels, width, err))
		return -1;
	if (!id || id[0] != '/' || strlen(id) >= sizeof s->id)
		return ad_err(err, "surface: bad id '%s'", id ? id : "(null)");
	surface_shape(s, channels, width);
	snprintf(s->id, sizeof s->id, "%s", id);
	s->shared = 1;
	int fd = shm_open(id, O_RDWR, 0);
	if (fd < 0)
		return ad_err(err, "surface %s: shm_open: %s", id, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || (size_t)st.st_size < s->bytes) {
		close(fd);
		return ad_err(err, "surface %s: %lld bytes, %zu x %zu needs %zu", id, (long long)st.st_size, channels,
		              width, s->bytes);
	}
	// populating a shm object's hole would allocate its page: only when
	// the creator's pages are all there (st_blocks counts 512-byte units)
	int pre = (uint64_t)st.st_blocks * 512u >= s->bytes ? MAP_PREFAULT : 0;
	void *p = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED | pre, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return ad_err(err, "surface %s: mmap: %s", id, strerror(errno));
	s->base = p;
	return 0;
}

void
surface_close(struct ad_surface *s)
{
	if (!s->base)
		return;
	if (s->shared) {
		munmap(s->base, s->bytes);
		if (s->owner)
			shm_unlink(s->id);
	} else {
		free(s->base);
	}
	s->base = NULL;
}

int
surface_id(char *buf, size_t cap, long pid, const char *name)
{
	int n = snprintf(buf, cap, SHM_PREFIX "%ld-%s", pid, name);
	if (n < 0 || (size_t)n >= cap || strchr(name, '/'))
		return -1;
	return 0;
}

// parse "anedvd-<pid>-..." (the /dev/shm entry has no leading slash)
static long
entry_pid(const char *name)
{
	if (strncmp(name, SHM_PREFIX + 1, strlen(SHM_PREFIX) - 1) != 0)
		return -1;
	const char *p = name + strlen(SHM_PREFIX) - 1;
	char *end;
	long pid = strtol(p, &end, 10);
	if (end == p || *end != '-' || pid <= 0)
		return -1;
	return pid;
}

static int
cleanup(long only_pid)
{
	DIR *d = opendir("/dev/shm");
	if (!d)
		return 0;
	int removed = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		long pid = entry_pid(e->d_name);
		if (pid < 0)
			continue;
		if (only_pid > 0 ? pid != only_pid : (kill((pid_t)pid, 0) == 0 || errno == EPERM))
			continue;
		char id[300];
		snprintf(id, sizeof id, "/%s", e->d_name);
		if (shm_unlink(id) == 0)
			removed++;
	}
	closedir(d);
	return removed;
}

int
surface_cleanup_stale(void)
{
	return cleanup(0);
}

int
surface_cleanup_pid(long pid)
{
	return pid > 0 ? cleanup(pid) : 0;
}

void
surface_write(struct ad_surface *s, const float *x, size_t ncols, size_t ld)
{
	uint8_t *base = (uint8_t *)s->base;
	for (size_t c = 0; c < s->channels; c++) {
		uint16_t *plane = (uint16_t *)(base + c * s->plane_stride);
		for (size_t j = 0; j < ncols; j++)
			plane[j] = ad_f32_to_fp16(x[j * ld + c]);
	}
}

void
surface_read(const struct ad_surface *s, float *x, size_t ncols, size_t ld)
{
	const uint8_t *base = (const uint8_t *)s->base;
	for (size_t c = 0; c < s->channels; c++) {
		const uint16_t *plane = (const uint16_t *)(base + c * s->plane_stride);
		for (size_t j = 0; j < ncols; j++)
			x[j * ld + c] = ad_fp16_to_f32(plane[j]);
	}
}
