/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: one plugin with many implementations of one op, silu_and_mul:
 * $FLD_FIXTURE_MANY_IMPLS of them (default 20000), "vendor.many_<n>",
 * registered in descending impl_id order (the worst order for a list kept
 * sorted by insertion). Each kernel declines, so a call falls through to
 * the reference. Registration and loading must stay near-linear in the
 * count.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int declining_kernel(const void *args)
{
    (void)args;
    return FLD_EUNSUPPORTED;
}

static int register_builtins(fld_registry *reg)
{
    const char *env = getenv("FLD_FIXTURE_MANY_IMPLS");
    long count = env && *env ? strtol(env, NULL, 10) : 20000;
    for (long i = count - 1; i >= 0; i--) {
        char id[64];
        snprintf(id, sizeof id, "vendor.many_%06ld", i);
        const fld_impl impl = {
            .op = FLD_OP_SILU_AND_MUL,
            .impl_id = id,
            .kind = FLD_KIND_VENDOR,
            .vendor = "many",
            .priority = FLD_PRIORITY_VENDOR,
            .devices = FLD_DEVICE_MASK_CPU,
            .dtypes = FLD_DTYPE_MASK_ALL,
            .fn = declining_kernel,
        };
        int rc = fld_registry_register(reg, &impl);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("many_impls", "1.0.0", register_builtins)
