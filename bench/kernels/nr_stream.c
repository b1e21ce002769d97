/* SPDX-License-Identifier: Apache-2.0 */
/*
 * STREAM triad a[i] = b[i] + s * c[i] on one thread:
 * three float arrays of 256 MiB, -O3 with AVX2, best of `reps`, counted as
 * 3 arrays x 4 bytes per element (STREAM's convention: the write-allocate
 * read of a is not counted).
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

double nr_stream_triad_gbps(int reps);
double nr_now(void);

double nr_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void triad(float *restrict a, const float *restrict b, const float *restrict c, float s,
                  size_t n)
{
    for (size_t i = 0; i < n; i++)
        a[i] = b[i] + s * c[i];
}

double nr_stream_triad_gbps(int reps)
{
    const size_t n = (size_t)256 << 20 >> 2;
    float *a = aligned_alloc(64, n * 4), *b = aligned_alloc(64, n * 4),
          *c = aligned_alloc(64, n * 4);
    if (!a || !b || !c)
        return 0.0;
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = nr_now();
        triad(a, b, c, 3.0f, n);
        double t = nr_now() - t0;
        if (t < best)
            best = t;
    }
    volatile float sink = a[n / 2];
    (void)sink;
    free(a);
    free(b);
    free(c);
    return 3.0 * 4.0 * (double)n / best / 1e9;
}
