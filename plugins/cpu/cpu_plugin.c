/*
 * The cpu plugin: registers vendor.cpu for every compute op of the catalog,
 * on CPU, in float32, float16 and bfloat16. attention_backend is left to the
 * library's reference (it has no kernel to speed up).
 */
#include "cpu.h"

int fld__cpu_dtype_of(const DLTensor *t, const char *op, const char *tensor)
{
    int dt = fld_dtype_index(t->dtype);
    if (dt < 0)
        fld_set_error("%s: tensor '%s' has a dtype vendor.cpu does not handle", op, tensor);
    return dt;
}

static const struct {
    const char *op;
    fld_kernel_fn fn;
} cpu_kernels[] = {
    {FLD_OP_SILU_AND_MUL, fld__cpu_silu_and_mul},
    {FLD_OP_MUL_AND_SILU, fld__cpu_mul_and_silu},
    {FLD_OP_GELU_AND_MUL, fld__cpu_gelu_and_mul},
    {FLD_OP_GELU_TANH_AND_MUL, fld__cpu_gelu_tanh_and_mul},
    {FLD_OP_RMS_NORM, fld__cpu_rms_norm},
    {FLD_OP_GEMMA_RMS_NORM, fld__cpu_gemma_rms_norm},
    {FLD_OP_ROTARY_EMBEDDING, fld__cpu_rotary_embedding},
};

static int register_builtins(fld_registry *reg)
{
    for (size_t i = 0; i < sizeof cpu_kernels / sizeof cpu_kernels[0]; i++) {
        const fld_impl impl = {
            .op = cpu_kernels[i].op,
            .impl_id = "vendor.cpu",
            .kind = FLD_KIND_VENDOR,
            .vendor = "cpu",
            .priority = FLD_PRIORITY_VENDOR,
            .devices = FLD_DEVICE_MASK_CPU,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = cpu_kernels[i].fn,
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("cpu", FLD_VERSION_STRING, register_builtins)
