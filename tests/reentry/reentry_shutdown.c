/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_shutdown(). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    reentry_note("reentry_shutdown", "fld_shutdown", fld_shutdown());
    return reentry_register(reg, "vendor.reentry_shutdown", "reentry_shutdown", NULL);
}

FLD_PLUGIN_DEFINE("reentry_shutdown", "1.0.0", register_builtins)
