// warm.c - SCHED_IDLE spinners while a job runs (warm.h).
#define _GNU_SOURCE
#include "warm.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "clock.h"
#include "err.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define relax() _mm_pause()
#elif defined(__aarch64__)
#define relax() __asm__ __volatile__("yield")
#else
#define relax() ((void)0)
#endif

#define WARM_MAX 16

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t th[WARM_MAX];
	int n, stop;
	_Atomic uint64_t until; // spin while the clock is before this
	_Atomic int sleeping;   // threads waiting on cv
	_Atomic int spinning;
	int normal; // warm_test_normal_priority
} W = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

int
warm_auto(void)
{
	const char *v = getenv("ANEDVD_WARM");
	if (v && *v) {
		char *end;
		long n = strtol(v, &end, 10);
		if (!*end && n >= 0)
			return n > WARM_MAX ? WARM_MAX : (int)n;
	}
	return 0;
}

static void *
warm_main(void *arg)
{
	(void)arg;
#ifdef SCHED_IDLE
	struct sched_param p = {0};
	if (!W.normal && sched_setscheduler(0, SCHED_IDLE, &p) != 0)
		return NULL; // never spin at a normal priority
#endif
	pthread_mutex_lock(&W.mu);
	while (!W.stop) {
		if (ad_now_ns() >= atomic_load(&W.until)) {
			atomic_fetch_add(&W.sleeping, 1);
			pthread_cond_wait(&W.cv, &W.mu);
			atomic_fetch_sub(&W.sleeping, 1);
			continue;
		}
		pthread_mutex_unlock(&W.mu);
		atomic_fetch_add(&W.spinning, 1);
		for (;;) {
			for (int i = 0; i < 256; i++)
				relax();
			if (ad_now_ns() >= atomic_load_explicit(&W.until, memory_order_relaxed) ||
			    __atomic_load_n(&W.stop, __ATOMIC_RELAXED))
				break;
		}
		atomic_fetch_sub(&W.spinning, 1);
		pthread_mutex_lock(&W.mu);
	}
	pthread_mutex_unlock(&W.mu);
	return NULL;
}

int
warm_start(int n, char *err)
{
#ifndef SCHED_IDLE
	(void)n;
	(void)err;
	return 0;
#else
	if (n <= 0 || W.n)
		return W.n;
	if (n > WARM_MAX)
		n = WARM_MAX;
	W.stop = 0;
	for (int i = 0; i < n; i++) {
		if (pthread_create(&W.th[i], NULL, warm_main, NULL) != 0) {
			if (W.n == 0)
				return ad_err(err, "warm: cannot start a thread"), -1;
			break; // fewer is fine
		}
		W.n++;
	}
	return W.n;
#endif
}

void
warm_touch(void)
{
	if (!W.n)
		return;
	const uint64_t now = ad_now_ns(), was = atomic_load_explicit(&W.until, memory_order_relaxed);
	atomic_store_explicit(&W.until, now + WARM_HOLD_NS, memory_order_relaxed);
	// asleep (or about to be): wake them, under the lock so none misses it
	if (was <= now || atomic_load(&W.sleeping)) {
		pthread_mutex_lock(&W.mu);
		pthread_cond_broadcast(&W.cv);
		pthread_mutex_unlock(&W.mu);
	}
}

void
warm_stop(void)
{
	if (!W.n)
		return;
	pthread_mutex_lock(&W.mu);
	__atomic_store_n(&W.stop, 1, __ATOMIC_RELAXED);
	atomic_store(&W.until, 0);
	pthread_cond_broadcast(&W.cv);
	pthread_mutex_unlock(&W.mu);
	for (int i = 0; i < W.n; i++)
		pthread_join(W.th[i], NULL);
	W.n = 0;
}

void
warm_test_normal_priority(void)
{
	W.normal = 1;
}

int
warm_threads(void)
{
	return W.n;
}

int
warm_spinning(void)
{
	return atomic_load(&W.spinning);
}
