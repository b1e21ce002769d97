/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins writes through a wild pointer (SIGSEGV). */
#include <fldispatch/plugin.h>

#include "count.h"

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    crash_fixture_count("segv");
    *(volatile int *)crash_fixture_wild = 1;
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("segv", "1.0.0", register_builtins)
