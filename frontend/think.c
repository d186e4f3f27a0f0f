// think.c - a thinking model's reasoning told apart from its answer; see
// fe_think in fe.h.
#define _GNU_SOURCE // memmem
#include <stdio.h>
#include <string.h>

#include "fe.h"

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

static int
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

void
fe_think_init(struct fe_think *t, int open)
{
	memset(t, 0, sizeof *t);
	t->state = open ? FE_THINK_IN : FE_THINK_START;
	t->lead = 1;
}

// the length of the longest suffix of s[0..n) that is a proper prefix of tag
static size_t
partial_tag(const char *s, size_t n, const char *tag)
{
	size_t tl = strlen(tag);
	for (size_t k = tl - 1 < n ? tl - 1 : n; k > 0; k--)
		if (!memcmp(s + n - k, tag, k))
			return k;
	return 0;
}

static int
out(struct fe_think *t, int part, const char *s, size_t n, fe_think_cb cb, void *arg)
{
	if (part == FE_PART_REASONING && t->pending_ws) { // whitespace inside the reasoning
		size_t k = t->pending_ws;
		t->pending_ws = 0;
		if (cb(arg, part, t->ws, k) != 0)
			return -1;
	}
	return n ? cb(arg, part, s, n) : 0;
}

// reasoning text: its leading whitespace dropped, its trailing whitespace
// held until more reasoning follows (so the reasoning ends stripped)
static int
reasoning(struct fe_think *t, const char *s, size_t n, fe_think_cb cb, void *arg)
{
	if (t->lead) {
		while (n && is_space(*s))
			s++, n--;
		if (!n)
			return 0;
		t->lead = 0;
	}
	size_t e = n;
	while (e && is_space(s[e - 1]))
		e--;
	if (e && out(t, FE_PART_REASONING, s, e, cb, arg) != 0)
		return -1;
	for (size_t i = e; i < n; i++) // the whitespace at the end waits
		if (t->pending_ws < sizeof t->ws)
			t->ws[t->pending_ws++] = s[i];
		else if (out(t, FE_PART_REASONING, s + i, 1, cb, arg) != 0)
			return -1;
	return 0;
}

// the answer: the whitespace right after </think> dropped
static int
content(struct fe_think *t, const char *s, size_t n, fe_think_cb cb, void *arg)
{
	if (t->lead_content) {
		while (n && is_space(*s))
			s++, n--;
		if (!n)
			return 0;
		t->lead_content = 0;
	}
	return n ? cb(arg, FE_PART_CONTENT, s, n) : 0;
}

int
fe_think_push(struct fe_think *t, const char *s, size_t n, int flush, fe_think_cb cb, void *arg)
{
	// work on what was held back followed by the new text
	char buf[sizeof t->hold + 4096];
	while (n || flush) {
		size_t take = n < sizeof buf - t->n_hold ? n : sizeof buf - t->n_hold;
		memcpy(buf, t->hold, t->n_hold);
		memcpy(buf + t->n_hold, s, take);
		size_t len = t->n_hold + take;
		s += take;
		n -= take;
		int last = flush && n == 0;
		t->n_hold = 0;
		const char *p = buf;
		while (len) {
			if (t->state == FE_THINK_START) {
				// leading whitespace, then either <think> or the answer
				size_t ws = 0;
				while (ws < len && is_space(p[ws]))
					ws++;
				size_t rest = len - ws, ol = sizeof OPEN - 1;
				if (rest >= ol && !memcmp(p + ws, OPEN, ol)) {
					t->state = FE_THINK_IN;
					p += ws + ol;
					len -= ws + ol;
					continue;
				}
				if (!last && (rest == 0 || (rest < ol && !memcmp(p + ws, OPEN, rest)))) {
					memcpy(t->hold, p, len); // not decided yet
					t->n_hold = len;
					len = 0;
					break;
				}
				t->state = FE_THINK_OUT;
				t->lead_content = 0; // no thinking: the answer as written
				continue;
			}
			if (t->state == FE_THINK_IN) {
				const char *c = memmem(p, len, CLOSE, sizeof CLOSE - 1);
				if (c) {
					if (reasoning(t, p, (size_t)(c - p), cb, arg) != 0)
						return -1;
					t->pending_ws = 0; // the reasoning's trailing whitespace goes
					t->state = FE_THINK_OUT;
					t->lead_content = 1;
					size_t used = (size_t)(c - p) + sizeof CLOSE - 1;
					p += used;
					len -= used;
					continue;
				}
				size_t keep = last ? 0 : partial_tag(p, len, CLOSE);
				if (reasoning(t, p, len - keep, cb, arg) != 0)
					return -1;
				memcpy(t->hold, p + len - keep, keep);
				t->n_hold = keep;
				len = 0;
				break;
			}
			if (content(t, p, len, cb, arg) != 0)
				return -1;
			len = 0;
		}
		if (last)
			break;
	}
	return 0;
}

int
fe_think_model(const char *template_text)
{
	return template_text && (strstr(template_text, OPEN) || strstr(template_text, CLOSE));
}

int
fe_think_open(const char *prompt)
{
	size_t n = strlen(prompt), ol = sizeof OPEN - 1;
	while (n && is_space(prompt[n - 1]))
		n--;
	return n >= ol && !memcmp(prompt + n - ol, OPEN, ol);
}

uint64_t
fe_think_hash(uint64_t h, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull; // FNV-1a
	return h;
}

void
fe_think_signature(uint64_t h, char out[40])
{
	snprintf(out, 40, "anedvd-%016llx", (unsigned long long)h);
}
