// api-openai.c - POST /v1/chat/completions and /v1/completions.
//
// Shapes follow what the official openai client parses: a chat stream opens
// with a role-only delta, carries content deltas, ends with an empty delta
// and the finish_reason, then (stream_options.include_usage) a chunk with
// empty choices and the usage, then "data: [DONE]". Errors are
// {"error":{"message","type","param","code"}}; an error in a stream that
// has begun is a data line holding that object.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

static int
parse_role(const char *s, enum tok_role *r)
{
	if (strcmp(s, "system") == 0 || strcmp(s, "developer") == 0)
		*r = TOK_ROLE_SYSTEM;
	else if (strcmp(s, "user") == 0)
		*r = TOK_ROLE_USER;
	else if (strcmp(s, "assistant") == 0)
		*r = TOK_ROLE_ASSISTANT;
	else
		return -1;
	return 0;
}

static int
parse_messages(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
	if (!msgs || cJSON_IsNull(msgs))
		return fe_bad_set(bad, 400, "messages", "'messages' is required");
	if (!cJSON_IsArray(msgs))
		return fe_bad_set(bad, 400, "messages", "'messages' must be an array");
	int n = cJSON_GetArraySize(msgs);
	if (n == 0)
		return fe_bad_set(bad, 400, "messages", "'messages' must not be empty");
	if (!(p->msgs = calloc((size_t)n, sizeof *p->msgs)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
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
		if (parse_role(role->valuestring, &r) != 0)
			return fe_bad_set(bad, 400, where, "'%s': role '%.32s' is not supported (system, user, assistant)",
			                  where, role->valuestring);
		snprintf(where, sizeof where, "messages[%d].content", i);
		char *text;
		if (fe_get_text(cJSON_GetObjectItemCaseSensitive(m, "content"), where, &text, bad) < 0)
			return -1;
		p->msgs[p->n_msgs].role = r;
		p->msgs[p->n_msgs].content = text;
		p->n_msgs++;
		i++;
	}
	return 0;
}

static int
parse(cJSON *body, enum fe_api api, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	p->api = api;
	p->max_tokens = cfg->max_tokens;
	p->temperature = 0.7f;
	p->top_k = api == FE_API_CHAT ? 40 : 0;
	p->top_p = 1;
	p->repeat_penalty = 1;
	const char *model = NULL;
	if (fe_get_string(body, "model", &model, bad) < 0)
		return -1;
	if (!(p->model = strdup(model && model[0] ? model : cfg->name)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	if (api == FE_API_CHAT) {
		if (parse_messages(body, p, bad) != 0)
			return -1;
	} else {
		cJSON *pr = cJSON_GetObjectItemCaseSensitive(body, "prompt");
		if (!pr || cJSON_IsNull(pr))
			return fe_bad_set(bad, 400, "prompt", "'prompt' is required");
		if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1 && cJSON_IsString(cJSON_GetArrayItem(pr, 0)))
			pr = cJSON_GetArrayItem(pr, 0);
		if (!cJSON_IsString(pr))
			return fe_bad_set(bad, 400, "prompt", "'prompt' must be a string");
		if (!(p->prompt = strdup(pr->valuestring)))
			return fe_bad_set(bad, 503, NULL, "out of memory");
		p->prompt_len = strlen(p->prompt);
	}
	long long ll;
	int rv;
	const char *mt_keys[] = { "max_tokens", "max_completion_tokens" };
	for (int i = 0; i < 2; i++) {
		if ((rv = fe_get_int(body, mt_keys[i], 1, 1 << 20, &ll, bad)) < 0)
			return -1;
		if (rv)
			p->max_tokens = (unsigned)ll;
	}
	if ((rv = fe_get_int(body, "n", 1, 1, &ll, bad)) < 0)
		return fe_bad_set(bad, 400, "n", "'n' must be 1: one choice per request is supported");
	if (fe_get_sampling(body, p, bad) < 0)
		return -1;
	if (fe_get_stops(body, "stop", p, bad) < 0)
		return -1;
	cJSON *so = cJSON_GetObjectItemCaseSensitive(body, "stream_options");
	if (so && !cJSON_IsNull(so)) {
		if (!cJSON_IsObject(so))
			return fe_bad_set(bad, 400, "stream_options", "'stream_options' must be an object");
		int b = 0;
		if ((rv = fe_get_bool(so, "include_usage", &b, bad)) < 0)
			return fe_bad_set(bad, 400, "stream_options.include_usage",
			                  "'stream_options.include_usage' must be true or false");
		if (rv)
			p->include_usage = b;
	}
	return 0;
}

static const char *
finish_name(enum fe_finish f)
{
	return f == FE_FINISH_LENGTH ? "length" : "stop";
}

static cJSON *
usage(const struct fe_gen *g)
{
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "prompt_tokens", g->r.prompt_tokens);
	cJSON_AddNumberToObject(u, "completion_tokens", g->r.completion_tokens);
	cJSON_AddNumberToObject(u, "total_tokens", g->r.prompt_tokens + g->r.completion_tokens);
	cJSON_AddNumberToObject(u, "prompt_tokens_dropped", g->r.prompt_dropped);
	return u;
}

static int
is_chat(const struct fe_gen *g)
{
	return g->p.api == FE_API_CHAT;
}

static cJSON *
head(const struct fe_gen *g, const char *object)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", g->id);
	cJSON_AddStringToObject(o, "object", object);
	cJSON_AddNumberToObject(o, "created", (double)g->created);
	cJSON_AddStringToObject(o, "model", g->p.model);
	cJSON_AddStringToObject(o, "system_fingerprint", "anedvd-" ANEDVD_VERSION);
	return o;
}

static char *
response(const struct fe_gen *g, size_t *len)
{
	cJSON *o = head(g, is_chat(g) ? "chat.completion" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	cJSON *c = cJSON_CreateObject();
	cJSON_AddItemToArray(choices, c);
	cJSON_AddNumberToObject(c, "index", 0);
	if (is_chat(g)) {
		cJSON *m = cJSON_AddObjectToObject(c, "message");
		cJSON_AddStringToObject(m, "role", "assistant");
		fe_add_text(m, "content", g->text, g->len);
	} else {
		fe_add_text(c, "text", g->text, g->len);
	}
	cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddStringToObject(c, "finish_reason", finish_name(g->r.finish));
	cJSON_AddItemToObject(o, "usage", usage(g));
	cJSON_AddItemToObject(o, "timings", fe_timings_json(g));
	return fe_json_print(o, len);
}

// sse wraps a JSON object as one "data:" event
static char *
sse(cJSON *o, size_t *len)
{
	size_t n;
	char *j = fe_json_print(o, &n);
	if (!j)
		return NULL;
	char *s = malloc(n + 9);
	if (s) {
		memcpy(s, "data: ", 6);
		memcpy(s + 6, j, n);
		memcpy(s + 6 + n, "\n\n", 3);
		*len = n + 8;
	}
	free(j);
	return s;
}

static cJSON *
chunk(const struct fe_gen *g, cJSON **choice)
{
	cJSON *o = head(g, is_chat(g) ? "chat.completion.chunk" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	*choice = cJSON_CreateObject();
	cJSON_AddItemToArray(choices, *choice);
	cJSON_AddNumberToObject(*choice, "index", 0);
	return o;
}

static char *
stream_start(const struct fe_gen *g, size_t *len)
{
	if (!is_chat(g)) {
		*len = 0;
		return strdup("");
	}
	cJSON *c;
	cJSON *o = chunk(g, &c);
	cJSON *d = cJSON_AddObjectToObject(c, "delta");
	cJSON_AddStringToObject(d, "role", "assistant");
	cJSON_AddStringToObject(d, "content", "");
	cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddNullToObject(c, "finish_reason");
	return sse(o, len);
}

static char *
stream_text(const struct fe_gen *g, const char *s, size_t n, size_t *len)
{
	cJSON *c;
	cJSON *o = chunk(g, &c);
	if (is_chat(g)) {
		cJSON *d = cJSON_AddObjectToObject(c, "delta");
		fe_add_text(d, "content", s, n);
	} else {
		fe_add_text(c, "text", s, n);
	}
	cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddNullToObject(c, "finish_reason");
	return sse(o, len);
}

static char *
stream_end(const struct fe_gen *g, size_t *len)
{
	cJSON *c;
	cJSON *o = chunk(g, &c);
	if (is_chat(g))
		cJSON_AddObjectToObject(c, "delta");
	else
		cJSON_AddStringToObject(c, "text", "");
	cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddStringToObject(c, "finish_reason", finish_name(g->r.finish));
	cJSON_AddItemToObject(o, "timings", fe_timings_json(g));
	if (!g->p.include_usage) // the usage is also on the final chunk, as the seed did
		cJSON_AddItemToObject(o, "usage", usage(g));
	size_t n1 = 0, n2 = 0;
	char *a = sse(o, &n1), *b = NULL;
	if (g->p.include_usage) {
		cJSON *u = head(g, is_chat(g) ? "chat.completion.chunk" : "text_completion");
		cJSON_AddArrayToObject(u, "choices");
		cJSON_AddItemToObject(u, "usage", usage(g));
		b = sse(u, &n2);
	}
	static const char done[] = "data: [DONE]\n\n";
	char *s = a ? malloc(n1 + n2 + sizeof done) : NULL;
	if (s) {
		memcpy(s, a, n1);
		if (b)
			memcpy(s + n1, b, n2);
		memcpy(s + n1 + n2, done, sizeof done);
		*len = n1 + n2 + sizeof done - 1;
	}
	free(a);
	free(b);
	return s;
}

static const char *
error_type(int status)
{
	switch (status) {
	case 400:
	case 413:
		return "invalid_request_error";
	case 404:
		return "not_found_error";
	case 405:
	case 401: // as OpenAI, with the code invalid_api_key
	case 415:
		return "invalid_request_error";
	case 403:
		return "permission_error";
	case 503:
		return "server_busy";
	case 504:
		return "timeout";
	default:
		return "server_error";
	}
}

static cJSON *
error_obj(int status, const char *msg, const char *param)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *e = cJSON_AddObjectToObject(o, "error");
	fe_add_text(e, "message", msg, strlen(msg));
	cJSON_AddStringToObject(e, "type", error_type(status));
	if (param && param[0])
		cJSON_AddStringToObject(e, "param", param);
	else
		cJSON_AddNullToObject(e, "param");
	if (status == 401)
		cJSON_AddStringToObject(e, "code", "invalid_api_key");
	else
		cJSON_AddNullToObject(e, "code");
	return o;
}

static char *
error(int status, const char *msg, const char *param, size_t *len)
{
	return fe_json_print(error_obj(status, msg, param), len);
}

static char *
stream_error(int status, const char *msg, size_t *len)
{
	return sse(error_obj(status, msg, NULL), len);
}

const struct fe_dialect fe_openai = {
	.parse = parse,
	.response = response,
	.stream_start = stream_start,
	.stream_text = stream_text,
	.stream_end = stream_end,
	.error = error,
	.stream_error = stream_error,
};
