// cmd-cpu.c - `anedvd cpu` (greedy generation with the reference engine),
// `anedvd route` (which experts a MoE model's layers pick for a prompt) and
// `anedvd info` (what this build has, what a model is).
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "clock.h"
#include "cmd-common.h"
#include "fp16.h"
#include "gguf.h"
#include "emu.h"
#include "model.h"
#include "plan.h"
#include "prefix-cache.h"
#ifdef ANEDVD_ANE
#include "backend-ane.h"
#include "build.h"
#endif
#include "ref.h"
#include "scheduler.h"
#include "wtype.h"
#ifdef AD_HAVE_TOKENIZER
#include "tokenizer.h"
#include "unicode.h"
#endif

int cmd_cpu(int argc, char **argv); // cli/commands.h
int cmd_info(int argc, char **argv);
int cmd_route(int argc, char **argv);

// --- helpers -----------------------------------------------------------------

static double
now_ms(void)
{
	return (double)ad_now_ns() / 1e6;
}

static long long
peak_rss_bytes(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return -1;
#ifdef __APPLE__
	return (long long)ru.ru_maxrss; // bytes
#else
	return (long long)ru.ru_maxrss * 1024; // KiB
#endif
}

// top k ids by logit, highest first, lowest id first on ties
static void
top_k(const float *logits, int n, int k, int *ids)
{
	for (int c = 0; c < k; c++) {
		int best = -1;
		for (int i = 0; i < n; i++) {
			int taken = 0;
			for (int t = 0; t < c; t++)
				taken |= ids[t] == i;
			if (!taken && (best < 0 || logits[i] > logits[best]))
				best = i;
		}
		ids[c] = best;
	}
}

// --- anedvd cpu ----------------------------------------------------------------

static void
cpu_usage(int full)
{
	cli_usage("cpu", full,
	          "--model M (--prompt-ids 1,2,3 | --prompt TEXT) [options]\n"
	          "  greedy generation with the fp32 reference engine\n"
	          "  --model M           a GGUF file or a Hugging Face directory\n" CLI_SHORT_FLAGS
	          "  --prompt-ids LIST   comma-separated token ids (nothing is added)\n"
	          "  --prompt TEXT       text, tokenized with the model's tokenizer (BOS per the model)\n"
	          "  --chat              wrap --prompt in the model's chat template (a user turn and the\n"
	          "                      assistant's opening), as run and chat do; --system TEXT adds one\n"
	          "  --max-tokens N      tokens to generate (default 32)\n"
	          "  --max-seq N         KV cache size in positions (default prompt + max-tokens)\n"
	          "  --ignore-eos        do not stop at the end-of-sequence token\n"
	          "  --json              print one JSON object instead of text\n"
	          "  --verbose           print the top-5 candidates of every step\n"
	          "  --dump-logits FILE  write float32 logits of every position of prompt + generated\n"
	          "                      ids, teacher-forced: rows of n_vocab\n"
	          "  --rope-hf           force neox RoPE pairing (i, i+n_rot/2)\n"
	          "  --rope-adjacent     force norm RoPE pairing (2i, 2i+1)\n"
	          "  --arch NAME         run a GGUF file as architecture NAME whatever it says\n");
}

struct cpu_opts {
	const char *model, *prompt, *prompt_ids, *dump, *system;
	int max_tokens, max_seq;
	int json, ignore_eos, verbose, chat;
	enum model_rope rope;
};

static int
cpu_args(int argc, char **argv, struct cpu_opts *o)
{
	memset(o, 0, sizeof *o);
	o->max_tokens = 32;
	o->max_seq = -1;
	const struct cli_plain plain[] = {
		{.flag = "--model", .val = &o->model},
		{.flag = "--prompt", .val = &o->prompt},
		{.flag = "--prompt-ids", .val = &o->prompt_ids},
		{.flag = "--system", .val = &o->system},
		{.flag = "--dump-logits", .val = &o->dump},
		{.flag = "--max-tokens", .num = &o->max_tokens, .lo = 0, .hi = 1 << 20},
		{.flag = "--max-seq", .num = &o->max_seq, .lo = 1, .hi = 1 << 24},
		{.flag = "--chat", .on = &o->chat},
		{.flag = "--json", .on = &o->json},
		{.flag = "--verbose", .on = &o->verbose},
		{.flag = "--ignore-eos", .on = &o->ignore_eos},
		{0},
	};
	for (int i = 1; i < argc; i++) {
		char *const a = argv[i]; // as given: a short flag is offered as its long one
		const char *lf = cli_long_flag(a);
		if (lf)
			argv[i] = (char *)lf;
		int r = cli_plain_flag("cpu", plain, argc, argv, &i);
		if (r == 0)
			r = cli_model_flag("cpu", &o->rope, argc, argv, &i);
		if (r == 0)
			return cli_help_or_unknown("cpu", a);
		if (r < 0)
			return -1;
	}
	if (!o->model) {
		fprintf(stderr, "anedvd cpu: --model is required\n");
		return -1;
	}
	if (!o->prompt == !o->prompt_ids) {
		fprintf(stderr, "anedvd cpu: give exactly one of --prompt-ids and --prompt\n");
		return -1;
	}
	if ((o->chat || o->system) && !o->prompt) {
		fprintf(stderr, "anedvd cpu: --chat and --system go with --prompt (ids are used as they are)\n");
		return -1;
	}
	if (o->system && !o->chat) {
		fprintf(stderr, "anedvd cpu: --system needs --chat\n");
		return -1;
	}
	return 0;
}

#ifdef AD_HAVE_TOKENIZER
// the text of ids that continue earlier text (malloc'd; NULL on failure)
static char *
stream_text(const struct tokenizer *tok, const int32_t *ids, int n)
{
	struct tok_stream st;
	tok_stream_init(&st, tok);
	size_t len = 0, cap = 256;
	char *out = malloc(cap);
	for (int i = 0; out && i <= n; i++) {
		size_t k = 0;
		const char *p = i < n ? tok_stream_push(&st, ids[i], &k, NULL) : tok_stream_flush(&st, &k);
		if (!p) {
			free(out);
			out = NULL;
			break;
		}
		if (len + k + 1 > cap) {
			while (len + k + 1 > cap)
				cap *= 2;
			char *b = realloc(out, cap);
			if (!b) {
				free(out);
				out = NULL;
				break;
			}
			out = b;
		}
		memcpy(out + len, p, k);
		len += k;
	}
	if (out)
		out[len] = 0;
	tok_stream_free(&st);
	return out;
}
#endif

int
cmd_cpu(int argc, char **argv)
{
	struct cpu_opts o;
	int rc = cpu_args(argc, argv, &o);
	if (rc) {
		cpu_usage(rc > 0);
		return rc > 0 ? 0 : 2;
	}

	char err[AD_ERRLEN];
	struct model m;
	struct ref_engine *e = NULL;
	int32_t *ids = NULL;
	float *logits = NULL, *top_logit = NULL;
	int *top_id = NULL;
	char *text = NULL, *prompt_text = NULL;
	int status = 1, n_prompt = 0;
#ifdef AD_HAVE_TOKENIZER
	struct tokenizer *tok = NULL;
#endif

	if (o.prompt_ids && cli_ids("cpu", "--prompt-ids", o.prompt_ids, &ids, &n_prompt)) {
		cpu_usage(0);
		return 2;
	}
	if (model_load(&m, o.model, err)) {
		fprintf(stderr, "anedvd cpu: %s\n", err);
		free(ids);
		return 1;
	}
	if (o.rope)
		m.hp.rope = o.rope;

#ifdef AD_HAVE_TOKENIZER
	tok = m.gguf ? tok_load_gguf(m.gguf, err) : tok_load(o.model, err);
	if (!tok && o.prompt) {
		fprintf(stderr, "anedvd cpu: --prompt needs the model's tokenizer: %s\n", err);
		goto out;
	}
	if (o.prompt) {
		size_t n = 0;
		char *chat = NULL;
		if (o.chat) {
			struct tok_msg msgs[2];
			size_t nm = 0;
			if (o.system)
				msgs[nm++] = (struct tok_msg){.role = TOK_ROLE_SYSTEM, .content = o.system};
			msgs[nm++] = (struct tok_msg){.role = TOK_ROLE_USER, .content = o.prompt};
			struct tok_chat_opts co = {.enable_thinking = -1};
			const char *how;
			if (tok_chat_render(tok, msgs, nm, 1, &co, &chat, &how, err)) {
				fprintf(stderr, "anedvd cpu: the chat template: %s\n", err);
				goto out;
			}
			if (!o.json)
				printf("chat template (%s): %s\n", how, chat);
		}
		// a rendered template holds special tokens as text
		int erc = chat ? tok_encode(tok, chat, strlen(chat), -1, 1, &ids, &n, err)
		               : tok_encode(tok, o.prompt, strlen(o.prompt), -1, 0, &ids, &n, err);
		free(chat);
		if (erc) {
			fprintf(stderr, "anedvd cpu: tokenizing the prompt: %s\n", err);
			goto out;
		}
		n_prompt = (int)n;
	}
#else
	if (o.prompt) {
		fprintf(stderr, "anedvd cpu: --prompt needs the tokenizer, which this build does not have; "
		                "use --prompt-ids\n");
		status = 2;
		goto out;
	}
#endif
	if (n_prompt == 0) {
		fprintf(stderr, "anedvd cpu: the prompt is empty\n");
		status = 2;
		goto out;
	}
	for (int i = 0; i < n_prompt; i++)
		if (ids[i] >= m.hp.n_vocab) {
			fprintf(stderr, "anedvd cpu: --prompt-ids: token id %d is outside the vocabulary (%lld ids)\n",
			        ids[i], (long long)m.hp.n_vocab);
			status = 2;
			goto out;
		}

	long long need = n_prompt + (long long)o.max_tokens;
	long long max_seq = o.max_seq > 0 ? o.max_seq : need;
	if (max_seq < need) {
		fprintf(stderr, "anedvd cpu: --max-seq %lld is smaller than prompt (%d) + --max-tokens (%d)\n", max_seq,
		        n_prompt, o.max_tokens);
		status = 2;
		goto out;
	}
	int32_t *grown = realloc(ids, (size_t)need * sizeof *ids);
	if (!grown) {
		fprintf(stderr, "anedvd cpu: out of memory\n");
		goto out;
	}
	ids = grown;

	e = ref_new(&m, (int)max_seq, err);
	if (!e) {
		fprintf(stderr, "anedvd cpu: %s\n", err);
		goto out;
	}
	const int nv = ref_n_vocab(e);
	const int K = nv < 5 ? nv : 5;
	logits = malloc((size_t)nv * sizeof *logits);
	top_id = malloc((size_t)(o.max_tokens + 1) * (size_t)K * sizeof *top_id);
	top_logit = malloc((size_t)(o.max_tokens + 1) * (size_t)K * sizeof *top_logit);
	if (!logits || !top_id || !top_logit) {
		fprintf(stderr, "anedvd cpu: out of memory\n");
		goto out;
	}

	// prefill
	double t0 = now_ms();
	for (int i = 0; i < n_prompt; i++)
		if (ref_forward(e, ids[i], i, logits)) {
			fprintf(stderr, "anedvd cpu: forward failed at position %d\n", i);
			goto out;
		}
	double t_prefill = now_ms() - t0;

	// greedy decode
	int n_gen = 0, n_decoded = 0;
	t0 = now_ms();
	while (n_gen < o.max_tokens) {
		int *ti = top_id + (size_t)n_gen * K;
		top_k(logits, nv, K, ti);
		for (int c = 0; c < K; c++)
			top_logit[(size_t)n_gen * K + c] = logits[ti[c]];
		int32_t next = ti[0];
		ids[n_prompt + n_gen++] = next;
		// the tokenizer's end-of-generation ids (the model's EOS without one)
		int end = next == m.hp.eos_id;
#ifdef AD_HAVE_TOKENIZER
		if (tok)
			end = tok_is_eog(tok, next);
#endif
		if (!o.ignore_eos && end)
			break;
		if (n_gen == o.max_tokens)
			break;
		if (ref_forward(e, next, n_prompt + n_gen - 1, logits)) {
			fprintf(stderr, "anedvd cpu: forward failed at position %d\n", n_prompt + n_gen - 1);
			goto out;
		}
		n_decoded++;
	}
	double t_decode = now_ms() - t0;

	if (o.dump) {
		int rows = n_prompt + n_gen;
		float *all = malloc((size_t)rows * (size_t)nv * sizeof *all);
		FILE *f = NULL;
		if (!all || ref_eval(e, ids, rows, all) || !(f = fopen(o.dump, "wb")) ||
		    fwrite(all, sizeof *all, (size_t)rows * (size_t)nv, f) != (size_t)rows * (size_t)nv) {
			fprintf(stderr, "anedvd cpu: --dump-logits %s: cannot write\n", o.dump);
			if (f)
				fclose(f);
			free(all);
			goto out;
		}
		free(all);
		if (fclose(f)) {
			fprintf(stderr, "anedvd cpu: --dump-logits %s: cannot write\n", o.dump);
			goto out;
		}
	}

#ifdef AD_HAVE_TOKENIZER
	if (tok) {
		// the generated ids continue the prompt: stream-decode them so that
		// a leading space is kept (tok_decode would treat them as a start)
		text = stream_text(tok, ids + n_prompt, n_gen);
		size_t len;
		if (tok_decode(tok, ids, (size_t)n_prompt, &prompt_text, &len, err))
			prompt_text = NULL;
	}
#endif

	double pf_tps = t_prefill > 0 ? n_prompt / (t_prefill / 1e3) : 0;
	double dec_tps = t_decode > 0 ? n_decoded / (t_decode / 1e3) : 0;
	long long rss = peak_rss_bytes();
	if (o.json) {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "model", o.model);
		cJSON_AddStringToObject(j, "arch", model_arch_name(m.arch));
		cJSON_AddItemToObject(j, "prompt_ids", cli_json_ids(ids, n_prompt));
		cJSON_AddItemToObject(j, "generated_ids", cli_json_ids(ids + n_prompt, n_gen));
		// a reply cut inside a character (or a model emitting stray bytes)
		// must still be valid JSON: invalid sequences become U+FFFD
		char *stext = text ? unicode_sanitize(text, strlen(text), NULL) : NULL;
		char *sprompt = prompt_text ? unicode_sanitize(prompt_text, strlen(prompt_text), NULL) : NULL;
		if (stext)
			cJSON_AddStringToObject(j, "text", stext);
		if (sprompt)
			cJSON_AddStringToObject(j, "prompt_text", sprompt);
		free(stext);
		free(sprompt);
		cJSON *steps = cJSON_CreateArray();
		for (int s = 0; s < n_gen; s++) {
			cJSON *st = cJSON_CreateArray();
			for (int c = 0; c < K; c++) {
				cJSON *t = cJSON_CreateObject();
				cJSON_AddNumberToObject(t, "id", top_id[(size_t)s * K + c]);
				cJSON_AddNumberToObject(t, "logit", top_logit[(size_t)s * K + c]);
				cJSON_AddItemToArray(st, t);
			}
			cJSON_AddItemToArray(steps, st);
		}
		cJSON_AddItemToObject(j, "top5", steps);
		cJSON *tm = cJSON_CreateObject();
		cJSON_AddNumberToObject(tm, "prefill_tokens", n_prompt);
		cJSON_AddNumberToObject(tm, "prefill_ms", t_prefill);
		cJSON_AddNumberToObject(tm, "prefill_tok_s", pf_tps);
		cJSON_AddNumberToObject(tm, "decode_tokens", n_decoded);
		cJSON_AddNumberToObject(tm, "decode_ms", t_decode);
		cJSON_AddNumberToObject(tm, "decode_tok_s", dec_tps);
		cJSON_AddNumberToObject(tm, "peak_rss_bytes", (double)rss);
		cJSON_AddItemToObject(j, "timings", tm);
		char *s = cJSON_PrintUnformatted(j);
		if (s)
			printf("%s\n", s);
		free(s);
		cJSON_Delete(j);
	} else {
		printf("model: %s (%s, %lld layers, n_embd %lld, RoPE %s)\n", o.model, model_arch_name(m.arch),
		       (long long)m.hp.n_layer, (long long)m.hp.n_embd, model_rope_name(m.hp.rope));
		printf("prompt (%d tokens):", n_prompt);
		for (int i = 0; i < n_prompt; i++)
			printf(" %d", ids[i]);
		printf("\n");
		if (n_gen > 0) {
			printf("top-5 next after the prompt:");
			for (int c = 0; c < K; c++)
				printf(" %d (%.4f)", top_id[c], top_logit[c]);
			printf("\n");
		}
		if (o.verbose)
			for (int s = 0; s < n_gen; s++) {
				printf("step %3d: %6d   top5:", s, ids[n_prompt + s]);
				for (int c = 0; c < K; c++)
					printf(" %d (%.4f)", top_id[(size_t)s * K + c], top_logit[(size_t)s * K + c]);
				printf("\n");
			}
		if (text)
			printf("---\n%s%s\n---\n", prompt_text ? prompt_text : "", text);
		printf("generated ids:");
		for (int i = 0; i < n_gen; i++)
			printf(" %d", ids[n_prompt + i]);
		printf("\n");
		printf("prefill: %d tokens in %.2f ms (%.1f tok/s)\n", n_prompt, t_prefill, pf_tps);
		printf("decode: %d tokens in %.2f ms (%.1f tok/s)\n", n_decoded, t_decode, dec_tps);
		printf("peak rss: %.1f MiB\n", (double)rss / (1024.0 * 1024.0));
	}
	status = 0;
out:
	free(text);
	free(prompt_text);
	free(logits);
	free(top_id);
	free(top_logit);
	free(ids);
	ref_free(e);
#ifdef AD_HAVE_TOKENIZER
	tok_free(tok);
#endif
	model_free(&m);
	return status;
}

// --- anedvd route ----------------------------------------------------------------

static void
route_usage(int full)
{
	cli_usage("route", full,
	          "--model M (--prompt-ids 1,2,3 | --prompt TEXT) [options]\n"
	          "  per-layer expert-use histogram of a MoE model (qwen2moe, qwen3moe, lfm2moe), from the\n"
	          "  fp32 reference engine: how many of the tokens fed each layer routed to each expert\n"
	          "  --model M           a .gguf file or a Hugging Face directory\n"
	          "  --prompt-ids LIST   comma-separated token ids (nothing is added)\n"
	          "  --prompt TEXT       text, tokenized with the model's tokenizer (BOS per the model)\n"
	          "  --max-tokens N      also generate N tokens greedily and count them (default 0)\n"
	          "  --json              print one JSON object instead of the table\n"
	          "  --arch NAME         run a GGUF file as architecture NAME whatever it says\n");
}

int
cmd_route(int argc, char **argv)
{
	const char *model = NULL, *prompt = NULL, *prompt_ids = NULL, *v;
	int max_tokens = 0, json = 0, rc = 0;
	const struct cli_plain plain[] = {
		{.flag = "--model", .val = &model},
		{.flag = "--prompt", .val = &prompt},
		{.flag = "--prompt-ids", .val = &prompt_ids},
		{.flag = "--max-tokens", .num = &max_tokens, .lo = 0, .hi = 1 << 20},
		{.flag = "--json", .on = &json},
		{0},
	};
	for (int i = 1; i < argc && !rc; i++) {
		int r = cli_plain_flag("route", plain, argc, argv, &i);
		if (r == 0 && !strcmp(argv[i], "--arch"))
			r = (v = cli_val("route", argc, argv, &i)) && !cli_arch("route", v) ? 1 : -1;
		rc = r > 0 ? 0 : r < 0 ? -1 : cli_help_or_unknown("route", argv[i]);
	}
	if (!rc && (!model || !prompt == !prompt_ids)) {
		fprintf(stderr, "anedvd route: %s\n",
		        !model ? "--model is required" : "give exactly one of --prompt-ids and --prompt");
		rc = -1;
	}
	if (rc) {
		route_usage(rc > 0);
		return rc > 0 ? 0 : 2;
	}

	char err[AD_ERRLEN];
	struct model m;
	struct ref_engine *e = NULL;
	int32_t *ids = NULL;
	int64_t *hist = NULL;
	float *logits = NULL;
	int n_prompt = 0, status = 1;
	if (prompt_ids && cli_ids("route", "--prompt-ids", prompt_ids, &ids, &n_prompt)) {
		route_usage(0);
		return 2;
	}
	if (model_load(&m, model, err)) {
		fprintf(stderr, "anedvd route: %s\n", err);
		free(ids);
		return 1;
	}
	const struct model_hparams *hp = &m.hp;
	if (hp->n_expert <= 0) {
		fprintf(stderr,
		        "anedvd route: %s is %s, which has no routed experts (route is for MoE models: "
		        "qwen2moe, qwen3moe, lfm2moe)\n",
		        model, model_arch_name(m.arch));
		goto out;
	}
	if (prompt) {
#ifdef AD_HAVE_TOKENIZER
		struct tokenizer *tok = m.gguf ? tok_load_gguf(m.gguf, err) : tok_load(model, err);
		size_t n = 0;
		if (!tok || tok_encode(tok, prompt, strlen(prompt), -1, 0, &ids, &n, err)) {
			fprintf(stderr, "anedvd route: --prompt needs the model's tokenizer: %s\n", err);
			tok_free(tok);
			goto out;
		}
		tok_free(tok);
		n_prompt = (int)n;
#else
		fprintf(stderr, "anedvd route: --prompt needs the tokenizer, which this build does not have; "
		                "use --prompt-ids\n");
		status = 2;
		goto out;
#endif
	}
	if (n_prompt == 0) {
		fprintf(stderr, "anedvd route: the prompt is empty\n");
		status = 2;
		goto out;
	}
	for (int i = 0; i < n_prompt; i++)
		if (ids[i] >= hp->n_vocab) {
			fprintf(stderr,
			        "anedvd route: --prompt-ids: token id %d is outside the vocabulary (%lld ids)\n",
			        ids[i], (long long)hp->n_vocab);
			status = 2;
			goto out;
		}
	const int n_max = n_prompt + max_tokens;
	int32_t *grown = realloc(ids, (size_t)n_max * sizeof *ids);
	hist = calloc((size_t)(hp->n_layer * hp->n_expert), sizeof *hist);
	logits = malloc((size_t)hp->n_vocab * sizeof *logits);
	if (!grown || !hist || !logits) {
		free(grown ? NULL : ids);
		ids = grown;
		fprintf(stderr, "anedvd route: out of memory\n");
		goto out;
	}
	ids = grown;
	if (!(e = ref_new(&m, n_max, err))) {
		fprintf(stderr, "anedvd route: %s\n", err);
		goto out;
	}
	ref_route_hist(e, hist);
	// the prompt, then greedy tokens, each fed but the last (as in `cpu`)
	int fed = 0, n = n_prompt;
	for (; fed < n; fed++) {
		if (ref_forward(e, ids[fed], fed, logits)) {
			fprintf(stderr, "anedvd route: forward failed at position %d\n", fed);
			goto out;
		}
		if (fed == n - 1 && n < n_max) {
			ids[n++] = ref_argmax(logits, (int)hp->n_vocab);
			if (n == n_max) {
				fed++;
				break;
			}
		}
	}

	const int64_t ne = hp->n_expert;
	if (json) {
		cJSON *j = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "model", model);
		cJSON_AddStringToObject(j, "arch", model_arch_name(m.arch));
		cJSON_AddNumberToObject(j, "n_expert", (double)ne);
		cJSON_AddNumberToObject(j, "n_expert_used", (double)hp->n_expert_used);
		cJSON_AddItemToObject(j, "prompt_ids", cli_json_ids(ids, n_prompt));
		cJSON_AddItemToObject(j, "generated_ids", cli_json_ids(ids + n_prompt, n - n_prompt));
		cJSON_AddNumberToObject(j, "tokens", fed);
		cJSON *layers = cJSON_CreateArray();
		for (int il = 0; il < hp->n_layer; il++) {
			if (!m.layers[il].gate_inp.name)
				continue;
			cJSON *l = cJSON_CreateObject();
			cJSON_AddNumberToObject(l, "layer", il);
			cJSON *c = cJSON_CreateArray();
			for (int64_t x = 0; x < ne; x++)
				cJSON_AddItemToArray(c, cJSON_CreateNumber((double)hist[il * ne + x]));
			cJSON_AddItemToObject(l, "counts", c);
			cJSON_AddItemToArray(layers, l);
		}
		cJSON_AddItemToObject(j, "layers", layers);
		char *str = cJSON_PrintUnformatted(j);
		if (str)
			printf("%s\n", str);
		free(str);
		cJSON_Delete(j);
	} else {
		printf("model: %s (%s, %lld experts, %lld per token%s)\n", model, model_arch_name(m.arch),
		       (long long)ne, (long long)hp->n_expert_used,
		       hp->expert_gating == 2 ? ", sigmoid router with selection bias" : ", softmax router");
		printf("tokens routed: %d (%d of the prompt, %d generated)\n", fed, n_prompt < fed ? n_prompt : fed,
		       fed > n_prompt ? fed - n_prompt : 0);
		printf("layer  tokens per expert (0 .. %lld)   experts used, the busiest's and the idlest's share\n",
		       (long long)ne - 1);
		for (int il = 0; il < hp->n_layer; il++) {
			if (!m.layers[il].gate_inp.name)
				continue;
			const int64_t *h = hist + il * ne;
			int64_t mx = 0, mn = -1, used = 0;
			printf("%5d ", il);
			for (int64_t x = 0; x < ne; x++) {
				printf(" %lld", (long long)h[x]);
				used += h[x] > 0;
				mx = h[x] > mx ? h[x] : mx;
				mn = mn < 0 || h[x] < mn ? h[x] : mn;
			}
			printf("   %lld/%lld  %.0f%%  %.0f%%\n", (long long)used, (long long)ne,
			       100.0 * (double)mx / fed, 100.0 * (double)mn / fed);
		}
	}
	status = 0;
out:
	free(ids);
	free(hist);
	free(logits);
	ref_free(e);
	model_free(&m);
	return status;
}

// --- anedvd info -----------------------------------------------------------------

#ifdef ANEDVD_ANE
// the ane backend's state: the private framework and its classes, whether
// a program compiles and runs (a 64 x 64 probe projection), the budget
static void
ane_info(void)
{
	char err[AD_ERRLEN];
	printf("        %s\n", ane_dev_describe());
	if (ane_dev_init(err)) {
		printf("        reachable: no (%s)\n", err);
	} else {
		struct ane_build_opts bo = {.backend = "ane"};
		struct ane_builder *b = ane_builder_new(&bo, err);
		struct ane_kernel k;
		memset(&k, 0, sizeof k);
		uint64_t t0 = ad_now_ns();
		int ok = b && ane_build_probe(b, 64, 1, 1234, &k, err) == 0;
		double ms = (double)(ad_now_ns() - t0) / 1e6;
		if (ok) {
			void *in = calloc(1, ane_kernel_input_capacity(&k)),
			     *out = calloc(1, ane_kernel_output_capacity(&k));
			ok = in && out && ane_eval(&k, in, out, 1, err) == 0;
			free(in);
			free(out);
		}
		if (ok)
			printf("        reachable: yes (a 64 x 64 probe compiled and loaded in %.1f ms and ran)\n", ms);
		else
			printf("        reachable: no (%s)\n", err);
		ane_kernel_free(&k);
		ane_builder_free(b);
	}
	printf("        compile budget: %d programs per process (the ane-worker warns at %d; the kernel cache\n"
	       "        loads compiled programs without spending it)\n",
	       ANE_COMPILE_BUDGET, ANE_COMPILE_WARN);
}
#endif

static void
info_usage(FILE *out)
{
	fprintf(out, "usage: anedvd info [--model M] [--arch NAME]\n"
	             "  what this build can run, and the shape and size of a model\n"
	             "  --arch NAME   run a GGUF file as architecture NAME whatever it says (a warning\n"
	             "                names both); without it an architecture anedvd lacks is refused\n");
}

static void
print_bytes(const char *what, double b)
{
	if (b >= 1024.0 * 1024 * 1024)
		printf("  %-26s %.2f GiB\n", what, b / (1024.0 * 1024 * 1024));
	else
		printf("  %-26s %.2f MiB\n", what, b / (1024.0 * 1024));
}

int
cmd_info(int argc, char **argv)
{
	const char *path = NULL;
	for (int i = 1; i < argc; i++) {
		if ((!strcmp(argv[i], "--model") || !strcmp(argv[i], "-m")) && i + 1 < argc) {
			path = argv[++i];
		} else if (!strcmp(argv[i], "--arch")) {
			if (!cli_val("info", argc, argv, &i) || cli_arch("info", argv[i]))
				return 2;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			info_usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "anedvd info: %s argument '%s'\n",
			        !strcmp(argv[i], "--model") ? "missing value for" : "unknown", argv[i]);
			info_usage(stderr);
			return 2;
		}
	}

	printf("anedvd %s\n", ANEDVD_VERSION);
	printf("backends:\n");
	printf("  cpu   fp32 reference engine: yes\n");
	// the path the emu picks from this CPU for fp16 and int8 kernels alike
	// (emu_cpu_simd), capped by ANEDVD_SIMD as emu_open caps it
	int simd = emu_cpu_simd(), cap;
	char serr[AD_ERRLEN];
	const char *capped = "";
	if (emu_simd_env(&cap, serr) != 0)
		capped = " (ANEDVD_SIMD is not ref, avx2 or avx512: the emu will refuse to start)";
	else if (cap != EMU_SIMD_AUTO && cap < simd) {
		simd = cap;
		capped = " (capped by ANEDVD_SIMD)";
	}
	printf("  emu   the ANE programs executed on the CPU: yes (kernels picked at run time: %s%s)\n",
	       simd == EMU_SIMD_AVX512 ? "AVX-512"
	       : simd == EMU_SIMD_AVX2 ? "AVX2/FMA/F16C"
	                               : "plain C",
	       capped);
#ifdef ANEDVD_ANE
	printf("  ane   Apple Neural Engine: built in (anedvd-ane-worker --backend ane)\n");
	ane_info();
#else
	printf("  ane   Apple Neural Engine: not in this build (macOS on Apple silicon, -DANEDVD_ANE=ON)\n");
#endif
	if (!path)
		return 0;

	char err[AD_ERRLEN];
	struct model m;
	if (model_load(&m, path, err)) {
		fprintf(stderr, "anedvd info: %s\n", err);
		return 1;
	}
	const struct model_hparams *hp = &m.hp;
	printf("model: %s\n", path);
	printf("  name                       %s\n", m.name);
	if (strcmp(m.arch_name, model_arch_name(m.arch)))
		printf("  architecture               %s (file says '%s')\n", model_arch_name(m.arch), m.arch_name);
	else
		printf("  architecture               %s\n", model_arch_name(m.arch));
	printf("  vocabulary                 %lld\n", (long long)hp->n_vocab);
	printf("  embedding                  %lld\n", (long long)hp->n_embd);
	printf("  layers                     %lld\n", (long long)hp->n_layer);
	printf("  heads / kv heads           %lld / %lld\n", (long long)hp->n_head, (long long)hp->n_head_kv);
	printf("  head size (k / v)          %lld / %lld\n", (long long)hp->head_dim, (long long)hp->head_dim_v);
	int n_conv = 0;
	for (int il = 0; il < hp->n_layer; il++)
		n_conv += m.layers[il].conv;
	if (n_conv) {
		// lfm2: which blocks are ShortConv and which attention
		printf("  ShortConv blocks           %d of %lld (%lld taps, the conv and its state on the CPU):",
		       n_conv, (long long)hp->n_layer, (long long)hp->n_conv);
		for (int il = 0, any = 0; il < hp->n_layer; il++)
			if (m.layers[il].conv)
				printf("%s%d", any++ ? "," : " ", il);
		printf("; attention on");
		for (int il = 0, any = 0; il < hp->n_layer; il++)
			if (!m.layers[il].conv)
				printf("%s%d", any++ ? "," : " ", il);
		printf("\n");
	}
	int n_recur = 0;
	for (int il = 0; il < hp->n_layer; il++)
		n_recur += m.layers[il].recur;
	if (n_recur) {
		// qwen35: which blocks are gated delta-nets, which attend
		printf("  gated delta-net blocks     %d of %lld:", n_recur, (long long)hp->n_layer);
		for (int il = 0, any = 0; il < hp->n_layer; il++)
			if (m.layers[il].recur)
				printf("%s%d", any++ ? "," : " ", il);
		printf("; attention on");
		for (int il = 0, any = 0; il < hp->n_layer; il++)
			if (!m.layers[il].recur)
				printf("%s%d", any++ ? "," : " ", il);
		printf("\n");
		printf("  delta-net shape            heads of %lld: %lld q/k, %lld v (v head j reads q/k head j mod %lld); "
		       "conv %lld taps over %lld channels\n",
		       (long long)hp->ssm_d_state, (long long)hp->ssm_n_group, (long long)hp->ssm_dt_rank,
		       (long long)hp->ssm_n_group, (long long)hp->n_conv,
		       (long long)((2 * hp->ssm_n_group + hp->ssm_dt_rank) * hp->ssm_d_state));
		printf("  delta-net on the CPU       the conv, L2 norms, the gated delta rule and its state; "
		       "the projections are kernels\n");
		printf("  attention output gate      sigmoid, per head and element (q rows interleaved with gate rows)\n");
	}
	if (hp->n_expert) {
		printf("  experts                    %lld, %lld used, size %lld, shared %lld%s%s\n",
		       (long long)hp->n_expert, (long long)hp->n_expert_used, (long long)hp->n_ff_exp,
		       (long long)hp->n_ff_shexp, hp->expert_weights_norm ? ", renormalised" : "",
		       hp->expert_gating == 2 ? ", sigmoid router" : ", softmax router");
		if (hp->n_dense_lead > 0)
			printf("  dense blocks first         %lld, feed-forward %lld\n", (long long)hp->n_dense_lead,
			       (long long)hp->n_ff);
		if (m.layers[hp->n_layer - 1].exp_probs_b.name)
			printf("  expert selection bias      exp_probs_b (selects only, not in the weights)\n");
	} else if (m.layer_n_ff) {
		printf("  feed-forward per layer    ");
		for (int il = 0; il < hp->n_layer; il++)
			printf("%s%lld", il ? "," : " ", (long long)m.layers[il].n_ff);
		printf("\n");
	} else {
		printf("  feed-forward               %lld\n", (long long)hp->n_ff);
	}
	if (m.arch == MODEL_ARCH_GEMMA4) {
		printf("  sliding layers             head size %lld / %lld, RoPE on %lld dims, no frequency factors\n",
		       (long long)hp->head_dim_swa, (long long)hp->head_dim_v_swa, (long long)hp->n_rot_swa);
		if (hp->n_kv_shared > 0) {
			printf("  shared K/V                 the last %lld layers read an earlier layer's:",
			       (long long)hp->n_kv_shared);
			for (int il = 0; il < hp->n_layer; il++)
				if (m.layers[il].kv_src != il)
					printf(" %d<-%d", il, m.layers[il].kv_src);
			printf(" (their qkv kernel computes q only)\n");
		}
		if (hp->n_embd_pl > 0)
			printf("  per-layer inputs           %lld per layer (projections on the CPU), output scale per layer\n",
			       (long long)hp->n_embd_pl);
		printf("  attention                  no score scaling; V normed per head without weight\n");
	}
	printf("  training context           %lld\n", (long long)hp->n_ctx_train);
	printf("  rms eps                    %g\n", (double)hp->rms_eps);
	char rope_line[512];
	model_describe_rope(&m, rope_line, sizeof rope_line);
	printf("  RoPE                       %s\n", rope_line);
	if (m.layers[hp->n_layer - 1].q_norm.name || m.layers[hp->n_layer - 1].k_norm.name)
		printf("  q/k norms                  per head, %s RoPE\n", hp->qk_norm_post_rope ? "after" : "before");
	if (hp->sliding_window > 0) {
		printf("  sliding window             %lld on layers", (long long)hp->sliding_window);
		int any = 0;
		for (int il = 0; il < hp->n_layer; il++)
			if (m.layers[il].sliding) {
				printf("%s%d", any ? "," : " ", il);
				any = 1;
			}
		printf("%s\n", any ? "" : " (none)");
		if (hp->rope_base_swa != hp->rope_base)
			printf("  RoPE base on window layers %g\n", (double)hp->rope_base_swa);
	}
	if (hp->n_no_rope_step > 0)
		printf("  no RoPE on layers          every %lld-th\n", (long long)hp->n_no_rope_step);
	if (hp->attn_softcap > 0 || hp->final_softcap > 0)
		printf("  soft-caps                  attention %g, final %g\n", (double)hp->attn_softcap,
		       (double)hp->final_softcap);
	printf("  output                     %s\n", m.tied_output ? "tied to token_embd" : "own output.weight");

	int64_t count[AD_TYPE_COUNT] = {0};
	int64_t other = 0;
	for (int64_t i = 0; i < m.n_tensors; i++) {
		if (m.tensors[i].type < AD_TYPE_COUNT)
			count[m.tensors[i].type]++;
		else
			other++;
	}
	printf("  weight types              ");
	for (int t = 0; t < AD_TYPE_COUNT; t++)
		if (count[t]) {
			const char *tn = ad_type_name((uint32_t)t);
			printf(" %s:%" PRId64, tn ? tn : "?", count[t]);
		}
	if (other)
		printf(" unknown:%" PRId64, other);
	printf("\n");
	printf("  tensors                    %" PRId64 "\n", m.n_tensors);
	printf("  parameters                 %" PRId64 " (%.3g M)\n", m.n_params, (double)m.n_params / 1e6);
	print_bytes("file", (double)m.file_bytes);
	print_bytes("fp32 reference weights", (double)m.n_params * 4.0);
	print_bytes(n_conv ? "fp32 KV + conv state / 1k" : "fp32 KV cache / 1k tokens",
	            (double)model_kv_bytes_per_pos(&m) * 1024.0);
	if (n_recur) {
		print_bytes("recurrent state / sequence", (double)model_state_floats(&m) * 4.0);
		printf("  recurrent state copies     every %d positions, the last 6 per sequence (to go back to)\n",
		       SCHED_CACHE_BLOCK);
	}
	{
		// what `serve` gives the prefix cache by default: the fp16 KV of 4
		// full contexts of 2048 positions (or the training context when
		// shorter), with --parallel up to 4
		int64_t ctx = hp->n_ctx_train > 1 && hp->n_ctx_train < 2048 ? hp->n_ctx_train : 2048;
		double b = (double)pcache_default_mem(model_kv_bytes_per_pos(&m) / 2, model_state_floats(&m) * 4,
		                                      (int)ctx, 4);
		char what[64];
		snprintf(what, sizeof what, "prefix cache (%lld ctx)", (long long)ctx);
		print_bytes(what, b);
		printf("  prefix cache blocks        %d positions (serve --cache-mem sets the bound)\n",
		       SCHED_CACHE_BLOCK);
	}
	// what the projection kernels hold in each format, and the default
	enum ane_wfmt def = ane_plan_weights_default(&m, "emu");
	for (int f = ANE_W_FP16; f <= ANE_W_LUT4; f++) {
		struct ane_plan p;
		struct ane_plan_opts po = {.weights = (enum ane_wfmt)f};
		if (ane_plan_build(&p, &m, &po, err))
			continue;
		double b = 0;
		for (int i = 0; i < p.n; i++)
			b += (double)p.k[i].weight_bytes;
		char what[64];
		snprintf(what, sizeof what, "kernel weights as %s", ane_wfmt_name((enum ane_wfmt)f));
		print_bytes(what, b);
		ane_plan_free(&p);
	}
	printf("  kernel weights (default)   %s on emu, fp16 on ane (--weights)\n", ane_wfmt_name(def));
	// the kernels of each kind of layer (the first of each: ShortConv or
	// attention, dense or MoE) and of the whole plan
	struct ane_plan p;
	if (ane_plan_build(&p, &m, NULL, err) == 0) {
		int seen[4] = {0}, kinds = 0;
		for (int il = 0; il < hp->n_layer; il++) {
			const struct model_layer *ml = &m.layers[il];
			int kind = (ml->conv || ml->recur ? 1 : 0) | (ml->gate_inp.name ? 2 : 0);
			if (seen[kind]++)
				continue;
			int n0 = 0;
			printf("  %-27s", kinds++ ? "" : "kernels per layer");
			for (int i = 0; i < p.n; i++)
				if (p.k[i].layer == il) {
					const char *kn = ane_kind_name(p.k[i].kind);
					if (ml->conv && p.k[i].kind == ANE_K_QKV)
						kn = "in_proj";
					else if (ml->conv && p.k[i].kind == ANE_K_O)
						kn = "out_proj";
					else if (ml->recur && p.k[i].kind == ANE_K_QKV)
						kn = "qkv|z|beta|alpha";
					else if (ml->recur && p.k[i].kind == ANE_K_O)
						kn = "ssm_out";
					printf("%s%s", n0 ? " + " : "", kn);
					n0++;
				}
			printf(" (%d)", n0);
			if (kind != 0 || seen[1] || seen[2] || seen[3] || n_conv || n_recur || hp->n_dense_lead)
				printf(" on %s%s layers (first: %d)",
				       ml->conv    ? "ShortConv"
				       : ml->recur ? "delta-net"
				                   : "attention",
				       ml->gate_inp.name ? " MoE" : "", il);
			printf("\n");
		}
		printf("  kernels in all             %d with %d LM-head chunk%s%s\n", p.n, p.head_chunks,
		       p.head_chunks > 1 ? "s" : "", hp->n_expert ? "; routed experts on the CPU" : "");
		ane_plan_free(&p);
	}
	model_free(&m);
	return 0;
}
