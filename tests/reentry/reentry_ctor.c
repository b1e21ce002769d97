/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: a static constructor calls fld_init() while the host dlopens the plugin. */
#include "reentry.h"

__attribute__((constructor)) static void at_load(void)
{
    reentry_note("reentry_ctor", "fld_init", fld_init());
}

static int register_builtins(fld_registry *reg)
{
    return reentry_register(reg, "vendor.reentry_ctor", "reentry_ctor", NULL);
}

FLD_PLUGIN_DEFINE("reentry_ctor", "1.0.0", register_builtins)
