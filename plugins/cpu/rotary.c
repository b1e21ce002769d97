/*
 * rotary_embedding of the cpu plugin, in place on query and key.
 *
 * Per token, cos and sin are widened to float32 once and reused for every
 * head of query and key. rot_dim/2 frequencies are taken FLD_CPU_CHUNK at a
 * time so the scratch stays on the stack whatever the head size. Elements
 * past rot_dim are never read or written.
 */
#include "cpu.h"

/* x' = x cos - y sin, y' = y cos + x sin over n pairs held in two arrays. */
static void rotate_split(float *x, float *y, const float *c, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float xi = x[i], yi = y[i];
        x[i] = xi * c[i] - yi * s[i];
        y[i] = yi * c[i] + xi * s[i];
    }
}

/* The same over n interleaved pairs (x0 y0 x1 y1 ...). */
static void rotate_interleaved(float *p, const float *c, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float xi = p[2 * i], yi = p[2 * i + 1];
        p[2 * i] = xi * c[i] - yi * s[i];
        p[2 * i + 1] = yi * c[i] + xi * s[i];
    }
}

/* Frequencies [f0, f0 + n) of one head; half = rot_dim / 2. */
static void rotate_head(void *head, int64_t f0, int64_t n, int64_t half, bool is_neox, int dt,
                        const float *c, const float *s)
{
    if (dt == FLD_CPU_F32) {
        float *hf = head;
        if (is_neox)
            rotate_split(hf + f0, hf + half + f0, c, s, n);
        else
            rotate_interleaved(hf + 2 * f0, c, s, n);
        return;
    }
    float buf[2 * FLD_CPU_CHUNK];
    if (is_neox) {
        void *xp = fld__cpu_at(head, f0, dt), *yp = fld__cpu_at(head, half + f0, dt);
        fld__cpu_load(buf, xp, n, dt);
        fld__cpu_load(buf + FLD_CPU_CHUNK, yp, n, dt);
        rotate_split(buf, buf + FLD_CPU_CHUNK, c, s, n);
        fld__cpu_store(xp, buf, n, dt);
        fld__cpu_store(yp, buf + FLD_CPU_CHUNK, n, dt);
    } else {
        void *p = fld__cpu_at(head, 2 * f0, dt);
        fld__cpu_load(buf, p, 2 * n, dt);
        rotate_interleaved(buf, c, s, n);
        fld__cpu_store(p, buf, 2 * n, dt);
    }
}

void fld__cpu_rotary_token(const fld_rotary_geometry *g, int64_t t, int64_t pos, bool is_neox,
                           int dt, int cache_dt)
{
    const int64_t half = g->rot_dim / 2;
    const void *cache_row = fld__cpu_at(g->cache, pos * g->cache_stride, cache_dt);
    void *q = fld__cpu_at(g->query, t * g->q_token_stride, dt);
    void *k = g->key ? fld__cpu_at(g->key, t * g->k_token_stride, dt) : NULL;
    float c[FLD_CPU_CHUNK], s[FLD_CPU_CHUNK];

    for (int64_t f0 = 0; f0 < half; f0 += FLD_CPU_CHUNK) {
        int64_t n = half - f0 < FLD_CPU_CHUNK ? half - f0 : FLD_CPU_CHUNK;
        fld__cpu_load(c, fld__cpu_at(cache_row, f0, cache_dt), n, cache_dt);
        fld__cpu_load(s, fld__cpu_at(cache_row, half + f0, cache_dt), n, cache_dt);
        for (int64_t h = 0; h < g->q_heads; h++)
            rotate_head(fld__cpu_at(q, h * g->q_head_stride, dt), f0, n, half, is_neox, dt, c, s);
        for (int64_t h = 0; h < g->k_heads; h++)
            rotate_head(fld__cpu_at(k, h * g->k_head_stride, dt), f0, n, half, is_neox, dt, c, s);
    }
}

int fld__cpu_rotary_embedding(const void *args)
{
    const fld_rotary_embedding_args *a = args;
    int dt = fld__cpu_dtype_of(a->query, FLD_OP_ROTARY_EMBEDDING, "query");
    if (dt < 0)
        return FLD_EINVAL;

    fld_rotary_geometry g;
    fld_rotary_geometry_of(a, &g);
    int cache_dt = fld_dtype_index(g.cache_dtype);
    if (cache_dt < 0) {
        fld_set_error("rotary_embedding: tensor 'cos_sin_cache' has a dtype vendor.cpu cannot "
                      "read");
        return FLD_EINVAL;
    }
    if (g.rot_dim == 0 || (g.q_heads == 0 && g.k_heads == 0))
        return FLD_OK; /* nothing rotates: do not even read the cache */

    for (int64_t t = 0; t < g.tokens; t++) {
        int64_t pos = g.positions_int32 ? ((const int32_t *)g.positions)[t]
                                        : ((const int64_t *)g.positions)[t];
        fld__cpu_rotary_token(&g, t, pos, a->is_neox, dt, cache_dt);
    }
    return FLD_OK;
}
