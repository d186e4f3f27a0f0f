// ugm.c - the Unigram model of a Hugging Face tokenizer.json (T5, ALBERT,
// XLNet and other SentencePiece unigram vocabularies exported by the
// tokenizers library), with its normalizer and pre-tokenizer (hfpipe.h).
//
// A fragment of text (between special tokens) is normalized, cut into
// pieces by the pre-tokenizer, and each piece is segmented by Viterbi over
// the vocabulary's log-probabilities, as the library's Unigram model does
// (its encode_optimized):
//   - positions are character starts (UTF-8); from each, every vocabulary
//     entry that is a prefix of the rest is a candidate, shortest first;
//     the best path to a position is the one with the highest sum of
//     scores (in double precision), and a later candidate replaces it only
//     when strictly better;
//   - where no entry of exactly one character starts, the unknown token
//     covers that character with the score min(scores) - 10;
//   - on the way back, adjacent unknown characters are fused into one
//     piece (fuse_unk); a piece that is not a vocabulary entry becomes its
//     bytes as <0xNN> tokens when byte_fallback is set and every such
//     token exists, else the unknown token.
// Decoding is SentencePiece's: ▁ is a space, <0xNN> its byte, and the
// space the pre-tokenizer (or normalizer) put in front is dropped.
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "hfpipe.h"
#include "tokenizer-impl.h"
#include "unicode.h"

// A byte trie of the model's pieces: node 0 is the root, an edge is an
// entry (node << 8 | byte) + 1 -> child in an open-addressing table, and
// a node that ends a piece holds its id (the last one for a duplicate
// piece, as the library's map keeps it). Walking it from a position gives
// every piece that is a prefix of the rest, shortest first, in one pass.
struct trie {
	uint64_t *key; // 0: empty
	int32_t *child;
	uint32_t mask;
	int32_t *id; // per node: the piece ending there, -1 when none
	int32_t n_nodes;
};

struct ugm {
	int32_t n;     // model.vocab entries (ids 0 .. n-1)
	double *score; // [n]
	double unk_score;
	int32_t unk; // model.unk_id, -1 when none
	int byte_fallback;
	struct trie trie;
	struct hf_norm *norm;
	struct hf_pretok *pre;
};

static uint32_t
edge_hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (uint32_t)k;
}

static int32_t
trie_next(const struct trie *tr, int32_t node, uint8_t b)
{
	uint64_t k = ((uint64_t)node << 8 | b) + 1;
	for (uint32_t j = edge_hash(k) & tr->mask;; j = (j + 1) & tr->mask) {
		if (tr->key[j] == k)
			return tr->child[j];
		if (!tr->key[j])
			return -1;
	}
}

// the trie of pieces 0 .. n-1 (total: their bytes, a bound on the edges)
static int
trie_build(struct trie *tr, const struct tokenizer *t, int32_t n, size_t total, char *err)
{
	uint32_t cap = 64;
	while (cap < 2 * total + 2 && cap < (1u << 31))
		cap *= 2;
	tr->mask = cap - 1;
	tr->key = calloc(cap, sizeof *tr->key);
	tr->child = malloc(cap * sizeof *tr->child);
	tr->id = malloc((total + 1) * sizeof *tr->id);
	if (!tr->key || !tr->child || !tr->id)
		return ad_err(err, "out of memory (a trie of %zu bytes)", total);
	tr->n_nodes = 1;
	tr->id[0] = -1;
	for (int32_t id = 0; id < n; id++) {
		size_t len;
		const char *p = tok_entry_piece(t, id, &len);
		int32_t node = 0;
		for (size_t i = 0; i < len; i++) {
			uint64_t k = ((uint64_t)node << 8 | (uint8_t)p[i]) + 1;
			uint32_t j = edge_hash(k) & tr->mask;
			while (tr->key[j] && tr->key[j] != k)
				j = (j + 1) & tr->mask;
			if (!tr->key[j]) {
				tr->key[j] = k;
				tr->child[j] = tr->n_nodes;
				tr->id[tr->n_nodes++] = -1;
			}
			node = tr->child[j];
		}
		if (len)
			tr->id[node] = id;
	}
	return 0;
}

static void
ugm_free(void *p)
{
	struct ugm *u = p;
	if (!u)
		return;
	free(u->score);
	free(u->trie.key);
	free(u->trie.child);
	free(u->trie.id);
	hf_norm_free(u->norm);
	hf_pretok_free(u->pre);
	free(u);
}

static const char *
jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
	return cJSON_IsString(v) ? v->valuestring : NULL;
}

// <0xNN>: the byte, or -1
static int
byte_piece(const char *s, size_t n)
{
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	int v = 0;
	for (int i = 3; i < 5; i++) {
		char c = s[i];
		int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

// TemplateProcessing's single template: specials before the sequence are
// the BOS, one after it the EOS
static int
ugm_post(struct tokenizer *t, const cJSON *pp, char *err)
{
	if (!pp || cJSON_IsNull(pp))
		return 0;
	const char *type = jstr(pp, "type");
	if (!type || strcmp(type, "TemplateProcessing"))
		return ad_err(err, "Unigram with a %s post_processor is not supported (TemplateProcessing)",
		              type ? type : "typeless");
	const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
	int n = cJSON_GetArraySize(single), seen_seq = 0;
	for (int i = 0; i < n; i++) {
		const cJSON *e = cJSON_GetArrayItem(single, i);
		const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
		if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
			seen_seq = 1;
			continue;
		}
		const char *id = jstr(st, "id");
		int32_t tid = id ? tok_find(t, id, strlen(id)) : -1;
		if (!id || tid < 0 || (seen_seq ? i != n - 1 : i != 0))
			return ad_err(err,
			              "TemplateProcessing: only one special before and one after the sequence are "
			              "supported (%s)",
			              id ? id : "?");
		if (seen_seq) {
			t->eos = tid;
			t->add_eos = 1;
		} else {
			t->bos = tid;
			t->add_bos = 1;
		}
	}
	return 0;
}

int
ugm_load_hf_json(struct tokenizer *t, const char *json, size_t len, char *err)
{
	int rc = -1;
	const cJSON *model, *vocab, *added;
	cJSON *root = tok_json_parse(json, len, &model, &vocab, &added, err);
	if (!root)
		return -1;
	const cJSON *unk_id = cJSON_GetObjectItemCaseSensitive(model, "unk_id");
	struct ugm *u = calloc(1, sizeof *u);
	if (!u) {
		ad_err(err, "out of memory");
		goto done;
	}
	t->bpe_priv = u;
	t->bpe_free_priv = ugm_free;
	u->unk = -1;
	if (!cJSON_IsArray(vocab) || cJSON_GetArraySize(vocab) < 1) {
		ad_err(err, "a Unigram tokenizer.json needs model.vocab, a list of [piece, score]");
		goto done;
	}
	u->n = cJSON_GetArraySize(vocab);
	if (u->n >= (1 << 24)) {
		ad_err(err, "model.vocab of %d entries", u->n);
		goto done;
	}
	int32_t n_vocab = u->n;
	const cJSON *it;
	cJSON_ArrayForEach(it, added)
	{
		const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
		if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) ||
		    id->valuedouble != (int32_t)id->valuedouble || !jstr(it, "content")) {
			ad_err(err, "added_tokens entry without a valid id and content");
			goto done;
		}
		if ((int32_t)id->valuedouble >= n_vocab)
			n_vocab = (int32_t)id->valuedouble + 1;
	}
	if (tok_vocab_init(t, n_vocab, err))
		goto done;
	for (int32_t i = u->n; i < n_vocab; i++)
		t->tok[i].type = TOK_TYPE_UNUSED;
	if (!(u->score = malloc((size_t)u->n * sizeof *u->score))) {
		ad_err(err, "out of memory");
		goto done;
	}
	if (cJSON_IsNumber(unk_id)) {
		if (unk_id->valuedouble < 0 || unk_id->valuedouble >= u->n) {
			ad_err(err, "model.unk_id %g is not an entry of model.vocab", unk_id->valuedouble);
			goto done;
		}
		u->unk = (int32_t)unk_id->valuedouble;
	}
	u->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
	double min_score = INFINITY;
	int32_t i = 0;
	size_t total = 0;
	cJSON_ArrayForEach(it, vocab)
	{
		const cJSON *p = cJSON_GetArrayItem(it, 0), *sc = cJSON_GetArrayItem(it, 1);
		if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2 || !cJSON_IsString(p) || !cJSON_IsNumber(sc)) {
			ad_err(err, "model.vocab[%d] is not [piece, score]", i);
			goto done;
		}
		size_t n = strlen(p->valuestring);
		enum tok_type ty = TOK_TYPE_NORMAL;
		if (i == u->unk)
			ty = TOK_TYPE_UNKNOWN;
		else if (u->byte_fallback && byte_piece(p->valuestring, n) >= 0)
			ty = TOK_TYPE_BYTE;
		u->score[i] = sc->valuedouble;
		total += n;
		if (sc->valuedouble < min_score)
			min_score = sc->valuedouble;
		if (tok_vocab_set(t, i, p->valuestring, n, (float)sc->valuedouble, ty, err))
			goto done;
		i++;
	}
	u->unk_score = min_score - 10.0;
	if (tok_json_added(t, added, u->unk >= 0 ? t->strs + t->tok[u->unk].off : NULL, 0, err))
		goto done;
	t->unk = u->unk;
	if (hf_norm_parse(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &u->norm, err) ||
	    hf_pretok_parse(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &u->pre, err))
		goto done;
	// decoding drops the space put in front of the text
	t->add_space_prefix = hf_pretok_prepends(u->pre) || hf_norm_prepends(u->norm, "\xe2\x96\x81");
	// the post-processor names specials: it needs the map
	if (tok_build_map(t, err) || ugm_post(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), err) ||
	    trie_build(&u->trie, t, u->n, total, err))
		goto done;
	rc = 0;
done:
	cJSON_Delete(root);
	return rc;
}

struct node {
	double score;  // best path score to here
	int32_t start; // where its last token starts, -1 when no path
	int32_t id;
};

// emit one piece of the backtrack: a vocabulary entry, else its bytes, else unk
static int
emit(const struct tokenizer *t, const struct ugm *u, const char *s, size_t n, struct tok_ids *out, char *err)
{
	int32_t id = tok_find(t, s, n);
	if (id >= 0 && id < u->n)
		return tok_ids_push(out, id, err);
	if (u->byte_fallback) {
		size_t k = 0;
		while (k < n && t->byte_tok[(uint8_t)s[k]] >= 0)
			k++;
		if (k == n) {
			for (k = 0; k < n; k++)
				if (tok_ids_push(out, t->byte_tok[(uint8_t)s[k]], err))
					return -1;
			return 0;
		}
	}
	if (u->unk < 0)
		return ad_err(err, "tokenizer: \"%.*s\" has no token and the vocabulary no unknown one",
		              (int)(n < 32 ? n : 32), s);
	return tok_ids_push(out, u->unk, err);
}

// Viterbi over one piece s[0..n)
static int
segment(const struct tokenizer *t, const struct ugm *u, const char *s, size_t n, struct node *best, int32_t *path,
        struct tok_ids *out, char *err)
{
	for (size_t i = 0; i <= n; i++)
		best[i] = (struct node){0, -1, -1};
	best[0].start = 0;
	for (size_t pos = 0; pos < n;) {
		uint32_t cp;
		size_t mblen = (size_t)unicode_decode(s + pos, n - pos, &cp, NULL);
		const double base = best[pos].score;
		int single = 0;
		int32_t node = 0;
		for (size_t l = 1; pos + l <= n; l++) {
			if ((node = trie_next(&u->trie, node, (uint8_t)s[pos + l - 1])) < 0)
				break; // no piece goes on like this
			int32_t id = u->trie.id[node];
			// an entry ends on a character boundary (the text is UTF-8)
			if (id < 0 || (pos + l < n && ((uint8_t)s[pos + l] & 0xC0) == 0x80))
				continue;
			double c = base + u->score[id];
			struct node *tn = &best[pos + l];
			if (tn->start < 0 || c > tn->score)
				*tn = (struct node){c, (int32_t)pos, id};
			if (l == mblen)
				single = 1;
		}
		if (!single) {
			if (u->unk < 0)
				return ad_err(err, "tokenizer: \"%.*s\" has no token and the vocabulary no unknown one",
				              (int)mblen, s + pos);
			double c = base + u->unk_score;
			struct node *tn = &best[pos + mblen];
			if (tn->start < 0 || c > tn->score)
				*tn = (struct node){c, (int32_t)pos, u->unk};
		}
		pos += mblen;
	}
	// back from the end: the starts of the tokens, right to left
	int32_t k = 0;
	for (size_t end = n; end > 0; end = (size_t)best[end].start)
		path[k++] = (int32_t)end;
	// left to right, adjacent unknown spans fused
	size_t from = 0;
	for (int32_t j = k - 1; j >= 0; j--) {
		size_t end = (size_t)path[j];
		int unk = best[end].id == u->unk;
		if (unk && j > 0 && best[path[j - 1]].id == u->unk)
			continue; // the next one is unknown too: one piece
		if (emit(t, u, s + from, end - from, out, err))
			return -1;
		from = end;
	}
	return 0;
}

int
ugm_encode_text(const struct tokenizer *t, const char *text, size_t len, int first, struct tok_ids *out, char *err)
{
	const struct ugm *u = t->bpe_priv;
	char *norm = NULL;
	size_t nn;
	struct hf_pieces pc = {0};
	struct node *best = NULL;
	int32_t *path = NULL;
	int rc = -1;
	if (hf_norm_apply(u->norm, text, len, &norm, &nn, err) || hf_pretok_apply(u->pre, norm, nn, first, &pc, err))
		goto out;
	size_t longest = 0;
	for (size_t i = 0; i < pc.n; i++)
		longest = pc.len[i] > longest ? pc.len[i] : longest;
	if (!(best = malloc((longest + 1) * sizeof *best)) || !(path = malloc((longest + 1) * sizeof *path))) {
		ad_err(err, "tokenizer: out of memory");
		goto out;
	}
	for (size_t i = 0; i < pc.n; i++)
		if (segment(t, u, pc.buf + pc.off[i], pc.len[i], best, path, out, err))
			goto out;
	rc = 0;
out:
	free(norm);
	hf_pieces_free(&pc);
	free(best);
	free(path);
	return rc;
}
