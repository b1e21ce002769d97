/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Gated activations over a range of rows (struct fld_cpu_act_job, cpu.h),
 * written once against the vector layer and vmath.h; each isa_<name>.c
 * includes it after its simd_<name>.h and vmath.h.
 *
 * out[r][j] = f(a[j], b[j]) with a = x[r][0, d) and b = x[r][d, 2d), with
 * the rounding of core/reference/reference_activation.c (vLLM's):
 *   float32           the vector activation (vmath.h) times the other half,
 *                     one rounding; within vLLM's float32 tolerance of the
 *                     reference, and more accurate than vLLM's formulas in
 *                     the far negative tails, where those cancel;
 *   float16/bfloat16  round(round(act) * other), round(act) looked up in
 *                     a table (exact.c: the reference's value for each of
 *                     the 65536 inputs, so these results are the
 *                     reference's to the bit), or, where the layer defines
 *                     V_ROUND16_BOUND and fld__cpu_act16_compute is set,
 *                     computed in float32 and rounded wherever an error
 *                     bound settles the rounding, looked up elsewhere
 *                     (act16_block: the same bits); the product of two
 *                     16-bit values is exact in float32 and is rounded on
 *                     store.
 * With job->torch (VLLM_FL_CPU_ACTIVATIONS=torch) the activations follow
 * PyTorch's CPU kernels instead: float32 through vmath.h's torch forms, the
 * 16-bit tables built from the same forms (exact.c).
 * The operation, the dtype, the form, whether 16-bit activations are
 * computed and whether stores are non-temporal are compile-time constants
 * of each inner loop: act_range() switches once per call into one of them.
 *
 * Reads and writes stay inside each row's [0, 2d) and [0, d) (tails use the
 * layer's partial loads and stores). out may be x's first half (a); each
 * vector is loaded before the same elements are stored.
 */
#ifndef FLD_PLUGIN_CPU_BODY_ACTIVATION_H
#define FLD_PLUGIN_CPU_BODY_ACTIVATION_H

#include <stddef.h>
#include <stdint.h>

/*
 * Vectors per iteration, computed as interleaved chains: 4 where there are
 * 32 vector registers (AVX-512, arm64), 2 where there are 16 (AVX2, SSE),
 * so the chains' temporaries stay in registers.
 */
#ifndef ACT_UNROLL
#if V_LANES == 16 || defined(__aarch64__)
#define ACT_UNROLL 4
#else
#define ACT_UNROLL 2
#endif
#endif

/*
 * float32: r[u] = fn(a[u]) for n vectors at once (see vmath.h: interleaved
 * chains), in the function's vector form (activations.def); torch: its
 * PyTorch CPU form where it has one (VLLM_FL_CPU_ACTIVATIONS=torch).
 */
V_INLINE void act_fn_n(enum fld_cpu_act_fn fn, const int torch, vf *r, const vf *a, int n)
{
    if (torch)
        switch (fn) {
#define FLD_CPU_ACT_TORCH_FORM(FN, scalar, vector)                                                 \
    case FLD_CPU_FN_##FN:                                                                          \
        vector(r, a, n);                                                                           \
        return;
#include "activations.def"
        default:
            break;
        }
    switch (fn) {
#define FLD_CPU_ACT_FUNCTION(FN, scalar, vector)                                                   \
    case FLD_CPU_FN_##FN:                                                                          \
        vector(r, a, n);                                                                           \
        return;
#include "activations.def"
    default:
        return;
    }
}

/*
 * The kernels below are compiled once per caller before act folds to a
 * constant: each switches on act over its own family's rows only, so that
 * a body holds the forms its family can reach and no others.
 */

/* Elementwise, float32: r[u] = f(a[u]) for n vectors, in the function's one form. */
V_INLINE void unary_apply_n(enum fld_cpu_act act, vf *r, const vf *a, int n)
{
    switch (act) {
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN)                                             \
    FLD_CPU_ACT_IF_ELEMENTWISE_##FAMILY(case FLD_CPU_ACT_##ID                                       \
                                        : act_fn_n(FLD_CPU_FN_##FN, 0, r, a, n);                   \
                                        return;)
#include "activations.def"
    default:
        return;
    }
}

/* Gated, float32: r[u] = a[u] * b[u] with fn applied to a (first) or to b (second). */
V_INLINE void gated_apply_n(enum fld_cpu_act_fn fn, const int second, const int torch, vf *r,
                            const vf *a, const vf *b, int n)
{
    act_fn_n(fn, torch, r, second ? b : a, n);
    if (second) {
        VM_FOR(u, n) r[u] = v_mul(a[u], r[u]);
    } else {
        VM_FOR(u, n) r[u] = v_mul(r[u], b[u]);
    }
}

/* float32: r[u] = f(a[u], b[u]) for n vectors (elementwise: f(a[u])). */
V_INLINE void act_apply_n(enum fld_cpu_act act, const int torch, vf *r, const vf *a, const vf *b,
                          int n)
{
    switch (act) {
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN)                                             \
    FLD_CPU_ACT_IF_GATED_##FAMILY(case FLD_CPU_ACT_##ID                                            \
                                  : gated_apply_n(FLD_CPU_FN_##FN, FLD_CPU_ACT_HALF_##HALF, torch, \
                                                  r, a, b, n);                                     \
                                  return;)
#include "activations.def"
    default:
        unary_apply_n(act, r, a, n);
        return;
    }
}

#if defined(V_ROUND16_BOUND)
/*
 * 16-bit activations computed in float32 (where the layer defines
 * V_ROUND16_BOUND, and fld__cpu_act16_compute is set): v = the vector form
 * of vmath.h, and round(v) is the reference's round(act(a)) wherever every
 * value within t of v rounds alike, with t a bound on |v - ref|, ref the
 * reference's float32 value (exact.c: vLLM's formulas with the C
 * library's expf, erff, tanhf):
 *
 *   t = rel |v| + abs_a |a|
 *
 * rel covers the vector form's error and the reference's own rounding
 * errors (a few float32 ulps each); abs_a covers where the reference
 * cancels: 1 + erff(z) and 1 + tanhf(u) carry the absolute error of
 * erff / tanhf (~2^-24), times a / 2, which for a < 0 is large against
 * the small result (gelu at a = -3: 2^-12 relative; at a < -5.5 the
 * reference's result is -0, and t exceeds |v|, so such lanes always fall
 * back). silu has no cancellation (abs_a 0) but the reference's expf(-a)
 * overflows below a = -88.7 (result -0 where the true one is not), so its
 * lanes below a_min = -80 fall back; a NaN or -inf a falls back in every
 * function (a >= a_min is false).
 *
 * A vector with any such lane (v_round16_bound's unsure bits) is looked up
 * whole in the table (v_lookup16, VLLM_FL_CPU_LOOKUP's way), so every
 * result is still the table's. The fraction of lanes that fall back is
 * about 2 t / (the 16-bit spacing at v): for inputs uniform in [-4, 4],
 * silu 0.2%, gelu and gelu_tanh 9% (float16) and 2-4% (bfloat16), from
 * their negative tails; for normally distributed inputs 0.05-0.5%.
 *
 * The constants, and which functions may be computed at all, are
 * activations.def's FLD_CPU_ACT_COMPUTED16 rows; the torch forms' bound is
 * one for all (ACT16_TORCH_REL).
 */
#define ACT16_TORCH_REL 0x1p-22f

struct act16_bound {
    float rel, abs_a, a_min;
};

/*
 * v = fn's values in the form computed16 takes (activations.def:
 * FLD_CPU_ACT_COMPUTED16; with torch, its PyTorch form) and their bound.
 */
V_INLINE struct act16_bound act16_fn_n(enum fld_cpu_act_fn fn, const int torch, vf *v, const vf *a,
                                       int n)
{
    switch (fn) {
#define FLD_CPU_ACT_COMPUTED16(FN, vector, rel, abs_a, a_min)                                      \
    case FLD_CPU_FN_##FN:                                                                          \
        if (torch) { /* vmath.h's torch forms are exact.c's, operation for operation */            \
            act_fn_n(FLD_CPU_FN_##FN, 1, v, a, n);                                                 \
            return (struct act16_bound){ACT16_TORCH_REL, 0.0f, -__FLT_MAX__};                     \
        }                                                                                          \
        vector(v, a, n);                                                                           \
        return (struct act16_bound){rel, abs_a, a_min};
#include "activations.def"
    default: /* looked up only (act_rows_dt): a >= NaN is false in every lane */
        VM_FOR(u, n) v[u] = a[u];
        return (struct act16_bound){0.0f, 0.0f, __builtin_nanf("")};
    }
}

/* r[u] = round(act(g[u])) * o[u] for n vectors of the activated half at pg, the other at po. */
V_INLINE void act16_block(enum fld_cpu_act act, const int dt, const int torch,
                          const uint16_t *table, vf *r, const char *pg, const char *po, int n)
{
    const int64_t step = V_LANES * 2;
    vf a[ACT_UNROLL], v[ACT_UNROLL];
    VM_FOR(u, n) a[u] = v_load(pg + u * step, dt);
    const struct act16_bound bd = act16_fn_n(fld__cpu_act_fn(act), torch, v, a, n);
    VM_FOR(u, n)
    {
        vf t = v_mul(v_abs(v[u]), v_set1(bd.rel));
        if (bd.abs_a != 0.0f)
            t = v_fma(v_abs(a[u]), v_set1(bd.abs_a), t);
        unsigned unsure;
        vf g = v_round16_bound(v[u], t, dt, &unsure);
        unsure |= v_lanes_not_ge(a[u], v_set1(bd.a_min));
        if (__builtin_expect(unsure != 0, 0))
            g = v_lookup16(table, pg + u * step, dt);
        r[u] = v_mul(g, v_load(po + u * step, dt));
    }
}
#endif

/*
 * r[u] = f(a, b) for the n whole vectors at pa, pb (n <= ACT_UNROLL). For
 * 16-bit dtypes the activated half (activations.def's HALF) is looked
 * up (with c16, computed: act16_block) and the other half multiplied in.
 */
V_INLINE void act_block(enum fld_cpu_act act, const int dt, const int torch, const int c16,
                        const uint16_t *table, vf *r, const char *pa, const char *pb, int n)
{
    const int64_t step = V_LANES * (int64_t)fld__cpu_elem_size(dt);
    if (dt != FLD_CPU_F32) {
        const bool second = fld__cpu_act_second_half(act);
        const char *pg = second ? pb : pa, *po = second ? pa : pb;
#if defined(V_ROUND16_BOUND)
        if (c16) {
            act16_block(act, dt, torch, table, r, pg, po, n);
            return;
        }
#else
        (void)c16;
#endif
        VM_FOR(u, n) r[u] = v_mul(v_lookup16(table, pg + u * step, dt), v_load(po + u * step, dt));
        return;
    }
    vf a[ACT_UNROLL], b[ACT_UNROLL];
    VM_FOR(u, n) a[u] = v_load(pa + u * step, dt);
    VM_FOR(u, n) b[u] = v_load(pb + u * step, dt);
    act_apply_n(act, torch, r, a, b, n);
}

/* The same for the first m < V_LANES elements (other lanes 0). */
V_INLINE vf act_part(enum fld_cpu_act act, const int dt, const int torch, const uint16_t *table,
                     const char *pa, const char *pb, int64_t m)
{
    if (dt != FLD_CPU_F32) {
        const bool second = fld__cpu_act_second_half(act);
        const char *pg = second ? pb : pa, *po = second ? pa : pb;
        return v_mul(v_lookup16_n(table, pg, m, dt), v_load_n(po, m, dt));
    }
    vf a = v_load_n(pa, m, dt), b = v_load_n(pb, m, dt), r;
    act_apply_n(act, torch, &r, &a, &b, 1);
    return r;
}

V_INLINE void act_put(void *p, vf v, int dt, int stream)
{
    if (stream)
        v_stream(p, v, dt);
    else
        v_store(p, v, dt);
}

/*
 * n elements of a row: out at po, the halves at pa and pb. With stream, the
 * elements before the first vector-aligned output address go through a
 * partial store, so every full vector after them can be a non-temporal
 * store. pf (or NULL): the next row's x, prefetched at the offsets this
 * span reads (pf + the offset into pa, and that plus pb - pa for pb), so that
 * memory keeps streaming while the row computes (the hardware prefetchers
 * alone left loading and computing to take turns). Measured on Zen 4 at
 * 4096 x 4096, after/before medians of three alternated runs: one thread
 * +6-72% float32, +10-33% 16-bit; two threads +6-40% (docs/BENCHMARKS.md).
 */
V_INLINE void act_span(enum fld_cpu_act act, const int dt, const int torch, const int c16,
                       int stream, const uint16_t *table, char *po, const char *pa, const char *pb,
                       int64_t n, const char *pf)
{
    const int64_t es = (int64_t)fld__cpu_elem_size(dt);
    const ptrdiff_t half = pb - pa; /* where a row's second half lies from its first */
    int64_t j = 0;

    if (stream) {
        int64_t head = (int64_t)((0u - (uintptr_t)po) % (uintptr_t)(V_LANES * es)) / es;
        if (head > n)
            head = n;
        if (head > 0) {
            v_store_n(po, act_part(act, dt, torch, table, pa, pb, head), head, dt);
            j = head;
        }
    }
    for (; j + ACT_UNROLL * V_LANES <= n; j += ACT_UNROLL * V_LANES) {
        if (pf)
            for (int64_t b = 0; b < ACT_UNROLL * V_LANES * es; b += 64) {
                fld__cpu_prefetch_row(pf + j * es + b, dt);
                fld__cpu_prefetch_row(pf + half + j * es + b, dt);
            }
        vf r[ACT_UNROLL];
        act_block(act, dt, torch, c16, table, r, pa + j * es, pb + j * es, ACT_UNROLL);
        VM_FOR(u, ACT_UNROLL) act_put(po + (j + u * V_LANES) * es, r[u], dt, stream);
    }
    for (; j + V_LANES <= n; j += V_LANES) {
        vf r[1];
        act_block(act, dt, torch, c16, table, r, pa + j * es, pb + j * es, 1);
        act_put(po + j * es, r[0], dt, stream);
    }
    if (j < n)
        v_store_n(po + j * es, act_part(act, dt, torch, table, pa + j * es, pb + j * es, n - j),
                  n - j, dt);
}

#ifdef V_BF16_PAIRS
/*
 * bfloat16 rows looked up (not computed) on a layer with bfloat16 pairs
 * (V_BF16_PAIRS: simd_avx2.h): 2 * V_LANES elements at a time in the
 * layer's pair order. The table's entries come as a pair
 * (v_bf16_pair_lookup), the other half is widened by v_bf16_pair_load, and
 * the products are rounded by v_bf16_round_hi and packed back without
 * shuffles: v_to_bf16's per-vector widening, NaN blend and cross-lane pack
 * are gone. The same bits as act_span: each product of two bfloat16 values
 * is exact in float32 and rounded once to nearest even, and a NaN product
 * (an operand's NaN made quiet, or the default NaN) has zero low 16 bits
 * and the quiet bit set, which the rounding bias leaves as it is. With
 * stream, pairs go out non-temporally from the first element whose output
 * address is aligned to a whole pair; the elements before it and the last
 * < 2 * V_LANES take act_span.
 */
#define ACT_PAIR (2 * V_LANES)

V_INLINE void act_pair1(enum fld_cpu_act act, const uint16_t *table, char *po, const char *pa,
                        const char *pb, const int stream)
{
    const bool second = fld__cpu_act_second_half(act);
    vf ga, gb, oa, ob;
    v_bf16_pair_lookup(table, second ? pb : pa, &ga, &gb);
    v_bf16_pair_load(second ? pa : pb, &oa, &ob);
    const vf ra = v_bf16_round_hi(v_mul(ga, oa)), rb = v_bf16_round_hi(v_mul(gb, ob));
    if (stream)
        v_bf16_pair_stream(po, ra, rb);
    else
        v_bf16_pair_store(po, ra, rb);
}

V_INLINE void act_row_pairs(enum fld_cpu_act act, int stream, const uint16_t *table, void *out,
                            const void *x, int64_t d, const char *pf)
{
    const int64_t es = 2, pair_bytes = ACT_PAIR * es;
    const char *pa = x;
    const char *pb = pa + d * es;
    char *po = out;
    int64_t j = 0;

    if (stream) {
        j = (int64_t)((0u - (uintptr_t)po) % (uintptr_t)pair_bytes) / es;
        if (j > d)
            j = d;
        act_span(act, FLD_CPU_BF16, 0, 0, 0, table, po, pa, pb, j, NULL);
    }
    for (; j + 2 * ACT_PAIR <= d; j += 2 * ACT_PAIR) {
        if (pf)
            for (int64_t b = 0; b < 2 * pair_bytes; b += 64) {
                fld__cpu_prefetch_row(pf + j * es + b, FLD_CPU_BF16);
                fld__cpu_prefetch_row(pf + (d + j) * es + b, FLD_CPU_BF16);
            }
        act_pair1(act, table, po + j * es, pa + j * es, pb + j * es, stream);
        act_pair1(act, table, po + (j + ACT_PAIR) * es, pa + (j + ACT_PAIR) * es,
                  pb + (j + ACT_PAIR) * es, stream);
    }
    for (; j + ACT_PAIR <= d; j += ACT_PAIR)
        act_pair1(act, table, po + j * es, pa + j * es, pb + j * es, stream);
    if (j < d)
        act_span(act, FLD_CPU_BF16, 0, 0, stream, table, po + j * es, pa + j * es, pb + j * es,
                 d - j, NULL);
}
#endif

/*
 * An elementwise row: out[0, n) = f(x[0, n)); 16-bit values looked up
 * whole (the table holds round(f(x)), the reference's bits; a layer with
 * V_LOOKUP16_STORE, simd_avx2.h, stores the entries without widening
 * them), float32 computed. stream and pf as in act_span.
 */
V_INLINE vf unary_part(enum fld_cpu_act act, const int dt, const uint16_t *table, const char *px,
                       int64_t m)
{
    if (dt != FLD_CPU_F32)
        return v_lookup16_n(table, px, m, dt);
    vf a = v_load_n(px, m, dt), r;
    unary_apply_n(act, &r, &a, 1);
    return r;
}

V_INLINE void unary_row(enum fld_cpu_act act, const int dt, int stream, const uint16_t *table,
                        char *po, const char *px, int64_t n, const char *pf)
{
    const int64_t es = (int64_t)fld__cpu_elem_size(dt), step = V_LANES * es;
    int64_t j = 0;

    if (stream) {
        int64_t head = (int64_t)((0u - (uintptr_t)po) % (uintptr_t)step) / es;
        if (head > n)
            head = n;
        if (head > 0) {
            v_store_n(po, unary_part(act, dt, table, px, head), head, dt);
            j = head;
        }
    }
    for (; j + ACT_UNROLL * V_LANES <= n; j += ACT_UNROLL * V_LANES) {
        if (pf)
            for (int64_t b = 0; b < ACT_UNROLL * step; b += 64)
                fld__cpu_prefetch_row(pf + j * es + b, dt);
        vf r[ACT_UNROLL];
        if (dt != FLD_CPU_F32) {
#ifdef V_LOOKUP16_STORE
            VM_FOR(u, ACT_UNROLL)
            v_lookup16_store(table, px + j * es + u * step, po + j * es + u * step, stream);
            continue;
#else
            VM_FOR(u, ACT_UNROLL) r[u] = v_lookup16(table, px + j * es + u * step, dt);
#endif
        } else {
            vf a[ACT_UNROLL];
            VM_FOR(u, ACT_UNROLL) a[u] = v_load(px + j * es + u * step, dt);
            unary_apply_n(act, r, a, ACT_UNROLL);
        }
        VM_FOR(u, ACT_UNROLL) act_put(po + j * es + u * step, r[u], dt, stream);
    }
    for (; j + V_LANES <= n; j += V_LANES)
        act_put(po + j * es, unary_part(act, dt, table, px + j * es, V_LANES), dt, stream);
    if (j < n)
        v_store_n(po + j * es, unary_part(act, dt, table, px + j * es, n - j), n - j, dt);
}

/* One row: out[0, d) from x[0, 2d) (gated) or x[0, d) (elementwise). */
V_INLINE void act_row(enum fld_cpu_act act, const int dt, const int torch, const int c16,
                      int stream, const uint16_t *table, void *out, const void *x, int64_t d,
                      const char *pf)
{
    if (!fld__cpu_act_gated(act)) {
        unary_row(act, dt, stream, table, out, x, d, pf);
        return;
    }
#ifdef V_BF16_PAIRS
    if (dt == FLD_CPU_BF16 && !c16) {
        act_row_pairs(act, stream, table, out, x, d, pf);
        return;
    }
#endif
    const int64_t es = (int64_t)fld__cpu_elem_size(dt);
    act_span(act, dt, torch, c16, stream, table, out, x, (const char *)x + d * es, d, pf);
}

V_INLINE void act_rows(const struct fld_cpu_act_job *job, int64_t r0, int64_t r1,
                       enum fld_cpu_act act, int dt, const int torch, const int c16)
{
    const int64_t es = (int64_t)fld__cpu_elem_size(dt);
    const char *x = job->x;
    char *out = job->out;
    /* 16-bit dtypes: the rounded activations (built on first use; NULL for float32) */
    const uint16_t *table = fld__cpu_act_table(fld__cpu_act_fn(act), dt, job->torch);

    /* Non-temporal stores need element-aligned rows to reach vector alignment. */
    if (job->stream && (uintptr_t)out % (uintptr_t)es == 0) {
        for (int64_t r = r0; r < r1; r++)
            act_row(act, dt, torch, c16, 1, table, out + r * job->out_stride * es,
                    x + r * job->x_stride * es, job->d,
                    r + 1 < r1 ? x + (r + 1) * job->x_stride * es : NULL);
        v_stream_fence();
    } else {
        for (int64_t r = r0; r < r1; r++)
            act_row(act, dt, torch, c16, 0, table, out + r * job->out_stride * es,
                    x + r * job->x_stride * es, job->d,
                    r + 1 < r1 ? x + (r + 1) * job->x_stride * es : NULL);
    }
}

/*
 * torch: a compile-time constant of each float32 loop (16-bit dtypes differ
 * only by table); c16 of each 16-bit one (computed, not only looked up).
 * A function with one form, or looked up only (activations.def), and every
 * elementwise activation (16-bit values always looked up) take neither.
 */
V_INLINE void act_rows_dt(const struct fld_cpu_act_job *job, int64_t r0, int64_t r1, int dt,
                          const int torch, const int c16)
{
    switch (job->act) {
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN)                                             \
    case FLD_CPU_ACT_##ID:                                                                         \
        act_rows(job, r0, r1, FLD_CPU_ACT_##ID, dt,                                                \
                 FLD_CPU_ACT_FAMILY_##FAMILY && fld__cpu_act_fn_has_torch_form(FLD_CPU_FN_##FN)    \
                     ? torch                                                                       \
                     : 0,                                                                          \
                 FLD_CPU_ACT_FAMILY_##FAMILY && fld__cpu_act_fn_computed16(FLD_CPU_FN_##FN)        \
                     ? c16                                                                         \
                     : 0);                                                                         \
        break;
#include "activations.def"
    default:
        break;
    }
}

static void act_range(const struct fld_cpu_act_job *job, int64_t row_begin, int64_t row_end)
{
#if defined(V_ROUND16_BOUND)
    const bool c16 = fld__cpu_act16_compute;
#else
    const bool c16 = false;
#endif
    const int dt = job->dt;
    if (dt == FLD_CPU_F32) {
        if (job->torch)
            act_rows_dt(job, row_begin, row_end, FLD_CPU_F32, 1, 0);
        else
            act_rows_dt(job, row_begin, row_end, FLD_CPU_F32, 0, 0);
        return;
    }
    /* 16-bit: looked up (torch or not: the table tells), or computed in one of the two forms */
    if (!c16) {
        if (dt == FLD_CPU_F16)
            act_rows_dt(job, row_begin, row_end, FLD_CPU_F16, 0, 0);
        else
            act_rows_dt(job, row_begin, row_end, FLD_CPU_BF16, 0, 0);
    } else if (job->torch) {
        if (dt == FLD_CPU_F16)
            act_rows_dt(job, row_begin, row_end, FLD_CPU_F16, 1, 1);
        else
            act_rows_dt(job, row_begin, row_end, FLD_CPU_BF16, 1, 1);
    } else {
        if (dt == FLD_CPU_F16)
            act_rows_dt(job, row_begin, row_end, FLD_CPU_F16, 0, 1);
        else
            act_rows_dt(job, row_begin, row_end, FLD_CPU_BF16, 0, 1);
    }
}

#endif
