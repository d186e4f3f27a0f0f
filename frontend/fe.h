// fe.h - the pieces of anedvd-frontend and how they meet.
//
// One h2o event-loop thread owns every HTTP request; it never waits on IPC.
// A request that generates becomes a struct fe_gen: the loop parses and
// validates the body into fe_params (api-openai.c, api-anthropic.c), admits
// it into a bounded queue (upstream.c), and a worker thread takes it from
// there: tokenize, Generate, Poll, detokenize with the tokenizer service's
// decode_stream, stop sequences (stop.c). The worker hands text and the end
// of the job back to the loop thread as messages (h2o_multithread); the loop
// renders them in the request's dialect and writes them.
//
// Ownership: a gen has two references, the request's and the worker's; both
// are dropped on the loop thread (the worker's when the loop handles its
// final message), so the count needs no atomics. The only field both sides
// touch concurrently is `cancelled`.
#ifndef AD_FE_H
#define AD_FE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gen-types.h" // struct spec_stats, struct tok_msg

#define FE_MAX_STOPS 16
#define FE_MAX_STOP_LEN 256
#define FE_MAX_STOP_IDS 16 // stop given as token ids (llama.cpp's extension)
#define FE_MAX_N 8         // choices per request
#define FE_MAX_TOP_LOGPROBS 20
#define FE_MAX_BIAS 1024 // logit_bias entries
#define FE_MAX_TOOLS 128 // tools a request declares
#define FE_MAX_CALLS 64  // tool calls in one choice

struct fe_config {
	const char *listen;
	const char *tok_url, *engine_url;
	const char *name;       // model id reported and echoed
	const char *model_file; // the model's file name, for /props ("" or NULL: unknown)
	const char *system;     // default system prompt for chat requests
	unsigned max_tokens;    // default when the request has none
	unsigned max_seq;       // context: prompt + reply must fit
	size_t max_body;
	int queue;        // requests waiting beyond those running
	int parallel;     // generations the engine runs at once
	int timeout_ms;   // each upstream call
	int keepalive_ms; // SSE comment after this much silence; 0: never
	int deadline_ms;  // a generation's whole life, queue included; 0: none
	int embeddings;   // serve /v1/embeddings
	int no_spec;      // the engine runs without speculative decoding unless asked (/props)
	// sampling defaults for a request that sets none (--temp, ...); a field
	// counts only when its FE_DEF_* bit is in def.set
	struct fe_sampling_defaults {
		float temperature, top_p, min_p, repeat_penalty;
		int top_k;
		unsigned set;
	} def;
	// access (guard.c): API keys (none: no key asked), CORS origins and Host
	// names allowed beyond the defaults; *_any: "*" was given
	const char *const *api_keys;
	size_t n_api_keys;
	const char *const *cors_origins;
	size_t n_cors_origins;
	int cors_any;
	const char *const *allowed_hosts;
	size_t n_allowed_hosts;
	int hosts_any;
	const char *status_file; // the supervisor's status file (procs.c); NULL: none
};

// --- procs.c: the supervisor's status file ---------------------------------------
#define FE_LOOP_N 5             // a process that exited this many times ...
#define FE_LOOP_WINDOW_MS 30000 // ... within this long is crash-looping
struct fe_proc {
	char name[32];
	long pid; // 0 while down
	int restarts;
	char state[16];     // up, restarting, stopped
	char last_exit[32]; // signal:N, exit:N or ""
	int recent;         // exits within FE_LOOP_WINDOW_MS
	int looping;
};
// fe_procs_read: the processes listed in path (at most max), -1 when it cannot be read
int fe_procs_read(const char *path, struct fe_proc *out, int max);

#define FE_MAX_KEY_LEN 512
// fe_key_valid: 1 when k can be an API key: 1 to FE_MAX_KEY_LEN visible
// ASCII characters, no comma (ANEDVD_API_KEY lists keys with commas)
int fe_key_valid(const char *k);

enum fe_api {
	FE_API_CHAT,
	FE_API_COMPLETIONS,
	FE_API_MESSAGES,
	FE_API_RESPONSES,
	FE_API_EMBEDDINGS,
	// answered by the tokenizer alone, without generating (api-extra.c)
	FE_API_COUNT_TOKENS,
	FE_API_TOKENIZE,
	FE_API_DETOKENIZE,
	FE_API_APPLY_TEMPLATE,
	FE_API_N
};

#define FE_MAX_EMBED_INPUTS 2048

struct cJSON;

// a tool a request declares (tools.c)
struct fe_tool {
	char *name;           // [a-zA-Z0-9_-]{1,64}
	char *description;    // NULL: none
	struct cJSON *params; // the arguments' JSON Schema, an object schema (owned)
};

enum fe_tool_choice { FE_TC_AUTO, FE_TC_NONE, FE_TC_REQUIRED, FE_TC_NAMED };
// the form of the call ids a dialect hands out
enum fe_ids { FE_IDS_OPENAI, FE_IDS_ANTHROPIC, FE_IDS_RESPONSES };

// what a request asks for, in no dialect
struct fe_params {
	enum fe_api api;
	int stream, include_usage;
	char *model;
	struct tok_msg *msgs; // chat and messages; every string and call array malloc'd
	size_t n_msgs;
	// the chat template's inputs besides the messages (api-chat.c)
	char *tools_json;      // JSON array of OpenAI-style tools for the template, NULL: none
	int thinking;          // FE_THINKING_DEFAULT (0: the template's), _ON or _OFF
	char *template_kwargs; // JSON object (chat_template_kwargs and what maps to it), NULL: none
	int keep_thinking;     // reasoning_format "none": the thinking stays in the text
	char *prompt;          // completions: raw text, no template
	size_t prompt_len;
	int32_t *prompt_ids; // completions: the prompt given as token ids (prompt NULL)
	size_t n_prompt_ids;
	int echo;        // completions: the reply's text begins with the prompt's
	char *echo_text; // the text of prompt_ids, for echo (set when tokenized)
	size_t echo_len;
	unsigned max_tokens;
	float temperature, top_p, min_p, repeat_penalty, presence_penalty, frequency_penalty;
	int top_k;
	uint64_t seed;
	int has_seed;
	char *stops[FE_MAX_STOPS];
	size_t n_stops;
	// the Responses API: msgs[0] holds the instructions; the reply echoes them
	int has_instructions, has_max_output;
	// /tokenize (prompt is the content), /detokenize (ids)
	int add_special, parse_special, with_pieces;
	int32_t *ids;
	size_t n_ids;
	int32_t stop_ids[FE_MAX_STOP_IDS]; // end the choice when sampled (not reported)
	size_t n_stop_ids;
	int n;            // choices, [1, FE_MAX_N]; 0 reads as 1
	int logprobs;     // report each token's logprob
	int top_logprobs; // and this many alternatives, [0, FE_MAX_TOP_LOGPROBS]
	int speculative;  // "speculative": 0 not given, 1 false, 2 true (engine.proto's SpecMode)
	struct fe_bias {
		int32_t id;
		float bias;
	} * bias; // logit_bias, malloc'd
	size_t n_bias;
	// embeddings: n_inputs inputs, each text (emb_text[i]) or token ids (emb_ids[i], emb_len[i])
	char **emb_text;
	int32_t **emb_ids;
	size_t *emb_len;
	size_t n_inputs;
	int base64;      // encoding_format "base64"
	long dimensions; // 0: not given
	// tools and structured output (tools.c). msgs[i].calls are malloc'd
	// with their strings; tool turns' call_id and name too.
	struct fe_tool *tools;
	int n_tools;
	enum fe_tool_choice tool_choice; // with tools; FE_TC_AUTO by default
	char *tool_name;                 // FE_TC_NAMED: the tool to call
	int parallel_tools;              // several calls in one reply (the default)
	struct cJSON *schema;            // the answer's JSON Schema (response_format json_schema, ...); owned
	int json_object;                 // the answer is a JSON object (response_format json_object)
	char *grammar;                   // llama.cpp's "grammar": GBNF given by the request
	enum fe_ids call_ids;
};

enum { FE_THINKING_DEFAULT = 0, FE_THINKING_ON, FE_THINKING_OFF };
void fe_params_free(struct fe_params *p);
#define FE_DEF_TEMP 1u
#define FE_DEF_TOP_P 2u
#define FE_DEF_MIN_P 4u
#define FE_DEF_REPEAT 8u
#define FE_DEF_TOP_K 16u
// fe_params_sampling: the dialect's defaults (top_k as given: 40 for chat, 0
// for completions), then the server's (cfg->def), before the body is read
void fe_params_sampling(struct fe_params *p, const struct fe_config *cfg, int top_k);

enum fe_finish {
	FE_FINISH_NONE,
	FE_FINISH_EOS,
	FE_FINISH_LENGTH,
	FE_FINISH_STOP_SEQ,
	FE_FINISH_CANCELLED,
	FE_FINISH_ERROR,
	FE_FINISH_TOOLS
}; // FE_FINISH_TOOLS: the reply ended after its tool calls

// the outcome of a generation, filled by the worker
struct fe_result {
	enum fe_finish finish;
	int stop_index; // which stop sequence matched (FE_FINISH_STOP_SEQ)
	unsigned prompt_tokens, prompt_dropped, completion_tokens;
	// nanoseconds per stage
	uint64_t queue_ns, tokenize_ns, ttft_ns, total_ns, detok_ns;
	// the engine's (choice 0's job): its queue, stages, cached prompt
	// tokens and drafts
	struct gen_timings eng;
	// errors (FE_FINISH_ERROR)
	int status; // HTTP status to use if nothing was sent yet
	char err[AD_ERRLEN];
	char param[64]; // the field to blame, "" if none
};

struct fe_req; // the loop side of a request (http.c)

// a token with its logprob (the log-softmax of the model's own logits) and
// its best alternatives
struct fe_lp_alt {
	int32_t id;
	float logprob;
};
struct fe_lp_tok {
	int32_t id;
	float logprob;
	uint32_t offset; // bytes into the choice's text where the token starts
	int n_top;
	struct fe_lp_alt top[FE_MAX_TOP_LOGPROBS];
};

// a tool call of a reply (tools.c)
struct fe_call {
	char id[48];
	char item[48]; // the Responses API's item id (fc_...)
	char name[72];
	char *args; // the arguments' JSON text so far (malloc'd)
	size_t len, cap;
	int done; // the arguments are complete
};

// one of the n choices of a generation (the worker fills it)
struct fe_choice {
	char *text; // choices 1.. (choice 0's text is fe_gen.text)
	size_t len, cap;
	char *reasoning; // a thinking model's thinking (every choice; non-stream)
	size_t rlen, rcap;
	enum fe_finish finish;
	int stop_index;
	unsigned completion_tokens;
	struct fe_lp_tok *lp; // with logprobs: the tokens of the text, in order
	size_t n_lp, cap_lp;
	struct fe_call *calls; // tool calls (non-stream), in order
	int n_calls;
};

// a piece of a stream: text of one choice and the tokens it completes; or
// a piece of a tool call's arguments (call > 0: of call number call - 1;
// its first piece carries the call with its id and name, and may be empty)
struct fe_chunk {
	int index;
	const char *text;
	size_t len;
	const struct fe_lp_tok *lp;
	size_t n_lp;
	int part;                    // FE_PART_CONTENT or FE_PART_REASONING (think.c)
	int call;                    // 0: text
	const struct fe_call *start; // the call, on its first chunk; NULL after
};

struct fe_gen {
	struct fe_params p;
	struct fe_result r;
	struct fe_req *req; // NULL once the HTTP request is gone (loop thread only)
	int refs;           // loop thread only
	int cancelled;      // atomic: the client went away
	int queued;         // in the admission queue (queue lock)
	uint64_t t_admit;   // ns, monotonic
	int think;          // the reply is split into thinking and answer (worker, before FE_MSG_START)
	int think_open;     // the prompt ends inside <think>: the reply starts in the thinking
	int blk, blk_part;  // Anthropic stream: blocks opened so far, the open one's part (loop)
	uint64_t blk_hash;  // and the hash of the thinking block's text
	char id[48];        // response id in the dialect's form
	unsigned seq;       // the Responses stream's sequence_number (loop thread)
	// a stream's open content block (loop thread): Anthropic's and the
	// Responses API's blocks and items come and go with text and calls
	int block, block_open, block_kind, blocks_seen;
	struct fe_call *scalls; // a stream's calls as sent (loop thread; the Responses' closing events)
	int n_scalls;
	long long created; // unix seconds
	char *text;        // non-stream: the whole reply (worker, then loop)
	size_t len, cap;
	struct fe_choice ch[FE_MAX_N]; // per choice (p.n of them); ch[0].text is unused
	float *emb;                    // embeddings: n_inputs x emb_dims (worker, then loop)
	int emb_dims;
	struct fe_gen *next; // admission queue link
};

// fe_choices_free frees what the choices hold (http.c, when a gen goes)
void fe_choices_free(struct fe_gen *g);
// a choice's text: fe_gen.text for choice 0
const char *fe_choice_text(const struct fe_gen *g, int i, size_t *len);
// a choice's thinking ("" when none)
const char *fe_choice_reasoning(const struct fe_gen *g, int i, size_t *len);

// --- think.c: a thinking model's reasoning told apart from its answer -----------
// The reply of a model whose template thinks (it names <think>) is split as
// it streams: what is inside <think>...</think> at its start is the
// reasoning (OpenAI's reasoning_content, Anthropic's thinking blocks), the
// rest the answer. A prompt that ends in an open <think> (R1 distills)
// starts the reply inside the thinking. The reasoning loses its surrounding
// whitespace and the answer the whitespace right after </think>; a reply
// that does not start with <think> is all answer, as written; one that ends
// inside the thinking (max_tokens) is all reasoning. A tag cut between two
// pieces is held back until it is known.
enum { FE_PART_CONTENT = 0, FE_PART_REASONING = 1 };
enum { FE_THINK_START, FE_THINK_IN, FE_THINK_OUT };
struct fe_think {
	int state, lead, lead_content;
	char hold[16]; // a tag cut at the end of a piece
	size_t n_hold;
	char ws[64]; // the reasoning's whitespace, sent once more reasoning follows
	size_t pending_ws;
};
typedef int (*fe_think_cb)(void *arg, int part, const char *s, size_t n);
void fe_think_init(struct fe_think *t, int open);
// fe_think_push calls cb for each piece it can tell; flush: the reply ended
int fe_think_push(struct fe_think *t, const char *s, size_t n, int flush, fe_think_cb cb, void *arg);
int fe_think_model(const char *template_text); // the template names <think>
int fe_think_open(const char *prompt);         // the prompt ends in <think>
// the signature of an Anthropic thinking block: opaque, a hash of its text
#define FE_THINK_HASH0 1469598103934665603ull
uint64_t fe_think_hash(uint64_t h, const char *s, size_t n);
void fe_think_signature(uint64_t h, char out[40]);

// --- tools.c: tool calls and structured output ----------------------------------
struct fe_bad;
// the request side (the loop thread, parsing): each call returns 0 or -1 with bad filled
// fe_tool_add: the tool of object o (at names it in errors: "tools[0]",
// "tools[0].function"), its name, description and parameters' schema
// under params_key (Anthropic: required)
int fe_tool_add(struct fe_params *p, const struct cJSON *o, const char *at, const char *params_key, int need_params,
                struct fe_bad *bad);
// fe_tools_parse: the request's "tools" in one of the dialects' shapes:
// chat [{type: function, function: {name, description, parameters}}],
// responses [{type: function, name, description, parameters}], anthropic
// [{name, description, input_schema}] (type absent or custom)
enum fe_tool_shape { FE_TOOLS_CHAT, FE_TOOLS_RESPONSES, FE_TOOLS_ANTHROPIC };
int fe_tools_parse(struct fe_params *p, const struct cJSON *body, enum fe_tool_shape shape, struct fe_bad *bad);
// a call of an assistant turn in the history (copied): arguments must be a JSON object
int fe_msg_call(struct tok_msg *m, const char *id, const char *name, const char *arguments, const char *where,
                struct fe_bad *bad);
// whether an earlier turn (before message `before`) made the call id
int fe_call_known(const struct fe_params *p, size_t before, const char *id);
// after parsing: tool_choice names a declared tool, the schemas and the
// grammar compile, they do not conflict; field names the dialect's
struct fe_fields {
	const char *tools, *tool_choice, *schema, *grammar;
};
int fe_structured_check(struct fe_params *p, const struct fe_fields *f, struct fe_bad *bad);
// whether a reply is parsed for tool calls
int fe_wants_calls(const struct fe_params *p);
// the OpenAI-style tools array for the template (malloc'd; NULL: none)
char *fe_tools_json(const struct fe_params *p);

// the generation side (a worker): the grammar of a request once the
// template has said which tool-call markup it asks for (format: hermes,
// llama3, mistral, generic; "" without tools). special resolves a control
// token's text to its id (-1: not one control token).
struct fe_gram {
	char *text; // GBNF (NULL: none)
	int lazy;   // tool calls the model starts on its own
	const char *words[4];
	int n_words;
	int32_t tokens[2];
	int n_tokens;
	int forced; // the reply is tool calls from its first byte
};
int fe_gram_build(const struct fe_params *p, const char *format, int32_t (*special)(void *, const char *), void *ctx,
                  struct fe_gram *out, char *err);
void fe_gram_free(struct fe_gram *g);

// the reply side: the text from the grammar's trigger on, scanned for the
// calls (their names and the bytes of their arguments), whatever wraps them
struct fe_scan {
	int state, depth, esc, want, call_depth, have_name;
	char str[80];
	int slen;
	int a_depth, a_str, a_esc;
};
struct fe_scan_sink {
	void (*start)(void *ctx, const char *name);
	void (*args)(void *ctx, const char *s, size_t n);
	void (*end)(void *ctx);
	void *ctx;
};
void fe_scan_init(struct fe_scan *s);
void fe_scan_push(struct fe_scan *s, const char *b, size_t n, const struct fe_scan_sink *k);
// a call id in the request's dialect (call_..., toolu_...)
void fe_call_id(enum fe_ids ids, char *out, size_t n, char *item, size_t item_n);
// only white space (a reply with tool calls and nothing else has no content)
int fe_blank(const char *s, size_t n);
// fe_json_close: partial JSON text made whole (open strings and containers
// closed, a dangling key or comma dropped); malloc'd
char *fe_json_close(const char *s, size_t n);
void fe_calls_free(struct fe_call *c, int n);

// --- stop.c: stop sequences with holdback, UTF-8 helpers ----------------------
struct fe_stop {
	const char *const *stops;
	size_t n_stops;
	size_t max_len; // longest stop sequence
	char *buf;      // text not yet released
	size_t len, cap;
	int hit; // index of the stop sequence found, or -1
};

void fe_stop_init(struct fe_stop *s, const char *const *stops, size_t n);
void fe_stop_free(struct fe_stop *s);
// fe_stop_push appends text and returns how many bytes of s->buf may be
// released now (the caller copies them, then calls fe_stop_consume). Once a
// stop sequence is found (s->hit >= 0) the text before it is released and
// the rest is dropped. flush: the stream ended; release everything.
int fe_stop_push(struct fe_stop *s, const char *text, size_t n, int flush, size_t *ready);
void fe_stop_consume(struct fe_stop *s, size_t n);

// fe_utf8_boundary: the largest n' <= n such that s[0..n') does not end
// inside a UTF-8 sequence that continues past n.
size_t fe_utf8_boundary(const char *s, size_t n);
// fe_utf8_clean: a malloc'd, NUL-terminated copy with invalid UTF-8 replaced by U+FFFD.
char *fe_utf8_clean(const char *s, size_t n, size_t *out_len);

// --- metrics.c ------------------------------------------------------------------
enum fe_stage {
	FE_ST_QUEUE,
	FE_ST_TOKENIZE,
	FE_ST_TTFT,
	FE_ST_PREFILL,
	FE_ST_DECODE,
	FE_ST_DETOK,
	FE_ST_TOTAL,
	FE_ST_N
};
void fe_metrics_init(void);
void fe_metrics_request(const char *endpoint, int status);
void fe_metrics_tokens(unsigned in, unsigned out);
void fe_metrics_stage(enum fe_stage st, uint64_t ns);
void fe_metrics_queue(int waiting, int running);
void fe_metrics_upstream(const char *process, int up, uint32_t pid); // counts restarts by pid changes
void fe_metrics_cancel(void);
void fe_metrics_replay(void); // a job the engine lost, submitted again
// the engine's prefix cache as its last final poll reported it
struct fe_cache_stats {
	uint64_t lookups, hit_tokens, evictions, bytes, limit, blocks, stored, windows_dropped;
};
void fe_metrics_cache(const struct fe_cache_stats *c, unsigned cached_tokens);
// a finished job's speculative decoding, added to the totals
void fe_metrics_spec(const struct spec_stats *sp);
void fe_metrics_rejected(void);
// fe_metrics_render: Prometheus text format, malloc'd
char *fe_metrics_render(size_t *len);
// for /health
void fe_metrics_upstream_state(int *tok_up, int *eng_up);

// --- upstream.c: admission queue, workers, upstream calls -------------------------
int fe_upstream_start(const struct fe_config *cfg, char *err);
void fe_upstream_stop(void);
// fe_admit queues g (taking the worker's reference); -1 when the queue is full
int fe_admit(struct fe_gen *g);
// fe_unqueue takes g out of the queue if it is still waiting there; 1 if it was
int fe_unqueue(struct fe_gen *g);
void fe_queue_state(int *waiting, int *running);

// the worker's messages to the loop (implemented by http.c)
enum fe_msg_kind { FE_MSG_START, FE_MSG_TEXT, FE_MSG_DONE };
void fe_post(struct fe_gen *g, enum fe_msg_kind kind, const char *text, size_t len);
// fe_post_chunk: an FE_MSG_TEXT with its choice index and logprob tokens (copied)
void fe_post_chunk(struct fe_gen *g, const struct fe_chunk *c);

// the vocabulary size, -1 until the tokenizer has answered (any thread)
int fe_n_vocab(void);
// whether the model's chat template thinks (fe_think_model), known once the
// vocabulary has been fetched (0 before)
int fe_model_thinks(void);
// the raw bytes a token id adds to the text (the bytes of a logprobs entry);
// NULL when not fetched yet (the worker fetches every id it reports)
const char *fe_token_bytes(int32_t id, size_t *len);

uint64_t fe_now_ns(void);

// the prompt of a request as the engine gets it: the server's default system
// prompt, the chat template (fe_prompt_text), then the encoding. Every
// dialect and /v1/messages/count_tokens go through these.
struct ad_client;
struct ad_client *fe_tok_client(void);
// Both return 0, -1 (the tokenizer failed: 503) or TOKC_BAD_REQUEST (the
// template refused the conversation, or its tools or kwargs: 400).
// think_open (may be NULL) says whether the prompt ends in an open <think>;
// format (16 bytes, may be NULL) the tool-call markup the prompt asks for.
int fe_prompt_text(const struct fe_params *p, char **text, char *format, char *err);
int fe_prompt_ids(const struct fe_params *p, int32_t **ids, size_t *n, int *think_open, char *format, char *err);

// --- http.c: the h2o loop ------------------------------------------------------------
// fe_http_run serves until fe_http_stop (async-signal-safe) is called.
int fe_http_run(const struct fe_config *cfg, char *err);
void fe_http_stop(void);

// --- api-*.c: the dialects ----------------------------------------------------------
struct cJSON;

// a request the server refuses before it reaches a worker
struct fe_bad {
	int status;
	char msg[AD_ERRLEN];
	char param[64]; // the offending field, "" if none
};

// Every renderer returns a malloc'd buffer (*len bytes) or NULL when out of memory.
struct fe_dialect {
	int (*parse)(struct cJSON *body, enum fe_api api, const struct fe_config *cfg, struct fe_params *p,
	             struct fe_bad *bad);
	char *(*response)(const struct fe_gen *g, size_t *len);     // non-stream JSON
	char *(*stream_start)(const struct fe_gen *g, size_t *len); // first events
	char *(*stream_text)(const struct fe_gen *g, const char *s, size_t n, size_t *len);
	// optional: a chunk with its choice index and logprobs (n choices); used
	// instead of stream_text when set
	char *(*stream_chunk)(const struct fe_gen *g, const struct fe_chunk *c, size_t *len);
	char *(*stream_end)(const struct fe_gen *g, size_t *len);                    // last events
	char *(*error)(int status, const char *msg, const char *param, size_t *len); // JSON body
	char *(*stream_error)(int status, const char *msg, size_t *len);             // SSE event(s)
};

// the dialect of a file whose static functions carry the members' names
// (api-openai.c, api-anthropic.c, api-responses.c): one table, not three
#define FE_DIALECT_OF_FILE                                                                                             \
	{                                                                                                              \
		.parse = parse, .response = response, .stream_start = stream_start, .stream_text = stream_text,        \
		.stream_chunk = stream_chunk, .stream_end = stream_end, .error = error, .stream_error = stream_error,  \
	}

extern const struct fe_dialect fe_openai, fe_anthropic;
// api-responses.c: POST /v1/responses
extern const struct fe_dialect fe_responses;
// api-extra.c: POST /v1/messages/count_tokens (Anthropic's shapes) and
// llama.cpp's POST /tokenize, /detokenize, /apply-template
extern const struct fe_dialect fe_count_tokens, fe_llama;
// llama.cpp's error object, {"error":{"code":400,"message":"...","type":"invalid_request_error"}}
struct cJSON *fe_llama_error_json(int status, const char *msg);
// api-llama.c: llama.cpp's POST /completion (a raw completion in its shapes)
extern const struct fe_dialect fe_llama_completion;

// --- api-extra.c: the requests that do not generate ----------------------------------
// They run on a thread of their own (the loop never waits on IPC), not in the
// admission queue, so a busy engine does not hold them up.
int fe_extra_start(const struct fe_config *cfg, char *err);
void fe_extra_stop(void);
int fe_api_generates(enum fe_api api);
// fe_extra_admit queues g (the worker's reference); -1 when too many wait
int fe_extra_admit(struct fe_gen *g);
// GET /v1/models (id NULL) and /v1/models/{id}: NULL with *status 404 for
// an id not served
char *fe_models_json(const char *id, size_t idl, int *status, size_t *len);
// GET /props (llama.cpp's shape): NULL with *status 503 until the tokenizer has answered
char *fe_props_json(int *status, size_t *len);
// the request's "model": at most 256 bytes of valid UTF-8; any id is
// accepted (clients hard-code names) and the reply names the served one
int fe_get_model(struct cJSON *body, const struct fe_config *cfg, struct fe_params *p, struct fe_bad *bad);

// fe_body_parse: a request body (n bytes, not NUL-terminated) as the JSON
// object every POST endpoint takes, or NULL with bad filled (400): malformed
// JSON (naming the byte), bytes after the value, a nesting deeper than
// cJSON's limit (named as the limit), a value that is not an object. What
// the dialects' parse functions get; the fuzz targets start here too.
struct cJSON *fe_body_parse(const char *s, size_t n, struct fe_bad *bad);

// api-common.c: field readers. Each returns 0 when the field is absent (or
// null), 1 when read, -1 with bad filled (status 400, naming the field).
int fe_get_number(struct cJSON *o, const char *key, double lo, double hi, double *out, struct fe_bad *bad);
int fe_get_int(struct cJSON *o, const char *key, long long lo, long long hi, long long *out, struct fe_bad *bad);
int fe_get_bool(struct cJSON *o, const char *key, int *out, struct fe_bad *bad);
int fe_get_string(struct cJSON *o, const char *key, const char **out, struct fe_bad *bad);
// the fields a request cannot go without: fe_get_required gives the value,
// or NULL with bad filled ("'key' is required"); fe_get_list a non-empty
// array in *out and its length, or -1
struct cJSON *fe_get_required(struct cJSON *o, const char *key, struct fe_bad *bad);
int fe_get_list(struct cJSON *o, const char *key, struct cJSON **out, struct fe_bad *bad);
// tools, tool_choice and parallel_tool_calls in OpenAI's shapes (shape
// FE_TOOLS_CHAT or FE_TOOLS_RESPONSES): tool_choice is none, auto, required
// or a named function, {"type": "function", "function": {"name"}} in chat
// completions, {"type": "function", "name"} in responses
int fe_openai_tools(struct cJSON *body, enum fe_tool_shape shape, struct fe_params *p, struct fe_bad *bad);
// stops: a string or an array of strings
int fe_get_stops(struct cJSON *o, const char *key, struct fe_params *p, struct fe_bad *bad);

// --- api-chat.c: what chat requests give the template besides text --------------------
// The history: OpenAI messages' tool_calls (assistant), tool_call_id and
// name (role "tool") and reasoning_content; Anthropic content blocks text,
// thinking (kept as the turn's reasoning), redacted_thinking (dropped),
// tool_use (calls) and tool_result (a tool turn each, before the user's
// text; is_error puts "Error: " before the result). The tools are
// tools.c's (fe_tool_add), their JSON in p->tools_json. The thinking switches: OpenAI's
// chat_template_kwargs, reasoning_effort (none/minimal: the template's
// no-think form; the value reaches the template as reasoning_effort too)
// and reasoning_format ("none" keeps the thinking in the text); Anthropic's
// thinking {type enabled | disabled}. Each returns 0 or -1 with bad filled
// (400 naming the field).
int fe_chat_openai_message(struct cJSON *m, const char *where, struct tok_msg *out, struct fe_bad *bad);
int fe_chat_openai_thinking(struct cJSON *body, struct fe_params *p, struct fe_bad *bad);
int fe_chat_anthropic_thinking(struct cJSON *body, struct fe_params *p, struct fe_bad *bad);
// the messages one Anthropic message becomes (at most 1 + its tool_result
// blocks), appended to p->msgs (room for them is the caller's)
int fe_chat_anthropic_message(struct cJSON *m, int i, struct fe_params *p, struct fe_bad *bad);
// how many messages an Anthropic message can become
int fe_chat_anthropic_count(struct cJSON *m);
// the tool turns of p->msgs from index from on answer a call made before
// them (else 400 naming field); a tool turn without a name takes its call's
int fe_chat_check_tool_turns(struct fe_params *p, size_t from, struct fe_bad *bad, const char *field);
void fe_msg_free(struct tok_msg *m); // what a parsed message holds
// text content: a string, or an array of text blocks ({"type":"text","text":...} or strings) joined
// with "\n"; where names the field in messages
int fe_get_text(struct cJSON *v, const char *where, char **out, struct fe_bad *bad);
int fe_bad_set(struct fe_bad *bad, int status, const char *param, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
// the sampling fields every dialect shares
int fe_get_sampling(struct cJSON *o, struct fe_params *p, struct fe_bad *bad);
struct cJSON *fe_timings_json(const struct fe_gen *g);
// fe_json_text: a malloc'd JSON rendering of o (consumed), *len bytes
char *fe_json_print(struct cJSON *o, size_t *len);
// fe_sse: o (consumed) as one server-sent "data:" event, "data: {...}\n\n"
char *fe_sse(struct cJSON *o, size_t *len);

// Server-sent events built up in one buffer: fe_sse_event appends "event:
// NAME\ndata: JSON\n\n" and deletes o; fe_sse_done hands the buffer over
// (NULL when an append ran out of memory, which it then freed)
struct fe_sse {
	char *s;
	size_t len;
	int oom;
};
void fe_sse_event(struct fe_sse *e, const char *name, struct cJSON *o);
char *fe_sse_done(struct fe_sse *e, size_t *len);
// fe_add_text adds a string field from model text (invalid UTF-8 replaced)
void fe_add_text(struct cJSON *o, const char *key, const char *s, size_t n);
void fe_new_id(struct fe_gen *g, const char *prefix);

#endif
