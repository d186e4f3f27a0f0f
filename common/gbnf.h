// gbnf.h - grammars in llama.cpp's GBNF syntax, compiled down to bytes.
//
// gbnf_compile parses the text of a grammar as llama.cpp's server takes it
// in a request's `grammar` field and lowers it to a byte-level form: a
// literal becomes one byte set per byte of its UTF-8 encoding; a character
// class within ASCII one byte set; a class reaching beyond ASCII (and `.`)
// a rule whose alternatives are the UTF-8 byte sequences of its code points
// (surrogates never match). A matcher therefore walks token bytes directly:
// a token that ends inside a multi-byte character simply leaves the match
// inside such a rule, and a byte-fallback token is one byte like any other.
// What a grammar accepts is exactly the UTF-8 encodings of the strings
// llama.cpp's grammar accepts.
//
// Syntax (llama.cpp's src/llama-grammar.cpp):
//   name ::= alternates       one rule; it ends at a newline outside ( )
//   name                      [a-zA-Z0-9-]+; "root" is the start rule
//   a | b                     alternatives
//   "text"                    a literal; escapes \n \r \t \\ \" \[ \] and
//                             \xHH \uHHHH \UHHHHHHHH (code points)
//   [a-z0-9_] [^"\\]          a character class, ^ negates it
//   .                         any character
//   ( ... )                   a group
//   x* x+ x? x{m} x{m,} x{m,n}  repetition of the item before
//   <[id]>  !<[id]>           a token by id; any one token but that id
//   <text>                    a token by its text (through the resolver)
//   # ...                     a comment to the end of the line
// A rule defined twice keeps its last definition, as in llama.cpp.
//
// Refused with a message naming the place (line:column) or the rule: bad
// syntax, invalid UTF-8 or a NUL byte in the text, an undefined rule, no
// start rule, left recursion (a rule that can reach itself without
// consuming a byte, which a top-down matcher cannot run), a code point
// above U+10FFFF, nesting deeper than GBNF_MAX_DEPTH, a repetition count
// above GBNF_MAX_REPEAT, a compiled grammar above GBNF_MAX_ELEMENTS.
//
// A compiled grammar is immutable and may be shared by threads.
#ifndef AD_GBNF_H
#define AD_GBNF_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

#define GBNF_MAX_DEPTH 128    // nested ( ) and repetitions inside them
#define GBNF_MAX_REPEAT 10000 // m and n of x{m,n}
#define GBNF_MAX_ELEMENTS (1 << 20)
#define GBNF_MAX_TEXT (1 << 22)    // bytes of grammar text
#define GBNF_UNRESOLVED 0x7fffffff // a <text> token left for a later resolver

enum gbnf_op {
	GBNF_END,       // the end of an alternative
	GBNF_SET,       // one byte of set[arg]
	GBNF_RULE,      // rule arg
	GBNF_TOKEN,     // the one token arg
	GBNF_NOT_TOKEN, // any one token but arg
};

struct gbnf_el {
	uint32_t op : 3;
	uint32_t arg : 29;
};

// Alternative k of rule r starts at el[alt[rule_alt[r] + k]] and runs to
// its GBNF_END; rule r has rule_alt[r + 1] - rule_alt[r] alternatives (at
// least one; an empty alternative is a lone GBNF_END).
struct gbnf {
	struct gbnf_el *el;
	int n_el;
	int32_t *alt;
	int n_alt;
	int32_t *rule_alt; // n_rules + 1
	int n_rules;
	uint8_t (*set)[32]; // bit b of set[i][b >> 3] (1 << (b & 7)): byte b matches
	int n_set;
	int root;
	char **name;       // per rule: its name, generated ones as parent_N
	uint8_t *nullable; // per rule: it can match the empty string
	int n_tokens;      // token elements (GBNF_TOKEN, GBNF_NOT_TOKEN)
	int n_unresolved;  // <text> tokens compiled without a resolver
};

// resolve: the id of the one token whose text is s[0..n) (angle brackets
// included, as in llama.cpp: "<think>"), or -1. With resolve NULL such
// tokens compile to GBNF_UNRESOLVED (a syntax check: the frontend's).
typedef int32_t (*gbnf_resolve_fn)(void *ctx, const char *s, size_t n);

// gbnf_compile: root names the start rule (NULL: "root"). *out is freed
// with gbnf_free. On failure err says what and where.
int gbnf_compile(const char *text, size_t len, const char *root, gbnf_resolve_fn resolve, void *ctx, struct gbnf **out,
                 char *err);
void gbnf_free(struct gbnf *g); // NULL is fine

// gbnf_utf8: the UTF-8 encoding of code point c into b (up to 4 bytes);
// returns its length, 0 for a surrogate or c > U+10FFFF
int gbnf_utf8(uint32_t c, uint8_t b[4]);

#endif
