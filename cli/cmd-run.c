// cmd-run.c - `anedvd run`, `chat`, `verify` and `serve`: the commands on
// the multi-process pipeline (cmd-common.h).
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "build.h"
#include "clock.h"
#include "cmd-common.h"
#include "commands.h"
#include "client-engine.h"
#include "log.h"
#include "prefix-cache.h"
#include "ref.h"
#include "sample.h"
#include "spec-json.h"
#include "trace.h"
#include "unicode.h"

// --- one generation -------------------------------------------------------------------

enum gen_stop { GEN_LENGTH, GEN_STOP, GEN_INTERRUPTED };

static const char *stop_names[] = {"length", "stop", "interrupted"};

struct gen {
	int32_t *ids; // generated (stop id not included)
	int n;
	enum gen_stop stop;
	struct engine_prompt_info info;
	double prefill_ms, decode_ms;
	int decode_steps;
	char *text;
	size_t text_len;
	struct gen_timings dec; // the whole job's (whole_job)
	int whole_job;          // figures from the cpu-worker: prefill + decode
	int resumed;            // times a restarted cpu-worker took the job over
	struct spec_stats spec; // the job's drafts
	uint64_t dec_kind_ns[PIPE_KINDS], dec_kind_calls[PIPE_KINDS];
};

static void
gen_free(struct gen *g)
{
	free(g->ids);
	free(g->text);
	memset(g, 0, sizeof *g);
}

static int
append(struct gen *g, const char *s, size_t n)
{
	char *t = realloc(g->text, g->text_len + n + 1);
	if (!t)
		return -1;
	memcpy(t + g->text_len, s, n);
	g->text_len += n;
	t[g->text_len] = 0;
	g->text = t;
	return 0;
}

// detokenize the ids of one poll (or flush) in one call, and stream them:
// a call per id would wake the tokenizer per token, and on a small machine
// each wake takes a core from the workers while they decode
static int
emit(struct pipe *p, struct gen *g, const int32_t *ids, size_t n, int flush, char pending[4], size_t *np, FILE *out,
     char *err)
{
	char *s = NULL;
	size_t len = 0;
	uint64_t t0 = trace_now_us();
	if (tokc_decode_stream(p->tok, ids, n, flush, pending, np, &s, &len, p->timeout_ms, err))
		return -1;
	if (trace_enabled())
		trace_event((long)getpid(), 1, "detokenize", "tokenizer-call", t0, trace_now_us() - t0);
	if (len) {
		if (out) {
			fwrite(s, 1, len, out);
			fflush(out);
		}
		append(g, s, len);
	}
	free(s);
	return 0;
}

// a generation: a job of the cpu-worker's service, polled; the split comes
// from the job's timings and the ane-worker's counters, over the whole job
static int
generate(struct pipe *p, const char *session, const int32_t *prompt, int n, int max_tokens,
         const struct sample_params *sp, int speculative, FILE *out, struct gen *g, char *err)
{
	memset(g, 0, sizeof *g);
	g->whole_job = 1;
	g->ids = malloc((size_t)(max_tokens > 0 ? max_tokens : 1) * sizeof *g->ids);
	if (!g->ids)
		return ad_err(err, "out of memory");
	// the tokenizer's end-of-generation ids (without one, the model's EOS)
	int32_t stops[TOKC_MAX_EOG];
	int ns = 0;
	if (p->have_voc) {
		for (int i = 0; i < p->voc.n_eog; i++)
			stops[ns++] = p->voc.eog[i];
	} else if (p->m.hp.eos_id >= 0) {
		stops[ns++] = (int32_t)p->m.hp.eos_id;
	}
	struct engc_gen eg = {.prompt = prompt,
	                      .n_prompt = (size_t)n,
	                      .max_tokens = (uint32_t)max_tokens,
	                      .sp = sp,
	                      .stop_ids = stops,
	                      .n_stop = (size_t)ns,
	                      .session = session,
	                      .speculative = speculative};
	uint64_t c0[PIPE_KINDS], n0[PIPE_KINDS], c1[PIPE_KINDS], n1[PIPE_KINDS];
	int stats = pipe_ane_stats(p, c0, n0, NULL) == 0;
	char pending[4];
	size_t np = 0;
	int code = 0, rv;
	struct engc_started st;
	uint64_t t0 = trace_now_us();
	// a job that outlives the cpu-worker: a crashed one is restarted by the
	// supervisor and the job goes on there, no token lost or repeated
	struct engc_job *job = engc_job_new(p->eng, &eg, p->timeout_ms, 0, err);
	if (!job)
		return -1;
	while ((rv = engc_job_start(job, 200, &st, &code, err)) == 1 && !sup_interrupted())
		;
	if (rv) {
		if (rv == 1)
			ad_err(err, "interrupted");
		engc_job_free(job);
		return -1;
	}
	g->info.prompt_tokens = (int)st.prompt_tokens;
	g->info.dropped = (int)st.dropped;
	g->info.reused = (int)st.reused;
	g->info.prefilled = (int)(st.prompt_tokens - st.reused);
	struct gen_timings tm;
	memset(&tm, 0, sizeof tm);
	uint32_t hold = 0; // the rest of the frame begun as the last poll came back with tokens
	for (;;) {
		struct engc_poll pl;
		const uint64_t q0 = ad_now_ns() / 1000u; // the trace's microseconds
		if (engc_job_poll(job, 200, hold, &pl, &code, err)) {
			engc_job_free(job);
			return -1;
		}
		const uint64_t f1 = ad_now_ns();
		if (trace_enabled() && pl.n_events)
			trace_event((long)getpid(), 1, "poll (tokens)", "engine", q0, trace_now_us() - q0);
		int bad = 0, had = g->n;
		for (size_t i = 0; i < pl.n_events; i++)
			if (g->n < max_tokens)
				g->ids[g->n++] = pl.events[i].id;
		if (p->tok && g->n > had && emit(p, g, g->ids + had, (size_t)(g->n - had), 0, pending, &np, out, err))
			bad = 1;
		enum engc_finish fin = pl.finish;
		if (fin != ENGC_RUNNING)
			tm = pl.timings;
		if (fin == ENGC_ERROR)
			ad_err(err, "the engine ended the generation: %s", pl.msg);
		engc_poll_free(&pl);
		if (bad || fin == ENGC_ERROR) {
			engc_job_free(job);
			return -1;
		}
		if (fin == ENGC_STOP || fin == ENGC_LENGTH) {
			g->stop = fin == ENGC_STOP ? GEN_STOP : GEN_LENGTH;
			break;
		}
		if (fin == ENGC_CANCELLED || sup_interrupted()) {
			if (fin != ENGC_CANCELLED)
				engc_job_cancel(job);
			g->stop = GEN_INTERRUPTED;
			break;
		}
		// a frame's tokens in one poll and one detokenize call
		hold = g->n > had ? engc_frame_left_ms(f1) : 0;
	}
	g->resumed = engc_job_replays(job);
	engc_job_free(job);
	if (trace_enabled())
		trace_event((long)getpid(), 1, "generation", "engine", t0, trace_now_us() - t0);
	if (p->tok && emit(p, g, NULL, 0, 1, pending, &np, out, err))
		return -1;
	// the prefix cache's share is known once the prefill has started
	if ((int)tm.cached_tokens > g->info.reused && (int)tm.cached_tokens < g->info.prompt_tokens) {
		g->info.reused = (int)tm.cached_tokens;
		g->info.prefilled = g->info.prompt_tokens - g->info.reused;
	}
	g->prefill_ms = (double)tm.prefill_ns / 1e6;
	g->decode_ms = (double)tm.decode_ns / 1e6;
	g->decode_steps = (int)tm.decode_tokens;
	g->dec = tm;
	g->spec = tm.spec;
	if (stats && pipe_ane_stats(p, c1, n1, NULL) == 0)
		for (int k = 0; k < PIPE_KINDS; k++) {
			g->dec_kind_calls[k] = c1[k] - c0[k];
			g->dec_kind_ns[k] = n1[k] - n0[k];
			g->dec.kernel_calls += c1[k] - c0[k];
		}
	return 0;
}

// --- speculative decoding's figures -------------------------------------------------------

static double
rate(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

// "what: 12 steps drafted 80 tokens, 60 accepted (75.0%); by n: 2 10/20, 8 50/60"
static void
spec_print(FILE *f, const char *what, const struct spec_stats *st)
{
	fprintf(f, "%s: %llu steps drafted %llu tokens, %llu accepted (%.1f%%)", what, (unsigned long long)st->steps,
	        (unsigned long long)st->drafted, (unsigned long long)st->accepted,
	        100 * rate(st->accepted, st->drafted));
	const char *sep = "; by n:";
	for (int i = 0; i <= SPEC_NGRAM_MAX; i++)
		if (st->drafted_n[i]) {
			fprintf(f, "%s %d %llu/%llu", sep, i, (unsigned long long)st->accepted_n[i],
			        (unsigned long long)st->drafted_n[i]);
			sep = ",";
		}
	fprintf(f, "\n");
}

// --ngram-probe: the generation replayed as speculation would have run it
struct probe {
	struct spec_stats st;
	int calls, plain_calls;
};

static int
run_probe(const struct pipe_opts *po, const int32_t *prompt, int n, const struct gen *g, int max_tokens, int max_seq,
          struct probe *pr, char *err)
{
	int keep = g->info.prompt_tokens > 0 ? g->info.prompt_tokens : n;
	int32_t *scratch = malloc((size_t)(keep + g->n + 1) * sizeof *scratch);
	if (!scratch)
		return ad_err(err, "out of memory");
	spec_probe(&po->spec, prompt + (n - keep), keep, g->ids, g->n, max_tokens, max_seq, scratch, &pr->st,
	           &pr->calls);
	pr->plain_calls = g->n > 1 ? g->n - 1 : 0;
	free(scratch);
	return 0;
}

// teacher-forced logits of every position (n rows of p->n_vocab)
int
pipe_eval(struct pipe *p, const int32_t *ids, int n, int per_token, float *logits, char *err)
{
	float *l = NULL;
	uint32_t rows = 0, nv = 0;
	int code;
	if (engc_eval(p->eng, ids, (size_t)n, per_token, 0, 0, &l, &rows, &nv, p->timeout_ms * 4, &code, err))
		return -1;
	if ((int)rows != n || (int)nv != p->n_vocab) {
		free(l);
		return ad_err(err, "the engine returned %u rows of %u, not %d of %d", rows, nv, n, p->n_vocab);
	}
	memcpy(logits, l, (size_t)n * nv * sizeof *l);
	free(l);
	return 0;
}

// a decode call's IPC in us, and its split by the data plane's clocks:
// {all, pickup, reply, rest}; 0 when the job made no decode call
static int
ipc_split(const struct gen_timings *d, double v[4])
{
	if (d->dec_round_trips == 0)
		return 0;
	const double calls = (double)d->dec_round_trips;
	v[0] = (double)d->dec_ipc_ns / 1e3 / calls;
	v[1] = (double)d->dec_pickup_ns / 1e3 / calls;
	v[2] = (double)d->dec_reply_ns / 1e3 / calls;
	v[3] = v[0] > v[1] + v[2] ? v[0] - v[1] - v[2] : 0.0;
	return 1;
}

// the per-token split of the decode phase
static void
print_split(FILE *f, struct pipe *p, const struct gen *g)
{
	double steps = g->n > 0 ? g->n : 1; // sampling happens per generated token
	double st = g->whole_job ? steps : g->decode_steps > 0 ? g->decode_steps : 1;
	fprintf(f, "per-token split (%s%s):", p->backend, g->whole_job ? ", whole job per generated token" : "");
	for (int k = 1; k < PIPE_KINDS; k++)
		if (g->dec_kind_calls[k])
			fprintf(f, " %s %.3f ms,", pipe_kind_name(k), (double)g->dec_kind_ns[k] / 1e6 / st);
	double other = (double)g->dec.cpu_other_ns + (double)g->dec.moe_ns;
	fprintf(f, " IPC %.3f ms, attention %.3f ms, sampling %.3f ms, other %.3f ms; %.1f calls to the ane-worker\n",
	        (double)g->dec.ipc_ns / 1e6 / st, (double)g->dec.attention_ns / 1e6 / st,
	        (double)g->dec.sampling_ns / 1e6 / steps, other / 1e6 / st, (double)g->dec.round_trips / st);
	// the same of the decode steps alone (the prefill's chunks left out)
	const struct gen_timings *d = &g->dec;
	if (g->whole_job && g->decode_steps > 0 && d->decode_ns > 0) {
		const double ds = g->decode_steps;
		fprintf(f,
		        "decode steps alone, per token: kernels %.3f ms, IPC %.3f ms, attention %.3f ms, other %.3f ms; "
		        "%.1f calls to the ane-worker; %.0f%% outside the kernels\n",
		        (double)d->dec_kernel_ns / 1e6 / ds, (double)d->dec_ipc_ns / 1e6 / ds,
		        (double)d->dec_attention_ns / 1e6 / ds, (double)(d->dec_other_ns + d->dec_moe_ns) / 1e6 / ds,
		        (double)d->dec_round_trips / ds,
		        100.0 * (1.0 - (double)d->dec_kernel_ns / (double)d->decode_ns));
		double v[4];
		if (ipc_split(d, v) && (d->dec_pickup_ns || d->dec_reply_ns))
			fprintf(f,
			        "IPC per decode call %.1f us: the ane-worker taking the request %.1f us, the reply "
			        "reaching this side %.1f us, the rest (the worker's own steps between kernels) %.1f us\n",
			        v[0], v[1], v[2], v[3]);
	}
}

static void
print_timings(FILE *f, struct pipe *p, const struct gen *g)
{
	double pf = g->prefill_ms > 0 ? g->info.prefilled / (g->prefill_ms / 1e3) : 0;
	double dt = g->decode_ms > 0 ? g->decode_steps / (g->decode_ms / 1e3) : 0;
	fprintf(f, "stop: %s\n", stop_names[g->stop]);
	fprintf(f, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", g->info.prefilled, g->prefill_ms / 1e3, pf);
	double dns = (g->decode_ms + (g->whole_job ? g->prefill_ms : 0)) * 1e6;
	double kern = (double)g->dec.kernel_ns, ipc = (double)g->dec.ipc_ns;
	fprintf(f, "decode: %d tokens in %.3f s (%.1f tok/s; kernels %.0f%%, IPC %.0f%%, CPU %.0f%%)\n",
	        g->decode_steps, g->decode_ms / 1e3, dt, dns > 0 ? 100 * kern / dns : 0, dns > 0 ? 100 * ipc / dns : 0,
	        dns > 0 ? 100 * (dns - kern - ipc) / dns : 0);
	print_split(f, p, g);
	if (g->spec.steps)
		spec_print(f, "speculative", &g->spec);
	else
		fprintf(f, "speculative: no draft\n");
}

// --- sampling flags ----------------------------------------------------------------------

// own: the struct sample_params
static int
sampling_flag(const char *cmd, void *own, int argc, char **argv, int *i)
{
	struct sample_params *sp = own;
	const char *a = argv[*i], *v;
	long long x;
	if (!strcmp(a, "--temp")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_float(cmd, a, v, 0, 100, &sp->temperature))
			return -1;
	} else if (!strcmp(a, "--top-k")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_int(cmd, a, v, 0, 1 << 22, &x))
			return -1;
		sp->top_k = (int32_t)x;
	} else if (!strcmp(a, "--top-p")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_float(cmd, a, v, 1e-6, 1, &sp->top_p))
			return -1;
	} else if (!strcmp(a, "--min-p")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_float(cmd, a, v, 0, 1, &sp->min_p))
			return -1;
	} else if (!strcmp(a, "--repeat-penalty")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_float(cmd, a, v, 1e-3, 100, &sp->repeat_penalty))
			return -1;
	} else if (!strcmp(a, "--repeat-last-n")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_int(cmd, a, v, 0, SAMPLE_MAX_WINDOW, &x))
			return -1;
		sp->repeat_last_n = (int32_t)x;
	} else if (!strcmp(a, "--presence-penalty")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_float(cmd, a, v, -2, 2, &sp->presence_penalty))
			return -1;
	} else if (!strcmp(a, "--frequency-penalty")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_float(cmd, a, v, -2, 2, &sp->frequency_penalty))
			return -1;
	} else if (!strcmp(a, "--seed")) {
		if (!(v = cli_val(cmd, argc, argv, i)) || cli_int(cmd, a, v, 0, INT64_MAX, &x))
			return -1;
		sp->seed = (uint64_t)x;
		sp->has_seed = 1;
	} else {
		return 0;
	}
	return 1;
}

#define SAMPLING_HELP                                                                                                  \
	"  --temp T            temperature (0: greedy)\n"                                                              \
	"  --top-k K           keep the K best (0: off)\n"                                                             \
	"  --top-p P           nucleus (1: off)\n"                                                                     \
	"  --min-p P           keep p >= P * p_max (0: off)\n"                                                         \
	"  --repeat-penalty R  llama.cpp semantics (1: off); --repeat-last-n N its window (64)\n"                      \
	"  --presence-penalty X, --frequency-penalty X   OpenAI semantics, -2..2\n"                                    \
	"  --seed N            random seed (default: a fixed one, so runs repeat)\n"

// --- the flags of run, chat, verify and serve ---------------------------------------------

// a pipeline command's own flags: the table plain, then flag (1 taken, 0
// not its, -1 bad with a message; own is its argument); either may be NULL
struct cmd_flags {
	const struct cli_plain *plain;
	int (*flag)(const char *cmd, void *own, int argc, char **argv, int *i);
	void *own;
	int no_spec_flags; // the speculative decoding flags are not the command's (verify)
	int model_word;    // a word that is not a flag is the model (unless --model gave it)
	void (*usage)(int full);
};

// each argument is offered to the command's own flags, then to pipe_flag
// and pipe_spec_flag (the spec flags, checked together at the end); then
// the model defaults (pipe_model_default). 0 to go on, or -1 with *status the
// exit status: 0 after --help, 2 after a bad or unknown argument (with the
// short usage)
static int
pipe_args(struct pipe_opts *po, const struct cmd_flags *f, int argc, char **argv, int *status)
{
	int rc = 0;
	for (int i = 1; i < argc && !rc; i++) {
		char *const a = argv[i]; // as given: a short flag is offered as its long one
		const char *lf = cli_long_flag(a);
		if (lf)
			argv[i] = (char *)lf;
		int r = f->plain ? cli_plain_flag(po->cmd, f->plain, argc, argv, &i) : 0;
		if (r == 0 && f->flag)
			r = f->flag(po->cmd, f->own, argc, argv, &i);
		if (r == 0)
			r = pipe_flag(po, argc, argv, &i);
		if (r == 0 && !f->no_spec_flags)
			r = pipe_spec_flag(po, argc, argv, &i);
		if (r == 0 && f->model_word && argv[i][0] != '-' && !po->model) {
			po->model = argv[i];
			r = 1;
		}
		rc = r > 0 ? 0 : r < 0 ? -1 : cli_help_or_unknown(po->cmd, a);
	}
	if (!rc && ((!f->no_spec_flags && pipe_spec_check(po)) || pipe_model_default(po)))
		rc = -1;
	if (rc) {
		f->usage(rc > 0);
		*status = rc > 0 ? 0 : 2;
	}
	return rc ? -1 : 0;
}

// the prompt as ids: --prompt-ids as given, else text through the chat
// template (unless raw) and the tokenizer
static int
prompt_ids(struct pipe *p, const char *text, const char *system, int raw, int32_t **ids, int *n, char *err)
{
	uint64_t t0 = trace_now_us();
	char *chat = NULL;
	const char *s = text;
	if (!raw) {
		struct tok_msg msgs[2];
		int k = 0;
		if (system)
			msgs[k++] = (struct tok_msg){.role = TOK_ROLE_SYSTEM, .content = system};
		msgs[k++] = (struct tok_msg){.role = TOK_ROLE_USER, .content = text};
		if (tokc_chat(p->tok, msgs, (size_t)k, 1, &chat, p->timeout_ms, err))
			return -1;
		s = chat;
	}
	size_t nn = 0;
	int rc = tokc_encode(p->tok, s, strlen(s), p->voc.add_bos, !raw, ids, &nn, p->timeout_ms, err);
	free(chat);
	if (trace_enabled())
		trace_event((long)getpid(), 1, "tokenize", "tokenizer-call", t0, trace_now_us() - t0);
	*n = (int)nn;
	return rc;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

// --- run ----------------------------------------------------------------------------

static void
run_usage(int full)
{
	cli_usage(
		"run", full,
		"[--model M] (--prompt TEXT | --prompt-ids 1,2,3) [options]\n"
		"  generate text: the decode loop runs in anedvd-cpu-worker, the projections in\n"
		"  anedvd-ane-worker, text goes through anedvd-tokenizer; the reply streams to stdout\n" PIPE_HELP_MODEL
		"  --prompt TEXT       wrapped in the model's chat template unless --no-chat\n"
		"  --prompt-ids LIST   comma-separated token ids, used as they are\n"
		"  --no-chat           raw completion of --prompt (BOS per the model)\n"
		"  --system TEXT       system message of the chat template\n"
		"  --max-tokens N      tokens to generate (default 48)\n"
		"  --max-seq N         context: prompt + reply (default 2048); a longer prompt\n"
		"                      loses its oldest tokens (a BOS stays), with a note\n" SAMPLING_HELP
			PIPE_HELP_BACKEND PIPE_HELP_SPEC
		"  --ngram-probe       decode without speculation, then print what it would have drafted\n"
		"                      and accepted (the same tokens come out either way)\n"
		"  --ab                first compare the prompt's logits fed per token and in chunks\n"
		"  --repeat N          generate N times; print min, median and max decode tok/s\n"
		"  --json              one JSON object (ids, text, stop, timings) instead of text\n"
		"  --trace FILE        Chrome trace-event JSON of every process (opens in Perfetto)\n");
}

struct run_opts {
	struct pipe_opts po;
	struct sample_params sp;
	const char *prompt, *ids, *system, *trace;
	int max_tokens, raw, ab, repeat, json, probe;
};

// 0, or -1 with *status the exit status (pipe_args)
static int
run_args(int argc, char **argv, struct run_opts *o, int *status)
{
	const struct cli_plain plain[] = {
		{.flag = "--prompt", .val = &o->prompt},
		{.flag = "--prompt-ids", .val = &o->ids},
		{.flag = "--system", .val = &o->system},
		{.flag = "--trace", .val = &o->trace},
		{.flag = "--max-tokens", .num = &o->max_tokens, .lo = 1, .hi = 1 << 20},
		{.flag = "--repeat", .num = &o->repeat, .lo = 1, .hi = 1000},
		{.flag = "--no-chat", .on = &o->raw},
		{.flag = "--ab", .on = &o->ab},
		{.flag = "--ngram-probe", .on = &o->probe},
		{.flag = "--json", .on = &o->json},
		{0},
	};
	const struct cmd_flags flags = {.plain = plain, .flag = sampling_flag, .own = &o->sp, .usage = run_usage};
	if (pipe_args(&o->po, &flags, argc, argv, status))
		return -1;
	if (!o->prompt == !o->ids) {
		fprintf(stderr, "anedvd run: give exactly one of --prompt and --prompt-ids\n");
		run_usage(0);
		*status = 2;
		return -1;
	}
	// one job: no later one could reuse its prompt from the prefix cache,
	// and the copy of its KV rows would be memory for nothing
	if (o->repeat <= 1)
		o->po.cache_mem = "0";
	return 0;
}

// --ab: the prompt fed one column per call and in chunks must agree
static int
run_ab(struct pipe *p, const int32_t *ids, int n, char *err)
{
	int nv = p->n_vocab;
	float *a = malloc((size_t)n * nv * sizeof *a), *b = malloc((size_t)n * nv * sizeof *b);
	int rc = -1;
	if (!a || !b) {
		ad_err(err, "out of memory");
		goto out;
	}
	if (pipe_eval(p, ids, n, 1, a, err) || pipe_eval(p, ids, n, 0, b, err))
		goto out;
	double md = 0;
	int same = 1;
	for (int r = 0; r < n; r++) {
		for (int j = 0; j < nv; j++) {
			double d = fabs((double)a[(size_t)r * nv + j] - b[(size_t)r * nv + j]);
			if (d > md || isnan(d))
				md = d;
		}
		same &= ref_argmax(a + (size_t)r * nv, nv) == ref_argmax(b + (size_t)r * nv, nv);
	}
	int ok = md < 1e-3 && same;
	fprintf(stderr, "ab: %d positions, per-token vs chunked max|diff| = %.3g, argmax %s -> %s\n", n, md,
	        same ? "equal" : "DIFFERENT", ok ? "ok" : "FAIL");
	rc = ok ? 0 : 1;
out:
	free(a);
	free(b);
	return rc;
}

int
cmd_run(int argc, char **argv)
{
	struct run_opts o;
	memset(&o, 0, sizeof o);
	o.po.cmd = "run";
	o.po.need_tok = 1;
	o.max_tokens = 48;
	o.repeat = 1;
	sample_defaults(&o.sp);
	o.sp.temperature = 0;
	o.sp.top_k = 40;
	spec_defaults(&o.po.spec);
	double t_cmd = cli_now_ms();
	int status;
	if (run_args(argc, argv, &o, &status))
		return status;
	char err[AD_ERRLEN];
	if (sample_check(&o.sp, err)) {
		fprintf(stderr, "anedvd run: %s\n", err);
		return 2;
	}
	int32_t *ids = NULL;
	int n = 0;
	if (o.ids && cli_ids("run", "--prompt-ids", o.ids, &ids, &n))
		return 2;
	char trace_env[1300], trace_pre[1200];
	if (o.trace) {
		// the children write <trace>.part.<pid>.json at exit; merged below
		trace_enable();
		snprintf(trace_pre, sizeof trace_pre, "%s.part", o.trace);
		snprintf(trace_env, sizeof trace_env, "ANEDVD_TRACE=%s", trace_pre);
		o.po.child_env = trace_env;
	}
	// --prompt-ids outside the vocabulary: a usage error, said before any
	// worker starts (the check after pipe_open stays for the tokenizer's ids)
	if (ids && o.po.model) {
		struct model m;
		if (model_load(&m, o.po.model, err) == 0) {
			long long nv = (long long)m.hp.n_vocab;
			model_free(&m);
			for (int i = 0; i < n; i++)
				if (ids[i] >= nv) {
					fprintf(stderr,
					        "anedvd run: token id %d is outside the vocabulary (%lld ids)\n",
					        ids[i], nv);
					free(ids);
					return 2;
				}
		}
	}
	struct pipe p;
	double t_open = cli_now_ms();
	if (pipe_open(&p, &o.po, err)) {
		fprintf(stderr, "anedvd run: %s\n", err);
		free(ids);
		return sup_interrupted() ? 130 : 1;
	}
	double first_token_ms = 0; // from the command's start until the first token was there
	status = 1;
	struct gen g = {0};
	double *tps = NULL;
	if (o.prompt && prompt_ids(&p, o.prompt, o.system, o.raw, &ids, &n, err)) {
		fprintf(stderr, "anedvd run: the prompt: %s\n", err);
		goto out;
	}
	if (n == 0) {
		fprintf(stderr, "anedvd run: the prompt is empty\n");
		status = 2;
		goto out;
	}
	for (int i = 0; i < n; i++)
		if (ids[i] >= p.n_vocab) {
			fprintf(stderr, "anedvd run: token id %d is outside the vocabulary (%d ids)\n", ids[i],
			        p.n_vocab);
			status = 2;
			goto out;
		}
	if (o.ab) {
		if (n > p.max_seq) {
			fprintf(stderr,
			        "anedvd run: prompt is %d tokens but the context is %d; raise it with --max-seq %d\n",
			        n, p.max_seq, n);
			status = 2;
			goto out;
		}
		int r = run_ab(&p, ids, n, err);
		if (r < 0) {
			fprintf(stderr, "anedvd run: --ab: %s\n", err);
			goto out;
		}
		if (r > 0)
			goto out;
	}
	if (!o.json) {
		char *pt = NULL;
		size_t pl = 0;
		if (tokc_decode(p.tok, ids, (size_t)n, &pt, &pl, p.timeout_ms, err) == 0) {
			printf("prompt (%d tokens): %s\n---\n", n, pt);
		} else {
			printf("prompt (%d tokens)\n---\n", n);
		}
		free(pt);
		fflush(stdout);
	}
	tps = calloc((size_t)o.repeat, sizeof *tps);
	for (int r = 0; r < o.repeat; r++) {
		if (r > 0)
			gen_free(&g);
		if (generate(&p, NULL, ids, n, o.max_tokens, &o.sp, o.probe ? 1 : 0, o.json || r > 0 ? NULL : stdout,
		             &g, err)) {
			fprintf(stderr, "\nanedvd run: %s\n", err);
			goto out;
		}
		if (r == 0)
			first_token_ms = (t_open - t_cmd) + p.open_ms + g.prefill_ms;
		tps[r] = g.decode_ms > 0 ? g.decode_steps / (g.decode_ms / 1e3) : 0;
		if (r == 0 && !o.json) {
			printf("\n---\n");
			if (g.info.dropped)
				printf("note: the prompt was %d tokens; the oldest %d were dropped to fit the context "
				       "(%d); raise it with --max-seq\n",
				       n, g.info.dropped, p.max_seq);
			print_timings(stdout, &p, &g);
		}
		if (g.stop == GEN_INTERRUPTED)
			break;
	}
	struct probe pr = {0};
	if (o.probe && g.stop != GEN_INTERRUPTED) {
		if (run_probe(&o.po, ids, n, &g, o.max_tokens, p.max_seq, &pr, err)) {
			fprintf(stderr, "anedvd run: --ngram-probe: %s\n", err);
			goto out;
		}
		if (!o.json) {
			spec_print(stdout, "ngram probe", &pr.st);
			printf("ngram probe: %d decode calls instead of %d (draft %d, n-grams %d..%d, draft cost %g)\n",
			       pr.calls, pr.plain_calls, o.po.spec.draft, o.po.spec.ngram_max, o.po.spec.ngram_min,
			       (double)(o.po.spec.col_cost == SPEC_COST_AUTO ? SPEC_COL_COST : o.po.spec.col_cost));
		}
	}
	if (o.repeat > 1 && g.stop != GEN_INTERRUPTED) {
		qsort(tps, (size_t)o.repeat, sizeof *tps, cmp_double);
		double sum = 0;
		for (int r = 0; r < o.repeat; r++)
			sum += tps[r];
		printf("decode over %d runs: median %.1f tok/s (min %.1f, max %.1f, mean %.1f)\n", o.repeat,
		       o.repeat % 2 ? tps[o.repeat / 2] : (tps[o.repeat / 2 - 1] + tps[o.repeat / 2]) / 2, tps[0],
		       tps[o.repeat - 1], sum / o.repeat);
	}
	if (o.json) {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "backend", p.backend);
		cJSON_AddStringToObject(j, "weights", p.weights);
		cJSON_AddItemToObject(j, "prompt_ids", cli_json_ids(ids, n));
		cJSON_AddItemToObject(j, "ids", cli_json_ids(g.ids, g.n));
		// the text may end inside a character, or hold bytes that are none:
		// U+FFFD for them, so the output is JSON (as cpu --json)
		char *stext = unicode_sanitize(g.text ? g.text : "", g.text ? strlen(g.text) : 0, NULL);
		cJSON_AddStringToObject(j, "text", stext ? stext : "");
		free(stext);
		cJSON_AddStringToObject(j, "stop", stop_names[g.stop]);
		cJSON_AddNumberToObject(j, "prompt_tokens_dropped", g.info.dropped);
		cJSON *t = cJSON_CreateObject();
		cJSON_AddNumberToObject(t, "prefill_tokens", g.info.prefilled);
		cJSON_AddNumberToObject(t, "prefill_ms", g.prefill_ms);
		cJSON_AddNumberToObject(t, "decode_tokens", g.decode_steps);
		cJSON_AddNumberToObject(t, "decode_ms", g.decode_ms);
		cJSON_AddNumberToObject(t, "decode_tok_s", g.decode_ms > 0 ? g.decode_steps / (g.decode_ms / 1e3) : 0);
		double st = g.decode_steps > 0 ? g.decode_steps : 1;
		cJSON *sp = cJSON_CreateObject();
		for (int k = 1; k < PIPE_KINDS; k++)
			if (g.dec_kind_calls[k])
				cJSON_AddNumberToObject(sp, pipe_kind_name(k), (double)g.dec_kind_ns[k] / 1e6 / st);
		cJSON_AddNumberToObject(sp, "ipc", (double)g.dec.ipc_ns / 1e6 / st);
		cJSON_AddNumberToObject(sp, "attention", (double)g.dec.attention_ns / 1e6 / st);
		cJSON_AddNumberToObject(sp, "sampling", (double)g.dec.sampling_ns / 1e6 / (g.n ? g.n : 1));
		cJSON_AddNumberToObject(sp, "other", (double)(g.dec.cpu_other_ns + g.dec.moe_ns) / 1e6 / st);
		cJSON_AddItemToObject(t, "per_token_ms", sp);
		cJSON_AddNumberToObject(t, "kernel_calls_per_token", (double)g.dec.kernel_calls / st);
		cJSON_AddNumberToObject(t, "round_trips_per_token", (double)g.dec.round_trips / st);
		cJSON_AddNumberToObject(t, "kernel_ms_per_token", (double)g.dec.kernel_ns / 1e6 / st);
		cJSON_AddNumberToObject(t, "prefill_tok_s",
		                        g.prefill_ms > 0 ? g.info.prefilled / (g.prefill_ms / 1e3) : 0);
		double span = g.decode_ms + (g.whole_job ? g.prefill_ms : 0); // what g.dec covers
		cJSON_AddNumberToObject(t, "outside_kernels_share",
		                        span > 0 ? 1.0 - (double)g.dec.kernel_ns / (span * 1e6) : 0);
		cJSON_AddBoolToObject(t, "split_is_whole_job", g.whole_job);
		if (g.whole_job && g.dec.decode_ns > 0) { // the decode steps alone, per decode token
			cJSON *ds = cJSON_CreateObject();
			cJSON_AddNumberToObject(ds, "kernels", (double)g.dec.dec_kernel_ns / 1e6 / st);
			cJSON_AddNumberToObject(ds, "ipc", (double)g.dec.dec_ipc_ns / 1e6 / st);
			cJSON_AddNumberToObject(ds, "attention", (double)g.dec.dec_attention_ns / 1e6 / st);
			cJSON_AddNumberToObject(ds, "other",
			                        (double)(g.dec.dec_other_ns + g.dec.dec_moe_ns) / 1e6 / st);
			cJSON_AddItemToObject(t, "decode_per_token_ms", ds);
			cJSON_AddNumberToObject(t, "decode_round_trips_per_token", (double)g.dec.dec_round_trips / st);
			// the IPC of a decode call, split where the data plane can tell
			double v[4];
			if (ipc_split(&g.dec, v)) {
				static const char *part[4] = {"all", "pickup", "reply", "rest"};
				cJSON *ic = cJSON_CreateObject();
				for (int i = 0; i < 4; i++)
					cJSON_AddNumberToObject(ic, part[i], v[i]);
				cJSON_AddItemToObject(t, "decode_ipc_per_call_us", ic);
			}
			cJSON_AddNumberToObject(t, "decode_outside_kernels_share",
			                        1.0 - (double)g.dec.dec_kernel_ns / (double)g.dec.decode_ns);
		}
		cJSON_AddItemToObject(j, "timings", t);
		cJSON *spj = ad_spec_json(&g.spec);
		cJSON_AddBoolToObject(spj, "on", g.whole_job && !o.probe && !o.po.no_spec && o.po.spec.draft > 0);
		cJSON_AddItemToObject(j, "speculative", spj);
		if (o.probe) {
			cJSON *pj = ad_spec_json(&pr.st);
			cJSON_AddNumberToObject(pj, "decode_calls", pr.calls);
			cJSON_AddNumberToObject(pj, "plain_decode_calls", pr.plain_calls);
			cJSON_AddItemToObject(j, "ngram_probe", pj);
		}
		// the start: the pipeline's processes until each answered, then the
		// prompt; the ane-worker's own phases and its kernel cache
		cJSON *so = cJSON_CreateObject();
		cJSON_AddNumberToObject(so, "to_first_token_ms", first_token_ms);
		cJSON_AddNumberToObject(so, "pipe_open_ms", p.open_ms);
		cJSON_AddNumberToObject(so, "tokenizer_ready_ms", p.tok_ready_ms);
		cJSON_AddNumberToObject(so, "ane_worker_ready_ms", p.ane_ready_ms);
		cJSON_AddNumberToObject(so, "cpu_worker_ready_ms", p.cpu_ready_ms);
		cJSON_AddNumberToObject(so, "prefill_ms", g.prefill_ms);
		struct pipe_ane_start as;
		char e2[AD_ERRLEN];
		if (pipe_ane_start(&p, &as, e2) == 0) {
			cJSON *aw = cJSON_CreateObject();
			cJSON_AddStringToObject(aw, "cache", as.cache);
			cJSON_AddNumberToObject(aw, "weight_bytes", (double)as.weight_bytes);
			for (int i = 0; i < as.n; i++) {
				char key[40];
				snprintf(key, sizeof key, "%s_ms", as.name[i]);
				cJSON_AddNumberToObject(aw, key, as.ms[i]);
			}
			cJSON_AddItemToObject(so, "ane_worker", aw);
		}
		cJSON_AddItemToObject(j, "start", so);
		cJSON_AddNumberToObject(j, "ane_worker_restarts", sup_restarts(p.sup, "ane-worker"));
		if (!p.cw) {
			cJSON_AddNumberToObject(j, "cpu_worker_restarts", sup_restarts(p.sup, "cpu-worker"));
			cJSON_AddNumberToObject(j, "resumed", g.resumed);
		}
		char *s = cJSON_PrintUnformatted(j);
		if (s)
			printf("%s\n", s);
		free(s);
		cJSON_Delete(j);
	}
	status = g.stop == GEN_INTERRUPTED ? 130 : 0;
out:
	if (status == 130)
		fprintf(stderr, "anedvd run: interrupted\n");
	gen_free(&g);
	free(tps);
	pipe_close(&p); // the children stop and write their traces
	free(ids);
	if (o.trace) {
		if (trace_write(o.trace, trace_pre, err)) {
			fprintf(stderr, "anedvd run: %s\n", err);
			status = status ? status : 1;
		}
		trace_remove_parts(trace_pre);
	}
	return status;
}

// --- chat ----------------------------------------------------------------------------

static void
chat_usage(int full)
{
	cli_usage("chat", full,
	          "[--model M] [options]\n"
	          "  multi-turn chat in the terminal; each turn reuses the cached prefix\n"
	          "  commands: /help /reset /temp X /topp X /rep X (without X: show it) /exit /quit\n" PIPE_HELP_MODEL
	          "  --system TEXT       system message\n"
	          "  --max-tokens N      reply length (default 256)\n"
	          "  --max-seq N         context (default 2048)\n"
	          "  (sampling defaults: --temp 0.7 --top-p 0.9 --repeat-penalty 1.15)\n" SAMPLING_HELP PIPE_HELP_SPEC
	                  PIPE_HELP_BACKEND);
}

struct msg {
	enum tok_role role;
	char *text;
};

int
cmd_chat(int argc, char **argv)
{
	struct pipe_opts po = {.cmd = "chat", .need_tok = 1};
	spec_defaults(&po.spec);
	struct sample_params sp;
	sample_defaults(&sp);
	sp.temperature = 0.7f;
	sp.top_p = 0.9f;
	sp.repeat_penalty = 1.15f;
	const char *system = NULL;
	int max_tokens = 256;
	const struct cli_plain plain[] = {
		{.flag = "--system", .val = &system},
		{.flag = "--max-tokens", .num = &max_tokens, .lo = 1, .hi = 1 << 20},
		{0},
	};
	const struct cmd_flags flags = {.plain = plain, .flag = sampling_flag, .own = &sp, .usage = chat_usage};
	int status;
	if (pipe_args(&po, &flags, argc, argv, &status))
		return status;
	char err[AD_ERRLEN];
	struct pipe p;
	if (pipe_open(&p, &po, err)) {
		fprintf(stderr, "anedvd chat: %s\n", err);
		return 1;
	}
	struct msg *hist = NULL;
	int nh = 0;
	status = 1;
	char session[64];
	snprintf(session, sizeof session, "chat-%ld", (long)getpid());
	// the tokenizer says, at its first chat rendering, when the model has
	// no chat template it runs: render once now, so that the note comes
	// before the first prompt and not inside its line
	{
		struct tok_msg m[2] = {{.role = TOK_ROLE_SYSTEM, .content = system},
		                       {.role = TOK_ROLE_USER, .content = ""}};
		char *c = NULL;
		if (tokc_chat(p.tok, system ? m : m + 1, system ? 2 : 1, 1, &c, p.timeout_ms, err) == 0)
			free(c);
	}
	printf("ready. /help for commands, /exit to quit.\n");
	char line[8192];
	for (;;) {
		printf("\nyou> ");
		fflush(stdout);
		if (!fgets(line, sizeof line, stdin))
			break;
		if (sup_interrupted())
			break;
		size_t L = strlen(line);
		while (L && (line[L - 1] == '\n' || line[L - 1] == '\r'))
			line[--L] = 0;
		if (!L)
			continue;
		if (line[0] == '/') {
			char *arg = strchr(line, ' ');
			if (arg)
				*arg++ = 0;
			float f;
			if (!strcmp(line, "/exit") || !strcmp(line, "/quit"))
				break;
			if (!strcmp(line, "/help")) {
				printf("/reset     forget the conversation\n/temp X    temperature\n/topp X    top-p\n"
				       "/rep X     repetition penalty\n/exit      leave (also /quit)\n"
				       "/temp, /topp and /rep without a value show it\n");
			} else if (!strcmp(line, "/reset")) {
				for (int i = 0; i < nh; i++)
					free(hist[i].text);
				nh = 0;
				engc_reset(p.eng, session, p.timeout_ms, NULL, NULL);
				printf("conversation cleared\n");
			} else if (!strcmp(line, "/temp")) { // a bad value: cli_float says why
				if (!arg || !cli_float("chat", "/temp", arg, 0, 100, &f)) {
					if (arg)
						sp.temperature = f;
					printf("temperature %g%s\n", (double)sp.temperature,
					       sp.temperature == 0 ? " (greedy)" : "");
				}
			} else if (!strcmp(line, "/topp")) {
				if (!arg || !cli_float("chat", "/topp", arg, 1e-6, 1, &f)) {
					if (arg)
						sp.top_p = f;
					printf("top-p %g%s\n", (double)sp.top_p, sp.top_p >= 1 ? " (off)" : "");
				}
			} else if (!strcmp(line, "/rep")) {
				if (!arg || !cli_float("chat", "/rep", arg, 1e-3, 100, &f)) {
					if (arg)
						sp.repeat_penalty = f;
					printf("repetition penalty %g%s\n", (double)sp.repeat_penalty,
					       sp.repeat_penalty == 1 ? " (off)" : "");
				}
			} else {
				printf("unknown command %s: /help lists the commands\n", line);
			}
			continue;
		}
		struct msg *nhist = realloc(hist, (size_t)(nh + 2) * sizeof *hist);
		if (!nhist)
			goto out;
		hist = nhist;
		hist[nh].role = TOK_ROLE_USER;
		hist[nh].text = strdup(line);
		nh++;
		int nm = nh + (system ? 1 : 0);
		struct tok_msg *msgs = calloc((size_t)nm, sizeof *msgs);
		int k = 0;
		if (system)
			msgs[k++] = (struct tok_msg){.role = TOK_ROLE_SYSTEM, .content = system};
		for (int i = 0; i < nh; i++)
			msgs[k++] = (struct tok_msg){.role = hist[i].role, .content = hist[i].text};
		char *chat = NULL;
		int32_t *ids = NULL;
		size_t n = 0;
		if (tokc_chat(p.tok, msgs, (size_t)nm, 1, &chat, p.timeout_ms, err) ||
		    tokc_encode(p.tok, chat, strlen(chat), p.voc.add_bos, 1, &ids, &n, p.timeout_ms, err)) {
			// a tokenizer that crashed is being restarted: this turn is lost, the chat goes on
			free(msgs);
			free(chat);
			free(hist[--nh].text);
			fprintf(stderr, "anedvd chat: this turn failed: %s\n", err);
			continue;
		}
		free(msgs);
		free(chat);
		printf("\n");
		struct gen g;
		int rc = generate(&p, session, ids, (int)n, max_tokens, &sp, 0, stdout, &g, err);
		free(ids);
		if (rc) {
			// the reply is lost; the cache may hold part of it, so start the next turn afresh
			fprintf(stderr, "\nanedvd chat: this turn failed: %s\n", err);
			gen_free(&g);
			free(hist[--nh].text);
			engc_reset(p.eng, session, p.timeout_ms, NULL, NULL);
			if (sup_interrupted())
				break;
			continue;
		}
		double tps = g.decode_ms > 0 ? g.decode_steps / (g.decode_ms / 1e3) : 0;
		printf("\n[%d tokens, %.1f tok/s, %s, prompt %d (%d reused)]\n", g.n, tps, stop_names[g.stop],
		       g.info.prompt_tokens, g.info.reused);
		if (g.info.dropped)
			printf("note: the conversation no longer fits the context (%d): the oldest %d tokens were "
			       "dropped; raise --max-seq or /reset\n",
			       p.max_seq, g.info.dropped);
		hist[nh].role = TOK_ROLE_ASSISTANT;
		hist[nh].text = strdup(g.text ? g.text : "");
		nh++;
		int interrupted = g.stop == GEN_INTERRUPTED;
		gen_free(&g);
		if (interrupted)
			break;
	}
	status = 0;
out:
	for (int i = 0; i < nh; i++)
		free(hist[i].text);
	free(hist);
	pipe_close(&p);
	return status;
}

// --- verify ------------------------------------------------------------------------------

static void
verify_usage(int full)
{
	cli_usage("verify", full,
	          "[--model M] [--prompt TEXT | --prompt-ids 1,2,3] [options]\n"
	          "  the whole prompt through the pipeline (teacher-forced) and through the fp32 reference\n"
	          "  engine: relative error, cosine, max|diff| and argmax per position. MATCH when the\n"
	          "  last position's relative error is below 0.10 and both argmaxes agree; exit 1 otherwise.\n"
	          "  With int8 or lut4 weights it also prints their error against the model's own weights\n"
	          "  (dequantised to fp32: max|dw|, max|dw| / row max, RMS relative) and the largest\n"
	          "  |dlogit| over all positions, and the argmax rule allows a near-tie: the reference's\n"
	          "  logit of the pipeline's token within 1% of max|ref logit| of its own top logit.\n"
	          "  --model M           (or the first argument) a .gguf file or a Hugging Face directory\n"
	          "                      (default: the bundled stories260K)\n"
	          "  --prompt TEXT       raw text, BOS per the model (default \"Once upon a time\")\n"
	          "  --prompt-ids LIST   token ids instead (no tokenizer process then)\n"
	          "  --layers N          only the first N layers (then the final norm and the LM head), in the\n"
	          "                      workers and the reference alike: bisects a MISMATCH\n" PIPE_HELP_BACKEND
	          "  --pipeline-rope-hf  a deliberate fault: neox RoPE in the pipeline only (to see MISMATCH)\n");
}

int
cmd_verify(int argc, char **argv)
{
	struct pipe_opts po = {.cmd = "verify"};
	const char *prompt = NULL, *idss = NULL;
	int layers = 0, rope_hf = 0;
	const struct cli_plain plain[] = {
		{.flag = "--prompt", .val = &prompt},
		{.flag = "--prompt-ids", .val = &idss},
		{.flag = "--layers", .num = &layers, .lo = 1, .hi = 100000},
		{.flag = "--pipeline-rope-hf", .on = &rope_hf},
		{0},
	};
	const struct cmd_flags flags = {.plain = plain, .no_spec_flags = 1, .model_word = 1, .usage = verify_usage};
	int status;
	if (pipe_args(&po, &flags, argc, argv, &status))
		return status;
	if (layers) {
		// every process (the workers, this one's reference) loads the
		// model cut to its first N layers; model_load checks N
		char nl[16];
		snprintf(nl, sizeof nl, "%d", layers);
		setenv("ANEDVD_LAYERS", nl, 1);
	}
	if (rope_hf)
		po.pipe_rope = MODEL_ROPE_NEOX;
	if (prompt && idss) {
		fprintf(stderr, "anedvd verify: give one of --prompt and --prompt-ids\n");
		return 2;
	}
	int32_t *ids = NULL;
	int n = 0;
	if (idss && cli_ids("verify", "--prompt-ids", idss, &ids, &n))
		return 2;
	po.need_tok = !idss;
	char err[AD_ERRLEN];
	struct pipe p;
	if (pipe_open(&p, &po, err)) {
		fprintf(stderr, "anedvd verify: %s\n", err);
		free(ids);
		return 1;
	}
	status = 1;
	float *a = NULL, *b = NULL;
	struct ref_engine *ref = NULL;
	if (!idss) {
		size_t nn = 0;
		const char *t = prompt ? prompt : "Once upon a time";
		if (tokc_encode(p.tok, t, strlen(t), p.voc.add_bos, 0, &ids, &nn, p.timeout_ms, err)) {
			fprintf(stderr, "anedvd verify: %s\n", err);
			goto out;
		}
		n = (int)nn;
	}
	int nv = p.n_vocab;
	if (n < 1 || n > p.max_seq) {
		fprintf(stderr, "anedvd verify: the prompt has %d tokens; the context holds %d (--max-seq)\n", n,
		        p.max_seq);
		status = 2;
		goto out;
	}
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= nv) {
			fprintf(stderr, "anedvd verify: token id %d is outside the vocabulary (%d ids)\n", ids[i], nv);
			status = 2;
			goto out;
		}
	a = malloc((size_t)n * nv * sizeof *a);
	b = malloc((size_t)n * nv * sizeof *b);
	if (!a || !b) {
		fprintf(stderr, "anedvd verify: out of memory\n");
		goto out;
	}
	double t0 = cli_now_ms();
	if (pipe_eval(&p, ids, n, 0, a, err)) {
		fprintf(stderr, "anedvd verify: pipeline: %s\n", err);
		goto out;
	}
	double t_pipe = cli_now_ms() - t0;
	enum model_rope pr = p.m.hp.rope;
	p.m.hp.rope = p.ref_rope;
	ref = ref_new_ctx(&p.m, n, p.max_seq, err); // the pipeline's context picks longrope's factors
	p.m.hp.rope = pr;
	if (!ref) {
		fprintf(stderr, "anedvd verify: reference: %s\n", err);
		goto out;
	}
	t0 = cli_now_ms();
	if (ref_eval(ref, ids, n, b)) {
		fprintf(stderr, "anedvd verify: the reference engine failed\n");
		goto out;
	}
	double t_ref = cli_now_ms() - t0;
	// quantised weights (int8, lut4): their own error too
	enum ane_wfmt wf = ANE_W_FP16;
	int quant = !ane_wfmt_parse(p.weights, &wf) && wf != ANE_W_FP16;
	struct ane_qerr qe = {0};
	if (quant) {
		struct ane_plan pl;
		struct ane_plan_opts plo = {.weights = wf, .split = po.split};
		int qrc = ane_plan_build(&pl, &p.m, &plo, err);
		if (!qrc) {
			qrc = ane_qerr_plan(&pl, &qe, err);
			ane_plan_free(&pl);
		}
		if (qrc) {
			fprintf(stderr, "anedvd verify: %s error: %s\n", p.weights, err);
			goto out;
		}
	}
	printf("model: %s (%s, %lld layers), backend %s, %s weights, decode loop %s, %d prompt tokens\n", po.model,
	       model_arch_name(p.m.arch), (long long)p.m.hp.n_layer, p.backend, p.weights,
	       p.cw ? "in this process" : "in anedvd-cpu-worker", n);
	printf("  pos    token   rel.err    cosine   max|diff|  max|ref|  argmax pipe/ref\n");
	int same_all = 0, nan_total = 0;
	double rel_last = 0, cos_last = 0, md_last = 0, md_all = 0, gap_last = 0;
	int am_last = 0, ar_last = 0;
	for (int r = 0; r < n; r++) {
		const float *x = a + (size_t)r * nv, *y = b + (size_t)r * nv;
		double d2 = 0, y2 = 0, x2 = 0, xy = 0, md = 0, my = 0;
		int nans = 0;
		for (int j = 0; j < nv; j++) {
			if (isnan(x[j])) {
				nans++;
				continue;
			}
			double d = (double)x[j] - y[j];
			d2 += d * d;
			y2 += (double)y[j] * y[j];
			x2 += (double)x[j] * x[j];
			xy += (double)x[j] * y[j];
			md = fabs(d) > md ? fabs(d) : md;
			my = fabs(y[j]) > my ? fabs(y[j]) : my;
		}
		double rel = y2 > 0 ? sqrt(d2 / y2) : sqrt(d2);
		double cs = x2 > 0 && y2 > 0 ? xy / sqrt(x2 * y2) : 0;
		int am = ref_argmax(x, nv), ar = ref_argmax(y, nv);
		same_all += am == ar;
		nan_total += nans;
		md_all = md > md_all ? md : md_all;
		if (n <= 24 || r < 8 || r >= n - 8)
			printf("  %3d  %7d  %9.3e  %8.6f  %9.3e  %8.3f  %6d/%-6d%s%s\n", r, ids[r], rel, cs, md, my, am,
			       ar, am == ar ? "" : "  <- differs", nans ? "  NaN" : "");
		else if (r == 8)
			printf("  ...\n");
		if (r == n - 1) {
			rel_last = nans ? INFINITY : rel;
			cos_last = cs;
			md_last = md;
			am_last = am;
			ar_last = ar;
			// how far below the reference's top the pipeline's choice is
			gap_last = my > 0 ? ((double)y[ar] - y[am]) / my : 0;
		}
	}
	int tie = quant && am_last != ar_last && gap_last <= 0.01;
	int ok = rel_last < 0.10 && (am_last == ar_last || tie) && nan_total == 0;
	if (quant)
		printf("%s weights: %llu of them, max|dw| %.3e, max|dw|/row max %.3e, RMS relative %.3e; "
		       "max|dlogit| %.3e over all positions\n",
		       p.weights, (unsigned long long)qe.n, qe.max_abs, qe.max_rel_row, ane_qerr_rms_rel(&qe), md_all);
	printf("argmax equal at %d of %d positions; pipeline %.1f ms, reference %.1f ms\n", same_all, n, t_pipe, t_ref);
	printf("last position: rel %.3e, cosine %.6f, max|diff| %.3e, argmax %d vs %d%s -> %s\n", rel_last, cos_last,
	       md_last, am_last, ar_last, tie ? " (a near-tie)" : "", ok ? "MATCH" : "MISMATCH");
	status = ok ? 0 : 1;
out:
	ref_free(ref);
	free(a);
	free(b);
	free(ids);
	pipe_close(&p);
	return status;
}

// --- serve ---------------------------------------------------------------------------

static void
serve_usage(int full)
{
	cli_usage("serve", full,
	          "[--model M] [--host 127.0.0.1] [--port 8080] [options]\n"
	          "  the HTTP server (OpenAI chat, completions and Responses, Anthropic messages and\n"
	          "  count_tokens, llama.cpp's /tokenize, /detokenize, /apply-template, /props; WebUI) with\n"
	          "  the tokenizer, the cpu-worker and the ane-worker behind it, supervised: a crashed\n"
	          "  worker is restarted\n" PIPE_HELP_MODEL
	          "  --host H, --port N  where to listen (default 127.0.0.1:8080)\n"
	          "  --name ID           model id in /v1/models (default: the file's stem)\n"
	          "  --system TEXT       system prompt for chats that bring none\n"
	          "  --temp T, --top-p P, --top-k K, --min-p P, --repeat-penalty R\n"
	          "                      sampling for a request that does not set it (defaults: 0.7, 1,\n"
	          "                      40 for chat and 0 for completions, 0, 1)\n"
	          "  --max-tokens N      reply length when a request gives none (default 512)\n"
	          "  --max-seq N         context (default 2048)\n"
	          "  --parallel N        generations at once (default 1); --queue N waiting beyond them\n"
	          "  --cache-mem SIZE    the prefix cache: KV rows of earlier prompts that every request reuses\n"
	          "                      (e.g. 256M, 2G; a plain number is MiB; 0: off; default the KV of\n"
	          "                      max(4, --parallel) full contexts)\n" PIPE_HELP_SPEC
	          "                      (a request may set \"speculative\": false or true itself)\n"
	          "  --embeddings        serve POST /v1/embeddings too (off by default: 501)\n"
	          "  --api-key KEY       every request but /health and the WebUI page needs 'Authorization:\n"
	          "                      Bearer KEY' or 'x-api-key: KEY' (repeatable; also ANEDVD_API_KEY,\n"
	          "                      comma-separated, which keeps keys off the command line)\n"
	          "  --api-key-file F    keys, one a line ('#' comments)\n"
	          "  --cors-origin O     a browser origin allowed beside the server's own and loopback ones\n"
	          "                      (repeatable; '*' allows all); others get 403\n"
	          "  --allowed-host H    a Host name accepted beside localhost, IP addresses and --host\n"
	          "                      (repeatable; '*' any): other names get 403 (DNS rebinding)\n"
	          "  --tokenizer-url U   where the tokenizer service listens (default: an ipc:// socket in the\n"
	          "                      instance's runtime directory; e.g. tcp://127.0.0.1:7001)\n"
	          "  --engine-url U      the same for the cpu-worker (on tcp:// the frontend's lease, not its\n"
	          "                      pid, is how the worker notices a frontend that died)\n"
	          "  --backend B         emu (default off macOS) or exact; ane needs macOS on Apple Silicon\n"
	          "  --chunk N           columns every kernel is compiled for (default 64)\n"
	          "  --split             split FFN (gate|up, activation on the CPU, down)\n"
	          "  --threads N         emu threads of the ane-worker (default 2)\n"
	          "  --weights W         fp16, int8 or lut4 kernel weights; default int8 on emu for models stored in\n"
	          "                      8 bits or fewer (Q8_0, Q4/Q5, K-quants), else fp16; fp16 on ane\n");
}

// the frontend is up when its port takes a connection
static int
health_tcp(const char *hostport, int timeout_ms, char *err)
{
	(void)timeout_ms; // a local connect answers at once
	char host[256];
	snprintf(host, sizeof host, "%s", hostport);
	char *colon = strrchr(host, ':');
	if (!colon)
		return ad_err(err, "bad address %s", hostport);
	*colon = 0;
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	if (getaddrinfo(host, colon + 1, &hints, &ai) != 0 || !ai)
		return ad_err(err, "cannot resolve %s", hostport);
	int fd = socket(ai->ai_family, SOCK_STREAM, 0);
	int rc = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : -1;
	if (fd >= 0)
		close(fd);
	freeaddrinfo(ai);
	return rc ? ad_err(err, "nothing listens on %s yet", hostport) : 0;
}

#define SERVE_MAX_ACCESS 32

// serve's flags beyond the table: for the cpu-worker and the frontend
struct serve_opts {
	const char *tok_url, *eng_url, *cache_mem;
	// access flags for the frontend: --api-key goes through the environment
	// (a command line is readable by every user), the others as they are
	const char *keys[SERVE_MAX_ACCESS], *access[2 * SERVE_MAX_ACCESS];
	int n_keys, n_access;
	const char *samp[10]; // the sampling defaults, flag and value, for the frontend
	int n_samp;
};

static int
serve_flag(const char *cmd, void *own, int argc, char **argv, int *i)
{
	struct serve_opts *o = own;
	const char *a = argv[*i], *v;
	if (!strcmp(a, "--rope-hf") || !strcmp(a, "--rope-adjacent") || !strcmp(a, "--debug-delay-ms")) {
		fprintf(stderr, "anedvd serve: %s is not supported here (the cpu-worker takes the model's own)\n", a);
		return -1;
	} else if (!strcmp(a, "--cache-mem")) {
		size_t bytes;
		if (!(o->cache_mem = cli_val("serve", argc, argv, i)))
			return -1;
		if (pcache_parse_mem(o->cache_mem, &bytes)) {
			fprintf(stderr, "anedvd serve: --cache-mem takes a size such as 256M, 2G or 0, not '%s'\n",
			        o->cache_mem);
			return -1;
		}
	} else if (!strcmp(a, "--tokenizer-url") || !strcmp(a, "--engine-url")) {
		const char **u = !strcmp(a, "--tokenizer-url") ? &o->tok_url : &o->eng_url;
		if (!(*u = cli_val("serve", argc, argv, i)))
			return -1;
		if (strncmp(*u, "tcp://", 6) && strncmp(*u, "ipc://", 6)) {
			fprintf(stderr, "anedvd serve: %s takes tcp://HOST:PORT or ipc://PATH, not '%s'\n", a, *u);
			return -1;
		}
		if (strlen(*u) >= 600) {
			fprintf(stderr, "anedvd serve: %s is too long\n", a);
			return -1;
		}
	} else if (!strcmp(a, "--api-key")) {
		if (!(v = cli_val("serve", argc, argv, i)))
			return -1;
		if (o->n_keys == SERVE_MAX_ACCESS || strchr(v, ',') || !v[0]) {
			fprintf(stderr, "anedvd serve: --api-key: at most %d keys, each non-empty with no comma\n",
			        SERVE_MAX_ACCESS);
			return -1;
		}
		o->keys[o->n_keys++] = v;
	} else if (!strcmp(a, "--temp") || !strcmp(a, "--top-p") || !strcmp(a, "--top-k") || !strcmp(a, "--min-p") ||
	           !strcmp(a, "--repeat-penalty")) {
		// checked here so a bad value fails before anything starts; the
		// frontend applies them to requests that do not set them
		float f;
		if (!(v = cli_val("serve", argc, argv, i)))
			return -1;
		int bad = !strcmp(a, "--temp")             ? cli_float("serve", a, v, 0, 2, &f)
		          : !strcmp(a, "--top-k")          ? cli_int("serve", a, v, 0, 1 << 20, &(long long){0})
		          : !strcmp(a, "--repeat-penalty") ? cli_float("serve", a, v, 1e-6, 10, &f)
		                                           : cli_float("serve", a, v, 0, 1, &f);
		if (bad || o->n_samp == 10)
			return -1;
		o->samp[o->n_samp++] = a;
		o->samp[o->n_samp++] = v;
	} else if (!strcmp(a, "--api-key-file") || !strcmp(a, "--cors-origin") || !strcmp(a, "--allowed-host")) {
		if (!(v = cli_val("serve", argc, argv, i)))
			return -1;
		if (o->n_access == 2 * SERVE_MAX_ACCESS) {
			fprintf(stderr, "anedvd serve: at most %d of %s and the like\n", SERVE_MAX_ACCESS, a);
			return -1;
		}
		o->access[o->n_access++] = a;
		o->access[o->n_access++] = v;
	} else {
		return 0;
	}
	return 1;
}

int
cmd_serve(int argc, char **argv)
{
	struct pipe_opts po = {.cmd = "serve"};
	spec_defaults(&po.spec);
	struct serve_opts so = {0};
	char err[AD_ERRLEN];
	const char *host = "127.0.0.1", *name = NULL, *system = NULL;
	int port = 8080, max_tokens = 512, parallel = 1, queue = 16, embeddings = 0;
	const struct cli_plain plain[] = {
		{.flag = "--host", .val = &host},
		{.flag = "--name", .val = &name},
		{.flag = "--system", .val = &system},
		{.flag = "--port", .num = &port, .lo = 1, .hi = 65535},
		{.flag = "--max-tokens", .num = &max_tokens, .lo = 1, .hi = 1 << 20},
		{.flag = "--parallel", .num = &parallel, .lo = 1, .hi = 64},
		{.flag = "--queue", .num = &queue, .lo = 0, .hi = 4096},
		{.flag = "--embeddings", .on = &embeddings},
		{0},
	};
	const struct cmd_flags flags = {.plain = plain, .flag = serve_flag, .own = &so, .usage = serve_usage};
	int status;
	if (pipe_args(&po, &flags, argc, argv, &status))
		return status;
	const char *be = pipe_backend(po.backend, err);
	if (!be) {
		fprintf(stderr, "anedvd serve: %s\n", err);
		return 2;
	}
	char b_tok[1024], b_ane[1024], b_cpu[1024], b_fe[1024];
	const char *miss = sup_binary(b_tok, sizeof b_tok, "anedvd-tokenizer")                             ? b_tok
	                   : sup_binary(b_cpu, sizeof b_cpu, "anedvd-cpu-worker")                          ? b_cpu
	                   : sup_binary(b_fe, sizeof b_fe, "anedvd-frontend")                              ? b_fe
	                   : (strcmp(be, "exact") && sup_binary(b_ane, sizeof b_ane, "anedvd-ane-worker")) ? b_ane
	                                                                                                   : NULL;
	if (miss) {
		fprintf(stderr, "anedvd serve: %s is missing: build it first\n", miss);
		return 1;
	}
	char model_name[256];
	if (!name) {
		const char *base = strrchr(po.model, '/');
		base = base && base[1] ? base + 1 : po.model;
		snprintf(model_name, sizeof model_name, "%s", base);
		char *dot = strrchr(model_name, '.');
		if (dot && !strcmp(dot, ".gguf"))
			*dot = 0;
		name = model_name;
	}
	const char *wts = pipe_weights_path(po.model, be, po.weights, err);
	if (!wts) {
		fprintf(stderr, "anedvd serve: %s\n", err);
		return 1;
	}
	struct sup *s = sup_new(err);
	if (!s) {
		fprintf(stderr, "anedvd serve: %s\n", err);
		return 1;
	}
	char u_tok[600], u_ane[600], u_eng[600], listen[300], sz[32], th[32], ms[32], mt[32], par[32], qu[32];
	if (so.tok_url)
		snprintf(u_tok, sizeof u_tok, "%s", so.tok_url);
	else
		sup_url(s, "tokenizer", u_tok, sizeof u_tok);
	sup_url(s, "ane-worker", u_ane, sizeof u_ane);
	if (so.eng_url)
		snprintf(u_eng, sizeof u_eng, "%s", so.eng_url);
	else
		sup_url(s, "cpu-worker", u_eng, sizeof u_eng);
	snprintf(listen, sizeof listen, "%s:%d", host, port);
	snprintf(sz, sizeof sz, "%d", po.chunk > 0 ? po.chunk : 64);
	snprintf(th, sizeof th, "%d", po.threads > 0 ? po.threads : 2);
	snprintf(ms, sizeof ms, "%d", po.max_seq > 0 ? po.max_seq : 2048);
	snprintf(mt, sizeof mt, "%d", max_tokens);
	snprintf(par, sizeof par, "%d", parallel);
	snprintf(qu, sizeof qu, "%d", queue);
	status = 1;
	{
		const char *av[] = {b_tok, "--model", po.model, "--listen", u_tok, NULL};
		struct sup_spec sp = {"tokenizer", av, u_tok, sup_health_tok, 1, NULL};
		if (sup_spawn(s, &sp, err))
			goto fail;
	}
	if (strcmp(be, "exact")) {
		const char *av[26] = {b_ane,     "--model", po.model,    "--listen", u_ane,       "--backend", be,
		                      "--chunk", sz,        "--threads", th,         "--weights", wts};
		int k = 13;
		if (po.split)
			av[k++] = "--split";
		char cmb[32];
		pipe_cache_args(&po, av, &k, cmb, sizeof cmb);
		av[k] = NULL;
		struct sup_spec sp = {"ane-worker", av, u_ane, sup_health_ane, 1, sup_finishing_ane};
		if (sup_spawn(s, &sp, err))
			goto fail;
	}
	{
		// no --instance: a restarted cpu-worker names its surfaces with its own pid, so it
		// never meets the dead one's (which the supervisor removes)
		const char *av[36] = {b_cpu, "--model",   po.model, "--listen",   u_eng, "--chunk",
		                      sz,    "--max-seq", ms,       "--parallel", par};
		int k = 11;
		if (strcmp(be, "exact")) {
			av[k++] = "--backend";
			av[k++] = "remote";
			av[k++] = "--ane";
			av[k++] = u_ane;
			av[k++] = "--weights";
			av[k++] = wts;
		} else {
			av[k++] = "--backend";
			av[k++] = "exact";
		}
		if (po.split)
			av[k++] = "--split";
		if (so.cache_mem) {
			av[k++] = "--cache-mem";
			av[k++] = so.cache_mem;
		}
		for (int j = 0; j < po.n_spec_args; j++)
			av[k++] = po.spec_args[j];
		av[k] = NULL;
		struct sup_spec sp = {"cpu-worker", av, u_eng, sup_health_engine, 1, NULL};
		if (sup_spawn(s, &sp, err))
			goto fail;
	}
	{
		const char *av[34 + 2 * SERVE_MAX_ACCESS] = {
			b_fe,  "--listen",   listen, "--tokenizer",  u_tok, "--engine",
			u_eng, "--name",     name,   "--max-tokens", mt,    "--max-seq",
			ms,    "--parallel", par,    "--queue",      qu};
		int k = 17;
		av[k++] = "--model-file"; // its name in GET /props
		av[k++] = po.model;
		if (system) {
			av[k++] = "--system";
			av[k++] = system;
		}
		if (embeddings)
			av[k++] = "--embeddings";
		if (po.no_spec || po.spec.draft == 0)
			av[k++] = "--no-spec"; // what /props says
		for (int j = 0; j < so.n_access; j++)
			av[k++] = so.access[j];
		for (int j = 0; j < so.n_samp; j++)
			av[k++] = so.samp[j];
		char stf[PATH_MAX + 16];
		snprintf(stf, sizeof stf, "%s/status", sup_rundir(s));
		av[k++] = "--status-file";
		av[k++] = stf;
		av[k] = NULL;
		if (so.n_keys) {
			// ANEDVD_API_KEY=<the environment's keys>,<--api-key ...>
			const char *env = getenv("ANEDVD_API_KEY");
			size_t len = strlen("ANEDVD_API_KEY=") + (env ? strlen(env) + 1 : 0) + 1;
			for (int j = 0; j < so.n_keys; j++)
				len += strlen(so.keys[j]) + 1;
			char *kv = malloc(len);
			if (!kv) {
				ad_err(err, "out of memory");
				goto fail;
			}
			strcpy(kv, "ANEDVD_API_KEY=");
			if (env && *env) {
				strcat(kv, env);
				strcat(kv, ",");
			}
			for (int j = 0; j < so.n_keys; j++) {
				strcat(kv, so.keys[j]);
				if (j + 1 < so.n_keys)
					strcat(kv, ",");
			}
			int rc = sup_setenv(s, kv, err);
			free(kv);
			if (rc)
				goto fail;
		}
		struct sup_spec sp = {"frontend", av, listen, health_tcp, 1, NULL};
		if (sup_spawn(s, &sp, err))
			goto fail;
	}
	if (sup_wait_ready(s, "tokenizer", 60000, err) ||
	    (strcmp(be, "exact") && sup_wait_ready(s, "ane-worker", 600000, err)) ||
	    sup_wait_ready(s, "cpu-worker", 600000, err) || sup_wait_ready(s, "frontend", 30000, err)) {
		goto fail;
	}
	fprintf(stderr, "anedvd server listening on http://%s (model %s, backend %s, %s weights)\n", listen, name, be,
	        wts);
	while (!sup_interrupted())
		usleep(100000);
	fprintf(stderr, "anedvd serve: stopping\n");
	status = 0;
	sup_free(s);
	return status;
fail:
	fprintf(stderr, "anedvd serve: %s\n", err);
	sup_free(s);
	return sup_interrupted() ? 130 : status;
}
