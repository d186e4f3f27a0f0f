#include "client-tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.pb-c.h"
#include "rpc.h"
#include "tokenizer.pb-c.h"

static const char *role_names[] = {"system", "user", "assistant", "tool"};

// call sends body (a TokRequest's) and returns the TokReply, or NULL with
// err and *code (may be NULL; proto/rpc.h)
static Anedvd__TokReply *
call_code(struct ad_client *c, const ProtobufCMessage *body, int timeout_ms, int *code, char *err)
{
	return ad_rpc_call(c, &ad_rpc_tokenizer, body, timeout_ms, code, err);
}

static Anedvd__TokReply *
call(struct ad_client *c, const ProtobufCMessage *body, int timeout_ms, char *err)
{
	return call_code(c, body, timeout_ms, NULL, err);
}

int
tokc_encode(struct ad_client *c, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
            size_t *n_ids, int timeout_ms, char *err)
{
	Anedvd__EncodeRequest e = ANEDVD__ENCODE_REQUEST__INIT;
	e.text.data = (uint8_t *)text;
	e.text.len = len;
	e.add_bos = add_bos;
	e.parse_special = parse_special;
	Anedvd__TokReply *r = call(c, &e.base, timeout_ms, err);
	if (!r)
		return -1;
	*n_ids = r->encode->n_ids;
	*ids = malloc((*n_ids ? *n_ids : 1) * sizeof **ids);
	if (*ids && *n_ids)
		memcpy(*ids, r->encode->ids, *n_ids * sizeof **ids);
	anedvd__tok_reply__free_unpacked(r, NULL);
	return *ids ? 0 : ad_err(err, "out of memory");
}

static char *
dup_bytes(const ProtobufCBinaryData *b, size_t *len)
{
	char *s = malloc(b->len + 1);
	if (s) {
		if (b->len)
			memcpy(s, b->data, b->len);
		s[b->len] = 0;
		*len = b->len;
	}
	return s;
}

int
tokc_decode(struct ad_client *c, const int32_t *ids, size_t n, char **text, size_t *len, int timeout_ms, char *err)
{
	Anedvd__DecodeRequest d = ANEDVD__DECODE_REQUEST__INIT;
	d.ids = (int32_t *)ids;
	d.n_ids = n;
	Anedvd__TokReply *r = call(c, &d.base, timeout_ms, err);
	if (!r)
		return -1;
	*text = dup_bytes(&r->decode->text, len);
	anedvd__tok_reply__free_unpacked(r, NULL);
	return *text ? 0 : ad_err(err, "out of memory");
}

int
tokc_token_bytes(struct ad_client *c, const int32_t *ids, size_t n, char ***bytes, size_t *len, int timeout_ms,
                 char *err)
{
	Anedvd__DecodeRequest d = ANEDVD__DECODE_REQUEST__INIT;
	d.ids = (int32_t *)ids;
	d.n_ids = n;
	d.each_token = 1;
	*bytes = NULL;
	Anedvd__TokReply *r = call(c, &d.base, timeout_ms, err);
	if (!r)
		return -1;
	if (r->decode->n_token_bytes != n) {
		anedvd__tok_reply__free_unpacked(r, NULL);
		return ad_err(err, "tokenizer service: %zu token_bytes for %zu ids", r->decode->n_token_bytes, n);
	}
	char **b = calloc(n ? n : 1, sizeof *b);
	int bad = !b;
	for (size_t i = 0; !bad && i < n; i++)
		bad = !(b[i] = dup_bytes(&r->decode->token_bytes[i], &len[i]));
	anedvd__tok_reply__free_unpacked(r, NULL);
	if (bad) {
		for (size_t i = 0; b && i < n; i++)
			free(b[i]);
		free(b);
		return ad_err(err, "out of memory");
	}
	*bytes = b;
	return 0;
}

int
tokc_decode_stream(struct ad_client *c, const int32_t *ids, size_t n, int flush, char pending[4], size_t *n_pending,
                   char **text, size_t *len, int timeout_ms, char *err)
{
	Anedvd__DecodeStreamRequest d = ANEDVD__DECODE_STREAM_REQUEST__INIT;
	d.ids = (int32_t *)ids;
	d.n_ids = n;
	d.flush = flush;
	d.pending.data = (uint8_t *)pending;
	d.pending.len = *n_pending;
	Anedvd__TokReply *r = call(c, &d.base, timeout_ms, err);
	if (!r)
		return -1;
	if (r->decode_stream->pending.len > 4) {
		anedvd__tok_reply__free_unpacked(r, NULL);
		return ad_err(err, "tokenizer service: pending state too long");
	}
	if (r->decode_stream->pending.len)
		memcpy(pending, r->decode_stream->pending.data, r->decode_stream->pending.len);
	*n_pending = r->decode_stream->pending.len;
	*text = dup_bytes(&r->decode_stream->text, len);
	anedvd__tok_reply__free_unpacked(r, NULL);
	return *text ? 0 : ad_err(err, "out of memory");
}

int
tokc_chat_with(struct ad_client *c, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
               const struct tokc_chat_opts *o, char **text, char *format, size_t format_cap, int timeout_ms, char *err)
{
	size_t n_calls = 0;
	for (size_t i = 0; i < n; i++)
		n_calls += msgs[i].n_calls;
	Anedvd__ChatMessage *m = calloc(n ? n : 1, sizeof *m);
	Anedvd__ChatMessage **mp = calloc(n ? n : 1, sizeof *mp);
	Anedvd__ToolCall *tc = calloc(n_calls ? n_calls : 1, sizeof *tc);
	Anedvd__ToolCall **tp = calloc(n_calls ? n_calls : 1, sizeof *tp);
	if (!m || !mp || !tc || !tp) {
		free(m);
		free(mp);
		free(tc);
		free(tp);
		return ad_err(err, "out of memory");
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		anedvd__chat_message__init(&m[i]);
		m[i].role = (char *)role_names[msgs[i].role];
		m[i].content.data = (uint8_t *)msgs[i].content;
		m[i].content.len = strlen(msgs[i].content);
		m[i].tool_calls = tp + k;
		m[i].n_tool_calls = msgs[i].n_calls;
		for (size_t j = 0; j < msgs[i].n_calls; j++, k++) {
			const struct tok_call *x = &msgs[i].calls[j];
			anedvd__tool_call__init(&tc[k]);
			tc[k].id = (char *)(x->id ? x->id : "");
			tc[k].name = (char *)(x->name ? x->name : "");
			tc[k].arguments.data = (uint8_t *)x->arguments;
			tc[k].arguments.len = x->arguments ? strlen(x->arguments) : 0;
			tp[k] = &tc[k];
		}
		m[i].tool_call_id = (char *)(msgs[i].call_id ? msgs[i].call_id : "");
		m[i].name = (char *)(msgs[i].name ? msgs[i].name : "");
		if (msgs[i].reasoning) {
			m[i].reasoning_content.data = (uint8_t *)msgs[i].reasoning;
			m[i].reasoning_content.len = strlen(msgs[i].reasoning);
		}
		mp[i] = &m[i];
	}
	Anedvd__ApplyChatTemplateRequest a = ANEDVD__APPLY_CHAT_TEMPLATE_REQUEST__INIT;
	a.messages = mp;
	a.n_messages = n;
	a.add_generation_prompt = add_generation_prompt;
	a.enable_thinking = -1;
	if (o) {
		if (o->tools) {
			a.tools.data = (uint8_t *)o->tools;
			a.tools.len = strlen(o->tools);
		}
		a.enable_thinking = o->enable_thinking;
		if (o->kwargs) {
			a.kwargs.data = (uint8_t *)o->kwargs;
			a.kwargs.len = strlen(o->kwargs);
		}
	}
	int code;
	Anedvd__TokReply *r = call_code(c, &a.base, timeout_ms, &code, err);
	free(m);
	free(mp);
	free(tc);
	free(tp);
	if (!r)
		return code == ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST ? TOKC_BAD_REQUEST : -1;
	size_t len;
	*text = dup_bytes(&r->chat->text, &len);
	if (format && format_cap)
		snprintf(format, format_cap, "%s", r->chat->tool_format ? r->chat->tool_format : "");
	anedvd__tok_reply__free_unpacked(r, NULL);
	return *text ? 0 : ad_err(err, "out of memory");
}

int
tokc_chat(struct ad_client *c, const struct tok_msg *msgs, size_t n, int add_generation_prompt, char **text,
          int timeout_ms, char *err)
{
	return tokc_chat_with(c, msgs, n, add_generation_prompt, NULL, text, NULL, 0, timeout_ms, err);
}

int
tokc_pieces(struct ad_client *c, const int32_t *ids, size_t n, char **text, size_t *len, size_t **ends, int timeout_ms,
            char *err)
{
	Anedvd__DecodeRequest d = ANEDVD__DECODE_REQUEST__INIT;
	d.ids = (int32_t *)ids;
	d.n_ids = n;
	d.pieces = 1;
	*text = NULL;
	*ends = NULL;
	Anedvd__TokReply *r = call(c, &d.base, timeout_ms, err);
	if (!r)
		return -1;
	if (r->decode->n_pieces != n) {
		anedvd__tok_reply__free_unpacked(r, NULL);
		return ad_err(err, "tokenizer service: %zu pieces for %zu ids", r->decode->n_pieces, n);
	}
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += r->decode->pieces[i].len;
	*text = malloc(total + 1);
	*ends = malloc((n ? n : 1) * sizeof **ends);
	if (!*text || !*ends) {
		free(*text);
		free(*ends);
		*text = NULL;
		*ends = NULL;
		anedvd__tok_reply__free_unpacked(r, NULL);
		return ad_err(err, "out of memory");
	}
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (r->decode->pieces[i].len)
			memcpy(*text + m, r->decode->pieces[i].data, r->decode->pieces[i].len);
		m += r->decode->pieces[i].len;
		(*ends)[i] = m;
	}
	(*text)[m] = 0;
	*len = m;
	anedvd__tok_reply__free_unpacked(r, NULL);
	return 0;
}

int
tokc_vocab(struct ad_client *c, struct tokc_vocab *v, int timeout_ms, char *err)
{
	return tokc_vocab_texts(c, v, NULL, timeout_ms, err);
}

void
tokc_vocab_texts_free(struct tokc_vocab_texts *t)
{
	if (!t)
		return;
	free(t->chat_template);
	free(t->bos);
	free(t->eos);
	memset(t, 0, sizeof *t);
}

int
tokc_vocab_texts(struct ad_client *c, struct tokc_vocab *v, struct tokc_vocab_texts *t, int timeout_ms, char *err)
{
	Anedvd__VocabInfoRequest vr = ANEDVD__VOCAB_INFO_REQUEST__INIT;
	Anedvd__TokReply *r = call(c, &vr.base, timeout_ms, err);
	if (!r)
		return -1;
	memset(v, 0, sizeof *v);
	v->n_vocab = r->vocab->n_vocab;
	v->bos = r->vocab->bos;
	v->eos = r->vocab->eos;
	v->eot = r->vocab->eot;
	for (size_t i = 0; i < r->vocab->n_eog && v->n_eog < TOKC_MAX_EOG; i++)
		v->eog[v->n_eog++] = r->vocab->eog[i];
	v->add_bos = r->vocab->add_bos;
	snprintf(v->model, sizeof v->model, "%s", r->vocab->model);
	snprintf(v->chat_template, sizeof v->chat_template, "%s", r->vocab->chat_template);
	if (t) {
		size_t l;
		memset(t, 0, sizeof *t);
		t->chat_template = dup_bytes(&r->vocab->chat_template_text, &l);
		t->bos = dup_bytes(&r->vocab->bos_text, &l);
		t->eos = dup_bytes(&r->vocab->eos_text, &l);
		if (!t->chat_template || !t->bos || !t->eos) {
			tokc_vocab_texts_free(t);
			anedvd__tok_reply__free_unpacked(r, NULL);
			return ad_err(err, "out of memory");
		}
	}
	anedvd__tok_reply__free_unpacked(r, NULL);
	return 0;
}
