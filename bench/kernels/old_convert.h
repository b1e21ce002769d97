/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The widening and rounding loops of the plain-loop kernels the cpu plugin
 * had before the vector rewrite (float32 scratch chunks, one element at a time), shared
 * by act_old.c and nr_old.c for the speed comparison.
 */
#ifndef FLD_BENCH_KERNELS_OLD_CONVERT_H
#define FLD_BENCH_KERNELS_OLD_CONVERT_H

#include <stdint.h>
#include <string.h>

#include <fldispatch/half.h>

#include "cpu.h"

#define OLD_CHUNK 256

static inline void old_load(float *dst, const void *src, int64_t n, int dt)
{
    if (dt == FLD_CPU_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
    } else if (dt == FLD_CPU_F16) {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = fld_f16_to_f32(s[i]);
    } else {
        const uint16_t *s = src;
        for (int64_t i = 0; i < n; i++)
            dst[i] = fld_bf16_to_f32(s[i]);
    }
}

static inline void old_store(void *dst, const float *src, int64_t n, int dt)
{
    if (dt == FLD_CPU_F32) {
        memmove(dst, src, (size_t)n * sizeof(float));
    } else if (dt == FLD_CPU_F16) {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = fld_f32_to_f16(src[i]);
    } else {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = fld_f32_to_bf16(src[i]);
    }
}

#endif
