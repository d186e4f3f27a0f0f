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

// a text piece appended to a growing string
static int
cat(char **s, size_t *len, const char *t, const char *sep)
{
	size_t l = strlen(t), k = *s && *len ? strlen(sep) : 0;
	char *n = realloc(*s, *len + k + l + 1);
	if (!n)
		return -1;
	memcpy(n + *len, sep, k);
	memcpy(n + *len + k, t, l + 1);
	*s = n;
	*len += k + l;
	return 0;
}

// a tool_result's content: a string or text blocks
static int
result_text(cJSON *c, const char *where, char **out, struct fe_bad *bad)
{
	return fe_get_text(c, where, out, bad) < 0 ? -1 : 0;
}

// one message's content: a string, or blocks. An assistant's text and
// tool_use blocks make one turn with its calls (thinking blocks its
// reasoning); a user's tool_result blocks become tool turns, its text the
// user turn after them.
static int
parse_content(struct fe_params *p, cJSON *content, enum tok_role r, int i, struct fe_bad *bad)
{
	char where[96];
	snprintf(where, sizeof where, "messages[%d].content", i);
	if (cJSON_IsString(content)) {
		struct tok_msg *m = &p->msgs[p->n_msgs++];
		m->role = r;
		return (m->content = strdup(content->valuestring)) ? 0 : fe_bad_set(bad, 503, NULL, "out of memory");
	}
	if (!cJSON_IsArray(content))
		return fe_bad_set(bad, 400, where, "'%s' must be a string or an array of content blocks", where);
	char *text = NULL, *thinking = NULL;
	size_t tl = 0, hl = 0;
	struct tok_msg turn = {.role = r};
	int k = 0, rv = 0;
	cJSON *b;
	cJSON_ArrayForEach(b, content)
	{
		snprintf(where, sizeof where, "messages[%d].content[%d]", i, k);
		cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
		if (cJSON_IsString(b)) {
			rv = cat(&text, &tl, b->valuestring, "\n") ? fe_bad_set(bad, 503, NULL, "out of memory") : 0;
		} else if (!cJSON_IsObject(b) || !cJSON_IsString(type)) {
			rv = fe_bad_set(bad, 400, where, "'%s' must be a content block with a type", where);
		} else if (!strcmp(type->valuestring, "text")) {
			cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "text");
			if (!cJSON_IsString(t)) {
				snprintf(where, sizeof where, "messages[%d].content[%d].text", i, k);
				rv = fe_bad_set(bad, 400, where, "'%s' must be a string", where);
			} else {
				rv = cat(&text, &tl, t->valuestring, "\n") ? fe_bad_set(bad, 503, NULL, "out of memory") : 0;
			}
		} else if (!strcmp(type->valuestring, "tool_use") && r == TOK_ROLE_ASSISTANT) {
			cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id"), *name = cJSON_GetObjectItemCaseSensitive(b, "name");
			cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
			if (!cJSON_IsString(id) || !id->valuestring[0] || !cJSON_IsString(name)) {
				rv = fe_bad_set(bad, 400, where, "'%s': a tool_use block needs an id and a name", where);
			} else if (input && !cJSON_IsObject(input)) {
				snprintf(where, sizeof where, "messages[%d].content[%d].input", i, k);
				rv = fe_bad_set(bad, 400, where, "'%s' must be an object", where);
			} else {
				char *args = input ? cJSON_PrintUnformatted(input) : strdup("{}");
				rv = args ? fe_msg_call(&turn, id->valuestring, name->valuestring, args, where, bad)
				          : fe_bad_set(bad, 503, NULL, "out of memory");
				free(args);
			}
		} else if ((!strcmp(type->valuestring, "thinking") || !strcmp(type->valuestring, "redacted_thinking")) &&
		           r == TOK_ROLE_ASSISTANT) {
			cJSON *t = cJSON_GetObjectItemCaseSensitive(b, "thinking");
			if (cJSON_IsString(t) && cat(&thinking, &hl, t->valuestring, "\n"))
				rv = fe_bad_set(bad, 503, NULL, "out of memory");
		} else if (!strcmp(type->valuestring, "tool_result") && r == TOK_ROLE_USER) {
			cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
			cJSON *err = cJSON_GetObjectItemCaseSensitive(b, "is_error");
			char wid[96];
			snprintf(wid, sizeof wid, "messages[%d].content[%d].tool_use_id", i, k);
			if (!cJSON_IsString(id) || !id->valuestring[0]) {
				rv = fe_bad_set(bad, 400, wid, "'%s' is required in a tool_result block", wid);
			} else if (!fe_call_known(p, p->n_msgs, id->valuestring)) {
				rv = fe_bad_set(bad, 400, wid, "'%s': no assistant message before it has a tool_use with id '%.64s'",
				                wid, id->valuestring);
			} else {
				char wc[96], *res = NULL;
				snprintf(wc, sizeof wc, "messages[%d].content[%d].content", i, k);
				if (!(rv = result_text(cJSON_GetObjectItemCaseSensitive(b, "content"), wc, &res, bad))) {
					struct tok_msg *m = &p->msgs[p->n_msgs++];
					m->role = TOK_ROLE_TOOL;
					if (cJSON_IsTrue(err)) { // the tool failed: say so in the result
						size_t rl = strlen(res);
						char *e = malloc(rl + 8);
						if (e)
							memcpy(e, "Error: ", 7), memcpy(e + 7, res, rl + 1);
						free(res);
						res = e;
					}
					m->content = res;
					m->call_id = strdup(id->valuestring);
					for (size_t x = 0; x + 1 < p->n_msgs && !m->name; x++)
						for (size_t c = 0; c < p->msgs[x].n_calls; c++)
							if (!strcmp(p->msgs[x].calls[c].id, id->valuestring))
								m->name = strdup(p->msgs[x].calls[c].name);
					if (!res || !m->call_id)
						rv = fe_bad_set(bad, 503, NULL, "out of memory");
				}
			}
		} else {
			snprintf(where, sizeof where, "messages[%d].content[%d].type", i, k);
			rv = fe_bad_set(bad, 400, where, "'%s': '%.32s' blocks are not supported in %s messages (%s)", where,
			                type->valuestring, r == TOK_ROLE_USER ? "user" : "assistant",
			                r == TOK_ROLE_USER ? "text, tool_result" : "text, tool_use, thinking");
		}
		if (rv)
			break;
		k++;
	}
	if (!rv && (text || turn.n_calls || thinking || k == 0)) {
		struct tok_msg *m = &p->msgs[p->n_msgs++];
		*m = turn;
		turn.calls = NULL;
		turn.n_calls = 0;
		m->content = text ? text : strdup("");
		m->reasoning = thinking;
		text = thinking = NULL;
		if (!m->content)
			rv = fe_bad_set(bad, 503, NULL, "out of memory");
	}
	free(text);
	free(thinking);
	for (size_t c = 0; c < turn.n_calls; c++) {
		free((char *)turn.calls[c].id);
		free((char *)turn.calls[c].name);
		free((char *)turn.calls[c].arguments);
	}
	free((void *)turn.calls);
	return rv;
}

// tools: [{name, description, input_schema}]; tool_choice: {type: auto |
// any | tool | none, name, disable_parallel_tool_use}
static int
parse_tools(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	p->call_ids = FE_IDS_ANTHROPIC;
	cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
	if (tools && !cJSON_IsNull(tools)) {
		if (!cJSON_IsArray(tools))
			return fe_bad_set(bad, 400, "tools", "'tools' must be an array");
		int i = 0;
		cJSON *t;
		cJSON_ArrayForEach(t, tools)
		{
			char where[64], nw[64], sw[64];
			snprintf(where, sizeof where, "tools[%d]", i);
			snprintf(nw, sizeof nw, "tools[%d].name", i);
			snprintf(sw, sizeof sw, "tools[%d].input_schema", i);
			if (!cJSON_IsObject(t))
				return fe_bad_set(bad, 400, where, "'%s' must be an object", where);
			cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
			if (type && !cJSON_IsNull(type) && (!cJSON_IsString(type) || strcmp(type->valuestring, "custom"))) {
				snprintf(where, sizeof where, "tools[%d].type", i);
				return fe_bad_set(bad, 400, where, "'%s': '%.40s' tools are not supported (only client tools with "
				                  "an input_schema)", where, cJSON_IsString(type) ? type->valuestring : "?");
			}
			cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
			cJSON *desc = cJSON_GetObjectItemCaseSensitive(t, "description");
			cJSON *schema = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
			if (name && !cJSON_IsString(name))
				return fe_bad_set(bad, 400, nw, "'%s' must be a string", nw);
			if (!schema || cJSON_IsNull(schema))
				return fe_bad_set(bad, 400, sw, "'%s' is required", sw);
			if (fe_tool_add(p, cJSON_IsString(name) ? name->valuestring : NULL,
			                cJSON_IsString(desc) ? desc->valuestring : NULL, schema, nw, sw, bad))
				return -1;
			i++;
		}
	}
	p->tool_choice = p->n_tools ? FE_TC_AUTO : FE_TC_NONE;
	p->parallel_tools = 1;
	cJSON *tc = cJSON_GetObjectItemCaseSensitive(body, "tool_choice");
	if (tc && !cJSON_IsNull(tc)) {
		cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
		if (!cJSON_IsObject(tc) || !cJSON_IsString(type))
			return fe_bad_set(bad, 400, "tool_choice", "'tool_choice' must be an object with a type");
		const char *v = type->valuestring;
		if (!strcmp(v, "auto")) {
			p->tool_choice = FE_TC_AUTO;
		} else if (!strcmp(v, "any")) {
			p->tool_choice = FE_TC_REQUIRED;
		} else if (!strcmp(v, "none")) {
			p->tool_choice = FE_TC_NONE;
		} else if (!strcmp(v, "tool")) {
			cJSON *name = cJSON_GetObjectItemCaseSensitive(tc, "name");
			if (!cJSON_IsString(name))
				return fe_bad_set(bad, 400, "tool_choice.name", "'tool_choice.name' is required with type tool");
			p->tool_choice = FE_TC_NAMED;
			if (!(p->tool_name = strdup(name->valuestring)))
				return fe_bad_set(bad, 503, NULL, "out of memory");
		} else {
			return fe_bad_set(bad, 400, "tool_choice.type",
			                  "'tool_choice.type': '%.32s' is not auto, any, tool or none", v);
		}
		int b = 0;
		if (fe_get_bool(tc, "disable_parallel_tool_use", &b, bad) < 0)
			return -1;
		p->parallel_tools = !b;
	}
	return 0;
}

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
	// a user turn's tool results become tool turns of their own: room for
	// every block as a turn
	int blocks = 0;
	cJSON *mm;
	cJSON_ArrayForEach(mm, msgs)
	{
		cJSON *c = cJSON_GetObjectItemCaseSensitive(mm, "content");
		blocks += cJSON_IsArray(c) ? cJSON_GetArraySize(c) + 1 : 1;
	}
	if (!(p->msgs = calloc((size_t)blocks + 1, sizeof *p->msgs)))
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
		if (parse_content(p, content, r, i, bad) < 0)
			return -1;
		i++;
	}
	if (parse_tools(body, p, bad) < 0)
		return -1;
	static const struct fe_fields fields = {"tools", "tool_choice", "", ""};
	if (fe_structured_check(p, &fields, bad) < 0)
		return -1;
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
	case FE_FINISH_TOOLS:
		return "tool_use";
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

static int
blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strchr(" \t\r\n", s[i]))
			return 0;
	return 1;
}

// a call's input: its arguments, made whole when the reply was cut short
static cJSON *
input_of(const struct fe_call *c)
{
	cJSON *in = c->done ? cJSON_ParseWithLength(c->args ? c->args : "{}", c->args ? c->len : 2) : NULL;
	if (!in) {
		char *closed = fe_json_close(c->args ? c->args : "", c->len);
		in = closed ? cJSON_Parse(closed) : NULL;
		free(closed);
	}
	return in ? in : cJSON_CreateObject();
}

static cJSON *
tool_use(const struct fe_call *c)
{
	cJSON *b = cJSON_CreateObject();
	cJSON_AddStringToObject(b, "type", "tool_use");
	cJSON_AddStringToObject(b, "id", c->id);
	cJSON_AddStringToObject(b, "name", c->name);
	cJSON_AddItemToObject(b, "input", input_of(c));
	return b;
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
	const struct fe_choice *ch = &g->ch[0];
	if (final && (!ch->n_calls || !blank(g->text, g->len))) {
		cJSON *b = cJSON_CreateObject();
		cJSON_AddStringToObject(b, "type", "text");
		fe_add_text(b, "text", g->text, g->len);
		cJSON_AddItemToArray(content, b);
	}
	for (int i = 0; final && i < ch->n_calls; i++)
		cJSON_AddItemToArray(content, tool_use(&ch->calls[i]));
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

enum { B_TEXT = 1, B_TOOL = 2 };

// close the open content block (the loop thread's state; see fe.h)
static void
block_stop(const struct fe_gen *g, struct fe_sse *e)
{
	struct fe_gen *m = (struct fe_gen *)g;
	if (!m->block_open)
		return;
	cJSON *o = typed("content_block_stop");
	cJSON_AddNumberToObject(o, "index", m->block);
	fe_sse_event(e, "content_block_stop", o);
	m->block_open = 0;
}

// open the next block: a text block, or a tool call's tool_use block
static void
block_start(const struct fe_gen *g, struct fe_sse *e, const struct fe_call *c)
{
	struct fe_gen *m = (struct fe_gen *)g;
	block_stop(g, e);
	m->block = m->blocks_seen++;
	m->block_open = 1;
	m->block_kind = c ? B_TOOL : B_TEXT;
	cJSON *o = typed("content_block_start");
	cJSON_AddNumberToObject(o, "index", m->block);
	cJSON *b = cJSON_AddObjectToObject(o, "content_block");
	if (c) {
		cJSON_AddStringToObject(b, "type", "tool_use");
		cJSON_AddStringToObject(b, "id", c->id);
		cJSON_AddStringToObject(b, "name", c->name);
		cJSON_AddObjectToObject(b, "input");
	} else {
		cJSON_AddStringToObject(b, "type", "text");
		cJSON_AddStringToObject(b, "text", "");
	}
	fe_sse_event(e, "content_block_start", o);
}

static char *
stream_start(const struct fe_gen *g, size_t *len)
{
	struct fe_sse e = { 0 };
	cJSON *o = typed("message_start");
	cJSON_AddItemToObject(o, "message", message(g, 0));
	fe_sse_event(&e, "message_start", o);
	// with tools the blocks open as text and calls come; without, the
	// text block opens at once
	if (!fe_wants_calls(&g->p))
		block_start(g, &e, NULL);
	fe_sse_event(&e, "ping", typed("ping"));
	return fe_sse_done(&e, len);
}

static char *
stream_chunk(const struct fe_gen *g, const struct fe_chunk *c, size_t *len)
{
	struct fe_sse e = { 0 };
	if (c->call) {
		if (c->start)
			block_start(g, &e, c->start);
		if (c->len && g->block_kind == B_TOOL) {
			cJSON *o = typed("content_block_delta");
			cJSON_AddNumberToObject(o, "index", g->block);
			cJSON *d = cJSON_AddObjectToObject(o, "delta");
			cJSON_AddStringToObject(d, "type", "input_json_delta");
			fe_add_text(d, "partial_json", c->text, c->len);
			fe_sse_event(&e, "content_block_delta", o);
		}
	} else if (c->len) {
		if (!g->block_open || g->block_kind != B_TEXT)
			block_start(g, &e, NULL);
		cJSON *o = typed("content_block_delta");
		cJSON_AddNumberToObject(o, "index", g->block);
		cJSON *d = cJSON_AddObjectToObject(o, "delta");
		cJSON_AddStringToObject(d, "type", "text_delta");
		fe_add_text(d, "text", c->text, c->len);
		fe_sse_event(&e, "content_block_delta", o);
	}
	return fe_sse_done(&e, len);
}

static char *
stream_text(const struct fe_gen *g, const char *s, size_t n, size_t *len)
{
	struct fe_chunk c = {.text = s, .len = n};
	return stream_chunk(g, &c, len);
}

static char *
stream_end(const struct fe_gen *g, size_t *len)
{
	struct fe_sse e = { 0 };
	block_stop(g, &e);
	cJSON *o = typed("message_delta");
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
	.stream_chunk = stream_chunk,
	.stream_end = stream_end,
	.error = error,
	.stream_error = stream_error,
};
