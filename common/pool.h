// pool.h - the thread pool of the emu backend (ane-worker/emu.c) and of
// the engine's attention (cpu-worker/engine.c).
//
// A pool runs one job at a time: fn(arg, task, worker) for every task in
// [0, ntasks), claimed one by one by the calling thread (worker 0) and by
// the pool's threads (workers 1 .. threads-1) that are awake; ad_pool_run
// returns when every task is done. worker tells a task which thread runs
// it (for per-thread scratch); which tasks a thread gets is not fixed.
//
// Tasks are claimed from one 64-bit word holding (generation << 32 | next
// task), so a worker that wakes late can never claim a task of a later
// job; the caller waits for the job's tasks to be done, not for every
// worker to have woken up.
//
// Waiting is tuned per pool (struct ad_pool_opts):
//   spin_ns       after a job a worker polls for the next one this long
//                 (sched_yield between looks, so that it keeps nobody off
//                 its core; the pause hint while the caller holds the pool
//                 hot, ad_pool_hot) before it sleeps on the condition
//                 variable: a sleeping worker wakes too late for a job of
//                 tens of microseconds (an idle vCPU takes ~50 us to wake
//                 on a VM, up to a millisecond on a busy host). 0: sleep
//                 at once.
//   wait_spin_ns  the caller, its own share done, spins (pause) this long
//                 for the workers' last tasks before it sleeps. 0: sleep
//                 at once.
//
// A caller that finds itself on the CPU where a worker polls moves to
// another CPU of its affinity mask before it publishes a job (Linux;
// ad_pool_moves counts the moves): there the worker's yields would hand
// it every task while another CPU idles. Likewise a worker woken from its
// sleep onto the caller's CPU leaves it before it takes a task.
//
// Lock discipline: mu guards gen, stop and the condition variables; the
// job (fn, arg, ntasks) and the claim word are atomics, because a late
// worker may read them while the next job is being set up (it then fails
// to claim and goes back to waiting). Not reentrant: one job at a time, run
// by one caller; a task must not call ad_pool_run on its own pool.
#ifndef AD_POOL_H
#define AD_POOL_H

#include <stddef.h>
#include <stdint.h>

struct ad_pool;

typedef void (*ad_pool_fn)(void *arg, size_t task, int worker);

struct ad_pool_opts {
	int threads;       // threads that run a job, the caller included (>= 1)
	long spin_ns;      // workers' poll after a job (see above)
	long wait_spin_ns; // the caller's spin for the last tasks
	const char *name;  // the workers' thread names: "NAME 1", "NAME 2", ...; NULL: "pool"
};

// a pool of o->threads - 1 worker threads. A thread that cannot be
// started is left out (the pool is still correct, with fewer workers):
// ad_pool_threads says how many run. NULL only when out of memory.
struct ad_pool *ad_pool_new(const struct ad_pool_opts *o, char *err);
// stops and joins the workers; NULL is a no-op
void ad_pool_free(struct ad_pool *p);
// threads that run a job, the caller included
int ad_pool_threads(const struct ad_pool *p);

// times the caller moved off a polling worker's CPU, or a woken worker
// off the caller's
uint64_t ad_pool_moves(const struct ad_pool *p);

// while on, the workers poll for the next job with the pause hint instead
// of yielding the CPU: for a run of jobs the caller issues back to back,
// each of tens of microseconds (a call's kernels), where a yield's trip
// through the scheduler makes a worker microseconds late for each. Off
// again as soon as the run ends: a hot worker keeps other threads off its
// CPU, and goes back to yielding at its next look
void ad_pool_hot(struct ad_pool *p, int on);

// run fn over ntasks tasks; with no workers or fewer than 2 tasks, all on
// the caller, in order
void ad_pool_run(struct ad_pool *p, ad_pool_fn fn, void *arg, size_t ntasks);

#endif
