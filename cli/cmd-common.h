// cmd-common.h - what the CLI's commands share: strict flag parsing, their
// usage, and the pipeline itself.
//
// Flags: a malformed or out-of-range value names the flag and the command
// returns 2, after its short usage. Values are parsed whole ("12x" is
// refused).
//
// The pipeline (struct pipe): the model mapped in this process (for the
// reference engine of verify and the vocabulary), and the supervised
// processes: anedvd-tokenizer (when text is needed), anedvd-ane-worker (the
// projection kernels, for the emu and ane backends) and anedvd-cpu-worker
// (the decode loop, over engine.proto: p->eng), which reaches the kernels
// through kb_remote and so survives a restart of the ane-worker. Backend
// "exact" runs fp32 projections inside the cpu-worker.
//
// With in_process (--in-process, or when anedvd-cpu-worker is not built)
// the cpu-worker's service runs on threads of this process instead
// (cpu_worker_start, p->cw), served on inproc://: the same decode loop,
// reached through the same client.
#ifndef AD_CMD_COMMON_H
#define AD_CMD_COMMON_H

#include <stdint.h>
#include <stdio.h>

#include "cli.h"
#include "engine.h"
#include "spec.h"
#include "err.h"
#include "ipc.h"
#include "kernels.h"
#include "model.h"
#include "supervisor.h"
#include "client-tokenizer.h"
#include "cpu-service.h"

// --- flags ---------------------------------------------------------------------------

double cli_now_ms(void);
// the relative (L2) error of x against ref over n values, non-finite values
// of x skipped and counted in *nans; *maxabs: the largest |x - ref| (either
// pointer may be NULL)
double cli_rel_err(const float *x, const float *ref, size_t n, double *maxabs, int *nans);

// --- every command (cmd-common.c) --------------------------------------------------------

// a command's usage; text: its arguments (one line), then its options.
// "usage: anedvd CMD <arguments>", then the options (full: after --help, on
// stdout) or where to find them ("anedvd CMD --help  lists the options", on
// stderr after a bad argument)
void cli_usage(const char *cmd, int full, const char *text);
// an argument that no flag of the command took: 1 for -h or --help, else
// -1 with "<program> CMD: unknown argument 'A'"
int cli_help_or_unknown(const char *cmd, const char *a);
// llama.cpp's short flags, for the long ones they stand for where a command
// has them: -m --model, -p --prompt, -n --max-tokens, -c --max-seq, -s
// --seed, -t --threads. The long flag for a, or NULL; CLI_SHORT_FLAGS is the
// line the usages print
const char *cli_long_flag(const char *a);
#define CLI_SHORT_FLAGS                                                                                                \
	"  -m -p -n -c -s -t   llama.cpp's short flags, where the command has the long ones: --model,\n"               \
	"                      --prompt, --max-tokens, --max-seq, --seed, --threads\n"
// the flags that only store a value: a string (val: the next argument), a
// switch (on: set to 1) or an integer in [lo, hi] (num). cli_plain_flag
// takes argv[*i] if it is one of f (an array ended by {0}): 1 taken (*i
// past its value), 0 not one of them, -1 for a missing or bad value
// (message printed)
struct cli_plain {
	const char *flag;
	const char **val;
	int *on;
	int *num;
	long long lo, hi;
};
int cli_plain_flag(const char *cmd, const struct cli_plain *f, int argc, char **argv, int *i);
// --rope-hf and --rope-adjacent (*rope: the RoPE pairing forced) and --arch
// NAME (cli_arch): 1 taken, 0 not one of them, -1 bad (message printed)
int cli_model_flag(const char *cmd, enum model_rope *rope, int argc, char **argv, int *i);
// ids as a JSON array of numbers
struct cJSON *cli_json_ids(const int32_t *ids, int n);

// --- the pipeline ------------------------------------------------------------------------
#define PIPE_KINDS 9

struct pipe_opts {
	const char *cmd; // for messages
	const char *model;
	const char *backend; // NULL: the platform's default (emu off macOS, with a notice)
	int chunk;           // 0: 64
	int split;
	int max_seq;               // 0: 2048
	enum model_rope rope;      // override for everything
	enum model_rope pipe_rope; // override for the pipeline only (a deliberate fault)
	int need_tok;
	int threads;           // emu threads (0: 2)
	int debug_delay_ms;    // ane-worker --debug-delay-ms (tests)
	const char *child_env; // "NAME=value" for the children (ANEDVD_TRACE)
	int in_process;        // the decode loop in this process, not anedvd-cpu-worker
	const char *weights;   // "fp16", "int8" or NULL: pipe_weights's default
	const char *cache_dir; // the ane-worker's kernel cache: --cache-dir (NULL: its default)
	int no_cache;          // --no-cache
	int cache_max_mb;      // --cache-max-mb (0: the default)
	// the cpu-worker's prefix cache, as serve's --cache-mem takes it (NULL:
	// the worker's default; "0": none, for a job no later one follows)
	const char *cache_mem;
	// speculative decoding (pipe_spec_flag): as the cpu-worker will run it,
	// and the flags that tell it so
	struct spec_opts spec;
	int no_spec;
	const char *spec_args[10];
	int n_spec_args;
};

struct pipe {
	struct model m;
	struct sup *sup;
	struct ad_client *tok;
	struct tokc_vocab voc;
	int have_voc;
	struct cpu_worker *cw; // the in-process cpu-worker (in_process), or NULL
	struct ad_client *eng; // the cpu-worker's service
	char ane_url[600];
	int n_vocab, max_seq;
	char backend[16];
	char weights[8];          // what the kernels hold: fp16, int8 (fp32 for exact)
	enum model_rope ref_rope; // the model's RoPE before a pipeline-only override
	int timeout_ms;
	// the start: ms from pipe_open's entry until each child answered, and
	// until pipe_open returned (0: not started)
	double tok_ready_ms, ane_ready_ms, cpu_ready_ms, open_ms;
};

// the ane-worker's own start (CompileReply.start_phases, cache)
#define PIPE_START_MAX 12
struct pipe_ane_start {
	int n;
	char name[PIPE_START_MAX][24];
	double ms[PIPE_START_MAX];
	char cache[24];
	uint64_t weight_bytes; // the kernels' weights as they hold them
};
int pipe_ane_start(struct pipe *p, struct pipe_ane_start *out, char *err);

// the backend to run: given (--backend), else the platform's default (ane
// on macOS; emu elsewhere, with a notice on stderr); NULL with err for ane
// off macOS. pipe_open and serve choose with it
const char *pipe_backend(const char *given, char *err);
int pipe_open(struct pipe *p, const struct pipe_opts *o, char *err);
// the ane-worker's per-kind kernel totals (calls, ns inside the backend)
// since it started; -1 when there is no ane-worker (exact) or no answer
int pipe_ane_stats(struct pipe *p, uint64_t calls[PIPE_KINDS], uint64_t ns[PIPE_KINDS], char *err);
void pipe_close(struct pipe *p);
const char *pipe_kind_name(int kind);
// is id one that ends a generation
int pipe_is_stop(const struct pipe *p, int32_t id);

// the usual backend flags of the pipeline commands, for --help
#define PIPE_HELP_BACKEND                                                                                              \
	"  --backend B         emu (default off macOS: the ANE programs run on the CPU, in the\n"                      \
	"                      anedvd-ane-worker process) or exact (fp32 projections in this\n"                        \
	"                      process); ane needs macOS on Apple Silicon and is refused here\n"                       \
	"  --chunk N           columns every kernel is compiled for (default 64)\n"                                    \
	"  --split             split FFN (gate|up, activation on the CPU, down)\n"                                     \
	"  --threads N         emu threads (default 2)\n"                                                              \
	"  --weights W         fp16, int8 (per-row int8 with fp16 scales) or lut4 (4-bit palettised: a\n"              \
	"                      table of 16 per 64 rows, a scale per row) in the kernels; default int8 on\n"            \
	"                      emu for models stored in 8 bits or fewer (Q8_0, Q4/Q5, K-quants), fp16 for\n"           \
	"                      F16/BF16/F32 models and on the ane backend (int8, lut4 unconfirmed there)\n"            \
	"  --rope-hf           force neox RoPE pairing; --rope-adjacent: force adjacent pairs\n"                       \
	"  --arch NAME         run a GGUF file as architecture NAME (one anedvd implements) whatever\n"                \
	"                      it says, with a warning; without it an unknown one is refused\n"                        \
	"  --in-process        run the cpu-worker's service (the decode loop) on threads of this\n"                    \
	"                      process instead of the anedvd-cpu-worker process\n"                                     \
	"  --cache-dir D       the compiled-kernel cache (default $ANEDVD_CACHE_DIR,\n"                                \
	"                      $XDG_CACHE_HOME/anedvd or ~/.cache/anedvd; see 'anedvd cache')\n"                       \
	"  --no-cache          compile every kernel at start, store nothing\n"                                         \
	"  --cache-max-mb N    bound of the cache directory, oldest entries evicted (default 4096)\n"

// parse the flags in PIPE_HELP_BACKEND (and --model, --max-seq): 1 if
// argv[*i] was one (consumed), 0 if not, -1 on a bad value
int pipe_flag(struct pipe_opts *o, int argc, char **argv, int *i);
// teacher-forced logits of every position (n rows of p->n_vocab) from the
// cpu-worker's Eval; per_token: one decode step per position instead of
// prefill chunks
int pipe_eval(struct pipe *p, const int32_t *ids, int n, int per_token, float *logits, char *err);

// the speculative decoding flags of run, chat and serve (PIPE_HELP_SPEC),
// as pipe_flag; o->spec must hold spec_defaults first. pipe_spec_check
// checks them together (--ngram-min against --ngram-max): 0, or -1 with a
// message printed
#define PIPE_HELP_SPEC                                                                                                 \
	"  --no-spec           no speculative decoding (on by default: drafts of the next tokens\n"                    \
	"                      found in the text so far, checked in the decode step's own kernel\n"                    \
	"                      calls; the tokens are the same with or without)\n"                                      \
	"  --draft N           at most N draft tokens per step (default 8; 0: off)\n"                                  \
	"  --ngram-max N, --ngram-min N   the n-grams drafts are looked up by (default 8 down to 2)\n"                 \
	"  --draft-cost F      a column's cost as a share of a one-column decode call, which sets\n"                   \
	"                      how much of a draft is worth checking (default auto: measured on\n"                     \
	"                      the decode calls; 0: all of it)\n"
int pipe_spec_flag(struct pipe_opts *o, int argc, char **argv, int *i);
int pipe_spec_check(const struct pipe_opts *o);

// run, chat, serve and verify without --model: o->model becomes the model
// the installation ships (sup_default_model), with a note on stderr; 0, or
// -1 with a message when there is none
#define PIPE_HELP_MODEL                                                                                                \
	"  --model M           a GGUF file or a Hugging Face directory (default: the bundled\n"                        \
	"                      stories260K, a 260K-parameter toy model of children's stories)\n" CLI_SHORT_FLAGS
int pipe_model_default(struct pipe_opts *o);
// append the ane-worker's cache flags of o to argv at *n (buf: room for a number)
void pipe_cache_args(const struct pipe_opts *o, const char **argv, int *n, char *buf, size_t cap);

// the kernels' weight format: given ("fp16" / "int8", already checked) or
// the default for model m on backend be; "fp32" for exact
const char *pipe_weights(const struct model *m, const char *be, const char *given);
// the same from a model path (loads and frees it); NULL with err
const char *pipe_weights_path(const char *model, const char *be, const char *given, char *err);
// --weights VALUE of command cmd: 0 ok, -1 (message printed) when bad
int pipe_weights_arg(const char *cmd, const char *v);

#endif
