/*
 * Reference RMS normalisation (impl "reference.c") over the last dimension:
 *   without residual: out = x * inv * w
 *   with residual:    residual = round(x + residual); out = r * inv * w
 * where inv = 1 / sqrt(mean(v^2) + eps) over the row v being normalised (the
 * rounded residual when there is one, as vLLM's CUDA kernel does), and w is
 * the weight, (1 + weight) for gemma, or 1 when there is none. Everything is
 * float32 with one rounding per stored value.
 *
 * out may alias x: each row is fully read (sum of squares, residual update)
 * before its outputs are written, and output j is written only after input
 * j is read.
 */
#include <math.h>

#include <fldispatch/plugin.h>

#include "reference.h"

/*
 * Kahan-compensated float32 sum of squares: the reference is what every
 * other implementation is checked against, so its only error should be the
 * float32 rounding of the result, not one that grows with the row width.
 */
static float sum_squares(const void *row, int64_t n, int dt)
{
    float sum = 0.0f, comp = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        float v = fld__ref_load(row, j, dt);
        float y = v * v - comp;
        float t = sum + y;
        comp = (t - sum) - y;
        sum = t;
    }
    return sum;
}

static int rms_norm(const void *argp, bool gemma)
{
    const fld_rms_norm_args *args = argp;
    fld_rows x, out, res = {0};
    fld_tensor_rows(args->x, &x);
    fld_tensor_rows(args->out, &out);
    if (args->residual)
        fld_tensor_rows(args->residual, &res);
    const void *w = args->weight && args->weight->data
                        ? (const char *)args->weight->data + args->weight->byte_offset
                        : NULL;
    const int dt = fld_dtype_index(args->x->dtype);
    const size_t elem = dt == 0 ? 4 : 2;
    const int64_t h = x.width;

    for (int64_t r = 0; r < x.rows && h > 0; r++) {
        const char *xr = (const char *)x.data + (size_t)(r * x.stride) * elem;
        char *orow = (char *)out.data + (size_t)(r * out.stride) * elem;
        const char *src = xr;
        if (args->residual) {
            char *rr = (char *)res.data + (size_t)(r * res.stride) * elem;
            for (int64_t j = 0; j < h; j++)
                fld__ref_store(rr, j, dt, fld__ref_load(xr, j, dt) + fld__ref_load(rr, j, dt));
            src = rr; /* normalise the rounded sum, re-read from storage */
        }
        const float inv = 1.0f / sqrtf(sum_squares(src, h, dt) / (float)h + args->eps);
        for (int64_t j = 0; j < h; j++) {
            float scale = w ? fld__ref_load(w, j, dt) : 1.0f;
            if (gemma && w)
                scale += 1.0f;
            fld__ref_store(orow, j, dt, fld__ref_load(src, j, dt) * inv * scale);
        }
    }
    return FLD_OK;
}

int fld__ref_rms_norm(const void *args)
{
    return rms_norm(args, false);
}

int fld__ref_gemma_rms_norm(const void *args)
{
    return rms_norm(args, true);
}
