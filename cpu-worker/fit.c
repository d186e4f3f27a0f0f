#include "fit.h"

#include <string.h>

struct fit
fit_prompt(const int32_t *prompt, int n, int max_tokens, int max_seq, int32_t bos)
{
	struct fit f = {.keep = n, .max_tokens = max_tokens > 0 ? max_tokens : 0};
	if (n + 1 < max_seq) {
		if ((int64_t)n + f.max_tokens + 1 > max_seq)
			f.max_tokens = max_seq - n - 1;
		return f;
	}
	if (f.max_tokens > max_seq - 2)
		f.max_tokens = max_seq > 2 ? max_seq - 2 : 0;
	int keep = max_seq - f.max_tokens - 1;
	if (keep < 1)
		keep = 1;
	if (keep >= n)
		return f;
	f.keep = keep;
	f.dropped = n - keep;
	f.from = bos >= 0 && n > 0 && prompt[0] == bos && keep >= 2 ? 1 : 0;
	return f;
}

void
fit_copy(const struct fit *f, const int32_t *prompt, int32_t *out)
{
	if (f->from)
		memcpy(out, prompt, (size_t)f->from * sizeof *out);
	memcpy(out + f->from, prompt + f->from + f->dropped, (size_t)(f->keep - f->from) * sizeof *out);
}
