#include "engine-client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.pb-c.h"
#include "engine.pb-c.h"

// call sends q and returns the unpacked reply, or NULL with err and *code
// filled (transport failure, undecodable reply, error reply, wrong body)
static Anedvd__EngineReply *
call(struct ad_client *c, Anedvd__EngineRequest *q, Anedvd__EngineReply__BodyCase want, int timeout_ms, int *code,
     char *err)
{
	static uint64_t next_id;
	q->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
	if (code)
		*code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
	size_t n = anedvd__engine_request__get_packed_size(q);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf) {
		ad_err(err, "out of memory");
		return NULL;
	}
	anedvd__engine_request__pack(q, buf);
	uint8_t *reply = NULL;
	size_t reply_len = 0;
	int rv = ad_client_call(c, buf, n, &reply, &reply_len, timeout_ms, err);
	free(buf);
	if (rv != 0) {
		if (code)
			*code = ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE;
		ad_err_prefix(err, "engine service");
		return NULL;
	}
	Anedvd__EngineReply *r = anedvd__engine_reply__unpack(NULL, reply_len, reply);
	free(reply);
	if (!r) {
		ad_err(err, "engine service: undecodable reply");
		return NULL;
	}
	if (r->error && r->error->code != ANEDVD__ERROR_CODE__ERROR_NONE) {
		if (code)
			*code = r->error->code;
		ad_err(err, "engine service: %s", r->error->message);
		anedvd__engine_reply__free_unpacked(r, NULL);
		return NULL;
	}
	if (r->body_case != want || r->id != q->id) {
		ad_err(err, "engine service: reply does not match the request");
		anedvd__engine_reply__free_unpacked(r, NULL);
		return NULL;
	}
	if (code)
		*code = ANEDVD__ERROR_CODE__ERROR_NONE;
	return r;
}

int
engc_generate(struct ad_client *c, const struct engc_gen *g, struct engc_started *out, int timeout_ms, int *code,
              char *err)
{
	Anedvd__EngineRequest q = ANEDVD__ENGINE_REQUEST__INIT;
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
	gr.stop_ids = (int32_t *)g->stop_ids;
	gr.n_stop_ids = g->n_stop;
	gr.session = (char *)(g->session ? g->session : "");
	gr.deadline_ms = g->deadline_ms;
	gr.want_top = g->want_top;
	gr.client_pid = g->client_pid > 0 ? (uint32_t)g->client_pid : 0;
	gr.grammar = (char *)(g->grammar ? g->grammar : "");
	gr.grammar_lazy = g->grammar_lazy;
	gr.grammar_words = (char **)g->grammar_words;
	gr.n_grammar_words = g->n_grammar_words;
	gr.grammar_tokens = (int32_t *)g->grammar_tokens;
	gr.n_grammar_tokens = g->n_grammar_tokens;
	q.body_case = ANEDVD__ENGINE_REQUEST__BODY_GENERATE;
	q.generate = &gr;
	Anedvd__EngineReply *r = call(c, &q, ANEDVD__ENGINE_REPLY__BODY_GENERATE, timeout_ms, code, err);
	if (!r)
		return -1;
	out->job = r->generate->job;
	out->prompt_tokens = r->generate->prompt_tokens;
	out->dropped = r->generate->prompt_tokens_dropped;
	out->reused = r->generate->reused_tokens;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

int
engc_poll(struct ad_client *c, uint64_t job, uint32_t max_wait_ms, struct engc_poll *out, int timeout_ms, int *code,
          char *err)
{
	memset(out, 0, sizeof *out);
	Anedvd__EngineRequest q = ANEDVD__ENGINE_REQUEST__INIT;
	Anedvd__PollRequest pr = ANEDVD__POLL_REQUEST__INIT;
	pr.job = job;
	pr.max_wait_ms = max_wait_ms;
	q.body_case = ANEDVD__ENGINE_REQUEST__BODY_POLL;
	q.poll = &pr;
	Anedvd__EngineReply *r = call(c, &q, ANEDVD__ENGINE_REPLY__BODY_POLL, timeout_ms + (int)max_wait_ms, code, err);
	if (!r)
		return -1;
	const Anedvd__PollReply *p = r->poll;
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
		ev->grammar_on = te->grammar_on;
		ev->grammar_from = te->grammar_from;
		ev->n_top = te->n_top < ENGC_TOP ? (int)te->n_top : ENGC_TOP;
		for (int t = 0; t < ev->n_top; t++) {
			ev->top[t].id = te->top[t]->id;
			ev->top[t].logit = te->top[t]->logit;
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
		out->timings = (struct engc_timings){
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
		};
	}
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
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
	Anedvd__EngineRequest q = ANEDVD__ENGINE_REQUEST__INIT;
	Anedvd__CancelRequest cr = ANEDVD__CANCEL_REQUEST__INIT;
	cr.job = job;
	q.body_case = ANEDVD__ENGINE_REQUEST__BODY_CANCEL;
	q.cancel = &cr;
	Anedvd__EngineReply *r = call(c, &q, ANEDVD__ENGINE_REPLY__BODY_CANCEL, timeout_ms, code, err);
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
	Anedvd__EngineRequest q = ANEDVD__ENGINE_REQUEST__INIT;
	Anedvd__EvalRequest er = ANEDVD__EVAL_REQUEST__INIT;
	er.ids = (int32_t *)ids;
	er.n_ids = n;
	er.per_token = per_token;
	er.last_only = last_only;
	er.upto_layer = upto_layer;
	q.body_case = ANEDVD__ENGINE_REQUEST__BODY_EVAL;
	q.eval = &er;
	Anedvd__EngineReply *r = call(c, &q, ANEDVD__ENGINE_REPLY__BODY_EVAL, timeout_ms, code, err);
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
	Anedvd__EngineRequest q = ANEDVD__ENGINE_REQUEST__INIT;
	Anedvd__ResetRequest rr = ANEDVD__RESET_REQUEST__INIT;
	rr.session = (char *)session;
	q.body_case = ANEDVD__ENGINE_REQUEST__BODY_RESET;
	q.reset = &rr;
	Anedvd__EngineReply *r = call(c, &q, ANEDVD__ENGINE_REPLY__BODY_RESET, timeout_ms, code, err);
	if (!r)
		return -1;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

int
engc_health(struct ad_client *c, struct engc_health *h, int timeout_ms, int *code, char *err)
{
	Anedvd__EngineRequest q = ANEDVD__ENGINE_REQUEST__INIT;
	Anedvd__HealthRequest hr = ANEDVD__HEALTH_REQUEST__INIT;
	q.body_case = ANEDVD__ENGINE_REQUEST__BODY_HEALTH;
	q.health = &hr;
	Anedvd__EngineReply *r = call(c, &q, ANEDVD__ENGINE_REPLY__BODY_HEALTH, timeout_ms, code, err);
	if (!r)
		return -1;
	memset(h, 0, sizeof *h);
	snprintf(h->process, sizeof h->process, "%s", r->health->process);
	h->pid = r->health->pid;
	h->uptime_ms = r->health->uptime_ms;
	h->requests = r->health->requests;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

int
engc_run(struct ad_client *c, const struct engc_gen *g, int32_t **ids, size_t *n_ids, enum engc_finish *finish,
         struct engc_started *started, struct engc_timings *timings, int timeout_ms, int *code, char *err)
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
		if (engc_poll(c, st.job, 1000, &p, timeout_ms, code, err)) {
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
