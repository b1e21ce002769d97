/* SPDX-License-Identifier: Apache-2.0 */
/* Fixture: register_builtins calls exit(3), which would end the host. */
#include <stdlib.h>

#include <fldispatch/plugin.h>

#include "count.h"

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    crash_fixture_count("exit");
    exit(3);
}

FLD_PLUGIN_DEFINE("exit", "1.0.0", register_builtins)
