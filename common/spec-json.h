// spec-json.h - speculative decoding's counters as JSON, one shape for the
// HTTP timings object and `anedvd run --json`:
//   {"steps", "drafted", "accepted", "acceptance",
//    "by_n": {"<n>": {"drafted", "accepted", "acceptance"}}}
// acceptance is accepted / drafted (0 with nothing drafted); by_n holds the
// n-gram lengths that drafted anything. Returns owned: cJSON_Delete, or
// add it to an object (NULL when out of memory).
#ifndef AD_SPEC_JSON_H
#define AD_SPEC_JSON_H

#include <cjson/cJSON.h>

#include "gen-types.h"

cJSON *ad_spec_json(const struct spec_stats *st);

#endif
