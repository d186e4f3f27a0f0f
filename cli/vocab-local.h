// vocab-local.h - the grammars' vocabulary from the model's tokenizer: what
// the cpu-worker's grammar matcher (cpu-worker/include/grammar.h) needs of
// each token, read through the tokenizer library. It composes the two
// workers' libraries, so it lives here and the cpu-worker's library does not
// link the tokenizer's; the processes hand it in as cpu_worker_opts.vocab
// (vocab_local, declared in cpu-service.h).
#ifndef AD_VOCAB_LOCAL_H
#define AD_VOCAB_LOCAL_H

#include <stddef.h>
#include <stdint.h>

#include "grammar.h"
#include "tokenizer.h"

// each token's bytes (tok_token_text); n_vocab: the model's size (ids
// beyond the tokenizer's have no bytes; 0: the tokenizer's)
struct gram_vocab *gram_vocab_from_tokenizer(const struct tokenizer *t, int n_vocab, char *err);

// A model's vocabulary built on first use: the tokenizer loaded from the
// model (tok_load: a .gguf file or a Hugging Face directory), the trie sized
// to the model's n_vocab. get and find fit sched_vocab (scheduler.h); both
// are safe from any thread. A failed load is reported on every get.
struct gram_loader;
struct gram_loader *gram_loader_new(const char *model_path, int n_vocab);
void gram_loader_free(struct gram_loader *l); // NULL is fine
const struct gram_vocab *gram_loader_get(void *l, char *err);
// the id of the one token whose text (piece) is s[0..n), or -1 (a grammar's <text>)
int32_t gram_loader_find(void *l, const char *s, size_t n);

#endif
