// test-pool.c - common/pool.h: every task of every job runs exactly once,
// on a worker index in range, with the workers polling between jobs
// (spin_ns) or sleeping at once, with the caller polling for the last
// tasks or sleeping at once; jobs back to back (a worker late for one
// job must not take a task of the next); one thread; 0 and 1 task; the
// pool's threads take part (slow tasks on three threads run on more than
// one of them); a caller put on the CPU where a worker polls moves off it
// (Linux, two CPUs or more); small jobs back to back for a few seconds,
// none returning early; the workers named "NAME 1", "NAME 2" (or "pool 1")
// as the system shows them (Linux: /proc/self/task/*/comm).
#ifdef __linux__
#define _GNU_SOURCE // sched_getcpu and the CPU_ macros
#include <sched.h>
#endif
#include <dirent.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "err.h"
#include "pool.h"
#include "t.h"

#define MAXT 4000

struct job {
	int threads;
	atomic_int runs[MAXT];
	atomic_int by[8];
	atomic_int bad_worker;
	int sleep_us;
};

static void
task(void *arg, size_t t, int worker)
{
	struct job *j = arg;
	if (j->sleep_us) {
		struct timespec ts = {0, j->sleep_us * 1000L};
		nanosleep(&ts, NULL);
	}
	// counted at the end: a caller that returned before a worker's last
	// task was done would see it missing
	if (worker < 0 || worker >= j->threads)
		atomic_store(&j->bad_worker, 1);
	else
		atomic_fetch_add(&j->by[worker], 1);
	atomic_fetch_add(&j->runs[t], 1);
}

static void
run_jobs(int threads, long spin_ns, long wait_spin_ns)
{
	char err[AD_ERRLEN];
	struct ad_pool *p = ad_pool_new(&(struct ad_pool_opts){threads, spin_ns, wait_spin_ns, NULL}, err);
	REQUIRE(p, "%s", err);
	CHECK(ad_pool_threads(p) == threads, "threads %d, want %d", ad_pool_threads(p), threads);
	static struct job j;
	const size_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, MAXT};
	for (int rep = 0; rep < 300; rep++) {
		size_t n = sizes[rep % (sizeof sizes / sizeof *sizes)];
		memset(&j, 0, sizeof j);
		j.threads = threads;
		ad_pool_run(p, task, &j, n);
		// the caller returns after every task is done, and nothing runs later
		for (size_t t = 0; t < MAXT; t++)
			REQUIRE(atomic_load(&j.runs[t]) == (t < n),
			        "threads %d spin %ld job %d: task %zu of %zu ran %d times", threads, spin_ns, rep, t, n,
			        atomic_load(&j.runs[t]));
		REQUIRE(!atomic_load(&j.bad_worker), "a worker index out of [0, %d)", threads);
	}
	ad_pool_free(p);
}

static void
test_exactly_once(void)
{
	run_jobs(1, 0, 0);
	run_jobs(2, 0, 0);
	run_jobs(3, 0, 0);
	run_jobs(3, 50000, 200000); // the emu's setting
	run_jobs(4, 1000000, 0);
	// polling workers, a caller that sleeps at once: the last task's
	// worker must wake it
	run_jobs(3, 50000, 0);
}

// small jobs back to back for a while, alternating 2 tasks and 3 to 31:
// a worker late for a job, that read its state and then the next job's
// larger count, must not claim a task of the next on the last job's state
// (the caller then returned with a task still running: 1 call in
// 20,000-250,000 of this, 3 threads on 2 CPUs, before the fix)
struct small {
	atomic_int runs[32], ended;
};

static void
small_task(void *arg, size_t t, int worker)
{
	struct small *j = arg;
	(void)worker;
	atomic_fetch_add(&j->runs[t], 1);
	volatile int x = 0;
	for (int i = 0; i < 200 + (int)t * 50; i++)
		x += i;
	atomic_fetch_add(&j->ended, 1);
}

static void
stress(long spin_ns, long wait_spin_ns, int hot, double secs)
{
	char err[AD_ERRLEN];
	struct ad_pool *p = ad_pool_new(&(struct ad_pool_opts){3, spin_ns, wait_spin_ns, NULL}, err);
	REQUIRE(p, "%s", err);
	ad_pool_hot(p, hot); // the workers poll with pause, not sched_yield
	static struct small j;
	long calls = 0, early = 0, twice = 0;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int k = 0; k < 1000; k++, calls++) {
			const int n = calls & 1 ? 2 : 3 + (int)(calls % 29);
			memset(&j, 0, sizeof j);
			ad_pool_run(p, small_task, &j, (size_t)n);
			early += atomic_load(&j.ended) != n;
			for (int t = 0; t < 32; t++)
				twice += atomic_load(&j.runs[t]) != (t < n);
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
	} while ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9 < secs);
	CHECK(early == 0 && twice == 0,
	      "spin %ld, wait spin %ld, hot %d: of %ld calls, %ld returned early, %ld ran a task other than once",
	      spin_ns, wait_spin_ns, hot, calls, early, twice);
	ad_pool_free(p);
}

static void
test_back_to_back(void)
{
	stress(20000, 0, 0, 2.0);
	stress(50000, 200000, 0, 2.0);  // the emu's setting
	stress(200000, 200000, 1, 2.0); // ... held hot, as through a data-plane call
	stress(0, 0, 0, 1.0);
}

static void
test_workers_take_part(void)
{
	char err[AD_ERRLEN];
	struct ad_pool *p = ad_pool_new(&(struct ad_pool_opts){3, 0, 0, NULL}, err);
	REQUIRE(p, "%s", err);
	static struct job j;
	memset(&j, 0, sizeof j);
	j.threads = 3;
	j.sleep_us = 2000;
	ad_pool_run(p, task, &j, 30);
	for (int t = 0; t < 30; t++)
		CHECK(atomic_load(&j.runs[t]) == 1, "slow task %d ran %d times by the time the job returned", t,
		      atomic_load(&j.runs[t]));
	int used = 0;
	for (int w = 0; w < 3; w++)
		used += atomic_load(&j.by[w]) > 0;
	CHECK(used >= 2, "30 tasks of 2 ms ran on %d thread(s) of 3", used);
	// with one thread, or one task, everything runs on the caller
	memset(&j, 0, sizeof j);
	j.threads = 3;
	ad_pool_run(p, task, &j, 1);
	CHECK(atomic_load(&j.by[0]) == 1, "a single task not on the caller");
	ad_pool_free(p);
	ad_pool_free(NULL);
}

#ifdef __linux__
struct where {
	atomic_int cpu[2];   // each thread's CPU in its task, by worker
	atomic_int ncpus[2]; // ... and the CPUs its affinity mask allows
};

static void
where_task(void *arg, size_t t, int worker)
{
	struct where *w = arg;
	(void)t;
	atomic_store(&w->cpu[worker], sched_getcpu());
	cpu_set_t m;
	atomic_store(&w->ncpus[worker], sched_getaffinity(0, sizeof m, &m) ? -1 : CPU_COUNT(&m));
	struct timespec ts = {0, 2000 * 1000L};
	nanosleep(&ts, NULL);
}

// The caller pinned for a moment to the CPU its polling worker is on: its
// next job moves it (ad_pool_moves), and both threads then run a task on
// different CPUs. Without the move the worker's yields hand the caller
// both tasks (or the scheduler separates the two, but not as a rule).
static void
test_caller_leaves_worker_cpu(void)
{
	cpu_set_t all;
	REQUIRE(!sched_getaffinity(0, sizeof all, &all), "sched_getaffinity");
	if (CPU_COUNT(&all) < 2) {
		printf("  skipped: this process may run on %d CPU\n", CPU_COUNT(&all));
		return;
	}
	char err[AD_ERRLEN];
	// a worker that polls through the whole test
	struct ad_pool *p = ad_pool_new(&(struct ad_pool_opts){2, 2000000000L, 0, NULL}, err);
	REQUIRE(p, "%s", err);
	int moved = 0, apart = 0;
	for (int a = 0; a < 20 && !apart; a++) {
		struct where w = {{-1, -1}, {-1, -1}};
		ad_pool_run(p, where_task, &w, 2);
		int wcpu = atomic_load(&w.cpu[1]);
		if (wcpu < 0)
			continue;                       // the caller took both: the worker's CPU is not known
		struct timespec ts = {0, 1000 * 1000L}; // the worker polls meanwhile
		nanosleep(&ts, NULL);
		cpu_set_t one;
		CPU_ZERO(&one);
		CPU_SET(wcpu, &one);
		REQUIRE(!sched_setaffinity(0, sizeof one, &one), "pinning the caller to CPU %d", wcpu);
		REQUIRE(!sched_setaffinity(0, sizeof all, &all), "unpinning the caller");
		uint64_t before = ad_pool_moves(p);
		struct where w2 = {{-1, -1}, {-1, -1}};
		ad_pool_run(p, where_task, &w2, 2);
		if (ad_pool_moves(p) == before)
			continue;
		moved++;
		CHECK(atomic_load(&w2.cpu[0]) != wcpu, "attempt %d: the caller moved, yet ran on CPU %d, the worker's",
		      a, wcpu);
		apart = atomic_load(&w2.cpu[0]) >= 0 && atomic_load(&w2.cpu[1]) >= 0 &&
		        atomic_load(&w2.cpu[0]) != atomic_load(&w2.cpu[1]);
	}
	CHECK(moved > 0, "in 20 tries the caller, put on its polling worker's CPU, never moved");
	CHECK(apart, "after the moves the two tasks never ran on two CPUs at once");
	// the mask is the caller's own again
	cpu_set_t now;
	REQUIRE(!sched_getaffinity(0, sizeof now, &now), "sched_getaffinity");
	CHECK(CPU_EQUAL(&now, &all), "the caller's affinity mask changed");
	ad_pool_free(p);
}

// A worker that sleeps between jobs, woken by a caller pinned to one CPU
// whose own task sleeps (so that CPU idles, and the scheduler likes to
// wake the worker there): the worker runs its task on another CPU (but
// for a rare load balance), with its affinity mask whole again. Without
// leave_caller it ran on the caller's CPU in 15 to 44 of the 50 jobs.
static void
test_woken_worker_leaves_caller_cpu(void)
{
	cpu_set_t all;
	REQUIRE(!sched_getaffinity(0, sizeof all, &all), "sched_getaffinity");
	if (CPU_COUNT(&all) < 2) {
		printf("  skipped: this process may run on %d CPU\n", CPU_COUNT(&all));
		return;
	}
	int c0 = 0;
	while (!CPU_ISSET(c0, &all))
		c0++;
	char err[AD_ERRLEN];
	struct ad_pool *p = ad_pool_new(&(struct ad_pool_opts){2, 0, 0, NULL}, err); // workers sleep at once
	REQUIRE(p, "%s", err);
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(c0, &one);
	int ran = 0, on_caller = 0, narrowed = 0;
	for (int a = 0; a < 50; a++) {
		REQUIRE(!sched_setaffinity(0, sizeof one, &one), "pinning the caller to CPU %d", c0);
		struct timespec ts = {0, 3000 * 1000L}; // the worker is asleep by now
		nanosleep(&ts, NULL);
		struct where w = {{-1, -1}, {-1, -1}};
		ad_pool_run(p, where_task, &w, 2);
		if (atomic_load(&w.cpu[1]) < 0)
			continue; // the caller took both tasks
		ran++;
		on_caller += atomic_load(&w.cpu[1]) == c0;
		narrowed += atomic_load(&w.ncpus[1]) != CPU_COUNT(&all);
	}
	REQUIRE(!sched_setaffinity(0, sizeof all, &all), "unpinning the caller");
	CHECK(ran > 0, "in 50 jobs of two 2 ms tasks the worker never ran one");
	// (a load balance may still hand it the caller's idle CPU before its
	// task: on a busy machine, now and then)
	CHECK(on_caller * 10 <= ran, "the woken worker ran its task on the caller's CPU %d in %d of %d jobs", c0,
	      on_caller, ran);
	CHECK(narrowed == 0, "the worker's affinity mask was not whole in %d of %d jobs", narrowed, ran);
	ad_pool_free(p);
}
#endif

#ifdef __linux__
// how many of this process's threads the system names `name`
static int
threads_named(const char *name)
{
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		char path[300], comm[32] = "";
		snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof comm, f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
		n += strcmp(comm, name) == 0;
	}
	closedir(d);
	return n;
}

// a worker names itself as it starts: wait for it (a job run on the pool
// is not proof, the caller may have taken every task)
static int
named_soon(const char *name)
{
	for (int i = 0; i < 2000; i++) {
		if (threads_named(name) > 0)
			return 1;
		struct timespec ts = {0, 1000 * 1000L};
		nanosleep(&ts, NULL);
	}
	return 0;
}

static void
test_thread_names(void)
{
	char err[AD_ERRLEN];
	struct ad_pool *p = ad_pool_new(&(struct ad_pool_opts){3, 0, 0, "emu pool"}, err);
	REQUIRE(p, "%s", err);
	REQUIRE(ad_pool_threads(p) == 3, "3 threads, not %d", ad_pool_threads(p));
	CHECK(named_soon("emu pool 1") && named_soon("emu pool 2"), "the workers named 'emu pool 1' and 'emu pool 2'");
	CHECK(threads_named("emu pool 3") == 0, "no third worker: the caller is the third thread");
	ad_pool_free(p);
	CHECK(threads_named("emu pool 1") == 0, "the named workers gone with the pool");
	// unnamed: "pool N"; a long name cut to the system's 15 bytes
	p = ad_pool_new(&(struct ad_pool_opts){2, 0, 0, NULL}, err);
	REQUIRE(p, "%s", err);
	CHECK(named_soon("pool 1"), "an unnamed pool's worker is 'pool 1'");
	ad_pool_free(p);
	p = ad_pool_new(&(struct ad_pool_opts){2, 0, 0, "a very long pool name"}, err);
	REQUIRE(p, "%s", err);
	CHECK(named_soon("a very long 1"), "a long name cut to 11 bytes, the number kept: 'a very long 1'");
	ad_pool_free(p);
}
#endif

int
main(void)
{
	T_RUN(test_exactly_once);
	T_RUN(test_workers_take_part);
	T_RUN(test_back_to_back);
#ifdef __linux__
	T_RUN(test_caller_leaves_worker_cpu);
	T_RUN(test_woken_worker_leaves_caller_cpu);
	T_RUN(test_thread_names);
#endif
	return t_done();
}
