/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: register_builtins calls fld_load_plugin() on its own file, the
 * worst case (a nested load of the plugin being loaded).
 */
#include <dlfcn.h>

#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    Dl_info info;
    const char *self = dladdr((void *)register_builtins, &info) && info.dli_fname
                           ? info.dli_fname
                           : "/nonexistent/fld-reentry_load_plugin.so";
    reentry_note("reentry_load_plugin", "fld_load_plugin", fld_load_plugin(self));
    return reentry_register(reg, "vendor.reentry_load_plugin", "reentry_load_plugin", NULL);
}

FLD_PLUGIN_DEFINE("reentry_load_plugin", "1.0.0", register_builtins)
