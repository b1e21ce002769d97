/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CPU's clock as the benchmark sees it, for elements per cycle.
 *
 * A chain of dependent integer adds runs one add per cycle on every core
 * this tool targets (x86-64 and arm64: a one-cycle ALU latency), so the
 * number of adds per nanosecond is the core's clock in GHz while the chain
 * runs: the frequency the kernels get, boost included, which the nominal
 * "cpu MHz" of /proc/cpuinfo (a KVM guest reports the host's base clock
 * there) does not say. Thirty runs of 2 million adds (about 0.6 ms each),
 * the fastest kept: a run that the scheduler interrupted only reads lower.
 * When the loop cannot be timed, the figure falls back to /proc/cpuinfo's
 * "cpu MHz" and the source says so.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define CLOCK_RUNS  30
#define CLOCK_ITERS 250000L /* 8 adds each */

/* One dependent add; the empty asm keeps the compiler from folding the chain. */
#define CHAIN_ADD(x, y)                                                                            \
    do {                                                                                           \
        (x) += (y);                                                                                \
        __asm__ volatile("" : "+r"(x));                                                            \
    } while (0)

static double chain_ghz(void)
{
    volatile uint64_t seed = 3;
    uint64_t x = 1, y = seed;
    double best = 0;
    for (int run = 0; run < CLOCK_RUNS; run++) {
        double t0 = bench_now_ns();
        for (long i = 0; i < CLOCK_ITERS; i++) {
            CHAIN_ADD(x, y);
            CHAIN_ADD(x, y);
            CHAIN_ADD(x, y);
            CHAIN_ADD(x, y);
            CHAIN_ADD(x, y);
            CHAIN_ADD(x, y);
            CHAIN_ADD(x, y);
            CHAIN_ADD(x, y);
        }
        double ns = bench_now_ns() - t0;
        if (ns > 0 && 8.0 * CLOCK_ITERS / ns > best)
            best = 8.0 * CLOCK_ITERS / ns;
    }
    seed = x; /* the chain's result is used */
    return best;
}

/* /proc/cpuinfo's first "cpu MHz", in GHz; 0 when absent. */
static double cpuinfo_ghz(void)
{
    char mhz[64];
    return bench_proc_field("/proc/cpuinfo", "cpu MHz", mhz, sizeof mhz) ? atof(mhz) / 1000.0 : 0;
}

double bench_cpu_ghz(const char **source)
{
    double ghz = chain_ghz();
    if (ghz > 0.1 && ghz < 20) {
        *source = "calibrated";
        return ghz;
    }
    ghz = cpuinfo_ghz();
    *source = ghz > 0 ? "cpuinfo" : "unknown";
    return ghz > 0 ? ghz : 0;
}
