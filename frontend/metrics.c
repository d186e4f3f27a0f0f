// metrics.c - counters and histograms for GET /metrics (Prometheus text).
//
// Updated from the loop thread and the workers under one mutex: every
// update is a few additions, far cheaper than the IPC around it.
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

#define MAX_SERIES 64

static const double buckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
#define NB (sizeof buckets / sizeof buckets[0])

static const char *stage_names[FE_ST_N] = {"queue", "tokenize", "ttft", "prefill", "decode", "detokenize", "total"};

struct hist {
	uint64_t counts[NB + 1];
	double sum;
	uint64_t n;
};

struct upstream {
	int known, up;
	uint32_t pid;
	uint64_t restarts;
};

static struct {
	pthread_mutex_t mu;
	struct {
		char endpoint[32];
		int status;
		uint64_t n;
	} req[MAX_SERIES];
	int n_req;
	uint64_t tokens_in, tokens_out, cancels, rejected, replays;
	int waiting, running;
	struct hist stage[FE_ST_N];
	struct upstream tok, eng;
	struct fe_cache_stats cache;
	uint64_t cached_tokens;
	struct spec_stats spec;
} m = {.mu = PTHREAD_MUTEX_INITIALIZER};

void
fe_metrics_init(void)
{
}

void
fe_metrics_request(const char *endpoint, int status)
{
	pthread_mutex_lock(&m.mu);
	int i;
	for (i = 0; i < m.n_req; i++)
		if (m.req[i].status == status && strcmp(m.req[i].endpoint, endpoint) == 0)
			break;
	if (i == m.n_req && m.n_req < MAX_SERIES) {
		snprintf(m.req[i].endpoint, sizeof m.req[i].endpoint, "%s", endpoint);
		m.req[i].status = status;
		m.n_req++;
	}
	if (i < m.n_req)
		m.req[i].n++;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_tokens(unsigned in, unsigned out)
{
	pthread_mutex_lock(&m.mu);
	m.tokens_in += in;
	m.tokens_out += out;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_stage(enum fe_stage st, uint64_t ns)
{
	double s = (double)ns * 1e-9;
	pthread_mutex_lock(&m.mu);
	struct hist *h = &m.stage[st];
	size_t b = 0;
	while (b < NB && s > buckets[b])
		b++;
	h->counts[b]++;
	h->sum += s;
	h->n++;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_queue(int waiting, int running)
{
	pthread_mutex_lock(&m.mu);
	m.waiting = waiting;
	m.running = running;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_upstream(const char *process, int up, uint32_t pid)
{
	pthread_mutex_lock(&m.mu);
	struct upstream *u = strcmp(process, "tokenizer") == 0 ? &m.tok : &m.eng;
	if (up) {
		if (u->known && u->pid && pid != u->pid)
			u->restarts++;
		u->pid = pid;
	}
	u->up = up;
	u->known = 1;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_upstream_state(int *tok_up, int *eng_up)
{
	pthread_mutex_lock(&m.mu);
	*tok_up = m.tok.known ? m.tok.up : -1;
	*eng_up = m.eng.known ? m.eng.up : -1;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_replay(void)
{
	pthread_mutex_lock(&m.mu);
	m.replays++;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_cancel(void)
{
	pthread_mutex_lock(&m.mu);
	m.cancels++;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_cache(const struct fe_cache_stats *c, unsigned cached_tokens)
{
	pthread_mutex_lock(&m.mu);
	m.cache = *c;
	m.cached_tokens += cached_tokens;
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_spec(const struct spec_stats *sp)
{
	pthread_mutex_lock(&m.mu);
	spec_add(&m.spec, sp);
	pthread_mutex_unlock(&m.mu);
}

void
fe_metrics_rejected(void)
{
	pthread_mutex_lock(&m.mu);
	m.rejected++;
	pthread_mutex_unlock(&m.mu);
}

struct out {
	char *buf;
	size_t len, cap;
};

static void __attribute__((format(printf, 2, 3))) put(struct out *o, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(o->buf ? o->buf + o->len : NULL, o->buf ? o->cap - o->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (o->buf && o->len + (size_t)n < o->cap) {
			o->len += (size_t)n;
			return;
		}
		size_t cap = o->cap ? o->cap * 2 : 4096;
		while (cap < o->len + (size_t)n + 1)
			cap *= 2;
		char *b = realloc(o->buf, cap);
		if (!b)
			return;
		o->buf = b;
		o->cap = cap;
	}
}

char *
fe_metrics_render(size_t *len)
{
	struct out o = {0};
	pthread_mutex_lock(&m.mu);
	put(&o, "# HELP anedvd_http_requests_total HTTP requests answered, by endpoint and status.\n"
	        "# TYPE anedvd_http_requests_total counter\n");
	for (int i = 0; i < m.n_req; i++)
		put(&o, "anedvd_http_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n", m.req[i].endpoint,
		    m.req[i].status, (unsigned long long)m.req[i].n);
	put(&o,
	    "# HELP anedvd_prompt_tokens_total Prompt tokens sent to the engine.\n"
	    "# TYPE anedvd_prompt_tokens_total counter\nanedvd_prompt_tokens_total %llu\n"
	    "# HELP anedvd_generated_tokens_total Tokens generated.\n"
	    "# TYPE anedvd_generated_tokens_total counter\nanedvd_generated_tokens_total %llu\n",
	    (unsigned long long)m.tokens_in, (unsigned long long)m.tokens_out);
	put(&o,
	    "# HELP anedvd_cancelled_total Generations cancelled because the client went away.\n"
	    "# TYPE anedvd_cancelled_total counter\nanedvd_cancelled_total %llu\n"
	    "# HELP anedvd_rejected_total Requests refused because the queue was full.\n"
	    "# TYPE anedvd_rejected_total counter\nanedvd_rejected_total %llu\n",
	    (unsigned long long)m.cancels, (unsigned long long)m.rejected);
	put(&o,
	    "# HELP anedvd_generations_resumed_total Jobs a restarted engine took over: prompt and delivered tokens "
	    "submitted again after the engine lost them.\n"
	    "# TYPE anedvd_generations_resumed_total counter\nanedvd_generations_resumed_total %llu\n",
	    (unsigned long long)m.replays);
	put(&o,
	    "# HELP anedvd_prompt_cached_tokens_total Prompt tokens the engine did not compute (prefix cache and sessions).\n"
	    "# TYPE anedvd_prompt_cached_tokens_total counter\nanedvd_prompt_cached_tokens_total %llu\n",
	    (unsigned long long)m.cached_tokens);
	// the engine's own counters, as of the last finished generation
	put(&o,
	    "# HELP anedvd_prefix_cache_lookups_total Prompts looked up in the engine's prefix cache.\n"
	    "# TYPE anedvd_prefix_cache_lookups_total counter\nanedvd_prefix_cache_lookups_total %llu\n"
	    "# HELP anedvd_prefix_cache_hit_tokens_total Prompt tokens found in the prefix cache.\n"
	    "# TYPE anedvd_prefix_cache_hit_tokens_total counter\nanedvd_prefix_cache_hit_tokens_total %llu\n"
	    "# HELP anedvd_prefix_cache_stored_blocks_total Blocks added to the prefix cache.\n"
	    "# TYPE anedvd_prefix_cache_stored_blocks_total counter\nanedvd_prefix_cache_stored_blocks_total %llu\n"
	    "# HELP anedvd_prefix_cache_evictions_total Blocks evicted from the prefix cache to make room.\n"
	    "# TYPE anedvd_prefix_cache_evictions_total counter\nanedvd_prefix_cache_evictions_total %llu\n"
	    "# HELP anedvd_prefix_cache_bytes KV bytes held by the prefix cache.\n"
	    "# TYPE anedvd_prefix_cache_bytes gauge\nanedvd_prefix_cache_bytes %llu\n"
	    "# HELP anedvd_prefix_cache_limit_bytes The prefix cache's bound (--cache-mem; 0: off).\n"
	    "# TYPE anedvd_prefix_cache_limit_bytes gauge\nanedvd_prefix_cache_limit_bytes %llu\n"
	    "# HELP anedvd_prefix_cache_blocks Blocks held by the prefix cache.\n"
	    "# TYPE anedvd_prefix_cache_blocks gauge\nanedvd_prefix_cache_blocks %llu\n"
	    "# HELP anedvd_prefix_cache_windows_dropped_total Windowed parts of blocks (sliding-window and ShortConv "
	    "rows) dropped where no later prompt reads them.\n"
	    "# TYPE anedvd_prefix_cache_windows_dropped_total counter\nanedvd_prefix_cache_windows_dropped_total %llu\n",
	    (unsigned long long)m.cache.lookups, (unsigned long long)m.cache.hit_tokens,
	    (unsigned long long)m.cache.stored, (unsigned long long)m.cache.evictions,
	    (unsigned long long)m.cache.bytes, (unsigned long long)m.cache.limit, (unsigned long long)m.cache.blocks,
	    (unsigned long long)m.cache.windows_dropped);
	put(&o,
	    "# HELP anedvd_spec_steps_total Decode steps that carried a speculative draft.\n"
	    "# TYPE anedvd_spec_steps_total counter\nanedvd_spec_steps_total %llu\n",
	    (unsigned long long)m.spec.steps);
	put(&o, "# HELP anedvd_spec_drafted_tokens_total Draft tokens verified, by the length n of the n-gram that "
	        "found them.\n# TYPE anedvd_spec_drafted_tokens_total counter\n");
	for (int i = 0; i <= SPEC_NGRAM_MAX; i++)
		if (m.spec.drafted_n[i])
			put(&o, "anedvd_spec_drafted_tokens_total{n=\"%d\"} %llu\n", i,
			    (unsigned long long)m.spec.drafted_n[i]);
	put(&o, "# HELP anedvd_spec_accepted_tokens_total Draft tokens the model's own sample confirmed, by n.\n"
	        "# TYPE anedvd_spec_accepted_tokens_total counter\n");
	for (int i = 0; i <= SPEC_NGRAM_MAX; i++)
		if (m.spec.drafted_n[i])
			put(&o, "anedvd_spec_accepted_tokens_total{n=\"%d\"} %llu\n", i,
			    (unsigned long long)m.spec.accepted_n[i]);
	put(&o,
	    "# HELP anedvd_spec_acceptance_ratio Accepted over drafted tokens since start, by n (\"all\": every n).\n"
	    "# TYPE anedvd_spec_acceptance_ratio gauge\n"
	    "anedvd_spec_acceptance_ratio{n=\"all\"} %.6f\n",
	    m.spec.drafted ? (double)m.spec.accepted / (double)m.spec.drafted : 0.0);
	for (int i = 0; i <= SPEC_NGRAM_MAX; i++)
		if (m.spec.drafted_n[i])
			put(&o, "anedvd_spec_acceptance_ratio{n=\"%d\"} %.6f\n", i,
			    (double)m.spec.accepted_n[i] / (double)m.spec.drafted_n[i]);
	put(&o,
	    "# HELP anedvd_queue_length Requests waiting for the engine.\n"
	    "# TYPE anedvd_queue_length gauge\nanedvd_queue_length %d\n"
	    "# HELP anedvd_running Generations in progress.\n"
	    "# TYPE anedvd_running gauge\nanedvd_running %d\n",
	    m.waiting, m.running);
	put(&o, "# HELP anedvd_stage_seconds Time per request and stage (queue is the wait for a free engine slot).\n"
	        "# TYPE anedvd_stage_seconds histogram\n");
	for (int s = 0; s < FE_ST_N; s++) {
		struct hist *h = &m.stage[s];
		uint64_t cum = 0;
		for (size_t b = 0; b < NB; b++) {
			cum += h->counts[b];
			put(&o, "anedvd_stage_seconds_bucket{stage=\"%s\",le=\"%g\"} %llu\n", stage_names[s],
			    buckets[b], (unsigned long long)cum);
		}
		cum += h->counts[NB];
		put(&o, "anedvd_stage_seconds_bucket{stage=\"%s\",le=\"+Inf\"} %llu\n", stage_names[s],
		    (unsigned long long)cum);
		put(&o, "anedvd_stage_seconds_sum{stage=\"%s\"} %.6f\n", stage_names[s], h->sum);
		put(&o, "anedvd_stage_seconds_count{stage=\"%s\"} %llu\n", stage_names[s], (unsigned long long)h->n);
	}
	put(&o,
	    "# HELP anedvd_upstream_up Whether the last health probe of a process succeeded.\n"
	    "# TYPE anedvd_upstream_up gauge\n"
	    "anedvd_upstream_up{process=\"tokenizer\"} %d\nanedvd_upstream_up{process=\"engine\"} %d\n",
	    m.tok.up, m.eng.up);
	put(&o,
	    "# HELP anedvd_worker_restarts_total Restarts of a process seen by the health probe (its pid changed).\n"
	    "# TYPE anedvd_worker_restarts_total counter\n"
	    "anedvd_worker_restarts_total{process=\"tokenizer\"} %llu\n"
	    "anedvd_worker_restarts_total{process=\"engine\"} %llu\n",
	    (unsigned long long)m.tok.restarts, (unsigned long long)m.eng.restarts);
	pthread_mutex_unlock(&m.mu);
	*len = o.len;
	return o.buf;
}
