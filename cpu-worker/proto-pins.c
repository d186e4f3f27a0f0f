// proto-pins.c - the C enums whose values are those of a proto enum, pinned
// value by value, so that a change on either side fails the build rather
// than a cast at run time. (The kernel kind, the finish reasons and the
// timings are pinned with their typed clients.)
#include "common.pb-c.h"
#include "dataplane.h"
#include "engine.pb-c.h"
#include "scheduler.h"

#define PIN(c, p) _Static_assert((int)(c) == (int)(p), #c " is " #p)

// scheduler.h enum sched_code: common.proto ErrorCode (service.c casts)
PIN(SCHED_OK, ANEDVD__ERROR_CODE__ERROR_NONE);
PIN(SCHED_EBADREQ, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
PIN(SCHED_EUNSUPPORTED, ANEDVD__ERROR_CODE__ERROR_UNSUPPORTED);
PIN(SCHED_ENOTFOUND, ANEDVD__ERROR_CODE__ERROR_NOT_FOUND);
PIN(SCHED_ETOOLARGE, ANEDVD__ERROR_CODE__ERROR_TOO_LARGE);
PIN(SCHED_EINTERNAL, ANEDVD__ERROR_CODE__ERROR_INTERNAL);
PIN(SCHED_ETIMEOUT, ANEDVD__ERROR_CODE__ERROR_TIMEOUT);
PIN(SCHED_EUNAVAILABLE, ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE);
PIN(SCHED_ECANCELLED, ANEDVD__ERROR_CODE__ERROR_CANCELLED);

// scheduler.h SCHED_SPEC_*: engine.proto SpecMode (sched_gen.speculative)
PIN(SCHED_SPEC_DEFAULT, ANEDVD__SPEC_MODE__SPEC_DEFAULT);
PIN(SCHED_SPEC_OFF, ANEDVD__SPEC_MODE__SPEC_OFF);
PIN(SCHED_SPEC_ON, ANEDVD__SPEC_MODE__SPEC_ON);

// dataplane.h enum dp_status: the ErrorCode values a data-plane reply uses
PIN(DP_OK, ANEDVD__ERROR_CODE__ERROR_NONE);
PIN(DP_BAD_REQUEST, ANEDVD__ERROR_CODE__ERROR_BAD_REQUEST);
PIN(DP_NOT_FOUND, ANEDVD__ERROR_CODE__ERROR_NOT_FOUND);
PIN(DP_INTERNAL, ANEDVD__ERROR_CODE__ERROR_INTERNAL);
PIN(DP_UNAVAILABLE, ANEDVD__ERROR_CODE__ERROR_UNAVAILABLE);
