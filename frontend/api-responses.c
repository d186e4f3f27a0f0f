// api-responses.c - POST /v1/responses (OpenAI's Responses API, the
// openai client's responses.create and responses.stream).
//
// The server is stateless: previous_response_id, conversation, store: true
// and background: true are refused with a 400 naming the field, as are tools
// other than functions and input items other than messages, function_call
// and function_call_output. A request becomes a chat: instructions as the
// system message, then the input's items (a function_call joins the
// assistant turn before it, a function_call_output is a tool turn), through
// the same template, grammar and admission as /v1/chat/completions.
// text.format json_object / json_schema constrain the answer; function
// tools with tool_choice none / auto / required / {"type": "function",
// "name"} make function_call output items.
//
// A stream is the documented event sequence, each event with its
// sequence_number: response.created, response.in_progress,
// response.output_item.added, response.content_part.added,
// response.output_text.delta..., response.output_text.done,
// response.content_part.done, response.output_item.done (with tools the
// message item opens with the first text, and each call is an item of its
// own: output_item.added, function_call_arguments.delta...,
// function_call_arguments.done, output_item.done), then
// response.completed, or response.incomplete (incomplete_details.reason
// "max_output_tokens") when the reply was cut at its length. The closing
// events repeat the whole text, which the loop thread keeps in g->text as
// it streams (in a stream the worker never touches g->text), and the
// sequence number in g->seq: both belong to the loop thread, which is why
// the renderers below write through their const gen.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

static int
refuse(struct fe_bad *bad, const char *param, const char *why)
{
	return fe_bad_set(bad, 400, param, "'%s' is not supported: %s", param, why);
}

static int
present(cJSON *body, const char *key)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(body, key);
	return v && !cJSON_IsNull(v);
}

// content: a string, or an array of input_text / output_text parts joined with "\n"
static int
content_text(cJSON *c, const char *where, char **out, struct fe_bad *bad)
{
	*out = NULL;
	if (!c || cJSON_IsNull(c))
		return fe_bad_set(bad, 400, where, "'%s' is required", where);
	if (cJSON_IsString(c)) {
		*out = strdup(c->valuestring);
		return *out ? 0 : fe_bad_set(bad, 503, NULL, "out of memory");
	}
	if (!cJSON_IsArray(c))
		return fe_bad_set(bad, 400, where, "'%s' must be a string or an array of input_text parts", where);
	size_t len = 0;
	char *s = strdup("");
	int j = 0;
	cJSON *part;
	cJSON_ArrayForEach(part, c)
	{
		char w[96];
		snprintf(w, sizeof w, "%s[%d].type", where, j);
		cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
		cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
		if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
			free(s);
			return fe_bad_set(bad, 400, w, "'%s[%d]' must be a part with a type", where, j);
		}
		if (strcmp(type->valuestring, "input_text") != 0 && strcmp(type->valuestring, "output_text") != 0) {
			free(s);
			return fe_bad_set(bad, 400, w,
			                  "'%s': '%.32s' parts are not supported (input_text, output_text)", w,
			                  type->valuestring);
		}
		if (!cJSON_IsString(text)) {
			free(s);
			snprintf(w, sizeof w, "%s[%d].text", where, j);
			return fe_bad_set(bad, 400, w, "'%s' must be a string", w);
		}
		size_t l = strlen(text->valuestring);
		char *t = s ? realloc(s, len + l + 2) : NULL;
		if (!t) {
			free(s);
			return fe_bad_set(bad, 503, NULL, "out of memory");
		}
		s = t;
		if (j > 0)
			s[len++] = '\n';
		memcpy(s + len, text->valuestring, l + 1);
		len += l;
		j++;
	}
	if (!s)
		return fe_bad_set(bad, 503, NULL, "out of memory");
	*out = s;
	return 0;
}

static int
add_msg(struct fe_params *p, enum tok_role r, char *text)
{
	p->msgs[p->n_msgs].role = r;
	p->msgs[p->n_msgs].content = text;
	p->n_msgs++;
	return 0;
}

static int
parse_input(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *in = fe_get_required(body, "input", bad);
	if (!in)
		return -1;
	if (cJSON_IsString(in)) {
		char *t = strdup(in->valuestring);
		if (!t)
			return fe_bad_set(bad, 503, NULL, "out of memory");
		return add_msg(p, TOK_ROLE_USER, t);
	}
	if (!cJSON_IsArray(in))
		return fe_bad_set(bad, 400, "input", "'input' must be a string or an array of message items");
	if (cJSON_GetArraySize(in) == 0)
		return fe_bad_set(bad, 400, "input", "'input' must not be empty");
	int i = 0;
	cJSON *it;
	cJSON_ArrayForEach(it, in)
	{
		char where[64];
		snprintf(where, sizeof where, "input[%d]", i);
		if (!cJSON_IsObject(it))
			return fe_bad_set(bad, 400, where, "'%s' must be a message item", where);
		cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
		const char *ts = cJSON_IsString(type) ? type->valuestring : NULL;
		if (ts && !strcmp(ts, "function_call")) {
			// a call the model made: it joins the assistant turn before it, or makes one
			cJSON *cid = cJSON_GetObjectItemCaseSensitive(it, "call_id");
			cJSON *name = cJSON_GetObjectItemCaseSensitive(it, "name");
			cJSON *args = cJSON_GetObjectItemCaseSensitive(it, "arguments");
			snprintf(where, sizeof where, "input[%d].call_id", i);
			if (!cJSON_IsString(cid) || !cid->valuestring[0])
				return fe_bad_set(bad, 400, where, "'%s' is required", where);
			snprintf(where, sizeof where, "input[%d].name", i);
			if (!cJSON_IsString(name))
				return fe_bad_set(bad, 400, where, "'%s' is required", where);
			snprintf(where, sizeof where, "input[%d].arguments", i);
			if (args && !cJSON_IsNull(args) && !cJSON_IsString(args))
				return fe_bad_set(bad, 400, where, "'%s' must be a string of JSON", where);
			struct tok_msg *m = p->n_msgs ? &p->msgs[p->n_msgs - 1] : NULL;
			if (!m || m->role != TOK_ROLE_ASSISTANT) {
				char *e = strdup("");
				if (!e)
					return fe_bad_set(bad, 503, NULL, "out of memory");
				add_msg(p, TOK_ROLE_ASSISTANT, e);
				m = &p->msgs[p->n_msgs - 1];
			}
			if (fe_msg_call(m, cid->valuestring, name->valuestring,
			                cJSON_IsString(args) ? args->valuestring : "{}", where, bad))
				return -1;
			i++;
			continue;
		}
		if (ts && !strcmp(ts, "function_call_output")) {
			cJSON *cid = cJSON_GetObjectItemCaseSensitive(it, "call_id");
			snprintf(where, sizeof where, "input[%d].call_id", i);
			if (!cJSON_IsString(cid) || !cid->valuestring[0])
				return fe_bad_set(bad, 400, where, "'%s' is required", where);
			if (!fe_call_known(p, p->n_msgs, cid->valuestring))
				return fe_bad_set(bad, 400, where,
				                  "'%s': no function_call item before it has call_id '%.64s'", where,
				                  cid->valuestring);
			snprintf(where, sizeof where, "input[%d].output", i);
			char *text;
			cJSON *out = cJSON_GetObjectItemCaseSensitive(it, "output");
			if (cJSON_IsString(out)) {
				if (!(text = strdup(out->valuestring)))
					return fe_bad_set(bad, 503, NULL, "out of memory");
			} else if (content_text(out, where, &text, bad) < 0) {
				return -1;
			}
			add_msg(p, TOK_ROLE_TOOL, text);
			struct tok_msg *m = &p->msgs[p->n_msgs - 1];
			m->call_id = strdup(cid->valuestring);
			for (size_t x = 0; x + 1 < p->n_msgs && !m->name; x++)
				for (size_t c = 0; c < p->msgs[x].n_calls; c++)
					if (!strcmp(p->msgs[x].calls[c].id, cid->valuestring))
						m->name = strdup(p->msgs[x].calls[c].name);
			if (!m->call_id)
				return fe_bad_set(bad, 503, NULL, "out of memory");
			i++;
			continue;
		}
		if (type && !cJSON_IsNull(type) && (!ts || strcmp(ts, "message") != 0)) {
			snprintf(where, sizeof where, "input[%d].type", i);
			return fe_bad_set(
				bad, 400, where,
				"'%s': '%.32s' items are not supported (message, function_call, function_call_output; "
				"the server keeps no state, so nothing refers to stored items)",
				where, ts ? ts : "?");
		}
		cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
		snprintf(where, sizeof where, "input[%d].role", i);
		if (!cJSON_IsString(role))
			return fe_bad_set(bad, 400, where, "'%s' must be a string", where);
		enum tok_role r;
		const char *rs = role->valuestring;
		if (!strcmp(rs, "user"))
			r = TOK_ROLE_USER;
		else if (!strcmp(rs, "assistant"))
			r = TOK_ROLE_ASSISTANT;
		else if (!strcmp(rs, "system") || !strcmp(rs, "developer"))
			r = TOK_ROLE_SYSTEM;
		else
			return fe_bad_set(bad, 400, where,
			                  "'%s': role '%.32s' is not supported (user, assistant, system, developer)",
			                  where, rs);
		snprintf(where, sizeof where, "input[%d].content", i);
		char *text;
		if (content_text(cJSON_GetObjectItemCaseSensitive(it, "content"), where, &text, bad) < 0)
			return -1;
		add_msg(p, r, text);
		i++;
	}
	return 0;
}

static int
parse(cJSON *body, enum fe_api api, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad)
{
	p->api = FE_API_RESPONSES;
	p->max_tokens = cfg->max_tokens;
	fe_params_sampling(p, cfg, 40); // the chat endpoint's defaults
	if (fe_get_model(body, cfg, p, bad) < 0)
		return -1;
	// state the server does not keep
	if (present(body, "previous_response_id"))
		return refuse(
			bad, "previous_response_id",
			"this server is stateless and keeps no responses; send the whole conversation in 'input'");
	if (present(body, "conversation"))
		return refuse(bad, "conversation", "this server is stateless; send the whole conversation in 'input'");
	int b = 0;
	if (fe_get_bool(body, "store", &b, bad) < 0)
		return -1;
	if (b)
		return refuse(bad, "store",
		              "this server is stateless and stores no responses; send store: false or leave it out");
	b = 0;
	if (fe_get_bool(body, "background", &b, bad) < 0)
		return -1;
	if (b)
		return refuse(bad, "background", "responses are not stored, so none can run in the background");
	// function tools and the answer's format
	p->call_ids = FE_IDS_RESPONSES;
	if (fe_openai_tools(body, FE_TOOLS_RESPONSES, p, bad) < 0)
		return -1;
	cJSON *text = cJSON_GetObjectItemCaseSensitive(body, "text");
	if (text && !cJSON_IsNull(text)) {
		if (!cJSON_IsObject(text))
			return fe_bad_set(bad, 400, "text", "'text' must be an object");
		cJSON *f = cJSON_GetObjectItemCaseSensitive(text, "format");
		if (f && !cJSON_IsNull(f)) {
			cJSON *ft = cJSON_GetObjectItemCaseSensitive(f, "type");
			if (!cJSON_IsObject(f) || !cJSON_IsString(ft))
				return fe_bad_set(bad, 400, "text.format",
				                  "'text.format' must be an object with a type");
			if (!strcmp(ft->valuestring, "json_object")) {
				p->json_object = 1;
			} else if (!strcmp(ft->valuestring, "json_schema")) {
				cJSON *sc = cJSON_GetObjectItemCaseSensitive(f, "schema");
				if (!cJSON_IsObject(sc))
					return fe_bad_set(bad, 400, "text.format.schema",
					                  "'text.format.schema' must be a JSON Schema object");
				if (!(p->schema = cJSON_Duplicate(sc, 1)))
					return fe_bad_set(bad, 503, NULL, "out of memory");
			} else if (strcmp(ft->valuestring, "text")) {
				return fe_bad_set(bad, 400, "text.format.type",
				                  "'text.format.type': '%.32s' is not text, json_object or json_schema",
				                  ft->valuestring);
			}
		}
	}
	static const struct fe_fields fields = {"tools", "tool_choice", "text.format.schema", ""};
	if (fe_structured_check(p, &fields, bad) < 0)
		return -1;
	// the conversation: instructions, then the input's messages
	cJSON *in = cJSON_GetObjectItemCaseSensitive(body, "input");
	int n = cJSON_IsArray(in) ? cJSON_GetArraySize(in) : 1;
	if (!(p->msgs = calloc((size_t)n + 1, sizeof *p->msgs)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	const char *instr = NULL;
	if (fe_get_string(body, "instructions", &instr, bad) < 0)
		return -1;
	if (instr) {
		char *t = strdup(instr);
		if (!t)
			return fe_bad_set(bad, 503, NULL, "out of memory");
		add_msg(p, TOK_ROLE_SYSTEM, t);
		p->has_instructions = 1;
	}
	if (parse_input(body, p, bad) < 0)
		return -1;
	long long ll;
	int rv = fe_get_int(body, "max_output_tokens", 1, 1 << 20, &ll, bad);
	if (rv < 0)
		return -1;
	if (rv) {
		p->max_tokens = (unsigned)ll;
		p->has_max_output = 1;
	}
	if (fe_get_sampling(body, p, bad) < 0)
		return -1;
	return 0;
}

// --- rendering ---------------------------------------------------------------------

static double
round6(float x)
{
	return round((double)x * 1e6) / 1e6;
}

static void
item_id(const struct fe_gen *g, char *out, size_t n)
{
	const char *s = strncmp(g->id, "resp_", 5) == 0 ? g->id + 5 : g->id;
	snprintf(out, n, "msg_%s", s);
}

static cJSON *
part(const struct fe_gen *g)
{
	cJSON *p = cJSON_CreateObject();
	cJSON_AddStringToObject(p, "type", "output_text");
	fe_add_text(p, "text", g->text, g->len);
	cJSON_AddArrayToObject(p, "annotations");
	cJSON_AddArrayToObject(p, "logprobs");
	return p;
}

static cJSON *
item(const struct fe_gen *g, int final)
{
	char id[64];
	item_id(g, id, sizeof id);
	cJSON *it = cJSON_CreateObject();
	cJSON_AddStringToObject(it, "id", id);
	cJSON_AddStringToObject(it, "type", "message");
	cJSON_AddStringToObject(it, "status", final ? "completed" : "in_progress");
	cJSON_AddStringToObject(it, "role", "assistant");
	cJSON *c = cJSON_AddArrayToObject(it, "content");
	if (final)
		cJSON_AddItemToArray(c, part(g));
	return it;
}

static int
incomplete(const struct fe_gen *g)
{
	return g->r.finish == FE_FINISH_LENGTH;
}

// a function_call output item
static cJSON *
call_item(const struct fe_call *c, int final)
{
	cJSON *it = cJSON_CreateObject();
	cJSON_AddStringToObject(it, "id", c->item);
	cJSON_AddStringToObject(it, "type", "function_call");
	cJSON_AddStringToObject(it, "status", final ? "completed" : "in_progress");
	fe_add_text(it, "arguments", final && c->args ? c->args : "", final ? c->len : 0);
	cJSON_AddStringToObject(it, "call_id", c->id);
	cJSON_AddStringToObject(it, "name", c->name);
	return it;
}

// the calls of the reply: as the stream sent them, or as the worker kept them
static const struct fe_call *
calls_of(const struct fe_gen *g, int *n)
{
	*n = g->p.stream ? g->n_scalls : g->ch[0].n_calls;
	return g->p.stream ? g->scalls : g->ch[0].calls;
}

// the output: the message (unless calls came and no text), then the calls
static void
add_output(cJSON *out, const struct fe_gen *g)
{
	int n;
	const struct fe_call *c = calls_of(g, &n);
	if (!n || !fe_blank(g->text, g->len))
		cJSON_AddItemToArray(out, item(g, 1));
	for (int i = 0; i < n; i++)
		cJSON_AddItemToArray(out, call_item(&c[i], 1));
}

static cJSON *
usage(const struct fe_gen *g)
{
	cJSON *u = cJSON_CreateObject();
	cJSON_AddNumberToObject(u, "input_tokens", g->r.prompt_tokens);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens",
	                        g->r.eng.cached_tokens);
	cJSON_AddNumberToObject(u, "output_tokens", g->r.completion_tokens);
	cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
	cJSON_AddNumberToObject(u, "total_tokens", g->r.prompt_tokens + g->r.completion_tokens);
	cJSON_AddNumberToObject(u, "prompt_tokens_dropped", g->r.prompt_dropped);
	return u;
}

// the response object; final: with its output, status and usage
static cJSON *
response_obj(const struct fe_gen *g, int final)
{
	const struct fe_params *p = &g->p;
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "id", g->id);
	cJSON_AddStringToObject(o, "object", "response");
	cJSON_AddNumberToObject(o, "created_at", (double)g->created);
	cJSON_AddStringToObject(o, "status", !final ? "in_progress" : incomplete(g) ? "incomplete" : "completed");
	cJSON_AddFalseToObject(o, "background");
	cJSON_AddNullToObject(o, "error");
	if (final && incomplete(g))
		cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason",
		                        "max_output_tokens");
	else
		cJSON_AddNullToObject(o, "incomplete_details");
	if (p->has_instructions)
		fe_add_text(o, "instructions", p->msgs[0].content, strlen(p->msgs[0].content));
	else
		cJSON_AddNullToObject(o, "instructions");
	if (p->has_max_output)
		cJSON_AddNumberToObject(o, "max_output_tokens", p->max_tokens);
	else
		cJSON_AddNullToObject(o, "max_output_tokens");
	cJSON_AddStringToObject(o, "model", p->model);
	cJSON *out = cJSON_AddArrayToObject(o, "output");
	if (final)
		add_output(out, g);
	cJSON_AddBoolToObject(o, "parallel_tool_calls", p->n_tools ? p->parallel_tools : 0);
	cJSON_AddNullToObject(o, "previous_response_id");
	cJSON *rs = cJSON_AddObjectToObject(o, "reasoning");
	cJSON_AddNullToObject(rs, "effort");
	cJSON_AddNullToObject(rs, "summary");
	cJSON_AddFalseToObject(o, "store");
	cJSON_AddNumberToObject(o, "temperature", round6(p->temperature));
	cJSON *fmt = cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "text"), "format");
	if (p->schema) {
		cJSON_AddStringToObject(fmt, "type", "json_schema");
		cJSON_AddItemToObject(fmt, "schema", cJSON_Duplicate(p->schema, 1));
	} else {
		cJSON_AddStringToObject(fmt, "type", p->json_object ? "json_object" : "text");
	}
	if (p->tool_choice == FE_TC_NAMED) {
		cJSON *tc = cJSON_AddObjectToObject(o, "tool_choice");
		cJSON_AddStringToObject(tc, "type", "function");
		cJSON_AddStringToObject(tc, "name", p->tool_name);
	} else {
		cJSON_AddStringToObject(o, "tool_choice",
		                        p->tool_choice == FE_TC_REQUIRED             ? "required"
		                        : p->tool_choice == FE_TC_AUTO && p->n_tools ? "auto"
		                                                                     : "none");
	}
	cJSON *tools = cJSON_AddArrayToObject(o, "tools");
	for (int i = 0; i < p->n_tools; i++) {
		cJSON *t = cJSON_CreateObject();
		cJSON_AddStringToObject(t, "type", "function");
		cJSON_AddStringToObject(t, "name", p->tools[i].name);
		if (p->tools[i].description)
			cJSON_AddStringToObject(t, "description", p->tools[i].description);
		else
			cJSON_AddNullToObject(t, "description");
		cJSON_AddItemToObject(t, "parameters", cJSON_Duplicate(p->tools[i].params, 1));
		cJSON_AddFalseToObject(t, "strict");
		cJSON_AddItemToArray(tools, t);
	}
	cJSON_AddNumberToObject(o, "top_p", round6(p->top_p));
	// a prompt longer than the context loses its oldest tokens (usage.prompt_tokens_dropped)
	cJSON_AddStringToObject(o, "truncation", "auto");
	if (final)
		cJSON_AddItemToObject(o, "usage", usage(g));
	else
		cJSON_AddNullToObject(o, "usage");
	cJSON_AddNullToObject(o, "user");
	cJSON_AddObjectToObject(o, "metadata");
	if (final)
		cJSON_AddItemToObject(o, "timings", fe_timings_json(g));
	return o;
}

static char *
response(const struct fe_gen *g, size_t *len)
{
	return fe_json_print(response_obj(g, 1), len);
}

// events are accumulated into one buffer

// ev_obj starts an event: its type and the next sequence number
static cJSON *
ev_obj(const struct fe_gen *g, const char *type)
{
	struct fe_gen *m = (struct fe_gen *)g; // the loop thread's counter; see the top of the file
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", type);
	cJSON_AddNumberToObject(o, "sequence_number", m->seq++);
	return o;
}

// the event is named by the object's type
static void
ev_add(struct fe_sse *e, cJSON *o)
{
	cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
	char name[64];
	snprintf(name, sizeof name, "%s", cJSON_IsString(t) ? t->valuestring : "message");
	fe_sse_event(e, name, o);
}

static void
add_index(cJSON *o, const struct fe_gen *g, int content)
{
	char id[64];
	item_id(g, id, sizeof id);
	cJSON_AddStringToObject(o, "item_id", id);
	cJSON_AddNumberToObject(o, "output_index", g->block);
	if (content)
		cJSON_AddNumberToObject(o, "content_index", 0);
}

enum { B_TEXT = 1, B_TOOL = 2 };

// the stream's open item (the loop thread's; see the top): the message
// item with its text part, or a function call
static void
item_stop(const struct fe_gen *g, struct fe_sse *e)
{
	struct fe_gen *m = (struct fe_gen *)g;
	if (!m->block_open)
		return;
	if (m->block_kind == B_TEXT) {
		cJSON *o = ev_obj(g, "response.output_text.done");
		add_index(o, g, 1);
		fe_add_text(o, "text", g->text, g->len);
		cJSON_AddArrayToObject(o, "logprobs");
		ev_add(e, o);
		o = ev_obj(g, "response.content_part.done");
		add_index(o, g, 1);
		cJSON_AddItemToObject(o, "part", part(g));
		ev_add(e, o);
		o = ev_obj(g, "response.output_item.done");
		cJSON_AddNumberToObject(o, "output_index", g->block);
		cJSON_AddItemToObject(o, "item", item(g, 1));
		ev_add(e, o);
	} else {
		const struct fe_call *c = &g->scalls[g->n_scalls - 1];
		cJSON *o = ev_obj(g, "response.function_call_arguments.done");
		cJSON_AddStringToObject(o, "item_id", c->item);
		cJSON_AddNumberToObject(o, "output_index", g->block);
		fe_add_text(o, "arguments", c->args ? c->args : "", c->len);
		ev_add(e, o);
		o = ev_obj(g, "response.output_item.done");
		cJSON_AddNumberToObject(o, "output_index", g->block);
		cJSON_AddItemToObject(o, "item", call_item(c, 1));
		ev_add(e, o);
	}
	m->block_open = 0;
}

static void
item_start(const struct fe_gen *g, struct fe_sse *e, const struct fe_call *c)
{
	struct fe_gen *m = (struct fe_gen *)g;
	item_stop(g, e);
	m->block = m->blocks_seen++;
	m->block_open = 1;
	m->block_kind = c ? B_TOOL : B_TEXT;
	cJSON *o = ev_obj(g, "response.output_item.added");
	cJSON_AddNumberToObject(o, "output_index", g->block);
	if (c) {
		struct fe_call *k = realloc(m->scalls, (size_t)(m->n_scalls + 1) * sizeof *k);
		if (k) {
			m->scalls = k;
			k[m->n_scalls] = *c;
			k[m->n_scalls].args = NULL;
			k[m->n_scalls].len = k[m->n_scalls].cap = 0;
			m->n_scalls++;
		}
		cJSON_AddItemToObject(o, "item", call_item(c, 0));
		ev_add(e, o);
		return;
	}
	cJSON_AddItemToObject(o, "item", item(g, 0));
	ev_add(e, o);
	o = ev_obj(g, "response.content_part.added");
	add_index(o, g, 1);
	cJSON *p = cJSON_AddObjectToObject(o, "part");
	cJSON_AddStringToObject(p, "type", "output_text");
	cJSON_AddStringToObject(p, "text", "");
	cJSON_AddArrayToObject(p, "annotations");
	cJSON_AddArrayToObject(p, "logprobs");
	ev_add(e, o);
}

static char *
stream_start(const struct fe_gen *g, size_t *len)
{
	struct fe_sse e = {0};
	cJSON *o = ev_obj(g, "response.created");
	cJSON_AddItemToObject(o, "response", response_obj(g, 0));
	ev_add(&e, o);
	o = ev_obj(g, "response.in_progress");
	cJSON_AddItemToObject(o, "response", response_obj(g, 0));
	ev_add(&e, o);
	// with tools the items open as text and calls come
	if (!fe_wants_calls(&g->p))
		item_start(g, &e, NULL);
	return fe_sse_done(&e, len);
}

static char *
stream_chunk(const struct fe_gen *g, const struct fe_chunk *c, size_t *len)
{
	struct fe_gen *m = (struct fe_gen *)g;
	struct fe_sse e = {0};
	if (c->call) {
		if (c->start)
			item_start(g, &e, c->start);
		if (c->len && g->block_kind == B_TOOL && m->n_scalls) {
			struct fe_call *k = &m->scalls[m->n_scalls - 1];
			char *t = realloc(k->args, k->len + c->len + 1);
			if (t) {
				memcpy(t + k->len, c->text, c->len);
				k->len += c->len;
				t[k->len] = 0;
				k->args = t;
			}
			cJSON *o = ev_obj(g, "response.function_call_arguments.delta");
			cJSON_AddStringToObject(o, "item_id", k->item);
			cJSON_AddNumberToObject(o, "output_index", g->block);
			fe_add_text(o, "delta", c->text, c->len);
			ev_add(&e, o);
		}
		return fe_sse_done(&e, len);
	}
	if (!c->len)
		return fe_sse_done(&e, len);
	if (!g->block_open || g->block_kind != B_TEXT)
		item_start(g, &e, NULL);
	// keep the text for the closing events (the loop thread's; see the top)
	if (m->len + c->len + 1 > m->cap) {
		size_t cap = m->cap ? m->cap : 1024;
		while (cap < m->len + c->len + 1)
			cap *= 2;
		char *t = realloc(m->text, cap);
		if (!t) {
			free(e.s);
			return NULL;
		}
		m->text = t;
		m->cap = cap;
	}
	memcpy(m->text + m->len, c->text, c->len);
	m->len += c->len;
	m->text[m->len] = 0;
	cJSON *o = ev_obj(g, "response.output_text.delta");
	add_index(o, g, 1);
	fe_add_text(o, "delta", c->text, c->len);
	cJSON_AddArrayToObject(o, "logprobs");
	ev_add(&e, o);
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
	struct fe_sse e = {0};
	if (!g->blocks_seen) // nothing came: the (empty) message the output holds
		item_start(g, &e, NULL);
	item_stop(g, &e);
	cJSON *o = ev_obj(g, incomplete(g) ? "response.incomplete" : "response.completed");
	cJSON_AddItemToObject(o, "response", response_obj(g, 1));
	ev_add(&e, o);
	return fe_sse_done(&e, len);
}

static char *
error(int status, const char *msg, const char *param, size_t *len)
{
	return fe_openai.error(status, msg, param, len);
}

// an error once the stream has begun: the "error" event, which also carries
// the error object the openai client raises as an APIError
static char *
stream_error(int status, const char *msg, size_t *len)
{
	const char *code = status == 503 ? "server_busy" : status == 504 ? "timeout" : "server_error";
	cJSON *o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "type", "error");
	cJSON_AddStringToObject(o, "code", code);
	fe_add_text(o, "message", msg, strlen(msg));
	cJSON_AddNullToObject(o, "param");
	cJSON *e = cJSON_AddObjectToObject(o, "error");
	cJSON_AddStringToObject(e, "type", code);
	cJSON_AddStringToObject(e, "code", code);
	fe_add_text(e, "message", msg, strlen(msg));
	cJSON_AddNullToObject(e, "param");
	struct fe_sse v = {0};
	ev_add(&v, o);
	return fe_sse_done(&v, len);
}

const struct fe_dialect fe_responses = FE_DIALECT_OF_FILE;
