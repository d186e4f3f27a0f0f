// fit.h - fitting a prompt and its reply into the context: the one rule.
//
// The cpu-worker owns it (the scheduler's jobs and engine_prompt, so the
// HTTP server, `anedvd run` and the in-process modes alike; the fake engine
// of the HTTP tests compiles this file too). For a prompt of n tokens, a
// reply of up to max_tokens and a context of max_seq positions:
//   - a prompt that leaves room for one token (n + 1 < max_seq) is kept
//     whole; the reply gets the room left: max_tokens becomes at most
//     max_seq - n - 1;
//   - a longer prompt keeps room for the reply (max_tokens at most
//     max_seq - 2) and loses its oldest tokens, keep = max_seq -
//     max_tokens - 1 of them staying, but never a leading BOS: when
//     prompt[0] is bos (and two or more tokens stay) it stays in front.
// The kept prompt is prompt[0 .. from) followed by prompt[from + dropped
// .. n): from is 1 when a BOS stayed, else 0.
#ifndef AD_FIT_H
#define AD_FIT_H

#include <stdint.h>

struct fit {
	int keep;       // prompt tokens kept
	int from;       // the first token dropped (0, or 1 after a kept BOS)
	int dropped;    // tokens dropped: prompt[from .. from + dropped)
	int max_tokens; // the reply's room
};

// bos < 0: the model has none
struct fit fit_prompt(const int32_t *prompt, int n, int max_tokens, int max_seq, int32_t bos);

// fit_copy writes the kept prompt (f->keep tokens) into out
void fit_copy(const struct fit *f, const int32_t *prompt, int32_t *out);

#endif
