/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The periodic writer (VLLM_FL_STATS_INTERVAL): one thread of the library's
 * own that, once per interval, has stats.c rewrite the counters' and the
 * trace's files if something was counted or traced since they were last
 * written (a callback: this file calls nothing of stats.c's). A server's files then show what ran
 * while it serves, and a process that is killed, or that leaves without
 * running exit handlers, loses at most its last interval.
 *
 * The thread starts with the first interval set and then lives as long as
 * the process, idle while the interval is 0. It blocks every signal, so a
 * signal meant for the program is never delivered to it. The exit handler
 * stops it (waiting for a write under way) before the last write; a forked
 * child, which has no copy of it, starts its own.
 */
#ifndef FLD_CORE_STATS_WRITER_H
#define FLD_CORE_STATS_WRITER_H

/* The least and the most VLLM_FL_STATS_INTERVAL accepts, in seconds (0 is off). */
#define FLD_STATS_INTERVAL_MIN 0.1
#define FLD_STATS_INTERVAL_MAX 86400.0

/* What the thread calls once per interval (stats.c's fld__stats_write_periodic()). */
typedef void (*fld_stats_writer_fn)(double interval);

/* Sets the interval in seconds (0: idle) and what writes, and starts the
 * thread when it is needed and not yet running; a thread that cannot start
 * is a warning, and the files are then written at exit only. */
void fld__stats_writer_set(double seconds, fld_stats_writer_fn write);

/* Stops the thread for good, after the write it may be doing. At exit. */
void fld__stats_writer_stop(void);

/* In a forked child: starts the child's own thread if the parent had one running. */
void fld__stats_writer_after_fork(void);

#endif
