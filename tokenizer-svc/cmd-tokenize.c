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
	fprintf(out, "usage: anedvd tokenize --model M (TEXT | --file F) [--ids] [--no-bos] [--parse-special] [--chat]\n"
	             "  --model M          a .gguf, a HuggingFace directory or tokenizer.json, or a llama2.c tokenizer .bin\n"
	             "  --file F           read the text from F ('-' for stdin) instead of TEXT\n"
	             "  --ids              print only the ids, space-separated on one line\n"
	             "  --no-bos           do not add BOS even if the model asks for it\n"
	             "  --parse-special    read special-token text (<|im_start|>, <s>) as those tokens\n"
	             "  --chat             the text is a JSON array of {\"role\", \"content\"} messages: apply the\n"
	             "                     model's chat template (with the generation prompt) and encode the result\n"
	             "                     with special tokens parsed\n");
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

// parse_messages reads a JSON array of {"role": ..., "content": ...}
static struct tok_msg *
parse_messages(cJSON *root, size_t *n, char *err, size_t errlen)
{
	if (!cJSON_IsArray(root)) {
		snprintf(err, errlen, "--chat expects a JSON array of messages");
		return NULL;
	}
	size_t count = (size_t)cJSON_GetArraySize(root);
	struct tok_msg *m = calloc(count ? count : 1, sizeof *m);
	if (!m) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	size_t i = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, root)
	{
		const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
		const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
		if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
			snprintf(err, errlen, "message %zu needs string \"role\" and \"content\"", i);
			free(m);
			return NULL;
		}
		if (!strcmp(role->valuestring, "system"))
			m[i].role = TOK_ROLE_SYSTEM;
		else if (!strcmp(role->valuestring, "user"))
			m[i].role = TOK_ROLE_USER;
		else if (!strcmp(role->valuestring, "assistant"))
			m[i].role = TOK_ROLE_ASSISTANT;
		else {
			snprintf(err, errlen, "message %zu: role \"%.32s\" is not system, user or assistant", i,
			         role->valuestring);
			free(m);
			return NULL;
		}
		m[i].content = content->valuestring;
		i++;
	}
	*n = count;
	return m;
}

int
cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL, *file = NULL, *text = NULL;
	int only_ids = 0, no_bos = 0, parse_special = 0, chat = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
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
		size_t n_msgs = 0;
		struct tok_msg *msgs = parse_messages(root, &n_msgs, err, sizeof err);
		if (!msgs) {
			fprintf(stderr, "anedvd tokenize: --chat: %s\n", err);
			cJSON_Delete(root);
			rc = 2;
			goto done;
		}
		int r = tok_apply_chat(t, msgs, n_msgs, 1, &prompt, err);
		free(msgs);
		cJSON_Delete(root);
		if (r) {
			fprintf(stderr, "anedvd tokenize: %s\n", err);
			goto done;
		}
		fprintf(stderr, "chat template: %s\n", tok_chat_family_name(tok_chat_family(t)));
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
