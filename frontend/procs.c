// procs.c - the supervisor's view of the processes, for /health and
// /metrics: the status file `anedvd serve` keeps in its runtime directory
// (supervisor.h gives the format), passed as --status-file.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fe.h"

int
fe_procs_read(const char *path, struct fe_proc *out, int max)
{
	FILE *f = path ? fopen(path, "r") : NULL;
	if (!f)
		return -1;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	long long now_ms = (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
	char line[1024];
	int n = 0;
	while (n < max && fgets(line, sizeof line, f)) {
		struct fe_proc *p = &out[n];
		char times[600] = "";
		memset(p, 0, sizeof *p);
		int k = sscanf(line, "%31s %ld %d %15s %31s %599s", p->name, &p->pid, &p->restarts, p->state,
		               p->last_exit, times);
		if (k < 3)
			continue;
		if (k < 4)
			strcpy(p->state, p->pid > 0 ? "up" : "restarting");
		if (k < 5 || !strcmp(p->last_exit, "-"))
			p->last_exit[0] = 0;
		// exits within the window, counted from the times listed
		for (char *t = times, *end; *t && *t != '-'; t = *end ? end + 1 : end) {
			long long ms = strtoll(t, &end, 10);
			if (end == t)
				break;
			if (now_ms - ms <= FE_LOOP_WINDOW_MS)
				p->recent++;
		}
		p->looping = p->recent >= FE_LOOP_N;
		n++;
	}
	fclose(f);
	return n;
}
