// cpuload.h - whether the machine has a core to spare: how much CPU time
// processes other than ours took over the last window.
//
// A caller that spins through a kernel call (dataplane.c) needs a core the
// worker's threads do not; on a machine whose cores other processes use,
// the spin takes one from them and the call is late. The machine's busy
// time (/proc/stat: user, nice, system, irq, softirq and steal, in clock
// ticks) less the CPU time of our own processes (this one, and the peer
// named by pid) over a window is the others' share; under a quarter of a
// core, a core is spare. Linux only: elsewhere the answer is "unknown".
#ifndef AD_CPULOAD_H
#define AD_CPULOAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define AD_CPULOAD_WINDOW_NS 250000000u // a verdict holds this long

struct ad_cpuload {
	pthread_mutex_t mu;       // the sampling thread (others read the verdict)
	_Atomic int verdict;      // 1 spare, 0 not, -1 unknown (no /proc/stat)
	_Atomic uint64_t next_ns; // when to sample again
	uint64_t busy, ours;      // clock ticks at the last sample
	uint64_t t_ns;            // when that was
	uint32_t peer;            // the pid counted as ours beside this process
	long hz;                  // clock ticks a second
	int ncpu;
};

void ad_cpuload_init(struct ad_cpuload *l);
void ad_cpuload_fini(struct ad_cpuload *l);
// 1: a core is spare, 0: not, -1: unknown. Samples when the window is over
// (one thread at a time; the others get the last verdict); peer: a pid
// whose CPU time is ours too (0: none).
int ad_cpuload_spare(struct ad_cpuload *l, uint32_t peer, uint64_t now_ns);

// the parts, for the tests
// the busy ticks of /proc/stat's "cpu" line (user nice system idle iowait
// irq softirq steal ...: all but idle and iowait); -1 if none is there
int ad_cpuload_parse_stat(const char *text, uint64_t *busy);
// utime + stime of a /proc/PID/stat line; -1 if malformed
int ad_cpuload_parse_pidstat(const char *text, uint64_t *ticks);
// the verdict for a window: others' ticks (busy less ours) under a quarter
// of a core's ticks over the window's dt_ns
int ad_cpuload_verdict(uint64_t d_busy, uint64_t d_ours, uint64_t dt_ns, long hz);

#endif
