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
// Weight types: f32, f16, bf16, q8_0 (norms and biases stay f32).
#ifndef AD_CMD_GENMODEL_H
#define AD_CMD_GENMODEL_H

#include <stdint.h>

#include "err.h"

struct genmodel {
	const char *preset; // see above
	const char *wtype;  // "f32", "f16", "bf16", "q8_0"
	uint64_t seed;
	int n_layer;        // 0: the preset's
};

int genmodel_write(const struct genmodel *g, const char *path, char *err);

#endif
