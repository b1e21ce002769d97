/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reference rotary position embedding (impl "reference.c"): in place on
 * query and key (rotary_embedding), or reading them and writing query_out
 * and key_out (rotary_embedding_out), one loop for both. For token t at
 * position p, the cache row p holds cos[rot_dim/2] then sin[rot_dim/2]; for
 * each head and frequency i the pair (x, y) -- elements (i, i + rot_dim/2)
 * for neox, (2i, 2i + 1) for gptj -- becomes (x cos - y sin, y cos + x sin).
 * Elements past rot_dim are never written in place, and copied out of
 * place.
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
#include <string.h>

#include <fldispatch/plugin.h>

#include "reference.h"

/*
 * The heads of one token: read at src, written at dst (the same heads in
 * place). Out of place, the elements past rot_dim are copied, up to
 * head_size; in place they stay as they are.
 */
static void rotate_heads(const char *src, int64_t src_head_stride, char *dst,
                         int64_t dst_head_stride, int64_t heads, int64_t head_size, int dt,
                         const void *cache_row, int cache_dt, int64_t half, bool neox)
{
    const size_t elem = dt == 0 ? 4 : 2;
    const bool copy_rest = src != dst && head_size > 2 * half;
    for (int64_t h = 0; h < heads; h++) {
        const char *in = src + (size_t)(h * src_head_stride) * elem;
        char *out = dst + (size_t)(h * dst_head_stride) * elem;
        for (int64_t i = 0; i < half; i++) {
            const float c = fld__ref_round(dt, fld__ref_load(cache_row, i, cache_dt)),
                        s = fld__ref_round(dt, fld__ref_load(cache_row, half + i, cache_dt));
            const int64_t ix = neox ? i : 2 * i, iy = neox ? i + half : 2 * i + 1;
            const float x = fld__ref_load(in, ix, dt), y = fld__ref_load(in, iy, dt);
            /* fld__ref_round is the identity for float32 */
            const float xc = fld__ref_round(dt, x * c), ys = fld__ref_round(dt, y * s);
            const float yc = fld__ref_round(dt, y * c), xs = fld__ref_round(dt, x * s);
            fld__ref_store(out, ix, dt, xc - ys);
            fld__ref_store(out, iy, dt, yc + xs);
        }
        if (copy_rest)
            memcpy(out + (size_t)(2 * half) * elem, in + (size_t)(2 * half) * elem,
                   (size_t)(head_size - 2 * half) * elem);
    }
}

/* Every token: in describes what is read, out where it is written (in itself in place). */
static void rotate_tokens(const fld_rotary_geometry *in, const fld_rotary_geometry *out,
                          int64_t head_size, int dt, bool neox)
{
    const int cache_dt = fld_dtype_index(in->cache_dtype);
    const size_t elem = dt == 0 ? 4 : 2, cache_elem = cache_dt == 0 ? 4 : 2;
    const int64_t half = in->rot_dim / 2;

    for (int64_t t = 0; t < in->tokens; t++) {
        const int64_t pos = in->positions_int32 ? ((const int32_t *)in->positions)[t]
                                                : ((const int64_t *)in->positions)[t];
        const char *row = (const char *)in->cache + (size_t)(pos * in->cache_stride) * cache_elem;
        if (in->q_heads > 0)
            rotate_heads((const char *)in->query + (size_t)(t * in->q_token_stride) * elem,
                         in->q_head_stride,
                         (char *)out->query + (size_t)(t * out->q_token_stride) * elem,
                         out->q_head_stride, in->q_heads, head_size, dt, row, cache_dt, half, neox);
        if (in->key && in->k_heads > 0)
            rotate_heads((const char *)in->key + (size_t)(t * in->k_token_stride) * elem,
                         in->k_head_stride,
                         (char *)out->key + (size_t)(t * out->k_token_stride) * elem,
                         out->k_head_stride, in->k_heads, head_size, dt, row, cache_dt, half, neox);
    }
}

int fld__ref_rotary_embedding(const void *argp)
{
    const fld_rotary_embedding_args *args = argp;
    fld_rotary_geometry g;
    fld_rotary_geometry_of(args, &g);
    rotate_tokens(&g, &g, args->head_size, fld_dtype_index(args->query->dtype), args->is_neox);
    return FLD_OK;
}

int fld__ref_rotary_embedding_out(const void *argp)
{
    const fld_rotary_embedding_out_args *args = argp;
    fld_rotary_geometry in, out;
    fld_rotary_out_geometry_of(args, &in, &out);
    rotate_tokens(&in, &out, args->head_size, fld_dtype_index(args->query->dtype), args->is_neox);
    return FLD_OK;
}
