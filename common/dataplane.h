// dataplane.h - kernel calls through shared memory, with a futex doorbell.
//
// One object per kernel-backend client (kb_remote), created by the client
// as a POSIX shm object named like a surface ("/anedvd-<instance>-<name>",
// surface_id), so surface_cleanup_stale and surface_cleanup_pid sweep it
// with the instance's surfaces. The worker maps it when told over the
// control plane (nng: AttachRequest in proto/ane.proto) and serves it from
// a thread of its own; nng stays the control plane (Compile, Health,
// Stats, attach, errors of the control plane).
//
// The object holds
//   - a header: magic, version, the client's pid, a closed flag, the
//     serving worker's pid and a generation that every attaching worker
//     bumps (a caller waiting on a reply watches both: a dead pid or a new
//     generation means its request will not be answered by this worker);
//   - a table of surfaces the client registered (id, channels, width),
//     append-only for the life of the object, so a call names a surface by
//     its index and the worker maps it once per index;
//   - DP_SLOTS request/reply slots, so several threads of the client can
//     have calls in flight. A slot carries an op (DP_NOP: the empty round
//     trip; DP_CALL: up to DP_MAX_STEPS steps run in order) and the reply
//     (status, per-step exec_ns, a short message). A step is a kernel, or
//     the residual-norm step between two kernels of a layer (DP_RESNORM,
//     resnorm.h), whose fp32 vectors (the residual stream, the norms'
//     weights) live in
//   - the arena: host memory the client sizes at creation (dp_create_arena)
//     and lays out as it likes; a DP_RESNORM step names its vectors by
//     offsets into it. It belongs to the object, so it outlives a worker:
//     the same call re-posted to a restarted worker finds the same inputs.
//
// Protocol of a slot. The client owns req_seq and the request, the worker
// rep_seq and the reply; a request is pending while req_seq != rep_seq,
// and it names the worker generation it is for (a worker attached later
// leaves it alone: the caller re-posts it after the re-attach, so a
// request is never rewritten under a worker reading it).
//   client: write the request; store req_seq = s (release); ring the bell
//   worker: load req_seq (acquire) != rep_seq: read the request, run it,
//           write the reply; store rep_seq = s (release); wake the client
//   client: load rep_seq (acquire) == s: read the reply
// The release store publishes every plain write before it to the thread
// whose acquire load reads the stored value, so neither side ever reads a
// half-written request or reply. The bell is one word in the header the
// client increments after posting any slot; the worker sleeps on it.
//
// Doorbell: a waiter spins for a short bounded time (with the CPU's pause
// hint), then sleeps on the 32-bit word: futex FUTEX_WAIT/FUTEX_WAKE on
// Linux (the shared, not the _PRIVATE, variants: the word lives in two
// processes), os_sync_wait_on_address / os_sync_wake_by_address_any with
// the shared flag on macOS 14.4+. Every sleep has a timeout (a slice), after
// which the waiter checks the other side's liveness. A waker only makes the
// wake system call when a "sleeping" flag says someone sleeps: flag and
// word are sequentially consistent on both sides (the waiter sets the flag
// then re-reads the word; the waker stores the word then reads the flag),
// so at least one of them sees the other and no wake is lost; and the
// kernel's own compare of the word closes the window between the re-read
// and the sleep. The fallback doorbell (DP_BELL_SLEEP: macOS before 14.4,
// or chosen with ANEDVD_DP_DOORBELL=sleep or dp_set_bell) polls the word,
// sleeping 20 us growing to 1 ms between looks; it never sets the flag.
#ifndef AD_DATAPLANE_H
#define AD_DATAPLANE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "surface.h"

#define DP_MAGIC 0x41445044u // "DPDA"
#define DP_VERSION 5u
#define DP_SLOTS 16
#define DP_MAX_STEPS 8
#define DP_MAX_SURF 256
#define DP_MSG 160
#define DP_BY_NAME 0xffffu     // a step's surface given by name, not by index
#define DP_NO_SURF 0xfffeu     // a DP_RESNORM step without y or without xn
#define DP_RESNORM 0xffffffffu // a step's kernel: the residual-norm step
#define DP_NO_VEC 0xffffffffu  // a DP_RESNORM vector that is absent

enum dp_op { DP_OP_NOP = 1, DP_OP_CALL = 2 };

// a reply's status: the values of proto/common.proto ErrorCode (pinned in
// cpu-worker/proto-pins.c)
enum dp_status {
	DP_OK = 0,
	DP_BAD_REQUEST = 1,
	DP_NOT_FOUND = 3,
	DP_INTERNAL = 5,
	DP_UNAVAILABLE = 7,
};

enum dp_bell { DP_BELL_FUTEX = 0, DP_BELL_SLEEP = 1 };

// a DP_RESNORM step: resnorm.h's step on ncols columns, y read from the
// step's input surface (in: DP_NO_SURF for none), xn written to its output
// surface (out: DP_NO_SURF for none); the vectors are arena offsets in
// floats: x_in and x_out [ncols][E], bias, post and w [E] (DP_NO_VEC: absent).
// A step that re-reads what it writes (x_out overlapping x_in but not equal)
// is refused: re-posted, the call must find its inputs unchanged. With
// DP_HOST_IN in dp_step.host, y is read from arena rows [ncols][E] at
// in_off instead (in_ld = E; the fp16 values a gather would give), and with
// DP_HOST_OUT xn is written to arena rows [ncols][E] at out_off (out_ld =
// E; fp32): a kernel step of the same call hands over its output, or takes
// its input, as host rows, and no surface is touched between them. xn's
// rows may not overlap any of the step's inputs or x_out.
struct dp_resnorm {
	uint32_t E;
	float eps;
	uint32_t x_in, x_out, bias, post, w;
};

// a kernel step's host rows (dp_step.host): its input read from the
// arena (DP_HOST_IN: fp32 rows [ncols][in_ld] at in_off, each value taken
// as the fp16 a surface would hold) and/or its output written there
// (DP_HOST_OUT: rows [ncols][out_ld] at out_off, the fp16 values as fp32)
// instead of through its surfaces, which the step still names (a device
// kernel reads and writes them: the worker moves the rows through them;
// the emu skips them). What a planar surface costs a one-column call is a
// cache line per channel on each side: an LM head's 49,152 lines written
// by one process and read by the other
#define DP_HOST_IN 1u
#define DP_HOST_OUT 2u

struct dp_step {
	uint32_t kernel; // a kernel id, or DP_RESNORM
	uint32_t ncols;
	uint16_t in, out;                                         // surface table index, or DP_BY_NAME
	char in_id[AD_SURFACE_ID_MAX], out_id[AD_SURFACE_ID_MAX]; // when DP_BY_NAME
	struct dp_resnorm rn;                                     // when kernel is DP_RESNORM
	uint32_t host;                                            // a kernel's DP_HOST_* (0: surfaces only)
	uint32_t in_off, in_ld, out_off, out_ld;                  // its host rows, in floats
};

// a request as the client fills it, and a reply as the worker fills it
struct dp_request {
	uint32_t op;
	uint32_t nsteps;
	struct dp_step step[DP_MAX_STEPS];
};

struct dp_reply {
	int32_t status;      // enum dp_status
	uint32_t done_steps; // steps that ran (the failing one is done_steps)
	uint64_t done_ns;    // the worker's clock (ad_now_ns) when it wrote the reply
	uint64_t start_ns;   // the worker's clock when it took the request
	// written by the caller's dp_call, not by the worker: its clock when it
	// posted the request and when it saw the reply (ad_now_ns is the
	// system's monotonic clock, the same in both processes), so a call's
	// IPC splits into pickup (start - posted), the worker's own time
	// between its steps, and the reply's way back (seen - done)
	uint64_t posted_ns, seen_ns;
	uint64_t exec_ns[DP_MAX_STEPS];
	char msg[DP_MSG];
};

struct dp_surf_entry {
	char id[AD_SURFACE_ID_MAX];
	uint32_t channels, width;
};

struct dp_chan; // one mapping of an object, on either side

// --- client ---------------------------------------------------------------------------
// dp_create makes the object (it fails if the id exists: sweep stale ones
// first) with this process as the client; dp_create_arena with an arena of
// at least arena_bytes (zeroed; dp_arena gives it).
struct dp_chan *dp_create(const char *id, char *err);
struct dp_chan *dp_create_arena(const char *id, size_t arena_bytes, char *err);
// dp_destroy marks the object closed, wakes its worker, unmaps and unlinks
void dp_destroy(struct dp_chan *c);
// register a surface; its index (stable for the life of the object), or -1
// when the table is full
int dp_add_surface(struct dp_chan *c, const char *id, uint32_t channels, uint32_t width, char *err);
// the worker the caller expects to answer (read back after an attach): its
// pid and generation as the header has them now
void dp_worker(const struct dp_chan *c, uint32_t *pid, uint32_t *gen);

// the result of a wait
enum dp_wait_rc {
	DP_DONE = 0,     // answered: the reply is in *rep
	DP_TIMEOUT = -1, // no answer within timeout_ms
	DP_DEAD = -2,    // the expected worker's pid is gone
	DP_CHANGED = -3, // another worker (generation) attached
	DP_NOSLOT = -4,  // every slot stayed busy for timeout_ms
};

// dp_call posts rq on a free slot and waits for the reply of the worker
// (pid, gen), checking its liveness every slice_ms. On anything but
// DP_DONE the slot is kept for the caller's retry: call dp_call again with
// the same *slot (it re-posts the request), or dp_release it. *slot = -1
// on entry claims a free one.
int dp_call(struct dp_chan *c, int *slot, const struct dp_request *rq, struct dp_reply *rep, uint32_t pid, uint32_t gen,
            int timeout_ms);
// dp_call_expect is dp_call for a call expected to take about expect_ns
// (0: unknown): the caller spins through it, yielding the core between
// looks, for up to expect + max(expect / 4, lead) (5 ms at most), so that
// no wake-up follows the reply, as long as that pays
// (ANEDVD_DP_SPIN_THROUGH=auto, the default: while processes other than
// the caller's and the worker's took under a quarter of a core over the
// last 250 ms (cpuload.h), and the spin sees the replies within a tick;
// where the load cannot be read, within 150 us of their writing; 1:
// always; 0: never; ANEDVD_DP_THROUGH_YIELD_US: pause this long before the
// first yield, 0; ANEDVD_DP_THROUGH_MAX_US: the longest call spun through,
// 1000).
// With it off, a short one (expect + lead <= ANEDVD_DP_SPIN_MAX_US, 200
// us) is spun through; for a longer one the caller sleeps until
// ANEDVD_DP_LEAD_US (40 us) and twice the replies' spread before the reply
// is due (expect_ns, and how late after it the channel's replies have come
// on average), then spins; so being woken costs nothing when the guess
// holds (and the worker still wakes it when the reply comes earlier)
int dp_call_expect(struct dp_chan *c, int *slot, const struct dp_request *rq, struct dp_reply *rep, uint32_t pid,
                   uint32_t gen, int timeout_ms, uint64_t expect_ns);
void dp_release(struct dp_chan *c, int slot);

// --- worker ---------------------------------------------------------------------------
// dp_open maps an object a client created, checking magic, version and size
struct dp_chan *dp_open(const char *id, char *err);
void dp_close(struct dp_chan *c); // unmap
// dp_attach makes this process the object's worker: writes its pid and
// bumps the generation; returns the new generation
uint32_t dp_attach(struct dp_chan *c);
// the client's registered surface at index i, copied (id NUL-terminated);
// -1 when there is none
int dp_surface(const struct dp_chan *c, uint32_t i, struct dp_surf_entry *out);

// handler: run rq, fill rep (zeroed, status DP_OK on entry)
typedef void (*dp_handler)(void *arg, const struct dp_request *rq, struct dp_reply *rep);

enum dp_serve_rc {
	DP_SERVE_STOPPED = 0, // *stop was set
	DP_SERVE_CLOSED = 1,  // the client closed the object
	DP_SERVE_CLIENT_GONE = 2,
	DP_SERVE_REPLACED = 3, // another attach (generation) took the object
};

// dp_serve answers the object's requests as generation gen until one of
// the dp_serve_rc reasons; *stop is polled at least every idle_ms. A
// request the handler cannot be given (unknown op, too many steps) is
// answered DP_BAD_REQUEST here; DP_OP_NOP is answered without the handler.
int dp_serve(struct dp_chan *c, uint32_t gen, dp_handler fn, void *arg, const volatile int *stop, int idle_ms);
// wake a dp_serve sleeping on the object (after setting *stop)
void dp_kick(struct dp_chan *c);
// work for the worker's idle spin: while no request is pending and it would
// spin (not sleep), dp_serve calls idle(arg) until it returns 0, looking
// for a request between calls (so each call should take a microsecond or
// two); the ane-worker pulls the weights of the kernel it expects next into
// the caches there. NULL: none.
void dp_set_idle(struct dp_chan *c, int (*idle)(void *arg), void *arg);
// from within idle: 1 when a request has come since dp_serve last looked
// (the idle work should return at once; a load of a line, cheap until the
// client writes it)
int dp_bell_rung(const struct dp_chan *c);

// --- both -------------------------------------------------------------------------------
const char *dp_id(const struct dp_chan *c);
// the arena (64-byte aligned) and its size in bytes; NULL and 0 when the
// object has none
void *dp_arena(const struct dp_chan *c, size_t *bytes);
// the pages of arena bytes [off, off + n) present in this mapping before
// a step writes them (hugemem.h's ad_prefault): a shared page the other
// process already holds still costs this one a fault of its own, 26-31 us
// in a VM, and a first prefill chunk's output rows took ~250 of them in
// the worker. A bitmap of the pages done so far makes every later call a
// few bit tests. For one thread of the process (the worker's serving
// one); a range outside the arena is ignored.
void dp_arena_ready(struct dp_chan *c, uint64_t off, uint64_t n);
// the doorbell of this mapping (default: futex where the system has it,
// else sleep; ANEDVD_DP_DOORBELL=sleep selects the fallback)
void dp_set_bell(struct dp_chan *c, enum dp_bell b);
enum dp_bell dp_get_bell(const struct dp_chan *c);
// bounded spins before sleeping, in ns (defaults: ANEDVD_DP_SPIN_US for
// the caller's wait on a reply, 10 us; ANEDVD_DP_SERVE_SPIN_US for the
// worker's wait for the next request, 100 us). The caller's spin uses the
// pause hint for its first ANEDVD_DP_YIELD_US (10 us), then yields between
// looks; the worker's yields from the start (ANEDVD_DP_SERVE_YIELD_US: pause
// this long first).
void dp_set_spin(struct dp_chan *c, uint32_t call_ns, uint32_t serve_ns);
// what the caller has learned of its replies' lateness against
// dp_call_expect's guesses, ns: a running mean and mean deviation, apart for
// the calls it slept through until due (slept 1) and the others (0)
void dp_lateness(const struct dp_chan *c, int slept, int64_t *over_ns, int64_t *dev_ns);
// 1 while pid names a live process that is not a zombie
int dp_pid_alive(uint32_t pid);

#endif
