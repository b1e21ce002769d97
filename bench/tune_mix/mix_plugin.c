/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The demonstration plugin of bench/tune_mix: two implementations of
 * rms_norm (CPU, float32) with opposite costs, a model of the choice a
 * device plugin faces between a kernel with no set-up and one that pays a
 * fixed cost per call (a launch, a hand-off to a pool, a staging buffer)
 * for more speed per row:
 *
 *   vendor.mix_inline  one row at a time with scalar code: no fixed cost,
 *                      slow per row;
 *   vendor.mix_staged  clears a 4 MiB workspace first (the fixed cost),
 *                      then runs with eight float accumulators, which the
 *                      compiler vectorises: fast per row.
 *
 * Both are exact to the catalog's tolerances; neither is meant to serve.
 */
#include <math.h>
#include <string.h>

#include <fldispatch/plugin.h>

#define WORKSPACE_BYTES (4u << 20)

static float workspace[WORKSPACE_BYTES / sizeof(float)];

struct view {
    fld_rows x, out;
    const float *w;
};

static void view_of(const fld_rms_norm_args *a, struct view *v)
{
    fld_tensor_rows(a->x, &v->x);
    fld_tensor_rows(a->out, &v->out);
    v->w = NULL;
    if (a->weight) {
        fld_rows w;
        fld_tensor_rows(a->weight, &w);
        v->w = w.data;
    }
}

__attribute__((optimize("no-tree-vectorize"))) static int mix_inline(const void *args)
{
    const fld_rms_norm_args *a = args;
    if (a->residual)
        return FLD_EUNSUPPORTED;
    struct view v;
    view_of(a, &v);
    for (int64_t r = 0; r < v.x.rows; r++) {
        const float *x = (const float *)v.x.data + r * v.x.stride;
        float *o = (float *)v.out.data + r * v.out.stride;
        float sum = 0.0f;
        for (int64_t i = 0; i < v.x.width; i++)
            sum += x[i] * x[i];
        float scale = 1.0f / sqrtf(sum / (float)v.x.width + a->eps);
        for (int64_t i = 0; i < v.x.width; i++)
            o[i] = x[i] * scale * (v.w ? v.w[i] : 1.0f);
    }
    return FLD_OK;
}

static int mix_staged(const void *args)
{
    const fld_rms_norm_args *a = args;
    if (a->residual)
        return FLD_EUNSUPPORTED;
    memset(workspace, 0, sizeof workspace);
    __asm__ volatile("" : : "r"(workspace) : "memory"); /* the clearing is the model's cost: keep it */
    struct view v;
    view_of(a, &v);
    for (int64_t r = 0; r < v.x.rows; r++) {
        const float *x = (const float *)v.x.data + r * v.x.stride;
        float *o = (float *)v.out.data + r * v.out.stride;
        float acc[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= v.x.width; i += 8)
            for (int l = 0; l < 8; l++)
                acc[l] += x[i + l] * x[i + l];
        for (; i < v.x.width; i++)
            acc[0] += x[i] * x[i];
        float sum = 0.0f;
        for (int l = 0; l < 8; l++)
            sum += acc[l];
        float scale = 1.0f / sqrtf(sum / (float)v.x.width + a->eps);
        if (v.w)
            for (i = 0; i < v.x.width; i++)
                o[i] = x[i] * scale * v.w[i];
        else
            for (i = 0; i < v.x.width; i++)
                o[i] = x[i] * scale;
    }
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    fld_impl impl = {
        .op = FLD_OP_RMS_NORM,
        .impl_id = "vendor.mix_inline",
        .kind = FLD_KIND_VENDOR,
        .vendor = "mixdemo",
        .priority = 1,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = mix_inline,
    };
    int rc = fld_registry_register(reg, &impl);
    impl.impl_id = "vendor.mix_staged";
    impl.fn = mix_staged;
    return rc ? rc : fld_registry_register(reg, &impl);
}

FLD_PLUGIN_DEFINE("mixdemo", "1.0.0", register_builtins)
