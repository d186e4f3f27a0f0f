// test-pool.c - common/pool.h: every task of every job runs exactly once,
// on a worker index in range, with the workers polling between jobs
// (spin_ns) or sleeping at once, with the caller polling for the last
// tasks or sleeping at once; jobs back to back (a worker late for one
// job must not take a task of the next); one thread; 0 and 1 task; the
// pool's threads take part (slow tasks on three threads run on more than
// one of them).
#include <stdatomic.h>
#include <stdint.h>
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
	struct ad_pool *p = ad_pool_new(&(struct ad_pool_opts){threads, spin_ns, wait_spin_ns}, err);
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

static void
test_workers_take_part(void)
{
	char err[AD_ERRLEN];
	struct ad_pool *p = ad_pool_new(&(struct ad_pool_opts){3, 0, 0}, err);
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

int
main(void)
{
	T_RUN(test_exactly_once);
	T_RUN(test_workers_take_part);
	return t_done();
}
