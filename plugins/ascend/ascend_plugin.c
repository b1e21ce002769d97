/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fld-ascend.so: Huawei Ascend NPUs through CANN's aclnn operators.
 *
 * vendor.ascend maps ops onto fused aclnn operators where they fit (ops.c);
 * reference.ascend composes every compute op from simple aclnn operators on
 * strided views and serves what vendor.ascend declines (ops_reference.c).
 *
 * Builds without the CANN SDK (acl_api.h declares what it uses) and loads
 * the runtime with dlopen() at registration (runtime.c). Without CANN, or
 * without a device, the plugin still loads and registers; its
 * implementations and device hooks report why they cannot run, which
 * `fldispatch list` shows as "unavailable: <reason>". What has run where:
 * docs/ascend-plugin.md.
 */
#include "ascend.h"

static const struct {
    const char *op;
    fld_kernel_fn fn;
    fld_supports_fn supports;
} kernels[] = {
    {FLD_OP_RMS_NORM, fld__ascend_rms_norm, fld__ascend_rms_norm_supports},
    {FLD_OP_SILU_AND_MUL, fld__ascend_silu_and_mul, fld__ascend_silu_and_mul_supports},
    {FLD_OP_ROTARY_EMBEDDING, fld__ascend_rotary_embedding, fld__ascend_rotary_supports},
    {FLD_OP_GEMMA_RMS_NORM, fld__ascend_gemma_rms_norm, fld__ascend_gemma_rms_norm_supports},
    {FLD_OP_ATTENTION_BACKEND, fld__ascend_attention_backend, NULL},
};

/* reference.ascend: any layout the host accepts (ops_reference.c). */
static const struct {
    const char *op;
    fld_kernel_fn fn;
} references[] = {
    {FLD_OP_SILU_AND_MUL, fld__ascend_ref_silu_and_mul},
    {FLD_OP_MUL_AND_SILU, fld__ascend_ref_mul_and_silu},
    {FLD_OP_GELU_AND_MUL, fld__ascend_ref_gelu_and_mul},
    {FLD_OP_GELU_TANH_AND_MUL, fld__ascend_ref_gelu_tanh_and_mul},
    {FLD_OP_RMS_NORM, fld__ascend_ref_rms_norm},
    {FLD_OP_GEMMA_RMS_NORM, fld__ascend_ref_gemma_rms_norm},
    {FLD_OP_ROTARY_EMBEDDING, fld__ascend_ref_rotary_embedding},
};

static int register_builtins(fld_registry *reg)
{
    bool ok = fld__ascend_load();
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++) {
        const fld_impl impl = {
            .op = kernels[i].op,
            .impl_id = "vendor.ascend",
            .kind = FLD_KIND_VENDOR,
            .vendor = "ascend",
            .priority = FLD_PRIORITY_VENDOR,
            .devices = FLD_DEVICE_MASK_ASCEND,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = kernels[i].fn,
            .is_available = fld__ascend_available,
            .supports = kernels[i].supports,
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    for (size_t i = 0; i < sizeof references / sizeof references[0]; i++) {
        const fld_impl impl = {
            .op = references[i].op,
            .impl_id = "reference.ascend",
            .kind = FLD_KIND_REFERENCE,
            .priority = FLD_PRIORITY_REFERENCE,
            .devices = FLD_DEVICE_MASK_ASCEND,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = references[i].fn,
            .is_available = fld__ascend_available,
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    const fld_device_hooks hooks = {
        .struct_size = sizeof(fld_device_hooks),
        .device_type = FLD_DEVICE_ASCEND,
        .is_available = fld__ascend_available,
        .alloc = fld__ascend_hook_alloc,
        .free = fld__ascend_hook_free,
        .copy = fld__ascend_hook_copy,
        .synchronize = fld__ascend_hook_synchronize,
    };
    int rc = fld_registry_set_device_hooks(reg, &hooks);
    if (rc != FLD_OK)
        return rc;
    if (ok)
        return fld_registry_set_detail(reg,
                                       "CANN at %s; devices are probed on first use (loading "
                                       "does not initialise the runtime)",
                                       fld__ascend_home());
    /* The reason is shown beside it; say where CANN was looked for. */
    return fld_registry_set_detail(reg, "CANN looked for at %s", fld__ascend_home());
}

/* Runs when the host unloads the plugin (fld_shutdown) and at exit. */
__attribute__((destructor)) static void ascend_unload(void)
{
    fld__ascend_unload();
}

FLD_PLUGIN_DEFINE("ascend", FLD_VERSION_STRING, register_builtins)
