/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: the implementation's is_available() calls fld_resolve() for its
 * own op (which would evaluate this check again, recursively). The plugin
 * loads; the implementation counts as unavailable.
 */
#include "reentry.h"

static bool available(const char **why)
{
    const char *id = NULL;
    int rc = fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id);
    reentry_note("reentry_available", "fld_resolve", rc);
    (void)why;
    return true;
}

static int register_builtins(fld_registry *reg)
{
    return reentry_register(reg, "vendor.reentry_available", "reentry_available", available);
}

FLD_PLUGIN_DEFINE("reentry_available", "1.0.0", register_builtins)
