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
// Any other regex runs through PCRE2 (Unicode properties, JIT), matched on
// the text's code points with the same piece-by-piece semantics: a rule of
// kind PRETOK_REGEX. The hand-written matchers are the fast path for the
// regexes they implement; the tests hold the two equal.
//
// Rules come from a GGUF tokenizer.ggml.pre name (pretok_init_pre: every name
// llama.cpp knows, with its regex list) or from tokenizer.json regex strings
// (pretok_add_regex). Unknown names, names that need more than regexes, and
// regexes PCRE2 cannot compile are refused with an error that names them.
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
	PRETOK_REGEX,   // any other: PCRE2
	PRETOK_N_RULES,
};

#define PRETOK_MAX_RULES 8

struct pretok_re; // a compiled PCRE2 pattern

struct pretok {
	int n;
	enum pretok_rule rule[PRETOK_MAX_RULES];
	struct pretok_re *re[PRETOK_MAX_RULES]; // PRETOK_REGEX rules
	int ignore_merges;                      // the pre name implies llama3's ignore_merges
};

// llama.cpp's flags for a tokenizer.ggml.pre name (see pretok-names.h)
struct pretok_flags {
	int clean_spaces;  // detokenizing drops the space before . , ! ?
	int add_bos;       // BOS by default (a GGUF add_bos_token key overrides)
	int escape;        // SentencePiece-style BPE (Gemma 4): spaces as U+2581, merges
			   // over raw UTF-8, a byte without a token as <0xNN>
	int newline_words; // a word of newlines is one token when the vocabulary has it
	int force_bos;     // BOS whatever the GGUF's add_bos_token says
};
// -1 (f untouched) for an unknown name
int pretok_name_flags(const char *pre, struct pretok_flags *f);

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
	void *md, *mctx, *jit; // PCRE2 match data, match context, JIT stack
};

// pretok_init_pre sets p up for a tokenizer.ggml.pre value; NULL or "" mean
// "default". Unknown names fail with an error listing pretok_pre_names().
// With PRETOK_ENGINE every regex runs through PCRE2, none by hand (the tests
// compare the two). Release with pretok_free.
#define PRETOK_ENGINE 1
int pretok_init_pre(struct pretok *p, const char *pre, char *err);
int pretok_init_pre_opt(struct pretok *p, const char *pre, int flags, char *err);
const char *pretok_pre_names(void); // those with hand-written rules
// the n-th name llama.cpp knows (NULL past the end), its regexes (NULL-ended)
// and why it is refused (NULL when it is not)
const char *pretok_known_name(int n, const char *const **re, const char **unsupported);

// pretok_add_regex appends the rule for a tokenizer.json Split regex: the
// hand-written matcher when pattern is literally one it implements, PCRE2
// otherwise (with PRETOK_ENGINE, PCRE2 always). A pattern PCRE2 refuses
// fails with an error quoting it and PCRE2's reason.
int pretok_add_regex(struct pretok *p, const char *pattern, char *err);
int pretok_add_regex_opt(struct pretok *p, const char *pattern, int flags, char *err);
void pretok_free(struct pretok *p);
int pretok_add(struct pretok *p, enum pretok_rule r, char *err);
const char *pretok_rule_name(enum pretok_rule r);

// pretok_split cuts text[0..len) into out->v[0..out->n). An empty text gives
// no pieces. Fails only when out of memory (or len >= 4 GiB), or when a
// PCRE2 rule exceeds its match limit (a pathological pattern and text).
int pretok_split(const struct pretok *p, const char *text, size_t len, struct pretok_out *out, char *err);
void pretok_out_free(struct pretok_out *out);

#endif
