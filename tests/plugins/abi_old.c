/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a plugin built for ABI 1.0, before device hooks existed (its
 * descriptor says minor 0, as an old binary's would). A 1.1 host must load
 * it: minor bumps only add.
 */
#include <fldispatch/plugin.h>

static int old_kernel(const void *args)
{
    (void)args;
    return FLD_OK;
}

static int register_builtins(fld_registry *reg)
{
    const fld_impl impl = {
        .op = "t_abi_old",
        .impl_id = "vendor.abi_old",
        .kind = FLD_KIND_VENDOR,
        .vendor = "abi_old",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = old_kernel,
    };
    return fld_registry_register(reg, &impl);
}

__attribute__((visibility("default"))) const fld_plugin_descriptor fld_plugin_entry = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = 1,
    .abi_minor = 0,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = 0,
    .name = "abi_old",
    .version = "0.9.0",
    .host_version = "0.1.0",
    .register_builtins = register_builtins,
};
