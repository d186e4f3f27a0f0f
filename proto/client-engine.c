#include "client-engine.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "common.pb-c.h"
#include "engine.pb-c.h"
#include "rpc.h"

// engine.proto's FinishReason and SpecMode, cast both ways below
#define PIN(a, b) _Static_assert((int)(a) == (int)(b), #a " is " #b)
PIN(ENGC_RUNNING, ANEDVD__FINISH_REASON__FINISH_NONE);
PIN(ENGC_STOP, ANEDVD__FINISH_REASON__FINISH_STOP);
PIN(ENGC_LENGTH, ANEDVD__FINISH_REASON__FINISH_LENGTH);
PIN(ENGC_CANCELLED, ANEDVD__FINISH_REASON__FINISH_CANCELLED);
PIN(ENGC_ERROR, ANEDVD__FINISH_REASON__FINISH_ERROR);

static int
oom(int *code, char *err)
{
	if (code)
		*code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
	return ad_err(err, "out of memory");
}

// call sends body (an EngineRequest's) and returns the EngineReply, or
// NULL with err and *code (proto/rpc.h)
static Anedvd__EngineReply *
call(struct ad_client *c, const ProtobufCMessage *body, int timeout_ms, int *code, char *err)
{
	return ad_rpc_call(c, &ad_rpc_engine, body, timeout_ms, code, err);
}

// a Generate's request_id: unique among this machine's processes and
// their calls (pid, a count, the clock, mixed by splitmix64), never 0
static uint64_t
request_id(void)
{
	static atomic_ullong count;
	uint64_t x = ad_now_ns() ^ (uint64_t)getpid() << 40 ^ atomic_fetch_add(&count, 1) * 0x9e3779b97f4a7c15ull;
	x = (x ^ x >> 30) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ x >> 27) * 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x ? x : 1;
}

int
engc_generate(struct ad_client *c, const struct engc_gen *g, struct engc_started *out, int timeout_ms, int *code,
              char *err)
{
	Anedvd__GenerateRequest gr = ANEDVD__GENERATE_REQUEST__INIT;
	Anedvd__SamplingParams sp = ANEDVD__SAMPLING_PARAMS__INIT;
	gr.prompt = (int32_t *)g->prompt;
	gr.n_prompt = g->n_prompt;
	gr.max_tokens = g->max_tokens;
	if (g->sp) {
		sp.temperature = g->sp->temperature;
		sp.top_k = g->sp->top_k;
		sp.top_p = g->sp->top_p;
		sp.min_p = g->sp->min_p;
		sp.repeat_penalty = g->sp->repeat_penalty;
		sp.repeat_last_n = g->sp->repeat_last_n;
		sp.presence_penalty = g->sp->presence_penalty;
		sp.frequency_penalty = g->sp->frequency_penalty;
		sp.seed = g->sp->seed;
		sp.has_seed = g->sp->has_seed;
		gr.sampling = &sp;
	}
	sp.skip_draws = g->skip_draws;
	if (g->skip_draws)
		gr.sampling = &sp;
	Anedvd__LogitBias *lb = NULL, **plb = NULL;
	if (g->sp && g->sp->n_bias > 0) {
		size_t nb = (size_t)g->sp->n_bias;
		lb = calloc(nb, sizeof *lb);
		plb = calloc(nb, sizeof *plb);
		if (!lb || !plb) {
			free(lb);
			free(plb);
			return oom(code, err);
		}
		for (size_t i = 0; i < nb; i++) {
			anedvd__logit_bias__init(&lb[i]);
			lb[i].id = g->sp->bias[i].id;
			lb[i].bias = g->sp->bias[i].bias;
			plb[i] = &lb[i];
		}
		sp.logit_bias = plb;
		sp.n_logit_bias = nb;
	}
	gr.stop_ids = (int32_t *)g->stop_ids;
	gr.n_stop_ids = g->n_stop;
	gr.session = (char *)(g->session ? g->session : "");
	gr.deadline_ms = g->deadline_ms;
	gr.want_top = g->want_top;
	gr.logprobs = g->logprobs;
	gr.top_logprobs = g->top_logprobs > 0 ? (uint32_t)g->top_logprobs : 0;
	gr.client_pid = g->client_pid > 0 ? (uint32_t)g->client_pid : 0;
	gr.client = (char *)(g->client ? g->client : "");
	gr.lease_ms = g->client ? g->lease_ms : 0;
	gr.grammar = (char *)(g->grammar ? g->grammar : "");
	gr.grammar_lazy = g->grammar_lazy;
	gr.grammar_words = (char **)g->grammar_words;
	gr.n_grammar_words = g->n_grammar_words;
	gr.grammar_tokens = (int32_t *)g->grammar_tokens;
	gr.n_grammar_tokens = g->n_grammar_tokens;
	gr.grammar_replay = g->grammar ? g->grammar_replay : 0;
	gr.speculative = (Anedvd__SpecMode)g->speculative;
	gr.request_id = g->request_id ? g->request_id : request_id();
	Anedvd__EngineReply *r = call(c, &gr.base, timeout_ms, code, err);
	free(lb);
	free(plb);
	if (!r)
		return -1;
	out->job = r->generate->job;
	out->prompt_tokens = r->generate->prompt_tokens;
	out->dropped = r->generate->prompt_tokens_dropped;
	out->reused = r->generate->reused_tokens;
	out->dropped_from = r->generate->dropped_from;
	out->max_tokens = r->generate->max_tokens;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

static int
poll_call(struct ad_client *c, uint64_t job, int ack, uint64_t seen, uint32_t max_wait_ms, uint32_t hold_ms,
          struct engc_poll *out, int timeout_ms, int *code, char *err)
{
	memset(out, 0, sizeof *out);
	Anedvd__PollRequest pr = ANEDVD__POLL_REQUEST__INIT;
	pr.job = job;
	pr.max_wait_ms = max_wait_ms;
	pr.hold_ms = hold_ms; // the worker takes at most max_wait_ms of it
	pr.ack = ack != 0;
	pr.seen = seen;
	Anedvd__EngineReply *r = call(c, &pr.base, timeout_ms + (int)max_wait_ms, code, err);
	if (!r)
		return -1;
	const Anedvd__PollReply *p = r->poll;
	// acknowledging, the events go on from the ones seen (a worker that
	// keeps nothing hands over the same ones while no reply is lost)
	if (ack && p->n_tokens && p->tokens[0]->index != seen) {
		uint32_t first = p->tokens[0]->index;
		anedvd__engine_reply__free_unpacked(r, NULL);
		if (code)
			*code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
		return ad_err(err, "poll of job %llu: the events begin at %u, %llu were seen", (unsigned long long)job,
		              first, (unsigned long long)seen);
	}
	if (p->n_tokens) {
		out->events = calloc(p->n_tokens, sizeof *out->events);
		if (!out->events) {
			anedvd__engine_reply__free_unpacked(r, NULL);
			return ad_err(err, "out of memory");
		}
	}
	for (size_t i = 0; i < p->n_tokens; i++) {
		const Anedvd__TokenEvent *te = p->tokens[i];
		struct engc_event *ev = &out->events[i];
		ev->id = te->id;
		ev->index = te->index;
		ev->draws = te->draws;
		ev->grammar_on = te->grammar_on;
		ev->grammar_from = te->grammar_from;
		ev->n_top = te->n_top < ENGC_TOP ? (int)te->n_top : ENGC_TOP;
		for (int t = 0; t < ev->n_top; t++) {
			ev->top[t].id = te->top[t]->id;
			ev->top[t].logit = te->top[t]->logit;
		}
		ev->has_lp = te->has_logprob;
		ev->lp = te->logprob;
		ev->n_lp = te->n_top_logprobs < SAMPLE_MAX_TOP_LOGPROBS ? (int)te->n_top_logprobs
		                                                        : SAMPLE_MAX_TOP_LOGPROBS;
		for (int t = 0; t < ev->n_lp; t++) {
			ev->lp_top[t].id = te->top_logprobs[t]->id;
			ev->lp_top[t].logit = te->top_logprobs[t]->logprob;
		}
	}
	out->n_events = p->n_tokens;
	out->finish = (enum engc_finish)p->finish;
	if (p->error) {
		out->code = p->error->code;
		snprintf(out->msg, sizeof out->msg, "%s", p->error->message ? p->error->message : "");
	}
	if (p->timings) {
		const Anedvd__Timings *t = p->timings;
		out->timings = (struct gen_timings){
			.queue_ns = t->queue_ns,
			.prefill_ns = t->prefill_ns,
			.decode_ns = t->decode_ns,
			.kernel_ns = t->kernel_ns,
			.round_trips = t->round_trips,
			.ipc_ns = t->ipc_ns,
			.attention_ns = t->attention_ns,
			.sampling_ns = t->sampling_ns,
			.cpu_other_ns = t->cpu_other_ns,
			.moe_ns = t->moe_ns,
			.prefill_tokens = t->prefill_tokens,
			.decode_tokens = t->decode_tokens,
			.cached_tokens = t->cached_tokens,
			.dec_kernel_ns = t->dec_kernel_ns,
			.dec_ipc_ns = t->dec_ipc_ns,
			.dec_attention_ns = t->dec_attention_ns,
			.dec_moe_ns = t->dec_moe_ns,
			.dec_other_ns = t->dec_other_ns,
			.dec_round_trips = t->dec_round_trips,
			.dec_pickup_ns = t->dec_pickup_ns,
			.dec_reply_ns = t->dec_reply_ns,
		};
		struct spec_stats *sp = &out->timings.spec;
		sp->steps = t->spec_steps;
		sp->drafted = t->spec_drafted;
		sp->accepted = t->spec_accepted;
		for (size_t i = 0; i < t->n_spec_by_n; i++)
			if (t->spec_by_n[i]->n <= SPEC_NGRAM_MAX) {
				sp->drafted_n[t->spec_by_n[i]->n] = t->spec_by_n[i]->drafted;
				sp->accepted_n[t->spec_by_n[i]->n] = t->spec_by_n[i]->accepted;
			}
	}
	if (p->cache) {
		const Anedvd__CacheStats *cs = p->cache;
		out->has_cache = 1;
		out->cache = (struct engc_cache){
			.lookups = cs->lookups,
			.hit_tokens = cs->hit_tokens,
			.evictions = cs->evictions,
			.bytes = cs->bytes,
			.limit_bytes = cs->limit_bytes,
			.stored = cs->stored,
			.blocks = cs->blocks,
			.block_tokens = cs->block_tokens,
			.windows_dropped = cs->windows_dropped,
		};
	}
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

int
engc_poll(struct ad_client *c, uint64_t job, uint32_t max_wait_ms, struct engc_poll *out, int timeout_ms, int *code,
          char *err)
{
	return poll_call(c, job, 0, 0, max_wait_ms, 0, out, timeout_ms, code, err);
}

int
engc_poll_ack(struct ad_client *c, uint64_t job, uint64_t seen, uint32_t max_wait_ms, uint32_t hold_ms,
              struct engc_poll *out, int timeout_ms, int *code, char *err)
{
	return poll_call(c, job, 1, seen, max_wait_ms, hold_ms, out, timeout_ms, code, err);
}

void
engc_poll_free(struct engc_poll *p)
{
	free(p->events);
	p->events = NULL;
	p->n_events = 0;
}

int
engc_cancel(struct ad_client *c, uint64_t job, int timeout_ms, int *code, char *err)
{
	Anedvd__CancelRequest cr = ANEDVD__CANCEL_REQUEST__INIT;
	cr.job = job;
	Anedvd__EngineReply *r = call(c, &cr.base, timeout_ms, code, err);
	if (!r)
		return -1;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

int
engc_eval(struct ad_client *c, const int32_t *ids, size_t n, int per_token, int last_only, uint32_t upto_layer,
          float **logits, uint32_t *rows, uint32_t *n_vocab, int timeout_ms, int *code, char *err)
{
	*logits = NULL;
	Anedvd__EvalRequest er = ANEDVD__EVAL_REQUEST__INIT;
	er.ids = (int32_t *)ids;
	er.n_ids = n;
	er.per_token = per_token;
	er.last_only = last_only;
	er.upto_layer = upto_layer;
	Anedvd__EngineReply *r = call(c, &er.base, timeout_ms, code, err);
	if (!r)
		return -1;
	const Anedvd__EvalReply *e = r->eval;
	size_t bytes = (size_t)e->rows * e->n_vocab * sizeof(float);
	if (e->logits.len != bytes) {
		anedvd__engine_reply__free_unpacked(r, NULL);
		return ad_err(err, "engine service: eval reply holds %zu bytes for %u x %u logits", e->logits.len,
		              e->rows, e->n_vocab);
	}
	*logits = malloc(bytes ? bytes : 1);
	if (*logits && bytes)
		memcpy(*logits, e->logits.data, bytes);
	*rows = e->rows;
	*n_vocab = e->n_vocab;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return *logits ? 0 : ad_err(err, "out of memory");
}

int
engc_reset(struct ad_client *c, const char *session, int timeout_ms, int *code, char *err)
{
	Anedvd__ResetRequest rr = ANEDVD__RESET_REQUEST__INIT;
	rr.session = (char *)session;
	Anedvd__EngineReply *r = call(c, &rr.base, timeout_ms, code, err);
	if (!r)
		return -1;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

int
engc_lease(struct ad_client *c, const char *client, uint32_t lease_ms, uint32_t *jobs, int timeout_ms, int *code,
           char *err)
{
	Anedvd__LeaseRequest lr = ANEDVD__LEASE_REQUEST__INIT;
	lr.client = (char *)client;
	lr.lease_ms = lease_ms;
	Anedvd__EngineReply *r = call(c, &lr.base, timeout_ms, code, err);
	if (!r)
		return -1;
	if (jobs)
		*jobs = r->lease->jobs;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

int
engc_embed(struct ad_client *c, const int32_t *const *ids, const size_t *lens, size_t n, uint32_t pooling,
           float **vectors, uint32_t *dims, int timeout_ms, int *code, char *err)
{
	*vectors = NULL;
	*dims = 0;
	Anedvd__EmbedInput *in = calloc(n ? n : 1, sizeof *in), **pin = calloc(n ? n : 1, sizeof *pin);
	if (!in || !pin) {
		free(in);
		free(pin);
		return oom(code, err);
	}
	for (size_t i = 0; i < n; i++) {
		anedvd__embed_input__init(&in[i]);
		in[i].ids = (int32_t *)ids[i];
		in[i].n_ids = lens[i];
		pin[i] = &in[i];
	}
	Anedvd__EmbedRequest er = ANEDVD__EMBED_REQUEST__INIT;
	er.inputs = pin;
	er.n_inputs = n;
	er.pooling = pooling;
	Anedvd__EngineReply *r = call(c, &er.base, timeout_ms, code, err);
	free(in);
	free(pin);
	if (!r)
		return -1;
	const Anedvd__EmbedReply *e = r->embed;
	size_t bytes = n * (size_t)e->dims * sizeof(float);
	int rv = 0;
	if (e->dims == 0 || e->vectors.len != bytes) {
		if (code)
			*code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
		rv = ad_err(err, "engine service: %zu bytes of embeddings for %zu inputs of %u", e->vectors.len, n,
		            e->dims);
	} else if (!(*vectors = malloc(bytes))) {
		rv = oom(code, err);
	} else {
		memcpy(*vectors, e->vectors.data, bytes);
		*dims = e->dims;
	}
	anedvd__engine_reply__free_unpacked(r, NULL);
	return rv;
}

int
engc_run(struct ad_client *c, const struct engc_gen *g, int32_t **ids, size_t *n_ids, enum engc_finish *finish,
         struct engc_started *started, struct gen_timings *timings, int timeout_ms, int *code, char *err)
{
	*ids = NULL;
	*n_ids = 0;
	*finish = ENGC_RUNNING;
	struct engc_started st;
	if (engc_generate(c, g, &st, timeout_ms, code, err))
		return -1;
	if (started)
		*started = st;
	size_t cap = 0;
	for (;;) {
		struct engc_poll p;
		if (engc_poll_ack(c, st.job, *n_ids, 1000, 0, &p, timeout_ms, code, err)) {
			free(*ids);
			*ids = NULL;
			*n_ids = 0;
			return -1;
		}
		if (*n_ids + p.n_events > cap) {
			cap = (*n_ids + p.n_events) * 2;
			int32_t *bigger = realloc(*ids, cap * sizeof **ids);
			if (!bigger) {
				engc_poll_free(&p);
				engc_cancel(c, st.job, timeout_ms, NULL, NULL);
				free(*ids);
				*ids = NULL;
				*n_ids = 0;
				return ad_err(err, "out of memory");
			}
			*ids = bigger;
		}
		for (size_t i = 0; i < p.n_events; i++)
			(*ids)[(*n_ids)++] = p.events[i].id;
		engc_poll_free(&p);
		if (timings)
			*timings = p.timings;
		if (p.finish != ENGC_RUNNING) {
			*finish = p.finish;
			if (p.finish == ENGC_ERROR) {
				if (code)
					*code = p.code;
				ad_err(err, "%s", p.msg);
			}
			return 0;
		}
	}
}

// --- engc_job ------------------------------------------------------------------------------

enum job_state { JOB_NEW, JOB_LIVE, JOB_LOST, JOB_DONE };

struct engc_job {
	struct ad_client *c;
	int timeout_ms;
	uint64_t until_ns; // 0: ENGC_WAIT_MS after the loss
	uint64_t t0_ns;    // created: the deadline's rest counts from here
	uint64_t lost_ns;  // when the engine was first found away (0: it is not)
	struct engc_gen g; // its pointers are the copies below
	struct sample_params sp;
	struct sample_bias *bias;
	int32_t *ids; // the prompt, then every token delivered
	size_t n_prompt, n_del, cap;
	int32_t *stop;
	char *session, *client;
	char *grammar; // and its trigger words and tokens
	char **words;
	int32_t *gtokens;
	enum job_state state;
	uint64_t job;      // the current incarnation's
	uint64_t draws;    // the sampler's, after the last delivered token
	size_t base_index; // tokens delivered before the current incarnation
	int started, replays, cancelled, first_polled;
	int fruitless; // losses in a row with no token delivered between them
	size_t n_del_at_submit;
	struct engc_started info;
	struct gen_timings base, last; // the incarnations before this one; this one's last
	uint32_t cached0;              // the first incarnation's cached_tokens
	char why[AD_ERRLEN];           // why it was lost
};

static char *
dup_str(const char *s, int *bad)
{
	if (!s)
		return NULL;
	char *d = strdup(s);
	if (!d)
		*bad = 1;
	return d;
}

struct engc_job *
engc_job_new(struct ad_client *c, const struct engc_gen *g, int timeout_ms, uint64_t until_ns, char *err)
{
	struct engc_job *j = calloc(1, sizeof *j);
	if (!j)
		return ad_err(err, "out of memory"), NULL;
	j->c = c;
	j->timeout_ms = timeout_ms;
	j->until_ns = until_ns;
	j->t0_ns = ad_now_ns();
	j->g = *g;
	j->n_prompt = g->n_prompt;
	j->cap = g->n_prompt + (g->max_tokens ? g->max_tokens : 1);
	int bad = !(j->ids = malloc(j->cap * sizeof *j->ids));
	if (!bad && g->n_prompt)
		memcpy(j->ids, g->prompt, g->n_prompt * sizeof *j->ids);
	if (g->n_stop && !bad && (j->stop = malloc(g->n_stop * sizeof *j->stop)))
		memcpy(j->stop, g->stop_ids, g->n_stop * sizeof *j->stop);
	else if (g->n_stop)
		bad = 1;
	if (g->sp) {
		j->sp = *g->sp;
		if (g->sp->n_bias > 0) {
			if ((j->bias = malloc((size_t)g->sp->n_bias * sizeof *j->bias)))
				memcpy(j->bias, g->sp->bias, (size_t)g->sp->n_bias * sizeof *j->bias);
			else
				bad = 1;
		}
		j->sp.bias = j->bias;
		j->g.sp = &j->sp;
	}
	j->session = dup_str(g->session, &bad);
	j->client = dup_str(g->client, &bad);
	j->grammar = dup_str(g->grammar, &bad);
	if (g->n_grammar_words && !bad && (j->words = calloc(g->n_grammar_words, sizeof *j->words)))
		for (size_t i = 0; i < g->n_grammar_words; i++)
			j->words[i] = dup_str(g->grammar_words[i], &bad);
	else if (g->n_grammar_words)
		bad = 1;
	if (g->n_grammar_tokens && !bad && (j->gtokens = malloc(g->n_grammar_tokens * sizeof *j->gtokens)))
		memcpy(j->gtokens, g->grammar_tokens, g->n_grammar_tokens * sizeof *j->gtokens);
	else if (g->n_grammar_tokens)
		bad = 1;
	if (bad) {
		engc_job_free(j);
		return ad_err(err, "out of memory"), NULL;
	}
	j->g.prompt = j->ids;
	j->g.stop_ids = j->stop;
	j->g.session = j->session;
	j->g.client = j->client;
	j->g.grammar = j->grammar;
	j->g.grammar_words = (const char *const *)j->words;
	j->g.grammar_tokens = j->gtokens;
	return j;
}

void
engc_job_free(struct engc_job *j)
{
	if (!j)
		return;
	if (j->state == JOB_LIVE)
		engc_job_cancel(j);
	free(j->ids);
	free(j->stop);
	free(j->bias);
	free(j->session);
	free(j->client);
	free(j->grammar);
	for (size_t i = 0; j->words && i < j->g.n_grammar_words; i++)
		free(j->words[i]);
	free(j->words);
	free(j->gtokens);
	free(j);
}

// the engine is away (or lost the job): note when it was first found so
static void
lost(struct engc_job *j, const char *why)
{
	if (j->state == JOB_LIVE)
		j->fruitless = j->n_del > j->n_del_at_submit ? 1 : j->fruitless + 1;
	j->state = JOB_LOST;
	if (!j->lost_ns)
		j->lost_ns = ad_now_ns();
	snprintf(j->why, sizeof j->why, "%s", why);
	// what the lost incarnation did is part of the job's time
	gen_timings_add(&j->base, &j->base, &j->last);
	memset(&j->last, 0, sizeof j->last);
}

static int
past_until(struct engc_job *j, uint64_t now, int *code, char *err)
{
	uint64_t until = j->until_ns ? j->until_ns : j->lost_ns + (uint64_t)ENGC_WAIT_MS * 1000000u;
	if (now < until)
		return 0;
	if (code)
		*code = ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE;
	j->state = JOB_DONE;
	return ad_err(err, "the engine has been unavailable for %llu ms, past the request's deadline (%s)",
	              (unsigned long long)((now - j->lost_ns) / 1000000u), j->why);
}

// (re)submit the job: 0 started, 1 the engine is away or full, -1 failed
static int
submit(struct engc_job *j, uint32_t wait_ms, int *code, char *err)
{
	uint64_t now = ad_now_ns();
	if (wait_ms < 10)
		wait_ms = 10;
	if (j->fruitless >= ENGC_MAX_FRUITLESS) {
		if (code)
			*code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
		j->state = JOB_DONE;
		return ad_err(err,
		              "the engine lost this job %d times in a row without a token in between: the "
		              "request may be what brings it down (%s)",
		              j->fruitless, j->why);
	}
	if (j->lost_ns) {
		if (past_until(j, now, code, err))
			return -1;
		// a worker that is not back yet: Health waits for it (nng dials
		// again every 10 to 200 ms) without queueing a job in a dead socket
		char e[AD_ERRLEN];
		if (ad_rpc_health(j->c, &ad_rpc_engine, NULL, (int)wait_ms, NULL, e) != 0)
			return 1;
	}
	struct engc_gen g = j->g;
	g.prompt = j->ids;
	g.n_prompt = j->n_prompt + j->n_del;
	g.max_tokens = j->g.max_tokens - (uint32_t)j->n_del;
	g.skip_draws = j->draws;
	g.grammar_replay = (uint32_t)j->n_del; // the grammar takes the delivered tokens first
	g.request_id = 0;                      // each incarnation its own: engc_generate draws one
	if (j->g.deadline_ms) {
		uint64_t spent = (now - j->t0_ns) / 1000000u;
		g.deadline_ms = spent < j->g.deadline_ms ? j->g.deadline_ms - (uint32_t)spent : 1;
	}
	struct engc_started st;
	int cd = 0;
	char e[AD_ERRLEN];
	uint64_t t0 = ad_now_ns();
	if (engc_generate(j->c, &g, &st, j->timeout_ms, &cd, e) != 0) {
		if (cd != ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE) {
			if (code)
				*code = cd;
			j->state = JOB_DONE;
			return ad_err(err, "%s", e);
		}
		// away, or full: ask again after a while
		lost(j, e);
		if (past_until(j, ad_now_ns(), code, err))
			return -1;
		uint64_t spent = ad_now_ns() - t0;
		if (spent < (uint64_t)wait_ms * 1000000u)
			ad_sleep_ns((uint64_t)wait_ms * 1000000u - spent);
		return 1;
	}
	if (!j->started) {
		j->info = st;
		// what the engine holds from now on: the prompt as it fitted it
		// (cpu-worker/fit.h) and a reply of its room, so a continued job
		// is fitted again to the same tokens
		if (st.dropped && st.dropped_from + st.dropped <= j->n_prompt) {
			memmove(j->ids + st.dropped_from, j->ids + st.dropped_from + st.dropped,
			        (j->n_prompt - st.dropped_from - st.dropped) * sizeof *j->ids);
			j->n_prompt -= st.dropped;
		}
		if (st.max_tokens && st.max_tokens < j->g.max_tokens)
			j->g.max_tokens = st.max_tokens;
		j->started = 1;
	} else {
		j->replays++;
	}
	j->job = st.job;
	j->state = JOB_LIVE;
	j->lost_ns = 0;
	j->base_index = j->n_del;
	j->n_del_at_submit = j->n_del;
	return 0;
}

int
engc_job_start(struct engc_job *j, uint32_t wait_ms, struct engc_started *info, int *code, char *err)
{
	if (!j->started && j->state != JOB_DONE) {
		int rv = submit(j, wait_ms, code, err);
		if (rv)
			return rv;
	} else if (!j->started) {
		if (code)
			*code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
		return ad_err(err, "the job was not started");
	}
	if (info)
		*info = j->info;
	return 0;
}


// the job's timings so far: every incarnation's, the first one's cached
static void
job_timings(struct engc_job *j, struct gen_timings *out)
{
	gen_timings_add(out, &j->base, &j->last);
	out->cached_tokens = j->replays && j->first_polled ? j->cached0 : j->last.cached_tokens;
	if (out->cached_tokens > j->info.prompt_tokens)
		out->cached_tokens = j->info.prompt_tokens;
}

int
engc_job_poll(struct engc_job *j, uint32_t max_wait_ms, uint32_t hold_ms, struct engc_poll *out, int *code, char *err)
{
	memset(out, 0, sizeof *out);
	if (code)
		*code = ANEDVD__ERROR_CODE__ERROR_NONE;
	if (!j->started || j->state == JOB_DONE) {
		if (code)
			*code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
		return ad_err(err, !j->started ? "the job was not started" : "the job has finished");
	}
	if (j->state == JOB_LOST) {
		if (j->n_del >= j->g.max_tokens) {
			// it was lost with every token delivered: what it ended with is known
			j->state = JOB_DONE;
			out->finish = ENGC_LENGTH;
			job_timings(j, &out->timings);
			return 0;
		}
		int rv = submit(j, max_wait_ms, code, err);
		if (rv < 0)
			return -1;
		out->finish = ENGC_RUNNING;
		job_timings(j, &out->timings);
		return 0;
	}
	int cd = 0;
	char e[AD_ERRLEN];
	// the current incarnation's events delivered: acknowledged
	if (engc_poll_ack(j->c, j->job, j->n_del - j->base_index, max_wait_ms, hold_ms, out, j->timeout_ms, &cd, e) !=
	    0) {
		if (cd == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE) {
			// no answer: a dead worker (then a restarted one's NOT_FOUND
			// usually comes first) or a hung one, whose job is ended
			engc_cancel(j->c, j->job, j->timeout_ms < 1000 ? j->timeout_ms : 1000, NULL, NULL);
			lost(j, e);
		} else if (cd == ANEDVD__ERROR_CODE__ERROR_NOT_FOUND) {
			lost(j, e);
		} else {
			if (code)
				*code = cd;
			return ad_err(err, "%s", e);
		}
		out->finish = ENGC_RUNNING;
		job_timings(j, &out->timings);
		return 0;
	}
	if (j->n_prompt + j->n_del + out->n_events > j->cap) {
		size_t cap = j->n_prompt + 2 * (j->n_del + out->n_events);
		int32_t *ids = realloc(j->ids, cap * sizeof *ids);
		if (!ids) {
			engc_poll_free(out);
			return oom(code, err);
		}
		j->ids = ids;
		j->g.prompt = ids;
		j->cap = cap;
	}
	for (size_t i = 0; i < out->n_events; i++) {
		j->ids[j->n_prompt + j->n_del] = out->events[i].id;
		out->events[i].index = (uint32_t)(j->base_index + out->events[i].index);
		j->draws = out->events[i].draws;
		j->n_del++;
	}
	j->last = out->timings;
	if (j->replays == 0) {
		j->first_polled = 1;
		j->cached0 = out->timings.cached_tokens;
	}
	job_timings(j, &out->timings);
	// a job ended by the engine, not by its caller nor its own fault: the
	// worker is shutting down or its ane-worker is away (ERROR_UNAVAILABLE),
	// a lease that ran out, an abandoned job (cancelled unasked): go on elsewhere
	int again = (out->finish == ENGC_ERROR && out->code == ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE) ||
	            (out->finish == ENGC_CANCELLED && !j->cancelled);
	if (again) {
		lost(j, out->msg);
		out->finish = ENGC_RUNNING;
		out->code = 0;
		out->msg[0] = 0;
	} else if (out->finish != ENGC_RUNNING) {
		j->state = JOB_DONE;
	}
	return 0;
}

void
engc_job_cancel(struct engc_job *j)
{
	j->cancelled = 1;
	if (j->state == JOB_LIVE)
		engc_cancel(j->c, j->job, j->timeout_ms, NULL, NULL);
	j->state = JOB_DONE;
}

int
engc_job_replays(const struct engc_job *j)
{
	return j->replays;
}

int
engc_job_waiting(const struct engc_job *j)
{
	return j->state == JOB_LOST;
}

const int32_t *
engc_job_delivered(const struct engc_job *j, size_t *n)
{
	*n = j->n_del;
	return j->ids + j->n_prompt;
}

uint32_t
engc_frame_left_ms(uint64_t t0_ns)
{
	uint64_t took = ad_now_ns() - t0_ns;
	return took < ENGC_FRAME_NS ? (uint32_t)((ENGC_FRAME_NS - took + 999999u) / 1000000u) : 0;
}
