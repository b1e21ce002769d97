/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What ran: per (op, implementation, device, dtype) counters, their output
 * (the summary table, the JSON file), and the switch and the file of the
 * trace of dispatch decisions and timed calls (trace.h). Opt-in:
 * VLLM_FL_STATS, VLLM_FL_STATS_FILE, VLLM_FL_TRACE, or fld_stats_enable().
 *
 * Off costs nothing on the direct call path: while any of it is on, the
 * manager does not open the direct path (enable_fast() refuses, and the
 * switch bumps the generation so that open ones close), so every call runs
 * through run_chain(), which loads fld__stats_flags once per call and counts
 * only when it is set. Counters are relaxed atomics in cells that live until
 * the process ends (so a snapshot's strings stay valid and a count survives
 * fld_shutdown()); an implementation record caches its cell per slot.
 */
#ifndef FLD_CORE_STATS_H
#define FLD_CORE_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <fldispatch/fldispatch.h>

/* The trace's recording calls, which dispatch makes beside the counters. */
#include "trace.h"

#define FLD_STATS_FLAG_COUNT 1u /* count calls, fallbacks, failures */
#define FLD_STATS_FLAG_TIME  2u /* and time each call */
#define FLD_STATS_FLAG_TRACE 4u /* and record decisions and timed calls in the trace */

/* 0 when off; read once per call on the chain path (chain_run.c). */
extern _Atomic unsigned fld__stats_flags;

struct fld_stats_cell;
struct fld_impl_rec;

/* The cell of impl r for (dev, dt) (FLD_DEV_*, FLD_DT_*), created on first
 * use and cached in r. NULL when out of memory (the call is not counted). */
struct fld_stats_cell *fld__stats_cell(struct fld_impl_rec *r, unsigned slot, int dev, int dt);

/* One call of the cell's implementation: rc its status (FLD_EUNSUPPORTED: it
 * declined; another error: a failure), ns its time (0 when not timed). */
void fld__stats_count(struct fld_stats_cell *c, int rc, uint64_t ns);
/* The cell's implementation failed and the next candidate ran. */
void fld__stats_fallback(struct fld_stats_cell *c);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t fld__stats_now(void);

/*
 * VLLM_FL_STATS, VLLM_FL_STATS_FILE, VLLM_FL_TRACE and VLLM_FL_STATS_INTERVAL,
 * read at fld_init() and fld_reload(): FLD_ECONFIG naming the variable for
 * an invalid value (nothing applied); commit applies what was read and takes
 * the strings (a mode set with fld_stats_enable() wins, at init, and until
 * the next reload), arranges the output at exit and sets the periodic
 * writer (stats_writer.h). Host lock held for both.
 */
struct fld_stats_env {
    unsigned flags;
    char *file;      /* VLLM_FL_STATS_FILE, or NULL */
    char *trace;     /* VLLM_FL_TRACE, or NULL */
    double interval; /* VLLM_FL_STATS_INTERVAL in seconds; 0: at exit only */
};
int fld__stats_read_env(struct fld_stats_env *out);
void fld__stats_commit_env(struct fld_stats_env *env, bool reload);
void fld__stats_env_free(struct fld_stats_env *env);

/* In a forked child: its counts and trace start from zero (they are its own process's). */
void fld__stats_after_fork(void);

#endif
