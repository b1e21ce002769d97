/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch bench: helpers shared by its files, under the modes
 * (util.c; bench_cpu_ghz() is clock.c's). Nothing here depends
 * on a mode or on cmd_bench.c.
 */
#ifndef FLD_TOOLS_BENCH_UTIL_H
#define FLD_TOOLS_BENCH_UTIL_H

#include <stdbool.h>
#include <stddef.h>

/* CLOCK_MONOTONIC in nanoseconds. */
double bench_now_ns(void);

/*
 * The value of the first "key: value" line of a text file such as
 * /proc/cpuinfo or /proc/self/status (blanks around it trimmed) into buf;
 * false, buf empty, when the file or the key is absent.
 */
bool bench_proc_field(const char *path, const char *key, char *buf, size_t size);

/* The "model name" of /proc/cpuinfo (or "unknown"). */
void bench_cpu_model(char *buf, size_t size);

/* The median of n values (sorts v in place); NAN if any value is NAN or n < 1. */
double bench_median(double *v, int n);

/* CPUs this process may run on (sched_getaffinity), at least 1. */
int bench_allowed_cpus(void);

/*
 * Pins the thread to the index-th CPU of the process's allowed set
 * (index modulo the number of allowed CPUs). Best effort: nothing happens
 * when the affinity cannot be read or set.
 */
void bench_pin_thread(unsigned long thread, int index);

/*
 * The CPU clock in GHz while a chain of dependent adds runs (clock.c);
 * *source is "calibrated", or "cpuinfo" (/proc/cpuinfo's cpu MHz) when the
 * loop could not be timed, or "unknown" (0 returned).
 */
double bench_cpu_ghz(const char **source);

#endif
