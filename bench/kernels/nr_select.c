/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The norm/rotary variants this machine runs, best first (nr_harness.h).
 * Compiled once for nr_variant.c's tables and once with -DNR_REAL_ISA for
 * the real isa_<name>.c files.
 */
#include "nr_harness.h"

#ifdef NR_REAL_ISA
/* Set by the plugin at load (cpu_plugin.c); the real isa_<name>.c files read it. */
bool fld__cpu_lookup_scalar = false;
bool fld__cpu_act16_compute = false;
#endif

int nr_variants(const struct fld_cpu_variant **v, int max)
{
    int n = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (n < max && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        v[n++] = &nr_variant_avx512_bf16;
    if (n < max && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        v[n++] = &nr_variant_avx512;
    if (n < max && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        v[n++] = &nr_variant_avx2;
#endif
#if defined(__aarch64__)
    if (n < max)
        v[n++] = &nr_variant_neon;
#endif
    if (n < max)
        v[n++] = &nr_variant_portable;
    return n;
}
