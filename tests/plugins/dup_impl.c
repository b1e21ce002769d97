/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: registers the same impl_id twice for one op. It ignores the
 * failed registration and returns success: the host must still reject the
 * whole plugin, keeping not even the first record (whose kernel aborts).
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int discarded_kernel(const void *args)
{
    (void)args;
    fprintf(stderr, "dup_impl fixture: a discarded implementation was called\n");
    abort();
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.dup_impl",
        .kind = FLD_KIND_VENDOR,
        .vendor = "dup_impl",
        .priority = FLD_PRIORITY_VENDOR + 10,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = discarded_kernel,
    };
    (void)fld_registry_register(reg, &impl);
    (void)fld_registry_register(reg, &impl);
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("dup_impl", "1.0.0", register_builtins)
