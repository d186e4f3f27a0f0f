// test-fit.c - the one rule that fits a prompt and its reply into the
// context (cpu-worker/fit.h), case by case.
#include "fit.h"
#include "t.h"

static void
test_fits(void)
{
	int32_t p[100];
	for (int i = 0; i < 100; i++)
		p[i] = i == 0 ? 1 : 100 + i;
	// fits with its reply: nothing changes
	struct fit f = fit_prompt(p, 10, 20, 64, 1);
	CHECK(f.keep == 10 && f.from == 0 && f.dropped == 0 && f.max_tokens == 20);
	// fits, the reply does not: the reply is shortened
	f = fit_prompt(p, 10, 1000, 64, 1);
	CHECK(f.keep == 10 && f.dropped == 0 && f.max_tokens == 64 - 10 - 1, "%d", f.max_tokens);
	// leaves no room: the oldest tokens go, the BOS stays
	f = fit_prompt(p, 100, 8, 64, 1);
	CHECK(f.keep == 55 && f.from == 1 && f.dropped == 45 && f.max_tokens == 8);
	int32_t out[64];
	fit_copy(&f, p, out);
	CHECK(out[0] == 1 && out[1] == p[46] && out[54] == p[99], "%d %d %d", out[0], out[1], out[54]);
	// no BOS in front (or none in the model): a plain suffix
	f = fit_prompt(p + 1, 99, 8, 64, 1);
	CHECK(f.keep == 55 && f.from == 0 && f.dropped == 44);
	fit_copy(&f, p + 1, out);
	CHECK(out[0] == p[45] && out[54] == p[99]);
	f = fit_prompt(p, 100, 8, 64, -1);
	CHECK(f.from == 0 && f.dropped == 45);
	// a reply beyond the context with a prompt that leaves no room: the
	// reply keeps max_seq - 2, one prompt token stays (not the BOS alone)
	f = fit_prompt(p, 100, 100000, 64, 1);
	CHECK(f.max_tokens == 62 && f.keep == 1 && f.from == 0 && f.dropped == 99, "%d %d", f.max_tokens, f.keep);
	// exactly at the edge: n + 1 == max_seq leaves no room
	f = fit_prompt(p, 63, 4, 64, 1);
	CHECK(f.keep == 59 && f.from == 1 && f.dropped == 4);
	f = fit_prompt(p, 62, 4, 64, 1);
	CHECK(f.keep == 62 && f.dropped == 0 && f.max_tokens == 1);
	// a negative max_tokens is none
	f = fit_prompt(p, 10, -5, 64, 1);
	CHECK(f.keep == 10 && f.max_tokens == 0);
}

int
main(void)
{
	T_RUN(test_fits);
	return t_done();
}
