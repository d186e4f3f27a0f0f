// cmd-tokenize.c - `anedvd tokenize`: the ids and pieces of a text.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "tokenizer.h"

int cmd_tokenize(int argc, char **argv);

static void
usage(FILE *out)
{
	fprintf(out,
	        "usage: anedvd tokenize --model M (TEXT | --file F) [--ids] [--no-bos] [--parse-special]\n"
	        "                       [--chat [--prompt-only]]\n"
	        "  --model M          a .gguf, a HuggingFace directory or tokenizer.json, or a llama2.c tokenizer .bin\n"
	        "  --file F           read the text from F ('-' for stdin) instead of TEXT\n"
	        "  --ids              print only the ids, space-separated on one line\n"
	        "  --no-bos           do not add BOS even if the model asks for it\n"
	        "  --parse-special    read special-token text (<|im_start|>, <s>) as those tokens\n"
	        "  --chat             the text is a conversation: a JSON array of OpenAI-style messages\n"
	        "                     (role system, user, assistant or tool; content; tool_calls,\n"
	        "                     tool_call_id, name, reasoning_content), or an object with \"messages\" and\n"
	        "                     optionally \"tools\", \"chat_template_kwargs\", \"enable_thinking\" and\n"
	        "                     \"add_generation_prompt\" (default true). It is rendered as the server\n"
	        "                     renders it (the model's own chat template, else the built-in format;\n"
	        "                     stderr says which) and encoded with special tokens parsed\n"
	        "  --prompt-only      with --chat: print the rendered prompt instead of its tokens\n");
}

static char *
slurp(const char *path, size_t *n)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0, r;
	do {
		if (len + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			char *p = realloc(buf, cap);
			if (!p) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = p;
		}
		r = fread(buf + len, 1, cap - len - 1, f);
		len += r;
	} while (r > 0);
	if (buf && ferror(f)) {
		free(buf);
		buf = NULL;
	}
	if (f != stdin)
		fclose(f);
	if (buf) {
		buf[len] = 0;
		*n = len;
	}
	return buf;
}

// print s quoted, with control bytes escaped so one token stays on one line
static void
put_quoted(const char *s, size_t n)
{
	putchar('\'');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (c == '\r')
			fputs("\\r", stdout);
		else if (c == '\\' || c == '\'')
			printf("\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	putchar('\'');
}

// a conversation as tok_chat_render takes it; strings point into the cJSON
// tree, except the tools, kwargs and arguments (printed into strs)
struct conv {
	struct tok_msg *msgs;
	struct tok_call *calls;
	size_t n;
	int agp;
	struct tok_chat_opts o;
	char **strs;
	size_t ns;
};

static void
conv_free(struct conv *c)
{
	for (size_t i = 0; i < c->ns; i++)
		free(c->strs[i]);
	free(c->strs);
	free(c->calls);
	free(c->msgs);
}

static const char *
keep(struct conv *c, char *s)
{
	if (s)
		c->strs[c->ns++] = s;
	return s;
}

static const char *
opt_str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

// parse_conv reads a conversation (see usage); err gets why it cannot
static int
parse_conv(cJSON *root, struct conv *c, char *err, size_t errlen)
{
	memset(c, 0, sizeof *c);
	c->agp = 1;
	c->o.enable_thinking = -1;
	const cJSON *arr = root;
	if (cJSON_IsObject(root)) {
		arr = cJSON_GetObjectItemCaseSensitive(root, "messages");
		const cJSON *v;
		if ((v = cJSON_GetObjectItemCaseSensitive(root, "add_generation_prompt")))
			c->agp = cJSON_IsTrue(v);
		if ((v = cJSON_GetObjectItemCaseSensitive(root, "enable_thinking")))
			c->o.enable_thinking = cJSON_IsTrue(v);
	}
	if (!cJSON_IsArray(arr)) {
		snprintf(err, errlen, "--chat expects a JSON array of messages or an object with \"messages\"");
		return -1;
	}
	size_t count = (size_t)cJSON_GetArraySize(arr), n_calls = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, arr) n_calls +=
		(size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(it, "tool_calls"));
	c->msgs = calloc(count ? count : 1, sizeof *c->msgs);
	c->calls = calloc(n_calls ? n_calls : 1, sizeof *c->calls);
	c->strs = calloc(n_calls + 3, sizeof *c->strs);
	if (!c->msgs || !c->calls || !c->strs) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (cJSON_IsObject(root)) {
		const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
		const cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
		if (tools && !cJSON_IsNull(tools))
			c->o.tools = keep(c, cJSON_PrintUnformatted(tools));
		if (kw && !cJSON_IsNull(kw))
			c->o.kwargs = keep(c, cJSON_PrintUnformatted(kw));
	}
	size_t i = 0, k = 0;
	cJSON_ArrayForEach(it, arr)
	{
		struct tok_msg *m = &c->msgs[i];
		const char *role = opt_str(it, "role");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
		if (!role || !(cJSON_IsString(content) || cJSON_IsNull(content) || !content)) {
			snprintf(err, errlen, "message %zu needs a string \"role\" and a string \"content\"", i);
			return -1;
		}
		if (!strcmp(role, "system"))
			m->role = TOK_ROLE_SYSTEM;
		else if (!strcmp(role, "user"))
			m->role = TOK_ROLE_USER;
		else if (!strcmp(role, "assistant"))
			m->role = TOK_ROLE_ASSISTANT;
		else if (!strcmp(role, "tool"))
			m->role = TOK_ROLE_TOOL;
		else {
			snprintf(err, errlen, "message %zu: role \"%.32s\" is not system, user, assistant or tool", i,
			         role);
			return -1;
		}
		m->content = cJSON_IsString(content) ? content->valuestring : "";
		m->reasoning = opt_str(it, "reasoning_content");
		m->call_id = opt_str(it, "tool_call_id");
		m->name = opt_str(it, "name");
		m->calls = c->calls + k;
		const cJSON *tc;
		cJSON_ArrayForEach(tc, cJSON_GetObjectItemCaseSensitive(it, "tool_calls"))
		{
			const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
			const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
			if (!opt_str(fn, "name")) {
				snprintf(err, errlen, "message %zu: a tool call needs function.name", i);
				return -1;
			}
			// OpenAI sends the arguments as JSON text; an object is taken too
			c->calls[k++] = (struct tok_call){opt_str(tc, "id"), opt_str(fn, "name"),
			                                  cJSON_IsString(args) ? args->valuestring
			                                  : args               ? keep(c, cJSON_PrintUnformatted(args))
			                                                       : "{}"};
			m->n_calls++;
		}
		i++;
	}
	c->n = count;
	return 0;
}

int
cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL, *file = NULL, *text = NULL;
	int only_ids = 0, no_bos = 0, parse_special = 0, chat = 0, prompt_only = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-m")) // llama.cpp's short flag (cli_long_flag)
			a = "--model";
		if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--model") || !strcmp(a, "--file")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "anedvd tokenize: %s needs a value\n", a);
				usage(stderr);
				return 2;
			}
			*(a[2] == 'm' ? &model : &file) = argv[++i];
		} else if (!strcmp(a, "--ids")) {
			only_ids = 1;
		} else if (!strcmp(a, "--no-bos")) {
			no_bos = 1;
		} else if (!strcmp(a, "--parse-special")) {
			parse_special = 1;
		} else if (!strcmp(a, "--chat")) {
			chat = 1;
		} else if (!strcmp(a, "--prompt-only")) {
			prompt_only = 1;
		} else if (a[0] == '-' && a[1] == '-') {
			fprintf(stderr, "anedvd tokenize: unknown option %s\n", a);
			usage(stderr);
			return 2;
		} else if (text) {
			fprintf(stderr, "anedvd tokenize: more than one TEXT (quote the text)\n");
			usage(stderr);
			return 2;
		} else {
			text = a;
		}
	}
	if (!model) {
		fprintf(stderr, "anedvd tokenize: --model is required\n");
		usage(stderr);
		return 2;
	}
	if (!!text + !!file != 1) {
		fprintf(stderr, "anedvd tokenize: give either TEXT or --file F\n");
		usage(stderr);
		return 2;
	}
	if (prompt_only && !chat) {
		fprintf(stderr, "anedvd tokenize: --prompt-only goes with --chat\n");
		usage(stderr);
		return 2;
	}

	char err[AD_ERRLEN];
	char *owned = NULL;
	size_t len;
	if (file) {
		owned = slurp(file, &len);
		if (!owned) {
			fprintf(stderr, "anedvd tokenize: cannot read %s\n", file);
			return 1;
		}
		text = owned;
	} else {
		len = strlen(text);
	}

	int rc = 1;
	char *prompt = NULL;
	int32_t *ids = NULL;
	size_t n_ids = 0;
	struct tokenizer *t = tok_load(model, err);
	if (!t) {
		fprintf(stderr, "anedvd tokenize: %s\n", err);
		goto done;
	}
	if (chat) {
		cJSON *root = cJSON_ParseWithLength(text, len);
		if (!root) {
			fprintf(stderr, "anedvd tokenize: --chat: the text is not valid JSON\n");
			rc = 2;
			goto done;
		}
		struct conv c;
		if (parse_conv(root, &c, err, sizeof err) != 0) {
			fprintf(stderr, "anedvd tokenize: --chat: %s\n", err);
			conv_free(&c);
			cJSON_Delete(root);
			rc = 2;
			goto done;
		}
		const char *how;
		int r = tok_chat_render(t, c.msgs, c.n, c.agp, &c.o, &prompt, &how, err);
		conv_free(&c);
		cJSON_Delete(root);
		if (r) {
			fprintf(stderr, "anedvd tokenize: %s\n", err);
			goto done;
		}
		fprintf(stderr, "chat template: %s\n", !strcmp(how, "jinja") ? "the model's own (Jinja)" : how);
		if (prompt_only) {
			fputs(prompt, stdout);
			rc = fflush(stdout) == 0 ? 0 : 1;
			goto done;
		}
		text = prompt;
		len = strlen(prompt);
		parse_special = 1;
	}
	if (tok_encode(t, text, len, no_bos ? 0 : -1, parse_special, &ids, &n_ids, err)) {
		fprintf(stderr, "anedvd tokenize: %s\n", err);
		goto done;
	}
	if (only_ids) {
		for (size_t i = 0; i < n_ids; i++)
			printf("%s%d", i ? " " : "", ids[i]);
		printf("\n");
	} else {
		for (size_t i = 0; i < n_ids; i++) {
			size_t k;
			const char *p = tok_token_text(t, ids[i], &k);
			if (k == 0) // control tokens decode to nothing: show their piece
				p = tok_piece(t, ids[i], &k);
			printf("%6d ", ids[i]);
			put_quoted(p, k);
			putchar('\n');
		}
	}
	rc = fflush(stdout) == 0 ? 0 : 1;
done:
	free(ids);
	free(prompt);
	free(owned);
	tok_free(t);
	return rc;
}
