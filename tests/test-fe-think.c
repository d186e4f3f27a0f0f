// The frontend's split of a thinking model's reply (think.c) against a plain
// twin that reads the whole reply at once: every reply of a set of cases,
// cut into pieces at every pair of points (and byte by byte), gives the same
// reasoning and answer as the twin; the pieces come in order (all the
// reasoning, then the answer); the prompt checks.
#include "fe.h"
#include "t.h"

static int
sp(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

// the twin: what fe_think's comment in fe.h says, on the whole reply
static void
split_ref(const char *s, int open, char *reasoning, char *content)
{
	size_t n = strlen(s), p = 0;
	reasoning[0] = content[0] = 0;
	if (!open) {
		size_t i = 0;
		while (i < n && sp(s[i]))
			i++;
		if (strncmp(s + i, "<think>", 7)) {
			strcpy(content, s);
			return;
		}
		p = i + 7;
	}
	const char *c = strstr(s + p, "</think>");
	size_t e = c ? (size_t)(c - s) : n;
	size_t a = p;
	while (a < e && sp(s[a]))
		a++;
	while (e > a && sp(s[e - 1]))
		e--;
	memcpy(reasoning, s + a, e - a);
	reasoning[e - a] = 0;
	if (c) {
		const char *t = c + 8;
		while (*t && sp(*t))
			t++;
		strcpy(content, t);
	}
}

struct acc {
	char r[4096], c[4096];
	int order_ok, seen_content;
};

static int
collect(void *arg, int part, const char *s, size_t n)
{
	struct acc *a = arg;
	if (n == 0)
		a->order_ok = 0; // empty pieces are not handed out
	if (part == FE_PART_REASONING) {
		if (a->seen_content)
			a->order_ok = 0;
		strncat(a->r, s, n);
	} else {
		a->seen_content = 1;
		strncat(a->c, s, n);
	}
	return 0;
}

// the reply cut at cuts[0..nc) (sorted), through fe_think
static void
run(const char *s, int open, const size_t *cuts, int nc, struct acc *a)
{
	struct fe_think t;
	fe_think_init(&t, open);
	memset(a, 0, sizeof *a);
	a->order_ok = 1;
	size_t from = 0, n = strlen(s);
	for (int i = 0; i <= nc; i++) {
		size_t to = i < nc ? cuts[i] : n;
		CHECK(fe_think_push(&t, s + from, to - from, i == nc, collect, a) == 0);
		from = to;
	}
}

static const struct {
	const char *reply;
	int open;
} cases[] = {
	{"<think>Let me think.</think>\n\nHello!", 0},
	{"<think>\nThe user asks.\n\nI answer.\n</think>\n\nHello, world.\n", 0},
	{"  \n<think>x</think>y", 0},
	{"Hello, no thinking here. <think>not at the start</think>", 0},
	{"<thinking>is not the tag</thinking>", 0},
	{"<think>unfinished thought with trailing space  ", 0},
	{"<think></think>", 0},
	{"<think>a</think>", 0},
	{"<thi", 0},
	{"   ", 0},
	{"", 0},
	{"<think>a < b and c </thin k> d</think>  <answer> </think>", 0},
	{"</think>", 0},
	{"The thought of an R1 distill.\n</think>\n\nThe answer.", 1},
	{"\n\nStill thinking when cut", 1},
	{"</think>answer only", 1},
	{"<think>double</think>x", 1},
	{"<think>tabs\tand\r\nCRLF\r\n</think>\r\n\tok\t", 0},
	{"<think>ü ünïcödé 🙂 </think> 日本語", 0},
};

static void
test_against_twin(void)
{
	int runs = 0;
	for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
		const char *s = cases[k].reply;
		char wr[4096], wc[4096];
		split_ref(s, cases[k].open, wr, wc);
		size_t n = strlen(s);
		struct acc a;
		// every pair of cut points (a single cut when they coincide, none at the ends)
		for (size_t i = 0; i <= n; i++)
			for (size_t j = i; j <= n; j++) {
				size_t cuts[2] = {i, j};
				run(s, cases[k].open, cuts, 2, &a);
				runs++;
				CHECK(!strcmp(a.r, wr) && !strcmp(a.c, wc) && a.order_ok,
				      "case %zu cut %zu,%zu: reasoning '%s' (want '%s'), content '%s' (want '%s')", k,
				      i, j, a.r, wr, a.c, wc);
			}
		// byte by byte
		size_t cuts[256];
		int nc = 0;
		for (size_t i = 1; i < n && nc < 256; i++)
			cuts[nc++] = i;
		run(s, cases[k].open, cuts, nc, &a);
		runs++;
		CHECK(!strcmp(a.r, wr) && !strcmp(a.c, wc), "case %zu byte by byte: '%s' / '%s'", k, a.r, a.c);
	}
	printf("think: %zu replies, %d ways of cutting them, each split as the twin splits it\n",
	       sizeof cases / sizeof cases[0], runs);
	// the twin itself, on the cases that say what matters
	char r[256], c[256];
	split_ref(cases[0].reply, 0, r, c);
	CHECK(!strcmp(r, "Let me think.") && !strcmp(c, "Hello!"));
	split_ref(cases[3].reply, 0, r, c);
	CHECK(!r[0] && !strcmp(c, cases[3].reply));
	split_ref(cases[13].reply, 1, r, c);
	CHECK(!strcmp(r, "The thought of an R1 distill.") && !strcmp(c, "The answer."));
}

static void
test_prompt(void)
{
	CHECK(fe_think_open("<｜User｜>Hi<｜Assistant｜><think>\n"));
	CHECK(fe_think_open("<think>"));
	CHECK(!fe_think_open("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
	CHECK(!fe_think_open("<|im_start|>assistant\n"));
	CHECK(!fe_think_open(""));
	CHECK(fe_think_model("{%- if x %}<think>{% endif %}"));
	CHECK(fe_think_model("... '</think>' ..."));
	CHECK(!fe_think_model("<|im_start|>"));
	CHECK(!fe_think_model(NULL));
	// the signature hashes the text
	char a[40], b[40], c[40];
	fe_think_signature(fe_think_hash(FE_THINK_HASH0, "abc", 3), a);
	fe_think_signature(fe_think_hash(fe_think_hash(FE_THINK_HASH0, "a", 1), "bc", 2), b);
	fe_think_signature(fe_think_hash(FE_THINK_HASH0, "abd", 3), c);
	CHECK(!strcmp(a, b) && strcmp(a, c) && !strncmp(a, "anedvd-", 7), "%s %s %s", a, b, c);
}

int
main(void)
{
	T_RUN(test_against_twin);
	T_RUN(test_prompt);
	return t_done();
}
