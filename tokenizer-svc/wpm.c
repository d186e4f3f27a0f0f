// wpm.c - WordPiece, as llama.cpp runs it for BERT-style GGUF vocabularies
// (tokenizer.ggml.model "bert").
//
// The text is cut into words: whitespace ends a word, and every punctuation
// character, ASCII symbol and CJK ideograph is a word of its own; NUL,
// U+FFFD and control characters vanish. With strip_accents each code point
// becomes the first code point of its canonical decomposition and marks
// vanish; with lowercase it is lowered. Each word, with a ▁ in front (the
// GGUF conversion writes word-initial pieces with ▁ and continuations bare,
// where the Hugging Face vocabulary has bare pieces and "##" continuations),
// is matched greedily, longest piece first, byte by byte; a word that cannot
// be covered whole becomes the unknown token.
#include <stdlib.h>
#include <string.h>

#include "tokenizer-impl.h"
#include "unicode.h"

static int
is_cjk(uint32_t c)
{
	// the ranges of Hugging Face's BertPreTokenizer (its 0x2B920 included)
	return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
	       (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
	       (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

struct word {
	char *p;
	size_t n, cap;
};

static int
word_put(struct word *w, const char *s, size_t n)
{
	if (w->n + n > w->cap) {
		size_t c = w->cap ? w->cap * 2 : 64;
		while (c < w->n + n)
			c *= 2;
		char *q = realloc(w->p, c);
		if (!q)
			return -1;
		w->p = q, w->cap = c;
	}
	memcpy(w->p + w->n, s, n);
	w->n += n;
	return 0;
}

// the ids of one word (w->p[0..3) is the ▁)
static int
word_ids(const struct tokenizer *t, const struct word *w, struct tok_ids *out, char *err)
{
	if (w->n <= 3)
		return 0;
	size_t start = out->n, n = w->n;
	if (t->wpm_max_chars > 0) {
		size_t chars = 0;
		for (size_t i = 3; i < n; i++)
			chars += ((unsigned char)w->p[i] & 0xC0) != 0x80;
		if (chars > (size_t)t->wpm_max_chars)
			return t->unk >= 0 ? tok_ids_push(out, t->unk, err) : 0;
	}
	for (size_t i = 0; i < n;) {
		size_t j = i + t->max_piece_len < n ? i + t->max_piece_len : n;
		int32_t id = -1;
		for (; j > i; j--)
			if ((id = tok_find(t, w->p + i, j - i)) >= 0)
				break;
		if (id < 0) { // the whole word is unknown
			out->n = start;
			break;
		}
		if (tok_ids_push(out, id, err))
			return -1;
		i = j;
	}
	if (out->n == start && t->unk >= 0 && tok_ids_push(out, t->unk, err))
		return -1;
	return 0;
}

int
wpm_encode_text(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out, char *err)
{
	struct word w = {0};
	int rc = -1;
	if (word_put(&w, "\xe2\x96\x81", 3))
		goto oom;
	for (size_t i = 0; i < len;) {
		uint32_t c;
		i += (size_t)unicode_decode(text + i, len - i, &c, NULL);
		if (t->wpm_strip_accents)
			c = unicode_nfd_first(c);
		uint16_t f = unicode_flags(c);
		if (f & UNICODE_WHITESPACE) {
			if (word_ids(t, &w, out, err))
				goto done;
			w.n = 3;
			continue;
		}
		if (c == 0 || c == UNICODE_REPLACEMENT || (f & UNICODE_CONTROL))
			continue;
		if (t->wpm_strip_accents && (f & UNICODE_MARK))
			continue;
		char s[4];
		int k = unicode_encode(t->wpm_lowercase ? unicode_tolower(c) : c, s);
		if ((f & UNICODE_PUNCTUATION) || (c < 0x7F && (f & UNICODE_SYMBOL)) || is_cjk(c)) {
			if (word_ids(t, &w, out, err))
				goto done;
			w.n = 3;
			if (word_put(&w, s, (size_t)k))
				goto oom;
			if (word_ids(t, &w, out, err))
				goto done;
			w.n = 3;
		} else if (word_put(&w, s, (size_t)k)) {
			goto oom;
		}
	}
	rc = word_ids(t, &w, out, err);
	goto done;
oom:
	ad_err(err, "tokenizer: out of memory");
done:
	free(w.p);
	return rc;
}
