/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls abort() (SIGABRT). */
#include <stdlib.h>

#include <fldispatch/plugin.h>

#include "count.h"

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    crash_fixture_count("abort");
    abort();
}

FLD_PLUGIN_DEFINE("abort", "1.0.0", register_builtins)
