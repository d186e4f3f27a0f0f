// api-extra.c - the requests that do not generate: Anthropic's
// POST /v1/messages/count_tokens, llama.cpp's POST /tokenize, /detokenize and
// /apply-template, GET /v1/models and GET /props, and the check of every
// request's "model".
//
// The POST ones need the tokenizer service, and the loop thread never waits
// on IPC: they become an fe_gen like a generation, but go to a queue of
// their own served by two threads here, so a reply to /tokenize does not
// wait behind the engine's generations. The thread writes the reply's JSON
// into g->text and hands the gen back with FE_MSG_DONE; http.c renders it
// through the request's dialect as it does any reply.
//
// count_tokens renders and encodes the prompt with fe_prompt_ids, the very
// function a generation's worker calls, so its input_tokens is the prompt a
// /v1/messages request with the same body sends to the engine: the system
// prompt (the request's, else the server's --system), the chat template and
// the BOS included.
//
// GET /props and /v1/models answer on the loop thread from a copy of the
// tokenizer's vocabulary facts, fetched once when the tokenizer first
// answers.
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client-tokenizer.h"
#include "fe.h"
#include "log.h"

#define EXTRA_THREADS 2
#define EXTRA_QUEUE 64 // waiting beyond this: 503
#define MODEL_MAX 256

static struct {
	const struct fe_config *cfg;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct fe_gen *head, *tail;
	int waiting, stopping;
	pthread_t th[EXTRA_THREADS];
	int n_th;
	long long started_at;
	// the vocabulary (mu)
	int known;
	struct tokc_vocab v;
	struct tokc_vocab_texts t;
} X = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

int
fe_api_generates(enum fe_api api)
{
	return api == FE_API_CHAT || api == FE_API_COMPLETIONS || api == FE_API_MESSAGES || api == FE_API_RESPONSES ||
	       api == FE_API_EMBEDDINGS; // the engine's queue
}

// --- the model field ------------------------------------------------------------------

static int
utf8_valid(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t k;
		unsigned min;
		if ((c & 0xe0) == 0xc0) {
			k = 1, min = 0x80, c &= 0x1f;
		} else if ((c & 0xf0) == 0xe0) {
			k = 2, min = 0x800, c &= 0x0f;
		} else if ((c & 0xf8) == 0xf0) {
			k = 3, min = 0x10000, c &= 0x07;
		} else {
			return 0;
		}
		if (n - i <= k)
			return 0;
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return 0;
			c = (c << 6) | (s[i + j] & 0x3f);
		}
		// overlong forms, surrogates and code points past U+10FFFF are not UTF-8
		if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
			return 0;
		i += k + 1;
	}
	return 1;
}

int
fe_get_model(cJSON *body, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	const char *model = NULL;
	if (fe_get_string(body, "model", &model, bad) < 0)
		return -1;
	if (model) {
		size_t n = strlen(model);
		if (n > MODEL_MAX)
			return fe_bad_set(bad, 400, "model", "'model' is %zu bytes; at most %d are accepted", n,
			                  MODEL_MAX);
		if (!utf8_valid((const unsigned char *)model, n))
			return fe_bad_set(bad, 400, "model", "'model' is not valid UTF-8");
	}
	// any id is served by the one model: the reply names it
	free(p->model);
	if (!(p->model = strdup(cfg->name)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	return 0;
}

// --- the vocabulary -------------------------------------------------------------------

static int
fetch_vocab(int timeout_ms, char *err)
{
	pthread_mutex_lock(&X.mu);
	int known = X.known;
	pthread_mutex_unlock(&X.mu);
	if (known)
		return 0;
	struct tokc_vocab v;
	struct tokc_vocab_texts t;
	if (tokc_vocab_texts(fe_tok_client(), &v, &t, timeout_ms, err) != 0)
		return -1;
	pthread_mutex_lock(&X.mu);
	if (!X.known) {
		X.v = v;
		X.t = t;
		X.known = 1;
	} else {
		tokc_vocab_texts_free(&t);
	}
	pthread_mutex_unlock(&X.mu);
	return 0;
}

// --- the jobs ---------------------------------------------------------------------------

static void fail(struct fe_gen *g, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void
fail(struct fe_gen *g, int status, const char *fmt, ...)
{
	g->r.finish = FE_FINISH_ERROR;
	g->r.status = status;
	va_list ap;
	va_start(ap, fmt);
	ad_verr(g->r.err, fmt, ap); // (r.err: AD_ERRLEN bytes)
	va_end(ap);
}

// reply keeps o's JSON as the reply
static void
reply(struct fe_gen *g, cJSON *o)
{
	size_t n = 0;
	char *s = fe_json_print(o, &n);
	if (!s) {
		fail(g, 503, "out of memory");
		return;
	}
	free(g->text);
	g->text = s;
	g->len = n;
	g->cap = n + 1;
	g->r.finish = FE_FINISH_EOS;
}

// a piece is a string when it is valid UTF-8, else its bytes (llama.cpp's form)
static cJSON *
piece_json(const char *s, size_t n)
{
	if (utf8_valid((const unsigned char *)s, n)) {
		char *c = strndup(s, n);
		cJSON *o = cJSON_CreateString(c ? c : "");
		free(c);
		return o;
	}
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
	return a;
}

// the content's ids: a string as one text, a mixed array part by part as
// llama.cpp does (BOS and the like only where the first part is a string)
static int
mixed_encode(struct ad_client *tok, const struct fe_params *p, int32_t **ids, size_t *n, int tmo, char *err)
{
	if (!p->emb_text)
		return tokc_encode(tok, p->prompt, p->prompt_len, p->add_special ? -1 : 0, p->parse_special, ids, n,
		                   tmo, err);
	size_t cap = 0;
	*ids = NULL;
	*n = 0;
	for (size_t i = 0; i < p->n_inputs; i++) {
		int32_t *part = NULL, one;
		size_t k = 1;
		if (p->emb_text[i]) {
			if (tokc_encode(tok, p->emb_text[i], strlen(p->emb_text[i]), i == 0 && p->add_special ? -1 : 0,
			                p->parse_special, &part, &k, tmo, err) != 0)
				goto fail;
		} else {
			one = p->emb_ids[i][0];
		}
		if (*n + k > cap) {
			size_t nc = cap ? 2 * cap : 64;
			while (nc < *n + k)
				nc *= 2;
			int32_t *q = realloc(*ids, nc * sizeof *q);
			if (!q) {
				free(part);
				ad_err(err, "out of memory");
				goto fail;
			}
			*ids = q;
			cap = nc;
		}
		memcpy(*ids + *n, part ? part : &one, k * sizeof **ids);
		*n += k;
		free(part);
	}
	return 0;
fail:
	free(*ids);
	*ids = NULL;
	*n = 0;
	return -1;
}

static void
run_tokenize(struct fe_gen *g, char *err)
{
	struct ad_client *tok = fe_tok_client();
	int tmo = X.cfg->timeout_ms;
	int32_t *ids = NULL;
	size_t n = 0;
	if (mixed_encode(tok, &g->p, &ids, &n, tmo, err) != 0) {
		fail(g, 503, "%s", err);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	cJSON *a = cJSON_AddArrayToObject(o, "tokens");
	if (!g->p.with_pieces) {
		for (size_t i = 0; i < n; i++)
			cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
		free(ids);
		reply(g, o);
		return;
	}
	char *text = NULL;
	size_t len = 0, *ends = NULL;
	if (tokc_pieces(tok, ids, n, &text, &len, &ends, tmo, err) != 0) {
		free(ids);
		cJSON_Delete(o);
		fail(g, 503, "%s", err);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		size_t from = i ? ends[i - 1] : 0;
		cJSON *t = cJSON_CreateObject();
		cJSON_AddNumberToObject(t, "id", ids[i]);
		cJSON_AddItemToObject(t, "piece", piece_json(text + from, ends[i] - from));
		cJSON_AddItemToArray(a, t);
	}
	free(ids);
	free(text);
	free(ends);
	reply(g, o);
}

static void
run_detokenize(struct fe_gen *g, char *err)
{
	if (fetch_vocab(X.cfg->timeout_ms, err) != 0) {
		fail(g, 503, "%s", err);
		return;
	}
	int32_t nv = X.v.n_vocab;
	for (size_t i = 0; i < g->p.n_ids; i++)
		if (g->p.ids[i] < 0 || g->p.ids[i] >= nv) {
			fail(g, 400, "'tokens[%zu]': %d is outside the vocabulary (0 to %d)", i, g->p.ids[i], nv - 1);
			return;
		}
	char *text = NULL;
	size_t len = 0, *ends = NULL;
	if (tokc_pieces(fe_tok_client(), g->p.ids, g->p.n_ids, &text, &len, &ends, X.cfg->timeout_ms, err) != 0) {
		fail(g, 503, "%s", err);
		return;
	}
	cJSON *o = cJSON_CreateObject();
	fe_add_text(o, "content", text, len);
	free(text);
	free(ends);
	reply(g, o);
}

static void
run_job(struct fe_gen *g)
{
	char err[AD_ERRLEN];
	switch (g->p.api) {
	case FE_API_COUNT_TOKENS: {
		int32_t *ids = NULL;
		size_t n = 0;
		int rv = fe_prompt_ids(&g->p, &ids, &n, NULL, NULL, err);
		if (rv != 0) {
			fail(g, rv == TOKC_BAD_REQUEST ? 400 : 503, "%s", err);
			return;
		}
		free(ids);
		g->r.prompt_tokens = (unsigned)n;
		cJSON *o = cJSON_CreateObject();
		cJSON_AddNumberToObject(o, "input_tokens", (double)n);
		reply(g, o);
		return;
	}
	case FE_API_APPLY_TEMPLATE: {
		char *text = NULL;
		int rv = fe_prompt_text(&g->p, &text, NULL, err);
		if (rv != 0) {
			fail(g, rv == TOKC_BAD_REQUEST ? 400 : 503, "%s", err);
			return;
		}
		cJSON *o = cJSON_CreateObject();
		fe_add_text(o, "prompt", text, strlen(text));
		free(text);
		reply(g, o);
		return;
	}
	case FE_API_TOKENIZE:
		run_tokenize(g, err);
		return;
	case FE_API_DETOKENIZE:
		run_detokenize(g, err);
		return;
	default:
		fail(g, 500, "internal error: request kind %d is not answered here", (int)g->p.api);
	}
}

static void *
extra_main(void *arg)
{
	int first = arg != NULL;
	ad_thread_name("tokenizer req");
	for (;;) {
		pthread_mutex_lock(&X.mu);
		// the first thread fetches the vocabulary for /props and /v1/models
		// as soon as the tokenizer answers
		while (first && !X.known && !X.stopping && !X.head) {
			pthread_mutex_unlock(&X.mu);
			char err[AD_ERRLEN];
			// short tries, so that a stop is not held up by a tokenizer that is down
			int rv = fetch_vocab(X.cfg->timeout_ms < 1000 ? X.cfg->timeout_ms : 1000, err);
			pthread_mutex_lock(&X.mu);
			if (rv == 0)
				break;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 200 * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			if (!X.stopping && !X.head)
				pthread_cond_timedwait(&X.cv, &X.mu, &ts);
		}
		while (!X.head && !X.stopping)
			pthread_cond_wait(&X.cv, &X.mu);
		if (X.stopping) {
			pthread_mutex_unlock(&X.mu);
			return NULL;
		}
		struct fe_gen *g = X.head;
		X.head = g->next;
		if (!X.head)
			X.tail = NULL;
		g->next = NULL;
		X.waiting--;
		pthread_mutex_unlock(&X.mu);

		uint64_t t0 = fe_now_ns();
		g->r.queue_ns = t0 - g->t_admit;
		if (__atomic_load_n(&g->cancelled, __ATOMIC_ACQUIRE))
			g->r.finish = FE_FINISH_CANCELLED;
		else
			run_job(g);
		g->r.total_ns = fe_now_ns() - g->t_admit;
		fe_post(g, FE_MSG_DONE, NULL, 0); // hands the worker's reference back
	}
}

int
fe_extra_start(const struct fe_config *cfg, char *err)
{
	X.cfg = cfg;
	X.started_at = (long long)time(NULL);
	for (int i = 0; i < EXTRA_THREADS; i++) {
		if (pthread_create(&X.th[i], NULL, extra_main, i == 0 ? (void *)&X : NULL) != 0)
			return ad_err(err, "could not start the tokenizer-request threads");
		X.n_th++;
	}
	return 0;
}

void
fe_extra_stop(void)
{
	pthread_mutex_lock(&X.mu);
	X.stopping = 1;
	pthread_cond_broadcast(&X.cv);
	pthread_mutex_unlock(&X.mu);
	for (int i = 0; i < X.n_th; i++)
		pthread_join(X.th[i], NULL);
	X.n_th = 0;
	tokc_vocab_texts_free(&X.t);
}

int
fe_extra_admit(struct fe_gen *g)
{
	pthread_mutex_lock(&X.mu);
	if (X.waiting >= EXTRA_QUEUE + X.cfg->queue || X.stopping) {
		pthread_mutex_unlock(&X.mu);
		return -1;
	}
	g->t_admit = fe_now_ns();
	g->next = NULL;
	if (X.tail)
		X.tail->next = g;
	else
		X.head = g;
	X.tail = g;
	X.waiting++;
	pthread_cond_signal(&X.cv);
	pthread_mutex_unlock(&X.mu);
	return 0;
}

// --- GET /v1/models, /props ------------------------------------------------------------------

static cJSON *
model_obj(void)
{
	const struct fe_config *cfg = X.cfg;
	cJSON *m = cJSON_CreateObject();
	cJSON_AddStringToObject(m, "id", cfg->name);
	cJSON_AddStringToObject(m, "object", "model");
	cJSON_AddNumberToObject(m, "created", (double)X.started_at);
	cJSON_AddStringToObject(m, "owned_by", "anedvd");
	// the Anthropic client reads these
	cJSON_AddStringToObject(m, "type", "model");
	cJSON_AddStringToObject(m, "display_name", cfg->name);
	char iso[32];
	time_t t = (time_t)X.started_at;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%SZ", &tm);
	cJSON_AddStringToObject(m, "created_at", iso);
	// what the server runs: prompt + reply fit in context_length tokens
	cJSON_AddNumberToObject(m, "context_length", cfg->max_seq);
	cJSON_AddNumberToObject(m, "max_output_tokens", cfg->max_seq > 1 ? cfg->max_seq - 1 : 1);
	cJSON *caps = cJSON_AddArrayToObject(m, "capabilities");
	cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
	cJSON_AddItemToArray(caps, cJSON_CreateString("chat"));
	cJSON *meta = cJSON_AddObjectToObject(m, "meta");
	cJSON_AddNumberToObject(meta, "n_ctx", cfg->max_seq);
	pthread_mutex_lock(&X.mu);
	if (X.known) {
		cJSON_AddNumberToObject(meta, "n_vocab", X.v.n_vocab);
		cJSON_AddStringToObject(meta, "vocab_type", X.v.model);
		cJSON_AddStringToObject(meta, "chat_template", X.v.chat_template);
	}
	pthread_mutex_unlock(&X.mu);
	return m;
}

char *
fe_models_json(const char *id, size_t idl, int *status, size_t *len)
{
	*status = 200;
	if (id) {
		if (idl != strlen(X.cfg->name) || memcmp(id, X.cfg->name, idl) != 0) {
			*status = 404;
			return NULL;
		}
		return fe_json_print(model_obj(), len);
	}
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "object", "list");
	cJSON *data = cJSON_AddArrayToObject(o, "data");
	cJSON_AddItemToArray(data, model_obj());
	cJSON_AddStringToObject(o, "first_id", X.cfg->name);
	cJSON_AddStringToObject(o, "last_id", X.cfg->name);
	cJSON_AddFalseToObject(o, "has_more");
	return fe_json_print(o, len);
}

static const char *
basename_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

char *
fe_props_json(int *status, size_t *len)
{
	const struct fe_config *cfg = X.cfg;
	pthread_mutex_lock(&X.mu);
	if (!X.known) {
		pthread_mutex_unlock(&X.mu);
		*status = 503;
		return NULL;
	}
	*status = 200;
	int waiting, running;
	fe_queue_state(&waiting, &running);
	cJSON *o = cJSON_CreateObject();
	cJSON *d = cJSON_AddObjectToObject(o, "default_generation_settings");
	cJSON_AddNumberToObject(d, "id", 0);
	cJSON_AddNumberToObject(d, "id_task", -1);
	cJSON_AddNumberToObject(d, "n_ctx", cfg->max_seq);
	cJSON_AddBoolToObject(d, "speculative", !cfg->no_spec);
	cJSON_AddBoolToObject(d, "is_processing", running > 0);
	// the defaults a /v1/chat/completions request gets (completions: top_k 0)
	cJSON *pr = cJSON_AddObjectToObject(d, "params");
	cJSON_AddNumberToObject(pr, "n_predict", cfg->max_tokens);
	cJSON_AddNumberToObject(pr, "max_tokens", cfg->max_tokens);
	cJSON_AddNumberToObject(pr, "seed", -1);
	struct fe_params dp = {0};
	fe_params_sampling(&dp, cfg, 40);
	cJSON_AddNumberToObject(pr, "temperature", dp.temperature);
	cJSON_AddNumberToObject(pr, "top_k", dp.top_k);
	cJSON_AddNumberToObject(pr, "top_p", dp.top_p);
	cJSON_AddNumberToObject(pr, "min_p", dp.min_p);
	cJSON_AddNumberToObject(pr, "repeat_last_n", 256);
	cJSON_AddNumberToObject(pr, "repeat_penalty", dp.repeat_penalty);
	cJSON_AddNumberToObject(pr, "presence_penalty", 0.0);
	cJSON_AddNumberToObject(pr, "frequency_penalty", 0.0);
	cJSON_AddArrayToObject(pr, "stop");
	cJSON_AddFalseToObject(pr, "stream");
	cJSON_AddNumberToObject(pr, "n_probs", 0);
	cJSON *smp = cJSON_AddArrayToObject(pr, "samplers");
	static const char *samplers[] = {"penalties", "top_k", "top_p", "min_p", "temperature"};
	for (size_t i = 0; i < sizeof samplers / sizeof samplers[0]; i++)
		cJSON_AddItemToArray(smp, cJSON_CreateString(samplers[i]));
	cJSON_AddNumberToObject(o, "total_slots", cfg->parallel);
	cJSON_AddStringToObject(o, "model_alias", cfg->name);
	cJSON_AddStringToObject(o, "model_path",
	                        cfg->model_file && cfg->model_file[0] ? basename_of(cfg->model_file) : cfg->name);
	cJSON_AddNumberToObject(o, "n_ctx", cfg->max_seq);
	cJSON_AddNumberToObject(o, "n_vocab", X.v.n_vocab);
	cJSON *mod = cJSON_AddObjectToObject(o, "modalities");
	cJSON_AddFalseToObject(mod, "vision");
	cJSON_AddFalseToObject(mod, "audio");
	// the template source as the model carries it; anedvd renders the
	// family named beside it (templates are recognised, not evaluated)
	fe_add_text(o, "chat_template", X.t.chat_template, strlen(X.t.chat_template));
	cJSON_AddStringToObject(o, "chat_template_family", X.v.chat_template);
	fe_add_text(o, "bos_token", X.t.bos, strlen(X.t.bos));
	fe_add_text(o, "eos_token", X.t.eos, strlen(X.t.eos));
	cJSON_AddStringToObject(o, "build_info", "anedvd-" ANEDVD_VERSION);
	pthread_mutex_unlock(&X.mu);
	return fe_json_print(o, len);
}

// --- the dialects ---------------------------------------------------------------------------

static char *
text_reply(const struct fe_gen *g, size_t *len)
{
	char *s = malloc(g->len + 1);
	if (s) {
		memcpy(s, g->text ? g->text : "", g->len);
		s[g->len] = 0;
		*len = g->len;
	}
	return s;
}

static char *
no_stream(const struct fe_gen *g, size_t *len)
{
	*len = 0;
	return strdup("");
}

static char *
no_stream_text(const struct fe_gen *g, const char *s, size_t n, size_t *len)
{
	*len = 0;
	return strdup("");
}

// POST /v1/messages/count_tokens: the body of a /v1/messages request
// (max_tokens not needed), Anthropic's errors
static int
count_parse(cJSON *body, enum fe_api api, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	int rv = fe_anthropic.parse(body, FE_API_COUNT_TOKENS, cfg, p, bad);
	p->api = FE_API_COUNT_TOKENS;
	p->stream = 0;
	return rv;
}

static char *
count_error(int status, const char *msg, const char *param, size_t *len)
{
	return fe_anthropic.error(status, msg, param, len);
}

static char *
count_stream_error(int status, const char *msg, size_t *len)
{
	return fe_anthropic.stream_error(status, msg, len);
}

const struct fe_dialect fe_count_tokens = {
	.parse = count_parse,
	.response = text_reply,
	.stream_start = no_stream,
	.stream_text = no_stream_text,
	.stream_end = no_stream,
	.error = count_error,
	.stream_error = count_stream_error,
};

// llama.cpp's /tokenize, /detokenize, /apply-template

// /tokenize's content as llama.cpp's mixed array: strings and token ids in
// any order, held as the parts of an embeddings input are (emb_text[i] a
// string, else emb_ids[i] one id)
static int
mixed_parse(cJSON *c, struct fe_params *p, struct fe_bad *bad)
{
	int n = cJSON_GetArraySize(c);
	if (n > FE_MAX_EMBED_INPUTS)
		return fe_bad_set(bad, 400, "content", "'content': at most %d parts", FE_MAX_EMBED_INPUTS);
	size_t m = n ? (size_t)n : 1;
	if (!(p->emb_text = calloc(m, sizeof *p->emb_text)) || !(p->emb_ids = calloc(m, sizeof *p->emb_ids)) ||
	    !(p->emb_len = calloc(m, sizeof *p->emb_len)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	cJSON *e;
	cJSON_ArrayForEach(e, c)
	{
		size_t i = p->n_inputs++;
		if (cJSON_IsString(e)) {
			if (!(p->emb_text[i] = strdup(e->valuestring)))
				return fe_bad_set(bad, 503, NULL, "out of memory");
			continue;
		}
		// the range first: converting a double outside int32_t's is undefined
		double d = cJSON_IsNumber(e) ? e->valuedouble : 0.5;
		if (!(d >= 0 && d <= 2147483647.0) || d != floor(d))
			return fe_bad_set(bad, 400, "content", "'content[%zu]' must be a string or a token id", i);
		if (!(p->emb_ids[i] = malloc(sizeof **p->emb_ids)))
			return fe_bad_set(bad, 503, NULL, "out of memory");
		p->emb_ids[i][0] = (int32_t)d;
		p->emb_len[i] = 1;
	}
	return 0;
}

static int
tokenize_parse(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *c = fe_get_required(body, "content", bad);
	if (!c)
		return -1;
	if (cJSON_IsArray(c)) {
		if (mixed_parse(c, p, bad))
			return -1;
	} else if (!cJSON_IsString(c)) {
		return fe_bad_set(bad, 400, "content",
		                  "'content' must be a string or an array of strings and token ids");
	} else if (!(p->prompt = strdup(c->valuestring))) {
		return fe_bad_set(bad, 503, NULL, "out of memory");
	} else {
		p->prompt_len = strlen(p->prompt);
	}
	p->parse_special = 1; // llama.cpp's defaults
	if (fe_get_bool(body, "add_special", &p->add_special, bad) < 0 ||
	    fe_get_bool(body, "parse_special", &p->parse_special, bad) < 0 ||
	    fe_get_bool(body, "with_pieces", &p->with_pieces, bad) < 0)
		return -1;
	return 0;
}

static int
detokenize_parse(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *t = fe_get_required(body, "tokens", bad);
	if (!t)
		return -1;
	if (!cJSON_IsArray(t))
		return fe_bad_set(bad, 400, "tokens", "'tokens' must be an array of token ids");
	int n = cJSON_GetArraySize(t);
	if (!(p->ids = malloc((size_t)(n ? n : 1) * sizeof *p->ids)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	cJSON *e;
	cJSON_ArrayForEach(e, t)
	{
		size_t i = p->n_ids;
		// the range first: converting a double outside int32_t's is undefined
		double d = cJSON_IsNumber(e) ? e->valuedouble : 0.5;
		if (!(d >= -2147483648.0 && d <= 2147483647.0) || d != floor(d))
			return fe_bad_set(bad, 400, "tokens", "'tokens[%zu]' must be an integer token id", i);
		p->ids[p->n_ids++] = (int32_t)e->valuedouble;
	}
	return 0;
}

static int
llama_parse(cJSON *body, enum fe_api api, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	int rv;
	if (api == FE_API_APPLY_TEMPLATE) {
		// the body of a chat request, rendered as the chat endpoint renders it
		rv = fe_openai.parse(body, FE_API_CHAT, cfg, p, bad);
	} else {
		if (fe_get_model(body, cfg, p, bad) < 0)
			return -1;
		rv = api == FE_API_TOKENIZE ? tokenize_parse(body, p, bad) : detokenize_parse(body, p, bad);
	}
	p->api = api;
	p->stream = 0;
	return rv;
}

static const char *
llama_error_type(int status)
{
	switch (status) {
	case 400:
	case 405:
	case 413:
		return "invalid_request_error";
	case 404:
		return "not_found_error";
	case 503:
		return "unavailable_error";
	default:
		return "server_error";
	}
}

cJSON *
fe_llama_error_json(int status, const char *msg)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddNumberToObject(e, "code", status);
	fe_add_text(e, "message", msg, strlen(msg));
	cJSON_AddStringToObject(e, "type", llama_error_type(status));
	return o;
}

static char *
llama_error(int status, const char *msg, const char *param, size_t *len)
{
	(void)param;
	return fe_json_print(fe_llama_error_json(status, msg), len);
}

static char *
llama_stream_error(int status, const char *msg, size_t *len)
{
	return llama_error(status, msg, NULL, len);
}

const struct fe_dialect fe_llama = {
	.parse = llama_parse,
	.response = text_reply,
	.stream_start = no_stream,
	.stream_text = no_stream_text,
	.stream_end = no_stream,
	.error = llama_error,
	.stream_error = llama_stream_error,
};
