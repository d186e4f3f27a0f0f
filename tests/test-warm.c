// test-warm.c - the SCHED_IDLE spinners (common/warm.h): they run at
// SCHED_IDLE; they spin only while the caller is busy (within WARM_HOLD_NS
// of a touch), sleep afterwards, wake again on a touch, and stop (watched
// at the normal priority: on a busy machine a SCHED_IDLE thread may not get
// a CPU for seconds); ANEDVD_WARM picks the count.
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "clock.h"
#include "t.h"
#include "warm.h"

// threads of this process whose scheduling policy is SCHED_IDLE
static int
idle_threads(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/task");
	if (!d)
		return -1;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && sched_getscheduler(atoi(e->d_name)) == SCHED_IDLE)
			n++;
	closedir(d);
	return n;
}

// wait up to ms for warm_spinning() == want (long: on a busy machine a
// SCHED_IDLE thread gets a CPU only now and then)
static int
spinning_within(int want, int ms)
{
	const uint64_t end = ad_now_ns() + (uint64_t)ms * 1000000u;
	while (warm_spinning() != want) {
		if (ad_now_ns() > end)
			return 0;
		ad_sleep_ns(200000);
	}
	return 1;
}

static void
test_auto(void)
{
	setenv("ANEDVD_WARM", "3", 1);
	CHECK(warm_auto() == 3);
	setenv("ANEDVD_WARM", "0", 1);
	CHECK(warm_auto() == 0);
	setenv("ANEDVD_WARM", "1000", 1);
	CHECK(warm_auto() == 16, "capped");
	setenv("ANEDVD_WARM", "x", 1);
	CHECK(warm_auto() == 0, "not a number: off");
	unsetenv("ANEDVD_WARM");
	CHECK(warm_auto() == 0, "off by default");
}

// the threads take SCHED_IDLE as they start
static void
test_policy(void)
{
	char err[256];
#ifndef SCHED_IDLE
	CHECK(warm_start(2, err) == 0, "no SCHED_IDLE: none started");
	return;
#endif
	CHECK(warm_start(0, err) == 0 && warm_threads() == 0);
	REQUIRE(warm_start(2, err) == 2, "%s", err);
	CHECK(warm_start(2, err) == 2, "a second start adds none");
	const uint64_t end = ad_now_ns() + 5000000000u;
	while (idle_threads() < 2 && ad_now_ns() < end)
		ad_sleep_ns(1000000);
	CHECK(idle_threads() == 2, "%d SCHED_IDLE threads", idle_threads());
	warm_stop();
	CHECK(warm_threads() == 0 && idle_threads() == 0, "joined: %d left", idle_threads());
}

static void
test_cycle(void)
{
	char err[256];
#ifndef SCHED_IDLE
	return;
#endif
	warm_test_normal_priority();
	REQUIRE(warm_start(2, err) == 2, "%s", err);
	// asleep until touched
	ad_sleep_ns(30000000);
	CHECK(warm_spinning() == 0);
	CHECK(idle_threads() == 0);
	warm_touch();
	CHECK(spinning_within(2, 5000), "spinning after a touch: %d", warm_spinning());
	// still spinning while touched within the hold
	for (int i = 0; i < 5; i++) {
		ad_sleep_ns(WARM_HOLD_NS / 4);
		warm_touch();
	}
	CHECK(warm_spinning() == 2, "held by touches: %d", warm_spinning());
	// asleep once the hold has passed, and again on a touch
	CHECK(spinning_within(0, 5000), "asleep after the hold: %d", warm_spinning());
	warm_touch();
	CHECK(spinning_within(2, 5000), "woken again: %d", warm_spinning());
	warm_stop();
	CHECK(warm_threads() == 0 && warm_spinning() == 0);
	warm_stop(); // twice is fine
	warm_touch(); // and a touch with none
}

int
main(void)
{
	T_RUN(test_auto);
	T_RUN(test_policy);
	T_RUN(test_cycle);
	return t_done();
}
