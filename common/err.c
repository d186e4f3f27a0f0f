#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int
ad_verr(char *err, const char *fmt, va_list ap)
{
	if (err)
		vsnprintf(err, AD_ERRLEN, fmt, ap);
	return -1;
}

int
ad_err(char *err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ad_verr(err, fmt, ap);
	va_end(ap);
	return -1;
}

int
ad_err_prefix(char *err, const char *fmt, ...)
{
	if (!err)
		return -1;
	char old[AD_ERRLEN];
	memcpy(old, err, AD_ERRLEN);
	old[AD_ERRLEN - 1] = 0;
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(err, AD_ERRLEN, fmt, ap);
	va_end(ap);
	if (n < 0 || n >= AD_ERRLEN - 2)
		return -1;
	size_t at = (size_t)n;
	memcpy(err + at, ": ", 2);
	at += 2;
	size_t room = AD_ERRLEN - 1 - at, len = strlen(old);
	if (len > room)
		len = room;
	memcpy(err + at, old, len);
	err[at + len] = 0;
	return -1;
}
