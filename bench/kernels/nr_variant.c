/* SPDX-License-Identifier: Apache-2.0 */
/*
 * One instruction set's norm and rotary kernels for the harness: the same
 * shape as an isa_<name>.c, compiled once per layer with
 *   -DNR_LAYER='"simd_avx512.h"' -DNR_NAME=nr_variant_avx512 -DNR_STR='"avx512"'
 * (plus -DFLD_SIMD_AVX512_BF16 for avx512_bf16) and that layer's flags.
 */
#include NR_LAYER
#include "body_norm.h"
#include "body_rotary.h"
#include "nr_harness.h"

const struct fld_cpu_variant NR_NAME = {NR_STR, NULL, norm_range, rotary_range};
