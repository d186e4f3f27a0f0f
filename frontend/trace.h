// trace.h - Chrome trace-event JSON ("X" complete events), which Perfetto
// and chrome://tracing open.
//
// Events are buffered in memory (thread-safe) while trace_enabled() and
// written at the end by trace_write as one JSON array, with a process_name
// record per pid named by trace_process. Timestamps are CLOCK_MONOTONIC
// microseconds, the same clock in every process of the machine, so files
// written by other processes (a JSON array each, found by trace_write
// under the given prefix: "<prefix>*.json") are merged in as they are.
#ifndef AD_TRACE_H
#define AD_TRACE_H

#include <stdint.h>

#include "err.h"

void trace_enable(void);
int trace_enabled(void);
uint64_t trace_now_us(void);
// name and cat are copied
void trace_event(long pid, long tid, const char *name, const char *cat, uint64_t ts_us, uint64_t dur_us);
void trace_process(long pid, const char *name);
// write every buffered event, and the events of the JSON-array files
// "<merge_prefix>*.json" (merge_prefix may be NULL), to path
int trace_write(const char *path, const char *merge_prefix, char *err);
void trace_reset(void); // drop the buffer

#endif
