/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_log_set_level() (the application's). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    int rc = fld_log_set_level(FLD_LOG_OFF);
    reentry_note("reentry_log_level", "fld_log_set_level", rc);
    return reentry_register(reg, "vendor.reentry_log_level", "reentry_log_level", NULL);
}

FLD_PLUGIN_DEFINE("reentry_log_level", "1.0.0", register_builtins)
