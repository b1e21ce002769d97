/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_reload(). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    reentry_note("reentry_reload", "fld_reload", fld_reload());
    return reentry_register(reg, "vendor.reentry_reload", "reentry_reload", NULL);
}

FLD_PLUGIN_DEFINE("reentry_reload", "1.0.0", register_builtins)
