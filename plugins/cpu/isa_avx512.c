/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The avx512 variant: the kernel bodies on the AVX-512 F/BW/VL/DQ layer
 * (16 lanes, opmask tails). Compiled with -mavx512f -mavx512bw -mavx512vl
 * -mavx512dq -mavx2 -mfma -mf16c (plugins/cpu/plugin.mk); isa.c runs it only where the
 * CPU has all of them and the OS saves the opmask and ZMM state.
 */
#if defined(__x86_64__)

#include "simd_avx512.h"

#include "vmath.h"

#include "body_activation.h"
#include "body_norm.h"
#include "body_rotary.h"

const struct fld_cpu_variant fld__cpu_variant_avx512 = {"avx512", act_range, norm_range,
                                                        rotary_range};

#endif
