/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a plugin whose every implementation says it cannot run here
 * (as a GPU plugin does on a machine without the device). It loads, but
 * reports status UNAVAILABLE, and selection drops its impls with
 * "unavailable: <reason>". The kernels abort: they must never run.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

#define UNAVAILABLE_REASON "unavailable fixture: no such device"

static bool never_available(const char **reason)
{
    *reason = UNAVAILABLE_REASON;
    return false;
}

static int unavailable_kernel(const void *args)
{
    (void)args;
    fprintf(stderr, "unavailable fixture: an unavailable implementation was called\n");
    abort();
}

static int register_builtins(fld_registry *reg)
{
    fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.unavailable",
        .kind = FLD_KIND_VENDOR,
        .vendor = "unavailable",
        .priority = FLD_PRIORITY_VENDOR + 10,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_ALL,
        .fn = unavailable_kernel,
        .is_available = never_available,
    };
    int rc = fld_registry_register(reg, &impl);
    if (rc != FLD_OK)
        return rc;
    impl.op = FLD_OP_RMS_NORM;
    return fld_registry_register(reg, &impl);
}

FLD_PLUGIN_DEFINE("unavailable", "1.0.0", register_builtins)
