// fake-engine - a TEST DOUBLE of the engine service (proto/engine.proto).
//
//   fake-engine --listen URL [--model GGUF] [--delay-ms N] [--prefill-ms N] [--max-seq N] [--log FILE]
//
// It runs no model. Generate answers with a job whose "generated" tokens
// are a fixed script of token ids, released on a timeline (prefill, then
// one token per delay) so Poll behaves like the real long-poll. With
// --model it loads that tokenizer to read the prompt and build the script
// from text; markers in the prompt steer it:
//
//   ECHO:text      the reply is exactly `text` (up to the end of its line)
//   [delay=N]      N ms per token for this job
//   [prefill=N]    N ms before the first token
//   [fail]         Generate fails with ERROR_UNAVAILABLE
//   [fail=N]       the first N Generates of this prompt fail so, then they run
//   [fail-after=N] the job ends with FINISH_ERROR after N tokens
//   [lose-after=N] the job is forgotten once N tokens are polled (Poll: NOT_FOUND,
//                  as a restarted worker answers), unless it is a continued one
//   [noeos]        the script repeats until max_tokens (FINISH_LENGTH)
//
// A lazy grammar (grammar_lazy with grammar_words) is not run, but its
// trigger is found as the engine would: the first token whose text
// completes a trigger word reports grammar_on with the word's offset.
// Each token reports draws = its position in the script + 1 (as a sampler
// drawing once a token would), and a Generate with skip_draws k starts the
// script at token k: a continued job gives the rest of the lost one's (and
// its trigger, counted from the script's start as grammar_replay has it).
//
// The prompt and the reply are fitted into a context of --max-seq tokens
// (2048) by the cpu-worker's own rule (cpu-worker/fit.c, compiled in).
//
// Without a marker the reply is a short fixed story. Every Generate,
// Cancel and end is appended to --log, which tests read to see that a
// client's disconnect reached the engine as a Cancel.
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "common.pb-c.h"
#include "engine.pb-c.h"
#include "ipc.h"
#include "fit.h"
#include "log.h"
#include "rpc.h"
#include "tokenizer.h"

#define MAX_JOBS 4096

static const char *story =
	"Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
	"One day, she saw a big red ball. She ran to it and said, \"Can I play with you?\"";
// stories260K ids of the story, used when no tokenizer is loaded
static const int32_t story_ids[] = {403, 407, 261, 378, 30, 357, 319, 261, 343, 397, 410, 354, 46};

struct job {
	uint64_t id;
	int used, cancelled, finished;
	int32_t *script;
	size_t n_script;
	uint32_t max_tokens;
	size_t sent;
	int fail_after; // -1: never
	int lose_after; // -1: never
	size_t offset;  // the script's first token (skip_draws)
	int noeos;
	long trig_index;    // the token that switches a lazy grammar on (-1: none)
	uint32_t trig_from; // the offset of its trigger word
	uint64_t t0_ns, prefill_ns, delay_ns;
	uint32_t n_prompt;
};

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job jobs[MAX_JOBS];
	uint64_t next;
	struct tokenizer *tok;
	uint64_t delay_ns, prefill_ns;
	int max_seq;
	FILE *log;
	uint64_t leases;
	struct {
		uint64_t hash;
		long n;
	} fails[64]; // [fail=N]: Generates failed so far, by prompt
} E = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .max_seq = 2048};

static void
logf_(const char *fmt, ...)
{
	if (!E.log)
		return;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(E.log, fmt, ap);
	va_end(ap);
	fflush(E.log);
}

static long
marker(const char *text, const char *name, long dflt)
{
	const char *m = strstr(text, name);
	return m ? strtol(m + strlen(name), NULL, 10) : dflt;
}

static uint64_t
hash(const char *s)
{
	uint64_t h = 1469598103934665603u;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211u;
	return h;
}

// [fail=N]: 1 while this prompt has failed fewer than N times (counting this one)
static int
fail_again(const char *pt)
{
	long n = marker(pt, "[fail=", -1);
	if (n < 0)
		return 0;
	uint64_t h = hash(pt);
	size_t i = 0;
	while (i < 64 && E.fails[i].hash && E.fails[i].hash != h)
		i++;
	if (i == 64)
		return 0;
	E.fails[i].hash = h;
	return E.fails[i].n++ < n;
}

static struct job *
find(uint64_t id)
{
	struct job *j = &E.jobs[id % MAX_JOBS];
	return j->used && j->id == id ? j : NULL;
}

// a reply and what it points to: the request's scratch (proto/rpc.h)
struct scratch {
	Anedvd__GenerateReply gen;
	Anedvd__PollReply poll;
	Anedvd__CancelReply cancel;
	Anedvd__LeaseReply lease;
	Anedvd__Timings timings;
	Anedvd__TokenEvent *events, **pevents;
	Anedvd__Error poll_err;
	char *prompt_text;
};

static void
release(void *p)
{
	struct scratch *x = p;
	free(x->events);
	free(x->pevents);
	free(x->prompt_text);
}

// the number of tokens of j released by time t
static size_t
released(const struct job *j, uint64_t t)
{
	size_t left = j->n_script > j->offset ? j->n_script - j->offset : 0;
	size_t total = j->noeos ? j->max_tokens : (left < j->max_tokens ? left : j->max_tokens);
	if (j->lose_after >= 0 && (size_t)j->lose_after < total)
		total = (size_t)j->lose_after;
	if (j->fail_after >= 0 && (size_t)j->fail_after < total)
		total = (size_t)j->fail_after;
	if (t < j->t0_ns + j->prefill_ns)
		return 0;
	if (j->delay_ns == 0)
		return total;
	size_t n = (size_t)((t - j->t0_ns - j->prefill_ns) / j->delay_ns) + 1;
	return n < total ? n : total;
}

static Anedvd__FinishReason
finish_of(const struct job *j, size_t n)
{
	if (j->cancelled)
		return ANEDVD__FINISH_REASON__FINISH_CANCELLED;
	if (j->fail_after >= 0 && n >= (size_t)j->fail_after)
		return ANEDVD__FINISH_REASON__FINISH_ERROR;
	if (j->noeos)
		return n >= j->max_tokens ? ANEDVD__FINISH_REASON__FINISH_LENGTH : ANEDVD__FINISH_REASON__FINISH_NONE;
	if (n >= j->max_tokens)
		return ANEDVD__FINISH_REASON__FINISH_LENGTH;
	if (n + j->offset >= j->n_script)
		return ANEDVD__FINISH_REASON__FINISH_STOP;
	return ANEDVD__FINISH_REASON__FINISH_NONE;
}

// the engine's requests but Health (the same dispatch as the real one's)
static void
handle(void *arg, struct ad_rpc_req *q)
{
	(void)arg;
	struct scratch *x = q->scratch;
	Anedvd__GenerateReply *gen = &x->gen;
	Anedvd__PollReply *poll = &x->poll;
	Anedvd__Timings *timings = &x->timings;
	anedvd__generate_reply__init(gen);
	anedvd__poll_reply__init(poll);
	anedvd__cancel_reply__init(&x->cancel);
	anedvd__lease_reply__init(&x->lease);
	anedvd__timings__init(timings);
	anedvd__error__init(&x->poll_err);
	pthread_mutex_lock(&E.mu);
	switch (q->method) {
	case ANEDVD__ENGINE_REQUEST__BODY_GENERATE: {
		const Anedvd__GenerateRequest *g = (const Anedvd__GenerateRequest *)q->body;
		char *prompt_text = NULL;
		if (g->n_prompt == 0) {
			ad_rpc_fail(q, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "empty prompt");
			break;
		}
		size_t len = 0;
		if (E.tok && tok_decode(E.tok, g->prompt, g->n_prompt, &prompt_text, &len, NULL) != 0)
			prompt_text = NULL;
		x->prompt_text = prompt_text;
		const char *pt = prompt_text ? prompt_text : "";
		if (strstr(pt, "[fail]") || fail_again(pt)) {
			ad_rpc_fail(q, ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE, "fake engine: failing as asked");
			logf_("fail-generate\n");
			break;
		}
		uint64_t id = ++E.next;
		struct job *j = &E.jobs[id % MAX_JOBS];
		free(j->script);
		memset(j, 0, sizeof *j);
		j->id = id;
		j->used = 1;
		const struct fit f = fit_prompt(g->prompt, (int)g->n_prompt, g->max_tokens ? (int)g->max_tokens : 16,
		                                E.max_seq, E.tok ? tok_bos(E.tok) : 1);
		j->max_tokens = (uint32_t)f.max_tokens;
		j->fail_after = (int)marker(pt, "[fail-after=", -1);
		j->offset = g->sampling ? (size_t)g->sampling->skip_draws : 0;
		j->lose_after = j->offset ? -1 : (int)marker(pt, "[lose-after=", -1);
		j->noeos = strstr(pt, "[noeos]") != NULL;
		j->delay_ns = (uint64_t)marker(pt, "[delay=", (long)(E.delay_ns / 1000000)) * 1000000;
		j->prefill_ns = (uint64_t)marker(pt, "[prefill=", (long)(E.prefill_ns / 1000000)) * 1000000;
		j->t0_ns = ad_now_ns();
		j->n_prompt = (uint32_t)f.keep;
		const char *echo = strstr(pt, "ECHO:");
		const char *text = story;
		size_t tlen = strlen(story);
		if (echo) {
			text = echo + 5;
			const char *nl = strchr(text, '\n');
			tlen = nl ? (size_t)(nl - text) : strlen(text);
		}
		if (E.tok) {
			size_t n = 0;
			if (tok_encode(E.tok, text, tlen, 0, 0, &j->script, &n, NULL) != 0)
				n = 0;
			j->n_script = n;
		} else {
			j->n_script = sizeof story_ids / sizeof story_ids[0];
			j->script = malloc(sizeof story_ids);
			memcpy(j->script, story_ids, sizeof story_ids);
		}
		if (j->noeos && j->n_script == 0) {
			j->script = realloc(j->script, sizeof story_ids);
			memcpy(j->script, story_ids, sizeof story_ids);
			j->n_script = sizeof story_ids / sizeof story_ids[0];
		}
		// a lazy grammar's trigger: the first token that completes a word
		j->trig_index = -1;
		if (E.tok && g->grammar_lazy && g->n_grammar_words) {
			char buf[8192];
			size_t bl = 0;
			for (size_t t = 0; t < j->n_script && j->trig_index < 0; t++) {
				size_t k = 0;
				const char *b = tok_token_text(E.tok, j->script[t], &k);
				if (bl + k >= sizeof buf)
					break;
				memcpy(buf + bl, b, k);
				bl += k;
				buf[bl] = 0;
				for (size_t w = 0; w < g->n_grammar_words; w++) {
					const char *at = strstr(buf, g->grammar_words[w]);
					if (at && (j->trig_index < 0 || (uint32_t)(at - buf) < j->trig_from)) {
						j->trig_index = (long)t;
						j->trig_from = (uint32_t)(at - buf);
					}
				}
			}
		}
		gen->job = id;
		gen->prompt_tokens = (uint32_t)f.keep;
		gen->prompt_tokens_dropped = (uint32_t)f.dropped;
		gen->dropped_from = (uint32_t)f.from;
		gen->max_tokens = (uint32_t)f.max_tokens;
		q->reply = &gen->base;
		logf_("generate %llu prompt=%zu max=%u kept=%d room=%d temp=%g top_k=%d seed=%llu/%d skip=%zu client=%s grammar=%zu "
		      "lazy=%d words=%zu replay=%u\n",
		      (unsigned long long)id, g->n_prompt, g->max_tokens, f.keep, f.max_tokens,
		      g->sampling ? g->sampling->temperature : -1.0, g->sampling ? g->sampling->top_k : -1,
		      g->sampling ? (unsigned long long)g->sampling->seed : 0ull,
		      g->sampling ? g->sampling->has_seed : 0, j->offset, g->client[0] ? "yes" : "no",
		      g->grammar ? strlen(g->grammar) : 0, g->grammar_lazy, g->n_grammar_words, g->grammar_replay);
		break;
	}
	case ANEDVD__ENGINE_REQUEST__BODY_POLL: {
		const Anedvd__PollRequest *pq = (const Anedvd__PollRequest *)q->body;
		struct job *j = find(pq->job);
		if (j && j->lose_after >= 0 && j->sent >= (size_t)j->lose_after) {
			// as a worker that died and came back: it knows the job no more
			logf_("lost %llu tokens=%zu\n", (unsigned long long)j->id, j->sent);
			j->used = 0;
			j = NULL;
		}
		if (!j) {
			ad_rpc_fail(q, ANEDVD__ERROR_CODE__ERROR_NOT_FOUND, "no such job");
			break;
		}
		// acknowledging: the events after the ones seen, again if a reply was lost
		if (pq->ack && pq->seen < j->sent)
			j->sent = (size_t)pq->seen;
		uint64_t deadline = ad_now_ns() + (uint64_t)pq->max_wait_ms * 1000000;
		size_t n;
		for (;;) {
			n = released(j, ad_now_ns());
			if (n > j->sent || finish_of(j, n) != ANEDVD__FINISH_REASON__FINISH_NONE ||
			    ad_now_ns() >= deadline)
				break;
			// sleep until the next token is due or the deadline
			uint64_t next = j->t0_ns + j->prefill_ns + j->sent * j->delay_ns; // token `sent` is due then
			uint64_t until = next < deadline ? next : deadline;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			uint64_t wait = until > ad_now_ns() ? until - ad_now_ns() : 0;
			ts.tv_sec += (time_t)(wait / 1000000000u);
			ts.tv_nsec += (long)(wait % 1000000000u);
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&E.cv, &E.mu, &ts);
			if (!(j = find(pq->job)))
				break;
		}
		if (!j) {
			ad_rpc_fail(q, ANEDVD__ERROR_CODE__ERROR_NOT_FOUND, "no such job");
			break;
		}
		if (j->cancelled)
			n = j->sent;
		size_t k = n - j->sent;
		Anedvd__TokenEvent *events = x->events = calloc(k ? k : 1, sizeof *events);
		Anedvd__TokenEvent **pevents = x->pevents = calloc(k ? k : 1, sizeof *pevents);
		for (size_t i = 0; i < k; i++) {
			anedvd__token_event__init(&events[i]);
			events[i].id = j->script[(j->offset + j->sent + i) % j->n_script];
			events[i].index = (uint32_t)(j->sent + i);
			events[i].draws = j->offset + j->sent + i + 1;
			if ((long)(j->offset + j->sent + i) == j->trig_index) {
				events[i].grammar_on = 1;
				events[i].grammar_from = j->trig_from;
			}
			pevents[i] = &events[i];
		}
		j->sent = n;
		poll->tokens = pevents;
		poll->n_tokens = k;
		poll->finish = finish_of(j, n);
		if (poll->finish == ANEDVD__FINISH_REASON__FINISH_ERROR) {
			x->poll_err.code = ANEDVD__ERROR_CODE__ERROR_INTERNAL;
			x->poll_err.message = "fake engine: failing as asked";
			poll->error = &x->poll_err;
		}
		uint64_t t = ad_now_ns();
		timings->prefill_ns = j->prefill_ns ? j->prefill_ns : 1000000;
		timings->prefill_tokens = j->n_prompt;
		timings->decode_ns = t > j->t0_ns + j->prefill_ns ? t - j->t0_ns - j->prefill_ns : 0;
		timings->decode_tokens = (uint32_t)j->sent;
		timings->kernel_ns = timings->decode_ns / 2;
		poll->timings = timings;
		if (poll->finish != ANEDVD__FINISH_REASON__FINISH_NONE && !j->finished) {
			j->finished = 1;
			logf_("done %llu finish=%d tokens=%zu\n", (unsigned long long)j->id, poll->finish, j->sent);
		}
		q->reply = &poll->base;
		break;
	}
	case ANEDVD__ENGINE_REQUEST__BODY_CANCEL: {
		uint64_t job = ((const Anedvd__CancelRequest *)q->body)->job;
		struct job *j = find(job);
		logf_("cancel %llu\n", (unsigned long long)job);
		if (j) {
			j->cancelled = 1;
			pthread_cond_broadcast(&E.cv);
		}
		q->reply = &x->cancel.base;
		break;
	}
	case ANEDVD__ENGINE_REQUEST__BODY_LEASE:
		E.leases++;
		q->reply = &x->lease.base;
		break;
	default:
		ad_rpc_fail(q, ANEDVD__ERROR_CODE__ERROR_UNSUPPORTED, "the fake engine only generates");
	}
	pthread_mutex_unlock(&E.mu);
}

int
main(int argc, char **argv)
{
	const char *url = NULL, *model = NULL, *log = NULL;
	ad_log_init("fake-engine");
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--listen") == 0)
			url = argv[i + 1];
		else if (strcmp(argv[i], "--model") == 0)
			model = argv[i + 1];
		else if (strcmp(argv[i], "--log") == 0)
			log = argv[i + 1];
		else if (strcmp(argv[i], "--delay-ms") == 0)
			E.delay_ns = (uint64_t)atol(argv[i + 1]) * 1000000;
		else if (strcmp(argv[i], "--max-seq") == 0)
			E.max_seq = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--prefill-ms") == 0)
			E.prefill_ns = (uint64_t)atol(argv[i + 1]) * 1000000;
		else {
			fprintf(stderr, "fake-engine: unknown option '%s'\n", argv[i]);
			return 2;
		}
	}
	if (!url) {
		fprintf(stderr,
		        "usage: fake-engine --listen URL [--model GGUF] [--delay-ms N] [--prefill-ms N] [--max-seq N] "
		        "[--log FILE]\n");
		return 2;
	}
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	char err[AD_ERRLEN];
	if (model && !(E.tok = tok_load(model, err))) {
		ad_error("%s", err);
		return 1;
	}
	if (log && !(E.log = fopen(log, "a"))) {
		ad_error("%s: %s", log, strerror(errno));
		return 1;
	}
	static struct ad_rpc_server rpc;
	ad_rpc_server_init(&rpc, &ad_rpc_engine, "fake-engine", handle, NULL, sizeof(struct scratch), release);
	// many threads: each Poll holds one for up to its wait
	struct ad_server *srv = ad_server_start(url, 32, ad_rpc_serve, &rpc, err);
	if (!srv) {
		ad_error("%s", err);
		return 1;
	}
	ad_info("ready on %s", url);
	int sig;
	sigwait(&set, &sig);
	ad_server_stop(srv);
	tok_free(E.tok);
	return 0;
}
