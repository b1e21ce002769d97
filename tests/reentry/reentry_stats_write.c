/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_stats_write() (the application's). */
#include "reentry.h"

/* $FLD_REENTRY_LOG.stats.json: a file the test checks was not written. */
static const char *stats_path(void)
{
    static char path[4096];
    const char *log = getenv("FLD_REENTRY_LOG");
    snprintf(path, sizeof path, "%s.stats.json", log && *log ? log : "/tmp/fld-reentry");
    return path;
}

static int register_builtins(fld_registry *reg)
{
    int rc = fld_stats_write(stats_path());
    reentry_note("reentry_stats_write", "fld_stats_write", rc);
    return reentry_register(reg, "vendor.reentry_stats_write", "reentry_stats_write", NULL);
}

FLD_PLUGIN_DEFINE("reentry_stats_write", "1.0.0", register_builtins)
