/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Portability layer of the GPU kernels: one kernel source (gpu_kernels.cuh)
 * for three compilers.
 *
 *   nvcc   (__CUDACC__)       CUDA device code, warp 32
 *   hipcc  (__HIPCC__)        HIP device code; the warp (wavefront) is 64 on
 *                             CDNA (gfx90a, gfx908) and 32 on RDNA (gfx1030),
 *                             so warp code reads FLD_GPU_WARP_SIZE at run time
 *   g++    (FLD_GPU_EMULATE)  the host emulator of gpu_emu.h, which runs
 *                             each block's threads as cooperative fibers
 *
 * The kernels use the CUDA spellings (__global__, threadIdx, __syncthreads,
 * __shared__); under the emulator this file defines them. What differs per
 * target is behind fld__gpu_* helpers: 16-bit conversions, 128-bit vector
 * loads and stores, the warp-sum shuffle, the launch, and the runtime's
 * "invalid value" error code.
 *
 * No GPU was available where this was written: the device builds were
 * compiled (nvcc 13.0 for sm_80/sm_90, hipcc 5.2 for gfx90a/gfx908/gfx1030)
 * but have only ever run under the emulator.
 */
#ifndef FLD_PLUGINS_GPU_COMPAT_CUH
#define FLD_PLUGINS_GPU_COMPAT_CUH

#include <stddef.h>
#include <stdint.h>

#include "gpu_api.h"

#if defined(__HIPCC__)
/* ---------------------------------------------------------------- HIP -- */
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#define FLD_GPU_TARGET_HIP 1
#define FLD_GPU_UNROLL     _Pragma("unroll")
#define FLD_GPU_DEV        __device__ __forceinline__
#define FLD_GPU_DEV_HOST   __host__ __device__ __forceinline__
#define FLD_GPU_EINVAL     ((int)hipErrorInvalidValue)
#define FLD_GPU_WARP_SIZE  warpSize
typedef uint4 fld__gpu_vec16;
typedef hipStream_t fld__gpu_stream_t;

#elif defined(__CUDACC__)
/* --------------------------------------------------------------- CUDA -- */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define FLD_GPU_TARGET_CUDA 1
#define FLD_GPU_UNROLL      _Pragma("unroll")
#define FLD_GPU_DEV         __device__ __forceinline__
#define FLD_GPU_DEV_HOST    __host__ __device__ __forceinline__
#define FLD_GPU_EINVAL      ((int)cudaErrorInvalidValue)
#define FLD_GPU_WARP_SIZE   32
typedef uint4 fld__gpu_vec16;
typedef cudaStream_t fld__gpu_stream_t;

#elif defined(FLD_GPU_EMULATE)
/* ----------------------------------------------------------- emulator -- */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/half.h>

#include "gpu_emu.h"

#define FLD_GPU_TARGET_EMU 1
#define FLD_GPU_UNROLL     /* the host compiler unrolls as it sees fit */
#define FLD_GPU_DEV        inline
#define FLD_GPU_DEV_HOST   inline
#define FLD_GPU_EINVAL     FLD_EMU_ERR_INVALID_VALUE
#define FLD_GPU_WARP_SIZE  (fld_emu::warp_size())
typedef void *fld__gpu_stream_t;

/* The CUDA spellings the kernels use. */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* One copy per (emulator) OS thread: blocks run one after another on it, so
   a block's fibers share it, which is what __shared__ means. */
#define __shared__      static thread_local
#define __syncthreads() fld_emu::syncthreads()
#define threadIdx       (fld_emu::t_thread_idx)
#define blockIdx        (fld_emu::t_block_idx)
#define blockDim        (fld_emu::t_block_dim)
#define gridDim         (fld_emu::t_grid_dim)
using dim3 = fld_emu::dim3;

struct alignas(16) fld__gpu_vec16 {
    uint32_t x, y, z, w;
};

#else
#error "gpu_compat.cuh: compile with nvcc, hipcc, or -DFLD_GPU_EMULATE"
#endif

/* ------------------------------------------------------------------------ */
/* Float bits and 16-bit conversions                                        */
/* ------------------------------------------------------------------------ */

#if defined(FLD_GPU_TARGET_EMU)

FLD_GPU_DEV uint32_t fld__gpu_bits(float f)
{
    return fld_f32_bits(f);
}
FLD_GPU_DEV float fld__gpu_float(uint32_t u)
{
    return fld_f32_from_bits(u);
}
/* The emulator is the executable check of the device code, so its rounding
   is exactly half.h's, which the library's reference uses. */
FLD_GPU_DEV float fld__gpu_f16_to_f32(uint16_t h)
{
    return fld_f16_to_f32(h);
}
FLD_GPU_DEV uint16_t fld__gpu_f32_to_f16(float f)
{
    return fld_f32_to_f16(f);
}

#else

FLD_GPU_DEV uint32_t fld__gpu_bits(float f)
{
    return __float_as_uint(f);
}
FLD_GPU_DEV float fld__gpu_float(uint32_t u)
{
    return __uint_as_float(u);
}
/* Hardware conversions: IEEE round to nearest even with subnormals, the same
   values as half.h for every non-NaN input (NaN payloads may differ). */
FLD_GPU_DEV float fld__gpu_f16_to_f32(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}
FLD_GPU_DEV uint16_t fld__gpu_f32_to_f16(float f)
{
    return __half_as_ushort(__float2half_rn(f));
}

#endif

#if defined(FLD_GPU_TARGET_EMU)
FLD_GPU_DEV uint64_t fld__gpu_double_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}
FLD_GPU_DEV double fld__gpu_double_from_bits(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}
#else
FLD_GPU_DEV uint64_t fld__gpu_double_bits(double d)
{
    return (uint64_t)__double_as_longlong(d);
}
FLD_GPU_DEV double fld__gpu_double_from_bits(uint64_t u)
{
    return __longlong_as_double((long long)u);
}
#endif

FLD_GPU_DEV float fld__gpu_bf16_to_f32(uint16_t h)
{
    return fld__gpu_float((uint32_t)h << 16);
}

/* Round to nearest even, NaN kept quiet with its sign: half.h's rule. On
   CUDA the rounding is the hardware's cvt.rn.bf16.f32 (one instruction on
   sm_80 and later; the integer form cost a 16-bit rotary, which rounds six
   times per pair, a third of its bandwidth on an H100); elsewhere integer
   operations, so that every target gives the same bits. */
FLD_GPU_DEV uint16_t fld__gpu_f32_to_bf16(float f)
{
    uint32_t u = fld__gpu_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
#if defined(FLD_GPU_TARGET_CUDA)
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
#endif
}

/*
 * a and b rounded to the 16-bit dtype DT (1 float16, 2 bfloat16) and back,
 * as storing and re-loading them would give. On CUDA one paired conversion
 * (cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32) rounds both; a NaN comes back as
 * some NaN (these are intermediate values: stores apply half.h's NaN rule).
 */
#if defined(FLD_GPU_TARGET_CUDA)
template <int DT> FLD_GPU_DEV void fld__gpu_round_pair(float &a, float &b)
{
    if (DT == FLD_GPU_F16) {
        const __half2 h = __floats2half2_rn(a, b);
        a = __low2float(h);
        b = __high2float(h);
    } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
        a = __low2float(h);
        b = __high2float(h);
    }
}
#else
template <int DT> FLD_GPU_DEV void fld__gpu_round_pair(float &a, float &b)
{
    if (DT == FLD_GPU_F16) {
        a = fld__gpu_f16_to_f32(fld__gpu_f32_to_f16(a));
        b = fld__gpu_f16_to_f32(fld__gpu_f32_to_f16(b));
    } else {
        a = fld__gpu_bf16_to_f32(fld__gpu_f32_to_bf16(a));
        b = fld__gpu_bf16_to_f32(fld__gpu_f32_to_bf16(b));
    }
}
#endif

/*
 * f[0..n) (n even) stored as 16-bit elements of dtype DT, two per 32-bit
 * word of w, the even element in the low half: the bits fld__gpu_f32_to_f16
 * / fld__gpu_f32_to_bf16 give each. On CUDA paired conversions round two at
 * a time; a bfloat16 NaN, whose bits the hardware would not keep, sends the
 * whole group down the one-at-a-time path (one test per group, not per pair).
 * NAN_FREE: the caller knows that no f[j] is a NaN, and the test is left out.
 */
template <int DT, int N, bool NAN_FREE = false>
FLD_GPU_DEV void fld__gpu_pack_pairs(const float *f, uint32_t *w)
{
#if defined(FLD_GPU_TARGET_CUDA)
    bool nan = false;
    if (DT == FLD_GPU_BF16 && !NAN_FREE)
        for (int j = 0; j < N; j++)
            nan |= f[j] != f[j];
    if (!nan) {
        for (int j = 0; j < N / 2; j++) {
            if (DT == FLD_GPU_F16) {
                const __half2 h = __floats2half2_rn(f[2 * j], f[2 * j + 1]);
                w[j] = (uint32_t)__half_as_ushort(__low2half(h)) |
                       ((uint32_t)__half_as_ushort(__high2half(h)) << 16);
            } else {
                const __nv_bfloat162 h = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
                w[j] = (uint32_t)__bfloat16_as_ushort(__low2bfloat16(h)) |
                       ((uint32_t)__bfloat16_as_ushort(__high2bfloat16(h)) << 16);
            }
        }
        return;
    }
#endif
    for (int j = 0; j < N / 2; j++) {
        if (DT == FLD_GPU_F16)
            w[j] = (uint32_t)fld__gpu_f32_to_f16(f[2 * j]) |
                   ((uint32_t)fld__gpu_f32_to_f16(f[2 * j + 1]) << 16);
        else
            w[j] = (uint32_t)fld__gpu_f32_to_bf16(f[2 * j]) |
                   ((uint32_t)fld__gpu_f32_to_bf16(f[2 * j + 1]) << 16);
    }
}

/*
 * Whether both bfloat16 halves of every word w[0..W) are finite: a half is
 * an inf or a NaN when its 8 exponent bits are all ones, and then only does
 * adding one unit of the exponent to them carry into the half's sign bit
 * (the low half's sum stays below 0x10000, so nothing crosses into the high
 * half). Three integer operations a word, on the bits as loaded.
 */
template <int W> FLD_GPU_DEV bool fld__gpu_bf16_words_finite(const uint32_t *w)
{
    uint32_t carried = 0;
    for (int j = 0; j < W; j++)
        carried |= (w[j] & 0x7f807f80u) + 0x00800080u;
    return (carried & 0x80008000u) == 0;
}

#if defined(FLD_GPU_TARGET_CUDA)
/* f[0..2W) rounded to the 16-bit DT two at a time (cvt.rn), as W words */
template <int DT, int W> FLD_GPU_DEV void fld__gpu_pack_words(const float *f, uint32_t *w)
{
    for (int j = 0; j < W; j++) {
        if (DT == FLD_GPU_F16)
            asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(w[j]) : "f"(f[2 * j + 1]), "f"(f[2 * j]));
        else
            asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w[j]) : "f"(f[2 * j + 1]), "f"(f[2 * j]));
    }
}

/*
 * a x b, a + b and a - b on words of two 16-bit DT values, each result
 * rounded once to DT: mul.rn / add.rn / sub.rn.f16x2, or fma.rn.bf16x2
 * (sm_80 has no bfloat16 add or multiply) with -0 as the addend, which
 * leaves every product, a zero's sign included, as it is, or 1 or -1 as
 * the multiplier. The bits are those of widening both to float32, computing
 * and rounding the result, as a kernel that computes in float32 does:
 * float32's 24 bits are at least 2p + 2 for the p = 8 (bfloat16) and 11
 * (float16) bits of the operands, and then a product, sum or difference of
 * two p-bit values rounded to float32 and then to p bits is the exact
 * result rounded once (Figueroa's theorem on double rounding; the test
 * packed_16bit_arithmetic_rounds_once checks it). The packed instructions
 * keep subnormals, and a NaN comes out as the hardware's one NaN, the one a
 * float32 operation returns and the 16-bit rounding keeps.
 */
/* a * b + c on bfloat16 pairs, rounded once */
FLD_GPU_DEV uint32_t fld__gpu_fma2_bf16(uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t d;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

template <int DT> FLD_GPU_DEV uint32_t fld__gpu_mul2(uint32_t a, uint32_t b)
{
    uint32_t d;
    if (DT != FLD_GPU_F16)
        return fld__gpu_fma2_bf16(a, b, 0x80008000u); /* + -0 */
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

template <int DT> FLD_GPU_DEV uint32_t fld__gpu_add2(uint32_t a, uint32_t b)
{
    uint32_t d;
    if (DT != FLD_GPU_F16)
        return fld__gpu_fma2_bf16(b, 0x3f803f80u, a); /* b * 1 + a */
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

template <int DT> FLD_GPU_DEV uint32_t fld__gpu_sub2(uint32_t a, uint32_t b)
{
    uint32_t d;
    if (DT != FLD_GPU_F16)
        return fld__gpu_fma2_bf16(b, 0xbf80bf80u, a); /* b * -1 + a */
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

/* out[j] = the pair (a[2j], a[2j+1]) rounded to DT, times the pair of DT's
   bits b[j] (the even element in the low half), rounded to DT */
template <int DT, int W>
FLD_GPU_DEV void fld__gpu_round_mul_pairs(const float *a, const uint32_t *b, uint32_t *out)
{
    uint32_t h[W];
    fld__gpu_pack_words<DT, W>(a, h);
    for (int j = 0; j < W; j++)
        out[j] = fld__gpu_mul2<DT>(h[j], b[j]);
}

/* The rotated pairs (x c - y s, y c + x s) of W words of DT's bits, each
   product and each sum rounded to DT, as fld_gpu::rot_x and rot_y compute
   them in float32 */
template <int DT, int W>
FLD_GPU_DEV void fld__gpu_rotate_pairs(const uint32_t *x, const uint32_t *y, const uint32_t *c,
                                       const uint32_t *s, uint32_t *ox, uint32_t *oy)
{
    for (int j = 0; j < W; j++) {
        ox[j] = fld__gpu_sub2<DT>(fld__gpu_mul2<DT>(x[j], c[j]), fld__gpu_mul2<DT>(y[j], s[j]));
        oy[j] = fld__gpu_add2<DT>(fld__gpu_mul2<DT>(y[j], c[j]), fld__gpu_mul2<DT>(x[j], s[j]));
    }
}
#endif

/* ------------------------------------------------------------------------ */
/* Division                                                                 */
/* ------------------------------------------------------------------------ */

/*
 * a / b correctly rounded, by the sequence nvcc compiles the / operator to
 * on its fast path: r0 an approximate reciprocal of b, one Newton step for
 * r, the quotient q0 = a r, its remainder a - b q0 (exact, by a fused
 * multiply-add) and q0 corrected by it. nvcc guards the sequence with a
 * range test per division (FCHK) and a branch to a slow path; a group that
 * guards all its divisions with one test (fld__gpu_div_rn) runs them side
 * by side instead of each behind the previous one's branch. r0: within one
 * unit in the last place of 1 / b (rcp.approx.f32's bound; the tests
 * perturb it by up to two units and find the same bits in the range of
 * fld__gpu_div_fast_ok).
 */
FLD_GPU_DEV float fld__gpu_div_refine(float a, float b, float r0)
{
#if defined(FLD_GPU_TARGET_CUDA)
    const float r = __fmaf_rn(r0, __fmaf_rn(-b, r0, 1.0f), r0);
    const float q0 = __fmul_rn(a, r);
    return __fmaf_rn(r, __fmaf_rn(-b, q0, a), q0);
#else
    const float r = fmaf(r0, fmaf(-b, r0, 1.0f), r0);
    const float q0 = a * r;
    return fmaf(r, fmaf(-b, q0, a), q0);
#endif
}

/* Where fld__gpu_div_refine's result is a / b correctly rounded: b in
   [1, 2^32] and |a| in [2^-64, 2^64], so that no step of the sequence
   leaves the normal range (well inside what nvcc's FCHK lets through), and
   b's significand not all ones, the one case where a reciprocal a unit
   off gives a wrong last bit (Markstein's theorem on this sequence
   excludes it; a = 2^-23, b = 2 - 2^-23 shows it). An inf, a NaN or a zero
   takes the / operator. */
FLD_GPU_DEV bool fld__gpu_div_fast_ok(float a, float b)
{
    const float m = a < 0.0f ? -a : a;
    return (b >= 1.0f) & (b <= 0x1p32f) & (m >= 0x1p-64f) & (m <= 0x1p64f) &
           ((fld__gpu_bits(b) & 0x7fffffu) != 0x7fffffu);
}

/*
 * Whether fld__gpu_div_fast_ok holds for every pair (a[j], b[j]), j < N, in
 * two integer operations per operand rather than its five comparisons per
 * pair: each bound becomes one unsigned comparison of an offset (a value
 * below the range wraps to a large one), and the group keeps the largest
 * offset and the smallest complement of b's significand.
 *   |a| in [2^-64, 2^64]  2 |a|'s bits (the sign shifted out) less 2 x
 *                         2^-64's, at most 2 x (2^64's - 2^-64's): an inf
 *                         or a NaN lands above it;
 *   b in [1, 2^32]        b's bits less 1's, at most 2^32's - 1's: a
 *                         negative b, a NaN or an inf lands above it;
 *   b's significand       its complement, 0 where it is all ones.
 */
template <int N> FLD_GPU_DEV bool fld__gpu_div_all_fast_ok(const float *a, const float *b)
{
    uint32_t a_off = 0, b_off = 0, b_sig = 0x7fffffu;
    for (int j = 0; j < N; j++) {
        const uint32_t ab = fld__gpu_bits(a[j]), bb = fld__gpu_bits(b[j]);
        const uint32_t ao = ab * 2u - 0x3f000000u, bo = bb - 0x3f800000u, bs = ~bb & 0x7fffffu;
        a_off = ao > a_off ? ao : a_off;
        b_off = bo > b_off ? bo : b_off;
        b_sig = bs < b_sig ? bs : b_sig;
    }
    return (a_off <= 0x80000000u) & (b_off <= 0x10000000u) & (b_sig != 0);
}

/*
 * An approximate 1 / b: on CUDA the hardware's reciprocal
 * (rcp.approx.ftz.f32, within one unit in its last place, which nvcc's
 * own division sequence starts from); under the emulator the correctly
 * rounded one, moved as its tests ask (fld_emu::rcp_approx); on HIP
 * 1 / b.
 */
FLD_GPU_DEV float fld__gpu_rcp_approx(float b)
{
#if defined(FLD_GPU_TARGET_CUDA)
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
    return r;
#elif defined(FLD_GPU_TARGET_EMU)
    return fld_emu::rcp_approx(b);
#else
    return 1.0f / b;
#endif
}

/*
 * An approximate 1 / sqrt(x) for x in float32's normal range, by which the
 * norms scale their rows: on CUDA the hardware's (rsqrt.approx.ftz.f32,
 * what rsqrtf compiles to for a normal x, within two units in its last
 * place by CUDA's bound for rsqrtf; vLLM's rms_norm kernels scale by
 * rsqrtf too), one instruction where the correctly rounded
 * 1.0f / sqrtf(x) is a square root's and a division's sequences, each
 * behind a range test; under the emulator 1 / sqrt(x) from double, moved
 * as its tests ask (fld_emu::rsqrt_approx); on HIP rsqrtf.
 */
FLD_GPU_DEV float fld__gpu_rsqrt_approx(float x)
{
#if defined(FLD_GPU_TARGET_CUDA)
    float r;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#elif defined(FLD_GPU_TARGET_EMU)
    return fld_emu::rsqrt_approx(x);
#else
    return rsqrtf(x);
#endif
}

/*
 * q[j] = a[j] / b[j], correctly rounded (the / operator's bits), for N
 * divisions at once (q may be a): where every one of them is in
 * fld__gpu_div_fast_ok's range (one test for the group:
 * fld__gpu_div_all_fast_ok), by fld__gpu_div_refine side by side from
 * fld__gpu_rcp_approx; otherwise each by the / operator (on HIP, always).
 */
template <int N> FLD_GPU_DEV void fld__gpu_div_rn(const float *a, const float *b, float *q)
{
#if !defined(FLD_GPU_TARGET_HIP)
    if (fld__gpu_div_all_fast_ok<N>(a, b)) {
        for (int j = 0; j < N; j++)
            q[j] = fld__gpu_div_refine(a[j], b[j], fld__gpu_rcp_approx(b[j]));
        return;
    }
#endif
    for (int j = 0; j < N; j++)
        q[j] = a[j] / b[j];
}

/*
 * Divisions whose quotients are only ever rounded to bfloat16 next (a
 * bfloat16 silu or QuickGELU). t[j] = a[j] times b[j]'s approximate
 * reciprocal, one product in place of the refining sequence and its range
 * test; the result: whether every t[j] rounds to the bfloat16 that
 * a[j] / b[j] correctly rounded (fld__gpu_div_rn's quotient) rounds to.
 * For b in [1, 2^64] and a reciprocal k units off in its last place (k = 1:
 * rcp.approx.f32's bound), t is within (k + 1) 2^-23 |a / b| of the
 * correctly rounded quotient, so within 2 (k + 1) float32 steps of it: 4
 * on a GPU, 6 for the tests' k = 2 (a float32 step is at least 2^-24 of
 * the value). Two floats that close round to the same bfloat16 unless a
 * rounding boundary lies between them, and bfloat16's boundaries are the
 * float32 values whose low 16 bits are 0x8000 (subnormals' too: a
 * bfloat16 is a float32's high half). So the answer is yes where every
 * b[j] lies in the range (not a NaN or an inf) and no t[j]'s low 16 bits
 * lie in [0x8000 - 8, 0x8000 + 8]: one element in about 3,900 of those
 * whose quotients spread over the low bits.
 */
template <int N>
FLD_GPU_DEV bool fld__gpu_div_to_bf16_settled(const float *a, const float *b, float *t)
{
    uint32_t b_off = 0, near = 0xffffffffu;
    for (int j = 0; j < N; j++) {
#if defined(FLD_GPU_TARGET_CUDA)
        t[j] = __fmul_rn(a[j], fld__gpu_rcp_approx(b[j]));
#else
        t[j] = a[j] * fld__gpu_rcp_approx(b[j]);
#endif
        /* b's bits less 1's, at most 2^64's less 1's; the low half's
           distance above 0x8000 - 8, at most 16 inside the window */
        const uint32_t bo = fld__gpu_bits(b[j]) - 0x3f800000u;
        const uint32_t to = (fld__gpu_bits(t[j]) << 16) - 0x7ff80000u;
        b_off = bo > b_off ? bo : b_off;
        near = to < near ? to : near;
    }
    return (b_off <= 0x20000000u) & (near > 0x00100000u);
}

/* ------------------------------------------------------------------------ */
/* Where a load stays                                                       */
/* ------------------------------------------------------------------------ */

/*
 * Marks a loaded word as needed here: the compiler may not move its load
 * below this point (LLVM sinks a load into the block of its first use,
 * past a branch such as an IEEE division's slow path, and so after work
 * that does not depend on it). It emits no instruction and waits for
 * nothing: the load is still waited for at its first real use.
 */
FLD_GPU_DEV void fld__gpu_issued(uint32_t w)
{
#if defined(FLD_GPU_TARGET_CUDA)
    asm volatile("" ::"r"(w));
#else
    (void)w;
#endif
}

/*
 * p, as a pointer the compiler cannot tell from p: a load through it is not
 * merged with a load through p before it, so that a rarely taken branch
 * that needs a value loaded earlier loads it again rather than keeping its
 * registers live up to the branch. No instruction.
 */
template <class T> FLD_GPU_DEV T *fld__gpu_renewed(T *p)
{
#if defined(FLD_GPU_TARGET_CUDA)
    asm volatile("" : "+l"(p));
#endif
    return p;
}

/*
 * w with v folded in: w ^ (v & zero), where zero is 0 at run time but not
 * known to the compiler (a kernel argument whose value the launcher fixed).
 * The bits are w's, and w's first use now reads v too, so v's load is
 * issued, and waited for, with w's. fld__gpu_issued keeps LLVM from sinking
 * a load; this keeps ptxas from it, which schedules the machine code's
 * loads on its own and, in the GELU kernels, placed the second operand's
 * load after half of the first operand's erf or tanh: two trips to memory
 * one after the other, and 42 registers where this takes 32.
 */
FLD_GPU_DEV uint32_t fld__gpu_tied(uint32_t w, uint32_t v, uint32_t zero)
{
    return w ^ (v & zero);
}

/* ------------------------------------------------------------------------ */
/* 128-, 64- and 32-bit loads and stores (p aligned to their size)          */
/* ------------------------------------------------------------------------ */

#if defined(FLD_GPU_TARGET_EMU)
/* A misaligned wide access faults on a GPU (and kills the context); the
 * emulator stops the test instead of letting memcpy hide it. */
template <typename T> static inline T fld__gpu_emu_load(const void *p)
{
    if ((uintptr_t)p % sizeof(T) != 0) {
        fprintf(stderr, "gpu emulator: misaligned %zu-bit load at %p\n", sizeof(T) * 8, p);
        abort();
    }
    T v;
    memcpy(&v, p, sizeof v);
    return v;
}
template <typename T> static inline void fld__gpu_emu_store(void *p, const T &v)
{
    if ((uintptr_t)p % sizeof(T) != 0) {
        fprintf(stderr, "gpu emulator: misaligned %zu-bit store at %p\n", sizeof(T) * 8, p);
        abort();
    }
    memcpy(p, &v, sizeof v);
}
FLD_GPU_DEV fld__gpu_vec16 fld__gpu_load16(const void *p)
{
    return fld__gpu_emu_load<fld__gpu_vec16>(p);
}
FLD_GPU_DEV void fld__gpu_store16(void *p, fld__gpu_vec16 v)
{
    fld__gpu_emu_store(p, v);
}
FLD_GPU_DEV uint64_t fld__gpu_load8(const void *p)
{
    return fld__gpu_emu_load<uint64_t>(p);
}
FLD_GPU_DEV void fld__gpu_store8(void *p, uint64_t v)
{
    fld__gpu_emu_store(p, v);
}
FLD_GPU_DEV uint32_t fld__gpu_load4(const void *p)
{
    return fld__gpu_emu_load<uint32_t>(p);
}
FLD_GPU_DEV void fld__gpu_store4(void *p, uint32_t v)
{
    fld__gpu_emu_store(p, v);
}
#else
/* One ld.global.v4 / global_load_dwordx4 per call. */
FLD_GPU_DEV fld__gpu_vec16 fld__gpu_load16(const void *p)
{
    return *reinterpret_cast<const fld__gpu_vec16 *>(p);
}
FLD_GPU_DEV void fld__gpu_store16(void *p, fld__gpu_vec16 v)
{
    *reinterpret_cast<fld__gpu_vec16 *>(p) = v;
}
/* One 64-bit or 32-bit access (p 8- or 4-byte aligned). */
FLD_GPU_DEV uint64_t fld__gpu_load8(const void *p)
{
    return *reinterpret_cast<const uint64_t *>(p);
}
FLD_GPU_DEV void fld__gpu_store8(void *p, uint64_t v)
{
    *reinterpret_cast<uint64_t *>(p) = v;
}
FLD_GPU_DEV uint32_t fld__gpu_load4(const void *p)
{
    return *reinterpret_cast<const uint32_t *>(p);
}
FLD_GPU_DEV void fld__gpu_store4(void *p, uint32_t v)
{
    *reinterpret_cast<uint32_t *>(p) = v;
}
#endif

/* ------------------------------------------------------------------------ */
/* Warp sum                                                                 */
/* ------------------------------------------------------------------------ */

FLD_GPU_DEV float fld__gpu_shfl_xor(float v, int mask)
{
#if defined(FLD_GPU_TARGET_CUDA)
    return __shfl_xor_sync(0xffffffffu, v, mask);
#elif defined(FLD_GPU_TARGET_HIP)
    return __shfl_xor(v, mask);
#else
    return fld_emu::shfl_xor(v, mask);
#endif
}

/*
 * Butterfly sum over the whole warp; every lane ends with the same value
 * (a + b and b + a round alike). All lanes of the warp must call it.
 */
FLD_GPU_DEV float fld__gpu_warp_sum(float v)
{
    for (int m = FLD_GPU_WARP_SIZE / 2; m > 0; m >>= 1)
        v += fld__gpu_shfl_xor(v, m);
    return v;
}

/* ------------------------------------------------------------------------ */
/* Launch                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Launches kernel k on stream with grid g and block b and returns the
 * runtime's error code for the launch (0: queued). Kernel arguments are
 * copied by value, as a <<<>>> launch does.
 */
template <typename... P, typename... A>
static inline int fld__gpu_launch(void (*k)(P...), dim3 g, dim3 b, void *stream, A... args)
{
    /* The runtime's last error is per thread and left by any earlier call
     * (a failed cudaMalloc of a hook, say): reset it first, or a kernel that
     * was queued would be reported failed and the host would run the next
     * implementation on tensors this one is about to change in place. A
     * sticky error (a broken context) is returned again after the launch. */
#if defined(FLD_GPU_TARGET_CUDA)
    (void)cudaGetLastError();
    k<<<g, b, 0, (cudaStream_t)stream>>>(args...);
    return (int)cudaGetLastError();
#elif defined(FLD_GPU_TARGET_HIP)
    (void)hipGetLastError();
    hipLaunchKernelGGL(k, g, b, 0, (hipStream_t)stream, args...);
    return (int)hipGetLastError();
#else
    (void)stream;
    return fld_emu::launch(g, b, [&]() { k(args...); });
#endif
}

/* ------------------------------------------------------------------------ */
/* Device properties the launch shapes depend on (gpu_launch.h)              */
/* ------------------------------------------------------------------------ */

/* What the emulator reports: few SMs, so tests reach both launch regimes
   with small calls. */
#define FLD_GPU_EMU_SM_COUNT 4
/* Where the runtime cannot say (no current device): a mid-size GPU. */
#define FLD_GPU_DEFAULT_SM_COUNT 108
#define FLD_GPU_MAX_DEVICES      64

/*
 * The SM (CUDA) or compute-unit (HIP) count of the calling thread's current
 * device, read from the runtime once per device and kept: a launch asks it
 * each time. Concurrent first reads store the same value.
 */
static inline int fld__gpu_sm_count(void)
{
#if defined(FLD_GPU_TARGET_EMU)
    return FLD_GPU_EMU_SM_COUNT;
#else
    static int known[FLD_GPU_MAX_DEVICES];
    int dev = 0, n = 0;
#if defined(FLD_GPU_TARGET_CUDA)
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= FLD_GPU_MAX_DEVICES)
        return FLD_GPU_DEFAULT_SM_COUNT;
    if ((n = __atomic_load_n(&known[dev], __ATOMIC_RELAXED)) > 0)
        return n;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0)
        return FLD_GPU_DEFAULT_SM_COUNT;
#else
    if (hipGetDevice(&dev) != hipSuccess || dev < 0 || dev >= FLD_GPU_MAX_DEVICES)
        return FLD_GPU_DEFAULT_SM_COUNT;
    if ((n = __atomic_load_n(&known[dev], __ATOMIC_RELAXED)) > 0)
        return n;
    if (hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess ||
        n <= 0)
        return FLD_GPU_DEFAULT_SM_COUNT;
#endif
    __atomic_store_n(&known[dev], n, __ATOMIC_RELAXED);
    return n;
#endif
}

#endif /* FLD_PLUGINS_GPU_COMPAT_CUH */
