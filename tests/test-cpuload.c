// test-cpuload.c - the others' share of the CPU (common/cpuload.c): the
// parsers of /proc/stat and /proc/PID/stat, the verdict, and on Linux a
// machine made busy by two spinning children, and a peer's time counted
// as ours.
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>

#include "clock.h"
#include "cpuload.h"
#include "t.h"

static void
test_parse_stat(void)
{
	uint64_t b = 0;
	CHECK(ad_cpuload_parse_stat("cpu  100 5 50 1000 20 3 4 6 9 0\ncpu0 50 2 25 500 10 1 2 3 0 0\n", &b) == 0);
	CHECK(b == 100 + 5 + 50 + 3 + 4 + 6, "busy %llu", (unsigned long long)b); // not idle, iowait, guest
	CHECK(ad_cpuload_parse_stat("cpu  1 2 3 4\n", &b) == 0 && b == 6, "busy %llu", (unsigned long long)b);
	CHECK(ad_cpuload_parse_stat("cpu  1 2 3\n", &b) == -1);
	CHECK(ad_cpuload_parse_stat("cpu0 1 2 3 4 5 6 7 8\n", &b) == -1);
	CHECK(ad_cpuload_parse_stat("intr 1 2 3 4\n", &b) == -1);
	CHECK(ad_cpuload_parse_stat("", &b) == -1);
}

static void
test_parse_pidstat(void)
{
	uint64_t t = 0;
	// a comm with spaces and a ')': fields 14 and 15 are utime 7, stime 3
	CHECK(ad_cpuload_parse_pidstat("42 (we ird) x) R 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 55 1000\n",
	                               &t) == 0 &&
	              t == 10,
	      "ticks %llu", (unsigned long long)t);
	CHECK(ad_cpuload_parse_pidstat("42 (x) R 1 42 42 0 -1 4194560 100 0 0 0 123456789012 5 0\n", &t) == 0 &&
	              t == 123456789017ull,
	      "ticks %llu", (unsigned long long)t);
	CHECK(ad_cpuload_parse_pidstat("42 (x) R 1 42 42 0 -1 4194560 100 0 0\n", &t) == -1); // cut short
	CHECK(ad_cpuload_parse_pidstat("42 x R 1 2 3\n", &t) == -1);                          // no comm
	CHECK(ad_cpuload_parse_pidstat("42 (x) R 1 42 42 0 -1 4194560 100 0 0 0 - 3\n", &t) == -1);
}

static void
test_verdict(void)
{
	// 250 ms at 100 ticks a second: 25 ticks a core, a quarter of it 6.25
	CHECK(ad_cpuload_verdict(6, 0, 250000000u, 100) == 1);
	CHECK(ad_cpuload_verdict(7, 0, 250000000u, 100) == 0);
	CHECK(ad_cpuload_verdict(57, 50, 250000000u, 100) == 0);
	CHECK(ad_cpuload_verdict(56, 50, 250000000u, 100) == 1);
	CHECK(ad_cpuload_verdict(40, 50, 250000000u, 100) == 1); // ours more than the machine's: none of others'
	CHECK(ad_cpuload_verdict(12, 0, 500000000u, 100) == 1);  // the longer the window, the more it allows
	CHECK(ad_cpuload_verdict(0, 0, 0, 100) == 0);            // an empty window allows nothing
}

#if defined(__linux__)
static pid_t
busy_child(void)
{
	pid_t p = fork();
	if (p == 0) {
		volatile uint64_t x = 0;
		for (;;)
			x++;
	}
	return p;
}

static void
stop_child(pid_t p)
{
	if (p > 0) {
		kill(p, SIGKILL);
		waitpid(p, NULL, 0);
	}
}

static void
nap_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0)
		;
}

// two spinning processes that are not ours: no core is spare
static void
test_busy(void)
{
	struct ad_cpuload l;
	ad_cpuload_init(&l);
	if (l.ncpu < 2) {
		CHECK(ad_cpuload_spare(&l, 0, ad_now_ns()) == -1, "one CPU: unknown");
		ad_cpuload_fini(&l);
		return;
	}
	pid_t a = busy_child(), b = busy_child();
	REQUIRE(a > 0 && b > 0);
	nap_ms(50);
	CHECK(ad_cpuload_spare(&l, 0, ad_now_ns()) == 1, "before the first window: spare");
	nap_ms(400);
	const int v = ad_cpuload_spare(&l, 0, ad_now_ns());
	CHECK(v == 0, "two busy processes, verdict %d", v);
	// within the window the verdict holds without a new sample
	const uint64_t busy = l.busy;
	CHECK(ad_cpuload_spare(&l, 0, ad_now_ns()) == 0 && l.busy == busy);
	stop_child(a);
	stop_child(b);
	ad_cpuload_fini(&l);
}

// a busy peer's time is ours: it goes into the ticks counted as ours
static void
test_peer(void)
{
	struct ad_cpuload l;
	ad_cpuload_init(&l);
	if (l.ncpu < 2) {
		ad_cpuload_fini(&l);
		return;
	}
	pid_t a = busy_child();
	REQUIRE(a > 0);
	ad_cpuload_spare(&l, (uint32_t)a, ad_now_ns());
	const uint64_t ours0 = l.ours, t0 = l.t_ns;
	nap_ms(500);
	ad_cpuload_spare(&l, (uint32_t)a, ad_now_ns());
	// the child spun for half a second: at least a tenth of that is its, however busy the machine
	const double got = (double)(l.ours - ours0) / (double)l.hz, span = (double)(l.t_ns - t0) / 1e9;
	CHECK(l.t_ns > t0 && got >= 0.05, "peer's CPU %.3f s of %.3f", got, span);
	stop_child(a);
	ad_cpuload_fini(&l);
}

// a peer named anew brings the CPU time of its whole life: the window it
// is named in says nothing (counted, that time would hide the others' load)
static void
test_new_peer(void)
{
	struct ad_cpuload l;
	ad_cpuload_init(&l);
	if (l.ncpu < 2) {
		ad_cpuload_fini(&l);
		return;
	}
	pid_t c = busy_child();
	REQUIRE(c > 0);
	nap_ms(1000); // c's CPU time grows past what a window holds
	pid_t a = busy_child(), b = busy_child();
	REQUIRE(a > 0 && b > 0);
	ad_cpuload_spare(&l, 0, ad_now_ns());
	nap_ms(300);
	CHECK(ad_cpuload_spare(&l, 0, ad_now_ns()) == 0, "three busy processes not ours");
	nap_ms(300);
	const int v = ad_cpuload_spare(&l, (uint32_t)c, ad_now_ns());
	CHECK(v == 0 && l.peer == (uint32_t)c, "the window a peer is named in keeps the verdict: %d", v);
	stop_child(a);
	stop_child(b);
	stop_child(c);
	ad_cpuload_fini(&l);
}
#endif

int
main(void)
{
	T_RUN(test_parse_stat);
	T_RUN(test_parse_pidstat);
	T_RUN(test_verdict);
#if defined(__linux__)
	T_RUN(test_busy);
	T_RUN(test_peer);
	T_RUN(test_new_peer);
#endif
	return t_done();
}
