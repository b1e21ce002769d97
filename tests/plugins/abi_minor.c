/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a descriptor built against a newer ABI minor than the host's. The
 * host must reject it before calling anything: register_builtins aborts.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

static int register_builtins(fld_registry *reg)
{
    (void)reg;
    fprintf(stderr, "abi_minor fixture: register_builtins of an ABI %d.%d plugin was called\n",
            FLD_PLUGIN_ABI_MAJOR, FLD_PLUGIN_ABI_MINOR + 5);
    abort();
}

__attribute__((visibility("default"))) const fld_plugin_descriptor fld_plugin_entry = {
    .magic = FLD_PLUGIN_MAGIC,
    .abi_major = FLD_PLUGIN_ABI_MAJOR,
    .abi_minor = FLD_PLUGIN_ABI_MINOR + 5,
    .struct_size = sizeof(fld_plugin_descriptor),
    .flags = 0,
    .name = "abi_minor",
    .version = "1.0.0",
    .host_version = FLD_VERSION_STRING,
    .register_builtins = register_builtins,
};
