/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a descriptor from a future, incompatible ABI major. The host must
 * reject it from the descriptor alone: register_builtins aborts the process,
 * so a host that calls it crashes the test.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    fprintf(stderr, "abi_major fixture: register_builtins of an ABI %d plugin was called\n",
            FLD_PLUGIN_ABI_MAJOR + 1);
    abort();
}

__attribute__((visibility("default"))) const fld_plugin_descriptor fld_plugin_entry = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = FLD_PLUGIN_ABI_MAJOR + 1,
    .abi_minor = FLD_PLUGIN_ABI_MINOR,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = 0,
    .name = "abi_major",
    .version = "1.0.0",
    .host_version = FLD_VERSION_STRING,
    .register_builtins = register_builtins,
};
