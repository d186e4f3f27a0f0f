#define _GNU_SOURCE // pthread_setname_np
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *log_process = "anedvd";
static enum ad_log_level log_level = AD_LOG_INFO;
static const char *level_names[] = {"error", "warn", "info", "debug"};

void
ad_log_init(const char *process)
{
	if (process)
		log_process = process;
	const char *env = getenv("ANEDVD_LOG");
	if (!env)
		return;
	for (int i = 0; i <= AD_LOG_DEBUG; i++)
		if (strcmp(env, level_names[i]) == 0)
			log_level = (enum ad_log_level)i;
}

void
ad_log_set_level(enum ad_log_level level)
{
	log_level = level;
}

enum ad_log_level
ad_log_get_level(void)
{
	return log_level;
}

void
ad_log(enum ad_log_level level, const char *fmt, ...)
{
	if (level > log_level)
		return;
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	// one write per line so lines of concurrent processes do not interleave
	fprintf(stderr, "%s %s: %s\n", log_process, level_names[level], line);
}

int
ad_env_on(const char *name, const char *on)
{
	const char *v = getenv(name);
	if (v && !strcmp(v, "0"))
		return 0;
	if (v && *v && strcmp(v, "1"))
		ad_warn("%s=%s: expected 0 or 1; %s", name, v, on);
	return 1;
}

void
ad_thread_name(const char *fmt, ...)
{
	char name[16]; // the system's limit, the terminating zero included
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
#if defined(__APPLE__)
	pthread_setname_np(name);
#elif defined(__linux__)
	pthread_setname_np(pthread_self(), name);
#endif
}
