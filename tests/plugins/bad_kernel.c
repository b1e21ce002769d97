/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: "vendor.bad", kernels that `fldispatch verify` must catch or
 * accept (tests/test_verify.c), all on CPU:
 *   silu_and_mul       float32, 1e-3 too large (relative): a wrong result;
 *   rms_norm           float32, right values, but it writes the row padding
 *                      of a strided out (0 after each row); it claims cuda
 *                      too, so that verify has a device implementation it
 *                      cannot run yet;
 *   gelu_and_mul       declines every call (FLD_EUNSUPPORTED), untouched;
 *   gelu_tanh_and_mul  its supports() refuses every call: declined too;
 *   mul_and_silu       declines, but only after writing out: a failure;
 *   gelu_quick         float32, right values, then one element past the
 *                      end of out: caught by verify's guard bytes.
 */
#include <math.h>

#include <fldispatch/plugin.h>

static int bad_silu_and_mul(const void *args)
{
    const fld_activation_args *a = args;
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    for (int64_t r = 0; r < out.rows; r++) {
        const float *xr = (const float *)x.data + r * x.stride;
        float *o = (float *)out.data + r * out.stride;
        for (int64_t i = 0; i < out.width; i++) {
            float g = xr[i];
            o[i] = g / (1.0f + expf(-g)) * xr[out.width + i] * 1.001f;
        }
    }
    return FLD_OK;
}

static int bad_rms_norm(const void *args)
{
    const fld_rms_norm_args *a = args;
    fld_rows x, out, res = {0};
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    if (a->residual)
        fld_tensor_rows(a->residual, &res);
    const float *w =
        a->weight ? (const float *)((const char *)a->weight->data + a->weight->byte_offset) : NULL;
    for (int64_t r = 0; r < x.rows; r++) {
        const float *src = (const float *)x.data + r * x.stride;
        float *o = (float *)out.data + r * out.stride;
        if (a->residual) {
            float *rr = (float *)res.data + r * res.stride;
            for (int64_t j = 0; j < x.width; j++)
                rr[j] += src[j];
            src = rr;
        }
        double sum = 0.0;
        for (int64_t j = 0; j < x.width; j++)
            sum += (double)src[j] * src[j];
        const float inv = (float)(1.0 / sqrt(sum / (double)x.width + a->eps));
        for (int64_t j = 0; j < x.width; j++)
            o[j] = src[j] * inv * (w ? w[j] : 1.0f);
        for (int64_t j = out.width; j < out.stride && r + 1 < out.rows; j++)
            o[j] = 0.0f; /* the bug: padding between rows is not ours to write */
    }
    return FLD_OK;
}

static int declining(const void *args)
{
    (void)args;
    return FLD_EUNSUPPORTED;
}

static bool refuses(const void *args)
{
    (void)args;
    return false;
}

static int declines_after_writing(const void *args)
{
    const fld_activation_args *a = args;
    fld_rows out;
    fld_tensor_rows(a->out, &out);
    if (out.rows > 0 && out.width > 0)
        *(unsigned char *)out.data ^= 1u;
    return FLD_EUNSUPPORTED;
}

static int writes_past_out(const void *args)
{
    const fld_activation_args *a = args;
    fld_rows x, out;
    fld_tensor_rows(a->x, &x);
    fld_tensor_rows(a->out, &out);
    for (int64_t r = 0; r < out.rows; r++) {
        const float *xr = (const float *)x.data + r * x.stride;
        float *o = (float *)out.data + r * out.stride;
        for (int64_t i = 0; i < out.width; i++)
            o[i] = xr[i] / (1.0f + expf(-1.702f * xr[i]));
    }
    if (out.rows > 0)
        ((float *)out.data)[(out.rows - 1) * out.stride + out.width] = 1.0f;
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl base = {
        .impl_id = "vendor.bad",
        .kind = FLD_KIND_VENDOR,
        .vendor = "bad",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
    };
    fld_impl impls[6];
    for (int i = 0; i < 6; i++)
        impls[i] = base;
    impls[0].op = FLD_OP_SILU_AND_MUL;
    impls[0].dtypes = FLD_DTYPE_MASK_F32;
    impls[0].fn = bad_silu_and_mul;
    impls[1].op = FLD_OP_RMS_NORM;
    impls[1].dtypes = FLD_DTYPE_MASK_F32;
    impls[1].devices = FLD_DEVICE_MASK_CPU | FLD_DEVICE_MASK_CUDA;
    impls[1].fn = bad_rms_norm;
    impls[2].op = FLD_OP_GELU_AND_MUL;
    impls[2].fn = declining;
    impls[3].op = FLD_OP_GELU_TANH_AND_MUL;
    impls[3].fn = declining;
    impls[3].supports = refuses;
    impls[4].op = FLD_OP_MUL_AND_SILU;
    impls[4].fn = declines_after_writing;
    impls[5].op = FLD_OP_GELU_QUICK;
    impls[5].dtypes = FLD_DTYPE_MASK_F32;
    impls[5].fn = writes_past_out;
    for (int i = 0; i < 6; i++) {
        int rc = fld_registry_register(reg, &impls[i]);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("bad_kernel", "1.0.0", register_builtins)
