// api-openai.c - POST /v1/chat/completions and /v1/completions.
//
// Shapes follow what the official openai client parses: a chat stream opens
// with a role-only delta, carries content deltas, ends with an empty delta
// and the finish_reason, then (stream_options.include_usage) a chunk with
// empty choices and the usage, then "data: [DONE]". Errors are
// {"error":{"message","type","param","code"}}; an error in a stream that
// has begun is a data line holding that object.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

// the arguments of an assistant turn's calls are JSON objects (the
// template, or the tool markup the prompt is written in, holds them as such)
static int
check_arguments(const struct tok_msg *m, int i, struct fe_bad *bad)
{
	for (size_t k = 0; k < m->n_calls; k++) {
		cJSON *a = cJSON_Parse(m->calls[k].arguments);
		int ok = cJSON_IsObject(a);
		cJSON_Delete(a);
		if (!ok) {
			char where[96];
			snprintf(where, sizeof where, "messages[%d].tool_calls[%zu].function.arguments", i, k);
			return fe_bad_set(bad, 400, where, "'%s' must be a JSON object", where);
		}
	}
	return 0;
}

static int
parse_messages(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *msgs;
	int n = fe_get_list(body, "messages", &msgs, bad);
	if (n < 0)
		return -1;
	if (!(p->msgs = calloc((size_t)n, sizeof *p->msgs)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	int i = 0;
	cJSON *m;
	cJSON_ArrayForEach(m, msgs)
	{
		char where[64];
		snprintf(where, sizeof where, "messages[%d]", i++);
		if (fe_chat_openai_message(m, where, &p->msgs[p->n_msgs], bad) != 0) {
			fe_msg_free(&p->msgs[p->n_msgs]);
			return -1;
		}
		p->n_msgs++;
		if (check_arguments(&p->msgs[p->n_msgs - 1], i - 1, bad) != 0)
			return -1;
		if (p->msgs[p->n_msgs - 1].role == TOK_ROLE_TOOL) {
			snprintf(where, sizeof where, "messages[%d].tool_call_id", i - 1);
			if (fe_chat_check_tool_turns(p, p->n_msgs - 1, bad, where) != 0)
				return -1;
		}
	}
	return 0;
}

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {name, schema, strict}}
static int
parse_format(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "response_format");
	if (!rf || cJSON_IsNull(rf))
		return 0;
	cJSON *type = cJSON_GetObjectItemCaseSensitive(rf, "type");
	if (!cJSON_IsObject(rf) || !cJSON_IsString(type))
		return fe_bad_set(bad, 400, "response_format", "'response_format' must be an object with a type");
	const char *t = type->valuestring;
	if (!strcmp(t, "text"))
		return 0;
	if (!strcmp(t, "json_object")) {
		p->json_object = 1;
		return 0;
	}
	if (strcmp(t, "json_schema"))
		return fe_bad_set(bad, 400, "response_format.type",
		                  "'response_format.type': '%.32s' is not text, json_object or json_schema", t);
	cJSON *js = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
	cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
	if (!cJSON_IsObject(js))
		return fe_bad_set(bad, 400, "response_format.json_schema",
		                  "'response_format.json_schema' must be an object");
	if (!schema || cJSON_IsNull(schema)) // a name alone: any JSON object
		p->json_object = 1;
	else if (!(p->schema = cJSON_Duplicate(schema, 1)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	return 0;
}

// llama.cpp's extensions: "grammar" (GBNF) and "json_schema" (a schema)
static int
parse_constraints(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	const char *g = NULL;
	if (fe_get_string(body, "grammar", &g, bad) < 0)
		return -1;
	if (g && g[0] && !(p->grammar = strdup(g)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	cJSON *js = cJSON_GetObjectItemCaseSensitive(body, "json_schema");
	if (js && !cJSON_IsNull(js)) {
		if (p->schema || p->json_object)
			return fe_bad_set(bad, 400, "json_schema", "'json_schema' beside 'response_format': give one");
		if (!cJSON_IsObject(js) && !cJSON_IsBool(js))
			return fe_bad_set(bad, 400, "json_schema", "'json_schema' must be a JSON Schema object");
		if (!(p->schema = cJSON_Duplicate(js, 1)))
			return fe_bad_set(bad, 503, NULL, "out of memory");
	}
	return 0;
}

// a token id of the request: an integer inside the vocabulary (when the
// tokenizer has told its size; the engine checks again)
static int
token_id(double d, const char *where, int32_t *out, struct fe_bad *bad)
{
	int nv = fe_n_vocab();
	if (d != floor(d) || d < 0 || d > 2147483647.0)
		return fe_bad_set(bad, 400, where, "'%s': %g is not a token id", where, d);
	if (nv > 0 && d >= nv)
		return fe_bad_set(bad, 400, where, "'%s': token id %.0f is outside the vocabulary of %d", where, d, nv);
	*out = (int32_t)d;
	return 0;
}

// stop: a string, or an array of strings and (llama.cpp's extension) token ids
static int
parse_stop(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "stop");
	if (v && !cJSON_IsNull(v) && !cJSON_IsString(v) && !cJSON_IsArray(v))
		return fe_bad_set(bad, 400, "stop", "'stop' must be a string or an array of strings and token ids");
	if (!cJSON_IsArray(v))
		return fe_get_stops(body, "stop", p, bad);
	cJSON *strings = cJSON_CreateArray(), *e;
	if (!strings)
		return fe_bad_set(bad, 503, NULL, "out of memory");
	size_t i = 0;
	cJSON_ArrayForEach(e, v)
	{
		if (!cJSON_IsNumber(e) && !cJSON_IsString(e)) {
			cJSON_Delete(strings);
			return fe_bad_set(bad, 400, "stop", "'stop[%zu]' must be a string or a token id", i);
		}
		i++;
		if (cJSON_IsNumber(e)) {
			if (p->n_stop_ids >= FE_MAX_STOP_IDS) {
				cJSON_Delete(strings);
				return fe_bad_set(bad, 400, "stop", "'stop': at most %d token ids", FE_MAX_STOP_IDS);
			}
			if (token_id(e->valuedouble, "stop", &p->stop_ids[p->n_stop_ids], bad) != 0) {
				cJSON_Delete(strings);
				return -1;
			}
			p->n_stop_ids++;
		} else {
			cJSON_AddItemReferenceToArray(strings, e);
		}
	}
	cJSON *o = cJSON_CreateObject();
	int rv = -1;
	if (o) {
		cJSON_AddItemToObject(o, "stop", strings);
		rv = fe_get_stops(o, "stop", p, bad);
		cJSON_Delete(o);
	} else {
		cJSON_Delete(strings);
		fe_bad_set(bad, 503, NULL, "out of memory");
	}
	return rv < 0 ? -1 : 0;
}

// chat: logprobs true/false and top_logprobs 0-20; completions: logprobs 0-5
static int
parse_logprobs(cJSON *body, enum fe_api api, struct fe_params *p, struct fe_bad *bad)
{
	long long ll;
	int rv;
	if (api == FE_API_COMPLETIONS) {
		if ((rv = fe_get_int(body, "logprobs", 0, 5, &ll, bad)) < 0)
			return -1;
		if (rv) {
			p->logprobs = 1;
			p->top_logprobs = (int)ll;
		}
		return 0;
	}
	int b = 0;
	if ((rv = fe_get_bool(body, "logprobs", &b, bad)) < 0)
		return -1;
	p->logprobs = rv && b;
	if ((rv = fe_get_int(body, "top_logprobs", 0, FE_MAX_TOP_LOGPROBS, &ll, bad)) < 0)
		return -1;
	if (rv && !p->logprobs)
		return fe_bad_set(bad, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
	if (rv)
		p->top_logprobs = (int)ll;
	return 0;
}

// logit_bias: {"token id": bias}, bias in [-100, 100]
static int
parse_bias(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "logit_bias");
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsObject(v))
		return fe_bad_set(bad, 400, "logit_bias", "'logit_bias' must be an object mapping token ids to biases");
	int n = cJSON_GetArraySize(v);
	if (n > FE_MAX_BIAS)
		return fe_bad_set(bad, 400, "logit_bias", "'logit_bias': %d entries, at most %d", n, FE_MAX_BIAS);
	if (n == 0)
		return 0;
	if (!(p->bias = calloc((size_t)n, sizeof *p->bias)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	cJSON *e;
	cJSON_ArrayForEach(e, v)
	{
		char where[96];
		snprintf(where, sizeof where, "logit_bias.%.64s", e->string);
		char *end = NULL;
		double id = strtod(e->string, &end);
		if (!e->string[0] || *end || end == e->string)
			return fe_bad_set(bad, 400, "logit_bias", "'logit_bias': key '%.64s' is not a token id",
			                  e->string);
		int32_t t = 0;
		if (token_id(id, "logit_bias", &t, bad) != 0)
			return -1;
		if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100)
			return fe_bad_set(bad, 400, "logit_bias",
			                  "'%s': the bias must be a number between -100 and 100", where);
		p->bias[p->n_bias].id = t;
		p->bias[p->n_bias].bias = (float)e->valuedouble;
		p->n_bias++;
	}
	return 0;
}

// token ids of an embeddings input: an array of integers in the vocabulary
static int
embed_ids(cJSON *a, size_t i, struct fe_params *p, struct fe_bad *bad)
{
	int n = cJSON_GetArraySize(a);
	if (n == 0)
		return fe_bad_set(bad, 400, "input", "'input[%zu]': an empty list of token ids", i);
	if (!(p->emb_ids[i] = malloc((size_t)n * sizeof **p->emb_ids)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	cJSON *e;
	cJSON_ArrayForEach(e, a)
	{
		if (!cJSON_IsNumber(e))
			return fe_bad_set(bad, 400, "input", "'input': a list of token ids holds only integers");
		if (token_id(e->valuedouble, "input", &p->emb_ids[i][p->emb_len[i]], bad) != 0)
			return -1;
		p->emb_len[i]++;
	}
	return 0;
}

// completions: prompt is a string or an array of token ids, or one of
// those in an array (the API's batch form, here of one prompt)
static int
parse_prompt(cJSON *pr, struct fe_params *p, struct fe_bad *bad)
{
	if (cJSON_IsArray(pr) && cJSON_GetArraySize(pr) == 1 && !cJSON_IsNumber(cJSON_GetArrayItem(pr, 0)))
		pr = cJSON_GetArrayItem(pr, 0);
	if (cJSON_IsString(pr)) {
		if (!(p->prompt = strdup(pr->valuestring)))
			return fe_bad_set(bad, 503, NULL, "out of memory");
		p->prompt_len = strlen(p->prompt);
		return 0;
	}
	const int n = cJSON_IsArray(pr) ? cJSON_GetArraySize(pr) : -1;
	if (n > 1 && !cJSON_IsNumber(cJSON_GetArrayItem(pr, 0)))
		return fe_bad_set(bad, 400, "prompt",
		                  "'prompt': one prompt a request (%d given): send them as separate requests", n);
	if (n < 0)
		return fe_bad_set(bad, 400, "prompt", "'prompt' must be a string or an array of token ids");
	if (n == 0)
		return fe_bad_set(bad, 400, "prompt", "'prompt': an empty list of token ids");
	if (!(p->prompt_ids = malloc((size_t)n * sizeof *p->prompt_ids)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	cJSON *e;
	cJSON_ArrayForEach(e, pr)
	{
		if (!cJSON_IsNumber(e))
			return fe_bad_set(bad, 400, "prompt", "'prompt': a list of token ids holds only integers");
		if (token_id(e->valuedouble, "prompt", &p->prompt_ids[p->n_prompt_ids], bad) != 0)
			return -1;
		p->n_prompt_ids++;
	}
	return 0;
}

// embeddings: input is a string, an array of strings, an array of token
// ids or an array of arrays of token ids
static int
parse_embeddings(cJSON *body, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	const char *fmt = NULL;
	if (fe_get_string(body, "encoding_format", &fmt, bad) < 0)
		return -1;
	if (fmt && strcmp(fmt, "float") != 0 && strcmp(fmt, "base64") != 0)
		return fe_bad_set(bad, 400, "encoding_format",
		                  "'encoding_format' must be \"float\" or \"base64\", not '%.32s'", fmt);
	p->base64 = fmt && strcmp(fmt, "base64") == 0;
	long long ll;
	int rv;
	if ((rv = fe_get_int(body, "dimensions", 1, 1 << 20, &ll, bad)) < 0)
		return -1;
	if (rv)
		p->dimensions = (long)ll;
	(void)cfg;
	cJSON *in = fe_get_required(body, "input", bad);
	if (!in)
		return -1;
	int ids = 0, n = 1;
	if (cJSON_IsArray(in)) {
		n = cJSON_GetArraySize(in);
		if (n == 0)
			return fe_bad_set(bad, 400, "input", "'input' must not be empty");
		if (n > FE_MAX_EMBED_INPUTS)
			return fe_bad_set(bad, 400, "input", "'input': %d inputs, at most %d", n, FE_MAX_EMBED_INPUTS);
		ids = cJSON_IsNumber(cJSON_GetArrayItem(in, 0)); // one input given as token ids
		if (ids)
			n = 1;
	} else if (!cJSON_IsString(in)) {
		return fe_bad_set(bad, 400, "input",
		                  "'input' must be a string, an array of strings or an array of token-id arrays");
	}
	p->emb_text = calloc((size_t)n, sizeof *p->emb_text);
	p->emb_ids = calloc((size_t)n, sizeof *p->emb_ids);
	p->emb_len = calloc((size_t)n, sizeof *p->emb_len);
	if (!p->emb_text || !p->emb_ids || !p->emb_len)
		return fe_bad_set(bad, 503, NULL, "out of memory");
	p->n_inputs = (size_t)n;
	if (cJSON_IsString(in) || ids) {
		if (ids)
			return embed_ids(in, 0, p, bad);
		if (!in->valuestring[0])
			return fe_bad_set(bad, 400, "input", "'input' must not be an empty string");
		return (p->emb_text[0] = strdup(in->valuestring)) ? 0 : fe_bad_set(bad, 503, NULL, "out of memory");
	}
	size_t i = 0;
	cJSON *e;
	cJSON_ArrayForEach(e, in)
	{
		if (cJSON_IsString(e)) {
			if (!e->valuestring[0])
				return fe_bad_set(bad, 400, "input", "'input[%zu]' must not be an empty string", i);
			if (!(p->emb_text[i] = strdup(e->valuestring)))
				return fe_bad_set(bad, 503, NULL, "out of memory");
		} else if (cJSON_IsArray(e)) {
			if (embed_ids(e, i, p, bad) != 0)
				return -1;
		} else {
			return fe_bad_set(bad, 400, "input", "'input[%zu]' must be a string or an array of token ids",
			                  i);
		}
		i++;
	}
	return 0;
}

static int
parse(cJSON *body, enum fe_api api, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	p->api = api;
	if (api == FE_API_EMBEDDINGS) {
		const char *model = NULL;
		if (fe_get_string(body, "model", &model, bad) < 0)
			return -1;
		if (!(p->model = strdup(model && model[0] ? model : cfg->name)))
			return fe_bad_set(bad, 503, NULL, "out of memory");
		return parse_embeddings(body, cfg, p, bad);
	}
	p->max_tokens = cfg->max_tokens;
	fe_params_sampling(p, cfg, api == FE_API_CHAT ? 40 : 0);
	if (fe_get_model(body, cfg, p, bad) < 0)
		return -1;
	if (api == FE_API_CHAT) {
		if (parse_messages(body, p, bad) != 0 || fe_chat_openai_thinking(body, p, bad) != 0)
			return -1;
	} else {
		cJSON *pr = fe_get_required(body, "prompt", bad);
		if (!pr)
			return -1;
		if (parse_prompt(pr, p, bad) != 0)
			return -1;
	}
	long long ll;
	int rv;
	const char *mt_keys[] = {"max_tokens", "max_completion_tokens"};
	for (int i = 0; i < 2; i++) {
		if ((rv = fe_get_int(body, mt_keys[i], 1, 1 << 20, &ll, bad)) < 0)
			return -1;
		if (rv)
			p->max_tokens = (unsigned)ll;
	}
	p->n = 1;
	if ((rv = fe_get_int(body, "n", 1, FE_MAX_N, &ll, bad)) < 0)
		return -1;
	if (rv)
		p->n = (int)ll;
	// an insertion (text after the completion) is not done: refused rather
	// than answered as a plain completion
	cJSON *sf = cJSON_GetObjectItemCaseSensitive(body, "suffix");
	if (api == FE_API_COMPLETIONS && sf && !cJSON_IsNull(sf) && !(cJSON_IsString(sf) && !sf->valuestring[0]))
		return fe_bad_set(bad, 400, "suffix",
		                  "'suffix' is not supported: no insertion, only a completion after the prompt");
	cJSON *bo = cJSON_GetObjectItemCaseSensitive(body, "best_of");
	if (bo && !cJSON_IsNull(bo) && !(cJSON_IsNumber(bo) && bo->valuedouble == 1))
		return fe_bad_set(bad, 400, "best_of",
		                  "'best_of' is not supported (only 1): ask for n choices and rank them yourself");
	if (fe_get_sampling(body, p, bad) < 0)
		return -1;
	if (parse_stop(body, p, bad) < 0 || parse_logprobs(body, api, p, bad) < 0 || parse_bias(body, p, bad) < 0)
		return -1;
	if (api == FE_API_COMPLETIONS) {
		if (fe_get_bool(body, "echo", &p->echo, bad) < 0)
			return -1;
		if (p->echo && p->logprobs)
			return fe_bad_set(
				bad, 400, "echo",
				"'echo' with 'logprobs' is not supported: the prompt's tokens get no log-probabilities");
	}
	p->call_ids = FE_IDS_OPENAI;
	if (api == FE_API_CHAT && (fe_openai_tools(body, FE_TOOLS_CHAT, p, bad) < 0 || parse_format(body, p, bad) < 0))
		return -1;
	if (p->n_tools && !(p->tools_json = fe_tools_json(p))) // what the template gets
		return fe_bad_set(bad, 503, NULL, "out of memory");
	if (parse_constraints(body, p, bad) < 0)
		return -1;
	static const struct fe_fields fields = {"tools", "tool_choice", "response_format.json_schema.schema",
	                                        "grammar"};
	static const struct fe_fields fields_ext = {"tools", "tool_choice", "json_schema", "grammar"};
	if (fe_structured_check(p, cJSON_GetObjectItemCaseSensitive(body, "response_format") ? &fields : &fields_ext,
	                        bad) < 0)
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
	return f == FE_FINISH_LENGTH ? "length" : f == FE_FINISH_TOOLS ? "tool_calls" : "stop";
}

// message.tool_calls: [{id, type, function: {name, arguments}}] (the
// arguments as text, as far as they came)
static cJSON *
tool_calls(const struct fe_call *c, int n)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; i < n; i++) {
		cJSON *t = cJSON_CreateObject(), *fn = cJSON_CreateObject();
		cJSON_AddStringToObject(t, "id", c[i].id);
		cJSON_AddStringToObject(t, "type", "function");
		cJSON_AddStringToObject(fn, "name", c[i].name);
		fe_add_text(fn, "arguments", c[i].args ? c[i].args : "", c[i].len);
		cJSON_AddItemToObject(t, "function", fn);
		cJSON_AddItemToArray(a, t);
	}
	return a;
}

static cJSON *
usage(const struct fe_gen *g)
{
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "prompt_tokens", g->r.prompt_tokens);
	cJSON_AddNumberToObject(u, "completion_tokens", g->r.completion_tokens);
	cJSON_AddNumberToObject(u, "total_tokens", g->r.prompt_tokens + g->r.completion_tokens);
	cJSON_AddNumberToObject(u, "prompt_tokens_dropped", g->r.prompt_dropped);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens",
	                        g->r.eng.cached_tokens);
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

static int
n_choices(const struct fe_gen *g)
{
	return g->p.n >= 1 && g->p.n <= FE_MAX_N ? g->p.n : 1;
}

// a logprob as JSON: -inf (a banned or impossible token) reads as OpenAI's floor
static double
lp_value(float x)
{
	return x >= -9999.0f ? (double)x : -9999.0;
}

// "token" (the bytes as text, invalid UTF-8 replaced) and "bytes" of an id
static void
add_token(cJSON *o, int32_t id, int with_bytes)
{
	size_t n = 0;
	const char *b = fe_token_bytes(id, &n);
	fe_add_text(o, "token", b, n);
	if (!with_bytes)
		return;
	cJSON *a = cJSON_AddArrayToObject(o, "bytes");
	for (size_t i = 0; i < n; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)b[i]));
}

// chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}], "refusal": null}
static cJSON *
chat_logprobs(const struct fe_lp_tok *t, size_t n)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *content = cJSON_AddArrayToObject(o, "content");
	for (size_t i = 0; i < n; i++) {
		cJSON *e = cJSON_CreateObject();
		cJSON_AddItemToArray(content, e);
		add_token(e, t[i].id, 1);
		cJSON_AddNumberToObject(e, "logprob", lp_value(t[i].logprob));
		cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
		for (int k = 0; k < t[i].n_top; k++) {
			cJSON *a = cJSON_CreateObject();
			cJSON_AddItemToArray(top, a);
			add_token(a, t[i].top[k].id, 1);
			cJSON_AddNumberToObject(a, "logprob", lp_value(t[i].top[k].logprob));
		}
	}
	cJSON_AddNullToObject(o, "refusal");
	return o;
}

// legacy completions: parallel arrays; top_logprobs maps token text to
// logprob (the first of two alternatives with the same text wins)
static cJSON *
legacy_logprobs(const struct fe_lp_tok *t, size_t n)
{
	cJSON *o = cJSON_CreateObject();
	cJSON *tokens = cJSON_AddArrayToObject(o, "tokens");
	cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
	cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
	cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
	for (size_t i = 0; i < n; i++) {
		cJSON *tk = cJSON_CreateObject();
		add_token(tk, t[i].id, 0);
		cJSON *s = cJSON_DetachItemFromObject(tk, "token");
		cJSON_Delete(tk);
		cJSON_AddItemToArray(tokens, s);
		cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp_value(t[i].logprob)));
		cJSON *m = cJSON_CreateObject();
		for (int k = 0; k < t[i].n_top; k++) {
			size_t bl = 0;
			const char *b = fe_token_bytes(t[i].top[k].id, &bl);
			char *key = fe_utf8_clean(b ? b : "", b ? bl : 0, NULL);
			if (key && !cJSON_GetObjectItemCaseSensitive(m, key))
				cJSON_AddNumberToObject(m, key, lp_value(t[i].top[k].logprob));
			free(key);
		}
		cJSON_AddItemToArray(tops, m);
		cJSON_AddItemToArray(offs, cJSON_CreateNumber(t[i].offset));
	}
	return o;
}

static void
add_logprobs(cJSON *c, const struct fe_gen *g, const struct fe_lp_tok *t, size_t n)
{
	if (!g->p.logprobs)
		cJSON_AddNullToObject(c, "logprobs");
	else
		cJSON_AddItemToObject(c, "logprobs", is_chat(g) ? chat_logprobs(t, n) : legacy_logprobs(t, n));
}

static char *
base64(const void *data, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *b = data;
	char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
	if (!s)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v =
			(unsigned)b[i] << 16 | (i + 1 < n ? (unsigned)b[i + 1] << 8 : 0) | (i + 2 < n ? b[i + 2] : 0);
		*o++ = tab[v >> 18 & 63];
		*o++ = tab[v >> 12 & 63];
		*o++ = i + 1 < n ? tab[v >> 6 & 63] : '=';
		*o++ = i + 2 < n ? tab[v & 63] : '=';
	}
	*o = 0;
	return s;
}

// {"object":"list","data":[{"object":"embedding","index","embedding"}],"model","usage"}
static char *
embeddings_response(const struct fe_gen *g, size_t *len)
{
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "object", "list");
	cJSON *data = cJSON_AddArrayToObject(o, "data");
	for (size_t i = 0; i < g->p.n_inputs; i++) {
		const float *v = g->emb + i * (size_t)g->emb_dims;
		cJSON *e = cJSON_CreateObject();
		cJSON_AddItemToArray(data, e);
		cJSON_AddStringToObject(e, "object", "embedding");
		cJSON_AddNumberToObject(e, "index", (double)i);
		if (g->p.base64) { // float32 little-endian, as the host holds them
			char *s = base64(v, (size_t)g->emb_dims * sizeof *v);
			cJSON_AddStringToObject(e, "embedding", s ? s : "");
			free(s);
		} else {
			cJSON *a = cJSON_AddArrayToObject(e, "embedding");
			for (int k = 0; k < g->emb_dims; k++)
				cJSON_AddItemToArray(a, cJSON_CreateNumber(v[k]));
		}
	}
	cJSON_AddStringToObject(o, "model", g->p.model);
	cJSON *u = cJSON_AddObjectToObject(o, "usage");
	cJSON_AddNumberToObject(u, "prompt_tokens", g->r.prompt_tokens);
	cJSON_AddNumberToObject(u, "total_tokens", g->r.prompt_tokens);
	return fe_json_print(o, len);
}

// completions with echo: the prompt's text, as given or as its ids read
static const char *
echo_text(const struct fe_gen *g, size_t *len)
{
	if (g->p.prompt) {
		*len = g->p.prompt_len;
		return g->p.prompt;
	}
	*len = g->p.echo_text ? g->p.echo_len : 0;
	return g->p.echo_text ? g->p.echo_text : "";
}

static char *
response(const struct fe_gen *g, size_t *len)
{
	if (g->p.api == FE_API_EMBEDDINGS)
		return embeddings_response(g, len);
	cJSON *o = head(g, is_chat(g) ? "chat.completion" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	for (int i = 0; i < n_choices(g); i++) {
		const struct fe_choice *ch = &g->ch[i];
		size_t tl = 0;
		const char *text = fe_choice_text(g, i, &tl);
		cJSON *c = cJSON_CreateObject();
		cJSON_AddItemToArray(choices, c);
		cJSON_AddNumberToObject(c, "index", i);
		if (is_chat(g)) {
			cJSON *m = cJSON_AddObjectToObject(c, "message");
			cJSON_AddStringToObject(m, "role", "assistant");
			if (ch->n_calls && fe_blank(text, tl))
				cJSON_AddNullToObject(m, "content");
			else
				fe_add_text(m, "content", text, tl);
			size_t rl = 0;
			const char *r = fe_choice_reasoning(g, i, &rl);
			if (rl) // a thinking model's thinking, as llama.cpp and vLLM send it
				fe_add_text(m, "reasoning_content", r, rl);
			if (ch->n_calls)
				cJSON_AddItemToObject(m, "tool_calls", tool_calls(ch->calls, ch->n_calls));
		} else if (g->p.echo) {
			size_t el = 0;
			const char *e = echo_text(g, &el);
			char *both = malloc(el + tl + 1);
			if (!both) {
				cJSON_Delete(o);
				return NULL;
			}
			memcpy(both, e, el);
			memcpy(both + el, text, tl);
			fe_add_text(c, "text", both, el + tl);
			free(both);
		} else {
			fe_add_text(c, "text", text, tl);
		}
		add_logprobs(c, g, ch->lp, ch->n_lp);
		cJSON_AddStringToObject(c, "finish_reason", finish_name(ch->finish));
	}
	cJSON_AddItemToObject(o, "usage", usage(g));
	cJSON_AddItemToObject(o, "timings", fe_timings_json(g));
	return fe_json_print(o, len);
}

static cJSON *
chunk(const struct fe_gen *g, cJSON **choice, int index)
{
	cJSON *o = head(g, is_chat(g) ? "chat.completion.chunk" : "text_completion");
	cJSON *choices = cJSON_AddArrayToObject(o, "choices");
	*choice = cJSON_CreateObject();
	cJSON_AddItemToArray(choices, *choice);
	cJSON_AddNumberToObject(*choice, "index", index);
	return o;
}

// sse_cat joins the events of a list of objects (consumed) into one buffer
static char *
sse_cat(cJSON **objs, int n, size_t *len)
{
	size_t total = 0;
	char *out = NULL;
	int bad = 0;
	for (int i = 0; i < n; i++) {
		size_t m = 0;
		char *e = bad ? (cJSON_Delete(objs[i]), NULL) : fe_sse(objs[i], &m);
		char *t = e ? realloc(out, total + m + 1) : NULL;
		if (!t) {
			free(e);
			bad = 1;
			continue;
		}
		out = t;
		memcpy(out + total, e, m + 1);
		total += m;
		free(e);
	}
	if (bad) {
		free(out);
		return NULL;
	}
	*len = total;
	return out ? out : strdup("");
}

static char *
stream_start(const struct fe_gen *g, size_t *len)
{
	cJSON *objs[FE_MAX_N];
	int n = n_choices(g);
	if (!is_chat(g) && g->p.echo) { // the prompt first, as a chunk of every choice
		size_t el = 0;
		const char *e = echo_text(g, &el);
		for (int i = 0; i < n; i++) {
			cJSON *c;
			objs[i] = chunk(g, &c, i);
			fe_add_text(c, "text", e, el);
			cJSON_AddNullToObject(c, "logprobs");
			cJSON_AddNullToObject(c, "finish_reason");
		}
		return sse_cat(objs, n, len);
	}
	if (!is_chat(g)) {
		*len = 0;
		return strdup("");
	}
	for (int i = 0; i < n; i++) {
		cJSON *c;
		objs[i] = chunk(g, &c, i);
		cJSON *d = cJSON_AddObjectToObject(c, "delta");
		cJSON_AddStringToObject(d, "role", "assistant");
		cJSON_AddStringToObject(d, "content", "");
		cJSON_AddNullToObject(c, "logprobs");
		cJSON_AddNullToObject(c, "finish_reason");
	}
	return sse_cat(objs, n, len);
}

static char *
stream_chunk(const struct fe_gen *g, const struct fe_chunk *ck, size_t *len)
{
	cJSON *c;
	cJSON *o = chunk(g, &c, ck->index);
	if (is_chat(g) && ck->call) {
		// a tool call: its first delta names it, the later ones carry pieces of its arguments
		cJSON *d = cJSON_AddObjectToObject(c, "delta");
		cJSON *tc = cJSON_AddArrayToObject(d, "tool_calls"), *t = cJSON_CreateObject(),
		      *fn = cJSON_CreateObject();
		cJSON_AddNumberToObject(t, "index", ck->call - 1);
		if (ck->start) {
			cJSON_AddStringToObject(t, "id", ck->start->id);
			cJSON_AddStringToObject(t, "type", "function");
			cJSON_AddStringToObject(fn, "name", ck->start->name);
		}
		fe_add_text(fn, "arguments", ck->text, ck->len);
		cJSON_AddItemToObject(t, "function", fn);
		cJSON_AddItemToArray(tc, t);
	} else if (is_chat(g)) {
		cJSON *d = cJSON_AddObjectToObject(c, "delta");
		fe_add_text(d, ck->part == FE_PART_REASONING ? "reasoning_content" : "content", ck->text, ck->len);
	} else {
		fe_add_text(c, "text", ck->text, ck->len);
	}
	if (g->p.logprobs && ck->n_lp)
		add_logprobs(c, g, ck->lp, ck->n_lp);
	else
		cJSON_AddNullToObject(c, "logprobs");
	cJSON_AddNullToObject(c, "finish_reason");
	return fe_sse(o, len);
}

static char *
stream_text(const struct fe_gen *g, const char *s, size_t n, size_t *len)
{
	struct fe_chunk ck = {.index = 0, .text = s, .len = n};
	return stream_chunk(g, &ck, len);
}

static char *
stream_end(const struct fe_gen *g, size_t *len)
{
	// one last chunk per choice with its finish_reason; the usage rides on
	// the last one (as the seed did) unless it gets a chunk of its own
	cJSON *objs[FE_MAX_N];
	int nc = n_choices(g);
	for (int i = 0; i < nc; i++) {
		cJSON *c;
		cJSON *o = objs[i] = chunk(g, &c, i);
		if (is_chat(g))
			cJSON_AddObjectToObject(c, "delta");
		else
			cJSON_AddStringToObject(c, "text", "");
		cJSON_AddNullToObject(c, "logprobs");
		cJSON_AddStringToObject(c, "finish_reason", finish_name(g->ch[i].finish));
		if (i == nc - 1) {
			cJSON_AddItemToObject(o, "timings", fe_timings_json(g));
			if (!g->p.include_usage)
				cJSON_AddItemToObject(o, "usage", usage(g));
		}
	}
	size_t n1 = 0, n2 = 0;
	char *a = sse_cat(objs, nc, &n1), *b = NULL;
	if (g->p.include_usage) {
		cJSON *u = head(g, is_chat(g) ? "chat.completion.chunk" : "text_completion");
		cJSON_AddArrayToObject(u, "choices");
		cJSON_AddItemToObject(u, "usage", usage(g));
		b = fe_sse(u, &n2);
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
	return fe_sse(error_obj(status, msg, NULL), len);
}

const struct fe_dialect fe_openai = FE_DIALECT_OF_FILE;
