/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The vector layer on AVX2 + FMA + F16C: 8 float lanes, all-ones lane
 * masks as predicates. Tails go through a small stack buffer (AVX2 has no
 * masked 16-bit loads). The contract is in simd_portable.h.
 *
 * Include only from a translation unit compiled for these instructions
 * (isa_avx2.c).
 */
#ifndef FLD_PLUGIN_CPU_SIMD_H
#define FLD_PLUGIN_CPU_SIMD_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"

#define V_LANES  8
#define V_INLINE static inline __attribute__((always_inline))

typedef __m256 vf;
typedef __m256 vmask;

V_INLINE vf v_zero(void)
{
    return _mm256_setzero_ps();
}
V_INLINE vf v_set1(float s)
{
    return _mm256_set1_ps(s);
}
V_INLINE vf v_add(vf a, vf b)
{
    return _mm256_add_ps(a, b);
}
V_INLINE vf v_sub(vf a, vf b)
{
    return _mm256_sub_ps(a, b);
}
V_INLINE vf v_mul(vf a, vf b)
{
    return _mm256_mul_ps(a, b);
}
V_INLINE vf v_div(vf a, vf b)
{
    return _mm256_div_ps(a, b);
}
/* 12-bit estimate (error <= 1.5 * 2^-12), one Newton step: below 2^-22. */
V_INLINE vf v_rcp(vf a)
{
    vf r = _mm256_rcp_ps(a);
    return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(a, r, _mm256_set1_ps(1.0f)), r);
}
V_INLINE vf v_fma(vf a, vf b, vf c)
{
    return _mm256_fmadd_ps(a, b, c);
}
/* Fused on this ISA: the same as v_fma. */
#define v_fma_fused v_fma
V_INLINE vf v_fnma(vf a, vf b, vf c)
{
    return _mm256_fnmadd_ps(a, b, c);
}
V_INLINE vf v_max(vf a, vf b)
{
    return _mm256_max_ps(a, b);
}
V_INLINE vf v_min(vf a, vf b)
{
    return _mm256_min_ps(a, b);
}
V_INLINE vf v_abs(vf a)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a);
}
V_INLINE vf v_neg(vf a)
{
    return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f));
}
V_INLINE vf v_copysign(vf mag, vf sgn)
{
    const vf sign = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(sign, mag), _mm256_and_ps(sign, sgn));
}
V_INLINE float v_hsum(vf a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 0x55));
    return _mm_cvtss_f32(s);
}
V_INLINE vmask v_lt(vf a, vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_LT_OQ);
}
V_INLINE vmask v_gt(vf a, vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_GT_OQ);
}
V_INLINE vf v_select(vmask m, vf a, vf b)
{
    return _mm256_blendv_ps(b, a, m);
}
V_INLINE vf v_round(vf a)
{
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* 2^n as two factors, each a normal power of two, so |n| up to 252 works. */
V_INLINE vf v_ldexp(vf a, vf n)
{
    __m256i k = _mm256_cvtps_epi32(n);
    __m256i k1 = _mm256_srai_epi32(k, 1);
    __m256i k2 = _mm256_sub_epi32(k, k1);
    const __m256i bias = _mm256_set1_epi32(127);
    vf p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
    vf p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(a, p1), p2);
}
V_INLINE vf v_swap_pairs(vf a)
{
    return _mm256_permute_ps(a, 0xB1);
}

/* ---- memory ----------------------------------------------------------- */

V_INLINE int v_aligned(const void *p, int dt)
{
    return ((uintptr_t)p % (V_LANES * fld__cpu_elem_size(dt))) == 0;
}

V_INLINE vf v_from_bf16(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Round to nearest even, NaN made quiet; 8 results packed in 128 bits. */
V_INLINE __m128i v_to_bf16(vf v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i hi = _mm256_srli_epi32(u, 16);
    __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    /* packus works within 128-bit halves: [r0-3 r0-3 | r4-7 r4-7]; gather the quads. */
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    return _mm256_castsi256_si128(packed);
}

V_INLINE __m128i v_to_f16(vf v)
{
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

V_INLINE vf v_load(const void *p, int dt)
{
    if (dt == FLD_CPU_F32)
        return _mm256_loadu_ps(p);
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return dt == FLD_CPU_F16 ? _mm256_cvtph_ps(h) : v_from_bf16(h);
}

V_INLINE vf v_load_n(const void *p, int64_t n, int dt)
{
    unsigned char buf[32] = {0};
    memcpy(buf, p, (size_t)n * fld__cpu_elem_size(dt));
    return v_load(buf, dt);
}

V_INLINE void v_store(void *p, vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        _mm256_storeu_ps(p, v);
    else
        _mm_storeu_si128((__m128i *)p, dt == FLD_CPU_F16 ? v_to_f16(v) : v_to_bf16(v));
}

V_INLINE void v_store_n(void *p, vf v, int64_t n, int dt)
{
    unsigned char buf[32];
    v_store(buf, v, dt);
    memcpy(p, buf, (size_t)n * fld__cpu_elem_size(dt));
}

V_INLINE vf v_round_to(vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        return v;
    return dt == FLD_CPU_F16 ? _mm256_cvtph_ps(v_to_f16(v)) : v_from_bf16(v_to_bf16(v));
}

/* Products of two bfloat16 values: round to nearest even on the bits (their NaNs keep zero low
 * bits). */
V_INLINE vf v_round_prod(vf v, int dt)
{
    if (dt != FLD_CPU_BF16)
        return v_round_to(v, dt);
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/* The low 16 bits of 8 dword lanes as 8 float16 / bfloat16 values, widened. */
V_INLINE vf v_widen_low16(__m256i g, int dt)
{
    if (dt == FLD_CPU_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(g, 16));
    __m256i lo = _mm256_and_si256(g, _mm256_set1_epi32(0xffff));
    __m128i h = _mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1));
    return _mm256_cvtph_ps(h);
}

/*
 * 8 table entries at the 16-bit codes c[0..7], as 8 float16 / bfloat16
 * values packed in 128 bits: 16 scalar loads (Zen 3 has three load ports),
 * each entry inserted into its word (pinsrw). On AMD's AVX2 cores the
 * gather costs more than that (fld__cpu_lookup_scalar). Assembling the
 * entries in two 64-bit registers by shifts and ors instead took 1.07-1.16x
 * (float16) and 1.25-1.55x (bfloat16) the inserts' time in the 16-bit
 * activations on Zen 3, and two chains of four inserts joined at the end
 * were no faster than one (docs/BENCHMARKS.md, "Measured choices").
 */
V_INLINE __m128i v_lookup16_scalar(const uint16_t *table, const uint16_t *c)
{
    __m128i r = _mm_cvtsi32_si128(table[c[0]]);
    r = _mm_insert_epi16(r, table[c[1]], 1);
    r = _mm_insert_epi16(r, table[c[2]], 2);
    r = _mm_insert_epi16(r, table[c[3]], 3);
    r = _mm_insert_epi16(r, table[c[4]], 4);
    r = _mm_insert_epi16(r, table[c[5]], 5);
    r = _mm_insert_epi16(r, table[c[6]], 6);
    return _mm_insert_epi16(r, table[c[7]], 7);
}

/*
 * The same with the codes read as two 64-bit words and split by shifts:
 * 2 loads for the codes instead of 8. On Zen 3 faster for the float16
 * activations and the elementwise stores below, not for bfloat16 rows
 * widened for a product (v_lookup16, v_bf16_pair_lookup), which keep
 * v_lookup16_scalar.
 */
V_INLINE __m128i v_lookup16_scalar_words(const uint16_t *table, const uint16_t *c)
{
    uint64_t lo, hi;
    memcpy(&lo, c, sizeof lo);
    memcpy(&hi, c + 4, sizeof hi);
    __m128i r = _mm_cvtsi32_si128(table[(uint16_t)lo]);
    r = _mm_insert_epi16(r, table[(uint16_t)(lo >> 16)], 1);
    r = _mm_insert_epi16(r, table[(uint16_t)(lo >> 32)], 2);
    r = _mm_insert_epi16(r, table[lo >> 48], 3);
    r = _mm_insert_epi16(r, table[(uint16_t)hi], 4);
    r = _mm_insert_epi16(r, table[(uint16_t)(hi >> 16)], 5);
    r = _mm_insert_epi16(r, table[(uint16_t)(hi >> 32)], 6);
    return _mm_insert_epi16(r, table[hi >> 48], 7);
}

V_INLINE vf v_widen16(__m128i h, int dt)
{
    return dt == FLD_CPU_BF16 ? v_from_bf16(h) : _mm256_cvtph_ps(h);
}

/*
 * The table entries at the 8 codes at p, each in the low 16 bits of a dword
 * lane (the high bits are the next entry's). The table has a padding entry:
 * a 4-byte gather at entry 65535 stays inside it.
 */
V_INLINE __m256i v_gather16(const uint16_t *table, const void *p)
{
    __m256i idx = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_i32gather_epi32((const int *)(const void *)table, idx, 2);
}

V_INLINE vf v_lookup16(const uint16_t *table, const void *p, int dt)
{
    if (fld__cpu_lookup_scalar)
        return v_widen16(dt == FLD_CPU_BF16 ? v_lookup16_scalar(table, p)
                                            : v_lookup16_scalar_words(table, p),
                         dt);
    return v_widen_low16(v_gather16(table, p), dt);
}

/*
 * V_LOOKUP16_STORE: the V_LANES table entries at the 16-bit codes at p,
 * stored at o as they are (the entries are the results: no widening and
 * narrowing); stream: o is vector-aligned and the store non-temporal.
 */
#define V_LOOKUP16_STORE 1

V_INLINE void v_lookup16_store(const uint16_t *table, const void *p, void *o, int stream)
{
    __m128i r;
    if (fld__cpu_lookup_scalar) {
        r = v_lookup16_scalar_words(table, p);
    } else {
        __m256i g = _mm256_and_si256(v_gather16(table, p), _mm256_set1_epi32(0xffff));
        r = _mm_packus_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1));
    }
    if (stream)
        _mm_stream_si128((__m128i *)o, r);
    else
        _mm_storeu_si128((__m128i *)o, r);
}

V_INLINE vf v_lookup16_n(const uint16_t *table, const void *p, int64_t n, int dt)
{
    uint16_t codes[V_LANES] = {0};
    memcpy(codes, p, (size_t)n * 2u);
    vf v = v_widen16(v_lookup16_scalar(table, codes), dt);
    /* lanes past n looked up entry 0; zero them as v_load_n does */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_ps(v,
                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lane)));
}

V_INLINE void v_stream(void *p, vf v, int dt)
{
    if (dt == FLD_CPU_F32)
        _mm256_stream_ps(p, v);
    else
        _mm_stream_si128((__m128i *)p, dt == FLD_CPU_F16 ? v_to_f16(v) : v_to_bf16(v));
}

V_INLINE void v_stream_fence(void)
{
    _mm_sfence();
}

/* ---- bfloat16 in pairs (body_norm.h, body_rotary.h) ---------------------
 *
 * V_BF16_PAIRS: 2 * V_LANES bfloat16 elements as two vectors, a holding the
 * even elements and b the odd ones (lane k: elements 2k and 2k + 1), so a
 * 256-bit load widens with one shift and one mask, and a pair of rounded
 * values packs back with one shift and one 16-bit blend: no shuffles
 * across lanes. Every operand
 * of a loop loaded this way is in the same order, so elementwise work
 * needs no reordering.
 */
#define V_BF16_PAIRS 1

V_INLINE void v_bf16_pair_load(const void *p, vf *a, vf *b)
{
    const __m256i r = _mm256_loadu_si256((const __m256i *)p);
    *a = _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
    *b = _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
}

/*
 * v rounded to the nearest-even bfloat16: in the high 16 bits of each lane
 * (the low 16 bits unspecified). v_store's result for v computed from
 * bfloat16 values and finite floats by x86 arithmetic: such a NaN is an
 * operand's NaN made quiet or the default NaN, both with zero low 16 bits
 * and the quiet bit set, so adding the rounding bias leaves it as it is,
 * as half.h's (u >> 16) | 0x40 does.
 */
V_INLINE vf v_bf16_round_hi(vf v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    return _mm256_castsi256_ps(r);
}

/* The same as a float: the rounded value (low 16 bits zero). */
V_INLINE vf v_bf16_round(vf v)
{
    return _mm256_and_ps(v_bf16_round_hi(v),
                         _mm256_castsi256_ps(_mm256_set1_epi32((int)0xffff0000u)));
}

/* The high 16 bits of each lane of a pair, packed back into element order. */
V_INLINE __m256i v_bf16_pair_pack(vf a, vf b)
{
    return _mm256_blend_epi16(_mm256_srli_epi32(_mm256_castps_si256(a), 16), _mm256_castps_si256(b),
                              0xAA);
}

/* Stores a pair of v_bf16_round or v_bf16_round_hi results. */
V_INLINE void v_bf16_pair_store(void *p, vf a, vf b)
{
    _mm256_storeu_si256((__m256i *)p, v_bf16_pair_pack(a, b));
}

/* The same, non-temporal; p aligned to 2 * V_LANES * 2 bytes. */
V_INLINE void v_bf16_pair_stream(void *p, vf a, vf b)
{
    _mm256_stream_si256((__m256i *)p, v_bf16_pair_pack(a, b));
}

/*
 * The table entries (bfloat16) at the 2 * V_LANES bfloat16 codes at p, as a
 * pair: a the entries of the even elements, b of the odd ones. Scalar
 * loads (fld__cpu_lookup_scalar): the 16 entries packed in element order,
 * then split as v_bf16_pair_load splits a row; gathers: one for the even
 * codes (the low halves of the code words) and one for the odd ones.
 */
V_INLINE void v_bf16_pair_lookup(const uint16_t *table, const void *p, vf *a, vf *b)
{
    if (fld__cpu_lookup_scalar) {
        const uint16_t *c = p;
        const __m256i r =
            _mm256_inserti128_si256(_mm256_castsi128_si256(v_lookup16_scalar(table, c)),
                                    v_lookup16_scalar(table, c + 8), 1);
        *a = _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
        *b = _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u)));
        return;
    }
    const __m256i codes = _mm256_loadu_si256((const __m256i *)p);
    const int *t = (const int *)(const void *)table;
    const __m256i even = _mm256_and_si256(codes, _mm256_set1_epi32(0xffff));
    const __m256i odd = _mm256_srli_epi32(codes, 16);
    *a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_i32gather_epi32(t, even, 2), 16));
    *b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_i32gather_epi32(t, odd, 2), 16));
}

/* ---- 16-bit activations computed in float32 (body_activation.h) -------- */

/*
 * The layer rounds an activation computed in float32 to the 16-bit dtype
 * and says in which lanes that rounding is not certain (body_activation.h
 * takes this path where V_ROUND16_BOUND is defined).
 */
#define V_ROUND16_BOUND 1

/*
 * v rounded to dt (float16 or bfloat16), widened back to float32, for
 * values known only to within t (t >= 0) of v: *unsure gets a bit for each
 * lane where some value of [v - t, v + t] rounds differently from v; the
 * other lanes are the rounding of every value in that interval. Rounding
 * to nearest is monotonic, so comparing the roundings of the two ends
 * suffices. float16: both ends through vcvtps2ph. bfloat16: on the
 * magnitudes' bits, the low end with a tie rounded down and the high end
 * with a tie rounded up, so that an interval touching a midpoint is unsure
 * too; the sign is v's. An end below zero, an infinity or a NaN makes the
 * lane unsure (the caller treats NaN inputs apart: see v_lanes_not_ge).
 */
V_INLINE vf v_round16_bound(vf v, vf t, int dt, unsigned *unsure)
{
    if (dt == FLD_CPU_F16) {
        __m128i lo = v_to_f16(_mm256_sub_ps(v, t)), hi = v_to_f16(_mm256_add_ps(v, t));
        *unsure = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi16(lo, hi)) ^ 0xffffu;
        return _mm256_cvtph_ps(lo);
    }
    const __m256i keep = _mm256_set1_epi32((int)0xffff0000u);
    vf m = v_abs(v);
    __m256i lo = _mm256_castps_si256(_mm256_sub_ps(m, t));
    __m256i hi = _mm256_castps_si256(_mm256_add_ps(m, t));
    lo = _mm256_and_si256(_mm256_add_epi32(lo, _mm256_set1_epi32(0x7fff)), keep);
    hi = _mm256_and_si256(_mm256_add_epi32(hi, _mm256_set1_epi32(0x8000)), keep);
    *unsure = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(lo, hi))) ^ 0xffu;
    return _mm256_or_ps(_mm256_castsi256_ps(lo), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
}

/*
 * p 2^n for k = n + VM_ROUNDER (vmath.h: the rounding by a magic number
 * leaves n in k's low mantissa bits), n in [-126, 127] and p in [0.5, 2]:
 * one integer add to p's exponent (v_ldexp's two factors take any n).
 */
V_INLINE vf v_scale_rounded(vf p, vf k)
{
    return _mm256_castsi256_ps(
        _mm256_add_epi32(_mm256_castps_si256(p), _mm256_slli_epi32(_mm256_castps_si256(k), 23)));
}

/* A bit for each lane where a >= lo is false (a below lo, or NaN). */
V_INLINE unsigned v_lanes_not_ge(vf a, vf lo)
{
    return (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(a, lo, _CMP_NGE_UQ));
}

#endif
