// chat-jinja.c - chat prompts from the model's own Jinja template; see
// tok_chat_render in tokenizer.h.
//
// The context is built as the JSON text jinja_render reads: the messages
// with cJSON (which escapes), then the tools and the kwargs spliced in as
// the caller's own JSON text, so that their numbers keep their spelling
// (1.0 stays a float for the template). Later keys win, so the variables
// are written in Hugging Face's precedence: bos_token and eos_token, then
// the kwargs, then what the kwargs cannot change.
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "log.h"
#include "sbuf.h"
#include "tokenizer-impl.h"
#include "unicode.h"

static struct jinja_tmpl *
compile(const char *text, char *why, size_t why_n)
{
	char err[AD_ERRLEN];
	enum jinja_status st;
	struct jinja_tmpl *j = jinja_parse(text, strlen(text), &st, err);
	if (!j)
		snprintf(why, why_n, "the template %s (%.400s)",
		         st == JINJA_UNSUPPORTED ? "uses what the interpreter does not support" : "does not parse",
		         err);
	return j;
}

void
tok_chat_compile(struct tokenizer *t)
{
	jinja_free(t->jinja);
	jinja_free(t->jinja_tool_use);
	t->jinja = t->jinja_tool_use = NULL;
	t->jinja_why[0] = 0;
	if (t->chat_template)
		t->jinja = compile(t->chat_template, t->jinja_why, sizeof t->jinja_why);
	if (t->jinja && t->chat_template_tool_use) {
		char why[sizeof t->jinja_why];
		t->jinja_tool_use = compile(t->chat_template_tool_use, why, sizeof why);
		if (!t->jinja_tool_use)
			ad_warn("chat: the tool_use chat template is not run: %s", why);
	}
}

int
tok_chat_jinja(const struct tokenizer *t, const char **why)
{
	if (why)
		*why = t->jinja ? "" : t->chat_template ? t->jinja_why : "the model has no chat template";
	return t->jinja != NULL;
}

// --- the context ---------------------------------------------------------------

// a string member, as valid UTF-8
static int
add_text(cJSON *o, const char *key, const char *s)
{
	size_t n = strlen(s);
	if (unicode_valid(s, n))
		return cJSON_AddStringToObject(o, key, s) ? 0 : -1;
	size_t m;
	char *clean = unicode_sanitize(s, n, &m);
	int rc = clean && cJSON_AddStringToObject(o, key, clean) ? 0 : -1;
	free(clean);
	return rc;
}

static const char *const role_names[] = {"system", "user", "assistant", "tool"};

static cJSON *
message(const struct tok_msg *m)
{
	cJSON *o = cJSON_CreateObject();
	if (!o || !cJSON_AddStringToObject(o, "role", role_names[m->role]) ||
	    add_text(o, "content", m->content ? m->content : ""))
		goto fail;
	if (m->reasoning && m->reasoning[0] && add_text(o, "reasoning_content", m->reasoning))
		goto fail;
	if (m->call_id && m->call_id[0] && add_text(o, "tool_call_id", m->call_id))
		goto fail;
	if (m->name && m->name[0] && add_text(o, "name", m->name))
		goto fail;
	if (m->n_calls) {
		cJSON *calls = cJSON_AddArrayToObject(o, "tool_calls");
		if (!calls)
			goto fail;
		for (size_t i = 0; i < m->n_calls; i++) {
			const struct tok_call *c = &m->calls[i];
			cJSON *call = cJSON_CreateObject(), *fn;
			if (!call || !cJSON_AddItemToArray(calls, call))
				goto fail;
			if ((c->id && c->id[0] && add_text(call, "id", c->id)) ||
			    !cJSON_AddStringToObject(call, "type", "function") ||
			    !(fn = cJSON_AddObjectToObject(call, "function")) ||
			    add_text(fn, "name", c->name ? c->name : ""))
				goto fail;
			// the arguments as the object they spell (templates tojson
			// them or walk them), else as the text
			const char *a = c->arguments ? c->arguments : "";
			cJSON *parsed = unicode_valid(a, strlen(a)) ? cJSON_Parse(a) : NULL;
			int object = cJSON_IsObject(parsed);
			cJSON_Delete(parsed);
			if (object ? !cJSON_AddItemToObject(fn, "arguments", cJSON_CreateRaw(a))
			           : add_text(fn, "arguments", a))
				goto fail;
		}
	}
	return o;
fail:
	cJSON_Delete(o);
	return NULL;
}

static void
cb_member_text(struct sbuf *b, const char *key, const char *s, size_t n)
{
	char *clean = unicode_sanitize(s, n, &n);
	cJSON *j = clean ? cJSON_CreateString(clean) : NULL;
	char *t = j ? cJSON_PrintUnformatted(j) : NULL;
	if (!t)
		b->oom = 1;
	sbuf_str(b, "\"");
	sbuf_str(b, key);
	sbuf_str(b, "\": ");
	if (t)
		sbuf_str(b, t);
	sbuf_str(b, ", ");
	free(t);
	cJSON_Delete(j);
	free(clean);
}

static int
blank(const char *s)
{
	if (!s)
		return 1;
	while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
		s++;
	return !*s;
}

static int
build_context(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
              const struct tok_chat_opts *o, struct sbuf *b, char *err)
{
	const char *tools = o && !blank(o->tools) ? o->tools : NULL;
	const char *kwargs = o && !blank(o->kwargs) ? o->kwargs : NULL;
	if (tools) {
		cJSON *j = cJSON_Parse(tools);
		int ok = cJSON_IsArray(j);
		cJSON_Delete(j);
		if (!ok)
			return ad_err(err, "chat: tools is not a JSON array");
	}
	const char *kw_from = NULL, *kw_to = NULL;
	if (kwargs) {
		cJSON *j = cJSON_Parse(kwargs);
		if (!cJSON_IsObject(j)) {
			cJSON_Delete(j);
			return ad_err(err, "chat: chat_template_kwargs is not a JSON object");
		}
		static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt"};
		for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
			if (cJSON_GetObjectItemCaseSensitive(j, reserved[i])) {
				cJSON_Delete(j);
				return ad_err(err, "chat: chat_template_kwargs may not set '%s'", reserved[i]);
			}
		int empty = cJSON_GetArraySize(j) == 0;
		cJSON_Delete(j);
		if (!empty) { // the members, as the caller wrote them
			kw_from = strchr(kwargs, '{') + 1;
			kw_to = strrchr(kwargs, '}');
		}
	}
	cJSON *arr = cJSON_CreateArray();
	for (size_t i = 0; arr && i < n; i++) {
		if ((unsigned)msgs[i].role > TOK_ROLE_TOOL) {
			cJSON_Delete(arr);
			return ad_err(err, "chat: message %zu has an unknown role %d", i, (int)msgs[i].role);
		}
		cJSON *m = message(&msgs[i]);
		if (!m || !cJSON_AddItemToArray(arr, m)) {
			cJSON_Delete(m);
			cJSON_Delete(arr);
			arr = NULL;
		}
	}
	char *mj = arr ? cJSON_PrintUnformatted(arr) : NULL;
	cJSON_Delete(arr);
	if (!mj)
		return ad_err(err, "chat: out of memory");
	sbuf_str(b, "{");
	size_t len;
	const char *p;
	if (t->bos >= 0 && (p = tok_piece(t, t->bos, &len)))
		cb_member_text(b, "bos_token", p, len);
	if (t->eos >= 0 && (p = tok_piece(t, t->eos, &len)))
		cb_member_text(b, "eos_token", p, len);
	if (kw_from) {
		sbuf_add(b, kw_from, (size_t)(kw_to - kw_from));
		sbuf_str(b, ", ");
	}
	sbuf_str(b, "\"tools\": ");
	sbuf_str(b, tools ? tools : "null");
	sbuf_str(b, ", \"documents\": null, \"add_generation_prompt\": ");
	sbuf_str(b, add_generation_prompt ? "true" : "false");
	if (o && o->enable_thinking >= 0)
		sbuf_str(b, o->enable_thinking ? ", \"enable_thinking\": true" : ", \"enable_thinking\": false");
	sbuf_str(b, ", \"messages\": ");
	sbuf_str(b, mj);
	sbuf_str(b, "}");
	free(mj);
	return b->oom ? ad_err(err, "chat: out of memory") : 0;
}

// --- rendering ---------------------------------------------------------------------

// one log line per reason a conversation is rendered natively
static void
log_fallback(const char *why, const char *family)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	static unsigned long seen[32];
	static int n_seen;
	unsigned long h = 5381;
	for (const char *s = why; *s; s++)
		h = h * 33 + (unsigned char)*s;
	pthread_mutex_lock(&mu);
	int known = 0;
	for (int i = 0; i < n_seen; i++)
		known |= seen[i] == h;
	if (!known && n_seen < 32)
		seen[n_seen++] = h;
	pthread_mutex_unlock(&mu);
	if (!known)
		ad_warn("chat: %s; rendering with the built-in %s format", why, family);
}

int
tok_chat_render(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
                const struct tok_chat_opts *o, char **out, const char **how, char *err)
{
	*out = NULL;
	const char *family = tok_chat_family_name(t->chat);
	if (how)
		*how = family;
	const struct jinja_tmpl *tmpl = o && !blank(o->tools) && t->jinja_tool_use ? t->jinja_tool_use : t->jinja;
	if (!tmpl || (o && o->native)) {
		if (!tmpl && t->chat_template)
			log_fallback(t->jinja_why, family);
		return tok_chat_native(t, msgs, n, add_generation_prompt, out, err);
	}
	struct sbuf ctx = {0};
	if (build_context(t, msgs, n, add_generation_prompt, o, &ctx, err) != 0) {
		free(ctx.s);
		return -1;
	}
	// bounds: far beyond any real template, short of what would hurt
	size_t big = ctx.n > ((size_t)1 << 26) ? (size_t)1 << 26 : ctx.n;
	struct jinja_limits lim = {.max_output = 4 * big + ((size_t)1 << 20),
	                           .max_memory = 16 * big + ((size_t)64 << 20),
	                           .timeout_ms = 2000};
	// ANEDVD_TEMPLATE_NOW=<seconds since the epoch> fixes strftime_now's
	// clock (in UTC), for prompts that must not change from day to day
	const char *now = getenv("ANEDVD_TEMPLATE_NOW");
	if (now && *now)
		lim.now = strtoll(now, NULL, 10);
	char jerr[AD_ERRLEN];
	size_t len = 0;
	enum jinja_status st = jinja_render(tmpl, ctx.s, ctx.n, &lim, out, &len, jerr);
	free(ctx.s);
	if (st == JINJA_RAISED)
		return ad_err(err, "chat template: %s", jerr);
	if (st == JINJA_INPUT) // the tools or kwargs
		return ad_err(err, "chat: %s", jerr);
	if (st != JINJA_OK) {
		char why[AD_ERRLEN];
		snprintf(why, sizeof why, "the chat template failed (%s: %.300s)", jinja_status_name(st), jerr);
		log_fallback(why, family);
		return tok_chat_native(t, msgs, n, add_generation_prompt, out, err);
	}
	// the encoder adds the BOS (and EOS) itself
	const char *p;
	size_t k;
	if (t->add_bos && t->bos >= 0 && (p = tok_piece(t, t->bos, &k)) && k && len >= k && !memcmp(*out, p, k)) {
		memmove(*out, *out + k, len - k + 1);
		len -= k;
	}
	if (t->add_eos && t->eos >= 0 && (p = tok_piece(t, t->eos, &k)) && k && len >= k &&
	    !memcmp(*out + len - k, p, k))
		(*out)[len -= k] = 0;
	if (how)
		*how = "jinja";
	return 0;
}

int
tok_apply_chat(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt, char **out,
               char *err)
{
	struct tok_chat_opts o = {.enable_thinking = -1};
	return tok_chat_render(t, msgs, n, add_generation_prompt, &o, out, NULL, err);
}
