/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: register_builtins registers one implementation, then returns an
 * error status without fld_set_error(). The host must still say which
 * plugin failed, with what status, and that it gave no message (not an
 * empty detail, nor a message left over from an earlier call).
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int discarded_kernel(const void *args)
{
    (void)args;
    fprintf(stderr, "register_silent fixture: a discarded implementation was called\n");
    abort();
}

static int register_builtins(fld_registry *reg)
{
    fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.register_silent",
        .kind = FLD_KIND_VENDOR,
        .vendor = "register_silent",
        .priority = FLD_PRIORITY_VENDOR + 10,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = discarded_kernel,
    };
    if (fld_registry_register(reg, &impl) != FLD_OK)
        return FLD_EPLUGIN;
    return FLD_EIMPL;
}

FLD_PLUGIN_DEFINE("register_silent", "1.0.0", register_builtins)
