// utf8.h - the UTF-8 lead-byte rule, for code that walks UTF-8 text by hand:
// the frontend's stop-sequence holdback and JSON hygiene (frontend/stop.c),
// the tokenizer's byte-level pieces and streamed detokenization.
//
// Strict lead bytes: C0, C1 and F5..FF begin no sequence (they could only
// begin an overlong one or one past U+10FFFF).
#ifndef AD_UTF8_H
#define AD_UTF8_H

#include <stddef.h>

// ad_utf8_len: the length of the sequence lead byte c begins; 0 for a
// continuation byte or a byte that is never valid
static inline int
ad_utf8_len(unsigned char c)
{
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		return 2;
	if (c >= 0xe0 && c <= 0xef)
		return 3;
	if (c >= 0xf0 && c <= 0xf4)
		return 4;
	return 0;
}

// ad_utf8_tail: how many bytes at the end of s[0..n) begin a character that
// is not complete yet (at most 3; 0 when the end is complete or can never
// become valid)
static inline size_t
ad_utf8_tail(const char *s, size_t n)
{
	for (size_t back = 1; back <= 3 && back <= n; back++) {
		unsigned char c = (unsigned char)s[n - back];
		if ((c & 0xc0) == 0x80)
			continue; // continuation: keep looking for the lead byte
		return ad_utf8_len(c) > (int)back ? back : 0;
	}
	return 0;
}

#endif
