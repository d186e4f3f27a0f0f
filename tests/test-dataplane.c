// test-dataplane.c - the shared-memory request/reply slots (dataplane.h),
// client and worker in two processes (fork), with both doorbells (futex
// and the sleeping fallback):
//   - an empty round trip, a list of steps, the handler's error status,
//     calls with a guess of their length (dp_call_expect) too long or short,
//     the lateness of calls slept through learned apart from the others',
//     bad requests (no steps, too many, unknown op) answered by dp_serve;
//   - 8 threads x 1000 calls in flight on the 16 slots, each reply the
//     answer to its own request;
//   - no answer: DP_TIMEOUT; the worker killed under a call (a zombie not
//     yet reaped): DP_DEAD; another attach: DP_CHANGED for the caller and
//     DP_SERVE_REPLACED for the worker, and the same slot re-posted is
//     answered by the new worker;
//   - the worker's side: the client closing (DP_SERVE_CLOSED) or dying
//     (DP_SERVE_CLIENT_GONE);
//   - objects of a dead instance removed by surface_cleanup_stale, of one
//     instance by surface_cleanup_pid; dp_open refuses what is not one;
//   - the surface table: indexes in order, a full table is an error.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dataplane.h"
#include "surface.h"
#include "t.h"

#define K_FAIL 999 // the handler answers DP_NOT_FOUND
#define K_EXIT 777 // the handler's process exits (a worker dying mid-call)
#define K_SLOW 555 // the handler sleeps 300 ms
#define K_LATE 556 // the handler sleeps 3 ms

static int bell_mode;

static void
sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

static void
handler(void *arg, const struct dp_request *rq, struct dp_reply *rep)
{
	(void)arg;
	for (uint32_t i = 0; i < rq->nsteps; i++) {
		const struct dp_step *s = &rq->step[i];
		if (s->kernel == K_FAIL) {
			rep->status = DP_NOT_FOUND;
			snprintf(rep->msg, sizeof rep->msg, "no kernel %u", s->kernel);
			return;
		}
		if (s->kernel == K_EXIT)
			_exit(3);
		if (s->kernel == K_SLOW)
			sleep_ms(300);
		if (s->kernel == K_LATE)
			sleep_ms(3);
		rep->exec_ns[i] = (uint64_t)s->kernel * 100000u + s->ncols * 100u + s->in * 10u + s->out;
		rep->done_steps = i + 1;
	}
}

static void
make_id(char *id, const char *name)
{
	static int n;
	char sub[32];
	snprintf(sub, sizeof sub, "dpt%d-%s", n++, name);
	surface_id(id, AD_SURFACE_ID_MAX, (long)getpid(), sub);
}

// a worker process serving id; exits 10 + dp_serve's reason
static pid_t
server(const char *id, int idle_ms)
{
	pid_t pid = fork();
	if (pid != 0)
		return pid;
	char err[AD_ERRLEN];
	struct dp_chan *c = dp_open(id, err);
	if (!c)
		_exit(1);
	dp_set_bell(c, (enum dp_bell)bell_mode);
	uint32_t g = dp_attach(c);
	static volatile int stop;
	int rc = dp_serve(c, g, handler, NULL, &stop, idle_ms);
	dp_close(c);
	_exit(10 + rc);
}

// wait for a worker to attach; its (pid, gen)
static int
attached(struct dp_chan *c, uint32_t old_gen, uint32_t *pid, uint32_t *gen)
{
	for (int i = 0; i < 2000; i++) {
		dp_worker(c, pid, gen);
		if (*gen != old_gen && *pid != 0)
			return 0;
		sleep_ms(5);
	}
	return -1;
}

static int
reap(pid_t pid)
{
	int st = 0;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static struct dp_request
req(uint32_t op, uint32_t n, uint32_t kernel)
{
	struct dp_request r;
	memset(&r, 0, sizeof r);
	r.op = op;
	r.nsteps = n;
	for (uint32_t i = 0; i < n && i < DP_MAX_STEPS; i++)
		r.step[i] = (struct dp_step){
			.kernel = kernel + i, .ncols = 1 + i, .in = (uint16_t)(2 * i), .out = (uint16_t)(2 * i + 1)};
	return r;
}

static uint64_t
expect(const struct dp_request *r, uint32_t i)
{
	const struct dp_step *s = &r->step[i];
	return (uint64_t)s->kernel * 100000u + s->ncols * 100u + s->in * 10u + s->out;
}

static struct dp_chan *
client(const char *name)
{
	char id[AD_SURFACE_ID_MAX], err[AD_ERRLEN];
	make_id(id, name);
	struct dp_chan *c = dp_create(id, err);
	if (c)
		dp_set_bell(c, (enum dp_bell)bell_mode);
	else
		fprintf(stderr, "%s\n", err);
	return c;
}

static void
test_roundtrip(void)
{
	struct dp_chan *c = client("rt");
	REQUIRE(c);
	REQUIRE(dp_get_bell(c) == (enum dp_bell)bell_mode);
	pid_t w = server(dp_id(c), 100);
	uint32_t pid, gen;
	REQUIRE(attached(c, 0, &pid, &gen) == 0, "no worker attached");
	CHECK(pid == (uint32_t)w && gen == 1, "pid %u gen %u", pid, gen);
	struct dp_reply rep;
	int slot = -1;
	struct dp_request r = req(DP_OP_NOP, 0, 0);
	for (int i = 0; i < 1000; i++)
		if (dp_call(c, &slot, &r, &rep, pid, gen, 5000) != DP_DONE || rep.status != DP_OK)
			break;
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_OK);
	r = req(DP_OP_CALL, 3, 40);
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_OK);
	CHECK(rep.done_steps == 3);
	for (uint32_t i = 0; i < 3; i++)
		CHECK(rep.exec_ns[i] == expect(&r, i), "step %u: %llu", i, (unsigned long long)rep.exec_ns[i]);
	r = req(DP_OP_CALL, 2, K_FAIL - 1); // the second step fails
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_NOT_FOUND &&
	              rep.done_steps == 1 && strstr(rep.msg, "no kernel 999"),
	      "%d %u %s", rep.status, rep.done_steps, rep.msg);
	// refused by dp_serve itself
	r = req(DP_OP_CALL, 0, 1);
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_BAD_REQUEST &&
	              strstr(rep.msg, "0 steps"),
	      "%s", rep.msg);
	r = req(DP_OP_CALL, DP_MAX_STEPS, 1);
	r.nsteps = DP_MAX_STEPS + 1;
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_BAD_REQUEST);
	r = req(42, 1, 1);
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_BAD_REQUEST &&
	              strstr(rep.msg, "unknown op"),
	      "%s", rep.msg);
	// a guess of the call's length, too long and too short: the same replies
	r = req(DP_OP_CALL, 2, 11);
	CHECK(dp_call_expect(c, &slot, &r, &rep, pid, gen, 5000, 200000000) == DP_DONE &&
	      rep.exec_ns[1] == expect(&r, 1));
	r = req(DP_OP_CALL, 1, K_SLOW);
	CHECK(dp_call_expect(c, &slot, &r, &rep, pid, gen, 5000, 1000000) == DP_DONE &&
	      rep.exec_ns[0] == expect(&r, 0));
	// calls slept through until due (guessed at 2 ms, over the 1 ms spun
	// through at most) taking 3 ms or more, then calls guessed at 50 us,
	// spun through: each kind's lateness is its own. Whether a call sleeps
	// or spins follows from its guess alone, so each kind's calls leave the
	// other's figures exactly as they were, however loaded the machine; how
	// late the replies come does not (a reply more than 5 ms off is left
	// out, and a long call is at least 1 ms late: booked, its figure rises)
	int64_t over0, dev0, over1, dev1, o0, d0, o1, d1;
	dp_lateness(c, 0, &o0, &d0);
	dp_lateness(c, 1, &o1, &d1);
	r = req(DP_OP_CALL, 1, K_LATE);
	for (int i = 0; i < 6; i++)
		CHECK(dp_call_expect(c, &slot, &r, &rep, pid, gen, 5000, 2000000) == DP_DONE);
	dp_lateness(c, 0, &over0, &dev0);
	dp_lateness(c, 1, &over1, &dev1);
	CHECK(over0 == o0 && dev0 == d0, "a long call booked as a short one: %lld -> %lld ns", (long long)o0,
	      (long long)over0);
	CHECK(over1 > o1, "the long calls' lateness: %lld -> %lld ns", (long long)o1, (long long)over1);
	o1 = over1, d1 = dev1;
	r = req(DP_OP_CALL, 1, 7);
	for (int i = 0; i < 40; i++)
		CHECK(dp_call_expect(c, &slot, &r, &rep, pid, gen, 5000, 50000) == DP_DONE);
	dp_lateness(c, 0, &over0, &dev0);
	dp_lateness(c, 1, &over1, &dev1);
	CHECK(over1 == o1 && dev1 == d1, "a short call booked as a long one: %lld -> %lld ns", (long long)o1,
	      (long long)over1);
	CHECK(over0 != o0 || dev0 != d0, "the short calls were not booked");
	// and it still serves
	r = req(DP_OP_CALL, 1, 5);
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.exec_ns[0] == expect(&r, 0));
	dp_release(c, slot);
	dp_destroy(c);
	CHECK(reap(w) == 10 + DP_SERVE_CLOSED, "the worker did not see the close");
}

struct th {
	struct dp_chan *c;
	uint32_t pid, gen;
	int id, bad;
};

static void *
th_main(void *arg)
{
	struct th *t = arg;
	for (int i = 0; i < 1000; i++) {
		struct dp_request r = req(DP_OP_CALL, 1 + (uint32_t)(i % 3), (uint32_t)t->id * 10);
		r.step[0].ncols = (uint32_t)i;
		struct dp_reply rep;
		int slot = -1;
		int rc = dp_call(t->c, &slot, &r, &rep, t->pid, t->gen, 10000);
		dp_release(t->c, slot);
		if (rc != DP_DONE || rep.status != DP_OK || rep.done_steps != r.nsteps) {
			t->bad++;
			continue;
		}
		for (uint32_t j = 0; j < r.nsteps; j++)
			t->bad += rep.exec_ns[j] != expect(&r, j);
	}
	return NULL;
}

static void
test_threads(void)
{
	struct dp_chan *c = client("th");
	REQUIRE(c);
	pid_t w = server(dp_id(c), 100);
	uint32_t pid, gen;
	REQUIRE(attached(c, 0, &pid, &gen) == 0);
	struct th t[8];
	pthread_t th[8];
	for (int i = 0; i < 8; i++) {
		t[i] = (struct th){c, pid, gen, i + 1, 0};
		pthread_create(&th[i], NULL, th_main, &t[i]);
	}
	int bad = 0;
	for (int i = 0; i < 8; i++) {
		pthread_join(th[i], NULL);
		bad += t[i].bad;
	}
	CHECK(bad == 0, "%d calls got a wrong or no reply", bad);
	// every slot held: the next claim times out
	int slots[DP_SLOTS];
	struct dp_request r = req(DP_OP_NOP, 0, 0);
	struct dp_reply rep;
	for (int i = 0; i < DP_SLOTS; i++) {
		slots[i] = -1;
		CHECK(dp_call(c, &slots[i], &r, &rep, pid, gen, 5000) == DP_DONE);
	}
	int s = -1;
	CHECK(dp_call(c, &s, &r, &rep, pid, gen, 30) == DP_NOSLOT);
	for (int i = 0; i < DP_SLOTS; i++)
		dp_release(c, slots[i]);
	dp_destroy(c);
	CHECK(reap(w) == 10 + DP_SERVE_CLOSED);
}

static void
test_timeout_dead(void)
{
	char err[AD_ERRLEN];
	struct dp_chan *c = client("to");
	REQUIRE(c);
	// a worker that attaches and never serves
	pid_t w = fork();
	if (w == 0) {
		struct dp_chan *o = dp_open(dp_id(c), err);
		if (o)
			dp_attach(o);
		pause();
		_exit(0);
	}
	uint32_t pid, gen;
	REQUIRE(attached(c, 0, &pid, &gen) == 0);
	struct dp_request r = req(DP_OP_NOP, 0, 0);
	struct dp_reply rep;
	int slot = -1;
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 50) == DP_TIMEOUT);
	// killed (and not reaped yet: a zombie still answers kill(pid, 0))
	kill(w, SIGKILL);
	sleep_ms(50);
	CHECK(dp_pid_alive((uint32_t)w) == 0, "a zombie counts as alive");
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DEAD);
	reap(w);
	CHECK(dp_pid_alive((uint32_t)w) == 0 && dp_pid_alive((uint32_t)getpid()) == 1 && dp_pid_alive(0) == 0);
	dp_release(c, slot);

	// dying in the middle of a call, and a new worker answers the same slot
	w = server(dp_id(c), 100);
	REQUIRE(attached(c, gen, &pid, &gen) == 0);
	r = req(DP_OP_CALL, 1, K_EXIT);
	slot = -1;
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 20000) == DP_DEAD);
	CHECK(reap(w) == 3);
	w = server(dp_id(c), 100);
	REQUIRE(attached(c, gen, &pid, &gen) == 0);
	r = req(DP_OP_CALL, 1, 7);
	CHECK(dp_call(c, &slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.exec_ns[0] == expect(&r, 0));
	dp_release(c, slot);
	dp_destroy(c);
	CHECK(reap(w) == 10 + DP_SERVE_CLOSED);
}

struct slow {
	struct dp_chan *c;
	uint32_t pid, gen;
	int slot, rc;
};

static void *
slow_main(void *arg)
{
	struct slow *s = arg;
	struct dp_request r = req(DP_OP_CALL, 1, K_SLOW);
	struct dp_reply rep;
	s->rc = dp_call(s->c, &s->slot, &r, &rep, s->pid, s->gen, 20000);
	return NULL;
}

static void
test_generation(void)
{
	char err[AD_ERRLEN];
	struct dp_chan *c = client("gen");
	REQUIRE(c);
	pid_t w = server(dp_id(c), 100);
	uint32_t pid, gen;
	REQUIRE(attached(c, 0, &pid, &gen) == 0);
	struct slow s = {c, pid, gen, -1, 99};
	pthread_t th;
	pthread_create(&th, NULL, slow_main, &s);
	sleep_ms(50);
	// another worker takes the object while the call runs
	struct dp_chan *o = dp_open(dp_id(c), err);
	REQUIRE(o, "%s", err);
	uint32_t g2 = dp_attach(o);
	CHECK(g2 == gen + 1);
	pthread_join(th, NULL);
	CHECK(s.rc == DP_CHANGED, "rc %d", s.rc);
	CHECK(reap(w) == 10 + DP_SERVE_REPLACED, "the old worker did not step back");
	dp_close(o);
	// the same slot, re-posted, answered by the next worker
	w = server(dp_id(c), 100);
	REQUIRE(attached(c, g2, &pid, &gen) == 0);
	struct dp_request r = req(DP_OP_CALL, 2, 3);
	struct dp_reply rep;
	CHECK(dp_call(c, &s.slot, &r, &rep, pid, gen, 5000) == DP_DONE && rep.exec_ns[1] == expect(&r, 1));
	dp_release(c, s.slot);
	dp_destroy(c);
	CHECK(reap(w) == 10 + DP_SERVE_CLOSED);
}

static int
exists(const char *id)
{
	int fd = shm_open(id, O_RDONLY, 0);
	if (fd >= 0)
		close(fd);
	return fd >= 0;
}

static void
test_client_gone_stale(void)
{
	char err[AD_ERRLEN], id[AD_SURFACE_ID_MAX];
	// a client process that creates its object and dies without a word
	int p[2], q[2];
	REQUIRE(pipe(p) == 0 && pipe(q) == 0);
	pid_t cl = fork();
	if (cl == 0) {
		char cid[AD_SURFACE_ID_MAX];
		surface_id(cid, sizeof cid, (long)getpid(), "r0-dp");
		struct dp_chan *c = dp_create(cid, err);
		if (write(p[1], cid, sizeof cid) != (ssize_t)sizeof cid || !c)
			_exit(1);
		char x;
		if (read(q[0], &x, 1) < 0) // until the parent has attached
			_exit(1);
		_exit(0);
	}
	REQUIRE(read(p[0], id, sizeof id) == (ssize_t)sizeof id);
	struct dp_chan *o = dp_open(id, err);
	REQUIRE(o, "%s", err);
	uint32_t g = dp_attach(o);
	CHECK(write(q[1], "x", 1) == 1);
	CHECK(reap(cl) == 0);
	close(p[0]);
	close(p[1]);
	close(q[0]);
	close(q[1]);
	static volatile int stop;
	CHECK(dp_serve(o, g, handler, NULL, &stop, 20) == DP_SERVE_CLIENT_GONE);
	// stop is polled too
	stop = 1;
	CHECK(dp_serve(o, g, handler, NULL, &stop, 20) == DP_SERVE_STOPPED);
	stop = 0;
	dp_close(o);
	// its object is stale: swept with the surfaces of dead instances (by
	// this sweep, or by one of a process started meanwhile: ctest -j)
	int had = exists(id), n = surface_cleanup_stale();
	CHECK(!exists(id), "%s is still there", id);
	if (had && n < 1)
		printf("the stale object went in another process's sweep\n");

	// one instance's objects at its clean shutdown
	struct dp_chan *c = client("pid");
	REQUIRE(c);
	snprintf(id, sizeof id, "%s", dp_id(c));
	CHECK(surface_cleanup_stale() >= 0 && exists(id), "a live instance's object was swept");
	CHECK(surface_cleanup_pid((long)getpid()) >= 1 && !exists(id));
	dp_destroy(c); // unlinking what is gone is fine

	// what dp_open refuses
	CHECK(dp_open("/anedvd-1-no-such-object", err) == NULL && strstr(err, "shm_open"), "%s", err);
	CHECK(dp_open("no-slash", err) == NULL && strstr(err, "bad id"), "%s", err);
	struct ad_surface sf;
	make_id(id, "notdp");
	REQUIRE(surface_create(&sf, id, 64, 64, 1, err) == 0, "%s", err);
	CHECK(dp_open(id, err) == NULL && (strstr(err, "bytes") || strstr(err, "not an object")), "%s", err);
	surface_close(&sf);
	make_id(id, "notdp-small");
	int fd = shm_open(id, O_RDWR | O_CREAT | O_EXCL, 0600);
	REQUIRE(fd >= 0);
	CHECK(ftruncate(fd, 4096) == 0);
	close(fd);
	CHECK(dp_open(id, err) == NULL && strstr(err, "bytes"), "%s", err);
	shm_unlink(id);
	make_id(id, "notdp-big");
	REQUIRE(surface_create(&sf, id, 4096, 64, 1, err) == 0, "%s", err); // zeros: no magic
	CHECK(dp_open(id, err) == NULL && strstr(err, "not an object"), "%s", err);
	surface_close(&sf);
	CHECK(dp_create("/bad/id/with/too/many/characters/for/a/surface/id/of/the/anedvd/kind/at/all", err) == NULL,
	      "a long id was taken");
	c = client("dup");
	REQUIRE(c);
	CHECK(dp_create(dp_id(c), err) == NULL && strstr(err, "shm_open"), "%s", err);
	dp_destroy(c);
}

static void
test_surfaces(void)
{
	char err[AD_ERRLEN], sid[AD_SURFACE_ID_MAX];
	struct dp_chan *c = client("sf");
	REQUIRE(c);
	struct dp_chan *o = dp_open(dp_id(c), err);
	REQUIRE(o, "%s", err);
	struct dp_surf_entry e;
	CHECK(dp_surface(o, 0, &e) == -1);
	int bad = 0;
	for (int i = 0; i < DP_MAX_SURF; i++) {
		snprintf(sid, sizeof sid, "/anedvd-1-s%d", i);
		bad += dp_add_surface(c, sid, (uint32_t)i + 1, 64, err) != i;
	}
	CHECK(bad == 0);
	CHECK(dp_add_surface(c, "/anedvd-1-one-more", 1, 64, err) == -1 && strstr(err, "full"), "%s", err);
	CHECK(dp_surface(o, 17, &e) == 0 && strcmp(e.id, "/anedvd-1-s17") == 0 && e.channels == 18 && e.width == 64);
	CHECK(dp_surface(o, DP_MAX_SURF, &e) == -1);
	dp_close(o);
	dp_destroy(c);
}

// the idle hook: called in the worker's spin after a request, piece after
// piece until it says it is done, never while a request waits; a request
// posted meanwhile is answered after at most one piece
struct idle_state {
	atomic_int calls, budget, during;
	atomic_int watch, rung; // pieces of up to 2 s that return when dp_bell_rung says so
	struct dp_chan *c;
};

static int
idle_piece(void *arg)
{
	struct idle_state *s = arg;
	atomic_fetch_add(&s->calls, 1);
	if (atomic_load(&s->watch)) {
		for (int i = 0; i < 20000; i++) {
			if (dp_bell_rung(s->c)) {
				atomic_fetch_add(&s->rung, 1);
				return 1;
			}
			usleep(100);
		}
		return 1;
	}
	sleep_ms(1); // a long piece: a request posted now waits for its end
	return atomic_fetch_sub(&s->budget, 1) > 1;
}

static void *
idle_server(void *arg)
{
	struct idle_state *s = arg;
	static volatile int stop;
	uint32_t g = dp_attach(s->c);
	dp_set_spin(s->c, 10, 200 * 1000 * 1000); // spin (and so idle work) up to 200 ms
	dp_set_idle(s->c, idle_piece, s);
	dp_serve(s->c, g, handler, NULL, &stop, 50);
	return NULL;
}

static void
test_idle(void)
{
	char err[AD_ERRLEN];
	struct dp_chan *c = client("idle");
	REQUIRE(c);
	struct idle_state s = {.c = dp_open(dp_id(c), err)};
	REQUIRE(s.c, "%s", err);
	atomic_store(&s.budget, 0);
	pthread_t th;
	REQUIRE(pthread_create(&th, NULL, idle_server, &s) == 0);
	uint32_t pid, gen;
	REQUIRE(attached(c, 0, &pid, &gen) == 0);
	struct dp_request rq = req(DP_OP_CALL, 1, 3);
	struct dp_reply rep;
	int slot = -1;
	// the worker spins from its start: one piece, which says it has nothing
	sleep_ms(20);
	CHECK(atomic_load(&s.calls) == 1, "%d idle pieces before a request", atomic_load(&s.calls));
	// a request, then 5 pieces and no more
	atomic_store(&s.calls, 0);
	atomic_store(&s.budget, 5);
	CHECK(dp_call(c, &slot, &rq, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_OK);
	// (5 pieces of 1 ms: a loaded machine may take longer to run them)
	for (int i = 0; i < 200 && atomic_load(&s.calls) < 5; i++)
		sleep_ms(10);
	sleep_ms(30);
	CHECK(atomic_load(&s.calls) == 5, "%d idle pieces for a budget of 5", atomic_load(&s.calls));
	// endless work: a request still gets its answer within a piece or two
	atomic_store(&s.calls, 0);
	atomic_store(&s.budget, 1 << 30);
	CHECK(dp_call(c, &slot, &rq, &rep, pid, gen, 5000) == DP_DONE);
	sleep_ms(5);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(dp_call(c, &slot, &rq, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_OK);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	CHECK(atomic_load(&s.calls) > 0, "%d idle pieces", atomic_load(&s.calls)); // (a loaded machine runs few)
	// (a piece is 1 ms; a loaded machine may add a slice or two)
	CHECK(ms < 100, "a request waited %.1f ms behind the idle work", ms);
	// a piece that looks at the bell (dp_bell_rung): quiet while nothing
	// comes, and a request ends it long before its 2 s are up
	atomic_store(&s.watch, 1);
	sleep_ms(30);
	CHECK(atomic_load(&s.rung) == 0, "the bell rang with no request");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(dp_call(c, &slot, &rq, &rep, pid, gen, 5000) == DP_DONE && rep.status == DP_OK);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	CHECK(atomic_load(&s.rung) >= 1, "the piece did not see the request");
	CHECK(ms < 1000, "a request waited %.1f ms behind a piece that looks at the bell", ms);
	atomic_store(&s.watch, 0);
	atomic_store(&s.budget, 0);
	dp_release(c, slot);
	dp_destroy(c);
	pthread_join(th, NULL);
	dp_close(s.c);
}

// the arena: the client's host memory in the object, the same bytes in
// every mapping (made present by dp_arena_ready or not); an object cut
// short of its arena is refused
static void
test_arena(void)
{
	char err[AD_ERRLEN], id[AD_SURFACE_ID_MAX];
	make_id(id, "arena");
	struct dp_chan *c = dp_create_arena(id, 1000, err);
	REQUIRE(c, "%s", err);
	size_t n = 0, m = 0;
	float *a = dp_arena(c, &n);
	CHECK(a && n == 1024 && ((uintptr_t)a & 63) == 0, "%zu bytes", n); // whole 64-byte lines
	for (size_t i = 0; i < n / sizeof(float); i++)
		CHECK(a[i] == 0.0f);
	a[0] = 1.5f;
	a[255] = -2.0f;
	struct dp_chan *o = dp_open(id, err);
	REQUIRE(o, "%s", err);
	float *b = dp_arena(o, &m);
	CHECK(b && m == n && b[0] == 1.5f && b[255] == -2.0f);
	b[7] = 3.0f; // and back
	CHECK(a[7] == 3.0f);
	// made present in the other mapping: every byte stays as written; a
	// range past the arena's end is ignored
	dp_arena_ready(o, 0, m);
	dp_arena_ready(o, 4, m);
	dp_arena_ready(o, m + 1, 1);
	dp_arena_ready(o, UINT64_MAX, 1);
	dp_arena_ready(o, 8, UINT64_MAX);
	dp_arena_ready(o, 16, 8);
	CHECK(b[0] == 1.5f && b[7] == 3.0f && b[255] == -2.0f && a[1] == 0.0f);
	dp_close(o);
	// cut short: its header promises more than the object holds
	int fd = shm_open(id, O_RDWR, 0);
	REQUIRE(fd >= 0);
	struct stat st;
	REQUIRE(fstat(fd, &st) == 0);
	CHECK(ftruncate(fd, st.st_size - 512) == 0);
	close(fd);
	CHECK(dp_open(id, err) == NULL && strstr(err, "arena"), "%s", err);
	dp_destroy(c);
	// none asked: none given
	make_id(id, "no-arena");
	REQUIRE((c = dp_create(id, err)), "%s", err);
	CHECK(dp_arena(c, &n) == NULL && n == 0);
	dp_destroy(c);
	make_id(id, "huge-arena");
	CHECK(dp_create_arena(id, (size_t)5 << 30, err) == NULL && strstr(err, "arena"), "%s", err);
}

int
main(void)
{
	const char *modes[] = {"futex", "sleep"};
	for (bell_mode = 0; bell_mode < 2; bell_mode++) {
		fprintf(stderr, "-- doorbell: %s\n", modes[bell_mode]);
		T_RUN(test_roundtrip);
		T_RUN(test_threads);
		T_RUN(test_timeout_dead);
		T_RUN(test_generation);
	}
	T_RUN(test_client_gone_stale);
	T_RUN(test_surfaces);
	T_RUN(test_arena);
	T_RUN(test_idle);
	return t_done();
}
