// commands.h - the subcommands of the anedvd CLI.
//
// Each command lives with the process whose code it drives and is called
// with argv[0] set to the command's name. It returns the process exit status:
// 0 success, 1 failure (bad model, mismatch), 2 bad usage.
#ifndef AD_COMMANDS_H
#define AD_COMMANDS_H

int cmd_cpu(int argc, char **argv);      // cpu-worker/cmd-cpu.c
int cmd_info(int argc, char **argv);     // cpu-worker/cmd-cpu.c
int cmd_tokenize(int argc, char **argv); // tokenizer-svc/cmd-tokenize.c

#endif
