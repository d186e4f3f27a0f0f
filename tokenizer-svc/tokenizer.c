// tokenizer.c - vocabulary, loaders, special-token partition, SentencePiece,
// decoding and streaming. Byte-level BPE merging lives in bpe.c, chat
// templates in chat.c.
#define _GNU_SOURCE // memmem, qsort_r
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "gguf.h"
#include "jinja.h"
#include "log.h"
#include "tokenizer-impl.h"
#include "utf8.h"

// ---------------------------------------------------------------------------
// small containers

int
tok_ids_push(struct tok_ids *ids, int32_t id, char *err)
{
	if (ids->n == ids->cap) {
		size_t cap = ids->cap ? ids->cap * 2 : 64;
		int32_t *v = realloc(ids->v, cap * sizeof *v);
		if (!v)
			return ad_err(err, "tokenizer: out of memory (%zu ids)", cap);
		ids->v = v;
		ids->cap = cap;
	}
	ids->v[ids->n++] = id;
	return 0;
}

static uint32_t
hash_bytes(const char *s, size_t n)
{
	uint32_t h = 2166136261u; // FNV-1a
	for (size_t i = 0; i < n; i++) {
		h ^= (uint8_t)s[i];
		h *= 16777619u;
	}
	return h;
}

static uint64_t
hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static uint32_t
pair_hash(int32_t left, int32_t right)
{
	return (uint32_t)hash_u64((((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1);
}

// twice the slots, the pairs put in them again
static int
pairmap_grow(struct tok_pairmap *m, char *err)
{
	uint32_t ns = m->mask ? (m->mask + 1) * 2 : 1024;
	uint32_t *slot = calloc(ns, sizeof *slot);
	if (!slot)
		return ad_err(err, "tokenizer: out of memory (merge map of %u)", ns);
	for (uint32_t i = 0; i < m->n; i++) {
		uint32_t j = pair_hash(m->e[i].left, m->e[i].right) & (ns - 1);
		while (slot[j])
			j = (j + 1) & (ns - 1);
		slot[j] = i + 1;
	}
	free(m->slot);
	m->slot = slot;
	m->mask = ns - 1;
	return 0;
}

// the slot of (left, right), or of the empty one where it would go
static uint32_t
pairmap_find(const struct tok_pairmap *m, int32_t left, int32_t right)
{
	uint32_t j = pair_hash(left, right) & m->mask;
	for (; m->slot[j]; j = (j + 1) & m->mask) {
		const struct tok_pair *e = &m->e[m->slot[j] - 1];
		if (e->left == left && e->right == right)
			break;
	}
	return j;
}

int
tok_pairmap_put(struct tok_pairmap *m, int32_t left, int32_t right, struct tok_merge v, char *err)
{
	if ((uint64_t)(m->n + 1) * 2 > (m->mask ? (uint64_t)m->mask + 1 : 0) && pairmap_grow(m, err))
		return -1;
	uint32_t j = pairmap_find(m, left, right);
	if (m->slot[j]) {
		m->e[m->slot[j] - 1].v = v;
		return 0;
	}
	if (m->n == m->cap) {
		uint32_t cap = m->cap ? m->cap + m->cap / 2 : 512;
		struct tok_pair *e = realloc(m->e, (size_t)cap * sizeof *e);
		if (!e)
			return ad_err(err, "tokenizer: out of memory (%u merges)", cap);
		m->e = e;
		m->cap = cap;
	}
	m->e[m->n] = (struct tok_pair){left, right, v};
	m->slot[j] = ++m->n;
	return 0;
}

const struct tok_merge *
tok_pairmap_get(const struct tok_pairmap *m, int32_t left, int32_t right)
{
	if (!m->mask)
		return NULL;
	uint32_t j = pairmap_find(m, left, right);
	return m->slot[j] ? &m->e[m->slot[j] - 1].v : NULL;
}

void
tok_pairmap_free(struct tok_pairmap *m)
{
	free(m->slot);
	free(m->e);
	memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------------------
// vocabulary

_Static_assert(sizeof(struct tok_entry) == 12, "a vocabulary entry in 12 bytes (tokenizer-impl.h)");

static int
strs_append(struct tokenizer *t, const char *s, size_t n, uint32_t *off, char *err)
{
	if (t->strs_len + n > UINT32_MAX)
		return ad_err(err, "tokenizer: vocabulary strings exceed 4 GiB");
	if (t->strs_len + n + 1 > t->strs_cap) {
		size_t cap = t->strs_cap ? t->strs_cap : 1 << 16;
		while (cap < t->strs_len + n + 1)
			cap *= 2;
		char *p = realloc(t->strs, cap);
		if (!p)
			return ad_err(err, "tokenizer: out of memory (%zu bytes of strings)", cap);
		t->strs = p;
		t->strs_cap = cap;
	}
	if (n)
		memcpy(t->strs + t->strs_len, s, n);
	*off = (uint32_t)t->strs_len;
	t->strs_len += n;
	t->strs[t->strs_len] = 0; // keeps every string readable as a C string at its end
	return 0;
}

static struct tokenizer *
tok_new(char *err)
{
	struct tokenizer *t = calloc(1, sizeof *t);
	if (!t) {
		ad_err(err, "tokenizer: out of memory");
		return NULL;
	}
	t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = t->sep = -1;
	for (int i = 0; i < 256; i++)
		t->byte_tok[i] = -1;
	for (int i = 0; i < 324; i++)
		t->byte_of_cp[i] = -1;
	return t;
}

int
tok_vocab_init(struct tokenizer *t, int32_t n, char *err)
{
	if (n <= 0 || n > (1 << 24))
		return ad_err(err, "tokenizer: vocabulary of %d tokens (expected 1..16777216)", n);
	free(t->tok);
	free(t->score);
	t->score = NULL;
	t->tok = calloc((size_t)n, sizeof *t->tok);
	if (!t->tok)
		return ad_err(err, "tokenizer: out of memory (%d tokens)", n);
	for (int32_t i = 0; i < n; i++)
		t->tok[i].type = TOK_TYPE_NORMAL;
	t->n_vocab = n;
	return 0;
}

int
tok_vocab_set(struct tokenizer *t, int32_t id, const char *s, size_t n, float score, enum tok_type type, char *err)
{
	if (id < 0 || id >= t->n_vocab)
		return ad_err(err, "tokenizer: token id %d out of range (vocabulary of %d)", id, t->n_vocab);
	if (n > TOK_PIECE_MAX)
		return ad_err(err, "tokenizer: token %d is %zu bytes long (at most %d)", id, n, TOK_PIECE_MAX);
	uint32_t off = 0;
	if (strs_append(t, s, n, &off, err) || tok_set_score(t, id, score, err))
		return -1;
	t->tok[id].off = off;
	t->tok[id].len = (uint16_t)n;
	t->tok[id].type = (uint8_t)type;
	return 0;
}

// the scores' array comes with the first that is not 0, and only for
// SentencePiece, which merges by them (a GGUF of another kind may carry
// some: Unigram keeps its own, BPE merges by rank)
int
tok_set_score(struct tokenizer *t, int32_t id, float score, char *err)
{
	if (t->kind != TOK_KIND_SPM || (!t->score && score == 0.0f))
		return 0;
	if (!t->score && !(t->score = calloc((size_t)t->n_vocab, sizeof *t->score)))
		return ad_err(err, "tokenizer: out of memory (%d scores)", t->n_vocab);
	t->score[id] = score;
	return 0;
}

int32_t
tok_find(const struct tokenizer *t, const char *s, size_t n)
{
	if (!t->map || n > t->max_piece_len)
		return -1;
	const uint32_t h = hash_bytes(s, n), idm = (1u << t->map_idbits) - 1, tag = h & ~idm;
	for (uint32_t j = h & t->map_mask;; j = (j + 1) & t->map_mask) {
		uint32_t v = t->map[j];
		if (v == TOK_MAP_FREE)
			return -1;
		if ((v & ~idm) != tag)
			continue;
		const struct tok_entry *e = &t->tok[v & idm];
		if (e->len == n && memcmp(t->strs + e->off, s, n) == 0)
			return (int32_t)(v & idm);
	}
}

static int
build_map(struct tokenizer *t, char *err)
{
	// at most 3/4 full: with the tags, a probe past a taken slot reads no
	// piece, and the map takes half the room it took at most 1/2 full with
	// bare ids (Qwen's 151,936 pieces: 1 MiB, not 2)
	uint32_t cap = 16;
	while ((uint64_t)cap * 3 < (uint64_t)t->n_vocab * 4)
		cap *= 2;
	int bits = 1; // ids 0 .. n_vocab - 1 never fill their bits
	while ((1u << bits) <= (uint32_t)t->n_vocab)
		bits++;
	const uint32_t idm = (1u << bits) - 1;
	free(t->map);
	t->map = malloc(cap * sizeof *t->map);
	if (!t->map)
		return ad_err(err, "tokenizer: out of memory (map of %u)", cap);
	memset(t->map, 0xff, cap * sizeof *t->map);
	t->map_mask = cap - 1;
	t->map_idbits = bits;
	t->max_piece_len = 0;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		const char *s = t->strs + t->tok[id].off;
		uint32_t n = t->tok[id].len;
		if (!n)
			continue;
		if (n > t->max_piece_len)
			t->max_piece_len = n;
		// a duplicate piece maps to its last id, as llama.cpp's map does
		const uint32_t h = hash_bytes(s, n), tag = h & ~idm;
		uint32_t j = h & t->map_mask;
		for (; t->map[j] != TOK_MAP_FREE; j = (j + 1) & t->map_mask) {
			const struct tok_entry *o = &t->tok[t->map[j] & idm];
			if ((t->map[j] & ~idm) == tag && o->len == n && memcmp(t->strs + o->off, s, n) == 0)
				break;
		}
		t->map[j] = tag | (uint32_t)id;
	}
	return 0;
}

int
tok_build_map(struct tokenizer *t, char *err)
{
	return build_map(t, err);
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

// parse_byte_piece: "<0xNN>" -> NN, else -1.
static int
parse_byte_piece(const char *s, size_t n)
{
	if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>')
		return -1;
	int hi = hexval(s[3]), lo = hexval(s[4]);
	return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// the bytes the token decodes to, its piece p (e->len bytes), into out
// (room for e->len: a text is never longer than its piece); the length,
// or -1 when the text is the piece itself (nothing written)
static int
piece_text(const struct tokenizer *t, const struct tok_entry *e, const char *p, char *out)
{
	const size_t n = e->len;
	size_t m = 0;
	switch (e->type) {
	case TOK_TYPE_CONTROL:
	case TOK_TYPE_UNKNOWN:
	case TOK_TYPE_UNUSED:
	case TOK_TYPE_UNDEFINED:
		return 0;
	case TOK_TYPE_USER_DEFINED:
		return -1;
	default:
		break;
	}
	// SentencePiece's pieces, and SentencePiece-style BPE's (escape_spaces)
	const int spm_style = t->kind == TOK_KIND_SPM || t->kind == TOK_KIND_UGM || t->escape_spaces;
	if (spm_style && e->type == TOK_TYPE_BYTE) {
		int b = parse_byte_piece(p, n);
		if (b < 0) // not <0xNN>: treat as text
			return -1;
		out[0] = (char)b;
		return 1;
	}
	if (spm_style || t->kind == TOK_KIND_WPM) {
		for (size_t i = 0; i < n;) {
			if (i + 3 <= n && memcmp(p + i, "\xe2\x96\x81", 3) == 0) {
				out[m++] = ' ';
				i += 3;
			} else {
				out[m++] = p[i++];
			}
		}
	} else {
		// byte-level BPE: every code point of the piece stands for one byte
		for (size_t i = 0; i < n;) {
			uint8_t c = (uint8_t)p[i];
			int need = ad_utf8_len(c);
			uint32_t cp = c;
			if (need == 0 || i + (size_t)need > n)
				need = 1;
			else if (need > 1) {
				cp = c & (0x7f >> need);
				for (int k = 1; k < need; k++)
					cp = (cp << 6) | ((uint8_t)p[i + k] & 0x3f);
			}
			if (cp < 324 && t->byte_of_cp[cp] >= 0)
				out[m++] = (char)t->byte_of_cp[cp];
			else // not from the byte map: keep the raw bytes
				for (int k = 0; k < need; k++)
					out[m++] = p[i + k];
			i += (size_t)need;
		}
	}
	return m == n && memcmp(out, p, n) == 0 ? -1 : (int)m;
}

// t->strs laid out anew, exactly: each piece, then its text where that is
// not the piece itself. What the loaders appended (a piece set twice, the
// texts of an earlier tok_finish) is gone, and a text is found from its
// piece (tok_text), so an entry holds one offset
static int
lay_out(struct tokenizer *t, char *err)
{
	size_t cap = 1;
	for (int32_t id = 0; id < t->n_vocab; id++)
		cap += 2 * (size_t)t->tok[id].len;
	if (cap > UINT32_MAX)
		return ad_err(err, "tokenizer: vocabulary strings exceed 4 GiB");
	char *s = malloc(cap);
	if (!s)
		return ad_err(err, "tokenizer: out of memory (%zu bytes of strings)", cap);
	size_t at = 0;
	for (int32_t id = 0; id < t->n_vocab; id++) {
		struct tok_entry *e = &t->tok[id];
		if (e->len) // (an id never set has no piece; t->strs may be NULL)
			memcpy(s + at, t->strs + e->off, e->len);
		int m = piece_text(t, e, s + at, s + at + e->len);
		e->off = (uint32_t)at;
		at += e->len;
		e->tafter = m >= 0;
		e->tlen = m >= 0 ? (uint16_t)m : e->len;
		at += m > 0 ? (size_t)m : 0;
	}
	s[at] = 0; // keeps every string readable as a C string at its end
	char *fit = realloc(s, at + 1);
	free(t->strs);
	t->strs = fit ? fit : s;
	t->strs_len = at;
	t->strs_cap = fit ? at + 1 : cap;
	return 0;
}

static int
cmp_special(const void *a, const void *b, void *arg)
{
	const struct tokenizer *t = arg;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	if (t->tok[x].len != t->tok[y].len)
		return t->tok[x].len > t->tok[y].len ? -1 : 1;
	return x < y ? -1 : x > y;
}

static int
eog_add(struct tokenizer *t, int32_t id)
{
	if (id < 0 || id >= t->n_vocab)
		return 0;
	for (int32_t i = 0; i < t->n_eog; i++)
		if (t->eog[i] == id)
			return 0;
	int32_t *p = realloc(t->eog, (size_t)(t->n_eog + 1) * sizeof *p);
	if (!p)
		return -1;
	t->eog = p;
	t->eog[t->n_eog++] = id;
	return 0;
}

static int is_sp(const char *p);

static int
is_special_type(int type)
{
	return type == TOK_TYPE_CONTROL || type == TOK_TYPE_USER_DEFINED || type == TOK_TYPE_UNKNOWN;
}

int
tok_finish(struct tokenizer *t, char *err)
{
	if (!t->tok || t->n_vocab <= 0)
		return ad_err(err, "tokenizer: empty vocabulary");
	if (build_map(t, err))
		return -1;

	// special ids that point outside the vocabulary are dropped
	int32_t *ids[] = {&t->bos, &t->eos, &t->eot, &t->eom, &t->unk, &t->pad, &t->sep};
	const char *names[] = {"bos", "eos", "eot", "eom", "unk", "pad", "sep"};
	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
		if (*ids[i] >= t->n_vocab) {
			ad_warn("tokenizer: %s id %d is outside the vocabulary of %d; ignored", names[i], *ids[i],
			        t->n_vocab);
			*ids[i] = -1;
		}

	// end of turn: llama.cpp's names for it, when the metadata does not say
	static const char *eot_names[] = {"<|eot_id|>",
	                                  "<|im_end|>",
	                                  "<|end|>",
	                                  "<end_of_turn>",
	                                  "<|endoftext|>",
	                                  "<EOT>",
	                                  "_<EOT>",
	                                  "<｜end▁of▁sentence｜>",
	                                  NULL};
	if (t->eot < 0)
		for (int i = 0; eot_names[i]; i++) {
			int32_t id = tok_find(t, eot_names[i], strlen(eot_names[i]));
			if (id >= 0 && is_special_type(t->tok[id].type)) {
				t->eot = id;
				break;
			}
		}
	if (t->eom < 0) {
		int32_t id = tok_find(t, "<|eom_id|>", 10);
		if (id >= 0)
			t->eom = id;
	}
	static const char *eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
	                                  "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>",
	                                  // Gemma 4's
	                                  "<eos>", "<turn|>", "<|tool_response>", NULL};
	free(t->eog);
	t->eog = NULL;
	t->n_eog = 0;
	int bad = eog_add(t, t->eos) | eog_add(t, t->eot) | eog_add(t, t->eom);
	for (int i = 0; eog_names[i]; i++) {
		int32_t id = tok_find(t, eog_names[i], strlen(eog_names[i]));
		if (id >= 0 && is_special_type(t->tok[id].type))
			bad |= eog_add(t, id);
	}
	if (bad)
		return ad_err(err, "tokenizer: out of memory");

	// the special tokens cache: matched in text longest first
	free(t->special);
	t->special = NULL;
	t->n_special = 0;
	for (int32_t id = 0; id < t->n_vocab; id++)
		if (is_special_type(t->tok[id].type) && t->tok[id].len)
			t->n_special++;
	if (t->n_special) {
		t->special = malloc((size_t)t->n_special * sizeof *t->special);
		if (!t->special)
			return ad_err(err, "tokenizer: out of memory");
		int32_t k = 0;
		for (int32_t id = 0; id < t->n_vocab; id++)
			if (is_special_type(t->tok[id].type) && t->tok[id].len)
				t->special[k++] = id;
		qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);
	}

	// byte fallback: <0xNN>, else (SPM) the single-byte piece
	if (t->kind == TOK_KIND_UGM)
		for (int b = 0; b < 256; b++) {
			char piece[8];
			snprintf(piece, sizeof piece, "<0x%02X>", b);
			t->byte_tok[b] = tok_find(t, piece, 6);
		}
	if (t->kind == TOK_KIND_SPM) {
		for (int b = 0; b < 256; b++) {
			char piece[8];
			snprintf(piece, sizeof piece, "<0x%02X>", b);
			int32_t id = tok_find(t, piece, 6);
			if (id < 0) {
				char c = (char)b;
				id = tok_find(t, &c, 1);
			}
			t->byte_tok[b] = id;
		}
		t->escape_spaces = 1;
		// can a piece span a word start (a ▁ after something else)?
		t->spm_word_split = 1;
		for (int32_t id = 0; id < t->n_vocab && t->spm_word_split; id++) {
			const char *p = t->strs + t->tok[id].off;
			size_t n = t->tok[id].len, i = 0;
			while (i + 3 <= n && is_sp(p + i))
				i += 3;
			for (; i + 3 <= n; i++)
				if (is_sp(p + i))
					t->spm_word_split = 0;
		}
	}

	if (lay_out(t, err))
		return -1;

	t->chat = tok_chat_detect(t);
	tok_chat_compile(t);
	return 0;
}

void
tok_free(struct tokenizer *t)
{
	if (!t)
		return;
	if (t->bpe_free_priv)
		t->bpe_free_priv(t->bpe_priv);
	tok_pairmap_free(&t->merges);
	free(t->tok);
	free(t->score);
	free(t->strs);
	free(t->map);
	free(t->special);
	free(t->eog);
	free(t->chat_template);
	free(t->chat_template_tool_use);
	jinja_free(t->jinja);
	jinja_free(t->jinja_tool_use);
	free(t);
}

// ---------------------------------------------------------------------------
// bpe hooks until bpe.c exists

#ifndef AD_HAVE_BPE
__attribute__((weak)) int
bpe_load_gguf(struct tokenizer *t, const struct gguf *g, char *err)
{
	return ad_err(err, "tokenizer: byte-level BPE is not built into this binary");
}

__attribute__((weak)) int
bpe_load_hf_json(struct tokenizer *t, const char *json, size_t len, char *err)
{
	return ad_err(err, "tokenizer: byte-level BPE is not built into this binary");
}

__attribute__((weak)) int
bpe_encode_text(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out, char *err)
{
	return ad_err(err, "tokenizer: byte-level BPE is not built into this binary");
}
#endif

// ---------------------------------------------------------------------------
// loading from GGUF

static int
gguf_special_id(const struct gguf *g, const char *key, int32_t *out)
{
	int64_t v;
	if (gguf_get_i64(g, key, &v))
		return 0;
	*out = v < 0 || v > INT32_MAX ? -1 : (int32_t)v;
	return 0;
}

struct tokenizer *
tok_load_gguf(const struct gguf *g, char *err)
{
	struct gguf_str model;
	if (gguf_get_str(g, "tokenizer.ggml.model", &model)) {
		ad_err(err, "tokenizer: GGUF has no tokenizer.ggml.model");
		return NULL;
	}
	enum tok_kind kind;
	if (gguf_str_eq(model, "llama"))
		kind = TOK_KIND_SPM;
	else if (gguf_str_eq(model, "gpt2") || gguf_str_eq(model, "gemma4")) // gemma4: SentencePiece-style BPE (bpe.c)
		kind = TOK_KIND_BPE;
	else if (gguf_str_eq(model, "bert"))
		kind = TOK_KIND_WPM;
	else {
		ad_err(err,
		       "tokenizer: tokenizer.ggml.model \"%.*s\" is not supported (supported: llama, gpt2, gemma4, bert)",
		       (int)(model.len > 64 ? 64 : model.len), model.ptr);
		return NULL;
	}
	struct gguf_arr tokens, scores, types;
	if (gguf_get_arr(g, "tokenizer.ggml.tokens", &tokens) || tokens.type != GGUF_TYPE_STRING) {
		ad_err(err, "tokenizer: GGUF has no tokenizer.ggml.tokens string array");
		return NULL;
	}
	int have_scores = gguf_get_arr(g, "tokenizer.ggml.scores", &scores) == 0;
	int have_types = gguf_get_arr(g, "tokenizer.ggml.token_type", &types) == 0;
	if (have_scores && scores.n != tokens.n) {
		ad_err(err, "tokenizer: %llu scores for %llu tokens", (unsigned long long)scores.n,
		       (unsigned long long)tokens.n);
		return NULL;
	}
	if (have_types && types.n != tokens.n) {
		ad_err(err, "tokenizer: %llu token types for %llu tokens", (unsigned long long)types.n,
		       (unsigned long long)tokens.n);
		return NULL;
	}
	if (tokens.n == 0 || tokens.n > (1u << 24)) {
		ad_err(err, "tokenizer: vocabulary of %llu tokens", (unsigned long long)tokens.n);
		return NULL;
	}

	struct tokenizer *t = tok_new(err);
	if (!t)
		return NULL;
	t->kind = kind;
	if (tok_vocab_init(t, (int32_t)tokens.n, err))
		goto fail;
	for (uint64_t i = 0; i < tokens.n; i++) {
		struct gguf_str s;
		float score = 0;
		int64_t type = TOK_TYPE_NORMAL;
		if (gguf_arr_str(&tokens, i, &s)) {
			ad_err(err, "tokenizer: token %llu is not a string", (unsigned long long)i);
			goto fail;
		}
		if (have_scores && gguf_arr_f32(&scores, i, &score)) {
			ad_err(err, "tokenizer: score %llu is not a number", (unsigned long long)i);
			goto fail;
		}
		if (have_types && (gguf_arr_i64(&types, i, &type) || type < 0 || type > TOK_TYPE_BYTE)) {
			ad_err(err, "tokenizer: token %llu has a bad token_type", (unsigned long long)i);
			goto fail;
		}
		if (tok_vocab_set(t, (int32_t)i, s.ptr, s.len, score, (enum tok_type)type, err))
			goto fail;
	}

	if (kind == TOK_KIND_SPM) {
		t->bos = 1;
		t->eos = 2;
		t->unk = 0;
		t->add_bos = 1;
		t->add_space_prefix = 1;
	}
	if (kind == TOK_KIND_WPM) { // llama.cpp's defaults for BERT vocabularies
		t->clean_spaces = 1;
		t->bos = 101; // [CLS]
		t->unk = 100;
		t->sep = 102;
		t->pad = 0;
		t->add_bos = 1;
		t->add_sep = 1;
		t->wpm_lowercase = 1;
	}
	gguf_special_id(g, "tokenizer.ggml.bos_token_id", &t->bos);
	gguf_special_id(g, "tokenizer.ggml.eos_token_id", &t->eos);
	gguf_special_id(g, "tokenizer.ggml.eot_token_id", &t->eot);
	gguf_special_id(g, "tokenizer.ggml.eom_token_id", &t->eom);
	gguf_special_id(g, "tokenizer.ggml.unknown_token_id", &t->unk);
	gguf_special_id(g, "tokenizer.ggml.padding_token_id", &t->pad);
	gguf_special_id(g, "tokenizer.ggml.seperator_token_id", &t->sep);
	int b;
	if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == 0)
		t->add_bos = b;
	if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == 0)
		t->add_eos = b;
	if (kind == TOK_KIND_SPM && gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == 0)
		t->add_space_prefix = b;
	if (kind == TOK_KIND_WPM) {
		gguf_special_id(g, "tokenizer.ggml.cls_token_id", &t->bos); // llama.cpp: [CLS] is the BOS
		if (gguf_get_bool(g, "tokenizer.ggml.add_sep_token", &b) == 0)
			t->add_sep = b;
		if (gguf_get_bool(g, "tokenizer.ggml.normalizer.lowercase", &b) == 0)
			t->wpm_lowercase = b;
		t->wpm_strip_accents = t->wpm_lowercase; // llama.cpp: follows lowercase unless set
		if (gguf_get_bool(g, "tokenizer.ggml.normalizer.strip_accents", &b) == 0)
			t->wpm_strip_accents = b;
	}
	struct gguf_str tmpl;
	if (gguf_get_str(g, "tokenizer.chat_template", &tmpl) == 0) {
		t->chat_template = strndup(tmpl.ptr, tmpl.len);
		if (!t->chat_template) {
			ad_err(err, "tokenizer: out of memory");
			goto fail;
		}
	}
	// the variant for requests with tools (llama.cpp's convert script writes it)
	if (gguf_get_str(g, "tokenizer.chat_template.tool_use", &tmpl) == 0) {
		t->chat_template_tool_use = strndup(tmpl.ptr, tmpl.len);
		if (!t->chat_template_tool_use) {
			ad_err(err, "tokenizer: out of memory");
			goto fail;
		}
	}
	if (kind == TOK_KIND_BPE && bpe_load_gguf(t, g, err))
		goto fail;
	if (tok_finish(t, err))
		goto fail;
	return t;
fail:
	tok_free(t);
	return NULL;
}

// ---------------------------------------------------------------------------
// loading a llama2.c tokenizer.bin: int32 max_token_length, then per token
// f32 score, i32 length, bytes. The count is implied by the file size.

static struct tokenizer *
load_llama2c(const uint8_t *d, size_t n, const char *path, char *err)
{
	if (n < 4) {
		ad_err(err, "%s: too short for a llama2.c tokenizer", path);
		return NULL;
	}
	int32_t count = 0;
	for (size_t o = 4; o < n; count++) {
		int32_t len;
		if (n - o < 8) {
			ad_err(err, "%s: token %d truncated at byte %zu", path, count, o);
			return NULL;
		}
		memcpy(&len, d + o + 4, 4);
		if (len < 0 || (size_t)len > n - o - 8) {
			ad_err(err, "%s: token %d has length %d at byte %zu, past the end", path, count, len, o + 4);
			return NULL;
		}
		o += 8 + (size_t)len;
		if (count >= (1 << 24)) {
			ad_err(err, "%s: too many tokens", path);
			return NULL;
		}
	}
	if (count < 3) {
		ad_err(err, "%s: only %d tokens", path, count);
		return NULL;
	}
	struct tokenizer *t = tok_new(err);
	if (!t)
		return NULL;
	t->kind = TOK_KIND_SPM;
	if (tok_vocab_init(t, count, err))
		goto fail;
	char *tmp = NULL;
	size_t o = 4;
	for (int32_t i = 0; i < count; i++) {
		float score;
		int32_t len;
		memcpy(&score, d + o, 4);
		memcpy(&len, d + o + 4, 4);
		const char *s = (const char *)d + o + 8;
		o += 8 + (size_t)len;
		enum tok_type type = TOK_TYPE_NORMAL;
		// the exporter wrote <s> and </s> with newlines around them
		if (i == 1 || i == 2) {
			s = i == 1 ? "<s>" : "</s>";
			len = (int32_t)strlen(s);
			type = TOK_TYPE_CONTROL;
		} else if (i == 0) {
			type = TOK_TYPE_UNKNOWN;
		} else if (parse_byte_piece(s, (size_t)len) >= 0) {
			type = TOK_TYPE_BYTE;
		}
		// pieces carry plain spaces; the vocabulary keeps SentencePiece's ▁
		size_t spaces = 0;
		for (int32_t k = 0; k < len; k++)
			spaces += s[k] == ' ';
		if (spaces && type == TOK_TYPE_NORMAL) {
			char *p = realloc(tmp, (size_t)len + 2 * spaces);
			if (!p) {
				ad_err(err, "tokenizer: out of memory");
				goto fail_tmp;
			}
			tmp = p;
			size_t m = 0;
			for (int32_t k = 0; k < len; k++) {
				if (s[k] == ' ') {
					memcpy(tmp + m, "\xe2\x96\x81", 3);
					m += 3;
				} else {
					tmp[m++] = s[k];
				}
			}
			if (tok_vocab_set(t, i, tmp, m, score, type, err))
				goto fail_tmp;
		} else if (tok_vocab_set(t, i, s, (size_t)len, score, type, err)) {
			goto fail_tmp;
		}
	}
	free(tmp);
	tmp = NULL;
	t->bos = 1;
	t->eos = 2;
	t->unk = 0;
	t->add_bos = 1;
	t->add_space_prefix = 1;
	if (tok_finish(t, err))
		goto fail;
	return t;
fail_tmp:
	free(tmp);
fail:
	tok_free(t);
	return NULL;
}

// ---------------------------------------------------------------------------
// loading a Hugging Face tokenizer.json (+ tokenizer_config.json)

static char *
read_file(const char *path, size_t *n, char *err)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		ad_err(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	char *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len + 65536 + 1 > cap) {
			cap = cap ? cap * 2 : 1 << 20;
			char *p = realloc(buf, cap);
			if (!p) {
				ad_err(err, "%s: out of memory", path);
				goto fail;
			}
			buf = p;
		}
		size_t r = fread(buf + len, 1, cap - len - 1, f);
		len += r;
		if (r == 0) {
			if (ferror(f)) {
				ad_err(err, "%s: read error", path);
				goto fail;
			}
			break;
		}
	}
	fclose(f);
	buf[len] = 0;
	*n = len;
	return buf;
fail:
	fclose(f);
	free(buf);
	return NULL;
}

// the text of a config token entry: "text" or {"content": "text"}
static const char *
config_token(const cJSON *v)
{
	if (cJSON_IsString(v))
		return v->valuestring;
	if (cJSON_IsObject(v)) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
		if (cJSON_IsString(c))
			return c->valuestring;
	}
	return NULL;
}

static int
replace_str(char **dst, const char *s)
{
	char *c = strdup(s);
	if (!c)
		return -1;
	free(*dst);
	*dst = c;
	return 0;
}

static int
apply_config(struct tokenizer *t, const char *json, size_t len, const char *path, char *err)
{
	cJSON *root = cJSON_ParseWithLength(json, len);
	if (!root || !cJSON_IsObject(root)) {
		cJSON_Delete(root);
		return ad_err(err, "%s: not a JSON object", path);
	}
	const char *bos = config_token(cJSON_GetObjectItemCaseSensitive(root, "bos_token"));
	const char *eos = config_token(cJSON_GetObjectItemCaseSensitive(root, "eos_token"));
	const char *unk = config_token(cJSON_GetObjectItemCaseSensitive(root, "unk_token"));
	const char *pad = config_token(cJSON_GetObjectItemCaseSensitive(root, "pad_token"));
	if (bos)
		t->bos = tok_find(t, bos, strlen(bos));
	if (eos)
		t->eos = tok_find(t, eos, strlen(eos));
	if (unk)
		t->unk = tok_find(t, unk, strlen(unk));
	if (pad)
		t->pad = tok_find(t, pad, strlen(pad));
	const cJSON *ab = cJSON_GetObjectItemCaseSensitive(root, "add_bos_token");
	const cJSON *ae = cJSON_GetObjectItemCaseSensitive(root, "add_eos_token");
	// without add_bos_token the tokenizer.json post-processor decides; the
	// models that name a BOS (Llama 3) add it there
	t->add_bos = cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : t->bos >= 0;
	if (cJSON_IsBool(ae))
		t->add_eos = cJSON_IsTrue(ae);
	const cJSON *cs = cJSON_GetObjectItemCaseSensitive(root, "clean_up_tokenization_spaces");
	if (cJSON_IsBool(cs))
		t->clean_spaces = cJSON_IsTrue(cs);
	const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
	const char *tmpl_text = NULL, *tool_use = NULL;
	if (cJSON_IsString(tmpl))
		tmpl_text = tmpl->valuestring;
	else if (cJSON_IsArray(tmpl)) { // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
		const cJSON *it;
		cJSON_ArrayForEach(it, tmpl)
		{
			const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
			const cJSON *tx = cJSON_GetObjectItemCaseSensitive(it, "template");
			if (cJSON_IsString(tx) && cJSON_IsString(nm) && !strcmp(nm->valuestring, "tool_use"))
				tool_use = tx->valuestring;
			else if (cJSON_IsString(tx) &&
			         (!tmpl_text || (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default"))))
				tmpl_text = tx->valuestring;
		}
		if (!tmpl_text)
			tmpl_text = tool_use;
	}
	if (tmpl_text && replace_str(&t->chat_template, tmpl_text) != 0) {
		cJSON_Delete(root);
		return ad_err(err, "tokenizer: out of memory");
	}
	if (tool_use && replace_str(&t->chat_template_tool_use, tool_use) != 0) {
		cJSON_Delete(root);
		return ad_err(err, "tokenizer: out of memory");
	}
	cJSON_Delete(root);
	return 0;
}

// --- SentencePiece-style tokenizer.json (Llama 2, Mistral, Gemma): a BPE
// model over ▁-escaped text with byte fallback. It maps onto the SPM merger:
// a piece made by merge number r scores -r, so the pair merged first is the
// one with the lowest rank; pieces no merge makes never merge.

static int
is_spm_json(const char *json, size_t len)
{
	// cheap probes before a full parse: byte-level BPE files have neither
	const char *probes[] = {"\"byte_fallback\": true", "\"byte_fallback\":true", "\"Metaspace\"", NULL};
	for (int i = 0; probes[i]; i++)
		if (memmem(json, len, probes[i], strlen(probes[i])))
			return 1;
	return 0;
}

static const char *
jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

cJSON *
tok_json_parse(const char *json, size_t len, const cJSON **model, const cJSON **vocab, const cJSON **added, char *err)
{
	cJSON *root = cJSON_ParseWithLength(json, len);
	if (!root) {
		ad_err(err, "not valid JSON");
		return NULL;
	}
	*model = cJSON_GetObjectItemCaseSensitive(root, "model");
	*vocab = cJSON_GetObjectItemCaseSensitive(*model, "vocab");
	*added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	return root;
}

// tokenizer.json's model.vocab and added_tokens: every id an integer in
// [0, 2^24); the vocabulary is one past the largest, ids nobody names stay
// empty, unused pieces (padding up to a round size)
int
tok_json_vocab_init(struct tokenizer *t, const cJSON *vocab, const cJSON *added, char *err)
{
	double max_id = -1;
	const cJSON *it;
	cJSON_ArrayForEach(it, vocab)
	{
		if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (1 << 24) ||
		    it->valuedouble != (int32_t)it->valuedouble)
			return ad_err(err, "model.vocab[\"%.64s\"] is not a token id", it->string ? it->string : "");
		if (it->valuedouble > max_id)
			max_id = it->valuedouble;
	}
	cJSON_ArrayForEach(it, added)
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
		if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
		    id->valuedouble != (int32_t)id->valuedouble || !jstr(it, "content"))
			return ad_err(err, "added_tokens entry without a valid id and content");
		if (id->valuedouble > max_id)
			max_id = id->valuedouble;
	}
	if (max_id < 0)
		return ad_err(err, "empty vocabulary");
	int32_t n = (int32_t)max_id + 1;
	if (tok_vocab_init(t, n, err))
		return -1;
	for (int32_t i = 0; i < n; i++)
		t->tok[i].type = TOK_TYPE_UNUSED;
	return 0;
}

// added_tokens over what model.vocab set: special -> control, else
// user-defined, unk -> unknown; lstrip / rstrip as attributes
int
tok_json_added(struct tokenizer *t, const cJSON *added, const char *unk, float score, char *err)
{
	const cJSON *it;
	cJSON_ArrayForEach(it, added)
	{
		int32_t id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
		const char *c = jstr(it, "content");
		enum tok_type ty = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"))
		                           ? TOK_TYPE_CONTROL
		                           : TOK_TYPE_USER_DEFINED;
		if (unk && !strcmp(unk, c))
			ty = TOK_TYPE_UNKNOWN;
		if (tok_vocab_set(t, id, c, strlen(c), score, ty, err))
			return -1;
		t->tok[id].attr =
			(uint8_t)((cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "lstrip")) ? TOK_ATTR_LSTRIP : 0) |
		                  (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "rstrip")) ? TOK_ATTR_RSTRIP : 0));
	}
	return 0;
}

// does the normalizer / pre-tokenizer prepend a ▁ to the text?
static int
spm_json_prefix(const cJSON *n)
{
	if (!cJSON_IsObject(n))
		return 0;
	const char *type = jstr(n, "type");
	if (!type)
		return 0;
	if (!strcmp(type, "Prepend"))
		return 1;
	if (!strcmp(type, "Metaspace")) {
		const char *scheme = jstr(n, "prepend_scheme");
		const cJSON *aps = cJSON_GetObjectItemCaseSensitive(n, "add_prefix_space");
		if (scheme)
			return strcmp(scheme, "never") != 0;
		return !cJSON_IsBool(aps) || cJSON_IsTrue(aps);
	}
	if (!strcmp(type, "Sequence")) {
		const cJSON *it;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(n, "normalizers"))
		{
			if (spm_json_prefix(it))
				return 1;
		}
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"))
		{
			if (spm_json_prefix(it))
				return 1;
		}
	}
	return 0;
}

static int
load_spm_json(struct tokenizer *t, const char *json, size_t len, char *err)
{
	int rc = -1;
	const cJSON *model, *vocab, *added;
	cJSON *root = tok_json_parse(json, len, &model, &vocab, &added, err);
	if (!root)
		return -1;
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	const char *type = jstr(model, "type");
	if (!type || strcmp(type, "BPE") || !cJSON_IsObject(vocab)) {
		ad_err(err, "SentencePiece-style tokenizer.json needs model.type BPE with a vocab object (got %s)",
		       type ? type : "no type");
		goto done;
	}
	if (tok_json_vocab_init(t, vocab, added, err))
		goto done;
	const cJSON *it;
	const char *unk = jstr(model, "unk_token");
	cJSON_ArrayForEach(it, vocab)
	{
		const char *p = it->string;
		size_t n = strlen(p);
		enum tok_type ty = parse_byte_piece(p, n) >= 0 ? TOK_TYPE_BYTE : TOK_TYPE_NORMAL;
		if (unk && !strcmp(unk, p))
			ty = TOK_TYPE_UNKNOWN;
		if (tok_vocab_set(t, it->valueint, p, n, -INFINITY, ty, err))
			goto done;
	}
	if (tok_json_added(t, added, unk, -INFINITY, err))
		goto done;
	// merge ranks become scores; the map is needed to find the merged piece
	if (build_map(t, err))
		goto done;
	int rank = 0;
	char *cat = NULL;
	size_t cat_cap = 0;
	cJSON_ArrayForEach(it, merges)
	{
		const char *a = NULL, *b = NULL;
		size_t na = 0, nb = 0;
		if (cJSON_IsString(it)) {
			const char *sp = strchr(it->valuestring + (it->valuestring[0] != 0), ' ');
			if (sp) {
				a = it->valuestring;
				na = (size_t)(sp - a);
				b = sp + 1;
				nb = strlen(b);
			}
		} else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2) {
			const cJSON *x = cJSON_GetArrayItem(it, 0), *y = cJSON_GetArrayItem(it, 1);
			if (cJSON_IsString(x) && cJSON_IsString(y)) {
				a = x->valuestring;
				na = strlen(a);
				b = y->valuestring;
				nb = strlen(b);
			}
		}
		if (!a) {
			free(cat);
			ad_err(err, "merge %d is neither \"a b\" nor [\"a\", \"b\"]", rank);
			goto done;
		}
		if (na + nb > cat_cap) {
			cat_cap = (na + nb) * 2;
			char *p = realloc(cat, cat_cap);
			if (!p) {
				free(cat);
				ad_err(err, "out of memory");
				goto done;
			}
			cat = p;
		}
		memcpy(cat, a, na);
		memcpy(cat + na, b, nb);
		int32_t id = tok_find(t, cat, na + nb);
		if (id >= 0 && tok_score(t, id) == -INFINITY && t->tok[id].type == TOK_TYPE_NORMAL &&
		    tok_set_score(t, id, (float)-rank, err)) {
			free(cat);
			goto done;
		}
		rank++;
	}
	free(cat);
	const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
	t->add_space_prefix =
		spm_json_prefix(cJSON_GetObjectItemCaseSensitive(root, "normalizer")) || spm_json_prefix(pre);
	t->unk = unk ? tok_find(t, unk, strlen(unk)) : -1;
	rc = 0;
done:
	cJSON_Delete(root);
	return rc;
}

// --- WordPiece tokenizer.json (BERT-style) ----------------------------------------

static int
is_ugm_json(const char *json, size_t len)
{
	return memmem(json, len, "\"Unigram\"", 9) != NULL;
}

static int
is_wpm_json(const char *json, size_t len)
{
	return memmem(json, len, "\"WordPiece\"", 11) != NULL;
}

// the BertNormalizer / Lowercase / StripAccents / NFD (alone or in a
// Sequence) a WordPiece tokenizer.json may have; anything else is refused
static int
wpm_normalizer(struct tokenizer *t, const cJSON *n, int *strip_set, char *err)
{
	if (!n || cJSON_IsNull(n))
		return 0;
	const char *type = jstr(n, "type");
	if (!type)
		return ad_err(err, "normalizer without a type");
	if (!strcmp(type, "Sequence")) {
		const cJSON *it;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(n, "normalizers"))
		{
			if (wpm_normalizer(t, it, strip_set, err))
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "BertNormalizer")) {
		// clean_text and handle_chinese_chars are what wpm.c always does
		const cJSON *lc = cJSON_GetObjectItemCaseSensitive(n, "lowercase");
		const cJSON *sa = cJSON_GetObjectItemCaseSensitive(n, "strip_accents");
		if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(n, "clean_text")) ||
		    cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(n, "handle_chinese_chars")))
			return ad_err(err,
			              "BertNormalizer without clean_text or handle_chinese_chars is not supported");
		t->wpm_lowercase = !cJSON_IsFalse(lc);
		if (cJSON_IsBool(sa)) {
			t->wpm_strip_accents = cJSON_IsTrue(sa);
			*strip_set = 1;
		}
		return 0;
	}
	if (!strcmp(type, "Lowercase")) {
		t->wpm_lowercase = 1;
		return 0;
	}
	if (!strcmp(type, "StripAccents") || !strcmp(type, "NFD")) {
		// NFD then StripAccents is the pair that strips; NFD alone would
		// keep the marks, which wpm.c does not do
		t->wpm_strip_accents = 1;
		*strip_set = 1;
		return 0;
	}
	return ad_err(err,
	              "WordPiece with a %s normalizer is not supported (BertNormalizer, Lowercase, NFD, "
	              "StripAccents)",
	              type);
}

// the [CLS] ... [SEP] a post-processor adds: ids of the first and last special
static int
wpm_post(struct tokenizer *t, const cJSON *pp, char *err)
{
	if (!pp || cJSON_IsNull(pp))
		return 0;
	const char *type = jstr(pp, "type");
	const char *cls = NULL, *sep = NULL;
	if (type && (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing"))) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(pp, "cls"),
			    *s = cJSON_GetObjectItemCaseSensitive(pp, "sep");
		cls = cJSON_IsString(cJSON_GetArrayItem(c, 0)) ? cJSON_GetArrayItem(c, 0)->valuestring : NULL;
		sep = cJSON_IsString(cJSON_GetArrayItem(s, 0)) ? cJSON_GetArrayItem(s, 0)->valuestring : NULL;
	} else if (type && !strcmp(type, "TemplateProcessing")) {
		const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
		int n = cJSON_GetArraySize(single);
		for (int i = 0; i < n; i++) {
			const cJSON *e = cJSON_GetArrayItem(single, i);
			const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
			if (st && i == 0)
				cls = jstr(st, "id");
			else if (st && i == n - 1)
				sep = jstr(st, "id");
			else if (!cJSON_GetObjectItemCaseSensitive(e, "Sequence"))
				return ad_err(err,
				              "TemplateProcessing: only specials around the sequence are supported");
		}
	} else {
		return ad_err(err, "WordPiece with a %s post_processor is not supported", type ? type : "typeless");
	}
	t->bos = cls ? tok_find(t, cls, strlen(cls)) : -1;
	t->sep = sep ? tok_find(t, sep, strlen(sep)) : -1;
	if ((cls && t->bos < 0) || (sep && t->sep < 0))
		return ad_err(err, "post_processor names %s, which is not in the vocabulary",
		              cls && t->bos < 0 ? cls : sep);
	t->add_bos = t->bos >= 0;
	t->add_sep = t->sep >= 0;
	return 0;
}

// model.vocab as llama.cpp's BERT conversion writes it: a word-initial
// piece with ▁, a continuation ("##x") bare, added tokens as they are
static int
load_wpm_json(struct tokenizer *t, const char *json, size_t len, char *err)
{
	int rc = -1;
	const cJSON *model, *vocab, *added;
	cJSON *root = tok_json_parse(json, len, &model, &vocab, &added, err);
	if (!root)
		return -1;
	const char *type = jstr(model, "type");
	const char *prefix = jstr(model, "continuing_subword_prefix");
	const cJSON *maxc = cJSON_GetObjectItemCaseSensitive(model, "max_input_chars_per_word");
	const char *pre = jstr(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), "type");
	if (!type || strcmp(type, "WordPiece") || !cJSON_IsObject(vocab)) {
		ad_err(err, "a WordPiece tokenizer.json needs model.type WordPiece with a vocab object");
		goto done;
	}
	if (!pre || strcmp(pre, "BertPreTokenizer")) {
		ad_err(err, "WordPiece with a %s pre_tokenizer is not supported (BertPreTokenizer)",
		       pre ? pre : "missing");
		goto done;
	}
	if (!prefix)
		prefix = "##";
	size_t plen = strlen(prefix);
	if (tok_json_vocab_init(t, vocab, added, err))
		goto done;
	const cJSON *it;
	char buf[1024];
	cJSON_ArrayForEach(it, vocab)
	{
		const char *p = it->string;
		size_t n = strlen(p);
		if (n + 3 > sizeof buf) {
			ad_err(err, "vocab entry \"%.40s...\" is too long", p);
			goto done;
		}
		size_t m;
		if (n >= plen && !memcmp(p, prefix, plen)) { // a continuation
			m = n - plen;
			memcpy(buf, p + plen, m);
		} else {
			memcpy(buf, "\xe2\x96\x81", 3);
			memcpy(buf + 3, p, n);
			m = n + 3;
		}
		if (tok_vocab_set(t, it->valueint, buf, m, 0, TOK_TYPE_NORMAL, err))
			goto done;
	}
	const char *unk = jstr(model, "unk_token");
	if (tok_json_added(t, added, unk, 0, err))
		goto done;
	if (build_map(t, err))
		goto done;
	t->unk = unk ? tok_find(t, unk, strlen(unk)) : -1;
	if (unk && t->unk < 0) {
		ad_err(err, "unk_token %.40s is not among the added tokens", unk);
		goto done;
	}
	// Hugging Face's WordPiece: a word of more characters is [UNK] whole
	t->wpm_max_chars = cJSON_IsNumber(maxc) && maxc->valuedouble > 0 ? (int)maxc->valuedouble : 100;
	t->wpm_lowercase = 0;
	int strip_set = 0;
	if (wpm_normalizer(t, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &strip_set, err))
		goto done;
	if (!strip_set)
		t->wpm_strip_accents = t->wpm_lowercase; // BertNormalizer's strip_accents: null
	if (wpm_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err))
		goto done;
	rc = 0;
done:
	cJSON_Delete(root);
	return rc;
}

// load_hf: tokenizer.json at json_path, config at config_path (may be NULL
// or missing).
static struct tokenizer *
load_hf(const char *json_path, const char *config_path, char *err)
{
	size_t n;
	char *json = read_file(json_path, &n, err);
	if (!json)
		return NULL;
	struct tokenizer *t = tok_new(err);
	if (!t) {
		free(json);
		return NULL;
	}
	if (is_ugm_json(json, n)) {
		t->kind = TOK_KIND_UGM;
		if (ugm_load_hf_json(t, json, n, err)) {
			ad_err_prefix(err, "%s", json_path);
			goto fail;
		}
	} else if (is_wpm_json(json, n)) {
		t->kind = TOK_KIND_WPM;
		if (load_wpm_json(t, json, n, err)) {
			ad_err_prefix(err, "%s", json_path);
			goto fail;
		}
	} else if (is_spm_json(json, n)) {
		t->kind = TOK_KIND_SPM;
		if (load_spm_json(t, json, n, err)) {
			ad_err_prefix(err, "%s", json_path);
			goto fail;
		}
	} else {
		t->kind = TOK_KIND_BPE;
		if (bpe_load_hf_json(t, json, n, err)) {
			ad_err_prefix(err, "%s", json_path);
			goto fail;
		}
	}
	free(json);
	json = NULL;
	// tok_find needs the map; the config is applied after a first finish
	if (tok_finish(t, err))
		goto fail;
	struct stat st;
	if (config_path && stat(config_path, &st) == 0) {
		char *cfg = read_file(config_path, &n, err);
		if (!cfg || apply_config(t, cfg, n, config_path, err)) {
			free(cfg);
			goto fail;
		}
		free(cfg);
		if (tok_finish(t, err))
			goto fail;
	}
	// chat_template.jinja beside tokenizer.json overrides the config's
	// template, as in transformers
	char jpath[4096];
	const char *slash = strrchr(json_path, '/');
	snprintf(jpath, sizeof jpath, "%.*schat_template.jinja", slash ? (int)(slash - json_path + 1) : 0, json_path);
	if (stat(jpath, &st) == 0) {
		char *tx = read_file(jpath, &n, err);
		if (!tx)
			goto fail;
		free(t->chat_template);
		t->chat_template = tx;
		if (tok_finish(t, err))
			goto fail;
	}
	return t;
fail:
	free(json);
	tok_free(t);
	return NULL;
}

struct tokenizer *
tok_load(const char *path, char *err)
{
	struct stat st;
	if (stat(path, &st)) {
		ad_err(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	char a[4096], b[4096];
	if (S_ISDIR(st.st_mode)) {
		snprintf(a, sizeof a, "%s/tokenizer.json", path);
		snprintf(b, sizeof b, "%s/tokenizer_config.json", path);
		if (stat(a, &st)) {
			ad_err(err, "%s: directory has no tokenizer.json", path);
			return NULL;
		}
		return load_hf(a, b, err);
	}
	size_t len = strlen(path);
	if (len >= 5 && strcmp(path + len - 5, ".json") == 0) {
		const char *slash = strrchr(path, '/');
		if (slash)
			snprintf(b, sizeof b, "%.*s/tokenizer_config.json", (int)(slash - path), path);
		else
			snprintf(b, sizeof b, "tokenizer_config.json");
		return load_hf(path, b, err);
	}
	FILE *f = fopen(path, "rb");
	if (!f) {
		ad_err(err, "%s: %s", path, strerror(errno));
		return NULL;
	}
	char magic[4] = {0};
	size_t got = fread(magic, 1, 4, f);
	fclose(f);
	if (got == 4 && memcmp(magic, GGUF_MAGIC, 4) == 0) {
		struct gguf *g = gguf_open(path, err);
		if (!g)
			return NULL;
		struct tokenizer *t = tok_load_gguf(g, err);
		gguf_close(g);
		if (!t)
			ad_err_prefix(err, "%s", path);
		return t;
	}
	size_t n;
	char *d = read_file(path, &n, err);
	if (!d)
		return NULL;
	struct tokenizer *t = load_llama2c((const uint8_t *)d, n, path, err);
	free(d);
	return t;
}

// ---------------------------------------------------------------------------
// SentencePiece: characters merged pairwise, highest-scoring pair first
// (ties: leftmost), as llama.cpp's llm_tokenizer_spm does; what is left
// unmerged and not in the vocabulary falls back to byte tokens.

struct spm_sym {
	int32_t prev, next;
	uint32_t off, n;
};

struct spm_bigram {
	float score;
	int32_t left, right;
	uint32_t size;
};

struct spm_heap {
	struct spm_bigram *v;
	size_t n, cap;
};

static int
bigram_before(const struct spm_bigram *a, const struct spm_bigram *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int
heap_push(struct spm_heap *h, struct spm_bigram b, char *err)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		struct spm_bigram *v = realloc(h->v, cap * sizeof *v);
		if (!v)
			return ad_err(err, "tokenizer: out of memory");
		h->v = v;
		h->cap = cap;
	}
	size_t i = h->n++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!bigram_before(&b, &h->v[p]))
			break;
		h->v[i] = h->v[p];
		i = p;
	}
	h->v[i] = b;
	return 0;
}

static struct spm_bigram
heap_pop(struct spm_heap *h)
{
	struct spm_bigram top = h->v[0], last = h->v[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c]))
			c++;
		if (!bigram_before(&h->v[c], &last))
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

static int
spm_try_bigram(const struct tokenizer *t, const char *text, struct spm_sym *sym, int32_t left, int32_t right,
               struct spm_heap *h, char *err)
{
	if (left < 0 || right < 0)
		return 0;
	uint32_t size = sym[left].n + sym[right].n;
	int32_t id = tok_find(t, text + sym[left].off, size);
	if (id < 0)
		return 0;
	const float score = tok_score(t, id);
	if (score == -INFINITY) // -inf: no merge makes this piece
		return 0;
	struct spm_bigram b = {score, left, right, size};
	return heap_push(h, b, err);
}

static int
spm_emit(const struct tokenizer *t, const char *s, uint32_t n, struct tok_ids *out, char *err)
{
	int32_t id = tok_find(t, s, n);
	if (id >= 0)
		return tok_ids_push(out, id, err);
	for (uint32_t i = 0; i < n; i++) {
		id = t->byte_tok[(uint8_t)s[i]];
		if (id < 0)
			id = t->unk;
		if (id < 0)
			return ad_err(err, "tokenizer: byte 0x%02x has no token and the vocabulary has no unk",
			              (uint8_t)s[i]);
		if (tok_ids_push(out, id, err))
			return -1;
	}
	return 0;
}

struct spm_scratch {
	struct spm_sym *sym;
	size_t cap;
	struct spm_heap h;
};

// spm_encode: text has spaces escaped already
static int
spm_encode(const struct tokenizer *t, const char *text, size_t len, struct spm_scratch *sc, struct tok_ids *out,
           char *err)
{
	if (len == 0)
		return 0;
	if (len > UINT32_MAX / 2)
		return ad_err(err, "tokenizer: text of %zu bytes is too long", len);
	if (len > sc->cap) {
		free(sc->sym);
		sc->sym = malloc(len * sizeof *sc->sym);
		sc->cap = sc->sym ? len : 0;
		if (!sc->sym)
			return ad_err(err, "tokenizer: out of memory");
	}
	struct spm_sym *sym = sc->sym;
	struct spm_heap *h = &sc->h;
	h->n = 0;
	// one symbol per UTF-8 character; a byte that does not start a complete
	// sequence stands alone (llama.cpp would swallow the next bytes, which
	// could split a ▁ and lose the space: for valid text both agree)
	int32_t ns = 0;
	for (size_t off = 0; off < len;) {
		size_t n = (size_t)ad_utf8_len((uint8_t)text[off]);
		if (n == 0 || n > len - off)
			n = 1;
		for (size_t k = 1; k < n; k++)
			if (((uint8_t)text[off + k] & 0xc0) != 0x80) {
				n = 1;
				break;
			}
		sym[ns] = (struct spm_sym){ns - 1, ns + 1, (uint32_t)off, (uint32_t)n};
		ns++;
		off += n;
	}
	sym[ns - 1].next = -1;
	for (int32_t i = 1; i < ns; i++)
		if (spm_try_bigram(t, text, sym, i - 1, i, h, err))
			return -1;
	while (h->n) {
		struct spm_bigram b = heap_pop(h);
		struct spm_sym *l = &sym[b.left], *r = &sym[b.right];
		if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
			continue; // outdated
		l->n += r->n;
		r->n = 0;
		l->next = r->next;
		if (r->next >= 0)
			sym[r->next].prev = b.left;
		if (spm_try_bigram(t, text, sym, l->prev, b.left, h, err) ||
		    spm_try_bigram(t, text, sym, b.left, sym[b.left].next, h, err))
			return -1;
	}
	for (int32_t i = 0; i != -1; i = sym[i].next)
		if (spm_emit(t, text + sym[i].off, sym[i].n, out, err))
			return -1;
	return 0;
}

static int
is_sp(const char *p)
{
	return p[0] == '\xe2' && p[1] == '\x96' && p[2] == '\x81';
}

static int
spm_fragment(const struct tokenizer *t, const char *text, size_t len, int prefix_space, struct tok_ids *out, char *err)
{
	size_t spaces = prefix_space;
	for (size_t i = 0; i < len; i++)
		spaces += text[i] == ' ';
	if (len + 2 * spaces < len)
		return ad_err(err, "tokenizer: text too long");
	char *buf = malloc(len + prefix_space + 2 * spaces + 1);
	if (!buf)
		return ad_err(err, "tokenizer: out of memory");
	size_t m = 0;
	if (prefix_space) {
		memcpy(buf, "\xe2\x96\x81", 3);
		m = 3;
	}
	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(buf + m, "\xe2\x96\x81", 3);
			m += 3;
		} else {
			buf[m++] = text[i];
		}
	}
	// When no piece has a ▁ after a non-▁ character, no piece can span a
	// word start, so each word is merged on its own: the same result as
	// merging the whole text, with a small heap that stays in cache.
	struct spm_scratch sc = {0};
	int rc = 0;
	size_t start = 0;
	if (t->spm_word_split)
		for (size_t i = 3; i + 3 <= m && !rc; i++)
			if (is_sp(buf + i) && !is_sp(buf + i - 3) && i - start >= 64) {
				rc = spm_encode(t, buf + start, i - start, &sc, out, err);
				start = i;
			}
	if (!rc)
		rc = spm_encode(t, buf + start, m - start, &sc, out, err);
	free(sc.sym);
	free(sc.h.v);
	free(buf);
	return rc;
}

// ---------------------------------------------------------------------------
// encode: split off special tokens (llama.cpp's tokenizer_st_partition: for
// each special token, longest first, every occurrence in the text not yet
// claimed), then run the model over each raw fragment.

struct frag {
	int32_t id; // -1 for raw text
	size_t off, len;
};

struct frags {
	struct frag *v;
	size_t n, cap;
};

static int
frags_insert(struct frags *f, size_t at, struct frag x, char *err)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 16;
		struct frag *v = realloc(f->v, cap * sizeof *v);
		if (!v)
			return ad_err(err, "tokenizer: out of memory");
		f->v = v;
		f->cap = cap;
	}
	memmove(f->v + at + 1, f->v + at, (f->n - at) * sizeof *f->v);
	f->v[at] = x;
	f->n++;
	return 0;
}

static int
partition(const struct tokenizer *t, const char *text, struct frags *f, int parse_special, char *err)
{
	for (int32_t k = 0; k < t->n_special; k++) {
		int32_t id = t->special[k];
		const struct tok_entry *e = &t->tok[id];
		if (!parse_special && (e->type == TOK_TYPE_CONTROL || e->type == TOK_TYPE_UNKNOWN))
			continue;
		const char *sp = t->strs + e->off;
		for (size_t i = 0; i < f->n; i++) {
			if (f->v[i].id >= 0)
				continue;
			size_t off = f->v[i].off, len = f->v[i].len;
			const char *m = memmem(text + off, len, sp, e->len);
			if (!m)
				continue;
			// replace fragment i by: left, token, rest (rest is scanned next)
			size_t at = (size_t)(m - text);
			size_t l_len = at - off;
			size_t r_off = at + e->len, r_len = off + len - r_off;
			if (e->attr & TOK_ATTR_LSTRIP)
				while (l_len && isspace((uint8_t)text[off + l_len - 1]))
					l_len--;
			if (e->attr & TOK_ATTR_RSTRIP)
				while (r_len && isspace((uint8_t)text[r_off])) {
					r_off++;
					r_len--;
				}
			f->v[i] = (struct frag){id, at, e->len};
			if (l_len) {
				if (frags_insert(f, i, (struct frag){-1, off, l_len}, err))
					return -1;
				i++;
			}
			if (r_len && frags_insert(f, i + 1, (struct frag){-1, r_off, r_len}, err))
				return -1;
		}
	}
	return 0;
}

int
tok_encode(const struct tokenizer *t, const char *text, size_t len, int add_bos, int parse_special, int32_t **ids,
           size_t *n_ids, char *err)
{
	struct tok_ids out = {0};
	struct frags f = {0};
	*ids = NULL;
	*n_ids = 0;
	int add_special = add_bos != 0;
	int bos = add_bos < 0 ? t->add_bos : add_bos > 0;
	if (add_special && bos && t->bos >= 0 && tok_ids_push(&out, t->bos, err))
		goto fail;
	if (len && frags_insert(&f, 0, (struct frag){-1, 0, len}, err))
		goto fail;
	if (len && t->n_special && partition(t, text, &f, parse_special, err))
		goto fail;
	int prev_special = 1;
	for (size_t i = 0; i < f.n; i++) {
		struct frag *x = &f.v[i];
		if (x->id >= 0) {
			if (tok_ids_push(&out, x->id, err))
				goto fail;
			prev_special = 1;
			continue;
		}
		int rc;
		if (t->kind == TOK_KIND_SPM)
			rc = spm_fragment(t, text + x->off, x->len, t->add_space_prefix && prev_special, &out, err);
		else if (t->kind == TOK_KIND_UGM)
			rc = ugm_encode_text(t, text + x->off, x->len, x->off == 0, &out, err);
		else if (t->kind == TOK_KIND_WPM)
			rc = wpm_encode_text(t, text + x->off, x->len, &out, err);
		else
			rc = bpe_encode_text(t, text + x->off, x->len, &out, err);
		if (rc)
			goto fail;
		prev_special = 0;
	}
	if (add_special && t->add_eos && t->eos >= 0 && tok_ids_push(&out, t->eos, err))
		goto fail;
	if (add_special && t->add_sep && t->sep >= 0 && tok_ids_push(&out, t->sep, err))
		goto fail;
	free(f.v);
	if (!out.v && !(out.v = malloc(sizeof *out.v))) {
		ad_err(err, "tokenizer: out of memory");
		return -1;
	}
	*ids = out.v;
	*n_ids = out.n;
	return 0;
fail:
	free(f.v);
	free(out.v);
	return -1;
}

// ---------------------------------------------------------------------------
// decode

int
tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err)
{
	*out = NULL;
	*out_len = 0;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= t->n_vocab)
			return ad_err(err, "tokenizer: token id %d at position %zu is outside the vocabulary of %d",
			              ids[i], i, t->n_vocab);
		total += t->tok[ids[i]].tlen;
	}
	char *s = malloc(total + 1);
	if (!s)
		return ad_err(err, "tokenizer: out of memory (%zu bytes)", total + 1);
	size_t m = 0;
	// the space of the first piece's ▁ (SPM's prefix, WPM's word start)
	int strip = ((t->kind == TOK_KIND_SPM || t->kind == TOK_KIND_UGM) && t->add_space_prefix) ||
	            t->kind == TOK_KIND_WPM;
	for (size_t i = 0; i < n; i++) {
		const struct tok_entry *e = &t->tok[ids[i]];
		const char *p = tok_text(t->strs, e);
		size_t k = e->tlen;
		if (!k)
			continue;
		if (strip && *p == ' ') {
			p++;
			k--;
		}
		strip = 0;
		memcpy(s + m, p, k);
		m += k;
	}
	s[m] = 0;
	*out = s;
	*out_len = m;
	return 0;
}

void
tok_stream_init(struct tok_stream *s, const struct tokenizer *t)
{
	memset(s, 0, sizeof *s);
	s->t = t;
}

void
tok_stream_free(struct tok_stream *s)
{
	if (s->big != s->buf)
		free(s->big);
	s->big = NULL;
	s->big_cap = 0;
}

const char *
tok_stream_push(struct tok_stream *s, int32_t id, size_t *n, char *err)
{
	*n = 0;
	if (id < 0 || id >= s->t->n_vocab) {
		ad_err(err, "tokenizer: token id %d is outside the vocabulary of %d", id, s->t->n_vocab);
		return NULL;
	}
	const struct tok_entry *e = &s->t->tok[id];
	size_t total = s->n_hold + e->tlen;
	char *dst = s->buf;
	if (total > sizeof s->buf) {
		if (total > s->big_cap) {
			char *p = realloc(s->big, total);
			if (!p) {
				ad_err(err, "tokenizer: out of memory");
				return NULL;
			}
			s->big = p;
			s->big_cap = total;
		}
		dst = s->big;
	}
	memcpy(dst, s->hold, s->n_hold);
	memcpy(dst + s->n_hold, tok_text(s->t->strs, e), e->tlen);
	size_t tail = ad_utf8_tail(dst, total);
	memcpy(s->hold, dst + total - tail, tail);
	s->n_hold = tail;
	*n = total - tail;
	return dst;
}

const char *
tok_stream_flush(struct tok_stream *s, size_t *n)
{
	memcpy(s->buf, s->hold, s->n_hold);
	*n = s->n_hold;
	s->n_hold = 0;
	return s->buf;
}

// ---------------------------------------------------------------------------
// accessors

int32_t
tok_n_vocab(const struct tokenizer *t)
{
	return t->n_vocab;
}

int32_t
tok_bos(const struct tokenizer *t)
{
	return t->bos;
}

int32_t
tok_eos(const struct tokenizer *t)
{
	return t->eos;
}

int32_t
tok_eot(const struct tokenizer *t)
{
	return t->eot;
}

int
tok_add_bos(const struct tokenizer *t)
{
	return t->add_bos;
}

int
tok_is_eog(const struct tokenizer *t, int32_t id)
{
	for (int32_t i = 0; i < t->n_eog; i++)
		if (t->eog[i] == id)
			return 1;
	return 0;
}

int
tok_is_control(const struct tokenizer *t, int32_t id)
{
	return id >= 0 && id < t->n_vocab && t->tok[id].type == TOK_TYPE_CONTROL;
}

const char *
tok_piece(const struct tokenizer *t, int32_t id, size_t *len)
{
	*len = 0;
	if (id < 0 || id >= t->n_vocab)
		return NULL;
	return tok_entry_piece(t, id, len);
}

const char *
tok_token_text(const struct tokenizer *t, int32_t id, size_t *len)
{
	*len = 0;
	if (id < 0 || id >= t->n_vocab)
		return NULL;
	*len = t->tok[id].tlen;
	return tok_text(t->strs, &t->tok[id]);
}

// llama.cpp's clean_spaces, pass by pass, s[0..n) in place; the new length
static size_t
clean_spaces(char *s, size_t n)
{
	if (n < 2)
		return n;
	// " ?", " !", " .", " ,": the space goes
	size_t m = 1;
	for (size_t i = 1; i < n; i++) {
		char x = s[i];
		if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
			m--;
		s[m++] = x;
	}
	// " ' ": both spaces go (reading the pass's input: a copy)
	char *in = malloc(m);
	if (!in)
		return m;
	memcpy(in, s, m);
	n = m;
	m = 1;
	for (size_t i = 1; i < n; i++) {
		char x = in[i];
		s[m++] = x;
		if (x == '\'' && i + 1 < n && in[i - 1] == ' ' && in[i + 1] == ' ') {
			s[m - 2] = x; // over the space before it
			m--;
			i++; // and the one after it is skipped
		}
	}
	// " 's", " 'm", " 're", " 've": the space goes (not for 't, 'd, 'll)
	memcpy(in, s, m);
	n = m;
	m = 1;
	for (size_t i = 1; i < n; i++) {
		char x = in[i];
		if (in[i - 1] == ' ' && x == '\'' && i + 1 < n) {
			char x1 = in[i + 1], x2 = i + 2 < n ? in[i + 2] : 0;
			if (x1 == 's' || x1 == 'm' ||
			    (i + 2 < n && ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))))
				m--;
		}
		s[m++] = x;
	}
	free(in);
	return m;
}

int
tok_detokenize(const struct tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *out_len, char *err)
{
	if (tok_decode(t, ids, n, out, out_len, err))
		return -1;
	if (t->clean_spaces) {
		*out_len = clean_spaces(*out, *out_len);
		(*out)[*out_len] = 0;
	}
	return 0;
}

int
tok_clean_spaces(const struct tokenizer *t)
{
	return t->clean_spaces;
}

const char *
tok_kind_name(const struct tokenizer *t)
{
	return t->kind == TOK_KIND_SPM   ? "spm"
	       : t->kind == TOK_KIND_WPM ? "wpm"
	       : t->kind == TOK_KIND_UGM ? "ugm"
	                                 : "bpe";
}

const char *
tok_chat_template(const struct tokenizer *t)
{
	return t->chat_template;
}

enum tok_chat_family
tok_chat_family(const struct tokenizer *t)
{
	return t->chat;
}
