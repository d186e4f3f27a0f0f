// scheduler.c - jobs, sessions and the engine thread.
//
// One mutex guards everything shared: the job list, the queue, each job's
// buffered events and outcome, the session table, the eval queue. The
// engine thread takes it between engine calls only; the engine, the
// sequences, the samplers and the scratch buffers are touched by the
// engine thread alone (a session's sequence is touched elsewhere only while
// no job holds the session: for the prefix comparison and for eviction).
//
// A job is finished (outcome set, pollers woken) by whoever sees the reason
// first: the engine thread (stop id, length, sampling or kernel failure), a
// canceller or the housekeeping (deadline, abandoned). The engine thread
// then detaches it at its next turn: frees its sampler and its unnamed
// sequence, releases its session. A detached, finished job is forgotten
// grace_ms after its final poll, or abandon_ms after its last poll if the
// final one never came.
#define _GNU_SOURCE
#include "scheduler.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fit.h"
#include "log.h"
#include "prefix-cache.h"
#include "spec.h"
#include "trace.h"

#define SESSION_WAIT_MS 5000 // for a session whose job has finished but is not yet released
#define MAX_STOP_IDS 64
#define HOUSEKEEP_NS 10000000u
#define CLIENT_CHECK_NS 100000000u // how often the callers' pids are looked at

enum job_state { J_QUEUED, J_ADMITTED, J_PREFILL, J_DECODE };

struct session {
	char name[SCHED_SESSION_MAX];
	struct engine_seq *seq; // NULL until its first job is admitted
	struct job *busy;       // the job holding it
	uint64_t used_ns;
	int drop; // reset while busy: freed when its job lets go
	int wgap; // the windowed rows of positions below this were not kept (see job.wgap)
	struct session *next;
};

// a compiled grammar and the jobs using it (under the lock)
struct gcache {
	char *text;
	size_t len;
	struct gbnf *g;
	int refs;
	uint64_t used;
	int own; // not a slot of the cache (every slot was in use): freed with its job
};

struct job {
	uint64_t id;
	struct job *next;  // every job
	struct job *qnext; // the queue

	// the request (immutable once queued)
	int32_t *prompt; // the kept part
	int keep, dropped, reuse;
	int dropped_from; // fit.h's from: 1 when a BOS stayed in front of the cut
	int max_tokens;
	struct sample_params sp;
	struct sample_bias *bias; // sp.bias points here
	int32_t stop[MAX_STOP_IDS];
	int n_stop;
	int want_top;
	int logprobs, top_logprobs;
	uint32_t deadline_ms;
	uint64_t deadline_ns;          // 0: none
	int client_pid;                // 0: none
	char client[SCHED_CLIENT_MAX]; // its lease ("": none)
	uint64_t skip_draws;           // the sampler's draws to skip (a continued job)
	struct session *sess;

	// the engine thread's
	enum job_state state;
	struct engine_seq *seq;
	struct sampler *smp;
	struct gram *gram; // NULL: no grammar (created by sched_generate)
	struct gcache *gc; // its compiled grammar
	int fed;           // prompt tokens in the cache
	// the prefix cache: pins[i] is the sequence's block i, found or stored
	// (pinned until the job is detached); looked once the lookup is done
	struct pcache_block **pins;
	int n_pins, looked, store_off;
	int cached; // prompt tokens copied from the prefix cache
	// the windowed layers' rows (engine.h) of the positions below wgap are
	// not the sequence's: restored from blocks that kept no windowed part
	// (no later position reads them); match: where the prompt left the
	// cached prefixes (before any cut for a dropped window)
	int wgap, match;
	int spec; // drafts for this job (the request's choice, else the worker's)
	int32_t next_tok;
	struct gen_timings t0;

	// under the lock
	int active, queued;
	uint64_t request_id;          // the Generate's (0: none)
	struct sched_started started; // what it answered
	struct sched_event *ev;       // events from index ev_base on, not yet dropped
	int n_ev, cap_ev;
	uint32_t ev_base;
	uint32_t produced;
	enum sched_finish finish;
	enum sched_code code;
	char msg[AD_ERRLEN];
	struct gen_timings t;
	struct spec_stats spec_st; // written by the engine thread under the lock
	uint64_t submit_ns, admit_ns, done_ns, last_poll_ns, final_ns;
	int final_polled, waiters;
	int holders; // of the waiters, those holding tokens for a frame (sched_poll_ack's hold_ms)
	pthread_cond_t cv;
};

struct eval {
	const int32_t *ids;
	int n, per_token, last_only, layers;
	float *logits;
	// an embedding request instead (sched_embed)
	int embed, pooling;
	const int32_t *const *inputs;
	const int *lens;
	int done, rc;
	enum sched_code code;
	char msg[AD_ERRLEN];
	struct eval *next;
};

// a client's lease (sched_lease): its jobs are cancelled once it runs out
struct lease {
	char client[SCHED_CLIENT_MAX];
	uint64_t renewed_ns, expires_ns;
	struct lease *next;
};

struct sched {
	struct engine *e;
	struct sched_opts o;
	int V, width, max_seq;
	int32_t bos; // the model's, -1: none (fit.h)

	pthread_mutex_t mu;
	pthread_cond_t work; // the engine thread waits here
	pthread_cond_t done; // evals and session releases
	pthread_t thread;
	int started, stopping;

	struct job *jobs;
	struct job *qhead, *qtail;
	int n_queued;
	struct job **active;
	int n_active;
	struct session *sessions;
	int n_sessions;
	struct lease *leases;
	int n_leases;
	struct eval *evals, *evals_tail;
	uint64_t next_id;
	uint64_t last_housekeep, last_client_check;
	struct sched_stats st;
	struct gcache gcache[SCHED_GRAMMARS];
	uint64_t gclock;

	// engine thread scratch
	struct engine_seq **cols;
	int32_t *toks;
	struct job **cjobs;
	int *coff, *nk, *ngram; // per decoding job: its first column, its draft tokens, their n-gram
	uint8_t *want;
	float *logits; // [lrows][V]: engine_logits_alloc's, or (own_logits) malloc's
	int rows;      // jobs per decode call
	int lrows;     // rows of logits: a decode call's columns, drafts included, and a prefill's last
	int own_logits;
	struct spec_opts spec;
	struct spec_cost cost; // the decode calls' widths and times
	struct engine_seq *eval_seq;
	struct embed_run *embed; // the embedding request at the head of the queue
	struct pcache *pc;       // NULL: no prefix cache
	int max_blocks;          // per sequence
	uint8_t *rowbuf;         // a block's rows, for copies between sequences
	uint8_t *statebuf;       // a recurrent state (engine_state_bytes), NULL when the model has none
	int win;                 // engine_kv_window when there is a windowed part, else 0
};

static int
cond_init(pthread_cond_t *cv)
{
	pthread_condattr_t a;
	if (pthread_condattr_init(&a))
		return -1;
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	int rv = pthread_cond_init(cv, &a);
	pthread_condattr_destroy(&a);
	return rv ? -1 : 0;
}

// wait on cv until the monotonic time `until`; ETIMEDOUT when it has passed
static int
cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, uint64_t until)
{
	struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
	return pthread_cond_timedwait(cv, mu, &ts);
}

static int
fail(enum sched_code *code, enum sched_code c, char *err, const char *fmt, ...)
{
	if (code)
		*code = c;
	va_list ap;
	va_start(ap, fmt);
	ad_verr(err, fmt, ap);
	va_end(ap);
	return -1;
}

// --- jobs and sessions (under the lock) -----------------------------------------------

static struct job *
find_job(struct sched *s, uint64_t id)
{
	for (struct job *j = s->jobs; j; j = j->next)
		if (j->id == id)
			return j;
	return NULL;
}

static struct session *
find_session(struct sched *s, const char *name)
{
	for (struct session *x = s->sessions; x; x = x->next)
		if (strcmp(x->name, name) == 0)
			return x;
	return NULL;
}

static struct lease *
find_lease(struct sched *s, const char *client)
{
	for (struct lease *l = s->leases; l; l = l->next)
		if (strcmp(l->client, client) == 0)
			return l;
	return NULL;
}

// renew (or take out) client's lease for ms from now
static int
renew_lease(struct sched *s, const char *client, int ms, enum sched_code *code, char *err)
{
	struct lease *l = find_lease(s, client);
	if (!l) {
		if (s->n_leases >= SCHED_MAX_LEASES)
			return fail(code, SCHED_EUNAVAILABLE, err, "lease: %d clients hold one already", s->n_leases);
		if (!(l = calloc(1, sizeof *l)))
			return fail(code, SCHED_EINTERNAL, err, "out of memory");
		snprintf(l->client, sizeof l->client, "%s", client);
		l->next = s->leases;
		s->leases = l;
		s->n_leases++;
	}
	l->renewed_ns = ad_now_ns();
	l->expires_ns = l->renewed_ns + (uint64_t)ms * 1000000u;
	return 0;
}

static void
session_free(struct sched *s, struct session *x)
{
	for (struct session **p = &s->sessions; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			s->n_sessions--;
			break;
		}
	engine_seq_free(x->seq);
	free(x);
}

static void
session_release(struct sched *s, struct job *j)
{
	struct session *x = j->sess;
	if (!x)
		return;
	j->sess = NULL;
	if (x->busy == j) {
		x->busy = NULL;
		x->used_ns = ad_now_ns();
	}
	if (x->drop && !x->busy)
		session_free(s, x);
	pthread_cond_broadcast(&s->done);
}

static void
unqueue(struct sched *s, struct job *j)
{
	struct job *prev = NULL;
	for (struct job *q = s->qhead; q; prev = q, q = q->qnext) {
		if (q != j)
			continue;
		if (prev)
			prev->qnext = q->qnext;
		else
			s->qhead = q->qnext;
		if (s->qtail == q)
			s->qtail = prev;
		s->n_queued--;
		break;
	}
	j->queued = 0;
	j->qnext = NULL;
}

// finish sets a job's outcome once and wakes its pollers; a queued job
// leaves the queue (it never touched its session)
static void
finish(struct sched *s, struct job *j, enum sched_finish f, enum sched_code code, const char *fmt, ...)
{
	if (j->finish != SCHED_RUNNING)
		return;
	j->finish = f;
	j->code = code;
	j->msg[0] = 0;
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(j->msg, sizeof j->msg, fmt, ap);
		va_end(ap);
	}
	j->done_ns = ad_now_ns();
	if (j->queued) {
		unqueue(s, j);
		session_release(s, j);
	}
	s->st.jobs++;
	pthread_cond_broadcast(&j->cv);
	pthread_cond_signal(&s->work);
}

static void gcache_put(struct gcache *c);

// under the lock, or once the engine thread is gone
static void
job_free(struct job *j)
{
	if (!j)
		return;
	gram_free(j->gram);
	gcache_put(j->gc);
	sample_free(j->smp);
	free(j->prompt);
	free(j->bias);
	free(j->ev);
	free(j->pins);
	pthread_cond_destroy(&j->cv);
	free(j);
}

// the cost of a column that sets the drafts' length: --draft-cost, or
// measured on the decode calls
static float
spec_col_cost(const struct sched *s)
{
	return s->spec.col_cost == SPEC_COST_AUTO ? spec_cost_get(&s->cost, SPEC_COL_COST) : s->spec.col_cost;
}

// --- the prefix cache (the engine thread's) -------------------------------------------

// cache_store adds the full blocks of j's sequence not yet in its chain
// (the prompt's, and at the end the generated tokens' too: a chat's next
// turn resends them); a full cache ends the chain. The windowed part goes
// with a block whose windowed rows the sequence holds, and restores that
// part of a stored block that lost it.
static void
cache_store(struct sched *s, struct job *j)
{
	if (!s->pc || !j->pins || !j->seq || j->store_off)
		return;
	const int B = pcache_block_size(s->pc), len = engine_seq_len(j->seq);
	const int32_t *t = engine_seq_tokens(j->seq);
	while (j->n_pins < s->max_blocks && (j->n_pins + 1) * B <= len) {
		void *fill, *wfill = NULL;
		const int at = j->n_pins * B;
		struct pcache_block *parent = j->n_pins ? j->pins[j->n_pins - 1] : NULL;
		struct pcache_block *b =
			pcache_add(s->pc, parent, t + at, &fill, s->win && at >= j->wgap ? &wfill : NULL);
		if (!b) {
			j->store_off = 1;
			return;
		}
		if (fill)
			engine_seq_kv_read_parts(j->seq, ENGINE_KV_FULL, at, B, fill);
		if (wfill)
			engine_seq_kv_read_parts(j->seq, ENGINE_KV_WINDOWED, at, B, wfill);
		// a recurrent state after the block, where the sequence kept one (a
		// full cache leaves the block without: a hit then stops before it)
		if (s->statebuf && !pcache_state(b) &&
		    engine_seq_state_read(j->seq, (j->n_pins + 1) * B, s->statebuf) == 0)
			pcache_set_state(s->pc, b, s->statebuf);
		j->pins[j->n_pins++] = b;
	}
}

// cache_trim runs as j lets go of its blocks: the windowed part stays where
// a later prompt may leave the stored prefixes and read it, within a window
// before: where j's prompt left the cached ones, the end of its prompt (a
// repeat of the request), the end of its sequence (the next turn), and any
// branch of the chain (prompts went on differently there, and may again);
// the rest of j's chain drops it, unless another job keeps it
static void
cache_trim(struct sched *s, struct job *j)
{
	if (!s->win || !j->seq)
		return;
	const int B = pcache_block_size(s->pc), W = s->win, S = j->n_pins * B;
	// where a later prompt may leave: no further than the blocks stored
	int ends[3] = {j->match, j->keep - 1, engine_seq_len(j->seq)};
	for (int k = 0; k < 3; k++)
		ends[k] = ends[k] < S ? ends[k] : S;
	int branch = -1; // the start of the nearest branch's window after block i
	for (int i = j->n_pins - 1; i >= 0; i--) {
		struct pcache_block *b = j->pins[i];
		const int lo = i * B, hi = lo + B;
		if (pcache_children(s->pc, b) > 1)
			branch = hi + B; // its window, and the first rows of the blocks after it
		// a prompt leaving at e reads the windowed rows e - W + 1 .. e - 1
		int near = 0;
		for (int k = 0; k < 3; k++)
			near |= lo < ends[k] && hi > ends[k] - W + 1;
		if (near)
			pcache_window(s->pc, b, 1);
		else if (!(branch >= 0 && hi > branch - B - W + 1 && lo < branch))
			pcache_window(s->pc, b, 0);
	}
}

// running_prefix finds the running sequence holding the longest run of j's
// prompt from its start (at most upto tokens, more than from), whose
// windowed rows are its own where j would read them: from `from` on for a
// copy, within a window before the end for a fork; its length in *most
static struct job *
running_prefix(struct sched *s, struct job *j, int from, int upto, int fork, int *most)
{
	struct job *best = NULL;
	*most = from;
	for (int i = 0; i < s->n_active; i++) {
		struct job *o = s->active[i];
		if (o == j || !o->seq || o->seq == j->seq || o->state < J_PREFILL)
			continue;
		int l = engine_seq_common(o->seq, j->prompt, upto);
		if (l > *most && o->wgap <= (fork ? l - s->win + 1 : from)) {
			*most = l;
			best = o;
		}
	}
	// a recurrent state: only up to a position whose state that sequence has
	// (its length, or a kept copy at a multiple of engine_state_every)
	const int every = engine_state_every(s->e);
	while (best && s->statebuf && *most > from && engine_seq_state_read(best->seq, *most, s->statebuf))
		*most = (*most - 1) / every * every;
	if (best && (*most <= from || (fork && best->wgap > *most - s->win + 1))) {
		*most = from;
		best = NULL;
	}
	return best;
}

// share_running copies into j's sequence, from `from` on, the rows of the
// running sequence that holds the longest run of j's prompt from the start
// (the tail no block holds yet: a request that follows one still
// prefilling a long prompt, into a session's sequence). Every row depends
// only on the tokens up to its position, so those rows are what j would
// compute.
static int
share_running(struct sched *s, struct job *j, int from, int upto)
{
	char err[AD_ERRLEN];
	int most;
	const int start = from;
	struct job *r = running_prefix(s, j, from, upto, 0, &most);
	const int B = pcache_block_size(s->pc);
	while (r && from < most) {
		int m = most - from < B ? most - from : B;
		engine_seq_kv_read(r->seq, from, m, s->rowbuf); // every part: all of them are r's own
		if (engine_seq_kv_append(j->seq, j->prompt + from, m, s->rowbuf, m, 0, err)) {
			ad_warn("job %llu: rows of a running sequence: %s", (unsigned long long)j->id, err);
			break;
		}
		from += m;
	}
	if (s->statebuf && from > start) {
		if (from < most || engine_seq_state_load(j->seq, s->statebuf, err)) {
			engine_seq_truncate(j->seq, start); // rows without their state: not usable
			from = engine_seq_len(j->seq);
		}
	}
	return from;
}

// cache_lookup runs when j's prefill is about to start (not at admission:
// a job admitted with others on the same prompt, n choices say, looks
// after the first one has prefilled it). A fresh sequence forks from the
// running sequence that holds the longest run of its prompt (never the
// last token: its logits are needed), when that is at least a block and no
// less than the prefix cache gives: it reads those rows where they are,
// copying none. Otherwise the rows of the longest cached prefix are copied
// beyond what the sequence holds, then what a running sequence holds
// beyond them. The request's line goes to the log.
static void
cache_lookup(struct sched *s, struct job *j)
{
	char err[AD_ERRLEN];
	j->looked = 1;
	int cut = 0, forked = 0, nb = 0, hit = 0;
	const void *st = NULL;
	const int B = s->pc ? pcache_block_size(s->pc) : SCHED_CACHE_BLOCK, W = s->win;
	int from = engine_seq_len(j->seq), upto = from;
	const int start = from;
	if (s->pc && (j->pins = calloc((size_t)s->max_blocks, sizeof *j->pins))) {
		nb = pcache_match(s->pc, j->prompt, j->keep, j->pins, s->max_blocks, &hit);
		j->n_pins = nb;
		upto = hit < j->keep - 1 ? hit : j->keep - 1;
		j->match = upto;
		// position h reads the windowed rows h - W + 1 .. h: a block among
		// them that dropped its windowed part ends the hit before it; a
		// recurrent state: the hit goes on from the end of the last block
		// that carries one (whole blocks only). Each cut may call for the other.
		int h = upto > from ? upto : from;
		for (int moved = 1; moved;) {
			moved = 0;
			while (W && h > from) {
				int bad = -1;
				for (int i = (h - W + 1 > from ? h - W + 1 : from) / B; i * B < h; i++)
					if (!pcache_wrows(s->pc, j->pins[i]))
						bad = i;
				if (bad < 0)
					break;
				h = bad * B > from ? bad * B : from;
				moved = 1;
			}
			if (s->statebuf) {
				int k = h / B;
				while (k > 0 && !pcache_state(j->pins[k - 1]))
					k--;
				st = k ? pcache_state(j->pins[k - 1]) : NULL;
				if (k * B != h)
					h = k * B, moved = W > 0;
			}
		}
		cut = upto - h > 0 ? upto - h : 0;
		upto = h;
	}
	int most = 0;
	struct job *r = from == 0 ? running_prefix(s, j, upto, j->keep - 1, 1, &most) : NULL;
	if (r && most >= B && engine_seq_fork(j->seq, r->seq, most, err) == 0) {
		j->wgap = r->wgap;
		forked = most;
		from = most;
		pthread_mutex_lock(&s->mu);
		s->st.forks++;
		s->st.fork_rows += (uint64_t)most;
		pthread_mutex_unlock(&s->mu);
	} else {
		while (s->pc && from < upto) {
			int k = from / B, off = from % B, m = upto - from < B - off ? upto - from : B - off;
			const void *w = W ? pcache_wrows(s->pc, j->pins[k]) : NULL;
			if (engine_seq_kv_append_parts(j->seq, ENGINE_KV_FULL, j->prompt + from, m,
			                               pcache_rows(j->pins[k]), B, off, err) ||
			    (w && engine_seq_kv_write(j->seq, ENGINE_KV_WINDOWED, from, m, w, B, off, err))) {
				ad_warn("job %llu: prefix cache: %s", (unsigned long long)j->id, err);
				break;
			}
			if (W && !w)
				j->wgap = from + m;
			from += m;
		}
		if (st && from > start && (from < upto || engine_seq_state_load(j->seq, st, err))) {
			engine_seq_truncate(j->seq, start); // rows without their state: not usable
			from = engine_seq_len(j->seq);
		}
		if (s->pc && from == engine_seq_len(j->seq) && from < j->keep - 1)
			from = share_running(s, j, from, j->keep - 1);
	}
	// a last block matched in part is not this sequence's block: the
	// chain stores its own in its place
	if (nb && hit % B) {
		pcache_release(s->pc, j->pins + nb - 1, 1);
		j->n_pins = nb - 1;
	}
	pthread_mutex_lock(&s->mu);
	j->cached = from - j->fed > 0 ? from - j->fed : 0;
	pthread_mutex_unlock(&s->mu);
	j->fed = engine_seq_len(j->seq);
	char fk[64] = "";
	if (forked)
		snprintf(fk, sizeof fk, ", %d of them shared with a running sequence (no copy)", forked);
	ad_info("job %llu: prompt %d tokens, %d reused (%d from the session, %d from the prefix cache%s), %d dropped, "
	        "%d to prefill%s",
	        (unsigned long long)j->id, j->keep, j->reuse + j->cached, j->reuse, j->cached, fk, j->dropped,
	        j->keep - j->fed, cut > 0 ? " (the hit cut back to where the cache kept every part it needs)" : "");
}

// detach hands a finished job back: the engine thread no longer uses it
static void
detach(struct sched *s, int i)
{
	struct job *j = s->active[i];
	if (j->spec_st.steps)
		ad_info("job %llu: speculative: %llu steps drafted %llu tokens, %llu accepted; a column costs %.3f of a "
		        "one-column call%s",
		        (unsigned long long)j->id, (unsigned long long)j->spec_st.steps,
		        (unsigned long long)j->spec_st.drafted, (unsigned long long)j->spec_st.accepted,
		        (double)spec_col_cost(s), s->spec.col_cost == SPEC_COST_AUTO ? " (measured)" : "");
	if (s->pc && j->pins) {
		cache_store(s, j);
		cache_trim(s, j);
		pcache_release(s->pc, j->pins, j->n_pins);
		j->n_pins = 0;
	}
	if (j->sess)
		j->sess->wgap = j->wgap;
	sample_free(j->smp);
	j->smp = NULL;
	gram_free(j->gram);
	j->gram = NULL;
	if (j->sess)
		session_release(s, j);
	else
		engine_seq_free(j->seq);
	j->seq = NULL;
	j->active = 0;
	memmove(s->active + i, s->active + i + 1, (size_t)(s->n_active - i - 1) * sizeof *s->active);
	s->n_active--;
}

// a caller that crashed cannot cancel its jobs, and its last poll may
// still hold the job for the poll's wait: its pid going away says it
static int
client_gone(int pid)
{
	return pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

// deadlines, abandoned jobs, jobs of callers that are gone, forgotten jobs
static void
housekeep(struct sched *s, uint64_t now)
{
	const uint64_t abandon = (uint64_t)s->o.abandon_ms * 1000000u, grace = (uint64_t)s->o.grace_ms * 1000000u;
	int check_clients = now - s->last_client_check >= CLIENT_CHECK_NS;
	if (check_clients)
		s->last_client_check = now;
	for (struct job **p = &s->jobs; *p;) {
		struct job *j = *p;
		struct lease *l;
		if (j->finish == SCHED_RUNNING) {
			if (j->client[0] && (!(l = find_lease(s, j->client)) || now >= l->expires_ns)) {
				unsigned long long ago = l ? (now - l->renewed_ns) / 1000000u : 0;
				ad_warn("job %llu: the lease of client %s ran out (not renewed for %llu ms): cancelled after %u "
				        "tokens",
				        (unsigned long long)j->id, j->client, ago, j->produced);
				finish(s, j, SCHED_CANCELLED, SCHED_ECANCELLED,
				       "cancelled: the lease of client %s ran out (not renewed for %llu ms) after %u tokens",
				       j->client, ago, j->produced);
			} else if (check_clients && client_gone(j->client_pid)) {
				ad_warn("job %llu: the client (pid %d) is gone: cancelled after %u tokens",
				        (unsigned long long)j->id, j->client_pid, j->produced);
				finish(s, j, SCHED_CANCELLED, SCHED_ECANCELLED,
				       "cancelled: the client (pid %d) is gone after %u tokens", j->client_pid,
				       j->produced);
			} else if (j->deadline_ns && now >= j->deadline_ns)
				finish(s, j, SCHED_ERROR, SCHED_ETIMEOUT,
				       "the deadline of %u ms passed after %u tokens", j->deadline_ms, j->produced);
			else if (j->waiters == 0 && now - j->last_poll_ns > abandon)
				finish(s, j, SCHED_CANCELLED, SCHED_ECANCELLED, "abandoned: not polled for %d ms",
				       s->o.abandon_ms);
		} else if (!j->active && j->waiters == 0) {
			uint64_t last = j->last_poll_ns > j->done_ns ? j->last_poll_ns : j->done_ns;
			if ((j->final_polled && now - j->final_ns > grace) ||
			    (!j->final_polled && now - last > abandon)) {
				*p = j->next;
				job_free(j);
				continue;
			}
		}
		p = &j->next;
	}
	// a lease that ran out has cancelled its jobs above: forget it
	for (struct lease **p = &s->leases; *p;) {
		struct lease *l = *p;
		if (now >= l->expires_ns) {
			*p = l->next;
			s->n_leases--;
			free(l);
			continue;
		}
		p = &l->next;
	}
}

// --- the engine thread ------------------------------------------------------------------

static void
update_timings(struct job *j)
{
	gen_timings_sub(&j->t, engine_seq_timings(j->seq), &j->t0);
}

// a failure of the engine thread's own making (not the request's)
static void
fail_job(struct sched *s, struct job *j, enum sched_code code, const char *what, const char *msg)
{
	pthread_mutex_lock(&s->mu);
	if (j->seq)
		update_timings(j);
	finish(s, j, SCHED_ERROR, code, "%s: %s", what, msg);
	pthread_mutex_unlock(&s->mu);
	ad_warn("job %llu: %s: %s", (unsigned long long)j->id, what, msg);
}

static int
setup(struct sched *s, struct job *j)
{
	char err[AD_ERRLEN];
	struct engine_seq *seq = j->sess ? j->sess->seq : NULL;
	if (!seq) {
		if (!(seq = engine_seq_new(s->e, err))) {
			fail_job(s, j, SCHED_EUNAVAILABLE, "sequence", err);
			return -1;
		}
		if (j->sess) {
			pthread_mutex_lock(&s->mu);
			j->sess->seq = seq;
			pthread_mutex_unlock(&s->mu);
		}
	}
	// a session's rows below its gap hold no windowed part: a reuse whose
	// window reaches them starts over
	if (j->sess && s->win && j->reuse > 0 && j->reuse - s->win < j->sess->wgap) {
		pthread_mutex_lock(&s->mu);
		j->reuse = 0;
		pthread_mutex_unlock(&s->mu);
	}
	if (j->sess)
		j->wgap = j->reuse ? j->sess->wgap : 0;
	engine_seq_truncate(seq, j->reuse);
	j->seq = seq;
	if (engine_seq_len(seq) > j->reuse) { // the rows its forks share could not be copied
		fail_job(s, j, SCHED_EUNAVAILABLE, "sequence", "out of memory for the rows its forks share");
		return -1;
	}
	if (engine_seq_len(seq) < j->reuse) { // a recurrent state went back further
		pthread_mutex_lock(&s->mu);
		j->reuse = engine_seq_len(seq);
		pthread_mutex_unlock(&s->mu);
	}
	j->t0 = *engine_seq_timings(seq);
	j->fed = engine_seq_len(seq);
	if (!(j->smp = sample_new(&j->sp, s->V, err)) || sample_accept(j->smp, j->prompt, j->keep, err)) {
		fail_job(s, j, SCHED_EINTERNAL, "sampler", err);
		return -1;
	}
	// a continued job: the generator where the lost one had left it
	sample_skip(j->smp, j->skip_draws);
	j->state = J_PREFILL;
	return 0;
}

// a "step" / "sampling" trace event from t0 (now_ns) to now; the callers
// test trace_enabled() first, so tracing off costs one load per step
static void __attribute__((format(printf, 3, 4))) trace_since(uint64_t t0, const char *cat, const char *fmt, ...)
{
	char name[48];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	trace_event((long)getpid(), 1, name, cat, t0 / 1000u, (ad_now_ns() - t0) / 1000u);
}

// a row of a verify (spec.h): row r of a step that carried k draft tokens
// found by an n-gram of ngram; d is draft token r (r < k)
struct vrow {
	int k, ngram, r;
	int32_t d;
};

// book row vr's outcome in the counters, under the lock: the step and its
// draft with row 0, each draft token compared with a recorded sample
static void
spec_book(struct sched *s, struct job *j, const struct vrow *vr, int32_t tok, int recorded)
{
	struct spec_stats *st[2] = {&j->spec_st, &s->st.spec};
	const int n = vr->ngram >= 0 && vr->ngram <= SPEC_NGRAM_MAX ? vr->ngram : 0;
	for (int i = 0; i < 2; i++) {
		if (vr->r == 0) {
			st[i]->steps++;
			st[i]->drafted += (uint64_t)vr->k;
			st[i]->drafted_n[n] += (uint64_t)vr->k;
		}
		if (vr->r < vr->k && recorded) {
			st[i]->reached++;
			st[i]->reached_n[n]++;
			if (tok == vr->d) {
				st[i]->accepted++;
				st[i]->accepted_n[n]++;
			}
		}
	}
}

// emit samples the next token of j from its logits row and reports it;
// len is the sequence's length once the token the row belongs to is in it;
// vr (NULL: none) the verify row it is, booked with the token so that the
// poll that sees the job end sees it too. Returns 1 if the token was
// recorded and the job goes on, 0 if it was recorded and ended the job
// (max_tokens, the context), -1 if it was not (a stop id, a failure, a job
// that had finished already); *out gets the sampled token (-1 when
// sampling failed)
static int
emit(struct sched *s, struct job *j, const float *row, int len, const struct vrow *vr, int32_t *out)
{
	char err[AD_ERRLEN];
	struct sched_event ev = {0};
	uint64_t t0 = ad_now_ns();
	if (j->want_top)
		ev.n_top = sample_top(row, s->V, ev.top, SCHED_TOP);
	int32_t tok = j->gram ? gram_sample(j->gram, j->smp, row, err) : sample_next(j->smp, row, err);
	ev.draws = sample_draws(j->smp);
	int done = 0;
	if (tok >= 0 && j->gram) {
		ev.grammar_on = gram_triggered(j->gram, &ev.grammar_from);
		done = gram_done(j->gram);
	}
	if (tok >= 0 && j->logprobs) {
		int m = sample_logprobs(row, s->V, tok, j->top_logprobs, &ev.lp, ev.lp_top, err);
		if (m < 0)
			tok = -1;
		ev.has_lp = m >= 0;
		ev.n_lp = m > 0 ? m : 0;
	}
	*out = tok;
	engine_add_sampling(s->e, j->seq, ad_now_ns() - t0);
	if (trace_enabled())
		trace_since(t0, "sampling", "sample (job %llu)", (unsigned long long)j->id);
	int stop = 0, rv = -1;
	for (int i = 0; i < j->n_stop; i++)
		stop |= tok == j->stop[i];

	pthread_mutex_lock(&s->mu);
	update_timings(j);
	if (j->finish != SCHED_RUNNING) {
		// cancelled or timed out during the call
	} else if (tok < 0) {
		finish(s, j, SCHED_ERROR, SCHED_EINTERNAL, "sampling: %s", err);
	} else if (stop) {
		finish(s, j, SCHED_STOP, SCHED_OK, NULL);
	} else if (j->n_ev == j->cap_ev && j->cap_ev >= 1 << 20) {
		finish(s, j, SCHED_ERROR, SCHED_EINTERNAL, "%d tokens not polled", j->n_ev);
	} else {
		if (j->n_ev == j->cap_ev) {
			int cap = j->cap_ev ? 2 * j->cap_ev : 16;
			struct sched_event *p = realloc(j->ev, (size_t)cap * sizeof *p);
			if (!p) {
				finish(s, j, SCHED_ERROR, SCHED_EINTERNAL, "out of memory");
				goto out;
			}
			j->ev = p;
			j->cap_ev = cap;
		}
		ev.id = tok;
		ev.index = j->produced++;
		j->ev[j->n_ev++] = ev;
		s->st.tokens++;
		rv = 0;
		if (vr && vr->k)
			spec_book(s, j, vr, tok, 1);
		if (done) { // the grammar can only end: the reply is complete
			finish(s, j, SCHED_STOP, SCHED_OK, NULL);
		} else if ((int)j->produced >= j->max_tokens || len >= s->max_seq) {
			finish(s, j, SCHED_LENGTH, SCHED_OK, NULL);
		} else {
			j->next_tok = tok;
			rv = 1;
		}
		// a holding poller wakes at the end of its frame or of the job,
		// not at every token (finish broadcasts)
		if (j->waiters > j->holders)
			pthread_cond_broadcast(&j->cv);
	}
out:
	if (rv < 0 && vr && vr->k)
		spec_book(s, j, vr, tok, 0);
	pthread_mutex_unlock(&s->mu);
	return rv;
}

// --- speculative decoding (spec.h) ---------------------------------------------------------

// the draft of decoding job j for its next step: at most budget tokens,
// and no more than the job can still use (one token of the step comes
// from the row of its own token) or the context holds; in out, with the
// match's n-gram in *ngram
static int
draft(struct sched *s, struct job *j, int budget, int32_t *out, int *ngram)
{
	*ngram = 0;
	if (!j->spec || s->spec.draft <= 0)
		return 0;
	const int len = engine_seq_len(j->seq);
	int room = s->spec.draft < budget ? s->spec.draft : budget;
	if (room > j->max_tokens - (int)j->produced - 1)
		room = j->max_tokens - (int)j->produced - 1;
	if (room > s->max_seq - 1 - len)
		room = s->max_seq - 1 - len;
	if (room <= 0)
		return 0;
	int k = spec_find(engine_seq_tokens(j->seq), len, j->next_tok, s->spec.ngram_min, s->spec.ngram_max, room, out,
	                  ngram);
	return spec_len(&j->spec_st, *ngram, spec_col_cost(s), k);
}

// decode_columns lays out a decode step of the n jobs in cjobs: job i's
// token at column coff[i], then its nk[i] draft tokens, the drafts taking
// at most budget columns in all (the first jobs first); returns the
// columns
static int
decode_columns(struct sched *s, int n, int budget)
{
	int col = 0;
	for (int i = 0; i < n; i++) {
		struct job *j = s->cjobs[i];
		s->coff[i] = col;
		s->cols[col] = j->seq;
		s->toks[col++] = j->next_tok;
		int k = budget > 0 ? draft(s, j, budget, s->toks + col, &s->ngram[i]) : 0;
		for (int c = 0; c < k; c++)
			s->cols[col++] = j->seq;
		s->nk[i] = k;
		budget -= k;
	}
	return col;
}

// verify emits the tokens of decoding job i of the step from its rows of
// logits (its token's, then one per draft token): row r's sample goes out,
// and row r + 1 is looked at only if that sample is draft token r. The
// rows of the draft tokens after the first that differs are dropped, and
// the job's decode booking keeps the rows that were sampled.
static void
verify(struct sched *s, int i, const float *rows)
{
	struct job *j = s->cjobs[i];
	const int k = s->nk[i], L = engine_seq_len(j->seq) - 1 - k;
	const int32_t *d = s->toks + s->coff[i] + 1;
	// the decode booking counts a row as it is sampled (the engine booked
	// all k + 1), so the timings the job ends with are right
	struct gen_timings *t = engine_seq_timings(j->seq);
	t->decode_tokens -= (uint32_t)k;
	int acc = 0;
	for (int r = 0;; r++) {
		int32_t tok;
		if (r > 0)
			t->decode_tokens++;
		struct vrow vr = {k, s->ngram[i], r, r < k ? d[r] : -1};
		int rv = emit(s, j, rows + (size_t)r * s->V, L + r + 1, &vr, &tok);
		int same = r < k && tok == d[r];
		if (same && rv >= 0)
			acc++;
		if (rv <= 0 || r == k || !same)
			break;
	}
	if (k)
		engine_seq_truncate(j->seq, L + 1 + acc);
}

static void
prefill_chunk(struct sched *s, struct job *j)
{
	char err[AD_ERRLEN];
	int m = j->keep - j->fed < s->width ? j->keep - j->fed : s->width;
	int last = j->fed + m == j->keep;
	for (int c = 0; c < m; c++) {
		s->cols[c] = j->seq;
		s->want[c] = last && c == m - 1;
	}
	uint64_t t0 = ad_now_ns();
	if (engine_forward(s->e, s->cols, j->prompt + j->fed, m, s->want, last ? s->logits : NULL, 1, err)) {
		fail_job(s, j, SCHED_EUNAVAILABLE, "prefill", err);
		return;
	}
	if (trace_enabled())
		trace_since(t0, "step", "prefill chunk (%d at %d)", m, j->fed);
	j->fed += m;
	cache_store(s, j);
	if (!last) {
		pthread_mutex_lock(&s->mu);
		update_timings(j);
		pthread_mutex_unlock(&s->mu);
		return;
	}
	j->state = J_DECODE;
	int32_t tok;
	emit(s, j, s->logits, engine_seq_len(j->seq), NULL, &tok);
}

// fused runs one decode step of the n jobs in cjobs (d columns laid out by
// decode_columns) and the next prefill chunk of pj in the rest of the
// width, in ONE call: the kernels cost the same for any number of
// columns, and a token's logits do not depend on what shares its call.
// The call is booked as decode; pj's share is moved to its prefill time.
static void
fused(struct sched *s, int n, int d, struct job *pj)
{
	char err[AD_ERRLEN];
	int m = pj->keep - pj->fed < s->width - d ? pj->keep - pj->fed : s->width - d;
	int last = pj->fed + m == pj->keep;
	for (int c = 0; c < d; c++)
		s->want[c] = 1;
	for (int c = 0; c < m; c++) {
		s->cols[d + c] = pj->seq;
		s->toks[d + c] = pj->prompt[pj->fed + c];
		s->want[d + c] = last && c == m - 1;
	}
	struct gen_timings *pt = engine_seq_timings(pj->seq), before = *pt;
	uint64_t t0 = ad_now_ns();
	if (engine_forward(s->e, s->cols, s->toks, d + m, s->want, s->logits, 0, err)) {
		for (int i = 0; i < n; i++)
			fail_job(s, s->cjobs[i], SCHED_EUNAVAILABLE, "decode", err);
		fail_job(s, pj, SCHED_EUNAVAILABLE, "prefill", err);
		return;
	}
	if (trace_enabled())
		trace_since(t0, "step", "decode step (%d, %d columns) + prefill (%d)", n, d, m);
	pt->prefill_ns += pt->decode_ns - before.decode_ns;
	pt->prefill_tokens += pt->decode_tokens - before.decode_tokens;
	pt->decode_ns = before.decode_ns;
	pt->decode_tokens = before.decode_tokens;
	pj->fed += m;
	cache_store(s, pj);
	pthread_mutex_lock(&s->mu);
	s->st.steps++;
	s->st.step_columns += (uint64_t)n;
	s->st.fused++;
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < n; i++)
		verify(s, i, s->logits + (size_t)s->coff[i] * s->V);
	if (last) {
		pj->state = J_DECODE;
		int32_t tok;
		emit(s, pj, s->logits + (size_t)d * s->V, engine_seq_len(pj->seq), NULL, &tok);
	} else {
		pthread_mutex_lock(&s->mu);
		update_timings(pj);
		pthread_mutex_unlock(&s->mu);
	}
}

// a turn: set up the newly admitted, then one batched decode step of every
// decoding job (with the drafts of those that have one, spec.h) and one
// prefill chunk of the oldest prefilling job, in one call when they fit
// the width
static void
turn(struct sched *s, int n_active)
{
	char err[AD_ERRLEN];
	struct job *pj = NULL;
	int n = 0;
	for (int i = 0; i < n_active; i++) {
		struct job *j = s->active[i];
		if (j->state == J_ADMITTED)
			setup(s, j);
		if (j->state == J_DECODE && j->smp)
			s->cjobs[n++] = j;
		else if (j->state == J_PREFILL && j->smp && !pj)
			pj = j;
	}
	if (pj && !pj->looked)
		cache_lookup(s, pj);
	// sharing a call costs the prompt the decode columns: worth it while
	// they are at most half the width (else two calls feed it faster), so
	// the drafts keep within that half when a prompt waits
	const int fuse = pj && n > 0 && n <= s->width / 2;
	int cap = fuse ? s->width / 2 : s->width;
	if (cap > s->lrows - 1)
		cap = s->lrows - 1;
	const int d = decode_columns(s, n, cap - n);
	if (fuse) {
		fused(s, n, d, pj);
		return;
	}
	// calls of at most rows jobs and lrows - 1 columns, a job's columns
	// never split
	for (int g = 0; g < n;) {
		int m = 0;
		const int c0 = s->coff[g];
		while (g + m < n && m < s->rows && s->coff[g + m] + 1 + s->nk[g + m] - c0 <= s->lrows - 1)
			m++;
		if (m == 0)
			m = 1;
		const int cols = s->coff[g + m - 1] + 1 + s->nk[g + m - 1] - c0;
		uint64_t t0 = ad_now_ns();
		if (engine_forward(s->e, s->cols + c0, s->toks + c0, cols, NULL, s->logits, 0, err)) {
			for (int i = 0; i < m; i++)
				fail_job(s, s->cjobs[g + i], SCHED_EUNAVAILABLE, "decode", err);
			g += m;
			continue;
		}
		spec_cost_add(&s->cost, cols, (double)(ad_now_ns() - t0));
		if (trace_enabled())
			trace_since(t0, "step", "decode step (%d, %d columns)", m, cols);
		pthread_mutex_lock(&s->mu);
		s->st.steps++;
		s->st.step_columns += (uint64_t)m;
		pthread_mutex_unlock(&s->mu);
		for (int i = 0; i < m; i++)
			verify(s, g + i, s->logits + (size_t)(s->coff[g + i] - c0) * s->V);
		g += m;
	}
	if (pj)
		prefill_chunk(s, pj);
}

// an embedding request in progress: SCHED_EMBED_SLOTS sequences, each
// taking the next input when it is done; every call packs the slots' next
// tokens in slot order up to the width. One call per turn of the engine
// thread, so running streams keep their pace during a large request.
struct embed_run {
	struct eval *ev;
	int slots, next;
	struct engine_seq *seq[SCHED_EMBED_SLOTS];
	int in[SCHED_EMBED_SLOTS], fed[SCHED_EMBED_SLOTS];
	double *acc; // [slots][E]
	float *hid;  // [width][E]
	int *col_slot, *col_pos;
	int32_t *toks;
};

static void
embed_free(struct embed_run *r)
{
	if (!r)
		return;
	for (int k = 0; k < r->slots; k++)
		engine_seq_free(r->seq[k]);
	free(r->acc);
	free(r->hid);
	free(r->col_slot);
	free(r->col_pos);
	free(r->toks);
	free(r);
}

static struct embed_run *
embed_start(struct sched *s, struct eval *ev, char *err)
{
	const int E = engine_n_embd(s->e), W = s->width;
	struct embed_run *r = calloc(1, sizeof *r);
	if (!r)
		return ad_err(err, "embeddings: out of memory"), NULL;
	r->ev = ev;
	r->slots = SCHED_EMBED_SLOTS < ev->n ? SCHED_EMBED_SLOTS : ev->n;
	r->acc = calloc((size_t)r->slots * E, sizeof *r->acc);
	r->hid = malloc((size_t)W * E * sizeof *r->hid);
	r->col_slot = malloc((size_t)W * sizeof *r->col_slot);
	r->col_pos = malloc((size_t)W * sizeof *r->col_pos);
	r->toks = malloc((size_t)W * sizeof *r->toks);
	if (!r->acc || !r->hid || !r->col_slot || !r->col_pos || !r->toks) {
		embed_free(r);
		return ad_err(err, "embeddings: out of memory"), NULL;
	}
	for (int k = 0; k < r->slots; k++) {
		r->in[k] = -1;
		if (!(r->seq[k] = engine_seq_new(s->e, err))) {
			embed_free(r);
			return NULL;
		}
	}
	return r;
}

// one kernel call of the request: 1 while there is more, 0 when every
// vector is in ev->logits (n x E), -1 on a failure
static int
embed_step(struct sched *s, struct embed_run *r, char *err)
{
	struct eval *ev = r->ev;
	const int E = engine_n_embd(s->e), W = s->width;
	for (int k = 0; k < r->slots; k++)
		if (r->in[k] < 0 && r->next < ev->n) {
			r->in[k] = r->next++;
			r->fed[k] = 0;
			engine_seq_reset(r->seq[k]);
			memset(r->acc + (size_t)k * E, 0, (size_t)E * sizeof *r->acc);
		}
	int m = 0;
	for (int k = 0; k < r->slots && m < W; k++) {
		if (r->in[k] < 0)
			continue;
		const int32_t *ids = ev->inputs[r->in[k]];
		for (int p = r->fed[k]; p < ev->lens[r->in[k]] && m < W; p++, m++) {
			s->cols[m] = r->seq[k];
			r->toks[m] = ids[p];
			r->col_slot[m] = k;
			r->col_pos[m] = p;
		}
	}
	if (m == 0)
		return 0;
	if (engine_forward_hidden(s->e, s->cols, r->toks, m, r->hid, err))
		return -1;
	for (int c = 0; c < m; c++) {
		int k = r->col_slot[c], p = r->col_pos[c], len = ev->lens[r->in[k]];
		const float *h = r->hid + (size_t)c * E;
		double *a = r->acc + (size_t)k * E;
		if (ev->pooling == SCHED_POOL_MEAN)
			for (int i = 0; i < E; i++)
				a[i] += h[i];
		else if ((ev->pooling == SCHED_POOL_CLS && p == 0) || (ev->pooling == SCHED_POOL_LAST && p == len - 1))
			for (int i = 0; i < E; i++)
				a[i] = h[i];
		r->fed[k] = p + 1;
	}
	int busy = r->next < ev->n;
	for (int k = 0; k < r->slots; k++) {
		if (r->in[k] < 0)
			continue;
		if (r->fed[k] < ev->lens[r->in[k]]) {
			busy = 1;
			continue;
		}
		double *a = r->acc + (size_t)k * E, norm = 0;
		if (ev->pooling == SCHED_POOL_MEAN)
			for (int i = 0; i < E; i++)
				a[i] /= ev->lens[r->in[k]];
		for (int i = 0; i < E; i++)
			norm += a[i] * a[i];
		norm = norm > 0 ? 1.0 / sqrt(norm) : 0;
		float *o = ev->logits + (size_t)r->in[k] * E;
		for (int i = 0; i < E; i++)
			o[i] = (float)(a[i] * norm);
		r->in[k] = -1;
	}
	return busy;
}

// run_embed advances the embedding request ev by one call; when it is not
// finished, ev goes back to the head of the queue
static void
run_embed(struct sched *s, struct eval *ev)
{
	char err[AD_ERRLEN] = "";
	int rv = -1;
	if (!s->embed || s->embed->ev != ev) {
		embed_free(s->embed);
		s->embed = embed_start(s, ev, err);
	}
	if (s->embed)
		rv = embed_step(s, s->embed, err);
	pthread_mutex_lock(&s->mu);
	if (rv == 1 && s->stopping) {
		rv = -1;
		snprintf(err, sizeof err, "the worker is shutting down");
	}
	if (rv == 1) {
		ev->next = s->evals;
		s->evals = ev;
		if (!s->evals_tail)
			s->evals_tail = ev;
	} else {
		ev->rc = rv;
		if (rv) {
			ev->code = SCHED_EUNAVAILABLE;
			snprintf(ev->msg, sizeof ev->msg, "embeddings: %.*s", (int)sizeof ev->msg - 13, err);
		}
		ev->done = 1;
		pthread_cond_broadcast(&s->done);
	}
	pthread_mutex_unlock(&s->mu);
	if (rv != 1) {
		embed_free(s->embed);
		s->embed = NULL;
	}
}

static void
run_eval(struct sched *s, struct eval *ev)
{
	char err[AD_ERRLEN] = "";
	int rv = 0;
	if (ev->embed) {
		run_embed(s, ev);
		return;
	}
	if (!s->eval_seq && !(s->eval_seq = engine_seq_new(s->e, err)))
		rv = -1;
	if (rv == 0 && ev->layers) {
		// every row is computed; the last one is kept with last_only
		float *rows = ev->logits;
		if (ev->last_only && !(rows = malloc((size_t)ev->n * s->V * sizeof(float)))) {
			ad_err(err, "no memory for %d x %d logits", ev->n, s->V);
			rv = -1;
		}
		if (rv == 0)
			rv = engine_eval_layers(s->e, s->eval_seq, ev->ids, ev->n, ev->per_token, ev->layers, rows,
			                        err);
		if (rows != ev->logits) {
			if (rv == 0)
				memcpy(ev->logits, rows + (size_t)(ev->n - 1) * s->V, (size_t)s->V * sizeof(float));
			free(rows);
		}
	} else if (rv == 0 && !ev->last_only) {
		rv = engine_eval(s->e, s->eval_seq, ev->ids, ev->n, ev->per_token, ev->logits, err);
	} else if (rv == 0) {
		engine_seq_reset(s->eval_seq);
		const int step = ev->per_token ? 1 : s->width;
		for (int off = 0; off < ev->n && rv == 0; off += step) {
			int m = ev->n - off < step ? ev->n - off : step;
			int last = off + m == ev->n;
			for (int c = 0; c < m; c++) {
				s->cols[c] = s->eval_seq;
				s->want[c] = last && c == m - 1;
			}
			rv = engine_forward(s->e, s->cols, ev->ids + off, m, s->want, last ? ev->logits : NULL, 1, err);
		}
	}
	pthread_mutex_lock(&s->mu);
	ev->rc = rv;
	if (rv) {
		ev->code = SCHED_EUNAVAILABLE;
		// cut to the room (err and msg are both AD_ERRLEN)
		snprintf(ev->msg, sizeof ev->msg, "eval: %.*s", (int)sizeof ev->msg - 7, err);
	}
	ev->done = 1;
	pthread_cond_broadcast(&s->done);
	pthread_mutex_unlock(&s->mu);
}

static void *
engine_main(void *arg)
{
	struct sched *s = arg;
	ad_thread_name("engine");
	pthread_mutex_lock(&s->mu);
	for (;;) {
		uint64_t now = ad_now_ns();
		if (now - s->last_housekeep >= HOUSEKEEP_NS) {
			housekeep(s, now);
			s->last_housekeep = now;
		}
		for (int i = 0; i < s->n_active;)
			if (s->active[i]->finish != SCHED_RUNNING)
				detach(s, i);
			else
				i++;
		while (s->n_active < s->o.parallel && s->qhead) {
			struct job *j = s->qhead;
			unqueue(s, j);
			j->active = 1;
			j->admit_ns = now;
			j->state = J_ADMITTED;
			s->active[s->n_active++] = j;
		}
		struct eval *ev = s->evals;
		if (ev && !(s->evals = ev->next))
			s->evals_tail = NULL;
		if (!ev && s->n_active == 0) {
			if (s->stopping)
				break;
			cond_wait_until(&s->work, &s->mu, ad_now_ns() + 250000000u);
			continue;
		}
		int n_active = s->n_active;
		pthread_mutex_unlock(&s->mu);
		if (ev)
			run_eval(s, ev);
		if (n_active)
			turn(s, n_active);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

// --- the API ----------------------------------------------------------------------------

struct sched *
sched_new(struct engine *e, const struct sched_opts *o, char *err)
{
	struct sched *s = calloc(1, sizeof *s);
	if (!s)
		return ad_err(err, "out of memory"), NULL;
	if (pthread_mutex_init(&s->mu, NULL) || cond_init(&s->work) || cond_init(&s->done)) {
		free(s);
		return ad_err(err, "scheduler: cannot initialise locks"), NULL;
	}
	if (o)
		s->o = *o;
	if (s->o.parallel <= 0)
		s->o.parallel = 4;
	if (s->o.queue <= 0)
		s->o.queue = 16;
	if (s->o.sessions <= 0)
		s->o.sessions = 8;
	if (s->o.abandon_ms <= 0)
		s->o.abandon_ms = 60000;
	if (s->o.grace_ms <= 0)
		s->o.grace_ms = 10000;
	s->e = e;
	s->V = engine_n_vocab(e);
	s->width = engine_width(e);
	s->max_seq = engine_max_seq(e);
	s->bos = engine_bos(e);
	s->rows = s->o.parallel < s->width ? s->o.parallel : s->width;
	if (o && o->spec)
		s->spec = *o->spec;
	else
		spec_defaults(&s->spec);
	s->o.spec = NULL; // the caller's; s->spec is the copy
	if (spec_check(&s->spec, err)) {
		pthread_mutex_destroy(&s->mu);
		pthread_cond_destroy(&s->work);
		pthread_cond_destroy(&s->done);
		free(s);
		return NULL;
	}
	// a recurrent state goes back only to a kept copy (engine_seq_truncate):
	// a rejected draft could not be taken back, so no drafts
	if (engine_state_bytes(e) > 0)
		s->spec.draft = 0;
	// a decode call's rows: every job's token and draft (within the
	// width), and a prefill chunk's last
	int lr = s->o.parallel * (1 + s->spec.draft);
	s->lrows = (lr < s->width ? lr : s->width) + 1;
	// job ids of a restarted worker do not meet its predecessor's
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	s->next_id = (((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000) << 10) + 1;
	// a decode row per job of a call, and one for a prefill chunk's last
	int ncols = s->o.parallel > s->width ? s->o.parallel : s->width;
	s->active = calloc((size_t)s->o.parallel, sizeof *s->active);
	s->cols = calloc((size_t)ncols, sizeof *s->cols);
	s->cjobs = calloc((size_t)s->o.parallel, sizeof *s->cjobs);
	s->coff = calloc((size_t)s->o.parallel, sizeof *s->coff);
	s->nk = calloc((size_t)s->o.parallel, sizeof *s->nk);
	s->ngram = calloc((size_t)s->o.parallel, sizeof *s->ngram);
	s->toks = calloc((size_t)ncols, sizeof *s->toks);
	s->want = calloc((size_t)s->width, 1);
	// rows the LM head writes into directly where the engine has them
	char why[AD_ERRLEN];
	if (!(s->logits = engine_logits_alloc(e, s->lrows, why))) {
		s->logits = malloc((size_t)s->lrows * s->V * sizeof(float));
		s->own_logits = 1;
	}
	if (!s->active || !s->cols || !s->cjobs || !s->coff || !s->nk || !s->ngram || !s->toks || !s->want ||
	    !s->logits) {
		sched_free(s);
		return ad_err(err, "scheduler: out of memory"), NULL;
	}
	// the cache restores KV rows (lfm2's conv inputs among them) and token
	// history; a recurrent model's state goes with the blocks that have one
	if (s->o.cache_mem) {
		int B = s->o.cache_block > 0 ? s->o.cache_block : SCHED_CACHE_BLOCK;
		size_t wb = engine_kv_window(e) > 0 ? engine_kv_part_bytes(e, ENGINE_KV_WINDOWED) : 0;
		s->win = wb ? engine_kv_window(e) : 0;
		if (!(s->pc = pcache_new(B, engine_kv_part_bytes(e, ENGINE_KV_FULL), wb, engine_state_bytes(e),
		                         s->o.cache_mem, err))) {
			sched_free(s);
			return NULL;
		}
		s->max_blocks = s->max_seq / B;
		if (!(s->rowbuf = malloc((size_t)B * engine_kv_row_bytes(e) + 1)) ||
		    (engine_state_bytes(e) && !(s->statebuf = malloc(engine_state_bytes(e))))) {
			sched_free(s);
			return ad_err(err, "scheduler: out of memory"), NULL;
		}
	}
	if (pthread_create(&s->thread, NULL, engine_main, s)) {
		sched_free(s);
		return ad_err(err, "scheduler: cannot start the engine thread"), NULL;
	}
	s->started = 1;
	return s;
}

void
sched_shutdown(struct sched *s)
{
	pthread_mutex_lock(&s->mu);
	s->stopping = 1;
	for (struct job *j = s->jobs; j; j = j->next)
		finish(s, j, SCHED_ERROR, SCHED_EUNAVAILABLE, "the worker is shutting down after %u tokens",
		       j->produced);
	for (struct eval *ev = s->evals; ev; ev = ev->next) {
		ev->rc = -1;
		ev->code = SCHED_EUNAVAILABLE;
		snprintf(ev->msg, sizeof ev->msg, "eval: the worker is shutting down");
		ev->done = 1;
	}
	s->evals = s->evals_tail = NULL;
	pthread_cond_broadcast(&s->work);
	pthread_cond_broadcast(&s->done);
	pthread_mutex_unlock(&s->mu);
}

void
sched_free(struct sched *s)
{
	if (!s)
		return;
	if (s->started) {
		sched_shutdown(s);
		pthread_join(s->thread, NULL);
	}
	while (s->n_active)
		detach(s, 0);
	while (s->jobs) {
		struct job *j = s->jobs;
		s->jobs = j->next;
		job_free(j);
	}
	while (s->sessions)
		session_free(s, s->sessions);
	for (int i = 0; i < SCHED_GRAMMARS; i++) {
		gbnf_free(s->gcache[i].g);
		free(s->gcache[i].text);
	}
	while (s->leases) {
		struct lease *l = s->leases;
		s->leases = l->next;
		free(l);
	}
	pcache_free(s->pc);
	free(s->rowbuf);
	free(s->statebuf);
	engine_seq_free(s->eval_seq);
	embed_free(s->embed);
	free(s->active);
	free(s->cols);
	free(s->cjobs);
	free(s->coff);
	free(s->nk);
	free(s->ngram);
	free(s->toks);
	free(s->want);
	if (s->own_logits)
		free(s->logits);
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->done);
	free(s);
}

// claim_session finds or makes the session and holds it for j; computes
// the reusable prefix. Under the lock.
static int
claim_session(struct sched *s, struct job *j, const char *name, enum sched_code *code, char *err)
{
	struct session *x = find_session(s, name);
	// a finished job lets go of its session at the engine thread's next turn
	uint64_t until = ad_now_ns() + (uint64_t)SESSION_WAIT_MS * 1000000u;
	while (x && x->busy && x->busy->finish != SCHED_RUNNING && !s->stopping) {
		if (cond_wait_until(&s->done, &s->mu, until) == ETIMEDOUT)
			break;
		x = find_session(s, name);
	}
	if (x && x->busy)
		return fail(code, SCHED_EUNAVAILABLE, err, "session '%s' is busy with job %llu", name,
		            (unsigned long long)x->busy->id);
	if (x && x->drop) {
		session_free(s, x);
		x = NULL;
	}
	if (!x) {
		if (s->n_sessions >= s->o.sessions) {
			struct session *lru = NULL;
			for (struct session *y = s->sessions; y; y = y->next)
				if (!y->busy && (!lru || y->used_ns < lru->used_ns))
					lru = y;
			if (!lru)
				return fail(code, SCHED_EUNAVAILABLE, err, "all %d sessions are busy", s->o.sessions);
			session_free(s, lru);
		}
		if (!(x = calloc(1, sizeof *x)))
			return fail(code, SCHED_EINTERNAL, err, "out of memory");
		snprintf(x->name, sizeof x->name, "%s", name);
		x->next = s->sessions;
		s->sessions = x;
		s->n_sessions++;
	}
	int reuse = 0;
	if (x->seq)
		reuse = engine_seq_common(x->seq, j->prompt, j->keep - 1);
	j->reuse = reuse;
	x->busy = j;
	x->used_ns = ad_now_ns();
	j->sess = x;
	return 0;
}

// --- grammars -----------------------------------------------------------------------------

// the compiled grammar of this text, from the cache or compiled now (outside
// the lock); NULL with the compiler's message. The caller holds a reference.
static struct gcache *
gcache_get(struct sched *s, const char *text, size_t len, char *err)
{
	pthread_mutex_lock(&s->mu);
	for (int i = 0; i < SCHED_GRAMMARS; i++) {
		struct gcache *c = &s->gcache[i];
		if (c->g && c->len == len && memcmp(c->text, text, len) == 0) {
			c->refs++;
			c->used = ++s->gclock;
			pthread_mutex_unlock(&s->mu);
			return c;
		}
	}
	pthread_mutex_unlock(&s->mu);
	struct gbnf *g = NULL;
	if (gbnf_compile(text, len, NULL, s->o.vocab.find, s->o.vocab.ctx, &g, err))
		return NULL;
	char *copy = malloc(len + 1);
	if (!copy) {
		gbnf_free(g);
		ad_err(err, "grammar: out of memory");
		return NULL;
	}
	memcpy(copy, text, len);
	copy[len] = 0;
	pthread_mutex_lock(&s->mu);
	// the least recently used slot no job holds (a grammar compiled by
	// another request meanwhile is as good as this one)
	struct gcache *slot = NULL;
	for (int i = 0; i < SCHED_GRAMMARS; i++) {
		struct gcache *c = &s->gcache[i];
		if (c->g && c->len == len && memcmp(c->text, text, len) == 0) {
			c->refs++;
			c->used = ++s->gclock;
			pthread_mutex_unlock(&s->mu);
			gbnf_free(g);
			free(copy);
			return c;
		}
		if (c->refs == 0 && (!slot || !c->g || (slot->g && c->used < slot->used)))
			slot = c;
	}
	if (!slot) { // every slot in use: this job keeps its own copy
		pthread_mutex_unlock(&s->mu);
		slot = calloc(1, sizeof *slot);
		if (!slot) {
			gbnf_free(g);
			free(copy);
			ad_err(err, "grammar: out of memory");
			return NULL;
		}
		*slot = (struct gcache){copy, len, g, 1, 0, 1};
		return slot;
	}
	gbnf_free(slot->g);
	free(slot->text);
	*slot = (struct gcache){copy, len, g, 1, ++s->gclock, 0};
	pthread_mutex_unlock(&s->mu);
	return slot;
}

// drop a reference; under the lock
static void
gcache_put(struct gcache *c)
{
	if (!c)
		return;
	if (!c->own) {
		c->refs--;
		return;
	}
	gbnf_free(c->g);
	free(c->text);
	free(c);
}

// a job's grammar and its matcher
static int
grammar_job(struct sched *s, const struct sched_gen *g, struct job *j, enum sched_code *code, char *err)
{
	if (!g->grammar || !g->grammar_len)
		return 0;
	if (!s->o.vocab.get)
		return fail(code, SCHED_EUNSUPPORTED, err,
		            "grammar: this worker was started without a vocabulary source, so it takes no grammars");
	char msg[AD_ERRLEN];
	const struct gram_vocab *v = s->o.vocab.get(s->o.vocab.ctx, msg);
	if (!v)
		return fail(code, SCHED_EINTERNAL, err, "grammar: the model's vocabulary: %s", msg);
	if (gram_vocab_size(v) != s->V)
		return fail(code, SCHED_EINTERNAL, err, "grammar: a vocabulary of %d tokens for a model of %d",
		            gram_vocab_size(v), s->V);
	if (!(j->gc = gcache_get(s, g->grammar, g->grammar_len, msg)))
		return fail(code, SCHED_EBADREQ, err, "%s", msg);
	struct gram_opts o = {
		.g = j->gc->g,
		.v = v,
		.stop = g->stop_ids,
		.n_stop = g->n_stop,
		.lazy = g->grammar_lazy,
		.words = g->grammar_words,
		.n_words = g->n_grammar_words,
		.trigger_ids = g->grammar_tokens,
		.n_trigger_ids = g->n_grammar_tokens,
	};
	char e2[AD_ERRLEN];
	int bad = !(j->gram = gram_new(&o, msg));
	// a continued job: the grammar takes the tokens the lost one delivered
	for (int i = 0; !bad && i < g->grammar_replay; i++)
		if (gram_accept(j->gram, g->prompt[g->n_prompt - g->grammar_replay + i], e2)) {
			snprintf(msg, sizeof msg, "grammar_replay: token %d: %.*s", i, AD_ERRLEN - 64, e2);
			bad = 1;
		}
	if (bad) {
		gram_free(j->gram);
		j->gram = NULL;
		pthread_mutex_lock(&s->mu);
		gcache_put(j->gc);
		pthread_mutex_unlock(&s->mu);
		j->gc = NULL;
		return fail(code, SCHED_EBADREQ, err, "%s", msg);
	}
	return 0;
}

int
sched_generate(struct sched *s, const struct sched_gen *g, struct sched_started *out, enum sched_code *code, char *err)
{
	if (g->n_prompt < 1 || !g->prompt)
		return fail(code, SCHED_EBADREQ, err, "prompt: empty");
	for (int i = 0; i < g->n_prompt; i++)
		if (g->prompt[i] < 0 || g->prompt[i] >= s->V)
			return fail(code, SCHED_EBADREQ, err, "prompt[%d]: token id %d is outside the vocabulary of %d",
			            i, g->prompt[i], s->V);
	if (g->max_tokens < 1)
		return fail(code, SCHED_EBADREQ, err, "max_tokens: must be at least 1 (got %d)", g->max_tokens);
	if (g->grammar_replay < 0 || g->grammar_replay > g->n_prompt)
		return fail(code, SCHED_EBADREQ, err, "grammar_replay: %d, more than the prompt's %d tokens",
		            g->grammar_replay, g->n_prompt);
	char msg[AD_ERRLEN];
	if (sample_check(&g->sp, msg))
		return fail(code, SCHED_EBADREQ, err, "sampling: %s", msg);
	for (int i = 0; i < g->sp.n_bias; i++)
		if (g->sp.bias[i].id < 0 || g->sp.bias[i].id >= s->V)
			return fail(code, SCHED_EBADREQ, err,
			            "logit_bias[%d]: token id %d is outside the vocabulary of %d", i, g->sp.bias[i].id,
			            s->V);
	if (g->speculative < SCHED_SPEC_DEFAULT || g->speculative > SCHED_SPEC_ON)
		return fail(code, SCHED_EBADREQ, err, "speculative: %d (0 the worker's choice, 1 off, 2 on)",
		            g->speculative);
	if (g->top_logprobs < 0 || g->top_logprobs > SCHED_TOP_LOGPROBS)
		return fail(code, SCHED_EBADREQ, err, "top_logprobs: must be in [0, %d] (got %d)", SCHED_TOP_LOGPROBS,
		            g->top_logprobs);
	if (g->n_stop < 0 || g->n_stop > MAX_STOP_IDS)
		return fail(code, SCHED_EBADREQ, err, "stop_ids: at most %d (got %d)", MAX_STOP_IDS, g->n_stop);
	for (int i = 0; i < g->n_stop; i++)
		if (g->stop_ids[i] < 0 || g->stop_ids[i] >= s->V)
			return fail(code, SCHED_EBADREQ, err,
			            "stop_ids[%d]: token id %d is outside the vocabulary of %d", i, g->stop_ids[i],
			            s->V);
	const char *name = g->session && g->session[0] ? g->session : NULL;
	if (name && strlen(name) >= SCHED_SESSION_MAX)
		return fail(code, SCHED_EBADREQ, err, "session: the name is longer than %d bytes",
		            SCHED_SESSION_MAX - 1);
	// a sampler draws at most once per token, and a sequence holds at most max_seq
	if (g->skip_draws > (uint64_t)s->max_seq)
		return fail(code, SCHED_EBADREQ, err, "skip_draws: %llu, more than the context's %d tokens",
		            (unsigned long long)g->skip_draws, s->max_seq);
	const char *client = g->client && g->client[0] ? g->client : NULL;
	if (client && (strlen(client) >= SCHED_CLIENT_MAX || g->lease_ms < SCHED_LEASE_MIN_MS ||
	               g->lease_ms > SCHED_LEASE_MAX_MS))
		return fail(code, SCHED_EBADREQ, err, "client: at most %d bytes, with a lease_ms in [%d, %d] (got %d)",
		            SCHED_CLIENT_MAX - 1, SCHED_LEASE_MIN_MS, SCHED_LEASE_MAX_MS, g->lease_ms);

	// the one rule of fit.h (engine_prompt's)
	const struct fit f = fit_prompt(g->prompt, g->n_prompt, g->max_tokens, s->max_seq, s->bos);
	const int keep = f.keep;
	struct job *j = calloc(1, sizeof *j);
	if (!j || !(j->prompt = malloc((size_t)keep * sizeof *j->prompt)) ||
	    !(j->bias = malloc((size_t)(g->sp.n_bias ? g->sp.n_bias : 1) * sizeof *j->bias)) || cond_init(&j->cv)) {
		if (j) {
			free(j->prompt);
			free(j->bias);
		}
		free(j);
		return fail(code, SCHED_EINTERNAL, err, "out of memory");
	}
	fit_copy(&f, g->prompt, j->prompt);
	j->keep = keep;
	j->dropped = f.dropped;
	j->dropped_from = f.from;
	j->max_tokens = f.max_tokens;
	j->sp = g->sp;
	if (g->sp.n_bias)
		memcpy(j->bias, g->sp.bias, (size_t)g->sp.n_bias * sizeof *j->bias);
	j->sp.bias = j->bias;
	j->logprobs = g->logprobs;
	j->top_logprobs = g->top_logprobs;
	if (g->n_stop)
		memcpy(j->stop, g->stop_ids, (size_t)g->n_stop * sizeof *j->stop);
	j->n_stop = g->n_stop;
	j->want_top = g->want_top;
	j->client_pid = g->client_pid > 0 ? g->client_pid : 0;
	if (client)
		snprintf(j->client, sizeof j->client, "%s", client);
	j->skip_draws = g->skip_draws;
	j->spec = g->speculative == SCHED_SPEC_ON || (g->speculative != SCHED_SPEC_OFF && !s->o.no_spec);
	j->deadline_ms = g->deadline_ms;
	j->submit_ns = j->last_poll_ns = ad_now_ns();
	if (g->deadline_ms)
		j->deadline_ns = j->submit_ns + (uint64_t)g->deadline_ms * 1000000u;
	if (grammar_job(s, g, j, code, err)) {
		job_free(j);
		return -1;
	}

	pthread_mutex_lock(&s->mu);
	// the same Generate again (its reply lost): the job it started
	for (struct job *o = s->jobs; g->request_id && o; o = o->next)
		if (o->request_id == g->request_id) {
			*out = o->started;
			pthread_mutex_unlock(&s->mu);
			job_free(j);
			return 0;
		}
	int rv = 0;
	if (s->stopping)
		rv = fail(code, SCHED_EUNAVAILABLE, err, "the worker is shutting down");
	else if (s->n_queued >= s->o.queue)
		rv = fail(code, SCHED_EUNAVAILABLE, err, "the queue is full (%d jobs waiting)", s->n_queued);
	else if (client && renew_lease(s, client, g->lease_ms, code, err))
		rv = -1;
	else if (name)
		rv = claim_session(s, j, name, code, err);
	if (rv) {
		job_free(j);
		pthread_mutex_unlock(&s->mu);
		return -1;
	}
	j->id = s->next_id++;
	j->next = s->jobs;
	s->jobs = j;
	j->queued = 1;
	if (s->qtail)
		s->qtail->qnext = j;
	else
		s->qhead = j;
	s->qtail = j;
	s->n_queued++;
	out->job = j->id;
	out->prompt_tokens = j->keep;
	out->dropped = j->dropped;
	out->dropped_from = j->dropped_from;
	out->max_tokens = j->max_tokens;
	out->reused = j->reuse;
	j->request_id = g->request_id;
	j->started = *out;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

// ack: drop the events below seen, hand over the rest and keep them;
// else hand over every event and drop them
static int
poll_job(struct sched *s, uint64_t job, int ack, uint64_t seen, int max_wait_ms, int hold_ms, struct sched_poll *out,
         enum sched_code *code, char *err)
{
	memset(out, 0, sizeof *out);
	if (max_wait_ms < 0)
		max_wait_ms = 0;
	if (max_wait_ms > 60000) // a poller holds a server thread
		max_wait_ms = 60000;
	if (hold_ms < 0)
		hold_ms = 0;
	if (hold_ms > max_wait_ms)
		hold_ms = max_wait_ms;
	pthread_mutex_lock(&s->mu);
	struct job *j = find_job(s, job);
	if (!j) {
		pthread_mutex_unlock(&s->mu);
		return fail(code, SCHED_ENOTFOUND, err,
		            "no job %llu (a finished job is forgotten %d ms after its final poll)",
		            (unsigned long long)job, s->o.grace_ms);
	}
	if (ack) {
		if (seen < j->ev_base || seen > (uint64_t)j->ev_base + (uint64_t)j->n_ev) {
			pthread_mutex_unlock(&s->mu);
			return fail(code, SCHED_EBADREQ, err,
			            "poll of job %llu: %llu events seen, but it has events %u to %u",
			            (unsigned long long)job, (unsigned long long)seen, j->ev_base,
			            j->ev_base + (uint32_t)j->n_ev);
		}
		const int k = (int)(seen - j->ev_base);
		if (k > 0) // then ev holds them
			memmove(j->ev, j->ev + k, (size_t)(j->n_ev - k) * sizeof *j->ev);
		j->n_ev -= k;
		j->ev_base = (uint32_t)seen;
	}
	uint64_t now = ad_now_ns(), until = now + (uint64_t)max_wait_ms * 1000000u;
	uint64_t hold = now + (uint64_t)hold_ms * 1000000u;
	j->waiters++;
	j->last_poll_ns = now;
	// the deadline is also kept here: the engine thread may be stuck in a
	// kernel call that waits for an ane-worker to come back
	if (j->deadline_ns && j->deadline_ns < until)
		until = j->deadline_ns;
	if (hold > until)
		hold = until;
	// holding: until hold, only the job's end wakes it (finish); then it
	// waits for a first token like any poller
	int holding = hold_ms > 0;
	j->holders += holding;
	while (j->finish == SCHED_RUNNING && !s->stopping) {
		if (holding && ad_now_ns() >= hold) {
			holding = 0;
			j->holders--;
		}
		if (j->n_ev && !holding)
			break;
		if (cond_wait_until(&j->cv, &s->mu, holding ? hold : until) == ETIMEDOUT && !holding)
			break;
	}
	j->holders -= holding;
	now = ad_now_ns();
	if (j->finish == SCHED_RUNNING && j->deadline_ns && now >= j->deadline_ns)
		finish(s, j, SCHED_ERROR, SCHED_ETIMEOUT, "the deadline of %u ms passed after %u tokens",
		       j->deadline_ms, j->produced);
	int rv = 0;
	if (j->n_ev) {
		out->events = malloc((size_t)j->n_ev * sizeof *out->events);
		if (!out->events) {
			rv = fail(code, SCHED_EINTERNAL, err, "out of memory");
		} else {
			memcpy(out->events, j->ev, (size_t)j->n_ev * sizeof *out->events);
			out->n_events = j->n_ev;
			if (!ack) {
				j->ev_base += (uint32_t)j->n_ev;
				j->n_ev = 0;
			}
		}
	}
	if (rv == 0) {
		out->finish = j->finish;
		out->code = j->code;
		snprintf(out->msg, sizeof out->msg, "%s", j->msg);
		out->timings = j->t;
		out->timings.queue_ns = (j->admit_ns ? j->admit_ns : now) - j->submit_ns;
		out->timings.cached_tokens = (uint32_t)(j->reuse + j->cached);
		out->timings.spec = j->spec_st;
		if (j->finish != SCHED_RUNNING && !j->final_polled) {
			j->final_polled = 1;
			j->final_ns = now;
		}
	}
	j->last_poll_ns = now;
	j->waiters--;
	pthread_mutex_unlock(&s->mu);
	return rv;
}

int
sched_poll(struct sched *s, uint64_t job, int max_wait_ms, struct sched_poll *out, enum sched_code *code, char *err)
{
	return poll_job(s, job, 0, 0, max_wait_ms, 0, out, code, err);
}

int
sched_poll_ack(struct sched *s, uint64_t job, uint64_t seen, int max_wait_ms, int hold_ms, struct sched_poll *out,
               enum sched_code *code, char *err)
{
	return poll_job(s, job, 1, seen, max_wait_ms, hold_ms, out, code, err);
}

int
sched_cancel(struct sched *s, uint64_t job, enum sched_code *code, char *err)
{
	pthread_mutex_lock(&s->mu);
	struct job *j = find_job(s, job);
	if (j)
		finish(s, j, SCHED_CANCELLED, SCHED_ECANCELLED, "cancelled");
	pthread_mutex_unlock(&s->mu);
	if (!j)
		return fail(code, SCHED_ENOTFOUND, err, "no job %llu", (unsigned long long)job);
	return 0;
}

int
sched_lease(struct sched *s, const char *client, int lease_ms, int *jobs, enum sched_code *code, char *err)
{
	if (!client || !client[0] || strlen(client) >= SCHED_CLIENT_MAX)
		return fail(code, SCHED_EBADREQ, err, "client: 1 to %d bytes", SCHED_CLIENT_MAX - 1);
	if (lease_ms < SCHED_LEASE_MIN_MS || lease_ms > SCHED_LEASE_MAX_MS)
		return fail(code, SCHED_EBADREQ, err, "lease_ms: %d, not in [%d, %d]", lease_ms, SCHED_LEASE_MIN_MS,
		            SCHED_LEASE_MAX_MS);
	pthread_mutex_lock(&s->mu);
	int rv = renew_lease(s, client, lease_ms, code, err), n = 0;
	for (struct job *j = s->jobs; j && rv == 0; j = j->next)
		n += j->finish == SCHED_RUNNING && strcmp(j->client, client) == 0;
	pthread_mutex_unlock(&s->mu);
	if (jobs)
		*jobs = n;
	return rv;
}

int
sched_eval(struct sched *s, const int32_t *ids, int n, int per_token, int last_only, int layers, float **logits,
           int *rows, enum sched_code *code, char *err)
{
	*logits = NULL;
	*rows = 0;
	if (n < 1 || !ids)
		return fail(code, SCHED_EBADREQ, err, "ids: empty");
	if (n > s->max_seq)
		return fail(code, SCHED_EBADREQ, err, "ids: %d tokens do not fit the context of %d", n, s->max_seq);
	for (int i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= s->V)
			return fail(code, SCHED_EBADREQ, err, "ids[%d]: token id %d is outside the vocabulary of %d", i,
			            ids[i], s->V);
	if (layers < 0)
		return fail(code, SCHED_EBADREQ, err, "upto_layer: %d", layers);
	int r = last_only ? 1 : n;
	struct eval ev = {.ids = ids, .n = n, .per_token = per_token, .last_only = last_only, .layers = layers};
	if (!(ev.logits = malloc((size_t)r * s->V * sizeof(float))))
		return fail(code, SCHED_ETOOLARGE, err, "eval: no memory for %d x %d logits", r, s->V);
	pthread_mutex_lock(&s->mu);
	if (s->stopping) {
		pthread_mutex_unlock(&s->mu);
		free(ev.logits);
		return fail(code, SCHED_EUNAVAILABLE, err, "the worker is shutting down");
	}
	if (s->evals_tail)
		s->evals_tail->next = &ev;
	else
		s->evals = &ev;
	s->evals_tail = &ev;
	pthread_cond_signal(&s->work);
	while (!ev.done)
		pthread_cond_wait(&s->done, &s->mu);
	pthread_mutex_unlock(&s->mu);
	if (ev.rc) {
		free(ev.logits);
		return fail(code, ev.code, err, "%s", ev.msg);
	}
	*logits = ev.logits;
	*rows = r;
	return 0;
}

// queue ev for the engine thread and wait for it; 0 or -1 (ev->code, ev->msg)
static int
wait_eval(struct sched *s, struct eval *ev)
{
	pthread_mutex_lock(&s->mu);
	if (s->stopping) {
		pthread_mutex_unlock(&s->mu);
		ev->code = SCHED_EUNAVAILABLE;
		snprintf(ev->msg, sizeof ev->msg, "the worker is shutting down");
		return -1;
	}
	if (s->evals_tail)
		s->evals_tail->next = ev;
	else
		s->evals = ev;
	s->evals_tail = ev;
	pthread_cond_signal(&s->work);
	while (!ev->done)
		pthread_cond_wait(&s->done, &s->mu);
	pthread_mutex_unlock(&s->mu);
	return ev->rc;
}

int
sched_embed(struct sched *s, const int32_t *const *ids, const int *lens, int n, int pooling, float **out, int *dims,
            int *used, enum sched_code *code, char *err)
{
	*out = NULL;
	*dims = engine_n_embd(s->e);
	if (n < 1 || n > SCHED_EMBED_MAX_INPUTS)
		return fail(code, SCHED_EBADREQ, err, "input: %d inputs (1 to %d)", n, SCHED_EMBED_MAX_INPUTS);
	for (int i = 0; i < n; i++) {
		if (lens[i] < 1)
			return fail(code, SCHED_EBADREQ, err, "input[%d]: empty", i);
		if (lens[i] > s->max_seq)
			return fail(code, SCHED_EBADREQ, err, "input[%d]: %d tokens do not fit the context of %d", i,
			            lens[i], s->max_seq);
		for (int j = 0; j < lens[i]; j++)
			if (ids[i][j] < 0 || ids[i][j] >= s->V)
				return fail(code, SCHED_EBADREQ, err,
				            "input[%d][%d]: token id %d is outside the vocabulary of %d", i, j,
				            ids[i][j], s->V);
	}
	if (pooling < SCHED_POOL_MODEL || pooling > SCHED_POOL_LAST)
		return fail(code, SCHED_EBADREQ, err, "pooling: %d (0 the model's, 1 mean, 2 cls, 3 last)", pooling);
	if (pooling == SCHED_POOL_MODEL) {
		int mp = engine_pooling(s->e);
		pooling = mp >= SCHED_POOL_MEAN && mp <= SCHED_POOL_LAST ? mp : SCHED_POOL_MEAN;
	}
	*used = pooling;
	struct eval ev = {.embed = 1, .pooling = pooling, .inputs = ids, .lens = lens, .n = n};
	if (!(ev.logits = malloc((size_t)n * *dims * sizeof(float))))
		return fail(code, SCHED_ETOOLARGE, err, "embeddings: no memory for %d x %d floats", n, *dims);
	if (wait_eval(s, &ev)) {
		free(ev.logits);
		return fail(code, ev.code, err, "%s", ev.msg);
	}
	*out = ev.logits;
	return 0;
}

int
sched_reset(struct sched *s, const char *session, enum sched_code *code, char *err)
{
	if (!session || !session[0])
		return fail(code, SCHED_EBADREQ, err, "session: empty name");
	pthread_mutex_lock(&s->mu);
	struct session *x = find_session(s, session);
	if (x && x->busy)
		x->drop = 1;
	else if (x)
		session_free(s, x);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

void
sched_stats(struct sched *s, struct sched_stats *st)
{
	pthread_mutex_lock(&s->mu);
	*st = s->st;
	st->queued = s->n_queued;
	st->running = s->n_active;
	st->sessions = s->n_sessions;
	pthread_mutex_unlock(&s->mu);
	memset(&st->cache, 0, sizeof st->cache);
	if (s->pc)
		pcache_stats(s->pc, &st->cache);
}
