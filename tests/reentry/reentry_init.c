/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_init() (during the host's first fld_init()). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    reentry_note("reentry_init", "fld_init", fld_init());
    return reentry_register(reg, "vendor.reentry_init", "reentry_init", NULL);
}

FLD_PLUGIN_DEFINE("reentry_init", "1.0.0", register_builtins)
