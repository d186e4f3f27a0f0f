// spec.c - prompt-lookup drafts, their length, their counters.
#include "spec.h"

#include <string.h>

void
spec_defaults(struct spec_opts *o)
{
	o->draft = SPEC_DEF_DRAFT;
	o->ngram_min = SPEC_DEF_NGRAM_MIN;
	o->ngram_max = SPEC_DEF_NGRAM_MAX;
	o->col_cost = SPEC_COST_AUTO;
}

int
spec_check(const struct spec_opts *o, char *err)
{
	if (o->draft < 0 || o->draft > SPEC_DRAFT_MAX)
		return ad_err(err, "--draft: %d is outside 0..%d", o->draft, SPEC_DRAFT_MAX);
	if (o->ngram_max < 1 || o->ngram_max > SPEC_NGRAM_MAX)
		return ad_err(err, "--ngram-max: %d is outside 1..%d", o->ngram_max, SPEC_NGRAM_MAX);
	if (o->ngram_min < 1 || o->ngram_min > o->ngram_max)
		return ad_err(err, "--ngram-min: %d is outside 1..%d (--ngram-max)", o->ngram_min, o->ngram_max);
	if (!(o->col_cost >= 0 && o->col_cost <= 100) && o->col_cost != SPEC_COST_AUTO)
		return ad_err(err, "--draft-cost: %g is outside 0..100", (double)o->col_cost);
	return 0;
}

// one backward scan over the history H = h[0..n) + [last]: at every
// earlier position p holding last, the length of the common suffix of
// H[..p] and H (at most ngram_max); the most recent p of each length
// wins, and a match of ngram_max at the most recent place ends the scan
int
spec_find(const int32_t *h, int n, int32_t last, int ngram_min, int ngram_max, int max, int32_t *out, int *ngram)
{
	*ngram = 0;
	if (max <= 0 || n < 1 || ngram_max < 1)
		return 0;
	if (ngram_max > SPEC_NGRAM_MAX)
		ngram_max = SPEC_NGRAM_MAX;
	if (ngram_min < 1)
		ngram_min = 1;
	const int T = n + 1; // H[T - 1] = last
	int best[SPEC_NGRAM_MAX + 1];
	for (int i = 0; i <= ngram_max; i++)
		best[i] = -1;
	int found = 0; // the longest length seen so far
	for (int p = T - 2; p >= 0 && found < ngram_max; p--) {
		if (h[p] != last)
			continue;
		int l = 1;
		while (l < ngram_max && l <= p && h[p - l] == h[n - l])
			l++;
		for (int m = found + 1; m <= l; m++)
			best[m] = p;
		if (l > found)
			found = l;
	}
	int nn = found < ngram_max ? found : ngram_max;
	if (nn < ngram_min)
		return 0;
	int p = best[nn];
	// the tokens after the match; past the end of H the draft repeats
	// itself (the continuation of a repeating stretch)
	for (int i = 0; i < max; i++) {
		int q = p + 1 + i;
		out[i] = q < n ? h[q] : q == n ? last : out[q - T];
	}
	*ngram = nn;
	return max;
}

int
spec_len(const struct spec_stats *st, int ngram, float cost, int k)
{
	if (k <= 0)
		return 0;
	if (cost <= 0)
		return k;
	if (ngram < 0 || ngram > SPEC_NGRAM_MAX)
		ngram = 0;
	const double all = ((double)st->accepted + 1) / ((double)st->reached + 2);
	const double a = ((double)st->accepted_n[ngram] + 2 * all) / ((double)st->reached_n[ngram] + 2), c = cost;
	double yield = 1, term = 1, best = 1;
	int bk = 0;
	for (int i = 1; i <= k; i++) {
		term *= a;
		yield += term;
		double f = yield / (1 + c * i);
		if (f > best) {
			best = f;
			bk = i;
		}
	}
	return bk;
}

#define COST_DECAY 0.985 // a call's weight halves over about 45 calls

void
spec_cost_add(struct spec_cost *m, int cols, double ns)
{
	const double x = cols, y = ns;
	m->s0 = m->s0 * COST_DECAY + 1;
	m->s1 = m->s1 * COST_DECAY + x;
	m->s2 = m->s2 * COST_DECAY + x * x;
	m->sy = m->sy * COST_DECAY + y;
	m->sxy = m->sxy * COST_DECAY + x * y;
}

float
spec_cost_get(const struct spec_cost *m, float prior)
{
	// the widths' variance: below a quarter column, the slope is noise
	const double d = m->s0 * m->s2 - m->s1 * m->s1;
	if (m->s0 < 8 || d < 0.25 * m->s0 * m->s0)
		return prior;
	const double b = (m->s0 * m->sxy - m->s1 * m->sy) / d, a = (m->sy - b * m->s1) / m->s0;
	if (b <= 0)
		return 0;
	if (a + b <= 0)
		return 2;
	double c = b / (a + b);
	return (float)(c < 2 ? c : 2);
}

void
spec_note(struct spec_stats *st, int ngram, int k, int accepted, int rejected)
{
	if (k <= 0)
		return;
	if (ngram < 0 || ngram > SPEC_NGRAM_MAX)
		ngram = 0;
	st->steps++;
	st->drafted += (uint64_t)k;
	st->accepted += (uint64_t)accepted;
	st->reached += (uint64_t)(accepted + (rejected ? 1 : 0));
	st->drafted_n[ngram] += (uint64_t)k;
	st->accepted_n[ngram] += (uint64_t)accepted;
	st->reached_n[ngram] += (uint64_t)(accepted + (rejected ? 1 : 0));
}

void
spec_probe(const struct spec_opts *o, const int32_t *h, int n_hist, const int32_t *gen, int n_gen, int max_tokens,
           int max_seq, int32_t *scratch, struct spec_stats *st, int *calls)
{
	memset(st, 0, sizeof *st);
	*calls = 0;
	if (n_gen < 1)
		return;
	memcpy(scratch, h, (size_t)n_hist * sizeof *h);
	int32_t d[SPEC_DRAFT_MAX];
	// pos: the generated token about to be fed; the sequence holds the
	// history and gen[0..pos)
	for (int pos = 0; pos + 1 < n_gen;) {
		const int len = n_hist + pos;
		int room = max_tokens - (pos + 1) - 1;
		if (room > max_seq - 1 - len)
			room = max_seq - 1 - len;
		if (room > o->draft)
			room = o->draft;
		int ngram = 0, k = 0;
		if (room > 0) {
			k = spec_find(scratch, len, gen[pos], o->ngram_min, o->ngram_max, room, d, &ngram);
			k = spec_len(st, ngram, o->col_cost == SPEC_COST_AUTO ? SPEC_COL_COST : o->col_cost, k);
		}
		int acc = 0;
		while (acc < k && pos + 1 + acc < n_gen && gen[pos + 1 + acc] == d[acc])
			acc++;
		int rej = acc < k && pos + 1 + acc < n_gen;
		spec_note(st, ngram, k, acc, rej);
		(*calls)++;
		int adv = acc + 1 < n_gen - pos ? acc + 1 : n_gen - pos;
		memcpy(scratch + len, gen + pos, (size_t)adv * sizeof *gen);
		pos += adv;
	}
}
