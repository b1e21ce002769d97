/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One-thread STREAM triad for the speed table; compiled on its own (-O3
 * with AVX2 on x86-64), nothing else in this file.
 */
#include <stdlib.h>
#include <time.h>

#include "act_harness.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double act_triad_once(double *a, const double *b, const double *c, int64_t n)
{
    const double s = 3.0;
    double t0 = now_s();
    for (int64_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
    double t = now_s() - t0;
    __asm__ volatile("" : : "r"(a) : "memory");
    return 24.0 * (double)n / t / 1e9;
}

double act_stream_triad(int64_t n, int reps)
{
    double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
    double *c = malloc((size_t)n * sizeof *c);
    double best = 0.0;
    if (!a || !b || !c)
        goto done;
    for (int64_t i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = 1.0 + (double)(i & 7);
        c[i] = 2.0;
    }
    for (int r = 0; r < reps; r++) {
        double gbps = act_triad_once(a, b, c, n);
        if (gbps > best)
            best = gbps;
    }
done:
    free(a);
    free(b);
    free(c);
    return best;
}
