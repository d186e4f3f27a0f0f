// gen-types.h - the plain C types of a generation that cross a process
// boundary: what a client of the cpu-worker or the tokenizer service hands
// to its library (proto/client-*.h) and what the service works with
// (cpu-worker/sample.h, spec.h; tokenizer-svc/tokenizer.h). Types only,
// and one inline sum: the clients link no engine and no tokenizer.
#ifndef AD_GEN_TYPES_H
#define AD_GEN_TYPES_H

#include <stddef.h>
#include <stdint.h>

// --- sampling (cpu-worker/sample.h) ----------------------------------------------------------

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

// --- speculative decoding's counters (cpu-worker/spec.h) -------------------------------------

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

// --- chat messages (tokenizer-svc/tokenizer.h) -----------------------------------------------

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

#endif
