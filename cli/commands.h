// commands.h - the subcommands of the anedvd CLI and of the developer tools
// (anedvd-dev).
//
// Each command is called with argv[0] set to the command's name. It returns
// the process exit status: 0 success, 1 failure (bad model, mismatch), 2 bad
// usage, 130 interrupted.
#ifndef AD_COMMANDS_H
#define AD_COMMANDS_H

int cmd_cpu(int argc, char **argv);      // cli/cmd-cpu.c
int cmd_info(int argc, char **argv);     // cli/cmd-cpu.c
int cmd_route(int argc, char **argv);    // cli/cmd-cpu.c
int cmd_tokenize(int argc, char **argv); // cli/cmd-tokenize.c

// the pipeline (cli/cmd-run.c)
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_serve(int argc, char **argv);

// the pipeline on a tiny random model it writes (cli/cmd-selftest.c)
int cmd_selftest(int argc, char **argv);

// the developer tools of anedvd-dev: kernels and parts, in this process
// (cli/cmd-tools.c); not in the user's anedvd, which names them
// (AD_DEV_COMMANDS) only to point at anedvd-dev
int cmd_check(int argc, char **argv);
int cmd_layers(int argc, char **argv);
int cmd_kernels(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_width(int argc, char **argv);
int cmd_attnbench(int argc, char **argv);
#define AD_DEV_COMMANDS "check", "layers", "kernels", "probe", "bench", "width", "attnbench"

// the compiled-kernel cache (cli/cmd-cache.c)
int cmd_cache(int argc, char **argv);

#endif
