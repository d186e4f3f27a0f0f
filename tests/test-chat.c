// test-chat - chat prompts through tok_chat_render (tokenizer.h), the path
// the tokenizer service takes, against Python's jinja2.
//
// For every real template of tests/data/jinja/templates, a tokenizer that
// carries it (a small SentencePiece vocabulary whose BOS and EOS are the
// "<s>" and "</s>" of the judge's contexts, add_bos off so that nothing is
// stripped) renders each conversation of tests/data/jinja/contexts.json,
// turned into what the service gets: tok_msg turns with tool calls
// (arguments as JSON text), tool results and reasoning, the tools as JSON
// text, enable_thinking, and the other variables as chat_template_kwargs.
// Where jinja2 rendered, the bytes must be the same (so the service builds
// the very context the judge used); where the template raised, the error
// must carry its message; where jinja2 failed otherwise, the built-in
// renderer takes over. Then the rules around the template: template
// selection (tool_use), BOS/EOS stripping, fallback, bad tools and kwargs.
#include <cjson/cJSON.h>
#include <dirent.h>

#include "gguf.h"
#include "jinja.h"
#include "t.h"
#include "tokenizer.h"

static cJSON *
load_json(const char *path)
{
	size_t n;
	char *s = t_read_file(path, &n);
	cJSON *j = s ? cJSON_ParseWithLength(s, n) : NULL;
	free(s);
	return j;
}

// a SentencePiece vocabulary with <s> and </s>, bytes, a few pieces, and
// the given templates (tool_use may be NULL)
static struct tokenizer *
with_template(const char *tmpl, const char *tool_use, int add_bos)
{
	static const char *fixed[] = {
		"<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "\xe2\x96\x81", "a", "b"};
	static const int32_t fixed_type[] = {2, 3, 3, 3, 3, 4, 4, 1, 1, 1};
	enum { NF = sizeof fixed / sizeof fixed[0] };
	const char *toks[NF + 256];
	char bytes[256][8];
	int32_t types[NF + 256];
	float scores[NF + 256];
	for (int i = 0; i < NF; i++) {
		toks[i] = fixed[i];
		types[i] = fixed_type[i];
		scores[i] = (float)-i;
	}
	for (int b = 0; b < 256; b++) {
		snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
		toks[NF + b] = bytes[b];
		types[NF + b] = 6;
		scores[NF + b] = 0;
	}
	struct gguf_writer *w = gguf_writer_new();
	gguf_writer_str(w, "tokenizer.ggml.model", "llama");
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, NF + 256);
	gguf_writer_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types, NF + 256);
	gguf_writer_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores, NF + 256);
	gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", 1);
	gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", 2);
	gguf_writer_bool(w, "tokenizer.ggml.add_bos_token", add_bos);
	if (tmpl)
		gguf_writer_str(w, "tokenizer.chat_template", tmpl);
	if (tool_use)
		gguf_writer_str(w, "tokenizer.chat_template.tool_use", tool_use);
	size_t n;
	void *buf = gguf_writer_bytes(w, &n);
	gguf_writer_free(w);
	char err[AD_ERRLEN];
	struct gguf *g = buf ? gguf_open_memory(buf, n, err) : NULL;
	struct tokenizer *t = g ? tok_load_gguf(g, err) : NULL;
	gguf_close(g);
	free(buf);
	return t;
}

// a judge context as the service gets it; everything it allocates lives in
// strs (freed by conv_free)
struct conv {
	struct tok_msg msgs[16];
	struct tok_call calls[16];
	size_t n;
	int agp;
	struct tok_chat_opts o;
	char *strs[64];
	int ns;
};

static char *
keep(struct conv *c, char *s)
{
	if (s && c->ns < 64)
		c->strs[c->ns++] = s;
	return s;
}

static void
conv_free(struct conv *c)
{
	for (int i = 0; i < c->ns; i++)
		free(c->strs[i]);
}

static const char *
str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int
to_conv(const cJSON *ctx, struct conv *c)
{
	memset(c, 0, sizeof *c);
	c->o.enable_thinking = -1;
	cJSON *extra = cJSON_CreateObject();
	const cJSON *it;
	size_t nc = 0;
	cJSON_ArrayForEach(it, ctx)
	{
		const char *k = it->string;
		if (!strcmp(k, "messages")) {
			const cJSON *m;
			cJSON_ArrayForEach(m, it)
			{
				struct tok_msg *tm = &c->msgs[c->n++];
				const char *role = str(m, "role");
				tm->role = !strcmp(role, "system")      ? TOK_ROLE_SYSTEM
				           : !strcmp(role, "user")      ? TOK_ROLE_USER
				           : !strcmp(role, "assistant") ? TOK_ROLE_ASSISTANT
				                                        : TOK_ROLE_TOOL;
				tm->content = str(m, "content");
				tm->reasoning = str(m, "reasoning_content");
				tm->call_id = str(m, "tool_call_id");
				tm->name = str(m, "name");
				const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *tc;
				tm->calls = c->calls + nc;
				cJSON_ArrayForEach(tc, calls)
				{
					const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
					c->calls[nc++] = (struct tok_call){
						str(tc, "id"), str(fn, "name"),
						keep(c, cJSON_PrintUnformatted(
								cJSON_GetObjectItemCaseSensitive(fn, "arguments")))};
					tm->n_calls++;
				}
			}
		} else if (!strcmp(k, "tools")) {
			if (!cJSON_IsNull(it))
				c->o.tools = keep(c, cJSON_PrintUnformatted(it));
		} else if (!strcmp(k, "add_generation_prompt")) {
			c->agp = cJSON_IsTrue(it);
		} else if (!strcmp(k, "enable_thinking")) {
			c->o.enable_thinking = cJSON_IsTrue(it);
		} else if (strcmp(k, "bos_token") && strcmp(k, "eos_token") && strcmp(k, "documents")) {
			cJSON_AddItemToObject(extra, k, cJSON_Duplicate(it, 1));
		}
	}
	if (cJSON_GetArraySize(extra))
		c->o.kwargs = keep(c, cJSON_PrintUnformatted(extra));
	cJSON_Delete(extra);
	return 0;
}

static void
test_templates(void)
{
	cJSON *ctxs = load_json(T_DATA "/jinja/contexts.json");
	REQUIRE(ctxs);
	DIR *d = opendir(T_DATA "/jinja/templates");
	REQUIRE(d);
	struct dirent *e;
	int same = 0, raised = 0, fell_back = 0, differ = 0, ntmpl = 0;
	while ((e = readdir(d))) {
		size_t nl = strlen(e->d_name);
		if (nl < 7 || strcmp(e->d_name + nl - 6, ".jinja"))
			continue;
		char path[512], epath[512];
		snprintf(path, sizeof path, "%s/jinja/templates/%s", T_DATA, e->d_name);
		snprintf(epath, sizeof epath, "%s/jinja/expected/%.*s.json", T_DATA, (int)(nl - 6), e->d_name);
		size_t n;
		char *src = t_read_file(path, &n);
		cJSON *exp = load_json(epath);
		struct tokenizer *t = src ? with_template(src, NULL, 0) : NULL;
		CHECK(src && exp && t, "%s", e->d_name);
		const cJSON *c, *cases = exp ? cJSON_GetObjectItemCaseSensitive(exp, "cases") : NULL;
		cJSON_ArrayForEach(c, cases)
		{
			if (!t)
				break;
			const char *cname = str(c, "context"), *want = str(c, "output"), *jerr = str(c, "error");
			struct conv cv;
			to_conv(cJSON_GetObjectItemCaseSensitive(ctxs, cname), &cv);
			char *out = NULL, err[AD_ERRLEN] = "";
			const char *how = NULL;
			int rc = tok_chat_render(t, cv.msgs, cv.n, cv.agp, &cv.o, &out, &how, err);
			if (want) {
				int ok = rc == 0 && !strcmp(how, "jinja") && !strcmp(out, want);
				CHECK(ok, "%s × %s: %s", e->d_name, cname, rc ? err : how);
				same += ok;
				differ += !ok;
			} else if (!strncmp(jerr, "raised: ", 8)) {
				int ok = rc == -1 && !out && !strncmp(err, "chat template: ", 15) &&
				         !strcmp(err + 15, jerr + 8);
				CHECK(ok, "%s × %s: %s", e->d_name, cname, err);
				raised += ok;
			} else {
				// jinja2 fails: the built-in renderer answers
				int ok = rc == 0 && out && strcmp(how, "jinja");
				CHECK(ok, "%s × %s: %s", e->d_name, cname, err);
				fell_back += ok;
			}
			free(out);
			conv_free(&cv);
		}
		ntmpl++;
		tok_free(t);
		cJSON_Delete(exp);
		free(src);
	}
	closedir(d);
	cJSON_Delete(ctxs);
	printf("service path (tok_chat_render) vs jinja2: %d templates: %d identical prompts, %d raise_exception "
	       "messages, %d fallbacks where jinja2 fails too, %d differences\n",
	       ntmpl, same, raised, fell_back, differ);
	CHECK(same >= 900, "%d", same);
	CHECK(differ == 0);
}

static void
test_rules(void)
{
	char *out, err[AD_ERRLEN];
	const char *how;
	struct tok_msg u[] = {{.role = TOK_ROLE_USER, .content = "hi"}};
	struct tok_chat_opts o = {.enable_thinking = -1};
	// the BOS text goes when the encoder adds it; so does a trailing EOS
	struct tokenizer *t = with_template("{{ bos_token }}[{{ messages[0].content }}]{{ eos_token }}", NULL, 1);
	REQUIRE(t);
	REQUIRE(tok_chat_render(t, u, 1, 1, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(out, "[hi]</s>") && !strcmp(how, "jinja"), "%s", out);
	free(out);
	tok_free(t);
	t = with_template("{{ bos_token }}[{{ messages[0].content }}]", NULL, 0);
	REQUIRE(tok_chat_render(t, u, 1, 1, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(out, "<s>[hi]"), "%s", out);
	free(out);
	// tools, kwargs and thinking reach the template; kwargs cannot set messages
	tok_free(t);
	t = with_template(
		"{{ tools|length }} {{ tools[0].function.name }} {{ x }} {{ y|tojson }} {{ enable_thinking }} "
		"{{ add_generation_prompt }}",
		NULL, 0);
	o.tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]";
	o.kwargs = "{\"x\": 1.0, \"y\": [1, {\"a\": null}], \"enable_thinking\": true}";
	o.enable_thinking = 0;
	REQUIRE(tok_chat_render(t, u, 1, 0, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(out, "1 f 1.0 [1, {\"a\": null}] False False"), "%s", out);
	free(out);
	o.enable_thinking = -1; // the kwargs' value then
	REQUIRE(tok_chat_render(t, u, 1, 0, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(out, "1 f 1.0 [1, {\"a\": null}] True False"), "%s", out);
	free(out);
	o.kwargs = "{\"messages\": []}";
	CHECK(tok_chat_render(t, u, 1, 0, &o, &out, &how, err) == -1 && strstr(err, "'messages'"), "%s", err);
	o.kwargs = "[1]";
	CHECK(tok_chat_render(t, u, 1, 0, &o, &out, &how, err) == -1 && strstr(err, "chat_template_kwargs"), "%s", err);
	o.kwargs = NULL;
	o.tools = "{\"type\": \"function\"}";
	CHECK(tok_chat_render(t, u, 1, 0, &o, &out, &how, err) == -1 && strstr(err, "tools"), "%s", err);
	o.tools = NULL;
	// the tool_use variant when tools are given
	tok_free(t);
	t = with_template("default", "tool_use {{ tools|length }}", 0);
	REQUIRE(tok_chat_render(t, u, 1, 1, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(out, "default"), "%s", out);
	free(out);
	o.tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]";
	REQUIRE(tok_chat_render(t, u, 1, 1, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(out, "tool_use 1"), "%s", out);
	free(out);
	o.tools = NULL;
	// a template that raises: the request fails with its message
	tok_free(t);
	t = with_template("{% if messages[0].role != 'system' %}{{ raise_exception('System first!') }}{% endif %}",
	                  NULL, 0);
	CHECK(tok_chat_render(t, u, 1, 1, &o, &out, &how, err) == -1 && !strcmp(err, "chat template: System first!"),
	      "%s", err);
	// one that fails otherwise, or cannot be parsed: the family's renderer
	tok_free(t);
	t = with_template("<|im_start|>{{ messages[0].content + 1 }}", NULL, 0);
	REQUIRE(tok_chat_render(t, u, 1, 1, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(how, "chatml") && !strcmp(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"),
	      "%s %s", how, out);
	free(out);
	const char *why;
	CHECK(tok_chat_jinja(t, &why) == 1 && !*why);
	tok_free(t);
	t = with_template("<|im_start|>{% include 'x' %}", NULL, 0);
	CHECK(tok_chat_jinja(t, &why) == 0 && strstr(why, "include"), "%s", why);
	REQUIRE(tok_chat_render(t, u, 1, 1, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(how, "chatml"), "%s", how);
	free(out);
	// native asked for
	tok_free(t);
	t = with_template("<|im_start|>{{ 'jinja' }}", NULL, 0);
	o.native = 1;
	REQUIRE(tok_chat_render(t, u, 1, 1, &o, &out, &how, err) == 0, "%s", err);
	CHECK(!strcmp(how, "chatml"), "%s", how);
	free(out);
	tok_free(t);
	// no template at all
	t = with_template(NULL, NULL, 0);
	CHECK(tok_chat_jinja(t, &why) == 0 && strstr(why, "no chat template"), "%s", why);
	tok_free(t);
}

int
main(void)
{
	setenv("ANEDVD_TEMPLATE_NOW", "1767225600", 1); // the judge's strftime_now
	T_RUN(test_templates);
	T_RUN(test_rules);
	return t_done();
}
