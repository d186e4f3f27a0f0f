// The frontend's stop-sequence holdback and UTF-8 helpers: a stop split
// across pieces never leaks, the release point never splits a character,
// and JSON gets valid UTF-8 whatever the model produced.
#include "fe.h"
#include "t.h"

// feed pushes the pieces one by one and returns everything released
static char *
feed(const char *const *stops, size_t n_stops, const char *const *pieces, size_t n, int *hit, char *leaks)
{
	struct fe_stop s;
	fe_stop_init(&s, stops, n_stops);
	static char out[1024];
	out[0] = 0;
	for (size_t i = 0; i < n; i++) {
		size_t ready;
		int last = i + 1 == n;
		REQUIRE(fe_stop_push(&s, pieces[i], strlen(pieces[i]), last, &ready) == 0);
		strncat(out, s.buf, ready);
		fe_stop_consume(&s, ready);
		if (leaks) // what a client has seen so far must never contain a stop's start beyond the final text
			strcpy(leaks, out);
		if (s.hit >= 0)
			break;
	}
	*hit = s.hit;
	fe_stop_free(&s);
	return out;
}

static void
test_split_stop(void)
{
	const char *stops[] = {"STOP"};
	const char *pieces[] = {"Hello S", "T", "O", "P world"};
	int hit;
	char *out = feed(stops, 1, pieces, 4, &hit, NULL);
	CHECK(strcmp(out, "Hello ") == 0, "'%s'", out);
	CHECK(hit == 0);
}

static void
test_no_leak_while_pending(void)
{
	// after each push, what was released never includes a partial stop
	const char *stops[] = {"on a t"};
	struct fe_stop s;
	fe_stop_init(&s, stops, 1);
	const char *pieces[] = {"Once", " up", "on", " a", " t", "ime"};
	char out[256] = "";
	for (int i = 0; i < 6 && s.hit < 0; i++) {
		size_t ready;
		fe_stop_push(&s, pieces[i], strlen(pieces[i]), 0, &ready);
		strncat(out, s.buf, ready);
		fe_stop_consume(&s, ready);
		CHECK(strstr(out, "on a") == NULL, "leaked '%s'", out);
	}
	CHECK(s.hit == 0);
	CHECK(strcmp(out, "Once up") == 0, "'%s'", out);
	fe_stop_free(&s);
}

static void
test_earliest_of_many(void)
{
	const char *stops[] = {"world", "lo"};
	const char *pieces[] = {"Hello world"};
	int hit;
	char *out = feed(stops, 2, pieces, 1, &hit, NULL);
	CHECK(strcmp(out, "Hel") == 0, "'%s'", out);
	CHECK(hit == 1);
}

static void
test_flush_releases_tail(void)
{
	const char *stops[] = {"xyz"};
	const char *pieces[] = {"abc", "xy"};
	int hit;
	char *out = feed(stops, 1, pieces, 2, &hit, NULL);
	CHECK(strcmp(out, "abcxy") == 0, "'%s'", out);
	CHECK(hit == -1);
	// no stops: everything goes at once
	struct fe_stop s;
	fe_stop_init(&s, NULL, 0);
	size_t ready;
	fe_stop_push(&s, "abc", 3, 0, &ready);
	CHECK(ready == 3);
	fe_stop_free(&s);
}

static void
test_utf8_boundary(void)
{
	// "aé" is 61 c3 a9; cutting after c3 must move back
	CHECK(fe_utf8_boundary("a\xc3\xa9", 2) == 1);
	CHECK(fe_utf8_boundary("a\xc3\xa9", 3) == 3);
	CHECK(fe_utf8_boundary("\xe4\xbd\xa0", 2) == 0);
	CHECK(fe_utf8_boundary("\xf0\x9f\x98\x80", 3) == 0);
	CHECK(fe_utf8_boundary("abc", 2) == 2);
	// holdback with a multi-byte character right at the release point
	const char *stops[] = {"zz"};
	struct fe_stop s;
	fe_stop_init(&s, stops, 1);
	size_t ready;
	fe_stop_push(&s, "a\xe4\xbd\xa0", 4, 0, &ready); // hold 1 byte -> would cut the character
	CHECK(ready == 1, "ready=%zu", ready);
	fe_stop_free(&s);
}

static void
test_utf8_clean(void)
{
	size_t n;
	char *c = fe_utf8_clean("ok\xff", 3, &n);
	CHECK(strcmp(c, "ok\xef\xbf\xbd") == 0 && n == 5);
	free(c);
	c = fe_utf8_clean("\xe4\xbd\xa0\xc0\xaf", 5, &n); // valid CJK, then an overlong '/'
	CHECK(strcmp(c, "\xe4\xbd\xa0\xef\xbf\xbd\xef\xbf\xbd") == 0, "'%s'", c);
	free(c);
	c = fe_utf8_clean("\xed\xa0\x80", 3, &n); // a surrogate
	CHECK(n == 9);
	free(c);
	c = fe_utf8_clean("a\0b", 3, &n);
	CHECK(n == 5 && c[0] == 'a' && c[4] == 'b');
	free(c);
}

int
main(void)
{
	T_RUN(test_split_stop);
	T_RUN(test_no_leak_while_pending);
	T_RUN(test_earliest_of_many);
	T_RUN(test_flush_releases_tail);
	T_RUN(test_utf8_boundary);
	T_RUN(test_utf8_clean);
	return t_done();
}
