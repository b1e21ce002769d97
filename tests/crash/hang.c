/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: register_builtins never returns. It first forks a grandchild that
 * sleeps as well, holding the report pipe open, so only killing the probe's
 * whole process group ends it.
 */
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "count.h"

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    crash_fixture_count("hang");
    if (fork() == 0)
        crash_fixture_count("hang-grandchild");
    for (;;)
        sleep(1);
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("hang", "1.0.0", register_builtins)
