// cpuload.c - the others' share of the machine's CPU time (cpuload.h).
#include "cpuload.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int
ad_cpuload_parse_stat(const char *text, uint64_t *busy)
{
	// the first line: "cpu  user nice system idle iowait irq softirq steal guest guest_nice"
	if (strncmp(text, "cpu ", 4) != 0)
		return -1;
	const char *p = text + 4;
	uint64_t v[8] = {0};
	int n = 0;
	while (n < 8) {
		char *end;
		while (*p == ' ')
			p++;
		if (*p < '0' || *p > '9')
			break;
		v[n++] = strtoull(p, &end, 10);
		p = end;
	}
	if (n < 4) // older kernels stop after idle
		return -1;
	*busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]; // guest time is in user already
	return 0;
}

int
ad_cpuload_parse_pidstat(const char *text, uint64_t *ticks)
{
	// "pid (comm) state ppid ...": utime and stime are fields 14 and 15; comm may hold spaces
	const char *p = strrchr(text, ')');
	if (!p)
		return -1;
	p++;
	for (int field = 3; field < 14; field++) { // to the start of field 14
		p = strchr(p + 1, ' ');
		if (!p)
			return -1;
	}
	char *end;
	uint64_t ut = strtoull(p + 1, &end, 10);
	if (end == p + 1 || *end != ' ')
		return -1;
	const char *q = end + 1;
	uint64_t st = strtoull(q, &end, 10);
	if (end == q)
		return -1;
	*ticks = ut + st;
	return 0;
}

int
ad_cpuload_verdict(uint64_t d_busy, uint64_t d_ours, uint64_t dt_ns, long hz)
{
	const uint64_t others = d_busy > d_ours ? d_busy - d_ours : 0;
	// a quarter of one core over the window, in ticks: others * 4 * 1e9 < dt * hz
	return (double)others * 4e9 < (double)dt_ns * (double)hz;
}

void
ad_cpuload_init(struct ad_cpuload *l)
{
	memset(l, 0, sizeof *l);
	pthread_mutex_init(&l->mu, NULL);
	atomic_store(&l->verdict, 1); // until the first window says otherwise
	atomic_store(&l->next_ns, 0);
	l->hz = sysconf(_SC_CLK_TCK);
	l->ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
}

void
ad_cpuload_fini(struct ad_cpuload *l)
{
	pthread_mutex_destroy(&l->mu);
}

#if defined(__linux__)
static int
read_small(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, size - 1); // the first line is enough
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	return 0;
}

static int
pid_ticks(const char *path, uint64_t *t)
{
	char buf[512];
	return read_small(path, buf, sizeof buf) == 0 ? ad_cpuload_parse_pidstat(buf, t) : -1;
}

// the machine's busy ticks and ours now; -1 if /proc/stat cannot be read
static int
sample(uint32_t peer, uint64_t *busy, uint64_t *ours)
{
	char buf[256];
	if (read_small("/proc/stat", buf, sizeof buf) != 0 || ad_cpuload_parse_stat(buf, busy) != 0)
		return -1;
	uint64_t a = 0, b = 0;
	if (pid_ticks("/proc/self/stat", &a) != 0)
		return -1;
	if (peer) {
		char path[48];
		snprintf(path, sizeof path, "/proc/%" PRIu32 "/stat", peer);
		if (pid_ticks(path, &b) != 0)
			b = 0; // gone: its time is no longer in the machine's either
	}
	*ours = a + b;
	return 0;
}
#endif

int
ad_cpuload_spare(struct ad_cpuload *l, uint32_t peer, uint64_t now_ns)
{
#if defined(__linux__)
	if (now_ns < atomic_load_explicit(&l->next_ns, memory_order_relaxed) || pthread_mutex_trylock(&l->mu) != 0)
		return atomic_load_explicit(&l->verdict, memory_order_relaxed);
	if (now_ns >= atomic_load_explicit(&l->next_ns, memory_order_relaxed)) {
		uint64_t busy, ours;
		if (l->ncpu < 2 || l->hz <= 0 || sample(peer, &busy, &ours) != 0) {
			atomic_store(&l->verdict, -1);
			atomic_store(&l->next_ns, UINT64_MAX); // it will not change
		} else {
			// a new peer's ticks would count from its start: skip that window
			if (l->t_ns && peer == l->peer && busy >= l->busy && ours >= l->ours)
				atomic_store(&l->verdict, ad_cpuload_verdict(busy - l->busy, ours - l->ours,
				                                             now_ns - l->t_ns, l->hz));
			l->busy = busy, l->ours = ours, l->t_ns = now_ns, l->peer = peer;
			atomic_store(&l->next_ns, now_ns + AD_CPULOAD_WINDOW_NS);
		}
	}
	pthread_mutex_unlock(&l->mu);
	return atomic_load_explicit(&l->verdict, memory_order_relaxed);
#else
	(void)l, (void)peer, (void)now_ns;
	return -1;
#endif
}
