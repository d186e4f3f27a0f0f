// supervisor.h - the anedvd CLI's child processes: spawn, watch, restart,
// stop, clean up.
//
// sup_new makes the instance's runtime directory, mode 0700, that holds the
// ipc sockets and a status file: "$XDG_RUNTIME_DIR/anedvd-<pid>", or without
// XDG_RUNTIME_DIR a fresh mkdtemp "anedvd-<pid>-XXXXXX" in $TMPDIR or /tmp
// (never a name another user could create first). An XDG_RUNTIME_DIR or a
// runtime directory that is not this user's, not a directory, or open to
// group or others is refused with an error naming it. Children are spawned
// under umask 077. It first removes what dead instances left behind: their
// runtime directories and their shared memory (surface_cleanup_stale). It installs
// SIGINT/SIGTERM handlers that only set a flag (sup_interrupted); blocking
// calls in the caller return EINTR.
//
// sup_spawn starts a child at once with posix_spawn, in its own process
// group (a terminal's ^C reaches only the CLI, which then stops the
// children in order), stdout sent to stderr, ANEDVD_LOG=warn unless the
// environment says otherwise. Spawn every child BEFORE the first nng call
// in this process: nng is not fork-safe (posix_spawn does not fork the
// address space, so later restarts are safe, but the first spawns should
// not race nng's threads). A monitor thread reaps children (waitpid) and
// restarts a child that dies with exponential back-off (100 ms doubling to
// 5 s, back to 100 ms once a child has stayed up 10 s), counting restarts,
// unless it exits with status 2 (a bad command line or setting: it would
// fail the same way again).
// The status file "<rundir>/status" has one line per child:
//   name pid restarts state last-exit exit-times
// state: up, restarting (down, to be restarted) or stopped (not to be);
// last-exit: signal:N or exit:N ("-" before the first); exit-times: the
// last 8 exits, wall-clock ms since the epoch, comma-separated ("-" for
// none). The frontend reads it for /health ("degraded" when a child exited
// 5 times within 30 s or is stopped) and /metrics.
// The shared memory a child made under its own pid (surface.h ids) is
// removed when it dies, so its replacement starts clean.
//
// sup_free (and only it) stops everything: SIGTERM to each child, up to
// 3 s to exit, SIGKILL for stragglers, then the runtime directory and the
// instance's shared memory (surface_cleanup_pid of this pid) are removed.
// No orphan, no leftover. A straggler whose spec has a finishing function
// that says it is completing work of its own (the ane-worker writing a new
// kernel cache entry, which a SIGKILL would lose) is waited for instead,
// with a line on stderr (and another when what it says changes, at most
// every 5 s), for as long as it says so (asked every second, at most 10
// minutes), unless SIGINT or SIGTERM comes meanwhile: then it is killed at
// once.
#ifndef AD_SUPERVISOR_H
#define AD_SUPERVISOR_H

#include <stddef.h>

#include "err.h"

struct sup;

// health: 0 when the child at url answers ready, 1 when it answers that it
// is still starting (the message says how far it has come), -1 with a message
typedef int (*sup_health_fn)(const char *url, int timeout_ms, char *err);
// finishing: 1 when the child at url says it completes work of its own
// before it exits (what it is, into what), 0 when it does not, -1 when it
// does not answer
typedef int (*sup_finishing_fn)(const char *url, int timeout_ms, char *what, size_t cap);

struct sup_spec {
	const char *name;        // short, unique: "tokenizer", "ane-worker", ...
	const char *const *argv; // argv[0] is a path; NULL-terminated; copied
	const char *url;         // what health is asked on (may be NULL)
	sup_health_fn health;    // NULL: running is enough
	int restart;             // restart when it dies
	// NULL, or asked (on url) once a stopping child has outlived its
	// SIGTERM's grace: 1 while it completes work of its own before it exits
	// (what it does into what), and then it is waited for (sup_free)
	sup_finishing_fn finishing;
};

struct sup *sup_new(char *err);
void sup_free(struct sup *s); // NULL is fine

const char *sup_rundir(const struct sup *s);
// "ipc://<rundir>/<name>.sock"
int sup_url(const struct sup *s, const char *name, char *buf, size_t cap);

int sup_spawn(struct sup *s, const struct sup_spec *spec, char *err);
// add "NAME=value" to the environment of the children spawned from now on
int sup_setenv(struct sup *s, const char *kv, char *err);
// wait until the child answers health (or, without one, is running);
// fails early if it exits and is not to be restarted, or on an interrupt
int sup_wait_ready(struct sup *s, const char *name, int timeout_ms, char *err);
long sup_pid(struct sup *s, const char *name); // 0 while down, -1 unknown
// what process pid's threads are doing, as Linux's /proc shows it: their
// count, and each state with where in the kernel it waits, e.g. "5
// threads: 4 S futex_wait_queue, 1 S do_epoll_wait"; "" where /proc has
// no such process. sup_wait_ready adds it to its "still waiting" lines.
void sup_proc_state(long pid, char *buf, size_t cap);
int sup_restarts(struct sup *s, const char *name);
// stop restarting name (it is stopped with the others by sup_free)
void sup_no_restart(struct sup *s, const char *name);

// Linux: spawn every child through `<path> __child <ppid> <argv...>`, which
// asks the kernel to SIGKILL it when the spawning thread's process dies
// (prctl PR_SET_PDEATHSIG) and then execs the child: a SIGKILLed CLI leaves
// no orphan. path is a binary whose main calls sup_child_main for
// "__child" (the anedvd CLI). Without it children are spawned directly.
void sup_set_trampoline(const char *path);
// the trampoline's side: argv as given to main; never returns
int sup_child_main(int argc, char **argv);

int sup_interrupted(void);
void sup_clear_interrupt(void);

// the directory of the anedvd binaries: $ANEDVD_BIN_DIR, else the one this
// executable is in
const char *sup_bindir(void);
// "<bindir>/<name>" into buf; -1 if it is not an executable file
int sup_binary(char *buf, size_t cap, const char *name);
// the model an installation ships (stories260K, 1 MB), found as the workers
// are: <bindir>/../share/anedvd/models/stories260K.gguf (the build tree has
// the same layout). The path into buf; -1 if it is not a readable file.
#define SUP_DEFAULT_MODEL "stories260K.gguf"
int sup_default_model(char *buf, size_t cap);

// health checks of the services (proto/*.proto Health)
int sup_health_ane(const char *url, int timeout_ms, char *err);
int sup_finishing_ane(const char *url, int timeout_ms, char *what, size_t cap); // Health's finishing
int sup_health_tok(const char *url, int timeout_ms, char *err);
int sup_health_engine(const char *url, int timeout_ms, char *err);

#endif
