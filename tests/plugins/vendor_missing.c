/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a VENDOR implementation without a vendor name, next to a valid
 * one. It ignores the failed registration and returns success; the host must
 * reject the plugin and keep nothing (the kernel aborts).
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int discarded_kernel(const void *args)
{
    (void)args;
    fprintf(stderr, "vendor_missing fixture: a discarded implementation was called\n");
    abort();
}

static int register_builtins(fld_registry *reg)
{
    fld_impl impl = {
        .op = FLD_OP_RMS_NORM,
        .impl_id = "vendor.vendor_missing",
        .kind = FLD_KIND_VENDOR,
        .vendor = "vendor_missing",
        .priority = FLD_PRIORITY_VENDOR + 10,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = discarded_kernel,
    };
    (void)fld_registry_register(reg, &impl);
    impl.op = FLD_OP_SILU_AND_MUL;
    impl.vendor = NULL;
    (void)fld_registry_register(reg, &impl);
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("vendor_missing", "1.0.0", register_builtins)
