// client.h - talking to anedvd-tokenizer.
//
// Thin typed wrappers over ad_client_call: each builds a TokRequest, waits
// for the TokReply and turns an error reply into -1 with the service's
// message. Safe to call from several threads on one client.
#ifndef AD_TOK_CLIENT_H
#define AD_TOK_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "ipc.h"
#include "tokenizer.h"

int tokc_encode(struct ad_client *c, const char *text, size_t len, int add_bos, int parse_special,
                int32_t **ids, size_t *n_ids, int timeout_ms, char *err);
int tokc_decode(struct ad_client *c, const int32_t *ids, size_t n, char **text, size_t *len, int timeout_ms,
                char *err);
// tokc_token_bytes: the raw bytes each id adds to a decoded stream; bytes[i]
// (malloc'd, NUL-terminated, the caller frees each and the array) and len[i]
int tokc_token_bytes(struct ad_client *c, const int32_t *ids, size_t n, char ***bytes, size_t *len, int timeout_ms,
                     char *err);
// pending: in/out, at most 4 bytes; *text malloc'd
int tokc_decode_stream(struct ad_client *c, const int32_t *ids, size_t n, int flush, char pending[4],
                       size_t *n_pending, char **text, size_t *len, int timeout_ms, char *err);
int tokc_chat(struct ad_client *c, const struct tok_msg *msgs, size_t n, int add_generation_prompt, char **text,
              int timeout_ms, char *err);
struct tokc_vocab {
	int32_t n_vocab, bos, eos, eot;
	int add_bos;
	char model[16];
	char chat_template[16];
};
int tokc_vocab(struct ad_client *c, struct tokc_vocab *v, int timeout_ms, char *err);
int tokc_health(struct ad_client *c, uint32_t *pid, int timeout_ms, char *err);

#endif
