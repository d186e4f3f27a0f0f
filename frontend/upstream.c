// upstream.c - the admission queue, the worker threads and the upstream calls.
//
// A worker runs one generation at a time from start to end: chat template
// and encode on the tokenizer service, Generate on the engine, then Poll
// (long-poll, short wait so a cancel is seen quickly), decode_stream and the
// stop-sequence holdback, until the engine finishes, a stop sequence
// matches, or the client goes away (then Cancel). There are as many workers
// as the engine runs generations at once; requests beyond them wait in the
// queue, and beyond its length are refused.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "common.pb-c.h"
#include "engine.pb-c.h"
#include "fe.h"
#include "ipc.h"
#include "log.h"

#define POLL_WAIT_MS 50

static const struct fe_config *cfg;
static struct ad_client *tok, *eng;
static pthread_t *workers, prober;
static int n_workers;

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct fe_gen *head, *tail;
	int waiting, running, stopping;
} q = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

// the vocabulary's end-of-generation ids, fetched once the tokenizer answers
static struct {
	pthread_mutex_t mu;
	int known;
	int32_t bos, eos, eot;
} vocab = { .mu = PTHREAD_MUTEX_INITIALIZER };

static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t probe_cv = PTHREAD_COND_INITIALIZER;

uint64_t
fe_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// --- engine calls ------------------------------------------------------------------

// eng_call sends q and returns the reply with the wanted body, or NULL with
// err filled and *status the HTTP status the failure deserves
static Anedvd__EngineReply *
eng_call(Anedvd__EngineRequest *rq, Anedvd__EngineReply__BodyCase want, int timeout_ms, int *status, char *err)
{
	static uint64_t next_id;
	rq->id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
	size_t n = anedvd__engine_request__get_packed_size(rq);
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf) {
		*status = 503;
		ad_err(err, "out of memory");
		return NULL;
	}
	anedvd__engine_request__pack(rq, buf);
	uint8_t *reply = NULL;
	size_t reply_len = 0;
	int rv = ad_client_call(eng, buf, n, &reply, &reply_len, timeout_ms, err);
	free(buf);
	if (rv != 0) {
		*status = 503;
		ad_err_prefix(err, "engine unavailable");
		return NULL;
	}
	Anedvd__EngineReply *r = anedvd__engine_reply__unpack(NULL, reply_len, reply);
	free(reply);
	if (!r) {
		*status = 502;
		ad_err(err, "engine: undecodable reply");
		return NULL;
	}
	if (r->error && r->error->code != ANEDVD__ERROR_CODE__ERROR_NONE) {
		switch (r->error->code) {
		case ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST:
		case ANEDVD__ERROR_CODE__ERROR_TOO_LARGE:
		case ANEDVD__ERROR_CODE__ERROR_UNSUPPORTED:
			*status = 400;
			break;
		case ANEDVD__ERROR_CODE__ERROR_NOT_FOUND:
			*status = 404;
			break;
		case ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE:
		case ANEDVD__ERROR_CODE__ERROR_TIMEOUT:
			*status = 503;
			break;
		default:
			*status = 502;
		}
		ad_err(err, "engine: %s", r->error->message ? r->error->message : "error");
		anedvd__engine_reply__free_unpacked(r, NULL);
		return NULL;
	}
	if (r->body_case != want || r->id != rq->id) {
		*status = 502;
		ad_err(err, "engine: reply does not match the request");
		anedvd__engine_reply__free_unpacked(r, NULL);
		return NULL;
	}
	return r;
}

static void
eng_cancel(uint64_t job)
{
	Anedvd__EngineRequest rq = ANEDVD__ENGINE_REQUEST__INIT;
	Anedvd__CancelRequest c = ANEDVD__CANCEL_REQUEST__INIT;
	c.job = job;
	rq.body_case = ANEDVD__ENGINE_REQUEST__BODY_CANCEL;
	rq.cancel = &c;
	int status;
	char err[AD_ERRLEN];
	Anedvd__EngineReply *r = eng_call(&rq, ANEDVD__ENGINE_REPLY__BODY_CANCEL, cfg->timeout_ms, &status, err);
	if (!r)
		ad_warn("cancel job %llu: %s", (unsigned long long)job, err);
	else
		anedvd__engine_reply__free_unpacked(r, NULL);
}

static int
eng_health(uint32_t *pid, int timeout_ms)
{
	Anedvd__EngineRequest rq = ANEDVD__ENGINE_REQUEST__INIT;
	Anedvd__HealthRequest h = ANEDVD__HEALTH_REQUEST__INIT;
	rq.body_case = ANEDVD__ENGINE_REQUEST__BODY_HEALTH;
	rq.health = &h;
	int status;
	char err[AD_ERRLEN];
	Anedvd__EngineReply *r = eng_call(&rq, ANEDVD__ENGINE_REPLY__BODY_HEALTH, timeout_ms, &status, err);
	if (!r)
		return -1;
	*pid = r->health->pid;
	anedvd__engine_reply__free_unpacked(r, NULL);
	return 0;
}

// --- one generation ----------------------------------------------------------------

static int
fail(struct fe_gen *g, int status, const char *msg)
{
	g->r.finish = FE_FINISH_ERROR;
	g->r.status = status;
	snprintf(g->r.err, sizeof g->r.err, "%s", msg);
	return -1;
}

static int
get_vocab(char *err)
{
	pthread_mutex_lock(&vocab.mu);
	int known = vocab.known;
	pthread_mutex_unlock(&vocab.mu);
	if (known)
		return 0;
	struct tokc_vocab v;
	if (tokc_vocab(tok, &v, cfg->timeout_ms, err) != 0)
		return -1;
	pthread_mutex_lock(&vocab.mu);
	vocab.bos = v.bos;
	vocab.eos = v.eos;
	vocab.eot = v.eot;
	vocab.known = 1;
	pthread_mutex_unlock(&vocab.mu);
	return 0;
}

// emit hands released text to the loop (stream) or keeps it (non-stream)
static int
emit(struct fe_gen *g, const char *s, size_t n)
{
	if (n == 0)
		return 0;
	if (g->p.stream) {
		fe_post(g, FE_MSG_TEXT, s, n);
		return 0;
	}
	if (g->len + n + 1 > g->cap) {
		size_t cap = g->cap ? g->cap : 1024;
		while (cap < g->len + n + 1)
			cap *= 2;
		char *t = realloc(g->text, cap);
		if (!t)
			return -1;
		g->text = t;
		g->cap = cap;
	}
	memcpy(g->text + g->len, s, n);
	g->len += n;
	g->text[g->len] = 0;
	return 0;
}

// tokenize renders the prompt and encodes it
static int
tokenize(struct fe_gen *g, int32_t **ids, size_t *n)
{
	char err[AD_ERRLEN];
	uint64_t t0 = fe_now_ns();
	if (get_vocab(err) != 0)
		return fail(g, 503, err);
	if (g->p.api == FE_API_COMPLETIONS) {
		if (tokc_encode(tok, g->p.prompt, g->p.prompt_len, -1, 0, ids, n, cfg->timeout_ms, err) != 0)
			return fail(g, 503, err);
	} else {
		// the server's default system prompt when the request has none
		struct tok_msg *msgs = g->p.msgs;
		size_t nm = g->p.n_msgs;
		struct tok_msg *with = NULL;
		if (cfg->system && cfg->system[0] && (nm == 0 || msgs[0].role != TOK_ROLE_SYSTEM)) {
			with = malloc((nm + 1) * sizeof *with);
			if (!with)
				return fail(g, 503, "out of memory");
			with[0].role = TOK_ROLE_SYSTEM;
			with[0].content = cfg->system;
			memcpy(with + 1, msgs, nm * sizeof *msgs);
			msgs = with;
			nm++;
		}
		char *text = NULL;
		int rv = tokc_chat(tok, msgs, nm, 1, &text, cfg->timeout_ms, err);
		free(with);
		if (rv != 0)
			return fail(g, 503, err);
		rv = tokc_encode(tok, text, strlen(text), -1, 1, ids, n, cfg->timeout_ms, err);
		free(text);
		if (rv != 0)
			return fail(g, 503, err);
	}
	g->r.tokenize_ns = fe_now_ns() - t0;
	fe_metrics_stage(FE_ST_TOKENIZE, g->r.tokenize_ns);
	if (*n == 0) {
		free(*ids);
		*ids = NULL;
		return fail(g, 400, "the prompt is empty after tokenization");
	}
	return 0;
}

static enum fe_finish
map_finish(Anedvd__FinishReason f)
{
	switch (f) {
	case ANEDVD__FINISH_REASON__FINISH_STOP:
		return FE_FINISH_EOS;
	case ANEDVD__FINISH_REASON__FINISH_LENGTH:
		return FE_FINISH_LENGTH;
	case ANEDVD__FINISH_REASON__FINISH_CANCELLED:
		return FE_FINISH_CANCELLED;
	case ANEDVD__FINISH_REASON__FINISH_ERROR:
		return FE_FINISH_ERROR;
	default:
		return FE_FINISH_NONE;
	}
}

static void
take_timings(struct fe_gen *g, const Anedvd__Timings *t)
{
	if (!t)
		return;
	g->r.eng_queue_ns = t->queue_ns;
	g->r.prefill_ns = t->prefill_ns;
	g->r.decode_ns = t->decode_ns;
	g->r.kernel_ns = t->kernel_ns;
	g->r.ipc_ns = t->ipc_ns;
	g->r.attention_ns = t->attention_ns;
	g->r.sampling_ns = t->sampling_ns;
	g->r.cpu_other_ns = t->cpu_other_ns;
	g->r.moe_ns = t->moe_ns;
	g->r.prefill_tokens = t->prefill_tokens;
	g->r.decode_tokens = t->decode_tokens;
}

static int
cancelled(struct fe_gen *g)
{
	return __atomic_load_n(&g->cancelled, __ATOMIC_ACQUIRE) || __atomic_load_n(&q.stopping, __ATOMIC_ACQUIRE);
}

static void
generate(struct fe_gen *g)
{
	char err[AD_ERRLEN];
	int status = 0;
	int32_t *ids = NULL;
	size_t n = 0;
	if (tokenize(g, &ids, &n) != 0)
		return;
	if (cancelled(g)) {
		free(ids);
		g->r.finish = FE_FINISH_CANCELLED;
		return;
	}

	// fit prompt + reply into the context: shorten the reply first, then
	// drop the oldest prompt tokens (never the BOS)
	unsigned max_tokens = g->p.max_tokens;
	size_t first = 0, dropped = 0;
	if (cfg->max_seq > 2) {
		if (n + 1 < cfg->max_seq) {
			if (n + max_tokens + 1 > cfg->max_seq)
				max_tokens = (unsigned)(cfg->max_seq - n - 1);
		} else {
			if (max_tokens > cfg->max_seq - 2)
				max_tokens = cfg->max_seq - 2;
		}
		size_t keep = cfg->max_seq - max_tokens - 1;
		if (n > keep) {
			int has_bos = vocab.bos >= 0 && ids[0] == vocab.bos;
			dropped = n - keep;
			if (has_bos && keep >= 2) {
				memmove(ids + 1, ids + 1 + dropped, (keep - 1) * sizeof *ids);
			} else {
				first = dropped;
			}
			n = keep;
		}
	}

	Anedvd__EngineRequest rq = ANEDVD__ENGINE_REQUEST__INIT;
	Anedvd__GenerateRequest gr = ANEDVD__GENERATE_REQUEST__INIT;
	Anedvd__SamplingParams sp = ANEDVD__SAMPLING_PARAMS__INIT;
	sp.temperature = g->p.temperature;
	sp.top_k = g->p.top_k;
	sp.top_p = g->p.top_p;
	sp.min_p = g->p.min_p;
	sp.repeat_penalty = g->p.repeat_penalty;
	sp.repeat_last_n = 256;
	sp.presence_penalty = g->p.presence_penalty;
	sp.frequency_penalty = g->p.frequency_penalty;
	sp.seed = g->p.seed;
	sp.has_seed = g->p.has_seed;
	int32_t stop_ids[2];
	size_t n_stop = 0;
	if (vocab.eos >= 0)
		stop_ids[n_stop++] = vocab.eos;
	if (vocab.eot >= 0 && vocab.eot != vocab.eos)
		stop_ids[n_stop++] = vocab.eot;
	gr.prompt = ids + first;
	gr.n_prompt = n;
	gr.max_tokens = max_tokens;
	if (cfg->deadline_ms) {
		uint64_t spent = (fe_now_ns() - g->t_admit) / 1000000u;
		gr.deadline_ms = spent < (uint64_t)cfg->deadline_ms ? (uint32_t)(cfg->deadline_ms - spent) : 1;
	}
	// the engine cancels this job if the frontend dies (it cannot tell it)
	gr.client_pid = (uint32_t)getpid();
	gr.sampling = &sp;
	gr.stop_ids = stop_ids;
	gr.n_stop_ids = n_stop;
	rq.body_case = ANEDVD__ENGINE_REQUEST__BODY_GENERATE;
	rq.generate = &gr;
	Anedvd__EngineReply *r = eng_call(&rq, ANEDVD__ENGINE_REPLY__BODY_GENERATE, cfg->timeout_ms, &status, err);
	free(ids);
	if (!r) {
		fail(g, status, err);
		return;
	}
	uint64_t job = r->generate->job;
	g->r.prompt_tokens = r->generate->prompt_tokens ? r->generate->prompt_tokens : (unsigned)n;
	g->r.prompt_dropped = (unsigned)dropped + r->generate->prompt_tokens_dropped;
	anedvd__engine_reply__free_unpacked(r, NULL);
	fe_post(g, FE_MSG_START, NULL, 0);

	struct fe_stop st;
	fe_stop_init(&st, (const char *const *)g->p.stops, g->p.n_stops);
	char pending[4];
	size_t n_pending = 0;
	int first_token = 1;
	for (;;) {
		if (cancelled(g)) {
			eng_cancel(job);
			g->r.finish = FE_FINISH_CANCELLED;
			break;
		}
		if (cfg->deadline_ms && fe_now_ns() - g->t_admit > (uint64_t)cfg->deadline_ms * 1000000u) {
			eng_cancel(job);
			snprintf(err, sizeof err, "the generation ran past its deadline of %d ms", cfg->deadline_ms);
			fail(g, 504, err);
			break;
		}
		Anedvd__EngineRequest pq = ANEDVD__ENGINE_REQUEST__INIT;
		Anedvd__PollRequest pr = ANEDVD__POLL_REQUEST__INIT;
		pr.job = job;
		pr.max_wait_ms = POLL_WAIT_MS;
		pq.body_case = ANEDVD__ENGINE_REQUEST__BODY_POLL;
		pq.poll = &pr;
		Anedvd__EngineReply *p =
		        eng_call(&pq, ANEDVD__ENGINE_REPLY__BODY_POLL, cfg->timeout_ms + POLL_WAIT_MS, &status, err);
		if (!p) {
			fail(g, status, err);
			break;
		}
		Anedvd__PollReply *pl = p->poll;
		take_timings(g, pl->timings);
		enum fe_finish fin = map_finish(pl->finish);
		if (pl->n_tokens && first_token) {
			g->r.ttft_ns = fe_now_ns() - g->t_admit;
			fe_metrics_stage(FE_ST_TTFT, g->r.ttft_ns);
			first_token = 0;
		}
		int32_t *tids = NULL;
		if (pl->n_tokens)
			tids = malloc(pl->n_tokens * sizeof *tids);
		for (size_t i = 0; tids && i < pl->n_tokens; i++)
			tids[i] = pl->tokens[i]->id;
		size_t nt = tids ? pl->n_tokens : 0;
		if (fin == FE_FINISH_ERROR) {
			const char *m = pl->error && pl->error->message ? pl->error->message : "generation failed";
			snprintf(err, sizeof err, "engine: %s", m);
		}
		size_t n_got = pl->n_tokens;
		anedvd__engine_reply__free_unpacked(p, NULL);
		if (n_got && !tids) {
			fail(g, 503, "out of memory");
			eng_cancel(job);
			break;
		}
		int flush = fin != FE_FINISH_NONE;
		g->r.completion_tokens += (unsigned)nt;
		if (nt || flush) {
			char *text = NULL;
			size_t len = 0;
			uint64_t t0 = fe_now_ns();
			int rv = tokc_decode_stream(tok, tids, nt, flush, pending, &n_pending, &text, &len,
			                            cfg->timeout_ms, err);
			g->r.detok_ns += fe_now_ns() - t0;
			free(tids);
			if (rv != 0) {
				fail(g, 503, err);
				eng_cancel(job);
				break;
			}
			size_t ready = 0;
			if (fe_stop_push(&st, text, len, flush, &ready) != 0 || emit(g, st.buf, ready) != 0) {
				free(text);
				fail(g, 503, "out of memory");
				eng_cancel(job);
				break;
			}
			fe_stop_consume(&st, ready);
			free(text);
			if (st.hit >= 0) {
				if (!flush)
					eng_cancel(job);
				g->r.finish = FE_FINISH_STOP_SEQ;
				g->r.stop_index = st.hit;
				break;
			}
		}
		if (fin == FE_FINISH_ERROR) {
			fail(g, 502, err);
			break;
		}
		if (fin != FE_FINISH_NONE) {
			g->r.finish = fin;
			break;
		}
	}
	fe_stop_free(&st);
}

static void *
worker_main(void *arg)
{
	for (;;) {
		pthread_mutex_lock(&q.mu);
		while (!q.head && !q.stopping)
			pthread_cond_wait(&q.cv, &q.mu);
		if (q.stopping) {
			pthread_mutex_unlock(&q.mu);
			return NULL;
		}
		struct fe_gen *g = q.head;
		q.head = g->next;
		if (!q.head)
			q.tail = NULL;
		g->next = NULL;
		g->queued = 0;
		q.waiting--;
		q.running++;
		fe_metrics_queue(q.waiting, q.running);
		pthread_mutex_unlock(&q.mu);

		uint64_t t0 = fe_now_ns();
		g->r.queue_ns = t0 - g->t_admit;
		fe_metrics_stage(FE_ST_QUEUE, g->r.queue_ns);
		if (cancelled(g))
			g->r.finish = FE_FINISH_CANCELLED;
		else if (cfg->deadline_ms && g->r.queue_ns > (uint64_t)cfg->deadline_ms * 1000000u)
			fail(g, 504, "the request waited in the queue past its deadline");
		else
			generate(g);
		g->r.total_ns = fe_now_ns() - g->t_admit;
		if (g->r.finish == FE_FINISH_CANCELLED)
			fe_metrics_cancel();
		fe_metrics_tokens(g->r.prompt_tokens, g->r.completion_tokens);
		if (g->r.prefill_ns)
			fe_metrics_stage(FE_ST_PREFILL, g->r.prefill_ns);
		if (g->r.decode_ns)
			fe_metrics_stage(FE_ST_DECODE, g->r.decode_ns);
		if (g->r.detok_ns)
			fe_metrics_stage(FE_ST_DETOK, g->r.detok_ns);
		fe_metrics_stage(FE_ST_TOTAL, g->r.total_ns);

		pthread_mutex_lock(&q.mu);
		q.running--;
		fe_metrics_queue(q.waiting, q.running);
		pthread_mutex_unlock(&q.mu);
		fe_post(g, FE_MSG_DONE, NULL, 0); // hands the worker's reference back
	}
}

// the health probe: whether each process answers, and its pid (a new pid
// is a restart)
static void *
probe_main(void *arg)
{
	pthread_mutex_lock(&probe_mu);
	while (!q.stopping) {
		pthread_mutex_unlock(&probe_mu);
		uint32_t pid = 0;
		char err[AD_ERRLEN];
		int up = tokc_health(tok, &pid, 1000, err) == 0;
		fe_metrics_upstream("tokenizer", up, pid);
		up = eng_health(&pid, 1000) == 0;
		fe_metrics_upstream("engine", up, pid);
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 2;
		pthread_mutex_lock(&probe_mu);
		if (!q.stopping)
			pthread_cond_timedwait(&probe_cv, &probe_mu, &ts);
	}
	pthread_mutex_unlock(&probe_mu);
	return NULL;
}

int
fe_upstream_start(const struct fe_config *c, char *err)
{
	cfg = c;
	if (!(tok = ad_client_open(c->tok_url, err)))
		return ad_err_prefix(err, "tokenizer");
	if (!(eng = ad_client_open(c->engine_url, err))) {
		ad_client_close(tok);
		return ad_err_prefix(err, "engine");
	}
	workers = calloc((size_t)c->parallel, sizeof *workers);
	if (!workers)
		return ad_err(err, "out of memory");
	for (int i = 0; i < c->parallel; i++) {
		if (pthread_create(&workers[i], NULL, worker_main, NULL) != 0)
			return ad_err(err, "could not start worker threads");
		n_workers++;
	}
	if (pthread_create(&prober, NULL, probe_main, NULL) != 0)
		return ad_err(err, "could not start the health probe");
	return 0;
}

void
fe_upstream_stop(void)
{
	pthread_mutex_lock(&q.mu);
	q.stopping = 1;
	pthread_cond_broadcast(&q.cv);
	pthread_mutex_unlock(&q.mu);
	pthread_mutex_lock(&probe_mu);
	pthread_cond_broadcast(&probe_cv);
	pthread_mutex_unlock(&probe_mu);
	for (int i = 0; i < n_workers; i++)
		pthread_join(workers[i], NULL);
	pthread_join(prober, NULL);
	free(workers);
	ad_client_close(tok);
	ad_client_close(eng);
}

int
fe_admit(struct fe_gen *g)
{
	pthread_mutex_lock(&q.mu);
	if (q.waiting + q.running >= cfg->parallel + cfg->queue) {
		pthread_mutex_unlock(&q.mu);
		return -1;
	}
	g->t_admit = fe_now_ns();
	g->queued = 1;
	g->next = NULL;
	if (q.tail)
		q.tail->next = g;
	else
		q.head = g;
	q.tail = g;
	q.waiting++;
	fe_metrics_queue(q.waiting, q.running);
	pthread_cond_signal(&q.cv);
	pthread_mutex_unlock(&q.mu);
	return 0;
}

int
fe_unqueue(struct fe_gen *g)
{
	pthread_mutex_lock(&q.mu);
	if (!g->queued) {
		pthread_mutex_unlock(&q.mu);
		return 0;
	}
	struct fe_gen **pp = &q.head, *prev = NULL;
	while (*pp && *pp != g) {
		prev = *pp;
		pp = &(*pp)->next;
	}
	if (*pp) {
		*pp = g->next;
		if (q.tail == g)
			q.tail = prev;
		q.waiting--;
	}
	g->queued = 0;
	fe_metrics_queue(q.waiting, q.running);
	pthread_mutex_unlock(&q.mu);
	return 1;
}

void
fe_queue_state(int *waiting, int *running)
{
	pthread_mutex_lock(&q.mu);
	*waiting = q.waiting;
	*running = q.running;
	pthread_mutex_unlock(&q.mu);
}
