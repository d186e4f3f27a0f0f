// Shared-memory surfaces: layout, sharing between processes, stale cleanup.
#include <sys/stat.h>
#include <sys/wait.h>

#include "fp16.h"
#include "surface.h"
#include "t.h"

static int
shm_exists(const char *id)
{
	char path[300];
	struct stat st;
	snprintf(path, sizeof path, "/dev/shm%s", id);
	return stat(path, &st) == 0;
}

static void
test_layout(void)
{
	char err[AD_ERRLEN];
	struct ad_surface s;
	REQUIRE(surface_create(&s, NULL, 896, 1, 0, err) == 0, "%s", err);
	CHECK(s.row_stride == 64 && s.plane_stride == 64, "decode: every channel in its own 64-byte plane");
	CHECK(s.bytes == 896 * 64, "bytes %zu", s.bytes);
	surface_close(&s);
	REQUIRE(surface_create(&s, NULL, 8, 64, 0, err) == 0, "%s", err);
	CHECK(s.row_stride == 128 && s.bytes == AD_SURFACE_MIN_BYTES, "row %zu bytes %zu", s.row_stride, s.bytes);
	// write columns 0..2 of an [3][ld=10] block and read them back
	float x[30], y[30];
	for (int i = 0; i < 30; i++)
		x[i] = (float)i * 0.25f - 3.0f;
	surface_write(&s, x, 3, 10);
	memset(y, 0, sizeof y);
	surface_read(&s, y, 3, 10);
	int same = 1;
	for (int j = 0; j < 3; j++)
		for (int c = 0; c < 8; c++)
			same &= y[j * 10 + c] == ad_fp16_to_f32(ad_f32_to_fp16(x[j * 10 + c]));
	CHECK(same, "round trip through fp16");
	// channel 5, column 2 sits at plane 5, element 2
	CHECK(s.base[5 * 64 + 2] == ad_f32_to_fp16(x[2 * 10 + 5]), "planar placement");
	surface_close(&s);
	CHECK(surface_create(&s, NULL, 0, 1, 0, err) == -1 && strstr(err, "bad shape"), "%s", err);
}

static void
test_shared(void)
{
	char err[AD_ERRLEN], id[AD_SURFACE_ID_MAX];
	REQUIRE(surface_id(id, sizeof id, (long)getpid(), "x0") == 0);
	struct ad_surface s, o;
	REQUIRE(surface_create(&s, id, 64, 4, 1, err) == 0, "%s", err);
	CHECK(shm_exists(id), "%s exists", id);
	CHECK(surface_create(&o, id, 64, 4, 1, err) == -1, "a second create of the same id fails");
	pid_t pid = fork();
	if (pid == 0) {
		struct ad_surface c;
		if (surface_open(&c, id, 64, 4, NULL) != 0)
			_exit(3);
		float v[64];
		for (int i = 0; i < 64; i++)
			v[i] = (float)i;
		surface_write(&c, v, 1, 64);
		surface_close(&c);
		_exit(0);
	}
	int status;
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d", status);
	float v[64];
	surface_read(&s, v, 1, 64);
	CHECK(v[0] == 0.0f && v[63] == 63.0f, "written by the other process: %g %g", v[0], v[63]);
	CHECK(surface_open(&o, id, 64, 4096, err) == -1 && strstr(err, "needs"), "too small for the shape: %s", err);
	surface_close(&s);
	CHECK(!shm_exists(id), "the owner unlinks");
	CHECK(surface_open(&o, id, 64, 4, err) == -1, "gone after close");
	CHECK(surface_id(id, sizeof id, 1, "a/b") == -1, "slash in a name");
}

static void
test_stale(void)
{
	char err[AD_ERRLEN], dead[AD_SURFACE_ID_MAX], live[AD_SURFACE_ID_MAX];
	// a pid that is certainly not running: a child that has exited and been reaped
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	REQUIRE(surface_id(dead, sizeof dead, (long)pid, "stale") == 0);
	REQUIRE(surface_id(live, sizeof live, (long)getpid(), "live") == 0);
	struct ad_surface a, b;
	REQUIRE(surface_create(&a, dead, 4, 1, 1, err) == 0, "%s", err);
	REQUIRE(surface_create(&b, live, 4, 1, 1, err) == 0, "%s", err);
	a.owner = 0; // pretend its creator crashed
	surface_close(&a);
	CHECK(shm_exists(dead), "left behind");
	CHECK(surface_cleanup_stale() >= 1, "cleanup removed something");
	CHECK(!shm_exists(dead), "stale object removed");
	CHECK(shm_exists(live), "a live instance's object is kept");
	b.owner = 0;
	surface_close(&b);
	CHECK(surface_cleanup_pid((long)getpid()) == 1 && !shm_exists(live), "cleanup of one instance");
}

int
main(void)
{
	T_RUN(test_layout);
	T_RUN(test_shared);
	T_RUN(test_stale);
	return t_done();
}
