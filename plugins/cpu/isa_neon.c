/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The neon variant: the kernel bodies on the arm64 Advanced SIMD layer
 * (4 lanes). NEON is mandatory on AArch64, so no extra flags are needed;
 * the variant exists only in arm64 builds.
 */
#if defined(__aarch64__)

#include "simd_neon.h"

#include "vmath.h"

#include "body_activation.h"
#include "body_norm.h"
#include "body_rotary.h"

const struct fld_cpu_variant fld__cpu_variant_neon = {"neon", act_range, norm_range, rotary_range};

#endif
