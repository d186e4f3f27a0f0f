// service.h - the anedvd-tokenizer service: TokRequest in, TokReply out.
//
// tok_service_handle is an ad_ipc_handler (common/ipc.h): proto/rpc.h's
// dispatch decodes one protobuf TokRequest, answers Health, runs the rest
// against the loaded tokenizer and encodes the TokReply. A request it cannot decode, or one with an invalid field, gets
// a reply with an ERROR_BAD_REQUEST error; it never crashes the service.
// The tokenizer is immutable, so any number of threads may call it at once.
#ifndef AD_TOK_SERVICE_H
#define AD_TOK_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "rpc.h"
#include "tokenizer.h"

struct tok_service {
	const struct tokenizer *t;
	struct ad_rpc_server rpc; // the dispatch (proto/rpc.h); Health reports its process name
};

void tok_service_init(struct tok_service *s, const struct tokenizer *t, const char *process);
void tok_service_handle(void *arg, const uint8_t *req, size_t req_len, uint8_t **reply, size_t *reply_len);

#endif
