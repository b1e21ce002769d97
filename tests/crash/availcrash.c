/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: registers cleanly, then its implementation's is_available()
 * dereferences a wild pointer (SIGSEGV during the availability checks).
 */
#include <fldispatch/plugin.h>

#include "count.h"

static bool crashing_available(const char **reason)
{
    (void)reason;
    return *(volatile int *)crash_fixture_wild != 0;
}

static int register_builtins(fld_registry *reg)
{
    crash_fixture_count("availcrash");
    const fld_impl impl = {
        .op = FLD_OP_SILU_AND_MUL,
        .impl_id = "vendor.availcrash",
        .kind = FLD_KIND_VENDOR,
        .vendor = "availcrash",
        .priority = FLD_PRIORITY_VENDOR,
        .devices = FLD_DEVICE_MASK_CPU,
        .dtypes = FLD_DTYPE_MASK_F32,
        .fn = crash_fixture_kernel,
        .is_available = crashing_available,
    };
    return fld_registry_register(reg, &impl);
}

FLD_PLUGIN_DEFINE("availcrash", "1.0.0", register_builtins)
