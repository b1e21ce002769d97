/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_resolve(). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    const char *id = NULL;
    reentry_note("reentry_resolve", "fld_resolve",
                 fld_resolve(FLD_OP_RMS_NORM, FLD_DEVICE_CPU, FLD_DTYPE_F32, &id));
    return reentry_register(reg, "vendor.reentry_resolve", "reentry_resolve", NULL);
}

FLD_PLUGIN_DEFINE("reentry_resolve", "1.0.0", register_builtins)
