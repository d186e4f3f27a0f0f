// engine.c - the decode loop: CPU steps around the backend's projections.
//
// A call to engine_forward runs the whole model over up to width columns.
// Per layer: RMSNorm of every column into the QKV surface, one QKV call,
// then per column biases, q/k norms, RoPE and the cache write, attention
// per column and KV head over the column's own sequence's cache (spread
// over the engine's threads), one O call, residual; the same
// for the FFN (one FFN call, or GATE_UP, activation, DOWN; or for a MoE
// layer the router and routed experts here and one SHEXP call). The final
// norm and the LM head run only on the columns whose logits are wanted; the
// head's chunks are one list of kernels (kb_call_list: one round trip on
// kb_remote), each chunk writing a surface of its own, gathered straight
// into the logits at its row offset. Every other kernel is followed by CPU
// work the next one needs, so it is a call of its own.
//
// The CPU arithmetic is ref.c's, in ref.c's order (rmsnorm's double sum,
// RoPE angles as a float running product, gemma's q pre-scale, the GELU
// table, the router's softmax), so that with kb_exact the fp16 cache is
// the one difference. Keep the two in step when either changes.
#include "engine.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "attention.h"
#include "clock.h"
#include "deltanet.h"
#include "dequant.h"
#include "fit.h"
#include "fp16.h"
#include "gguf.h"
#include "hugemem.h"
#include "layout.h"
#include "log.h"
#include "moe.h"
#include "numeric.h"
#include "plan.h"
#include "pool.h"
#include "resnorm.h"
#include "trace.h"
#include "wtype.h"

struct eng_surf {
	struct ad_surface s;
	struct ane_layout l;
	float *shadow; // kb_exact's fp32 twin, or NULL
	int out;       // written by kernels (1) or read by them (0)
	int tag;       // 0, or 1 + the LM head chunk whose output this is
};

struct eng_layer {
	const float *attn_norm, *bq, *bk, *bv, *bo, *q_norm, *k_norm, *post_attn_norm;
	const float *ffn_norm, *post_ffw_norm;
	const float *gate_inp, *gate_inp_shexp; // router and shared-expert gate (experts: moe.c)
	int qkv, o, ffn, gate_up, down, shexp;  // kernel ids, -1 when absent
	const float *conv_w;                    // lfm2 ShortConv taps [n_embd][n_conv] (qkv/o are in_proj/out_proj)
	int conv;
	// qwen35: a gated delta-net block (qkv gives [q k v channels; z; beta;
	// alpha], o is ssm_out; its state at st_off of a sequence's state), or
	// attention whose q rows are per head q then an output gate (qw = 2 nq)
	int recur, attn_gate, qw;
	struct dn_layer dn;
	size_t st_off;
	// the layer's shapes (gemma4's differ per layer; a shared layer has nk =
	// nv = 0 in its QKV and attends over its kv_src's cache at kv_off)
	int hd, hdv, n_rot, nq, nk, nv, nqv, nqkv, ff, own_kv, kv_nk;
	const float *rope_freqs;                              // the factors this layer uses, or NULL
	const float *out_scale, *pl_gate, *pl_proj, *pl_norm; // gemma4
	// fused calls: the vectors of the layer's KB_RESNORM steps, in the
	// backend's host memory (copies of attn_norm, ffn_norm, the post-norms, bo)
	const float *h_attn_norm, *h_ffn_norm, *h_post_attn, *h_post_ffw, *h_bo;
	size_t kv_off; // this layer's part of a sequence's cache: K then V, or a ShortConv's B*X rows
	int windowed;  // its rows are read only kv_window positions back (engine_kv_window)
	int sliding, use_rope;
	float rope_base, rope_freq_scale;
	int rope_conf; // index of (base, scale) among the model's distinct ones
};

// From 2^18 multiply-adds of q·k a layer's attention wakes the threads
// (about 80 us on one thread; a worker's wake-up costs up to ~50 us on a
// VM whose idle vCPU halts)
#define ATTN_POOL_WORK (1 << 18)

struct engine {
	const struct model *m;
	struct kernel_backend *kb;
	struct model_hparams hp;
	int width, max_seq, attn_ref, kv_f32;
	int64_t attn_pool_work;   // engine_opts.attn_pool_work
	int64_t attn_parts_work;  // engine_opts.attn_parts_work
	int upto;                 // layers to run (engine_eval_layers), 0: all
	struct kv_store *spare;   // engine_warm's store, for the next sequence
	size_t kv_elem, layer_kv; // bytes per cache value, per attention layer of a sequence
	size_t seq_kv;            // bytes of a sequence's cache, every layer
	int kv_window;            // positions a windowed layer reads back, its own included (0: none)
	int E, V, nq, nk, nv, nqv, nqkv, ff, fe;
	size_t embd_row_bytes;
	// token_embd rows read from the file (pread) rather than through the
	// mapping, where a row's fault maps its whole page-cache folio (up to
	// 2 MiB each on ext4): -1 when the model is not one mapped file
	int embd_fd;
	uint64_t embd_off;
	uint8_t *embd_row;
	const float *output_norm, *rope_freqs;
	const float *pl_model_proj, *pl_proj_norm; // gemma4's per-layer inputs
	size_t pl_row_bytes;                       // a row of per_layer_token_embd
	int P, LP;                                 // n_embd_pl, n_layer * n_embd_pl
	float *pl;                                 // [width][LP]
	float *pl_row;                             // [LP]: a token's per_layer_token_embd row
	float *ones;                               // [head_dim]: gemma4's unweighted V norm
	int gemma4;
	float *gate;           // [width][nq]: qwen35's attention output gates
	size_t st_floats;      // a sequence's recurrent state (every delta-net layer), 0: none
	int st_every, st_keep; // its kept copies: at positions that are multiples of st_every, the last st_keep
	float *dn_scratch;
	struct eng_layer *layers;
	// fused calls (see "one call per layer" below): the residual stream in
	// three rows of the backend's host memory, hx[hcur] the current one
	int fused;
	float *hx[3];
	int hcur;
	const float *h_output_norm;
	// and when the backend moves a kernel's host rows itself (kb host_io):
	// QKV's output and O's input are the rows qkv and att (host_rows), in
	// its host memory (no surface between them and the kernels: a planar
	// one costs a cache line per channel each side); fused or not, the
	// LM head writes the logits into h_logits [width][V] there
	int rows_ok; // the backend moves host rows and ANEDVD_HOST_ROWS is not 0
	int host_rows;
	int host_hb; // and hb is too: a split FFN's GATE_UP output and DOWN's input
	// and a fused call's kernels hand their outputs to its resnorm steps,
	// and those their norms to the next kernels, as the host rows hy and
	// hxn [width][E] (host_rn): no surface between the steps of a call
	float *hy, *hxn;
	int host_rn;
	float *h_logits;
	// engine_logits_alloc's rows [l_floats], which the LM head writes
	// into directly when forward's logits are there (no copy from h_logits)
	float *l_rows;
	size_t l_floats;
	struct kb_step *fsteps; // a fused call's steps: 4 + the LM head's chunks
	struct kb_timing *ft;
	int *head, n_head; // LM head kernels in row order
	int max_head_rows;
	struct kb_step *head_steps; // the LM head as one list (each chunk its own output)
	struct kb_timing *head_t;

	struct eng_surf *surf;
	int nsurf;
	int *k_in, *k_out; // per kernel id: surface index

	// scratch: [width][...] activations
	float *x, *xn, *qkv, *att, *proj, *hb, *ffo;
	float **attn_scratch; // one per thread, [0] the caller's: for attn_cols columns
	int attn_cols;        // the most columns of one sequence in one attention call
	int *runs;            // a layer's runs of columns: [2 * r] first column, [2 * r + 1] count
	// a long context's one column in parts of its rows (attn_part): each
	// part's output ([ATTN_PARTS_MAX][nqv]) and lse ([ATTN_PARTS_MAX][n_head])
	float *attn_po, *attn_lse;
	int attn_parted; // the layers that went in parts (engine_attn_parted)
	float *cs;       // [n_conf][width][n_rot]: cos/sin of each column, computed once per call
	int n_conf;
	struct moe *moe;
	int *pos, *wanted;
	struct engine_seq **cols, **batch;

	// attention threads (common/pool.h): a job is every (column, KV head)
	// of one layer, items claimed by the caller and the workers that are
	// awake; the caller waits for the items, never for a worker that has
	// not started. NULL with one thread.
	struct ad_pool *pool;

	void **bufs;
	int nbufs, capbufs;
	struct gen_timings t;
};

// a sequence's rows, which the sequences forked from it read too
struct kv_store {
	uint8_t *kv;
	int refs;  // its sequence, and every sequence forked from it
	int floor; // rows [0, floor) are read by forks: rewriting them copies first
	int ready; // rows [split, ready) of every layer are on present pages (kv_ready)
};

static void store_release(struct kv_store *st);

struct engine_seq {
	struct engine *e;
	uint8_t *kv; // own->kv: per layer at its kv_off: K [max_seq][nk], then V [max_seq][nv];
		     // a ShortConv layer: B*X [max_seq][n_embd] (its conv state, kept
		     // per position so that truncating a sequence needs nothing more)
	struct kv_store *own;
	// a fork reads its rows below split from its parent's store (base, kv0);
	// kv0 is kv and split 0 otherwise
	struct kv_store *base;
	const uint8_t *kv0;
	int split;
	int32_t *tokens;
	int len;
	int pending; // columns in the current call
	// a recurrent model's state: st[cur] after position st_len (= len when
	// usable), st[cur ^ 1] the one a call writes (the call's commit flips
	// cur); ck[i] the state after position ck_pos[i] (-1: none), kept
	// every st_every positions so that truncating has somewhere to go
	float *st[2], *ck;
	int cur, st_len, *ck_pos;
	struct gen_timings t;
};


// --- ref.c's arithmetic (common/numeric.h) -------------------------------------------

static void
rope_angles(const struct engine *e, const struct eng_layer *L, int pos, float *cs)
{
	struct model_hparams hp = e->hp;
	hp.n_rot = L->n_rot;
	model_rope_angles(&hp, L->rope_base, L->rope_freq_scale, L->rope_freqs, pos, cs);
}

static void
rope(const struct engine *e, const struct eng_layer *L, float *v, int64_t n_heads, const float *cs)
{
	ad_rope(v, n_heads, L->hd, L->n_rot, e->hp.rope == MODEL_ROPE_NEOX, cs);
}

// --- setup ---------------------------------------------------------------------------

static int fused_setup(struct engine *e, char *err);

static void *
eng_alloc(struct engine *e, size_t n, char *err)
{
	if (e->nbufs == e->capbufs) {
		int cap = e->capbufs ? 2 * e->capbufs : 64;
		void **b = realloc(e->bufs, (size_t)cap * sizeof *b);
		if (!b)
			return ad_err(err, "out of memory"), NULL;
		e->bufs = b;
		e->capbufs = cap;
	}
	void *p = calloc(1, n ? n : 1);
	if (!p)
		return ad_err(err, "out of memory (%zu bytes)", n), NULL;
	e->bufs[e->nbufs++] = p;
	return p;
}

static int
deq(struct engine *e, const struct model_tensor *t, const float **out, char *err)
{
	*out = NULL;
	if (!t->name)
		return 0;
	int64_t n = model_tensor_nelem(t);
	if (n <= 0 || (uint64_t)n > SIZE_MAX / sizeof(float))
		return ad_err(err, "tensor %s: bad size", t->name);
	float *d = eng_alloc(e, (size_t)n * sizeof(float), err);
	if (!d)
		return -1;
	if (ad_dequant(t->type, t->data, d, n, err))
		return ad_err_prefix(err, "tensor %s", t->name);
	model_drop_range(e->m, t->data, t->nbytes); // the folio it sits in, copied by now
	*out = d;
	return 0;
}

void
engine_free(struct engine *e)
{
	if (!e)
		return;
	ad_pool_free(e->pool);
	store_release(e->spare);
	for (int i = 0; i < e->nbufs; i++)
		free(e->bufs[i]);
	free(e->bufs);
	free(e->layers);
	free(e->head);
	free(e->surf);
	free(e->k_in);
	free(e->k_out);
	moe_free(e->moe);
	if (e->embd_fd >= 0)
		close(e->embd_fd);
	free(e->embd_row);
	free(e);
}

#define TAG_O_IN (1 << 20)          // fused calls: O's input, a surface of its own
#define TAG_DOWN_IN ((1 << 20) + 1) // and a split FFN's DOWN's

// the surface (direction, channels, tag), made on first use: kernels with
// the same shape share one, except the LM head's chunks, which run as one
// list and so each write a surface of their own (tag)
static int
surface_for(struct engine *e, int out, int channels, int tag, char *err)
{
	for (int i = 0; i < e->nsurf; i++)
		if (e->surf[i].out == out && e->surf[i].s.channels == (size_t)channels && e->surf[i].tag == tag)
			return i;
	struct eng_surf *sf = &e->surf[e->nsurf];
	char name[32];
	if (tag == TAG_O_IN)
		snprintf(name, sizeof name, "x%d-o", channels);
	else if (tag == TAG_DOWN_IN)
		snprintf(name, sizeof name, "x%d-d", channels);
	else if (tag)
		snprintf(name, sizeof name, "%s%d-h%d", out ? "y" : "x", channels, tag - 1);
	else
		snprintf(name, sizeof name, "%s%d", out ? "y" : "x", channels);
	// the LM head writes its logits as host rows where it can (engine_new):
	// its surfaces, 6 MiB a chunk of 49152 rows at 64 columns, then stay
	// empty, so their pages come on first use, if any
	unsigned flags = out && tag > 0 && tag < TAG_O_IN && e->rows_ok ? KB_SURF_LAZY : 0;
	if (e->kb->surface_new(e->kb, name, channels, flags, &sf->s, err))
		return ad_err_prefix(err, "surface %s", name);
	if (ane_layout_from_strides(&sf->l, sf->s.channels, 1, sf->s.width, 2, sf->s.row_stride, sf->s.plane_stride, 0,
	                            1, err))
		return ad_err_prefix(err, "surface %s", name);
	if ((int)sf->s.width < e->width || sf->s.channels != (size_t)channels)
		return ad_err(err, "surface %s: %zu x %zu, need %d x %d", name, sf->s.channels, sf->s.width, channels,
		              e->width);
	sf->out = out;
	sf->tag = tag;
	sf->shadow = kb_exact_shadow(e->kb, &sf->s);
	return e->nsurf++;
}

// a kernel of the backend, checked against the shape the model implies
static int
kernel(struct engine *e, enum ane_kind kind, int layer, int in, int out, int required, int *id, char *err)
{
	static const char *names[] = {"?", "qkv", "o", "ffn", "gate_up", "down", "lm_head", "shexp", "probe"};
	*id = -1;
	for (int i = 0; i < e->kb->n_kernels; i++) {
		const struct kb_info *k = &e->kb->kernels[i];
		if (k->kind != kind || k->layer != layer)
			continue;
		if (k->in_ch != in || k->out_ch != out)
			return ad_err(err, "kernel %s of layer %d is %d -> %d, the model needs %d -> %d", names[kind],
			              layer, k->in_ch, k->out_ch, in, out);
		*id = i;
		return 0;
	}
	if (required)
		return ad_err(err, "the backend has no %s kernel for layer %d", names[kind], layer);
	return 0;
}

// token_embd inside the model's file mapping: read its rows with pread
static int
embd_file(struct engine *e, const struct model *m, char *err)
{
	size_t len = 0;
	uint64_t off = 0;
	const uint8_t *map = m->gguf ? gguf_file_map(m->gguf, &len, &off) : NULL;
	const uint8_t *t = m->tok_embd.data;
	size_t bytes = (size_t)m->hp.n_vocab * e->embd_row_bytes;
	if (!map || !t || t < map || (size_t)(t - map) > len || bytes > len - (size_t)(t - map))
		return 0;
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0; // the mapping still works
	if (!(e->embd_row = malloc(e->embd_row_bytes))) {
		close(fd);
		return ad_err(err, "out of memory");
	}
	e->embd_fd = fd;
	e->embd_off = (uint64_t)(t - map);
	return 0;
}

struct engine *
engine_new(const struct model *m, struct kernel_backend *kb, const struct engine_opts *o, char *err)
{
	struct engine *e = calloc(1, sizeof *e);
	if (!e)
		return ad_err(err, "out of memory"), NULL;
	e->embd_fd = -1;
	const struct model_hparams *hp = &m->hp;
	e->m = m;
	e->kb = kb;
	e->hp = *hp;
	e->width = kb->width;
	e->max_seq = o && o->max_seq > 0 ? o->max_seq : 2048;
	e->attn_ref = o && o->attn_ref;
	e->attn_pool_work = o && o->attn_pool_work > 0 ? o->attn_pool_work : ATTN_POOL_WORK;
	e->attn_parts_work = o && o->attn_parts_work > 0 ? o->attn_parts_work : 4 * ATTN_POOL_WORK;
	e->kv_f32 = o && o->kv_f32;
	e->kv_elem = e->kv_f32 ? 4 : 2;
	const int threads = o && o->threads > 0 ? (o->threads < 64 ? o->threads : 64) : 1;
	e->gemma4 = m->arch == MODEL_ARCH_GEMMA4;
	if (hp->act == MODEL_ACT_GELU)
		ad_gelu_init();
	e->E = (int)hp->n_embd;
	e->V = (int)hp->n_vocab;
	e->nq = (int)(hp->n_head * hp->head_dim);
	e->nk = (int)(hp->n_head_kv * hp->head_dim);
	e->nv = (int)(hp->n_head_kv * hp->head_dim_v);
	e->nqv = (int)(hp->n_head * hp->head_dim_v);
	e->nqkv = e->nq + e->nk + e->nv;
	e->ff = (int)hp->n_ff;
	e->fe = (int)hp->n_ff_exp;
	e->layer_kv = (size_t)e->max_seq * (size_t)(e->nk + e->nv) * e->kv_elem;
	const int E = e->E, W = e->width;
	if (W < 1 || W > 4096) {
		ad_err(err, "backend width %d", W);
		goto fail;
	}
	if (ad_type_row_bytes(m->tok_embd.type, E, &e->embd_row_bytes) || E % ad_type_block_size(m->tok_embd.type)) {
		ad_err(err, "token_embd: rows of %d %s values are not whole blocks", E, ad_type_name(m->tok_embd.type));
		goto fail;
	}
	if (embd_file(e, m, err))
		goto fail;

	e->layers = calloc((size_t)hp->n_layer, sizeof *e->layers);
	e->head = calloc((size_t)kb->n_kernels + 1, sizeof *e->head);
	e->surf = calloc((size_t)kb->n_kernels * 2 + 2, sizeof *e->surf);
	e->k_in = calloc((size_t)kb->n_kernels + 1, sizeof *e->k_in);
	e->k_out = calloc((size_t)kb->n_kernels + 1, sizeof *e->k_out);
	if (!e->layers || !e->head || !e->surf || !e->k_in || !e->k_out) {
		ad_err(err, "out of memory");
		goto fail;
	}
	const struct model_tensor *fac = model_rope_factors(m, e->max_seq);
	if (deq(e, &m->output_norm, &e->output_norm, err) || (fac && deq(e, fac, &e->rope_freqs, err)) ||
	    deq(e, &m->pl_model_proj, &e->pl_model_proj, err) || deq(e, &m->pl_proj_norm, &e->pl_proj_norm, err))
		goto fail;
	if (e->pl_model_proj) {
		e->P = (int)hp->n_embd_pl;
		e->LP = (int)(hp->n_layer * hp->n_embd_pl);
		if (ad_type_row_bytes(m->pl_tok_embd.type, e->LP, &e->pl_row_bytes) ||
		    e->LP % ad_type_block_size(m->pl_tok_embd.type)) {
			ad_err(err, "per_layer_token_embd: rows of %d values are not whole blocks", e->LP);
			goto fail;
		}
	}

	for (int il = 0; il < hp->n_layer; il++) {
		const struct model_layer *ml = &m->layers[il];
		struct eng_layer *L = &e->layers[il];
		if (deq(e, &ml->attn_norm, &L->attn_norm, err) || deq(e, &ml->bo, &L->bo, err) ||
		    deq(e, &ml->q_norm, &L->q_norm, err) || deq(e, &ml->k_norm, &L->k_norm, err) ||
		    deq(e, &ml->post_attn_norm, &L->post_attn_norm, err) || deq(e, &ml->ffn_norm, &L->ffn_norm, err) ||
		    deq(e, &ml->post_ffw_norm, &L->post_ffw_norm, err) || deq(e, &ml->gate_inp, &L->gate_inp, err) ||
		    deq(e, &ml->gate_inp_shexp, &L->gate_inp_shexp, err))
			goto fail;
		if (ml->bqkv.name) {
			const float *b;
			if (deq(e, &ml->bqkv, &b, err))
				goto fail;
			L->bq = b;
			L->bk = b + e->nq;
			L->bv = b + e->nq + e->nk;
		} else if (deq(e, &ml->bq, &L->bq, err) || deq(e, &ml->bk, &L->bk, err) ||
		           deq(e, &ml->bv, &L->bv, err)) {
			goto fail;
		}
		L->sliding = ml->sliding;
		L->use_rope = ml->use_rope;
		L->rope_base = ml->rope_base;
		L->rope_freq_scale = ml->rope_freq_scale;
		L->conv = ml->conv;
		L->recur = ml->recur;
		L->attn_gate = ml->attn_gate;
		L->hd = (int)ml->head_dim;
		L->hdv = (int)ml->head_dim_v;
		L->n_rot = (int)ml->n_rot;
		L->ff = (int)ml->n_ff;
		L->own_kv = ml->kv_src == il;
		L->nq = (int)hp->n_head * L->hd;
		L->nqv = (int)hp->n_head * L->hdv;
		L->kv_nk = (int)hp->n_head_kv * L->hd; // the cache's K row, also for a shared layer
		L->nk = L->own_kv ? L->kv_nk : 0;
		L->nv = L->own_kv ? (int)hp->n_head_kv * L->hdv : 0;
		L->qw = L->attn_gate ? 2 * L->nq : L->nq;
		L->nqkv = L->qw + L->nk + L->nv;
		L->rope_freqs = ml->rope_factors ? e->rope_freqs : NULL;
		if (L->recur) {
			const float *cw, *dt, *a, *nw;
			if (deq(e, &ml->dn_conv, &cw, err) || deq(e, &ml->dn_dt, &dt, err) ||
			    deq(e, &ml->dn_a, &a, err) || deq(e, &ml->dn_norm, &nw, err))
				goto fail;
			L->dn = dn_layer_of(hp, cw, dt, a, nw);
			L->nqkv = L->dn.channels + L->dn.n_v * L->dn.d + 2 * L->dn.n_v;
			L->nqv = L->dn.n_v * L->dn.d;
			L->own_kv = 0;
			L->nk = L->nv = L->kv_nk = 0;
			L->st_off = e->st_floats;
			e->st_floats += dn_state_floats(&L->dn);
		} else if (L->own_kv || L->conv) {
			L->kv_off = e->seq_kv;
			e->seq_kv += L->conv ? (size_t)e->max_seq * (size_t)E * e->kv_elem
			                     : (size_t)e->max_seq * (size_t)(L->nk + L->nv) * e->kv_elem;
		} else {
			L->kv_off = e->layers[ml->kv_src].kv_off;
		}
		if ((L->conv && deq(e, &ml->conv_w, &L->conv_w, err)) || deq(e, &ml->out_scale, &L->out_scale, err) ||
		    deq(e, &ml->pl_gate, &L->pl_gate, err) || deq(e, &ml->pl_proj, &L->pl_proj, err) ||
		    deq(e, &ml->pl_norm, &L->pl_norm, err))
			goto fail;
		int conf = -1;
		for (int j = 0; j < il && conf < 0; j++)
			if (e->layers[j].rope_base == L->rope_base &&
			    e->layers[j].rope_freq_scale == L->rope_freq_scale && e->layers[j].n_rot == L->n_rot &&
			    e->layers[j].rope_freqs == L->rope_freqs)
				conf = e->layers[j].rope_conf;
		L->rope_conf = conf >= 0 ? conf : e->n_conf++;

		if (kernel(e, ANE_K_QKV, il, E, L->conv ? 3 * E : L->nqkv, 1, &L->qkv, err) ||
		    kernel(e, ANE_K_O, il, L->conv ? E : L->nqv, E, 1, &L->o, err))
			goto fail;
		if (L->nqkv > e->nqkv)
			e->nqkv = L->nqkv;
		if (L->nqv > e->nqv)
			e->nqv = L->nqv;
		L->ffn = L->gate_up = L->down = L->shexp = -1;
		if (L->gate_inp) {
			if (kernel(e, ANE_K_SHEXP, il, E, E, ml->gate_shexp.name != NULL, &L->shexp, err))
				goto fail;
		} else {
			if (kernel(e, ANE_K_FFN, il, E, E, 0, &L->ffn, err))
				goto fail;
			if (L->ffn < 0 && (kernel(e, ANE_K_GATE_UP, il, E, 2 * L->ff, 1, &L->gate_up, err) ||
			                   kernel(e, ANE_K_DOWN, il, L->ff, E, 1, &L->down, err)))
				goto fail;
		}
	}
	// windowed storage: a ShortConv's rows (read n_conv back), or a sliding
	// layer's cache when every layer reading it slides too
	for (int il = 0; il < hp->n_layer && hp->sliding_window > 0; il++) {
		struct eng_layer *L = &e->layers[il];
		if (!L->own_kv || L->conv || !L->sliding)
			continue;
		int all = 1;
		for (int jl = 0; jl < hp->n_layer; jl++)
			all &= m->layers[jl].kv_src != il || e->layers[jl].sliding;
		if (all) {
			L->windowed = 1;
			e->kv_window = (int)hp->sliding_window > e->kv_window ? (int)hp->sliding_window : e->kv_window;
		}
	}
	for (int il = 0; il < hp->n_layer; il++)
		if (e->layers[il].conv) {
			e->layers[il].windowed = 1;
			e->kv_window = (int)hp->n_conv > e->kv_window ? (int)hp->n_conv : e->kv_window;
		}
	// the LM head: chunks tiling [0, n_vocab) in row order
	for (int r = 0; r < e->V;) {
		int found = -1;
		for (int i = 0; i < kb->n_kernels; i++) {
			const struct kb_info *k = &kb->kernels[i];
			if (k->kind == ANE_K_LM_HEAD && k->row_offset == r && k->out_ch > 0)
				found = i;
		}
		if (found < 0) {
			ad_err(err, "the backend's LM head has no chunk starting at row %d of %d", r, e->V);
			goto fail;
		}
		if (kb->kernels[found].in_ch != E) {
			ad_err(err, "LM head chunk %d reads %d channels, not %d", kb->kernels[found].chunk,
			       kb->kernels[found].in_ch, E);
			goto fail;
		}
		e->head[e->n_head++] = found;
		int rows = kb->kernels[found].out_ch;
		e->max_head_rows = rows > e->max_head_rows ? rows : e->max_head_rows;
		r += rows;
	}

	const char *hr = getenv("ANEDVD_HOST_ROWS");
	e->rows_ok = e->kb->host_io && !(hr && strcmp(hr, "0") == 0);
	// surfaces: one per (direction, channel count)
	for (int i = 0; i < kb->n_kernels; i++) {
		const struct kb_info *k = &kb->kernels[i];
		e->k_in[i] = e->k_out[i] = -1;
		if (k->kind == ANE_K_PROBE)
			continue;
		int tag = k->kind == ANE_K_LM_HEAD ? k->chunk + 1 : 0;
		if ((e->k_in[i] = surface_for(e, 0, k->in_ch, 0, err)) < 0 ||
		    (e->k_out[i] = surface_for(e, 1, k->out_ch, tag, err)) < 0)
			goto fail;
	}
	if (!(e->head_steps = eng_alloc(e, (size_t)e->n_head * sizeof *e->head_steps, err)) ||
	    !(e->head_t = eng_alloc(e, (size_t)e->n_head * sizeof *e->head_t, err)))
		goto fail;
	for (int h = 0; h < e->n_head; h++) {
		int id = e->head[h];
		if (h > 0 && e->k_in[id] != e->k_in[e->head[0]]) {
			ad_err(err, "LM head chunk %d reads another surface than chunk 0", h);
			goto fail;
		}
		e->head_steps[h] =
			(struct kb_step){.id = id, .in = &e->surf[e->k_in[id]].s, .out = &e->surf[e->k_out[id]].s};
	}

	const size_t w = (size_t)W;
	int wide = E > e->nqv ? E : e->nqv;
	const size_t nqkv_max = (size_t)(e->nqkv > 3 * E ? e->nqkv : 3 * E);
	struct attn_shape sh = {(int)hp->n_head,
	                        (int)hp->n_head_kv,
	                        (int)hp->head_dim,
	                        (int)hp->head_dim_v,
	                        (size_t)e->nk,
	                        (size_t)e->nv,
	                        0,
	                        0};
	if (!(e->x = eng_alloc(e, w * E * 4, err)) || !(e->xn = eng_alloc(e, w * wide * 4, err)) ||
	    !(e->qkv = eng_alloc(e, w * nqkv_max * 4, err)) || !(e->att = eng_alloc(e, w * (size_t)wide * 4, err)) ||
	    !(e->proj = eng_alloc(e, w * E * 4, err)) ||
	    !(e->hb = eng_alloc(
		      e, w * 2 * (size_t)(e->ff > hp->n_embd_pl ? (e->ff > 0 ? e->ff : 1) : hp->n_embd_pl) * 4, err)) ||
	    !(e->ffo = eng_alloc(e, w * E * 4, err)) ||
	    !(e->attn_scratch = eng_alloc(e, (size_t)threads * sizeof(float *), err)) ||
	    !(e->cs = eng_alloc(e, (size_t)e->n_conf * w * (size_t)(hp->n_rot > 0 ? hp->n_rot : 1) * 4, err)) ||
	    !(e->pos = eng_alloc(e, w * sizeof(int), err)) || !(e->wanted = eng_alloc(e, w * sizeof(int), err)) ||
	    !(e->cols = eng_alloc(e, w * sizeof(void *), err)) || !(e->batch = eng_alloc(e, w * sizeof(void *), err)) ||
	    !(e->pl = eng_alloc(e, w * (size_t)(e->LP > 0 ? e->LP : 1) * 4, err)) ||
	    !(e->pl_row = eng_alloc(e, (size_t)(e->LP > 0 ? e->LP : 1) * 4, err)) ||
	    !(e->ones =
	              eng_alloc(e, (size_t)(hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v) * 4, err)) ||
	    !(e->gate = eng_alloc(e, w * (size_t)e->nq * 4, err)))
		goto fail;
	if (e->st_floats) {
		e->st_every = o && o->state_every > 0 ? o->state_every : 16;
		e->st_keep = o && o->state_keep > 0 ? o->state_keep : 6;
		size_t sc = 0;
		for (int il = 0; il < hp->n_layer; il++)
			if (e->layers[il].recur && dn_scratch_floats(&e->layers[il].dn) > sc)
				sc = dn_scratch_floats(&e->layers[il].dn);
		if (!(e->dn_scratch = eng_alloc(e, sc * 4, err)))
			goto fail;
	}
	for (int64_t i = 0; i < (hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v); i++)
		e->ones[i] = 1.0f;
	// columns of a sequence share a call while their scores fit in 4 MiB
	e->attn_cols = (int)((4u << 20) / ((size_t)sh.n_head * (size_t)e->max_seq * 4));
	e->attn_cols = e->attn_cols < 1 ? 1 : e->attn_cols > ATTN_COLS_MAX ? ATTN_COLS_MAX : e->attn_cols;
	if (!(e->runs = eng_alloc(e, w * 2 * sizeof(int), err)) ||
	    !(e->attn_po = eng_alloc(e, (size_t)ATTN_PARTS_MAX * (size_t)e->nqv * 4, err)) ||
	    !(e->attn_lse = eng_alloc(e, (size_t)ATTN_PARTS_MAX * (size_t)hp->n_head * 4, err)))
		goto fail;
	for (int i = 0; i < threads; i++)
		if (!(e->attn_scratch[i] =
		              eng_alloc(e, attn_cols_scratch_floats(&sh, e->max_seq, e->attn_cols) * 4, err)))
			goto fail;
	if (hp->n_expert > 0 && !(e->moe = moe_new(m, W, err)))
		goto fail;
	if (fused_setup(e, err))
		goto fail;
	if (e->rows_ok) {
		// fused or not, the LM head's logits as host rows: its 0.4-1.5 ms
		// of planar gather a token
		char why[AD_ERRLEN];
		if (!(e->h_logits = kb_host_alloc(e->kb, (size_t)W * (size_t)e->V, why)))
			ad_info("engine: the logits through the surfaces (%s)", why);
	}
	if (threads > 1 && !(e->pool = ad_pool_new(&(struct ad_pool_opts){threads, 0, 0, "cpu pool"}, err)))
		goto fail;
	// what the engine reads of the model is copied by now (norms, biases:
	// deq) or read on demand (embedding rows, MoE experts): the pages its
	// setup touched go, else each small tensor keeps the large folio it
	// sits in mapped (110 MB of a 270 MB SmolLM2-shaped file whose pages a
	// plain read had just brought in, against 22 MB from small pages)
	model_drop_pages(m);
	return e;
fail:
	ad_err_prefix(err, "engine");
	engine_free(e);
	return NULL;
}

int
engine_fused(const struct engine *e)
{
	return e->fused;
}

int
engine_host_rows(const struct engine *e)
{
	return e->host_rows;
}

int
engine_n_vocab(const struct engine *e)
{
	return e->V;
}

int
engine_seq_common(const struct engine_seq *s, const int32_t *p, int upto)
{
	int n = 0;
	while (n < s->len && n < upto && s->tokens[n] == p[n])
		n++;
	return n;
}

int32_t
engine_bos(const struct engine *e)
{
	return e->m->hp.bos_id >= 0 && e->m->hp.bos_id <= INT32_MAX ? (int32_t)e->m->hp.bos_id : -1;
}

int
engine_max_seq(const struct engine *e)
{
	return e->max_seq;
}

int
engine_attn_parted(const struct engine *e)
{
	return e->attn_parted;
}

int
engine_width(const struct engine *e)
{
	return e->width;
}

const struct gen_timings *
engine_timings(const struct engine *e)
{
	return &e->t;
}

// --- sequences -------------------------------------------------------------------

static struct kv_store *
store_new(size_t bytes)
{
	struct kv_store *st = calloc(1, sizeof *st);
	if (st && !(st->kv = calloc(bytes ? bytes : 1, 1))) {
		free(st);
		st = NULL;
	}
	if (st)
		st->refs = 1;
	return st;
}

// rows a sequence's cache makes present ahead of the one a call writes:
// a store is calloc'd (untouched pages cost nothing), and its rows come
// in as a call writes them. One write fault at a time costs 26-31 us on
// this project's reference VMs: the SmolLM2-135M shape's 60 K and V
// regions took 6 a decode token (0.16 ms), and a 64-token prefill 400;
// populated in bulk (ad_prefault) a page costs 2 us. So a call's rows
// and the next KV_AHEAD of every layer are populated at once, before the
// call: a decode step populates every 16th token (and the pages those
// rows end in), and a run's cache holds at most 16 rows it did not need
// (SmolLM2-135M: 0.4 MB; the peak memory target allows the run's rows).
#define KV_AHEAD 16

// rows [from, to) of every layer's K and V (or ShortConv rows) present
static void
kv_ready(const struct engine *e, struct kv_store *st, int from, int to)
{
	if (to > e->max_seq)
		to = e->max_seq;
	if (from >= to)
		return;
	for (int il = 0; il < (int)e->hp.n_layer; il++) {
		const struct eng_layer *L = &e->layers[il];
		if (L->conv) {
			const size_t r = (size_t)e->E * e->kv_elem;
			ad_prefault(st->kv + L->kv_off + (size_t)from * r, (size_t)(to - from) * r);
		} else if (L->own_kv) {
			const size_t kr = (size_t)L->nk * e->kv_elem, vr = (size_t)L->nv * e->kv_elem;
			uint8_t *kc = st->kv + L->kv_off, *vc = kc + (size_t)e->max_seq * kr;
			ad_prefault(kc + (size_t)from * kr, (size_t)(to - from) * kr);
			ad_prefault(vc + (size_t)from * vr, (size_t)(to - from) * vr);
		}
	}
	st->ready = to;
}

static void
store_release(struct kv_store *st)
{
	if (st && --st->refs == 0) {
		free(st->kv);
		free(st);
	}
}

struct engine_seq *
engine_seq_new(struct engine *e, char *err)
{
	struct engine_seq *s = calloc(1, sizeof *s);
	size_t bytes = e->seq_kv;
	if (s) {
		s->e = e;
		s->own = e->spare ? e->spare : store_new(bytes);
		e->spare = NULL;
		s->kv = s->own ? s->own->kv : NULL;
		s->kv0 = s->kv;
		s->tokens = calloc((size_t)e->max_seq, sizeof(int32_t));
	}
	if (!s || !s->own || !s->tokens) {
		engine_seq_free(s);
		return ad_err(err, "sequence: out of memory (%zu bytes of KV cache)", bytes), NULL;
	}
	if (e->st_floats) {
		const size_t sb = e->st_floats * sizeof(float);
		s->st[0] = malloc(sb);
		s->st[1] = malloc(sb);
		s->ck = malloc(sb * (size_t)e->st_keep);
		s->ck_pos = malloc((size_t)e->st_keep * sizeof *s->ck_pos);
		if (!s->st[0] || !s->st[1] || !s->ck || !s->ck_pos) {
			engine_seq_free(s);
			return ad_err(err, "sequence: out of memory (%zu bytes of recurrent state)",
			              sb * (2 + (size_t)e->st_keep)),
			       NULL;
		}
		for (int i = 0; i < e->st_keep; i++)
			s->ck_pos[i] = -1;
	}
	return s;
}

void
engine_seq_free(struct engine_seq *s)
{
	if (!s)
		return;
	store_release(s->own);
	store_release(s->base);
	free(s->tokens);
	free(s->st[0]);
	free(s->st[1]);
	free(s->ck);
	free(s->ck_pos);
	free(s);
}

// the kept states beyond position n are of another history from now on
static void
drop_states_after(struct engine_seq *s, int n)
{
	for (int i = 0; i < s->e->st_keep; i++)
		if (s->ck_pos[i] > n)
			s->ck_pos[i] = -1;
}

static void kv_copy(struct engine_seq *s, uint8_t *dst, int from, int to);

void
engine_seq_truncate(struct engine_seq *s, int n)
{
	const struct engine *e = s->e;
	if (n < 0 || n >= s->len)
		return;
	// a recurrent model goes back to the latest kept state at or before n,
	// else to the start (unless the state is n's already)
	int len = n, best = -1;
	if (e->st_floats && s->st_len != n) {
		for (int i = 0; i < e->st_keep; i++)
			if (s->ck_pos[i] > 0 && s->ck_pos[i] <= n && (best < 0 || s->ck_pos[i] > s->ck_pos[best]))
				best = i;
		len = best >= 0 ? s->ck_pos[best] : 0;
	}
	// forks read rows this sequence is about to rewrite: it copies its own
	// rows into a store of its own first and leaves them the old one
	if (s->own->refs > 1 && len < s->own->floor) {
		struct kv_store *st = store_new(e->seq_kv);
		if (!st) { // the rows the forks read stay: so does the length
			ad_warn("sequence: no memory to copy the rows forks share: kept %d tokens, not %d", s->len, n);
			return;
		}
		kv_copy(s, st->kv, s->split, len);
		store_release(s->own);
		s->own = st;
		s->kv = st->kv;
		if (!s->base)
			s->kv0 = s->kv;
	}
	s->len = len;
	if (e->st_floats) {
		if (best >= 0)
			memcpy(s->st[s->cur], s->ck + (size_t)best * e->st_floats, e->st_floats * sizeof(float));
		s->st_len = len;
		drop_states_after(s, len);
	}
	if (len < s->split)
		s->split = len;
	if (len == 0 && s->base) {
		store_release(s->base);
		s->base = NULL;
		s->kv0 = s->kv;
	}
}

void
engine_seq_reset(struct engine_seq *s)
{
	engine_seq_truncate(s, 0);
	if (s->len) // no memory to copy rows its forks share (engine_seq_truncate)
		return;
	s->st_len = 0;
	if (s->e->st_floats)
		drop_states_after(s, 0);
}

int
engine_seq_fork(struct engine_seq *child, struct engine_seq *parent, int n, char *err)
{
	const struct engine *e = parent->e;
	if (child == parent || child->e != e || child->len != 0 || n < 1 || n > parent->len)
		return ad_err(err, "fork: %d rows of a sequence of %d into one of %d", n, parent->len, child->len);
	// a recurrent model: the parent's state at n (its own, or a kept copy)
	if (e->st_floats && engine_seq_state_read(parent, n, child->st[child->cur]))
		return ad_err(err, "fork: the sequence keeps no recurrent state at %d", n);
	store_release(child->base);
	child->base = NULL;
	struct kv_store *base = parent->base ? parent->base : parent->own;
	int split = parent->base ? (n < parent->split ? n : parent->split) : n;
	// rows the parent holds in its own store past its own parent's: copied
	if (split < n)
		kv_copy(parent, child->kv, split, n);
	base->refs++;
	if (base->floor < split)
		base->floor = split;
	child->base = base;
	child->kv0 = base->kv;
	child->split = split;
	memcpy(child->tokens, parent->tokens, (size_t)n * sizeof *child->tokens);
	child->len = n;
	child->st_len = n;
	return 0;
}

int
engine_seq_shared(const struct engine_seq *s)
{
	return s->split;
}

int
engine_seq_len(const struct engine_seq *s)
{
	return s->len;
}

const int32_t *
engine_seq_tokens(const struct engine_seq *s)
{
	return s->tokens;
}

struct gen_timings *
engine_seq_timings(struct engine_seq *s)
{
	return &s->t;
}

// the per-position rows of layer il's own storage: K and V widths in
// values (a ShortConv layer keeps one row of n_embd B*X values, as "K"; a
// layer that reads another's cache keeps none)
static void
layer_rows(const struct engine *e, int64_t il, size_t *kw, size_t *vw)
{
	const struct eng_layer *L = &e->layers[il];
	*kw = *vw = 0;
	if (L->conv)
		*kw = (size_t)e->E;
	else if (L->recur)
		return;
	else if (L->own_kv)
		*kw = (size_t)L->nk, *vw = (size_t)L->nv;
}

// the layers of parts (ENGINE_KV_*): a layer with storage is windowed or full
static int
layer_in(const struct engine *e, int64_t il, int parts)
{
	return parts & (e->layers[il].windowed ? ENGINE_KV_WINDOWED : ENGINE_KV_FULL);
}

size_t
engine_kv_part_bytes(const struct engine *e, int parts)
{
	size_t b = 0;
	for (int64_t il = 0; il < e->hp.n_layer; il++) {
		size_t kw, vw;
		layer_rows(e, il, &kw, &vw);
		if (layer_in(e, il, parts))
			b += (kw + vw) * e->kv_elem;
	}
	return b;
}

size_t
engine_kv_row_bytes(const struct engine *e)
{
	return engine_kv_part_bytes(e, ENGINE_KV_ALL);
}

int
engine_kv_window(const struct engine *e)
{
	return e->kv_window;
}

// per layer of parts with storage, its K rows then its V rows (a ShortConv
// layer's B*X rows alone), each region n rows long in the packed form
void
engine_seq_kv_read_parts(const struct engine_seq *s, int parts, int pos, int n, void *dst)
{
	const struct engine *e = s->e;
	uint8_t *d = dst;
	for (int64_t il = 0; il < e->hp.n_layer; il++) {
		size_t kw, vw;
		layer_rows(e, il, &kw, &vw);
		if (!kw || !layer_in(e, il, parts))
			continue;
		const size_t kr = kw * e->kv_elem, vr = vw * e->kv_elem;
		// rows below split from the parent's store
		const int n0 = s->split - pos <= 0 ? 0 : s->split - pos < n ? s->split - pos : n;
		for (int part = 0; part < 2; part++) {
			const uint8_t *b = part == 0 ? s->kv0 : s->kv;
			const int p0 = part == 0 ? pos : pos + n0, m = part == 0 ? n0 : n - n0;
			if (!m)
				continue;
			const uint8_t *kc = b + e->layers[il].kv_off, *vc = kc + (size_t)e->max_seq * kr;
			uint8_t *dk = d + (size_t)(p0 - pos) * kr;
			memcpy(dk, kc + (size_t)p0 * kr, (size_t)m * kr);
			if (vr)
				memcpy(d + (size_t)n * kr + (size_t)(p0 - pos) * vr, vc + (size_t)p0 * vr,
				       (size_t)m * vr);
		}
		d += (size_t)n * (kr + vr);
	}
}

// copy this sequence's own rows of positions [from, to) (every layer) into
// the store kv of another sequence, at the same positions
static void
kv_copy(struct engine_seq *s, uint8_t *dst, int from, int to)
{
	const struct engine *e = s->e;
	for (int64_t il = 0; il < e->hp.n_layer && to > from; il++) {
		size_t kw, vw;
		layer_rows(e, il, &kw, &vw);
		if (!kw)
			continue;
		const size_t kr = kw * e->kv_elem, vr = vw * e->kv_elem, off = e->layers[il].kv_off;
		memcpy(dst + off + (size_t)from * kr, s->kv + off + (size_t)from * kr, (size_t)(to - from) * kr);
		if (vr) {
			const size_t vo = off + (size_t)e->max_seq * kr;
			memcpy(dst + vo + (size_t)from * vr, s->kv + vo + (size_t)from * vr, (size_t)(to - from) * vr);
		}
	}
}

void
engine_seq_kv_read(const struct engine_seq *s, int pos, int n, void *dst)
{
	engine_seq_kv_read_parts(s, ENGINE_KV_ALL, pos, n, dst);
}

// rows of parts at positions [pos, pos + n) from src (packed `stride` rows,
// starting at row off)
static void
kv_write(struct engine_seq *s, int parts, int pos, int n, const void *src, int stride, int off)
{
	struct engine *e = s->e;
	const uint8_t *b = src;
	for (int64_t il = 0; il < e->hp.n_layer; il++) {
		size_t kw, vw;
		layer_rows(e, il, &kw, &vw);
		if (!kw || !layer_in(e, il, parts))
			continue;
		const size_t kr = kw * e->kv_elem, vr = vw * e->kv_elem;
		uint8_t *kc = s->kv + e->layers[il].kv_off, *vc = kc + (size_t)e->max_seq * kr;
		memcpy(kc + (size_t)pos * kr, b + (size_t)off * kr, (size_t)n * kr);
		b += (size_t)stride * kr;
		if (vr) {
			memcpy(vc + (size_t)pos * vr, b + (size_t)off * vr, (size_t)n * vr);
			b += (size_t)stride * vr;
		}
	}
}

int
engine_seq_kv_append_parts(struct engine_seq *s, int parts, const int32_t *tokens, int n, const void *src, int stride,
                           int off, char *err)
{
	struct engine *e = s->e;
	if (n < 0 || off < 0 || off + n > stride || s->len + n > e->max_seq)
		return ad_err(err, "kv append: %d rows at %d of a block of %d do not fit after %d of %d positions", n,
		              off, stride, s->len, e->max_seq);
	for (int i = 0; i < n; i++)
		if (tokens[i] < 0 || tokens[i] >= e->V)
			return ad_err(err, "kv append: token id %d is outside the vocabulary of %d", tokens[i], e->V);
	kv_write(s, parts, s->len, n, src, stride, off);
	memcpy(s->tokens + s->len, tokens, (size_t)n * sizeof *tokens);
	s->len += n;
	return 0;
}

size_t
engine_state_bytes(const struct engine *e)
{
	return e->st_floats * sizeof(float);
}

int
engine_state_every(const struct engine *e)
{
	return e->st_every;
}

int
engine_seq_state_read(const struct engine_seq *s, int pos, void *dst)
{
	const struct engine *e = s->e;
	if (!e->st_floats || pos < 0 || pos > s->len)
		return -1;
	const size_t sb = e->st_floats * sizeof(float);
	if (pos == s->len && s->st_len == s->len) {
		if (pos == 0)
			memset(dst, 0, sb);
		else
			memcpy(dst, s->st[s->cur], sb);
		return 0;
	}
	for (int i = 0; i < e->st_keep; i++)
		if (s->ck_pos[i] == pos && pos > 0) {
			memcpy(dst, s->ck + (size_t)i * e->st_floats, sb);
			return 0;
		}
	return -1;
}

int
engine_seq_state_load(struct engine_seq *s, const void *src, char *err)
{
	const struct engine *e = s->e;
	if (!e->st_floats)
		return ad_err(err, "state load: the model keeps no recurrent state");
	memcpy(s->st[s->cur], src, e->st_floats * sizeof(float));
	s->st_len = s->len;
	return 0;
}

int
engine_seq_kv_append(struct engine_seq *s, const int32_t *tokens, int n, const void *src, int stride, int off,
                     char *err)
{
	return engine_seq_kv_append_parts(s, ENGINE_KV_ALL, tokens, n, src, stride, off, err);
}

int
engine_seq_kv_write(struct engine_seq *s, int parts, int pos, int n, const void *src, int stride, int off, char *err)
{
	if (n < 0 || pos < 0 || off < 0 || off + n > stride || pos + n > s->len)
		return ad_err(err, "kv write: %d rows at %d of a block of %d do not fit positions [%d, %d) of %d", n,
		              off, stride, pos, pos + n, s->len);
	if (pos < s->split)
		return ad_err(err, "kv write: positions below %d are a parent's", s->split);
	kv_write(s, parts, pos, n, src, stride, off);
	return 0;
}

void
engine_add_sampling(struct engine *e, struct engine_seq *s, uint64_t ns)
{
	e->t.sampling_ns += ns;
	if (s)
		s->t.sampling_ns += ns;
}

// --- one call -------------------------------------------------------------------------

struct fwd {
	uint64_t kernel_ns, call_ns, attn_ns, moe_ns, calls;
	uint64_t glue_ns; // KB_RESNORM steps inside calls: CPU work, wherever it ran
	uint64_t trips;   // calls to the backend
	// of call_ns: request posted -> taken, reply written -> seen (kb_timing)
	uint64_t pickup_ns, reply_ns;
	int trace; // trace_enabled(), read once per forward
};

static void
put(struct engine *e, int si, const float *x, int ncols, size_t ld)
{
	struct eng_surf *sf = &e->surf[si];
	if (sf->shadow) {
		for (int c = 0; c < ncols; c++)
			memcpy(sf->shadow + (size_t)c * sf->s.channels, x + (size_t)c * ld, sf->s.channels * 4);
		return;
	}
	ane_scatter_f32(&sf->l, sf->s.base, x, (size_t)ncols, ld, NULL);
}

// a wide surface (an LM head's logits, a line per channel) on the pool:
// the ane-worker is idle meanwhile
static void
get(struct engine *e, int si, float *y, int ncols, size_t ld)
{
	struct eng_surf *sf = &e->surf[si];
	if (sf->shadow) {
		for (int c = 0; c < ncols; c++)
			memcpy(y + (size_t)c * ld, sf->shadow + (size_t)c * sf->s.channels, sf->s.channels * 4);
		return;
	}
	ane_gather_f32_pool(e->pool, &sf->l, sf->s.base, y, (size_t)ncols, ld, NULL);
}

static void
trace_call(const struct engine *e, int id, const char *suffix, uint64_t t0, uint64_t t1, const struct kb_timing *t,
           int nt)
{
	const struct kb_info *k = &e->kb->kernels[id];
	char name[64];
	if (k->layer >= 0)
		snprintf(name, sizeof name, "%s L%d%s", ane_kind_name((enum ane_kind)k->kind), k->layer, suffix);
	else
		snprintf(name, sizeof name, "%s c%d%s", ane_kind_name((enum ane_kind)k->kind), k->chunk, suffix);
	// the call's parts as its args: the worker's time in its steps, and of
	// the rest, the request's way there (pickup) and the reply's way back
	double v[3] = {0, 0, 0};
	for (int i = 0; i < nt; i++) {
		v[0] += (double)t[i].exec_ns / 1e3;
		v[1] += (double)t[i].pickup_ns / 1e3;
		v[2] += (double)t[i].reply_ns / 1e3;
	}
	static const char *const keys[3] = {"steps_us", "pickup_us", "reply_us"};
	trace_event_args((long)getpid(), 1, name, "kernel-call", t0 / 1000u, (t1 - t0) / 1000u, keys, v, 3);
}

// x -> kernel id -> y: [ncols][ld_x] in, [ncols][ld_y] out
static int
run(struct engine *e, struct fwd *f, int id, const float *x, size_t ld_x, float *y, size_t ld_y, int ncols, char *err)
{
	if (x)
		put(e, e->k_in[id], x, ncols, ld_x);
	struct kb_timing t = {0};
	uint64_t t0 = ad_now_ns();
	if (e->kb->call(e->kb, id, &e->surf[e->k_in[id]].s, &e->surf[e->k_out[id]].s, ncols, &t, err))
		return ad_err_prefix(err, "kernel %d (layer %d)", id, e->kb->kernels[id].layer);
	uint64_t t1 = ad_now_ns();
	if (f->trace)
		trace_call(e, id, "", t0, t1, &t, 1);
	f->call_ns += t1 - t0;
	f->kernel_ns += t.exec_ns;
	f->pickup_ns += t.pickup_ns;
	f->reply_ns += t.reply_ns;
	f->calls++;
	f->trips++;
	get(e, e->k_out[id], y, ncols, ld_y);
	return 0;
}

// x [nw][E] -> every LM head chunk, as one list of kernels (one round trip
// on kb_remote) -> logits [nw][V], each chunk gathered at its row offset
// n rows of logits in engine_logits_alloc's rows: the LM head writes them there
static int
logits_direct(const struct engine *e, const float *logits, int n)
{
	return logits && e->l_rows && logits >= e->l_rows &&
	       (size_t)(logits - e->l_rows) + (size_t)n * (size_t)e->V <= e->l_floats;
}

float *
engine_logits_alloc(struct engine *e, int rows, char *err)
{
	// only where the LM head writes host rows into memory the backend
	// maps (the data plane's arena): elsewhere a copy costs no more
	if (!e->h_logits || !e->kb->host_alloc || e->l_rows || rows < 1)
		return ad_err(err, "engine: no logits rows for the LM head to write into"), NULL;
	size_t n = (size_t)rows * (size_t)e->V;
	if (!(e->l_rows = kb_host_alloc(e->kb, n, err)))
		return NULL;
	e->l_floats = n;
	return e->l_rows;
}

// LM head chunk h's step on n columns, its logits into the caller's rows
// (logits_direct) or h_logits when there
static struct kb_step
head_step(struct engine *e, int h, int n, float *logits)
{
	const int id = e->head[h];
	struct kb_step st = {.id = id, .in = &e->surf[e->k_in[id]].s, .out = &e->surf[e->k_out[id]].s, .ncols = n};
	float *dst = logits_direct(e, logits, n) ? logits : e->h_logits;
	if (dst) {
		st.x_out = dst + e->kb->kernels[id].row_offset;
		st.out_ld = e->V;
	}
	return st;
}

// the logits of the LM head's last call, n columns
static void
head_logits(struct engine *e, float *logits, int n)
{
	if (logits_direct(e, logits, n))
		return;
	if (e->h_logits)
		memcpy(logits, e->h_logits, (size_t)n * (size_t)e->V * sizeof *logits);
	for (int h = 0; !e->h_logits && h < e->n_head; h++)
		get(e, e->k_out[e->head[h]], logits + e->kb->kernels[e->head[h]].row_offset, n, (size_t)e->V);
}

static int
run_head(struct engine *e, struct fwd *f, const float *x, float *logits, int nw, char *err)
{
	put(e, e->k_in[e->head[0]], x, nw, (size_t)e->E);
	for (int h = 0; h < e->n_head; h++)
		e->head_steps[h] = head_step(e, h, nw, logits);
	uint64_t t0 = ad_now_ns();
	if (kb_call_list(e->kb, e->head_steps, e->n_head, e->head_t, err))
		return ad_err_prefix(err, "LM head (%d chunks)", e->n_head);
	uint64_t t1 = ad_now_ns();
	if (f->trace)
		trace_call(e, e->head[0], e->n_head > 1 ? " (all chunks)" : "", t0, t1, e->head_t, e->n_head);
	f->call_ns += t1 - t0;
	for (int h = 0; h < e->n_head; h++) {
		f->kernel_ns += e->head_t[h].exec_ns;
		f->pickup_ns += e->head_t[h].pickup_ns;
		f->reply_ns += e->head_t[h].reply_ns;
	}
	f->calls += (uint64_t)e->n_head;
	f->trips++;
	head_logits(e, logits, nw);
	return 0;
}

// the first cache row column c attends to (a sliding window's start)
static int
attn_first(const struct engine *e, const struct eng_layer *L, int c)
{
	const int64_t w = e->hp.sliding_window;
	return L->sliding && e->pos[c] - w + 1 > 0 ? (int)(e->pos[c] - w + 1) : 0;
}

// one layer's attention job: its runs of columns (e->runs), each run's KV
// heads split in run_split items; or one column's KV heads times its rows
// in parts (parts > 0: item = KV head * parts + part, rows from first)
struct attn_job {
	struct engine *e;
	int il, run_split;
	int parts, first, rows;
};

// A decode step's attention over a long context (from attn_parts_work, by
// default where one column wakes the pool's threads), its KV heads an odd
// number: the rows in parts of about ATTN_PART_ROWS (2 to ATTN_PARTS_MAX),
// each KV head's parts items of their own, merged by their softmax sums
// (attn_merge). With a KV head an item, SmolLM2's three went 2:1 over two
// threads. An even number shares out as it is: in parts, Qwen2.5's two took
// 2.7-2.8 ms a token after 2000 tokens against 2.5. The parts follow the
// rows and the heads alone, so the output does not depend on the threads
#define ATTN_PART_ROWS 512

// where layer L's attention of column c reads, from KV head g on, for ng
// KV heads: their shape (and their query heads'), the column's queries,
// and the cache's keys and values from KV head g's first value (bytes:
// fp16 or fp32), the rows below split in a fork's parent's store (k0, v0)
struct attn_at {
	struct attn_shape sh;
	const float *q;
	const uint8_t *k0, *v0, *k, *v;
	int split;
};

static struct attn_at
attn_at(const struct engine *e, const struct eng_layer *L, int c, int g, int ng)
{
	const struct model_hparams *hp = &e->hp;
	const int nkv = (int)hp->n_head_kv, group = (int)(hp->n_head / hp->n_head_kv), hd = L->hd, hdv = L->hdv;
	const int cnk = L->kv_nk, cnv = nkv * hdv; // the cache's rows
	const struct engine_seq *sq = e->cols[c];
	const size_t vo = (size_t)e->max_seq * cnk * e->kv_elem;
	const size_t ko = (size_t)g * hd * e->kv_elem, vvo = (size_t)g * hdv * e->kv_elem;
	const uint8_t *kc = sq->kv + L->kv_off, *kc0 = sq->kv0 + L->kv_off;
	return (struct attn_at){
		{ng * group, ng, hd, hdv, (size_t)cnk, (size_t)cnv, hp->q_prescale ? 1.0f : hp->q_scale,
	         hp->attn_softcap},
		e->qkv + (size_t)c * L->nqkv + (size_t)g * group * hd,
		kc0 + ko,
		kc0 + vo + vvo,
		kc + ko,
		kc + vo + vvo,
		sq->split,
	};
}

// attention of item = run * run_split + part: the columns of one run (a
// sequence's consecutive positions with the same first row) over their
// own cache rows, for the part-th share of the KV heads and their groups
// of query heads, in one call
static void
attn_item(const struct attn_job *j, int item, float *scratch)
{
	struct engine *e = j->e;
	const struct eng_layer *L = &e->layers[j->il];
	const int nkv = (int)e->hp.n_head_kv, group = (int)(e->hp.n_head / e->hp.n_head_kv);
	const int r = item / j->run_split, part = item % j->run_split;
	const int g0 = nkv * part / j->run_split, g1 = nkv * (part + 1) / j->run_split;
	const int c0 = e->runs[2 * r], nc = e->runs[2 * r + 1];
	const int first = attn_first(e, L, c0);
	const struct attn_at a = attn_at(e, L, c0, g0, g1 - g0);
	float *out = e->att + (size_t)c0 * L->nqv + (size_t)g0 * group * L->hdv;
	if (e->kv_f32) {
		for (int c = 0; c < nc; c++)
			attn_ref_f32_split(&a.sh, a.q + (size_t)c * L->nqkv, (const float *)a.k0, (const float *)a.v0,
			                   (const float *)a.k, (const float *)a.v, a.split, first, e->pos[c0 + c],
			                   out + (size_t)c * L->nqv, scratch);
		return;
	}
	(e->attn_ref ? attn_ref_cols : attn_fast_cols)(
		&a.sh, a.q, (size_t)L->nqkv, (const uint16_t *)a.k0, (const uint16_t *)a.v0, (const uint16_t *)a.k,
		(const uint16_t *)a.v, a.split, first, e->pos + c0, nc, out, (size_t)L->nqv, scratch);
}

// the part item % parts of KV head item / parts of the one column's rows
static void
attn_part_item(const struct attn_job *j, int item, float *scratch)
{
	struct engine *e = j->e;
	const struct eng_layer *L = &e->layers[j->il];
	const int group = (int)(e->hp.n_head / e->hp.n_head_kv);
	const int g = item / j->parts, part = item % j->parts, c0 = e->runs[0];
	const int r0 = j->first + (int)((int64_t)j->rows * part / j->parts);
	const int r1 = j->first + (int)((int64_t)j->rows * (part + 1) / j->parts) - 1;
	const struct attn_at a = attn_at(e, L, c0, g, 1);
	const size_t h = (size_t)part * e->hp.n_head + (size_t)g * group;
	attn_part(&a.sh, a.q, (const uint16_t *)a.k0, (const uint16_t *)a.v0, (const uint16_t *)a.k,
	          (const uint16_t *)a.v, a.split, r0, r1, e->attn_po + h * L->hdv, e->attn_lse + h, scratch);
}

static void
attn_task(void *arg, size_t item, int worker)
{
	const struct attn_job *j = arg;
	if (j->parts)
		attn_part_item(j, (int)item, j->e->attn_scratch[worker]);
	else
		attn_item(j, (int)item, j->e->attn_scratch[worker]);
}

// one column's attention in parts (see ATTN_PART_ROWS), or 0 when it
// does not take them: too few rows, an fp32 cache, the reference, a CPU
// way without parts
static int
attn_in_parts(struct engine *e, int il)
{
	const struct eng_layer *L = &e->layers[il];
	const struct model_hparams *hp = &e->hp;
	const int nkv = (int)hp->n_head_kv;
	if (e->kv_f32 || e->attn_ref || nkv % 2 == 0)
		return 0;
	const int c0 = e->runs[0], first = attn_first(e, L, c0), rows = e->pos[c0] - first + 1;
	// the rows' q.k multiply-adds, as attention() counts them
	const int64_t work = (int64_t)rows * hp->n_head * hp->head_dim;
	int parts = rows / ATTN_PART_ROWS;
	parts = parts < 2 ? 2 : parts > ATTN_PARTS_MAX ? ATTN_PARTS_MAX : parts;
	const struct attn_at one = attn_at(e, L, c0, 0, 1);
	if (work < e->attn_parts_work || rows < parts || !attn_part_ok(&one.sh))
		return 0;
	struct attn_job j = {e, il, 1, parts, first, rows};
	const int items = nkv * parts;
	if (e->pool)
		ad_pool_run(e->pool, attn_task, &j, (size_t)items);
	else
		for (int it = 0; it < items; it++)
			attn_part_item(&j, it, e->attn_scratch[0]);
	const struct attn_shape all = {(int)hp->n_head, nkv, L->hd, L->hdv, 0, 0, 1.0f, 0};
	attn_merge(&all, e->attn_po, e->attn_lse, parts, e->att + (size_t)c0 * L->nqv);
	e->attn_parted++;
	return 1;
}

// every column's attention for layer il. Consecutive columns of one
// sequence (a prefill chunk, a verify step's drafts) make a run, up to
// attn_cols, that reads its keys and values once; each column's result is
// the one it has alone. With the workers when it is worth waking them
// (each item is computed the same way wherever it runs): from
// e->attn_pool_work multiply-adds of q.k (ATTN_POOL_WORK), a run's
// columns after the first counted as half; then a run's KV heads are split
// in items too while the runs are fewer than four. (Splitting a KV head's
// query heads as well, so that SmolLM2's three KV heads share out over two
// threads, made its decode after 1000 tokens no faster: both parts read
// the same keys and values from memory.)

static void
attention(struct engine *e, int il, int n)
{
	const struct eng_layer *L = &e->layers[il];
	int nruns = 0, first = 0;
	for (int c = 0; c < n; c++) {
		int *run = e->runs + 2 * (nruns - 1);
		const int fc = attn_first(e, L, c);
		if (nruns > 0 && run[1] < e->attn_cols && e->cols[c] == e->cols[run[0]] &&
		    e->pos[c] == e->pos[c - 1] + 1 && fc == first) {
			run[1]++;
			continue;
		}
		e->runs[2 * nruns] = c;
		e->runs[2 * nruns + 1] = 1;
		nruns++;
		first = fc;
	}
	int64_t work = 0;
	for (int r = 0; r < nruns; r++) {
		const int c0 = e->runs[2 * r], nc = e->runs[2 * r + 1];
		work += (int64_t)(e->pos[c0 + nc - 1] + 1) * e->hp.n_head * e->hp.head_dim * (nc + 1) / 2;
	}
	// one column alone (a decode step of one sequence) from four times the
	// work: its KV heads are all there is to share out, and the AVX-512
	// path halved its time on one thread. Decode, alternating, pool
	// against none: SmolLM2-135M shape (9/3 heads) after 700 tokens 95
	// against 117 tok/s, after 1300 80 against 87 (the attention alike,
	// the other process's kernels slower beside a woken worker); Qwen2.5-
	// 0.5B (14/2) after 700 1.53 against 1.23 ms of attention a token,
	// after 1200 1.98 against 1.93, after 2048 2.60 against 3.25
	if (nruns == 1 && e->runs[1] == 1 && attn_in_parts(e, il))
		return;
	const int64_t min_work = nruns == 1 && e->runs[1] == 1 ? 4 * e->attn_pool_work : e->attn_pool_work;
	struct attn_job j = {e, il, 1, 0, 0, 0};
	if (!e->pool || work < min_work || (nruns < 2 && e->hp.n_head_kv < 2)) {
		for (int it = 0; it < nruns; it++)
			attn_item(&j, it, e->attn_scratch[0]);
		return;
	}
	if (nruns < 4)
		j.run_split = (int)e->hp.n_head_kv;
	ad_pool_run(e->pool, attn_task, &j, (size_t)(nruns * j.run_split));
}

// lfm2's ShortConv block, as ref.c's shortconv: in_proj on the backend,
// B*X of every column into its sequence's cache (all columns first: a
// sequence's later columns read its earlier ones), the causal conv over
// the last n_conv rows, C * y, out_proj on the backend, residual
static int
conv_block(struct engine *e, struct fwd *f, const struct eng_layer *L, int n, char *err)
{
	const int E = e->E, K = (int)e->hp.n_conv;
	for (int c = 0; c < n; c++)
		ad_rmsnorm(e->xn + (size_t)c * E, e->x + (size_t)c * E, L->attn_norm, E, e->hp.rms_eps);
	if (run(e, f, L->qkv, e->xn, E, e->qkv, 3 * (size_t)E, n, err))
		return -1;
	float *bx = e->proj; // [E] scratch per column
	for (int c = 0; c < n; c++) {
		const float *b = e->qkv + (size_t)c * 3 * E, *xv = b + 2 * E;
		uint8_t *row = e->cols[c]->kv + L->kv_off + (size_t)e->pos[c] * E * e->kv_elem;
		for (int i = 0; i < E; i++)
			bx[i] = b[i] * xv[i];
		if (e->kv_f32)
			memcpy(row, bx, (size_t)E * sizeof(float));
		else
			ad_f32_to_fp16_row(bx, (uint16_t *)row, (size_t)E);
	}
	for (int c = 0; c < n; c++) {
		const float *cg = e->qkv + (size_t)c * 3 * E + E;
		const struct engine_seq *sq = e->cols[c];
		float *y = e->att + (size_t)c * E;
		for (int i = 0; i < E; i++) {
			float sum = 0;
			for (int k = 0; k < K; k++) {
				int p = e->pos[c] - (K - 1) + k;
				if (p < 0)
					continue;
				// a fork's first rows are its parent's
				const uint8_t *base = (p < sq->split ? sq->kv0 : sq->kv) + L->kv_off;
				size_t at = (size_t)p * E + (size_t)i;
				float v = e->kv_f32 ? ((const float *)base)[at]
				                    : ad_fp16_to_f32(((const uint16_t *)base)[at]);
				sum = fmaf(v, L->conv_w[(size_t)i * K + k], sum);
			}
			y[i] = cg[i] * sum;
		}
	}
	if (run(e, f, L->o, e->att, E, e->proj, E, n, err))
		return -1;
	for (int c = 0; c < n; c++) {
		float *p = e->proj + (size_t)c * E, *x = e->x + (size_t)c * E;
		for (int i = 0; i < E; i++)
			x[i] += p[i];
	}
	return 0;
}

static void attn_block(struct engine *e, struct fwd *f, int il, int n);
static int ffn_half(struct engine *e, struct fwd *f, int il, int n, char *err);

// qwen35's gated delta-net block after its QKV call (e->qkv: every column's
// q/k/v channels, z, beta and alpha), as ref.c's deltanet: dn_token runs
// each column in order (a sequence's later columns go on from its earlier
// ones' state: the first reads the committed state, or none at position 0,
// and every one writes the call's own), keeping a copy at every
// st_every-th position; the output, for ssm_out (the O kernel), in e->att
static void
dn_mix(struct engine *e, int il, int n)
{
	const struct eng_layer *L = &e->layers[il];
	const int nvd = L->dn.n_v * L->dn.d;
	for (int c = 0; c < n; c++) {
		struct engine_seq *s = e->cols[c];
		const int pos = e->pos[c];
		const float *mix = e->qkv + (size_t)c * L->nqkv, *z = mix + L->dn.channels, *ba = z + nvd;
		const float *in = pos == 0 ? NULL : (pos == s->len ? s->st[s->cur] : s->st[s->cur ^ 1]) + L->st_off;
		float *out = s->st[s->cur ^ 1] + L->st_off;
		dn_token(&L->dn, mix, z, ba, ba + L->dn.n_v, in, out, e->att + (size_t)c * nvd, e->dn_scratch);
		if ((pos + 1) % e->st_every == 0) {
			int slot = (pos + 1) / e->st_every % e->st_keep;
			memcpy(s->ck + (size_t)slot * e->st_floats + L->st_off, out,
			       dn_state_floats(&L->dn) * sizeof(float));
		}
	}
}

static int
layer(struct engine *e, struct fwd *f, int il, int n, char *err)
{
	const struct model_hparams *hp = &e->hp;
	const struct eng_layer *L = &e->layers[il];
	const int E = e->E;
	const float eps = hp->rms_eps;

	if (L->conv) {
		if (conv_block(e, f, L, n, err))
			return -1;
		return ffn_half(e, f, il, n, err);
	}
	// attention, or a gated delta-net
	for (int c = 0; c < n; c++)
		ad_rmsnorm(e->xn + (size_t)c * E, e->x + (size_t)c * E, L->attn_norm, E, eps);
	if (run(e, f, L->qkv, e->xn, E, e->qkv, L->nqkv, n, err))
		return -1;
	if (L->recur)
		dn_mix(e, il, n);
	else
		attn_block(e, f, il, n);
	if (run(e, f, L->o, e->att, L->nqv, e->proj, E, n, err))
		return -1;
	for (int c = 0; c < n; c++) {
		float *p = e->proj + (size_t)c * E, *x = e->x + (size_t)c * E;
		if (L->bo)
			for (int i = 0; i < E; i++)
				p[i] += L->bo[i];
		if (L->post_attn_norm)
			ad_rmsnorm(p, p, L->post_attn_norm, E, eps);
		for (int i = 0; i < E; i++)
			x[i] += p[i];
	}
	return ffn_half(e, f, il, n, err);
}

// after a layer's QKV call (its output in e->qkv): per column biases, q/k
// norms, RoPE and the cache write, then attention into e->att
static void
attn_block(struct engine *e, struct fwd *f, int il, int n)
{
	const struct model_hparams *hp = &e->hp;
	const struct eng_layer *L = &e->layers[il];
	const int hd = L->hd;
	const float eps = hp->rms_eps;
	for (int c = 0; c < n; c++) {
		float *q = e->qkv + (size_t)c * L->nqkv, *k = q + L->qw, *v = k + L->nk;
		if (L->attn_gate) {
			// per head hd q rows then hd gate rows: the gates aside, the
			// q heads packed at the front (attention reads them there)
			float *g = e->gate + (size_t)c * L->nq;
			for (int64_t h = 0; h < hp->n_head; h++) {
				memcpy(g + h * hd, q + (2 * h + 1) * hd, (size_t)hd * sizeof(float));
				memmove(q + h * hd, q + 2 * h * hd, (size_t)hd * sizeof(float));
			}
		}
		if (L->bq)
			for (int i = 0; i < L->nq; i++)
				q[i] += L->bq[i];
		if (L->bk)
			for (int i = 0; i < L->nk; i++)
				k[i] += L->bk[i];
		if (L->bv)
			for (int i = 0; i < L->nv; i++)
				v[i] += L->bv[i];
		// q/k norms before RoPE, or after it (hunyuan)
		for (int pass = 0; pass < 2; pass++) {
			if (pass == hp->qk_norm_post_rope) {
				if (L->q_norm)
					for (int64_t h = 0; h < hp->n_head; h++)
						ad_rmsnorm(q + h * hd, q + h * hd, L->q_norm, hd, eps);
				if (L->k_norm)
					for (int64_t h = 0; h < hp->n_head_kv; h++)
						ad_rmsnorm(k + h * hd, k + h * hd, L->k_norm, hd, eps);
				if (e->gemma4 && L->own_kv) // V too, with no weight
					for (int64_t h = 0; h < hp->n_head_kv; h++)
						ad_rmsnorm(v + h * L->hdv, v + h * L->hdv, e->ones, L->hdv, eps);
			} else if (L->use_rope) {
				const float *cs = e->cs + ((size_t)L->rope_conf * e->width + c) * hp->n_rot;
				rope(e, L, q, hp->n_head, cs);
				if (L->own_kv)
					rope(e, L, k, hp->n_head_kv, cs);
			}
		}
		if (hp->q_prescale)
			for (int i = 0; i < L->nq; i++)
				q[i] *= hp->q_scale;
		uint8_t *kc = e->cols[c]->kv + L->kv_off;
		uint8_t *vc = kc + (size_t)e->max_seq * L->nk * e->kv_elem;
		if (!L->own_kv)
			continue; // gemma4's shared layer: q only, its source's cache
		if (e->kv_f32) {
			memcpy((float *)kc + (size_t)e->pos[c] * L->nk, k, (size_t)L->nk * sizeof(float));
			memcpy((float *)vc + (size_t)e->pos[c] * L->nv, v, (size_t)L->nv * sizeof(float));
		} else {
			ad_f32_to_fp16_row(k, (uint16_t *)kc + (size_t)e->pos[c] * L->nk, (size_t)L->nk);
			ad_f32_to_fp16_row(v, (uint16_t *)vc + (size_t)e->pos[c] * L->nv, (size_t)L->nv);
		}
	}
	uint64_t t0 = ad_now_ns();
	attention(e, il, n);
	uint64_t t1 = ad_now_ns();
	f->attn_ns += t1 - t0;
	if (f->trace) {
		char name[32];
		snprintf(name, sizeof name, "attention L%d", il);
		trace_event((long)getpid(), 1, name, "attention", t0 / 1000u, (t1 - t0) / 1000u);
	}
	if (L->attn_gate) // qwen35: the output gate
		for (int c = 0; c < n; c++) {
			float *a = e->att + (size_t)c * L->nqv;
			const float *g = e->gate + (size_t)c * L->nq;
			for (int i = 0; i < L->nqv; i++)
				a[i] *= 1.0f / (1.0f + expf(-g[i]));
		}
}

// the FFN half of layer il (after the residual of its attention or its
// ShortConv block)
static int
ffn_half(struct engine *e, struct fwd *f, int il, int n, char *err)
{
	const struct model_hparams *hp = &e->hp;
	const struct eng_layer *L = &e->layers[il];
	const int E = e->E;
	const float eps = hp->rms_eps;
	uint64_t t0;
	for (int c = 0; c < n; c++)
		ad_rmsnorm(e->xn + (size_t)c * E, e->x + (size_t)c * E, L->ffn_norm, E, eps);
	if (L->gate_inp) {
		if (L->shexp >= 0 && run(e, f, L->shexp, e->xn, E, e->proj, E, n, err))
			return -1;
		t0 = ad_now_ns();
		if (moe_forward(e->moe, &e->m->layers[il], L->gate_inp, L->gate_inp_shexp, e->xn,
		                L->shexp >= 0 ? e->proj : NULL, n, e->ffo, err))
			return -1;
		f->moe_ns += ad_now_ns() - t0;
	} else if (L->ffn >= 0) {
		if (run(e, f, L->ffn, e->xn, E, e->ffo, E, n, err))
			return -1;
	} else {
		const int ff = L->ff;
		if (run(e, f, L->gate_up, e->xn, E, e->hb, 2 * (size_t)ff, n, err))
			return -1;
		// act(gate) * up into the gate half; DOWN reads it with a stride
		for (int c = 0; c < n; c++) {
			float *g = e->hb + (size_t)c * 2 * ff;
			ad_glu(g, g + ff, ff, e->hp.act == MODEL_ACT_GELU);
		}
		if (run(e, f, L->down, e->hb, 2 * (size_t)ff, e->ffo, E, n, err))
			return -1;
	}
	for (int c = 0; c < n; c++) {
		float *p = e->ffo + (size_t)c * E, *x = e->x + (size_t)c * E;
		if (L->post_ffw_norm)
			ad_rmsnorm(p, p, L->post_ffw_norm, E, eps);
		for (int i = 0; i < E; i++)
			x[i] += p[i];
	}
	// gemma4: x += post_norm(proj (ad_gelu(inp_gate x) * pl[layer])), x *= the
	// layer's output scale (ref.c's per_layer_branch; small, on the CPU)
	for (int c = 0; e->gemma4 && c < n; c++) {
		float *x = e->x + (size_t)c * E, *g = e->hb, *p = e->proj;
		const int P = e->P;
		if (L->pl_gate) {
			ad_matvec(g, L->pl_gate, x, E, P);
			const float *pl = e->pl + (size_t)c * e->LP + (size_t)il * P;
			for (int i = 0; i < P; i++)
				g[i] = ad_gelu(g[i]) * pl[i];
			ad_matvec(p, L->pl_proj, g, P, E);
			ad_rmsnorm(p, p, L->pl_norm, E, eps);
			for (int i = 0; i < E; i++)
				x[i] += p[i];
		}
		if (L->out_scale)
			for (int i = 0; i < E; i++)
				x[i] *= L->out_scale[0];
	}
	return 0;
}

static void
book(struct gen_timings *t, const struct fwd *f, uint64_t total, int cols, int n, int prefill)
{
	uint64_t c = (uint64_t)cols, d = (uint64_t)n;
	uint64_t other = total - (f->call_ns + f->attn_ns + f->moe_ns);
	if (f->call_ns + f->attn_ns + f->moe_ns > total)
		other = 0;
	other += f->glue_ns; // the residual and norm steps of fused calls
	const uint64_t inside = f->kernel_ns + f->glue_ns;
	const uint64_t kern = f->kernel_ns * c / d, ipc = (f->call_ns > inside ? f->call_ns - inside : 0) * c / d;
	const uint64_t attn = f->attn_ns * c / d, moe = f->moe_ns * c / d, rest = other * c / d,
		       trips = f->trips * c / d;
	t->kernel_ns += kern;
	t->ipc_ns += ipc;
	t->attention_ns += attn;
	t->moe_ns += moe;
	t->cpu_other_ns += rest;
	t->kernel_calls += f->calls * c / d;
	t->round_trips += trips;
	if (prefill) {
		t->prefill_ns += total * c / d;
		t->prefill_tokens += (uint32_t)cols;
	} else {
		t->decode_ns += total * c / d;
		t->decode_tokens += (uint32_t)cols;
		t->dec_kernel_ns += kern;
		t->dec_ipc_ns += ipc;
		t->dec_pickup_ns += f->pickup_ns * c / d;
		t->dec_reply_ns += f->reply_ns * c / d;
		t->dec_attention_ns += attn;
		t->dec_moe_ns += moe;
		t->dec_other_ns += rest;
		t->dec_round_trips += trips;
	}
}

// --- one call per layer ------------------------------------------------------------
//
// With a backend that runs KB_RESNORM steps beside its kernels (kb_remote:
// in the ane-worker, inside the call), what layer() does after the
// attention is one call: [O, resnorm (residual, bias, post-norm, FFN norm),
// FFN, resnorm (residual, post-norm, the next layer's norm), the next
// layer's QKV] -- or after the last layer the output norm and the LM head
// chunks -- instead of three calls with CPU work between them: the process
// boundary is crossed once per layer, not three times. The residual stream
// lives in hx[], host memory the backend reaches; the steps are layer()'s
// arithmetic in its order (resnorm.h), so the bits are those of the
// unfused path. A call never writes what it reads first (O's input is a
// surface or rows of its own, the residual rotates through three rows: a
// call reads hx[a] and writes hx[b] and hx[c]; between its steps the
// kernels' outputs and the norms pass through hy and hxn, which no call
// reads before writing them), so a call re-posted after an ane-worker
// restart gives the same result. Models with other CPU work
// between those kernels (MoE, ShortConv, gemma4's per-layer inputs, a split
// FFN) keep layer(); ANEDVD_FUSE=0 turns fusing off. A qwen35 delta-net
// layer fuses like attention: its CPU part (dn_mix) sits where attention's
// does, between the QKV and the O kernels.

// a copy of v[0..n) in the backend's host memory (NULL stays NULL)
static int
host_copy(struct engine *e, const float *v, size_t n, const float **out, char *err)
{
	*out = NULL;
	if (!v)
		return 0;
	float *h = kb_host_alloc(e->kb, n, err);
	if (!h)
		return -1;
	memcpy(h, v, n * sizeof *h);
	*out = h;
	return 0;
}

static int
fused_setup(struct engine *e, char *err)
{
	const char *env = getenv("ANEDVD_FUSE");
	if ((env && strcmp(env, "0") == 0) || e->gemma4 || e->pl_model_proj)
		return 0;
	const int nl = (int)e->hp.n_layer;
	for (int il = 0; il < nl; il++) {
		const struct eng_layer *L = &e->layers[il];
		if (L->conv || L->gate_inp || (!L->own_kv && !L->recur) ||
		    (L->ffn < 0 && (L->gate_up < 0 || L->down < 0)))
			return 0;
	}
	const size_t E = (size_t)e->E;
	char why[AD_ERRLEN];
	for (int i = 0; i < 3; i++)
		if (!(e->hx[i] = kb_host_alloc(e->kb, (size_t)e->width * E, why)))
			goto unfused;
	for (int il = 0; il < nl; il++) {
		struct eng_layer *L = &e->layers[il];
		if (host_copy(e, L->attn_norm, E, &L->h_attn_norm, why) ||
		    host_copy(e, L->ffn_norm, E, &L->h_ffn_norm, why) ||
		    host_copy(e, L->post_attn_norm, E, &L->h_post_attn, why) ||
		    host_copy(e, L->post_ffw_norm, E, &L->h_post_ffw, why) || host_copy(e, L->bo, E, &L->h_bo, why))
			goto unfused;
	}
	if (host_copy(e, e->output_norm, E, &e->h_output_norm, why))
		goto unfused;
	if (e->rows_ok) {
		// as engine_new sizes qkv and att
		const size_t w = (size_t)e->width, wide = (size_t)(e->E > e->nqv ? e->E : e->nqv),
			     nqkv_max = (size_t)(e->nqkv > 3 * e->E ? e->nqkv : 3 * e->E);
		float *q = kb_host_alloc(e->kb, w * nqkv_max, why), *a = q ? kb_host_alloc(e->kb, w * wide, why) : NULL;
		if (a) {
			e->qkv = q;
			e->att = a;
			e->host_rows = 1;
			int split = 0;
			for (int il = 0; il < nl; il++)
				split |= e->layers[il].ffn < 0;
			float *hb = split ? kb_host_alloc(e->kb, w * 2 * (size_t)(e->ff > 0 ? e->ff : 1), why) : NULL;
			if (hb) {
				e->hb = hb;
				e->host_hb = 1;
			} else if (split) {
				ad_info("engine: the split FFN's rows through the surfaces (%s)", why);
			}
			float *y = kb_host_alloc(e->kb, w * E, why), *xn = y ? kb_host_alloc(e->kb, w * E, why) : NULL;
			if (xn) {
				e->hy = y;
				e->hxn = xn;
				e->host_rn = 1;
			} else {
				ad_info("engine: a call's steps hand over through the surfaces (%s)", why);
			}
		} else {
			ad_info("engine: kernel rows through the surfaces (%s)", why);
		}
	}
	if (!(e->fsteps = eng_alloc(e, (size_t)(e->n_head + 4) * sizeof *e->fsteps, err)) ||
	    !(e->ft = eng_alloc(e, (size_t)(e->n_head + 4) * sizeof *e->ft, err)))
		return -1;
	// O's input (and a split FFN's DOWN's, which the CPU writes between
	// the layer's two calls) apart from the surfaces the calls write
	for (int il = 0; il < nl; il++) {
		const struct eng_layer *L = &e->layers[il];
		int s = surface_for(e, 0, e->kb->kernels[L->o].in_ch, TAG_O_IN, err);
		if (s < 0)
			return -1;
		e->k_in[L->o] = s;
		if (L->ffn < 0) {
			if ((s = surface_for(e, 0, e->kb->kernels[L->down].in_ch, TAG_DOWN_IN, err)) < 0)
				return -1;
			e->k_in[L->down] = s;
		}
	}
	e->hcur = 0;
	e->fused = 1;
	return 0;
unfused:
	ad_info("engine: one call per kernel (%s)", why);
	return 0;
}

// steps as one call; kernel and resnorm time booked apart
static int
call_steps(struct engine *e, struct fwd *f, const struct kb_step *st, int n, char *err)
{
	uint64_t t0 = ad_now_ns();
	if (kb_call_list(e->kb, st, n, e->ft, err))
		return -1;
	uint64_t t1 = ad_now_ns();
	f->call_ns += t1 - t0;
	f->trips++;
	int first = -1;
	for (int i = 0; i < n; i++) {
		f->pickup_ns += e->ft[i].pickup_ns;
		f->reply_ns += e->ft[i].reply_ns;
		if (st[i].kind == KB_RESNORM) {
			f->glue_ns += e->ft[i].exec_ns;
		} else {
			f->kernel_ns += e->ft[i].exec_ns;
			f->calls++;
			if (first < 0)
				first = st[i].id;
		}
	}
	if (f->trace && first >= 0)
		trace_call(e, first, " (fused)", t0, t1, e->ft, n);
	return 0;
}

static struct kb_step
kstep(struct engine *e, int id, int n)
{
	return (struct kb_step){.id = id, .in = &e->surf[e->k_in[id]].s, .out = &e->surf[e->k_out[id]].s, .ncols = n};
}

// a fused layer's QKV kernel: its output into qkv as host rows when it can
static struct kb_step
qkv_step(struct engine *e, const struct eng_layer *L, int n)
{
	struct kb_step st = kstep(e, L->qkv, n);
	if (e->host_rows) {
		st.x_out = e->qkv;
		st.out_ld = L->nqkv;
	}
	return st;
}

// with host_rn: kernel step kst's output goes to resnorm step rst as the
// rows hy, and rst's xn to kernel step nst as the rows hxn
static void
rn_from(struct engine *e, struct kb_step *kst, struct kb_step *rst)
{
	kst->x_out = e->hy;
	kst->out_ld = e->E;
	rst->y_rows = e->hy;
}

static void
rn_to(struct engine *e, struct kb_step *rst, struct kb_step *nst)
{
	if (!rst->rn.w) // no norm: no xn
		return;
	rst->xn_rows = e->hxn;
	nst->x_in = e->hxn;
	nst->in_ld = e->E;
}

static void
rn_between(struct engine *e, struct kb_step *kst, struct kb_step *rst, struct kb_step *nst)
{
	rn_from(e, kst, rst);
	rn_to(e, rst, nst);
}

// layer il of nl, fused (its QKV already ran, unless il is 0); after the
// last one, with logits (all n columns wanted), the LM head too
static int
layer_fused(struct engine *e, struct fwd *f, int il, int nl, int n, float *logits, char *err)
{
	const struct eng_layer *L = &e->layers[il];
	const int E = e->E;
	const float eps = e->hp.rms_eps;
	if (il == 0) {
		struct kb_step st[2] = {
			{.kind = KB_RESNORM,
		         .ncols = n,
		         .out = &e->surf[e->k_in[L->qkv]].s,
		         .x_in = e->hx[e->hcur],
		         .x_out = e->hx[e->hcur],
		         .rn = {.E = E, .eps = eps, .w = L->h_attn_norm}},
			qkv_step(e, L, n),
		};
		if (e->host_rn)
			rn_to(e, &st[0], &st[1]);
		if (call_steps(e, f, st, 2, err))
			return ad_err_prefix(err, "layer 0");
	}
	if (!e->host_rows)
		get(e, e->k_out[L->qkv], e->qkv, n, (size_t)L->nqkv);
	if (L->recur)
		dn_mix(e, il, n);
	else
		attn_block(e, f, il, n);
	if (!e->host_rows)
		put(e, e->k_in[L->o], e->att, n, (size_t)L->nqv);

	const int a = e->hcur, b = (a + 1) % 3, c = (a + 2) % 3;
	const struct eng_layer *N = il + 1 < nl ? &e->layers[il + 1] : NULL;
	const int split = L->ffn < 0, up = split ? L->gate_up : L->ffn, down = split ? L->down : L->ffn;
	struct kb_step *st = e->fsteps;
	int k = 0;
	st[k++] = kstep(e, L->o, n);
	if (e->host_rows) {
		st[k - 1].x_in = e->att;
		st[k - 1].in_ld = L->nqv;
	}
	st[k++] = (struct kb_step){.kind = KB_RESNORM,
	                           .ncols = n,
	                           .in = &e->surf[e->k_out[L->o]].s,
	                           .out = &e->surf[e->k_in[up]].s,
	                           .x_in = e->hx[a],
	                           .x_out = e->hx[b],
	                           .rn = {E, eps, L->h_bo, L->h_post_attn, L->h_ffn_norm}};
	st[k++] = kstep(e, up, n);
	if (e->host_rn)
		rn_between(e, &st[k - 3], &st[k - 2], &st[k - 1]);
	if (split) {
		// the activation on the CPU, between this layer's two calls
		const int ff = L->ff;
		if (e->host_hb) {
			st[k - 1].x_out = e->hb;
			st[k - 1].out_ld = 2 * ff;
		}
		if (call_steps(e, f, st, k, err))
			return ad_err_prefix(err, "layer %d", il);
		if (!e->host_hb)
			get(e, e->k_out[up], e->hb, n, 2 * (size_t)ff);
		for (int col = 0; col < n; col++) {
			float *g = e->hb + (size_t)col * 2 * ff;
			ad_glu(g, g + ff, ff, e->hp.act == MODEL_ACT_GELU);
		}
		if (!e->host_hb)
			put(e, e->k_in[down], e->hb, n, 2 * (size_t)ff);
		k = 0;
		st[k++] = kstep(e, down, n);
		if (e->host_hb) {
			st[k - 1].x_in = e->hb;
			st[k - 1].in_ld = 2 * ff;
		}
	}
	st[k++] =
		(struct kb_step){.kind = KB_RESNORM,
	                         .ncols = n,
	                         .in = &e->surf[e->k_out[down]].s,
	                         .out = N        ? &e->surf[e->k_in[N->qkv]].s
	                                : logits ? &e->surf[e->k_in[e->head[0]]].s
	                                         : NULL,
	                         .x_in = e->hx[b],
	                         .x_out = e->hx[c],
	                         .rn = {E, eps, NULL, L->h_post_ffw,
	                                N        ? N->h_attn_norm
	                                : logits ? e->h_output_norm
	                                         : NULL}};
	const int rn2 = k - 1;
	if (N)
		st[k++] = qkv_step(e, N, n);
	else if (logits)
		for (int h = 0; h < e->n_head; h++)
			st[k++] = head_step(e, h, n, logits);
	if (e->host_rn) {
		rn_from(e, &st[rn2 - 1], &st[rn2]);
		for (int i = rn2 + 1; i < k; i++) // the LM head's chunks all read xn
			rn_to(e, &st[rn2], &st[i]);
	}
	if (call_steps(e, f, st, k, err))
		return ad_err_prefix(err, "layer %d", il);
	e->hcur = c;
	e->x = e->hx[c];
	if (!N && logits)
		head_logits(e, logits, n);
	return 0;
}

// gemma4's per-layer inputs of column c (ref.c's per_layer_inputs): the
// projection of the scaled embedding, its slices normed, plus the token's
// row of per_layer_token_embd (dequantised from the mapping as it comes)
static int
per_layer_inputs(struct engine *e, int c, int32_t token, char *err)
{
	const int E = e->E, P = e->P, LP = e->LP;
	float *pl = e->pl + (size_t)c * LP, *row = e->pl_row;
	const struct model_tensor *t = &e->m->pl_tok_embd;
	ad_matvec(pl, e->pl_model_proj, e->x + (size_t)c * E, E, LP);
	const float ps = 1.0f / sqrtf((float)E), ts = sqrtf((float)P), ss = 1.0f / sqrtf(2.0f);
	for (int i = 0; i < LP; i++)
		pl[i] *= ps;
	if (ad_dequant(t->type, (const uint8_t *)t->data + (size_t)token * e->pl_row_bytes, row, LP, err))
		return ad_err_prefix(err, "per_layer_token_embd");
	for (int l = 0; l < (int)e->hp.n_layer; l++) {
		float *p = pl + (size_t)l * P;
		ad_rmsnorm(p, p, e->pl_proj_norm, P, e->hp.rms_eps);
		for (int i = 0; i < P; i++)
			p[i] = (p[i] + row[(size_t)l * P + i] * ts) * ss;
	}
	return 0;
}

static int
forward(struct engine *e, struct engine_seq *const *seqs, const int32_t *tokens, int n, const uint8_t *want,
        float *logits, int prefill, float *hidden, char *err)
{
	const struct model_hparams *hp = &e->hp;
	const int E = e->E, V = e->V;
	if (n < 1 || n > e->width)
		return ad_err(err, "%d columns in one call (the width is %d)", n, e->width);
	for (int c = 0; c < n; c++) {
		if (!seqs[c] || seqs[c]->e != e)
			return ad_err(err, "column %d: not a sequence of this engine", c);
		if (tokens[c] < 0 || tokens[c] >= V)
			return ad_err(err, "token id %d is outside the vocabulary of %d", tokens[c], V);
		seqs[c]->pending = 0;
	}
	int over = -1;
	for (int c = 0; c < n; c++) {
		e->cols[c] = seqs[c];
		e->pos[c] = seqs[c]->len + seqs[c]->pending++;
		if (e->pos[c] >= e->max_seq && over < 0)
			over = c;
	}
	if (over >= 0)
		return ad_err(err, "position %d is beyond the context of %d positions", e->pos[over], e->max_seq);
	for (int c = 0; c < n; c++) {
		struct engine_seq *s = seqs[c];
		const int need = s->len + s->pending;
		if (need > s->own->ready)
			kv_ready(e, s->own, s->own->ready > s->split ? s->own->ready : s->split, need + KV_AHEAD);
	}
	for (int c = 0; c < n && e->st_floats; c++) {
		struct engine_seq *s = seqs[c];
		if (s->len > 0 && s->st_len != s->len)
			return ad_err(err,
			              "column %d: the sequence's recurrent state is that of position %d, not %d "
			              "(rows appended without their state)",
			              c, s->st_len, s->len);
		if ((e->pos[c] + 1) % e->st_every == 0) // its copy is about to be overwritten
			s->ck_pos[(e->pos[c] + 1) / e->st_every % e->st_keep] = -1;
	}
	int nw = 0;
	for (int c = 0; c < n; c++)
		if (logits && (!want || want[c]))
			e->wanted[nw++] = c;

	uint64_t t0 = ad_now_ns();
	struct fwd f = {.trace = trace_enabled()};
	if (e->fused)
		e->x = e->hx[e->hcur];
	const uint8_t *embd = e->m->tok_embd.data;
	for (int c = 0; c < n; c++) {
		float *x = e->x + (size_t)c * E;
		const uint8_t *row = embd + (size_t)tokens[c] * e->embd_row_bytes;
		if (e->embd_fd >= 0) {
			off_t at = (off_t)(e->embd_off + (uint64_t)tokens[c] * e->embd_row_bytes);
			if (pread(e->embd_fd, e->embd_row, e->embd_row_bytes, at) != (ssize_t)e->embd_row_bytes)
				return ad_err(err, "token_embd: reading row %d from %s failed", tokens[c], e->m->path);
			row = e->embd_row;
		}
		if (ad_dequant(e->m->tok_embd.type, row, x, E, err))
			return ad_err_prefix(err, "token_embd");
		for (int i = 0; i < E; i++)
			x[i] = x[i] * e->hp.embd_scale;
		if (e->pl_model_proj && per_layer_inputs(e, c, tokens[c], err))
			return -1;
	}
	// RoPE angles: once per column and distinct (base, scale)
	for (int il = 0, done = 0; il < hp->n_layer && done < e->n_conf; il++) {
		const struct eng_layer *L = &e->layers[il];
		if (L->rope_conf != done)
			continue;
		for (int c = 0; c < n; c++)
			rope_angles(e, L, e->pos[c], e->cs + ((size_t)L->rope_conf * e->width + c) * hp->n_rot);
		done++;
	}
	const int n_layer = e->upto > 0 && e->upto < hp->n_layer ? e->upto : (int)hp->n_layer;
	// fused, the last layer's call runs the LM head when every column is wanted
	int head_fused = e->fused && n_layer > 0 && nw == n;
	for (int j = 0; head_fused && j < nw; j++)
		head_fused = e->wanted[j] == j;
	for (int il = 0; il < n_layer; il++)
		if (e->fused ? layer_fused(e, &f, il, n_layer, n, head_fused ? logits : NULL, err)
		             : layer(e, &f, il, n, err))
			return -1;
	for (int c = 0; hidden && c < n; c++)
		ad_rmsnorm(hidden + (size_t)c * E, e->x + (size_t)c * E, e->output_norm, E, hp->rms_eps);
	if (nw > 0) {
		for (int j = 0; j < nw && !head_fused; j++)
			ad_rmsnorm(e->xn + (size_t)j * E, e->x + (size_t)e->wanted[j] * E, e->output_norm, E,
			           hp->rms_eps);
		if (!head_fused && run_head(e, &f, e->xn, logits, nw, err))
			return -1;
		if (hp->final_softcap > 0) {
			const float cap = hp->final_softcap;
			for (size_t i = 0; i < (size_t)nw * V; i++)
				logits[i] = tanhf(logits[i] * (1.0f / cap)) * cap;
		}
	}
	// commit, and book the time on each sequence by its columns
	uint64_t total = ad_now_ns() - t0;
	book(&e->t, &f, total, n, n, prefill);
	for (int c = 0; c < n; c++) {
		struct engine_seq *s = seqs[c];
		s->tokens[e->pos[c]] = tokens[c];
		if (e->st_floats && (e->pos[c] + 1) % e->st_every == 0)
			s->ck_pos[(e->pos[c] + 1) / e->st_every % e->st_keep] = e->pos[c] + 1;
		if (s->pending > 0) {
			book(&s->t, &f, total, s->pending, n, prefill);
			s->len += s->pending;
			s->pending = 0;
			if (e->st_floats) { // the call's state is now the sequence's
				s->cur ^= 1;
				s->st_len = s->len;
			}
		}
	}
	return 0;
}

int
engine_forward(struct engine *e, struct engine_seq *const *seqs, const int32_t *tokens, int n, const uint8_t *want,
               float *logits, int prefill, char *err)
{
	return forward(e, seqs, tokens, n, want, logits, prefill, NULL, err);
}

int
engine_forward_hidden(struct engine *e, struct engine_seq *const *seqs, const int32_t *tokens, int n, float *hidden,
                      char *err)
{
	return forward(e, seqs, tokens, n, NULL, NULL, 1, hidden, err);
}

int
engine_n_embd(const struct engine *e)
{
	return e->E;
}

int
engine_pooling(const struct engine *e)
{
	return (int)e->hp.pooling;
}

int
engine_step(struct engine *e, struct engine_seq *const *seqs, const int32_t *tokens, int n, float *logits, char *err)
{
	for (int i = 0; i < n; i++)
		for (int j = 0; j < i; j++)
			if (seqs[i] == seqs[j])
				return ad_err(err, "a step feeds one token per sequence; columns %d and %d share one",
				              j, i);
	return engine_forward(e, seqs, tokens, n, NULL, logits, 0, err);
}

int
engine_prefill(struct engine *e, struct engine_seq *s, const int32_t *ids, int n, float *logits, char *err)
{
	if (n < 1)
		return ad_err(err, "nothing to prefill");
	if (s->len + n > e->max_seq)
		return ad_err(err, "%d tokens after %d do not fit the context of %d positions", n, s->len, e->max_seq);
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= e->V)
			return ad_err(err, "token id %d is outside the vocabulary of %d", ids[i], e->V);
	for (int i = 0; i < e->width; i++)
		e->batch[i] = s;
	uint8_t want[4096] = {0};
	for (int off = 0; off < n; off += e->width) {
		int m = n - off < e->width ? n - off : e->width;
		int last = off + m == n;
		want[m - 1] = last;
		if (engine_forward(e, e->batch, ids + off, m, want, last ? logits : NULL, 1, err))
			return -1;
	}
	return 0;
}

int
engine_eval(struct engine *e, struct engine_seq *s, const int32_t *ids, int n, int per_token, float *logits, char *err)
{
	return engine_eval_layers(e, s, ids, n, per_token, 0, logits, err);
}

// A warm-up, as llama.cpp's tools run one before their first request: the
// first layer over a whole chunk of columns, on a sequence of its own
// whose cache store then waits for the next sequence, its first rows of
// every layer written once. What a first prefill chunk writes for the
// first time (the ane-worker's activations and packed inputs, the data
// plane's host rows, the attention's scratch, the cache rows) is then in
// place, and the pools' threads have run: on the 2-vCPU VMs a page's
// first write costs 5-30 us, and the first 64-token chunk after a start
// took 124 ms where the next one took 89.
int
engine_warm(struct engine *e, char *err)
{
	const int n = e->width < e->max_seq ? e->width : e->max_seq;
	int32_t *ids = malloc((size_t)n * sizeof *ids);
	struct engine_seq *s = ids ? engine_seq_new(e, err) : NULL;
	if (!s) {
		free(ids);
		return ids ? -1 : ad_err(err, "warm-up: out of memory");
	}
	const int32_t bos = engine_bos(e);
	for (int i = 0; i < n; i++) {
		ids[i] = bos >= 0 && bos < e->V ? bos : 0;
		e->batch[i] = s;
	}
	const struct gen_timings t = e->t; // not a call anyone made
	e->upto = e->hp.n_layer > 1 ? 1 : 0;
	int rc = engine_forward(e, e->batch, ids, n, NULL, NULL, 1, err);
	e->upto = 0;
	e->t = t;
	free(ids);
	if (rc == 0) {
		struct kv_store *st = s->own;
		kv_ready(e, st, 0, n);
		for (int il = 0; il < (int)e->hp.n_layer; il++) {
			const struct eng_layer *L = &e->layers[il];
			const size_t kr = (size_t)L->nk * e->kv_elem, vr = (size_t)L->nv * e->kv_elem;
			if (L->conv)
				memset(st->kv + L->kv_off, 0, (size_t)n * (size_t)e->E * e->kv_elem);
			else if (L->own_kv) {
				memset(st->kv + L->kv_off, 0, (size_t)n * kr);
				memset(st->kv + L->kv_off + (size_t)e->max_seq * kr, 0, (size_t)n * vr);
			}
		}
		store_release(e->spare);
		e->spare = st;
		s->own = NULL;
	}
	engine_seq_free(s);
	return rc;
}

int
engine_eval_layers(struct engine *e, struct engine_seq *s, const int32_t *ids, int n, int per_token, int layers,
                   float *logits, char *err)
{
	if (layers < 0 || layers > e->hp.n_layer)
		return ad_err(err, "%d layers: the model has %lld", layers, (long long)e->hp.n_layer);
	if (n < 1 || n > e->max_seq)
		return ad_err(err, "%d tokens: the context holds 1 to %d", n, e->max_seq);
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= e->V)
			return ad_err(err, "token id %d is outside the vocabulary of %d", ids[i], e->V);
	engine_seq_reset(s);
	const int step = per_token ? 1 : e->width;
	for (int i = 0; i < e->width; i++)
		e->batch[i] = s;
	int rc = 0;
	e->upto = layers < e->hp.n_layer ? layers : 0;
	for (int off = 0; off < n && !rc; off += step) {
		int m = n - off < step ? n - off : step;
		rc = engine_forward(e, e->batch, ids + off, m, NULL, logits + (size_t)off * e->V, 1, err);
	}
	if (e->upto) // the later layers' cache rows were not written
		engine_seq_reset(s);
	e->upto = 0;
	return rc;
}

int
engine_prompt(struct engine *e, struct engine_seq *s, const int32_t *prompt, int n, int max_tokens, float *logits,
              struct engine_prompt_info *info, char *err)
{
	if (n < 1)
		return ad_err(err, "empty prompt");
	const struct fit f = fit_prompt(prompt, n, max_tokens, e->max_seq, engine_bos(e));
	const int keep = f.keep;
	int32_t *cut = NULL; // the kept prompt when it is not a suffix (a BOS kept in front)
	if (f.from && !(cut = malloc((size_t)keep * sizeof *cut)))
		return ad_err(err, "out of memory");
	if (cut)
		fit_copy(&f, prompt, cut);
	const int32_t *p = cut ? cut : prompt + (n - keep);
	for (int i = 0; i < keep; i++)
		if (p[i] < 0 || p[i] >= e->V) {
			free(cut);
			return ad_err(err, "token id %d is outside the vocabulary of %d", p[i], e->V);
		}
	int reuse = engine_seq_common(s, p, keep - 1);
	engine_seq_truncate(s, reuse);
	if (s->len > reuse) { // rows forks share could not be copied (engine_seq_truncate)
		free(cut);
		return ad_err(err, "out of memory for the rows of a sequence its forks share");
	}
	reuse = s->len; // a recurrent state may go back further
	int rc = engine_prefill(e, s, p + reuse, keep - reuse, logits, err);
	free(cut);
	if (rc)
		return -1;
	if (info)
		*info = (struct engine_prompt_info){keep, f.dropped, reuse, keep - reuse, f.max_tokens};
	return 0;
}
