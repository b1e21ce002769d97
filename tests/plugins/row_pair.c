/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a plugin "row_pair" (out-of-tree) with two implementations of
 * rms_norm on CPU float32, "vendor.row_small" and "vendor.row_large", both
 * correct, each counting its calls (fld_fixture_row_pair_calls()), so that
 * tests can tell which one a manifest's row bucket sent a call to.
 */
#include <math.h>
#include <stdatomic.h>

#include <fldispatch/plugin.h>

static _Atomic long calls[2];

/* Calls served so far by vendor.row_small (which 0) or vendor.row_large (1). */
__attribute__((visibility("default"))) long fld_fixture_row_pair_calls(int which);
__attribute__((visibility("default"))) long fld_fixture_row_pair_calls(int which)
{
    return which == 0 || which == 1 ? atomic_load(&calls[which]) : -1;
}

/* out = norm(x (+ residual)) * w, float32, as the catalog defines rms_norm. */
static void rms_norm_f32(const fld_rms_norm_args *a)
{
    fld_rows x, out, res = {0};
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (a->residual)
        fld_tensor_rows(a->residual, &res);
    const float *w = NULL;
    if (a->weight) {
        fld_rows wr;
        fld_tensor_rows(a->weight, &wr);
        w = wr.data;
    }
    for (int64_t r = 0; r < x.rows; r++) {
        const float *xr = (const float *)x.data + r * x.stride;
        float *rr = a->residual ? (float *)res.data + r * res.stride : NULL;
        float *orow = (float *)out.data + r * out.stride;
        double sum = 0;
        for (int64_t i = 0; i < x.width; i++) {
            float v = rr ? xr[i] + rr[i] : xr[i];
            if (rr)
                rr[i] = v;
            sum += (double)v * v;
        }
        float scale = 1.0f / sqrtf((float)(sum / (double)x.width) + a->eps);
        for (int64_t i = 0; i < x.width; i++) {
            float v = rr ? rr[i] : xr[i];
            orow[i] = v * scale * (w ? w[i] : 1.0f);
        }
    }
}

static int row_small(const void *args)
{
    rms_norm_f32(args);
    atomic_fetch_add(&calls[0], 1);
    return FLD_OK;
}

static int row_large(const void *args)
{
    rms_norm_f32(args);
    atomic_fetch_add(&calls[1], 1);
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl small = {
        .op = FLD_OP_RMS_NORM,
        .impl_id = "vendor.row_small",
        .kind = FLD_KIND_VENDOR,
        .vendor = "row_pair",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = row_small,
    };
    fld_impl large = small;
    large.impl_id = "vendor.row_large";
    large.fn = row_large;
    int rc = fld_registry_register(reg, &small);
    return rc ? rc : fld_registry_register(reg, &large);
}

FLD_PLUGIN_DEFINE("row_pair", "1.0.0", register_builtins)
