// vocab-local.c - the grammars' vocabulary read from the model's tokenizer
// (see vocab-local.h), and vocab_local, the cpu-worker's source of it
// (cpu-service.h): a gram_loader per worker, loaded on its first grammar.
#include "vocab-local.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-service.h"

struct gram_vocab *
gram_vocab_from_tokenizer(const struct tokenizer *t, int n_vocab, char *err)
{
	int nt = tok_n_vocab(t), n = n_vocab > 0 ? n_vocab : nt;
	const char **b = malloc((size_t)(n > 0 ? n : 1) * sizeof *b);
	uint32_t *l = malloc((size_t)(n > 0 ? n : 1) * sizeof *l);
	if (!b || !l) {
		free(b);
		free(l);
		ad_err(err, "grammar: out of memory");
		return NULL;
	}
	for (int i = 0; i < n; i++) {
		size_t k = 0;
		b[i] = i < nt ? tok_token_text(t, i, &k) : NULL;
		l[i] = (uint32_t)k;
	}
	struct gram_vocab *v = gram_vocab_new(n, b, l, err);
	free(b);
	free(l);
	return v;
}

struct gram_loader {
	pthread_mutex_t mu;
	char *path;
	int n_vocab, tried;
	struct tokenizer *t;
	struct gram_vocab *v;
	char err[AD_ERRLEN];
};

struct gram_loader *
gram_loader_new(const char *model_path, int n_vocab)
{
	struct gram_loader *l = calloc(1, sizeof *l);
	if (!l || !(l->path = strdup(model_path)) || pthread_mutex_init(&l->mu, NULL)) {
		if (l)
			free(l->path);
		free(l);
		return NULL;
	}
	l->n_vocab = n_vocab;
	return l;
}

void
gram_loader_free(struct gram_loader *l)
{
	if (!l)
		return;
	gram_vocab_free(l->v);
	tok_free(l->t);
	free(l->path);
	pthread_mutex_destroy(&l->mu);
	free(l);
}

const struct gram_vocab *
gram_loader_get(void *arg, char *err)
{
	struct gram_loader *l = arg;
	pthread_mutex_lock(&l->mu);
	if (!l->tried) {
		l->tried = 1;
		if (!(l->t = tok_load(l->path, l->err)) ||
		    !(l->v = gram_vocab_from_tokenizer(l->t, l->n_vocab, l->err))) {
			tok_free(l->t);
			l->t = NULL;
		}
	}
	const struct gram_vocab *v = l->v;
	if (!v)
		ad_err(err, "%s", l->err);
	pthread_mutex_unlock(&l->mu);
	return v;
}

int32_t
gram_loader_find(void *arg, const char *s, size_t n)
{
	struct gram_loader *l = arg;
	char err[AD_ERRLEN];
	if (!gram_loader_get(l, err))
		return -1;
	return tok_find(l->t, s, n);
}

static struct sched_vocab
vocab_open(const char *model_path, int n_vocab)
{
	struct gram_loader *l = gram_loader_new(model_path, n_vocab);
	if (!l)
		return (struct sched_vocab){0};
	return (struct sched_vocab){gram_loader_get, gram_loader_find, l};
}

static void
vocab_close(void *ctx)
{
	gram_loader_free(ctx);
}

const struct cpu_vocab_source vocab_local = {vocab_open, vocab_close};
