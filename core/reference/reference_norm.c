/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Reference RMS normalisation (impl "reference.c") over the last dimension.
 * x and out have one dtype X; weight and residual have X or float32 (the
 * host's validation allows float32 with a 16-bit X, as vLLM's GemmaRMSNorm
 * keeps its weight and, for float16, its residual in float32).
 *
 *   without residual:  v = x
 *   with residual:     residual = round_R(x + residual), the sum taken in
 *                      float32 and rounded to the residual's own dtype R;
 *                      v = the value stored (re-read from storage)
 *   inv = 1 / sqrt(mean(v^2) + eps)
 *   out = round_X(n * scale),  n = v * inv rounded to float32,
 *         scale = w (widened to float32), 1 + w in float32 for gemma, or 1
 *         without a weight
 *
 * vLLM: forward_native normalises x.float() (+ residual.float()) and rounds
 * once after the weight where the weight is float32 (GemmaRMSNorm, and the
 * vLLM IR rms_norm's x.to(weight.dtype) * weight); a float32 residual of
 * GemmaRMSNorm with float16 x stays float32 (x.float() + residual.float()),
 * which is what R = float32 gives. Differences, all within vLLM's rms_norm
 * tolerance of 1e-2: with a residual of x's own 16-bit dtype the rounded sum
 * is normalised (as vLLM's CUDA fused_add_rms_norm does; forward_native
 * normalises the unrounded float32 sum), and a 16-bit weight multiplies n in
 * float32 with one rounding (vLLM rounds n to X first, then rounds the
 * product).
 *
 * The sum of squares and inv are computed in double, so every finite row
 * gives its normalised value: squares of float32 values neither overflow
 * (|v| up to 3.4e38) nor underflow (down to 1.4e-45) there, where a float32
 * sum turns 1e30 rows into inf and 1e-30 rows into 0. Non-finite rows follow
 * PyTorch: a NaN makes the row NaN; an inf makes the sum inf and inv 0, so
 * finite elements give 0 and the inf ones NaN; a row of zeros with eps = 0
 * gives 0 * inf = NaN.
 *
 * out may alias x: each row is fully read (sum of squares, residual update)
 * before its outputs are written, and output j is written only after input
 * j is read.
 */
#include <math.h>

#include <fldispatch/plugin.h>

#include "reference.h"

static double sum_squares(const void *row, int64_t n, int dt)
{
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double v = fld__ref_load(row, j, dt);
        sum += v * v;
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
    /* Through the validated-layout helper like the other operands: an empty
     * weight's data and byte_offset are never validated, so no pointer
     * arithmetic may be done on them (its rows are then never visited). */
    fld_rows wrow = {0};
    if (args->weight)
        fld_tensor_rows(args->weight, &wrow);
    const void *w = wrow.data;
    const int dt = fld_dtype_index(args->x->dtype);
    const int wdt = w ? fld_dtype_index(args->weight->dtype) : dt;
    const int rdt = args->residual ? fld_dtype_index(args->residual->dtype) : dt;
    const size_t elem = dt == 0 ? 4 : 2, relem = rdt == 0 ? 4 : 2;
    const int64_t h = x.width;

    for (int64_t r = 0; r < x.rows && h > 0; r++) {
        const char *xr = (const char *)x.data + (size_t)(r * x.stride) * elem;
        char *orow = (char *)out.data + (size_t)(r * out.stride) * elem;
        const char *src = xr;
        int sdt = dt;
        if (args->residual) {
            char *rr = (char *)res.data + (size_t)(r * res.stride) * relem;
            for (int64_t j = 0; j < h; j++)
                fld__ref_store(rr, j, rdt, fld__ref_load(xr, j, dt) + fld__ref_load(rr, j, rdt));
            src = rr; /* normalise the sum as stored, re-read from storage */
            sdt = rdt;
        }
        const double inv = 1.0 / sqrt(sum_squares(src, h, sdt) / (double)h + (double)args->eps);
        for (int64_t j = 0; j < h; j++) {
            float scale = w ? fld__ref_load(w, j, wdt) : 1.0f;
            if (gemma && w)
                scale += 1.0f;
            const float n = (float)(fld__ref_load(src, j, sdt) * inv);
            fld__ref_store(orow, j, dt, n * scale);
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
