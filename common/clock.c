#include "clock.h"

#include <errno.h>
#include <time.h>

uint64_t
ad_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void
ad_sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)}, rem;
	while (nanosleep(&ts, &rem) == -1 && errno == EINTR)
		ts = rem;
}
