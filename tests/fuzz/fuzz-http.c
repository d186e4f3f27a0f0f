// fuzz-http.c - arbitrary bytes as the body of a POST to one dialect's
// endpoints, through what the frontend does with a body before any worker
// sees it: fe_body_parse (JSON, trailing bytes, depth, an object), the
// dialect's parse into fe_params, and then what the client gets back,
// checked to be valid JSON: the 400 in the dialect's shape when the body is
// refused; for a generation that is accepted, the whole reply and the
// stream's events rendered for a made-up outcome (every string the request
// brings back, "model" and the stop sequence among them, must come out as
// valid UTF-8 JSON). The first byte picks the endpoint and the server's
// settings (--system, --embeddings, sampling defaults); the rest is the body.
//
// One source, four targets (FUZZ_DIALECT): 0 OpenAI (chat, completions,
// embeddings), 1 Anthropic (messages, count_tokens), 2 the Responses API,
// 3 llama.cpp's (/tokenize, /detokenize, /apply-template).
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fe.h"

#ifndef FUZZ_DIALECT
#define FUZZ_DIALECT 0
#endif

static const struct {
	enum fe_api api;
	const struct fe_dialect *d;
} routes[4][3] = {
	{{FE_API_CHAT, &fe_openai}, {FE_API_COMPLETIONS, &fe_openai}, {FE_API_EMBEDDINGS, &fe_openai}},
	{{FE_API_MESSAGES, &fe_anthropic}, {FE_API_COUNT_TOKENS, &fe_count_tokens}, {FE_API_MESSAGES, &fe_anthropic}},
	{{FE_API_RESPONSES, &fe_responses}, {FE_API_RESPONSES, &fe_responses}, {FE_API_RESPONSES, &fe_responses}},
	{{FE_API_TOKENIZE, &fe_llama}, {FE_API_DETOKENIZE, &fe_llama}, {FE_API_APPLY_TEMPLATE, &fe_llama}},
};

static void
must_be_json(const char *what, const char *s, size_t n)
{
	if (!s)
		return; // out of memory: the renderers say so with NULL
	cJSON *j = cJSON_ParseWithLength(s, n);
	if (!j) {
		fprintf(stderr, "%s is not JSON (%zu bytes): ", what, n);
		fwrite(s, 1, n, stderr);
		fputc('\n', stderr);
		abort();
	}
	cJSON_Delete(j);
}

// every "data: " line of an event stream is JSON (or [DONE])
static void
must_be_events(const char *what, char *s, size_t n)
{
	if (!s)
		return;
	for (size_t i = 0; i < n;) {
		size_t e = i;
		while (e < n && s[e] != '\n')
			e++;
		if (e - i > 6 && memcmp(s + i, "data: ", 6) == 0 &&
		    !(e - i == 12 && memcmp(s + i + 6, "[DONE]", 6) == 0)) {
			must_be_json(what, s + i + 6, e - i - 6);
		}
		i = e + 1;
	}
	free(s);
}

// the reply and the stream of an accepted generation, for a made-up outcome
static void
render(const struct fe_dialect *d, struct fe_gen *g)
{
	static char story[] = "Once upon a time \xc3\xa9t\xc3\xa9";
	size_t len = 0;
	int n = g->p.n >= 1 && g->p.n <= FE_MAX_N ? g->p.n : 1;
	g->text = strdup(story);
	g->len = g->cap = strlen(story);
	for (int i = 1; i < n; i++) {
		g->ch[i].text = strdup(story);
		g->ch[i].len = g->ch[i].cap = strlen(story);
	}
	for (int i = 0; i < n; i++) {
		g->ch[i].finish = i % 2 ? FE_FINISH_STOP_SEQ : FE_FINISH_LENGTH;
		g->ch[i].stop_index = g->p.n_stops ? 0 : -1;
		g->ch[i].completion_tokens = 7;
	}
	g->r.finish = g->p.n_stops ? FE_FINISH_STOP_SEQ : FE_FINISH_EOS;
	g->r.stop_index = g->p.n_stops ? (int)g->p.n_stops - 1 : -1;
	g->r.prompt_tokens = 12;
	g->r.completion_tokens = 7 * (unsigned)n;
	g->created = 1700000000;
	snprintf(g->id, sizeof g->id, "fuzz-1");
	if (g->p.api == FE_API_EMBEDDINGS) {
		// the vectors of every input
		g->emb_dims = 3;
		g->emb = calloc(g->p.n_inputs ? g->p.n_inputs * 3 : 1, sizeof *g->emb);
	}
	if (d->response) {
		char *r = d->response(g, &len);
		must_be_json("the reply", r, len);
		free(r);
	}
	if (!g->p.stream || g->p.api == FE_API_EMBEDDINGS)
		return;
	g->seq = 0;
	char *ev;
	if (d->stream_start) {
		ev = d->stream_start(g, &len);
		must_be_events("stream_start", ev, len);
	}
	for (int i = 0; i < n; i++) {
		struct fe_chunk c = {.index = i, .text = story, .len = strlen(story)};
		if (d->stream_chunk) {
			ev = d->stream_chunk(g, &c, &len);
			must_be_events("stream_chunk", ev, len);
		} else if (d->stream_text) {
			ev = d->stream_text(g, story, strlen(story), &len);
			must_be_events("stream_text", ev, len);
		}
	}
	if (d->stream_end) {
		ev = d->stream_end(g, &len);
		must_be_events("stream_end", ev, len);
	}
	if (d->stream_error) {
		ev = d->stream_error(503, "the engine has been unavailable", &len);
		must_be_events("stream_error", ev, len);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t sel = data[0];
	struct fe_config cfg = {
		.name = "stories260K",
		.model_file = "stories260K.gguf",
		.system = sel & 0x10 ? "You are a storyteller." : NULL,
		.max_tokens = 512,
		.max_seq = 2048,
		.max_body = 1 << 20,
		.queue = 4,
		.parallel = 1,
		.embeddings = (sel & 0x20) != 0,
	};
	if (sel & 0x40) {
		cfg.def.temperature = 0.3f;
		cfg.def.top_k = 7;
		cfg.def.set = FE_DEF_TEMP | FE_DEF_TOP_K;
	}
	const struct fe_dialect *d = routes[FUZZ_DIALECT][(sel & 0xf) % 3].d;
	enum fe_api api = routes[FUZZ_DIALECT][(sel & 0xf) % 3].api;
	// the body as h2o hands it over: exactly size - 1 bytes, no NUL after
	size_t n = size - 1;
	char *body = malloc(n ? n : 1);
	if (!body)
		return 0;
	memcpy(body, data + 1, n);
	struct fe_bad bad = {0};
	size_t len = 0;
	cJSON *o = fe_body_parse(body, n, &bad);
	if (!o) {
		char *e = d->error(bad.status, bad.msg, NULL, &len);
		must_be_json("the 400", e, len);
		free(e);
		free(body);
		return 0;
	}
	struct fe_gen *g = calloc(1, sizeof *g);
	if (g) {
		if (d->parse(o, api, &cfg, &g->p, &bad) != 0) {
			char *e =
				d->error(bad.status ? bad.status : 400, bad.msg, bad.param[0] ? bad.param : NULL, &len);
			must_be_json("the 400", e, len);
			free(e);
		} else if (fe_api_generates(api)) {
			render(d, g);
		}
		fe_choices_free(g);
		free(g->text);
		fe_params_free(&g->p);
		free(g);
	}
	cJSON_Delete(o);
	free(body);
	return 0;
}
