// test-fe-tools.c - the frontend's tool-call machinery without a server.
//
// The scanner finds each call's name and the exact bytes of its arguments
// in every markup a grammar can produce (generic, hermes, llama3, mistral),
// fed whole or a byte at a time, with keys called "name" inside the
// arguments. fe_json_close makes a cut call's arguments whole JSON. The
// grammars fe_gram_build writes compile and, run by the grammar matcher,
// accept the markup of each format for the declared tools and refuse
// undeclared names and arguments outside the schema; tool_choice named,
// required and auto (lazy, with its trigger words or token) each build
// what they should.
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"
#include "gbnf.h"
#include "grammar.h"
#include "t.h"

// --- the scanner -----------------------------------------------------------------

struct got {
	char names[8][72];
	char args[8][512];
	int n, ended;
};

static void
g_start(void *ctx, const char *name)
{
	struct got *g = ctx;
	if (g->n < 8)
		snprintf(g->names[g->n++], 72, "%s", name);
}

static void
g_args(void *ctx, const char *s, size_t n)
{
	struct got *g = ctx;
	if (g->n == 0)
		return;
	size_t l = strlen(g->args[g->n - 1]);
	if (l + n < 512) {
		memcpy(g->args[g->n - 1] + l, s, n);
		g->args[g->n - 1][l + n] = 0;
	}
}

static void
g_end(void *ctx)
{
	((struct got *)ctx)->ended++;
}

static void
scan(const char *text, int bytewise, struct got *g)
{
	memset(g, 0, sizeof *g);
	struct fe_scan s;
	fe_scan_init(&s);
	struct fe_scan_sink k = {g_start, g_args, g_end, g};
	if (bytewise)
		for (const char *p = text; *p; p++)
			fe_scan_push(&s, p, 1, &k);
	else
		fe_scan_push(&s, text, strlen(text), &k);
}

static void
expect_calls(const char *text, int n, const char *const *names, const char *const *args)
{
	for (int bw = 0; bw < 2; bw++) {
		struct got g;
		scan(text, bw, &g);
		CHECK(g.n == n && g.ended == n, "%s (bytewise %d): %d calls, %d ended", text, bw, g.n, g.ended);
		for (int i = 0; i < n && i < g.n; i++) {
			CHECK(!strcmp(g.names[i], names[i]), "name %d: '%s'", i, g.names[i]);
			CHECK(!strcmp(g.args[i], args[i]), "args %d: '%s', want '%s'", i, g.args[i], args[i]);
		}
	}
}

#define L(...) ((const char *const[]){__VA_ARGS__})

static void
test_scan(void)
{
	expect_calls("{\"tool_call\": {\"name\": \"f\", \"arguments\": {\"a\": \"}\\\"{\", \"b\": [1, {\"c\": 2}]}}}",
	             1, L("f"), L("{\"a\": \"}\\\"{\", \"b\": [1, {\"c\": 2}]}"));
	expect_calls(
		"{\"tool_calls\": [{\"name\":\"f\",\"arguments\":{}}, {\"name\": \"g\", \"arguments\": {\"name\": \"x\", "
		"\"arguments\": {}}}]}",
		2, L("f", "g"), L("{}", "{\"name\": \"x\", \"arguments\": {}}"));
	expect_calls("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
	             "<tool_call>\n{\"name\": \"search\", \"arguments\": {}}\n</tool_call>",
	             2, L("get_weather", "search"), L("{\"city\": \"Paris\"}", "{}"));
	expect_calls("{\"name\": \"f\", \"parameters\": {\"x\": \"y\"}}", 1, L("f"), L("{\"x\": \"y\"}"));
	expect_calls("[{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", \"arguments\": {\"y\": [2]}}]",
	             2, L("f", "g"), L("{\"x\": 1}", "{\"y\": [2]}"));
	expect_calls("{\n  \"name\" : \"f\" ,\n  \"arguments\" :\n  {\"k\": \"\\u00e9\"}\n}", 1, L("f"),
	             L("{\"k\": \"\\u00e9\"}"));
	// no name: no call
	struct got g;
	scan("{\"tool_call\": {\"arguments\": {\"a\": 1}}}", 0, &g);
	CHECK(g.n == 0, "%d", g.n);
	// cut inside the arguments: started, not ended
	scan("{\"tool_call\": {\"name\": \"f\", \"arguments\": {\"a\": [1, ", 0, &g);
	CHECK(g.n == 1 && g.ended == 0 && !strcmp(g.args[0], "{\"a\": [1, "), "'%s'", g.args[0]);
}

static void
close_case(const char *in, const char *want)
{
	char *out = fe_json_close(in, strlen(in));
	CHECK(out && !strcmp(out, want), "'%s' closed to '%s', want '%s'", in, out ? out : "(null)", want);
	cJSON *j = out ? cJSON_Parse(out) : NULL;
	CHECK(j != NULL, "'%s' is not JSON", out ? out : "");
	cJSON_Delete(j);
	free(out);
}

static void
test_json_close(void)
{
	close_case("{\"a\": 1, \"b\": [1, 2", "{\"a\": 1, \"b\": [1, 2]}");
	close_case("{\"a\": \"xy", "{}");
	close_case("{\"a\": 1, \"b\": \"xy", "{\"a\": 1}");
	close_case("{\"a\": tr", "{}");
	close_case("{\"a\": 12", "{\"a\": 12}");
	close_case("{\"a\": 1.", "{}");
	close_case("{\"a\": {\"b\": \"c\"}, \"d\"", "{\"a\": {\"b\": \"c\"}}");
	close_case("{\"a\":", "{}");
	close_case("{\"a\": [\"x\", {\"y\": true", "{\"a\": [\"x\", {\"y\": true}]}");
	close_case("", "{}");
	close_case("{\"a\": \"q\\\"", "{}");
	close_case("{\"a\": {}, ", "{\"a\": {}}");
	close_case("{\"a\": null}", "{\"a\": null}");
}

// --- the grammars -----------------------------------------------------------------------

enum { EOS = 256, TC = 257, PY = 258, NV = 259 };
static struct gram_vocab *V;

static int32_t
special(void *ctx, const char *text)
{
	(void)ctx;
	return !strcmp(text, "[TOOL_CALLS]") ? TC : !strcmp(text, "<|python_tag|>") ? PY : -1;
}

// does the grammar accept the token ids (bytes < 256, control tokens above)?
static int
accepts(const char *gtext, const int32_t *ids, size_t n, int lazy_words)
{
	char err[AD_ERRLEN];
	struct gbnf *g = NULL;
	if (gbnf_compile(gtext, strlen(gtext), NULL, NULL, NULL, &g, err)) {
		CHECK(0, "the grammar does not compile: %s\n%s", err, gtext);
		return -1;
	}
	int32_t stop = EOS;
	struct gram_opts o = {.g = g, .v = V, .stop = &stop, .n_stop = 1};
	struct gram *m = gram_new(&o, err);
	int ok = m != NULL;
	for (size_t i = 0; ok && i < n; i++)
		ok = gram_accept(m, ids[i], err) == 0;
	ok = ok && gram_can_end(m);
	(void)lazy_words;
	gram_free(m);
	gbnf_free(g);
	return ok;
}

static int
accepts_text(const char *gtext, int32_t first, const char *text)
{
	int32_t ids[2048];
	size_t n = 0;
	if (first >= 0)
		ids[n++] = first;
	for (const char *p = text; *p && n < 2048; p++)
		ids[n++] = (unsigned char)*p;
	return accepts(gtext, ids, n, 0);
}

static void
add_tools(struct fe_params *p)
{
	struct fe_bad bad;
	cJSON *a =
		cJSON_Parse("{\"name\":\"get_weather\",\"description\":\"w\",\"parameters\":{\"type\":\"object\","
	                    "\"properties\":{\"city\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\","
	                    "\"minimum\":1,\"maximum\":3}},\"required\":[\"city\"],\"additionalProperties\":false}}");
	cJSON *b = cJSON_Parse("{\"name\":\"ping\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}");
	CHECK(fe_tool_add(p, a, "t0", "parameters", 0, &bad) == 0, "%s", bad.msg);
	CHECK(fe_tool_add(p, b, "t1", "parameters", 0, &bad) == 0, "%s", bad.msg);
	cJSON_Delete(a);
	cJSON_Delete(b);
	p->parallel_tools = 1;
}

static void
test_grammars(void)
{
	char err[AD_ERRLEN];
	struct fe_params p = {0};
	add_tools(&p);
	p.tool_choice = FE_TC_REQUIRED;
	struct fe_gram gm;
	// generic, forced
	REQUIRE(fe_gram_build(&p, "generic", special, NULL, &gm, err) == 0, "%s", err);
	CHECK(!gm.lazy && gm.forced && gm.n_words == 0);
	CHECK(accepts_text(
		gm.text, -1,
		"{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"n\": 2}}}"));
	CHECK(accepts_text(gm.text, -1,
	                   "{\"tool_calls\": [{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"get_weather\", "
	                   "\"arguments\": {\"city\": \"x\"}}]}"));
	CHECK(!accepts_text(
		gm.text, -1,
		"{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"n\": 4}}}"));
	CHECK(!accepts_text(gm.text, -1, "{\"tool_call\": {\"name\": \"nope\", \"arguments\": {}}}"));
	CHECK(!accepts_text(gm.text, -1,
	                    "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {}}}")); // city required
	CHECK(!accepts_text(gm.text, -1, "Sure! {\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}"));
	fe_gram_free(&gm);
	// no parallel calls: one call only
	p.parallel_tools = 0;
	REQUIRE(fe_gram_build(&p, "generic", special, NULL, &gm, err) == 0, "%s", err);
	CHECK(!accepts_text(gm.text, -1, "{\"tool_calls\": [{\"name\": \"ping\", \"arguments\": {}}]}"));
	CHECK(accepts_text(gm.text, -1, "{\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}"));
	fe_gram_free(&gm);
	p.parallel_tools = 1;
	// named: only that tool
	p.tool_choice = FE_TC_NAMED;
	p.tool_name = strdup("ping");
	REQUIRE(fe_gram_build(&p, "hermes", special, NULL, &gm, err) == 0, "%s", err);
	CHECK(accepts_text(gm.text, -1, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
	CHECK(!accepts_text(
		gm.text, -1,
		"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>"));
	fe_gram_free(&gm);
	// auto: lazy, with the format's trigger
	p.tool_choice = FE_TC_AUTO;
	REQUIRE(fe_gram_build(&p, "hermes", special, NULL, &gm, err) == 0, "%s", err);
	CHECK(gm.lazy && !gm.forced && gm.n_words == 1 && !strcmp(gm.words[0], "<tool_call>"));
	CHECK(accepts_text(gm.text, -1,
	                   "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n"
	                   "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"x\"}}\n</tool_call>"));
	fe_gram_free(&gm);
	REQUIRE(fe_gram_build(&p, "mistral", special, NULL, &gm, err) == 0, "%s", err);
	CHECK(gm.lazy && gm.n_tokens == 1 && gm.tokens[0] == TC && gm.n_words == 0);
	CHECK(accepts_text(gm.text, TC,
	                   "[{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": "
	                   "{\"city\": \"x\"}}]"));
	CHECK(!accepts_text(gm.text, -1, "[{\"name\": \"ping\", \"arguments\": {}}]")); // the control token first
	fe_gram_free(&gm);
	REQUIRE(fe_gram_build(&p, "llama3", special, NULL, &gm, err) == 0, "%s", err);
	CHECK(gm.lazy && gm.n_tokens == 1 && gm.tokens[0] == PY && gm.n_words == 2);
	CHECK(accepts_text(gm.text, PY, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"x\", \"n\": 1}}"));
	CHECK(accepts_text(gm.text, -1, "{\"name\": \"ping\", \"parameters\": {}}"));
	CHECK(!accepts_text(gm.text, -1, "{\"name\": \"ping\", \"arguments\": {}}"));
	fe_gram_free(&gm);
	// auto beside an answer schema: calls or the answer, from the start
	p.schema = cJSON_Parse(
		"{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}},\"required\":[\"ok\"]}");
	REQUIRE(fe_gram_build(&p, "generic", special, NULL, &gm, err) == 0, "%s", err);
	CHECK(!gm.lazy && !gm.forced);
	CHECK(accepts_text(gm.text, -1, "{\"ok\": true}"));
	CHECK(accepts_text(gm.text, -1, "{\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}"));
	CHECK(!accepts_text(gm.text, -1, "{\"ok\": 1}"));
	fe_gram_free(&gm);
	// tool_choice none: the answer only
	p.tool_choice = FE_TC_NONE;
	REQUIRE(fe_gram_build(&p, "generic", special, NULL, &gm, err) == 0, "%s", err);
	CHECK(accepts_text(gm.text, -1, "{\"ok\": false}"));
	CHECK(!accepts_text(gm.text, -1, "{\"tool_call\": {\"name\": \"ping\", \"arguments\": {}}}"));
	fe_gram_free(&gm);
	fe_params_free(&p);
	// nothing asked: no grammar; a request's own grammar as given
	struct fe_params q = {0};
	REQUIRE(fe_gram_build(&q, "", special, NULL, &gm, err) == 0 && !gm.text);
	q.grammar = strdup("root ::= \"x\"");
	REQUIRE(fe_gram_build(&q, "", special, NULL, &gm, err) == 0 && gm.text && !strcmp(gm.text, q.grammar));
	fe_gram_free(&gm);
	fe_params_free(&q);
}

// what fe_tool_add refuses, naming the field
static void
test_tool_add(void)
{
	struct fe_params p = {0};
	struct fe_bad bad;
#define TOOL(json) (cJSON_Delete(s), s = cJSON_Parse(json))
	cJSON *s = NULL;
	TOOL("{\"name\":\"f\",\"parameters\":{\"type\":\"array\"}}");
	CHECK(fe_tool_add(&p, s, "tools[0]", "parameters", 0, &bad) == -1 && bad.status == 400 &&
	              !strcmp(bad.param, "tools[0].parameters") && strstr(bad.msg, "object schema"),
	      "%s", bad.msg);
	TOOL("{\"name\":\"bad name\"}");
	CHECK(fe_tool_add(&p, s, "tools[0]", "parameters", 0, &bad) == -1 && !strcmp(bad.param, "tools[0].name"));
	TOOL("{\"name\":7}");
	CHECK(fe_tool_add(&p, s, "tools[0]", "parameters", 0, &bad) == -1 && !strcmp(bad.param, "tools[0].name") &&
	              strstr(bad.msg, "must be a string"),
	      "%s", bad.msg);
	TOOL("{\"description\":\"d\"}");
	CHECK(fe_tool_add(&p, s, "tools[0]", "parameters", 0, &bad) == -1 && strstr(bad.msg, "required"));
	TOOL("{\"name\":\"f\",\"input_schema\":null}"); // Anthropic's schema is required
	CHECK(fe_tool_add(&p, s, "tools[0]", "input_schema", 1, &bad) == -1 &&
	              !strcmp(bad.param, "tools[0].input_schema") && strstr(bad.msg, "required"),
	      "%s", bad.msg);
	TOOL("{\"name\":\"f\",\"parameters\":null}");
	CHECK(fe_tool_add(&p, s, "tools[0]", "parameters", 0, &bad) == 0, "%s", bad.msg);
	CHECK(fe_tool_add(&p, s, "tools[1]", "parameters", 0, &bad) == -1 && strstr(bad.msg, "a second tool"));
	TOOL("{\"name\":\"g\",\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}}");
	CHECK(fe_tool_add(&p, s, "tools[1]", "parameters", 0, &bad) == -1 &&
	              strstr(bad.msg, "tools[1].parameters.properties.a: 'not' is not supported"),
	      "%s", bad.msg);
	cJSON_Delete(s);
#undef TOOL
	// a named choice of an unknown tool; required without tools
	struct fe_fields f = {"tools", "tool_choice", "schema", "grammar"};
	p.tool_choice = FE_TC_NAMED;
	p.tool_name = strdup("zz");
	CHECK(fe_structured_check(&p, &f, &bad) == -1 && !strcmp(bad.param, "tool_choice") && strstr(bad.msg, "'zz'"));
	fe_params_free(&p);
	struct fe_params q = {0};
	q.tool_choice = FE_TC_REQUIRED;
	CHECK(fe_structured_check(&q, &f, &bad) == -1 && strstr(bad.msg, "no tools"));
	q.tool_choice = FE_TC_NONE;
	q.grammar = strdup("root ::= (");
	CHECK(fe_structured_check(&q, &f, &bad) == -1 && !strcmp(bad.param, "grammar"), "%s", bad.msg);
	fe_params_free(&q);
}

int
main(void)
{
	static char b[256][1];
	const char *bytes[NV];
	uint32_t len[NV];
	for (int i = 0; i < 256; i++) {
		b[i][0] = (char)i;
		bytes[i] = b[i];
		len[i] = 1;
	}
	for (int i = 256; i < NV; i++)
		bytes[i] = NULL, len[i] = 0;
	char err[AD_ERRLEN];
	V = gram_vocab_new(NV, bytes, len, err);
	if (!V) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	T_RUN(test_scan);
	T_RUN(test_json_close);
	T_RUN(test_grammars);
	T_RUN(test_tool_add);
	gram_vocab_free(V);
	return t_done();
}
