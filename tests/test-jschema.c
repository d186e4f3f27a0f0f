// test-jschema.c - the JSON Schema to GBNF compiler.
//
// Each schema's grammar compiles (gbnf_compile) and, walked byte by byte by
// the grammar matcher (fast and plain twin agreeing), accepts the JSON texts
// that validate and refuses those that do not: objects with required and
// optional properties in order, additional properties that are none of the
// declared keys, arrays with prefixItems and item counts, enum, const,
// anyOf, nullable types, $ref recursion, allOf merges, string lengths and
// formats; integer bounds checked for every integer in [-2000, 2000] against
// arithmetic, number bounds on a grid of decimals, dates on every day of
// two years. Unsupported keywords are refused with a message naming the
// keyword and its path. (tests/node/jschema.test.mjs checks random texts of
// these grammars with ajv.)
#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"
#include "grammar.h"
#include "jschema.h"
#include "t.h"

enum { BYTE_EOS = 256, BYTE_N = 257 };
static struct gram_vocab *V;

static struct gbnf *
schema_grammar(const char *schema, char **text)
{
	char err[AD_ERRLEN] = "";
	cJSON *s = cJSON_Parse(schema);
	CHECK(s != NULL, "bad test schema %s", schema);
	size_t n = 0;
	char *t = s ? jsg_schema_gbnf(s, "schema", &n, err) : NULL;
	cJSON_Delete(s);
	CHECK(t != NULL, "%s: %s", schema, err);
	struct gbnf *g = NULL;
	if (t && gbnf_compile(t, n, NULL, NULL, NULL, &g, err))
		CHECK(0, "%s: the grammar does not compile: %s\n%s", schema, err, t);
	if (text)
		*text = t;
	else
		free(t);
	return g;
}

static int
accepts(const struct gbnf *g, const char *s)
{
	int verdict[2];
	char err[AD_ERRLEN];
	for (int ref = 0; ref < 2; ref++) {
		int32_t stop = BYTE_EOS;
		struct gram_opts o = {.g = g, .v = V, .stop = &stop, .n_stop = 1, .ref = ref};
		struct gram *m = gram_new(&o, err);
		if (!m) {
			CHECK(0, "%s", err);
			return -1;
		}
		int ok = 1;
		for (const char *p = s; *p && ok; p++)
			ok = gram_accept(m, (unsigned char)*p, err) == 0;
		verdict[ref] = ok && gram_can_end(m);
		gram_free(m);
	}
	CHECK(verdict[0] == verdict[1], "fast %d ref %d on %s", verdict[0], verdict[1], s);
	return verdict[0];
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

static void
expect(const char *schema, const char *const *yes, const char *const *no)
{
	char *text = NULL;
	struct gbnf *g = schema_grammar(schema, &text);
	if (!g) {
		free(text);
		return;
	}
	for (; yes && *yes; yes++)
		CHECK(accepts(g, *yes) == 1, "%s should accept %s\n%s", schema, *yes, text);
	for (; no && *no; no++)
		CHECK(accepts(g, *no) == 0, "%s should reject %s\n%s", schema, *no, text);
	gbnf_free(g);
	free(text);
}

static void
refused(const char *schema, const char *want)
{
	char err[AD_ERRLEN] = "";
	cJSON *s = cJSON_Parse(schema);
	REQUIRE(s, "bad test schema %s", schema);
	char *t = jsg_schema_gbnf(s, "schema", NULL, err);
	cJSON_Delete(s);
	CHECK(!t && strstr(err, want), "%s: '%s', want '%s'", schema, t ? "accepted" : err, want);
	free(t);
}

static void
test_types(void)
{
	expect("{\"type\":\"string\"}", L("\"\"", "\"a b\"", "\"\\u00e9\\n\"", "\"\xc3\xa9\""), L("a", "\"\n\"", "1"));
	expect("{\"type\":\"integer\"}", L("0", "-12", "123456789012345"), L("1.5", "01", "-", "1e3", "\"1\""));
	expect("{\"type\":\"number\"}", L("0", "-1.5", "2e10", "3.25E-2"), L("1.", ".5", "+1", "NaN"));
	expect("{\"type\":\"boolean\"}", L("true", "false"), L("True", "1"));
	expect("{\"type\":\"null\"}", L("null"), L("nil", ""));
	expect("{\"type\":[\"string\",\"null\"]}", L("\"x\"", "null"), L("1"));
	expect("{\"type\":\"integer\",\"nullable\":true}", L("5", "null"), L("\"5\""));
	expect("{}", L("1", "\"x\"", "{\"a\": [1, {\"b\": null}]}", "[]", "true"), L("", "{a}"));
	expect("true", L("[1, 2]"), NULL);
	expect("{\"enum\":[\"red\",\"green\",3,null,{\"a\":1}]}", L("\"red\"", "\"green\"", "3", "null", "{\"a\":1}"),
	       L("\"blue\"", "4", "{\"a\": 1}"));
	expect("{\"const\":\"x\\\"y\"}", L("\"x\\\"y\""), L("\"xy\""));
	expect("{\"const\":null}", L("null"), L("0"));
	expect("{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}", L("7", "\"ab\""),
	       L("\"abc\"", "true"));
	expect("{\"oneOf\":[{\"const\":1},{\"const\":2}],\"description\":\"one or two\"}", L("1", "2"), L("3"));
}

static void
test_objects(void)
{
	const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
			"\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}";
	expect(s,
	       L("{\"b\": \"x\"}", "{\"a\": 1, \"b\": \"x\"}", "{\"a\":1,\"b\":\"x\",\"c\":true}",
	         "{\"b\": \"x\", \"c\": false}", "{\n  \"a\": 1,\n  \"b\": \"\"\n}", "{ \"b\": \"x\" }"),
	       L("{}", "{\"a\": 1}", "{\"b\": \"x\", \"a\": 1}", "{\"b\": \"x\", \"d\": 1}", "{\"b\": \"x\",}",
	         "{\"b\"  : \"x\"}"));
	// every property optional
	expect("{\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}}}",
	       L("{}", "{\"a\": 1}", "{\"b\": 2}", "{\"a\": 1, \"b\": 2}"), L("{\"b\": 2, \"a\": 1}", "{,}"));
	// additional properties: keys other than the declared ones
	s = "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},\"idx\":{\"type\":\"integer\"}},"
	    "\"additionalProperties\":{\"type\":\"string\"}}";
	expect(s,
	       L("{}", "{\"id\": 1}", "{\"id\": 1, \"name\": \"x\"}", "{\"i\": \"x\"}", "{\"ids\": \"x\"}",
	         "{\"idxy\": \"x\", \"\": \"e\"}", "{\"\xc3\xa9\": \"x\"}"),
	       L("{\"id\": \"x\"}", "{\"id\": 1, \"id\": \"x\"}", "{\"idx\": \"x\"}", "{\"name\": 1}",
	         "{\"i\\u0064\": \"x\"}"));
	expect("{\"type\":\"object\",\"additionalProperties\":false}", L("{}", "{ }"), L("{\"a\": 1}"));
	expect("{\"type\":\"object\"}", L("{}", "{\"a\": [true]}"), L("[]"));
	// a required key with no schema: any value
	expect("{\"type\":\"object\",\"required\":[\"k\"]}", L("{\"k\": null}", "{\"k\": {\"x\": 1}}"), L("{}"));
	// a key that needs escaping in JSON
	expect("{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"const\":1}},\"required\":[\"a\\\"b\"]}",
	       L("{\"a\\\"b\": 1}"), L("{\"a\"b\": 1}"));
	// allOf of objects: one object with every property
	expect("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
	       "{\"$ref\":\"#/$defs/B\"}],\"$defs\":{\"B\":{\"type\":\"object\",\"properties\":{\"b\":{\"type\":"
	       "\"string\"}},\"required\":[\"b\"]}}}",
	       L("{\"a\": 1, \"b\": \"x\"}"), L("{\"a\": 1}", "{\"b\": \"x\"}"));
}

static void
test_arrays(void)
{
	expect("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}",
	       L("[1, 2]", "[1,2,3]", "[ 1, 2 ]"), L("[]", "[1]", "[1, 2, 3, 4]", "[1, \"x\"]"));
	expect("{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}", L("[]", "[1]", "[1, 2, 3, 4, 5, 6]"),
	       L("[1,]", "[,1]"));
	expect("{\"type\":\"array\",\"maxItems\":0}", L("[]"), L("[1]"));
	expect("{\"type\":\"array\",\"minItems\":1}", L("[1]", "[\"a\", {}]"), L("[]"));
	expect("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"items\":false}",
	       L("[]", "[\"a\"]", "[\"a\", 1]"), L("[1]", "[\"a\", 1, 2]"));
	expect("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"boolean\"},"
	       "\"minItems\":2}",
	       L("[\"a\", true]", "[\"a\", true, false]"), L("[\"a\"]", "[\"a\", 1]"));
	expect("{\"type\":\"array\",\"uniqueItems\":false}", L("[1, 1]"), NULL);
}

static void
test_refs(void)
{
	// a linked list through $ref, and a reference to the root
	expect("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"next\":{"
	       "\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":"
	       "\"#/$defs/node\"}",
	       L("{\"v\": 1, \"next\": null}", "{\"v\": 1, \"next\": {\"v\": 2, \"next\": null}}"),
	       L("{\"v\": 1}", "{\"v\": 1, \"next\": {\"v\": 2}}"));
	expect("{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}",
	       L("{}", "{\"kids\": [{}, {\"kids\": []}]}"), L("{\"kids\": [1]}"));
	expect("{\"definitions\":{\"x\":{\"type\":\"boolean\"}},\"properties\":{\"a\":{\"$ref\":\"#/definitions/x\"}},"
	       "\"required\":[\"a\"]}",
	       L("{\"a\": true}"), L("{\"a\": 1}"));
}

static void
test_strings(void)
{
	expect("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
	       L("\"ab\"", "\"abc\"", "\"\\n\\t\"", "\"\xe4\xb8\xad\xe6\x96\x87\""), L("\"a\"", "\"abcd\""));
	expect("{\"type\":\"string\",\"format\":\"uuid\"}", L("\"0f8fad5b-d9cb-469f-a165-70867728950e\""),
	       L("\"0f8fad5b-d9cb-469f-a165\"", "\"0F8FAD5B-D9CB-469F-A165-70867728950E\""));
	expect("{\"type\":\"string\",\"format\":\"date-time\"}",
	       L("\"2024-02-28T13:45:00Z\"", "\"2023-12-31T23:59:59.123+05:30\""),
	       L("\"2024-02-30T13:45:00Z\"", "\"2024-02-28 13:45:00Z\"", "\"2024-02-28T24:00:00Z\""));
	expect("{\"type\":\"string\",\"format\":\"time\"}", L("\"08:30:00Z\""), L("\"8:30:00Z\""));
	expect("{\"type\":\"string\",\"format\":\"email\"}", L("\"a.b+c@example.com\""), L("\"@x.com\"", "\"a@b\""));
	expect("{\"type\":\"string\",\"format\":\"ipv4\"}", L("\"192.168.0.1\"", "\"255.255.255.255\"", "\"0.0.0.0\""),
	       L("\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\""));
	expect("{\"type\":\"string\",\"format\":\"uri\"}", L("\"https://example.com/a/b\""), L("\"example.com\""));
	expect("{\"type\":\"string\",\"format\":\"hostname\"}", L("\"example.com\"", "\"localhost\""), L("\"a b\""));
	// every day of 2023 and 2024: the real ones pass but 29 February (left out), the others fail
	struct gbnf *g = schema_grammar("{\"type\":\"string\",\"format\":\"date\"}", NULL);
	static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int bad = 0;
	for (int y = 2023; g && y <= 2024; y++)
		for (int m = 1; m <= 12; m++)
			for (int d = 1; d <= 31; d++) {
				char s[32];
				snprintf(s, sizeof s, "\"%04d-%02d-%02d\"", y, m, d);
				bad += accepts(g, s) != (d <= days[m - 1]);
			}
	CHECK(bad == 0, "%d dates judged wrong", bad);
	gbnf_free(g);
}

// every integer in [-2000, 2000] against the bounds, for several bounds
static void
test_integer_bounds(void)
{
	static const char *const bounds[] = {
		"\"minimum\":-37,\"maximum\":1234",
		"\"minimum\":5",
		"\"maximum\":-12",
		"\"exclusiveMinimum\":0",
		"\"exclusiveMinimum\":-10,\"exclusiveMaximum\":10",
		"\"minimum\":100,\"maximum\":100",
		"\"minimum\":0,\"maximum\":999",
		"\"minimum\":-1999,\"maximum\":-1000",
		"\"maximum\":0",
		"\"minimum\":9,\"maximum\":11",
		"\"minimum\":1.5,\"maximum\":7.9",
	};
	for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
		char schema[256];
		snprintf(schema, sizeof schema, "{\"type\":\"integer\",%s}", bounds[b]);
		cJSON *sj = cJSON_Parse(schema);
		cJSON *mn = cJSON_GetObjectItem(sj, "minimum"), *mx = cJSON_GetObjectItem(sj, "maximum");
		cJSON *xmn = cJSON_GetObjectItem(sj, "exclusiveMinimum"),
		      *xmx = cJSON_GetObjectItem(sj, "exclusiveMaximum");
		struct gbnf *g = schema_grammar(schema, NULL);
		int wrong = 0;
		for (int x = -2000; g && x <= 2000; x++) {
			int in = (!mn || x >= mn->valuedouble) && (!mx || x <= mx->valuedouble) &&
			         (!xmn || x > xmn->valuedouble) && (!xmx || x < xmx->valuedouble);
			char s[16];
			snprintf(s, sizeof s, "%d", x);
			if (accepts(g, s) != in && wrong++ < 3)
				t_note("%s: %d judged %s\n", schema, x, in ? "out" : "in");
		}
		CHECK(wrong == 0, "%s: %d wrong", schema, wrong);
		CHECK(!g || (!accepts(g, "-0") && !accepts(g, "01")), "%s: no -0 or leading zeros", schema);
		gbnf_free(g);
		cJSON_Delete(sj);
	}
	refused("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "no integer lies between");
	refused("{\"type\":\"integer\",\"minimum\":1e20}", "bounds beyond");
}

// numbers with integer bounds on a grid of decimal texts
static void
test_number_bounds(void)
{
	static const char *const bounds[] = {
		"\"minimum\":0,\"maximum\":10",
		"\"exclusiveMinimum\":0",
		"\"minimum\":-5,\"exclusiveMaximum\":3",
		"\"maximum\":-2",
		"\"exclusiveMinimum\":-3,\"exclusiveMaximum\":-1",
		"\"minimum\":7,\"maximum\":7",
	};
	static const char *const grid[] = {
		"0",     "0.0",  "0.5",  "-0.5", "1",     "1.25",   "2.999",  "3",       "3.0",
		"3.001", "-2",   "-2.0", "-2.5", "-3",    "-3.0",   "-1",     "-1.0",    "-0.999",
		"-5",    "-5.0", "-5.5", "10",   "10.0",  "10.5",   "9.99",   "7",       "7.00",
		"7.01",  "6.99", "-4.2", "11",   "123.5", "-123.5", "0.0001", "-1.0001",
	};
	for (size_t b = 0; b < sizeof bounds / sizeof bounds[0]; b++) {
		char schema[256];
		snprintf(schema, sizeof schema, "{\"type\":\"number\",%s}", bounds[b]);
		cJSON *sj = cJSON_Parse(schema);
		cJSON *mn = cJSON_GetObjectItem(sj, "minimum"), *mx = cJSON_GetObjectItem(sj, "maximum");
		cJSON *xmn = cJSON_GetObjectItem(sj, "exclusiveMinimum"),
		      *xmx = cJSON_GetObjectItem(sj, "exclusiveMaximum");
		struct gbnf *g = schema_grammar(schema, NULL);
		for (size_t i = 0; g && i < sizeof grid / sizeof grid[0]; i++) {
			double x = strtod(grid[i], NULL);
			int in = (!mn || x >= mn->valuedouble) && (!mx || x <= mx->valuedouble) &&
			         (!xmn || x > xmn->valuedouble) && (!xmx || x < xmx->valuedouble);
			CHECK(accepts(g, grid[i]) == in, "%s: %s should be %s", schema, grid[i], in ? "in" : "out");
		}
		gbnf_free(g);
		cJSON_Delete(sj);
	}
	refused("{\"type\":\"number\",\"minimum\":0.5}", "not integers are not supported");
}

static void
test_refusals(void)
{
	refused("{\"type\":\"string\",\"pattern\":\"^a\"}", "schema: 'pattern' is not supported");
	refused("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"multipleOf\":2}}}",
	        "schema.properties.x: 'multipleOf' is not supported");
	refused("{\"type\":\"array\",\"items\":{\"not\":{}}}", "schema.items: 'not' is not supported");
	refused("{\"type\":\"array\",\"uniqueItems\":true}", "'uniqueItems': true");
	refused("{\"patternProperties\":{}}", "'patternProperties' is not supported");
	refused("{\"type\":\"string\",\"format\":\"ipv6\"}", "'format': 'ipv6' is not supported");
	refused("{\"type\":\"strin\"}", "not a JSON Schema type");
	refused("{\"type\":\"object\",\"properties\":{\"a\":false}}", "schema.properties.a: the schema false");
	refused("{\"$ref\":\"http://example.com/s.json\"}", "only references inside the schema");
	refused("{\"$ref\":\"#/$defs/missing\"}", "points at nothing");
	// a $ref back to its own schema before any value: no first byte
	refused("{\"$ref\":\"#\"}", "schema: '$ref' comes back to the schema it is in before any value");
	refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
	        "'$ref' comes back");
	refused("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "'$ref' comes back");
	refused("[1]", "must be an object or a boolean");
	refused("{\"enum\":[]}", "non-empty array");
	refused("{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "'minLength' 5 is above 'maxLength' 2");
	refused("{\"type\":\"array\",\"minItems\":3,\"maxItems\":1}", "'minItems' 3 is above 'maxItems' 1");
	refused("{\"allOf\":[{\"type\":\"string\"}]}", "'allOf' is supported for object schemas only");
	refused("{\"allOf\":[{\"properties\":[\"b\"]}]}", "'properties' must be an object");
	// a long key beside additional properties: one rule per character, no nested groups
	char longkey[2048];
	int kn = snprintf(longkey, sizeof longkey, "{\"properties\":{\"");
	for (int i = 0; i < 200; i++)
		longkey[kn++] = 'k';
	snprintf(longkey + kn, sizeof longkey - (size_t)kn,
	         "\":{\"type\":\"integer\"}},\"additionalProperties\":true}");
	struct gbnf *lg = schema_grammar(longkey, NULL);
	CHECK(lg && accepts(lg, "{\"kk\": 1}") == 1 && accepts(lg, "{}") == 1, "a long key");
	gbnf_free(lg);
	refused("{\"anyOf\":[{\"type\":\"string\"}],\"minLength\":2}", "'anyOf' beside other keywords");
	refused("{\"type\":\"object\",\"required\":[1]}", "'required' must be an array of strings");
	refused("{\"const\":{\"\xb3x\":1}}", "not valid UTF-8"); // cJSON reads such keys
	refused("{\"enum\":[\"\xc3\"]}", "not valid UTF-8");
	refused("{\"properties\":{\"\xff\":{}}}", "property name is not valid UTF-8");
	// nesting past the limit
	char deep[4096];
	int n = 0;
	for (int i = 0; i < 80; i++)
		n += snprintf(deep + n, sizeof deep - (size_t)n, "{\"type\":\"array\",\"items\":");
	n += snprintf(deep + n, sizeof deep - (size_t)n, "{}");
	for (int i = 0; i < 80; i++)
		deep[n++] = '}';
	deep[n] = 0;
	refused(deep, "nested deeper than");
	// ignored: annotations and keywords outside JSON Schema
	expect("{\"type\":\"integer\",\"title\":\"t\",\"description\":\"d\",\"default\":1,\"examples\":[1],"
	       "\"x-vendor\":{\"pattern\":\"q\"}}",
	       L("1"), L("\"1\""));
}

// a grammar of several schemas with hand-written rules, as tool calls use
static void
test_builder(void)
{
	char err[AD_ERRLEN];
	struct jsg *j = jsg_new();
	cJSON *a = cJSON_Parse(
		"{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}");
	cJSON *b = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}}}");
	REQUIRE(j && a && b);
	char *lit = jsg_literal("get_\"w\"\n", 8);
	CHECK(lit && !strcmp(lit, "\"get_\\\"w\\\"\\x0A\""), "%s", lit);
	free(lit);
	CHECK(jsg_schema(j, "args-0", a, "tools[0].function.parameters", err) == 0, "%s", err);
	CHECK(jsg_schema(j, "args-1", b, "tools[1].function.parameters", err) == 0, "%s", err);
	CHECK(jsg_rule(j, "root", "\"{\\\"name\\\": \\\"w\\\", \\\"arguments\\\": \" args-0 \"}\" | \"n=\" args-1",
	               err) == 0);
	size_t n;
	char *t = jsg_text(j, &n, err);
	struct gbnf *g = NULL;
	CHECK(t && gbnf_compile(t, n, NULL, NULL, NULL, &g, err) == 0, "%s\n%s", err, t ? t : "");
	if (g) {
		CHECK(accepts(g, "{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}"));
		CHECK(accepts(g, "n={\"n\": 3}"));
		CHECK(!accepts(g, "n={\"city\": \"Paris\"}"));
	}
	gbnf_free(g);
	free(t);
	cJSON_Delete(a);
	cJSON_Delete(b);
	jsg_free(j);
}

int
main(void)
{
	static char b[256][1];
	const char *bytes[BYTE_N];
	uint32_t len[BYTE_N];
	for (int i = 0; i < 256; i++) {
		b[i][0] = (char)i;
		bytes[i] = b[i];
		len[i] = 1;
	}
	bytes[BYTE_EOS] = NULL;
	len[BYTE_EOS] = 0;
	char err[AD_ERRLEN];
	V = gram_vocab_new(BYTE_N, bytes, len, err);
	if (!V) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	T_RUN(test_types);
	T_RUN(test_objects);
	T_RUN(test_arrays);
	T_RUN(test_refs);
	T_RUN(test_strings);
	T_RUN(test_integer_bounds);
	T_RUN(test_number_bounds);
	T_RUN(test_refusals);
	T_RUN(test_builder);
	gram_vocab_free(V);
	return t_done();
}
