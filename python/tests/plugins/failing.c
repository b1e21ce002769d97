/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture plugin of the Python tests: "failing" registers an implementation
 * of silu_and_mul on CPU float32 that always fails (FLD_EIMPL) without
 * writing anything, at the lowest priority, so that it runs only where a
 * per-op order names it (vendor:failing). The tests watch the failure
 * memory of non-strict fallback with it. Loaded with
 * fldispatch.load_plugin(), in a child process.
 */
#include <fldispatch/plugin.h>

static int always_fail(const void *args)
{
    (void)args;
    return FLD_EIMPL;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.failing",
        .kind = FLD_KIND_VENDOR,
        .vendor = "failing",
        .priority = 1,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = always_fail,
    };
    return fld_registry_register(reg, &impl);
}

FLD_PLUGIN_DEFINE("failing", "1.0.0", register_builtins)
