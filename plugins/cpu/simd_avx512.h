/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The vector layer on AVX-512 (F, BW, VL, DQ): 16 float lanes, opmask
 * predicates, masked loads and stores for tails. float16 goes through the
 * AVX-512F conversions (vcvtph2ps / vcvtps2ph). bfloat16 is widened by a
 * shift; it is narrowed by integer rounding, or by vcvtneps2bf16 when
 * FLD_SIMD_AVX512_BF16 is defined (the translation unit must then enable
 * avx512bf16). The contract is in simd_portable.h.
 *
 * Include only from a translation unit compiled for these instructions
 * (isa_avx512.c, isa_avx512_bf16.c).
 */
#ifndef FLD_PLUGIN_CPU_SIMD_H
#define FLD_PLUGIN_CPU_SIMD_H

#include <immintrin.h>
#include <stdint.h>

#include "cpu.h"

#define V_LANES  16
#define V_INLINE static inline __attribute__((always_inline))

typedef __m512 vf;
typedef __mmask16 vmask;

V_INLINE vf v_zero(void)
{
    return _mm512_setzero_ps();
}
V_INLINE vf v_set1(float s)
{
    return _mm512_set1_ps(s);
}
V_INLINE vf v_add(vf a, vf b)
{
    return _mm512_add_ps(a, b);
}
V_INLINE vf v_sub(vf a, vf b)
{
    return _mm512_sub_ps(a, b);
}
V_INLINE vf v_mul(vf a, vf b)
{
    return _mm512_mul_ps(a, b);
}
V_INLINE vf v_div(vf a, vf b)
{
    return _mm512_div_ps(a, b);
}
/* 14-bit estimate, one Newton step: error about 2^-24 (vdivps is ~5x slower). */
V_INLINE vf v_rcp(vf a)
{
    vf r = _mm512_rcp14_ps(a);
    return _mm512_fmadd_ps(r, _mm512_fnmadd_ps(a, r, _mm512_set1_ps(1.0f)), r);
}
V_INLINE vf v_fma(vf a, vf b, vf c)
{
    return _mm512_fmadd_ps(a, b, c);
}
/* Fused on this ISA: the same as v_fma. */
#define v_fma_fused v_fma
V_INLINE vf v_fnma(vf a, vf b, vf c)
{
    return _mm512_fnmadd_ps(a, b, c);
}
V_INLINE vf v_max(vf a, vf b)
{
    return _mm512_max_ps(a, b);
}
V_INLINE vf v_min(vf a, vf b)
{
    return _mm512_min_ps(a, b);
}
V_INLINE vf v_abs(vf a)
{
    return _mm512_abs_ps(a);
}
V_INLINE vf v_neg(vf a)
{
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN)));
}
V_INLINE vf v_copysign(vf mag, vf sgn)
{
    const __m512i sign = _mm512_set1_epi32(INT32_MIN);
    __m512i m = _mm512_andnot_si512(sign, _mm512_castps_si512(mag));
    __m512i s = _mm512_and_si512(sign, _mm512_castps_si512(sgn));
    return _mm512_castsi512_ps(_mm512_or_si512(m, s));
}
V_INLINE float v_hsum(vf a)
{
    return _mm512_reduce_add_ps(a);
}
V_INLINE vmask v_lt(vf a, vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ);
}
V_INLINE vmask v_gt(vf a, vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ);
}
V_INLINE vf v_select(vmask m, vf a, vf b)
{
    return _mm512_mask_blend_ps(m, b, a);
}
V_INLINE vf v_round(vf a)
{
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
V_INLINE vf v_ldexp(vf a, vf n)
{
    return _mm512_scalef_ps(a, n); /* exact; saturates to inf / denormal / 0 */
}
V_INLINE vf v_swap_pairs(vf a)
{
    return _mm512_permute_ps(a, 0xB1);
}

/* ---- memory ----------------------------------------------------------- */

V_INLINE int v_aligned(const void *p, int dt)
{
    return ((uintptr_t)p % (V_LANES * fld__cpu_elem_size(dt))) == 0;
}

V_INLINE vf v_from_bf16(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Round to nearest even by integer arithmetic, NaN made quiet (half.h's rule). */
V_INLINE __m256i v_to_bf16_int(vf v)
{
    __m512i u = _mm512_castps_si512(v);
    __m512i hi = _mm512_srli_epi32(u, 16);
    __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

/*
 * Round to nearest even into the low 16 bits of each lane, NaN made quiet.
 * vcvtneps2bf16 flushes denormal inputs to zero whatever MXCSR says, so the
 * (rare) vectors holding float32 denormals take the integer rounding, which
 * keeps them as bfloat16 denormals like half.h.
 */
#ifdef FLD_SIMD_AVX512_BF16
/* Out of line, so the hot loops keep their registers. */
static __attribute__((noinline, cold)) __m256i v_to_bf16_denormal(vf v)
{
    return v_to_bf16_int(v);
}
#endif

V_INLINE __m256i v_to_bf16(vf v)
{
#ifdef FLD_SIMD_AVX512_BF16
    if (__builtin_expect(_mm512_fpclass_ps_mask(v, 0x20) != 0, 0)) /* 0x20: denormal */
        return v_to_bf16_denormal(v);
    return (__m256i)_mm512_cvtneps_pbh(v);
#else
    return v_to_bf16_int(v);
#endif
}

V_INLINE __m256i v_to_f16(vf v)
{
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

V_INLINE vf v_load(const void *p, int dt)
{
    if (dt == FLD_CPU_F32)
        return _mm512_loadu_ps(p);
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    return dt == FLD_CPU_F16 ? _mm512_cvtph_ps(h) : v_from_bf16(h);
}

V_INLINE vf v_load_n(const void *p, int64_t n, int dt)
{
    __mmask16 m = (__mmask16)((1u << n) - 1u);
    if (dt == FLD_CPU_F32)
        return _mm512_maskz_loadu_ps(m, p);
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return dt == FLD_CPU_F16 ? _mm512_cvtph_ps(h) : v_from_bf16(h);
}

V_INLINE void v_store(void *p, vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        _mm512_storeu_ps(p, v);
    else
        _mm256_storeu_si256((__m256i *)p, dt == FLD_CPU_F16 ? v_to_f16(v) : v_to_bf16(v));
}

V_INLINE void v_store_n(void *p, vf v, int64_t n, int dt)
{
    __mmask16 m = (__mmask16)((1u << n) - 1u);
    if (dt == FLD_CPU_F32)
        _mm512_mask_storeu_ps(p, m, v);
    else
        _mm256_mask_storeu_epi16(p, m, dt == FLD_CPU_F16 ? v_to_f16(v) : v_to_bf16(v));
}

V_INLINE vf v_round_to(vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        return v;
    return dt == FLD_CPU_F16 ? _mm512_cvtph_ps(v_to_f16(v)) : v_from_bf16(v_to_bf16(v));
}

/*
 * Products of two bfloat16 values: round to nearest even on the bits (their NaNs keep zero low
 * bits): u + 0x7fff, plus 1 where the kept part is odd (bit 16, as a mask), low half cleared --
 * four instructions, three deep.
 */
V_INLINE vf v_round_prod(vf v, int dt)
{
    if (dt != FLD_CPU_BF16)
        return v_round_to(v, dt);
    __m512i u = _mm512_castps_si512(v);
    __mmask16 odd = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x10000));
    __m512i r = _mm512_add_epi32(u, _mm512_set1_epi32(0x7fff));
    r = _mm512_mask_add_epi32(r, odd, r, _mm512_set1_epi32(1));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32((int)0xffff0000u)));
}

/* The low 16 bits of 16 dword lanes as float16 / bfloat16 values, widened. */
V_INLINE vf v_widen_low16(__m512i g, int dt)
{
    if (dt == FLD_CPU_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(g, 16));
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* The table has a padding entry: a 4-byte gather at entry 65535 stays inside it. */
V_INLINE vf v_lookup16(const uint16_t *table, const void *p, int dt)
{
    __m512i idx = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return v_widen_low16(_mm512_i32gather_epi32(idx, (const void *)table, 2), dt);
}

V_INLINE vf v_lookup16_n(const uint16_t *table, const void *p, int64_t n, int dt)
{
    __mmask16 m = (__mmask16)((1u << n) - 1u);
    __m512i idx = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, idx, (const void *)table, 2);
    return v_widen_low16(g, dt);
}

V_INLINE void v_stream(void *p, vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        _mm512_stream_ps(p, v);
    else
        _mm256_stream_si256((__m256i *)p, dt == FLD_CPU_F16 ? v_to_f16(v) : v_to_bf16(v));
}

V_INLINE void v_stream_fence(void)
{
    _mm_sfence();
}

#endif
