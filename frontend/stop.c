// stop.c - stop sequences with holdback, and UTF-8 hygiene for JSON.
//
// Text arrives in pieces. A stop sequence may straddle pieces, so the last
// (longest stop - 1) bytes are held back until later text shows they do not
// begin a stop; the release point is also moved back to a UTF-8 boundary so
// a character is never split between two events. A match found anywhere in
// the held text is always complete: anything before the release point was
// checked against every stop when it was still held.
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "fe.h"
#include "utf8.h"

void
fe_stop_init(struct fe_stop *s, const char *const *stops, size_t n)
{
	memset(s, 0, sizeof *s);
	s->stops = stops;
	s->n_stops = n;
	s->hit = -1;
	for (size_t i = 0; i < n; i++) {
		size_t l = strlen(stops[i]);
		if (l > s->max_len)
			s->max_len = l;
	}
}

void
fe_stop_free(struct fe_stop *s)
{
	free(s->buf);
	s->buf = NULL;
	s->len = s->cap = 0;
}

int
fe_stop_push(struct fe_stop *s, const char *text, size_t n, int flush, size_t *ready)
{
	*ready = 0;
	if (s->hit >= 0)
		return 0; // everything after a stop is dropped
	if (s->len + n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 256;
		while (cap < s->len + n + 1)
			cap *= 2;
		char *b = realloc(s->buf, cap);
		if (!b)
			return -1;
		s->buf = b;
		s->cap = cap;
	}
	memcpy(s->buf + s->len, text, n);
	s->len += n;
	// earliest match of any stop in the held text
	size_t best = SIZE_MAX;
	for (size_t i = 0; i < s->n_stops; i++) {
		size_t l = strlen(s->stops[i]);
		if (l == 0 || l > s->len)
			continue;
		const char *m = memmem(s->buf, s->len, s->stops[i], l);
		if (m && (size_t)(m - s->buf) < best) {
			best = (size_t)(m - s->buf);
			s->hit = (int)i;
		}
	}
	if (s->hit >= 0) {
		s->len = best;
		*ready = best;
		return 0;
	}
	if (flush) {
		*ready = s->len;
		return 0;
	}
	size_t hold = s->max_len ? s->max_len - 1 : 0;
	size_t r = s->len > hold ? s->len - hold : 0;
	*ready = fe_utf8_boundary(s->buf, r);
	return 0;
}

void
fe_stop_consume(struct fe_stop *s, size_t n)
{
	if (n > s->len)
		n = s->len;
	memmove(s->buf, s->buf + n, s->len - n);
	s->len -= n;
}

size_t
fe_utf8_boundary(const char *s, size_t n)
{
	return n - ad_utf8_tail(s, n);
}

// decodes one well-formed UTF-8 sequence at s (strict: no overlongs,
// surrogates or code points past U+10FFFF); its length, or 0
static size_t
utf8_valid_at(const unsigned char *s, size_t n)
{
	int l = ad_utf8_len(s[0]);
	if (l == 0 || (size_t)l > n)
		return 0;
	for (int i = 1; i < l; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if (l == 3) {
		if (s[0] == 0xe0 && s[1] < 0xa0)
			return 0;
		if (s[0] == 0xed && s[1] >= 0xa0)
			return 0;
	} else if (l == 4) {
		if (s[0] == 0xf0 && s[1] < 0x90)
			return 0;
		if (s[0] == 0xf4 && s[1] >= 0x90)
			return 0;
	}
	return (size_t)l;
}

char *
fe_utf8_clean(const char *s, size_t n, size_t *out_len)
{
	char *o = malloc(n * 3 + 1); // each bad byte becomes 3
	if (!o)
		return NULL;
	size_t j = 0;
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; i < n;) {
		size_t l = utf8_valid_at(u + i, n - i);
		if (l == 0) {
			memcpy(o + j, "\xef\xbf\xbd", 3);
			j += 3;
			i++;
			continue;
		}
		if (l == 1 && u[i] == 0) { // NUL would cut C strings short
			memcpy(o + j, "\xef\xbf\xbd", 3);
			j += 3;
			i++;
			continue;
		}
		memcpy(o + j, s + i, l);
		j += l;
		i += l;
	}
	o[j] = 0;
	if (out_len)
		*out_len = j;
	return o;
}
