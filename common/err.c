#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int
ad_err(char *err, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, AD_ERRLEN, fmt, ap);
		va_end(ap);
	}
	return -1;
}

int
ad_err_prefix(char *err, const char *fmt, ...)
{
	if (!err)
		return -1;
	char prefix[AD_ERRLEN], old[AD_ERRLEN];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof prefix, fmt, ap);
	va_end(ap);
	memcpy(old, err, AD_ERRLEN);
	old[AD_ERRLEN - 1] = 0;
	snprintf(err, AD_ERRLEN, "%s: %s", prefix, old);
	return -1;
}
