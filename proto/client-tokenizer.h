// client-tokenizer.h - talking to anedvd-tokenizer (proto/tokenizer.proto).
//
// Thin typed wrappers over ad_rpc_call (proto/rpc.h): each sends one
// request body, waits for the TokReply and turns every failure into -1 with
// rpc.h's one mapping (the message names the service). Health is rpc.h's
// ad_rpc_health(c, &ad_rpc_tokenizer, ...). Safe to call from several
// threads on one client.
#ifndef AD_TOK_CLIENT_H
#define AD_TOK_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "gen-types.h"
#include "ipc.h"
#include "rpc.h"

int tokc_encode(struct ad_client *c, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
                size_t *n_ids, int timeout_ms, char *err);
int tokc_decode(struct ad_client *c, const int32_t *ids, size_t n, char **text, size_t *len, int timeout_ms, char *err);
// tokc_token_bytes: the raw bytes each id adds to a decoded stream; bytes[i]
// (malloc'd, NUL-terminated, the caller frees each and the array) and len[i]
int tokc_token_bytes(struct ad_client *c, const int32_t *ids, size_t n, char ***bytes, size_t *len, int timeout_ms,
                     char *err);
// pending: in/out, at most 4 bytes; *text malloc'd
int tokc_decode_stream(struct ad_client *c, const int32_t *ids, size_t n, int flush, char pending[4], size_t *n_pending,
                       char **text, size_t *len, int timeout_ms, char *err);
int tokc_chat(struct ad_client *c, const struct tok_msg *msgs, size_t n, int add_generation_prompt, char **text,
              int timeout_ms, char *err);
// the same with the tools (a JSON array of OpenAI-style tools), the thinking
// switch (-1 the template's default, 0 off, 1 on) and extra template
// variables (a JSON object); format (may be NULL) gets the reply's
// tool_format ("" without tools). TOKC_BAD_REQUEST instead of -1 when the
// service refused the conversation (the template's raise_exception, tools
// or kwargs that are not JSON, an unknown role): the caller's 400, not 503.
#define TOKC_BAD_REQUEST (-2)
struct tokc_chat_opts {
	const char *tools;
	int enable_thinking;
	const char *kwargs;
};
int tokc_chat_with(struct ad_client *c, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
                   const struct tokc_chat_opts *o, char **text, char *format, size_t format_cap, int timeout_ms,
                   char *err);
// the stop set is the tokenizer's: eog holds every id that ends a
// generation (EOS, EOT, EOM and the model's other end tokens), which a
// generation stops on; eos and eot are for display and templates
#define TOKC_MAX_EOG 64 // as many as the service sends
struct tokc_vocab {
	int32_t n_vocab, bos, eos, eot;
	int32_t eog[TOKC_MAX_EOG];
	int n_eog;
	int add_bos;
	char model[16];
	char chat_template[16];
};
int tokc_vocab(struct ad_client *c, struct tokc_vocab *v, int timeout_ms, char *err);
// the same, with the model's texts (malloc'd, "" when absent; t may be NULL)
struct tokc_vocab_texts {
	char *chat_template; // the template source
	char *bos, *eos;     // the BOS and EOS pieces
};
int tokc_vocab_texts(struct ad_client *c, struct tokc_vocab *v, struct tokc_vocab_texts *t, int timeout_ms, char *err);
void tokc_vocab_texts_free(struct tokc_vocab_texts *t);
// tokc_pieces: llama.cpp's piece of each id (control tokens as their text,
// byte tokens as raw bytes, no space removed), concatenated into *text;
// piece i is (*text)[ends[i-1] .. ends[i]). Both malloc'd.
int tokc_pieces(struct ad_client *c, const int32_t *ids, size_t n, char **text, size_t *len, size_t **ends,
                int timeout_ms, char *err);

#endif
