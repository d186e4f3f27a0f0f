// cli.h - command-line flag values, checked: every command and process
// parses its flags with these, so a malformed value is refused the same way
// everywhere, naming the command and the flag ("anedvd run: --top-k takes an
// integer from 0 to 1000000, not 'x'").
#ifndef AD_CLI_H
#define AD_CLI_H

#include <stdint.h>

// the program named in the messages: "anedvd" unless its main sets another
// ("anedvd-dev")
extern const char *cli_prog;

// a whole decimal integer in [lo, hi]; -1 with a message on stderr
int cli_int(const char *cmd, const char *flag, const char *s, long long lo, long long hi, long long *out);
// a finite number in [lo, hi]
int cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi, float *out);
// "1,2,3" -> ids (malloc'd)
int cli_ids(const char *cmd, const char *flag, const char *s, int32_t **ids, int *n);
// argv[*i] needs a value: returns it and advances, or NULL with a message
const char *cli_val(const char *cmd, int argc, char **argv, int *i);

// --arch NAME: an architecture of the model table, set as ANEDVD_ARCH so
// that this process and the workers it starts load the model as NAME
int cli_arch(const char *cmd, const char *name);

#endif
