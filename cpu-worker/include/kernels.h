// kernels.h - what the decode loop asks of a kernel backend.
//
// The cpu-worker runs everything but the projections. A kernel backend owns
// the projection kernels of one model, each compiled for a fixed number of
// columns (the width, default 64): decode fills column 0, prefill up to the
// width, and a batched step one column per sequence. Backends:
//
//   kb_local   in this process: the ane-worker's own service
//              (ane-worker/ane-service.h) on threads of this process,
//              listening on nng inproc://, reached through kb_remote and
//              the data plane like the process. Used by tests, the
//              diagnostic commands and the cpu-worker's --backend emu. It
//              composes the two workers, so it is cli/kb-local.c (library
//              anedvd_kblocal): this folder's library links nothing of the
//              ane-worker.
//   kb_remote  the anedvd-ane-worker process: nng (proto/ane.proto) as the
//              control plane, kernel calls through a shared-memory data
//              plane (common/dataplane.h), shared-memory surfaces;
//              survives worker restarts by waiting for the replacement and
//              re-issuing the call.
//   kb_exact   fp32 projections with the reference engine's dequantised
//              weights: isolates the CPU-side code from fp16 kernels.
//
// Kernels per layer and what they compute (x is the normed residual; no
// biases anywhere: the CPU adds them):
//   QKV      x[n_embd] -> [q (n_head*hd); k (n_head_kv*hd); v (n_head_kv*hdv)]
//   O        attn[n_head*hdv] -> [n_embd]
//   (an lfm2 ShortConv block has QKV = in_proj x -> [B; C; X] (3 n_embd)
//   and O = out_proj [n_embd] -> [n_embd]; the conv runs on the CPU)
//   FFN      x -> down(act(gate x) * up x)      (fused; act silu or gelu-tanh)
//   GATE_UP  x -> [gate x; up x]                 (split form, --split)
//   DOWN     h[n_ff] -> [n_embd]                 (split form)
//   SHEXP    x -> shared expert FFN (MoE), fused like FFN
// and the LM head in chunks: x -> logits[row_offset .. row_offset+out).
// A layer has either FFN or GATE_UP+DOWN (or neither, for a MoE layer
// without a shared expert).
#ifndef AD_KERNELS_H
#define AD_KERNELS_H

#include <stdint.h>

#include "err.h"
#include "model.h"
#include "plan.h" // enum ane_kind: the kernel kinds
#include "resnorm.h"
#include "surface.h"

#define KB_SURF_LAZY AD_SURFACE_LAZY // surface_new: pages on first use

struct kb_info {
	int id;
	enum ane_kind kind;
	int layer; // -1 for the LM head
	int chunk; // LM head chunk
	int in_ch, out_ch;
	int row_offset; // LM head
	uint64_t weight_bytes;
	uint64_t compile_us;
};

struct kb_timing {
	uint64_t exec_ns;  // inside the backend
	uint64_t total_ns; // the whole call, as the caller saw it
	// the call's (on its first step; 0 on the others and where unknown):
	// from the request posted to the backend's side taking it, and from
	// the reply written to the caller seeing it (kb_remote's data plane)
	uint64_t pickup_ns, reply_ns;
};

struct kb_opts {
	int width;           // columns per kernel (0: 64)
	int split;           // split FFN instead of fused
	int threads;         // emu threads (0: 2)
	const char *url;     // kb_remote: the ane-worker's URL
	int timeout_ms;      // kb_remote: per call, before a retry (0: 30000)
	int deadline_ms;     // kb_remote: give up on a worker that stays away (0: 120000)
	long instance;       // kb_remote: pid used in surface ids
	int weights;         // kernel weights (enum ane_wfmt): 0 fp16, 1 int8; kb_remote: the ane-worker's
	int no_dataplane;    // kb_remote: every call over nng (also ANEDVD_DATAPLANE=0)
	const char *backend; // kb_local: the builder's backend, "emu" (NULL) or "ane" (a macOS build)
	int quiet;           // kb_remote: the data plane's attachment logged at debug level (kb_local sets it)
};

enum kb_step_kind {
	KB_KERNEL = 0,  // run kernel id on the first ncols columns of in, writing out
	KB_RESNORM = 1, // resnorm.h's step on ncols columns: y read from in (NULL:
			// none), xn written to out (NULL: none), x_in -> x_out
};

// one step of a list. A KB_RESNORM step's host vectors (x_in, x_out
// [ncols][rn.E], rn's bias, post and w) come from kb_host_alloc, so the
// backend's side can reach them: kb_remote runs the step in the ane-worker,
// between the kernels of the same call; a step whose x_out overlaps its
// x_in without being it is refused (a re-posted call must find its inputs
// as they were).
//
// A KB_KERNEL step may name host rows too: x_in ([ncols][in_ld] fp32, each
// value taken as the fp16 the surface would hold) in place of what in
// holds, and/or x_out ([ncols][out_ld]: the output's fp16 values as fp32)
// written instead of out, whose content is then unspecified. The surfaces
// are still named (a device kernel reads and writes them). Host rows come
// from kb_host_alloc; a backend with host_io set moves them itself (the
// data plane: the emu reads and writes them directly, sparing a one-column
// call the planar surfaces' line per channel on both sides), any other
// through the surfaces. An input and output that overlap are refused.
struct kb_step {
	int id;
	struct ad_surface *in, *out;
	int ncols;
	int kind; // enum kb_step_kind
	const float *x_in;
	float *x_out;
	struct ad_resnorm rn;
	int in_ld, out_ld; // a KB_KERNEL step's host rows (0: its channels)
	// a KB_RESNORM step's y and xn as host rows [ncols][rn.E] from
	// kb_host_alloc, in place of in and out (NULL: through them); xn's
	// rows hold fp32 values, which a kernel step taking them as its x_in
	// rounds to fp16 as a surface would
	const float *y_rows;
	float *xn_rows;
};

struct kernel_backend {
	const char *name; // "emu", "ane", "exact", "remote:emu"
	int width;
	int n_kernels;
	const struct kb_info *kernels;
	uint32_t compile_count;
	uint64_t compile_ms;
	// a surface the backend can read/write (shared memory for kb_remote).
	// The backend owns it: it keeps its own copy of *s and closes it in
	// free(); the caller never calls surface_close on it. flags: 0, or
	// KB_SURF_LAZY for one the calls may never write (their output goes to
	// host rows): its pages come on first use rather than all at once
	int (*surface_new)(struct kernel_backend *kb, const char *name, int channels, unsigned flags,
	                   struct ad_surface *s, char *err);
	// run kernel id on the first ncols columns of in, writing out
	int (*call)(struct kernel_backend *kb, int id, struct ad_surface *in, struct ad_surface *out, int ncols,
	            struct kb_timing *t, char *err);
	// run n kernels in order, with no CPU work between them: one round
	// trip for kb_remote; t (NULL or n entries) gets each step's exec_ns,
	// and total_ns adding up to the whole call. On an error the steps
	// before the failing one have run. NULL: kb_call_list loops over call.
	int (*call_list)(struct kernel_backend *kb, const struct kb_step *steps, int n, struct kb_timing *t, char *err);
	// n floats of host memory (64-byte aligned, zeroed, freed with the
	// backend) that both this process and the backend's side can read and
	// write: KB_RESNORM steps' vectors. kb_remote: the data-plane object's
	// arena, sized by kb_host_floats (NULL with err when it is spent; over
	// nng, this process's memory). NULL: use kb_host_alloc's default.
	float *(*host_alloc)(struct kernel_backend *kb, size_t n, char *err);
	// a KB_RESNORM step run in this process (NULL: kb_resnorm_planar, on
	// the surfaces' fp16 planes); kb_exact's reads and writes its fp32 twins
	int (*resnorm)(struct kernel_backend *kb, const struct kb_step *st, char *err);
	void (*free)(struct kernel_backend *kb);
	int host_io; // a kernel step's host rows cost no more than its surfaces (kb_step)
	void *priv;
	struct kb_host *host; // kb_host_alloc's blocks in this process
	float *scratch;       // kb_call_loop's KB_RESNORM steps: gathered y and xn
	size_t scratch_cap;
};

// The surfaces a backend handed out, which it owns: kb_surfaces_reserve
// makes room for one more before the surface is created (so a failure
// leaves nothing to undo), kb_surfaces_keep records the caller's copy, and
// kb_surfaces_free closes them all.
struct kb_surfaces {
	struct ad_surface *v;
	int n, cap;
};
int kb_surfaces_reserve(struct kb_surfaces *l, char *err);
void kb_surfaces_keep(struct kb_surfaces *l, const struct ad_surface *s);
void kb_surfaces_free(struct kb_surfaces *l);

struct kernel_backend *kb_local_new(const struct model *m, const struct kb_opts *o, char *err);
struct kernel_backend *kb_remote_new(const struct model *m, const struct kb_opts *o, char *err);
struct kernel_backend *kb_exact_new(const struct model *m, const struct kb_opts *o, char *err);

// kb->call_list, or one kb->call per step when the backend has none
int kb_call_list(struct kernel_backend *kb, const struct kb_step *steps, int n, struct kb_timing *t, char *err);
// the loop over kb->call (and KB_RESNORM steps here), for backends whose
// list is no faster
int kb_call_loop(struct kernel_backend *kb, const struct kb_step *steps, int n, struct kb_timing *t, char *err);

// host memory for KB_RESNORM steps: kb->host_alloc, or this process's (kept
// on a list the backend frees with kb_host_free)
float *kb_host_alloc(struct kernel_backend *kb, size_t n, char *err);
void kb_host_free(struct kernel_backend *kb);
// the host floats an engine of this model and width may take (the residual
// rows, the norms' and biases' vectors, with their alignment), for a
// backend that sizes its host memory up front
size_t kb_host_floats(const struct model *m, int width);
// and the host rows of a kernel step (kb_step) the engine may take: QKV's
// output (qkv channels at most), O's input (o), the logits (head rows), a
// split FFN's GATE_UP output, which is DOWN's input (gate_up), and the y
// and xn rows of a fused call's resnorm steps
size_t kb_host_rows_floats(const struct model *m, int width, size_t qkv, size_t o, size_t head, size_t gate_up);


// kb_remote: an empty round trip, through the data plane (a NOP) or with
// via_nng over the control plane (Health); -1 with a message
int kb_remote_ping(struct kernel_backend *kb, int via_nng, char *err);
void kb_remote_stop(void); // the process is stopping: a call waiting for a worker gives up

// kb_find: the id of (kind, layer, chunk), or -1
int kb_find(const struct kernel_backend *kb, enum ane_kind kind, int layer, int chunk);

#endif
