// prefix-cache.c - blocks of KV rows keyed by the prefix they complete.
//
// A hash table (chained) over (parent, tokens) and one LRU list of every
// block, most recent first. Eviction walks the list from its old end and
// takes the first block that is neither pinned nor a parent; touching a
// chain on a hit moves its blocks to the front leaf first, so parents stay
// ahead of their children and the walk is short.
#include "prefix-cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct pcache_block {
	uint64_t hash; // of the whole prefix up to and including this block
	struct pcache_block *parent;
	struct pcache_block *hnext;       // hash chain
	struct pcache_block *prev, *next; // LRU list
	int refs, children;
	struct pcache_block *kids, *sib; // children, for a lookup that ends mid-block
	int32_t *toks;                   // [block]
	uint8_t *rows;                   // [block * row_bytes]: the full part
	uint8_t *wrows;                  // [block * win_bytes]: the windowed part, NULL when dropped (or none)
	int anchor;                      // the windowed part is kept (pcache_window)
	uint8_t *state;                  // [state_bytes]: the recurrent state after the block, or NULL
};

struct pcache {
	pthread_mutex_t mu;
	int block;
	size_t row_bytes, block_bytes, state_bytes, limit;
	size_t win_bytes, wblock_bytes; // the windowed part (0: none)
	struct pcache_block **tab;
	size_t n_tab;
	struct pcache_block *head, *tail; // LRU: head most recent
	struct pcache_block *roots;       // the first blocks (their sib list)
	struct pcache_stats st;
};

static uint64_t
mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15u + (h << 6) + (h >> 2);
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdu;
	h ^= h >> 33;
	return h;
}

static uint64_t
block_hash(const struct pcache_block *parent, const int32_t *toks, int n)
{
	uint64_t h = parent ? parent->hash : 0x243f6a8885a308d3u;
	for (int i = 0; i < n; i++)
		h = mix(h, (uint32_t)toks[i]);
	return h;
}

struct pcache *
pcache_new(int block, size_t row_bytes, size_t win_bytes, size_t state_bytes, size_t mem, char *err)
{
	if (block < 1 || block > 4096)
		return ad_err(err, "prefix cache: a block of %d positions (1 to 4096)", block), NULL;
	if (row_bytes + win_bytes == 0 && state_bytes == 0)
		return ad_err(err, "prefix cache: rows of 0 bytes and no state"), NULL;
	struct pcache *c = calloc(1, sizeof *c);
	if (!c)
		return ad_err(err, "prefix cache: out of memory"), NULL;
	c->block = block;
	c->row_bytes = row_bytes;
	c->block_bytes = (size_t)block * row_bytes;
	c->win_bytes = win_bytes;
	c->wblock_bytes = (size_t)block * win_bytes;
	c->state_bytes = state_bytes;
	c->limit = mem;
	size_t most = mem / (c->block_bytes + c->wblock_bytes ? c->block_bytes + c->wblock_bytes : c->state_bytes) + 1;
	c->n_tab = 64;
	while (c->n_tab < most && c->n_tab < ((size_t)1 << 20)) // 8 MiB of buckets at most
		c->n_tab *= 2;
	if (pthread_mutex_init(&c->mu, NULL) || !(c->tab = calloc(c->n_tab, sizeof *c->tab))) {
		free(c);
		return ad_err(err, "prefix cache: out of memory"), NULL;
	}
	c->st.limit = mem;
	c->st.block = block;
	return c;
}

static void
lru_unlink(struct pcache *c, struct pcache_block *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		c->head = b->next;
	if (b->next)
		b->next->prev = b->prev;
	else
		c->tail = b->prev;
	b->prev = b->next = NULL;
}

static void
lru_front(struct pcache *c, struct pcache_block *b)
{
	if (c->head == b)
		return;
	if (b->prev || b->next || c->tail == b)
		lru_unlink(c, b);
	b->next = c->head;
	if (c->head)
		c->head->prev = b;
	c->head = b;
	if (!c->tail)
		c->tail = b;
}

static void
block_free(struct pcache_block *b)
{
	if (!b)
		return;
	free(b->toks);
	free(b->rows);
	free(b->wrows);
	free(b->state);
	free(b);
}

static void
drop(struct pcache *c, struct pcache_block *b)
{
	for (struct pcache_block **p = &c->tab[b->hash & (c->n_tab - 1)]; *p; p = &(*p)->hnext)
		if (*p == b) {
			*p = b->hnext;
			break;
		}
	lru_unlink(c, b);
	if (b->parent)
		b->parent->children--;
	for (struct pcache_block **p = b->parent ? &b->parent->kids : &c->roots; *p; p = &(*p)->sib)
		if (*p == b) {
			*p = b->sib;
			break;
		}
	c->st.bytes -= c->block_bytes + (b->wrows ? c->wblock_bytes : 0) + (b->state ? c->state_bytes : 0);
	if (b->wrows)
		c->st.wblocks--;
	c->st.blocks--;
	if (b->state)
		c->st.states--;
	block_free(b);
}

void
pcache_free(struct pcache *c)
{
	if (!c)
		return;
	while (c->head) {
		struct pcache_block *b = c->head;
		c->head = b->next;
		block_free(b);
	}
	free(c->tab);
	pthread_mutex_destroy(&c->mu);
	free(c);
}

int
pcache_block_size(const struct pcache *c)
{
	return c->block;
}

static struct pcache_block *
find(struct pcache *c, struct pcache_block *parent, const int32_t *toks)
{
	uint64_t h = block_hash(parent, toks, c->block);
	for (struct pcache_block *b = c->tab[h & (c->n_tab - 1)]; b; b = b->hnext)
		if (b->hash == h && b->parent == parent && memcmp(b->toks, toks, (size_t)c->block * sizeof *toks) == 0)
			return b;
	return NULL;
}

static void
pin(struct pcache *c, struct pcache_block *b)
{
	if (b->refs++ == 0)
		c->st.pinned++;
}

int
pcache_match(struct pcache *c, const int32_t *toks, int n, struct pcache_block **out, int max, int *tokens)
{
	pthread_mutex_lock(&c->mu);
	c->st.lookups++;
	int k = 0;
	struct pcache_block *parent = NULL;
	while (k < max && (k + 1) * c->block <= n) {
		struct pcache_block *b = find(c, parent, toks + (size_t)k * c->block);
		if (!b)
			break;
		pin(c, b);
		out[k++] = parent = b;
	}
	*tokens = k * c->block;
	// the rest matches no whole block: the child that shares the longest
	// start with it gives its first rows (each depends only on the tokens
	// up to its own position)
	if (k < max && *tokens < n) {
		const int32_t *t = toks + (size_t)k * c->block;
		int room = n - *tokens < c->block ? n - *tokens : c->block, best = 0;
		struct pcache_block *bb = NULL;
		for (struct pcache_block *b = parent ? parent->kids : c->roots; b; b = b->sib) {
			int l = 0;
			while (l < room && b->toks[l] == t[l])
				l++;
			if (l > best) {
				best = l;
				bb = b;
			}
		}
		if (bb) {
			pin(c, bb);
			out[k++] = bb;
			*tokens += best;
		}
	}
	// leaf first: a parent ends up ahead of its children
	for (int i = k - 1; i >= 0; i--)
		lru_front(c, out[i]);
	c->st.hit_tokens += (uint64_t)*tokens;
	pthread_mutex_unlock(&c->mu);
	return k;
}

// evict the least recently used block that is neither pinned nor a parent
static int
evict_one(struct pcache *c)
{
	for (struct pcache_block *b = c->tail; b; b = b->prev)
		if (b->refs == 0 && b->children == 0) {
			drop(c, b);
			c->st.evictions++;
			return 0;
		}
	return -1;
}

// drop the least recently used block's recurrent state but keep's (the
// block stays: a hit on it stops at an earlier block with a state); the
// oldest states go first, so a chain keeps the ones near its end
static int
drop_state(struct pcache *c, const struct pcache_block *keep)
{
	for (struct pcache_block *b = c->tail; b; b = b->prev)
		if (b->state && b != keep) {
			free(b->state);
			b->state = NULL;
			c->st.bytes -= c->state_bytes;
			c->st.states--;
			c->st.evictions++;
			return 0;
		}
	return -1;
}

// room for bytes more within the bound: blocks evicted, or states
// dropped; -1 when there is none
static int
make_room(struct pcache *c, size_t bytes)
{
	while (c->st.bytes + bytes > c->limit)
		if (evict_one(c) && drop_state(c, NULL))
			return -1;
	return 0;
}

struct pcache_block *
pcache_add(struct pcache *c, struct pcache_block *parent, const int32_t *toks, void **fill, void **wfill)
{
	*fill = NULL;
	if (wfill)
		*wfill = NULL;
	pthread_mutex_lock(&c->mu);
	struct pcache_block *b = find(c, parent, toks);
	if (b) {
		pin(c, b);
		lru_front(c, b);
		// a windowed part dropped earlier: the caller's rows restore it
		if (wfill && c->wblock_bytes && !b->wrows && make_room(c, c->wblock_bytes) == 0 &&
		    (b->wrows = malloc(c->wblock_bytes))) {
			c->st.bytes += c->wblock_bytes;
			c->st.wblocks++;
			*wfill = b->wrows;
		}
		pthread_mutex_unlock(&c->mu);
		return b;
	}
	if (make_room(c, c->block_bytes + (wfill ? c->wblock_bytes : 0)))
		goto full;
	if (!(b = calloc(1, sizeof *b)) || !(b->toks = malloc((size_t)c->block * sizeof *b->toks)) ||
	    !(b->rows = malloc(c->block_bytes ? c->block_bytes : 1)) ||
	    (wfill && c->wblock_bytes && !(b->wrows = malloc(c->wblock_bytes)))) {
		block_free(b);
		goto full;
	}
	memcpy(b->toks, toks, (size_t)c->block * sizeof *toks);
	b->hash = block_hash(parent, toks, c->block);
	b->parent = parent;
	if (parent)
		parent->children++;
	struct pcache_block **kids = parent ? &parent->kids : &c->roots;
	b->sib = *kids;
	*kids = b;
	size_t slot = b->hash & (c->n_tab - 1);
	b->hnext = c->tab[slot];
	c->tab[slot] = b;
	lru_front(c, b);
	pin(c, b);
	c->st.bytes += c->block_bytes + (b->wrows ? c->wblock_bytes : 0);
	c->st.wblocks += b->wrows != NULL;
	c->st.blocks++;
	c->st.stored++;
	*fill = b->rows;
	if (wfill)
		*wfill = b->wrows;
	pthread_mutex_unlock(&c->mu);
	return b;
full:
	c->st.full++;
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

const void *
pcache_wrows(struct pcache *c, const struct pcache_block *b)
{
	pthread_mutex_lock(&c->mu);
	const void *w = b->wrows;
	pthread_mutex_unlock(&c->mu);
	return w;
}

int
pcache_children(struct pcache *c, const struct pcache_block *b)
{
	pthread_mutex_lock(&c->mu);
	int n = b->children;
	pthread_mutex_unlock(&c->mu);
	return n;
}

void
pcache_window(struct pcache *c, struct pcache_block *b, int keep)
{
	pthread_mutex_lock(&c->mu);
	if (keep) {
		b->anchor = 1;
	} else if (b->wrows && !b->anchor) {
		free(b->wrows);
		b->wrows = NULL;
		c->st.bytes -= c->wblock_bytes;
		c->st.wblocks--;
		c->st.wdropped++;
	}
	pthread_mutex_unlock(&c->mu);
}

const void *
pcache_rows(const struct pcache_block *b)
{
	return b->rows;
}

int
pcache_set_state(struct pcache *c, struct pcache_block *b, const void *state)
{
	if (!c->state_bytes)
		return -1;
	pthread_mutex_lock(&c->mu);
	if (b->state) {
		pthread_mutex_unlock(&c->mu);
		return 0;
	}
	while (c->st.bytes + c->state_bytes > c->limit)
		if (drop_state(c, b) && evict_one(c))
			goto full;
	if (!(b->state = malloc(c->state_bytes)))
		goto full;
	memcpy(b->state, state, c->state_bytes);
	c->st.bytes += c->state_bytes;
	c->st.states++;
	pthread_mutex_unlock(&c->mu);
	return 0;
full:
	c->st.full++;
	pthread_mutex_unlock(&c->mu);
	return -1;
}

const void *
pcache_state(const struct pcache_block *b)
{
	return b->state;
}

void
pcache_release(struct pcache *c, struct pcache_block *const *b, int n)
{
	pthread_mutex_lock(&c->mu);
	for (int i = 0; i < n; i++)
		if (b[i] && --b[i]->refs == 0)
			c->st.pinned--;
	pthread_mutex_unlock(&c->mu);
}

size_t
pcache_default_mem(size_t row_bytes, size_t state_bytes, int max_seq, int parallel)
{
	return (row_bytes * (size_t)(max_seq > 0 ? max_seq : 0) + 4 * state_bytes) *
	       (size_t)(parallel > 4 ? parallel : 4);
}

int
pcache_parse_mem(const char *v, size_t *out)
{
	char *end;
	errno = 0;
	double x = strtod(v, &end);
	if (end == v || errno || !(x >= 0) || x > 1e15)
		return -1;
	double mul = 1024.0 * 1024.0;
	if (*end == 'K' || *end == 'k')
		mul = 1024.0, end++;
	else if (*end == 'M' || *end == 'm')
		end++;
	else if (*end == 'G' || *end == 'g')
		mul = 1024.0 * 1024.0 * 1024.0, end++;
	if (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0)
		end += strlen(end);
	if (*end)
		return -1;
	*out = (size_t)(x * mul);
	return 0;
}

void
pcache_stats(struct pcache *c, struct pcache_stats *st)
{
	pthread_mutex_lock(&c->mu);
	*st = c->st;
	pthread_mutex_unlock(&c->mu);
}
