// tokenizer.h - text <-> token ids for llama-family models, and chat prompts.
//
// A tokenizer is loaded once, is immutable afterwards and may be shared by
// threads. Two model kinds exist: SentencePiece (llama SPM: score-ordered
// merges over characters, byte fallback <0xNN>) and byte-level BPE (GPT-2
// byte map, ranked merges, a pre-tokenizer regex chosen by
// tokenizer.ggml.pre). Encoding follows llama.cpp's llama_tokenize: special
// token text is matched (control and user-defined tokens, longest first)
// only when parse_special is set, except that user-defined tokens are always
// matched; BOS/EOS are added per the model's add_bos/add_eos unless the
// caller overrides. Decoding skips control tokens; SentencePiece decoding
// drops the one leading space the encoder put in front of the text.
//
// Inputs are arbitrary bytes: invalid UTF-8 never crashes and never loses
// bytes (it goes through byte tokens), so decode(encode(x)) == x except
// where the model itself normalises (NFC in Qwen's tokenizer.json; an SPM
// model reads a literal U+2581 as a space). Every function that can fail
// returns 0 / -1 (or NULL) and fills err (AD_ERRLEN bytes, may be NULL).
#ifndef AD_TOKENIZER_H
#define AD_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gen-types.h" // enum tok_role, struct tok_call, struct tok_msg

struct gguf;
struct tokenizer; // opaque; see tokenizer-impl.h

// tok_load accepts: a .gguf file; a Hugging Face directory (tokenizer.json
// plus tokenizer_config.json if present); a tokenizer.json file (its sibling
// tokenizer_config.json is read if present); a llama2.c tokenizer .bin.
struct tokenizer *tok_load(const char *path, char *err);
// tok_load_gguf copies what it needs; g may be closed afterwards.
struct tokenizer *tok_load_gguf(const struct gguf *g, char *err);
void tok_free(struct tokenizer *t); // NULL is fine

// add_bos: 1 add, 0 don't, -1 the model's default (add_bos_token); the
// model's add_eos is applied only when add_bos is -1 or 1.
// *ids is malloc'd (the caller frees it; non-NULL even for zero ids).
int tok_encode(const struct tokenizer *t, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
               size_t *n_ids, char *err);

// tok_decode renders ids as text: control tokens are skipped, byte tokens
// are assembled, the SPM space prefix is removed from the first token.
// *out is malloc'd and NUL-terminated. Ids out of range are an error.
int tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err);

// tok_detokenize is tok_decode, then llama.cpp's clean_spaces where the
// vocabulary asks for it (a byte-level BPE vocabulary unless its
// tokenizer.ggml.pre name turns it off, WordPiece, a tokenizer.json whose
// tokenizer_config.json sets clean_up_tokenization_spaces): the space
// before ? ! . , goes, so does the one on each side of a lone ', and the
// one before 's 'm 're 've. For the text of a whole sequence (llama.cpp's
// llama_detokenize); tok_decode is the exact bytes.
int tok_detokenize(const struct tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err);
// the vocabulary's clean_spaces (see tok_detokenize)
int tok_clean_spaces(const struct tokenizer *t);

// Streaming detokenisation: push one id at a time and get the bytes that are
// ready. An incomplete UTF-8 sequence at the end is held back until a later
// token completes it (at most 3 bytes, or flushed as is by tok_stream_flush
// or when the next bytes show it can never complete). The stream treats the
// ids as a continuation of earlier text: no leading space is removed.
struct tok_stream {
	const struct tokenizer *t;
	char hold[4]; // bytes of an unfinished UTF-8 character
	size_t n_hold;
	char buf[1024]; // output of the last push/flush
	char *big;      // used instead of buf for longer pieces; see tok_stream_free
	size_t big_cap;
};

void tok_stream_init(struct tok_stream *s, const struct tokenizer *t);
// tok_stream_push returns a pointer to *n ready bytes (valid until the next
// call), or NULL with err filled when id is out of range.
const char *tok_stream_push(struct tok_stream *s, int32_t id, size_t *n, char *err);
// tok_stream_flush hands out whatever is held back (an unfinished character).
const char *tok_stream_flush(struct tok_stream *s, size_t *n);
void tok_stream_free(struct tok_stream *s); // frees the buffer for long pieces, if any

// --- vocabulary ------------------------------------------------------------
int32_t tok_n_vocab(const struct tokenizer *t);
int32_t tok_bos(const struct tokenizer *t); // -1 when the model has none
int32_t tok_eos(const struct tokenizer *t);
int32_t tok_eot(const struct tokenizer *t);            // end of turn (<|eot_id|>, <|im_end|>, <end_of_turn>, ...)
int tok_add_bos(const struct tokenizer *t);            // the model's default
int tok_is_eog(const struct tokenizer *t, int32_t id); // ends generation: eos, eot, eom and their kin
int tok_is_control(const struct tokenizer *t, int32_t id);
// tok_piece is the vocabulary string as stored (SPM "▁the", BPE "Ġthe");
// NULL for ids out of range. Not NUL-terminated in general: use *len.
const char *tok_piece(const struct tokenizer *t, int32_t id, size_t *len);
// tok_token_text is the text an id decodes to ("" for control tokens).
const char *tok_token_text(const struct tokenizer *t, int32_t id, size_t *len);
// tok_find: the id whose piece is exactly s[0..n), or -1.
int32_t tok_find(const struct tokenizer *t, const char *s, size_t n);
const char *tok_kind_name(const struct tokenizer *t); // "spm" or "bpe"

// --- chat ------------------------------------------------------------------
enum tok_chat_family {
	TOK_CHAT_PLAIN = 0, // "User: ...\nAssistant:" transcript
	TOK_CHAT_CHATML,    // <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM)
	TOK_CHAT_LLAMA2,    // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST]
	TOK_CHAT_LLAMA3,    // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
	TOK_CHAT_GEMMA,     // <start_of_turn>user\n...<end_of_turn>\n
	TOK_CHAT_PHI3,      // <|user|>\n...<|end|>\n
	TOK_CHAT_ZEPHYR,    // <|user|>\n...</s>\n
};

// The family detected from the model's chat template (GGUF
// tokenizer.chat_template or tokenizer_config.json chat_template) by
// substring probes: the built-in renderer used when the template itself
// cannot be run (see tok_chat_render).
enum tok_chat_family tok_chat_family(const struct tokenizer *t);
const char *tok_chat_family_name(enum tok_chat_family f); // "chatml", "llama2", ...
// The raw template text, or NULL when the model carries none.
const char *tok_chat_template(const struct tokenizer *t);

// tok_chat_render renders msgs as a prompt string with the model's own chat
// template (chat-jinja.c): GGUF tokenizer.chat_template (its .tool_use
// variant when tools are given and the model has one), an HF directory's
// chat_template.jinja or tokenizer_config.json chat_template (the "default"
// or "tool_use" entry of a list), run by the Jinja interpreter (jinja.h)
// with the variables Hugging Face's apply_chat_template passes: messages
// (role, content, reasoning_content, tool_calls with their arguments as an
// object, tool_call_id and name), tools, documents (none),
// add_generation_prompt, bos_token, eos_token, then the kwargs' variables
// and enable_thinking. A template that cannot be run (it does not parse,
// uses what the interpreter lacks, fails at run time, or goes past the
// render's bounds) falls back to the built-in family renderer with one log
// line saying why; a template that calls raise_exception() is an error
// ("chat template: <its message>"), as are tools or kwargs that are not a
// JSON array / object or kwargs that set messages, tools, documents or
// add_generation_prompt. Like llama.cpp, a leading BOS text is dropped when
// the encoder adds the BOS itself (and a trailing EOS text when it adds
// that), so: encode the result with add_bos = -1 and parse_special = 1.
// *how (may be NULL) says what rendered it: "jinja" or the family's name.
// *out is malloc'd and NUL-terminated. strftime_now() reads the local
// clock, or ANEDVD_TEMPLATE_NOW (seconds since the epoch, shown in UTC).
struct tok_chat_opts {
	const char *tools;   // JSON array of OpenAI-style tools; NULL or "": none
	int enable_thinking; // -1 the template's default, 0 off, 1 on
	const char *kwargs;  // JSON object of extra template variables; NULL or "": none
	int native;          // 1: the built-in family renderer even when the template runs
};
int tok_chat_render(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
                    const struct tok_chat_opts *o, char **out, const char **how, char *err);
// whether the model's template is run (else *why, if non-NULL, says why not)
int tok_chat_jinja(const struct tokenizer *t, const char **why);

// tok_apply_chat: tok_chat_render without tools or options.
int tok_apply_chat(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
                   char **out, char *err);
// The built-in renderer of a family, never the template (tests; forcing a
// template from the CLI). Like llama.cpp's built-in templates it never
// starts with the BOS text; later BOS/EOS texts inside the prompt (Llama 2
// turns) are written out as text. Tool turns render as user turns under
// the role name "tool"; tool calls and tools are not shown.
int tok_apply_chat_family(const struct tokenizer *t, enum tok_chat_family f, const struct tok_msg *msgs, size_t n,
                          int add_generation_prompt, char **out, char *err);

// --- tools (chat-tools.c) -------------------------------------------------------
// Tool definitions, tool calls and tool results for a template that cannot
// write them (the built-in family renderers; templates without tools): the
// conversation becomes one of plain turns. The tools (tools_json, an
// OpenAI-style array [{"type": "function", "function": {name, description,
// parameters}}], NULL or "" for none) are described at the end of the system
// turn (one is added first when there is none), with the one way to call
// them, the "generic" markup:
//   {"tool_call": {"name": NAME, "arguments": {...}}}
//   {"tool_calls": [{"name": NAME, "arguments": {...}}, ...]}
// An assistant turn's calls are written after its text in that markup; a
// tool turn becomes a user turn "Result of NAME (CALL_ID): CONTENT". *out
// and the strings it points to are malloc'd; free them with
// tok_chat_plain_free(*out, *n_out). (TOK_TOOL_FORMAT_GENERIC, that
// markup's name: common/gen-types.h)
int tok_chat_tools_plain(const struct tok_msg *msgs, size_t n, const char *tools_json, struct tok_msg **out,
                         size_t *n_out, char *err);
void tok_chat_plain_free(struct tok_msg *msgs, size_t n);
// whether a conversation needs tok_chat_tools_plain: tools, calls or tool turns
int tok_chat_has_tools(const struct tok_msg *msgs, size_t n, const char *tools_json);
// tok_chat_render_tools: tok_chat_render with the tools, calls and results
// in a markup the reply can be parsed in: the model's own template writes
// them when it runs and names a markup anedvd knows (hermes, mistral,
// llama3: tok_tool_format of its tool_use variant, else of itself);
// otherwise (a built-in renderer, a template without tools or with another
// markup) the conversation is first made plain (tok_chat_tools_plain) in
// the generic markup. *format says which ("" without tools).
int tok_chat_render_tools(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
                          const struct tok_chat_opts *o, char **out, const char **how, const char **format, char *err);
// the tool-call markup a template asks for, by what it writes: "hermes"
// (<tool_call>...</tool_call>), "mistral" ([TOOL_CALLS][...]), "llama3"
// ({"name": ..., "parameters": ...}), else "generic"
const char *tok_tool_format(const char *template_text);

#endif
