// api-chat.c - what a chat request gives the model's chat template besides
// the text of its turns: tool calls and results in the history, thinking
// kept in the history, chat_template_kwargs and the thinking switches of
// both dialects (the tools themselves: tools.c). See fe.h.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

void
fe_msg_free(struct tok_msg *m)
{
	free((char *)m->content);
	free((char *)m->reasoning);
	free((char *)m->call_id);
	free((char *)m->name);
	for (size_t i = 0; i < m->n_calls; i++) {
		free((char *)m->calls[i].id);
		free((char *)m->calls[i].name);
		free((char *)m->calls[i].arguments);
	}
	free((struct tok_call *)m->calls);
	memset(m, 0, sizeof *m);
}

static char *
dup_or_bad(const char *s, struct fe_bad *bad)
{
	char *d = strdup(s);
	if (!d)
		fe_bad_set(bad, 503, NULL, "out of memory");
	return d;
}

// an optional string field; 0 absent, 1 read into *out (malloc'd), -1 bad
static int
opt_string(cJSON *o, const char *key, const char *where, char **out, struct fe_bad *bad)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	*out = NULL;
	if (!v || cJSON_IsNull(v))
		return 0;
	if (!cJSON_IsString(v))
		return fe_bad_set(bad, 400, where, "'%s' must be a string", where);
	return (*out = dup_or_bad(v->valuestring, bad)) ? 1 : -1;
}

// JSON text of a value, malloc'd
static char *
print_or_bad(const cJSON *v, struct fe_bad *bad)
{
	char *s = cJSON_PrintUnformatted(v);
	if (!s)
		fe_bad_set(bad, 503, NULL, "out of memory");
	return s;
}

static int
add_call(struct tok_msg *m, const char *id, const char *name, char *arguments, struct fe_bad *bad)
{
	struct tok_call *c = realloc((struct tok_call *)m->calls, (m->n_calls + 1) * sizeof *c);
	if (!c) {
		free(arguments);
		return fe_bad_set(bad, 503, NULL, "out of memory");
	}
	m->calls = c;
	c[m->n_calls] = (struct tok_call){id ? strdup(id) : strdup(""), strdup(name), arguments};
	m->n_calls++;
	if (!c[m->n_calls - 1].id || !c[m->n_calls - 1].name)
		return fe_bad_set(bad, 503, NULL, "out of memory");
	return 0;
}

int
fe_chat_openai_message(cJSON *m, const char *where0, struct tok_msg *out, struct fe_bad *bad)
{
	char where[128];
	memset(out, 0, sizeof *out);
	if (!cJSON_IsObject(m))
		return fe_bad_set(bad, 400, where0, "'%s' must be an object", where0);
	cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
	snprintf(where, sizeof where, "%s.role", where0);
	if (!cJSON_IsString(role))
		return fe_bad_set(bad, 400, where, "'%s' must be a string", where);
	const char *r = role->valuestring;
	if (!strcmp(r, "system") || !strcmp(r, "developer"))
		out->role = TOK_ROLE_SYSTEM;
	else if (!strcmp(r, "user"))
		out->role = TOK_ROLE_USER;
	else if (!strcmp(r, "assistant"))
		out->role = TOK_ROLE_ASSISTANT;
	else if (!strcmp(r, "tool"))
		out->role = TOK_ROLE_TOOL;
	else
		return fe_bad_set(bad, 400, where,
		                  "'%s': role '%.32s' is not supported (system, user, assistant, tool)", where, r);
	snprintf(where, sizeof where, "%s.content", where0);
	char *text;
	if (fe_get_text(cJSON_GetObjectItemCaseSensitive(m, "content"), where, &text, bad) < 0)
		return -1;
	out->content = text;
	snprintf(where, sizeof where, "%s.reasoning_content", where0);
	char *s;
	if (opt_string(m, "reasoning_content", where, &s, bad) < 0)
		return -1;
	out->reasoning = s;
	if (out->role == TOK_ROLE_TOOL) {
		snprintf(where, sizeof where, "%s.tool_call_id", where0);
		int rv = opt_string(m, "tool_call_id", where, &s, bad);
		if (rv < 0)
			return -1;
		if (rv == 0)
			return fe_bad_set(bad, 400, where, "'%s' is required in a tool message", where);
		out->call_id = s;
		snprintf(where, sizeof where, "%s.name", where0);
		if (opt_string(m, "name", where, &s, bad) < 0)
			return -1;
		out->name = s;
	}
	cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
	if (!calls || cJSON_IsNull(calls))
		return 0;
	snprintf(where, sizeof where, "%s.tool_calls", where0);
	if (out->role != TOK_ROLE_ASSISTANT)
		return fe_bad_set(bad, 400, where, "'%s': only assistant messages have tool calls", where);
	if (!cJSON_IsArray(calls))
		return fe_bad_set(bad, 400, where, "'%s' must be an array", where);
	int k = 0;
	cJSON *c;
	cJSON_ArrayForEach(c, calls)
	{
		snprintf(where, sizeof where, "%s.tool_calls[%d]", where0, k);
		cJSON *fn = cJSON_GetObjectItemCaseSensitive(c, "function");
		cJSON *type = cJSON_GetObjectItemCaseSensitive(c, "type");
		cJSON *id = cJSON_GetObjectItemCaseSensitive(c, "id");
		if (!cJSON_IsObject(c) || !cJSON_IsObject(fn))
			return fe_bad_set(bad, 400, where, "'%s' must be an object with a 'function'", where);
		if (type && !cJSON_IsNull(type) && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function")))
			return fe_bad_set(bad, 400, where, "'%s.type' must be 'function'", where);
		if (id && !cJSON_IsNull(id) && !cJSON_IsString(id))
			return fe_bad_set(bad, 400, where, "'%s.id' must be a string", where);
		cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
		cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
		if (!cJSON_IsString(name))
			return fe_bad_set(bad, 400, where, "'%s.function.name' must be a string", where);
		char *a;
		if (cJSON_IsString(args)) // OpenAI's arguments are JSON text
			a = dup_or_bad(args->valuestring, bad);
		else if (cJSON_IsObject(args))
			a = print_or_bad(args, bad);
		else if (!args || cJSON_IsNull(args))
			a = dup_or_bad("{}", bad);
		else
			return fe_bad_set(bad, 400, where, "'%s.function.arguments' must be a string of JSON", where);
		if (!a || add_call(out, cJSON_IsString(id) ? id->valuestring : NULL, name->valuestring, a, bad) != 0)
			return -1;
		k++;
	}
	return 0;
}

// the tool calls made so far: a tool turn answers one of them
static const struct tok_call *
find_call(const struct fe_params *p, const char *id)
{
	for (size_t i = p->n_msgs; i-- > 0;)
		for (size_t k = 0; k < p->msgs[i].n_calls; k++)
			if (!strcmp(p->msgs[i].calls[k].id, id))
				return &p->msgs[i].calls[k];
	return NULL;
}

// kwargs[key] = v, unless the kwargs have it already
static int
kwarg_default(struct fe_params *p, const char *key, cJSON *v, struct fe_bad *bad)
{
	cJSON *kw = p->template_kwargs ? cJSON_Parse(p->template_kwargs) : cJSON_CreateObject();
	if (!kw) {
		cJSON_Delete(v);
		return fe_bad_set(bad, 503, NULL, "out of memory");
	}
	if (cJSON_GetObjectItemCaseSensitive(kw, key)) {
		cJSON_Delete(v);
		cJSON_Delete(kw);
		return 0;
	}
	cJSON_AddItemToObject(kw, key, v);
	char *s = print_or_bad(kw, bad);
	cJSON_Delete(kw);
	if (!s)
		return -1;
	free(p->template_kwargs);
	p->template_kwargs = s;
	return 0;
}

int
fe_chat_openai_thinking(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs");
	if (v && !cJSON_IsNull(v)) {
		if (!cJSON_IsObject(v))
			return fe_bad_set(bad, 400, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
		static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt"};
		for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
			if (cJSON_GetObjectItemCaseSensitive(v, reserved[i]))
				return fe_bad_set(bad, 400, "chat_template_kwargs",
				                  "'chat_template_kwargs.%s': the request sets it, not the kwargs",
				                  reserved[i]);
		cJSON *et = cJSON_GetObjectItemCaseSensitive(v, "enable_thinking");
		if (et && !cJSON_IsBool(et))
			return fe_bad_set(bad, 400, "chat_template_kwargs",
			                  "'chat_template_kwargs.enable_thinking' must be true or false");
		if (!(p->template_kwargs = print_or_bad(v, bad)))
			return -1;
	}
	const char *effort = NULL;
	if (fe_get_string(body, "reasoning_effort", &effort, bad) < 0)
		return -1;
	if (effort) {
		static const char *const levels[] = {"none", "minimal", "low", "medium", "high"};
		size_t i;
		for (i = 0; i < sizeof levels / sizeof levels[0] && strcmp(effort, levels[i]); i++)
			;
		if (i == sizeof levels / sizeof levels[0])
			return fe_bad_set(bad, 400, "reasoning_effort",
			                  "'reasoning_effort' must be none, minimal, low, medium or high, not '%.32s'",
			                  effort);
		// none and minimal: no thinking; the template sees the level too (gpt-oss reads it)
		p->thinking = i < 2 ? FE_THINKING_OFF : FE_THINKING_ON;
		if (kwarg_default(p, "reasoning_effort", cJSON_CreateString(effort), bad) != 0)
			return -1;
	}
	const char *fmt = NULL;
	if (fe_get_string(body, "reasoning_format", &fmt, bad) < 0)
		return -1;
	if (fmt) {
		if (!strcmp(fmt, "none"))
			p->keep_thinking = 1;
		else if (strcmp(fmt, "auto") && strcmp(fmt, "deepseek"))
			return fe_bad_set(bad, 400, "reasoning_format",
			                  "'reasoning_format' must be none, auto or deepseek, not '%.32s'", fmt);
	}
	return 0;
}

// the tool turns answer calls made before them; a nameless one takes its call's name
int
fe_chat_check_tool_turns(struct fe_params *p, size_t from, struct fe_bad *bad, const char *field)
{
	for (size_t i = from; i < p->n_msgs; i++) {
		struct tok_msg *m = &p->msgs[i];
		if (m->role != TOK_ROLE_TOOL)
			continue;
		size_t n = p->n_msgs;
		p->n_msgs = i; // only the calls before it
		const struct tok_call *c = find_call(p, m->call_id);
		p->n_msgs = n;
		if (!c)
			return fe_bad_set(bad, 400, field,
			                  "'%s': the tool result for '%.64s' answers no tool call before it", field,
			                  m->call_id);
		if (!m->name && !(m->name = dup_or_bad(c->name, bad)))
			return -1;
	}
	return 0;
}

// --- Anthropic ---------------------------------------------------------------------

int
fe_chat_anthropic_thinking(cJSON *body, struct fe_params *p, struct fe_bad *bad)
{
	cJSON *th = cJSON_GetObjectItemCaseSensitive(body, "thinking");
	if (th && !cJSON_IsNull(th)) {
		cJSON *type = cJSON_GetObjectItemCaseSensitive(th, "type");
		if (!cJSON_IsObject(th) || !cJSON_IsString(type))
			return fe_bad_set(bad, 400, "thinking", "'thinking' must be an object with a 'type'");
		if (!strcmp(type->valuestring, "disabled")) {
			p->thinking = FE_THINKING_OFF;
		} else if (!strcmp(type->valuestring, "enabled") || !strcmp(type->valuestring, "adaptive")) {
			long long budget;
			if (fe_get_int(th, "budget_tokens", 1, 1 << 30, &budget, bad) < 0)
				return fe_bad_set(bad, 400, "thinking.budget_tokens",
				                  "'thinking.budget_tokens' must be a positive integer");
			p->thinking = FE_THINKING_ON;
		} else {
			return fe_bad_set(bad, 400, "thinking.type",
			                  "'thinking.type' must be enabled or disabled, not '%.32s'",
			                  type->valuestring);
		}
	}
	return 0;
}

int
fe_chat_anthropic_count(cJSON *m)
{
	int n = 1;
	cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content"), *b;
	if (cJSON_IsArray(c))
		cJSON_ArrayForEach(b, c)
		{
			cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
			n += cJSON_IsString(type) && !strcmp(type->valuestring, "tool_result");
		}
	return n;
}

// text joined from blocks with "\n" (fe_get_text's way)
static int
join(char **acc, const char *s, struct fe_bad *bad)
{
	size_t a = *acc ? strlen(*acc) : 0, b = strlen(s);
	char *n = realloc(*acc, a + b + 2);
	if (!n)
		return fe_bad_set(bad, 503, NULL, "out of memory");
	if (a)
		n[a++] = '\n';
	memcpy(n + a, s, b + 1);
	*acc = n;
	return 0;
}

int
fe_chat_anthropic_message(cJSON *m, int i, struct fe_params *p, struct fe_bad *bad)
{
	char where[192];
	snprintf(where, sizeof where, "messages[%d]", i);
	if (!cJSON_IsObject(m))
		return fe_bad_set(bad, 400, where, "'%s' must be an object", where);
	cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
	snprintf(where, sizeof where, "messages[%d].role", i);
	if (!cJSON_IsString(role))
		return fe_bad_set(bad, 400, where, "'%s' must be a string", where);
	enum tok_role r;
	if (!strcmp(role->valuestring, "user"))
		r = TOK_ROLE_USER;
	else if (!strcmp(role->valuestring, "assistant"))
		r = TOK_ROLE_ASSISTANT;
	else
		return fe_bad_set(bad, 400, where, "'%s': role '%.32s' is not supported (user, assistant)", where,
		                  role->valuestring);
	snprintf(where, sizeof where, "messages[%d].content", i);
	cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
	if (!content || cJSON_IsNull(content))
		return fe_bad_set(bad, 400, where, "'%s' is required", where);
	struct tok_msg msg = {.role = r};
	size_t first = p->n_msgs;
	if (!cJSON_IsArray(content)) {
		char *text;
		if (fe_get_text(content, where, &text, bad) < 0)
			return -1;
		msg.content = text;
		p->msgs[p->n_msgs++] = msg;
		return 0;
	}
	char *text = NULL, *thinking = NULL;
	int k = 0;
	cJSON *b;
	cJSON_ArrayForEach(b, content)
	{
		char bw[128];
		snprintf(bw, sizeof bw, "messages[%d].content[%d]", i, k++);
		cJSON *type = cJSON_GetObjectItemCaseSensitive(b, "type");
		const char *t = cJSON_IsString(type) ? type->valuestring : NULL;
		if (cJSON_IsString(b) || (t && !strcmp(t, "text"))) {
			cJSON *tx = cJSON_IsString(b) ? b : cJSON_GetObjectItemCaseSensitive(b, "text");
			if (!cJSON_IsString(tx)) {
				fe_bad_set(bad, 400, bw, "'%s.text' must be a string", bw);
				goto fail;
			}
			if (join(&text, tx->valuestring, bad) != 0)
				goto fail;
		} else if (t && !strcmp(t, "thinking") && r == TOK_ROLE_ASSISTANT) {
			cJSON *tx = cJSON_GetObjectItemCaseSensitive(b, "thinking");
			if (!cJSON_IsString(tx)) {
				fe_bad_set(bad, 400, bw, "'%s.thinking' must be a string", bw);
				goto fail;
			}
			if (join(&thinking, tx->valuestring, bad) != 0)
				goto fail;
		} else if (t && !strcmp(t, "redacted_thinking") && r == TOK_ROLE_ASSISTANT) {
			continue; // nothing a template can show
		} else if (t && !strcmp(t, "tool_use") && r == TOK_ROLE_ASSISTANT) {
			cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id");
			cJSON *name = cJSON_GetObjectItemCaseSensitive(b, "name");
			cJSON *input = cJSON_GetObjectItemCaseSensitive(b, "input");
			if (!cJSON_IsString(id) || !cJSON_IsString(name) || !cJSON_IsObject(input)) {
				fe_bad_set(bad, 400, bw,
				           "'%s' needs a string 'id', a string 'name' and an object 'input'", bw);
				goto fail;
			}
			char *a = print_or_bad(input, bad);
			if (!a || add_call(&msg, id->valuestring, name->valuestring, a, bad) != 0)
				goto fail;
		} else if (t && !strcmp(t, "tool_result") && r == TOK_ROLE_USER) {
			cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
			if (!cJSON_IsString(id)) {
				fe_bad_set(bad, 400, bw, "'%s.tool_use_id' must be a string", bw);
				goto fail;
			}
			snprintf(where, sizeof where, "%s.content", bw);
			char *res;
			if (fe_get_text(cJSON_GetObjectItemCaseSensitive(b, "content"), where, &res, bad) < 0)
				goto fail;
			if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(b, "is_error"))) { // the tool failed: say so
				size_t rl = strlen(res);
				char *e = malloc(rl + 8);
				if (!e) {
					free(res);
					fe_bad_set(bad, 503, NULL, "out of memory");
					goto fail;
				}
				memcpy(e, "Error: ", 7);
				memcpy(e + 7, res, rl + 1);
				free(res);
				res = e;
			}
			struct tok_msg tm = {.role = TOK_ROLE_TOOL, .content = res, .call_id = strdup(id->valuestring)};
			if (!tm.call_id) {
				free(res);
				fe_bad_set(bad, 503, NULL, "out of memory");
				goto fail;
			}
			p->msgs[p->n_msgs++] = tm;
			snprintf(where, sizeof where, "%s.tool_use_id", bw);
			if (fe_chat_check_tool_turns(p, p->n_msgs - 1, bad, where) != 0)
				goto fail;
		} else {
			fe_bad_set(bad, 400, bw, "'%s.type': %s%s%s blocks are not supported in %s messages", bw,
			           t ? "'" : "", t ? t : "untyped", t ? "'" : "", role->valuestring);
			goto fail;
		}
	}
	// the user's text after the tool results it comes with; an assistant turn always
	if (text || r == TOK_ROLE_ASSISTANT || p->n_msgs == first) {
		if (!text && !(text = strdup(""))) {
			fe_bad_set(bad, 503, NULL, "out of memory");
			goto fail;
		}
		msg.content = text;
		msg.reasoning = thinking;
		p->msgs[p->n_msgs++] = msg;
		return 0;
	}
	free(thinking);
	fe_msg_free(&msg);
	return 0;
fail:
	free(text);
	free(thinking);
	fe_msg_free(&msg);
	return -1;
}
