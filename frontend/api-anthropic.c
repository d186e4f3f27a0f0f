// api-anthropic.c - POST /v1/messages (the Anthropic Messages API).
//
// A stream is the event sequence the official client expects:
// message_start, content_block_start, ping, content_block_delta...,
// content_block_stop, message_delta (stop_reason, stop_sequence, usage),
// message_stop. Errors are {"type":"error","error":{"type","message"}};
// in a stream that has begun, an "event: error" carrying the same object.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

#define BILLING_HEADER "x-anthropic-billing-header:"

static int
parse(cJSON *body, enum fe_api api, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	p->api = api;
	fe_params_sampling(p, cfg, 0);
	if (fe_get_model(body, cfg, p, bad) < 0)
		return -1;
	long long ll;
	int rv = fe_get_int(body, "max_tokens", 1, 1 << 20, &ll, bad);
	if (rv < 0)
		return -1;
	if (rv == 0 && api != FE_API_COUNT_TOKENS) // count_tokens takes the request without it
		return fe_bad_set(bad, 400, "max_tokens", "'max_tokens' is required");
	p->max_tokens = rv ? (unsigned)ll : cfg->max_tokens;

	cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
	if (!msgs || cJSON_IsNull(msgs))
		return fe_bad_set(bad, 400, "messages", "'messages' is required");
	if (!cJSON_IsArray(msgs))
		return fe_bad_set(bad, 400, "messages", "'messages' must be an array");
	int n = cJSON_GetArraySize(msgs);
	if (n == 0)
		return fe_bad_set(bad, 400, "messages", "'messages' must not be empty");
	if (!(p->msgs = calloc((size_t)n + 1, sizeof *p->msgs)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	cJSON *sys = cJSON_GetObjectItemCaseSensitive(body, "system");
	// a coding agent's client metadata, new on every request: not prompt
	// (it would make every prompt differ from its first tokens on)
	if (cJSON_IsArray(sys)) {
		for (int k = cJSON_GetArraySize(sys) - 1; k >= 0; k--) {
			cJSON *b = cJSON_GetArrayItem(sys, k), *t = cJSON_GetObjectItemCaseSensitive(b, "text");
			if (cJSON_IsObject(b) && cJSON_IsString(t) &&
			    strncmp(t->valuestring, BILLING_HEADER, sizeof BILLING_HEADER - 1) == 0)
				cJSON_DeleteItemFromArray(sys, k);
		}
		if (cJSON_GetArraySize(sys) == 0)
			sys = NULL;
	}
	if (sys && !cJSON_IsNull(sys)) {
		char *text;
		if (fe_get_text(sys, "system", &text, bad) < 0)
			return -1;
		p->msgs[0].role = TOK_ROLE_SYSTEM;
		p->msgs[0].content = text;
		p->n_msgs = 1;
	}
	int i = 0;
	cJSON *m;
	cJSON_ArrayForEach(m, msgs)
	{
		char where[64];
		snprintf(where, sizeof where, "messages[%d]", i);
		if (!cJSON_IsObject(m))
			return fe_bad_set(bad, 400, where, "'%s' must be an object", where);
		cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
		snprintf(where, sizeof where, "messages[%d].role", i);
		if (!cJSON_IsString(role))
			return fe_bad_set(bad, 400, where, "'%s' must be a string", where);
		enum tok_role r;
		if (strcmp(role->valuestring, "user") == 0)
			r = TOK_ROLE_USER;
		else if (strcmp(role->valuestring, "assistant") == 0)
			r = TOK_ROLE_ASSISTANT;
		else
			return fe_bad_set(bad, 400, where, "'%s': role '%.32s' is not supported (user, assistant)", where,
			                  role->valuestring);
		snprintf(where, sizeof where, "messages[%d].content", i);
		cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
		if (!content || cJSON_IsNull(content))
			return fe_bad_set(bad, 400, where, "'%s' is required", where);
		char *text;
		if (fe_get_text(content, where, &text, bad) < 0)
			return -1;
		p->msgs[p->n_msgs].role = r;
		p->msgs[p->n_msgs].content = text;
		p->n_msgs++;
		i++;
	}
	if (fe_get_sampling(body, p, bad) < 0)
		return -1;
	cJSON *ss = cJSON_GetObjectItemCaseSensitive(body, "stop_sequences");
	if (ss && !cJSON_IsNull(ss) && !cJSON_IsArray(ss))
		return fe_bad_set(bad, 400, "stop_sequences", "'stop_sequences' must be an array of strings");
	if (fe_get_stops(body, "stop_sequences", p, bad) < 0)
		return -1;
	return 0;
}

static const char *
stop_reason(enum fe_finish f)
{
	switch (f) {
	case FE_FINISH_LENGTH:
		return "max_tokens";
	case FE_FINISH_STOP_SEQ:
		return "stop_sequence";
	default:
		return "end_turn";
	}
}

static void
add_stop_fields(cJSON *o, const struct fe_gen *g, int final)
{
	if (!final) {
		cJSON_AddNullToObject(o, "stop_reason");
		cJSON_AddNullToObject(o, "stop_sequence");
		return;
	}
	cJSON_AddStringToObject(o, "stop_reason", stop_reason(g->r.finish));
	if (g->r.finish == FE_FINISH_STOP_SEQ)
		cJSON_AddStringToObject(o, "stop_sequence", g->p.stops[g->r.stop_index]);
	else
		cJSON_AddNullToObject(o, "stop_sequence");
}

static cJSON *
usage(const struct fe_gen *g, unsigned out)
{
	// Anthropic's accounting: input_tokens leaves out what was read from
	// the cache, the three fields add up to the prompt. The cache here is
	// automatic: storing blocks costs a request nothing extra, so nothing
	// is counted as a cache creation. (In message_start the lookup has not
	// run yet: the final usage has the figures.)
	unsigned cached = g->r.cached_tokens < g->r.prompt_tokens ? g->r.cached_tokens : g->r.prompt_tokens;
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "input_tokens", g->r.prompt_tokens - cached);
	cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
	cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
	cJSON_AddNumberToObject(u, "output_tokens", out);
	cJSON_AddNumberToObject(u, "prompt_tokens_dropped", g->r.prompt_dropped);
	return u;
}

static cJSON *
message(const struct fe_gen *g, int final)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", g->id);
	cJSON_AddStringToObject(o, "type", "message");
	cJSON_AddStringToObject(o, "role", "assistant");
	cJSON_AddStringToObject(o, "model", g->p.model);
	cJSON *content = cJSON_AddArrayToObject(o, "content");
	if (final) {
		cJSON *b = cJSON_CreateObject();
		cJSON_AddStringToObject(b, "type", "text");
		fe_add_text(b, "text", g->text, g->len);
		cJSON_AddItemToArray(content, b);
	}
	add_stop_fields(o, g, final);
	cJSON_AddItemToObject(o, "usage", usage(g, final ? g->r.completion_tokens : 0));
	return o;
}

static char *
response(const struct fe_gen *g, size_t *len)
{
	cJSON *o = message(g, 1);
	cJSON_AddItemToObject(o, "timings", fe_timings_json(g));
	return fe_json_print(o, len);
}

// events are accumulated into one buffer

static cJSON *
typed(const char *type)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", type);
	return o;
}

static char *
stream_start(const struct fe_gen *g, size_t *len)
{
	struct fe_sse e = { 0 };
	cJSON *o = typed("message_start");
	cJSON_AddItemToObject(o, "message", message(g, 0));
	fe_sse_event(&e, "message_start", o);
	o = typed("content_block_start");
	cJSON_AddNumberToObject(o, "index", 0);
	cJSON *b = cJSON_AddObjectToObject(o, "content_block");
	cJSON_AddStringToObject(b, "type", "text");
	cJSON_AddStringToObject(b, "text", "");
	fe_sse_event(&e, "content_block_start", o);
	fe_sse_event(&e, "ping", typed("ping"));
	return fe_sse_done(&e, len);
}

static char *
stream_text(const struct fe_gen *g, const char *s, size_t n, size_t *len)
{
	struct fe_sse e = { 0 };
	cJSON *o = typed("content_block_delta");
	cJSON_AddNumberToObject(o, "index", 0);
	cJSON *d = cJSON_AddObjectToObject(o, "delta");
	cJSON_AddStringToObject(d, "type", "text_delta");
	fe_add_text(d, "text", s, n);
	fe_sse_event(&e, "content_block_delta", o);
	return fe_sse_done(&e, len);
}

static char *
stream_end(const struct fe_gen *g, size_t *len)
{
	struct fe_sse e = { 0 };
	cJSON *o = typed("content_block_stop");
	cJSON_AddNumberToObject(o, "index", 0);
	fe_sse_event(&e, "content_block_stop", o);
	o = typed("message_delta");
	cJSON *d = cJSON_AddObjectToObject(o, "delta");
	add_stop_fields(d, g, 1);
	cJSON_AddItemToObject(o, "usage", usage(g, g->r.completion_tokens));
	cJSON_AddItemToObject(o, "timings", fe_timings_json(g));
	fe_sse_event(&e, "message_delta", o);
	fe_sse_event(&e, "message_stop", typed("message_stop"));
	return fe_sse_done(&e, len);
}

static const char *
error_type(int status)
{
	switch (status) {
	case 400:
		return "invalid_request_error";
	case 404:
		return "not_found_error";
	case 405:
	case 415:
		return "invalid_request_error";
	case 401:
		return "authentication_error";
	case 403:
		return "permission_error";
	case 413:
		return "request_too_large";
	case 503:
		return "overloaded_error";
	case 504:
		return "timeout_error";
	default:
		return "api_error";
	}
}

static cJSON *
error_obj(int status, const char *msg)
{
	cJSON *o = typed("error");
	cJSON *e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(e, "type", error_type(status));
	fe_add_text(e, "message", msg, strlen(msg));
	return o;
}

static char *
error(int status, const char *msg, const char *param, size_t *len)
{
	return fe_json_print(error_obj(status, msg), len);
}

static char *
stream_error(int status, const char *msg, size_t *len)
{
	struct fe_sse e = { 0 };
	fe_sse_event(&e, "error", error_obj(status, msg));
	return fe_sse_done(&e, len);
}

const struct fe_dialect fe_anthropic = {
	.parse = parse,
	.response = response,
	.stream_start = stream_start,
	.stream_text = stream_text,
	.stream_end = stream_end,
	.error = error,
	.stream_error = stream_error,
};
