/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reference rotary position embedding (impl "reference.c"), in place on
 * query and key. For token t at position p, the cache row p holds
 * cos[rot_dim/2] then sin[rot_dim/2]; for each head and frequency i the pair
 * (x, y) -- elements (i, i + rot_dim/2) for neox, (2i, 2i + 1) for gptj --
 * becomes (x cos - y sin, y cos + x sin). Elements past rot_dim are never
 * written.
 *
 * Rounding is vLLM's forward_native (apply_rotary_emb_torch), which computes
 * on tensors of the query's dtype:
 *   - float32: x c - y s and y c + x s in float32, each product and the sum
 *     rounded to float32 (no fused multiply-add);
 *   - float16 / bfloat16: cos and sin are first rounded to the query's dtype
 *     (a float32 cache is cast, cos.to(x.dtype)); then every product and
 *     the sum are rounded to that dtype: round(round(x c) - round(y s)) and
 *     round(round(y c) + round(x s)). Products of two 16-bit values and sums
 *     of two are exact or correctly rounded in float32 (24 bits >= 2 * 11 +
 *     2), so these are the exact results rounded: every backend agrees to
 *     the bit.
 */
#include <fldispatch/plugin.h>

#include "reference.h"

static void rotate_heads(char *base, int64_t heads, int64_t head_stride, int dt,
                         const void *cache_row, int cache_dt, int64_t half, bool neox)
{
    const size_t elem = dt == 0 ? 4 : 2;
    for (int64_t h = 0; h < heads; h++) {
        char *head = base + (size_t)(h * head_stride) * elem;
        for (int64_t i = 0; i < half; i++) {
            const float c = fld__ref_round(dt, fld__ref_load(cache_row, i, cache_dt)),
                        s = fld__ref_round(dt, fld__ref_load(cache_row, half + i, cache_dt));
            const int64_t ix = neox ? i : 2 * i, iy = neox ? i + half : 2 * i + 1;
            const float x = fld__ref_load(head, ix, dt), y = fld__ref_load(head, iy, dt);
            /* fld__ref_round is the identity for float32 */
            const float xc = fld__ref_round(dt, x * c), ys = fld__ref_round(dt, y * s);
            const float yc = fld__ref_round(dt, y * c), xs = fld__ref_round(dt, x * s);
            fld__ref_store(head, ix, dt, xc - ys);
            fld__ref_store(head, iy, dt, yc + xs);
        }
    }
}

int fld__ref_rotary_embedding(const void *argp)
{
    const fld_rotary_embedding_args *args = argp;
    fld_rotary_geometry g;
    fld_rotary_geometry_of(args, &g);
    const int dt = fld_dtype_index(args->query->dtype);
    const int cache_dt = fld_dtype_index(g.cache_dtype);
    const size_t elem = dt == 0 ? 4 : 2, cache_elem = cache_dt == 0 ? 4 : 2;
    const int64_t half = g.rot_dim / 2;

    for (int64_t t = 0; t < g.tokens; t++) {
        const int64_t pos = g.positions_int32 ? ((const int32_t *)g.positions)[t]
                                              : ((const int64_t *)g.positions)[t];
        const char *row = (const char *)g.cache + (size_t)(pos * g.cache_stride) * cache_elem;
        if (g.q_heads > 0)
            rotate_heads((char *)g.query + (size_t)(t * g.q_token_stride) * elem, g.q_heads,
                         g.q_head_stride, dt, row, cache_dt, half, args->is_neox);
        if (g.key && g.k_heads > 0)
            rotate_heads((char *)g.key + (size_t)(t * g.k_token_stride) * elem, g.k_heads,
                         g.k_head_stride, dt, row, cache_dt, half, args->is_neox);
    }
    return FLD_OK;
}
