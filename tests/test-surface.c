// Shared-memory surfaces: layout, sharing between processes, stale cleanup;
// the planar moves (planar.h) against their plain twins.
#include <sys/stat.h>
#include <sys/wait.h>

#include "fp16.h"
#include "planar.h"
#include "pool.h"
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
	CHECK(s.row_stride == 128 && s.bytes == ANE_MIN_SURFACE, "row %zu bytes %zu", s.row_stride, s.bytes);
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

// pages a surface's shm object holds (tmpfs counts its blocks as pages land)
static long long
shm_bytes(const char *id)
{
	char path[300];
	struct stat st;
	snprintf(path, sizeof path, "/dev/shm%s", id);
	return stat(path, &st) == 0 ? (long long)st.st_blocks * 512 : -1;
}

// a lazy surface holds no memory until written, and another process's
// surface_open does not give it any; a plain one has all its pages at once
static void
test_lazy(void)
{
	char err[AD_ERRLEN], lid[AD_SURFACE_ID_MAX], pid_[AD_SURFACE_ID_MAX];
	REQUIRE(surface_id(lid, sizeof lid, (long)getpid(), "lazy") == 0);
	REQUIRE(surface_id(pid_, sizeof pid_, (long)getpid(), "full") == 0);
	struct ad_surface l, f, o;
	REQUIRE(surface_create(&l, lid, 4096, 64, AD_SURFACE_SHARED | AD_SURFACE_LAZY, err) == 0, "%s", err);
	REQUIRE(surface_create(&f, pid_, 4096, 64, AD_SURFACE_SHARED, err) == 0, "%s", err);
	CHECK(l.bytes == 4096 * 128 && f.bytes == l.bytes, "bytes %zu %zu", l.bytes, f.bytes);
	CHECK(shm_bytes(lid) == 0, "lazy: %lld bytes held after create", shm_bytes(lid));
	CHECK(shm_bytes(pid_) >= (long long)f.bytes, "plain: %lld bytes held, %zu mapped", shm_bytes(pid_), f.bytes);
	REQUIRE(surface_open(&o, lid, 4096, 64, err) == 0, "%s", err);
	CHECK(o.base[4095 * 64] == 0, "a lazy page reads as zero");
	CHECK(shm_bytes(lid) <= 4096, "lazy, opened again: %lld bytes held", shm_bytes(lid));
	float v[4096];
	for (int i = 0; i < 4096; i++)
		v[i] = (float)(i % 7);
	surface_write(&o, v, 1, 4096); // column 0: a line of every plane
	CHECK(shm_bytes(lid) >= (long long)l.bytes, "written: %lld bytes held", shm_bytes(lid));
	float r[4096];
	surface_read(&l, r, 1, 4096);
	CHECK(r[4095] == (float)(4095 % 7) && r[1] == 1.0f, "the writes seen by the creator: %g", r[4095]);
	surface_close(&o);
	surface_close(&l);
	surface_close(&f);
	CHECK(!shm_exists(lid) && !shm_exists(pid_), "the owner unlinks both");
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

// every fp16 bit pattern class (zeros, subnormals, normals, infinities,
// NaNs with payloads) and random floats that round in every way
static float
odd_value(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	unsigned r = *seed >> 8;
	switch (r % 4) {
	case 0:
		return ad_fp16_to_f32((uint16_t)(r >> 3)); // any fp16, NaN and inf too
	case 1:
		return ad_bits_f32((r * 2654435761u) & 0x8fffffffu); // tiny to huge
	case 2:
		return (float)(int)(r % 20001 - 10000) / 977.0f; // ordinary
	default:
		return ad_bits_f32(0x387fc000u + (r % 64000u)); // around the subnormal edge
	}
}

// two equal surfaces of C planes (ps bytes apart) of random bytes, NaNs
// included; ncols rows of ld random values; two zeroed row buffers
struct moves {
	uint8_t *s1, *s2;
	float *x, *y1, *y2;
};

static void
moves_new(struct moves *m, size_t C, size_t ps, size_t ncols, size_t ld, unsigned *seed)
{
	m->s1 = malloc(C * ps);
	m->s2 = malloc(C * ps);
	m->x = malloc(ncols * ld * sizeof(float));
	m->y1 = calloc(ncols * ld, sizeof(float));
	m->y2 = calloc(ncols * ld, sizeof(float));
	REQUIRE(m->s1 && m->s2 && m->x && m->y1 && m->y2);
	for (size_t i = 0; i < C * ps; i++)
		m->s1[i] = (uint8_t)(odd_value(seed) * 7.0f);
	memcpy(m->s2, m->s1, C * ps);
	for (size_t i = 0; i < ncols * ld; i++)
		m->x[i] = odd_value(seed);
}

static void
moves_free(struct moves *m)
{
	free(m->s1);
	free(m->s2);
	free(m->x);
	free(m->y1);
	free(m->y2);
}

// fast and plain moves give the same bits for every channel count (not
// only multiples of 8), column count and plane stride, and a scatter
// leaves the columns past ncols alone
static void
test_planar_twins(void)
{
	const size_t Cs[] = {1, 7, 8, 9, 64, 77};
	const size_t widths[] = {1, 5, 8, 13, 32, 40, 64};
	unsigned seed = 7;
	int bad_g = 0, bad_s = 0, bad_keep = 0, cases = 0;
	for (size_t a = 0; a < sizeof Cs / sizeof *Cs; a++)
		for (size_t b = 0; b < sizeof widths / sizeof *widths; b++) {
			size_t C = Cs[a], W = widths[b];
			size_t ps = (W * 2 + 63) / 64 * 64; // a plane per 64 bytes, as surfaces have
			for (size_t ncols = 1; ncols <= W; ncols += ncols < 10 ? 1 : 7) {
				size_t ld = C + (ncols % 3); // rows longer than C too
				struct moves m;
				moves_new(&m, C, ps, ncols, ld, &seed);
				uint8_t *s1 = m.s1, *s2 = m.s2;
				float *x = m.x, *y1 = m.y1, *y2 = m.y2;
				// gather: the surface's random bytes, NaNs included
				ad_planar_gather(s1, ps, y1, C, ld, ncols);
				ad_planar_gather_ref(s1, ps, y2, C, ld, ncols);
				bad_g += memcmp(y1, y2, ncols * ld * sizeof(float)) != 0;
				// scatter over the same random bytes
				uint8_t *before = malloc(C * ps);
				REQUIRE(before);
				memcpy(before, s1, C * ps);
				ad_planar_scatter(s1, ps, x, C, ld, ncols);
				ad_planar_scatter_ref(s2, ps, x, C, ld, ncols);
				bad_s += memcmp(s1, s2, C * ps) != 0;
				for (size_t c = 0; c < C; c++)
					bad_keep += memcmp(s1 + c * ps + ncols * 2, before + c * ps + ncols * 2,
					                   ps - ncols * 2) != 0;
				free(before);
				moves_free(&m);
				cases++;
			}
		}
	CHECK(bad_g == 0, "%d of %d cases: the fast gather differs from its twin", bad_g, cases);
	CHECK(bad_s == 0, "%d of %d cases: the fast scatter differs from its twin", bad_s, cases);
	CHECK(bad_keep == 0, "%d planes: a scatter wrote past ncols", bad_keep);
	// the plain twin against the scalar conversions it is defined by
	uint16_t plane[3 * 32];
	for (int i = 0; i < 3 * 32; i++)
		plane[i] = (uint16_t)(i * 977u);
	float row[2 * 3];
	ad_planar_gather_ref(plane, 64, row, 3, 3, 2);
	int ok = 1;
	for (int j = 0; j < 2; j++)
		for (int c = 0; c < 3; c++)
			ok &= ad_f32_bits(row[j * 3 + c]) == ad_f32_bits(ad_fp16_to_f32(plane[c * 32 + j]));
	CHECK(ok, "the plain gather reads channel c, column j at plane c, element j");
}

// on a pool, in channel ranges: the same bits as on the caller, for
// channel counts that are and are not multiples of the ranges' blocks
static void
test_planar_pool(void)
{
	struct ad_pool *pool = ad_pool_new(&(struct ad_pool_opts){3, 0, 0, NULL}, NULL);
	REQUIRE(pool);
	// channels and columns: below and above AD_PLANAR_PAR_CHANNELS, and
	// few channels of many columns (AD_PLANAR_PAR_VALUES: a prefill chunk)
	const size_t cases_[][2] = {{AD_PLANAR_PAR_CHANNELS - 1, 1},
	                            {AD_PLANAR_PAR_CHANNELS - 1, 3},
	                            {AD_PLANAR_PAR_CHANNELS + 7, 1},
	                            {AD_PLANAR_PAR_CHANNELS + 7, 3},
	                            {50001, 1},
	                            {50001, 3},
	                            {1003, 40},
	                            {1536, 64}, // one range a thread (planar.c)
	                            {AD_PLANAR_PAR_VALUES / 64 - 1, 64}};
	unsigned seed = 11;
	int bad = 0, cases = 0;
	for (size_t a = 0; a < sizeof cases_ / sizeof *cases_; a++)
		for (int ref = 0; ref < 2; ref++) {
			size_t C = cases_[a][0], ncols = cases_[a][1], ps = 128, ld = C + 1;
			struct moves m;
			moves_new(&m, C, ps, ncols, ld, &seed);
			uint8_t *s1 = m.s1, *s2 = m.s2;
			float *x = m.x, *y1 = m.y1, *y2 = m.y2;
			ad_planar_gather_pool(pool, s1, ps, y1, C, ld, ncols, ref);
			ad_planar_gather_ref(s1, ps, y2, C, ld, ncols);
			bad += memcmp(y1, y2, ncols * ld * sizeof(float)) != 0;
			ad_planar_scatter_pool(pool, s1, ps, x, C, ld, ncols, ref);
			ad_planar_scatter_ref(s2, ps, x, C, ld, ncols);
			bad += memcmp(s1, s2, C * ps) != 0;
			// no pool: the caller alone, the same again
			ad_planar_gather_pool(NULL, s1, ps, y1, C, ld, ncols, ref);
			ad_planar_gather_ref(s2, ps, y2, C, ld, ncols);
			bad += memcmp(y1, y2, ncols * ld * sizeof(float)) != 0;
			moves_free(&m);
			cases += 3;
		}
	CHECK(bad == 0, "%d of %d cases: a move on the pool differs from the plain one", bad, cases);
	ad_pool_free(pool);
}

int
main(void)
{
	T_RUN(test_layout);
	T_RUN(test_shared);
	T_RUN(test_lazy);
	T_RUN(test_stale);
	T_RUN(test_planar_twins);
	T_RUN(test_planar_pool);
	return t_done();
}
