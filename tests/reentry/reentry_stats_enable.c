/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_stats_enable() (the application's). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    int rc = fld_stats_enable(FLD_STATS_TIME);
    reentry_note("reentry_stats_enable", "fld_stats_enable", rc);
    return reentry_register(reg, "vendor.reentry_stats_enable", "reentry_stats_enable", NULL);
}

FLD_PLUGIN_DEFINE("reentry_stats_enable", "1.0.0", register_builtins)
