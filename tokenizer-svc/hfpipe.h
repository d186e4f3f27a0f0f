// hfpipe.h - the normalizers and pre-tokenizers of a Hugging Face
// tokenizer.json, for the models that take them as they are (Unigram).
//
// A tokenizer.json's "normalizer" and "pre_tokenizer" objects are parsed
// once into step lists; applying them to a fragment of text (the input
// between special tokens) gives the normalized text cut into pieces, which
// the model then encodes one at a time. The semantics are the tokenizers
// library's:
//
//   normalizers  NFC, NFKC, NFD, NFKD; Lowercase (per code point, simple
//                mappings); Strip (White_Space on the left and/or right);
//                StripAccents (drops marks); Replace (a String or a Regex
//                pattern, every match, left to right); Prepend (when the
//                text is not empty); Precompiled (SentencePiece's
//                normalization charsmap, longest match first); Sequence
//   pre-tokenizers
//                Whitespace (runs of word characters, runs of other
//                non-space characters); WhitespaceSplit; Metaspace (spaces
//                become the replacement; prepend_scheme always, first (only
//                on the text that starts the input) or never, or the older
//                add_prefix_space; split on the replacement, merged with
//                what follows); Punctuation and Digits (with a split
//                behaviour: isolated, removed, merged_with_previous,
//                merged_with_next, contiguous); Split (a String or Regex
//                pattern, a behaviour, invert); Sequence
//
// Anything else is refused when parsing, naming the type. Known
// differences from the library: Lowercase uses simple (one code point)
// mappings, so U+0130 becomes "i" without the combining dot; Whitespace's
// word characters are letters, marks, numbers and connector punctuation
// (the library's \w excludes No, e.g. "²"). Regex patterns run on PCRE2
// (Unicode properties), the library's on Rust's regex crate.
//
// The step lists are read-only after parsing and may be shared by
// threads.
#ifndef AD_HFPIPE_H
#define AD_HFPIPE_H

#include <stddef.h>

struct cJSON;
struct hf_norm;
struct hf_pretok;

// NULL or JSON null: no normalizer (*out = NULL, which applies as identity)
int hf_norm_parse(const struct cJSON *j, struct hf_norm **out, char *err);
void hf_norm_free(struct hf_norm *n);
// s[0..len) normalized into a malloc'd buffer (*out, *out_len; NUL-terminated)
int hf_norm_apply(const struct hf_norm *n, const char *s, size_t len, char **out, size_t *out_len, char *err);
// does the normalizer prepend (Prepend) the string p? (for decoding)
int hf_norm_prepends(const struct hf_norm *n, const char *p);

// pieces of text: piece i is buf[off[i] .. off[i] + len[i]); first[i]: it
// starts the input (nothing was cut off before it)
struct hf_pieces {
	char *buf;
	size_t used, cap;
	size_t *off, *len;
	unsigned char *first;
	size_t n, ncap;
};
void hf_pieces_free(struct hf_pieces *p);

int hf_pretok_parse(const struct cJSON *j, struct hf_pretok **out, char *err);
void hf_pretok_free(struct hf_pretok *p);
// cut s[0..len) into pieces (*out is emptied first); first: the text
// starts the input (Metaspace's prepend_scheme "first")
int hf_pretok_apply(const struct hf_pretok *p, const char *s, size_t len, int first, struct hf_pieces *out, char *err);
// does the pre-tokenizer put a Metaspace replacement in front of the text
// (always, or first)? (for decoding)
int hf_pretok_prepends(const struct hf_pretok *p);

#endif
