/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_set_stream() (the application's). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    int rc = fld_set_stream(FLD_DEVICE_CUDA, (void *)0x1234);
    reentry_note("reentry_set_stream", "fld_set_stream", rc);
    return reentry_register(reg, "vendor.reentry_set_stream", "reentry_set_stream", NULL);
}

FLD_PLUGIN_DEFINE("reentry_set_stream", "1.0.0", register_builtins)
