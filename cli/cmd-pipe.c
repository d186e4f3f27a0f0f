// cmd-pipe.c - flag parsing and the pipeline of the CLI commands (cmd-common.h).
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ane.pb-c.h"
#include "client-ane.h"
#include "clock.h"
#include "cmd-common.h"
#include "client-engine.h"
#include "log.h"
#include "mil.h"
#include "plan.h"
#include "prefix-cache.h"
#include "trace.h"

// --- flags ---------------------------------------------------------------------------

double
cli_now_ms(void)
{
	return (double)ad_now_ns() / 1e6;
}

double
cli_rel_err(const float *x, const float *ref, size_t n, double *maxabs, int *nans)
{
	double d2 = 0, r2 = 0, md = 0;
	int nn = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(x[i]) || isinf(x[i])) {
			nn++;
			continue;
		}
		double d = (double)x[i] - ref[i];
		d2 += d * d;
		r2 += (double)ref[i] * ref[i];
		md = fabs(d) > md ? fabs(d) : md;
	}
	if (maxabs)
		*maxabs = md;
	if (nans)
		*nans = nn;
	return r2 > 0 ? sqrt(d2 / r2) : sqrt(d2);
}

int
pipe_flag(struct pipe_opts *o, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v;
	long long x;
	if (!strcmp(a, "--model")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)))
			return -1;
		o->model = v;
	} else if (!strcmp(a, "--backend")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)))
			return -1;
		if (strcmp(v, "emu") && strcmp(v, "ane") && strcmp(v, "exact")) {
			fprintf(stderr, "anedvd %s: --backend takes emu, ane or exact, not '%s'\n", o->cmd, v);
			return -1;
		}
		o->backend = v;
	} else if (!strcmp(a, "--chunk")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)) || cli_int(o->cmd, a, v, 1, 1024, &x))
			return -1;
		o->chunk = (int)x;
	} else if (!strcmp(a, "--max-seq")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)) || cli_int(o->cmd, a, v, 4, 1 << 20, &x))
			return -1;
		o->max_seq = (int)x;
	} else if (!strcmp(a, "--threads")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)) || cli_int(o->cmd, a, v, 1, 256, &x))
			return -1;
		o->threads = (int)x;
	} else if (!strcmp(a, "--weights")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)) || pipe_weights_arg(o->cmd, v))
			return -1;
		o->weights = v;
	} else if (!strcmp(a, "--split")) {
		o->split = 1;
	} else if (!strcmp(a, "--cache-dir")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)))
			return -1;
		o->cache_dir = v;
	} else if (!strcmp(a, "--no-cache")) {
		o->no_cache = 1;
	} else if (!strcmp(a, "--cache-max-mb")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)) || cli_int(o->cmd, a, v, 1, 1 << 30, &x))
			return -1;
		o->cache_max_mb = (int)x;
	} else if (!strcmp(a, "--in-process")) {
		o->in_process = 1;
	} else if (!strcmp(a, "--debug-delay-ms")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)) || cli_int(o->cmd, a, v, 0, 60000, &x))
			return -1;
		o->debug_delay_ms = (int)x;
	} else {
		return cli_model_flag(o->cmd, &o->rope, argc, argv, i);
	}
	return 1;
}

int
pipe_spec_flag(struct pipe_opts *o, int argc, char **argv, int *i)
{
	const char *a = argv[*i], *v = NULL;
	long long x;
	if (!strcmp(a, "--no-spec")) {
		o->no_spec = 1;
	} else if (!strcmp(a, "--draft") || !strcmp(a, "--ngram-max") || !strcmp(a, "--ngram-min")) {
		int hi = a[2] == 'd' ? SPEC_DRAFT_MAX : SPEC_NGRAM_MAX;
		if (!(v = cli_val(o->cmd, argc, argv, i)) || cli_int(o->cmd, a, v, a[2] == 'd' ? 0 : 1, hi, &x))
			return -1;
		*(a[2] == 'd'                 ? &o->spec.draft
		  : !strcmp(a, "--ngram-max") ? &o->spec.ngram_max
		                              : &o->spec.ngram_min) = (int)x;
	} else if (!strcmp(a, "--draft-cost")) {
		if (!(v = cli_val(o->cmd, argc, argv, i)))
			return -1;
		if (!strcmp(v, "auto"))
			o->spec.col_cost = SPEC_COST_AUTO;
		else if (cli_float(o->cmd, a, v, 0, 100, &o->spec.col_cost))
			return -1;
	} else {
		return 0;
	}
	if (o->n_spec_args + 2 <= (int)(sizeof o->spec_args / sizeof o->spec_args[0])) {
		o->spec_args[o->n_spec_args++] = a;
		if (v)
			o->spec_args[o->n_spec_args++] = v;
	}
	return 1;
}

int
pipe_spec_check(const struct pipe_opts *o)
{
	char err[AD_ERRLEN];
	if (spec_check(&o->spec, err)) {
		fprintf(stderr, "anedvd %s: %s\n", o->cmd, err);
		return -1;
	}
	return 0;
}

int
pipe_model_default(struct pipe_opts *o)
{
	static char path[4096];
	if (o->model)
		return 0;
	if (sup_default_model(path, sizeof path) != 0) {
		fprintf(stderr, "anedvd %s: --model is required (no bundled model in %s/../share/anedvd/models)\n",
		        o->cmd, sup_bindir());
		return -1;
	}
	fprintf(stderr, "anedvd %s: no --model: the bundled %s (%s)\n", o->cmd, SUP_DEFAULT_MODEL, path);
	o->model = path;
	return 0;
}

int
pipe_weights_arg(const char *cmd, const char *v)
{
	enum ane_wfmt f;
	if (ane_wfmt_parse(v, &f)) {
		fprintf(stderr, "%s %s: --weights takes fp16, int8 or lut4, not '%s'\n", cli_prog, cmd, v);
		return -1;
	}
	return 0;
}

const char *
pipe_weights(const struct model *m, const char *be, const char *given)
{
	if (be && !strcmp(be, "exact"))
		return "fp32";
	if (given)
		return given;
	return ane_wfmt_name(ane_plan_weights_default(m, be));
}

const char *
pipe_weights_path(const char *model, const char *be, const char *given, char *err)
{
	if ((be && !strcmp(be, "exact")) || given)
		return pipe_weights(NULL, be, given);
	struct model m;
	if (model_load(&m, model, err))
		return NULL;
	const char *w = pipe_weights(&m, be, given);
	model_free(&m);
	return w;
}

void
pipe_cache_args(const struct pipe_opts *o, const char **argv, int *n, char *buf, size_t cap)
{
	if (o->no_cache) {
		argv[(*n)++] = "--no-cache";
		return;
	}
	if (o->cache_dir) {
		argv[(*n)++] = "--cache-dir";
		argv[(*n)++] = o->cache_dir;
	}
	if (o->cache_max_mb > 0) {
		snprintf(buf, cap, "%d", o->cache_max_mb);
		argv[(*n)++] = "--cache-max-mb";
		argv[(*n)++] = buf;
	}
}

static const char *kind_names[PIPE_KINDS] = {"?", "qkv", "o", "ffn", "gate_up", "down", "lm_head", "shexp", "probe"};

const char *
pipe_kind_name(int kind)
{
	return kind > 0 && kind < PIPE_KINDS ? kind_names[kind] : "?";
}

// --- the pipeline ------------------------------------------------------------------------

const char *
pipe_backend(const char *given, char *err)
{
	const char *be = given;
	if (!be) {
#ifdef __APPLE__
		be = "ane";
#else
		be = "emu";
		fprintf(stderr, "anedvd: no Neural Engine on this platform: using the emu backend (--backend)\n");
#endif
	}
#ifndef __APPLE__
	if (!strcmp(be, "ane")) {
		ad_err(err, "--backend ane needs macOS on Apple Silicon; here use emu (the same programs on the CPU) "
		            "or exact");
		return NULL;
	}
#endif
	return be;
}

int
pipe_is_stop(const struct pipe *p, int32_t id)
{
	if (p->have_voc) {
		for (int i = 0; i < p->voc.n_eog; i++)
			if (id == p->voc.eog[i])
				return 1;
		return 0;
	}
	return p->m.hp.eos_id >= 0 && id == p->m.hp.eos_id;
}

int
pipe_open(struct pipe *p, const struct pipe_opts *o, char *err)
{
	memset(p, 0, sizeof *p);
	p->timeout_ms = 30000;
	double t_open = cli_now_ms();
	const char *be = pipe_backend(o->backend, err);
	if (!be)
		return -1;
	snprintf(p->backend, sizeof p->backend, "%s", be);
	int remote = strcmp(be, "exact") != 0;
	int chunk = o->chunk > 0 ? o->chunk : 64;

	if (model_load(&p->m, o->model, err))
		return -1;
	if (o->rope)
		p->m.hp.rope = o->rope;
	// a model the kernel plan cannot take is refused here, before the
	// workers start (each would fail on it and be restarted, over and over)
	struct ane_plan plan;
	if (ane_plan_build(&plan, &p->m, NULL, err)) {
		model_free(&p->m);
		return ad_err_prefix(err, "%s", o->model);
	}
	ane_plan_free(&plan);
	snprintf(p->weights, sizeof p->weights, "%s", pipe_weights(&p->m, be, o->weights));
	// the workers read the model themselves: the pages its header and
	// vocabulary brought in here go (a read faults them in again)
	model_drop_pages(&p->m);

	char cpu_bin[1024];
	int in_proc = o->in_process || sup_binary(cpu_bin, sizeof cpu_bin, "anedvd-cpu-worker") != 0;
	if (!o->in_process && in_proc)
		ad_warn("%s is not built: its service runs in this process", cpu_bin);

	// every child is spawned before the first nng call in this process
	p->sup = sup_new(err);
	if (!p->sup || (o->child_env && sup_setenv(p->sup, o->child_env, err)))
		goto fail;
	char tok_url[600], ane_url[600], bin[1024], sz[32], th[32], dl[32], cmb[32];
	sup_url(p->sup, "tokenizer", tok_url, sizeof tok_url);
	sup_url(p->sup, "ane-worker", ane_url, sizeof ane_url);
	snprintf(sz, sizeof sz, "%d", chunk);
	snprintf(th, sizeof th, "%d", o->threads > 0 ? o->threads : 2);
	if (o->need_tok) {
		if (sup_binary(bin, sizeof bin, "anedvd-tokenizer")) {
			ad_err(err, "%s is missing: build the anedvd-tokenizer target", bin);
			goto fail;
		}
		const char *argv[] = {bin, "--model", o->model, "--listen", tok_url, NULL};
		struct sup_spec sp = {"tokenizer", argv, tok_url, sup_health_tok, 1, NULL};
		if (sup_spawn(p->sup, &sp, err))
			goto fail;
	}
	if (remote) {
		if (sup_binary(bin, sizeof bin, "anedvd-ane-worker")) {
			ad_err(err, "%s is missing: build the anedvd-ane-worker target", bin);
			goto fail;
		}
		snprintf(dl, sizeof dl, "%d", o->debug_delay_ms);
		const char *argv[26] = {bin,       "--model", o->model,    "--listen", ane_url,     "--backend", be,
		                        "--chunk", sz,        "--threads", th,         "--weights", p->weights};
		int n = 13;
		if (o->split)
			argv[n++] = "--split";
		pipe_cache_args(o, argv, &n, cmb, sizeof cmb);
		if (o->debug_delay_ms > 0) {
			argv[n++] = "--debug-delay-ms";
			argv[n++] = dl;
		}
		argv[n] = NULL;
		struct sup_spec sp = {"ane-worker", argv, ane_url, sup_health_ane, 1, sup_finishing_ane};
		if (sup_spawn(p->sup, &sp, err))
			goto fail;
	}

	char eng_url[600], ms[32];
	sup_url(p->sup, "cpu-worker", eng_url, sizeof eng_url);
	snprintf(p->ane_url, sizeof p->ane_url, "%s", remote ? ane_url : "");
	if (!in_proc) {
		// no --instance: the worker names its surfaces by its own pid, so a
		// restarted one never meets the dead one's
		snprintf(ms, sizeof ms, "%d", o->max_seq > 0 ? o->max_seq : 2048);
		const char *argv[36] = {cpu_bin, "--model",   o->model, "--listen",  eng_url, "--chunk",
		                        sz,      "--max-seq", ms,       "--threads", th};
		int n = 11;
		if (remote) {
			argv[n++] = "--backend";
			argv[n++] = "remote";
			argv[n++] = "--ane";
			argv[n++] = ane_url;
			argv[n++] = "--weights";
			argv[n++] = p->weights;
		} else {
			argv[n++] = "--backend";
			argv[n++] = "exact";
		}
		if (o->split)
			argv[n++] = "--split";
		// the worker's RoPE: --rope-*, or verify's pipeline-only fault
		enum model_rope wr = o->pipe_rope ? o->pipe_rope : o->rope;
		if (wr == MODEL_ROPE_NEOX)
			argv[n++] = "--rope-hf";
		else if (wr == MODEL_ROPE_NORM)
			argv[n++] = "--rope-adjacent";
		for (int k = 0; k < o->n_spec_args; k++)
			argv[n++] = o->spec_args[k];
		if (o->cache_mem) {
			argv[n++] = "--cache-mem";
			argv[n++] = o->cache_mem;
		}
		argv[n] = NULL;
		struct sup_spec sp = {"cpu-worker", argv, eng_url, sup_health_engine, 1, NULL};
		if (sup_spawn(p->sup, &sp, err))
			goto fail;
	}

	if (o->need_tok) {
		if (sup_wait_ready(p->sup, "tokenizer", 60000, err))
			goto fail;
		p->tok_ready_ms = cli_now_ms() - t_open;
		if (!(p->tok = ad_client_open(tok_url, err)))
			goto fail;
		if (tokc_vocab(p->tok, &p->voc, p->timeout_ms, err))
			goto fail;
		p->have_voc = 1;
	}
	if (remote && sup_wait_ready(p->sup, "ane-worker", 600000, err))
		goto fail;
	p->ane_ready_ms = remote ? cli_now_ms() - t_open : 0;
	if (in_proc) {
		// the cpu-worker's own service on threads of this process, over
		// inproc://: the decode loop is the scheduler's, as in the process
		snprintf(eng_url, sizeof eng_url, "inproc://anedvd-cpu-worker-%ld", (long)getpid());
		// it logs at the level the children get (supervisor.c): warnings,
		// unless ANEDVD_LOG says otherwise
		if (!getenv("ANEDVD_LOG"))
			ad_log_set_level(AD_LOG_WARN);
		// the worker's defaults unless the flags said otherwise, as in the process
		struct spec_opts spec;
		spec_defaults(&spec);
		if (o->n_spec_args)
			spec = o->spec;
		struct cpu_worker_opts wo = {.model_path = o->model,
		                             .url = eng_url,
		                             .process = "anedvd (in-process cpu-worker)",
		                             .backend = remote ? "remote" : "exact",
		                             .vocab = &vocab_local,
		                             .ane_url = remote ? ane_url : NULL,
		                             .weights = remote ? p->weights : NULL,
		                             .chunk = chunk,
		                             .split = o->split,
		                             .threads = o->threads > 0 ? o->threads : 2,
		                             .max_seq = o->max_seq > 0 ? o->max_seq : 2048,
		                             .rope = o->pipe_rope ? o->pipe_rope : o->rope,
		                             .spec = spec,
		                             .no_spec = o->no_spec};
		if (o->cache_mem && pcache_parse_mem(o->cache_mem, &wo.cache_mem)) {
			ad_err(err, "the prefix cache's size '%s' is not a size", o->cache_mem);
			goto fail;
		}
		wo.cache_mem_set = o->cache_mem != NULL;
		if (!(p->cw = cpu_worker_start(&wo, err)))
			goto fail;
	} else if (sup_wait_ready(p->sup, "cpu-worker", 600000, err)) {
		goto fail;
	}
	p->cpu_ready_ms = cli_now_ms() - t_open;
	if (!(p->eng = ad_client_open(eng_url, err)))
		goto fail;
	p->n_vocab = (int)p->m.hp.n_vocab;
	p->max_seq = o->max_seq > 0 ? o->max_seq : 2048; // given to the worker
	p->ref_rope = p->m.hp.rope;
	if (trace_enabled()) {
		trace_process((long)getpid(), in_proc ? "anedvd (and its cpu-worker)" : "anedvd");
		long cp = in_proc ? 0 : sup_pid(p->sup, "cpu-worker"), wp = remote ? sup_pid(p->sup, "ane-worker") : 0;
		long tp = o->need_tok ? sup_pid(p->sup, "tokenizer") : 0;
		if (cp > 0)
			trace_process(cp, "anedvd-cpu-worker");
		if (wp > 0)
			trace_process(wp, "anedvd-ane-worker");
		if (tp > 0)
			trace_process(tp, "anedvd-tokenizer");
	}
	p->open_ms = cli_now_ms() - t_open;
	return 0;
fail:
	pipe_close(p);
	return -1;
}

void
pipe_close(struct pipe *p)
{
	if (p->tok)
		ad_client_close(p->tok);
	p->tok = NULL;
	if (p->eng)
		ad_client_close(p->eng);
	p->eng = NULL;
	cpu_worker_stop(p->cw, NULL, NULL);
	p->cw = NULL;
	sup_free(p->sup); // children stopped, runtime dir and shared memory removed
	p->sup = NULL;
	model_free(&p->m);
}

// --- the ane-worker's counters ---------------------------------------------------------------

int
pipe_ane_stats(struct pipe *p, uint64_t calls[PIPE_KINDS], uint64_t ns[PIPE_KINDS], char *err)
{
	memset(calls, 0, PIPE_KINDS * sizeof *calls);
	memset(ns, 0, PIPE_KINDS * sizeof *ns);
	if (!p->ane_url[0])
		return -1;
	struct ad_client *c = ad_client_open(p->ane_url, err);
	if (!c)
		return -1;
	int rc = -1;
	Anedvd__AneReply *kinds = anec_compile(c, NULL, 10000, NULL, err), *st = NULL;
	if (!kinds || !(st = anec_stats(c, 10000, NULL, err)))
		goto out;
	for (size_t i = 0; i < st->stats->n_kernels; i++) {
		const Anedvd__KernelStats *ks = st->stats->kernels[i];
		int kind = 0;
		for (size_t j = 0; j < kinds->compile->n_kernels; j++)
			if (kinds->compile->kernels[j]->id == ks->kernel)
				kind = (int)kinds->compile->kernels[j]->kind;
		if (kind <= 0 || kind >= PIPE_KINDS)
			kind = 0;
		calls[kind] += ks->calls;
		ns[kind] += ks->exec_ns;
	}
	rc = 0;
out:
	ad_rpc_free(kinds);
	ad_rpc_free(st);
	ad_client_close(c);
	return rc;
}

int
pipe_ane_start(struct pipe *p, struct pipe_ane_start *out, char *err)
{
	memset(out, 0, sizeof *out);
	if (!p->ane_url[0])
		return ad_err(err, "no ane-worker");
	struct ad_client *c = ad_client_open(p->ane_url, err);
	if (!c)
		return -1;
	Anedvd__AneReply *r = anec_compile(c, NULL, 10000, NULL, err);
	int rc = -1;
	if (r) {
		const Anedvd__CompileReply *cr = r->compile;
		for (size_t i = 0; i < cr->n_start_phases && out->n < PIPE_START_MAX; i++) {
			snprintf(out->name[out->n], sizeof out->name[0], "%s", cr->start_phases[i]->name);
			out->ms[out->n++] = cr->start_phases[i]->ms;
		}
		snprintf(out->cache, sizeof out->cache, "%s", cr->cache ? cr->cache : "");
		for (size_t i = 0; i < cr->n_kernels; i++)
			out->weight_bytes += cr->kernels[i]->weight_bytes;
		rc = 0;
	}
	ad_rpc_free(r);
	ad_client_close(c);
	return rc;
}
