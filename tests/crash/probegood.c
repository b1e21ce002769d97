/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a well-behaved plugin for the crash tests. It registers two
 * implementations, one available and one that is not (with a reason), and
 * device hooks for CUDA that say the device is absent; it counts its loads
 * (count.h).
 */
#include <fldispatch/plugin.h>

#include "count.h"

#define NO_DEVICE "probegood fixture: no such device"

static bool never(const char **reason)
{
    *reason = NO_DEVICE;
    return false;
}

static int register_builtins(fld_registry *reg)
{
    crash_fixture_count("probegood");
    fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.probegood",
        .kind = FLD_KIND_VENDOR,
        .vendor = "probegood",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = crash_fixture_kernel,
    };
    int rc = fld_registry_register(reg, &impl);
    if (rc != FLD_OK)
        return rc;
    impl.op = FLD_OP_RMS_NORM;
    impl.is_available = never;
    rc = fld_registry_register(reg, &impl);
    if (rc != FLD_OK)
        return rc;
    const fld_device_hooks hooks = {
        .struct_size = sizeof hooks,
        .device_type = FLD_DEVICE_CUDA,
        .is_available = never,
    };
    rc = fld_registry_set_device_hooks(reg, &hooks);
    if (rc != FLD_OK)
        return rc;
    return fld_registry_set_detail(reg, "probe fixture");
}

FLD_PLUGIN_DEFINE("probegood", "1.0.0", register_builtins)
