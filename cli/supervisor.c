// supervisor.c - see supervisor.h.
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "ane.pb-c.h"
#include "rpc.h"
#include "client-tokenizer.h"
#include "clock.h"
#include "common.pb-c.h"
#include "engine.pb-c.h"
#include "ipc.h"
#include "log.h"
#include "supervisor.h"
#include "surface.h"

extern char **environ;

#define SUP_MAX 8
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define STABLE_MS 10000
#define STOP_WAIT_MS 3000
// a stopping child that says it is finishing work of its own (sup_spec
// finishing) is asked again this often, and waited for at most this long
#define FINISH_ASK_MS 1000
#define FINISH_WAIT_MS 600000
// what it says it is doing is printed again when it changes, at most this often
#define FINISH_SAY_MS 5000
#define SUP_RECENT 8         // exit times kept per child for the status file
#define LOOP_N 5             // this many exits ...
#define LOOP_WINDOW_MS 30000 // ... within this long: crash-looping
// A child that has answered Health and then stops answering for this long
// while its process lives is hung: it is killed, and restarted as after a
// crash (ANEDVD_HUNG_MS; 0: never). Its control plane can wedge where no
// timeout of ours reaches (an nng poller thread seen spinning on hung-up
// connections, every call to the worker then unanswered).
#define HUNG_MS 30000
#define WATCH_EVERY_MS 1000

struct child {
	char name[32];
	char **argv;
	char url[512];
	sup_health_fn health;
	sup_finishing_fn finishing;
	uint64_t finish_until; // at a stop: waited for until then (finishing work of its own), 0: not
	char finish_said[160]; // what it last said it was doing, as printed
	uint64_t finish_said_ms;
	int restart;
	pid_t pid; // 0 while down
	int restarts;
	int exited; // down and not to be restarted
	int last_status;
	uint64_t started_ms, next_start_ms;
	int backoff_ms;
	// the last exits (wall clock, ms since the epoch: the status file's
	// readers are other processes) and how the last one ended
	long long exits_ms[SUP_RECENT];
	int n_exits;
	char last_exit[32];
	int looping;    // warned about a crash loop
	uint64_t ok_ms; // its last answer to Health (0: none from this process yet)
	int hung_kills; // killed for not answering
};

struct sup {
	char rundir[PATH_MAX];
	struct child c[SUP_MAX];
	int n;
	char **envp;
	char *extra_env[8];
	int n_extra;
	pthread_mutex_t mu;
	pthread_t mon, watch;
	int mon_running, watch_running;
	int hung_ms;
	atomic_int stop;
};

static volatile sig_atomic_t interrupted;
static char trampoline[PATH_MAX];

void
sup_set_trampoline(const char *path)
{
	snprintf(trampoline, sizeof trampoline, "%s", path ? path : "");
}

int
sup_child_main(int argc, char **argv)
{
	// argv: <self> __child <ppid> <path> <args...>
	if (argc < 4)
		_exit(127);
#ifdef __linux__
	// SIGKILL: a worker waiting on a dead peer must not outlive us; what it
	// leaves (shm, the runtime dir) the next start removes
	prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
	if ((long)getppid() != atol(argv[2]))
		_exit(1); // the parent is already gone
	execv(argv[3], argv + 3);
	fprintf(stderr, "anedvd: cannot start %s: %s\n", argv[3], strerror(errno));
	_exit(127);
}

static void
on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

int
sup_interrupted(void)
{
	return interrupted != 0;
}

void
sup_clear_interrupt(void)
{
	interrupted = 0;
}

static uint64_t
now_ms(void)
{
	return ad_now_ns() / 1000000u;
}

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

// the base of the runtime directory: $XDG_RUNTIME_DIR when it is set and
// exists, else NULL (a fresh mkdtemp directory in the temporary directory).
// A base another user owns, or one that group or others may enter, is
// refused: whoever can write there can swap the sockets.
static int
runtime_base(const char **out, char *err)
{
	*out = NULL;
	const char *x = getenv("XDG_RUNTIME_DIR");
	struct stat st;
	if (!x || !*x || stat(x, &st) != 0)
		return 0;
	if (!S_ISDIR(st.st_mode))
		return ad_err(err, "XDG_RUNTIME_DIR=%s is not a directory", x);
	if (st.st_uid != getuid())
		return ad_err(err, "XDG_RUNTIME_DIR=%s belongs to uid %ld, not to this user (uid %ld): refused", x,
		              (long)st.st_uid, (long)getuid());
	if (st.st_mode & 077)
		return ad_err(err, "XDG_RUNTIME_DIR=%s has mode %03o: group and others must have no access (chmod 700)",
		              x, (unsigned)(st.st_mode & 0777));
	*out = x;
	return 0;
}

static const char *
tmp_base(void)
{
	const char *t = getenv("TMPDIR");
	return t && *t ? t : "/tmp";
}

// a runtime directory must be ours and closed to everyone else (lstat: a
// symlink planted in its place is refused too)
static int
check_rundir(const char *dir, char *err)
{
	struct stat st;
	if (lstat(dir, &st) != 0)
		return ad_err(err, "the runtime directory %s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return ad_err(err, "the runtime directory %s exists and is not a directory: refused", dir);
	if (st.st_uid != getuid())
		return ad_err(err, "the runtime directory %s belongs to uid %ld, not to this user (uid %ld): refused",
		              dir, (long)st.st_uid, (long)getuid());
	if (st.st_mode & 077)
		return ad_err(err,
		              "the runtime directory %s has mode %03o: group and others must have no access: refused",
		              dir, (unsigned)(st.st_mode & 0777));
	return 0;
}

// remove the files in dir (sockets, status) and dir itself
static void
remove_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *de;
		char p[PATH_MAX + 256];
		while ((de = readdir(d))) {
			if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
				continue;
			snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(dir);
}

// runtime directories of instances whose pid is gone
static int
cleanup_stale_dirs(const char *base)
{
	DIR *d = opendir(base);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "anedvd-", 7) != 0)
			continue;
		// anedvd-<pid> under XDG_RUNTIME_DIR, anedvd-<pid>-XXXXXX (mkdtemp) elsewhere
		char *end;
		long pid = strtol(de->d_name + 7, &end, 10);
		if ((*end && *end != '-') || pid <= 0 || pid == (long)getpid())
			continue;
		if (kill((pid_t)pid, 0) == 0 || errno == EPERM)
			continue;
		char p[PATH_MAX];
		snprintf(p, sizeof p, "%s/%s", base, de->d_name);
		struct stat st;
		if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid())
			continue;
		remove_dir(p);
		n++;
	}
	closedir(d);
	return n;
}

static char **
make_env(void)
{
	int n = 0, has_log = 0;
	while (environ[n]) {
		if (!strncmp(environ[n], "ANEDVD_LOG=", 11))
			has_log = 1;
		n++;
	}
	char **e = calloc((size_t)n + 2, sizeof *e);
	if (!e)
		return NULL;
	for (int i = 0; i < n; i++)
		e[i] = environ[i];
	if (!has_log)
		e[n++] = "ANEDVD_LOG=warn";
	e[n] = NULL;
	return e;
}

struct sup *
sup_new(char *err)
{
	struct sup *s = calloc(1, sizeof *s);
	if (!s)
		return ad_err(err, "out of memory"), NULL;
	pthread_mutex_init(&s->mu, NULL);
	s->hung_ms = HUNG_MS;
	const char *hm = getenv("ANEDVD_HUNG_MS");
	if (hm && *hm) {
		char *end;
		long v = strtol(hm, &end, 10);
		if (!*end && v >= 0 && v <= 86400000)
			s->hung_ms = (int)v;
		else
			ad_warn("ANEDVD_HUNG_MS=%s: expected milliseconds, 0 to 86400000; using %d", hm, HUNG_MS);
	}
	const char *base;
	if (runtime_base(&base, err) != 0) {
		free(s);
		return NULL;
	}
	int dirs = cleanup_stale_dirs(base ? base : tmp_base());
	int shm = surface_cleanup_stale();
	if (dirs || shm > 0)
		ad_info("removed what dead instances left: %d runtime dirs, %d shared-memory objects", dirs,
		        shm > 0 ? shm : 0);
	if (base) {
		// a per-user directory only we can write to: the pid names it
		snprintf(s->rundir, sizeof s->rundir, "%s/anedvd-%ld", base, (long)getpid());
		if (mkdir(s->rundir, 0700) != 0 && errno != EEXIST) {
			ad_err(err, "cannot create the runtime directory %s: %s", s->rundir, strerror(errno));
			free(s);
			return NULL;
		}
	} else {
		// a shared temporary directory: never a name another user could make first
		snprintf(s->rundir, sizeof s->rundir, "%s/anedvd-%ld-XXXXXX", tmp_base(), (long)getpid());
		if (!mkdtemp(s->rundir)) {
			ad_err(err, "cannot create a runtime directory in %s: %s", tmp_base(), strerror(errno));
			free(s);
			return NULL;
		}
	}
	if (check_rundir(s->rundir, err) != 0) {
		free(s);
		return NULL;
	}
	s->envp = make_env();
	if (!s->envp) {
		rmdir(s->rundir);
		free(s);
		return ad_err(err, "out of memory"), NULL;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0; // no SA_RESTART: a blocking read returns EINTR
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return s;
}

const char *
sup_rundir(const struct sup *s)
{
	return s->rundir;
}

int
sup_url(const struct sup *s, const char *name, char *buf, size_t cap)
{
	return ad_ipc_url(buf, cap, s->rundir, name);
}

// status file: written whole and renamed in, so a reader never sees half
static void
write_status(struct sup *s)
{
	char tmp[PATH_MAX + 16], fin[PATH_MAX + 16];
	snprintf(tmp, sizeof tmp, "%s/status.tmp", s->rundir);
	snprintf(fin, sizeof fin, "%s/status", s->rundir);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	// name pid restarts state last-exit exit-times (see supervisor.h)
	for (int i = 0; i < s->n; i++) {
		const struct child *c = &s->c[i];
		const char *state = c->pid > 0 ? "up" : c->exited ? "stopped" : "restarting";
		fprintf(f, "%s %ld %d %s %s ", c->name, (long)c->pid, c->restarts, state,
		        c->last_exit[0] ? c->last_exit : "-");
		int n = c->n_exits < SUP_RECENT ? c->n_exits : SUP_RECENT;
		for (int k = 0; k < n; k++)
			fprintf(f, "%s%lld", k ? "," : "", c->exits_ms[(c->n_exits - n + k) % SUP_RECENT]);
		fprintf(f, "%s\n", n ? "" : "-");
	}
	if (fclose(f) == 0)
		rename(tmp, fin);
}

static int
spawn_child(struct sup *s, struct child *c, char *err)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, 2, 1);
	posix_spawnattr_init(&at);
	sigset_t def;
	sigemptyset(&def);
	sigaddset(&def, SIGINT);
	sigaddset(&def, SIGTERM);
	sigaddset(&def, SIGPIPE);
	sigset_t none;
	sigemptyset(&none);
	posix_spawnattr_setsigdefault(&at, &def);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setpgroup(&at, 0);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
	pid_t pid;
	int rc;
	// the children's sockets and files are for this user only: they inherit
	// the mask (the CLI's own files keep the caller's)
	mode_t mask = umask(077);
	if (trampoline[0]) {
		int n = 0;
		while (c->argv[n])
			n++;
		char **av = calloc((size_t)n + 4, sizeof *av);
		char ppid[32];
		snprintf(ppid, sizeof ppid, "%ld", (long)getpid());
		if (!av) {
			rc = ENOMEM;
		} else {
			av[0] = trampoline;
			av[1] = "__child";
			av[2] = ppid;
			for (int i = 0; i < n; i++)
				av[3 + i] = c->argv[i];
			rc = posix_spawn(&pid, trampoline, &fa, &at, av, s->envp);
			free(av);
		}
	} else {
		rc = posix_spawn(&pid, c->argv[0], &fa, &at, c->argv, s->envp);
	}
	umask(mask);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	if (rc != 0)
		return ad_err(err, "cannot start %s (%s): %s", c->name, c->argv[0], strerror(rc));
	c->pid = pid;
	c->started_ms = now_ms();
	c->ok_ms = 0;
	ad_debug("started %s, pid %ld", c->name, (long)pid);
	return 0;
}

// one pass of the monitor: reap, schedule and perform restarts
static void
monitor_once(struct sup *s)
{
	pthread_mutex_lock(&s->mu);
	int changed = 0;
	uint64_t t = now_ms();
	for (int i = 0; i < s->n; i++) {
		struct child *c = &s->c[i];
		if (c->pid > 0) {
			int st;
			pid_t r = waitpid(c->pid, &st, WNOHANG);
			if (r != c->pid)
				continue;
			c->last_status = st;
			if (WIFSIGNALED(st)) {
				ad_warn("%s (pid %ld) was killed by signal %d", c->name, (long)c->pid, WTERMSIG(st));
				snprintf(c->last_exit, sizeof c->last_exit, "signal:%d", WTERMSIG(st));
			} else {
				ad_warn("%s (pid %ld) exited with status %d", c->name, (long)c->pid, WEXITSTATUS(st));
				snprintf(c->last_exit, sizeof c->last_exit, "exit:%d", WEXITSTATUS(st));
			}
			struct timespec wall;
			clock_gettime(CLOCK_REALTIME, &wall);
			long long wms = (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
			c->exits_ms[c->n_exits++ % SUP_RECENT] = wms;
			if (c->n_exits >= LOOP_N &&
			    wms - c->exits_ms[(c->n_exits - LOOP_N) % SUP_RECENT] <= LOOP_WINDOW_MS) {
				if (!c->looping)
					ad_warn("%s is crash-looping: %d exits within %d s (back-off capped at %d ms)",
					        c->name, LOOP_N, LOOP_WINDOW_MS / 1000, BACKOFF_MAX_MS);
				c->looping = 1;
			} else {
				c->looping = 0;
			}
			if (t - c->started_ms >= STABLE_MS)
				c->backoff_ms = BACKOFF_MIN_MS;
			// shared memory the dead child created under its own pid
			surface_cleanup_pid((long)c->pid);
			c->pid = 0;
			changed = 1;
			// status 2 is every anedvd program's answer to a bad command
			// line or setting: a restart would fail the same way
			if (!c->restart || atomic_load(&s->stop) || (WIFEXITED(st) && WEXITSTATUS(st) == 2)) {
				c->exited = 1;
				continue;
			}
			c->next_start_ms = t + (uint64_t)c->backoff_ms;
			ad_warn("restarting %s in %d ms", c->name, c->backoff_ms);
			c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
		} else if (!c->exited && c->restart && !atomic_load(&s->stop) && t >= c->next_start_ms) {
			char e[AD_ERRLEN];
			if (spawn_child(s, c, e) == 0) {
				c->restarts++;
				changed = 1;
			} else {
				ad_error("%s", e);
				c->next_start_ms = t + (uint64_t)c->backoff_ms;
			}
		}
	}
	if (changed)
		write_status(s);
	pthread_mutex_unlock(&s->mu);
}

// signals are the main thread's business: the supervisor's threads block them
static void
block_stop_signals(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void *
monitor(void *arg)
{
	struct sup *s = arg;
	block_stop_signals();
	ad_thread_name("supervisor");
	while (!atomic_load(&s->stop)) {
		monitor_once(s);
		sleep_ms(20);
	}
	return NULL;
}

static void probe_drop(const char *url);

// the watchdog: each running child's Health once a second (outside the
// lock: a probe may take its whole timeout); a child that answered before
// and has not for hung_ms is killed, and the monitor restarts it
static void *
watch(void *arg)
{
	struct sup *s = arg;
	block_stop_signals();
	ad_thread_name("watchdog");
	while (!atomic_load(&s->stop)) {
		for (int i = 0; i < SUP_MAX && !atomic_load(&s->stop); i++) {
			pthread_mutex_lock(&s->mu);
			struct child *c = i < s->n ? &s->c[i] : NULL;
			pid_t pid = c ? c->pid : 0;
			sup_health_fn h = c ? c->health : NULL;
			char url[512], name[32];
			snprintf(url, sizeof url, "%s", c ? c->url : "");
			snprintf(name, sizeof name, "%s", c ? c->name : "");
			pthread_mutex_unlock(&s->mu);
			if (pid <= 0 || !h)
				continue;
			char e[AD_ERRLEN];
			int ok = h(url, 1000, e) == 0, answered = 0;
			uint64_t t = now_ms();
			pthread_mutex_lock(&s->mu);
			if (c->pid == pid) { // the same process still
				answered = c->ok_ms != 0;
				if (ok)
					c->ok_ms = t;
				else if (c->ok_ms && t - c->ok_ms >= (uint64_t)s->hung_ms) {
					ad_warn("%s (pid %ld) has not answered for %.0f s (%s): killing it to restart it",
					        name, (long)pid, (t - c->ok_ms) / 1e3, e);
					c->ok_ms = 0;
					c->hung_kills++;
					if (kill(-pid, SIGKILL) != 0)
						kill(pid, SIGKILL);
				}
			}
			pthread_mutex_unlock(&s->mu);
			// the kept probe client may be the one at fault; not while the
			// child has yet to answer (the readiness wait renews it then, and
			// a new connection a second would pile up on a long compile)
			if (!ok && answered)
				probe_drop(url);
		}
		for (int k = 0; k < WATCH_EVERY_MS / 20 && !atomic_load(&s->stop); k++)
			sleep_ms(20);
	}
	return NULL;
}

static struct child *
find(struct sup *s, const char *name)
{
	for (int i = 0; i < s->n; i++)
		if (!strcmp(s->c[i].name, name))
			return &s->c[i];
	return NULL;
}

int
sup_spawn(struct sup *s, const struct sup_spec *spec, char *err)
{
	if (s->n == SUP_MAX)
		return ad_err(err, "too many child processes");
	if (!spec->name || strlen(spec->name) >= sizeof s->c[0].name || find(s, spec->name))
		return ad_err(err, "bad or duplicate child name");
	struct child *c = &s->c[s->n];
	memset(c, 0, sizeof *c);
	snprintf(c->name, sizeof c->name, "%s", spec->name);
	if (spec->url)
		snprintf(c->url, sizeof c->url, "%s", spec->url);
	c->health = spec->health;
	c->finishing = spec->finishing;
	c->restart = spec->restart;
	c->backoff_ms = BACKOFF_MIN_MS;
	int n = 0;
	while (spec->argv[n])
		n++;
	c->argv = calloc((size_t)n + 1, sizeof *c->argv);
	if (!c->argv)
		return ad_err(err, "out of memory");
	for (int i = 0; i < n; i++)
		if (!(c->argv[i] = strdup(spec->argv[i])))
			return ad_err(err, "out of memory");
	pthread_mutex_lock(&s->mu);
	int rc = spawn_child(s, c, err);
	if (rc == 0) {
		s->n++;
		write_status(s);
	} else {
		for (int i = 0; i < n; i++)
			free(c->argv[i]);
		free(c->argv);
		c->argv = NULL;
	}
	pthread_mutex_unlock(&s->mu);
	if (rc == 0 && !s->mon_running) {
		if (pthread_create(&s->mon, NULL, monitor, s) != 0)
			return ad_err(err, "cannot start the monitor thread");
		s->mon_running = 1;
	}
	if (rc == 0 && !s->watch_running && s->hung_ms > 0) {
		if (pthread_create(&s->watch, NULL, watch, s) != 0)
			return ad_err(err, "cannot start the watchdog thread");
		s->watch_running = 1;
	}
	return rc;
}

int
sup_setenv(struct sup *s, const char *kv, char *err)
{
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv)
		return ad_err(err, "sup_setenv: '%s' is not NAME=value", kv);
	if (s->n_extra == (int)(sizeof s->extra_env / sizeof s->extra_env[0]))
		return ad_err(err, "sup_setenv: too many variables");
	int n = 0;
	while (s->envp[n])
		n++;
	char **e = realloc(s->envp, ((size_t)n + 2) * sizeof *e);
	char *copy = strdup(kv);
	if (!e || !copy) {
		free(copy);
		if (e)
			s->envp = e;
		return ad_err(err, "out of memory");
	}
	s->envp = e;
	// replace a variable of the same name, or append
	size_t len = (size_t)(eq - kv) + 1;
	int i;
	for (i = 0; i < n; i++)
		if (!strncmp(e[i], kv, len))
			break;
	e[i] = copy;
	if (i == n)
		e[n + 1] = NULL;
	s->extra_env[s->n_extra++] = copy;
	return 0;
}

long
sup_pid(struct sup *s, const char *name)
{
	pthread_mutex_lock(&s->mu);
	struct child *c = find(s, name);
	long pid = c ? (long)c->pid : -1;
	pthread_mutex_unlock(&s->mu);
	return pid;
}

int
sup_restarts(struct sup *s, const char *name)
{
	pthread_mutex_lock(&s->mu);
	struct child *c = find(s, name);
	int r = c ? c->restarts : -1;
	pthread_mutex_unlock(&s->mu);
	return r;
}

void
sup_no_restart(struct sup *s, const char *name)
{
	pthread_mutex_lock(&s->mu);
	struct child *c = find(s, name);
	if (c)
		c->restart = 0;
	pthread_mutex_unlock(&s->mu);
}

#define PROBE_RENEW_MS 3000

// the first line of a small /proc file, without its newline; "" if none
static void
read_line(const char *path, char *buf, size_t cap)
{
	buf[0] = 0;
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	if (!fgets(buf, (int)cap, f))
		buf[0] = 0;
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
}

void
sup_proc_state(long pid, char *buf, size_t cap)
{
	enum { KINDS = 8 };
	struct {
		char state, wchan[64];
		int n;
	} k[KINDS];
	int nk = 0, threads = 0, other = 0;
	char path[96], line[512];
	buf[0] = 0;
	snprintf(path, sizeof path, "/proc/%ld/task", pid);
	DIR *d = opendir(path);
	if (!d)
		return;
	for (struct dirent *de; (de = readdir(d));) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		char state = '?', wchan[64];
		snprintf(path, sizeof path, "/proc/%ld/task/%.20s/stat", pid, de->d_name);
		read_line(path, line, sizeof line);
		const char *rp = strrchr(line, ')'); // after the command, which may hold spaces
		if (rp && rp[1] == ' ' && rp[2])
			state = rp[2];
		snprintf(path, sizeof path, "/proc/%ld/task/%.20s/wchan", pid, de->d_name);
		read_line(path, wchan, sizeof wchan);
		if (!wchan[0] || !strcmp(wchan, "0"))
			snprintf(wchan, sizeof wchan, "%s", state == 'R' ? "running" : "-");
		threads++;
		int i = 0;
		while (i < nk && (k[i].state != state || strcmp(k[i].wchan, wchan)))
			i++;
		if (i == nk && nk < KINDS) {
			k[nk].state = state;
			snprintf(k[nk].wchan, sizeof k[nk].wchan, "%s", wchan);
			k[nk++].n = 0;
		}
		if (i < nk)
			k[i].n++;
		else
			other++;
	}
	closedir(d);
	if (!threads)
		return;
	size_t o = (size_t)snprintf(buf, cap, "%d thread%s:", threads, threads == 1 ? "" : "s");
	for (int i = 0; i < nk && o < cap; i++)
		o += (size_t)snprintf(buf + o, cap - o, "%s %d %c %s", i ? "," : "", k[i].n, k[i].state, k[i].wchan);
	if (other && o < cap)
		snprintf(buf + o, cap - o, ", %d more", other);
}

int
sup_wait_ready(struct sup *s, const char *name, int timeout_ms, char *err)
{
	uint64_t t0 = now_ms(), t_renew = t0, t_said = 0;
	int starting = -1; // the last probe: 1 the child answers that it is still starting
	char last[AD_ERRLEN] = "no answer";
	for (;;) {
		pthread_mutex_lock(&s->mu);
		struct child *c = find(s, name);
		int exited = c ? c->exited : 1, status = c ? c->last_status : 0, looping = c ? c->looping : 0;
		pid_t pid = c ? c->pid : 0;
		sup_health_fn h = c ? c->health : NULL;
		char url[512];
		snprintf(url, sizeof url, "%s", c ? c->url : "");
		pthread_mutex_unlock(&s->mu);
		if (!c)
			return ad_err(err, "no child named %s", name);
		if (exited) {
			if (WIFSIGNALED(status))
				return ad_err(err, "%s was killed by signal %d before it was ready", name,
				              WTERMSIG(status));
			return ad_err(err, "%s exited with status %d before it was ready (see its message above)", name,
			              WEXITSTATUS(status));
		}
		// restarted, but it keeps failing the same way: waiting the rest of
		// the timeout (ten minutes for a compile) helps nobody
		if (looping) {
			if (WIFSIGNALED(status))
				return ad_err(
					err,
					"%s keeps dying before it is ready (%d exits within %d s, the last by signal %d)",
					name, LOOP_N, LOOP_WINDOW_MS / 1000, WTERMSIG(status));
			return ad_err(
				err,
				"%s keeps exiting before it is ready (%d exits within %d s, the last with status %d: see "
				"its message above)",
				name, LOOP_N, LOOP_WINDOW_MS / 1000, WEXITSTATUS(status));
		}
		if (sup_interrupted())
			return ad_err(err, "interrupted while waiting for %s to be ready (%s)", name, last);
		if (pid > 0) {
			if (!h)
				return 0;
			if ((starting = h(url, 500, last)) == 0)
				return 0;
			// a live child that has not answered for a while: the kept
			// probe client may be the one at fault, so the next probe
			// dials afresh
			if (now_ms() - t_renew > PROBE_RENEW_MS) {
				probe_drop(url);
				t_renew = now_ms();
			}
		}
		uint64_t waited = now_ms() - t0;
		if (waited > (uint64_t)timeout_ms) {
			char ps[384] = "";
			if (pid > 0)
				sup_proc_state((long)pid, ps, sizeof ps);
			return ad_err(err, "%s did not become ready within %d ms: %s%s%s%s", name, timeout_ms, last,
			              ps[0] ? " [" : "", ps, ps[0] ? "]" : "");
		}
		if (waited > t_said + 10000) {
			// a warning from 30 s on: a compile may take that long, a
			// worker that never answers should be seen (one that answers
			// with its progress is only slow)
			t_said = waited;
			char ps[384] = "";
			if (pid > 0) // what it is doing: a hung start shows where it waits
				sup_proc_state((long)pid, ps, sizeof ps);
			ad_log(waited >= 30000 && starting != 1 ? AD_LOG_WARN : AD_LOG_INFO,
			       "still waiting for %s (pid %ld, %.0f s): %s%s%s%s", name, (long)pid, waited / 1e3, last,
			       ps[0] ? " [" : "", ps, ps[0] ? "]" : "");
		}
		sleep_ms(20);
	}
}

static void sup_probes_close(void);

void
sup_free(struct sup *s)
{
	if (!s)
		return;
	atomic_store(&s->stop, 1);
	if (s->mon_running)
		pthread_join(s->mon, NULL);
	if (s->watch_running)
		pthread_join(s->watch, NULL);
	// each child leads its own process group: what it started goes too
	for (int i = 0; i < s->n; i++)
		if (s->c[i].pid > 0 && kill(-s->c[i].pid, SIGTERM) != 0)
			kill(s->c[i].pid, SIGTERM);
	uint64_t t0 = now_ms(), asked = 0;
	int waiting = 0; // past the grace, for a child finishing its work
	for (;;) {
		int alive = 0;
		for (int i = 0; i < s->n; i++) {
			struct child *c = &s->c[i];
			if (c->pid <= 0)
				continue;
			int st;
			pid_t r = waitpid(c->pid, &st, WNOHANG);
			if (r == c->pid || (r < 0 && errno == ECHILD)) {
				surface_cleanup_pid((long)c->pid);
				c->pid = 0;
			} else
				alive++;
		}
		if (!alive)
			break;
		const uint64_t t = now_ms();
		if (t - t0 <= STOP_WAIT_MS) {
			sleep_ms(10);
			continue;
		}
		// past the grace: ask the stragglers that can say whether they are
		// finishing work of their own; such a one gets the grace again from
		// each ask that says so
		if (t - asked >= FINISH_ASK_MS) {
			asked = t;
			for (int i = 0; i < s->n; i++) {
				struct child *c = &s->c[i];
				char what[160] = "";
				if (c->pid <= 0 || !c->finishing || !c->url[0] ||
				    c->finishing(c->url, 500, what, sizeof what) != 1)
					continue;
				if (!c->finish_until) {
					if (!waiting) // from now on a ^C (or SIGTERM) stops the waiting
						sup_clear_interrupt();
					waiting = 1;
					fprintf(stderr,
					        "anedvd: waiting for %s (pid %ld) to exit: it is %s (Ctrl-C: stop waiting)\n",
					        c->name, (long)c->pid, what);
				} else if (strcmp(what, c->finish_said) && t - c->finish_said_ms >= FINISH_SAY_MS) {
					fprintf(stderr, "anedvd: still waiting for %s (pid %ld): it is %s\n", c->name,
					        (long)c->pid, what);
				} else {
					what[0] = 0; // nothing printed
				}
				if (what[0]) {
					snprintf(c->finish_said, sizeof c->finish_said, "%s", what);
					c->finish_said_ms = t;
				}
				c->finish_until = now_ms() + STOP_WAIT_MS;
			}
		}
		const int stop_waiting = (waiting && sup_interrupted()) || t - t0 > FINISH_WAIT_MS;
		int left = 0;
		for (int i = 0; i < s->n; i++) {
			struct child *c = &s->c[i];
			if (c->pid <= 0)
				continue;
			if (!stop_waiting && t < c->finish_until) {
				left++;
				continue;
			}
			if (c->finish_until)
				ad_warn("%s (pid %ld): not waiting any longer: killing it", c->name, (long)c->pid);
			else
				ad_warn("%s (pid %ld) ignored SIGTERM: killing it", c->name, (long)c->pid);
			if (kill(-c->pid, SIGKILL) != 0)
				kill(c->pid, SIGKILL);
			waitpid(c->pid, NULL, 0);
			surface_cleanup_pid((long)c->pid);
			c->pid = 0;
		}
		if (!left)
			break;
		sleep_ms(10);
	}
	remove_dir(s->rundir);
	surface_cleanup_pid((long)getpid());
	for (int i = 0; i < s->n; i++) {
		for (int k = 0; s->c[i].argv && s->c[i].argv[k]; k++)
			free(s->c[i].argv[k]);
		free(s->c[i].argv);
	}
	for (int i = 0; i < s->n_extra; i++)
		free(s->extra_env[i]);
	free(s->envp);
	pthread_mutex_destroy(&s->mu);
	sup_probes_close();
	free(s);
}

// --- binaries ---------------------------------------------------------------------

const char *
sup_bindir(void)
{
	static char dir[PATH_MAX];
	if (dir[0])
		return dir;
	const char *e = getenv("ANEDVD_BIN_DIR");
	if (e && *e) {
		snprintf(dir, sizeof dir, "%s", e);
		return dir;
	}
#ifdef __linux__
	ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
	if (n > 0) {
		dir[n] = 0;
		char *sl = strrchr(dir, '/');
		if (sl)
			*sl = 0;
		return dir;
	}
#endif
	snprintf(dir, sizeof dir, ".");
	return dir;
}

int
sup_binary(char *buf, size_t cap, const char *name)
{
	int n = snprintf(buf, cap, "%s/%s", sup_bindir(), name);
	if (n < 0 || (size_t)n >= cap)
		return -1;
	return access(buf, X_OK) == 0 ? 0 : -1;
}

int
sup_default_model(char *buf, size_t cap)
{
	char path[PATH_MAX + 64];
	snprintf(path, sizeof path, "%s/../share/anedvd/models/%s", sup_bindir(), SUP_DEFAULT_MODEL);
	char real[PATH_MAX];
	if (!realpath(path, real) || access(real, R_OK) != 0)
		return -1;
	int n = snprintf(buf, cap, "%s", real);
	return n < 0 || (size_t)n >= cap ? -1 : 0;
}

// --- health -----------------------------------------------------------------------

// One client per URL for every probe of the instance: a fresh connection per
// probe (every 20 ms while a worker compiles) piled hundreds of hung-up
// sockets onto a busy worker. The clients live until sup_probes_close.
#define PROBE_MAX 16
// The readiness wait and the watchdog probe from two threads: a client is
// freed when the last call through it is done (refs), so dropping one that
// the other thread is calling through is safe.
static struct {
	char url[512];
	struct ad_client *c;
	int refs;
	int dropped; // no longer handed out; freed when refs reaches 0
} probes[PROBE_MAX];
static pthread_mutex_t probes_mu = PTHREAD_MUTEX_INITIALIZER;

// the kept client of url, or a new one; -1 when none; probe_put(slot) after the call
static int
probe_get(const char *url, struct ad_client **out, char *err)
{
	int slot = -1, free_slot = -1;
	pthread_mutex_lock(&probes_mu);
	for (int i = 0; i < PROBE_MAX; i++) {
		if (probes[i].c && !probes[i].dropped && strcmp(probes[i].url, url) == 0) {
			slot = i;
			break;
		}
		if (!probes[i].c && free_slot < 0)
			free_slot = i;
	}
	if (slot < 0 && free_slot >= 0 && strlen(url) < sizeof probes[0].url) {
		struct ad_client *c = ad_client_open(url, err);
		if (c) {
			slot = free_slot;
			snprintf(probes[slot].url, sizeof probes[0].url, "%s", url);
			probes[slot].c = c;
			probes[slot].refs = 0;
			probes[slot].dropped = 0;
		}
	} else if (slot < 0) {
		ad_err(err, "too many health probe targets");
	}
	if (slot >= 0) {
		probes[slot].refs++;
		*out = probes[slot].c;
	}
	pthread_mutex_unlock(&probes_mu);
	return slot;
}

static void
probe_free_locked(int i)
{
	ad_client_close(probes[i].c);
	probes[i].c = NULL;
	probes[i].dropped = 0;
}

static void
probe_put(int i)
{
	pthread_mutex_lock(&probes_mu);
	if (--probes[i].refs == 0 && probes[i].dropped)
		probe_free_locked(i);
	pthread_mutex_unlock(&probes_mu);
}

// closes the kept client of url (once no call is using it); the next probe opens a new one
static void
probe_drop(const char *url)
{
	pthread_mutex_lock(&probes_mu);
	for (int i = 0; i < PROBE_MAX; i++)
		if (probes[i].c && !probes[i].dropped && strcmp(probes[i].url, url) == 0) {
			probes[i].dropped = 1;
			if (probes[i].refs == 0)
				probe_free_locked(i);
		}
	pthread_mutex_unlock(&probes_mu);
}

// after the watchdog has stopped: no call is in flight
static void
sup_probes_close(void)
{
	pthread_mutex_lock(&probes_mu);
	for (int i = 0; i < PROBE_MAX; i++)
		if (probes[i].c)
			probe_free_locked(i);
	pthread_mutex_unlock(&probes_mu);
}

// the service's Health through a kept client (proto/rpc.h) into *h: 0, 1
// while it says it is starting, -1 with no answer
static int
health_of(const char *url, const struct ad_rpc_service *svc, int timeout_ms, struct ad_rpc_health *h, char *err)
{
	struct ad_client *c = NULL;
	int slot = probe_get(url, &c, err);
	if (slot < 0)
		return -1;
	*h = (struct ad_rpc_health){0};
	int rc = ad_rpc_health(c, svc, h, timeout_ms, NULL, err);
	probe_put(slot);
	return rc == 0 ? 0 : h->starting ? 1 : -1;
}

static int
health(const char *url, const struct ad_rpc_service *svc, int timeout_ms, char *err)
{
	struct ad_rpc_health h;
	return health_of(url, svc, timeout_ms, &h, err);
}

int
sup_health_ane(const char *url, int timeout_ms, char *err)
{
	return health(url, &ad_rpc_ane, timeout_ms, err);
}

int
sup_finishing_ane(const char *url, int timeout_ms, char *what, size_t cap)
{
	char err[AD_ERRLEN];
	struct ad_rpc_health h;
	if (health_of(url, &ad_rpc_ane, timeout_ms, &h, err) < 0)
		return -1;
	if (!h.finishing[0])
		return 0;
	snprintf(what, cap, "%s", h.finishing);
	return 1;
}

int
sup_health_tok(const char *url, int timeout_ms, char *err)
{
	return health(url, &ad_rpc_tokenizer, timeout_ms, err);
}

int
sup_health_engine(const char *url, int timeout_ms, char *err)
{
	return health(url, &ad_rpc_engine, timeout_ms, err);
}
