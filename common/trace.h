// trace.h - Chrome trace-event JSON ("X" complete events), which Perfetto
// and chrome://tracing open, from every process of an instance.
//
// Events are buffered in memory (thread-safe) while trace_enabled() and
// written at the end as one JSON array, with a process_name record per pid
// named by trace_process. Timestamps are CLOCK_MONOTONIC microseconds, the
// same clock in every process of the machine, so the files of several
// processes merge as they are.
//
// A worker process calls trace_from_env(name) once at start: when the
// environment has ANEDVD_TRACE=<prefix> (the CLI sets it for its children
// with --trace), tracing is on and the events are written at exit to
// "<prefix>.<pid>.json". The CLI's trace_write merges every such file
// ("<prefix>*.json") into its own output once the children have stopped,
// and trace_remove_parts removes them.
#ifndef AD_TRACE_H
#define AD_TRACE_H

#include <stdint.h>

#include "err.h"

void trace_enable(void);
int trace_enabled(void);
uint64_t trace_now_us(void);
// name and cat are copied
void trace_event(long pid, long tid, const char *name, const char *cat, uint64_t ts_us, uint64_t dur_us);
// with up to TRACE_ARGS numbers as the event's args (shown beside it in
// Perfetto): keys[i] -> vals[i], i < nargs; the keys must be string
// literals (kept, not copied)
#define TRACE_ARGS 4
void trace_event_args(long pid, long tid, const char *name, const char *cat, uint64_t ts_us, uint64_t dur_us,
                      const char *const *keys, const double *vals, int nargs);
void trace_process(long pid, const char *name);
// write every buffered event, and the events of the JSON-array files
// "<merge_prefix>*.json" (merge_prefix may be NULL), to path
int trace_write(const char *path, const char *merge_prefix, char *err);
// remove the files "<merge_prefix>*.json" (once merged)
void trace_remove_parts(const char *merge_prefix);
void trace_reset(void); // drop the buffer

// the worker side: ANEDVD_TRACE=<prefix> turns tracing on and writes
// "<prefix>.<pid>.json" at exit (atexit); returns 1 if on
int trace_from_env(const char *process);
// write this process's events to "<prefix>.<pid>.json" now (also at exit)
int trace_flush_env(char *err);

#endif
