// ggml's IQ4_NL, IQ4_XS and MXFP4 of source.f32 and their dequantisation, as
// tests/data/dequant/README.md describes (built against a llama.cpp build).
#include <stdio.h>
#include <stdlib.h>
#include "ggml.h"
#include "ggml-cpu.h"

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : ".";
	char path[512];
	float src[4 * 512], out[4 * 512];
	snprintf(path, sizeof path, "%s/source.f32", dir);
	FILE *f = fopen(path, "rb");
	if (!f || fread(src, sizeof src, 1, f) != 1) {
		perror(path);
		return 1;
	}
	fclose(f);
	ggml_cpu_init();
	const enum ggml_type types[] = {GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_MXFP4};
	for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
		enum ggml_type ty = types[t];
		size_t row = ggml_row_size(ty, 512);
		void *q = malloc(4 * row);
		if (ggml_quantize_requires_imatrix(ty)) {
			fprintf(stderr, "%s needs an imatrix\n", ggml_type_name(ty));
			return 1;
		}
		size_t n = ggml_quantize_chunk(ty, src, q, 0, 4, 512, NULL);
		ggml_get_type_traits(ty)->to_float(q, out, 4 * 512);
		snprintf(path, sizeof path, "%s/%s.bin", dir, ggml_type_name(ty));
		f = fopen(path, "wb");
		fwrite(q, 1, n, f);
		fclose(f);
		snprintf(path, sizeof path, "%s/%s.f32", dir, ggml_type_name(ty));
		f = fopen(path, "wb");
		fwrite(out, sizeof out, 1, f);
		fclose(f);
		double mx = 0, ss = 0;
		for (int i = 0; i < 4 * 512; i++) {
			double d = out[i] - src[i];
			if (d < 0)
				d = -d;
			if (d > mx)
				mx = d;
			ss += d * d;
		}
		printf("%s: %zu bytes (%zu a row), max |deq - source| %.3g, rms %.3g\n", ggml_type_name(ty), n, row, mx,
		       __builtin_sqrt(ss / 2048));
		free(q);
	}
	return 0;
}
