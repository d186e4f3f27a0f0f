// gen-types.h - the plain C types of a generation that cross a process
// boundary: what a client of the cpu-worker or the tokenizer service hands
// to its library (proto/client-*.h) and what the service works with
// (cpu-worker/include/sample.h, spec.h; tokenizer-svc/include/tokenizer.h). Types only,
// and a few inline sums: the clients link no engine and no tokenizer.
#ifndef AD_GEN_TYPES_H
#define AD_GEN_TYPES_H

#include <stddef.h>
#include <stdint.h>

// --- sampling (cpu-worker/include/sample.h) --------------------------------------------------

#define SAMPLE_MAX_BIAS 1024       // logit_bias entries
#define SAMPLE_MAX_TOP_LOGPROBS 20 // alternatives sample_logprobs reports

// one logit_bias entry: bias in [-100, 100], added to the token's logit
struct sample_bias {
	int32_t id;
	float bias;
};

// the fields of engine.proto's SamplingParams
struct sample_params {
	float temperature;       // 0: greedy
	int32_t top_k;           // 0: off
	float top_p;             // 1: off; (0, 1]
	float min_p;             // 0: off; [0, 1]
	float repeat_penalty;    // 1: off; > 0
	int32_t repeat_last_n;   // penalty window, prompt included; 0: none
	float presence_penalty;  // [-2, 2], 0: off
	float frequency_penalty; // [-2, 2], 0: off
	uint64_t seed;
	int has_seed;                   // 0: SAMPLE_DEFAULT_SEED
	const struct sample_bias *bias; // n_bias entries (step 0); sample_new copies them
	int n_bias;                     // [0, SAMPLE_MAX_BIAS]
};

// a candidate of sample_top
struct sample_tok {
	int32_t id;
	float logit;
};

// --- speculative decoding's counters (cpu-worker/include/spec.h) -----------------------------

#define SPEC_NGRAM_MAX 32 // the largest --ngram-max

// counters of a job (or of many, added up)
struct spec_stats {
	uint64_t steps;    // verify calls: steps that carried a draft
	uint64_t drafted;  // draft tokens fed
	uint64_t accepted; // draft tokens that were the sampled token
	uint64_t reached;  // draft tokens compared with a sample (accepted + rejected)
	uint64_t drafted_n[SPEC_NGRAM_MAX + 1], accepted_n[SPEC_NGRAM_MAX + 1]; // by the n of the match
	uint64_t reached_n[SPEC_NGRAM_MAX + 1];
};

// sum += st (inline: the frontend adds jobs' counters up and links no engine)
static inline void
spec_add(struct spec_stats *sum, const struct spec_stats *st)
{
	sum->steps += st->steps;
	sum->drafted += st->drafted;
	sum->accepted += st->accepted;
	sum->reached += st->reached;
	for (int i = 0; i <= SPEC_NGRAM_MAX; i++) {
		sum->drafted_n[i] += st->drafted_n[i];
		sum->accepted_n[i] += st->accepted_n[i];
		sum->reached_n[i] += st->reached_n[i];
	}
}

// --- a generation's timings (engine.proto's Timings) -----------------------------------------

// The one definition of a generation's stage times and counts: what the
// engine books (cpu-worker/include/engine.h), what the scheduler reports per job and
// the service sends as engine.proto's Timings, and what the clients read
// (proto/client-engine.h: the CLI, the frontend's results).
struct gen_timings {
	uint64_t queue_ns; // waiting for a slot (the scheduler's; 0 in the engine)
	uint64_t prefill_ns, decode_ns;
	uint64_t kernel_ns;    // inside the kernel backend
	uint64_t ipc_ns;       // kernel calls as the engine saw them, minus kernel_ns
	uint64_t attention_ns; // attention over the cache (RoPE and cache writes are "other")
	uint64_t moe_ns;       // router and routed experts
	uint64_t sampling_ns;
	uint64_t cpu_other_ns; // everything else: norms, RoPE, residuals, embeddings
	uint32_t prefill_tokens, decode_tokens;
	uint32_t cached_tokens; // prompt tokens not computed: the session's and the prefix cache's
	uint64_t kernel_calls;  // kernels run (not sent: 0 from a client)
	uint64_t round_trips;   // calls to the kernel backend, each of one or more kernels
	// the split of decode_ns alone: the stage times above include the
	// prefill's (a job's whole time), these only the decode steps'
	uint64_t dec_kernel_ns, dec_ipc_ns, dec_attention_ns, dec_moe_ns, dec_other_ns, dec_round_trips;
	// of dec_ipc_ns, on the data plane: requests posted -> taken by the
	// ane-worker, and replies written -> seen (the rest: the worker's own
	// steps between kernels, the caller's own)
	uint64_t dec_pickup_ns, dec_reply_ns;
	struct spec_stats spec; // the job's drafts (reached is not sent: 0 from a client)
};

// d = a + sign * b over the stage times and counts (sign 1 or -1); the
// cached tokens are a job's own, not a sum: d keeps a's (and a's drafts
// when subtracting). gen_timings_add and gen_timings_sub below.
static inline void
gen_timings_addsub(struct gen_timings *d, const struct gen_timings *a, const struct gen_timings *b, int sign)
{
	uint64_t m = sign < 0 ? (uint64_t)-1 : 1; // b * m wraps to -b
	struct gen_timings r = *a;
	r.queue_ns += b->queue_ns * m;
	r.prefill_ns += b->prefill_ns * m;
	r.decode_ns += b->decode_ns * m;
	r.kernel_ns += b->kernel_ns * m;
	r.ipc_ns += b->ipc_ns * m;
	r.attention_ns += b->attention_ns * m;
	r.moe_ns += b->moe_ns * m;
	r.sampling_ns += b->sampling_ns * m;
	r.cpu_other_ns += b->cpu_other_ns * m;
	r.prefill_tokens += b->prefill_tokens * (uint32_t)m;
	r.decode_tokens += b->decode_tokens * (uint32_t)m;
	r.kernel_calls += b->kernel_calls * m;
	r.round_trips += b->round_trips * m;
	r.dec_kernel_ns += b->dec_kernel_ns * m;
	r.dec_ipc_ns += b->dec_ipc_ns * m;
	r.dec_attention_ns += b->dec_attention_ns * m;
	r.dec_moe_ns += b->dec_moe_ns * m;
	r.dec_other_ns += b->dec_other_ns * m;
	r.dec_round_trips += b->dec_round_trips * m;
	r.dec_pickup_ns += b->dec_pickup_ns * m;
	r.dec_reply_ns += b->dec_reply_ns * m;
	if (sign > 0)
		spec_add(&r.spec, &b->spec);
	*d = r;
}

static inline void
gen_timings_add(struct gen_timings *d, const struct gen_timings *a, const struct gen_timings *b)
{
	gen_timings_addsub(d, a, b, 1);
}

static inline void
gen_timings_sub(struct gen_timings *d, const struct gen_timings *a, const struct gen_timings *b)
{
	gen_timings_addsub(d, a, b, -1);
}

// --- chat messages (tokenizer-svc/include/tokenizer.h) ------------------------------------------

enum tok_role { TOK_ROLE_SYSTEM, TOK_ROLE_USER, TOK_ROLE_ASSISTANT, TOK_ROLE_TOOL };

// one call an assistant turn made (proto/tokenizer.proto's ToolCall)
struct tok_call {
	const char *id;
	const char *name;
	const char *arguments; // the arguments as JSON text (an object)
};

struct tok_msg {
	enum tok_role role;
	const char *content;          // NUL-terminated
	const struct tok_call *calls; // assistant turns that called tools
	size_t n_calls;
	const char *call_id;   // tool turns: the call this result answers (NULL: none)
	const char *name;      // tool turns: the function's name (NULL: none)
	const char *reasoning; // assistant turns: the thinking kept in history (NULL: none)
};

// the name of the tool-call markup a conversation made plain is written in
// (tok_chat_tools_plain), as the tokenizer service reports it and the
// frontend parses replies by it
#define TOK_TOOL_FORMAT_GENERIC "generic"

#endif
