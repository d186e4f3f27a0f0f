// tools.c - tool calls and structured output, in no dialect.
//
// The request side runs on the loop thread while a body is parsed: each
// tool's parameters must be an object schema the schema compiler
// (common/jschema.h) can express, a named tool_choice must name a declared
// tool, a request's own grammar must compile (common/gbnf.h); whatever is
// refused is a 400 naming the field.
//
// The generation side builds the grammar a worker sends with Generate,
// once the template has said which tool-call markup its prompt asks for:
//   generic  {"tool_call": CALL} or {"tool_calls": [CALL, ...]}
//   hermes   <tool_call>\nCALL\n</tool_call> (Qwen, Hermes, ...), repeated
//   llama3   <|python_tag|>? {"name": NAME, "parameters": {...}}
//   mistral  [TOOL_CALLS][CALL, ...]
// with CALL = {"name": NAME, "arguments": {...}} and the arguments under
// the tool's schema. tool_choice required or a named tool: the whole reply
// is calls, from its first byte. auto: a lazy grammar, unconstrained until
// the markup starts (its first word, or its control token), which then
// holds to the end. An answer schema (response_format) beside auto tools:
// the reply is either calls or the answer, from the start.
//
// The reply side scans the text from the grammar's trigger on: the grammar
// fixes the key order (name first, then the arguments), so a scanner that
// follows JSON's strings and nesting finds each call's name and hands on
// the bytes of its arguments as they come, whatever wraps them.
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fe.h"
#include "gbnf.h"
#include "jschema.h"

// --- the request side ----------------------------------------------------------------

static int
valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return 0;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
		      *s == '-'))
			return 0;
	return 1;
}

int
fe_tool_add(struct fe_params *p, const cJSON *o, const char *at, const char *params_key, int need_params,
            struct fe_bad *bad)
{
	char w[96], where[96];
	snprintf(w, sizeof w, "%s.name", at);
	snprintf(where, sizeof where, "%s.%s", at, params_key);
	const cJSON *jn = cJSON_GetObjectItemCaseSensitive(o, "name");
	const cJSON *jd = cJSON_GetObjectItemCaseSensitive(o, "description");
	const cJSON *params = cJSON_GetObjectItemCaseSensitive(o, params_key);
	if (jn && !cJSON_IsString(jn))
		return fe_bad_set(bad, 400, w, "'%s' must be a string", w);
	if (params && cJSON_IsNull(params))
		params = NULL;
	if (!params && need_params)
		return fe_bad_set(bad, 400, where, "'%s' is required", where);
	const char *name = cJSON_IsString(jn) ? jn->valuestring : NULL;
	const char *description = cJSON_IsString(jd) ? jd->valuestring : NULL;
	if (!name)
		return fe_bad_set(bad, 400, w, "'%s' is required", w);
	if (!valid_name(name))
		return fe_bad_set(bad, 400, w,
		                  "'%s': '%.64s' is not a function name (1 to 64 of a-z, A-Z, 0-9, _ and -)", w, name);
	for (int i = 0; i < p->n_tools; i++)
		if (!strcmp(p->tools[i].name, name))
			return fe_bad_set(bad, 400, w, "'%s': a second tool named '%s'", w, name);
	if (p->n_tools >= FE_MAX_TOOLS)
		return fe_bad_set(bad, 400, where, "'%s': at most %d tools", where, FE_MAX_TOOLS);
	// the parameters: an object schema; none means no arguments
	if (params && !cJSON_IsObject(params))
		return fe_bad_set(bad, 400, where, "'%s' must be a JSON Schema object", where);
	const cJSON *type = params ? cJSON_GetObjectItemCaseSensitive(params, "type") : NULL;
	if (type && (!cJSON_IsString(type) || strcmp(type->valuestring, "object")))
		return fe_bad_set(bad, 400, where,
		                  "'%s': a tool's parameters must be an object schema (\"type\": \"object\")", where);
	if (!p->tools && !(p->tools = calloc(FE_MAX_TOOLS, sizeof *p->tools)))
		return fe_bad_set(bad, 503, NULL, "out of memory");
	struct fe_tool *t = &p->tools[p->n_tools];
	t->name = strdup(name);
	t->description = description ? strdup(description) : NULL;
	t->params = params && cJSON_GetArraySize(params) ? cJSON_Duplicate(params, 1)
	                                                 : cJSON_Parse("{\"type\":\"object\",\"properties\":{}}");
	if (t->params && !cJSON_GetObjectItemCaseSensitive(t->params, "type"))
		cJSON_AddStringToObject(t->params, "type", "object");
	p->n_tools++;
	if (!t->name || (description && !t->description) || !t->params)
		return fe_bad_set(bad, 503, NULL, "out of memory");
	// the schema must compile: a 400 naming the keyword otherwise
	char err[AD_ERRLEN];
	char *g = jsg_schema_gbnf(t->params, where, NULL, err);
	if (!g)
		return fe_bad_set(bad, 400, where, "%s", err);
	free(g);
	return 0;
}

int
fe_tools_parse(struct fe_params *p, const cJSON *body, enum fe_tool_shape shape, struct fe_bad *bad)
{
	const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
	if (!tools || cJSON_IsNull(tools))
		return 0;
	if (!cJSON_IsArray(tools))
		return fe_bad_set(bad, 400, "tools", "'tools' must be an array");
	int i = 0;
	const cJSON *t;
	cJSON_ArrayForEach(t, tools)
	{
		char where[64];
		snprintf(where, sizeof where, "tools[%d]", i);
		if (!cJSON_IsObject(t))
			return fe_bad_set(bad, 400, where, "'%s' must be an object", where);
		const cJSON *type = cJSON_GetObjectItemCaseSensitive(t, "type");
		const char *ty = cJSON_IsString(type) ? type->valuestring : NULL;
		snprintf(where, sizeof where, "tools[%d].type", i);
		if (shape == FE_TOOLS_ANTHROPIC) {
			// client tools: no type or "custom" (server tools run elsewhere)
			if (type && !cJSON_IsNull(type) && (!ty || strcmp(ty, "custom")))
				return fe_bad_set(bad, 400, where,
				                  "'%s': '%.40s' tools are not supported (only client tools with "
				                  "an input_schema)",
				                  where, ty ? ty : "?");
		} else if (!ty || strcmp(ty, "function")) {
			return fe_bad_set(bad, 400, where,
			                  "'%s' is not supported: only function tools run here (no hosted "
			                  "tools)",
			                  where);
		}
		const cJSON *o = t;
		snprintf(where, sizeof where, "tools[%d]", i);
		if (shape == FE_TOOLS_CHAT) { // the function's fields in "function"
			o = cJSON_GetObjectItemCaseSensitive(t, "function");
			snprintf(where, sizeof where, "tools[%d].function", i);
			if (!cJSON_IsObject(o))
				return fe_bad_set(bad, 400, where, "'%s' must be an object", where);
		}
		if (shape == FE_TOOLS_ANTHROPIC ? fe_tool_add(p, o, where, "input_schema", 1, bad)
		                                : fe_tool_add(p, o, where, "parameters", 0, bad))
			return -1;
		i++;
	}
	return 0;
}

int
fe_msg_call(struct tok_msg *m, const char *id, const char *name, const char *arguments, const char *where,
            struct fe_bad *bad)
{
	cJSON *a = cJSON_Parse(arguments ? arguments : "{}");
	if (!cJSON_IsObject(a)) {
		cJSON_Delete(a);
		return fe_bad_set(bad, 400, where, "'%s': the arguments must be a JSON object", where);
	}
	// the compact text (what a template prints with tojson is its own business)
	char *args = cJSON_PrintUnformatted(a);
	cJSON_Delete(a);
	struct tok_call *c = realloc((void *)m->calls, (m->n_calls + 1) * sizeof *c);
	if (!args || !c) {
		free(args);
		if (c)
			m->calls = c;
		return fe_bad_set(bad, 503, NULL, "out of memory");
	}
	m->calls = c;
	c[m->n_calls] = (struct tok_call){strdup(id ? id : ""), strdup(name ? name : ""), args};
	m->n_calls++;
	if (!c[m->n_calls - 1].id || !c[m->n_calls - 1].name)
		return fe_bad_set(bad, 503, NULL, "out of memory");
	return 0;
}

int
fe_call_known(const struct fe_params *p, size_t before, const char *id)
{
	for (size_t i = 0; i < before && i < p->n_msgs; i++)
		for (size_t k = 0; k < p->msgs[i].n_calls; k++)
			if (p->msgs[i].calls[k].id && !strcmp(p->msgs[i].calls[k].id, id))
				return 1;
	return 0;
}

int
fe_wants_calls(const struct fe_params *p)
{
	return p->n_tools > 0 && p->tool_choice != FE_TC_NONE;
}

int
fe_structured_check(struct fe_params *p, const struct fe_fields *f, struct fe_bad *bad)
{
	if (p->tool_choice == FE_TC_NAMED) {
		int found = 0;
		for (int i = 0; i < p->n_tools; i++)
			found |= !strcmp(p->tools[i].name, p->tool_name);
		if (!found)
			return fe_bad_set(bad, 400, f->tool_choice, "'%s': no tool is named '%.64s'", f->tool_choice,
			                  p->tool_name);
	}
	if (p->tool_choice == FE_TC_REQUIRED && p->n_tools == 0)
		return fe_bad_set(bad, 400, f->tool_choice, "'%s': a tool call is required, but there are no tools",
		                  f->tool_choice);
	if (p->grammar) {
		if (p->schema || p->json_object)
			return fe_bad_set(bad, 400, f->grammar, "'%s' cannot be combined with a response format",
			                  f->grammar);
		if (fe_wants_calls(p))
			return fe_bad_set(bad, 400, f->grammar,
			                  "'%s' cannot be combined with tools (set tool_choice to none)", f->grammar);
		char err[AD_ERRLEN];
		struct gbnf *g = NULL;
		if (gbnf_compile(p->grammar, strlen(p->grammar), NULL, NULL, NULL, &g, err))
			return fe_bad_set(bad, 400, f->grammar, "'%s': %s", f->grammar, err);
		gbnf_free(g);
	}
	if (p->schema) {
		char err[AD_ERRLEN];
		char *g = jsg_schema_gbnf(p->schema, f->schema, NULL, err);
		if (!g)
			return fe_bad_set(bad, 400, f->schema, "%s", err);
		free(g);
	}
	return 0;
}

char *
fe_tools_json(const struct fe_params *p)
{
	if (p->n_tools == 0)
		return NULL;
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < p->n_tools; i++) {
		cJSON *t = cJSON_CreateObject(), *fn = cJSON_CreateObject();
		cJSON_AddStringToObject(t, "type", "function");
		cJSON_AddStringToObject(fn, "name", p->tools[i].name);
		if (p->tools[i].description)
			cJSON_AddStringToObject(fn, "description", p->tools[i].description);
		cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(p->tools[i].params, 1));
		cJSON_AddItemToObject(t, "function", fn);
		cJSON_AddItemToArray(a, t);
	}
	char *s = a ? cJSON_PrintUnformatted(a) : NULL;
	cJSON_Delete(a);
	return s;
}

// --- the generation side ----------------------------------------------------------------

void
fe_gram_free(struct fe_gram *g)
{
	free(g->text);
	memset(g, 0, sizeof *g);
}

// a literal of text
static int
add_lit(char *buf, size_t cap, size_t *n, const char *s)
{
	char *l = jsg_literal(s, strlen(s));
	if (!l)
		return -1;
	int w = snprintf(buf + *n, cap - *n, "%s", l);
	free(l);
	if (w < 0 || (size_t)w >= cap - *n)
		return -1;
	*n += (size_t)w;
	return 0;
}

int
fe_gram_build(const struct fe_params *p, const char *format, int32_t (*special)(void *, const char *), void *ctx,
              struct fe_gram *out, char *err)
{
	memset(out, 0, sizeof *out);
	int calls = fe_wants_calls(p);
	if (!calls && !p->schema && !p->json_object) {
		if (p->grammar && !(out->text = strdup(p->grammar)))
			return ad_err(err, "out of memory");
		return 0;
	}
	struct jsg *j = jsg_new();
	if (!j)
		return ad_err(err, "out of memory");
	int rv = 0;
	// the answer
	if (p->schema || p->json_object) {
		cJSON *any = NULL;
		const cJSON *s = p->schema;
		if (!s)
			s = any = cJSON_Parse("{\"type\":\"object\"}");
		rv = jsg_schema(j, "answer", s, "schema", err);
		cJSON_Delete(any);
	}
	if (!rv && !calls)
		rv = jsg_rule(j, "root", "answer", err);
	if (rv || !calls)
		goto done;
	if (!format || !format[0])
		format = TOK_TOOL_FORMAT_GENERIC;
	int llama3 = !strcmp(format, "llama3"), hermes = !strcmp(format, "hermes"),
	    mistral = !strcmp(format, "mistral");
	// the markup's own whitespace: at most one space or newline where the
	// formats put one (the arguments have the schema's ws)
	if ((rv = jsg_rule(j, "mws", "( \" \" | \"\\n\" )?", err)))
		goto done;
	// each tool's call; call ::= the allowed ones
	size_t cap = 256 + (size_t)p->n_tools * 300, n = 0;
	char *alts = malloc(cap), rule[300], name[32];
	if (!alts) {
		rv = ad_err(err, "out of memory");
		goto done;
	}
	alts[0] = 0;
	for (int i = 0; i < p->n_tools && !rv; i++) {
		if (p->tool_choice == FE_TC_NAMED && strcmp(p->tools[i].name, p->tool_name))
			continue;
		char where[96];
		snprintf(name, sizeof name, "args-%d", i);
		snprintf(where, sizeof where, "tools[%d] parameters", i);
		if ((rv = jsg_schema(j, name, p->tools[i].params, where, err)))
			break;
		size_t rn = 0;
		rule[0] = 0;
		char key[96];
		snprintf(key, sizeof key, "\"%s\"", p->tools[i].name);
		rn += (size_t)snprintf(rule, sizeof rule, "\"{\" mws \"\\\"name\\\"\" \":\" mws ");
		if (add_lit(rule, sizeof rule, &rn, key)) {
			rv = ad_err(err, "out of memory");
			break;
		}
		rn += (size_t)snprintf(rule + rn, sizeof rule - rn, " \",\" mws \"\\\"%s\\\"\" \":\" mws %s mws \"}\"",
		                       llama3 ? "parameters" : "arguments", name);
		snprintf(name, sizeof name, "call-%d", i);
		if ((rv = jsg_rule(j, name, rule, err)))
			break;
		n += (size_t)snprintf(alts + n, cap - n, "%s%s", n ? " | " : "", name);
	}
	if (!rv)
		rv = jsg_rule(j, "call", alts, err);
	free(alts);
	if (rv)
		goto done;
	// the markup around the calls
	char tools_root[512];
	int par = p->parallel_tools;
	if (hermes) {
		snprintf(
			tools_root, sizeof tools_root,
			par ? "\"<tool_call>\" mws call mws \"</tool_call>\" (mws \"<tool_call>\" mws call mws \"</tool_call>\")*"
			    : "\"<tool_call>\" mws call mws \"</tool_call>\"");
		out->words[out->n_words++] = "<tool_call>";
	} else if (mistral) {
		int32_t id = special ? special(ctx, "[TOOL_CALLS]") : -1;
		char head[32];
		if (id >= 0) {
			snprintf(head, sizeof head, "<[%d]>", id);
			out->tokens[out->n_tokens++] = id;
		} else {
			snprintf(head, sizeof head, "\"[TOOL_CALLS]\"");
			out->words[out->n_words++] = "[TOOL_CALLS]";
		}
		snprintf(tools_root, sizeof tools_root,
		         par ? "%s \"[\" mws call (\",\" mws call)* mws \"]\"" : "%s \"[\" mws call mws \"]\"", head);
	} else if (llama3) {
		int32_t id = special ? special(ctx, "<|python_tag|>") : -1;
		if (id >= 0) {
			snprintf(tools_root, sizeof tools_root, "<[%d]>? call", id);
			out->tokens[out->n_tokens++] = id;
		} else {
			snprintf(tools_root, sizeof tools_root, "call");
		}
		out->words[out->n_words++] = "{\"name\"";
		out->words[out->n_words++] = "{ \"name\"";
	} else {
		snprintf(
			tools_root, sizeof tools_root,
			par ? "\"{\" mws (\"\\\"tool_call\\\"\" \":\" mws call | \"\\\"tool_calls\\\"\" \":\" mws \"[\" mws call "
			      "(\",\" mws call)* mws \"]\") mws \"}\""
			    : "\"{\" mws \"\\\"tool_call\\\"\" \":\" mws call mws \"}\"");
		out->words[out->n_words++] = "{\"tool_call";
		out->words[out->n_words++] = "{ \"tool_call";
	}
	if ((rv = jsg_rule(j, "tools", tools_root, err)))
		goto done;
	if (p->tool_choice == FE_TC_AUTO && !(p->schema || p->json_object)) {
		out->lazy = 1;
		rv = jsg_rule(j, "root", "tools", err);
	} else {
		out->forced = p->tool_choice != FE_TC_AUTO;
		out->n_words = out->n_tokens = 0;
		rv = jsg_rule(j, "root", p->tool_choice == FE_TC_AUTO ? "tools | answer" : "tools", err);
	}
done:
	if (!rv && !(out->text = jsg_text(j, NULL, err)))
		rv = -1;
	jsg_free(j);
	if (rv)
		fe_gram_free(out);
	return rv;
}

// --- the reply side --------------------------------------------------------------------

enum { SC_SEEK, SC_STR, SC_AFTER_STR, SC_ARGS_WS, SC_ARGS };

void
fe_scan_init(struct fe_scan *s)
{
	memset(s, 0, sizeof *s);
	s->call_depth = -1;
}

static int
is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void
fe_scan_push(struct fe_scan *s, const char *b, size_t n, const struct fe_scan_sink *k)
{
	size_t run = 0; // start of the arguments bytes of this push
	for (size_t i = 0; i < n; i++) {
		char c = b[i];
		switch (s->state) {
		case SC_ARGS: {
			int end = 0;
			if (s->a_str) {
				if (s->a_esc)
					s->a_esc = 0;
				else if (c == '\\')
					s->a_esc = 1;
				else if (c == '"')
					s->a_str = 0, end = s->a_depth == 0;
			} else if (c == '"') {
				s->a_str = 1;
			} else if (c == '{' || c == '[') {
				s->a_depth++;
			} else if (c == '}' || c == ']') {
				end = --s->a_depth == 0;
			}
			if (end) {
				k->args(k->ctx, b + run, i + 1 - run);
				k->end(k->ctx);
				s->state = SC_SEEK;
			}
			break;
		}
		case SC_ARGS_WS:
			if (is_ws(c))
				break;
			s->state = SC_ARGS;
			s->a_depth = s->a_str = s->a_esc = 0;
			run = i;
			i--; // this byte again, as the first of the arguments
			break;
		case SC_STR:
			if (s->esc) {
				s->esc = 0;
			} else if (c == '\\') {
				s->esc = 1;
			} else if (c == '"') {
				s->str[s->slen] = 0;
				if (s->want == 1) { // the name
					s->want = 0;
					s->have_name = 1;
					k->start(k->ctx, s->str);
					s->state = SC_SEEK;
				} else {
					s->state = SC_AFTER_STR;
				}
				break;
			}
			if (s->slen + 1 < (int)sizeof s->str)
				s->str[s->slen++] = c;
			break;
		case SC_AFTER_STR:
			if (is_ws(c))
				break;
			s->state = SC_SEEK;
			if (c == ':') { // a key
				if (!strcmp(s->str, "name") && !s->have_name) {
					s->want = 1;
					s->call_depth = s->depth;
				} else if ((!strcmp(s->str, "arguments") || !strcmp(s->str, "parameters")) &&
				           s->have_name && s->depth == s->call_depth) {
					s->state = SC_ARGS_WS;
				}
				break;
			}
			i--; // not a key: this byte in the seek state
			break;
		default: // SC_SEEK
			if (c == '"') {
				s->state = SC_STR;
				s->slen = 0;
				s->esc = 0;
			} else if (c == '{' || c == '[') {
				s->depth++;
			} else if (c == '}' || c == ']') {
				s->depth--;
				if (s->have_name && s->depth < s->call_depth) { // the call's object closed
					s->have_name = 0;
					s->call_depth = -1;
				}
			} else if (!is_ws(c) && s->want == 1) {
				s->want = 0; // the name is not a string
			}
			break;
		}
	}
	if (s->state == SC_ARGS && run < n)
		k->args(k->ctx, b + run, n - run);
}

void
fe_call_id(enum fe_ids ids, char *out, size_t n, char *item, size_t item_n)
{
	static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
	static uint64_t counter;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
	             (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull);
	char r[25];
	for (int i = 0; i < 24; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		r[i] = al[x % (sizeof al - 1)];
	}
	r[24] = 0;
	snprintf(out, n, "%s%s", ids == FE_IDS_ANTHROPIC ? "toolu_" : "call_", r);
	if (item)
		snprintf(item, item_n, "fc_%s", r);
}

// whether tok[0..n) is a whole JSON number or literal
static int
whole_scalar(const char *t, size_t n)
{
	if ((n == 4 && (!memcmp(t, "true", 4) || !memcmp(t, "null", 4))) || (n == 5 && !memcmp(t, "false", 5)))
		return 1;
	if (n == 0 || strspn(t, "-0123456789.eE+") < n || t[n - 1] < '0' || t[n - 1] > '9')
		return 0;
	char buf[64];
	if (n >= sizeof buf)
		return 1; // a long run of digits
	memcpy(buf, t, n);
	buf[n] = 0;
	cJSON *x = cJSON_Parse(buf);
	int ok = cJSON_IsNumber(x);
	cJSON_Delete(x);
	return ok;
}

int
fe_blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strchr(" \t\r\n", s[i]))
			return 0;
	return 1;
}

char *
fe_json_close(const char *s, size_t n)
{
	// the open containers, each object expecting a key (0) or a value (1);
	// firm: the end of the last complete value or opening bracket, with the
	// containers open there
	enum { MAXD = 256 };
	char stack[MAXD], firm_stack[MAXD];
	uint8_t expect[MAXD];
	int depth = 0, firm_depth = 0;
	size_t firm = 0, tok = 0;
	int in_str = 0, esc = 0, in_tok = 0;
#define FIRM(at) (firm = (at), firm_depth = depth, memcpy(firm_stack, stack, (size_t)depth))
	for (size_t i = 0; i <= n; i++) {
		char c = i < n ? s[i] : ' ';
		if (in_str) {
			if (i == n)
				break;
			if (esc) {
				esc = 0;
			} else if (c == '\\') {
				esc = 1;
			} else if (c == '"') {
				in_str = 0;
				if (depth && stack[depth - 1] == '{' && expect[depth - 1] == 0)
					continue; // a key: firm only with its value
				FIRM(i + 1);
			}
			continue;
		}
		if (in_tok) {
			if (!strchr(",:]} \t\n\r", c) && i < n)
				continue;
			in_tok = 0;
			if (whole_scalar(s + tok, i - tok) && (i < n || 1))
				FIRM(i);
		}
		if (i == n)
			break;
		if (c == '"') {
			in_str = 1;
		} else if (c == '{' || c == '[') {
			if (depth == MAXD)
				break;
			stack[depth] = c;
			expect[depth++] = 0;
			FIRM(i + 1);
		} else if (c == '}' || c == ']') {
			if (depth == 0)
				break;
			depth--;
			FIRM(i + 1);
		} else if (c == ':') {
			if (depth)
				expect[depth - 1] = 1;
		} else if (c == ',') {
			if (depth)
				expect[depth - 1] = 0;
		} else if (!is_ws(c)) {
			in_tok = 1;
			tok = i;
		}
	}
#undef FIRM
	size_t len = firm;
	while (len > 0 && (is_ws(s[len - 1]) || s[len - 1] == ','))
		len--;
	char *out = malloc(len + (size_t)firm_depth + 1);
	if (!out)
		return NULL;
	memcpy(out, s, len);
	size_t o = len;
	for (int d = firm_depth - 1; d >= 0; d--)
		out[o++] = firm_stack[d] == '{' ? '}' : ']';
	out[o] = 0;
	// a cut that left no valid JSON (nothing firm at all): an empty object
	cJSON *chk = cJSON_ParseWithLength(out, o);
	if (!chk) {
		free(out);
		return strdup("{}");
	}
	cJSON_Delete(chk);
	return out;
}

void
fe_calls_free(struct fe_call *c, int n)
{
	for (int i = 0; c && i < n; i++)
		free(c[i].args);
	free(c);
}
