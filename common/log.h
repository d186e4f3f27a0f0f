// log.h - leveled logging to stderr.
//
// Every process logs one line per event: "anedvd[<process>] <level>: msg".
// The level comes from ANEDVD_LOG (error, warn, info, debug; default info)
// or from ad_log_set_level.
#ifndef AD_LOG_H
#define AD_LOG_H

enum ad_log_level { AD_LOG_ERROR = 0, AD_LOG_WARN, AD_LOG_INFO, AD_LOG_DEBUG };

void ad_log_init(const char *process);
void ad_log_set_level(enum ad_log_level level);
enum ad_log_level ad_log_get_level(void);
void ad_log(enum ad_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// name the calling thread as the system shows it (ps -L, top -H, perf,
// gdb): printf-style, cut to the system's 15 bytes. Each long-lived thread
// names itself first thing, so a profile of a process tells its roles
// apart; the main thread keeps the program's name.
void ad_thread_name(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// an on/off switch from the environment, on by default: 0 when NAME is
// "0", else 1. A value other than 0, 1 or empty warns "NAME=V: expected
// 0 or 1; <on>", on saying what the process does instead.
int ad_env_on(const char *name, const char *on);

#define ad_error(...) ad_log(AD_LOG_ERROR, __VA_ARGS__)
#define ad_warn(...) ad_log(AD_LOG_WARN, __VA_ARGS__)
#define ad_info(...) ad_log(AD_LOG_INFO, __VA_ARGS__)
#define ad_debug(...) ad_log(AD_LOG_DEBUG, __VA_ARGS__)

#endif
