// test-supervisor.c - the CLI's supervisor with stand-in children (sh, sleep):
// runtime directory and status file, restart with back-off and its count,
// readiness errors, a hung child killed and restarted, stop with SIGTERM then
// SIGKILL (a child that says it finishes work of its own waited for, until an
// interrupt), no process and no file left behind, stale runtime directories
// of dead instances removed, unsafe runtime directories refused and an
// unguessable one made without XDG_RUNTIME_DIR.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "clock.h"
#include "ipc.h"
#include "rpc.h"
#include "supervisor.h"
#include "t.h"
#include "trace.h"

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static int
alive(long pid)
{
	return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static double
now_s(void)
{
	return (double)ad_now_ns() / 1e9;
}

static int
exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

static void
test_lifecycle(void)
{
	char err[AD_ERRLEN];
	struct sup *s = sup_new(err);
	REQUIRE(s, "%s", err);
	char dir[1024];
	snprintf(dir, sizeof dir, "%s", sup_rundir(s));
	struct stat st;
	REQUIRE(stat(dir, &st) == 0);
	CHECK((st.st_mode & 0777) == 0700, "mode %o", st.st_mode & 0777);
	char url[1100];
	CHECK(sup_url(s, "x", url, sizeof url) == 0 && strstr(url, "ipc://") == url && strstr(url, dir));

	const char *sleeper[] = {"/bin/sleep", "100", NULL};
	struct sup_spec sp = {"sleeper", sleeper, NULL, NULL, 1, NULL};
	REQUIRE(sup_spawn(s, &sp, err) == 0, "%s", err);
	CHECK(sup_spawn(s, &sp, err) == -1, "a duplicate name is refused");
	CHECK(sup_wait_ready(s, "sleeper", 2000, err) == 0, "%s", err);
	CHECK(sup_wait_ready(s, "nobody", 100, err) == -1);
	long pid = sup_pid(s, "sleeper");
	CHECK(alive(pid));

	// the status file names it
	char sf[1100], line[256] = "";
	snprintf(sf, sizeof sf, "%s/status", dir);
	FILE *f = fopen(sf, "r");
	REQUIRE(f);
	CHECK(fgets(line, sizeof line, f) != NULL);
	fclose(f);
	char want[64];
	snprintf(want, sizeof want, "sleeper %ld 0 up - -\n", pid);
	CHECK(strcmp(line, want) == 0, "status line '%s'", line);

	// SIGKILL: restarted after the first back-off step, counted
	kill((pid_t)pid, SIGKILL);
	double t0 = now_s();
	long np = 0;
	while (now_s() - t0 < 3 && ((np = sup_pid(s, "sleeper")) <= 0 || np == pid))
		sleep_ms(10);
	CHECK(np > 0 && np != pid, "restarted: %ld", np);
	CHECK(sup_restarts(s, "sleeper") == 1);
	CHECK(now_s() - t0 >= 0.09, "waited the back-off");

	// a child that ignores SIGTERM is killed; sup_free removes everything
	const char *stubborn[] = {"/bin/sh", "-c", "trap '' TERM; exec /bin/sleep 100", NULL};
	struct sup_spec sp2 = {"stubborn", stubborn, NULL, NULL, 0, NULL};
	REQUIRE(sup_spawn(s, &sp2, err) == 0, "%s", err);
	sleep_ms(100);
	long p2 = sup_pid(s, "stubborn");
	CHECK(alive(p2));
	t0 = now_s();
	sup_free(s);
	double took = now_s() - t0;
	CHECK(took >= 2.5 && took < 6, "stop took %.2f s", took);
	CHECK(!alive(np) && !alive(p2), "children gone");
	CHECK(!exists(dir), "runtime dir removed");
}

// a finishing function (sup_spec) for stand-ins: says "testing N" (N: the
// ask) while finishing_says, counting the asks
static int finishing_says, finishing_asks;

static int
finishing_stub(const char *url, int timeout_ms, char *what, size_t cap)
{
	(void)url;
	(void)timeout_ms;
	finishing_asks++;
	snprintf(what, cap, "testing %d", finishing_asks);
	return finishing_says;
}

static void *
interrupt_at_4s(void *p)
{
	(void)p;
	sleep_ms(4000);
	kill(getpid(), SIGINT);
	return NULL;
}

// occurrences of what in the file at path
static int
count_in(const char *path, const char *what)
{
	size_t n;
	char *d = t_read_file(path, &n);
	int c = 0;
	for (char *p = d; p && (p = strstr(p, what)); p += strlen(what))
		c++;
	free(d);
	return c;
}

// a stopping child that says it finishes work of its own is waited for past
// the 3 s grace (it exits by itself: its file is written), with a line on
// stderr, and another when what it says changes, at most every 5 s; one
// that does not say so, or one waited for when an interrupt comes, is killed
static void
test_finishing(void)
{
	char err[AD_ERRLEN], done[1100], cmd[2][1300], log[1100];
	snprintf(done, sizeof done, "%s/finished", t_tmpdir());
	snprintf(log, sizeof log, "%s/finishing.err", t_tmpdir());
	for (int i = 0; i < 2; i++)
		snprintf(cmd[i], sizeof cmd[i], "trap '' TERM; /bin/sleep %d; echo > %s", i ? 5 : 9, done);
	for (int round = 0; round < 3; round++) {
		const char *slow[] = {"/bin/sh", "-c", cmd[round > 0], NULL};
		unlink(done);
		struct sup *s = sup_new(err);
		REQUIRE(s, "%s", err);
		struct sup_spec sp = {"slow", slow, "x", NULL, 0, finishing_stub};
		REQUIRE(sup_spawn(s, &sp, err) == 0, "%s", err);
		sleep_ms(100);
		long pid = sup_pid(s, "slow");
		finishing_says = round != 1;
		finishing_asks = 0;
		sup_clear_interrupt();
		pthread_t th;
		if (round == 2)
			REQUIRE(pthread_create(&th, NULL, interrupt_at_4s, NULL) == 0);
		// its lines on stderr, into a file
		fflush(stderr);
		int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		REQUIRE(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2);
		close(fd);
		double t0 = now_s();
		sup_free(s);
		double took = now_s() - t0;
		fflush(stderr);
		dup2(saved, 2);
		close(saved);
		if (round == 2)
			pthread_join(th, NULL);
		CHECK(!alive(pid), "round %d: the child is gone", round);
		CHECK(finishing_asks >= 1, "round %d: asked %d times", round, finishing_asks);
		const int said = count_in(log, "anedvd: waiting for slow (pid "),
			  again = count_in(log, "anedvd: still waiting for slow (pid ");
		if (round == 0) {
			CHECK(exists(done), "waited for: it finished by itself");
			CHECK(took >= 8.5 && took < 13, "stop took %.2f s", took);
			CHECK(said == 1 && count_in(log, "it is testing 1 (Ctrl-C: stop waiting)") == 1, "the line");
			CHECK(again >= 1 && again <= 2, "%d lines again as it said more", again);
			CHECK(count_in(log, "killing it") == 0);
		} else {
			CHECK(!exists(done), "round %d: killed before it finished", round);
			CHECK(took >= 2.5 && took < 4.8, "round %d: stop took %.2f s", round, took);
			CHECK(said == (round == 2) && again == 0, "round %d: %d lines, %d again", round, said, again);
			CHECK(count_in(log, round == 2 ? "not waiting any longer: killing it"
			                               : "ignored SIGTERM: killing it") == 1,
			      "round %d: how it was killed", round);
		}
	}
	sup_clear_interrupt();
}

// the status file's line for name, "" if none
static void
status_line(struct sup *s, const char *name, char *line, size_t cap)
{
	char sf[1100];
	snprintf(sf, sizeof sf, "%s/status", sup_rundir(s));
	line[0] = 0;
	FILE *f = fopen(sf, "r");
	if (!f)
		return;
	while (fgets(line, (int)cap, f))
		if (!strncmp(line, name, strlen(name)) && line[strlen(name)] == ' ')
			break;
		else
			line[0] = 0;
	fclose(f);
}

// a health check no child passes
static int
never_ready(const char *url, int timeout_ms, char *err)
{
	(void)url;
	(void)timeout_ms;
	return ad_err(err, "not ready");
}

static void
test_backoff(void)
{
	char err[AD_ERRLEN];
	struct sup *s = sup_new(err);
	REQUIRE(s, "%s", err);
	// dies at once, again and again: 100, 200, 400, 800 ms ...
	const char *crasher[] = {"/bin/sh", "-c", "exit 3", NULL};
	struct sup_spec sp = {"crasher", crasher, NULL, NULL, 1, NULL};
	REQUIRE(sup_spawn(s, &sp, err) == 0, "%s", err);
	// five exits (about 1.6 s, more on a loaded machine): the status file
	// says how it ended and when
	char line[512], state[32], last[32], times[400];
	long spid;
	int rs, nt = 0;
	for (int i = 0; i < 1000 && nt < 5; i++) {
		sleep_ms(20);
		status_line(s, "crasher", line, sizeof line);
		nt = 0;
		if (sscanf(line, "crasher %ld %d %31s %31s %399s", &spid, &rs, state, last, times) == 5)
			for (char *c = times; *c; c++)
				nt += *c == ',';
		nt += nt || (times[0] >= '0' && times[0] <= '9');
	}
	CHECK(nt >= 5, "five exit times listed: '%s'", line);
	CHECK(sup_restarts(s, "crasher") >= 4, "restarted %d times", sup_restarts(s, "crasher"));
	// the back-off doubles: each exit comes at least 100, 200, 400, ... ms
	// after the one before (a lower bound, whatever the machine's load)
	long long t[8];
	int nts = 0;
	for (char *c = times; nts < 8 && *c;) {
		t[nts++] = strtoll(c, &c, 10);
		if (*c == ',')
			c++;
		else
			break;
	}
	for (int k = 0; k + 1 < nts; k++)
		CHECK(t[k + 1] - t[k] >= (100LL << k) - 2, "exit %d came %lld ms after the one before (back-off %lld)",
		      k + 1, t[k + 1] - t[k], 100LL << k);
	CHECK(!strcmp(last, "exit:3"), "last exit '%s'", last);
	CHECK(!strcmp(state, "up") || !strcmp(state, "restarting"), "state '%s'", state);
	long long t1 = atoll(times), now = (long long)time(NULL) * 1000;
	CHECK(t1 > now - 60000 && t1 <= now + 1000, "exit time %lld is wall-clock ms (now %lld)", t1, now);
	sup_free(s);

	// status 2 (a bad command line or setting) is not restarted, even when asked
	s = sup_new(err);
	REQUIRE(s, "%s", err);
	const char *usage[] = {"/bin/sh", "-c", "exit 2", NULL};
	struct sup_spec spu = {"usage", usage, NULL, NULL, 1, NULL};
	REQUIRE(sup_spawn(s, &spu, err) == 0, "%s", err);
	sleep_ms(600);
	CHECK(sup_restarts(s, "usage") == 0, "restarted %d times", sup_restarts(s, "usage"));
	CHECK(sup_wait_ready(s, "usage", 3000, err) == -1);
	CHECK(strstr(err, "status 2") != NULL, "%s", err);
	status_line(s, "usage", line, sizeof line);
	CHECK(strstr(line, " 0 0 stopped exit:2 ") != NULL, "status line '%s'", line);
	sup_free(s);

	// restarted but failing every time: readiness gives up once it loops
	// (5 exits in 30 s: about 1.6 s here), not at its timeout
	s = sup_new(err);
	REQUIRE(s, "%s", err);
	struct sup_spec spl = {"looper", crasher, "x", never_ready, 1, NULL};
	REQUIRE(sup_spawn(s, &spl, err) == 0, "%s", err);
	uint64_t w0 = (uint64_t)time(NULL);
	CHECK(sup_wait_ready(s, "looper", 60000, err) == -1);
	CHECK(strstr(err, "keeps exiting") && strstr(err, "status 3"), "%s", err);
	CHECK((uint64_t)time(NULL) - w0 < 20, "gave up after %llu s", (unsigned long long)((uint64_t)time(NULL) - w0));
	sup_free(s);

	// not restarted: readiness fails with the exit status
	s = sup_new(err);
	REQUIRE(s, "%s", err);
	struct sup_spec sp2 = {"once", crasher, NULL, NULL, 0, NULL};
	REQUIRE(sup_spawn(s, &sp2, err) == 0, "%s", err);
	sleep_ms(300); // without a health check, running is ready: let it exit first
	CHECK(sup_wait_ready(s, "once", 3000, err) == -1);
	CHECK(strstr(err, "status 3") != NULL, "%s", err);
	CHECK(sup_restarts(s, "once") == 0);
	// a missing binary
	const char *missing[] = {"/nonexistent/anedvd-x", NULL};
	struct sup_spec sp3 = {"missing", missing, NULL, NULL, 0, NULL};
	int rc = sup_spawn(s, &sp3, err);
	if (rc == 0 && (sleep_ms(300), 1)) // glibc may report exec failure as exit 127
		CHECK(sup_wait_ready(s, "missing", 3000, err) == -1);
	else
		CHECK(strstr(err, "cannot start") != NULL, "%s", err);
	sup_free(s);
}

static void
test_health_timeout(void)
{
	char err[AD_ERRLEN];
	struct sup *s = sup_new(err);
	REQUIRE(s, "%s", err);
	char url[1100];
	sup_url(s, "nothing", url, sizeof url);
	const char *sleeper[] = {"/bin/sleep", "100", NULL};
	struct sup_spec sp = {"deaf", sleeper, url, sup_health_ane, 1, NULL};
	REQUIRE(sup_spawn(s, &sp, err) == 0, "%s", err);
	CHECK(sup_wait_ready(s, "deaf", 600, err) == -1);
	CHECK(strstr(err, "did not become ready") != NULL, "%s", err);
#ifdef __linux__
	// and what the child was doing: one thread, asleep
	CHECK(strstr(err, " [1 thread: 1 S ") != NULL, "%s", err);
	// a process that is gone has no state
	pid_t gone = fork();
	if (gone == 0)
		_exit(0);
	REQUIRE(gone > 0);
	waitpid(gone, NULL, 0);
	char ps[256] = "x";
	sup_proc_state((long)gone, ps, sizeof ps);
	CHECK(ps[0] == 0, "a reaped child: '%s'", ps);
	// threads are counted, each state with where it waits
	sup_proc_state((long)getpid(), ps, sizeof ps);
	CHECK(strstr(ps, " thread") && strstr(ps, " R running"), "this process: '%s'", ps);
#endif
	sup_free(s);
}

// a worker that answers Health only after the supervisor's kept probe
// client has failed for a while (it is renewed then), and a wait that
// SIGINT ends, which names the child it waited for
static void
no_op(void *arg, struct ad_rpc_req *q)
{
	(void)arg;
	ad_rpc_fail(q, 0, "no call here");
}

struct late {
	const char *url;
	int after_ms;
	struct ad_server *srv;
	struct ad_rpc_server rpc;
};

static void *
late_listen(void *p)
{
	struct late *l = p;
	struct timespec ts = {l->after_ms / 1000, (long)(l->after_ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
	char err[AD_ERRLEN];
	ad_rpc_server_init(&l->rpc, &ad_rpc_engine, "late", no_op, NULL, 0, NULL);
	l->srv = ad_server_start(l->url, 1, ad_rpc_serve, &l->rpc, err);
	return NULL;
}

static void *
interrupt_later(void *p)
{
	(void)p;
	struct timespec ts = {0, 300 * 1000000L};
	nanosleep(&ts, NULL);
	kill(getpid(), SIGINT);
	return NULL;
}

static void
test_health_late(void)
{
	char err[AD_ERRLEN];
	struct sup *s = sup_new(err);
	REQUIRE(s, "%s", err);
	char url[1100];
	sup_url(s, "late", url, sizeof url);
	const char *sleeper[] = {"/bin/sleep", "100", NULL};
	struct sup_spec sp = {"late", sleeper, url, sup_health_engine, 1, NULL};
	REQUIRE(sup_spawn(s, &sp, err) == 0, "%s", err);
	struct late l = {url, 3500, NULL, {0}};
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, late_listen, &l) == 0);
	uint64_t t0 = ad_now_ns();
	CHECK(sup_wait_ready(s, "late", 20000, err) == 0, "%s", err);
	double ms = (ad_now_ns() - t0) / 1e6;
	pthread_join(th, NULL);
	CHECK(l.srv != NULL);
	CHECK(ms >= 3400 && ms < 10000, "ready after %.0f ms", ms);

	// SIGINT during a wait: the error names the child and the last answer
	sp = (struct sup_spec){"deaf", sleeper, url, sup_health_ane, 1, NULL};
	sup_url(s, "deaf", url, sizeof url);
	REQUIRE(sup_spawn(s, &sp, err) == 0, "%s", err);
	REQUIRE(pthread_create(&th, NULL, interrupt_later, NULL) == 0);
	CHECK(sup_wait_ready(s, "deaf", 20000, err) == -1);
	pthread_join(th, NULL);
	CHECK(strstr(err, "interrupted while waiting for deaf") != NULL, "%s", err);
	CHECK(sup_interrupted());
	sup_clear_interrupt();
	ad_server_stop(l.srv);
	sup_free(s);
}

// a child that answered Health and then stops answering while its process
// lives is killed and restarted after ANEDVD_HUNG_MS; one that never
// answered is left to its readiness wait
static void
test_hung(void)
{
	char err[AD_ERRLEN];
	setenv("ANEDVD_HUNG_MS", "1500", 1);
	struct sup *s = sup_new(err);
	unsetenv("ANEDVD_HUNG_MS");
	REQUIRE(s, "%s", err);
	char url[1100], url2[1100];
	sup_url(s, "hang", url, sizeof url);
	sup_url(s, "never", url2, sizeof url2);
	const char *sleeper[] = {"/bin/sleep", "100", NULL};
	struct sup_spec sp = {"hang", sleeper, url, sup_health_engine, 1, NULL};
	REQUIRE(sup_spawn(s, &sp, err) == 0, "%s", err);
	struct sup_spec sp2 = {"never", sleeper, url2, sup_health_ane, 1, NULL};
	REQUIRE(sup_spawn(s, &sp2, err) == 0, "%s", err);
	struct late l = {url, 0, NULL, {0}};
	late_listen(&l);
	REQUIRE(l.srv != NULL);
	CHECK(sup_wait_ready(s, "hang", 20000, err) == 0, "%s", err);
	sleep_ms(1200); // the watchdog's probes see it answer
	long pid0 = (long)sup_pid(s, "hang"), never0 = (long)sup_pid(s, "never");
	CHECK(sup_restarts(s, "hang") == 0);
	ad_server_stop(l.srv); // it stops answering; the process lives on
	double t0 = now_s();
	while (now_s() - t0 < 15 && (sup_restarts(s, "hang") < 1 || (long)sup_pid(s, "hang") <= 0))
		sleep_ms(50);
	double took = now_s() - t0;
	CHECK(sup_restarts(s, "hang") == 1, "restarts %d after %.1f s", sup_restarts(s, "hang"), took);
	CHECK(took >= 1.4, "killed %.1f s after it stopped answering", took);
	CHECK(!alive(pid0), "the hung process %ld still lives", pid0);
	CHECK((long)sup_pid(s, "hang") != pid0);
	// never answered: not the watchdog's to kill
	CHECK((long)sup_pid(s, "never") == never0 && sup_restarts(s, "never") == 0);
	sup_free(s);
}

static void
test_stale(void)
{
	// a dead pid: a child that has been reaped
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	const char *base = getenv("XDG_RUNTIME_DIR");
	char dir[1024], file[1100];
	snprintf(dir, sizeof dir, "%s/anedvd-%ld", base, (long)p);
	REQUIRE(mkdir(dir, 0700) == 0);
	snprintf(file, sizeof file, "%s/status", dir);
	FILE *f = fopen(file, "w");
	REQUIRE(f);
	fputs("x 1 0\n", f);
	fclose(f);
	// a live pid's directory stays
	char live[1024];
	snprintf(live, sizeof live, "%s/anedvd-%ld", base, (long)getppid());
	mkdir(live, 0700);
	char err[AD_ERRLEN];
	struct sup *s = sup_new(err);
	REQUIRE(s, "%s", err);
	CHECK(!exists(dir), "stale runtime dir removed");
	CHECK(exists(live), "a live instance's dir is kept");
	rmdir(live);
	sup_free(s);
}

// a runtime directory another user could reach is refused; without
// XDG_RUNTIME_DIR the directory is a fresh mkdtemp one, not anedvd-<pid>
static void
test_rundir(void)
{
	const char *base = getenv("XDG_RUNTIME_DIR");
	char err[AD_ERRLEN], d[1024];
	struct sup *s;

	// XDG_RUNTIME_DIR open to group and others
	snprintf(d, sizeof d, "%s/open", base);
	REQUIRE(mkdir(d, 0700) == 0 && chmod(d, 0777) == 0);
	setenv("XDG_RUNTIME_DIR", d, 1);
	err[0] = 0;
	CHECK(!(s = sup_new(err)), "an XDG_RUNTIME_DIR of mode 777 is refused");
	sup_free(s);
	CHECK(strstr(err, "XDG_RUNTIME_DIR") && strstr(err, "777"), "%s", err);
	setenv("XDG_RUNTIME_DIR", base, 1);

	// a pre-made anedvd-<pid> of mode 777 (someone else could have made it)
	snprintf(d, sizeof d, "%s/anedvd-%ld", base, (long)getpid());
	REQUIRE(mkdir(d, 0700) == 0 && chmod(d, 0777) == 0);
	err[0] = 0;
	CHECK(!(s = sup_new(err)), "a runtime dir of mode 777 is refused");
	sup_free(s);
	CHECK(strstr(err, d) && strstr(err, "mode 777") && strstr(err, "refused"), "%s", err);
	CHECK(exists(d), "the refused directory is left alone");
	rmdir(d);
	// a symlink in its place
	REQUIRE(symlink(base, d) == 0);
	CHECK(!(s = sup_new(err)), "a symlink as runtime dir is refused");
	sup_free(s);
	CHECK(strstr(err, "not a directory"), "%s", err);
	unlink(d);

	// owned by another user (needs root to make one)
	if (getuid() == 0) {
		REQUIRE(mkdir(d, 0700) == 0 && chown(d, 65534, 65534) == 0);
		err[0] = 0;
		CHECK(!(s = sup_new(err)), "a runtime dir owned by uid 65534 is refused");
		sup_free(s);
		CHECK(strstr(err, "uid 65534") && strstr(err, "refused"), "%s", err);
		rmdir(d);
		snprintf(d, sizeof d, "%s/foreign", base);
		REQUIRE(mkdir(d, 0700) == 0 && chown(d, 65534, 65534) == 0);
		setenv("XDG_RUNTIME_DIR", d, 1);
		CHECK(!(s = sup_new(err)), "an XDG_RUNTIME_DIR owned by uid 65534 is refused");
		sup_free(s);
		CHECK(strstr(err, "XDG_RUNTIME_DIR") && strstr(err, "uid 65534"), "%s", err);
		setenv("XDG_RUNTIME_DIR", base, 1);
		rmdir(d);
	} else {
		printf("# not root: the foreign-owner cases are skipped\n");
	}

	// no XDG_RUNTIME_DIR: a mkdtemp directory under TMPDIR
	char tmp[900], want[1000];
	snprintf(tmp, sizeof tmp, "%s/tmp", base);
	REQUIRE(mkdir(tmp, 0700) == 0);
	const char *old_tmp = getenv("TMPDIR");
	char *saved = old_tmp ? strdup(old_tmp) : NULL;
	setenv("TMPDIR", tmp, 1);
	unsetenv("XDG_RUNTIME_DIR");
	snprintf(want, sizeof want, "%s/anedvd-%ld", tmp, (long)getpid());
	REQUIRE(mkdir(want, 0777) == 0 && chmod(want, 0777) == 0); // the guessable name, pre-made
	s = sup_new(err);
	REQUIRE(s, "%s", err);
	const char *rd = sup_rundir(s);
	snprintf(d, sizeof d, "%s", rd);
	snprintf(want, sizeof want, "%s/anedvd-%ld-", tmp, (long)getpid());
	CHECK(strncmp(rd, want, strlen(want)) == 0 && strlen(rd) == strlen(want) + 6, "runtime dir %s", rd);
	struct stat st;
	CHECK(lstat(rd, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700 && st.st_uid == getuid(),
	      "mode %o", st.st_mode & 0777);
	sup_free(s);
	CHECK(!exists(d), "the mkdtemp directory is removed at the end");
	snprintf(want, sizeof want, "%s/anedvd-%ld", tmp, (long)getpid());
	CHECK(exists(want), "the pre-made guessable directory was not used or touched");
	rmdir(want);
	// a dead instance's mkdtemp directory is cleaned up
	pid_t p = fork();
	if (p == 0)
		_exit(0);
	waitpid(p, NULL, 0);
	snprintf(d, sizeof d, "%s/anedvd-%ld-AbC123", tmp, (long)p);
	REQUIRE(mkdir(d, 0700) == 0);
	s = sup_new(err);
	REQUIRE(s, "%s", err);
	CHECK(!exists(d), "stale mkdtemp runtime dir removed");
	sup_free(s);
	rmdir(tmp);
	if (saved)
		setenv("TMPDIR", saved, 1);
	else
		unsetenv("TMPDIR");
	free(saved);
	setenv("XDG_RUNTIME_DIR", base, 1);
}

static void
test_binary(void)
{
	char b[1024];
	CHECK(sup_binary(b, sizeof b, "no-such-anedvd-binary") == -1);
	setenv("ANEDVD_BIN_DIR", "/bin", 1);
	// sup_bindir caches its first answer: only check the format
	CHECK(strchr(b, '/') != NULL);
}

// a worker writes its events at exit under ANEDVD_TRACE; the CLI merges
// them with its own into one valid JSON array
static void
test_trace(void)
{
	char prefix[1024], out[1100];
	snprintf(prefix, sizeof prefix, "%s/tr", t_tmpdir());
	snprintf(out, sizeof out, "%s/all.json", t_tmpdir());
	pid_t p = fork();
	if (p == 0) {
		setenv("ANEDVD_TRACE", prefix, 1);
		if (trace_from_env("worker \"w\"") != 1)
			_exit(3);
		trace_event((long)getpid(), 1, "kernel \\ x", "kernel", trace_now_us(), 5);
		exit(0); // atexit writes the file
	}
	int st;
	waitpid(p, &st, 0);
	REQUIRE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	unsetenv("ANEDVD_TRACE");
	CHECK(trace_from_env("x") == 0, "off without the variable");
	trace_enable();
	trace_process((long)getpid(), "cli");
	trace_event((long)getpid(), 1, "decode step", "engine", trace_now_us(), 10);
	char err[AD_ERRLEN];
	REQUIRE(trace_write(out, prefix, err) == 0, "%s", err);
	FILE *f = fopen(out, "rb");
	REQUIRE(f);
	static char buf[1 << 16];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	cJSON *j = cJSON_Parse(buf);
	REQUIRE(j && cJSON_IsArray(j), "not a JSON array: %s", buf);
	int x = 0, m = 0, worker = 0;
	cJSON *e;
	cJSON_ArrayForEach(e, j)
	{
		const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
		x += ph && !strcmp(ph, "X");
		m += ph && !strcmp(ph, "M");
		cJSON *pid = cJSON_GetObjectItem(e, "pid");
		worker += pid && (long)pid->valuedouble == (long)p;
	}
	CHECK(x == 2 && m == 2 && worker == 2, "X %d, M %d, worker's %d", x, m, worker);
	cJSON_Delete(j);
	// the worker's file goes once merged; the merged output stays
	char part[1200];
	snprintf(part, sizeof part, "%s.%ld.json", prefix, (long)p);
	CHECK(access(part, F_OK) == 0, "%s", part);
	trace_remove_parts(prefix);
	CHECK(access(part, F_OK) != 0, "%s not removed", part);
	CHECK(access(out, F_OK) == 0);
	CHECK(trace_write("/nonexistent/dir/t.json", NULL, err) == -1);
	trace_reset();
}

int
main(void)
{
	// a private runtime base, so other instances on the machine are not touched
	const char *tmp = t_tmpdir();
	setenv("XDG_RUNTIME_DIR", tmp, 1);
	T_RUN(test_lifecycle);
	T_RUN(test_backoff);
	T_RUN(test_health_timeout);
	T_RUN(test_health_late);
	T_RUN(test_hung);
	T_RUN(test_finishing);
	T_RUN(test_stale);
	T_RUN(test_rundir);
	T_RUN(test_binary);
	T_RUN(test_trace);
	return t_done();
}
