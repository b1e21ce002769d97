/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The activation harness: standalone, no library. The
 * variants come from the real isa_<name>.c files (all three bodies); the
 * vmath functions are reached through act_probe.c, compiled once per
 * vector layer. Another build's kernels are compared through the tool:
 * bench/compare_kernels.py.
 */
#ifndef ACT_HARNESS_H
#define ACT_HARNESS_H

#include <stdint.h>

#include "cpu.h"

/* vmath functions act_probe.c exposes. */
enum act_probe_fn {
    PROBE_EXP,
    PROBE_SIGMOID,
    PROBE_SILU,
    PROBE_GELU_TANH,
    PROBE_ERF,
    PROBE_GELU,
    PROBE_COUNT
};

typedef void (*act_probe_t)(int fn, float *out, const float *in, int64_t n);

void act_probe_portable(int fn, float *out, const float *in, int64_t n);
#if defined(__x86_64__)
void act_probe_avx2(int fn, float *out, const float *in, int64_t n);
void act_probe_avx512(int fn, float *out, const float *in, int64_t n);
void act_probe_avx512_bf16(int fn, float *out, const float *in, int64_t n);
#endif
#if defined(__aarch64__)
void act_probe_neon(int fn, float *out, const float *in, int64_t n);
#endif

/* One-thread STREAM triad a[i] = b[i] + s * c[i] over 3 arrays of n doubles:
 * best of reps, in GB/s (24 bytes per element, the STREAM convention). */
double act_stream_triad(int64_t n, int reps);

/* One pass of the triad over arrays the caller owns (initialised), in GB/s. */
double act_triad_once(double *a, const double *b, const double *c, int64_t n);

#endif
