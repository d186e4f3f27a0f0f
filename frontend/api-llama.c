// api-llama.c - llama.cpp's own completion endpoint, POST /completion (and
// /completions), in its shapes (tools/server/README.md of llama.cpp).
//
// The request is a raw completion, as /v1/completions: the body is read by
// the OpenAI dialect's parser, then llama.cpp's own names set what they set
// (n_predict for max_tokens, -1 meaning as long as the context allows;
// n_probs for the log-probabilities of the best alternatives). The reply is
// {"content", "stop": true, "tokens_predicted", "tokens_evaluated",
// "stop_type", "timings": {prompt_n, prompt_ms, predicted_n, ...}, ...};
// streamed, one "data:" event per piece ({"content", "stop": false}) and a
// last one with stop true and the rest, without OpenAI's [DONE].
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

// n_probs: at most what a token carries
#define MAX_N_PROBS FE_MAX_TOP_LOGPROBS

static int
parse(cJSON *body, enum fe_api api, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	(void)api;
	long long np = 0, nprobs = 0;
	int has_np, has_probs;
	if ((has_np = fe_get_int(body, "n_predict", -1, 1 << 20, &np, bad)) < 0)
		return -1;
	if (has_np && np == 0)
		return fe_bad_set(
			bad, 400, "n_predict",
			"'n_predict' 0 generates nothing: give 1 or more, or -1 for as many as the context holds");
	if ((has_probs = fe_get_int(body, "n_probs", 0, MAX_N_PROBS, &nprobs, bad)) < 0)
		return -1;
	long long n = 1;
	if (fe_get_int(body, "n", 1, 1, &n, bad) < 0)
		return fe_bad_set(bad, 400, "n",
		                  "'n': /completion makes one completion (/v1/completions makes several)");
	// read as /v1/completions reads it, then llama.cpp's names over the
	// OpenAI ones they stand for (n_predict wins over max_tokens, as there)
	int rv = fe_openai.parse(body, FE_API_COMPLETIONS, cfg, p, bad);
	if (rv)
		return rv;
	if (has_np && np > 0)
		p->max_tokens = (unsigned)np;
	if (has_np && np < 0)
		p->max_tokens = 1u << 20; // the context bounds it (the engine stops at --max-seq)
	if (has_probs && nprobs > 0) {
		p->logprobs = 1;
		p->top_logprobs = (int)nprobs;
	}
	return 0;
}

static double
ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

// llama.cpp's timings: the prompt's computed tokens and the generated ones
static cJSON *
timings(const struct fe_gen *g)
{
	const struct fe_result *r = &g->r;
	cJSON *t = cJSON_CreateObject();
	unsigned cached = r->eng.cached_tokens, pn = r->eng.prefill_tokens;
	if (!pn && r->prompt_tokens > cached)
		pn = r->prompt_tokens - cached;
	unsigned gn = r->completion_tokens, steps = gn > 0 ? gn - 1 : 0; // the first comes with the prompt
	double pms = ms(r->eng.prefill_ns), gms = ms(r->eng.decode_ns);
	cJSON_AddNumberToObject(t, "cache_n", cached);
	cJSON_AddNumberToObject(t, "prompt_n", pn);
	cJSON_AddNumberToObject(t, "prompt_ms", pms);
	cJSON_AddNumberToObject(t, "prompt_per_token_ms", pn ? pms / pn : 0.0);
	cJSON_AddNumberToObject(t, "prompt_per_second", pms > 0 ? 1e3 * pn / pms : 0.0);
	cJSON_AddNumberToObject(t, "predicted_n", gn);
	cJSON_AddNumberToObject(t, "predicted_ms", gms);
	cJSON_AddNumberToObject(t, "predicted_per_token_ms", steps ? gms / steps : 0.0);
	cJSON_AddNumberToObject(t, "predicted_per_second", gms > 0 ? 1e3 * steps / gms : 0.0);
	if (r->eng.spec.drafted) {
		cJSON_AddNumberToObject(t, "draft_n", (double)r->eng.spec.drafted);
		cJSON_AddNumberToObject(t, "draft_n_accepted", (double)r->eng.spec.accepted);
	}
	return t;
}

// a token as llama.cpp shows it: id, its text (valid UTF-8 only), its bytes
static cJSON *
token(int32_t id, float logprob)
{
	cJSON *o = cJSON_CreateObject();
	size_t bl = 0;
	const char *b = fe_token_bytes(id, &bl);
	cJSON_AddNumberToObject(o, "id", id);
	fe_add_text(o, "token", b ? b : "", b ? bl : 0);
	cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
	for (size_t i = 0; b && i < bl; i++)
		cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)b[i]));
	cJSON_AddNumberToObject(o, "logprob", logprob);
	return o;
}

// completion_probabilities: each token with its best alternatives
static cJSON *
probabilities(const struct fe_lp_tok *t, size_t n)
{
	cJSON *a = cJSON_CreateArray();
	for (size_t i = 0; i < n; i++) {
		cJSON *o = token(t[i].id, t[i].logprob);
		cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
		for (int k = 0; k < t[i].n_top; k++)
			cJSON_AddItemToArray(top, token(t[i].top[k].id, t[i].top[k].logprob));
		cJSON_AddItemToArray(a, o);
	}
	return a;
}

static const char *
stop_type(const struct fe_gen *g)
{
	switch (g->r.finish) {
	case FE_FINISH_EOS:
		return "eos";
	case FE_FINISH_STOP_SEQ:
		return "word";
	case FE_FINISH_LENGTH:
		return "limit";
	default:
		return "none";
	}
}

// the fields of the last object, streamed or not
static cJSON *
final(const struct fe_gen *g, const char *text, size_t tl)
{
	const struct fe_params *p = &g->p;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "index", 0);
	fe_add_text(o, "content", text, tl);
	cJSON_AddArrayToObject(o, "tokens");
	cJSON_AddBoolToObject(o, "stop", 1);
	cJSON_AddStringToObject(o, "model", p->model ? p->model : "");
	cJSON_AddNumberToObject(o, "tokens_predicted", g->r.completion_tokens);
	cJSON_AddNumberToObject(o, "tokens_evaluated", g->r.prompt_tokens);
	cJSON *gs = cJSON_AddObjectToObject(o, "generation_settings");
	cJSON_AddNumberToObject(gs, "n_predict", p->max_tokens >= 1u << 20 ? -1 : (double)p->max_tokens);
	cJSON_AddNumberToObject(gs, "temperature", p->temperature);
	cJSON_AddNumberToObject(gs, "top_k", p->top_k);
	cJSON_AddNumberToObject(gs, "top_p", p->top_p);
	cJSON_AddNumberToObject(gs, "min_p", p->min_p);
	cJSON_AddNumberToObject(gs, "repeat_penalty", p->repeat_penalty);
	cJSON_AddNumberToObject(gs, "presence_penalty", p->presence_penalty);
	cJSON_AddNumberToObject(gs, "frequency_penalty", p->frequency_penalty);
	cJSON *stops = cJSON_AddArrayToObject(gs, "stop");
	for (size_t i = 0; i < p->n_stops; i++)
		cJSON_AddItemToArray(stops, cJSON_CreateString(p->stops[i]));
	cJSON_AddBoolToObject(gs, "stream", p->stream);
	cJSON_AddNumberToObject(gs, "n_probs", p->logprobs ? p->top_logprobs : 0);
	cJSON_AddBoolToObject(o, "has_new_line", text && memchr(text, '\n', tl) != NULL);
	cJSON_AddBoolToObject(o, "truncated", g->r.prompt_dropped > 0);
	cJSON_AddStringToObject(o, "stop_type", stop_type(g));
	const char *word =
		g->r.finish == FE_FINISH_STOP_SEQ && g->r.stop_index >= 0 && (size_t)g->r.stop_index < p->n_stops
			? p->stops[g->r.stop_index]
			: "";
	cJSON_AddStringToObject(o, "stopping_word", word);
	cJSON_AddNumberToObject(o, "tokens_cached", g->r.eng.cached_tokens);
	cJSON_AddItemToObject(o, "timings", timings(g));
	return o;
}

static char *
response(const struct fe_gen *g, size_t *len)
{
	size_t tl = 0;
	const char *text = fe_choice_text(g, 0, &tl);
	cJSON *o = final(g, text, tl);
	if (g->p.logprobs)
		cJSON_AddItemToObject(o, "completion_probabilities", probabilities(g->ch[0].lp, g->ch[0].n_lp));
	return fe_json_print(o, len);
}

static char *
stream_start(const struct fe_gen *g, size_t *len)
{
	(void)g;
	*len = 0;
	return strdup("");
}

static char *
stream_chunk(const struct fe_gen *g, const struct fe_chunk *ck, size_t *len)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "index", 0);
	fe_add_text(o, "content", ck->text, ck->len);
	cJSON_AddArrayToObject(o, "tokens");
	cJSON_AddBoolToObject(o, "stop", 0);
	if (g->p.logprobs && ck->n_lp)
		cJSON_AddItemToObject(o, "completion_probabilities", probabilities(ck->lp, ck->n_lp));
	return fe_sse(o, len);
}

static char *
stream_end(const struct fe_gen *g, size_t *len)
{
	return fe_sse(final(g, "", 0), len); // the text went out in pieces
}

static char *
error(int status, const char *msg, const char *param, size_t *len)
{
	return fe_llama.error(status, msg, param, len);
}

static char *
stream_error(int status, const char *msg, size_t *len)
{
	return fe_sse(fe_llama_error_json(status, msg), len);
}

// stream_chunk carries every piece: no stream_text (fe.h)
const struct fe_dialect fe_llama_completion = {
	.parse = parse,
	.response = response,
	.stream_start = stream_start,
	.stream_chunk = stream_chunk,
	.stream_end = stream_end,
	.error = error,
	.stream_error = stream_error,
};
