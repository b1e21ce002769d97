/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: register_builtins registers two valid implementations, then
 * fails. Registration is all-or-nothing, so neither may stay; their kernels
 * abort so a host that kept and ran one crashes the test.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int discarded_kernel(const void *args)
{
    (void)args;
    fprintf(stderr, "register_fails fixture: a discarded implementation was called\n");
    abort();
}

static int register_builtins(fld_registry *reg)
{
    fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.register_fails",
        .kind = FLD_KIND_VENDOR,
        .vendor = "register_fails",
        .priority = FLD_PRIORITY_VENDOR + 10,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = discarded_kernel,
    };
    if (fld_registry_register(reg, &impl) != FLD_OK)
        return FLD_EPLUGIN;
    impl.op = FLD_OP_RMS_NORM;
    if (fld_registry_register(reg, &impl) != FLD_OK)
        return FLD_EPLUGIN;
    if (fld_registry_set_detail(reg, "never shown") != FLD_OK)
        return FLD_EPLUGIN;
    fld_set_error("register_fails fixture: giving up after two registrations");
    return FLD_EINVAL;
}

FLD_PLUGIN_DEFINE("register_fails", "1.0.0", register_builtins)
