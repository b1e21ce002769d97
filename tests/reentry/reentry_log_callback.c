/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_log_set_callback() (the application's). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    int rc = fld_log_set_callback(NULL, NULL);
    reentry_note("reentry_log_callback", "fld_log_set_callback", rc);
    return reentry_register(reg, "vendor.reentry_log_callback", "reentry_log_callback", NULL);
}

FLD_PLUGIN_DEFINE("reentry_log_callback", "1.0.0", register_builtins)
