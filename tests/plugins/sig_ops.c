/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a plugin whose ops are outside the catalog and declared with a
 * signature, so that C (fld_call with an fld_args) and Python (call_op,
 * torch.ops.fldispatch) call them by name.
 *   sig_axpy(Tensor(a!) out, Tensor x, Tensor y, float alpha=1.0)
 *       out = alpha * x + y, float32 on CPU, contiguous same-size tensors;
 *   sig_fill(Tensor(a!) out, Tensor? base, int value, bool negate=False)
 *       out = (base or 0) + value, negated when negate; float32 on CPU.
 * Both decline (FLD_EUNSUPPORTED) what they cannot serve.
 */
#include <stdint.h>

#include <fldispatch/plugin.h>

static int64_t numel(const DLTensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

static bool plain_f32(const DLTensor *t, int64_t n)
{
    if (t->device.device_type != kDLCPU || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
        t->dtype.lanes != 1 || numel(t) != n)
        return false;
    if (t->strides) { /* contiguous only */
        int64_t s = 1;
        for (int i = t->ndim - 1; i >= 0; i--) {
            if (t->shape[i] != 1 && t->strides[i] != s)
                return false;
            s *= t->shape[i];
        }
    }
    return true;
}

static float *f32(const DLTensor *t)
{
    return (float *)(void *)((char *)t->data + t->byte_offset);
}

static int axpy(const void *args)
{
    const fld_args *a = args;
    const DLTensor *out = a->arg[0].v.tensor, *x = a->arg[1].v.tensor, *y = a->arg[2].v.tensor;
    const double alpha = a->arg[3].v.f;
    int64_t n = numel(out);
    if (!plain_f32(out, n) || !plain_f32(x, n) || !plain_f32(y, n)) {
        fld_set_error("sig_axpy: vendor.sig_ops takes contiguous float32 CPU tensors of one size");
        return FLD_EUNSUPPORTED;
    }
    float *o = f32(out);
    const float *xs = f32(x), *ys = f32(y);
    for (int64_t i = 0; i < n; i++)
        o[i] = (float)(alpha * xs[i] + ys[i]);
    return FLD_OK;
}

static int fill(const void *args)
{
    const fld_args *a = args;
    const DLTensor *out = a->arg[0].v.tensor, *base = a->arg[1].v.tensor;
    const int64_t value = a->arg[2].v.i;
    const bool negate = a->arg[3].v.b;
    int64_t n = numel(out);
    if (!plain_f32(out, n) || (base && !plain_f32(base, n))) {
        fld_set_error("sig_fill: vendor.sig_ops takes contiguous float32 CPU tensors of one size");
        return FLD_EUNSUPPORTED;
    }
    float *o = f32(out);
    const float *b = base ? f32(base) : NULL;
    for (int64_t i = 0; i < n; i++) {
        float v = (b ? b[i] : 0.0f) + (float)value;
        o[i] = negate ? -v : v;
    }
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    int rc = fld_registry_declare_op(
        reg, "sig_axpy", "(Tensor(a!) out, Tensor x, Tensor y, float alpha=1.0) -> ()");
    if (rc == FLD_OK)
        rc = fld_registry_declare_op(
            reg, "sig_fill", "(Tensor! out, Tensor? base, int value, bool negate=False) -> ()");
    const fld_impl impls[] = {
        {.op = "sig_axpy", .impl_id = "vendor.sig_ops", .kind = FLD_KIND_VENDOR,
         .vendor = "sig_ops", .priority = FLD_PRIORITY_VENDOR, .devices = FLD_DEVICE_MASK_CPU,
         .dtypes = FLD_DTYPE_MASK_F32, .fn = axpy},
        {.op = "sig_fill", .impl_id = "vendor.sig_ops", .kind = FLD_KIND_VENDOR,
         .vendor = "sig_ops", .priority = FLD_PRIORITY_VENDOR, .devices = FLD_DEVICE_MASK_CPU,
         .dtypes = FLD_DTYPE_MASK_F32, .fn = fill},
    };
    for (size_t i = 0; rc == FLD_OK && i < sizeof impls / sizeof impls[0]; i++)
        rc = fld_registry_register(reg, &impls[i]);
    return rc;
}

FLD_PLUGIN_DEFINE("sig_ops", "1.0.0", register_builtins)
