/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Entry points of rms_norm and gemma_rms_norm: one job over the rows, split
 * across threads by the pool and run by the active variant's kernel. Rows
 * are independent (a residual row is read and written by the thread that
 * normalises it), so out may alias x whatever the split.
 */
#include "cpu.h"

static void norm_range(const void *job, int64_t begin, int64_t end)
{
    fld__cpu_active->norm(job, begin, end);
}

/* Whether the bytes of two row sets (elements of es bytes) overlap. */
static bool rows_overlap(const fld_rows *a, size_t aes, const fld_rows *b, size_t bes)
{
    const char *a0 = a->data, *b0 = b->data;
    const char *a1 = a0 + ((size_t)(a->rows - 1) * (size_t)a->stride + (size_t)a->width) * aes;
    const char *b1 = b0 + ((size_t)(b->rows - 1) * (size_t)b->stride + (size_t)b->width) * bes;
    return a0 < b1 && b0 < a1;
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
    if (x.width == 0 || x.rows == 0)
        return FLD_OK;

    /* weight and residual: x's dtype, or float32 with a 16-bit x (validated by the host) */
    const int wdt = a->weight ? fld__cpu_dtype_of(a->weight, op, "weight") : dt;
    const int rdt = a->residual ? fld__cpu_dtype_of(a->residual, op, "residual") : dt;
    if (wdt < 0 || rdt < 0)
        return FLD_EINVAL;

    /*
     * Non-temporal stores save the read of each output line before it is
     * written; in place (out over x or the residual) that line was just read
     * and is in cache, so streaming it would only evict it and send it to
     * memory at once.
     */
    const bool in_place =
        rows_overlap(&out, fld__cpu_elem_size(dt), &x, fld__cpu_elem_size(dt)) ||
        (a->residual && rows_overlap(&out, fld__cpu_elem_size(dt), &res, fld__cpu_elem_size(rdt)));
    const size_t row_bytes = (size_t)x.width * fld__cpu_elem_size(dt);
    const size_t out_bytes = (size_t)x.rows * row_bytes;
    const size_t res_bytes = (size_t)x.rows * (size_t)x.width * fld__cpu_elem_size(rdt);
    /*
     * The next row is prefetched while the output streams to memory, or
     * when the buffers the call touches (each once: out over x or the
     * residual is no other) are too large to come from the caches.
     */
    const bool stream = !in_place && out_bytes >= fld__cpu_stream_threshold();
    const size_t data_bytes = out_bytes * (in_place ? 1u : 2u) + (a->residual ? res_bytes : 0u);
    const struct fld_cpu_norm_job job = {
        .dt = dt,
        .out = out.data,
        .out_stride = out.stride,
        .x = x.data,
        .x_stride = x.stride,
        .residual = a->residual ? res.data : NULL,
        .residual_stride = a->residual ? res.stride : 0,
        .weight = a->weight ? w.data : NULL,
        .weight_f32 = wdt != dt,
        .residual_f32 = rdt != dt,
        .h = x.width,
        .eps = a->eps,
        .gemma = gemma,
        .stream = stream,
        .prefetch = stream || data_bytes > fld__cpu_norm_prefetch_bytes,
    };
    /* x read and out written; a residual is read and written too; the weight once. */
    size_t bytes = out_bytes * 2u + (a->residual ? 2u * res_bytes : 0u) +
                   (a->weight ? (size_t)x.width * fld__cpu_elem_size(wdt) : 0u);
    fld__cpu_parallel(norm_range, &job, x.rows, bytes);
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
