/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rotary_embedding kernel body, written once against the vector layer
 * (simd_<isa>.h, included first) and compiled per instruction set by an
 * isa_<name>.c. Defines one static function:
 *
 *   static void rotary_range(const struct fld_cpu_rotary_job *job, int64_t t0, int64_t t1);
 *
 * Reads query and key and writes the result where the job says: the same
 * heads (rotary_embedding, in place) or query_out and key_out
 * (rotary_embedding_out), one loop for both; every pair is read before it
 * is written, so src == dst is safe. Per token, the cache row of its position is
 * widened to float32 once into aligned stack scratch and reused for every
 * head of query and key; rot_dim/2 frequencies are taken ROT_CHUNK at a
 * time so the scratch stays small whatever the rotary width.
 *   neox (pairs i, i + rot_dim/2): vector loads of both halves,
 *     x' = x c - y s, y' = y c + x s;
 *   gptj (pairs 2i, 2i + 1): the scratch holds the expanded rows
 *     c2 = [c0 c0 c1 c1 ...] and s2 = [-s0 s0 -s1 s1 ...], so that
 *     p' = p c2 + swap_pairs(p) s2 over contiguous vectors.
 * Products and sums are separate float32 operations (not fused; the build
 * is ISO C11, so the compiler does not contract them either), in the
 * reference's order, so the float32 result is the reference's exactly.
 * 16-bit heads round as vLLM's forward_native (core/reference/reference_rotary.c):
 * cos/sin rounded to the heads' dtype when the scratch is filled (a float32
 * cache), then every product and the sum rounded to it in registers --
 * round(round(x c) - round(y s)); gptj's s2 = -s keeps that, as rounding
 * is symmetric. These are exact results rounded once each, so the bits are
 * the reference's.
 * bfloat16 on a layer with V_BF16_PAIRS (avx2) takes its own loops below:
 * the same operations lane by lane, on elements in even/odd order.
 * Elements past rot_dim in a head are never read or written in place (only
 * prefetched: with job->prefetch, the next token's heads are prefetched
 * while this one computes; cpu.h says where that pays); out of place they
 * are copied after the rotation (job->copy_rest).
 */
#ifndef FLD_PLUGIN_CPU_BODY_ROTARY_H
#define FLD_PLUGIN_CPU_BODY_ROTARY_H

#ifndef FLD_PLUGIN_CPU_SIMD_H
#error "include the vector layer (simd_<isa>.h) before body_rotary.h"
#endif

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "cpu.h"

/* Frequencies per scratch chunk: 2 x 2 KiB of float32 (gptj expands x2). */
#define ROT_CHUNK 256

/* Widens n elements of a cache row (dtype cdt) into float32 scratch, rounded to dt. */
V_INLINE void rot_widen(float *dst, const void *src, int64_t n, const int cdt, const int dt)
{
    int64_t i = 0;
    for (; i + V_LANES <= n; i += V_LANES)
        v_store(dst + i, v_round_to(v_load(fld__cpu_at(src, i, cdt), cdt), dt), FLD_CPU_F32);
    if (i < n)
        v_store_n(dst + i, v_round_to(v_load_n(fld__cpu_at(src, i, cdt), n - i, cdt), dt), n - i,
                  FLD_CPU_F32);
}

/*
 * Scratch for frequencies [f0, f0 + n) of a cache row: neox c[i], s[i];
 * gptj the expanded c2[2i] = c2[2i+1] = c_i, s2[2i] = -s_i, s2[2i+1] = s_i
 * (widened into the upper halves first, then spread downwards in place).
 */
V_INLINE void rot_fill_dt(float *c, float *s, const void *row, int64_t f0, int64_t n, int64_t half,
                          const int cdt, const int dt, const bool neox)
{
    float *cw = neox ? c : c + ROT_CHUNK, *sw = neox ? s : s + ROT_CHUNK;
    rot_widen(cw, fld__cpu_at(row, f0, cdt), n, cdt, dt);
    rot_widen(sw, fld__cpu_at(row, half + f0, cdt), n, cdt, dt);
    if (neox)
        return;
    for (int64_t i = 0; i < n; i++) {
        float ci = cw[i], si = sw[i]; /* cw[i] lies at or above c[2i + 1]: read first */
        c[2 * i] = ci;
        c[2 * i + 1] = ci;
        s[2 * i] = -si;
        s[2 * i + 1] = si;
    }
}

/* cdt is the query's dtype dt or float32 (validated by the host). */
V_INLINE void rot_fill(float *c, float *s, const void *row, int64_t f0, int64_t n, int64_t half,
                       int cdt, const int dt, const bool neox)
{
    if (cdt == FLD_CPU_F32)
        rot_fill_dt(c, s, row, f0, n, half, FLD_CPU_F32, dt, neox);
    else
        rot_fill_dt(c, s, row, f0, n, half, dt, dt, neox);
}

/* a b rounded to dt (identity for F32): a and b are values of dt, so the product is exact. */
V_INLINE vf rot_mul(vf a, vf b, const int dt)
{
    return v_round_prod(v_mul(a, b), dt);
}

/* neox, one vector of pairs: x at xp, y at yp (written at xd, yd), cos/sin from scratch. */
V_INLINE void rot_neox_vec(const void *xp, const void *yp, void *xd, void *yd, const float *c,
                           const float *s, const int dt)
{
    vf x = v_load(xp, dt), y = v_load(yp, dt);
    vf cv = v_load(c, FLD_CPU_F32), sv = v_load(s, FLD_CPU_F32);
    v_store(xd, v_sub(rot_mul(x, cv, dt), rot_mul(y, sv, dt)), dt);
    v_store(yd, v_add(rot_mul(y, cv, dt), rot_mul(x, sv, dt)), dt);
}

/* neox: frequencies [f0, f0 + n) of one head read at head, written at dst; c, s indexed from f0. */
V_INLINE void rot_neox_head(const void *head, void *dst, int64_t f0, int64_t n, int64_t half,
                            const float *c, const float *s, const int dt)
{
    const void *xh = fld__cpu_at(head, f0, dt), *yh = fld__cpu_at(head, half + f0, dt);
    void *xd = fld__cpu_at(dst, f0, dt), *yd = fld__cpu_at(dst, half + f0, dt);
    int64_t i = 0;
    for (; i + 2 * V_LANES <= n; i += 2 * V_LANES) {
        rot_neox_vec(fld__cpu_at(xh, i, dt), fld__cpu_at(yh, i, dt), fld__cpu_at(xd, i, dt),
                     fld__cpu_at(yd, i, dt), c + i, s + i, dt);
        rot_neox_vec(fld__cpu_at(xh, i + V_LANES, dt), fld__cpu_at(yh, i + V_LANES, dt),
                     fld__cpu_at(xd, i + V_LANES, dt), fld__cpu_at(yd, i + V_LANES, dt),
                     c + i + V_LANES, s + i + V_LANES, dt);
    }
    if (i + V_LANES <= n) {
        rot_neox_vec(fld__cpu_at(xh, i, dt), fld__cpu_at(yh, i, dt), fld__cpu_at(xd, i, dt),
                     fld__cpu_at(yd, i, dt), c + i, s + i, dt);
        i += V_LANES;
    }
    if (i < n) {
        int64_t m = n - i;
        const void *xp = fld__cpu_at(xh, i, dt), *yp = fld__cpu_at(yh, i, dt);
        vf x = v_load_n(xp, m, dt), y = v_load_n(yp, m, dt);
        vf cv = v_load_n(c + i, m, FLD_CPU_F32), sv = v_load_n(s + i, m, FLD_CPU_F32);
        v_store_n(fld__cpu_at(xd, i, dt), v_sub(rot_mul(x, cv, dt), rot_mul(y, sv, dt)), m, dt);
        v_store_n(fld__cpu_at(yd, i, dt), v_add(rot_mul(y, cv, dt), rot_mul(x, sv, dt)), m, dt);
    }
}

/* gptj, one vector of interleaved pairs read at p, written at d: p' = p c2 + swap_pairs(p) s2. */
V_INLINE void rot_gptj_vec(const void *p, void *d, const float *c2, const float *s2, const int dt)
{
    vf v = v_load(p, dt);
    vf r = v_add(rot_mul(v, v_load(c2, FLD_CPU_F32), dt),
                 rot_mul(v_swap_pairs(v), v_load(s2, FLD_CPU_F32), dt));
    v_store(d, r, dt);
}

/* gptj: elements [2 f0, 2 (f0 + n)) of one head read at head, written at dst; c2, s2 indexed
 * from 2 f0. */
V_INLINE void rot_gptj_head(const void *head, void *dst, int64_t f0, int64_t n, const float *c2,
                            const float *s2, const int dt)
{
    const void *ph = fld__cpu_at(head, 2 * f0, dt);
    void *pd = fld__cpu_at(dst, 2 * f0, dt);
    const int64_t m = 2 * n;
    int64_t i = 0;
    for (; i + 2 * V_LANES <= m; i += 2 * V_LANES) {
        rot_gptj_vec(fld__cpu_at(ph, i, dt), fld__cpu_at(pd, i, dt), c2 + i, s2 + i, dt);
        rot_gptj_vec(fld__cpu_at(ph, i + V_LANES, dt), fld__cpu_at(pd, i + V_LANES, dt),
                     c2 + i + V_LANES, s2 + i + V_LANES, dt);
    }
    if (i + V_LANES <= m) {
        rot_gptj_vec(fld__cpu_at(ph, i, dt), fld__cpu_at(pd, i, dt), c2 + i, s2 + i, dt);
        i += V_LANES;
    }
    if (i < m) { /* m - i is even and V_LANES is even: no pair is split */
        int64_t k = m - i;
        vf v = v_load_n(fld__cpu_at(ph, i, dt), k, dt);
        vf r = v_add(rot_mul(v, v_load_n(c2 + i, k, FLD_CPU_F32), dt),
                     rot_mul(v_swap_pairs(v), v_load_n(s2 + i, k, FLD_CPU_F32), dt));
        v_store_n(fld__cpu_at(pd, i, dt), r, k, dt);
    }
}

/*
 * Prefetches the chunk [f0, f0 + n) of the head at nh (the same head of the
 * next token) so that memory works while this token computes (measured +17%
 * f32, +30% bf16 at 4096 tokens, one thread, on the Xeon; not on AMD, where
 * it cost: cpu.h).
 */
V_INLINE void rot_prefetch_head(const char *nh, int64_t f0, int64_t n, int64_t half, int64_t es,
                                const bool neox)
{
    if (neox) {
        for (int64_t b = f0 * es; b < (f0 + n) * es; b += 64) {
            __builtin_prefetch(nh + b, 1, 3);
            __builtin_prefetch(nh + (half * es) + b, 1, 3);
        }
    } else {
        for (int64_t b = 2 * f0 * es; b < 2 * (f0 + n) * es; b += 64)
            __builtin_prefetch(nh + b, 1, 3);
    }
}

/* One token's heads: read at base (head_stride apart), written at dst (dst_stride apart). */
struct rot_side {
    const void *base;
    void *dst;
    int64_t heads, head_stride, dst_stride;
};

/*
 * neox, the chunk [f0, f0 + n) of every head of side, blocks of 2 V_LANES
 * frequencies outermost: a block's cos and sin are loaded once and stay in
 * registers across the heads (rot_neox_head, a head at a time, would load
 * them again for every head); the frequencies left after the last whole
 * block go head by head. next (or NULL): prefetched as rot_heads does.
 */
V_INLINE void rot_neox_heads(const struct rot_side *side, int64_t f0, int64_t n, int64_t half,
                             const float *c, const float *s, const int dt, const void *next)
{
    const int64_t es = (int64_t)fld__cpu_elem_size(dt);
    int64_t i = 0;
    for (; i + 2 * V_LANES <= n; i += 2 * V_LANES, next = NULL) {
        const vf c0 = v_load(c + i, FLD_CPU_F32), c1 = v_load(c + i + V_LANES, FLD_CPU_F32);
        const vf s0 = v_load(s + i, FLD_CPU_F32), s1 = v_load(s + i + V_LANES, FLD_CPU_F32);
        const char *xh = fld__cpu_at(side->base, f0 + i, dt);
        char *xd = fld__cpu_at(side->dst, f0 + i, dt);
        const int64_t yo = half * es, lo = V_LANES * es;
        for (int64_t h = 0; h < side->heads; h++) {
            if (next) /* in the first block, a head at a time as rot_heads does */
                rot_prefetch_head(fld__cpu_at(next, h * side->head_stride, dt), f0, n, half, es,
                                  true);
            const char *xp = xh + h * side->head_stride * es;
            char *dp = xd + h * side->dst_stride * es;
            const vf x0 = v_load(xp, dt), y0 = v_load(xp + yo, dt);
            const vf x1 = v_load(xp + lo, dt), y1 = v_load(xp + yo + lo, dt);
            v_store(dp, v_sub(rot_mul(x0, c0, dt), rot_mul(y0, s0, dt)), dt);
            v_store(dp + yo, v_add(rot_mul(y0, c0, dt), rot_mul(x0, s0, dt)), dt);
            v_store(dp + lo, v_sub(rot_mul(x1, c1, dt), rot_mul(y1, s1, dt)), dt);
            v_store(dp + yo + lo, v_add(rot_mul(y1, c1, dt), rot_mul(x1, s1, dt)), dt);
        }
    }
    if (i < n)
        for (int64_t h = 0; h < side->heads; h++) {
            if (next)
                rot_prefetch_head(fld__cpu_at(next, h * side->head_stride, dt), f0, n, half, es,
                                  true);
            rot_neox_head(fld__cpu_at(side->base, h * side->head_stride, dt),
                          fld__cpu_at(side->dst, h * side->dst_stride, dt), f0 + i, n - i, half,
                          c + i, s + i, dt);
        }
}

/*
 * Whether neox takes rot_neox_heads for tokens tokens of job: when the
 * rotated part of their heads is at most ROT_BLOCKED_MAX_BYTES, so that it
 * stays in a core's caches. Measured on Zen 3 (float32, 32 + 32 heads of
 * 128, one and two threads; docs/BENCHMARKS.md, "Measured choices in the
 * CPU plugin"): cos and sin kept in registers across the heads made 1 token
 * 1.45-1.51x and 16 tokens (512 KiB) 1.22-1.29x faster; blocked at every
 * size, 128-256 tokens were 0.96-1.03x and 512-4096 tokens 0.55-0.75x: the
 * heads then come from memory, and going across a token's heads a block at
 * a time keeps the hardware prefetchers from the whole-line streams that a
 * head at a time gives them.
 */
#define ROT_BLOCKED_MAX_BYTES ((int64_t)1 << 20)

V_INLINE bool rot_blocked(const struct fld_cpu_rotary_job *job, int64_t tokens, const int dt)
{
    const fld_rotary_geometry *g = &job->g;
    const int64_t heads = g->q_heads + (g->key ? g->k_heads : 0);
    return tokens * heads * g->rot_dim * (int64_t)fld__cpu_elem_size(dt) <= ROT_BLOCKED_MAX_BYTES;
}

/* The chunk [f0, f0 + n) of every head of side (neox with blocked: rot_neox_heads); next (or
 * NULL): the same heads of the next token. */
V_INLINE void rot_heads(const struct rot_side *side, int64_t f0, int64_t n, int64_t half,
                        const float *c, const float *s, const int dt, const bool neox,
                        const bool blocked, const void *next)
{
    if (neox && blocked) {
        rot_neox_heads(side, f0, n, half, c, s, dt, next);
        return;
    }
    const int64_t es = (int64_t)fld__cpu_elem_size(dt);
    for (int64_t h = 0; h < side->heads; h++) {
        const void *head = fld__cpu_at(side->base, h * side->head_stride, dt);
        void *dst = fld__cpu_at(side->dst, h * side->dst_stride, dt);
        if (next)
            rot_prefetch_head(fld__cpu_at(next, h * side->head_stride, dt), f0, n, half, es, neox);
        if (neox)
            rot_neox_head(head, dst, f0, n, half, c, s, dt);
        else
            rot_gptj_head(head, dst, f0, n, c, s, dt);
    }
}

#ifdef V_BF16_PAIRS
/*
 * bfloat16 heads on a layer that has V_BF16_PAIRS (simd_avx2.h): blocks of
 * ROT_BLOCK = 2 * V_LANES elements split into their even and odd elements
 * (v_bf16_pair_load), so that no widening or narrowing instruction runs; the
 * arithmetic and its roundings are those above, lane by lane, so the bits
 * are the same.
 *   neox: ROT_BLOCK frequencies of x and of y per block; the scratch holds cos and
 *     sin in the same order, per block the even frequencies then the odd.
 *   gptj: a block is ROT_BLOCK / 2 pairs, whose first elements are the even ones
 *     and second the odd: cos and sin plain, ROT_BLOCK / 2 frequencies per block.
 * A partial last block goes through a zero-padded copy; the scratch is
 * zero-padded to whole blocks.
 */
#define ROT_BLOCK (2 * V_LANES)

/* (x, y) <- (round(x c) - round(y s), round(y c) + round(x s)), the sums not yet rounded. */
V_INLINE void rot_pair_bf16(vf *x, vf *y, vf c, vf s)
{
    const vf xc = rot_mul(*x, c, FLD_CPU_BF16), ys = rot_mul(*y, s, FLD_CPU_BF16);
    const vf yc = rot_mul(*y, c, FLD_CPU_BF16), xs = rot_mul(*x, s, FLD_CPU_BF16);
    *x = v_sub(xc, ys);
    *y = v_add(yc, xs);
}

V_INLINE void rot_neox_block_bf16(const void *xp, const void *yp, void *xd, void *yd,
                                  const float *c, const float *s)
{
    vf xe, xo, ye, yo;
    v_bf16_pair_load(xp, &xe, &xo);
    v_bf16_pair_load(yp, &ye, &yo);
    rot_pair_bf16(&xe, &ye, v_load(c, FLD_CPU_F32), v_load(s, FLD_CPU_F32));
    rot_pair_bf16(&xo, &yo, v_load(c + V_LANES, FLD_CPU_F32), v_load(s + V_LANES, FLD_CPU_F32));
    v_bf16_pair_store(xd, v_bf16_round_hi(xe), v_bf16_round_hi(xo));
    v_bf16_pair_store(yd, v_bf16_round_hi(ye), v_bf16_round_hi(yo));
}

V_INLINE void rot_gptj_block_bf16(const void *p, void *d, const float *c, const float *s)
{
    vf x, y;
    v_bf16_pair_load(p, &x, &y);
    rot_pair_bf16(&x, &y, v_load(c, FLD_CPU_F32), v_load(s, FLD_CPU_F32));
    v_bf16_pair_store(d, v_bf16_round_hi(x), v_bf16_round_hi(y));
}

/* neox: frequencies [f0, f0 + n) of one head read at head, written at dst; c, s (block order)
 * indexed from f0. */
V_INLINE void rot_neox_head_bf16(const void *head, void *dst, int64_t f0, int64_t n, int64_t half,
                                 const float *c, const float *s)
{
    const void *xh = fld__cpu_at(head, f0, FLD_CPU_BF16),
               *yh = fld__cpu_at(head, half + f0, FLD_CPU_BF16);
    void *xd = fld__cpu_at(dst, f0, FLD_CPU_BF16), *yd = fld__cpu_at(dst, half + f0, FLD_CPU_BF16);
    int64_t i = 0;
    for (; i + ROT_BLOCK <= n; i += ROT_BLOCK)
        rot_neox_block_bf16(fld__cpu_at(xh, i, FLD_CPU_BF16), fld__cpu_at(yh, i, FLD_CPU_BF16),
                            fld__cpu_at(xd, i, FLD_CPU_BF16), fld__cpu_at(yd, i, FLD_CPU_BF16),
                            c + i, s + i);
    if (i < n) {
        uint16_t xb[ROT_BLOCK] = {0}, yb[ROT_BLOCK] = {0};
        const size_t bytes = (size_t)(n - i) * 2u;
        memcpy(xb, fld__cpu_at(xh, i, FLD_CPU_BF16), bytes);
        memcpy(yb, fld__cpu_at(yh, i, FLD_CPU_BF16), bytes);
        rot_neox_block_bf16(xb, yb, xb, yb, c + i, s + i);
        memcpy(fld__cpu_at(xd, i, FLD_CPU_BF16), xb, bytes);
        memcpy(fld__cpu_at(yd, i, FLD_CPU_BF16), yb, bytes);
    }
}

/* gptj: elements [2 f0, 2 (f0 + n)) of one head read at head, written at dst; c, s (plain)
 * indexed from f0. */
V_INLINE void rot_gptj_head_bf16(const void *head, void *dst, int64_t f0, int64_t n, const float *c,
                                 const float *s)
{
    const void *ph = fld__cpu_at(head, 2 * f0, FLD_CPU_BF16);
    void *pd = fld__cpu_at(dst, 2 * f0, FLD_CPU_BF16);
    const int64_t m = 2 * n;
    int64_t i = 0;
    for (; i + ROT_BLOCK <= m; i += ROT_BLOCK)
        rot_gptj_block_bf16(fld__cpu_at(ph, i, FLD_CPU_BF16), fld__cpu_at(pd, i, FLD_CPU_BF16),
                            c + i / 2, s + i / 2);
    if (i < m) { /* m - i is even: no pair is split */
        uint16_t pb[ROT_BLOCK] = {0};
        const size_t bytes = (size_t)(m - i) * 2u;
        memcpy(pb, fld__cpu_at(ph, i, FLD_CPU_BF16), bytes);
        rot_gptj_block_bf16(pb, pb, c + i / 2, s + i / 2);
        memcpy(fld__cpu_at(pd, i, FLD_CPU_BF16), pb, bytes);
    }
}

/*
 * Scratch for frequencies [f0, f0 + n) of a cache row, rounded to bfloat16,
 * zero-padded to whole blocks: gptj plain in c, s; neox widened plain into
 * the upper halves, then reordered per block (even frequencies, then odd)
 * into the lower halves.
 */
V_INLINE void rot_fill_bf16_cdt(float *c, float *s, const void *row, int64_t f0, int64_t n,
                                int64_t half, const int cdt, const bool neox)
{
    const int64_t padded = (n + ROT_BLOCK - 1) / ROT_BLOCK * ROT_BLOCK;
    float *cw = neox ? c + ROT_CHUNK : c, *sw = neox ? s + ROT_CHUNK : s;
    rot_widen(cw, fld__cpu_at(row, f0, cdt), n, cdt, FLD_CPU_BF16);
    rot_widen(sw, fld__cpu_at(row, half + f0, cdt), n, cdt, FLD_CPU_BF16);
    for (int64_t i = n; i < padded; i++)
        cw[i] = sw[i] = 0.0f;
    if (!neox)
        return;
    for (int64_t b = 0; b < padded; b += ROT_BLOCK)
        for (int64_t j = 0; j < V_LANES; j++) {
            c[b + j] = cw[b + 2 * j];
            c[b + V_LANES + j] = cw[b + 2 * j + 1];
            s[b + j] = sw[b + 2 * j];
            s[b + V_LANES + j] = sw[b + 2 * j + 1];
        }
}

/* cdt is bfloat16 or float32 (validated by the host). */
V_INLINE void rot_fill_bf16(float *c, float *s, const void *row, int64_t f0, int64_t n,
                            int64_t half, int cdt, const bool neox)
{
    if (cdt == FLD_CPU_F32)
        rot_fill_bf16_cdt(c, s, row, f0, n, half, FLD_CPU_F32, neox);
    else
        rot_fill_bf16_cdt(c, s, row, f0, n, half, FLD_CPU_BF16, neox);
}

V_INLINE void rot_heads_bf16(const struct rot_side *side, int64_t f0, int64_t n, int64_t half,
                             const float *c, const float *s, const bool neox, const void *next)
{
    for (int64_t h = 0; h < side->heads; h++) {
        const void *head = fld__cpu_at(side->base, h * side->head_stride, FLD_CPU_BF16);
        void *dst = fld__cpu_at(side->dst, h * side->dst_stride, FLD_CPU_BF16);
        if (next)
            rot_prefetch_head(fld__cpu_at(next, h * side->head_stride, FLD_CPU_BF16), f0, n, half,
                              2, neox);
        if (neox)
            rot_neox_head_bf16(head, dst, f0, n, half, c, s);
        else
            rot_gptj_head_bf16(head, dst, f0, n, c, s);
    }
}
#endif

/* Out of place: the elements past rot_dim of every head of side, copied. */
V_INLINE void rot_copy_rest(const struct rot_side *side, int64_t rot_dim, int64_t head_size,
                            const int dt)
{
    const size_t bytes = (size_t)(head_size - rot_dim) * fld__cpu_elem_size(dt);
    for (int64_t h = 0; h < side->heads; h++)
        memcpy(fld__cpu_at(side->dst, h * side->dst_stride + rot_dim, dt),
               fld__cpu_at(side->base, h * side->head_stride + rot_dim, dt), bytes);
}

V_INLINE void rot_tokens(const struct fld_cpu_rotary_job *job, int64_t t0, int64_t t1, const int dt,
                         const bool neox)
{
    const bool blocked = neox && rot_blocked(job, t1 - t0, dt);
    const fld_rotary_geometry *g = &job->g, *o = &job->out;
    const int64_t half = g->rot_dim / 2;
    const int cdt = job->cache_dt;
    float c[2 * ROT_CHUNK] __attribute__((aligned(64)));
    float s[2 * ROT_CHUNK] __attribute__((aligned(64)));

    for (int64_t t = t0; t < t1; t++) {
        const int64_t pos = g->positions_int32 ? ((const int32_t *)g->positions)[t]
                                               : ((const int64_t *)g->positions)[t];
        const void *row = fld__cpu_at(g->cache, pos * g->cache_stride, cdt);
        /* A side with no heads may have no storage at all: no address for it. */
        const bool has_q = g->q_heads > 0, has_k = g->key && g->k_heads > 0;
        const struct rot_side q = {
            has_q ? fld__cpu_at(g->query, t * g->q_token_stride, dt) : NULL,
            has_q ? fld__cpu_at(o->query, t * o->q_token_stride, dt) : NULL,
            g->q_heads,
            g->q_head_stride,
            o->q_head_stride,
        };
        const struct rot_side k = {
            has_k ? fld__cpu_at(g->key, t * g->k_token_stride, dt) : NULL,
            has_k ? fld__cpu_at(o->key, t * o->k_token_stride, dt) : NULL,
            g->k_heads,
            g->k_head_stride,
            o->k_head_stride,
        };
        for (int64_t f0 = 0; f0 < half; f0 += ROT_CHUNK) {
            const int64_t n = half - f0 < ROT_CHUNK ? half - f0 : ROT_CHUNK;
            const bool more = job->prefetch && t + 1 < t1;
#ifdef V_BF16_PAIRS
            if (dt == FLD_CPU_BF16) {
                rot_fill_bf16(c, s, row, f0, n, half, cdt, neox);
                if (has_q)
                    rot_heads_bf16(&q, f0, n, half, c, s, neox,
                                   more ? fld__cpu_at(q.base, g->q_token_stride, dt) : NULL);
                if (has_k)
                    rot_heads_bf16(&k, f0, n, half, c, s, neox,
                                   more ? fld__cpu_at(k.base, g->k_token_stride, dt) : NULL);
                continue;
            }
#endif
            rot_fill(c, s, row, f0, n, half, cdt, dt, neox);
            if (has_q)
                rot_heads(&q, f0, n, half, c, s, dt, neox, blocked,
                          more ? fld__cpu_at(q.base, g->q_token_stride, dt) : NULL);
            if (has_k)
                rot_heads(&k, f0, n, half, c, s, dt, neox, blocked,
                          more ? fld__cpu_at(k.base, g->k_token_stride, dt) : NULL);
        }
        if (job->copy_rest) {
            if (has_q)
                rot_copy_rest(&q, g->rot_dim, job->head_size, dt);
            if (has_k)
                rot_copy_rest(&k, g->rot_dim, job->head_size, dt);
        }
    }
}

static void rotary_range(const struct fld_cpu_rotary_job *job, int64_t t0, int64_t t1)
{
    if (job->g.rot_dim < 2)
        return;
    const bool neox = job->is_neox;
    switch (job->dt) {
    case FLD_CPU_F32:
        if (neox)
            rot_tokens(job, t0, t1, FLD_CPU_F32, true);
        else
            rot_tokens(job, t0, t1, FLD_CPU_F32, false);
        break;
    case FLD_CPU_F16:
        if (neox)
            rot_tokens(job, t0, t1, FLD_CPU_F16, true);
        else
            rot_tokens(job, t0, t1, FLD_CPU_F16, false);
        break;
    default:
        if (neox)
            rot_tokens(job, t0, t1, FLD_CPU_BF16, true);
        else
            rot_tokens(job, t0, t1, FLD_CPU_BF16, false);
        break;
    }
}

#endif
