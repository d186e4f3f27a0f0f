// jschema.h - JSON Schema to a GBNF grammar (gbnf.h) whose strings are JSON
// texts that validate against the schema.
//
// A grammar is built up in a struct jsg: jsg_schema adds the rules of one
// schema under a rule name, jsg_rule adds a rule of hand-written GBNF (a tool
// call's wrapper, say), jsg_text returns the whole grammar. Supported:
//   type (one or a list; "null" in the list or nullable: true makes it
//     nullable), enum, const, anyOf / oneOf (as alternatives: oneOf's
//     exclusiveness is not enforced), allOf of object schemas (merged),
//   objects: properties (emitted in the order given), required,
//     additionalProperties (false; true or a schema: further keys, none of
//     the declared ones; absent: only the declared properties are produced,
//     which validates all the same),
//   arrays: items, prefixItems, minItems, maxItems,
//   strings: minLength, maxLength, format date, time, date-time, uuid, email,
//     uri, hostname, ipv4,
//   integers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (exact,
//     digit by digit), numbers: the same bounds when they are integers,
//   $ref to "#", "#/$defs/...", "#/definitions/..." or any JSON pointer
//     into the same document (recursion allowed), $defs/definitions,
//   annotations (title, description, default, examples, $schema, $id,
//     $comment, deprecated, readOnly, writeOnly) and keywords outside JSON
//     Schema are ignored, as validators ignore them.
// Refused with -1 and a message naming the keyword and where it is (the
// path given, then .properties.x, .items, ...): every other assertion
// keyword (pattern, patternProperties, multipleOf, not, if, contains,
// uniqueItems: true, minProperties, ...), a format not listed, non-integer
// bounds on a number, minimum > maximum, a schema that is not an object or a
// boolean, `false` (nothing validates), a $ref outside the document,
// nesting deeper than JSG_MAX_DEPTH.
//
// Whitespace is limited so replies stay short: between tokens of the JSON
// text at most one space, or one newline and up to 12 spaces or tabs of
// indentation; none after the value itself, so a grammar is complete the
// moment its last brace is.
#ifndef AD_JSCHEMA_H
#define AD_JSCHEMA_H

#include <stddef.h>

#include "err.h"

#define JSG_MAX_DEPTH 64
#define JSG_MAX_TEXT (1 << 22) // bytes of grammar

struct cJSON;
struct jsg;

struct jsg *jsg_new(void);
void jsg_free(struct jsg *g); // NULL is fine

// the rules of schema under name ([a-zA-Z0-9-]+, unique); path names the
// schema in messages ("response_format.json_schema.schema")
int jsg_schema(struct jsg *g, const char *name, const struct cJSON *schema, const char *path, char *err);
// a rule written by hand: name ::= body
int jsg_rule(struct jsg *g, const char *name, const char *body, char *err);
// the GBNF text of every rule so far (malloc'd, NUL-terminated), the
// shared rules (ws, string, ...) included
char *jsg_text(struct jsg *g, size_t *len, char *err);

// the GBNF literal of s[0..n): "..." with \ " and control bytes escaped
// (malloc'd, NUL-terminated)
char *jsg_literal(const char *s, size_t n);

// the grammar of schema alone, its root rule "root" (malloc'd); checked
// by gbnf_compile, so a $ref that comes back to itself before any value is
// refused here (the rules one by one cannot show it)
char *jsg_schema_gbnf(const struct cJSON *schema, const char *path, size_t *len, char *err);

#endif
