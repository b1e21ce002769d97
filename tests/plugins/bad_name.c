/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a plugin whose name is not of the form [a-z0-9_-]+. The name is
 * checked before register_builtins runs, which aborts.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    fprintf(stderr, "bad_name fixture: register_builtins of plugin 'Bad Name!' was called\n");
    abort();
}

FLD_PLUGIN_DEFINE("Bad Name!", "1.0.0", register_builtins)
