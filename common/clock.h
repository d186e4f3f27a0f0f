// clock.h - the one monotonic clock and sleep of the project.
//
// ad_now_ns is CLOCK_MONOTONIC in nanoseconds: for intervals, deadlines and
// timeouts (never wall-clock time). ad_sleep_ns sleeps at least ns, going
// back to sleep after a signal.
#ifndef AD_CLOCK_H
#define AD_CLOCK_H

#include <stdint.h>

uint64_t ad_now_ns(void);
void ad_sleep_ns(uint64_t ns);

#endif
