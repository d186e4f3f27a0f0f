// bpe.c - byte-level BPE: loading (GGUF, tokenizer.json) and encoding.
//
// Encoding a fragment: optional NFC, pre-tokenization (pretok.h), then per
// piece: every byte becomes the token of its GPT-2 byte-map character, and
// adjacent pairs merge lowest rank first (leftmost among equal ranks) until
// no listed pair is left. Pieces of up to BPE_SMALL bytes use a plain array;
// longer ones a linked list of symbols plus a heap of candidate pairs, so a
// piece of n bytes costs O(n log n), not O(n^2). Stale heap entries (a side
// already merged away) are skipped when popped.
// With ignore_merges (Llama 3) a piece that is itself a vocabulary entry is
// emitted whole, as Hugging Face tokenizers does.
//
// Bytes of invalid UTF-8 stay what they are: the byte map covers all 256
// values, so they encode (and decode) exactly; llama.cpp would replace them
// by U+FFFD first.
//
// SentencePiece-style BPE (Gemma 4: tokenizer.ggml.model "gemma4", or a pre
// name with escape set, pretok.h) has no byte map: spaces become U+2581,
// the pieces (runs of newlines, runs of anything else) merge from their UTF-8
// characters, and a character with no token of its own, which no merge can
// reach, falls back to the <0xNN> tokens of its bytes (dropped where the
// vocabulary has none), as llama.cpp does. With newline_words a piece of
// newlines that is itself a token is emitted whole.
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "gguf.h"
#include "pretok.h"
#include "sbuf.h"
#include "tokenizer-impl.h"
#include "unicode.h"
#include "utf8.h"

struct bpe_priv {
	struct pretok pre;
	int nfc;              // normalizer: NFC
	int add_prefix_space; // ByteLevel add_prefix_space (GPT-2 style JSON)
	int escape;           // SentencePiece-style (t->escape_spaces): see the top
	int newline_words;    // escape: a piece of newlines that is a token is one
	int32_t byte_id[256]; // token of each byte's map character (escape: its <0xNN>), -1 if none
};

static void
priv_free(void *p)
{
	pretok_free(&((struct bpe_priv *)p)->pre);
	free(p);
}

static struct bpe_priv *
priv_new(struct tokenizer *t, char *err)
{
	struct bpe_priv *p = calloc(1, sizeof *p);
	if (!p) {
		ad_err(err, "bpe: out of memory");
		return NULL;
	}
	if (t->bpe_free_priv)
		t->bpe_free_priv(t->bpe_priv);
	t->bpe_priv = p;
	t->bpe_free_priv = priv_free;
	return p;
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves,
// the other 68 take U+0100.. in byte order
static void
byte_map_init(struct tokenizer *t)
{
	int n = 0;
	for (int i = 0; i < 324; i++)
		t->byte_of_cp[i] = -1;
	for (int b = 0; b < 256; b++) {
		int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
		t->cp_of_byte[b] = (uint16_t)(keep ? b : 256 + n++);
		t->byte_of_cp[t->cp_of_byte[b]] = (int16_t)b;
	}
}

// --- a temporary piece -> id map for loading (tok_find exists only later) ----
struct idmap {
	const struct tokenizer *t;
	int32_t *slot; // -1 empty
	uint32_t mask;
};

static uint32_t
fnv1a(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

static int
idmap_build(struct idmap *m, const struct tokenizer *t, char *err)
{
	uint32_t cap = 1024;
	while (cap < 2u * (uint32_t)t->n_vocab)
		cap *= 2;
	m->t = t;
	m->mask = cap - 1;
	m->slot = malloc(cap * sizeof *m->slot);
	if (!m->slot)
		return ad_err(err, "bpe: out of memory");
	memset(m->slot, 0xff, cap * sizeof *m->slot);
	for (int32_t id = 0; id < t->n_vocab; id++) {
		size_t n;
		const char *s = tok_entry_piece(t, id, &n);
		if (!n)
			continue;
		uint32_t j = fnv1a(s, n) & m->mask;
		for (;; j = (j + 1) & m->mask) {
			int32_t o = m->slot[j];
			if (o < 0) {
				m->slot[j] = id;
				break;
			}
			size_t on;
			const char *os = tok_entry_piece(t, o, &on);
			if (on == n && !memcmp(os, s, n))
				break; // the first id keeps the piece
		}
	}
	return 0;
}

static int32_t
idmap_get(const struct idmap *m, const char *s, size_t n)
{
	for (uint32_t j = fnv1a(s, n) & m->mask;; j = (j + 1) & m->mask) {
		int32_t o = m->slot[j];
		if (o < 0)
			return -1;
		size_t on;
		const char *os = tok_entry_piece(m->t, o, &on);
		if (on == n && !memcmp(os, s, n))
			return o;
	}
}

// add_merge records "a b" (rank = its position); pairs whose sides or whose
// concatenation are not in the vocabulary can never apply and are dropped
static int
add_merge(struct tokenizer *t, const struct idmap *m, const char *a, size_t na, const char *b, size_t nb, int32_t rank,
          char *buf, char *err)
{
	int32_t l = idmap_get(m, a, na), r = idmap_get(m, b, nb);
	if (l < 0 || r < 0)
		return 0;
	memcpy(buf, a, na);
	memcpy(buf + na, b, nb);
	int32_t id = idmap_get(m, buf, na + nb);
	if (id < 0 || tok_pairmap_get(&t->merges, l, r))
		return 0; // a repeated pair keeps its first rank
	return tok_pairmap_put(&t->merges, l, r, (struct tok_merge){rank, id}, err);
}

// finish_load: byte tokens, the enum pre, the name
static int
finish_load(struct tokenizer *t, struct bpe_priv *p, const struct idmap *m, char *err)
{
	int missing = 0;
	for (int b = 0; b < 256; b++) {
		char s[8];
		int n = p->escape ? snprintf(s, sizeof s, "<0x%02X>", b) : unicode_encode(t->cp_of_byte[b], s);
		p->byte_id[b] = idmap_get(m, s, (size_t)n);
		missing += p->byte_id[b] < 0;
	}
	if (missing == 256 && !p->escape) // escape: bytes without a token are dropped
		return ad_err(err, "bpe: the vocabulary has none of the byte-level characters (not a byte-level BPE?)");
	const struct pretok *q = &p->pre;
	if (q->n == 1 && q->rule[0] == PRETOK_GPT2)
		t->pre = TOK_PRE_GPT2;
	else if (q->n == 1 && q->rule[0] == PRETOK_LLAMA3)
		t->pre = TOK_PRE_LLAMA3;
	else if (q->n == 1 && q->rule[0] == PRETOK_QWEN2)
		t->pre = TOK_PRE_QWEN2;
	else if (q->n == 2 && q->rule[0] == PRETOK_DIGIT && q->rule[1] == PRETOK_GPT2)
		t->pre = TOK_PRE_SMOLLM;
	else if (q->n == 4 && q->rule[0] == PRETOK_PUNCT)
		t->pre = TOK_PRE_DEFAULT;
	else
		t->pre = TOK_PRE_OTHER;
	return 0;
}

// --- GGUF ---------------------------------------------------------------------
int
bpe_load_gguf(struct tokenizer *t, const struct gguf *g, char *err)
{
	struct bpe_priv *p = priv_new(t, err);
	if (!p)
		return -1;
	byte_map_init(t);

	char pre[64] = "default";
	struct gguf_str s;
	if (gguf_get_str(g, "tokenizer.ggml.pre", &s) == 0) {
		if (s.len >= sizeof pre)
			return ad_err(err, "bpe: tokenizer.ggml.pre of %llu bytes", (unsigned long long)s.len);
		memcpy(pre, s.ptr, s.len);
		pre[s.len] = 0;
	}
	// llama.cpp: the gemma4 model is BPE with the gemma4 pre, whatever the file names
	if (gguf_get_str(g, "tokenizer.ggml.model", &s) == 0 && gguf_str_eq(s, "gemma4"))
		snprintf(pre, sizeof pre, "gemma4");
	if (pretok_init_pre(&p->pre, pre, err))
		return -1;
	snprintf(t->pre_name, sizeof t->pre_name, "%s", pre);
	t->ignore_merges = p->pre.ignore_merges;
	// llama.cpp's per-name flags: clean_spaces (on unless the name turns it
	// off), add_bos where the name sets it and the file does not say (or
	// whatever the file says, with force_bos), SentencePiece-style BPE
	struct pretok_flags f = {.clean_spaces = 1};
	pretok_name_flags(pre, &f);
	t->clean_spaces = f.clean_spaces;
	if ((f.add_bos && gguf_find_key(g, "tokenizer.ggml.add_bos_token") < 0) || f.force_bos)
		t->add_bos = 1;
	p->escape = t->escape_spaces = f.escape;
	p->newline_words = f.newline_words;

	struct idmap m;
	if (idmap_build(&m, t, err))
		return -1;
	struct gguf_arr a;
	char *buf = malloc(2 * (size_t)t->max_piece_len + 2 * 65536);
	int rc = -1;
	if (!buf) {
		ad_err(err, "bpe: out of memory");
		goto out;
	}
	if (gguf_get_arr(g, "tokenizer.ggml.merges", &a) == 0) {
		if (a.n > INT32_MAX) {
			ad_err(err, "bpe: %llu merges", (unsigned long long)a.n);
			goto out;
		}
		for (uint64_t i = 0; i < a.n; i++) {
			if (gguf_arr_str(&a, i, &s)) {
				ad_err(err, "bpe: merge %llu is not a string", (unsigned long long)i);
				goto out;
			}
			// "left right"; the space is searched from the second byte on
			const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
			if (!sp || s.len > 65536) {
				ad_err(err, "bpe: merge %llu (\"%.*s\") is not \"left right\"", (unsigned long long)i,
				       (int)(s.len < 64 ? s.len : 64), s.ptr);
				goto out;
			}
			size_t na = (size_t)(sp - s.ptr);
			if (add_merge(t, &m, s.ptr, na, sp + 1, s.len - na - 1, (int32_t)i, buf, err))
				goto out;
		}
	}
	rc = finish_load(t, p, &m, err);
out:
	free(buf);
	free(m.slot);
	return rc;
}

// --- tokenizer.json -----------------------------------------------------------
static const char *
jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int
jtrue(const cJSON *o, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}

static int
load_normalizer(struct bpe_priv *p, const cJSON *n, char *err)
{
	if (!n || cJSON_IsNull(n))
		return 0;
	const char *type = jstr(n, "type");
	if (!type)
		return ad_err(err, "normalizer without a type");
	if (!strcmp(type, "NFC")) {
		p->nfc = 1;
		return 0;
	}
	if (!strcmp(type, "Sequence")) {
		const cJSON *it;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(n, "normalizers"))
		{
			if (load_normalizer(p, it, err))
				return -1;
		}
		return 0;
	}
	return ad_err(err, "unsupported normalizer \"%s\" (supported: NFC)", type);
}

static int
load_pre(struct bpe_priv *p, const cJSON *n, char *err)
{
	if (!n || cJSON_IsNull(n))
		return 0;
	const char *type = jstr(n, "type");
	if (!type)
		return ad_err(err, "pre_tokenizer without a type");
	if (!strcmp(type, "Sequence")) {
		const cJSON *it;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(n, "pretokenizers"))
		{
			if (load_pre(p, it, err))
				return -1;
		}
		return 0;
	}
	if (!strcmp(type, "ByteLevel")) {
		// the byte mapping itself always happens; use_regex adds GPT-2's split
		const cJSON *ur = cJSON_GetObjectItemCaseSensitive(n, "use_regex");
		if (jtrue(n, "add_prefix_space")) {
			// after a Split it would prefix every piece; only the
			// whole-fragment form is implemented
			if (p->pre.n)
				return ad_err(
					err, "ByteLevel add_prefix_space after another pre_tokenizer is not supported");
			p->add_prefix_space = 1;
		}
		if (!ur || cJSON_IsTrue(ur))
			return pretok_add(&p->pre, PRETOK_GPT2, err);
		return 0;
	}
	if (!strcmp(type, "Digits"))
		return pretok_add(&p->pre, jtrue(n, "individual_digits") ? PRETOK_DIGIT : PRETOK_NUMBERS, err);
	if (!strcmp(type, "Split")) {
		const cJSON *pat = cJSON_GetObjectItemCaseSensitive(n, "pattern");
		const char *re = jstr(pat, "Regex");
		const char *behavior = jstr(n, "behavior");
		if (!re)
			return ad_err(err, "Split pre_tokenizer without a Regex pattern");
		if (jtrue(n, "invert") || !behavior || strcmp(behavior, "Isolated"))
			return ad_err(err, "unsupported Split pre_tokenizer (behavior %s%s)", behavior ? behavior : "?",
			              jtrue(n, "invert") ? ", inverted" : "");
		return pretok_add_regex(&p->pre, re, err);
	}
	return ad_err(err, "unsupported pre_tokenizer \"%s\"", type);
}

// merges: ["a b", ...] or [["a", "b"], ...]
static int
load_merges(struct tokenizer *t, const struct idmap *m, const cJSON *merges, char *err)
{
	size_t cap = 2 * (size_t)t->max_piece_len + 64;
	char *buf = malloc(cap);
	int32_t rank = 0;
	const cJSON *it;
	if (!buf)
		return ad_err(err, "bpe: out of memory");
	cJSON_ArrayForEach(it, merges)
	{
		const char *a, *b;
		size_t na, nb;
		if (cJSON_IsString(it)) {
			const char *s = it->valuestring, *sp = s[0] ? strchr(s + 1, ' ') : NULL;
			if (!sp) {
				free(buf);
				return ad_err(err, "merge %d (\"%.64s\") is not \"left right\"", rank, s);
			}
			a = s, na = (size_t)(sp - s), b = sp + 1, nb = strlen(b);
		} else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
		           cJSON_IsString(cJSON_GetArrayItem(it, 0)) && cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
			a = cJSON_GetArrayItem(it, 0)->valuestring, na = strlen(a);
			b = cJSON_GetArrayItem(it, 1)->valuestring, nb = strlen(b);
		} else {
			free(buf);
			return ad_err(err, "merge %d is neither \"a b\" nor [\"a\", \"b\"]", rank);
		}
		if (na + nb > cap) {
			rank++;
			continue; // longer than any piece: cannot be in the vocabulary
		}
		if (add_merge(t, m, a, na, b, nb, rank, buf, err)) {
			free(buf);
			return -1;
		}
		rank++;
	}
	free(buf);
	return 0;
}

// a post_processor TemplateProcessing whose single template starts with a
// special token: that token is BOS and is added
static void
load_post(struct tokenizer *t, const cJSON *pp, const struct idmap *m)
{
	const char *type = jstr(pp, "type");
	if (!type)
		return;
	if (!strcmp(type, "Sequence")) {
		const cJSON *it;
		cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(pp, "processors"))
		{
			load_post(t, it, m);
		}
		return;
	}
	if (strcmp(type, "TemplateProcessing"))
		return;
	const cJSON *first = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(pp, "single"), 0);
	const char *id = jstr(cJSON_GetObjectItemCaseSensitive(first, "SpecialToken"), "id");
	if (!id)
		return;
	int32_t bos = idmap_get(m, id, strlen(id));
	if (bos >= 0) {
		t->bos = bos;
		t->add_bos = 1;
	}
}

int
bpe_load_hf_json(struct tokenizer *t, const char *json, size_t len, char *err)
{
	struct idmap m = {0};
	int rc = -1;
	cJSON *root = cJSON_ParseWithLength(json, len);
	if (!root || !cJSON_IsObject(root)) {
		ad_err(err, "not a JSON object");
		goto out;
	}
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
	const char *type = jstr(model, "type");
	if (!type || strcmp(type, "BPE")) {
		ad_err(err, "model type %s is not supported here (byte-level BPE only)", type ? type : "(none)");
		goto out;
	}
	const char *cp = jstr(model, "continuing_subword_prefix"), *ew = jstr(model, "end_of_word_suffix");
	if ((cp && *cp) || (ew && *ew)) {
		ad_err(err, "BPE with continuing_subword_prefix / end_of_word_suffix is not supported");
		goto out;
	}
	const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
	const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
	if (!cJSON_IsObject(vocab)) {
		ad_err(err, "model.vocab is not an object");
		goto out;
	}
	if (tok_json_vocab_init(t, vocab, added, err))
		goto out;
	const cJSON *it;
	cJSON_ArrayForEach(it, vocab)
	{
		if (tok_vocab_set(t, (int32_t)it->valuedouble, it->string, strlen(it->string), 0, TOK_TYPE_NORMAL, err))
			goto out;
	}
	if (tok_json_added(t, added, NULL, 0, err))
		goto out;
	int32_t n = t->n_vocab;
	for (int32_t id = 0; id < n; id++)
		if (t->tok[id].len > t->max_piece_len)
			t->max_piece_len = t->tok[id].len;

	struct bpe_priv *p = priv_new(t, err);
	if (!p)
		goto out;
	byte_map_init(t);
	if (load_normalizer(p, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err) ||
	    load_pre(p, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err))
		goto out;
	t->ignore_merges = jtrue(model, "ignore_merges");
	if (idmap_build(&m, t, err))
		goto out;
	const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
	if (merges && !cJSON_IsArray(merges)) {
		ad_err(err, "model.merges is not an array");
		goto out;
	}
	if (load_merges(t, &m, merges, err))
		goto out;
	load_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), &m);
	if (finish_load(t, p, &m, err))
		goto out;
	// a name for logs: the GGUF pre value these rules correspond to
	const char *name = "custom";
	switch (t->pre) {
	case TOK_PRE_GPT2:
		name = "gpt-2";
		break;
	case TOK_PRE_LLAMA3:
		name = "llama-bpe";
		break;
	case TOK_PRE_QWEN2:
		name = "qwen2";
		break;
	case TOK_PRE_SMOLLM:
		name = "smollm";
		break;
	case TOK_PRE_DEFAULT:
		name = "default";
		break;
	default:
		break;
	}
	snprintf(t->pre_name, sizeof t->pre_name, "%s", name);
	rc = 0;
out:
	free(m.slot);
	cJSON_Delete(root);
	return rc;
}

// --- encoding -----------------------------------------------------------------
struct sym {
	int32_t id;
	int32_t prev, next; // -1 at the ends
};

// a queued pair: its rank and the position of its left symbol. Ranks are
// unique per pair, so a popped entry is still valid exactly when the pair
// now at that position has the same rank.
struct cand {
	int32_t rank, left;
};

struct scratch {
	struct sym *sym;
	struct cand *heap; // 4-ary min-heap: shallower, children share a cache line
	size_t n_heap, sym_cap, heap_cap;
	char *mapped; // byte-mapped piece for the ignore_merges lookup (escape: the escaped text)
	size_t mapped_cap;
	int32_t *ids; // a long piece's first symbols
	size_t ids_cap;
};

static inline int
cand_less(struct cand a, struct cand b)
{
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left);
}

static void
heap_push(struct scratch *s, struct cand c)
{
	size_t i = s->n_heap++;
	while (i) {
		size_t up = (i - 1) / 4;
		if (!cand_less(c, s->heap[up]))
			break;
		s->heap[i] = s->heap[up];
		i = up;
	}
	s->heap[i] = c;
}

static struct cand
heap_pop(struct scratch *s)
{
	struct cand top = s->heap[0], last = s->heap[--s->n_heap];
	size_t i = 0, n = s->n_heap;
	for (;;) {
		size_t c = 4 * i + 1, end = c + 4 < n ? c + 4 : n;
		if (c >= n)
			break;
		for (size_t k = c + 1; k < end; k++)
			if (cand_less(s->heap[k], s->heap[c]))
				c = k;
		if (!cand_less(s->heap[c], last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (n)
		s->heap[i] = last;
	return top;
}

static void
try_pair(const struct tokenizer *t, struct scratch *s, int32_t left)
{
	int32_t right = s->sym[left].next;
	if (right < 0)
		return;
	const struct tok_merge *mg = tok_pairmap_get(&t->merges, s->sym[left].id, s->sym[right].id);
	if (mg)
		heap_push(s, (struct cand){mg->rank, left});
}

// Short pieces (most of them) skip the heap: an array of symbols and the
// rank of each adjacent pair, scanned for the lowest (leftmost on ties),
// which merges the same pairs in the same order as the heap does.
#define BPE_SMALL 32

static int
merge_small(const struct tokenizer *t, int32_t *id, size_t n, struct tok_ids *out, char *err)
{
	int32_t rank[BPE_SMALL], merged[BPE_SMALL];
	size_t m = n;
	for (size_t i = 0; i + 1 < m; i++) {
		const struct tok_merge *mg = tok_pairmap_get(&t->merges, id[i], id[i + 1]);
		rank[i] = mg ? mg->rank : INT32_MAX;
		merged[i] = mg ? mg->id : -1;
	}
	while (m > 1) {
		size_t best = 0;
		for (size_t i = 1; i + 1 < m; i++)
			if (rank[i] < rank[best])
				best = i;
		if (rank[best] == INT32_MAX)
			break;
		id[best] = merged[best];
		m--;
		for (size_t i = best + 1; i < m; i++)
			id[i] = id[i + 1];
		for (size_t i = best + 1; i + 1 < m; i++)
			rank[i] = rank[i + 1], merged[i] = merged[i + 1];
		// the pairs on either side of the new symbol
		for (size_t i = best ? best - 1 : 0; i <= best && i + 1 < m; i++) {
			const struct tok_merge *mg = tok_pairmap_get(&t->merges, id[i], id[i + 1]);
			rank[i] = mg ? mg->rank : INT32_MAX;
			merged[i] = mg ? mg->id : -1;
		}
	}
	for (size_t i = 0; i < m; i++)
		if (id[i] >= 0 && tok_ids_push(out, id[i], err))
			return -1;
	return 0;
}

// the merges over n first symbols (ids, -1 for one no merge can take), and
// what is left of them, in order, to out (a -1 left out); a short piece's
// ids are merged where they are (ids is scratch)
static int
merge_ids(const struct tokenizer *t, struct scratch *s, int32_t *ids, size_t n, struct tok_ids *out, char *err)
{
	if (n <= BPE_SMALL)
		return merge_small(t, ids, n, out, err);
	if (n > INT32_MAX)
		return ad_err(err, "bpe: piece of %zu symbols", n);
	// each merge retires one symbol and queues at most two pairs
	if (ad_grow(&s->sym, &s->sym_cap, n, sizeof *s->sym, 256) ||
	    ad_grow(&s->heap, &s->heap_cap, 3 * n, sizeof *s->heap, 256))
		return ad_err(err, "bpe: out of memory");
	for (size_t i = 0; i < n; i++)
		s->sym[i] = (struct sym){ids[i], (int32_t)i - 1, i + 1 < n ? (int32_t)i + 1 : -1};
	s->n_heap = 0;
	for (size_t i = 0; i + 1 < n; i++)
		try_pair(t, s, (int32_t)i);
	while (s->n_heap) {
		struct cand c = heap_pop(s);
		struct sym *l = &s->sym[c.left];
		if (l->id < 0 || l->next < 0)
			continue; // stale: retired, or nothing to the right any more
		struct sym *r = &s->sym[l->next];
		const struct tok_merge *mg = tok_pairmap_get(&t->merges, l->id, r->id);
		if (!mg || mg->rank != c.rank)
			continue; // stale: a side has changed since
		l->id = mg->id;
		l->next = r->next;
		if (r->next >= 0)
			s->sym[r->next].prev = c.left;
		r->id = -2; // retired
		if (l->prev >= 0)
			try_pair(t, s, l->prev);
		try_pair(t, s, c.left);
	}
	for (int32_t i = 0; i >= 0; i = s->sym[i].next)
		if (s->sym[i].id >= 0 && tok_ids_push(out, s->sym[i].id, err))
			return -1;
	return 0;
}

// room for n first symbols: a short piece's on the stack, a long one's in s
static int32_t *
first_ids(struct scratch *s, int32_t *small, size_t n, char *err)
{
	if (n <= BPE_SMALL)
		return small;
	if (ad_grow(&s->ids, &s->ids_cap, n, sizeof *s->ids, 256)) {
		ad_err(err, "bpe: out of memory");
		return NULL;
	}
	return s->ids;
}

static int
encode_piece(const struct tokenizer *t, const struct bpe_priv *p, struct scratch *s, const unsigned char *b, size_t n,
             struct tok_ids *out, char *err)
{
	if (t->ignore_merges && n <= t->max_piece_len) {
		if (ad_grow(&s->mapped, &s->mapped_cap, 2 * n, 1, 256))
			return ad_err(err, "bpe: out of memory");
		size_t m = 0;
		for (size_t i = 0; i < n; i++)
			m += (size_t)unicode_encode(t->cp_of_byte[b[i]], s->mapped + m);
		int32_t id = tok_find(t, s->mapped, m);
		if (id >= 0)
			return tok_ids_push(out, id, err);
	}
	int32_t small[BPE_SMALL], *ids = first_ids(s, small, n, err);
	if (!ids)
		return -1;
	for (size_t i = 0; i < n; i++)
		ids[i] = p->byte_id[b[i]];
	return merge_ids(t, s, ids, n, out, err);
}

// SentencePiece-style: a piece of characters, those without a token of
// their own as the <0xNN> tokens of their bytes
static int
encode_piece_escaped(const struct tokenizer *t, const struct bpe_priv *p, struct scratch *s, const char *b, size_t n,
                     struct tok_ids *out, char *err)
{
	size_t nl = 0;
	while (nl < n && b[nl] == '\n')
		nl++;
	if (p->newline_words && nl == n && n <= t->max_piece_len) {
		int32_t id = tok_find(t, b, n);
		if (id >= 0)
			return tok_ids_push(out, id, err);
	}
	// the characters, merged a run of those with tokens at a time: a
	// character without one stops every merge
	int32_t small[BPE_SMALL], *ids = first_ids(s, small, n, err);
	if (!ids)
		return -1;
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		size_t c = (size_t)ad_utf8_len((uint8_t)b[i]);
		for (size_t q = 1; q < c; q++)
			if (i + q >= n || ((uint8_t)b[i + q] & 0xc0) != 0x80)
				c = 0;
		if (c == 0)
			c = 1; // not UTF-8: a byte alone (llama.cpp would make it U+FFFD first)
		int32_t id = tok_find(t, b + i, c);
		if (id >= 0) {
			ids[k++] = id;
		} else {
			if (k && merge_ids(t, s, ids, k, out, err))
				return -1;
			k = 0;
			for (size_t j = i; j < i + c; j++)
				if (p->byte_id[(uint8_t)b[j]] >= 0 && tok_ids_push(out, p->byte_id[(uint8_t)b[j]], err))
					return -1;
		}
		i += c;
	}
	return k ? merge_ids(t, s, ids, k, out, err) : 0;
}

// SentencePiece-style: the text with each space as U+2581, in s->mapped
static const char *
spaces_escaped(struct scratch *s, const char *text, size_t *len, char *err)
{
	size_t n = *len, sp = 0, m = 0;
	for (size_t i = 0; i < n; i++)
		sp += text[i] == ' ';
	if (ad_grow(&s->mapped, &s->mapped_cap, n + 2 * sp + 1, 1, 256)) {
		ad_err(err, "bpe: out of memory");
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		if (text[i] == ' ') {
			memcpy(s->mapped + m, "\xe2\x96\x81", 3);
			m += 3;
		} else {
			s->mapped[m++] = text[i];
		}
	}
	s->mapped[m] = 0;
	*len = m;
	return s->mapped;
}

int
bpe_encode_text(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out, char *err)
{
	const struct bpe_priv *p = t->bpe_priv;
	if (!p)
		return ad_err(err, "bpe: tokenizer not loaded as byte-level BPE");
	if (!len)
		return 0;
	char *norm = NULL;
	if (p->nfc || p->add_prefix_space) {
		size_t nn = len;
		norm = p->nfc ? unicode_nfc(text, len, &nn) : NULL;
		if (p->nfc && !norm)
			return ad_err(err, "bpe: out of memory");
		const char *src = norm ? norm : text;
		if (p->add_prefix_space && src[0] != ' ') {
			char *q = malloc(nn + 2);
			if (!q) {
				free(norm);
				return ad_err(err, "bpe: out of memory");
			}
			q[0] = ' ';
			memcpy(q + 1, src, nn);
			q[++nn] = 0;
			free(norm);
			norm = q;
		}
		if (norm)
			text = norm, len = nn;
	}
	struct pretok_out po = {0};
	struct scratch s = {0};
	if (p->escape && !(text = spaces_escaped(&s, text, &len, err))) {
		free(norm);
		return -1;
	}
	int rc = pretok_split(&p->pre, text, len, &po, err);
	for (size_t k = 0; !rc && k < po.n; k++)
		rc = p->escape
		             ? encode_piece_escaped(t, p, &s, text + po.v[k].off, po.v[k].len, out, err)
		             : encode_piece(t, p, &s, (const unsigned char *)text + po.v[k].off, po.v[k].len, out, err);
	pretok_out_free(&po);
	free(s.sym);
	free(s.heap);
	free(s.mapped);
	free(s.ids);
	free(norm);
	return rc;
}
