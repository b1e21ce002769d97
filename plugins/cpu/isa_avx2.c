/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The avx2 variant: the kernel bodies on the AVX2 + FMA + F16C layer
 * (8 lanes). Compiled with -mavx2 -mfma -mf16c (plugins/cpu/plugin.mk); isa.c runs it
 * only where cpuid and xgetbv say the CPU and the OS support all three.
 */
#if defined(__x86_64__)

#include "simd_avx2.h"

#include "vmath.h"

#include "body_activation.h"
#include "body_norm.h"
#include "body_rotary.h"

const struct fld_cpu_variant fld__cpu_variant_avx2 = {"avx2", act_range, norm_range, rotary_range};

#endif
