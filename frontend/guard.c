// guard.c - who may talk to the server and how: API keys, the Host and
// Origin checks, the JSON content type, the request framing, and h2o's own
// rejections in the dialect's JSON. See fe.h (fe_guard_*).
//
// Why each check exists:
// - An API key (when one is set) keeps other users and other machines out.
// - A browser page of any site can send requests to a loopback server. A
//   POST whose Content-Type is text/plain, a form type or none is a "simple"
//   request that the browser sends without asking first (no preflight);
//   requiring application/json makes every cross-site POST preflighted, and
//   the preflight is answered only for allowed origins. A request that
//   carries a foreign Origin is refused outright.
// - DNS rebinding: a site's own name re-pointed at 127.0.0.1 makes its page
//   same-origin with the server; the Host header then still names the site,
//   so a Host that is not the bound address, a localhost name, an IP
//   literal or an --allowed-host name is refused. (An IP literal cannot be
//   rebound: a page can only send it when it was loaded from that address.)
// - Two different Content-Lengths, or a Content-Length beside a
//   Transfer-Encoding, mean that this server and a proxy in front of it may
//   disagree on where the body ends (request smuggling): refused, and the
//   connection closed. h2o keeps neither header in req->headers, so the
//   request head is read back from the connection's input buffer.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <h2o.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fe.h"
#include "guard.h"

// --- small string helpers ----------------------------------------------------------------

static int
ieq(const char *a, size_t an, const char *b, size_t bn)
{
	return an == bn && strncasecmp(a, b, an) == 0;
}

static void
trim(const char **s, size_t *n)
{
	while (*n && (**s == ' ' || **s == '\t')) {
		(*s)++;
		(*n)--;
	}
	while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r'))
		(*n)--;
}

// the value of a request header (the first of that name), or NULL
static const char *
header(h2o_req_t *req, const h2o_token_t *tok, size_t *len)
{
	ssize_t i = h2o_find_header(&req->headers, tok, -1);
	if (i < 0)
		return NULL;
	*len = req->headers.entries[i].value.len;
	return req->headers.entries[i].value.base;
}

static const char *
header_str(h2o_req_t *req, const char *name, size_t *len)
{
	ssize_t i = h2o_find_header_by_str(&req->headers, name, strlen(name), -1);
	if (i < 0)
		return NULL;
	*len = req->headers.entries[i].value.len;
	return req->headers.entries[i].value.base;
}

// printable for a message: at most 100 bytes, control bytes as '?'
static void
shown(char *out, size_t cap, const char *s, size_t n)
{
	size_t j = 0;
	for (size_t i = 0; i < n && j + 4 < cap && i < 100; i++)
		out[j++] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? '?' : s[i];
	if (n > 100 && j + 4 < cap) {
		memcpy(out + j, "...", 3);
		j += 3;
	}
	out[j] = 0;
}

// --- keys ----------------------------------------------------------------------------------

int
fe_key_valid(const char *k)
{
	size_t n = strlen(k);
	if (n == 0 || n > FE_MAX_KEY_LEN)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)k[i] <= 0x20 || (unsigned char)k[i] >= 0x7f || k[i] == ',')
			return 0;
	return 1;
}

// the time taken depends on the length of the key only, never on where a
// guess first differs
static int
key_eq(const char *key, const char *got, size_t got_len)
{
	size_t n = strlen(key);
	unsigned char d = got_len != n;
	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)key[i] ^ (unsigned char)(i < got_len ? got[i] : 0);
	return d == 0;
}

static int
key_ok(const struct fe_config *cfg, const char *got, size_t len)
{
	int ok = 0;
	for (size_t i = 0; i < cfg->n_api_keys; i++)
		ok |= key_eq(cfg->api_keys[i], got, len); // every key, no early exit
	return ok;
}

static int
open_path(h2o_req_t *req)
{
	static const char *open[] = {"/health", "/", "/index.html"};
	for (size_t i = 0; i < sizeof open / sizeof open[0]; i++)
		if (h2o_memis(req->path_normalized.base, req->path_normalized.len, open[i], strlen(open[i])))
			return 1;
	return 0;
}

int
fe_guard_auth(const struct fe_config *cfg, h2o_req_t *req, char *msg, size_t cap)
{
	if (cfg->n_api_keys == 0 || open_path(req))
		return 0;
	size_t n = 0;
	const char *v = header(req, H2O_TOKEN_AUTHORIZATION, &n);
	int sent = 0;
	if (v) {
		trim(&v, &n);
		if (n > 7 && strncasecmp(v, "bearer ", 7) == 0) {
			v += 7;
			n -= 7;
			trim(&v, &n);
			sent = 1;
			if (key_ok(cfg, v, n))
				return 0;
		}
	}
	if ((v = header_str(req, "x-api-key", &n))) {
		trim(&v, &n);
		sent = 1;
		if (key_ok(cfg, v, n))
			return 0;
	}
	if (sent)
		snprintf(msg, cap, "invalid API key");
	else
		snprintf(msg, cap,
		         "this server needs an API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'");
	return 401;
}

// --- Host ----------------------------------------------------------------------------------

// the host part of an authority or an origin's host[:port]: "[::1]" keeps
// its brackets; one trailing dot is dropped
static void
host_part(const char *a, size_t n, const char **h, size_t *hl)
{
	*h = a;
	if (n && a[0] == '[') {
		const char *e = memchr(a, ']', n);
		*hl = e ? (size_t)(e - a) + 1 : n;
		return;
	}
	const char *c = memchr(a, ':', n);
	*hl = c ? (size_t)(c - a) : n;
	if (*hl > 1 && a[*hl - 1] == '.')
		(*hl)--;
}

static int
is_localhost(const char *h, size_t n)
{
	return ieq(h, n, "localhost", 9) || (n > 10 && ieq(h + n - 10, 10, ".localhost", 10));
}

static int
is_ip_literal(const char *h, size_t n, int loopback_only)
{
	char b[64];
	unsigned char a[16];
	if (n == 0 || n >= sizeof b)
		return 0;
	if (h[0] == '[') {
		if (n < 3 || h[n - 1] != ']')
			return 0;
		memcpy(b, h + 1, n - 2);
		b[n - 2] = 0;
		if (inet_pton(AF_INET6, b, a) != 1)
			return 0;
		static const unsigned char one[16] = {[15] = 1};
		return !loopback_only || memcmp(a, one, 16) == 0;
	}
	memcpy(b, h, n);
	b[n] = 0;
	if (inet_pton(AF_INET, b, a) != 1)
		return 0;
	return !loopback_only || a[0] == 127;
}

int
fe_guard_host(const struct fe_config *cfg, h2o_req_t *req, char *msg, size_t cap)
{
	if (cfg->hosts_any)
		return 0;
	// no Host header: h2o put its default authority there. Browsers always
	// send one, so a request without it is not a rebinding attack.
	if (req->hostconf && req->input.authority.base == req->hostconf->authority.hostport.base)
		return 0;
	const char *h;
	size_t hl;
	host_part(req->input.authority.base, req->input.authority.len, &h, &hl);
	if (is_localhost(h, hl) || is_ip_literal(h, hl, 0))
		return 0;
	// the name the server was told to listen on
	const char *l = cfg->listen, *c = strrchr(l, ':');
	if (c && ieq(h, hl, l, (size_t)(c - l)))
		return 0;
	for (size_t i = 0; i < cfg->n_allowed_hosts; i++)
		if (ieq(h, hl, cfg->allowed_hosts[i], strlen(cfg->allowed_hosts[i])))
			return 0;
	char s[128];
	shown(s, sizeof s, h, hl);
	snprintf(
		msg, cap,
		"the Host header '%s' is not an address of this server; start it with --allowed-host %s to accept that name",
		s, s);
	return 403;
}

// --- Origin and CORS -----------------------------------------------------------------------

static int
origin_allowed(const struct fe_config *cfg, h2o_req_t *req, const char *o, size_t n)
{
	if (cfg->cors_any)
		return 1;
	while (n && o[n - 1] == '/')
		n--;
	for (size_t i = 0; i < cfg->n_cors_origins; i++) {
		const char *a = cfg->cors_origins[i];
		size_t an = strlen(a);
		while (an && a[an - 1] == '/')
			an--;
		if (ieq(o, n, a, an))
			return 1;
	}
	const char *rest;
	if (n > 7 && strncasecmp(o, "http://", 7) == 0)
		rest = o + 7;
	else if (n > 8 && strncasecmp(o, "https://", 8) == 0)
		rest = o + 8;
	else
		return 0;
	size_t rn = n - (size_t)(rest - o);
	// the server's own origin: the page it serves at / (the Host passed its check)
	if (strncasecmp(o, "http://", 7) == 0 && ieq(rest, rn, req->input.authority.base, req->input.authority.len))
		return 1;
	const char *h;
	size_t hl;
	host_part(rest, rn, &h, &hl);
	if (hl < rn && rest[hl] != ':')
		return 0; // a path or garbage after the host
	return is_localhost(h, hl) || is_ip_literal(h, hl, 1);
}

int
fe_guard_origin(const struct fe_config *cfg, h2o_req_t *req, char *msg, size_t cap)
{
	size_t n = 0;
	const char *o = header_str(req, "origin", &n);
	if (!o || origin_allowed(cfg, req, o, n))
		return 0;
	char s[128];
	shown(s, sizeof s, o, n);
	snprintf(msg, cap,
	         "requests from the origin '%s' are refused; start the server with --cors-origin %s to allow it "
	         "(or --cors-origin '*' for every origin)",
	         s, s);
	return 403;
}

static void
add_hdr(h2o_req_t *req, const char *name, const char *v, size_t n)
{
	h2o_add_header_by_str(&req->pool, &req->res.headers, name, strlen(name), 1, NULL, v, n);
}

void
fe_guard_cors(const struct fe_config *cfg, h2o_req_t *req)
{
	size_t n = 0;
	const char *o = header_str(req, "origin", &n);
	add_hdr(req, "vary", H2O_STRLIT("Origin"));
	if (!o || !origin_allowed(cfg, req, o, n))
		return;
	if (cfg->cors_any)
		add_hdr(req, "access-control-allow-origin", H2O_STRLIT("*"));
	else
		add_hdr(req, "access-control-allow-origin", o, n);
	// "*" in Allow-Headers does not cover Authorization: name what the
	// preflight asks for
	size_t rn = 0;
	const char *rh = header_str(req, "access-control-request-headers", &rn);
	if (rh && rn)
		add_hdr(req, "access-control-allow-headers", rh, rn);
	else
		add_hdr(req, "access-control-allow-headers", H2O_STRLIT("authorization, x-api-key, content-type"));
	add_hdr(req, "access-control-allow-methods", H2O_STRLIT("GET, POST, OPTIONS"));
	add_hdr(req, "access-control-expose-headers", H2O_STRLIT("*"));
}

// --- Content-Type --------------------------------------------------------------------------

int
fe_guard_json_type(h2o_req_t *req, char *msg, size_t cap)
{
	size_t n = 0;
	const char *v = header(req, H2O_TOKEN_CONTENT_TYPE, &n);
	if (v) {
		const char *semi = memchr(v, ';', n);
		size_t tn = semi ? (size_t)(semi - v) : n;
		const char *t = v;
		trim(&t, &tn);
		if (ieq(t, tn, "application/json", 16))
			return 0;
	}
	char s[128];
	shown(s, sizeof s, v ? v : "", v ? n : 0);
	if (v)
		snprintf(msg, cap, "the request body must be sent as Content-Type: application/json, not '%s'", s);
	else
		snprintf(msg, cap,
		         "the request has no Content-Type: send the JSON body as Content-Type: application/json");
	return 415;
}

// --- framing -------------------------------------------------------------------------------

int
fe_guard_framing(h2o_req_t *req, const char *head, size_t head_len, char *msg, size_t cap)
{
	if (!head || req->entity.base == NULL)
		return 0;
	// the head must be this request's: it starts with its method
	if (head_len < req->input.method.len || memcmp(head, req->input.method.base, req->input.method.len) != 0)
		return 0;
	const char *cl = NULL;
	size_t cll = 0;
	int n_te = 0;
	const char *p = memchr(head, '\n', head_len), *end = head + head_len;
	while (p && p + 1 < end) {
		const char *line = p + 1;
		p = memchr(line, '\n', (size_t)(end - line));
		size_t ln = p ? (size_t)(p - line) : (size_t)(end - line);
		const char *colon = memchr(line, ':', ln);
		if (!colon)
			continue; // the blank line ending the head, or a continuation
		size_t nl = (size_t)(colon - line);
		const char *v = colon + 1;
		size_t vn = ln - nl - 1;
		trim(&v, &vn);
		if (ieq(line, nl, "transfer-encoding", 17)) {
			n_te++;
		} else if (ieq(line, nl, "content-length", 14)) {
			if (cl && (vn != cll || memcmp(v, cl, vn) != 0)) {
				snprintf(msg, cap, "the request has two different Content-Length headers");
				return 400;
			}
			cl = v;
			cll = vn;
		}
	}
	if (cl && n_te) {
		snprintf(msg, cap, "the request has both Content-Length and Transfer-Encoding");
		return 400;
	}
	if (n_te > 1) {
		snprintf(msg, cap, "the request has more than one Transfer-Encoding header");
		return 400;
	}
	return 0;
}

// --- h2o's own errors ----------------------------------------------------------------------

// h2o answers some requests itself before any handler sees them (a body over
// its limit, a broken Content-Length or chunked body, an unknown Expect):
// those go through the host's fallback path, whose filter swaps h2o's plain
// text for the dialect's JSON. Requests it cannot parse at all (a broken
// request line, a head over its size limit) get h2o's fixed plain-text 400
// written straight to the socket: no filter sees them.
struct fe_guard_filter {
	h2o_filter_t super;
	const struct fe_config *cfg;
};

struct err_ostream {
	h2o_ostream_t super;
	const struct fe_config *cfg;
	int sent;
};

static void
err_send(h2o_ostream_t *self, h2o_req_t *req, h2o_iovec_t *in, size_t nin, h2o_send_state_t state)
{
	struct err_ostream *o = (void *)self;
	if (o->sent) {
		h2o_ostream_send_next(self, req, NULL, 0, state);
		return;
	}
	o->sent = 1;
	char what[200] = "";
	size_t w = 0;
	for (size_t i = 0; i < nin && w + 1 < sizeof what; i++) {
		size_t k = in[i].len < sizeof what - 1 - w ? in[i].len : sizeof what - 1 - w;
		memcpy(what + w, in[i].base, k);
		w += k;
	}
	what[w] = 0;
	char msg[AD_ERRLEN];
	if (req->res.status == 413)
		snprintf(msg, sizeof msg,
		         "the request body is larger than this server takes (%zu bytes; --max-body %zu)",
		         req->conn->ctx->globalconf->max_request_entity_size, o->cfg->max_body);
	else
		snprintf(msg, sizeof msg, "the request was refused: %s", what[0] ? what : "malformed HTTP");
	const struct fe_dialect *d = &fe_openai;
	if (req->path_normalized.len >= 12 && memcmp(req->path_normalized.base, "/v1/messages", 12) == 0)
		d = &fe_anthropic;
	size_t len = 0;
	char *json = d->error(req->res.status, msg, NULL, &len);
	h2o_iovec_t b = json ? h2o_strdup(&req->pool, json, len) : h2o_iovec_init(what, 0);
	free(json);
	if (!json)
		b = h2o_strdup(&req->pool, what, w);
	req->res.content_length = b.len; // the head is written on the first send
	h2o_ostream_send_next(self, req, &b, 1, state);
}

static void
err_setup(h2o_filter_t *self, h2o_req_t *req, h2o_ostream_t **slot)
{
	const struct fe_config *cfg = ((struct fe_guard_filter *)self)->cfg;
	if (req->res.status >= 400) {
		ssize_t i = h2o_find_header(&req->res.headers, H2O_TOKEN_CONTENT_TYPE, -1);
		if (i >= 0)
			req->res.headers.entries[i].value = h2o_iovec_init(H2O_STRLIT("application/json"));
		fe_guard_cors(cfg, req);
		struct err_ostream *o = (void *)h2o_add_ostream(req, sizeof *o, slot);
		o->super.do_send = err_send;
		o->cfg = cfg;
		o->sent = 0;
		slot = &o->super.next;
	}
	h2o_setup_next_ostream(req, slot);
}

void
fe_guard_register(h2o_pathconf_t *fallback, const struct fe_config *cfg)
{
	struct fe_guard_filter *f = (void *)h2o_create_filter(fallback, sizeof *f);
	f->super.on_setup_ostream = err_setup;
	f->cfg = cfg;
}
