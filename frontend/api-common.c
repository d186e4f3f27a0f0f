// api-common.c - what the OpenAI and Anthropic dialects share: typed field
// readers that name the offending field, the sampling fields, the timings
// object, response ids.
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fe.h"
#include "spec-json.h"

void
fe_params_sampling(struct fe_params *p, const struct fe_config *cfg, int top_k)
{
	p->temperature = 0.7f;
	p->top_k = top_k;
	p->top_p = 1;
	p->min_p = 0;
	p->repeat_penalty = 1;
	const struct fe_sampling_defaults *d = &cfg->def;
	if (d->set & FE_DEF_TEMP)
		p->temperature = d->temperature;
	if (d->set & FE_DEF_TOP_K)
		p->top_k = d->top_k;
	if (d->set & FE_DEF_TOP_P)
		p->top_p = d->top_p;
	if (d->set & FE_DEF_MIN_P)
		p->min_p = d->min_p;
	if (d->set & FE_DEF_REPEAT)
		p->repeat_penalty = d->repeat_penalty;
}

void
fe_params_free(struct fe_params *p)
{
	free(p->model);
	for (size_t i = 0; i < p->n_msgs; i++)
		fe_msg_free(&p->msgs[i]);
	free(p->msgs);
	free(p->tools_json);
	free(p->template_kwargs);
	for (int i = 0; i < p->n_tools; i++) {
		free(p->tools[i].name);
		free(p->tools[i].description);
		cJSON_Delete(p->tools[i].params);
	}
	free(p->tools);
	free(p->tool_name);
	cJSON_Delete(p->schema);
	free(p->grammar);
	free(p->prompt);
	free(p->prompt_ids);
	free(p->echo_text);
	for (size_t i = 0; i < p->n_stops; i++)
		free(p->stops[i]);
	free(p->ids);
	free(p->bias);
	for (size_t i = 0; i < p->n_inputs; i++) {
		if (p->emb_text)
			free(p->emb_text[i]);
		if (p->emb_ids)
			free(p->emb_ids[i]);
	}
	free(p->emb_text);
	free(p->emb_ids);
	free(p->emb_len);
	memset(p, 0, sizeof *p);
}

int
fe_bad_set(struct fe_bad *bad, int status, const char *param, const char *fmt, ...)
{
	bad->status = status;
	snprintf(bad->param, sizeof bad->param, "%s", param ? param : "");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(bad->msg, sizeof bad->msg, fmt, ap);
	va_end(ap);
	return -1;
}

// a seed for a request that gave none: the clock mixed with a counter
static uint64_t
fresh_seed(void)
{
	static uint64_t counter;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	x ^= __atomic_add_fetch(&counter, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED);
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 29);
}

static cJSON *
field(cJSON *o, const char *key)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return v && !cJSON_IsNull(v) ? v : NULL;
}

int
fe_get_number(cJSON *o, const char *key, double lo, double hi, double *out, struct fe_bad *bad)
{
	cJSON *v = field(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v))
		return fe_bad_set(bad, 400, key, "'%s' must be a number", key);
	double d = v->valuedouble;
	if (!isfinite(d) || d < lo || d > hi)
		return fe_bad_set(bad, 400, key, "'%s' must be between %g and %g, not %g", key, lo, hi, d);
	*out = d;
	return 1;
}

int
fe_get_int(cJSON *o, const char *key, long long lo, long long hi, long long *out, struct fe_bad *bad)
{
	cJSON *v = field(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
		return fe_bad_set(bad, 400, key, "'%s' must be an integer", key);
	double d = v->valuedouble;
	if (d < (double)lo || d > (double)hi)
		return fe_bad_set(bad, 400, key, "'%s' must be between %lld and %lld, not %.0f", key, lo, hi, d);
	*out = (long long)d;
	return 1;
}

int
fe_get_bool(cJSON *o, const char *key, int *out, struct fe_bad *bad)
{
	cJSON *v = field(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsBool(v))
		return fe_bad_set(bad, 400, key, "'%s' must be true or false", key);
	*out = cJSON_IsTrue(v);
	return 1;
}

int
fe_get_string(cJSON *o, const char *key, const char **out, struct fe_bad *bad)
{
	cJSON *v = field(o, key);
	if (!v)
		return 0;
	if (!cJSON_IsString(v))
		return fe_bad_set(bad, 400, key, "'%s' must be a string", key);
	*out = v->valuestring;
	return 1;
}

cJSON *
fe_get_required(cJSON *o, const char *key, struct fe_bad *bad)
{
	cJSON *v = field(o, key);
	if (!v)
		fe_bad_set(bad, 400, key, "'%s' is required", key);
	return v;
}

int
fe_get_list(cJSON *o, const char *key, cJSON **out, struct fe_bad *bad)
{
	cJSON *v = fe_get_required(o, key, bad);
	if (!v)
		return -1;
	if (!cJSON_IsArray(v))
		return fe_bad_set(bad, 400, key, "'%s' must be an array", key);
	int n = cJSON_GetArraySize(v);
	if (n == 0)
		return fe_bad_set(bad, 400, key, "'%s' must not be empty", key);
	*out = v;
	return n;
}

// the function an OpenAI tool_choice object names (NULL when tc is none),
// where its shape puts the name (chat completions leave the type unchecked)
static cJSON *
named_function(cJSON *tc, enum fe_tool_shape shape)
{
	if (!cJSON_IsObject(tc))
		return NULL;
	cJSON *name;
	if (shape == FE_TOOLS_CHAT) {
		name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"), "name");
	} else {
		cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
		if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
			return NULL;
		name = cJSON_GetObjectItemCaseSensitive(tc, "name");
	}
	return cJSON_IsString(name) ? name : NULL;
}

int
fe_openai_tools(cJSON *body, enum fe_tool_shape shape, struct fe_params *p, struct fe_bad *bad)
{
	if (fe_tools_parse(p, body, shape, bad))
		return -1;
	p->tool_choice = p->n_tools ? FE_TC_AUTO : FE_TC_NONE;
	static const struct {
		const char *name;
		enum fe_tool_choice tc;
	} modes[] = {{"none", FE_TC_NONE}, {"auto", FE_TC_AUTO}, {"required", FE_TC_REQUIRED}};
	size_t n_modes = sizeof modes / sizeof *modes, k = 0;
	cJSON *tc = field(body, "tool_choice"), *name = named_function(tc, shape);
	if (name) {
		p->tool_choice = FE_TC_NAMED;
		if (!(p->tool_name = strdup(name->valuestring)))
			return fe_bad_set(bad, 503, NULL, "out of memory");
	} else if (tc) {
		while (k < n_modes && !(cJSON_IsString(tc) && !strcmp(tc->valuestring, modes[k].name)))
			k++;
		if (k == n_modes)
			return fe_bad_set(bad, 400, "tool_choice", "'tool_choice' must be none, auto, required or %s",
			                  shape == FE_TOOLS_CHAT
			                          ? "{\"type\": \"function\", \"function\": {\"name\": ...}}"
			                          : "{\"type\": \"function\", \"name\": ...}");
		p->tool_choice = modes[k].tc;
	}
	p->parallel_tools = 1;
	int b = 1, rv = fe_get_bool(body, "parallel_tool_calls", &b, bad);
	if (rv < 0)
		return -1;
	if (rv)
		p->parallel_tools = b;
	return 0;
}

static int
add_stop(struct fe_params *p, const char *key, const char *s, struct fe_bad *bad)
{
	size_t l = strlen(s);
	if (l == 0)
		return fe_bad_set(bad, 400, key, "'%s' must not contain an empty string", key);
	if (l > FE_MAX_STOP_LEN)
		return fe_bad_set(bad, 400, key, "'%s': a stop sequence is at most %d bytes", key, FE_MAX_STOP_LEN);
	if (p->n_stops >= FE_MAX_STOPS)
		return fe_bad_set(bad, 400, key, "'%s': at most %d stop sequences", key, FE_MAX_STOPS);
	if (!(p->stops[p->n_stops] = strdup(s)))
		return fe_bad_set(bad, 503, key, "out of memory");
	p->n_stops++;
	return 0;
}

int
fe_get_stops(cJSON *o, const char *key, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *v = field(o, key);
	if (!v)
		return 0;
	if (cJSON_IsString(v))
		return add_stop(p, key, v->valuestring, bad) ? -1 : 1;
	if (!cJSON_IsArray(v))
		return fe_bad_set(bad, 400, key, "'%s' must be a string or an array of strings", key);
	cJSON *e;
	cJSON_ArrayForEach(e, v)
	{
		if (!cJSON_IsString(e))
			return fe_bad_set(bad, 400, key, "'%s' must be a string or an array of strings", key);
		if (add_stop(p, key, e->valuestring, bad))
			return -1;
	}
	return 1;
}

int
fe_get_text(cJSON *v, const char *where, char **out, struct fe_bad *bad)
{
	*out = NULL;
	if (!v || cJSON_IsNull(v)) {
		*out = strdup("");
		return *out ? 1 : fe_bad_set(bad, 503, where, "out of memory");
	}
	if (cJSON_IsString(v)) {
		*out = strdup(v->valuestring);
		return *out ? 1 : fe_bad_set(bad, 503, where, "out of memory");
	}
	if (!cJSON_IsArray(v))
		return fe_bad_set(bad, 400, where, "'%s' must be a string or an array of text blocks", where);
	size_t len = 0, cap = 64;
	char *s = malloc(cap);
	if (!s)
		return fe_bad_set(bad, 503, where, "out of memory");
	s[0] = 0;
	int i = 0, first = 1;
	cJSON *e;
	cJSON_ArrayForEach(e, v)
	{
		const char *t = NULL;
		if (cJSON_IsString(e)) {
			t = e->valuestring;
		} else if (cJSON_IsObject(e)) {
			cJSON *type = cJSON_GetObjectItemCaseSensitive(e, "type");
			cJSON *text = cJSON_GetObjectItemCaseSensitive(e, "text");
			if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0)) {
				free(s);
				return fe_bad_set(bad, 400, where,
				                  "'%s[%d].type': only text blocks are supported%s%s%s", where, i,
				                  cJSON_IsString(type) ? " ('" : "",
				                  cJSON_IsString(type) ? type->valuestring : "",
				                  cJSON_IsString(type) ? "' is not)" : "");
			}
			if (!cJSON_IsString(text)) {
				free(s);
				return fe_bad_set(bad, 400, where, "'%s[%d].text' must be a string", where, i);
			}
			t = text->valuestring;
		} else {
			free(s);
			return fe_bad_set(bad, 400, where, "'%s[%d]' must be a text block", where, i);
		}
		size_t l = strlen(t);
		if (len + l + 2 > cap) {
			while (len + l + 2 > cap)
				cap *= 2;
			char *n = realloc(s, cap);
			if (!n) {
				free(s);
				return fe_bad_set(bad, 503, where, "out of memory");
			}
			s = n;
		}
		if (!first)
			s[len++] = '\n';
		memcpy(s + len, t, l);
		len += l;
		s[len] = 0;
		first = 0;
		i++;
	}
	*out = s;
	return 1;
}

int
fe_get_sampling(cJSON *o, struct fe_params *p, struct fe_bad *bad)
{
	double d;
	long long ll;
	int rv;
	if ((rv = fe_get_number(o, "temperature", 0, 2, &d, bad)) < 0)
		return -1;
	if (rv)
		p->temperature = (float)d;
	if ((rv = fe_get_number(o, "top_p", 0, 1, &d, bad)) < 0)
		return -1;
	if (rv)
		p->top_p = (float)d;
	if ((rv = fe_get_number(o, "min_p", 0, 1, &d, bad)) < 0)
		return -1;
	if (rv)
		p->min_p = (float)d;
	if ((rv = fe_get_int(o, "top_k", 0, 1 << 20, &ll, bad)) < 0)
		return -1;
	if (rv)
		p->top_k = (int)ll;
	const char *rep_keys[] = {"repetition_penalty", "repeat_penalty"};
	for (int i = 0; i < 2; i++) {
		if ((rv = fe_get_number(o, rep_keys[i], 0, 10, &d, bad)) < 0)
			return -1;
		if (rv && d <= 0)
			return fe_bad_set(bad, 400, rep_keys[i], "'%s' must be greater than 0", rep_keys[i]);
		if (rv)
			p->repeat_penalty = (float)d;
	}
	if ((rv = fe_get_number(o, "presence_penalty", -2, 2, &d, bad)) < 0)
		return -1;
	if (rv)
		p->presence_penalty = (float)d;
	if ((rv = fe_get_number(o, "frequency_penalty", -2, 2, &d, bad)) < 0)
		return -1;
	if (rv)
		p->frequency_penalty = (float)d;
	if ((rv = fe_get_int(o, "seed", -9007199254740991LL, 9007199254740991LL, &ll, bad)) < 0)
		return -1;
	if (rv) {
		p->seed = (uint64_t)ll;
		p->has_seed = 1;
	} else {
		// no seed: a fresh one per request, as the OpenAI API behaves (a
		// fixed default would make every sampled reply, and the WebUI's
		// Regenerate, come out the same)
		p->seed = fresh_seed();
		p->has_seed = 1;
	}
	int b = 0;
	if ((rv = fe_get_bool(o, "stream", &b, bad)) < 0)
		return -1;
	if (rv)
		p->stream = b;
	// speculative decoding for this request (the tokens are the same)
	if ((rv = fe_get_bool(o, "speculative", &b, bad)) < 0)
		return -1;
	if (rv)
		p->speculative = b ? 2 : 1;
	return 0;
}

static double
ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static double
rate(uint64_t n, uint64_t ns)
{
	return ns ? (double)n / ((double)ns / 1e9) : 0;
}

cJSON *
fe_timings_json(const struct fe_gen *g)
{
	const struct fe_result *r = &g->r;
	cJSON *t = cJSON_CreateObject();
	if (!t)
		return NULL;
	uint64_t ptok = r->eng.prefill_tokens ? r->eng.prefill_tokens : r->prompt_tokens;
	uint64_t dtok = r->eng.decode_tokens ? r->eng.decode_tokens : r->completion_tokens;
	cJSON_AddNumberToObject(t, "prompt_tokens", r->prompt_tokens);
	cJSON_AddNumberToObject(t, "prompt_tokens_dropped", r->prompt_dropped);
	cJSON_AddNumberToObject(t, "cached_tokens", r->eng.cached_tokens); // llama.cpp's cache_n
	cJSON_AddNumberToObject(t, "cache_n", r->eng.cached_tokens);
	cJSON_AddNumberToObject(t, "completion_tokens", r->completion_tokens);
	cJSON_AddNumberToObject(t, "queue_ms", ms(r->queue_ns));
	cJSON_AddNumberToObject(t, "tokenize_ms", ms(r->tokenize_ns));
	cJSON_AddNumberToObject(t, "prefill_ms", ms(r->eng.prefill_ns));
	cJSON_AddNumberToObject(t, "prefill_tokens_per_s", rate(ptok, r->eng.prefill_ns));
	cJSON_AddNumberToObject(t, "decode_ms", ms(r->eng.decode_ns));
	cJSON_AddNumberToObject(t, "decode_tokens_per_s", rate(dtok, r->eng.decode_ns));
	cJSON_AddNumberToObject(t, "ttft_ms", ms(r->ttft_ns));
	cJSON_AddNumberToObject(t, "detokenize_ms", ms(r->detok_ns));
	cJSON_AddNumberToObject(t, "total_ms", ms(r->total_ns));
	// speculative decoding: choice 0's job
	cJSON_AddItemToObject(t, "speculative", ad_spec_json(&r->eng.spec));
	cJSON *e = cJSON_AddObjectToObject(t, "engine");
	if (e) {
		cJSON_AddNumberToObject(e, "queue_ms", ms(r->eng.queue_ns));
		cJSON_AddNumberToObject(e, "kernel_ms", ms(r->eng.kernel_ns));
		cJSON_AddNumberToObject(e, "ipc_ms", ms(r->eng.ipc_ns));
		cJSON_AddNumberToObject(e, "attention_ms", ms(r->eng.attention_ns));
		cJSON_AddNumberToObject(e, "sampling_ms", ms(r->eng.sampling_ns));
		cJSON_AddNumberToObject(e, "cpu_other_ms", ms(r->eng.cpu_other_ns));
		cJSON_AddNumberToObject(e, "moe_ms", ms(r->eng.moe_ns));
	}
	return t;
}

char *
fe_sse(cJSON *o, size_t *len)
{
	size_t n;
	char *j = fe_json_print(o, &n);
	char *s = j ? malloc(n + 9) : NULL;
	if (s) {
		memcpy(s, "data: ", 6);
		memcpy(s + 6, j, n);
		memcpy(s + 6 + n, "\n\n", 3);
		*len = n + 8;
	}
	free(j);
	return s;
}

char *
fe_json_print(cJSON *o, size_t *len)
{
	if (!o)
		return NULL;
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!s)
		return NULL;
	*len = strlen(s);
	// cJSON copies a string's bytes as they are: a field echoed from the
	// request (model) or any other string that is not UTF-8 would make the
	// whole reply invalid JSON. Every byte outside ASCII sits inside a string,
	// so replacing invalid sequences with U+FFFD keeps the JSON valid.
	size_t i = 0;
	while (i < *len && (unsigned char)s[i] < 0x80)
		i++;
	if (i < *len) {
		size_t n = 0;
		char *c = fe_utf8_clean(s, *len, &n);
		if (!c) {
			free(s);
			return NULL;
		}
		if (n == *len && memcmp(c, s, n) == 0) {
			free(c);
		} else {
			free(s);
			s = c;
			*len = n;
		}
	}
	return s;
}

void
fe_add_text(cJSON *o, const char *key, const char *s, size_t n)
{
	char *c = fe_utf8_clean(s ? s : "", s ? n : 0, NULL);
	cJSON_AddStringToObject(o, key, c ? c : "");
	free(c);
}

void
fe_new_id(struct fe_gen *g, const char *prefix)
{
	static uint64_t counter;
	uint64_t n = __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	g->created = (long long)ts.tv_sec;
	// unique within a process run; the nanoseconds make runs differ
	snprintf(g->id, sizeof g->id, "%s%08llx%06llx%04llx", prefix, (unsigned long long)ts.tv_sec,
	         (unsigned long long)(ts.tv_nsec / 1000) & 0xffffff, (unsigned long long)n & 0xffff);
}

void
fe_sse_event(struct fe_sse *e, const char *name, cJSON *o)
{
	size_t n;
	char *j = fe_json_print(o, &n);
	size_t nl = strlen(name);
	char *s = j ? realloc(e->s, e->len + nl + n + 24) : NULL;
	if (!s) {
		e->oom = 1;
		free(j);
		return;
	}
	e->s = s;
	e->len += (size_t)sprintf(s + e->len, "event: %s\ndata: ", name);
	memcpy(s + e->len, j, n);
	e->len += n;
	memcpy(s + e->len, "\n\n", 3);
	e->len += 2;
	free(j);
}

char *
fe_sse_done(struct fe_sse *e, size_t *len)
{
	if (e->oom) {
		free(e->s);
		return NULL;
	}
	*len = e->len;
	return e->s ? e->s : strdup("");
}

// how deep the body nests arrays and objects before byte n (strings skipped)
static int
json_depth(const char *s, size_t n)
{
	int depth = 0, max = 0, in_str = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_str = 0;
		} else if (c == '"') {
			in_str = 1;
		} else if (c == '[' || c == '{') {
			if (++depth > max)
				max = depth;
		} else if (c == ']' || c == '}') {
			depth--;
		}
	}
	return max;
}

cJSON *
fe_body_parse(const char *s, size_t n, struct fe_bad *bad)
{
	const char *end = NULL;
	cJSON *body = cJSON_ParseWithLengthOpts(s, n, &end, 0);
	if (!body) {
		size_t at = end ? (size_t)(end - s) : 0;
		if (json_depth(s, at < n ? at + 1 : n) >= CJSON_NESTING_LIMIT)
			fe_bad_set(bad, 400, NULL,
			           "the JSON body nests arrays and objects deeper than %d levels, the limit",
			           CJSON_NESTING_LIMIT);
		else
			fe_bad_set(bad, 400, NULL, "malformed JSON near byte %zu", at);
		return NULL;
	}
	size_t at = end ? (size_t)(end - s) : n;
	while (at < n && (s[at] == ' ' || s[at] == '\t' || s[at] == '\n' || s[at] == '\r'))
		at++;
	if (at < n) {
		cJSON_Delete(body);
		fe_bad_set(bad, 400, NULL, "unexpected bytes after the JSON value at byte %zu", at);
		return NULL;
	}
	if (!cJSON_IsObject(body)) {
		cJSON_Delete(body);
		fe_bad_set(bad, 400, NULL, "the request body must be a JSON object");
		return NULL;
	}
	return body;
}
