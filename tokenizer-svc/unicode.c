// unicode.c - UTF-8, categories, lowercase and NFC over the generated tables.
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

int
unicode_decode(const char *str, size_t n, uint32_t *cp, int *bad)
{
	const unsigned char *s = (const unsigned char *)str;
	uint32_t c = s[0], min;
	int len;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2, c &= 0x1F, min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3, c &= 0x0F, min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4, c &= 0x07, min = 0x10000;
	} else {
		goto invalid; // continuation byte, C0/C1 overlong lead, F5..FF
	}
	if ((size_t)len > n)
		goto invalid;
	for (int i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			goto invalid;
		c = (c << 6) | (s[i] & 0x3F);
	}
	if (c < min || c > UNICODE_MAX || (c >= 0xD800 && c <= 0xDFFF))
		goto invalid;
	*cp = c;
	return len;
invalid:
	*cp = UNICODE_REPLACEMENT;
	if (bad)
		*bad = 1;
	return 1;
}

int
unicode_encode(uint32_t cp, char *out)
{
	unsigned char *o = (unsigned char *)out;

	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = 0xC0 | (cp >> 6);
		o[1] = 0x80 | (cp & 0x3F);
		return 2;
	}
	if (cp >= 0xD800 && cp <= 0xDFFF)
		return 0;
	if (cp < 0x10000) {
		o[0] = 0xE0 | (cp >> 12);
		o[1] = 0x80 | ((cp >> 6) & 0x3F);
		o[2] = 0x80 | (cp & 0x3F);
		return 3;
	}
	if (cp > UNICODE_MAX)
		return 0;
	o[0] = 0xF0 | (cp >> 18);
	o[1] = 0x80 | ((cp >> 12) & 0x3F);
	o[2] = 0x80 | ((cp >> 6) & 0x3F);
	o[3] = 0x80 | (cp & 0x3F);
	return 4;
}

int
unicode_valid(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		uint32_t cp;
		int bad = 0;
		i += (size_t)unicode_decode(s + i, n - i, &cp, &bad);
		if (bad)
			return 0;
	}
	return 1;
}

uint16_t
unicode_flags(uint32_t cp)
{
	if (cp < UNICODE_FLAGS_LOW)
		return unicode_flags_low[cp];
	if (cp > UNICODE_MAX)
		return UNICODE_UNDEF;
	// last range whose first <= cp
	int lo = 0, hi = unicode_n_flag_ranges - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (unicode_flag_ranges[mid].first <= cp)
			lo = mid;
		else
			hi = mid - 1;
	}
	return unicode_flag_ranges[lo].flags;
}

uint32_t
unicode_tolower(uint32_t cp)
{
	if (cp < 0x80)
		return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
	int lo = 0, hi = unicode_n_lower - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (unicode_lower[mid][0] == cp)
			return unicode_lower[mid][1];
		if (unicode_lower[mid][0] < cp)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return cp;
}

int
unicode_ccc(uint32_t cp)
{
	if (cp < 0x300)
		return 0;
	int lo = 0, hi = unicode_n_ccc - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (cp < unicode_ccc_ranges[mid].first)
			hi = mid - 1;
		else if (cp > unicode_ccc_ranges[mid].last)
			lo = mid + 1;
		else
			return unicode_ccc_ranges[mid].ccc;
	}
	return 0;
}

// --- NFC ---------------------------------------------------------------------
// Hangul syllables decompose and compose algorithmically (Unicode ch. 3.12).
enum {
	H_SBASE = 0xAC00,
	H_LBASE = 0x1100,
	H_VBASE = 0x1161,
	H_TBASE = 0x11A7,
	H_LCOUNT = 19,
	H_VCOUNT = 21,
	H_TCOUNT = 28,
	H_NCOUNT = H_VCOUNT * H_TCOUNT,
	H_SCOUNT = H_LCOUNT * H_NCOUNT,
};

// an invalid input byte b travels through NFC as RAW_BYTE | b: ccc 0,
// no decomposition, no composition, written back as the byte itself
#define RAW_BYTE 0x80000000u

static const uint32_t *
decomp_of(uint32_t cp)
{
	int lo = 0, hi = unicode_n_decomp - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (unicode_decomp[mid][0] == cp)
			return unicode_decomp[mid];
		if (unicode_decomp[mid][0] < cp)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

// the compatibility decomposition of cp (one level): its code points and
// their number, or NULL
static const uint32_t *
kdecomp_of(uint32_t cp, int *n)
{
	int lo = 0, hi = unicode_n_kdecomp - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (unicode_kdecomp[mid][0] == cp) {
			*n = (int)unicode_kdecomp[mid][2];
			return unicode_kdecomp_cps + unicode_kdecomp[mid][1];
		}
		if (unicode_kdecomp[mid][0] < cp)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return NULL;
}

uint32_t
unicode_nfd_first(uint32_t cp)
{
	if (cp >= H_SBASE && cp < H_SBASE + H_SCOUNT)
		return H_LBASE + (cp - H_SBASE) / H_NCOUNT;
	for (const uint32_t *d; cp >= 0xC0 && (d = decomp_of(cp));)
		cp = d[1];
	return cp;
}

static uint32_t
compose_pair(uint32_t a, uint32_t b)
{
	if (a >= H_LBASE && a < H_LBASE + H_LCOUNT && b >= H_VBASE && b < H_VBASE + H_VCOUNT)
		return H_SBASE + ((a - H_LBASE) * H_VCOUNT + (b - H_VBASE)) * H_TCOUNT;
	if (a >= H_SBASE && a < H_SBASE + H_SCOUNT && (a - H_SBASE) % H_TCOUNT == 0 && b > H_TBASE &&
	    b < H_TBASE + H_TCOUNT)
		return a + (b - H_TBASE);
	int lo = 0, hi = unicode_n_comp - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		const uint32_t *e = unicode_comp[mid];
		if (e[0] == a && e[1] == b)
			return e[2];
		if (e[0] < a || (e[0] == a && e[1] < b))
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return 0;
}

struct cpbuf {
	uint32_t *v;
	size_t n, cap;
};

static int
cpbuf_push(struct cpbuf *b, uint32_t cp)
{
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 64;
		uint32_t *v = realloc(b->v, cap * sizeof *v);
		if (!v)
			return -1;
		b->v = v, b->cap = cap;
	}
	b->v[b->n++] = cp;
	return 0;
}

// the full canonical decomposition of cp, and with compat its
// compatibility decomposition too (NFKD), appended to b
static int
decompose(struct cpbuf *b, uint32_t cp, int compat)
{
	if (cp >= H_SBASE && cp < H_SBASE + H_SCOUNT) {
		uint32_t s = cp - H_SBASE, t = s % H_TCOUNT;
		if (cpbuf_push(b, H_LBASE + s / H_NCOUNT) || cpbuf_push(b, H_VBASE + (s % H_NCOUNT) / H_TCOUNT))
			return -1;
		return t ? cpbuf_push(b, H_TBASE + t) : 0;
	}
	const uint32_t *d = cp >= 0xC0 && !(cp & RAW_BYTE) ? decomp_of(cp) : NULL;
	if (!d) {
		int n;
		const uint32_t *k = compat && cp >= 0xA0 && !(cp & RAW_BYTE) ? kdecomp_of(cp, &n) : NULL;
		if (!k)
			return cpbuf_push(b, cp);
		for (int i = 0; i < n; i++)
			if (decompose(b, k[i], compat))
				return -1;
		return 0;
	}
	if (decompose(b, d[1], compat))
		return -1;
	return d[2] ? decompose(b, d[2], compat) : 0;
}

static int
ccc_of(uint32_t cp)
{
	return cp & RAW_BYTE ? 0 : unicode_ccc(cp);
}

// nfc_stable: cp is a starter that NFC (compat: NFKC) leaves alone and
// that never combines with what precedes it, so the text can be cut in
// front of it
static int
nfc_stable(uint32_t cp, int compat)
{
	if (cp < (compat ? 0xA0u : 0x300u))
		return 1;
	int nk;
	if (compat && kdecomp_of(cp, &nk))
		return 0;
	if ((cp >= 0x1100 && cp < 0x1200) || (cp >= H_SBASE && cp < H_SBASE + H_SCOUNT))
		return 0; // Hangul
	if (unicode_ccc(cp) || decomp_of(cp))
		return 0;
	int lo = 0, hi = unicode_n_comp_second - 1;
	while (lo <= hi) {
		int mid = (lo + hi) / 2;
		if (unicode_comp_second[mid] == cp)
			return 0;
		if (unicode_comp_second[mid] < cp)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return 1;
}

// nfd_stable: cp decomposes to nothing else and is a starter, so NFD
// (compat: NFKD) can cut the text in front of it and keep it
static int
nfd_stable(uint32_t cp, int compat)
{
	if (cp < (compat ? 0xA0u : 0xC0u))
		return 1;
	int nk;
	if ((cp >= H_SBASE && cp < H_SBASE + H_SCOUNT) || unicode_ccc(cp) || decomp_of(cp) ||
	    (compat && kdecomp_of(cp, &nk)))
		return 0;
	return 1;
}

struct outbuf {
	char *p;
	size_t n, cap;
};

static int
out_reserve(struct outbuf *o, size_t more)
{
	if (o->n + more <= o->cap)
		return 0;
	size_t cap = o->cap ? o->cap : 64;
	while (cap < o->n + more)
		cap *= 2;
	char *p = realloc(o->p, cap);
	if (!p)
		return -1;
	o->p = p, o->cap = cap;
	return 0;
}

// nfc_segment appends NFC of s[0..n) to o (the full algorithm: decompose,
// order, compose)
static int
nfc_segment(const char *s, size_t n, struct cpbuf *b, struct outbuf *o, int compat, int compose)
{
	b->n = 0;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int bad = 0;
		int len = unicode_decode(s + i, n - i, &cp, &bad);
		if (bad)
			cp = RAW_BYTE | (unsigned char)s[i];
		if (decompose(b, cp, compat))
			return -1;
		i += (size_t)len;
	}
	// canonical order: stable sort of each run of non-starters by class
	for (size_t k = 1; k < b->n; k++) {
		int c = ccc_of(b->v[k]);
		if (!c)
			continue;
		for (size_t j = k; j > 0; j--) {
			int p = ccc_of(b->v[j - 1]);
			if (p <= c)
				break;
			uint32_t t = b->v[j];
			b->v[j] = b->v[j - 1], b->v[j - 1] = t;
		}
	}
	// canonical composition (NFC, NFKC; NFD and NFKD stop before it)
	size_t w = compose ? 0 : b->n, starter = (size_t)-1;
	int last_cc = 0;
	for (size_t k = 0; k < b->n && compose; k++) {
		uint32_t cp = b->v[k];
		int cc = ccc_of(cp);
		if (starter != (size_t)-1 && !(cp & RAW_BYTE) && !(b->v[starter] & RAW_BYTE)) {
			int blocked = w - 1 != starter && (last_cc == 0 || last_cc >= cc);
			uint32_t c = blocked ? 0 : compose_pair(b->v[starter], cp);
			if (c) {
				b->v[starter] = c;
				continue;
			}
		}
		if (cc == 0)
			starter = w;
		last_cc = cc;
		b->v[w++] = cp;
	}
	if (out_reserve(o, 4 * w))
		return -1;
	for (size_t k = 0; k < w; k++) {
		if (b->v[k] & RAW_BYTE)
			o->p[o->n++] = (char)(b->v[k] & 0xFF);
		else
			o->n += (size_t)unicode_encode(b->v[k], o->p + o->n);
	}
	return 0;
}

// Stable code points cut the text into segments; only a segment holding
// something else goes through the full algorithm, from the stable code
// point before it (which may compose with what follows) to the next one.
static char *
normalize(const char *s, size_t n, size_t *out_n, int compat, int compose)
{
	struct outbuf o = {0};
	struct cpbuf b = {0};
	size_t copied = 0, prev = 0; // prev: start of the last stable code point
	if (out_reserve(&o, n + 1))
		goto oom;
	for (size_t i = 0; i < n;) {
		uint32_t cp;
		int bad = 0;
		int len = unicode_decode(s + i, n - i, &cp, &bad);
		if (bad || (compose ? nfc_stable(cp, compat) : nfd_stable(cp, compat))) {
			prev = i;
			i += (size_t)len;
			continue;
		}
		// unstable: the segment runs from prev to the next stable code point
		size_t start = prev >= copied && prev < i ? prev : i, end = i + (size_t)len;
		while (end < n) {
			len = unicode_decode(s + end, n - end, &cp, &bad);
			if (bad || (compose ? nfc_stable(cp, compat) : nfd_stable(cp, compat)))
				break;
			end += (size_t)len;
		}
		if (out_reserve(&o, start - copied))
			goto oom;
		memcpy(o.p + o.n, s + copied, start - copied);
		o.n += start - copied;
		if (nfc_segment(s + start, end - start, &b, &o, compat, compose))
			goto oom;
		copied = end;
		prev = end; // not yet seen; set again once the loop reads it
		i = end;
	}
	if (out_reserve(&o, n - copied + 1))
		goto oom;
	memcpy(o.p + o.n, s + copied, n - copied);
	o.n += n - copied;
	o.p[o.n] = 0;
	*out_n = o.n;
	free(b.v);
	return o.p;
oom:
	free(b.v);
	free(o.p);
	return NULL;
}

char *
unicode_nfc(const char *s, size_t n, size_t *out_n)
{
	return normalize(s, n, out_n, 0, 1);
}

char *
unicode_nfkc(const char *s, size_t n, size_t *out_n)
{
	return normalize(s, n, out_n, 1, 1);
}

char *
unicode_nfd(const char *s, size_t n, size_t *out_n)
{
	return normalize(s, n, out_n, 0, 0);
}

char *
unicode_nfkd(const char *s, size_t n, size_t *out_n)
{
	return normalize(s, n, out_n, 1, 0);
}

char *
unicode_sanitize(const char *s, size_t n, size_t *out_n)
{
	// an invalid byte (1) becomes 3 bytes at most
	char *o = malloc(3 * n + 1);
	if (!o)
		return NULL;
	size_t m = 0;
	for (size_t i = 0; i < n;) {
		uint32_t c;
		int bad = 0;
		int k = unicode_decode(s + i, n - i, &c, &bad);
		if (bad) {
			m += (size_t)unicode_encode(UNICODE_REPLACEMENT, o + m);
		} else {
			memcpy(o + m, s + i, (size_t)k);
			m += (size_t)k;
		}
		i += (size_t)k;
	}
	o[m] = 0;
	if (out_n)
		*out_n = m;
	return o;
}
