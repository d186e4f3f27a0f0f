// guard.h - the checks every request passes before it is routed (guard.c):
// API keys, Host (DNS rebinding), Origin (CORS), the JSON content type, the
// request framing, and h2o's own rejections in the dialect's JSON.
//
// Each check returns 0 when the request may go on, else the HTTP status to
// answer with and a message (naming the flag that would allow it) in msg.
#ifndef AD_GUARD_H
#define AD_GUARD_H

#include <h2o.h>

#include "fe.h"

// 401 unless the request carries one of cfg's keys (Authorization: Bearer
// or x-api-key), compared in constant time; /health and the WebUI page are
// open. Nothing is asked when no key is set.
int fe_guard_auth(const struct fe_config *cfg, h2o_req_t *req, char *msg, size_t cap);
// 403 when the Host header names neither the bound address, a localhost
// name, an IP literal nor an --allowed-host name
int fe_guard_host(const struct fe_config *cfg, h2o_req_t *req, char *msg, size_t cap);
// 403 when the request has an Origin that is not the server's own, a
// loopback one or a --cors-origin
int fe_guard_origin(const struct fe_config *cfg, h2o_req_t *req, char *msg, size_t cap);
// the CORS headers of a response: the request's Origin echoed when allowed
void fe_guard_cors(const struct fe_config *cfg, h2o_req_t *req);
// 415 unless Content-Type is application/json (parameters allowed)
int fe_guard_json_type(h2o_req_t *req, char *msg, size_t cap);
// 400 for two different Content-Lengths, Content-Length beside
// Transfer-Encoding, or two Transfer-Encodings; head: the raw request head
// (NULL when unknown)
int fe_guard_framing(h2o_req_t *req, const char *head, size_t head_len, char *msg, size_t cap);
// the filter on the host's fallback path that gives h2o's own error
// responses the dialect's JSON body
void fe_guard_register(h2o_pathconf_t *fallback, const struct fe_config *cfg);

#endif
