// chat-tools.c - tools in a conversation for templates that cannot write
// them; see tokenizer.h.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbuf.h"
#include "tokenizer-impl.h"
#include "tokenizer.h"

// a JSON string of s (quoted, escaped)
static void
sb_json_str(struct sbuf *b, const char *s)
{
	cJSON *j = cJSON_CreateString(s ? s : "");
	char *t = j ? cJSON_PrintUnformatted(j) : NULL;
	if (t)
		sbuf_str(b, t);
	else
		b->oom = 1;
	free(t);
	cJSON_Delete(j);
}

int
tok_chat_has_tools(const struct tok_msg *msgs, size_t n, const char *tools_json)
{
	if (tools_json && tools_json[0])
		return 1;
	for (size_t i = 0; i < n; i++)
		if (msgs[i].role == TOK_ROLE_TOOL || msgs[i].n_calls)
			return 1;
	return 0;
}

const char *
tok_tool_format(const char *t)
{
	if (!t)
		return TOK_TOOL_FORMAT_GENERIC;
	if (strstr(t, "<tool_call>"))
		return "hermes";
	if (strstr(t, "[TOOL_CALLS]"))
		return "mistral";
	if (strstr(t, "<|start_header_id|>") && strstr(t, "\"parameters\""))
		return "llama3";
	return TOK_TOOL_FORMAT_GENERIC;
}

// the block the system turn ends with
static int
tools_block(struct sbuf *b, const char *tools_json, char *err)
{
	cJSON *tools = cJSON_Parse(tools_json);
	if (!cJSON_IsArray(tools)) {
		cJSON_Delete(tools);
		return ad_err(err, "chat: tools must be a JSON array");
	}
	sbuf_str(b, "You can call these functions:\n");
	const cJSON *t;
	int k = 0;
	cJSON_ArrayForEach(t, tools)
	{
		const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
		const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "name");
		if (!cJSON_IsObject(f) || !cJSON_IsString(name)) {
			cJSON_Delete(tools);
			return ad_err(err,
			              "chat: tools[%d] is not {\"type\": \"function\", \"function\": {\"name\": ...}}",
			              k);
		}
		char *s = cJSON_PrintUnformatted(f);
		if (!s) {
			cJSON_Delete(tools);
			return ad_err(err, "out of memory");
		}
		sbuf_str(b, s);
		sbuf_str(b, "\n");
		free(s);
		k++;
	}
	cJSON_Delete(tools);
	sbuf_str(b, "To call a function, answer with nothing but this JSON: {\"tool_call\": {\"name\": <the function's "
	            "name>, \"arguments\": <its arguments as a JSON object>}}\n"
	            "To call several at once: {\"tool_calls\": [{\"name\": ..., \"arguments\": ...}, ...]}\n"
	            "A function's result comes back in a message that starts with \"Result of\".");
	return 0;
}

// the calls of an assistant turn in the generic markup
static void
calls_text(struct sbuf *b, const struct tok_call *c, size_t n)
{
	sbuf_str(b, n == 1 ? "{\"tool_call\": " : "{\"tool_calls\": [");
	for (size_t i = 0; i < n; i++) {
		if (i)
			sbuf_str(b, ", ");
		sbuf_str(b, "{\"name\": ");
		sb_json_str(b, c[i].name);
		sbuf_str(b, ", \"arguments\": ");
		sbuf_str(b, c[i].arguments && c[i].arguments[0] ? c[i].arguments : "{}");
		sbuf_str(b, "}");
	}
	sbuf_str(b, n == 1 ? "}" : "]}");
}

void
tok_chat_plain_free(struct tok_msg *msgs, size_t n)
{
	for (size_t i = 0; msgs && i < n; i++)
		free((char *)msgs[i].content);
	free(msgs);
}

int
tok_chat_tools_plain(const struct tok_msg *msgs, size_t n, const char *tools_json, struct tok_msg **out, size_t *n_out,
                     char *err)
{
	*out = NULL;
	*n_out = 0;
	int has_tools = tools_json && tools_json[0];
	int sys = has_tools && (n == 0 || msgs[0].role != TOK_ROLE_SYSTEM); // a system turn to add
	struct tok_msg *m = calloc(n + 1, sizeof *m);
	if (!m)
		return ad_err(err, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < n + (size_t)sys; i++) {
		const struct tok_msg *src = sys ? (i ? &msgs[i - 1] : NULL) : &msgs[i];
		struct sbuf b = {0};
		enum tok_role role = src ? src->role : TOK_ROLE_SYSTEM;
		if (src && src->role == TOK_ROLE_TOOL) {
			role = TOK_ROLE_USER;
			sbuf_str(&b, "Result of ");
			sbuf_str(&b, src->name && src->name[0] ? src->name : "the function");
			if (src->call_id && src->call_id[0]) {
				sbuf_str(&b, " (");
				sbuf_str(&b, src->call_id);
				sbuf_str(&b, ")");
			}
			sbuf_str(&b, ": ");
			sbuf_str(&b, src->content ? src->content : "");
		} else {
			sbuf_str(&b, src && src->content ? src->content : "");
			if (src && src->n_calls) {
				if (b.n)
					sbuf_str(&b, "\n");
				calls_text(&b, src->calls, src->n_calls);
			}
		}
		if (has_tools && (sys ? i == 0 : i == 0 && role == TOK_ROLE_SYSTEM)) {
			if (b.n)
				sbuf_str(&b, "\n\n");
			if (tools_block(&b, tools_json, err)) {
				free(b.s);
				tok_chat_plain_free(m, k);
				return -1;
			}
		}
		if (b.oom || !(b.s || (b.s = calloc(1, 1)))) {
			free(b.s);
			tok_chat_plain_free(m, k);
			return ad_err(err, "out of memory");
		}
		m[k].role = role;
		m[k].content = b.s;
		k++;
	}
	*out = m;
	*n_out = k;
	return 0;
}

int
tok_chat_render_tools(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
                      const struct tok_chat_opts *o, char **out, const char **how, const char **format, char *err)
{
	*format = "";
	const char *tools = o ? o->tools : NULL;
	if (!tok_chat_has_tools(msgs, n, tools))
		return tok_chat_render(t, msgs, n, add_generation_prompt, o, out, how, err);
	// the template that writes tools: its tool_use variant when it has one
	const char *tmpl =
		tools && tools[0] && t->chat_template_tool_use ? t->chat_template_tool_use : t->chat_template;
	const char *f = tok_tool_format(tmpl);
	if (strcmp(f, TOK_TOOL_FORMAT_GENERIC) && !(o && o->native) && tok_chat_jinja(t, NULL)) {
		const char *h = NULL;
		if (tok_chat_render(t, msgs, n, add_generation_prompt, o, out, &h, err))
			return -1;
		if (h && !strcmp(h, "jinja")) {
			*format = f;
			if (how)
				*how = h;
			return 0;
		}
		free(*out); // the template fell back to a built-in renderer, which writes no tools
		*out = NULL;
	}
	struct tok_msg *plain = NULL;
	size_t np = 0;
	if (tok_chat_tools_plain(msgs, n, tools, &plain, &np, err))
		return -1;
	struct tok_chat_opts po = {.enable_thinking = -1};
	if (o)
		po = *o;
	po.tools = NULL;
	int rv = tok_chat_render(t, plain, np, add_generation_prompt, &po, out, how, err);
	tok_chat_plain_free(plain, np);
	*format = TOK_TOOL_FORMAT_GENERIC;
	return rv;
}
