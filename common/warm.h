// warm.h - keeping idle CPUs from halting while a job runs.
//
// On a virtual machine an idle vCPU halts, and a thread woken on a halted
// vCPU pays the hypervisor's wake-up: 50-60 us on the machines measured
// (docs/RESULTS.md), met at every hand-off of the decode loop between the
// cpu-worker, the ane-worker and their threads. While the caller says it
// is busy (warm_touch, which holds for WARM_HOLD_NS), warm's threads spin
// with the pause hint at SCHED_IDLE, the lowest scheduling class: any
// other thread that becomes runnable takes their CPU at once, so they take
// no time from the pipeline or anything else; they keep the vCPUs running
// so that wake-ups land on a running CPU. Between jobs they sleep. Like a
// polling thread pool, they show as CPU use while a job runs.
//
// warm_start(n): start n such threads (n <= 0: none); where the system has
// no SCHED_IDLE (not Linux) none are started. warm_auto() is the count the
// cpu-worker starts: ANEDVD_WARM=N, 0 (off) when unset. Off by default:
// SCHED_IDLE yields only to threads of the same task group, and with the
// kernel's autogroups (sched_autogroup_enabled) every session is a group
// that shares the CPUs evenly with the others, so spinners would take half
// the CPUs from, say, a browser started in another session.
#ifndef AD_WARM_H
#define AD_WARM_H

#define WARM_HOLD_NS 20000000u // 20 ms after the last touch

int warm_auto(void);
// the number of threads started (0 when n <= 0 or unsupported); -1 and err
int warm_start(int n, char *err);
// the caller is busy: keep the CPUs warm for the next WARM_HOLD_NS
void warm_touch(void);
// stop and join the threads (also fine when none were started)
void warm_stop(void);
// for tests and `info`: threads running, and whether they spin now
int warm_threads(void);
int warm_spinning(void);
// tests only: threads started after this stay at the normal priority, so
// that a busy machine cannot starve them while the test watches them
void warm_test_normal_priority(void);

#endif
