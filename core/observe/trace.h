/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The trace of dispatch decisions and timed calls (VLLM_FL_TRACE; see
 * trace.c): recorded by dispatch beside the counters while
 * FLD_STATS_FLAG_TRACE is set, emptied, written and reset after fork by the
 * stats (stats.c), which own its switch, its file and fld_trace_write().
 * The trace stands below the stats: a call event keeps the counter cell it
 * was timed for as an opaque pointer, and the writer asks its caller for
 * the cell's names.
 */
#ifndef FLD_CORE_TRACE_H
#define FLD_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include <fldispatch/fldispatch.h>

/* The trace: at most FLD_TRACE_MAX_EVENTS events, the rest counted as dropped. */
#define FLD_TRACE_MAX_EVENTS FLD_TRACE_CAP

struct fld_stats_cell;

/* A dispatch decision: the chain just built for op on (dev, dt) (FLD_DEV_*,
 * FLD_DT_*), its candidates in order, timed now (CLOCK_MONOTONIC). */
void fld__trace_chain(const char *op, int dev, int dt, const char *const *candidates, size_t n);
/* One timed call of cell's implementation (times in CLOCK_MONOTONIC ns, rc its status). */
void fld__trace_call(const struct fld_stats_cell *c, uint64_t start_ns, uint64_t end_ns, int rc);

/* The strings of a call event's cell (the stats' cells live until the process ends). */
typedef void fld_trace_cell_names_fn(const struct fld_stats_cell *c, const char **op,
                                     const char **impl_id, const char **device, const char **dtype);
/* Writes the trace as Chrome/Perfetto JSON to path (already expanded) through a
 * temporary file renamed over it; who names the caller or the variable in
 * messages; names gives the strings of each call event's cell. */
int fld__trace_write(const char *who, const char *path, fld_trace_cell_names_fn *names);
/* Empties the trace; MT safe with recording threads and writers (see trace.c). */
void fld__trace_reset(void);
/* Events recorded or dropped since the last reset (0 after it): grows with each one. */
size_t fld__trace_claimed(void);
/* In a forked child, before fld__trace_reset(): only the calling thread is left. */
void fld__trace_after_fork(void);

#endif
