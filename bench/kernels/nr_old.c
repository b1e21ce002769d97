/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The old plain-loop norm and rotary kernels (git HEAD:plugins/cpu/norm.c,
 * rotary.c before the vector rewrite): float32 scratch chunks, scalar conversion, for
 * the speed comparison only.
 */
#include <math.h>
#include <string.h>

#include "nr_harness.h"
#include "old_convert.h"

#define SUM_LANES 8

static void sum_squares(float acc[SUM_LANES], const float *v, int64_t n)
{
    int64_t i = 0;
    for (; i + SUM_LANES <= n; i += SUM_LANES)
        for (int l = 0; l < SUM_LANES; l++)
            acc[l] += v[i + l] * v[i + l];
    for (; i < n; i++)
        acc[0] += v[i] * v[i];
}

static void scale_f32(float *o, const float *v, const float *w, float inv, bool gemma, int64_t n)
{
    if (!w) {
        for (int64_t i = 0; i < n; i++)
            o[i] = v[i] * inv;
    } else if (gemma) {
        for (int64_t i = 0; i < n; i++)
            o[i] = v[i] * inv * (1.0f + w[i]);
    } else {
        for (int64_t i = 0; i < n; i++)
            o[i] = v[i] * inv * w[i];
    }
}

static void old_norm_row(void *out, const void *x, void *residual, const void *weight, int64_t h,
                         float eps, bool gemma, int dt)
{
    float v[OLD_CHUNK], w[OLD_CHUNK];
    float acc[SUM_LANES] = {0};
    for (int64_t j = 0; j < h; j += OLD_CHUNK) {
        int64_t n = h - j < OLD_CHUNK ? h - j : OLD_CHUNK;
        old_load(v, fld__cpu_at(x, j, dt), n, dt);
        if (residual) {
            void *res = fld__cpu_at(residual, j, dt);
            old_load(w, res, n, dt);
            for (int64_t i = 0; i < n; i++)
                v[i] += w[i];
            old_store(res, v, n, dt);
            old_load(v, res, n, dt);
        }
        sum_squares(acc, v, n);
    }
    float s = 0.0f;
    for (int l = 0; l < SUM_LANES; l++)
        s += acc[l];
    float inv = 1.0f / sqrtf(s / (float)h + eps);
    const void *src = residual ? residual : x;
    for (int64_t j = 0; j < h; j += OLD_CHUNK) {
        int64_t n = h - j < OLD_CHUNK ? h - j : OLD_CHUNK;
        old_load(v, fld__cpu_at(src, j, dt), n, dt);
        if (weight)
            old_load(w, fld__cpu_at(weight, j, dt), n, dt);
        scale_f32(v, v, weight ? w : NULL, inv, gemma, n);
        old_store(fld__cpu_at(out, j, dt), v, n, dt);
    }
}

static void old_norm_range(const struct fld_cpu_norm_job *job, int64_t r0, int64_t r1)
{
    int dt = job->dt;
    for (int64_t r = r0; r < r1; r++)
        old_norm_row(fld__cpu_at(job->out, r * job->out_stride, dt),
                     fld__cpu_at(job->x, r * job->x_stride, dt),
                     job->residual ? fld__cpu_at(job->residual, r * job->residual_stride, dt)
                                   : NULL,
                     job->weight, job->h, job->eps, job->gemma, dt);
}

static void rotate_split(float *x, float *y, const float *c, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float xi = x[i], yi = y[i];
        x[i] = xi * c[i] - yi * s[i];
        y[i] = yi * c[i] + xi * s[i];
    }
}

static void rotate_interleaved(float *p, const float *c, const float *s, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        float xi = p[2 * i], yi = p[2 * i + 1];
        p[2 * i] = xi * c[i] - yi * s[i];
        p[2 * i + 1] = yi * c[i] + xi * s[i];
    }
}

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
    float buf[2 * OLD_CHUNK];
    if (is_neox) {
        void *xp = fld__cpu_at(head, f0, dt), *yp = fld__cpu_at(head, half + f0, dt);
        old_load(buf, xp, n, dt);
        old_load(buf + OLD_CHUNK, yp, n, dt);
        rotate_split(buf, buf + OLD_CHUNK, c, s, n);
        old_store(xp, buf, n, dt);
        old_store(yp, buf + OLD_CHUNK, n, dt);
    } else {
        void *p = fld__cpu_at(head, 2 * f0, dt);
        old_load(buf, p, 2 * n, dt);
        rotate_interleaved(buf, c, s, n);
        old_store(p, buf, 2 * n, dt);
    }
}

static void old_rotary_range(const struct fld_cpu_rotary_job *job, int64_t t0, int64_t t1)
{
    const fld_rotary_geometry *g = &job->g;
    const int dt = job->dt, cache_dt = job->cache_dt;
    const int64_t half = g->rot_dim / 2;
    if (half == 0)
        return;
    for (int64_t t = t0; t < t1; t++) {
        int64_t pos = g->positions_int32 ? ((const int32_t *)g->positions)[t]
                                         : ((const int64_t *)g->positions)[t];
        const void *cache_row = fld__cpu_at(g->cache, pos * g->cache_stride, cache_dt);
        void *q = fld__cpu_at(g->query, t * g->q_token_stride, dt);
        void *k = g->key ? fld__cpu_at(g->key, t * g->k_token_stride, dt) : NULL;
        float c[OLD_CHUNK], s[OLD_CHUNK];
        for (int64_t f0 = 0; f0 < half; f0 += OLD_CHUNK) {
            int64_t n = half - f0 < OLD_CHUNK ? half - f0 : OLD_CHUNK;
            old_load(c, fld__cpu_at(cache_row, f0, cache_dt), n, cache_dt);
            old_load(s, fld__cpu_at(cache_row, half + f0, cache_dt), n, cache_dt);
            for (int64_t h = 0; h < g->q_heads; h++)
                rotate_head(fld__cpu_at(q, h * g->q_head_stride, dt), f0, n, half, job->is_neox, dt,
                            c, s);
            for (int64_t h = 0; h < g->k_heads; h++)
                rotate_head(fld__cpu_at(k, h * g->k_head_stride, dt), f0, n, half, job->is_neox, dt,
                            c, s);
        }
    }
}

const struct fld_cpu_variant nr_variant_old = {"old", NULL, old_norm_range, old_rotary_range};

int nr_variants(const struct fld_cpu_variant **v, int max, int with_old)
{
    int n = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (n < max && __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        v[n++] = &nr_variant_avx512_bf16;
    if (n < max && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        v[n++] = &nr_variant_avx512;
    if (n < max && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
        v[n++] = &nr_variant_avx2;
#endif
#if defined(__aarch64__)
    if (n < max)
        v[n++] = &nr_variant_neon;
#endif
    if (n < max)
        v[n++] = &nr_variant_portable;
    if (with_old && n < max)
        v[n++] = &nr_variant_old;
    return n;
}
