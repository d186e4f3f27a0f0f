// api-anthropic.c - POST /v1/messages (the Anthropic Messages API).
//
// A stream is the event sequence the official client expects:
// message_start, content_block_start, ping, content_block_delta...,
// content_block_stop, message_delta (stop_reason, stop_sequence, usage),
// message_stop. A thinking model's thinking comes first as a thinking block
// (thinking_delta events, then a signature_delta before its
// content_block_stop), its answer then as a text block; a tool call is a
// tool_use block (content_block_start with its id and name, then
// input_json_delta events); the blocks of such a reply open as its parts
// arrive (g->blk, g->blk_part, g->blk_hash are
// the loop thread's, which is why the stream renderers write through their
// const gen). Errors are {"type":"error","error":{"type","message"}}; in a
// stream that has begun, an "event: error" carrying the same object.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

#define BILLING_HEADER "x-anthropic-billing-header:"

// tools: [{name, description, input_schema}]; tool_choice: {type: auto |
// any | tool | none, name, disable_parallel_tool_use}
static int
parse_tools(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	p->call_ids = FE_IDS_ANTHROPIC;
	if (fe_tools_parse(p, body, FE_TOOLS_ANTHROPIC, bad))
		return -1;
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
				return fe_bad_set(bad, 400, "tool_choice.name",
				                  "'tool_choice.name' is required with type tool");
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

	cJSON *msgs;
	if (fe_get_list(body, "messages", &msgs, bad) < 0)
		return -1;
	size_t room = 1; // the system message
	cJSON *m;
	cJSON_ArrayForEach(m, msgs) room += (size_t)fe_chat_anthropic_count(m);
	if (!(p->msgs = calloc(room, sizeof *p->msgs)))
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
	cJSON_ArrayForEach(m, msgs) if (fe_chat_anthropic_message(m, i++, p, bad) != 0) return -1;
	if (parse_tools(body, p, bad) != 0 || fe_chat_anthropic_thinking(body, p, bad) != 0)
		return -1;
	if (p->n_tools && !(p->tools_json = fe_tools_json(p))) // what the template gets
		return fe_bad_set(bad, 503, NULL, "out of memory");
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
	unsigned cached = g->r.eng.cached_tokens < g->r.prompt_tokens ? g->r.eng.cached_tokens : g->r.prompt_tokens;
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "input_tokens", g->r.prompt_tokens - cached);
	cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
	cJSON_AddNumberToObject(u, "cache_read_input_tokens", cached);
	cJSON_AddNumberToObject(u, "output_tokens", out);
	cJSON_AddNumberToObject(u, "prompt_tokens_dropped", g->r.prompt_dropped);
	return u;
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
	if (final) {
		size_t rl = 0;
		const char *r = fe_choice_reasoning(g, 0, &rl);
		if (rl) {
			cJSON *t = cJSON_CreateObject();
			char sig[40];
			fe_think_signature(fe_think_hash(FE_THINK_HASH0, r, rl), sig);
			cJSON_AddStringToObject(t, "type", "thinking");
			fe_add_text(t, "thinking", r, rl);
			cJSON_AddStringToObject(t, "signature", sig);
			cJSON_AddItemToArray(content, t);
		}
		const struct fe_choice *ch = &g->ch[0];
		if (!ch->n_calls || !fe_blank(g->text, g->len)) {
			cJSON *b = cJSON_CreateObject();
			cJSON_AddStringToObject(b, "type", "text");
			fe_add_text(b, "text", g->text, g->len);
			cJSON_AddItemToArray(content, b);
		}
		for (int i = 0; i < ch->n_calls; i++)
			cJSON_AddItemToArray(content, tool_use(&ch->calls[i]));
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

enum { B_TOOL = 2 }; // a tool_use block, beside FE_PART_CONTENT and FE_PART_REASONING

// a tool_use block opens: index g->blk
static void
block_open_call(struct fe_sse *e, const struct fe_gen *g, const struct fe_call *c)
{
	struct fe_gen *m = (struct fe_gen *)g;
	cJSON *o = typed("content_block_start");
	cJSON_AddNumberToObject(o, "index", m->blk);
	cJSON *b = cJSON_AddObjectToObject(o, "content_block");
	cJSON_AddStringToObject(b, "type", "tool_use");
	cJSON_AddStringToObject(b, "id", c->id);
	cJSON_AddStringToObject(b, "name", c->name);
	cJSON_AddObjectToObject(b, "input");
	fe_sse_event(e, "content_block_start", o);
	m->blk++;
	m->blk_part = B_TOOL;
}

// a content block opens: index g->blk, of the given part
static void
block_open(struct fe_sse *e, const struct fe_gen *g, int part)
{
	struct fe_gen *m = (struct fe_gen *)g; // the loop thread's; see the top of the file
	cJSON *o = typed("content_block_start");
	cJSON_AddNumberToObject(o, "index", m->blk);
	cJSON *b = cJSON_AddObjectToObject(o, "content_block");
	if (part == FE_PART_REASONING) {
		cJSON_AddStringToObject(b, "type", "thinking");
		cJSON_AddStringToObject(b, "thinking", "");
		cJSON_AddStringToObject(b, "signature", "");
		m->blk_hash = FE_THINK_HASH0;
	} else {
		cJSON_AddStringToObject(b, "type", "text");
		cJSON_AddStringToObject(b, "text", "");
	}
	fe_sse_event(e, "content_block_start", o);
	m->blk++;
	m->blk_part = part;
}

// the open block closes (a thinking block with its signature first)
static void
block_close(struct fe_sse *e, const struct fe_gen *g)
{
	struct fe_gen *m = (struct fe_gen *)g;
	if (m->blk_part < 0)
		return;
	if (m->blk_part == FE_PART_REASONING) {
		cJSON *o = typed("content_block_delta");
		cJSON_AddNumberToObject(o, "index", m->blk - 1);
		cJSON *d = cJSON_AddObjectToObject(o, "delta");
		char sig[40];
		fe_think_signature(m->blk_hash, sig);
		cJSON_AddStringToObject(d, "type", "signature_delta");
		cJSON_AddStringToObject(d, "signature", sig);
		fe_sse_event(e, "content_block_delta", o);
	}
	cJSON *o = typed("content_block_stop");
	cJSON_AddNumberToObject(o, "index", m->blk - 1);
	fe_sse_event(e, "content_block_stop", o);
	m->blk_part = -1;
}

static char *
stream_start(const struct fe_gen *g, size_t *len)
{
	struct fe_sse e = {0};
	struct fe_gen *m = (struct fe_gen *)g;
	m->blk = 0;
	m->blk_part = -1;
	cJSON *o = typed("message_start");
	cJSON_AddItemToObject(o, "message", message(g, 0));
	fe_sse_event(&e, "message_start", o);
	// a reply that may think or call tools opens its first block when it
	// knows which
	if (!g->think && !fe_wants_calls(&g->p))
		block_open(&e, g, FE_PART_CONTENT);
	fe_sse_event(&e, "ping", typed("ping"));
	return fe_sse_done(&e, len);
}

static char *
stream_chunk(const struct fe_gen *g, const struct fe_chunk *ck, size_t *len)
{
	struct fe_sse e = {0};
	if (ck->call) { // a tool call: its block opens with its first chunk, then input_json_delta events
		if (ck->start) {
			block_close(&e, g);
			block_open_call(&e, g, ck->start);
		}
		if (ck->len && g->blk_part == B_TOOL) {
			cJSON *o = typed("content_block_delta");
			cJSON_AddNumberToObject(o, "index", g->blk - 1);
			cJSON *d = cJSON_AddObjectToObject(o, "delta");
			cJSON_AddStringToObject(d, "type", "input_json_delta");
			fe_add_text(d, "partial_json", ck->text, ck->len);
			fe_sse_event(&e, "content_block_delta", o);
		}
		return fe_sse_done(&e, len);
	}
	if (!ck->len) {
		*len = 0;
		return strdup("");
	}
	if (g->blk_part != ck->part) {
		block_close(&e, g);
		block_open(&e, g, ck->part);
	}
	cJSON *o = typed("content_block_delta");
	cJSON_AddNumberToObject(o, "index", g->blk - 1);
	cJSON *d = cJSON_AddObjectToObject(o, "delta");
	if (ck->part == FE_PART_REASONING) {
		((struct fe_gen *)g)->blk_hash = fe_think_hash(g->blk_hash, ck->text, ck->len);
		cJSON_AddStringToObject(d, "type", "thinking_delta");
		fe_add_text(d, "thinking", ck->text, ck->len);
	} else {
		cJSON_AddStringToObject(d, "type", "text_delta");
		fe_add_text(d, "text", ck->text, ck->len);
	}
	fe_sse_event(&e, "content_block_delta", o);
	return fe_sse_done(&e, len);
}

static char *
stream_text(const struct fe_gen *g, const char *s, size_t n, size_t *len)
{
	struct fe_chunk ck = {.text = s, .len = n, .part = FE_PART_CONTENT};
	return stream_chunk(g, &ck, len);
}

static char *
stream_end(const struct fe_gen *g, size_t *len)
{
	struct fe_sse e = {0};
	if (g->blk_part == FE_PART_REASONING || g->blk == 0) {
		// the reply ended in its thinking, or said nothing: an (empty) text block still
		block_close(&e, g);
		block_open(&e, g, FE_PART_CONTENT);
	}
	block_close(&e, g);
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
	struct fe_sse e = {0};
	fe_sse_event(&e, "error", error_obj(status, msg));
	return fe_sse_done(&e, len);
}

const struct fe_dialect fe_anthropic = FE_DIALECT_OF_FILE;
