// spec-json.c - speculative decoding's counters as JSON (spec-json.h).
#include "spec-json.h"

#include <stdio.h>

static double
ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

cJSON *
ad_spec_json(const struct spec_stats *st)
{
	cJSON *o = cJSON_CreateObject();
	if (!o)
		return NULL;
	cJSON_AddNumberToObject(o, "steps", (double)st->steps);
	cJSON_AddNumberToObject(o, "drafted", (double)st->drafted);
	cJSON_AddNumberToObject(o, "accepted", (double)st->accepted);
	cJSON_AddNumberToObject(o, "acceptance", ratio(st->accepted, st->drafted));
	cJSON *bn = cJSON_AddObjectToObject(o, "by_n");
	for (int i = 0; bn && i <= SPEC_NGRAM_MAX; i++)
		if (st->drafted_n[i]) {
			char key[8];
			snprintf(key, sizeof key, "%d", i);
			cJSON *x = cJSON_AddObjectToObject(bn, key);
			cJSON_AddNumberToObject(x, "drafted", (double)st->drafted_n[i]);
			cJSON_AddNumberToObject(x, "accepted", (double)st->accepted_n[i]);
			cJSON_AddNumberToObject(x, "acceptance", ratio(st->accepted_n[i], st->drafted_n[i]));
		}
	return o;
}
