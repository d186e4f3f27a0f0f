// pretok.h - pre-tokenization: cutting text into the pieces BPE runs on.
//
// A pre-tokenizer is a short sequence of rules. Each rule is one of the split
// regexes that byte-level BPE vocabularies use, matched by hand-written code
// with exactly the regex's leftmost-alternative semantics (Oniguruma /
// fancy-regex as used by Hugging Face tokenizers), Unicode-aware through
// unicode.h. The first rule cuts the whole text; every later rule cuts each
// piece of the previous one on its own, so a lookahead never sees past the
// end of its piece. Text a rule does not match stays a piece of its own
// ("Isolated" behaviour); the pieces always cover the input exactly, in
// order, with no empty piece.
//
// Rules come from a GGUF tokenizer.ggml.pre name (pretok_init_pre) or from
// tokenizer.json regex strings (pretok_add_regex). Unknown names and regexes
// are refused with an error that names them.
//
// Pieces are byte ranges of the input. Invalid UTF-8 bytes count as U+FFFD
// (a symbol) for matching but keep their original bytes in the piece.
#ifndef AD_PRETOK_H
#define AD_PRETOK_H

#include <stddef.h>
#include <stdint.h>

enum pretok_rule {
	// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
	PRETOK_GPT2,
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
	//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
	PRETOK_LLAMA3,
	// the same with \p{N} for \p{N}{1,3}
	PRETOK_QWEN2,
	PRETOK_DIGIT,   // \p{N}   (also HF's Digits with individual_digits)
	PRETOK_NUMBERS, // \p{N}+  (HF's Digits without individual_digits)
	PRETOK_PUNCT,   // [\p{P}\$\+<=>\^~\|]+
	PRETOK_DIGIT3,  // [0-9][0-9][0-9]
	PRETOK_N_RULES,
};

#define PRETOK_MAX_RULES 8

struct pretok {
	int n;
	enum pretok_rule rule[PRETOK_MAX_RULES];
	int ignore_merges; // the pre name implies llama3's ignore_merges
};

struct pretok_piece {
	uint32_t off, len; // bytes of the input
};

// Reusable output and scratch space for pretok_split; zero-initialise,
// release with pretok_out_free.
struct pretok_out {
	struct pretok_piece *v;
	size_t n, cap;
	// scratch
	struct pretok_piece *tmp;
	size_t tmp_cap;
	uint32_t *cp;    // decoded code points
	uint32_t *boff;  // byte offset of each code point (n_cp + 1 entries)
	uint16_t *flags; // unicode_flags of each code point
	size_t cp_cap;
};

// pretok_init_pre sets p up for a tokenizer.ggml.pre value; NULL or "" mean
// "default". Unknown names fail with an error listing pretok_pre_names().
int pretok_init_pre(struct pretok *p, const char *pre, char *err);
const char *pretok_pre_names(void);

// pretok_add_regex appends the rule whose tokenizer.json Split regex is
// pattern (compared literally with the known ones); anything else fails
// with an error quoting it.
int pretok_add_regex(struct pretok *p, const char *pattern, char *err);
int pretok_add(struct pretok *p, enum pretok_rule r, char *err);
const char *pretok_rule_name(enum pretok_rule r);

// pretok_split cuts text[0..len) into out->v[0..out->n). An empty text gives
// no pieces. Fails only when out of memory (or len >= 4 GiB).
int pretok_split(const struct pretok *p, const char *text, size_t len, struct pretok_out *out,
                 char *err);
void pretok_out_free(struct pretok_out *out);

#endif
