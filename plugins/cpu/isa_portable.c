/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The portable variant: the kernel bodies on the portable vector layer
 * (GCC/Clang vector types, 4 lanes), compiled with the build's baseline
 * flags on every architecture. The fallback when nothing better runs.
 */
#include "simd_portable.h"

#include "vmath.h"

#include "body_activation.h"
#include "body_norm.h"
#include "body_rotary.h"

const struct fld_cpu_variant fld__cpu_variant_portable = {"portable", act_range, norm_range,
                                                          rotary_range};
