// chat.c - chat prompts rendered natively for the common template families.
//
// What a model gets when its own template cannot be run (chat-jinja.c runs
// it): the template is probed for marker strings to pick a family, and each
// family is written out here the way its reference template renders it
// (whitespace trimming included), minus the leading BOS text that the
// encoder adds itself.
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sbuf.h"
#include "tokenizer-impl.h"

static int
has(const char *s, const char *needle)
{
	return s && strstr(s, needle) != NULL;
}

static int
vocab_has(const struct tokenizer *t, const char *piece)
{
	return tok_find(t, piece, strlen(piece)) >= 0;
}

// tok_chat_detect probes the template in the order llama.cpp does, so that
// a template mentioning several markers lands on the same family.
enum tok_chat_family
tok_chat_detect(struct tokenizer *t)
{
	const char *s = t->chat_template;
	t->chat_guessed = 0;
	if (has(s, "<|im_start|>"))
		return TOK_CHAT_CHATML;
	if (has(s, "[INST]"))
		return TOK_CHAT_LLAMA2;
	if (has(s, "<|assistant|>") && has(s, "<|end|>"))
		return TOK_CHAT_PHI3;
	if (has(s, "<|user|>"))
		return TOK_CHAT_ZEPHYR;
	if (has(s, "<start_of_turn>"))
		return TOK_CHAT_GEMMA;
	if (has(s, "<|start_header_id|>") && has(s, "<|end_header_id|>"))
		return TOK_CHAT_LLAMA3;
	t->chat_guessed = 1;
	if (vocab_has(t, "<|im_start|>") && vocab_has(t, "<|im_end|>"))
		return TOK_CHAT_CHATML;
	return TOK_CHAT_PLAIN;
}

const char *
tok_chat_family_name(enum tok_chat_family f)
{
	switch (f) {
	case TOK_CHAT_PLAIN:
		return "plain";
	case TOK_CHAT_CHATML:
		return "chatml";
	case TOK_CHAT_LLAMA2:
		return "llama2";
	case TOK_CHAT_LLAMA3:
		return "llama3";
	case TOK_CHAT_GEMMA:
		return "gemma";
	case TOK_CHAT_PHI3:
		return "phi3";
	case TOK_CHAT_ZEPHYR:
		return "zephyr";
	}
	return "unknown";
}

static int
is_ws(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

// Jinja's trim (Python's strip(): surrounding whitespace)
static void
sb_trimmed(struct sbuf *b, const char *s)
{
	size_t n = strlen(s);
	while (n && is_ws(*s))
		s++, n--;
	while (n && is_ws(s[n - 1]))
		n--;
	sbuf_add(b, s, n);
}

static void
sb_piece(struct sbuf *b, const struct tokenizer *t, int32_t id, const char *fallback)
{
	size_t n;
	const char *p = id >= 0 ? tok_piece(t, id, &n) : NULL;
	if (p)
		sbuf_add(b, p, n);
	else
		sbuf_str(b, fallback);
}

static const char *
role_name(enum tok_role r)
{
	return r == TOK_ROLE_SYSTEM ? "system"
	       : r == TOK_ROLE_USER ? "user"
	       : r == TOK_ROLE_TOOL ? "tool"
	                            : "assistant";
}

int
tok_apply_chat_family(const struct tokenizer *t, enum tok_chat_family f, const struct tok_msg *msgs, size_t n,
                      int add_generation_prompt, char **out, char *err)
{
	struct sbuf b = {0};
	*out = NULL;
	for (size_t i = 0; i < n; i++) {
		if ((unsigned)msgs[i].role > TOK_ROLE_TOOL)
			return ad_err(err, "chat: message %zu has an unknown role %d", i, (int)msgs[i].role);
		if (!msgs[i].content)
			return ad_err(err, "chat: message %zu has no content", i);
	}
	sbuf_add(&b, "", 0);

	switch (f) {
	case TOK_CHAT_CHATML:
		// <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
		for (size_t i = 0; i < n; i++) {
			sbuf_str(&b, "<|im_start|>");
			sbuf_str(&b, role_name(msgs[i].role));
			sbuf_str(&b, "\n");
			sbuf_str(&b, msgs[i].content);
			sbuf_str(&b, "<|im_end|>\n");
		}
		if (add_generation_prompt)
			sbuf_str(&b, "<|im_start|>assistant\n");
		break;

	case TOK_CHAT_LLAMA2: {
		// Meta's template: a leading system message goes inside the first
		// user turn; every user turn but the first opens with the BOS text
		// "<s>[INST] {content|trim} [/INST]"; an answer is " {content|trim} </s>".
		const char *sys = NULL;
		size_t i = 0;
		if (n && msgs[0].role == TOK_ROLE_SYSTEM)
			sys = msgs[i++].content;
		int first = 1;
		for (; i < n; i++) {
			if (msgs[i].role == TOK_ROLE_ASSISTANT) {
				sbuf_str(&b, " ");
				sb_trimmed(&b, msgs[i].content);
				sbuf_str(&b, " ");
				sb_piece(&b, t, t->eos, "</s>");
				continue;
			}
			if (!first)
				sb_piece(&b, t, t->bos, "<s>");
			sbuf_str(&b, "[INST] ");
			if (first && sys) {
				sbuf_str(&b, "<<SYS>>\n");
				sbuf_str(&b, sys);
				sbuf_str(&b, "\n<</SYS>>\n\n");
			}
			// a later system message is treated as a user turn
			sb_trimmed(&b, msgs[i].content);
			sbuf_str(&b, " [/INST]");
			first = 0;
		}
		if (first && sys) { // only a system message
			sbuf_str(&b, "[INST] <<SYS>>\n");
			sbuf_str(&b, sys);
			sbuf_str(&b, "\n<</SYS>>\n\n [/INST]");
		}
		break;
	}

	case TOK_CHAT_LLAMA3:
		// <|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
		for (size_t i = 0; i < n; i++) {
			sbuf_str(&b, "<|start_header_id|>");
			sbuf_str(&b, role_name(msgs[i].role));
			sbuf_str(&b, "<|end_header_id|>\n\n");
			sb_trimmed(&b, msgs[i].content);
			sbuf_str(&b, "<|eot_id|>");
		}
		if (add_generation_prompt)
			sbuf_str(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
		break;

	case TOK_CHAT_GEMMA: {
		// no system role: system text goes before the next user turn's text,
		// followed by a blank line; "assistant" is "model"
		struct sbuf sys = {0};
		for (size_t i = 0; i < n; i++) {
			if (msgs[i].role == TOK_ROLE_SYSTEM) {
				sb_trimmed(&sys, msgs[i].content);
				continue;
			}
			int model = msgs[i].role == TOK_ROLE_ASSISTANT;
			sbuf_str(&b, model ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
			if (!model && sys.n) {
				sbuf_add(&b, sys.s, sys.n);
				sbuf_str(&b, "\n\n");
				sys.n = 0;
			}
			sb_trimmed(&b, msgs[i].content);
			sbuf_str(&b, "<end_of_turn>\n");
		}
		if (sys.n) { // a system message with no user turn after it
			sbuf_str(&b, "<start_of_turn>user\n");
			sbuf_add(&b, sys.s, sys.n);
			sbuf_str(&b, "\n\n<end_of_turn>\n");
		}
		if (sys.oom)
			b.oom = 1;
		free(sys.s);
		if (add_generation_prompt)
			sbuf_str(&b, "<start_of_turn>model\n");
		break;
	}

	case TOK_CHAT_PHI3:
		// <|{role}|>\n{content}<|end|>\n ... <|assistant|>\n
		for (size_t i = 0; i < n; i++) {
			sbuf_str(&b, "<|");
			sbuf_str(&b, role_name(msgs[i].role));
			sbuf_str(&b, "|>\n");
			sbuf_str(&b, msgs[i].content);
			sbuf_str(&b, "<|end|>\n");
		}
		if (add_generation_prompt)
			sbuf_str(&b, "<|assistant|>\n");
		break;

	case TOK_CHAT_ZEPHYR:
		// <|{role}|>\n{content}{eos}\n ... <|assistant|>\n
		for (size_t i = 0; i < n; i++) {
			sbuf_str(&b, "<|");
			sbuf_str(&b, role_name(msgs[i].role));
			sbuf_str(&b, "|>\n");
			sbuf_str(&b, msgs[i].content);
			sb_piece(&b, t, t->eos, "</s>");
			sbuf_str(&b, "\n");
		}
		if (add_generation_prompt)
			sbuf_str(&b, "<|assistant|>\n");
		break;

	case TOK_CHAT_PLAIN:
	default:
		// System: ...\nUser: ...\nAssistant: ...\n ... Assistant:
		for (size_t i = 0; i < n; i++) {
			sbuf_str(&b, msgs[i].role == TOK_ROLE_SYSTEM ? "System: "
			             : msgs[i].role == TOK_ROLE_USER ? "User: "
			             : msgs[i].role == TOK_ROLE_TOOL ? "Tool: "
			                                             : "Assistant: ");
			sbuf_str(&b, msgs[i].content);
			sbuf_str(&b, "\n");
		}
		if (add_generation_prompt)
			sbuf_str(&b, "Assistant:");
		break;
	}

	if (b.oom) {
		free(b.s);
		return ad_err(err, "chat: out of memory");
	}
	*out = b.s;
	return 0;
}

// the native renderer for tok_chat_render, with the one warning about a
// model whose template says nothing this file knows
int
tok_chat_native(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt, char **out,
                char *err)
{
	static atomic_int warned;
	if (t->chat_guessed && !t->jinja && !atomic_exchange(&warned, 1))
		ad_warn("chat: %s; using the %s format",
		        t->chat_template ? "chat template not recognised" : "the model has no chat template",
		        tok_chat_family_name(t->chat));
	return tok_apply_chat_family(t, t->chat, msgs, n, add_generation_prompt, out, err);
}
