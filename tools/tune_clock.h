/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The clock of fldispatch tune: the monotonic clock (a device's own for a
 * device's stretches), or, for the tests only, a simulated one.
 *
 * Test hook. FLD_TUNE_TEST_CLOCK="SEED:NOISE:IMPL=NS[*],IMPL=NS[*],..."
 * replaces the measured time of every timed stretch of calls by a simulated
 * one: each call of IMPL costs NS nanoseconds (1000 for an implementation not
 * named), times a noise factor drawn per stretch from a generator seeded with
 * SEED. NOISE "quiet": the factor is uniform in [1, 1.02). NOISE "load": a
 * stretch is disturbed with probability 0.7, its factor uniform in [1, 3), or in
 * [1, 30) for an implementation marked '*' (one whose threads wait for each
 * other when a core is taken away, as vendor.cpu's pool does); otherwise
 * [1, 1.02). The implementations still run: only the clock is simulated,
 * so that the tests can check tune's decisions without depending on the
 * machine's speed or load. Nothing but the tests sets it.
 */
#ifndef FLD_TOOLS_TUNE_CLOCK_H
#define FLD_TOOLS_TUNE_CLOCK_H

#include <stdbool.h>

#define TUNE_CLOCK_ENV "FLD_TUNE_TEST_CLOCK"

/*
 * Reads the test hook once. false (with a message naming the variable in
 * err) when it is set and malformed.
 */
bool tune_clock_init(char *err, unsigned long size);
/* Nanoseconds of the monotonic clock. */
double tune_clock_now(void);

/* The start of a timed stretch: the process's involuntary context switches, then the clock. */
struct tune_mark {
    double ns;
    long switches;
};
void tune_clock_start(struct tune_mark *m);
/*
 * The time per call of the stretch of `calls` calls of impl begun at m: the
 * monotonic clock's, or the simulated one. *clean: whether no thread of the
 * process was preempted meanwhile (getrusage's involuntary context
 * switches; the simulated clock flags half of its disturbed stretches, as
 * a real machine slows some stretches without preempting anything).
 */
double tune_clock_stop(const struct tune_mark *m, const char *impl, long calls, bool *clean);
/*
 * The time per call of a replay of `calls` calls of impl that a device
 * timed at device_ns (a device stretch is never preempted): device_ns /
 * calls, or the simulated clock's figure.
 */
double tune_clock_device(double device_ns, const char *impl, long calls);

#endif
