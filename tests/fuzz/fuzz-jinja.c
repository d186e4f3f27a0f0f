// fuzz-jinja.c - arbitrary bytes through the Jinja interpreter (jinja.h):
// the input is a template, optionally followed by a NUL byte and the JSON
// context to render it with (else a conversation with tools, tool calls and
// thinking, the shapes the tokenizer service passes). Small limits keep each
// run short; whatever the input, parsing and rendering must end, must not
// touch memory they do not own, and must give valid UTF-8.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "unicode.h"

static const char default_ctx[] =
	"{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"add_generation_prompt\": true, \"enable_thinking\": false,"
	" \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather.\","
	" \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"n\": {\"type\":"
	" \"integer\", \"minimum\": 1, \"default\": 2.5}}, \"required\": [\"city\"]}}}],"
	" \"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\":"
	" \"Weather in Paris? \\u00e9\\ud83d\\ude42 <b>&'\\\"\"}, {\"role\": \"assistant\", \"content\": \"\","
	" \"reasoning_content\": \"Call the tool.\", \"tool_calls\": [{\"id\": \"call_1\", \"type\": \"function\","
	" \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": null}}}]},"
	" {\"role\": \"tool\", \"content\": \"21 C\", \"tool_call_id\": \"call_1\", \"name\": \"get_weather\"},"
	" {\"role\": \"assistant\", \"content\": \"  It is 21 C.\\n\"}, {\"role\": \"user\", \"content\": [1, 2.5, null]}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *s = (const char *)data;
	const char *nul = memchr(s, 0, size);
	size_t tn = nul ? (size_t)(nul - s) : size;
	char err[AD_ERRLEN];
	enum jinja_status st;
	struct jinja_tmpl *t = jinja_parse(s, tn, &st, err);
	if (!t)
		return 0;
	const char *ctx = nul ? nul + 1 : default_ctx;
	size_t cn = nul ? size - tn - 1 : sizeof default_ctx - 1;
	struct jinja_limits lim = {.max_output = 1 << 16,
	                           .max_memory = 16 << 20,
	                           .max_steps = 200000,
	                           .timeout_ms = 1000,
	                           .now = 1767225600};
	char *out = NULL;
	size_t on = 0;
	if (jinja_render(t, ctx, cn, &lim, &out, &on, err) == JINJA_OK) {
		if (!unicode_valid(out, on) || out[on] != 0)
			abort();
		free(out);
	} else if (out) {
		abort(); // a failed render hands out nothing
	}
	jinja_free(t);
	return 0;
}
