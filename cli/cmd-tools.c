// cmd-tools.c - the developer tools of anedvd-dev (cli/anedvd-dev.c), which
// look at kernels and parts in this process: check, layers, kernels, probe,
// bench, width, attnbench. None of them is in the user's anedvd.
//
// check, layers and kernels build the model's kernels here (kb_local: the
// very programs the ane-worker runs, on emu or, in a macOS build, on the
// ane backend: --backend) and compare them with fp32 (kb_exact, the
// reference engine); probe, bench and width compile synthetic projections
// on the same backends; attnbench times the CPU attention.
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attention.h"
#include "build.h"
#include "cmd-common.h"
#include "mil.h"
#include "commands.h"
#include "dequant.h"
#include "emu.h"
#include "fp16.h"
#include "log.h"
#include "hugemem.h"
#include "memread.h"
#include "ref.h"
#include "tokenizer.h"
#include "wtype.h"

// --- shared -------------------------------------------------------------------------------

struct tool_opts {
	const char *cmd, *model, *prompt, *ids, *weights;
	const char *backend; // --backend: "emu" (default) or "ane"
	int chunk, split, threads, iters, upto, size, token, max_seq, cols;
	enum model_rope rope;
	int ctx, heads, kv_heads, head_dim;
	// tool_start's, for a tool that takes --model: the weights its kernels
	// hold (--weights or the model's default; fp16 where it takes no
	// --weights) and the kernels' options
	const char *wts;
	struct kb_opts ko;
};

// flags every tool may take; 1 consumed, 0 not ours, -1 bad value
static int
tool_flag(struct tool_opts *o, int argc, char **argv, int *i)
{
	const char *a = argv[*i];
	const struct cli_plain plain[] = {
		{.flag = "--model", .val = &o->model},
		{.flag = "--prompt", .val = &o->prompt},
		{.flag = "--prompt-ids", .val = &o->ids},
		{.flag = "--chunk", .num = &o->chunk, .lo = 1, .hi = 1024},
		{.flag = "--threads", .num = &o->threads, .lo = 1, .hi = 256},
		{.flag = "--iters", .num = &o->iters, .lo = 1, .hi = 1000000},
		{.flag = "--upto", .num = &o->upto, .lo = 0, .hi = 100000},
		{.flag = "--size", .num = &o->size, .lo = 1, .hi = 16384},
		{.flag = "--token", .num = &o->token, .lo = 0, .hi = INT32_MAX},
		{.flag = "--ctx", .num = &o->ctx, .lo = 1, .hi = 1 << 20},
		{.flag = "--heads", .num = &o->heads, .lo = 1, .hi = 1024},
		{.flag = "--kv-heads", .num = &o->kv_heads, .lo = 1, .hi = 1024},
		{.flag = "--head-dim", .num = &o->head_dim, .lo = 1, .hi = 1024},
		{.flag = "--max-seq", .num = &o->max_seq, .lo = 2, .hi = 1 << 20},
		{.flag = "--cols", .num = &o->cols, .lo = 1, .hi = 1024},
		{.flag = "--split", .on = &o->split},
		{0},
	};
	int r = cli_plain_flag(o->cmd, plain, argc, argv, i);
	if (r == 0)
		r = cli_model_flag(o->cmd, &o->rope, argc, argv, i);
	if (r != 0)
		return r;
	if (!strcmp(a, "--weights")) {
		if (!(o->weights = cli_val(o->cmd, argc, argv, i)) || pipe_weights_arg(o->cmd, o->weights))
			return -1;
	} else if (!strcmp(a, "--backend")) {
		if (!(o->backend = cli_val(o->cmd, argc, argv, i)))
			return -1;
		if (strcmp(o->backend, "emu") && strcmp(o->backend, "ane")) {
			fprintf(stderr, "anedvd-dev %s: --backend %s: unknown backend (emu or ane)\n", o->cmd,
			        o->backend);
			return -1;
		}
#ifndef ANEDVD_ANE
		if (!strcmp(o->backend, "ane")) {
			fprintf(stderr, "anedvd-dev %s: --backend ane: " ANE_NO_BACKEND_MSG "\n", o->cmd);
			return -1;
		}
#endif
	} else {
		return 0;
	}
	return 1;
}

// parse argv: 0 ok, 1 help, -1 bad (message printed); allowed lists the
// flags the tool takes ("--model --split ..."; where it takes --model, a
// bare word is the model), required those it must be given
static int
tool_args(struct tool_opts *o, int argc, char **argv, const char *allowed, const char *required)
{
	char al[600], seen[600] = " ", key[40];
	snprintf(al, sizeof al, " %s ", allowed);
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		snprintf(key, sizeof key, " %s ", a);
		if (a[0] != '-' && !o->model && strstr(al, " --model ")) {
			o->model = a;
			snprintf(key, sizeof key, " --model ");
		} else if (a[0] != '-' || !strstr(al, key)) {
			return cli_help_or_unknown(o->cmd, a);
		} else if (tool_flag(o, argc, argv, &i) <= 0) {
			return -1;
		}
		if (strlen(seen) + strlen(key) < sizeof seen)
			strcat(seen, key + 1);
	}
	int missing = 0;
	for (const char *p = required; *p; p += *p == ' ') {
		size_t n = strcspn(p, " ");
		snprintf(key, sizeof key, " %.*s ", (int)n, p);
		missing |= !strstr(seen, key);
		p += n;
	}
	if (!missing)
		return 0;
	// "--model is required", "--model and --upto are required"
	const char *sp = strchr(required, ' ');
	if (sp)
		fprintf(stderr, "anedvd-dev %s: %.*s and %s are required\n", o->cmd, (int)(sp - required), required,
		        sp + 1);
	else
		fprintf(stderr, "anedvd-dev %s: %s is required\n", o->cmd, required);
	return -1;
}

static const char *
backend_of(const struct tool_opts *o)
{
	return o->backend ? o->backend : "emu";
}

// the kernels' format named w ("fp32", the exact backend's, runs none)
static enum ane_wfmt
tool_wfmt(const char *w)
{
	enum ane_wfmt f = ANE_W_FP16;
	return ane_wfmt_parse(w, &f) ? ANE_W_FP16 : f;
}

// the start of every tool: its flags (tool_args), and for a tool that
// takes a model (m non-NULL; --model among the required flags) the model,
// loaded with --rope-hf / --rope-adjacent applied, and o->wts and o->ko.
// 0 to go on, or -1 with *status the exit status: 0 after --help, 2 after
// a bad or missing flag (with the usage), 1 when the model does not load
static int
tool_start(struct tool_opts *o, int argc, char **argv, const char *allowed, const char *required, void (*usage)(void),
           struct model *m, int *status)
{
	int r = tool_args(o, argc, argv, allowed, required);
	if (r) {
		usage();
		*status = r > 0 ? 0 : 2;
		return -1;
	}
	if (!m)
		return 0;
	char err[AD_ERRLEN];
	if (model_load(m, o->model, err)) {
		fprintf(stderr, "anedvd-dev %s: %s\n", o->cmd, err);
		*status = 1;
		return -1;
	}
	if (o->rope)
		m->hp.rope = o->rope;
	o->wts = strstr(allowed, "--weights") ? pipe_weights(m, backend_of(o), o->weights) : "fp16";
	o->ko = (struct kb_opts){.width = o->chunk,
	                         .split = o->split,
	                         .threads = o->threads,
	                         .weights = tool_wfmt(o->wts),
	                         .backend = o->backend};
	return 0;
}

static void
rng_fill(float *x, size_t n, uint64_t seed, float scale)
{
	uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
	for (size_t i = 0; i < n; i++) {
		s = s * 6364136223846793005ull + 1442695040888963407ull;
		x[i] = scale * ((float)(s >> 40) / 8388608.0f - 1.0f);
	}
}

static int
cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

// run kernel id of kb on ncols columns, each a copy of x (in_ch); y gets
// column 0's out_ch values; kb_exact reads and writes its fp32 twins
static int
call_cols(struct kernel_backend *kb, int id, const float *x, float *y, int ncols, int iters, double *us, char *err)
{
	const struct kb_info *ki = &kb->kernels[id];
	// the backends keep their own copy of a surface they hand out (and free it)
	struct ad_surface sin, sout, *in = &sin, *out = &sout;
	char nm[32];
	snprintf(nm, sizeof nm, "t%d-in", id);
	if (kb->surface_new(kb, nm, ki->in_ch, 0, in, err))
		return -1;
	snprintf(nm, sizeof nm, "t%d-out", id);
	if (kb->surface_new(kb, nm, ki->out_ch, 0, out, err))
		return -1;
	float *xs = kb_exact_shadow(kb, in);
	for (int c = 0; c < ncols; c++)
		if (xs)
			memcpy(xs + (size_t)c * ki->in_ch, x, (size_t)ki->in_ch * sizeof *x);
	if (!xs) {
		float *xc = malloc((size_t)ncols * ki->in_ch * sizeof *xc);
		if (!xc)
			return ad_err(err, "out of memory");
		for (int c = 0; c < ncols; c++)
			memcpy(xc + (size_t)c * ki->in_ch, x, (size_t)ki->in_ch * sizeof *x);
		surface_write(in, xc, (size_t)ncols, (size_t)ki->in_ch);
		free(xc);
	}
	// *us: the median eval, not the mean: the first evals after a pause
	// (a pool worker asleep, fresh surfaces) took up to 20x the rest
	struct kb_timing t;
	int n = iters > 0 ? iters : 1;
	double *ev = us ? malloc((size_t)n * sizeof *ev) : NULL;
	if (us && !ev)
		return ad_err(err, "out of memory");
	for (int i = 0; i < n; i++) {
		double t0 = cli_now_ms();
		if (kb->call(kb, id, in, out, ncols, &t, err)) {
			free(ev);
			return -1;
		}
		if (ev)
			ev[i] = (cli_now_ms() - t0) * 1e3;
	}
	if (us) {
		qsort(ev, (size_t)n, sizeof *ev, cmp_dbl);
		*us = ev[n / 2];
		free(ev);
	}
	float *ys = kb_exact_shadow(kb, out);
	if (ys)
		memcpy(y, ys, (size_t)ki->out_ch * sizeof *y);
	else
		surface_read(out, y, 1, (size_t)ki->out_ch);
	return 0;
}

static int
call1(struct kernel_backend *kb, int id, const float *x, float *y, int iters, double *us, char *err)
{
	return call_cols(kb, id, x, y, 1, iters, us, err);
}

// the normed embedding of token t through layer 0's attention norm: a real
// activation for the kernels that read n_embd channels
static int
real_activation(const struct model *m, int32_t t, float *x, char *err)
{
	int64_t E = m->hp.n_embd;
	size_t rb;
	if (t < 0 || t >= m->hp.n_vocab)
		return ad_err(err, "token %d is outside the vocabulary", t);
	if (ad_type_row_bytes(m->tok_embd.type, E, &rb))
		return ad_err(err, "token_embd: unsupported row");
	if (ad_dequant(m->tok_embd.type, (const char *)m->tok_embd.data + (size_t)t * rb, x, E, err))
		return -1;
	float *w = malloc((size_t)E * sizeof *w);
	const struct model_tensor *nt = &m->layers[0].attn_norm;
	if (!w)
		return ad_err(err, "out of memory");
	if (nt->data && ad_dequant(nt->type, nt->data, w, E, err)) {
		free(w);
		return -1;
	}
	double ss = 0;
	for (int64_t i = 0; i < E; i++)
		ss += (double)x[i] * x[i];
	float eps = m->hp.rms_eps > 0 ? m->hp.rms_eps : 1e-5f;
	float sc = 1.0f / sqrtf((float)(ss / E) + eps);
	for (int64_t i = 0; i < E; i++)
		x[i] = x[i] * sc * (nt->data ? w[i] : 1.0f);
	free(w);
	return 0;
}

// --- check --------------------------------------------------------------------------------

static void
top5(const float *l, int nv, const struct tokenizer *tk, const char *what)
{
	int id[5] = {-1, -1, -1, -1, -1};
	for (int c = 0; c < 5 && c < nv; c++)
		for (int i = 0; i < nv; i++) {
			int taken = 0;
			for (int t = 0; t < c; t++)
				taken |= id[t] == i;
			if (!taken && (id[c] < 0 || l[i] > l[id[c]]))
				id[c] = i;
		}
	printf("  %-10s", what);
	for (int c = 0; c < 5 && c < nv; c++) {
		char *s = NULL;
		size_t len = 0;
		char e[AD_ERRLEN];
		int32_t t = id[c];
		if (tk && tok_decode(tk, &t, 1, &s, &len, e) == 0)
			printf("  %d '%s' %.3f", t, s, l[t]);
		else
			printf("  %d %.3f", t, l[t]);
		free(s);
	}
	printf("\n");
}

// the prompt's next token: its top 5 through the pipeline engine on kb and
// through the fp32 reference engine (ref_new_ctx: the same context), and
// the relative error of the last logits; 0, or -1 with err
static int
predictions(const struct model *m, struct kernel_backend *kb, const struct tokenizer *tk, const int32_t *ids, int n,
            int max_seq, double *rel, char *err)
{
	struct engine_opts eo = {.max_seq = max_seq};
	struct engine *e = engine_new(m, kb, &eo, err);
	struct engine_seq *s = e ? engine_seq_new(e, err) : NULL;
	struct ref_engine *ref = s ? ref_new_ctx(m, n, max_seq, err) : NULL;
	const int nv = (int)m->hp.n_vocab;
	float *a = malloc((size_t)n * nv * sizeof *a), *b = malloc((size_t)n * nv * sizeof *b);
	int rc = -1;
	if (!ref)
		goto out;
	if (!a || !b) {
		ad_err(err, "out of memory");
		goto out;
	}
	if (engine_eval(e, s, ids, n, 0, a, err))
		goto out;
	if (ref_eval(ref, ids, n, b)) {
		ad_err(err, "the reference engine refused the prompt");
		goto out;
	}
	const float *la = a + (size_t)(n - 1) * nv, *lb = b + (size_t)(n - 1) * nv;
	double md;
	*rel = cli_rel_err(la, lb, (size_t)nv, &md, NULL);
	top5(la, nv, tk, kb->name);
	top5(lb, nv, tk, "reference");
	printf("  last position: rel %.3e, max|diff| %.3e, argmax %s\n", *rel, md,
	       ref_argmax(la, nv) == ref_argmax(lb, nv) ? "equal" : "DIFFERS");
	rc = 0;
out:
	free(a);
	free(b);
	ref_free(ref);
	engine_seq_free(s);
	engine_free(e);
	return rc;
}

// the LM head's logits for x, every chunk of kb into its place in row (y:
// room for a chunk)
static int
lm_head_row(struct kernel_backend *kb, const float *x, float *y, float *row, char *err)
{
	for (int i = 0; i < kb->n_kernels; i++)
		if (kb->kernels[i].kind == ANE_K_LM_HEAD) {
			if (call1(kb, i, x, y, 1, NULL, err))
				return -1;
			memcpy(row + kb->kernels[i].row_offset, y, (size_t)kb->kernels[i].out_ch * sizeof *y);
		}
	return 0;
}

// the prompt's ids: --prompt-ids, else --prompt (or the default) through
// the model's tokenizer; 0, -1 (message printed), 2 (bad flags)
static int
prompt_ids(const struct tool_opts *o, const struct model *m, const struct tokenizer *tk, int32_t **ids, int *n)
{
	char err[AD_ERRLEN] = "";
	if (o->prompt && o->ids) {
		fprintf(stderr, "anedvd-dev %s: give one of --prompt and --prompt-ids\n", o->cmd);
		return 2;
	}
	if (o->ids) {
		if (cli_ids(o->cmd, "--prompt-ids", o->ids, ids, n))
			return 2;
	} else {
		const char *t = o->prompt ? o->prompt : "The capital of France is";
		size_t nn = 0;
		if (!tk || tok_encode(tk, t, strlen(t), -1, 0, ids, &nn, err)) {
			fprintf(stderr, "anedvd-dev %s: the prompt needs the model's tokenizer: %s\n", o->cmd,
			        tk ? err : "none could be loaded");
			return -1;
		}
		*n = (int)nn;
	}
	for (int i = 0; i < *n; i++)
		if ((*ids)[i] < 0 || (*ids)[i] >= m->hp.n_vocab) {
			fprintf(stderr, "anedvd-dev %s: token id %d is outside the vocabulary\n", o->cmd, (*ids)[i]);
			return 2;
		}
	if (*n < 1) {
		fprintf(stderr, "anedvd-dev %s: the prompt has no tokens\n", o->cmd);
		return 2;
	}
	return 0;
}


static void
check_usage(void)
{
	fprintf(stderr,
	        "usage: anedvd-dev check --model M [--split] [--chunk N] [--threads N] [--token ID]\n"
	        "                        [--weights fp16|int8|lut4] [--backend emu|ane] [--prompt TEXT | --prompt-ids 1,2]\n"
	        "                        [--arch NAME]\n"
	        "  the model's config and RoPE convention; every kernel of layer 0 and the whole\n"
	        "  LM head, built on the backend (default emu; ane only in a macOS build) with fp16,\n"
	        "  int8 or lut4 weights (default int8 on emu for a model stored in 8 bits or fewer),\n"
	        "  against fp32 projections with the same dequantised weights (kb_exact), on one\n"
	        "  real activation: the normed embedding of --token (default: BOS, else 1) for\n"
	        "  kernels reading n_embd channels, a fixed pseudo-random vector for o and down;\n"
	        "  max|diff|, relative (L2) error, NaN count; ok below 0.02 (lut4: 0.15, the 4-bit\n"
	        "  weights' own error being a few percent), else FAIL (exit 1).\n"
	        "  Then sample predictions: the top 5 next tokens after the prompt (default \"The\n"
	        "  capital of France is\") through the whole model on the backend and through the\n"
	        "  fp32 reference engine\n"
	        "  --arch NAME  run a GGUF file as architecture NAME whatever it says\n");
}

int
cmd_check(int argc, char **argv)
{
	struct tool_opts o = {.cmd = "check", .token = -1};
	struct model m;
	int status;
	if (tool_start(&o, argc, argv,
	               "--model --split --chunk --threads --token --rope-hf --rope-adjacent --weights --arch --backend "
	               "--prompt --prompt-ids",
	               "--model", check_usage, &m, &status))
		return status;
	char err[AD_ERRLEN];
	struct kernel_backend *kl = NULL, *kx = NULL;
	float *x = NULL, *xo = NULL, *ya = NULL, *yb = NULL;
	int32_t *ids = NULL;
	int n_ids = 0;
	status = 1;
	char rope_line[512];
	struct tokenizer *tk = m.gguf ? tok_load_gguf(m.gguf, err) : tok_load(o.model, err);
	const struct model_hparams *hp = &m.hp;
	printf("model: %s (%s, %lld layers, n_embd %lld, vocab %lld)\n", o.model, model_arch_name(m.arch),
	       (long long)hp->n_layer, (long long)hp->n_embd, (long long)hp->n_vocab);
	printf("config: heads %lld / kv %lld, head size %lld / %lld, feed-forward %lld%s, context %lld, rms eps %g\n",
	       (long long)hp->n_head, (long long)hp->n_head_kv, (long long)hp->head_dim, (long long)hp->head_dim_v,
	       (long long)hp->n_ff, hp->n_expert ? " (+ experts)" : "", (long long)hp->n_ctx_train,
	       (double)hp->rms_eps);
	model_describe_rope(&m, rope_line, sizeof rope_line);
	printf("RoPE: %s%s\n", rope_line, o.rope ? " (forced by --rope-hf / --rope-adjacent)" : "");
	int pr = prompt_ids(&o, &m, tk, &ids, &n_ids);
	if (pr) {
		status = pr > 0 ? 2 : 1;
		goto out;
	}
	double t0 = cli_now_ms();
	if (!(kl = kb_local_new(&m, &o.ko, err)) || !(kx = kb_exact_new(&m, &o.ko, err))) {
		fprintf(stderr, "anedvd-dev check: %s\n", err);
		goto out;
	}
	printf("%s: %d kernels, width %d, %s weights, compiled in %.0f ms\n", kl->name, kl->n_kernels, kl->width, o.wts,
	       cli_now_ms() - t0);
	int32_t tok = o.token >= 0 ? o.token : m.hp.bos_id >= 0 ? (int32_t)m.hp.bos_id : 1;
	int maxc = (int)m.hp.n_vocab;
	for (int i = 0; i < kl->n_kernels; i++) {
		maxc = kl->kernels[i].in_ch > maxc ? kl->kernels[i].in_ch : maxc;
		maxc = kl->kernels[i].out_ch > maxc ? kl->kernels[i].out_ch : maxc;
	}
	x = malloc((size_t)maxc * sizeof *x);
	xo = malloc((size_t)maxc * sizeof *xo);
	ya = malloc((size_t)maxc * sizeof *ya);
	yb = malloc((size_t)maxc * sizeof *yb);
	float *ha = malloc((size_t)m.hp.n_vocab * sizeof *ha), *hb = malloc((size_t)m.hp.n_vocab * sizeof *hb);
	if (!x || !xo || !ya || !yb || !ha || !hb || real_activation(&m, tok, x, err)) {
		fprintf(stderr, "anedvd-dev check: %s\n", x ? err : "out of memory");
		free(ha);
		free(hb);
		goto out;
	}
	rng_fill(xo, (size_t)maxc, 7, 1.0f);
	printf("activation: token %d through blk.0.attn_norm\n", tok);
	int fails = 0;
	// the kernels against fp32 with the model's own weights: 4-bit weights
	// are a few percent off those by themselves (verify prints how much),
	// while a kernel's mistake shows as far more
	const double bound = o.ko.weights == ANE_W_LUT4 ? 0.15 : 0.02;
	for (int i = 0; i < kl->n_kernels; i++) {
		const struct kb_info *ki = &kl->kernels[i];
		if (ki->layer != 0)
			continue;
		int j = kb_find(kx, ki->kind, 0, ki->chunk);
		if (j < 0) {
			printf("  %-8s (no fp32 twin in this form; run with --split to compare it)\n",
			       pipe_kind_name(ki->kind));
			continue;
		}
		const float *in = ki->in_ch == m.hp.n_embd ? x : xo;
		if (call1(kl, i, in, ya, 1, NULL, err) || call1(kx, j, in, yb, 1, NULL, err)) {
			fprintf(stderr, "anedvd-dev check: %s\n", err);
			goto out;
		}
		double md;
		int nans;
		double rel = cli_rel_err(ya, yb, (size_t)ki->out_ch, &md, &nans);
		int ok = rel < bound && nans == 0;
		fails += !ok;
		printf("  %-8s %5d -> %-6d max|%s-fp32| = %.5e  rel = %.5e  nan = %d  -> %s\n",
		       pipe_kind_name(ki->kind), ki->in_ch, ki->out_ch, kl->name, md, rel, nans, ok ? "ok" : "FAIL");
	}
	// the LM head: every chunk of each backend into a whole row
	if (lm_head_row(kl, x, ya, ha, err) || lm_head_row(kx, x, yb, hb, err)) {
		fprintf(stderr, "anedvd-dev check: %s\n", err);
		goto out;
	}
	{
		double md;
		int nans;
		double rel = cli_rel_err(ha, hb, (size_t)m.hp.n_vocab, &md, &nans);
		int ok = rel < bound && nans == 0;
		fails += !ok;
		printf("  %-8s %5lld -> %-6lld max|%s-fp32| = %.5e  rel = %.5e  nan = %d  -> %s\n", "lm_head",
		       (long long)m.hp.n_embd, (long long)m.hp.n_vocab, kl->name, md, rel, nans, ok ? "ok" : "FAIL");
	}
	free(ha);
	free(hb);
	printf("%s\n", fails ? "FAIL" : "all kernels ok");
	// sample predictions through the whole model
	printf("sample predictions after %d prompt tokens (%s):\n", n_ids, o.ids ? "--prompt-ids" : "the tokenizer");
	double prel;
	if (predictions(&m, kl, tk, ids, n_ids, n_ids + 1, &prel, err)) {
		fprintf(stderr, "anedvd-dev check: predictions: %s\n", err);
		goto out;
	}
	status = fails ? 1 : 0;
out:
	free(ids);
	tok_free(tk);
	free(x);
	free(xo);
	free(ya);
	free(yb);
	if (kl)
		kl->free(kl);
	if (kx)
		kx->free(kx);
	model_free(&m);
	return status;
}

// --- layers -------------------------------------------------------------------------------

static void
layers_usage(void)
{
	fprintf(stderr,
	        "usage: anedvd-dev layers --model M --upto N [--prompt TEXT | --prompt-ids 1,2,3] [--chunk N] [--split]\n"
	        "                         [--max-seq N] [--backend emu|ane] [--arch NAME]\n"
	        "  the prompt through only the first N layers (then the final norm and the LM head),\n"
	        "  on the backend in this process (default emu; ane only in a macOS build) and in the\n"
	        "  fp32 reference engine, and the top 5 next tokens\n"
	        "  of both: bisects a model that produces garbage. The cut is made by building both\n"
	        "  engines on the model with its layer count set to N. Default prompt\n"
	        "  \"The capital of France is\".\n"
	        "  --max-seq N  the context both engines are built for (default: the prompt + 1); it picks\n"
	        "               what depends on it, e.g. LongRoPE's long factors past the original context\n"
	        "  --arch NAME  run a GGUF file as architecture NAME whatever it says\n");
}

int
cmd_layers(int argc, char **argv)
{
	struct tool_opts o = {.cmd = "layers"};
	struct model m;
	int status;
	if (tool_start(
		    &o, argc, argv,
		    "--model --upto --prompt --prompt-ids --chunk --split --threads --rope-hf --rope-adjacent --arch "
		    "--max-seq --backend",
		    "--model --upto", layers_usage, &m, &status))
		return status;
	status = 1;
	char err[AD_ERRLEN];
	int32_t *ids = NULL;
	int n = 0;
	struct tokenizer *tk = NULL;
	struct kernel_backend *kl = NULL;
	if (o.prompt && o.ids) {
		fprintf(stderr, "anedvd-dev layers: give one of --prompt and --prompt-ids\n");
		status = 2;
		goto out;
	}
	if (o.ids && cli_ids("layers", "--prompt-ids", o.ids, &ids, &n)) {
		status = 2;
		goto out;
	}
	tk = m.gguf ? tok_load_gguf(m.gguf, err) : tok_load(o.model, err);
	if (!ids) {
		const char *t = o.prompt ? o.prompt : "The capital of France is";
		size_t nn = 0;
		if (!tk || tok_encode(tk, t, strlen(t), -1, 0, &ids, &nn, err)) {
			fprintf(stderr, "anedvd-dev layers: the prompt needs the model's tokenizer: %s\n", err);
			goto out;
		}
		n = (int)nn;
	}
	if (o.upto > m.hp.n_layer) {
		fprintf(stderr, "anedvd-dev layers: --upto %d: the model has %lld layers\n", o.upto,
		        (long long)m.hp.n_layer);
		status = 2;
		goto out;
	}
	for (int i = 0; i < n; i++)
		if (ids[i] >= m.hp.n_vocab) {
			fprintf(stderr, "anedvd-dev layers: token id %d is outside the vocabulary\n", ids[i]);
			status = 2;
			goto out;
		}
	struct model cut = m; // the same tensors, fewer layers
	cut.hp.n_layer = o.upto;
	if (o.max_seq && o.max_seq < n + 1) {
		fprintf(stderr, "anedvd-dev layers: --max-seq %d: the prompt has %d tokens\n", o.max_seq, n);
		status = 2;
		goto out;
	}
	const int max_seq = o.max_seq ? o.max_seq : n + 1;
	if (!(kl = kb_local_new(&cut, &o.ko, err))) {
		fprintf(stderr, "anedvd-dev layers: %s\n", err);
		goto out;
	}
	printf("model: %s, %d of %lld layers, %d prompt tokens, context %d\n", o.model, o.upto, (long long)m.hp.n_layer,
	       n, max_seq);
	double rel;
	if (predictions(&cut, kl, tk, ids, n, max_seq, &rel, err)) {
		fprintf(stderr, "anedvd-dev layers: %s\n", err);
		goto out;
	}
	status = 0;
out:
	if (kl)
		kl->free(kl);
	tok_free(tk);
	free(ids);
	model_free(&m);
	return status;
}

// --- kernels ------------------------------------------------------------------------------

#define COLS_ROUNDS 5
#define PASS_ROUNDS 7
#define PASS_READ_MAX ((size_t)512 << 20) // the baseline's buffer at most

static void
kernels_usage(void)
{
	fprintf(stderr,
	        "usage: anedvd-dev kernels --model M [--iters K] [--chunk N] [--split] [--threads N]\n"
	        "                          [--weights fp16|int8|lut4] [--backend emu|ane] [--cols N] [--arch NAME]\n"
	        "  time every kernel of layer 0 and the LM head on the backend (default emu; ane\n"
	        "  only in a macOS build) for one column (a decode step), K times in a row\n"
	        "  (default 20): the median ms per eval and the GB/s of the weight bytes the\n"
	        "  kernels hold (fp16; int8 and the row scales; lut4's indices, tables and\n"
	        "  scales; default int8 for a model stored in 8 bits or fewer), then the\n"
	        "  per-token total (layer 0 times the layer count plus the LM head); then\n"
	        "  the decode pass: every kernel of the model once, in order, one column, as a\n"
	        "  decode step streams them (input and output in host rows), in %d rounds\n"
	        "  alternating with a streaming read of as many bytes (at most %zu MiB) on as\n"
	        "  many threads in this process: GB/s of each and their ratio (the emu's\n"
	        "  roofline: 1.00x reads its weights as fast as a plain read does), each kind\n"
	        "  of kernel's GB/s in its own time and the time around the kernels, and how\n"
	        "  much of the process is on 2 MiB pages (the weights should be) and how one\n"
	        "  column's weights are prefetched on the emu (ANEDVD_PREFETCH_AHEAD and\n"
	        "  ANEDVD_PREFETCH_NTA set it)\n"
	        "  --cols N     then the same kernels at 1..N columns (at most the chunk), in %d\n"
	        "               rounds that alternate the widths: ms per pass (every layer and the\n"
	        "               LM head), its ratio to one column within each round and the cost of\n"
	        "               each extra column (what a draft token costs a speculative verify)\n"
	        "  --arch NAME  run a GGUF file as architecture NAME whatever it says\n",
	        PASS_ROUNDS, PASS_READ_MAX >> 20, COLS_ROUNDS);
}

// --cols: every layer-0 kernel and the LM head at 1..n columns, ms per
// pass (layer 0 times the layer count plus the head); the widths alternate
// inside each round so that a busy machine hurts them alike, and the ratio
// to one column is taken within a round
static int
kernels_cols(struct kernel_backend *kl, const struct model *m, int n, int iters, const float *x, float *y, char *err)
{
	double *ms = calloc((size_t)COLS_ROUNDS * (n + 1), sizeof *ms);
	if (!ms)
		return ad_err(err, "out of memory");
	for (int r = 0; r < COLS_ROUNDS; r++)
		for (int c = 1; c <= n; c++) {
			double layer = 0, head = 0;
			for (int i = 0; i < kl->n_kernels; i++) {
				const struct kb_info *ki = &kl->kernels[i];
				if (ki->layer != 0 && ki->kind != ANE_K_LM_HEAD)
					continue;
				double us = 0;
				if (call_cols(kl, i, x, y, c, 1, NULL, err) ||
				    call_cols(kl, i, x, y, c, iters, &us, err)) {
					free(ms);
					return -1;
				}
				*(ki->kind == ANE_K_LM_HEAD ? &head : &layer) += us / 1e3;
			}
			ms[(size_t)r * (n + 1) + c] = layer * (double)m->hp.n_layer + head;
		}
	printf("columns (%d rounds, %d iterations each; median [min, max]):\n", COLS_ROUNDS, iters);
	printf("  cols   ms/pass                    x one column           ms per extra column\n");
	for (int c = 1; c <= n; c++) {
		double a[COLS_ROUNDS], q[COLS_ROUNDS], e[COLS_ROUNDS];
		for (int r = 0; r < COLS_ROUNDS; r++) {
			const double *row = ms + (size_t)r * (n + 1);
			a[r] = row[c];
			q[r] = row[1] > 0 ? row[c] / row[1] : 0;
			e[r] = c > 1 ? (row[c] - row[1]) / (c - 1) : 0;
		}
		qsort(a, COLS_ROUNDS, sizeof *a, cmp_dbl);
		qsort(q, COLS_ROUNDS, sizeof *q, cmp_dbl);
		qsort(e, COLS_ROUNDS, sizeof *e, cmp_dbl);
		const int h = COLS_ROUNDS / 2, z = COLS_ROUNDS - 1;
		printf("  %4d   %8.3f [%7.3f, %7.3f]   %5.2f [%4.2f, %4.2f]", c, a[h], a[0], a[z], q[h], q[0], q[z]);
		if (c > 1)
			printf("     %7.3f [%6.3f, %6.3f]", e[h], e[0], e[z]);
		printf("\n");
	}
	free(ms);
	return 0;
}

static void
med3(double *v, int n, double *med, double *lo, double *hi)
{
	qsort(v, (size_t)n, sizeof *v, cmp_dbl);
	*med = v[n / 2];
	*lo = v[0];
	*hi = v[n - 1];
}

// kernel kinds the pass reports apart (plan.h's ane_kind; 0: any other)
#define PASS_KINDS 8

static int
pass_kind(const struct kb_info *k)
{
	return k->kind > 0 && k->kind < PASS_KINDS ? k->kind : 0;
}

// whether a decode step calls kernel b in the same round trip as a, the
// one before it (engine.c: a fused step's calls end where the CPU has work,
// before O (attention) and a split FFN's DOWN (its activation); the
// resnorms between the others run in the worker)
static int
pass_chains(const struct kb_info *a, const struct kb_info *b)
{
	switch (b->kind) {
	case ANE_K_FFN:
	case ANE_K_GATE_UP:
		return a->kind == ANE_K_O;
	case ANE_K_QKV:
		return a->kind == ANE_K_FFN || a->kind == ANE_K_DOWN;
	case ANE_K_LM_HEAD:
		return a->kind == ANE_K_FFN || a->kind == ANE_K_DOWN || a->kind == ANE_K_LM_HEAD;
	default:
		return 0;
	}
}

// the decode pass: every kernel once, in order, one column (the weights of
// a whole token, streamed as a decode step streams them), in rounds that
// alternate with a streaming read of the same process (memread.h) of as
// many bytes on the emu's threads; the ratio is taken within a round
static int
kernels_pass(struct kernel_backend *kl, int threads, int emu, int narrow, const float *x, char *err)
{
	int n = kl->n_kernels, rc = -1;
	// one input and one output surface per channel count
	struct ad_surface *sin = calloc((size_t)n, sizeof *sin), *sout = calloc((size_t)n, sizeof *sout);
	int *si = calloc((size_t)n, sizeof *si), *so = calloc((size_t)n, sizeof *so);
	struct ad_memread *rd = NULL;
	struct kb_step *steps = NULL;
	struct kb_timing *tm = calloc((size_t)n, sizeof *tm);
	if (!sin || !sout || !si || !so || !tm) {
		ad_err(err, "out of memory");
		goto out;
	}
	double bytes = 0, kind_bytes[PASS_KINDS] = {0};
	int maxin = 0, maxout = 0;
	for (int i = 0; i < n; i++) {
		const struct kb_info *ki = &kl->kernels[i];
		bytes += (double)ki->weight_bytes;
		kind_bytes[pass_kind(ki)] += (double)ki->weight_bytes;
		si[i] = so[i] = -1;
		for (int j = 0; j < i; j++) {
			if (si[i] < 0 && kl->kernels[j].in_ch == ki->in_ch)
				si[i] = si[j];
			if (so[i] < 0 && kl->kernels[j].out_ch == ki->out_ch)
				so[i] = so[j];
		}
		char nm[32];
		if (si[i] < 0) {
			snprintf(nm, sizeof nm, "pass%d-in", i);
			if (kl->surface_new(kl, nm, ki->in_ch, 0, &sin[i], err))
				goto out;
			float *xs = kb_exact_shadow(kl, &sin[i]);
			if (xs)
				memcpy(xs, x, (size_t)ki->in_ch * sizeof *x);
			else
				surface_write(&sin[i], x, 1, (size_t)ki->in_ch);
			si[i] = i;
		}
		if (so[i] < 0) {
			snprintf(nm, sizeof nm, "pass%d-out", i);
			if (kl->surface_new(kl, nm, ki->out_ch, 0, &sout[i], err))
				goto out;
			so[i] = i;
		}
		maxin = ki->in_ch > maxin ? ki->in_ch : maxin;
		maxout = ki->out_ch > maxout ? ki->out_ch : maxout;
	}
	// the kernels read and write host rows, as a decode step's LM head and
	// attention do (kb_step): the surfaces' planes cost a line per channel
	float *xin = kb_host_alloc(kl, (size_t)maxin, err), *xout = xin ? kb_host_alloc(kl, (size_t)maxout, err) : NULL;
	if (!xout)
		goto out;
	memcpy(xin, x, (size_t)maxin * sizeof *x);
	if (!(steps = calloc((size_t)n, sizeof *steps))) {
		ad_err(err, "out of memory");
		goto out;
	}
	for (int i = 0; i < n; i++)
		steps[i] = (struct kb_step){
			.id = i, .in = &sin[si[i]], .out = &sout[so[i]], .ncols = 1, .x_in = xin, .x_out = xout};
	// before the read's buffer exists: the weights, and little else
	long long huge = ad_huge_process_bytes();
	// a tiny model's pass runs from the caches: its read does too (at least 64 KiB)
	size_t rb = bytes < (double)PASS_READ_MAX ? (size_t)bytes : PASS_READ_MAX;
	rb = rb < ((size_t)64 << 10) ? (size_t)64 << 10 : rb;
	if (!(rd = ad_memread_new(rb, threads, err)))
		goto out;
	double pass_ms[PASS_ROUNDS], pass_gbs[PASS_ROUNDS], read_gbs[PASS_ROUNDS], ratio[PASS_ROUNDS];
	// each kind's share: the kernels' own time (exec_ns) a round, and the
	// rest of the pass (the calls around the kernels)
	double kind_gbs[PASS_KINDS][PASS_ROUNDS], around_ms[PASS_ROUNDS];
	for (int r = -1; r < PASS_ROUNDS; r++) { // round -1: the warm-up
		double g = 0, ms = 0;
		for (int k = 0; k < 2; k++) {
			if ((k == 0) == (r % 2 == 0)) {
				g = ad_memread_pass(rd);
				continue;
			}
			double t0 = cli_now_ms();
			for (int i = 0, j; i < n; i = j) {
				for (j = i + 1; j < n && pass_chains(&kl->kernels[j - 1], &kl->kernels[j]); j++)
					;
				if (kb_call_list(kl, steps + i, j - i, tm + i, err))
					goto out;
			}
			ms = cli_now_ms() - t0;
		}
		if (r < 0)
			continue;
		double kns[PASS_KINDS] = {0}, all = 0;
		for (int i = 0; i < n; i++) {
			kns[pass_kind(&kl->kernels[i])] += (double)tm[i].exec_ns;
			all += (double)tm[i].exec_ns;
		}
		for (int k = 0; k < PASS_KINDS; k++)
			kind_gbs[k][r] = kns[k] > 0 ? kind_bytes[k] / kns[k] : 0;
		around_ms[r] = ms - all / 1e6;
		pass_ms[r] = ms;
		pass_gbs[r] = ms > 0 ? bytes / (ms * 1e6) : 0;
		read_gbs[r] = g;
		ratio[r] = g > 0 ? pass_gbs[r] / g : 0;
	}
	double m[4][3];
	med3(pass_ms, PASS_ROUNDS, &m[0][0], &m[0][1], &m[0][2]);
	med3(pass_gbs, PASS_ROUNDS, &m[1][0], &m[1][1], &m[1][2]);
	med3(read_gbs, PASS_ROUNDS, &m[2][0], &m[2][1], &m[2][2]);
	med3(ratio, PASS_ROUNDS, &m[3][0], &m[3][1], &m[3][2]);
	printf("decode pass: %d kernels, %.1f MB of weights, one column, %d rounds (median [min, max]):\n", n,
	       bytes / 1e6, PASS_ROUNDS);
	char thp[16];
	const char *mode = ad_huge_thp_mode(thp, sizeof thp);
	if (huge >= 0)
		printf("  on 2 MiB pages: %.1f MB of this process (transparent huge pages: %s)\n", (double)huge / 1e6,
		       mode ? mode : "unknown");
	if (emu) // the distance that matters most for the pass, by the CPU's kind and the weights
		printf("  one column prefetched %zu bytes ahead (%s weights; %s; ANEDVD_PREFETCH_AHEAD and "
		       "ANEDVD_PREFETCH_NTA set it)\n",
		       emu_prefetch_steps(narrow) * 64, narrow ? "int8 or lut4" : "fp16",
		       emu_prefetch_nta(narrow) ? "non-temporal" : "into L2");
	printf("  pass: %.3f ms [%.3f, %.3f], %.2f GB/s [%.2f, %.2f]\n", m[0][0], m[0][1], m[0][2], m[1][0], m[1][1],
	       m[1][2]);
	printf("  streaming read: %d threads, %.1f MB, %.2f GB/s [%.2f, %.2f]\n", threads,
	       (double)ad_memread_bytes(rd) / 1e6, m[2][0], m[2][1], m[2][2]);
	printf("  pass / read: %.3fx [%.3f, %.3f]\n", m[3][0], m[3][1], m[3][2]);
	// where the pass's time goes: each kind of kernel's weights over its
	// own time, and what the calls around the kernels add
	printf("  by kind, GB/s in the kernels' own time:");
	for (int k = 0; k < PASS_KINDS; k++) {
		if (kind_bytes[k] <= 0)
			continue;
		double g[3];
		med3(kind_gbs[k], PASS_ROUNDS, &g[0], &g[1], &g[2]);
		printf(" %s %.1f MB %.2f [%.2f, %.2f];", k ? ane_kind_name((enum ane_kind)k) : "other",
		       kind_bytes[k] / 1e6, g[0], g[1], g[2]);
	}
	double a[3];
	med3(around_ms, PASS_ROUNDS, &a[0], &a[1], &a[2]);
	printf(" around the kernels %.3f ms [%.3f, %.3f]\n", a[0], a[1], a[2]);
	rc = 0;
out:
	ad_memread_free(rd);
	free(steps);
	free(tm);
	free(sin);
	free(sout);
	free(si);
	free(so);
	return rc;
}

int
cmd_kernels(int argc, char **argv)
{
	struct tool_opts o = {.cmd = "kernels", .iters = 20};
	struct model m;
	int status;
	if (tool_start(&o, argc, argv, "--model --iters --chunk --split --threads --weights --cols --arch --backend",
	               "--model", kernels_usage, &m, &status))
		return status;
	char err[AD_ERRLEN];
	struct kernel_backend *kl = kb_local_new(&m, &o.ko, err);
	status = 1;
	float *x = NULL, *y = NULL;
	if (!kl) {
		fprintf(stderr, "anedvd-dev kernels: %s\n", err);
		goto out;
	}
	int maxc = 0;
	for (int i = 0; i < kl->n_kernels; i++) {
		maxc = kl->kernels[i].in_ch > maxc ? kl->kernels[i].in_ch : maxc;
		maxc = kl->kernels[i].out_ch > maxc ? kl->kernels[i].out_ch : maxc;
	}
	x = malloc((size_t)maxc * sizeof *x);
	y = malloc((size_t)maxc * sizeof *y);
	if (!x || !y)
		goto out;
	rng_fill(x, (size_t)maxc, 3, 1.0f);
	printf("model: %s, %lld layers, %s width %d, %s weights, %d iterations, one column\n", o.model,
	       (long long)m.hp.n_layer, kl->name, kl->width, o.wts, o.iters);
	printf("  kernel      in -> out     weights     ms/eval    GB/s\n");
	double layer_ms = 0, head_ms = 0, layer_b = 0, head_b = 0;
	for (int i = 0; i < kl->n_kernels; i++) {
		const struct kb_info *ki = &kl->kernels[i];
		if (ki->layer != 0 && ki->kind != ANE_K_LM_HEAD)
			continue;
		double us = 0;
		if (call1(kl, i, x, y, 1, NULL, err) || call1(kl, i, x, y, o.iters, &us, err)) {
			fprintf(stderr, "anedvd-dev kernels: %s\n", err);
			goto out;
		}
		double gbs = (double)ki->weight_bytes / (us / 1e6) / 1e9;
		char nm[24];
		if (ki->kind == ANE_K_LM_HEAD)
			snprintf(nm, sizeof nm, "lm_head.%d", ki->chunk);
		else
			snprintf(nm, sizeof nm, "%s", pipe_kind_name(ki->kind));
		printf("  %-10s %5d -> %-7d %7.2f MB  %9.3f  %6.2f\n", nm, ki->in_ch, ki->out_ch,
		       (double)ki->weight_bytes / 1e6, us / 1e3, gbs);
		if (ki->kind == ANE_K_LM_HEAD) {
			head_ms += us / 1e3;
			head_b += (double)ki->weight_bytes;
		} else {
			layer_ms += us / 1e3;
			layer_b += (double)ki->weight_bytes;
		}
	}
	double tot = layer_ms * (double)m.hp.n_layer + head_ms;
	double totb = layer_b * (double)m.hp.n_layer + head_b;
	printf("  TOTAL per token: %.3f ms (layer %.3f ms x %lld + LM head %.3f ms), %.1f MB, %.2f GB/s\n", tot,
	       layer_ms, (long long)m.hp.n_layer, head_ms, totb / 1e6, tot > 0 ? totb / (tot / 1e3) / 1e9 : 0);
	if (kernels_pass(kl, o.threads > 0 ? o.threads : 2, !strcmp(backend_of(&o), "emu"), o.ko.weights != ANE_W_FP16,
	                 x, err)) { // 2: the emu's default
		fprintf(stderr, "anedvd-dev kernels: %s\n", err);
		goto out;
	}
	if (o.cols > kl->width) {
		fprintf(stderr, "anedvd-dev kernels: --cols %d is more than the chunk (%d)\n", o.cols, kl->width);
		status = 2;
		goto out;
	}
	if (o.cols > 1 && kernels_cols(kl, &m, o.cols, o.iters, x, y, err)) {
		fprintf(stderr, "anedvd-dev kernels: %s\n", err);
		goto out;
	}
	status = 0;
out:
	free(x);
	free(y);
	if (kl)
		kl->free(kl);
	model_free(&m);
	return status;
}

// --- probe, bench, width ----------------------------------------------------------------------

struct probe_res {
	double us, rel, maxabs;
};

// an n x n projection at width w, ncols columns, iters evals
static int
probe_run(struct ane_builder *b, int n, int w, int ncols, int iters, struct probe_res *res, char *err)
{
	struct ane_kernel k;
	if (ane_build_probe(b, n, w, 1234, &k, err))
		return -1;
	struct ad_surface in, out;
	memset(&in, 0, sizeof in);
	memset(&out, 0, sizeof out);
	float *x = malloc((size_t)n * ncols * sizeof *x), *y = malloc((size_t)n * ncols * sizeof *y);
	float *ref = malloc((size_t)n * ncols * sizeof *ref), *wt = malloc((size_t)n * n * sizeof *wt);
	size_t cin = ane_kernel_input_capacity(&k), cout = ane_kernel_output_capacity(&k);
	int rc = -1;
	if (!x || !y || !ref || !wt || surface_create(&in, NULL, (size_t)n, (size_t)w, 0, err) ||
	    surface_create(&out, NULL, (size_t)n, (size_t)w, 0, err))
		goto out;
	if (in.bytes < cin || out.bytes < cout) {
		ad_err(err, "probe: surface smaller than the kernel's capacity");
		goto out;
	}
	rng_fill(x, (size_t)n * ncols, 11, 1.0f);
	surface_write(&in, x, (size_t)ncols, (size_t)n);
	if (ane_eval(&k, in.base, out.base, ncols, err))
		goto out;
	double t0 = cli_now_ms();
	for (int i = 0; i < iters; i++)
		if (ane_eval(&k, in.base, out.base, ncols, err))
			goto out;
	res->us = (cli_now_ms() - t0) * 1e3 / iters;
	surface_read(&out, y, (size_t)ncols, (size_t)n);
	ane_probe_weights(wt, (size_t)n * n, 1234);
	for (int c = 0; c < ncols; c++)
		for (int r = 0; r < n; r++) {
			double s = 0;
			for (int j = 0; j < n; j++)
				s += (double)wt[(size_t)r * n + j] * x[(size_t)c * n + j];
			ref[(size_t)c * n + r] = (float)s;
		}
	res->rel = cli_rel_err(y, ref, (size_t)n * ncols, &res->maxabs, NULL);
	rc = 0;
out:
	surface_close(&in);
	surface_close(&out);
	free(x);
	free(y);
	free(ref);
	free(wt);
	ane_kernel_free(&k);
	return rc;
}

static void
probe_usage(void)
{
	fprintf(stderr, "usage: anedvd-dev probe [--size N] [--iters K] [--threads N] [--backend emu|ane]\n"
	                "  one N x N projection (default 256) compiled as a 1x1 conv and run on the backend\n"
	                "  (default emu; ane only in a macOS build) K times (default 20), against a CPU\n"
	                "  matmul of the same weights: max|err|, relative error, us/eval, GFLOP/s; CORRECT\n"
	                "  if rel < 0.02, else MISMATCH (exit 1)\n");
}

static void
bench_usage(void)
{
	fprintf(stderr, "usage: anedvd-dev bench [--iters K] [--threads N] [--backend emu|ane]\n"
	                "  N x N projections on the backend (default emu), N = 128 ... 4096, one column, K\n"
	                "  evals each (default 50): us/eval, GFLOP/s and fp16 weight GB/s\n");
}

static void
width_usage(void)
{
	fprintf(stderr, "usage: anedvd-dev width [--size N] [--iters K] [--threads N] [--backend emu|ane]\n"
	                "  cost of an N x N projection (default 2048) on the backend (default emu) against\n"
	                "  the activation width 1, 8, 32, 64, 128 (all columns in use), K evals each\n"
	                "  (default 30)\n");
}

enum proj_tool { PROJ_PROBE, PROJ_BENCH, PROJ_WIDTH };

// probe, bench and width: n x n projections at width w (all w columns in
// use) compiled on the backend and run --iters times each; probe one of
// --size at width 1 against a CPU matmul (exit 1 on MISMATCH), bench the
// sizes 128 ... 4096 at width 1, width one of --size at the widths 1 ... 128
static int
projections(enum proj_tool t, struct tool_opts *o, int argc, char **argv)
{
	static void (*const usage[])(void) = {probe_usage, bench_usage, width_usage};
	static const int widths[] = {1, 8, 32, 64, 128};
	const char *allowed = t == PROJ_BENCH ? "--iters --threads --backend" : "--size --iters --threads --backend";
	int status;
	if (tool_start(o, argc, argv, allowed, "", usage[t], NULL, &status))
		return status;
	char err[AD_ERRLEN];
	struct ane_build_opts bo = {.backend = o->backend, .threads = o->threads};
	struct ane_builder *b = ane_builder_new(&bo, err);
	if (!b) {
		fprintf(stderr, "anedvd-dev %s: %s\n", o->cmd, err);
		return 1;
	}
	if (t == PROJ_BENCH) {
		printf("%s projection sweep, one column, %d evals each\n", backend_of(o), o->iters);
		printf("     size     us/eval    GFLOP/s     GB/s   rel.err\n");
	} else if (t == PROJ_WIDTH) {
		printf("%s projection cost vs activation width (%d -> %d, fp16 weights)\n", backend_of(o), o->size,
		       o->size);
		printf("  width      us/eval       vs w=1      GFLOP/s\n");
	}
	int points = t == PROJ_BENCH ? 6 : t == PROJ_WIDTH ? 5 : 1;
	double base = 0;
	status = 0;
	for (int i = 0; i < points; i++) {
		int n = t == PROJ_BENCH ? 128 << i : o->size, w = t == PROJ_WIDTH ? widths[i] : 1;
		struct probe_res res;
		if (probe_run(b, n, w, w, o->iters, &res, err)) {
			fprintf(stderr, "anedvd-dev %s: %s\n", o->cmd, err);
			status = 1;
			break;
		}
		double gflops = 2.0 * n * n * w / (res.us * 1e3);
		if (i == 0)
			base = res.us;
		if (t == PROJ_PROBE) {
			status = res.rel < 0.02 ? 0 : 1;
			printf("probe %dx%d on %s: max|err| = %.4e  rel = %.4e  %.2f us/eval  %.2f GFLOP/s -> %s\n", n,
			       n, backend_of(o), res.maxabs, res.rel, res.us, gflops, status ? "MISMATCH" : "CORRECT");
		} else if (t == PROJ_BENCH) {
			printf("  %7d  %10.2f  %9.2f  %7.2f  %.2e\n", n, res.us, gflops, gflops, res.rel);
		} else {
			printf("  %5d   %10.2f   %8.2fx   %10.1f\n", w, res.us, res.us / base, gflops);
		}
	}
	ane_builder_free(b);
	return status;
}

int
cmd_probe(int argc, char **argv)
{
	struct tool_opts o = {.cmd = "probe", .size = 256, .iters = 20};
	return projections(PROJ_PROBE, &o, argc, argv);
}

int
cmd_bench(int argc, char **argv)
{
	struct tool_opts o = {.cmd = "bench", .iters = 50};
	return projections(PROJ_BENCH, &o, argc, argv);
}

int
cmd_width(int argc, char **argv)
{
	struct tool_opts o = {.cmd = "width", .size = 2048, .iters = 30};
	return projections(PROJ_WIDTH, &o, argc, argv);
}

// --- attnbench -------------------------------------------------------------------------------

static void
attnbench_usage(void)
{
	fprintf(stderr,
	        "usage: anedvd-dev attnbench [--ctx 1024] [--heads 14] [--kv-heads 2] [--head-dim 64] [--cols 1]\n"
	        "                            [--iters 200]\n"
	        "  one decode step's attention (every head, one query) over an fp16 KV cache of\n"
	        "  --ctx positions: attn_fast and attn_ref as the engine runs them, then the\n"
	        "  same work split into plain stages (q.k dots, softmax, weighted V sum).\n"
	        "  --cols N > 1: also N query columns at the last N positions (a verify step's\n"
	        "  drafts) in one attn_fast_cols call against N calls of attn_fast\n");
}

int
cmd_attnbench(int argc, char **argv)
{
	struct tool_opts o = {
		.cmd = "attnbench", .ctx = 1024, .heads = 14, .kv_heads = 2, .head_dim = 64, .iters = 200, .cols = 1};
	int status;
	if (tool_start(&o, argc, argv, "--ctx --heads --kv-heads --head-dim --cols --iters", "", attnbench_usage, NULL,
	               &status))
		return status;
	if (o.heads % o.kv_heads) {
		fprintf(stderr, "anedvd-dev attnbench: --heads must be a multiple of --kv-heads\n");
		attnbench_usage();
		return 2;
	}
	if (o.cols > o.ctx) {
		fprintf(stderr, "anedvd-dev attnbench: --cols (%d) is more than --ctx (%d)\n", o.cols, o.ctx);
		return 2;
	}
	int H = o.heads, G = o.kv_heads, D = o.head_dim, T = o.ctx;
	struct attn_shape sh = {.n_head = H,
	                        .n_head_kv = G,
	                        .head_dim = D,
	                        .head_dim_v = D,
	                        .k_stride = (size_t)G * D,
	                        .v_stride = (size_t)G * D,
	                        .scale = 1.0f / sqrtf((float)D)};
	size_t nkv = (size_t)T * G * D;
	uint16_t *k = malloc(nkv * 2), *v = malloc(nkv * 2);
	const int C = o.cols;
	float *q = malloc((size_t)C * H * D * sizeof *q), *out = malloc((size_t)C * H * D * sizeof *out);
	float *sc = malloc(attn_cols_scratch_floats(&sh, T, C) * sizeof *sc);
	int *last = malloc((size_t)C * sizeof *last);
	float *kf = malloc(nkv * sizeof *kf), *vf = malloc(nkv * sizeof *vf), *s = malloc((size_t)T * sizeof *s);
	if (!k || !v || !q || !out || !sc || !kf || !vf || !s || !last) {
		fprintf(stderr, "anedvd-dev attnbench: out of memory\n");
		return 1;
	}
	rng_fill(kf, nkv, 1, 1.0f);
	rng_fill(vf, nkv, 2, 1.0f);
	rng_fill(q, (size_t)C * H * D, 3, 1.0f);
	for (int c = 0; c < C; c++)
		last[c] = T - C + c;
	for (size_t i = 0; i < nkv; i++) {
		k[i] = ad_f32_to_fp16(kf[i]);
		v[i] = ad_f32_to_fp16(vf[i]);
	}
	double t0 = cli_now_ms();
	for (int it = 0; it < o.iters; it++)
		attn_fast(&sh, q, k, v, 0, T - 1, out, sc);
	double fast = (cli_now_ms() - t0) * 1e3 / o.iters;
	t0 = cli_now_ms();
	for (int it = 0; it < o.iters; it++)
		attn_ref(&sh, q, k, v, 0, T - 1, out, sc);
	double ref = (cli_now_ms() - t0) * 1e3 / o.iters;
	// C columns: one call, and one call each (the same bits)
	double cols = 0, each = 0;
	for (int it = 0; C > 1 && it < o.iters; it++) {
		t0 = cli_now_ms();
		attn_fast_cols(&sh, q, (size_t)H * D, k, v, k, v, 0, 0, last, C, out, (size_t)H * D, sc);
		double t1 = cli_now_ms();
		for (int c = 0; c < C; c++)
			attn_fast(&sh, q + (size_t)c * H * D, k, v, 0, last[c], out + (size_t)c * H * D, sc);
		cols += t1 - t0;
		each += cli_now_ms() - t1;
	}
	// plain stages over the fp32 copy of the cache
	double t_dot = 0, t_sm = 0, t_av = 0;
	volatile float sink = 0;
	for (int it = 0; it < o.iters; it++)
		for (int h = 0; h < H; h++) {
			const float *qh = q + (size_t)h * D;
			int g = h / (H / G);
			double a = cli_now_ms();
			for (int j = 0; j < T; j++) {
				const float *kj = kf + (size_t)j * G * D + (size_t)g * D;
				float d = 0;
				for (int c = 0; c < D; c++)
					d += qh[c] * kj[c];
				s[j] = d * sh.scale;
			}
			double b = cli_now_ms();
			float mx = s[0], sum = 0;
			for (int j = 1; j < T; j++)
				mx = s[j] > mx ? s[j] : mx;
			for (int j = 0; j < T; j++)
				sum += (s[j] = expf(s[j] - mx));
			for (int j = 0; j < T; j++)
				s[j] /= sum;
			double c2 = cli_now_ms();
			float *oh = out + (size_t)h * D;
			memset(oh, 0, (size_t)D * sizeof *oh);
			for (int j = 0; j < T; j++) {
				const float *vj = vf + (size_t)j * G * D + (size_t)g * D;
				for (int c = 0; c < D; c++)
					oh[c] += s[j] * vj[c];
			}
			double d2 = cli_now_ms();
			t_dot += b - a;
			t_sm += c2 - b;
			t_av += d2 - c2;
			sink += oh[0];
		}
	double tot = t_dot + t_sm + t_av;
	printf("attention, one query per head: ctx %d, heads %d, kv-heads %d, head-dim %d, %d iterations\n", T, H, G, D,
	       o.iters);
	printf("  attn_fast (%s)   %9.1f us\n", attn_fast_path(&sh, 1), fast);
	printf("  attn_ref                 %9.1f us\n", ref);
	if (C > 1)
		printf("  %d columns: one attn_fast_cols %9.1f us, %d attn_fast %9.1f us: a column after the first "
		       "%.2f of the first\n",
		       C, cols * 1e3 / o.iters, C, each * 1e3 / o.iters, (cols / each * C - 1) / (C - 1));
	printf("  plain stages (fp32 cache, no SIMD), %.1f us in all:\n", tot * 1e3 / o.iters);
	printf("    dot (q.k)              %9.1f us  %5.1f%%\n", t_dot * 1e3 / o.iters, 100 * t_dot / tot);
	printf("    softmax                %9.1f us  %5.1f%%\n", t_sm * 1e3 / o.iters, 100 * t_sm / tot);
	printf("    AV (weighted V sum)    %9.1f us  %5.1f%%\n", t_av * 1e3 / o.iters, 100 * t_av / tot);
	(void)sink;
	free(k);
	free(v);
	free(q);
	free(out);
	free(sc);
	free(last);
	free(kf);
	free(vf);
	free(s);
	return 0;
}
