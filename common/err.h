// err.h - error reporting shared by every module.
//
// Fallible functions return 0 on success and -1 on failure. On failure they
// fill a caller-owned buffer of AD_ERRLEN bytes with one line that says what
// went wrong and where (file name, tensor name, byte offset). Callers add
// context by prefixing; nothing here allocates.
#ifndef AD_ERR_H
#define AD_ERR_H

#include <stdarg.h>
#include <stddef.h>

#define AD_ERRLEN 512

// ad_err formats into err (if err is non-NULL) and returns -1, so that
// `return ad_err(err, "bad thing %d", x);` reads naturally.
int ad_err(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// ad_verr is ad_err with a va_list, for helpers that add something of
// their own (an error code, a position, "the first error wins"); the
// project's only formatter of error lines: a module's fail() wraps it
// rather than calling vsnprintf
int ad_verr(char *err, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

// ad_err_prefix prepends "prefix: " to an existing message in err.
int ad_err_prefix(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
