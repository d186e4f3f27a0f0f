#include "cpu-service.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "common.pb-c.h"
#include "engine.h"
#include "engine.pb-c.h"
#include "grammar.h"
#include "ipc.h"
#include "log.h"
#include "plan.h"
#include "prefix-cache.h"
#include "rpc.h"
#include "surface.h"

// the scheduler's finish reasons are engine.proto's, cast below (its error
// codes and SpecMode are pinned in proto-pins.c)
#define PIN(a, b) _Static_assert((int)(a) == (int)(b), #a " is " #b)
PIN(SCHED_RUNNING, ANEDVD__FINISH_REASON__FINISH_NONE);
PIN(SCHED_STOP, ANEDVD__FINISH_REASON__FINISH_STOP);
PIN(SCHED_LENGTH, ANEDVD__FINISH_REASON__FINISH_LENGTH);
PIN(SCHED_CANCELLED, ANEDVD__FINISH_REASON__FINISH_CANCELLED);
PIN(SCHED_ERROR, ANEDVD__FINISH_REASON__FINISH_ERROR);

// the reply under construction and everything it points to: the
// request's scratch (proto/rpc.h)
struct reply {
	struct ad_rpc_req *q;
	union {
		Anedvd__GenerateReply generate;
		Anedvd__PollReply poll;
		Anedvd__CancelReply cancel;
		Anedvd__EvalReply eval;
		Anedvd__ResetReply reset;
		Anedvd__EmbedReply embed;
		Anedvd__LeaseReply lease;
	} u;
	Anedvd__Timings timings;
	Anedvd__SpecByN by_n[SPEC_NGRAM_MAX + 1], *pby_n[SPEC_NGRAM_MAX + 1];
	Anedvd__CacheStats cache;
	Anedvd__Error job_error;
	struct sched_poll poll;
	Anedvd__TokenEvent *events, **pevents;
	Anedvd__TopToken *tops, **ptops;
	Anedvd__TokenLogprob *lps, **plps;
	float *logits;
	char msg[AD_ERRLEN];
};

static void handle(void *arg, struct ad_rpc_req *q);
static void release(void *scratch);

void
engine_service_init(struct engine_service *svc, struct sched *s, int n_vocab, int n_layer, const char *process)
{
	memset(svc, 0, sizeof *svc);
	svc->s = s;
	svc->n_vocab = n_vocab;
	svc->n_layer = n_layer;
	ad_rpc_server_init(&svc->rpc, &ad_rpc_engine, process ? process : "anedvd-cpu-worker", handle, svc,
	                   sizeof(struct reply), release);
}

static void
fail(struct reply *rp, enum sched_code code, const char *msg)
{
	ad_rpc_fail(rp->q, (int)code, "%s", msg);
}

#define FAIL(...)                                                                                                      \
	do {                                                                                                           \
		fail(__VA_ARGS__);                                                                                     \
		return;                                                                                                \
	} while (0)

// proto3 SamplingParams -> the sampler's; zero means "not given"
static void
sampling_from(const Anedvd__SamplingParams *q, struct sample_params *p)
{
	memset(p, 0, sizeof *p);
	p->top_p = 1;
	p->repeat_penalty = 1;
	if (!q)
		return;
	p->temperature = q->temperature;
	p->top_k = q->top_k;
	p->top_p = q->top_p == 0 ? 1 : q->top_p;
	p->min_p = q->min_p;
	p->repeat_penalty = q->repeat_penalty == 0 ? 1 : q->repeat_penalty;
	p->repeat_last_n = q->repeat_last_n;
	p->presence_penalty = q->presence_penalty;
	p->frequency_penalty = q->frequency_penalty;
	p->seed = q->seed;
	p->has_seed = q->has_seed;
}

static void
do_generate(struct engine_service *svc, const Anedvd__GenerateRequest *q, struct reply *rp)
{
	if (q->n_prompt > INT_MAX || q->n_stop_ids > INT_MAX)
		FAIL(rp, SCHED_EBADREQ, "generate: too many ids");
	if (q->max_tokens > INT_MAX)
		FAIL(rp, SCHED_EBADREQ, "max_tokens: too large");
	struct sched_gen g = {
		.prompt = q->prompt,
		.n_prompt = (int)q->n_prompt,
		.max_tokens = (int)q->max_tokens,
		.stop_ids = q->stop_ids,
		.n_stop = (int)q->n_stop_ids,
		.session = q->session,
		.deadline_ms = q->deadline_ms,
		.want_top = q->want_top,
		.client_pid = svc->local && q->client_pid <= INT_MAX ? (int)q->client_pid : 0,
		.client = q->client,
		.lease_ms = q->lease_ms > INT_MAX ? INT_MAX : (int)q->lease_ms,
		.skip_draws = q->sampling ? q->sampling->skip_draws : 0,
		.speculative = (int)q->speculative,
		.request_id = q->request_id,
	};
	sampling_from(q->sampling, &g.sp);
	if (q->top_logprobs > SCHED_TOP_LOGPROBS)
		FAIL(rp, SCHED_EBADREQ, "top_logprobs: at most 20");
	g.logprobs = q->logprobs;
	g.top_logprobs = (int)q->top_logprobs;
	if (q->grammar && q->grammar[0]) {
		if (q->n_grammar_words > GRAM_MAX_TRIGGERS || q->n_grammar_tokens > GRAM_MAX_TRIGGERS)
			FAIL(rp, SCHED_EBADREQ, "grammar: at most 16 trigger words and 16 trigger tokens");
		g.grammar = q->grammar;
		g.grammar_len = strlen(q->grammar);
		g.grammar_lazy = q->grammar_lazy;
		g.grammar_words = (const char *const *)q->grammar_words;
		g.n_grammar_words = (int)q->n_grammar_words;
		g.grammar_tokens = q->grammar_tokens;
		g.n_grammar_tokens = (int)q->n_grammar_tokens;
		if (q->grammar_replay > q->n_prompt)
			FAIL(rp, SCHED_EBADREQ, "grammar_replay: more than the prompt's tokens");
		g.grammar_replay = (int)q->grammar_replay;
	}
	struct sample_bias *bias = NULL;
	if (q->sampling && q->sampling->n_logit_bias) {
		size_t nb = q->sampling->n_logit_bias;
		if (nb > SAMPLE_MAX_BIAS) {
			snprintf(rp->msg, sizeof rp->msg, "logit_bias: %zu entries, at most %d", nb, SAMPLE_MAX_BIAS);
			FAIL(rp, SCHED_EBADREQ, rp->msg);
		}
		if (!(bias = malloc(nb * sizeof *bias)))
			FAIL(rp, SCHED_EINTERNAL, "out of memory");
		for (size_t i = 0; i < nb; i++) {
			const Anedvd__LogitBias *b = q->sampling->logit_bias[i];
			bias[i] = (struct sample_bias){b ? b->id : 0, b ? b->bias : 0};
		}
		g.sp.bias = bias;
		g.sp.n_bias = (int)nb;
	}
	struct sched_started st;
	enum sched_code code;
	int rv = sched_generate(svc->s, &g, &st, &code, rp->msg);
	free(bias);
	if (rv)
		FAIL(rp, code, rp->msg);
	Anedvd__GenerateReply *r = &rp->u.generate;
	anedvd__generate_reply__init(r);
	r->job = st.job;
	r->prompt_tokens = (uint32_t)st.prompt_tokens;
	r->prompt_tokens_dropped = (uint32_t)st.dropped;
	r->reused_tokens = (uint32_t)st.reused;
	r->dropped_from = (uint32_t)st.dropped_from;
	r->max_tokens = (uint32_t)st.max_tokens;
	rp->q->reply = &r->base;
}

static void
do_poll(struct engine_service *svc, const Anedvd__PollRequest *q, struct reply *rp)
{
	enum sched_code code;
	struct sched_poll *p = &rp->poll;
	const int wait = (int)(q->max_wait_ms > INT_MAX ? INT_MAX : q->max_wait_ms);
	const int hold = (int)(q->hold_ms > INT_MAX ? INT_MAX : q->hold_ms);
	if (q->ack ? sched_poll_ack(svc->s, q->job, q->seen, wait, hold, p, &code, rp->msg)
	           : sched_poll(svc->s, q->job, wait, p, &code, rp->msg))
		FAIL(rp, code, rp->msg);
	size_t n = (size_t)p->n_events, ntop = 0, nlp = 0;
	for (size_t i = 0; i < n; i++) {
		ntop += (size_t)p->events[i].n_top;
		nlp += (size_t)p->events[i].n_lp;
	}
	rp->events = calloc(n ? n : 1, sizeof *rp->events);
	rp->pevents = calloc(n ? n : 1, sizeof *rp->pevents);
	rp->tops = calloc(ntop ? ntop : 1, sizeof *rp->tops);
	rp->ptops = calloc(ntop ? ntop : 1, sizeof *rp->ptops);
	rp->lps = calloc(nlp ? nlp : 1, sizeof *rp->lps);
	rp->plps = calloc(nlp ? nlp : 1, sizeof *rp->plps);
	if (!rp->events || !rp->pevents || !rp->tops || !rp->ptops || !rp->lps || !rp->plps)
		FAIL(rp, SCHED_EINTERNAL, "out of memory");
	size_t k = 0, l = 0;
	for (size_t i = 0; i < n; i++) {
		const struct sched_event *ev = &p->events[i];
		Anedvd__TokenEvent *te = &rp->events[i];
		anedvd__token_event__init(te);
		te->id = ev->id;
		te->index = ev->index;
		te->n_top = (size_t)ev->n_top;
		te->top = rp->ptops + k;
		for (int t = 0; t < ev->n_top; t++, k++) {
			anedvd__top_token__init(&rp->tops[k]);
			rp->tops[k].id = ev->top[t].id;
			rp->tops[k].logit = ev->top[t].logit;
			rp->ptops[k] = &rp->tops[k];
		}
		te->draws = ev->draws;
		te->has_logprob = ev->has_lp;
		te->logprob = ev->lp;
		te->grammar_on = ev->grammar_on;
		te->grammar_from = ev->grammar_from;
		te->n_top_logprobs = (size_t)ev->n_lp;
		te->top_logprobs = rp->plps + l;
		for (int t = 0; t < ev->n_lp; t++, l++) {
			anedvd__token_logprob__init(&rp->lps[l]);
			rp->lps[l].id = ev->lp_top[t].id;
			rp->lps[l].logprob = ev->lp_top[t].logit;
			rp->plps[l] = &rp->lps[l];
		}
		rp->pevents[i] = te;
	}
	Anedvd__Timings *t = &rp->timings;
	anedvd__timings__init(t);
	const struct gen_timings *et = &p->timings;
	t->queue_ns = et->queue_ns;
	t->prefill_ns = et->prefill_ns;
	t->decode_ns = et->decode_ns;
	t->kernel_ns = et->kernel_ns;
	t->round_trips = et->round_trips;
	t->ipc_ns = et->ipc_ns;
	t->attention_ns = et->attention_ns;
	t->sampling_ns = et->sampling_ns;
	t->cpu_other_ns = et->cpu_other_ns;
	t->moe_ns = et->moe_ns;
	t->prefill_tokens = et->prefill_tokens;
	t->decode_tokens = et->decode_tokens;
	t->cached_tokens = et->cached_tokens;
	t->dec_kernel_ns = et->dec_kernel_ns;
	t->dec_ipc_ns = et->dec_ipc_ns;
	t->dec_attention_ns = et->dec_attention_ns;
	t->dec_moe_ns = et->dec_moe_ns;
	t->dec_other_ns = et->dec_other_ns;
	t->dec_round_trips = et->dec_round_trips;
	t->dec_pickup_ns = et->dec_pickup_ns;
	t->dec_reply_ns = et->dec_reply_ns;
	const struct spec_stats *sp = &p->timings.spec;
	t->spec_steps = (uint32_t)sp->steps;
	t->spec_drafted = (uint32_t)sp->drafted;
	t->spec_accepted = (uint32_t)sp->accepted;
	for (int i = 0; i <= SPEC_NGRAM_MAX; i++)
		if (sp->drafted_n[i]) {
			Anedvd__SpecByN *b = &rp->by_n[t->n_spec_by_n];
			anedvd__spec_by_n__init(b);
			b->n = (uint32_t)i;
			b->drafted = (uint32_t)sp->drafted_n[i];
			b->accepted = (uint32_t)sp->accepted_n[i];
			rp->pby_n[t->n_spec_by_n++] = b;
		}
	t->spec_by_n = rp->pby_n;
	Anedvd__PollReply *r = &rp->u.poll;
	anedvd__poll_reply__init(r);
	r->tokens = rp->pevents;
	r->n_tokens = n;
	r->finish = (Anedvd__FinishReason)p->finish;
	r->timings = t;
	if (p->finish != SCHED_RUNNING) {
		struct sched_stats ss;
		sched_stats(svc->s, &ss);
		anedvd__cache_stats__init(&rp->cache);
		rp->cache.lookups = ss.cache.lookups;
		rp->cache.hit_tokens = ss.cache.hit_tokens;
		rp->cache.evictions = ss.cache.evictions;
		rp->cache.bytes = ss.cache.bytes;
		rp->cache.limit_bytes = ss.cache.limit;
		rp->cache.blocks = (uint32_t)ss.cache.blocks;
		rp->cache.block_tokens = (uint32_t)ss.cache.block;
		rp->cache.stored = ss.cache.stored;
		rp->cache.windows_dropped = ss.cache.wdropped;
		r->cache = &rp->cache;
	}
	if (p->finish == SCHED_ERROR || (p->finish == SCHED_CANCELLED && p->msg[0])) {
		anedvd__error__init(&rp->job_error);
		rp->job_error.code = (Anedvd__ErrorCode)p->code;
		rp->job_error.message = p->msg;
		r->error = &rp->job_error;
	}
	rp->q->reply = &r->base;
}

static void
do_cancel(struct engine_service *svc, const Anedvd__CancelRequest *q, struct reply *rp)
{
	enum sched_code code;
	if (sched_cancel(svc->s, q->job, &code, rp->msg))
		FAIL(rp, code, rp->msg);
	anedvd__cancel_reply__init(&rp->u.cancel);
	rp->q->reply = &rp->u.cancel.base;
}

static void
do_lease(struct engine_service *svc, const Anedvd__LeaseRequest *q, struct reply *rp)
{
	enum sched_code code;
	int jobs = 0;
	if (sched_lease(svc->s, q->client, q->lease_ms > INT_MAX ? INT_MAX : (int)q->lease_ms, &jobs, &code, rp->msg))
		FAIL(rp, code, rp->msg);
	anedvd__lease_reply__init(&rp->u.lease);
	rp->u.lease.jobs = (uint32_t)jobs;
	rp->q->reply = &rp->u.lease.base;
}

static void
do_eval(struct engine_service *svc, const Anedvd__EvalRequest *q, struct reply *rp)
{
	if (q->upto_layer > (uint32_t)svc->n_layer) {
		snprintf(rp->msg, sizeof rp->msg, "upto_layer: %u, the model has %d layers", q->upto_layer,
		         svc->n_layer);
		FAIL(rp, SCHED_EBADREQ, rp->msg);
	}
	if (q->n_ids > INT_MAX)
		FAIL(rp, SCHED_EBADREQ, "ids: too many");
	size_t rows = q->last_only ? 1 : q->n_ids;
	if (rows * (size_t)svc->n_vocab * sizeof(float) + 4096 > AD_IPC_MAX_MSG) {
		snprintf(rp->msg, sizeof rp->msg, "eval: %zu rows of %d logits do not fit one message (use last_only)",
		         rows, svc->n_vocab);
		FAIL(rp, SCHED_ETOOLARGE, rp->msg);
	}
	enum sched_code code;
	int r = 0;
	if (sched_eval(svc->s, q->ids, (int)q->n_ids, q->per_token, q->last_only, (int)q->upto_layer, &rp->logits, &r,
	               &code, rp->msg))
		FAIL(rp, code, rp->msg);
	Anedvd__EvalReply *e = &rp->u.eval;
	anedvd__eval_reply__init(e);
	e->rows = (uint32_t)r;
	e->n_vocab = (uint32_t)svc->n_vocab;
	e->logits.data = (uint8_t *)rp->logits; // float32 little-endian: the host's order
	e->logits.len = (size_t)r * svc->n_vocab * sizeof(float);
	rp->q->reply = &e->base;
}

static void
do_embed(struct engine_service *svc, const Anedvd__EmbedRequest *q, struct reply *rp)
{
	if (q->n_inputs < 1 || q->n_inputs > SCHED_EMBED_MAX_INPUTS) {
		snprintf(rp->msg, sizeof rp->msg, "input: %zu inputs (1 to %d)", q->n_inputs, SCHED_EMBED_MAX_INPUTS);
		FAIL(rp, SCHED_EBADREQ, rp->msg);
	}
	if (q->pooling > SCHED_POOL_LAST)
		FAIL(rp, SCHED_EBADREQ, "pooling: 0 the model's, 1 mean, 2 cls or 3 last");
	const int32_t **ids = calloc(q->n_inputs, sizeof *ids);
	int *lens = calloc(q->n_inputs, sizeof *lens);
	if (!ids || !lens) {
		free(ids);
		free(lens);
		FAIL(rp, SCHED_EINTERNAL, "out of memory");
	}
	for (size_t i = 0; i < q->n_inputs; i++) {
		ids[i] = q->inputs[i]->ids;
		lens[i] = q->inputs[i]->n_ids > INT_MAX ? INT_MAX : (int)q->inputs[i]->n_ids;
	}
	enum sched_code code;
	int dims = 0, used = 0;
	int rv = sched_embed(svc->s, ids, lens, (int)q->n_inputs, (int)q->pooling, &rp->logits, &dims, &used, &code,
	                     rp->msg);
	free(ids);
	free(lens);
	if (rv)
		FAIL(rp, code, rp->msg);
	size_t bytes = q->n_inputs * (size_t)dims * sizeof(float);
	if (bytes + 4096 > AD_IPC_MAX_MSG) {
		snprintf(rp->msg, sizeof rp->msg, "embeddings: %zu vectors of %d do not fit one message", q->n_inputs,
		         dims);
		FAIL(rp, SCHED_ETOOLARGE, rp->msg);
	}
	Anedvd__EmbedReply *e = &rp->u.embed;
	anedvd__embed_reply__init(e);
	e->dims = (uint32_t)dims;
	e->pooling = (uint32_t)used;
	e->vectors.data = (uint8_t *)rp->logits; // float32 little-endian: the host's order
	e->vectors.len = bytes;
	rp->q->reply = &e->base;
}

static void
do_reset(struct engine_service *svc, const Anedvd__ResetRequest *q, struct reply *rp)
{
	enum sched_code code;
	if (sched_reset(svc->s, q->session, &code, rp->msg))
		FAIL(rp, code, rp->msg);
	anedvd__reset_reply__init(&rp->u.reset);
	rp->q->reply = &rp->u.reset.base;
}

static void
handle(void *arg, struct ad_rpc_req *q)
{
	struct engine_service *svc = arg;
	struct reply *rp = q->scratch;
	rp->q = q;
	switch (q->method) {
	case ANEDVD__ENGINE_REQUEST__BODY_GENERATE:
		do_generate(svc, (const Anedvd__GenerateRequest *)q->body, rp);
		break;
	case ANEDVD__ENGINE_REQUEST__BODY_POLL:
		do_poll(svc, (const Anedvd__PollRequest *)q->body, rp);
		break;
	case ANEDVD__ENGINE_REQUEST__BODY_CANCEL:
		do_cancel(svc, (const Anedvd__CancelRequest *)q->body, rp);
		break;
	case ANEDVD__ENGINE_REQUEST__BODY_EVAL:
		do_eval(svc, (const Anedvd__EvalRequest *)q->body, rp);
		break;
	case ANEDVD__ENGINE_REQUEST__BODY_RESET:
		do_reset(svc, (const Anedvd__ResetRequest *)q->body, rp);
		break;
	case ANEDVD__ENGINE_REQUEST__BODY_EMBED:
		do_embed(svc, (const Anedvd__EmbedRequest *)q->body, rp);
		break;
	case ANEDVD__ENGINE_REQUEST__BODY_LEASE:
		do_lease(svc, (const Anedvd__LeaseRequest *)q->body, rp);
		break;
	default:
		fail(rp, SCHED_EBADREQ, "the request has no body");
		break;
	}
}

// what the reply pointed to, once packed
static void
release(void *scratch)
{
	struct reply *rp = scratch;
	free(rp->poll.events);
	free(rp->events);
	free(rp->pevents);
	free(rp->tops);
	free(rp->ptops);
	free(rp->lps);
	free(rp->plps);
	free(rp->logits);
}

void
engine_service_handle(void *arg, const uint8_t *req, size_t req_len, uint8_t **out, size_t *out_len)
{
	struct engine_service *svc = arg;
	ad_rpc_serve(&svc->rpc, req, req_len, out, out_len);
}

// --- the whole worker ---------------------------------------------------------------------

struct cpu_worker {
	struct model m;
	struct kernel_backend *kb;
	struct engine *e;
	const struct cpu_vocab_source *vs;
	struct sched_vocab vocab; // vs's (ctx NULL: none)
	struct sched *s;
	struct engine_service svc;
	struct ad_server *srv;
};

static void
worker_free(struct cpu_worker *w)
{
	sched_free(w->s);
	engine_free(w->e);
	if (w->vocab.ctx)
		w->vs->close(w->vocab.ctx);
	if (w->kb)
		w->kb->free(w->kb); // closes the surfaces; the owner unlinks its shared memory
	model_free(&w->m);
	free(w);
}

static void
worker_say(const struct cpu_worker *w, const struct cpu_worker_opts *o, const struct sched_opts *so)
{
	struct engine *e = w->e;
	ad_info("ready on %s (%s, backend %s, chunk %d, context %d, %d in parallel)", o->url, w->m.name, w->kb->name,
	        engine_width(e), engine_max_seq(e), so->parallel);
	// the fp16 cache of one sequence; jobs, kept sessions and Eval each hold one
	double kv_mib = (double)model_kv_bytes_per_pos(&w->m) / 2 * (double)engine_max_seq(e) / (1 << 20);
	ad_info("KV cache %.1f MiB per sequence, at most %d sequences (%.0f MiB)", kv_mib,
	        so->parallel + so->sessions + 1, kv_mib * (double)(so->parallel + so->sessions + 1));
	if (so->cache_mem && engine_kv_window(e) > 0)
		ad_info("prefix cache %.1f MiB (--cache-mem), blocks of %d positions of %zu bytes, of which %zu are the "
		        "windowed layers' (a window of %d), kept only where a later prompt reads them",
		        (double)so->cache_mem / (1 << 20), so->cache_block,
		        engine_kv_row_bytes(e) * (size_t)so->cache_block,
		        engine_kv_part_bytes(e, ENGINE_KV_WINDOWED) * (size_t)so->cache_block, engine_kv_window(e));
	else if (so->cache_mem)
		ad_info("prefix cache %.1f MiB (--cache-mem), blocks of %d positions of %zu bytes",
		        (double)so->cache_mem / (1 << 20), so->cache_block,
		        engine_kv_row_bytes(e) * (size_t)so->cache_block);
	else
		ad_info("prefix cache off (--cache-mem 0)");
	if (engine_state_bytes(e) > 0)
		ad_info("speculative decoding off: %s keeps a recurrent state, which cannot take a rejected draft back",
		        w->m.name);
	else if (so->no_spec)
		ad_info("speculative decoding off unless a request asks (--no-spec or --draft 0)");
	else
		ad_info("speculative decoding: drafts of up to %d tokens found by n-grams of %d down to %d, a column "
		        "costing %s (--draft, --ngram-max, --ngram-min, --draft-cost)",
		        o->spec.draft, o->spec.ngram_max, o->spec.ngram_min,
		        o->spec.col_cost == SPEC_COST_AUTO ? "what the decode calls measure" : "as --draft-cost says");
}

struct cpu_worker *
cpu_worker_start(const struct cpu_worker_opts *o, char *err)
{
	const char *be = o->backend ? o->backend : "emu";
	int remote = strcmp(be, "remote") == 0, exact = strcmp(be, "exact") == 0;
	if (!remote && !exact && (strcmp(be, "emu") || !o->emu_new))
		return ad_err(err, "no kernel backend '%s' here", be), NULL;
	if (remote && !o->ane_url)
		return ad_err(err, "backend remote needs the ane-worker's URL"), NULL;
	struct cpu_worker *w = calloc(1, sizeof *w);
	if (!w)
		return ad_err(err, "out of memory"), NULL;
	if (model_load(&w->m, o->model_path, err)) {
		free(w);
		return NULL;
	}
	if (o->rope)
		w->m.hp.rope = o->rope;
	// the default: the rule of plan.h for the emu (the ane-worker's default
	// on emu; anything else must be told, kb_remote checks it)
	enum ane_wfmt wf = ane_plan_weights_default(&w->m, "emu");
	if (o->weights && ane_wfmt_parse(o->weights, &wf)) {
		ad_err(err, "weights are fp16, int8 or lut4, not '%s'", o->weights);
		goto fail;
	}
	struct kb_opts ko = {
		.weights = (int)wf,
		.width = o->chunk > 0 ? o->chunk : 64,
		.split = o->split,
		.threads = o->threads > 0 ? o->threads : 2,
		.url = o->ane_url,
		.timeout_ms = o->kernel_timeout_ms,
		.deadline_ms = o->kernel_deadline_ms,
		.instance = o->instance ? o->instance : (long)getpid(),
	};
	// a previous incarnation with this instance (killed, so it never
	// unlinked) left its surfaces: they would make surface_create fail
	if (remote) {
		int n = surface_cleanup_pid(ko.instance);
		if (n > 0)
			ad_info("removed %d stale surfaces of instance %ld", n, ko.instance);
	}
	w->kb = remote  ? kb_remote_new(&w->m, &ko, err)
	        : exact ? kb_exact_new(&w->m, &ko, err)
	                : o->emu_new(&w->m, &ko, err);
	if (!w->kb) {
		ad_err_prefix(err, "%s backend", be);
		goto fail;
	}
	int max_seq = o->max_seq;
	if (max_seq == 0) {
		max_seq = 2048;
		if (w->m.hp.n_ctx_train > 1 && w->m.hp.n_ctx_train < max_seq)
			max_seq = (int)w->m.hp.n_ctx_train;
	}
	int cache_block = o->cache_block > 0 ? o->cache_block : SCHED_CACHE_BLOCK;
	// attention on as many threads as the kernels: the ane-worker's wait
	// while this process computes (long prompts, many sequences)
	struct engine_opts eo = {.max_seq = max_seq, .threads = ko.threads, .state_every = cache_block};
	if (!(w->e = engine_new(&w->m, w->kb, &eo, err)))
		goto fail;
	// the warm-up (engine_warm); ANEDVD_WARMUP=0 skips it
	if (ad_env_on("ANEDVD_WARMUP", "warming up")) {
		uint64_t t0 = ad_now_ns();
		if (engine_warm(w->e, err))
			ad_warn("warm-up: %s (going on without)", err);
		else
			ad_debug("warm-up: %.1f ms", (double)(ad_now_ns() - t0) / 1e6);
	}
	struct sched_opts so = {.parallel = o->parallel > 0 ? o->parallel : 4,
	                        .queue = o->queue > 0 ? o->queue : 16,
	                        .sessions = o->sessions > 0 ? o->sessions : 8,
	                        .cache_block = cache_block,
	                        .spec = &o->spec,
	                        .no_spec = o->no_spec || !o->spec.draft};
	// grammars need each token's bytes: the process's vocabulary source (the
	// model's tokenizer, loaded on the first grammar); without one the
	// scheduler refuses them
	if (o->vocab) {
		w->vs = o->vocab;
		w->vocab = o->vocab->open(o->model_path, engine_n_vocab(w->e));
		if (!w->vocab.get) {
			ad_err(err, "out of memory for the grammars' vocabulary");
			goto fail;
		}
		so.vocab = w->vocab;
	}
	so.cache_mem = o->cache_mem_set ? o->cache_mem
	                                : pcache_default_mem(engine_kv_row_bytes(w->e), engine_state_bytes(w->e),
	                                                     engine_max_seq(w->e), so.parallel);
	if (!(w->s = sched_new(w->e, &so, err)))
		goto fail;
	engine_service_init(&w->svc, w->s, engine_n_vocab(w->e), (int)w->m.hp.n_layer,
	                    o->process ? o->process : "anedvd-cpu-worker");
	w->svc.local = strncmp(o->url, "ipc://", 6) == 0 || strncmp(o->url, "inproc://", 9) == 0;
	// a thread per job that may be polling, and a few for the other calls
	if (!(w->srv = ad_server_start(o->url, so.parallel + so.queue + 4, engine_service_handle, &w->svc, err)))
		goto fail;
	worker_say(w, o, &so);
	return w;
fail:
	worker_free(w);
	return NULL;
}

void
cpu_worker_stop(struct cpu_worker *w, uint64_t *jobs, uint64_t *tokens)
{
	if (!w)
		return;
	kb_remote_stop();
	sched_shutdown(w->s);   // jobs end with an error, pollers wake and answer
	ad_server_stop(w->srv); // no new requests; in-flight ones have returned
	struct sched_stats st;
	sched_stats(w->s, &st);
	if (jobs)
		*jobs = st.jobs;
	if (tokens)
		*tokens = st.tokens;
	worker_free(w);
}
