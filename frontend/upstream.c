// upstream.c - the admission queue, the worker threads and the upstream calls.
//
// A worker runs one generation at a time from start to end: chat template
// and encode on the tokenizer service, Generate on the engine, then Poll
// (long-poll, short wait so a cancel is seen quickly), decode_stream and the
// stop-sequence holdback, until the engine finishes, a stop sequence
// matches, or the client goes away (then Cancel). There are as many workers
// as the engine runs generations at once; requests beyond them wait in the
// queue, and beyond its length are refused.
//
// Crashes. Each choice is an engc_job (proto/client-engine.h): when the cpu-worker
// dies or restarts, the job goes on on the restarted one from the tokens
// this process already has (prompt + delivered, the sampler's draws), so the
// stop holdback, the decode_stream state, the logprob offsets here carry on
// as if nothing happened and the client sees one reply. Only an engine
// still away at the request's deadline ends it, with 503 (the dialect's
// overloaded error); a request that arrives while the engine is away waits
// for it the same way. Tokenizer calls are idempotent: one in flight when
// the tokenizer dies is sent again by nng to the restarted service (within
// --timeout-ms). This process holds a lease on its engine jobs, renewed
// every FE_LEASE_RENEW_MS, so that a crash of the frontend itself leaves no
// job running for longer than FE_LEASE_MS, on any engine URL.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client-tokenizer.h"
#include "clock.h"
#include "common.pb-c.h"
#include "client-engine.h"
#include "fe.h"
#include "ipc.h"
#include "log.h"

#define POLL_WAIT_MS 50

static const struct fe_config *cfg;
static struct ad_client *tok, *eng;
static pthread_t *workers, prober, leaser;
static int n_workers;

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct fe_gen *head, *tail;
	int waiting, running, stopping;
} q = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

// the vocabulary's size and end-of-generation ids, fetched once the
// tokenizer answers, and the bytes of the ids logprobs have reported
static struct {
	pthread_mutex_t mu;
	int known;
	int32_t n, bos, eos, eot;
	int32_t eog[TOKC_MAX_EOG]; // the tokenizer's stop set
	int n_eog;
	int thinks;   // the chat template names <think> (think.c)
	char **bytes; // n entries, NULL until fetched; set once, never changed
	uint32_t *blen;
} vocab = {.mu = PTHREAD_MUTEX_INITIALIZER};

static pthread_mutex_t probe_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t probe_cv = PTHREAD_COND_INITIALIZER;

uint64_t
fe_now_ns(void)
{
	return ad_now_ns();
}

// --- engine calls ------------------------------------------------------------------

// the HTTP status an engine's ErrorCode deserves
static int
eng_status(int code)
{
	switch (code) {
	case ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST:
	case ANEDVD__ERROR_CODE__ERROR_TOO_LARGE:
	case ANEDVD__ERROR_CODE__ERROR_UNSUPPORTED:
		return 400;
	case ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE:
		return 503;
	case ANEDVD__ERROR_CODE__ERROR_TIMEOUT:
		return 504;
	default:
		return 502;
	}
}

// the lease this frontend holds on the engine's jobs: renewed every
// FE_LEASE_RENEW_MS for FE_LEASE_MS, so that a frontend that dies leaves no
// job running for longer than that, even on a tcp:// engine where its pid
// means nothing to the worker
#define FE_LEASE_MS 800
#define FE_LEASE_RENEW_MS 200
static char lease_client[64];

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
	struct tokc_vocab_texts vt = {0};
	if (tokc_vocab_texts(tok, &v, &vt, cfg->timeout_ms, err) != 0)
		return -1;
	int thinks = fe_think_model(vt.chat_template);
	tokc_vocab_texts_free(&vt);
	if (v.n_vocab < 1)
		return ad_err(err, "tokenizer: a vocabulary of %d", (int)v.n_vocab);
	char **bytes = calloc((size_t)v.n_vocab, sizeof *bytes);
	uint32_t *blen = calloc((size_t)v.n_vocab, sizeof *blen);
	if (!bytes || !blen) {
		free(bytes);
		free(blen);
		return ad_err(err, "out of memory");
	}
	pthread_mutex_lock(&vocab.mu);
	if (vocab.known) { // another thread was first
		pthread_mutex_unlock(&vocab.mu);
		free(bytes);
		free(blen);
		return 0;
	}
	vocab.n = v.n_vocab;
	vocab.bytes = bytes;
	vocab.blen = blen;
	vocab.bos = v.bos;
	vocab.eos = v.eos;
	vocab.eot = v.eot;
	memcpy(vocab.eog, v.eog, sizeof vocab.eog);
	vocab.n_eog = v.n_eog;
	vocab.thinks = thinks;
	vocab.known = 1;
	pthread_mutex_unlock(&vocab.mu);
	return 0;
}

int
fe_model_thinks(void)
{
	pthread_mutex_lock(&vocab.mu);
	int t = vocab.known && vocab.thinks;
	pthread_mutex_unlock(&vocab.mu);
	return t;
}

int
fe_n_vocab(void)
{
	pthread_mutex_lock(&vocab.mu);
	int n = vocab.known ? vocab.n : -1;
	pthread_mutex_unlock(&vocab.mu);
	return n;
}

const char *
fe_token_bytes(int32_t id, size_t *len)
{
	const char *s = NULL;
	*len = 0;
	pthread_mutex_lock(&vocab.mu);
	if (vocab.known && id >= 0 && id < vocab.n && vocab.bytes[id]) {
		s = vocab.bytes[id];
		*len = vocab.blen[id];
	}
	pthread_mutex_unlock(&vocab.mu);
	return s;
}

struct ad_client *
fe_tok_client(void)
{
	return tok;
}

int
fe_prompt_text(const struct fe_params *p, char **text, char *format, char *err)
{
	// the server's default system prompt when the request has none
	struct tok_msg *msgs = p->msgs;
	size_t nm = p->n_msgs;
	struct tok_msg *with = NULL;
	if (cfg->system && cfg->system[0] && (nm == 0 || msgs[0].role != TOK_ROLE_SYSTEM)) {
		with = malloc((nm + 1) * sizeof *with);
		if (!with)
			return ad_err(err, "out of memory");
		with[0] = (struct tok_msg){.role = TOK_ROLE_SYSTEM, .content = cfg->system};
		memcpy(with + 1, msgs, nm * sizeof *msgs);
		msgs = with;
		nm++;
	}
	*text = NULL;
	struct tokc_chat_opts o = {
		.tools = p->tools_json,
		.enable_thinking = p->thinking == FE_THINKING_ON    ? 1
	                           : p->thinking == FE_THINKING_OFF ? 0
	                                                            : -1,
		.kwargs = p->template_kwargs,
	};
	int rv = tokc_chat_with(tok, msgs, nm, 1, &o, text, format, format ? 16 : 0, cfg->timeout_ms, err);
	free(with);
	return rv;
}

int
fe_prompt_ids(const struct fe_params *p, int32_t **ids, size_t *n, int *think_open, char *format, char *err)
{
	if (think_open)
		*think_open = 0;
	if (format)
		format[0] = 0;
	if (get_vocab(err) != 0)
		return -1;
	if (p->api == FE_API_COMPLETIONS && p->prompt_ids) { // given as ids: as they are
		if (!(*ids = malloc(p->n_prompt_ids * sizeof **ids)))
			return ad_err(err, "out of memory"), -1;
		memcpy(*ids, p->prompt_ids, p->n_prompt_ids * sizeof **ids);
		*n = p->n_prompt_ids;
		return 0;
	}
	if (p->api == FE_API_COMPLETIONS)
		return tokc_encode(tok, p->prompt, p->prompt_len, -1, 0, ids, n, cfg->timeout_ms, err);
	char *text = NULL;
	int rv = fe_prompt_text(p, &text, format, err);
	if (rv != 0)
		return rv;
	if (think_open)
		*think_open = fe_think_open(text);
	rv = tokc_encode(tok, text, strlen(text), -1, 1, ids, n, cfg->timeout_ms, err);
	free(text);
	return rv;
}

// tokenize renders the prompt and encodes it; format gets the tool-call
// markup the prompt asks for (16 bytes)
static int
tokenize(struct fe_gen *g, int32_t **ids, size_t *n, char *format)
{
	char err[AD_ERRLEN];
	uint64_t t0 = fe_now_ns();
	int rv = fe_prompt_ids(&g->p, ids, n, &g->think_open, format, err);
	if (rv != 0) // a conversation the template refused is the client's error
		return fail(g, rv == TOKC_BAD_REQUEST ? 400 : 503, err);
	// chat replies of a thinking model are split (think.c), unless asked not to
	g->think = g->p.api != FE_API_COMPLETIONS && g->p.api != FE_API_RESPONSES && !g->p.keep_thinking &&
	           fe_model_thinks();
	if (g->p.echo && g->p.prompt_ids && !g->p.echo_text &&
	    tokc_decode(tok, *ids, *n, &g->p.echo_text, &g->p.echo_len, cfg->timeout_ms, err) != 0) {
		free(*ids);
		*ids = NULL;
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
map_finish(enum engc_finish f)
{
	switch (f) {
	case ENGC_STOP:
		return FE_FINISH_EOS;
	case ENGC_LENGTH:
		return FE_FINISH_LENGTH;
	case ENGC_CANCELLED:
		return FE_FINISH_CANCELLED;
	case ENGC_ERROR:
		return FE_FINISH_ERROR;
	default:
		return FE_FINISH_NONE;
	}
}

static void
take_timings(struct fe_gen *g, const struct gen_timings *t)
{
	g->r.eng = *t;
}

static int
cancelled(struct fe_gen *g)
{
	return __atomic_load_n(&g->cancelled, __ATOMIC_ACQUIRE) || __atomic_load_n(&q.stopping, __ATOMIC_ACQUIRE);
}

// --- the choices ---------------------------------------------------------------------

void
fe_choices_free(struct fe_gen *g)
{
	for (int i = 0; i < FE_MAX_N; i++) {
		free(g->ch[i].text);
		free(g->ch[i].reasoning);
		free(g->ch[i].lp);
		fe_calls_free(g->ch[i].calls, g->ch[i].n_calls);
		g->ch[i].text = NULL;
		g->ch[i].reasoning = NULL;
		g->ch[i].lp = NULL;
		g->ch[i].calls = NULL;
		g->ch[i].n_calls = 0;
	}
	free(g->emb);
	g->emb = NULL;
	fe_calls_free(g->scalls, g->n_scalls);
	g->scalls = NULL;
	g->n_scalls = 0;
}

const char *
fe_choice_text(const struct fe_gen *g, int i, size_t *len)
{
	if (i == 0) {
		*len = g->len;
		return g->text;
	}
	*len = g->ch[i].len;
	return g->ch[i].text;
}

const char *
fe_choice_reasoning(const struct fe_gen *g, int i, size_t *len)
{
	*len = g->ch[i].rlen;
	return g->ch[i].reasoning ? g->ch[i].reasoning : "";
}

static int
grow(char **s, size_t *len, size_t *cap, const char *t, size_t n)
{
	if (*len + n + 1 > *cap) {
		size_t c = *cap ? *cap : 1024;
		while (c < *len + n + 1)
			c *= 2;
		char *x = realloc(*s, c);
		if (!x)
			return -1;
		*s = x;
		*cap = c;
	}
	memcpy(*s + *len, t, n);
	*len += n;
	(*s)[*len] = 0;
	return 0;
}

// what the worker keeps per choice while it runs
struct run {
	struct engc_job *job;
	int live; // the engine job has not finished
	struct fe_stop st;
	char pending[4]; // decode_stream's unfinished UTF-8
	size_t n_pending;
	uint32_t produced; // bytes of the tokens so far: the next token's offset
	uint32_t released; // bytes of text handed out (or scanned for tool calls)
	size_t decoded;    // bytes decode_stream has given so far
	// tool calls: the text from trig_at on is calls (their markup)
	int tools; // the reply is scanned for calls
	int trig_known;
	int forced; // the grammar writes calls from the first byte: the markup is never content
	uint32_t trig_at;
	const char *const *words; // a lazy grammar's trigger words: text that may begin one is held back
	int n_words;
	char *hold; // that text
	size_t n_hold, cap_hold;
	char *pre; // text after the trigger before the first call (shown if no call comes)
	size_t n_pre, cap_pre;
	struct fe_scan scan;
	int n_calls, done_calls;
	struct fe_call cur; // a stream's call in progress (its id and name)
	struct fe_gen *g;
	int index;
	struct fe_think th; // a thinking model's reply: where the thinking ends
};

static int emit_part(struct fe_gen *g, int i, struct run *r, int part, const char *s, size_t n, int last);

struct emit_ctx {
	struct fe_gen *g;
	int i;
	struct run *r;
	int last;
};

static int
emit_cb(void *arg, int part, const char *s, size_t n)
{
	struct emit_ctx *e = arg;
	return emit_part(e->g, e->i, e->r, part, s, n, 0);
}

// emit hands released text of choice i on: through the thinking split when
// the reply has one (released counts the text before it, which is what the
// logprob offsets measure)
static int
emit(struct fe_gen *g, int i, struct run *r, const char *s, size_t n, int last)
{
	if (!g->think)
		return emit_part(g, i, r, FE_PART_CONTENT, s, n, last);
	struct emit_ctx e = {g, i, r, last};
	r->released += (uint32_t)n;
	if (fe_think_push(&r->th, s, n, last, emit_cb, &e) != 0)
		return -1;
	return last ? emit_part(g, i, r, FE_PART_CONTENT, "", 0, 1) : 0; // the last logprob tokens
}

// emit_part hands a piece of choice i to the loop (stream: with the logprob
// tokens that start inside the text released so far; all of them at the
// end) or keeps it (non-stream)
static int
emit_part(struct fe_gen *g, int i, struct run *r, int part, const char *s, size_t n, int last)
{
	struct fe_choice *c = &g->ch[i];
	if (!g->think)
		r->released += (uint32_t)n;
	if (!g->p.stream) {
		if (n == 0)
			return 0;
		if (part == FE_PART_REASONING)
			return grow(&c->reasoning, &c->rlen, &c->rcap, s, n);
		return i == 0 ? grow(&g->text, &g->len, &g->cap, s, n) : grow(&c->text, &c->len, &c->cap, s, n);
	}
	// a stream keeps only the logprob tokens not sent yet
	size_t k = 0;
	while (k < c->n_lp && (last || c->lp[k].offset < r->released))
		k++;
	if (n == 0 && k == 0)
		return 0;
	struct fe_chunk ck = {.index = i, .text = s, .len = n, .lp = c->lp, .n_lp = k, .part = part};
	if (g->p.n <= 1 && !g->p.logprobs && part == FE_PART_CONTENT)
		fe_post(g, FE_MSG_TEXT, s, n);
	else
		fe_post_chunk(g, &ck);
	if (k) {
		memmove(c->lp, c->lp + k, (c->n_lp - k) * sizeof *c->lp);
		c->n_lp -= k;
	}
	return 0;
}

// --- tool calls -------------------------------------------------------------------

static int
buf_add(char **b, size_t *n, size_t *cap, const char *s, size_t k)
{
	return grow(b, n, cap, s, k);
}

static void
sink_start(void *ctx, const char *name)
{
	struct run *r = ctx;
	struct fe_gen *g = r->g;
	struct fe_choice *c = &g->ch[r->index];
	r->n_pre = 0; // the markup before the first call is not content
	if (r->n_calls >= FE_MAX_CALLS) {
		r->n_calls++;
		return;
	}
	struct fe_call k = {0};
	fe_call_id(g->p.call_ids, k.id, sizeof k.id, k.item, sizeof k.item);
	snprintf(k.name, sizeof k.name, "%s", name);
	if (g->p.stream) {
		r->cur = k;
		struct fe_chunk ck = {
			.index = r->index, .text = "", .len = 0, .call = r->n_calls + 1, .start = &r->cur};
		fe_post_chunk(g, &ck);
	} else {
		if (!c->calls && !(c->calls = calloc(FE_MAX_CALLS, sizeof *c->calls)))
			return;
		c->calls[c->n_calls++] = k;
	}
	r->n_calls++;
}

static void
sink_args(void *ctx, const char *s, size_t n)
{
	struct run *r = ctx;
	struct fe_gen *g = r->g;
	struct fe_choice *c = &g->ch[r->index];
	if (r->n_calls == 0 || r->n_calls > FE_MAX_CALLS || n == 0)
		return;
	if (g->p.stream) {
		struct fe_chunk ck = {.index = r->index, .text = s, .len = n, .call = r->n_calls};
		fe_post_chunk(g, &ck);
	} else if (c->calls && c->n_calls == r->n_calls) {
		struct fe_call *k = &c->calls[c->n_calls - 1];
		grow(&k->args, &k->len, &k->cap, s, n);
	}
}

static void
sink_end(void *ctx)
{
	struct run *r = ctx;
	struct fe_choice *c = &r->g->ch[r->index];
	if (r->n_calls == 0 || r->n_calls > FE_MAX_CALLS)
		return;
	r->done_calls++;
	if (c->calls && c->n_calls == r->n_calls)
		c->calls[c->n_calls - 1].done = 1;
}

static const struct fe_scan_sink SINK = {sink_start, sink_args, sink_end, NULL};

// how many bytes at the end of s[0..n) may begin a trigger word
static size_t
word_prefix(const struct run *r, const char *s, size_t n)
{
	size_t best = 0;
	for (int w = 0; w < r->n_words; w++) {
		size_t wl = strlen(r->words[w]);
		for (size_t k = wl - 1 < n ? wl - 1 : n; k > best; k--)
			if (!memcmp(s + n - k, r->words[w], k)) {
				best = k;
				break;
			}
	}
	return best;
}

// route hands released text of a choice with tool calls on: before the
// trigger it is content (emit; in a lazy grammar's wait, held back while it
// may begin a trigger word), from the trigger on it goes through the call
// scanner. last: the choice ended (everything held is content then).
static int
route(struct fe_gen *g, int i, struct run *r, const char *s, size_t n, int last)
{
	if (!r->tools)
		return emit(g, i, r, s, n, last);
	struct fe_scan_sink k = SINK;
	k.ctx = r;
	// everything routed so far plus what is held: the held text starts at
	// released (emit and the scanner move released on)
	if (r->n_hold + n && grow(&r->hold, &r->n_hold, &r->cap_hold, s, n))
		return -1;
	size_t content = r->n_hold;
	if (r->trig_known)
		content = r->trig_at > r->released ? (size_t)(r->trig_at - r->released) : 0;
	if (content > r->n_hold)
		content = r->n_hold;
	if (!r->trig_known && !last) // wait: keep what may begin a trigger word
		content -= word_prefix(r, r->hold, content);
	if (content) {
		if (emit(g, i, r, r->hold, content, 0))
			return -1;
		memmove(r->hold, r->hold + content, r->n_hold - content);
		r->n_hold -= content;
	}
	if (r->trig_known && r->n_hold) {
		if (r->n_calls == 0 && buf_add(&r->pre, &r->n_pre, &r->cap_pre, r->hold, r->n_hold))
			return -1;
		r->released += (uint32_t)r->n_hold;
		fe_scan_push(&r->scan, r->hold, r->n_hold, &k);
		r->n_hold = 0;
	}
	if (!last)
		return 0;
	if (r->n_calls == 0 && r->n_pre && r->forced) {
		// a forced call cut before its name: the call of the one tool it
		// could be with the arguments it has (none), else nothing
		const char *only = g->p.tool_choice == FE_TC_NAMED ? g->p.tool_name
		                   : g->p.n_tools == 1             ? g->p.tools[0].name
		                                                   : NULL;
		r->n_pre = 0;
		if (only)
			sink_start(r, only);
	}
	if (r->n_calls == 0 && r->n_pre) { // markup with no call in it: it was text after all
		size_t np = r->n_pre;
		r->n_pre = 0;
		r->released -= (uint32_t)np;
		return emit(g, i, r, r->pre, np, 1);
	}
	return emit(g, i, r, "", 0, 1);
}

// the bytes of every id of these events are known to fe_token_bytes after this
static int
fetch_bytes(const struct engc_poll *pl, char *err)
{
	size_t n = 0;
	for (size_t i = 0; i < pl->n_events; i++)
		n += 1 + (size_t)pl->events[i].n_lp;
	int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
	if (!ids)
		return ad_err(err, "out of memory");
	size_t m = 0;
	for (size_t i = 0; i < pl->n_events; i++) {
		const struct engc_event *te = &pl->events[i];
		for (int t = 0; t <= te->n_lp; t++) {
			int32_t id = t == 0 ? te->id : te->lp_top[t - 1].id;
			size_t len;
			if (id >= 0 && id < vocab.n && !fe_token_bytes(id, &len))
				ids[m++] = id;
		}
	}
	int rv = 0;
	if (m) {
		char **b = NULL;
		size_t *len = malloc(m * sizeof *len);
		if (!len || tokc_token_bytes(tok, ids, m, &b, len, cfg->timeout_ms, err) != 0) {
			free(len);
			free(ids);
			return len ? -1 : ad_err(err, "out of memory");
		}
		pthread_mutex_lock(&vocab.mu);
		for (size_t i = 0; i < m; i++) {
			if (!vocab.bytes[ids[i]]) {
				vocab.bytes[ids[i]] = b[i];
				vocab.blen[ids[i]] = (uint32_t)len[i];
			} else {
				free(b[i]);
			}
		}
		pthread_mutex_unlock(&vocab.mu);
		free(b);
		free(len);
	}
	free(ids);
	return rv;
}

// keep the logprobs of these events in choice c, with their offsets
static int
take_logprobs(struct fe_choice *c, struct run *r, const struct engc_poll *pl)
{
	for (size_t i = 0; i < pl->n_events; i++) {
		const struct engc_event *te = &pl->events[i];
		if (c->n_lp == c->cap_lp) {
			size_t cap = c->cap_lp ? 2 * c->cap_lp : 64;
			struct fe_lp_tok *t = realloc(c->lp, cap * sizeof *t);
			if (!t)
				return -1;
			c->lp = t;
			c->cap_lp = cap;
		}
		struct fe_lp_tok *t = &c->lp[c->n_lp++];
		memset(t, 0, sizeof *t);
		t->id = te->id;
		t->logprob = te->has_lp ? te->lp : 0;
		t->offset = r->produced;
		for (int k = 0; k < te->n_lp && k < FE_MAX_TOP_LOGPROBS; k++) {
			t->top[k].id = te->lp_top[k].id;
			t->top[k].logprob = te->lp_top[k].logit;
			t->n_top++;
		}
		size_t len = 0;
		fe_token_bytes(te->id, &len);
		r->produced += (uint32_t)len;
	}
	return 0;
}

static void
cancel_live(struct run *runs, int n)
{
	for (int i = 0; i < n; i++)
		if (runs[i].live) {
			engc_job_cancel(runs[i].job);
			runs[i].live = 0;
		}
}

// the seed of choice i: the request's for choice 0 (so n = 1 and choice 0 of
// n agree), mixed with i for the others
static uint64_t
choice_seed(uint64_t seed, int i)
{
	return i == 0 ? seed : seed ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
}

// one poll of choice i (hold_ms: engc_frame_left_ms); 1 while it runs, 0
// when it ended, -1 when the whole generation ends (g->r says why). A job
// the engine lost is continued by engc_job on the restarted engine: this
// sees one stream of tokens.
static int
poll_choice(struct fe_gen *g, int i, struct run *r, int wait_ms, uint32_t hold_ms, int *first_token)
{
	char err[AD_ERRLEN];
	int code = 0;
	struct fe_choice *c = &g->ch[i];
	struct engc_poll pl;
	int replays = engc_job_replays(r->job);
	if (engc_job_poll(r->job, (uint32_t)wait_ms, hold_ms, &pl, &code, err) != 0) {
		r->live = 0;
		return fail(g, eng_status(code), err);
	}
	if (engc_job_replays(r->job) > replays)
		fe_metrics_replay();
	if (i == 0)
		take_timings(g, &pl.timings);
	if (pl.has_cache) {
		struct fe_cache_stats st = {pl.cache.lookups, pl.cache.hit_tokens,     pl.cache.evictions,
		                            pl.cache.bytes,   pl.cache.limit_bytes,    pl.cache.blocks,
		                            pl.cache.stored,  pl.cache.windows_dropped};
		// each choice's final poll: its own cached tokens
		fe_metrics_cache(&st, pl.timings.cached_tokens);
	}
	enum fe_finish fin = map_finish(pl.finish);
	if (fin != FE_FINISH_NONE) {
		r->live = 0;
		fe_metrics_spec(&pl.timings.spec);
	}
	for (size_t k = 0; k < pl.n_events; k++)
		if (pl.events[k].grammar_on && !r->trig_known) { // a lazy grammar took over here
			r->trig_known = 1;
			r->trig_at = pl.events[k].grammar_from;
		}
	if (pl.n_events && *first_token) {
		g->r.ttft_ns = fe_now_ns() - g->t_admit;
		fe_metrics_stage(FE_ST_TTFT, g->r.ttft_ns);
		*first_token = 0;
	}
	if (g->p.logprobs && pl.n_events && (fetch_bytes(&pl, err) != 0 || take_logprobs(c, r, &pl) != 0)) {
		engc_poll_free(&pl);
		return fail(g, 503, err[0] ? err : "out of memory");
	}
	int32_t *tids = NULL;
	if (pl.n_events)
		tids = malloc(pl.n_events * sizeof *tids);
	for (size_t k = 0; tids && k < pl.n_events; k++)
		tids[k] = pl.events[k].id;
	size_t nt = tids ? pl.n_events : 0;
	if (fin == FE_FINISH_ERROR) {
		snprintf(err, sizeof err, "engine: %.*s", (int)sizeof err - 9,
		         pl.msg[0] ? pl.msg : "generation failed");
		code = pl.code;
	}
	size_t n_got = pl.n_events;
	engc_poll_free(&pl);
	if (n_got && !tids)
		return fail(g, 503, "out of memory");
	int flush = fin != FE_FINISH_NONE;
	unsigned counted = (unsigned)nt;
	if (nt || flush) {
		char *text = NULL;
		size_t len = 0;
		char pending0[4];
		size_t n_pending0 = r->n_pending, decoded0 = r->decoded;
		memcpy(pending0, r->pending, sizeof pending0);
		uint64_t t0 = fe_now_ns();
		int rv = tokc_decode_stream(tok, tids, nt, flush, r->pending, &r->n_pending, &text, &len,
		                            cfg->timeout_ms, err);
		g->r.detok_ns += fe_now_ns() - t0;
		if (rv != 0) {
			free(tids);
			return fail(g, 503, err);
		}
		r->decoded += len;
		size_t ready = 0;
		if (fe_stop_push(&r->st, text, len, flush, &ready) != 0) {
			free(tids);
			free(text);
			return fail(g, 503, "out of memory");
		}
		int hit = r->st.hit >= 0;
		if (hit) {
			// the tokens after the stop sequence are not part of the reply
			uint32_t end = r->released + (uint32_t)ready;
			while (c->n_lp && c->lp[c->n_lp - 1].offset >= end)
				c->n_lp--;
			// nor of its usage: count up to the token that completed the
			// match, whatever the batches the engine's tokens came in
			size_t match_end = end + strlen(g->p.stops[r->st.hit]);
			for (size_t k = 1; nt > 1 && k <= nt; k++) {
				char *t = NULL;
				size_t tl = 0;
				if (tokc_decode_stream(tok, tids + k - 1, 1, 0, pending0, &n_pending0, &t, &tl,
				                       cfg->timeout_ms, err) != 0)
					break; // the whole batch stays counted
				free(t);
				decoded0 += tl;
				if (decoded0 >= match_end) {
					counted = (unsigned)k;
					break;
				}
			}
		}
		free(tids);
		tids = NULL;
		c->completion_tokens += counted;
		g->r.completion_tokens += counted;
		if (route(g, i, r, r->st.buf, ready, flush || hit) != 0) {
			free(text);
			return fail(g, 503, "out of memory");
		}
		fe_stop_consume(&r->st, ready);
		free(text);
		if (hit) {
			if (r->live)
				engc_job_cancel(r->job);
			r->live = 0;
			c->finish = FE_FINISH_STOP_SEQ;
			c->stop_index = r->st.hit;
			return 0;
		}
	}
	if (fin == FE_FINISH_ERROR)
		return fail(g, code == ANEDVD__ERROR_CODE__ERROR_TIMEOUT ? 504 : 502, err);
	if (fin == FE_FINISH_CANCELLED) {
		g->r.finish = FE_FINISH_CANCELLED;
		return -1;
	}
	if (fin != FE_FINISH_NONE) {
		// a reply that ended (the grammar or a stop token) after tool calls
		c->finish = fin == FE_FINISH_EOS && r->done_calls > 0 ? FE_FINISH_TOOLS : fin;
		return 0;
	}
	return 1;
}

// the id of one control token for a grammar's token element (-1: the text
// is not one control token)
static int32_t
special_token(void *ctx, const char *text)
{
	(void)ctx;
	char err[AD_ERRLEN];
	int32_t *ids = NULL;
	size_t n = 0, len = 0;
	if (tokc_encode(tok, text, strlen(text), 0, 1, &ids, &n, cfg->timeout_ms, err) != 0)
		return -1;
	int32_t id = n == 1 ? ids[0] : -1;
	free(ids);
	if (id < 0)
		return -1;
	char **b = NULL;
	size_t bl = 0;
	if (tokc_token_bytes(tok, &id, 1, &b, &bl, cfg->timeout_ms, err) != 0)
		return -1;
	len = bl;
	free(b[0]);
	free(b);
	return len == 0 ? id : -1; // a control token adds no text
}

static void
generate(struct fe_gen *g)
{
	char err[AD_ERRLEN];
	int32_t *ids = NULL;
	size_t n = 0;
	char format[16] = "";
	if (tokenize(g, &ids, &n, format) != 0)
		return;
	if (cancelled(g)) {
		free(ids);
		g->r.finish = FE_FINISH_CANCELLED;
		return;
	}
	// the grammar: the request's own, an answer's schema, the tool calls in
	// the markup the prompt asks for
	struct fe_gram gram;
	if (fe_gram_build(&g->p, format, special_token, NULL, &gram, err) != 0) {
		free(ids);
		fail(g, 400, err);
		return;
	}

	// the cpu-worker fits the prompt and the reply into its context
	// (cpu-worker/fit.h): the whole prompt and max_tokens go as asked
	unsigned max_tokens = g->p.max_tokens;

	struct sample_params sp;
	memset(&sp, 0, sizeof sp);
	sp.temperature = g->p.temperature;
	sp.top_k = g->p.top_k;
	sp.top_p = g->p.top_p;
	sp.min_p = g->p.min_p;
	sp.repeat_penalty = g->p.repeat_penalty;
	sp.repeat_last_n = 256;
	sp.presence_penalty = g->p.presence_penalty;
	sp.frequency_penalty = g->p.frequency_penalty;
	sp.has_seed = g->p.has_seed;
	struct sample_bias *bias = NULL;
	if (g->p.n_bias) {
		if (!(bias = calloc(g->p.n_bias, sizeof *bias))) {
			free(ids);
			fe_gram_free(&gram);
			fail(g, 503, "out of memory");
			return;
		}
		for (size_t i = 0; i < g->p.n_bias; i++)
			bias[i] = (struct sample_bias){g->p.bias[i].id, g->p.bias[i].bias};
		sp.bias = bias;
		sp.n_bias = (int)g->p.n_bias;
	}
	// the tokenizer's end-of-generation ids, then the request's own
	int32_t stop_ids[TOKC_MAX_EOG + FE_MAX_STOP_IDS];
	size_t n_stop = 0;
	for (int i = 0; i < vocab.n_eog; i++)
		stop_ids[n_stop++] = vocab.eog[i];
	for (size_t i = 0; i < g->p.n_stop_ids; i++)
		stop_ids[n_stop++] = g->p.stop_ids[i];
	struct engc_gen eg = {
		.prompt = ids,
		.n_prompt = n,
		.max_tokens = max_tokens,
		.sp = &sp,
		.stop_ids = stop_ids,
		.n_stop = n_stop,
		.logprobs = g->p.logprobs,
		.top_logprobs = g->p.top_logprobs,
		// the engine cancels this job once the frontend is gone: its pid on
		// an ipc:// engine, the lease on any
		.client_pid = (int)getpid(),
		.client = lease_client,
		.lease_ms = FE_LEASE_MS,
		.grammar = gram.text,
		.grammar_lazy = gram.lazy,
		.grammar_words = gram.words,
		.n_grammar_words = (size_t)gram.n_words,
		.grammar_tokens = gram.tokens,
		.n_grammar_tokens = (size_t)gram.n_tokens,
		.speculative = g->p.speculative,
	};
	// an engine that is away (crashed, restarting) is waited for until the
	// request's deadline; without one, for ENGC_WAIT_MS
	uint64_t until = cfg->deadline_ms ? g->t_admit + (uint64_t)cfg->deadline_ms * 1000000u : 0;

	// n choices are n jobs on the same prompt: the engine's scheduler
	// decodes them together in one batch
	int nc = g->p.n >= 1 && g->p.n <= FE_MAX_N ? g->p.n : 1;
	struct run runs[FE_MAX_N];
	memset(runs, 0, sizeof runs);
	int started = 0, ok = 1;
	for (int i = 0; i < nc && ok; i++) {
		sp.seed = choice_seed(g->p.seed, i);
		if (cfg->deadline_ms) {
			uint64_t spent = (fe_now_ns() - g->t_admit) / 1000000u;
			eg.deadline_ms = spent < (uint64_t)cfg->deadline_ms ? (uint32_t)(cfg->deadline_ms - spent) : 1;
		}
		if (!(runs[i].job = engc_job_new(eng, &eg, cfg->timeout_ms, until, err))) {
			fail(g, 503, err);
			ok = 0;
			break;
		}
		runs[i].g = g;
		runs[i].index = i;
		runs[i].tools = fe_wants_calls(&g->p) && gram.text;
		runs[i].trig_known = runs[i].tools && !gram.lazy; // calls (or an answer) from the first byte
		runs[i].forced = runs[i].tools && gram.forced;
		runs[i].words = gram.words;
		runs[i].n_words = gram.n_words;
		fe_scan_init(&runs[i].scan);
		fe_stop_init(&runs[i].st, (const char *const *)g->p.stops, g->p.n_stops);
		fe_think_init(&runs[i].th, g->think_open);
		started++;
		struct engc_started info;
		int code = 0, rv;
		while ((rv = engc_job_start(runs[i].job, POLL_WAIT_MS, &info, &code, err)) == 1)
			if (cancelled(g))
				break;
		if (rv == 1) {
			g->r.finish = FE_FINISH_CANCELLED;
			ok = 0;
		} else if (rv < 0) {
			fail(g, eng_status(code), err);
			ok = 0;
		} else {
			runs[i].live = 1;
			if (i == 0) {
				g->r.prompt_tokens = info.prompt_tokens ? info.prompt_tokens : (unsigned)n;
				g->r.prompt_dropped = info.dropped;
			}
		}
	}
	free(ids);
	free(bias);
	if (!ok) {
		fe_gram_free(&gram);
		cancel_live(runs, started);
		for (int i = 0; i < started; i++) {
			fe_stop_free(&runs[i].st);
			engc_job_free(runs[i].job);
		}
		return;
	}
	fe_post(g, FE_MSG_START, NULL, 0);

	int first_token = 1, end = 0;
	// a frame begins as the long poll of a round that brought tokens comes
	// back with them; the next round's long poll holds the new ones for
	// the rest of it
	uint32_t hold = 0;
	for (unsigned round = 0; !end; round++) {
		uint64_t r1 = 0;
		unsigned got0 = g->r.completion_tokens;
		if (cancelled(g)) {
			g->r.finish = FE_FINISH_CANCELLED;
			break;
		}
		if (cfg->deadline_ms && fe_now_ns() - g->t_admit > (uint64_t)cfg->deadline_ms * 1000000u) {
			int away = 0;
			for (int i = 0; i < nc; i++)
				away |= runs[i].live && engc_job_waiting(runs[i].job);
			if (away) {
				snprintf(err, sizeof err,
				         "the engine has been unavailable (restarting), past the request's "
				         "deadline of %d ms",
				         cfg->deadline_ms);
				fail(g, 503, err);
			} else {
				snprintf(err, sizeof err, "the generation ran past its deadline of %d ms",
				         cfg->deadline_ms);
				fail(g, 504, err);
			}
			break;
		}
		// the first live choice of the round long-polls; the others, decoded
		// in the same steps, are read without waiting
		int live = 0;
		for (int k = 0; k < nc && !end; k++) {
			int i = (int)((round + (unsigned)k) % (unsigned)nc);
			if (!runs[i].live)
				continue;
			int rv = poll_choice(g, i, &runs[i], live ? 0 : POLL_WAIT_MS, live ? 0 : hold, &first_token);
			if (!live)
				r1 = ad_now_ns();
			live++;
			if (rv < 0)
				end = 1;
		}
		if (live == 0)
			break;
		// a frame's tokens in one event per choice
		hold = g->r.completion_tokens > got0 ? engc_frame_left_ms(r1) : 0;
	}
	cancel_live(runs, nc);
	for (int i = 0; i < nc; i++) {
		fe_stop_free(&runs[i].st);
		free(runs[i].hold);
		free(runs[i].pre);
		engc_job_free(runs[i].job);
	}
	fe_gram_free(&gram);
	if (g->r.finish == FE_FINISH_NONE) {
		g->r.finish = g->ch[0].finish;
		g->r.stop_index = g->ch[0].stop_index;
	}
}
// embeddings: encode the texts (the model's BOS, no special-token parsing),
// one Embed call for every input. The call is idempotent: when the worker
// dies under it, nng sends it again to the restarted one (common/ipc.h)
static void
embed(struct fe_gen *g)
{
	char err[AD_ERRLEN];
	size_t n = g->p.n_inputs;
	uint64_t t0 = fe_now_ns();
	if (get_vocab(err) != 0) {
		fail(g, 503, err);
		return;
	}
	int32_t **own = calloc(n, sizeof *own);
	const int32_t **in = calloc(n, sizeof *in);
	size_t *lens = calloc(n, sizeof *lens);
	if (!own || !in || !lens) {
		fail(g, 503, "out of memory");
		goto out;
	}
	unsigned tokens = 0;
	for (size_t i = 0; i < n; i++) {
		if (g->p.emb_text && g->p.emb_text[i]) {
			size_t m = 0;
			const char *t = g->p.emb_text[i];
			if (tokc_encode(tok, t, strlen(t), -1, 0, &own[i], &m, cfg->timeout_ms, err) != 0) {
				fail(g, 503, err);
				goto out;
			}
			if (m == 0) {
				snprintf(err, sizeof err, "input[%zu]: no tokens", i);
				fail(g, 400, err);
				goto out;
			}
			in[i] = own[i];
			lens[i] = m;
		} else {
			in[i] = g->p.emb_ids[i];
			lens[i] = g->p.emb_len[i];
		}
		if (lens[i] > cfg->max_seq) {
			snprintf(err, sizeof err, "input[%zu]: %zu tokens, the context holds %u", i, lens[i],
			         cfg->max_seq);
			fail(g, 400, err);
			goto out;
		}
		tokens += (unsigned)lens[i];
	}
	g->r.tokenize_ns = fe_now_ns() - t0;
	if (cancelled(g)) {
		g->r.finish = FE_FINISH_CANCELLED;
		goto out;
	}
	uint64_t t1 = fe_now_ns();
	// one call for the whole request, which the engine runs a kernel call
	// per turn between the generations: it may take a while
	int wait = cfg->deadline_ms ? cfg->deadline_ms : 600000;
	if (wait < cfg->timeout_ms)
		wait = cfg->timeout_ms;
	float *vec = NULL;
	uint32_t dims = 0;
	int code = 0;
	if (engc_embed(eng, in, lens, n, 0, &vec, &dims, wait, &code, err) != 0) {
		fail(g, eng_status(code), err);
		goto out;
	}
	g->r.eng.prefill_ns = fe_now_ns() - t1;
	if (g->p.dimensions && g->p.dimensions != (long)dims) {
		snprintf(err, sizeof err, "'dimensions': this model's embeddings have %u dimensions, not %ld", dims,
		         g->p.dimensions);
		fail(g, 400, err);
		snprintf(g->r.param, sizeof g->r.param, "dimensions");
		free(vec);
	} else {
		g->emb = vec;
		g->emb_dims = (int)dims;
		g->r.prompt_tokens = tokens;
		g->r.eng.prefill_tokens = tokens;
		g->r.finish = FE_FINISH_EOS;
	}
out:
	for (size_t i = 0; own && i < n; i++)
		free(own[i]);
	free(own);
	free(in);
	free(lens);
}

static void *
worker_main(void *arg)
{
	ad_thread_name("upstream %d", (int)(intptr_t)arg);
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
		else if (g->p.api == FE_API_EMBEDDINGS)
			embed(g);
		else
			generate(g);
		g->r.total_ns = fe_now_ns() - g->t_admit;
		if (g->r.finish == FE_FINISH_CANCELLED)
			fe_metrics_cancel();
		fe_metrics_tokens(g->r.prompt_tokens, g->r.completion_tokens);
		if (g->r.eng.prefill_ns)
			fe_metrics_stage(FE_ST_PREFILL, g->r.eng.prefill_ns);
		if (g->r.eng.decode_ns)
			fe_metrics_stage(FE_ST_DECODE, g->r.eng.decode_ns);
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
	ad_thread_name("health probe");
	pthread_mutex_lock(&probe_mu);
	while (!q.stopping) {
		pthread_mutex_unlock(&probe_mu);
		struct ad_rpc_health h;
		char err[AD_ERRLEN];
		int up = ad_rpc_health(tok, &ad_rpc_tokenizer, &h, 1000, NULL, err) == 0;
		// the vocabulary first, so a request that reads as soon as the
		// tokenizer shows as up can check token ids against it
		if (up)
			get_vocab(err);
		fe_metrics_upstream("tokenizer", up, up ? h.pid : 0);
		up = ad_rpc_health(eng, &ad_rpc_engine, &h, 1000, NULL, err) == 0;
		fe_metrics_upstream("engine", up, up ? h.pid : 0);
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

// the lease: renewed every FE_LEASE_RENEW_MS (a call that cannot reach the
// engine waits up to that long for it: nng dials again meanwhile)
static void *
lease_main(void *arg)
{
	ad_thread_name("lease");
	pthread_mutex_lock(&probe_mu);
	while (!q.stopping) {
		pthread_mutex_unlock(&probe_mu);
		char err[AD_ERRLEN];
		uint64_t t0 = fe_now_ns();
		engc_lease(eng, lease_client, FE_LEASE_MS, NULL, FE_LEASE_RENEW_MS, NULL, err);
		uint64_t next = t0 + (uint64_t)FE_LEASE_RENEW_MS * 1000000u;
		uint64_t now = fe_now_ns();
		pthread_mutex_lock(&probe_mu);
		if (!q.stopping && now < next) {
			// probe_cv runs on the realtime clock: wait the rest from now
			struct timespec rt;
			clock_gettime(CLOCK_REALTIME, &rt);
			uint64_t until = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec + (next - now);
			rt.tv_sec = (time_t)(until / 1000000000u);
			rt.tv_nsec = (long)(until % 1000000000u);
			pthread_cond_timedwait(&probe_cv, &probe_mu, &rt);
		}
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
		if (pthread_create(&workers[i], NULL, worker_main, (void *)(intptr_t)(i + 1)) != 0)
			return ad_err(err, "could not start worker threads");
		n_workers++;
	}
	if (pthread_create(&prober, NULL, probe_main, NULL) != 0)
		return ad_err(err, "could not start the health probe");
	// the lease's name: this process, on this host, this start
	char host[32] = "";
	gethostname(host, sizeof host - 1);
	uint64_t r = fe_now_ns() ^ ((uint64_t)getpid() << 32);
	snprintf(lease_client, sizeof lease_client, "frontend-%.20s-%ld-%08llx", host, (long)getpid(),
	         (unsigned long long)(r & 0xffffffffu));
	if (pthread_create(&leaser, NULL, lease_main, NULL) != 0)
		return ad_err(err, "could not start the lease");
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
	pthread_join(leaser, NULL);
	free(workers);
	for (int i = 0; vocab.bytes && i < vocab.n; i++)
		free(vocab.bytes[i]);
	free(vocab.bytes);
	free(vocab.blen);
	vocab.bytes = NULL;
	vocab.known = 0;
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
