#define _GNU_SOURCE // sched_getcpu and the CPU_ macros
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "err.h"
#include "log.h"

struct worker {
	struct ad_pool *p;
	int id;
	pthread_t th;
	int cpu; // atomic: the CPU it last polled for a job on, -1 when asleep
};

struct ad_pool {
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	struct worker *w;
	int nth; // worker threads running (the caller not counted)
	int stop;
	long spin_ns, wait_spin_ns;
	uint32_t gen;   // written under mu, read by spinning workers atomically
	uint64_t state; // atomic: gen << 32 | next task
	size_t ndone;   // atomic: tasks finished in this generation
	int waiting;    // atomic: the caller sleeps on done (set under mu)
	// the job: atomics, as late workers may read them while the next job is
	// being set up (they then fail to claim and go back to waiting: the
	// state is closed first, see ad_pool_run)
	ad_pool_fn fn;
	void *arg;
	size_t ntasks;
	uint64_t moves; // atomic: a thread left another's CPU (spread, leave_caller)
	int caller_cpu; // atomic: the CPU the caller last published a job on (-1: none)
	int hot;        // atomic: ad_pool_hot
	char name[12];  // the workers' thread names, without their number
};

// claim and run tasks of generation gen until none is left
static void
work(struct ad_pool *p, uint32_t gen, int worker)
{
	for (;;) {
		uint64_t s = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
		if ((uint32_t)(s >> 32) != gen)
			return;
		size_t n = __atomic_load_n(&p->ntasks, __ATOMIC_ACQUIRE); // see ad_pool_run
		ad_pool_fn fn = __atomic_load_n(&p->fn, __ATOMIC_RELAXED);
		void *arg = __atomic_load_n(&p->arg, __ATOMIC_RELAXED);
		size_t t = (size_t)(uint32_t)s;
		if (t >= n)
			return;
		// claiming task t of this generation: the job cannot change before
		// every task, this one included, is done
		if (!__atomic_compare_exchange_n(&p->state, &s, s + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			continue;
		fn(arg, t, worker);
		// the lock only when the caller sleeps: a caller still spinning
		// would otherwise find it held at its next job and sleep on it.
		// (The caller sets waiting, then reads ndone; this adds to ndone,
		// then reads waiting: one of the two sees the other's write.)
		if (__atomic_add_fetch(&p->ndone, 1, __ATOMIC_SEQ_CST) == n &&
		    __atomic_load_n(&p->waiting, __ATOMIC_SEQ_CST)) {
			pthread_mutex_lock(&p->mu);
			pthread_cond_signal(&p->done);
			pthread_mutex_unlock(&p->mu);
		}
	}
}

static inline void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ volatile("yield");
#endif
}

// a hot worker's look at the claim word comes every so many pauses
#define HOT_PAUSES 8

// poll for jobs after generation seen, running each as it is published,
// until none comes for spin_ns; the last generation seen. A job is taken
// from the claim word, without the lock: a worker that saw the new
// generation while the caller still held the lock to publish it would
// sleep on the lock, and a sleeping vCPU wakes late.
static uint32_t
spin(struct ad_pool *p, uint32_t seen, int worker)
{
	if (p->spin_ns <= 0)
		return seen;
	uint64_t t0 = ad_now_ns();
	for (unsigned k = 1;; k++) {
		if (__atomic_load_n(&p->stop, __ATOMIC_RELAXED))
			return seen;
		uint32_t g = (uint32_t)(__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) >> 32);
		if (g != seen && g != 0) {
			work(p, g, worker);
			seen = g;
			t0 = ad_now_ns();
			k = 0;
			continue;
		}
		// yield, not pause: on a machine with more threads than cores a
		// polling worker must not keep the caller (or anyone) off its core.
		// But while the caller holds the pool hot (ad_pool_hot) its next
		// job is due in microseconds, and a yield's trip through the
		// scheduler made the worker 1-8 us late for most jobs of a decode
		// step's call (under 1 us for most when pausing)
		if (__atomic_load_n(&p->hot, __ATOMIC_RELAXED))
			for (int i = 0; i < HOT_PAUSES; i++)
				cpu_relax();
		else
			sched_yield();
#ifdef __linux__
		if (k % 16 == 1)
			__atomic_store_n(&p->w[worker - 1].cpu, sched_getcpu(), __ATOMIC_RELAXED);
#endif
		if (k % 16 == 0 && ad_now_ns() - t0 > (uint64_t)p->spin_ns)
			return seen;
	}
}

static void leave_caller(struct ad_pool *p);

static void *
worker_main(void *arg)
{
	struct worker *w = arg;
	struct ad_pool *p = w->p;
	uint32_t seen = 0;
	ad_thread_name("%s %d", p->name, w->id);
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->stop && p->gen == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->stop)
			break;
		seen = p->gen;
		pthread_mutex_unlock(&p->mu);
		leave_caller(p);
		work(p, seen, w->id);
		seen = spin(p, seen, w->id);
		__atomic_store_n(&w->cpu, -1, __ATOMIC_RELAXED);
		pthread_mutex_lock(&p->mu);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

struct ad_pool *
ad_pool_new(const struct ad_pool_opts *o, char *err)
{
	struct ad_pool *p = calloc(1, sizeof *p);
	int n = o->threads > 1 ? o->threads - 1 : 0;
	if (!p || (n && !(p->w = calloc((size_t)n, sizeof *p->w)))) {
		free(p);
		ad_err(err, "thread pool: out of memory");
		return NULL;
	}
	p->spin_ns = o->spin_ns;
	snprintf(p->name, sizeof p->name, "%s", o->name ? o->name : "pool");
	p->caller_cpu = -1;
	p->wait_spin_ns = o->wait_spin_ns;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 0; i < n; i++) {
		p->w[p->nth] = (struct worker){p, p->nth + 1, 0, -1};
		if (pthread_create(&p->w[p->nth].th, NULL, worker_main, &p->w[p->nth]))
			break; // fewer threads is still correct
		p->nth++;
	}
	return p;
}

void
ad_pool_free(struct ad_pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	__atomic_store_n(&p->stop, 1, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->nth; i++)
		pthread_join(p->w[i].th, NULL);
	free(p->w);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	free(p);
}

int
ad_pool_threads(const struct ad_pool *p)
{
	return p->nth + 1;
}

uint64_t
ad_pool_moves(const struct ad_pool *p)
{
	return __atomic_load_n(&p->moves, __ATOMIC_RELAXED);
}

// Leaving CPU set `off` (of its affinity mask): restricted to the rest and
// then allowed everything again, which moves the thread at once; counted
// in the pool's moves.
#ifdef __linux__
static void
move_off(struct ad_pool *p, const cpu_set_t *off)
{
	cpu_set_t mask, to;
	if (sched_getaffinity(0, sizeof mask, &mask))
		return;
	CPU_XOR(&to, &mask, off);
	CPU_AND(&to, &to, &mask);
	if (!CPU_COUNT(&to) || sched_setaffinity(0, sizeof to, &to))
		return;
	sched_setaffinity(0, sizeof mask, &mask);
	__atomic_add_fetch(&p->moves, 1, __ATOMIC_RELAXED);
}
#endif

// The caller about to publish a job on the CPU where a worker polls for
// one: the worker yields the CPU to the caller, and the caller, running
// its own task and then the worker's, does the whole job alone while
// another CPU may idle. The scheduler leaves two such threads together
// (both are cache-hot, and a polling thread never lets its CPU look idle):
// on a 2-vCPU VM whole rounds of a decode pass ran at one thread's speed.
// So the caller moves itself to a CPU of its affinity mask no polling
// worker is on. Two system calls, only when it finds itself there.
static void
spread(struct ad_pool *p)
{
#ifdef __linux__
	int me = sched_getcpu(), hit = 0;
	__atomic_store_n(&p->caller_cpu, me, __ATOMIC_RELAXED);
	for (int i = 0; i < p->nth && !hit; i++)
		hit = __atomic_load_n(&p->w[i].cpu, __ATOMIC_RELAXED) == me;
	if (!hit || me < 0)
		return;
	cpu_set_t off;
	CPU_ZERO(&off);
	for (int i = 0; i < p->nth; i++) {
		int c = __atomic_load_n(&p->w[i].cpu, __ATOMIC_RELAXED);
		if (c >= 0 && c < CPU_SETSIZE)
			CPU_SET(c, &off);
	}
	move_off(p, &off);
#else
	(void)p;
#endif
}

// The other way round, after a sleep: a worker woken by the caller's
// broadcast is put on the caller's CPU (the waker's, where the scheduler
// deems it cache-hot) while the other CPU idles, and the two take turns
// on one CPU until a load balance parts them. On the 2-vCPU VM the first
// 64-column prefill chunk after a start ran its first layer at one
// thread's speed, 3-4x its later layers, with a migration in each of its
// kernels. So a woken worker that finds itself on the caller's CPU leaves
// it at once.
static void
leave_caller(struct ad_pool *p)
{
#ifdef __linux__
	int c = __atomic_load_n(&p->caller_cpu, __ATOMIC_RELAXED);
	if (c < 0 || c >= CPU_SETSIZE || sched_getcpu() != c)
		return;
	cpu_set_t off;
	CPU_ZERO(&off);
	CPU_SET(c, &off);
	move_off(p, &off);
#else
	(void)p;
#endif
}

void
ad_pool_hot(struct ad_pool *p, int on)
{
	__atomic_store_n(&p->hot, on != 0, __ATOMIC_RELAXED);
}

void
ad_pool_run(struct ad_pool *p, ad_pool_fn fn, void *arg, size_t ntasks)
{
	if (p->nth == 0 || ntasks < 2) {
		for (size_t t = 0; t < ntasks; t++)
			fn(arg, t, 0);
		return;
	}
	spread(p);
	pthread_mutex_lock(&p->mu);
	// The last job is closed first: no task of it can be claimed any more.
	// A worker still in work() for it has read its state (every task
	// claimed) and may read the fields below only now: it saw this job's
	// ntasks, larger, claimed task "its ntasks" on the last job's state,
	// still unchanged, and ran this job's task of that number outside the
	// count, so this call returned with its last task still running (a
	// stress of alternating 2 and up to 31 tasks, 3 threads on 2 CPUs: 1
	// in 250,000 calls, 1 in 20,000 with polling workers). Written before
	// ntasks, which is released; the worker acquires ntasks before it
	// claims, and its claim then fails.
	__atomic_store_n(&p->state, (uint64_t)p->gen << 32 | UINT32_MAX, __ATOMIC_RELAXED);
	uint32_t gen = p->gen + 1;
	if (gen == 0) // 0 is the workers' "none seen yet"
		gen = 1;
	__atomic_store_n(&p->gen, gen, __ATOMIC_RELEASE);
	__atomic_store_n(&p->fn, fn, __ATOMIC_RELAXED);
	__atomic_store_n(&p->arg, arg, __ATOMIC_RELAXED);
	__atomic_store_n(&p->ntasks, ntasks, __ATOMIC_RELEASE);
	__atomic_store_n(&p->ndone, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&p->state, (uint64_t)gen << 32, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	work(p, gen, 0);
	// the workers' last tasks: spin for them a while (a clock read every
	// 1024 rounds), then sleep
	if (p->wait_spin_ns > 0) {
		uint64_t t0 = 0;
		for (unsigned k = 1; __atomic_load_n(&p->ndone, __ATOMIC_ACQUIRE) < ntasks; k++) {
			cpu_relax();
			if (k % 1024 == 0) {
				uint64_t t = ad_now_ns();
				if (k == 1024)
					t0 = t;
				else if (t - t0 > (uint64_t)p->wait_spin_ns)
					break;
			}
		}
	}
	if (__atomic_load_n(&p->ndone, __ATOMIC_ACQUIRE) < ntasks) {
		pthread_mutex_lock(&p->mu);
		__atomic_store_n(&p->waiting, 1, __ATOMIC_SEQ_CST);
		while (__atomic_load_n(&p->ndone, __ATOMIC_SEQ_CST) < ntasks)
			pthread_cond_wait(&p->done, &p->mu);
		__atomic_store_n(&p->waiting, 0, __ATOMIC_RELAXED);
		pthread_mutex_unlock(&p->mu);
	}
}
