// dataplane.c - the shared-memory request/reply slots of dataplane.h.
#include "dataplane.h"
#include "clock.h"
#include "cpuload.h"
#include "hugemem.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#define DP_HAVE_FUTEX 1
#elif defined(__APPLE__) && defined(__has_include)
#if __has_include(<os/os_sync_wait_on_address.h>)
#include <os/clock.h>
#include <os/os_sync_wait_on_address.h>
#define DP_HAVE_OS_SYNC 1
#endif
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

// request and reply on separate cache lines: each is written by one side
struct dp_slot {
	_Alignas(64) _Atomic uint32_t req_seq; // client
	_Atomic uint32_t client_sleeping;      // client: it sleeps on rep_seq
	uint32_t rq_gen;                       // the worker generation the request is for
	struct dp_request rq;
	_Alignas(64) _Atomic uint32_t rep_seq; // worker
	uint32_t rep_gen;
	struct dp_reply rep;
};

struct dp_shm {
	_Atomic uint32_t magic; // written last by the creator
	uint32_t version, size, nslots;
	uint32_t client_pid;
	_Atomic uint32_t closed;
	_Atomic uint32_t n_surf;
	uint64_t arena_off, arena_bytes; // the arena: at arena_off, after the slots
	_Alignas(64) _Atomic uint32_t worker_pid;
	_Atomic uint32_t worker_gen;
	_Alignas(64) _Atomic uint32_t bell; // client: bumped after posting a slot
	_Atomic uint32_t server_sleeping;   // worker: it sleeps on bell
	_Alignas(64) struct dp_surf_entry surf[DP_MAX_SURF];
	struct dp_slot slot[DP_SLOTS];
};

struct dp_chan {
	struct dp_shm *h;
	size_t bytes;
	char id[AD_SURFACE_ID_MAX];
	int owner;
	enum dp_bell bell;
	uint32_t spin_call_ns, spin_serve_ns, lead_ns, spin_max_ns;
	_Atomic uint32_t busy;  // client: slots claimed by this process's threads
	pthread_mutex_t mu;     // client: the surface table
	int (*idle)(void *arg); // worker: dp_set_idle
	void *idle_arg;
	uint32_t idle_bell; // the bell as dp_serve read it before calling idle
	// client: spinning through a call (ANEDVD_DP_SPIN_THROUGH): 0 off, 1
	// on, 2 (the default) as long as it pays (the score: calls whose reply
	// the spin saw at once, less those it saw late or not at all; below
	// zero, a rest of rest_len calls asleep, doubled after each rest that
	// did not help)
	int through;
	struct ad_ready ready;  // dp_arena_ready: the arena's pages present in this mapping
	struct ad_cpuload load; // client, auto: is a core spare for the spin?
	uint32_t through_max_ns;
	_Atomic int score, rest, rest_len;
	_Atomic int since_big; // calls booked since one over 1 ms late
	// client: how much later than expect_ns after the posting the replies
	// are written (the call's own cost: the worker's pickup, its threads'
	// wake-ups, the steps between the kernels), a running mean and mean
	// deviation, ns; the sleep until a reply is due aims before it by the
	// lead and twice the deviation. Two of each: [1] for the calls slept
	// through until due, [0] for the others. A SmolLM2-shape decode step's
	// one long call (its last layer and the LM head, 1.2 ms) came -410 to
	// +570 us off its expectation (5th to 95th percentile), its 30 short
	// ones -47 to +160: with their deviation, the long call's reply came
	// before the caller woke in a third of the steps, seen 20-50 us late
	_Atomic int64_t over_ns[2], dev_ns[2];
};

// The rest after spinning stopped paying, in calls: from DP_REST_MIN,
// doubled up to DP_REST_MAX while the tries after a rest fail too. A reply
// seen more than DP_LATE_NS after it was written counts as late: a spinner
// that yielded its core to another process got it back only at a tick.
#define DP_REST_MIN 256
#define DP_REST_MAX 16384
#define DP_LATE_NS 150000u
// the longest call spun through: a longer one sleeps until its reply is
// due, which hides the wake-up as well. Spun through whenever a core was
// spare, the Qwen2.5-0.5B shape's decode calls (1.3 ms) were no faster
// (sleeping until due over spinning: 1.02x, 0.90..1.33, 8 pairs; on an
// earlier day the then default over always spinning: 1.07x);
// SmolLM2-135M's (0.3 ms) were faster
#define DP_THROUGH_MAX_NS 1000000u
#define DP_BIG_WINDOW 64
#define DP_THROUGH_SLACK_NS 200000u

static uint64_t hot_ns = 10000;       // the caller's spin: pause this long, then yield
static uint64_t serve_hot_ns = 0;     // the worker's idle spin: yield from the start
static uint64_t through_pause_ns = 0; // spinning through a call: yield from the start

static uint32_t
env_us(const char *name, uint32_t dflt_us)
{
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt_us * 1000u;
	char *end;
	long x = strtol(v, &end, 10);
	if (*end || x < 0 || x > 1000000)
		return dflt_us * 1000u;
	return (uint32_t)x * 1000u;
}

static void
chan_defaults(struct dp_chan *c)
{
	const char *b = getenv("ANEDVD_DP_DOORBELL");
	dp_set_bell(c, b && strcmp(b, "sleep") == 0 ? DP_BELL_SLEEP : DP_BELL_FUTEX);
	c->spin_call_ns = env_us("ANEDVD_DP_SPIN_US", 10);
	// the worker's idle spin outlasts a decode step's boundary (the LM
	// head's logits, sampling, the next step's input: ~47 us on the
	// SmolLM2 shape): asleep by then, the worker took the step's first call
	// 20-25 us late (a futex wake-up), in half of the steps at 50 us
	c->spin_serve_ns = env_us("ANEDVD_DP_SERVE_SPIN_US", 100);
	c->lead_ns = env_us("ANEDVD_DP_LEAD_US", 40);
	c->spin_max_ns = env_us("ANEDVD_DP_SPIN_MAX_US", 200);
	const char *th = getenv("ANEDVD_DP_SPIN_THROUGH");
	c->through = !th || !*th || !strcmp(th, "auto") ? 2 : !strcmp(th, "1") ? 1 : 0;
	c->through_max_ns = env_us("ANEDVD_DP_THROUGH_MAX_US", DP_THROUGH_MAX_NS / 1000u);
	ad_cpuload_init(&c->load);
	c->rest_len = DP_REST_MIN;
	c->since_big = DP_BIG_WINDOW;
	hot_ns = env_us("ANEDVD_DP_YIELD_US", 10);
	if (getenv("ANEDVD_DP_SERVE_YIELD_US"))
		serve_hot_ns = env_us("ANEDVD_DP_SERVE_YIELD_US", 0);
	if (getenv("ANEDVD_DP_THROUGH_YIELD_US"))
		through_pause_ns = env_us("ANEDVD_DP_THROUGH_YIELD_US", 0);
	pthread_mutex_init(&c->mu, NULL);
}

// --- the doorbell ---------------------------------------------------------------------------

// sleep while *w == v, at most ns (the system may return early: callers re-check)
static void
os_wait(_Atomic uint32_t *w, uint32_t v, uint64_t ns)
{
#if defined(DP_HAVE_FUTEX)
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, v, &ts, NULL, 0);
#elif defined(DP_HAVE_OS_SYNC)
	if (__builtin_available(macOS 14.4, *))
		os_sync_wait_on_address_with_timeout((void *)w, (uint64_t)v, 4, OS_SYNC_WAIT_ON_ADDRESS_SHARED,
		                                     OS_CLOCK_MACH_ABSOLUTE_TIME, ns);
#else
	(void)w, (void)v, (void)ns;
#endif
}

static void
os_wake(_Atomic uint32_t *w, int all)
{
#if defined(DP_HAVE_FUTEX)
	syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, all ? INT_MAX : 1, NULL, NULL, 0);
#elif defined(DP_HAVE_OS_SYNC)
	if (__builtin_available(macOS 14.4, *)) {
		if (all)
			os_sync_wake_by_address_all((void *)w, 4, OS_SYNC_WAKE_BY_ADDRESS_SHARED);
		else
			os_sync_wake_by_address_any((void *)w, 4, OS_SYNC_WAKE_BY_ADDRESS_SHARED);
	}
#else
	(void)w, (void)all;
#endif
}

// Sleep while *w == v, at most ns. In futex mode the sleeper count goes up
// first and the word is re-read after it (both sequentially consistent):
// a waker stores the word and then reads the count, so either the waker
// sees the sleeper and wakes it, or the re-read sees the new word; and
// the system call itself compares the word before sleeping. The fallback
// polls, sleeping *backoff (20 us, doubling up to 1 ms).
static void
doze(const struct dp_chan *c, _Atomic uint32_t *w, uint32_t v, _Atomic uint32_t *sleepers, uint64_t ns,
     uint64_t *backoff)
{
	if (c->bell == DP_BELL_FUTEX) {
		atomic_fetch_add(sleepers, 1);
		if (atomic_load(w) == v)
			os_wait(w, v, ns);
		atomic_fetch_sub(sleepers, 1);
		return;
	}
	uint64_t d = *backoff < 20000 ? 20000 : *backoff;
	if (d > ns)
		d = ns;
	struct timespec ts = {0, (long)d};
	nanosleep(&ts, NULL);
	*backoff = d * 2 > 1000000 ? 1000000 : d * 2;
}

// the store of *w is done (sequentially consistent): wake its sleepers
static void
ring(_Atomic uint32_t *w, _Atomic uint32_t *sleepers, int all)
{
	if (atomic_load(sleepers) > 0)
		os_wake(w, all);
}

// spin while *w == v, at most ns; the last value read. The first pause_ns
// with the pause hint, then yielding between looks: a caller spinning
// through a kernel on a machine with more runnable threads than cores (2
// cores: the engine, the emu's threads) must not keep them off their core.
// The worker's idle spin yields too: the caller's thread, woken onto the
// worker's core, must not wait for the spin to end (stories260K, whose
// calls are a few microseconds: 2,000-4,500 tok/s pausing, 8,300-10,000
// yielding). A yield may hand the core to another process for a while,
// so the caller's own spin pauses for its first ANEDVD_DP_YIELD_US (10 us).

static uint32_t
spin(_Atomic uint32_t *w, uint32_t v, uint64_t ns, uint64_t pause_ns)
{
	uint32_t x = atomic_load_explicit(w, memory_order_acquire);
	if (x != v || ns == 0)
		return x;
	const uint64_t t0 = ad_now_ns(), end = t0 + ns, hot = t0 + (ns < pause_ns ? ns : pause_ns);
	for (unsigned i = 1;; i++) {
		cpu_relax();
		x = atomic_load_explicit(w, memory_order_acquire);
		if (x != v)
			return x;
		if ((i & 63) == 0) {
			uint64_t t = ad_now_ns();
			if (t >= end)
				return x;
			if (t >= hot)
				break;
		}
	}
	for (;;) {
		sched_yield();
		x = atomic_load_explicit(w, memory_order_acquire);
		if (x != v || ad_now_ns() >= end)
			return x;
	}
}

int
dp_pid_alive(uint32_t pid)
{
	if (pid == 0 || pid > INT_MAX)
		return 0;
	if (kill((pid_t)pid, 0) != 0 && errno != EPERM)
		return 0;
#if defined(__linux__)
	// a killed child not yet reaped is still there for kill(): read its state
	char path[64], buf[256];
	snprintf(path, sizeof path, "/proc/%u/stat", pid);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n > 0) {
		buf[n] = 0;
		const char *p = strrchr(buf, ')'); // after "pid (comm)"
		if (p && (p[1] == ' ') && (p[2] == 'Z' || p[2] == 'X'))
			return 0;
	}
#endif
	return 1;
}

// --- objects --------------------------------------------------------------------------------

static struct dp_chan *
chan_new(const char *id, char *err)
{
	if (!id || id[0] != '/' || strlen(id) >= AD_SURFACE_ID_MAX)
		return ad_err(err, "data plane: bad id '%s'", id ? id : "(null)"), NULL;
	struct dp_chan *c = calloc(1, sizeof *c);
	if (!c)
		return ad_err(err, "out of memory"), NULL;
	snprintf(c->id, sizeof c->id, "%s", id);
	c->bytes = sizeof(struct dp_shm);
	chan_defaults(c);
	return c;
}

static void
chan_free(struct dp_chan *c)
{
	pthread_mutex_destroy(&c->mu);
	ad_cpuload_fini(&c->load);
	ad_ready_clear(&c->ready);
	free(c);
}

struct dp_chan *
dp_create(const char *id, char *err)
{
	return dp_create_arena(id, 0, err);
}

#define DP_ARENA_ALIGN 4096u

struct dp_chan *
dp_create_arena(const char *id, size_t arena_bytes, char *err)
{
	struct dp_chan *c = chan_new(id, err);
	if (!c)
		return NULL;
	const size_t arena_off = (sizeof(struct dp_shm) + DP_ARENA_ALIGN - 1) / DP_ARENA_ALIGN * DP_ARENA_ALIGN;
	arena_bytes = (arena_bytes + 63) / 64 * 64;
	if (arena_bytes > ((size_t)1 << 32)) {
		ad_err(err, "data plane %s: an arena of %zu bytes (at most 4 GiB)", id, arena_bytes);
		chan_free(c);
		return NULL;
	}
	if (arena_bytes)
		c->bytes = arena_off + arena_bytes;
	int fd = shm_open(id, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0) {
		ad_err(err, "data plane %s: shm_open: %s", id, strerror(errno));
		chan_free(c);
		return NULL;
	}
	void *p = MAP_FAILED;
	if (ftruncate(fd, (off_t)c->bytes) == 0)
		p = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED) {
		shm_unlink(id);
		ad_err(err, "data plane %s: %s", id, strerror(e));
		chan_free(c);
		return NULL;
	}
	c->h = p; // zero-filled
	c->owner = 1;
	c->h->version = DP_VERSION;
	c->h->size = (uint32_t)sizeof(struct dp_shm);
	c->h->arena_off = arena_bytes ? arena_off : 0;
	c->h->arena_bytes = arena_bytes;
	c->h->nslots = DP_SLOTS;
	c->h->client_pid = (uint32_t)getpid();
	// the magic last: an opener that sees it sees the rest
	atomic_store_explicit(&c->h->magic, DP_MAGIC, memory_order_release);
	return c;
}

struct dp_chan *
dp_open(const char *id, char *err)
{
	struct dp_chan *c = chan_new(id, err);
	if (!c)
		return NULL;
	int fd = shm_open(id, O_RDWR, 0);
	if (fd < 0) {
		ad_err(err, "data plane %s: shm_open: %s", id, strerror(errno));
		chan_free(c);
		return NULL;
	}
	struct stat st;
	// at least the size (macOS rounds an object up to whole pages); the
	// header's own size field must match exactly (checked below)
	if (fstat(fd, &st) != 0 || (size_t)st.st_size < c->bytes) {
		close(fd);
		ad_err(err, "data plane %s: %lld bytes, this build's object has %zu", id, (long long)st.st_size,
		       c->bytes);
		chan_free(c);
		return NULL;
	}
	void *p = mmap(NULL, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	int e = errno;
	close(fd);
	if (p == MAP_FAILED) {
		ad_err(err, "data plane %s: mmap: %s", id, strerror(e));
		chan_free(c);
		return NULL;
	}
	c->h = p;
	if (atomic_load_explicit(&c->h->magic, memory_order_acquire) != DP_MAGIC || c->h->version != DP_VERSION ||
	    c->h->size != c->bytes || c->h->nslots != DP_SLOTS) {
		ad_err(err, "data plane %s: not an object of this version (magic %08x, version %u)", id,
		       atomic_load(&c->h->magic), c->h->version);
		dp_close(c);
		return NULL;
	}
	// the arena: within the object, after the header, whole 64-byte lines
	uint64_t off = c->h->arena_off, n = c->h->arena_bytes;
	if (n) {
		if (off < sizeof(struct dp_shm) || off % 64 || n % 64 || n > ((uint64_t)1 << 32) ||
		    off + n > (uint64_t)st.st_size) {
			ad_err(err, "data plane %s: an arena of %llu bytes at %llu in %lld", id, (unsigned long long)n,
			       (unsigned long long)off, (long long)st.st_size);
			dp_close(c);
			return NULL;
		}
		fd = shm_open(id, O_RDWR, 0);
		void *q =
			fd < 0 ? MAP_FAILED : mmap(NULL, (size_t)(off + n), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		e = errno;
		if (fd >= 0)
			close(fd);
		if (q == MAP_FAILED) {
			ad_err(err, "data plane %s: mmap: %s", id, strerror(e));
			dp_close(c);
			return NULL;
		}
		munmap(c->h, c->bytes);
		c->h = q;
		c->bytes = (size_t)(off + n);
	}
	return c;
}

void
dp_close(struct dp_chan *c)
{
	if (!c)
		return;
	munmap(c->h, c->bytes);
	chan_free(c);
}

void
dp_destroy(struct dp_chan *c)
{
	if (!c)
		return;
	// tell a serving worker, which unmaps it and lets its thread go
	atomic_store(&c->h->closed, 1);
	atomic_fetch_add(&c->h->bell, 1);
	os_wake(&c->h->bell, 1);
	if (c->owner)
		shm_unlink(c->id);
	dp_close(c);
}

const char *
dp_id(const struct dp_chan *c)
{
	return c->id;
}

void *
dp_arena(const struct dp_chan *c, size_t *bytes)
{
	size_t n = c->h->arena_bytes;
	if (bytes)
		*bytes = n;
	return n ? (char *)c->h + c->h->arena_off : NULL;
}

void
dp_arena_ready(struct dp_chan *c, uint64_t off, uint64_t n)
{
	size_t abytes = 0;
	void *a = dp_arena(c, &abytes);
	// ad_ready_range checks the range; a value past SIZE_MAX (a 32-bit
	// build) is clamped to one it refuses
	ad_ready_range(&c->ready, a, abytes, off < SIZE_MAX ? (size_t)off : SIZE_MAX,
	               n < SIZE_MAX ? (size_t)n : SIZE_MAX);
}

void
dp_set_bell(struct dp_chan *c, enum dp_bell b)
{
#if defined(DP_HAVE_FUTEX)
	c->bell = b;
#elif defined(DP_HAVE_OS_SYNC)
	c->bell = DP_BELL_SLEEP;
	if (b == DP_BELL_FUTEX)
		if (__builtin_available(macOS 14.4, *))
			c->bell = DP_BELL_FUTEX;
#else
	(void)b;
	c->bell = DP_BELL_SLEEP;
#endif
}

enum dp_bell
dp_get_bell(const struct dp_chan *c)
{
	return c->bell;
}

void
dp_set_spin(struct dp_chan *c, uint32_t call_ns, uint32_t serve_ns)
{
	c->spin_call_ns = call_ns;
	c->spin_serve_ns = serve_ns;
}

int
dp_add_surface(struct dp_chan *c, const char *id, uint32_t channels, uint32_t width, char *err)
{
	if (!id || strlen(id) >= AD_SURFACE_ID_MAX)
		return ad_err(err, "data plane: bad surface id");
	pthread_mutex_lock(&c->mu);
	uint32_t n = atomic_load_explicit(&c->h->n_surf, memory_order_relaxed);
	if (n >= DP_MAX_SURF) {
		pthread_mutex_unlock(&c->mu);
		return ad_err(err, "data plane: the surface table is full (%d)", DP_MAX_SURF);
	}
	struct dp_surf_entry *s = &c->h->surf[n];
	snprintf(s->id, sizeof s->id, "%s", id);
	s->channels = channels;
	s->width = width;
	// publish: a worker that reads n + 1 (acquire) reads the entry whole
	atomic_store_explicit(&c->h->n_surf, n + 1, memory_order_release);
	pthread_mutex_unlock(&c->mu);
	return (int)n;
}

int
dp_surface(const struct dp_chan *c, uint32_t i, struct dp_surf_entry *out)
{
	if (i >= atomic_load_explicit(&c->h->n_surf, memory_order_acquire) || i >= DP_MAX_SURF)
		return -1;
	*out = c->h->surf[i];
	out->id[sizeof out->id - 1] = 0;
	return 0;
}

void
dp_worker(const struct dp_chan *c, uint32_t *pid, uint32_t *gen)
{
	*gen = atomic_load(&c->h->worker_gen);
	*pid = atomic_load(&c->h->worker_pid);
}

// --- client -----------------------------------------------------------------------------------

static int
claim(struct dp_chan *c, uint64_t deadline)
{
	uint64_t backoff = 0;
	for (;;) {
		uint32_t m = atomic_load_explicit(&c->busy, memory_order_relaxed);
		if (m != (1u << DP_SLOTS) - 1) {
			int i = __builtin_ctz(~m);
			if (atomic_compare_exchange_weak_explicit(&c->busy, &m, m | 1u << i, memory_order_acquire,
			                                          memory_order_relaxed))
				return i;
			continue;
		}
		if (ad_now_ns() >= deadline)
			return -1;
		uint64_t d = backoff < 20000 ? 20000 : backoff;
		struct timespec ts = {0, (long)d};
		nanosleep(&ts, NULL);
		backoff = d * 2 > 1000000 ? 1000000 : d * 2;
	}
}

void
dp_release(struct dp_chan *c, int slot)
{
	if (slot >= 0 && slot < DP_SLOTS)
		atomic_fetch_and_explicit(&c->busy, ~(1u << slot), memory_order_release);
}

#define DP_SLICE_NS 4000000u // liveness checks while waiting for a reply

int
dp_call(struct dp_chan *c, int *slot, const struct dp_request *rq, struct dp_reply *rep, uint32_t pid, uint32_t gen,
        int timeout_ms)
{
	return dp_call_expect(c, slot, rq, rep, pid, gen, timeout_ms, 0);
}

// spin through this call? (ANEDVD_DP_SPIN_THROUGH; a call of known length,
// up to ANEDVD_DP_THROUGH_MAX_US, 1 ms: a longer one (an LM head of 150k
// rows, 11-17 ms) sleeps until shortly before it is due instead; spun
// through, it outran the spin's bound every time.) "auto" spins while a
// core is spare: while processes other than ours (this one, the worker
// pid) took under a quarter of a core over the last window (cpuload.h);
// where that cannot be read, while the spin sees the replies in time
// (through_book).
static int
spin_through(struct dp_chan *c, uint64_t expect_ns, uint32_t pid)
{
	if (!c->through || !expect_ns || expect_ns > c->through_max_ns)
		return 0;
	if (c->through == 1)
		return 1;
	const int spare = ad_cpuload_spare(&c->load, pid, ad_now_ns());
	if (spare == 0)
		return 0;
	if (atomic_load_explicit(&c->rest, memory_order_relaxed) > 0) {
		if (atomic_fetch_sub(&c->rest, 1) == 1)
			atomic_store(&c->score, 0); // rested: try again
		return 0;
	}
	return 1;
}

// late_ns: how long after its writing the spin saw the reply, or, when the
// call outran the spin, by how long the spin overran its end. Either over
// 1 ms (a yield handed the core to another process until a tick) stops
// the spinning at once: one such costs more than the spin saves on a
// hundred calls.
static void
through_book(struct dp_chan *c, uint64_t late_ns)
{
	if (c->through != 2)
		return;
	int s = atomic_load_explicit(&c->score, memory_order_relaxed);
	// over 1 ms twice within DP_BIG_WINDOW calls stops it at once; once
	// alone counts as late (a quiet machine shows one now and then: a
	// decode's first call after its prefill, a page fault)
	int since = atomic_fetch_add_explicit(&c->since_big, 1, memory_order_relaxed);
	if (late_ns > 1000000u)
		atomic_store_explicit(&c->since_big, 0, memory_order_relaxed);
	// where the machine's load is known, only the replies a tick late count:
	// the spin's yields take turns with the worker's threads, and on a VM
	// a quarter of the replies come 40-150 us late with a core to spare
	const uint64_t late = atomic_load_explicit(&c->load.verdict, memory_order_relaxed) == 1 ? 1000000u : DP_LATE_NS;
	s = late_ns <= late ? (s < 16 ? s + 1 : 16) : late_ns <= 1000000u || since >= DP_BIG_WINDOW ? s - 4 : -1;
	atomic_store_explicit(&c->score, s, memory_order_relaxed);
	int len = atomic_load_explicit(&c->rest_len, memory_order_relaxed);
	if (s < 0) {
		atomic_store(&c->rest, len);
		atomic_store_explicit(&c->rest_len, len < DP_REST_MAX ? 2 * len : DP_REST_MAX, memory_order_relaxed);
	} else if (s >= 16 && len != DP_REST_MIN) {
		atomic_store_explicit(&c->rest_len, DP_REST_MIN, memory_order_relaxed); // it pays again
	}
}

// a reply written over_ns later than expected (negative: earlier); one
// more than 5 ms off (a descheduled worker, a first call) is left out
static void
book_over(struct dp_chan *c, int slept, int64_t over_ns)
{
	if (over_ns > 5000000 || over_ns < -5000000)
		return;
	int64_t m = atomic_load_explicit(&c->over_ns[slept], memory_order_relaxed),
		d = atomic_load_explicit(&c->dev_ns[slept], memory_order_relaxed);
	m += (over_ns - m) / 8;
	d += ((over_ns > m ? over_ns - m : m - over_ns) - d) / 8;
	atomic_store_explicit(&c->over_ns[slept], m, memory_order_relaxed);
	atomic_store_explicit(&c->dev_ns[slept], d, memory_order_relaxed);
}

void
dp_lateness(const struct dp_chan *c, int slept, int64_t *over_ns, int64_t *dev_ns)
{
	slept = slept != 0;
	*over_ns = atomic_load_explicit(&c->over_ns[slept], memory_order_relaxed);
	*dev_ns = atomic_load_explicit(&c->dev_ns[slept], memory_order_relaxed);
}

int
dp_call_expect(struct dp_chan *c, int *slot, const struct dp_request *rq, struct dp_reply *rep, uint32_t pid,
               uint32_t gen, int timeout_ms, uint64_t expect_ns)
{
	const uint64_t deadline = ad_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1) * 1000000u;
	if (*slot < 0 && (*slot = claim(c, deadline)) < 0)
		return DP_NOSLOT;
	struct dp_slot *sl = &c->h->slot[*slot];
	uint32_t n = rq->nsteps <= DP_MAX_STEPS ? rq->nsteps : DP_MAX_STEPS;
	sl->rq.op = rq->op;
	sl->rq.nsteps = rq->nsteps; // the worker refuses more than DP_MAX_STEPS
	memcpy(sl->rq.step, rq->step, (size_t)n * sizeof rq->step[0]);
	// for this worker only: one attached later leaves it alone (the
	// caller re-posts it), so the request is never rewritten under a
	// worker reading it
	sl->rq_gen = gen;
	// only this thread writes req_seq while it holds the slot
	const uint32_t s = atomic_load_explicit(&sl->req_seq, memory_order_relaxed) + 1;
	// the posting time: the reply's done_ns and the worker's start_ns
	// (dp_reply) are read against it
	const uint64_t posted = ad_now_ns();
	// release: the request above is visible to whoever acquires s
	atomic_store_explicit(&sl->req_seq, s, memory_order_release);
	atomic_fetch_add(&c->h->bell, 1); // seq_cst: then read server_sleeping
	ring(&c->h->bell, &c->h->server_sleeping, 1);

	uint64_t backoff = 0, check = 0;
	// a call expected to be short is spun through: being woken costs ~20 us
	// here, more than such a call itself
	uint64_t sp = c->spin_call_ns;
	if (expect_ns && expect_ns + c->lead_ns <= c->spin_max_ns && expect_ns + c->lead_ns > sp)
		sp = expect_ns + c->lead_ns;
	// a call that will be slept through until its reply is due (below)
	// yields from the start of every spin: the worker's threads are
	// computing on both cores, and pausing kept one of them off its core
	// for the first ANEDVD_DP_YIELD_US at each spin (Qwen2.5-0.5B decode,
	// 1.3 ms calls, pairs of builds: the request taken 11.3 -> 9.9 us
	// after it was posted on F16, 8.0 -> 5.3 on Q8_0, 57.1 -> 60.6 tok/s)
	const uint64_t pause = expect_ns > sp + c->lead_ns ? 0 : hot_ns;
	uint32_t x;
	const int through = spin_through(c, expect_ns, pid);
	// slept through until due, if not done first (over_ns[1])
	const int slept = !through && expect_ns > sp + c->lead_ns;
	if (through) {
		// the whole call on this core, yielding between looks: no wake-up
		// at its end (on a VM one costs ~50 us, a call's kernels a few
		// hundred), and the worker's threads, which need this core while
		// the call runs (2 cores: the emu's two threads), get it at each
		// yield; pausing instead kept one of them off it and halved the
		// call. With "auto" (the default), replies seen late or not at all
		// say the machine has no core to spare: the calls then sleep for a
		// while (through_book)
		// the bound: half as long again and DP_THROUGH_SLACK_NS (the
		// expectation is the kernels' own time; waking the worker's
		// threads adds ~100 us to a call, and with a quarter and 40 us a
		// tenth of a SmolLM2-shape decode's calls outran it, stopping the
		// spinning again and again)
		const uint64_t b = expect_ns + expect_ns / 2 + DP_THROUGH_SLACK_NS;
		x = spin(&sl->rep_seq, s - 1, b, through_pause_ns);
		const uint64_t t = ad_now_ns();
		// a call outrunning its spin: a wake-up follows, no worse than not spinning
		through_book(c, x == s                      ? (t > sl->rep.done_ns ? t - sl->rep.done_ns : 0)
		                : t - posted > b + 1000000u ? t - posted - b
		                                            : DP_LATE_NS + 1);
	} else {
		x = spin(&sl->rep_seq, s - 1, sp, pause);
	}
	// A long call: sleep until shortly before the reply is due (the worker
	// wakes us earlier if it is done first), then spin, so the latency of
	// being woken falls before the reply, not after it. The timer's slack
	// (50 us by default) would eat the lead.
	uint64_t due = 0, due_spin = 3 * (uint64_t)c->lead_ns;
	if (x == s - 1 && expect_ns > sp + c->lead_ns) {
		int64_t over, dev;
		dp_lateness(c, slept, &over, &dev);
		// the deviation's share at most a quarter of the call: a noisy
		// machine's spread must not make every call a spin
		const int64_t spread = 2 * dev < (int64_t)expect_ns / 4 ? 2 * dev : (int64_t)expect_ns / 4;
		int64_t at = (int64_t)expect_ns + over - (int64_t)c->lead_ns - spread;
		if (at < (int64_t)sp)
			at = (int64_t)sp;
		due = posted + (uint64_t)at;
		due_spin += 2 * (uint64_t)spread;
		static _Thread_local int slack_set;
		if (!slack_set) {
#if defined(__linux__)
			prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
			slack_set = 1;
		}
	}
	for (;;) {
		if (x == s) {
			// acquired s: the reply written before the store is complete
			*rep = sl->rep;
			rep->msg[sizeof rep->msg - 1] = 0;
			rep->posted_ns = posted;
			rep->seen_ns = ad_now_ns();
			if (expect_ns)
				book_over(c, slept, (int64_t)(rep->done_ns - posted) - (int64_t)expect_ns);
			return DP_DONE;
		}
		// the worker's liveness once per slice (the pid check reads /proc:
		// too slow for every wake-up), the generation every time
		uint64_t t = ad_now_ns();
		if (atomic_load(&c->h->worker_gen) != gen)
			return DP_CHANGED;
		if (t >= check) {
			if (check && !dp_pid_alive(pid))
				return DP_DEAD;
			check = t + DP_SLICE_NS;
		}
		if (t >= deadline)
			return DP_TIMEOUT;
		uint64_t left = deadline - t;
		if (left > DP_SLICE_NS)
			left = DP_SLICE_NS;
		if (due && t >= due) { // the reply is due: spin for it, once
			due = 0;
			x = spin(&sl->rep_seq, s - 1, due_spin, pause);
			backoff = 0;
			continue;
		}
		if (due && due - t < left)
			left = due - t;
		doze(c, &sl->rep_seq, x, &sl->client_sleeping, left, &backoff);
		x = atomic_load_explicit(&sl->rep_seq, memory_order_acquire);
	}
}

// --- worker -----------------------------------------------------------------------------------

uint32_t
dp_attach(struct dp_chan *c)
{
	atomic_store(&c->h->worker_pid, (uint32_t)getpid());
	uint32_t g = atomic_fetch_add(&c->h->worker_gen, 1) + 1;
	// a worker that served the object before sleeps on the bell: let it
	// see the new generation and go
	atomic_fetch_add(&c->h->bell, 1);
	os_wake(&c->h->bell, 1);
	return g;
}

int
dp_bell_rung(const struct dp_chan *c)
{
	return atomic_load_explicit(&c->h->bell, memory_order_relaxed) != c->idle_bell;
}

void
dp_set_idle(struct dp_chan *c, int (*idle)(void *arg), void *arg)
{
	c->idle = idle;
	c->idle_arg = arg;
}

void
dp_kick(struct dp_chan *c)
{
	atomic_fetch_add(&c->h->bell, 1);
	os_wake(&c->h->bell, 1);
}

// answer the pending request of slot i (req_seq q)
static void
serve_slot(struct dp_chan *c, struct dp_slot *sl, uint32_t q, uint32_t gen, dp_handler fn, void *arg)
{
	// a private copy: the checks hold for what runs, whatever the client does
	static _Thread_local struct dp_request rq;
	static _Thread_local struct dp_reply rp;
	memset(&rp, 0, sizeof rp);
	rp.start_ns = ad_now_ns();
	rq.op = sl->rq.op;
	rq.nsteps = sl->rq.nsteps;
	if (rq.op == DP_OP_NOP) {
		rp.status = DP_OK;
	} else if (rq.op != DP_OP_CALL) {
		rp.status = DP_BAD_REQUEST;
		snprintf(rp.msg, sizeof rp.msg, "data plane: unknown op %u", rq.op);
	} else if (rq.nsteps < 1 || rq.nsteps > DP_MAX_STEPS) {
		rp.status = DP_BAD_REQUEST;
		snprintf(rp.msg, sizeof rp.msg, "data plane: %u steps (1 to %d)", rq.nsteps, DP_MAX_STEPS);
	} else {
		memcpy(rq.step, sl->rq.step, (size_t)rq.nsteps * sizeof rq.step[0]);
		for (uint32_t i = 0; i < rq.nsteps; i++) {
			rq.step[i].in_id[AD_SURFACE_ID_MAX - 1] = 0;
			rq.step[i].out_id[AD_SURFACE_ID_MAX - 1] = 0;
		}
		fn(arg, &rq, &rp);
		rp.msg[sizeof rp.msg - 1] = 0;
	}
	// taken over meanwhile (a re-attach): the caller re-posts to the new
	// generation, whose reply this must not overwrite
	if (atomic_load(&c->h->worker_gen) != gen)
		return;
	rp.done_ns = ad_now_ns();
	sl->rep = rp;
	sl->rep_gen = gen;
	// seq_cst (so release): the reply is visible with q; then read the flag
	atomic_store(&sl->rep_seq, q);
	ring(&sl->rep_seq, &sl->client_sleeping, 0);
}

int
dp_serve(struct dp_chan *c, uint32_t gen, dp_handler fn, void *arg, const volatile int *stop, int idle_ms)
{
	struct dp_shm *h = c->h;
	const uint64_t idle = (uint64_t)(idle_ms > 0 ? idle_ms : 100) * 1000000u;
	uint64_t last = ad_now_ns(), checked = last, backoff = 0;
	for (;;) {
		if (*stop)
			return DP_SERVE_STOPPED;
		if (atomic_load(&h->closed))
			return DP_SERVE_CLOSED;
		if (atomic_load(&h->worker_gen) != gen)
			return DP_SERVE_REPLACED;
		// the bell before the scan: a post after this read changes it
		const uint32_t b = atomic_load(&h->bell);
		int served = 0;
		for (int i = 0; i < DP_SLOTS; i++) {
			struct dp_slot *sl = &h->slot[i];
			uint32_t q = atomic_load_explicit(&sl->req_seq, memory_order_acquire);
			if (q == atomic_load_explicit(&sl->rep_seq, memory_order_relaxed) || sl->rq_gen != gen)
				continue;
			serve_slot(c, sl, q, gen, fn, arg);
			served++;
		}
		uint64_t t = ad_now_ns();
		if (served) {
			last = t;
			backoff = 0;
			continue;
		}
		// idle: spin a little after the last request (the next one often
		// follows within microseconds), then sleep in slices; the idle work
		// first, a piece at a time, while the bell stays as read. A yield
		// before each piece, as the spin's own looks do: the caller's
		// thread, waiting for the reply just written, may share this core
		// (three threads on two: this one, the emu's other, the caller), and
		// the pieces one after another kept it off the core until the idle
		// spin's time was up: it saw the reply 40-80 us late in half of the
		// SmolLM2-135M shape's decode calls, spun through or slept through
		// (IPC 13.5 us a call after, against 30)
		if (t - last < c->spin_serve_ns) {
			if (c->idle) {
				sched_yield();
				c->idle_bell = b;
				if (c->idle(c->idle_arg) && atomic_load(&h->bell) == b)
					continue;
			}
			spin(&h->bell, b, c->spin_serve_ns - (t - last), serve_hot_ns);
			continue;
		}
		doze(c, &h->bell, b, &h->server_sleeping, idle, &backoff);
		if ((t = ad_now_ns()) - checked >= idle) {
			checked = t;
			if (!dp_pid_alive(h->client_pid))
				return DP_SERVE_CLIENT_GONE;
		}
	}
}
