// tokenizer-impl.h - the inside of struct tokenizer, shared by the loaders.
//
// tokenizer.c owns the common part: the vocabulary (pieces, scores, token
// types), the piece -> id map, special tokens, BOS/EOS/EOT, decoding, the
// special-token partition of the input, SentencePiece, chat templates.
// bpe.c implements the byte-level BPE hooks declared at the bottom.
//
// Loading order, for every source:
//   1. tok_vocab_init(t, n) then tok_vocab_set(t, id, ...) for each id
//      (for GGUF, tokenizer.c does this for both kinds before calling
//      bpe_load_gguf; for tokenizer.json, bpe_load_hf_json does it);
//   2. the kind-specific loader fills merges, pre-tokenizer, byte map;
//   3. tok_finish(t) builds the map, the special list, the decoded text of
//      every token, the end-of-generation set and the chat family.
// After tok_finish the struct is read-only: encode/decode must not write it
// (it is shared by threads).
#ifndef AD_TOKENIZER_IMPL_H
#define AD_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"
#include "tokenizer.h"

struct jinja_tmpl;

struct gguf;

enum tok_kind {
	TOK_KIND_SPM = 1, // tokenizer.ggml.model "llama"
	TOK_KIND_BPE = 2, // tokenizer.ggml.model "gpt2", tokenizer.json model.type "BPE"
	TOK_KIND_WPM = 3, // tokenizer.ggml.model "bert" (WordPiece, wpm.c)
	TOK_KIND_UGM = 4, // tokenizer.json model.type "Unigram" (ugm.c)
};

// Token types, numbered as GGUF tokenizer.ggml.token_type stores them.
enum tok_type {
	TOK_TYPE_UNDEFINED = 0,
	TOK_TYPE_NORMAL = 1,
	TOK_TYPE_UNKNOWN = 2,
	TOK_TYPE_CONTROL = 3,
	TOK_TYPE_USER_DEFINED = 4,
	TOK_TYPE_UNUSED = 5,
	TOK_TYPE_BYTE = 6,
};

// Extra attribute bits (tok_entry.attr): strip whitespace on that side of
// the token when it is matched in text (HF added_tokens lstrip/rstrip).
#define TOK_ATTR_LSTRIP 1u
#define TOK_ATTR_RSTRIP 2u

// Pre-tokenizer (tokenizer.ggml.pre); the name is also kept as a string.
enum tok_pre {
	TOK_PRE_DEFAULT = 0, // SPM, or BPE without a known pre-tokenizer (gpt-2 rules)
	TOK_PRE_GPT2,
	TOK_PRE_LLAMA3, // "llama-bpe", "llama3"
	TOK_PRE_QWEN2,  // "qwen2", also used for qwen3
	TOK_PRE_SMOLLM, // "smollm": each digit alone, then gpt-2 rules
	TOK_PRE_OTHER,  // named but not implemented: bpe.c decides (error or fallback)
};

// 12 bytes a token (a 151,936-token vocabulary took 3.6 MB at 24 and 2.4
// at 16); a piece is at most TOK_PIECE_MAX bytes (tok_vocab_set), and what
// it decodes to no longer than it. After tok_finish the text lies in
// t->strs right after its piece (tafter), or is the piece itself
// (tok_text); the scores, which only SentencePiece reads, lie apart
// (tok_score)
#define TOK_PIECE_MAX UINT16_MAX
struct tok_entry {
	uint32_t off;       // the piece, in t->strs
	uint16_t len, tlen; // the lengths of the piece and of its text (control/unknown: tlen 0)
	uint8_t type;       // enum tok_type
	uint8_t attr;       // TOK_ATTR_*
	uint8_t tafter;     // the text follows the piece (1), or is the piece (0)
};

// (no branch: a decode step's text is after its piece or not at random, and
// a mispredicted jump cost a fifth of SentencePiece's decode)
static inline const char *
tok_text(const char *strs, const struct tok_entry *e)
{
	return strs + e->off + (e->len & (0u - e->tafter));
}

// A growable id list; bpe_encode_text appends to one.
struct tok_ids {
	int32_t *v;
	size_t n, cap;
};

// Open-addressing map from an ordered pair of token ids to a merge: the
// rank (lower merges first) and the id of the merged token. The pairs lie
// in the order they were put; the slots, at most half full, hold an
// index into them (4 bytes a slot: with the key and value in each, Llama
// 3's 280k merges took 16 MiB).
struct tok_merge {
	int32_t rank;
	int32_t id;
};

struct tok_pair {
	int32_t left, right;
	struct tok_merge v;
};

struct tok_pairmap {
	uint32_t *slot;     // a pair's index + 1; 0 = empty
	struct tok_pair *e; // [n], room for cap
	uint32_t mask;      // slots - 1 (a power of two), 0 when empty
	uint32_t n, cap;
};

#define TOK_MAP_FREE UINT32_MAX // a free slot of tokenizer.map

struct tokenizer {
	enum tok_kind kind;
	int32_t n_vocab;
	struct tok_entry *tok; // [n_vocab]
	float *score; // [n_vocab] SPM merge priorities (higher first); NULL while all are 0, and for other kinds
	char *strs;   // all pieces and decoded texts
	size_t strs_len, strs_cap;

	// piece -> id: open addressing over FNV-1a, at most 3/4 full. A slot
	// holds id | the hash's bits from map_idbits up (its tag), so a probe
	// reads a piece only when the tags agree; TOK_MAP_FREE (no id is
	// 2^map_idbits - 1) is a free slot
	uint32_t *map;
	uint32_t map_mask;
	int map_idbits;
	uint32_t max_piece_len;

	int32_t *special; // control, user-defined and unknown ids, longest piece first
	int32_t n_special;
	int32_t byte_tok[256]; // SPM: id of <0xNN> for each byte, -1 if absent

	int32_t bos, eos, eot, eom, unk, pad, sep; // -1 when absent
	int32_t *eog;                              // ids that end generation
	int32_t n_eog;
	int add_bos, add_eos;                 // the model's defaults
	int add_space_prefix;                 // SPM: prepend a space (as ▁) to text after BOS / a special token
	int escape_spaces;                    // spaces become ▁: SPM (always), SentencePiece-style BPE (Gemma 4)
	int spm_word_split;                   // SPM: no piece has ▁ after another character (words merge alone)
	int add_sep;                          // WPM: [SEP] after the text (with add_special)
	int wpm_lowercase, wpm_strip_accents; // WPM normalizer
	int wpm_max_chars;                    // WPM: a longer word is the unknown token (0: no limit, as llama.cpp)
	int clean_spaces;                     // tok_detokenize cleans spaces (llama.cpp's clean_spaces)

	// byte-level BPE (filled by bpe.c)
	enum tok_pre pre;
	char pre_name[64];
	int ignore_merges;         // llama3: a pre-token that is a whole vocab entry is emitted as is
	struct tok_pairmap merges; // (left id, right id) -> rank, merged id
	uint16_t cp_of_byte[256];  // GPT-2 byte -> code point map
	int16_t byte_of_cp[324];   // its inverse; -1 where a code point stands for no byte
	void *bpe_priv;            // anything else bpe.c (or ugm.c) keeps; freed by bpe_free_priv
	void (*bpe_free_priv)(void *);

	// chat
	char *chat_template;          // NUL-terminated copy, or NULL
	char *chat_template_tool_use; // the variant for requests with tools, or NULL
	enum tok_chat_family chat;
	int chat_guessed; // no template, or one not recognised: chat is a guess from the vocabulary
	struct jinja_tmpl *jinja, *jinja_tool_use; // the templates compiled; NULL: not run
	char jinja_why[AD_ERRLEN];                 // why the template is not run ("" when it is, or when there is none)
};

// --- helpers (tokenizer.c) for the loaders -----------------------------------
int tok_vocab_init(struct tokenizer *t, int32_t n, char *err);
// tok_vocab_set copies s[0..n); may be called again for the same id (HF
// added_tokens override) — the last call wins.
int tok_vocab_set(struct tokenizer *t, int32_t id, const char *s, size_t n, float score, enum tok_type type, char *err);
int tok_finish(struct tokenizer *t, char *err);
// the piece -> id map (tok_finish builds it too), for a loader that looks
// pieces up before finishing
int tok_build_map(struct tokenizer *t, char *err);
// tokenizer.json helpers (tokenizer.c) for the loaders: the document
// parsed (NULL with err set when it is not JSON; the caller deletes it) with
// the parts every loader reads, model, model.vocab and added_tokens (NULL
// where absent); the vocabulary sized and checked from model.vocab and
// added_tokens (every id unused until set), then the added tokens' types and
// strip attributes
struct cJSON;
struct cJSON *tok_json_parse(const char *json, size_t len, const struct cJSON **model, const struct cJSON **vocab,
                             const struct cJSON **added, char *err);
int tok_json_vocab_init(struct tokenizer *t, const struct cJSON *vocab, const struct cJSON *added, char *err);
int tok_json_added(struct tokenizer *t, const struct cJSON *added, const char *unk, float score, char *err);
// tok_chat_detect (chat.c) picks the chat family; tok_finish calls it.
enum tok_chat_family tok_chat_detect(struct tokenizer *t);
// tok_chat_compile (chat-jinja.c) compiles the chat templates (once the
// texts are final; tok_finish calls it); tok_chat_native renders with the
// family's built-in renderer
void tok_chat_compile(struct tokenizer *t);
int tok_chat_native(const struct tokenizer *t, const struct tok_msg *msgs, size_t n, int add_generation_prompt,
                    char **out, char *err);

// a token's SPM merge priority (0 in a vocabulary without scores)
static inline float
tok_score(const struct tokenizer *t, int32_t id)
{
	return t->score ? t->score[id] : 0.0f;
}
int tok_set_score(struct tokenizer *t, int32_t id, float score, char *err);

static inline const char *
tok_entry_piece(const struct tokenizer *t, int32_t id, size_t *len)
{
	*len = t->tok[id].len;
	return t->strs + t->tok[id].off;
}

// Before tok_finish the map does not exist; tok_find (tokenizer.h) then
// returns -1. bpe.c may call it from bpe_encode_text.
int tok_ids_push(struct tok_ids *ids, int32_t id, char *err);

int tok_pairmap_put(struct tok_pairmap *m, int32_t left, int32_t right, struct tok_merge v, char *err);
// NULL when absent.
const struct tok_merge *tok_pairmap_get(const struct tok_pairmap *m, int32_t left, int32_t right);
void tok_pairmap_free(struct tok_pairmap *m);

// --- byte-level BPE hooks (bpe.c) -------------------------------------------
// Until bpe.c exists, tokenizer.c supplies stubs that fail with a clear error.
//
// bpe_load_gguf: the vocabulary, types, specials and flags are loaded; read
// tokenizer.ggml.merges and tokenizer.ggml.pre, fill merges, pre, pre_name,
// ignore_merges, cp_of_byte/byte_of_cp.
int bpe_load_gguf(struct tokenizer *t, const struct gguf *g, char *err);
// bpe_load_hf_json: parse a tokenizer.json (len bytes, not NUL-terminated):
// vocab via tok_vocab_init/tok_vocab_set, added_tokens (special: true ->
// CONTROL, else USER_DEFINED; lstrip/rstrip -> attr), merges, the
// pre-tokenizer, the byte map. bos/eos/add_bos come from tokenizer_config.json
// afterwards (tokenizer.c). Refuse anything that is not byte-level BPE.
int bpe_load_hf_json(struct tokenizer *t, const char *json, size_t len, char *err);
// bpe_encode_text: one fragment of raw text (no special tokens in it; they
// were split off already): pre-tokenize, byte-map, merge, append ids to out.
int bpe_encode_text(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out, char *err);

// wpm_encode_text (wpm.c): one fragment of raw text through WordPiece.
int wpm_encode_text(const struct tokenizer *t, const char *text, size_t len, struct tok_ids *out, char *err);

// ugm_load_hf_json (ugm.c): a tokenizer.json with a Unigram model: the
// vocabulary and scores, added tokens, normalizer, pre-tokenizer and the
// post-processor's BOS/EOS. ugm_encode_text: one fragment of raw text
// through them; first: it starts the input (Metaspace's "first").
int ugm_load_hf_json(struct tokenizer *t, const char *json, size_t len, char *err);
int ugm_encode_text(const struct tokenizer *t, const char *text, size_t len, int first, struct tok_ids *out, char *err);

#endif
