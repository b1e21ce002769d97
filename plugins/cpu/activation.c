/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Entry points of the activations (activations.def's rows), gated and
 * elementwise: one job over the rows, split across threads by the pool and
 * run by the active variant's kernel (rounding: body_activation.h).
 */
#include "cpu.h"

static void act_range(const void *job, int64_t begin, int64_t end)
{
    fld__cpu_active->act(job, begin, end);
}

static int run_activation(const void *args, enum fld_cpu_act act, const char *op)
{
    const fld_activation_args *a = args;
    int dt = fld__cpu_dtype_of(a->x, op, "x");
    if (dt < 0)
        return FLD_EINVAL;

    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (out.width == 0 || out.rows == 0)
        return FLD_OK;

    const struct fld_cpu_act_job job = {
        .act = act,
        .dt = dt,
        .out = out.data,
        .out_stride = out.stride,
        .x = x.data,
        .x_stride = x.stride,
        .d = out.width,
        .stream = (size_t)out.rows * (size_t)out.width * fld__cpu_elem_size(dt) >=
                  fld__cpu_stream_threshold(),
        .torch = fld__cpu_torch_activations,
    };
    /* Read 2d (gated) or d, write d per row. */
    size_t bytes = (size_t)out.rows * (size_t)out.width * (fld__cpu_act_gated(act) ? 3u : 2u) *
                   fld__cpu_elem_size(dt);
    fld__cpu_parallel(act_range, &job, out.rows, bytes);
    return FLD_OK;
}

/* fld__cpu_<name>() for each activations.def row. */
#define FLD_CPU_ACTIVATION(ID, name, FAMILY, HALF, FN)                                             \
    int fld__cpu_##name(const void *args)                                                          \
    {                                                                                              \
        return run_activation(args, FLD_CPU_ACT_##ID, FLD_OP_##ID);                                \
    }
#include "activations.def"
