/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a static constructor that crashes (SIGBUS by raise(), so that the
 * test can tell it from the other crashers) as soon as dlopen maps the file,
 * before the host can look at its descriptor.
 */
#include <signal.h>

#include <fldispatch/plugin.h>

#include "count.h"

__attribute__((constructor)) static void crash_at_load(void)
{
    crash_fixture_count("ctorcrash");
    raise(SIGBUS);
}

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    return FLD_OK;
}

FLD_PLUGIN_DEFINE("ctorcrash", "1.0.0", register_builtins)
