/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: register_builtins logs a WARNING with fld_log() (which plugins
 * may do) and registers its implementation. A log callback of the
 * application that calls back into the library from that line is the
 * application's fault: the plugin must load.
 */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    fld_log(FLD_LOG_WARNING, "reentry_logs: registering one implementation");
    return reentry_register(reg, "vendor.reentry_logs", "reentry_logs", NULL);
}

FLD_PLUGIN_DEFINE("reentry_logs", "1.0.0", register_builtins)
