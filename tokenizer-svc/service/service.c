#include "service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common.pb-c.h"
#include "rpc.h"
#include "tokenizer.pb-c.h"
#include "trace.h"

// the reply under construction and everything it points to: the
// request's scratch (proto/rpc.h)
struct reply {
	struct ad_rpc_req *q;
	union {
		Anedvd__EncodeReply encode;
		Anedvd__DecodeReply decode;
		Anedvd__DecodeStreamReply stream;
		Anedvd__ApplyChatTemplateReply chat;
		Anedvd__VocabInfoReply vocab;
	} u;
	void *owned[2];  // freed after packing
	int32_t eog[64]; // proto/client-tokenizer.h's TOKC_MAX_EOG
	char msg[AD_ERRLEN];
};

static void handle(void *arg, struct ad_rpc_req *q);
static void release(void *scratch);

void
tok_service_init(struct tok_service *s, const struct tokenizer *t, const char *process)
{
	memset(s, 0, sizeof *s);
	s->t = t;
	ad_rpc_server_init(&s->rpc, &ad_rpc_tokenizer, process ? process : "anedvd-tokenizer", handle, s,
	                   sizeof(struct reply), release);
}

static void
fail(struct reply *rp, Anedvd__ErrorCode code, const char *msg)
{
	ad_rpc_fail(rp->q, (int)code, "%s", msg);
}

#define FAIL(...)                                                                                                      \
	do {                                                                                                           \
		fail(__VA_ARGS__);                                                                                     \
		return;                                                                                                \
	} while (0)

static void
do_encode(struct tok_service *s, const Anedvd__EncodeRequest *q, struct reply *rp)
{
	if (q->add_bos < -1 || q->add_bos > 1)
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "encode: add_bos must be -1, 0 or 1");
	int32_t *ids = NULL;
	size_t n = 0;
	if (tok_encode(s->t, (const char *)q->text.data, q->text.len, q->add_bos, q->parse_special, &ids, &n,
	               rp->msg) != 0)
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, rp->msg);
	anedvd__encode_reply__init(&rp->u.encode);
	rp->u.encode.ids = ids;
	rp->u.encode.n_ids = n;
	rp->owned[0] = ids;
	rp->q->reply = &rp->u.encode.base;
}

// piece: what llama.cpp's token_to_piece (special on) gives for one id: the
// decoded text, or the token's own text for a control token (BOS "<s>")
static const char *
piece(const struct tokenizer *t, int32_t id, size_t *len)
{
	const char *p = tok_token_text(t, id, len);
	if (p && *len == 0 && tok_is_control(t, id))
		p = tok_piece(t, id, len);
	return p;
}

// the pieces live in one buffer, their concatenation, each pointing into it
static void
do_pieces(struct tok_service *s, const Anedvd__DecodeRequest *q, struct reply *rp)
{
	size_t total = 0, len;
	int32_t nv = tok_n_vocab(s->t);
	for (size_t i = 0; i < q->n_ids; i++) {
		if (q->ids[i] < 0 || q->ids[i] >= nv) {
			snprintf(rp->msg, sizeof rp->msg,
			         "tokenizer: token id %d at position %zu is outside the vocabulary of %d", q->ids[i], i,
			         nv);
			FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, rp->msg);
		}
		piece(s->t, q->ids[i], &len);
		total += len;
	}
	char *text = malloc(total + 1);
	ProtobufCBinaryData *pieces = calloc(q->n_ids ? q->n_ids : 1, sizeof *pieces);
	if (!text || !pieces) {
		free(text);
		free(pieces);
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
	}
	size_t m = 0;
	for (size_t i = 0; i < q->n_ids; i++) {
		const char *p = piece(s->t, q->ids[i], &len);
		if (len)
			memcpy(text + m, p, len);
		pieces[i].data = (uint8_t *)text + m;
		pieces[i].len = len;
		m += len;
	}
	text[m] = 0;
	anedvd__decode_reply__init(&rp->u.decode);
	rp->u.decode.text.data = (uint8_t *)text;
	rp->u.decode.text.len = m;
	rp->u.decode.pieces = pieces;
	rp->u.decode.n_pieces = q->n_ids;
	rp->owned[0] = text;
	rp->owned[1] = pieces;
	rp->q->reply = &rp->u.decode.base;
}

static void
do_decode(struct tok_service *s, const Anedvd__DecodeRequest *q, struct reply *rp)
{
	if (q->pieces)
		return do_pieces(s, q, rp);
	if (q->each_token) {
		// pointers into the vocabulary, which outlives the reply
		ProtobufCBinaryData *b = calloc(q->n_ids ? q->n_ids : 1, sizeof *b);
		if (!b)
			FAIL(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
		for (size_t i = 0; i < q->n_ids; i++) {
			size_t n = 0;
			const char *t = tok_token_text(s->t, q->ids[i], &n);
			if (!t) {
				free(b);
				snprintf(rp->msg, sizeof rp->msg, "decode: token id %d is outside the vocabulary of %d",
				         q->ids[i], tok_n_vocab(s->t));
				FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, rp->msg);
			}
			b[i].data = (uint8_t *)t;
			b[i].len = n;
		}
		anedvd__decode_reply__init(&rp->u.decode);
		rp->u.decode.token_bytes = b;
		rp->u.decode.n_token_bytes = q->n_ids;
		rp->owned[0] = b;
		rp->q->reply = &rp->u.decode.base;
		return;
	}
	char *text = NULL;
	size_t len = 0;
	if (tok_detokenize(s->t, q->ids, q->n_ids, &text, &len, rp->msg) != 0)
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, rp->msg);
	anedvd__decode_reply__init(&rp->u.decode);
	rp->u.decode.text.data = (uint8_t *)text;
	rp->u.decode.text.len = len;
	rp->owned[0] = text;
	rp->q->reply = &rp->u.decode.base;
}

// The stream state travels with the request: the caller hands back the bytes
// the previous reply held back.
static void
do_decode_stream(struct tok_service *s, const Anedvd__DecodeStreamRequest *q, struct reply *rp)
{
	struct tok_stream st;
	if (q->pending.len > sizeof st.hold)
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST,
		     "decode_stream: pending holds more than one unfinished UTF-8 character");
	tok_stream_init(&st, s->t);
	if (q->pending.len)
		memcpy(st.hold, q->pending.data, q->pending.len);
	st.n_hold = q->pending.len;
	size_t cap = 256, len = 0;
	char *out = malloc(cap);
	if (!out)
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
	for (size_t i = 0; i <= q->n_ids; i++) {
		const char *p;
		size_t n = 0;
		if (i < q->n_ids) {
			p = tok_stream_push(&st, q->ids[i], &n, rp->msg);
			if (!p) {
				free(out);
				tok_stream_free(&st);
				FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, rp->msg);
			}
		} else if (q->flush) {
			p = tok_stream_flush(&st, &n);
		} else {
			break;
		}
		if (len + n > cap) {
			while (len + n > cap)
				cap *= 2;
			char *bigger = realloc(out, cap);
			if (!bigger) {
				free(out);
				tok_stream_free(&st);
				FAIL(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
			}
			out = bigger;
		}
		if (n)
			memcpy(out + len, p, n);
		len += n;
	}
	char *pending = malloc(st.n_hold ? st.n_hold : 1);
	if (!pending) {
		free(out);
		tok_stream_free(&st);
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
	}
	if (st.n_hold)
		memcpy(pending, st.hold, st.n_hold);
	anedvd__decode_stream_reply__init(&rp->u.stream);
	rp->u.stream.text.data = (uint8_t *)out;
	rp->u.stream.text.len = len;
	rp->u.stream.pending.data = (uint8_t *)pending;
	rp->u.stream.pending.len = st.n_hold;
	rp->owned[0] = out;
	rp->owned[1] = pending;
	tok_stream_free(&st);
	rp->q->reply = &rp->u.stream.base;
}

// a NUL-terminated copy of bytes (NULL when out of memory); *nul for a NUL inside
static char *
cstr(const ProtobufCBinaryData *d, int *nul)
{
	if (d->len && memchr(d->data, 0, d->len))
		*nul = 1;
	char *s = malloc(d->len + 1);
	if (s) {
		if (d->len)
			memcpy(s, d->data, d->len);
		s[d->len] = 0;
	}
	return s;
}

static void
do_chat(struct tok_service *s, const Anedvd__ApplyChatTemplateRequest *q, struct reply *rp)
{
	if (q->n_messages == 0)
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "chat: no messages");
	if (q->enable_thinking < -1 || q->enable_thinking > 1)
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "chat: enable_thinking must be -1, 0 or 1");
	size_t n = q->n_messages, n_calls = 0;
	for (size_t i = 0; i < n; i++)
		n_calls += q->messages[i]->n_tool_calls;
	struct tok_msg *msgs = calloc(n, sizeof *msgs);
	struct tok_call *calls = calloc(n_calls ? n_calls : 1, sizeof *calls);
	// every string made here: contents, reasoning, arguments, the tools and kwargs
	char **texts = calloc(2 * n + n_calls + 2, sizeof *texts);
	if (!msgs || !calls || !texts) {
		free(msgs);
		free(calls);
		free(texts);
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_INTERNAL, "out of memory");
	}
	size_t nt = 0, nc = 0;
	int bad = 0, nul = 0;
	for (size_t i = 0; i < n && !bad; i++) {
		const Anedvd__ChatMessage *m = q->messages[i];
		if (strcmp(m->role, "system") == 0)
			msgs[i].role = TOK_ROLE_SYSTEM;
		else if (strcmp(m->role, "user") == 0)
			msgs[i].role = TOK_ROLE_USER;
		else if (strcmp(m->role, "assistant") == 0)
			msgs[i].role = TOK_ROLE_ASSISTANT;
		else if (strcmp(m->role, "tool") == 0)
			msgs[i].role = TOK_ROLE_TOOL;
		else {
			snprintf(rp->msg, sizeof rp->msg,
			         "chat: message %zu has role '%.40s'; expected system, user, assistant or tool", i,
			         m->role);
			bad = 1;
			break;
		}
		if (!(texts[nt++] = cstr(&m->content, &nul)) || nul) {
			snprintf(rp->msg, sizeof rp->msg,
			         nul ? "chat: message %zu contains a NUL byte" : "out of memory", i);
			bad = 1;
			break;
		}
		msgs[i].content = texts[nt - 1];
		if (m->reasoning_content.len) {
			if (!(texts[nt++] = cstr(&m->reasoning_content, &nul)) || nul) {
				snprintf(rp->msg, sizeof rp->msg,
				         nul ? "chat: message %zu: a NUL byte in its reasoning" : "out of memory", i);
				bad = 1;
				break;
			}
			msgs[i].reasoning = texts[nt - 1];
		}
		msgs[i].calls = calls + nc;
		for (size_t k = 0; k < m->n_tool_calls && !bad; k++) {
			const Anedvd__ToolCall *tc = m->tool_calls[k];
			if (!(texts[nt++] = cstr(&tc->arguments, &nul)) || nul) {
				snprintf(rp->msg, sizeof rp->msg,
				         nul ? "chat: message %zu: a NUL byte in tool call %zu" : "out of memory", i,
				         k);
				bad = 1;
				break;
			}
			calls[nc++] = (struct tok_call){tc->id, tc->name, texts[nt - 1]};
			msgs[i].n_calls++;
		}
		msgs[i].call_id = m->tool_call_id && m->tool_call_id[0] ? m->tool_call_id : NULL;
		msgs[i].name = m->name && m->name[0] ? m->name : NULL;
	}
	struct tok_chat_opts o = {.enable_thinking = q->enable_thinking};
	if (!bad && q->tools.len && (!(texts[nt++] = cstr(&q->tools, &nul)) || nul)) {
		snprintf(rp->msg, sizeof rp->msg, nul ? "chat: a NUL byte in the tools" : "out of memory");
		bad = 1;
	}
	if (!bad && q->tools.len)
		o.tools = texts[nt - 1];
	if (!bad && q->kwargs.len && (!(texts[nt++] = cstr(&q->kwargs, &nul)) || nul)) {
		snprintf(rp->msg, sizeof rp->msg, nul ? "chat: a NUL byte in the kwargs" : "out of memory");
		bad = 1;
	}
	if (!bad && q->kwargs.len)
		o.kwargs = texts[nt - 1];
	char *out = NULL;
	const char *format = "";
	if (!bad &&
	    tok_chat_render_tools(s->t, msgs, n, q->add_generation_prompt, &o, &out, NULL, &format, rp->msg) != 0)
		bad = 1;
	for (size_t j = 0; j < nt; j++)
		free(texts[j]);
	free(texts);
	free(calls);
	free(msgs);
	if (bad)
		FAIL(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, rp->msg);
	anedvd__apply_chat_template_reply__init(&rp->u.chat);
	rp->u.chat.text.data = (uint8_t *)out;
	rp->u.chat.text.len = strlen(out);
	rp->u.chat.family = (char *)tok_chat_family_name(tok_chat_family(s->t));
	rp->u.chat.tool_format = (char *)format;
	rp->owned[0] = out;
	rp->q->reply = &rp->u.chat.base;
}

static void
do_vocab(struct tok_service *s, struct reply *rp)
{
	Anedvd__VocabInfoReply *v = &rp->u.vocab;
	anedvd__vocab_info_reply__init(v);
	v->n_vocab = tok_n_vocab(s->t);
	v->bos = tok_bos(s->t);
	v->eos = tok_eos(s->t);
	v->eot = tok_eot(s->t);
	size_t n = 0;
	for (int32_t id = 0; id < v->n_vocab && n < sizeof rp->eog / sizeof rp->eog[0]; id++)
		if (tok_is_eog(s->t, id))
			rp->eog[n++] = id;
	v->eog = rp->eog;
	v->n_eog = n;
	v->model = (char *)tok_kind_name(s->t);
	v->pre = (char *)"";
	v->chat_template = (char *)tok_chat_family_name(tok_chat_family(s->t));
	v->add_bos = tok_add_bos(s->t);
	const char *tmpl = tok_chat_template(s->t);
	if (tmpl) {
		v->chat_template_text.data = (uint8_t *)tmpl;
		v->chat_template_text.len = strlen(tmpl);
	}
	size_t len = 0;
	const char *p;
	if (v->bos >= 0 && (p = piece(s->t, v->bos, &len))) {
		v->bos_text.data = (uint8_t *)p;
		v->bos_text.len = len;
	}
	if (v->eos >= 0 && (p = piece(s->t, v->eos, &len))) {
		v->eos_text.data = (uint8_t *)p;
		v->eos_text.len = len;
	}
	rp->q->reply = &v->base;
}

static const char *
request_name(Anedvd__TokRequest__BodyCase c)
{
	switch (c) {
	case ANEDVD__TOK_REQUEST__BODY_ENCODE:
		return "encode";
	case ANEDVD__TOK_REQUEST__BODY_DECODE:
		return "decode";
	case ANEDVD__TOK_REQUEST__BODY_DECODE_STREAM:
		return "decode stream";
	case ANEDVD__TOK_REQUEST__BODY_CHAT:
		return "chat template";
	case ANEDVD__TOK_REQUEST__BODY_VOCAB:
		return "vocab";
	case ANEDVD__TOK_REQUEST__BODY_HEALTH:
		return "health";
	default:
		return "bad request";
	}
}

static void
handle(void *arg, struct ad_rpc_req *q)
{
	struct tok_service *s = arg;
	struct reply *rp = q->scratch;
	rp->q = q;
	uint64_t t0 = trace_enabled() ? trace_now_us() : 0;
	switch (q->method) {
	case ANEDVD__TOK_REQUEST__BODY_ENCODE:
		do_encode(s, (const Anedvd__EncodeRequest *)q->body, rp);
		break;
	case ANEDVD__TOK_REQUEST__BODY_DECODE:
		do_decode(s, (const Anedvd__DecodeRequest *)q->body, rp);
		break;
	case ANEDVD__TOK_REQUEST__BODY_DECODE_STREAM:
		do_decode_stream(s, (const Anedvd__DecodeStreamRequest *)q->body, rp);
		break;
	case ANEDVD__TOK_REQUEST__BODY_CHAT:
		do_chat(s, (const Anedvd__ApplyChatTemplateRequest *)q->body, rp);
		break;
	case ANEDVD__TOK_REQUEST__BODY_VOCAB:
		do_vocab(s, rp);
		break;
	default:
		fail(rp, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST, "the request has no body");
		break;
	}
	if (t0)
		trace_event((long)getpid(), 1, request_name((Anedvd__TokRequest__BodyCase)q->method), "tokenizer", t0,
		            trace_now_us() - t0);
}

static void
release(void *scratch)
{
	struct reply *rp = scratch;
	free(rp->owned[0]);
	free(rp->owned[1]);
}

void
tok_service_handle(void *arg, const uint8_t *req, size_t req_len, uint8_t **out, size_t *out_len)
{
	struct tok_service *s = arg;
	ad_rpc_serve(&s->rpc, req, req_len, out, out_len);
}
