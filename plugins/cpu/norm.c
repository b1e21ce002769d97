/*
 * rms_norm and gemma_rms_norm of the cpu plugin.
 *
 * Two passes over a row: the sum of squares, then the scaled output. With a
 * residual, the first pass also writes residual = round(x + residual) and
 * squares the rounded values, so the norm is that of the residual the caller
 * gets back (as vLLM's CUDA fused_add_rms_norm does). The second pass reads
 * each chunk before writing it, which lets out alias x.
 */
#include <math.h>

#include "cpu.h"

/* Independent partial sums: lets the compiler vectorise without -ffast-math. */
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

static float lanes_total(const float acc[SUM_LANES])
{
    float s = 0.0f;
    for (int l = 0; l < SUM_LANES; l++)
        s += acc[l];
    return s;
}

/* o = v * inv * scale, scale = w, (1 + w), or 1 without weight. o may be v. */
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

void fld__cpu_rms_norm_row(void *out, const void *x, void *residual, const void *weight, int64_t h,
                           float eps, bool gemma, int dt)
{
    float v[FLD_CPU_CHUNK], w[FLD_CPU_CHUNK];
    float acc[SUM_LANES] = {0};

    for (int64_t j = 0; j < h; j += FLD_CPU_CHUNK) {
        int64_t n = h - j < FLD_CPU_CHUNK ? h - j : FLD_CPU_CHUNK;
        fld__cpu_load(v, fld__cpu_at(x, j, dt), n, dt);
        if (residual) {
            void *res = fld__cpu_at(residual, j, dt);
            fld__cpu_load(w, res, n, dt);
            for (int64_t i = 0; i < n; i++)
                v[i] += w[i];
            fld__cpu_store(res, v, n, dt);
            /* Normalise what the caller will see in residual, not the exact sum. */
            fld__cpu_load(v, res, n, dt);
        }
        sum_squares(acc, v, n);
    }
    float inv = 1.0f / sqrtf(lanes_total(acc) / (float)h + eps);

    const void *src = residual ? residual : x;
    for (int64_t j = 0; j < h; j += FLD_CPU_CHUNK) {
        int64_t n = h - j < FLD_CPU_CHUNK ? h - j : FLD_CPU_CHUNK;
        fld__cpu_load(v, fld__cpu_at(src, j, dt), n, dt);
        if (weight)
            fld__cpu_load(w, fld__cpu_at(weight, j, dt), n, dt);
        scale_f32(v, v, weight ? w : NULL, inv, gemma, n);
        fld__cpu_store(fld__cpu_at(out, j, dt), v, n, dt);
    }
}

static int run_rms_norm(const void *args, bool gemma, const char *op)
{
    const fld_rms_norm_args *a = args;
    int dt = fld__cpu_dtype_of(a->x, op, "x");
    if (dt < 0)
        return FLD_EINVAL;

    fld_rows x, out, res = {0}, w = {0};
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (a->residual)
        fld_tensor_rows(a->residual, &res);
    if (a->weight)
        fld_tensor_rows(a->weight, &w);
    if (x.width == 0)
        return FLD_OK;

    for (int64_t r = 0; r < x.rows; r++) {
        void *res_row = a->residual ? fld__cpu_at(res.data, r * res.stride, dt) : NULL;
        fld__cpu_rms_norm_row(fld__cpu_at(out.data, r * out.stride, dt),
                              fld__cpu_at(x.data, r * x.stride, dt), res_row,
                              a->weight ? w.data : NULL, x.width, a->eps, gemma, dt);
    }
    return FLD_OK;
}

int fld__cpu_rms_norm(const void *args)
{
    return run_rms_norm(args, false, FLD_OP_RMS_NORM);
}

int fld__cpu_gemma_rms_norm(const void *args)
{
    return run_rms_norm(args, true, FLD_OP_GEMMA_RMS_NORM);
}
