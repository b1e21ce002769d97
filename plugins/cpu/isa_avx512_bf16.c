/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The avx512_bf16 variant: the avx512 layer with bfloat16 narrowing done by
 * vcvtneps2bf16 (FLD_SIMD_AVX512_BF16) instead of integer rounding.
 * Compiled with the avx512 flags plus -mavx512bf16 (plugins/cpu/plugin.mk).
 */
#if defined(__x86_64__)

#define FLD_SIMD_AVX512_BF16 1
#include "simd_avx512.h"

#include "vmath.h"

#include "body_activation.h"
#include "body_norm.h"
#include "body_rotary.h"

const struct fld_cpu_variant fld__cpu_variant_avx512_bf16 = {"avx512_bf16", act_range, norm_range,
                                                             rotary_range};

#endif
