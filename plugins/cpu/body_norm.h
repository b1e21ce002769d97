/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rms_norm / gemma_rms_norm kernel body, written once against the vector
 * layer (simd_<isa>.h, included first) and compiled per instruction set by
 * an isa_<name>.c. Defines one static function:
 *
 *   static void norm_range(const struct fld_cpu_norm_job *job, int64_t r0, int64_t r1);
 *
 * Per row, two passes:
 *   1. the sum of squares in float32 over four independent vector
 *      accumulators (so the FMA latency is hidden and 64 partial sums keep
 *      the rounding error small). With a residual the pass also writes
 *      residual = round(x + residual), rounded to the residual's dtype, and
 *      squares the STORED values, read back from the vector just stored
 *      (served by store-to-load forwarding: no scratch, no second
 *      conversion routine; a float32 residual needs no read-back).
 *   2. out = round(v * inv * scale), in the reference's order ((v * inv) *
 *      scale, two float32 products, one rounding to the storage type), with
 *      v re-read from x (or the residual), so out may alias x. A row is
 *      at most a few tens of KiB, so the re-read hits L1/L2: one trip to
 *      memory per input byte. The pass runs from the row's end back to its
 *      start, so its first re-reads find in L1 what pass 1 read last (a
 *      float32 row of 4096 with its residual is 32 KiB, all of Zen 3's
 *      L1D; forward, the pass began with what L1 had already evicted).
 *      Meanwhile the next row is prefetched, so memory keeps streaming
 *      while a row computes (in calls too large to come from the caches).
 * job->stream: full output vectors go out with non-temporal stores once
 * the row reaches vector alignment (the first < V_LANES elements and the
 * tail take ordinary stores); one v_stream_fence() ends the range.
 * inv = 1 / sqrtf(sum / h + eps) is scalar, once per row. A row whose
 * float32 sum is not usable -- inf (squares of values near 1e20 and above
 * overflow, or an inf in the row), NaN, or so small that eps cannot hide
 * the squares' underflow (sum / h + eps < 2^-100, only with eps near 0) --
 * or whose sum / h + eps overflows (a finite sum beside an eps near
 * FLT_MAX) is normalised again by exact.c in double, as core/reference/reference_norm.c does
 * every row: the normalised value for any finite row, PyTorch's NaN/0 for
 * non-finite ones. Ordinary rows never take that path.
 *
 * bfloat16 rows on a layer with bfloat16 pairs (V_BF16_PAIRS) run the
 * same two passes on pairs of vectors, widened and packed without shuffles
 * (norm_sumsq_pair, norm_out_pair below).
 *
 * The dtype, the weight's and the residual's dtypes (x's, or float32 with
 * a 16-bit x), the weight mode, the residual and the store kind are
 * compile-time constants of each loop (one function per combination of
 * the first five, NORM_ROWS_FN, always-inlined helpers below it), so no
 * loop body branches on them.
 */
#ifndef FLD_PLUGIN_CPU_BODY_NORM_H
#define FLD_PLUGIN_CPU_BODY_NORM_H

#ifndef FLD_PLUGIN_CPU_SIMD_H
#error "include the vector layer (simd_<isa>.h) before body_norm.h"
#endif

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpu.h"

enum { NORM_W_NONE, NORM_W_MUL, NORM_W_GEMMA };

/* Vectors per unrolled iteration of both passes. */
#define NORM_UNROLL 4

/*
 * One vector of the row being normalised, at element j. With a residual it
 * is round(x + r) in the residual's dtype rdt, stored into r and taken back
 * from there, so a 16-bit row squares exactly what the caller gets back.
 */
V_INLINE vf norm_in(const void *x, void *res, int64_t j, const int dt, const int rdt,
                    const int has_res)
{
    vf v = v_load(fld__cpu_at(x, j, dt), dt);
    if (has_res) {
        void *rp = fld__cpu_at(res, j, rdt);
        v = v_add(v, v_load(rp, rdt));
        v_store(rp, v, rdt);
        if (rdt != FLD_CPU_F32)
            v = v_load(rp, rdt);
    }
    return v;
}

/* The same for the last n < V_LANES elements (other lanes 0). */
V_INLINE vf norm_in_n(const void *x, void *res, int64_t j, int64_t n, const int dt, const int rdt,
                      const int has_res)
{
    vf v = v_load_n(fld__cpu_at(x, j, dt), n, dt);
    if (has_res) {
        void *rp = fld__cpu_at(res, j, rdt);
        v = v_add(v, v_load_n(rp, n, rdt));
        v_store_n(rp, v, n, rdt);
        if (rdt != FLD_CPU_F32)
            v = v_load_n(rp, n, rdt);
    }
    return v;
}

/* Pass 1: the float32 sum of squares of the row (updating the residual). */
V_INLINE float norm_sumsq(const void *x, void *res, int64_t h, const int dt, const int rdt,
                          const int has_res)
{
    vf a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero();
    int64_t j = 0;
    for (; j + NORM_UNROLL * V_LANES <= h; j += NORM_UNROLL * V_LANES) {
        vf v0 = norm_in(x, res, j, dt, rdt, has_res);
        vf v1 = norm_in(x, res, j + V_LANES, dt, rdt, has_res);
        vf v2 = norm_in(x, res, j + 2 * V_LANES, dt, rdt, has_res);
        vf v3 = norm_in(x, res, j + 3 * V_LANES, dt, rdt, has_res);
        a0 = v_fma(v0, v0, a0);
        a1 = v_fma(v1, v1, a1);
        a2 = v_fma(v2, v2, a2);
        a3 = v_fma(v3, v3, a3);
    }
    for (; j + V_LANES <= h; j += V_LANES) {
        vf v = norm_in(x, res, j, dt, rdt, has_res);
        a0 = v_fma(v, v, a0);
    }
    if (j < h) {
        vf v = norm_in_n(x, res, j, h - j, dt, rdt, has_res);
        a1 = v_fma(v, v, a1);
    }
    return v_hsum(v_add(v_add(a0, a1), v_add(a2, a3)));
}

/* (v * inv) * scale, as the reference multiplies; the weight has dtype wdt. */
V_INLINE vf norm_scale(vf v, vf inv, const void *w, int64_t j, const int wdt, const int wm)
{
    v = v_mul(v, inv);
    if (wm == NORM_W_MUL)
        v = v_mul(v, v_load(fld__cpu_at(w, j, wdt), wdt));
    else if (wm == NORM_W_GEMMA)
        v = v_mul(v, v_add(v_load(fld__cpu_at(w, j, wdt), wdt), v_set1(1.0f)));
    return v;
}

V_INLINE vf norm_scale_n(vf v, vf inv, const void *w, int64_t j, int64_t n, const int wdt,
                         const int wm)
{
    v = v_mul(v, inv);
    if (wm == NORM_W_MUL)
        v = v_mul(v, v_load_n(fld__cpu_at(w, j, wdt), n, wdt));
    else if (wm == NORM_W_GEMMA)
        v = v_mul(v, v_add(v_load_n(fld__cpu_at(w, j, wdt), n, wdt), v_set1(1.0f)));
    return v;
}

V_INLINE void norm_put(void *out, int64_t j, vf v, const int dt, const int st)
{
    if (st)
        v_stream(fld__cpu_at(out, j, dt), v, dt);
    else
        v_store(fld__cpu_at(out, j, dt), v, dt);
}

/*
 * Pass 2 over elements [j, h), from h down: out = (src * inv) * scale.
 * src has dtype sdt (x's, or the residual's), out dt, the weight wdt.
 * st: full vectors go out with non-temporal stores (out + j is then
 * vector-aligned); the tail always takes an ordinary store. pf (or NULL):
 * the next row's x at the same offset (dtype dt), prefetched as this row is
 * written so that its pass 1 finds it in cache: the hardware prefetchers
 * alone leave memory idle while a row computes (measured +15-20% at 4096 x
 * 4096 f32 and bf16, one thread; only x: prefetching the residual too
 * gained nothing). Only in calls too large for the caches (job->prefetch):
 * rows already in L2 or L3 gain nothing from it and lose the prefetches'
 * cost.
 */
V_INLINE void norm_out(void *out, const void *src, const void *w, float inv_s, int64_t j, int64_t h,
                       const int dt, const int sdt, const int wdt, const int wm, const int st,
                       const char *pf)
{
    const vf inv = v_set1(inv_s);
    const size_t es = fld__cpu_elem_size(dt);
    int64_t e = j + (h - j) / V_LANES * V_LANES; /* the end of the full vectors */
    if (e < h) {
        int64_t n = h - e;
        vf v = v_load_n(fld__cpu_at(src, e, sdt), n, sdt);
        v_store_n(fld__cpu_at(out, e, dt), norm_scale_n(v, inv, w, e, n, wdt, wm), n, dt);
    }
    /* the prefetches go forward, in the order the next row's pass 1 reads it */
    const char *ahead = pf ? pf + (size_t)j * es : NULL;
    for (; e - j >= NORM_UNROLL * V_LANES; e -= NORM_UNROLL * V_LANES) {
        const int64_t k = e - NORM_UNROLL * V_LANES;
        if (ahead) {
            for (size_t b = 0; b < NORM_UNROLL * V_LANES * es; b += 64)
                fld__cpu_prefetch_row(ahead + b, dt);
            ahead += NORM_UNROLL * V_LANES * es;
        }
        vf v3 = v_load(fld__cpu_at(src, k + 3 * V_LANES, sdt), sdt);
        vf v2 = v_load(fld__cpu_at(src, k + 2 * V_LANES, sdt), sdt);
        vf v1 = v_load(fld__cpu_at(src, k + V_LANES, sdt), sdt);
        vf v0 = v_load(fld__cpu_at(src, k, sdt), sdt);
        norm_put(out, k + 3 * V_LANES, norm_scale(v3, inv, w, k + 3 * V_LANES, wdt, wm), dt, st);
        norm_put(out, k + 2 * V_LANES, norm_scale(v2, inv, w, k + 2 * V_LANES, wdt, wm), dt, st);
        norm_put(out, k + V_LANES, norm_scale(v1, inv, w, k + V_LANES, wdt, wm), dt, st);
        norm_put(out, k, norm_scale(v0, inv, w, k, wdt, wm), dt, st);
    }
    for (; e > j; e -= V_LANES) {
        vf v = v_load(fld__cpu_at(src, e - V_LANES, sdt), sdt);
        norm_put(out, e - V_LANES, norm_scale(v, inv, w, e - V_LANES, wdt, wm), dt, st);
    }
}

/*
 * Elements before out reaches the alignment of `lanes` elements (0..lanes-1),
 * or -1 when it never does (an address that is not a multiple of the
 * element size).
 */
V_INLINE int64_t norm_lead(const void *out, const int dt, const int64_t lanes)
{
    const uintptr_t es = (uintptr_t)fld__cpu_elem_size(dt), vb = (uintptr_t)lanes * es;
    uintptr_t gap = (vb - (uintptr_t)out % vb) % vb;
    return gap % es ? -1 : (int64_t)(gap / es);
}

#ifdef V_BF16_PAIRS
/*
 * bfloat16 rows on a layer with bfloat16 pairs (V_BF16_PAIRS: simd_avx2.h),
 * when x, out, the residual and the weight are all bfloat16: 2 * V_LANES
 * elements at a time in the layer's pair order, widened and packed without
 * shuffles, rounded to nearest even by v_bf16_round (integer operations,
 * giving the float32 value of the rounded number, so the residual's
 * squares need no reload; outputs only stored skip the final mask,
 * v_bf16_round_hi). Every value rounded here is a sum or product of
 * bfloat16 values and the finite inv, so a NaN among them has zero low 16
 * bits and v_bf16_round stores it as v_store would. The same two passes,
 * prefetch and stores as above; the last < 2 * V_LANES elements of a row
 * take the single-vector code. With job->stream, pairs go out
 * non-temporally from the first element aligned to a whole pair.
 */
#define NORM_PAIR (2 * V_LANES)

/* norm_in for one pair: x, or residual = round(x + residual) stored and kept. */
V_INLINE void norm_in_pair(const void *x, void *res, int64_t j, vf *a, vf *b, const int has_res)
{
    v_bf16_pair_load(fld__cpu_at(x, j, FLD_CPU_BF16), a, b);
    if (has_res) {
        void *rp = fld__cpu_at(res, j, FLD_CPU_BF16);
        vf ra, rb;
        v_bf16_pair_load(rp, &ra, &rb);
        *a = v_bf16_round(v_add(*a, ra));
        *b = v_bf16_round(v_add(*b, rb));
        v_bf16_pair_store(rp, *a, *b);
    }
}

V_INLINE float norm_sumsq_pair(const void *x, void *res, int64_t h, const int has_res)
{
    vf a0 = v_zero(), a1 = v_zero(), a2 = v_zero(), a3 = v_zero();
    int64_t j = 0;
    for (; j + 2 * NORM_PAIR <= h; j += 2 * NORM_PAIR) {
        vf p0, q0, p1, q1;
        norm_in_pair(x, res, j, &p0, &q0, has_res);
        norm_in_pair(x, res, j + NORM_PAIR, &p1, &q1, has_res);
        a0 = v_fma(p0, p0, a0);
        a1 = v_fma(q0, q0, a1);
        a2 = v_fma(p1, p1, a2);
        a3 = v_fma(q1, q1, a3);
    }
    if (j + NORM_PAIR <= h) {
        vf p0, q0;
        norm_in_pair(x, res, j, &p0, &q0, has_res);
        a0 = v_fma(p0, p0, a0);
        a1 = v_fma(q0, q0, a1);
        j += NORM_PAIR;
    }
    if (j + V_LANES <= h) {
        vf v = norm_in(x, res, j, FLD_CPU_BF16, FLD_CPU_BF16, has_res);
        a2 = v_fma(v, v, a2);
        j += V_LANES;
    }
    if (j < h) {
        vf v = norm_in_n(x, res, j, h - j, FLD_CPU_BF16, FLD_CPU_BF16, has_res);
        a3 = v_fma(v, v, a3);
    }
    return v_hsum(v_add(v_add(a0, a1), v_add(a2, a3)));
}

/* One pair of pass 2: out = round((src * inv) * scale). */
V_INLINE void norm_out_pair1(void *out, const void *src, const void *w, vf inv, int64_t j,
                             const int wm, const int st)
{
    vf a, b;
    v_bf16_pair_load(fld__cpu_at(src, j, FLD_CPU_BF16), &a, &b);
    a = v_mul(a, inv);
    b = v_mul(b, inv);
    if (wm != NORM_W_NONE) {
        vf wa, wb;
        v_bf16_pair_load(fld__cpu_at(w, j, FLD_CPU_BF16), &wa, &wb);
        if (wm == NORM_W_GEMMA) {
            wa = v_add(wa, v_set1(1.0f));
            wb = v_add(wb, v_set1(1.0f));
        }
        a = v_mul(a, wa);
        b = v_mul(b, wb);
    }
    a = v_bf16_round_hi(a); /* only stored: the low bits may stay */
    b = v_bf16_round_hi(b);
    if (st)
        v_bf16_pair_stream(fld__cpu_at(out, j, FLD_CPU_BF16), a, b);
    else
        v_bf16_pair_store(fld__cpu_at(out, j, FLD_CPU_BF16), a, b);
}

/* norm_out for bfloat16 pairs, from h down; st: out is aligned to a pair (v_bf16_pair_stream). */
V_INLINE void norm_out_pair(void *out, const void *src, const void *w, float inv_s, int64_t h,
                            const int wm, const int st, const char *pf)
{
    const vf inv = v_set1(inv_s);
    const int64_t pairs = h / NORM_PAIR;
    int64_t e = pairs * NORM_PAIR; /* the end of the whole pairs */
    if (e < h)
        norm_out(fld__cpu_at(out, e, FLD_CPU_BF16), fld__cpu_at(src, e, FLD_CPU_BF16),
                 wm == NORM_W_NONE ? NULL : fld__cpu_at(w, e, FLD_CPU_BF16), inv_s, 0, h - e,
                 FLD_CPU_BF16, FLD_CPU_BF16, FLD_CPU_BF16, wm, 0, NULL);
    if (pairs % 2) {
        e -= NORM_PAIR;
        norm_out_pair1(out, src, w, inv, e, wm, st);
    }
    const char *ahead = pf; /* forward, as in norm_out */
    for (; e > 0; e -= 2 * NORM_PAIR) {
        const int64_t k = e - 2 * NORM_PAIR;
        if (ahead) {
            for (size_t b = 0; b < 2 * NORM_PAIR * 2u; b += 64)
                fld__cpu_prefetch_row(ahead + b, FLD_CPU_BF16);
            ahead += 2 * NORM_PAIR * 2u;
        }
        norm_out_pair1(out, src, w, inv, k + NORM_PAIR, wm, st);
        norm_out_pair1(out, src, w, inv, k, wm, st);
    }
}
#endif

V_INLINE void norm_rows(const struct fld_cpu_norm_job *job, int64_t r0, int64_t r1, const int dt,
                        const int wdt, const int rdt, const int wm, const int has_res)
{
    const int64_t h = job->h;
    const void *w = job->weight;
    const int sdt = has_res ? rdt : dt; /* the dtype of the row being normalised */
#ifdef V_BF16_PAIRS
    /* every operand bfloat16: the pair code (a constant of each instance) */
    const int pairs =
        dt == FLD_CPU_BF16 && sdt == FLD_CPU_BF16 && (wm == NORM_W_NONE || wdt == FLD_CPU_BF16);
#endif
    for (int64_t r = r0; r < r1; r++) {
        const void *x = fld__cpu_at(job->x, r * job->x_stride, dt);
        void *res = has_res ? fld__cpu_at(job->residual, r * job->residual_stride, rdt) : NULL;
        void *out = fld__cpu_at(job->out, r * job->out_stride, dt);
        const void *src = has_res ? (const void *)res : x;

#ifdef V_BF16_PAIRS
        const float sum =
            pairs ? norm_sumsq_pair(x, res, h, has_res) : norm_sumsq(x, res, h, dt, rdt, has_res);
#else
        const float sum = norm_sumsq(x, res, h, dt, rdt, has_res);
#endif
        const float ms = sum / (float)h + job->eps;
        /* an inf or NaN sum makes ms inf or NaN */
        if (__builtin_expect(!(ms <= FLT_MAX && ms >= 0x1p-100f), 0)) {
            fld__cpu_norm_row_exact(job, out, src, sdt);
            continue;
        }
        const float inv = 1.0f / sqrtf(ms);

        const char *pf =
            job->prefetch && r + 1 < r1 ? (const char *)fld__cpu_at(x, job->x_stride, dt) : NULL;
#ifdef V_BF16_PAIRS
        if (pairs) {
            int64_t lead = job->stream ? norm_lead(out, dt, NORM_PAIR) : -1;
            if (lead < 0 || h - lead < NORM_PAIR) {
                norm_out_pair(out, src, w, inv, h, wm, 0, pf);
            } else {
                if (lead > 0)
                    norm_out(out, src, w, inv, 0, lead, dt, sdt, wdt, wm, 0, NULL);
                norm_out_pair(fld__cpu_at(out, lead, dt), fld__cpu_at(src, lead, sdt),
                              wm == NORM_W_NONE ? NULL : fld__cpu_at(w, lead, wdt), inv, h - lead,
                              wm, 1, pf ? (const char *)fld__cpu_at(pf, lead, dt) : NULL);
            }
            continue;
        }
#endif
        int64_t lead = job->stream ? norm_lead(out, dt, V_LANES) : -1;
        if (lead < 0 || h - lead < V_LANES) {
            norm_out(out, src, w, inv, 0, h, dt, sdt, wdt, wm, 0, pf);
        } else {
            if (lead > 0) /* lead < V_LANES: only the tail path runs */
                norm_out(out, src, w, inv, 0, lead, dt, sdt, wdt, wm, 0, NULL);
            norm_out(fld__cpu_at(out, lead, dt), fld__cpu_at(src, lead, sdt),
                     wm == NORM_W_NONE ? NULL : fld__cpu_at(w, lead, wdt), inv, 0, h - lead, dt,
                     sdt, wdt, wm, 1, pf ? (const char *)fld__cpu_at(pf, lead, dt) : NULL);
        }
    }
    if (job->stream)
        v_stream_fence();
}

/*
 * One function for each combination of the constants norm_rows takes, each
 * compiled on its own: inlined all together into norm_range, GCC allocated
 * their registers as one and, after small changes to pass 2, kept pass 1's
 * accumulators on the stack (every norm 0.55-0.85x, measured on Zen 3).
 */
#define NORM_ROWS_FN(name, dt, wdt, wm, rdt, has_res)                                              \
    static __attribute__((noinline)) void name(const struct fld_cpu_norm_job *job, int64_t r0,     \
                                               int64_t r1)                                         \
    {                                                                                              \
        norm_rows(job, r0, r1, dt, wdt, rdt, wm, has_res);                                         \
    }

/* The residuals and weights a job can have: the indices of norm_rows_fns. */
enum { NORM_RES_NONE, NORM_RES_X, NORM_RES_F32, NORM_RESIDUALS };
enum {
    NORM_WEIGHT_NONE,
    NORM_WEIGHT_MUL,
    NORM_WEIGHT_GEMMA,
    NORM_WEIGHT_MUL_F32,
    NORM_WEIGHT_GEMMA_F32,
    NORM_WEIGHTS
};

/* The three residuals of one dtype and weight: none, of x's dtype, float32. */
#define NORM_ROWS_RESIDUALS(name, dt, wdt, wm)                                                     \
    NORM_ROWS_FN(name##_plain, dt, wdt, wm, dt, 0)                                                 \
    NORM_ROWS_FN(name##_res, dt, wdt, wm, dt, 1)                                                   \
    NORM_ROWS_FN(name##_res_f32, dt, wdt, wm, FLD_CPU_F32, 1)
#define NORM_ROWS_RESIDUALS_ROW(name)                                                              \
    {                                                                                              \
        [NORM_RES_NONE] = name##_plain, [NORM_RES_X] = name##_res, [NORM_RES_F32] = name##_res_f32 \
    }

/* The five weights of one dtype: none, x's dtype or float32, multiplied or gemma's (1 + w). */
#define NORM_ROWS_WEIGHTS(name, dt)                                                                \
    NORM_ROWS_RESIDUALS(name##_none, dt, dt, NORM_W_NONE)                                          \
    NORM_ROWS_RESIDUALS(name##_mul, dt, dt, NORM_W_MUL)                                            \
    NORM_ROWS_RESIDUALS(name##_gemma, dt, dt, NORM_W_GEMMA)                                        \
    NORM_ROWS_RESIDUALS(name##_mul_f32, dt, FLD_CPU_F32, NORM_W_MUL)                               \
    NORM_ROWS_RESIDUALS(name##_gemma_f32, dt, FLD_CPU_F32, NORM_W_GEMMA)
#define NORM_ROWS_WEIGHTS_ROW(name)                                                                \
    {                                                                                              \
        [NORM_WEIGHT_NONE] = NORM_ROWS_RESIDUALS_ROW(name##_none),                                 \
        [NORM_WEIGHT_MUL] = NORM_ROWS_RESIDUALS_ROW(name##_mul),                                   \
        [NORM_WEIGHT_GEMMA] = NORM_ROWS_RESIDUALS_ROW(name##_gemma),                               \
        [NORM_WEIGHT_MUL_F32] = NORM_ROWS_RESIDUALS_ROW(name##_mul_f32),                           \
        [NORM_WEIGHT_GEMMA_F32] = NORM_ROWS_RESIDUALS_ROW(name##_gemma_f32)                        \
    }

NORM_ROWS_WEIGHTS(norm_rows_f32, FLD_CPU_F32)
NORM_ROWS_WEIGHTS(norm_rows_f16, FLD_CPU_F16)
NORM_ROWS_WEIGHTS(norm_rows_bf16, FLD_CPU_BF16)

static void (*const norm_rows_fns[3][NORM_WEIGHTS][NORM_RESIDUALS])(const struct fld_cpu_norm_job *,
                                                                    int64_t, int64_t) = {
    [FLD_CPU_F32] = NORM_ROWS_WEIGHTS_ROW(norm_rows_f32),
    [FLD_CPU_F16] = NORM_ROWS_WEIGHTS_ROW(norm_rows_f16),
    [FLD_CPU_BF16] = NORM_ROWS_WEIGHTS_ROW(norm_rows_bf16),
};

V_INLINE int norm_weight_of(const struct fld_cpu_norm_job *job)
{
    if (!job->weight)
        return NORM_WEIGHT_NONE;
    if (job->weight_f32)
        return job->gemma ? NORM_WEIGHT_GEMMA_F32 : NORM_WEIGHT_MUL_F32;
    return job->gemma ? NORM_WEIGHT_GEMMA : NORM_WEIGHT_MUL;
}

V_INLINE int norm_residual_of(const struct fld_cpu_norm_job *job)
{
    if (!job->residual)
        return NORM_RES_NONE;
    return job->residual_f32 ? NORM_RES_F32 : NORM_RES_X;
}

static void norm_range(const struct fld_cpu_norm_job *job, int64_t r0, int64_t r1)
{
    if (job->h <= 0)
        return;
    const int dt = job->dt == FLD_CPU_F32 || job->dt == FLD_CPU_F16 ? job->dt : FLD_CPU_BF16;
    norm_rows_fns[dt][norm_weight_of(job)][norm_residual_of(job)](job, r0, r1);
}

#endif
