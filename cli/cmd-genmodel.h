// cmd-genmodel.h - deterministic random models written with the GGUF writer.
//
// genmodel_write makes a GGUF file of a llama or qwen2 model with the exact
// shapes of a preset and random weights from seed (the same arguments give
// the same bytes). Weights are uniform with a spread of 1/sqrt(fan-in), so
// activations stay near unit size through any depth; norms are 1 +- 0.05.
// The vocabulary is a SentencePiece-style one (<unk>, <s>, </s>, 256 byte
// tokens, then pieces "w<i>") so the tokenizer service loads it; the
// preset's vocabulary size must be at least 259 + 1.
//
// Presets:  tiny          llama, n_embd 64, 2 layers, 4/2 heads, ff 128, vocab 320
//           smollm2-135m  llama, 576, 30 layers, 9/3 heads, ff 1536, vocab 49152, tied
//           qwen2.5-0.5b  qwen2, 896, 24 layers, 14/2 heads, ff 4864, vocab 151936, tied,
//                         q/k/v biases
//           think         the tiny shape, not random: a model that says the same
//                         thing every time, Qwen3 style. Its vocabulary adds ChatML's
//                         <|im_start|> and <|im_end|> (the end of a turn), <think>,
//                         </think>, <tool_call>, </tool_call> (as Qwen3 has them: the
//                         think tags decode as text) and the pieces "\n", "\n\n",
//                         "Let", " me", " think.", "Hello", "!". Its attention and FFN
//                         write nothing, so each next token depends on the last one
//                         only, by a table in its embeddings and output: after "\n"
//                         (the end of Qwen3's generation prompt) it writes
//                         "<think>Let me think.</think>\n\nHello!<|im_end|>", after
//                         "\n\n" (the end of the prompt with thinking off) only
//                         "Hello!<|im_end|>". The margin is ~80 logits, so any
//                         sampling settings give the same text.
// Weight types: f32, f16, bf16, q8_0, q4_0 (norms and biases stay f32).
//
// chat_template (may be NULL) is written as tokenizer.chat_template; eos
// (below) overrides the EOS and EOT ids.
#ifndef AD_CMD_GENMODEL_H
#define AD_CMD_GENMODEL_H

#include <stdint.h>

#include "err.h"

struct genmodel {
	const char *preset; // see above
	const char *wtype;  // "f32", "f16", "bf16", "q8_0"
	uint64_t seed;
	int n_layer;               // 0: the preset's
	const char *chat_template; // NULL: none
	// > 0: the EOS and EOT ids in the metadata (the preset's otherwise).
	// The think preset with eos 2 (</s>) still ends its reply with
	// <|im_end|>, which the tokenizer then counts as a further
	// end-of-generation id only, beyond EOS and EOT (as Qwen's and Llama
	// 3's GGUFs have theirs)
	int eos;
};

int genmodel_write(const struct genmodel *g, const char *path, char *err);

#endif
