/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The vector layer, portable edition: 4 float lanes as a GCC/Clang vector
 * type, lowered by the compiler to whatever the target has (SSE2 on any
 * x86-64, Advanced SIMD on arm64, scalar elsewhere). It also defines the
 * layer's contract, which every simd_<isa>.h implements identically:
 *
 *   V_LANES               floats per vector
 *   vf                    a vector of V_LANES floats
 *   vmask                 a per-lane predicate
 *
 *   v_zero() v_set1(s)    constants
 *   v_add v_sub v_mul v_div v_max v_min (a, b)
 *                         v_max/v_min: a NaN in b gives NaN (a NaN in a:
 *                         unspecified), so v_min(hi, v_max(lo, x)) clamps x
 *                         and keeps NaN
 *   v_rcp(a)              about 1/a: relative error below 2^-21 for
 *                         2^-126 <= |a| <= 2^126, NaN gives NaN; other
 *                         inputs unspecified (hardware estimate + Newton)
 *   v_fma(a, b, c)        a * b + c, fused (one rounding) where the ISA has it
 *   v_fnma(a, b, c)       c - a * b, fused likewise
 *   v_fma_fused(a, b, c)  a * b + c with one rounding on every ISA (here a
 *                         C library fmaf per lane: slow, for exact forms)
 *   v_abs(a) v_neg(a)
 *   v_copysign(mag, sgn)  |mag| with the sign bit of sgn
 *   v_hsum(a)             the sum of the lanes (in no particular order)
 *   v_lt(a, b) v_gt(a, b) lane predicates (false for NaN)
 *   v_select(m, a, b)     m ? a : b per lane
 *   v_round(a)            to the nearest integer, ties to even (|a| < 2^31)
 *   v_ldexp(a, n)         a * 2^n per lane, n integral, -252 <= n <= 252;
 *                         overflow gives inf, underflow gives denormals/0
 *   v_swap_pairs(a)       [a1 a0 a3 a2 ...]
 *
 * Rounding to 16-bit storage in registers (dt a compile-time constant):
 *   v_round_to(v, dt)     v rounded to dt and widened back: exactly what
 *                         v_store then v_load give (identity for F32)
 *   v_round_prod(v, dt)   the same for v = a * b with a and b values of dt
 *                         (exact in float32 for 16-bit dt): bfloat16 by
 *                         integer rounding, cheaper, needing no NaN care
 *                         (such a NaN has zero low 16 bits)
 *   v_lookup16(t, p, dt)  V_LANES 16-bit codes at p (float16/bfloat16
 *                         elements) used as indices into table t of 65537
 *                         dt codes (one padding entry), widened: t[p[i]]
 *   v_lookup16_n(t, p, n, dt)  the first n (0 <= n < V_LANES), others 0
 *
 * Memory: dt is FLD_CPU_F32, FLD_CPU_F16 or FLD_CPU_BF16 and should be a
 * compile-time constant (the functions are always inlined so the dtype
 * branches fold away). p needs no alignment unless stated.
 *   v_load(p, dt)           V_LANES elements, widened to float exactly
 *   v_load_n(p, n, dt)      the first n (0 <= n < V_LANES); other lanes 0;
 *                           reads nothing past element n-1
 *   v_store(p, v, dt)       rounds each lane once to dt: nearest even, NaN
 *                           stays a quiet NaN, bit-identical to half.h
 *   v_store_n(p, v, n, dt)  the first n lanes; writes nothing else
 *   v_stream(p, v, dt)      like v_store, non-temporal; p aligned to
 *                           V_LANES * element size (v_aligned(p, dt))
 *   v_stream_fence()        orders earlier v_stream stores (once per range)
 *   v_aligned(p, dt)        whether p may take v_stream
 *
 * The layer is header-only and every function is static inline: each
 * isa_<name>.c gets its own copy compiled for its instruction set.
 */
#ifndef FLD_PLUGIN_CPU_SIMD_H
#define FLD_PLUGIN_CPU_SIMD_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <fldispatch/half.h>

#include "cpu.h"

#define V_LANES  4
#define V_INLINE static inline __attribute__((always_inline))

typedef float vf __attribute__((vector_size(16)));
typedef int32_t vmask __attribute__((vector_size(16)));

V_INLINE vf v_zero(void)
{
    return (vf){0.0f, 0.0f, 0.0f, 0.0f};
}
V_INLINE vf v_set1(float s)
{
    return (vf){s, s, s, s};
}
V_INLINE vf v_add(vf a, vf b)
{
    return a + b;
}
V_INLINE vf v_sub(vf a, vf b)
{
    return a - b;
}
V_INLINE vf v_mul(vf a, vf b)
{
    return a * b;
}
V_INLINE vf v_div(vf a, vf b)
{
    return a / b;
}
/* No estimate instruction to build on: the exact quotient. */
V_INLINE vf v_rcp(vf a)
{
    return v_set1(1.0f) / a;
}
/* Not fused: without hardware FMA, fmaf() is a slow library routine. */
V_INLINE vf v_fma(vf a, vf b, vf c)
{
    return a * b + c;
}
V_INLINE vf v_fma_fused(vf a, vf b, vf c)
{
    vf r = c;
    for (int i = 0; i < V_LANES; i++)
        r[i] = __builtin_fmaf(a[i], b[i], c[i]);
    return r;
}
V_INLINE vf v_fnma(vf a, vf b, vf c)
{
    return c - a * b;
}
V_INLINE vmask v_lt(vf a, vf b)
{
    return a < b;
}
V_INLINE vmask v_gt(vf a, vf b)
{
    return a > b;
}
V_INLINE vf v_select(vmask m, vf a, vf b)
{
    vmask r = (m & (vmask)a) | (~m & (vmask)b);
    return (vf)r;
}
V_INLINE vf v_max(vf a, vf b)
{
    return v_select(v_gt(a, b), a, b);
}
V_INLINE vf v_min(vf a, vf b)
{
    return v_select(v_lt(a, b), a, b);
}
V_INLINE vf v_abs(vf a)
{
    return (vf)((vmask)a & (vmask){0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff});
}
V_INLINE vf v_neg(vf a)
{
    return -a;
}
V_INLINE vf v_copysign(vf mag, vf sgn)
{
    const vmask sign = {INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN};
    return (vf)(((vmask)mag & ~sign) | ((vmask)sgn & sign));
}
V_INLINE float v_hsum(vf a)
{
    return (a[0] + a[2]) + (a[1] + a[3]);
}
V_INLINE vf v_round(vf a)
{
    vf r = v_zero(); /* element-wise fill below; GCC -O2 warns otherwise */
    for (int i = 0; i < V_LANES; i++)
        r[i] = nearbyintf(a[i]); /* the default rounding mode: nearest even */
    return r;
}
/*
 * 2^n as two factors built from exponent bits, each a normal power of two,
 * so |n| up to 252 works (as in simd_avx2.h); a library ldexpf per lane
 * made the activations' exp several times slower.
 */
V_INLINE vf v_ldexp(vf a, vf n)
{
    vmask k = __builtin_convertvector(n, vmask);
    vmask k1 = k >> 1;
    vmask k2 = k - k1;
    vf p1 = (vf)((k1 + 127) << 23);
    vf p2 = (vf)((k2 + 127) << 23);
    return a * p1 * p2;
}
V_INLINE vf v_swap_pairs(vf a)
{
    return (vf){a[1], a[0], a[3], a[2]};
}

/* ---- memory ----------------------------------------------------------- */

/* Whether p may take v_stream: aligned to one vector of dtype dt. */
V_INLINE int v_aligned(const void *p, int dt)
{
    return ((uintptr_t)p % (V_LANES * fld__cpu_elem_size(dt))) == 0;
}

V_INLINE float v_widen1(const void *p, int64_t i, int dt)
{
    if (dt == FLD_CPU_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return dt == FLD_CPU_F16 ? fld_f16_to_f32(h) : fld_bf16_to_f32(h);
}

V_INLINE void v_narrow1(void *p, int64_t i, float v, int dt)
{
    if (dt == FLD_CPU_F32)
        ((float *)p)[i] = v;
    else if (dt == FLD_CPU_F16)
        ((uint16_t *)p)[i] = fld_f32_to_f16(v);
    else
        ((uint16_t *)p)[i] = fld_f32_to_bf16(v);
}

V_INLINE vf v_load(const void *p, int dt)
{
    if (dt == FLD_CPU_F32) {
        vf r = v_zero(); /* element-wise fill below; GCC -O2 warns otherwise */
        memcpy(&r, p, sizeof r);
        return r;
    }
    vf r = v_zero(); /* element-wise fill below; GCC -O2 warns otherwise */
    for (int i = 0; i < V_LANES; i++)
        r[i] = v_widen1(p, i, dt);
    return r;
}

V_INLINE vf v_load_n(const void *p, int64_t n, int dt)
{
    vf r = v_zero();
    for (int64_t i = 0; i < n; i++)
        r[i] = v_widen1(p, i, dt);
    return r;
}

V_INLINE void v_store(void *p, vf v, int dt)
{
    if (dt == FLD_CPU_F32) {
        memcpy(p, &v, sizeof v);
        return;
    }
    for (int i = 0; i < V_LANES; i++)
        v_narrow1(p, i, v[i], dt);
}

V_INLINE void v_store_n(void *p, vf v, int64_t n, int dt)
{
    for (int64_t i = 0; i < n; i++)
        v_narrow1(p, i, v[i], dt);
}

V_INLINE vf v_round_to(vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        return v;
    vf r = v_zero(); /* element-wise fill below; GCC -O2 warns otherwise */
    for (int i = 0; i < V_LANES; i++)
        r[i] = dt == FLD_CPU_F16 ? fld_f16_to_f32(fld_f32_to_f16(v[i]))
                                 : fld_bf16_to_f32(fld_f32_to_bf16(v[i]));
    return r;
}

V_INLINE vf v_round_prod(vf v, int dt)
{
    return v_round_to(v, dt);
}

V_INLINE vf v_lookup16(const uint16_t *table, const void *p, int dt)
{
    uint16_t codes[V_LANES];
    for (int i = 0; i < V_LANES; i++)
        codes[i] = table[((const uint16_t *)p)[i]];
    return v_load(codes, dt);
}

V_INLINE vf v_lookup16_n(const uint16_t *table, const void *p, int64_t n, int dt)
{
    uint16_t codes[V_LANES] = {0};
    for (int64_t i = 0; i < n; i++)
        codes[i] = table[((const uint16_t *)p)[i]];
    return v_load_n(codes, n, dt);
}

/* No portable non-temporal store: an ordinary one. */
V_INLINE void v_stream(void *p, vf v, int dt)
{
    v_store(p, v, dt);
}

V_INLINE void v_stream_fence(void) {}

#endif
