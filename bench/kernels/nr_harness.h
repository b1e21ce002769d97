/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The normrot harness (norm and rotary bodies): variant tables built from
 * nr_variant.c once per instruction set. Standalone: needs only cpu.h,
 * plugin.h (types) and half.h, no library. Another build's kernels are
 * compared through the tool: bench/compare_kernels.py.
 */
#ifndef NR_HARNESS_H
#define NR_HARNESS_H

#include "cpu.h"

/*
 * Defined by nr_variant.c compiled once per layer (act is NULL), or, with
 * NR_REAL_ISA, the real isa_<name>.c files (all three bodies).
 */
#ifdef NR_REAL_ISA
#define nr_variant_portable    fld__cpu_variant_portable
#define nr_variant_avx2        fld__cpu_variant_avx2
#define nr_variant_avx512      fld__cpu_variant_avx512
#define nr_variant_avx512_bf16 fld__cpu_variant_avx512_bf16
#define nr_variant_neon        fld__cpu_variant_neon
#endif
extern const struct fld_cpu_variant nr_variant_portable;
#if defined(__x86_64__)
extern const struct fld_cpu_variant nr_variant_avx2;
extern const struct fld_cpu_variant nr_variant_avx512;
extern const struct fld_cpu_variant nr_variant_avx512_bf16;
#endif
#if defined(__aarch64__)
extern const struct fld_cpu_variant nr_variant_neon;
#endif

/* Variants this machine can run, best first; returns the count (nr_select.c). */
int nr_variants(const struct fld_cpu_variant **v, int max);

#endif
