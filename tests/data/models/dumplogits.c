// the logits of a GGUF under llama.cpp, as tests/data/models/README.md says
// M.logits.bin (f16 KV) and M.fp32ref.bin (f32 KV, an F32 file) were made:
//   dumplogits MODEL.gguf f16|f32 OUT.bin [GREEDY.json]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "llama.h"

static int
argmax(const float *v, int n)
{
	int b = 0;
	for (int i = 1; i < n; i++)
		if (v[i] > v[b])
			b = i;
	return b;
}

int
main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	const int prompt[] = {1, 403, 407, 261, 378, 432, 383, 286}, np = 8, ng = 16;
	llama_backend_init();
	struct llama_model_params mp = llama_model_default_params();
	mp.n_gpu_layers = 0;
	struct llama_model *m = llama_model_load_from_file(argv[1], mp);
	if (!m)
		return 1;
	struct llama_context_params cp = llama_context_default_params();
	cp.n_ctx = 512;
	cp.n_batch = 512;
	cp.n_ubatch = 512;
	cp.n_threads = 2;
	cp.n_threads_batch = 2;
	cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
	if (!strcmp(argv[2], "f32")) {
		cp.type_k = GGML_TYPE_F32;
		cp.type_v = GGML_TYPE_F32;
	}
	struct llama_context *c = llama_init_from_model(m, cp);
	if (!c)
		return 1;
	const int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
	float *rows = malloc((size_t)(np + ng) * nv * sizeof *rows);
	int greedy[16];
	struct llama_batch b = llama_batch_init(512, 0, 1);
	const char *force = argc > 4 ? argv[4] : NULL; // teacher-force these greedy ids (fp32ref)
	int forced[16], nf = 0;
	if (force) {
		FILE *f = fopen(force, "r");
		while (nf < 16 && fscanf(f, "%d", &forced[nf]) == 1)
			nf++;
		fclose(f);
	}
	if (force) {
		// one batch over prompt + greedy ids, logits everywhere (teacher forcing)
		b.n_tokens = np + ng;
		for (int i = 0; i < np + ng; i++) {
			b.token[i] = i < np ? prompt[i] : forced[i - np];
			b.pos[i] = i;
			b.n_seq_id[i] = 1;
			b.seq_id[i][0] = 0;
			b.logits[i] = 1;
		}
		if (llama_decode(c, b))
			return 1;
		for (int i = 0; i < np + ng; i++)
			memcpy(rows + (size_t)i * nv, llama_get_logits_ith(c, i), nv * sizeof(float));
		memcpy(greedy, forced, sizeof greedy);
	} else {
		b.n_tokens = np;
		for (int i = 0; i < np; i++) {
			b.token[i] = prompt[i];
			b.pos[i] = i;
			b.n_seq_id[i] = 1;
			b.seq_id[i][0] = 0;
			b.logits[i] = 1;
		}
		if (llama_decode(c, b))
			return 1;
		for (int i = 0; i < np; i++)
			memcpy(rows + (size_t)i * nv, llama_get_logits_ith(c, i), nv * sizeof(float));
		for (int k = 0; k < ng; k++) {
			greedy[k] = argmax(rows + (size_t)(np - 1 + k) * nv, nv);
			b.n_tokens = 1;
			b.token[0] = greedy[k];
			b.pos[0] = np + k;
			b.n_seq_id[0] = 1;
			b.seq_id[0][0] = 0;
			b.logits[0] = 1;
			if (llama_decode(c, b))
				return 1;
			memcpy(rows + (size_t)(np + k) * nv, llama_get_logits_ith(c, 0), nv * sizeof(float));
		}
	}
	FILE *o = fopen(argv[3], "wb");
	fwrite(rows, sizeof(float), (size_t)(np + ng) * nv, o);
	fclose(o);
	for (int k = 0; k < ng; k++)
		printf("%d%s", greedy[k], k + 1 < ng ? " " : "\n");
	return 0;
}
