/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls fld_stats_record() (the application's). */
#include "reentry.h"

static int register_builtins(fld_registry *reg)
{
    int rc = fld_stats_record(FLD_OP_RMS_NORM, "vendor.reentry_stats_record", FLD_DEVICE_CPU,
                                      FLD_DTYPE_F32, FLD_OK, 0, 0);
    reentry_note("reentry_stats_record", "fld_stats_record", rc);
    return reentry_register(reg, "vendor.reentry_stats_record", "reentry_stats_record", NULL);
}

FLD_PLUGIN_DEFINE("reentry_stats_record", "1.0.0", register_builtins)
