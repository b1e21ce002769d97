/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The vector layer on arm64 Advanced SIMD (NEON, mandatory on AArch64):
 * 4 float lanes, float16 through the FCVTL/FCVTN conversions (round to
 * nearest even under the default FPCR), bfloat16 by shifts and integer
 * rounding. Tails go through a small stack buffer. The contract is in
 * simd_portable.h. arm64 has no non-temporal vector store worth using
 * here (STNP is a hint), so v_stream is an ordinary store.
 */
#ifndef FLD_PLUGIN_CPU_SIMD_H
#define FLD_PLUGIN_CPU_SIMD_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"

#define V_LANES  4
#define V_INLINE static inline __attribute__((always_inline))

typedef float32x4_t vf;
typedef uint32x4_t vmask;

V_INLINE vf v_zero(void)
{
    return vdupq_n_f32(0.0f);
}
V_INLINE vf v_set1(float s)
{
    return vdupq_n_f32(s);
}
V_INLINE vf v_add(vf a, vf b)
{
    return vaddq_f32(a, b);
}
V_INLINE vf v_sub(vf a, vf b)
{
    return vsubq_f32(a, b);
}
V_INLINE vf v_mul(vf a, vf b)
{
    return vmulq_f32(a, b);
}
V_INLINE vf v_div(vf a, vf b)
{
    return vdivq_f32(a, b);
}
/* 8-bit estimate, two Newton steps (FRECPS): error about 2^-23. */
V_INLINE vf v_rcp(vf a)
{
    vf r = vrecpeq_f32(a);
    r = vmulq_f32(r, vrecpsq_f32(a, r));
    return vmulq_f32(r, vrecpsq_f32(a, r));
}
V_INLINE vf v_fma(vf a, vf b, vf c)
{
    return vfmaq_f32(c, a, b);
}
/* Fused on this ISA: the same as v_fma. */
#define v_fma_fused v_fma
V_INLINE vf v_fnma(vf a, vf b, vf c)
{
    return vfmsq_f32(c, a, b);
}
V_INLINE vf v_max(vf a, vf b)
{
    return vmaxq_f32(a, b);
}
V_INLINE vf v_min(vf a, vf b)
{
    return vminq_f32(a, b);
}
V_INLINE vf v_abs(vf a)
{
    return vabsq_f32(a);
}
V_INLINE vf v_neg(vf a)
{
    return vnegq_f32(a);
}
V_INLINE vf v_copysign(vf mag, vf sgn)
{
    return vbslq_f32(vdupq_n_u32(0x80000000u), sgn, mag);
}
V_INLINE float v_hsum(vf a)
{
    return vaddvq_f32(a);
}
V_INLINE vmask v_lt(vf a, vf b)
{
    return vcltq_f32(a, b);
}
V_INLINE vmask v_gt(vf a, vf b)
{
    return vcgtq_f32(a, b);
}
V_INLINE vf v_select(vmask m, vf a, vf b)
{
    return vbslq_f32(m, a, b);
}
V_INLINE vf v_round(vf a)
{
    return vrndnq_f32(a);
}
V_INLINE vf v_ldexp(vf a, vf n)
{
    int32x4_t k = vcvtnq_s32_f32(n);
    int32x4_t k1 = vshrq_n_s32(k, 1);
    int32x4_t k2 = vsubq_s32(k, k1);
    const int32x4_t bias = vdupq_n_s32(127);
    vf p1 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k1, bias), 23));
    vf p2 = vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(k2, bias), 23));
    return vmulq_f32(vmulq_f32(a, p1), p2);
}
V_INLINE vf v_swap_pairs(vf a)
{
    return vrev64q_f32(a);
}

/* ---- memory ----------------------------------------------------------- */

V_INLINE int v_aligned(const void *p, int dt)
{
    return ((uintptr_t)p % (V_LANES * fld__cpu_elem_size(dt))) == 0;
}

V_INLINE uint16x4_t v_to_bf16(vf v)
{
    uint32x4_t u = vreinterpretq_u32_f32(v);
    uint32x4_t hi = vshrq_n_u32(u, 16);
    uint32x4_t lsb = vandq_u32(hi, vdupq_n_u32(1));
    uint32x4_t r = vshrq_n_u32(vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff))), 16);
    uint32x4_t nan = vmvnq_u32(vceqq_f32(v, v));
    r = vbslq_u32(nan, vorrq_u32(hi, vdupq_n_u32(0x40)), r);
    return vmovn_u32(r);
}

V_INLINE vf v_load(const void *p, int dt)
{
    if (dt == FLD_CPU_F32)
        return vld1q_f32(p);
    uint16x4_t h = vld1_u16(p);
    if (dt == FLD_CPU_F16)
        return vcvt_f32_f16(vreinterpret_f16_u16(h));
    return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
}

V_INLINE vf v_load_n(const void *p, int64_t n, int dt)
{
    unsigned char buf[16] = {0};
    memcpy(buf, p, (size_t)n * fld__cpu_elem_size(dt));
    return v_load(buf, dt);
}

V_INLINE void v_store(void *p, vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        vst1q_f32(p, v);
    else if (dt == FLD_CPU_F16)
        vst1_u16(p, vreinterpret_u16_f16(vcvt_f16_f32(v)));
    else
        vst1_u16(p, v_to_bf16(v));
}

V_INLINE void v_store_n(void *p, vf v, int64_t n, int dt)
{
    unsigned char buf[16];
    v_store(buf, v, dt);
    memcpy(p, buf, (size_t)n * fld__cpu_elem_size(dt));
}

V_INLINE vf v_round_to(vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        return v;
    if (dt == FLD_CPU_F16)
        return vcvt_f32_f16(vcvt_f16_f32(v));
    return vreinterpretq_f32_u32(vshll_n_u16(v_to_bf16(v), 16));
}

/* Products of two bfloat16 values: round to nearest even on the bits (their NaNs keep zero low
 * bits). */
V_INLINE vf v_round_prod(vf v, int dt)
{
    if (dt != FLD_CPU_BF16)
        return v_round_to(v, dt);
    uint32x4_t u = vreinterpretq_u32_f32(v);
    uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    uint32x4_t r = vaddq_u32(u, vaddq_u32(lsb, vdupq_n_u32(0x7fff)));
    return vreinterpretq_f32_u32(vandq_u32(r, vdupq_n_u32(0xffff0000u)));
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

V_INLINE void v_stream(void *p, vf v, int dt)
{
    v_store(p, v, dt);
}

V_INLINE void v_stream_fence(void) {}

#endif
