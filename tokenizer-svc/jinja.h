// jinja.h - a Jinja2 interpreter for the chat templates models ship.
//
// It renders a template the way Python's jinja2 does in the environment
// Hugging Face's apply_chat_template sets up, byte for byte: trim_blocks and
// lstrip_blocks on, the loopcontrols extension (break, continue), the
// {% generation %} block, an immutable sandbox (list.append and friends are
// refused, range() is capped at 100000 items), `tojson` as Python's
// json.dumps(ensure_ascii=False, sort_keys=False), and the globals
// raise_exception(msg) and strftime_now(fmt). The language covered is what
// chat templates use: for (with loop.*, else, an if filter), if/elif/else,
// set (also block set and namespace attributes), macro, call, filter and
// with blocks, break/continue, raw; expressions with Python's semantics for
// None/bool/int/float/str/list/tuple/dict values, slicing, tests, the
// filters and the str/dict/list methods templates call. Anything outside
// that subset is refused with JINJA_UNSUPPORTED, never rendered differently.
//
// Threading: a parsed template is immutable and may be rendered by several
// threads at once; each render owns all its values and frees them before it
// returns (reference counts, then a sweep of whatever cycles are left).
//
// Bounds: a render stops with JINJA_LIMIT when its output, its memory, its
// evaluation steps or its time exceed the limits given; parsing bounds the
// nesting of expressions and blocks so that no input can exhaust the stack.
#ifndef AD_JINJA_H
#define AD_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

struct jinja_tmpl;

enum jinja_status {
	JINJA_OK = 0,
	JINJA_SYNTAX,      // the template does not parse (jinja2 would refuse it too)
	JINJA_UNSUPPORTED, // valid Jinja this interpreter does not implement
	JINJA_RAISED,      // the template called raise_exception(message)
	JINJA_ERROR,       // a runtime error jinja2 raises too (type error, undefined attribute, ...)
	JINJA_LIMIT,       // output, memory, steps or time exceeded
	JINJA_INPUT,       // the context is not a JSON object the renderer accepts
};

const char *jinja_status_name(enum jinja_status s);

// jinja_parse compiles src[0..n). On failure it returns NULL, fills err
// ("line N: ...") and sets *status (if non-NULL) to JINJA_SYNTAX or
// JINJA_UNSUPPORTED.
struct jinja_tmpl *jinja_parse(const char *src, size_t n, enum jinja_status *status, char *err);
void jinja_free(struct jinja_tmpl *t); // NULL is fine

struct jinja_limits {
	size_t max_output;  // bytes of output; 0: 8 MiB
	size_t max_memory;  // bytes of live values; 0: 64 MiB
	uint64_t max_steps; // evaluation steps; 0: 50 million
	int timeout_ms;     // wall time; 0: 2000
	int64_t now;        // strftime_now's time: 0 the clock (local time),
			    // else these seconds since the epoch, in UTC
};

// jinja_render renders t with the variables of ctx[0..ctx_len), a JSON
// object ({"messages": [...], "add_generation_prompt": true, ...}). JSON
// numbers keep Python's int/float distinction, objects keep their key
// order. lim may be NULL (the defaults). On JINJA_OK *out is malloc'd and
// NUL-terminated, *out_len its length; otherwise *out is NULL and err says
// why (for JINJA_RAISED: the template's own message, unprefixed).
enum jinja_status jinja_render(const struct jinja_tmpl *t, const char *ctx, size_t ctx_len,
                               const struct jinja_limits *lim, char **out, size_t *out_len, char *err);

#endif
