// bench-ref.c - speed of the fp32 reference engine on a written llama model.
//
//   bench-ref [n_embd n_layer n_ff n_vocab n_tokens]
//
// Prints engine creation time (dequantisation), per-token decode time and
// the weight bandwidth that implies. Built, not run by ctest.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "gguf.h"
#include "model.h"
#include "ref.h"
#include "wtype.h"

static double
now(void)
{
	return (double)ad_now_ns() / 1e9;
}

static int
tensor(struct gguf_writer *w, const char *name, int64_t ne0, int64_t ne1, float base)
{
	char err[AD_ERRLEN];
	size_t n = (size_t)(ne0 * ne1);
	float *d = malloc(n * sizeof *d);
	uint32_t r = 1;
	for (size_t i = 0; i < n; i++) {
		r = r * 1664525u + 1013904223u;
		d[i] = base + 0.05f * ((float)(r >> 8) / 16777216.0f - 0.5f);
	}
	int64_t ne[2] = {ne0, ne1};
	int rc = gguf_writer_tensor(w, name, AD_TYPE_F32, ne1 > 1 ? 2 : 1, ne, d, n * sizeof *d, err);
	if (rc)
		fprintf(stderr, "%s\n", err);
	free(d);
	return rc;
}

int
main(int argc, char **argv)
{
	int64_t E = 512, L = 8, FF = 1408, V = 8192, H = 8, KV = 4;
	int n_tok = 64;
	if (argc == 6) {
		E = atoll(argv[1]);
		L = atoll(argv[2]);
		FF = atoll(argv[3]);
		V = atoll(argv[4]);
		n_tok = atoi(argv[5]);
	}
	char path[512], name[96], err[AD_ERRLEN];
	const char *tmp = getenv("TMPDIR");
	snprintf(path, sizeof path, "%s/anedvd-bench-ref-%d.gguf", tmp ? tmp : "/tmp", (int)getpid());

	struct gguf_writer *w = gguf_writer_new();
	gguf_writer_str(w, "general.architecture", "llama");
	gguf_writer_u32(w, "llama.embedding_length", (uint32_t)E);
	gguf_writer_u32(w, "llama.block_count", (uint32_t)L);
	gguf_writer_u32(w, "llama.feed_forward_length", (uint32_t)FF);
	gguf_writer_u32(w, "llama.attention.head_count", (uint32_t)H);
	gguf_writer_u32(w, "llama.attention.head_count_kv", (uint32_t)KV);
	int rc = tensor(w, "token_embd.weight", E, V, 0) || tensor(w, "output_norm.weight", E, 1, 1) ||
	         tensor(w, "output.weight", E, V, 0);
	const int64_t hd = E / H;
	for (int il = 0; il < L && !rc; il++) {
#define T(what, a, b, base) (snprintf(name, sizeof name, "blk.%d." what, il), tensor(w, name, a, b, base))
		rc = T("attn_norm.weight", E, 1, 1) || T("attn_q.weight", E, E, 0) ||
		     T("attn_k.weight", E, KV * hd, 0) || T("attn_v.weight", E, KV * hd, 0) ||
		     T("attn_output.weight", E, E, 0) || T("ffn_norm.weight", E, 1, 1) ||
		     T("ffn_gate.weight", E, FF, 0) || T("ffn_up.weight", E, FF, 0) || T("ffn_down.weight", FF, E, 0);
#undef T
	}
	if (rc || gguf_writer_save(w, path, err)) {
		fprintf(stderr, "bench-ref: cannot write the model\n");
		return 1;
	}
	gguf_writer_free(w);

	struct model m;
	if (model_load(&m, path, err)) {
		fprintf(stderr, "bench-ref: %s\n", err);
		return 1;
	}
	double t0 = now();
	struct ref_engine *e = ref_new(&m, 2 * n_tok, err);
	double t_new = now() - t0;
	int64_t params = m.n_params;
	model_free(&m);
	unlink(path);
	if (!e) {
		fprintf(stderr, "bench-ref: %s\n", err);
		return 1;
	}
	float *lg = malloc((size_t)V * sizeof *lg);
	t0 = now();
	for (int i = 0; i < n_tok; i++)
		ref_forward(e, (int32_t)(i * 7 % V), i, lg);
	double t_first = now() - t0;
	t0 = now();
	for (int i = n_tok; i < 2 * n_tok; i++)
		ref_forward(e, ref_argmax(lg, (int)V), i, lg);
	double t_second = now() - t0;

	// every token reads every weight once (the embedding only one row)
	double bytes = (double)(params - E * V) * 4.0;
	printf("model: n_embd %lld, %lld layers, n_ff %lld, vocab %lld: %.1f M params, fp32 %.0f MiB\n", (long long)E,
	       (long long)L, (long long)FF, (long long)V, (double)params / 1e6, (double)ref_bytes(e) / (1 << 20));
	printf("ref_new (dequantise):   %.1f ms\n", t_new * 1e3);
	printf("positions 0..%d:        %.2f ms/token, %.1f tok/s, %.1f GB/s of weights\n", n_tok - 1,
	       t_first * 1e3 / n_tok, n_tok / t_first, bytes * n_tok / t_first / 1e9);
	printf("positions %d..%d:      %.2f ms/token, %.1f tok/s, %.1f GB/s of weights\n", n_tok, 2 * n_tok - 1,
	       t_second * 1e3 / n_tok, n_tok / t_second, bytes * n_tok / t_second / 1e9);
	free(lg);
	ref_free(e);
	return 0;
}
